/* test_yd_reduce.c: the reduction kernels against a scalar reference for every dtype x op
 * (in place and out of place), and the f16/bf16 conversions: exact round trips of every
 * representable value, round-to-nearest-even ties, overflow, subnormals, NaN. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/reduce.h"
#include "tests/unit/yd_check.h"

static double ref_op(enum yd_op op, double a, double b)
{
	switch (op) {
	case YD_PROD:
		return a * b;
	case YD_MIN:
		return b < a ? b : a;
	case YD_MAX:
		return b > a ? b : a;
	default:
		return a + b;
	}
}

static void test_every_dtype_op(void **state)
{
	(void)state;
	enum { N = 1037 };
	for (int dt = 0; dt < YD_DTYPE_COUNT; dt++)
		for (int op = 0; op < YD_OP_COUNT; op++) {
			size_t es = yd_dtype_size(dt);
			char *a = malloc(N * es), *b = malloc(N * es), *want = malloc(N * es);
			char *out = malloc(N * es);
			for (size_t i = 0; i < N; i++) {
				double x = check_input(0, i, op, 1), y = check_input(1, i, op, 2);
				check_put(a, i, dt, x);
				check_put(b, i, dt, y);
				check_put(want, i, dt, ref_op(op, x, y));
			}
			reduce_apply(out, a, b, N, dt, op);
			assert_memory_equal(out, want, N * es);
			reduce_apply(a, a, b, N, dt, op); /* in place */
			assert_memory_equal(a, want, N * es);
			free(a);
			free(b);
			free(want);
			free(out);
		}
}

static void test_avg_finish(void **state)
{
	(void)state;
	float f[3] = {3, -7, 1};
	reduce_finish_avg(f, 3, YD_F32, YD_AVG, 2);
	assert_true(f[0] == 1.5f && f[1] == -3.5f && f[2] == 0.5f);
	int32_t i[3] = {7, -7, 1};
	reduce_finish_avg(i, 3, YD_I32, YD_AVG, 2);
	assert_true(i[0] == 3 && i[1] == -3 && i[2] == 0); /* C division truncates toward 0 */
	int64_t j[1] = {9};
	reduce_finish_avg(j, 1, YD_I64, YD_SUM, 2); /* no-op for other ops */
	assert_true(j[0] == 9);
	uint16_t h = reduce_float_to_f16(3.0f);
	reduce_finish_avg(&h, 1, YD_F16, YD_AVG, 2);
	assert_true(reduce_f16_to_float(h) == 1.5f);
}

static void test_f16_conversions(void **state)
{
	(void)state;
	for (uint32_t v = 0; v < 65536; v++) {
		uint16_t h = (uint16_t)v;
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue; /* NaN payloads */
		assert_int_equal(reduce_float_to_f16(reduce_f16_to_float(h)), h);
	}
	assert_true(reduce_f16_to_float(0x3c00) == 1.0f);
	assert_int_equal(reduce_float_to_f16(1.0f + 0x1p-11f), 0x3c00);     /* tie to even */
	assert_int_equal(reduce_float_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie to even */
	assert_int_equal(reduce_float_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
	assert_int_equal(reduce_float_to_f16(65504.0f), 0x7bff);
	assert_int_equal(reduce_float_to_f16(65519.0f), 0x7bff);
	assert_int_equal(reduce_float_to_f16(65520.0f), 0x7c00); /* overflow to inf */
	assert_int_equal(reduce_float_to_f16(-1e9f), 0xfc00);
	assert_int_equal(reduce_float_to_f16(0x1p-24f), 0x0001); /* smallest subnormal */
	assert_int_equal(reduce_float_to_f16(0x1p-25f), 0x0000); /* tie to even: 0 */
	assert_int_equal(reduce_float_to_f16(3 * 0x1p-25f), 0x0002);
	assert_int_equal(reduce_float_to_f16(-0.0f), 0x8000);
	assert_true(isnan(reduce_f16_to_float(reduce_float_to_f16(NAN))));
	/* a sum that must round: 2048 + 1 is not representable (ulp 2) -> tie to even 2048 */
	uint16_t a = reduce_float_to_f16(2048), b = reduce_float_to_f16(1), o;
	reduce_apply(&o, &a, &b, 1, YD_F16, YD_SUM);
	assert_true(reduce_f16_to_float(o) == 2048.0f);
	b = reduce_float_to_f16(3);
	reduce_apply(&o, &a, &b, 1, YD_F16, YD_SUM);
	assert_true(reduce_f16_to_float(o) == 2052.0f); /* 2051 -> tie -> even 2052 */
}

static void test_bf16_conversions(void **state)
{
	(void)state;
	for (uint32_t v = 0; v < 65536; v++) {
		uint16_t h = (uint16_t)v;
		if ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
			continue;
		assert_int_equal(reduce_float_to_bf16(reduce_bf16_to_float(h)), h);
	}
	assert_int_equal(reduce_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie to even */
	assert_int_equal(reduce_float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie to even */
	assert_int_equal(reduce_float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	assert_true(isnan(reduce_bf16_to_float(reduce_float_to_bf16(NAN))));
	assert_int_equal(reduce_float_to_bf16(INFINITY), 0x7f80);
	uint16_t a = reduce_float_to_bf16(256), b = reduce_float_to_bf16(1), o;
	reduce_apply(&o, &a, &b, 1, YD_BF16, YD_SUM); /* 257 -> tie -> 256 */
	assert_true(reduce_bf16_to_float(o) == 256.0f);
}

static void test_names(void **state)
{
	(void)state;
	for (int a = 0; a < YD_ALGO_COUNT; a++)
		assert_int_equal(yd_algo_parse(yd_algo_name(a)), a);
	for (int t = 0; t < YD_TRANSPORT_COUNT; t++)
		assert_int_equal(yd_transport_parse(yd_transport_name(t)), t);
	assert_int_equal(yd_algo_parse("bogus"), -1);
	assert_int_equal(yd_dtype_size(YD_BF16), 2);
	assert_string_equal(yd_op_name(YD_AVG), "avg");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_dtype_op),  cmocka_unit_test(test_avg_finish),
	    cmocka_unit_test(test_f16_conversions), cmocka_unit_test(test_bf16_conversions),
	    cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
