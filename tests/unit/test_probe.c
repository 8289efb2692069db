/* test_probe.c: the node probe behind the planner's rates (dataplane/probe.h): the block
 * cost fit recovers known coefficients and drops a term that noise makes negative, and a
 * real (short) probe measures every figure it reports. No timing is asserted: only that
 * each measured figure exists and is positive. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/probe.h"

static void synth(double mac, double weight, double hidden, double model, double call,
                  double times[PROBE_BLOCK_SHAPES])
{
	for (int i = 0; i < PROBE_BLOCK_SHAPES; i++) {
		int s[3];
		probe_block_shape(i, s);
		times[i] = mac * s[0] * s[1] * s[2] + weight * s[1] * s[2] + hidden * s[0] * s[2] +
		           model * s[0] * s[1] + call;
	}
}

static void test_block_fit_recovers_coefficients(void **state)
{
	double times[PROBE_BLOCK_SHAPES];
	struct probe_result r;
	memset(&r, 0, sizeof r);
	synth(2e-10, 1e-9, 3e-9, 5e-9, 4e-6, times);
	assert_int_equal(probe_block_fit(times, &r), 0);
	assert_float_equal(r.block_mac_s, 2e-10, 2e-13);
	assert_float_equal(r.block_weight_s, 1e-9, 1e-12);
	assert_float_equal(r.block_hidden_s, 3e-9, 3e-12);
	assert_float_equal(r.block_model_s, 5e-9, 5e-12);
	assert_float_equal(r.block_call_s, 4e-6, 4e-9);
	assert_true(r.block_fit_error < 1e-6);
	/* without a per-row term the fit finds none, never a negative one */
	synth(2e-10, 0, 0, 0, 1e-5, times);
	times[0] *= 0.98; /* noise */
	assert_int_equal(probe_block_fit(times, &r), 0);
	assert_true(r.block_weight_s >= 0 && r.block_hidden_s >= 0 && r.block_model_s >= 0 &&
	            r.block_call_s >= 0);
	assert_float_equal(r.block_mac_s, 2e-10, 2e-11);
}

/* One shape timed while something else held the core (the largest, 2.8x) bends the whole fit;
 * the shapes out of line are the ones timed again, and with the faster time back the fit is
 * exact again. */
static void test_block_fit_names_the_misfits(void **state)
{
	double times[PROBE_BLOCK_SHAPES];
	int again[PROBE_BLOCK_SHAPES];
	struct probe_result r;
	memset(&r, 0, sizeof r);
	synth(1.4e-10, 8e-10, 4e-8, 5e-9, 1e-6, times);
	assert_int_equal(probe_block_fit(times, &r), 0);
	assert_int_equal(probe_block_misfits(times, &r, 0.15, 2, again), 0);
	double true_last = times[PROBE_BLOCK_SHAPES - 1];
	times[PROBE_BLOCK_SHAPES - 1] *= 2.8;
	assert_int_equal(probe_block_fit(times, &r), 0);
	assert_true(r.block_fit_error > 0.3);
	assert_true(probe_block_misfits(times, &r, 0.15, 2, again) >= 1);
	assert_int_equal(again[PROBE_BLOCK_SHAPES - 1], 1);
	/* the farthest first, and no more than asked */
	assert_int_equal(probe_block_misfits(times, &r, 0.01, 1, again), 1);
	assert_int_equal(again[PROBE_BLOCK_SHAPES - 1], 1);
	times[PROBE_BLOCK_SHAPES - 1] = fmin(times[PROBE_BLOCK_SHAPES - 1], true_last);
	assert_int_equal(probe_block_fit(times, &r), 0);
	assert_true(r.block_fit_error < 1e-6);
	assert_int_equal(probe_block_misfits(times, &r, 0.15, 2, again), 0);
}

static void test_probe_measures_every_figure(void **state)
{
	struct probe_result r;
	struct yard_err err = {0};
	int rc = probe_run(2, 600, &r, &err);
	if (rc != 0)
		fail_msg("probe_run: %s", err.msg);
	assert_int_equal(r.gemm_points, PROBE_GEMM_POINTS);
	for (int i = 0; i < r.gemm_points; i++)
		assert_true(r.gemm_flops_per_s[i] > 0);
	assert_true(r.flops_per_s > 0);
	assert_true(r.parallel_efficiency > 0 && r.parallel_efficiency <= 1);
	assert_true(r.block_mac_s > 0);
	assert_true(r.adamw_s_per_param > 0 && r.sgd_s_per_param > 0);
	assert_true(r.shm_bw_bytes_per_s > 0 && r.tcp_bw_bytes_per_s > 0);
	assert_true(r.shm_latency_s > 0 && r.tcp_latency_s > 0);
	/* the exchange costs exist (≥ 0: on an idle node an exchange may cost nothing beyond
	 * noise) and the busy one is measured with as many processes as devices */
	assert_true(r.shm_sync_s >= 0 && r.shm_sync_cpu_s >= 0 && r.shm_busy_sync_cpu_s >= 0 &&
	            r.shm_busy_sync_s >= 0);
	assert_true(r.shm_allreduce_sync_s >= 0 && r.shm_allreduce_sync_cpu_s >= 0 &&
	            r.shm_busy_allreduce_sync_cpu_s >= 0);
	assert_true(r.availability > 0 && r.availability <= 1);
	json_t *o = probe_to_json(&r);
	assert_non_null(json_object_get(o, "gemm"));
	assert_non_null(json_object_get(json_object_get(o, "block"), "mac_s"));
	assert_non_null(json_object_get(json_object_get(o, "optim_s_per_param"), "adamw"));
	assert_true(json_is_real(json_object_get(o, "intra_sync_s")));
	assert_true(json_is_real(json_object_get(o, "intra_busy_sync_cpu_s")));
	assert_true(json_is_real(json_object_get(o, "intra_busy_allreduce_sync_cpu_s")));
	json_decref(o);
	assert_int_equal(probe_run(0, 400, &r, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "devices"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_block_fit_recovers_coefficients),
	    cmocka_unit_test(test_block_fit_names_the_misfits),
	    cmocka_unit_test(test_probe_measures_every_figure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
