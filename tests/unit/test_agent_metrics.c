/* test_agent_metrics.c: the agent's per-step lines (agent/metrics.c) and the window summaries
 * it sends for straggler detection: medians per window of W steps, a window closed by its
 * last step, the last AGENT_WINDOWS_KEPT kept, nothing when the policy is "off" or the lines
 * carry no compute_ms, a step going back starting its window over, foreign senders refused,
 * a window's report count bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/agent.h"

static struct agent agent; /* large: static, not on the stack */

static struct agent_rank *one_rank(const char *policy, int window_steps)
{
	memset(&agent, 0, sizeof agent);
	struct agent_rank *r = &agent.ranks[0];
	r->in_use = 1;
	snprintf(r->job, sizeof r->job, "j-000001");
	r->pid = getpid();
	r->step = -1;
	json_t *spec = json_pack("{s:{s:{s:s,s:i}}}", "failure", "straggler", "policy", policy,
	                         "window_steps", window_steps);
	metrics_set_window(r, spec);
	json_decref(spec);
	return r;
}

static void step(int64_t s, double compute_ms)
{
	char line[160];
	int n = snprintf(line, sizeof line,
	                 "{\"step\":%lld,\"loss\":1,\"step_ms\":50,\"compute_ms\":%.3f,"
	                 "\"comm_wait_ms\":%.3f}",
	                 (long long)s, compute_ms, compute_ms / 10);
	assert_int_equal(metrics_apply_line(&agent, getpid(), line, (size_t)n, NULL, 0), 0);
}

/* windows as "index:steps:compute" joined by spaces */
static const char *windows_text(const struct agent_rank *r)
{
	static char out[512];
	json_t *arr = metrics_windows_json(r), *w;
	size_t i;
	out[0] = '\0';
	json_array_foreach(arr, i, w)
	{
		size_t len = strlen(out);
		snprintf(out + len, sizeof out - len, "%s%lld:%lld:%g", i ? " " : "",
		         (long long)json_integer_value(json_object_get(w, "index")),
		         (long long)json_integer_value(json_object_get(w, "steps")),
		         json_number_value(json_object_get(w, "compute_ms")));
	}
	json_decref(arr);
	return out;
}

static void test_medians_per_window(void **state)
{
	struct agent_rank *r = one_rank("report", 4);
	(void)state;
	/* window 0 = steps 1-4: {10, 30, 20, 1000}: median 25 (one slow step does not count) */
	step(1, 10), step(2, 30), step(3, 20);
	assert_string_equal(windows_text(r), ""); /* not complete yet */
	step(4, 1000);
	assert_string_equal(windows_text(r), "0:4:25"); /* closed by its last step */
	step(5, 7), step(6, 7), step(7, 9), step(8, 7);
	assert_string_equal(windows_text(r), "0:4:25 1:4:7");
	json_t *arr = metrics_windows_json(r);
	assert_true(json_number_value(json_object_get(json_array_get(arr, 1), "comm_wait_ms")) ==
	            0.7);
	json_decref(arr);
	assert_int_equal(r->step, 8);
	assert_true(r->compute_ms == 7);
}

static void test_last_windows_kept_and_gaps(void **state)
{
	struct agent_rank *r = one_rank("replace", 2);
	(void)state;
	for (int64_t s = 1; s <= 12; s++)
		step(s, (double)s);
	/* 6 windows closed, the last 4 kept, oldest first */
	assert_string_equal(windows_text(r), "2:2:5.5 3:2:7.5 4:2:9.5 5:2:11.5");
	/* lost lines: step 14 alone closes nothing until window 6 ends; it counts 1 step */
	step(14, 3);
	assert_string_equal(windows_text(r), "3:2:7.5 4:2:9.5 5:2:11.5 6:1:3");
	/* a step of a later window closes the open one early; window 9 (steps 19-20) stays open */
	step(17, 1);
	step(19, 5);
	assert_string_equal(windows_text(r), "4:2:9.5 5:2:11.5 6:1:3 8:1:1");
}

static void test_step_going_back_starts_over(void **state)
{
	struct agent_rank *r = one_rank("report", 4);
	(void)state;
	step(1, 1), step(2, 1), step(3, 1), step(4, 1), step(5, 50), step(6, 50);
	/* restored step 2: the open window (steps 5-6) is dropped, window 0 starts over */
	step(3, 9), step(4, 9);
	assert_string_equal(windows_text(r), "0:4:1 0:2:9");
}

static void test_no_windows_when_off_or_without_compute(void **state)
{
	struct agent_rank *r = one_rank("off", 4);
	(void)state;
	for (int64_t s = 1; s <= 8; s++)
		step(s, 5);
	assert_string_equal(windows_text(r), "");
	r = one_rank("report", 2);
	const char *plain = "{\"step\":1,\"loss\":0.5}";
	assert_int_equal(metrics_apply_line(&agent, getpid(), plain, strlen(plain), NULL, 0), 0);
	plain = "{\"step\":2,\"loss\":0.5}";
	assert_int_equal(metrics_apply_line(&agent, getpid(), plain, strlen(plain), NULL, 0), 0);
	assert_int_equal(r->step, 2);
	assert_string_equal(windows_text(r), "");
	/* a spec without the field (an older controller): no windows either */
	json_t *spec = json_object();
	metrics_set_window(r, spec);
	json_decref(spec);
	assert_int_equal(r->window_steps, 0);
}

static void test_foreign_sender_and_bad_lines(void **state)
{
	struct agent_rank *r = one_rank("report", 2);
	(void)state;
	const char *line = "{\"step\":1,\"compute_ms\":5}";
	char why[128];
	/* pid 1 is not this rank nor in its session; the answer a sender gets names it */
	assert_int_equal(metrics_apply_line(&agent, 1, line, strlen(line), why, sizeof why),
	                 YARD_ENOTFOUND);
	assert_non_null(strstr(why, "pid 1 is not a rank of this agent nor in a rank's session"));
	assert_int_equal(metrics_apply_line(&agent, getpid(), "[1]", 3, why, sizeof why),
	                 YARD_EINVAL);
	assert_string_equal(why, "not one JSON object");
	assert_int_equal(metrics_apply_line(&agent, getpid(), "{", 1, NULL, 0), YARD_EINVAL);
	const char *far = "{\"step\":4,\"loss\":1e308}";
	assert_int_equal(metrics_apply_line(&agent, getpid(), far, strlen(far), why, sizeof why),
	                 YARD_EINVAL);
	assert_string_equal(why, "loss: must be a number within +-1e300");
	assert_int_equal(r->step, -1);
}

/* A step reported over and over stays in its window: the window's count stops at what the
 * leader accepts (AGENT_WINDOW_REPORTS_MAX), instead of passing it (the leader then refused
 * the node's heartbeats). */
static void test_window_count_is_bounded(void **state)
{
	struct agent_rank *r = one_rank("report", 2);
	(void)state;
	step(1, 5);
	r->window_seen = AGENT_WINDOW_REPORTS_MAX - 2; /* as after that many reports of step 1 */
	for (int i = 0; i < 5; i++)
		step(1, 5);
	step(2, 5);
	char want[64]; /* (the median is of the samples kept, most of them never set here) */
	int n = snprintf(want, sizeof want, "0:%d:", AGENT_WINDOW_REPORTS_MAX);
	const char *got = windows_text(r);
	if (strncmp(got, want, (size_t)n) != 0)
		fail_msg("windows %s, want %s...", got, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_window_count_is_bounded),
	    cmocka_unit_test(test_medians_per_window),
	    cmocka_unit_test(test_last_windows_kept_and_gaps),
	    cmocka_unit_test(test_step_going_back_starts_over),
	    cmocka_unit_test(test_no_windows_when_off_or_without_compute),
	    cmocka_unit_test(test_foreign_sender_and_bad_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
