/* worker.c: yard-worker, one rank of the built-in trainer. Configuration comes from the
 * environment (the agent or yard-run sets it):
 *   YARD_RANK, YARD_WORLD_SIZE, YARD_PEERS or YARD_RENDEZVOUS_FILE  (yd_comm_init_env)
 *   YARD_JOB_SPEC      path of the job JSON (required)
 *   YARD_JOB_ID        job id written into checkpoints (default: the spec's name)
 *   YARD_CKPT_DIR      checkpoint directory (default: the spec's "dir:" store, else none)
 *   YARD_RESUME=1      restore the newest complete checkpoint before training
 *   YARD_STEPS         overrides train.steps
 *   YARD_AGENT_SOCK    unix datagram socket: every rank sends one JSON line per step
 *   YARD_METRICS_FILE  append every rank's lines to this file too (rank 0 also prints stdout)
 *   YARD_NODE          the node this rank runs on (debug.slow_node slows the ranks of that node)
 *   YARD_CHECKPOINT_REQUEST  a file whose number the agent raises to ask for a checkpoint now
 *                      (the controller does before a planned restart: checkpoint_requests)
 * `yard-worker --version` prints the build's version (common/buildinfo.h); `yard-worker
 * --self-test` trains a tiny one-rank model for a few steps and checks its losses, the check an
 * agent runs on a new worker build before its ranks use it (agent/workerup.c). A rank logs its
 * worker version when it starts, so a rank's log says which build ran it.
 * It honours the spec's debug hooks (slow_rank and slow_node stretch compute in trainer.c by
 * slow_factor; hang_rank stops
 * making progress at hang_at_step; crash_rank calls abort() at crash_at_step) and exits 1 with
 * a message naming the rank and the failed operation on any error, 2 on bad configuration. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/buildinfo.h"
#include "common/common.h"
#include "dataplane/probe.h"
#include "dataplane/trainer.h"
#include "dataplane/trainer_net.h"
#include "dataplane/yd.h"
#include "jobs/spec.h"

/* A whole number in [lo, hi] from the environment into *out (unset: fallback); 0, or -1 after
 * saying on stderr which variable holds what. */
static int env_int(const char *name, long long lo, long long hi, long long fallback, long long *out)
{
	const char *v = getenv(name);
	char *end;
	*out = fallback;
	if (v == NULL)
		return 0;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi) {
		fprintf(stderr, "yard-worker: %s=%s: want a whole number from %lld to %lld\n", name,
		        v, lo, hi);
		return -1;
	}
	*out = n;
	return 0;
}

/* The agent socket is best-effort: a missing or slow agent never stalls training. */
static int agent_socket_open(const char *path)
{
	if (!path || !*path)
		return -1;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof addr.sun_path) {
		log_warn("YARD_AGENT_SOCK %s: path too long; not reporting to the agent", path);
		return -1;
	}
	strcpy(addr.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		log_warn("YARD_AGENT_SOCK %s: %s; not reporting to the agent", path,
		         strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* The agent's checkpoint requests (YARD_CHECKPOINT_REQUEST): a file holding "REQUEST AFTER",
 * replaced (a rename) with a higher request number when the controller asks the ranks of this
 * generation for a checkpoint before it restarts them on purpose (a drain, a straggler's
 * replacement, growing back, `yardctl job checkpoint`): any complete checkpoint newer than
 * step AFTER answers it (an agent of an older build writes REQUEST alone). Looked at before
 * every step, one stat() while it stays the same file. */
struct checkpoint_requests {
	const char *path;
	struct stat last; /* as of the last read; st_ino 0: none read yet */
	long long seen;   /* the highest number read */
	int rank;
};

/* Whether this rank should ask for a checkpoint: the file holds a number above every one read
 * before, and the last checkpoint the ranks saved because one of them was asked (at step
 * asked_save, -1: none) is not newer than the request's AFTER. Ranks see a request at
 * different steps (each node's agent writes its own file when its heartbeat brings it, and
 * ranks of one node look at different moments), and the first to see it makes them all save
 * at one step; the others find that checkpoint newer than AFTER when they see it, instead of
 * asking for another. A periodic checkpoint (every_steps) does not answer a request: the
 * request wants the step the ranks are at, and one saved a while ago would cost the restart
 * the steps since. The file is the generation's own, so a request already there when the
 * rank starts (made while it was restoring) counts. */
static int checkpoint_requested(struct checkpoint_requests *q, int64_t asked_save)
{
	struct stat st;
	if (q->path == NULL || stat(q->path, &st) != 0)
		return 0;
	if (st.st_ino == q->last.st_ino && st.st_size == q->last.st_size &&
	    st.st_mtim.tv_sec == q->last.st_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == q->last.st_mtim.tv_nsec)
		return 0;
	q->last = st;
	FILE *f = fopen(q->path, "r");
	long long n = -1, after = LLONG_MAX;
	int got = f != NULL ? fscanf(f, "%lld %lld", &n, &after) : 0;
	if (got < 1)
		n = -1;
	if (got < 2)
		after = LLONG_MAX;
	if (f != NULL)
		fclose(f);
	if (n <= q->seen)
		return 0;
	q->seen = n;
	if (asked_save > after) {
		log_info(
		    "rank %d: checkpoint request %lld: answered by the checkpoint of step %lld, "
		    "newer than step %lld",
		    q->rank, n, (long long)asked_save, after);
		return 0;
	}
	return 1;
}

/* `yard-worker --probe [--devices N] [--budget-ms MS]`: the node measurements for the planner
 * (dataplane/probe.h) as one JSON line on stdout; exit 1 naming what could not be measured. */
static int probe_main(int argc, char **argv)
{
	int devices = 1, budget_ms = 1500;
	for (int i = 2; i < argc; i++) {
		int *target = strcmp(argv[i], "--devices") == 0     ? &devices
		              : strcmp(argv[i], "--budget-ms") == 0 ? &budget_ms
		                                                    : NULL;
		char *end = NULL;
		long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
		if (target == NULL || end == NULL || *end != '\0' || v < 1 || v > 60000) {
			fprintf(stderr,
			        "yard-worker --probe: bad argument '%s' (want --devices N, "
			        "--budget-ms MS)\n",
			        argv[i]);
			return 2;
		}
		*target = (int)v;
		i++;
	}
	struct probe_result r;
	struct yard_err err = {0};
	if (probe_run(devices, budget_ms, &r, &err) != 0) {
		fprintf(stderr, "yard-worker --probe: %s\n", err.msg);
		return 1;
	}
	json_t *o = probe_to_json(&r);
	char *text = json_dumps(o, JSON_COMPACT);
	printf("%s\n", text);
	free(text);
	json_decref(o);
	return 0;
}

#define SELFTEST_STEPS 5

/* `yard-worker --self-test [--node NAME]`: SELFTEST_STEPS steps of a small model on one rank
 * (the in-process backend), every loss finite and the last below the first; one line on stdout,
 * exit 0, or the reason on stderr and exit 1. */
static int selftest_main(int argc, char **argv)
{
	const char *node = NULL;
	char version[64];
	buildinfo_version(version, sizeof version);
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--node") == 0 && i + 1 < argc) {
			node = argv[++i];
			continue;
		}
		fprintf(stderr, "yard-worker --self-test: bad argument '%s' (want --node NAME)\n",
		        argv[i]);
		return 2;
	}
	if (buildinfo_fault(node) == BUILD_FAULT_SELF_TEST) {
		fprintf(stderr,
		        "yard-worker %s self-test: failing on purpose (a build marked with the "
		        "self-test fault)\n",
		        version);
		return 1;
	}
	static const char spec_text[] =
	    "{\"name\": \"self-test\", \"model\": {\"d_in\": 8, \"d_model\": 16, \"d_ff\": 32,"
	    " \"layers\": 2, \"classes\": 4, \"seed\": 1}, \"train\": {\"steps\": 5,"
	    " \"batch_size\": 16, \"lr\": 0.05, \"optimizer\": \"adamw\", \"dataset\":"
	    " \"synthetic\", \"data_seed\": 1, \"samples\": 64}}";
	struct yard_err err = {0};
	struct jobspec spec;
	json_t *j = json_loads(spec_text, 0, NULL);
	int rc = j != NULL ? jobspec_parse(j, &spec, &err) : YARD_EINTERNAL;
	json_decref(j);
	if (rc != 0) {
		fprintf(stderr, "yard-worker %s self-test: its model spec: %s\n", version, err.msg);
		return 1;
	}
	struct trainer_local_world *world = trainer_local_world_new(1, 1, 1, 10000);
	struct trainer_net *net = world ? trainer_local_net_new(world, 0) : NULL;
	struct trainer t;
	memset(&t, 0, sizeof t);
	double first = 0, last = 0;
	int status = 1;
	if (net == NULL) {
		fprintf(stderr, "yard-worker %s self-test: no memory for the trainer\n", version);
		goto out;
	}
	if ((rc = trainer_init(&t, &spec, 0, "self-test", net, &err)) != 0) {
		fprintf(stderr, "yard-worker %s self-test: %s\n", version, err.msg);
		goto out;
	}
	for (int s = 1; s <= SELFTEST_STEPS; s++) {
		struct trainer_metrics m;
		if ((rc = trainer_step(&t, &m, &err)) != 0) {
			fprintf(stderr, "yard-worker %s self-test: step %d: %s\n", version, s,
			        err.msg);
			goto out;
		}
		if (!(m.loss == m.loss) || m.loss > 1e30 || m.loss < 0) {
			fprintf(stderr,
			        "yard-worker %s self-test: step %d: loss %g is not finite\n",
			        version, s, m.loss);
			goto out;
		}
		if (s == 1)
			first = m.loss;
		last = m.loss;
	}
	if (!(last < first)) {
		fprintf(stderr,
		        "yard-worker %s self-test: the loss did not fall in %d steps (%.6f -> "
		        "%.6f)\n",
		        version, SELFTEST_STEPS, first, last);
		goto out;
	}
	printf("yard-worker %s self-test passed: %d steps of a 2-layer model, loss %.6f -> %.6f\n",
	       version, SELFTEST_STEPS, first, last);
	status = 0;
out:
	trainer_free(&t);
	if (net != NULL)
		net->ops->destroy(net);
	trainer_local_world_free(world);
	jobspec_free(&spec);
	return status;
}

int main(int argc, char **argv)
{
	trainer_blas_single_threaded(argv);
	if (argc >= 2 && strcmp(argv[1], "--probe") == 0)
		return probe_main(argc, argv);
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		char version[64];
		buildinfo_version(version, sizeof version);
		printf("%s\n", version);
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "--self-test") == 0)
		return selftest_main(argc, argv);
	/* YARD_STEPS: train.steps' range; abc was 0 steps, a rank that trained nothing and
	 * exited 0 */
	long long rank_ll, world_ll, steps_ll;
	if (env_int("YARD_RANK", 0, INT_MAX, -1, &rank_ll) != 0 ||
	    env_int("YARD_WORLD_SIZE", 1, INT_MAX, -1, &world_ll) != 0 ||
	    env_int("YARD_STEPS", 1, 1000000000, -1, &steps_ll) != 0)
		return 2;
	int rank = (int)rank_ll;
	char component[64];
	snprintf(component, sizeof component, "yard-worker[%d]", rank);
	yard_log_init(component);
	const char *spec_path = getenv("YARD_JOB_SPEC");
	if (rank < 0 || !spec_path) {
		fprintf(stderr, "yard-worker: YARD_RANK and YARD_JOB_SPEC must be set (one rank of "
		                "a job; use yard-run to start a whole job)\n");
		return 2;
	}
	struct jobspec spec;
	struct yard_err err = {0};
	char version[64];
	buildinfo_version(version, sizeof version);
	log_info("yard-worker %s: rank %d of %s", version, rank,
	         getenv("YARD_JOB_ID") ? getenv("YARD_JOB_ID") : spec_path);
	if (jobspec_load_file(spec_path, &spec, &err) != 0) {
		log_error("%s: %s", spec_path, err.msg);
		return 2;
	}
	if (spec.is_command) {
		log_error("%s: a command job; yard-worker runs only the built-in trainer",
		          spec_path);
		return 2;
	}
	int world = spec.parallel.dp * spec.parallel.tp * spec.parallel.pp;
	int world_env = (int)world_ll;
	if (world_env != world) {
		log_error("YARD_WORLD_SIZE %d, but the job's layout dp %d x tp %d x pp %d needs %d",
		          world_env, spec.parallel.dp, spec.parallel.tp, spec.parallel.pp, world);
		return 2;
	}
	const char *job_id = getenv("YARD_JOB_ID") ? getenv("YARD_JOB_ID") : spec.name;
	const char *ckpt_dir = getenv("YARD_CKPT_DIR");
	if ((!ckpt_dir || !*ckpt_dir) && strncmp(spec.checkpoint.store, "dir:", 4) == 0)
		ckpt_dir = spec.checkpoint.store + 4;
	int64_t steps = steps_ll > 0 ? steps_ll : spec.train.steps;
	/* With the controller store the directory is node-local and the agent uploads and then
	 * removes each shard; the controller keeps the newest checkpoint.keep, so nothing is
	 * pruned here (rank 0's pruning would delete other ranks' shards before their upload). */
	int keep_local =
	    strcmp(spec.checkpoint.store, "controller") == 0 ? 0 : spec.checkpoint.keep;

	char errbuf[512] = "";
	yd_comm *comm = NULL;
	/* Exact resume: a restarted job must sum its gradients in the order the first run did,
	 * and a measured choice of algorithm may differ between the two runs, so the trainer
	 * chooses by the built-in model unless YARD_CALIBRATE=1 asks for measurement. */
	setenv("YARD_CALIBRATE", "0", 0);
	int rc = yd_comm_init_env(&comm, errbuf, sizeof errbuf);
	if (rc) {
		log_error("rank %d: joining the job failed: %s", rank, errbuf);
		return 1;
	}
	struct trainer_net *net = NULL;
	struct trainer_net_layout lay = {
	    .dp = spec.parallel.dp, .tp = spec.parallel.tp, .pp = spec.parallel.pp, .rank = rank};
	struct trainer t;
	memset(&t, 0, sizeof t);
	int status = 1;
	if ((rc = trainer_net_yd_new(comm, &lay, &net, &err)) != 0) {
		log_error("rank %d: %s", rank, err.msg);
		goto out;
	}
	if ((rc = trainer_init(&t, &spec, rank, job_id, net, &err)) != 0) {
		log_error("rank %d: %s", rank, err.msg);
		goto out;
	}
	const char *node = getenv("YARD_NODE");
	if (spec.debug.slow_node[0] != '\0' && node != NULL &&
	    strcmp(spec.debug.slow_node, node) == 0 && spec.debug.slow_factor > 1.0) {
		t.slow_factor = spec.debug.slow_factor;
		log_warn("debug hook: slow_node %s: rank %d computes %.2fx slower", node, rank,
		         t.slow_factor);
	}
	if (getenv("YARD_RESUME") && strcmp(getenv("YARD_RESUME"), "1") == 0) {
		if (!ckpt_dir) {
			log_error("YARD_RESUME=1 but no checkpoint directory (YARD_CKPT_DIR or "
			          "checkpoint.store \"dir:...\")");
			goto out;
		}
		rc = trainer_restore(&t, ckpt_dir, &err);
		if (rc == YARD_ENOTFOUND)
			log_info("%s", err.msg);
		else if (rc) {
			log_error("%s", err.msg);
			goto out;
		} else if (rank == 0)
			log_info("resumed from %s at step %lld", ckpt_dir, (long long)t.step);
	}
	int agent_fd = agent_socket_open(getenv("YARD_AGENT_SOCK"));
	FILE *metrics_file = NULL;
	if (getenv("YARD_METRICS_FILE"))
		metrics_file = fopen(getenv("YARD_METRICS_FILE"), "a");
	struct checkpoint_requests requests = {
	    .path = getenv("YARD_CHECKPOINT_REQUEST"), .seen = -1, .rank = rank};
	int64_t asked_save = -1; /* the step of the last checkpoint saved because a rank asked */
	if (ckpt_dir == NULL)
		requests.path = NULL; /* nowhere to save one */
	while (t.step < steps) {
		int64_t next = t.step + 1;
		if (checkpoint_requested(&requests, asked_save)) {
			log_info("rank %d: checkpoint request %lld: the ranks save the first step "
			         "from %lld whose loss allreduce carries it",
			         rank, requests.seen, (long long)next);
			t.checkpoint_wanted = 1;
		}
		if (spec.debug.crash_rank == rank && next == spec.debug.crash_at_step) {
			log_error("debug hook: crash_rank %d at step %lld: aborting", rank,
			          (long long)next);
			abort();
		}
		if (spec.debug.hang_rank == rank && next == spec.debug.hang_at_step) {
			log_warn("debug hook: hang_rank %d at step %lld: hanging", rank,
			         (long long)next);
			for (;;)
				pause();
		}
		struct trainer_metrics m;
		if ((rc = trainer_step(&t, &m, &err)) != 0) {
			log_error("%s", err.msg);
			yd_comm_abort(comm);
			goto out_files;
		}
		char line[1024];
		int len = trainer_metrics_json(&m, rank, line, sizeof line);
		if (rank == 0) {
			printf("%s\n", line);
			fflush(stdout);
		}
		if (metrics_file) {
			fprintf(metrics_file, "%s\n", line);
			fflush(metrics_file);
		}
		if (agent_fd >= 0)
			(void)send(agent_fd, line, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
		int due =
		    spec.checkpoint.every_steps > 0 && t.step % spec.checkpoint.every_steps == 0;
		if (ckpt_dir && m.checkpoint_agreed && rank == 0)
			log_info("saving checkpoint step %lld: asked for%s", (long long)t.step,
			         due ? " (and due)" : "");
		if (ckpt_dir && (due || m.checkpoint_agreed)) {
			if ((rc = trainer_save(&t, ckpt_dir, keep_local, &err)) != 0) {
				log_error("%s", err.msg);
				yd_comm_abort(comm);
				goto out_files;
			}
			if (m.checkpoint_agreed)
				asked_save = t.step;
		}
	}
	status = 0;
out_files:
	if (agent_fd >= 0)
		close(agent_fd);
	if (metrics_file)
		fclose(metrics_file);
out:
	trainer_free(&t);
	if (net)
		net->ops->destroy(net);
	yd_comm_destroy(comm);
	jobspec_free(&spec);
	(void)argc;
	(void)argv;
	return status;
}
