/* progress.c: nonblocking requests and the communicator's progress thread.
 *
 * Operations on one communicator run in the order the application issued them. The thread
 * starts with the first nonblocking call. A blocking call runs on the caller's thread when
 * nothing is queued (no hand-off latency), else it queues behind the pending requests and
 * waits. The thread runs a queued collective on its own; consecutive point-to-point requests
 * progress together as one growing transfer set, so isend followed by recv on both sides of
 * a pair cannot deadlock however large the messages. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "dataplane/dp.h"

struct yd_request {
	yd_comm *c;
	struct dp_op op;
	int rc, done, heap;
	int xi; /* index in the thread's transfer set while active */
	struct yd_request *next;
};

static void prepare(yd_comm *c, struct dp_op *o)
{
	if (o->kind == DP_P2P)
		return;
	o->seq = ++c->seq;
	o->algo = o->kind == DP_BARRIER || o->kind == DP_SPLIT
	              ? YD_ALGO_AUTO
	              : dp_algo_select(c, o->kind, dp_op_select_bytes(c, o));
	/* `auto` chose (o->kind takes no forced c->algo): tune.c may change it */
	o->tune =
	    o->kind != DP_BARRIER && o->kind != DP_SPLIT && !dp_algo_supported(o->kind, c->algo);
}

/* Runs o on this thread: the algorithm of a tuned size first (tune.c), then the
 * announcement that mismatch checks read, the operation, and its time for the tuning. */
static int run_op(yd_comm *c, struct dp_op *o)
{
	struct dp_tune_call tc;
	dp_tune_pick(c, o, &tc);
	dp_announce(c, o);
	uint64_t t0 = tc.s ? yard_now_mono_ns() : 0;
	int rc = dp_op_execute(c, o);
	if (rc == 0 && tc.s)
		rc = dp_tune_done(c, o, &tc, (double)(yard_now_mono_ns() - t0) / 1e9);
	return rc;
}

static void complete(yd_comm *c, struct yd_request *r, int rc)
{
	/* called with q_lock held */
	r->rc = rc;
	r->done = 1;
	pthread_cond_broadcast(&c->q_cond);
}

struct active {
	struct dp_xfer *x;
	struct yd_request **req;
	int n, cap;
};

static int active_add(yd_comm *c, struct active *a, struct yd_request *r)
{
	if (a->n == a->cap) {
		int cap = a->cap ? a->cap * 2 : 16;
		struct dp_xfer *nx = realloc(a->x, sizeof *nx * (size_t)cap);
		if (!nx)
			return YARD_ENOMEM;
		a->x = nx;
		struct yd_request **nr = realloc(a->req, sizeof *nr * (size_t)cap);
		if (!nr)
			return YARD_ENOMEM;
		a->req = nr;
		a->cap = cap;
	}
	struct dp_op *o = &r->op;
	size_t bytes = o->count * yd_dtype_size(o->dtype);
	if (o->is_send)
		dp_x_send(&a->x[a->n], o, o->root, o->sendbuf, bytes);
	else
		dp_x_recv(&a->x[a->n], o, o->root, o->recvbuf, bytes);
	dp_xfer_prepare(c, &a->x[a->n]);
	a->req[a->n] = r;
	r->xi = a->n++;
	return 0;
}

static void *progress_main(void *arg)
{
	yd_comm *c = arg;
	struct active a = {0};
	struct dp_xset set = {0};
	uint64_t last = yard_now_mono_ms();
	pthread_mutex_lock(&c->q_lock);
	for (;;) {
		while (!c->thread_stop && !c->q_head && a.n == 0) {
			c->thread_busy = 0;
			pthread_cond_broadcast(&c->q_cond);
			pthread_cond_wait(&c->q_cond, &c->q_lock);
		}
		if (c->thread_stop)
			break;
		c->thread_busy = 1;
		/* point-to-point requests at the head join the active set */
		int added = 0;
		/* (device buffers are staged by dp_op_execute, one at a time) */
		while (c->q_head && c->q_head->op.kind == DP_P2P && !c->q_head->op.device) {
			struct yd_request *r = c->q_head;
			c->q_head = r->next;
			if (!c->q_head)
				c->q_tail = NULL;
			if (a.n == 0) {
				set.x = a.x;
				set.n = 0;
				dp_xset_begin(c, &set);
			}
			int rc = active_add(c, &a, r);
			if (rc) {
				complete(c, r, rc);
				continue;
			}
			added = 1;
		}
		if (added) {
			set.x = a.x;
			set.n = a.n;
			for (int i = 0; i < a.n; i++)
				if (c->peers[a.x[i].peer].transport == YD_TRANSPORT_SHM)
					set.uses_shm = 1;
			last = yard_now_mono_ms();
		}
		if (a.n == 0 && c->q_head) {
			struct yd_request *r = c->q_head;
			c->q_head = r->next;
			if (!c->q_head)
				c->q_tail = NULL;
			pthread_mutex_unlock(&c->q_lock);
			int rc = run_op(c, &r->op);
			pthread_mutex_lock(&c->q_lock);
			complete(c, r, rc);
			continue;
		}
		if (a.n == 0)
			continue;
		pthread_mutex_unlock(&c->q_lock);
		int progressed = 0;
		int rc = dp_xset_progress(c, &set, &progressed);
		if (rc == 0 && !progressed) {
			rc = dp_xset_check_deadline(c, &set, last);
			if (rc == 0)
				rc = dp_xset_wait(c, &set, 5);
		}
		if (progressed)
			last = yard_now_mono_ms();
		pthread_mutex_lock(&c->q_lock);
		int pending = 0;
		for (int i = 0; i < a.n; i++) {
			struct yd_request *r = a.req[i];
			if (!r)
				continue;
			if (rc || a.x[i].complete) {
				complete(c, r, rc);
				a.req[i] = NULL;
			} else {
				pending++;
			}
		}
		if (!pending)
			a.n = 0;
	}
	/* stopping: whatever is left fails */
	for (int i = 0; i < a.n; i++)
		if (a.req[i])
			complete(c, a.req[i], YARD_EABORTED);
	while (c->q_head) {
		struct yd_request *r = c->q_head;
		c->q_head = r->next;
		complete(c, r, YARD_EABORTED);
	}
	c->q_tail = NULL;
	c->thread_busy = 0;
	pthread_mutex_unlock(&c->q_lock);
	free(a.x);
	free(a.req);
	return NULL;
}

static int ensure_thread(yd_comm *c)
{
	if (c->thread_started)
		return 0;
	if (pthread_create(&c->thread, NULL, progress_main, c) != 0)
		return YARD_ENOMEM;
	c->thread_started = 1;
	return 0;
}

static void enqueue(yd_comm *c, struct yd_request *r)
{
	/* called with q_lock held */
	r->next = NULL;
	if (c->q_tail)
		c->q_tail->next = r;
	else
		c->q_head = r;
	c->q_tail = r;
	pthread_cond_broadcast(&c->q_cond);
	dp_wake(c);
}

int dp_submit(yd_comm *c, struct dp_op *o, yd_request **req)
{
	if (!req)
		return YARD_EINVAL;
	*req = NULL;
	struct yd_request *r = calloc(1, sizeof *r);
	if (!r)
		return YARD_ENOMEM;
	prepare(c, o);
	r->c = c;
	r->op = *o;
	r->heap = 1;
	pthread_mutex_lock(&c->q_lock);
	int rc = ensure_thread(c);
	if (rc) {
		pthread_mutex_unlock(&c->q_lock);
		free(r);
		return rc;
	}
	enqueue(c, r);
	pthread_mutex_unlock(&c->q_lock);
	*req = r;
	return 0;
}

int dp_run_blocking(yd_comm *c, struct dp_op *o)
{
	prepare(c, o);
	pthread_mutex_lock(&c->q_lock);
	if (!c->thread_started || (!c->q_head && !c->thread_busy)) {
		pthread_mutex_unlock(&c->q_lock);
		return run_op(c, o);
	}
	struct yd_request r = {.c = c, .op = *o};
	enqueue(c, &r);
	while (!r.done)
		pthread_cond_wait(&c->q_cond, &c->q_lock);
	pthread_mutex_unlock(&c->q_lock);
	return r.rc;
}

int yd_wait(yd_request *req)
{
	if (!req)
		return YARD_EINVAL;
	yd_comm *c = req->c;
	pthread_mutex_lock(&c->q_lock);
	while (!req->done)
		pthread_cond_wait(&c->q_cond, &c->q_lock);
	pthread_mutex_unlock(&c->q_lock);
	int rc = req->rc;
	free(req);
	return rc;
}

int yd_test(yd_request *req)
{
	if (!req)
		return 1;
	pthread_mutex_lock(&req->c->q_lock);
	int d = req->done;
	pthread_mutex_unlock(&req->c->q_lock);
	return d;
}

void dp_progress_stop(yd_comm *c)
{
	if (!c->thread_started)
		return;
	pthread_mutex_lock(&c->q_lock);
	c->thread_stop = 1;
	pthread_cond_broadcast(&c->q_cond);
	pthread_mutex_unlock(&c->q_lock);
	dp_wake(c);
	pthread_join(c->thread, NULL);
	c->thread_started = 0;
}
