/* workerup.c: the yard-worker build this node's new ranks run, and worker rollouts.
 *
 * At start the node's worker is the one --worker names (its version from `yard-worker
 * --version`), unless DATA_DIR/worker.json says a rollout installed another one since (and
 * --worker has not changed from what it was then). Every rank started from then on runs that
 * binary and remembers its version (ranks.c); heartbeats report the node's "worker_version",
 * each rank's, and the latest worker upgrade ("worker_upgrade": version, rollout, state,
 * error, previous_version) like upgrade.c reports agent upgrades.
 *
 * A heartbeat answer may carry {"worker_upgrade": {"version", "sha256", "size", "url",
 * "rollout", "gate_s"}} from a worker rollout (scheduler/rollout.c). On the thread pool the
 * agent then downloads the build with its node token into DATA_DIR/bin/yard-worker-VERSION
 * (size and sha256 checked, upgrade.c's helpers), runs `NEW --version`, which must print
 * VERSION, and `NEW --self-test --node NAME` (a few training steps of a small model), each
 * bounded in time. When both pass, the build becomes the node's worker and the one it
 * replaces is kept as the previous build ("done"); otherwise nothing changes ("failed", and
 * the build is not taken again for that rollout). Running ranks are not touched: they keep
 * the binary they were started with until they restart for any reason (a rollout's policy
 * "restart" makes that happen at once). {"worker_upgrade": {"version": PREVIOUS, "rollout",
 * "rollback": true}} makes that build the node's worker again ("rolled-back"): the one kept as
 * previous, the --worker one, or one a rollout installed before (DATA_DIR/bin), whichever has
 * that version. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/common.h"

#define WORKER_VERSION_TIMEOUT_MS 10000
#define WORKER_SELFTEST_TIMEOUT_MS 60000

/* ---- DATA_DIR/worker.json ---- */

static void copy_str(char *dst, size_t len, const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	snprintf(dst, len, "%s", s != NULL ? s : "");
}

static void save(const struct agent *a)
{
	const struct agent_worker *w = &a->worker;
	char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
	json_t *refused = json_array();
	for (int i = 0; i < w->up.n_refused; i++)
		json_array_append_new(refused, json_string(w->up.refused[i]));
	json_t *j = json_pack(
	    "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:o}", "version", w->version, "path", w->path,
	    "configured_path", a->cfg.worker_path, "configured_version", w->configured_version,
	    "state", upgrade_state_name(w->up.state), "offered", w->up.version, "rollout",
	    w->up.rollout, "error", w->up.error, "previous_version", w->up.previous_version,
	    "previous_path", w->up.previous_path, "refused", refused);
	snprintf(path, sizeof path, "%s/worker.json", a->cfg.data_dir);
	snprintf(tmp, sizeof tmp, "%s/worker.json.tmp", a->cfg.data_dir);
	if (json_dump_file(j, tmp, JSON_COMPACT) != 0 || rename(tmp, path) != 0)
		log_error("cannot write %s: %s", path, strerror(errno));
	json_decref(j);
}

static enum upgrade_state state_parse(const char *s)
{
	for (int i = UPGRADE_IDLE; i <= UPGRADE_ROLLED_BACK; i++)
		if (s != NULL && strcmp(s, upgrade_state_name((enum upgrade_state)i)) == 0)
			return (enum upgrade_state)i;
	return UPGRADE_IDLE;
}

/* What `binary --version` prints (its first line), or "unknown". */
static void ask_version(const struct agent *a, const char *binary, char *out, size_t len)
{
	char log[PATH_MAX + 32], why[600];
	char *argv[] = {(char *)binary, "--version", NULL};
	snprintf(log, sizeof log, "%s/worker-version.out", a->cfg.data_dir);
	snprintf(out, len, "unknown");
	char line[64];
	if (upgrade_run_check(argv, log, WORKER_VERSION_TIMEOUT_MS, why, sizeof why) != 0) {
		log_warn("worker %s: %s: its ranks report version unknown", binary, why);
	} else {
		upgrade_last_line(log, line, sizeof line);
		if (upgrade_version_valid(line))
			snprintf(out, len, "%s", line);
		else
			log_warn("worker %s --version printed '%s', not a version", binary, line);
	}
	unlink(log);
}

void workerup_init(struct agent *a)
{
	struct agent_worker *w = &a->worker;
	char path[PATH_MAX + 32];
	size_t i;
	json_t *v;
	memset(w, 0, sizeof *w);
	snprintf(path, sizeof path, "%s/worker.json", a->cfg.data_dir);
	json_t *j = json_load_file(path, 0, NULL);
	const char *configured = json_string_value(json_object_get(j, "configured_path"));
	if (j != NULL && configured != NULL && strcmp(configured, a->cfg.worker_path) != 0) {
		log_info("--worker is %s now (was %s): the worker builds rollouts installed are "
		         "forgotten",
		         a->cfg.worker_path, configured);
	} else if (j != NULL) {
		copy_str(w->version, sizeof w->version, j, "version");
		copy_str(w->path, sizeof w->path, j, "path");
		copy_str(w->configured_version, sizeof w->configured_version, j,
		         "configured_version");
		w->up.state = state_parse(json_string_value(json_object_get(j, "state")));
		copy_str(w->up.version, sizeof w->up.version, j, "offered");
		copy_str(w->up.rollout, sizeof w->up.rollout, j, "rollout");
		copy_str(w->up.error, sizeof w->up.error, j, "error");
		copy_str(w->up.previous_version, sizeof w->up.previous_version, j,
		         "previous_version");
		copy_str(w->up.previous_path, sizeof w->up.previous_path, j, "previous_path");
		json_array_foreach(json_object_get(j, "refused"), i, v)
		{
			if (w->up.n_refused < UPGRADE_REFUSED_MAX && json_is_string(v))
				snprintf(w->up.refused[w->up.n_refused++], sizeof w->up.refused[0],
				         "%s", json_string_value(v));
		}
		if (w->up.state == UPGRADE_DOWNLOADING || w->up.state == UPGRADE_SELF_TEST)
			w->up.state = UPGRADE_IDLE; /* stopped mid-way: the offer comes again */
		if (w->path[0] != '\0' && access(w->path, X_OK) != 0) {
			log_warn("worker %s (%s) from %s is gone: back to --worker %s", w->path,
			         w->version, path, a->cfg.worker_path);
			w->path[0] = '\0';
		}
	}
	json_decref(j);
	if (w->path[0] == '\0') {
		snprintf(w->path, sizeof w->path, "%s", a->cfg.worker_path);
		ask_version(a, w->path, w->version, sizeof w->version);
	}
	if (strcmp(w->path, a->cfg.worker_path) == 0)
		snprintf(w->configured_version, sizeof w->configured_version, "%s", w->version);
	else if (w->configured_version[0] == '\0')
		ask_version(a, a->cfg.worker_path, w->configured_version,
		            sizeof w->configured_version);
	save(a);
	log_info("ranks start with worker %s (version %s)", w->path, w->version);
}

json_t *workerup_report(const struct agent *a)
{
	return upgrade_report_of(&a->worker.up);
}

/* ---- install: on the thread pool ---- */

struct worker_install {
	uv_work_t work;
	struct agent *agent;
	char url[1100], token[256], node[AGENT_NAME_MAX + 1];
	char sha256[72], version[32];
	char part[PATH_MAX + 64], path[PATH_MAX + 64], log[PATH_MAX + 64];
	int64_t size;
	int rc;
	char why[600];
	char said[400]; /* the self-test's last line */
};

static void install_run(uv_work_t *req)
{
	struct worker_install *u = (struct worker_install *)req;
	u->rc = upgrade_fetch(u->url, u->token, u->part, u->path, u->size, u->sha256, u->why,
	                      sizeof u->why);
	if (u->rc != 0)
		return;
	char *version_argv[] = {u->path, "--version", NULL};
	u->rc = upgrade_run_check(version_argv, u->log, WORKER_VERSION_TIMEOUT_MS, u->why,
	                          sizeof u->why);
	if (u->rc != 0)
		return;
	char line[64];
	upgrade_last_line(u->log, line, sizeof line);
	if (strcmp(line, u->version) != 0) {
		u->rc = YARD_ECORRUPT;
		snprintf(u->why, sizeof u->why, "%s --version says '%s', not %s", u->path, line,
		         u->version);
		return;
	}
	char *selftest_argv[] = {u->path, "--self-test", "--node", u->node, NULL};
	u->rc = upgrade_run_check(selftest_argv, u->log, WORKER_SELFTEST_TIMEOUT_MS, u->why,
	                          sizeof u->why);
	if (u->rc == 0)
		upgrade_last_line(u->log, u->said, sizeof u->said);
}

static void install_failed(struct agent *a, const char *why)
{
	struct agent_upgrade *up = &a->worker.up;
	snprintf(up->error, sizeof up->error, "%s", why);
	up->state = UPGRADE_FAILED;
	up->busy = 0;
	upgrade_refuse(up);
	log_error("worker build %s (rollout %s) not installed: %s; ranks keep starting with %s",
	          up->version, up->rollout, why, a->worker.version);
	save(a);
}

static void install_after(uv_work_t *req, int status)
{
	struct worker_install *u = (struct worker_install *)req;
	struct agent *a = u->agent;
	struct agent_worker *w = &a->worker;
	(void)status;
	if (a->stopping) {
		free(u);
		return;
	}
	if (u->rc != 0) {
		install_failed(a, u->why);
		free(u);
		return;
	}
	snprintf(w->up.previous_version, sizeof w->up.previous_version, "%s", w->version);
	snprintf(w->up.previous_path, sizeof w->up.previous_path, "%s", w->path);
	snprintf(w->version, sizeof w->version, "%s", u->version);
	snprintf(w->path, sizeof w->path, "%s", u->path);
	w->up.state = UPGRADE_DONE;
	w->up.error[0] = '\0';
	w->up.busy = 0;
	save(a);
	log_info("worker build %s (rollout %s) installed: sha256 verified, %s; ranks started from "
	         "now on run it, the %d running keep theirs (previous build %s kept)",
	         w->version, w->up.rollout, u->said, ranks_running(a), w->up.previous_version);
	free(u);
}

/* ---- offers ---- */

/* A binary of version this node still has: the previous build, the --worker one, or one a
 * rollout installed (checked then) into DATA_DIR/bin. 0 and its path, or -1. */
static int find_build(const struct agent *a, const char *version, char *path, size_t len)
{
	const struct agent_worker *w = &a->worker;
	if (strcmp(w->up.previous_version, version) == 0 && access(w->up.previous_path, X_OK) == 0)
		snprintf(path, len, "%s", w->up.previous_path);
	else if (strcmp(w->configured_version, version) == 0 &&
	         access(a->cfg.worker_path, X_OK) == 0)
		snprintf(path, len, "%s", a->cfg.worker_path);
	else if (snprintf(path, len, "%s/bin/yard-worker-%s", a->cfg.data_dir, version) < 0 ||
	         access(path, X_OK) != 0)
		return -1;
	return 0;
}

static void roll_back(struct agent *a, const char *version, const char *rollout)
{
	struct agent_worker *w = &a->worker;
	char back_path[PATH_MAX];
	if (strcmp(w->version, version) == 0 || w->up.busy)
		return; /* already there, or let the install in progress end first */
	snprintf(w->up.rollout, sizeof w->up.rollout, "%s", rollout);
	if (find_build(a, version, back_path, sizeof back_path) != 0) {
		if (w->up.state != UPGRADE_FAILED || strcmp(w->up.version, version) != 0) {
			char why[400];
			snprintf(w->up.version, sizeof w->up.version, "%s", version);
			snprintf(why, sizeof why,
			         "cannot roll back to %s: this node has no worker of that version "
			         "(previous %s, --worker %s)",
			         version,
			         w->up.previous_version[0] ? w->up.previous_version : "none",
			         w->configured_version);
			install_failed(a, why);
		}
		return;
	}
	char from_version[32], from_path[PATH_MAX];
	snprintf(from_version, sizeof from_version, "%s", w->version);
	snprintf(from_path, sizeof from_path, "%s", w->path);
	snprintf(w->version, sizeof w->version, "%s", version);
	snprintf(w->path, sizeof w->path, "%s", back_path);
	snprintf(w->up.previous_version, sizeof w->up.previous_version, "%s", from_version);
	snprintf(w->up.previous_path, sizeof w->up.previous_path, "%s", from_path);
	snprintf(w->up.version, sizeof w->up.version, "%s", from_version);
	snprintf(w->up.error, sizeof w->up.error, "rollout %s rolled back by the controller",
	         rollout);
	w->up.state = UPGRADE_ROLLED_BACK;
	upgrade_refuse(&w->up);
	save(a);
	log_warn("rollout %s rolled back: ranks start with worker %s (%s) again; %s is kept",
	         rollout, w->version, w->path, from_version);
}

void workerup_offer(struct agent *a, const json_t *offer)
{
	struct agent_worker *w = &a->worker;
	struct yard_err err = {0};
	struct upgrade_offer o;
	if (upgrade_offer_parse(offer, "worker_upgrade", &o, &err) != 0) {
		log_warn("heartbeat answer: %s: ignored", err.msg);
		return;
	}
	if (o.rollback) {
		roll_back(a, o.version, o.rollout);
		return;
	}
	if (w->up.busy)
		return;
	if (strcmp(o.version, w->version) == 0) {
		/* already on it */
		if (w->up.state != UPGRADE_DONE || strcmp(w->up.rollout, o.rollout) != 0 ||
		    strcmp(w->up.version, o.version) != 0) {
			snprintf(w->up.version, sizeof w->up.version, "%s", o.version);
			snprintf(w->up.rollout, sizeof w->up.rollout, "%s", o.rollout);
			w->up.state = UPGRADE_DONE;
			w->up.error[0] = '\0';
			save(a);
		}
		return;
	}
	if (upgrade_is_refused(&w->up, o.rollout, o.version) || a->leader_url[0] == '\0')
		return; /* a failure stays reported */
	snprintf(w->up.version, sizeof w->up.version, "%s", o.version);
	snprintf(w->up.rollout, sizeof w->up.rollout, "%s", o.rollout);
	w->up.error[0] = '\0';
	char dir[PATH_MAX + 8];
	snprintf(dir, sizeof dir, "%s/bin", a->cfg.data_dir);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		char why[PATH_MAX + 64];
		snprintf(why, sizeof why, "cannot create %s: %s", dir, strerror(errno));
		install_failed(a, why);
		return;
	}
	struct worker_install *u = calloc(1, sizeof *u);
	if (u == NULL)
		return;
	u->agent = a;
	u->size = o.size;
	snprintf(u->url, sizeof u->url, "%s%s", a->leader_url, o.url);
	snprintf(u->token, sizeof u->token, "%s", a->node_token);
	snprintf(u->node, sizeof u->node, "%s", a->cfg.name);
	snprintf(u->sha256, sizeof u->sha256, "%s", o.sha256);
	snprintf(u->version, sizeof u->version, "%s", o.version);
	snprintf(u->path, sizeof u->path, "%s/yard-worker-%s", dir, o.version);
	snprintf(u->part, sizeof u->part, "%s.part", u->path);
	snprintf(u->log, sizeof u->log, "%s/worker-check-%s.log", dir, o.version);
	w->up.state = UPGRADE_DOWNLOADING;
	w->up.busy = 1;
	save(a);
	log_info("worker build %s offered by rollout %s: downloading %s (%lld bytes), then its "
	         "--version and --self-test",
	         o.version, o.rollout, u->url, (long long)u->size);
	if (uv_queue_work(a->loop, &u->work, install_run, install_after) != 0) {
		free(u);
		install_failed(a, "cannot queue the download");
	}
}
