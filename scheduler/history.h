/* history.h: the per-step history of running jobs (loss, step time, per-rank compute time)
 * that the leader keeps in memory from its agents' heartbeats, for the dashboard's charts
 * and `GET /v1/jobs/{id}/metrics`.
 *
 * Soft state, like the rest of the leader's: never replicated, empty after a failover (the
 * history restarts from the next heartbeat). Heartbeats sample: a rank reports its latest
 * step, so a step appears once some rank reported it, and its compute_ms entry for a rank is
 * known only if that rank reported that very step (else null). Bounded: HISTORY_STEPS steps
 * per job (the oldest are dropped), HISTORY_JOBS jobs (the least recently updated is
 * dropped), ranks below HISTORY_RANKS. A restart that goes back to an earlier step (a restore
 * from a checkpoint) drops the steps after it, so the series always reads forward. */
#ifndef YARD_SCHED_HISTORY_H
#define YARD_SCHED_HISTORY_H

#include <jansson.h>
#include <stdint.h>

#define HISTORY_STEPS 2000
#define HISTORY_JOBS 64
#define HISTORY_RANKS 1024

struct history;

struct history *history_create(void);
void history_destroy(struct history *h);
/* Forget everything (leadership lost). */
void history_clear(struct history *h);

/* One rank's report: its latest step, with loss (has_loss), step time and compute time in
 * ms (negative: not reported). now_ms orders jobs for eviction. */
void history_record(struct history *h, const char *job, int64_t generation, int rank, int64_t step,
                    int has_loss, double loss, double step_ms, double compute_ms, uint64_t now_ms);

/* {"job": ID, "generation": G, "steps": [{"step", "loss"|null, "step_ms"|null,
 * "samples_per_s"|null, "compute_ms": [per rank, null where unknown]}]} for the steps after
 * after_step (at most limit, the newest), or NULL when nothing was recorded for the job.
 * batch_size > 0 turns step_ms into samples_per_s. */
json_t *history_json(const struct history *h, const char *job, int64_t after_step, int limit,
                     int64_t batch_size);

#endif
