/* rollout.c: the rollout driver (see rollout.h for the steps and their conditions). */
#include "scheduler/rollout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "scheduler/idindex.h"

#define RECENT_HEARTBEAT_MS 3000 /* a node heard within this is "still heartbeating" */
/* A proposal without an outcome for this long no longer blocks the next one: the state
 * machine refuses a step that was already taken, so proposing again is safe. */
#define PROPOSAL_STALE_MS 10000

/* An upgrade report of a heartbeat ("upgrade" or "worker_upgrade"). */
struct rd_report {
	char version[32], rollout[32], state[16], error[400];
};

struct rd_node {
	char id[FSM_NAME_MAX + 1];
	uint64_t last_seen_ms;                        /* monotonic */
	char version[32];                             /* the agent's */
	char worker_version[32];                      /* the yard-worker new ranks start with */
	struct rd_report agent_report, worker_report; /* the latest of each */
	double step_ms_sum;                           /* over running ranks reporting a step time */
	int step_ms_count;
	char offered[FSM_ID_MAX + 24]; /* "ROLLOUT/STATE" of the offer last told (new_offers) */
};

struct rollout_driver {
	struct fsm *fsm;
	struct sched_io io;
	int leading;
	uint64_t epoch;
	int proposing;
	uint64_t proposal_seq;       /* the in-flight proposal's number */
	uint64_t proposing_since_ms; /* monotonic */
	char proposing_what[96];
	struct rd_node *nodes;
	int n_nodes, cap_nodes;
	struct id_index node_index; /* id -> nodes[]: a heartbeat finds its node in O(1) */
	/* the active rollout as heartbeats see it (fsm_rollout_active; owned, NULL: none), read
	 * again only when the rollouts table changed (active_version: the FSM's version then;
	 * active_read: 0 before the first read) */
	json_t *active;
	uint64_t active_version;
	int active_read;
	/* the rollouts table's version rollout_driver_new_offers last looked at (0: not yet) */
	uint64_t offers_version;
	int offers_read;
	/* policy "restart": jobs already restarted for (rollout, wave) */
	char restarted_for[FSM_ID_MAX + 16];
	json_t *restarted; /* job ids */
	rollout_restart_ready_fn ready; /* rollout_driver_restart_gate */
	void *ready_data;
};

static uint64_t mono_now(const struct rollout_driver *d)
{
	return d->io.mono_ms ? d->io.mono_ms(d->io.data) : yard_now_mono_ms();
}

static int64_t wall_now(const struct rollout_driver *d)
{
	return d->io.wall_ms ? d->io.wall_ms(d->io.data) : yard_now_wall_ms();
}

struct rollout_driver *rollout_driver_create(struct fsm *fsm, const struct sched_io *io)
{
	struct rollout_driver *d = calloc(1, sizeof *d);
	if (d == NULL)
		return NULL;
	d->fsm = fsm;
	d->io = *io;
	d->restarted = json_array();
	return d;
}

void rollout_driver_restart_gate(struct rollout_driver *d, rollout_restart_ready_fn ready,
                                 void *data)
{
	d->ready = ready;
	d->ready_data = data;
}

void rollout_driver_destroy(struct rollout_driver *d)
{
	if (d == NULL)
		return;
	free(d->nodes);
	free(d->node_index.slots);
	json_decref(d->active);
	json_decref(d->restarted);
	free(d);
}

void rollout_driver_leading(struct rollout_driver *d, int leading)
{
	d->leading = leading;
	d->epoch++;
	d->proposing = 0;
	d->n_nodes = 0;
	id_index_rebuild(&d->node_index, d->nodes, sizeof *d->nodes, 0, 0);
	d->restarted_for[0] = '\0';
	json_array_clear(d->restarted);
	d->offers_read = 0;
}

static struct rd_node *node_find(struct rollout_driver *d, const char *id)
{
	int i = id_index_find(&d->node_index, d->nodes, sizeof *d->nodes, id);
	return i < 0 ? NULL : &d->nodes[i];
}

static struct rd_node *node_get(struct rollout_driver *d, const char *id)
{
	struct rd_node *n = node_find(d, id);
	if (n != NULL)
		return n;
	if (d->n_nodes == d->cap_nodes) {
		int cap = d->cap_nodes ? d->cap_nodes * 2 : 16;
		struct rd_node *grown = realloc(d->nodes, (size_t)cap * sizeof *grown);
		if (grown == NULL)
			return NULL;
		d->nodes = grown;
		d->cap_nodes = cap;
	}
	if (2 * (d->n_nodes + 1) > d->node_index.cap &&
	    id_index_rebuild(&d->node_index, d->nodes, sizeof *d->nodes, d->n_nodes,
	                     d->n_nodes + 1) != 0)
		return NULL;
	n = &d->nodes[d->n_nodes];
	memset(n, 0, sizeof *n);
	snprintf(n->id, sizeof n->id, "%s", id);
	id_index_put(&d->node_index, n->id, d->n_nodes++);
	return n;
}

/* ---- heartbeats ---- */

int rollout_driver_check_report(const json_t *upgrade, const char *what, struct yard_err *err)
{
	static const char *const keys[] = {"version", "rollout",          "state",
	                                   "error",   "previous_version", NULL};
	static const char *const states[] = {"downloading", "self-test",   "restarting", "done",
	                                     "failed",      "rolled-back", NULL};
	const char *s = NULL;
	if (upgrade == NULL || json_is_null(upgrade))
		return 0;
	if (!json_is_object(upgrade))
		return yard_err_set(err, YARD_EINVAL, "%s: must be an object", what);
	if (jsonx_only_keys(upgrade, what, keys, err) != 0 ||
	    jsonx_get_string(upgrade, what, "version", 1, 31, &s, err) != 0 ||
	    jsonx_get_string(upgrade, what, "rollout", 1, 31, &s, err) != 0 ||
	    jsonx_get_string(upgrade, what, "error", 0, 399, &s, err) != 0 ||
	    jsonx_get_string(upgrade, what, "previous_version", 0, 31, &s, err) != 0 ||
	    jsonx_get_string(upgrade, what, "state", 1, 15, &s, err) != 0)
		return err->code;
	for (int i = 0; states[i] != NULL; i++)
		if (strcmp(states[i], s) == 0)
			return 0;
	return yard_err_set(err, YARD_EINVAL, "%s.state: '%s' is not an upgrade state", what, s);
}

static void copy_str(char *dst, size_t len, const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	yard_strcopy(dst, len, s != NULL ? s : "");
}

static void report_copy(struct rd_report *r, const json_t *up)
{
	copy_str(r->version, sizeof r->version, up, "version");
	copy_str(r->rollout, sizeof r->rollout, up, "rollout");
	copy_str(r->state, sizeof r->state, up, "state");
	copy_str(r->error, sizeof r->error, up, "error");
}

void rollout_driver_heartbeat(struct rollout_driver *d, const char *node, const json_t *body)
{
	if (!d->leading)
		return;
	struct rd_node *n = node_get(d, node);
	if (n == NULL)
		return;
	n->last_seen_ms = mono_now(d);
	copy_str(n->version, sizeof n->version, body, "version");
	copy_str(n->worker_version, sizeof n->worker_version, body, "worker_version");
	report_copy(&n->agent_report, json_object_get(body, "upgrade"));
	report_copy(&n->worker_report, json_object_get(body, "worker_upgrade"));
	n->step_ms_sum = 0;
	n->step_ms_count = 0;
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(body, "ranks"), i, r)
	{
		double ms = json_number_value(json_object_get(r, "step_ms"));
		const char *state = json_string_value(json_object_get(r, "state"));
		if (ms > 0 && ms < 1e9 && state != NULL && strcmp(state, "running") == 0) {
			n->step_ms_sum += ms;
			n->step_ms_count++;
		}
	}
}

/* ---- reading the committed rollout ---- */

static const char *str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s != NULL ? s : "";
}

static int64_t num(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

/* A rollout of a worker build (else of an agent build). */
static int of_worker(const json_t *ro)
{
	return strcmp(str(json_object_get(ro, "spec"), "component"), "worker") == 0;
}

/* What the rollout's component runs on n, and n's report about it. */
static const char *running(const struct rd_node *n, int worker)
{
	return worker ? n->worker_version : n->version;
}

static const struct rd_report *report(const struct rd_node *n, int worker)
{
	return worker ? &n->worker_report : &n->agent_report;
}

json_t *rollout_driver_offer(struct rollout_driver *d, const char *node, const char **key)
{
	if (!d->active_read || d->active_version != d->fsm->rollouts_version) {
		json_decref(d->active);
		d->active = fsm_rollout_active(d->fsm);
		d->active_version = d->fsm->rollouts_version;
		d->active_read = 1;
	}
	json_t *ro = json_incref(d->active);
	json_t *offer = NULL;
	if (ro == NULL)
		return NULL;
	*key = of_worker(ro) ? "worker_upgrade" : "upgrade";
	const json_t *spec = json_object_get(ro, "spec");
	const json_t *pn = json_object_get(json_object_get(ro, "nodes"), node);
	const char *state = str(ro, "state"), *nstate = str(pn, "state");
	if (pn != NULL && strcmp(state, "running") == 0 && strcmp(nstate, "upgrading") == 0) {
		char url[128];
		snprintf(url, sizeof url, "/v1/builds/%s/binary", str(ro, "build"));
		offer =
		    json_pack("{s:s,s:s,s:I,s:s,s:s,s:I}", "version", str(ro, "build"), "sha256",
		              str(spec, "sha256"), "size", (json_int_t)num(spec, "size"), "url",
		              url, "rollout", str(ro, "id"), "gate_s",
		              (json_int_t)YARD_MAX(1, num(spec, "gate_timeout_ms") / 1000));
	} else if (pn != NULL && strcmp(state, "rolling-back") == 0 &&
	           strcmp(nstate, "rolling-back") == 0 && str(pn, "from_version")[0] != '\0') {
		offer = json_pack("{s:s,s:s,s:b}", "version", str(pn, "from_version"), "rollout",
		                  str(ro, "id"), "rollback", 1);
	}
	json_decref(ro);
	return offer;
}

void rollout_driver_new_offers(struct rollout_driver *d, void (*cb)(void *data, const char *node),
                               void *data)
{
	if (!d->leading || (d->offers_read && d->offers_version == d->fsm->rollouts_version))
		return;
	d->offers_version = d->fsm->rollouts_version;
	d->offers_read = 1;
	json_t *ro = fsm_rollout_active(d->fsm);
	if (ro == NULL)
		return;
	const char *state = str(ro, "state");
	const char *k;
	json_t *pn;
	json_object_foreach(json_object_get(ro, "nodes"), k, pn)
	{
		/* the node states rollout_driver_offer makes an offer for */
		const char *nstate = str(pn, "state");
		if (!(strcmp(state, "running") == 0 && strcmp(nstate, "upgrading") == 0) &&
		    !(strcmp(state, "rolling-back") == 0 && strcmp(nstate, "rolling-back") == 0))
			continue;
		char offer[sizeof d->nodes[0].offered];
		snprintf(offer, sizeof offer, "%s/%s", str(ro, "id"), nstate);
		struct rd_node *n = node_get(d, k);
		if (n == NULL || strcmp(n->offered, offer) == 0)
			continue;
		yard_strcopy(n->offered, sizeof n->offered, offer);
		cb(data, k);
	}
	json_decref(ro);
}

void rollout_driver_overlay(struct rollout_driver *d, json_t *rollout)
{
	const char *k;
	json_t *pn;
	if (!d->leading)
		return;
	int worker = of_worker(rollout);
	json_object_foreach(json_object_get(rollout, "nodes"), k, pn)
	{
		struct rd_node *n = node_find(d, k);
		if (n == NULL || n->last_seen_ms == 0)
			continue;
		json_t *live = json_pack("{s:s,s:s,s:I}", "version", n->version, "worker_version",
		                         n->worker_version, "last_heartbeat_ms_ago",
		                         (json_int_t)(mono_now(d) - n->last_seen_ms));
		const struct rd_report *rep = report(n, worker);
		if (rep->state[0] != '\0' && strcmp(rep->rollout, str(rollout, "id")) == 0) {
			json_object_set_new(live, "upgrade", json_string(rep->state));
			if (rep->error[0] != '\0')
				json_object_set_new(live, "error", json_string(rep->error));
		}
		json_object_set_new(pn, "live", live);
	}
}

/* ---- proposals ---- */

struct rd_proposal {
	struct rollout_driver *d;
	uint64_t epoch, seq;
	char what[96];
};

static void proposal_done(void *data, int status, const json_t *result)
{
	struct rd_proposal *p = data;
	struct rollout_driver *d = p->d;
	if (p->epoch == d->epoch) {
		const char *error =
		    result ? json_string_value(json_object_get(result, "error")) : NULL;
		if (p->seq == d->proposal_seq)
			d->proposing = 0;
		if (status != 0)
			log_warn("rollouts: %s not committed: %s", p->what, yard_strerror(status));
		else if (error != NULL)
			log_info("rollouts: %s refused: %s", p->what, error);
	}
	free(p);
}

static void propose(struct rollout_driver *d, const char *op, json_t *args, const char *what)
{
	struct rd_proposal *p = calloc(1, sizeof *p);
	if (p == NULL) {
		json_decref(args);
		return;
	}
	p->d = d;
	p->epoch = d->epoch;
	p->seq = ++d->proposal_seq;
	snprintf(p->what, sizeof p->what, "%s", what);
	snprintf(d->proposing_what, sizeof d->proposing_what, "%s", what);
	d->proposing = 1;
	d->proposing_since_ms = mono_now(d);
	log_info("rollouts: proposing %s", what);
	if (d->io.propose(d->io.data, op, args, proposal_done, p) != 0) {
		d->proposing = 0;
		free(p);
	}
}

static void advance(struct rollout_driver *d, const json_t *ro, const char *state, int64_t wave,
                    const char *phase, const char *reason, double baseline_step_ms,
                    json_t *from_versions)
{
	json_t *args =
	    json_pack("{s:s,s:s,s:I,s:s,s:s,s:I,s:s}", "id", str(ro, "id"), "from_state",
	              str(ro, "state"), "from_wave", (json_int_t)num(ro, "wave"), "from_phase",
	              str(ro, "phase"), "state", state, "wave", (json_int_t)wave, "phase", phase);
	if (reason != NULL)
		json_object_set_new(args, "reason", json_string(reason));
	if (baseline_step_ms > 0)
		json_object_set_new(args, "baseline_step_ms", json_real(baseline_step_ms));
	if (from_versions != NULL)
		json_object_set_new(args, "from_versions", from_versions);
	char what[96];
	snprintf(what, sizeof what, "rollout.advance %s -> %s/%s", str(ro, "id"), state, phase);
	propose(d, "rollout.advance", args, what);
}

static void node_outcome(struct rollout_driver *d, const json_t *ro, const char *node,
                         const char *state, const char *version, const char *error)
{
	json_t *args =
	    json_pack("{s:s,s:s,s:s}", "id", str(ro, "id"), "node", node, "state", state);
	if (version != NULL)
		json_object_set_new(args, "version", json_string(version));
	if (error != NULL)
		json_object_set_new(args, "error", json_string(error));
	char what[96];
	snprintf(what, sizeof what, "rollout.node %s %s -> %s", str(ro, "id"), node, state);
	propose(d, "rollout.node", args, what);
}

/* ---- the steps ---- */

static int node_is_down(struct rollout_driver *d, const char *node)
{
	struct yard_err err = {0};
	json_t *n = fsm_node_get(d->fsm, node, &err);
	int down = n == NULL || strcmp(str(n, "state"), "down") == 0;
	json_decref(n);
	return down;
}

/* Mean step time of the running ranks of a wave's nodes; 0 when none reports one. */
static double wave_step_ms(struct rollout_driver *d, const json_t *wave)
{
	double sum = 0;
	int count = 0;
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(wave, "nodes"), i, v)
	{
		struct rd_node *n = node_find(d, json_string_value(v));
		if (n != NULL) {
			sum += n->step_ms_sum;
			count += n->step_ms_count;
		}
	}
	return count > 0 ? sum / count : 0;
}

/* The worker version each node of a wave heartbeats with ("" when not heard): what a worker
 * rollout's nodes go back to (an agent's comes from its registration). */
static json_t *worker_versions(struct rollout_driver *d, const json_t *wave)
{
	json_t *out = json_object();
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(wave, "nodes"), i, v)
	{
		const struct rd_node *n = node_find(d, json_string_value(v));
		json_object_set_new(out, json_string_value(v),
		                    json_string(n != NULL ? n->worker_version : ""));
	}
	return out;
}

/* The upgrade phase: one node outcome per call; 1 when every node of the wave is decided. */
static int decide_nodes(struct rollout_driver *d, const json_t *ro, const json_t *wave,
                        int64_t elapsed_ms)
{
	const json_t *spec = json_object_get(ro, "spec");
	const char *build = str(ro, "build"), *id = str(ro, "id");
	int64_t gate_ms = num(spec, "gate_timeout_ms");
	int decided = 1, worker = of_worker(ro);
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(wave, "nodes"), i, v)
	{
		const char *node = json_string_value(v);
		const json_t *pn = json_object_get(json_object_get(ro, "nodes"), node);
		if (strcmp(str(pn, "state"), "upgrading") != 0)
			continue;
		struct rd_node *n = node_find(d, node);
		const struct rd_report *rep = n != NULL ? report(n, worker) : NULL;
		char why[600];
		if (n != NULL && strcmp(running(n, worker), build) == 0 &&
		    strcmp(rep->state, "done") == 0 && strcmp(rep->version, build) == 0) {
			node_outcome(d, ro, node, "upgraded", build, NULL);
			return 0;
		}
		if (n != NULL && strcmp(rep->rollout, id) == 0 &&
		    strcmp(rep->version, build) == 0 &&
		    (strcmp(rep->state, "failed") == 0 || strcmp(rep->state, "rolled-back") == 0)) {
			snprintf(why, sizeof why, "%s", rep->error[0] ? rep->error : rep->state);
			node_outcome(d, ro, node, "failed", NULL, why);
			return 0;
		}
		if (node_is_down(d, node)) {
			node_outcome(d, ro, node, "failed", NULL, "the node is down");
			return 0;
		}
		if (elapsed_ms >= gate_ms) {
			snprintf(
			    why, sizeof why,
			    "no healthy heartbeat on %s within %lld s (running %s, upgrade %s)",
			    build, (long long)gate_ms / 1000,
			    n && running(n, worker)[0] ? running(n, worker) : "unknown",
			    rep && rep->state[0] ? rep->state : "not started");
			node_outcome(d, ro, node, "failed", NULL, why);
			return 0;
		}
		decided = 0;
	}
	return decided;
}

/* The first failed node of wave w, for the rollback's reason. */
static void failure_reason(const json_t *ro, int64_t w, char *out, size_t len)
{
	const char *k;
	json_t *pn;
	snprintf(out, len, "%lld failure(s), budget %lld", (long long)num(ro, "failures"),
	         (long long)num(json_object_get(ro, "spec"), "failure_budget"));
	json_object_foreach(json_object_get(ro, "nodes"), k, pn)
	{
		if (num(pn, "wave") == w && strcmp(str(pn, "state"), "failed") == 0) {
			snprintf(out, len, "node %s: %s", k, str(pn, "error"));
			return;
		}
	}
}

/* Every upgraded node of the wave still heartbeats on the build and is up; else proposes
 * the first deviation as a failure and returns 0. */
static int wave_still_healthy(struct rollout_driver *d, const json_t *ro, const json_t *wave)
{
	const char *build = str(ro, "build");
	int worker = of_worker(ro);
	uint64_t now = mono_now(d);
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(wave, "nodes"), i, v)
	{
		const char *node = json_string_value(v);
		const json_t *pn = json_object_get(json_object_get(ro, "nodes"), node);
		if (strcmp(str(pn, "state"), "upgraded") != 0)
			continue;
		struct rd_node *n = node_find(d, node);
		char why[300];
		if (node_is_down(d, node)) {
			node_outcome(d, ro, node, "failed", NULL,
			             "the node went down after its upgrade");
			return 0;
		}
		if (n == NULL || now - n->last_seen_ms > RECENT_HEARTBEAT_MS)
			continue; /* not heard lately (a new leader): the down check decides */
		if (strcmp(running(n, worker), build) != 0) {
			const struct rd_report *rep = report(n, worker);
			snprintf(why, sizeof why, "the node went back to %s after its upgrade%s%s",
			         running(n, worker), rep->error[0] ? ": " : "", rep->error);
			node_outcome(d, ro, node, "failed", NULL, why);
			return 0;
		}
	}
	return 1;
}

/* Policy "restart": one running job with a rank on the wave restarts per call; 1 when none
 * is left to restart. */
static int restart_jobs(struct rollout_driver *d, const json_t *ro, const json_t *wave)
{
	char key[FSM_ID_MAX + 16];
	snprintf(key, sizeof key, "%s/%lld", str(ro, "id"), (long long)num(ro, "wave"));
	if (strcmp(key, d->restarted_for) != 0) {
		snprintf(d->restarted_for, sizeof d->restarted_for, "%s", key);
		json_array_clear(d->restarted);
	}
	json_t *slots = fsm_running_slots(d->fsm);
	size_t i, k;
	json_t *s, *v, *done;
	int left = 1;
	json_array_foreach(slots, i, s)
	{
		const char *job = str(s, "job"), *node = str(s, "node");
		int on_wave = 0, seen = 0;
		json_array_foreach(json_object_get(wave, "nodes"), k, v) on_wave |=
		    strcmp(json_string_value(v), node) == 0;
		json_array_foreach(d->restarted, k, done) seen |=
		    strcmp(json_string_value(done), job) == 0;
		if (!on_wave || seen)
			continue;
		char reason[256]; /* job.restart takes 256 bytes */
		snprintf(reason, sizeof reason, "rollout %s (policy restart): restart on build %s",
		         str(ro, "id"), str(ro, "build"));
		left = 0;
		if (d->ready != NULL && !d->ready(d->ready_data, job, reason, sizeof reason))
			break; /* its ranks save a checkpoint first */
		json_array_append_new(d->restarted, json_string(job));
		char what[96];
		snprintf(what, sizeof what, "job.restart %s for rollout %s", job, str(ro, "id"));
		propose(d, "job.restart",
		        json_pack("{s:s,s:I,s:s,s:i}", "id", job, "generation",
		                  (json_int_t)num(s, "generation"), "reason", reason,
		                  "max_restarts", 1000),
		        what);
		break;
	}
	json_decref(slots);
	return left;
}

static void step_running(struct rollout_driver *d, const json_t *ro, int64_t elapsed_ms)
{
	const json_t *spec = json_object_get(ro, "spec");
	const char *phase = str(ro, "phase");
	int64_t w = num(ro, "wave");
	const json_t *waves = json_object_get(ro, "waves");
	const json_t *wave = json_array_get(waves, (size_t)w);
	char reason[700];
	if (num(ro, "failures") > num(spec, "failure_budget")) {
		failure_reason(ro, w, reason, sizeof reason);
		advance(d, ro, "rolling-back", w, "", reason, 0, NULL);
		return;
	}
	if (strcmp(phase, "cordon") == 0) {
		advance(d, ro, "running", w, "upgrade", NULL, wave_step_ms(d, wave),
		        of_worker(ro) ? worker_versions(d, wave) : NULL);
	} else if (strcmp(phase, "upgrade") == 0) {
		if (decide_nodes(d, ro, wave, elapsed_ms))
			advance(d, ro, "running", w, "verify", NULL, 0, NULL);
	} else if (strcmp(phase, "verify") == 0) {
		if (!wave_still_healthy(d, ro, wave))
			return;
		if (strcmp(str(spec, "policy"), "restart") == 0 && !restart_jobs(d, ro, wave))
			return;
		advance(d, ro, "running", w, "soak", NULL, 0, NULL);
	} else if (strcmp(phase, "soak") == 0) {
		if (!wave_still_healthy(d, ro, wave) || elapsed_ms < num(spec, "soak_ms"))
			return;
		int64_t pct = num(spec, "step_time_regression_pct");
		double baseline = json_number_value(json_object_get(wave, "baseline_step_ms"));
		double now_ms = wave_step_ms(d, wave);
		if (pct > 0 && baseline > 0 && now_ms > baseline * (1.0 + (double)pct / 100)) {
			snprintf(reason, sizeof reason,
			         "step time regressed from %.1f ms to %.1f ms (more than %lld%%)",
			         baseline, now_ms, (long long)pct);
			advance(d, ro, "rolling-back", w, "", reason, 0, NULL);
			return;
		}
		advance(d, ro, "running", w, "uncordon", NULL, 0, NULL);
	} else if (strcmp(phase, "uncordon") == 0) {
		if (w + 1 < (int64_t)json_array_size(waves))
			advance(d, ro, "running", w + 1, "cordon", NULL, 0, NULL);
		else
			advance(d, ro, "completed", w, "", NULL, 0, NULL);
	}
}

/* The node is still taking the rollout's build (downloading, checking, or exec'd and not yet
 * healthy): it is not back until that ends, or it could end on the build after all. */
static int installing(const struct rd_report *rep, const char *rollout)
{
	return strcmp(rep->rollout, rollout) == 0 &&
	       (strcmp(rep->state, "downloading") == 0 || strcmp(rep->state, "self-test") == 0 ||
	        strcmp(rep->state, "restarting") == 0);
}

static void step_rolling_back(struct rollout_driver *d, const json_t *ro, int64_t elapsed_ms)
{
	const char *k;
	json_t *pn;
	int left = 0, worker = of_worker(ro);
	json_object_foreach(json_object_get(ro, "nodes"), k, pn)
	{
		if (strcmp(str(pn, "state"), "rolling-back") != 0)
			continue;
		struct rd_node *n = node_find(d, k);
		const char *from = str(pn, "from_version");
		if (n != NULL && from[0] != '\0' && strcmp(running(n, worker), from) == 0 &&
		    !installing(report(n, worker), str(ro, "id"))) {
			node_outcome(d, ro, k, "rolled-back", from, NULL);
			return;
		}
		left++;
	}
	int64_t limit_ms = 2 * num(json_object_get(ro, "spec"), "gate_timeout_ms");
	if (left == 0) {
		advance(d, ro, "rolled-back", num(ro, "wave"), "", NULL, 0, NULL);
	} else if (elapsed_ms >= limit_ms) {
		char reason[200];
		snprintf(reason, sizeof reason,
		         "%d node(s) not back on their previous build within %lld s", left,
		         (long long)limit_ms / 1000);
		advance(d, ro, "rolled-back", num(ro, "wave"), "", reason, 0, NULL);
	}
}

void rollout_driver_tick(struct rollout_driver *d)
{
	if (d->leading && d->proposing &&
	    mono_now(d) - d->proposing_since_ms >= PROPOSAL_STALE_MS) {
		log_warn("rollouts: %s has had no outcome for %d s; no longer waiting for it",
		         d->proposing_what, PROPOSAL_STALE_MS / 1000);
		d->proposing = 0;
	}
	if (!d->leading || d->proposing)
		return;
	json_t *ro = fsm_rollout_active(d->fsm);
	if (ro == NULL)
		return;
	const char *state = str(ro, "state");
	int64_t elapsed_ms = wall_now(d) - num(ro, "phase_since_ms");
	if (strcmp(state, "pending") == 0)
		advance(d, ro, "running", 0, "cordon", NULL, 0, NULL);
	else if (strcmp(state, "running") == 0)
		step_running(d, ro, elapsed_ms);
	else if (strcmp(state, "rolling-back") == 0)
		step_rolling_back(d, ro, elapsed_ms);
	json_decref(ro);
}
