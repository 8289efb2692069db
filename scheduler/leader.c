/* leader.c: the leader's scheduler and failure detector (see leader.h for what a tick
 * does). Soft state is two small tables, nodes and jobs, keyed by id; proposals refer to
 * their entry by id, so the tables may grow while a proposal is in flight. */
#include "scheduler/leader.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#include <sys/stat.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/common.h"
#include "common/grow.h"
#include "common/hist.h"
#include "common/jsonx.h"
#include "jobs/spec.h"
#include "scheduler/autoplan.h"
#include "scheduler/desired.h"
#include "scheduler/eta.h"
#include "scheduler/history.h"
#include "scheduler/idindex.h"
#include "scheduler/logstore.h"
#include "scheduler/queue.h"
#include "scheduler/rollout.h"
#include "scheduler/straggler.h"

#define REPORTS_MAX 256           /* rank reports (and log pieces) in one heartbeat */
#define LOG_PIECE_MAX (256 << 10) /* raw bytes of one log piece (an agent sends ≤ 64 KiB) */
#define WINDOWS_MAX 8             /* window summaries in one rank report (agents send 4) */
#define PENDING_NOTES 8           /* straggler notes waiting for the job's proposal slot */
/* An asked link probe counts as under way this long (an agent gives up on one after 10 s):
 * neither end takes part in another one meanwhile, and a probe that failed is asked again
 * only after it. */
#define LINK_PROBE_WAIT_MS 20000
#define LINK_PROBE_SCAN 64 /* rows of the node table one heartbeat looks at for a peer */
#define CHECK_ALL_MS 1000  /* every running job is looked at at least this often */

/* A rank report (clean_reports' form) as a running job's check reads it. */
struct report_key {
	int64_t rank, generation;
	const char *job; /* the report's, valid while the report lives */
	const json_t *report;
	int exited; /* state "exited" (else "running") */
	int has_loss;
	int64_t exit_code, signal, step, last_step_ms_ago;
	double loss;
};

/* A row of the nodes list as the health check reads it: its soft node (index) and the row's
 * id and state (strings of the row: valid while nodes_list holds it). */
struct health_row {
	int node;
	const char *id, *state;
};

/* A checkpoint request for the ranks of a job's generation on one node (checkpoint_first). */
#define CKPT_ASKS_PER_NODE 4
/* a planned restart's checkpoint request, answered or timed out, serves a retry of that restart
 * this long; a request no restart took is forgotten this long after its time was up */
#define CKPT_TAKEN_MS 10000
/* a request to measure a node's rates again rides on this many heartbeat answers (the agent
 * takes a request number once) */
#define PERF_ASK_ANSWERS 3
struct ckpt_ask {
	char job[FSM_ID_MAX];
	int64_t generation, request;
};

struct soft_node {
	char id[FSM_NAME_MAX + 1];
	uint64_t last_seen_ms;   /* monotonic; 0: not heard since this member became leader */
	uint64_t known_since_ms; /* when this leader first saw the node's row (a registration) */
	json_t *ranks;           /* the latest validated rank reports (owned) */
	/* what report_find compares of each of ranks' reports, in their order: a running
	 * job's check finds its ranks' reports without JSON lookups (owned) */
	struct report_key *report_keys;
	int n_report_keys;
	char version[32];
	char worker_version[32]; /* the yard-worker build the node starts ranks with */
	int64_t free_disk_mb;
	json_t *perf;  /* the rates the agent measured (autoplan_perf_clean), NULL: none yet */
	int proposing; /* a node.set_state is in flight */
	/* its latest heartbeat said the agent execs a new build next ("upgrade": state
	 * "restarting" from the binary it replaces): silence is judged with
	 * node_restart_grace_ms more until the next heartbeat */
	int restarting;
	/* something rides on its next heartbeat answer that its watch does not carry (a drain
	 * command, an upgrade or rollback offer): watch answers say "heartbeat" until it comes */
	int nudge;
	/* link probes (link_probe_for): the port the agent's probe server listens on (0: none);
	 * the peer this node was last asked to measure its link to, when; and the node last
	 * asked to measure its link to this one, when */
	int probe_port;
	/* the operator asked for its rates to be measured again (sched_node_probe): the request
	 * number, and how many heartbeat answers have carried it (PERF_ASK_ANSWERS at most) */
	int64_t perf_request;
	int perf_request_sent;
	char probe_peer[FSM_NAME_MAX + 1];
	uint64_t probe_asked_ms;
	char probed_by[FSM_NAME_MAX + 1];
	uint64_t probed_since_ms;
	/* the agent's watch (sched_node_watch): changes of the node's desired set this leader
	 * saw, and the watch waiting for the next one (NULL cb: none; watch_pos is its index
	 * in s->watching) */
	uint64_t news;
	sched_watch_cb watch_cb;
	void *watch_data;
	uint64_t watch_deadline_ms;
	int watch_pos;
	/* the node's slots of running jobs as fsm_node_slots last read them while leading
	 * (owned), valid while slots_cached and slots_epoch is the scheduler's: node_slots */
	struct fsm_slot *slots;
	int n_slots, slots_cached;
	uint64_t slots_epoch;
	/* the committed row's state is "down" / its drain is "draining": valid while
	 * row_flags_version is the scheduler's nodes_epoch + 1 (0: not read). nodes_refresh
	 * sets them when the node's row changes, node_row_flags when first asked */
	int row_down, row_draining;
	uint64_t row_flags_version;
	/* checkpoint requests its next heartbeat answers carry (checkpoint_first): a job's
	 * generation asked for one before a planned restart, until the job no longer waits */
	struct ckpt_ask asks[CKPT_ASKS_PER_NODE];
	int n_asks;
};

/* A rank the detector flagged in the current generation. */
struct soft_straggler {
	int rank, stage;
	char node[FSM_NAME_MAX + 1];
	double ratio, compute_ms, median_ms;
	int64_t window;
};

struct soft_note {
	char type[16];
	char key[40];
	char message[400];
};

struct check_slot {
	int64_t rank;
	const char *node;
	int new_node; /* the first slot, or a node other than the slot before's */
	int node_ix;  /* its soft node's index once found, -1 before (soft nodes go only with
	               * every soft job: soft_clear) */
};

struct soft_job {
	char id[FSM_ID_MAX];
	int parsed; /* 1: req is valid; -1: the job cannot be placed (place_error says why) */
	struct place_request req;
	int world, is_command, max_restarts, hang_timeout_s, first_step_timeout_s;
	int time_limit_s; /* the spec's; 0: none (time_left_ms) */
	json_t *after;    /* the spec's "after" (job ids), NULL without; after_met */
	unsigned after_met; /* bit i: after[i] has succeeded */
	int run_world; /* ranks of the running generation (a shrunk dp has fewer than world) */
	/* parallel "auto": planned at placement until a plan is committed with it */
	int is_auto;
	json_t *spec;       /* the normalized spec, kept for planning (owned) */
	json_t *plan;       /* the plan to commit with the next job.assign (owned), NULL: none */
	int plan_committed; /* plan is the job's committed one: placements reuse it */
	char replan_reason[200]; /* planned again at a restart: why (job.replanned), else "" */
	/* a re-planned job restarted to grow back (check_auto_grow_back): its re-placement plans
	 * again whatever fits, saying grow_reason; for the generation it was asked at */
	int replan_wanted;
	int64_t replan_generation;
	char grow_reason[200];
	uint64_t grow_checked_ms; /* mono: the last look at growing it back */
	/* the devices it could have had when a plan for them last found nothing better, when
	 * (mono ms), and the nodes' measured rates it used (sched's perf_version); -1: none yet */
	int grow_looked_devices;
	uint64_t grow_looked_ms;
	uint64_t grow_looked_perf;
	char grow_said[64];       /* the best layout the last "not growing" log line named */
	/* why it could have more devices but does not grow, or stays (GET /v1/jobs/ID "growth",
	 * logged when it changes; malloc'd); NULL: nothing to say */
	char *growth;
	/* its restart to grow waits for the checkpoint its ranks were asked for: looked at on
	 * every pass until that is complete or its time is up */
	int grow_asking;
	/* preempted (preempt_choose): the waiting job its devices are for, and the restart's
	 * reason; "": not preempted. Kept until the job no longer runs (its restart went) or
	 * that job no longer waits */
	char preempted_by[FSM_ID_MAX];
	char preempt_reason[200];
	uint64_t preempt_found_none_ms; /* waiting: when its last look found no victims; 0: none */
	/* waiting and preempting: the devices its gang takes on the view with its victims'
	 * devices freed, held from the jobs after it in queue order (queue.h, hold) while its
	 * victims restart and PREEMPT_HOLD_MS after the last, so that a job placed meanwhile does
	 * not take the devices freed for it (and get preempted in turn); for the placement view
	 * of version preempt_hold_version; owned, NULL: none */
	struct place_slot *preempt_hold;
	int n_preempt_hold;
	uint64_t preempt_hold_version, preempt_hold_until_ms;
	/* failure.allow_shrink_dp: the smaller dps a re-placement may use, largest first, each
	 * one whose spec validates (jobspec_with_dp; owned) */
	int *shrink_dp;
	int n_shrink_dp;
	/* a shrunk job grows back only once a checkpoint newer than this step is complete (one
	 * its shrunk generation wrote); INT64_MIN: not known yet (a new leader) */
	int64_t grow_after_step;
	char store[JOBSPEC_PATH_MAX + 1];
	char place_error[QUEUE_REASON_MAX];
	/* the phase (state, generation) the flags below refer to */
	char state[16];
	int64_t generation;
	uint64_t phase_since_ms;
	int noted_waiting, noted_running, noted_progress, stopped;
	int proposing;
	/* a running job's ranks are looked at again (check_running) on the next full pass:
	 * a report of one of them arrived, its row or a proposal of it changed; otherwise
	 * only every CHECK_ALL_MS (hangs, silent nodes) or when a node row changed */
	int check_due;
	json_t *claim; /* devices of an in-flight job.assign: [{"node","device"}] */
	int64_t step;  /* latest step reported by any rank of the generation, -1: none */
	/* its step rate (start estimates of the jobs waiting for its devices): the first step
	 * seen of the generation and the latest, each with when (mono ms); total_steps: the
	 * spec's train.steps, 0 for a command job (no end to reach) */
	int64_t total_steps, rate_step0, rate_step1;
	uint64_t rate_ms0, rate_ms1;
	double loss;
	int has_loss;
	int position;
	uint64_t position_pass; /* the pass that set position (sched.pass_seq) */
	int queue_rank;         /* place among the waiting jobs as of sched.ranks_pass */
	char reason[QUEUE_REASON_MAX];
	json_t *row; /* the job as fsm_jobs_active shows it (owned); NULL once no longer active.
	              * Its "spec" is spec_view: the full spec is read once (job_parse) */
	/* {"parallel": the spec's}: all a row read again needs of the spec (its "effective"
	 * layout), so a changed row costs no spec parse and a queued job holds no parsed spec
	 * (owned) */
	json_t *spec_view;
	json_t *layout; /* fsm_job_layout of a running job, read once per row change (owned) */
	/* layout as (placement view index, device) pairs, for the placement view of version
	 * layout_slots_version: a pass marks a running job's devices busy without a JSON or
	 * hash lookup per rank (owned; NULL: not built) */
	int (*layout_slots)[2];
	int n_layout_slots;
	uint64_t layout_slots_version;
	/* layout as check_running reads it: each slot's rank and node (a string of layout),
	 * so a check makes no JSON lookup per slot ([size of layout], owned; NULL: not
	 * built) */
	struct check_slot *check_slots;
	/* from row, read once when it is refreshed rather than on every tick */
	char row_state[16];
	int row_running, row_pending; /* row_state is "running", "pending" */
	int64_t row_generation, row_priority, row_seq, row_updated_ms;
	int64_t row_submitted_ms;  /* the submission's proposal (leader's wall clock) */
	uint64_t waiting_since_ns; /* the pass that first read it pending or restarting; 0: not */
	/* stragglers (straggler.h): the spec's failure.straggler, and per generation the
	 * detector (det_ready 1: initialised, -1: cannot be), the flagged ranks (at most one
	 * per rank), notes waiting to be proposed and, under "replace", the rank to move
	 * (-1: none, -2: already proposed in this generation) */
	int straggler_policy;
	struct straggler_params straggler;
	int max_replacements;
	int det_ready;
	struct straggler_detector det;
	struct soft_straggler *flags;
	int n_flags;
	struct straggler_change *changes; /* [world]: straggler_judge's output */
	struct soft_note *pending;        /* [PENDING_NOTES], allocated by the first note (owned) */
	int n_pending;
	int replace_rank;
	char replace_reason[256]; /* job.replace takes at most 256 (jobs/fsm_cluster.c) */
	/* heartbeat answers (desired_for): the desired entries of every rank of generation
	 * desired_gen as text (desired_build), built once from the committed job, its nodes
	 * and its restore checkpoint, and reused until the generation, a node row or a
	 * checkpoint changes (the versions below); owned, NULL: not built */
	json_t *desired;
	uint64_t desired_serial; /* sched.desired_serials when desired was built */
	int64_t desired_gen;
	uint64_t desired_nodes_version, desired_ckpt_version; /* node_addr_version, FSM's */
	/* a planned restart first asks for a checkpoint (checkpoint_first): the spec's
	 * checkpoint.before_restart_s; the request (a number above every earlier one: the
	 * leader's wall clock in ms), the newest complete step when it was made, when (mono
	 * ms; 0: none waiting); the generation whose request is over (answered or timed out) */
	int before_restart_s;
	int64_t ckpt_request, ckpt_after;
	uint64_t ckpt_asked_ms;
	int64_t ckpt_done_gen;
	uint64_t ckpt_done_ms; /* when (mono ms) the generation's request was over */
	/* a request made through the API (sched_checkpoint_now): its nodes' answers carry it
	 * until this (mono ms; 0: none) */
	uint64_t ckpt_manual_until_ms;
};

/* What a pass over the queue reads of a soft job, in an array beside the jobs (keys[k]
 * describes jobs[k]): 24 bytes a job rather than the job's scattered cache lines, so a pass
 * over tens of thousands of queued jobs costs microseconds per thousand. */
enum { JK_NONE, JK_PENDING, JK_RUNNING, JK_RESTARTING };
struct job_key {
	int64_t priority, seq; /* the row's, queue order: priority first, then seq */
	uint8_t kind;          /* JK_*: the active row's state; JK_NONE: no active row */
	uint8_t proposing;     /* as the job's flag (a claim exists only while proposing) */
	uint8_t changed;       /* a new row whose phase no pass has compared yet */
	uint8_t dead;          /* released; the slot stays until the table is compacted */
};

struct sched {
	uv_loop_t *loop;
	struct fsm *fsm;
	struct sched_config cfg;
	struct sched_io io;
	uv_timer_t timer;
	uv_check_t kick; /* a pass right after a job change committed (not only on ticks) */
	uv_idle_t resync_idle; /* keeps the loop from sleeping in poll while jobs are reread */
	/* soft jobs dropped with leadership, released GRAVE_CHUNK per loop iteration */
	struct grave *graves;
	uv_idle_t grave_idle;
	int handles_open;
	uint64_t last_kick_ms;
	int leading;
	uint64_t epoch; /* bumped on every leadership change: late proposals are ignored */
	int n_in_flight; /* this leadership's proposals not completed yet (SCHED_IN_FLIGHT_MAX) */
	int pass_capped; /* this pass left work for later: SCHED_IN_FLIGHT_MAX were under way */
	uint64_t passes_capped_total;
	uint64_t nodes_capped_total; /* node-health checks that stopped there too */
	uint64_t leader_since_ms;
	/* node-health checks: the last one, and the end of the last stall of this controller
	 * (a loop that did not run for a while heard no heartbeat: that silence is its own) */
	uint64_t last_health_ms, stall_end_ms;
	uint64_t last_applied, last_full_ms;
	uint64_t last_deep_ms; /* the last pass that looked at every pending job */
	/* preemption: running jobs marked preempted_by (as of the last preempt_continue), and the
	 * last look for a job to preempt for */
	int n_preempted;
	uint64_t preempt_looked_ms;
	uint64_t preemptions_total; /* restarts proposed for a preemption */
	/* the last full pass that looked at every running job, and the nodes it saw */
	uint64_t last_check_all_ms, check_all_nodes_version;
	struct queue_job *q; /* the pass's queue, kept between passes (no page faults); grown
	                      * by yard_grow, as jobs and keys are */
	int cap_q;
	uint64_t wake_ms; /* a time-based condition (back-off, stop wait) comes due then */
	int dirty;
	struct logstore *logs;
	char leader_id[64]; /* names this leadership in heartbeat answers */
	struct soft_node *nodes;
	int n_nodes, cap_nodes;
	/* yard_grow arrays: no copy as they grow (a 300 MB realloc held the loop ~1 s) */
	struct soft_job *jobs;
	struct job_key *keys; /* [cap_keys >= cap_jobs], beside jobs */
	int n_jobs, cap_jobs, cap_keys;
	/* active jobs as of the last pass (or the reread's list), and submissions admitted
	 * since (sched_admit) */
	int n_active, n_admitted;
	int n_dead;    /* released jobs still in the table (compacted when many) */
	int *pass_buf; /* indices of a pass's candidates, kept between passes */
	int cap_pass_buf;
	uint64_t pass_seq;   /* bumped by every pass over the queue */
	uint64_t ranks_pass; /* the pass the soft jobs' queue_rank is of (queue_ranks) */
	struct rollout_driver *rollouts; /* scheduler/rollout.h */
	struct history *history;         /* per-step series of running jobs (history.h) */
	char publishing[FSM_ID_MAX]; /* advisory of an in-flight advisory.publish, "" when none */
	int collecting;              /* a jobs.collect is in flight */
	/* placement at submission (sched_submit_begin): the submissions in flight, in the
	 * order they were proposed; the busy view they are placed in (busy, built by busy_view
	 * of this leadership at nodes_version busy_nodes_version) and its index (built at the
	 * first placement after the view); what the last pass left waiting and whether a
	 * submission went through the queue since */
	struct submission *subs;
	int n_subs, cap_subs;
	uint64_t next_sub_token;
	int busy_built;
	uint64_t busy_nodes_version;
	struct place_index *sub_index;
	int subs_since_view; /* placements at submission since busy was built */
	int queue_waiting;
	int slow_applied;
	uint64_t rows_read; /* job rows the passes read (job_set_row): ended jobs free devices */
	uint64_t rows_read_at_view;
	uint64_t placed_at_submit_total, placed_at_submit_refused_total;
	/* placements proposed in a cluster with topology domains: within one, across several */
	uint64_t placed_one_domain_total, placed_across_domains_total;
	uint64_t last_collect_ms;    /* the last look for ended jobs to collect (monotonic) */
	struct id_index node_index, job_index;
	int jobs_resync;        /* reread every active job (leadership change) */
	/* A reread in progress: the active jobs' rowids when it began, read RESYNC_CHUNK per
	 * pass so a new leader answers requests meanwhile; no placement decision is made
	 * until every one was read (the busy view would miss devices). */
	int64_t *resync_rowids;
	int n_resync, resync_at;
	uint64_t resync_since_ms; /* when the reread began (monotonic) */
	uint64_t slow_pass_log_ms; /* the last "pass held the loop" warning, and passes since */
	int slow_passes;
	json_t *nodes_list;     /* fsm_nodes_list, kept current from the nodes journal (owned) */
	json_t *nodes_pos;      /* node id -> its index in nodes_list (owned) */
	uint64_t nodes_version; /* bumped whenever nodes_list changes */
	uint64_t perf_version;  /* bumped whenever a node's measured rates (perf) change */
	uint64_t nodes_epoch;   /* bumped when nodes_list is read whole (soft_node.row_down) */
	/* health_refresh: nodes_list's rows, one per row in its order (node -1: none), as of
	 * health_version; nodes_refresh updates a changed row in place */
	struct health_row *health;
	int n_health;
	uint64_t health_version;
	json_t *nodes_by_id;    /* node id -> its row in nodes_list (owned), as of: */
	uint64_t nodes_by_id_version;
	int n_draining; /* nodes of nodes_list being drained */
	/* bumped when a node's address, port base or devices change (or nodes are reread):
	 * what cached heartbeat entries (desired_build) read of the nodes; a state change or a
	 * cordon leaves them valid */
	uint64_t node_addr_version;
	/* the setting max_heartbeats_per_s, its value before its last change and the change's
	 * wall time, as of the FSM's config_version (heartbeat_caps_read); the floor last
	 * logged */
	int64_t cap, cap_before, cap_changed_ms;
	uint64_t caps_version;
	int caps_known;
	uint64_t floor_logged_ms;
	json_t *pn_changed; /* ids of nodes whose rows changed since pn_refresh (owned) */
	int pn_full;        /* a node came or went: pn_refresh rebuilds the whole view */
	/* nodes_list as placement input (busy masks clear) and its id index, rebuilt only when
	 * nodes_list changes: a pass copies it instead of reading every node's JSON */
	struct place_node *pn_base;
	int n_pn, pn_valid;
	struct place_node *busy; /* busy_view's buffer, [cap_busy], kept between passes */
	int cap_busy;
	uint64_t pn_version;
	struct id_index pn_index;
	json_t *domains; /* topology label value -> place_node.domain (1..), since pn_refresh
	                  * last rebuilt the view */
	/* straggler counters for /metrics, over this member's leaderships */
	uint64_t stragglers_flagged_total, straggler_windows_judged_total;
	uint64_t straggler_judge_ns_total;
	/* where a job's time to placement goes, for /metrics (this member's leaderships): from
	 * the apply of a job change to the pass that reads it, from that pass to the job's
	 * job.assign proposal (its wait in the queue), and how long passes hold the loop */
	struct yard_hist pickup_ms, queue_wait_ms, pass_ms[2]; /* pass_ms[with_nodes] */
	/* a job's submission (the leader's proposal of it) to this leader's apply of its first
	 * placement: the time to placed that a client sees, both raft commits included */
	struct yard_hist submit_placed_ms;
	/* watches: the nodes (indices) whose agent waits for news, and the base of this
	 * leadership's versions (a version of another leadership never matches) */
	int *watching;
	int n_watching, cap_watching;
	uint64_t watch_base;
	uint64_t watch_answers_total, watch_news_total;
	uint64_t watch_desired_total; /* watch answers that carried the desired set */
	uint64_t nudges_total; /* nodes' watches answered to bring a heartbeat (node_nudge) */
	/* heartbeat answers: the serial of the last desired set built (each gets the next),
	 * and the answers that said the node's desired set is unchanged (desired_tag), and
	 * those that sent it with each job's shared part once (desired_shared) */
	uint64_t desired_serials;
	/* bumped when the FSM says every node's slots may have changed: the soft nodes' slot
	 * copies of an older epoch are stale */
	uint64_t slots_epoch;
	uint64_t desired_unchanged_total;
	uint64_t desired_shared_total;
	/* proposals not committed: when the last one was logged, how many since were not,
	 * and the last of those (see uncommitted) */
	int uncommitted_logged;
	uint64_t uncommitted_log_ms;
	uint64_t uncommitted_quiet;
	char uncommitted_last[96];
};

static uint64_t mono_now(const struct sched *s)
{
	return s->io.mono_ms ? s->io.mono_ms(s->io.data) : yard_now_mono_ms();
}

static int64_t wall_now(const struct sched *s)
{
	return s->io.wall_ms ? s->io.wall_ms(s->io.data) : yard_now_wall_ms();
}

/* ---- the heartbeat interval asked of agents, and the silence thresholds ---- */

/* The longest interval between heartbeats a leader asks for (yard-agent refuses more). */
#define HEARTBEAT_FLOOR_MAX_MS 60000

/* The shortest interval between one node's heartbeats that keeps all nodes' heartbeats
 * within cap a second (0: none), rounded up to 100 ms so that registrations change it
 * rarely. */
static uint64_t floor_for(uint64_t nodes, int64_t cap)
{
	if (cap <= 0 || nodes == 0)
		return 0;
	uint64_t ms = ((nodes * 1000 + (uint64_t)cap - 1) / (uint64_t)cap + 99) / 100 * 100;
	return YARD_MIN(ms, HEARTBEAT_FLOOR_MAX_MS);
}

static int nodes_refresh(struct sched *s, struct yard_err *err);

/* The replicated setting max_heartbeats_per_s, the value before its last change and that
 * change's time, read again only when the FSM's config changed. */
static void heartbeat_caps_read(struct sched *s)
{
	if (s->caps_known && s->caps_version == s->fsm->config_version)
		return;
	s->cap = fsm_config_get(s->fsm, "max_heartbeats_per_s", FSM_MAX_HEARTBEATS_DEFAULT);
	s->cap_before = fsm_config_get(s->fsm, "max_heartbeats_per_s.before", s->cap);
	s->cap_changed_ms = fsm_config_get(s->fsm, "max_heartbeats_per_s.changed_ms", 0);
	s->caps_version = s->fsm->config_version;
	s->caps_known = 1;
}

static uint64_t nodes_known(const struct sched *s)
{
	return s->nodes_list != NULL ? json_array_size(s->nodes_list) : 0;
}

/* What every heartbeat answer asks of the agent: at least this many ms between its
 * heartbeats (0: nothing asked), from the node count and the setting, the same on every
 * leader. */
static uint64_t heartbeat_floor(struct sched *s)
{
	struct yard_err err = {0};
	if (s->leading && s->nodes_list == NULL && nodes_refresh(s, &err) != 0)
		log_warn("scheduler: cannot read the nodes: %s", err.msg);
	heartbeat_caps_read(s);
	uint64_t ms = floor_for(nodes_known(s), s->cap);
	if (ms != s->floor_logged_ms)
		log_info("scheduler: %llu nodes: agents are asked to leave at least %llu ms "
		         "between heartbeats (%lld heartbeats a second in all at most: the setting "
		         "max_heartbeats_per_s, yardd --max-heartbeats-per-s)",
		         (unsigned long long)nodes_known(s), (unsigned long long)ms,
		         (long long)s->cap);
	s->floor_logged_ms = ms;
	return ms;
}

/* The interval silence is judged against: the floor, or, for two of the earlier interval
 * after a change of the setting shortened it, the earlier one (an agent hears of the new
 * one at its next heartbeat). Nodes only come, so only the setting shortens it. */
static uint64_t floor_judged(struct sched *s)
{
	uint64_t now_floor = heartbeat_floor(s);
	uint64_t before = floor_for(nodes_known(s), s->cap_before);
	int64_t since = wall_now(s) - s->cap_changed_ms;
	if (before > now_floor && (since < 0 || (uint64_t)since < 2 * before)) /* < 0: skew */
		return before;
	return now_floor;
}

/* A node silent this long is suspect, and this long down: the configured times, or 3 and 6
 * of the intervals the agents were asked to keep when those are longer (the defaults are 3
 * and 6 of yard-agent's 500 ms). */
static uint64_t suspect_ms(struct sched *s)
{
	return YARD_MAX(s->cfg.node_suspect_ms, 3 * floor_judged(s));
}

static uint64_t down_ms(struct sched *s)
{
	return YARD_MAX(s->cfg.node_down_ms, 6 * floor_judged(s));
}

void sched_config_defaults(struct sched_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->tick_ms = 100;
	cfg->kick_min_ms = 20;
	cfg->node_suspect_ms = 1500;
	cfg->node_down_ms = 3000;
	cfg->node_restart_grace_ms = 10000;
	cfg->restart_backoff_ms = 500;
	cfg->restart_backoff_max_ms = 30000;
	cfg->auto_grow_pct = 80;
	cfg->preempt_after_ms = 0;
	cfg->stop_wait_ms = 10000;
	cfg->reserve_after_ms = 60000;
	cfg->queue_depth = 100;
	cfg->max_active_jobs = 100000;
	cfg->max_state_mb = FSM_DB_MAX / 8 * 7 >> 20;
	snprintf(cfg->topology_label, sizeof cfg->topology_label, "switch");
	cfg->log_rank_max_bytes = 1 << 20;
	cfg->log_total_max_bytes = 64 << 20;
}

/* ---- soft tables ---- */

static struct soft_node *node_find(struct sched *s, const char *id)
{
	int i = id_index_find(&s->node_index, s->nodes, sizeof *s->nodes, id);
	return i < 0 ? NULL : &s->nodes[i];
}

static struct soft_node *node_get(struct sched *s, const char *id)
{
	struct soft_node *n = node_find(s, id);
	if (n != NULL)
		return n;
	if (s->n_nodes == s->cap_nodes) {
		int cap = s->cap_nodes ? s->cap_nodes * 2 : 16;
		struct soft_node *grown = realloc(s->nodes, (size_t)cap * sizeof *grown);
		if (grown == NULL)
			return NULL;
		s->nodes = grown;
		s->cap_nodes = cap;
	}
	if (2 * (s->n_nodes + 1) > s->node_index.cap &&
	    id_index_rebuild(&s->node_index, s->nodes, sizeof *s->nodes, s->n_nodes,
	                     s->n_nodes + 1) != 0)
		return NULL;
	n = &s->nodes[s->n_nodes];
	memset(n, 0, sizeof *n);
	snprintf(n->id, sizeof n->id, "%s", id);
	id_index_put(&s->node_index, n->id, s->n_nodes++);
	return n;
}

static struct soft_job *job_find(struct sched *s, const char *id)
{
	int i = id_index_find(&s->job_index, s->jobs, sizeof *s->jobs, id);
	return i < 0 || s->keys[i].dead ? NULL : &s->jobs[i];
}

static struct job_key *key_of(struct sched *s, const struct soft_job *j)
{
	return &s->keys[j - s->jobs];
}

/* Forgets the job's cached heartbeat entries (desired_for). */
static void desired_drop(struct soft_job *j)
{
	json_decref(j->desired);
	j->desired = NULL;
}

/* Forgets the job's cached layout and what was derived from it. */
static void job_layout_forget(struct soft_job *j)
{
	json_decref(j->layout);
	j->layout = NULL;
	free(j->layout_slots);
	j->layout_slots = NULL;
	free(j->check_slots);
	j->check_slots = NULL;
	j->n_layout_slots = 0;
}

/* The data-parallel degrees below the spec's that a re-placement of j may use. */
static void shrink_options(struct soft_job *j, const json_t *spec)
{
	j->shrink_dp = calloc((size_t)j->req.dp, sizeof *j->shrink_dp);
	j->n_shrink_dp = 0;
	for (int dp = j->req.dp - 1; j->shrink_dp != NULL && dp >= 1; dp--) {
		struct yard_err err = {0};
		json_t *shrunk = jobspec_with_dp(spec, dp, &err);
		if (shrunk != NULL)
			j->shrink_dp[j->n_shrink_dp++] = dp;
		json_decref(shrunk);
	}
}

/* Parses the placement request of a job from its normalized spec, once (parallel "auto":
 * at each placement, plan_job). */
static void job_parse(struct soft_job *j, const json_t *job)
{
	const json_t *spec = json_object_get(job, "spec");
	struct jobspec js;
	struct yard_err err = {0};
	if (jobspec_parse(spec, &js, &err) != 0) {
		j->parsed = -1;
		snprintf(j->place_error, sizeof j->place_error, "stored spec does not parse: %s",
		         err.msg);
		return;
	}
	j->is_command = js.is_command;
	j->max_restarts = js.failure.max_restarts;
	j->hang_timeout_s = js.failure.hang_timeout_s;
	j->first_step_timeout_s = js.failure.first_step_timeout_s;
	j->time_limit_s = js.time_limit_s;
	j->total_steps = js.is_command ? 0 : js.train.steps;
	json_decref(j->after);
	j->after = NULL;
	j->after_met = 0;
	if (js.n_after > 0) {
		j->after = json_array();
		for (int i = 0; i < js.n_after; i++)
			json_array_append_new(j->after, json_string(js.after[i]));
	}
	j->straggler_policy = (int)js.failure.straggler_policy;
	j->straggler =
	    (struct straggler_params){.threshold = js.failure.straggler_threshold,
	                              .windows = js.failure.straggler_windows,
	                              .window_steps = js.failure.straggler_window_steps,
	                              .persist_ms = js.failure.straggler_persist_s * 1000};
	j->max_replacements = js.failure.max_replacements;
	snprintf(j->store, sizeof j->store, "%s", js.checkpoint.store);
	j->before_restart_s = jobspec_before_restart_s(&js);
	memset(&j->req, 0, sizeof j->req);
	j->req.require_cuda = js.device == JOBSPEC_DEVICE_CUDA;
	j->req.require_cpu = js.device == JOBSPEC_DEVICE_CPU;
	j->req.memory_mb = js.memory_mb;
	if (js.is_command) {
		j->req.dp = js.ranks, j->req.tp = 1, j->req.pp = 1;
	} else if (js.parallel.is_auto) {
		/* planned at placement (plan_job), against the cluster as it is then, or the
		 * plan it committed */
		j->is_auto = 1;
		j->spec = json_deep_copy(spec);
		j->world = 0;
		j->parsed = 1;
		jobspec_free(&js);
		return;
	} else {
		j->req.dp = js.parallel.dp, j->req.tp = js.parallel.tp, j->req.pp = js.parallel.pp;
		if (js.failure.allow_shrink_dp)
			shrink_options(j, spec);
	}
	j->world = j->req.dp * j->req.tp * j->req.pp;
	j->parsed = 1;
	jobspec_free(&js);
}

static struct soft_job *job_get(struct sched *s, const json_t *job)
{
	const char *id = json_string_value(json_object_get(job, "id"));
	int i = id_index_find(&s->job_index, s->jobs, sizeof *s->jobs, id);
	struct soft_job *j;
	if (i >= 0 && !s->keys[i].dead)
		return &s->jobs[i];
	int reused = i >= 0;
	if (reused) {
		/* released but not compacted away yet: the slot is reused as a new job */
		s->n_dead--;
	} else {
		if (yard_grow((void **)&s->jobs, sizeof *s->jobs, &s->cap_jobs, s->n_jobs + 1) !=
		        0 ||
		    yard_grow((void **)&s->keys, sizeof *s->keys, &s->cap_keys, s->cap_jobs) != 0)
			return NULL;
		if (2 * (s->n_jobs + 1) > s->job_index.cap &&
		    id_index_rebuild(&s->job_index, s->jobs, sizeof *s->jobs, s->n_jobs,
		                     s->n_jobs + 1) != 0)
			return NULL;
		i = s->n_jobs++;
	}
	j = &s->jobs[i];
	memset(j, 0, sizeof *j);
	memset(&s->keys[i], 0, sizeof s->keys[i]);
	snprintf(j->id, sizeof j->id, "%s", id);
	if (!reused)
		id_index_put(&s->job_index, j->id, i);
	j->step = -1;
	j->check_due = 1;
	j->replace_rank = -1;
	j->grow_after_step = INT64_MIN;
	j->grow_looked_devices = -1;
	job_parse(j, job);
	return j;
}

/* Forgets the straggler state of a generation. */
static void straggler_reset(struct soft_job *j)
{
	if (j->det_ready == 1)
		straggler_free(&j->det);
	free(j->flags);
	free(j->changes);
	j->flags = NULL;
	j->changes = NULL;
	j->det_ready = j->n_flags = j->n_pending = 0;
	j->replace_rank = -1;
}

static void preempt_hold_drop(struct soft_job *j)
{
	free(j->preempt_hold);
	j->preempt_hold = NULL;
	j->n_preempt_hold = 0;
}

static void job_release(struct soft_job *j)
{
	json_decref(j->claim);
	j->claim = NULL;
	json_decref(j->row);
	j->row = NULL;
	job_layout_forget(j);
	json_decref(j->spec);
	json_decref(j->plan);
	json_decref(j->spec_view);
	json_decref(j->after);
	j->spec = j->plan = j->spec_view = j->after = NULL;
	free(j->shrink_dp);
	j->shrink_dp = NULL;
	j->n_shrink_dp = 0;
	free(j->growth);
	j->growth = NULL;
	preempt_hold_drop(j);
	desired_drop(j);
	straggler_reset(j);
	free(j->pending);
	j->pending = NULL;
}

/* ---- watches: an agent's long-poll for changes of its node's desired set ---- */

static uint64_t news_version(const struct sched *s, const struct soft_node *n)
{
	return s->watch_base + n->news;
}

/* Answers the node's waiting watch (status 0: with the node's version) and forgets it. */
static void watch_answer(struct sched *s, struct soft_node *n, int status)
{
	sched_watch_cb cb = n->watch_cb;
	void *data = n->watch_data;
	int pos = n->watch_pos, last = s->watching[--s->n_watching];
	s->watching[pos] = last;
	s->nodes[last].watch_pos = pos;
	n->watch_cb = NULL;
	n->watch_data = NULL;
	s->watch_answers_total++;
	cb(data, status, news_version(s, n));
}

static void watch_release_all(struct sched *s, int status)
{
	while (s->n_watching > 0)
		watch_answer(s, &s->nodes[s->watching[s->n_watching - 1]], status);
}

/* Watches whose wait is over are answered with the unchanged version. */
static void watch_expire(struct sched *s, uint64_t now)
{
	for (int i = s->n_watching - 1; i >= 0; i--) {
		if (i >= s->n_watching)
			continue;
		struct soft_node *n = &s->nodes[s->watching[i]];
		if (n->watch_deadline_ms <= now)
			watch_answer(s, n, 0);
	}
}

/* The node's desired set may have changed: a new version, and its watch answered. */
static void node_news(struct sched *s, const char *node)
{
	struct soft_node *n = node != NULL ? node_find(s, node) : NULL;
	if (n == NULL)
		return;
	n->news++;
	s->watch_news_total++;
	if (n->watch_cb != NULL)
		watch_answer(s, n, 0);
}

/* The node's next heartbeat answer brings something new beyond its desired set: its watch is
 * answered now, asking for that heartbeat. */
static void node_nudge(struct sched *s, const char *node)
{
	struct soft_node *n = node != NULL ? node_find(s, node) : NULL;
	if (n == NULL)
		return;
	n->nudge = 1;
	s->nudges_total++;
	node_news(s, node);
}

static void nudge_cb(void *data, const char *node)
{
	node_nudge(data, node);
}

/* Every node of a layout ([{"node": ...}, ...], ranks of a node next to each other) has
 * news, once. */
static void layout_news(struct sched *s, const json_t *layout)
{
	size_t i;
	const json_t *v;
	const char *prev = NULL;
	json_array_foreach(layout, i, v)
	{
		const char *node = json_string_value(json_object_get(v, "node"));
		if (node != NULL && (prev == NULL || strcmp(prev, node) != 0))
			node_news(s, node);
		prev = node;
	}
}

/* Room for one more of n elements of `size` in *arr (capacity *cap, doubled from 64 when
 * full); -1 when out of memory, the array unchanged. */
static int room_for_one(void **arr, int *cap, int n, size_t size)
{
	if (n < *cap)
		return 0;
	int want = *cap ? 2 * *cap : 64;
	void *grown = realloc(*arr, (size_t)want * size);
	if (grown == NULL)
		return -1;
	*arr = grown;
	*cap = want;
	return 0;
}

int sched_node_watch(struct sched *s, const char *node, int64_t version, uint64_t wait_ms,
                     sched_watch_cb cb, void *data, struct yard_err *err)
{
	if (!s->leading)
		return yard_err_set(err, YARD_ENOTLEADER, "not the leader: watch at the leader");
	struct soft_node *n = node_get(s, node);
	if (n == NULL)
		return yard_err_set(err, YARD_ENOMEM, "no memory to watch node %s", node);
	if (n->watch_cb != NULL) /* the agent's previous watch, given up on: superseded */
		watch_answer(s, n, 0);
	if (version < 0 || (uint64_t)version != news_version(s, n) || wait_ms == 0) {
		s->watch_answers_total++;
		cb(data, 0, news_version(s, n));
		return 0;
	}
	if (room_for_one((void **)&s->watching, &s->cap_watching, s->n_watching,
	                 sizeof *s->watching) != 0)
		return yard_err_set(err, YARD_ENOMEM, "no memory to watch node %s", node);
	n->watch_pos = s->n_watching;
	s->watching[s->n_watching++] = (int)(n - s->nodes);
	n->watch_cb = cb;
	n->watch_data = data;
	n->watch_deadline_ms = mono_now(s) + wait_ms;
	return 0;
}

/* A dropped table of soft jobs, released a chunk at a time: releasing 100,000 jobs at
 * once (every JSON tree and cache they hold) held the loop ~1 s, during which the member
 * answered no raft message. */
struct grave {
	struct grave *next;
	struct soft_job *jobs; /* a yard_grow array of cap */
	int n, at, cap;
};

#define GRAVE_CHUNK 2048

static void grave_release(struct grave *g, int n)
{
	int end = YARD_MIN(g->at + n, g->n);
	for (; g->at < end; g->at++)
		job_release(&g->jobs[g->at]);
}

static void on_grave_idle(uv_idle_t *h)
{
	struct sched *s = h->data;
	struct grave *g = s->graves;
	if (g == NULL) {
		uv_idle_stop(h);
		return;
	}
	grave_release(g, GRAVE_CHUNK);
#ifdef __GLIBC__
	/* glibc keeps small freed chunks in fastbins until a large request consolidates them
	 * all at once: after a whole drop that took a new leader's loop 280-400 ms at its first
	 * large allocation; consolidated a chunk at a time here, ~15 ms each (100,000 jobs:
	 * 49 loop iterations of ~23 ms); a no-op where yardd is linked with tcmalloc
	 * (configure), which keeps no such bins */
	malloc_trim(0);
#endif
	if (g->at == g->n) {
		s->graves = g->next;
		yard_grow_free(g->jobs, sizeof *g->jobs, g->cap);
		free(g);
	}
}

/* Hands the soft jobs to the grave (released from the loop's idle phase, GRAVE_CHUNK at a
 * time) when there are more than a chunk and defer; else releases them here. */
static void jobs_clear(struct sched *s, int defer)
{
	struct grave *g = defer && s->n_jobs > GRAVE_CHUNK ? malloc(sizeof *g) : NULL;
	if (g == NULL) {
		for (int i = 0; i < s->n_jobs; i++)
			job_release(&s->jobs[i]);
		s->n_jobs = 0;
		return;
	}
	*g = (struct grave){.next = s->graves, .jobs = s->jobs, .n = s->n_jobs, .cap = s->cap_jobs};
	s->graves = g;
	s->jobs = NULL;
	yard_grow_free(s->keys, sizeof *s->keys, s->cap_keys);
	s->keys = NULL;
	s->n_jobs = s->cap_jobs = s->cap_keys = 0;
	uv_idle_start(&s->grave_idle, on_grave_idle);
}

static void graves_free(struct sched *s)
{
	while (s->graves != NULL) {
		struct grave *g = s->graves;
		grave_release(g, g->n);
		s->graves = g->next;
		yard_grow_free(g->jobs, sizeof *g->jobs, g->cap);
		free(g);
	}
}

/* A submission in flight (sched_submit_begin): ranks, the placement proposed with it (owned;
 * NULL: it goes through the queue). */
struct submission {
	uint64_t token, epoch;
	json_t *ranks;
	int64_t wall_ms;
};

static void submissions_clear(struct sched *s)
{
	for (int i = 0; i < s->n_subs; i++)
		json_decref(s->subs[i].ranks);
	s->n_subs = 0;
	place_index_free(s->sub_index);
	s->sub_index = NULL;
	s->busy_built = s->subs_since_view = s->queue_waiting = s->slow_applied = 0;
}

static void soft_clear(struct sched *s, int defer)
{
	watch_release_all(s, YARD_ENOTLEADER);
	logstore_clear(s->logs);
	for (int i = 0; i < s->n_nodes; i++) {
		json_decref(s->nodes[i].ranks);
		free(s->nodes[i].report_keys);
		json_decref(s->nodes[i].perf);
		free(s->nodes[i].slots);
	}
	jobs_clear(s, defer);
	s->n_nodes = s->n_jobs = s->n_dead = 0;
	s->n_preempted = 0;
	s->n_active = s->n_admitted = 0; /* counted again by the next leadership's passes */
	free(s->health); /* its rows name soft nodes */
	s->health = NULL;
	s->n_health = 0;
	history_clear(s->history);
	id_index_rebuild(&s->node_index, s->nodes, sizeof *s->nodes, 0, 0);
	id_index_rebuild(&s->job_index, s->jobs, sizeof *s->jobs, 0, 0);
	s->jobs_resync = 1;
	free(s->resync_rowids);
	s->resync_rowids = NULL;
	s->n_resync = s->resync_at = 0;
	submissions_clear(s);
}

/* ---- proposals ---- */

struct proposal {
	struct sched *s;
	uint64_t epoch;
	int is_node;
	char id[FSM_NAME_MAX + 1];
	char op[24];
	int64_t submitted_ms; /* > 0: a job's first placement, submitted then (submit_placed_ms) */
};

/* One proposal per node or job at a time: the flag is set before the proposal goes out
 * (its completion may come at once) and cleared when it completes or is refused. */
static void set_proposing(struct sched *s, int is_node, const char *id, int on)
{
	if (is_node) {
		struct soft_node *n = node_find(s, id);
		if (n != NULL)
			n->proposing = on;
		return;
	}
	struct soft_job *j = job_find(s, id);
	if (j == NULL)
		return;
	j->proposing = on;
	key_of(s, j)->proposing = (uint8_t)on;
	if (!on) {
		json_decref(j->claim);
		j->claim = NULL;
	}
}

/* A leader that loses its leadership, or shuts down, with thousands of proposals under way
 * has them all fail at once: the first failure is logged, those of the next
 * UNCOMMITTED_LOG_MS are counted and logged as one line with the last of them (at the next
 * failure after that, at the next tick, or when leadership ends), not one line per job. */
#define UNCOMMITTED_LOG_MS 1000

static void uncommitted_flush(struct sched *s, int force)
{
	if (s->uncommitted_quiet == 0 ||
	    (!force && mono_now(s) - s->uncommitted_log_ms < UNCOMMITTED_LOG_MS))
		return;
	log_warn("scheduler: %llu more proposals not committed (the last: %s)",
	         (unsigned long long)s->uncommitted_quiet, s->uncommitted_last);
	s->uncommitted_quiet = 0;
	s->uncommitted_log_ms = mono_now(s);
}

static void uncommitted(struct sched *s, const struct proposal *p, int status)
{
	if (s->uncommitted_logged && mono_now(s) - s->uncommitted_log_ms < UNCOMMITTED_LOG_MS) {
		s->uncommitted_quiet++;
		snprintf(s->uncommitted_last, sizeof s->uncommitted_last, "%s %s: %s", p->op, p->id,
		         yard_strerror(status));
		return;
	}
	uncommitted_flush(s, 1);
	log_warn("scheduler: %s %s not committed: %s", p->op, p->id, yard_strerror(status));
	s->uncommitted_logged = 1;
	s->uncommitted_log_ms = mono_now(s);
}

static void proposal_done(void *data, int status, const json_t *result)
{
	struct proposal *p = data;
	struct sched *s = p->s;
	if (p->epoch == s->epoch)
		s->n_in_flight--;
	if (p->epoch == s->epoch && s->leading) {
		if (strcmp(p->op, "advisory.publish") == 0)
			s->publishing[0] = '\0';
		else if (strcmp(p->op, "jobs.collect") == 0)
			s->collecting = 0;
		else
			set_proposing(s, p->is_node, p->id, 0);
		struct soft_job *j = p->is_node ? NULL : job_find(s, p->id);
		if (j != NULL)
			j->check_due = 1;
		const char *error =
		    result ? json_string_value(json_object_get(result, "error")) : NULL;
		if (status != 0)
			uncommitted(s, p, status);
		else if (error != NULL)
			log_info("scheduler: %s %s refused: %s", p->op, p->id, error);
		else if (p->submitted_ms > 0)
			yard_hist_note(&s->submit_placed_ms,
			               (double)(wall_now(s) - p->submitted_ms));
		s->dirty = 1;
	}
	free(p);
}

/* submitted_ms: see struct proposal (0: not a first placement) */
static int propose_since(struct sched *s, int is_node, const char *id, const char *op, json_t *args,
                         int64_t submitted_ms)
{
	struct proposal *p = calloc(1, sizeof *p);
	if (p == NULL) {
		json_decref(args);
		return -1;
	}
	p->s = s;
	p->submitted_ms = submitted_ms;
	p->epoch = s->epoch;
	p->is_node = is_node;
	snprintf(p->id, sizeof p->id, "%s", id);
	snprintf(p->op, sizeof p->op, "%s", op);
	set_proposing(s, is_node, id, 1);
	s->n_in_flight++; /* before: the completion may come at once */
	if (s->io.propose(s->io.data, op, args, proposal_done, p) != 0) {
		s->n_in_flight--;
		set_proposing(s, is_node, id, 0);
		free(p);
		return -1;
	}
	return 0;
}

static int propose(struct sched *s, int is_node, const char *id, const char *op, json_t *args)
{
	return propose_since(s, is_node, id, op, args, 0);
}

static int propose_job(struct sched *s, struct soft_job *j, const char *op, json_t *args)
{
	return propose(s, 0, j->id, op, args);
}

static void note(struct sched *s, struct soft_job *j, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note(struct sched *s, struct soft_job *j, const char *type, const char *fmt, ...)
{
	char message[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(message, sizeof message, fmt, ap);
	va_end(ap);
	propose_job(s, j, "job.note",
	            json_pack("{s:s,s:I,s:s,s:s}", "id", j->id, "generation",
	                      (json_int_t)j->generation, "type", type, "message", message));
}

/* ---- node health ---- */

/* A health row for a row of the nodes list: its soft node and the row's strings (node -1:
 * a row without id or state, not something the FSM writes). 0, or -1 without memory. */
static int health_row_set(struct sched *s, struct health_row *h, const json_t *row)
{
	const char *id = json_string_value(json_object_get(row, "id"));
	const char *state = json_string_value(json_object_get(row, "state"));
	struct soft_node *n = NULL;
	if (id != NULL && state != NULL && (n = node_get(s, id)) == NULL)
		return -1;
	*h = (struct health_row){
	    .node = n == NULL ? -1 : (int)(n - s->nodes), .id = id, .state = state};
	return 0;
}

/* health: per row of the nodes list, its soft node and state (strings of the row), read
 * again whole only when the list was (nodes_refresh keeps it current through changes of
 * single rows); a check then reads no JSON. 0 or -1 without memory. */
static int health_refresh(struct sched *s, const json_t *nodes)
{
	if (s->health != NULL && s->health_version == s->nodes_version)
		return 0;
	size_t count = json_array_size(nodes);
	struct health_row *rows = realloc(s->health, (count + 1) * sizeof *rows);
	if (rows == NULL)
		return -1;
	s->health = rows;
	s->n_health = 0;
	size_t i;
	json_t *node;
	json_array_foreach(nodes, i, node)
	{
		if (health_row_set(s, &rows[i], node) != 0)
			return -1; /* still out of date: read again at the next check */
		s->n_health++;
	}
	s->health_version = s->nodes_version;
	return 0;
}

static void check_nodes(struct sched *s, const json_t *nodes, uint64_t now)
{
	if (health_refresh(s, nodes) != 0)
		return;
	uint64_t suspect = suspect_ms(s), down = down_ms(s);
	for (int i = 0; i < s->n_health; i++) {
		if (s->health[i].node < 0)
			continue;
		const char *id = s->health[i].id;
		const char *state = s->health[i].state;
		struct soft_node *n = &s->nodes[s->health[i].node];
		if (n->proposing)
			continue;
		if (n->known_since_ms == 0)
			n->known_since_ms = now;
		/* silence counts from the latest of: the last heartbeat, this leader's election
		 * (the grace period), the node's registration */
		uint64_t heard = YARD_MAX(YARD_MAX(n->last_seen_ms, s->stall_end_ms),
		                          YARD_MAX(s->leader_since_ms, n->known_since_ms));
		uint64_t silence_ms = now - heard;
		uint64_t grace = n->restarting ? s->cfg.node_restart_grace_ms : 0;
		const char *want = state;
		char reason[224];
		if (n->last_seen_ms != 0 && silence_ms < suspect + grace)
			want = "up";
		else if (silence_ms >= down + grace)
			want = "down";
		else if (silence_ms >= suspect + grace && strcmp(state, "up") == 0)
			want = "suspect";
		if (strcmp(want, state) == 0)
			continue;
		if (s->n_in_flight >= SCHED_IN_FLIGHT_MAX) {
			/* 10,000 nodes silent at once (a switch, this leader's own network) would be
			 * 10,000 commands at once: the rest at the next tick */
			s->nodes_capped_total++;
			break;
		}
		if (strcmp(want, "up") == 0)
			snprintf(reason, sizeof reason, "heartbeats again");
		else if (n->last_seen_ms == 0)
			snprintf(reason, sizeof reason,
			         "no heartbeat in %.1f s since this controller became leader",
			         (double)silence_ms / 1000);
		else if (grace > 0)
			snprintf(reason, sizeof reason,
			         "no heartbeat for %.1f s since its agent said it was restarting "
			         "into a new build (%.1f s of grace included)",
			         (double)silence_ms / 1000, (double)grace / 1000);
		else
			snprintf(reason, sizeof reason, "no heartbeat for %.1f s",
			         (double)silence_ms / 1000);
		propose(s, 1, id, "node.set_state",
		        json_pack("{s:s,s:s,s:s}", "id", id, "state", want, "reason", reason));
	}
}

/* ---- running jobs ---- */

static const struct report_key *report_find(const struct soft_node *n, const char *job,
                                            int64_t rank, int64_t generation)
{
	if (n == NULL)
		return NULL;
	for (int i = 0; i < n->n_report_keys; i++) {
		const struct report_key *k = &n->report_keys[i];
		if (k->rank == rank && k->generation == generation && strcmp(k->job, job) == 0)
			return k;
	}
	return NULL;
}

/* The node's latest reports (clean_reports' output, taken over) and their keys. */
static void node_set_reports(struct soft_node *n, json_t *reports)
{
	size_t count = json_array_size(reports);
	struct report_key *keys = malloc((count + 1) * sizeof *keys);
	json_decref(n->ranks);
	free(n->report_keys);
	n->ranks = reports;
	n->report_keys = keys;
	n->n_report_keys = 0;
	if (keys == NULL)
		return; /* report_find then finds nothing: ranks look silent, not wrong */
	size_t i;
	json_t *r;
	json_array_foreach(reports, i, r)
	{
		const char *job = json_string_value(json_object_get(r, "job"));
		if (job == NULL)
			continue;
		const json_t *loss = json_object_get(r, "loss");
		const char *state = json_string_value(json_object_get(r, "state"));
		keys[n->n_report_keys++] = (struct report_key){
		    .rank = json_integer_value(json_object_get(r, "rank")),
		    .generation = json_integer_value(json_object_get(r, "generation")),
		    .job = job,
		    .report = r,
		    .exited = state != NULL && strcmp(state, "exited") == 0,
		    .has_loss = json_is_number(loss),
		    .exit_code = json_integer_value(json_object_get(r, "exit_code")),
		    .signal = json_integer_value(json_object_get(r, "signal")),
		    .step = json_integer_value(json_object_get(r, "step")),
		    .last_step_ms_ago = json_integer_value(json_object_get(r, "last_step_ms_ago")),
		    .loss = json_number_value(loss)};
	}
}

static const char *node_state_of(const json_t *nodes_by_id, const char *node)
{
	const char *st =
	    json_string_value(json_object_get(json_object_get(nodes_by_id, node), "state"));
	return st ? st : "unknown";
}

/* ---- stragglers ---- */

/* The dp the job's current generation runs: the committed shrunk dp, else the spec's. */
static int effective_dp(const struct soft_job *j)
{
	const json_t *effective = json_object_get(j->row, "effective");
	if (json_is_true(json_object_get(effective, "shrunk")))
		return (int)json_integer_value(json_object_get(effective, "dp"));
	return j->req.dp;
}

static void straggler_start(struct soft_job *j)
{
	struct yard_err err = {0};
	if (j->det_ready != 0)
		return;
	j->det_ready = -1;
	if (j->parsed != 1 || j->straggler_policy == JOBSPEC_STRAGGLER_OFF)
		return;
	int dp = effective_dp(j);
	if (straggler_init(&j->det, &j->straggler, dp, j->req.tp, j->req.pp, &err) != 0) {
		log_warn("scheduler: job %s: %s", j->id, err.msg);
		return;
	}
	j->run_world = dp * j->req.tp * j->req.pp;
	j->flags = calloc((size_t)j->run_world, sizeof *j->flags);
	j->changes = calloc((size_t)j->run_world, sizeof *j->changes);
	if (j->flags == NULL || j->changes == NULL) {
		straggler_free(&j->det);
		free(j->flags);
		free(j->changes);
		j->flags = NULL;
		j->changes = NULL;
		return;
	}
	j->det_ready = 1;
}

/* Feeds the window summaries of one rank report to the detector. */
static void straggler_feed(struct soft_job *j, int64_t rank, const json_t *rep)
{
	size_t i;
	json_t *w;
	if (j->det_ready != 1)
		return;
	json_array_foreach(json_object_get(rep, "windows"), i, w)
	    straggler_add(&j->det, (int)rank, json_integer_value(json_object_get(w, "index")),
	                  (int)json_integer_value(json_object_get(w, "steps")),
	                  json_number_value(json_object_get(w, "compute_ms")),
	                  json_number_value(json_object_get(w, "comm_wait_ms")));
}

static void pending_note(struct soft_job *j, const char *type, const char *key, const char *message)
{
	if (j->pending == NULL &&
	    (j->pending = calloc(PENDING_NOTES, sizeof *j->pending)) == NULL) {
		log_warn("scheduler: job %s: straggler note dropped (out of memory): %s", j->id,
		         message);
		return;
	}
	if (j->n_pending == PENDING_NOTES) {
		log_warn("scheduler: job %s: straggler note dropped (queue full): %s", j->id,
		         message);
		return;
	}
	struct soft_note *n = &j->pending[j->n_pending++];
	snprintf(n->type, sizeof n->type, "%s", type);
	snprintf(n->key, sizeof n->key, "%s", key);
	snprintf(n->message, sizeof n->message, "%s", message);
}

static const char *layout_node(const json_t *layout, int rank)
{
	size_t i;
	json_t *slot;
	json_array_foreach(layout, i, slot)
	{
		if (json_integer_value(json_object_get(slot, "rank")) == rank)
			return json_string_value(json_object_get(slot, "node"));
	}
	return "?";
}

/* Judges the windows every rank has reported and turns flag changes into soft state, notes
 * and (policy "replace") the rank to move. */
static void straggler_update(struct sched *s, struct soft_job *j, const json_t *layout)
{
	if (j->det_ready != 1)
		return;
	uint64_t t0 = yard_now_mono_ns();
	uint64_t judged_before = j->det.windows_judged;
	int n = straggler_judge(&j->det, j->changes, j->run_world);
	s->straggler_judge_ns_total += yard_now_mono_ns() - t0;
	s->straggler_windows_judged_total += j->det.windows_judged - judged_before;
	for (int k = 0; k < n; k++) {
		const struct straggler_change *c = &j->changes[k];
		const char *node = layout_node(layout, c->rank);
		char message[400], key[40], share[80] = "";
		int64_t last_step = (c->window + 1) * j->straggler.window_steps;
		if (j->straggler.persist_ms > 0)
			snprintf(share, sizeof share, ", slow %.0f%% of the recent ~%g s",
			         c->slow_share * 100, j->straggler.persist_ms / 1000);
		snprintf(key, sizeof key, "r%d-w%lld", c->rank, (long long)c->window);
		if (c->flagged) {
			struct soft_straggler *f = &j->flags[j->n_flags++];
			*f = (struct soft_straggler){.rank = c->rank,
			                             .stage = c->stage,
			                             .ratio = c->ratio,
			                             .compute_ms = c->compute_ms,
			                             .median_ms = c->median_ms,
			                             .window = c->window};
			snprintf(f->node, sizeof f->node, "%s", node);
			s->stragglers_flagged_total++;
			snprintf(
			    message, sizeof message,
			    "straggler: rank %d on node %s: compute %.3g ms per step, %.2fx the "
			    "median of pipeline stage %d (%.3g ms) for %d window(s) of %d steps%s "
			    "(through step %lld)",
			    c->rank, node, c->compute_ms, c->ratio, c->stage, c->median_ms,
			    j->straggler.windows, j->straggler.window_steps, share,
			    (long long)last_step);
			log_warn("scheduler: job %s: %s", j->id, message);
			if (j->straggler_policy == JOBSPEC_STRAGGLER_REPLACE &&
			    j->replace_rank == -1) {
				j->replace_rank = c->rank;
				snprintf(j->replace_reason, sizeof j->replace_reason, "%s",
				         message);
			} else {
				pending_note(j, "straggler", key, message);
			}
			continue;
		}
		for (int i = 0; i < j->n_flags; i++)
			if (j->flags[i].rank == c->rank)
				j->flags[i] = j->flags[--j->n_flags];
		snprintf(message, sizeof message,
		         "rank %d on node %s is no longer a straggler: compute %.2fx the median of "
		         "pipeline stage %d for %d window(s)%s (through step %lld)",
		         c->rank, node, c->ratio, c->stage, j->straggler.windows, share,
		         (long long)last_step);
		log_info("scheduler: job %s: %s", j->id, message);
		pending_note(j, "straggler_ok", key, message);
	}
}

/* Proposes the next straggler decision of a running job, if any. */
static int checkpoint_first(struct sched *s, struct soft_job *j, const json_t *layout, char *reason,
                            size_t reason_len);
static int checkpoint_before(struct sched *s, struct soft_job *j, const json_t *layout,
                             const char *what, char *reason, size_t reason_len);

static void straggler_propose(struct sched *s, struct soft_job *j, const json_t *layout)
{
	if (j->replace_rank >= 0) {
		/* a replacement the cap refuses (job.replace reports it) needs no checkpoint */
		if (fsm_job_replacements(s->fsm, j->id) < j->max_replacements &&
		    !checkpoint_first(s, j, layout, j->replace_reason, sizeof j->replace_reason))
			return;
		const char *node = "?";
		for (int i = 0; i < j->n_flags; i++)
			if (j->flags[i].rank == j->replace_rank)
				node = j->flags[i].node;
		propose_job(s, j, "job.replace",
		            json_pack("{s:s,s:I,s:i,s:s,s:s,s:i}", "id", j->id, "generation",
		                      (json_int_t)j->generation, "rank", j->replace_rank, "node",
		                      node, "reason", j->replace_reason, "max_replacements",
		                      j->max_replacements));
		j->replace_rank = -2;
		return;
	}
	if (j->n_pending == 0)
		return;
	struct soft_note n = j->pending[0];
	memmove(&j->pending[0], &j->pending[1], (size_t)(--j->n_pending) * sizeof n);
	propose_job(s, j, "job.note",
	            json_pack("{s:s,s:I,s:s,s:s,s:s}", "id", j->id, "generation",
	                      (json_int_t)j->generation, "type", n.type, "key", n.key, "message",
	                      n.message));
}

static int row_draining(const json_t *row)
{
	const char *drain = json_string_value(json_object_get(row, "drain"));
	return drain != NULL && strcmp(drain, "draining") == 0;
}

static int node_draining(const json_t *nodes_by_id, const char *node)
{
	return row_draining(json_object_get(nodes_by_id, node));
}

/* The slots of a layout (fsm_job_layout's form) as check_running reads them; NULL without
 * memory. */
static struct check_slot *check_slots_build(const json_t *layout)
{
	struct check_slot *slots = malloc((json_array_size(layout) + 1) * sizeof *slots);
	size_t i;
	json_t *slot;
	if (slots == NULL)
		return NULL;
	json_array_foreach(layout, i, slot)
	{
		slots[i].rank = json_integer_value(json_object_get(slot, "rank"));
		slots[i].node = json_string_value(json_object_get(slot, "node"));
		slots[i].new_node = i == 0 || slots[i].node == NULL || slots[i - 1].node == NULL ||
		                    strcmp(slots[i].node, slots[i - 1].node) != 0;
		slots[i].node_ix = -1;
	}
	return slots;
}

/* Sets the soft node's flags from its committed row (nodes_refresh, on a change of it). */
static void node_row_flags_set(struct sched *s, struct soft_node *n, const json_t *row)
{
	const char *state = json_string_value(json_object_get(row, "state"));
	n->row_down = state != NULL && strcmp(state, "down") == 0;
	n->row_draining = row_draining(row);
	n->row_flags_version = s->nodes_epoch + 1;
}

/* Whether node's committed row (in nodes_by_id, current with s->nodes_version) is down and
 * whether it is draining: from the soft node n when it holds them (read once, then set by
 * nodes_refresh as its row changes; a change of another node's row does not throw them
 * away), so that checking every running job costs no JSON lookups per node. */
static void node_row_flags(struct sched *s, struct soft_node *n, const json_t *nodes_by_id,
                           const char *node, int *down, int *draining)
{
	if (n != NULL && n->row_flags_version == s->nodes_epoch + 1) {
		*down = n->row_down;
		*draining = n->row_draining;
		return;
	}
	*down = strcmp(node_state_of(nodes_by_id, node), "down") == 0;
	*draining = node_draining(nodes_by_id, node);
	if (n != NULL) {
		n->row_down = *down;
		n->row_draining = *draining;
		n->row_flags_version = s->nodes_epoch + 1;
	}
}

/* Looks at every rank of a running job's generation; proposes at most one decision. */
/* Wall-clock ms left before job j's time limit (time_limit_s from its first placement,
 * started_ms in its row), INT64_MAX without one; ≤ 0 once reached. */
static int64_t time_left_ms(const struct sched *s, const struct soft_job *j)
{
	int64_t started = json_integer_value(json_object_get(j->row, "started_ms"));
	if (j->time_limit_s <= 0 || started <= 0)
		return INT64_MAX;
	return started + (int64_t)j->time_limit_s * 1000 - wall_now(s);
}

/* Ends job j at its time limit: failed, saying so (and, when its ranks are asked for a
 * checkpoint first, which step they saved). 1 when proposed, 0 while they save. */
static int end_at_time_limit(struct sched *s, struct soft_job *j, const json_t *layout,
                             int ask_checkpoint)
{
	char reason[256];
	int64_t started = json_integer_value(json_object_get(j->row, "started_ms"));
	char when[32];
	yard_format_utc(started, when, sizeof when);
	snprintf(reason, sizeof reason,
	         "time limit reached: time_limit_s %d from its first placement at %s",
	         j->time_limit_s, when);
	size_t said = strlen(reason);
	if (ask_checkpoint && !checkpoint_before(s, j, layout, "end", reason, sizeof reason))
		return 0;
	json_t *args = json_pack("{s:s,s:I,s:s,s:s}", "id", j->id, "generation",
	                         (json_int_t)j->generation, "state", "failed", "reason", reason);
	if (j->step >= 0)
		json_object_set_new(args, "step", json_integer(j->step));
	if (j->has_loss)
		json_object_set_new(args, "loss", json_real(j->loss));
	if (strlen(reason) == said) /* else checkpoint_before logged it, with the checkpoint */
		log_info("scheduler: job %s: %s", j->id, reason);
	propose_job(s, j, "job.finish", args);
	return 1;
}

static void check_running(struct sched *s, struct soft_job *j, const json_t *layout,
                          const json_t *nodes_by_id, uint64_t now)
{
	int world = (int)json_array_size(layout), exited_ok = 0, running = 0;
	char failure[256] = "", drain[256] = "";
	int64_t max_step = -1;
	if (j->check_slots == NULL && (j->check_slots = check_slots_build(layout)) == NULL)
		return; /* without memory: the next pass checks again */
	straggler_start(j);
	/* a node's ranks are usually neighbours in the layout: its row and soft node are
	 * looked up once for them */
	int down = 0, draining = 0;
	struct soft_node *n = NULL;
	for (int i = 0; i < world; i++) {
		int64_t rank = j->check_slots[i].rank;
		const char *node = j->check_slots[i].node;
		if (node == NULL)
			continue; /* not something the FSM writes */
		if (j->check_slots[i].new_node) { /* the first slot that names a node is one */
			int ix = j->check_slots[i].node_ix;
			n = ix >= 0 ? &s->nodes[ix] : node_find(s, node);
			if (n != NULL)
				j->check_slots[i].node_ix = (int)(n - s->nodes);
			node_row_flags(s, n, nodes_by_id, node, &down, &draining);
		}
		if (down) {
			/* how long it had been silent (jobs/timeline.c reads it): the time a
			 * failure can have gone unnoticed */
			if (n != NULL && n->last_seen_ms != 0 && now > n->last_seen_ms)
				snprintf(
				    failure, sizeof failure,
				    "rank %lld on node %s: node down (no heartbeat for %.1f s)",
				    (long long)rank, node, (double)(now - n->last_seen_ms) / 1000);
			else
				snprintf(failure, sizeof failure, "rank %lld on node %s: node down",
				         (long long)rank, node);
			break;
		}
		if (drain[0] == '\0' && draining)
			snprintf(drain, sizeof drain, "rank %lld on node %s: node draining",
			         (long long)rank, node);
		const struct report_key *rep = report_find(n, j->id, rank, j->generation);
		if (rep == NULL)
			continue;
		straggler_feed(j, rank, rep->report);
		int64_t step = rep->step;
		if (step > max_step) {
			max_step = step;
			if (rep->has_loss) {
				j->loss = rep->loss;
				j->has_loss = 1;
			}
		}
		if (rep->exited) {
			int64_t code = rep->exit_code;
			int64_t sig = rep->signal;
			if (code == 0 && sig == 0) {
				exited_ok++;
				continue;
			}
			if (sig != 0)
				snprintf(failure, sizeof failure,
				         "rank %lld on node %s killed by signal %lld",
				         (long long)rank, node, (long long)sig);
			else if (code < 0)
				snprintf(failure, sizeof failure,
				         "rank %lld on node %s ended while its agent was down "
				         "(exit status unknown)",
				         (long long)rank, node);
			else
				snprintf(failure, sizeof failure,
				         "rank %lld on node %s exited with code %lld",
				         (long long)rank, node, (long long)code);
			break;
		}
		running++;
		/* Hang: before a rank's first step, failure.first_step_timeout_s from its start
		 * when set; else trainer ranks (which always report steps) get hang_timeout_s,
		 * and a command job is judged only once it has reported one (docs/jobspec.md). */
		uint64_t ago = (uint64_t)rep->last_step_ms_ago + (now - n->last_seen_ms);
		if (step < 0 && j->first_step_timeout_s > 0) {
			if (ago > (uint64_t)j->first_step_timeout_s * 1000) {
				snprintf(
				    failure, sizeof failure,
				    "rank %lld on node %s reported no step in the %.1f s after "
				    "it started (first_step_timeout_s %d)",
				    (long long)rank, node, (double)ago / 1000,
				    j->first_step_timeout_s);
				break;
			}
		} else if (step >= 0 || !j->is_command) {
			if (ago > (uint64_t)j->hang_timeout_s * 1000) {
				snprintf(failure, sizeof failure,
				         "rank %lld on node %s made no step progress for %.1f s "
				         "(hang_timeout_s %d)",
				         (long long)rank, node, (double)ago / 1000,
				         j->hang_timeout_s);
				break;
			}
		}
	}
	if (max_step > j->step) {
		if (j->step < 0)
			j->rate_step0 = max_step, j->rate_ms0 = now;
		j->rate_step1 = max_step, j->rate_ms1 = now;
		j->step = max_step;
	}
	if (failure[0] == '\0')
		straggler_update(s, j, layout);
	if (j->proposing)
		return;
	/* the time limit ends the job unless every rank has just succeeded; ranks that run
	 * save a checkpoint first (not after a failure: the job ends now) */
	if (time_left_ms(s, j) <= 0 && !(world > 0 && exited_ok == world)) {
		end_at_time_limit(s, j, layout, failure[0] == '\0');
		return;
	}
	/* a real failure wins over a drain: it is counted, a drain is not; a drain first gets
	 * the job a checkpoint */
	if (failure[0] == '\0' && drain[0] != '\0' && !(world > 0 && exited_ok == world) &&
	    !checkpoint_first(s, j, layout, drain, sizeof drain))
		return;
	if (failure[0] != '\0' || (drain[0] != '\0' && !(world > 0 && exited_ok == world))) {
		json_t *args = json_pack("{s:s,s:I,s:s,s:i}", "id", j->id, "generation",
		                         (json_int_t)j->generation, "reason",
		                         failure[0] != '\0' ? failure : drain, "max_restarts",
		                         j->max_restarts);
		if (failure[0] == '\0')
			json_object_set_new(args, "drain", json_true());
		if (j->step >= 0)
			json_object_set_new(args, "step", json_integer(j->step));
		if (j->has_loss)
			json_object_set_new(args, "loss", json_real(j->loss));
		propose_job(s, j, "job.restart", args);
	} else if (world > 0 && exited_ok == world) {
		json_t *args = json_pack("{s:s,s:I,s:s,s:s}", "id", j->id, "generation",
		                         (json_int_t)j->generation, "state", "succeeded", "reason",
		                         "every rank exited with code 0");
		if (j->step >= 0)
			json_object_set_new(args, "step", json_integer(j->step));
		if (j->has_loss)
			json_object_set_new(args, "loss", json_real(j->loss));
		propose_job(s, j, "job.finish", args);
	} else if (!j->noted_running && running + exited_ok == world) {
		j->noted_running = 1;
		note(s, j, "running", "all %d rank(s) of generation %lld started", world,
		     (long long)j->generation);
	} else if (!j->noted_progress && j->step >= 0) {
		j->noted_progress = 1;
		note(s, j, "progress", "first step reported: %lld (generation %lld%s)",
		     (long long)j->step, (long long)j->generation,
		     j->generation > 1 ? ", after restart" : "");
	} else {
		straggler_propose(s, j, layout);
	}
}

/* Newest step directory with a MANIFEST (trainer_ckpt.c's layout), -1 if none. */
static int64_t newest_checkpoint(const char *dir)
{
	int64_t best = -1;
	DIR *d = opendir(dir);
	struct dirent *e;
	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		long long step;
		char tail, manifest[2048];
		struct stat st;
		if (sscanf(e->d_name, "step-%lld%c", &step, &tail) != 1)
			continue;
		snprintf(manifest, sizeof manifest, "%s/%s/MANIFEST", dir, e->d_name);
		if (stat(manifest, &st) == 0 && step > best)
			best = step;
	}
	closedir(d);
	return best;
}

/* The first restart goes at once (a node death should cost detection time only); each
 * further one waits restart_backoff_ms, doubling, up to restart_backoff_max_ms. */
static uint64_t backoff_ms(const struct sched *s, int64_t restarts)
{
	if (restarts <= 1)
		return 0;
	uint64_t ms = s->cfg.restart_backoff_ms;
	for (int64_t i = 2; i < restarts && ms < s->cfg.restart_backoff_max_ms; i++)
		ms *= 2;
	return ms < s->cfg.restart_backoff_max_ms ? ms : s->cfg.restart_backoff_max_ms;
}

static void wake_at(struct sched *s, uint64_t mono_ms)
{
	if (mono_ms < s->wake_ms)
		s->wake_ms = mono_ms;
}

/* A restarting job may be placed again once its old ranks are confirmed stopped (or the
 * wait ran out) and its back-off has passed. Returns 1 when it may. */
static int check_restarting(struct sched *s, struct soft_job *j, const json_t *job,
                            const json_t *nodes_by_id, uint64_t now)
{
	if (time_left_ms(s, j) <= 0) { /* no ranks to save a checkpoint */
		if (!j->proposing)
			end_at_time_limit(s, j, NULL, 0);
		return 0;
	}
	if (!j->stopped) {
		json_t *layout = fsm_job_layout(s->fsm, j->id);
		size_t i;
		json_t *slot;
		int waiting = 0;
		json_array_foreach(layout, i, slot)
		{
			int64_t rank = json_integer_value(json_object_get(slot, "rank"));
			const char *node = json_string_value(json_object_get(slot, "node"));
			const struct soft_node *n = node_find(s, node);
			const struct report_key *rep;
			if (strcmp(node_state_of(nodes_by_id, node), "down") == 0)
				continue;
			if (n == NULL || n->last_seen_ms == 0)
				waiting++;
			else if ((rep = report_find(n, j->id, rank, j->generation)) != NULL &&
			         !rep->exited)
				waiting++;
		}
		json_decref(layout);
		if (waiting > 0 && now - j->phase_since_ms < s->cfg.stop_wait_ms) {
			wake_at(s, j->phase_since_ms + s->cfg.stop_wait_ms);
			snprintf(j->reason, sizeof j->reason,
			         "restarting: waiting for %d rank(s) of generation %lld to stop",
			         waiting, (long long)j->generation);
			return 0;
		}
		if (j->proposing)
			return 0;
		j->stopped = 1;
		if (waiting == 0)
			note(s, j, "stopped", "every rank of generation %lld is stopped",
			     (long long)j->generation);
		else
			note(s, j, "stopped",
			     "%d rank(s) of generation %lld not confirmed stopped after %.1f s; "
			     "placing again anyway",
			     waiting, (long long)j->generation,
			     (double)(now - j->phase_since_ms) / 1000);
		return 0;
	}
	int64_t restarts = json_integer_value(json_object_get(job, "restarts"));
	int64_t since = json_integer_value(json_object_get(job, "updated_ms"));
	int64_t ready = since + (int64_t)backoff_ms(s, restarts);
	int64_t wall = wall_now(s);
	if (wall < ready) {
		wake_at(s, now + (uint64_t)(ready - wall));
		snprintf(j->reason, sizeof j->reason, "restart back-off: %.1f s left",
		         (double)(ready - wall) / 1000);
		return 0;
	}
	return 1;
}

/* ---- placement ---- */

static void mark_busy(struct place_node *pn, const struct id_index *pn_index, const char *node,
                      int64_t device)
{
	int k = node == NULL ? -1 : id_index_find(pn_index, pn, sizeof *pn, node);
	if (k >= 0 && device >= 0 && device < PLACE_MAX_DEVICES_PER_NODE)
		pn[k].busy_mask |= 1ull << device;
}

/* {"node-id": perf} of the nodes this leader has measured rates for (new reference). */
static json_t *perf_by_node(const struct sched *s)
{
	json_t *map = json_object();
	for (int i = 0; i < s->n_nodes; i++)
		if (s->nodes[i].perf != NULL)
			json_object_set(map, s->nodes[i].id, s->nodes[i].perf);
	return map;
}

/* Plans a parallel "auto" job against the cluster as it is now: the winner becomes its
 * placement request and the plan committed with its job.assign. Until a placement commits,
 * every pass plans again, so a job waiting for devices follows changes of the cluster; once
 * a plan is committed (job's "plan") every later placement, a restart's included, uses it.
 * A restarting job whose committed layout has more ranks than the cluster's schedulable
 * devices of its kind now (nodes died, or were cordoned) is planned again, the same way: its
 * ranks restore the checkpoint of the old layout, resharded (dataplane/trainer_ckpt.c).
 * Returns 0 when the job has a layout to place; otherwise the reason says why not. */
static int plan_job(struct sched *s, struct soft_job *j, const json_t *job, const json_t *nodes)
{
	struct yard_err err = {0};
	const json_t *recorded = json_object_get(job, "plan");
	struct jobspec_parallel p;
	j->replan_reason[0] = '\0';
	if (recorded != NULL) {
		if (autoplan_layout(recorded, &p, &err) != 0) {
			snprintf(j->reason, sizeof j->reason, "recorded plan: %s", err.msg);
			return -1;
		}
		int64_t world = (int64_t)p.dp * p.tp * p.pp;
		int capacity = -1, restarting = strcmp(j->state, "restarting") == 0;
		if (restarting && j->replan_wanted && j->replan_generation == j->generation) {
			snprintf(j->replan_reason, sizeof j->replan_reason, "%s", j->grow_reason);
		} else if (restarting) {
			json_t *perf = perf_by_node(s);
			capacity = autoplan_capacity(j->spec, nodes, perf);
			json_decref(perf);
		}
		if (j->replan_reason[0] == '\0' && (capacity < 0 || world <= capacity)) {
			json_decref(j->plan);
			j->plan = json_incref((json_t *)recorded);
			j->plan_committed = 1;
			j->req.dp = p.dp, j->req.tp = p.tp, j->req.pp = p.pp;
			j->world = (int)world;
			return 0;
		}
		if (j->replan_reason[0] == '\0')
			snprintf(j->replan_reason, sizeof j->replan_reason,
			         "its layout dp%d×tp%d×pp%d has %lld ranks, the cluster has %d "
			         "schedulable device(s) of its kind",
			         p.dp, p.tp, p.pp, (long long)world, capacity);
		j->plan_committed = 0;
	}
	json_t *perf = perf_by_node(s);
	json_t *answer = autoplan_run(j->spec, nodes, perf, AUTOPLAN_RECORD_RANKED, &err);
	json_decref(perf);
	if (answer == NULL) {
		snprintf(j->reason, sizeof j->reason, "parallel \"auto\": %s", err.msg);
		return -1;
	}
	json_t *record = autoplan_record(answer);
	json_decref(answer);
	if (record == NULL || autoplan_layout(record, &p, &err) != 0) {
		json_decref(record);
		snprintf(j->reason, sizeof j->reason, "parallel \"auto\": no plan");
		return -1;
	}
	if (recorded != NULL) /* planned again: the layout it had (check_auto_grow_back) */
		json_object_set(record, "replanned_from", json_object_get(recorded, "layout"));
	json_decref(j->plan);
	j->plan = record;
	j->req.dp = p.dp, j->req.tp = p.tp, j->req.pp = p.pp;
	j->world = p.dp * p.tp * p.pp;
	return 0;
}

static void mark_busy_all(struct place_node *pn, const struct id_index *pn_index,
                          const json_t *slots)
{
	size_t i;
	json_t *v;
	json_array_foreach(slots, i, v)
	    mark_busy(pn, pn_index, json_string_value(json_object_get(v, "node")),
	              json_integer_value(json_object_get(v, "device")));
}

/* (domain, id): the order place_index_build would sort them in */
static int pn_cmp(const void *a, const void *b)
{
	const struct place_node *x = a, *y = b;
	if (x->domain != y->domain)
		return x->domain - y->domain;
	return strcmp(x->id, y->id);
}

/* The node's topology domain: the value of its topology label numbered in the order values
 * are first seen (1..), 0 without the label (or past PLACE_MAX_DOMAINS values). */
static int node_domain(struct sched *s, const json_t *v)
{
	const char *value = s->cfg.topology_label[0] == '\0'
	                        ? NULL
	                        : json_string_value(json_object_get(json_object_get(v, "labels"),
	                                                            s->cfg.topology_label));
	if (value == NULL)
		return 0;
	if (s->domains == NULL)
		s->domains = json_object();
	const json_t *known = json_object_get(s->domains, value);
	if (known != NULL)
		return (int)json_integer_value(known);
	int domain = (int)json_object_size(s->domains) + 1;
	if (domain >= PLACE_MAX_DOMAINS)
		return 0;
	json_object_set_new(s->domains, value, json_integer(domain));
	return domain;
}

static void place_node_fill(struct sched *s, struct place_node *pn, const json_t *v)
{
	const json_t *devices = json_object_get(v, "devices");
	const char *kind = json_string_value(json_object_get(json_array_get(devices, 0), "kind"));
	snprintf(pn->id, sizeof pn->id, "%s", json_string_value(json_object_get(v, "id")));
	pn->schedulable = strcmp(json_string_value(json_object_get(v, "state")), "up") == 0 &&
	                  !json_is_true(json_object_get(v, "cordoned"));
	pn->kind = kind && strcmp(kind, "cuda") == 0 ? PLACE_DEVICE_CUDA : PLACE_DEVICE_CPU;
	pn->n_devices = (int)json_array_size(devices);
	pn->device_memory_mb =
	    json_integer_value(json_object_get(json_array_get(devices, 0), "memory_mb"));
	pn->domain = node_domain(s, v);
}

/* The placement view of the nodes list: the rows that changed are updated in place (a state
 * change, a cordon: positions stay, pn_version too); a node that came or went rebuilds it. */
static int pn_refresh(struct sched *s, const json_t *nodes)
{
	if (s->pn_valid && !s->pn_full) {
		size_t i, done = 0;
		json_t *v;
		json_array_foreach(s->pn_changed, i, v)
		{
			const char *id = json_string_value(v);
			int k = id_index_find(&s->pn_index, s->pn_base, sizeof *s->pn_base, id);
			const json_t *pos = json_object_get(s->nodes_pos, id);
			if (k < 0 || pos == NULL)
				break;
			/* a node that changed domain moves in the (domain, id) order: rebuild */
			struct place_node filled = s->pn_base[k];
			place_node_fill(s, &filled,
			                json_array_get(nodes, (size_t)json_integer_value(pos)));
			if (filled.domain != s->pn_base[k].domain)
				break;
			s->pn_base[k] = filled;
			done++;
		}
		if (done == json_array_size(s->pn_changed)) {
			json_array_clear(s->pn_changed);
			return 0;
		}
	}
	int n_nodes = (int)json_array_size(nodes);
	struct place_node *pn = calloc((size_t)(n_nodes ? n_nodes : 1), sizeof *pn);
	size_t i;
	json_t *v;
	if (pn == NULL)
		return -1;
	json_decref(s->domains);
	s->domains = NULL;
	json_array_foreach(nodes, i, v) place_node_fill(s, &pn[i], v);
	/* in (domain, id) order, which the per-pass index (place.h) then need not sort again */
	qsort(pn, (size_t)n_nodes, sizeof *pn, pn_cmp);
	if (id_index_rebuild(&s->pn_index, pn, sizeof *pn, n_nodes, n_nodes) != 0) {
		free(pn);
		return -1;
	}
	free(s->pn_base);
	s->pn_base = pn;
	s->n_pn = n_nodes;
	s->pn_version++;
	s->pn_valid = 1;
	s->pn_full = 0;
	json_array_clear(s->pn_changed);
	return 0;
}

/* j->layout_slots for the current placement view: the slots whose node is in the view and
 * whose device is in range (what mark_busy marks). */
static void layout_slots_build(struct sched *s, struct soft_job *j)
{
	free(j->layout_slots);
	j->n_layout_slots = 0;
	j->layout_slots = malloc((json_array_size(j->layout) + 1) * sizeof *j->layout_slots);
	if (j->layout_slots == NULL)
		return;
	size_t i;
	json_t *v;
	json_array_foreach(j->layout, i, v)
	{
		const char *node = json_string_value(json_object_get(v, "node"));
		int64_t device = json_integer_value(json_object_get(v, "device"));
		int k = node == NULL
		            ? -1
		            : id_index_find(&s->pn_index, s->pn_base, sizeof *s->pn_base, node);
		if (k >= 0 && device >= 0 && device < PLACE_MAX_DEVICES_PER_NODE) {
			j->layout_slots[j->n_layout_slots][0] = k;
			j->layout_slots[j->n_layout_slots][1] = (int)device;
			j->n_layout_slots++;
		}
	}
	j->layout_slots_version = s->pn_version;
}

/* Counts a placement proposed on view pn in a cluster with topology domains (place.h):
 * within one domain or across several (/metrics). */
static void count_domains(struct sched *s, const struct place_node *pn,
                          const struct place_slot *slots, int n)
{
	int first = n > 0 ? pn[slots[0].node].domain : 0, across = 0, labelled = first != 0;
	for (int r = 1; r < n; r++) {
		across |= pn[slots[r].node].domain != first;
		labelled |= pn[slots[r].node].domain != 0;
	}
	if (across)
		s->placed_across_domains_total++;
	else if (labelled)
		s->placed_one_domain_total++;
}

static void busy_mark(struct sched *s, struct place_node *pn);

/* The placement view of the nodes (pn_refresh first) with the busy devices marked: the
 * layouts of running jobs (cached per soft job, the same set as fsm_running_slots) and the
 * claims of assignments in flight. The scheduler's buffer, valid until the next call; NULL
 * without memory. */
static struct place_node *busy_view(struct sched *s)
{
	int n_nodes = s->n_pn;
	if (n_nodes > s->cap_busy || s->busy == NULL) {
		/* kept between passes: a fresh megabyte per pass at 10,000 nodes came as new
		 * pages to fault in and zero every time */
		int cap = YARD_MAX(YARD_MAX(n_nodes, 2 * s->cap_busy), 16);
		struct place_node *grown = realloc(s->busy, (size_t)cap * sizeof *grown);
		if (grown == NULL)
			return NULL;
		s->busy = grown;
		s->cap_busy = cap;
	}
	struct place_node *pn = s->busy;
	place_index_free(s->sub_index); /* an index over the view it replaces */
	s->sub_index = NULL;
	busy_mark(s, pn);
	s->busy_built = 1;
	s->busy_nodes_version = s->nodes_version;
	s->subs_since_view = 0;
	s->rows_read_at_view = s->rows_read;
	return pn;
}

/* pn[0 .. n_pn-1]: the placement view (pn_refresh first) with the busy devices of
 * busy_view marked; changes no placement state (it may read and keep a running job's
 * layout). */
static void busy_mark(struct sched *s, struct place_node *pn)
{
	memcpy(pn, s->pn_base, (size_t)s->n_pn * sizeof *pn);
	for (int k = 0; k < s->n_jobs; k++) {
		if (s->keys[k].kind != JK_RUNNING && !s->keys[k].proposing)
			continue; /* neither a layout nor a claim */
		struct soft_job *j = &s->jobs[k];
		if (j->row != NULL && j->row_running) {
			if (j->layout == NULL)
				j->layout = fsm_job_layout(s->fsm, j->id);
			if (j->layout_slots == NULL || j->layout_slots_version != s->pn_version)
				layout_slots_build(s, j);
			for (int r = 0; r < j->n_layout_slots; r++)
				pn[j->layout_slots[r][0]].busy_mask |= 1ull
				                                       << j->layout_slots[r][1];
		}
		mark_busy_all(pn, &s->pn_index, j->claim);
	}
	/* placed at submission, not applied yet: no job row holds them */
	for (int i = 0; i < s->n_subs; i++)
		if (s->subs[i].epoch == s->epoch)
			mark_busy_all(pn, &s->pn_index, s->subs[i].ranks);
}

#define PREEMPT_LOOK_MS 1000   /* a look for a job to preempt for, at most this often */
#define PREEMPT_WAITERS 4      /* waiting jobs a look considers, in queue order */
#define PREEMPT_MAX_VICTIMS 32 /* running jobs one preemption may stop, at most */
#define PREEMPT_DOMAINS 16     /* topology domains a preemption looks at (victims_for) */
/* a waiting job no preemption would help is looked at again this much later (a look places
 * gangs on copies of the whole cluster's view) */
#define PREEMPT_RETRY_MS 10000
/* the devices a preemption frees stay held for its job this long after its last victim's
 * restart went (the next pass places it there) */
#define PREEMPT_HOLD_MS 10000
static void preempt_choose(struct sched *s, struct soft_job *const *candidates,
                           const struct queue_job *q, int n_q, const struct place_node *pn,
                           int n_nodes);

/* deep: look at every candidate, else at the first cfg.queue_depth in queue order */
static void place(struct sched *s, struct soft_job *const *candidates, int n_cand,
                  const json_t *nodes, int deep)
{
	int budget = SCHED_IN_FLIGHT_MAX - s->n_in_flight;
	if (n_cand > 0 && budget <= 0)
		s->pass_capped = 1;
	if (n_cand == 0 || budget <= 0 || pn_refresh(s, nodes) != 0)
		return;
	int n_nodes = s->n_pn;
	struct place_node *pn = busy_view(s);
	(void)yard_grow((void **)&s->q, sizeof *s->q, &s->cap_q, n_cand); /* else: the check below */
	struct queue_job *q = s->q; /* kept between passes: no fresh pages every pass */
	int n_q = 0;
	if (pn == NULL || q == NULL || n_cand > s->cap_q)
		goto out;
	for (int c = 0; c < n_cand; c++) {
		struct soft_job *j = candidates[c];
		if (j->proposing)
			continue;
		if (j->parsed != 1) {
			snprintf(j->reason, sizeof j->reason, "%s", j->place_error);
			continue;
		}
		if (j->is_auto && plan_job(s, j, j->row, nodes) != 0)
			continue;
		struct queue_job *qj = &q[n_q++];
		qj->user = c;
		qj->id = j->id;
		qj->priority = (int)j->row_priority;
		qj->seq = j->row_seq;
		qj->pending_since_ms = j->row_updated_ms;
		qj->req = j->req;
		qj->shrink_dp = NULL;
		qj->n_shrink_dp = 0;
		if (j->n_shrink_dp > 0 && strcmp(j->state, "restarting") == 0) {
			/* the spec's dp first (a shrunk job grows back when it fits: checkpoints
			 * restore into any dp of the same tp x pp), then the smaller ones */
			qj->shrink_dp = j->shrink_dp;
			qj->n_shrink_dp = j->n_shrink_dp;
		}
		qj->slots = NULL; /* the pass allocates them for the jobs it looks at */
		qj->hold = NULL;
		qj->n_hold = 0;
		if (j->preempt_hold != NULL && j->preempt_hold_version == s->pn_version &&
		    mono_now(s) < j->preempt_hold_until_ms) {
			qj->hold = j->preempt_hold;
			qj->n_hold = j->n_preempt_hold;
		} else if (j->preempt_hold != NULL) {
			preempt_hold_drop(j);
		}
	}
	struct queue_policy policy = {.reserve_after_ms = (int64_t)s->cfg.reserve_after_ms,
	                              .max_attempts = deep ? 0 : s->cfg.queue_depth,
	                              .max_placed = budget};
	if (queue_pass(q, n_q, pn, n_nodes, &policy, wall_now(s)) == budget)
		s->pass_capped = 1;
	int waiting = 0;
	for (int k = 0; k < n_q; k++) {
		struct soft_job *j = candidates[q[k].user];
		/* the position among the jobs still waiting, in queue order */
		j->position = q[k].placed ? 0 : ++waiting;
		j->position_pass = s->pass_seq;
		if (!q[k].tried) {
			/* beyond this pass's depth: the reason of the last pass that looked stands,
			 * and the pass that looks at every job comes at most a second after the
			 * last */
			if (s->wake_ms > s->last_deep_ms + 1000)
				s->wake_ms = s->last_deep_ms + 1000;
			if (j->reason[0] == '\0')
				snprintf(j->reason, sizeof j->reason,
				         "queued behind %d job(s); the next full pass looks at it",
				         j->position - 1);
			continue;
		}
		if (!q[k].placed) {
			if (j->is_auto && j->plan != NULL) {
				const json_t *l = json_object_get(j->plan, "layout");
				snprintf(j->reason, sizeof j->reason,
				         "planned dp%lld×tp%lld×pp%lld: %s",
				         (long long)json_integer_value(json_object_get(l, "dp")),
				         (long long)json_integer_value(json_object_get(l, "tp")),
				         (long long)json_integer_value(json_object_get(l, "pp")),
				         q[k].reason);
			} else { /* the same size: a copy, not a format, for each of a deep queue */
				memcpy(j->reason, q[k].reason, strlen(q[k].reason) + 1);
			}
			if (!j->noted_waiting && n_nodes > 0) {
				if (s->n_in_flight >= SCHED_IN_FLIGHT_MAX) {
					s->pass_capped = 1; /* noted by a later pass */
				} else {
					j->noted_waiting = 1;
					note(s, j, "waiting", "%s", j->reason);
				}
			}
			continue;
		}
		s->queue_waiting--;
		preempt_hold_drop(j);
		int placed_world = q[k].dp * j->req.tp * j->req.pp;
		char shrink_reason[QUEUE_REASON_MAX] = "";
		if (q[k].dp < j->req.dp && !j->is_auto)
			snprintf(shrink_reason, sizeof shrink_reason, "%s", q[k].reason);
		j->reason[0] = '\0';
		count_domains(s, pn, q[k].slots, placed_world);
		json_t *ranks = json_array();
		for (int r = 0; r < placed_world; r++) { /* node ids: registered names, checked */
			json_t *slot = json_object();
			json_object_set_new_nocheck(slot, "node",
			                            json_string_nocheck(pn[q[k].slots[r].node].id));
			json_object_set_new_nocheck(slot, "device",
			                            json_integer(q[k].slots[r].device));
			json_array_append_new(ranks, slot);
		}
		char note_text[200] = "";
		int64_t restore_step = -1;
		if (strcmp(j->state, "restarting") == 0) {
			char dir[1100];
			int controller = desired_ckpt_dir(j->store, j->id, dir, sizeof dir) != 0;
			int64_t step = controller ? fsm_checkpoint_newest(s->fsm, j->id)
			                          : newest_checkpoint(dir);
			if (controller)
				restore_step = step;
			j->grow_after_step = step;
			if (step >= 0)
				snprintf(note_text, sizeof note_text,
				         "restoring from checkpoint step %lld%s", (long long)step,
				         controller ? " (controller store)" : "");
			else
				snprintf(note_text, sizeof note_text,
				         "no complete checkpoint: starting from step 0");
		} else {
			j->grow_after_step = -1; /* a first placement: any checkpoint is newer */
		}
		j->claim = json_deep_copy(ranks);
		json_t *args = json_pack("{s:s,s:I,s:o,s:s,s:I}", "id", j->id, "generation",
		                         (json_int_t)j->generation + 1, "ranks", ranks, "note",
		                         note_text, "restore_step", (json_int_t)restore_step);
		if (j->is_auto && j->plan != NULL && !j->plan_committed)
			json_object_set(args, "plan", j->plan);
		if (j->is_auto && j->replan_reason[0] != '\0')
			json_object_set_new(args, "replan_reason", json_string(j->replan_reason));
		j->replan_wanted = 0;
		j->grow_looked_devices = -1; /* a new generation: its own looks at growing, */
		j->grow_said[0] = '\0';      /* its own log line on staying, */
		free(j->growth);             /* and its own reason not to grow */
		j->growth = NULL;
		if (q[k].dp < j->req.dp) /* only a shrunk placement names its dp */
			json_object_set_new(args, "dp", json_integer(q[k].dp));
		if (shrink_reason[0] != '\0')
			json_object_set_new(args, "shrink_reason", json_string(shrink_reason));
		if (j->waiting_since_ns != 0) /* once a wait: not again when a proposal fails */
			yard_hist_note(&s->queue_wait_ms,
			               (double)(yard_now_mono_ns() - j->waiting_since_ns) / 1e6);
		j->waiting_since_ns = 0;
		propose_since(s, 0, j->id, "job.assign", args,
		              j->generation == 0 ? j->row_submitted_ms : 0);
	}
	if (s->cfg.preempt_after_ms > 0 && s->n_preempted == 0 &&
	    mono_now(s) - s->preempt_looked_ms >= PREEMPT_LOOK_MS)
		preempt_choose(s, candidates, q, n_q, pn, n_nodes);
out:
	for (int k = 0; k < n_q; k++)
		free(q[k].slots);
}

/* ---- drains ---- */

/* A draining node with no running slot and no running rank in its latest report is
 * drained. */
static void check_drains(struct sched *s, const json_t *nodes)
{
	size_t i, k;
	json_t *node, *v;
	json_array_foreach(nodes, i, node)
	{
		const char *id = json_string_value(json_object_get(node, "id"));
		const char *drain = json_string_value(json_object_get(node, "drain"));
		if (drain == NULL || strcmp(drain, "draining") != 0)
			continue;
		struct soft_node *n = node_get(s, id);
		if (n == NULL || n->proposing)
			continue;
		int busy = 0;
		/* a slot of a running job (its committed layout, cached per job) */
		for (int jk = 0; jk < s->n_jobs && !busy; jk++) {
			struct soft_job *j = &s->jobs[jk];
			if (s->keys[jk].kind != JK_RUNNING)
				continue;
			if (j->layout == NULL)
				j->layout = fsm_job_layout(s->fsm, j->id);
			json_array_foreach(j->layout, k, v) busy |=
			    strcmp(json_string_value(json_object_get(v, "node")), id) == 0;
		}
		if (strcmp(json_string_value(json_object_get(node, "state")), "down") != 0)
			json_array_foreach(n->ranks, k, v) busy |=
			    strcmp(json_string_value(json_object_get(v, "state")), "running") == 0;
		if (!busy)
			propose(s, 1, id, "node.drained", json_pack("{s:s}", "id", id));
	}
}

/* ---- the tick ---- */

static int job_active(const json_t *row)
{
	const char *state = json_string_value(json_object_get(row, "state"));
	return state != NULL && (strcmp(state, "pending") == 0 || strcmp(state, "running") == 0 ||
	                         strcmp(state, "restarting") == 0);
}

/* Stores row (takes ownership) as the job's latest active row, or forgets its row when the
 * job is no longer active. */
static void job_set_row(struct sched *s, json_t *row)
{
	/* news for the agents (sched_node_watch), counted whether or not a watch waits now
	 * (one may be on its way): the nodes of a new placement start ranks; those of the
	 * placement the job leaves (a cancel, failure, restart or move; a job that succeeded
	 * has no rank left to stop) stop them. Other row changes of a running job are none. */
	const char *id = json_string_value(json_object_get(row, "id"));
	const char *state = json_string_value(json_object_get(row, "state"));
	int64_t generation = json_integer_value(json_object_get(row, "generation"));
	int running = state != NULL && strcmp(state, "running") == 0;
	struct soft_job *prev = job_find(s, id);
	int moved = prev == NULL || !prev->row_running || prev->row_generation != generation;
	s->rows_read++;
	if (prev != NULL && prev->layout != NULL && (!running || moved) &&
	    (state == NULL || strcmp(state, "succeeded") != 0))
		layout_news(s, prev->layout);
	json_t *placed = NULL; /* a new placement's layout: read once, for the news and the job */
	if (running && moved) {
		placed = fsm_job_layout(s->fsm, id);
		layout_news(s, placed);
	}
	if (!job_active(row)) {
		if (prev != NULL) {
			json_decref(prev->row);
			prev->row = NULL;
			job_layout_forget(prev);
			key_of(s, prev)->kind = JK_NONE;
		}
		json_decref(placed);
		json_decref(row);
		return;
	}
	struct soft_job *j = job_get(s, row);
	if (j == NULL) {
		json_decref(placed);
		json_decref(row);
		return;
	}
	if (j->spec_view == NULL) {
		const json_t *parallel = json_object_get(json_object_get(row, "spec"), "parallel");
		j->spec_view =
		    parallel != NULL ? json_pack("{s:O}", "parallel", parallel) : json_object();
	}
	if (j->spec_view != NULL)
		json_object_set(row, "spec", j->spec_view);
	/* a layout is the generation's (only an assignment, which starts a new generation,
	 * changes it): kept while the job runs the same one, replaced by a new placement's */
	if (placed != NULL || !running || !j->row_running || j->row_generation != generation)
		job_layout_forget(j);
	if (placed != NULL)
		j->layout = placed;
	json_decref(j->row);
	j->row = row;
	snprintf(j->row_state, sizeof j->row_state, "%s",
	         json_string_value(json_object_get(row, "state")));
	j->row_running = strcmp(j->row_state, "running") == 0;
	j->row_pending = strcmp(j->row_state, "pending") == 0;
	j->row_generation = json_integer_value(json_object_get(row, "generation"));
	j->row_priority = json_integer_value(json_object_get(row, "priority"));
	j->row_seq = json_integer_value(json_object_get(row, "seq"));
	j->row_updated_ms = json_integer_value(json_object_get(row, "updated_ms"));
	j->row_submitted_ms = json_integer_value(json_object_get(row, "submitted_ms"));
	struct job_key *key = key_of(s, j);
	key->kind = j->row_running                            ? JK_RUNNING
	            : j->row_pending                          ? JK_PENDING
	            : strcmp(j->row_state, "restarting") == 0 ? JK_RESTARTING
	                                                      : JK_NONE;
	key->priority = j->row_priority;
	key->seq = j->row_seq;
	key->changed = 1;
	if (key->kind != JK_PENDING && key->kind != JK_RESTARTING)
		j->waiting_since_ns = 0;
	else if (j->waiting_since_ns == 0)
		j->waiting_since_ns = yard_now_mono_ns();
}

/* The spec of a job whose row the scheduler holds, or that this member's FSM just applied
 * the submission of (fsm_job_by_rowid_known): neither is parsed again. */
static const json_t *known_spec(void *data, const char *id)
{
	struct sched *s = data;
	struct soft_job *j = job_find(s, id);
	if (j != NULL && j->spec_view != NULL)
		return j->spec_view;
	return fsm_submitted_spec(s->fsm, id);
}

/* Brings the soft jobs' rows up to date: only the jobs the FSM's change journal names,
 * or every active job after a leadership change or when the journal overflowed. This
 * keeps a tick's cost proportional to what changed, not to the length of the queue. A
 * reread of every job goes RESYNC_CHUNK jobs per pass (a new leader with thousands of
 * queued jobs would otherwise hold its loop for a parse of each: ~70 µs a job). 1: a
 * reread is still going, and the soft jobs are not all there yet. */
#define RESYNC_CHUNK 64
static int refresh_jobs(struct sched *s)
{
	const int64_t *rowids;
	int n;
	uint64_t since_ns = fsm_jobs_changed_since_ns(s->fsm);
	if (since_ns != 0)
		yard_hist_note(&s->pickup_ms, (double)(yard_now_mono_ns() - since_ns) / 1e6);
	int all = fsm_jobs_changed_take(s->fsm, &rowids, &n);
	if (all || s->jobs_resync) {
		s->jobs_resync = 0;
		for (int k = 0; k < s->n_jobs; k++) {
			json_decref(s->jobs[k].row);
			s->jobs[k].row = NULL;
			job_layout_forget(&s->jobs[k]);
			s->keys[k].kind = JK_NONE;
		}
		/* jobs that change from here on are in the journal; the list covers the rest */
		free(s->resync_rowids);
		s->resync_rowids = fsm_jobs_active_rowids(s->fsm, &s->n_resync);
		s->resync_at = 0;
		s->resync_since_ms = mono_now(s);
		if (s->resync_rowids == NULL) {
			log_error("scheduler: no memory to reread the active jobs; trying again");
			s->jobs_resync = 1;
			return 1;
		}
		n = 0;
	}
	for (int k = 0; k < n; k++) {
		json_t *row = fsm_job_by_rowid_known(s->fsm, rowids[k], known_spec, s);
		if (row != NULL)
			job_set_row(s, row);
	}
	if (s->resync_rowids == NULL)
		return 0;
	int end = YARD_MIN(s->resync_at + RESYNC_CHUNK, s->n_resync);
	for (; s->resync_at < end; s->resync_at++) {
		json_t *row =
		    fsm_job_by_rowid_known(s->fsm, s->resync_rowids[s->resync_at], known_spec, s);
		if (row != NULL)
			job_set_row(s, row);
	}
	if (s->resync_at < s->n_resync)
		return 1;
	if (s->n_resync >= 1000) /* a deep queue: how long the leader waited to decide */
		log_info("scheduler: reread %d active jobs in %.1f s", s->n_resync,
		         (double)(mono_now(s) - s->resync_since_ms) / 1000);
	free(s->resync_rowids);
	s->resync_rowids = NULL;
	s->n_resync = s->resync_at = 0;
	return 0;
}

#define AUTO_GROW_CHECK_MS 5000 /* an auto job's look at growing, at most this often */
/* a plan that found nothing better is made again for as many devices when a node's measured
 * rates change (a node measured while other work kept its cores busy, measured again idle),
 * or after this long */
#define AUTO_GROW_RELOOK_MS 60000

/* The newest complete checkpoint of a job, in either store; -1: none. */
static int64_t job_newest_checkpoint(struct sched *s, const struct soft_job *j)
{
	char dir[1100];
	if (desired_ckpt_dir(j->store, j->id, dir, sizeof dir) != 0)
		return fsm_checkpoint_newest(s->fsm, j->id);
	return newest_checkpoint(dir);
}

/* Whether a job waits for devices or is being given some: a growing job would take them. */
static int devices_spoken_for(const struct sched *s)
{
	for (int k = 0; k < s->n_jobs; k++) {
		const struct job_key *key = &s->keys[k];
		if (key->kind == JK_PENDING || key->kind == JK_RESTARTING ||
		    (key->proposing && s->jobs[k].claim != NULL))
			return 1;
	}
	return 0;
}

/* Would a gang of req fit on the free devices plus those j runs on? trial: room for the n_nodes
 * nodes of pn, overwritten; *free_devices: how many devices req could use there. */
static int fits_with_own(struct sched *s, const struct place_node *pn, struct place_node *trial,
                         int n_nodes, const struct soft_job *j, const struct place_request *req,
                         int world, int *free_devices)
{
	memcpy(trial, pn, (size_t)n_nodes * sizeof *pn);
	size_t i;
	json_t *slot;
	json_array_foreach(j->layout, i, slot)
	{
		int n = id_index_find(&s->pn_index, trial, sizeof *trial,
		                      json_string_value(json_object_get(slot, "node")));
		int64_t device = json_integer_value(json_object_get(slot, "device"));
		if (n >= 0 && device >= 0 && device < PLACE_MAX_DEVICES_PER_NODE)
			trial[n].busy_mask &= ~(1ull << device);
	}
	*free_devices = 0;
	for (int n = 0; n < n_nodes; n++)
		*free_devices += place_node_free(&trial[n], req);
	struct place_slot *slots = calloc((size_t)world, sizeof *slots);
	char why[QUEUE_REASON_MAX];
	int fits =
	    slots != NULL && place_gang(trial, n_nodes, req, slots, why, (int)sizeof why) == 0;
	free(slots);
	return fits;
}

/* Asks the job's ranks on node for checkpoint request j->ckpt_request: its next heartbeat
 * answers carry it (heartbeat_answer), and its watch is answered now for that heartbeat. */
static void node_ask_checkpoint(struct sched *s, const char *node, const struct soft_job *j)
{
	struct soft_node *n = node != NULL ? node_find(s, node) : NULL;
	if (n == NULL)
		return;
	int i = 0;
	while (i < n->n_asks && strcmp(n->asks[i].job, j->id) != 0)
		i++;
	if (i < n->n_asks && n->asks[i].generation == j->generation &&
	    n->asks[i].request == j->ckpt_request)
		return; /* another rank of the job on this node */
	if (i == n->n_asks && n->n_asks == CKPT_ASKS_PER_NODE) {
		/* the oldest gives way (it may wait in vain: its restart then goes at its time) */
		memmove(&n->asks[0], &n->asks[1], (CKPT_ASKS_PER_NODE - 1) * sizeof n->asks[0]);
		i = --n->n_asks;
	}
	if (i == n->n_asks)
		n->n_asks++;
	snprintf(n->asks[i].job, sizeof n->asks[i].job, "%s", j->id);
	n->asks[i].generation = j->generation;
	n->asks[i].request = j->ckpt_request;
	node_nudge(s, node);
}

/* Whether job j's ranks are being asked for checkpoint request j->ckpt_request: a planned
 * restart waits for it, or the API asked and its time is not over. */
static int ckpt_asking(struct sched *s, const struct soft_job *j)
{
	return j->ckpt_asked_ms != 0 || mono_now(s) < j->ckpt_manual_until_ms;
}

/* A new checkpoint request for the ranks of j's generation: a number above every earlier one
 * (the leader's wall clock in ms, so also above a former leader's), carried to every node of
 * layout (node_ask_checkpoint). */
static void ckpt_ask(struct sched *s, struct soft_job *j, const json_t *layout)
{
	int64_t wall = wall_now(s);
	j->ckpt_request = wall > j->ckpt_request ? wall : j->ckpt_request + 1;
	size_t i;
	json_t *slot;
	json_array_foreach(layout, i, slot)
	    node_ask_checkpoint(s, json_string_value(json_object_get(slot, "node")), j);
}

/* The node's checkpoint requests still wanted, as heartbeat commands; the others are dropped. */
static void checkpoint_commands(struct sched *s, struct soft_node *n, json_t *commands)
{
	for (int i = 0; i < n->n_asks;) {
		const struct ckpt_ask *ask = &n->asks[i];
		const struct soft_job *j = job_find(s, ask->job);
		if (j == NULL || !ckpt_asking(s, j) || j->generation != ask->generation ||
		    j->ckpt_request != ask->request) {
			memmove(&n->asks[i], &n->asks[i + 1],
			        (size_t)(n->n_asks - i - 1) * sizeof n->asks[0]);
			n->n_asks--;
			continue;
		}
		/* after: a checkpoint newer than this step answers the request
		 * (checkpoint_settled), so ranks that saved one since, asked by another node's
		 * ranks, need not save again */
		json_array_append_new(commands,
		                      json_pack("{s:s,s:s,s:I,s:I,s:I}", "op", "checkpoint", "job",
		                                ask->job, "generation", (json_int_t)ask->generation,
		                                "request", (json_int_t)ask->request, "after",
		                                (json_int_t)j->ckpt_after));
		i++;
	}
}

static void reason_append(char *reason, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void reason_append(char *reason, size_t len, const char *fmt, ...)
{
	size_t used = strlen(reason);
	if (used + 1 >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(reason + used, len - used, fmt, ap);
	va_end(ap);
}

/* Whether a planned restart of running job j (a drain, a straggler's replacement, growing
 * back, a rollout's restart) may go now. A job that has stepped past its newest complete
 * checkpoint is first asked for one (checkpoint.before_restart_s > 0; by default for the
 * built-in trainer, not for command jobs): every node of its layout gets a
 * "checkpoint" command on its next heartbeat answer (its watch is answered for it), the agent
 * hands it to the ranks, and they agree in a step's loss allreduce on the step they all save.
 * The restart goes once a checkpoint newer than the newest at the request is complete, or
 * before_restart_s after the request; reason gets which (it is the restart's). A restart whose
 * proposal failed is not held up again for CKPT_TAKEN_MS; a later restart of the same
 * generation (one that was given up: a drain ended by an uncordon, a preemption whose job
 * went elsewhere) asks again, and so does one after a request no restart took (run_jobs
 * forgets it CKPT_TAKEN_MS after its time was up). */
static int checkpoint_first(struct sched *s, struct soft_job *j, const json_t *layout, char *reason,
                            size_t reason_len)
{
	return checkpoint_before(s, j, layout, "restart", reason, reason_len);
}

/* checkpoint_first before what ("restart", or "end" at a time limit) */
static int checkpoint_before(struct sched *s, struct soft_job *j, const json_t *layout,
                             const char *what, char *reason, size_t reason_len)
{
	uint64_t now = mono_now(s);
	if (j->before_restart_s <= 0 || j->step < 0 || layout == NULL ||
	    (j->ckpt_done_gen == j->generation && now - j->ckpt_done_ms < CKPT_TAKEN_MS))
		return 1;
	int64_t newest = job_newest_checkpoint(s, j);
	if (j->ckpt_asked_ms == 0) {
		if (newest >= j->step) {
			j->ckpt_done_gen = j->generation; /* nothing newer to save */
			j->ckpt_done_ms = now;
			return 1;
		}
		j->ckpt_after = newest;
		j->ckpt_asked_ms = now > 0 ? now : 1;
		ckpt_ask(s, j, layout);
		log_info("scheduler: job %s generation %lld: asked for a checkpoint before its "
		         "%s (%s); newest complete: step %lld, reported: step %lld",
		         j->id, (long long)j->generation, what, reason, (long long)newest,
		         (long long)j->step);
		char message[160];
		snprintf(message, sizeof message,
		         "its %s waits for a checkpoint (at most checkpoint.before_restart_s) the "
		         "ranks were asked for",
		         what);
		propose_job(s, j, "job.note",
		            json_pack("{s:s,s:I,s:s,s:s,s:s}", "id", j->id, "generation",
		                      (json_int_t)j->generation, "type", "waiting", "key",
		                      "checkpoint", "message", message));
	}
	uint64_t deadline = j->ckpt_asked_ms + (uint64_t)j->before_restart_s * 1000;
	if (newest > j->ckpt_after)
		reason_append(reason, reason_len, "; checkpoint step %lld saved first",
		              (long long)newest);
	else if (now >= deadline)
		reason_append(reason, reason_len,
		              "; no checkpoint newer than step %lld within %d s of asking",
		              (long long)j->ckpt_after, j->before_restart_s);
	else {
		wake_at(s, deadline);
		return 0;
	}
	log_info("scheduler: job %s generation %lld: %s", j->id, (long long)j->generation, reason);
	j->ckpt_asked_ms = 0;
	j->ckpt_done_gen = j->generation;
	j->ckpt_done_ms = now;
	return 1;
}

/* Whether the checkpoint checkpoint_first asked job j for is complete, or its time is up. */
static int checkpoint_settled(struct sched *s, struct soft_job *j, uint64_t now)
{
	return job_newest_checkpoint(s, j) > j->ckpt_after ||
	       now >= j->ckpt_asked_ms + (uint64_t)j->before_restart_s * 1000;
}

/* A rollout's policy "restart" restarts running jobs on a wave's nodes once they have a
 * checkpoint for it, as the scheduler's own planned restarts do (rollout_driver_restart_gate). */
static int rollout_restart_ready(void *data, const char *id, char *reason, size_t len)
{
	struct sched *s = data;
	struct soft_job *j = job_find(s, id);
	if (j == NULL || s->keys[j - s->jobs].kind != JK_RUNNING)
		return 1;
	if (j->layout == NULL)
		j->layout = fsm_job_layout(s->fsm, j->id);
	return checkpoint_first(s, j, j->layout, reason, len);
}

/* Restarts a running job without counting it (growing, a preemption), saying reason and the
 * checkpoint it restores, once the job has one for it (checkpoint_first); 1 when proposed, 0
 * while the job's ranks are saving one. */
static int propose_planned_restart(struct sched *s, struct soft_job *j, char *reason,
                                   size_t reason_len)
{
	size_t said = strlen(reason);
	if (!checkpoint_first(s, j, j->layout, reason, reason_len)) {
		reason[said] = '\0';
		return 0;
	}
	if (strlen(reason) == said)
		reason_append(reason, reason_len, "; from checkpoint step %lld",
		              (long long)job_newest_checkpoint(s, j));
	json_t *args =
	    json_pack("{s:s,s:I,s:s,s:i,s:b}", "id", j->id, "generation", (json_int_t)j->generation,
	              "reason", reason, "max_restarts", j->max_restarts, "drain", 1);
	if (j->step >= 0)
		json_object_set_new(args, "step", json_integer(j->step));
	if (j->has_loss)
		json_object_set_new(args, "loss", json_real(j->loss));
	propose_job(s, j, "job.restart", args);
	return 1;
}

/* Whether a restart of running job j to grow it loses nothing it need not: its generation
 * has completed a checkpoint since its placement, or its ranks save one when asked
 * (checkpoint.before_restart_s > 0: the restart first asks, checkpoint_first) and it has
 * trained past the step it started from (so a job with checkpoint.every_steps 0 grows too,
 * and one restarted a moment ago does not at once). A new leader waits for the next
 * checkpoint or step. */
static int grow_restart_ready(struct sched *s, struct soft_job *j)
{
	int64_t newest = job_newest_checkpoint(s, j);
	if (j->grow_after_step == INT64_MIN)
		j->grow_after_step = newest > j->step ? newest : j->step;
	return newest > j->grow_after_step ||
	       (j->before_restart_s > 0 && j->step > j->grow_after_step);
}

/* A running job that shrank (failure.allow_shrink_dp) grows back on its own: when its spec's
 * whole gang fits on the free devices plus its own, no job waits for devices, and a restart
 * loses nothing it need not (grow_restart_ready), the leader restarts it without counting a
 * restart; the re-placement tries the spec's dp first and its ranks restore the shrunk
 * checkpoint (any dp restores). */
static void check_grow_back(struct sched *s, const json_t *nodes)
{
	if (devices_spoken_for(s))
		return;
	int shrunk = 0;
	for (int k = 0; k < s->n_jobs; k++)
		if (s->keys[k].kind == JK_RUNNING && s->jobs[k].n_shrink_dp > 0)
			shrunk += effective_dp(&s->jobs[k]) < s->jobs[k].req.dp;
	if (shrunk == 0 || pn_refresh(s, nodes) != 0)
		return;
	int n_nodes = s->n_pn;
	struct place_node *pn = busy_view(s);
	struct place_node *trial = malloc((size_t)(n_nodes ? n_nodes : 1) * sizeof *trial);
	if (pn == NULL || trial == NULL)
		goto out;
	for (int k = 0; k < s->n_jobs; k++) {
		struct soft_job *j = &s->jobs[k];
		if (s->keys[k].kind != JK_RUNNING || j->proposing || j->parsed != 1 ||
		    j->n_shrink_dp == 0 || effective_dp(j) >= j->req.dp)
			continue;
		int free_devices;
		if (!fits_with_own(s, pn, trial, n_nodes, j, &j->req, j->world, &free_devices))
			continue;
		if (!grow_restart_ready(s, j))
			continue;
		char reason[256]; /* job.restart takes 256 bytes */
		snprintf(reason, sizeof reason,
		         "growing back to dp %d (runs dp %d): %d devices free for its %d ranks",
		         j->req.dp, effective_dp(j), free_devices, j->world);
		propose_planned_restart(s, j, reason, sizeof reason);
		break; /* one at a time: the next pass sees the devices it will take */
	}
out:
	free(trial);
}

/* "dpA×tpB×ppC" of a plan's or candidate's layout. */
static void layout_text(const json_t *plan, char *out, size_t len)
{
	const json_t *l = json_object_get(plan, "layout");
	snprintf(out, len, "dp%lld×tp%lld×pp%lld",
	         (long long)json_integer_value(json_object_get(l, "dp")),
	         (long long)json_integer_value(json_object_get(l, "tp")),
	         (long long)json_integer_value(json_object_get(l, "pp")));
}

/* Sets why running "auto" job j does not grow (NULL: nothing to say); 1 when that changed. */
static int growth_note(struct soft_job *j, const char *text)
{
	if (text == NULL ? j->growth == NULL : j->growth != NULL && strcmp(j->growth, text) == 0)
		return 0;
	free(j->growth);
	j->growth = text != NULL ? strdup(text) : NULL;
	return 1;
}

/* Says why running "auto" job j, which could have more devices now, does not grow yet: in its
 * "growth", and in the log when the reason changes, so that an operator asking why a job stays
 * small finds the answer. */
static void grow_held(struct soft_job *j, const char *fmt, ...)
{
	char why[300];
	int used = snprintf(why, sizeof why, "does not grow yet: ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why + used, sizeof why - (size_t)used, fmt, ap);
	va_end(ap);
	if (growth_note(j, why))
		log_info("scheduler: job %s could have more devices but %s", j->id, why);
}

/* A running parallel "auto" job grows when the cluster allows better: one that was planned
 * again for fewer devices (its plan names the layout it had: "replanned_from"), and one
 * planned for fewer devices than the cluster now has for it (its plan's "cluster" "devices":
 * nodes that were unmeasured, cordoned or down when it was placed). At most every
 * AUTO_GROW_CHECK_MS, when no job waits for devices and a restart loses nothing it need not
 * (grow_restart_ready), the planner plans it for the cluster as it is; when the winner has more
 * ranks than the job runs, predicts at most auto_grow_pct % of the committed plan's step time
 * and fits on the free devices plus the job's own, the leader restarts the job without
 * counting a restart, and its re-placement plans it again (replan_wanted; a new leader does
 * not know of it, and the job keeps its plan). */
static void check_auto_grow_back(struct sched *s, const json_t *nodes)
{
	uint64_t now = mono_now(s);
	struct place_node *pn = NULL, *trial = NULL;
	int spoken_for = -1;        /* devices_spoken_for, asked once a job qualifies */
	int cpu_now = -1, cuda_now; /* autoplan_devices, counted once a job asks */
	json_t *perf = NULL;        /* perf_by_node, made once a job asks */
	for (int k = 0; k < s->n_jobs; k++) {
		struct soft_job *j = &s->jobs[k];
		if (s->keys[k].kind != JK_RUNNING || !j->is_auto || j->proposing ||
		    j->parsed != 1 || j->row == NULL)
			continue;
		/* the checkpoint a restart to grow asked for is looked for on every pass, the rest
		 * of the cluster every AUTO_GROW_CHECK_MS */
		if (j->grow_asking && j->ckpt_asked_ms != 0
		        ? !checkpoint_settled(s, j, now)
		        : now - j->grow_checked_ms < AUTO_GROW_CHECK_MS)
			continue;
		j->grow_asking = 0;
		const json_t *plan = json_object_get(j->row, "plan");
		int replanned = json_object_get(plan, "replanned_from") != NULL;
		const json_t *planned_for =
		    json_object_get(json_object_get(plan, "cluster"), "devices");
		if (!replanned && !json_is_integer(planned_for))
			continue; /* a plan recorded without its cluster: nothing to compare */
		if (cpu_now < 0) {
			perf = perf_by_node(s);
			autoplan_devices(nodes, perf, &cpu_now, &cuda_now);
		}
		int devices_now = j->req.require_cuda  ? cuda_now
		                  : j->req.require_cpu ? cpu_now
		                                       : cpu_now + cuda_now;
		json_int_t ranks = json_integer_value(json_object_get(j->spec, "ranks"));
		if (ranks > 0 && ranks < devices_now)
			devices_now = (int)ranks;
		/* not planned again while the devices it could have are those of the last plan
		 * that found nothing better (the planner's cost grows with the cluster) */
		int no_more = !replanned && devices_now <= json_integer_value(planned_for);
		if (no_more)
			growth_note(j, NULL); /* no more devices to have: nothing to say */
		if (no_more || (devices_now == j->grow_looked_devices &&
		                j->grow_looked_perf == s->perf_version &&
		                now - j->grow_looked_ms < AUTO_GROW_RELOOK_MS)) {
			j->grow_checked_ms = now;
			continue;
		}
		if (spoken_for < 0)
			spoken_for = devices_spoken_for(s);
		if (spoken_for) {
			grow_held(j, "a job waits for devices, or is being given some");
			break;
		}
		j->grow_checked_ms = now;
		if (!grow_restart_ready(s, j)) {
			if (j->grow_after_step < 0)
				grow_held(j, "its ranks have reported no step yet");
			else
				grow_held(j, "a restart would lose steps: it waits for a checkpoint "
				             "newer than step %lld, or (its ranks save one when "
				             "asked) a step past it",
				          (long long)j->grow_after_step);
			continue;
		}
		struct jobspec_parallel cur, next;
		struct yard_err err = {0};
		if (autoplan_layout(plan, &cur, &err) != 0) {
			grow_held(j, "its committed plan: %s", err.msg);
			continue;
		}
		json_t *answer = autoplan_run(j->spec, nodes, perf, 1, &err);
		if (answer == NULL)
			grow_held(j, "planning for %d device(s) failed: %s", devices_now, err.msg);
		const json_t *best = json_array_get(json_object_get(answer, "candidates"), 0);
		double running_ms = json_number_value(json_object_get(plan, "step_ms"));
		double best_ms = json_number_value(json_object_get(best, "step_ms"));
		int better = best != NULL && autoplan_layout(best, &next, &err) == 0 &&
		             next.dp * next.tp * next.pp > cur.dp * cur.tp * cur.pp &&
		             best_ms * 100 <= s->cfg.auto_grow_pct * running_ms;
		char was[64], now_text[64];
		layout_text(plan, was, sizeof was);
		layout_text(best, now_text, sizeof now_text);
		json_decref(answer);
		if (!better) {
			j->grow_looked_devices = devices_now;
			j->grow_looked_ms = now;
			j->grow_looked_perf = s->perf_version;
			if (best == NULL)
				continue; /* planning failed: grow_held said why */
			char why[300];
			snprintf(why, sizeof why,
			         "stays %s (%.1f ms per step predicted): the best plan for the "
			         "cluster now, %s, is predicted at %.1f ms (grows at %d %% or less, "
			         "--auto-grow-pct)",
			         was, running_ms, now_text, best_ms, s->cfg.auto_grow_pct);
			growth_note(j, why);
			/* logged once per best layout: why a job that lost devices stays small */
			if (strcmp(j->grow_said, now_text) != 0) {
				snprintf(j->grow_said, sizeof j->grow_said, "%s", now_text);
				log_info("scheduler: job %s %s", j->id, why);
			}
			continue;
		}
		if (pn == NULL) {
			if (pn_refresh(s, nodes) != 0 || (pn = busy_view(s)) == NULL)
				break;
			trial = malloc((size_t)(s->n_pn ? s->n_pn : 1) * sizeof *trial);
			if (trial == NULL)
				break;
		}
		struct place_request req = j->req;
		req.dp = next.dp, req.tp = next.tp, req.pp = next.pp;
		int world = next.dp * next.tp * next.pp, free_devices;
		if (!fits_with_own(s, pn, trial, s->n_pn, j, &req, world, &free_devices)) {
			grow_held(j, "%s (%d ranks) does not fit on the free devices and its own",
			          now_text, world);
			continue;
		}
		growth_note(j, NULL);
		if (replanned)
			snprintf(
			    j->grow_reason, sizeof j->grow_reason,
			    "growing back: %s (%d ranks) is predicted at %.1f ms per step, the "
			    "running %s at %.1f ms",
			    now_text, world, best_ms, was, running_ms);
		else
			snprintf(j->grow_reason, sizeof j->grow_reason,
			         "growing: %s (%d ranks) is predicted at %.1f ms per step, the "
			         "running %s at %.1f ms (planned for %lld device(s), %d now)",
			         now_text, world, best_ms, was, running_ms,
			         (long long)json_integer_value(planned_for), devices_now);
		char reason[256]; /* job.restart takes 256 bytes */
		snprintf(reason, sizeof reason, "%s", j->grow_reason);
		if (propose_planned_restart(s, j, reason, sizeof reason)) {
			j->replan_wanted = 1;
			j->replan_generation = j->generation;
		} else {
			j->grow_asking = 1; /* its ranks were asked for a checkpoint */
		}
		break; /* one at a time: the next pass sees the devices it will take */
	}
	free(trial);
	json_decref(perf);
}

/* ---- preemption ---- */

/* The order victims are taken in: lowest priority first, then the most recently (re)started,
 * then the latest submitted. */
static int victim_cmp(const void *a, const void *b)
{
	const struct soft_job *x = *(struct soft_job *const *)a, *y = *(struct soft_job *const *)b;
	if (x->row_priority != y->row_priority)
		return x->row_priority < y->row_priority ? -1 : 1;
	if (x->phase_since_ms != y->phase_since_ms)
		return x->phase_since_ms > y->phase_since_ms ? -1 : 1;
	return x->row_seq > y->row_seq ? -1 : x->row_seq < y->row_seq;
}

/* Whether req fits on pn (the pass's view) with the devices of the victims v[0, n) freed,
 * except skip (-1: none) and the NULL ones, and, with domain >= 0, the nodes of other
 * topology domains left out. trial: room for n_nodes nodes; slots: room for the gang. */
static int fits_without(const struct place_node *pn, int n_nodes, struct soft_job *const *v, int n,
                        int skip, int domain, const struct place_request *req,
                        struct place_node *trial, struct place_slot *slots)
{
	memcpy(trial, pn, (size_t)n_nodes * sizeof *pn);
	for (int i = 0; domain >= 0 && i < n_nodes; i++)
		if (trial[i].domain != domain)
			trial[i].schedulable = 0;
	for (int i = 0; i < n; i++) {
		if (i == skip || v[i] == NULL)
			continue;
		for (int r = 0; r < v[i]->n_layout_slots; r++)
			trial[v[i]->layout_slots[r][0]].busy_mask &=
			    ~(1ull << v[i]->layout_slots[r][1]);
	}
	char why[QUEUE_REASON_MAX];
	return place_gang(trial, n_nodes, req, slots, why, (int)sizeof why) == 0;
}

/* Whether job j runs on a node of topology domain d of the view pn. */
static int runs_in_domain(const struct soft_job *j, const struct place_node *pn, int d)
{
	for (int r = 0; r < j->n_layout_slots; r++)
		if (pn[j->layout_slots[r][0]].domain == d)
			return 1;
	return 0;
}

/* The victims among cand[0, n_cand) (in victim_cmp order; with domain >= 0, those running
 * in it, the gang placed within it): taken in order until the gang fits, then each one it
 * fits without dropped again (the later ones first, so the lowest priorities stay). Writes
 * at most PREEMPT_MAX_VICTIMS into v; returns how many, 0: none would do. */
static int pick_victims(const struct place_node *pn, int n_nodes, struct soft_job *const *cand,
                        int n_cand, int domain, const struct place_request *req,
                        struct place_node *trial, struct place_slot *slots, struct soft_job **v)
{
	int n = 0, found = 0;
	for (int i = 0; i < n_cand && n < PREEMPT_MAX_VICTIMS && !found; i++) {
		if (domain >= 0 && !runs_in_domain(cand[i], pn, domain))
			continue;
		v[n++] = cand[i];
		found = fits_without(pn, n_nodes, v, n, -1, domain, req, trial, slots);
	}
	if (!found)
		return 0;
	for (int i = n - 1; i >= 0; i--)
		if (fits_without(pn, n_nodes, v, n, i, domain, req, trial, slots))
			v[i] = NULL;
	int kept = 0;
	for (int i = 0; i < n; i++)
		if (v[i] != NULL)
			v[kept++] = v[i];
	return kept;
}

static int64_t top_priority(struct soft_job *const *v, int n)
{
	int64_t top = INT64_MIN;
	for (int i = 0; i < n; i++)
		top = YARD_MAX(top, v[i]->row_priority);
	return top;
}

/* Victims for waiting job w (request req) among the running jobs of lower priority, as
 * pick_victims takes them on the pass's view pn. In a cluster with topology domains
 * (place.h) whose gang the victims found would place across domains, the victims of the
 * domain that frees room for the whole gang are taken instead, when one does with no more
 * victims (fewest, then the lowest priority among them, then the domain met first in
 * victim order; of the first PREEMPT_DOMAINS domains the candidates run in): a preemption
 * frees one domain
 * rather than scattered devices, but never stops more jobs for it. Writes at most
 * PREEMPT_MAX_VICTIMS into v; returns how many, 0: none would do. */
static int victims_for(struct sched *s, const struct soft_job *w, const struct place_request *req,
                       const struct place_node *pn, int n_nodes, struct soft_job **v)
{
	int n_cand = 0, n = 0, world = req->dp * req->tp * req->pp;
	struct soft_job **cand = malloc((size_t)(s->n_jobs + 1) * sizeof *cand);
	struct place_node *trial = malloc((size_t)(n_nodes ? n_nodes : 1) * sizeof *trial);
	struct place_slot *slots = calloc((size_t)world + 1, sizeof *slots);
	if (cand == NULL || trial == NULL || slots == NULL)
		goto out;
	for (int k = 0; k < s->n_jobs; k++) {
		struct soft_job *j = &s->jobs[k];
		if (s->keys[k].kind == JK_RUNNING && !j->proposing && j->row_running &&
		    j->row_priority < w->row_priority && j->preempted_by[0] == '\0' &&
		    j->layout_slots != NULL && j->layout_slots_version == s->pn_version)
			cand[n_cand++] = j;
	}
	qsort(cand, (size_t)n_cand, sizeof *cand, victim_cmp);
	n = pick_victims(pn, n_nodes, cand, n_cand, -1, req, trial, slots, v);
	int across = 0;
	if (n > 0 && fits_without(pn, n_nodes, v, n, -1, -1, req, trial, slots))
		for (int r = 1; r < world; r++)
			across |= pn[slots[r].node].domain != pn[slots[0].node].domain;
	if (!across)
		goto out;
	int domains[PREEMPT_DOMAINS], n_domains = 0, best_n = 0;
	struct soft_job *best[PREEMPT_MAX_VICTIMS], *tried[PREEMPT_MAX_VICTIMS];
	for (int i = 0; i < n_cand && n_domains < PREEMPT_DOMAINS; i++)
		for (int r = 0; r < cand[i]->n_layout_slots && n_domains < PREEMPT_DOMAINS; r++) {
			int d = pn[cand[i]->layout_slots[r][0]].domain, seen = 0;
			for (int k = 0; k < n_domains && !seen; k++)
				seen = domains[k] == d;
			if (!seen)
				domains[n_domains++] = d;
		}
	for (int k = 0; k < n_domains; k++) {
		int m =
		    pick_victims(pn, n_nodes, cand, n_cand, domains[k], req, trial, slots, tried);
		if (m == 0 || m > n)
			continue;
		if (best_n == 0 || m < best_n ||
		    (m == best_n && top_priority(tried, m) < top_priority(best, best_n))) {
			memcpy(best, tried, (size_t)m * sizeof *best);
			best_n = m;
		}
	}
	if (best_n > 0) {
		memcpy(v, best, (size_t)best_n * sizeof *v);
		n = best_n;
	}
out:
	free(cand);
	free(trial);
	free(slots);
	return n;
}

/* Holds for w the devices its gang (req) takes on pn with the devices of its victims v[0, n)
 * freed (w->preempt_hold). Without memory, nothing is held. */
static void preempt_hold_set(struct sched *s, struct soft_job *w, const struct place_request *req,
                             const struct place_node *pn, int n_nodes, struct soft_job *const *v,
                             int n)
{
	int world = req->dp * req->tp * req->pp;
	struct place_node *trial = malloc((size_t)(n_nodes ? n_nodes : 1) * sizeof *trial);
	struct place_slot *slots = calloc((size_t)world + 1, sizeof *slots);
	preempt_hold_drop(w);
	if (trial != NULL && slots != NULL &&
	    fits_without(pn, n_nodes, v, n, -1, -1, req, trial, slots)) {
		w->preempt_hold = slots;
		w->n_preempt_hold = world;
		w->preempt_hold_version = s->pn_version;
		w->preempt_hold_until_ms = mono_now(s) + PREEMPT_HOLD_MS;
		slots = NULL;
	}
	free(trial);
	free(slots);
}

/* A job that has waited cfg.preempt_after_ms for devices (pending, or restarting after a
 * failure) and would fit if running jobs of lower priority gave theirs up preempts them: the
 * first such job in queue order (of the first PREEMPT_WAITERS waiting that long) marks the
 * fewest victims victims_for finds, and preempt_continue restarts them, each first saving a
 * checkpoint as every planned restart does (checkpoint_first), not counted against their
 * max_restarts; they then wait in the queue, behind it. One preemption at a time: the next
 * look comes once every victim's restart went. Called by place() with its pass's queue q in
 * queue order and its view pn (this pass's placements marked). */
static void preempt_choose(struct sched *s, struct soft_job *const *candidates,
                           const struct queue_job *q, int n_q, const struct place_node *pn,
                           int n_nodes)
{
	uint64_t now = mono_now(s);
	s->preempt_looked_ms = now;
	struct soft_job *v[PREEMPT_MAX_VICTIMS];
	int64_t wall = wall_now(s);
	for (int k = 0, looked = 0; k < n_q && looked < PREEMPT_WAITERS; k++) {
		struct soft_job *w = candidates[q[k].user];
		if (q[k].placed || !q[k].tried || w->preempt_hold != NULL)
			continue; /* (one holding devices waits for them) */
		int fits_empty = place_fits_empty(pn, n_nodes, &q[k].req);
		int n = 0;
		if (!w->proposing && now - w->phase_since_ms >= s->cfg.preempt_after_ms &&
		    (w->preempt_found_none_ms == 0 ||
		     now - w->preempt_found_none_ms >= PREEMPT_RETRY_MS)) {
			looked++;
			if (fits_empty) /* else not even a cluster of free devices would do */
				n = victims_for(s, w, &q[k].req, pn, n_nodes, v);
			w->preempt_found_none_ms = n == 0 ? now : 0;
		}
		if (n == 0) {
			/* a job keeping the free devices for itself (queue.h) is ahead of those
			 * behind it: devices freed for them would wait for it */
			if (fits_empty && s->cfg.reserve_after_ms > 0 &&
			    wall - q[k].pending_since_ms >= (int64_t)s->cfg.reserve_after_ms)
				return;
			continue;
		}
		char names[300] = "";
		for (int i = 0; i < n; i++) {
			snprintf(v[i]->preempted_by, sizeof v[i]->preempted_by, "%s", w->id);
			snprintf(
			    v[i]->preempt_reason, sizeof v[i]->preempt_reason,
			    "preempted by job %s (priority %lld, this job's %lld), which waited "
			    "%.0f s for devices",
			    w->id, (long long)w->row_priority, (long long)v[i]->row_priority,
			    (double)(now - w->phase_since_ms) / 1000);
			reason_append(names, sizeof names, "%s%s", i ? ", " : "", v[i]->id);
		}
		s->n_preempted = n;
		preempt_hold_set(s, w, &q[k].req, pn, n_nodes, v, n);
		log_info(
		    "scheduler: job %s (priority %lld) waited %.1f s for devices: preempting %s",
		    w->id, (long long)w->row_priority, (double)(now - w->phase_since_ms) / 1000,
		    names);
		char message[400];
		snprintf(message, sizeof message,
		         "preempting job(s) of lower priority for their devices: %s", names);
		propose_job(s, w, "job.note",
		            json_pack("{s:s,s:I,s:s,s:s,s:s}", "id", w->id, "generation",
		                      (json_int_t)w->generation, "type", "waiting", "key",
		                      "preempting", "message", message));
		return;
	}
}

/* Restarts the jobs preempt_choose marked once their checkpoint is saved (checkpoint_first),
 * and forgets a mark once the job no longer runs or the job it was for no longer waits
 * (placed elsewhere, cancelled). Counts the marks left (n_preempted). */
static void preempt_continue(struct sched *s)
{
	if (s->n_preempted == 0)
		return;
	int marked = 0;
	for (int k = 0; k < s->n_jobs; k++) {
		struct soft_job *j = &s->jobs[k];
		if (j->preempted_by[0] == '\0')
			continue;
		if (j->proposing) {
			marked++;
			continue;
		}
		struct soft_job *w = job_find(s, j->preempted_by);
		int wk = w != NULL ? s->keys[w - s->jobs].kind : JK_NONE;
		if (s->keys[k].kind != JK_RUNNING) {
			j->preempted_by[0] = '\0'; /* its restart went (or it ended) */
			continue;
		}
		if (w == NULL || (wk != JK_PENDING && wk != JK_RESTARTING)) {
			log_info("scheduler: job %s is no longer preempted: job %s does not wait "
			         "for devices any more",
			         j->id, j->preempted_by);
			j->preempted_by[0] = '\0';
			continue;
		}
		if (w->preempt_hold != NULL) /* held while its victims restart, and a while after */
			w->preempt_hold_until_ms = mono_now(s) + PREEMPT_HOLD_MS;
		char reason[256]; /* job.restart takes 256 bytes */
		snprintf(reason, sizeof reason, "%s", j->preempt_reason);
		if (propose_planned_restart(s, j, reason, sizeof reason))
			s->preemptions_total++;
		marked++;
	}
	s->n_preempted = marked;
}

/* Queue order of two soft jobs by their keys: higher priority first, then submission order,
 * then id (as queue_pass sorts). */
static int key_before(const struct sched *s, int a, int b)
{
	const struct job_key *x = &s->keys[a], *y = &s->keys[b];
	if (x->priority != y->priority)
		return x->priority > y->priority;
	if (x->seq != y->seq)
		return x->seq < y->seq;
	return strcmp(s->jobs[a].id, s->jobs[b].id) < 0;
}

/* Restores the heap order of idx[0, depth) below p: each job comes no earlier in queue
 * order than its children (the root is the latest). */
static void sift_down(const struct sched *s, int *idx, int depth, int p)
{
	for (int c; (c = 2 * p + 1) < depth; p = c) {
		if (c + 1 < depth && key_before(s, idx[c], idx[c + 1]))
			c++;
		if (!key_before(s, idx[p], idx[c]))
			break;
		int tmp = idx[p];
		idx[p] = idx[c];
		idx[c] = tmp;
	}
}

/* Moves the first depth jobs in queue order among idx[0, n) to idx[0, depth), in no
 * particular order: a heap of the best depth seen so far, its worst at the root. O(n log
 * depth), and one comparison for most of a long queue of equal priority. */
static void select_first(const struct sched *s, int *idx, int n, int depth)
{
	for (int i = depth / 2 - 1; i >= 0; i--)
		sift_down(s, idx, depth, i);
	for (int i = depth; i < n; i++) {
		if (!key_before(s, idx[i], idx[0]))
			continue;
		idx[0] = idx[i];
		sift_down(s, idx, depth, 0);
	}
}

/* Removes the released jobs from the table once they are a quarter of it (order-preserving,
 * so the table stays in submission order and a pass's queue is usually sorted already);
 * until then they stay as unfindable slots, so a job finishing does not move every job
 * behind it on every pass. */
static void compact_jobs(struct sched *s)
{
	if (s->n_dead == 0 || 4 * s->n_dead < s->n_jobs)
		return;
	int kept = 0;
	for (int k = 0; k < s->n_jobs; k++) {
		if (s->keys[k].dead)
			continue;
		if (kept != k) {
			s->jobs[kept] = s->jobs[k];
			s->keys[kept] = s->keys[k];
		}
		kept++;
	}
	s->n_jobs = kept;
	s->n_dead = 0;
	id_index_rebuild(&s->job_index, s->jobs, sizeof *s->jobs, s->n_jobs, 0);
}

/* full: also look at every running job's ranks and at the draining nodes (a tick); a kick
 * after a job change only places, so its cost follows the queue, not the running ranks.
 * A pass reads the jobs' keys, and a job itself only when its row changed, it runs (full
 * passes), restarts, or is among the candidates placed: the first cfg.queue_depth pending
 * jobs in queue order, or every one in a deep pass (at most a second apart). */
/* Whether soft job k is a pending job that names others in its spec's "after" (a job placed
 * once waits for nothing more). */
static int waits_for_others(const struct sched *s, int k)
{
	return s->jobs[k].after != NULL && !s->keys[k].dead && s->keys[k].kind == JK_PENDING;
}

int sched_job_awaited_by(struct sched *s, const char *id, char *out, size_t out_len)
{
	if (!s->leading)
		return 0;
	for (int k = 0; k < s->n_jobs; k++) {
		const struct soft_job *j = &s->jobs[k];
		if (!waits_for_others(s, k))
			continue;
		for (size_t i = 0; i < json_array_size(j->after); i++)
			if (strcmp(json_string_value(json_array_get(j->after, i)), id) == 0) {
				snprintf(out, out_len, "%s", j->id);
				return 1;
			}
	}
	return 0;
}

/* Whether every job pending job j waits for (spec "after") has succeeded. While one is
 * active, j's reason names it; when one has ended otherwise (failed, cancelled, deleted), j
 * fails saying which. Jobs found succeeded are remembered (after_met). */
static int after_met(struct sched *s, struct soft_job *j)
{
	size_t i;
	json_t *v;
	json_array_foreach(j->after, i, v)
	{
		const char *id = json_string_value(v);
		if (j->after_met & (1u << i))
			continue;
		struct soft_job *dep = job_find(s, id);
		if (dep != NULL && key_of(s, dep)->kind != JK_NONE) {
			snprintf(j->reason, sizeof j->reason,
			         "waits for job %s (%s) to succeed (after)", id, dep->state);
			return 0;
		}
		struct yard_err err = {0};
		json_t *row = fsm_job_get(s->fsm, id, &err);
		const char *state = json_string_value(json_object_get(row, "state"));
		if (state != NULL && strcmp(state, "succeeded") == 0) {
			j->after_met |= 1u << i;
			json_decref(row);
			continue;
		}
		if (state != NULL && strcmp(state, "failed") != 0 &&
		    strcmp(state, "cancelled") != 0) { /* active, not read by this leader yet */
			snprintf(j->reason, sizeof j->reason,
			         "waits for job %s (%s) to succeed (after)", id, state);
			json_decref(row);
			return 0;
		}
		char reason[256];
		snprintf(reason, sizeof reason, "job %s it waited for (after) %s%s", id,
		         state != NULL ? "ended " : "was deleted", state != NULL ? state : "");
		json_decref(row);
		log_info("scheduler: job %s: %s", j->id, reason);
		propose_job(s, j, "job.finish",
		            json_pack("{s:s,s:I,s:s,s:s}", "id", j->id, "generation",
		                      (json_int_t)j->generation, "state", "failed", "reason",
		                      reason));
		return 0;
	}
	return 1;
}

static void run_jobs(struct sched *s, const json_t *nodes, uint64_t now, int full)
{
	if (refresh_jobs(s) != 0) {
		s->dirty = 1; /* the next pass (after this loop iteration: on_kick) reads on */
		return;
	}
	s->slow_applied = 0; /* the submissions applied so far are in the rows just read */
	/* a submission whose end was never reported (none takes a minute to commit) holds
	 * no devices and no place in line for ever */
	int kept = 0;
	for (int i = 0; i < s->n_subs; i++) {
		if (s->subs[i].epoch == s->epoch && wall_now(s) - s->subs[i].wall_ms < 60000)
			s->subs[kept++] = s->subs[i];
		else
			json_decref(s->subs[i].ranks);
	}
	s->n_subs = kept;
	if (s->nodes_by_id == NULL || s->nodes_by_id_version != s->nodes_version) {
		/* rebuilt only when the nodes list changed, not on every pass */
		size_t i;
		json_t *v;
		json_decref(s->nodes_by_id);
		s->nodes_by_id = json_object();
		json_array_foreach(nodes, i, v)
		    json_object_set(s->nodes_by_id, json_string_value(json_object_get(v, "id")), v);
		s->nodes_by_id_version = s->nodes_version;
	}
	json_t *nodes_by_id = json_incref(s->nodes_by_id);
	s->pass_seq++;
	s->pass_capped = 0;
	int check_all = full && (now - s->last_check_all_ms >= CHECK_ALL_MS ||
	                         s->check_all_nodes_version != s->nodes_version);
	if (check_all) {
		s->last_check_all_ms = now;
		s->check_all_nodes_version = s->nodes_version;
	}
	if (s->cap_pass_buf < s->n_jobs + 1) {
		int cap = YARD_MAX(s->n_jobs + 1, 2 * s->cap_pass_buf);
		int *grown = realloc(s->pass_buf, (size_t)cap * sizeof *grown);
		if (grown != NULL) {
			s->pass_buf = grown;
			s->cap_pass_buf = cap;
		}
	}
	/* pending candidates from the front of pass_buf (in table order: a deep pass's queue
	 * is then usually sorted already), restarting ones from the back */
	int *buf = s->cap_pass_buf >= s->n_jobs + 1 ? s->pass_buf : NULL;
	int n_restart = 0, n_pend = 0, n_active = 0;
	/* Nothing below adds soft jobs, so j stays valid (proposals only flag them). */
	for (int k = 0; buf != NULL && k < s->n_jobs; k++) {
		struct job_key *key = &s->keys[k];
		if (key->dead)
			continue;
		if (key->kind == JK_NONE) {
			if (!key->proposing) { /* no longer active and nothing in flight */
				job_release(&s->jobs[k]);
				key->dead = 1;
				s->n_dead++;
			}
			continue;
		}
		struct soft_job *j = &s->jobs[k];
		n_active++;
		if (key->changed) {
			/* the phase changes only with the row */
			key->changed = 0;
			if (strcmp(j->state, j->row_state) != 0 ||
			    j->generation != j->row_generation) {
				snprintf(j->state, sizeof j->state, "%s", j->row_state);
				j->generation = j->row_generation;
				j->phase_since_ms = now;
				j->noted_waiting = j->noted_running = j->noted_progress =
				    j->stopped = 0;
				j->ckpt_asked_ms = j->ckpt_manual_until_ms = 0;
				j->grow_asking = 0;
				j->position = 0;
				j->reason[0] = '\0';
				straggler_reset(j);
				if (j->row_running)
					j->step = -1, j->has_loss = 0;
			}
			j->check_due = 1;
		}
		if (key->kind != JK_PENDING && j->time_limit_s > 0) {
			/* a look at the job when its time limit is reached */
			int64_t left = time_left_ms(s, j);
			if (left <= 0)
				j->check_due = 1;
			else if (left < INT64_MAX)
				wake_at(s, now + (uint64_t)left);
		}
		if (key->kind == JK_RUNNING) {
			/* a checkpoint asked for before a restart (checkpoint_first): a pass and
			 * a look at the job when its wait is over */
			if (j->ckpt_asked_ms != 0) {
				uint64_t over =
				    j->ckpt_asked_ms + (uint64_t)j->before_restart_s * 1000;
				if (now >= over + CKPT_TAKEN_MS)
					j->ckpt_asked_ms = 0; /* no restart took it: given up */
				else if (now >= over)
					j->check_due = 1;
				else
					wake_at(s, over);
			}
			if (!full || !(j->check_due || check_all))
				continue;
			if (s->n_in_flight >= SCHED_IN_FLIGHT_MAX) {
				/* its news may be a proposal (a finish, a note): a later pass, once
				 * those under way complete */
				j->check_due = 1;
				s->pass_capped = 1;
				continue;
			}
			j->check_due = 0;
			if (j->layout == NULL)
				j->layout = fsm_job_layout(s->fsm, j->id);
			check_running(s, j, j->layout, nodes_by_id, now);
		} else if (key->kind == JK_PENDING) {
			if (!key->proposing && (j->after == NULL || after_met(s, j)))
				buf[n_pend++] = k;
		} else if (check_restarting(s, j, j->row, nodes_by_id, now)) {
			buf[s->n_jobs - ++n_restart] = k;
		}
	}
	if (buf != NULL) {
		s->n_active = n_active;
		/* the submissions in flight are not soft jobs yet (one applied and not reported
		 * done counts twice for a moment: a refusal, never a pass over the bound) */
		s->n_admitted = s->n_subs;
	}
	if (buf != NULL) {
		int depth = s->cfg.queue_depth;
		int deep = depth <= 0 || n_pend <= depth || now - s->last_deep_ms >= 1000;
		int beyond =
		    deep ? 0 : n_pend - depth; /* pending jobs this pass does not look at */
		if (deep) {
			s->last_deep_ms = now;
		} else {
			select_first(s, buf, n_pend, depth);
			n_pend = depth;
			/* the pass that looks at every job comes at most a second after the last */
			if (s->wake_ms > s->last_deep_ms + 1000)
				s->wake_ms = s->last_deep_ms + 1000;
		}
		int n_cand = n_pend + n_restart;
		s->queue_waiting = n_cand + beyond; /* less what place() places */
		/* placement at submission works in the view a pass built: with nothing to place,
		 * one is built when devices may have changed hands since the last */
		if (n_cand == 0) {
			s->queue_waiting = 0;
			if ((!s->busy_built || s->subs_since_view > 0 ||
			     s->rows_read != s->rows_read_at_view ||
			     s->busy_nodes_version != s->nodes_version) &&
			    pn_refresh(s, nodes) == 0)
				busy_view(s);
		}
		struct soft_job **candidates = malloc((size_t)(n_cand + 1) * sizeof *candidates);
		if (candidates != NULL) {
			for (int c = 0; c < n_pend; c++)
				candidates[c] = &s->jobs[buf[c]];
			for (int c = 0; c < n_restart; c++)
				candidates[n_pend + c] = &s->jobs[buf[s->n_jobs - 1 - c]];
			place(s, candidates, n_cand, nodes, deep);
			free(candidates);
		}
	}
	preempt_continue(s);
	check_grow_back(s, nodes);
	check_auto_grow_back(s, nodes);
	compact_jobs(s);
	if (full && s->n_draining > 0)
		check_drains(s, nodes);
	json_decref(nodes_by_id);
	s->passes_capped_total += s->pass_capped != 0;
}

/* ---- embargo deadlines ---- */

/* An embargoed advisory whose deadline has passed is published by a committed command; the
 * state machine re-checks the deadline against the command's timestamp. One at a time. */
static void publish_due_advisories(struct sched *s)
{
	if (s->publishing[0] != '\0')
		return;
	json_t *due = fsm_advisories_due(s->fsm, wall_now(s));
	const char *id = json_string_value(json_array_get(due, 0));
	if (id != NULL) {
		snprintf(s->publishing, sizeof s->publishing, "%s", id);
		log_info("scheduler: advisory %s reached its embargo deadline; publishing", id);
		if (propose(s, 0, id, "advisory.publish", json_pack("{s:s}", "id", id)) != 0)
			s->publishing[0] = '\0';
	}
	json_decref(due);
}
static void tick(struct sched *s, int with_nodes);

/* Before a pass holds the loop: what requests and the last pass proposed goes to raft
 * first (it would wait for the loop's idle phase, after the pass), so the entries
 * replicate while the pass runs. */
static void flush_proposals(struct sched *s)
{
	if (s->io.flush != NULL)
		s->io.flush(s->io.data);
}

static void on_tick(uv_timer_t *t)
{
	sched_tick(t->data);
}

static void on_resync_idle(uv_idle_t *h)
{
	(void)h; /* its being active is the point: poll does not block, on_kick comes next */
}

/* After every loop iteration: while a new leader rereads its jobs, the next chunk; else,
 * when applies changed jobs (a submission, a finish), place at once instead of at the next
 * tick, at most every kick_min_ms. Placement latency is then commit + pass + commit, not
 * up to a tick more. */
static void on_kick(uv_check_t *h)
{
	struct sched *s = h->data;
	if (s->leading && (s->resync_rowids != NULL || s->jobs_resync) &&
	    s->io.is_ready(s->io.data)) {
		tick(s, 0); /* a reread of every job goes on between requests */
		if (s->resync_rowids != NULL || s->jobs_resync)
			uv_idle_start(&s->resync_idle, on_resync_idle);
		else
			uv_idle_stop(&s->resync_idle);
		return;
	}
	uv_idle_stop(&s->resync_idle);
	if (!s->leading || !fsm_jobs_changed_pending(s->fsm))
		return;
	uint64_t now = mono_now(s);
	if (now - s->last_kick_ms < s->cfg.kick_min_ms)
		return;
	s->last_kick_ms = now;
	flush_proposals(s);
	tick(s, 0);
}

/* The jobs of these rank reports are looked at on the next full pass (check_due). */
static void mark_reported(struct sched *s, const json_t *reports)
{
	size_t i;
	json_t *r;
	const char *last = NULL;
	json_array_foreach(reports, i, r)
	{
		const char *id = json_string_value(json_object_get(r, "job"));
		if (id == NULL || (last != NULL && strcmp(id, last) == 0))
			continue; /* a node's ranks of one job usually come together */
		struct soft_job *j = job_find(s, id);
		if (j != NULL)
			j->check_due = 1;
		last = id;
	}
}

/* Whether two rows of a node give its ranks the same peers (desired_rank reads these). */
static int node_addr_equal(const json_t *a, const json_t *b)
{
	static const char *const keys[] = {"host", "port_base", "devices"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (!json_equal(json_object_get(a, keys[i]), json_object_get(b, keys[i])))
			return 0;
	return 1;
}

/* Keeps nodes_list current: only the rows the FSM's nodes journal names (the nodes table
 * changes on registrations and state changes, never on heartbeats), or all of them after a
 * restore or an overflow. */
static int nodes_refresh(struct sched *s, struct yard_err *err)
{
	const int64_t *rowids;
	int n;
	int all = fsm_nodes_changed_take(s->fsm, &rowids, &n);
	if (!all && s->nodes_list != NULL) {
		for (int k = 0; k < n; k++) {
			json_t *node = fsm_node_by_rowid(s->fsm, rowids[k]);
			const char *id = json_string_value(json_object_get(node, "id"));
			if (node == NULL || id == NULL) {
				json_decref(node);
				all = 1; /* gone: not something nodes do, reread everything */
				break;
			}
			json_t *pos = json_object_get(s->nodes_pos, id);
			/* the health rows follow a changed row; a new one makes them read again */
			int health_follows = pos != NULL && s->health != NULL &&
			                     s->health_version == s->nodes_version;
			struct soft_node *sn = node_find(s, id);
			if (sn != NULL)
				node_row_flags_set(s, sn, node);
			if (pos != NULL) {
				size_t at = (size_t)json_integer_value(pos);
				const json_t *old = json_array_get(s->nodes_list, at);
				if (!node_addr_equal(old, node))
					s->node_addr_version++;
				s->n_draining += row_draining(node) - row_draining(old);
				if (row_draining(node) && !row_draining(old))
					node_nudge(s,
					           id); /* the drain command rides on a heartbeat */
				/* down: everything it runs must stop (desired_for) */
				if (!json_equal(json_object_get(old, "state"), json_object_get(node, "state")))
					node_news(s, id);
				if (s->pn_changed == NULL)
					s->pn_changed = json_array();
				json_array_append_new(s->pn_changed, json_string(id));
				json_array_set_new(s->nodes_list, at, node);
				if (health_follows &&
				    (at >= (size_t)s->n_health ||
				     health_row_set(s, &s->health[at], node) != 0))
					health_follows = 0;
			} else {
				json_object_set_new(
				    s->nodes_pos, id,
				    json_integer((json_int_t)json_array_size(s->nodes_list)));
				s->n_draining += row_draining(node);
				json_array_append_new(s->nodes_list, node);
				s->node_addr_version++;
				s->pn_full = 1;
			}
			/* the id map follows the one row instead of being rebuilt */
			if (s->nodes_by_id != NULL && s->nodes_by_id_version == s->nodes_version) {
				json_object_set(s->nodes_by_id, id, node);
				s->nodes_by_id_version++;
			}
			s->nodes_version++;
			if (health_follows)
				s->health_version = s->nodes_version;
		}
		if (!all)
			return 0;
	}
	json_t *fresh = fsm_nodes_list(s->fsm, err);
	if (fresh == NULL)
		return -1;
	json_t *pos = json_object();
	size_t i;
	json_t *v;
	s->n_draining = 0;
	json_array_foreach(fresh, i, v)
	{
		json_object_set_new(pos, json_string_value(json_object_get(v, "id")),
		                    json_integer((json_int_t)i));
		s->n_draining += row_draining(v);
	}
	json_decref(s->nodes_list);
	json_decref(s->nodes_pos);
	s->nodes_list = fresh;
	s->nodes_pos = pos;
	s->nodes_version++;
	s->nodes_epoch++;
	s->node_addr_version++;
	s->pn_full = 1;
	return 0;
}

/* with_nodes: also judge node health (every tick; a kick only places) */
/* Ended jobs past the setting job_retention_s (FSM_JOB_RETENTION_DEFAULT_S; 0: kept until
 * deleted) are collected, FSM_COLLECT_MAX per command, one command at a time: looked for every
 * quarter of the retention, at least every second and at most every minute. */
static void collect_ended(struct sched *s, uint64_t now)
{
	int64_t retention_s =
	    fsm_config_get(s->fsm, "job_retention_s", FSM_JOB_RETENTION_DEFAULT_S);
	uint64_t every_ms = YARD_MIN(YARD_MAX((uint64_t)retention_s * 250, 1000), 60000);
	if (retention_s <= 0 || s->collecting ||
	    (s->last_collect_ms != 0 && now - s->last_collect_ms < every_ms))
		return;
	s->last_collect_ms = now;
	int64_t before_ms = wall_now(s) - retention_s * 1000;
	json_t *ids = fsm_jobs_collectable(s->fsm, before_ms, FSM_COLLECT_MAX);
	/* kept while a pending job waits for them (sched_job_awaited_by), one walk of the jobs */
	json_t *awaited = NULL;
	for (int k = 0; ids != NULL && k < s->n_jobs; k++) {
		const struct soft_job *j = &s->jobs[k];
		if (!waits_for_others(s, k))
			continue;
		if (awaited == NULL)
			awaited = json_object();
		for (size_t i = 0; i < json_array_size(j->after); i++)
			json_object_set(awaited, json_string_value(json_array_get(j->after, i)),
			                json_true());
	}
	for (size_t i = 0; awaited != NULL && i < json_array_size(ids);)
		if (json_object_get(awaited, json_string_value(json_array_get(ids, i))) != NULL)
			json_array_remove(ids, i);
		else
			i++;
	json_decref(awaited);
	if (ids == NULL || json_array_size(ids) == 0) {
		json_decref(ids);
		return;
	}
	json_t *args = json_pack("{s:I,s:o}", "before_ms", (json_int_t)before_ms, "ids", ids);
	if (args == NULL)
		return;
	s->collecting = 1;
	if (propose(s, 0, "", "jobs.collect", args) != 0)
		s->collecting = 0;
	else /* more than one command's worth: the next look comes at the next tick */
		s->last_collect_ms =
		    json_array_size(json_object_get(args, "ids")) < FSM_COLLECT_MAX ? now : 0;
}

static void tick(struct sched *s, int with_nodes)
{
	struct yard_err err = {0};
	uncommitted_flush(s, 0);
	if (!s->leading || !s->io.is_ready(s->io.data))
		return;
	uint64_t now = mono_now(s);
	if (nodes_refresh(s, &err) != 0) {
		log_error("scheduler: %s", err.msg);
		return;
	}
	json_t *nodes = json_incref(s->nodes_list);
	if (with_nodes) {
		/* a loop stalled (stopped, starved of CPU, a long snapshot) heard no heartbeat
		 * meanwhile: that silence must not count against the nodes */
		uint64_t stall_ms = YARD_MAX(suspect_ms(s) / 2, 5 * s->cfg.tick_ms);
		if (s->last_health_ms != 0 && now - s->last_health_ms > stall_ms) {
			log_warn("scheduler: no node-health check for %.1f s (this controller was "
			         "stopped or starved of CPU): silence until now does not count "
			         "against any node",
			         (double)(now - s->last_health_ms) / 1000);
			s->stall_end_ms = now;
		}
		s->last_health_ms = now;
		check_nodes(s, nodes, now);
	}
	if (with_nodes) {
		publish_due_advisories(s);
		collect_ended(s, now);
	}
	uint64_t applied = s->io.applied_index(s->io.data);
	if (s->dirty || applied != s->last_applied || now >= s->wake_ms ||
	    now - s->last_full_ms >= 1000) {
		s->dirty = 0;
		s->wake_ms = UINT64_MAX;
		s->last_applied = applied;
		s->last_full_ms = now;
		uint64_t t0 = yard_now_mono_ns();
		run_jobs(s, nodes, now, with_nodes);
		uint64_t took_ns = yard_now_mono_ns() - t0;
		uint64_t took_ms = took_ns / 1000000;
		yard_hist_note(&s->pass_ms[with_nodes != 0], (double)took_ns / 1e6);
		if (took_ms >= 100)
			s->slow_passes++;
		/* at most one line in 10 s: a deep queue may make every pass slow */
		if (took_ms >= 100 &&
		    (s->slow_pass_log_ms == 0 || now - s->slow_pass_log_ms >= 10000)) {
			log_warn(
			    "scheduler: a pass over %d jobs held the loop %llu ms (%d pass(es) of "
			    "100 ms or more since the last such line)",
			    s->n_jobs, (unsigned long long)took_ms, s->slow_passes);
			s->slow_pass_log_ms = now;
			s->slow_passes = 0;
		}
		if (!with_nodes)
			s->dirty = 1; /* the running jobs were not looked at: the next tick does */
	}
	rollout_driver_tick(s->rollouts);
	rollout_driver_new_offers(s->rollouts, nudge_cb, s);
	json_decref(nodes);
}

void sched_tick(struct sched *s)
{
	flush_proposals(s);
	watch_expire(s, mono_now(s));
	tick(s, 1);
}

/* ---- lifecycle ---- */

struct sched *sched_create(uv_loop_t *loop, struct fsm *fsm, const struct sched_config *cfg,
                           const struct sched_io *io)
{
	struct sched *s = calloc(1, sizeof *s);
	if (s == NULL)
		return NULL;
	s->loop = loop;
	s->fsm = fsm;
	s->cfg = *cfg;
	s->io = *io;
	s->rollouts = rollout_driver_create(fsm, io);
	if (s->rollouts != NULL)
		rollout_driver_restart_gate(s->rollouts, rollout_restart_ready, s);
	s->history = history_create();
	struct logstore_limits limits = {.rank_max_bytes = cfg->log_rank_max_bytes,
	                                 .total_max_bytes = cfg->log_total_max_bytes};
	s->logs = logstore_create(&limits);
	if (s->rollouts == NULL || s->history == NULL || s->logs == NULL) {
		rollout_driver_destroy(s->rollouts);
		history_destroy(s->history);
		logstore_destroy(s->logs);
		free(s);
		return NULL;
	}
	uv_timer_init(loop, &s->timer);
	uv_check_init(loop, &s->kick);
	uv_idle_init(loop, &s->resync_idle);
	uv_idle_init(loop, &s->grave_idle);
	s->timer.data = s->kick.data = s->resync_idle.data = s->grave_idle.data = s;
	s->handles_open = 4;
	if (cfg->tick_ms > 0) {
		uv_timer_start(&s->timer, on_tick, cfg->tick_ms, cfg->tick_ms);
		uv_check_start(&s->kick, on_kick);
	}
	return s;
}

static void timer_closed(uv_handle_t *h)
{
	struct sched *s = h->data;
	if (--s->handles_open == 0)
		free(s); /* the sched the handles live in */
}

void sched_destroy(struct sched *s)
{
	if (s == NULL)
		return;
	uncommitted_flush(s, 1);
	soft_clear(s, 0);
	graves_free(s);
	logstore_destroy(s->logs);
	free(s->nodes);
	yard_grow_free(s->jobs, sizeof *s->jobs, s->cap_jobs);
	yard_grow_free(s->keys, sizeof *s->keys, s->cap_keys);
	free(s->pass_buf);
	yard_grow_free(s->q, sizeof *s->q, s->cap_q);
	free(s->busy);
	free(s->subs); /* emptied by soft_clear */
	free(s->health);
	free(s->watching);
	rollout_driver_destroy(s->rollouts);
	history_destroy(s->history);
	free(s->node_index.slots);
	free(s->job_index.slots);
	json_decref(s->nodes_list);
	json_decref(s->nodes_pos);
	json_decref(s->nodes_by_id);
	json_decref(s->pn_changed);
	json_decref(s->domains);
	free(s->pn_base);
	free(s->pn_index.slots);
	uv_timer_stop(&s->timer);
	uv_check_stop(&s->kick);
	uv_idle_stop(&s->resync_idle);
	uv_idle_stop(&s->grave_idle);
	uv_close((uv_handle_t *)&s->timer, timer_closed);
	uv_close((uv_handle_t *)&s->kick, timer_closed);
	uv_close((uv_handle_t *)&s->resync_idle, timer_closed);
	uv_close((uv_handle_t *)&s->grave_idle, timer_closed);
}

void sched_leader_up(struct sched *s)
{
	soft_clear(s, 1);
	s->epoch++;
	s->n_in_flight = 0;
	s->leading = 1;
	s->fsm->keep_submitted = 1;
	s->publishing[0] = '\0';
	s->collecting = 0; /* a jobs.collect of an earlier leadership reports to nobody */
	s->last_collect_ms = 0;
	s->leader_since_ms = mono_now(s);
	s->watch_base = (uint64_t)wall_now(s) << 16;
	s->last_health_ms = s->stall_end_ms = 0;
	s->dirty = 1;
	snprintf(s->leader_id, sizeof s->leader_id, "%lld-%d-%llu", (long long)wall_now(s),
	         (int)getpid(), (unsigned long long)s->epoch);
	rollout_driver_leading(s->rollouts, 1);
	log_info("scheduler: leading; every node has at least %.1f s from now before it is "
	         "suspect",
	         (double)suspect_ms(s) / 1000);
}

void sched_leader_down(struct sched *s)
{
	if (!s->leading)
		return;
	uncommitted_flush(s, 1);
	soft_clear(s, 1);
	s->epoch++;
	s->n_in_flight = 0;
	s->leading = 0;
	s->fsm->keep_submitted = 0;
	rollout_driver_leading(s->rollouts, 0);
	log_info("scheduler: no longer leading; soft state dropped");
}

/* ---- heartbeats ---- */

/* The window summaries of one rank report (straggler.h), checked and copied into clean. */
static int clean_windows(const json_t *r, const char *prefix, json_t *clean, struct yard_err *err)
{
	static const char *const window_keys[] = {"index", "steps", "compute_ms", "comm_wait_ms",
	                                          NULL};
	const json_t *windows = json_object_get(r, "windows");
	if (windows == NULL || json_is_null(windows))
		return 0;
	if (!json_is_array(windows) || json_array_size(windows) > WINDOWS_MAX)
		return yard_err_set(err, YARD_EINVAL,
		                    "%s.windows: must be an array of at most %d window summaries",
		                    prefix, WINDOWS_MAX);
	json_t *out = json_array(), *w;
	size_t i;
	json_array_foreach(windows, i, w)
	{
		char wp[64];
		int64_t index = 0, steps = 0;
		double compute_ms = 0, comm_wait_ms = 0;
		snprintf(wp, sizeof wp, "%s.windows[%zu]", prefix, i);
		if (!json_is_object(w)) {
			json_decref(out);
			return yard_err_set(err, YARD_EINVAL, "%s: must be an object", wp);
		}
		if (jsonx_only_keys(w, wp, window_keys, err) != 0 ||
		    jsonx_get_int(w, wp, "index", 1, 0, INT64_MAX / 2, &index, err) != 0 ||
		    jsonx_get_int(w, wp, "steps", 1, 1, 1000000, &steps, err) != 0 ||
		    jsonx_get_double(w, wp, "compute_ms", 1, 0, 1e9, &compute_ms, err) != 0 ||
		    jsonx_get_double(w, wp, "comm_wait_ms", 0, 0, 1e9, &comm_wait_ms, err) != 0) {
			json_decref(out);
			return err->code;
		}
		json_array_append_new(out,
		                      json_pack("{s:I,s:I,s:f,s:f}", "index", (json_int_t)index,
		                                "steps", (json_int_t)steps, "compute_ms",
		                                compute_ms, "comm_wait_ms", comm_wait_ms));
	}
	json_object_set_new(clean, "windows", out);
	return 0;
}

static json_t *clean_reports(const json_t *ranks, struct yard_err *err)
{
	static const char *const keys[] = {"job",
	                                   "rank",
	                                   "generation",
	                                   "pid",
	                                   "state",
	                                   "exit_code",
	                                   "signal",
	                                   "step",
	                                   "loss",
	                                   "step_ms",
	                                   "compute_ms",
	                                   "comm_wait_ms",
	                                   "last_step_ms_ago",
	                                   "windows",
	                                   "worker_version",
	                                   NULL};
	json_t *out = json_array(), *r;
	size_t i;
	if (ranks == NULL || json_is_null(ranks))
		return out;
	if (!json_is_array(ranks) || json_array_size(ranks) > REPORTS_MAX) {
		json_decref(out);
		yard_err_set(err, YARD_EINVAL, "ranks: must be an array of at most %d reports",
		             REPORTS_MAX);
		return NULL;
	}
	json_array_foreach(ranks, i, r)
	{
		char prefix[32];
		const char *job = NULL, *state = NULL;
		int64_t rank = 0, generation = 0, pid = 0, code = 0, sig = 0, step = -1, ago = 0;
		double loss = 0;
		const char *worker_version = NULL;
		snprintf(prefix, sizeof prefix, "ranks[%zu]", i);
		if (!json_is_object(r) || jsonx_only_keys(r, prefix, keys, err) != 0 ||
		    jsonx_get_string(r, prefix, "job", 1, FSM_ID_MAX - 1, &job, err) != 0 ||
		    jsonx_get_int(r, prefix, "rank", 1, 0, 65535, &rank, err) != 0 ||
		    jsonx_get_int(r, prefix, "generation", 1, 0, INT32_MAX, &generation, err) !=
		        0 ||
		    jsonx_get_int(r, prefix, "pid", 0, 0, INT32_MAX, &pid, err) != 0 ||
		    jsonx_get_string(r, prefix, "state", 1, 16, &state, err) != 0 ||
		    jsonx_get_int(r, prefix, "exit_code", 0, -1, 255, &code, err) != 0 ||
		    jsonx_get_int(r, prefix, "signal", 0, 0, 128, &sig, err) != 0 ||
		    jsonx_get_int(r, prefix, "step", 0, -1, INT64_MAX, &step, err) != 0 ||
		    jsonx_get_double(r, prefix, "loss", 0, -1e300, 1e300, &loss, err) != 0 ||
		    jsonx_get_int(r, prefix, "last_step_ms_ago", 0, 0, INT64_MAX / 2, &ago, err) !=
		        0 ||
		    jsonx_get_string(r, prefix, "worker_version", 0, 31, &worker_version, err) !=
		        0) {
			if (err->code == 0)
				yard_err_set(err, YARD_EINVAL, "%s: must be an object", prefix);
			json_decref(out);
			return NULL;
		}
		if (strcmp(state, "running") != 0 && strcmp(state, "exited") != 0) {
			yard_err_set(err, YARD_EINVAL, "%s.state: '%s' is not running or exited",
			             prefix, state);
			json_decref(out);
			return NULL;
		}
		/* built member by member: json_pack's format and UTF-8 checks were most of the
		 * cost of a heartbeat's reports (the strings came from parsed, checked JSON) */
		json_t *clean = json_object();
		json_object_set_new_nocheck(clean, "job", json_string_nocheck(job));
		json_object_set_new_nocheck(clean, "rank", json_integer(rank));
		json_object_set_new_nocheck(clean, "generation", json_integer(generation));
		json_object_set_new_nocheck(clean, "pid", json_integer(pid));
		json_object_set_new_nocheck(clean, "state", json_string_nocheck(state));
		json_object_set_new_nocheck(clean, "exit_code", json_integer(code));
		json_object_set_new_nocheck(clean, "signal", json_integer(sig));
		json_object_set_new_nocheck(clean, "step", json_integer(step));
		json_object_set_new_nocheck(clean, "last_step_ms_ago", json_integer(ago));
		if (json_is_number(json_object_get(r, "loss")))
			json_object_set_new(clean, "loss", json_real(loss));
		if (worker_version != NULL && worker_version[0] != '\0')
			json_object_set_new(clean, "worker_version", json_string(worker_version));
		/* step timings (ms), kept when present and sane */
		static const char *const timings[] = {"step_ms", "compute_ms", "comm_wait_ms"};
		for (size_t t = 0; t < sizeof timings / sizeof timings[0]; t++) {
			double v = 0;
			if (json_object_get(r, timings[t]) == NULL)
				continue;
			if (jsonx_get_double(r, prefix, timings[t], 0, 0, 1e9, &v, err) != 0) {
				json_decref(clean);
				json_decref(out);
				return NULL;
			}
			json_object_set_new(clean, timings[t], json_real(v));
		}
		if (clean_windows(r, prefix, clean, err) != 0) {
			json_decref(clean);
			json_decref(out);
			return NULL;
		}
		json_array_append_new(out, clean);
	}
	return out;
}

struct log_piece {
	const char *job;
	int rank;
	int64_t generation, offset;
	char *data;
	long len;
};

static void free_pieces(struct log_piece *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(p[i].data);
	free(p);
}

/* Checks and decodes the "logs" array of a heartbeat: [{"job","rank","generation","offset",
 * "data" (base64)}]. All or nothing: NULL with err naming the first bad field. */
static struct log_piece *clean_logs(const json_t *logs, size_t *count, struct yard_err *err)
{
	static const char *const keys[] = {"job", "rank", "generation", "offset", "data", NULL};
	*count = 0;
	if (logs == NULL || json_is_null(logs))
		return calloc(1, sizeof(struct log_piece));
	if (!json_is_array(logs) || json_array_size(logs) > REPORTS_MAX) {
		yard_err_set(err, YARD_EINVAL, "logs: must be an array of at most %d pieces",
		             REPORTS_MAX);
		return NULL;
	}
	struct log_piece *pieces = calloc(json_array_size(logs) + 1, sizeof *pieces);
	size_t i;
	json_t *l;
	if (pieces == NULL) {
		yard_err_set(err, YARD_ENOMEM, "logs: out of memory");
		return NULL;
	}
	json_array_foreach(logs, i, l)
	{
		char prefix[32];
		const char *data = NULL;
		int64_t rank = 0;
		struct log_piece *p = &pieces[i];
		snprintf(prefix, sizeof prefix, "logs[%zu]", i);
		if (!json_is_object(l) || jsonx_only_keys(l, prefix, keys, err) != 0 ||
		    jsonx_get_string(l, prefix, "job", 1, LOGSTORE_JOB_MAX, &p->job, err) != 0 ||
		    jsonx_get_int(l, prefix, "rank", 1, 0, 65535, &rank, err) != 0 ||
		    jsonx_get_int(l, prefix, "generation", 1, 0, INT32_MAX, &p->generation, err) !=
		        0 ||
		    jsonx_get_int(l, prefix, "offset", 1, 0, INT64_MAX / 2, &p->offset, err) != 0 ||
		    jsonx_get_string(l, prefix, "data", 1, (int)base64_encoded_len(LOG_PIECE_MAX),
		                     &data, err) != 0) {
			if (err->code == 0)
				yard_err_set(err, YARD_EINVAL, "%s: must be an object", prefix);
			free_pieces(pieces, i);
			return NULL;
		}
		p->rank = (int)rank;
		size_t text_len = strlen(data);
		p->data = malloc(text_len / 4 * 3 + 1);
		size_t decoded = 0;
		if (p->data == NULL ||
		    base64_decode(data, text_len, (unsigned char *)p->data, &decoded) != 0) {
			yard_err_set(err, YARD_EINVAL, "%s.data: not padded base64", prefix);
			free_pieces(pieces, i + 1);
			return NULL;
		}
		p->len = (long)decoded;
	}
	*count = json_array_size(logs);
	return pieces;
}

/* Keeps the pieces of ranks this heartbeat reports (a node speaks for its own ranks only;
 * the agent never sends others, so anything else is dropped with a warning). */
static void store_logs(struct sched *s, const char *node, const json_t *reports,
                       const struct log_piece *pieces, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		const struct log_piece *p = &pieces[i];
		size_t k;
		json_t *r;
		int reported = 0;
		json_array_foreach(reports, k, r) reported |=
		    json_integer_value(json_object_get(r, "rank")) == p->rank &&
		    json_integer_value(json_object_get(r, "generation")) == p->generation &&
		    strcmp(json_string_value(json_object_get(r, "job")), p->job) == 0;
		if (!reported) {
			log_warn("heartbeat of %s: log piece of rank %d of %s (generation %lld) it "
			         "does not report: dropped",
			         node, p->rank, p->job, (long long)p->generation);
			continue;
		}
		long rc = logstore_add(s->logs, p->job, p->rank, p->generation, node, p->offset,
		                       p->data, (size_t)p->len);
		if (rc < 0)
			log_warn("heartbeat of %s: log piece of rank %d of %s not kept: %s", node,
			         p->rank, p->job, yard_strerror((int)rc));
	}
}

/* The desired entries of every rank of a running job, as text in two parts: {"heads":
 * [rank] (a string, null where there is no entry), "tail": a string}; rank r's entry is
 * heads[r] followed by tail. A head holds what is the rank's own (its job, rank, device,
 * checkpoint and the environment variables it sets itself); the tail, shared, holds the
 * rest of the environment (peer lists) and the spec: a job's cache grows with its ranks,
 * not with ranks squared. Built from the committed job, the nodes of its layout and its
 * restore checkpoint; NULL when the job cannot be read. *generation: the generation they
 * are for. */
static json_t *desired_build(struct sched *s, const char *job_id, int64_t *generation)
{
	struct yard_err err = {0};
	json_t *job = fsm_job_get(s->fsm, job_id, &err);
	if (job == NULL)
		return NULL;
	const json_t *layout = json_object_get(job, "layout");
	/* the nodes list while it is current (no JSON parsed), else the FSM's rows */
	int soft = s->nodes_list != NULL && !fsm_nodes_changed_pending(s->fsm);
	json_t *nodes_by_id = json_object();
	size_t k;
	json_t *slot;
	json_array_foreach(layout, k, slot)
	{
		const char *peer = json_string_value(json_object_get(slot, "node"));
		if (peer == NULL || json_object_get(nodes_by_id, peer) != NULL)
			continue;
		const json_t *pos = soft ? json_object_get(s->nodes_pos, peer) : NULL;
		json_t *n = pos != NULL ? json_incref(json_array_get(
		                              s->nodes_list, (size_t)json_integer_value(pos)))
		                        : fsm_node_get(s->fsm, peer, &err);
		if (n != NULL)
			json_object_set_new(nodes_by_id, peer, n);
	}
	*generation = json_integer_value(json_object_get(job, "generation"));
	int64_t restore_step = fsm_checkpoint_restore_step(s->fsm, job_id, *generation);
	/* the controller store's checkpoint may be of another dp (allow_shrink_dp): the agent
	 * fetches the shards its ranks read (agent/ckpt.c) */
	int64_t restore_world =
	    restore_step >= 0 ? fsm_checkpoint_world(s->fsm, job_id, restore_step) : 0;
	json_t *answer = desired_job_text(job, layout, nodes_by_id, restore_step, restore_world);
	json_decref(nodes_by_id);
	json_decref(job);
	return answer;
}

/* Drops the slot copies of the nodes whose slots the FSM changed since the last call. */
static void slots_refresh(struct sched *s)
{
	const char(*names)[FSM_NAME_MAX + 1] = NULL;
	int n = 0;
	if (fsm_slot_nodes_changed_take(s->fsm, &names, &n)) {
		s->slots_epoch++;
		return;
	}
	for (int i = 0; i < n; i++) {
		struct soft_node *node = node_find(s, names[i]);
		if (node != NULL)
			node->slots_cached = 0;
	}
}

/* The node's slots of running jobs (fsm_node_slots). While leading they come from the soft
 * node's copy, read again only once the FSM names the node as changed, so a heartbeat of a
 * node whose slots stayed the same costs no SQL. *owned: what the caller frees (NULL when
 * the slots are the copy's). Returns the count, or -1 when they could not be read. */
static int node_slots(struct sched *s, const char *node, const struct fsm_slot **slots,
                      struct fsm_slot **owned)
{
	struct soft_node *n = NULL;
	*slots = *owned = NULL;
	if (s->leading) {
		slots_refresh(s);
		n = node_find(s, node);
	}
	if (n != NULL && n->slots_cached && n->slots_epoch == s->slots_epoch) {
		*slots = n->slots;
		return n->n_slots;
	}
	struct fsm_slot *read = NULL;
	int count = fsm_node_slots(s->fsm, node, &read);
	if (count < 0)
		return -1;
	if (n == NULL) {
		*slots = *owned = read;
		return count;
	}
	free(n->slots);
	n->slots = read;
	n->n_slots = count;
	n->slots_cached = 1;
	n->slots_epoch = s->slots_epoch;
	*slots = read;
	return count;
}

/* The desired entries of a running job's generation, as desired_build gives them (borrowed
 * from the soft job's cache, or from memo for a job the scheduler has not seen yet or while
 * node changes are unread); NULL when it cannot be read. A cached set serves every heartbeat
 * of the job's nodes until the generation, a node's address or devices, or a checkpoint
 * changes: a heartbeat then costs a lookup per slot, not a rebuild of every rank's peers. */
static const json_t *desired_entries(struct sched *s, const char *job_id, int64_t generation,
                                     json_t *memo, uint64_t *serial)
{
	*serial = 0;
	struct soft_job *j = s->leading ? job_find(s, job_id) : NULL;
	/* the node versions are current once nodes_refresh read every pending node change */
	int nodes_current = s->nodes_list != NULL && !fsm_nodes_changed_pending(s->fsm);
	if (j != NULL && nodes_current && j->desired != NULL && j->desired_gen == generation &&
	    j->desired_nodes_version == s->node_addr_version &&
	    j->desired_ckpt_version == s->fsm->ckpt_version) {
		*serial = j->desired_serial;
		return j->desired;
	}
	const json_t *seen = json_object_get(memo, job_id);
	if (seen != NULL)
		return seen;
	int64_t built_gen = -1;
	json_t *entries = desired_build(s, job_id, &built_gen);
	if (entries == NULL)
		return NULL;
	if (j != NULL && nodes_current && built_gen == generation) {
		desired_drop(j);
		j->desired = entries;
		j->desired_gen = built_gen;
		j->desired_nodes_version = s->node_addr_version;
		j->desired_ckpt_version = s->fsm->ckpt_version;
		j->desired_serial = *serial = ++s->desired_serials;
		return entries;
	}
	json_object_set_new(memo, job_id, entries);
	return entries;
}

/* What one node must run: its slots of running jobs, each with the job and only the nodes
 * that job spans (a heartbeat costs what the node runs, not what the cluster runs). me: the
 * node's committed row. */

static void put_str(struct jsonx_buf *b, const char *text)
{
	jsonx_buf_put(b, text, strlen(text));
}

static uint64_t tag_mix(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull; /* FNV-1a */
	return h;
}

/* The entries as a JSON array (as_text NULL), or as the members of a heartbeat answer's text
 * appended to as_text: "desired":[...] (entries of cached jobs copied from their kept text,
 * not serialized again; with shared_ok, the agent takes each job's shared variables and spec
 * once, in "desired_shared", see desired_put), with "desired_tag":"T" when every entry came
 * from a job's cache.
 * The tag names the set: this leadership, the node's slots and the build of each job's
 * entries (a job's entries are rebuilt, with a new serial, whenever their text would change).
 * When their_tag, the tag of the set the agent holds, equals it, the members are
 * "desired_unchanged":true,"desired_tag":"T" instead: a node running ranks of a large job
 * is not sent its peers again every heartbeat. as_text's failed flag says the text could not
 * be made (no memory). */
struct picked_entry {
	const json_t *head, *tail, *close, *shared;
	const char *job;
};

/* "desired":[...] as text: every entry whole, or (shared_ok) each ending in a reference to
 * its job's shared part, with "desired_shared":{"JOB":{"env":...,"spec":...},...} after, each
 * job's part once. */
static void desired_put(struct jsonx_buf *b, const struct picked_entry *e, size_t n, int shared_ok)
{
	put_str(b, "\"desired\":[");
	for (size_t k = 0; k < n; k++) {
		const json_t *end = shared_ok ? e[k].close : e[k].tail;
		if (k > 0)
			jsonx_buf_put(b, ",", 1);
		jsonx_buf_put(b, json_string_value(e[k].head), json_string_length(e[k].head));
		jsonx_buf_put(b, json_string_value(end), json_string_length(end));
	}
	jsonx_buf_put(b, "]", 1);
	if (!shared_ok)
		return;
	put_str(b, ",\"desired_shared\":{");
	int first = 1;
	for (size_t k = 0; k < n; k++) {
		size_t seen = 0;
		while (seen < k && e[seen].shared != e[k].shared)
			seen++;
		if (seen < k)
			continue; /* this job's part is in already */
		if (!first)
			jsonx_buf_put(b, ",", 1);
		first = 0;
		jsonx_escape(e[k].job, strlen(e[k].job), jsonx_buf_put, b);
		jsonx_buf_put(b, ":", 1);
		jsonx_buf_put(b, json_string_value(e[k].shared), json_string_length(e[k].shared));
	}
	jsonx_buf_put(b, "}", 1);
}

static json_t *desired_for(struct sched *s, const char *node, const json_t *me,
                           struct jsonx_buf *as_text, const char *their_tag, int shared_ok)
{
	json_t *desired = as_text != NULL ? NULL : json_array();
	/* down: its ranks are being moved; anything it runs must stop */
	int down =
	    me == NULL || strcmp(json_string_value(json_object_get(me, "state")), "down") == 0;
	const struct fsm_slot *slots = NULL;
	struct fsm_slot *owned = NULL;
	int n_slots = down ? 0 : node_slots(s, node, &slots, &owned);
	json_t *memo = json_object();
	size_t n_picked = 0;
	struct picked_entry *picked =
	    n_slots >= 0 ? malloc(((size_t)n_slots + 1) * sizeof *picked) : NULL;
	if (n_slots < 0 && desired != NULL) { /* not an empty set: that stops every rank */
		json_decref(desired);
		desired = NULL;
	}
	int tagged = as_text != NULL && s->leading && picked != NULL;
	uint64_t tag = tag_mix(1469598103934665603ull, s->leader_id, strlen(s->leader_id) + 1);
	tag = tag_mix(tag, &down, sizeof down);
	for (int i = 0; i < n_slots; i++) {
		const char *job = slots[i].job;
		int64_t rank = slots[i].rank, generation = slots[i].generation;
		uint64_t serial = 0;
		const json_t *entries = desired_entries(s, job, generation, memo, &serial);
		const json_t *head =
		    json_array_get(json_object_get(entries, "heads"), (size_t)rank);
		const json_t *tail = json_object_get(entries, "tail");
		const json_t *close = json_object_get(entries, "close");
		const json_t *shared = json_object_get(entries, "shared");
		if (serial == 0)
			tagged = 0; /* not from a cache: nothing names this text */
		tag = tag_mix(tag, job, strlen(job) + 1);
		tag = tag_mix(tag, &rank, sizeof rank);
		tag = tag_mix(tag, &generation, sizeof generation);
		tag = tag_mix(tag, &serial, sizeof serial);
		if (!json_is_string(head) || !json_is_string(tail) || !json_is_string(close) ||
		    !json_is_string(shared))
			continue;
		if (as_text == NULL) {
			struct jsonx_buf entry = {0};
			jsonx_buf_put(&entry, json_string_value(head), json_string_length(head));
			jsonx_buf_put(&entry, json_string_value(tail), json_string_length(tail));
			if (!entry.failed)
				json_array_append_new(desired,
				                      jsonx_loadb(entry.text, entry.len,
				                                  JSON_REJECT_DUPLICATES, NULL));
			free(entry.text);
		} else if (picked != NULL) {
			picked[n_picked++] = (struct picked_entry){head, tail, close, shared, job};
		}
	}
	char hex[17];
	for (int k = 15; k >= 0; k--, tag >>= 4) /* "%016llx", for every heartbeat */
		hex[k] = "0123456789abcdef"[tag & 15];
	hex[16] = '\0';
	if (as_text != NULL && tagged && their_tag != NULL && strcmp(their_tag, hex) == 0) {
		put_str(as_text, "\"desired_unchanged\":true");
		s->desired_unchanged_total++;
	} else if (as_text != NULL) {
		desired_put(as_text, picked, n_picked, shared_ok);
		s->desired_shared_total += shared_ok != 0;
		if (picked == NULL)
			as_text->failed = 1;
	}
	if (as_text != NULL && tagged) {
		put_str(as_text, ",\"desired_tag\":\"");
		put_str(as_text, hex);
		put_str(as_text, "\"");
	}
	free(picked);
	json_decref(memo);
	free(owned);
	return desired;
}

/* The node's committed row (new reference): from the scheduler's nodes list, kept current
 * from the FSM's nodes journal, while leading; else read from the FSM. NULL: no such node. */
static json_t *node_row(struct sched *s, const char *node)
{
	struct yard_err err = {0};
	if (s->leading && s->nodes_list != NULL && nodes_refresh(s, &err) == 0) {
		const json_t *pos = json_object_get(s->nodes_pos, node);
		return pos != NULL ? json_incref(json_array_get(s->nodes_list,
		                                                (size_t)json_integer_value(pos)))
		                   : NULL;
	}
	return fsm_node_get(s->fsm, node, &err);
}

/* Every rank report that carries a step goes into its job's per-step history. */
static void record_history(struct sched *s, const json_t *reports)
{
	size_t i;
	const json_t *r;
	uint64_t now = mono_now(s);
	json_array_foreach(reports, i, r)
	{
		const json_t *step = json_object_get(r, "step"), *loss = json_object_get(r, "loss");
		const json_t *step_ms = json_object_get(r, "step_ms");
		const json_t *compute_ms = json_object_get(r, "compute_ms");
		if (!json_is_integer(step) || json_integer_value(step) < 1)
			continue;
		history_record(
		    s->history, json_string_value(json_object_get(r, "job")),
		    json_integer_value(json_object_get(r, "generation")),
		    (int)json_integer_value(json_object_get(r, "rank")), json_integer_value(step),
		    json_is_number(loss), json_number_value(loss),
		    json_is_number(step_ms) ? json_number_value(step_ms) : -1,
		    json_is_number(compute_ms) ? json_number_value(compute_ms) : -1, now);
	}
}

json_t *sched_job_metrics(struct sched *s, const char *job, int64_t after_step, int limit,
                          int64_t batch_size)
{
	if (!s->leading)
		return NULL;
	json_t *doc = history_json(s->history, job, after_step, limit, batch_size);
	return doc != NULL ? doc : json_pack("{s:s,s:[]}", "job", job, "steps");
}

/* ---- link probes ---- */

/* The node's perf names its inter-node link as measured against a peer, or configured: no
 * probe to ask for. */
static int link_settled(const struct soft_node *n)
{
	const char *source = json_string_value(json_object_get(n->perf, "inter_source"));
	return source != NULL &&
	       (strncmp(source, "measured:", 9) == 0 || strcmp(source, "configured") == 0);
}

/* c asks for, or is the peer of, a link probe still under way. */
static int probe_busy(const struct soft_node *c, uint64_t now)
{
	return (c->probe_peer[0] != '\0' && now - c->probe_asked_ms < LINK_PROBE_WAIT_MS) ||
	       (c->probed_by[0] != '\0' && now - c->probed_since_ms < LINK_PROBE_WAIT_MS);
}

/* n's probe is over (it reported a measured link): its peer is free again. */
static void probe_over(struct sched *s, struct soft_node *n)
{
	struct soft_node *peer = n->probe_peer[0] != '\0' ? node_find(s, n->probe_peer) : NULL;
	if (peer != NULL && strcmp(peer->probed_by, n->id) == 0)
		peer->probed_by[0] = '\0';
	n->probe_peer[0] = '\0';
}

/* The "link_probe" of node n's heartbeat answer ({"node","host","port"}: measure the link to
 * that node), or NULL: n's link is settled, n is in a probe, or no peer is free. The peer is
 * the first node after n in the committed node table (by name, wrapping; a node registered
 * since this leader read the table whole comes last) that is up, heard within the suspect
 * time, names a probe port and is in no probe, so that N nodes measure N different links
 * rather than all one. At most LINK_PROBE_SCAN rows are looked at per heartbeat. */
static json_t *link_probe_for(struct sched *s, struct soft_node *n)
{
	uint64_t now = mono_now(s);
	if (n == NULL || n->perf == NULL || link_settled(n) || probe_busy(n, now))
		return NULL;
	const json_t *pos = json_object_get(s->nodes_pos, n->id);
	size_t rows = json_array_size(s->nodes_list);
	if (pos == NULL || rows < 2)
		return NULL;
	size_t mine = (size_t)json_integer_value(pos);
	uint64_t suspect = suspect_ms(s);
	for (size_t k = 1; k < rows && k <= LINK_PROBE_SCAN; k++) {
		const json_t *row = json_array_get(s->nodes_list, (mine + k) % rows);
		const char *state = json_string_value(json_object_get(row, "state"));
		const char *host = json_string_value(json_object_get(row, "host"));
		const char *id = json_string_value(json_object_get(row, "id"));
		struct soft_node *c = id != NULL ? node_find(s, id) : NULL;
		if (c == NULL || c == n || host == NULL || state == NULL ||
		    strcmp(state, "up") != 0 || c->probe_port <= 0 || c->last_seen_ms == 0 ||
		    now - c->last_seen_ms >= suspect || probe_busy(c, now))
			continue;
		snprintf(n->probe_peer, sizeof n->probe_peer, "%s", c->id);
		n->probe_asked_ms = now;
		snprintf(c->probed_by, sizeof c->probed_by, "%s", n->id);
		c->probed_since_ms = now;
		log_info("scheduler: node %s measures its link to node %s (%s:%d)", n->id, c->id,
		         host, c->probe_port);
		return json_pack("{s:s,s:s,s:i}", "node", c->id, "host", host, "port",
		                 c->probe_port);
	}
	return NULL;
}

/* Whether a heartbeat says its agent execs a new build next: its upgrade report's state is
 * "restarting" and names a build other than the one heartbeating (the new binary's first
 * heartbeats say "restarting" too, with its own version, until the leader has answered). */
static int restarting_now(const json_t *body, const char *version)
{
	const json_t *up = json_object_get(body, "upgrade");
	const char *state = json_string_value(json_object_get(up, "state"));
	const char *to = json_string_value(json_object_get(up, "version"));
	return state != NULL && to != NULL && strcmp(state, "restarting") == 0 &&
	       strcmp(to, version) != 0;
}

/* The heartbeat's work and its answer without "desired"; *me_out: the node's committed row
 * (new reference, NULL: none). */
static json_t *heartbeat_answer(struct sched *s, const char *node, const json_t *body,
                                json_t **me_out, struct yard_err *err)
{
	static const char *const keys[] = {
	    "node",           "version",    "free_disk_mb", "link_gbps",      "draining",
	    "ranks",          "logs",       "upgrade",      "perf",           "worker_version",
	    "worker_upgrade", "probe_port", "desired_tag",  "desired_shared", NULL};
	const char *name = NULL, *version = "", *worker_version = "", *tag = NULL;
	int64_t free_disk_mb = -1, probe_port = 0;
	int shared_ok = 0;
	if (jsonx_only_keys(body, "", keys, err) != 0 ||
	    jsonx_get_string(body, "", "node", 1, FSM_NAME_MAX, &name, err) != 0 ||
	    jsonx_get_string(body, "", "version", 0, 31, &version, err) != 0 ||
	    jsonx_get_string(body, "", "worker_version", 0, 31, &worker_version, err) != 0 ||
	    jsonx_get_string(body, "", "desired_tag", 0, 16, &tag, err) != 0 ||
	    jsonx_get_bool(body, "", "desired_shared", 0, &shared_ok, err) != 0 ||
	    jsonx_get_int(body, "", "free_disk_mb", 0, -1, INT64_MAX / 2, &free_disk_mb, err) !=
	        0 ||
	    jsonx_get_int(body, "", "probe_port", 0, 1, 65535, &probe_port, err) != 0)
		return NULL;
	if (strcmp(name, node) != 0) {
		yard_err_set(err, YARD_EPERM, "node: this token belongs to node %s, not %s", node,
		             name);
		return NULL;
	}
	if (rollout_driver_check_report(json_object_get(body, "upgrade"), "upgrade", err) != 0 ||
	    rollout_driver_check_report(json_object_get(body, "worker_upgrade"), "worker_upgrade",
	                                err) != 0)
		return NULL;
	json_t *perf = NULL;
	if (json_object_get(body, "perf") != NULL &&
	    (perf = autoplan_perf_clean(json_object_get(body, "perf"), err)) == NULL)
		return NULL;
	json_t *reports = clean_reports(json_object_get(body, "ranks"), err);
	if (reports == NULL) {
		json_decref(perf);
		return NULL;
	}
	size_t n_pieces = 0;
	struct log_piece *pieces = clean_logs(json_object_get(body, "logs"), &n_pieces, err);
	if (pieces == NULL) {
		json_decref(reports);
		json_decref(perf);
		return NULL;
	}
	if (s->leading)
		store_logs(s, node, reports, pieces, n_pieces);
	free_pieces(pieces, n_pieces);
	rollout_driver_heartbeat(s->rollouts, node, body);
	if (s->leading) {
		record_history(s, reports);
		struct soft_node *n = node_get(s, node);
		if (n != NULL) {
			mark_reported(s, n->ranks);
			mark_reported(s, reports);
			node_set_reports(n, reports);
			reports = NULL;
			n->last_seen_ms = mono_now(s);
			n->restarting = restarting_now(body, version);
			n->nudge = 0; /* this answer carries what it was for */
			yard_strcopy(n->version, sizeof n->version, version);
			yard_strcopy(n->worker_version, sizeof n->worker_version, worker_version);
			n->free_disk_mb = free_disk_mb;
			n->probe_port = (int)probe_port;
			if (perf != NULL) {
				if (n->perf == NULL || !json_equal(n->perf, perf))
					s->perf_version++;
				json_decref(n->perf);
				n->perf = perf;
				perf = NULL;
			}
			if (link_settled(n))
				probe_over(s, n);
			s->dirty = 1;
		}
	}
	json_decref(perf);
	json_decref(reports);
	json_t *commands = json_array();
	json_t *me = node_row(s, node);
	if (me != NULL && json_is_string(json_object_get(me, "drain")))
		json_array_append_new(commands, json_pack("{s:s}", "op", "drain"));
	struct soft_node *asked = s->leading ? node_find(s, node) : NULL;
	if (asked != NULL && asked->n_asks > 0)
		checkpoint_commands(s, asked, commands);
	if (asked != NULL && asked->perf_request > 0 &&
	    asked->perf_request_sent < PERF_ASK_ANSWERS) {
		json_array_append_new(commands, json_pack("{s:s,s:I}", "op", "probe", "request",
		                                          (json_int_t)asked->perf_request));
		asked->perf_request_sent++;
	}
	*me_out = me;
	/* leader_id only while leading: it says the pieces of this heartbeat were kept */
	/* offers_shared: this controller sends each job's shared part once when asked
	 * (desired_shared); an agent asks only once it has seen this, so older controllers
	 * never see the field */
	json_t *answer =
	    json_pack("{s:o,s:o,s:b}", "commands", commands, "leader_id",
	              s->leading ? json_string(s->leader_id) : json_null(), "offers_shared", 1);
	const char *offer_key = "upgrade";
	json_t *upgrade = rollout_driver_offer(s->rollouts, node, &offer_key);
	if (upgrade != NULL)
		json_object_set_new(answer, offer_key, upgrade);
	if (s->leading) {
		/* the agent sends its rates until this leader has them (a new leader asks again) */
		const struct soft_node *n = node_find(s, node);
		json_object_set_new(answer, "want_perf",
		                    json_boolean(n == NULL || n->perf == NULL));
		/* the news version this answer's desired set is as of: with the set a watch
		 * answer carries (sched_watch_desired_text), the agent keeps the newer */
		if (n != NULL)
			json_object_set_new(answer, "desired_version",
			                    json_integer((json_int_t)news_version(s, n)));
		json_object_set_new(answer, "offers_watch_desired", json_true());
		uint64_t floor = heartbeat_floor(s);
		if (floor > 0)
			json_object_set_new(answer, "heartbeat_min_ms",
			                    json_integer((json_int_t)floor));
		json_t *probe = link_probe_for(s, node_find(s, node));
		if (probe != NULL)
			json_object_set_new(answer, "link_probe", probe);
	}
	return answer;
}

json_t *sched_heartbeat(struct sched *s, const char *node, const json_t *body, struct yard_err *err)
{
	json_t *me = NULL;
	json_t *answer = heartbeat_answer(s, node, body, &me, err);
	json_t *desired = answer != NULL ? desired_for(s, node, me, NULL, NULL, 0) : NULL;
	json_decref(me);
	if (answer != NULL &&
	    (desired == NULL || json_object_set_new(answer, "desired", desired))) {
		/* never an empty set for want of memory: the agent would stop every rank */
		json_decref(answer);
		yard_err_set(err, YARD_ENOMEM, "out of memory for the heartbeat answer of %s",
		             node);
		return NULL;
	}
	return answer;
}

char *sched_heartbeat_text(struct sched *s, const char *node, const json_t *body, size_t *len,
                           struct yard_err *err)
{
	json_t *me = NULL;
	json_t *answer = heartbeat_answer(s, node, body, &me, err);
	if (answer == NULL) {
		json_decref(me);
		return NULL;
	}
	/* {"desired":...,"commands":...,...}: the answer's members printed after the desired
	 * set, as json_dumps would print them */
	struct jsonx_buf b = {0};
	jsonx_buf_put(&b, "{", 1);
	desired_for(s, node, me, &b, json_string_value(json_object_get(body, "desired_tag")),
	            json_is_true(json_object_get(body, "desired_shared")));
	const char *key;
	json_t *value;
	json_object_foreach(answer, key, value)
	{
		jsonx_buf_put(&b, ",", 1);
		jsonx_escape(key, strlen(key), jsonx_buf_put, &b);
		jsonx_buf_put(&b, ":", 1);
		jsonx_buf_put_json(&b, value);
	}
	jsonx_buf_put(&b, "}", 1);
	int failed = b.failed;
	json_decref(answer);
	json_decref(me);
	if (failed) {
		free(b.text);
		yard_err_set(err, YARD_ENOMEM, "out of memory for the heartbeat answer of %s",
		             node);
		return NULL;
	}
	*len = b.len;
	return b.text;
}

char *sched_watch_desired_text(struct sched *s, const char *node, const char *their_tag,
                               int shared_ok, size_t *len, struct yard_err *err)
{
	if (!s->leading) {
		yard_err_set(err, YARD_ENOTLEADER, "not the leader: watch at the leader");
		return NULL;
	}
	const struct soft_node *n = node_find(s, node);
	if (n == NULL) {
		yard_err_set(err, YARD_ENOTFOUND, "node %s: not known to this leader", node);
		return NULL;
	}
	json_t *me = node_row(s, node);
	struct jsonx_buf b = {0};
	char head[96];
	snprintf(head, sizeof head, "{\"version\":%llu,", (unsigned long long)news_version(s, n));
	put_str(&b, head);
	desired_for(s, node, me, &b, their_tag, shared_ok);
	if (n->nudge)
		put_str(&b, ",\"heartbeat\":true");
	put_str(&b, ",\"leader_id\":");
	jsonx_escape(s->leader_id, strlen(s->leader_id), jsonx_buf_put, &b);
	jsonx_buf_put(&b, "}", 1);
	json_decref(me);
	if (b.failed) {
		free(b.text);
		yard_err_set(err, YARD_ENOMEM, "out of memory for the watch answer of %s", node);
		return NULL;
	}
	s->watch_desired_total++;
	*len = b.len;
	return b.text;
}

/* ---- overlays ---- */

static int rank_cmp(const void *a, const void *b, void *data)
{
	const struct sched *s = data;
	int x = *(const int *)a, y = *(const int *)b;
	return key_before(s, x, y) ? -1 : key_before(s, y, x) ? 1 : 0;
}

/* The place of every job waiting to be placed, in queue order (soft_job.queue_rank), as of
 * the last pass: one sort the first time a job beyond that pass's depth is shown, so listing
 * a thousand queued jobs costs one sort rather than a scan of the queue per job. Without
 * memory for it every queue_rank stays 0 (the position is then left out). */
static void queue_ranks(struct sched *s)
{
	if (s->ranks_pass == s->pass_seq)
		return;
	int *idx = malloc((size_t)(s->n_jobs ? s->n_jobs : 1) * sizeof *idx), n = 0;
	for (int k = 0; k < s->n_jobs; k++) {
		const struct job_key *key = &s->keys[k];
		s->jobs[k].queue_rank = 0;
		if (idx != NULL && !key->dead && !key->proposing &&
		    (key->kind == JK_PENDING || key->kind == JK_RESTARTING))
			idx[n++] = k;
	}
	if (idx == NULL)
		return;
	qsort_r(idx, (size_t)n, sizeof *idx, rank_cmp, s);
	for (int i = 0; i < n; i++)
		s->jobs[idx[i]].queue_rank = i + 1;
	free(idx);
	s->ranks_pass = s->pass_seq;
}

#define CKPT_MANUAL_ASK_MS 600000 /* an API request rides on heartbeat answers this long */

json_t *sched_checkpoint_now(struct sched *s, const char *id, const char *actor, const char *role,
                             struct yard_err *err)
{
	if (!s->leading) {
		yard_err_set(err, YARD_ENOTLEADER, "not the leader: ask the leader");
		return NULL;
	}
	json_t *row = fsm_job_get(s->fsm, id, err);
	if (row == NULL)
		return NULL;
	const char *owner = json_string_value(json_object_get(row, "actor"));
	const char *state = json_string_value(json_object_get(row, "state"));
	int64_t generation = json_integer_value(json_object_get(row, "generation"));
	struct soft_job *j = job_find(s, id);
	int refused = 1;
	if (strcmp(role, "user") == 0 && owner != NULL && strcmp(owner, actor) != 0)
		yard_err_set(err, YARD_EPERM,
		             "job %s belongs to %s; a user may checkpoint only their own jobs", id,
		             owner);
	else if (state == NULL || strcmp(state, "running") != 0)
		yard_err_set(err, YARD_EBUSY,
		             "job %s is %s: only the ranks of a running job can save a checkpoint",
		             id, state ? state : "?");
	else if (j == NULL || key_of(s, j)->kind != JK_RUNNING || j->generation != generation)
		yard_err_set(err, YARD_EBUSY,
		             "job %s: the scheduler has not taken in its generation %lld yet; ask "
		             "again",
		             id, (long long)generation);
	else
		refused = 0;
	json_decref(row);
	if (refused)
		return NULL;
	if (j->layout == NULL)
		j->layout = fsm_job_layout(s->fsm, j->id);
	if (j->ckpt_asked_ms == 0) /* a waiting restart keeps the step it waits to pass */
		j->ckpt_after = job_newest_checkpoint(s, j);
	ckpt_ask(s, j, j->layout);
	j->ckpt_manual_until_ms = mono_now(s) + CKPT_MANUAL_ASK_MS;
	log_info("scheduler: job %s generation %lld: %s asks its ranks for a checkpoint (request "
	         "%lld); reported step %lld, newest complete step %lld",
	         j->id, (long long)j->generation, actor, (long long)j->ckpt_request,
	         (long long)j->step, (long long)j->ckpt_after);
	return json_pack("{s:s,s:I,s:I,s:I,s:I}", "id", j->id, "generation",
	                 (json_int_t)j->generation, "request", (json_int_t)j->ckpt_request, "step",
	                 (json_int_t)j->step, "newest_step", (json_int_t)j->ckpt_after);
}

#define ETA_AHEAD_MAX 256       /* jobs ahead of it an estimate plays forward, at most */
#define ETA_WORK_MAX 1500000LL  /* node visits an estimate may make (eta.h): ~25 ms here */
#define ETA_RATE_MIN_MS 2000    /* a step rate is measured over at least this long */

/* When running job j is expected to end (wall ms; ETA_UNKNOWN: not known) and how that was
 * found: its time limit, or the steps it has left at the rate measured since its generation's
 * first step, whichever comes first. */
static int64_t expected_end_ms(const struct sched *s, const struct soft_job *j, char *basis,
                               size_t len)
{
	int64_t end = ETA_UNKNOWN, left = time_left_ms(s, j), now = wall_now(s);
	snprintf(basis, len, "unknown");
	if (left != INT64_MAX) {
		end = now + left;
		snprintf(basis, len, "its time limit");
	}
	if (j->total_steps > 0 && j->step >= 0 && j->rate_step1 > j->rate_step0 &&
	    j->rate_ms1 >= j->rate_ms0 + ETA_RATE_MIN_MS) {
		double per_ms =
		    (double)(j->rate_step1 - j->rate_step0) / (double)(j->rate_ms1 - j->rate_ms0);
		int64_t steps_left = YARD_MAX(j->total_steps - j->rate_step1, (int64_t)0);
		int64_t seen = now - (int64_t)(mono_now(s) - j->rate_ms1);
		int64_t at = seen + (int64_t)((double)steps_left / per_ms);
		if (at < end) {
			end = at;
			snprintf(basis, len, "step %lld of %lld at %.2f steps/s",
			         (long long)j->rate_step1, (long long)j->total_steps,
			         per_ms * 1000);
		}
	}
	return end;
}

static int after_all_met(const struct soft_job *j)
{
	size_t n = json_array_size(j->after);
	return j->after == NULL || (n < 32 && j->after_met == (1u << n) - 1);
}

/* a waiting job an estimate can play forward: placeable and in the queue */
static int eta_waiting(struct sched *s, int k)
{
	const struct job_key *key = &s->keys[k];
	const struct soft_job *j = &s->jobs[k];
	return !key->dead && !key->proposing &&
	       (key->kind == JK_PENDING || key->kind == JK_RESTARTING) && j->parsed == 1 &&
	       j->req.dp * j->req.tp * j->req.pp > 0 &&
	       (key->kind != JK_PENDING || after_all_met(j));
}

/* The estimate for waiting job j (eta.h): the running jobs as holders, the waiting jobs
 * ahead of it in queue order. */
static void estimate_start(struct sched *s, struct soft_job *j, struct eta_result *r)
{
	r->start_ms = ETA_UNKNOWN;
	int k_self = (int)(j - s->jobs);
	if (!eta_waiting(s, k_self)) {
		snprintf(r->why, sizeof r->why, "%s",
		         !after_all_met(j) ? "no estimate: it waits for the jobs of its after list"
		         : j->parsed != 1  ? "no estimate: it cannot be placed"
		         : j->req.dp * j->req.tp * j->req.pp == 0
		             ? "no estimate: its layout is planned when it is placed"
		             : "no estimate: it is being placed");
		return;
	}
	snprintf(r->why, sizeof r->why, "no estimate: out of memory");
	if (pn_refresh(s, s->nodes_list) != 0)
		return;
	int n_nodes = s->n_pn, n_h = 0, n_w = 0;
	struct place_node *pn = malloc((size_t)(n_nodes > 0 ? n_nodes : 1) * sizeof *pn);
	struct eta_holder *h = calloc((size_t)s->n_jobs + 1, sizeof *h);
	int *ahead = malloc(((size_t)s->n_jobs + 1) * sizeof *ahead);
	struct eta_waiter *w = NULL;
	if (pn == NULL || h == NULL || ahead == NULL)
		goto out;
	busy_mark(s, pn);
	for (int k = 0; k < s->n_jobs; k++) {
		struct soft_job *o = &s->jobs[k];
		if (s->keys[k].dead || s->keys[k].kind != JK_RUNNING || o->row == NULL ||
		    !o->row_running || o->layout_slots == NULL)
			continue; /* busy_mark built the layout slots of every running job */
		struct place_slot *slots =
		    malloc((size_t)(o->n_layout_slots > 0 ? o->n_layout_slots : 1) * sizeof *slots);
		if (slots == NULL)
			goto out;
		for (int r_i = 0; r_i < o->n_layout_slots; r_i++)
			slots[r_i] = (struct place_slot){.node = o->layout_slots[r_i][0],
			                                 .device = o->layout_slots[r_i][1]};
		h[n_h].id = o->id;
		h[n_h].slots = slots;
		h[n_h].n_slots = o->n_layout_slots;
		h[n_h].end_ms = expected_end_ms(s, o, h[n_h].basis, sizeof h[n_h].basis);
		n_h++;
	}
	int n_ahead = 0;
	for (int k = 0; k < s->n_jobs; k++)
		if (k != k_self && eta_waiting(s, k) && key_before(s, k, k_self))
			ahead[n_ahead++] = k;
	if (n_ahead > ETA_AHEAD_MAX) {
		snprintf(r->why, sizeof r->why,
		         "no estimate: %d jobs are ahead of it (an estimate plays at most %d "
		         "forward)",
		         n_ahead, ETA_AHEAD_MAX);
		goto out;
	}
	qsort_r(ahead, (size_t)n_ahead, sizeof *ahead, rank_cmp, s);
	ahead[n_ahead] = k_self;
	if ((w = malloc(((size_t)n_ahead + 1) * sizeof *w)) == NULL)
		goto out;
	for (int i = 0; i <= n_ahead; i++) {
		const struct soft_job *o = &s->jobs[ahead[i]];
		int64_t left = time_left_ms(s, o); /* from its first placement, if it had one */
		int64_t duration = o->time_limit_s <= 0 ? 0
		                   : left == INT64_MAX  ? (int64_t)o->time_limit_s * 1000
		                                        : YARD_MAX(left, (int64_t)1);
		w[n_w++] = (struct eta_waiter){.id = o->id, .req = o->req, .duration_ms = duration};
	}
	if (eta_estimate(pn, n_nodes, h, n_h, w, n_w, wall_now(s), ETA_WORK_MAX, r) != 0) {
		r->start_ms = ETA_UNKNOWN;
		snprintf(r->why, sizeof r->why, "no estimate: the estimate failed");
	}
out:
	for (int i = 0; h != NULL && i < n_h; i++)
		free((void *)h[i].slots);
	free(w);
	free(ahead);
	free(h);
	free(pn);
}

void sched_overlay_estimate(struct sched *s, json_t *job)
{
	if (!s->leading)
		return;
	const char *id = json_string_value(json_object_get(job, "id"));
	const char *state = json_string_value(json_object_get(job, "state"));
	struct soft_job *j = id ? job_find(s, id) : NULL;
	if (j == NULL || state == NULL ||
	    (strcmp(state, "pending") != 0 && strcmp(state, "restarting") != 0))
		return;
	struct eta_result r;
	estimate_start(s, j, &r);
	if (r.start_ms != ETA_UNKNOWN)
		json_object_set_new(job, "estimated_start_ms", json_integer(r.start_ms));
	json_object_set_new(job, "estimate", json_string(r.why));
}

void sched_overlay_job(struct sched *s, json_t *job)
{
	if (!s->leading)
		return;
	const char *id = json_string_value(json_object_get(job, "id"));
	const char *state = json_string_value(json_object_get(job, "state"));
	struct soft_job *j = id ? job_find(s, id) : NULL;
	if (j == NULL || state == NULL)
		return;
	if (strcmp(state, "pending") == 0 || strcmp(state, "restarting") == 0) {
		int position = j->position;
		char reason[QUEUE_REASON_MAX];
		snprintf(reason, sizeof reason, "%s", j->reason);
		if (j->position_pass != s->pass_seq && key_of(s, j)->kind == JK_PENDING &&
		    !j->proposing) {
			/* beyond the last pass's depth: its place now, and the reason of the last
			 * pass that looked stands */
			queue_ranks(s);
			position = j->queue_rank;
			if (reason[0] == '\0' && position > 0)
				snprintf(reason, sizeof reason,
				         "queued behind %d job(s); the next full pass looks at it",
				         position - 1);
		}
		if (reason[0] != '\0')
			json_object_set_new(job, "reason", json_string(reason));
		if (position > 0)
			json_object_set_new(job, "position", json_integer(position));
	}
	if (strcmp(state, "running") != 0)
		return;
	if (j->step >= 0)
		json_object_set_new(job, "step", json_integer(j->step));
	if (j->has_loss)
		json_object_set_new(job, "loss", json_real(j->loss));
	if (j->growth != NULL)
		json_object_set_new(job, "growth", json_string(j->growth));
	if (ckpt_asking(s, j))
		json_object_set_new(job, "checkpoint_request",
		                    json_pack("{s:I,s:I,s:I,s:b}", "request",
		                              (json_int_t)j->ckpt_request, "after_step",
		                              (json_int_t)j->ckpt_after, "newest_step",
		                              (json_int_t)job_newest_checkpoint(s, j),
		                              "restart_waits", j->ckpt_asked_ms != 0));
	/* the reports of the nodes of its layout, each node once: not a scan of every node's
	 * reports, which made a job list on a cluster of thousands of nodes stall the leader */
	if (j->layout == NULL)
		j->layout = fsm_job_layout(s->fsm, j->id);
	json_t *ranks = json_array(), *seen = json_object();
	size_t slot_i;
	json_t *slot;
	json_array_foreach(j->layout, slot_i, slot)
	{
		const char *node_id = json_string_value(json_object_get(slot, "node"));
		if (node_id == NULL || json_object_get(seen, node_id) != NULL)
			continue;
		json_object_set_new(seen, node_id, json_true());
		const struct soft_node *n = node_find(s, node_id);
		size_t i;
		json_t *r;
		json_array_foreach(n != NULL ? n->ranks : NULL, i, r)
		{
			if (strcmp(json_string_value(json_object_get(r, "job")), id) != 0 ||
			    json_integer_value(json_object_get(r, "generation")) != j->generation)
				continue;
			json_t *copy = json_deep_copy(r);
			int64_t rank = json_integer_value(json_object_get(r, "rank"));
			json_t *windows = json_object_get(copy, "windows");
			json_t *last = json_array_get(windows, json_array_size(windows) - 1);
			if (last != NULL)
				json_object_set(copy, "window_compute_ms",
				                json_object_get(last, "compute_ms"));
			json_object_del(copy, "job");
			json_object_del(copy, "windows");
			json_object_set_new(copy, "node", json_string(n->id));
			for (int f = 0; f < j->n_flags; f++)
				if (j->flags[f].rank == rank)
					json_object_set_new(copy, "straggler", json_true());
			json_array_append_new(ranks, copy);
		}
	}
	json_decref(seen);
	json_object_set_new(job, "ranks", ranks);
	if (j->det_ready != 1)
		return;
	json_t *flags = json_array();
	for (int f = 0; f < j->n_flags; f++) {
		const struct soft_straggler *g = &j->flags[f];
		json_array_append_new(flags,
		                      json_pack("{s:i,s:s,s:i,s:f,s:f,s:f,s:I}", "rank", g->rank,
		                                "node", g->node, "stage", g->stage, "ratio",
		                                g->ratio, "compute_ms", g->compute_ms, "median_ms",
		                                g->median_ms, "window", (json_int_t)g->window));
	}
	json_object_set_new(job, "stragglers", flags);
	json_object_set_new(job, "straggler_windows_judged",
	                    json_integer((json_int_t)j->det.windows_judged));
}

void sched_metrics_render(struct sched *s, FILE *f)
{
	yard_hist_render(f, "yard_sched_pickup_delay_ms",
	                 "From the apply of a job change (a submission, an exit) to the scheduling "
	                 "pass that reads it, for each pass that found changes (leader only).",
	                 1, "", &s->pickup_ms);
	yard_hist_render(f, "yard_sched_queue_wait_ms",
	                 "From the pass that first read a job waiting (pending or restarting) to "
	                 "the proposal of its placement: time in the pass before it, and waiting "
	                 "for free devices (leader only).",
	                 1, "", &s->queue_wait_ms);
	yard_hist_render(f, "yard_sched_submit_to_placed_ms",
	                 "From a job's submission (the leader's proposal of it) to this leader's "
	                 "apply of its first placement: both raft commits, the pickup and the "
	                 "queue wait (leader only; the clocks of the leader at each end).",
	                 1, "", &s->submit_placed_ms);
	yard_hist_render(f, "yard_sched_pass_duration_ms",
	                 "How long a scheduling pass over the jobs held the loop: kick, right "
	                 "after jobs changed; tick, the periodic pass that also checks nodes.",
	                 1, "pass=\"kick\"", &s->pass_ms[0]);
	yard_hist_render(f, "yard_sched_pass_duration_ms", NULL, 0, "pass=\"tick\"",
	                 &s->pass_ms[1]);
	fprintf(f,
	        "# HELP yard_sched_placed_at_submission_total Jobs placed in their submission's "
	        "raft entry (nothing waited in the queue; leader only).\n"
	        "# TYPE yard_sched_placed_at_submission_total counter\n"
	        "yard_sched_placed_at_submission_total %llu\n"
	        "# HELP yard_sched_placed_at_submission_refused_total Placements at submission "
	        "the state machine refused (the job waited in the queue instead).\n"
	        "# TYPE yard_sched_placed_at_submission_refused_total counter\n"
	        "yard_sched_placed_at_submission_refused_total %llu\n",
	        (unsigned long long)s->placed_at_submit_total,
	        (unsigned long long)s->placed_at_submit_refused_total);
	fprintf(f,
	        "# HELP yard_sched_placements_domains_total Placements proposed in a cluster "
	        "with topology domains (yardd --topology-label): within one domain, or across "
	        "several because none had room (leader only).\n"
	        "# TYPE yard_sched_placements_domains_total counter\n"
	        "yard_sched_placements_domains_total{spans=\"one\"} %llu\n"
	        "yard_sched_placements_domains_total{spans=\"several\"} %llu\n",
	        (unsigned long long)s->placed_one_domain_total,
	        (unsigned long long)s->placed_across_domains_total);
	fprintf(
	    f,
	    "# HELP yard_sched_jobs_held Jobs whose state the scheduler holds in memory "
	    "(released once they end; leader only).\n"
	    "# TYPE yard_sched_jobs_held gauge\nyard_sched_jobs_held %d\n"
	    "# HELP yard_sched_jobs_active Pending, running and restarting jobs as of the last "
	    "pass (leader only).\n# TYPE yard_sched_jobs_active gauge\nyard_sched_jobs_active %d\n",
	    s->leading ? s->n_jobs - s->n_dead : 0, s->leading ? s->n_active : 0);
	fprintf(f,
	        "# HELP yard_sched_proposals_in_flight The scheduler's proposals not committed "
	        "yet (leader only; at most about %d: passes leave the rest for later).\n"
	        "# TYPE yard_sched_proposals_in_flight gauge\nyard_sched_proposals_in_flight %d\n"
	        "# HELP yard_sched_passes_capped_total Passes that left placements, notes or a "
	        "running job's news for a later pass, and node-health checks that left nodes' "
	        "state changes for the next tick, because %d proposals were under way.\n"
	        "# TYPE yard_sched_passes_capped_total counter\n"
	        "yard_sched_passes_capped_total{pass=\"jobs\"} %llu\n"
	        "yard_sched_passes_capped_total{pass=\"nodes\"} %llu\n",
	        SCHED_IN_FLIGHT_MAX, s->leading ? s->n_in_flight : 0, SCHED_IN_FLIGHT_MAX,
	        (unsigned long long)s->passes_capped_total,
	        (unsigned long long)s->nodes_capped_total);
	fprintf(f, "# HELP yard_straggler_ratio Compute time of a flagged straggler rank over the "
	           "median of its pipeline stage (leader only).\n"
	           "# TYPE yard_straggler_ratio gauge\n");
	for (int k = 0; s->leading && k < s->n_jobs; k++) {
		const struct soft_job *j = &s->jobs[k];
		for (int i = 0; i < j->n_flags; i++)
			fprintf(f,
			        "yard_straggler_ratio{job=\"%s\",rank=\"%d\",node=\"%s\"} %.4f\n",
			        j->id, j->flags[i].rank, j->flags[i].node, j->flags[i].ratio);
	}
	fprintf(f,
	        "# HELP yard_stragglers_flagged_total Ranks flagged as stragglers.\n"
	        "# TYPE yard_stragglers_flagged_total counter\n"
	        "yard_stragglers_flagged_total %llu\n",
	        (unsigned long long)s->stragglers_flagged_total);
	fprintf(f,
	        "# HELP yard_straggler_windows_judged_total Job windows the straggler detector "
	        "judged.\n# TYPE yard_straggler_windows_judged_total counter\n"
	        "yard_straggler_windows_judged_total %llu\n",
	        (unsigned long long)s->straggler_windows_judged_total);
	fprintf(f,
	        "# HELP yard_straggler_judge_seconds_total Time the straggler detector spent "
	        "judging windows.\n# TYPE yard_straggler_judge_seconds_total counter\n"
	        "yard_straggler_judge_seconds_total %.9f\n",
	        (double)s->straggler_judge_ns_total / 1e9);
	fprintf(f,
	        "# HELP yard_agent_watches Agents waiting on a watch for news of their node.\n"
	        "# TYPE yard_agent_watches gauge\nyard_agent_watches %d\n"
	        "# HELP yard_agent_watch_answers_total Watches answered (news, timeout, "
	        "superseded or leadership lost).\n# TYPE yard_agent_watch_answers_total counter\n"
	        "yard_agent_watch_answers_total %llu\n"
	        "# HELP yard_node_news_total News for nodes' watches: a placement on a node, or "
	        "one it leaves.\n"
	        "# TYPE yard_node_news_total counter\nyard_node_news_total %llu\n"
	        "# HELP yard_agent_watch_desired_total Watch answers that carried the node's "
	        "desired set (agents that ask for it).\n"
	        "# TYPE yard_agent_watch_desired_total counter\n"
	        "yard_agent_watch_desired_total %llu\n"
	        "# HELP yard_node_nudges_total Nodes asked through their watch to heartbeat now: "
	        "a drain command or a rollout's offer rides on the answer.\n"
	        "# TYPE yard_node_nudges_total counter\nyard_node_nudges_total %llu\n",
	        s->n_watching, (unsigned long long)s->watch_answers_total,
	        (unsigned long long)s->watch_news_total, (unsigned long long)s->watch_desired_total,
	        (unsigned long long)s->nudges_total);
	fprintf(f,
	        "# HELP yard_preemptions_total Running jobs this leader restarted to give their "
	        "devices to a waiting job of higher priority (yardd --preempt-after-s).\n"
	        "# TYPE yard_preemptions_total counter\nyard_preemptions_total %llu\n",
	        (unsigned long long)s->preemptions_total);
	fprintf(f,
	        "# HELP yard_heartbeat_desired_unchanged_total Heartbeat answers that told the "
	        "agent its desired set is the one it holds (desired_tag) instead of sending it.\n"
	        "# TYPE yard_heartbeat_desired_unchanged_total counter\n"
	        "yard_heartbeat_desired_unchanged_total %llu\n"
	        "# HELP yard_heartbeat_desired_shared_total Heartbeat answers that sent the "
	        "desired set with each job's shared variables and spec once (desired_shared).\n"
	        "# TYPE yard_heartbeat_desired_shared_total counter\n"
	        "yard_heartbeat_desired_shared_total %llu\n",
	        (unsigned long long)s->desired_unchanged_total,
	        (unsigned long long)s->desired_shared_total);
	fprintf(f,
	        "# HELP yard_heartbeat_min_interval_seconds The shortest interval between "
	        "heartbeats this leader asks of each agent (0: none asked).\n"
	        "# TYPE yard_heartbeat_min_interval_seconds gauge\n"
	        "yard_heartbeat_min_interval_seconds %.3f\n"
	        "# HELP yard_node_suspect_seconds Silence after which this leader turns a node "
	        "suspect.\n# TYPE yard_node_suspect_seconds gauge\nyard_node_suspect_seconds %.3f\n"
	        "# HELP yard_node_down_seconds Silence after which this leader declares a node "
	        "down.\n# TYPE yard_node_down_seconds gauge\nyard_node_down_seconds %.3f\n",
	        (double)heartbeat_floor(s) / 1000, (double)suspect_ms(s) / 1000,
	        (double)down_ms(s) / 1000);
}

void sched_overlay_rollout(struct sched *s, json_t *rollout)
{
	rollout_driver_overlay(s->rollouts, rollout);
}

int sched_jobs_dropping(const struct sched *s)
{
	int n = 0;
	for (const struct grave *g = s->graves; g != NULL; g = g->next)
		n += g->n - g->at;
	return n;
}

int sched_admit(struct sched *s, char *why, size_t why_len)
{
	size_t state = 0;
	/* the pages in use, not the file: the file keeps the pages deletions freed (for reuse),
	 * so judged by it a full cluster would refuse submissions for good */
	if (s->cfg.max_state_mb > 0 &&
	    fsm_state_reaches(s->fsm, (size_t)s->cfg.max_state_mb << 20, &state)) {
		snprintf(
		    why, why_len,
		    "the controller's replicated state holds %zu MiB in use, at its limit (yardd "
		    "--max-state-mb %llu; the state machine takes nothing new from %zu MiB): "
		    "submissions are refused until ended jobs are collected (--job-retention-s, "
		    "yardctl job delete) or events pruned (--events-max)",
		    state >> 20, (unsigned long long)s->cfg.max_state_mb,
		    (FSM_DB_MAX - FSM_DB_HEADROOM) >> 20);
		return -2;
	}
	int max = s->cfg.max_active_jobs;
	/* while a reread after a leadership change goes on, its list counts */
	int known = YARD_MAX(s->n_active, s->resync_rowids != NULL ? s->n_resync : 0);
	if (max <= 0 || known + s->n_admitted < max) {
		s->n_admitted++;
		return 0;
	}
	snprintf(why, why_len,
	         "the cluster holds about %d active jobs (pending, running or restarting), its "
	         "limit (yardd --max-active-jobs %d): submit again when some have ended, or "
	         "cancel some",
	         known + s->n_admitted, max);
	return -1;
}

/* The placement of a submission (sched_submit_begin), or NULL when it goes through the
 * queue: only with nothing waiting there (a job placed here would overtake it), in the
 * view of the last pass less what was placed since (never a device that view gives to
 * another job; exits since then are not counted, a conservative view), with no submission
 * ahead of it going through the queue; not a job that waits for others (spec "after"). */
static json_t *place_submission(struct sched *s, const struct jobspec *spec)
{
	if (!s->io.is_ready(s->io.data) || s->resync_rowids != NULL || s->jobs_resync ||
	    !s->busy_built || s->busy_nodes_version != s->nodes_version || s->busy == NULL ||
	    s->queue_waiting > 0 || s->slow_applied || spec->parallel.is_auto || spec->n_after > 0)
		return NULL;
	for (int i = 0; i < s->n_subs - 1; i++) /* the last one is this submission */
		if (s->subs[i].ranks == NULL && s->subs[i].epoch == s->epoch)
			return NULL;
	struct place_request req = {.require_cuda = spec->device == JOBSPEC_DEVICE_CUDA,
	                            .require_cpu = spec->device == JOBSPEC_DEVICE_CPU,
	                            .memory_mb = spec->memory_mb};
	if (spec->is_command)
		req.dp = spec->ranks, req.tp = 1, req.pp = 1;
	else
		req.dp = spec->parallel.dp, req.tp = spec->parallel.tp, req.pp = spec->parallel.pp;
	int64_t world = (int64_t)req.dp * req.tp * req.pp;
	if (world < 1 || world > 65536)
		return NULL;
	if (s->sub_index == NULL && (s->sub_index = place_index_build(s->busy, s->n_pn)) == NULL)
		return NULL;
	struct place_slot *slots = calloc((size_t)world, sizeof *slots);
	char reason[QUEUE_REASON_MAX];
	if (slots == NULL ||
	    place_index_gang(s->sub_index, &req, slots, reason, (int)sizeof reason) != 0) {
		free(slots);
		return NULL; /* it waits in the queue, with the pass's reason */
	}
	count_domains(s, s->busy, slots, (int)world);
	json_t *ranks = json_array();
	for (int64_t r = 0; ranks != NULL && r < world; r++)
		json_array_append_new(ranks,
		                      json_pack("{s:s,s:i}", "node", s->busy[slots[r].node].id,
		                                "device", slots[r].device));
	free(slots);
	s->subs_since_view++;
	return ranks;
}

json_t *sched_submit_begin(struct sched *s, const struct jobspec *spec, uint64_t *token)
{
	*token = 0;
	if (s == NULL || !s->leading)
		return NULL;
	if (room_for_one((void **)&s->subs, &s->cap_subs, s->n_subs, sizeof *s->subs) != 0)
		return NULL;
	struct submission *sub = &s->subs[s->n_subs++];
	*sub = (struct submission){
	    .token = ++s->next_sub_token, .epoch = s->epoch, .wall_ms = wall_now(s)};
	*token = sub->token;
	sub->ranks = place_submission(s, spec);
	return json_incref(sub->ranks);
}

void sched_submit_done(struct sched *s, uint64_t token, int status, const json_t *result)
{
	int k = 0;
	while (k < s->n_subs && s->subs[k].token != token)
		k++;
	if (k == s->n_subs)
		return; /* dropped with a leadership */
	struct submission sub = s->subs[k];
	memmove(&s->subs[k], &s->subs[k + 1], (size_t)(s->n_subs - k - 1) * sizeof *s->subs);
	s->n_subs--;
	if (sub.epoch == s->epoch && s->leading && status == 0) {
		const json_t *body = json_object_get(result, "body");
		const char *state = json_string_value(json_object_get(body, "state"));
		int running = state != NULL && strcmp(state, "running") == 0;
		if (sub.ranks != NULL && running) {
			s->placed_at_submit_total++;
			yard_hist_note(&s->submit_placed_ms, (double)(wall_now(s) - sub.wall_ms));
		} else if (state != NULL) { /* pending: the queue has it now */
			if (sub.ranks != NULL) {
				s->placed_at_submit_refused_total++;
				log_info(
				    "scheduler: job %s not placed at submission (%s): it waits in "
				    "the queue",
				    json_string_value(json_object_get(body, "id")),
				    json_string_value(json_object_get(body, "placement_refused")));
			}
			s->slow_applied = 1;
		}
		s->dirty = 1;
	}
	json_decref(sub.ranks);
}

uint64_t sched_node_down_ms(struct sched *s)
{
	return down_ms(s);
}

json_t *sched_heartbeat_pace(struct sched *s)
{
	if (!s->leading)
		return NULL;
	uint64_t floor = heartbeat_floor(s);
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "nodes", (json_int_t)nodes_known(s),
	                 "max_heartbeats_per_s", (json_int_t)s->cap, "heartbeat_min_ms",
	                 (json_int_t)floor, "node_suspect_ms", (json_int_t)suspect_ms(s),
	                 "node_down_ms", (json_int_t)down_ms(s), "node_restart_grace_ms",
	                 (json_int_t)s->cfg.node_restart_grace_ms);
}

int sched_node_probe(struct sched *s, const char *node, int64_t *request, struct yard_err *err)
{
	if (!s->leading) {
		yard_err_set(err, YARD_ENOTLEADER, "not the leader");
		return -1;
	}
	json_t *row = node_row(s, node);
	if (row == NULL) {
		yard_err_set(err, YARD_ENOTFOUND, "no node '%s'", node);
		return -1;
	}
	const char *state = json_string_value(json_object_get(row, "state"));
	int down = state != NULL && strcmp(state, "down") == 0;
	json_decref(row);
	if (down) {
		yard_err_set(err, YARD_EBUSY,
		             "node %s is down: its agent measures the node when it starts again",
		             node);
		return -1;
	}
	struct soft_node *n = node_get(s, node);
	if (n == NULL) {
		yard_err_set(err, YARD_ENOMEM, "no memory for node %s", node);
		return -1;
	}
	int64_t wall = wall_now(s);
	n->perf_request = wall > n->perf_request ? wall : n->perf_request + 1;
	n->perf_request_sent = 0;
	node_nudge(s, node); /* a watching agent heartbeats at once for it */
	*request = n->perf_request;
	log_info("scheduler: node %s asked to measure its rates again (request %lld)", node,
	         (long long)n->perf_request);
	return 0;
}

int sched_node_nudged(struct sched *s, const char *node)
{
	const struct soft_node *n = s->leading ? node_find(s, node) : NULL;
	return n != NULL && n->nudge;
}

int sched_node_live(struct sched *s, const char *node, int64_t *ago_ms)
{
	struct soft_node *n = s->leading ? node_find(s, node) : NULL;
	if (n == NULL || n->last_seen_ms == 0)
		return 0;
	uint64_t ago = mono_now(s) - n->last_seen_ms;
	*ago_ms = (int64_t)ago;
	return ago < suspect_ms(s);
}

void sched_overlay_node(struct sched *s, json_t *node)
{
	if (!s->leading)
		return;
	struct soft_node *n = node_find(s, json_string_value(json_object_get(node, "id")));
	if (n == NULL || n->last_seen_ms == 0)
		return;
	json_object_set_new(node, "last_heartbeat_ms_ago",
	                    json_integer((json_int_t)(mono_now(s) - n->last_seen_ms)));
	json_object_set_new(node, "ranks", n->ranks ? json_deep_copy(n->ranks) : json_array());
	if (n->version[0] != '\0') /* what the agent runs now; the row has what it registered */
		json_object_set_new(node, "version", json_string(n->version));
	if (n->worker_version[0] != '\0')
		json_object_set_new(node, "worker_version", json_string(n->worker_version));
	if (n->free_disk_mb >= 0)
		json_object_set_new(node, "free_disk_mb", json_integer(n->free_disk_mb));
	if (n->perf != NULL)
		json_object_set_new(node, "perf", json_deep_copy(n->perf));
}

json_t *sched_plan(struct sched *s, const json_t *spec, int limit, struct yard_err *err)
{
	if (!s->leading) {
		yard_err_set(err, YARD_ENOTLEADER,
		             "plan: this controller is not the leader; measured rates live there");
		return NULL;
	}
	json_t *nodes = fsm_nodes_list(s->fsm, err);
	if (nodes == NULL)
		return NULL;
	json_t *perf = perf_by_node(s);
	json_t *answer = autoplan_run(spec, nodes, perf, limit, err);
	json_decref(perf);
	json_decref(nodes);
	return answer;
}

/* ---- rank output ---- */

json_t *sched_job_logs(struct sched *s, const char *job, int rank, int64_t generation,
                       int64_t offset, size_t max_bytes, struct yard_err *err)
{
	if (!s->leading) {
		yard_err_set(err, YARD_ENOTLEADER, "rank output is kept by the leader only");
		return NULL;
	}
	if (rank < 0)
		return json_pack("{s:s,s:o}", "job", job, "streams",
		                 logstore_streams(s->logs, job));
	if (generation < 0)
		generation = logstore_latest_generation(s->logs, job, rank);
	struct logstore_read r;
	int rc = generation < 0 ? YARD_ENOTFOUND
	                        : logstore_read(s->logs, job, rank, generation, 0, 0, &r);
	if (rc == 0 && offset < 0)
		offset = r.first_offset;
	if (rc == 0)
		rc = logstore_read(s->logs, job, rank, generation, offset, max_bytes, &r);
	if (rc == YARD_ENOTFOUND) {
		yard_err_set(err, rc,
		             generation < 0
		                 ? "job %s: no output of rank %d is held"
		                 : "job %s: no output of rank %d generation %lld is held",
		             job, rank, (long long)generation);
		return NULL;
	}
	if (rc != 0) {
		yard_err_set(err, rc, "job %s rank %d: cannot read its output", job, rank);
		return NULL;
	}
	/* A young leadership is still receiving the tails agents resend: a hole before what it
	 * holds may be filled in a moment, so it is not reported (and skipped) yet. */
	if (r.skipped > 0 && mono_now(s) - s->leader_since_ms < down_ms(s)) {
		free(r.data);
		r.data = NULL;
		r.len = 0;
		r.offset = offset;
		r.skipped = 0;
	}
	size_t used = 0;
	json_t *text = logstore_text(r.data != NULL ? r.data : "", r.len, &used);
	json_t *out = json_pack("{s:s,s:i,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:o}", "job", job, "rank",
	                        rank, "generation", (json_int_t)generation, "node", r.node,
	                        "offset", (json_int_t)r.offset, "skipped", (json_int_t)r.skipped,
	                        "next_offset", (json_int_t)(r.offset + (int64_t)used),
	                        "first_offset", (json_int_t)r.first_offset, "end_offset",
	                        (json_int_t)r.end_offset, "data", text);
	free(r.data);
	return out;
}
