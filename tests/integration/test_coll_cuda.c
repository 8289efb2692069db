/* test_coll_cuda.c: collectives on CUDA device buffers against the same collectives on host
 * buffers (the CPU path) and the exact reference, at 1, 2 and 4 ranks: allreduce,
 * reduce_scatter, allgather, broadcast and reduce, every dtype × op, counts 0, 1, 13, 4099
 * and three 4 MiB chunks plus a bit (the staging pipeline's chunk boundaries), in place and
 * out of place; send/recv between a device and a host buffer; the argument errors. Run with
 * staging (YARD_NCCL=0) and, where NCCL is built in and there is one GPU per rank, NCCL
 * (YARD_NCCL=1); with YARD_NCCL=auto on fewer GPUs than ranks it checks the fallback.
 * Built only with the CUDA toolkit; exits 77 (skip) where no GPU exists. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "common/clock.h"
#include "tests/integration/dp_harness.h"
#include "tests/integration/dp_values.h"

enum kind { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_REDUCE, K_COUNT };
static const char *const kind_names[K_COUNT] = {"allreduce", "reduce_scatter", "allgather",
                                                "broadcast", "reduce"};

struct mode {
	const char *nccl;      /* YARD_NCCL */
	const char *want_path; /* yd_comm_cuda_path after the first device collective */
};

/* The operation on (a, b): a is the input buffer, b the output buffer. */
static int run_op(yd_comm *c, enum kind k, char *a, char *b, size_t count, enum yd_dtype dt,
                  enum yd_op op, int root, int inplace)
{
	size_t mine = (size_t)yd_comm_rank(c) * count * yd_dtype_size(dt);
	switch (k) {
	case K_ALLREDUCE:
		return yd_allreduce(c, a, inplace ? a : b, count, dt, op);
	case K_REDUCE_SCATTER:
		return yd_reduce_scatter(c, a, inplace ? a + mine : b, count, dt, op);
	case K_ALLGATHER:
		return yd_allgather(c, inplace ? b + mine : a, b, count, dt);
	case K_BROADCAST:
		return yd_broadcast(c, a, count, dt, root);
	default:
		return yd_reduce(c, a, b, count, dt, op, root);
	}
}

static void *dev_copy(const void *host, size_t bytes)
{
	void *d = NULL;
	if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
		return NULL;
	if (bytes && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
		cudaFree(d);
		return NULL;
	}
	return d;
}

/* One case: the host path and the device path from identical inputs; the result region
 * must equal the reference, bit for bit, on both. */
static int check_case(yd_comm *c, enum kind k, enum yd_dtype dt, enum yd_op op, size_t count,
                      int root, int inplace)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c), bad = 0;
	size_t esz = yd_dtype_size(dt), total = count * (size_t)n;
	size_t a_elems = k == K_REDUCE_SCATTER ? total : count;
	size_t b_elems = k == K_ALLGATHER ? total : count;
	char *ha = malloc(a_elems * esz + 8), *hb = malloc(b_elems * esz + 8);
	char *ref = malloc(total * esz + 8), *got = malloc(total * esz + 8);
	for (size_t i = 0; i < a_elems; i++)
		dpv_set(ha, dt, i, dpv_value(op, k == K_BROADCAST ? root : me, i));
	memset(hb, 0x5a, b_elems * esz);
	if (k == K_BROADCAST && me != root)
		memset(ha, 0x5a, a_elems * esz);
	if (k == K_ALLGATHER && inplace)
		for (size_t i = 0; i < count; i++)
			dpv_set(hb + (size_t)me * count * esz, dt, i, dpv_value(op, me, i));
	/* where the result lands, and its reference */
	char *res_h;
	size_t res_off = 0, res_elems = count, ref_off = 0;
	switch (k) {
	case K_ALLREDUCE:
		res_h = inplace ? ha : hb;
		for (size_t i = 0; i < count; i++)
			dpv_ref(ref, dt, op, n, i);
		break;
	case K_REDUCE_SCATTER:
		res_h = inplace ? ha : hb;
		res_off = inplace ? (size_t)me * count : 0;
		ref_off = (size_t)me * count; /* dpv_ref writes element me * count + i there */
		for (size_t i = 0; i < count; i++)
			dpv_ref(ref, dt, op, n, (size_t)me * count + i);
		break;
	case K_ALLGATHER:
		res_h = hb;
		res_elems = total;
		for (int r = 0; r < n; r++)
			for (size_t i = 0; i < count; i++)
				dpv_set(ref + (size_t)r * count * esz, dt, i, dpv_value(op, r, i));
		break;
	case K_BROADCAST:
		res_h = ha;
		for (size_t i = 0; i < count; i++)
			dpv_set(ref, dt, i, dpv_value(op, root, i));
		break;
	default:
		res_h = hb;
		if (me != root)
			res_elems = 0;
		for (size_t i = 0; i < count; i++)
			dpv_ref(ref, dt, op, n, i);
	}
	char *da = dev_copy(ha, a_elems * esz), *db = dev_copy(hb, b_elems * esz);
	DP_CHECK(da && db, "cudaMalloc of %zu bytes failed", (a_elems + b_elems) * esz);
	char *res_d = res_h == ha ? da : db;
	int rc_d = run_op(c, k, da, db, count, dt, op, root, inplace);
	int rc_h = run_op(c, k, ha, hb, count, dt, op, root, inplace);
	cudaMemcpy(got, res_d + res_off * esz, res_elems * esz, cudaMemcpyDeviceToHost);
	if (rc_d || rc_h) {
		fprintf(stderr,
		        "rank %d/%d %s %s %s count=%zu inplace=%d: device rc=%d host rc=%d (%s)\n",
		        me, n, kind_names[k], yd_dtype_name(dt), yd_op_name(op), count, inplace,
		        rc_d, rc_h, yd_comm_last_error(c));
		bad = 1;
	} else {
		const char *which[2] = {"device", "host"};
		const char *bufs[2] = {got, res_h + res_off * esz};
		for (int w = 0; w < 2 && !bad; w++)
			for (size_t i = 0; i < res_elems && !bad; i++)
				if (memcmp(bufs[w] + i * esz, ref + (ref_off + i) * esz, esz) !=
				    0) {
					fprintf(stderr,
					        "rank %d/%d %s %s %s count=%zu root=%d inplace=%d: "
					        "%s result differs from the reference at element "
					        "%zu\n",
					        me, n, kind_names[k], yd_dtype_name(dt),
					        yd_op_name(op), count, root, inplace, which[w], i);
					bad = 1;
				}
	}
	cudaFree(da);
	cudaFree(db);
	free(ha);
	free(hb);
	free(ref);
	free(got);
	return bad;
}

/* Device send, host receive and the other way round: one message whatever the memory. */
static int check_p2p(yd_comm *c)
{
	int me = yd_comm_rank(c), n = yd_comm_size(c);
	size_t count = 3 * 1024 * 1024 + 5;
	float *h = malloc(count * sizeof *h);
	for (size_t i = 0; i < count; i++)
		h[i] = (float)(i % 1000) + (float)me;
	float *d = dev_copy(h, count * sizeof *h);
	DP_CHECK(d, "cudaMalloc failed");
	int peer = me ^ 1, rc = 0;
	if (peer >= n) {
		cudaFree(d);
		free(h);
		return 0;
	}
	/* even ranks send from the device, odd ones receive into the host, then reverse */
	if (me % 2 == 0) {
		rc = yd_send(c, d, count, YD_F32, peer, 7);
		if (!rc)
			rc = yd_recv(c, d, count, YD_F32, peer, 8);
		cudaMemcpy(h, d, count * sizeof *h, cudaMemcpyDeviceToHost);
	} else {
		rc = yd_recv(c, h, count, YD_F32, peer, 7);
		if (!rc)
			rc = yd_send(c, h, count, YD_F32, peer, 8);
	}
	DP_CHECK(rc == 0, "rank %d send/recv: %s", me, yd_comm_last_error(c));
	for (size_t i = 0; i < count; i++)
		DP_CHECK(h[i] == (float)(i % 1000) + (float)(me & ~1),
		         "rank %d send/recv: element %zu is %g", me, i, (double)h[i]);
	cudaFree(d);
	free(h);
	return 0;
}

static int check_errors(yd_comm *c)
{
	float host[4] = {0}, *dev = NULL;
	yd_request *req = NULL;
	DP_CHECK(cudaMalloc((void **)&dev, sizeof host) == cudaSuccess, "cudaMalloc failed");
	int rc = yd_allreduce(c, host, dev, 4, YD_F32, YD_SUM);
	DP_CHECK(rc == YARD_EINVAL && strstr(yd_comm_last_error(c), "host memory") &&
	             strstr(yd_comm_last_error(c), "GPU"),
	         "host send + device receive buffer: rc=%d (%s)", rc, yd_comm_last_error(c));
	if (yd_comm_size(c) > 1) { /* with one rank the only peer is itself, refused first */
		rc = yd_isend(c, dev, 4, YD_F32, (yd_comm_rank(c) + 1) % yd_comm_size(c), 1, &req);
		DP_CHECK(rc == YARD_EINVAL && strstr(yd_comm_last_error(c), "isend"),
		         "isend from device memory: rc=%d (%s)", rc, yd_comm_last_error(c));
	}
	cudaFree(dev);
	return 0;
}

/* Large counts (three staging chunks and a bit) for the sums and averages: the ops whose
 * chunks are reduced and divided separately. */
static int ci_big_ok(int k, int dt, int op)
{
#ifdef YD_CUDA_EMULATED
	/* the emulation shares this machine's 2 cores: one 4-byte, one 2-byte, one 8-byte type */
	if (dt != YD_F32 && dt != YD_BF16 && dt != YD_I64)
		return 0;
#else
	(void)dt;
#endif
	return op == YD_SUM || (op == YD_AVG && k != K_ALLGATHER && k != K_BROADCAST);
}

static int body(yd_comm *c, void *arg)
{
	const struct mode *m = arg;
	if (!c) {
		fprintf(stderr, "init failed: %s\n", (const char *)arg);
		return 1;
	}
	int ngpu = yd_cuda_device_count(), me = yd_comm_rank(c), n = yd_comm_size(c);
	DP_CHECK(ngpu > 0, "rank %d sees no GPU", me);
	DP_CHECK(cudaSetDevice(me % ngpu) == cudaSuccess, "cudaSetDevice(%d)", me % ngpu);
	DP_CHECK(strcmp(yd_comm_cuda_path(c), "off") != 0, "YARD_CUDA=1 did not enable CUDA");
	static const size_t counts[] = {0, 1, 13, 4099};
	int fails = 0;
	for (int k = 0; k < K_COUNT; k++)
		for (int dt = 0; dt < YD_DTYPE_COUNT; dt++)
			for (int op = 0; op < YD_OP_COUNT; op++) {
				if ((k == K_ALLGATHER || k == K_BROADCAST) && op != YD_SUM)
					continue;
				for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
					int root = (int)(ci + (size_t)dt) % n;
					fails +=
					    check_case(c, k, dt, op, counts[ci], root, (int)ci % 2);
					if (k != K_BROADCAST && k != K_REDUCE)
						fails += check_case(c, k, dt, op, counts[ci], root,
						                    1 - (int)ci % 2);
					if (fails)
						return 1;
				}
				if (ci_big_ok(k, dt, op)) {
					/* three chunks and a bit: every pipeline stage overlaps */
					size_t big = 2 * ((4u << 20) / yd_dtype_size(dt)) + 7;
					fails += check_case(c, k, dt, op, big, n - 1, 0);
					fails += check_case(c, k, dt, op, big, 0, 1);
				}
				if (fails)
					return 1;
			}
	const char *path = yd_comm_cuda_path(c);
	DP_CHECK(strcmp(path, m->want_path) == 0,
	         "rank %d: device collectives took the %s path, "
	         "expected %s (YARD_NCCL=%s)",
	         me, path, m->want_path, m->nccl);
	fails += check_p2p(c);
	fails += check_errors(c);
	fails += yd_barrier(c) != 0;
	return fails;
}

static int run(int world, const char *nccl, const char *want_path)
{
	struct mode m = {nccl, want_path};
	struct dp_spawn sp = {
	    .world = world, .timeout_ms = 60000, .wall_s = 900, .kill_rank = -1, .skip_rank = -1};
	int status[64];
	setenv("YARD_NCCL", nccl, 1);
	uint64_t t0 = yard_now_mono_ms();
	int failed = dp_spawn_run(&sp, body, &m, status);
	printf("%s world=%d YARD_NCCL=%s (expected path %s): %s (%llu ms)\n",
	       failed ? "FAIL" : "ok", world, nccl, want_path,
	       failed ? "ranks failed" : "all correct",
	       (unsigned long long)(yard_now_mono_ms() - t0));
	fflush(stdout);
	return failed != 0;
}

/* CUDA must not be initialised in the parent before it forks the ranks: count GPUs in a
 * child. */
static int count_gpus(void)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(yd_cuda_device_count() > 100 ? 100 : yd_cuda_device_count());
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return 0;
	return WEXITSTATUS(st);
}

/* No GPU: YARD_CUDA=1 must not stop a communicator from working on host buffers, and asking
 * for device buffers explicitly must say why it cannot. */
static int body_without_gpu(yd_comm *c, void *arg)
{
	float x[3] = {1, 2, 3};
	(void)arg;
	DP_CHECK(c, "init with YARD_CUDA=1 failed on a machine without a GPU");
	DP_CHECK(strcmp(yd_comm_cuda_path(c), "off") == 0, "CUDA path is %s without a GPU",
	         yd_comm_cuda_path(c));
	int rc = yd_comm_use_cuda(c);
	DP_CHECK(rc == YARD_EUNSUPPORTED && strstr(yd_comm_last_error(c), "no CUDA device"),
	         "yd_comm_use_cuda without a GPU: rc=%d (%s)", rc, yd_comm_last_error(c));
	DP_CHECK(yd_allreduce(c, x, x, 3, YD_F32, YD_SUM) == 0 && x[2] == 3.0f * yd_comm_size(c),
	         "host allreduce after the refusal: %s", yd_comm_last_error(c));
	return 0;
}

#ifdef YD_CUDA_EMULATED
void cuda_emul_stall(int on); /* cuda_emul.c */

/* A GPU copy that never completes (the emulated streams stall): the staged collective fails
 * within the deadline with an error naming the GPU and the operation, instead of hanging. */
static int body_stalled_copy(yd_comm *c, void *arg)
{
	float h[64] = {0};
	(void)arg;
	DP_CHECK(c, "init failed");
	float *d = dev_copy(h, sizeof h);
	DP_CHECK(d, "cudaMalloc failed");
	yd_comm_set_timeout(c, 1000);
	cuda_emul_stall(1);
	uint64_t t0 = yard_now_mono_ms();
	int rc = yd_allreduce(c, d, d, 64, YD_F32, YD_SUM);
	uint64_t took = yard_now_mono_ms() - t0;
	cuda_emul_stall(0);
	const char *err = yd_comm_last_error(c);
	DP_CHECK(rc == YARD_ETIMEDOUT && strstr(err, "allreduce") && strstr(err, "GPU 0") &&
	             strstr(err, "did not complete within 1000 ms"),
	         "stalled copy: rc=%d (%s)", rc, err);
	DP_CHECK(took < 5000, "stalled copy reported after %llu ms", (unsigned long long)took);
	cudaFree(d);
	return 0;
}
#endif

int main(void)
{
	int ngpu = count_gpus(), bad = 0;
	if (ngpu == 0) {
		struct dp_spawn sp = {.world = 2,
		                      .timeout_ms = 10000,
		                      .wall_s = 60,
		                      .kill_rank = -1,
		                      .skip_rank = -1};
		int status[2];
		setenv("YARD_CUDA", "1", 1);
		if (dp_spawn_run(&sp, body_without_gpu, NULL, status) != 0) {
			printf("FAIL: YARD_CUDA=1 on a machine without a GPU\n");
			return 1;
		}
		printf("ok: without a GPU, YARD_CUDA=1 leaves host buffers working and "
		       "yd_comm_use_cuda says why it cannot\n");
		printf("SKIP: no CUDA device on this machine (cudaGetDeviceCount found none): "
		       "device-buffer collectives were compiled but not run\n");
		return 77;
	}
	setenv("YARD_CUDA", "1", 1);
#ifdef YD_CUDA_EMULATED
	printf("emulated CUDA runtime (tests/integration/cuda_emul.c): device memory is host "
	       "memory, streams are ordered worker threads\n");
#else
	printf("%d GPU(s)\n", ngpu);
#endif
	/* world 1 too: on a one-GPU machine it is the only size NCCL can run */
	static const int worlds[] = {1, 2, 4};
	for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
		int world = worlds[w];
		bad += run(world, "0", "staged");
#if defined(HAVE_NCCL) && !defined(YD_CUDA_NO_NCCL)
		/* NCCL wants one GPU per rank; with fewer, auto must settle on staging */
		if (ngpu >= world)
			bad += run(world, "1", "nccl");
		else
			bad += run(world, "auto", "staged");
#endif
	}
#ifdef YD_CUDA_EMULATED
	struct dp_spawn sp = {
	    .world = 2, .timeout_ms = 10000, .wall_s = 60, .kill_rank = -1, .skip_rank = -1};
	int status[2];
	int stall_bad = dp_spawn_run(&sp, body_stalled_copy, NULL, status) != 0;
	printf("%s: a GPU copy that never completes is an error within the deadline\n",
	       stall_bad ? "FAIL" : "ok");
	bad += stall_bad;
#endif
	return bad ? 1 : 0;
}
