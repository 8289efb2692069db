/* test_place.c: gang placement and the queue pass: all-or-nothing, TP groups inside one
 * node, rank order, determinism, reasons, and no deadlock or starvation between gangs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "scheduler/place.h"
#include "scheduler/queue.h"

static void make_nodes(struct place_node *nodes, int n, int devices)
{
	memset(nodes, 0, sizeof *nodes * (size_t)n);
	for (int i = 0; i < n; i++) {
		snprintf(nodes[i].id, sizeof nodes[i].id, "node-%d", i);
		nodes[i].schedulable = 1;
		nodes[i].n_devices = devices;
	}
}

static int busy_count(const struct place_node *nodes, int n)
{
	int c = 0;
	for (int i = 0; i < n; i++)
		c += __builtin_popcountll(nodes[i].busy_mask);
	return c;
}

static void test_hybrid_job_keeps_tp_groups_on_one_node(void **state)
{
	struct place_node nodes[2];
	struct place_request req = {.dp = 2, .tp = 2, .pp = 2};
	struct place_slot slots[8];
	char reason[160];

	make_nodes(nodes, 2, 4);
	assert_int_equal(place_gang(nodes, 2, &req, slots, reason, sizeof reason), 0);
	for (int r = 0; r < 8; r += 2)
		assert_int_equal(slots[r].node, slots[r + 1].node);
	/* every device used exactly once */
	assert_int_equal(busy_count(nodes, 2), 8);
	for (int a = 0; a < 8; a++)
		for (int b = a + 1; b < 8; b++)
			assert_false(slots[a].node == slots[b].node &&
			             slots[a].device == slots[b].device);
	/* rank order fills a node first: the first replica (ranks 0-3) on one node */
	assert_int_equal(slots[0].node, slots[3].node);
	assert_int_not_equal(slots[0].node, slots[4].node);
}

static void test_gang_is_all_or_nothing_with_reason(void **state)
{
	struct place_node nodes[2];
	struct place_request req = {.dp = 4, .tp = 1, .pp = 2};
	struct place_slot slots[8];
	char reason[160];

	make_nodes(nodes, 2, 4);
	nodes[1].busy_mask = 0x3; /* 6 free */
	assert_int_equal(place_gang(nodes, 2, &req, slots, reason, sizeof reason), YARD_ENOSPACE);
	assert_string_equal(reason, "needs 8 devices, 6 free");
	assert_int_equal(busy_count(nodes, 2), 2); /* unchanged */
}

static void test_tp_group_cannot_span_nodes(void **state)
{
	struct place_node nodes[2];
	struct place_request req = {.dp = 1, .tp = 4, .pp = 1};
	struct place_slot slots[4];
	char reason[160];

	make_nodes(nodes, 2, 4);
	nodes[0].busy_mask = 0x1; /* 3 free */
	nodes[1].busy_mask = 0x2; /* 3 free: 6 free in all, but no node has 4 */
	assert_int_equal(place_gang(nodes, 2, &req, slots, reason, sizeof reason), YARD_ENOSPACE);
	assert_non_null(strstr(reason, "groups of 4 devices on one node"));
	assert_int_equal(busy_count(nodes, 2), 2);
}

static void test_unschedulable_and_wrong_kind_nodes_are_skipped(void **state)
{
	struct place_node nodes[3];
	struct place_request req = {.dp = 2, .tp = 1, .pp = 1, .require_cuda = 1};
	struct place_slot slots[2];
	char reason[160];

	make_nodes(nodes, 3, 2);
	nodes[0].kind = PLACE_DEVICE_CUDA;
	nodes[0].schedulable = 0; /* cordoned */
	nodes[2].kind = PLACE_DEVICE_CUDA;
	assert_int_equal(place_gang(nodes, 3, &req, slots, reason, sizeof reason), 0);
	assert_int_equal(slots[0].node, 2);
	assert_int_equal(slots[1].node, 2);
	req.dp = 3;
	assert_int_equal(place_gang(nodes, 3, &req, slots, reason, sizeof reason), YARD_ENOSPACE);
	assert_string_equal(reason, "needs 3 devices, 0 free");
}

static void test_placement_is_deterministic_and_release_restores(void **state)
{
	struct place_node a[3], b[3];
	struct place_request req = {.dp = 3, .tp = 1, .pp = 1};
	struct place_slot sa[3], sb[3];
	char reason[160];

	make_nodes(a, 3, 2);
	a[1].busy_mask = 1;
	memcpy(b, a, sizeof a);
	assert_int_equal(place_gang(a, 3, &req, sa, reason, sizeof reason), 0);
	assert_int_equal(place_gang(b, 3, &req, sb, reason, sizeof reason), 0);
	assert_memory_equal(sa, sb, sizeof sa);
	place_release(a, 3, sa, 3);
	assert_int_equal(busy_count(a, 3), 1);
}

static void test_two_gangs_of_six_on_eight_devices_do_not_deadlock(void **state)
{
	struct place_node nodes[2];
	struct place_slot s1[6], s2[6];
	struct queue_job jobs[2] = {
	    {.id = "j-1", .seq = 1, .req = {.dp = 6, .tp = 1, .pp = 1}, .slots = s1},
	    {.id = "j-2", .seq = 2, .req = {.dp = 6, .tp = 1, .pp = 1}, .slots = s2},
	};
	struct queue_policy policy = {.reserve_after_ms = 0};

	make_nodes(nodes, 2, 4);
	assert_int_equal(queue_pass(jobs, 2, nodes, 2, &policy, 0), 1);
	assert_true(jobs[0].placed);
	assert_false(jobs[1].placed);
	assert_string_equal(jobs[1].reason, "needs 6 devices, 2 free");
	assert_int_equal(jobs[1].position, 2);
	assert_int_equal(busy_count(nodes, 2), 6); /* the waiting gang holds nothing */
	/* the first finishes: the second runs */
	place_release(nodes, 2, s1, 6);
	assert_int_equal(queue_pass(&jobs[1], 1, nodes, 2, &policy, 10), 1);
	assert_true(jobs[1].placed);
}

static void test_priority_then_submission_order(void **state)
{
	struct place_node nodes[1];
	struct place_slot s[3][2];
	struct queue_job jobs[3] = {
	    {.id = "j-1",
	     .seq = 1,
	     .priority = 0,
	     .req = {.dp = 2, .tp = 1, .pp = 1},
	     .slots = s[0]},
	    {.id = "j-2",
	     .seq = 2,
	     .priority = 5,
	     .req = {.dp = 2, .tp = 1, .pp = 1},
	     .slots = s[1]},
	    {.id = "j-3",
	     .seq = 3,
	     .priority = 5,
	     .req = {.dp = 2, .tp = 1, .pp = 1},
	     .slots = s[2]},
	};
	struct queue_policy policy = {0};

	make_nodes(nodes, 1, 2);
	assert_int_equal(queue_pass(jobs, 3, nodes, 1, &policy, 0), 1);
	assert_string_equal(jobs[0].id, "j-2");
	assert_true(jobs[0].placed);
	assert_string_equal(jobs[1].id, "j-3");
	assert_int_equal(jobs[1].position, 2);
	assert_string_equal(jobs[2].id, "j-1");
}

static void test_backfill_until_reservation_prevents_starvation(void **state)
{
	struct place_node nodes[1];
	struct place_slot big[4], small[1];
	struct queue_job jobs[2] = {
	    {.id = "big",
	     .seq = 1,
	     .pending_since_ms = 0,
	     .req = {.dp = 4, .tp = 1, .pp = 1},
	     .slots = big},
	    {.id = "small",
	     .seq = 2,
	     .pending_since_ms = 0,
	     .req = {.dp = 1, .tp = 1, .pp = 1},
	     .slots = small},
	};
	struct queue_policy policy = {.reserve_after_ms = 1000};

	make_nodes(nodes, 1, 4);
	nodes[0].busy_mask = 0x1; /* something else runs */
	/* early: the small job backfills */
	assert_int_equal(queue_pass(jobs, 2, nodes, 1, &policy, 10), 1);
	assert_false(jobs[0].placed);
	assert_true(jobs[1].placed);
	place_release(nodes, 1, small, 1);
	/* the big job has waited long enough: the small one must wait behind it */
	assert_int_equal(queue_pass(jobs, 2, nodes, 1, &policy, 5000), 0);
	assert_false(jobs[1].placed);
	assert_non_null(strstr(jobs[1].reason, "waiting behind big"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hybrid_job_keeps_tp_groups_on_one_node),
	    cmocka_unit_test(test_gang_is_all_or_nothing_with_reason),
	    cmocka_unit_test(test_tp_group_cannot_span_nodes),
	    cmocka_unit_test(test_unschedulable_and_wrong_kind_nodes_are_skipped),
	    cmocka_unit_test(test_placement_is_deterministic_and_release_restores),
	    cmocka_unit_test(test_two_gangs_of_six_on_eight_devices_do_not_deadlock),
	    cmocka_unit_test(test_priority_then_submission_order),
	    cmocka_unit_test(test_backfill_until_reservation_prevents_starvation),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
