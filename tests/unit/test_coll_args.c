/* test_coll_args.c: every public collective and point-to-point call refuses bad arguments
 * with YARD_EINVAL and a message that names the call and what was wrong (unknown dtype or
 * op, a NULL buffer with a count, a count too large, a root or peer out of range or this
 * rank), changes nothing, and leaves the communicator usable: the next good call works.
 * yd_comm_init and yd_comm_init_env refuse bad configurations and environments the same
 * way, naming the field or variable and its value. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* yd_comm_init refuses cfg with YARD_EINVAL and exactly the message want; *out stays NULL */
static void init_refused(const struct yd_config *cfg, const char *want)
{
	char err[256] = "";
	yd_comm *c = (yd_comm *)&err; /* not NULL, so that the call must clear it */
	assert_int_equal(yd_comm_init(cfg, &c, err, sizeof err), YARD_EINVAL);
	assert_null(c);
	assert_string_equal(err, want);
}

static void test_config_refused(void **state)
{
	(void)state;
	const char *two[] = {"127.0.0.1:0", "127.0.0.1:0"};
	struct yd_config cfg = {.rank = 0, .world_size = 0, .endpoints = two, .calibrate = -1};
	init_refused(&cfg, "bad config: world_size 0 (want >= 1)");
	cfg.world_size = 2;
	cfg.rank = 2;
	init_refused(&cfg, "bad config: rank 2 out of range [0, 1]");
	cfg.rank = -1;
	init_refused(&cfg, "bad config: rank -1 out of range [0, 1]");
	cfg.rank = 1;
	cfg.endpoints = NULL;
	init_refused(&cfg, "bad config: no endpoints (one host:port per rank)");
	const char *bad[][2] = {
	    {"127.0.0.1:0", "127.0.0.1:abc"}, {"127.0.0.1:0", "127.0.0.1:70000"},
	    {"127.0.0.1:0", "127.0.0.1:"},    {"127.0.0.1:0", "127.0.0.1"},
	    {"127.0.0.1:0", ":29500"},        {"127.0.0.1:0", "127.0.0.1:-1"}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char want[128];
		snprintf(want, sizeof want,
		         "bad config: endpoint of rank 1 is '%s', want host:port (port 0-65535)",
		         bad[i][1]);
		cfg.endpoints = bad[i];
		init_refused(&cfg, want);
	}
	const char *missing[] = {"127.0.0.1:0", NULL};
	cfg.endpoints = missing;
	init_refused(&cfg, "bad config: endpoint of rank 1 is '(null)', want host:port (port "
	                   "0-65535)");
	cfg.endpoints = two;
	cfg.transport = (enum yd_transport)77;
	init_refused(&cfg, "bad config: unknown transport 77");
	cfg.transport = YD_TRANSPORT_AUTO;
	cfg.algo = (enum yd_algo) - 2;
	init_refused(&cfg, "bad config: unknown algorithm -2");
	init_refused(NULL, "bad config: no config");
}

static void clear_env(void)
{
	const char *vars[] = {"YARD_RANK",        "YARD_WORLD_SIZE", "YARD_TIMEOUT_MS",
	                      "YARD_TCP_SOCKETS", "YARD_PEERS",      "YARD_RENDEZVOUS_FILE",
	                      "YARD_HOSTS",       "YARD_TRANSPORT",  "YARD_ALGO",
	                      "YARD_CALIBRATE",   "YARD_TUNE",       "YARD_CUDA"};
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
		unsetenv(vars[i]);
}

/* with the environment set as given (NAME=VALUE pairs, NULL-terminated) on top of a good
 * one-rank environment, yd_comm_init_env fails with want (NULL: succeeds) */
static void env_case(const char *want, ...)
{
	clear_env();
	setenv("YARD_RANK", "0", 1);
	setenv("YARD_WORLD_SIZE", "1", 1);
	setenv("YARD_PEERS", "127.0.0.1:0", 1);
	setenv("YARD_CALIBRATE", "0", 1);
	va_list ap;
	va_start(ap, want);
	for (const char *name; (name = va_arg(ap, const char *)) != NULL;)
		setenv(name, va_arg(ap, const char *), 1);
	va_end(ap);
	char err[256] = "";
	yd_comm *c = NULL;
	int rc = yd_comm_init_env(&c, err, sizeof err);
	if (want) {
		assert_int_equal(rc, YARD_EINVAL);
		assert_null(c);
		assert_string_equal(err, want);
	} else {
		assert_int_equal(rc, 0);
		assert_non_null(c);
		assert_int_equal(yd_comm_size(c), 1);
		yd_comm_destroy(c);
	}
	clear_env();
}

static void test_env_refused(void **state)
{
	(void)state;
	env_case(NULL, NULL);
	env_case(NULL, "YARD_TIMEOUT_MS", "2500", "YARD_TCP_SOCKETS", "4", NULL);
	env_case("YARD_RANK and YARD_WORLD_SIZE must be set", "YARD_RANK", "", NULL);
	env_case("YARD_RANK=abc: want an integer in [0, 2147483647]", "YARD_RANK", "abc", NULL);
	env_case("YARD_RANK=1x: want an integer in [0, 2147483647]", "YARD_RANK", "1x", NULL);
	env_case("YARD_RANK=-1: want an integer in [0, 2147483647]", "YARD_RANK", "-1", NULL);
	env_case("YARD_WORLD_SIZE=0: want an integer in [1, 2147483647]", "YARD_WORLD_SIZE", "0",
	         NULL);
	env_case("YARD_WORLD_SIZE=99999999999: want an integer in [1, 2147483647]",
	         "YARD_WORLD_SIZE", "99999999999", NULL);
	env_case("YARD_RANK=1 out of range for YARD_WORLD_SIZE=1", "YARD_RANK", "1", NULL);
	env_case("YARD_TIMEOUT_MS=5s: want an integer in [0, 2147483647]", "YARD_TIMEOUT_MS", "5s",
	         NULL);
	env_case("YARD_TCP_SOCKETS=9: want an integer in [0, 8]", "YARD_TCP_SOCKETS", "9", NULL);
	env_case("YARD_PEERS has 2 entries, YARD_WORLD_SIZE is 1", "YARD_PEERS",
	         "127.0.0.1:0,127.0.0.1:1", NULL);
	env_case("bad config: endpoint of rank 1 is '127.0.0.1:http', want host:port (port "
	         "0-65535)",
	         "YARD_WORLD_SIZE", "2", "YARD_PEERS", "127.0.0.1:0,127.0.0.1:http", NULL);
	env_case("YARD_TRANSPORT=udp: unknown (auto|shm|tcp|rdma)", "YARD_TRANSPORT", "udp", NULL);
	env_case("YARD_CALIBRATE=yes: want 0 or 1", "YARD_CALIBRATE", "yes", NULL);
	env_case("set YARD_PEERS or YARD_RENDEZVOUS_FILE", "YARD_PEERS", "", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_bad_dtype_and_op, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_null_buffers_and_counts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_roots_and_peers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_usable_after_refusals, setup, teardown),
	    cmocka_unit_test(test_config_refused),
	    cmocka_unit_test(test_env_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
