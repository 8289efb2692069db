/* test_cuda_kernels.c: the CUDA kernels of dp_cuda_kernels.cu against the CPU: reductions
 * (every dtype × op, the three aliasing forms, odd lengths, f16/bf16 subnormals and
 * rounding ties from random bit patterns) and the average's division bit for bit against
 * reduce.c, casts between every pair of dtypes against a scalar reference. Built only with
 * the CUDA toolkit; exits 77 (skip) where no GPU exists. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "dataplane/dp.h"
#include "dataplane/dp_cuda.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Finite values only: NaN payloads and the sign of inf - inf differ between x86 and GPUs,
 * and no rank ever sees those differ in a real reduction of finite gradients. */
static void fill(void *buf, enum yd_dtype dt, size_t n, enum yd_op op)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t r = next_rand();
		switch (dt) {
		case YD_F32:
			((float *)buf)[i] =
			    (float)((double)((int64_t)r >> 11) / (double)(1ull << 40)) *
			    (float)((r & 7) + 1);
			break;
		case YD_F64:
			((double *)buf)[i] = (double)(int64_t)r / 3.0e12;
			break;
		case YD_F16: {
			uint16_t h = (uint16_t)r;
			if ((h & 0x7c00u) == 0x7c00u) /* inf/NaN: clear the top exponent bit */
				h &= (uint16_t)~0x4000u;
			((uint16_t *)buf)[i] = h;
			break;
		}
		case YD_BF16: {
			uint16_t h = (uint16_t)r;
			if ((h & 0x7f80u) == 0x7f80u)
				h &= (uint16_t)~0x4000u;
			((uint16_t *)buf)[i] = h;
			break;
		}
		case YD_I32:
			((int32_t *)buf)[i] =
			    op == YD_PROD ? (int32_t)(r % 2001) - 1000 : (int32_t)(uint32_t)r;
			if (op == YD_SUM || op == YD_AVG)
				((int32_t *)buf)[i] /= 4;
			break;
		default:
			((int64_t *)buf)[i] =
			    op == YD_PROD ? (int64_t)(r % 2000001) - 1000000 : (int64_t)r / 4;
			break;
		}
	}
}

static void *to_device(const void *host, size_t bytes)
{
	void *d = NULL;
	assert_int_equal(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
	assert_int_equal(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
	return d;
}

static void expect_same(const char *what, enum yd_dtype dt, int op, const void *cpu,
                        const void *dev, size_t n)
{
	size_t esz = yd_dtype_size(dt);
	unsigned char *got = malloc(n * esz + 1);
	assert_non_null(got);
	assert_int_equal(cudaMemcpy(got, dev, n * esz, cudaMemcpyDeviceToHost), cudaSuccess);
	for (size_t i = 0; i < n; i++)
		if (memcmp(got + i * esz, (const unsigned char *)cpu + i * esz, esz) != 0)
			fail_msg("%s %s op %d: element %zu of %zu differs from the CPU kernel",
			         what, yd_dtype_name(dt), op, i, n);
	free(got);
}

static const size_t lengths[] = {1, 7, 256, 1000, 65537};

static void test_reduce_matches_cpu(void **state)
{
	(void)state;
	for (int dt = 0; dt < YD_DTYPE_COUNT; dt++)
		for (int op = 0; op < YD_OP_COUNT; op++)
			for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
				size_t n = lengths[li], bytes = n * yd_dtype_size(dt);
				char *a = malloc(bytes), *b = malloc(bytes), *ref = malloc(bytes);
				fill(a, dt, n, op);
				fill(b, dt, n, op);
				dp_reduce(ref, a, b, n, dt, op);
				void *da = to_device(a, bytes), *db = to_device(b, bytes);
				void *dd = to_device(a, bytes);
				/* dst separate */
				assert_int_equal(dp_cuda_reduce(dd, da, db, n, dt, op, NULL), 0);
				assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
				expect_same("reduce d=a+b", dt, op, ref, dd, n);
				/* dst == b */
				assert_int_equal(dp_cuda_reduce(db, da, db, n, dt, op, NULL), 0);
				assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
				expect_same("reduce b=a+b", dt, op, ref, db, n);
				/* dst == a */
				cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice);
				assert_int_equal(dp_cuda_reduce(da, da, db, n, dt, op, NULL), 0);
				assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
				expect_same("reduce a=a+b", dt, op, ref, da, n);
				cudaFree(da);
				cudaFree(db);
				cudaFree(dd);
				free(a);
				free(b);
				free(ref);
			}
}

static void test_scale_avg_matches_cpu(void **state)
{
	static const int ranks[] = {1, 2, 3, 4, 7, 8};
	(void)state;
	for (int dt = 0; dt < YD_DTYPE_COUNT; dt++)
		for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
			size_t n = 4099, bytes = n * yd_dtype_size(dt);
			char *x = malloc(bytes);
			fill(x, dt, n, YD_SUM);
			void *dx = to_device(x, bytes);
			dp_scale_avg(x, n, dt, ranks[ri]);
			assert_int_equal(dp_cuda_scale_avg(dx, n, dt, ranks[ri], NULL), 0);
			assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
			expect_same("scale_avg", dt, ranks[ri], x, dx, n);
			cudaFree(dx);
			free(x);
		}
}

/* The cast reference: what dp_cuda.h promises, written with the CPU's conversions. */
static double load_as_double(const void *p, int dt, size_t i)
{
	switch (dt) {
	case YD_F32:
		return ((const float *)p)[i];
	case YD_F64:
		return ((const double *)p)[i];
	case YD_F16:
		return dp_f16_to_f32(((const uint16_t *)p)[i]);
	case YD_BF16:
		return dp_bf16_to_f32(((const uint16_t *)p)[i]);
	case YD_I32:
		return ((const int32_t *)p)[i];
	default:
		return (double)((const int64_t *)p)[i];
	}
}

static void cast_ref(void *d, int ddt, const void *s, int sdt, size_t i)
{
	int s_int = sdt == YD_I32 || sdt == YD_I64, d_int = ddt == YD_I32 || ddt == YD_I64;
	if (s_int && d_int) {
		int64_t v = sdt == YD_I32 ? ((const int32_t *)s)[i] : ((const int64_t *)s)[i];
		if (ddt == YD_I32)
			((int32_t *)d)[i] = (int32_t)v;
		else
			((int64_t *)d)[i] = v;
		return;
	}
	if (sdt == YD_I64 && ddt != YD_F64) {
		float f = (float)((const int64_t *)s)[i];
		if (ddt == YD_F32)
			((float *)d)[i] = f;
		else
			((uint16_t *)d)[i] = ddt == YD_F16 ? dp_f32_to_f16(f) : dp_f32_to_bf16(f);
		return;
	}
	double v = load_as_double(s, sdt, i);
	switch (ddt) {
	case YD_F32:
		((float *)d)[i] = (float)v;
		break;
	case YD_F64:
		((double *)d)[i] = v;
		break;
	case YD_F16:
		((uint16_t *)d)[i] = dp_f32_to_f16((float)v);
		break;
	case YD_BF16:
		((uint16_t *)d)[i] = dp_f32_to_bf16((float)v);
		break;
	case YD_I32:
		((int32_t *)d)[i] = (int32_t)v;
		break;
	default:
		((int64_t *)d)[i] = (int64_t)v;
	}
}

/* Values every dtype holds and every integer type can take after truncation. */
static void fill_castable(void *buf, int dt, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double v = (double)((int64_t)(next_rand() % 40001) - 20000) / 3.0;
		switch (dt) {
		case YD_F32:
			((float *)buf)[i] = (float)v;
			break;
		case YD_F64:
			((double *)buf)[i] = v;
			break;
		case YD_F16:
			((uint16_t *)buf)[i] = dp_f32_to_f16((float)v);
			break;
		case YD_BF16:
			((uint16_t *)buf)[i] = dp_f32_to_bf16((float)v);
			break;
		case YD_I32:
			((int32_t *)buf)[i] = (int32_t)(v * 3);
			break;
		default:
			((int64_t *)buf)[i] = (int64_t)(v * 3) * 1000003;
		}
	}
}

static void test_cast_matches_reference(void **state)
{
	(void)state;
	for (int sdt = 0; sdt < YD_DTYPE_COUNT; sdt++)
		for (int ddt = 0; ddt < YD_DTYPE_COUNT; ddt++) {
			size_t n = 3001;
			char *s = malloc(n * 8), *ref = malloc(n * 8);
			fill_castable(s, sdt, n);
			for (size_t i = 0; i < n; i++)
				cast_ref(ref, ddt, s, sdt, i);
			void *ds = to_device(s, n * yd_dtype_size(sdt));
			void *dd = NULL;
			assert_int_equal(cudaMalloc(&dd, n * yd_dtype_size(ddt)), cudaSuccess);
			assert_int_equal(dp_cuda_cast(dd, ddt, ds, sdt, n, NULL), 0);
			assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
			expect_same("cast", ddt, sdt, ref, dd, n);
			cudaFree(ds);
			cudaFree(dd);
			free(s);
			free(ref);
		}
}

static void test_bad_arguments_rejected(void **state)
{
	(void)state;
	assert_int_not_equal(dp_cuda_reduce(NULL, NULL, NULL, 5, YD_DTYPE_COUNT, YD_SUM, NULL), 0);
	assert_int_not_equal(dp_cuda_reduce(NULL, NULL, NULL, 5, YD_F32, YD_OP_COUNT, NULL), 0);
	assert_int_not_equal(dp_cuda_scale_avg(NULL, 5, YD_F32, 0, NULL), 0);
	assert_int_not_equal(dp_cuda_cast(NULL, -1, NULL, YD_F32, 5, NULL), 0);
	/* count 0 touches nothing */
	assert_int_equal(dp_cuda_reduce(NULL, NULL, NULL, 0, YD_F32, YD_SUM, NULL), 0);
}

int main(void)
{
	int n = yd_cuda_device_count();
	if (n <= 0) {
		printf("SKIP: no CUDA device on this machine (cudaGetDeviceCount found none): the "
		       "kernels were compiled but not run\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reduce_matches_cpu),
	    cmocka_unit_test(test_scale_avg_matches_cpu),
	    cmocka_unit_test(test_cast_matches_reference),
	    cmocka_unit_test(test_bad_arguments_rejected),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
