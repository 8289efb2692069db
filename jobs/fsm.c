/* fsm.c: schema, command apply and snapshot/restore of the replicated SQLite database.
 * Reads live in fsm_query.c. See fsm.h for the rules apply follows (deterministic, never
 * fails, request-id dedup). */
#include "config.h"
#ifdef HAVE_SQLITE_PREUPDATE_HOOK
#define SQLITE_ENABLE_PREUPDATE_HOOK 1 /* sqlite3.h declares the hook only with it */
#endif
#include "jobs/fsm.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/clock.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "jobs/codec.h"
#include "jobs/fsm_internal.h"

/* Builds, advisories and the blob store (fsm_store.c, fsm_advisory.c). Kept apart so that
 * schema_upgrade can add them to a database from a binary that had only placeholders. */
#define STORE_SCHEMA                                                                               \
	"CREATE TABLE builds(version TEXT PRIMARY KEY, component TEXT NOT NULL,"                   \
	" sha256 TEXT NOT NULL, size INTEGER NOT NULL, notes TEXT, advisory TEXT,"                 \
	" state TEXT NOT NULL, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,"          \
	" actor TEXT NOT NULL);"                                                                   \
	"CREATE TABLE blobs(owner_kind TEXT NOT NULL, owner_id TEXT NOT NULL,"                     \
	" size INTEGER NOT NULL, sha256 TEXT NOT NULL, chunks INTEGER NOT NULL,"                   \
	" PRIMARY KEY(owner_kind, owner_id));"                                                     \
	"CREATE TABLE blob_chunks(owner_kind TEXT NOT NULL, owner_id TEXT NOT NULL,"               \
	" idx INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY(owner_kind, owner_id, idx));"      \
	"CREATE TABLE advisories(id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE,"                \
	" title TEXT NOT NULL, cve TEXT NOT NULL, severity TEXT NOT NULL, state TEXT NOT NULL,"    \
	" embargo_start_ms INTEGER, embargo_until_ms INTEGER, published_ms INTEGER,"               \
	" visibility TEXT NOT NULL, text TEXT NOT NULL, timeline TEXT NOT NULL,"                   \
	" created_ms INTEGER NOT NULL, actor TEXT NOT NULL);"

/* Checkpoints of the "controller" store (fsm_ckpt.c); schema_upgrade replaces the old
 * placeholder table with these. */
#define CKPT_SCHEMA                                                                                \
	"CREATE TABLE checkpoints(job TEXT NOT NULL, step INTEGER NOT NULL,"                       \
	" world INTEGER NOT NULL, generation INTEGER NOT NULL, complete INTEGER NOT NULL,"         \
	" created_ms INTEGER NOT NULL, completed_ms INTEGER, PRIMARY KEY(job, step));"             \
	"CREATE TABLE checkpoint_shards(job TEXT NOT NULL, step INTEGER NOT NULL,"                 \
	" rank INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL, node TEXT NOT NULL," \
	" stored INTEGER NOT NULL, PRIMARY KEY(job, step, rank));"                                 \
	"CREATE TABLE checkpoint_restores(job TEXT NOT NULL, generation INTEGER NOT NULL,"         \
	" step INTEGER NOT NULL, PRIMARY KEY(job, generation));"

/* Rollouts (fsm_rollout.c), apart for the same reason. */
#define ROLLOUT_SCHEMA                                                                             \
	"CREATE TABLE rollouts(id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE,"                  \
	" build TEXT NOT NULL, state TEXT NOT NULL, wave INTEGER NOT NULL DEFAULT 0,"              \
	" phase TEXT NOT NULL DEFAULT '', phase_since_ms INTEGER NOT NULL,"                        \
	" failures INTEGER NOT NULL DEFAULT 0, spec TEXT NOT NULL, plan TEXT NOT NULL,"            \
	" reason TEXT, actor TEXT NOT NULL, created_ms INTEGER NOT NULL,"                          \
	" updated_ms INTEGER NOT NULL);"

/* assignments.running is 1 while the slot's job runs (jobs.state 'running'): the trigger
 * keeps it so on every state change, whichever command made it (job.assign drops the old
 * slots, sets the job running and inserts the new ones running). The partial index
 * finds a node's running slots without visiting the slots of every job it ever ran (a
 * heartbeat's answer, a device's holder, a drain), so their cost does not grow with the
 * cluster's history. schema_upgrade adds both to a database from a binary without them. */
#define ASSIGNMENTS_RUNNING                                                                        \
	"CREATE INDEX assignments_running ON assignments(node, device) WHERE running = 1;"         \
	"CREATE TRIGGER assignments_running AFTER UPDATE OF state ON jobs"                         \
	" WHEN (old.state = 'running') != (new.state = 'running') BEGIN"                           \
	" UPDATE assignments SET running = (new.state = 'running') WHERE job = new.id; END;"

/* Tables for what later issues add are created now so a snapshot taken today restores into
 * tomorrow's binary unchanged; when a placeholder had to change shape anyway (builds,
 * advisories, checkpoints, rollouts), schema_upgrade replaces it on restore. */
static const char SCHEMA[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE jobs(id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, name TEXT NOT NULL,"
    " state TEXT NOT NULL, priority INTEGER NOT NULL, submitted_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL, actor TEXT NOT NULL, spec TEXT NOT NULL, reason TEXT,"
    " step INTEGER NOT NULL DEFAULT 0, loss REAL, restarts INTEGER NOT NULL DEFAULT 0,"
    " generation INTEGER NOT NULL DEFAULT 0, noted TEXT NOT NULL DEFAULT ',', plan TEXT,"
    " shrunk_dp INTEGER, started_ms INTEGER);"
    "CREATE INDEX jobs_state ON jobs(state, seq);"
    "CREATE TABLE nodes(id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL,"
    " address TEXT, devices TEXT, version TEXT, updated_ms INTEGER NOT NULL,"
    " port_base INTEGER NOT NULL DEFAULT 0, labels TEXT, token_hash TEXT UNIQUE,"
    " cordoned INTEGER NOT NULL DEFAULT 0, registered_ms INTEGER NOT NULL DEFAULT 0,"
    " reason TEXT);"
    "CREATE TABLE assignments(job TEXT NOT NULL, rank INTEGER NOT NULL, node TEXT NOT NULL,"
    " device INTEGER NOT NULL, generation INTEGER NOT NULL, running INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY(job, rank));"
    "CREATE INDEX assignments_node ON assignments(node, device);" ASSIGNMENTS_RUNNING
    "CREATE TABLE events(seq INTEGER PRIMARY KEY, ts_ms INTEGER NOT NULL, type TEXT NOT NULL,"
    " job TEXT, actor TEXT NOT NULL, message TEXT NOT NULL, prev_hash TEXT NOT NULL,"
    " hash TEXT NOT NULL);"
    "CREATE INDEX events_job ON events(job, seq);"
    "CREATE TABLE tokens(id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL,"
    " hash TEXT NOT NULL UNIQUE, created_ms INTEGER NOT NULL, revoked_ms INTEGER,"
    " expires_ms INTEGER);"
    "CREATE TABLE members(id INTEGER PRIMARY KEY, raft_address TEXT NOT NULL,"
    " api_url TEXT NOT NULL, role TEXT NOT NULL);"
    "CREATE TABLE request_ids(id TEXT PRIMARY KEY, ts_ms INTEGER NOT NULL, result TEXT NOT NULL);"
    "CREATE INDEX request_ids_ts ON request_ids(ts_ms);"
    "CREATE TABLE config(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;" CKPT_SCHEMA
        STORE_SCHEMA ROLLOUT_SCHEMA;

static const char *const ROLES[] = {"admin", "operator", "user", "security", "agent", NULL};

int fsm_role_valid(const char *role)
{
	for (int i = 0; ROLES[i] != NULL; i++)
		if (strcmp(role, ROLES[i]) == 0)
			return 1;
	return 0;
}

/* ---- small SQLite helpers ---- */

int fsm_exec(struct fsm *f, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(f->db, sql, NULL, NULL, &msg);
	if (rc != SQLITE_OK) {
		log_error("fsm: %s: %s", sql, msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		return YARD_EINTERNAL;
	}
	return 0;
}

static uint32_t sql_hash(const char *sql)
{
	uint32_t h = 2166136261u;
	for (const unsigned char *p = (const unsigned char *)sql; *p != '\0'; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}

static sqlite3_stmt *prepare_uncached(struct fsm *f, const char *sql, unsigned flags)
{
	sqlite3_stmt *st = NULL;
	f->prepares++;
	if (sqlite3_prepare_v3(f->db, sql, -1, flags, &st, NULL) != SQLITE_OK) {
		log_error("fsm: prepare %s: %s", sql, sqlite3_errmsg(f->db));
		sqlite3_finalize(st);
		return NULL;
	}
	return st;
}

/* Open addressing on the SQL text's hash; the statements are a fixed, small set (the SQL
 * literals of jobs/), so a full table only means "prepare without caching". */
sqlite3_stmt *fsm_prepare(struct fsm *f, const char *sql)
{
	uint32_t h = sql_hash(sql);
	for (unsigned probe = 0; probe < FSM_STMT_CACHE_SLOTS; probe++) {
		struct fsm_stmt_slot *slot = &f->stmts[(h + probe) % FSM_STMT_CACHE_SLOTS];
		if (slot->sql == NULL) {
			sqlite3_stmt *st = prepare_uncached(f, sql, SQLITE_PREPARE_PERSISTENT);
			char *copy = st ? strdup(sql) : NULL;
			if (copy == NULL)
				return st;
			slot->sql = copy;
			slot->hash = h;
			slot->st = st;
			slot->busy = 1;
			return st;
		}
		if (slot->hash == h && strcmp(slot->sql, sql) == 0) {
			if (slot->busy) /* nested use of the same statement */
				return prepare_uncached(f, sql, 0);
			slot->busy = 1;
			return slot->st;
		}
	}
	return prepare_uncached(f, sql, 0);
}

void fsm_release(struct fsm *f, sqlite3_stmt *st)
{
	if (st == NULL)
		return;
	for (unsigned i = 0; i < FSM_STMT_CACHE_SLOTS; i++) {
		struct fsm_stmt_slot *slot = &f->stmts[i];
		if (slot->st == st && slot->busy) {
			sqlite3_reset(st);
			sqlite3_clear_bindings(st);
			slot->busy = 0;
			return;
		}
	}
	sqlite3_finalize(st);
}

void fsm_stmt_cache_clear(struct fsm *f)
{
	for (unsigned i = 0; i < FSM_STMT_CACHE_SLOTS; i++) {
		struct fsm_stmt_slot *slot = &f->stmts[i];
		if (slot->sql == NULL)
			continue;
		sqlite3_finalize(slot->st);
		free(slot->sql);
		memset(slot, 0, sizeof *slot);
	}
}

/* Runs a statement with text/int parameters described by types ('s' text or NULL, 'i' int64)
 * and expects no rows. Returns SQLite's result code. */
int fsm_run(struct fsm *f, const char *sql, const char *types, ...)
{
	sqlite3_stmt *st = fsm_prepare(f, sql);
	if (st == NULL)
		return SQLITE_ERROR;
	va_list ap;
	va_start(ap, types);
	for (int i = 0; types[i] != '\0'; i++) {
		if (types[i] == 's') {
			const char *s = va_arg(ap, const char *);
			if (s == NULL)
				sqlite3_bind_null(st, i + 1);
			else
				sqlite3_bind_text(st, i + 1, s, -1, SQLITE_STATIC);
		} else if (types[i] == 'd') {
			sqlite3_bind_double(st, i + 1, va_arg(ap, double));
		} else {
			sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
		}
	}
	va_end(ap);
	int rc = sqlite3_step(st);
	fsm_release(f, st);
	return rc == SQLITE_ROW ? SQLITE_DONE : rc;
}

/* A counter's next value. Read and written by key (UPSERT ... RETURNING builds an ephemeral
 * table per call: a third of a submission's apply went there). */
int64_t fsm_meta_next(struct fsm *f, const char *key)
{
	int64_t v = 1;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT value FROM meta WHERE key = ?1");
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0) + 1;
	fsm_release(f, st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return -1;
	rc = fsm_run(f,
	             v == 1 ? "INSERT INTO meta(key, value) VALUES(?1, ?2)"
	                    : "UPDATE meta SET value = ?2 WHERE key = ?1",
	             "si", key, v);
	return rc == SQLITE_DONE ? v : -1;
}

/* ---- the change journal (fsm.h) ---- */

/* Appends rowid to a journal; past FSM_CHANGED_MAX (or without memory) it empties and
 * says "reread all" instead. */
static void journal_add(int64_t **rowids, int *n, int *cap, int *all, int64_t rowid)
{
	if (*all)
		return;
	if (*n == *cap) {
		int grow = *cap ? *cap * 2 : 256;
		int64_t *grown =
		    grow <= FSM_CHANGED_MAX ? realloc(*rowids, (size_t)grow * sizeof *grown) : NULL;
		if (grown == NULL) {
			*all = 1;
			*n = 0;
			return;
		}
		*rowids = grown;
		*cap = grow;
	}
	(*rowids)[(*n)++] = rowid;
}

static void on_row_change(void *data, int op, const char *db_name, const char *table,
                          sqlite3_int64 rowid)
{
	struct fsm *f = data;
	if (strcmp(table, "jobs") == 0) {
		if (f->n_changed == 0 && !f->changed_all)
			f->changed_since_ns = yard_now_mono_ns();
		journal_add(&f->changed_jobs, &f->n_changed, &f->cap_changed, &f->changed_all,
		            rowid);
	} else if (strcmp(table, "nodes") == 0) {
		f->nodes_version++;
		f->auth_version++;
		journal_add(&f->changed_nodes, &f->n_changed_nodes, &f->cap_changed_nodes,
		            &f->changed_nodes_all, rowid);
	} else if (strcmp(table, "rollouts") == 0) {
		f->rollouts_version++;
	} else if (strcmp(table, "tokens") == 0) {
		f->auth_version++;

	} else if (strcmp(table, "checkpoints") == 0 || strcmp(table, "checkpoint_restores") == 0) {
		f->ckpt_version++;
	}
}

#ifdef HAVE_SQLITE_PREUPDATE_HOOK
/* Journals the node of an assignments row (column 2) that is about to change. */
static void slot_node_add(struct fsm *f, sqlite3_value *node)
{
	const char *name = node != NULL ? (const char *)sqlite3_value_text(node) : NULL;
	if (f->changed_slot_nodes_all)
		return;
	if (name == NULL || strlen(name) > FSM_NAME_MAX) { /* not a name this FSM writes */
		f->changed_slot_nodes_all = 1;
		return;
	}
	if (f->n_changed_slot_nodes > 0 &&
	    strcmp(f->changed_slot_nodes[f->n_changed_slot_nodes - 1], name) == 0)
		return; /* a job's ranks on one node are neighbours */
	if (f->n_changed_slot_nodes == f->cap_changed_slot_nodes) {
		int grow = f->cap_changed_slot_nodes ? f->cap_changed_slot_nodes * 2 : 256;
		char(*grown)[FSM_NAME_MAX + 1] =
		    grow <= FSM_CHANGED_MAX
		        ? realloc(f->changed_slot_nodes, (size_t)grow * sizeof *grown)
		        : NULL;
		if (grown == NULL) {
			f->changed_slot_nodes_all = 1;
			f->n_changed_slot_nodes = 0;
			return;
		}
		f->changed_slot_nodes = grown;
		f->cap_changed_slot_nodes = grow;
	}
	strcpy(f->changed_slot_nodes[f->n_changed_slot_nodes++], name);
}

static void on_preupdate(void *data, sqlite3 *db, int op, const char *db_name, const char *table,
                         sqlite3_int64 key1, sqlite3_int64 key2)
{
	struct fsm *f = data;
	sqlite3_value *node = NULL;
	(void)db_name, (void)key1, (void)key2;
	if (strcmp(table, "assignments") != 0)
		return;
	if (sqlite3_preupdate_count(db) < 3) {
		f->changed_slot_nodes_all = 1;
		return;
	}
	if (op != SQLITE_INSERT)
		slot_node_add(f, sqlite3_preupdate_old(db, 2, &node) == SQLITE_OK ? node : NULL);
	if (op != SQLITE_DELETE)
		slot_node_add(f, sqlite3_preupdate_new(db, 2, &node) == SQLITE_OK ? node : NULL);
}
#endif

int fsm_slot_nodes_changed_take(struct fsm *f, const char (**names)[FSM_NAME_MAX + 1], int *n)
{
#ifdef HAVE_SQLITE_PREUPDATE_HOOK
	int all = f->changed_slot_nodes_all;
	f->changed_slot_nodes_all = 0;
#else
	int all = 1;
#endif
	*names = (const char(*)[FSM_NAME_MAX + 1]) f->changed_slot_nodes;
	*n = all ? 0 : f->n_changed_slot_nodes;
	f->n_changed_slot_nodes = 0;
	return all;
}

static void submitted_forget(struct fsm *f)
{
	json_decref(f->submitted);
	json_decref(f->submitted_taken);
	f->submitted = f->submitted_taken = NULL;
	f->submitted_last[0] = '\0';
}

/* Notes the spec object of a job this apply submitted (fsm_submitted_spec). */
static void submitted_note(struct fsm *f, const char *id, json_t *spec)
{
	if (!f->keep_submitted)
		return;
	if (f->submitted == NULL)
		f->submitted = json_object();
	if (json_object_size(f->submitted) >= FSM_SUBMITTED_MAX)
		json_object_clear(f->submitted);
	json_object_set(f->submitted, id, spec);
	snprintf(f->submitted_last, sizeof f->submitted_last, "%s", id);
}

const json_t *fsm_submitted_spec(const struct fsm *f, const char *id)
{
	const json_t *spec = json_object_get(f->submitted_taken, id);
	return spec != NULL ? spec : json_object_get(f->submitted, id);
}

int fsm_jobs_changed_take(struct fsm *f, const int64_t **rowids, int *n)
{
	json_decref(f->submitted_taken);
	f->submitted_taken = f->submitted;
	f->submitted = NULL;
	int all = f->changed_all;
	*rowids = f->changed_jobs;
	*n = all ? 0 : f->n_changed;
	f->changed_all = 0;
	f->n_changed = 0;
	return all;
}

uint64_t fsm_jobs_changed_since_ns(const struct fsm *f)
{
	return fsm_jobs_changed_pending(f) ? f->changed_since_ns : 0;
}

int fsm_jobs_changed_pending(const struct fsm *f)
{
	return f->changed_all || f->n_changed > 0;
}

int fsm_nodes_changed_pending(const struct fsm *f)
{
	return f->changed_nodes_all || f->n_changed_nodes > 0;
}

int fsm_nodes_changed_take(struct fsm *f, const int64_t **rowids, int *n)
{
	int all = f->changed_nodes_all;
	*rowids = f->changed_nodes;
	*n = all ? 0 : f->n_changed_nodes;
	f->changed_nodes_all = 0;
	f->n_changed_nodes = 0;
	return all;
}

/* ---- lifecycle ---- */

/* The database's memory: one reservation of FSM_DB_MAX bytes of address space, paged in as
 * the database grows, with transparent huge pages asked for (2 MiB a fault where the kernel
 * gives them). The file never moves. memdb grows its own buffer by reallocating it to twice
 * the size it needs, copying the whole image into fresh memory within the apply that
 * crossed the line: at a 90 MiB state half of the leader's page faults came from those
 * copies and first writes, one apply faulting in ~45 MiB at ~28 us a page on this VM.
 * NULL when the address space cannot be had (a strict overcommit policy), the image is
 * bigger than the reservation, or YARD_FSM_RESERVE=0 asks for SQLite's own growth (the
 * reference of scripts/bench/apply; tests of the fallback). */
static void *db_reserve(const void *image, size_t len)
{
	const char *knob = getenv("YARD_FSM_RESERVE"); /* "0": SQLite's own growth */
	if (len > FSM_DB_MAX || (knob != NULL && strcmp(knob, "0") == 0))
		return NULL;
	void *map = mmap(NULL, FSM_DB_MAX, PROT_READ | PROT_WRITE,
	                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (map == MAP_FAILED)
		return NULL;
#ifdef MADV_HUGEPAGE
	(void)madvise(map, FSM_DB_MAX, MADV_HUGEPAGE); /* a hint: without it, 4 KiB pages */
#endif
	if (len > 0)
		memcpy(map, image, len);
	return map;
}

/* Closes db, then unmaps its reservation (only once nothing can touch it). */
static void db_close(sqlite3 *db, void *map)
{
	if (db != NULL && sqlite3_close(db) != SQLITE_OK) {
		log_error("fsm: the database did not close (%s): its memory stays mapped",
		          sqlite3_errmsg(db));
		return;
	}
	if (map != NULL)
		munmap(map, FSM_DB_MAX);
}

/* The database always lives in SQLite's memdb VFS (an empty sqlite3_deserialize at init),
 * so a fresh controller and one restored from a snapshot run the same pager code and
 * produce byte-identical images from identical commands. */
static int open_memdb(struct fsm *f, const void *image, size_t len, struct yard_err *err)
{
	sqlite3 *db = NULL;
	unsigned char *copy = NULL;
	if (sqlite3_open(":memory:", &db) != SQLITE_OK) {
		sqlite3_close(db);
		return yard_err_set(err, YARD_ENOMEM, "cannot open an in-memory SQLite database");
	}
	void *map = db_reserve(image, len);
	int rc;
	if (map != NULL) {
		/* not resizeable: writes go up to the reservation's end, no further */
		rc = sqlite3_deserialize(db, "main", map, (sqlite3_int64)len,
		                         (sqlite3_int64)FSM_DB_MAX, 0);
	} else {
		if (len > 0) {
			copy = sqlite3_malloc64(len);
			if (copy == NULL) {
				sqlite3_close(db);
				return yard_err_set(err, YARD_ENOMEM,
				                    "no memory for a %zu-byte snapshot", len);
			}
			memcpy(copy, image, len);
		}
		rc = sqlite3_deserialize(db, "main", copy, (sqlite3_int64)len, (sqlite3_int64)len,
		                         SQLITE_DESERIALIZE_FREEONCLOSE |
		                             SQLITE_DESERIALIZE_RESIZEABLE);
		sqlite3_int64 limit = (sqlite3_int64)FSM_DB_MAX; /* lowered to len when bigger */
		if (rc == SQLITE_OK)
			rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_SIZE_LIMIT, &limit);
	}
	if (rc != SQLITE_OK) {
		db_close(db, map);
		return yard_err_set(err, YARD_ECORRUPT, "cannot load database image: %s",
		                    sqlite3_errstr(rc));
	}
	if (len > 0) {
		/* Prove the image is a database with our schema before replacing the old one. */
		sqlite3_stmt *st = NULL;
		rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM meta", -1, &st, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_step(st) == SQLITE_ROW ? SQLITE_OK : SQLITE_CORRUPT;
		sqlite3_finalize(st);
		if (rc != SQLITE_OK) {
			db_close(db, map);
			return yard_err_set(err, YARD_ECORRUPT,
			                    "snapshot of %zu bytes is not a trainyard database",
			                    len);
		}
	}
	/* The cached statements belong to the old connection: finalize them with it. */
	fsm_stmt_cache_clear(f);
	db_close(f->db, f->map);
	f->db = db;
	f->map = map;
	f->n_changed = 0;
	f->changed_all = 1;
	f->changed_since_ns = 0;
	f->n_changed_nodes = 0;
	f->changed_nodes_all = 1;
	f->n_changed_slot_nodes = 0;
	f->changed_slot_nodes_all = 1;
	f->nodes_version++;
	f->ckpt_version++;
	f->auth_version++;
	f->rollouts_version++;
	f->events_max_known = 0;
	f->config_version++;
	submitted_forget(f);
	sqlite3_update_hook(db, on_row_change, f);
#ifdef HAVE_SQLITE_PREUPDATE_HOOK
	sqlite3_preupdate_hook(db, on_preupdate, f);
#endif
	return 0;
}

static void own_clear(struct fsm *f);

/* SQLite's memory statistics take a process-wide mutex on every allocation and free, and
 * nothing here reads them (no soft heap limit, no sqlite3_memory_used): off, applies cost
 * 8-10 % less (scripts/bench/apply, "stats on" against "as built"). Only possible before
 * SQLite initializes; when something initialized it first, they stay. */
static void sqlite_tune(void)
{
	if (sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) != SQLITE_OK)
		log_debug("fsm: SQLite was initialized before the state machine: its memory "
		          "statistics stay on");
}

int fsm_init(struct fsm *f, struct yard_err *err)
{
	static pthread_once_t tuned = PTHREAD_ONCE_INIT;
	pthread_once(&tuned, sqlite_tune);
	memset(f, 0, sizeof *f);
	f->verify_own = getenv("YARD_FSM_VERIFY_OWN") != NULL;
	f->create_limit = FSM_DB_MAX - FSM_DB_HEADROOM;
	int rc = open_memdb(f, NULL, 0, err);
	if (rc != 0)
		return rc;
	if (fsm_exec(f, "PRAGMA journal_mode=MEMORY") != 0 || fsm_exec(f, SCHEMA) != 0) {
		fsm_close(f);
		return yard_err_set(err, YARD_EINTERNAL, "cannot create the schema");
	}
	return 0;
}

void fsm_close(struct fsm *f)
{
	json_decref(f->last_result);
	f->last_result = NULL;
	fsm_stmt_cache_clear(f);
	db_close(f->db, f->map);
	f->db = NULL;
	f->map = NULL;
	free(f->changed_jobs);
	f->changed_jobs = NULL;
	f->n_changed = f->cap_changed = 0;
	free(f->changed_nodes);
	f->changed_nodes = NULL;
	f->n_changed_nodes = f->cap_changed_nodes = 0;
	free(f->changed_slot_nodes);
	f->changed_slot_nodes = NULL;
	f->n_changed_slot_nodes = f->cap_changed_slot_nodes = 0;
	submitted_forget(f);
	own_clear(f);
	free(f->auth_cache);
	f->auth_cache = NULL;
	f->auth_cache_cap = f->auth_cache_used = 0;
}

int fsm_serialize(struct fsm *f, unsigned char **data, size_t *len, struct yard_err *err)
{
	sqlite3_int64 size = 0;
	unsigned char *p = sqlite3_serialize(f->db, "main", &size, 0);
	if (p == NULL)
		return yard_err_set(err, YARD_ENOMEM, "cannot serialize the database");
	*data = p;
	*len = (size_t)size;
	return 0;
}

int fsm_image(struct fsm *f, const unsigned char **data, size_t *len)
{
	sqlite3_int64 size = 0;
	/* memdb keeps the file in one piece: NOCOPY hands it over as it is */
	const unsigned char *p = sqlite3_serialize(f->db, "main", &size, SQLITE_SERIALIZE_NOCOPY);
	if (p == NULL && size != 0)
		return -1;
	*data = p;
	*len = (size_t)size;
	return 0;
}

int fsm_state_bytes(struct fsm *f, size_t *used, size_t *file)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT c.page_count, l.freelist_count, s.page_size"
	                                  " FROM pragma_page_count() c, pragma_freelist_count() l,"
	                                  " pragma_page_size() s");
	if (st == NULL)
		return -1;
	int rc = -1;
	if (sqlite3_step(st) == SQLITE_ROW) {
		int64_t pages = sqlite3_column_int64(st, 0),
		        free_pages = sqlite3_column_int64(st, 1);
		int64_t page = sqlite3_column_int64(st, 2);
		if (used != NULL)
			*used = (size_t)((pages - free_pages) * page);
		if (file != NULL)
			*file = (size_t)(pages * page);
		rc = 0;
	}
	fsm_release(f, st);
	return rc;
}

int fsm_state_reaches(struct fsm *f, size_t bytes, size_t *used)
{
	const unsigned char *image;
	size_t file = 0;
	*used = 0;
	/* the file holds at least the pages in use as of the last commit: below the bound, no
	 * need to count (within an entry, its own growth stays within FSM_DB_HEADROOM) */
	if (fsm_image(f, &image, &file) == 0 && file < bytes)
		return 0;
	return fsm_state_bytes(f, used, NULL) == 0 && *used >= bytes;
}

void fsm_set_create_limit(struct fsm *f, size_t bytes)
{
	f->create_limit = bytes;
}

/* 1 when the database has table name, 0 when not, -1 on failure. */
static int has_table(struct fsm *f, const char *name)
{
	int has = -1;
	/* on restore only: not worth a slot in the statement cache */
	sqlite3_stmt *st =
	    prepare_uncached(f, "SELECT count(*) FROM sqlite_schema WHERE name = ?1", 0);
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		has = sqlite3_column_int(st, 0) > 0;
	sqlite3_finalize(st);
	return has;
}

/* 1 when the table has the column, 0 when not, -1 on error. */
static int has_column(struct fsm *f, const char *table, const char *column)
{
	int has = -1;
	sqlite3_stmt *st =
	    prepare_uncached(f, "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2", 0);
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		has = sqlite3_column_int(st, 0) > 0;
	sqlite3_finalize(st);
	return has;
}

/* Snapshots from binaries before the build store hold empty placeholder builds and
 * advisories tables (no command ever wrote them): replace them with the real ones. Every
 * member restoring the same image does the same, so the databases stay identical; images
 * from before jobs.plan, jobs.shrunk_dp, jobs.started_ms or tokens.expires_ms get the column. */
static int schema_upgrade(struct fsm *f)
{
	/* snapshots taken before jobs recorded their plan (parallel "auto"), or before a job
	 * could run with a shrunk data-parallel degree (allow_shrink_dp): add the column */
	int has_plan = has_column(f, "jobs", "plan"),
	    has_shrunk = has_column(f, "jobs", "shrunk_dp");
	if (has_plan < 0 || has_shrunk < 0 ||
	    (!has_plan && fsm_exec(f, "ALTER TABLE jobs ADD COLUMN plan TEXT") != 0) ||
	    (!has_shrunk && fsm_exec(f, "ALTER TABLE jobs ADD COLUMN shrunk_dp INTEGER") != 0))
		return YARD_EINTERNAL;
	/* ... or before jobs kept their first placement's time (time_limit_s) */
	int has_started = has_column(f, "jobs", "started_ms");
	if (has_started < 0 ||
	    (!has_started && fsm_exec(f, "ALTER TABLE jobs ADD COLUMN started_ms INTEGER") != 0))
		return YARD_EINTERNAL;
	/* ... or before tokens could expire (ttl_s): none of theirs does */
	int has_expiry = has_column(f, "tokens", "expires_ms");
	if (has_expiry < 0 ||
	    (!has_expiry && fsm_exec(f, "ALTER TABLE tokens ADD COLUMN expires_ms INTEGER") != 0))
		return YARD_EINTERNAL;
	int has_ckpt = has_table(f, "checkpoint_shards");
	if (has_ckpt < 0 ||
	    (has_ckpt == 0 && fsm_exec(f, "DROP TABLE IF EXISTS checkpoints;" CKPT_SCHEMA) != 0))
		return YARD_EINTERNAL;
	int has_store = has_table(f, "blobs");
	if (has_store < 0 ||
	    (has_store == 0 &&
	     fsm_exec(
	         f, "DROP TABLE IF EXISTS builds; DROP TABLE IF EXISTS advisories;" STORE_SCHEMA) !=
	         0))
		return YARD_EINTERNAL;
	/* snapshots from before assignments.running (see ASSIGNMENTS_RUNNING) */
	int has_running = has_column(f, "assignments", "running");
	if (has_running < 0 ||
	    (!has_running &&
	     fsm_exec(f,
	              "ALTER TABLE assignments ADD COLUMN running INTEGER NOT NULL DEFAULT 0;"
	              "UPDATE assignments SET running = 1 WHERE job IN"
	              " (SELECT id FROM jobs WHERE state = 'running');" ASSIGNMENTS_RUNNING) != 0))
		return YARD_EINTERNAL;
	/* the same for the placeholder rollouts table (it had no plan column) */
	int has_rollouts = has_column(f, "rollouts", "plan");
	if (has_rollouts < 0)
		return YARD_EINTERNAL;
	if (has_rollouts)
		return 0;
	return fsm_exec(f, "DROP TABLE IF EXISTS rollouts;" ROLLOUT_SCHEMA);
}

int fsm_restore(struct fsm *f, const void *data, size_t len, struct yard_err *err)
{
	if (len == 0)
		return yard_err_set(err, YARD_ECORRUPT, "empty snapshot");
	int rc = open_memdb(f, data, len, err);
	if (rc != 0)
		return rc;
	if (fsm_exec(f, "PRAGMA journal_mode=MEMORY") != 0 || schema_upgrade(f) != 0)
		return yard_err_set(err, YARD_EINTERNAL, "cannot upgrade the snapshot's schema");
	return 0;
}

int fsm_digest(struct fsm *f, char hex[SHA256_HEX_LEN + 1], struct yard_err *err)
{
	unsigned char *data = NULL;
	size_t len = 0;
	int rc = fsm_serialize(f, &data, &len, err);
	if (rc != 0)
		return rc;
	sha256_hex(data, len, hex);
	sqlite3_free(data);
	return 0;
}

/* ---- results ---- */

json_t *fsm_res_ok(int status, json_t *body)
{
	return json_pack("{s:i,s:o}", "status", status, "body", body ? body : json_object());
}

json_t *fsm_res_err(int status, const char *field, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_t *r = json_pack("{s:i,s:s}", "status", status, "error", msg);
	if (field != NULL)
		json_object_set_new(r, "field", json_string(field));
	return r;
}

void fsm_err_field(const struct yard_err *e, char *field, size_t field_len)
{
	const char *colon = strchr(e->msg, ':');
	const char *space = strchr(e->msg, ' ');
	field[0] = '\0';
	if (colon != NULL && (space == NULL || space > colon) &&
	    (size_t)(colon - e->msg) < field_len)
		snprintf(field, field_len, "%.*s", (int)(colon - e->msg), e->msg);
}

json_t *fsm_res_from_err(const struct yard_err *e)
{
	char field[128];
	fsm_err_field(e, field, sizeof field);
	return fsm_res_err(400, field[0] ? field : NULL, "%s", e->msg);
}

static int is_error(const json_t *r)
{
	return json_object_get(r, "error") != NULL;
}

/* ---- events: append-only, hash-chained ---- */

static const char ZERO_HASH[] = "0000000000000000000000000000000000000000000000000000000000000000";

static void hash_put(void *ctx, const char *p, size_t len)
{
	sha256_update(ctx, p, len);
}

/* Feeds s to the hash as a JSON string, escaped as jansson's compact dump escapes it, the
 * form the chain has used since its first event. */
static void hash_json_string(struct sha256_ctx *ctx, const char *s)
{
	jsonx_escape(s, strlen(s), hash_put, ctx);
}

/* The hash of an event: sha256(prev_hash || canonical JSON), the canonical JSON being the
 * compact, key-sorted {"actor","job","message","seq","ts_ms","type"} (job null if none).
 * Written out directly: building and printing it with jansson was a fifth of a
 * submission's apply. */
void fsm_event_hash(const char *prev_hash, int64_t seq, int64_t ts_ms, const char *type,
                    const char *job, const char *actor, const char *message,
                    char hash[SHA256_HEX_LEN + 1])
{
	struct sha256_ctx ctx;
	uint8_t digest[SHA256_DIGEST_LEN];
	char num[64];
	sha256_init(&ctx);
	sha256_update(&ctx, prev_hash, strlen(prev_hash));
	sha256_update(&ctx, "{\"actor\":", 9);
	hash_json_string(&ctx, actor);
	sha256_update(&ctx, ",\"job\":", 7);
	if (job != NULL)
		hash_json_string(&ctx, job);
	else
		sha256_update(&ctx, "null", 4);
	sha256_update(&ctx, ",\"message\":", 11);
	hash_json_string(&ctx, message);
	int len = snprintf(num, sizeof num, ",\"seq\":%lld,\"ts_ms\":%lld,\"type\":", (long long)seq,
	                   (long long)ts_ms);
	sha256_update(&ctx, num, (size_t)len);
	hash_json_string(&ctx, type);
	sha256_update(&ctx, "}", 1);
	sha256_final(&ctx, digest);
	sha256_to_hex(digest, hash);
}

static int64_t events_first(struct fsm *f)
{
	int64_t first = 0;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT min(seq) FROM events");
	if (st == NULL)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW)
		first = sqlite3_column_int64(st, 0);
	fsm_release(f, st);
	return first;
}

/* With the setting events_max, the oldest events go once there are an eighth more than it
 * (a batch per pass, not a row per command): the newest events_max stay, and an event
 * events.pruned, itself in the chain, names the last one removed and its hash, where
 * verification of what stays starts (fsm_events_verify). */
static int events_prune(struct fsm *f, int64_t ts, int64_t newest)
{
	if (!f->events_max_known) {
		f->events_max = fsm_config_get(f, "events_max", 0);
		f->events_max_known = 1;
	}
	int64_t max = f->events_max, first;
	if (max <= 0 || f->events_pruning)
		return 0;
	if ((first = events_first(f)) < 0)
		return YARD_EINTERNAL;
	if (newest - first + 1 <= max + max / 8)
		return 0;
	int64_t through = newest - max;
	char hash[SHA256_HEX_LEN + 1] = "";
	sqlite3_stmt *st = fsm_prepare(f, "SELECT hash FROM events WHERE seq = ?1");
	if (st == NULL)
		return YARD_EINTERNAL;
	sqlite3_bind_int64(st, 1, through);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(hash, sizeof hash, "%s", (const char *)sqlite3_column_text(st, 0));
	fsm_release(f, st);
	if (hash[0] == '\0' ||
	    fsm_run(f, "DELETE FROM events WHERE seq <= ?1", "i", through) != SQLITE_DONE)
		return YARD_EINTERNAL;
	f->events_pruning = 1;
	int rc = fsm_event_append(f, ts, "events.pruned", NULL, "yardd",
	                          "events %lld to %lld removed (setting events_max %lld); event "
	                          "%lld had hash %s",
	                          (long long)first, (long long)through, (long long)max,
	                          (long long)through, hash);
	f->events_pruning = 0;
	return rc;
}

int fsm_event_append(struct fsm *f, int64_t ts, const char *type, const char *job,
                     const char *actor, const char *fmt, ...)
{
	char message[512], prev[SHA256_HEX_LEN + 1], hash[SHA256_HEX_LEN + 1];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(message, sizeof message, fmt, ap);
	va_end(ap);

	int64_t seq = fsm_meta_next(f, "event_seq");
	if (seq < 0)
		return YARD_EINTERNAL;
	snprintf(prev, sizeof prev, "%s", ZERO_HASH);
	sqlite3_stmt *st = fsm_prepare(f, "SELECT hash FROM events WHERE seq = ?1");
	if (st == NULL)
		return YARD_EINTERNAL;
	sqlite3_bind_int64(st, 1, seq - 1);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(prev, sizeof prev, "%s", (const char *)sqlite3_column_text(st, 0));
	fsm_release(f, st);
	fsm_event_hash(prev, seq, ts, type, job, actor, message, hash);
	int rc =
	    fsm_run(f,
	            "INSERT INTO events(seq, ts_ms, type, job, actor, message, prev_hash, hash)"
	            " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
	            "iissssss", seq, ts, type, job, actor, message, prev, hash);
	if (rc != SQLITE_DONE)
		return YARD_EINTERNAL;
	return events_prune(f, ts, seq);
}

/* ---- commands ---- */

int fsm_valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > FSM_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
			return 0;
	return 1;
}

static const char *const JOB_STATES[] = {"pending", "running",   "restarting", "succeeded",
                                         "failed",  "cancelled", NULL};

static int job_state_valid(const char *s)
{
	for (int i = 0; JOB_STATES[i] != NULL; i++)
		if (strcmp(s, JOB_STATES[i]) == 0)
			return 1;
	return 0;
}

int fsm_job_state_terminal(const char *s)
{
	return strcmp(s, "succeeded") == 0 || strcmp(s, "failed") == 0 ||
	       strcmp(s, "cancelled") == 0;
}

/* Allowed job state changes; terminal states have none. */
static int job_transition_allowed(const char *from, const char *to)
{
	static const char *const allowed[][2] = {
	    {"pending", "running"},    {"pending", "failed"},    {"pending", "cancelled"},
	    {"running", "restarting"}, {"running", "succeeded"}, {"running", "failed"},
	    {"running", "cancelled"},  {"running", "pending"},   {"restarting", "running"},
	    {"restarting", "pending"}, {"restarting", "failed"}, {"restarting", "cancelled"},
	};
	for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
		if (strcmp(allowed[i][0], from) == 0 && strcmp(allowed[i][1], to) == 0)
			return 1;
	return 0;
}

/* job.submit's "place" {"ranks": [...]}: the leader placed the job as it submitted it
 * (sched_submit_begin). Applied as the job's first job.assign would be; a refusal leaves it
 * pending, with the reason in refused (the submission itself stands). NULL on an internal
 * failure. */
static json_t *submit_place(struct fsm *f, const struct fsm_cmd *c, const char *id,
                            const json_t *place, char *refused, size_t refused_len)
{
	const json_t *ranks = json_object_get(place, "ranks");
	if (!json_is_object(place) || json_object_size(place) != 1 || !json_is_array(ranks)) {
		snprintf(refused, refused_len, "place: must be {\"ranks\": [...]}");
		return json_true();
	}
	json_t *args = json_pack("{s:s,s:i,s:O,s:s,s:i}", "id", id, "generation", 1, "ranks", ranks,
	                         "note", "placed at submission", "restore_step", -1);
	if (args == NULL)
		return NULL;
	struct fsm_cmd assign = *c;
	assign.op = "job.assign";
	assign.args = args;
	assign.request_id = NULL;
	assign.actor = "scheduler";
	json_t *r = fsm_op_job_assign(f, &assign);
	json_decref(args);
	if (r == NULL)
		return NULL;
	const char *error = json_string_value(json_object_get(r, "error"));
	if (error != NULL)
		snprintf(refused, refused_len, "%s", error);
	json_decref(r);
	return json_true();
}

static json_t *op_job_submit(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"name", "priority", "spec", "place", NULL};
	struct yard_err e = {0};
	const char *name = NULL;
	int64_t priority = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "name", 1, FSM_NAME_MAX, &name, &e) != 0 ||
	    jsonx_get_int(c->args, "", "priority", 0, -1000, 1000, &priority, &e) != 0)
		return fsm_res_from_err(&e);
	if (!fsm_valid_name(name))
		return fsm_res_err(400, "name",
		                   "name: '%s' must be 1-63 characters of [A-Za-z0-9._-]", name);
	json_t *spec = json_object_get(c->args, "spec");
	if (!json_is_object(spec))
		return fsm_res_err(400, "spec", "spec: must be an object");
	/* the jobs it waits for (spec "after") exist: a mistyped id would wait for ever */
	size_t i;
	json_t *dep;
	json_array_foreach(json_object_get(spec, "after"), i, dep)
	{
		char state[16], owner[FSM_NAME_MAX + 1];
		const char *dep_id = json_string_value(dep);
		json_t *missing = dep_id != NULL ? fsm_job_lookup(f, dep_id, state, owner) : NULL;
		if (dep_id == NULL || missing != NULL) {
			json_decref(missing);
			return fsm_res_err(400, "after", "after[%zu]: no job %s", i,
			                   dep_id != NULL ? dep_id : "(not a string)");
		}
		if (fsm_job_state_terminal(state) && strcmp(state, "succeeded") != 0)
			return fsm_res_err(
			    400, "after",
			    "after[%zu]: job %s has ended %s: this job could never start", i,
			    dep_id, state);
	}

	int64_t seq = fsm_meta_next(f, "job_seq");
	if (seq < 0)
		return NULL;
	char id[FSM_ID_MAX];
	snprintf(id, sizeof id, "j-%06lld", (long long)seq);
	char *spec_text = jsonx_dumps_compact(spec, 1, NULL); /* json_dumps' text, faster */
	int rc =
	    fsm_run(f,
	            "INSERT INTO jobs(id, seq, name, state, priority, submitted_ms, updated_ms,"
	            " actor, spec) VALUES(?1, ?2, ?3, 'pending', ?4, ?5, ?5, ?6, ?7)",
	            "sisiiss", id, seq, name, priority, c->ts, c->actor, spec_text);
	free(spec_text);
	if (rc != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "job.submitted", id, c->actor, "job %s (%s) submitted by %s",
	                     id, name, c->actor) != 0)
		return NULL;
	submitted_note(f, id, spec);
	const json_t *place = json_object_get(c->args, "place");
	char refused[300] = "";
	if (place != NULL) {
		json_t *done = submit_place(f, c, id, place, refused, sizeof refused);
		if (done == NULL)
			return NULL;
		json_decref(done);
		if (refused[0] == '\0')
			return fsm_res_ok(201,
			                  json_pack("{s:s,s:s}", "id", id, "state", "running"));
	}
	json_t *body = json_pack("{s:s,s:s}", "id", id, "state", "pending");
	if (refused[0] != '\0')
		json_object_set_new(body, "placement_refused", json_string(refused));
	return fsm_res_ok(201, body);
}

/* Reads the job's state and owner; 0, or a result describing why not. */
json_t *fsm_job_lookup(struct fsm *f, const char *id, char state[16], char actor[FSM_NAME_MAX + 1])
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT state, actor FROM jobs WHERE id = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "internal error reading job %s", id);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	json_t *r = NULL;
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(state, 16, "%s", (const char *)sqlite3_column_text(st, 0));
		snprintf(actor, FSM_NAME_MAX + 1, "%s", (const char *)sqlite3_column_text(st, 1));
	} else {
		r = fsm_res_err(404, "id", "no job %s", id);
	}
	fsm_release(f, st);
	return r;
}

json_t *fsm_job_result(struct fsm *f, const char *id, int status)
{
	struct yard_err e = {0};
	json_t *job = fsm_job_get(f, id, &e);
	if (job == NULL)
		return NULL;
	return fsm_res_ok(status, job);
}

json_t *fsm_job_brief(struct fsm *f, const char *id, int status)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT state, generation FROM jobs WHERE id = ?1");
	json_t *body = NULL;
	if (st == NULL)
		return NULL;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		body = json_pack("{s:s,s:s,s:I}", "id", id, "state", sqlite3_column_text(st, 0),
		                 "generation", (json_int_t)sqlite3_column_int64(st, 1));
	fsm_release(f, st);
	return body != NULL ? fsm_res_ok(status, body) : NULL;
}

/* The job a command's args {id} name, if the command's principal may `verb` it (a user only
 * their own jobs): NULL with *id and its state, or the result refusing. */
static json_t *own_job(struct fsm *f, const struct fsm_cmd *c, const char *verb, const char **id,
                       char state[16])
{
	static const char *const keys[] = {"id", NULL};
	struct yard_err e = {0};
	char owner[FSM_NAME_MAX + 1];
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, id, &e) != 0)
		return fsm_res_from_err(&e);
	json_t *r = fsm_job_lookup(f, *id, state, owner);
	if (r != NULL)
		return r;
	if (strcmp(c->role, "user") == 0 && strcmp(owner, c->actor) != 0)
		return fsm_res_err(403, NULL,
		                   "job %s belongs to %s; a user may %s only their own jobs", *id,
		                   owner, verb);
	return NULL;
}

static json_t *op_job_cancel(struct fsm *f, const struct fsm_cmd *c)
{
	const char *id = NULL;
	char state[16];
	json_t *r = own_job(f, c, "cancel", &id, state);
	if (r != NULL)
		return r;
	if (fsm_job_state_terminal(state))
		return fsm_res_err(409, NULL, "job %s has already ended (%s): nothing to cancel",
		                   id, state);
	char reason[128];
	snprintf(reason, sizeof reason, "cancelled by %s", c->actor);
	if (fsm_run(
	        f,
	        "UPDATE jobs SET state = 'cancelled', updated_ms = ?2, reason = ?3 WHERE id = ?1",
	        "sis", id, c->ts, reason) != SQLITE_DONE ||
	    fsm_ckpt_on_job_end(f, id) != 0)
		return NULL;
	if (fsm_event_append(f, c->ts, "job.cancelled", id, c->actor,
	                     "job %s cancelled by %s (was %s)", id, c->actor, state) != 0)
		return NULL;
	return fsm_job_result(f, id, 200);
}

/* Deletes an ended job: its row, its assignments and every checkpoint it stored (their bytes
 * too). Its events stay (the hash chain covers them) and name the deletion. */
static json_t *op_job_delete(struct fsm *f, const struct fsm_cmd *c)
{
	const char *id = NULL;
	char state[16];
	json_t *r = own_job(f, c, "delete", &id, state);
	if (r != NULL)
		return r;
	if (!fsm_job_state_terminal(state))
		return fsm_res_err(409, NULL,
		                   "job %s is %s: only a succeeded, failed or cancelled job can be "
		                   "deleted (cancel it first)",
		                   id, state);
	int64_t ckpts = 0, bytes = 0;
	if (fsm_ckpt_on_job_delete(f, id, &ckpts, &bytes) != 0 ||
	    fsm_run(f, "DELETE FROM assignments WHERE job = ?1", "s", id) != SQLITE_DONE ||
	    fsm_run(f, "DELETE FROM jobs WHERE id = ?1", "s", id) != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "job.deleted", id, c->actor,
	                     "job %s (%s) deleted by %s with %lld checkpoints (%lld bytes)", id,
	                     state, c->actor, (long long)ckpts, (long long)bytes) != 0)
		return NULL;
	return fsm_res_ok(200, json_pack("{s:s,s:b,s:I,s:I}", "id", id, "deleted", 1, "checkpoints",
	                                 (json_int_t)ckpts, "checkpoint_bytes", (json_int_t)bytes));
}

/* The ended jobs of one state without a complete checkpoint, in submission order. */
#define COLLECTABLE_SQL                                                                            \
	"SELECT id, updated_ms FROM jobs WHERE state = ?1 AND NOT EXISTS (SELECT 1 FROM"           \
	" checkpoints WHERE checkpoints.job = jobs.id AND complete = 1) ORDER BY seq LIMIT ?2"

json_t *fsm_jobs_collectable(struct fsm *f, int64_t before_ms, int max)
{
	static const char *const ended[] = {"succeeded", "failed", "cancelled"};
	if (max > FSM_COLLECT_MAX)
		max = FSM_COLLECT_MAX;
	json_t *ids = json_array();
	for (size_t k = 0; ids != NULL && k < sizeof ended / sizeof ended[0]; k++) {
		sqlite3_stmt *st = fsm_prepare(f, COLLECTABLE_SQL);
		if (st == NULL) {
			json_decref(ids);
			return NULL;
		}
		sqlite3_bind_text(st, 1, ended[k], -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 2, max);
		while (sqlite3_step(st) == SQLITE_ROW && (int)json_array_size(ids) < max)
			if (sqlite3_column_int64(st, 1) < before_ms)
				json_array_append_new(
				    ids, json_string((const char *)sqlite3_column_text(st, 0)));
		fsm_release(f, st);
	}
	return ids;
}

/* jobs.collect {before_ms, ids}: the leader's collection of ended jobs (job_retention_s).
 * Each id is checked again here, so a job that changed since the leader chose it (deleted,
 * given a checkpoint) is kept or skipped alike on every member; one event says what went. */
static json_t *op_jobs_collect(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"before_ms", "ids", NULL};
	struct yard_err e = {0};
	int64_t before_ms = 0;
	if (strcmp(c->role, "admin") != 0)
		return fsm_res_err(403, NULL, "jobs.collect is the leader's (role admin), not %s's",
		                   c->role);
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_int(c->args, "", "before_ms", 1, 0, INT64_MAX, &before_ms, &e) != 0)
		return fsm_res_from_err(&e);
	const json_t *ids = json_object_get(c->args, "ids");
	if (!json_is_array(ids) || json_array_size(ids) > FSM_COLLECT_MAX)
		return fsm_res_err(400, "ids", "ids: must be an array of at most %d job ids",
		                   FSM_COLLECT_MAX);
	size_t i;
	const json_t *v;
	json_array_foreach(ids, i, v)
	{
		if (!json_is_string(v) || json_string_length(v) >= FSM_ID_MAX)
			return fsm_res_err(400, "ids", "ids[%zu]: must be a job id", i);
	}
	int64_t collected = 0, skipped = 0;
	char first[FSM_ID_MAX] = "", last[FSM_ID_MAX] = "";
	json_array_foreach(ids, i, v)
	{
		const char *id = json_string_value(v);
		sqlite3_stmt *st =
		    fsm_prepare(f, "SELECT state, updated_ms FROM jobs WHERE id = ?1");
		if (st == NULL)
			return NULL;
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		int eligible = sqlite3_step(st) == SQLITE_ROW &&
		               fsm_job_state_terminal((const char *)sqlite3_column_text(st, 0)) &&
		               sqlite3_column_int64(st, 1) < before_ms;
		fsm_release(f, st);
		if (!eligible || fsm_checkpoint_newest(f, id) >= 0) {
			skipped++;
			continue;
		}
		int64_t ckpts = 0, bytes = 0; /* incomplete ones only: a complete one keeps it */
		if (fsm_ckpt_on_job_delete(f, id, &ckpts, &bytes) != 0 ||
		    fsm_run(f, "DELETE FROM assignments WHERE job = ?1", "s", id) != SQLITE_DONE ||
		    fsm_run(f, "DELETE FROM jobs WHERE id = ?1", "s", id) != SQLITE_DONE)
			return NULL;
		if (collected++ == 0)
			snprintf(first, sizeof first, "%s", id);
		snprintf(last, sizeof last, "%s", id);
	}
	if (collected > 0 &&
	    fsm_event_append(f, c->ts, "jobs.collected", NULL, c->actor,
	                     "%lld ended job(s) collected (%s%s%s), ended before %lld; their "
	                     "events stay",
	                     (long long)collected, first, collected > 1 ? " .. " : "",
	                     collected > 1 ? last : "", (long long)before_ms) != 0)
		return NULL;
	return fsm_res_ok(200, json_pack("{s:I,s:I}", "collected", (json_int_t)collected, "skipped",
	                                 (json_int_t)skipped));
}

static json_t *op_job_set_state(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id",   "state",    "reason", "step",
	                                   "loss", "restarts", NULL};
	struct yard_err e = {0};
	const char *id = NULL, *to = NULL, *reason = NULL;
	int64_t step = -1, restarts = -1;
	double loss = -1;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0 ||
	    jsonx_get_string(c->args, "", "state", 1, 16, &to, &e) != 0 ||
	    jsonx_get_string(c->args, "", "reason", 0, 256, &reason, &e) != 0 ||
	    jsonx_get_int(c->args, "", "step", 0, 0, INT64_MAX, &step, &e) != 0 ||
	    jsonx_get_int(c->args, "", "restarts", 0, 0, 1000000, &restarts, &e) != 0 ||
	    jsonx_get_double(c->args, "", "loss", 0, 0, 1e300, &loss, &e) != 0)
		return fsm_res_from_err(&e);
	if (!job_state_valid(to))
		return fsm_res_err(400, "state", "state: '%s' is not a job state", to);
	char from[16], owner[FSM_NAME_MAX + 1];
	json_t *r = fsm_job_lookup(f, id, from, owner);
	if (r != NULL)
		return r;
	if (!job_transition_allowed(from, to))
		return fsm_res_err(409, "state", "job %s cannot go from %s to %s", id, from, to);
	if (fsm_run(f,
	            "UPDATE jobs SET state = ?2, updated_ms = ?3, reason = ?4,"
	            " step = CASE WHEN ?5 >= 0 THEN ?5 ELSE step END,"
	            " restarts = CASE WHEN ?6 >= 0 THEN ?6 ELSE restarts END,"
	            " loss = CASE WHEN ?7 >= 0 THEN ?7 ELSE loss END WHERE id = ?1",
	            "ssisiid", id, to, c->ts, reason, step, restarts, loss) != SQLITE_DONE ||
	    (fsm_job_state_terminal(to) && fsm_ckpt_on_job_end(f, id) != 0))
		return NULL;
	if (fsm_event_append(f, c->ts, "job.state", id, c->actor, "job %s %s -> %s%s%s", id, from,
	                     to, reason ? ": " : "", reason ? reason : "") != 0)
		return NULL;
	return fsm_job_result(f, id, 200);
}

int fsm_valid_hash(const char *h)
{
	if (strlen(h) != SHA256_HEX_LEN)
		return 0;
	for (int i = 0; i < SHA256_HEX_LEN; i++)
		if (!isxdigit((unsigned char)h[i]) || isupper((unsigned char)h[i]))
			return 0;
	return 1;
}

/* ttl_s: seconds from the command's time until the token stops working; 0: never. */
static json_t *token_insert(struct fsm *f, const struct fsm_cmd *c, const char *name,
                            const char *role, const char *hash, int64_t ttl_s)
{
	int64_t expires_ms = ttl_s > 0 ? c->ts + ttl_s * 1000 : 0;
	int64_t seq = fsm_meta_next(f, "token_seq");
	if (seq < 0)
		return NULL;
	char id[FSM_ID_MAX];
	snprintf(id, sizeof id, "t-%06lld", (long long)seq);
	int rc = fsm_run(f,
	                 "INSERT INTO tokens(id, name, role, hash, created_ms, expires_ms)"
	                 " VALUES(?1, ?2, ?3, ?4, ?5, nullif(?6, 0))",
	                 "ssssii", id, name, role, hash, c->ts, expires_ms);
	if (rc == SQLITE_CONSTRAINT)
		return fsm_res_err(409, NULL, "a token with this secret already exists");
	if (rc != SQLITE_DONE)
		return NULL;
	char expiry[64] = "";
	if (expires_ms > 0)
		snprintf(expiry, sizeof expiry, ", expiring after %lld s", (long long)ttl_s);
	if (fsm_event_append(f, c->ts, "token.created", NULL, c->actor,
	                     "token %s (%s, role %s%s) created by %s", id, name, role, expiry,
	                     c->actor) != 0)
		return NULL;
	json_t *r = fsm_res_ok(201, json_pack("{s:s,s:s,s:s,s:I}", "id", id, "name", name, "role",
	                                      role, "created_ms", (json_int_t)c->ts));
	if (expires_ms > 0)
		json_object_set_new(json_object_get(r, "body"), "expires_ms",
		                    json_integer(expires_ms));
	json_object_set_new(r, "hash", json_string(hash));
	return r;
}

static json_t *op_token_create(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"name", "role", "hash", "ttl_s", NULL};
	struct yard_err e = {0};
	const char *name = NULL, *role = NULL, *hash = NULL;
	int64_t ttl_s = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "name", 1, FSM_NAME_MAX, &name, &e) != 0 ||
	    jsonx_get_string(c->args, "", "role", 1, 16, &role, &e) != 0 ||
	    jsonx_get_string(c->args, "", "hash", 1, SHA256_HEX_LEN, &hash, &e) != 0 ||
	    jsonx_get_int(c->args, "", "ttl_s", 0, 1, FSM_TOKEN_TTL_MAX_S, &ttl_s, &e) != 0)
		return fsm_res_from_err(&e);
	if (!fsm_valid_name(name))
		return fsm_res_err(400, "name",
		                   "name: '%s' must be 1-63 characters of [A-Za-z0-9._-]", name);
	if (!fsm_role_valid(role))
		return fsm_res_err(
		    400, "role", "role: '%s' is not one of admin, operator, user, security, agent",
		    role);
	if (!fsm_valid_hash(hash))
		return fsm_res_err(400, "hash", "hash: must be 64 lower-case hex characters");
	return token_insert(f, c, name, role, hash, ttl_s);
}

/* The first admin token: applies only while no token exists, so every leader may propose
 * it and only the first one committed counts. */
static json_t *op_token_bootstrap(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"name", "hash", NULL};
	struct yard_err e = {0};
	const char *name = NULL, *hash = NULL;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "name", 1, FSM_NAME_MAX, &name, &e) != 0 ||
	    jsonx_get_string(c->args, "", "hash", 1, SHA256_HEX_LEN, &hash, &e) != 0)
		return fsm_res_from_err(&e);
	if (!fsm_valid_hash(hash))
		return fsm_res_err(400, "hash", "hash: must be 64 lower-case hex characters");
	if (fsm_tokens_count(f) != 0)
		return fsm_res_err(409, NULL,
		                   "tokens already exist; the admin token is bootstrapped once");
	return token_insert(f, c, name, "admin", hash, 0);
}

static json_t *op_token_revoke(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", NULL};
	struct yard_err e = {0};
	const char *id = NULL;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "id", 1, FSM_ID_MAX, &id, &e) != 0)
		return fsm_res_from_err(&e);
	if (fsm_run(f, "UPDATE tokens SET revoked_ms = ?2 WHERE id = ?1 AND revoked_ms IS NULL",
	            "si", id, c->ts) != SQLITE_DONE)
		return NULL;
	if (sqlite3_changes(f->db) == 0)
		return fsm_res_err(404, "id", "no active token %s", id);
	if (fsm_event_append(f, c->ts, "token.revoked", NULL, c->actor, "token %s revoked by %s",
	                     id, c->actor) != 0)
		return NULL;
	return fsm_res_ok(200, json_pack("{s:s,s:b}", "id", id, "revoked", 1));
}

static json_t *members_result(struct fsm *f)
{
	struct yard_err e = {0};
	json_t *list = fsm_members_list(f, &e);
	return list ? fsm_res_ok(200, json_pack("{s:o}", "members", list)) : NULL;
}

static json_t *op_member_set(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", "raft_address", "api_url", "role", NULL};
	struct yard_err e = {0};
	int64_t id = 0;
	const char *addr = NULL, *url = NULL, *role = NULL;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_int(c->args, "", "id", 1, 1, INT32_MAX, &id, &e) != 0 ||
	    jsonx_get_string(c->args, "", "raft_address", 1, 64, &addr, &e) != 0 ||
	    jsonx_get_string(c->args, "", "api_url", 1, 256, &url, &e) != 0 ||
	    jsonx_get_string(c->args, "", "role", 1, 16, &role, &e) != 0)
		return fsm_res_from_err(&e);
	if (strcmp(role, "voter") != 0 && strcmp(role, "spare") != 0)
		return fsm_res_err(400, "role", "role: '%s' must be voter or spare", role);
	if (fsm_run(f,
	            "INSERT INTO members(id, raft_address, api_url, role) VALUES(?1, ?2, ?3, ?4)"
	            " ON CONFLICT(id) DO UPDATE SET raft_address = ?2, api_url = ?3, role = ?4",
	            "isss", id, addr, url, role) != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "member.set", NULL, c->actor,
	                     "member %lld %s %s (%s) set by %s", (long long)id, addr, url, role,
	                     c->actor) != 0)
		return NULL;
	return members_result(f);
}

static json_t *op_member_remove(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"id", NULL};
	struct yard_err e = {0};
	int64_t id = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_int(c->args, "", "id", 1, 1, INT32_MAX, &id, &e) != 0)
		return fsm_res_from_err(&e);
	if (fsm_run(f, "DELETE FROM members WHERE id = ?1", "i", id) != SQLITE_DONE)
		return NULL;
	if (sqlite3_changes(f->db) == 0)
		return fsm_res_err(404, "id", "no member %lld", (long long)id);
	if (fsm_event_append(f, c->ts, "member.removed", NULL, c->actor,
	                     "member %lld removed by %s", (long long)id, c->actor) != 0)
		return NULL;
	return members_result(f);
}

/* Replicated thresholds the scheduler and failure detector read (fsm_config_get). */
static const struct {
	const char *key;
	int64_t min, max;
} CONFIG_KEYS[] = {
    {"node_suspect_ms", 100, 3600000},
    {"node_down_ms", 100, 3600000},
    {"straggler_threshold_pct", 1, 1000},
    {"straggler_windows", 1, 1000},
    {"restart_backoff_ms", 0, 3600000},
    {"max_heartbeats_per_s", 0, 10000000},
    {"build_max_bytes", 1, 1LL << 32},
    {"blob_store_max_bytes", 1, 1LL << 36},
    {"embargo_max_days", 1, FSM_EMBARGO_MAX_DAYS},
    {"checkpoint_job_max_bytes", 1, 1LL << 36},
    {"events_max", 1000, 1LL << 40},
    {"job_retention_s", 0, 10LL * 366 * 86400},
};

static int config_put(struct fsm *f, const char *key, int64_t value)
{
	int rc = fsm_run(f,
	                 "INSERT INTO config(key, value) VALUES(?1, ?2)"
	                 " ON CONFLICT(key) DO UPDATE SET value = ?2",
	                 "si", key, value);
	return rc == SQLITE_DONE ? 0 : -1;
}

static json_t *op_config_set(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"key", "value", NULL};
	struct yard_err e = {0};
	const char *key = NULL;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "key", 1, 64, &key, &e) != 0)
		return fsm_res_from_err(&e);
	for (size_t i = 0; i < sizeof CONFIG_KEYS / sizeof CONFIG_KEYS[0]; i++) {
		if (strcmp(CONFIG_KEYS[i].key, key) != 0)
			continue;
		int64_t v = 0;
		if (jsonx_get_int(c->args, "", "value", 1, CONFIG_KEYS[i].min, CONFIG_KEYS[i].max,
		                  &v, &e) != 0)
			return fsm_res_from_err(&e);
		f->events_max_known = 0; /* (config is WITHOUT ROWID: no update hook) */
		f->config_version++;
		/* the leader judges silence by the interval it asked before a change for a while
		 * (every leader alike): the value before and the change's time are kept */
		if (strcmp(key, "max_heartbeats_per_s") == 0 &&
		    (config_put(f, "max_heartbeats_per_s.before",
		                fsm_config_get(f, key, FSM_MAX_HEARTBEATS_DEFAULT)) != 0 ||
		     config_put(f, "max_heartbeats_per_s.changed_ms", c->ts) != 0))
			return NULL;
		if (config_put(f, key, v) != 0)
			return NULL;
		if (fsm_event_append(f, c->ts, "config.set", NULL, c->actor, "%s = %lld set by %s",
		                     key, (long long)v, c->actor) != 0)
			return NULL;
		return fsm_res_ok(200, json_pack("{s:s,s:I}", "key", key, "value", (json_int_t)v));
	}
	return fsm_res_err(400, "key", "key: '%s' is not a known setting", key);
}

static const struct {
	const char *name;
	json_t *(*fn)(struct fsm *f, const struct fsm_cmd *c);
	int creates; /* refused past create_limit (FSM_DB_HEADROOM) */
} OPS[] = {
    {"job.submit", op_job_submit, 1},
    {"job.cancel", op_job_cancel, 0},
    {"job.delete", op_job_delete, 0},
    {"jobs.collect", op_jobs_collect, 0},
    {"job.set_state", op_job_set_state, 0},
    {"token.create", op_token_create, 1},
    {"token.bootstrap", op_token_bootstrap, 0},
    {"token.revoke", op_token_revoke, 0},
    {"member.set", op_member_set, 0},
    {"member.remove", op_member_remove, 0},
    {"config.set", op_config_set, 0},
    {"node.register", fsm_op_node_register, 1},
    {"node.set_state", fsm_op_node_set_state, 0},
    {"node.cordon", fsm_op_node_cordon, 0},
    {"node.drain", fsm_op_node_drain, 0},
    {"node.drained", fsm_op_node_drained, 0},
    {"job.assign", fsm_op_job_assign, 0},
    {"job.restart", fsm_op_job_restart, 0},
    {"job.replace", fsm_op_job_replace, 0},
    {"job.finish", fsm_op_job_finish, 0},
    {"job.note", fsm_op_job_note, 0},
    {"checkpoint.shard", fsm_op_checkpoint_shard, 1},
    {"checkpoint.chunk", fsm_op_checkpoint_chunk, 1},
    {"checkpoint.commit", fsm_op_checkpoint_commit, 0},
    {"build.create", fsm_op_build_create, 1},
    {"build.chunk", fsm_op_build_chunk, 1},
    {"build.commit", fsm_op_build_commit, 0},
    {"build.delete", fsm_op_build_delete, 0},
    {"advisory.create", fsm_op_advisory_create, 1},
    {"advisory.embargo", fsm_op_advisory_embargo, 0},
    {"advisory.share", fsm_op_advisory_share, 0},
    {"advisory.publish", fsm_op_advisory_publish, 0},
    {"audit.read", fsm_op_audit_read, 0},
    {"rollout.start", fsm_op_rollout_start, 1},
    {"rollout.advance", fsm_op_rollout_advance, 0},
    {"rollout.node", fsm_op_rollout_node, 0},
    {"rollout.control", fsm_op_rollout_control, 0},
};

static int valid_request_id(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > FSM_REQUEST_ID_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_')
			return 0;
	return 1;
}

#define FSM_CMD_MAX_DEPTH 64 /* nesting a command may have (parse_cmd) */

/* Fills c from a command object (borrowing from it); NULL, and root released, when it is
 * not {op, args, request_id, ts, actor, role}. */
static json_t *cmd_fields(json_t *root, struct fsm_cmd *c)
{
	static const char *const keys[] = {"op", "args", "request_id", "ts", "actor", "role", NULL};
	struct yard_err e = {0};
	memset(c, 0, sizeof *c);
	c->role = "admin";
	if (!json_is_object(root) || jsonx_only_keys(root, "", keys, &e) != 0 ||
	    jsonx_get_string(root, "", "op", 1, 64, &c->op, &e) != 0 ||
	    jsonx_get_int(root, "", "ts", 1, 0, INT64_MAX, &c->ts, &e) != 0 ||
	    jsonx_get_string(root, "", "actor", 1, FSM_NAME_MAX, &c->actor, &e) != 0 ||
	    jsonx_get_string(root, "", "role", 0, 16, &c->role, &e) != 0) {
		json_decref(root);
		return NULL;
	}
	json_t *rid = json_object_get(root, "request_id");
	if (json_is_string(rid))
		c->request_id = json_string_value(rid);
	else if (rid != NULL && !json_is_null(rid)) {
		json_decref(root);
		return NULL;
	}
	c->args = json_object_get(root, "args");
	if (c->args == NULL) {
		c->args = json_object();
		json_object_set_new(root, "args", c->args);
	}
	if (!json_is_object(c->args)) {
		json_decref(root);
		return NULL;
	}
	return root;
}

static json_t *parse_cmd(const void *payload, size_t len, struct fsm_cmd *c)
{
	struct yard_err e = {0};
	json_t *root = jsonx_parse(payload, len, CODEC_MAX_PAYLOAD, FSM_CMD_MAX_DEPTH, &e);
	return root != NULL ? cmd_fields(root, c) : NULL;
}

/* ---- the leader's own commands (fsm_command_encode_own) ---- */

#define FSM_OWN_MAX 1024
#define FSM_OWN_SEARCH 16 /* kept commands an apply looks through for its own */

struct fsm_own {
	char *text;
	size_t len;
	json_t *cmd;
};

static void own_drop_head(struct fsm *f)
{
	struct fsm_own *e = &f->own[f->own_head];
	free(e->text);
	json_decref(e->cmd);
	e->text = NULL;
	e->cmd = NULL;
	f->own_head = (f->own_head + 1) % FSM_OWN_MAX;
	f->own_n--;
}

static void own_clear(struct fsm *f)
{
	while (f->own_n > 0)
		own_drop_head(f);
	free(f->own);
	f->own = NULL;
	f->own_head = 0;
}

/* Nothing but the command holds a reference to any of its values (true, false and null are
 * shared constants, never changed). */
static int owned_alone(const json_t *v)
{
	if (json_is_true(v) || json_is_false(v) || json_is_null(v))
		return 1;
	if (v->refcount != 1)
		return 0;
	if (json_is_object(v)) {
		const char *k;
		const json_t *x;
		json_object_foreach((json_t *)v, k, x)
		{
			if (!owned_alone(x))
				return 0;
		}
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++)
			if (!owned_alone(json_array_get(v, i)))
				return 0;
	}
	return 1;
}

/* Keeps cmd (stolen) and a copy of its text, or releases cmd. */
static void own_keep(struct fsm *f, const char *text, size_t len, json_t *cmd)
{
	/* the text first: its depth check bounds owned_alone's recursion */
	if (!f->keep_submitted ||
	    !jsonx_printed_parses(text, len, CODEC_MAX_PAYLOAD, FSM_CMD_MAX_DEPTH) ||
	    !owned_alone(cmd)) {
		json_decref(cmd);
		return;
	}
	if (f->own == NULL && (f->own = calloc(FSM_OWN_MAX, sizeof *f->own)) == NULL) {
		json_decref(cmd);
		return;
	}
	if (f->own_n == FSM_OWN_MAX) /* never applied here (lost with a leadership): oldest */
		own_drop_head(f);
	struct fsm_own *e = &f->own[(f->own_head + f->own_n) % FSM_OWN_MAX];
	e->text = malloc(len ? len : 1);
	if (e->text == NULL) {
		json_decref(cmd);
		return;
	}
	memcpy(e->text, text, len);
	e->len = len;
	e->cmd = cmd;
	f->own_n++;
}

void fsm_command_unsent(struct fsm *f, const char *text, size_t len)
{
	if (f->own_n == 0 || text == NULL)
		return;
	int last = (f->own_head + f->own_n - 1) % FSM_OWN_MAX;
	struct fsm_own *e = &f->own[last];
	if (e->len != len || memcmp(e->text, text, len) != 0)
		return;
	free(e->text);
	json_decref(e->cmd);
	e->text = NULL;
	e->cmd = NULL;
	f->own_n--;
}

/* The kept object of the command whose text is payload (new reference), or NULL. Kept
 * commands before it were never applied here (refused, or lost with a leadership). */
static json_t *own_take(struct fsm *f, const void *payload, size_t len)
{
	if (!f->keep_submitted) {
		if (f->own != NULL)
			own_clear(f);
		return NULL;
	}
	for (int k = 0; k < f->own_n && k < FSM_OWN_SEARCH; k++) {
		struct fsm_own *e = &f->own[(f->own_head + k) % FSM_OWN_MAX];
		if (e->len != len || memcmp(e->text, payload, len) != 0)
			continue;
		while (k-- > 0)
			own_drop_head(f);
		e = &f->own[f->own_head];
		json_t *cmd = e->cmd;
		e->cmd = NULL;
		own_drop_head(f);
		if (f->verify_own) {
			struct yard_err err = {0};
			json_t *parsed =
			    jsonx_parse(payload, len, CODEC_MAX_PAYLOAD, FSM_CMD_MAX_DEPTH, &err);
			if (!jsonx_identical(parsed, cmd)) {
				log_error(
				    "fsm: a kept command differs from its parsed text (%zu bytes: "
				    "%.*s)",
				    len, (int)(len > 400 ? 400 : len), (const char *)payload);
				abort();
			}
			json_decref(parsed);
		}
		f->own_taken++;
		return cmd;
	}
	return NULL;
}

/* Looks up a remembered result for request_id (new reference) or NULL. */
static json_t *request_id_lookup(struct fsm *f, const char *rid)
{
	json_t *r = NULL;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT result FROM request_ids WHERE id = ?1");
	if (st == NULL)
		return NULL;
	sqlite3_bind_text(st, 1, rid, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		r = jsonx_loads((const char *)sqlite3_column_text(st, 0));
	fsm_release(f, st);
	return r;
}

/* Transaction control through the statement cache (sqlite3_exec would compile each time). */
static int tx(struct fsm *f, const char *sql)
{
	if (strncmp(sql, "ROLLBACK", 8) == 0) { /* what was read since may be undone */
		f->events_max_known = 0;
		f->config_version++;
	}
	int rc = fsm_run(f, sql, "");
	if (rc != SQLITE_DONE) {
		log_error("fsm: %s: %s", sql, sqlite3_errmsg(f->db));
		return YARD_EINTERNAL;
	}
	return 0;
}

/* The 507 a creating command gets while the pages in use reach create_limit; NULL when there
 * is room. Judged before the command runs, by what every member has at this point. */
static json_t *refuse_when_full(struct fsm *f, const char *op)
{
	size_t used;
	if (!fsm_state_reaches(f, f->create_limit, &used))
		return NULL;
	return fsm_res_err(
	    507, NULL,
	    "%s refused: the replicated state holds %zu MiB in use, at the state "
	    "machine's line of %zu MiB (%zu MiB below its %zu MiB cap, kept for "
	    "what already exists): nothing new (jobs, checkpoints, builds, tokens, "
	    "nodes, rollouts) is stored until ended jobs are collected "
	    "(--job-retention-s, yardctl job delete) or events pruned (--events-max)",
	    op, used >> 20, f->create_limit >> 20, (FSM_DB_MAX - f->create_limit) >> 20,
	    FSM_DB_MAX >> 20);
}

static json_t *apply_cmd(struct fsm *f, const struct fsm_cmd *c)
{
	size_t i;
	for (i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
		if (strcmp(OPS[i].name, c->op) == 0)
			break;
	if (i == sizeof OPS / sizeof OPS[0])
		return fsm_res_err(400, "op", "op: unknown command '%s'", c->op);
	if (c->request_id != NULL && !valid_request_id(c->request_id))
		return fsm_res_err(400, "request_id",
		                   "request_id: must be 1-64 characters of [A-Za-z0-9_-]");

	f->submitted_last[0] = '\0';
	int own_tx = !f->in_batch; /* else fsm_apply_batch_end commits the entry's commands */
	if (own_tx && tx(f, "BEGIN") != 0)
		return fsm_res_err(500, NULL, "internal error: cannot begin a transaction");
	/* Forget request ids older than the TTL, measured in command time so every member
	 * forgets the same ones at the same entry. */
	fsm_run(f, "DELETE FROM request_ids WHERE ts_ms < ?1", "i", c->ts - FSM_REQUEST_ID_TTL_MS);
	json_t *r = c->request_id ? request_id_lookup(f, c->request_id) : NULL;
	if (r == NULL && OPS[i].creates && (r = refuse_when_full(f, c->op)) != NULL) {
		/* not remembered under its request id: the same request may pass once there is
		 * room */
	} else if (r == NULL) {
		tx(f, "SAVEPOINT op");
		r = OPS[i].fn(f, c);
		if (r == NULL)
			r = fsm_res_err(500, NULL, "internal error applying %s: %s", c->op,
			                sqlite3_errmsg(f->db));
		if (is_error(r))
			tx(f, "ROLLBACK TO op");
		tx(f, "RELEASE op");
		if (c->request_id != NULL) {
			char *text = jsonx_dumps_compact(r, 1, NULL); /* json_dumps' text, faster */
			fsm_run(f, "INSERT INTO request_ids(id, ts_ms, result) VALUES(?1, ?2, ?3)",
			        "sis", c->request_id, c->ts, text);
			free(text);
		}
	}
	if (own_tx && tx(f, "COMMIT") != 0) {
		tx(f, "ROLLBACK");
		if (f->submitted_last[0] != '\0') /* its id goes to the next submission */
			json_object_del(f->submitted, f->submitted_last);
		json_decref(r);
		r = fsm_res_err(500, NULL, "internal error: commit of %s failed", c->op);
	}
	return r;
}

const json_t *fsm_apply(struct fsm *f, const void *payload, size_t len)
{
	struct fsm_cmd c;
	json_t *root = own_take(f, payload, len);
	root = root != NULL ? cmd_fields(root, &c) : parse_cmd(payload, len, &c);
	json_t *r;
	if (root == NULL)
		r = fsm_res_err(
		    400, NULL,
		    "malformed command (%zu bytes): not {op, args, request_id, ts, actor}", len);
	else
		r = apply_cmd(f, &c);
	json_decref(root);
	json_decref(f->last_result);
	f->last_result = r;
	f->applies++;
	return r;
}

void fsm_apply_batch_begin(struct fsm *f)
{
	f->in_batch = tx(f, "BEGIN") == 0; /* else each command is its own transaction */
}

int fsm_apply_batch_end(struct fsm *f)
{
	if (!f->in_batch)
		return 0;
	f->in_batch = 0;
	if (tx(f, "COMMIT") == 0)
		return 0;
	tx(f, "ROLLBACK");
	return YARD_EINTERNAL;
}

/* The command object and its text (*cmd: a new reference, or NULL with NULL returned). */
static char *command_text(const char *op, json_t *args, const char *request_id, int64_t ts_ms,
                          const char *actor, const char *role, size_t *len, json_t **cmd)
{
	*cmd = json_pack("{s:s,s:o,s:o,s:I,s:s,s:s}", "op", op, "args", args ? args : json_object(),
	                 "request_id", request_id ? json_string(request_id) : json_null(), "ts",
	                 (json_int_t)ts_ms, "actor", actor, "role", role);
	if (*cmd == NULL)
		return NULL;
	size_t n = 0;
	char *text = jsonx_dumps_compact(*cmd, 0, &n); /* json_dumps' compact text */
	if (text != NULL && len != NULL)
		*len = n;
	return text;
}

char *fsm_command_encode(const char *op, json_t *args, const char *request_id, int64_t ts_ms,
                         const char *actor, const char *role, size_t *len)
{
	json_t *cmd;
	char *text = command_text(op, args, request_id, ts_ms, actor, role, len, &cmd);
	json_decref(cmd);
	return text;
}

char *fsm_command_encode_own(struct fsm *f, const char *op, json_t *args, const char *request_id,
                             int64_t ts_ms, const char *actor, const char *role, size_t *len)
{
	json_t *cmd;
	size_t n = 0;
	char *text = command_text(op, args, request_id, ts_ms, actor, role, &n, &cmd);
	if (text == NULL) {
		json_decref(cmd);
		return NULL;
	}
	own_keep(f, text, n, cmd);
	if (len != NULL)
		*len = n;
	return text;
}
