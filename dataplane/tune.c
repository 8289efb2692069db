/* tune.c: `auto` learns from the collectives it runs.
 *
 * The calibration at creation (calibrate.c) times each algorithm for a few calls at a few
 * sizes, in-place, right after the communicator came up. Where several algorithms lie within a
 * few tens of percent of each other (4 ranks at 1 MiB on 2 cores: ring, hd, tree and the shared
 * buffers within 15-30 %), that is not enough to rank them as the application's loop will run
 * them, with its own buffers, sizes and pace. A training loop repeats the same few sizes
 * thousands of times, so the first calls of each size can settle it: the calibration's choice
 * and up to three other algorithms it predicted within 1.5x of the best take turns,
 * DP_TUNE_PASSES passes over them in which each runs once untimed and then dp_tune_timed()
 * times back to back (the first call after a switch pays for caches the other algorithm took,
 * which a loop of one algorithm does not; the passes spread a burst of outside load over
 * several algorithms). Each rank takes each algorithm's figure (dp_tune_figure(): the median
 * over the passes of the mean of its calls), the ranks sum their figures (one allreduce of a
 * few doubles, ring, under the call's sequence number with DP_SEQ_TUNE set, after the last
 * timed call) and every later call of that size runs the fastest, which stays the calibration's
 * choice unless another is DP_TUNE_MARGIN faster. Fewer calls were not enough here: single
 * calls of one algorithm vary by 30 % and more on 2 shared cores, and with three timed calls
 * per algorithm in one pass the choice at 1 MiB on 4 ranks went to an algorithm 10-25 % slower
 * than the best in a third of the runs; with twelve it took the best or one within 5 % of it.
 * Below 256 KiB the calls are short and more of them are timed (dp_tune_timed()); from 16 MiB
 * one call per pass is timed, as a call takes milliseconds. At most 64 tuning calls per size
 * from 256 KiB (about 20 ms at 1 MiB on 4 ranks here), 208 below 16 KiB (about 4 ms at 4 KiB),
 * 32 from 16 MiB (about 1 s at 64 MiB on 4 shm ranks: the shared buffers and halving-doubling
 * lie within 10-25 % of each other there, and the calibration, which timed its finalists at
 * 16 MiB, took either from one launch to the next), and only sizes up to DP_TUNE_MAX_BYTES
 * (256 MiB; larger calls keep the calibration's choice). Every rank makes the same calls of a
 * size in the same order (otherwise they are mismatched, which is reported), so every rank
 * takes the same algorithm on every call; the algorithm also travels in each header.
 *
 * Reduce-scatter, allgather, broadcast and reduce are tuned the same way, from the choice of
 * algo_select.c's size rules (fitted on one machine) and the other algorithms that run
 * differently for them (4 shm ranks here: the rules' ring reduce-scatter at 64 KiB took 37 us
 * where the shared buffers, which tuning picked, took 15-19).
 *
 * State is touched only by the thread running the communicator's operations, except the
 * published `chosen` of each size, which yd_allreduce_algo reads. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "dataplane/dp.h"

static struct dp_tune_size *find(struct dp_tune *t, enum dp_kind kind, size_t bytes,
                                 enum yd_dtype dt)
{
	int n = atomic_load_explicit(&t->nsizes, memory_order_acquire);
	for (int i = 0; i < n; i++)
		if (t->size[i].kind == kind && t->size[i].bytes == bytes && t->size[i].dtype == dt)
			return &t->size[i];
	return NULL;
}

static void add_cand(struct dp_tune_size *s, enum yd_algo a)
{
	for (int j = 0; j < s->n; j++)
		if (s->cand[j] == a)
			return;
	if (s->n < DP_TUNE_CAND)
		s->cand[s->n++] = a;
}

/* An allreduce's candidates after the calibration's choice: the ring, then those predicted
 * within DP_TUNE_NEAR of the best, cheapest first. The ring always, because one calibration
 * can misjudge by more than DP_TUNE_NEAR: at 64 MiB over TCP on 4 ranks it put
 * halving-doubling so far ahead in one launch of three that nothing else was tried, and hd
 * then ran 150 ms a call against the ring's 116. */
static void near_best(yd_comm *c, struct dp_tune_size *s)
{
	double cost[YD_ALGO_COUNT], best = dp_algo_cost(c, s->cand[0], s->bytes);
	for (int k = 0; k < c->ncand; k++) {
		best = fmin(best, cost[k] = dp_algo_cost(c, c->cand[k], s->bytes));
		if (c->cand[k] == YD_ALGO_RING && isfinite(cost[k]))
			add_cand(s, YD_ALGO_RING);
	}
	while (s->n < DP_TUNE_CAND) {
		int pick = -1;
		for (int k = 0; k < c->ncand; k++) {
			int taken = 0;
			for (int j = 0; j < s->n; j++)
				taken |= s->cand[j] == c->cand[k];
			if (!taken && cost[k] <= best * DP_TUNE_NEAR &&
			    (pick < 0 || cost[k] < cost[pick]))
				pick = k;
		}
		if (pick < 0)
			break;
		s->cand[s->n++] = c->cand[pick];
	}
}

/* A new size of a collective: the choice it was issued with first (the calibration's for an
 * allreduce, the size rules of algo_select.c for the others), then the others to try: for an
 * allreduce those near the best by the calibration, for a reduce-scatter or allgather the
 * ring, naive and (one host) the shared buffers, for a broadcast or reduce the chain, tree
 * and naive. NULL when the table is full. */
static struct dp_tune_size *add(yd_comm *c, enum dp_kind kind, size_t bytes, enum yd_dtype dt,
                                enum yd_algo choice)
{
	struct dp_tune *t = &c->tune;
	int i = atomic_load_explicit(&t->nsizes, memory_order_relaxed);
	if (i == DP_TUNE_SIZES)
		return NULL;
	struct dp_tune_size *s = &t->size[i];
	memset(s, 0, sizeof *s);
	s->kind = kind;
	s->bytes = bytes;
	s->dtype = dt;
	s->timed = dp_tune_timed(bytes);
	s->cand[s->n++] = choice;
	if (kind == DP_ALLREDUCE) {
		near_best(c, s);
	} else if (kind == DP_REDUCE_SCATTER || kind == DP_ALLGATHER) {
		add_cand(s, YD_ALGO_RING);
		add_cand(s, YD_ALGO_NAIVE);
		if (c->nhosts == 1 && dp_shared_usable(c))
			add_cand(s, YD_ALGO_SHARED);
	} else {
		add_cand(s, YD_ALGO_RING);
		add_cand(s, YD_ALGO_TREE);
		add_cand(s, YD_ALGO_NAIVE);
	}
	atomic_init(&s->chosen, s->n == 1 ? (int)choice : (int)YD_ALGO_AUTO);
	atomic_store_explicit(&t->nsizes, i + 1, memory_order_release);
	return s;
}

void dp_tune_pick(yd_comm *c, struct dp_op *o, struct dp_tune_call *tc)
{
	tc->s = NULL;
	if (!o->tune || !c->tune.on || !c->costs.calibrated || o->device || c->size < 2)
		return;
	size_t bytes = dp_op_select_bytes(c, o);
	struct dp_tune_size *s = find(&c->tune, o->kind, bytes, o->dtype);
	if (!s && (bytes > c->tune.max_bytes || !(s = add(c, o->kind, bytes, o->dtype, o->algo))))
		return; /* the choice made when the call was issued */
	int chosen = atomic_load_explicit(&s->chosen, memory_order_relaxed);
	if (chosen != YD_ALGO_AUTO) {
		o->algo = (enum yd_algo)chosen;
		return;
	}
	uint64_t k = s->calls++, per = (uint64_t)(DP_TUNE_UNTIMED + s->timed), block = k / per;
	int within = (int)(k % per);
	tc->slot = (int)(block % (uint64_t)s->n);
	o->algo = s->cand[tc->slot];
	if (within < DP_TUNE_UNTIMED)
		return;
	tc->s = s;
	tc->sample = (int)(block / (uint64_t)s->n) * s->timed + within - DP_TUNE_UNTIMED;
	tc->last = k + 1 == (uint64_t)DP_TUNE_CALLS(s->n, s->timed);
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int dp_tune_timed(size_t bytes)
{
	return bytes >= DP_TUNE_BIG    ? 1
	       : bytes >= (256u << 10) ? DP_TUNE_TIMED
	       : bytes >= (16u << 10)  ? 2 * DP_TUNE_TIMED
	                               : DP_TUNE_TIMED_MAX;
}

/* An algorithm's figure from its timed calls, `timed` per pass: per pass their mean, then the
 * median of the passes. A mean, because a rank that leaves a call early waits at the start of
 * the next, so single calls of a pairwise algorithm alternate between short and long and their
 * median misjudges what a loop of them costs (at 4 KiB on 4 ranks the median call put rd and
 * naive at 20-25 us against the shared buffers' 17.5 in every run, where loops of them run at
 * 15.5-16.5 and 19.5 us; the means of the passes put them right); the median of the passes,
 * because a burst of outside load spoils one pass. */
double dp_tune_figure(const double *t, int timed)
{
	double pass[DP_TUNE_PASSES];
	for (int p = 0; p < DP_TUNE_PASSES; p++) {
		pass[p] = 0;
		for (int j = 0; j < timed; j++)
			pass[p] += t[p * timed + j] / timed;
	}
	qsort(pass, DP_TUNE_PASSES, sizeof pass[0], by_value);
	return DP_TUNE_PASSES % 2 ? pass[DP_TUNE_PASSES / 2]
	                          : (pass[DP_TUNE_PASSES / 2 - 1] + pass[DP_TUNE_PASSES / 2]) / 2;
}

int dp_tune_decide(const double *t, int n, double margin)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (t[i] < t[best])
			best = i;
	return t[best] < t[0] * (1 - margin) ? best : 0;
}

int dp_tune_done(yd_comm *c, const struct dp_op *o, const struct dp_tune_call *tc, double seconds)
{
	struct dp_tune_size *s = tc->s;
	if (!s)
		return 0;
	s->t[tc->slot][tc->sample] = seconds;
	if (!tc->last)
		return 0;
	double fig[DP_TUNE_CAND];
	for (int i = 0; i < s->n; i++)
		fig[i] = dp_tune_figure(s->t[i], s->timed);
	struct dp_op a = {.kind = DP_ALLREDUCE,
	                  .sendbuf = fig,
	                  .recvbuf = fig,
	                  .count = (size_t)s->n,
	                  .dtype = YD_F64,
	                  .op = YD_SUM,
	                  .algo = YD_ALGO_RING,
	                  .seq = o->seq | DP_SEQ_TUNE};
	int rc = dp_op_execute(c, &a);
	if (rc)
		return rc;
	int best = dp_tune_decide(fig, s->n, DP_TUNE_MARGIN);
	atomic_store_explicit(&s->chosen, (int)s->cand[best], memory_order_relaxed);
	if (c->rank == 0) {
		char line[256];
		size_t len = 0;
		for (int i = 0; i < s->n && len < sizeof line; i++)
			len += (size_t)snprintf(line + len, sizeof line - len, "%s%s %.1f",
			                        i ? " / " : "", yd_algo_name(s->cand[i]),
			                        fig[i] / c->size * 1e6);
		log_debug("tuned %s of %zu bytes (%s) over %d ranks: %s us -> %s",
		          dp_kind_name(s->kind), s->bytes, yd_dtype_name(s->dtype), c->size, line,
		          yd_algo_name(s->cand[best]));
	}
	return 0;
}

enum yd_algo dp_tune_chosen(yd_comm *c, enum dp_kind kind, size_t bytes, enum yd_dtype dt)
{
	struct dp_tune_size *s = find(&c->tune, kind, bytes, dt);
	return s ? (enum yd_algo)atomic_load_explicit(&s->chosen, memory_order_relaxed)
	         : YD_ALGO_AUTO;
}
