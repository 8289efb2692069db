/* upgrade.c: the agent replaces itself with a new build without stopping its ranks.
 *
 * A heartbeat answer may carry an offer, {"upgrade": {"version", "sha256", "size", "url",
 * "rollout", "gate_s"}}, made by the leader's rollout driver (scheduler/rollout.c). The
 * agent then, one step at a time and reporting each in its heartbeats ("upgrade": {version,
 * rollout, state, error, previous_version}):
 *   downloading  GET url with the node token into DATA_DIR/bin/yard-agent-VERSION (size
 *                bounded by the offer, sha256 computed while writing, both checked);
 *   self-test    runs `NEW --self-test` (selftest.c, a loopback allreduce over shm and TCP);
 *                a failure ends the upgrade here: the running agent never execs the build;
 *   restarting   first said in a heartbeat: the exec waits until the leader has answered one
 *                saying it (at most UPGRADE_ANNOUNCE_MS), so the leader allows the restart
 *                its grace (yardd --node-restart-grace-ms) instead of judging the new
 *                binary's start-up by the usual down time. Then records the upgrade in
 *                DATA_DIR/upgrade.json, saves the rank table, starts
 *                the guardian and execs NEW with the same arguments. Same pid, same node
 *                token (DATA_DIR/node.token), and the ranks are its children still: the new
 *                image re-adopts them from ranks.json (ranks.c) and no rank is restarted;
 *   done         the new agent's first heartbeat the leader answered with 200 writes
 *                DATA_DIR/upgrade.healthy (the version), which releases the guardian.
 *
 * The guardian (guardian.c) is why a broken build cannot brick the node. It is a child of
 * the agent forked and exec'd from the *previous* binary just before the agent's exec, so
 * it runs known-good code. It waits, for at most the offer's gate_s, until the healthy
 * marker names the new version. If the agent process ends first (the new build crashed:
 * the guardian's parent changes) or the time passes (the new build runs but never
 * heartbeats: the guardian SIGKILLs the agent process alone, ranks live in their own
 * sessions), it writes "rolled-back" with the reason into upgrade.json and execs the
 * previous binary with the agent's arguments: it becomes the node's agent, re-adopts the
 * ranks from ranks.json and reports the failure, so the rollout's gate fails at once. A
 * build that failed here is not taken again for the same rollout (the "refused" list).
 *
 * The leader may also answer {"upgrade": {"version": PREVIOUS, "rollout", "rollback":
 * true}}: a rolled-back wave. The agent execs the binary it kept (previous_path) when that
 * is the version asked for.
 *
 * Worker builds (yard-worker) are installed by workerup.c with the helpers below (download,
 * checks run with a timeout, offer parsing); they replace no process. This keeps one previous
 * build, not more. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"
#include "jobs/sha256.h"

#define UPGRADE_MAX_BYTES (1LL << 30)
#define UPGRADE_SELFTEST_TIMEOUT_MS 60000
#define UPGRADE_GATE_S_DEFAULT 60
#define UPGRADE_GATE_S_MAX 3600
/* how long the exec waits for the leader to hear that the agent restarts (one heartbeat) */
#define UPGRADE_ANNOUNCE_MS 2000

extern char **environ;

static const char *const STATE_NAMES[] = {"idle", "downloading", "self-test",  "restarting",
                                          "done", "failed",      "rolled-back"};

const char *upgrade_state_name(enum upgrade_state s)
{
	return STATE_NAMES[s];
}

static enum upgrade_state state_parse(const char *s)
{
	for (size_t i = 0; s != NULL && i < YARD_ARRAY_LEN(STATE_NAMES); i++)
		if (strcmp(s, STATE_NAMES[i]) == 0)
			return (enum upgrade_state)i;
	return UPGRADE_IDLE;
}

int upgrade_version_valid(const char *v)
{
	size_t n = strlen(v);
	if (n == 0 || n > 31)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = v[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-' || c == '+'))
			return 0;
	}
	return 1;
}

/* ---- the state file, shared with the guardian ---- */

static void copy_str(char *dst, size_t len, const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	snprintf(dst, len, "%s", s != NULL ? s : "");
}

int upgrade_state_load(const char *data_dir, struct agent_upgrade *u)
{
	char path[PATH_MAX + 32];
	size_t i;
	json_t *v;
	memset(u, 0, sizeof *u);
	snprintf(path, sizeof path, "%s/upgrade.json", data_dir);
	json_t *j = json_load_file(path, 0, NULL);
	if (j == NULL)
		return YARD_ENOTFOUND;
	u->state = state_parse(json_string_value(json_object_get(j, "state")));
	copy_str(u->version, sizeof u->version, j, "version");
	copy_str(u->rollout, sizeof u->rollout, j, "rollout");
	copy_str(u->error, sizeof u->error, j, "error");
	copy_str(u->previous_version, sizeof u->previous_version, j, "previous_version");
	copy_str(u->previous_path, sizeof u->previous_path, j, "previous_path");
	copy_str(u->new_path, sizeof u->new_path, j, "new_path");
	u->guardian_pid = (pid_t)json_integer_value(json_object_get(j, "guardian_pid"));
	json_array_foreach(json_object_get(j, "refused"), i, v)
	{
		if (u->n_refused < UPGRADE_REFUSED_MAX && json_is_string(v))
			snprintf(u->refused[u->n_refused++], sizeof u->refused[0], "%s",
			         json_string_value(v));
	}
	json_decref(j);
	return 0;
}

int upgrade_state_save(const char *data_dir, const struct agent_upgrade *u)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
	json_t *refused = json_array();
	for (int i = 0; i < u->n_refused; i++)
		json_array_append_new(refused, json_string(u->refused[i]));
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:o}", "state",
	                      STATE_NAMES[u->state], "version", u->version, "rollout", u->rollout,
	                      "error", u->error, "previous_version", u->previous_version,
	                      "previous_path", u->previous_path, "new_path", u->new_path,
	                      "guardian_pid", (int)u->guardian_pid, "refused", refused);
	snprintf(path, sizeof path, "%s/upgrade.json", data_dir);
	snprintf(tmp, sizeof tmp, "%s/upgrade.json.tmp", data_dir);
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || json_dumpfd(j, fd, JSON_COMPACT) != 0 || fsync(fd) != 0 ||
	    rename(tmp, path) != 0) {
		log_error("cannot write %s: %s", path, strerror(errno));
		rc = YARD_EIO;
	}
	if (fd >= 0)
		close(fd);
	json_decref(j);
	return rc;
}

/* "ROLLOUT/VERSION": a build that failed on this node in that rollout is not taken again. */
void upgrade_refuse(struct agent_upgrade *u)
{
	char key[sizeof u->refused[0]];
	snprintf(key, sizeof key, "%s/%s", u->rollout, u->version);
	for (int i = 0; i < u->n_refused; i++)
		if (strcmp(u->refused[i], key) == 0)
			return;
	if (u->n_refused == UPGRADE_REFUSED_MAX) {
		memmove(u->refused[0], u->refused[1],
		        sizeof u->refused[0] * (UPGRADE_REFUSED_MAX - 1));
		u->n_refused--;
	}
	snprintf(u->refused[u->n_refused++], sizeof u->refused[0], "%s", key);
}

int upgrade_is_refused(const struct agent_upgrade *u, const char *rollout, const char *version)
{
	char key[sizeof u->refused[0]];
	snprintf(key, sizeof key, "%s/%s", rollout, version);
	for (int i = 0; i < u->n_refused; i++)
		if (strcmp(u->refused[i], key) == 0)
			return 1;
	return 0;
}

static void save(struct agent *a)
{
	upgrade_state_save(a->cfg.data_dir, &a->up);
}

static void fail(struct agent *a, enum upgrade_state state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(struct agent *a, enum upgrade_state state, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a->up.error, sizeof a->up.error, fmt, ap);
	va_end(ap);
	a->up.state = state;
	a->up.busy = 0;
	upgrade_refuse(&a->up);
	log_error("upgrade to %s (rollout %s) failed: %s", a->up.version, a->up.rollout,
	          a->up.error);
	save(a);
}

/* ---- start-up and heartbeats ---- */

void upgrade_init(struct agent *a)
{
	if (upgrade_state_load(a->cfg.data_dir, &a->up) != 0)
		return;
	if (a->up.state == UPGRADE_RESTARTING) {
		if (strcmp(a->up.version, a->cfg.version) == 0) {
			a->up.pending_healthy = 1;
			log_info("started as the upgrade to %s (rollout %s, was %s): healthy after "
			         "the first heartbeat",
			         a->up.version, a->up.rollout, a->up.previous_version);
		} else {
			/* the guardian records its rollbacks before it execs; anything else that
			 * started this binary instead of the new one also ends the upgrade */
			snprintf(a->up.error, sizeof a->up.error,
			         "the agent started as %s, not the new build %s", a->cfg.version,
			         a->up.version);
			a->up.state = UPGRADE_ROLLED_BACK;
			upgrade_refuse(&a->up);
			save(a);
		}
	} else if (a->up.state == UPGRADE_DOWNLOADING || a->up.state == UPGRADE_SELF_TEST) {
		/* the agent stopped mid-way: the offer, if still wanted, comes again */
		a->up.state = UPGRADE_IDLE;
		save(a);
	}
	if (a->up.state == UPGRADE_ROLLED_BACK)
		log_warn("upgrade to %s (rollout %s) was rolled back: %s", a->up.version,
		         a->up.rollout, a->up.error);
}

static void exec_new_build(struct agent *a, int gate_s);

void upgrade_tick(struct agent *a)
{
	if (a->up.announce_until_ms != 0 && a->stopping) {
		a->up.announce_until_ms = 0; /* stopping: no exec; the offer comes again */
		a->up.busy = 0;
		a->up.state = UPGRADE_IDLE;
	} else if (a->up.announce_until_ms != 0 && yard_now_mono_ms() >= a->up.announce_until_ms) {
		log_warn(
		    "upgrade to %s: no heartbeat saying the agent restarts was answered within "
		    "%d ms: restarting anyway (the leader judges the silence by its usual down "
		    "time)",
		    a->up.version, UPGRADE_ANNOUNCE_MS);
		upgrade_announced(a);
		return;
	}
	/* the guardian is our child (forked before the exec, the pid stayed ours): reap it */
	if (a->up.guardian_pid > 0) {
		int status;
		pid_t w = waitpid(a->up.guardian_pid, &status, WNOHANG);
		if (w == a->up.guardian_pid || (w < 0 && errno == ECHILD)) {
			a->up.guardian_pid = 0;
			save(a); /* nobody may signal that pid any more: it can be reused */
		}
	}
}

void upgrade_heartbeat_ok(struct agent *a)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
	if (!a->up.pending_healthy)
		return;
	a->up.pending_healthy = 0;
	snprintf(path, sizeof path, "%s/upgrade.healthy", a->cfg.data_dir);
	snprintf(tmp, sizeof tmp, "%s/upgrade.healthy.tmp", a->cfg.data_dir);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, a->cfg.version, strlen(a->cfg.version)) < 0 || fsync(fd) != 0 ||
	    rename(tmp, path) != 0)
		log_error("cannot write %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	a->up.state = UPGRADE_DONE;
	a->up.error[0] = '\0';
	save(a);
	log_info("upgrade to %s (rollout %s) healthy: heartbeats answered on the new version",
	         a->cfg.version, a->up.rollout);
	heartbeat_now(a); /* the rollout waits for "done": not a whole interval later */
}

int upgrade_announcing(const struct agent *a)
{
	return a->up.announce_until_ms != 0;
}

void upgrade_announced(struct agent *a)
{
	if (a->up.announce_until_ms == 0)
		return;
	a->up.announce_until_ms = 0;
	a->up.busy = 0;
	exec_new_build(a, a->up.announce_gate_s);
}

json_t *upgrade_report(const struct agent *a)
{
	return upgrade_report_of(&a->up);
}

json_t *upgrade_report_of(const struct agent_upgrade *u)
{
	if (u->state == UPGRADE_IDLE)
		return NULL;
	json_t *r = json_pack("{s:s,s:s,s:s}", "version", u->version, "rollout", u->rollout,
	                      "state", STATE_NAMES[u->state]);
	if (u->error[0] != '\0')
		json_object_set_new(r, "error", json_string(u->error));
	if (u->previous_version[0] != '\0')
		json_object_set_new(r, "previous_version", json_string(u->previous_version));
	return r;
}

/* ---- exec ---- */

/* The agent's arguments for the next binary: our own, with argv[0] replaced and --worker
 * pinned (the default is "next to the agent binary", which a build in DATA_DIR/bin is not). */
static char **next_argv(const struct agent *a, const char *binary)
{
	int has_worker = 0;
	for (int i = 1; i < a->argc; i++)
		if (strcmp(a->argv[i], "--worker") == 0 || strncmp(a->argv[i], "--worker=", 9) == 0)
			has_worker = 1;
	char **v = calloc((size_t)a->argc + 3, sizeof *v);
	if (v == NULL)
		return NULL;
	int n = 0;
	v[n++] = (char *)binary;
	for (int i = 1; i < a->argc; i++)
		v[n++] = a->argv[i];
	if (!has_worker) {
		v[n++] = "--worker";
		v[n++] = (char *)a->cfg.worker_path;
	}
	v[n] = NULL;
	return v;
}

/* Forks the guardian from the running (previous) binary; its pid, or -1. */
static pid_t start_guardian(struct agent *a, char **rollback_argv, int gate_s)
{
	char pid_text[16], gate_text[16];
	int n = 0;
	for (char **p = rollback_argv; *p != NULL; p++)
		n++;
	char **v = calloc((size_t)n + 8, sizeof *v);
	if (v == NULL)
		return -1;
	snprintf(pid_text, sizeof pid_text, "%d", (int)getpid());
	snprintf(gate_text, sizeof gate_text, "%d", gate_s * 1000);
	int k = 0;
	v[k++] = a->cfg.self_path;
	v[k++] = "--upgrade-guardian";
	v[k++] = a->cfg.data_dir;
	v[k++] = pid_text;
	v[k++] = gate_text;
	v[k++] = a->up.version;
	v[k++] = "--";
	for (int i = 0; i < n; i++)
		v[k++] = rollback_argv[i];
	v[k] = NULL;
	/* The child holds our descriptors, the data dir's lock among them, until its exec
	 * closes them (close-on-exec): the new agent could not take the lock if we exec'd
	 * first. A close-on-exec pipe tells when the child has exec'd (EOF) or why it could not
	 * (errno), so this waits for exactly that. */
	int sync_pipe[2];
	if (pipe2(sync_pipe, O_CLOEXEC) != 0) {
		free(v);
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		close(sync_pipe[0]);
		execv(v[0], v);
		int e = errno;
		if (write(sync_pipe[1], &e, sizeof e) < 0)
			_exit(126);
		_exit(127);
	}
	close(sync_pipe[1]);
	if (pid > 0) {
		int e = 0;
		ssize_t got;
		while ((got = read(sync_pipe[0], &e, sizeof e)) < 0 && errno == EINTR)
			;
		if (got == (ssize_t)sizeof e) {
			waitpid(pid, NULL, 0);
			errno = e;
			pid = -1;
		}
	}
	close(sync_pipe[0]);
	free(v);
	return pid;
}

static void exec_new_build(struct agent *a, int gate_s)
{
	char marker[PATH_MAX + 32];
	char **argv_new = next_argv(a, a->up.new_path);
	char **argv_back = next_argv(a, a->cfg.self_path);
	if (argv_new == NULL || argv_back == NULL) {
		free(argv_new);
		free(argv_back);
		fail(a, UPGRADE_FAILED, "no memory for the new agent's arguments");
		return;
	}
	snprintf(marker, sizeof marker, "%s/upgrade.healthy", a->cfg.data_dir);
	unlink(marker);
	snprintf(a->up.previous_version, sizeof a->up.previous_version, "%s", a->cfg.version);
	snprintf(a->up.previous_path, sizeof a->up.previous_path, "%s", a->cfg.self_path);
	a->up.state = UPGRADE_RESTARTING;
	a->up.error[0] = '\0';
	ranks_save_state(a);
	if (metrics_handover(a) != 0)
		log_warn("cannot hand the metrics socket over: ranks' reports are lost until they "
		         "reconnect");
	a->up.guardian_pid = start_guardian(a, argv_back, gate_s);
	if (a->up.guardian_pid < 0) {
		free(argv_new);
		free(argv_back);
		fail(a, UPGRADE_FAILED, "cannot start the upgrade guardian: %s", strerror(errno));
		return;
	}
	save(a);
	log_info("upgrade to %s (rollout %s): exec %s with %d rank(s) running; guardian pid %d "
	         "rolls back to %s unless it heartbeats within %d s",
	         a->up.version, a->up.rollout, a->up.new_path, ranks_running(a),
	         (int)a->up.guardian_pid, a->cfg.version, gate_s);
	fflush(stdout);
	fflush(stderr);
	execv(a->up.new_path, argv_new);
	int e = errno;
	fcntl(a->metrics_fd, F_SETFD, FD_CLOEXEC); /* not handed over after all */
	unsetenv("YARD_AGENT_METRICS_FD");
	kill(a->up.guardian_pid, SIGKILL);
	waitpid(a->up.guardian_pid, NULL, 0);
	a->up.guardian_pid = 0;
	free(argv_new);
	free(argv_back);
	fail(a, UPGRADE_FAILED, "exec %s: %s", a->up.new_path, strerror(e));
}

/* ---- download and self-test, on the thread pool ---- */

struct upgrade_work {
	uv_work_t work;
	struct agent *agent;
	char url[1024];
	char token[256];
	char part[PATH_MAX + 64], path[PATH_MAX + 64], log[PATH_MAX + 64];
	char sha256[SHA256_HEX_LEN + 1];
	char node[AGENT_NAME_MAX + 1];
	int64_t size;
	int gate_s;
	int rc;
	char why[600];
};

int upgrade_fetch(const char *url, const char *token, const char *part, const char *path,
                  int64_t size, const char *sha256, char *why, size_t why_len)
{
	struct yard_err err = {0};
	char got[SHA256_HEX_LEN + 1];
	int64_t bytes = 0;
	int rc = agent_http_download(url, token, part, size, got, &bytes, &err);
	if (rc != 0) {
		snprintf(why, why_len, "%s", err.msg);
	} else if (bytes != size) {
		rc = YARD_ECORRUPT;
		snprintf(why, why_len, "download %s: %lld bytes, the build has %lld", url,
		         (long long)bytes, (long long)size);
	} else if (strcmp(got, sha256) != 0) {
		rc = YARD_ECORRUPT;
		snprintf(why, why_len, "download %s: sha256 %s, the build has %s", url, got,
		         sha256);
	} else if (chmod(part, 0755) != 0 || rename(part, path) != 0) {
		rc = YARD_EIO;
		snprintf(why, why_len, "cannot install %s: %s", path, strerror(errno));
	}
	if (rc != 0)
		unlink(part);
	return rc;
}

static void download_run(uv_work_t *w)
{
	struct upgrade_work *u = (struct upgrade_work *)w;
	u->rc = upgrade_fetch(u->url, u->token, u->part, u->path, u->size, u->sha256, u->why,
	                      sizeof u->why);
}

/* The last non-empty line of a log file, for a failure message. */
void upgrade_last_line(const char *path, char *out, size_t len)
{
	char buf[4096];
	out[0] = '\0';
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return;
	if (fseek(f, 0, SEEK_END) == 0) {
		long end = ftell(f);
		fseek(f, end > (long)sizeof buf - 1 ? end - (long)sizeof buf + 1 : 0, SEEK_SET);
	}
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	char *nl = strrchr(buf, '\n');
	snprintf(out, len, "%s", nl != NULL ? nl + 1 : buf);
}

int upgrade_run_check(char *const argv[], const char *log, int timeout_ms, char *why,
                      size_t why_len)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int status = 0;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		snprintf(why, why_len, "cannot run %s %s: %s", argv[0], argv[1] ? argv[1] : "",
		         strerror(rc));
		return YARD_EIO;
	}
	uint64_t deadline = yard_now_mono_ms() + (uint64_t)timeout_ms;
	pid_t got;
	while ((got = waitpid(pid, &status, WNOHANG)) == 0 && yard_now_mono_ms() < deadline)
		yard_sleep_ms(20);
	if (got == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		snprintf(why, why_len, "%s %s did not finish within %d s", argv[0],
		         argv[1] ? argv[1] : "", timeout_ms / 1000);
		return YARD_ETIMEDOUT;
	}
	if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char line[400];
		const char *what = argv[1] ? argv[1] + strspn(argv[1], "-") : argv[0];
		upgrade_last_line(log, line, sizeof line);
		snprintf(why, why_len, "%s failed (%s %d): %s", what,
		         got > 0 && WIFSIGNALED(status) ? "signal" : "exit",
		         got > 0 && WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
		         line[0] ? line : "no output");
		return YARD_EIO;
	}
	return 0;
}

static void selftest_run(uv_work_t *w)
{
	struct upgrade_work *u = (struct upgrade_work *)w;
	char *argv[] = {u->path, "--self-test", "--node", u->node, NULL};
	u->rc = upgrade_run_check(argv, u->log, UPGRADE_SELFTEST_TIMEOUT_MS, u->why, sizeof u->why);
}

static void selftest_after(uv_work_t *w, int status)
{
	struct upgrade_work *u = (struct upgrade_work *)w;
	struct agent *a = u->agent;
	(void)status;
	if (a->stopping) {
		free(u);
		return;
	}
	if (u->rc != 0) {
		fail(a, UPGRADE_FAILED, "%s", u->why);
	} else {
		char line[400];
		upgrade_last_line(u->log, line, sizeof line);
		log_info("upgrade to %s: %s; telling the leader the agent restarts", a->up.version,
		         line);
		/* busy until the exec: no other offer is taken meanwhile */
		a->up.state = UPGRADE_RESTARTING;
		a->up.announce_gate_s = u->gate_s;
		a->up.announce_until_ms = yard_now_mono_ms() + UPGRADE_ANNOUNCE_MS;
		heartbeat_now(a);
	}
	free(u);
}

static void download_after(uv_work_t *w, int status)
{
	struct upgrade_work *u = (struct upgrade_work *)w;
	struct agent *a = u->agent;
	(void)status;
	if (a->stopping) {
		free(u);
		return;
	}
	if (u->rc != 0) {
		fail(a, UPGRADE_FAILED, "%s", u->why);
		free(u);
		return;
	}
	log_info("upgrade to %s: downloaded %lld bytes, sha256 %s verified; running its self-test",
	         a->up.version, (long long)u->size, u->sha256);
	snprintf(a->up.new_path, sizeof a->up.new_path, "%s", u->path);
	a->up.state = UPGRADE_SELF_TEST;
	save(a);
	if (uv_queue_work(a->loop, &u->work, selftest_run, selftest_after) != 0) {
		fail(a, UPGRADE_FAILED, "cannot queue the self-test");
		free(u);
	}
}

/* ---- offers ---- */

int upgrade_offer_parse(const json_t *offer, const char *what, struct upgrade_offer *o,
                        struct yard_err *err)
{
	static const char *const keys[] = {"version", "sha256", "size",     "url",
	                                   "rollout", "gate_s", "rollback", NULL};
	const char *version = NULL, *rollout = NULL, *sha = NULL, *url = NULL;
	int64_t gate_s = UPGRADE_GATE_S_DEFAULT;
	memset(o, 0, sizeof *o);
	if (!json_is_object(offer))
		return yard_err_set(err, YARD_EINVAL, "%s: not an object", what);
	if (jsonx_only_keys(offer, what, keys, err) != 0 ||
	    jsonx_get_string(offer, what, "version", 1, 31, &version, err) != 0 ||
	    jsonx_get_string(offer, what, "rollout", 1, 31, &rollout, err) != 0 ||
	    jsonx_get_bool(offer, what, "rollback", 0, &o->rollback, err) != 0 ||
	    jsonx_get_int(offer, what, "gate_s", 0, 1, UPGRADE_GATE_S_MAX, &gate_s, err) != 0)
		return err->code;
	if (!upgrade_version_valid(version) || !upgrade_version_valid(rollout))
		return yard_err_set(err, YARD_EINVAL,
		                    "%s: version and rollout must be [A-Za-z0-9._+-]", what);
	snprintf(o->version, sizeof o->version, "%s", version);
	snprintf(o->rollout, sizeof o->rollout, "%s", rollout);
	o->gate_s = (int)gate_s;
	if (o->rollback)
		return 0;
	if (jsonx_get_string(offer, what, "sha256", 1, SHA256_HEX_LEN, &sha, err) != 0 ||
	    jsonx_get_int(offer, what, "size", 1, 1, UPGRADE_MAX_BYTES, &o->size, err) != 0 ||
	    jsonx_get_string(offer, what, "url", 1, 512, &url, err) != 0)
		return err->code;
	if (strlen(sha) != SHA256_HEX_LEN || strspn(sha, "0123456789abcdef") != SHA256_HEX_LEN)
		return yard_err_set(err, YARD_EINVAL, "%s.sha256: not 64 lower-case hex digits",
		                    what);
	if (strncmp(url, "/v1/", 4) != 0)
		return yard_err_set(err, YARD_EINVAL, "%s.url: '%s' is not a /v1/ path", what, url);
	snprintf(o->sha256, sizeof o->sha256, "%s", sha);
	snprintf(o->url, sizeof o->url, "%s", url);
	return 0;
}

static void roll_back(struct agent *a, const char *version, const char *rollout)
{
	char **argv_back;
	if (strcmp(a->cfg.version, version) == 0)
		return; /* already there */
	if (a->up.busy || a->up.state == UPGRADE_RESTARTING || a->up.pending_healthy)
		return; /* let the step in progress end first */
	if (strcmp(a->up.previous_version, version) != 0 ||
	    access(a->up.previous_path, X_OK) != 0) {
		if (a->up.state != UPGRADE_FAILED || strcmp(a->up.version, version) != 0) {
			snprintf(a->up.version, sizeof a->up.version, "%s", version);
			snprintf(a->up.rollout, sizeof a->up.rollout, "%s", rollout);
			fail(a, UPGRADE_FAILED, "cannot roll back to %s: the kept build is %s (%s)",
			     version, a->up.previous_version[0] ? a->up.previous_version : "none",
			     a->up.previous_path[0] ? a->up.previous_path : "no path");
		}
		return;
	}
	argv_back = next_argv(a, a->up.previous_path);
	if (argv_back == NULL)
		return;
	char from[32];
	snprintf(from, sizeof from, "%s", a->cfg.version);
	snprintf(a->up.error, sizeof a->up.error, "rollout %s rolled back by the controller",
	         rollout);
	snprintf(a->up.version, sizeof a->up.version, "%s", from);
	snprintf(a->up.rollout, sizeof a->up.rollout, "%s", rollout);
	a->up.state = UPGRADE_ROLLED_BACK;
	upgrade_refuse(&a->up);
	snprintf(a->up.previous_version, sizeof a->up.previous_version, "%s", from);
	ranks_save_state(a);
	/* the build we go back to ran here before; the current one stays as "previous" */
	char back_path[PATH_MAX];
	snprintf(back_path, sizeof back_path, "%s", argv_back[0]);
	argv_back[0] = back_path; /* it pointed into previous_path, rewritten below */
	snprintf(a->up.previous_path, sizeof a->up.previous_path, "%s", a->cfg.self_path);
	save(a);
	metrics_handover(a);
	log_warn("rollout %s rolled back: exec %s (version %s) with %d rank(s) running", rollout,
	         back_path, version, ranks_running(a));
	fflush(stdout);
	fflush(stderr);
	execv(back_path, argv_back);
	log_error("exec %s: %s", back_path, strerror(errno));
	fcntl(a->metrics_fd, F_SETFD, FD_CLOEXEC);
	unsetenv("YARD_AGENT_METRICS_FD");
	free(argv_back);
}

void upgrade_offer(struct agent *a, const json_t *offer)
{
	struct yard_err err = {0};
	struct upgrade_offer o;
	if (upgrade_offer_parse(offer, "upgrade", &o, &err) != 0) {
		log_warn("heartbeat answer: %s: ignored", err.msg);
		return;
	}
	const char *version = o.version, *rollout = o.rollout;
	if (o.rollback) {
		roll_back(a, version, rollout);
		return;
	}
	if (a->up.busy || a->up.pending_healthy)
		return;
	struct upgrade_work *u = calloc(1, sizeof *u);
	if (u == NULL)
		return;
	u->size = o.size;
	u->gate_s = o.gate_s;
	snprintf(u->sha256, sizeof u->sha256, "%s", o.sha256);
	snprintf(u->url, sizeof u->url, "%s", o.url);
	if (strcmp(version, a->cfg.version) == 0) {
		/* already on it (upgraded earlier, or rolled forward by hand) */
		if (a->up.state != UPGRADE_DONE || strcmp(a->up.rollout, rollout) != 0 ||
		    strcmp(a->up.version, version) != 0) {
			snprintf(a->up.version, sizeof a->up.version, "%s", version);
			snprintf(a->up.rollout, sizeof a->up.rollout, "%s", rollout);
			a->up.state = UPGRADE_DONE;
			a->up.error[0] = '\0';
			save(a);
		}
		free(u);
		return;
	}
	if (upgrade_is_refused(&a->up, rollout, version)) {
		free(u); /* the failure stays reported */
		return;
	}
	snprintf(a->up.version, sizeof a->up.version, "%s", version);
	snprintf(a->up.rollout, sizeof a->up.rollout, "%s", rollout);
	a->up.error[0] = '\0';
	u->agent = a;
	if (a->leader_url[0] == '\0') {
		free(u);
		return;
	}
	char url[sizeof u->url];
	snprintf(url, sizeof url, "%s", u->url);
	snprintf(u->url, sizeof u->url, "%s%s", a->leader_url, url);
	snprintf(u->token, sizeof u->token, "%s", a->node_token);
	snprintf(u->node, sizeof u->node, "%s", a->cfg.name);
	char dir[PATH_MAX + 8];
	snprintf(dir, sizeof dir, "%s/bin", a->cfg.data_dir);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		free(u);
		fail(a, UPGRADE_FAILED, "cannot create %s: %s", dir, strerror(errno));
		return;
	}
	snprintf(u->path, sizeof u->path, "%s/yard-agent-%s", dir, version);
	snprintf(u->part, sizeof u->part, "%s.part", u->path);
	snprintf(u->log, sizeof u->log, "%s/selftest-%s.log", dir, version);
	a->up.state = UPGRADE_DOWNLOADING;
	a->up.busy = 1;
	save(a);
	log_info("upgrade to %s offered by rollout %s: downloading %s (%lld bytes)", version,
	         rollout, u->url, (long long)u->size);
	if (uv_queue_work(a->loop, &u->work, download_run, download_after) != 0) {
		free(u);
		fail(a, UPGRADE_FAILED, "cannot queue the download");
	}
}
