/* model.h: the built-in trainer's model, a residual MLP classifier, as the slice one rank holds.
 *
 *   x (n, d_in) -> input projection (d_in -> d) -> L x block -> head (d -> classes) -> softmax CE
 *   block: y = x + W2 gelu(W1 layernorm(x) + b1) + b2          (pre-norm residual MLP)
 *
 * Parallel layout of one rank (DESIGN.md §6, Megatron):
 *  - pipeline: the L blocks are cut into p*v contiguous "virtual stages"; this rank holds the
 *    chunks c = 0..v-1 whose virtual stage is c*p + pp_i. Virtual stage 0 also holds the input
 *    projection, the last one the head.
 *  - tensor: W1 (f, d) is split by rows (column-parallel linear), b1 with it, W2 (d, f) by
 *    columns (row-parallel linear); the block's output and the layernorm input gradient are
 *    allreduced over the TP group through a callback. Layernorm, b2, input projection and head
 *    are replicated across TP.
 * Parameters are initialised as FULL tensors from a counter-based generator indexed by
 * (seed, tensor id, element), and each rank keeps its slice, so every layout starts from the
 * same model.
 *
 * Layer functions (model_layers.c) are llm.c style: one *_forward and one *_backward per layer
 * on plain float arrays, shapes next to every buffer. This file does not communicate, schedule
 * or own optimiser state; see trainer.h.
 */
#ifndef YARD_MODEL_H
#define YARD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct model_config {
	int d_in, d_model, d_ff, layers, classes;
	uint64_t seed;
};

struct model_layout {
	int tp, tp_i; /* tensor-parallel size and this rank's index */
	int pp, pp_i; /* pipeline stages (devices) and this rank's stage */
	int v;        /* model chunks per device (interleaved 1F1B), 1 otherwise */
};

enum model_shard { MODEL_REPLICATED, MODEL_SHARD_ROWS, MODEL_SHARD_COLS };

/* One parameter tensor as held by this rank: a slice of a full (full_rows, full_cols) tensor. */
struct model_param {
	char name[48];      /* "block3.w1" */
	uint32_t tensor_id; /* stable id of the full tensor (init stream, checkpoint table) */
	int rows, cols;     /* local shape (vectors: cols = 1) */
	int full_rows, full_cols;
	enum model_shard shard;
	int row0, col0;       /* where the local slice starts in the full tensor */
	int decay;            /* 1 for matrices: weight decay applies */
	int chunk;            /* local chunk that owns it */
	size_t offset, numel; /* into the rank's flat parameter / gradient arrays */
	float *data, *grad;
};

struct model_block {
	int index;                       /* global block number */
	struct model_param *ln_g, *ln_b; /* (d) */
	struct model_param *w1, *b1;     /* (fl, d), (fl) */
	struct model_param *w2, *b2;     /* (d, fl), (d) */
};

struct model_chunk {
	int vstage; /* global virtual stage = chunk * pp + pp_i */
	int has_input, has_head;
	int nblocks;
	struct model_block *blocks;          /* nblocks, in forward order */
	struct model_param *in_w, *in_b;     /* (d, d_in), (d) when has_input */
	struct model_param *head_w, *head_b; /* (classes, d), (classes) when has_head */
};

struct model {
	struct model_config cfg;
	struct model_layout lay;
	int fl; /* local hidden width d_ff / tp */
	int nchunks;
	struct model_chunk *chunks;
	int nparams;
	struct model_param *params; /* laid out in reverse forward order (backward order) */
	size_t numel;               /* total local parameters */
	float *data, *grad;         /* (numel) each, owned */
	float *scratch;             /* backward temporaries, owned, grown on demand */
	size_t scratch_len;
};

/* Activations of one micro-batch through one chunk, kept from its forward to its backward. */
struct model_acts {
	int n;                      /* rows (samples) */
	size_t bytes;               /* size of the allocation, for peak-memory accounting */
	float *x_in;                /* (n, d_in) input chunk only */
	int32_t *labels;            /* (n) head chunk only */
	float **resid;              /* nblocks+1 of (n, d): residual stream at block boundaries */
	float **ln_out;             /* nblocks of (n, d) */
	float **ln_mean, **ln_rstd; /* nblocks of (n) */
	float **h, **g;             /* nblocks of (n, fl): pre-activation and GELU output */
	float *probs;               /* (n, classes) head chunk only */
};

/* Sums buf over the tensor-parallel group in place. */
typedef int (*model_allreduce_fn)(void *ctx, float *buf, size_t count);
/* Called during backward when a parameter's gradient for this micro-batch is complete. */
typedef void (*model_grad_ready_fn)(void *ctx, const struct model_param *p);

/* Counter-based random numbers: splitmix64 of (seed, stream, index). */
uint64_t model_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
double model_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index); /* [0, 1) */
double model_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* Validates cfg against lay (divisibility of d_ff by tp, enough blocks) and builds this
 * rank's slice, initialised from cfg->seed. err names the offending size. */
int model_init(struct model *m, const struct model_config *cfg, const struct model_layout *lay,
               struct yard_err *err);
void model_free(struct model *m);
void model_zero_grad(struct model *m);

/* Blocks of virtual stage vs out of total: [*first, *first + *count). */
void model_vstage_blocks(int layers, int total_vstages, int vs, int *first, int *count);

/* Allocates activations for n rows through chunk c (owned by the caller; model_acts_free). */
struct model_acts *model_acts_new(const struct model *m, int c, int n);
void model_acts_free(struct model_acts *a);

/* Forward of chunk c. Input chunks read a->x_in, others a->resid[0] (filled by the caller).
 * On return a->resid[nblocks] is the chunk output; head chunks fill a->probs and add to
 * *loss_sum (sum over rows of -log p[label]) and *correct. */
int model_chunk_forward(struct model *m, int c, struct model_acts *a, model_allreduce_fn tp_ar,
                        void *ctx, double *loss_sum, int *correct);
/* Backward of chunk c. dresid (n, d): on entry the gradient of the chunk output (ignored for
 * head chunks, whose gradient comes from the loss scaled by loss_scale = 1/global batch); on
 * return the gradient of the chunk input (undefined for input chunks). Accumulates into the
 * parameter gradients. ready (may be NULL) is told as each parameter's gradient completes. */
int model_chunk_backward(struct model *m, int c, struct model_acts *a, float *dresid,
                         float loss_scale, model_allreduce_fn tp_ar, void *ctx,
                         model_grad_ready_fn ready, void *ready_ctx);

/* Full-tensor value at (row, col) of the tensor with this id, as model_init would set it. */
float model_init_value(const struct model_config *cfg, const struct model_param *p, int row,
                       int col);

/* ---- layers (model_layers.c); out (n, o) = in (n, i) W (o, i)^T + b ---- */
void model_matmul_forward(float *out, const float *in, const float *w, const float *b, int n, int i,
                          int o);
/* din (n, i) = dout W (or NULL); dw (o, i) += dout^T in; db (o) += colsum dout (or NULL). */
void model_matmul_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int n, int i, int o);
void model_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                             const float *gamma, const float *beta, int n, int d);
/* din (n, d) = gradient of the layernorm input (overwritten); dgamma, dbeta (d) +=. */
void model_layernorm_backward(float *din, float *dgamma, float *dbeta, const float *dout,
                              const float *in, const float *mean, const float *rstd,
                              const float *gamma, int n, int d);
void model_gelu_forward(float *out, const float *in, size_t count);
/* din = dout * gelu'(in); din may alias dout. */
void model_gelu_backward(float *din, const float *in, const float *dout, size_t count);
/* probs (n, C) = softmax(logits) (may alias); returns sum of -log probs[label] in double and
 * adds the number of rows whose argmax equals the label to *correct. */
double model_softmax_xent_forward(float *probs, const float *logits, const int32_t *labels, int n,
                                  int classes, int *correct);
/* dlogits (n, C) = (probs - onehot(label)) * scale. */
void model_softmax_xent_backward(float *dlogits, const float *probs, const int32_t *labels, int n,
                                 int classes, float scale);

#endif
