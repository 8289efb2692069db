/* queue.h: one scheduling pass over the pending queue (leader only; pure function).
 *
 * Order: priority (higher first), then submission sequence. Each job is gang-placed whole
 * or not at all (place.h), so two gangs never hold parts of the cluster waiting for each
 * other: there is no partial allocation to deadlock on. A job that does not fit is skipped
 * and smaller jobs behind it may start (backfill), except that once a job has waited longer
 * than reserve_after_ms no job behind it starts: the free devices are kept for it, so a big
 * gang cannot be starved by a stream of small ones. A job that may shrink its data-parallel
 * degree (a re-placement under failure.allow_shrink_dp) tries its smaller layouts in its own
 * turn, largest first, before the queue moves on.
 * A job that would not fit even if every device were free never reserves (it would hold
 * the free devices forever). Preemption of running jobs for a waiting one is the leader's
 * (leader.c, preempt_choose), after a pass.
 *
 * A pass may stop after looking at max_attempts jobs (Slurm's default_queue_depth): the passes
 * a committed change triggers stay cheap however deep the queue is, and a periodic pass
 * with no limit reaches every job. Jobs beyond the depth still get their queue position.
 * A pass may also stop once it has placed max_placed jobs: the leader bounds the placements
 * under way, so that a deep pass that finds thousands of free devices does not put thousands
 * of commands into raft at once.
 */
#ifndef YARD_SCHED_QUEUE_H
#define YARD_SCHED_QUEUE_H

#include <stdint.h>

#include "scheduler/place.h"

#define QUEUE_REASON_MAX 160

struct queue_job {
	const char *id;
	int priority;
	int64_t seq;              /* submission order */
	int64_t pending_since_ms; /* when it became pending */
	struct place_request req;
	/* smaller data-parallel degrees the job may run with instead (failure.allow_shrink_dp),
	 * largest first, each below req.dp: tried in order, in the job's turn, when req does not
	 * fit; NULL: none */
	const int *shrink_dp;
	int n_shrink_dp;
	/* devices kept for this job (a preemption's): when its turn does not place it, the jobs
	 * after it in the pass see them busy; NULL: none */
	const struct place_slot *hold;
	int n_hold;
	int user; /* the caller's, untouched by the pass (the leader: its candidate index) */
	/* outputs of queue_pass */
	int placed;                    /* 1: slots are filled */
	int dp;                        /* placed: the dp placed, req.dp or one of shrink_dp */
	int tried;                     /* 0: beyond the pass's depth, placed and reason untouched */
	int repeated; /* tried: 1 when an identical request had already failed in this pass
	               * since its last placement, so it got that one's result without a try */
	struct place_slot *slots;      /* dp*tp*pp entries: the caller's, or allocated by the pass
	                                * when NULL (the caller frees them) */
	int position;                  /* 1-based queue position after sorting */
	char reason[QUEUE_REASON_MAX]; /* why it is still pending; placed with a smaller dp:
	                                * why req.dp did not fit */
};

struct queue_policy {
	int64_t reserve_after_ms; /* 0 = never reserve (pure backfill) */
	int max_attempts;         /* jobs the pass looks at, in queue order; 0 = every job */
	int max_placed; /* jobs the pass places at most (those after the last one placed are left
	                 * as beyond the depth); 0 = no limit */
};

/* Runs one pass at time now_ms. Marks devices of placed jobs busy in nodes. Returns the
 * number of jobs placed. jobs is reordered into queue order. */
int queue_pass(struct queue_job *jobs, int n_jobs, struct place_node *nodes, int n_nodes,
               const struct queue_policy *policy, int64_t now_ms);

#endif
