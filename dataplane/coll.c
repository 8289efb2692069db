/* coll.c: the public collective and point-to-point calls: argument checks (with a message),
 * then dp_run_blocking (progress.c) which keeps calls in order with queued nonblocking ones;
 * and dp_op_execute, which runs one operation on the calling thread: picks the algorithm,
 * dispatches, divides for YD_AVG. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dataplane/dp.h"

/* Argument errors do not fail the communicator; they only set the message. */
static int bad_arg(yd_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad_arg(yd_comm *c, const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&c->err_lock);
	if (!atomic_load(&c->failed)) {
		va_start(ap, fmt);
		vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&c->err_lock);
	return YARD_EINVAL;
}

static int check(yd_comm *c, const char *what, const void *sbuf, const void *rbuf, size_t count,
                 size_t mult, enum yd_dtype dt, enum yd_op op, int root)
{
	if (!c)
		return YARD_EINVAL;
	if ((unsigned)dt >= YD_DTYPE_COUNT)
		return bad_arg(c, "%s: unknown dtype %d", what, (int)dt);
	if ((unsigned)op >= YD_OP_COUNT)
		return bad_arg(c, "%s: unknown reduction op %d", what, (int)op);
	if (count > ((size_t)1 << 48) / mult)
		return bad_arg(c, "%s: count %zu too large", what, count);
	if (count && (!sbuf || !rbuf))
		return bad_arg(c, "%s: NULL buffer with count %zu", what, count);
	if (root < 0 || root >= c->size)
		return bad_arg(c, "%s: root/peer %d out of range (size %d)", what, root, c->size);
	return 0;
}

static const char *mem_desc(int device, char *buf, size_t len)
{
	if (device)
		snprintf(buf, len, "on GPU %d", device - 1);
	else
		snprintf(buf, len, "host memory");
	return buf;
}

/* Which memory the buffers are in (o->device). Device buffers need CUDA enabled on the
 * communicator (yd_comm_use_cuda), both buffers on one GPU, and one GPU per communicator.
 * b NULL: only a matters. count 0 stays on the host path (nothing to copy). */
static int locate(yd_comm *c, const char *what, struct dp_op *o, const void *a, const void *b)
{
	char x[32], y[32];
	if (!c->cuda_enabled || o->count == 0)
		return 0;
	int da = dp_cuda_buffer_device(c, a), db = b ? dp_cuda_buffer_device(c, b) : da;
	if (da != db)
		return bad_arg(c,
		               "%s: send buffer is %s but receive buffer is %s; both must be host "
		               "memory or both on one GPU",
		               what, mem_desc(da, x, sizeof x), mem_desc(db, y, sizeof y));
	if (da && c->cuda_device >= 0 && da - 1 != c->cuda_device)
		return bad_arg(c,
		               "%s: buffer is on GPU %d but this communicator uses GPU %d (one GPU "
		               "per communicator)",
		               what, da - 1, c->cuda_device);
	if (da)
		c->cuda_device = da - 1;
	o->device = da;
	return 0;
}

static struct dp_op coll_op(enum dp_kind kind, const void *sendbuf, void *recvbuf, size_t count,
                            enum yd_dtype dt, enum yd_op op, int root)
{
	return (struct dp_op){.kind = kind,
	                      .sendbuf = sendbuf,
	                      .recvbuf = recvbuf,
	                      .count = count,
	                      .dtype = dt,
	                      .op = op,
	                      .root = root};
}

/* A collective's argument checks, then where its buffers are. mult: how many counts the
 * larger buffer holds (the world size for reduce-scatter and allgather); recv_used 0: the
 * receive buffer is not this rank's concern (a reduce's ranks other than the root). */
static int prepare(yd_comm *c, const char *what, struct dp_op *o, size_t mult, int recv_used)
{
	const void *rbuf = recv_used ? o->recvbuf : o->sendbuf;
	int rc = check(c, what, o->sendbuf, rbuf, o->count, mult, o->dtype, o->op, o->root);
	return rc ? rc : locate(c, what, o, o->sendbuf, recv_used ? o->recvbuf : NULL);
}

int yd_allreduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count, enum yd_dtype dt,
                 enum yd_op op)
{
	struct dp_op o = coll_op(DP_ALLREDUCE, sendbuf, recvbuf, count, dt, op, 0);
	int rc = prepare(c, "allreduce", &o, 1, 1);
	return rc ? rc : dp_run_blocking(c, &o);
}

int yd_reduce_scatter(yd_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                      enum yd_dtype dt, enum yd_op op)
{
	struct dp_op o = coll_op(DP_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dt, op, 0);
	int rc = prepare(c, "reduce_scatter", &o, c ? (size_t)c->size : 1, 1);
	return rc ? rc : dp_run_blocking(c, &o);
}

int yd_allgather(yd_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount, enum yd_dtype dt)
{
	struct dp_op o = coll_op(DP_ALLGATHER, sendbuf, recvbuf, sendcount, dt, YD_SUM, 0);
	int rc = prepare(c, "allgather", &o, c ? (size_t)c->size : 1, 1);
	return rc ? rc : dp_run_blocking(c, &o);
}

int yd_broadcast(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int root)
{
	struct dp_op o = coll_op(DP_BROADCAST, buf, buf, count, dt, YD_SUM, root);
	int rc = prepare(c, "broadcast", &o, 1, 1);
	return rc ? rc : dp_run_blocking(c, &o);
}

int yd_reduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count, enum yd_dtype dt,
              enum yd_op op, int root)
{
	struct dp_op o = coll_op(DP_REDUCE, sendbuf, recvbuf, count, dt, op, root);
	int rc = prepare(c, "reduce", &o, 1, c && c->rank == root);
	return rc ? rc : dp_run_blocking(c, &o);
}

int yd_barrier(yd_comm *c)
{
	if (!c)
		return YARD_EINVAL;
	struct dp_op o = {.kind = DP_BARRIER, .dtype = YD_I32, .op = YD_SUM};
	return dp_run_blocking(c, &o);
}

static int p2p_op(yd_comm *c, struct dp_op *o, const void *buf, size_t count, enum yd_dtype dt,
                  int peer, int tag, int is_send)
{
	int rc = check(c, is_send ? "send" : "recv", buf, buf, count, 1, dt, YD_SUM, peer);
	if (rc)
		return rc;
	if (peer == c->rank)
		return bad_arg(c, "%s: peer %d is this rank", is_send ? "send" : "recv", peer);
	*o = coll_op(DP_P2P, buf, (void *)buf, count, dt, YD_SUM, peer);
	o->tag = tag;
	o->is_send = is_send;
	return locate(c, is_send ? "send" : "recv", o, buf, NULL);
}

int yd_send(yd_comm *c, const void *buf, size_t count, enum yd_dtype dt, int peer, int tag)
{
	struct dp_op o;
	int rc = p2p_op(c, &o, buf, count, dt, peer, tag, 1);
	return rc ? rc : dp_run_blocking(c, &o);
}

int yd_recv(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int peer, int tag)
{
	struct dp_op o;
	int rc = p2p_op(c, &o, buf, count, dt, peer, tag, 0);
	return rc ? rc : dp_run_blocking(c, &o);
}

int yd_iallreduce(yd_comm *c, const void *sendbuf, void *recvbuf, size_t count, enum yd_dtype dt,
                  enum yd_op op, yd_request **req)
{
	struct dp_op o = coll_op(DP_ALLREDUCE, sendbuf, recvbuf, count, dt, op, 0);
	int rc = prepare(c, "iallreduce", &o, 1, 1);
	return rc ? rc : dp_submit(c, &o, req);
}

/* Nonblocking point-to-point progresses straight from the user's buffer on the progress
 * thread, which cannot read device memory. */
static int p2p_submit(yd_comm *c, struct dp_op *o, yd_request **req)
{
	if (o->device)
		return bad_arg(c,
		               "%s: device buffers are not supported by nonblocking "
		               "point-to-point; use yd_%s",
		               o->is_send ? "isend" : "irecv", o->is_send ? "send" : "recv");
	return dp_submit(c, o, req);
}

int yd_isend(yd_comm *c, const void *buf, size_t count, enum yd_dtype dt, int peer, int tag,
             yd_request **req)
{
	struct dp_op o;
	int rc = p2p_op(c, &o, buf, count, dt, peer, tag, 1);
	return rc ? rc : p2p_submit(c, &o, req);
}

int yd_irecv(yd_comm *c, void *buf, size_t count, enum yd_dtype dt, int peer, int tag,
             yd_request **req)
{
	struct dp_op o;
	int rc = p2p_op(c, &o, buf, count, dt, peer, tag, 0);
	return rc ? rc : p2p_submit(c, &o, req);
}

static int barrier(yd_comm *c, struct dp_op *o)
{
	int rc;
	for (int k = 1; k < c->size; k <<= 1) {
		struct dp_xfer x[2];
		dp_x_send(&x[0], o, (c->rank + k) % c->size, NULL, 0);
		dp_x_recv(&x[1], o, (c->rank - k + c->size) % c->size, NULL, 0);
		if ((rc = dp_xfer_run(c, x, 2)) != 0)
			return rc;
	}
	return 0;
}

static int allreduce(yd_comm *c, struct dp_op *o)
{
	int ranks[c->size];
	for (int i = 0; i < c->size; i++)
		ranks[i] = i;
	struct dp_group all = {ranks, c->size, c->rank};
	switch (o->algo) {
	case YD_ALGO_RD:
		return dp_rd_allreduce(c, o, o->sendbuf, o->recvbuf, o->count);
	case YD_ALGO_HD:
		return dp_hd_allreduce(c, o, o->sendbuf, o->recvbuf, o->count);
	case YD_ALGO_TREE:
		return dp_tree_allreduce(c, o, o->sendbuf, o->recvbuf, o->count);
	case YD_ALGO_NAIVE:
		return dp_naive_allreduce(c, o, o->sendbuf, o->recvbuf, o->count);
	case YD_ALGO_PS:
		return dp_ps_allreduce(c, o, o->sendbuf, o->recvbuf, o->count);
	case YD_ALGO_HIER:
		/* uneven hosts or one host: the flat ring does the same job */
		if (dp_hier_usable(c))
			return dp_hier_allreduce(c, o, o->sendbuf, o->recvbuf, o->count);
		return dp_ring_allreduce(c, o, all, o->sendbuf, o->recvbuf, o->count);
	case YD_ALGO_SHARED:
		/* peers across a network: the flat ring does the same job */
		if (dp_shared_usable(c))
			return dp_shared_allreduce(c, o, o->sendbuf, o->recvbuf, o->count);
		return dp_ring_allreduce(c, o, all, o->sendbuf, o->recvbuf, o->count);
	default:
		return dp_ring_allreduce(c, o, all, o->sendbuf, o->recvbuf, o->count);
	}
}

static int reduce_scatter(yd_comm *c, struct dp_op *o)
{
	size_t esz = yd_dtype_size(o->dtype), n = (size_t)c->size;
	size_t boff[c->size], bcnt[c->size];
	int ranks[c->size];
	for (int i = 0; i < c->size; i++) {
		ranks[i] = i;
		boff[i] = (size_t)i * o->count;
		bcnt[i] = o->count;
	}
	if (o->algo == YD_ALGO_NAIVE || o->algo == YD_ALGO_PS)
		return dp_naive_reduce_scatter(c, o, o->sendbuf, o->recvbuf, o->count);
	if (o->algo == YD_ALGO_SHARED && c->nhosts == 1 && dp_shared_usable(c))
		return dp_shared_reduce_scatter(c, o, o->sendbuf, o->recvbuf, o->count);
	struct dp_group all = {ranks, c->size, c->rank};
	void *acc = dp_scratch(c, o->count * n * esz + 1);
	if (!acc)
		return YARD_ENOMEM;
	return dp_ring_reduce_scatter(c, o, all, o->sendbuf, acc, boff, bcnt, o->recvbuf);
}

static int allgather(yd_comm *c, struct dp_op *o)
{
	size_t esz = yd_dtype_size(o->dtype), bytes = o->count * esz;
	char *mine = (char *)o->recvbuf + (size_t)c->rank * bytes;
	size_t boff[c->size], bcnt[c->size];
	int ranks[c->size];
	if (mine != o->sendbuf)
		memmove(mine, o->sendbuf, bytes);
	if (o->algo == YD_ALGO_NAIVE || o->algo == YD_ALGO_PS)
		return dp_naive_allgather(c, o, o->recvbuf, o->count);
	if (o->algo == YD_ALGO_SHARED && c->nhosts == 1 && dp_shared_usable(c))
		return dp_shared_allgather(c, o, o->recvbuf, o->count);
	for (int i = 0; i < c->size; i++) {
		ranks[i] = i;
		boff[i] = (size_t)i * o->count;
		bcnt[i] = o->count;
	}
	struct dp_group all = {ranks, c->size, c->rank};
	return dp_ring_allgather(c, o, all, o->recvbuf, boff, bcnt);
}

int dp_op_execute(yd_comm *c, struct dp_op *o)
{
	int rc = atomic_load(&c->failed);
	size_t esz = yd_dtype_size(o->dtype);
	if (rc)
		return rc;
	if (atomic_load(&c->aborted))
		return dp_fail(c, YARD_EABORTED, c->rank, "operation aborted");
	if (o->device)
		return dp_cuda_execute(c, o);
	if (c->size == 1 && o->kind != DP_P2P) {
		size_t bytes = o->count * esz;
		/* a split gathers in place (sendbuf NULL): nothing to copy with one rank */
		if (o->kind != DP_BARRIER && o->kind != DP_BROADCAST && o->sendbuf && o->recvbuf &&
		    o->recvbuf != o->sendbuf && bytes)
			memmove(o->recvbuf, o->sendbuf, bytes);
		return 0;
	}
	switch (o->kind) {
	case DP_ALLREDUCE:
		rc = allreduce(c, o);
		if (rc == 0 && o->op == YD_AVG && !o->no_avg_scale)
			dp_scale_avg(o->recvbuf, o->count, o->dtype, c->size);
		return rc;
	case DP_REDUCE_SCATTER:
		rc = reduce_scatter(c, o);
		if (rc == 0 && o->op == YD_AVG && !o->no_avg_scale)
			dp_scale_avg(o->recvbuf, o->count, o->dtype, c->size);
		return rc;
	case DP_ALLGATHER:
		return allgather(c, o);
	case DP_SPLIT: {
		size_t boff[c->size], bcnt[c->size];
		int ranks[c->size];
		for (int i = 0; i < c->size; i++) {
			ranks[i] = i;
			boff[i] = (size_t)i * o->count;
			bcnt[i] = o->count;
		}
		struct dp_group all = {ranks, c->size, c->rank};
		return dp_ring_allgather(c, o, all, o->recvbuf, boff, bcnt);
	}
	case DP_BROADCAST:
		if (o->algo == YD_ALGO_NAIVE)
			return dp_naive_broadcast(c, o, o->recvbuf, o->count, o->root);
		if (o->algo == YD_ALGO_TREE)
			return dp_tree_broadcast(c, o, o->recvbuf, o->count, o->root);
		return dp_chain_broadcast(c, o, o->recvbuf, o->count, o->root);
	case DP_REDUCE:
		if (o->algo == YD_ALGO_NAIVE)
			rc = dp_naive_reduce(c, o, o->sendbuf, o->recvbuf, o->count, o->root);
		else if (o->algo == YD_ALGO_TREE)
			rc = dp_tree_reduce(c, o, o->sendbuf, o->recvbuf, o->count, o->root);
		else
			rc = dp_chain_reduce(c, o, o->sendbuf, o->recvbuf, o->count, o->root);
		if (rc == 0 && o->op == YD_AVG && c->rank == o->root && !o->no_avg_scale)
			dp_scale_avg(o->recvbuf, o->count, o->dtype, c->size);
		return rc;
	case DP_BARRIER:
		return barrier(c, o);
	case DP_P2P: {
		struct dp_xfer x;
		if (o->is_send)
			dp_x_send(&x, o, o->root, o->sendbuf, o->count * esz);
		else
			dp_x_recv(&x, o, o->root, o->recvbuf, o->count * esz);
		return dp_xfer_run(c, &x, 1);
	}
	default:
		return YARD_EINVAL;
	}
}
