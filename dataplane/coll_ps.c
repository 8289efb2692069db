/* coll_ps.c: sharded parameter server allreduce (BytePS style): rank i serves shard i. Every
 * worker pushes shard i to server i, which reduces the n contributions in rank order and
 * pushes the result back to everyone. Same volume as a ring, two steps, but n-1 concurrent
 * flows per rank: good where every pair has its own link (shared memory), and the scheme the
 * trainer's PS mode is modelled on. */
#include "config.h"

#include "dataplane/dp.h"

int dp_ps_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count)
{
	size_t boff[c->size], bcnt[c->size], esz = yd_dtype_size(o->dtype);
	int rc;
	for (int r = 0; r < c->size; r++)
		dp_block(count, c->size, r, &boff[r], &bcnt[r]);
	/* the server's result lands in its own shard of dst; src is only read */
	rc = dp_direct_reduce_scatter(c, o, src, (char *)dst + boff[c->rank] * esz, boff, bcnt);
	if (rc == 0)
		rc = dp_direct_allgather(c, o, dst, boff, bcnt);
	return rc;
}
