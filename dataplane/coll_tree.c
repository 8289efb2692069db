/* coll_tree.c: binary-tree broadcast and reduce, pipelined in chunks (a rank forwards chunk
 * t-1 to its children while chunk t arrives from its parent), and allreduce as reduce to
 * rank 0 plus broadcast. Depth log2(n): latency grows slowly with the group, the root link
 * carries every byte, so it suits small and medium messages on many ranks. */
#include "config.h"

#include <string.h>

#include "dataplane/dp.h"

static size_t tree_chunk(size_t bytes, size_t esz)
{
	size_t ch = 256u * 1024u;
	if (bytes / 8 > ch)
		ch = bytes / 8 > 2u * 1024u * 1024u ? 2u * 1024u * 1024u : bytes / 8;
	return ch / esz * esz;
}

static int real_rank(int v, int root, int n)
{
	return (v + root) % n;
}

int dp_tree_broadcast(yd_comm *c, const struct dp_op *o, void *buf, size_t count, int root)
{
	size_t esz = yd_dtype_size(o->dtype), bytes = count * esz, ch = tree_chunk(bytes, esz);
	int n = c->size, v = (c->rank - root + n) % n, rc;
	int kids[2], nk = 0;
	for (int k = 1; k <= 2; k++)
		if (2 * v + k < n)
			kids[nk++] = real_rank(2 * v + k, root, n);
	int parent = v > 0 ? real_rank((v - 1) / 2, root, n) : -1;
	size_t nch = bytes ? (bytes + ch - 1) / ch : 1;
	char *b = buf;
	for (size_t t = 0; t <= nch; t++) {
		struct dp_xfer x[3];
		int nx = 0;
		if (v > 0 && t < nch)
			dp_x_recv(&x[nx++], o, parent, b + t * ch, DP_MIN(ch, bytes - t * ch));
		size_t st = v == 0 ? t : t - 1;
		if (v == 0 ? t < nch : t >= 1)
			for (int k = 0; k < nk; k++)
				dp_x_send(&x[nx++], o, kids[k], b + st * ch,
				          DP_MIN(ch, bytes - st * ch));
		if (nx && (rc = dp_xfer_run(c, x, nx)) != 0)
			return rc;
	}
	return 0;
}

/* Reduces into acc (every rank needs a full-size acc; the root's is the result). */
static int tree_reduce_into(yd_comm *c, const struct dp_op *o, const void *src, char *acc,
                            size_t count, int root)
{
	size_t esz = yd_dtype_size(o->dtype), bytes = count * esz, ch = tree_chunk(bytes, esz);
	int n = c->size, v = (c->rank - root + n) % n, rc;
	int kids[2], nk = 0;
	for (int k = 1; k <= 2; k++)
		if (2 * v + k < n)
			kids[nk++] = real_rank(2 * v + k, root, n);
	int parent = v > 0 ? real_rank((v - 1) / 2, root, n) : -1;
	size_t nch = bytes ? (bytes + ch - 1) / ch : 1;
	const char *s = src;
	char *tmp = NULL;
	if (nk == 2 && !(tmp = dp_scratch(c, ch + 1)))
		return YARD_ENOMEM;
	if (nk == 0) {
		/* a leaf only sends its own data */
		for (size_t t = 0; t < nch; t++) {
			struct dp_xfer x;
			dp_x_send(&x, o, parent, s + t * ch, DP_MIN(ch, bytes - t * ch));
			if ((rc = dp_xfer_run(c, &x, 1)) != 0)
				return rc;
		}
		return 0;
	}
	for (size_t t = 0; t <= nch; t++) {
		struct dp_xfer x[3];
		int nx = 0;
		size_t len = t < nch ? DP_MIN(ch, bytes - t * ch) : 0;
		if (t < nch) {
			dp_x_recv_reduce(&x[nx++], o, kids[0], acc + t * ch, s + t * ch, len);
			if (nk == 2)
				dp_x_recv(&x[nx++], o, kids[1], tmp, len);
		}
		if (v > 0 && t >= 1)
			dp_x_send(&x[nx++], o, parent, acc + (t - 1) * ch,
			          DP_MIN(ch, bytes - (t - 1) * ch));
		if (nx && (rc = dp_xfer_run(c, x, nx)) != 0)
			return rc;
		if (t < nch && nk == 2)
			dp_op_reduce(o, acc + t * ch, acc + t * ch, tmp, len / esz);
	}
	return 0;
}

int dp_tree_reduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count,
                   int root)
{
	size_t bytes = count * yd_dtype_size(o->dtype);
	char *acc = c->rank == root ? dst : NULL;
	if (!acc) {
		/* the scratch tail holds the second child's chunk; acc sits after it */
		char *s = dp_scratch(c, bytes + 2u * 1024u * 1024u + 64);
		if (!s)
			return YARD_ENOMEM;
		acc = s + 2u * 1024u * 1024u + 64;
	}
	return tree_reduce_into(c, o, src, acc, count, root);
}

int dp_tree_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count)
{
	int rc = tree_reduce_into(c, o, src, dst, count, 0);
	if (rc == 0)
		rc = dp_tree_broadcast(c, o, dst, count, 0);
	return rc;
}
