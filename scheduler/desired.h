/* desired.h: what one rank of a placed job is told to run: the "desired" entry of a
 * heartbeat answer (docs/api.md, agent protocol), built from committed state only.
 *
 * Pure functions over the replicated rows (a job, its slots, the nodes), so every member
 * computes the same answer for the same state and tests can check the environment without
 * a cluster. The environment is torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT) plus trainyard's YARD_* variables; rank r
 * on node N listens on N.host:(N.port_base + device). */
#ifndef YARD_SCHED_DESIRED_H
#define YARD_SCHED_DESIRED_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The checkpoint directory of a job whose store is "dir:/p": /p/JOB. Returns 0, or -1 for
 * the "controller" store, whose directory is node-local (the agent's data dir) and whose
 * checkpoints are the controller's records (jobs/fsm_ckpt.c). */
int desired_ckpt_dir(const char *store, const char *job, char *out, size_t out_len);

/* The desired entries of every rank of `job` (a job object as fsm_job_get returns it, with
 * its "spec" and "generation"; for a parallel "auto" job its "plan", whose layout replaces
 * "auto" in the spec the ranks get). slots: the job's slots, slots[r] = {"node","device"} for
 * every rank r in order. nodes: {"node-id": {"host","port_base","devices"}...} for at least
 * the nodes in slots. restore_step: for the "controller" store, the complete checkpoint this
 * generation restores (-1: none). Returns a new array whose element r is rank r's object
 * {"job","rank","generation","world_size","device","kind","env","argv","spec"} plus, for
 * the controller store, "checkpoint": {"store": "controller", "restore_step"} (the agent then
 * sets YARD_CKPT_DIR and, with YARD_RESUME=1, downloads the shards first; the leader adds the
 * checkpoint's "restore_world"), or NULL when the rows are inconsistent. A job running with
 * a shrunk dp ("effective", failure.allow_shrink_dp) gets the spec of that dp
 * (jobspec_with_dp). The entries share their "argv" and "spec" objects (one job's ranks run
 * the same spec): treat them as read-only. NODE_RANK is the index of the rank's node among
 * the job's nodes in order of first appearance. Linear in the ranks: a job's peer list is
 * built once, not once per rank. common_env (optional): set to the environment every rank
 * starts from (new reference); a rank's "env" holds these same value objects except for the
 * keys it sets itself. */
json_t *desired_job(const json_t *job, const json_t *slots, const json_t *nodes,
                    int64_t restore_step, json_t **common_env);

/* The same entries as text, what a heartbeat answer carries: {"heads": [...], "tail": "...",
 * "shared": "...", "close": "..."} where heads[r] + tail is the JSON text of rank r's entry
 * (the members of desired_job's entry r, with equal values; restore_world, for a restore
 * from the controller store, goes into "checkpoint" as the leader adds it). A head is the
 * entry up to the rank's own variables (the ones it sets itself; one that any rank sets is in
 * every rank's head); the tail, the same for every rank, holds the shared variables and the
 * spec. For an agent that takes shared parts, heads[r] + close is the entry without them,
 * ending in "shared": the job's id, and shared is the JSON text of {"env": {the shared
 * variables}, "spec": ...}, sent once per answer whatever the number of the job's ranks on
 * the node (docs/api.md). Built straight as text: a 10,000-node leader spent a fifth of its
 * time building these entries as JSON objects first. NULL when the rows are inconsistent or
 * memory ran out. */
json_t *desired_job_text(const json_t *job, const json_t *slots, const json_t *nodes,
                         int64_t restore_step, int64_t restore_world);

/* What an agent makes of an answer's "desired" (array) and "desired_shared" (object, may be
 * NULL): every entry whole, an entry that names its job's part ("shared": JOB) given that
 * part's variables (where it does not set them itself) and spec; the values are shared with
 * the answer, not copied. A new array, or NULL with why set when an entry names a part the
 * answer does not hold whole. */
json_t *desired_whole(const json_t *desired, const json_t *parts, char *why, size_t why_len);

/* Whether an answer's desired set, computed by leader `leader` at news version `version`,
 * is older than the one an agent applied (kept_leader at kept_version): only a set of the
 * same leader with a lower version is (a new leader's versions start afresh, and an answer
 * without a leader or version (-1), an older controller's, is never judged stale). A
 * heartbeat answer and a watch answer computed in one order can arrive in the other; the
 * older would stop ranks the newer just started. */
int desired_stale(const char *kept_leader, int64_t kept_version, const char *leader,
                  int64_t version);

#endif
