/* test_timeline.c: a job's timeline from its events (jobs/timeline.h): queue wait, start-up,
 * interruptions phase by phase with the step reached, the checkpoint step restored and the
 * steps done again, the time without progress
 * and the fraction with it; an interruption still going on, one that ends the job, one cut
 * short by another, kinds, and a history whose beginning was pruned. The messages are the
 * state machine's own formats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jobs/timeline.h"

static void add(json_t *events, int64_t ts, const char *type, const char *message)
{
	json_array_append_new(events,
	                      json_pack("{s:I,s:s,s:s,s:s}", "ts_ms", (json_int_t)ts, "type", type,
	                                "job", "j-000001", "message", message));
}

static int64_t get_int(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	if (!json_is_integer(v))
		fail_msg("%s: not an integer", key);
	return json_integer_value(v);
}

/* the events of a job placed at once, started, interrupted by a node's death (silent since
 * 9.9 s) detected at 13 s after step 850, re-placed from checkpoint step 800 and stepping again at
 * 15 s */
static json_t *one_failure(void)
{
	json_t *ev = json_array();
	add(ev, 1000, "job.submitted", "job j-000001 (t) submitted by admin");
	add(ev, 1500, "job.placed",
	    "job j-000001 placed (generation 1): 2 rank(s) on node-1 (2); placed at submission");
	add(ev, 1600, "job.running", "job j-000001: all 2 rank(s) of generation 1 started");
	add(ev, 2500, "job.progress", "job j-000001: first step reported: 3 (generation 1)");
	add(ev, 9000, "checkpoint.complete", "checkpoint of job j-000001 at step 800 complete");
	add(ev, 13000, "job.restarting",
	    "job j-000001 restarting (restart 1 of 3): rank 0 on node node-1: node down (no "
	    "heartbeat for 3.1 s); reached step 850");
	add(ev, 13100, "job.stopped", "job j-000001: every rank of generation 1 is stopped");
	add(ev, 13200, "job.placed",
	    "job j-000001 re-placed (generation 2): 2 rank(s) on node-2 (2); restoring from "
	    "checkpoint step 800 (controller store)");
	add(ev, 14000, "job.running", "job j-000001: all 2 rank(s) of generation 2 started");
	add(ev, 15000, "job.progress",
	    "job j-000001: first step reported: 836 (generation 2, after restart)");
	return ev;
}

static void test_an_interruption_phase_by_phase(void **state)
{
	json_t *ev = one_failure();
	add(ev, 21500, "job.succeeded", "job j-000001 succeeded: every rank exited with code 0");
	json_t *t = job_timeline("j-000001", ev, 99999);
	assert_non_null(t);
	assert_true(json_is_true(json_object_get(t, "complete")));
	assert_int_equal(get_int(t, "submitted_ms"), 1000);
	assert_int_equal(get_int(t, "placed_ms"), 1500);
	assert_int_equal(get_int(t, "queued_ms"), 500);
	assert_int_equal(get_int(t, "startup_ms"), 1000);
	assert_int_equal(get_int(t, "ended_ms"), 21500);
	assert_string_equal(json_string_value(json_object_get(t, "end")), "succeeded");
	const json_t *list = json_object_get(t, "interruptions");
	assert_int_equal(json_array_size(list), 1);
	const json_t *x = json_array_get(list, 0);
	assert_int_equal(get_int(x, "generation"), 1);
	assert_string_equal(json_string_value(json_object_get(x, "kind")), "failure");
	assert_string_equal(json_string_value(json_object_get(x, "cause")),
	                    "rank 0 on node node-1: node down (no heartbeat for 3.1 s)");
	assert_int_equal(get_int(x, "undetected_ms"), 3100);
	assert_int_equal(get_int(t, "undetected_ms"), 3100);
	assert_int_equal(get_int(x, "detected_ms"), 13000);
	assert_int_equal(get_int(x, "stopped_ms"), 13100);
	assert_int_equal(get_int(x, "placed_ms"), 13200);
	assert_int_equal(get_int(x, "running_ms"), 14000);
	assert_int_equal(get_int(x, "first_step_ms"), 15000);
	assert_int_equal(get_int(x, "reached_step"), 850);
	assert_int_equal(get_int(x, "restored_step"), 800);
	assert_int_equal(get_int(x, "lost_steps"), 50);
	assert_int_equal(get_int(t, "lost_steps"), 50);
	assert_int_equal(get_int(x, "down_ms"), 2000);
	assert_true(json_is_true(json_object_get(x, "recovered")));
	assert_true(json_is_false(json_object_get(x, "ongoing")));
	assert_int_equal(get_int(t, "down_ms"), 2000);
	assert_int_equal(get_int(t, "span_ms"), 20000);
	/* 20 s from the first placement: 1 s starting, 3.1 s silent before the detection, 2 s
	 * interrupted */
	assert_float_equal(json_real_value(json_object_get(t, "progress_fraction")), 0.695, 1e-9);
	json_decref(t);
	json_decref(ev);
}

static void test_an_interruption_going_on_or_ending_the_job(void **state)
{
	json_t *ev = one_failure();
	add(ev, 30000, "job.restarting",
	    "job j-000001 restarting (restart 2 of 3): rank 1 on node node-2 made no step "
	    "progress for 60.0 s (hang_timeout_s 60)");
	add(ev, 30100, "job.stopped", "job j-000001: every rank of generation 2 is stopped");
	/* still waiting for devices at 35 s */
	json_t *t = job_timeline("j-000001", ev, 35000);
	const json_t *list = json_object_get(t, "interruptions");
	assert_int_equal(json_array_size(list), 2);
	const json_t *x = json_array_get(list, 1);
	assert_int_equal(get_int(x, "generation"), 2);
	/* 60 s without a step, but generation 2 stepped only from 15 s: 15 s of it count */
	assert_int_equal(get_int(x, "undetected_ms"), 15000);
	assert_int_equal(get_int(t, "undetected_ms"), 18100);
	assert_true(json_is_null(json_object_get(x, "placed_ms")));
	assert_int_equal(get_int(x, "down_ms"), 5000);
	assert_true(json_is_true(json_object_get(x, "ongoing")));
	assert_true(json_is_false(json_object_get(x, "recovered")));
	assert_true(json_is_null(json_object_get(t, "ended_ms")));
	assert_int_equal(get_int(t, "down_ms"), 7000);
	assert_int_equal(get_int(t, "span_ms"), 33500);
	json_decref(t);
	/* it fails while waiting: the interruption ends with the job, not recovered */
	add(ev, 40000, "job.failed",
	    "job j-000001 failed: rank 1 on node node-2 made no step progress; 3 restart(s) used "
	    "of 3");
	t = job_timeline("j-000001", ev, 99999);
	x = json_array_get(json_object_get(t, "interruptions"), 1);
	assert_int_equal(get_int(x, "down_ms"), 10000);
	assert_true(json_is_false(json_object_get(x, "ongoing")));
	assert_true(json_is_false(json_object_get(x, "recovered")));
	assert_string_equal(json_string_value(json_object_get(t, "end")), "failed");
	assert_non_null(
	    strstr(json_string_value(json_object_get(t, "end_reason")), "3 restart(s) used of 3"));
	assert_int_equal(get_int(t, "span_ms"), 38500);
	json_decref(t);
	json_decref(ev);
}

/* ranks that finish before a heartbeat reports a step of the new generation: the job's
 * success says they recovered, and the time down ends when they ran */
static void test_success_without_a_reported_step(void **state)
{
	json_t *ev = one_failure();
	add(ev, 30000, "job.restarting", "job j-000001 restarting (restart 2 of 3): hang");
	add(ev, 30100, "job.placed", "job j-000001 re-placed (generation 3): 2 rank(s) on node-2");
	add(ev, 30400, "job.running", "job j-000001: all 2 rank(s) of generation 3 started");
	add(ev, 31000, "job.succeeded", "job j-000001 succeeded: every rank exited with code 0");
	json_t *t = job_timeline("j-000001", ev, 99999);
	const json_t *x = json_array_get(json_object_get(t, "interruptions"), 1);
	assert_true(json_is_true(json_object_get(x, "recovered")));
	assert_int_equal(get_int(x, "down_ms"), 400);
	assert_true(json_is_null(json_object_get(x, "first_step_ms")));
	json_decref(t);
	json_decref(ev);
}

static void test_kinds_and_an_interruption_cut_short(void **state)
{
	json_t *ev = one_failure();
	add(ev, 20000, "job.replacing",
	    "job j-000001 restarting to move straggler rank 1 off node node-2 (replacement 1 of "
	    "2): compute 1.52x the median of its stage; reached step 870");
	add(ev, 20500, "job.placed", "job j-000001 re-placed (generation 3): 2 rank(s) on node-3");
	/* moved again (a drain) before it made a step */
	add(ev, 21000, "job.restarting",
	    "job j-000001 restarting elsewhere (not counted against max_restarts): node node-3 is "
	    "draining; checkpoint step 880 saved first; reached step 875");
	add(ev, 21400, "job.placed",
	    "job j-000001 re-placed (generation 4): 2 rank(s) on node-4; restoring from checkpoint "
	    "step 880 (controller store)");
	add(ev, 22000, "job.progress", "job j-000001: first step reported: 900 (generation 4)");
	json_t *t = job_timeline("j-000001", ev, 23000);
	const json_t *list = json_object_get(t, "interruptions");
	assert_int_equal(json_array_size(list), 3);
	const json_t *s = json_array_get(list, 1), *m = json_array_get(list, 2);
	assert_string_equal(json_string_value(json_object_get(s, "kind")), "straggler");
	assert_string_equal(json_string_value(json_object_get(s, "cause")),
	                    "compute 1.52x the median of its stage");
	assert_int_equal(get_int(s, "generation"), 2);
	assert_int_equal(get_int(s, "down_ms"), 1000); /* until the move cut it short */
	assert_true(json_is_false(json_object_get(s, "recovered")));
	assert_true(json_is_null(json_object_get(s, "restored_step")));
	assert_int_equal(get_int(s, "reached_step"), 870);
	assert_true(json_is_null(json_object_get(s, "lost_steps")));    /* restored nothing known */
	assert_true(json_is_null(json_object_get(s, "undetected_ms"))); /* the cause names none */
	assert_string_equal(json_string_value(json_object_get(m, "kind")), "move");
	assert_string_equal(json_string_value(json_object_get(m, "cause")),
	                    "node node-3 is draining; checkpoint step 880 saved first");
	/* the checkpoint saved for the move is newer than the last report: nothing lost */
	assert_int_equal(get_int(m, "reached_step"), 875);
	assert_int_equal(get_int(m, "restored_step"), 880);
	assert_int_equal(get_int(m, "lost_steps"), 0);
	assert_int_equal(get_int(t, "lost_steps"), 50);
	assert_int_equal(get_int(m, "generation"), 3);
	assert_int_equal(get_int(m, "down_ms"), 1000);
	assert_true(json_is_true(json_object_get(m, "recovered")));
	assert_int_equal(get_int(t, "down_ms"), 4000);
	json_decref(t);
	json_decref(ev);
}

static void test_pruned_history_and_a_job_never_placed(void **state)
{
	json_t *ev = json_array();
	/* a message from before the step reached was recorded, and one whose end only looks
	 * like it: no step, the whole cause kept */
	add(ev, 13000, "job.restarting", "job j-000001 restarting (restart 1 of 3): node down");
	add(ev, 13200, "job.placed", "job j-000001 re-placed (generation 2): 2 rank(s) on node-2");
	add(ev, 14500, "job.restarting",
	    "job j-000001 restarting (restart 2 of 3): rank 0 said \"; reached step 9x\"");
	add(ev, 14800, "job.restarting",
	    "job j-000001 restarting (restart 3 of 3): rank 0 on node node-2: node down (no "
	    "heartbeat for 3.0 s)");
	json_t *t = job_timeline("j-000001", ev, 15000);
	/* that node's silence fell into the interruptions before it: none of it counts */
	assert_int_equal(
	    get_int(json_array_get(json_object_get(t, "interruptions"), 2), "undetected_ms"), 0);
	assert_true(json_is_false(json_object_get(t, "complete")));
	const json_t *old = json_array_get(json_object_get(t, "interruptions"), 0);
	assert_true(json_is_null(json_object_get(old, "reached_step")));
	assert_true(json_is_null(json_object_get(old, "lost_steps")));
	assert_string_equal(json_string_value(json_object_get(old, "cause")), "node down");
	const json_t *odd = json_array_get(json_object_get(t, "interruptions"), 1);
	assert_true(json_is_null(json_object_get(odd, "reached_step")));
	assert_string_equal(json_string_value(json_object_get(odd, "cause")),
	                    "rank 0 said \"; reached step 9x\"");
	assert_int_equal(get_int(t, "lost_steps"), 0);
	assert_int_equal(
	    get_int(json_array_get(json_object_get(t, "interruptions"), 0), "generation"),
	    1); /* the one before the re-placement's */
	json_decref(t);
	json_decref(ev);
	ev = json_array();
	add(ev, 1000, "job.submitted", "job j-000002 (w) submitted by admin");
	add(ev, 1100, "job.waiting", "job j-000002: needs 8 devices, 4 free");
	t = job_timeline("j-000002", ev, 5000);
	assert_true(json_is_true(json_object_get(t, "complete")));
	assert_true(json_is_null(json_object_get(t, "placed_ms")));
	assert_true(json_is_null(json_object_get(t, "queued_ms")));
	assert_true(json_is_null(json_object_get(t, "progress_fraction")));
	assert_int_equal(json_array_size(json_object_get(t, "interruptions")), 0);
	json_decref(t);
	/* placed, no step yet: all of it start-up */
	add(ev, 2000, "job.placed", "job j-000002 placed (generation 1): 8 rank(s) on node-1 (8)");
	t = job_timeline("j-000002", ev, 6000);
	assert_int_equal(get_int(t, "startup_ms"), 4000);
	assert_float_equal(json_real_value(json_object_get(t, "progress_fraction")), 0, 1e-9);
	json_decref(t);
	json_decref(ev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_an_interruption_phase_by_phase),
	    cmocka_unit_test(test_an_interruption_going_on_or_ending_the_job),
	    cmocka_unit_test(test_success_without_a_reported_step),
	    cmocka_unit_test(test_kinds_and_an_interruption_cut_short),
	    cmocka_unit_test(test_pruned_history_and_a_job_never_placed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
