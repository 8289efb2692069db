/* reduce.c: the reduction kernels (CPU). Plain loops over restrict-free pointers so in-place
 * works; the compiler vectorises the f32/f64/i32/i64 ones at -O2 -ftree-vectorize. f16 and
 * bf16 go through float: each step converts both inputs, combines in float and rounds the
 * result back to nearest even, as NCCL does for half types. Does not do CUDA (see cuda.cu). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "dataplane/reduce.h"

float reduce_f16_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
	if (exp == 0) {
		float v = (float)mant * 0x1p-24f; /* zero or subnormal */
		memcpy(&bits, &v, 4);
		bits |= sign;
	} else if (exp == 31) {
		bits = sign | 0x7f800000u | (mant << 13);
	} else {
		bits = sign | ((exp + 112) << 23) | (mant << 13);
	}
	float out;
	memcpy(&out, &bits, 4);
	return out;
}

uint16_t reduce_float_to_f16(float f)
{
	uint32_t bits;
	memcpy(&bits, &f, 4);
	uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
	uint32_t absbits = bits & 0x7fffffffu;
	if (absbits > 0x7f800000u)
		return sign | 0x7e00; /* NaN */
	if (absbits >= 0x477ff000u)
		return sign | 0x7c00; /* >= 65520 rounds to infinity */
	if (absbits < 0x38800000u) {
		/* below the smallest normal half (2^-14): a multiple of 2^-24, rounded to even */
		float a;
		memcpy(&a, &absbits, 4);
		return sign | (uint16_t)lrintf(a * 0x1p24f);
	}
	uint32_t r = absbits + 0xfffu + ((absbits >> 13) & 1u);
	return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

float reduce_bf16_to_float(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float out;
	memcpy(&out, &bits, 4);
	return out;
}

uint16_t reduce_float_to_bf16(float f)
{
	uint32_t bits;
	memcpy(&bits, &f, 4);
	if ((bits & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
	bits += 0x7fffu + ((bits >> 16) & 1u);
	return (uint16_t)(bits >> 16);
}

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((y) > (x) ? (y) : (x))

#define DEFINE_NATIVE(name, T, OPM)                                                                \
	static void name(void *dst, const void *a, const void *b, size_t n)                        \
	{                                                                                          \
		T *d = dst;                                                                        \
		const T *x = a, *y = b;                                                            \
		for (size_t i = 0; i < n; i++)                                                     \
			d[i] = OPM(x[i], y[i]);                                                    \
	}

#define DEFINE_HALF(name, TO_F, FROM_F, OPM)                                                       \
	static void name(void *dst, const void *a, const void *b, size_t n)                        \
	{                                                                                          \
		uint16_t *d = dst;                                                                 \
		const uint16_t *x = a, *y = b;                                                     \
		for (size_t i = 0; i < n; i++)                                                     \
			d[i] = FROM_F(OPM(TO_F(x[i]), TO_F(y[i])));                                \
	}

#define DEFINE_ALL_NATIVE(T, sfx)                                                                  \
	DEFINE_NATIVE(sum_##sfx, T, OP_SUM)                                                        \
	DEFINE_NATIVE(prod_##sfx, T, OP_PROD)                                                      \
	DEFINE_NATIVE(min_##sfx, T, OP_MIN)                                                        \
	DEFINE_NATIVE(max_##sfx, T, OP_MAX)

#define DEFINE_ALL_HALF(sfx, TO_F, FROM_F)                                                         \
	DEFINE_HALF(sum_##sfx, TO_F, FROM_F, OP_SUM)                                               \
	DEFINE_HALF(prod_##sfx, TO_F, FROM_F, OP_PROD)                                             \
	DEFINE_HALF(min_##sfx, TO_F, FROM_F, OP_MIN)                                               \
	DEFINE_HALF(max_##sfx, TO_F, FROM_F, OP_MAX)

DEFINE_ALL_NATIVE(float, f32)
DEFINE_ALL_NATIVE(double, f64)
DEFINE_ALL_NATIVE(int32_t, i32)
DEFINE_ALL_NATIVE(int64_t, i64)
DEFINE_ALL_HALF(f16, reduce_f16_to_float, reduce_float_to_f16)
DEFINE_ALL_HALF(bf16, reduce_bf16_to_float, reduce_float_to_bf16)

typedef void (*reduce_fn)(void *, const void *, const void *, size_t);

/* [dtype][op]; AVG uses the SUM kernel. */
static const reduce_fn kernels[YD_DTYPE_COUNT][YD_OP_COUNT] = {
    [YD_F32] = {sum_f32, prod_f32, min_f32, max_f32, sum_f32},
    [YD_F64] = {sum_f64, prod_f64, min_f64, max_f64, sum_f64},
    [YD_F16] = {sum_f16, prod_f16, min_f16, max_f16, sum_f16},
    [YD_BF16] = {sum_bf16, prod_bf16, min_bf16, max_bf16, sum_bf16},
    [YD_I32] = {sum_i32, prod_i32, min_i32, max_i32, sum_i32},
    [YD_I64] = {sum_i64, prod_i64, min_i64, max_i64, sum_i64},
};

void reduce_apply(void *dst, const void *a, const void *b, size_t count, enum yd_dtype dt,
                  enum yd_op op)
{
	if (count)
		kernels[dt][op](dst, a, b, count);
}

void reduce_finish_avg(void *buf, size_t count, enum yd_dtype dt, enum yd_op op, int world_size)
{
	if (op != YD_AVG)
		return;
	switch (dt) {
	case YD_F32: {
		float *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] /= (float)world_size;
		break;
	}
	case YD_F64: {
		double *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] /= (double)world_size;
		break;
	}
	case YD_F16: {
		uint16_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] = reduce_float_to_f16(reduce_f16_to_float(p[i]) / (float)world_size);
		break;
	}
	case YD_BF16: {
		uint16_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] = reduce_float_to_bf16(reduce_bf16_to_float(p[i]) / (float)world_size);
		break;
	}
	case YD_I32: {
		int32_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] /= world_size;
		break;
	}
	case YD_I64: {
		int64_t *p = buf;
		for (size_t i = 0; i < count; i++)
			p[i] /= world_size;
		break;
	}
	default:
		break;
	}
}
