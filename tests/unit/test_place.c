/* test_place.c: gang placement and the queue pass: all-or-nothing, TP groups inside one
 * node, rank order, determinism, reasons, and no deadlock or starvation between gangs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* A job that holds devices (a preemption's: queue.h, hold) and is not placed keeps them from
 * the jobs after it; placed, it holds nothing more than its gang. */
static void test_held_devices_wait_for_their_job(void **state)
{
	struct place_node nodes[2];
	struct place_slot s1[8], s2[4], hold[8];
	for (int d = 0; d < 8; d++)
		hold[d] = (struct place_slot){.node = d / 4, .device = d % 4};
	struct queue_job jobs[2] = {
	    {.id = "j-1",
	     .priority = 5,
	     .seq = 1,
	     .req = {.dp = 8, .tp = 1, .pp = 1},
	     .slots = s1,
	     .hold = hold,
	     .n_hold = 8},
	    {.id = "j-2", .priority = 1, .seq = 2, .req = {.dp = 4, .tp = 1, .pp = 1}, .slots = s2},
	};
	struct queue_policy policy = {.reserve_after_ms = 0};
	make_nodes(nodes, 2, 4);
	nodes[1].busy_mask = 0xf; /* a victim still runs on the second node */
	assert_int_equal(queue_pass(jobs, 2, nodes, 2, &policy, 0), 0);
	assert_false(jobs[0].placed);
	assert_false(jobs[1].placed); /* the first node's free devices are held */
	assert_string_equal(jobs[1].reason, "needs 4 devices, 0 free; devices are held for job "
	                                    "j-1, which preempts for them");
	/* without the hold, the job behind takes them */
	make_nodes(nodes, 2, 4);
	nodes[1].busy_mask = 0xf;
	jobs[0].n_hold = 0;
	assert_int_equal(queue_pass(jobs, 2, nodes, 2, &policy, 0), 1);
	assert_true(jobs[1].placed);
	/* the victim gone: the job takes its gang, and the held devices are its own */
	make_nodes(nodes, 2, 4);
	jobs[0].n_hold = 8;
	assert_int_equal(queue_pass(jobs, 2, nodes, 2, &policy, 0), 1);
	assert_true(jobs[0].placed);
	assert_false(jobs[1].placed);
	assert_int_equal(busy_count(nodes, 2), 8);
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

/* A deep queue of identical jobs that do not fit costs one try until something is placed:
 * the others get the same reason without one (repeated), a placement in between makes the
 * next identical job try again (its reason's figures changed), and a job old enough to
 * reserve still reserves when its result was a repeat. */
static void test_identical_requests_are_tried_once_per_placement(void **state)
{
	enum { N = 1000 };
	struct place_node nodes[2];
	static struct queue_job jobs[N];
	static char ids[N][16];
	struct queue_policy policy = {0};

	make_nodes(nodes, 2, 4); /* 8 devices */
	for (int i = 0; i < N; i++) {
		snprintf(ids[i], sizeof ids[i], "j-%d", i);
		jobs[i] =
		    (struct queue_job){.id = ids[i], .seq = i, .req = {.dp = 3, .tp = 1, .pp = 1}};
	}
	jobs[500].req.dp = 1; /* a different, smaller one in the middle */
	assert_int_equal(queue_pass(jobs, N, nodes, 2, &policy, 0), 3); /* 3 + 3 + 1 devices */
	assert_true(jobs[0].placed && jobs[1].placed && jobs[500].placed);
	assert_false(jobs[2].repeated);
	assert_string_equal(jobs[2].reason, "needs 3 devices, 2 free");
	for (int i = 3; i < 500; i++) {
		assert_true(jobs[i].repeated);
		assert_string_equal(jobs[i].reason, "needs 3 devices, 2 free");
	}
	/* after the placement of the small one: tried again, with the new figures */
	assert_false(jobs[501].repeated);
	assert_string_equal(jobs[501].reason, "needs 3 devices, 1 free");
	int repeated = 0;
	for (int i = 502; i < N; i++) {
		repeated += jobs[i].repeated;
		assert_string_equal(jobs[i].reason, "needs 3 devices, 1 free");
	}
	assert_int_equal(repeated, N - 502);
	for (int i = 0; i < N; i++)
		free(jobs[i].slots);

	/* a repeated job that has waited long enough reserves, as a tried one would */
	make_nodes(nodes, 2, 4);
	nodes[0].busy_mask = 0xf; /* 4 free */
	struct queue_job two[3] = {
	    {.id = "a", .seq = 1, .pending_since_ms = 900, .req = {.dp = 6, .tp = 1, .pp = 1}},
	    {.id = "b", .seq = 2, .pending_since_ms = 0, .req = {.dp = 6, .tp = 1, .pp = 1}},
	    {.id = "c", .seq = 3, .pending_since_ms = 0, .req = {.dp = 1, .tp = 1, .pp = 1}},
	};
	policy.reserve_after_ms = 500;
	assert_int_equal(queue_pass(two, 3, nodes, 2, &policy, 1000), 0);
	assert_true(two[1].repeated);
	assert_false(two[2].placed);
	assert_non_null(strstr(two[2].reason, "waiting behind b"));
	for (int i = 0; i < 3; i++)
		free(two[i].slots);
}

/* A re-placement that may shrink (failure.allow_shrink_dp) takes the largest dp that fits,
 * in its own turn: rank ids are those of replicas 0..dp-1 (the first dp*pp TP groups), TP
 * groups stay on one node, and a job that fits nowhere says why for both layouts. Rows: a
 * cluster (nodes x devices, busy devices on node 0 and node 1), the job (dp tp pp, the shrink
 * options) and the outcome (placed, dp, reason). */
static void test_shrink_takes_the_largest_dp_that_fits(void **state)
{
	static const struct {
		int nodes, devices;
		uint64_t busy0, busy1;
		int dp, tp, pp;
		int shrink[4], n_shrink;
		int placed, want_dp;
		const char *reason; /* placed: why the spec's dp did not fit; else why waiting */
	} rows[] = {
	    /* the integration test's case: 2 nodes x 4, one node down (all busy): dp 2 -> 1 */
	    {2, 4, 0, 0xf, 2, 2, 2, {1}, 1, 1, 1, "needs 8 devices, 4 free"},
	    /* everything fits: the spec's dp, no shrink */
	    {2, 4, 0, 0, 2, 2, 2, {1}, 1, 1, 2, ""},
	    /* dp 4 tp 1 pp 1, 3 free devices: options 2 and 1 (3 is not valid for the batch):
	     * the largest that fits is 2 */
	    {1, 4, 0x1, 0, 4, 1, 1, {2, 1}, 2, 1, 2, "needs 4 devices, 3 free"},
	    /* free devices in total but no room for a TP group of 2: 3 + 1 free, dp 2 tp 2 pp 1
	     * needs 2 groups; dp 1 needs 1 group: fits on node 0 */
	    {2,
	     4,
	     0x1,
	     0x7,
	     2,
	     2,
	     1,
	     {1},
	     1,
	     1,
	     1,
	     "needs 2 groups of 2 devices on one node (tensor parallel), nodes have room for 1"},
	    /* not even dp 1 fits: waits, naming both */
	    {2,
	     4,
	     0xf,
	     0xe,
	     2,
	     2,
	     2,
	     {1},
	     1,
	     0,
	     0,
	     "needs 8 devices, 1 free; with dp 1 (allow_shrink_dp): needs 4 devices, 1 free"},
	    /* no shrink allowed: waits with the spec's reason */
	    {2, 4, 0, 0xf, 2, 2, 2, {0}, 0, 0, 0, "needs 8 devices, 4 free"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct place_node nodes[2];
		struct place_slot slots[16];
		make_nodes(nodes, rows[i].nodes, rows[i].devices);
		nodes[0].busy_mask = rows[i].busy0;
		if (rows[i].nodes > 1)
			nodes[1].busy_mask = rows[i].busy1;
		int busy_before = busy_count(nodes, rows[i].nodes);
		struct queue_job job = {
		    .id = "j",
		    .req = {.dp = rows[i].dp, .tp = rows[i].tp, .pp = rows[i].pp},
		    .shrink_dp = rows[i].shrink,
		    .n_shrink_dp = rows[i].n_shrink,
		    .slots = slots};
		struct queue_policy policy = {0};
		int placed = queue_pass(&job, 1, nodes, rows[i].nodes, &policy, 0);
		if (placed != rows[i].placed || strcmp(job.reason, rows[i].reason) != 0 ||
		    (placed && job.dp != rows[i].want_dp))
			fail_msg(
			    "row %zu: placed %d dp %d reason '%s'; want placed %d dp %d reason "
			    "'%s'",
			    i, placed, job.dp, job.reason, rows[i].placed, rows[i].want_dp,
			    rows[i].reason);
		if (!placed) {
			assert_int_equal(busy_count(nodes, rows[i].nodes), busy_before);
			continue;
		}
		int world = job.dp * rows[i].tp * rows[i].pp;
		assert_int_equal(busy_count(nodes, rows[i].nodes), busy_before + world);
		for (int r = 0; r < world; r += rows[i].tp)
			for (int t = 1; t < rows[i].tp; t++)
				assert_int_equal(slots[r + t].node, slots[r].node);
	}
}

/* A gang larger than the whole cluster never reserves: jobs behind it keep starting. */
static void test_a_gang_bigger_than_the_cluster_does_not_reserve(void **state)
{
	struct place_node nodes[1];
	struct queue_job jobs[2] = {
	    {.id = "huge", .seq = 1, .pending_since_ms = 0, .req = {.dp = 8, .tp = 1, .pp = 1}},
	    {.id = "small", .seq = 2, .pending_since_ms = 0, .req = {.dp = 1, .tp = 1, .pp = 1}},
	};
	struct queue_policy policy = {.reserve_after_ms = 1000};

	make_nodes(nodes, 1, 4);
	assert_false(place_fits_empty(nodes, 1, &jobs[0].req));
	assert_true(place_fits_empty(nodes, 1, &jobs[1].req));
	struct place_request tp8 = {.dp = 1, .tp = 8, .pp = 1};
	struct place_node two[2];
	make_nodes(two, 2, 4);
	assert_false(place_fits_empty(two, 2, &tp8)); /* 8 devices, but no node holds 8 */
	/* long after reserve_after_ms: the small job still starts */
	assert_int_equal(queue_pass(jobs, 2, nodes, 1, &policy, 100000), 1);
	assert_false(jobs[0].placed);
	assert_true(jobs[1].placed);
	assert_non_null(strstr(jobs[0].reason, "needs 8 devices"));
	for (int i = 0; i < 2; i++)
		free(jobs[i].slots);
}

/* A pass limited to max_attempts looks only at the head of the queue: a small job deep in
 * it waits for a pass without the limit (and keeps its position); slots left NULL are
 * allocated by the pass for the jobs it looks at. */
static void test_depth_limits_the_jobs_a_pass_looks_at(void **state)
{
	struct place_node nodes[1];
	struct queue_job jobs[4] = {
	    {.id = "big-1", .seq = 1, .req = {.dp = 8, .tp = 1, .pp = 1}},
	    {.id = "big-2", .seq = 2, .req = {.dp = 8, .tp = 1, .pp = 1}},
	    {.id = "big-3", .seq = 3, .req = {.dp = 8, .tp = 1, .pp = 1}},
	    {.id = "small", .seq = 4, .req = {.dp = 2, .tp = 1, .pp = 1}},
	};
	struct queue_policy shallow = {.max_attempts = 2}, deep = {.max_attempts = 0};

	make_nodes(nodes, 1, 4);
	snprintf(jobs[3].reason, sizeof jobs[3].reason, "earlier reason");
	assert_int_equal(queue_pass(jobs, 4, nodes, 1, &shallow, 0), 0);
	assert_true(jobs[0].tried && jobs[1].tried);
	assert_false(jobs[2].tried || jobs[3].tried);
	assert_int_equal(jobs[3].position, 4);
	assert_string_equal(jobs[3].reason, "earlier reason"); /* untouched */
	assert_null(jobs[3].slots);
	assert_non_null(strstr(jobs[0].reason, "needs 8 devices"));
	assert_int_equal(busy_count(nodes, 1), 0);

	assert_int_equal(queue_pass(jobs, 4, nodes, 1, &deep, 0), 1);
	assert_true(jobs[3].tried && jobs[3].placed);
	assert_non_null(jobs[3].slots);
	assert_int_equal(busy_count(nodes, 1), 2);
	for (int i = 0; i < 4; i++)
		free(jobs[i].slots);
}

/* max_placed: the pass stops placing after that many jobs; the rest are left as beyond the
 * depth (position only, reason untouched, no device taken), and a later pass places them. */
static void test_max_placed_bounds_the_placements_of_a_pass(void **state)
{
	struct place_node nodes[1];
	struct queue_job jobs[4] = {
	    {.id = "a", .seq = 1, .req = {.dp = 1, .tp = 1, .pp = 1}},
	    {.id = "b", .seq = 2, .req = {.dp = 1, .tp = 1, .pp = 1}},
	    {.id = "c", .seq = 3, .req = {.dp = 1, .tp = 1, .pp = 1}},
	    {.id = "d", .seq = 4, .req = {.dp = 1, .tp = 1, .pp = 1}},
	};
	struct queue_policy two = {.max_placed = 2}, any = {0};

	make_nodes(nodes, 1, 8);
	snprintf(jobs[3].reason, sizeof jobs[3].reason, "earlier reason");
	assert_int_equal(queue_pass(jobs, 4, nodes, 1, &two, 0), 2);
	assert_true(jobs[0].placed && jobs[1].placed);
	assert_false(jobs[2].tried || jobs[3].tried || jobs[2].placed || jobs[3].placed);
	assert_int_equal(jobs[3].position, 4);
	assert_string_equal(jobs[3].reason, "earlier reason");
	assert_int_equal(busy_count(nodes, 1), 2);

	/* the next pass: the two placed ones are no longer in the queue */
	assert_int_equal(queue_pass(&jobs[2], 2, nodes, 1, &any, 0), 2);
	assert_true(jobs[2].placed && jobs[3].placed);
	assert_int_equal(busy_count(nodes, 1), 4);
	for (int i = 0; i < 4; i++)
		free(jobs[i].slots);
}

static unsigned rnd_state = 1;
static unsigned rnd(unsigned n)
{
	rnd_state = rnd_state * 1103515245u + 12345u;
	return (rnd_state >> 8) % n;
}

/* Topology (place.h): a gang goes into the one domain with the least room that holds it,
 * else into the roomiest domains first; without domains nothing changes. */
static void test_gang_goes_into_one_domain_when_one_has_room(void **state)
{
	(void)state;
	struct place_node nodes[6];
	struct place_slot slots[24];
	char reason[160];
	/* ids interleave the domains: node-0,2,4 in domain 1, node-1,3,5 in domain 2 */
	make_nodes(nodes, 6, 4);
	for (int i = 0; i < 6; i++)
		nodes[i].domain = 1 + i % 2;
	nodes[1].busy_mask = 0x3; /* domain 2 has room for 10 devices, domain 1 for 12 */
	struct place_request eight = {.dp = 2, .tp = 4, .pp = 1};
	assert_int_equal(place_gang(nodes, 6, &eight, slots, reason, sizeof reason), 0);
	/* both domains hold 2 groups of 4: the one with less room (domain 2: nodes 3 and 5) */
	for (int r = 0; r < 8; r++)
		assert_int_equal(slots[r].node, r < 4 ? 3 : 5);
	/* 12 ranks of tp 2: no domain has room for 6 groups after that (domain 1: 6, but
	 * domain 2 has 1 left): domain 1 takes all six */
	struct place_request twelve = {.dp = 6, .tp = 2, .pp = 1};
	assert_int_equal(place_gang(nodes, 6, &twelve, slots, reason, sizeof reason), 0);
	for (int r = 0; r < 12; r++)
		assert_int_equal(nodes[slots[r].node].domain, 1);
	/* what is left: 2 devices in domain 2 only; 4 ranks of tp 2 do not fit, and the reason
	 * is the one without domains */
	struct place_request four = {.dp = 2, .tp = 2, .pp = 1};
	assert_int_equal(place_gang(nodes, 6, &four, slots, reason, sizeof reason), YARD_ENOSPACE);
	assert_string_equal(reason, "needs 4 devices, 2 free");

	/* spanning: the roomiest domain first, so rank order fills it before the next */
	make_nodes(nodes, 6, 4);
	for (int i = 0; i < 6; i++)
		nodes[i].domain = i < 2 ? 3 : (i < 5 ? 1 : 2); /* rooms 8, 12, 4 devices */
	struct place_request twenty = {.dp = 5, .tp = 4, .pp = 1};
	assert_int_equal(place_gang(nodes, 6, &twenty, slots, reason, sizeof reason), 0);
	static const int expect[] = {2, 3, 4, 0, 1};
	for (int g = 0; g < 5; g++)
		for (int t = 0; t < 4; t++)
			assert_int_equal(slots[g * 4 + t].node, expect[g]);

	/* every node in domain 0 (no label): most free first, then id, as before */
	make_nodes(nodes, 3, 4);
	nodes[0].busy_mask = 0x1;
	struct place_request two = {.dp = 2, .tp = 4, .pp = 1};
	assert_int_equal(place_gang(nodes, 3, &two, slots, reason, sizeof reason), 0);
	assert_int_equal(slots[0].node, 1);
	assert_int_equal(slots[4].node, 2);
}

/* Whether one domain alone has room for the whole request (counted as place_gang does). */
static int domain_holds(const struct place_node *nodes, int n, const struct place_request *req)
{
	int room[8] = {0};
	for (int i = 0; i < n; i++)
		room[nodes[i].domain] += place_node_free(&nodes[i], req) / req->tp;
	for (int d = 0; d < 8; d++)
		if (req->tp <= PLACE_MAX_DEVICES_PER_NODE && room[d] >= req->dp * req->pp)
			return 1;
	return 0;
}

/* The per-pass index (place_index_gang) must decide exactly as place_gang: same result,
 * same reason, same slots, same busy masks, placement after placement, on random clusters
 * of mixed kinds, memory sizes, device counts, unschedulable nodes and busy devices. */
static void test_index_places_exactly_like_place_gang(void **state)
{
	static const int devices[] = {1, 2, 3, 4, 8, 8, 8, 16, 64};
	static const int tps[] = {1, 1, 2, 4, 8, 3, 16, 65};
	/* two kinds × six memory sizes: more classes than the index starts with room for */
	static const int64_t memories[] = {0, 8000, 16000, 24000, 32000, 40000};
	enum { MAX_NODES = 120, MAX_SLOTS = 4096 };
	static struct place_node a[MAX_NODES], b[MAX_NODES];
	static struct place_slot sa[MAX_SLOTS], sb[MAX_SLOTS];
	int placed = 0, refused = 0, spanned = 0;
	for (int round = 0; round < 200; round++) {
		int n = (int)rnd(MAX_NODES), topology = round % 2;
		memset(a, 0, sizeof a);
		for (int i = 0; i < n; i++) {
			/* ids in an order unrelated to the array order */
			snprintf(a[i].id, sizeof a[i].id, "n%03u-%d", rnd(1000), i);
			a[i].schedulable = rnd(8) != 0;
			a[i].kind = rnd(4) == 0 ? PLACE_DEVICE_CUDA : PLACE_DEVICE_CPU;
			a[i].n_devices = devices[rnd(sizeof devices / sizeof devices[0])];
			a[i].device_memory_mb = memories[rnd(6)];
			a[i].domain = topology ? (int)rnd(5) : 0;
			for (int d = 0; d < a[i].n_devices; d++)
				if (rnd(3) == 0)
					a[i].busy_mask |= 1ull << d;
		}
		memcpy(b, a, sizeof a);
		struct place_index *x = place_index_build(b, n);
		assert_non_null(x);
		for (int k = 0; k < 25; k++) {
			struct place_request req = {.dp = 1 + (int)rnd(6),
			                            .tp = tps[rnd(sizeof tps / sizeof tps[0])],
			                            .pp = 1 + (int)rnd(3),
			                            .require_cuda = rnd(4) == 0,
			                            .memory_mb = memories[rnd(3)]};
			req.require_cpu = !req.require_cuda && rnd(3) == 0;
			char ra[160], rb[160];
			int fits_one = domain_holds(a, n, &req);
			int rc_a = place_gang(a, n, &req, sa, ra, sizeof ra);
			int rc_b = place_index_gang(x, &req, sb, rb, sizeof rb);
			assert_int_equal(rc_a, rc_b);
			assert_string_equal(ra, rb);
			if (rc_a == 0) {
				placed++;
				int world = req.dp * req.tp * req.pp;
				for (int r = 0; r < world; r++) {
					assert_int_equal(sa[r].node, sb[r].node);
					assert_int_equal(sa[r].device, sb[r].device);
					/* in one domain whenever one had room for it */
					if (fits_one)
						assert_int_equal(a[sa[r].node].domain,
						                 a[sa[0].node].domain);
				}
				spanned += !fits_one;
			} else {
				refused++;
			}
			for (int i = 0; i < n; i++)
				assert_int_equal(a[i].busy_mask, b[i].busy_mask);
		}
		place_index_free(x);
	}
	/* both outcomes were exercised, and gangs that span domains */
	assert_true(placed > 100);
	assert_true(refused > 100);
	assert_true(spanned > 10);
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
	    cmocka_unit_test(test_held_devices_wait_for_their_job),
	    cmocka_unit_test(test_backfill_until_reservation_prevents_starvation),
	    cmocka_unit_test(test_identical_requests_are_tried_once_per_placement),
	    cmocka_unit_test(test_shrink_takes_the_largest_dp_that_fits),
	    cmocka_unit_test(test_depth_limits_the_jobs_a_pass_looks_at),
	    cmocka_unit_test(test_max_placed_bounds_the_placements_of_a_pass),
	    cmocka_unit_test(test_a_gang_bigger_than_the_cluster_does_not_reserve),
	    cmocka_unit_test(test_gang_goes_into_one_domain_when_one_has_room),
	    cmocka_unit_test(test_index_places_exactly_like_place_gang),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
