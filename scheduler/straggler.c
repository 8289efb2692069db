/* straggler.c: per-stage robust comparison of window compute times (see straggler.h). */
#include "scheduler/straggler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/stats.h"

int straggler_init(struct straggler_detector *d, const struct straggler_params *params, int dp,
                   int tp, int pp, struct yard_err *err)
{
	memset(d, 0, sizeof *d);
	if (dp < 1 || tp < 1 || pp < 1 || (int64_t)dp * tp * pp > 65536)
		return yard_err_set(
		    err, YARD_EINVAL,
		    "straggler detector: layout dp %d x tp %d x pp %d is not 1..65536 "
		    "ranks",
		    dp, tp, pp);
	if (!(params->threshold > 0) || params->windows < 1 || params->window_steps < 1 ||
	    params->mad_z < 0 || !(params->persist_ms >= 0))
		return yard_err_set(
		    err, YARD_EINVAL,
		    "straggler detector: threshold %g, windows %d, window_steps %d, "
		    "mad_z %g, persist_ms %g: need threshold > 0, windows >= 1, "
		    "window_steps >= 1, mad_z >= 0, persist_ms >= 0",
		    params->threshold, params->windows, params->window_steps, params->mad_z,
		    params->persist_ms);
	d->params = *params;
	if (d->params.mad_z == 0)
		d->params.mad_z = 3;
	d->world = dp * tp * pp;
	d->tp = tp;
	d->pp = pp;
	d->ranks = calloc((size_t)d->world, sizeof *d->ranks);
	d->values = calloc((size_t)d->world, sizeof *d->values);
	d->deviations = calloc((size_t)d->world, sizeof *d->deviations);
	d->members = calloc((size_t)d->world, sizeof *d->members);
	if (d->ranks == NULL || d->values == NULL || d->deviations == NULL || d->members == NULL) {
		straggler_free(d);
		return yard_err_set(err, YARD_ENOMEM,
		                    "straggler detector: out of memory for %d ranks", dp * tp * pp);
	}
	for (int r = 0; r < d->world; r++) {
		d->ranks[r].max_index = -1;
		for (int k = 0; k < STRAGGLER_HISTORY; k++)
			d->ranks[r].index[k] = -1;
	}
	return 0;
}

void straggler_free(struct straggler_detector *d)
{
	free(d->ranks);
	free(d->values);
	free(d->deviations);
	free(d->members);
	memset(d, 0, sizeof *d);
}

int straggler_stage_of(const struct straggler_detector *d, int rank)
{
	return (rank / d->tp) % d->pp;
}

void straggler_add(struct straggler_detector *d, int rank, int64_t index, int steps,
                   double compute_ms, double comm_wait_ms)
{
	if (rank < 0 || rank >= d->world || index < d->next_window || steps < 1 ||
	    2 * (int64_t)steps < d->params.window_steps || !(compute_ms >= 0))
		return;
	if (!(comm_wait_ms >= 0))
		comm_wait_ms = 0; /* not reported: the compute alone is a lower bound */
	struct straggler_rank *r = &d->ranks[rank];
	if (index <= r->max_index)
		return; /* heartbeats repeat the last few windows */
	int slot = (int)(index % STRAGGLER_HISTORY);
	r->index[slot] = index;
	r->compute_ms[slot] = compute_ms;
	r->window_ms[slot] = steps * (compute_ms + comm_wait_ms);
	r->max_index = index;
}

static int value_of(const struct straggler_detector *d, int rank, int64_t w, double *out)
{
	const struct straggler_rank *r = &d->ranks[rank];
	int slot = (int)(w % STRAGGLER_HISTORY);
	if (r->index[slot] != w)
		return 0;
	*out = r->compute_ms[slot];
	return 1;
}

/* How long rank's window w lasted (it has been reported: value_of). */
static double window_ms_of(const struct straggler_detector *d, int rank, int64_t w)
{
	return d->ranks[rank].window_ms[w % STRAGGLER_HISTORY];
}

/* Position of x in sorted v (any equal element will do: removing it leaves the same set). */
static size_t position_of(const double *v, size_t n, double x)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n ? lo : n - 1;
}

static int judge_stage(struct straggler_detector *d, int stage, int64_t w,
                       struct straggler_change *out, int max)
{
	int g = 0, nout = 0, dp = d->world / (d->tp * d->pp);
	for (int dp_i = 0; dp_i < dp; dp_i++)
		for (int tp_i = 0; tp_i < d->tp; tp_i++) {
			int rank = (dp_i * d->pp + stage) * d->tp + tp_i;
			d->members[g] = rank;
			value_of(d, rank, w, &d->values[g]);
			g++;
		}
	if (g < 2)
		return 0;
	double median = yard_median(d->values, (size_t)g); /* sorts values */
	double mad = g >= 3 ? yard_mad(d->values, (size_t)g, median, d->deviations) : 0;
	for (int k = 0; k < g; k++) {
		struct straggler_rank *r = &d->ranks[d->members[k]];
		double x = 0;
		value_of(d, d->members[k], w, &x);
		size_t pos = position_of(d->values, (size_t)g, x);
		double others = yard_median_sorted_without(d->values, (size_t)g, pos);
		int slow = others > 0 && x > others * (1 + d->params.threshold) &&
		           (g < 3 || x - others > d->params.mad_z * mad);
		r->ratio = others > 0 ? x / others : 0;
		r->compute_ms_last = x;
		r->median_ms_last = others;
		if (slow) {
			r->slow_streak++;
			r->ok_streak = 0;
		} else {
			r->ok_streak++;
			r->slow_streak = 0;
		}
		if (d->params.persist_ms > 0) {
			double keep =
			    exp(-window_ms_of(d, d->members[k], w) / d->params.persist_ms);
			r->slow_share = r->slow_share * keep + (slow ? 1 - keep : 0);
		} else {
			r->slow_share = slow; /* the windows alone decide */
		}
		double share = r->slow_share;
		int change = (!r->flagged && r->slow_streak >= d->params.windows && share > 0.5) ||
		             (r->flagged && r->ok_streak >= d->params.windows && share < 0.5);
		if (!change)
			continue;
		r->flagged = !r->flagged;
		if (nout < max)
			out[nout++] = (struct straggler_change){.rank = d->members[k],
			                                        .stage = stage,
			                                        .flagged = r->flagged,
			                                        .window = w,
			                                        .compute_ms = x,
			                                        .median_ms = others,
			                                        .ratio = r->ratio,
			                                        .slow_share = share};
	}
	return nout;
}

int straggler_judge(struct straggler_detector *d, struct straggler_change *out, int max)
{
	int64_t reached = INT64_MAX;
	int nout = 0;
	for (int r = 0; r < d->world; r++)
		if (d->ranks[r].max_index < reached)
			reached = d->ranks[r].max_index;
	if (reached < 0)
		return 0;
	/* windows older than the history can no longer be complete */
	if (d->next_window < reached - STRAGGLER_HISTORY + 1) {
		d->windows_skipped += (uint64_t)(reached - STRAGGLER_HISTORY + 1 - d->next_window);
		d->next_window = reached - STRAGGLER_HISTORY + 1;
	}
	/* a window can change every rank's flag: judge one only while out has room for that,
	 * so that no change is lost (the rest waits for the next call) */
	for (; d->next_window <= reached && max - nout >= d->world; d->next_window++) {
		int64_t w = d->next_window;
		int complete = 1;
		double unused;
		for (int r = 0; r < d->world && complete; r++)
			complete = value_of(d, r, w, &unused);
		if (!complete) {
			d->windows_skipped++;
			continue;
		}
		d->windows_judged++;
		for (int stage = 0; stage < d->pp; stage++)
			nout += judge_stage(d, stage, w, out + nout, max - nout);
	}
	return nout;
}
