/* dp_cuda_kernels.cu: reduction, average and cast kernels on device memory for libyd (see
 * dp_cuda.h). Grid-stride loops, one element per thread per step; f16 and bf16 are handled
 * as raw 16-bit patterns converted with the same integer code as reduce.c, so results are
 * bit-for-bit those of the CPU path whatever the GPU's native half arithmetic would do. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "dataplane/dp_cuda.h"

/* Mirrors enum yd_dtype / enum yd_op of yd.h (kept in step by the unit test, which runs
 * every pair through both the CPU and these kernels). */
enum { T_F32, T_F64, T_F16, T_BF16, T_I32, T_I64, T_COUNT };
enum { O_SUM, O_PROD, O_MIN, O_MAX, O_AVG, O_COUNT };

static __device__ __forceinline__ uint16_t f32_to_f16(float f)
{
	uint32_t u = __float_as_uint(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a = u & 0x7fffffffu;
	uint16_t o;
	if (a >= (143u << 23)) {
		o = a > 0x7f800000u ? 0x7e00 : 0x7c00;
	} else if (a < (113u << 23)) {
		float magic = __uint_as_float(126u << 23);
		/* __fadd_rn: no fused or flushed arithmetic, as on the CPU */
		o = (uint16_t)(__float_as_uint(__fadd_rn(__uint_as_float(a), magic)) - (126u << 23));
	} else {
		uint32_t odd = (a >> 13) & 1u;
		a += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
		o = (uint16_t)(a >> 13);
	}
	return (uint16_t)(o | sign);
}

static __device__ __forceinline__ float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	if (exp == 0) {
		float v = __fmul_rn((float)mant, 1.0f / 16777216.0f);
		return sign ? -v : v;
	}
	if (exp == 31)
		return __uint_as_float(sign | 0x7f800000u | (mant << 13));
	return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

static __device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static __device__ __forceinline__ float bf16_to_f32(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

/* Arithmetic in IEEE round-to-nearest without contraction, like the CPU build. */
template <typename T> struct arith {
	static __device__ T add(T x, T y) { return x + y; }
	static __device__ T mul(T x, T y) { return x * y; }
};
template <> struct arith<float> {
	static __device__ float add(float x, float y) { return __fadd_rn(x, y); }
	static __device__ float mul(float x, float y) { return __fmul_rn(x, y); }
};
template <> struct arith<double> {
	static __device__ double add(double x, double y) { return __dadd_rn(x, y); }
	static __device__ double mul(double x, double y) { return __dmul_rn(x, y); }
};

template <typename T> static __device__ __forceinline__ T apply(int op, T x, T y)
{
	switch (op) {
	case O_PROD:
		return arith<T>::mul(x, y);
	case O_MIN:
		return y < x ? y : x;
	case O_MAX:
		return y > x ? y : x;
	default: /* sum, avg */
		return arith<T>::add(x, y);
	}
}

template <typename T>
static __global__ void reduce_plain(T *d, const T *a, const T *b, size_t n, int op)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		d[i] = apply<T>(op, a[i], b[i]);
}

template <int BF>
static __global__ void reduce_half(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n,
                                   int op)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float x = BF ? bf16_to_f32(a[i]) : f16_to_f32(a[i]);
		float y = BF ? bf16_to_f32(b[i]) : f16_to_f32(b[i]);
		float r = apply<float>(op, x, y);
		d[i] = BF ? f32_to_bf16(r) : f32_to_f16(r);
	}
}

template <typename T> static __global__ void scale_plain(T *p, size_t n, T div)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = p[i] / div;
}

static __global__ void scale_f32(float *p, size_t n, float div)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = __fdiv_rn(p[i], div);
}

static __global__ void scale_f64(double *p, size_t n, double div)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = __ddiv_rn(p[i], div);
}

template <int BF> static __global__ void scale_half(uint16_t *p, size_t n, float div)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = __fdiv_rn(BF ? bf16_to_f32(p[i]) : f16_to_f32(p[i]), div);
		p[i] = BF ? f32_to_bf16(v) : f32_to_f16(v);
	}
}

/* Casts: every value goes through double except the half types, which go through float
 * (as reduce.c converts them). */
static __device__ __forceinline__ double load_as_double(const void *src, int dt, size_t i)
{
	switch (dt) {
	case T_F32:
		return (double)((const float *)src)[i];
	case T_F64:
		return ((const double *)src)[i];
	case T_F16:
		return (double)f16_to_f32(((const uint16_t *)src)[i]);
	case T_BF16:
		return (double)bf16_to_f32(((const uint16_t *)src)[i]);
	case T_I32:
		return (double)((const int32_t *)src)[i];
	default:
		return (double)((const int64_t *)src)[i];
	}
}

static __global__ void cast_any(void *dst, int ddt, const void *src, int sdt, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		/* integers to integers without a detour through double (i64 keeps all bits) */
		if ((sdt == T_I32 || sdt == T_I64) && (ddt == T_I32 || ddt == T_I64)) {
			int64_t v = sdt == T_I32 ? ((const int32_t *)src)[i]
			                         : ((const int64_t *)src)[i];
			if (ddt == T_I32)
				((int32_t *)dst)[i] = (int32_t)v;
			else
				((int64_t *)dst)[i] = v;
			continue;
		}
		/* integers to floats directly, so that i64 -> f32 rounds once */
		if (sdt == T_I64 && ddt != T_F64) {
			float f = (float)((const int64_t *)src)[i];
			if (ddt == T_F32)
				((float *)dst)[i] = f;
			else
				((uint16_t *)dst)[i] = ddt == T_F16 ? f32_to_f16(f) : f32_to_bf16(f);
			continue;
		}
		double v = load_as_double(src, sdt, i);
		switch (ddt) {
		case T_F32:
			((float *)dst)[i] = (float)v;
			break;
		case T_F64:
			((double *)dst)[i] = v;
			break;
		case T_F16:
			((uint16_t *)dst)[i] = f32_to_f16((float)v);
			break;
		case T_BF16:
			((uint16_t *)dst)[i] = f32_to_bf16((float)v);
			break;
		case T_I32:
			((int32_t *)dst)[i] = (int32_t)v;
			break;
		default:
			((int64_t *)dst)[i] = (int64_t)v;
		}
	}
}

static unsigned grid_for(size_t n)
{
	size_t blocks = (n + 255) / 256;
	return (unsigned)(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

extern "C" int dp_cuda_reduce(void *dst, const void *a, const void *b, size_t count, int dtype,
                              int op, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (count == 0)
		return 0;
	if (dtype < 0 || dtype >= T_COUNT || op < 0 || op >= O_COUNT)
		return (int)cudaErrorInvalidValue;
	unsigned g = grid_for(count);
	switch (dtype) {
	case T_F32:
		reduce_plain<float><<<g, 256, 0, s>>>((float *)dst, (const float *)a,
		                                      (const float *)b, count, op);
		break;
	case T_F64:
		reduce_plain<double><<<g, 256, 0, s>>>((double *)dst, (const double *)a,
		                                       (const double *)b, count, op);
		break;
	case T_F16:
		reduce_half<0><<<g, 256, 0, s>>>((uint16_t *)dst, (const uint16_t *)a,
		                                 (const uint16_t *)b, count, op);
		break;
	case T_BF16:
		reduce_half<1><<<g, 256, 0, s>>>((uint16_t *)dst, (const uint16_t *)a,
		                                 (const uint16_t *)b, count, op);
		break;
	case T_I32:
		reduce_plain<int32_t><<<g, 256, 0, s>>>((int32_t *)dst, (const int32_t *)a,
		                                        (const int32_t *)b, count, op);
		break;
	default:
		reduce_plain<int64_t><<<g, 256, 0, s>>>((int64_t *)dst, (const int64_t *)a,
		                                        (const int64_t *)b, count, op);
	}
	return (int)cudaGetLastError();
}

extern "C" int dp_cuda_scale_avg(void *buf, size_t count, int dtype, int n, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (count == 0)
		return 0;
	if (dtype < 0 || dtype >= T_COUNT || n < 1)
		return (int)cudaErrorInvalidValue;
	unsigned g = grid_for(count);
	switch (dtype) {
	case T_F32:
		scale_f32<<<g, 256, 0, s>>>((float *)buf, count, (float)n);
		break;
	case T_F64:
		scale_f64<<<g, 256, 0, s>>>((double *)buf, count, (double)n);
		break;
	case T_F16:
		scale_half<0><<<g, 256, 0, s>>>((uint16_t *)buf, count, (float)n);
		break;
	case T_BF16:
		scale_half<1><<<g, 256, 0, s>>>((uint16_t *)buf, count, (float)n);
		break;
	case T_I32:
		scale_plain<int32_t><<<g, 256, 0, s>>>((int32_t *)buf, count, (int32_t)n);
		break;
	default:
		scale_plain<int64_t><<<g, 256, 0, s>>>((int64_t *)buf, count, (int64_t)n);
	}
	return (int)cudaGetLastError();
}

extern "C" int dp_cuda_cast(void *dst, int dst_dtype, const void *src, int src_dtype,
                            size_t count, void *stream)
{
	if (count == 0)
		return 0;
	if (dst_dtype < 0 || dst_dtype >= T_COUNT || src_dtype < 0 || src_dtype >= T_COUNT)
		return (int)cudaErrorInvalidValue;
	cast_any<<<grid_for(count), 256, 0, (cudaStream_t)stream>>>(dst, dst_dtype, src,
	                                                           src_dtype, count);
	return (int)cudaGetLastError();
}
