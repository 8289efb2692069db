/* ranks.c: the rank processes of one node. Each rank runs in its own session (process
 * group = pid) so a stop reaches everything it forked. Output goes straight to a per-rank,
 * per-generation log file, not through the agent, so ranks keep running while the agent
 * restarts or re-execs; the table is persisted to DATA_DIR/ranks.json after every change and
 * re-adopted at start, with the process start time guarding against pid reuse. Logs are
 * rotated and sent to the leader in pieces by ranklog.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/base64.h"
#include "common/common.h"

#define LOGS_PER_HEARTBEAT_MAX (384 << 10) /* raw bytes: base64 keeps a heartbeat under 1 MiB */
#define FORGET_DEFER_MAX 20 /* heartbeats an exited rank waits for its log to be sent */

extern char **environ;

/* Field 22 of /proc/PID/stat: start time in clock ticks since boot. 0 if gone. */
static uint64_t proc_start_ticks(pid_t pid)
{
	char path[64], buf[1024];
	FILE *f;
	size_t n;
	char *p;
	unsigned long long ticks = 0;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command name may contain spaces */
	if (p == NULL)
		return 0;
	/* after ") " come fields 3.. ; start time is field 22 */
	if (sscanf(
	        p + 2,
	        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
	        &ticks) != 1)
		return 0;
	return ticks;
}

static int pid_is_same_process(pid_t pid, uint64_t start_ticks)
{
	uint64_t now = proc_start_ticks(pid);
	return now != 0 && now == start_ticks;
}

static int valid_job_id(const char *job)
{
	size_t n = strlen(job);
	if (n == 0 || n > AGENT_JOB_ID_MAX || strcmp(job, ".") == 0 || strcmp(job, "..") == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = job[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return 0;
	}
	return 1;
}

struct agent_rank *ranks_find(struct agent *a, const char *job, int rank)
{
	for (int i = 0; i < AGENT_MAX_RANKS; i++)
		if (a->ranks[i].in_use && a->ranks[i].rank == rank &&
		    strcmp(a->ranks[i].job, job) == 0)
			return &a->ranks[i];
	return NULL;
}

struct agent_rank *ranks_find_pid(struct agent *a, pid_t pid)
{
	for (int i = 0; i < AGENT_MAX_RANKS; i++)
		if (a->ranks[i].in_use && !a->ranks[i].exited && a->ranks[i].pid == pid)
			return &a->ranks[i];
	return NULL;
}

struct agent_rank *ranks_on_device(struct agent *a, int device)
{
	for (int i = 0; i < AGENT_MAX_RANKS && device >= 0; i++)
		if (a->ranks[i].in_use && !a->ranks[i].exited && a->ranks[i].device == device)
			return &a->ranks[i];
	return NULL;
}

void ranks_set_spec(struct agent_rank *r, const json_t *spec)
{
	const json_t *v = json_object_get(json_object_get(spec, "failure"), "stop_on_disconnect_s");
	double seconds = json_is_number(v) ? json_number_value(v) : 0;
	r->stop_on_disconnect_ms = seconds > 0 && seconds <= 86400 ? (int64_t)(seconds * 1000) : 0;
}

int ranks_running(const struct agent *a)
{
	int n = 0;
	for (int i = 0; i < AGENT_MAX_RANKS; i++)
		if (a->ranks[i].in_use && !a->ranks[i].exited)
			n++;
	return n;
}

int ranks_save_state(const struct agent *a)
{
	char path[PATH_MAX + 16], tmp[PATH_MAX + 16];
	json_t *arr = json_array();
	int rc = 0;

	for (int i = 0; i < AGENT_MAX_RANKS; i++) {
		const struct agent_rank *r = &a->ranks[i];
		if (!r->in_use)
			continue;
		json_array_append_new(
		    arr, json_pack("{s:s, s:i, s:I, s:i, s:I, s:s, s:b, s:i, s:i}", "job", r->job,
		                   "rank", r->rank, "generation", (json_int_t)r->generation, "pid",
		                   (int)r->pid, "start_ticks", (json_int_t)r->start_ticks, "log",
		                   r->log.path, "exited", r->exited, "exit_code", r->exit_code,
		                   "signal", r->term_signal));
		json_t *saved = json_array_get(arr, json_array_size(arr) - 1);
		json_object_set_new(saved, "exit_file", json_string(r->exit_path));
		json_object_set_new(saved, "log_base", json_integer(r->log.base));
		json_object_set_new(saved, "log_rot_start", json_integer(r->log.rot_start));
		json_object_set_new(saved, "log_rot_len", json_integer(r->log.rot_len));
		json_object_set_new(saved, "ckpt_controller", json_boolean(r->ckpt_controller));
		json_object_set_new(saved, "worker_version", json_string(r->worker_version));
		json_object_set_new(saved, "device", json_integer(r->device));
		if (r->stop_on_disconnect_ms > 0)
			json_object_set_new(saved, "stop_on_disconnect_ms",
			                    json_integer(r->stop_on_disconnect_ms));
	}
	snprintf(path, sizeof path, "%s/ranks.json", a->cfg.data_dir);
	snprintf(tmp, sizeof tmp, "%s/ranks.json.tmp", a->cfg.data_dir);
	if (json_dump_file(arr, tmp, JSON_COMPACT) != 0 || rename(tmp, path) != 0) {
		log_error("cannot write %s: %s", path, strerror(errno));
		rc = YARD_EIO;
	}
	json_decref(arr);
	return rc;
}

static struct agent_rank *slot_alloc(struct agent *a)
{
	for (int i = 0; i < AGENT_MAX_RANKS; i++)
		if (!a->ranks[i].in_use) {
			memset(&a->ranks[i], 0, sizeof a->ranks[i]);
			a->ranks[i].in_use = 1;
			a->ranks[i].step = -1;
			a->ranks[i].device = -1;
			return &a->ranks[i];
		}
	return NULL;
}

/* A rank that ended while we were not its parent: its shim recorded how (exit code -1 when
 * even that is missing, e.g. the whole process group was SIGKILLed). */
static void rank_ended_unwatched(struct agent_rank *r)
{
	r->exited = 1;
	r->exit_code = -1;
	r->term_signal = 0;
	if (r->exit_path[0] != '\0' &&
	    shim_read_exit(r->exit_path, &r->exit_code, &r->term_signal) != 0) {
		r->exit_code = -1;
		r->term_signal = 0;
	}
}

int ranks_load_state(struct agent *a)
{
	char path[PATH_MAX + 16];
	json_t *arr, *item;
	size_t i;
	int adopted = 0;

	snprintf(path, sizeof path, "%s/ranks.json", a->cfg.data_dir);
	arr = json_load_file(path, 0, NULL);
	if (arr == NULL)
		return 0;
	json_array_foreach(arr, i, item)
	{
		const char *job = json_string_value(json_object_get(item, "job"));
		pid_t pid = (pid_t)json_integer_value(json_object_get(item, "pid"));
		uint64_t ticks = (uint64_t)json_integer_value(json_object_get(item, "start_ticks"));
		const char *log = json_string_value(json_object_get(item, "log"));
		struct agent_rank *r;

		int exited = json_is_true(json_object_get(item, "exited"));
		if (job == NULL || !valid_job_id(job))
			continue;
		r = slot_alloc(a);
		if (r == NULL)
			break;
		snprintf(r->job, sizeof r->job, "%s", job);
		r->rank = (int)json_integer_value(json_object_get(item, "rank"));
		r->generation = json_integer_value(json_object_get(item, "generation"));
		const json_t *device = json_object_get(item, "device");
		r->device = json_is_integer(device) ? (int)json_integer_value(device) : -1;
		/* kept, so that a rank re-adopted while no controller answers is still fenced */
		r->stop_on_disconnect_ms =
		    json_integer_value(json_object_get(item, "stop_on_disconnect_ms"));
		r->ckpt_controller = json_is_true(json_object_get(item, "ckpt_controller"));
		snprintf(r->worker_version, sizeof r->worker_version, "%s",
		         json_string_value(json_object_get(item, "worker_version"))
		             ? json_string_value(json_object_get(item, "worker_version"))
		             : "");
		r->pid = pid;
		r->start_ticks = ticks;
		r->started_mono_ms = yard_now_mono_ms();
		r->last_step_mono_ms = yard_now_mono_ms();
		rank_log_init(&r->log, log != NULL ? log : "");
		r->log.base = json_integer_value(json_object_get(item, "log_base"));
		r->log.rot_start = json_integer_value(json_object_get(item, "log_rot_start"));
		r->log.rot_len = json_integer_value(json_object_get(item, "log_rot_len"));
		/* what the leader already has is unknown: its tail goes again */
		r->log.shipped = rank_log_end(&r->log);
		rank_log_rewind(&r->log, a->cfg.log_resend_bytes);
		snprintf(r->exit_path, sizeof r->exit_path, "%s",
		         json_string_value(json_object_get(item, "exit_file"))
		             ? json_string_value(json_object_get(item, "exit_file"))
		             : "");
		/* Exited ranks are remembered until the controller stops listing them, so a
		 * restarted agent neither runs them again nor forgets how they ended. */
		if (exited) {
			r->exited = 1;
			r->exit_code = (int)json_integer_value(json_object_get(item, "exit_code"));
			r->term_signal = (int)json_integer_value(json_object_get(item, "signal"));
			continue;
		}
		if (pid <= 0 || !pid_is_same_process(pid, ticks)) {
			rank_ended_unwatched(r);
			log_info("rank %d of %s (pid %d) ended while the agent was down: code %d "
			         "signal %d",
			         r->rank, job, (int)pid, r->exit_code, r->term_signal);
			continue;
		}
		r->adopted = 1;
		log_info("re-adopted rank %d of %s (pid %d)", r->rank, r->job, (int)pid);
		adopted++;
	}
	json_decref(arr);
	return adopted;
}

static void on_rank_exit(uv_process_t *proc, int64_t exit_status, int term_signal)
{
	struct agent *a = proc->loop->data;
	struct agent_rank *r = proc->data;
	r->exited = 1;
	r->exit_code = (int)exit_status;
	r->term_signal = term_signal;
	r->process = NULL;
	log_info("rank %d of %s (pid %d) exited: code %d signal %d", r->rank, r->job, (int)r->pid,
	         (int)exit_status, term_signal);
	uv_close((uv_handle_t *)proc, (uv_close_cb)free);
	ranks_save_state(a);
	if (a->rank_exited != NULL)
		a->rank_exited(a);
}

int agent_mkdir_p(const char *dir)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s", dir);
	for (char *p = tmp + 1; *p != '\0'; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
				return -1;
			*p = '/';
		}
	return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

/* DATA_DIR/jobs/JOB/checkpoint-request.gen-G: where the agent hands the controller's checkpoint
 * requests to the ranks of a generation (YARD_CHECKPOINT_REQUEST, read by yard-worker). */
static void request_path(const struct agent *a, const char *job, int64_t generation, char *out,
                         size_t len)
{
	snprintf(out, len, "%s/jobs/%s/checkpoint-request.gen-%lld", a->cfg.data_dir, job,
	         (long long)generation);
}

int ranks_request_checkpoint(struct agent *a, const char *job, int64_t generation, int64_t request,
                             int64_t after)
{
	int ranks = 0, workers = 0;
	for (int i = 0; i < AGENT_MAX_RANKS; i++) {
		const struct agent_rank *r = &a->ranks[i];
		int here = r->in_use && !r->exited && !r->stopping && r->generation == generation &&
		           strcmp(r->job, job) == 0;
		ranks += here;
		workers += here && r->worker_version[0] != '\0';
	}
	if (ranks == 0 || !valid_job_id(job))
		return 0;
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	request_path(a, job, generation, path, sizeof path);
	long long held = -1;
	FILE *f = fopen(path, "r");
	if (f != NULL) {
		if (fscanf(f, "%lld", &held) != 1)
			held = -1;
		fclose(f);
	}
	if (held >= request)
		return ranks; /* handed over already */
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	f = fopen(tmp, "w");
	/* "REQUEST AFTER" for yard-worker: any checkpoint newer than step AFTER answers it; the
	 * number alone for a command job's program (the form docs/api.md gives it) or when an
	 * older leader sent no AFTER */
	if (workers == 0)
		after = INT64_MAX;
	int ok = f != NULL && (after == INT64_MAX ? fprintf(f, "%lld\n", (long long)request)
	                                          : fprintf(f, "%lld %lld\n", (long long)request,
	                                                    (long long)after)) > 0;
	if (f != NULL)
		ok = (fclose(f) == 0) && ok;
	if (!ok || rename(tmp, path) != 0) {
		log_warn("job %s generation %lld: cannot write checkpoint request %lld to %s: %s",
		         job, (long long)generation, (long long)request, path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	log_info("job %s generation %lld: checkpoint request %lld handed to its %d rank(s) here",
	         job, (long long)generation, (long long)request, ranks);
	return ranks;
}

/* Builds the environment: ours, then the controller's, then the agent's own variables. The
 * returned array and its strings are heap-allocated (free with free_strv). */
static char **build_env(const struct agent *a, const json_t *env, const char *job,
                        const char *spec_path, const char *ckpt_dir, const char *request)
{
	size_t n_base = 0, n = 0, cap;
	char **out;
	const char *k;
	json_t *v;

	while (environ[n_base] != NULL)
		n_base++;
	cap = n_base + json_object_size(env) + 8;
	out = calloc(cap, sizeof *out);
	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < n_base; i++) {
		/* controller values win over inherited ones */
		const char *eq = strchr(environ[i], '=');
		if (eq != NULL) {
			char key[256];
			size_t kl = (size_t)(eq - environ[i]);
			if (kl < sizeof key) {
				memcpy(key, environ[i], kl);
				key[kl] = '\0';
				if (json_object_get(env, key) != NULL ||
				    (ckpt_dir != NULL && strcmp(key, "YARD_CKPT_DIR") == 0) ||
				    strcmp(key, "YARD_CHECKPOINT_REQUEST") == 0 ||
				    strcmp(key, "YARD_AGENT_ANSWERS") == 0)
					continue;
			}
		}
		out[n++] = strdup(environ[i]);
	}
	json_object_foreach((json_t *)env, k, v)
	{
		char *kv;
		if (!json_is_string(v) || asprintf(&kv, "%s=%s", k, json_string_value(v)) < 0)
			continue;
		out[n++] = kv;
	}
	if (asprintf(&out[n], "YARD_AGENT_SOCK=%s", a->metrics_path) >= 0)
		n++;
	/* this agent answers a report on the socket (metrics.c), so yard-report waits for it */
	if ((out[n] = strdup("YARD_AGENT_ANSWERS=1")) != NULL)
		n++;
	if (asprintf(&out[n], "YARD_JOB_ID=%s", job) >= 0)
		n++;
	if (spec_path != NULL && asprintf(&out[n], "YARD_JOB_SPEC=%s", spec_path) >= 0)
		n++;
	if (ckpt_dir != NULL && asprintf(&out[n], "YARD_CKPT_DIR=%s", ckpt_dir) >= 0)
		n++;
	if (asprintf(&out[n], "YARD_CHECKPOINT_REQUEST=%s", request) >= 0)
		n++;
	out[n] = NULL;
	return out;
}

static void free_strv(char **v)
{
	if (v == NULL)
		return;
	for (char **p = v; *p != NULL; p++)
		free(*p);
	free(v);
}

/* A rank that could not be started is reported as exited with code 127 (like a shell's
 * "command not found"), so the controller sees the failure and restarts or fails the job
 * instead of waiting for a rank that will never run. */
static void rank_start_failed(struct agent *a, struct agent_rank *r)
{
	r->exited = 1;
	r->exit_code = 127;
	r->pid = 0;
	ranks_save_state(a);
}

int ranks_start(struct agent *a, const json_t *desired, struct yard_err *err)
{
	const char *job = json_string_value(json_object_get(desired, "job"));
	const char *kind = json_string_value(json_object_get(desired, "kind"));
	json_t *rank_j = json_object_get(desired, "rank");
	json_t *env = json_object_get(desired, "env");
	json_t *argv_j = json_object_get(desired, "argv");
	json_t *spec = json_object_get(desired, "spec");
	char dir[PATH_MAX], spec_path[PATH_MAX + 16], *args[70];
	char **envp;
	int n_args = 0, log_fd, rc;
	struct agent_rank *r;
	uv_process_options_t opts;
	uv_stdio_container_t stdio[3];
	uv_process_t *proc;

	if (job == NULL || !valid_job_id(job) || !json_is_integer(rank_j))
		return yard_err_set(err, YARD_EINVAL,
		                    "desired rank without a valid job id and rank");
	if (env != NULL && !json_is_object(env))
		return yard_err_set(err, YARD_EINVAL, "job %s rank %d: env is not an object", job,
		                    (int)json_integer_value(rank_j));
	r = slot_alloc(a);
	if (r == NULL)
		return yard_err_set(err, YARD_ENOSPACE, "job %s: more than %d ranks on this node",
		                    job, AGENT_MAX_RANKS);
	snprintf(r->job, sizeof r->job, "%s", job);
	r->rank = (int)json_integer_value(rank_j);
	r->generation = json_integer_value(json_object_get(desired, "generation"));
	const json_t *device = json_object_get(desired, "device");
	r->device = json_is_integer(device) ? (int)json_integer_value(device) : -1;
	r->ckpt_controller = ckpt_is_controller(desired);

	/* the controller store's ranks write into a node-local directory the agent uploads */
	char ckpt_dir[PATH_MAX + 64];
	if (r->ckpt_controller) {
		ckpt_job_dir(a, job, ckpt_dir, sizeof ckpt_dir);
		if (agent_mkdir_p(ckpt_dir) != 0) {
			rank_start_failed(a, r);
			return yard_err_set(err, YARD_EIO, "job %s: cannot create %s: %s", job,
			                    ckpt_dir, strerror(errno));
		}
	}
	metrics_set_window(r, spec);
	ranks_set_spec(r, spec);

	snprintf(dir, sizeof dir, "%s/jobs/%s", a->cfg.data_dir, job);
	if (agent_mkdir_p(dir) != 0) {
		rank_start_failed(a, r);
		return yard_err_set(err, YARD_EIO, "job %s: cannot create %s: %s", job, dir,
		                    strerror(errno));
	}
	spec_path[0] = '\0';
	if (spec != NULL) {
		char tmp[PATH_MAX + 32];
		snprintf(spec_path, sizeof spec_path, "%s/spec.json", dir);
		snprintf(tmp, sizeof tmp, "%s/spec.json.%d.tmp", dir, r->rank);
		if (json_dump_file(spec, tmp, JSON_INDENT(1)) != 0 || rename(tmp, spec_path) != 0) {
			rank_start_failed(a, r);
			return yard_err_set(err, YARD_EIO, "job %s: cannot write %s", job,
			                    spec_path);
		}
	}
	{
		char log_path[PATH_MAX + 64];
		snprintf(log_path, sizeof log_path, "%s/rank-%d.gen-%lld.log", dir, r->rank,
		         (long long)r->generation);
		rank_log_init(&r->log, log_path);
	}
	log_fd = open(r->log.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (log_fd < 0) {
		rank_start_failed(a, r);
		return yard_err_set(err, YARD_EIO, "job %s rank %d: cannot open log %s: %s", job,
		                    r->rank, r->log.path, strerror(errno));
	}

	/* every rank runs under its shim (shim.c): argv = self --rank-shim EXIT_FILE -- CMD... */
	snprintf(r->exit_path, sizeof r->exit_path, "%s/rank-%d.gen-%lld.exit", dir, r->rank,
	         (long long)r->generation);
	unlink(r->exit_path);
	args[n_args++] = a->cfg.self_path;
	args[n_args++] = "--rank-shim";
	args[n_args++] = r->exit_path;
	args[n_args++] = "--";
	if (kind != NULL && strcmp(kind, "command") == 0) {
		size_t i;
		json_t *arg;
		if (!json_is_array(argv_j) || json_array_size(argv_j) == 0 ||
		    json_array_size(argv_j) > 64) {
			close(log_fd);
			rank_start_failed(a, r);
			return yard_err_set(err, YARD_EINVAL, "job %s: command job without argv",
			                    job);
		}
		json_array_foreach(argv_j, i, arg) args[n_args++] = (char *)json_string_value(arg);
	} else {
		args[n_args++] = a->worker.path;
		snprintf(r->worker_version, sizeof r->worker_version, "%s", a->worker.version);
	}
	args[n_args] = NULL;
	for (int i = 0; i < n_args; i++)
		if (args[i] == NULL) {
			close(log_fd);
			rank_start_failed(a, r);
			return yard_err_set(err, YARD_EINVAL, "job %s: argv[%d] is not a string",
			                    job, i);
		}

	json_t *no_env = json_object();
	char request[PATH_MAX];
	request_path(a, job, r->generation, request, sizeof request);
	envp =
	    build_env(a, env != NULL ? env : no_env, job, spec_path[0] != '\0' ? spec_path : NULL,
	              r->ckpt_controller ? ckpt_dir : NULL, request);
	json_decref(no_env);
	proc = calloc(1, sizeof *proc);
	memset(&opts, 0, sizeof opts);
	stdio[0].flags = UV_IGNORE;
	stdio[1].flags = UV_INHERIT_FD;
	stdio[1].data.fd = log_fd;
	stdio[2].flags = UV_INHERIT_FD;
	stdio[2].data.fd = log_fd;
	opts.file = args[0];
	opts.args = args;
	opts.env = envp;
	opts.cwd = dir;
	opts.flags = UV_PROCESS_DETACHED; /* setsid: its own process group */
	opts.stdio_count = 3;
	opts.stdio = stdio;
	opts.exit_cb = on_rank_exit;
	proc->data = r;
	rc = (envp == NULL || proc == NULL) ? UV_ENOMEM : uv_spawn(a->loop, proc, &opts);
	free_strv(envp);
	close(log_fd);
	if (rc != 0) {
		free(proc);
		rank_start_failed(a, r);
		return yard_err_set(err, YARD_EIO, "job %s rank %d: cannot start %s: %s", job,
		                    r->rank, args[0], uv_strerror(rc));
	}
	r->process = proc;
	r->pid = proc->pid;
	r->start_ticks = proc_start_ticks(proc->pid);
	r->started_mono_ms = yard_now_mono_ms();
	r->last_step_mono_ms = r->started_mono_ms;
	a->ranks_started++;
	log_info("started rank %d of %s (generation %lld) as pid %d%s%s", r->rank, job,
	         (long long)r->generation, (int)r->pid, r->worker_version[0] ? " on worker " : "",
	         r->worker_version);
	ranks_save_state(a);
	return 0;
}

void ranks_stop(struct agent *a, struct agent_rank *r, const char *why)
{
	if (r->exited || r->stopping)
		return;
	log_info("stopping rank %d of %s (pid %d): %s", r->rank, r->job, (int)r->pid, why);
	r->stopping = 1;
	r->stop_sent_ms = yard_now_mono_ms();
	if (kill(-r->pid, SIGTERM) != 0)
		kill(r->pid, SIGTERM);
}

void ranks_tick(struct agent *a)
{
	uint64_t now = yard_now_mono_ms();
	int changed = 0;

	for (int i = 0; i < AGENT_MAX_RANKS; i++) {
		struct agent_rank *r = &a->ranks[i];
		if (!r->in_use || r->exited)
			continue;
		if (r->adopted) {
			/* After a re-exec the rank is still our child and waitpid tells its status;
			 * after a crash-restart it is not, and only liveness can be observed. */
			int status;
			pid_t w = waitpid(r->pid, &status, WNOHANG);
			if (w == r->pid) {
				r->exited = 1;
				r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
				r->term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
				changed = 1;
			} else if (w < 0 && !pid_is_same_process(r->pid, r->start_ticks)) {
				rank_ended_unwatched(r);
				changed = 1;
			}
			if (r->exited) {
				log_info("adopted rank %d of %s (pid %d) exited", r->rank, r->job,
				         (int)r->pid);
				if (a->rank_exited != NULL)
					a->rank_exited(a);
			}
		}
		/* fencing: the other side of a partition may be running the job again (not
		 * before a heartbeat was due: the leader may ask for heartbeats further apart) */
		if (!r->exited && !r->stopping && r->stop_on_disconnect_ms > 0 &&
		    now - a->last_ok_mono_ms >
		        YARD_MAX((uint64_t)r->stop_on_disconnect_ms,
		                 a->heartbeat_every_ms + (uint64_t)a->cfg.heartbeat_ms)) {
			char why[160];
			snprintf(
			    why, sizeof why,
			    "no controller reached for %.1f s (failure.stop_on_disconnect_s %g)",
			    (double)(now - a->last_ok_mono_ms) / 1000.0,
			    (double)r->stop_on_disconnect_ms / 1000.0);
			ranks_stop(a, r, why);
		}
		if (!r->exited && r->stopping &&
		    now - r->stop_sent_ms > (uint64_t)a->cfg.stop_grace_ms) {
			log_warn("rank %d of %s (pid %d) ignored SIGTERM for %d ms: SIGKILL",
			         r->rank, r->job, (int)r->pid, a->cfg.stop_grace_ms);
			if (kill(-r->pid, SIGKILL) != 0)
				kill(r->pid, SIGKILL);
			r->stop_sent_ms = now;
		}
		if (rank_log_rotate(&r->log, a->cfg.log_max_bytes) > 0)
			changed = 1;
	}
	if (changed)
		ranks_save_state(a);
}

json_t *ranks_report(const struct agent *a)
{
	json_t *arr = json_array();
	uint64_t now = yard_now_mono_ms();
	for (int i = 0; i < AGENT_MAX_RANKS; i++) {
		const struct agent_rank *r = &a->ranks[i];
		json_t *o;
		if (!r->in_use)
			continue;
		/* an exit held for its uploads: running, its last step counted from the exit */
		int held = r->exited && r->exit_held == 1;
		uint64_t last = held && r->exit_seen_mono_ms > r->last_step_mono_ms
		                    ? r->exit_seen_mono_ms
		                    : r->last_step_mono_ms;
		o = json_pack("{s:s, s:i, s:I, s:i, s:s, s:i, s:i, s:I, s:I}", "job", r->job,
		              "rank", r->rank, "generation", (json_int_t)r->generation, "pid",
		              (int)r->pid, "state", r->exited && !held ? "exited" : "running",
		              "exit_code", held ? 0 : r->exit_code, "signal", r->term_signal,
		              "step", (json_int_t)r->step, "last_step_ms_ago",
		              (json_int_t)(now - last));
		if (r->step >= 0) {
			json_object_set_new(o, "loss", json_real(r->loss));
			json_object_set_new(o, "step_ms", json_real(r->step_ms));
			json_object_set_new(o, "compute_ms", json_real(r->compute_ms));
			json_object_set_new(o, "comm_wait_ms", json_real(r->comm_wait_ms));
		}
		if (r->n_windows > 0)
			json_object_set_new(o, "windows", metrics_windows_json(r));
		if (r->worker_version[0] != '\0')
			json_object_set_new(o, "worker_version", json_string(r->worker_version));
		json_array_append_new(arr, o);
	}
	return arr;
}

static int desired_lists(const json_t *desired, const struct agent_rank *r)
{
	size_t i;
	json_t *d;
	json_array_foreach(desired, i, d)
	{
		const char *job = json_string_value(json_object_get(d, "job"));
		if (job != NULL && strcmp(job, r->job) == 0 &&
		    json_integer_value(json_object_get(d, "rank")) == r->rank &&
		    json_integer_value(json_object_get(d, "generation")) == r->generation)
			return 1;
	}
	return 0;
}

/* An exited rank that is no longer wanted is forgotten once its log is sent (or after
 * FORGET_DEFER_MAX heartbeats: a log that cannot be sent does not hold the slot forever). */
void ranks_forget_exited(struct agent *a, const json_t *desired)
{
	for (int i = 0; i < AGENT_MAX_RANKS; i++) {
		struct agent_rank *r = &a->ranks[i];
		if (!r->in_use || !r->exited || desired_lists(desired, r))
			continue;
		if (r->log.shipped < rank_log_end(&r->log) &&
		    r->forget_deferred++ < FORGET_DEFER_MAX)
			continue;
		r->in_use = 0;
	}
}

json_t *ranks_logs(struct agent *a)
{
	json_t *logs = json_array();
	size_t budget = LOGS_PER_HEARTBEAT_MAX;
	size_t per_rank = (size_t)a->cfg.log_ship_bytes;
	char *buf = malloc(per_rank), *text = malloc(base64_encoded_len(per_rank) + 1);
	if (buf == NULL || text == NULL)
		goto out;
	a->log_cursor = (a->log_cursor + 1) % AGENT_MAX_RANKS;
	for (int k = 0; k < AGENT_MAX_RANKS && budget > 0; k++) {
		struct agent_rank *r = &a->ranks[(a->log_cursor + k) % AGENT_MAX_RANKS];
		int64_t offset;
		if (!r->in_use || r->log.path[0] == '\0')
			continue;
		size_t n = rank_log_next(&r->log, YARD_MIN(per_rank, budget), &offset, buf);
		if (n == 0)
			continue;
		base64_encode(buf, n, text);
		json_array_append_new(logs,
		                      json_pack("{s:s,s:i,s:I,s:I,s:s}", "job", r->job, "rank",
		                                r->rank, "generation", (json_int_t)r->generation,
		                                "offset", (json_int_t)offset, "data", text));
		r->log.pending_end = offset + (int64_t)n;
		budget -= n;
	}
out:
	free(buf);
	free(text);
	return logs;
}

void ranks_logs_done(struct agent *a, int ok)
{
	for (int i = 0; i < AGENT_MAX_RANKS; i++) {
		struct agent_rank *r = &a->ranks[i];
		if (!r->in_use || r->log.pending_end < 0)
			continue;
		if (ok && r->log.pending_end > r->log.shipped)
			r->log.shipped = r->log.pending_end;
		r->log.pending_end = -1;
	}
}

void ranks_logs_rewind(struct agent *a)
{
	for (int i = 0; i < AGENT_MAX_RANKS; i++)
		if (a->ranks[i].in_use)
			rank_log_rewind(&a->ranks[i].log, a->cfg.log_resend_bytes);
}
