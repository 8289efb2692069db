/* cuda.c: collectives and point-to-point on CUDA device buffers.
 *
 * Off until enabled per communicator (yd_comm_use_cuda, yd_config.cuda or YARD_CUDA=1): until
 * then no CUDA call is made, so CPU-only programs never load a driver or create a context.
 * Enabling asks cudaGetDeviceCount once per process (logged at debug level); with no GPU it
 * is refused and every buffer stays host memory. Once enabled, each buffer is classified
 * with cudaPointerGetAttributes, and an operation on device buffers takes one of two paths:
 *
 *  - NCCL (built with HAVE_NCCL; YARD_NCCL=0|1|auto, auto by default): allreduce,
 *    reduce_scatter, allgather, broadcast and reduce run as NCCL collectives on the
 *    communicator's stream. The NCCL communicator is created at the first device collective
 *    from an ncclUniqueId that rank 0 broadcasts over libyd's own transports; the ranks then
 *    agree (a host allreduce) whether every one of them succeeded, so that all use NCCL or
 *    all fall back to staging (auto) or all fail (1). NCCL checks no argument mismatch.
 *  - staging (everything else): the buffer is cut in chunks of CHUNK_BYTES per rank block;
 *    chunk i+1 is copied to pinned host memory (D2H, async on the communicator's stream)
 *    while chunk i runs through the ordinary host algorithms and transports (the reduction
 *    fused into the receive, as for host buffers), and chunk i's result is copied back (H2D)
 *    while chunk i+1 is on the wire. Two pinned buffers alternate. The average's division
 *    runs on the GPU (dp_cuda_scale_avg), after the copy back.
 *
 * Both paths return once the result is in the receive buffer (the stream is synchronised).
 * The stream is a blocking stream: work the application queued on the legacy default stream
 * finishes before our copies start; work on its own non-blocking streams must be finished
 * (or synchronised) by the caller. Waits for NCCL are bounded by the communicator's deadline
 * and watch the control sockets, so a dead peer is an error naming it, and the NCCL
 * communicator is aborted. Every rank must pass the same kind of buffer (all device or all
 * host) to one collective: staged collectives travel as one message per chunk, so mixing is
 * reported as YARD_EMISMATCH. Point-to-point transfers are one message whatever the memory. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "dataplane/dp.h"
#include "dataplane/dp_cuda.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "common/clock.h"
/* YD_CUDA_NO_NCCL: staging only (test_coll_cuda_emul builds this file against an emulated
 * CUDA runtime) */
#if defined(HAVE_NCCL) && !defined(YD_CUDA_NO_NCCL)
#define DP_USE_NCCL 1
#include <nccl.h>
#endif

/* Per rank block and chunk: large enough that a chunk runs at wire speed, small enough that
 * the first copy and the last copy back (not overlapped) stay short. */
#define CHUNK_BYTES ((size_t)4 << 20)

enum { NCCL_UNTRIED, NCCL_ON, NCCL_OFF };

struct dp_cuda {
	int device;
	cudaStream_t stream;
	cudaEvent_t staged[2]; /* recorded after the D2H copy into pin[b] */
	void *pin[2];          /* pinned host staging, pin_len bytes each */
	size_t pin_len;
	int nccl_state;
#ifdef DP_USE_NCCL
	ncclComm_t nccl;
#endif
};

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int gpu_count;
static char gpu_why[160];

static void probe(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		snprintf(gpu_why, sizeof gpu_why, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
		(void)cudaGetLastError();
		n = 0;
	} else if (n == 0) {
		snprintf(gpu_why, sizeof gpu_why, "cudaGetDeviceCount found 0 devices");
	}
	gpu_count = n;
	if (n == 0)
		log_debug("libyd: no GPU (%s): buffers are host memory", gpu_why);
	else
		log_debug("libyd: %d GPU(s): device buffers enabled per communicator", n);
}

int yd_cuda_device_count(void)
{
	pthread_once(&probe_once, probe);
	return gpu_count;
}

int dp_cuda_enable(yd_comm *c, char *why, size_t len)
{
	if (yd_cuda_device_count() == 0) {
		snprintf(why, len, "no CUDA device (%s)", gpu_why);
		return YARD_EUNSUPPORTED;
	}
	c->cuda_enabled = 1;
	return 0;
}

int dp_cuda_buffer_device(yd_comm *c, const void *p)
{
	struct cudaPointerAttributes a;
	if (!p || !c->cuda_enabled)
		return 0;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeDevice ? a.device + 1 : 0;
}

static int cuda_fail(yd_comm *c, const struct dp_op *o, const char *call, cudaError_t e)
{
	return dp_fail(c, YARD_EIO, -1, "%s #%llu: %s on GPU %d failed: %s", dp_kind_name(o->kind),
	               (unsigned long long)o->seq, call, o->device - 1, cudaGetErrorString(e));
}

static int ctx_get(yd_comm *c, const struct dp_op *o, struct dp_cuda **out)
{
	struct dp_cuda *g = c->cuda;
	cudaError_t e = cudaSetDevice(o->device - 1);
	if (e != cudaSuccess)
		return cuda_fail(c, o, "cudaSetDevice", e);
	if (g) {
		*out = g;
		return 0;
	}
	g = calloc(1, sizeof *g);
	if (!g)
		return dp_fail(c, YARD_ENOMEM, -1, "out of memory");
	g->device = o->device - 1;
	c->cuda = g;
	if ((e = cudaStreamCreate(&g->stream)) != cudaSuccess) {
		g->stream = NULL;
		return cuda_fail(c, o, "cudaStreamCreate", e);
	}
	for (int b = 0; b < 2; b++)
		if ((e = cudaEventCreateWithFlags(&g->staged[b], cudaEventDisableTiming)) !=
		    cudaSuccess) {
			g->staged[b] = NULL;
			return cuda_fail(c, o, "cudaEventCreate", e);
		}
	*out = g;
	return 0;
}

/* Waits for ev, or for the whole stream when ev is NULL, within the communicator's deadline:
 * spins first (a small copy is done in microseconds; sleeping until the GPU's interrupt
 * costs tens), then looks every 50 us. A copy that never completes is an error naming the
 * GPU and the operation, not a hang. */
static int staged_wait(yd_comm *c, struct dp_cuda *g, const struct dp_op *o, cudaEvent_t ev,
                       const char *what)
{
	uint64_t start = 0;
	for (int spins = 0;; spins++) {
		cudaError_t q = ev ? cudaEventQuery(ev) : cudaStreamQuery(g->stream);
		if (q == cudaSuccess)
			return 0;
		if (q != cudaErrorNotReady)
			return cuda_fail(c, o, what, q);
		if (spins < DP_SPIN_ROUNDS) {
			dp_spin(spins);
			continue;
		}
		if (atomic_load(&c->aborted))
			return dp_fail(c, YARD_EABORTED, c->rank, "operation aborted");
		if (start == 0)
			start = yard_now_mono_ms();
		else if (yard_now_mono_ms() - start >= (uint64_t)c->timeout_ms)
			return dp_fail(c, YARD_ETIMEDOUT, -1,
			               "%s #%llu: %s on GPU %d did not complete within %d ms",
			               dp_kind_name(o->kind), (unsigned long long)o->seq, what,
			               g->device, c->timeout_ms);
		nanosleep(&(struct timespec){.tv_nsec = 50000}, NULL);
	}
}

static int pin_ensure(yd_comm *c, struct dp_cuda *g, const struct dp_op *o, size_t len)
{
	cudaError_t e;
	int rc;
	if (len <= g->pin_len)
		return 0;
	if ((rc = staged_wait(c, g, o, NULL, "earlier copies")) != 0)
		return rc;
	for (int b = 0; b < 2; b++) {
		if (g->pin[b])
			cudaFreeHost(g->pin[b]);
		g->pin[b] = NULL;
	}
	g->pin_len = 0;
	for (int b = 0; b < 2; b++)
		if ((e = cudaHostAlloc(&g->pin[b], len, cudaHostAllocPortable)) != cudaSuccess) {
			g->pin[b] = NULL;
			return cuda_fail(c, o, "cudaHostAlloc (pinned staging)", e);
		}
	g->pin_len = len;
	return 0;
}

/* ---- staging ---- */

/* Where chunk [e0, e0+k) of each buffer goes in the pinned buffer: `in` what the host
 * operation sends, `out` what it produces (equal when it works in place). */
struct chunk {
	size_t e0, k;
	char *in, *out;
};

static struct chunk chunk_at(yd_comm *c, const struct dp_op *o, char *pin, size_t e0, size_t k)
{
	size_t bytes = k * yd_dtype_size(o->dtype), n = (size_t)c->size;
	struct chunk ch = {e0, k, pin, pin};
	if (o->kind == DP_REDUCE_SCATTER)
		ch.out = pin + n * bytes; /* in: n blocks of k, out: k */
	else if (o->kind == DP_ALLGATHER)
		ch.in = pin + (size_t)c->rank * bytes; /* gathered in place */
	return ch;
}

static cudaError_t copy_in(yd_comm *c, struct dp_cuda *g, const struct dp_op *o,
                           const struct chunk *ch)
{
	size_t esz = yd_dtype_size(o->dtype), bytes = ch->k * esz, off = ch->e0 * esz;
	const char *src = o->kind == DP_BROADCAST ? (const char *)o->recvbuf : o->sendbuf;
	if (!bytes || (o->kind == DP_BROADCAST && c->rank != o->root))
		return cudaSuccess;
	if (o->kind == DP_REDUCE_SCATTER)
		return cudaMemcpy2DAsync(ch->in, bytes, src + off, o->count * esz, bytes,
		                         (size_t)c->size, cudaMemcpyDeviceToHost, g->stream);
	return cudaMemcpyAsync(ch->in, src + off, bytes, cudaMemcpyDeviceToHost, g->stream);
}

static cudaError_t copy_out(yd_comm *c, struct dp_cuda *g, const struct dp_op *o,
                            const struct chunk *ch)
{
	size_t esz = yd_dtype_size(o->dtype), bytes = ch->k * esz, off = ch->e0 * esz;
	char *dst = (char *)o->recvbuf;
	cudaError_t e;
	if (!bytes)
		return cudaSuccess;
	switch (o->kind) {
	case DP_REDUCE:
		if (c->rank != o->root)
			return cudaSuccess;
		break;
	case DP_BROADCAST:
		if (c->rank == o->root)
			return cudaSuccess;
		break;
	case DP_ALLGATHER:
		return cudaMemcpy2DAsync(dst + off, o->count * esz, ch->out, bytes, bytes,
		                         (size_t)c->size, cudaMemcpyHostToDevice, g->stream);
	default:
		break;
	}
	e = cudaMemcpyAsync(dst + off, ch->out, bytes, cudaMemcpyHostToDevice, g->stream);
	if (e == cudaSuccess && o->op == YD_AVG &&
	    (o->kind == DP_ALLREDUCE || o->kind == DP_REDUCE_SCATTER || o->kind == DP_REDUCE))
		e = (cudaError_t)dp_cuda_scale_avg(dst + off, ch->k, (int)o->dtype, c->size,
		                                   g->stream);
	return e;
}

static int run_chunk(yd_comm *c, const struct dp_op *o, const struct chunk *ch)
{
	struct dp_op s = *o;
	s.device = 0;
	s.no_avg_scale = 1;
	s.count = ch->k;
	s.sendbuf = ch->in;
	s.recvbuf = ch->out;
	return dp_op_execute(c, &s);
}

static int staged_collective(yd_comm *c, struct dp_cuda *g, const struct dp_op *o)
{
	size_t esz = yd_dtype_size(o->dtype), n = (size_t)c->size;
	size_t per = CHUNK_BYTES / esz, k0 = DP_MIN(o->count, per);
	size_t chunks = o->count ? (o->count + per - 1) / per : 1;
	size_t need = k0 * esz *
	              (o->kind == DP_REDUCE_SCATTER ? n + 1
	               : o->kind == DP_ALLGATHER    ? n
	                                            : 1);
	cudaError_t e;
	int rc = pin_ensure(c, g, o, need ? need : 64);
	if (rc)
		return rc;
	struct chunk ch[2];
	ch[0] = chunk_at(c, o, g->pin[0], 0, k0);
	if ((e = copy_in(c, g, o, &ch[0])) != cudaSuccess ||
	    (e = cudaEventRecord(g->staged[0], g->stream)) != cudaSuccess)
		return cuda_fail(c, o, "copy to host", e);
	for (size_t i = 0; i < chunks; i++) {
		int b = (int)(i & 1);
		if (i + 1 < chunks) {
			/* stream order puts this copy after chunk i-1's copy back from pin[!b] */
			size_t e1 = (i + 1) * per;
			ch[!b] = chunk_at(c, o, g->pin[!b], e1, DP_MIN(per, o->count - e1));
			if ((e = copy_in(c, g, o, &ch[!b])) != cudaSuccess ||
			    (e = cudaEventRecord(g->staged[!b], g->stream)) != cudaSuccess)
				return cuda_fail(c, o, "copy to host", e);
		}
		if ((rc = staged_wait(c, g, o, g->staged[b], "copy to host")) != 0)
			return rc;
		if ((rc = run_chunk(c, o, &ch[b])) != 0) {
			/* the next chunk's copy may still be writing pinned memory */
			(void)staged_wait(c, g, o, NULL, "copy to host");
			return rc;
		}
		if ((e = copy_out(c, g, o, &ch[b])) != cudaSuccess)
			return cuda_fail(c, o, "copy to device", e);
	}
	return staged_wait(c, g, o, NULL, "copy to device");
}

/* Point-to-point: one message of the whole buffer, so either side may be host memory. */
static int staged_p2p(yd_comm *c, struct dp_cuda *g, const struct dp_op *o)
{
	size_t bytes = o->count * yd_dtype_size(o->dtype);
	struct dp_op s = *o;
	cudaError_t e;
	int rc = pin_ensure(c, g, o, bytes ? bytes : 64);
	if (rc)
		return rc;
	s.device = 0;
	s.sendbuf = s.recvbuf = g->pin[0];
	if (o->is_send) {
		e = cudaMemcpyAsync(g->pin[0], o->sendbuf, bytes, cudaMemcpyDeviceToHost,
		                    g->stream);
		if (e != cudaSuccess)
			return cuda_fail(c, o, "copy to host", e);
		if ((rc = staged_wait(c, g, o, NULL, "copy to host")) != 0)
			return rc;
		return dp_op_execute(c, &s);
	}
	if ((rc = dp_op_execute(c, &s)) != 0)
		return rc;
	e = cudaMemcpyAsync(o->recvbuf, g->pin[0], bytes, cudaMemcpyHostToDevice, g->stream);
	if (e != cudaSuccess)
		return cuda_fail(c, o, "copy to device", e);
	return staged_wait(c, g, o, NULL, "copy to device");
}

/* ---- NCCL ---- */

#ifdef DP_USE_NCCL
static void nccl_drop(struct dp_cuda *g)
{
	if (g->nccl)
		ncclCommAbort(g->nccl);
	g->nccl = NULL;
	g->nccl_state = NCCL_OFF;
}

/* Waits until NCCL has finished enqueueing (stream_too = 0) or the stream has drained
 * (stream_too = 1), within the deadline, while watching the peers' control sockets. */
static int nccl_wait(yd_comm *c, struct dp_cuda *g, const struct dp_op *o, int stream_too,
                     const char *what)
{
	uint64_t start = yard_now_mono_ms();
	for (unsigned spins = 0;; spins++) {
		ncclResult_t st = ncclSuccess;
		if (ncclCommGetAsyncError(g->nccl, &st) != ncclSuccess)
			st = ncclInternalError;
		if (st != ncclSuccess && st != ncclInProgress) {
			const char *detail = ncclGetLastError(g->nccl);
			nccl_drop(g);
			return dp_fail(c, YARD_EIO, -1, "%s #%llu: NCCL %s failed: %s%s%s",
			               dp_kind_name(o->kind), (unsigned long long)o->seq, what,
			               ncclGetErrorString(st), detail && *detail ? ": " : "",
			               detail ? detail : "");
		}
		if (st == ncclSuccess) {
			cudaError_t q = stream_too ? cudaStreamQuery(g->stream) : cudaSuccess;
			if (q == cudaSuccess)
				return 0;
			if (q != cudaErrorNotReady) {
				nccl_drop(g);
				return cuda_fail(c, o, what, q);
			}
		}
		/* spin briefly (small collectives finish in microseconds), then wait on the
		 * control sockets 1 ms at a time */
		int rc = dp_poll_ctl_op(c, o, spins < 2000 ? 0 : 1);
		if (rc == 0 && atomic_load(&c->failed))
			rc = atomic_load(&c->failed);
		if (rc == 0 && atomic_load(&c->aborted))
			rc = dp_fail(c, YARD_EABORTED, c->rank, "operation aborted");
		if (rc == 0 && yard_now_mono_ms() - start >= (uint64_t)c->timeout_ms)
			rc = dp_fail(c, YARD_ETIMEDOUT, -1,
			             "%s #%llu: timed out after %d ms waiting for NCCL %s (no peer "
			             "reported a failure)",
			             dp_kind_name(o->kind), (unsigned long long)o->seq,
			             c->timeout_ms, what);
		if (rc) {
			nccl_drop(g);
			return rc;
		}
		if (spins < 2000 && spins % 64 == 63)
			sched_yield();
	}
}

static int nccl_mode(yd_comm *c, const struct dp_op *o, int *mode)
{
	const char *v = getenv("YARD_NCCL");
	if (!v || !*v || strcmp(v, "auto") == 0)
		*mode = 2;
	else if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
		*mode = v[0] - '0';
	else
		return dp_fail(c, YARD_EINVAL, -1, "%s #%llu: YARD_NCCL=%s: expected 0, 1 or auto",
		               dp_kind_name(o->kind), (unsigned long long)o->seq, v);
	return 0;
}

/* Collective: creates the NCCL communicator, or settles every rank on staging. */
static int nccl_start(yd_comm *c, struct dp_cuda *g, const struct dp_op *o)
{
	struct {
		ncclUniqueId id;
		int32_t ok, pad;
	} msg;
	char why[300] = "";
	int mode = 0, rc;
	ncclResult_t r;
	if ((rc = nccl_mode(c, o, &mode)) != 0)
		return rc;
	g->nccl_state = NCCL_OFF;
	if (mode == 0)
		return 0;
	memset(&msg, 0, sizeof msg);
	if (c->rank == 0) {
		r = ncclGetUniqueId(&msg.id);
		msg.ok = r == ncclSuccess;
		if (!msg.ok)
			snprintf(why, sizeof why, "ncclGetUniqueId: %s", ncclGetErrorString(r));
	}
	struct dp_op b = {.kind = DP_BROADCAST,
	                  .sendbuf = &msg,
	                  .recvbuf = &msg,
	                  .count = sizeof msg / 4,
	                  .dtype = YD_I32,
	                  .op = YD_SUM,
	                  .root = 0,
	                  .algo = YD_ALGO_AUTO,
	                  .seq = o->seq};
	if ((rc = dp_op_execute(c, &b)) != 0)
		return rc;
	int32_t ok = msg.ok, all = 0;
	if (ok) {
		ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
		cfg.blocking = 0; /* so that every wait below has a deadline */
		r = ncclCommInitRankConfig(&g->nccl, c->size, msg.id, c->rank, &cfg);
		if (r != ncclSuccess && r != ncclInProgress) {
			snprintf(why, sizeof why, "ncclCommInitRank: %s", ncclGetErrorString(r));
			g->nccl = NULL;
			ok = 0;
		} else {
			uint64_t start = yard_now_mono_ms();
			ncclResult_t st = ncclInProgress;
			while (st == ncclInProgress) {
				if (ncclCommGetAsyncError(g->nccl, &st) != ncclSuccess)
					st = ncclInternalError;
				if (st != ncclInProgress)
					break;
				if ((rc = dp_poll_ctl_op(c, o, 1)) != 0) {
					nccl_drop(g);
					return rc;
				}
				if (yard_now_mono_ms() - start >= (uint64_t)c->timeout_ms) {
					st = ncclSystemError;
					snprintf(why, sizeof why,
					         "ncclCommInitRank did not finish within %d ms",
					         c->timeout_ms);
				}
			}
			if (st != ncclSuccess) {
				if (!why[0]) {
					const char *d = ncclGetLastError(g->nccl);
					snprintf(why, sizeof why, "ncclCommInitRank: %s%s%s",
					         ncclGetErrorString(st), d && *d ? ": " : "",
					         d ? d : "");
				}
				nccl_drop(g);
				ok = 0;
			}
		}
	}
	struct dp_op a = {.kind = DP_ALLREDUCE,
	                  .sendbuf = &ok,
	                  .recvbuf = &all,
	                  .count = 1,
	                  .dtype = YD_I32,
	                  .op = YD_MIN,
	                  .algo = YD_ALGO_RING,
	                  .seq = o->seq};
	if ((rc = dp_op_execute(c, &a)) != 0) {
		nccl_drop(g);
		return rc;
	}
	if (all) {
		g->nccl_state = NCCL_ON;
		log_debug("rank %d: collectives on device buffers use NCCL (GPU %d)", c->rank,
		          g->device);
		return 0;
	}
	nccl_drop(g);
	if (mode == 1)
		return dp_fail(c, YARD_EUNSUPPORTED, -1,
		               "%s #%llu: YARD_NCCL=1 but NCCL could not start on every rank (%s)",
		               dp_kind_name(o->kind), (unsigned long long)o->seq,
		               why[0] ? why : "it failed on another rank");
	if (why[0])
		log_info("rank %d: NCCL unavailable (%s): device buffers are staged through host "
		         "memory",
		         c->rank, why);
	return 0;
}

static int nccl_collective(yd_comm *c, struct dp_cuda *g, const struct dp_op *o)
{
	static const ncclDataType_t types[YD_DTYPE_COUNT] = {ncclFloat32,  ncclFloat64, ncclFloat16,
	                                                     ncclBfloat16, ncclInt32,   ncclInt64};
	/* average: a sum here, divided by our kernel so that results equal the CPU path's */
	static const ncclRedOp_t ops[YD_OP_COUNT] = {ncclSum, ncclProd, ncclMin, ncclMax, ncclSum};
	ncclDataType_t t = types[o->dtype];
	ncclRedOp_t op = ops[o->op];
	ncclResult_t r;
	int rc;
	switch (o->kind) {
	case DP_ALLREDUCE:
		r = ncclAllReduce(o->sendbuf, o->recvbuf, o->count, t, op, g->nccl, g->stream);
		break;
	case DP_REDUCE_SCATTER:
		r = ncclReduceScatter(o->sendbuf, o->recvbuf, o->count, t, op, g->nccl, g->stream);
		break;
	case DP_ALLGATHER:
		r = ncclAllGather(o->sendbuf, o->recvbuf, o->count, t, g->nccl, g->stream);
		break;
	case DP_BROADCAST:
		r = ncclBroadcast(o->recvbuf, o->recvbuf, o->count, t, o->root, g->nccl, g->stream);
		break;
	default: /* DP_REDUCE */
		r = ncclReduce(o->sendbuf, o->recvbuf, o->count, t, op, o->root, g->nccl,
		               g->stream);
		break;
	}
	if (r != ncclSuccess && r != ncclInProgress) {
		nccl_drop(g);
		return dp_fail(c, YARD_EIO, -1, "%s #%llu: NCCL call failed: %s",
		               dp_kind_name(o->kind), (unsigned long long)o->seq,
		               ncclGetErrorString(r));
	}
	if ((rc = nccl_wait(c, g, o, 0, "enqueue")) != 0)
		return rc;
	if (o->op == YD_AVG && (o->kind == DP_ALLREDUCE || o->kind == DP_REDUCE_SCATTER ||
	                        (o->kind == DP_REDUCE && c->rank == o->root))) {
		cudaError_t e = (cudaError_t)dp_cuda_scale_avg(o->recvbuf, o->count, (int)o->dtype,
		                                               c->size, g->stream);
		if (e != cudaSuccess)
			return cuda_fail(c, o, "average kernel", e);
	}
	return nccl_wait(c, g, o, 1, "collective");
}
#endif

int dp_cuda_execute(yd_comm *c, struct dp_op *o)
{
	struct dp_cuda *g = NULL;
	int rc = ctx_get(c, o, &g);
	if (rc)
		return rc;
	if (o->kind == DP_P2P)
		return staged_p2p(c, g, o);
#ifdef DP_USE_NCCL
	if (g->nccl_state == NCCL_UNTRIED && (rc = nccl_start(c, g, o)) != 0)
		return rc;
	if (g->nccl_state == NCCL_ON)
		return nccl_collective(c, g, o);
#endif
	return staged_collective(c, g, o);
}

void dp_cuda_comm_free(yd_comm *c)
{
	struct dp_cuda *g = c->cuda;
	if (!g)
		return;
	cudaSetDevice(g->device);
#ifdef DP_USE_NCCL
	if (g->nccl)
		ncclCommAbort(g->nccl); /* local: never waits for peers that may be gone */
#endif
	/* a stream that does not drain within the deadline (a hung GPU) keeps its pinned
	 * buffers: a copy may still write them */
	int drained = 1;
	if (g->stream) {
		uint64_t start = yard_now_mono_ms();
		cudaError_t q;
		while ((q = cudaStreamQuery(g->stream)) == cudaErrorNotReady &&
		       yard_now_mono_ms() - start < (uint64_t)c->timeout_ms)
			nanosleep(&(struct timespec){.tv_nsec = 50000}, NULL);
		drained = q != cudaErrorNotReady;
		if (!drained)
			log_warn("rank %d: GPU %d still copying after %d ms; its pinned staging "
			         "buffers are not freed",
			         c->rank, g->device, c->timeout_ms);
	}
	for (int b = 0; b < 2; b++) {
		if (g->pin[b] && drained)
			cudaFreeHost(g->pin[b]);
		if (g->staged[b])
			cudaEventDestroy(g->staged[b]);
	}
	if (g->stream)
		cudaStreamDestroy(g->stream);
	free(g);
	c->cuda = NULL;
}

const char *yd_comm_cuda_path(const yd_comm *c)
{
	const struct dp_cuda *g = c ? c->cuda : NULL;
	if (!c || !c->cuda_enabled)
		return "off";
	if (!g || g->nccl_state == NCCL_UNTRIED)
#ifdef DP_USE_NCCL
		return "undecided";
#else
		return "staged";
#endif
	return g->nccl_state == NCCL_ON ? "nccl" : "staged";
}

#else /* !HAVE_CUDA */

int yd_cuda_device_count(void)
{
	return 0;
}

int dp_cuda_enable(yd_comm *c, char *why, size_t len)
{
	(void)c;
	snprintf(why, len, "libyd was built without CUDA (configure found no toolkit)");
	return YARD_EUNSUPPORTED;
}

int dp_cuda_buffer_device(yd_comm *c, const void *p)
{
	(void)c;
	(void)p;
	return 0;
}

int dp_cuda_execute(yd_comm *c, struct dp_op *o)
{
	return dp_fail(c, YARD_EINTERNAL, -1, "%s #%llu: device buffer without CUDA support",
	               dp_kind_name(o->kind), (unsigned long long)o->seq);
}

void dp_cuda_comm_free(yd_comm *c)
{
	(void)c;
}

const char *yd_comm_cuda_path(const yd_comm *c)
{
	(void)c;
	return "off";
}
#endif

int yd_comm_use_cuda(yd_comm *c)
{
	char why[200];
	if (!c)
		return YARD_EINVAL;
	int rc = dp_cuda_enable(c, why, sizeof why);
	if (rc) {
		pthread_mutex_lock(&c->err_lock);
		if (!atomic_load(&c->failed))
			snprintf(c->errmsg, sizeof c->errmsg, "device buffers: %s", why);
		pthread_mutex_unlock(&c->err_lock);
	}
	return rc;
}
