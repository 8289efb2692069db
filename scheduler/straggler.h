/* straggler.h: the straggler detector of one job generation, a pure module the leader feeds
 * with the per-window summaries agents report (agent/metrics.c).
 *
 * In a synchronous job every rank's step takes as long as the slowest one's, so step time
 * says nothing about who is slow; compute time does (communication wait is where the others
 * spend the difference). Ranks are compared like with like: only with the ranks of their own
 * pipeline stage (same pp index; the tp shards and dp replicas of a stage do the same work),
 * so a stage that simply has more layers is never a straggler.
 *
 * Window w covers steps w*W+1 .. (w+1)*W; each rank's value for it is the median of its
 * per-step compute times (taken by the agent). A window is judged once every rank has
 * reported it. A rank is slow in a window when its value exceeds the median of the other
 * ranks of its stage by more than threshold, and (stages of three or more ranks) by more than
 * mad_z robust standard deviations of the stage (1.4826 x the median absolute deviation), so
 * noise that is wide for every rank is not a straggler.
 *
 * A rank's slow share is the share of its recent time spent in slow windows, weighted
 * exponentially with the time constant persist_ms (a window lasts its steps times the rank's
 * median step, compute + communication wait, which in a synchronous job is about every
 * rank's step time). Slow in the last `windows` judged windows and a slow share over one
 * half: flagged; not slow in the last `windows` and a share under one half: recovered. So a
 * disturbance shorter than persist_ms x ln 2 (a checkpoint write, a probe, a neighbour's
 * burst) never flags a rank however fast its steps, a rank slow in most of its windows is
 * flagged even when single windows dip under the threshold, and when windows are long the
 * `windows` decide as before. persist_ms 0: the `windows` alone decide. A stage
 * of one rank has nothing to compare with and is never judged. Windows a rank reported with
 * fewer than half of their steps (the first window after a resume, lost datagrams), or that
 * some rank never reported, are skipped; skipping does not reset the count.
 *
 * Nothing here allocates after straggler_init, and straggler_add/straggler_judge take time
 * linear in the ranks (plus a sort per stage and judged window). */
#ifndef YARD_SCHED_STRAGGLER_H
#define YARD_SCHED_STRAGGLER_H

#include <stdint.h>

#include "common/err.h"

#define STRAGGLER_HISTORY 8 /* windows kept per rank until judged */

struct straggler_params {
	double threshold; /* 0.2: more than 1.2x the median of the rest of its stage */
	int windows;      /* K consecutive windows */
	int window_steps; /* W */
	double mad_z;     /* robust deviations a slow rank must also exceed (default 3) */
	double persist_ms; /* time constant of the slow share (0: the windows alone decide) */
};

/* A change of a rank's flag, produced by straggler_judge. */
struct straggler_change {
	int rank;
	int stage;
	int flagged;       /* 1: became a straggler; 0: recovered */
	int64_t window;    /* the judged window that decided it */
	double compute_ms; /* the rank's median compute time in that window */
	double median_ms;  /* the median of the other ranks of its stage */
	double ratio;      /* compute_ms / median_ms */
	double slow_share; /* the rank's slow share then (0..1; persist_ms 0: 1 or 0) */
};

struct straggler_rank {
	int64_t index[STRAGGLER_HISTORY];
	double compute_ms[STRAGGLER_HISTORY];
	double window_ms[STRAGGLER_HISTORY]; /* steps x (compute + communication wait) */
	int n;             /* slots in use */
	int64_t max_index; /* newest window reported, -1: none */
	int slow_streak, ok_streak, flagged;
	double slow_share; /* share of the recent time in slow windows (persist_ms) */
	double ratio; /* in the newest judged window (0: not judged) */
	double compute_ms_last, median_ms_last;
};

struct straggler_detector {
	struct straggler_params params;
	int world, tp, pp;
	struct straggler_rank *ranks; /* [world] */
	int64_t next_window;          /* the oldest window not judged or skipped yet */
	uint64_t windows_judged, windows_skipped;
	/* scratch for one stage: values with their ranks, and deviations */
	double *values, *deviations;
	int *members;
};

/* Parameters as in failure.straggler (mad_z defaults to 3 when 0). err names the bad
 * value. */
int straggler_init(struct straggler_detector *d, const struct straggler_params *params, int dp,
                   int tp, int pp, struct yard_err *err);
void straggler_free(struct straggler_detector *d);

/* The pipeline stage of a rank (Megatron order: tp innermost, then pp, then dp). */
int straggler_stage_of(const struct straggler_detector *d, int rank);

/* Records rank's summary of window `index` (steps reported in it, median compute and
 * communication wait per step). A rank out of range, a window already judged or repeated, or
 * one with fewer than W/2 steps is ignored. */
void straggler_add(struct straggler_detector *d, int rank, int64_t index, int steps,
                   double compute_ms, double comm_wait_ms);

/* Judges, oldest first, the windows that every rank has reported (skipping those that can
 * no longer complete), as long as out has room for a change of every rank: give max >= the
 * world size, or nothing is judged. Writes the flag changes into out, returns how many. */
int straggler_judge(struct straggler_detector *d, struct straggler_change *out, int max);

#endif
