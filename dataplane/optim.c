/* optim.c: SGD with momentum (PyTorch semantics) and AdamW (Loshchilov & Hutter) on flat
 * float arrays; see optim.h. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/optim.h"

int optim_init(struct optim *o, const struct optim_config *cfg, size_t numel, struct yard_err *err)
{
	memset(o, 0, sizeof *o);
	o->cfg = *cfg;
	o->numel = numel;
	o->m = calloc(numel ? numel : 1, sizeof(float));
	if (cfg->kind == OPTIM_ADAMW)
		o->v = calloc(numel ? numel : 1, sizeof(float));
	if (!o->m || (cfg->kind == OPTIM_ADAMW && !o->v)) {
		optim_free(o);
		return yard_err_set(err, YARD_ENOMEM, "optimiser: out of memory for %zu parameters",
		                    numel);
	}
	return 0;
}

void optim_free(struct optim *o)
{
	free(o->m);
	free(o->v);
	memset(o, 0, sizeof *o);
}

int optim_state_slots(const struct optim *o)
{
	return o->cfg.kind == OPTIM_ADAMW ? 2 : 1;
}

static void sgd_param(struct optim *o, const struct model_param *p, float scale)
{
	const float lr = (float)o->cfg.lr, mu = (float)o->cfg.momentum;
	const float wd = p->decay ? (float)o->cfg.weight_decay : 0.0f;
	float *buf = o->m + p->offset;
	for (size_t k = 0; k < p->numel; k++) {
		float g = p->grad[k] * scale + wd * p->data[k];
		buf[k] = mu * buf[k] + g;
		p->data[k] -= lr * buf[k];
	}
}

static void adamw_param(struct optim *o, const struct model_param *p, float scale)
{
	const float lr = (float)o->cfg.lr, b1 = (float)o->cfg.beta1, b2 = (float)o->cfg.beta2;
	const float eps = (float)o->cfg.eps;
	const float wd = p->decay ? (float)o->cfg.weight_decay : 0.0f;
	const float c1 = (float)(1.0 - pow(o->cfg.beta1, (double)o->t));
	const float c2 = (float)(1.0 - pow(o->cfg.beta2, (double)o->t));
	float *m1 = o->m + p->offset, *m2 = o->v + p->offset;
	for (size_t k = 0; k < p->numel; k++) {
		float g = p->grad[k] * scale;
		m1[k] = b1 * m1[k] + (1.0f - b1) * g;
		m2[k] = b2 * m2[k] + (1.0f - b2) * g * g;
		float mhat = m1[k] / c1, vhat = m2[k] / c2;
		p->data[k] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p->data[k]);
	}
}

void optim_step(struct optim *o, struct model *mdl, float grad_scale)
{
	o->t++;
	for (int i = 0; i < mdl->nparams; i++) {
		if (o->cfg.kind == OPTIM_ADAMW)
			adamw_param(o, &mdl->params[i], grad_scale);
		else
			sgd_param(o, &mdl->params[i], grad_scale);
	}
}
