/* test_straggler.c: the straggler detector (scheduler/straggler.h) and the robust statistics
 * it uses (common/stats.h): medians, MAD, a slow rank flagged after exactly K windows, stages
 * compared only with themselves, no flag on noise, recovery, skipped windows. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/stats.h"
#include "scheduler/straggler.h"

static void test_median_and_mad(void **state)
{
	double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2}, one[] = {7}, scratch[8];
	(void)state;
	assert_true(yard_median(odd, 3) == 3);
	assert_true(yard_median(even, 4) == 2.5);
	assert_true(yard_median(one, 1) == 7);
	assert_true(yard_median(NULL, 0) == 0);
	/* sorted {1, 2, 3, 4}: without 1 → {2,3,4} = 3; without 4 → 2; without nothing → 2.5 */
	assert_true(yard_median_sorted_without(even, 4, 0) == 3);
	assert_true(yard_median_sorted_without(even, 4, 3) == 2);
	assert_true(yard_median_sorted_without(even, 4, 9) == 2.5);
	assert_true(yard_median_sorted_without(one, 1, 0) == 0);
	double v[] = {1, 1, 2, 2, 4}; /* deviations around 2: {1,1,0,0,2} → median 1 */
	assert_float_equal(yard_mad(v, 5, 2, scratch), 1.4826, 1e-12);
}

static struct straggler_params params(double threshold, int k)
{
	return (struct straggler_params){.threshold = threshold, .windows = k, .window_steps = 10};
}

/* Feeds window w of 10 steps with compute_ms[r] and comm_wait_ms[r] per step for every rank,
 * judges, returns the changes. */
static int feed_timed(struct straggler_detector *d, int64_t w, const double *compute_ms,
                      const double *comm_wait_ms, struct straggler_change *out, int max)
{
	for (int r = 0; r < d->world; r++)
		straggler_add(d, r, w, 10, compute_ms[r], comm_wait_ms[r]);
	return straggler_judge(d, out, max);
}

/* The same without communication wait (worlds of up to 16 ranks). */
static int feed(struct straggler_detector *d, int64_t w, const double *compute_ms,
                struct straggler_change *out, int max)
{
	static const double no_wait[16];
	assert_true(d->world <= 16);
	return feed_timed(d, w, compute_ms, no_wait, out, max);
}

static void test_slow_rank_flagged_after_k_windows(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 3);
	struct straggler_change ch[8];
	struct yard_err err = {0};
	double c[4] = {10, 10.2, 15, 9.9}; /* rank 2 is 1.5x slower */
	(void)state;
	assert_int_equal(straggler_init(&d, &p, 4, 1, 1, &err), 0);
	assert_int_equal(feed(&d, 0, c, ch, 8), 0);
	assert_int_equal(feed(&d, 1, c, ch, 8), 0);
	assert_int_equal(feed(&d, 2, c, ch, 8), 1);
	assert_int_equal(ch[0].rank, 2);
	assert_int_equal(ch[0].flagged, 1);
	assert_int_equal(ch[0].window, 2);
	assert_int_equal(ch[0].stage, 0);
	assert_float_equal(ch[0].median_ms, 10, 1e-9); /* median of {9.9, 10, 10.2} */
	assert_float_equal(ch[0].ratio, 1.5, 1e-9);
	/* stays flagged without a second change */
	assert_int_equal(feed(&d, 3, c, ch, 8), 0);
	assert_int_equal(d.ranks[2].flagged, 1);
	assert_int_equal(d.windows_judged, 4);
	straggler_free(&d);
}

static void test_streak_must_be_consecutive(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 3);
	struct straggler_change ch[8];
	struct yard_err err = {0};
	double slow[3] = {10, 10, 13}, fine[3] = {10, 10, 11.9}; /* 1.3x, then 1.19x */
	(void)state;
	assert_int_equal(straggler_init(&d, &p, 3, 1, 1, &err), 0);
	int64_t w = 0;
	for (int round = 0; round < 20; round++) { /* slow, slow, fine, ... never 3 in a row */
		assert_int_equal(feed(&d, w++, slow, ch, 8), 0);
		assert_int_equal(feed(&d, w++, slow, ch, 8), 0);
		assert_int_equal(feed(&d, w++, fine, ch, 8), 0);
	}
	assert_int_equal(d.ranks[2].flagged, 0);
	straggler_free(&d);
}

static void test_stage_with_more_layers_not_flagged(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 2);
	struct straggler_change ch[16];
	struct yard_err err = {0};
	(void)state;
	/* dp 4 x pp 2 (tp 1): rank = dp_i * 2 + pp_i; stage 1 has twice the layers */
	assert_int_equal(straggler_init(&d, &p, 4, 1, 2, &err), 0);
	assert_int_equal(straggler_stage_of(&d, 0), 0);
	assert_int_equal(straggler_stage_of(&d, 3), 1);
	double c[8];
	for (int r = 0; r < 8; r++)
		c[r] = r % 2 ? 20.0 + r * 0.01 : 10.0 + r * 0.01;
	/* against the job's median (15) stage 1 would be 1.33x: a false flag */
	for (int64_t w = 0; w < 50; w++)
		assert_int_equal(feed(&d, w, c, ch, 16), 0);
	/* a real straggler in the heavy stage is still found, and only it */
	c[5] = 26; /* 1.3x of stage 1 */
	assert_int_equal(feed(&d, 50, c, ch, 16), 0);
	assert_int_equal(feed(&d, 51, c, ch, 16), 1);
	assert_int_equal(ch[0].rank, 5);
	assert_int_equal(ch[0].stage, 1);
	assert_float_equal(ch[0].ratio, 26.0 / 20.03, 1e-9);
	straggler_free(&d);
}

static void test_tp_shards_share_a_stage(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 1);
	struct straggler_change ch[16];
	struct yard_err err = {0};
	(void)state;
	/* dp 1 x tp 2 x pp 2: ranks 0,1 stage 0; ranks 2,3 stage 1 */
	assert_int_equal(straggler_init(&d, &p, 1, 2, 2, &err), 0);
	double c[4] = {10, 10, 30, 45};
	assert_int_equal(feed(&d, 0, c, ch, 16), 1);
	assert_int_equal(ch[0].rank, 3);
	assert_float_equal(ch[0].ratio, 1.5, 1e-9);
	straggler_free(&d);
}

static void test_single_rank_stage_never_judged(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 1);
	struct straggler_change ch[4];
	struct yard_err err = {0};
	(void)state;
	assert_int_equal(straggler_init(&d, &p, 1, 1, 4, &err), 0); /* one rank per stage */
	double c[4] = {10, 100, 10, 10};
	for (int64_t w = 0; w < 5; w++)
		assert_int_equal(feed(&d, w, c, ch, 4), 0);
	straggler_free(&d);
}

/* xorshift64* and Box-Muller: deterministic noise */
static uint64_t rng = 88172645463325252ull;
static double uniform01(void)
{
	rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
	return (double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}
static double gaussian(void)
{
	double u = uniform01(), v = uniform01();
	if (u < 1e-300)
		u = 1e-300;
	return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* Flag changes over `windows` windows of dp x pp ranks whose values are 10 ms with Gaussian
 * noise of relative size `noise`; every busy_every-th window (0: never) the whole machine is
 * 2x slower for every rank at once. */
static int changes_on_noise(const struct straggler_params *p, int dp, int pp, int64_t windows,
                            double noise, int busy_every)
{
	struct straggler_detector d;
	struct straggler_change ch[64];
	struct yard_err err = {0};
	double c[64];
	int changes = 0;
	assert_int_equal(straggler_init(&d, p, dp, 1, pp, &err), 0);
	for (int64_t w = 0; w < windows; w++) {
		double machine = busy_every > 0 && w % busy_every == 0 ? 2.0 : 1.0;
		for (int r = 0; r < dp * pp; r++) /* times are never negative */
			c[r] = fmax(0.1, 10 * machine * (1 + noise * gaussian()));
		changes += feed(&d, w, c, ch, 64);
	}
	assert_int_equal(d.windows_judged, windows);
	straggler_free(&d);
	return changes;
}

static void test_no_flag_on_noise(void **state)
{
	struct straggler_params p = params(0.2, 3);
	(void)state;
	/* 16 ranks in 2 stages, 20000 windows (200000 steps) with 6% noise, and every 50th
	 * window the machine 2x busier for everyone (shared slowness flags no one) */
	assert_int_equal(changes_on_noise(&p, 8, 2, 20000, 0.06, 50), 0);
}

static void test_noisy_stage_needs_mad(void **state)
{
	struct straggler_params p = params(0.2, 3), no_mad = params(0.2, 3);
	(void)state;
	/* A stage whose ranks are all very noisy (30%): exceeding the median by 20% happens
	 * often by chance; the MAD condition keeps it from being a straggler. Without it (a
	 * pure threshold rule) the same kind of run flags ranks. */
	assert_int_equal(changes_on_noise(&p, 8, 1, 5000, 0.3, 0), 0);
	no_mad.mad_z = 1e-9;
	assert_true(changes_on_noise(&no_mad, 8, 1, 5000, 0.3, 0) > 0);
}

static void test_slow_rank_found_in_noise(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 3);
	struct straggler_change ch[32];
	struct yard_err err = {0};
	(void)state;
	assert_int_equal(straggler_init(&d, &p, 8, 1, 1, &err), 0);
	double c[8];
	int64_t flagged_at = -1;
	for (int64_t w = 0; w < 100 && flagged_at < 0; w++) {
		for (int r = 0; r < 8; r++)
			c[r] = 10 * (r == 6 ? 1.5 : 1.0) * (1 + 0.05 * gaussian());
		int n = feed(&d, w, c, ch, 32);
		for (int k = 0; k < n; k++) {
			assert_int_equal(ch[k].rank, 6);
			flagged_at = w;
		}
	}
	assert_true(flagged_at >= 2 && flagged_at <= 5);
	straggler_free(&d);
}

static void test_recovery_after_k_fine_windows(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 2);
	struct straggler_change ch[8];
	struct yard_err err = {0};
	double slow[3] = {10, 10, 20}, fine[3] = {10, 10, 10};
	(void)state;
	assert_int_equal(straggler_init(&d, &p, 3, 1, 1, &err), 0);
	assert_int_equal(feed(&d, 0, slow, ch, 8), 0);
	assert_int_equal(feed(&d, 1, slow, ch, 8), 1);
	assert_int_equal(feed(&d, 2, fine, ch, 8), 0);
	assert_int_equal(feed(&d, 3, fine, ch, 8), 1);
	assert_int_equal(ch[0].rank, 2);
	assert_int_equal(ch[0].flagged, 0);
	assert_int_equal(d.ranks[2].flagged, 0);
	straggler_free(&d);
}

static void test_incomplete_and_repeated_windows(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 2);
	struct straggler_change ch[8];
	struct yard_err err = {0};
	(void)state;
	assert_int_equal(straggler_init(&d, &p, 2, 1, 1, &err), 0);
	/* rank 1 has not reported window 0: nothing is judged */
	straggler_add(&d, 0, 0, 10, 10, 0);
	assert_int_equal(straggler_judge(&d, ch, 8), 0);
	assert_int_equal(d.windows_judged, 0);
	/* a window with 4 of 10 steps (the first after a resume) does not count */
	straggler_add(&d, 1, 0, 4, 30, 0);
	assert_int_equal(straggler_judge(&d, ch, 8), 0);
	assert_int_equal(d.windows_judged, 0);
	/* rank 1 moves on to window 1: window 0 can never complete and is skipped */
	straggler_add(&d, 1, 1, 10, 30, 0);
	straggler_add(&d, 0, 1, 10, 10, 0);
	assert_int_equal(straggler_judge(&d, ch, 8), 0);
	assert_int_equal(d.windows_skipped, 1);
	assert_int_equal(d.windows_judged, 1);
	/* a heartbeat repeating window 1 with another value changes nothing */
	straggler_add(&d, 1, 1, 10, 10, 0);
	assert_int_equal(straggler_judge(&d, ch, 8), 0);
	assert_int_equal(d.windows_judged, 1);
	/* window 2 slow again: two judged slow windows in a row → flagged */
	straggler_add(&d, 0, 2, 10, 10, 0);
	straggler_add(&d, 1, 2, 10, 30, 0);
	assert_int_equal(straggler_judge(&d, ch, 8), 1);
	assert_int_equal(ch[0].rank, 1);
	assert_float_equal(ch[0].ratio, 3, 1e-9);
	/* a window far ahead of the history: the gap is skipped, not looped over one by one */
	straggler_add(&d, 0, 1000000000, 10, 10, 0);
	straggler_add(&d, 1, 1000000000, 10, 10, 0);
	assert_int_equal(straggler_judge(&d, ch, 8), 0);
	assert_int_equal(d.windows_judged, 3);
	straggler_free(&d);
}

static void test_no_change_lost_to_a_small_output(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0.2, 1);
	struct straggler_change ch[4];
	struct yard_err err = {0};
	(void)state;
	/* dp 4, K 1: rank 3 slow in window 0, fine in window 1, slow in window 2: three
	 * changes, reported before any later window is judged */
	assert_int_equal(straggler_init(&d, &p, 4, 1, 1, &err), 0);
	double v[3][4] = {{10, 10, 10, 20}, {10, 10, 10, 10}, {10, 10, 10, 20}};
	for (int64_t w = 0; w < 3; w++)
		for (int r = 0; r < 4; r++)
			straggler_add(&d, r, w, 10, v[w][r], 0);
	/* room for fewer changes than ranks: nothing is judged */
	assert_int_equal(straggler_judge(&d, ch, 3), 0);
	assert_int_equal(d.windows_judged, 0);
	/* room for one window's worth at a time: every change comes out, in order */
	int flags[3], n = 0;
	for (int call = 0; call < 10 && d.windows_judged < 3; call++) {
		int got = straggler_judge(&d, ch, 4);
		for (int k = 0; k < got; k++) {
			assert_int_equal(ch[k].rank, 3);
			flags[n++] = ch[k].flagged;
		}
	}
	assert_int_equal(n, 3);
	assert_int_equal(flags[0], 1);
	assert_int_equal(flags[1], 0);
	assert_int_equal(flags[2], 1);
	straggler_free(&d);
}

/* Rank 2 of 4 slowed 1.5x, or not, with 5 ms of communication wait a step: its window lasts
 * 10 x (15 + 5) = 200 ms slowed, 10 x (10.1 + 5) = 151 ms not. */
static const double rank2_slow[4] = {10, 10.2, 15, 9.9}, rank2_fine[4] = {10, 10.2, 10.1, 9.9};
static const double wait5[4] = {5, 5, 5, 5};

/* A detector of dp 4, threshold 0.2, K 3 and the slow share's time constant persist_ms. */
static void init_persist(struct straggler_detector *d, double persist_ms)
{
	struct straggler_params p = params(0.2, 3);
	struct yard_err err = {0};
	p.persist_ms = persist_ms;
	assert_int_equal(straggler_init(d, &p, 4, 1, 1, &err), 0);
}

static void test_short_disturbance_not_flagged(void **state)
{
	struct straggler_detector d;
	struct straggler_change ch[8];
	const double *slow = rank2_slow, *fine = rank2_fine, *wait = wait5;
	(void)state;
	/* persist 10 s: a disturbance shorter than 10 s x ln 2 = 6.9 s never flags */
	init_persist(&d, 10000);
	/* 5 s slowed (25 windows, 25 times K), then 15 s normal, five times over */
	int64_t w = 0;
	for (int round = 0; round < 5; round++) {
		for (int k = 0; k < 25; k++)
			assert_int_equal(feed_timed(&d, w++, slow, wait, ch, 8), 0);
		assert_true(d.ranks[2].slow_share > 0.39 && d.ranks[2].slow_share < 0.5);
		for (int k = 0; k < 100; k++)
			assert_int_equal(feed_timed(&d, w++, fine, wait, ch, 8), 0);
	}
	for (int k = 0; k < 200; k++)
		assert_int_equal(feed_timed(&d, w++, fine, wait, ch, 8), 0);
	/* a lasting slowdown: flagged by the window that takes its share past one half, the
	 * 35th (1 - e^(-0.02 n) > 0.5 from n = 35) */
	for (int k = 0; k < 34; k++)
		assert_int_equal(feed_timed(&d, w++, slow, wait, ch, 8), 0);
	assert_int_equal(feed_timed(&d, w++, slow, wait, ch, 8), 1);
	assert_int_equal(ch[0].rank, 2);
	assert_int_equal(ch[0].flagged, 1);
	assert_true(ch[0].slow_share > 0.5 && ch[0].slow_share < 0.51);
	straggler_free(&d);
}

static void test_dips_do_not_reset_a_slowdown(void **state)
{
	struct straggler_detector d;
	struct straggler_change ch[8];
	const double *slow = rank2_slow, *fine = rank2_fine, *wait = wait5;
	(void)state;
	/* a rank right at the threshold: over it in 3 windows of 4, under it in the fourth. No
	 * unbroken run of slow windows lasts persist_s here; the share (4/5 of the time) flags
	 * it */
	init_persist(&d, 10000);
	int64_t w = 0, flagged_at = -1;
	for (int k = 0; k < 400 && flagged_at < 0; k++) {
		int n = feed_timed(&d, w, k % 4 == 3 ? fine : slow, wait, ch, 8);
		assert_true(n <= 1);
		if (n == 1) {
			assert_int_equal(ch[0].rank, 2);
			assert_int_equal(ch[0].flagged, 1);
			flagged_at = w;
		}
		w++;
	}
	/* 4/5 of the time slow (200 ms windows against 151): the share passes one half after
	 * about 10 s, the 51st window */
	assert_true(flagged_at >= 40 && flagged_at <= 70);
	/* the dips do not clear it either; the share settles near 0.8 */
	for (int k = 0; k < 200; k++, w++)
		assert_int_equal(feed_timed(&d, w, k % 4 == 3 ? fine : slow, wait, ch, 8), 0);
	assert_true(d.ranks[2].slow_share > 0.75);
	/* back to normal: cleared once the share falls under one half (0.8 e^(-0.0151 n) < 0.5:
	 * about 31 windows, 4.7 s), not after K windows */
	int64_t cleared_after = -1;
	for (int k = 1; k <= 200 && cleared_after < 0; k++)
		if (feed_timed(&d, w++, fine, wait, ch, 8) == 1) {
			assert_int_equal(ch[0].flagged, 0);
			assert_true(ch[0].slow_share < 0.5);
			cleared_after = k;
		}
	assert_true(cleared_after >= 20 && cleared_after <= 45);
	straggler_free(&d);
}

static void test_slow_steps_need_only_the_windows(void **state)
{
	struct straggler_detector d;
	struct straggler_change ch[8];
	/* steps of about 1 s: a window lasts 10 s, the persist time, so the K windows decide */
	double slow[4] = {600, 610, 900, 590}, wait[4] = {400, 400, 100, 400};
	(void)state;
	init_persist(&d, 10000);
	assert_int_equal(feed_timed(&d, 0, slow, wait, ch, 8), 0);
	assert_int_equal(feed_timed(&d, 1, slow, wait, ch, 8), 0);
	assert_int_equal(feed_timed(&d, 2, slow, wait, ch, 8), 1);
	assert_int_equal(ch[0].rank, 2);
	assert_float_equal(ch[0].slow_share, 1 - exp(-3), 1e-9);
	straggler_free(&d);
}

static void test_bad_parameters(void **state)
{
	struct straggler_detector d;
	struct straggler_params p = params(0, 3);
	struct yard_err err = {0};
	(void)state;
	assert_int_equal(straggler_init(&d, &p, 2, 1, 1, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "threshold"));
	p = params(0.2, 3);
	assert_int_equal(straggler_init(&d, &p, 0, 1, 1, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "dp 0"));
	p.persist_ms = -1;
	assert_int_equal(straggler_init(&d, &p, 2, 1, 1, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "persist_ms -1"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_median_and_mad),
	    cmocka_unit_test(test_slow_rank_flagged_after_k_windows),
	    cmocka_unit_test(test_streak_must_be_consecutive),
	    cmocka_unit_test(test_stage_with_more_layers_not_flagged),
	    cmocka_unit_test(test_tp_shards_share_a_stage),
	    cmocka_unit_test(test_single_rank_stage_never_judged),
	    cmocka_unit_test(test_no_flag_on_noise),
	    cmocka_unit_test(test_noisy_stage_needs_mad),
	    cmocka_unit_test(test_slow_rank_found_in_noise),
	    cmocka_unit_test(test_recovery_after_k_fine_windows),
	    cmocka_unit_test(test_incomplete_and_repeated_windows),
	    cmocka_unit_test(test_no_change_lost_to_a_small_output),
	    cmocka_unit_test(test_short_disturbance_not_flagged),
	    cmocka_unit_test(test_dips_do_not_reset_a_slowdown),
	    cmocka_unit_test(test_slow_steps_need_only_the_windows),
	    cmocka_unit_test(test_bad_parameters),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
