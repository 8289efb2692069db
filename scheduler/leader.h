/* leader.h: the scheduler and failure detector that run on the raft leader only.
 *
 * Soft state lives here, in the leader's memory, and is never replicated: when each node
 * was last heard, the ranks it reports (pid, state, exit code, step, loss), the rates it
 * measured at start ("perf": every heartbeat repeats them, so a new leader has them within
 * one heartbeat; only the plan a job gets from them is committed), queue positions and
 * pending reasons. Only decisions are committed, through sched_io.propose: node state
 * changes (up → suspect → down), placements (job.assign: rank → node/device, generation),
 * restarts, finishes and the notes that make a job's events tell its story. Agents learn
 * their ranks from heartbeat answers computed from committed placements, so nothing an
 * agent runs was not committed first.
 *
 * A tick (every tick_ms) does four things:
 *  1. node health: silence ≥ suspect_ms → suspect, ≥ down_ms → down (committed); a new
 *     leader counts silence from the moment it became leader, so every node gets one full
 *     grace period after a failover;
 *  2. running jobs: a rank on a down node, a rank that exited non-zero (or whose exit the
 *     agent could not observe), a rank without step progress for failure.hang_timeout_s
 *     (trainer jobs always; command jobs once they report steps) → job.restart, which
 *     fails the job once failure.max_restarts is used up; every rank of the generation
 *     exited 0 → job.finish succeeded;
 *  3. stragglers: the window summaries in rank reports feed the job's detector
 *     (straggler.h); a flagged rank becomes soft state (job "stragglers", rank "straggler",
 *     /metrics) and a job.note (policy "report"), or a job.replace that cordons its node and
 *     restarts the job elsewhere (policy "replace", at most max_replacements times);
 *  4. placement: pending jobs, and restarting jobs whose old ranks are confirmed stopped
 *     and whose back-off has passed, go through queue_pass (scheduler/queue.h) over the
 *     free devices of up, uncordoned nodes; each placed gang is proposed as job.assign.
 *     A submission that finds the queue empty is placed as it is proposed, in the same
 *     raft entry (sched_submit_begin, below).
 * Drains: a running job with a rank on a draining node restarts (job.restart with "drain":
 * not counted against max_restarts) and is placed elsewhere like any restart; a draining
 * node that runs no rank any more (no running slot, no running rank in its reports) is
 * proposed as node.drained.
 * Rank output arrives with heartbeats and is kept in a logstore (scheduler/logstore.h); every
 * answer carries this leadership's "leader_id" so agents notice a new leader and send their
 * logs' tails again.
 * One proposal per job or node is in flight at a time; the state machine re-checks every
 * decision (a device is never given twice, a stale generation is refused). */
#ifndef YARD_SCHED_LEADER_H
#define YARD_SCHED_LEADER_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "common/err.h"
#include "jobs/fsm.h"

/* The scheduler's proposals under way at once, at most (about: a pass that starts below it
 * proposes every placement it made). A deep pass that found 16,000 free devices for 60,000
 * pending jobs proposed 16,000 placements and 44,000 "waiting" notes in one go: every
 * member then spent seconds appending and applying them, past the election timeout, and
 * leadership changed a dozen times in 25 s. Placements, notes and the look at a running
 * job's news beyond it wait for the passes that the commits bring (each changes a job). */
#define SCHED_IN_FLIGHT_MAX 512

struct sched_config {
	uint64_t tick_ms;                /* default 100 */
	uint64_t kick_min_ms;            /* a committed job change runs a pass at once, at most
	                                  * this often (between ticks); default 20 */
	uint64_t node_suspect_ms;        /* default 1500 */
	uint64_t node_down_ms;           /* default 3000 */
	/* added to both while a node's agent said it is restarting into a new build (its last
	 * heartbeat before the exec): the new binary's start-up is not a dead node; default
	 * 10000, 0: none */
	uint64_t node_restart_grace_ms;
	uint64_t restart_backoff_ms;     /* the first restart is immediate, the 2nd waits this long,
	                                  * doubling after that; default 500 */
	uint64_t restart_backoff_max_ms; /* default 30000 */
	int auto_grow_pct;               /* an "auto" job that could have more devices grows only
	                                  * to a plan predicted at this % of its running plan's
	                                  * step time or less (check_auto_grow_back); default 80 */
	uint64_t preempt_after_ms;       /* a job waiting this long for devices preempts running
	                                  * jobs of lower priority (preempt_choose); 0: never,
	                                  * the default */
	uint64_t stop_wait_ms;           /* how long a restart waits for old ranks to stop, 10000 */
	uint64_t reserve_after_ms;       /* queue anti-starvation (queue.h), default 60000 */
	int queue_depth;                 /* pending jobs a pass triggered by a change looks at
	                                  * (queue.h max_attempts); a pass at least once a second
	                                  * looks at all; 0 = all in every pass; default 100 */
	int max_active_jobs;             /* submissions refused while about this many jobs are
	                                  * pending, running or restarting (sched_admit);
	                                  * 0 = no bound; default 100000 */
	uint64_t max_state_mb;           /* submissions refused while the replicated state (the
	                                  * state machine's database, its pages in use) holds
	                                  * this many MiB or more (sched_admit); 0 = no bound;
	                                  * default 7/8 of FSM_DB_MAX, below the state
	                                  * machine's own line (FSM_DB_HEADROOM) */
	/* the node label whose value is a node's topology domain (its switch, rack or NVLink
	 * domain): a gang goes into one domain when one has room (place.h, Topology); default
	 * "switch", "": none */
	char topology_label[64];
	size_t log_rank_max_bytes;       /* rank output kept per (job, rank), default 1 MiB */
	size_t log_total_max_bytes;      /* rank output kept in all, default 64 MiB */
};

void sched_config_defaults(struct sched_config *cfg);

typedef void (*sched_done_cb)(void *cb_data, int status, const json_t *result);

/* How the scheduler reaches raft, injected so it can be driven by tests. */
struct sched_io {
	void *data;
	/* Replicates a command (args stolen). 0: done will be called once with status 0 and
	 * the FSM result, or a YARD_E* error; non-zero: refused now, done not called. */
	int (*propose)(void *data, const char *op, json_t *args, sched_done_cb done, void *cb_data);
	/* Whether this member is the ready leader. */
	int (*is_ready)(void *data);
	/* Index of the last applied entry (a change means the replicated state changed). */
	uint64_t (*applied_index)(void *data);
	/* Sends what was proposed so far on its way before a pass holds the loop (NULL: none). */
	void (*flush)(void *data);
	/* Clocks; NULL means the real ones (tests drive time themselves). */
	uint64_t (*mono_ms)(void *data);
	int64_t (*wall_ms)(void *data); /* the clock commands are stamped with */
};

struct sched;

struct sched *sched_create(uv_loop_t *loop, struct fsm *fsm, const struct sched_config *cfg,
                           const struct sched_io *io);
void sched_destroy(struct sched *s);
/* This member became the ready leader: soft state starts empty and the grace period of
 * every node starts now. */
void sched_leader_up(struct sched *s);
/* Leadership lost: soft state is dropped; in-flight proposals are ignored when they end. */
void sched_leader_down(struct sched *s);

/* One pass of the work described above (the timer's; tests call it directly). */
void sched_tick(struct sched *s);

/* A heartbeat from node (already authenticated as that node). Records the soft state and
 * the pieces of rank output it carries, and returns the answer {"desired": [...],
 * "commands": [{"op": "drain"}?], "leader_id": "...", "upgrade"?: {...}} (new reference;
 * "upgrade" is an offer of the rollout driver, scheduler/rollout.h), or NULL with err
 * (YARD_EINVAL naming the field of a malformed body, YARD_EPERM for another node's name);
 * a malformed body stores nothing. */
json_t *sched_heartbeat(struct sched *s, const char *node, const json_t *body,
                        struct yard_err *err);
/* The same answer as JSON text (malloc'd, *len bytes, caller frees), with the entries of
 * running jobs copied from text kept with the scheduler's cache of them instead of
 * serialized for every heartbeat; NULL with err as above (YARD_ENOMEM without memory). */
char *sched_heartbeat_text(struct sched *s, const char *node, const json_t *body, size_t *len,
                           struct yard_err *err);

/* Adds soft state to API objects on the leader: a job gets "position" and the current
 * pending "reason" while it waits, "step"/"loss" from the latest heartbeats and "ranks"
 * (per-rank pid, state, step); a node gets "last_heartbeat_ms_ago", "ranks" and
 * "free_devices". Without soft state (a follower, or nothing heard) objects are unchanged. */
void sched_overlay_job(struct sched *s, json_t *job);
/* A waiting job (pending or restarting) gets "estimate", a sentence on when it may start and
 * why, and "estimated_start_ms" (wall clock) when there is an estimate (scheduler/eta.h):
 * the queue played forward from the running jobs' expected ends. Costs up to tens of ms on
 * a large cluster: for a single job's GET, not for lists. */
void sched_overlay_estimate(struct sched *s, json_t *job);
/* POST /v1/jobs/ID/checkpoint: asks the ranks of running job id for a checkpoint now, as a
 * planned restart does but without one (a user only of their own jobs: actor, role). The
 * answer: {"id", "generation", "request", "step" (the latest reported, -1: none yet),
 * "newest_step" (the newest complete checkpoint when asked, -1: none)}; while the request
 * rides on heartbeat answers (10 minutes) the job's overlay shows "checkpoint_request" with
 * its newest complete step. NULL with err: ENOTFOUND, EPERM, EBUSY (not running),
 * ENOTLEADER. */
json_t *sched_checkpoint_now(struct sched *s, const char *id, const char *actor, const char *role,
                             struct yard_err *err);
/* The job's per-step history ({"job", "generation", "steps": [...]}, scheduler/history.h),
 * empty steps when none was recorded; NULL when this member is not the leader (followers
 * keep no soft state). batch_size > 0 adds samples_per_s. */
json_t *sched_job_metrics(struct sched *s, const char *job, int64_t after_step, int limit,
                          int64_t batch_size);
/* An agent's long-poll for work: cb(data, 0, version) once the node's desired set may have
 * changed since version (a placement on the node, or the end, restart or move of a job
 * with ranks there), at once when version is not the node's current one (-1: unknown; a
 * version of another leadership never is), or after wait_ms with the unchanged version;
 * cb(data, YARD_ENOTLEADER, 0) when leadership is lost first. A new watch of the node
 * answers the previous one. A new version tells the agent to heartbeat now, whose answer
 * carries the desired set, or comes with that set (sched_watch_desired_text). Non-zero (cb
 * not called): not leading, or no memory. */
typedef void (*sched_watch_cb)(void *data, int status, uint64_t version);
int sched_node_watch(struct sched *s, const char *node, int64_t version, uint64_t wait_ms,
                     sched_watch_cb cb, void *data, struct yard_err *err);
/* The answer of a watch that asked for the desired set, as JSON text (malloc'd, *len bytes,
 * caller frees): {"version": V, "desired": [...], "desired_tag"?, "desired_shared"?,
 * "leader_id"}, V the node's version now, which the set is as of (heartbeat answers say
 * theirs as "desired_version", so that an agent keeps the newer of the two); "desired" is
 * "desired_unchanged": true when their_tag names the set, as in a heartbeat answer. NULL
 * with err: not leading (YARD_ENOTLEADER), a node this leader never heard of
 * (YARD_ENOTFOUND), no memory. Nothing of the node's soft state changes. */
char *sched_watch_desired_text(struct sched *s, const char *node, const char *their_tag,
                               int shared_ok, size_t *len, struct yard_err *err);
/* 1 while the node's next heartbeat answer brings something its watch does not (a drain
 * command, a rollout's offer): watch answers then say "heartbeat": true. */
int sched_node_nudged(struct sched *s, const char *node);
/* Asks node's agent to measure the node's rates again (yardctl node probe): a "probe"
 * command with a new request number (*request) rides on its next PERF_ASK_ANSWERS heartbeat
 * answers, and its watch is answered so that it heartbeats at once; the agent probes as soon
 * as no rank runs there, and its next heartbeat brings the new rates. Soft state: a new
 * leader does not know of it. -1 with err: not leading (YARD_ENOTLEADER), no such node
 * (YARD_ENOTFOUND), the node down (YARD_EBUSY). */
int sched_node_probe(struct sched *s, const char *node, int64_t *request, struct yard_err *err);

/* The id of an active job that waits for job id (spec "after") into out, 1; 0 when none
 * does (or this member does not lead: its soft jobs are not kept). Ended jobs waited for
 * are neither deleted (the API refuses) nor collected (job_retention_s) meanwhile: a new
 * leader would take one gone for one that did not succeed. */
int sched_job_awaited_by(struct sched *s, const char *id, char *out, size_t out_len);
/* 1 when this leader heard the node's agent less than node_suspect_ms ago (*ago_ms says
 * when); 0 when not, or not since it leads. */
int sched_node_live(struct sched *s, const char *node, int64_t *ago_ms);
/* How long after its last heartbeat a node is declared down (--node-down-ms, or 6 of the
 * heartbeat interval asked of agents when that is longer). */
uint64_t sched_node_down_ms(struct sched *s);
/* While leading, how this leader paces and judges heartbeats (new reference): {"nodes",
 * "max_heartbeats_per_s", "heartbeat_min_ms", "node_suspect_ms", "node_down_ms",
 * "node_restart_grace_ms"}; NULL when not leading. */
json_t *sched_heartbeat_pace(struct sched *s);

/* Whether a new job may be submitted now: 0; -1 with why (for a 429) when the cluster
 * holds max_active_jobs active jobs or more; -2 with why (for a 507) when the replicated
 * state's pages in use hold max_state_mb or more (fsm_state_bytes; ended jobs collected and
 * events pruned make room; the state machine itself refuses creating commands from
 * FSM_DB_MAX - FSM_DB_HEADROOM, so no write reaches FSM_DB_MAX). The count of active jobs is the
 * leader's as of its last pass (at most a tick old) plus the submissions in flight then and those
 * admitted since. Every active job lives in the leader's memory
 * and is looked at by a pass at least once a second; the bound keeps those passes, and the reread
 * after a leadership change, short enough for the leader to keep its loop answering raft. why_len:
 * 320 bytes hold every message. */
int sched_admit(struct sched *s, char *why, size_t why_len);

/* Placement at submission. When nothing waits in the queue and the leader's view of the free
 * devices (built by the last pass, less what was placed since) holds the job, its placement
 * travels in the submission's own raft entry (job.submit's "place": the FSM inserts the job,
 * then assigns it as job.assign would, or leaves it pending if that assignment is refused),
 * so submit -> placed is one commit instead of two and a pass between them. Every submission
 * the leader proposes goes through sched_submit_begin, which returns a token (0: not the
 * leader) and, when it placed the job, its ranks (new reference; NULL: the job goes through
 * the queue as before); sched_submit_done reports how the proposal ended (status 0: applied,
 * result its FSM result). Placed devices stay claimed until then. */
struct jobspec;
json_t *sched_submit_begin(struct sched *s, const struct jobspec *spec, uint64_t *token);
void sched_submit_done(struct sched *s, uint64_t token, int status, const json_t *result);

/* Soft jobs dropped with a leadership and not released yet (they go GRAVE_CHUNK per loop
 * iteration, so that dropping a deep queue does not hold the loop). */
int sched_jobs_dropping(const struct sched *s);
void sched_overlay_node(struct sched *s, json_t *node);
/* Adds each target node's live version and upgrade state to a rollout (fsm_rollout_get). */
void sched_overlay_rollout(struct sched *s, json_t *rollout);

/* Appends the scheduler's Prometheus metrics (stragglers) to f. */
void sched_metrics_render(struct sched *s, FILE *f);
/* Rank output of a job, from the leader's memory (docs/api.md, GET /v1/jobs/{id}/logs).
 * rank < 0: the index {"job", "streams": [...]}; else up to max_bytes of (rank, generation)
 * from offset, generation < 0 meaning the newest held, offset < 0 meaning the first byte
 * held: {"job","rank","generation","node","offset","skipped","next_offset","first_offset",
 * "end_offset","data"}. Until node_down_ms after this member became leader, bytes missing
 * before what is held are waited for (no data, next_offset = offset) rather than skipped:
 * agents are still resending. NULL with err: YARD_ENOTLEADER when this member is not
 * leading, YARD_ENOTFOUND when no output of that rank is held. */
json_t *sched_job_logs(struct sched *s, const char *job, int rank, int64_t generation,
                       int64_t offset, size_t max_bytes, struct yard_err *err);

/* POST /v1/plan: plans a job spec (JSON as submitted) for the cluster as this leader sees it
 * (committed nodes + the rates their heartbeats carry, "perf"); autoplan_run's answer with
 * the best `limit` candidates (all when ≤ 0). NULL with err: a bad spec (YARD_EINVAL naming
 * the field), nothing measured or nothing fits (YARD_ENOSPACE), not the leader. */
json_t *sched_plan(struct sched *s, const json_t *spec, int limit, struct yard_err *err);

#endif
