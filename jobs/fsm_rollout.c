/* fsm_rollout.c: rollouts, the replicated half (issue 7): a build moved onto the agents of a
 * set of nodes in waves. An agent build replaces the agents in place; a worker build becomes
 * the yard-worker the nodes start ranks with (running ranks keep theirs unless the policy is
 * "restart"), and the nodes' "version" column, the agent's, is left alone. The leader's driver
 * (scheduler/rollout.c) decides when a step is due from heartbeats; these commands record each
 * step, re-check that it follows the one before (a stale leader's proposal is refused), make its
 * side effects (cordons, node versions) in the same apply, and append the event that tells it.
 *
 *   rollout.start    {build, waves, soak_ms, gate_timeout_ms, selector, failure_budget,
 *                     policy, step_time_regression_pct}: targets and waves fixed now
 *   rollout.advance  {id, from_state, from_wave, from_phase, state, wave, phase, reason,
 *                     baseline_step_ms, from_versions}: the next step of the state machine
 *                     (from_versions {NODE: VERSION}: a worker rollout's nodes' worker
 *                     versions as they heartbeat, recorded when the wave's upgrade starts)
 *   rollout.node     {id, node, state, version, error}: one node's gate outcome
 *   rollout.control  {id, action, reason}: pause, resume, abort, rollback (operators)
 *
 * States: pending → running (wave i: cordon → upgrade → verify → soak → uncordon) →
 * completed; running|pending ⇄ paused; → aborted (stops where it is, cordons lifted);
 * → rolling-back → rolled-back (nodes back on the build they had). A failed gate rolls the
 * current wave back; `rollback` rolls back every node the rollout touched. At most one
 * rollout is active (pending, running, paused, rolling-back) at a time.
 *
 * The plan column holds {"waves": [{"target", "nodes", "state", "started_ms", "ended_ms",
 * "baseline_step_ms"}], "nodes": {ID: {"wave", "state", "from_version", "version", "error",
 * "cordoned"}}}, written with sorted keys so every member stores the same bytes. Node
 * states: pending → upgrading → upgraded | failed; → rolling-back → rolled-back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "jobs/fsm_internal.h"

#define ROLLOUT_WAVES_MAX 16
#define ROLLOUT_NODES_MAX 4096

static const char *const STATES[] = {"pending", "running",      "paused",      "completed",
                                     "aborted", "rolling-back", "rolled-back", NULL};
static const char *const PHASES[] = {"", "cordon", "upgrade", "verify", "soak", "uncordon", NULL};
static const char *const NODE_STATES[] = {"pending",      "upgrading",   "upgraded", "failed",
                                          "rolling-back", "rolled-back", NULL};

static int in_list(const char *s, const char *const *list)
{
	for (int i = 0; list[i] != NULL; i++)
		if (strcmp(s, list[i]) == 0)
			return 1;
	return 0;
}

int fsm_rollout_state_active(const char *state)
{
	return strcmp(state, "pending") == 0 || strcmp(state, "running") == 0 ||
	       strcmp(state, "paused") == 0 || strcmp(state, "rolling-back") == 0;
}

/* ---- the row ---- */

struct rollout_row {
	char id[FSM_ID_MAX];
	char build[32];
	char state[16];
	char phase[16];
	int64_t wave, failures;
	json_t *spec; /* owned */
	json_t *plan; /* owned */
};

static void row_free(struct rollout_row *r)
{
	json_decref(r->spec);
	json_decref(r->plan);
	r->spec = r->plan = NULL;
}

static json_t *row_read(struct fsm *f, const char *id, struct rollout_row *r)
{
	memset(r, 0, sizeof *r);
	sqlite3_stmt *st = fsm_prepare(
	    f, "SELECT id, build, state, phase, wave, failures, spec, plan FROM rollouts"
	       " WHERE id = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "internal error reading rollout %s", id);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	json_t *res = NULL;
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(r->id, sizeof r->id, "%s", (const char *)sqlite3_column_text(st, 0));
		snprintf(r->build, sizeof r->build, "%s", (const char *)sqlite3_column_text(st, 1));
		snprintf(r->state, sizeof r->state, "%s", (const char *)sqlite3_column_text(st, 2));
		snprintf(r->phase, sizeof r->phase, "%s", (const char *)sqlite3_column_text(st, 3));
		r->wave = sqlite3_column_int64(st, 4);
		r->failures = sqlite3_column_int64(st, 5);
		r->spec = jsonx_loads((const char *)sqlite3_column_text(st, 6));
		r->plan = jsonx_loads((const char *)sqlite3_column_text(st, 7));
		if (r->spec == NULL || r->plan == NULL)
			res = fsm_res_err(500, NULL, "rollout %s: stored spec or plan is not JSON",
			                  id);
	} else {
		res = fsm_res_err(404, "id", "no rollout %s", id);
	}
	fsm_release(f, st);
	if (res != NULL)
		row_free(r);
	return res;
}

/* Writes state, wave, phase, failures and plan back; phase_since moves when the step did. */
static int row_write(struct fsm *f, const struct rollout_row *r, int64_t ts, const char *reason,
                     int new_step)
{
	char *plan = json_dumps(r->plan, JSON_COMPACT | JSON_SORT_KEYS);
	int rc = fsm_run(f,
	                 "UPDATE rollouts SET state = ?2, wave = ?3, phase = ?4, failures = ?5,"
	                 " plan = ?6, updated_ms = ?7,"
	                 " phase_since_ms = CASE WHEN ?8 THEN ?7 ELSE phase_since_ms END,"
	                 " reason = COALESCE(?9, reason) WHERE id = ?1",
	                 "ssisisiis", r->id, r->state, r->wave, r->phase, r->failures, plan, ts,
	                 (int64_t)new_step, reason);
	free(plan);
	return rc == SQLITE_DONE ? 0 : YARD_EINTERNAL;
}

static json_t *wave_at(const struct rollout_row *r, int64_t w)
{
	return json_array_get(json_object_get(r->plan, "waves"), (size_t)w);
}

static json_t *plan_node(const struct rollout_row *r, const char *node)
{
	return json_object_get(json_object_get(r->plan, "nodes"), node);
}

static const char *node_state(const json_t *n)
{
	const char *s = json_string_value(json_object_get(n, "state"));
	return s != NULL ? s : "";
}

static void set_str(json_t *obj, const char *key, const char *value)
{
	json_object_set_new(obj, key, json_string(value));
}

/* "a, b, c" of a JSON array of strings (truncated to fit). */
static void join_names(const json_t *names, char *out, size_t len)
{
	size_t i, n = 0;
	json_t *v;
	out[0] = '\0';
	json_array_foreach(names, i, v)
	{
		if (n < len)
			n += (size_t)snprintf(out + n, len - n, "%s%s", i ? ", " : "",
			                      json_string_value(v));
	}
}

/* Cordons (1) or lifts the rollout's own cordons (0) on the nodes of a JSON array. Nodes an
 * operator cordoned before the rollout stay cordoned. */
static int cordon_nodes(struct fsm *f, struct rollout_row *r, const json_t *nodes, int on,
                        int64_t ts, char *done, size_t done_len)
{
	size_t i, n = 0;
	json_t *v;
	done[0] = '\0';
	json_array_foreach(nodes, i, v)
	{
		const char *id = json_string_value(v);
		json_t *pn = plan_node(r, id);
		if (pn == NULL)
			continue;
		if (on) {
			sqlite3_stmt *st =
			    fsm_prepare(f, "SELECT cordoned FROM nodes WHERE id = ?1");
			int already = 1;
			if (st == NULL)
				return YARD_EINTERNAL;
			sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
			if (sqlite3_step(st) == SQLITE_ROW)
				already = sqlite3_column_int(st, 0) != 0;
			fsm_release(f, st);
			if (already)
				continue;
		} else if (!json_is_true(json_object_get(pn, "cordoned"))) {
			continue;
		}
		if (fsm_run(f, "UPDATE nodes SET cordoned = ?2, updated_ms = ?3 WHERE id = ?1",
		            "sii", id, (int64_t)on, ts) != SQLITE_DONE)
			return YARD_EINTERNAL;
		json_object_set_new(pn, "cordoned", json_boolean(on));
		if (n < done_len)
			n += (size_t)snprintf(done + n, done_len - n, "%s%s", n ? ", " : "", id);
	}
	return 0;
}

static int uncordon_all(struct fsm *f, struct rollout_row *r, int64_t ts, char *done,
                        size_t done_len)
{
	json_t *ids = json_array();
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(r->plan, "nodes"), k, v)
	    json_array_append_new(ids, json_string(k));
	int rc = cordon_nodes(f, r, ids, 0, ts, done, done_len);
	json_decref(ids);
	return rc;
}

/* Marks the nodes that must go back to their previous build: those of wave w, or of every
 * wave when w < 0. Returns how many. */
static int mark_rolling_back(struct rollout_row *r, int64_t w)
{
	const char *k;
	json_t *n;
	int count = 0;
	json_object_foreach(json_object_get(r->plan, "nodes"), k, n)
	{
		const char *s = node_state(n);
		if (w >= 0 && json_integer_value(json_object_get(n, "wave")) != w)
			continue;
		if (strcmp(s, "upgrading") == 0 || strcmp(s, "upgraded") == 0 ||
		    strcmp(s, "failed") == 0) {
			set_str(n, "state", "rolling-back");
			count++;
		}
	}
	return count;
}

/* A rollout of a worker build (its nodes' agents stay as they are). */
static int of_worker(const struct rollout_row *r)
{
	const char *c = json_string_value(json_object_get(r->spec, "component"));
	return c != NULL && strcmp(c, "worker") == 0;
}

/* The agent version node registered or was last upgraded to, into out ("" when none). */
static int node_version(struct fsm *f, const char *node, char *out, size_t len)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT version FROM nodes WHERE id = ?1");
	if (st == NULL)
		return YARD_EINTERNAL;
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	out[0] = '\0';
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
		snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
	fsm_release(f, st);
	return 0;
}

static int from_versions_valid(const json_t *v)
{
	const char *k;
	json_t *x;
	if (!json_is_object(v) || json_object_size(v) > ROLLOUT_NODES_MAX)
		return 0;
	json_object_foreach((json_t *)v, k, x)
	{
		if (!json_is_string(x) || json_string_length(x) > 31 || strlen(k) > FSM_NAME_MAX)
			return 0;
	}
	return 1;
}

/* ---- rollout.start ---- */

int fsm_wave_target_parse(const char *s, int64_t *count, int *percent)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (end == s || v < 1)
		return -1;
	if (*end == '%' && end[1] == '\0' && v <= 100) {
		*percent = 1;
		*count = v;
		return 0;
	}
	if (*end != '\0' || v > ROLLOUT_NODES_MAX)
		return -1;
	*percent = 0;
	*count = v;
	return 0;
}

static int selector_matches(const json_t *selector, const char *labels_text)
{
	if (json_object_size(selector) == 0)
		return 1;
	json_t *labels = jsonx_loads(labels_text);
	const char *k;
	json_t *v;
	int ok = 1;
	json_object_foreach((json_t *)selector, k, v)
	{
		const char *have = json_string_value(json_object_get(labels, k));
		if (have == NULL || strcmp(have, json_string_value(v)) != 0)
			ok = 0;
	}
	json_decref(labels);
	return ok;
}

json_t *fsm_op_rollout_start(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {
	    "build",    "waves",          "soak_ms", "gate_timeout_ms",
	    "selector", "failure_budget", "policy",  "step_time_regression_pct",
	    NULL};
	struct yard_err e = {0};
	const char *build = NULL, *policy = NULL;
	int64_t soak_ms = 0, gate_ms = 60000, budget = 0, regression_pct = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "build", 1, 31, &build, &e) != 0 ||
	    jsonx_get_int(c->args, "", "soak_ms", 0, 0, 7 * 24 * 3600 * 1000LL, &soak_ms, &e) !=
	        0 ||
	    jsonx_get_int(c->args, "", "gate_timeout_ms", 0, 1000, 3600 * 1000LL, &gate_ms, &e) !=
	        0 ||
	    jsonx_get_int(c->args, "", "failure_budget", 0, 0, ROLLOUT_NODES_MAX, &budget, &e) !=
	        0 ||
	    jsonx_get_string(c->args, "", "policy", 0, 16, &policy, &e) != 0 ||
	    jsonx_get_int(c->args, "", "step_time_regression_pct", 0, 0, 1000, &regression_pct,
	                  &e) != 0)
		return fsm_res_from_err(&e);
	if (policy != NULL && strcmp(policy, "keep") != 0 && strcmp(policy, "restart") != 0 &&
	    strcmp(policy, "next") != 0)
		return fsm_res_err(400, "policy", "policy: '%s' is not keep, restart or next",
		                   policy);
	json_t *waves = json_object_get(c->args, "waves");
	json_t *selector = json_object_get(c->args, "selector");
	size_t i;
	json_t *v;
	if (waves == NULL) {
		waves = json_pack("[s]", "100%");
	} else {
		if (!json_is_array(waves) || json_array_size(waves) < 1 ||
		    json_array_size(waves) > ROLLOUT_WAVES_MAX)
			return fsm_res_err(400, "waves", "waves: must be 1..%d wave sizes",
			                   ROLLOUT_WAVES_MAX);
		json_incref(waves);
	}
	json_array_foreach(waves, i, v)
	{
		int64_t count;
		int percent;
		if (!json_is_string(v) ||
		    fsm_wave_target_parse(json_string_value(v), &count, &percent) != 0) {
			json_decref(waves);
			return fsm_res_err(400, "waves",
			                   "waves[%zu]: '%s' is not a node count (1..%d) or a "
			                   "percentage (1%%..100%%)",
			                   i, json_is_string(v) ? json_string_value(v) : "?",
			                   ROLLOUT_NODES_MAX);
		}
	}
	if (selector != NULL && !json_is_null(selector)) {
		const char *k;
		if (!json_is_object(selector) || json_object_size(selector) > 16) {
			json_decref(waves);
			return fsm_res_err(400, "selector",
			                   "selector: must be an object of at most 16 labels");
		}
		json_object_foreach(selector, k, v)
		{
			if (!fsm_valid_name(k) || !json_is_string(v) ||
			    json_string_length(v) > 63) {
				json_decref(waves);
				return fsm_res_err(
				    400, "selector",
				    "selector.%.63s: label names are [A-Za-z0-9._-], "
				    "values strings of at most 63 bytes",
				    k);
			}
		}
	} else {
		selector = NULL;
	}

	/* the build: committed, and an agent build */
	char sha256[SHA256_HEX_LEN + 1] = "", component[16] = "", bstate[16] = "";
	int64_t size = 0;
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT sha256, size, component, state FROM builds WHERE version = ?1");
	if (st == NULL) {
		json_decref(waves);
		return NULL;
	}
	sqlite3_bind_text(st, 1, build, -1, SQLITE_STATIC);
	int found = sqlite3_step(st) == SQLITE_ROW;
	if (found) {
		snprintf(sha256, sizeof sha256, "%s", (const char *)sqlite3_column_text(st, 0));
		size = sqlite3_column_int64(st, 1);
		snprintf(component, sizeof component, "%s",
		         (const char *)sqlite3_column_text(st, 2));
		snprintf(bstate, sizeof bstate, "%s", (const char *)sqlite3_column_text(st, 3));
	}
	fsm_release(f, st);
	json_t *err = NULL;
	if (!found)
		err = fsm_res_err(404, "build", "build: no build %s (upload it first)", build);
	else if (strcmp(bstate, "ready") != 0)
		err = fsm_res_err(409, "build", "build: %s is %s, not ready", build, bstate);
	else if (strcmp(component, "agent") != 0 && strcmp(component, "worker") != 0)
		err = fsm_res_err(409, "build",
		                  "build: %s is a %s build; rollouts move agent and worker builds",
		                  build, component);
	else if (policy != NULL && strcmp(policy, "next") == 0 && strcmp(component, "agent") == 0)
		err = fsm_res_err(400, "policy",
		                  "policy: 'next' is for worker builds (ranks take the build when "
		                  "they next restart); agent build %s replaces the agents in place "
		                  "under running ranks: use keep or restart",
		                  build);
	if (policy ==
	    NULL) /* agents: ranks keep running; workers: they take it when they restart */
		policy = strcmp(component, "worker") == 0 ? "next" : "keep";
	if (err != NULL) {
		json_decref(waves);
		return err;
	}
	st = fsm_prepare(f, "SELECT id FROM rollouts WHERE state IN ('pending', 'running',"
	                    " 'paused', 'rolling-back') LIMIT 1");
	if (st == NULL) {
		json_decref(waves);
		return NULL;
	}
	if (sqlite3_step(st) == SQLITE_ROW)
		err = fsm_res_err(409, "build",
		                  "rollout %s is still active: abort it or wait for it to end",
		                  (const char *)sqlite3_column_text(st, 0));
	fsm_release(f, st);
	if (err != NULL) {
		json_decref(waves);
		return err;
	}

	/* targets, by id */
	json_t *targets = json_array();
	st = fsm_prepare(f, "SELECT id, labels FROM nodes ORDER BY id");
	if (st == NULL) {
		json_decref(waves);
		json_decref(targets);
		return NULL;
	}
	while (sqlite3_step(st) == SQLITE_ROW)
		if (selector_matches(selector, (const char *)sqlite3_column_text(st, 1)))
			json_array_append_new(
			    targets, json_string((const char *)sqlite3_column_text(st, 0)));
	fsm_release(f, st);
	int64_t n_targets = (int64_t)json_array_size(targets);
	if (n_targets == 0) {
		json_decref(waves);
		json_decref(targets);
		return fsm_res_err(409, "selector", "selector: no registered node matches");
	}

	/* waves are cumulative: "1,50%" upgrades 1 node, then up to half; a final 100% is implied
	 */
	json_t *plan_waves = json_array(), *plan_nodes = json_object();
	int64_t done = 0;
	json_t *last = json_string("100%");
	json_array_append_new(waves, last);
	json_array_foreach(waves, i, v)
	{
		int64_t count = 0;
		int percent = 0;
		fsm_wave_target_parse(json_string_value(v), &count, &percent);
		int64_t upto = percent ? (count * n_targets + 99) / 100 : count;
		upto = YARD_MIN(upto, n_targets);
		if (upto <= done)
			continue;
		json_t *names = json_array();
		for (int64_t k = done; k < upto; k++) {
			json_t *id = json_array_get(targets, (size_t)k);
			json_array_append(names, id);
			json_object_set_new(plan_nodes, json_string_value(id),
			                    json_pack("{s:I,s:s,s:s,s:s,s:s,s:b}", "wave",
			                              (json_int_t)json_array_size(plan_waves),
			                              "state", "pending", "from_version", "",
			                              "version", "", "error", "", "cordoned", 0));
		}
		json_array_append_new(plan_waves,
		                      json_pack("{s:O,s:o,s:s,s:n,s:n,s:n}", "target", v, "nodes",
		                                names, "state", "pending", "started_ms", "ended_ms",
		                                "baseline_step_ms"));
		done = upto;
	}
	json_array_remove(waves, json_array_size(waves) - 1);
	json_t *plan = json_pack("{s:o,s:o}", "waves", plan_waves, "nodes", plan_nodes);
	json_t *spec =
	    json_pack("{s:s,s:s,s:I,s:s,s:o,s:I,s:I,s:o,s:I,s:s,s:I}", "build", build, "sha256",
	              sha256, "size", (json_int_t)size, "component", component, "waves", waves,
	              "soak_ms", (json_int_t)soak_ms, "gate_timeout_ms", (json_int_t)gate_ms,
	              "selector", selector ? json_deep_copy(selector) : json_object(),
	              "failure_budget", (json_int_t)budget, "policy", policy,
	              "step_time_regression_pct", (json_int_t)regression_pct);
	int64_t seq = fsm_meta_next(f, "rollout_seq");
	char id[FSM_ID_MAX];
	snprintf(id, sizeof id, "ro-%06lld", (long long)seq);
	char *spec_text = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
	char *plan_text = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS);
	size_t n_waves = json_array_size(plan_waves);
	json_decref(spec);
	json_decref(plan);
	json_decref(targets);
	int rc = seq < 0
	             ? SQLITE_ERROR
	             : fsm_run(f,
	                       "INSERT INTO rollouts(id, seq, build, state, wave, phase,"
	                       " phase_since_ms, failures, spec, plan, actor, created_ms,"
	                       " updated_ms) VALUES(?1, ?2, ?3, 'pending', 0, '', ?4, 0, ?5,"
	                       " ?6, ?7, ?4, ?4)",
	                       "sisisss", id, seq, build, c->ts, spec_text, plan_text, c->actor);
	free(spec_text);
	free(plan_text);
	if (rc != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "rollout.created", NULL, c->actor,
	                     "rollout %s of %s build %s created by %s: %lld node(s) in %zu "
	                     "wave(s), soak %lld s, gate %lld s, failure budget %lld, policy %s",
	                     id, component, build, c->actor, (long long)n_targets, n_waves,
	                     (long long)soak_ms / 1000, (long long)gate_ms / 1000,
	                     (long long)budget, policy) != 0)
		return NULL;
	struct yard_err qe = {0};
	json_t *body = fsm_rollout_get(f, id, &qe);
	return body ? fsm_res_ok(201, body) : NULL;
}

/* ---- rollout.advance ---- */

static json_t *result_of(struct fsm *f, const char *id, int status)
{
	struct yard_err qe = {0};
	json_t *body = fsm_rollout_get(f, id, &qe);
	return body ? fsm_res_ok(status, body) : NULL;
}

/* The effects and event of entering (state, wave, phase); r already holds the new values. */
static json_t *enter_step(struct fsm *f, const struct fsm_cmd *c, struct rollout_row *r,
                          const char *reason, double baseline_step_ms, int64_t from_wave,
                          const json_t *from_versions)
{
	char names[400], type[40];
	int64_t n_waves = (int64_t)json_array_size(json_object_get(r->plan, "waves"));
	json_t *wave = wave_at(r, r->wave);
	const json_t *wave_nodes = json_object_get(wave, "nodes");
	char msg[512] = "";
	if (baseline_step_ms > 0 && wave != NULL) /* step time before the upgrade, for the gate */
		json_object_set_new(wave, "baseline_step_ms", json_real(baseline_step_ms));
	snprintf(type, sizeof type, "rollout.%s",
	         strcmp(r->state, "running") == 0 ? r->phase : r->state);
	if (strcmp(r->state, "running") == 0 && strcmp(r->phase, "cordon") == 0) {
		set_str(wave, "state", "running");
		json_object_set_new(wave, "started_ms", json_integer(c->ts));
		if (cordon_nodes(f, r, wave_nodes, 1, c->ts, names, sizeof names) != 0)
			return NULL;
		join_names(wave_nodes, msg, sizeof msg);
		snprintf(type, sizeof type, "rollout.wave");
		snprintf(names + strlen(names), sizeof names - strlen(names), "%s",
		         names[0] ? "" : "none newly");
		char text[1000];
		snprintf(text, sizeof text, "wave %lld/%lld started on %s; cordoned: %s",
		         (long long)r->wave + 1, (long long)n_waves, msg, names);
		snprintf(msg, sizeof msg, "%s", text);
	} else if (strcmp(r->state, "running") == 0 && strcmp(r->phase, "upgrade") == 0) {
		size_t i, n = 0;
		json_t *v;
		json_array_foreach(wave_nodes, i, v)
		{
			json_t *pn = plan_node(r, json_string_value(v));
			char from[32] = "";
			if (of_worker(r)) {
				const char *w = json_string_value(
				    json_object_get(from_versions, json_string_value(v)));
				snprintf(from, sizeof from, "%s", w != NULL ? w : "");
			} else if (node_version(f, json_string_value(v), from, sizeof from) != 0) {
				return NULL;
			}
			set_str(pn, "state", "upgrading");
			set_str(pn, "from_version", from);
			if (n < sizeof names)
				n += (size_t)snprintf(names + n, sizeof names - n, "%s%s (%s)",
				                      i ? ", " : "", json_string_value(v),
				                      from[0] ? from : "unknown");
		}
		snprintf(msg, sizeof msg, "wave %lld/%lld: upgrading %s to %s",
		         (long long)r->wave + 1, (long long)n_waves, names, r->build);
	} else if (strcmp(r->state, "running") == 0 && strcmp(r->phase, "verify") == 0) {
		snprintf(msg, sizeof msg,
		         "wave %lld/%lld: every node heartbeats on %s; checking gates",
		         (long long)r->wave + 1, (long long)n_waves, r->build);
	} else if (strcmp(r->state, "running") == 0 && strcmp(r->phase, "soak") == 0) {
		snprintf(msg, sizeof msg, "wave %lld/%lld: gates passed; soaking for %lld s",
		         (long long)r->wave + 1, (long long)n_waves,
		         (long long)json_integer_value(json_object_get(r->spec, "soak_ms")) / 1000);
	} else if (strcmp(r->state, "running") == 0 && strcmp(r->phase, "uncordon") == 0) {
		set_str(wave, "state", "done");
		json_object_set_new(wave, "ended_ms", json_integer(c->ts));
		if (cordon_nodes(f, r, wave_nodes, 0, c->ts, names, sizeof names) != 0)
			return NULL;
		snprintf(msg, sizeof msg, "wave %lld/%lld done; uncordoned: %s",
		         (long long)r->wave + 1, (long long)n_waves, names[0] ? names : "none");
	} else if (strcmp(r->state, "completed") == 0) {
		if (uncordon_all(f, r, c->ts, names, sizeof names) != 0)
			return NULL;
		snprintf(msg, sizeof msg, "every node of the rollout runs %s", r->build);
	} else if (strcmp(r->state, "rolling-back") == 0) {
		json_t *failed = wave_at(r, from_wave);
		set_str(failed, "state", "rolled-back");
		json_object_set_new(failed, "ended_ms", json_integer(c->ts));
		int n = mark_rolling_back(r, from_wave);
		snprintf(
		    msg, sizeof msg,
		    "wave %lld/%lld failed its gate (%s): %d node(s) go back to their previous "
		    "build; later waves will not start",
		    (long long)from_wave + 1, (long long)n_waves, reason ? reason : "no reason", n);
	} else if (strcmp(r->state, "rolled-back") == 0) {
		if (uncordon_all(f, r, c->ts, names, sizeof names) != 0)
			return NULL;
		snprintf(msg, sizeof msg,
		         "nodes are back on their previous build%s%s; uncordoned: %s",
		         reason ? ": " : "", reason ? reason : "", names[0] ? names : "none");
	} else {
		snprintf(msg, sizeof msg, "%s", reason ? reason : r->state);
	}
	if (row_write(f, r, c->ts, reason, 1) != 0)
		return NULL;
	if (fsm_event_append(f, c->ts, type, NULL, c->actor, "rollout %s: %s", r->id, msg) != 0)
		return NULL;
	return result_of(f, r->id, 200);
}

/* Allowed driver steps (control actions are rollout.control). */
static int step_allowed(const struct rollout_row *r, const char *state, int64_t wave,
                        const char *phase, int64_t n_waves)
{
	static const char *const order[] = {"cordon", "upgrade", "verify", "soak", "uncordon"};
	if (strcmp(r->state, "pending") == 0)
		return strcmp(state, "running") == 0 && wave == 0 && strcmp(phase, "cordon") == 0;
	if (strcmp(r->state, "running") == 0) {
		if (strcmp(state, "rolling-back") == 0)
			return wave == r->wave && phase[0] == '\0';
		if (strcmp(state, "completed") == 0)
			return strcmp(r->phase, "uncordon") == 0 && r->wave == n_waves - 1 &&
			       phase[0] == '\0';
		if (strcmp(state, "running") != 0)
			return 0;
		if (strcmp(r->phase, "uncordon") == 0)
			return wave == r->wave + 1 && wave < n_waves &&
			       strcmp(phase, "cordon") == 0;
		for (int i = 0; i + 1 < 5; i++)
			if (strcmp(r->phase, order[i]) == 0)
				return wave == r->wave && strcmp(phase, order[i + 1]) == 0;
		return 0;
	}
	if (strcmp(r->state, "rolling-back") == 0)
		return strcmp(state, "rolled-back") == 0 && phase[0] == '\0';
	return 0;
}

json_t *fsm_op_rollout_advance(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {
	    "id",    "from_state", "from_wave",        "from_phase",    "state", "wave",
	    "phase", "reason",     "baseline_step_ms", "from_versions", NULL};
	struct yard_err e = {0};
	const char *id = NULL, *from_state = NULL, *from_phase = "", *state = NULL, *phase = "",
	           *reason = NULL;
	int64_t from_wave = 0, wave = 0;
	double baseline = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX - 1, &id, &e) != 0 ||
	    jsonx_get_string(c->args, "", "from_state", 1, 15, &from_state, &e) != 0 ||
	    jsonx_get_int(c->args, "", "from_wave", 1, 0, ROLLOUT_WAVES_MAX, &from_wave, &e) != 0 ||
	    jsonx_get_string(c->args, "", "from_phase", 0, 15, &from_phase, &e) != 0 ||
	    jsonx_get_string(c->args, "", "state", 1, 15, &state, &e) != 0 ||
	    jsonx_get_int(c->args, "", "wave", 1, 0, ROLLOUT_WAVES_MAX, &wave, &e) != 0 ||
	    jsonx_get_string(c->args, "", "phase", 0, 15, &phase, &e) != 0 ||
	    jsonx_get_string(c->args, "", "reason", 0, 300, &reason, &e) != 0 ||
	    jsonx_get_double(c->args, "", "baseline_step_ms", 0, 0, 1e9, &baseline, &e) != 0)
		return fsm_res_from_err(&e);
	const json_t *from_versions = json_object_get(c->args, "from_versions");
	if (from_versions != NULL && !from_versions_valid(from_versions))
		return fsm_res_err(400, "from_versions",
		                   "from_versions: must be an object of node names to versions of "
		                   "at most 31 bytes");
	if (!in_list(state, STATES))
		return fsm_res_err(400, "state", "state: '%s' is not a rollout state", state);
	if (!in_list(phase, PHASES))
		return fsm_res_err(400, "phase", "phase: '%s' is not a rollout phase", phase);
	struct rollout_row r;
	json_t *res = row_read(f, id, &r);
	if (res != NULL)
		return res;
	int64_t n_waves = (int64_t)json_array_size(json_object_get(r.plan, "waves"));
	if (strcmp(r.state, from_state) != 0 || r.wave != from_wave ||
	    strcmp(r.phase, from_phase) != 0) {
		res = fsm_res_err(409, "from_state",
		                  "rollout %s is %s at wave %lld phase '%s', not %s/%lld/'%s'", id,
		                  r.state, (long long)r.wave, r.phase, from_state,
		                  (long long)from_wave, from_phase);
	} else if (!step_allowed(&r, state, wave, phase, n_waves)) {
		res = fsm_res_err(
		    409, "state", "rollout %s cannot go from %s/%lld/'%s' to %s/%lld/'%s'", id,
		    r.state, (long long)r.wave, r.phase, state, (long long)wave, phase);
	} else {
		snprintf(r.state, sizeof r.state, "%s", state);
		snprintf(r.phase, sizeof r.phase, "%s", phase);
		r.wave = wave;
		res = enter_step(f, c, &r, reason, baseline, from_wave, from_versions);
	}
	row_free(&r);
	return res;
}

/* ---- rollout.node ---- */

static int node_transition_allowed(const char *from, const char *to)
{
	static const char *const allowed[][2] = {
	    {"upgrading", "upgraded"},
	    {"upgrading", "failed"},
	    {"upgraded", "failed"},
	    {"rolling-back", "rolled-back"},
	};
	for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
		if (strcmp(allowed[i][0], from) == 0 && strcmp(allowed[i][1], to) == 0)
			return 1;
	return 0;
}

json_t *fsm_op_rollout_node(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", "node", "state", "version", "error", NULL};
	struct yard_err e = {0};
	const char *id = NULL, *node = NULL, *state = NULL, *version = NULL, *error = "";
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX - 1, &id, &e) != 0 ||
	    jsonx_get_string(c->args, "", "node", 1, FSM_NAME_MAX, &node, &e) != 0 ||
	    jsonx_get_string(c->args, "", "state", 1, 15, &state, &e) != 0 ||
	    jsonx_get_string(c->args, "", "version", 0, 31, &version, &e) != 0 ||
	    jsonx_get_string(c->args, "", "error", 0, 400, &error, &e) != 0)
		return fsm_res_from_err(&e);
	if (!in_list(state, NODE_STATES))
		return fsm_res_err(400, "state", "state: '%s' is not a rollout node state", state);
	struct rollout_row r;
	json_t *res = row_read(f, id, &r);
	if (res != NULL)
		return res;
	json_t *pn = plan_node(&r, node);
	if (pn == NULL) {
		res = fsm_res_err(404, "node", "node: %s is not a target of rollout %s", node, id);
	} else if (!node_transition_allowed(node_state(pn), state)) {
		res = fsm_res_err(409, "state", "rollout %s: node %s cannot go from %s to %s", id,
		                  node, node_state(pn), state);
	} else {
		char msg[700];
		const char *from = json_string_value(json_object_get(pn, "from_version"));
		if (strcmp(state, "upgraded") == 0 && of_worker(&r))
			snprintf(
			    msg, sizeof msg,
			    "node %s: worker %s -> %s installed, self-test passed; ranks started "
			    "from now on run it",
			    node, from && from[0] ? from : "unknown", version ? version : r.build);
		else if (strcmp(state, "upgraded") == 0)
			snprintf(msg, sizeof msg, "node %s upgraded %s -> %s, self-test passed",
			         node, from, version ? version : r.build);
		else if (strcmp(state, "failed") == 0)
			snprintf(msg, sizeof msg, "node %s failed the gate: %s", node, error);
		else
			snprintf(msg, sizeof msg, "node %s is back on %s", node,
			         version ? version : from);
		set_str(pn, "state", state);
		if (error[0] != '\0') /* a node back on its build keeps the error that sent it */
			set_str(pn, "error", error);
		if (version != NULL)
			set_str(pn, "version", version);
		if (strcmp(state, "failed") == 0)
			r.failures++;
		if (version != NULL && !of_worker(&r) &&
		    fsm_run(f, "UPDATE nodes SET version = ?2 WHERE id = ?1", "ss", node,
		            version) != SQLITE_DONE)
			res = fsm_res_err(500, NULL, "internal error updating node %s", node);
		else if (row_write(f, &r, c->ts, NULL, 0) != 0 ||
		         fsm_event_append(f, c->ts, "rollout.node", NULL, c->actor,
		                          "rollout %s: %s", id, msg) != 0)
			res = NULL;
		else
			res = result_of(f, id, 200);
	}
	row_free(&r);
	return res;
}

/* ---- rollout.control ---- */

json_t *fsm_op_rollout_control(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", "action", "reason", NULL};
	struct yard_err e = {0};
	const char *id = NULL, *action = NULL, *reason = NULL;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX - 1, &id, &e) != 0 ||
	    jsonx_get_string(c->args, "", "action", 1, 16, &action, &e) != 0 ||
	    jsonx_get_string(c->args, "", "reason", 0, 300, &reason, &e) != 0)
		return fsm_res_from_err(&e);
	struct rollout_row r;
	json_t *res = row_read(f, id, &r);
	if (res != NULL)
		return res;
	char msg[600], names[400];
	const char *by = reason && reason[0] ? reason : c->actor;
	int ok = 1;
	if (strcmp(action, "pause") == 0) {
		ok = strcmp(r.state, "running") == 0 || strcmp(r.state, "pending") == 0;
		if (ok) {
			json_object_set_new(r.plan, "paused_from", json_string(r.state));
			snprintf(r.state, sizeof r.state, "paused");
			snprintf(msg, sizeof msg, "paused by %s (wave %lld, phase %s)", by,
			         (long long)r.wave + 1, r.phase[0] ? r.phase : "none");
		}
	} else if (strcmp(action, "resume") == 0) {
		ok = strcmp(r.state, "paused") == 0;
		if (ok) {
			const char *back =
			    json_string_value(json_object_get(r.plan, "paused_from"));
			snprintf(r.state, sizeof r.state, "%s", back ? back : "running");
			json_object_del(r.plan, "paused_from");
			snprintf(msg, sizeof msg, "resumed by %s; the phase's clock starts again",
			         by);
		}
	} else if (strcmp(action, "abort") == 0) {
		ok = strcmp(r.state, "running") == 0 || strcmp(r.state, "pending") == 0 ||
		     strcmp(r.state, "paused") == 0;
		if (ok) {
			if (uncordon_all(f, &r, c->ts, names, sizeof names) != 0) {
				row_free(&r);
				return NULL;
			}
			snprintf(r.state, sizeof r.state, "aborted");
			snprintf(msg, sizeof msg,
			         "aborted by %s at wave %lld; nodes stay on the build they run; "
			         "uncordoned: %s",
			         by, (long long)r.wave + 1, names[0] ? names : "none");
		}
	} else if (strcmp(action, "rollback") == 0) {
		ok = strcmp(r.state, "rolling-back") != 0 && strcmp(r.state, "rolled-back") != 0;
		if (ok && !fsm_rollout_state_active(r.state)) {
			sqlite3_stmt *st =
			    fsm_prepare(f, "SELECT id FROM rollouts WHERE state IN ('pending',"
			                   " 'running', 'paused', 'rolling-back') LIMIT 1");
			if (st != NULL && sqlite3_step(st) == SQLITE_ROW) {
				res = fsm_res_err(409, "id",
				                  "rollout %s is active: it must end before %s is "
				                  "rolled back",
				                  (const char *)sqlite3_column_text(st, 0), id);
			}
			fsm_release(f, st);
			if (res != NULL) {
				row_free(&r);
				return res;
			}
		}
		if (ok) {
			int n = mark_rolling_back(&r, -1);
			snprintf(r.state, sizeof r.state, n > 0 ? "rolling-back" : "rolled-back");
			if (n == 0 && uncordon_all(f, &r, c->ts, names, sizeof names) != 0) {
				row_free(&r);
				return NULL;
			}
			snprintf(msg, sizeof msg,
			         "rollback requested by %s: %d node(s) go back to "
			         "their previous build",
			         by, n);
		}
	} else {
		row_free(&r);
		return fsm_res_err(400, "action",
		                   "action: '%s' is not pause, resume, abort or "
		                   "rollback",
		                   action);
	}
	if (!ok) {
		res = fsm_res_err(409, "action", "rollout %s is %s: cannot %s it", id, r.state,
		                  action);
		row_free(&r);
		return res;
	}
	if (strcmp(r.state, "running") != 0 && strcmp(r.state, "paused") != 0 &&
	    strcmp(r.state, "pending") != 0)
		r.phase[0] = '\0';
	char type[40];
	snprintf(type, sizeof type, "rollout.%s",
	         strcmp(action, "rollback") == 0 ? r.state
	         : strcmp(action, "pause") == 0  ? "paused"
	         : strcmp(action, "resume") == 0 ? "resumed"
	                                         : "aborted");
	if (row_write(f, &r, c->ts, reason, 1) != 0 ||
	    fsm_event_append(f, c->ts, type, NULL, c->actor, "rollout %s: %s", id, msg) != 0) {
		row_free(&r);
		return NULL;
	}
	row_free(&r);
	return result_of(f, id, 200);
}

/* ---- reads ---- */

#define ROLLOUT_COLUMNS                                                                            \
	"id, build, state, wave, phase, phase_since_ms, failures, spec, plan, reason, actor,"      \
	" created_ms, updated_ms"

static json_t *rollout_from_row(sqlite3_stmt *st)
{
	json_t *spec = jsonx_loads((const char *)sqlite3_column_text(st, 7));
	json_t *plan = jsonx_loads((const char *)sqlite3_column_text(st, 8));
	const char *reason = (const char *)sqlite3_column_text(st, 9);
	json_t *r = json_pack(
	    "{s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:o,s:o,s:o,s:o,s:s,s:I,s:I}", "id",
	    sqlite3_column_text(st, 0), "build", sqlite3_column_text(st, 1), "state",
	    sqlite3_column_text(st, 2), "wave", (json_int_t)sqlite3_column_int64(st, 3), "phase",
	    sqlite3_column_text(st, 4), "phase_since_ms", (json_int_t)sqlite3_column_int64(st, 5),
	    "failures", (json_int_t)sqlite3_column_int64(st, 6), "spec",
	    spec ? spec : json_object(), "waves",
	    plan ? json_incref(json_object_get(plan, "waves")) : json_array(), "nodes",
	    plan ? json_incref(json_object_get(plan, "nodes")) : json_object(), "reason",
	    reason ? json_string(reason) : json_null(), "actor", sqlite3_column_text(st, 10),
	    "created_ms", (json_int_t)sqlite3_column_int64(st, 11), "updated_ms",
	    (json_int_t)sqlite3_column_int64(st, 12));
	json_decref(plan);
	return r;
}

json_t *fsm_rollout_get(struct fsm *f, const char *id, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " ROLLOUT_COLUMNS " FROM rollouts WHERE id = ?1");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot read rollout %s", id);
		return NULL;
	}
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	json_t *r = NULL;
	if (sqlite3_step(st) == SQLITE_ROW)
		r = rollout_from_row(st);
	else
		yard_err_set(err, YARD_ENOTFOUND, "no rollout %s", id);
	fsm_release(f, st);
	return r;
}

json_t *fsm_rollouts_list(struct fsm *f, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " ROLLOUT_COLUMNS " FROM rollouts ORDER BY seq");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list rollouts");
		return NULL;
	}
	json_t *list = json_array();
	while (sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(list, rollout_from_row(st));
	fsm_release(f, st);
	return list;
}

json_t *fsm_rollout_active(struct fsm *f)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " ROLLOUT_COLUMNS " FROM rollouts WHERE state IN"
	                                  " ('pending', 'running', 'paused', 'rolling-back')"
	                                  " ORDER BY seq LIMIT 1");
	if (st == NULL)
		return NULL;
	json_t *r = sqlite3_step(st) == SQLITE_ROW ? rollout_from_row(st) : NULL;
	fsm_release(f, st);
	return r;
}

int fsm_build_assigned_to_node(struct fsm *f, const char *version, const char *node)
{
	json_t *r = fsm_rollout_active(f);
	int assigned = 0;
	if (r != NULL && strcmp(json_string_value(json_object_get(r, "build")), version) == 0) {
		const char *s = node_state(json_object_get(json_object_get(r, "nodes"), node));
		assigned = strcmp(s, "upgrading") == 0 || strcmp(s, "upgraded") == 0;
	}
	json_decref(r);
	return assigned;
}
