/* yard_run.c: yard-run, runs every rank of a job spec on this machine without a controller
 * (like torchrun --standalone):
 *   yard-run JOB.json [--dp N] [--tp N] [--pp N] [--schedule gpipe|1f1b|interleaved]
 *                     [--virtual-stages V] [--micro-batches M] [--steps S]
 *                     [--ckpt-dir DIR] [--resume]
 * Applies the overrides, re-validates the spec, writes it with a rendezvous file into a temp
 * directory, and fork+execs one yard-worker per rank (found next to this binary, or through
 * $YARD_WORKER, or on PATH). Rank 0's metrics lines stream to stdout; every rank's log goes to
 * stderr. If any rank fails, yard-run names it, stops the others and exits 1. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "jobs/spec.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static void usage(FILE *to)
{
	fprintf(to, "usage: yard-run JOB.json [--dp N] [--tp N] [--pp N] "
	            "[--schedule gpipe|1f1b|interleaved]\n"
	            "                [--virtual-stages V] [--micro-batches M] [--steps S] "
	            "[--ckpt-dir DIR] [--resume]\n");
}

static int parse_positive(const char *opt, const char *value, int *out)
{
	char *end;
	long v = strtol(value, &end, 10);
	if (*end || v < 1 || v > 1 << 20) {
		fprintf(stderr, "yard-run: %s: '%s' is not a positive integer\n", opt, value);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static void worker_path(char *out, size_t len)
{
	if (getenv("YARD_WORKER")) {
		snprintf(out, len, "%s", getenv("YARD_WORKER"));
		return;
	}
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = '\0';
		snprintf(out, len, "%s/yard-worker", dirname(self));
		if (access(out, X_OK) == 0)
			return;
	}
	snprintf(out, len, "yard-worker"); /* execvp searches PATH */
}

static void kill_all(const pid_t *pids, int n, int sig)
{
	for (int r = 0; r < n; r++)
		if (pids[r] > 0)
			kill(pids[r], sig);
}

static void describe_exit(int status, char *out, size_t len)
{
	if (WIFSIGNALED(status))
		snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(status),
		         strsignal(WTERMSIG(status)));
	else
		snprintf(out, len, "failed with exit status %d", WEXITSTATUS(status));
}

/* Names the root cause (a rank killed by a signal, else the first to fail), then the
 * ranks that failed after it, most likely because it broke their connections. */
static void report_failures(const int *failed, const int *status, const pid_t *pid, int n)
{
	int root = failed[0];
	for (int i = 0; i < n; i++)
		if (WIFSIGNALED(status[failed[i]])) {
			root = failed[i];
			break;
		}
	char how[128];
	describe_exit(status[root], how, sizeof how);
	fprintf(stderr, "yard-run: rank %d (pid %d) %s; stopping the other ranks\n", root,
	        (int)pid[root], how);
	for (int i = 0; i < n; i++) {
		if (failed[i] == root)
			continue;
		describe_exit(status[failed[i]], how, sizeof how);
		fprintf(stderr, "yard-run: rank %d (pid %d) then %s\n", failed[i],
		        (int)pid[failed[i]], how);
	}
}

int main(int argc, char **argv)
{
	yard_log_init("yard-run");
	static const struct option options[] = {
	    {"dp", required_argument, NULL, 'd'},
	    {"tp", required_argument, NULL, 't'},
	    {"pp", required_argument, NULL, 'p'},
	    {"schedule", required_argument, NULL, 's'},
	    {"virtual-stages", required_argument, NULL, 'v'},
	    {"micro-batches", required_argument, NULL, 'm'},
	    {"steps", required_argument, NULL, 'n'},
	    {"ckpt-dir", required_argument, NULL, 'c'},
	    {"resume", no_argument, NULL, 'r'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int dp = 0, tp = 0, pp = 0, v = 0, m = 0, steps = 0, resume = 0;
	const char *schedule = NULL, *ckpt_dir = NULL;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		int bad = 0;
		switch (opt) {
		case 'd':
			bad = parse_positive("--dp", optarg, &dp);
			break;
		case 't':
			bad = parse_positive("--tp", optarg, &tp);
			break;
		case 'p':
			bad = parse_positive("--pp", optarg, &pp);
			break;
		case 'v':
			bad = parse_positive("--virtual-stages", optarg, &v);
			break;
		case 'm':
			bad = parse_positive("--micro-batches", optarg, &m);
			break;
		case 'n':
			bad = parse_positive("--steps", optarg, &steps);
			break;
		case 's':
			schedule = optarg;
			break;
		case 'c':
			ckpt_dir = optarg;
			break;
		case 'r':
			resume = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (bad)
			return 2;
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	const char *spec_path = argv[optind];
	struct jobspec spec;
	struct yard_err err = {0};
	if (jobspec_load_file(spec_path, &spec, &err) != 0) {
		fprintf(stderr, "yard-run: %s: %s\n", spec_path, err.msg);
		return 2;
	}
	/* overrides go through the JSON form so the parser validates the combination */
	json_t *json = jobspec_to_json(&spec);
	jobspec_free(&spec);
	json_t *par = json_object_get(json, "parallel");
	if (!json_is_object(par)) {
		par = json_object();
		json_object_set_new(json, "parallel", par);
	}
	if (dp)
		json_object_set_new(par, "dp", json_integer(dp));
	if (tp)
		json_object_set_new(par, "tp", json_integer(tp));
	if (pp)
		json_object_set_new(par, "pp", json_integer(pp));
	if (v)
		json_object_set_new(par, "virtual_stages", json_integer(v));
	if (m)
		json_object_set_new(par, "micro_batches", json_integer(m));
	if (schedule)
		json_object_set_new(par, "schedule", json_string(schedule));
	if (steps)
		json_object_set_new(json_object_get(json, "train"), "steps", json_integer(steps));
	json_object_del(json, "ranks"); /* derived from the layout again by the parser */
	if (jobspec_parse(json, &spec, &err) != 0) {
		fprintf(stderr, "yard-run: %s with the command-line overrides: %s\n", spec_path,
		        err.msg);
		json_decref(json);
		return 2;
	}
	int world = spec.parallel.dp * spec.parallel.tp * spec.parallel.pp;
	char tmpdir[] = "/tmp/yard-run.XXXXXX";
	if (!mkdtemp(tmpdir)) {
		fprintf(stderr, "yard-run: cannot create a temp directory: %s\n", strerror(errno));
		return 1;
	}
	char job_path[256], rdv_path[256], worker[4096], world_s[16];
	snprintf(job_path, sizeof job_path, "%s/job.json", tmpdir);
	snprintf(rdv_path, sizeof rdv_path, "%s/rendezvous", tmpdir);
	snprintf(world_s, sizeof world_s, "%d", world);
	if (json_dump_file(json, job_path, JSON_INDENT(2)) != 0) {
		fprintf(stderr, "yard-run: cannot write %s\n", job_path);
		return 1;
	}
	json_decref(json);
	worker_path(worker, sizeof worker);
	fprintf(stderr, "yard-run: %s: %d ranks (dp %d x tp %d x pp %d, %s, m %d), %lld steps\n",
	        spec.name, world, spec.parallel.dp, spec.parallel.tp, spec.parallel.pp,
	        jobspec_schedule_name(spec.parallel.schedule), spec.parallel.micro_batches,
	        (long long)spec.train.steps);

	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	pid_t *pids = calloc((size_t)world, sizeof *pids);
	for (int r = 0; r < world; r++) {
		pid_t pid = fork();
		if (pid < 0) {
			fprintf(stderr, "yard-run: fork of rank %d failed: %s\n", r,
			        strerror(errno));
			kill_all(pids, r, SIGKILL);
			return 1;
		}
		if (pid == 0) {
			char rank_s[16];
			snprintf(rank_s, sizeof rank_s, "%d", r);
			setenv("YARD_RANK", rank_s, 1);
			setenv("YARD_WORLD_SIZE", world_s, 1);
			setenv("YARD_RENDEZVOUS_FILE", rdv_path, 1);
			setenv("YARD_JOB_SPEC", job_path, 1);
			if (!getenv("YARD_JOB_ID"))
				setenv("YARD_JOB_ID", spec.name, 1);
			if (ckpt_dir)
				setenv("YARD_CKPT_DIR", ckpt_dir, 1);
			if (resume)
				setenv("YARD_RESUME", "1", 1);
			unsetenv("YARD_PEERS");
			execlp(worker, worker, (char *)NULL);
			fprintf(stderr, "yard-run: cannot execute %s: %s\n", worker,
			        strerror(errno));
			_exit(127);
		}
		pids[r] = pid;
	}
	/* When a rank fails its peers fail a moment later (their connections break), and
	 * waitpid may report them first. So the first failure opens a short grace period that
	 * collects the others; the root cause reported is a rank killed by a signal if there is
	 * one, else the first to fail. Then the survivors get SIGTERM, and SIGKILL 5 s later. */
	enum { RUNNING, GRACE, STOPPING } phase = RUNNING;
	int *fail_status = calloc((size_t)world, sizeof *fail_status);
	int *failed = calloc((size_t)world, sizeof *failed);
	pid_t *fail_pid = calloc((size_t)world, sizeof *fail_pid);
	int nfailed = 0, left = world, interrupted = 0, reported = 0;
	if (!fail_status || !failed || !fail_pid) {
		fprintf(stderr, "yard-run: out of memory\n");
		kill_all(pids, world, SIGKILL);
	}
	while (left > 0 && fail_status && failed && fail_pid) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == ECHILD)
				break;
			int sig = stop_signal;
			stop_signal = 0;
			if (sig == SIGALRM && phase == GRACE) {
				report_failures(failed, fail_status, fail_pid, nfailed);
				reported = 1;
				kill_all(pids, world, SIGTERM);
				alarm(5);
				phase = STOPPING;
			} else if (sig == SIGALRM && phase == STOPPING) {
				/* ranks blocked in a collective did not end on SIGTERM */
				kill_all(pids, world, SIGKILL);
			} else if (sig && phase != STOPPING) {
				fprintf(stderr, "yard-run: %s: stopping all ranks\n", strsignal(sig));
				interrupted = nfailed == 0;
				kill_all(pids, world, SIGTERM);
				alarm(5);
				phase = STOPPING;
			}
			continue;
		}
		int r = 0;
		while (r < world && pids[r] != pid)
			r++;
		if (r == world)
			continue;
		pids[r] = 0;
		left--;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			continue;
		if (phase == STOPPING)
			continue; /* ended by our SIGTERM/SIGKILL */
		failed[nfailed++] = r;
		fail_status[r] = status;
		fail_pid[r] = pid;
		if (phase == RUNNING) {
			phase = GRACE;
			struct itimerval grace = {.it_value = {.tv_usec = 300 * 1000}};
			setitimer(ITIMER_REAL, &grace, NULL);
		}
	}
	if (nfailed > 0 && !reported)
		report_failures(failed, fail_status, fail_pid, nfailed);
	int status_code = interrupted ? 130 : nfailed > 0 ? 1 : 0;
	free(fail_status);
	free(failed);
	free(fail_pid);

	char cleanup[300];
	snprintf(cleanup, sizeof cleanup, "%s/job.json", tmpdir);
	unlink(cleanup);
	unlink(rdv_path);
	rmdir(tmpdir);
	free(pids);
	jobspec_free(&spec);
	return status_code;
}
