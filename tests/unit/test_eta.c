/* test_eta.c: a waiting job's estimated start (scheduler/eta.h): free devices, a holder's
 * end, jobs ahead taking devices first and freeing them at their time limits, tensor-parallel
 * groups that need a whole node, holders with no expected end named, a job that never fits,
 * and the bound on work. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "scheduler/eta.h"

#define NOW 1000000

static void make_nodes(struct place_node *nodes, int n, int devices)
{
	memset(nodes, 0, sizeof *nodes * (size_t)n);
	for (int i = 0; i < n; i++) {
		snprintf(nodes[i].id, sizeof nodes[i].id, "node-%d", i);
		nodes[i].schedulable = 1;
		nodes[i].n_devices = devices;
	}
}

/* a holder of devices [first, first + n) of node `node`, marked busy on nodes */
static void hold(struct place_node *nodes, struct eta_holder *h, struct place_slot *slots,
                 const char *id, int node, int first, int n, int64_t end_ms)
{
	memset(h, 0, sizeof *h);
	for (int k = 0; k < n; k++) {
		slots[k] = (struct place_slot){.node = node, .device = first + k};
		nodes[node].busy_mask |= 1ull << (first + k);
	}
	h->id = id;
	h->end_ms = end_ms;
	snprintf(h->basis, sizeof h->basis, "its time limit");
	h->slots = slots;
	h->n_slots = n;
}

static struct eta_waiter waiter(const char *id, int dp, int tp, int64_t duration_ms)
{
	return (struct eta_waiter){
	    .id = id, .req = {.dp = dp, .tp = tp, .pp = 1}, .duration_ms = duration_ms};
}

static void test_free_devices_mean_now(void **state)
{
	struct place_node nodes[1];
	make_nodes(nodes, 1, 4);
	struct eta_waiter w = waiter("j-1", 2, 1, 0);
	struct eta_result r;
	assert_int_equal(eta_estimate(nodes, 1, NULL, 0, &w, 1, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW);
	assert_non_null(strstr(r.why, "free now"));
}

static void test_a_holder_end_is_the_start(void **state)
{
	struct place_node nodes[1];
	make_nodes(nodes, 1, 4);
	struct eta_holder h[2];
	struct place_slot s0[2], s1[2];
	hold(nodes, &h[0], s0, "j-a", 0, 0, 2, NOW + 50000);
	hold(nodes, &h[1], s1, "j-b", 0, 2, 2, NOW + 20000);
	struct eta_waiter w = waiter("j-1", 2, 1, 0);
	struct eta_result r;
	assert_int_equal(eta_estimate(nodes, 1, h, 2, &w, 1, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW + 20000); /* the earlier of the two ends */
	assert_string_equal(r.why, "when job j-b ends (its time limit)");
	/* 3 devices need both */
	w = waiter("j-1", 3, 1, 0);
	assert_int_equal(eta_estimate(nodes, 1, h, 2, &w, 1, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW + 50000);
	assert_string_equal(r.why, "when job j-a ends (its time limit)");
	/* the input is not changed */
	assert_int_equal(nodes[0].busy_mask, 0xf);
	/* an end already past counts as now */
	h[1].end_ms = NOW - 5000;
	w = waiter("j-1", 2, 1, 0);
	assert_int_equal(eta_estimate(nodes, 1, h, 2, &w, 1, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW);
}

static void test_jobs_ahead_start_first_and_end_at_their_limits(void **state)
{
	struct place_node nodes[1];
	make_nodes(nodes, 1, 4);
	struct eta_holder h;
	struct place_slot s0[4];
	hold(nodes, &h, s0, "j-run", 0, 0, 4, NOW + 10000);
	/* j-2 (4 devices, 30 s) starts when j-run ends, j-3 (2 devices) when j-2 ends */
	struct eta_waiter w[2] = {waiter("j-2", 4, 1, 30000), waiter("j-3", 2, 1, 0)};
	struct eta_result r;
	assert_int_equal(eta_estimate(nodes, 1, &h, 1, w, 2, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW + 40000);
	assert_non_null(strstr(r.why, "when job j-2 ends (its time limit"));
	/* a job ahead that leaves room: both start when j-run ends */
	w[0] = waiter("j-2", 2, 1, 30000);
	assert_int_equal(eta_estimate(nodes, 1, &h, 1, w, 2, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW + 10000);
	assert_string_equal(r.why, "when job j-run ends (its time limit)");
	/* the order holds: a job never starts before the one ahead of it */
	struct eta_holder h2[2];
	struct place_slot t0[2], t1[2];
	make_nodes(nodes, 1, 4);
	hold(nodes, &h2[0], t0, "j-a", 0, 0, 2, NOW + 10000);
	hold(nodes, &h2[1], t1, "j-b", 0, 2, 2, NOW + 60000);
	w[0] = waiter("j-2", 3, 1, 30000);
	w[1] = waiter("j-3", 1, 1, 0); /* would fit at 10 s alone */
	assert_int_equal(eta_estimate(nodes, 1, h2, 2, w, 2, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW + 60000);
}

static void test_tensor_parallel_groups_wait_for_a_whole_node(void **state)
{
	/* 2 nodes of 4, each half busy: 4 devices free, but a tp 4 group needs one node */
	struct place_node nodes[2];
	make_nodes(nodes, 2, 4);
	struct eta_holder h[2];
	struct place_slot s0[2], s1[2];
	hold(nodes, &h[0], s0, "j-a", 0, 0, 2, NOW + 70000);
	hold(nodes, &h[1], s1, "j-b", 1, 2, 2, NOW + 40000);
	struct eta_waiter w = waiter("j-1", 1, 4, 0);
	struct eta_result r;
	assert_int_equal(eta_estimate(nodes, 2, h, 2, &w, 1, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW + 40000);
	assert_string_equal(r.why, "when job j-b ends (its time limit)");
	/* four single ranks fit now */
	w = waiter("j-1", 4, 1, 0);
	assert_int_equal(eta_estimate(nodes, 2, h, 2, &w, 1, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW);
}

static void test_no_expected_end_names_the_holders(void **state)
{
	struct place_node nodes[1];
	make_nodes(nodes, 1, 4);
	struct eta_holder h[2];
	struct place_slot s0[2], s1[2];
	hold(nodes, &h[0], s0, "j-a", 0, 0, 2, ETA_UNKNOWN);
	hold(nodes, &h[1], s1, "j-b", 0, 2, 2, NOW + 5000);
	struct eta_waiter w = waiter("j-1", 3, 1, 0);
	struct eta_result r;
	assert_int_equal(eta_estimate(nodes, 1, h, 2, &w, 1, NOW, 1000, &r), 0);
	assert_true(r.start_ms == ETA_UNKNOWN);
	assert_non_null(strstr(r.why, "no estimate: it needs devices held by jobs with no "
	                              "expected end"));
	assert_non_null(strstr(r.why, "j-a"));
	/* two devices come back at 5 s: enough for 2 */
	w = waiter("j-1", 2, 1, 0);
	assert_int_equal(eta_estimate(nodes, 1, h, 2, &w, 1, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW + 5000);
	/* a job ahead with no time limit keeps what it takes, and is named */
	struct eta_waiter ws[2] = {waiter("j-ahead", 2, 1, 0), waiter("j-1", 2, 1, 0)};
	assert_int_equal(eta_estimate(nodes, 1, h, 2, ws, 2, NOW, 1000, &r), 0);
	assert_true(r.start_ms == ETA_UNKNOWN);
	assert_non_null(strstr(r.why, "j-a and j-ahead"));
	/* and a job ahead that is stuck stops the estimate, named */
	ws[0] = waiter("j-ahead", 4, 1, 0);
	assert_int_equal(eta_estimate(nodes, 1, h, 2, ws, 2, NOW, 1000, &r), 0);
	assert_true(r.start_ms == ETA_UNKNOWN);
	assert_non_null(strstr(r.why, "job j-ahead ahead of it needs devices"));
}

static void test_never_fits_and_work_bound(void **state)
{
	struct place_node nodes[2];
	make_nodes(nodes, 2, 4);
	struct eta_waiter w = waiter("j-1", 9, 1, 0);
	struct eta_result r;
	assert_int_equal(eta_estimate(nodes, 2, NULL, 0, &w, 1, NOW, 1000, &r), 0);
	assert_true(r.start_ms == ETA_UNKNOWN);
	assert_non_null(strstr(r.why, "would not fit even with every device free"));
	/* a job ahead that can never fit holds nothing */
	struct eta_waiter ws[2] = {waiter("j-huge", 9, 1, 0), waiter("j-1", 8, 1, 0)};
	assert_int_equal(eta_estimate(nodes, 2, NULL, 0, ws, 2, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW);
	/* many ends one by one, each a try over the nodes: the bound says so */
	struct eta_holder h[8];
	struct place_slot s[8][1];
	for (int k = 0; k < 8; k++)
		hold(nodes, &h[k], s[k], "j-x", k / 4, k % 4, 1, NOW + 1000 * (k + 1));
	w = waiter("j-1", 8, 1, 0);
	assert_int_equal(eta_estimate(nodes, 2, h, 8, &w, 1, NOW, 1000, &r), 0);
	assert_int_equal(r.start_ms, NOW + 8000);
	assert_int_equal(eta_estimate(nodes, 2, h, 8, &w, 1, NOW, 10, &r), 0);
	assert_true(r.start_ms == ETA_UNKNOWN);
	assert_non_null(strstr(r.why, "more than 10 node visits"));
	/* bad input */
	assert_int_equal(eta_estimate(nodes, 2, NULL, 0, &w, 0, NOW, 10, &r), YARD_EINVAL);
	w.req.dp = 0;
	assert_int_equal(eta_estimate(nodes, 2, NULL, 0, &w, 1, NOW, 10, &r), YARD_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_free_devices_mean_now),
	    cmocka_unit_test(test_a_holder_end_is_the_start),
	    cmocka_unit_test(test_jobs_ahead_start_first_and_end_at_their_limits),
	    cmocka_unit_test(test_tensor_parallel_groups_wait_for_a_whole_node),
	    cmocka_unit_test(test_no_expected_end_names_the_holders),
	    cmocka_unit_test(test_never_fits_and_work_bound),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
