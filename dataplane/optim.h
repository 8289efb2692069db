/* optim.h: SGD with momentum and AdamW over one rank's flat parameter slice. Updates are
 * elementwise, so a rank updating its slice gives the same numbers as one process updating
 * the full tensors. Weight decay applies to matrices only (model_param.decay). Gradient
 * reduction and clipping happen before (trainer.c); this file only steps. */
#ifndef YARD_OPTIM_H
#define YARD_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "dataplane/model.h"

enum optim_kind { OPTIM_SGD, OPTIM_ADAMW };

struct optim_config {
	enum optim_kind kind;
	double lr;
	double momentum;          /* sgd */
	double beta1, beta2, eps; /* adamw */
	double weight_decay;      /* sgd: L2 added to the gradient; adamw: decoupled */
};

struct optim {
	struct optim_config cfg;
	size_t numel;
	int64_t t; /* steps taken (AdamW bias correction) */
	float *m;  /* (numel) sgd momentum buffer or adam first moment, owned */
	float *v;  /* (numel) adam second moment, owned; NULL for sgd */
};

int optim_init(struct optim *o, const struct optim_config *cfg, size_t numel, struct yard_err *err);
void optim_free(struct optim *o);
/* One update of every parameter of mdl from its gradient times grad_scale (the clip factor). */
void optim_step(struct optim *o, struct model *mdl, float grad_scale);
/* Number of state floats per parameter (1 sgd, 2 adamw) for checkpoints. */
int optim_state_slots(const struct optim *o);

#endif
