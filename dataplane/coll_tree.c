/* coll_tree.c: binomial-tree broadcast and reduce (log2(n) rounds), rooted anywhere by
 * renumbering ranks relative to the root. Broadcast is pipelined: the buffer moves in
 * segments and each segment is forwarded to the children as soon as it arrives. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dataplane/reduce.h"
#include "dataplane/yd_impl.h"

#define TREE_SEG_BYTES (256 * 1024)

int coll_tree_broadcast(struct cx *cx)
{
	int n = cx->comm->size, me = cx->comm->rank, root = cx->a.root;
	int vr = (me - root + n) % n, rc = 0;
	size_t total = cx->a.count * cx->esize;
	int ns = (int)((total + TREE_SEG_BYTES - 1) / TREE_SEG_BYTES);
	char *buf = cx->a.recvbuf;
	int parent = -1, mask = 1;
	for (; mask < n; mask <<= 1)
		if (vr & mask) {
			parent = (vr - mask + root) % n;
			break;
		}
	struct yd_request **rreq = calloc((size_t)ns, sizeof *rreq);
	if (!rreq)
		return YARD_ENOMEM;
	for (int k = 0; parent >= 0 && !rc && k < ns; k++) {
		size_t off = part_begin(total, ns, k), len = part_begin(total, ns, k + 1) - off;
		rc = cx_irecv(cx, parent, k, buf + off, len, &rreq[k]);
	}
	for (int k = 0; !rc && k < ns; k++) {
		size_t off = part_begin(total, ns, k), len = part_begin(total, ns, k + 1) - off;
		if (parent >= 0 && (rc = cx_wait(cx, rreq[k])))
			break;
		rreq[k] = NULL;
		for (int m = mask >> 1; !rc && m > 0; m >>= 1) {
			if (vr + m >= n)
				continue;
			struct yd_request *s;
			rc = cx_isend(cx, (vr + m + root) % n, k, buf + off, len, &s);
			(void)
			    s; /* completed with the job (cx_wait on the outstanding list below) */
		}
	}
	while (!rc && cx->outstanding)
		rc = cx_wait(cx, cx->outstanding);
	free(rreq);
	return rc;
}

int coll_tree_reduce(struct cx *cx)
{
	int n = cx->comm->size, me = cx->comm->rank, root = cx->a.root;
	int vr = (me - root + n) % n, rc = 0;
	size_t bytes = cx->a.count * cx->esize;
	char *acc = me == root ? cx->a.recvbuf : cx_scratch(cx, 0, bytes);
	char *in = cx_scratch(cx, 1, bytes);
	if (!acc || !in)
		return YARD_ENOMEM;
	if (acc != (const char *)cx->a.sendbuf)
		memcpy(acc, cx->a.sendbuf, bytes);
	for (int mask = 1; !rc && mask < n; mask <<= 1) {
		if (vr & mask) {
			struct yd_request *s;
			rc = cx_isend(cx, (vr - mask + root) % n, 0, acc, bytes, &s);
			if (!rc)
				rc = cx_wait(cx, s);
			return rc;
		}
		if (vr + mask < n) {
			struct yd_request *r;
			rc = cx_irecv(cx, (vr + mask + root) % n, 0, in, bytes, &r);
			if (!rc)
				rc = cx_wait(cx, r);
			if (!rc)
				reduce_apply(acc, acc, in, cx->a.count, cx->a.dt, cx->a.op);
		}
	}
	if (!rc && me == root)
		reduce_finish_avg(acc, cx->a.count, cx->a.dt, cx->a.op, n);
	return rc;
}
