/* planner.c: layout enumeration and the step-time cost model (see planner.h). */
#include "scheduler/planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_MAX_PP 64
#define PLAN_MAX_M 64

const char *plan_schedule_name(enum plan_schedule s)
{
	switch (s) {
	case PLAN_GPIPE:
		return "gpipe";
	case PLAN_1F1B:
		return "1f1b";
	case PLAN_INTERLEAVED:
		return "interleaved";
	}
	return "?";
}

/* Ring allreduce of bytes over n ranks. */
static double ring_allreduce_s(int n, double bytes, double bw, double latency)
{
	if (n <= 1)
		return 0;
	return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * latency;
}

/* Blocks on the busiest device: v chunks of ceil(layers / (p·v)) blocks. */
static int blocks_per_chunk(const struct plan_model *m, const struct plan_candidate *c)
{
	int stages = c->pp * c->v;
	return (m->layers + stages - 1) / stages;
}

/* Parameters one device holds on the stage with the most (blocks plus, at the ends, the
 * input projection or the head, which are replicated across TP). */
static double device_params(const struct plan_model *m, const struct plan_candidate *c)
{
	double d = m->d_model, f = m->d_ff;
	double block = 2 * d + (d * f + f + f * d) / c->tp + d;
	double blocks = (double)blocks_per_chunk(m, c) * c->v;
	double input = (double)m->d_in * d + d;
	double head = d * m->classes + m->classes;
	if (c->pp == 1)
		return blocks * block + input + head;
	return blocks * block + (input > head ? input : head);
}

/* Gradient buckets the trainer's data-parallel allreduce uses on the stage with the head
 * (and, with one stage, the input projection): its parameters in the trainer's order (head,
 * blocks last to first: b2, w2, b1, w1, layernorm), a bucket closing once it holds
 * bucket_bytes or more, as dataplane/trainer.c builds them. 0 bucket_bytes: one bucket. */
int plan_dp_buckets(const struct plan_model *m, const struct plan_candidate *c)
{
	double d = m->d_model, fl = (double)m->d_ff / c->tp;
	double limit = m->bucket_bytes > 0 ? m->bucket_bytes / 4 : INFINITY;
	double sizes[6] = {d, d * fl, fl, fl * d, d, d};
	double held = m->classes + (double)m->classes * d; /* the head opens the first */
	int buckets = 1;
	int blocks = blocks_per_chunk(m, c) * c->v;
	for (int k = 0; k < blocks; k++)
		for (int i = 0; i < 6; i++) {
			if (held >= limit) {
				buckets++;
				held = 0;
			}
			held += sizes[i];
		}
	if (c->pp == 1)
		for (int i = 0; i < 2; i++) {
			if (held >= limit) {
				buckets++;
				held = 0;
			}
			held += i == 0 ? d : d * m->d_in;
		}
	return buckets;
}

/* Micro-batches (GPipe, 1F1B) or chunk-micro-batches (interleaved) whose activations stage 0
 * holds at its peak, and the blocks each of them covers. */
static void in_flight(const struct plan_model *m, const struct plan_candidate *c, double *units,
                      double *blocks_per_unit)
{
	int bpc = blocks_per_chunk(m, c);
	switch (c->schedule) {
	case PLAN_GPIPE:
		*units = c->m;
		*blocks_per_unit = (double)bpc * c->v;
		return;
	case PLAN_1F1B:
		*units = c->m < c->pp ? c->m : c->pp;
		*blocks_per_unit = (double)bpc * c->v;
		return;
	case PLAN_INTERLEAVED: {
		/* Megatron: warm-up of (p−1)·2 + (v−1)·p chunk forwards, plus the one in steady
		 * state, capped by the total */
		int warm = (c->pp - 1) * 2 + (c->v - 1) * c->pp + 1;
		int total = c->v * c->m;
		*units = warm < total ? warm : total;
		*blocks_per_unit = bpc;
		return;
	}
	}
}

double plan_device_rate(const struct plan_cluster *k, double call_flops)
{
	double rate = k->flops_per_s;
	int n = k->rate_points < PLAN_RATE_POINTS_MAX ? k->rate_points : PLAN_RATE_POINTS_MAX;
	if (n == 1 || (n > 1 && call_flops <= k->rate_call_flops[0]))
		rate = k->rate_flops_per_s[0];
	else if (n > 1 && call_flops >= k->rate_call_flops[n - 1])
		rate = k->rate_flops_per_s[n - 1];
	else if (n > 1)
		for (int i = 1; i < n; i++) {
			double x0 = k->rate_call_flops[i - 1], x1 = k->rate_call_flops[i];
			if (call_flops > x1 || x1 <= x0)
				continue;
			/* linear in log(size): the curve is measured at sizes a factor apart */
			double t = log(call_flops / x0) / log(x1 / x0);
			rate = k->rate_flops_per_s[i - 1] +
			       t * (k->rate_flops_per_s[i] - k->rate_flops_per_s[i - 1]);
			break;
		}
	return rate;
}

/* what a node computes at once, in devices' worth: efficiency × devices_per_node, at least 1 */
static double node_capacity(const struct plan_cluster *k)
{
	double eff =
	    k->parallel_efficiency > 0 && k->parallel_efficiency < 1 ? k->parallel_efficiency : 1;
	double capacity = eff * k->devices_per_node;
	return capacity < 1 ? 1 : capacity;
}

double plan_device_share(const struct plan_cluster *k, double ranks_on_node)
{
	double avail = k->availability > 0 && k->availability < 1 ? k->availability : 1;
	double capacity = node_capacity(k);
	return avail * (ranks_on_node > capacity ? capacity / ranks_on_node : 1);
}

/* The probe's allreduce figures stand when it measured them (0 included) or when a caller
 * set them without saying (tests, older callers); else the point-to-point figures do. */
static int allreduce_figures(const struct plan_cluster *k)
{
	return k->allreduce_measured || k->allreduce_sync_s > 0 || k->allreduce_sync_cpu_s > 0;
}

double plan_sync_cpu(const struct plan_cluster *k, int ranks_on_node, int allreduce)
{
	int all = k->devices_per_node;
	double two = k->sync_cpu_s, busy = k->busy_sync_cpu_s;
	if (allreduce && allreduce_figures(k)) {
		two = k->allreduce_sync_cpu_s;
		busy = k->busy_allreduce_sync_cpu_s;
	}
	if (busy <= 0 || ranks_on_node <= 2 || all <= 2)
		return two;
	if (ranks_on_node >= all)
		return busy;
	/* between the two measured points, linear in the ranks on the node */
	return two + (busy - two) * (ranks_on_node - 2) / (all - 2);
}

double plan_pipeline_sync(const struct plan_cluster *k, int ranks_on_node)
{
	int all = k->devices_per_node;
	if (k->busy_sync_s <= 0 || ranks_on_node <= 2 || all <= 2)
		return k->sync_s;
	if (ranks_on_node >= all)
		return k->busy_sync_s;
	return k->sync_s + (k->busy_sync_s - k->sync_s) * (ranks_on_node - 2) / (all - 2);
}

void plan_predict(const struct plan_model *m, const struct plan_cluster *k,
                  struct plan_candidate *c)
{
	double d = m->d_model, f = m->d_ff;
	double replica_samples = (double)m->batch_size / c->dp;
	double mbs = replica_samples / c->m;
	double blocks = (double)blocks_per_chunk(m, c) * c->v;
	double block_flops = 4.0 * d * f / c->tp + 20.0 * d; /* two matmuls + elementwise */
	double ends = c->pp == 1 ? 2.0 * m->d_in * d + 2.0 * d * m->classes
	                         : fmax(2.0 * m->d_in * d, 2.0 * d * m->classes);
	double fwd_flops = replica_samples * (blocks * block_flops + ends);
	int pp_fits_node = c->pp * c->tp <= k->devices_per_node;
	int world_fits_node = c->dp * c->pp * c->tp <= k->devices_per_node;
	double pp_bw = pp_fits_node ? k->intra_bw_bytes_per_s : k->inter_bw_bytes_per_s;
	double dp_bw = world_fits_node ? k->intra_bw_bytes_per_s : k->inter_bw_bytes_per_s;
	double act_bytes = mbs * d * 4;
	double params = device_params(m, c);
	double units = 0, blocks_per_unit = 0, backward_last_mb;
	int world = c->dp * c->tp * c->pp;
	int ranks_on_node = world < k->devices_per_node ? world : k->devices_per_node;
	double share = plan_device_share(k, ranks_on_node);
	/* the node's ranks outnumber what it computes at once */
	int crowded = share < plan_device_share(k, 1) * (1 - 1e-9);
	double intra_latency =
	    crowded && k->busy_latency_s > k->latency_s ? k->busy_latency_s : k->latency_s;
	double inter_latency = k->inter_latency_s > 0 ? k->inter_latency_s : k->latency_s;
	double pp_latency = pp_fits_node ? intra_latency : inter_latency;
	double dp_latency = world_fits_node ? intra_latency : inter_latency;
	/* the measured cost of one exchange within the node (busy when crowded) */
	/* the wall time an exchange adds on the critical path */
	double intra_sync = allreduce_figures(k) ? k->allreduce_sync_s : k->sync_s;
	/* a pipeline of m micro-batches keeps at most min(pp, m) of its stages computing at
	 * once (GPipe with m = 1 runs its stages one after another): its messages cost an
	 * exchange among that many computing ranks, not among all of the node's */
	int stages_busy = c->m < c->pp ? c->m : c->pp;
	int pp_busy = c->dp * c->tp * stages_busy;
	double pp_sync =
	    pp_fits_node ? plan_pipeline_sync(k, pp_busy < ranks_on_node ? pp_busy : ranks_on_node)
	                 : 0;
	double dp_sync = world_fits_node ? intra_sync : 0;
	double fl = f / c->tp;
	/* the critical path is costed at what a lone rank gets (availability); the node's
	 * crowding enters as a second bound below */
	double alone_share = plan_device_share(k, 1);
	c->bubble_fraction = (double)(c->pp - 1) / ((double)c->v * c->m + c->pp - 1);

	if (k->block_mac_s > 0) {
		double block_s = k->block_mac_s * mbs * d * fl + k->block_weight_s * d * fl +
		                 k->block_hidden_s * mbs * fl + k->block_model_s * mbs * d +
		                 k->block_call_s;
		double ends_s =
		    3.0 * replica_samples * ends / plan_device_rate(k, 2.0 * mbs * d * m->classes);
		c->compute_s = (blocks * c->m * block_s + ends_s) / alone_share;
	} else {
		c->compute_s =
		    3.0 * fwd_flops / (plan_device_rate(k, 2.0 * mbs * d * fl) * alone_share);
	}
	/* every rank runs its optimiser step right after the loss allreduce, which every rank
	 * enters: all of the node's ranks at once, each with its share of what it computes */
	c->optim_s = params * (m->adamw ? k->adamw_s_per_param : k->sgd_s_per_param) / share;
	c->tp_comm_s =
	    c->tp > 1
	        ? 2.0 * blocks * c->m *
	              (ring_allreduce_s(c->tp, act_bytes, k->intra_bw_bytes_per_s, intra_latency) +
	               intra_sync)
	        : 0;
	/* a receiver waits at most for one message's worth of its producer's compute */
	double per_message_compute = c->compute_s / (2.0 * c->v * c->m);
	if (pp_sync > per_message_compute)
		pp_sync = per_message_compute;
	c->pp_comm_s =
	    c->pp > 1 ? 2.0 * c->v * c->m * (pp_latency + act_bytes / pp_bw + pp_sync) : 0;
	/* each bucket is an allreduce of its own on the communicator's progress thread: 2(dp−1)
	 * ring steps, each a point-to-point exchange (the pipeline message's wall figure) */
	int buckets = c->dp > 1 ? plan_dp_buckets(m, c) : 0;
	double dp_step_sync = world_fits_node ? plan_pipeline_sync(k, ranks_on_node) : 0;
	c->dp_comm_s = c->dp > 1 ? ring_allreduce_s(c->dp, params * 4, dp_bw, 0) +
	                               buckets * 2.0 * (c->dp - 1) * (dp_latency + dp_step_sync)
	                         : 0;
	c->loss_comm_s = world > 1 ? ring_allreduce_s(world, 4 * 8,
	                                              world_fits_node ? k->intra_bw_bytes_per_s
	                                                              : k->inter_bw_bytes_per_s,
	                                              dp_latency) +
	                                 dp_sync
	                           : 0;
	/* the buckets progress during the last micro-batch's backward on a spare core: an
	 * accelerator's host has one; a node whose ranks compute on its cores needs a core's
	 * worth beyond its ranks (two data-parallel ranks on two cores have none: their progress
	 * threads get a core when the backward ends), and a crowded node has none either way.
	 * Without one the allreduce waits for the backward to end */
	int spare_core = k->host_compute ? node_capacity(k) - ranks_on_node >= 1 : !crowded;
	backward_last_mb = spare_core ? (2.0 / 3.0) * c->compute_s / c->m : 0;
	c->dp_exposed_s = c->dp_comm_s > backward_last_mb ? c->dp_comm_s - backward_last_mb : 0;
	double fb_s = (c->compute_s + c->tp_comm_s + c->pp_comm_s) / (1.0 - c->bubble_fraction) +
	              c->dp_exposed_s + c->loss_comm_s;
	/* the node's bound on the forward and backward passes: its ranks' compute, the CPU
	 * their exchanges burn included, over what it computes at once. A rank that waits (a
	 * message, the bubble) leaves its core to another, so this phase takes the larger of
	 * the critical path above and this; when this is larger, compute stretches to make up
	 * the difference. The optimiser steps follow, all of the node's at once (above): a
	 * pipeline whose stages take turns computing still runs them together */
	double ar_cpu = plan_sync_cpu(k, ranks_on_node, 1),
	       p2p_cpu = plan_sync_cpu(k, ranks_on_node, 0);
	double exchanges_cpu = (c->tp > 1 ? 2.0 * blocks * c->m * ar_cpu : 0) +
	                       (c->pp > 1 && pp_fits_node ? 2.0 * c->v * c->m * p2p_cpu : 0) +
	                       (world_fits_node ? ((c->dp > 1) + (world > 1)) * ar_cpu : 0);
	double node_s = (c->compute_s + exchanges_cpu / alone_share) * alone_share / share;
	if (node_s > fb_s) {
		c->compute_s *= 1 + (node_s - fb_s) / (c->compute_s / (1.0 - c->bubble_fraction));
		fb_s = node_s;
	}
	c->step_s = fb_s + c->optim_s;

	in_flight(m, c, &units, &blocks_per_unit);
	c->memory_bytes = params * 4 * (m->adamw ? 4 : 3) +
	                  units * blocks_per_unit * mbs * (3 * d + 2 * f / c->tp) * 4 +
	                  units * mbs * m->classes * 4;
	c->comm_bytes =
	    (c->tp > 1 ? 2.0 * blocks * c->m * 2.0 * (c->tp - 1) / c->tp * act_bytes : 0) +
	    (c->pp > 1 ? 2.0 * c->v * c->m * act_bytes : 0) +
	    (c->dp > 1 ? 2.0 * (c->dp - 1) / c->dp * params * 4 : 0);
}

int plan_layout_valid(const struct plan_model *m, const struct plan_cluster *k,
                      const struct plan_candidate *c, char *why, int why_len)
{
	int world = c->dp * c->tp * c->pp;
	if (world > k->devices)
		return snprintf(why, (size_t)why_len, "needs %d devices, %d available", world,
		                k->devices),
		       -1;
	if (c->tp > k->devices_per_node)
		return snprintf(why, (size_t)why_len, "tp %d exceeds the %d devices of a node",
		                c->tp, k->devices_per_node),
		       -1;
	if (m->d_ff % c->tp != 0)
		return snprintf(why, (size_t)why_len, "tp %d does not divide d_ff %d", c->tp,
		                m->d_ff),
		       -1;
	if (c->pp > PLAN_MAX_PP || c->pp * c->v > m->layers)
		return snprintf(why, (size_t)why_len, "pp·v = %d exceeds %d layers", c->pp * c->v,
		                m->layers),
		       -1;
	if (c->schedule != PLAN_INTERLEAVED && c->v != 1)
		return snprintf(why, (size_t)why_len, "v > 1 needs the interleaved schedule"), -1;
	if (c->schedule == PLAN_INTERLEAVED &&
	    (c->pp < 2 || c->v < 2 || m->layers % (c->pp * c->v) != 0 || c->m % c->pp != 0))
		return snprintf(
		           why, (size_t)why_len,
		           "interleaved needs pp ≥ 2, v ≥ 2, layers divisible by pp·v and m by pp"),
		       -1;
	if (m->batch_size % (c->dp * c->m) != 0)
		return snprintf(why, (size_t)why_len, "batch %d is not divisible by dp·m = %d",
		                m->batch_size, c->dp * c->m),
		       -1;
	return 0;
}

static int candidate_cmp(const void *a, const void *b)
{
	const struct plan_candidate *x = a, *y = b;
	int wx = x->dp * x->tp * x->pp, wy = y->dp * y->tp * y->pp;
	if (x->step_s != y->step_s)
		return x->step_s < y->step_s ? -1 : 1;
	if (wx != wy)
		return wx - wy;
	if (x->memory_bytes != y->memory_bytes)
		return x->memory_bytes < y->memory_bytes ? -1 : 1;
	/* fully deterministic order for exact ties */
	if (x->pp != y->pp)
		return x->pp - y->pp;
	if (x->tp != y->tp)
		return x->tp - y->tp;
	if (x->m != y->m)
		return x->m - y->m;
	if (x->schedule != y->schedule)
		return (int)x->schedule - (int)y->schedule;
	return x->v - y->v;
}

static int push(struct plan_result *r, int *cap, const struct plan_candidate *c)
{
	if (r->count == *cap) {
		int ncap = *cap ? *cap * 2 : 64;
		struct plan_candidate *n = realloc(r->candidates, sizeof *n * (size_t)ncap);
		if (n == NULL)
			return YARD_ENOMEM;
		r->candidates = n;
		*cap = ncap;
	}
	r->candidates[r->count++] = *c;
	return 0;
}

int plan_run(const struct plan_model *m, const struct plan_cluster *k, struct plan_result *out,
             struct yard_err *err)
{
	static const int vs[] = {2, 4};
	int cap = 0;
	char why[160];

	memset(out, 0, sizeof *out);
	if (k->devices < 1 || k->flops_per_s <= 0 || k->intra_bw_bytes_per_s <= 0 ||
	    k->inter_bw_bytes_per_s <= 0 || k->device_memory_bytes <= 0)
		return yard_err_set(
		    err, YARD_EINVAL,
		    "cluster: devices, memory, FLOP rate and bandwidths must be measured "
		    "(positive) before planning");
	/* bounds that rules reject anyway keep the enumeration small on large clusters: a TP
	 * group fits a node, dp·m divides the batch */
	for (int tp = 1; tp <= k->devices && tp <= k->devices_per_node; tp++)
		for (int pp = 1; tp * pp <= k->devices && pp <= PLAN_MAX_PP; pp++)
			for (int dp = 1; dp * tp * pp <= k->devices && dp <= m->batch_size; dp++)
				for (int mb = 1; mb <= PLAN_MAX_M; mb++)
					for (int s = 0; s < 3; s++)
						for (int vi = 0;
						     vi < (s == PLAN_INTERLEAVED ? 2 : 1); vi++) {
							struct plan_candidate c = {
							    .dp = dp,
							    .tp = tp,
							    .pp = pp,
							    .m = mb,
							    .schedule = (enum plan_schedule)s,
							    .v =
							        s == PLAN_INTERLEAVED ? vs[vi] : 1};
							/* with one stage the schedules coincide:
							 * keep one */
							if (pp == 1 && (s != PLAN_1F1B || mb != 1))
								continue;
							if (plan_layout_valid(m, k, &c, why,
							                      sizeof why) != 0) {
								out->rejected_rules++;
								continue;
							}
							plan_predict(m, k, &c);
							if (c.memory_bytes >
							    k->device_memory_bytes) {
								out->rejected_memory++;
								continue;
							}
							if (push(out, &cap, &c) != 0) {
								plan_result_free(out);
								return yard_err_set(
								    err, YARD_ENOMEM,
								    "planner: out of memory");
							}
						}
	if (out->count == 0)
		return yard_err_set(
		    err, YARD_ENOSPACE,
		    "no layout fits: %d rejected by device memory (%.0f MiB), %d by "
		    "the trainer's rules",
		    out->rejected_memory, k->device_memory_bytes / 1048576.0, out->rejected_rules);
	qsort(out->candidates, (size_t)out->count, sizeof *out->candidates, candidate_cmp);
	return 0;
}

void plan_explain(const struct plan_result *r, char *out, int out_len)
{
	const struct plan_candidate *a, *b;
	if (r->count == 0) {
		snprintf(out, (size_t)out_len, "no candidate");
		return;
	}
	a = &r->candidates[0];
	if (r->count == 1) {
		snprintf(out, (size_t)out_len, "the only layout that fits");
		return;
	}
	b = &r->candidates[1];
	snprintf(
	    out, (size_t)out_len,
	    "dp%d×tp%d×pp%d %s v=%d m=%d predicts %.2f ms/step, %.1f%% faster than dp%d×tp%d×pp%d "
	    "%s v=%d m=%d (%.2f ms): compute %.2f vs %.2f ms, bubble %.0f%% vs %.0f%%, "
	    "exposed communication %.2f vs %.2f ms, optimiser %.2f vs %.2f ms",
	    a->dp, a->tp, a->pp, plan_schedule_name(a->schedule), a->v, a->m, a->step_s * 1e3,
	    (b->step_s - a->step_s) / b->step_s * 100, b->dp, b->tp, b->pp,
	    plan_schedule_name(b->schedule), b->v, b->m, b->step_s * 1e3, a->compute_s * 1e3,
	    b->compute_s * 1e3, a->bubble_fraction * 100, b->bubble_fraction * 100,
	    (a->tp_comm_s + a->pp_comm_s + a->dp_exposed_s + a->loss_comm_s) * 1e3,
	    (b->tp_comm_s + b->pp_comm_s + b->dp_exposed_s + b->loss_comm_s) * 1e3,
	    a->optim_s * 1e3, b->optim_s * 1e3);
}

void plan_result_free(struct plan_result *r)
{
	free(r->candidates);
	r->candidates = NULL;
	r->count = 0;
}
