/* test_trainer.c: the parallel trainer end to end on the in-process backend (one thread per
 * rank): every dp x tp x pp layout and schedule trains the same model as one process (losses
 * of 20 steps within relative 1e-5, parameters after step 1 close), a restored checkpoint
 * continues exactly like the uninterrupted run, also in another layout, and the synthetic task
 * is learnt. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dataplane/trainer.h"

#define STEPS 20

static const char *schedule_name(enum jobspec_schedule s)
{
	return sched_kind_name(trainer_sched_kind(s));
}

static struct jobspec base_spec(void)
{
	struct jobspec s;
	memset(&s, 0, sizeof s);
	snprintf(s.name, sizeof s.name, "equivalence");
	s.model = (struct jobspec_model){
	    .d_in = 16, .d_model = 32, .d_ff = 64, .layers = 8, .classes = 4, .seed = 11};
	s.train.steps = STEPS;
	s.train.batch_size = 32;
	s.train.lr = 0.05;
	s.train.optimizer = JOBSPEC_SGD;
	s.train.momentum = 0.9;
	s.train.beta1 = 0.9;
	s.train.beta2 = 0.999;
	s.train.eps = 1e-8;
	s.train.weight_decay = 0.01;
	s.train.clip_norm = 2.5;  /* active in some steps, not all (checked) */
	s.train.bucket_mb = 0.01; /* several buckets per rank */
	snprintf(s.train.dataset, sizeof s.train.dataset, "synthetic");
	s.train.data_seed = 3;
	s.train.samples = 512;
	s.parallel = (struct jobspec_parallel){.dp = 1,
	                                       .tp = 1,
	                                       .pp = 1,
	                                       .schedule = JOBSPEC_1F1B,
	                                       .virtual_stages = 1,
	                                       .micro_batches = 4};
	s.debug.slow_rank = s.debug.hang_rank = s.debug.crash_rank = -1;
	return s;
}

/* The single-process run every layout is compared with. */
struct reference {
	double loss[STEPS], accuracy[STEPS], grad_norm[STEPS];
	struct model step1; /* parameters after step 1 (full tensors) */
};

struct run {
	const struct jobspec *spec;
	struct trainer_local_world *world;
	const struct reference *ref;
	const char *ckpt_dir;
	int save_at, restore, steps;
	int expect_failure; /* run_layout leaves the failure to the test */
	/* ask_step > 0: rank ask_rank asks for a checkpoint before that step; each rank's steps
	 * whose loss allreduce agreed on one, and the last of them */
	int ask_rank, ask_step;
	int agreed[16], agreed_at[16];
	double loss[STEPS], accuracy[STEPS], grad_norm[STEPS];
	pthread_mutex_t lock;
	double worst_param_diff;
	int record_ops; /* wrap rank 0's net to log the order of its operations in step 1 */
	char ops[4096]; /* 'T' TP allreduce, 'D' DP bucket started, 'W' wait, 'S' send, 'R' recv */
	int nops;
	char failure[4096]; /* every rank's error, one per line */
};

struct rank_arg {
	struct run *run;
	int rank;
};

static void record_failure(struct run *run, const char *msg)
{
	pthread_mutex_lock(&run->lock);
	size_t len = strlen(run->failure);
	snprintf(run->failure + len, sizeof run->failure - len, "%s\n", msg);
	pthread_mutex_unlock(&run->lock);
}

/* Largest difference of this rank's slices from the reference's full tensors, relative to the
 * largest reference magnitude of the tensor. */
static double param_diff(const struct trainer *t, const struct model *full)
{
	double worst = 0;
	for (int i = 0; i < t->model.nparams; i++) {
		const struct model_param *p = &t->model.params[i], *f = NULL;
		for (int j = 0; j < full->nparams; j++)
			if (full->params[j].tensor_id == p->tensor_id)
				f = &full->params[j];
		double scale = 1e-3;
		for (size_t e = 0; e < f->numel; e++)
			scale = fmax(scale, fabs(f->data[e]));
		for (int r = 0; r < p->rows; r++)
			for (int c = 0; c < p->cols; c++) {
				double want =
				    f->data[(size_t)(p->row0 + r) * f->cols + p->col0 + c];
				double got = p->data[(size_t)r * p->cols + c];
				worst = fmax(worst, fabs(got - want) / scale);
			}
	}
	return worst;
}

/* A trainer_net that logs each operation rank 0 makes, then forwards it. */
struct recording_net {
	struct trainer_net base;
	struct trainer_net *inner;
	struct run *run;
};

static void log_op(struct trainer_net *net, char op)
{
	struct run *run = ((struct recording_net *)net)->run;
	if (run->nops < (int)sizeof run->ops - 1)
		run->ops[run->nops++] = op;
}

#define INNER(net) (((struct recording_net *)(net))->inner)
static int rec_allreduce(struct trainer_net *net, enum trainer_group g, void *buf, size_t count,
                         enum yd_dtype dt)
{
	log_op(net, g == TRAINER_TP ? 'T' : 'A');
	return INNER(net)->ops->allreduce(INNER(net), g, buf, count, dt);
}
static int rec_iallreduce(struct trainer_net *net, enum trainer_group g, void *buf, size_t count,
                          enum yd_dtype dt, struct trainer_net_req **req)
{
	log_op(net, 'D');
	return INNER(net)->ops->iallreduce(INNER(net), g, buf, count, dt, req);
}
static int rec_isend(struct trainer_net *net, const float *buf, size_t count, int peer, int tag,
                     struct trainer_net_req **req)
{
	log_op(net, 'S');
	return INNER(net)->ops->isend(INNER(net), buf, count, peer, tag, req);
}
static int rec_recv(struct trainer_net *net, float *buf, size_t count, int peer, int tag)
{
	log_op(net, 'R');
	return INNER(net)->ops->recv(INNER(net), buf, count, peer, tag);
}
static int rec_wait(struct trainer_net *net, struct trainer_net_req *req)
{
	log_op(net, 'W');
	return INNER(net)->ops->wait(INNER(net), req);
}
static const char *rec_last_error(struct trainer_net *net)
{
	return INNER(net)->ops->last_error(INNER(net));
}
static void rec_destroy(struct trainer_net *net)
{
	INNER(net)->ops->destroy(INNER(net));
	free(net);
}
static const struct trainer_net_ops recording_ops = {
    rec_allreduce, rec_iallreduce, rec_isend, rec_recv, rec_wait, rec_last_error, rec_destroy,
};

static void *rank_main(void *arg)
{
	struct rank_arg *ra = arg;
	struct run *run = ra->run;
	struct trainer t;
	struct yard_err err = {0};
	struct trainer_net *net = trainer_local_net_new(run->world, ra->rank);
	if (run->record_ops && ra->rank == 0) {
		struct recording_net *rec = calloc(1, sizeof *rec);
		rec->base.ops = &recording_ops;
		rec->inner = net;
		rec->run = run;
		net = &rec->base;
	}
	char msg[600];
	if (trainer_init(&t, run->spec, ra->rank, NULL, net, &err) != 0) {
		snprintf(msg, sizeof msg, "rank %d init: %s", ra->rank, err.msg);
		record_failure(run, msg);
		net->ops->destroy(net);
		return NULL;
	}
	if (run->restore && trainer_restore(&t, run->ckpt_dir, &err) != 0) {
		snprintf(msg, sizeof msg, "rank %d restore (%s): %s", ra->rank,
		         yard_strerror(err.code), err.msg);
		record_failure(run, msg);
		goto out;
	}
	while (t.step < run->steps) {
		struct trainer_metrics m;
		if (run->ask_step > 0 && ra->rank == run->ask_rank && t.step + 1 == run->ask_step)
			t.checkpoint_wanted = 1;
		if (trainer_step(&t, &m, &err) != 0) {
			snprintf(msg, sizeof msg, "rank %d: %s", ra->rank, err.msg);
			record_failure(run, msg);
			goto out;
		}
		if (m.checkpoint_agreed) {
			run->agreed[ra->rank]++;
			run->agreed_at[ra->rank] = (int)m.step;
		}
		if (ra->rank == 0) {
			run->loss[m.step - 1] = m.loss;
			run->grad_norm[m.step - 1] = m.grad_norm;
			run->accuracy[m.step - 1] = m.accuracy;
		}
		if (m.step == 1)
			run->record_ops = 0; /* only step 1 is logged */
		if (m.step == 1 && run->ref) {
			double d = param_diff(&t, &run->ref->step1);
			pthread_mutex_lock(&run->lock);
			run->worst_param_diff = fmax(run->worst_param_diff, d);
			pthread_mutex_unlock(&run->lock);
		}
		if (run->ckpt_dir && m.step == run->save_at &&
		    trainer_save(&t, run->ckpt_dir, 2, &err) != 0) {
			snprintf(msg, sizeof msg, "rank %d save: %s", ra->rank, err.msg);
			record_failure(run, msg);
			goto out;
		}
	}
out:
	trainer_free(&t);
	net->ops->destroy(net);
	return NULL;
}

static void run_layout(struct run *run, const struct jobspec *spec)
{
	int world = spec->parallel.dp * spec->parallel.tp * spec->parallel.pp;
	run->spec = spec;
	run->world =
	    trainer_local_world_new(spec->parallel.dp, spec->parallel.tp, spec->parallel.pp, 20000);
	pthread_mutex_init(&run->lock, NULL);
	if (!run->steps)
		run->steps = STEPS;
	pthread_t threads[16];
	struct rank_arg args[16];
	for (int r = 0; r < world; r++) {
		args[r] = (struct rank_arg){.run = run, .rank = r};
		pthread_create(&threads[r], NULL, rank_main, &args[r]);
	}
	for (int r = 0; r < world; r++)
		pthread_join(threads[r], NULL);
	trainer_local_world_free(run->world);
	pthread_mutex_destroy(&run->lock);
	if (run->failure[0] && !run->expect_failure)
		fail_msg("dp %d tp %d pp %d %s: %s", spec->parallel.dp, spec->parallel.tp,
		         spec->parallel.pp, schedule_name(spec->parallel.schedule), run->failure);
}

static struct reference ref_sgd, ref_adamw;

static void reference_run(const struct jobspec *spec, struct reference *ref)
{
	struct run run = {0};
	run_layout(&run, spec);
	memcpy(ref->loss, run.loss, sizeof ref->loss);
	memcpy(ref->accuracy, run.accuracy, sizeof ref->accuracy);
	memcpy(ref->grad_norm, run.grad_norm, sizeof ref->grad_norm);
	/* parameters after one step, from a separate one-step run */
	struct trainer t;
	struct yard_err err = {0};
	struct trainer_local_world *w = trainer_local_world_new(1, 1, 1, 1000);
	struct trainer_net *net = trainer_local_net_new(w, 0);
	assert_int_equal(trainer_init(&t, spec, 0, NULL, net, &err), 0);
	assert_int_equal(trainer_step(&t, NULL, &err), 0);
	ref->step1 = t.model; /* take the model over */
	memset(&t.model, 0, sizeof t.model);
	trainer_free(&t);
	net->ops->destroy(net);
	trainer_local_world_free(w);
}

static int setup(void **state)
{
	struct jobspec spec = base_spec();
	reference_run(&spec, &ref_sgd);
	spec.train.optimizer = JOBSPEC_ADAMW;
	spec.train.lr = 0.003;
	reference_run(&spec, &ref_adamw);
	return 0;
}

static int teardown(void **state)
{
	model_free(&ref_sgd.step1);
	model_free(&ref_adamw.step1);
	return 0;
}

struct layout {
	int dp, tp, pp;
	enum jobspec_schedule schedule;
	int v, m;
};

static const struct layout layouts[] = {
    {1, 1, 1, JOBSPEC_1F1B, 1, 4},        {2, 1, 1, JOBSPEC_1F1B, 1, 4},
    {1, 2, 1, JOBSPEC_1F1B, 1, 4},        {1, 1, 2, JOBSPEC_1F1B, 1, 4},
    {1, 1, 4, JOBSPEC_GPIPE, 1, 4},       {1, 1, 4, JOBSPEC_1F1B, 1, 4},
    {1, 1, 4, JOBSPEC_INTERLEAVED, 2, 4}, {2, 2, 2, JOBSPEC_1F1B, 1, 4},
    {1, 1, 1, JOBSPEC_1F1B, 1, 1},        {1, 1, 2, JOBSPEC_GPIPE, 1, 8},
    {1, 4, 1, JOBSPEC_GPIPE, 1, 2},       {2, 1, 2, JOBSPEC_INTERLEAVED, 2, 2},
};

static void check_layouts(const struct reference *ref, enum jobspec_optimizer opt, double lr,
                          double param_tolerance)
{
	for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
		const struct layout *l = &layouts[i];
		struct jobspec spec = base_spec();
		spec.train.optimizer = opt;
		spec.train.lr = lr;
		spec.parallel.dp = l->dp;
		spec.parallel.tp = l->tp;
		spec.parallel.pp = l->pp;
		spec.parallel.schedule = l->schedule;
		spec.parallel.virtual_stages = l->v;
		spec.parallel.micro_batches = l->m;
		struct run run = {.ref = ref};
		run_layout(&run, &spec);
		double worst = 0;
		for (int s = 0; s < STEPS; s++) {
			double rel = fabs(run.loss[s] - ref->loss[s]) / fabs(ref->loss[s]);
			worst = fmax(worst, rel);
			if (rel > 1e-5)
				fail_msg(
				    "%s dp %d tp %d pp %d %s v %d m %d: step %d loss %.9g, single "
				    "process %.9g (relative %.2g)",
				    opt == JOBSPEC_ADAMW ? "adamw" : "sgd", l->dp, l->tp, l->pp,
				    schedule_name(l->schedule), l->v, l->m, s + 1, run.loss[s],
				    ref->loss[s], rel);
		}
		if (run.worst_param_diff > param_tolerance)
			fail_msg("dp %d tp %d pp %d %s: parameters after step 1 differ by %.2g "
			         "(relative to the tensor's scale)",
			         l->dp, l->tp, l->pp, schedule_name(l->schedule),
			         run.worst_param_diff);
		if (getenv("TEST_TRAINER_VERBOSE"))
			fprintf(
			    stderr, "%s %dx%dx%d %-11s v%d m%d: worst loss rel %.2g, params %.2g\n",
			    opt == JOBSPEC_ADAMW ? "adamw" : "sgd  ", l->dp, l->tp, l->pp,
			    schedule_name(l->schedule), l->v, l->m, worst, run.worst_param_diff);
	}
}

static void test_layouts_train_like_one_process_sgd(void **state)
{
	check_layouts(&ref_sgd, JOBSPEC_SGD, 0.05, 1e-5);
	/* the run actually trains (the loss goes down) and clipping was active in some steps */
	assert_true(ref_sgd.loss[STEPS - 1] < 0.9 * ref_sgd.loss[0]);
	int clipped = 0;
	for (int s = 0; s < STEPS; s++)
		clipped += ref_sgd.grad_norm[s] > base_spec().train.clip_norm;
	if (getenv("TEST_TRAINER_VERBOSE"))
		for (int s = 0; s < STEPS; s++)
			fprintf(stderr, "grad norm %d %.3f\n", s + 1, ref_sgd.grad_norm[s]);
	if (clipped == 0 || clipped == STEPS)
		fail_msg("clipping active in %d of %d steps; the test should exercise both",
		         clipped, STEPS);
}

static void test_layouts_train_like_one_process_adamw(void **state)
{
	/* AdamW's first step divides each gradient element by its own magnitude, so rounding
	 * noise in elements whose gradient is near zero moves them by up to ~lr; the parameters
	 * are compared at 1e-3 of the tensor's scale, the losses as tightly as for SGD. */
	check_layouts(&ref_adamw, JOBSPEC_ADAMW, 0.003, 1e-3);
	assert_true(ref_adamw.loss[STEPS - 1] < 0.9 * ref_adamw.loss[0]);
}

/* Buckets are started during backward: rank 0 of dp 2 x tp 2 starts its first gradient
 * allreduce before its backward's last TP allreduce, and waits for buckets only after it. */
static void test_gradient_buckets_overlap_backward(void **state)
{
	struct jobspec spec = base_spec();
	spec.parallel.dp = 2;
	spec.parallel.tp = 2;
	struct run run = {.record_ops = 1, .steps = 1};
	run_layout(&run, &spec);
	run.ops[run.nops] = '\0';
	const char *first_bucket = strchr(run.ops, 'D'), *last_tp = strrchr(run.ops, 'T');
	const char *first_wait = strchr(run.ops, 'W');
	assert_non_null(first_bucket);
	assert_non_null(last_tp);
	int buckets = 0;
	for (const char *c = run.ops; *c; c++)
		buckets += *c == 'D';
	if (buckets < 3 || first_bucket > last_tp || first_wait < last_tp)
		fail_msg(
		    "operations of rank 0 in step 1: %s (want several D before the last T, and "
		    "W only after it)",
		    run.ops);
}

static void test_checkpoint_restore_continues_exactly(void **state)
{
	struct jobspec spec = base_spec();
	spec.train.optimizer = JOBSPEC_ADAMW;
	spec.train.lr = 0.003;
	spec.parallel.dp = 2;
	spec.parallel.tp = 2;
	spec.parallel.pp = 2;
	char dir[] = "/tmp/test_trainer_ckptXXXXXX";
	assert_non_null(mkdtemp(dir));
	struct run whole = {0};
	run_layout(&whole, &spec);
	struct run first = {.ckpt_dir = dir, .save_at = 10, .steps = 10};
	run_layout(&first, &spec); /* every rank stops after writing step 10: the "kill" */
	struct run second = {.ckpt_dir = dir, .restore = 1};
	run_layout(&second, &spec);
	for (int s = 0; s < STEPS; s++) {
		if (s < 10) {
			assert_true(first.loss[s] == whole.loss[s]);
			assert_true(second.loss[s] == 0.0); /* those steps were not rerun */
		} else if (second.loss[s] != whole.loss[s]) {
			fail_msg("step %d after restore: loss %.9g, uninterrupted %.9g", s + 1,
			         second.loss[s], whole.loss[s]);
		}
	}
	/* a flipped byte in one shard stops the restore, naming the shard */
	char shard[256];
	snprintf(shard, sizeof shard, "%s/step-00000010/rank-00005.shard", dir);
	FILE *f = fopen(shard, "r+b");
	assert_non_null(f);
	fseek(f, 1000, SEEK_SET);
	int byte = fgetc(f);
	fseek(f, 1000, SEEK_SET);
	fputc(byte ^ 0x01, f);
	fclose(f);
	struct run corrupt = {.ckpt_dir = dir, .restore = 1};
	spec.parallel.dp = 2;
	corrupt.spec = &spec;
	corrupt.world = trainer_local_world_new(2, 2, 2, 2000);
	pthread_mutex_init(&corrupt.lock, NULL);
	corrupt.steps = STEPS;
	pthread_t threads[8];
	struct rank_arg args[8];
	for (int r = 0; r < 8; r++) {
		args[r] = (struct rank_arg){.run = &corrupt, .rank = r};
		pthread_create(&threads[r], NULL, rank_main, &args[r]);
	}
	for (int r = 0; r < 8; r++)
		pthread_join(threads[r], NULL);
	trainer_local_world_free(corrupt.world);
	assert_non_null(strstr(corrupt.failure, "rank-00005.shard: checksum mismatch"));
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* One rank asked for a checkpoint (a request from its agent): every rank learns it in the same
 * step's loss allreduce, once, and the losses stay those of a run nobody asked in. */
static void test_checkpoint_request_reaches_every_rank_at_one_step(void **state)
{
	struct jobspec spec = base_spec();
	spec.parallel.dp = 2;
	spec.parallel.tp = 2;
	spec.parallel.pp = 2;
	struct run whole = {0};
	run_layout(&whole, &spec);
	struct run asked = {.ask_rank = 6, .ask_step = 7}; /* dp 1, tp 1, stage 1 */
	run_layout(&asked, &spec);
	for (int r = 0; r < 8; r++) {
		assert_int_equal(asked.agreed[r], 1);
		assert_int_equal(asked.agreed_at[r], 7);
		assert_int_equal(whole.agreed[r], 0);
	}
	for (int s = 0; s < STEPS; s++)
		assert_true(asked.loss[s] == whole.loss[s]);
}

/* Steps from+1..STEPS of got against the uninterrupted run, each within a relative 1e-5 (what:
 * the restore, for a failure's message); returns the worst relative difference. */
static double losses_follow(const struct run *got, const struct run *whole, int from,
                            const char *what)
{
	double worst = 0;
	for (int s = from; s < STEPS; s++) {
		double rel = fabs(got->loss[s] - whole->loss[s]) / fabs(whole->loss[s]);
		worst = fmax(worst, rel);
		if (rel > 1e-5)
			fail_msg("step %d after %s: loss %.9g, uninterrupted %.9g (relative %.2g, "
			         "want <= 1e-5)",
			         s + 1, what, got->loss[s], whole->loss[s], rel);
	}
	return worst;
}

/* dp 2 x tp 2 x pp 2 with AdamW (returned): its uninterrupted run in *whole, and a run that
 * stops after checkpointing step 10 into dir (a mkdtemp template, filled in). */
static struct jobspec checkpointed_2x2x2(char *dir, struct run *whole)
{
	struct jobspec spec = base_spec();
	spec.train.optimizer = JOBSPEC_ADAMW;
	spec.train.lr = 0.003;
	spec.parallel.dp = 2;
	spec.parallel.tp = 2;
	spec.parallel.pp = 2;
	assert_non_null(mkdtemp(dir));
	run_layout(whole, &spec);
	struct run first = {.ckpt_dir = dir, .save_at = 10, .steps = 10};
	run_layout(&first, &spec);
	return spec;
}

/* A job that shrank its data-parallel degree (failure.allow_shrink_dp) restores the
 * checkpoint of its larger layout: rank r of dp 1 x tp 2 x pp 2 reads shard r of the dp 2
 * checkpoint and trains on like the uninterrupted dp 2 run (the same samples and global batch;
 * only the order of gradient sums differs); growing back, rank r of dp 2 reads shard r mod 4
 * of the dp 1 checkpoint. */
static void test_checkpoint_restores_into_a_smaller_dp(void **state)
{
	char dir[] = "/tmp/test_trainer_shrinkXXXXXX";
	struct run whole = {0};
	struct jobspec spec = checkpointed_2x2x2(dir, &whole);
	struct jobspec shrunk = spec;
	shrunk.parallel.dp = 1;
	struct run second = {.ckpt_dir = dir, .restore = 1};
	run_layout(&second, &shrunk);
	double worst = losses_follow(&second, &whole, 10, "restoring dp 2 into dp 1");
	print_message("restored into dp 1: worst relative loss difference %.3g\n", worst);
	/* and back: dp 1 checkpoints step 15, dp 2 restores it (rank r reads shard r mod 4) */
	struct run shrunk_saves = {.ckpt_dir = dir, .restore = 1, .save_at = 15, .steps = 15};
	run_layout(&shrunk_saves, &shrunk);
	struct run grown = {.ckpt_dir = dir, .restore = 1};
	run_layout(&grown, &spec);
	worst = losses_follow(&grown, &whole, 15, "restoring dp 1 into dp 2");
	assert_true(grown.loss[14] == 0.0); /* it resumed after step 15, not before */
	print_message("restored dp 1 into dp 2: worst relative loss difference %.3g\n", worst);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* A job planned again (another tp, pp, schedule, virtual stages or micro-batches) restores
 * the checkpoint of its old layout: each tensor is assembled from the slices of the old
 * replica 0's shards, and training goes on like the uninterrupted run (the same samples and
 * global batch; only the order of sums differs). A checkpoint of another model is refused
 * naming the field, and a missing shard of the old replica names the file. */
static void test_checkpoint_restores_into_another_layout(void **state)
{
	char dir[] = "/tmp/test_trainer_relayoutXXXXXX";
	struct run whole = {0};
	struct jobspec spec = checkpointed_2x2x2(dir, &whole);
	static const struct layout targets[] = {
	    {4, 1, 2, JOBSPEC_1F1B, 1, 4},        {1, 4, 1, JOBSPEC_GPIPE, 1, 2},
	    {1, 1, 4, JOBSPEC_INTERLEAVED, 2, 4}, {2, 1, 1, JOBSPEC_1F1B, 1, 8},
	    {1, 2, 4, JOBSPEC_GPIPE, 1, 4},       {1, 1, 1, JOBSPEC_1F1B, 1, 1},
	};
	for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
		const struct layout *l = &targets[i];
		struct jobspec other = spec;
		other.parallel.dp = l->dp;
		other.parallel.tp = l->tp;
		other.parallel.pp = l->pp;
		other.parallel.schedule = l->schedule;
		other.parallel.virtual_stages = l->v;
		other.parallel.micro_batches = l->m;
		struct run again = {.ckpt_dir = dir, .restore = 1};
		run_layout(&again, &other);
		char what[160];
		snprintf(what, sizeof what,
		         "restoring dp 2 x tp 2 x pp 2 into dp %d x tp %d x pp %d (%s, v %d, m %d)",
		         l->dp, l->tp, l->pp, schedule_name(l->schedule), l->v, l->m);
		double worst = losses_follow(&again, &whole, 10, what);
		assert_true(again.loss[9] == 0.0); /* it resumed after step 10 */
		print_message("restored into dp %d x tp %d x pp %d (%s, v %d, m %d): worst "
		              "relative loss difference %.3g\n",
		              l->dp, l->tp, l->pp, schedule_name(l->schedule), l->v, l->m, worst);
	}
	/* another model: refused, naming the field */
	struct jobspec bigger = spec;
	bigger.model.d_ff = 128;
	bigger.parallel.tp = 1;
	struct run refused = {.ckpt_dir = dir, .restore = 1, .expect_failure = 1};
	run_layout(&refused, &bigger);
	if (strstr(refused.failure, "shard is for model.d_ff 64, this run has 128") == NULL)
		fail_msg("restore into d_ff 128: want a model mismatch, got: %s", refused.failure);
	/* a shard of the old replica 0 missing: the relayout names it */
	char shard[256];
	snprintf(shard, sizeof shard, "%s/step-00000010/rank-00003.shard", dir);
	assert_int_equal(unlink(shard), 0);
	struct jobspec narrow = spec;
	narrow.parallel.tp = 1;
	struct run missing = {.ckpt_dir = dir, .restore = 1, .expect_failure = 1};
	run_layout(&missing, &narrow);
	if (strstr(missing.failure, "rank-00003.shard: cannot open checkpoint shard") == NULL)
		fail_msg("restore without shard 3: want it named, got: %s", missing.failure);
	/* and never reported as "no checkpoint", on which a worker would start over at step 0 */
	char notfound[128];
	snprintf(notfound, sizeof notfound, "(%s)", yard_strerror(YARD_ENOTFOUND));
	if (strstr(missing.failure, notfound) != NULL)
		fail_msg("restore without shard 3 reported as %s: %s", notfound, missing.failure);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* The example job (examples/train_synthetic.json) learns the synthetic task. It runs in one
 * process: the layout tests above show every layout computes the same. */
static void test_example_job_learns_the_synthetic_task(void **state)
{
	char path[4096];
	const char *srcdir = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
	snprintf(path, sizeof path, "%s/examples/train_synthetic.json", srcdir);
	struct jobspec spec;
	struct yard_err err = {0};
	if (jobspec_load_file(path, &spec, &err) != 0)
		fail_msg("%s: %s", path, err.msg);
	spec.parallel.dp = spec.parallel.tp = spec.parallel.pp = 1;
	char steps_default[32];
	snprintf(steps_default, sizeof steps_default, "%lld", (long long)spec.train.steps);
	int steps =
	    atoi(getenv("TEST_TRAINER_STEPS") ? getenv("TEST_TRAINER_STEPS") : steps_default);
	struct trainer t;
	struct trainer_local_world *w = trainer_local_world_new(1, 1, 1, 1000);
	struct trainer_net *net = trainer_local_net_new(w, 0);
	if (trainer_init(&t, &spec, 0, NULL, net, &err) != 0)
		fail_msg("%s", err.msg);
	double acc_window = 0;
	for (int s = 1; s <= steps; s++) {
		struct trainer_metrics m;
		assert_int_equal(trainer_step(&t, &m, &err), 0);
		if (s > steps - 20)
			acc_window += m.accuracy / 20;
		if (getenv("TEST_TRAINER_VERBOSE") && s % 50 == 0)
			fprintf(stderr, "step %d loss %.4f accuracy %.3f\n", s, m.loss, m.accuracy);
	}
	if (acc_window < 0.95)
		fail_msg("accuracy over the last 20 steps %.3f, want >= 0.95", acc_window);
	trainer_free(&t);
	net->ops->destroy(net);
	trainer_local_world_free(w);
	jobspec_free(&spec);
}

int main(void)
{
	alarm(240); /* the in-process backend has no deadline on collectives: never hang */
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_layouts_train_like_one_process_sgd),
	    cmocka_unit_test(test_layouts_train_like_one_process_adamw),
	    cmocka_unit_test(test_gradient_buckets_overlap_backward),
	    cmocka_unit_test(test_checkpoint_restore_continues_exactly),
	    cmocka_unit_test(test_checkpoint_request_reaches_every_rank_at_one_step),
	    cmocka_unit_test(test_checkpoint_restores_into_a_smaller_dp),
	    cmocka_unit_test(test_checkpoint_restores_into_another_layout),
	    cmocka_unit_test(test_example_job_learns_the_synthetic_task),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
