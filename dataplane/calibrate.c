/* calibrate.c: what each allreduce algorithm costs on this communicator, measured when the
 * communicator is created, so that `auto` (algo_select.c) chooses from measurements of these
 * ranks, these transports and this machine instead of from constants.
 *
 * Every rank times each candidate algorithm at three sizes (4 KiB, 256 KiB, 4 MiB), keeping
 * the fastest of a few calls (a call that lost its core to another program says nothing
 * about the algorithm). The ranks then agree on the slowest rank's figure for each (one
 * allreduce of the maxima: a collective ends when its slowest rank does). The finalists, up
 * to three candidates within 1.5x of the best at 4 MiB, are timed at 16 MiB too, where the
 * data no longer fits the caches and algorithms that move more memory fall behind; the
 * others' 16 MiB figure continues their line. The cost of another size is read off the line
 * through the measured points around it. Every rank holds the same figures, so every rank makes the
 * same choice; the choice also travels in each message header, so a divergence would be
 * reported, never misread. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "dataplane/dp.h"

/* the sizes and the calls timed at each: more at the small size, where one preempted call
 * is large against the others */
const size_t dp_cal_bytes[DP_CAL_POINTS] = {4096, 256u << 10, 4u << 20, 16u << 20};
static const int cal_reps[DP_CAL_POINTS] = {5, 2, 2, 1};

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

static int timed_allreduce(yd_comm *c, enum yd_algo a, float *buf, size_t count, double *best)
{
	double t0 = yard_now_mono_ns() / 1e9;
	int rc = forced_allreduce(c, a, buf, count, YD_F32, YD_SUM);
	double t = yard_now_mono_ns() / 1e9 - t0;
	if (rc == 0 && (*best == 0 || t < *best))
		*best = t;
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
	/* every page of the buffer touched, and one untimed call: the first to touch the pages,
	 * the rings and the sockets' windows would otherwise charge that to whichever algorithm
	 * is timed first */
	double warm = 0;
	if (rc == 0) {
		memset(buf, 0, most);
		rc = timed_allreduce(c, YD_ALGO_RING, buf, dp_cal_bytes[last - 1] / sizeof(float),
		                     &warm);
	}
	/* round robin over the candidates, so that a burst of load from elsewhere on the machine
	 * falls on one call of several algorithms rather than on every call of one */
	for (int p = 0; p < last && rc == 0; p++)
		for (int r = 0; r < cal_reps[p] && rc == 0; r++)
			for (int i = 0; i < n && rc == 0; i++)
				rc = timed_allreduce(c, cand[i], buf, dp_cal_bytes[p] / sizeof(float),
				                     &t[DP_CAL_POINTS * i + p]);
	if (rc == 0)
		rc = agree_max(c, t, DP_CAL_POINTS * (size_t)n);
	/* the last point, past the caches, only for the algorithms that could win there */
	if (rc == 0)
		nf = finalists(t, n, fin);
	for (int k = 0; k < nf && rc == 0; k++)
		rc = timed_allreduce(c, cand[fin[k]], buf, most / sizeof(float), &big[k]);
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
			log_debug(
			    "calibration: %-6s %.1f / %.1f / %.1f / %.1f%s us at 4K / 256K / 4M / "
			    "16M",
			    yd_algo_name(cand[i]), ci[0] * 1e6, ci[1] * 1e6, ci[2] * 1e6,
			    ci[3] * 1e6, c->costs.cal_final[cand[i]] ? "" : " (line)");
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
