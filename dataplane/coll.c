/* coll.c: how collectives run. Each communicator has a worker thread that executes
 * collective jobs in FIFO order (so yd_iallreduce overlaps the caller's work); a blocking
 * collective issued while the worker is idle runs on the calling thread instead, saving two
 * thread hand-offs. A job is an algorithm (coll_*.c) written as nonblocking sends/receives
 * through the cx_* helpers, which stamp every message with the job's {kind, op, dtype, count,
 * root, algo, seq} so the receiver can detect mismatched calls, apply the deadline to every
 * wait, and on any failure drain the job's outstanding requests before it returns. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/reduce.h"
#include "dataplane/yd_impl.h"

static const char *const kind_names[COLL_KIND_COUNT] = {
    "none", "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "barrier", "split"};

const char *coll_kind_name(enum coll_kind k)
{
	return (unsigned)k < COLL_KIND_COUNT ? kind_names[k] : "?";
}

/* ---- the cx helpers the algorithms use ---- */

static struct yd_request *cx_req(struct cx *cx, int peer, int step, void *buf, size_t bytes)
{
	struct yd_request *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->comm = cx->comm;
	r->peer = cx->comm->net_rank[peer];
	r->comm_peer = peer;
	r->chan = CHAN_COLL;
	r->tag = step;
	r->meta.coll = (uint8_t)cx->a.kind;
	r->meta.op = (uint8_t)cx->a.op;
	r->meta.dtype = (uint8_t)cx->a.dt;
	r->meta.algo = (uint8_t)cx->a.algo;
	r->meta.root = cx->a.root;
	r->meta.seq = cx->seq;
	r->meta.count = cx->a.count;
	r->buf = buf;
	r->len = bytes;
	r->opname = cx->name;
	r->op_seq = cx->seq;
	return r;
}

static int cx_post(struct cx *cx, struct yd_request *r, int is_send, struct yd_request **out)
{
	if (!r) {
		comm_fail(cx->comm, YARD_ENOMEM, 1, "out of memory");
		return YARD_ENOMEM;
	}
	int rc = is_send ? net_post_send(cx->comm->net, r) : net_post_recv(cx->comm->net, r);
	if (rc) {
		free(r);
		return rc;
	}
	r->cx_next = cx->outstanding;
	cx->outstanding = r;
	*out = r;
	return 0;
}

int cx_isend(struct cx *cx, int peer, int step, const void *buf, size_t bytes,
             struct yd_request **out)
{
	return cx_post(cx, cx_req(cx, peer, step, (void *)buf, bytes), 1, out);
}

int cx_irecv(struct cx *cx, int peer, int step, void *buf, size_t bytes, struct yd_request **out)
{
	return cx_post(cx, cx_req(cx, peer, step, buf, bytes), 0, out);
}

static void cx_forget(struct cx *cx, struct yd_request *req)
{
	for (struct yd_request **pp = &cx->outstanding; *pp; pp = &(*pp)->cx_next)
		if (*pp == req) {
			*pp = req->cx_next;
			break;
		}
}

int cx_wait(struct cx *cx, struct yd_request *req)
{
	yd_comm *comm = cx->comm;
	if (net_wait_until(comm->net, req, comm_deadline(comm)) == YARD_ETIMEDOUT) {
		char what[100];
		snprintf(what, sizeof what, "%s %zu bytes",
		         req->kind == REQ_SEND ? "sending" : "receiving", req->len);
		comm_fail_timeout(comm, req->comm_peer, what);
		net_wait_until(comm->net, req, 0);
	}
	int rc = req->rc;
	cx_forget(cx, req);
	free(req);
	return rc;
}

int cx_sendrecv(struct cx *cx, int to, int sstep, const void *sbuf, size_t sbytes, int from,
                int rstep, void *rbuf, size_t rbytes)
{
	struct yd_request *s, *r;
	int rc = cx_irecv(cx, from, rstep, rbuf, rbytes, &r);
	if (rc)
		return rc;
	if ((rc = cx_isend(cx, to, sstep, sbuf, sbytes, &s)))
		return rc;
	rc = cx_wait(cx, r);
	int rc2 = cx_wait(cx, s);
	return rc ? rc : rc2;
}

void *cx_scratch(struct cx *cx, int slot, size_t bytes)
{
	yd_comm *c = cx->comm;
	if (c->scratch_len[slot] < bytes) {
		free(c->scratch[slot]);
		c->scratch[slot] = malloc(bytes);
		c->scratch_len[slot] = c->scratch[slot] ? bytes : 0;
		if (!c->scratch[slot]) {
			comm_fail(c, YARD_ENOMEM, 1, "out of memory for a %zu-byte buffer", bytes);
			return NULL;
		}
	}
	return c->scratch[slot];
}

/* ---- running one job ---- */

static int run_trivial(const struct coll_args *a, size_t es)
{
	/* a world of one: the result is the input */
	size_t bytes = a->count * es;
	if (a->kind != COLL_BROADCAST && a->kind != COLL_BARRIER && a->sendbuf != a->recvbuf &&
	    bytes)
		memmove(a->recvbuf, a->sendbuf, bytes);
	return 0;
}

static int dispatch(struct cx *cx)
{
	struct coll_args *a = &cx->a;
	switch (a->kind) {
	case COLL_ALLREDUCE:
		switch (a->algo) {
		case YD_ALGO_RING:
			return coll_ring_allreduce(cx);
		case YD_ALGO_NAIVE:
			return coll_naive_allreduce(cx);
		default:
			break;
		}
		break;
	case COLL_REDUCE_SCATTER:
		return a->algo == YD_ALGO_NAIVE ? coll_naive_reduce_scatter(cx)
		                                : coll_ring_reduce_scatter(cx);
	case COLL_ALLGATHER:
	case COLL_SPLIT:
		return a->algo == YD_ALGO_NAIVE ? coll_naive_allgather(cx)
		                                : coll_ring_allgather(cx);
	case COLL_BROADCAST:
		return coll_tree_broadcast(cx);
	case COLL_REDUCE:
		return coll_tree_reduce(cx);
	case COLL_BARRIER:
		return coll_naive_allgather(cx);
	default:
		break;
	}
	comm_fail(cx->comm, YARD_EUNSUPPORTED, 1, "algorithm %s is not implemented for %s",
	          yd_algo_name(a->algo), coll_kind_name(a->kind));
	return YARD_EUNSUPPORTED;
}

int coll_run_job(yd_comm *comm, struct coll_args *a, uint64_t seq)
{
	struct cx cx = {.comm = comm, .a = *a, .seq = seq, .name = coll_kind_name(a->kind)};
	cx.esize = yd_dtype_size(a->dt);
	int rc = comm_check(comm);
	if (rc)
		return rc;
	if (comm->size == 1)
		return run_trivial(a, cx.esize);
	if (a->count == 0 && a->kind != COLL_BARRIER)
		return 0;
	cx.a.algo = algo_select(comm, a);
	rc = dispatch(&cx);
	if (rc && !comm_check(comm))
		comm_fail(comm, rc, 1, "%s failed: %s", cx.name, yard_strerror(rc));
	while (cx.outstanding) { /* after a failure: every request completes promptly */
		struct yd_request *r = cx.outstanding;
		net_wait_until(comm->net, r, 0);
		cx.outstanding = r->cx_next;
		free(r);
	}
	if (!rc)
		rc = comm_check(comm);
	return rc;
}

/* ---- the worker ---- */

static void *worker_main(void *arg)
{
	yd_comm *comm = arg;
	struct yd_net *net = comm->net;
	pthread_mutex_lock(&net->mu);
	for (;;) {
		while (!comm->worker_stop && (!comm->jobs || comm->inline_busy))
			pthread_cond_wait(&comm->worker_cond, &net->mu);
		if (!comm->jobs)
			break;
		struct yd_request *job = comm->jobs;
		comm->jobs = job->next;
		if (!comm->jobs)
			comm->jobs_tail = NULL;
		comm->worker_busy = 1;
		pthread_mutex_unlock(&net->mu);
		int rc = coll_run_job(comm, &job->args, job->op_seq);
		pthread_mutex_lock(&net->mu);
		comm->worker_busy = 0;
		job->rc = rc;
		job->done = 1;
		pthread_cond_broadcast(&net->cond);
		pthread_cond_broadcast(&comm->worker_cond);
	}
	pthread_mutex_unlock(&net->mu);
	return NULL;
}

void coll_stop_worker(yd_comm *comm)
{
	struct yd_net *net = comm->net;
	pthread_mutex_lock(&net->mu);
	if (comm->jobs || comm->worker_busy)
		comm_fail_locked(comm, YARD_EABORTED, 0,
		                 "communicator destroyed with operations pending");
	comm->worker_stop = 1;
	pthread_cond_broadcast(&comm->worker_cond);
	int started = comm->worker_started;
	pthread_mutex_unlock(&net->mu);
	if (started)
		pthread_join(comm->worker, NULL);
}

static int validate(yd_comm *c, const char *name, const struct coll_args *a)
{
	const char *why = NULL;
	if ((unsigned)a->dt >= YD_DTYPE_COUNT)
		why = "invalid dtype";
	else if ((unsigned)a->op >= YD_OP_COUNT)
		why = "invalid op";
	else if ((a->kind == COLL_BROADCAST || a->kind == COLL_REDUCE) &&
	         (a->root < 0 || a->root >= c->size))
		why = "root out of range";
	else if (a->count && a->kind != COLL_BROADCAST && (!a->sendbuf || !a->recvbuf))
		why = "NULL buffer";
	else if (a->count && a->kind == COLL_BROADCAST && !a->recvbuf)
		why = "NULL buffer";
	if (!why)
		return 0;
	pthread_mutex_lock(&c->net->mu);
	snprintf(c->last_error, sizeof c->last_error, "%s: %s", name, why);
	pthread_mutex_unlock(&c->net->mu);
	return YARD_EINVAL;
}

/* Queues a job (or, with inline_ok and an idle worker, runs it here). *req gets the job when
 * queued; NULL when it already ran (then the return value is its result). */
static int submit(yd_comm *c, struct coll_args *a, int inline_ok, yd_request **req,
                  uint64_t *seq_out)
{
	const char *name = coll_kind_name(a->kind);
	*req = NULL;
	if (!c)
		return YARD_EINVAL;
	int rc = validate(c, name, a);
	if (rc)
		return rc;
	struct yd_net *net = c->net;
	pthread_mutex_lock(&net->mu);
	uint64_t seq = ++c->coll_seq;
	if (seq_out)
		*seq_out = seq;
	if (c->failed_rc) {
		rc = c->failed_rc;
		pthread_mutex_unlock(&net->mu);
		return comm_op_error(c, name, seq, rc);
	}
	if (inline_ok && !c->jobs && !c->worker_busy) {
		c->inline_busy = 1;
		pthread_mutex_unlock(&net->mu);
		rc = coll_run_job(c, a, seq);
		pthread_mutex_lock(&net->mu);
		c->inline_busy = 0;
		pthread_cond_broadcast(&c->worker_cond);
		pthread_mutex_unlock(&net->mu);
		return rc ? comm_op_error(c, name, seq, rc) : 0;
	}
	struct yd_request *job = calloc(1, sizeof *job);
	if (!job) {
		pthread_mutex_unlock(&net->mu);
		return YARD_ENOMEM;
	}
	if (!c->worker_started) {
		if (pthread_create(&c->worker, NULL, worker_main, c) != 0) {
			pthread_mutex_unlock(&net->mu);
			free(job);
			return YARD_ENOMEM;
		}
		c->worker_started = 1;
	}
	job->comm = c;
	job->kind = REQ_COLL;
	job->args = *a;
	job->opname = name;
	job->op_seq = seq;
	if (c->jobs_tail)
		c->jobs_tail->next = job;
	else
		c->jobs = job;
	c->jobs_tail = job;
	pthread_cond_broadcast(&c->worker_cond);
	pthread_mutex_unlock(&net->mu);
	*req = job;
	return 0;
}

static int run_blocking(yd_comm *c, struct coll_args *a, uint64_t *seq_out)
{
	yd_request *req;
	int rc = submit(c, a, 1, &req, seq_out);
	if (rc || !req)
		return rc;
	return yd_wait(req);
}

int yd_allreduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count, enum yd_dtype dt,
                 enum yd_op op)
{
	struct coll_args a = {COLL_ALLREDUCE, sendbuf, recvbuf, count, dt, op, 0, YD_ALGO_AUTO};
	return run_blocking(c, &a, NULL);
}

int yd_iallreduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count, enum yd_dtype dt,
                  enum yd_op op, yd_request **req)
{
	struct coll_args a = {COLL_ALLREDUCE, sendbuf, recvbuf, count, dt, op, 0, YD_ALGO_AUTO};
	if (!req)
		return YARD_EINVAL;
	return submit(c, &a, 0, req, NULL);
}

int yd_reduce_scatter(yd_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                      enum yd_dtype dt, enum yd_op op)
{
	struct coll_args a = {COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dt, op, 0,
	                      YD_ALGO_AUTO};
	return run_blocking(c, &a, NULL);
}

int yd_allgather(yd_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount, enum yd_dtype dt)
{
	struct coll_args a = {COLL_ALLGATHER, sendbuf, recvbuf,     sendcount, dt,
	                      YD_SUM,         0,       YD_ALGO_AUTO};
	return run_blocking(c, &a, NULL);
}

int yd_allgather_internal(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                          enum yd_dtype dt, enum coll_kind kind, uint64_t *seq_out)
{
	struct coll_args a = {kind, sendbuf, recvbuf, count, dt, YD_SUM, 0, YD_ALGO_AUTO};
	return run_blocking(c, &a, seq_out);
}

int yd_broadcast(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int root)
{
	struct coll_args a = {COLL_BROADCAST, buf, buf, count, dt, YD_SUM, root, YD_ALGO_AUTO};
	return run_blocking(c, &a, NULL);
}

int yd_reduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count, enum yd_dtype dt,
              enum yd_op op, int root)
{
	struct coll_args a = {COLL_REDUCE, sendbuf, recvbuf, count, dt, op, root, YD_ALGO_AUTO};
	if (c && c->rank != root && !recvbuf)
		a.recvbuf = (void *)sendbuf; /* non-roots need no receive buffer */
	return run_blocking(c, &a, NULL);
}

int yd_barrier(yd_comm *c)
{
	struct coll_args a = {COLL_BARRIER, NULL, NULL, 0, YD_I32, YD_SUM, 0, YD_ALGO_AUTO};
	return run_blocking(c, &a, NULL);
}
