/* test_coll_matrix.c: correctness of every collective across world sizes 1-8, transports
 * (shm, tcp, and mixed: two emulated hosts through host labels), every dtype × op ×
 * algorithm at small sizes (0, 1, primes, counts not divisible by the world size), in-place
 * and out-of-place, and sampled large sizes up to 64 MiB. Real processes on 127.0.0.1. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "tests/integration/dp_harness.h"
#include "tests/integration/dp_values.h"

static const size_t small_counts[] = {0, 1, 7, 13, 1000, 4099};
static const enum yd_algo all_algos[] = {YD_ALGO_AUTO, YD_ALGO_RING, YD_ALGO_RD,
                                         YD_ALGO_HD,   YD_ALGO_TREE, YD_ALGO_NAIVE,
                                         YD_ALGO_PS,   YD_ALGO_HIER, YD_ALGO_SHARED};

struct plan {
	int matrix;       /* run the small-size matrix at all */
	int full;         /* every dtype × op × algo at small sizes */
	size_t big_count; /* one large f32 allreduce, 0 = none */
	enum yd_algo big_algo;
};

static int check_allreduce(yd_comm *c, enum yd_dtype dt, enum yd_op op, size_t count, int inplace)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c);
	size_t esz = yd_dtype_size(dt);
	char *in = malloc(count * esz + 8), *out = malloc(count * esz + 8),
	     *ref = malloc(count * esz + 8);
	for (size_t i = 0; i < count; i++) {
		dpv_set(in, dt, i, dpv_value(op, me, i));
		dpv_ref(ref, dt, op, n, i);
	}
	memset(out, 0x5a, count * esz);
	int rc = inplace ? yd_allreduce(c, in, in, count, dt, op)
	                 : yd_allreduce(c, in, out, count, dt, op);
	char *res = inplace ? in : out;
	int bad = rc != 0 || memcmp(res, ref, count * esz) != 0;
	if (bad) {
		size_t i = 0;
		while (rc == 0 && i < count && !memcmp(res + i * esz, ref + i * esz, esz))
			i++;
		fprintf(stderr,
		        "rank %d/%d allreduce %s %s count=%zu inplace=%d: rc=%d (%s) first bad "
		        "index %zu\n",
		        me, n, yd_dtype_name(dt), yd_op_name(op), count, inplace, rc,
		        yd_comm_last_error(c), i);
	}
	free(in);
	free(out);
	free(ref);
	return bad;
}

static int check_reduce_scatter(yd_comm *c, enum yd_dtype dt, enum yd_op op, size_t count,
                                int inplace)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c);
	size_t esz = yd_dtype_size(dt), total = count * (size_t)n;
	char *in = malloc(total * esz + 8), *out = malloc(count * esz + 8),
	     *ref = malloc(total * esz + 8);
	for (size_t i = 0; i < total; i++) {
		dpv_set(in, dt, i, dpv_value(op, me, i));
		dpv_ref(ref, dt, op, n, i);
	}
	char *dst = inplace ? in + (size_t)me * count * esz : out;
	int rc = yd_reduce_scatter(c, in, dst, count, dt, op);
	int bad = rc != 0 || memcmp(dst, ref + (size_t)me * count * esz, count * esz) != 0;
	if (bad)
		fprintf(stderr,
		        "rank %d/%d reduce_scatter %s %s count=%zu inplace=%d: rc=%d (%s)\n", me, n,
		        yd_dtype_name(dt), yd_op_name(op), count, inplace, rc,
		        yd_comm_last_error(c));
	free(in);
	free(out);
	free(ref);
	return bad;
}

static int check_allgather(yd_comm *c, enum yd_dtype dt, size_t count, int inplace)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c);
	size_t esz = yd_dtype_size(dt), total = count * (size_t)n;
	char *in = malloc(count * esz + 8), *out = malloc(total * esz + 8),
	     *ref = malloc(total * esz + 8);
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < count; i++)
			dpv_set(ref, dt, (size_t)r * count + i, dpv_value(YD_SUM, r, i));
	memset(out, 0x5a, total * esz);
	const char *src = in;
	if (inplace) {
		for (size_t i = 0; i < count; i++)
			dpv_set(out, dt, (size_t)me * count + i, dpv_value(YD_SUM, me, i));
		src = out + (size_t)me * count * esz;
	} else {
		for (size_t i = 0; i < count; i++)
			dpv_set(in, dt, i, dpv_value(YD_SUM, me, i));
	}
	int rc = yd_allgather(c, src, out, count, dt);
	int bad = rc != 0 || memcmp(out, ref, total * esz) != 0;
	if (bad)
		fprintf(stderr, "rank %d/%d allgather %s count=%zu inplace=%d: rc=%d (%s)\n", me, n,
		        yd_dtype_name(dt), count, inplace, rc, yd_comm_last_error(c));
	free(in);
	free(out);
	free(ref);
	return bad;
}

static int check_broadcast(yd_comm *c, enum yd_dtype dt, size_t count, int root)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c);
	size_t esz = yd_dtype_size(dt);
	char *buf = malloc(count * esz + 8), *ref = malloc(count * esz + 8);
	for (size_t i = 0; i < count; i++) {
		dpv_set(ref, dt, i, dpv_value(YD_SUM, root, i));
		dpv_set(buf, dt, i, me == root ? dpv_value(YD_SUM, root, i) : 99);
	}
	int rc = yd_broadcast(c, buf, count, dt, root);
	int bad = rc != 0 || memcmp(buf, ref, count * esz) != 0;
	if (bad)
		fprintf(stderr, "rank %d/%d broadcast %s count=%zu root=%d: rc=%d (%s)\n", me, n,
		        yd_dtype_name(dt), count, root, rc, yd_comm_last_error(c));
	free(buf);
	free(ref);
	return bad;
}

static int check_reduce(yd_comm *c, enum yd_dtype dt, enum yd_op op, size_t count, int root,
                        int inplace)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c);
	size_t esz = yd_dtype_size(dt);
	char *in = malloc(count * esz + 8), *out = malloc(count * esz + 8),
	     *ref = malloc(count * esz + 8);
	for (size_t i = 0; i < count; i++) {
		dpv_set(in, dt, i, dpv_value(op, me, i));
		dpv_ref(ref, dt, op, n, i);
	}
	char *dst = inplace ? in : out;
	int rc = yd_reduce(c, in, dst, count, dt, op, root);
	int bad = rc != 0 || (me == root && memcmp(dst, ref, count * esz) != 0);
	if (bad)
		fprintf(stderr, "rank %d/%d reduce %s %s count=%zu root=%d: rc=%d (%s)\n", me, n,
		        yd_dtype_name(dt), yd_op_name(op), count, root, rc, yd_comm_last_error(c));
	free(in);
	free(out);
	free(ref);
	return bad;
}

static int body(yd_comm *c, void *arg)
{
	const struct plan *p = arg;
	int n = yd_comm_size(c), fails = 0;
	if (!c)
		return 1;
	for (size_t a = 0; p->matrix && a < sizeof all_algos / sizeof all_algos[0]; a++) {
		yd_comm_set_algo(c, all_algos[a]);
		for (int dt = 0; dt < YD_DTYPE_COUNT; dt++) {
			int ops = p->full || dt == YD_F32 ? YD_OP_COUNT : 1;
			for (int op = 0; op < ops; op++)
				for (size_t k = 0; k < sizeof small_counts / sizeof small_counts[0];
				     k++) {
					size_t cnt = small_counts[k];
					if (!p->full && k % 2)
						continue;
					fails += check_allreduce(c, dt, op, cnt, 0);
					fails += check_allreduce(c, dt, op, cnt, 1);
					if (fails)
						return 1;
				}
			/* the other collectives: every dtype, two ops, a few sizes and roots */
			for (int op = 0; op < YD_OP_COUNT; op += 2)
				for (size_t k = 0; k < 4; k++) {
					size_t cnt = small_counts[k + 1];
					int root = (int)(k + a) % n;
					fails += check_reduce_scatter(c, dt, op, cnt, (int)k % 2);
					fails += check_allgather(c, dt, cnt, (int)k % 2);
					fails += check_broadcast(c, dt, cnt, root);
					fails += check_reduce(c, dt, op, cnt, root, (int)k % 2);
					if (fails)
						return 1;
				}
		}
		/* a medium size per algorithm: 1 MiB + a bit, not divisible by anything */
		fails += check_allreduce(c, YD_F32, YD_SUM, 262147, (int)a % 2);
		fails += check_broadcast(c, YD_BF16, 300007, (int)a % n);
		fails += check_reduce(c, YD_F64, YD_MAX, 100003, (int)(a + 1) % n, 0);
		fails += check_reduce_scatter(c, YD_I32, YD_SUM, 70001, 0);
		fails += check_allgather(c, YD_F16, 70001, 1);
		if (fails)
			return 1;
	}
	yd_comm_set_algo(c, p->big_algo);
	if (p->big_count) {
		fails += check_allreduce(c, YD_F32, YD_SUM, p->big_count, 0);
		fails += check_allreduce(c, YD_F32, YD_SUM, p->big_count / 4 + 3, 1);
	}
	fails += yd_barrier(c) != 0;
	return fails;
}

static int run(int world, const char *transport, const char *hosts, const struct plan *p)
{
	struct dp_spawn sp = {.world = world,
	                      .transport = transport,
	                      .hosts = hosts,
	                      .timeout_ms = 20000,
	                      .wall_s = 240,
	                      .kill_rank = -1,
	                      .skip_rank = -1};
	int status[64];
	uint64_t t0 = yard_now_mono_ms();
	int failed = dp_spawn_run(&sp, body, (void *)p, status);
	printf("%s world=%d transport=%s hosts=%s: %s (%llu ms)\n", failed ? "FAIL" : "ok", world,
	       transport ? transport : "auto", hosts ? hosts : "-",
	       failed ? "ranks failed" : "all correct",
	       (unsigned long long)(yard_now_mono_ms() - t0));
	fflush(stdout);
	return failed != 0;
}

int main(int argc, char **argv)
{
	int bad = 0;
	struct plan full = {1, 1, 0, YD_ALGO_AUTO}, sampled = {1, 0, 0, YD_ALGO_AUTO},
	            big = {0, 0, 16u << 20, YD_ALGO_AUTO},
	            big_shared = {0, 0, 16u << 20, YD_ALGO_SHARED};
	const char *quick = getenv("DP_TEST_QUICK");
	(void)argc;
	(void)argv;
	/* shared memory: every world size, full matrix */
	for (int n = 1; n <= 8; n++)
		bad += run(n, "shm", NULL, n <= 4 || !quick ? &full : &sampled);
	/* TCP: full at small worlds, sampled above */
	for (int n = 2; n <= 8; n++)
		bad += run(n, "tcp", NULL, n <= 3 ? &full : &sampled);
	/* mixed: two emulated hosts (shm inside, TCP between), uneven and even */
	bad += run(4, NULL, "a,a,b,b", &full);
	bad += run(5, NULL, "a,a,a,b,b", &sampled);
	bad += run(6, NULL, "h0,h1,h0,h1,h0,h1", &sampled);
	bad += run(8, NULL, "a,a,a,a,b,b,b,b", &sampled);
	/* large: 64 MiB f32 (16 Mi elements) at 2 and 4 ranks over shm and TCP, and through the
	 * shared buffers at 3 ranks and at 3 ranks on each of two hosts (chunks and slices not
	 * divisible) */
	bad += run(2, "shm", NULL, &big);
	bad += run(3, "shm", NULL, &big_shared);
	bad += run(6, NULL, "a,b,a,b,a,b", &big_shared);
	bad += run(4, "tcp", NULL, &big);
	bad += run(4, NULL, "a,a,b,b", &big);
	return bad ? 1 : 0;
}
