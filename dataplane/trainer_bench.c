/* trainer_bench.c: trainer-bench, measures one pipeline configuration of the trainer on the
 * in-process backend (one thread per stage) and prints one JSON line:
 *   trainer-bench --pp P --schedule gpipe|1f1b|interleaved [--v V] --m M [--block-ms MS]
 *                 [--block-ms MS] [--steps S]
 * Every block's forward takes MS more milliseconds and its backward 2 MS (sleeping), on a model
 * small enough that real compute is negligible, so stages have uniform known costs and overlap
 * in time as on separate devices even on a machine with fewer cores than stages: the measured
 * bubble is then the schedule's, not core contention's. Reports, per
 * stage, the idle fraction of the step (1 - compute / step time: the step ends when the last
 * stage finishes, so this is the pipeline bubble of the theory) next to the part of it spent
 * blocked in pipeline receives (the metric line's bubble_ms, which misses a stage's idle time
 * after its last instruction), and the peak activation bytes. Used by scripts/bench/training; not a
 * test. */
#include "config.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/trainer.h"

struct bench {
	struct jobspec spec;
	struct trainer_local_world *world;
	double block_ms; /* forward cost of one block; backward costs twice that */
	int steps;
	double bubble_fraction[64];  /* 1 - compute / step time */
	double blocked_fraction[64]; /* time blocked in pipeline receives / step time */
	size_t peak_bytes[64];
	char failure[512];
};

struct stage_arg {
	struct bench *b;
	int rank;
};

static void *stage_main(void *arg)
{
	struct stage_arg *sa = arg;
	struct bench *b = sa->b;
	struct trainer t;
	struct yard_err err = {0};
	struct trainer_net *net = trainer_local_net_new(b->world, sa->rank);
	if (trainer_init(&t, &b->spec, sa->rank, "bench", net, &err) != 0) {
		snprintf(b->failure, sizeof b->failure, "%s", err.msg);
		net->ops->destroy(net);
		return NULL;
	}
	t.block_forward_ms = b->block_ms;
	t.block_backward_ms = 2 * b->block_ms;
	double idle = 0, blocked = 0, total = 0;
	for (int s = 0; s <= b->steps; s++) {
		struct trainer_metrics m;
		if (trainer_step(&t, &m, &err) != 0) {
			snprintf(b->failure, sizeof b->failure, "%s", err.msg);
			break;
		}
		if (s == 0)
			continue; /* warm-up */
		idle += m.step_ms - m.compute_ms;
		blocked += m.bubble_ms;
		total += m.step_ms;
		b->peak_bytes[sa->rank] = m.peak_activation_bytes;
	}
	b->bubble_fraction[sa->rank] = total > 0 ? idle / total : 0;
	b->blocked_fraction[sa->rank] = total > 0 ? blocked / total : 0;
	trainer_free(&t);
	net->ops->destroy(net);
	return NULL;
}

int main(int argc, char **argv)
{
	trainer_blas_single_threaded(argv);
	struct bench b = {.block_ms = 1.0, .steps = 3};
	int pp = 4, v = 1, m = 8;
	const char *schedule = "1f1b";
	static const struct option options[] = {
	    {"pp", required_argument, NULL, 'p'},
	    {"v", required_argument, NULL, 'v'},
	    {"m", required_argument, NULL, 'm'},
	    {"schedule", required_argument, NULL, 's'},
	    {"block-ms", required_argument, NULL, 'k'},
	    {"steps", required_argument, NULL, 'n'},
	    {NULL, 0, NULL, 0},
	};
	int opt;
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'p':
			pp = atoi(optarg);
			break;
		case 'v':
			v = atoi(optarg);
			break;
		case 'm':
			m = atoi(optarg);
			break;
		case 's':
			schedule = optarg;
			break;
		case 'k':
			b.block_ms = atof(optarg);
			break;
		case 'n':
			b.steps = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: trainer-bench --pp P --schedule S [--v V] --m M "
			                "[--block-ms MS] [--steps N]\n");
			return 2;
		}
	}
	if (pp < 1 || pp > 64 || v < 1 || v > 4) {
		fprintf(stderr, "trainer-bench: --pp %d outside 1..64 or --v %d outside 1..4\n", pp,
		        v);
		return 2;
	}
	struct jobspec *s = &b.spec;
	snprintf(s->name, sizeof s->name, "bench");
	/* the same model for every schedule (v <= 4), blocks dominate the cost */
	s->model = (struct jobspec_model){
	    .d_in = 8, .d_model = 16, .d_ff = 32, .layers = 4 * pp, .classes = 4, .seed = 1};
	s->train = (struct jobspec_train){.steps = b.steps,
	                                  .batch_size = 4 * m,
	                                  .lr = 0.01,
	                                  .optimizer = JOBSPEC_SGD,
	                                  .momentum = 0.9,
	                                  .bucket_mb = 25,
	                                  .data_seed = 1,
	                                  .samples = 4096};
	snprintf(s->train.dataset, sizeof s->train.dataset, "synthetic");
	s->parallel = (struct jobspec_parallel){
	    .dp = 1, .tp = 1, .pp = pp, .virtual_stages = v, .micro_batches = m};
	s->parallel.schedule = strcmp(schedule, "gpipe") == 0         ? JOBSPEC_GPIPE
	                       : strcmp(schedule, "interleaved") == 0 ? JOBSPEC_INTERLEAVED
	                                                              : JOBSPEC_1F1B;
	s->debug.slow_rank = s->debug.hang_rank = s->debug.crash_rank = -1;
	b.world = trainer_local_world_new(1, 1, pp, 60000);
	pthread_t threads[64];
	struct stage_arg args[64];
	for (int r = 0; r < pp; r++) {
		args[r] = (struct stage_arg){.b = &b, .rank = r};
		pthread_create(&threads[r], NULL, stage_main, &args[r]);
	}
	for (int r = 0; r < pp; r++)
		pthread_join(threads[r], NULL);
	trainer_local_world_free(b.world);
	if (b.failure[0]) {
		fprintf(stderr, "trainer-bench: %s\n", b.failure);
		return 1;
	}
	double mean = 0;
	for (int r = 0; r < pp; r++)
		mean += b.bubble_fraction[r] / pp;
	printf("{\"schedule\":\"%s\",\"pp\":%d,\"v\":%d,\"m\":%d,\"bubble_fraction\":%.4f,"
	       "\"bubble_per_stage\":[",
	       schedule, pp, v, m, mean);
	for (int r = 0; r < pp; r++)
		printf("%s%.4f", r ? "," : "", b.bubble_fraction[r]);
	double blocked = 0;
	for (int r = 0; r < pp; r++)
		blocked += b.blocked_fraction[r] / pp;
	printf("],\"blocked_in_recv_fraction\":%.4f,\"peak_activation_bytes_stage0\":%zu}\n",
	       blocked, b.peak_bytes[0]);
	return 0;
}
