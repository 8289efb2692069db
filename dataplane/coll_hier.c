/* coll_hier.c: hierarchical allreduce for k ranks on each of H hosts (host labels decide):
 * ring reduce-scatter inside each host over shared memory, ring allreduce of each rank's
 * 1/k share between hosts (rank i of every host forms one ring, so k rings run in parallel
 * between hosts, each on n/k of the data), ring allgather inside each host. Moves 1/k of the
 * inter-host bytes a flat ring would when the host link is the bottleneck. Needs the same
 * number of ranks on every host; otherwise callers use the flat ring. */
#include "config.h"

#include "dataplane/dp.h"

int dp_hier_usable(yd_comm *c)
{
	if (c->nhosts < 2 || c->nhosts == c->size)
		return c->nhosts >= 2;
	int k = 0;
	for (int r = 0; r < c->size; r++)
		k += c->host_of[r] == 0;
	for (int h = 1; h < c->nhosts; h++) {
		int cnt = 0;
		for (int r = 0; r < c->size; r++)
			cnt += c->host_of[r] == h;
		if (cnt != k)
			return 0;
	}
	return 1;
}

int dp_hier_allreduce(yd_comm *c, const struct dp_op *o, const void *src, void *dst, size_t count)
{
	int n = c->size, me = c->rank, myhost = c->host_of[me], rc;
	int local[n], nl = 0, li = 0, cross[n], nc = 0, ci = 0;
	size_t esz = yd_dtype_size(o->dtype);
	for (int r = 0; r < n; r++)
		if (c->host_of[r] == myhost) {
			if (r == me)
				li = nl;
			local[nl++] = r;
		}
	/* rank li of every host, hosts in order of first appearance */
	for (int h = 0; h < c->nhosts; h++) {
		int seen = 0;
		for (int r = 0; r < n; r++)
			if (c->host_of[r] == h && seen++ == li) {
				if (r == me)
					ci = nc;
				cross[nc++] = r;
			}
	}
	size_t boff[nl], bcnt[nl];
	for (int b = 0; b < nl; b++)
		dp_block(count, nl, b, &boff[b], &bcnt[b]);
	struct dp_group lg = {local, nl, li}, cg = {cross, nc, ci};
	rc = dp_ring_reduce_scatter(c, o, lg, src, dst, boff, bcnt, NULL);
	if (rc == 0)
		rc = dp_ring_allreduce(c, o, cg, (char *)dst + boff[li] * esz,
		                       (char *)dst + boff[li] * esz, bcnt[li]);
	if (rc == 0)
		rc = dp_ring_allgather(c, o, lg, dst, boff, bcnt);
	return rc;
}
