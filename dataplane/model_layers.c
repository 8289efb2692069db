/* model_layers.c: the CPU forward and backward of every layer of the residual MLP, on plain
 * float arrays (llm.c style). Matmuls go through OpenBLAS cblas_sgemm when configure found it,
 * plain loops otherwise. No allocation, no communication; shapes are stated per function in
 * model.h. Reductions that decide the loss (softmax cross-entropy) are done in double. */
#include "config.h"

#include <math.h>
#include <string.h>

#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "dataplane/model.h"

void model_matmul_forward(float *out, const float *in, const float *w, const float *b, int n, int i,
                          int o)
{
#ifdef HAVE_OPENBLAS
	/* out (n, o) = in (n, i) . w (o, i)^T */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o, i, 1.0f, in, i, w, i, 0.0f, out,
	            o);
#else
	for (int r = 0; r < n; r++)
		for (int k = 0; k < o; k++) {
			float acc = 0.0f;
			for (int j = 0; j < i; j++)
				acc += in[(size_t)r * i + j] * w[(size_t)k * i + j];
			out[(size_t)r * o + k] = acc;
		}
#endif
	if (b)
		for (int r = 0; r < n; r++)
			for (int k = 0; k < o; k++)
				out[(size_t)r * o + k] += b[k];
}

void model_matmul_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int n, int i, int o)
{
#ifdef HAVE_OPENBLAS
	/* din (n, i) = dout (n, o) . w (o, i) */
	if (din)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, i, o, 1.0f, dout, o, w, i,
		            0.0f, din, i);
	/* dw (o, i) += dout^T (o, n) . in (n, i) */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o, i, n, 1.0f, dout, o, in, i, 1.0f,
	            dw, i);
#else
	if (din)
		for (int r = 0; r < n; r++)
			for (int j = 0; j < i; j++) {
				float acc = 0.0f;
				for (int k = 0; k < o; k++)
					acc += dout[(size_t)r * o + k] * w[(size_t)k * i + j];
				din[(size_t)r * i + j] = acc;
			}
	for (int k = 0; k < o; k++)
		for (int j = 0; j < i; j++) {
			float acc = 0.0f;
			for (int r = 0; r < n; r++)
				acc += dout[(size_t)r * o + k] * in[(size_t)r * i + j];
			dw[(size_t)k * i + j] += acc;
		}
#endif
	if (db)
		for (int k = 0; k < o; k++) {
			float acc = 0.0f;
			for (int r = 0; r < n; r++)
				acc += dout[(size_t)r * o + k];
			db[k] += acc;
		}
}

void model_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                             const float *gamma, const float *beta, int n, int d)
{
	const float eps = 1e-5f;
	for (int r = 0; r < n; r++) {
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
		float rs = (float)(1.0 / sqrt(var / d + eps));
		for (int j = 0; j < d; j++)
			y[j] = (x[j] - mu) * rs * gamma[j] + beta[j];
		mean[r] = mu;
		rstd[r] = rs;
	}
}

void model_layernorm_backward(float *din, float *dgamma, float *dbeta, const float *dout,
                              const float *in, const float *mean, const float *rstd,
                              const float *gamma, int n, int d)
{
	for (int r = 0; r < n; r++) {
		const float *x = in + (size_t)r * d;
		const float *dy = dout + (size_t)r * d;
		float *dx = din + (size_t)r * d;
		float mu = mean[r], rs = rstd[r];
		/* xhat = (x - mu) * rs; dxhat = dy * gamma;
		 * dx = rs * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
		double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
		for (int j = 0; j < d; j++) {
			float xhat = (x[j] - mu) * rs;
			float dxhat = dy[j] * gamma[j];
			sum_dxhat += dxhat;
			sum_dxhat_xhat += (double)dxhat * xhat;
			dgamma[j] += dy[j] * xhat;
			dbeta[j] += dy[j];
		}
		float m1 = (float)(sum_dxhat / d), m2 = (float)(sum_dxhat_xhat / d);
		for (int j = 0; j < d; j++) {
			float xhat = (x[j] - mu) * rs;
			float dxhat = dy[j] * gamma[j];
			dx[j] = rs * (dxhat - m1 - xhat * m2);
		}
	}
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */

void model_gelu_forward(float *out, const float *in, size_t count)
{
	for (size_t k = 0; k < count; k++) {
		float x = in[k];
		float cube = 0.044715f * x * x * x;
		out[k] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
	}
}

void model_gelu_backward(float *din, const float *in, const float *dout, size_t count)
{
	for (size_t k = 0; k < count; k++) {
		float x = in[k];
		float cube = 0.044715f * x * x * x;
		float t = tanhf(GELU_SCALE * (x + cube));
		float sech2 = 1.0f - t * t;
		float grad = 0.5f * (1.0f + t) +
		             0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
		din[k] = dout[k] * grad;
	}
}

double model_softmax_xent_forward(float *probs, const float *logits, const int32_t *labels, int n,
                                  int classes, int *correct)
{
	double loss = 0.0;
	for (int r = 0; r < n; r++) {
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
		loss += logsum - z[labels[r]];
		for (int k = 0; k < classes; k++)
			p[k] = (float)exp((double)z[k] - logsum);
		if (argmax == labels[r])
			(*correct)++;
	}
	return loss;
}

void model_softmax_xent_backward(float *dlogits, const float *probs, const int32_t *labels, int n,
                                 int classes, float scale)
{
	for (int r = 0; r < n; r++)
		for (int k = 0; k < classes; k++) {
			size_t at = (size_t)r * classes + k;
			float onehot = k == labels[r] ? 1.0f : 0.0f;
			dlogits[at] = (probs[at] - onehot) * scale;
		}
}
