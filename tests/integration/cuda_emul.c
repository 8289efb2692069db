/* cuda_emul.c: a stand-in for the part of the CUDA runtime that libyd's device-buffer code
 * (dataplane/cuda.c) and test_coll_cuda.c call, so that the staging path runs on machines
 * without a GPU (test_coll_cuda_emul). Test-only; linked instead of libcudart.
 *
 * "Device memory" is host memory that cudaMalloc records; cudaPointerGetAttributes reports
 * those ranges as device memory on GPU 0. A stream is a worker thread that runs the queued
 * copies and average kernels in order, each after a short delay, so that the library
 * reading a staging buffer before its copy finished, or a copy overwriting a buffer still
 * in use, produces wrong results instead of passing by luck. Events mark a position in
 * their stream's queue. What this cannot show: anything about real GPUs (DMA engines,
 * driver errors, NCCL); test_coll_cuda does that where a GPU exists. */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "dataplane/dp.h"
#include "dataplane/dp_cuda.h"

#define QUEUE_LEN 64
#define OP_DELAY_NS 200000L /* per queued operation: widens every race window */

enum { Q_COPY, Q_AVG };

struct qop {
	int kind;
	char *dst;
	const char *src;
	size_t dpitch, spitch, width, height;
	size_t count;
	int dtype, n;
};

struct CUstream_st {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct qop q[QUEUE_LEN];
	uint64_t enqueued, done;
	int stop;
};

struct CUevent_st {
	struct CUstream_st *s;
	uint64_t at; /* complete once s->done reaches it */
};

static pthread_mutex_t ranges_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char *p;
	size_t n;
} ranges[1024];
static int nranges;

/* cuda_emul_stall(1): every stream stops before its next operation until cuda_emul_stall(0),
 * as a hung GPU would (test_coll_cuda_emul's deadline check). */
static _Atomic int stalled;

void cuda_emul_stall(int on);
void cuda_emul_stall(int on)
{
	atomic_store(&stalled, on);
}

static void *worker(void *arg)
{
	struct CUstream_st *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->stop && s->done == s->enqueued)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->done == s->enqueued)
			break;
		struct qop op = s->q[s->done % QUEUE_LEN];
		pthread_mutex_unlock(&s->mu);
		struct timespec ts = {0, OP_DELAY_NS};
		do
			nanosleep(&ts, NULL);
		while (atomic_load(&stalled));
		if (op.kind == Q_COPY)
			for (size_t r = 0; r < op.height; r++)
				memcpy(op.dst + r * op.dpitch, op.src + r * op.spitch, op.width);
		else
			dp_scale_avg(op.dst, op.count, (enum yd_dtype)op.dtype, op.n);
		pthread_mutex_lock(&s->mu);
		s->done++;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static cudaError_t enqueue(cudaStream_t s, const struct qop *op)
{
	if (!s)
		return cudaErrorInvalidResourceHandle; /* the library always uses its own */
	pthread_mutex_lock(&s->mu);
	while (s->enqueued - s->done >= QUEUE_LEN)
		pthread_cond_wait(&s->cv, &s->mu);
	s->q[s->enqueued % QUEUE_LEN] = *op;
	s->enqueued++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = 1;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "emulated CUDA error";
}

cudaError_t cudaGetLastError(void)
{
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
	pthread_mutex_lock(&ranges_mu);
	if (nranges == (int)(sizeof ranges / sizeof ranges[0])) {
		pthread_mutex_unlock(&ranges_mu);
		return cudaErrorMemoryAllocation;
	}
	*p = malloc(size ? size : 1);
	ranges[nranges].p = *p;
	ranges[nranges].n = size ? size : 1;
	nranges++;
	pthread_mutex_unlock(&ranges_mu);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
	pthread_mutex_lock(&ranges_mu);
	for (int i = 0; i < nranges; i++)
		if (ranges[i].p == p) {
			ranges[i] = ranges[--nranges];
			break;
		}
	pthread_mutex_unlock(&ranges_mu);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	memset(a, 0, sizeof *a);
	a->type = cudaMemoryTypeUnregistered;
	a->device = -1;
	pthread_mutex_lock(&ranges_mu);
	for (int i = 0; i < nranges; i++)
		if ((const char *)p >= ranges[i].p && (const char *)p < ranges[i].p + ranges[i].n) {
			a->type = cudaMemoryTypeDevice;
			a->device = 0;
			a->devicePointer = (void *)p;
		}
	pthread_mutex_unlock(&ranges_mu);
	return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
	(void)flags;
	*p = malloc(size);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}

/* Synchronous (the legacy default stream): the test's own copies. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	(void)kind;
	memcpy(dst, src, count);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
	(void)kind;
	struct qop op = {.kind = Q_COPY,
	                 .dst = dst,
	                 .src = src,
	                 .dpitch = count,
	                 .spitch = count,
	                 .width = count,
	                 .height = 1};
	return enqueue(s, &op);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s)
{
	(void)kind;
	if (width > dpitch || width > spitch)
		return cudaErrorInvalidPitchValue;
	struct qop op = {.kind = Q_COPY,
	                 .dst = dst,
	                 .src = src,
	                 .dpitch = dpitch,
	                 .spitch = spitch,
	                 .width = width,
	                 .height = height};
	return enqueue(s, &op);
}

int dp_cuda_scale_avg(void *buf, size_t count, int dtype, int n, void *stream)
{
	struct qop op = {.kind = Q_AVG, .dst = buf, .count = count, .dtype = dtype, .n = n};
	return (int)enqueue((cudaStream_t)stream, &op);
}

cudaError_t cudaStreamCreate(cudaStream_t *out)
{
	struct CUstream_st *s = calloc(1, sizeof *s);
	if (!s)
		return cudaErrorMemoryAllocation;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->thread, NULL, worker, s) != 0) {
		free(s);
		return cudaErrorMemoryAllocation;
	}
	*out = s;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	pthread_mutex_lock(&s->mu);
	while (s->done < s->enqueued)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
	pthread_mutex_lock(&s->mu);
	int busy = s->done < s->enqueued;
	pthread_mutex_unlock(&s->mu);
	return busy ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
	(void)flags;
	*out = calloc(1, sizeof **out);
	return *out ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (!s)
		return cudaErrorInvalidResourceHandle;
	pthread_mutex_lock(&s->mu);
	e->s = s;
	e->at = s->enqueued;
	pthread_mutex_unlock(&s->mu);
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	struct CUstream_st *s = e->s;
	if (!s)
		return cudaSuccess;
	pthread_mutex_lock(&s->mu);
	while (s->done < e->at)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	struct CUstream_st *s = e->s;
	if (!s)
		return cudaSuccess;
	pthread_mutex_lock(&s->mu);
	int busy = s->done < e->at;
	pthread_mutex_unlock(&s->mu);
	return busy ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	free(e);
	return cudaSuccess;
}
