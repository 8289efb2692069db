/* test_yd_fault.c: failure behaviour with real ranks. A rank is SIGKILLed at random points
 * (between operations, in the middle of large collectives and point-to-point transfers) or
 * stopped (silent): every survivor must return YARD_EPEER or YARD_ETIMEDOUT within the
 * deadline, name the failed rank in yd_comm_last_error, never report a wrong result as
 * success, and stay failed. Also: init with a missing rank, abort from another thread (world
 * and split communicators), mismatched collectives.
 * YD_FAULT_POINTS (default 24) and YD_FAULT_SEED choose the kill points (scripts/dp-fault-soak
 * runs hundreds). */
#include "config.h"

#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "tests/unit/yd_check.h"
#include "tests/unit/yd_harness.h"

#define TIMEOUT_MS 2000

static int rank_fail(struct harness_rank *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
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

enum kill_mode { KILL_BETWEEN, KILL_MID_OP, KILL_MID_OP2, KILL_STOP, KILL_MODES };

struct kill_point {
	int victim, at_op, mode, delay_us, algo;
};

#define OPS 12
#define BIG (1u << 20) /* floats: 4 MiB */

/* Operation k of the fixed sequence every rank runs; returns rc, checks the result. */
static int run_op(struct harness_rank *h, int k, float *buf, int *wrong)
{
	yd_comm *c = h->comm;
	int n = h->world, me = h->rank;
	size_t count = (k % 3 == 0) ? BIG : (size_t)(k * 1000 + 1);
	int rc;
	*wrong = 0;
	switch (k % 4) {
	case 0:
	case 1:
		for (size_t i = 0; i < count; i++)
			buf[i] = (float)check_input(me, i, YD_SUM, k);
		rc = yd_allreduce(c, buf, buf, count, YD_F32, YD_SUM);
		if (!rc)
			for (size_t i = 0; i < count && !*wrong; i++) {
				float want;
				check_expect(&want, 0, YD_F32, YD_SUM, n, i, k);
				*wrong = buf[i] != want;
			}
		return rc;
	case 2: {
		int root = k % n;
		for (size_t i = 0; i < count; i++)
			buf[i] = me == root ? (float)i : -1.0f;
		rc = yd_broadcast(c, buf, count, YD_F32, root);
		for (size_t i = 0; !rc && i < count && !*wrong; i++)
			*wrong = buf[i] != (float)i;
		return rc;
	}
	default: {
		int right = (me + 1) % n, left = (me + n - 1) % n;
		yd_request *s;
		for (size_t i = 0; i < count; i++)
			buf[count + i] = (float)(me * 3 + (int)(i % 100));
		rc = yd_isend(c, buf + count, count, YD_F32, right, k, &s);
		if (rc)
			return rc;
		int rc2 = yd_recv(c, buf, count, YD_F32, left, k);
		rc = yd_wait(s);
		rc = rc2 ? rc2 : rc;
		for (size_t i = 0; !rc && i < count && !*wrong; i++)
			*wrong = buf[i] != (float)(left * 3 + (int)(i % 100));
		return rc;
	}
	}
}

struct op_thread {
	struct harness_rank *h;
	int k;
	float *buf;
};

static void *op_main(void *arg)
{
	struct op_thread *ot = arg;
	int wrong;
	run_op(ot->h, ot->k, ot->buf, &wrong);
	return NULL;
}

static int rank_kill_point(struct harness_rank *h)
{
	const struct kill_point *kp = h->arg;
	yd_comm *c = h->comm;
	float *buf = malloc(2 * BIG * sizeof(float));
	yd_comm_set_algo(c, kp->algo);
	char victim_name[64];
	snprintf(victim_name, sizeof victim_name, "rank %d (", kp->victim);
	for (int k = 0; k <= OPS; k++) {
		if (h->rank == kp->victim && k == kp->at_op) {
			harness_expect_kill();
			if (kp->mode == KILL_BETWEEN)
				raise(SIGKILL);
			if (kp->mode == KILL_STOP)
				raise(SIGSTOP);
			/* the same operation as everyone else, killed while it runs */
			struct op_thread ot = {h, k, buf};
			pthread_t t;
			pthread_create(&t, NULL, op_main, &ot);
			usleep((useconds_t)kp->delay_us);
			raise(SIGKILL);
		}
		int wrong = 0;
		uint64_t t0 = yard_now_mono_ms();
		/* the final barrier involves everyone: a rank that only talked to survivors so far
		 * must fail there */
		int rc = k < OPS ? run_op(h, k, buf, &wrong) : yd_barrier(c);
		uint64_t took = yard_now_mono_ms() - t0;
		if (!rc && wrong)
			return rank_fail(h, "op %d reported success with a wrong result", k);
		if (!rc)
			continue;
		const char *err = yd_comm_last_error(c);
		if (rc != YARD_EPEER && rc != YARD_ETIMEDOUT)
			return rank_fail(h, "op %d: rc %d (want EPEER/ETIMEDOUT): %s", k, rc, err);
		if (!strstr(err, victim_name))
			return rank_fail(h, "op %d: error does not name %s: %s", k, victim_name,
			                 err);
		if (took > 2 * TIMEOUT_MS + 1500)
			return rank_fail(h, "op %d: took %llu ms to fail (deadline %d ms)", k,
			                 (unsigned long long)took, TIMEOUT_MS);
		/* a failed communicator stays failed, at once */
		t0 = yard_now_mono_ms();
		int again = yd_allreduce(c, buf, buf, 10, YD_F32, YD_SUM);
		if (again == 0 || yard_now_mono_ms() - t0 > 100)
			return rank_fail(h, "communicator did not stay failed (rc %d)", again);
		free(buf);
		return 0;
	}
	if (h->rank == kp->victim)
		return 0;
	return rank_fail(h, "no error although rank %d died before op %d", kp->victim, kp->at_op);
}

static void test_kill_points(void **state)
{
	(void)state;
	const char *pts = getenv("YD_FAULT_POINTS"), *seed_s = getenv("YD_FAULT_SEED");
	int points = pts ? atoi(pts) : 24;
	unsigned seed = seed_s ? (unsigned)strtoul(seed_s, NULL, 10) : 20261121u;
	srand(seed);
	const enum yd_algo algos[] = {YD_ALGO_AUTO, YD_ALGO_RING, YD_ALGO_NAIVE};
	for (int i = 0; i < points; i++) {
		struct kill_point kp;
		int n = 2 + rand() % 3;
		kp.victim = rand() % n;
		kp.at_op = rand() % OPS;
		kp.mode = i % KILL_MODES;
		if (kp.mode == KILL_STOP && i % 8 != 3)
			kp.mode = KILL_BETWEEN; /* silent peers cost a full deadline: only a few */
		kp.delay_us = rand() % 4000;
		kp.algo = algos[rand() % 3];
		printf("kill point %d (seed %u): world %d, rank %d, before op %d, mode %d, delay "
		       "%d us, "
		       "algo %s\n",
		       i, seed, n, kp.victim, kp.at_op, kp.mode, kp.delay_us,
		       yd_algo_name(kp.algo));
		fflush(stdout);
		struct harness_opts o = {
		    .world = n, .absent_rank = -1, .timeout_ms = TIMEOUT_MS, .wall_limit_s = 30};
		assert_int_equal(harness_run(&o, rank_kill_point, &kp), 0);
	}
}

/* ---- init with a missing rank ---- */

static int rank_init_missing(struct harness_rank *h)
{
	const char *peers = h->arg;
	if (peers)
		setenv("YARD_PEERS", peers, 1);
	setenv("YARD_TIMEOUT_MS", "800", 1);
	char err[1024];
	yd_comm *c;
	uint64_t t0 = yard_now_mono_ms();
	int rc = yd_comm_init_env(&c, err, sizeof err);
	uint64_t took = yard_now_mono_ms() - t0;
	if (rc != YARD_ETIMEDOUT)
		return rank_fail(h, "init with rank 1 missing: rc %d (%s)", rc, rc ? err : "ok");
	if (took > 3000)
		return rank_fail(h, "init took %llu ms to time out", (unsigned long long)took);
	if (!strstr(err, peers ? "rank 1 (" : "missing rank(s) 1"))
		return rank_fail(h, "init error does not name rank 1: %s", err);
	return 0;
}

static void test_init_missing_rank(void **state)
{
	(void)state;
	struct harness_opts o = {.world = 3, .absent_rank = 1, .skip_init = 1};
	assert_int_equal(harness_run(&o, rank_init_missing, NULL), 0);
	/* fixed endpoints (YARD_PEERS): free ports chosen by the kernel, then released */
	char peers[200] = "";
	for (int r = 0; r < 3; r++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in sa = {.sin_family = AF_INET,
		                         .sin_addr.s_addr = htonl(0x7f000001)};
		socklen_t sl = sizeof sa;
		assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
		getsockname(fd, (struct sockaddr *)&sa, &sl);
		close(fd);
		snprintf(peers + strlen(peers), sizeof peers - strlen(peers), "%s127.0.0.1:%d",
		         r ? "," : "", ntohs(sa.sin_port));
	}
	assert_int_equal(harness_run(&o, rank_init_missing, peers), 0);
}

/* ---- abort from another thread ---- */

static void *abort_later(void *arg)
{
	usleep(300000);
	yd_comm_abort(arg);
	return NULL;
}

static int rank_abort(struct harness_rank *h)
{
	yd_comm *w = h->comm, *sub;
	yd_comm_set_timeout(w, 20000);
	if (yd_comm_split(w, 0, h->rank, &sub))
		return rank_fail(h, "split: %s", yd_comm_last_error(w));
	yd_comm_set_timeout(sub, 20000);
	int32_t x = 0;
	pthread_t t;
	/* 1. rank 1 aborts the split communicator while everyone waits in a receive on it */
	if (h->rank == 1)
		pthread_create(&t, NULL, abort_later, sub);
	uint64_t t0 = yard_now_mono_ms();
	int rc = yd_recv(sub, &x, 1, YD_I32, h->rank == 0 ? 1 : 0, 5);
	uint64_t took = yard_now_mono_ms() - t0;
	if (h->rank == 1)
		pthread_join(t, NULL);
	int want = h->rank == 1 ? YARD_EABORTED : YARD_EPEER;
	if (rc != want || took > 3000)
		return rank_fail(h, "split abort: rc %d after %llu ms (want %d promptly): %s", rc,
		                 (unsigned long long)took, want, yd_comm_last_error(sub));
	if (h->rank != 1 && !strstr(yd_comm_last_error(sub), "rank 1 ("))
		return rank_fail(h, "split abort: error does not name rank 1: %s",
		                 yd_comm_last_error(sub));
	yd_comm_destroy(sub);
	/* the world communicator is unaffected */
	if (yd_barrier(w))
		return rank_fail(h, "barrier after split abort: %s", yd_comm_last_error(w));
	/* 2. rank 0 aborts the world communicator during a receive */
	if (h->rank == 0)
		pthread_create(&t, NULL, abort_later, w);
	t0 = yard_now_mono_ms();
	rc = yd_recv(w, &x, 1, YD_I32, h->rank == 0 ? 1 : 0, 6);
	took = yard_now_mono_ms() - t0;
	if (h->rank == 0)
		pthread_join(t, NULL);
	want = h->rank == 0 ? YARD_EABORTED : YARD_EPEER;
	if (rc != want || took > 3000)
		return rank_fail(h, "world abort: rc %d after %llu ms (want %d promptly): %s", rc,
		                 (unsigned long long)took, want, yd_comm_last_error(w));
	if (h->rank != 0 && !strstr(yd_comm_last_error(w), "rank 0 ("))
		return rank_fail(h, "world abort: error does not name rank 0: %s",
		                 yd_comm_last_error(w));
	if (yd_barrier(w) != (h->rank == 0 ? YARD_EABORTED : YARD_EPEER))
		return rank_fail(h, "aborted communicator did not stay failed");
	return 0;
}

static void test_abort(void **state)
{
	(void)state;
	struct harness_opts o = {.world = 3, .absent_rank = -1};
	assert_int_equal(harness_run(&o, rank_abort, NULL), 0);
}

/* ---- mismatched collectives ---- */

enum mismatch { MM_COUNT, MM_DTYPE, MM_OP, MM_KIND, MM_ROOT, MM_P2P_LEN, MM_COUNT_ALL };

static int rank_mismatch(struct harness_rank *h)
{
	int what = *(int *)h->arg, odd = h->rank == h->world - 1, rc;
	yd_comm *c = h->comm;
	float buf[64] = {0};
	yd_comm_set_timeout(c, 10000);
	switch (what) {
	case MM_COUNT:
		rc = yd_allreduce(c, buf, buf, odd ? 10 : 11, YD_F32, YD_SUM);
		break;
	case MM_DTYPE:
		rc = yd_allreduce(c, buf, buf, 16, odd ? YD_I32 : YD_F32, YD_SUM);
		break;
	case MM_OP:
		rc = yd_allreduce(c, buf, buf, 16, YD_F32, odd ? YD_MAX : YD_SUM);
		break;
	case MM_KIND:
		rc = odd ? yd_broadcast(c, buf, 16, YD_F32, 0)
		         : yd_allreduce(c, buf, buf, 16, YD_F32, YD_SUM);
		break;
	case MM_ROOT:
		rc = yd_broadcast(c, buf, 16, YD_F32, odd ? 1 : 0);
		if (rc == 0) /* a root that only sends learns it from the next operation */
			rc = yd_barrier(c);
		break;
	default: /* p2p: rank 0 sends 8 floats, rank 1 expects 9 */
		if (h->rank == 0) {
			rc = yd_send(c, buf, 8, YD_F32, 1, 1);
			if (rc == 0)
				rc = yd_recv(c, buf, 1, YD_F32, 1, 2);
		} else if (h->rank == 1) {
			rc = yd_recv(c, buf, 9, YD_F32, 0, 1);
		} else {
			return 0;
		}
	}
	if (rc != YARD_EMISMATCH)
		return rank_fail(h, "mismatch case %d: rc %d (want EMISMATCH): %s", what, rc,
		                 yd_comm_last_error(c));
	if (yd_allreduce(c, buf, buf, 1, YD_F32, YD_SUM) != YARD_EMISMATCH)
		return rank_fail(h, "mismatch case %d: communicator did not stay failed", what);
	return 0;
}

static void test_mismatch(void **state)
{
	(void)state;
	for (int what = 0; what < MM_COUNT_ALL; what++) {
		struct harness_opts o = {.world = 3, .absent_rank = -1};
		printf("mismatch case %d\n", what);
		assert_int_equal(harness_run(&o, rank_mismatch, &what), 0);
	}
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mismatch),
	    cmocka_unit_test(test_abort),
	    cmocka_unit_test(test_init_missing_rank),
	    cmocka_unit_test(test_kill_points),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
