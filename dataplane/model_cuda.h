/* model_cuda.h: the residual MLP's layers on a CUDA device, the same functions and shapes as
 * the CPU layers in model.h (model_layers.c) but on device pointers: matmuls through cuBLAS,
 * the rest as kernels (model_cuda.cu). Compiled whenever configure finds the CUDA toolkit;
 * whether a GPU is there is decided at run time (model_cuda_available). The trainer's step
 * still runs on the CPU layers: these are checked against them by tests/unit/test_model_cuda
 * on a machine with a GPU and are the building blocks of a device trainer (README, Known
 * limitations). */
#ifndef YARD_MODEL_CUDA_H
#define YARD_MODEL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct model_cuda;

/* 1 if a CUDA device can be used, 0 otherwise (no driver, no device). */
int model_cuda_available(void);
/* Creates the cuBLAS handle on the current device; message into err on failure. */
int model_cuda_open(struct model_cuda **out, char *err, size_t err_len);
void model_cuda_close(struct model_cuda *ctx);

/* Device memory helpers for callers written in C. */
void *model_cuda_alloc(size_t bytes);
void model_cuda_free(void *ptr);
int model_cuda_copy_to_device(void *dst, const void *src, size_t bytes);
int model_cuda_copy_to_host(void *dst, const void *src, size_t bytes);

/* Same contracts as the CPU versions in model.h; every pointer is device memory except
 * *correct and the returned loss. Returns 0 or a negative YARD_E* code. */
int model_cuda_matmul_forward(struct model_cuda *ctx, float *out, const float *in, const float *w,
                              const float *b, int n, int i, int o);
int model_cuda_matmul_backward(struct model_cuda *ctx, float *din, float *dw, float *db,
                               const float *dout, const float *in, const float *w, int n, int i,
                               int o);
int model_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                                 const float *gamma, const float *beta, int n, int d);
int model_cuda_layernorm_backward(float *din, float *dgamma, float *dbeta, const float *dout,
                                  const float *in, const float *mean, const float *rstd,
                                  const float *gamma, int n, int d);
int model_cuda_gelu_forward(float *out, const float *in, size_t count);
int model_cuda_gelu_backward(float *din, const float *in, const float *dout, size_t count);
/* probs (n, C) may alias logits; returns the summed loss through *loss (host). */
int model_cuda_softmax_xent_forward(float *probs, const float *logits, const int32_t *labels, int n,
                                    int classes, double *loss, int *correct);
int model_cuda_softmax_xent_backward(float *dlogits, const float *probs, const int32_t *labels,
                                     int n, int classes, float scale);

#ifdef __cplusplus
}
#endif
#endif
