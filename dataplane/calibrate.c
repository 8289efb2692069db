/* calibrate.c: what each allreduce algorithm costs on this communicator, measured when the
 * communicator is created, so that `auto` (algo_select.c) chooses from measurements of these
 * ranks, these transports and this machine instead of from constants.
 *
 * Every rank times each candidate algorithm at three sizes, keeping the fastest of a few calls
 * (a call that lost its core to another program says nothing about the algorithm). The ranks
 * then agree on the slowest rank's figure for each (one allreduce of the maxima: a collective
 * ends when its slowest rank does); the cost of another size is read off the line through
 * the measured points around it. Every rank holds the same figures, so every rank makes the
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
const size_t dp_cal_bytes[DP_CAL_POINTS] = {4096, 256u << 10, 4u << 20};
static const int cal_reps[DP_CAL_POINTS] = {5, 2, 2};

static int timed_allreduce(yd_comm *c, enum yd_algo a, float *buf, size_t count, double *best)
{
	struct dp_op o = {.kind = DP_ALLREDUCE,
	                  .sendbuf = buf,
	                  .recvbuf = buf,
	                  .count = count,
	                  .dtype = YD_F32,
	                  .op = YD_SUM};
	enum yd_algo saved = c->algo;
	c->algo = a; /* forces the algorithm; no other thread uses c before it is returned */
	double t0 = yard_now_mono_ns() / 1e9;
	int rc = dp_run_blocking(c, &o);
	double t = yard_now_mono_ns() / 1e9 - t0;
	c->algo = saved;
	if (rc == 0 && (*best == 0 || t < *best))
		*best = t;
	return rc;
}

int dp_calibrate(yd_comm *c)
{
	enum yd_algo cand[YD_ALGO_COUNT];
	int n = dp_algo_candidates(c, cand);
	c->costs.calibrated = 0;
	if (c->size < 2 || n < 2)
		return 0;
	double t0 = yard_now_mono_ns() / 1e9;
	size_t most = dp_cal_bytes[DP_CAL_POINTS - 1];
	float *buf = calloc(most / sizeof(float), sizeof(float));
	double *t = calloc(DP_CAL_POINTS * (size_t)n, sizeof *t);
	int rc = buf && t ? 0 : YARD_ENOMEM;
	/* one untimed call first: the first to touch the buffer, the rings and the sockets'
	 * windows would otherwise charge that to whichever algorithm is timed first */
	double warm = 0;
	if (rc == 0)
		rc = timed_allreduce(c, YD_ALGO_RING, buf, most / sizeof(float), &warm);
	/* round robin over the candidates, so that a burst of load from elsewhere on the machine
	 * falls on one call of several algorithms rather than on every call of one */
	for (int p = 0; p < DP_CAL_POINTS && rc == 0; p++)
		for (int r = 0; r < cal_reps[p] && rc == 0; r++)
			for (int i = 0; i < n && rc == 0; i++)
				rc = timed_allreduce(c, cand[i], buf, dp_cal_bytes[p] / sizeof(float),
				                     &t[DP_CAL_POINTS * i + p]);
	if (rc == 0) {
		struct dp_op o = {.kind = DP_ALLREDUCE,
		                  .sendbuf = t,
		                  .recvbuf = t,
		                  .count = DP_CAL_POINTS * (size_t)n,
		                  .dtype = YD_F64,
		                  .op = YD_MAX};
		enum yd_algo saved = c->algo;
		c->algo = YD_ALGO_RING; /* the same on every rank, whatever was measured */
		rc = dp_run_blocking(c, &o);
		c->algo = saved;
	}
	if (rc == 0) {
		for (int a = 0; a < YD_ALGO_COUNT; a++)
			for (int p = 0; p < DP_CAL_POINTS; p++)
				c->costs.cal_s[a][p] = INFINITY;
		for (int i = 0; i < n; i++)
			for (int p = 0; p < DP_CAL_POINTS; p++)
				c->costs.cal_s[cand[i]][p] = t[DP_CAL_POINTS * i + p];
		c->costs.calibrated = 1;
		c->costs.calibrate_s = yard_now_mono_ns() / 1e9 - t0;
		log_debug("rank %d: calibrated %d allreduce algorithms over %d ranks in %.1f ms",
		          c->rank, n, c->size, c->costs.calibrate_s * 1e3);
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
	double x0 = (double)dp_cal_bytes[p - 1], x1 = (double)dp_cal_bytes[p];
	double slope = (t[p] - t[p - 1]) / (x1 - x0);
	if (!(slope > 0)) /* noise larger than the difference: the larger call's bandwidth */
		slope = t[p] / x1;
	double v = t[p] + slope * (n - x1);
	return v > t[0] ? v : t[0];
}
