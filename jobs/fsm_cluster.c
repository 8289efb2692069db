/* fsm_cluster.c: the replicated half of running jobs on nodes: node registration and
 * health states, cordons and drains, and a job's placements (job.assign), restarts and finish.
 *
 * The leader's scheduler (scheduler/leader.h) decides; these commands record the decision
 * and re-check what must never be wrong whatever the leader believed: a device is held by at
 * most one running job, only up and uncordoned nodes receive ranks, and a decision made for
 * an older generation of a job does not apply to a newer one. Heartbeats are not here: they
 * are soft state in the leader's memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "jobs/fsm_internal.h"
#include "jobs/spec.h"
#include "jobs/timeline.h"

#define NODE_MAX_DEVICES 64
_Static_assert(NODE_MAX_DEVICES <= 64, "devices_held keeps a node's devices in 64 bits");
#define NODE_MAX_LABELS 16

static const char *const NODE_STATES[] = {"up", "suspect", "down", NULL};

static int in_list(const char *s, const char *const *list)
{
	for (int i = 0; list[i] != NULL; i++)
		if (strcmp(s, list[i]) == 0)
			return 1;
	return 0;
}

/* ---- nodes ---- */

/* Validates the devices array of a registration; returns an error result or NULL. */
static json_t *check_devices(const json_t *devices)
{
	size_t i;
	json_t *d;
	if (!json_is_array(devices) || json_array_size(devices) < 1 ||
	    json_array_size(devices) > NODE_MAX_DEVICES)
		return fsm_res_err(400, "devices", "devices: must be an array of 1..%d devices",
		                   NODE_MAX_DEVICES);
	json_array_foreach(devices, i, d)
	{
		static const char *const keys[] = {"index", "kind", "memory_mb", NULL};
		struct yard_err e = {0};
		char prefix[32];
		int64_t index = -1, memory_mb = 0;
		const char *kind = NULL;
		snprintf(prefix, sizeof prefix, "devices[%zu]", i);
		if (!json_is_object(d))
			return fsm_res_err(400, prefix, "%s: must be an object", prefix);
		if (jsonx_only_keys(d, prefix, keys, &e) != 0 ||
		    jsonx_get_int(d, prefix, "index", 1, 0, NODE_MAX_DEVICES - 1, &index, &e) !=
		        0 ||
		    jsonx_get_string(d, prefix, "kind", 1, 8, &kind, &e) != 0 ||
		    jsonx_get_int(d, prefix, "memory_mb", 0, 0, 1LL << 40, &memory_mb, &e) != 0)
			return fsm_res_from_err(&e);
		if (index != (int64_t)i)
			return fsm_res_err(400, prefix,
			                   "%s.index: %lld, want %zu (devices in order)", prefix,
			                   (long long)index, i);
		if (strcmp(kind, "cpu") != 0 && strcmp(kind, "cuda") != 0)
			return fsm_res_err(400, prefix, "%s.kind: '%s' is not cpu or cuda", prefix,
			                   kind);
		if (strcmp(kind, json_string_value(
		                     json_object_get(json_array_get(devices, 0), "kind"))) != 0)
			return fsm_res_err(400, prefix,
			                   "%s.kind: a node's devices are all one kind", prefix);
	}
	return NULL;
}

static json_t *check_labels(const json_t *labels)
{
	const char *k;
	json_t *v;
	if (labels == NULL || json_is_null(labels))
		return NULL;
	if (!json_is_object(labels) || json_object_size(labels) > NODE_MAX_LABELS)
		return fsm_res_err(400, "labels", "labels: must be an object of at most %d strings",
		                   NODE_MAX_LABELS);
	json_object_foreach((json_t *)labels, k, v)
	{
		if (!fsm_valid_name(k) || !json_is_string(v) || strlen(json_string_value(v)) > 63)
			return fsm_res_err(
			    400, "labels",
			    "labels.%.63s: names are [A-Za-z0-9._-], values strings of "
			    "at most 63 bytes",
			    k);
	}
	return NULL;
}

static int valid_host(const char *s)
{
	if (s[0] == '\0')
		return 0;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == ':'))
			return 0;
	return 1;
}

json_t *fsm_op_node_register(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"name",    "host",   "port_base",  "version",
	                                   "devices", "labels", "token_hash", NULL};
	struct yard_err e = {0};
	const char *name = NULL, *host = NULL, *version = "", *hash = NULL;
	int64_t port_base = 0;
	json_t *r;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "name", 1, FSM_NAME_MAX, &name, &e) != 0 ||
	    jsonx_get_string(c->args, "", "host", 1, 63, &host, &e) != 0 ||
	    jsonx_get_int(c->args, "", "port_base", 1, 1, 65535 - NODE_MAX_DEVICES, &port_base,
	                  &e) != 0 ||
	    jsonx_get_string(c->args, "", "version", 0, 31, &version, &e) != 0 ||
	    jsonx_get_string(c->args, "", "token_hash", 1, SHA256_HEX_LEN, &hash, &e) != 0)
		return fsm_res_from_err(&e);
	if (!fsm_valid_name(name))
		return fsm_res_err(400, "name",
		                   "name: '%s' must be 1-63 characters of [A-Za-z0-9._-]", name);
	if (!valid_host(host))
		return fsm_res_err(400, "host", "host: '%s' is not a host name or address", host);
	if (strlen(hash) != SHA256_HEX_LEN)
		return fsm_res_err(400, "token_hash", "token_hash: must be 64 hex characters");
	json_t *devices = json_object_get(c->args, "devices");
	json_t *labels = json_object_get(c->args, "labels");
	if ((r = check_devices(devices)) != NULL || (r = check_labels(labels)) != NULL)
		return r;

	char state[16] = "";
	sqlite3_stmt *st = fsm_prepare(f, "SELECT state FROM nodes WHERE id = ?1");
	if (st == NULL)
		return NULL;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(state, sizeof state, "%s", (const char *)sqlite3_column_text(st, 0));
	fsm_release(f, st);

	char *devices_text = json_dumps(devices, JSON_COMPACT | JSON_SORT_KEYS);
	json_t *no_labels = json_object();
	char *labels_text =
	    json_dumps(json_is_object(labels) ? labels : no_labels, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(no_labels);
	int rc = fsm_run(f,
	                 "INSERT INTO nodes(id, name, state, address, devices, version, updated_ms,"
	                 " port_base, labels, token_hash, registered_ms, reason)"
	                 " VALUES(?1, ?1, 'up', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?5, 'registered')"
	                 " ON CONFLICT(id) DO UPDATE SET state = 'up', address = ?2, devices = ?3,"
	                 " version = ?4, updated_ms = ?5, port_base = ?6, labels = ?7,"
	                 " token_hash = ?8, registered_ms = ?5, reason = 'registered again'",
	                 "ssssiiss", name, host, devices_text, version, c->ts, port_base,
	                 labels_text, hash);
	free(devices_text);
	free(labels_text);
	if (rc == SQLITE_CONSTRAINT)
		return fsm_res_err(409, "token_hash", "token_hash: already used by another node");
	if (rc != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "node.registered", NULL, c->actor,
	                     "node %s registered%s: %zu %s device(s) at %s, ports from %lld%s%s",
	                     name, state[0] ? " again" : "", json_array_size(devices),
	                     json_string_value(json_object_get(json_array_get(devices, 0), "kind")),
	                     host, (long long)port_base, state[0] ? ", was " : "", state) != 0)
		return NULL;
	json_t *res = fsm_res_ok(200, json_pack("{s:s,s:s}", "node_id", name, "state", "up"));
	json_object_set_new(res, "hash", json_string(hash)); /* lets the API spot a replayed id */
	return res;
}

json_t *fsm_op_node_set_state(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", "state", "reason", NULL};
	struct yard_err e = {0};
	const char *id = NULL, *to = NULL, *reason = "";
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_NAME_MAX, &id, &e) != 0 ||
	    jsonx_get_string(c->args, "", "state", 1, 16, &to, &e) != 0 ||
	    jsonx_get_string(c->args, "", "reason", 0, 256, &reason, &e) != 0)
		return fsm_res_from_err(&e);
	if (!in_list(to, NODE_STATES))
		return fsm_res_err(400, "state", "state: '%s' is not up, suspect or down", to);
	char from[16] = "";
	sqlite3_stmt *st = fsm_prepare(f, "SELECT state FROM nodes WHERE id = ?1");
	if (st == NULL)
		return NULL;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(from, sizeof from, "%s", (const char *)sqlite3_column_text(st, 0));
	fsm_release(f, st);
	if (from[0] == '\0')
		return fsm_res_err(404, "id", "no node %s", id);
	if (strcmp(from, to) == 0)
		return fsm_res_ok(200,
		                  json_pack("{s:s,s:s,s:b}", "id", id, "state", to, "changed", 0));
	if (fsm_run(f, "UPDATE nodes SET state = ?2, updated_ms = ?3, reason = ?4 WHERE id = ?1",
	            "ssis", id, to, c->ts, reason) != SQLITE_DONE)
		return NULL;
	char type[32];
	snprintf(type, sizeof type, "node.%s", to);
	if (fsm_event_append(f, c->ts, type, NULL, c->actor, "node %s %s -> %s%s%s", id, from, to,
	                     reason[0] ? ": " : "", reason) != 0)
		return NULL;
	return fsm_res_ok(200, json_pack("{s:s,s:s,s:b}", "id", id, "state", to, "changed", 1));
}

/* Cordon (no new ranks) or uncordon (which also ends a drain). Cordoning a draining or
 * drained node leaves it as it is. */
json_t *fsm_op_node_cordon(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", "cordoned", NULL};
	struct yard_err e = {0};
	const char *id = NULL;
	int cordoned = 1;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_NAME_MAX, &id, &e) != 0 ||
	    jsonx_get_bool(c->args, "", "cordoned", 1, &cordoned, &e) != 0)
		return fsm_res_from_err(&e);
	if (fsm_run(f,
	            "UPDATE nodes SET cordoned = CASE WHEN ?2 = 0 THEN 0 WHEN cordoned = 0 THEN 1"
	            " ELSE cordoned END, updated_ms = ?3 WHERE id = ?1",
	            "sii", id, (int64_t)cordoned, c->ts) != SQLITE_DONE)
		return NULL;
	if (sqlite3_changes(f->db) == 0)
		return fsm_res_err(404, "id", "no node %s", id);
	if (fsm_event_append(f, c->ts, cordoned ? "node.cordoned" : "node.uncordoned", NULL,
	                     c->actor, "node %s %s by %s", id,
	                     cordoned ? "cordoned (no new ranks)" : "uncordoned", c->actor) != 0)
		return NULL;
	struct yard_err qe = {0};
	json_t *node = fsm_node_get(f, id, &qe);
	return node ? fsm_res_ok(200, node) : NULL;
}

/* Reads the {"id"} args of node.drain / node.drained and the node's cordoned column
 * (FSM_NODE_*) into *was. Returns an error result, or NULL. */
static json_t *drain_args(struct fsm *f, const struct fsm_cmd *c, const char **id, int *was)
{
	static const char *const keys[] = {"id", NULL};
	struct yard_err e = {0};
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_NAME_MAX, id, &e) != 0)
		return fsm_res_from_err(&e);
	sqlite3_stmt *st = fsm_prepare(f, "SELECT cordoned FROM nodes WHERE id = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "internal error reading node %s", *id);
	sqlite3_bind_text(st, 1, *id, -1, SQLITE_STATIC);
	*was = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
	fsm_release(f, st);
	return *was < 0 ? fsm_res_err(404, "id", "no node %s", *id) : NULL;
}

/* Drain: a cordon, and the scheduler moves every running rank of the node elsewhere (its
 * jobs restart from their newest checkpoint, not counted against max_restarts). */
json_t *fsm_op_node_drain(struct fsm *f, const struct fsm_cmd *c)
{
	const char *id = NULL;
	int was = -1;
	json_t *r = drain_args(f, c, &id, &was);
	if (r != NULL)
		return r;
	if (was != FSM_NODE_DRAINING && was != FSM_NODE_DRAINED) {
		int64_t ranks = 0, jobs = 0;
		sqlite3_stmt *st =
		    fsm_prepare(f, "SELECT count(*), count(DISTINCT a.job) FROM assignments a"
		                   " JOIN jobs j ON j.id = a.job"
		                   " WHERE a.node = ?1 AND a.running = 1 AND j.state = 'running'");
		if (st == NULL)
			return NULL;
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW) {
			ranks = sqlite3_column_int64(st, 0);
			jobs = sqlite3_column_int64(st, 1);
		}
		fsm_release(f, st);
		if (fsm_run(f, "UPDATE nodes SET cordoned = ?2, updated_ms = ?3 WHERE id = ?1",
		            "sii", id, (int64_t)FSM_NODE_DRAINING, c->ts) != SQLITE_DONE)
			return NULL;
		if (fsm_event_append(f, c->ts, "node.draining", NULL, c->actor,
		                     "node %s draining by %s: no new ranks; %lld running rank(s) "
		                     "of %lld job(s) move to other nodes",
		                     id, c->actor, (long long)ranks, (long long)jobs) != 0)
			return NULL;
	}
	struct yard_err qe = {0};
	json_t *node = fsm_node_get(f, id, &qe);
	return node ? fsm_res_ok(200, node) : NULL;
}

/* The scheduler saw no rank left on a draining node. */
json_t *fsm_op_node_drained(struct fsm *f, const struct fsm_cmd *c)
{
	const char *id = NULL;
	int was = -1;
	json_t *r = drain_args(f, c, &id, &was);
	if (r != NULL)
		return r;
	if (was != FSM_NODE_DRAINING)
		return fsm_res_err(409, "id", "node %s is not draining", id);
	if (fsm_run(f, "UPDATE nodes SET cordoned = ?2, updated_ms = ?3 WHERE id = ?1", "sii", id,
	            (int64_t)FSM_NODE_DRAINED, c->ts) != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "node.drained", NULL, c->actor,
	                     "node %s drained: no rank runs on it", id) != 0)
		return NULL;
	struct yard_err qe = {0};
	json_t *node = fsm_node_get(f, id, &qe);
	return node ? fsm_res_ok(200, node) : NULL;
}

/* ---- placements ---- */

struct job_row {
	char state[16];
	int64_t generation, restarts, world;
	int64_t step;          /* the last step its ranks reported */
	int is_auto, has_plan; /* parallel "auto"; a plan is recorded */
};

static json_t *job_row_read(struct fsm *f, const char *id, struct job_row *row)
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT state, generation, restarts, json_extract(spec, '$.ranks'),"
	                   " json_extract(spec, '$.parallel') = 'auto', plan IS NOT NULL, step"
	                   " FROM jobs WHERE id = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "internal error reading job %s", id);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	json_t *r = NULL;
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(row->state, sizeof row->state, "%s",
		         (const char *)sqlite3_column_text(st, 0));
		row->generation = sqlite3_column_int64(st, 1);
		row->restarts = sqlite3_column_int64(st, 2);
		row->world =
		    sqlite3_column_type(st, 3) == SQLITE_INTEGER ? sqlite3_column_int64(st, 3) : -1;
		row->is_auto = sqlite3_column_int(st, 4);
		row->has_plan = sqlite3_column_int(st, 5);
		row->step = sqlite3_column_int64(st, 6);
	} else {
		r = fsm_res_err(404, "id", "no job %s", id);
	}
	fsm_release(f, st);
	return r;
}

/* The node's device count if it may receive ranks (up, not cordoned); else an error. */
static json_t *node_usable(struct fsm *f, const char *node, int64_t *n_devices)
{
	sqlite3_stmt *st = fsm_prepare(
	    f, "SELECT state, cordoned, json_array_length(devices) FROM nodes WHERE id = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "internal error reading node %s", node);
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	json_t *r = NULL;
	if (sqlite3_step(st) != SQLITE_ROW)
		r = fsm_res_err(409, "ranks", "ranks: no node %s", node);
	else if (strcmp((const char *)sqlite3_column_text(st, 0), "up") != 0)
		r = fsm_res_err(409, "ranks", "ranks: node %s is %s", node,
		                (const char *)sqlite3_column_text(st, 0));
	else if (sqlite3_column_int(st, 1) != 0)
		r = fsm_res_err(409, "ranks", "ranks: node %s is cordoned", node);
	else
		*n_devices = sqlite3_column_int64(st, 2);
	fsm_release(f, st);
	return r;
}

/* The running job other than self holding node:device, written into holder; 0 if free. */
static int device_holder(struct fsm *f, const char *self, const char *node, int64_t device,
                         char holder[FSM_ID_MAX])
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT a.job FROM assignments a JOIN jobs j ON j.id = a.job"
	                   " WHERE a.node = ?1 AND a.device = ?2 AND a.running = 1 AND"
	                   " j.state = 'running' AND a.job != ?3 LIMIT 1");
	int held = 0;
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, device);
	sqlite3_bind_text(st, 3, self, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(holder, FSM_ID_MAX, "%s", (const char *)sqlite3_column_text(st, 0));
		held = 1;
	}
	fsm_release(f, st);
	return held;
}

/* The devices of node held by running jobs other than self, as bits (NODE_MAX_DEVICES of
 * them): one query per node of a placement instead of one per rank. -1 if unreadable. */
static int devices_held(struct fsm *f, const char *self, const char *node, uint64_t *held)
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT a.device FROM assignments a JOIN jobs j ON j.id = a.job"
	                   " WHERE a.node = ?1 AND a.running = 1 AND j.state = 'running'"
	                   " AND a.job != ?2");
	int rc;
	*held = 0;
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, self, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t device = sqlite3_column_int64(st, 0);
		if (device >= 0 && device < NODE_MAX_DEVICES)
			*held |= UINT64_C(1) << device;
	}
	fsm_release(f, st);
	return rc == SQLITE_DONE ? 0 : -1;
}

/* A placement's slots sorted by node, device and rank: what its checks and its summary read
 * instead of comparing every pair of slots (a placement of thousands of ranks is applied by
 * every member). */
struct slot_key {
	const char *node;
	int64_t device;
	int rank;
};

static int slot_key_cmp(const void *a, const void *b)
{
	const struct slot_key *x = a, *y = b;
	int c = strcmp(x->node, y->node);
	if (c != 0)
		return c;
	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	return x->rank - y->rank;
}

/* The slots' keys, sorted (malloc'd, [size of ranks]; NULL without memory); with_device 0
 * leaves the devices out (every key's device 0): sorted by node and rank. */
static struct slot_key *slot_keys_sorted(const json_t *ranks, int with_device)
{
	size_t n = json_array_size(ranks);
	struct slot_key *keys = malloc((n + 1) * sizeof *keys);
	if (keys == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const json_t *slot = json_array_get(ranks, i);
		const char *node = json_string_value(json_object_get(slot, "node"));
		keys[i] = (struct slot_key){
		    .node = node != NULL ? node : "",
		    .device = with_device ? json_integer_value(json_object_get(slot, "device")) : 0,
		    .rank = (int)i};
	}
	qsort(keys, n, sizeof *keys, slot_key_cmp);
	return keys;
}

/* For each slot of a placement, the first earlier rank given the same node:device, or -1
 * (malloc'd, [size of ranks]; NULL without memory). */
static int *slot_duplicates(const json_t *ranks)
{
	size_t n = json_array_size(ranks);
	struct slot_key *keys = slot_keys_sorted(ranks, 1);
	int *dup_of = malloc((n + 1) * sizeof *dup_of);
	if (keys == NULL || dup_of == NULL) {
		free(keys);
		free(dup_of);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		dup_of[i] = -1;
	for (size_t i = 1, first = 0; i < n; i++) {
		if (strcmp(keys[i].node, keys[first].node) == 0 &&
		    keys[i].device == keys[first].device)
			dup_of[keys[i].rank] = keys[first].rank;
		else
			first = i;
	}
	free(keys);
	return dup_of;
}

struct node_run {
	const char *node;
	int first, count; /* the node's first rank, its ranks */
};

static int node_run_cmp(const void *a, const void *b)
{
	return ((const struct node_run *)a)->first - ((const struct node_run *)b)->first;
}

/* "node-a (4), node-b (2)": the nodes of a placement in rank order with rank counts, as much
 * as out_len holds. -1 without memory. */
static int placement_summary(const json_t *ranks, char *out, size_t out_len)
{
	size_t n_slots = json_array_size(ranks), n_runs = 0, n = 0;
	struct slot_key *keys = slot_keys_sorted(ranks, 0);
	struct node_run *runs = malloc((n_slots + 1) * sizeof *runs);
	out[0] = '\0';
	if (keys == NULL || runs == NULL) {
		free(keys);
		free(runs);
		return -1;
	}
	for (size_t i = 0; i < n_slots; i++) {
		if (i == 0 || strcmp(keys[i].node, keys[i - 1].node) != 0)
			runs[n_runs++] = (struct node_run){keys[i].node, keys[i].rank, 0};
		runs[n_runs - 1].count++; /* keys[i].rank ascends within a node */
	}
	qsort(runs, n_runs, sizeof *runs, node_run_cmp);
	for (size_t r = 0; r < n_runs && n < out_len; r++)
		n += (size_t)snprintf(out + n, out_len - n, "%s%s (%d)", n ? ", " : "",
		                      runs[r].node, runs[r].count);
	free(keys);
	free(runs);
	return 0;
}

#define PLAN_MAX_BYTES 8192

/* The plan of a job.assign: required for a parallel "auto" job placed for the first time
 * (later placements may repeat it), refused for other jobs; its layout must have as many
 * ranks as the placement. */
static json_t *check_plan(const char *id, const struct job_row *row, const json_t *plan,
                          const json_t *ranks)
{
	const json_t *layout = json_object_get(plan, "layout");
	int64_t world = 1;
	static const char *const sizes[] = {"dp", "tp", "pp", NULL};
	if (plan == NULL)
		return row->is_auto && !row->has_plan
		           ? fsm_res_err(400, "plan",
		                         "plan: job %s has parallel \"auto\"; its first "
		                         "placement must carry the planner's layout",
		                         id)
		           : NULL;
	if (!row->is_auto)
		return fsm_res_err(400, "plan",
		                   "plan: job %s has a fixed layout; only parallel \"auto\" jobs "
		                   "record a plan",
		                   id);
	char *text = json_dumps(plan, JSON_COMPACT);
	size_t len = text ? strlen(text) : 0;
	free(text);
	if (!json_is_object(layout) || len > PLAN_MAX_BYTES)
		return fsm_res_err(400, "plan",
		                   "plan: must be an object of at most %d bytes with a layout",
		                   PLAN_MAX_BYTES);
	for (int i = 0; sizes[i] != NULL; i++) {
		json_int_t v = json_integer_value(json_object_get(layout, sizes[i]));
		if (v < 1 || v > 1024)
			return fsm_res_err(400, "plan", "plan.layout.%s: must be 1..1024",
			                   sizes[i]);
		world *= v;
	}
	if (world != (int64_t)json_array_size(ranks))
		return fsm_res_err(400, "ranks",
		                   "ranks: the plan's layout has %lld ranks, placement has %zu",
		                   (long long)world, json_array_size(ranks));
	return NULL;
}

/* The data-parallel degree of a job.assign (failure.allow_shrink_dp): dp < 1 when the
 * placement does not name one (the spec's layout). A smaller dp than the spec's is allowed only
 * on a re-placement (restarting) of a job that allows it, and only where the shrunk spec is
 * valid (jobs/spec.h, jobspec_with_dp). Sets *world to the ranks of that layout and *spec_dp
 * to the spec's dp; NULL when the placement may go on, else the error result. */
static json_t *check_dp(struct fsm *f, const char *id, const struct job_row *row, int64_t dp,
                        int64_t *world, int64_t *spec_dp)
{
	*world = row->world;
	*spec_dp = 0;
	if (dp < 1)
		return NULL;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT spec FROM jobs WHERE id = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "internal error reading job %s", id);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	json_t *spec = sqlite3_step(st) == SQLITE_ROW
	                   ? jsonx_loads((const char *)sqlite3_column_text(st, 0))
	                   : NULL;
	fsm_release(f, st);
	if (spec == NULL)
		return fsm_res_err(500, NULL, "internal error reading the spec of job %s", id);
	struct yard_err e = {0};
	json_t *run = jobspec_with_dp(spec, (int)dp, &e);
	const json_t *parallel = json_object_get(spec, "parallel");
	*spec_dp = json_integer_value(json_object_get(parallel, "dp"));
	*world = dp * json_integer_value(json_object_get(parallel, "tp")) *
	         json_integer_value(json_object_get(parallel, "pp"));
	json_decref(spec);
	if (run == NULL)
		return fsm_res_err(400, "dp", "job %s: %s", id, e.msg);
	json_decref(run);
	if (dp < *spec_dp && strcmp(row->state, "restarting") != 0)
		return fsm_res_err(
		    409, "dp",
		    "dp: job %s is %s; only a re-placement (restarting) may shrink its "
		    "data-parallel degree",
		    id, row->state);
	return NULL;
}

/* Why a placement's slots cannot be used, as the result to answer, judged rank by rank: a
 * malformed slot, a node that is unknown, not up or cordoned, a device the node does not
 * have, a device given to an earlier rank too, a device a running job holds. *refusal stays
 * NULL when every slot is usable. -1 on an internal error. */
static int slots_refusal(struct fsm *f, const char *id, const json_t *ranks, json_t **refusal)
{
	static const char *const slot_keys[] = {"node", "device", NULL};
	struct yard_err e = {0};
	int *dup_of = slot_duplicates(ranks);
	const char *usable = NULL; /* the last node found usable, its devices, those held */
	int64_t n_devices = 0;
	uint64_t held_bits = 0;
	int rc = 0;
	size_t i;
	json_t *slot;
	if (dup_of == NULL)
		return -1;
	json_array_foreach(ranks, i, slot)
	{
		char prefix[32], holder[FSM_ID_MAX];
		const char *node = NULL;
		int64_t device = -1;
		snprintf(prefix, sizeof prefix, "ranks[%zu]", i);
		if (!json_is_object(slot)) {
			*refusal = fsm_res_err(400, "ranks", "%s: must be {node, device}", prefix);
			break;
		}
		if (jsonx_only_keys(slot, prefix, slot_keys, &e) != 0 ||
		    jsonx_get_string(slot, prefix, "node", 1, FSM_NAME_MAX, &node, &e) != 0 ||
		    jsonx_get_int(slot, prefix, "device", 1, 0, NODE_MAX_DEVICES - 1, &device,
		                  &e) != 0) {
			*refusal = fsm_res_from_err(&e);
			break;
		}
		/* a node's ranks are usually neighbours: its row is read once for them */
		if (usable == NULL || strcmp(usable, node) != 0) {
			usable = NULL;
			if ((*refusal = node_usable(f, node, &n_devices)) != NULL)
				break;
			if (devices_held(f, id, node, &held_bits) != 0) {
				rc = -1;
				break;
			}
			usable = node;
		}
		if (device >= n_devices) {
			*refusal = fsm_res_err(
			    409, "ranks", "%s: node %s has %lld devices, no device %lld", prefix,
			    node, (long long)n_devices, (long long)device);
			break;
		}
		if (dup_of[i] >= 0) {
			*refusal = fsm_res_err(409, "ranks", "%s: %s:%lld is given to rank %d too",
			                       prefix, node, (long long)device, dup_of[i]);
			break;
		}
		/* the holder is read (by the query the bits came from) only to name it */
		int held =
		    (held_bits >> device) & 1 ? device_holder(f, id, node, device, holder) : 0;
		if (held < 0) {
			rc = -1;
			break;
		}
		if (held) {
			*refusal =
			    fsm_res_err(409, "ranks", "%s: %s:%lld is held by running job %s",
			                prefix, node, (long long)device, holder);
			break;
		}
	}
	free(dup_of);
	return rc;
}

/* The committed plan's layout as "dpA×tpB×ppC" (any schedule). 0, or -1 on an SQL error. */
static int plan_layout_text(struct fsm *f, const char *id, char *out, size_t len)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT json_extract(plan, '$.layout.dp'),"
	                                  " json_extract(plan, '$.layout.tp'),"
	                                  " json_extract(plan, '$.layout.pp') FROM jobs"
	                                  " WHERE id = ?1");
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st) == SQLITE_ROW ? 0 : -1;
	if (rc == 0)
		snprintf(out, len, "dp%lld×tp%lld×pp%lld", (long long)sqlite3_column_int64(st, 0),
		         (long long)sqlite3_column_int64(st, 1),
		         (long long)sqlite3_column_int64(st, 2));
	fsm_release(f, st);
	return rc;
}

json_t *fsm_op_job_assign(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {
	    "id",           "generation", "ranks",         "note",          "plan",
	    "restore_step", "dp",         "shrink_reason", "replan_reason", NULL};
	struct yard_err e = {0};
	const char *id = NULL, *note = "", *shrink_reason = "", *replan_reason = "";
	int64_t generation = 0, restore_step = -1, dp = 0, world = 0, spec_dp = 0;
	struct job_row row;
	json_t *r, *ranks, *slot;
	size_t i;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0 ||
	    jsonx_get_int(c->args, "", "generation", 1, 1, INT32_MAX, &generation, &e) != 0 ||
	    jsonx_get_string(c->args, "", "note", 0, 200, &note, &e) != 0 ||
	    jsonx_get_int(c->args, "", "restore_step", 0, -1, INT64_MAX / 2, &restore_step, &e) !=
	        0 ||
	    jsonx_get_int(c->args, "", "dp", 0, 1, 1024, &dp, &e) != 0 ||
	    jsonx_get_string(c->args, "", "shrink_reason", 0, 200, &shrink_reason, &e) != 0 ||
	    jsonx_get_string(c->args, "", "replan_reason", 0, 200, &replan_reason, &e) != 0)
		return fsm_res_from_err(&e);
	if (json_object_get(c->args, "dp") == NULL)
		dp = 0;
	ranks = json_object_get(c->args, "ranks");
	if (!json_is_array(ranks) || json_array_size(ranks) == 0 || json_array_size(ranks) > 65536)
		return fsm_res_err(400, "ranks", "ranks: must be an array of 1..65536 slots");
	if ((r = job_row_read(f, id, &row)) != NULL)
		return r;
	if (strcmp(row.state, "pending") != 0 && strcmp(row.state, "restarting") != 0)
		return fsm_res_err(409, "id",
		                   "job %s is %s: only pending or restarting jobs are placed", id,
		                   row.state);
	if (generation != row.generation + 1)
		return fsm_res_err(
		    409, "generation",
		    "generation: job %s is at generation %lld; a placement must be %lld", id,
		    (long long)row.generation, (long long)row.generation + 1);
	if ((r = check_plan(id, &row, json_object_get(c->args, "plan"), ranks)) != NULL)
		return r;
	if ((r = check_dp(f, id, &row, dp, &world, &spec_dp)) != NULL)
		return r;
	int shrunk = dp > 0 && dp < spec_dp;
	if (!row.is_auto && world >= 0 && (int64_t)json_array_size(ranks) != world)
		return fsm_res_err(
		    400, "ranks", "ranks: job %s has %lld ranks%s, placement has %zu", id,
		    (long long)world, shrunk ? " with the shrunk dp" : "", json_array_size(ranks));
	json_t *refusal = NULL;
	if (slots_refusal(f, id, ranks, &refusal) != 0)
		return NULL;
	if (refusal != NULL)
		return refusal;
	if ((r = fsm_ckpt_on_assign(f, id, generation, restore_step)) != NULL)
		return r;
	const json_t *plan = json_object_get(c->args, "plan");
	char was[64] = "", now[64] = "";
	if (plan != NULL && row.has_plan) {
		/* a restarting job planned again (the cluster shrank below its layout): said in
		 * job.replanned below */
		if (plan_layout_text(f, id, was, sizeof was) != 0)
			return NULL;
		const json_t *l = json_object_get(plan, "layout");
		snprintf(now, sizeof now, "dp%lld×tp%lld×pp%lld",
		         (long long)json_integer_value(json_object_get(l, "dp")),
		         (long long)json_integer_value(json_object_get(l, "tp")),
		         (long long)json_integer_value(json_object_get(l, "pp")));
	}
	if (plan != NULL) {
		char *text = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS);
		int rc = text
		             ? fsm_run(f, "UPDATE jobs SET plan = ?2 WHERE id = ?1", "ss", id, text)
		             : SQLITE_NOMEM;
		free(text);
		if (rc != SQLITE_DONE)
			return NULL;
	}
	if (fsm_run(f, "DELETE FROM assignments WHERE job = ?1", "s", id) != SQLITE_DONE)
		return NULL;
	/* the old slots go first, so the state change's trigger (fsm.c ASSIGNMENTS_RUNNING)
	 * has none to visit; the new ones are inserted running */
	if (fsm_run(f,
	            "UPDATE jobs SET state = 'running', generation = ?2, updated_ms = ?3,"
	            " reason = NULL, noted = ',', shrunk_dp = CASE WHEN ?4 > 0 THEN ?4 END,"
	            " started_ms = ifnull(started_ms, ?3) WHERE id = ?1",
	            "siii", id, generation, c->ts, shrunk ? dp : (int64_t)0) != SQLITE_DONE)
		return NULL;
	json_array_foreach(ranks, i, slot)
	{
		if (fsm_run(f,
		            "INSERT INTO assignments(job, rank, node, device, generation, running)"
		            " VALUES(?1, ?2, ?3, ?4, ?5, 1)",
		            "sisii", id, (int64_t)i,
		            json_string_value(json_object_get(slot, "node")),
		            json_integer_value(json_object_get(slot, "device")),
		            generation) != SQLITE_DONE)
			return NULL;
	}
	if (shrunk &&
	    fsm_event_append(f, c->ts, "job.shrunk", id, c->actor,
	                     "job %s re-placed with dp %lld (spec dp %lld), %zu of "
	                     "%lld ranks%s%s",
	                     id, (long long)dp, (long long)spec_dp, json_array_size(ranks),
	                     (long long)json_array_size(ranks) / dp * spec_dp,
	                     shrink_reason[0] ? ": " : "", shrink_reason) != 0)
		return NULL;
	if (was[0] != '\0' && fsm_event_append(f, c->ts, "job.replanned", id, c->actor,
	                                       "job %s planned again: %s, was %s%s%s", id, now, was,
	                                       replan_reason[0] ? ": " : "", replan_reason) != 0)
		return NULL;
	char where[300];
	if (placement_summary(ranks, where, sizeof where) != 0)
		return NULL;
	if (fsm_event_append(f, c->ts, "job.placed", id, c->actor,
	                     "job %s %splaced (generation %lld): %zu rank(s) on %s%s%s", id,
	                     strcmp(row.state, "restarting") == 0 ? "re-" : "",
	                     (long long)generation, json_array_size(ranks), where,
	                     note[0] ? "; " : "", note) != 0)
		return NULL;
	return fsm_job_brief(f, id, 200);
}

/* Reads the job into row; NULL when it is running at generation, else the error result (404,
 * or 409 naming its state and generation: a decision about an older phase). */
static json_t *job_running_at(struct fsm *f, const char *id, int64_t generation,
                              struct job_row *row)
{
	json_t *r = job_row_read(f, id, row);
	if (r != NULL)
		return r;
	if (strcmp(row->state, "running") != 0 || row->generation != generation)
		return fsm_res_err(
		    409, "generation",
		    "job %s is %s at generation %lld, not running at generation %lld", id,
		    row->state, (long long)row->generation, (long long)generation);
	return NULL;
}

/* The end of a job.restarting or job.replacing message: the step its ranks last reported
 * (jobs/timeline.h, JOB_REACHED). */
#define REACHED JOB_REACHED "%lld"

/* Reads the optional step/loss progress fields common to restart and finish. */
static json_t *progress_args(const json_t *args, int64_t *step, double *loss)
{
	struct yard_err e = {0};
	if (jsonx_get_int(args, "", "step", 0, 0, INT64_MAX, step, &e) != 0 ||
	    jsonx_get_double(args, "", "loss", 0, -1e300, 1e300, loss, &e) != 0)
		return fsm_res_from_err(&e);
	return NULL;
}

json_t *fsm_op_job_restart(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id",   "generation", "reason", "max_restarts",
	                                   "step", "loss",       "drain",  NULL};
	struct yard_err e = {0};
	const char *id = NULL, *reason = NULL;
	int drain = 0; /* moving off a draining node: not a failure, not counted */
	int64_t generation = 0, max_restarts = 0, step = -1;
	double loss = -1e301;
	struct job_row row;
	json_t *r;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0 ||
	    jsonx_get_int(c->args, "", "generation", 1, 1, INT32_MAX, &generation, &e) != 0 ||
	    jsonx_get_string(c->args, "", "reason", 1, 256, &reason, &e) != 0 ||
	    jsonx_get_int(c->args, "", "max_restarts", 1, 0, 1000, &max_restarts, &e) != 0 ||
	    jsonx_get_bool(c->args, "", "drain", 0, &drain, &e) != 0)
		return fsm_res_from_err(&e);
	if ((r = progress_args(c->args, &step, &loss)) != NULL)
		return r;
	if ((r = job_running_at(f, id, generation, &row)) != NULL)
		return r;
	int give_up = !drain && row.restarts >= max_restarts;
	if (fsm_run(f,
	            "UPDATE jobs SET state = ?2, updated_ms = ?3, reason = ?4, noted = ',',"
	            " restarts = restarts + ?5,"
	            " step = CASE WHEN ?6 >= 0 THEN ?6 ELSE step END,"
	            " loss = CASE WHEN ?7 > -1e300 THEN ?7 ELSE loss END WHERE id = ?1",
	            "ssisiid", id, give_up ? "failed" : "restarting", c->ts, reason,
	            (int64_t)(give_up || drain ? 0 : 1), step, loss) != SQLITE_DONE ||
	    (give_up && fsm_ckpt_on_job_end(f, id) != 0))
		return NULL;
	/* an interruption's message ends in the step reached (jobs/timeline.c reads it) */
	long long reached = (long long)(step >= 0 ? step : row.step);
	int rc = drain ? fsm_event_append(f, c->ts, "job.restarting", id, c->actor,
	                                  "job %s restarting elsewhere (not counted against "
	                                  "max_restarts): %s" REACHED,
	                                  id, reason, reached)
	         : give_up
	             ? fsm_event_append(f, c->ts, "job.failed", id, c->actor,
	                                "job %s failed: %s; %lld restart(s) used of %lld", id,
	                                reason, (long long)row.restarts, (long long)max_restarts)
	             : fsm_event_append(f, c->ts, "job.restarting", id, c->actor,
	                                "job %s restarting (restart %lld of %lld): %s" REACHED, id,
	                                (long long)row.restarts + 1, (long long)max_restarts,
	                                reason, reached);
	if (rc != 0)
		return NULL;
	return fsm_job_brief(f, id, 200);
}

json_t *fsm_op_job_finish(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id",   "generation", "state", "reason",
	                                   "step", "loss",       NULL};
	struct yard_err e = {0};
	const char *id = NULL, *to = NULL, *reason = NULL;
	int64_t generation = 0, step = -1;
	double loss = -1e301;
	struct job_row row;
	json_t *r;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0 ||
	    jsonx_get_int(c->args, "", "generation", 1, 0, INT32_MAX, &generation, &e) != 0 ||
	    jsonx_get_string(c->args, "", "state", 1, 16, &to, &e) != 0 ||
	    jsonx_get_string(c->args, "", "reason", 1, 256, &reason, &e) != 0)
		return fsm_res_from_err(&e);
	if (strcmp(to, "succeeded") != 0 && strcmp(to, "failed") != 0)
		return fsm_res_err(400, "state", "state: '%s' must be succeeded or failed", to);
	if ((r = progress_args(c->args, &step, &loss)) != NULL)
		return r;
	if ((r = job_row_read(f, id, &row)) != NULL)
		return r;
	if (fsm_job_state_terminal(row.state) || row.generation != generation ||
	    (strcmp(to, "succeeded") == 0 && strcmp(row.state, "running") != 0))
		return fsm_res_err(409, "generation",
		                   "job %s is %s at generation %lld: cannot become %s", id,
		                   row.state, (long long)row.generation, to);
	if (fsm_run(f,
	            "UPDATE jobs SET state = ?2, updated_ms = ?3, reason = ?4,"
	            " step = CASE WHEN ?5 >= 0 THEN ?5 ELSE step END,"
	            " loss = CASE WHEN ?6 > -1e300 THEN ?6 ELSE loss END WHERE id = ?1",
	            "ssisid", id, to, c->ts, reason, step, loss) != SQLITE_DONE ||
	    fsm_ckpt_on_job_end(f, id) != 0)
		return NULL;
	char type[32];
	snprintf(type, sizeof type, "job.%s", to);
	if (fsm_event_append(f, c->ts, type, id, c->actor, "job %s %s: %s", id, to, reason) != 0)
		return NULL;
	return fsm_job_brief(f, id, 200);
}

int64_t fsm_job_replacements(struct fsm *f, const char *id)
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT count(*) FROM events WHERE job = ?1 AND type = 'job.replacing'");
	int64_t used = -1;
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		used = sqlite3_column_int64(st, 0);
	fsm_release(f, st);
	return used;
}

json_t *fsm_op_job_note(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", "generation", "type", "message", "key", NULL};
	static const char *const types[] = {"stopped",   "running",      "progress", "waiting",
	                                    "straggler", "straggler_ok", NULL};
	struct yard_err e = {0};
	const char *id = NULL, *type = NULL, *message = NULL, *key = NULL;
	int64_t generation = 0;
	struct job_row row;
	json_t *r;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0 ||
	    jsonx_get_int(c->args, "", "generation", 1, 0, INT32_MAX, &generation, &e) != 0 ||
	    jsonx_get_string(c->args, "", "type", 1, 16, &type, &e) != 0 ||
	    jsonx_get_string(c->args, "", "message", 1, 400, &message, &e) != 0 ||
	    jsonx_get_string(c->args, "", "key", 0, 40, &key, &e) != 0)
		return fsm_res_from_err(&e);
	if (!in_list(type, types))
		return fsm_res_err(400, "type",
		                   "type: '%s' is not stopped, running, progress, waiting, "
		                   "straggler or straggler_ok",
		                   type);
	if (key != NULL && strpbrk(key, ",:") != NULL)
		return fsm_res_err(400, "key", "key: '%s' must not contain ',' or ':'", key);
	if ((r = job_row_read(f, id, &row)) != NULL)
		return r;
	if (fsm_job_state_terminal(row.state) || row.generation != generation)
		return fsm_res_err(409, "generation",
		                   "job %s is %s at generation %lld: note dropped", id, row.state,
		                   (long long)row.generation);
	/* once per type (and key, when given) and phase (placement or restart): a new leader,
	 * which starts without the old one's memory, may propose a note again without telling
	 * the story twice */
	char tag[64];
	snprintf(tag, sizeof tag, ",%s%s%s,", type, key ? ":" : "", key ? key : "");
	sqlite3_stmt *st = fsm_prepare(f, "SELECT instr(noted, ?2) FROM jobs WHERE id = ?1");
	int seen = 0;
	if (st == NULL)
		return NULL;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		seen = sqlite3_column_int(st, 0) > 0;
	fsm_release(f, st);
	if (seen)
		return fsm_res_ok(
		    200, json_pack("{s:s,s:s,s:b}", "id", id, "type", type, "duplicate", 1));
	if (fsm_run(f, "UPDATE jobs SET noted = noted || substr(?2, 2) WHERE id = ?1", "ss", id,
	            tag) != SQLITE_DONE)
		return NULL;
	if (strcmp(type, "waiting") == 0 && fsm_run(f, "UPDATE jobs SET reason = ?2 WHERE id = ?1",
	                                            "ss", id, message) != SQLITE_DONE)
		return NULL;
	char event_type[32];
	snprintf(event_type, sizeof event_type, "job.%s", type);
	if (fsm_event_append(f, c->ts, event_type, id, c->actor, "job %s: %s", id, message) != 0)
		return NULL;
	return fsm_res_ok(200, json_pack("{s:s,s:s}", "id", id, "type", type));
}

/* Replaces a straggler (failure.straggler.policy "replace"): cordons its node and restarts
 * the job, which is then placed again on uncordoned nodes and restores its newest checkpoint.
 * Not counted as a restart (max_restarts is for failures); the replacements are the job's
 * job.replacing events, capped by max_replacements: past the cap the job keeps running and
 * a job.straggler event says why nothing moved. */
json_t *fsm_op_job_replace(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id",     "generation",       "rank", "node",
	                                   "reason", "max_replacements", NULL};
	struct yard_err e = {0};
	const char *id = NULL, *node = NULL, *reason = NULL;
	int64_t generation = 0, rank = 0, max_replacements = 0, used = 0;
	struct job_row row;
	json_t *r;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0 ||
	    jsonx_get_int(c->args, "", "generation", 1, 1, INT32_MAX, &generation, &e) != 0 ||
	    jsonx_get_int(c->args, "", "rank", 1, 0, 65535, &rank, &e) != 0 ||
	    jsonx_get_string(c->args, "", "node", 1, FSM_NAME_MAX, &node, &e) != 0 ||
	    jsonx_get_string(c->args, "", "reason", 1, 256, &reason, &e) != 0 ||
	    jsonx_get_int(c->args, "", "max_replacements", 1, 0, 1000, &max_replacements, &e) != 0)
		return fsm_res_from_err(&e);
	if ((r = job_running_at(f, id, generation, &row)) != NULL)
		return r;
	if ((used = fsm_job_replacements(f, id)) < 0)
		return NULL;
	if (used >= max_replacements) {
		if (fsm_event_append(f, c->ts, "job.straggler", id, c->actor,
		                     "job %s: %s; not replaced: %lld of max_replacements %lld used",
		                     id, reason, (long long)used, (long long)max_replacements) != 0)
			return NULL;
		return fsm_res_ok(200, json_pack("{s:s,s:b,s:I}", "id", id, "replaced", 0,
		                                 "replacements", (json_int_t)used));
	}
	if (fsm_run(f, "UPDATE nodes SET cordoned = 1, updated_ms = ?2 WHERE id = ?1", "si", node,
	            c->ts) != SQLITE_DONE)
		return NULL;
	if (sqlite3_changes(f->db) == 0)
		return fsm_res_err(404, "node", "no node %s", node);
	if (fsm_event_append(f, c->ts, "node.cordoned", NULL, c->actor,
	                     "node %s cordoned (no new ranks) by %s: straggler rank %lld of job %s",
	                     node, c->actor, (long long)rank, id) != 0)
		return NULL;
	if (fsm_run(f,
	            "UPDATE jobs SET state = 'restarting', updated_ms = ?2, reason = ?3,"
	            " noted = ',' WHERE id = ?1",
	            "sis", id, c->ts, reason) != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "job.replacing", id, c->actor,
	                     "job %s restarting to move straggler rank %lld off node %s "
	                     "(replacement %lld of %lld): %s" REACHED,
	                     id, (long long)rank, node, (long long)used + 1,
	                     (long long)max_replacements, reason, (long long)row.step) != 0)
		return NULL;
	return fsm_job_brief(f, id, 200);
}
