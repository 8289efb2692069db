/* test_comm_calibrate.c: `auto` chooses an allreduce algorithm from what the communicator
 * measured at creation (dataplane/calibrate.c). Every rank of a calibrated communicator holds
 * a fit for exactly the candidate algorithms and makes the same choice at every size; a split
 * communicator is calibrated for its own ranks; YARD_CALIBRATE=0 keeps the built-in model and
 * a forced algorithm skips the measurement; a bad YARD_CALIBRATE is refused by name. Which
 * algorithm wins is the machine's business and is not asserted. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/dp.h"
#include "tests/integration/dp_harness.h"

static const size_t sizes[] = {0, 8, 4096, 65536, 1u << 20, 64u << 20, 1u << 30};

/* every rank of c chooses the same algorithm at every size */
static int same_choice_everywhere(yd_comm *c)
{
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		int32_t mine = (int32_t)yd_allreduce_algo(c, sizes[i] / 4, YD_F32), lo, hi;
		DP_CHECK(mine > YD_ALGO_AUTO && mine < YD_ALGO_COUNT, "choice %d at %zu", mine,
		         sizes[i]);
		DP_CHECK(yd_allreduce(c, &mine, &lo, 1, YD_I32, YD_MIN) == 0 &&
		             yd_allreduce(c, &mine, &hi, 1, YD_I32, YD_MAX) == 0,
		         "allreduce: %s", yd_comm_last_error(c));
		DP_CHECK(lo == hi, "ranks chose differently at %zu bytes: %s .. %s", sizes[i],
		         yd_algo_name(lo), yd_algo_name(hi));
	}
	return 0;
}

/* c holds measured times for exactly its candidates: finite, positive, and the same on
 * every rank (the slowest rank's figures) */
static int fitted(yd_comm *c)
{
	enum yd_algo cand[YD_ALGO_COUNT];
	int n = dp_algo_candidates(c, cand), is_cand[YD_ALGO_COUNT] = {0};
	DP_CHECK(c->costs.calibrated == 1, "rank %d of %d not calibrated", c->rank, c->size);
	DP_CHECK(n >= 2, "only %d candidates", n);
	for (int i = 0; i < n; i++)
		is_cand[cand[i]] = 1;
	DP_CHECK(is_cand[YD_ALGO_RING] && is_cand[YD_ALGO_RD] && is_cand[YD_ALGO_HD] &&
	             is_cand[YD_ALGO_TREE] && is_cand[YD_ALGO_PS],
	         "ring, rd, hd, tree and ps are always candidates");
	DP_CHECK(is_cand[YD_ALGO_NAIVE] == (c->size <= 4), "naive only up to 4 ranks");
	/* the finalists timed at the last size: 1 to DP_CAL_FINALISTS candidates, the best at
	 * the size before among them, none slower there than 1.5x the best */
	int nf = 0, best = -1;
	const int before = DP_CAL_POINTS - 2;
	for (int a = YD_ALGO_RING; a < YD_ALGO_COUNT; a++)
		if (is_cand[a] &&
		    (best < 0 || c->costs.cal_s[a][before] < c->costs.cal_s[best][before]))
			best = a;
	for (int a = YD_ALGO_RING; a < YD_ALGO_COUNT; a++) {
		if (!c->costs.cal_final[a])
			continue;
		nf++;
		DP_CHECK(is_cand[a], "%s is a finalist but no candidate", yd_algo_name(a));
		DP_CHECK(c->costs.cal_s[a][before] <= 1.5 * c->costs.cal_s[best][before],
		         "finalist %s: %g s at %zu bytes, the best %g s", yd_algo_name(a),
		         c->costs.cal_s[a][before], dp_cal_bytes[before],
		         c->costs.cal_s[best][before]);
	}
	DP_CHECK(nf >= 1 && nf <= DP_CAL_FINALISTS, "%d finalists", nf);
	DP_CHECK(c->costs.cal_final[best], "the best at %zu bytes (%s) is no finalist",
	         dp_cal_bytes[before], yd_algo_name(best));
	for (int a = YD_ALGO_RING; a < YD_ALGO_COUNT; a++) {
		for (int p = 0; p < DP_CAL_POINTS; p++) {
			double t = c->costs.cal_s[a][p], lo;
			if (is_cand[a])
				DP_CHECK(isfinite(t) && t > 0, "%s at %zu bytes: %g s",
				         yd_algo_name(a), dp_cal_bytes[p], t);
			else
				DP_CHECK(isinf(t), "%s is no candidate but was timed",
				         yd_algo_name(a));
			double mine = isinf(t) ? -1 : t;
			DP_CHECK(yd_allreduce(c, &mine, &lo, 1, YD_F64, YD_MIN) == 0,
			         "allreduce: %s", yd_comm_last_error(c));
			DP_CHECK(lo == mine, "%s: times differ between ranks", yd_algo_name(a));
		}
	}
	return 0;
}

/* reduce-scatter and allgather choose by size and shape: naive for a few small ones, the
 * shared buffers for 4 MiB on one host from 3 ranks, else the ring */
static int scatter_gather_choice(yd_comm *c)
{
	enum yd_algo big = c->size >= 3 && !c->any_net ? YD_ALGO_SHARED : YD_ALGO_RING;
	for (int kind = DP_REDUCE_SCATTER; kind <= DP_ALLGATHER; kind++) {
		enum yd_algo got = dp_algo_select(c, kind, 4u << 20);
		DP_CHECK(got == big, "%d ranks%s, %s of 4 MiB: %s", c->size,
		         c->any_net ? " across hosts" : "", dp_kind_name(kind), yd_algo_name(got));
		got = dp_algo_select(c, kind, 1u << 20);
		DP_CHECK(got == YD_ALGO_RING, "%s of 1 MiB: %s", dp_kind_name(kind),
		         yd_algo_name(got));
		got = dp_algo_select(c, kind, 4096);
		DP_CHECK(got == (c->size <= 4 ? YD_ALGO_NAIVE : YD_ALGO_RING), "%s of 4 KiB: %s",
		         dp_kind_name(kind), yd_algo_name(got));
	}
	return 0;
}

static int calibrated_body(yd_comm *c, void *arg)
{
	(void)arg;
	if (!c)
		return 1;
	if (fitted(c) || same_choice_everywhere(c) || scatter_gather_choice(c))
		return 1;
	/* halves of the world: each calibrated for itself */
	yd_comm *half = NULL;
	int rc = yd_comm_split(c, c->rank % 2, c->rank, &half);
	DP_CHECK(rc == 0, "split: %s", yd_comm_last_error(c));
	if (half->size == 1) /* one rank: nothing to measure or choose between */
		DP_CHECK(half->costs.calibrated == 0, "a one-rank communicator calibrated");
	else
		rc = fitted(half) || same_choice_everywhere(half);
	/* and the choice runs: a sum over each half at several sizes */
	for (size_t i = 0; rc == 0 && i < 5; i++) {
		size_t count = sizes[i] / 4 + 3;
		float *v = malloc(count * sizeof *v);
		for (size_t k = 0; k < count; k++)
			v[k] = (float)half->rank;
		rc = yd_allreduce(half, v, v, count, YD_F32, YD_SUM);
		float want = (float)(half->size * (half->size - 1) / 2);
		for (size_t k = 0; rc == 0 && k < count; k++)
			rc = v[k] != want;
		free(v);
	}
	yd_comm_destroy(half);
	DP_CHECK(rc == 0, "allreduce on the split half");
	return 0;
}

static int model_body(yd_comm *c, void *arg)
{
	(void)arg;
	if (!c)
		return 1;
	DP_CHECK(c->costs.calibrated == 0, "calibrated although YARD_CALIBRATE=0 or forced");
	return same_choice_everywhere(c);
}

/* dp_calibrated_cost reads the line through the measured points around a size */
static int interpolation(void)
{
	yd_comm *c = calloc(1, sizeof *c);
	int bad = 0;
	const size_t *x = dp_cal_bytes;
	c->costs.calibrated = 1;
	/* ring: 10 µs + 1 ns/byte at every point; tree: a falling (noisy) last segment */
	for (int p = 0; p < DP_CAL_POINTS; p++) {
		c->costs.cal_s[YD_ALGO_RING][p] = 10e-6 + 1e-9 * (double)x[p];
		c->costs.cal_s[YD_ALGO_TREE][p] = p == DP_CAL_POINTS - 1 ? 50e-6 : 100e-6;
	}
	double mid = (double)(x[0] + x[1]) / 2, far = (double)x[DP_CAL_POINTS - 1] * 16;
	bad += fabs(dp_calibrated_cost(c, YD_ALGO_RING, 8) - (10e-6 + 1e-9 * (double)x[0])) > 1e-12;
	bad += fabs(dp_calibrated_cost(c, YD_ALGO_RING, (size_t)mid) - (10e-6 + 1e-9 * mid)) > 1e-12;
	bad += fabs(dp_calibrated_cost(c, YD_ALGO_RING, (size_t)far) - (10e-6 + 1e-9 * far)) > 1e-9;
	/* past the last point a falling segment is replaced by the last call's bandwidth */
	double want = 50e-6 + 50e-6 / (double)x[DP_CAL_POINTS - 1] *
	                          (far - (double)x[DP_CAL_POINTS - 1]);
	bad += fabs(dp_calibrated_cost(c, YD_ALGO_TREE, (size_t)far) - want) > 1e-9;
	free(c);
	printf("%s calibrated cost: piecewise linear, extended by the last slope\n",
	       bad ? "FAIL" : "ok");
	return bad;
}

/* `auto` takes the cheapest by the figures, whatever the candidates' order, and the ring
 * unless that is 5% cheaper */
static int cheapest(void)
{
	yd_comm *c = calloc(1, sizeof *c);
	int bad = 0;
	const enum yd_algo cand[] = {YD_ALGO_RING, YD_ALGO_RD, YD_ALGO_HD, YD_ALGO_SHARED};
	const double at_1m[] = {400e-6, 500e-6, 350e-6, 340e-6};
	c->algo = YD_ALGO_AUTO;
	c->costs.calibrated = 1;
	c->ncand = 4;
	for (int i = 0; i < 4; i++) {
		c->cand[i] = cand[i];
		for (int p = 0; p < DP_CAL_POINTS; p++)
			c->costs.cal_s[cand[i]][p] = at_1m[i] * (double)dp_cal_bytes[p] / (1 << 20);
	}
	/* hd comes first and is 5% under the ring; the shared buffers are 3% cheaper still */
	bad += dp_algo_select(c, DP_ALLREDUCE, 1u << 20) != YD_ALGO_SHARED;
	/* nothing 5% under the ring: the ring */
	c->costs.cal_s[YD_ALGO_RING][2] = 350e-6;
	bad += dp_algo_select(c, DP_ALLREDUCE, 1u << 20) != YD_ALGO_RING;
	free(c);
	printf("%s auto: the cheapest, the ring unless it is 5%% dearer\n", bad ? "FAIL" : "ok");
	return bad;
}

int main(void)
{
	int bad = interpolation() != 0 || cheapest() != 0, status[64];
	static const struct {
		int world;
		const char *transport, *hosts;
	} t[] = {{2, "shm", NULL},
	         {4, "shm", NULL},
	         {3, "tcp", NULL},
	         {6, NULL, "a,a,a,b,b,b"},
	         {8, NULL, "a,a,a,a,b,b,b,b"}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct dp_spawn sp = {.world = t[i].world,
		                      .transport = t[i].transport,
		                      .hosts = t[i].hosts,
		                      .timeout_ms = 20000,
		                      .wall_s = 120,
		                      .kill_rank = -1,
		                      .skip_rank = -1};
		int f = dp_spawn_run(&sp, calibrated_body, NULL, status);
		printf("%s %d ranks (%s): calibrated, one choice on every rank, halves too\n",
		       f ? "FAIL" : "ok", t[i].world, t[i].hosts ? t[i].hosts : t[i].transport);
		bad += f != 0;
	}
	struct dp_spawn sp = {.world = 4,
	                      .transport = "shm",
	                      .timeout_ms = 20000,
	                      .wall_s = 120,
	                      .kill_rank = -1,
	                      .skip_rank = -1};
	setenv("YARD_CALIBRATE", "0", 1);
	int f = dp_spawn_run(&sp, model_body, NULL, status);
	printf("%s YARD_CALIBRATE=0: the built-in model, one choice on every rank\n",
	       f ? "FAIL" : "ok");
	bad += f != 0;
	unsetenv("YARD_CALIBRATE");
	setenv("YARD_ALGO", "ring", 1);
	f = dp_spawn_run(&sp, model_body, NULL, status);
	printf("%s YARD_ALGO=ring: nothing to calibrate\n", f ? "FAIL" : "ok");
	bad += f != 0;
	unsetenv("YARD_ALGO");
	setenv("YARD_CALIBRATE", "maybe", 1);
	sp.world = 2;
	f = dp_spawn_refused(&sp, "YARD_CALIBRATE=maybe", status);
	printf("%s YARD_CALIBRATE=maybe refused by name\n", f ? "FAIL" : "ok");
	bad += f != 0;
	return bad ? 1 : 0;
}
