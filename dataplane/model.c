/* model.c: builds one rank's slice of the residual MLP (which chunks, which parameter slices),
 * initialises it from the seed as full tensors, and runs a chunk's forward and backward out of
 * the layers in model_layers.c. Communication is a callback (the TP allreduce); scheduling,
 * optimiser state and data live elsewhere (trainer.c, optim.c, data.c). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/model.h"

enum {
	TENSOR_IN_W = 1,
	TENSOR_IN_B = 2,
	TENSOR_HEAD_W = 3,
	TENSOR_HEAD_B = 4,
	TENSOR_BLOCK_BASE = 100, /* + 8 * block + kind */
};
enum { BLOCK_LN_G, BLOCK_LN_B, BLOCK_W1, BLOCK_B1, BLOCK_W2, BLOCK_B2 };

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t model_rng_u64(uint64_t seed, uint64_t stream, uint64_t index)
{
	return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

double model_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
	return (double)(model_rng_u64(seed, stream, index) >> 11) * 0x1.0p-53;
}

double model_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
	/* Box-Muller from two independent counters of the same element. */
	double u1 = model_rng_uniform(seed, stream, 2 * index);
	double u2 = model_rng_uniform(seed, stream, 2 * index + 1);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

float model_init_value(const struct model_config *cfg, const struct model_param *p, int row,
                       int col)
{
	uint32_t id = p->tensor_id;
	uint64_t index = (uint64_t)row * p->full_cols + col;
	double std;
	if (id == TENSOR_IN_W)
		std = 1.0 / sqrt(cfg->d_in);
	else if (id == TENSOR_HEAD_W)
		std = 1.0 / sqrt(cfg->d_model);
	else if (id >= TENSOR_BLOCK_BASE && (id - TENSOR_BLOCK_BASE) % 8 == BLOCK_W1)
		std = 1.0 / sqrt(cfg->d_model);
	else if (id >= TENSOR_BLOCK_BASE && (id - TENSOR_BLOCK_BASE) % 8 == BLOCK_W2)
		std =
		    1.0 / sqrt(cfg->d_ff) / sqrt(2.0 * cfg->layers); /* keeps the stream's scale */
	else if (id >= TENSOR_BLOCK_BASE && (id - TENSOR_BLOCK_BASE) % 8 == BLOCK_LN_G)
		return 1.0f;
	else
		return 0.0f; /* biases, layernorm beta */
	return (float)(std * model_rng_normal(cfg->seed, id, index));
}

void model_vstage_blocks(int layers, int total_vstages, int vs, int *first, int *count)
{
	int lo = (int)((long)vs * layers / total_vstages);
	int hi = (int)((long)(vs + 1) * layers / total_vstages);
	*first = lo;
	*count = hi - lo;
}

/* Parameters are counted in a first pass (add == NULL) and filled in a second. */
struct param_builder {
	struct model *m;
	int count;
	size_t numel;
};

static struct model_param *param_add(struct param_builder *b, const char *name, uint32_t id,
                                     int full_rows, int full_cols, enum model_shard shard,
                                     int decay, int chunk)
{
	const struct model_layout *lay = &b->m->lay;
	int rows = full_rows, cols = full_cols, row0 = 0, col0 = 0;
	if (shard == MODEL_SHARD_ROWS) {
		rows = full_rows / lay->tp;
		row0 = lay->tp_i * rows;
	} else if (shard == MODEL_SHARD_COLS) {
		cols = full_cols / lay->tp;
		col0 = lay->tp_i * cols;
	}
	struct model_param *p = NULL;
	if (b->m->params) {
		p = &b->m->params[b->count];
		snprintf(p->name, sizeof p->name, "%s", name);
		p->tensor_id = id;
		p->rows = rows;
		p->cols = cols;
		p->full_rows = full_rows;
		p->full_cols = full_cols;
		p->shard = shard;
		p->row0 = row0;
		p->col0 = col0;
		p->decay = decay;
		p->chunk = chunk;
		p->offset = b->numel;
		p->numel = (size_t)rows * cols;
	}
	b->count++;
	b->numel += (size_t)rows * cols;
	return p;
}

/* Adds every parameter in backward order: chunks last to first, head, blocks last to first,
 * input projection, so gradient buckets fill front to back during backward. */
static void params_build(struct param_builder *b)
{
	struct model *m = b->m;
	const struct model_config *cfg = &m->cfg;
	int d = cfg->d_model, f = cfg->d_ff;
	char name[48];
	for (int c = m->nchunks - 1; c >= 0; c--) {
		struct model_chunk *ch = &m->chunks[c];
		if (ch->has_head) {
			ch->head_b = param_add(b, "head.b", TENSOR_HEAD_B, cfg->classes, 1,
			                       MODEL_REPLICATED, 0, c);
			ch->head_w = param_add(b, "head.w", TENSOR_HEAD_W, cfg->classes, d,
			                       MODEL_REPLICATED, 1, c);
		}
		for (int k = ch->nblocks - 1; k >= 0; k--) {
			struct model_block *blk = &ch->blocks[k];
			uint32_t base = TENSOR_BLOCK_BASE + 8 * (uint32_t)blk->index;
#define BLOCK_PARAM(field, suffix, kind, r, cl, shard, decay)                                      \
	snprintf(name, sizeof name, "block%d." suffix, blk->index);                                \
	blk->field = param_add(b, name, base + kind, r, cl, shard, decay, c)
			BLOCK_PARAM(b2, "b2", BLOCK_B2, d, 1, MODEL_REPLICATED, 0);
			BLOCK_PARAM(w2, "w2", BLOCK_W2, d, f, MODEL_SHARD_COLS, 1);
			BLOCK_PARAM(b1, "b1", BLOCK_B1, f, 1, MODEL_SHARD_ROWS, 0);
			BLOCK_PARAM(w1, "w1", BLOCK_W1, f, d, MODEL_SHARD_ROWS, 1);
			BLOCK_PARAM(ln_b, "ln.b", BLOCK_LN_B, d, 1, MODEL_REPLICATED, 0);
			BLOCK_PARAM(ln_g, "ln.g", BLOCK_LN_G, d, 1, MODEL_REPLICATED, 0);
#undef BLOCK_PARAM
		}
		if (ch->has_input) {
			ch->in_b = param_add(b, "in.b", TENSOR_IN_B, d, 1, MODEL_REPLICATED, 0, c);
			ch->in_w =
			    param_add(b, "in.w", TENSOR_IN_W, d, cfg->d_in, MODEL_REPLICATED, 1, c);
		}
	}
}

int model_init(struct model *m, const struct model_config *cfg, const struct model_layout *lay,
               struct yard_err *err)
{
	memset(m, 0, sizeof *m);
	if (cfg->d_in < 1 || cfg->d_model < 1 || cfg->d_ff < 1 || cfg->layers < 1 ||
	    cfg->classes < 2)
		return yard_err_set(err, YARD_EINVAL,
		                    "model: sizes must be positive and classes >= 2 (d_in %d, "
		                    "d_model %d, d_ff %d, layers %d, classes %d)",
		                    cfg->d_in, cfg->d_model, cfg->d_ff, cfg->layers, cfg->classes);
	if (lay->tp < 1 || lay->pp < 1 || lay->v < 1 || lay->tp_i < 0 || lay->tp_i >= lay->tp ||
	    lay->pp_i < 0 || lay->pp_i >= lay->pp)
		return yard_err_set(err, YARD_EINVAL, "model: bad layout tp %d/%d pp %d/%d v %d",
		                    lay->tp_i, lay->tp, lay->pp_i, lay->pp, lay->v);
	if (cfg->d_ff % lay->tp != 0)
		return yard_err_set(err, YARD_EINVAL,
		                    "parallel.tp: %d does not divide model.d_ff (%d)", lay->tp,
		                    cfg->d_ff);
	if (cfg->layers < lay->pp * lay->v)
		return yard_err_set(err, YARD_EINVAL,
		                    "model.layers: %d blocks cannot fill %d pipeline stages x %d "
		                    "virtual stages",
		                    cfg->layers, lay->pp, lay->v);
	m->cfg = *cfg;
	m->lay = *lay;
	m->fl = cfg->d_ff / lay->tp;
	m->nchunks = lay->v;
	m->chunks = calloc((size_t)m->nchunks, sizeof *m->chunks);
	if (!m->chunks)
		return yard_err_set(err, YARD_ENOMEM, "model: out of memory");
	int total = lay->pp * lay->v;
	for (int c = 0; c < m->nchunks; c++) {
		struct model_chunk *ch = &m->chunks[c];
		int first;
		ch->vstage = c * lay->pp + lay->pp_i;
		ch->has_input = ch->vstage == 0;
		ch->has_head = ch->vstage == total - 1;
		model_vstage_blocks(cfg->layers, total, ch->vstage, &first, &ch->nblocks);
		ch->blocks = calloc((size_t)ch->nblocks, sizeof *ch->blocks);
		if (!ch->blocks) {
			model_free(m);
			return yard_err_set(err, YARD_ENOMEM, "model: out of memory");
		}
		for (int k = 0; k < ch->nblocks; k++)
			ch->blocks[k].index = first + k;
	}
	struct param_builder b = {.m = m};
	params_build(&b);
	m->nparams = b.count;
	m->params = calloc((size_t)b.count, sizeof *m->params);
	m->numel = b.numel;
	m->data = calloc(b.numel ? b.numel : 1, sizeof(float));
	m->grad = calloc(b.numel ? b.numel : 1, sizeof(float));
	if (!m->params || !m->data || !m->grad) {
		model_free(m);
		return yard_err_set(err, YARD_ENOMEM, "model: out of memory for %zu parameters",
		                    b.numel);
	}
	b.count = 0;
	b.numel = 0;
	params_build(&b);
	for (int i = 0; i < m->nparams; i++) {
		struct model_param *p = &m->params[i];
		p->data = m->data + p->offset;
		p->grad = m->grad + p->offset;
		for (int r = 0; r < p->rows; r++)
			for (int col = 0; col < p->cols; col++)
				p->data[(size_t)r * p->cols + col] =
				    model_init_value(cfg, p, p->row0 + r, p->col0 + col);
	}
	return 0;
}

void model_free(struct model *m)
{
	if (m->chunks)
		for (int c = 0; c < m->nchunks; c++)
			free(m->chunks[c].blocks);
	free(m->chunks);
	free(m->params);
	free(m->data);
	free(m->grad);
	free(m->scratch);
	memset(m, 0, sizeof *m);
}

void model_zero_grad(struct model *m)
{
	memset(m->grad, 0, m->numel * sizeof(float));
}

struct model_acts *model_acts_new(const struct model *m, int c, int n)
{
	const struct model_chunk *ch = &m->chunks[c];
	int d = m->cfg.d_model, nb = ch->nblocks;
	size_t nd = (size_t)n * d, nf = (size_t)n * m->fl;
	size_t floats = (size_t)(nb + 1) * nd + (size_t)nb * (nd + 2 * (size_t)n + 2 * nf);
	if (ch->has_input)
		floats += (size_t)n * m->cfg.d_in;
	if (ch->has_head)
		floats += (size_t)n * m->cfg.classes + (size_t)n; /* probs, labels */
	struct model_acts *a = calloc(1, sizeof *a);
	float **tables = calloc((size_t)(nb + 1) + 5 * (size_t)(nb ? nb : 1), sizeof(float *));
	float *buf = malloc(floats * sizeof(float));
	if (!a || !tables || !buf) {
		free(a);
		free(tables);
		free(buf);
		return NULL;
	}
	a->n = n;
	a->bytes = floats * sizeof(float);
	a->resid = tables;
	a->ln_out = tables + nb + 1;
	a->ln_mean = a->ln_out + nb;
	a->ln_rstd = a->ln_mean + nb;
	a->h = a->ln_rstd + nb;
	a->g = a->h + nb;
	float *at = buf;
	for (int k = 0; k <= nb; k++, at += nd)
		a->resid[k] = at;
	for (int k = 0; k < nb; k++) {
		a->ln_out[k] = at;
		at += nd;
		a->ln_mean[k] = at;
		at += n;
		a->ln_rstd[k] = at;
		at += n;
		a->h[k] = at;
		at += nf;
		a->g[k] = at;
		at += nf;
	}
	if (ch->has_input) {
		a->x_in = at;
		at += (size_t)n * m->cfg.d_in;
	}
	if (ch->has_head) {
		a->probs = at;
		at += (size_t)n * m->cfg.classes;
		a->labels = (int32_t *)at; /* int32 and float have the same size and alignment */
	}
	return a;
}

void model_acts_free(struct model_acts *a)
{
	if (!a)
		return;
	free(a->resid[0]);
	free(a->resid);
	free(a);
}

int model_chunk_forward(struct model *m, int c, struct model_acts *a, model_allreduce_fn tp_ar,
                        void *ctx, double *loss_sum, int *correct)
{
	const struct model_chunk *ch = &m->chunks[c];
	int n = a->n, d = m->cfg.d_model, fl = m->fl;
	size_t nd = (size_t)n * d;
	if (ch->has_input)
		model_matmul_forward(a->resid[0], a->x_in, ch->in_w->data, ch->in_b->data, n,
		                     m->cfg.d_in, d);
	for (int k = 0; k < ch->nblocks; k++) {
		const struct model_block *blk = &ch->blocks[k];
		float *x = a->resid[k], *y = a->resid[k + 1];
		model_layernorm_forward(a->ln_out[k], a->ln_mean[k], a->ln_rstd[k], x,
		                        blk->ln_g->data, blk->ln_b->data, n, d);
		model_matmul_forward(a->h[k], a->ln_out[k], blk->w1->data, blk->b1->data, n, d, fl);
		model_gelu_forward(a->g[k], a->h[k], (size_t)n * fl);
		model_matmul_forward(y, a->g[k], blk->w2->data, NULL, n, fl, d);
		if (m->lay.tp > 1) {
			int rc = tp_ar(ctx, y, nd);
			if (rc)
				return rc;
		}
		const float *b2 = blk->b2->data;
		for (size_t at = 0; at < nd; at++)
			y[at] += x[at] + b2[at % d];
	}
	if (ch->has_head) {
		model_matmul_forward(a->probs, a->resid[ch->nblocks], ch->head_w->data,
		                     ch->head_b->data, n, d, m->cfg.classes);
		*loss_sum += model_softmax_xent_forward(a->probs, a->probs, a->labels, n,
		                                        m->cfg.classes, correct);
	}
	return 0;
}

static float *scratch_get(struct model *m, size_t floats)
{
	if (m->scratch_len < floats) {
		float *grown = realloc(m->scratch, floats * sizeof(float));
		if (!grown)
			return NULL;
		m->scratch = grown;
		m->scratch_len = floats;
	}
	return m->scratch;
}

static void ready_call(model_grad_ready_fn ready, void *ctx, const struct model_param *p)
{
	if (ready)
		ready(ctx, p);
}

int model_chunk_backward(struct model *m, int c, struct model_acts *a, float *dresid,
                         float loss_scale, model_allreduce_fn tp_ar, void *ctx,
                         model_grad_ready_fn ready, void *ready_ctx)
{
	const struct model_chunk *ch = &m->chunks[c];
	int n = a->n, d = m->cfg.d_model, fl = m->fl, classes = m->cfg.classes;
	size_t nd = (size_t)n * d, nf = (size_t)n * fl, nc = (size_t)n * classes;
	float *scratch = scratch_get(m, nc + nf + 2 * nd);
	if (!scratch)
		return YARD_ENOMEM;
	float *dlogits = scratch; /* (n, classes) */
	float *dg = dlogits + nc; /* (n, fl) */
	float *dln = dg + nf;     /* (n, d) */
	float *dx = dln + nd;     /* (n, d) */
	if (ch->has_head) {
		model_softmax_xent_backward(dlogits, a->probs, a->labels, n, classes, loss_scale);
		model_matmul_backward(dresid, ch->head_w->grad, ch->head_b->grad, dlogits,
		                      a->resid[ch->nblocks], ch->head_w->data, n, d, classes);
		ready_call(ready, ready_ctx, ch->head_b);
		ready_call(ready, ready_ctx, ch->head_w);
	}
	for (int k = ch->nblocks - 1; k >= 0; k--) {
		const struct model_block *blk = &ch->blocks[k];
		model_matmul_backward(dg, blk->w2->grad, blk->b2->grad, dresid, a->g[k],
		                      blk->w2->data, n, fl, d);
		ready_call(ready, ready_ctx, blk->b2);
		ready_call(ready, ready_ctx, blk->w2);
		model_gelu_backward(dg, a->h[k], dg, nf);
		model_matmul_backward(dln, blk->w1->grad, blk->b1->grad, dg, a->ln_out[k],
		                      blk->w1->data, n, d, fl);
		ready_call(ready, ready_ctx, blk->b1);
		ready_call(ready, ready_ctx, blk->w1);
		if (m->lay.tp > 1) {
			int rc = tp_ar(ctx, dln, nd);
			if (rc)
				return rc;
		}
		model_layernorm_backward(dx, blk->ln_g->grad, blk->ln_b->grad, dln, a->resid[k],
		                         a->ln_mean[k], a->ln_rstd[k], blk->ln_g->data, n, d);
		ready_call(ready, ready_ctx, blk->ln_b);
		ready_call(ready, ready_ctx, blk->ln_g);
		for (size_t at = 0; at < nd; at++)
			dresid[at] += dx[at];
	}
	if (ch->has_input) {
		model_matmul_backward(NULL, ch->in_w->grad, ch->in_b->grad, dresid, a->x_in,
		                      ch->in_w->data, n, m->cfg.d_in, d);
		ready_call(ready, ready_ctx, ch->in_b);
		ready_call(ready, ready_ctx, ch->in_w);
	}
	return 0;
}
