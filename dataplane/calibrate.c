/* calibrate.c: what each allreduce algorithm costs on this communicator, measured when the
 * communicator is created, so that `auto` (algo_select.c) chooses from measurements of these
 * ranks, these transports and this machine instead of from constants.
 *
 * Every rank times each candidate algorithm at four sizes (4 KiB, 256 KiB, 1 MiB, 4 MiB).
 * At each size every candidate first runs once untimed: the first call of an algorithm at a
 * size pays for the pages its scratch buffers, shared slots and rings touch for the first
 * time (10-160 ms against 0.1-5 ms warm, 4 ranks on 2 cores), which says nothing about the
 * calls after it. Then a few timed calls each (more at the small sizes, where they are
 * cheap and one preempted call is large against the others), round robin over the
 * candidates so that a burst of load from elsewhere falls on one call of several algorithms
 * rather than on every call of one; an algorithm's figure is the lower third of its timings
 * (the fifth fastest of 15, the second of 5, the fastest of 1 or 2), and each timing is of a
 * few back-to-back calls at the small sizes: preemption by another program says nothing about the
 * algorithm, but with more ranks than cores waiting on the others is part of its cost,
 * which the single fastest call hides. The ranks then agree on the slowest rank's figure for
 * each (one allreduce of the maxima: a collective ends when its slowest rank does). The
 * finalists, up to three candidates within 1.5x of the best at 4 MiB, are timed at 16 MiB
 * too (after an untimed call each), where the data no longer fits the caches and algorithms
 * that move more memory fall behind; the others' 16 MiB figure continues their line. The
 * cost of another size is read off the line through the measured points around it. Every
 * rank holds the same figures, so every rank makes the same choice; the choice also travels
 * in each message header, so a divergence would be reported, never misread. Where these
 * figures put several algorithms close together, the application's first calls of a size
 * decide between them (tune.c). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "dataplane/dp.h"

/* the sizes and the calls timed at each (after the untimed one) */
const size_t dp_cal_bytes[DP_CAL_POINTS] = {4096, 256u << 10, 1u << 20, 4u << 20, 16u << 20};
#define CAL_MAX_REPS 15
static const int cal_reps[DP_CAL_POINTS] = {CAL_MAX_REPS, 5, 5, 2, 1};
/* back-to-back calls per timing: the ranks reach a call at different moments (the first to
 * arrive waits for the last), which a run of calls spreads over all of them, as in a training
 * loop */
static const int cal_batch[DP_CAL_POINTS] = {4, 2, 2, 1, 1};

/* The line through measured points p-1 and p of t, at n bytes; a falling segment (noise
 * larger than the difference) is replaced by the larger call's bandwidth. */
static double line_at(const double *t, int p, double n)
{
	double x0 = (double)dp_cal_bytes[p - 1], x1 = (double)dp_cal_bytes[p];
	double slope = (t[p] - t[p - 1]) / (x1 - x0);
	if (!(slope > 0))
		slope = t[p] / x1;
	return t[p] + slope * (n - x1);
}

/* An in-place allreduce of buf with algorithm a forced (no other thread uses c before it is
 * returned). */
static int forced_allreduce(yd_comm *c, enum yd_algo a, void *buf, size_t count, enum yd_dtype dt,
                            enum yd_op op)
{
	struct dp_op o = {.kind = DP_ALLREDUCE,
	                  .sendbuf = buf,
	                  .recvbuf = buf,
	                  .count = count,
	                  .dtype = dt,
	                  .op = op};
	enum yd_algo saved = c->algo;
	c->algo = a;
	int rc = dp_run_blocking(c, &o);
	c->algo = saved;
	return rc;
}

/* Seconds per call of `batch` back-to-back calls into *t. */
static int timed_allreduce(yd_comm *c, enum yd_algo a, float *buf, size_t count, int batch,
                           double *t)
{
	double t0 = yard_now_mono_ns() / 1e9;
	int rc = 0;
	for (int k = 0; k < batch && rc == 0; k++)
		rc = forced_allreduce(c, a, buf, count, YD_F32, YD_SUM);
	*t = (yard_now_mono_ns() / 1e9 - t0) / batch;
	return rc;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The figure of n timed calls: the lower third (sorts t). */
static double lower_third(double *t, int n)
{
	qsort(t, (size_t)n, sizeof *t, by_value);
	return t[(n - 1) / 3];
}

/* Candidate i's calls at point p of the calibration: one untimed call each, then
 * cal_reps[p] timed calls each, round robin; the figures into fig[DP_CAL_POINTS * i + p]. */
static int time_point(yd_comm *c, const enum yd_algo *cand, int n, int p, float *buf, double *fig)
{
	size_t count = dp_cal_bytes[p] / sizeof(float);
	double calls[YD_ALGO_COUNT][CAL_MAX_REPS], dummy;
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++)
		rc = timed_allreduce(c, cand[i], buf, count, 1, &dummy);
	for (int r = 0; r < cal_reps[p] && rc == 0; r++)
		for (int i = 0; i < n && rc == 0; i++)
			rc = timed_allreduce(c, cand[i], buf, count, cal_batch[p], &calls[i][r]);
	for (int i = 0; i < n && rc == 0; i++)
		fig[DP_CAL_POINTS * i + p] = lower_third(calls[i], cal_reps[p]);
	return rc;
}

/* The ranks agree on the slowest rank's figures, by the same algorithm on every rank
 * whatever was measured. */
static int agree_max(yd_comm *c, double *t, size_t count)
{
	return forced_allreduce(c, YD_ALGO_RING, t, count, YD_F64, YD_MAX);
}

/* The finalists: up to DP_CAL_FINALISTS candidates within 1.5x of the best at the point
 * before the last, fastest first (t is the same on every rank, so is the choice). */
static int finalists(const double *t, int n, int *fin)
{
	int nf = 0;
	double best = INFINITY;
	for (int i = 0; i < n; i++)
		best = fmin(best, t[DP_CAL_POINTS * i + DP_CAL_POINTS - 2]);
	for (int k = 0; k < DP_CAL_FINALISTS; k++) {
		int pick = -1;
		for (int i = 0; i < n; i++) {
			double v = t[DP_CAL_POINTS * i + DP_CAL_POINTS - 2];
			int taken = 0;
			for (int j = 0; j < nf; j++)
				taken |= fin[j] == i;
			if (!taken && v <= best * 1.5 &&
			    (pick < 0 || v < t[DP_CAL_POINTS * pick + DP_CAL_POINTS - 2]))
				pick = i;
		}
		if (pick < 0)
			break;
		fin[nf++] = pick;
	}
	return nf;
}

int dp_calibrate(yd_comm *c)
{
	enum yd_algo cand[YD_ALGO_COUNT];
	int n = dp_algo_candidates(c, cand), fin[DP_CAL_FINALISTS] = {0}, nf = 0;
	const int last = DP_CAL_POINTS - 1;
	c->costs.calibrated = 0;
	if (c->size < 2 || n < 2)
		return 0;
	double t0 = yard_now_mono_ns() / 1e9, big[DP_CAL_FINALISTS] = {0};
	size_t most = dp_cal_bytes[last];
	float *buf = malloc(most);
	double *t = calloc(DP_CAL_POINTS * (size_t)n, sizeof *t);
	int rc = buf && t ? 0 : YARD_ENOMEM;
	if (rc == 0)
		memset(buf, 0, most); /* every page of the buffer touched before any timing */
	for (int p = 0; p < last && rc == 0; p++)
		rc = time_point(c, cand, n, p, buf, t);
	if (rc == 0)
		rc = agree_max(c, t, DP_CAL_POINTS * (size_t)n);
	/* the last point, past the caches, only for the algorithms that could win there */
	if (rc == 0 && (nf = finalists(t, n, fin)) > 0) {
		enum yd_algo fa[DP_CAL_FINALISTS];
		double ft[DP_CAL_FINALISTS * DP_CAL_POINTS];
		for (int k = 0; k < nf; k++)
			fa[k] = cand[fin[k]];
		rc = time_point(c, fa, nf, last, buf, ft);
		for (int k = 0; k < nf && rc == 0; k++)
			big[k] = ft[DP_CAL_POINTS * k + last];
	}
	if (rc == 0 && nf)
		rc = agree_max(c, big, (size_t)nf);
	if (rc == 0) {
		for (int a = 0; a < YD_ALGO_COUNT; a++) {
			c->costs.cal_final[a] = 0;
			for (int p = 0; p < DP_CAL_POINTS; p++)
				c->costs.cal_s[a][p] = INFINITY;
		}
		for (int i = 0; i < n; i++)
			for (int p = 0; p < last; p++)
				c->costs.cal_s[cand[i]][p] = t[DP_CAL_POINTS * i + p];
		/* the others' last point continues the line through their two before */
		for (int i = 0; i < n; i++)
			c->costs.cal_s[cand[i]][last] =
			    line_at(c->costs.cal_s[cand[i]], last - 1, (double)most);
		for (int k = 0; k < nf; k++) {
			c->costs.cal_s[cand[fin[k]]][last] = big[k];
			c->costs.cal_final[cand[fin[k]]] = 1;
		}
		for (int i = 0; i < n && c->rank == 0; i++) {
			const double *ci = c->costs.cal_s[cand[i]];
			log_debug("calibration: %-6s %.1f / %.1f / %.1f / %.1f / %.1f%s us at 4K / "
			          "256K / 1M / 4M / 16M",
			          yd_algo_name(cand[i]), ci[0] * 1e6, ci[1] * 1e6, ci[2] * 1e6,
			          ci[3] * 1e6, ci[4] * 1e6,
			          c->costs.cal_final[cand[i]] ? "" : " (line)");
		}
		c->costs.calibrated = 1;
		c->costs.calibrate_s = yard_now_mono_ns() / 1e9 - t0;
		log_debug(
		    "rank %d: calibrated %d allreduce algorithms (%d finalists) over %d ranks in "
		    "%.1f ms",
		    c->rank, n, nf, c->size, c->costs.calibrate_s * 1e3);
	}
	free(buf);
	free(t);
	return rc;
}

double dp_calibrated_cost(const yd_comm *c, enum yd_algo a, size_t bytes)
{
	if ((unsigned)a >= YD_ALGO_COUNT)
		return INFINITY;
	const double *t = c->costs.cal_s[a];
	double n = (double)bytes;
	if (bytes <= dp_cal_bytes[0]) /* latency-bound: as the smallest measured call */
		return t[0];
	int p = 1; /* the segment (p-1, p) that covers n, or the last one past it */
	while (p < DP_CAL_POINTS - 1 && n > (double)dp_cal_bytes[p])
		p++;
	double v = line_at(t, p, n);
	return v > t[0] ? v : t[0];
}
