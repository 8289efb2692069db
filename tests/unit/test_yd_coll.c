/* test_yd_coll.c: data plane correctness with real ranks (forked processes over loopback):
 * every collective, dtype, op and algorithm at world sizes 1-8, counts 0, 1, primes and
 * counts not divisible by the world size, in place and out of place; a few large buffers;
 * point-to-point tag matching; split communicators used concurrently. Results are compared
 * bit for bit against a reference computed from every rank's inputs. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/yd_check.h"
#include "tests/unit/yd_harness.h"

static const size_t small_counts[] = {0, 1, 2, 7, 13, 64, 1031};
#define NCOUNTS (sizeof small_counts / sizeof small_counts[0])

static const enum yd_algo ar_algos[] = {YD_ALGO_AUTO, YD_ALGO_RING, YD_ALGO_NAIVE};
#define NALGOS (sizeof ar_algos / sizeof ar_algos[0])

static int rank_fail(struct harness_rank *h, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "rank %d/%d: ", h->rank, h->world);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	return 1;
}

static int compare(struct harness_rank *h, const char *what, const void *got, const void *want,
                   size_t count, enum yd_dtype dt)
{
	size_t es = yd_dtype_size(dt);
	for (size_t i = 0; i < count; i++)
		if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0)
			return rank_fail(h, "%s: wrong element %zu of %zu", what, i, count);
	return 0;
}

/* One allreduce checked against the reference. */
static int one_allreduce(struct harness_rank *h, yd_comm *c, size_t count, enum yd_dtype dt,
                         enum yd_op op, int in_place, int salt, const char *tag)
{
	int n = yd_comm_size(c), me = yd_comm_rank(c);
	size_t es = yd_dtype_size(dt), bytes = count * es + 1;
	char *send = malloc(bytes), *recv = malloc(bytes), *want = malloc(bytes);
	for (size_t i = 0; i < count; i++) {
		check_put(send, i, dt, check_input(me, i, op, salt));
		check_expect(want, i, dt, op, n, i, salt);
	}
	memset(recv, 0x5a, bytes);
	char *out = in_place ? send : recv;
	int rc = yd_allreduce(c, send, out, count, dt, op);
	char what[160];
	snprintf(what, sizeof what, "%s allreduce %s %s count %zu %s", tag, yd_dtype_name(dt),
	         yd_op_name(op), count, in_place ? "in-place" : "out-of-place");
	int bad = rc ? rank_fail(h, "%s: rc %d: %s", what, rc, yd_comm_last_error(c))
	             : compare(h, what, out, want, count, dt);
	free(send);
	free(recv);
	free(want);
	return bad;
}

static int rank_allreduce_matrix(struct harness_rank *h)
{
	for (size_t a = 0; a < NALGOS; a++) {
		yd_comm_set_algo(h->comm, ar_algos[a]);
		for (int dt = 0; dt < YD_DTYPE_COUNT; dt++)
			for (int op = 0; op < YD_OP_COUNT; op++)
				for (size_t k = 0; k < NCOUNTS; k++)
					for (int ip = 0; ip < 2; ip++)
						if (one_allreduce(h, h->comm, small_counts[k], dt,
						                  op, ip, (int)k,
						                  yd_algo_name(ar_algos[a])))
							return 1;
	}
	return 0;
}

static void test_allreduce_all_worlds(void **state)
{
	(void)state;
	for (int n = 1; n <= 8; n++) {
		struct harness_opts o = {.world = n, .absent_rank = -1};
		assert_int_equal(harness_run(&o, rank_allreduce_matrix, NULL), 0);
	}
}

/* reduce_scatter, allgather, broadcast, reduce, barrier */
static int rank_other_colls(struct harness_rank *h)
{
	yd_comm *c = h->comm;
	int n = h->world, me = h->rank;
	const enum yd_algo algos[] = {YD_ALGO_AUTO, YD_ALGO_RING, YD_ALGO_NAIVE};
	for (size_t a = 0; a < 3; a++) {
		yd_comm_set_algo(c, algos[a]);
		for (int dt = 0; dt < YD_DTYPE_COUNT; dt++)
			for (int op = 0; op < YD_OP_COUNT; op++)
				for (size_t k = 0; k < NCOUNTS; k++) {
					size_t cnt = small_counts[k], es = yd_dtype_size(dt);
					size_t total = cnt * (size_t)n;
					char *send = malloc(total * es + 1),
					     *recv = malloc(total * es + 1);
					char *want = malloc(total * es + 1);
					char what[160];
					snprintf(what, sizeof what, "%s %s %s count %zu",
					         yd_algo_name(algos[a]), yd_dtype_name(dt),
					         yd_op_name(op), cnt);
					/* reduce_scatter: rank me gets chunk me */
					for (size_t i = 0; i < total; i++)
						check_put(send, i, dt, check_input(me, i, op, 3));
					for (size_t i = 0; i < cnt; i++)
						check_expect(want, i, dt, op, n,
						             (size_t)me * cnt + i, 3);
					int rc = yd_reduce_scatter(c, send, recv, cnt, dt, op);
					if (rc || compare(h, what, recv, want, cnt, dt)) {
						rank_fail(h, "reduce_scatter %s: rc %d %s", what,
						          rc, yd_comm_last_error(c));
						return 1;
					}
					/* allgather (op irrelevant: run once per op anyway, cheap)
					 */
					for (size_t i = 0; i < cnt; i++)
						check_put(send, i, dt,
						          check_input(me, i, YD_SUM, op));
					for (int p = 0; p < n; p++)
						for (size_t i = 0; i < cnt; i++)
							check_put(want, (size_t)p * cnt + i, dt,
							          check_input(p, i, YD_SUM, op));
					int in_place = op % 2;
					if (in_place)
						memcpy(recv + (size_t)me * cnt * es, send,
						       cnt * es);
					rc = yd_allgather(
					    c, in_place ? recv + (size_t)me * cnt * es : send, recv,
					    cnt, dt);
					if (rc || compare(h, what, recv, want, total, dt)) {
						rank_fail(h, "allgather %s: rc %d %s", what, rc,
						          yd_comm_last_error(c));
						return 1;
					}
					/* broadcast from root op % n */
					int root = (op + (int)k) % n;
					for (size_t i = 0; i < cnt; i++) {
						check_put(want, i, dt,
						          check_input(root, i, YD_SUM, 1));
						check_put(recv, i, dt,
						          me == root ? check_input(me, i, YD_SUM, 1)
						                     : 99);
					}
					rc = yd_broadcast(c, recv, cnt, dt, root);
					if (rc || compare(h, what, recv, want, cnt, dt)) {
						rank_fail(h, "broadcast root %d %s: rc %d %s", root,
						          what, rc, yd_comm_last_error(c));
						return 1;
					}
					/* reduce to root */
					for (size_t i = 0; i < cnt; i++) {
						check_put(send, i, dt, check_input(me, i, op, 2));
						check_expect(want, i, dt, op, n, i, 2);
					}
					rc = yd_reduce(c, send, recv, cnt, dt, op, root);
					if (rc ||
					    (me == root && compare(h, what, recv, want, cnt, dt))) {
						rank_fail(h, "reduce root %d %s: rc %d %s", root,
						          what, rc, yd_comm_last_error(c));
						return 1;
					}
					free(send);
					free(recv);
					free(want);
				}
		if (yd_barrier(c))
			return rank_fail(h, "barrier: %s", yd_comm_last_error(c));
	}
	return 0;
}

static void test_other_collectives(void **state)
{
	(void)state;
	const int worlds[] = {1, 2, 3, 5, 8};
	for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
		struct harness_opts o = {.world = worlds[i], .absent_rank = -1};
		assert_int_equal(harness_run(&o, rank_other_colls, NULL), 0);
	}
}

/* Large buffers: 64 MiB f32 sum (world 2), 5M+3 bf16 avg (world 3), 3M+1 i64 max (world 4). */
static int rank_large(struct harness_rank *h)
{
	yd_comm *c = h->comm;
	if (h->world == 2)
		return one_allreduce(h, c, 16u << 20, YD_F32, YD_SUM, 0, 1, "large");
	if (h->world == 3)
		return one_allreduce(h, c, (5u << 20) + 3, YD_BF16, YD_AVG, 1, 2, "large");
	yd_comm_set_algo(c, YD_ALGO_RING);
	return one_allreduce(h, c, (3u << 20) + 1, YD_I64, YD_MAX, 0, 3, "large");
}

static void test_large(void **state)
{
	(void)state;
	for (int n = 2; n <= 4; n++) {
		struct harness_opts o = {.world = n, .absent_rank = -1, .timeout_ms = 10000};
		assert_int_equal(harness_run(&o, rank_large, NULL), 0);
	}
}

/* p2p: two messages to the right neighbour with different tags, received in the opposite
 * order; plus an ordered stream of same-tag messages. */
static int rank_p2p(struct harness_rank *h)
{
	yd_comm *c = h->comm;
	int n = h->world, me = h->rank, right = (me + 1) % n, left = (me + n - 1) % n;
	enum { N1 = 1000, N2 = 300000 };
	int32_t *a = malloc(N1 * 4), *b = malloc(N2 * 4), *ra = malloc(N1 * 4),
	        *rb = malloc(N2 * 4);
	for (int i = 0; i < N1; i++)
		a[i] = me * 1000000 + i;
	for (int i = 0; i < N2; i++)
		b[i] = -(me * 1000000 + i);
	yd_request *s1, *s2;
	if (yd_isend(c, a, N1, YD_I32, right, 7, &s1) || yd_isend(c, b, N2, YD_I32, right, 8, &s2))
		return rank_fail(h, "isend: %s", yd_comm_last_error(c));
	if (yd_recv(c, rb, N2, YD_I32, left, 8) || yd_recv(c, ra, N1, YD_I32, left, 7))
		return rank_fail(h, "recv: %s", yd_comm_last_error(c));
	if (yd_wait(s1) || yd_wait(s2))
		return rank_fail(h, "wait: %s", yd_comm_last_error(c));
	for (int i = 0; i < N1; i++)
		if (ra[i] != left * 1000000 + i)
			return rank_fail(h, "tag 7 payload wrong at %d", i);
	for (int i = 0; i < N2; i++)
		if (rb[i] != -(left * 1000000 + i))
			return rank_fail(h, "tag 8 payload wrong at %d", i);
	for (int k = 0; k < 50; k++) {
		int64_t v = me * 100 + k, got;
		yd_request *s;
		if (yd_isend(c, &v, 1, YD_I64, right, 3, &s) ||
		    yd_recv(c, &got, 1, YD_I64, left, 3) || yd_wait(s))
			return rank_fail(h, "stream: %s", yd_comm_last_error(c));
		if (got != left * 100 + k)
			return rank_fail(h, "stream: message %d out of order (got %lld)", k,
			                 (long long)got);
	}
	free(a);
	free(b);
	free(ra);
	free(rb);
	return 0;
}

static void test_p2p(void **state)
{
	(void)state;
	for (int n = 2; n <= 4; n++) {
		struct harness_opts o = {.world = n, .absent_rank = -1};
		assert_int_equal(harness_run(&o, rank_p2p, NULL), 0);
	}
}

/* Splits: parity groups ordered by descending rank, and halves; nonblocking allreduces on
 * both at once, then a blocking one on the world, then collectives on each again. */
static int rank_split(struct harness_rank *h)
{
	yd_comm *w = h->comm, *par, *half, *none;
	int n = h->world, me = h->rank;
	if (yd_comm_split(w, me % 2, -me, &par) || yd_comm_split(w, me < n / 2, me, &half))
		return rank_fail(h, "split: %s", yd_comm_last_error(w));
	if (yd_comm_split(w, me == 0 ? 0 : -1, 0, &none) || (me != 0 && none != NULL))
		return rank_fail(h, "split with color -1 must give NULL");
	int psize = (n - me % 2 + 1) / 2;
	if (yd_comm_size(par) != psize || yd_comm_rank(par) != (psize - 1 - me / 2))
		return rank_fail(h, "parity split: rank %d size %d", yd_comm_rank(par),
		                 yd_comm_size(par));
	enum { N = 200000 };
	float *x = malloc(N * 4), *y = malloc(N * 4);
	for (int iter = 0; iter < 3; iter++) {
		for (int i = 0; i < N; i++) {
			x[i] = (float)(me + i % 5);
			y[i] = (float)(me * 2);
		}
		yd_request *r1, *r2;
		if (yd_iallreduce(par, x, x, N, YD_F32, YD_SUM, &r1) ||
		    yd_iallreduce(half, y, y, N, YD_F32, YD_MAX, &r2))
			return rank_fail(h, "iallreduce: %s", yd_comm_last_error(par));
		int32_t one = 1, sum;
		if (yd_allreduce(w, &one, &sum, 1, YD_I32, YD_SUM) || sum != n)
			return rank_fail(h, "world allreduce: %s", yd_comm_last_error(w));
		if (yd_wait(r1) || yd_wait(r2))
			return rank_fail(h, "wait: %s / %s", yd_comm_last_error(par),
			                 yd_comm_last_error(half));
		float psum = 0, hmax = 0;
		for (int r = 0; r < n; r++) {
			if (r % 2 == me % 2)
				psum += (float)r;
			if ((r < n / 2) == (me < n / 2) && r * 2 > hmax)
				hmax = (float)(r * 2);
		}
		for (int i = 0; i < N; i++)
			if (x[i] != psum + (float)(psize * (i % 5)) || y[i] != hmax)
				return rank_fail(h, "split results wrong at %d: %g %g", i, x[i],
				                 y[i]);
	}
	if (none)
		yd_comm_destroy(none);
	yd_comm_destroy(par);
	yd_comm_destroy(half);
	free(x);
	free(y);
	return yd_barrier(w)
	           ? rank_fail(h, "barrier after split destroy: %s", yd_comm_last_error(w))
	           : 0;
}

static void test_split(void **state)
{
	(void)state;
	const int worlds[] = {2, 5, 6};
	for (size_t i = 0; i < 3; i++) {
		struct harness_opts o = {.world = worlds[i], .absent_rank = -1};
		assert_int_equal(harness_run(&o, rank_split, NULL), 0);
	}
}

/* Many nonblocking allreduces in flight, waited in order (gradient buckets). */
static int rank_buckets(struct harness_rank *h)
{
	enum { B = 8, N = 50000 };
	int32_t *buf[B];
	yd_request *req[B];
	for (int b = 0; b < B; b++) {
		buf[b] = malloc(N * 4);
		for (int i = 0; i < N; i++)
			buf[b][i] = h->rank + b + i % 7;
		if (yd_iallreduce(h->comm, buf[b], buf[b], N, YD_I32, YD_SUM, &req[b]))
			return rank_fail(h, "iallreduce %d: %s", b, yd_comm_last_error(h->comm));
	}
	for (int b = 0; b < B; b++) {
		if (yd_wait(req[b]))
			return rank_fail(h, "wait %d: %s", b, yd_comm_last_error(h->comm));
		int n = h->world;
		for (int i = 0; i < N; i++)
			if (buf[b][i] != n * (n - 1) / 2 + n * (b + i % 7))
				return rank_fail(h, "bucket %d wrong at %d", b, i);
		free(buf[b]);
	}
	return 0;
}

static void test_buckets(void **state)
{
	(void)state;
	struct harness_opts o = {.world = 3, .absent_rank = -1};
	assert_int_equal(harness_run(&o, rank_buckets, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_p2p),
	    cmocka_unit_test(test_allreduce_all_worlds),
	    cmocka_unit_test(test_other_collectives),
	    cmocka_unit_test(test_split),
	    cmocka_unit_test(test_buckets),
	    cmocka_unit_test(test_large),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
