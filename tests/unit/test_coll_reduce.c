/* test_coll_reduce.c: the reduction kernels against a scalar reference, every dtype × op,
 * all three aliasing forms (dst = a op b, dst == a, dst == b), odd lengths, and the f16/bf16
 * conversions against independent references (the compiler's _Float16; nearest-of-two
 * search for bf16), including subnormals, overflow, ties and NaN. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/dp.h"

static uint32_t rng = 12345;
static uint32_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return rng;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* bf16 reference: the nearer of the two bf16 neighbours, ties to even, in double. */
static uint16_t ref_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if (isnan(f))
		return (uint16_t)((u >> 16) | 0x40);
	uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
	double dl = fabs((double)f - (double)bits_f32((uint32_t)lo << 16));
	double dh = fabs((double)f - (double)bits_f32((uint32_t)hi << 16));
	if ((u & 0xffff) == 0)
		return lo;
	if (dl < dh)
		return lo;
	if (dh < dl)
		return hi;
	return (lo & 1) ? hi : lo;
}

static void test_f16_conversion(void **state)
{
	/* every half value survives half -> float -> half, and matches the compiler */
	for (uint32_t h = 0; h < 65536; h++) {
		_Float16 ref;
		memcpy(&ref, &h, 2);
		float f = dp_f16_to_f32((uint16_t)h);
		if (isnan((float)ref)) {
			assert_true(isnan(f));
			continue;
		}
		assert_true(f == (float)ref);
		assert_int_equal(dp_f32_to_f16(f), h);
	}
	/* random floats, including ranges that round to subnormals and to infinity */
	for (int i = 0; i < 2000000; i++) {
		uint32_t u = next_rand();
		if (i % 3 == 0)
			u = (u & 0x80000000u) |
			    (0x30000000u + (u & 0x17ffffffu)); /* near 2^-24..2^17 */
		float f = bits_f32(u);
		_Float16 ref = (_Float16)f;
		uint16_t rb;
		memcpy(&rb, &ref, 2);
		if (isnan(f))
			assert_true((dp_f32_to_f16(f) & 0x7c00) == 0x7c00 &&
			            (dp_f32_to_f16(f) & 0x3ff));
		else if (dp_f32_to_f16(f) != rb)
			fail_msg("f32 %a (0x%08x) -> f16 0x%04x, want 0x%04x", (double)f, u,
			         dp_f32_to_f16(f), rb);
	}
	assert_int_equal(dp_f32_to_f16(65520.0f), 0x7c00); /* rounds to infinity */
	assert_int_equal(dp_f32_to_f16(65519.0f), 0x7bff);
	assert_int_equal(dp_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
}

static void test_bf16_conversion(void **state)
{
	for (int i = 0; i < 2000000; i++) {
		uint32_t u = next_rand();
		float f = bits_f32(u);
		if (isinf(f) || (!isnan(f) && fabsf(f) > 3.3e38f))
			continue;
		uint16_t got = dp_f32_to_bf16(f), want = ref_bf16(f);
		if (isnan(f))
			assert_true(isnan(dp_bf16_to_f32(got)));
		else if (got != want)
			fail_msg("f32 %a -> bf16 0x%04x, want 0x%04x", (double)f, got, want);
	}
	assert_true(dp_bf16_to_f32(0x3f80) == 1.0f);
}

static double ref_op(double a, double b, enum yd_op op)
{
	switch (op) {
	case YD_PROD:
		return a * b;
	case YD_MIN:
		return a < b ? a : b;
	case YD_MAX:
		return a > b ? a : b;
	default:
		return a + b;
	}
}

/* Element i of the reference result, computed per dtype the scalar way. */
static void ref_elem(void *out, const void *a, const void *b, size_t i, enum yd_dtype dt,
                     enum yd_op op)
{
	switch (dt) {
	case YD_F32:
		((float *)out)[i] = (float)ref_op(((const float *)a)[i], ((const float *)b)[i], op);
		break;
	case YD_F64: {
		double x = ((const double *)a)[i], y = ((const double *)b)[i];
		((double *)out)[i] = op == YD_PROD                  ? x * y
		                     : op == YD_SUM || op == YD_AVG ? x + y
		                                                    : ref_op(x, y, op);
		break;
	}
	case YD_F16: {
		_Float16 x, y, r;
		memcpy(&x, (const uint16_t *)a + i, 2);
		memcpy(&y, (const uint16_t *)b + i, 2);
		r = (_Float16)(float)ref_op((float)x, (float)y, op);
		memcpy((uint16_t *)out + i, &r, 2);
		break;
	}
	case YD_BF16: {
		float x = bits_f32((uint32_t)((const uint16_t *)a)[i] << 16);
		float y = bits_f32((uint32_t)((const uint16_t *)b)[i] << 16);
		((uint16_t *)out)[i] = ref_bf16((float)ref_op(x, y, op));
		break;
	}
	case YD_I32: {
		int32_t x = ((const int32_t *)a)[i], y = ((const int32_t *)b)[i];
		((int32_t *)out)[i] = op == YD_PROD  ? (int32_t)((uint32_t)x * (uint32_t)y)
		                      : op == YD_MIN ? (x < y ? x : y)
		                      : op == YD_MAX ? (x > y ? x : y)
		                                     : (int32_t)((uint32_t)x + (uint32_t)y);
		break;
	}
	case YD_I64: {
		int64_t x = ((const int64_t *)a)[i], y = ((const int64_t *)b)[i];
		((int64_t *)out)[i] = op == YD_MIN    ? (x < y ? x : y)
		                      : op == YD_MAX  ? (x > y ? x : y)
		                      : op == YD_PROD ? x * (y % 1000)
		                                      : x + y;
		break;
	}
	default:
		break;
	}
}

static void fill(void *buf, size_t n, enum yd_dtype dt, enum yd_op op)
{
	for (size_t i = 0; i < n; i++) {
		float f = (float)((int)(next_rand() % 2001) - 1000) / 37.0f;
		switch (dt) {
		case YD_F32:
			((float *)buf)[i] = f;
			break;
		case YD_F64:
			((double *)buf)[i] = (double)f * 1.0000001;
			break;
		case YD_F16:
			((uint16_t *)buf)[i] = dp_f32_to_f16(f);
			break;
		case YD_BF16:
			((uint16_t *)buf)[i] = dp_f32_to_bf16(f);
			break;
		case YD_I32:
			((int32_t *)buf)[i] = (int32_t)(next_rand() % 20001) - 10000;
			break;
		case YD_I64:
			((int64_t *)buf)[i] = op == YD_PROD
			                          ? (int64_t)(next_rand() % 999)
			                          : (int64_t)next_rand() * 4096 - (1ll << 40);
			break;
		default:
			break;
		}
	}
}

static void test_every_dtype_and_op(void **state)
{
	static const size_t lens[] = {0, 1, 3, 17, 64, 1001, 65537};
	for (int dt = 0; dt < YD_DTYPE_COUNT; dt++)
		for (int op = 0; op < YD_OP_COUNT; op++)
			for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
				size_t n = lens[k], esz = yd_dtype_size(dt);
				char *a = malloc(n * esz + 8), *b = malloc(n * esz + 8),
				     *want = malloc(n * esz + 8), *got = malloc(n * esz + 8);
				fill(a, n, dt, op);
				fill(b, n, dt, op);
				if (dt == YD_I64 && op == YD_PROD)
					for (size_t i = 0; i < n; i++)
						((int64_t *)b)[i] %= 1000;
				for (size_t i = 0; i < n; i++)
					ref_elem(want, a, b, i, dt, op);
				/* three forms: separate, dst == a, dst == b */
				for (int form = 0; form < 3; form++) {
					memcpy(got, form == 2 ? b : a, n * esz);
					if (form == 0)
						dp_reduce(got, a, b, n, dt, op);
					else if (form == 1)
						dp_reduce(got, got, b, n, dt, op);
					else
						dp_reduce(got, a, got, n, dt, op);
					if (n && memcmp(got, want, n * esz) != 0)
						fail_msg("%s %s len %zu form %d differs from the "
						         "scalar reference",
						         yd_dtype_name(dt), yd_op_name(op), n,
						         form);
				}
				free(a);
				free(b);
				free(want);
				free(got);
			}
}

static void test_avg_scaling(void **state)
{
	float f[3] = {3, 6, -9};
	int32_t i[3] = {7, -7, 8};
	uint16_t h[1] = {dp_f32_to_f16(1.0f)}, bf[1] = {dp_f32_to_bf16(1.0f)};
	dp_scale_avg(f, 3, YD_F32, 3);
	dp_scale_avg(i, 3, YD_I32, 2);
	dp_scale_avg(h, 1, YD_F16, 3);
	dp_scale_avg(bf, 1, YD_BF16, 3);
	assert_true(f[0] == 1 && f[1] == 2 && f[2] == -3);
	assert_true(i[0] == 3 && i[1] == -3 && i[2] == 4);
	_Float16 third = (_Float16)(1.0f / 3.0f);
	uint16_t tb;
	memcpy(&tb, &third, 2);
	assert_int_equal(h[0], tb);
	assert_int_equal(bf[0], ref_bf16(1.0f / 3.0f));
}

static void test_names(void **state)
{
	assert_string_equal(yd_dtype_name(YD_BF16), "bf16");
	assert_int_equal(yd_dtype_size(YD_F16), 2);
	assert_string_equal(yd_op_name(YD_AVG), "avg");
	for (int a = 0; a < YD_ALGO_COUNT; a++)
		assert_int_equal(yd_algo_parse(yd_algo_name(a)), a);
	assert_int_equal(yd_algo_parse("bogus"), -1);
	for (int t = 0; t < YD_TRANSPORT_COUNT; t++)
		assert_int_equal(yd_transport_parse(yd_transport_name(t)), t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_f16_conversion),
	    cmocka_unit_test(test_bf16_conversion),
	    cmocka_unit_test(test_every_dtype_and_op),
	    cmocka_unit_test(test_avg_scaling),
	    cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
