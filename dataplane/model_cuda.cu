/* model_cuda.cu: CUDA versions of the residual MLP's layers (model_cuda.h). Matmuls through
 * cuBLAS on row-major buffers (computed as the column-major transposed products); the other
 * layers are plain kernels, one thread per row or element, written for clarity first like the
 * CPU layers they mirror. Reductions that decide the loss are done in double. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"
#include "dataplane/model_cuda.h"

struct model_cuda {
	cublasHandle_t blas;
};

static const int threads = 256;

static int blocks_for(size_t count)
{
	return (int)((count + threads - 1) / threads);
}

static int check_launch(void)
{
	return cudaGetLastError() == cudaSuccess ? 0 : YARD_EIO;
}

extern "C" int model_cuda_available(void)
{
	int count = 0;
	return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

extern "C" int model_cuda_open(struct model_cuda **out, char *err, size_t err_len)
{
	if (!model_cuda_available()) {
		snprintf(err, err_len, "no CUDA device");
		return YARD_EUNSUPPORTED;
	}
	struct model_cuda *ctx = (struct model_cuda *)calloc(1, sizeof *ctx);
	if (!ctx)
		return YARD_ENOMEM;
	cublasStatus_t st = cublasCreate(&ctx->blas);
	if (st != CUBLAS_STATUS_SUCCESS) {
		snprintf(err, err_len, "cublasCreate failed: status %d", (int)st);
		free(ctx);
		return YARD_EIO;
	}
	*out = ctx;
	return 0;
}

extern "C" void model_cuda_close(struct model_cuda *ctx)
{
	if (!ctx)
		return;
	cublasDestroy(ctx->blas);
	free(ctx);
}

extern "C" void *model_cuda_alloc(size_t bytes)
{
	void *p = NULL;
	return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}

extern "C" void model_cuda_free(void *ptr)
{
	cudaFree(ptr);
}

extern "C" int model_cuda_copy_to_device(void *dst, const void *src, size_t bytes)
{
	return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : YARD_EIO;
}

extern "C" int model_cuda_copy_to_host(void *dst, const void *src, size_t bytes)
{
	return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : YARD_EIO;
}

__global__ void bias_add_kernel(float *out, const float *b, int n, int o)
{
	size_t at = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (at < (size_t)n * o)
		out[at] += b[at % o];
}

/* db (o) += column sums of dout (n, o) */
__global__ void colsum_add_kernel(float *db, const float *dout, int n, int o)
{
	int k = blockIdx.x * blockDim.x + threadIdx.x;
	if (k >= o)
		return;
	float acc = 0.0f;
	for (int r = 0; r < n; r++)
		acc += dout[(size_t)r * o + k];
	db[k] += acc;
}

extern "C" int model_cuda_matmul_forward(struct model_cuda *ctx, float *out, const float *in,
                                         const float *w, const float *b, int n, int i, int o)
{
	const float one = 1.0f, zero = 0.0f;
	/* out^T (o, n) = w (o, i) . in^T (i, n) in column-major terms */
	if (cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, o, n, i, &one, w, i, in, i, &zero, out,
	                o) != CUBLAS_STATUS_SUCCESS)
		return YARD_EIO;
	if (b)
		bias_add_kernel<<<blocks_for((size_t)n * o), threads>>>(out, b, n, o);
	return check_launch();
}

extern "C" int model_cuda_matmul_backward(struct model_cuda *ctx, float *din, float *dw,
                                          float *db, const float *dout, const float *in,
                                          const float *w, int n, int i, int o)
{
	const float one = 1.0f, zero = 0.0f;
	/* din^T (i, n) = w^T (i, o) . dout^T (o, n) */
	if (din && cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, i, n, o, &one, w, i, dout, o,
	                       &zero, din, i) != CUBLAS_STATUS_SUCCESS)
		return YARD_EIO;
	/* dw^T (i, o) += in^T (i, n) . dout (n, o) */
	if (cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, i, o, n, &one, in, i, dout, o, &one, dw,
	                i) != CUBLAS_STATUS_SUCCESS)
		return YARD_EIO;
	if (db)
		colsum_add_kernel<<<blocks_for((size_t)o), threads>>>(db, dout, n, o);
	return check_launch();
}

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *in,
                                         const float *gamma, const float *beta, int n, int d)
{
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= n)
		return;
	const float *x = in + (size_t)r * d;
	float *y = out + (size_t)r * d;
	double sum = 0.0;
	for (int j = 0; j < d; j++)
		sum += x[j];
	float mu = (float)(sum / d);
	double var = 0.0;
	for (int j = 0; j < d; j++) {
		double c = x[j] - mu;
		var += c * c;
	}
	float rs = (float)(1.0 / sqrt(var / d + 1e-5));
	for (int j = 0; j < d; j++)
		y[j] = (x[j] - mu) * rs * gamma[j] + beta[j];
	mean[r] = mu;
	rstd[r] = rs;
}

__global__ void layernorm_backward_input_kernel(float *din, const float *dout, const float *in,
                                                const float *mean, const float *rstd,
                                                const float *gamma, int n, int d)
{
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= n)
		return;
	const float *x = in + (size_t)r * d, *dy = dout + (size_t)r * d;
	float *dx = din + (size_t)r * d;
	float mu = mean[r], rs = rstd[r];
	double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
	for (int j = 0; j < d; j++) {
		float xhat = (x[j] - mu) * rs, dxhat = dy[j] * gamma[j];
		sum_dxhat += dxhat;
		sum_dxhat_xhat += (double)dxhat * xhat;
	}
	float m1 = (float)(sum_dxhat / d), m2 = (float)(sum_dxhat_xhat / d);
	for (int j = 0; j < d; j++) {
		float xhat = (x[j] - mu) * rs, dxhat = dy[j] * gamma[j];
		dx[j] = rs * (dxhat - m1 - xhat * m2);
	}
}

__global__ void layernorm_backward_params_kernel(float *dgamma, float *dbeta, const float *dout,
                                                 const float *in, const float *mean,
                                                 const float *rstd, int n, int d)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= d)
		return;
	float dg = 0.0f, db = 0.0f;
	for (int r = 0; r < n; r++) {
		float dy = dout[(size_t)r * d + j];
		dg += dy * (in[(size_t)r * d + j] - mean[r]) * rstd[r];
		db += dy;
	}
	dgamma[j] += dg;
	dbeta[j] += db;
}

extern "C" int model_cuda_layernorm_forward(float *out, float *mean, float *rstd,
                                            const float *in, const float *gamma,
                                            const float *beta, int n, int d)
{
	layernorm_forward_kernel<<<blocks_for((size_t)n), threads>>>(out, mean, rstd, in, gamma,
	                                                             beta, n, d);
	return check_launch();
}

extern "C" int model_cuda_layernorm_backward(float *din, float *dgamma, float *dbeta,
                                             const float *dout, const float *in,
                                             const float *mean, const float *rstd,
                                             const float *gamma, int n, int d)
{
	layernorm_backward_input_kernel<<<blocks_for((size_t)n), threads>>>(din, dout, in, mean,
	                                                                    rstd, gamma, n, d);
	layernorm_backward_params_kernel<<<blocks_for((size_t)d), threads>>>(dgamma, dbeta, dout,
	                                                                     in, mean, rstd, n, d);
	return check_launch();
}

#define GELU_SCALE 0.7978845608028654f

__global__ void gelu_forward_kernel(float *out, const float *in, size_t count)
{
	size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (k >= count)
		return;
	float x = in[k], cube = 0.044715f * x * x * x;
	out[k] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
}

__global__ void gelu_backward_kernel(float *din, const float *in, const float *dout,
                                     size_t count)
{
	size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (k >= count)
		return;
	float x = in[k], cube = 0.044715f * x * x * x;
	float t = tanhf(GELU_SCALE * (x + cube)), sech2 = 1.0f - t * t;
	float grad =
	    0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
	din[k] = dout[k] * grad;
}

extern "C" int model_cuda_gelu_forward(float *out, const float *in, size_t count)
{
	gelu_forward_kernel<<<blocks_for(count), threads>>>(out, in, count);
	return check_launch();
}

extern "C" int model_cuda_gelu_backward(float *din, const float *in, const float *dout,
                                        size_t count)
{
	gelu_backward_kernel<<<blocks_for(count), threads>>>(din, in, dout, count);
	return check_launch();
}

/* Per row: probs, the row's loss and whether the argmax is the label. */
__global__ void softmax_xent_forward_kernel(float *probs, const float *logits,
                                            const int32_t *labels, int n, int classes,
                                            double *row_loss, int *row_correct)
{
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= n)
		return;
	const float *z = logits + (size_t)r * classes;
	float *p = probs + (size_t)r * classes;
	float maxz = z[0];
	int argmax = 0;
	for (int k = 1; k < classes; k++)
		if (z[k] > maxz) {
			maxz = z[k];
			argmax = k;
		}
	double sum = 0.0;
	for (int k = 0; k < classes; k++)
		sum += exp((double)z[k] - maxz);
	double logsum = log(sum) + maxz;
	row_loss[r] = logsum - z[labels[r]];
	row_correct[r] = argmax == labels[r];
	for (int k = 0; k < classes; k++)
		p[k] = (float)exp((double)z[k] - logsum);
}

extern "C" int model_cuda_softmax_xent_forward(float *probs, const float *logits,
                                               const int32_t *labels, int n, int classes,
                                               double *loss, int *correct)
{
	double *row_loss = NULL;
	int *row_correct = NULL;
	if (cudaMalloc(&row_loss, (size_t)n * sizeof(double)) != cudaSuccess ||
	    cudaMalloc(&row_correct, (size_t)n * sizeof(int)) != cudaSuccess) {
		cudaFree(row_loss);
		return YARD_ENOMEM;
	}
	softmax_xent_forward_kernel<<<blocks_for((size_t)n), threads>>>(probs, logits, labels, n,
	                                                                classes, row_loss,
	                                                                row_correct);
	int rc = check_launch();
	double *host_loss = (double *)malloc((size_t)n * sizeof(double));
	int *host_correct = (int *)malloc((size_t)n * sizeof(int));
	if (!rc && (!host_loss || !host_correct))
		rc = YARD_ENOMEM;
	if (!rc && (cudaMemcpy(host_loss, row_loss, (size_t)n * sizeof(double),
	                       cudaMemcpyDeviceToHost) != cudaSuccess ||
	            cudaMemcpy(host_correct, row_correct, (size_t)n * sizeof(int),
	                       cudaMemcpyDeviceToHost) != cudaSuccess))
		rc = YARD_EIO;
	if (!rc) {
		*loss = 0.0;
		for (int r = 0; r < n; r++) {
			*loss += host_loss[r];
			*correct += host_correct[r];
		}
	}
	free(host_loss);
	free(host_correct);
	cudaFree(row_loss);
	cudaFree(row_correct);
	return rc;
}

__global__ void softmax_xent_backward_kernel(float *dlogits, const float *probs,
                                             const int32_t *labels, int n, int classes,
                                             float scale)
{
	size_t at = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (at >= (size_t)n * classes)
		return;
	int r = (int)(at / classes), k = (int)(at % classes);
	float onehot = k == labels[r] ? 1.0f : 0.0f;
	dlogits[at] = (probs[at] - onehot) * scale;
}

extern "C" int model_cuda_softmax_xent_backward(float *dlogits, const float *probs,
                                                const int32_t *labels, int n, int classes,
                                                float scale)
{
	softmax_xent_backward_kernel<<<blocks_for((size_t)n * classes), threads>>>(
	    dlogits, probs, labels, n, classes, scale);
	return check_launch();
}
