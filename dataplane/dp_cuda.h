/* dp_cuda.h: the data plane's CUDA side, private to dataplane/ and its tests.
 *
 * Kernels (dp_cuda_kernels.cu, nvcc): element-wise reduction, the average's final division
 * and dtype casts on device memory, bit-for-bit equal to the CPU kernels of reduce.c (f16 and
 * bf16 go through float with the same round-to-nearest-even code), so a GPU rank and a CPU
 * rank never disagree on a result. Streams are passed as void * (a cudaStream_t) so that C
 * files including this header need no CUDA header; every kernel returns a cudaError_t
 * (0 = success) and only enqueues work on the stream.
 *
 * Buffers (cuda.c, compiled with HAVE_CUDA, stubs otherwise): which pointers are device
 * memory, and the collectives on device buffers (host staging, or NCCL; see cuda.c). */
#ifndef YD_DP_CUDA_H
#define YD_DP_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] (op) b[i], count elements of dtype (enum yd_dtype); op is enum yd_op, avg
 * sums. dst may equal a or b. */
int dp_cuda_reduce(void *dst, const void *a, const void *b, size_t count, int dtype, int op,
                   void *stream);
/* buf[i] /= n, exactly as dp_scale_avg does on the CPU (integers truncate). */
int dp_cuda_scale_avg(void *buf, size_t count, int dtype, int n, void *stream);
/* dst[i] = (dst_dtype) src[i]; floats to integers truncate toward zero (C semantics), out
 * of range values are undefined as in C; to f16/bf16 rounds to nearest even. dst and src
 * must not overlap unless they are equal and the dtypes have the same size. */
int dp_cuda_cast(void *dst, int dst_dtype, const void *src, int src_dtype, size_t count,
                 void *stream);

#ifdef __cplusplus
}
#endif
#endif
