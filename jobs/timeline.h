/* timeline.h: a job's life told from its events (GET /v1/jobs/{id}/timeline, `yardctl job
 * timeline`): when it was submitted, first placed, first made a step and ended, and every
 * interruption, from the moment the leader decided it (a failure detected, a move off a
 * draining node or for a preemption or a planned restart, a straggler moved) through its
 * ranks stopping, its re-placement and its ranks starting, to the first step after it; and
 * how much of the time since its first placement the job made progress (the research's
 * ETTR, research/orchestrators.md G5 and G12).
 *
 * Pure: the events are the state machine's (oldest first, as GET /v1/events?job=ID gives
 * them), the times are the events' (each the leader's clock when it proposed the change), and
 * the messages are this project's own formats (jobs/fsm_cluster.c), read for the cause, the
 * step an interruption's message ends in (JOB_REACHED) and the generation and checkpoint step
 * a re-placement names.
 */
#ifndef YARD_JOBS_TIMELINE_H
#define YARD_JOBS_TIMELINE_H

#include <jansson.h>
#include <stdint.h>

/* How a job.restarting or job.replacing message ends: JOB_REACHED and the step the job's ranks
 * last reported ("...: node down; reached step 120"). */
#define JOB_REACHED "; reached step "

/* The job's timeline (a new reference; NULL without memory):
 * {"job", "complete" (false when its first event is not its submission: older events were
 *  pruned), "submitted_ms", "placed_ms", "running_ms", "first_step_ms", "ended_ms", "end"
 *  (succeeded/failed/cancelled), "end_reason" (each null when not known or not yet),
 *  "queued_ms", "startup_ms", "interruptions": [{"generation" (the one stopped), "kind"
 *  ("failure", "move", "straggler"), "cause", "detected_ms", "stopped_ms", "placed_ms",
 *  "running_ms", "first_step_ms", "reached_step" (the last step reported before it),
 *  "restored_step", "lost_steps" (reached - restored: the steps done again, 0 when the
 *  checkpoint is newer than the last report, null when either is not known), "down_ms",
 *  "recovered", "ongoing"}], "down_ms", "lost_steps" (their sum over the interruptions that
 *  know it), "span_ms" (first placement to its end, or to now_ms), "progress_fraction"
 *  ((span - startup - down) / span; null before a placement)}. */
json_t *job_timeline(const char *id, const json_t *events, int64_t now_ms);

#endif
