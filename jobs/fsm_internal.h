/* fsm_internal.h: helpers shared by fsm.c (apply) and fsm_query.c (reads); private to jobs/. */
#ifndef YARD_JOBS_FSM_INTERNAL_H
#define YARD_JOBS_FSM_INTERNAL_H

#include "jobs/fsm.h"

int fsm_exec(struct fsm *f, const char *sql);
/* A prepared statement for sql, from the per-connection cache (compiled on first use).
 * Give it back with fsm_release, which resets it and clears its bindings; until then it is
 * busy, and a nested fsm_prepare of the same sql gets a private statement instead. */
sqlite3_stmt *fsm_prepare(struct fsm *f, const char *sql);
/* Increments and returns counter key of the meta table (ids, sequences); -1 on failure. */
int64_t fsm_meta_next(struct fsm *f, const char *key);
void fsm_release(struct fsm *f, sqlite3_stmt *st);
/* Finalizes every cached statement (before the connection closes or is replaced). */
void fsm_stmt_cache_clear(struct fsm *f);
/* types: one letter per parameter, 's' text (NULL binds NULL), 'i' int64_t, 'd' double. */
int fsm_run(struct fsm *f, const char *sql, const char *types, ...);
/* hash = sha256(prev_hash || canonical JSON of the event with sorted keys). */
void fsm_event_hash(const char *prev_hash, int64_t seq, int64_t ts_ms, const char *type,
                    const char *job, const char *actor, const char *message,
                    char hash[SHA256_HEX_LEN + 1]);

/* A decoded command (fsm.h); every pointer borrows from the parsed payload. */
struct fsm_cmd {
	const char *op;
	json_t *args;
	const char *request_id;
	int64_t ts;
	const char *actor;
	const char *role;
};

/* Results (fsm.h): {"status", "body"} or {"status", "error", "field"?}. */
json_t *fsm_res_ok(int status, json_t *body);
json_t *fsm_res_err(int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
json_t *fsm_res_from_err(const struct yard_err *e);
/* Appends a hash-chained event; 0 or YARD_EINTERNAL. */
int fsm_event_append(struct fsm *f, int64_t ts, const char *type, const char *job,
                     const char *actor, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* 64 lower-case hex characters (a sha256). */
int fsm_valid_hash(const char *h);
/* 1-63 characters of [A-Za-z0-9._-]. */
int fsm_valid_name(const char *s);
int fsm_job_state_terminal(const char *s);
/* Reads a job's state and owner: NULL, or an error result (404) saying why not. */
json_t *fsm_job_lookup(struct fsm *f, const char *id, char state[16], char actor[FSM_NAME_MAX + 1]);
/* {"status": status, "body": the job} */
json_t *fsm_job_result(struct fsm *f, const char *id, int status);
/* The result of a scheduler's decision on a job (job.assign, restart, finish, replace): the
 * job's id, state and generation instead of the whole job, which every member would build
 * for each decision and nobody reads (the scheduler looks only for an error). */
json_t *fsm_job_brief(struct fsm *f, const char *id, int status);

/* fsm_cluster.c: nodes and placements (node.register, node.set_state, node.cordon,
 * job.assign, job.restart, job.replace, job.finish, job.note). */
json_t *fsm_op_node_register(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_node_set_state(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_node_cordon(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_node_drain(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_node_drained(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_job_assign(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_job_restart(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_job_replace(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_job_finish(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_job_note(struct fsm *f, const struct fsm_cmd *c);

/* fsm_store.c: the blob store (owner kind + id; see the file's comment) and builds. Each
 * returns NULL on success or an error result. */
json_t *fsm_blob_declare(struct fsm *f, const char *kind, const char *id, int64_t size,
                         const char *sha256, int64_t owner_max_bytes);
/* sealed: the owner is committed, so only an identical re-put is accepted. */
json_t *fsm_blob_put_chunk(struct fsm *f, const char *kind, const char *id, int64_t index,
                           const unsigned char *data, size_t len, int sealed);
/* Every chunk present, total size and sha256 as declared. */
json_t *fsm_blob_check_complete(struct fsm *f, const char *kind, const char *id);
int64_t fsm_blob_chunks_present(struct fsm *f, const char *kind, const char *id);
/* Removes a blob and its chunks (0 or YARD_EINTERNAL). */
int fsm_blob_delete(struct fsm *f, const char *kind, const char *id);
json_t *fsm_op_build_create(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_build_chunk(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_build_commit(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_build_delete(struct fsm *f, const struct fsm_cmd *c);
/* fsm_ckpt.c: checkpoint.shard (declare), checkpoint.chunk, checkpoint.commit; and what a
 * placement does to checkpoints: checks restore_step (-1: none) is complete, records it for
 * the generation, drops the job's incomplete checkpoints. NULL or an error result. */
json_t *fsm_op_checkpoint_shard(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_checkpoint_chunk(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_checkpoint_commit(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_ckpt_on_assign(struct fsm *f, const char *job, int64_t generation,
                           int64_t restore_step);
/* A job reached a terminal state: drops its incomplete checkpoints (0 or YARD_EINTERNAL). */
int fsm_ckpt_on_job_end(struct fsm *f, const char *job);
/* job.delete: every checkpoint of the job, with its bytes and restore records, deleted; how
 * many there were and the bytes their stored shards held in *count and *bytes. */
int fsm_ckpt_on_job_delete(struct fsm *f, const char *job, int64_t *count, int64_t *bytes);
/* fsm_advisory.c: advisory.create, .embargo, .share, .publish, and audit.read (an
 * embargoed read, recorded as an event). */
json_t *fsm_op_advisory_create(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_advisory_embargo(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_advisory_share(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_advisory_publish(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_audit_read(struct fsm *f, const struct fsm_cmd *c);
/* fsm_rollout.c: rollout.start, .advance, .node, .control (see the file's comment). */
json_t *fsm_op_rollout_start(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_rollout_advance(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_rollout_node(struct fsm *f, const struct fsm_cmd *c);
json_t *fsm_op_rollout_control(struct fsm *f, const struct fsm_cmd *c);

#endif
