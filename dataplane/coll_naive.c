/* coll_naive.c: direct algorithms: every rank exchanges with every other rank at once.
 * Allreduce sends the whole buffer to everyone (one step, (n-1)·S per rank: the small-message
 * choice on shared memory); direct reduce-scatter and allgather (also the two halves of the
 * sharded parameter server, coll_ps.c); broadcast and reduce straight from and to the root.
 * Every receiver reduces in rank order, so every rank gets bit-identical results. */
#include "config.h"

#include <string.h>

#include "dataplane/dp.h"

/* Reduces n inputs in rank order into dst (dst may alias none of them). */
static void reduce_in_order(const struct dp_op *o, void *dst, char *const *in, int n, size_t count)
{
	if (n == 1) {
		memmove(dst, in[0], count * yd_dtype_size(o->dtype));
		return;
	}
	dp_op_reduce(o, dst, in[0], in[1], count);
	for (int r = 2; r < n; r++)
		dp_op_reduce(o, dst, dst, in[r], count);
}

int dp_naive_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count)
{
	int n = c->size, me = c->rank, nx = 0, rc;
	size_t bytes = count * yd_dtype_size(o->dtype);
	char *tmp = dp_scratch(c, bytes * (size_t)n + 1);
	char *in[n];
	struct dp_xfer x[2 * n];
	if (!tmp)
		return YARD_ENOMEM;
	for (int r = 0; r < n; r++) {
		in[r] = tmp + (size_t)r * bytes;
		if (r == me) {
			memcpy(in[r], src, bytes);
			continue;
		}
		dp_x_send(&x[nx++], o, r, src, bytes);
		dp_x_recv(&x[nx++], o, r, in[r], bytes);
	}
	if ((rc = dp_xfer_run(c, x, nx)) != 0)
		return rc;
	reduce_in_order(o, dst, in, n, count);
	return 0;
}

int dp_direct_reduce_scatter(yd_comm *c, const struct dp_op *o, const void *src, void *out,
                             const size_t *boff, const size_t *bcnt)
{
	int n = c->size, me = c->rank, nx = 0, rc;
	size_t esz = yd_dtype_size(o->dtype), mine = bcnt[me] * esz;
	char *tmp = dp_scratch(c, mine * (size_t)n + 1);
	char *in[n];
	struct dp_xfer x[2 * n];
	if (!tmp)
		return YARD_ENOMEM;
	for (int r = 0; r < n; r++) {
		in[r] = tmp + (size_t)r * mine;
		if (r == me) {
			memcpy(in[r], (const char *)src + boff[me] * esz, mine);
			continue;
		}
		dp_x_send(&x[nx++], o, r, (const char *)src + boff[r] * esz, bcnt[r] * esz);
		dp_x_recv(&x[nx++], o, r, in[r], mine);
	}
	if ((rc = dp_xfer_run(c, x, nx)) != 0)
		return rc;
	reduce_in_order(o, out, in, n, bcnt[me]);
	return 0;
}

int dp_direct_allgather(yd_comm *c, const struct dp_op *o, void *buf, const size_t *boff,
                        const size_t *bcnt)
{
	int n = c->size, me = c->rank, nx = 0;
	size_t esz = yd_dtype_size(o->dtype);
	struct dp_xfer x[2 * n];
	for (int r = 0; r < n; r++) {
		if (r == me)
			continue;
		dp_x_send(&x[nx++], o, r, (char *)buf + boff[me] * esz, bcnt[me] * esz);
		dp_x_recv(&x[nx++], o, r, (char *)buf + boff[r] * esz, bcnt[r] * esz);
	}
	return dp_xfer_run(c, x, nx);
}

int dp_naive_reduce_scatter(yd_comm *c, const struct dp_op *o, const void *src, void *dst,
                            size_t recvcount)
{
	size_t boff[c->size], bcnt[c->size];
	for (int r = 0; r < c->size; r++) {
		boff[r] = (size_t)r * recvcount;
		bcnt[r] = recvcount;
	}
	return dp_direct_reduce_scatter(c, o, src, dst, boff, bcnt);
}

int dp_naive_allgather(yd_comm *c, const struct dp_op *o, void *buf, size_t sendcount)
{
	size_t boff[c->size], bcnt[c->size];
	for (int r = 0; r < c->size; r++) {
		boff[r] = (size_t)r * sendcount;
		bcnt[r] = sendcount;
	}
	return dp_direct_allgather(c, o, buf, boff, bcnt);
}

int dp_naive_broadcast(yd_comm *c, const struct dp_op *o, void *buf, size_t count, int root)
{
	int n = c->size, nx = 0;
	size_t bytes = count * yd_dtype_size(o->dtype);
	struct dp_xfer x[n];
	if (c->rank != root) {
		dp_x_recv(&x[0], o, root, buf, bytes);
		return dp_xfer_run(c, x, 1);
	}
	for (int r = 0; r < n; r++)
		if (r != root)
			dp_x_send(&x[nx++], o, r, buf, bytes);
	return dp_xfer_run(c, x, nx);
}

int dp_naive_reduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count,
                    int root)
{
	int n = c->size, nx = 0, rc;
	size_t bytes = count * yd_dtype_size(o->dtype);
	struct dp_xfer x[n];
	if (c->rank != root) {
		dp_x_send(&x[0], o, root, src, bytes);
		return dp_xfer_run(c, x, 1);
	}
	char *tmp = dp_scratch(c, bytes * (size_t)n + 1);
	char *in[n];
	if (!tmp)
		return YARD_ENOMEM;
	for (int r = 0; r < n; r++) {
		in[r] = tmp + (size_t)r * bytes;
		if (r == root)
			memcpy(in[r], src, bytes);
		else
			dp_x_recv(&x[nx++], o, r, in[r], bytes);
	}
	if ((rc = dp_xfer_run(c, x, nx)) != 0)
		return rc;
	reduce_in_order(o, dst, in, n, count);
	return 0;
}
