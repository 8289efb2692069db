/* coll_naive.c: the direct ("one-shot") algorithms: every rank sends its whole contribution
 * straight to every rank that needs it, in one step. Fewest latencies (one round), most
 * bytes; the best choice for small buffers. Reductions fold the contributions in rank order
 * so every rank computes the same bits. Also the barrier (zero-byte all-to-all). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dataplane/reduce.h"
#include "dataplane/yd_impl.h"

/* Exchanges: sends send_of(p) to every p, receives from every p into recv_of(p). */
static int exchange(struct cx *cx, const char *(*send_of)(struct cx *, int),
                    char *(*recv_of)(struct cx *, int, char *), char *scratch, size_t bytes)
{
	int n = cx->comm->size, me = cx->comm->rank, rc = 0;
	struct yd_request **req = calloc(2 * (size_t)n, sizeof *req);
	if (!req)
		return YARD_ENOMEM;
	for (int i = 1; !rc && i < n; i++) {
		int p = (me + i) % n;
		rc = cx_irecv(cx, p, 0, recv_of(cx, p, scratch), bytes, &req[p]);
	}
	for (int i = 1; !rc && i < n; i++) {
		int p = (me - i + n) % n;
		rc = cx_isend(cx, p, 0, send_of(cx, p), bytes, &req[n + p]);
	}
	for (int i = 0; i < 2 * n; i++)
		if (req[i]) {
			int r2 = cx_wait(cx, req[i]);
			rc = rc ? rc : r2;
		}
	free(req);
	return rc;
}

static const char *send_whole(struct cx *cx, int p)
{
	(void)p;
	return cx->a.sendbuf;
}

static char *recv_slot(struct cx *cx, int p, char *scratch)
{
	return scratch + (size_t)p * cx->a.count * cx->esize;
}

static const char *send_chunk_of(struct cx *cx, int p)
{
	return (const char *)cx->a.sendbuf + (size_t)p * cx->a.count * cx->esize;
}

/* Folds slot 0..n-1 (slot `me` = mine) in rank order into out. */
static void fold(struct cx *cx, char *out, const char *mine, const char *scratch, size_t elems)
{
	int n = cx->comm->size, me = cx->comm->rank;
	size_t bytes = elems * cx->esize;
	const char *first = me == 0 ? mine : scratch;
	const char *second = me == 1 ? mine : scratch + bytes;
	reduce_apply(out, first, second, elems, cx->a.dt, cx->a.op);
	for (int p = 2; p < n; p++)
		reduce_apply(out, out, p == me ? mine : scratch + (size_t)p * bytes, elems,
		             cx->a.dt, cx->a.op);
	reduce_finish_avg(out, elems, cx->a.dt, cx->a.op, n);
}

int coll_naive_allreduce(struct cx *cx)
{
	int n = cx->comm->size, me = cx->comm->rank;
	size_t bytes = cx->a.count * cx->esize;
	char *scratch = cx_scratch(cx, 0, bytes * (size_t)n);
	if (!scratch)
		return YARD_ENOMEM;
	int rc = exchange(cx, send_whole, recv_slot, scratch, bytes);
	if (rc)
		return rc;
	/* in place, `out` is also `mine`: keep a copy of it in its own slot first */
	const char *mine = cx->a.sendbuf;
	if (cx->a.sendbuf == cx->a.recvbuf && n > 2) {
		memcpy(scratch + (size_t)me * bytes, mine, bytes);
		mine = scratch + (size_t)me * bytes;
	}
	fold(cx, cx->a.recvbuf, mine, scratch, cx->a.count);
	return 0;
}

int coll_naive_reduce_scatter(struct cx *cx)
{
	int n = cx->comm->size, me = cx->comm->rank;
	size_t bytes = cx->a.count * cx->esize;
	char *scratch = cx_scratch(cx, 0, bytes * (size_t)n);
	if (!scratch)
		return YARD_ENOMEM;
	int rc = exchange(cx, send_chunk_of, recv_slot, scratch, bytes);
	if (rc)
		return rc;
	const char *mine = (const char *)cx->a.sendbuf + (size_t)me * bytes;
	fold(cx, cx->a.recvbuf, mine, scratch, cx->a.count);
	return 0;
}

static char *recv_in_place(struct cx *cx, int p, char *scratch)
{
	(void)scratch;
	return (char *)cx->a.recvbuf + (size_t)p * cx->a.count * cx->esize;
}

int coll_naive_allgather(struct cx *cx)
{
	size_t bytes = cx->a.count * cx->esize;
	if (cx->a.kind == COLL_BARRIER)
		return exchange(cx, send_whole, recv_in_place, NULL, 0);
	char *mine = (char *)cx->a.recvbuf + (size_t)cx->comm->rank * bytes;
	if ((const char *)cx->a.sendbuf != mine)
		memmove(mine, cx->a.sendbuf, bytes);
	struct cx view = *cx;
	view.a.sendbuf = mine;
	int rc = exchange(&view, send_whole, recv_in_place, NULL, bytes);
	cx->outstanding = view.outstanding;
	return rc;
}
