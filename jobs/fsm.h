/* fsm.h: the replicated state machine: an in-memory SQLite database changed only by
 * commands, applied identically on every controller.
 *
 * A command is JSON {op, args, request_id, ts, actor, role}. The leader stamps ts (wall
 * milliseconds) and the actor into it before replication, so apply reads no clock and no
 * randomness: the same commands in the same order give byte-identical databases. Ids
 * (j-000001, t-000001, event seq) are assigned inside apply from counters in the database.
 *
 * Apply never fails: a malformed command or a business error (unknown job, bad transition)
 * becomes an error result and changes nothing. A command with a request_id already seen
 * returns the result it got the first time.
 *
 * Results are JSON objects {"status": <HTTP status>, "body": {...}} on success and
 * {"status": 4xx, "error": "...", "field"?: "..."} on failure, so the HTTP layer can answer
 * with them directly.
 *
 * Reads (fsm_job_get, ...) query the same database; callers decide whether a barrier came
 * first. Nothing here is thread-safe: one loop owns an fsm. */
#ifndef YARD_JOBS_FSM_H
#define YARD_JOBS_FSM_H

#include <jansson.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "jobs/sha256.h"

#define FSM_ID_MAX 32
#define FSM_NAME_MAX 63
#define FSM_REQUEST_ID_MAX 64
/* The blob store (fsm_store.c): bytes travel in chunks of FSM_CHUNK_MAX, one raft command
 * each; a build may hold at most build_max_bytes and the store blob_store_max_bytes
 * (replicated settings, these defaults). */
#define FSM_CHUNK_MAX (512u * 1024)
#define FSM_BUILD_MAX_DEFAULT (256LL << 20)
#define FSM_BLOB_STORE_MAX_DEFAULT (1LL << 30)
/* The shards of one job's checkpoints hold at most checkpoint_job_max_bytes (fsm_ckpt.c). */
#define FSM_CKPT_JOB_MAX_DEFAULT (256LL << 20)
/* An embargo lasts at most 14 days (the linux-distros rule); setting embargo_max_days may
 * lower it. */
#define FSM_EMBARGO_MAX_DAYS 14
/* The setting max_heartbeats_per_s when none is set: the heartbeats a second the leader
 * asks of all nodes together at most (scheduler/leader.c: heartbeat_floor) */
#define FSM_MAX_HEARTBEATS_DEFAULT 2000
/* Ended jobs (succeeded, failed, cancelled) without a complete checkpoint are collected (their
 * row and slots deleted, their events kept) this long after they ended: the setting
 * job_retention_s (yardd --job-retention-s; 0: never), one jobs.collect command of at most
 * FSM_COLLECT_MAX jobs at a time proposed by the leader. */
#define FSM_JOB_RETENTION_DEFAULT_S 86400
#define FSM_COLLECT_MAX 1000
/* How long request ids are remembered for deduplication (command time, not local time). */
#define FSM_REQUEST_ID_TTL_MS (24LL * 3600 * 1000)

/* Prepared statements are cached per connection (fsm_prepare/fsm_release in
 * fsm_internal.h): parsing SQL was the largest part of an apply. The cache is emptied
 * (every statement finalized) whenever the database is replaced by a restore. */
#define FSM_STMT_CACHE_SLOTS 128

struct fsm_stmt_slot {
	char *sql;        /* owned copy; NULL: slot empty */
	uint32_t hash;    /* FNV-1a of sql */
	sqlite3_stmt *st; /* prepared on db */
	int busy;         /* handed out by fsm_prepare, not yet released */
};

/* The most the database may grow to, the same on every member whatever holds it (reserved
 * address space, or SQLite's own buffer with this limit). Past it a write fails
 * (SQLITE_FULL): an entry's commit that fails stops the member. It was SQLite memdb's
 * default, 1 GiB, where the blob store's default limit alone is: a full store stopped every
 * member. 8 GiB of address space costs nothing until touched. */
#define FSM_DB_MAX ((size_t)8 << 30)
/* Commands that create (jobs, checkpoint shards and chunks, builds and their chunks, tokens,
 * nodes, advisories, rollouts) are refused with 507 once the database's pages in use reach
 * FSM_DB_MAX less this: the rest keeps the commands that move what exists (a job's end, a
 * node's state, events) and the ones that make room applying. It must exceed what one raft
 * entry can add (CODEC_MAX_PAYLOAD and the rows it makes). */
#define FSM_DB_HEADROOM ((size_t)512 << 20)
_Static_assert(FSM_DB_MAX >= 4 * (size_t)FSM_BLOB_STORE_MAX_DEFAULT,
               "the blob store's default limit must leave most of the database to jobs");

struct fsm {
	sqlite3 *db;
	/* The database's memory when it lives in an address-space reservation of FSM_DB_MAX
	 * bytes (see open_memdb in fsm.c); NULL when SQLite allocated it. Unmapped after the
	 * connection closes. */
	void *map;
	json_t *last_result; /* result of the latest apply; owned, replaced by the next one */
	uint64_t applies;    /* commands applied by this process (not replicated) */
	uint64_t prepares;   /* statements compiled (cache misses), for tests and metrics */
	struct fsm_stmt_slot stmts[FSM_STMT_CACHE_SLOTS];
	/* Process-local (never replicated) journal of jobs rows touched since the last
	 * fsm_jobs_changed_take, so the leader's scheduler refreshes only what changed. */
	int64_t *changed_jobs; /* rowids, maybe repeated, maybe rolled back */
	int n_changed, cap_changed;
	int changed_all;        /* journal overflowed or the database was replaced: reread all */
	uint64_t changed_since_ns; /* monotonic time of the first change the journal holds */
	uint64_t nodes_version; /* bumped by every change to the nodes table and every restore */
	int64_t *changed_nodes; /* the same journal for the nodes table */
	int n_changed_nodes, cap_changed_nodes;
	int changed_nodes_all;
	/* Process-local: the nodes whose fsm_node_slots may have changed since the last
	 * fsm_slot_nodes_changed_take, by name (kept by SQLite's pre-update hook on the
	 * assignments table: every insert, delete and update of a slot names its node) */
	char (*changed_slot_nodes)[FSM_NAME_MAX + 1];
	int n_changed_slot_nodes, cap_changed_slot_nodes;
	int changed_slot_nodes_all; /* overflowed, restored, or no pre-update hook: every node */
	/* bumped by every change to the checkpoints and checkpoint_restores tables and every
	 * restore: what a cached heartbeat answer (scheduler/leader.c) read of them is stale */
	uint64_t ckpt_version;
	/* bumped by every change to the rollouts table and every restore (the rollout driver
	 * rereads the active rollout for heartbeats only then) */
	uint64_t rollouts_version;
	/* Process-local: the specs of the jobs submitted since the last fsm_jobs_changed_take
	 * (id -> the spec object the command carried) and those of the take before, so the
	 * scheduler reads a new job's row without parsing its spec text again. */
	json_t *submitted, *submitted_taken;
	int keep_submitted;              /* set while this member's scheduler leads (reads them) */
	char submitted_last[FSM_ID_MAX]; /* noted by the command being applied, "" if none */
	int in_batch; /* between fsm_apply_batch_begin and _end: one transaction */
	/* Process-local: the leader's own commands from fsm_command_encode_own to their apply,
	 * oldest first (a ring of FSM_OWN_MAX): apply takes the command object instead of
	 * parsing the text it was printed as. */
	struct fsm_own *own;
	int own_head, own_n;
	uint64_t own_taken; /* applies that used the kept object (for tests and profiles) */
	int verify_own;     /* YARD_FSM_VERIFY_OWN set: parse anyway and abort on a difference */
	int events_pruning; /* fsm_event_append is recording a prune (no second one) */
	/* the setting events_max (0: none) as last read, valid while events_max_known: every
	 * event appended reads it; config.set, a rollback or a restore drops it */
	int64_t events_max;
	int events_max_known;
	/* creating commands are refused at this many bytes of pages in use (fsm_state_bytes):
	 * FSM_DB_MAX - FSM_DB_HEADROOM; lowered only by tests (fsm_set_create_limit), since
	 * every member must judge by the same line */
	size_t create_limit;
	/* bumped by every config.set, rollback and restore: what was read of the config table
	 * may have changed */
	uint64_t config_version;
	/* Process-local: fsm_auth_lookup's answers, valid while auth_version is unchanged
	 * (bumped by every change to the tokens or nodes table and every restore). */
	uint64_t auth_version, auth_cache_version;
	struct fsm_auth_entry *auth_cache; /* open addressing, auth_cache_cap slots */
	int auth_cache_cap, auth_cache_used;
};

int fsm_init(struct fsm *f, struct yard_err *err);
void fsm_close(struct fsm *f);

/* Applies one command. Returns the result, borrowed: valid until the next apply/restore or
 * fsm_close. Never NULL, never a failure of apply itself. */
const json_t *fsm_apply(struct fsm *f, const void *payload, size_t len);

/* Bracket the commands of one raft entry: one transaction for all of them, each command
 * still a savepoint of its own (an error undoes that command only). The commit at _end
 * fails only without memory; the entry's effects are then undone while its results said
 * they happened, so the caller must not go on with this state (non-zero: restart the
 * member, which replays the log). */
void fsm_apply_batch_begin(struct fsm *f);
int fsm_apply_batch_end(struct fsm *f);

/* The leader's variant of fsm_command_encode: while keep_submitted is set (this member's
 * scheduler leads) the command object is kept until the command is applied here, which
 * then uses it instead of parsing the text: the same values in the same order, since the
 * text is the object printed (jsonx_dumps_compact) and is kept only when jsonx_parse would
 * accept it and nothing else holds a reference into the object (nothing can change it
 * before the apply). Followers parse the same bytes. fsm_command_unsent: the text was not
 * submitted after all (the newest kept command, if it is that text, is dropped). */
char *fsm_command_encode_own(struct fsm *f, const char *op, json_t *args, const char *request_id,
                             int64_t ts_ms, const char *actor, const char *role, size_t *len);
void fsm_command_unsent(struct fsm *f, const char *text, size_t len);

/* Builds a command's JSON text (malloc'd, caller frees). Takes ownership of args. */
char *fsm_command_encode(const char *op, json_t *args, const char *request_id, int64_t ts_ms,
                         const char *actor, const char *role, size_t *len);

/* Serialized copy of the database (sqlite3_malloc'd; release with sqlite3_free). */
int fsm_serialize(struct fsm *f, unsigned char **data, size_t *len, struct yard_err *err);
/* The database image itself, not a copy (valid until the next command or restore); -1 when
 * SQLite cannot give it without copying. */
int fsm_image(struct fsm *f, const unsigned char **data, size_t *len);
/* The database's size in bytes: *used, its pages in use (the file less the free pages that
 * deletions left for reuse: what collecting jobs and pruning events bring down); *file, the
 * whole file (what only grows). The same on every member at the same entry, within a batch
 * included. Either pointer may be NULL. 0, or -1 when SQLite cannot say. */
int fsm_state_bytes(struct fsm *f, size_t *used, size_t *file);
/* 1 when the pages in use reach bytes (*used: how many, when counted); the page count is
 * read only when the file, which holds at least the pages in use, reaches it (so this is
 * cheap on every submission or creating command while the state is small). */
int fsm_state_reaches(struct fsm *f, size_t bytes, size_t *used);
/* Tests only: refuse creating commands from this many bytes in use (not replicated: every
 * member of a cluster must keep the default, FSM_DB_MAX - FSM_DB_HEADROOM). */
void fsm_set_create_limit(struct fsm *f, size_t bytes);
/* Replaces the database with a serialized image (copied; the caller keeps data). */
int fsm_restore(struct fsm *f, const void *data, size_t len, struct yard_err *err);
/* sha256 of the serialized database. */
int fsm_digest(struct fsm *f, char hex[SHA256_HEX_LEN + 1], struct yard_err *err);

/* ---- reads (new references; NULL with err->code YARD_ENOTFOUND when absent) ---- */
json_t *fsm_job_get(struct fsm *f, const char *id, struct yard_err *err);
/* {"jobs": [...], "next": id|null}; state may be NULL, after may be NULL. */
json_t *fsm_jobs_list(struct fsm *f, const char *state, const char *after, int limit,
                      struct yard_err *err);
/* {"events": [...], "next": seq|null}; job may be NULL. */
json_t *fsm_events_list(struct fsm *f, int64_t after, int limit, const char *job,
                        struct yard_err *err);
/* The job's own lifecycle events (types job.*: submitted, placed, restarting, ...; not its
 * checkpoints) after seq `after`, in the shape of fsm_events_list (jobs/timeline.h reads
 * them). */
json_t *fsm_job_story(struct fsm *f, const char *job, int64_t after, int limit,
                      struct yard_err *err);
/* The newest n events after seq `after` (of job, when not NULL), oldest first, in the same
 * shape; "next" is null: none is newer. */
json_t *fsm_events_newest(struct fsm *f, int64_t after, int n, const char *job,
                          struct yard_err *err);
/* The audit log: events made by principals (every committed change names its actor; the
 * leader's own "scheduler" and "yardd" commands are left out) and embargoed reads (type
 * audit.read); reads_only keeps only the latter. {"events": [...], "next": seq|null}. */
json_t *fsm_audit_list(struct fsm *f, int64_t after, int limit, int reads_only,
                       struct yard_err *err);
/* Recomputes the event hash chain; fails naming the first event that does not verify. */
int fsm_events_verify(struct fsm *f, struct yard_err *err);
/* [{"rank","node","device","generation"}...] of a job's latest placement, by rank. */
json_t *fsm_job_layout(struct fsm *f, const char *id);
/* How many times the job's stragglers were replaced (its job.replacing events), -1 on error. */
int64_t fsm_job_replacements(struct fsm *f, const char *id);
/* Jobs that are pending, running or restarting, in submission order, each with its "seq". */
json_t *fsm_jobs_active(struct fsm *f);
/* The rowids of those jobs, in the same order (malloc'd; *n of them); NULL: no memory. */
int64_t *fsm_jobs_active_rowids(struct fsm *f, int *n);
/* [{"job","rank","node","device","generation"}...]: every slot of every running job. */
json_t *fsm_running_slots(struct fsm *f);
/* Values of the nodes.cordoned column: a drain is a cordon that also moves the node's ranks
 * away (the scheduler restarts their jobs elsewhere); "drained" once none is left. The
 * column keeps its name and type so older snapshots restore unchanged. */
enum {
	FSM_NODE_SCHEDULABLE = 0,
	FSM_NODE_CORDONED = 1,
	FSM_NODE_DRAINING = 2,
	FSM_NODE_DRAINED = 3
};
/* A slot of a running job on a node, with the job's current generation. */
struct fsm_slot {
	char job[FSM_ID_MAX];
	int64_t rank, generation;
};
/* The slots of running jobs on one node, by job and rank (every heartbeat reads them: C, not
 * JSON). Returns how many, with *slots malloc'd (NULL when none; the caller frees it), or -1
 * when they could not be read (no memory): never "none" for a failed read. */
int fsm_node_slots(struct fsm *f, const char *node, struct fsm_slot **slots);
/* Nodes without their token hashes: [{"id","state","host","port_base","devices","labels",
 * "version","cordoned","drain","registered_ms","updated_ms","reason"}...] by id; "drain" is
 * "draining", "drained" or null. */
json_t *fsm_nodes_list(struct fsm *f, struct yard_err *err);
json_t *fsm_node_get(struct fsm *f, const char *id, struct yard_err *err);
/* The node whose current node token hashes to hash_hex. */
int fsm_node_token_lookup(struct fsm *f, const char *hash_hex, char name[FSM_NAME_MAX + 1],
                          struct yard_err *err);
json_t *fsm_tokens_list(struct fsm *f, struct yard_err *err);
int fsm_tokens_count(struct fsm *f);
/* The principal of a request's bearer token by the sha256 hex of its secret: an unrevoked
 * API token (its role and name) or a node's current token (role "node", the node's name).
 * Answers are remembered until a token or a node changes, so the heartbeats of thousands of
 * nodes cost no SQL each; an unknown hash is looked up every time. */
int fsm_auth_lookup(struct fsm *f, const char *hash_hex, int64_t now_ms, char role[16],
                    char name[FSM_NAME_MAX + 1], struct yard_err *err);
#define FSM_AUTH_CACHE_MAX 65536 /* principals remembered; past it the cache starts over */
/* Looks up an unrevoked token by the sha256 hex of its secret: 0 (its expiry, 0 for none, in
 * *expires_ms when not NULL), YARD_ENOTFOUND, or YARD_EPERM with err naming the token and
 * when it expired (now_ms: the wall clock; a token works while now_ms < its expires_ms). */
int fsm_token_lookup(struct fsm *f, const char *hash_hex, int64_t now_ms, char role[16],
                     char name[FSM_NAME_MAX + 1], int64_t *expires_ms, struct yard_err *err);
#define FSM_TOKEN_TTL_MAX_S 315360000 /* ttl_s at most 10 years */
/* [{"id","raft_address","api_url","role"}...] ordered by id. */
json_t *fsm_members_list(struct fsm *f, struct yard_err *err);
/* The API URL of member id into url; YARD_ENOTFOUND if unknown. */
int fsm_member_api_url(struct fsm *f, uint64_t id, char *url, size_t url_len);
/* Jobs touched since the previous call: *rowids (borrowed until the next apply) and *n.
 * Returns 1 instead when the caller must reread every job (first call, after a restore,
 * or when more than FSM_CHANGED_MAX changes piled up unread, as on a follower). */
#define FSM_CHANGED_MAX 65536
int fsm_jobs_changed_take(struct fsm *f, const int64_t **rowids, int *n);
/* The spec of job id if it was submitted on this member since the take before the last
 * fsm_jobs_changed_take (borrowed, valid until the next take, apply or restore), else NULL.
 * The same object the job.submit command carried: what the jobs row stores as text. Kept
 * only while keep_submitted is set (the leader's scheduler sets it while it leads), so a
 * follower holds none. */
const json_t *fsm_submitted_spec(const struct fsm *f, const char *id);
#define FSM_SUBMITTED_MAX 4096 /* specs kept unread (a follower): past it, forget them */
/* Whether fsm_jobs_changed_take would report anything. */
int fsm_jobs_changed_pending(const struct fsm *f);
/* When (yard_now_mono_ns) the oldest change fsm_jobs_changed_take would report was applied
 * on this member; 0 when there is none or the whole table changed (a restore). */
uint64_t fsm_jobs_changed_since_ns(const struct fsm *f);
/* The job with this rowid, shaped like an element of fsm_jobs_active; NULL if none. */
json_t *fsm_job_by_rowid(struct fsm *f, int64_t rowid);
/* The same, with the spec of a job the caller has read before taken from known(data, id)
 * (borrowed; NULL: parse the stored text): a spec never changes after submission, so a
 * row that changed (a state, an assignment) costs no new parse of it. */
json_t *fsm_job_by_rowid_known(struct fsm *f, int64_t rowid,
                               const json_t *(*known)(void *data, const char *id), void *data);
/* The same journal for the nodes table, and a node by rowid (as fsm_nodes_list shows it). */
int fsm_nodes_changed_take(struct fsm *f, const int64_t **rowids, int *n);
/* Whether fsm_nodes_changed_take would report anything. */
int fsm_nodes_changed_pending(const struct fsm *f);
json_t *fsm_node_by_rowid(struct fsm *f, int64_t rowid);
/* The nodes whose slots (fsm_node_slots) may differ from what they were at the previous
 * call: *names (borrowed until the next apply, take or restore) and *n, maybe repeated.
 * Returns 1 instead when every node's may (first call, after a restore, past
 * FSM_CHANGED_MAX names unread, or an SQLite built without the pre-update hook), so a
 * cache of fsm_node_slots kept by the names is never stale. A node's slots change only
 * through its assignments rows (a job's state reaches them by the assignments_running
 * trigger, its generation only with new rows), which the hook sees. */
int fsm_slot_nodes_changed_take(struct fsm *f, const char (**names)[FSM_NAME_MAX + 1], int *n);

/* Integer setting from the replicated config table (default when unset). */
int64_t fsm_config_get(struct fsm *f, const char *key, int64_t dflt);
/* Ids of ended jobs that ended before before_ms and have no complete checkpoint, oldest
 * submissions first, at most max (<= FSM_COLLECT_MAX), among the first max ended jobs of each
 * state without one: a new array, or NULL on failure. The leader's proposal of jobs.collect. */
json_t *fsm_jobs_collectable(struct fsm *f, int64_t before_ms, int max);

/* ---- builds and the blob store (fsm_store.c) ---- */
/* [{"version","component","sha256","size","notes","advisory","state","created_ms",
 * "updated_ms","actor","chunks","chunks_received"}...], oldest first, unredacted: callers
 * apply the embargo rules (fsm_advisory_restricted, fsm_advisory_visible). */
json_t *fsm_builds_list(struct fsm *f, struct yard_err *err);
json_t *fsm_build_get(struct fsm *f, const char *version, struct yard_err *err);
/* A blob's bytes, chunks concatenated (malloc'd, caller frees). */
int fsm_blob_read(struct fsm *f, const char *owner_kind, const char *owner_id, unsigned char **data,
                  size_t *len, struct yard_err *err);

/* ---- checkpoints of the "controller" store (fsm_ckpt.c) ---- */
/* [{"step","world","generation","shards" (stored),"bytes","complete","ts_ms"}...] by step. */
json_t *fsm_checkpoints_list(struct fsm *f, const char *job, struct yard_err *err);
/* Step of the job's newest complete checkpoint, -1 when none. */
int64_t fsm_checkpoint_newest(struct fsm *f, const char *job);
/* The world size (ranks) of a checkpoint of the controller store; -1: no such checkpoint. */
int64_t fsm_checkpoint_world(struct fsm *f, const char *job, int64_t step);
/* The step the ranks of job's generation restore (named by its job.assign), -1 when none. */
int64_t fsm_checkpoint_restore_step(struct fsm *f, const char *job, int64_t generation);
/* Size and sha256 of a stored shard of a complete checkpoint; YARD_ENOTFOUND otherwise. */
int fsm_checkpoint_shard_info(struct fsm *f, const char *job, int64_t step, int64_t rank,
                              int64_t *size, char sha256[SHA256_HEX_LEN + 1], struct yard_err *err);
/* A shard's bytes (malloc'd, caller frees). */
int fsm_checkpoint_shard_read(struct fsm *f, const char *job, int64_t step, int64_t rank,
                              unsigned char **data, size_t *len, struct yard_err *err);

/* ---- advisories and embargo rules (fsm_advisory.c) ---- */
/* [{"id","title","cve","severity","state","embargo_start_ms","embargo_until_ms",
 * "published_ms","visibility","text","timeline","created_ms","actor"}...], unredacted. */
json_t *fsm_advisories_list(struct fsm *f, struct yard_err *err);
json_t *fsm_advisory_get(struct fsm *f, const char *id, struct yard_err *err);
/* ids of embargoed advisories whose deadline is at or before now_ms (the leader publishes
 * them). */
json_t *fsm_advisories_due(struct fsm *f, int64_t now_ms);
int fsm_advisory_exists(struct fsm *f, const char *id);
/* 1 while advisory id exists and is not public (reported or embargoed). */
int fsm_advisory_restricted(struct fsm *f, const char *id);
/* 1 when principal name with role may see advisory id's content: it is public, or role is
 * admin or security, or the visibility list names the role or the principal. */
int fsm_advisory_visible(struct fsm *f, const char *id, const char *name, const char *role);

/* ---- rollouts (fsm_rollout.c) ---- */
/* {"id","build","state","wave","phase","phase_since_ms","failures","spec","waves","nodes",
 * "reason","actor","created_ms","updated_ms"}; wave is 0-based into waves. */
json_t *fsm_rollout_get(struct fsm *f, const char *id, struct yard_err *err);
json_t *fsm_rollouts_list(struct fsm *f, struct yard_err *err); /* oldest first */
/* The one rollout that is pending, running, paused or rolling back, or NULL. */
json_t *fsm_rollout_active(struct fsm *f);
int fsm_rollout_state_active(const char *state);
/* Parses a wave's target, "12" (nodes, 1..4096) or "40%" (1..100): 0 with the number and
 * whether it is a percentage, or -1. */
int fsm_wave_target_parse(const char *s, int64_t *count, int *percent);
/* Whether the active rollout assigns build version to node (it is upgrading or upgraded to
 * it): such a node may download the build while its advisory is embargoed. */
int fsm_build_assigned_to_node(struct fsm *f, const char *version, const char *node);

/* The field a jsonx/jobspec error names ("parallel.tp: ..." → "parallel.tp"), or "". */
void fsm_err_field(const struct yard_err *e, char *field, size_t field_len);

/* Roles, as stored in tokens.role. */
int fsm_role_valid(const char *role);

#endif
