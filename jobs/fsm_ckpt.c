/* fsm_ckpt.c: checkpoints of the "controller" store, kept in the blob store (fsm_store.c).
 *
 * A checkpoint is (job, step) with one shard per rank of the job's world. A node uploads the
 * shard of a rank it runs: checkpoint.shard declares it (size, sha256; the node must hold
 * that rank in the job's current generation), checkpoint.chunk carries its bytes in chunks
 * of FSM_CHUNK_MAX, checkpoint.commit verifies them. A shard of one chunk may carry its
 * bytes in the declaration ("data"), which then also commits it: one raft entry per shard. The
 * commit of the last missing shard makes the checkpoint complete (its manifest is this committed
 * record, event checkpoint.complete); only a complete checkpoint is ever restored. Then older
 * checkpoints beyond the spec's checkpoint.keep, and incomplete ones older than the new one, are
 * deleted with their bytes. Quota: the shards of one job hold at most the setting
 * checkpoint_job_max_bytes (yardd --checkpoint-quota-mb), checked when a shard is declared.
 *
 * A job that ends (succeeded, failed, cancelled) takes no more shards, and its incomplete
 * checkpoints are dropped; its complete ones stay until the job is deleted (job.delete:
 * every checkpoint, its bytes and its restore records).
 *
 * A placement (job.assign) names the step its ranks restore (restore_step, checked here to
 * be complete) and drops the incomplete checkpoints of the generation before: their missing
 * shards will never come. What this file does not do: move bytes over HTTP (web/api_ckpt.c)
 * or decide which step to restore (the leader, scheduler/leader.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/jsonx.h"
#include "jobs/fsm_internal.h"

#define BLOB_KIND "checkpoint"

static void blob_id(const char *job, int64_t step, int64_t rank, char out[80])
{
	snprintf(out, 80, "%s/%lld/%lld", job, (long long)step, (long long)rank);
}

/* The job's generation, world (assigned ranks) and spec's checkpoint.keep; 404 result if no
 * such job. */
static json_t *job_read(struct fsm *f, const char *job, int64_t *generation, int64_t *world,
                        int64_t *keep)
{
	json_t *r = NULL;
	sqlite3_stmt *st = fsm_prepare(
	    f,
	    "SELECT generation, coalesce(json_extract(spec, '$.checkpoint.keep'), 0),"
	    " (SELECT count(*) FROM assignments a WHERE a.job = jobs.id) FROM jobs WHERE id = ?1");
	if (st == NULL)
		return fsm_res_err(500, NULL, "internal error reading job %s", job);
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*generation = sqlite3_column_int64(st, 0);
		*keep = sqlite3_column_int64(st, 1);
		*world = sqlite3_column_int64(st, 2);
	} else {
		r = fsm_res_err(404, "job", "no job %s", job);
	}
	fsm_release(f, st);
	return r;
}

static int64_t query_int(struct fsm *f, const char *sql, const char *job, int64_t a, int64_t b,
                         int64_t dflt)
{
	int64_t v = dflt;
	sqlite3_stmt *st = fsm_prepare(f, sql);
	if (st == NULL)
		return dflt;
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, a);
	sqlite3_bind_int64(st, 3, b);
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(st, 0);
	fsm_release(f, st);
	return v;
}

int64_t fsm_checkpoint_world(struct fsm *f, const char *job, int64_t step)
{
	return query_int(f, "SELECT world FROM checkpoints WHERE job = ?1 AND step = ?2", job, step,
	                 0, -1);
}

int64_t fsm_checkpoint_newest(struct fsm *f, const char *job)
{
	return query_int(f, "SELECT max(step) FROM checkpoints WHERE job = ?1 AND complete = 1",
	                 job, 0, 0, -1);
}

int64_t fsm_checkpoint_restore_step(struct fsm *f, const char *job, int64_t generation)
{
	return query_int(f,
	                 "SELECT step FROM checkpoint_restores WHERE job = ?1 AND generation = ?2",
	                 job, generation, 0, -1);
}

static int checkpoint_is_complete(struct fsm *f, const char *job, int64_t step)
{
	return query_int(f, "SELECT complete FROM checkpoints WHERE job = ?1 AND step = ?2", job,
	                 step, 0, 0) == 1;
}

/* Deletes checkpoint (job, step): its shards' bytes, shard rows and record. */
static int checkpoint_delete(struct fsm *f, const char *job, int64_t step)
{
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT rank FROM checkpoint_shards WHERE job = ?1 AND step = ?2");
	if (st == NULL)
		return YARD_EINTERNAL;
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, step);
	int rc = 0;
	while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
		char id[80];
		blob_id(job, step, sqlite3_column_int64(st, 0), id);
		rc = fsm_blob_delete(f, BLOB_KIND, id);
	}
	fsm_release(f, st);
	if (rc == 0 && (fsm_run(f, "DELETE FROM checkpoint_shards WHERE job = ?1 AND step = ?2",
	                        "si", job, step) != SQLITE_DONE ||
	                fsm_run(f, "DELETE FROM checkpoints WHERE job = ?1 AND step = ?2", "si",
	                        job, step) != SQLITE_DONE))
		rc = YARD_EINTERNAL;
	return rc;
}

/* Deletes the checkpoints of job that sql (binding ?1 job, ?2 a, ?3 b) selects the steps of;
 * the deleted steps are listed into out. */
static int checkpoints_delete_where(struct fsm *f, const char *sql, const char *job, int64_t a,
                                    int64_t b, char *out, size_t out_len)
{
	int64_t steps[64];
	int n = 0, rc = 0;
	sqlite3_stmt *st = fsm_prepare(f, sql);
	if (st == NULL)
		return YARD_EINTERNAL;
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, a);
	sqlite3_bind_int64(st, 3, b);
	while (n < 64 && sqlite3_step(st) == SQLITE_ROW)
		steps[n++] = sqlite3_column_int64(st, 0);
	fsm_release(f, st);
	for (int i = 0; i < n && rc == 0; i++) {
		size_t used = strlen(out);
		rc = checkpoint_delete(f, job, steps[i]);
		if (used + 24 < out_len)
			snprintf(out + used, out_len - used, "%s%lld", used ? ", " : "",
			         (long long)steps[i]);
	}
	return rc;
}

json_t *fsm_ckpt_on_assign(struct fsm *f, const char *job, int64_t generation, int64_t restore_step)
{
	if (restore_step >= 0 && !checkpoint_is_complete(f, job, restore_step))
		return fsm_res_err(409, "restore_step",
		                   "restore_step: job %s has no complete checkpoint at step %lld",
		                   job, (long long)restore_step);
	char dropped[256] = "";
	if (checkpoints_delete_where(f,
	                             "SELECT step FROM checkpoints WHERE job = ?1 AND complete = 0",
	                             job, 0, 0, dropped, sizeof dropped) != 0)
		return fsm_res_err(500, NULL, "cannot drop the incomplete checkpoints of job %s",
		                   job);
	if (restore_step >= 0 &&
	    fsm_run(f,
	            "INSERT INTO checkpoint_restores(job, generation, step) VALUES(?1, ?2, ?3)"
	            " ON CONFLICT DO UPDATE SET step = excluded.step",
	            "sii", job, generation, restore_step) != SQLITE_DONE)
		return fsm_res_err(500, NULL, "cannot record the restore step of job %s", job);
	return NULL;
}

int fsm_ckpt_on_job_end(struct fsm *f, const char *job)
{
	char dropped[256] = "";
	return checkpoints_delete_where(
	    f, "SELECT step FROM checkpoints WHERE job = ?1 AND complete = 0", job, 0, 0, dropped,
	    sizeof dropped);
}

int fsm_ckpt_on_job_delete(struct fsm *f, const char *job, int64_t *count, int64_t *bytes)
{
	*count = query_int(f, "SELECT count(*) FROM checkpoints WHERE job = ?1", job, 0, 0, 0);
	*bytes = query_int(f,
	                   "SELECT coalesce(sum(size), 0) FROM checkpoint_shards WHERE job = ?1"
	                   " AND stored = 1",
	                   job, 0, 0, 0);
	/* 64 steps a round (checkpoints_delete_where's bound); no round can find none while
	 * some remain, so *count / 64 + 1 rounds end it */
	int rc = 0;
	for (int64_t round = 0; rc == 0 && round <= *count / 64; round++) {
		char dropped[256] = "";
		rc = checkpoints_delete_where(f, "SELECT step FROM checkpoints WHERE job = ?1", job,
		                              0, 0, dropped, sizeof dropped);
	}
	if (rc == 0 &&
	    fsm_run(f, "DELETE FROM checkpoint_restores WHERE job = ?1", "s", job) != SQLITE_DONE)
		rc = YARD_EINTERNAL;
	return rc;
}

/* Common arguments of the three shard commands. */
struct shard_args {
	const char *job;
	int64_t step, rank;
	char id[80];
};

static int shard_args_read(const json_t *args, struct shard_args *s, struct yard_err *e)
{
	if (jsonx_get_string(args, "", "job", 1, FSM_ID_MAX, &s->job, e) != 0 ||
	    jsonx_get_int(args, "", "step", 1, 1, INT64_MAX / 2, &s->step, e) != 0 ||
	    jsonx_get_int(args, "", "rank", 1, 0, 65535, &s->rank, e) != 0)
		return -1;
	blob_id(s->job, s->step, s->rank, s->id);
	return 0;
}

/* The declared size and sha256 of a shard and whether it is stored; -1 when undeclared. */
static int shard_row(struct fsm *f, const struct shard_args *s, int64_t *size,
                     char sha[SHA256_HEX_LEN + 1], int *stored)
{
	int rc = -1;
	sqlite3_stmt *st = fsm_prepare(f, "SELECT size, sha256, stored FROM checkpoint_shards"
	                                  " WHERE job = ?1 AND step = ?2 AND rank = ?3");
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, s->job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, s->step);
	sqlite3_bind_int64(st, 3, s->rank);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*size = sqlite3_column_int64(st, 0);
		snprintf(sha, SHA256_HEX_LEN + 1, "%s", (const char *)sqlite3_column_text(st, 1));
		*stored = sqlite3_column_int(st, 2);
		rc = 0;
	}
	fsm_release(f, st);
	return rc;
}

static json_t *shard_state(struct fsm *f, const struct shard_args *s, int status)
{
	int64_t size = 0;
	char sha[SHA256_HEX_LEN + 1];
	int stored = 0;
	if (shard_row(f, s, &size, sha, &stored) != 0)
		return NULL;
	int64_t chunks = (size + FSM_CHUNK_MAX - 1) / FSM_CHUNK_MAX;
	return fsm_res_ok(
	    status,
	    json_pack("{s:s,s:I,s:I,s:I,s:s,s:I,s:I,s:b}", "job", s->job, "step",
	              (json_int_t)s->step, "rank", (json_int_t)s->rank, "size", (json_int_t)size,
	              "sha256", sha, "chunks", (json_int_t)chunks, "received",
	              (json_int_t)fsm_blob_chunks_present(f, BLOB_KIND, s->id), "stored", stored));
}

/* Decodes base64 text into *bytes (malloc'd): NULL, or an error result. */
static json_t *decode(const struct shard_args *s, int64_t index, const char *text,
                      unsigned char **bytes, size_t *len)
{
	size_t text_len = strlen(text);
	*bytes = malloc(text_len / 4 * 3 + 1);
	if (*bytes == NULL)
		return fsm_res_err(500, NULL, "no memory for chunk %lld of %s", (long long)index,
		                   s->id);
	if (base64_decode(text, text_len, *bytes, len) != 0) {
		free(*bytes);
		*bytes = NULL;
		return fsm_res_err(400, "data", "data: chunk %lld of shard %s is not base64",
		                   (long long)index, s->id);
	}
	return NULL;
}

/* Stores base64 text data as chunk index of a declared shard: NULL or an error result. */
static json_t *put_chunk(struct fsm *f, const struct shard_args *s, int64_t index, const char *data,
                         int stored)
{
	unsigned char *bytes = NULL;
	size_t len = 0;
	json_t *r = decode(s, index, data, &bytes, &len);
	if (r != NULL)
		return r;
	r = fsm_blob_put_chunk(f, BLOB_KIND, s->id, index, bytes, len, stored);
	free(bytes);
	return r;
}

static json_t *shard_commit(struct fsm *f, const struct fsm_cmd *c, const struct shard_args *sa,
                            int64_t keep, int status);

json_t *fsm_op_checkpoint_shard(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"job",  "step",   "rank", "generation",
	                                   "size", "sha256", "data", NULL};
	struct yard_err e = {0};
	struct shard_args s = {0};
	const char *sha = NULL, *data = NULL;
	int64_t generation = 0, size = 0, job_generation = 0, world = 0, keep = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 || shard_args_read(c->args, &s, &e) != 0 ||
	    jsonx_get_int(c->args, "", "generation", 1, 1, INT32_MAX, &generation, &e) != 0 ||
	    jsonx_get_int(c->args, "", "size", 1, 1, INT64_MAX, &size, &e) != 0 ||
	    jsonx_get_string(c->args, "", "sha256", 1, SHA256_HEX_LEN, &sha, &e) != 0 ||
	    jsonx_get_string(c->args, "", "data", 0, base64_encoded_len(FSM_CHUNK_MAX), &data,
	                     &e) != 0)
		return fsm_res_from_err(&e);
	if (data != NULL && size > FSM_CHUNK_MAX)
		return fsm_res_err(400, "data",
		                   "data: only a shard of at most one chunk (%u bytes) travels with"
		                   " its declaration; this one has %lld bytes",
		                   FSM_CHUNK_MAX, (long long)size);
	if (!fsm_valid_hash(sha))
		return fsm_res_err(400, "sha256", "sha256: must be 64 lower-case hex characters");
	json_t *r;
	if (data != NULL) { /* inline bytes are checked before anything is written */
		unsigned char *bytes = NULL;
		size_t len = 0;
		char got[SHA256_HEX_LEN + 1];
		if ((r = decode(&s, 0, data, &bytes, &len)) != NULL)
			return r;
		sha256_hex(bytes, len, got);
		free(bytes);
		if ((int64_t)len != size)
			return fsm_res_err(400, "data", "data: %zu bytes, but size says %lld", len,
			                   (long long)size);
		if (strcmp(got, sha) != 0)
			return fsm_res_err(422, "sha256",
			                   "shard %s: the bytes hash to sha256 %s, declared %s",
			                   s.id, got, sha);
	}
	r = job_read(f, s.job, &job_generation, &world, &keep);
	if (r != NULL)
		return r;
	char state[16], owner[FSM_NAME_MAX + 1];
	if ((r = fsm_job_lookup(f, s.job, state, owner)) != NULL)
		return r;
	if (fsm_job_state_terminal(state))
		return fsm_res_err(410, "job", "job %s is %s; it takes no more checkpoint shards",
		                   s.job, state);
	if (s.rank >= world)
		return fsm_res_err(400, "rank", "rank: job %s has %lld ranks, no rank %lld", s.job,
		                   (long long)world, (long long)s.rank);
	if (generation != job_generation)
		return fsm_res_err(409, "generation",
		                   "generation: job %s is at generation %lld; a shard of generation"
		                   " %lld is stale",
		                   s.job, (long long)job_generation, (long long)generation);
	char node[FSM_NAME_MAX + 1] = "";
	sqlite3_stmt *st =
	    fsm_prepare(f, "SELECT node FROM assignments WHERE job = ?1 AND rank = ?2");
	if (st == NULL)
		return NULL;
	sqlite3_bind_text(st, 1, s.job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, s.rank);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(node, sizeof node, "%s", (const char *)sqlite3_column_text(st, 0));
	fsm_release(f, st);
	if (strcmp(c->role, "node") != 0 || strcmp(node, c->actor) != 0)
		return fsm_res_err(403, "rank",
		                   "%s (role %s) does not run rank %lld of job %s (node %s does);"
		                   " only that node uploads its shards",
		                   c->actor, c->role, (long long)s.rank, s.job, node);
	int64_t newest = fsm_checkpoint_newest(f, s.job);
	if (s.step <= newest)
		return fsm_res_err(410, "step",
		                   "step: job %s already has a complete checkpoint at step %lld; a"
		                   " shard of step %lld is not needed",
		                   s.job, (long long)newest, (long long)s.step);
	int64_t old_size = 0;
	char old_sha[SHA256_HEX_LEN + 1];
	int stored = 0;
	if (shard_row(f, &s, &old_size, old_sha, &stored) == 0) {
		if (old_size == size && strcmp(old_sha, sha) == 0) {
			if (data == NULL || stored) /* the same declaration again: resume */
				return shard_state(f, &s, 200);
			if ((r = put_chunk(f, &s, 0, data, 0)) != NULL)
				return r;
			return shard_commit(f, c, &s, keep, 200);
		}
		if (stored)
			return fsm_res_err(409, "sha256",
			                   "rank %lld of job %s at step %lld is already stored with"
			                   " sha256 %s",
			                   (long long)s.rank, s.job, (long long)s.step, old_sha);
		/* rewritten before it was stored: the new bytes replace the old */
		if (fsm_blob_delete(f, BLOB_KIND, s.id) != 0 ||
		    fsm_run(
		        f,
		        "DELETE FROM checkpoint_shards WHERE job = ?1 AND step = ?2 AND rank = ?3",
		        "sii", s.job, s.step, s.rank) != SQLITE_DONE)
			return NULL;
	}
	int64_t quota = fsm_config_get(f, "checkpoint_job_max_bytes", FSM_CKPT_JOB_MAX_DEFAULT);
	int64_t used = query_int(f,
	                         "SELECT coalesce(sum(size), 0) FROM checkpoint_shards"
	                         " WHERE job = ?1",
	                         s.job, 0, 0, 0);
	if (used + size > quota)
		return fsm_res_err(507, "size",
		                   "job %s: a shard of %lld bytes does not fit the job's checkpoint"
		                   " quota: %lld of %lld bytes in use (setting"
		                   " checkpoint_job_max_bytes, yardd --checkpoint-quota-mb)",
		                   s.job, (long long)size, (long long)used, (long long)quota);
	if ((r = fsm_blob_declare(f, BLOB_KIND, s.id, size, sha, quota)) != NULL)
		return r;
	if (fsm_run(f,
	            "INSERT INTO checkpoints(job, step, world, generation, complete, created_ms)"
	            " VALUES(?1, ?2, ?3, ?4, 0, ?5) ON CONFLICT DO NOTHING",
	            "siiii", s.job, s.step, world, generation, c->ts) != SQLITE_DONE ||
	    fsm_run(f,
	            "INSERT INTO checkpoint_shards(job, step, rank, size, sha256, node, stored)"
	            " VALUES(?1, ?2, ?3, ?4, ?5, ?6, 0)",
	            "siiiss", s.job, s.step, s.rank, size, sha, c->actor) != SQLITE_DONE)
		return NULL;
	if (data == NULL)
		return shard_state(f, &s, 201);
	/* a small shard: declared, stored and committed by this one command */
	if ((r = put_chunk(f, &s, 0, data, 0)) != NULL)
		return r;
	return shard_commit(f, c, &s, keep, 201);
}

json_t *fsm_op_checkpoint_chunk(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"job", "step", "rank", "index", "data", NULL};
	struct yard_err e = {0};
	struct shard_args s = {0};
	const char *data = NULL;
	int64_t index = 0, size = 0;
	char sha[SHA256_HEX_LEN + 1];
	int stored = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 || shard_args_read(c->args, &s, &e) != 0 ||
	    jsonx_get_int(c->args, "", "index", 1, 0, INT32_MAX, &index, &e) != 0 ||
	    jsonx_get_string(c->args, "", "data", 1, base64_encoded_len(FSM_CHUNK_MAX), &data,
	                     &e) != 0)
		return fsm_res_from_err(&e);
	if (shard_row(f, &s, &size, sha, &stored) != 0)
		return fsm_res_err(404, "rank",
		                   "rank %lld of job %s at step %lld has no declared shard",
		                   (long long)s.rank, s.job, (long long)s.step);
	json_t *r = put_chunk(f, &s, index, data, stored);
	return r != NULL ? r : shard_state(f, &s, 200);
}

/* Verifies a declared, unstored shard's bytes and marks it stored; the last shard of a
 * checkpoint completes it (event, pruning). The shard's state, or an error result. */
static json_t *shard_commit(struct fsm *f, const struct fsm_cmd *c, const struct shard_args *sa,
                            int64_t keep, int status)
{
	struct shard_args s = *sa;
	json_t *r = fsm_blob_check_complete(f, BLOB_KIND, s.id);
	if (r != NULL)
		return r;
	if (fsm_run(f,
	            "UPDATE checkpoint_shards SET stored = 1 WHERE job = ?1 AND step = ?2"
	            " AND rank = ?3",
	            "sii", s.job, s.step, s.rank) != SQLITE_DONE)
		return NULL;
	int64_t ckpt_world = query_int(f,
	                               "SELECT world FROM checkpoints WHERE job = ?1 AND step = ?2"
	                               "",
	                               s.job, s.step, 0, 0);
	int64_t n_stored = query_int(f,
	                             "SELECT count(*) FROM checkpoint_shards WHERE job = ?1"
	                             " AND step = ?2 AND stored = 1",
	                             s.job, s.step, 0, 0);
	if (n_stored < ckpt_world)
		return shard_state(f, &s, status);
	int64_t bytes = query_int(f,
	                          "SELECT sum(size) FROM checkpoint_shards WHERE job = ?1"
	                          " AND step = ?2",
	                          s.job, s.step, 0, 0);
	if (fsm_run(f,
	            "UPDATE checkpoints SET complete = 1, completed_ms = ?3 WHERE job = ?1"
	            " AND step = ?2",
	            "sii", s.job, s.step, c->ts) != SQLITE_DONE)
		return NULL;
	/* keep the newest `keep` complete ones (0: all); older incomplete ones can never be
	 * restored now */
	char removed[256] = "";
	if (checkpoints_delete_where(f,
	                             "SELECT step FROM checkpoints WHERE job = ?1 AND complete = 0"
	                             " AND step < ?2",
	                             s.job, s.step, 0, removed, sizeof removed) != 0 ||
	    (keep > 0 &&
	     checkpoints_delete_where(f,
	                              "SELECT step FROM checkpoints WHERE job = ?1 AND complete = 1"
	                              " ORDER BY step DESC LIMIT -1 OFFSET ?2 + ?3",
	                              s.job, keep, 0, removed, sizeof removed) != 0))
		return fsm_res_err(500, NULL, "cannot delete old checkpoints of job %s", s.job);
	if (fsm_event_append(f, c->ts, "checkpoint.complete", s.job, c->actor,
	                     "checkpoint of job %s at step %lld complete: %lld shard(s), %lld"
	                     " bytes, stored by the controller%s%s",
	                     s.job, (long long)s.step, (long long)ckpt_world, (long long)bytes,
	                     removed[0] ? "; removed steps " : "", removed) != 0)
		return NULL;
	return shard_state(f, &s, status);
}

json_t *fsm_op_checkpoint_commit(struct fsm *f, const struct fsm_cmd *c)
{
	static const char *const keys[] = {"job", "step", "rank", NULL};
	struct yard_err e = {0};
	struct shard_args s = {0};
	int64_t size = 0, job_generation = 0, world = 0, keep = 0;
	char sha[SHA256_HEX_LEN + 1];
	int stored = 0;
	if (jsonx_only_keys(c->args, "", keys, &e) != 0 || shard_args_read(c->args, &s, &e) != 0)
		return fsm_res_from_err(&e);
	json_t *r = job_read(f, s.job, &job_generation, &world, &keep);
	if (r != NULL)
		return r;
	if (shard_row(f, &s, &size, sha, &stored) != 0)
		return fsm_res_err(404, "rank",
		                   "rank %lld of job %s at step %lld has no declared shard",
		                   (long long)s.rank, s.job, (long long)s.step);
	if (stored)
		return shard_state(f, &s, 200);
	return shard_commit(f, c, &s, keep, 200);
}

/* ---- reads ---- */

json_t *fsm_checkpoints_list(struct fsm *f, const char *job, struct yard_err *err)
{
	sqlite3_stmt *st = fsm_prepare(
	    f, "SELECT c.step, c.world, c.generation, c.complete, c.created_ms, c.completed_ms,"
	       " (SELECT count(*) FROM checkpoint_shards s WHERE s.job = c.job AND s.step = c.step"
	       "  AND s.stored = 1),"
	       " (SELECT coalesce(sum(size), 0) FROM checkpoint_shards s WHERE s.job = c.job"
	       "  AND s.step = c.step AND s.stored = 1)"
	       " FROM checkpoints c WHERE c.job = ?1 ORDER BY c.step");
	if (st == NULL) {
		yard_err_set(err, YARD_EINTERNAL, "cannot list the checkpoints of job %s", job);
		return NULL;
	}
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	json_t *list = json_array();
	while (sqlite3_step(st) == SQLITE_ROW) {
		int complete = sqlite3_column_int(st, 3);
		json_array_append_new(
		    list,
		    json_pack("{s:I,s:I,s:I,s:I,s:I,s:b,s:I}", "step",
		              (json_int_t)sqlite3_column_int64(st, 0), "world",
		              (json_int_t)sqlite3_column_int64(st, 1), "generation",
		              (json_int_t)sqlite3_column_int64(st, 2), "shards",
		              (json_int_t)sqlite3_column_int64(st, 6), "bytes",
		              (json_int_t)sqlite3_column_int64(st, 7), "complete", complete,
		              "ts_ms", (json_int_t)sqlite3_column_int64(st, complete ? 5 : 4)));
	}
	fsm_release(f, st);
	return list;
}

int fsm_checkpoint_shard_info(struct fsm *f, const char *job, int64_t step, int64_t rank,
                              int64_t *size, char sha256[SHA256_HEX_LEN + 1], struct yard_err *err)
{
	struct shard_args s = {.job = job, .step = step, .rank = rank};
	int stored = 0;
	if (!checkpoint_is_complete(f, job, step))
		return yard_err_set(err, YARD_ENOTFOUND,
		                    "job %s has no complete checkpoint at step %lld", job,
		                    (long long)step);
	if (shard_row(f, &s, size, sha256, &stored) != 0 || !stored)
		return yard_err_set(err, YARD_ENOTFOUND,
		                    "checkpoint of job %s at step %lld has no shard of rank %lld",
		                    job, (long long)step, (long long)rank);
	return 0;
}

int fsm_checkpoint_shard_read(struct fsm *f, const char *job, int64_t step, int64_t rank,
                              unsigned char **data, size_t *len, struct yard_err *err)
{
	char id[80];
	blob_id(job, step, rank, id);
	return fsm_blob_read(f, BLOB_KIND, id, data, len, err);
}
