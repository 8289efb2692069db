/* fsm_store.c: the replicated blob store and the builds kept in it.
 *
 * A blob belongs to one owner (kind + id: "build" + version today, checkpoint shards later)
 * and is declared with its size and sha256 before any byte arrives. Its bytes travel as
 * chunks of FSM_CHUNK_MAX bytes (the last one shorter), one raft command each, so no entry
 * is larger than a chunk plus its base64 overhead. A blob is complete when every chunk is
 * present and the concatenation hashes to the declared sha256; only then may its owner be
 * sealed (build.commit). Quotas: each kind has a per-owner maximum and the whole store a
 * total, both replicated settings, checked when a blob is declared (its declared size counts
 * at once, so an upload cannot run out of room half-way).
 *
 * Builds: build.create (state "uploading"), build.chunk, build.commit (→ "ready"). Who may
 * read a build is decided in the HTTP layer from the embargo helpers of fsm_advisory.c; this
 * file does not know about principals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/jsonx.h"
#include "jobs/fsm_internal.h"

#define BUILD_NOTES_MAX 4096

/* ---- blobs (generic) ---- */

static int64_t blob_chunk_count(int64_t size)
{
	return (size + FSM_CHUNK_MAX - 1) / FSM_CHUNK_MAX;
}

static int64_t blob_chunk_len(int64_t size, int64_t index)
{
	int64_t rest = size - index * (int64_t)FSM_CHUNK_MAX;
	return rest < FSM_CHUNK_MAX ? rest : FSM_CHUNK_MAX;
}

static int64_t store_used_bytes(struct fsm *f)
{
	int64_t used = 0;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT coalesce(sum(size), 0) FROM blobs");
	if (st == NULL)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW)
		used = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return used;
}

json_t *fsm_blob_declare(struct fsm *f, const char *kind, const char *id, int64_t size,
                         const char *sha256, int64_t owner_max_bytes)
{
	if (size < 1 || size > owner_max_bytes)
		return fsm_res_err(400, "size",
		                   "size: %lld bytes is outside 1..%lld (the %s quota)",
		                   (long long)size, (long long)owner_max_bytes, kind);
	int64_t used = store_used_bytes(f);
	int64_t total = fsm_config_get(f, "blob_store_max_bytes", FSM_BLOB_STORE_MAX_DEFAULT);
	if (used < 0)
		return NULL;
	if (used + size > total)
		return fsm_res_err(507, "size",
		                   "size: %lld bytes do not fit: the blob store holds %lld of %lld"
		                   " bytes (setting blob_store_max_bytes)",
		                   (long long)size, (long long)used, (long long)total);
	int rc = fsm_run(f,
	                 "INSERT INTO blobs(owner_kind, owner_id, size, sha256, chunks)"
	                 " VALUES(?1, ?2, ?3, ?4, ?5)",
	                 "ssisi", kind, id, size, sha256, blob_chunk_count(size));
	if (rc == SQLITE_CONSTRAINT)
		return fsm_res_err(409, NULL, "%s %s already has stored bytes", kind, id);
	return rc == SQLITE_DONE ? NULL : fsm_res_err(500, NULL, "cannot declare %s %s", kind, id);
}

/* size and chunk count of a declared blob; 0, or -1 when there is none. */
static int blob_header(struct fsm *f, const char *kind, const char *id, int64_t *size,
                       int64_t *chunks, char sha256[SHA256_HEX_LEN + 1])
{
	int rc = -1;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT size, chunks, sha256 FROM blobs"
	                                  " WHERE owner_kind = ?1 AND owner_id = ?2");
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*size = sqlite3_column_int64(st, 0);
		*chunks = sqlite3_column_int64(st, 1);
		snprintf(sha256, SHA256_HEX_LEN + 1, "%s",
		         (const char *)sqlite3_column_text(st, 2));
		rc = 0;
	}
	sqlite3_finalize(st);
	return rc;
}

/* 1 when chunk index is stored with exactly these bytes, 0 when absent, -1 when different. */
static int chunk_compare(struct fsm *f, const char *kind, const char *id, int64_t index,
                         const unsigned char *data, size_t len)
{
	int rc = 0;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT data FROM blob_chunks WHERE owner_kind = ?1"
	                                  " AND owner_id = ?2 AND idx = ?3");
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, index);
	if (sqlite3_step(st) == SQLITE_ROW) {
		const void *stored = sqlite3_column_blob(st, 0);
		size_t n = (size_t)sqlite3_column_bytes(st, 0);
		rc = n == len && memcmp(stored, data, len) == 0 ? 1 : -1;
	}
	sqlite3_finalize(st);
	return rc;
}

json_t *fsm_blob_put_chunk(struct fsm *f, const char *kind, const char *id, int64_t index,
                           const unsigned char *data, size_t len, int sealed)
{
	int64_t size = 0, chunks = 0;
	char sha[SHA256_HEX_LEN + 1];
	if (blob_header(f, kind, id, &size, &chunks, sha) != 0)
		return fsm_res_err(404, NULL, "%s %s has no declared bytes", kind, id);
	if (index >= chunks)
		return fsm_res_err(400, "index",
		                   "index: %lld is past the last chunk (%lld) of %s %s (%lld bytes"
		                   " in chunks of %u)",
		                   (long long)index, (long long)chunks - 1, kind, id,
		                   (long long)size, FSM_CHUNK_MAX);
	int64_t want = blob_chunk_len(size, index);
	if ((int64_t)len != want)
		return fsm_res_err(
		    400, "data",
		    "chunk %lld of %s %s has %zu bytes, want %lld (chunks are %u bytes,"
		    " the last one the rest of %lld)",
		    (long long)index, kind, id, len, (long long)want, FSM_CHUNK_MAX,
		    (long long)size);
	int same = chunk_compare(f, kind, id, index, data, len);
	if (same == 1)
		return NULL; /* idempotent: the same bytes again */
	if (sealed)
		return fsm_res_err(409, "index", "%s %s is committed; chunk %lld cannot change",
		                   kind, id, (long long)index);
	sqlite3_stmt *st = fsm_prepare(f, "INSERT INTO blob_chunks(owner_kind, owner_id, idx, data)"
	                                  " VALUES(?1, ?2, ?3, ?4) ON CONFLICT DO UPDATE"
	                                  " SET data = excluded.data");
	if (st == NULL)
		return fsm_res_err(500, NULL, "cannot store chunk %lld of %s %s", (long long)index,
		                   kind, id);
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, index);
	sqlite3_bind_blob(st, 4, data, (int)len, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? NULL
	                         : fsm_res_err(500, NULL, "cannot store chunk %lld of %s %s",
	                                       (long long)index, kind, id);
}

int64_t fsm_blob_chunks_present(struct fsm *f, const char *kind, const char *id)
{
	int64_t n = 0;
	sqlite3_stmt *st = fsm_prepare(
	    f, "SELECT count(*) FROM blob_chunks WHERE owner_kind = ?1 AND owner_id = ?2");
	if (st == NULL)
		return 0;
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

/* Walks the chunks in order: which are missing (listed into missing), the total size and
 * the sha256 of the concatenation. */
static int blob_scan(struct fsm *f, const char *kind, const char *id, int64_t chunks, char *missing,
                     size_t missing_len, int64_t *n_missing, int64_t *total,
                     char hex[SHA256_HEX_LEN + 1])
{
	struct sha256_ctx ctx;
	uint8_t digest[SHA256_DIGEST_LEN];
	sqlite3_stmt *st = fsm_prepare(f, "SELECT idx, data FROM blob_chunks WHERE owner_kind = ?1"
	                                  " AND owner_id = ?2 ORDER BY idx");
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	sha256_init(&ctx);
	*n_missing = 0;
	*total = 0;
	missing[0] = '\0';
	int64_t expect = 0;
	for (;;) {
		int more = sqlite3_step(st) == SQLITE_ROW;
		int64_t idx = more ? sqlite3_column_int64(st, 0) : chunks;
		for (; expect < idx && expect < chunks; expect++) {
			size_t n = strlen(missing);
			if (*n_missing < 10)
				snprintf(missing + n, missing_len - n, "%s%lld", n ? ", " : "",
				         (long long)expect);
			(*n_missing)++;
		}
		if (!more)
			break;
		size_t len = (size_t)sqlite3_column_bytes(st, 1);
		sha256_update(&ctx, sqlite3_column_blob(st, 1), len);
		*total += (int64_t)len;
		expect = idx + 1;
	}
	sqlite3_finalize(st);
	sha256_final(&ctx, digest);
	sha256_to_hex(digest, hex);
	return 0;
}

json_t *fsm_blob_check_complete(struct fsm *f, const char *kind, const char *id)
{
	int64_t size = 0, chunks = 0, n_missing = 0, total = 0;
	char sha[SHA256_HEX_LEN + 1], got[SHA256_HEX_LEN + 1], missing[160];
	if (blob_header(f, kind, id, &size, &chunks, sha) != 0)
		return fsm_res_err(404, NULL, "%s %s has no declared bytes", kind, id);
	if (blob_scan(f, kind, id, chunks, missing, sizeof missing, &n_missing, &total, got) != 0)
		return fsm_res_err(500, NULL, "cannot read the chunks of %s %s", kind, id);
	if (n_missing > 0)
		return fsm_res_err(409, "chunks", "%s %s: %lld of %lld chunks missing: %s%s", kind,
		                   id, (long long)n_missing, (long long)chunks, missing,
		                   n_missing > 10 ? ", ..." : "");
	if (total != size)
		return fsm_res_err(422, "size", "%s %s: the chunks hold %lld bytes, declared %lld",
		                   kind, id, (long long)total, (long long)size);
	if (strcmp(got, sha) != 0)
		return fsm_res_err(422, "sha256",
		                   "%s %s: the uploaded bytes hash to sha256 %s, declared %s", kind,
		                   id, got, sha);
	return NULL;
}

int fsm_blob_delete(struct fsm *f, const char *kind, const char *id)
{
	if (fsm_run(f, "DELETE FROM blob_chunks WHERE owner_kind = ?1 AND owner_id = ?2", "ss",
	            kind, id) != SQLITE_DONE ||
	    fsm_run(f, "DELETE FROM blobs WHERE owner_kind = ?1 AND owner_id = ?2", "ss", kind,
	            id) != SQLITE_DONE)
		return YARD_EINTERNAL;
	return 0;
}

int fsm_blob_read(struct fsm *f, const char *kind, const char *id, unsigned char **data,
                  size_t *len, struct yard_err *err)
{
	int64_t size = 0, chunks = 0;
	char sha[SHA256_HEX_LEN + 1];
	if (blob_header(f, kind, id, &size, &chunks, sha) != 0)
		return yard_err_set(err, YARD_ENOTFOUND, "%s %s has no stored bytes", kind, id);
	unsigned char *buf = malloc((size_t)size);
	if (buf == NULL)
		return yard_err_set(err, YARD_ENOMEM, "no memory for the %lld bytes of %s %s",
		                    (long long)size, kind, id);
	sqlite3_stmt *st = fsm_prepare(f, "SELECT idx, data FROM blob_chunks WHERE owner_kind = ?1"
	                                  " AND owner_id = ?2 ORDER BY idx");
	if (st == NULL) {
		free(buf);
		return yard_err_set(err, YARD_EINTERNAL, "cannot read %s %s", kind, id);
	}
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	size_t off = 0;
	int64_t expect = 0;
	int rc = 0;
	while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
		size_t n = (size_t)sqlite3_column_bytes(st, 1);
		if (sqlite3_column_int64(st, 0) != expect++ || off + n > (size_t)size)
			rc = yard_err_set(err, YARD_ECORRUPT,
			                  "%s %s: chunk %lld missing or too long", kind, id,
			                  (long long)expect - 1);
		else
			memcpy(buf + off, sqlite3_column_blob(st, 1), n);
		off += n;
	}
	sqlite3_finalize(st);
	if (rc == 0 && off != (size_t)size)
		rc = yard_err_set(err, YARD_ECORRUPT, "%s %s: %zu of %lld bytes stored", kind, id,
		                  off, (long long)size);
	if (rc != 0) {
		free(buf);
		return rc;
	}
	*data = buf;
	*len = off;
	return 0;
}

/* ---- builds ---- */

static const char *const COMPONENTS[] = {"agent", "worker", NULL};

/* A build's state ("uploading"/"ready") into state; 404 result when there is none. */
static json_t *build_lookup(struct fsm *f, const char *version, char state[16])
{
	json_t *r = NULL;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT state FROM builds WHERE version = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "cannot read build %s", version);
	sqlite3_bind_text(st, 1, version, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(state, 16, "%s", (const char *)sqlite3_column_text(st, 0));
	else
		r = fsm_res_err(404, "version", "no build %s", version);
	sqlite3_finalize(st);
	return r;
}

static json_t *build_result(struct fsm *f, const char *version, int status)
{
	struct yard_err e = {0};
	json_t *b = fsm_build_get(f, version, &e);
	return b ? fsm_res_ok(status, b) : NULL;
}

json_t *fsm_op_build_create(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"version", "component", "sha256", "size",
	                                   "notes",   "advisory",  NULL};
	struct yard_err e = {0};
	const char *version = NULL, *component = NULL, *sha = NULL, *notes = NULL, *advisory = NULL;
	int64_t size = 0;
	int64_t max = fsm_config_get(f, "build_max_bytes", FSM_BUILD_MAX_DEFAULT);
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "version", 1, FSM_NAME_MAX, &version, &e) != 0 ||
	    jsonx_get_string(c->args, "", "component", 1, 16, &component, &e) != 0 ||
	    jsonx_get_string(c->args, "", "sha256", 1, SHA256_HEX_LEN, &sha, &e) != 0 ||
	    jsonx_get_int(c->args, "", "size", 1, 1, INT64_MAX, &size, &e) != 0 ||
	    jsonx_get_string(c->args, "", "notes", 0, BUILD_NOTES_MAX, &notes, &e) != 0 ||
	    jsonx_get_string(c->args, "", "advisory", 0, FSM_ID_MAX, &advisory, &e) != 0)
		return fsm_res_from_err(&e);
	if (!fsm_valid_name(version))
		return fsm_res_err(400, "version",
		                   "version: '%s' must be 1-63 characters of [A-Za-z0-9._-]",
		                   version);
	int known = 0;
	for (int i = 0; COMPONENTS[i] != NULL; i++)
		known |= strcmp(component, COMPONENTS[i]) == 0;
	if (!known)
		return fsm_res_err(400, "component", "component: '%s' must be agent or worker",
		                   component);
	if (!fsm_valid_hash(sha))
		return fsm_res_err(400, "sha256", "sha256: must be 64 lower-case hex characters");
	if (advisory != NULL && !fsm_advisory_exists(f, advisory))
		return fsm_res_err(404, "advisory", "advisory: no advisory %s", advisory);
	char state[16];
	json_t *r = build_lookup(f, version, state);
	if (r == NULL)
		return fsm_res_err(409, "version", "build %s already exists (%s)", version, state);
	json_decref(r);
	if ((r = fsm_blob_declare(f, "build", version, size, sha, max)) != NULL)
		return r;
	if (fsm_run(f,
	            "INSERT INTO builds(version, component, sha256, size, notes, advisory, state,"
	            " created_ms, updated_ms, actor) VALUES(?1, ?2, ?3, ?4, ?5, ?6, 'uploading',"
	            " ?7, ?7, ?8)",
	            "sssissis", version, component, sha, size, notes, advisory, c->ts,
	            c->actor) != SQLITE_DONE)
		return NULL;
	/* The message names no advisory, notes, size or sha256 (what a redacted build hides):
	 * events are readable outside the embargo's circle. */
	if (fsm_event_append(f, c->ts, "build.created", NULL, c->actor,
	                     "build %s (%s) created by %s", version, component, c->actor) != 0)
		return NULL;
	return build_result(f, version, 201);
}

json_t *fsm_op_build_chunk(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"version", "index", "data", NULL};
	struct yard_err e = {0};
	const char *version = NULL, *data = NULL;
	int64_t index = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "version", 1, FSM_NAME_MAX, &version, &e) != 0 ||
	    jsonx_get_int(c->args, "", "index", 1, 0, INT32_MAX, &index, &e) != 0 ||
	    jsonx_get_string(c->args, "", "data", 1, base64_encoded_len(FSM_CHUNK_MAX), &data,
	                     &e) != 0)
		return fsm_res_from_err(&e);
	char state[16];
	json_t *r = build_lookup(f, version, state);
	if (r != NULL)
		return r;
	size_t text_len = strlen(data), len = 0;
	unsigned char *bytes = malloc(text_len / 4 * 3 + 1);
	if (bytes == NULL)
		return fsm_res_err(500, NULL, "no memory for chunk %lld of build %s",
		                   (long long)index, version);
	if (base64_decode(data, text_len, bytes, &len) != 0) {
		free(bytes);
		return fsm_res_err(400, "data", "data: chunk %lld of build %s is not base64",
		                   (long long)index, version);
	}
	r = fsm_blob_put_chunk(f, "build", version, index, bytes, len,
	                       strcmp(state, "uploading") != 0);
	free(bytes);
	if (r != NULL)
		return r;
	/* No event per chunk: a 64 MiB build would add 128 of them; commit tells the story. */
	int64_t size = 0, chunks = 0;
	char sha[SHA256_HEX_LEN + 1];
	if (blob_header(f, "build", version, &size, &chunks, sha) != 0)
		return NULL;
	return fsm_res_ok(200, json_pack("{s:s,s:I,s:I,s:I,s:I}", "version", version, "index",
	                                 (json_int_t)index, "size", (json_int_t)len, "received",
	                                 (json_int_t)fsm_blob_chunks_present(f, "build", version),
	                                 "chunks", (json_int_t)chunks));
}

json_t *fsm_op_build_commit(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"version", NULL};
	struct yard_err e = {0};
	const char *version = NULL;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "version", 1, FSM_NAME_MAX, &version, &e) != 0)
		return fsm_res_from_err(&e);
	char state[16];
	json_t *r = build_lookup(f, version, state);
	if (r != NULL)
		return r;
	if (strcmp(state, "uploading") != 0)
		return fsm_res_err(409, "version", "build %s is already %s", version, state);
	if ((r = fsm_blob_check_complete(f, "build", version)) != NULL)
		return r;
	if (fsm_run(f, "UPDATE builds SET state = 'ready', updated_ms = ?2 WHERE version = ?1",
	            "si", version, c->ts) != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "build.ready", NULL, c->actor,
	                     "build %s committed by %s (size and sha256 verified)", version,
	                     c->actor) != 0)
		return NULL;
	return build_result(f, version, 200);
}

/* Drops an upload that will not be finished, and the quota it holds. A committed build is
 * kept: rollouts and nodes may refer to it. */
json_t *fsm_op_build_delete(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"version", NULL};
	struct yard_err e = {0};
	const char *version = NULL;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 ||
	    jsonx_get_string(c->args, "", "version", 1, FSM_NAME_MAX, &version, &e) != 0)
		return fsm_res_from_err(&e);
	char state[16];
	json_t *r = build_lookup(f, version, state);
	if (r != NULL)
		return r;
	if (strcmp(state, "uploading") != 0)
		return fsm_res_err(409, "version",
		                   "build %s is %s; only an unfinished upload can be deleted",
		                   version, state);
	if (fsm_blob_delete(f, "build", version) != 0 ||
	    fsm_run(f, "DELETE FROM builds WHERE version = ?1", "s", version) != SQLITE_DONE)
		return NULL;
	if (fsm_event_append(f, c->ts, "build.deleted", NULL, c->actor,
	                     "unfinished build %s deleted by %s", version, c->actor) != 0)
		return NULL;
	return fsm_res_ok(200, json_pack("{s:s,s:b}", "version", version, "deleted", 1));
}

/* ---- reads ---- */

#define BUILD_COLUMNS                                                                              \
	"b.version, b.component, b.sha256, b.size, b.notes, b.advisory, b.state, b.created_ms,"    \
	" b.updated_ms, b.actor, bl.chunks,"                                                       \
	" (SELECT count(*) FROM blob_chunks c WHERE c.owner_kind = 'build'"                        \
	" AND c.owner_id = b.version)"                                                             \
	" FROM builds b LEFT JOIN blobs bl ON bl.owner_kind = 'build' AND bl.owner_id = b.version"

static json_t *text_or_null(sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return json_null();
	return json_string((const char *)sqlite3_column_text(st, i));
}

static json_t *build_from_row(sqlite3_stmt *st)
{
	return json_pack(
	    "{s:s,s:s,s:s,s:I,s:o,s:o,s:s,s:I,s:I,s:s,s:I,s:I}", "version",
	    sqlite3_column_text(st, 0), "component", sqlite3_column_text(st, 1), "sha256",
	    sqlite3_column_text(st, 2), "size", (json_int_t)sqlite3_column_int64(st, 3), "notes",
	    text_or_null(st, 4), "advisory", text_or_null(st, 5), "state",
	    sqlite3_column_text(st, 6), "created_ms", (json_int_t)sqlite3_column_int64(st, 7),
	    "updated_ms", (json_int_t)sqlite3_column_int64(st, 8), "actor",
	    sqlite3_column_text(st, 9), "chunks", (json_int_t)sqlite3_column_int64(st, 10),
	    "chunks_received", (json_int_t)sqlite3_column_int64(st, 11));
}

json_t *fsm_builds_list(struct fsm *f, struct yard_err *err)
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT " BUILD_COLUMNS " ORDER BY b.created_ms, b.version");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list builds");
		return NULL;
	}
	json_t *list = json_array();
	while (sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(list, build_from_row(st));
	sqlite3_finalize(st);
	return list;
}

json_t *fsm_build_get(struct fsm *f, const char *version, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(f, "SELECT " BUILD_COLUMNS " WHERE b.version = ?1");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot read build %s", version);
		return NULL;
	}
	sqlite3_bind_text(st, 1, version, -1, SQLITE_STATIC);
	json_t *b = NULL;
	if (sqlite3_step(st) == SQLITE_ROW)
		b = build_from_row(st);
	else
		yard_err_set(err, YARD_ENOTFOUND, "no build %s", version);
	sqlite3_finalize(st);
	return b;
}

/* Rollouts (issue 7's other half) decide which nodes a build is assigned to; until they
 * record assignments no node is a target, so an embargoed build reaches no node. */
int fsm_build_assigned_to_node(struct fsm *f, const char *version, const char *node)
{
	(void)f;
	(void)version;
	(void)node;
	return 0;
}
