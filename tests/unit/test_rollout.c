/* test_rollout.c: the replicated half of rollouts (jobs/fsm_rollout.c) driven command by
 * command: waves from cumulative counts and percentages, refused starts that change nothing,
 * the step order the state machine enforces (a stale step is refused), cordons taken and
 * given back (an operator's cordon stays), node outcomes and the failure count, wave
 * rollback, operator controls, download rights, and identical databases on two members; worker
 * builds (policy next by default, "next" refused for agent builds, the wave's worker versions
 * recorded to go back to, the agents' versions untouched). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jobs/fsm.h"

static const int64_t T0 = 1763740000000LL;
static int64_t now_ts = T0;

static int apply(struct fsm *f, const char *op, const char *args, const json_t **result)
{
	size_t len;
	json_t *a = json_loads(args, 0, NULL);
	assert_non_null(a);
	char *cmd = fsm_command_encode(op, a, NULL, ++now_ts, "admin", "admin", &len);
	assert_non_null(cmd);
	const json_t *r = fsm_apply(f, cmd, len);
	free(cmd);
	if (result)
		*result = r;
	return (int)json_integer_value(json_object_get(r, "status"));
}

static void must(struct fsm *f, const char *op, const char *args)
{
	const json_t *r;
	int status = apply(f, op, args, &r);
	if (status >= 300)
		fail_msg("%s %s: %d %s", op, args, status,
		         json_string_value(json_object_get(r, "error")));
}

static void add_node(struct fsm *f, int i)
{
	char args[512];
	snprintf(
	    args, sizeof args,
	    "{\"name\":\"node-%d\",\"host\":\"127.0.0.1\",\"port_base\":%d,\"version\":\"1.0\","
	    "\"devices\":[{\"index\":0,\"kind\":\"cpu\",\"memory_mb\":0}],"
	    "\"labels\":{\"rack\":\"%s\"},\"token_hash\":\"%064d\"}",
	    i, 20000 + 10 * i, i % 2 ? "odd" : "even", i);
	must(f, "node.register", args);
}

static void add_build(struct fsm *f, const char *version, const char *component, const char *state)
{
	char sql[512];
	snprintf(sql, sizeof sql,
	         "INSERT INTO builds(version, component, sha256, size, state, created_ms,"
	         " updated_ms, actor) VALUES('%s', '%s', '%064d', 1234, '%s', 1, 1, 'admin')",
	         version, component, 7, state);
	assert_int_equal(sqlite3_exec(f->db, sql, NULL, NULL, NULL), SQLITE_OK);
}

static void setup_cluster(struct fsm *f, int nodes)
{
	struct yard_err err = {0};
	assert_int_equal(fsm_init(f, &err), 0);
	for (int i = 1; i <= nodes; i++)
		add_node(f, i);
	add_build(f, "2.0", "agent", "ready");
	add_build(f, "2.1-partial", "agent", "uploading");
	add_build(f, "w-1", "worker", "ready");
}

static json_t *rollout(struct fsm *f, const char *id)
{
	struct yard_err err = {0};
	json_t *r = fsm_rollout_get(f, id, &err);
	assert_non_null(r);
	return r;
}

static const char *node_field(json_t *ro, const char *node, const char *key)
{
	return json_string_value(
	    json_object_get(json_object_get(json_object_get(ro, "nodes"), node), key));
}

static int cordoned(struct fsm *f, const char *node)
{
	struct yard_err err = {0};
	json_t *n = fsm_node_get(f, node, &err);
	int c = json_is_true(json_object_get(n, "cordoned"));
	json_decref(n);
	return c;
}

/* Moves the rollout one step: from its current (state, wave, phase) to the given one. */
static int step(struct fsm *f, const char *id, const char *state, int wave, const char *phase)
{
	json_t *ro = rollout(f, id);
	char args[512];
	snprintf(args, sizeof args,
	         "{\"id\":\"%s\",\"from_state\":\"%s\",\"from_wave\":%lld,\"from_phase\":\"%s\","
	         "\"state\":\"%s\",\"wave\":%d,\"phase\":\"%s\"}",
	         id, json_string_value(json_object_get(ro, "state")),
	         (long long)json_integer_value(json_object_get(ro, "wave")),
	         json_string_value(json_object_get(ro, "phase")), state, wave, phase);
	json_decref(ro);
	return apply(f, "rollout.advance", args, NULL);
}

static void test_waves_are_cumulative_counts_and_percentages(void **st)
{
	struct fsm f;
	const json_t *r;
	(void)st;
	setup_cluster(&f, 5);
	assert_int_equal(
	    apply(&f, "rollout.start", "{\"build\":\"2.0\",\"waves\":[\"1\",\"10%\",\"50%\"]}", &r),
	    201);
	json_t *ro = rollout(&f, "ro-000001");
	/* 1 node; 10% of 5 rounds up to 1 (no new node: dropped); 50% → 3; the implied 100% → 5 */
	json_t *waves = json_object_get(ro, "waves");
	assert_int_equal(json_array_size(waves), 3);
	assert_int_equal(json_array_size(json_object_get(json_array_get(waves, 0), "nodes")), 1);
	assert_int_equal(json_array_size(json_object_get(json_array_get(waves, 1), "nodes")), 2);
	assert_int_equal(json_array_size(json_object_get(json_array_get(waves, 2), "nodes")), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(waves, 2), "target")),
	                    "100%");
	assert_string_equal(json_string_value(json_object_get(ro, "state")), "pending");
	assert_string_equal(node_field(ro, "node-1", "state"), "pending");
	json_decref(ro);
	fsm_close(&f);
}

static void test_refused_starts_change_nothing(void **st)
{
	static const struct {
		const char *args;
		int status;
		const char *field;
	} cases[] = {
	    {"{\"build\":\"9.9\"}", 404, "build"},
	    {"{\"build\":\"2.1-partial\"}", 409, "build"},
	    {"{\"build\":\"2.0\",\"policy\":\"next\"}", 400, "policy"},
	    {"{\"build\":\"w-1\",\"policy\":\"later\"}", 400, "policy"},
	    {"{\"build\":\"2.0\",\"waves\":[\"0\"]}", 400, "waves"},
	    {"{\"build\":\"2.0\",\"waves\":[\"101%\"]}", 400, "waves"},
	    {"{\"build\":\"2.0\",\"waves\":\"1,2\"}", 400, "waves"},
	    {"{\"build\":\"2.0\",\"policy\":\"maybe\"}", 400, "policy"},
	    {"{\"build\":\"2.0\",\"selector\":{\"rack\":\"nowhere\"}}", 409, "selector"},
	    {"{\"build\":\"2.0\",\"gate_timeout_ms\":5}", 400, "gate_timeout_ms"},
	    {"{\"build\":\"2.0\",\"surprise\":1}", 400, NULL},
	};
	struct fsm f;
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	struct yard_err err = {0};
	(void)st;
	setup_cluster(&f, 3);
	assert_int_equal(fsm_digest(&f, before, &err), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const json_t *r;
		int status = apply(&f, "rollout.start", cases[i].args, &r);
		if (status != cases[i].status)
			fail_msg("%s: %d, want %d (%s)", cases[i].args, status, cases[i].status,
			         json_string_value(json_object_get(r, "error")));
		if (cases[i].field != NULL)
			assert_string_equal(json_string_value(json_object_get(r, "field")),
			                    cases[i].field);
	}
	/* a refused command leaves no row, no event, no counter: the same database */
	assert_int_equal(fsm_digest(&f, after, &err), 0);
	assert_string_equal(before, after);
	json_t *list = fsm_rollouts_list(&f, &err);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);
	fsm_close(&f);
}

static void test_steps_in_order_with_cordons(void **st)
{
	struct fsm f;
	(void)st;
	setup_cluster(&f, 3);
	must(&f, "node.cordon", "{\"id\":\"node-2\",\"cordoned\":true}"); /* an operator's */
	must(&f, "rollout.start",
	     "{\"build\":\"2.0\",\"waves\":[\"1\",\"100%\"],\"soak_ms\":1000}");
	assert_int_equal(apply(&f, "rollout.start", "{\"build\":\"2.0\"}", NULL), 409); /* active */
	/* steps must follow each other */
	assert_int_equal(step(&f, "ro-000001", "running", 0, "upgrade"), 409);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "cordon"), 200);
	assert_true(cordoned(&f, "node-1"));
	assert_int_equal(step(&f, "ro-000001", "running", 0, "soak"), 409);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "upgrade"), 200);
	json_t *ro = rollout(&f, "ro-000001");
	assert_string_equal(node_field(ro, "node-1", "state"), "upgrading");
	assert_string_equal(node_field(ro, "node-1", "from_version"), "1.0");
	json_decref(ro);
	assert_int_equal(fsm_build_assigned_to_node(&f, "2.0", "node-1"), 1);
	assert_int_equal(fsm_build_assigned_to_node(&f, "2.0", "node-2"), 0);
	assert_int_equal(fsm_build_assigned_to_node(&f, "w-1", "node-1"), 0);
	/* a stale proposal (from an old phase) is refused */
	assert_int_equal(apply(&f, "rollout.advance",
	                       "{\"id\":\"ro-000001\",\"from_state\":\"running\",\"from_wave\":0,"
	                       "\"from_phase\":\"cordon\",\"state\":\"running\",\"wave\":0,"
	                       "\"phase\":\"upgrade\"}",
	                       NULL),
	                 409);
	/* node outcomes: only from upgrading, and the version is recorded on the node */
	assert_int_equal(apply(&f, "rollout.node",
	                       "{\"id\":\"ro-000001\",\"node\":\"node-2\",\"state\":\"upgraded\"}",
	                       NULL),
	                 409);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-1\",\"state\":\"upgraded\",\"version\":\"2."
	     "0\"}");
	struct yard_err err = {0};
	json_t *n = fsm_node_get(&f, "node-1", &err);
	assert_string_equal(json_string_value(json_object_get(n, "version")), "2.0");
	json_decref(n);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "verify"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "soak"), 200);
	assert_int_equal(step(&f, "ro-000001", "completed", 0, ""), 409); /* not the last wave */
	assert_int_equal(step(&f, "ro-000001", "running", 0, "uncordon"), 200);
	assert_false(cordoned(&f, "node-1"));
	assert_int_equal(step(&f, "ro-000001", "running", 1, "cordon"), 200);
	assert_true(cordoned(&f, "node-2"));
	assert_true(cordoned(&f, "node-3"));
	ro = rollout(&f, "ro-000001");
	/* node-2 was cordoned by an operator: not the rollout's to lift */
	assert_false(json_is_true(
	    json_object_get(json_object_get(json_object_get(ro, "nodes"), "node-2"), "cordoned")));
	json_decref(ro);
	assert_int_equal(step(&f, "ro-000001", "running", 1, "upgrade"), 200);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-2\",\"state\":\"upgraded\",\"version\":\"2."
	     "0\"}");
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-3\",\"state\":\"upgraded\",\"version\":\"2."
	     "0\"}");
	assert_int_equal(step(&f, "ro-000001", "running", 1, "verify"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 1, "soak"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 1, "uncordon"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 2, "cordon"), 409); /* no wave 3 */
	assert_int_equal(step(&f, "ro-000001", "completed", 1, ""), 200);
	assert_true(cordoned(&f, "node-2"));
	assert_false(cordoned(&f, "node-3"));
	ro = rollout(&f, "ro-000001");
	assert_string_equal(json_string_value(json_object_get(ro, "state")), "completed");
	json_decref(ro);
	/* a new rollout may start now */
	assert_int_equal(apply(&f, "rollout.start", "{\"build\":\"2.0\"}", NULL), 201);
	fsm_close(&f);
}

static void test_failed_gate_rolls_the_wave_back(void **st)
{
	struct fsm f;
	(void)st;
	setup_cluster(&f, 3);
	must(&f, "rollout.start", "{\"build\":\"2.0\",\"waves\":[\"1\",\"2\",\"100%\"]}");
	assert_int_equal(step(&f, "ro-000001", "running", 0, "cordon"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "upgrade"), 200);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-1\",\"state\":\"upgraded\",\"version\":\"2."
	     "0\"}");
	assert_int_equal(step(&f, "ro-000001", "running", 0, "verify"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "soak"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "uncordon"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 1, "cordon"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 1, "upgrade"), 200);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-2\",\"state\":\"failed\",\"error\":\"self-test "
	     "failed\"}");
	json_t *ro = rollout(&f, "ro-000001");
	assert_int_equal(json_integer_value(json_object_get(ro, "failures")), 1);
	json_decref(ro);
	assert_int_equal(step(&f, "ro-000001", "rolling-back", 1, ""), 200);
	ro = rollout(&f, "ro-000001");
	/* only the failed wave goes back; wave 1 stays upgraded, wave 3 untouched */
	assert_string_equal(node_field(ro, "node-1", "state"), "upgraded");
	assert_string_equal(node_field(ro, "node-2", "state"), "rolling-back");
	assert_string_equal(node_field(ro, "node-3", "state"), "pending");
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(json_object_get(ro, "waves"), 1), "state")),
	                    "rolled-back");
	json_decref(ro);
	assert_int_equal(fsm_build_assigned_to_node(&f, "2.0", "node-2"), 0);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-2\",\"state\":\"rolled-back\",\"version\":\"1."
	     "0\"}");
	ro = rollout(&f, "ro-000001");
	assert_string_equal(node_field(ro, "node-2", "error"), "self-test failed"); /* kept */
	json_decref(ro);
	assert_int_equal(step(&f, "ro-000001", "running", 2, "cordon"), 409); /* never */
	assert_int_equal(step(&f, "ro-000001", "rolled-back", 1, ""), 200);
	assert_false(cordoned(&f, "node-2"));
	ro = rollout(&f, "ro-000001");
	assert_string_equal(json_string_value(json_object_get(ro, "state")), "rolled-back");
	json_decref(ro);
	fsm_close(&f);
}

static int has_event(struct fsm *f, const char *text)
{
	sqlite3_stmt *st;
	int found = 0;
	assert_int_equal(sqlite3_prepare_v2(f->db, "SELECT message FROM events", -1, &st, NULL),
	                 SQLITE_OK);
	while (sqlite3_step(st) == SQLITE_ROW)
		found |= strstr((const char *)sqlite3_column_text(st, 0), text) != NULL;
	sqlite3_finalize(st);
	return found;
}

static void test_worker_build(void **st)
{
	struct fsm f;
	struct yard_err err = {0};
	(void)st;
	setup_cluster(&f, 3);
	must(&f, "rollout.start", "{\"build\":\"w-1\",\"waves\":[\"1\",\"100%\"]}");
	json_t *ro = rollout(&f, "ro-000001");
	json_t *spec = json_object_get(ro, "spec");
	assert_string_equal(json_string_value(json_object_get(spec, "component")), "worker");
	assert_string_equal(json_string_value(json_object_get(spec, "policy")), "next");
	json_decref(ro);
	assert_true(has_event(&f, "rollout ro-000001 of worker build w-1"));
	assert_int_equal(step(&f, "ro-000001", "running", 0, "cordon"), 200);
	/* the wave's worker versions come with the step into upgrade; a bad map is refused */
	const char *upgrade_args =
	    "{\"id\":\"ro-000001\",\"from_state\":\"running\",\"from_wave\":0,"
	    "\"from_phase\":\"cordon\",\"state\":\"running\",\"wave\":0,\"phase\":"
	    "\"upgrade\",\"from_versions\":%s}";
	char args[512];
	const json_t *r;
	snprintf(args, sizeof args, upgrade_args, "{\"node-1\":7}");
	assert_int_equal(apply(&f, "rollout.advance", args, &r), 400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "from_versions");
	snprintf(args, sizeof args, upgrade_args, "{\"node-1\":\"w-0\"}");
	must(&f, "rollout.advance", args);
	ro = rollout(&f, "ro-000001");
	assert_string_equal(node_field(ro, "node-1", "state"), "upgrading");
	assert_string_equal(node_field(ro, "node-1", "from_version"), "w-0");
	json_decref(ro);
	assert_int_equal(fsm_build_assigned_to_node(&f, "w-1", "node-1"), 1);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-1\",\"state\":\"upgraded\",\"version\":"
	     "\"w-1\"}");
	/* the agent's version is not the worker's */
	json_t *n = fsm_node_get(&f, "node-1", &err);
	assert_string_equal(json_string_value(json_object_get(n, "version")), "1.0");
	json_decref(n);
	assert_true(has_event(&f, "node node-1: worker w-0 -> w-1 installed"));
	assert_int_equal(step(&f, "ro-000001", "running", 0, "verify"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "soak"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "uncordon"), 200);
	assert_int_equal(step(&f, "ro-000001", "running", 1, "cordon"), 200);
	/* a node not heard from has no version to go back to */
	snprintf(args, sizeof args,
	         "{\"id\":\"ro-000001\",\"from_state\":\"running\",\"from_wave\":1,"
	         "\"from_phase\":\"cordon\",\"state\":\"running\",\"wave\":1,\"phase\":"
	         "\"upgrade\",\"from_versions\":{\"node-2\":\"w-0\"}}");
	must(&f, "rollout.advance", args);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-2\",\"state\":\"failed\",\"error\":"
	     "\"self-test failed (exit 1): boom\"}");
	assert_int_equal(step(&f, "ro-000001", "rolling-back", 1, ""), 200);
	ro = rollout(&f, "ro-000001");
	assert_string_equal(node_field(ro, "node-2", "state"), "rolling-back");
	assert_string_equal(node_field(ro, "node-2", "from_version"), "w-0");
	assert_string_equal(node_field(ro, "node-3", "from_version"), "");
	assert_string_equal(node_field(ro, "node-1", "state"), "upgraded");
	json_decref(ro);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-2\",\"state\":\"rolled-back\",\"version\":"
	     "\"w-0\"}");
	n = fsm_node_get(&f, "node-2", &err);
	assert_string_equal(json_string_value(json_object_get(n, "version")), "1.0");
	json_decref(n);
	/* an agent build's policy defaults to keep */
	assert_int_equal(step(&f, "ro-000001", "rolled-back", 1, ""), 200);
	must(&f, "rollout.start", "{\"build\":\"2.0\"}");
	ro = rollout(&f, "ro-000002");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(ro, "spec"), "policy")), "keep");
	json_decref(ro);
	fsm_close(&f);
}

static void test_controls(void **st)
{
	struct fsm f;
	(void)st;
	setup_cluster(&f, 2);
	must(&f, "rollout.start", "{\"build\":\"2.0\",\"waves\":[\"1\"]}");
	assert_int_equal(
	    apply(&f, "rollout.control", "{\"id\":\"ro-000001\",\"action\":\"resume\"}", NULL),
	    409);
	assert_int_equal(
	    apply(&f, "rollout.control", "{\"id\":\"ro-000001\",\"action\":\"nap\"}", NULL), 400);
	assert_int_equal(step(&f, "ro-000001", "running", 0, "cordon"), 200);
	must(&f, "rollout.control", "{\"id\":\"ro-000001\",\"action\":\"pause\"}");
	assert_int_equal(step(&f, "ro-000001", "running", 0, "upgrade"), 409); /* paused */
	must(&f, "rollout.control", "{\"id\":\"ro-000001\",\"action\":\"resume\"}");
	assert_int_equal(step(&f, "ro-000001", "running", 0, "upgrade"), 200);
	must(&f, "rollout.node",
	     "{\"id\":\"ro-000001\",\"node\":\"node-1\",\"state\":\"upgraded\",\"version\":\"2."
	     "0\"}");
	must(&f, "rollout.control",
	     "{\"id\":\"ro-000001\",\"action\":\"abort\",\"reason\":\"change window over\"}");
	assert_false(cordoned(&f, "node-1"));
	json_t *ro = rollout(&f, "ro-000001");
	assert_string_equal(json_string_value(json_object_get(ro, "state")), "aborted");
	assert_string_equal(json_string_value(json_object_get(ro, "reason")), "change window over");
	json_decref(ro);
	assert_int_equal(
	    apply(&f, "rollout.control", "{\"id\":\"ro-000001\",\"action\":\"pause\"}", NULL), 409);
	/* rollback of an ended rollout: every node it upgraded goes back */
	must(&f, "rollout.control", "{\"id\":\"ro-000001\",\"action\":\"rollback\"}");
	ro = rollout(&f, "ro-000001");
	assert_string_equal(json_string_value(json_object_get(ro, "state")), "rolling-back");
	assert_string_equal(node_field(ro, "node-1", "state"), "rolling-back");
	assert_string_equal(node_field(ro, "node-2", "state"), "pending");
	json_decref(ro);
	assert_int_equal(apply(&f, "rollout.start", "{\"build\":\"2.0\"}", NULL), 409);
	assert_int_equal(
	    apply(&f, "rollout.control", "{\"id\":\"ro-000009\",\"action\":\"pause\"}", NULL), 404);
	fsm_close(&f);
}

static void test_two_members_store_the_same_bytes(void **st)
{
	struct fsm a, b;
	char da[SHA256_HEX_LEN + 1], db[SHA256_HEX_LEN + 1];
	struct yard_err err = {0};
	(void)st;
	for (int k = 0; k < 2; k++) {
		struct fsm *f = k ? &b : &a;
		now_ts = T0 + 1000;
		setup_cluster(f, 4);
		must(f, "rollout.start", "{\"build\":\"2.0\",\"waves\":[\"25%\",\"100%\"]}");
		assert_int_equal(step(f, "ro-000001", "running", 0, "cordon"), 200);
		assert_int_equal(step(f, "ro-000001", "running", 0, "upgrade"), 200);
		must(f, "rollout.node",
		     "{\"id\":\"ro-000001\",\"node\":\"node-1\",\"state\":\"failed\",\"error\":"
		     "\"x\"}");
		assert_int_equal(step(f, "ro-000001", "rolling-back", 0, ""), 200);
	}
	assert_int_equal(fsm_digest(&a, da, &err), 0);
	assert_int_equal(fsm_digest(&b, db, &err), 0);
	assert_string_equal(da, db);
	fsm_close(&a);
	fsm_close(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_waves_are_cumulative_counts_and_percentages),
	    cmocka_unit_test(test_refused_starts_change_nothing),
	    cmocka_unit_test(test_steps_in_order_with_cordons),
	    cmocka_unit_test(test_failed_gate_rolls_the_wave_back),
	    cmocka_unit_test(test_worker_build),
	    cmocka_unit_test(test_controls),
	    cmocka_unit_test(test_two_members_store_the_same_bytes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
