/* coll_ring.c: ring allreduce, reduce-scatter and allgather (Patarasuk & Yuan: bandwidth
 * optimal, any world size). Each rank's buffer is cut into `size` chunks and every chunk into
 * segments of at most SEG_BYTES; a segment is forwarded to the right neighbour as soon as it
 * has been received (and reduced), so sending, receiving and reducing overlap, and receives
 * are posted one step ahead so payloads land in place rather than in the unexpected queue.
 * Every chunk is reduced by one rank in one order and then copied, so all ranks end with
 * bit-identical results. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dataplane/reduce.h"
#include "dataplane/yd_impl.h"

#define SEG_BYTES (512 * 1024)

static int mod(int a, int n)
{
	return ((a % n) + n) % n;
}

/* Segmenting of a chunk of `elems` elements. */
static int nsegs(size_t elems, size_t es)
{
	size_t bytes = elems * es;
	return bytes ? (int)((bytes + SEG_BYTES - 1) / SEG_BYTES) : 0;
}

struct ring {
	struct cx *cx;
	int n, r, left, right, steps, maxseg;
	size_t es;
	size_t (*chunk_begin)(const struct ring *, int c); /* element offset of chunk c */
	size_t chunk_count;                                /* total elements (allreduce) */
	struct yd_request **rreq;                          /* [2][maxseg] by step parity */
	struct yd_request **sreq;                          /* [steps][maxseg] */
};

static size_t ar_begin(const struct ring *g, int c)
{
	return part_begin(g->chunk_count, g->n, c);
}

static size_t chunk_elems(const struct ring *g, int c)
{
	return g->chunk_begin(g, c + 1) - g->chunk_begin(g, c);
}

static size_t seg_off(const struct ring *g, int c, int k)
{
	size_t e = chunk_elems(g, c);
	return g->chunk_begin(g, c) + part_begin(e, nsegs(e, g->es), k);
}

static size_t seg_elems(const struct ring *g, int c, int k)
{
	size_t e = chunk_elems(g, c);
	int s = nsegs(e, g->es);
	return part_begin(e, s, k + 1) - part_begin(e, s, k);
}

static int ring_setup(struct ring *g, struct cx *cx, int steps, size_t total)
{
	g->cx = cx;
	g->n = cx->comm->size;
	g->r = cx->comm->rank;
	g->left = mod(g->r - 1, g->n);
	g->right = mod(g->r + 1, g->n);
	g->steps = steps;
	g->es = cx->esize;
	g->maxseg = nsegs((total + (size_t)g->n - 1) / (size_t)g->n, g->es);
	if (g->maxseg < 1)
		g->maxseg = 1;
	g->rreq = calloc(2 * (size_t)g->maxseg, sizeof *g->rreq);
	g->sreq = calloc((size_t)(steps + 1) * (size_t)g->maxseg, sizeof *g->sreq);
	if (!g->rreq || !g->sreq) {
		free(g->rreq);
		free(g->sreq);
		comm_fail(cx->comm, YARD_ENOMEM, 1, "out of memory");
		return YARD_ENOMEM;
	}
	return 0;
}

static void ring_free(struct ring *g)
{
	free(g->rreq);
	free(g->sreq);
}

static int wait_slot(struct cx *cx, struct yd_request **slot)
{
	if (!*slot)
		return 0;
	int rc = cx_wait(cx, *slot);
	*slot = NULL;
	return rc;
}

static int wait_step_sends(struct ring *g, int step)
{
	for (int k = 0; k < g->maxseg; k++) {
		int rc = wait_slot(g->cx, &g->sreq[(size_t)step * (size_t)g->maxseg + (size_t)k]);
		if (rc)
			return rc;
	}
	return 0;
}

/* allreduce: steps 0..n-2 reduce-scatter, n-1..2n-3 allgather. */
static int ar_send_chunk(const struct ring *g, int t)
{
	return t < g->n - 1 ? mod(g->r - t, g->n) : mod(g->r + 1 - (t - (g->n - 1)), g->n);
}

static int ar_recv_chunk(const struct ring *g, int t)
{
	return t < g->n - 1 ? mod(g->r - t - 1, g->n) : mod(g->r - (t - (g->n - 1)), g->n);
}

static int ar_post_recvs(struct ring *g, int t, char *dst, char *scratch[2])
{
	int c = ar_recv_chunk(g, t);
	int ns = nsegs(chunk_elems(g, c), g->es);
	for (int k = 0; k < ns; k++) {
		char *base;
		if (t < g->n - 1) {
			base = scratch[t % 2] + (seg_off(g, c, k) - g->chunk_begin(g, c)) * g->es;
		} else {
			/* dst chunk c was sent from at reduce-scatter step u; that must be done */
			int u = t - (g->n - 1);
			int rc =
			    wait_slot(g->cx, &g->sreq[(size_t)u * (size_t)g->maxseg + (size_t)k]);
			if (rc)
				return rc;
			base = dst + seg_off(g, c, k) * g->es;
		}
		int rc = cx_irecv(g->cx, g->left, t, base, seg_elems(g, c, k) * g->es,
		                  &g->rreq[(t % 2) * g->maxseg + k]);
		if (rc)
			return rc;
	}
	return 0;
}

int coll_ring_allreduce(struct cx *cx)
{
	struct ring g = {0};
	const struct coll_args *a = &cx->a;
	int n = cx->comm->size;
	g.chunk_begin = ar_begin;
	g.chunk_count = a->count;
	int rc = ring_setup(&g, cx, 2 * (n - 1), a->count);
	if (rc)
		return rc;
	const char *src = a->sendbuf;
	char *dst = a->recvbuf;
	size_t es = g.es;
	char *scratch[2];
	size_t maxchunk = chunk_elems(&g, 0) * es;
	scratch[0] = cx_scratch(cx, 0, maxchunk);
	scratch[1] = cx_scratch(cx, 1, maxchunk);
	if (!scratch[0] || !scratch[1]) {
		ring_free(&g);
		return YARD_ENOMEM;
	}
	/* step 0: my own chunk goes out as is */
	int c0 = ar_send_chunk(&g, 0);
	for (int k = 0; !rc && k < nsegs(chunk_elems(&g, c0), es); k++)
		rc = cx_isend(cx, g.right, 0, src + seg_off(&g, c0, k) * es,
		              seg_elems(&g, c0, k) * es, &g.sreq[k]);
	if (!rc)
		rc = ar_post_recvs(&g, 0, dst, scratch);
	for (int t = 0; !rc && t < g.steps; t++) {
		if (t + 1 < g.steps && (rc = ar_post_recvs(&g, t + 1, dst, scratch)))
			break;
		int c = ar_recv_chunk(&g, t);
		int ns = nsegs(chunk_elems(&g, c), es);
		for (int k = 0; !rc && k < ns; k++) {
			rc = wait_slot(cx, &g.rreq[(t % 2) * g.maxseg + k]);
			if (rc)
				break;
			size_t off = seg_off(&g, c, k), ne = seg_elems(&g, c, k);
			if (t < n - 1) {
				const char *in = scratch[t % 2] + (off - g.chunk_begin(&g, c)) * es;
				reduce_apply(dst + off * es, src + off * es, in, ne, a->dt, a->op);
				if (t == n - 2)
					reduce_finish_avg(dst + off * es, ne, a->dt, a->op, n);
			}
			if (t + 1 < g.steps)
				rc = cx_isend(
				    cx, g.right, t + 1, dst + off * es, ne * es,
				    &g.sreq[(size_t)(t + 1) * (size_t)g.maxseg + (size_t)k]);
		}
	}
	for (int t = 0; !rc && t <= g.steps; t++)
		rc = wait_step_sends(&g, t);
	ring_free(&g);
	return rc;
}

/* reduce-scatter: chunk c is recvcount elements at c*recvcount of the send buffer. Step t
 * sends the partial sum of chunk r-t-1 and receives chunk r-t-2; the last step yields chunk r.
 * Partial sums live in three rotating scratch slots (received at t, forwarded at t+1, reused
 * at t+3). */
static size_t rs_begin(const struct ring *g, int c)
{
	return (size_t)c * g->chunk_count;
}

int coll_ring_reduce_scatter(struct cx *cx)
{
	struct ring g = {0};
	const struct coll_args *a = &cx->a;
	int n = cx->comm->size;
	g.chunk_begin = rs_begin;
	g.chunk_count = a->count;
	int rc = ring_setup(&g, cx, n - 1, a->count * (size_t)n);
	if (rc)
		return rc;
	size_t es = g.es, bytes = a->count * es;
	const char *src = a->sendbuf;
	char *scratch[3];
	for (int i = 0; i < 3; i++)
		if (!(scratch[i] = cx_scratch(cx, i, bytes))) {
			ring_free(&g);
			return YARD_ENOMEM;
		}
	int ns = nsegs(a->count, es);
	/* chunk-relative segment offsets are the same for every chunk */
	struct yd_request **rreq = calloc((size_t)(n - 1) * (size_t)ns, sizeof *rreq);
	if (!rreq) {
		ring_free(&g);
		return YARD_ENOMEM;
	}
	int c0 = mod(g.r - 1, n);
	for (int k = 0; !rc && k < ns; k++)
		rc = cx_isend(cx, g.right, 0, src + seg_off(&g, c0, k) * es,
		              seg_elems(&g, c0, k) * es, &g.sreq[k]);
	for (int t = 0; !rc && t < n - 1; t++) {
		/* post this step's receives (slot t%3 was last forwarded at step t-2) */
		for (int k = 0; !rc && k < ns; k++) {
			if (t >= 3)
				rc = wait_slot(
				    cx, &g.sreq[(size_t)(t - 2) * (size_t)g.maxseg + (size_t)k]);
			size_t rel = (seg_off(&g, 0, k)) * es;
			if (!rc)
				rc = cx_irecv(cx, g.left, t, scratch[t % 3] + rel,
				              seg_elems(&g, 0, k) * es,
				              &rreq[(size_t)t * (size_t)ns + (size_t)k]);
		}
		int c = mod(g.r - t - 2, n);
		for (int k = 0; !rc && k < ns; k++) {
			rc = wait_slot(cx, &rreq[(size_t)t * (size_t)ns + (size_t)k]);
			if (rc)
				break;
			size_t rel = seg_off(&g, 0, k), ne = seg_elems(&g, 0, k);
			const char *mine = src + (g.chunk_begin(&g, c) + rel) * es;
			char *in = scratch[t % 3] + rel * es;
			if (t == n - 2) {
				char *out = (char *)a->recvbuf + rel * es;
				reduce_apply(out, mine, in, ne, a->dt, a->op);
				reduce_finish_avg(out, ne, a->dt, a->op, n);
			} else {
				reduce_apply(in, mine, in, ne, a->dt, a->op);
				rc = cx_isend(
				    cx, g.right, t + 1, in, ne * es,
				    &g.sreq[(size_t)(t + 1) * (size_t)g.maxseg + (size_t)k]);
			}
		}
	}
	for (size_t i = 0; !rc && i < (size_t)(n - 1) * (size_t)ns; i++)
		rc = wait_slot(cx, &rreq[i]);
	for (int t = 0; !rc && t <= g.steps; t++)
		rc = wait_step_sends(&g, t);
	free(rreq);
	ring_free(&g);
	return rc;
}

/* allgather: every chunk region of the receive buffer is written once, so all receives are
 * posted up front straight into place; segment k of step t is forwarded at step t+1. */
int coll_ring_allgather(struct cx *cx)
{
	struct ring g = {0};
	const struct coll_args *a = &cx->a;
	int n = cx->comm->size;
	g.chunk_begin = rs_begin;
	g.chunk_count = a->count;
	int rc = ring_setup(&g, cx, n - 1, a->count * (size_t)n);
	if (rc)
		return rc;
	size_t es = g.es;
	char *dst = a->recvbuf;
	char *mine = dst + (size_t)g.r * a->count * es;
	if ((const char *)a->sendbuf != mine)
		memmove(mine, a->sendbuf, a->count * es);
	int ns = nsegs(a->count, es);
	struct yd_request **rreq = calloc((size_t)(n - 1) * (size_t)ns, sizeof *rreq);
	if (!rreq) {
		ring_free(&g);
		return YARD_ENOMEM;
	}
	for (int t = 0; !rc && t < n - 1; t++) {
		int c = mod(g.r - t - 1, n);
		for (int k = 0; !rc && k < ns; k++)
			rc = cx_irecv(cx, g.left, t, dst + seg_off(&g, c, k) * es,
			              seg_elems(&g, c, k) * es,
			              &rreq[(size_t)t * (size_t)ns + (size_t)k]);
	}
	for (int k = 0; !rc && k < ns; k++)
		rc = cx_isend(cx, g.right, 0, dst + seg_off(&g, g.r, k) * es,
		              seg_elems(&g, g.r, k) * es, &g.sreq[k]);
	for (int t = 0; !rc && t < n - 1; t++) {
		int c = mod(g.r - t - 1, n);
		for (int k = 0; !rc && k < ns; k++) {
			rc = wait_slot(cx, &rreq[(size_t)t * (size_t)ns + (size_t)k]);
			if (!rc && t + 1 < n - 1)
				rc = cx_isend(
				    cx, g.right, t + 1, dst + seg_off(&g, c, k) * es,
				    seg_elems(&g, c, k) * es,
				    &g.sreq[(size_t)(t + 1) * (size_t)g.maxseg + (size_t)k]);
		}
	}
	for (int t = 0; !rc && t <= g.steps; t++)
		rc = wait_step_sends(&g, t);
	free(rreq);
	ring_free(&g);
	return rc;
}
