/* coll_ring.c: ring algorithms over any group of ranks: reduce-scatter, allgather, and
 * allreduce as their composition (the bandwidth-optimal 2(n-1)/n volume); plus the
 * chunk-pipelined chain broadcast and reduce (a ring cut open at the root).
 *
 * Each ring step sends one block to the right neighbour while receiving another from the
 * left, the receive reducing into the destination as it arrives (transports pipeline the
 * block in pieces/slots, so the reduction of one piece overlaps the transfer of the next).
 * Out-of-place allreduce needs no initial copy: the first step reduces the peer's block
 * with the source block straight into the destination. */
#include "config.h"

#include <string.h>

#include "dataplane/dp.h"

void dp_block(size_t count, int n, int i, size_t *off, size_t *cnt)
{
	size_t q = count / (size_t)n, r = count % (size_t)n, ui = (size_t)i;
	*off = ui * q + (ui < r ? ui : r);
	*cnt = q + (ui < r ? 1 : 0);
}

int dp_ring_reduce_scatter(yd_comm *c, const struct dp_op *o, struct dp_group g, const void *src,
                           void *acc, const size_t *boff, const size_t *bcnt, void *out)
{
	size_t esz = yd_dtype_size(o->dtype);
	int n = g.n, i = g.me, rc;
	int right = g.ranks[(i + 1) % n], left = g.ranks[(i - 1 + n) % n];
	const char *s = src;
	char *a = acc;
	for (int st = 0; st < n - 1; st++) {
		int sb = ((i - st - 1) % n + n) % n, rb = ((i - st - 2) % n + n) % n;
		struct dp_xfer x[2];
		dp_x_send(&x[0], o, right, (st == 0 ? s : a) + boff[sb] * esz, bcnt[sb] * esz);
		dp_x_recv_reduce(&x[1], o, left, a + boff[rb] * esz, s + boff[rb] * esz,
		                 bcnt[rb] * esz);
		if ((rc = dp_xfer_run(c, x, 2)) != 0)
			return rc;
	}
	if (n == 1 && a + boff[i] * esz != s + boff[i] * esz)
		memmove(a + boff[i] * esz, s + boff[i] * esz, bcnt[i] * esz);
	if (out && (char *)out != a + boff[i] * esz)
		memmove(out, a + boff[i] * esz, bcnt[i] * esz);
	return 0;
}

int dp_ring_allgather(yd_comm *c, const struct dp_op *o, struct dp_group g, void *buf,
                      const size_t *boff, const size_t *bcnt)
{
	size_t esz = yd_dtype_size(o->dtype);
	int n = g.n, i = g.me, rc;
	int right = g.ranks[(i + 1) % n], left = g.ranks[(i - 1 + n) % n];
	char *b = buf;
	for (int st = 0; st < n - 1; st++) {
		int sb = ((i - st) % n + n) % n, rb = ((i - st - 1) % n + n) % n;
		struct dp_xfer x[2];
		dp_x_send(&x[0], o, right, b + boff[sb] * esz, bcnt[sb] * esz);
		dp_x_recv(&x[1], o, left, b + boff[rb] * esz, bcnt[rb] * esz);
		if ((rc = dp_xfer_run(c, x, 2)) != 0)
			return rc;
	}
	return 0;
}

int dp_ring_allreduce(yd_comm *c, const struct dp_op *o, struct dp_group g, const void *src,
                      void *dst, size_t count)
{
	size_t boff[g.n], bcnt[g.n];
	int rc;
	for (int b = 0; b < g.n; b++)
		dp_block(count, g.n, b, &boff[b], &bcnt[b]);
	rc = dp_ring_reduce_scatter(c, o, g, src, dst, boff, bcnt, NULL);
	if (rc == 0)
		rc = dp_ring_allgather(c, o, g, dst, boff, bcnt);
	return rc;
}

/* Chunk size for pipelined chains and trees: big enough to amortise a step, small enough
 * that the pipeline fills quickly. */
static size_t chain_chunk(size_t bytes, size_t esz)
{
	size_t ch = 256u * 1024u;
	if (bytes / 8 > ch)
		ch = bytes / 8 > 2u * 1024u * 1024u ? 2u * 1024u * 1024u : bytes / 8;
	return ch / esz * esz;
}

int dp_chain_broadcast(yd_comm *c, const struct dp_op *o, void *buf, size_t count, int root)
{
	size_t esz = yd_dtype_size(o->dtype), bytes = count * esz, ch = chain_chunk(bytes, esz);
	int n = c->size, v = (c->rank - root + n) % n, rc;
	int prev = (c->rank - 1 + n) % n, next = (c->rank + 1) % n;
	size_t k = bytes ? (bytes + ch - 1) / ch : 1;
	char *b = buf;
	for (size_t t = 0; t <= k; t++) {
		struct dp_xfer x[2];
		int nx = 0;
		if (v > 0 && t < k)
			dp_x_recv(&x[nx++], o, prev, b + t * ch, DP_MIN(ch, bytes - t * ch));
		size_t st = v == 0 ? t : t - 1;
		if (v < n - 1 && (v == 0 ? t < k : t >= 1))
			dp_x_send(&x[nx++], o, next, b + st * ch, DP_MIN(ch, bytes - st * ch));
		if (nx && (rc = dp_xfer_run(c, x, nx)) != 0)
			return rc;
	}
	return 0;
}

int dp_chain_reduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count,
                    int root)
{
	size_t esz = yd_dtype_size(o->dtype), bytes = count * esz, ch = chain_chunk(bytes, esz);
	int n = c->size, v = (c->rank - root + n) % n, rc;
	/* data flows from virtual rank n-1 down to 0 (the root) */
	int from = (c->rank + 1) % n, to = (c->rank - 1 + n) % n;
	size_t k = bytes ? (bytes + ch - 1) / ch : 1;
	char *acc = v == 0 ? dst : dp_scratch(c, bytes);
	const char *s = src;
	if (!acc)
		return YARD_ENOMEM;
	for (size_t t = 0; t <= k; t++) {
		struct dp_xfer x[2];
		int nx = 0;
		if (v < n - 1 && t < k)
			dp_x_recv_reduce(&x[nx++], o, from, acc + t * ch, s + t * ch,
			                 DP_MIN(ch, bytes - t * ch));
		size_t st = v == n - 1 ? t : t - 1;
		if (v > 0 && (v == n - 1 ? t < k : t >= 1))
			dp_x_send(&x[nx++], o, to, (v == n - 1 ? s : acc) + st * ch,
			          DP_MIN(ch, bytes - st * ch));
		if (nx && (rc = dp_xfer_run(c, x, nx)) != 0)
			return rc;
	}
	return 0;
}
