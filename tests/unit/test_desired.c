/* test_desired.c: the heartbeat answer's text form of a job's desired entries
 * (desired_job_text) says what the object form (desired_job) says, rank by rank: head + tail
 * parses into an object equal to entry r (the controller store's checkpoint with the
 * leader's restore_world added), and so does head + close completed by the job's shared part
 * (the form for agents that take each job's shared variables and spec once). Jobs: a trainer on two
 * CPU nodes, a command job with its own environment (including a variable the ranks set themselves
 * and text to escape), CUDA and CPU nodes mixed under a job that sets CUDA_VISIBLE_DEVICES, the
 * controller store with and without a restore, a resumed generation, a parallel "auto" job with its
 * plan, and rows that do not fit together. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/desired.h"

static json_t *nodes(void)
{
	return json_loads(
	    "{\"node-a\":{\"host\":\"10.0.0.1\",\"port_base\":29500,\"devices\":[{\"index\":0,"
	    "\"kind\":\"cpu\"},{\"index\":1,\"kind\":\"cpu\"}]},"
	    "\"node-b\":{\"host\":\"10.0.0.2\",\"port_base\":29600,\"devices\":[{\"index\":0,"
	    "\"kind\":\"cuda\"},{\"index\":1,\"kind\":\"cuda\"}]},"
	    "\"node-\\\"q\\\"\":{\"host\":\"10.0.0.3\",\"port_base\":29700,\"devices\":[{\"index\":"
	    "0,"
	    "\"kind\":\"cpu\"}]}}",
	    0, NULL);
}

/* Checks every rank of job on slots (text) against desired_job; returns the world size. */
static int check_same(const char *job_text, const char *slots_text, int64_t restore_step,
                      int64_t restore_world)
{
	json_error_t e;
	json_t *job = json_loads(job_text, 0, &e);
	if (job == NULL)
		fail_msg("job: %s", e.text);
	json_t *slots = json_loads(slots_text, 0, &e);
	if (slots == NULL)
		fail_msg("slots: %s", e.text);
	json_t *n = nodes();
	json_t *entries = desired_job(job, slots, n, restore_step, NULL);
	json_t *answer = desired_job_text(job, slots, n, restore_step, restore_world);
	assert_non_null(entries);
	assert_non_null(answer);
	const json_t *heads = json_object_get(answer, "heads");
	const char *tail = json_string_value(json_object_get(answer, "tail"));
	const char *close = json_string_value(json_object_get(answer, "close"));
	assert_non_null(tail);
	assert_non_null(close);
	json_t *part = json_loads(json_string_value(json_object_get(answer, "shared")),
	                          JSON_REJECT_DUPLICATES, &e);
	if (part == NULL)
		fail_msg("shared part: %s", e.text);
	assert_true(json_is_object(json_object_get(part, "env")));
	assert_int_equal(json_array_size(heads), json_array_size(entries));
	for (size_t r = 0; r < json_array_size(entries); r++) {
		const char *head = json_string_value(json_array_get(heads, r));
		assert_non_null(head);
		size_t len = strlen(head) + strlen(tail) + 1;
		char *whole = malloc(len);
		snprintf(whole, len, "%s%s", head, tail);
		json_t *parsed = json_loads(whole, JSON_REJECT_DUPLICATES, &e);
		if (parsed == NULL)
			fail_msg("rank %zu: %s in %s", r, e.text, whole);
		json_t *want = json_deep_copy(json_array_get(entries, r));
		json_t *ckpt = json_object_get(want, "checkpoint");
		if (ckpt != NULL && restore_step >= 0)
			json_object_set_new(ckpt, "restore_world", json_integer(restore_world));
		if (!json_equal(parsed, want)) {
			char *a = json_dumps(parsed, JSON_SORT_KEYS),
			     *b = json_dumps(want, JSON_SORT_KEYS);
			fail_msg("rank %zu differs:\n text: %s\n want: %s", r, a, b);
		}
		/* the form for agents that take shared parts: head + close names the job's part,
		 * whose variables and spec complete it (the rank's own variables win) */
		len = strlen(head) + strlen(close) + 1;
		char *lean = malloc(len);
		snprintf(lean, len, "%s%s", head, close);
		json_t *entry = json_loads(lean, JSON_REJECT_DUPLICATES, &e);
		if (entry == NULL)
			fail_msg("rank %zu, shared form: %s in %s", r, e.text, lean);
		assert_string_equal(json_string_value(json_object_get(entry, "shared")),
		                    json_string_value(json_object_get(want, "job")));
		assert_null(json_object_get(entry, "spec"));
		const char *key;
		json_t *value;
		json_object_foreach(json_object_get(part, "env"), key, value)
		{
			if (json_object_get(json_object_get(entry, "env"), key) != NULL)
				fail_msg("rank %zu: %s is both its own and shared", r, key);
		}
		json_t *one = json_pack("[o]", entry), *parts = json_object(), *made;
		json_object_set(parts, json_string_value(json_object_get(want, "job")), part);
		char why[200] = "";
		made = desired_whole(one, parts, why, sizeof why);
		assert_non_null(made);
		assert_true(json_equal(json_array_get(made, 0), want));
		json_decref(made);
		json_decref(parts);
		json_decref(one);
		free(lean);
		json_decref(want);
		json_decref(parsed);
		free(whole);
	}
	json_decref(part);
	int world = (int)json_array_size(entries);
	json_decref(answer);
	json_decref(entries);
	json_decref(n);
	json_decref(slots);
	json_decref(job);
	return world;
}

static const char *const SLOTS4 =
    "[{\"node\":\"node-a\",\"device\":0},{\"node\":\"node-a\",\"device\":1},"
    "{\"node\":\"node-b\",\"device\":0},{\"node\":\"node-b\",\"device\":1}]";

static void test_trainer_on_two_nodes(void **state)
{
	assert_int_equal(
	    check_same("{\"id\":\"j-000001\",\"generation\":1,\"spec\":{\"name\":\"t\","
	               "\"ranks\":2,\"model\":{\"layers\":2}}}",
	               "[{\"node\":\"node-a\",\"device\":0},"
	               "{\"node\":\"node-a\",\"device\":1}]",
	               -1, 0),
	    2);
}

static void test_command_job_with_env_to_escape_and_mixed_cuda(void **state)
{
	/* RANK and CUDA_VISIBLE_DEVICES from the job: each rank's own value wins; a CPU node's
	 * rank keeps the job's CUDA_VISIBLE_DEVICES, which the CUDA node's ranks replace */
	assert_int_equal(
	    check_same(
	        "{\"id\":\"j-000002\",\"generation\":3,\"spec\":{\"name\":\"c\","
	        "\"command\":[\"sh\",\"-c\",\"echo \\\"$RANK\\\"\\n\"],\"ranks\":4,"
	        "\"env\":{\"RANK\":\"x\",\"CUDA_VISIBLE_DEVICES\":\"7\",\"A\":\"tab\\there\","
	        "\"U\":\"\\u00e9\\u0001\",\"N\":5}}}",
	        SLOTS4, -1, 0),
	    4);
	/* a node name that needs escaping */
	assert_int_equal(check_same("{\"id\":\"j-000003\",\"generation\":1,\"spec\":{\"name\":"
	                            "\"c\",\"command\":[\"x\"],\"ranks\":2}}",
	                            "[{\"node\":\"node-\\\"q\\\"\",\"device\":0},"
	                            "{\"node\":\"node-b\",\"device\":1}]",
	                            -1, 0),
	                 2);
}

static void test_controller_store_with_and_without_restore(void **state)
{
	const char *job =
	    "{\"id\":\"j-000004\",\"generation\":2,\"spec\":{\"name\":\"t\","
	    "\"ranks\":4,\"checkpoint\":{\"store\":\"controller\",\"every_steps\":5}}}";
	assert_int_equal(check_same(job, SLOTS4, -1, 0), 4);
	assert_int_equal(check_same(job, SLOTS4, 40, 2), 4);
	/* a directory store: YARD_CKPT_DIR shared, no "checkpoint" member */
	assert_int_equal(check_same("{\"id\":\"j-000005\",\"generation\":1,\"spec\":{\"name\":"
	                            "\"t\",\"ranks\":4,\"checkpoint\":{\"store\":\"dir:/ck\"}}}",
	                            SLOTS4, -1, 0),
	                 4);
}

static void test_auto_job_runs_its_plan(void **state)
{
	assert_int_equal(
	    check_same("{\"id\":\"j-000006\",\"generation\":1,\"spec\":{\"name\":\"t\",\"ranks\":4,"
	               "\"parallel\":\"auto\"},\"plan\":{\"layout\":{\"dp\":2,\"tp\":2,\"pp\":1}}}",
	               SLOTS4, -1, 0),
	    4);
}

static void test_inconsistent_rows_give_null(void **state)
{
	json_t *n = nodes();
	json_t *job =
	    json_loads("{\"id\":\"j-000007\",\"generation\":1,\"spec\":{\"name\":\"t\"}}", 0, NULL);
	json_t *unknown = json_loads("[{\"node\":\"node-z\",\"device\":0}]", 0, NULL);
	json_t *none = json_array();
	assert_null(desired_job_text(job, unknown, n, -1, 0));
	assert_null(desired_job_text(job, none, n, -1, 0));
	json_t *nospec = json_loads("{\"id\":\"j-000008\",\"generation\":1}", 0, NULL);
	assert_null(desired_job_text(nospec, unknown, n, -1, 0));
	json_decref(nospec);
	json_decref(none);
	json_decref(unknown);
	json_decref(job);
	json_decref(n);
}

/* An entry that names a shared part the answer does not hold (or holds without its env or
 * spec) makes no set: the agent keeps what it runs and says why. */
static void test_whole_needs_the_named_part(void **state)
{
	(void)state;
	json_t *desired = json_loads("[{\"job\":\"j1\",\"rank\":0,\"env\":{\"RANK\":\"0\"},"
	                             "\"shared\":\"j1\"}]",
	                             0, NULL);
	const char *parts_text[] = {"{}", "{\"j1\":{\"spec\":{}}}", "{\"j1\":{\"env\":{}}}",
	                            "{\"j2\":{\"env\":{},\"spec\":{}}}"};
	for (size_t i = 0; i < sizeof parts_text / sizeof parts_text[0]; i++) {
		json_t *parts = json_loads(parts_text[i], 0, NULL);
		char why[200] = "";
		assert_null(desired_whole(desired, parts, why, sizeof why));
		assert_non_null(strstr(why, "'j1'"));
		json_decref(parts);
	}
	/* whole: the part's variables join the rank's own, which win */
	json_t *parts = json_loads("{\"j1\":{\"env\":{\"RANK\":\"9\",\"PEERS\":\"a,b\"},"
	                           "\"spec\":{\"x\":1}}}",
	                           0, NULL);
	char why[200] = "";
	json_t *made = desired_whole(desired, parts, why, sizeof why);
	json_t *want = json_loads("[{\"job\":\"j1\",\"rank\":0,\"env\":{\"RANK\":\"0\","
	                          "\"PEERS\":\"a,b\"},\"spec\":{\"x\":1}}]",
	                          0, NULL);
	assert_true(json_equal(made, want));
	json_decref(want);
	json_decref(made);
	json_decref(parts);
	json_decref(desired);
}

/* An agent keeps the newer of two answers' desired sets: only an older version of the same
 * leader is stale; another leader's, or an answer that names none, is applied. */
static void test_stale_only_an_older_set_of_the_same_leader(void **state)
{
	(void)state;
	assert_true(desired_stale("m1", 70, "m1", 69));
	assert_false(desired_stale("m1", 70, "m1", 70)); /* the same set again */
	assert_false(desired_stale("m1", 70, "m1", 71));
	assert_false(desired_stale("m1", 70, "m2", 3)); /* a new leader's versions start afresh */
	assert_false(desired_stale("m1", 70, NULL, 3)); /* an older controller's answer */
	assert_false(desired_stale("m1", 70, "m1", -1));
	assert_false(desired_stale("", -1, "m1", 3)); /* nothing applied yet */
	assert_false(desired_stale("m1", -1, "m1", 3));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_whole_needs_the_named_part),
	    cmocka_unit_test(test_stale_only_an_older_set_of_the_same_leader),
	    cmocka_unit_test(test_trainer_on_two_nodes),
	    cmocka_unit_test(test_command_job_with_env_to_escape_and_mixed_cuda),
	    cmocka_unit_test(test_controller_store_with_and_without_restore),
	    cmocka_unit_test(test_auto_job_runs_its_plan),
	    cmocka_unit_test(test_inconsistent_rows_give_null),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
