/* reduce.c: element-wise reductions (sum prod min max avg) over every data type, the kernels
 * the transports call while copying out of a peer's buffer. Plain loops over restrict
 * pointers that the compiler vectorises (built with -O3); f16 and bf16 are converted through
 * float with round-to-nearest-even so every rank rounds identically. Average is a sum here;
 * the caller divides once at the end (dp_scale_avg). Also the dtype/op names of yd.h. */
#include "config.h"

#include <string.h>

#include "dataplane/dp.h"

#pragma GCC optimize("O3")

static const char *const dtype_names[YD_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i32", "i64"};
static const size_t dtype_sizes[YD_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8};
static const char *const op_names[YD_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

const char *yd_dtype_name(enum yd_dtype d)
{
	return (unsigned)d < YD_DTYPE_COUNT ? dtype_names[d] : "?";
}

size_t yd_dtype_size(enum yd_dtype d)
{
	return (unsigned)d < YD_DTYPE_COUNT ? dtype_sizes[d] : 0;
}

const char *yd_op_name(enum yd_op op)
{
	return (unsigned)op < YD_OP_COUNT ? op_names[op] : "?";
}

static inline uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Round to nearest even, NaN stays NaN, overflow becomes infinity (F. Giesen's method). */
static inline uint16_t f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a = u & 0x7fffffffu;
	uint16_t o;
	if (a >= (143u << 23)) {
		o = a > 0x7f800000u ? 0x7e00 : 0x7c00;
	} else if (a < (113u << 23)) {
		float magic = bits_f32(126u << 23);
		o = (uint16_t)(f32_bits(bits_f32(a) + magic) - (126u << 23));
	} else {
		uint32_t odd = (a >> 13) & 1u;
		a += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
		o = (uint16_t)(a >> 13);
	}
	return (uint16_t)(o | sign);
}

static inline float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	if (exp == 0) {
		float v = (float)mant * (1.0f / 16777216.0f);
		return sign ? -v : v;
	}
	if (exp == 31)
		return bits_f32(sign | 0x7f800000u | (mant << 13));
	return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

float dp_f16_to_f32(uint16_t h)
{
	return f16_to_f32(h);
}
uint16_t dp_f32_to_f16(float f)
{
	return f32_to_f16(f);
}
float dp_bf16_to_f32(uint16_t h)
{
	return bf16_to_f32(h);
}
uint16_t dp_f32_to_bf16(float f)
{
	return f32_to_bf16(f);
}

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((y) > (x) ? (y) : (x))

/* Two kernels per (type, op): dst = a op b with no aliasing, and dst op= b in place, so the
 * vectoriser never has to guard against overlap. */
#define KERNELS(T, NAME, OPM)                                                                      \
	static void k3_##NAME(T *restrict d, const T *restrict a, const T *restrict b, size_t n)   \
	{                                                                                          \
		for (size_t i = 0; i < n; i++)                                                     \
			d[i] = OPM(a[i], b[i]);                                                    \
	}                                                                                          \
	static void k2_##NAME(T *restrict d, const T *restrict b, size_t n)                        \
	{                                                                                          \
		for (size_t i = 0; i < n; i++)                                                     \
			d[i] = OPM(d[i], b[i]);                                                    \
	}

#define KERNELS_FOR(T, S)                                                                          \
	KERNELS(T, S##_sum, OP_SUM)                                                                \
	KERNELS(T, S##_prod, OP_PROD) KERNELS(T, S##_min, OP_MIN) KERNELS(T, S##_max, OP_MAX)

KERNELS_FOR(float, f32)
KERNELS_FOR(double, f64)
KERNELS_FOR(int32_t, i32)
KERNELS_FOR(int64_t, i64)

/* Half types: convert, operate in float, round back. */
#define HALF_KERNELS(NAME, TOF, FROMF, OPM)                                                        \
	static void k3_##NAME(uint16_t *restrict d, const uint16_t *restrict a,                    \
	                      const uint16_t *restrict b, size_t n)                                \
	{                                                                                          \
		for (size_t i = 0; i < n; i++)                                                     \
			d[i] = FROMF(OPM(TOF(a[i]), TOF(b[i])));                                   \
	}                                                                                          \
	static void k2_##NAME(uint16_t *restrict d, const uint16_t *restrict b, size_t n)          \
	{                                                                                          \
		for (size_t i = 0; i < n; i++)                                                     \
			d[i] = FROMF(OPM(TOF(d[i]), TOF(b[i])));                                   \
	}

#define HALF_KERNELS_FOR(S, TOF, FROMF)                                                            \
	HALF_KERNELS(S##_sum, TOF, FROMF, OP_SUM)                                                  \
	HALF_KERNELS(S##_prod, TOF, FROMF, OP_PROD)                                                \
	HALF_KERNELS(S##_min, TOF, FROMF, OP_MIN) HALF_KERNELS(S##_max, TOF, FROMF, OP_MAX)

HALF_KERNELS_FOR(f16, f16_to_f32, f32_to_f16)
HALF_KERNELS_FOR(bf16, bf16_to_f32, f32_to_bf16)

typedef void (*k3_fn)(void *, const void *, const void *, size_t);
typedef void (*k2_fn)(void *, const void *, size_t);

#define ROW(S)                                                                                     \
	{                                                                                          \
		(k3_fn) k3_##S##_sum, (k3_fn)k3_##S##_prod, (k3_fn)k3_##S##_min,                   \
		    (k3_fn)k3_##S##_max, (k3_fn)k3_##S##_sum                                       \
	}
#define ROW2(S)                                                                                    \
	{                                                                                          \
		(k2_fn) k2_##S##_sum, (k2_fn)k2_##S##_prod, (k2_fn)k2_##S##_min,                   \
		    (k2_fn)k2_##S##_max, (k2_fn)k2_##S##_sum                                       \
	}

static const k3_fn table3[YD_DTYPE_COUNT][YD_OP_COUNT] = {ROW(f32),  ROW(f64), ROW(f16),
                                                          ROW(bf16), ROW(i32), ROW(i64)};
static const k2_fn table2[YD_DTYPE_COUNT][YD_OP_COUNT] = {ROW2(f32),  ROW2(f64), ROW2(f16),
                                                          ROW2(bf16), ROW2(i32), ROW2(i64)};

void dp_reduce(void *dst, const void *a, const void *b, size_t count, enum yd_dtype dt,
               enum yd_op op)
{
	if (count == 0)
		return;
	if (dst == a)
		table2[dt][op](dst, b, count);
	else if (dst == b) /* every op here is commutative, bit for bit */
		table2[dt][op](dst, a, count);
	else
		table3[dt][op](dst, a, b, count);
}

void dp_scale_avg(void *buf, size_t count, enum yd_dtype dt, int n)
{
	size_t i;
	switch (dt) {
	case YD_F32: {
		float *p = buf;
		for (i = 0; i < count; i++)
			p[i] /= (float)n;
		break;
	}
	case YD_F64: {
		double *p = buf;
		for (i = 0; i < count; i++)
			p[i] /= (double)n;
		break;
	}
	case YD_F16: {
		uint16_t *p = buf;
		for (i = 0; i < count; i++)
			p[i] = f32_to_f16(f16_to_f32(p[i]) / (float)n);
		break;
	}
	case YD_BF16: {
		uint16_t *p = buf;
		for (i = 0; i < count; i++)
			p[i] = f32_to_bf16(bf16_to_f32(p[i]) / (float)n);
		break;
	}
	case YD_I32: {
		int32_t *p = buf;
		for (i = 0; i < count; i++)
			p[i] /= n;
		break;
	}
	case YD_I64: {
		int64_t *p = buf;
		for (i = 0; i < count; i++)
			p[i] /= n;
		break;
	}
	default:
		break;
	}
}
