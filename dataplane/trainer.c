/* trainer.c: executes one rank's training step (trainer.h): walks the stage's instruction list,
 * moves activations and gradients between pipeline stages, starts data-parallel buckets as soon
 * as backward finishes their gradients, then reduces loss and gradient norm, clips and steps.
 * Checkpoint save/restore of the rank's shard is in trainer_ckpt.c. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "common/common.h"
#include "dataplane/trainer.h"

/* what a rank asking for a checkpoint adds to the loss allreduce's count of rows (trainer_step) */
#define CHECKPOINT_ASK 4294967296.0

void trainer_blas_single_threaded(char **argv)
{
#ifdef HAVE_OPENBLAS
	char self[4096];
	if (getenv("OPENBLAS_NUM_THREADS") != NULL)
		return; /* the user's choice stands */
	/* the binary's own path, not /proc/self/exe: the process keeps its name (ps, pgrep) */
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0 || (size_t)n >= sizeof self - 1 || setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
		return;
	self[n] = '\0';
	execv(self, argv);
	fprintf(stderr, "%s: cannot run %s again with OPENBLAS_NUM_THREADS=1 (%s); going on\n",
	        argv[0], self, strerror(errno));
#else
	(void)argv;
#endif
}

static double ms_since(uint64_t t0_ns)
{
	return (double)(yard_now_mono_ns() - t0_ns) / 1e6;
}

enum sched_kind trainer_sched_kind(enum jobspec_schedule s)
{
	switch (s) {
	case JOBSPEC_GPIPE:
		return SCHED_GPIPE;
	case JOBSPEC_INTERLEAVED:
		return SCHED_INTERLEAVED;
	default:
		return SCHED_1F1B;
	}
}

static int buckets_build(struct trainer *t, struct yard_err *err)
{
	struct model *m = &t->model;
	t->param_bucket = calloc((size_t)m->nparams, sizeof(int));
	t->buckets = calloc((size_t)m->nparams, sizeof *t->buckets);
	if (!t->param_bucket || !t->buckets)
		return yard_err_set(err, YARD_ENOMEM, "trainer: out of memory");
	size_t limit = (size_t)(t->train.bucket_mb * 1024 * 1024 / sizeof(float));
	if (limit < 1)
		limit = 1;
	int b = -1;
	for (int i = 0; i < m->nparams; i++) {
		const struct model_param *p = &m->params[i];
		if (b < 0 || t->buckets[b].numel >= limit) {
			b++;
			t->buckets[b].offset = p->offset;
		}
		t->buckets[b].numel += p->numel;
		t->param_bucket[i] = b;
	}
	t->nbuckets = b + 1;
	return 0;
}

int trainer_init(struct trainer *t, const struct jobspec *spec, int rank, const char *job_id,
                 struct trainer_net *net, struct yard_err *err)
{
	memset(t, 0, sizeof *t);
	t->model_spec = spec->model;
	t->train = spec->train;
	t->par = spec->parallel;
	snprintf(t->job_id, sizeof t->job_id, "%s", job_id ? job_id : spec->name);
	t->net = net;
	t->rank = rank;
	t->world = t->par.dp * t->par.tp * t->par.pp;
	if (t->par.dp < 1 || t->par.tp < 1 || t->par.pp < 1)
		return yard_err_set(err, YARD_EINVAL, "parallel: dp %d tp %d pp %d must be >= 1",
		                    t->par.dp, t->par.tp, t->par.pp);
	if (rank < 0 || rank >= t->world)
		return yard_err_set(err, YARD_EINVAL, "rank %d outside 0..%d", rank, t->world - 1);
	jobspec_coords(&t->par, rank, &t->dp_i, &t->pp_i, &t->tp_i);
	int v = t->par.schedule == JOBSPEC_INTERLEAVED ? t->par.virtual_stages : 1;
	if (v < 1)
		v = 1;
	t->par.virtual_stages = v;
	int m = t->par.micro_batches;
	if (m < 1)
		return yard_err_set(err, YARD_EINVAL, "parallel.micro_batches: %d, need >= 1", m);
	if (t->train.batch_size < 1 || t->train.batch_size % (t->par.dp * m) != 0)
		return yard_err_set(
		    err, YARD_EINVAL,
		    "train.batch_size: %d is not divisible by dp %d x micro_batches "
		    "%d",
		    t->train.batch_size, t->par.dp, m);
	t->rows_per_micro = t->train.batch_size / (t->par.dp * m);
	if (spec->debug.slow_rank == rank && spec->debug.slow_factor > 1.0)
		t->slow_factor = spec->debug.slow_factor;
	t->block_forward_ms = spec->debug.block_ms;
	t->block_backward_ms = 2 * spec->debug.block_ms;

	int rc = sched_build(trainer_sched_kind(t->par.schedule), t->par.pp, v, m, t->pp_i,
	                     &t->program, err);
	if (rc)
		return rc;
	struct model_config mc = {.d_in = spec->model.d_in,
	                          .d_model = spec->model.d_model,
	                          .d_ff = spec->model.d_ff,
	                          .layers = spec->model.layers,
	                          .classes = spec->model.classes,
	                          .seed = spec->model.seed};
	struct model_layout ml = {
	    .tp = t->par.tp, .tp_i = t->tp_i, .pp = t->par.pp, .pp_i = t->pp_i, .v = v};
	if ((rc = model_init(&t->model, &mc, &ml, err)))
		goto fail;
	struct optim_config oc = {.kind = spec->train.optimizer == JOBSPEC_ADAMW ? OPTIM_ADAMW
	                                                                         : OPTIM_SGD,
	                          .lr = spec->train.lr,
	                          .momentum = spec->train.momentum,
	                          .beta1 = spec->train.beta1,
	                          .beta2 = spec->train.beta2,
	                          .eps = spec->train.eps,
	                          .weight_decay = spec->train.weight_decay};
	if ((rc = optim_init(&t->optim, &oc, t->model.numel, err)))
		goto fail;
	if (strcmp(spec->train.dataset, "synthetic") == 0 || spec->train.dataset[0] == '\0')
		rc = data_synthetic(&t->data, spec->train.samples, mc.d_in, mc.classes,
		                    spec->train.data_seed, err);
	else
		rc = data_load_file(&t->data, spec->train.dataset, spec->train.data_seed, err);
	if (rc)
		goto fail;
	if (t->data.d_in != mc.d_in || t->data.classes != mc.classes) {
		rc = yard_err_set(err, YARD_EMISMATCH,
		                  "train.dataset: %s has %d features and %d classes, the model has "
		                  "d_in %d and %d classes",
		                  spec->train.dataset, t->data.d_in, t->data.classes, mc.d_in,
		                  mc.classes);
		goto fail;
	}
	size_t units = (size_t)m * v;
	t->acts = calloc(units, sizeof *t->acts);
	t->dresid = calloc(units, sizeof *t->dresid);
	t->sendbuf = calloc(units, sizeof *t->sendbuf);
	t->sends = calloc(2 * units, sizeof *t->sends);
	t->backward_done = calloc((size_t)v, sizeof(int));
	t->xbuf = malloc((size_t)t->rows_per_micro * mc.d_in * sizeof(float));
	t->ybuf = malloc((size_t)t->rows_per_micro * sizeof(int32_t));
	if (!t->acts || !t->dresid || !t->sendbuf || !t->sends || !t->backward_done || !t->xbuf ||
	    !t->ybuf) {
		rc = yard_err_set(err, YARD_ENOMEM, "trainer: out of memory");
		goto fail;
	}
	if ((rc = buckets_build(t, err)))
		goto fail;
#ifdef HAVE_OPENBLAS
	openblas_set_num_threads(1); /* ranks are processes or threads already */
#endif
	return 0;
fail:
	trainer_free(t);
	return rc;
}

static void step_buffers_release(struct trainer *t)
{
	size_t units = (size_t)t->par.micro_batches * t->par.virtual_stages;
	for (size_t k = 0; k < units; k++) {
		model_acts_free(t->acts[k]);
		free(t->dresid[k]);
		free(t->sendbuf[k]);
		t->acts[k] = NULL;
		t->dresid[k] = NULL;
		t->sendbuf[k] = NULL;
	}
}

void trainer_free(struct trainer *t)
{
	if (t->acts)
		step_buffers_release(t);
	free(t->acts);
	free(t->dresid);
	free(t->sendbuf);
	free(t->sends);
	free(t->backward_done);
	free(t->xbuf);
	free(t->ybuf);
	free(t->buckets);
	free(t->param_bucket);
	sched_program_free(&t->program);
	data_free(&t->data);
	optim_free(&t->optim);
	model_free(&t->model);
	memset(t, 0, sizeof *t);
}

static int tp_allreduce(void *ctx, float *buf, size_t count)
{
	struct trainer *t = ctx;
	uint64_t t0 = yard_now_mono_ns();
	int rc = t->net->ops->allreduce(t->net, TRAINER_TP, buf, count, YD_F32);
	t->tp_ms += ms_since(t0);
	return rc;
}

/* Starts ready buckets in index order, so every data-parallel replica issues the same
 * sequence of collectives. */
static int buckets_start_ready(struct trainer *t)
{
	while (t->next_bucket < t->nbuckets && t->buckets[t->next_bucket].pending == 0) {
		struct trainer_bucket *b = &t->buckets[t->next_bucket];
		int rc = t->net->ops->iallreduce(t->net, TRAINER_DP, t->model.grad + b->offset,
		                                 b->numel, YD_F32, &b->req);
		if (rc)
			return rc;
		b->started = 1;
		t->next_bucket++;
	}
	return 0;
}

struct ready_ctx {
	struct trainer *t;
	int last_micro_batch; /* this backward finishes the chunk's gradients */
	int rc;
};

static void grad_ready(void *arg, const struct model_param *p)
{
	struct ready_ctx *rctx = arg;
	struct trainer *t = rctx->t;
	if (!rctx->last_micro_batch || t->par.dp == 1)
		return;
	int idx = (int)(p - t->model.params);
	t->buckets[t->param_bucket[idx]].pending--;
	if (rctx->rc == 0)
		rctx->rc = buckets_start_ready(t);
}

static int tag_of(int grad, int vstage, int mb, int m)
{
	return (grad * 4096 + vstage) * m + mb;
}

static void sleep_ms(double ms)
{
	if (ms <= 0)
		return;
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
	                      .tv_nsec = (long)((ms - 1000.0 * (time_t)(ms / 1000)) * 1e6)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Adds the per-block cost (benchmarks, debug.block_ms) and stretches the compute, block cost
 * included, to slow_factor times its length (straggler hooks). */
static void slow_down(struct trainer *t, const struct model_chunk *ch, int backward,
                      double compute_ms)
{
	double block_ms = ch->nblocks * (backward ? t->block_backward_ms : t->block_forward_ms);
	double stretch = t->slow_factor > 1.0 ? t->slow_factor - 1.0 : 0;
	sleep_ms(block_ms + (compute_ms + block_ms) * stretch);
}

static int net_fail(struct trainer *t, struct yard_err *err, int rc, const char *what,
                    const struct sched_instr *in)
{
	return yard_err_set(err, rc,
	                    "rank %d (dp %d, pp %d, tp %d) step %lld %s(mb %d, chunk %d): %s",
	                    t->rank, t->dp_i, t->pp_i, t->tp_i, (long long)t->step + 1, what,
	                    in ? in->mb : -1, in ? in->chunk : -1, t->net->ops->last_error(t->net));
}

int trainer_step(struct trainer *t, struct trainer_metrics *out, struct yard_err *err)
{
	struct model *m = &t->model;
	const int v = t->par.virtual_stages, mbs = t->par.micro_batches, p = t->par.pp;
	const int n = t->rows_per_micro, d = m->cfg.d_model;
	const size_t nd = (size_t)n * d;
	uint64_t step_t0 = yard_now_mono_ns();
	double compute_ms = 0, bubble_ms = 0, comm_ms = 0, dp_ms = 0;
	double loss_sum = 0;
	int correct = 0, rows_scored = 0, rc = 0;
	const float loss_scale = 1.0f / (float)t->train.batch_size;
	uint64_t step_pos = (uint64_t)t->step * (uint64_t)t->train.batch_size;

	model_zero_grad(m);
	memset(t->backward_done, 0, (size_t)v * sizeof(int));
	for (int b = 0; b < t->nbuckets; b++) {
		t->buckets[b].pending = 0;
		t->buckets[b].started = 0;
		t->buckets[b].req = NULL;
	}
	for (int i = 0; i < m->nparams; i++)
		t->buckets[t->param_bucket[i]].pending++;
	t->next_bucket = 0;
	t->nsends = 0;
	t->act_bytes = t->peak_act_bytes = 0;
	t->tp_ms = 0;

	for (int k = 0; k < t->program.count; k++) {
		const struct sched_instr *in = &t->program.instr[k];
		const int u = in->mb * v + in->chunk;
		const struct model_chunk *ch = &m->chunks[in->chunk];
		int peer_stage, peer_chunk;
		uint64_t t0 = yard_now_mono_ns();
		switch (in->op) {
		case SCHED_RECV_ACT:
		case SCHED_FORWARD: {
			if (!t->acts[u]) {
				t->acts[u] = model_acts_new(m, in->chunk, n);
				if (!t->acts[u])
					return yard_err_set(err, YARD_ENOMEM,
					                    "rank %d: out of memory "
					                    "for activations",
					                    t->rank);
				t->act_bytes += t->acts[u]->bytes;
				if (t->act_bytes > t->peak_act_bytes)
					t->peak_act_bytes = t->act_bytes;
			}
			if (in->op == SCHED_RECV_ACT) {
				sched_prev(p, v, t->pp_i, in->chunk, &peer_stage, &peer_chunk);
				rc = t->net->ops->recv(t->net, t->acts[u]->resid[0], nd, peer_stage,
				                       tag_of(0, ch->vstage, in->mb, mbs));
				if (rc)
					return net_fail(t, err, rc, "RECV_ACT", in);
				bubble_ms += ms_since(t0);
				break;
			}
			/* the data position of this micro-batch is the same in every layout */
			uint64_t pos =
			    step_pos + (uint64_t)t->dp_i * n * mbs + (uint64_t)in->mb * n;
			struct model_acts *a = t->acts[u];
			if (ch->has_input || ch->has_head) {
				data_fetch(&t->data, pos, n, t->xbuf, t->ybuf);
				if (ch->has_input)
					memcpy(a->x_in, t->xbuf,
					       (size_t)n * m->cfg.d_in * sizeof(float));
				if (ch->has_head)
					memcpy(a->labels, t->ybuf, (size_t)n * sizeof(int32_t));
			}
			double tp_before = t->tp_ms;
			rc = model_chunk_forward(m, in->chunk, a, tp_allreduce, t, &loss_sum,
			                         &correct);
			if (rc)
				return net_fail(t, err, rc, "FORWARD (tp allreduce)", in);
			if (ch->has_head)
				rows_scored += n;
			double spent = ms_since(t0) - (t->tp_ms - tp_before);
			slow_down(t, ch, in->op == SCHED_BACKWARD, spent);
			compute_ms += ms_since(t0) - (t->tp_ms - tp_before);
			break;
		}
		case SCHED_SEND_ACT:
			sched_next(p, v, t->pp_i, in->chunk, &peer_stage, &peer_chunk);
			t->sendbuf[u] = malloc(nd * sizeof(float));
			if (!t->sendbuf[u])
				return yard_err_set(err, YARD_ENOMEM, "out of memory");
			memcpy(t->sendbuf[u], t->acts[u]->resid[ch->nblocks], nd * sizeof(float));
			rc = t->net->ops->isend(t->net, t->sendbuf[u], nd, peer_stage,
			                        tag_of(0, ch->vstage + 1, in->mb, mbs),
			                        &t->sends[t->nsends++]);
			if (rc)
				return net_fail(t, err, rc, "SEND_ACT", in);
			comm_ms += ms_since(t0);
			break;
		case SCHED_RECV_GRAD:
			t->dresid[u] = malloc(nd * sizeof(float));
			if (!t->dresid[u])
				return yard_err_set(err, YARD_ENOMEM, "out of memory");
			sched_next(p, v, t->pp_i, in->chunk, &peer_stage, &peer_chunk);
			rc = t->net->ops->recv(t->net, t->dresid[u], nd, peer_stage,
			                       tag_of(1, ch->vstage, in->mb, mbs));
			if (rc)
				return net_fail(t, err, rc, "RECV_GRAD", in);
			bubble_ms += ms_since(t0);
			break;
		case SCHED_BACKWARD: {
			if (!t->dresid[u] && !(t->dresid[u] = calloc(nd, sizeof(float))))
				return yard_err_set(err, YARD_ENOMEM, "out of memory");
			struct ready_ctx rctx = {
			    .t = t, .last_micro_batch = ++t->backward_done[in->chunk] == mbs};
			double tp_before = t->tp_ms;
			rc = model_chunk_backward(m, in->chunk, t->acts[u], t->dresid[u],
			                          loss_scale, tp_allreduce, t, grad_ready, &rctx);
			if (rc || rctx.rc)
				return net_fail(t, err, rc ? rc : rctx.rc, "BACKWARD", in);
			t->act_bytes -= t->acts[u]->bytes;
			model_acts_free(t->acts[u]);
			t->acts[u] = NULL;
			double spent = ms_since(t0) - (t->tp_ms - tp_before);
			slow_down(t, ch, in->op == SCHED_BACKWARD, spent);
			compute_ms += ms_since(t0) - (t->tp_ms - tp_before);
			break;
		}
		case SCHED_SEND_GRAD:
			sched_prev(p, v, t->pp_i, in->chunk, &peer_stage, &peer_chunk);
			rc = t->net->ops->isend(t->net, t->dresid[u], nd, peer_stage,
			                        tag_of(1, ch->vstage - 1, in->mb, mbs),
			                        &t->sends[t->nsends++]);
			if (rc)
				return net_fail(t, err, rc, "SEND_GRAD", in);
			comm_ms += ms_since(t0);
			break;
		}
	}
	uint64_t t0 = yard_now_mono_ns();
	for (int k = 0; k < t->nsends; k++) {
		rc = t->net->ops->wait(t->net, t->sends[k]);
		t->sends[k] = NULL;
		if (rc)
			return net_fail(t, err, rc, "waiting for sends", NULL);
	}
	comm_ms += ms_since(t0);
	t0 = yard_now_mono_ns();
	if (t->par.dp > 1) {
		if (t->next_bucket != t->nbuckets)
			return yard_err_set(err, YARD_EINTERNAL,
			                    "rank %d: %d of %d gradient buckets never became ready",
			                    t->rank, t->nbuckets - t->next_bucket, t->nbuckets);
		for (int b = 0; b < t->nbuckets; b++) {
			rc = t->net->ops->wait(t->net, t->buckets[b].req);
			t->buckets[b].req = NULL;
			if (rc)
				return net_fail(t, err, rc, "gradient allreduce", NULL);
		}
	}
	dp_ms = ms_since(t0);
	comm_ms += dp_ms;
	step_buffers_release(t);

	/* loss, accuracy and the global gradient norm: the head is replicated across TP and the
	 * gradients across DP after the allreduce, so each is counted once. */
	t0 = yard_now_mono_ns();
	double sums[4] = {0, 0, 0, 0};
	if (t->tp_i == 0) {
		sums[0] = loss_sum;
		sums[1] = correct;
		sums[2] = rows_scored;
	}
	/* a checkpoint request rides in the rows' count, above 2^32 (the sum of integers of up
	 * to 2^53 is exact in any order, and the allreduce keeps its 4 elements, so a worker of
	 * an older build in the same job reads a plain count until some rank asks) */
	if (t->checkpoint_wanted)
		sums[2] += CHECKPOINT_ASK;
	if (t->train.clip_norm > 0 && t->dp_i == 0) {
		double sq = 0;
		for (int i = 0; i < m->nparams; i++) {
			const struct model_param *prm = &m->params[i];
			if (prm->shard == MODEL_REPLICATED && t->tp_i != 0)
				continue;
			for (size_t e = 0; e < prm->numel; e++)
				sq += (double)prm->grad[e] * prm->grad[e];
		}
		sums[3] = sq;
	}
	rc = t->net->ops->allreduce(t->net, TRAINER_WORLD, sums, 4, YD_F64);
	if (rc)
		return net_fail(t, err, rc, "loss allreduce", NULL);
	comm_ms += ms_since(t0);
	double asks = floor(sums[2] / CHECKPOINT_ASK);
	sums[2] -= asks * CHECKPOINT_ASK;
	if (asks > 0)
		t->checkpoint_wanted = 0;
	if ((int)sums[2] != t->train.batch_size)
		return yard_err_set(err, YARD_EINTERNAL, "step %lld: %d rows scored, batch is %d",
		                    (long long)t->step + 1, (int)sums[2], t->train.batch_size);
	float scale = 1.0f;
	double norm = 0;
	if (t->train.clip_norm > 0) {
		norm = sqrt(sums[3]);
		if (norm > t->train.clip_norm)
			scale = (float)(t->train.clip_norm / norm);
	}
	t0 = yard_now_mono_ns();
	optim_step(&t->optim, m, scale);
	/* the optimiser is compute too: a slowed rank is slowed in all of it, so that its
	 * compute time is slow_factor times the others' (not less, diluted by an unstretched
	 * optimiser step) */
	if (t->slow_factor > 1.0)
		sleep_ms(ms_since(t0) * (t->slow_factor - 1.0));
	compute_ms += ms_since(t0);
	t->step++;

	double step_ms = ms_since(step_t0);
	if (out) {
		out->step = t->step;
		out->loss = sums[0] / t->train.batch_size;
		out->accuracy = sums[1] / t->train.batch_size;
		out->lr = t->train.lr;
		out->step_ms = step_ms;
		out->compute_ms = compute_ms;
		out->checkpoint_agreed = asks > 0;
		out->comm_wait_ms = comm_ms + t->tp_ms;
		out->dp_wait_ms = dp_ms;
		out->bubble_ms = bubble_ms;
		out->samples_per_s = step_ms > 0 ? t->train.batch_size / (step_ms / 1000.0) : 0;
		out->grad_norm = norm;
		out->peak_activation_bytes = t->peak_act_bytes;
	}
	return 0;
}

int trainer_metrics_json(const struct trainer_metrics *m, int rank, char *buf, size_t len)
{
	return snprintf(buf, len,
	                "{\"step\":%lld,\"rank\":%d,\"loss\":%.9g,\"accuracy\":%.6g,\"lr\":%.6g,"
	                "\"step_ms\":%.3f,\"compute_ms\":%.3f,\"comm_wait_ms\":%.3f,"
	                "\"dp_wait_ms\":%.3f,\"bubble_ms\":%.3f,\"samples_per_s\":%.1f,"
	                "\"peak_activation_bytes\":%zu}",
	                (long long)m->step, rank, m->loss, m->accuracy, m->lr, m->step_ms,
	                m->compute_ms, m->comm_wait_ms, m->dp_wait_ms, m->bubble_ms,
	                m->samples_per_s, m->peak_activation_bytes);
}
