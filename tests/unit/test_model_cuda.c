/* test_model_cuda.c: every CUDA layer (model_cuda.cu) against its CPU reference
 * (model_layers.c) on the same random inputs. Skips (exit 77) where no CUDA device exists; it is
 * only built when configure found the CUDA toolkit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/model.h"
#include "dataplane/model_cuda.h"

enum { N = 37, I = 29, O = 45, C = 7 };

static int failures;

static void *to_device(const void *host, size_t bytes)
{
	void *dev = model_cuda_alloc(bytes);
	if (!dev || model_cuda_copy_to_device(dev, host, bytes) != 0) {
		fprintf(stderr, "FAIL: device allocation or copy of %zu bytes\n", bytes);
		exit(1);
	}
	return dev;
}

/* Normwise: the largest difference over the largest reference magnitude. cuBLAS sums a
 * matmul's products in another order than OpenBLAS, so an element where they cancel (a
 * small result of large terms) differs by far more than 1e-5 of itself while staying within
 * float rounding of the terms; a wrong index, transpose or TF32 arithmetic (about 1e-3)
 * breaks the bound. */
static void expect_close(const char *what, const float *cpu, const float *dev, size_t count)
{
	float *got = malloc(count * sizeof(float));
	model_cuda_copy_to_host(got, dev, count * sizeof(float));
	double worst = 0, scale = 0;
	size_t at = 0;
	for (size_t k = 0; k < count; k++) {
		double diff = fabs((double)got[k] - cpu[k]);
		if (fabs(cpu[k]) > scale)
			scale = fabs(cpu[k]);
		if (diff > worst || isnan(got[k])) {
			worst = isnan(got[k]) ? INFINITY : diff;
			at = k;
		}
	}
	double rel = worst / (scale > 0 ? scale : 1);
	if (!(rel <= 1e-5)) {
		fprintf(stderr,
		        "FAIL: %s[%zu]: cuda %.7g, cpu %.7g (difference %.2g of the largest "
		        "element %.3g)\n",
		        what, at, got[at], cpu[at], rel, scale);
		failures++;
	} else {
		printf("ok: %s (worst difference %.2g of the largest element %.3g)\n", what, rel,
		       scale);
	}
	free(got);
}

static void fill(float *x, size_t count, uint64_t stream)
{
	for (size_t k = 0; k < count; k++)
		x[k] = (float)model_rng_normal(5, stream, k);
}

int main(void)
{
	if (!model_cuda_available()) {
		printf("SKIP: no CUDA device on this machine\n");
		return 77;
	}
	struct model_cuda *ctx;
	char err[256];
	if (model_cuda_open(&ctx, err, sizeof err) != 0) {
		fprintf(stderr, "FAIL: %s\n", err);
		return 1;
	}
	static float in[N * I], w[O * I], b[O], dout[N * O], out[N * O], din[N * I], dw[O * I],
	    db[O], gamma[I], beta[I], mean[N], rstd[N], dgamma[I], dbeta[I], logits[N * C],
	    probs[N * C], dlogits[N * C];
	int32_t labels[N];
	fill(in, N * I, 1);
	fill(w, O * I, 2);
	fill(b, O, 3);
	fill(dout, N * O, 4);
	fill(gamma, I, 5);
	fill(beta, I, 6);
	fill(logits, N * C, 7);
	for (int r = 0; r < N; r++)
		labels[r] = r % C;
	memset(dw, 0, sizeof dw);
	memset(db, 0, sizeof db);
	float *d_in = to_device(in, sizeof in), *d_w = to_device(w, sizeof w);
	float *d_b = to_device(b, sizeof b), *d_dout = to_device(dout, sizeof dout);
	float *d_out = to_device(out, sizeof out), *d_din = to_device(din, sizeof din);
	float *d_dw = to_device(dw, sizeof dw), *d_db = to_device(db, sizeof db);

	model_matmul_forward(out, in, w, b, N, I, O);
	model_cuda_matmul_forward(ctx, d_out, d_in, d_w, d_b, N, I, O);
	expect_close("matmul forward", out, d_out, N * O);
	model_matmul_backward(din, dw, db, dout, in, w, N, I, O);
	model_cuda_matmul_backward(ctx, d_din, d_dw, d_db, d_dout, d_in, d_w, N, I, O);
	expect_close("matmul backward din", din, d_din, N * I);
	expect_close("matmul backward dw", dw, d_dw, O * I);
	expect_close("matmul backward db", db, d_db, O);

	float *d_gamma = to_device(gamma, sizeof gamma), *d_beta = to_device(beta, sizeof beta);
	float *d_ln = to_device(din, sizeof din), *d_mean = to_device(mean, sizeof mean);
	float *d_rstd = to_device(rstd, sizeof rstd);
	static float ln[N * I], dln_out[N * I], dln_in[N * I];
	model_layernorm_forward(ln, mean, rstd, in, gamma, beta, N, I);
	model_cuda_layernorm_forward(d_ln, d_mean, d_rstd, d_in, d_gamma, d_beta, N, I);
	expect_close("layernorm forward", ln, d_ln, N * I);
	fill(dln_out, N * I, 8);
	memset(dgamma, 0, sizeof dgamma);
	memset(dbeta, 0, sizeof dbeta);
	float *d_dln_out = to_device(dln_out, sizeof dln_out),
	      *d_dln_in = to_device(din, sizeof din);
	float *d_dgamma = to_device(dgamma, sizeof dgamma),
	      *d_dbeta = to_device(dbeta, sizeof dbeta);
	model_layernorm_backward(dln_in, dgamma, dbeta, dln_out, in, mean, rstd, gamma, N, I);
	model_cuda_layernorm_backward(d_dln_in, d_dgamma, d_dbeta, d_dln_out, d_in, d_mean, d_rstd,
	                              d_gamma, N, I);
	expect_close("layernorm backward din", dln_in, d_dln_in, N * I);
	expect_close("layernorm backward dgamma", dgamma, d_dgamma, I);
	expect_close("layernorm backward dbeta", dbeta, d_dbeta, I);

	static float g[N * I], dg[N * I];
	model_gelu_forward(g, in, N * I);
	model_cuda_gelu_forward(d_ln, d_in, N * I);
	expect_close("gelu forward", g, d_ln, N * I);
	model_gelu_backward(dg, in, dln_out, N * I);
	model_cuda_gelu_backward(d_ln, d_in, d_dln_out, N * I);
	expect_close("gelu backward", dg, d_ln, N * I);

	float *d_logits = to_device(logits, sizeof logits),
	      *d_probs = to_device(probs, sizeof probs);
	int32_t *d_labels = to_device(labels, sizeof labels);
	int correct_cpu = 0, correct_gpu = 0;
	double loss_cpu = model_softmax_xent_forward(probs, logits, labels, N, C, &correct_cpu);
	double loss_gpu = 0;
	model_cuda_softmax_xent_forward(d_probs, d_logits, d_labels, N, C, &loss_gpu, &correct_gpu);
	expect_close("softmax probs", probs, d_probs, N * C);
	if (fabs(loss_cpu - loss_gpu) > 1e-6 * fabs(loss_cpu) || correct_cpu != correct_gpu) {
		fprintf(stderr, "FAIL: loss cuda %.9g cpu %.9g, correct %d vs %d\n", loss_gpu,
		        loss_cpu, correct_gpu, correct_cpu);
		failures++;
	}
	model_softmax_xent_backward(dlogits, probs, labels, N, C, 0.25f);
	model_cuda_softmax_xent_backward(d_logits, d_probs, d_labels, N, C, 0.25f);
	expect_close("softmax xent backward", dlogits, d_logits, N * C);
	model_cuda_close(ctx);
	return failures ? 1 : 0;
}
