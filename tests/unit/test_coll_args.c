/* test_coll_args.c: every public collective and point-to-point call refuses bad arguments
 * with YARD_EINVAL and a message that names the call and what was wrong (unknown dtype or
 * op, a NULL buffer with a count, a count too large, a root or peer out of range or this
 * rank), changes nothing, and leaves the communicator usable: the next good call works. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/yd.h"

static int setup(void **state)
{
	const char *ep[] = {"127.0.0.1:0"};
	struct yd_config cfg = {.rank = 0,
	                        .world_size = 1,
	                        .endpoints = ep,
	                        .timeout_ms = 5000,
	                        .calibrate = -1,
	                        .tune = -1};
	char err[256];
	yd_comm *c = NULL;
	if (yd_comm_init(&cfg, &c, err, sizeof err) != 0) {
		print_error("yd_comm_init: %s\n", err);
		return -1;
	}
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	yd_comm_destroy(*state);
	return 0;
}

/* rc is YARD_EINVAL and the communicator's message is exactly want */
static void refused(yd_comm *c, int rc, const char *want)
{
	assert_int_equal(rc, YARD_EINVAL);
	assert_string_equal(yd_comm_last_error(c), want);
}

static void test_bad_dtype_and_op(void **state)
{
	yd_comm *c = *state;
	float a[4] = {1, 2, 3, 4}, b[4] = {0};
	refused(c, yd_allreduce(c, a, b, 4, (enum yd_dtype)99, YD_SUM),
	        "allreduce: unknown dtype 99");
	refused(c, yd_allreduce(c, a, b, 4, YD_F32, (enum yd_op)42),
	        "allreduce: unknown reduction op 42");
	refused(c, yd_reduce(c, a, b, 4, YD_F32, (enum yd_op) - 1, 0),
	        "reduce: unknown reduction op -1");
	refused(c, yd_broadcast(c, a, 4, (enum yd_dtype) - 3, 0), "broadcast: unknown dtype -3");
	refused(c, yd_allgather(c, a, b, 4, (enum yd_dtype)99), "allgather: unknown dtype 99");
	refused(c, yd_send(c, a, 4, (enum yd_dtype)99, 0, 0), "send: unknown dtype 99");
	yd_request *req = NULL;
	refused(c, yd_iallreduce(c, a, b, 4, (enum yd_dtype)99, YD_SUM, &req),
	        "iallreduce: unknown dtype 99");
	assert_null(req);
	/* nothing was written */
	for (int i = 0; i < 4; i++)
		assert_true(b[i] == 0 && a[i] == (float)(i + 1));
}

static void test_null_buffers_and_counts(void **state)
{
	yd_comm *c = *state;
	float a[4] = {1, 2, 3, 4}, b[4] = {0};
	refused(c, yd_allreduce(c, NULL, b, 4, YD_F32, YD_SUM),
	        "allreduce: NULL buffer with count 4");
	refused(c, yd_allreduce(c, a, NULL, 3, YD_F32, YD_SUM),
	        "allreduce: NULL buffer with count 3");
	refused(c, yd_reduce_scatter(c, a, NULL, 4, YD_F32, YD_MAX),
	        "reduce_scatter: NULL buffer with count 4");
	/* the root's receive buffer matters (this rank is the root of a 1-rank group) */
	refused(c, yd_reduce(c, a, NULL, 4, YD_F32, YD_SUM, 0), "reduce: NULL buffer with count 4");
	refused(c, yd_broadcast(c, NULL, 1, YD_I64, 0), "broadcast: NULL buffer with count 1");
	refused(c, yd_recv(c, NULL, 2, YD_F32, 0, 0), "recv: NULL buffer with count 2");
	size_t huge = ((size_t)1 << 48) + 1;
	refused(c, yd_allreduce(c, a, b, huge, YD_F32, YD_SUM),
	        "allreduce: count 281474976710657 too large");
	refused(c, yd_allgather(c, a, b, huge, YD_F32),
	        "allgather: count 281474976710657 too large");
	/* a count of 0 needs no buffers */
	assert_int_equal(yd_allreduce(c, NULL, NULL, 0, YD_F32, YD_SUM), 0);
	assert_int_equal(yd_broadcast(c, NULL, 0, YD_F64, 0), 0);
	assert_int_equal(yd_allreduce(NULL, a, b, 4, YD_F32, YD_SUM), YARD_EINVAL);
}

static void test_roots_and_peers(void **state)
{
	yd_comm *c = *state;
	double a[2] = {1, 2}, b[2] = {0};
	refused(c, yd_broadcast(c, a, 2, YD_F64, 1),
	        "broadcast: root/peer 1 out of range (size 1)");
	refused(c, yd_reduce(c, a, b, 2, YD_F64, YD_SUM, -1),
	        "reduce: root/peer -1 out of range (size 1)");
	refused(c, yd_send(c, a, 2, YD_F64, 0, 7), "send: peer 0 is this rank");
	refused(c, yd_recv(c, b, 2, YD_F64, 0, 7), "recv: peer 0 is this rank");
	yd_request *req = NULL;
	refused(c, yd_isend(c, a, 2, YD_F64, 3, 0, &req),
	        "send: root/peer 3 out of range (size 1)");
	refused(c, yd_irecv(c, b, 2, YD_F64, 0, 0, &req), "recv: peer 0 is this rank");
	assert_null(req);
}

static void test_usable_after_refusals(void **state)
{
	yd_comm *c = *state;
	float a[5] = {1.5f, -2, 3, 0, 7}, b[5] = {0};
	refused(c, yd_allreduce(c, a, b, 5, (enum yd_dtype)99, YD_SUM),
	        "allreduce: unknown dtype 99");
	assert_int_equal(yd_allreduce(c, a, b, 5, YD_F32, YD_SUM), 0);
	assert_memory_equal(a, b, sizeof a);
	int64_t v[3] = {4, 5, 6}, w[3] = {0};
	assert_int_equal(yd_reduce(c, v, w, 3, YD_I64, YD_MAX, 0), 0);
	assert_memory_equal(v, w, sizeof v);
	yd_request *req = NULL;
	assert_int_equal(yd_iallreduce(c, v, w, 3, YD_I64, YD_SUM, &req), 0);
	assert_non_null(req);
	assert_int_equal(yd_wait(req), 0);
	assert_memory_equal(v, w, sizeof v);
	assert_int_equal(yd_barrier(c), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_bad_dtype_and_op, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_null_buffers_and_counts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_roots_and_peers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_usable_after_refusals, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
