/* test_history.c: the leader's per-step job history: sampled reports, unknown cells, a
 * restore that goes back, stale generations, paging, and the memory bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/history.h"

static json_t *steps_of(struct history *h, const char *job, int64_t after, int limit)
{
	json_t *doc = history_json(h, job, after, limit, 64);
	assert_non_null(doc);
	json_t *steps = json_incref(json_object_get(doc, "steps"));
	json_decref(doc);
	return steps;
}

static int64_t step_n(json_t *steps, size_t i)
{
	return json_integer_value(json_object_get(json_array_get(steps, i), "step"));
}

static void test_reports_become_steps(void **state)
{
	(void)state;
	struct history *h = history_create();
	for (int s = 1; s <= 3; s++)
		for (int r = 0; r < 2; r++)
			history_record(h, "j-1", 1, r, s, 1, 2.0 / s, 50.0, 10.0 + r, 100);
	json_t *steps = steps_of(h, "j-1", 0, 0);
	assert_int_equal(json_array_size(steps), 3);
	json_t *last = json_array_get(steps, 2);
	assert_int_equal(step_n(steps, 2), 3);
	assert_float_equal(json_real_value(json_object_get(last, "loss")), 2.0 / 3, 1e-12);
	assert_float_equal(json_real_value(json_object_get(last, "samples_per_s")), 64 * 1000.0 / 50,
	                   1e-9);
	json_t *compute = json_object_get(last, "compute_ms");
	assert_int_equal(json_array_size(compute), 2);
	assert_float_equal(json_real_value(json_array_get(compute, 1)), 11.0, 1e-6);
	json_decref(steps);
	assert_null(history_json(h, "j-unknown", 0, 0, 0));
	history_destroy(h);
}

/* heartbeats sample: a rank that reports a step nobody recorded before (and older than the
 * newest) is dropped; a cell a rank never reported is null */
static void test_sampling_leaves_unknown_cells_null(void **state)
{
	(void)state;
	struct history *h = history_create();
	history_record(h, "j-1", 1, 0, 10, 1, 1.0, 5, 4.0, 1);
	history_record(h, "j-1", 1, 0, 12, 1, 0.9, 5, 4.0, 2);
	history_record(h, "j-1", 1, 1, 11, 0, 0, 5, 4.5, 2); /* 11 was never recorded */
	history_record(h, "j-1", 1, 1, 12, 0, 0, 5, 4.5, 3);
	json_t *steps = steps_of(h, "j-1", 0, 0);
	assert_int_equal(json_array_size(steps), 2);
	json_t *c10 = json_object_get(json_array_get(steps, 0), "compute_ms");
	assert_int_equal(json_array_size(c10), 2);
	assert_true(json_is_null(json_array_get(c10, 1)));
	json_t *c12 = json_object_get(json_array_get(steps, 1), "compute_ms");
	assert_float_equal(json_real_value(json_array_get(c12, 1)), 4.5, 1e-6);
	json_decref(steps);
	history_destroy(h);
}

static void test_restore_goes_back_and_stale_generation_is_ignored(void **state)
{
	(void)state;
	struct history *h = history_create();
	for (int s = 1; s <= 10; s++)
		history_record(h, "j-1", 1, 0, s, 1, 1.0, 5, 1, 1);
	/* generation 2 restored from step 5 and reports step 6 first */
	history_record(h, "j-1", 2, 0, 6, 1, 0.5, 5, 1, 2);
	history_record(h, "j-1", 1, 1, 9, 1, 7.0, 5, 1, 3); /* a late rank of generation 1 */
	json_t *steps = steps_of(h, "j-1", 0, 0);
	assert_int_equal(json_array_size(steps), 6);
	assert_int_equal(step_n(steps, 5), 6);
	assert_float_equal(
	    json_real_value(json_object_get(json_array_get(steps, 5), "loss")), 0.5, 1e-12);
	json_decref(steps);
	json_t *doc = history_json(h, "j-1", 0, 0, 0);
	assert_int_equal(json_integer_value(json_object_get(doc, "generation")), 2);
	json_decref(doc);
	history_destroy(h);
}

static void test_after_and_limit_page(void **state)
{
	(void)state;
	struct history *h = history_create();
	for (int s = 1; s <= 100; s++)
		history_record(h, "j-1", 1, 0, s, 1, 1.0, 5, 1, 1);
	json_t *steps = steps_of(h, "j-1", 90, 0);
	assert_int_equal(json_array_size(steps), 10);
	assert_int_equal(step_n(steps, 0), 91);
	json_decref(steps);
	steps = steps_of(h, "j-1", 0, 5); /* the newest 5 */
	assert_int_equal(json_array_size(steps), 5);
	assert_int_equal(step_n(steps, 0), 96);
	json_decref(steps);
	history_destroy(h);
}

static void test_bounds(void **state)
{
	(void)state;
	struct history *h = history_create();
	for (int s = 1; s <= HISTORY_STEPS + 500; s++)
		history_record(h, "j-long", 1, 0, s, 1, 1.0, 5, 1, 1);
	json_t *steps = steps_of(h, "j-long", 0, 0);
	assert_int_equal(json_array_size(steps), HISTORY_STEPS);
	assert_int_equal(step_n(steps, 0), 501);
	json_decref(steps);
	/* a wide job keeps fewer steps: cells are bounded */
	for (int s = 1; s <= 400; s++)
		history_record(h, "j-wide", 1, HISTORY_RANKS - 1, s, 0, 0, 5, 1, 2);
	steps = steps_of(h, "j-wide", 0, 0);
	assert_true(json_array_size(steps) < 400);
	assert_true(json_array_size(steps) >= 200);
	json_decref(steps);
	history_record(h, "j-wide", 1, HISTORY_RANKS, 401, 0, 0, 5, 1, 3); /* out of range */
	steps = steps_of(h, "j-wide", 400, 0);
	assert_int_equal(json_array_size(steps), 0);
	json_decref(steps);
	/* jobs: the least recently updated is evicted */
	for (int k = 0; k < HISTORY_JOBS; k++) {
		char id[16];
		snprintf(id, sizeof id, "j-%d", k);
		history_record(h, id, 1, 0, 1, 1, 1.0, 5, 1, 10 + (uint64_t)k);
	}
	assert_null(history_json(h, "j-long", 0, 0, 0));
	assert_null(history_json(h, "j-wide", 0, 0, 0));
	assert_non_null(steps = history_json(h, "j-0", 0, 0, 0));
	json_decref(steps);
	history_clear(h);
	assert_null(history_json(h, "j-0", 0, 0, 0));
	history_destroy(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reports_become_steps),
	    cmocka_unit_test(test_sampling_leaves_unknown_cells_null),
	    cmocka_unit_test(test_restore_goes_back_and_stale_generation_is_ignored),
	    cmocka_unit_test(test_after_and_limit_page),
	    cmocka_unit_test(test_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
