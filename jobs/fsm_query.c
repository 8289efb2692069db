/* fsm_query.c: reads of the replicated database for the API (jobs, events, tokens,
 * members, config). Nothing here changes the database. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "jobs/fsm.h"
#include "jobs/fsm_internal.h"

static json_t *col_text_or_null(sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return json_null();
	return json_string((const char *)sqlite3_column_text(st, i));
}

#define JOB_COLUMNS                                                                                \
	"id, name, state, priority, submitted_ms, updated_ms, actor, spec, reason, step, loss,"    \
	" restarts, seq, generation, plan, shrunk_dp, started_ms"

/* known(data, id): the spec of job id as read before (borrowed), or NULL to parse the row's:
 * a job's spec never changes after its submission. */
typedef const json_t *(*known_spec_fn)(void *data, const char *id);

static json_t *job_from_row_known(sqlite3_stmt *st, known_spec_fn known, void *data)
{
	const json_t *seen =
	    known != NULL ? known(data, (const char *)sqlite3_column_text(st, 0)) : NULL;
	json_t *spec = seen != NULL ? json_incref((json_t *)seen)
	                            : jsonx_loads((const char *)sqlite3_column_text(st, 7));
	json_t *loss = sqlite3_column_type(st, 10) == SQLITE_NULL
	                   ? json_null()
	                   : json_real(sqlite3_column_double(st, 10));
	json_t *plan = sqlite3_column_type(st, 14) == SQLITE_NULL
	                   ? NULL
	                   : jsonx_loads((const char *)sqlite3_column_text(st, 14));
	json_t *job = json_pack(
	    "{s:s,s:s,s:s,s:I,s:I,s:I,s:s,s:o,s:o,s:I,s:o,s:I,s:I}", "id",
	    sqlite3_column_text(st, 0), "name", sqlite3_column_text(st, 1), "state",
	    sqlite3_column_text(st, 2), "priority", (json_int_t)sqlite3_column_int64(st, 3),
	    "submitted_ms", (json_int_t)sqlite3_column_int64(st, 4), "updated_ms",
	    (json_int_t)sqlite3_column_int64(st, 5), "actor", sqlite3_column_text(st, 6), "spec",
	    spec ? spec : json_object(), "reason", col_text_or_null(st, 8), "step",
	    (json_int_t)sqlite3_column_int64(st, 9), "loss", loss, "restarts",
	    (json_int_t)sqlite3_column_int64(st, 11), "generation",
	    (json_int_t)sqlite3_column_int64(st, 13));
	/* the layout the ranks run: the spec's, the plan's (parallel "auto"), with dp shrunk
	 * when the job was re-placed with fewer replicas (failure.allow_shrink_dp) */
	const json_t *layout = json_object_get(json_object_get(job, "spec"), "parallel");
	if (!json_is_object(layout))
		layout = json_object_get(plan, "layout");
	if (json_is_object(layout)) {
		json_int_t spec_dp = json_integer_value(json_object_get(layout, "dp"));
		json_int_t tp = json_integer_value(json_object_get(layout, "tp"));
		json_int_t pp = json_integer_value(json_object_get(layout, "pp"));
		int shrunk = sqlite3_column_type(st, 15) != SQLITE_NULL;
		json_int_t dp = shrunk ? (json_int_t)sqlite3_column_int64(st, 15) : spec_dp;
		json_object_set_new(job, "effective",
		                    json_pack("{s:I,s:I,s:I,s:I,s:I,s:b}", "dp", dp, "tp", tp, "pp",
		                              pp, "world", dp * tp * pp, "spec_dp", spec_dp,
		                              "shrunk", shrunk));
	}
	if (plan != NULL)
		json_object_set_new(job, "plan", plan); /* parallel "auto": the layout it got */
	if (sqlite3_column_type(st, 16) != SQLITE_NULL) /* its first placement (time_limit_s) */
		json_object_set_new(job, "started_ms", json_integer(sqlite3_column_int64(st, 16)));
	return job;
}

static json_t *job_from_row(sqlite3_stmt *st)
{
	return job_from_row_known(st, NULL, NULL);
}

json_t *fsm_job_get(struct fsm *f, const char *id, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " JOB_COLUMNS " FROM jobs WHERE id = ?1");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot read job %s", id);
		return NULL;
	}
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	json_t *job = NULL;
	if (sqlite3_step(st) == SQLITE_ROW)
		job = job_from_row(st);
	else
		yard_err_set(err, YARD_ENOTFOUND, "no job %s", id);
	fsm_release(f, st);
	if (job != NULL)
		json_object_set_new(job, "layout", fsm_job_layout(f, id));
	return job;
}

json_t *fsm_job_layout(struct fsm *f, const char *id)
{
	json_t *list = json_array();
	sqlite3_stmt *st = fsm_prepare(f, "SELECT rank, node, device, generation FROM assignments"
	                                  " WHERE job = ?1 ORDER BY rank");
	if (st == NULL)
		return list;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	/* member by member rather than json_pack (the scheduler reads a layout per placement
	 * and per job it shows); node names are the checked [A-Za-z0-9._-] of node.register */
	while (sqlite3_step(st) == SQLITE_ROW) {
		json_t *slot = json_object();
		json_object_set_new_nocheck(slot, "rank",
		                            json_integer(sqlite3_column_int64(st, 0)));
		json_object_set_new_nocheck(
		    slot, "node", json_string_nocheck((const char *)sqlite3_column_text(st, 1)));
		json_object_set_new_nocheck(slot, "device",
		                            json_integer(sqlite3_column_int64(st, 2)));
		json_object_set_new_nocheck(slot, "generation",
		                            json_integer(sqlite3_column_int64(st, 3)));
		json_array_append_new(list, slot);
	}
	fsm_release(f, st);
	return list;
}

json_t *fsm_jobs_active(struct fsm *f)
{
	json_t *list = json_array();
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " JOB_COLUMNS " FROM jobs WHERE state IN"
	                                  " ('pending', 'running', 'restarting') ORDER BY seq");
	if (st == NULL)
		return list;
	while (sqlite3_step(st) == SQLITE_ROW) {
		json_t *job = job_from_row(st);
		json_object_set_new(job, "seq", json_integer(sqlite3_column_int64(st, 12)));
		json_array_append_new(list, job);
	}
	fsm_release(f, st);
	return list;
}

struct seq_rowid {
	int64_t seq, rowid;
};

/* Appends the (seq, rowid) of the jobs in state, in seq order, to *v; -1: no memory. */
static int rowids_in_state(struct fsm *f, const char *state, struct seq_rowid **v, int *n, int *cap)
{
	/* one range of the jobs_state index, already in seq order: no sort of the whole
	 * active set (ORDER BY seq over three states sorted 100,000 rows: 160-780 ms) */
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT seq, rowid FROM jobs WHERE state = ?1 ORDER BY seq");
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
	int rc = 0;
	while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
		if (*n == *cap) {
			int grown_cap = *cap ? 2 * *cap : 256;
			struct seq_rowid *grown = realloc(*v, (size_t)grown_cap * sizeof *grown);
			if (grown == NULL) {
				rc = -1;
				break;
			}
			*v = grown;
			*cap = grown_cap;
		}
		(*v)[*n].seq = sqlite3_column_int64(st, 0);
		(*v)[(*n)++].rowid = sqlite3_column_int64(st, 1);
	}
	fsm_release(f, st);
	return rc;
}

int64_t *fsm_jobs_active_rowids(struct fsm *f, int *n)
{
	static const char *const states[] = {"pending", "running", "restarting"};
	struct seq_rowid *v = NULL;
	int cap = 0, total = 0, start[4];
	*n = 0;
	for (int k = 0; k < 3; k++) {
		start[k] = total;
		if (rowids_in_state(f, states[k], &v, &total, &cap) != 0) {
			free(v);
			return NULL;
		}
	}
	start[3] = total;
	int64_t *ids = malloc((size_t)(total > 0 ? total : 1) * sizeof *ids);
	if (ids == NULL) {
		free(v);
		return NULL;
	}
	/* merge the three runs by seq */
	int at[3] = {start[0], start[1], start[2]};
	for (int out = 0; out < total; out++) {
		int best = -1;
		for (int k = 0; k < 3; k++)
			if (at[k] < start[k + 1] && (best < 0 || v[at[k]].seq < v[at[best]].seq))
				best = k;
		ids[out] = v[at[best]++].rowid;
	}
	free(v);
	*n = total;
	return ids;
}

json_t *fsm_job_by_rowid(struct fsm *f, int64_t rowid)
{
	return fsm_job_by_rowid_known(f, rowid, NULL, NULL);
}

json_t *fsm_job_by_rowid_known(struct fsm *f, int64_t rowid,
                               const json_t *(*known)(void *data, const char *id), void *data)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " JOB_COLUMNS " FROM jobs WHERE rowid = ?1");
	if (st == NULL)
		return NULL;
	sqlite3_bind_int64(st, 1, rowid);
	json_t *job = NULL;
	if (sqlite3_step(st) == SQLITE_ROW) {
		job = job_from_row_known(st, known, data);
		json_object_set_new(job, "seq", json_integer(sqlite3_column_int64(st, 12)));
	}
	fsm_release(f, st);
	return job;
}

json_t *fsm_running_slots(struct fsm *f)
{
	json_t *list = json_array();
	sqlite3_stmt *st = fsm_prepare(
	    f, "SELECT a.job, a.rank, a.node, a.device, a.generation FROM assignments a"
	       " JOIN jobs j ON j.id = a.job WHERE a.running = 1 AND j.state = 'running'"
	       " ORDER BY a.node, a.job, a.rank");
	if (st == NULL)
		return list;
	while (sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(
		    list, json_pack("{s:s,s:I,s:s,s:I,s:I}", "job", sqlite3_column_text(st, 0),
		                    "rank", (json_int_t)sqlite3_column_int64(st, 1), "node",
		                    sqlite3_column_text(st, 2), "device",
		                    (json_int_t)sqlite3_column_int64(st, 3), "generation",
		                    (json_int_t)sqlite3_column_int64(st, 4)));
	fsm_release(f, st);
	return list;
}

static int slot_cmp(const void *a, const void *b)
{
	const struct fsm_slot *x = a, *y = b;
	int c = strcmp(x->job, y->job);
	return c != 0 ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

int fsm_node_slots(struct fsm *f, const char *node, struct fsm_slot **slots)
{
	/* sorted here: SQLite's ORDER BY sorts through a temporary b-tree, a quarter of the
	 * query's time for the handful of rows a node has */
	sqlite3_stmt *st = fsm_prepare(f, "SELECT a.job, a.rank, j.generation FROM assignments a"
	                                  " JOIN jobs j ON j.id = a.job"
	                                  " WHERE a.node = ?1 AND a.running = 1"
	                                  " AND j.state = 'running'");
	*slots = NULL;
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	int n = 0, cap = 0, rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *job = (const char *)sqlite3_column_text(st, 0);
		size_t len = (size_t)sqlite3_column_bytes(st, 0);
		if (job == NULL || len >= FSM_ID_MAX)
			continue; /* ids are the FSM's own j-NNNNNN: cannot happen */
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			struct fsm_slot *grown = realloc(*slots, (size_t)cap * sizeof *grown);
			if (grown == NULL) {
				fsm_release(f, st);
				free(*slots);
				*slots = NULL;
				return -1;
			}
			*slots = grown;
		}
		struct fsm_slot *slot = &(*slots)[n++];
		memcpy(slot->job, job, len + 1);
		slot->rank = sqlite3_column_int64(st, 1);
		slot->generation = sqlite3_column_int64(st, 2);
	}
	fsm_release(f, st);
	if (rc != SQLITE_DONE) { /* not "no slots": that would stop every rank of the node */
		free(*slots);
		*slots = NULL;
		return -1;
	}
	if (n > 1)
		qsort(*slots, (size_t)n, sizeof **slots, slot_cmp);
	return n;
}

#define NODE_COLUMNS                                                                               \
	"id, state, address, port_base, devices, labels, version, cordoned, registered_ms,"        \
	" updated_ms, reason"

static json_t *node_from_row(sqlite3_stmt *st)
{
	json_t *devices = jsonx_loads((const char *)sqlite3_column_text(st, 4));
	json_t *labels = sqlite3_column_type(st, 5) == SQLITE_NULL
	                     ? NULL
	                     : jsonx_loads((const char *)sqlite3_column_text(st, 5));
	int cordoned = sqlite3_column_int(st, 7); /* FSM_NODE_* */
	return json_pack(
	    "{s:s,s:s,s:o,s:I,s:o,s:o,s:o,s:b,s:o,s:I,s:I,s:o}", "id", sqlite3_column_text(st, 0),
	    "state", sqlite3_column_text(st, 1), "host", col_text_or_null(st, 2), "port_base",
	    (json_int_t)sqlite3_column_int64(st, 3), "devices", devices ? devices : json_array(),
	    "labels", labels ? labels : json_object(), "version", col_text_or_null(st, 6),
	    "cordoned", cordoned != FSM_NODE_SCHEDULABLE, "drain",
	    cordoned == FSM_NODE_DRAINING  ? json_string("draining")
	    : cordoned == FSM_NODE_DRAINED ? json_string("drained")
	                                   : json_null(),
	    "registered_ms", (json_int_t)sqlite3_column_int64(st, 8), "updated_ms",
	    (json_int_t)sqlite3_column_int64(st, 9), "reason", col_text_or_null(st, 10));
}

json_t *fsm_nodes_list(struct fsm *f, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " NODE_COLUMNS " FROM nodes ORDER BY id");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list nodes");
		return NULL;
	}
	json_t *list = json_array();
	while (sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(list, node_from_row(st));
	fsm_release(f, st);
	return list;
}

json_t *fsm_node_by_rowid(struct fsm *f, int64_t rowid)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " NODE_COLUMNS " FROM nodes WHERE rowid = ?1");
	if (st == NULL)
		return NULL;
	sqlite3_bind_int64(st, 1, rowid);
	json_t *node = sqlite3_step(st) == SQLITE_ROW ? node_from_row(st) : NULL;
	fsm_release(f, st);
	return node;
}

json_t *fsm_node_get(struct fsm *f, const char *id, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " NODE_COLUMNS " FROM nodes WHERE id = ?1");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot read node %s", id);
		return NULL;
	}
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	json_t *node = NULL;
	if (sqlite3_step(st) == SQLITE_ROW)
		node = node_from_row(st);
	else
		yard_err_set(err, YARD_ENOTFOUND, "no node %s", id);
	fsm_release(f, st);
	return node;
}

int fsm_node_token_lookup(struct fsm *f, const char *hash_hex, char name[FSM_NAME_MAX + 1],
                          struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT id FROM nodes WHERE token_hash = ?1");
	if (st == NULL)
		return yard_err_set(err, YARD_EINTERNAL, "cannot read nodes");
	sqlite3_bind_text(st, 1, hash_hex, -1, SQLITE_STATIC);
	int rc = 0;
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(name, FSM_NAME_MAX + 1, "%s", (const char *)sqlite3_column_text(st, 0));
	else
		rc = yard_err_set(err, YARD_ENOTFOUND, "unknown node token");
	fsm_release(f, st);
	return rc;
}

/* ---- authentication (fsm_auth_lookup) ---- */

struct fsm_auth_entry {
	char hash[SHA256_HEX_LEN + 1]; /* "" : empty slot */
	char role[16];
	char name[FSM_NAME_MAX + 1];
	int64_t expires_ms; /* 0: never */
};

static uint32_t auth_slot(const char *hash_hex, int cap)
{
	uint32_t h = 2166136261u;
	for (int i = 0; i < 16 && hash_hex[i] != '\0'; i++) /* a sha256 is uniform already */
		h = (h ^ (unsigned char)hash_hex[i]) * 16777619u;
	return h & (uint32_t)(cap - 1);
}

/* The cached entry of hash_hex, or the empty slot it would go in; NULL without a cache. */
static struct fsm_auth_entry *auth_find(struct fsm *f, const char *hash_hex)
{
	if (f->auth_cache == NULL)
		return NULL;
	uint32_t at = auth_slot(hash_hex, f->auth_cache_cap);
	for (int probe = 0; probe < f->auth_cache_cap; probe++) {
		struct fsm_auth_entry *e =
		    &f->auth_cache[(at + (uint32_t)probe) & (uint32_t)(f->auth_cache_cap - 1)];
		if (e->hash[0] == '\0' || strcmp(e->hash, hash_hex) == 0)
			return e;
	}
	return NULL;
}

static void auth_remember(struct fsm *f, const char *hash_hex, const char *role, const char *name,
                          int64_t expires_ms)
{
	if (f->auth_cache == NULL || 2 * (f->auth_cache_used + 1) > f->auth_cache_cap) {
		/* grow by starting over at twice the size (bounded): entries come back on use */
		int cap = f->auth_cache_cap ? 2 * f->auth_cache_cap : 256;
		if (cap > 2 * FSM_AUTH_CACHE_MAX)
			cap = 2 * FSM_AUTH_CACHE_MAX;
		struct fsm_auth_entry *fresh = calloc((size_t)cap, sizeof *fresh);
		if (fresh == NULL)
			return;
		free(f->auth_cache);
		f->auth_cache = fresh;
		f->auth_cache_cap = cap;
		f->auth_cache_used = 0;
	}
	struct fsm_auth_entry *e = auth_find(f, hash_hex);
	if (e == NULL || e->hash[0] != '\0')
		return;
	yard_strcopy(e->hash, sizeof e->hash, hash_hex);
	yard_strcopy(e->role, sizeof e->role, role);
	yard_strcopy(e->name, sizeof e->name, name);
	e->expires_ms = expires_ms;
	f->auth_cache_used++;
}

/* "token t-000003 (ci) expired at 2026-12-02T10:26:15Z" */
static int token_expired(const char *id, const char *name, int64_t expires_ms, struct yard_err *err)
{
	char when[32];
	yard_format_utc(expires_ms, when, sizeof when);
	return yard_err_set(err, YARD_EPERM, "token %s (%s) expired at %s", id, name, when);
}

int fsm_auth_lookup(struct fsm *f, const char *hash_hex, int64_t now_ms, char role[16],
                    char name[FSM_NAME_MAX + 1], struct yard_err *err)
{
	if (f->auth_cache_version != f->auth_version) {
		if (f->auth_cache != NULL)
			memset(f->auth_cache, 0, (size_t)f->auth_cache_cap * sizeof *f->auth_cache);
		f->auth_cache_used = 0;
		f->auth_cache_version = f->auth_version;
	}
	const struct fsm_auth_entry *e = auth_find(f, hash_hex);
	if (e != NULL && e->hash[0] != '\0' && (e->expires_ms == 0 || now_ms < e->expires_ms)) {
		yard_strcopy(role, 16, e->role);
		yard_strcopy(name, FSM_NAME_MAX + 1, e->name);
		return 0;
	}
	int64_t expires_ms = 0;
	int rc = fsm_token_lookup(f, hash_hex, now_ms, role, name, &expires_ms, err);
	if (rc == YARD_EPERM)
		return rc;
	if (rc != 0) {
		if (fsm_node_token_lookup(f, hash_hex, name, err) != 0)
			return yard_err_set(err, YARD_ENOTFOUND, "unknown or revoked token");
		snprintf(role, 16, "node");
	}
	auth_remember(f, hash_hex, role, name, expires_ms);
	return 0;
}

/* Job ids are "j-" followed by the sequence number; paging compares sequence numbers. */
static int64_t job_seq_of(const char *id)
{
	if (id == NULL || strncmp(id, "j-", 2) != 0)
		return -1;
	char *end;
	long long v = strtoll(id + 2, &end, 10);
	return (*end == '\0' && end != id + 2 && v >= 0) ? v : -1;
}

json_t *fsm_jobs_list(struct fsm *f, const char *state, const char *after, int limit,
                      struct yard_err *err)
{
	int64_t after_seq = 0;
	if (after != NULL && (after_seq = job_seq_of(after)) < 0) {
		yard_err_set(err, YARD_EINVAL, "after: '%s' is not a job id like j-000001", after);
		return NULL;
	}
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " JOB_COLUMNS " FROM jobs WHERE (?1 IS NULL OR"
	                                  " state = ?1) AND seq > ?2 ORDER BY seq LIMIT ?3");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list jobs");
		return NULL;
	}
	if (state != NULL)
		sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, after_seq);
	sqlite3_bind_int64(st, 3, (int64_t)limit + 1);
	json_t *jobs = json_array(), *next = json_null();
	int n = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (n++ == limit) {
			json_decref(next);
			next = json_string(json_string_value(json_object_get(
			    json_array_get(jobs, json_array_size(jobs) - 1), "id")));
			break;
		}
		json_array_append_new(jobs, job_from_row(st));
	}
	fsm_release(f, st);
	return json_pack("{s:o,s:o}", "jobs", jobs, "next", next);
}

static json_t *event_from_row(sqlite3_stmt *st)
{
	return json_pack(
	    "{s:I,s:I,s:s,s:o,s:s,s:s,s:s,s:s}", "seq", (json_int_t)sqlite3_column_int64(st, 0),
	    "ts_ms", (json_int_t)sqlite3_column_int64(st, 1), "type", sqlite3_column_text(st, 2),
	    "job", col_text_or_null(st, 3), "actor", sqlite3_column_text(st, 4), "message",
	    sqlite3_column_text(st, 5), "prev_hash", sqlite3_column_text(st, 6), "hash",
	    sqlite3_column_text(st, 7));
}

/* {"events": [...], "next": seq|null} from a statement selecting up to limit + 1 events;
 * finalizes st. */
static json_t *events_page(struct fsm *f, sqlite3_stmt *st, int limit)
{
	json_t *events = json_array(), *next = json_null();
	int n = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (n++ == limit) {
			json_decref(next);
			next = json_integer(json_integer_value(json_object_get(
			    json_array_get(events, json_array_size(events) - 1), "seq")));
			break;
		}
		json_array_append_new(events, event_from_row(st));
	}
	fsm_release(f, st);
	return json_pack("{s:o,s:o}", "events", events, "next", next);
}

/* A page of events by sql (?1 after, ?2 job or NULL, ?3 rows to read). */
static json_t *events_select(struct fsm *f, const char *sql, int64_t after, const char *job,
                             int64_t rows, int limit, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, sql);
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list events");
		return NULL;
	}
	sqlite3_bind_int64(st, 1, after);
	if (job != NULL)
		sqlite3_bind_text(st, 2, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, rows);
	return events_page(f, st, limit);
}

json_t *fsm_events_list(struct fsm *f, int64_t after, int limit, const char *job,
                        struct yard_err *err)
{
	return events_select(f,
	                     "SELECT seq, ts_ms, type, job, actor, message, prev_hash, hash"
	                     " FROM events WHERE seq > ?1 AND (?2 IS NULL OR job = ?2)"
	                     " ORDER BY seq LIMIT ?3",
	                     after, job, (int64_t)limit + 1, limit, err);
}

json_t *fsm_job_story(struct fsm *f, const char *job, int64_t after, int limit,
                      struct yard_err *err)
{
	return events_select(f,
	                     "SELECT seq, ts_ms, type, job, actor, message, prev_hash, hash"
	                     " FROM events WHERE seq > ?1 AND job = ?2 AND type GLOB 'job.*'"
	                     " ORDER BY seq LIMIT ?3",
	                     after, job, (int64_t)limit + 1, limit, err);
}

json_t *fsm_events_newest(struct fsm *f, int64_t after, int n, const char *job,
                          struct yard_err *err)
{
	/* n rows at most: no "next" */
	return events_select(f,
	                     "SELECT * FROM (SELECT seq, ts_ms, type, job, actor, message,"
	                     " prev_hash, hash FROM events WHERE seq > ?1 AND (?2 IS NULL OR"
	                     " job = ?2) ORDER BY seq DESC LIMIT ?3) ORDER BY seq",
	                     after, job, n, n, err);
}

json_t *fsm_audit_list(struct fsm *f, int64_t after, int limit, int reads_only,
                       struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(
	    f, "SELECT seq, ts_ms, type, job, actor, message, prev_hash, hash FROM events"
	       " WHERE seq > ?1 AND (type = 'audit.read' OR (?2 = 0 AND actor NOT IN"
	       " ('scheduler', 'yardd'))) ORDER BY seq LIMIT ?3");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list the audit log");
		return NULL;
	}
	sqlite3_bind_int64(st, 1, after);
	sqlite3_bind_int(st, 2, reads_only);
	sqlite3_bind_int64(st, 3, (int64_t)limit + 1);
	return events_page(f, st, limit);
}

/* Where the chain starts: event 1 after a zero hash, or, once older events were pruned,
 * the first that stayed after the hash the newest events.pruned event names for the one
 * before it (that event is in the chain, so the anchor is checked with the rest). */
static int events_anchor(struct fsm *f, int64_t *first, char prev[SHA256_HEX_LEN + 1],
                         struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(
	    f, "SELECT (SELECT min(seq) FROM events), (SELECT message FROM events WHERE type ="
	       " 'events.pruned' ORDER BY seq DESC LIMIT 1)");
	if (st == NULL)
		return yard_err_set(err, YARD_EINTERNAL, "cannot read events");
	int rc = 0;
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
	    sqlite3_column_int64(st, 0) > 1) {
		int64_t min = sqlite3_column_int64(st, 0);
		const char *msg = (const char *)sqlite3_column_text(st, 1);
		const char *at = msg ? strstr(msg, "; event ") : NULL;
		long long last = 0;
		char hash[SHA256_HEX_LEN + 1];
		int n = 0;
		if (at == NULL ||
		    sscanf(at, "; event %lld had hash %64[0-9a-f]%n", &last, hash, &n) != 2 ||
		    at[n] != '\0' || strlen(hash) != SHA256_HEX_LEN || last != min - 1)
			rc = yard_err_set(
			    err, YARD_ECORRUPT,
			    "events before %lld are missing and no events.pruned event "
			    "names event %lld's hash",
			    (long long)min, (long long)min - 1);
		else {
			*first = min;
			memcpy(prev, hash, sizeof hash);
		}
	}
	fsm_release(f, st);
	return rc;
}

int fsm_events_verify(struct fsm *f, struct yard_err *err)
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT seq, ts_ms, type, job, actor, message, prev_hash, hash"
	                   " FROM events ORDER BY seq");
	if (st == NULL)
		return yard_err_set(err, YARD_EINTERNAL, "cannot read events");
	char prev[SHA256_HEX_LEN + 1], hash[SHA256_HEX_LEN + 1];
	memset(prev, '0', SHA256_HEX_LEN);
	prev[SHA256_HEX_LEN] = '\0';
	int64_t expect_seq = 1;
	int rc = events_anchor(f, &expect_seq, prev, err);
	while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
		int64_t seq = sqlite3_column_int64(st, 0);
		const char *stored_prev = (const char *)sqlite3_column_text(st, 6);
		const char *stored_hash = (const char *)sqlite3_column_text(st, 7);
		fsm_event_hash(prev, seq, sqlite3_column_int64(st, 1),
		               (const char *)sqlite3_column_text(st, 2),
		               (const char *)sqlite3_column_text(st, 3),
		               (const char *)sqlite3_column_text(st, 4),
		               (const char *)sqlite3_column_text(st, 5), hash);
		if (seq != expect_seq)
			rc = yard_err_set(err, YARD_ECORRUPT, "event %lld: expected seq %lld (gap)",
			                  (long long)seq, (long long)expect_seq);
		else if (strcmp(stored_prev, prev) != 0)
			rc = yard_err_set(err, YARD_ECORRUPT,
			                  "event %lld: prev_hash does not match event %lld",
			                  (long long)seq, (long long)seq - 1);
		else if (strcmp(stored_hash, hash) != 0)
			rc = yard_err_set(err, YARD_ECORRUPT,
			                  "event %lld: hash does not match its content",
			                  (long long)seq);
		snprintf(prev, sizeof prev, "%s", stored_hash);
		expect_seq = seq + 1;
	}
	fsm_release(f, st);
	return rc;
}

json_t *fsm_tokens_list(struct fsm *f, struct yard_err *err)
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT id, name, role, created_ms, expires_ms FROM tokens"
	                   " WHERE revoked_ms IS NULL ORDER BY id");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list tokens");
		return NULL;
	}
	json_t *list = json_array();
	while (sqlite3_step(st) == SQLITE_ROW) {
		json_t *t =
		    json_pack("{s:s,s:s,s:s,s:I}", "id", sqlite3_column_text(st, 0), "name",
		              sqlite3_column_text(st, 1), "role", sqlite3_column_text(st, 2),
		              "created_ms", (json_int_t)sqlite3_column_int64(st, 3));
		if (sqlite3_column_type(st, 4) != SQLITE_NULL)
			json_object_set_new(t, "expires_ms",
			                    json_integer(sqlite3_column_int64(st, 4)));
		json_array_append_new(list, t);
	}
	fsm_release(f, st);
	return json_pack("{s:o}", "tokens", list);
}

int fsm_tokens_count(struct fsm *f)
{
	int n = -1;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT count(*) FROM tokens");
	if (st != NULL && sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	fsm_release(f, st);
	return n;
}

int fsm_token_lookup(struct fsm *f, const char *hash_hex, int64_t now_ms, char role[16],
                     char name[FSM_NAME_MAX + 1], int64_t *expires_ms, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(
	    f, "SELECT role, name, ifnull(expires_ms, 0), id FROM tokens WHERE hash = ?1"
	       " AND revoked_ms IS NULL");
	if (st == NULL)
		return yard_err_set(err, YARD_EINTERNAL, "cannot read tokens");
	sqlite3_bind_text(st, 1, hash_hex, -1, SQLITE_STATIC);
	int rc = 0;
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(role, 16, "%s", (const char *)sqlite3_column_text(st, 0));
		snprintf(name, FSM_NAME_MAX + 1, "%s", (const char *)sqlite3_column_text(st, 1));
		int64_t expires = sqlite3_column_int64(st, 2);
		if (expires_ms != NULL)
			*expires_ms = expires;
		if (expires > 0 && now_ms >= expires) {
			rc = token_expired((const char *)sqlite3_column_text(st, 3), name, expires,
			                   err);
		}
	} else {
		rc = yard_err_set(err, YARD_ENOTFOUND, "unknown or revoked token");
	}
	fsm_release(f, st);
	return rc;
}

json_t *fsm_members_list(struct fsm *f, struct yard_err *err)
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT id, raft_address, api_url, role FROM members ORDER BY id");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list members");
		return NULL;
	}
	json_t *list = json_array();
	while (sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(list, json_pack("{s:I,s:s,s:s,s:s}", "id",
		                                      (json_int_t)sqlite3_column_int64(st, 0),
		                                      "raft_address", sqlite3_column_text(st, 1),
		                                      "api_url", sqlite3_column_text(st, 2), "role",
		                                      sqlite3_column_text(st, 3)));
	fsm_release(f, st);
	return list;
}

int fsm_member_api_url(struct fsm *f, uint64_t id, char *url, size_t url_len)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT api_url FROM members WHERE id = ?1");
	int rc = YARD_ENOTFOUND;
	if (st == NULL)
		return YARD_EINTERNAL;
	sqlite3_bind_int64(st, 1, (int64_t)id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(url, url_len, "%s", (const char *)sqlite3_column_text(st, 0));
		rc = 0;
	}
	fsm_release(f, st);
	return rc;
}

int64_t fsm_config_get(struct fsm *f, const char *key, int64_t dflt)
{
	int64_t v = dflt;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT value FROM config WHERE key = ?1");
	if (st == NULL)
		return dflt;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	fsm_release(f, st);
	return v;
}
