/* test_jobspec.c: the job spec parser (jobs/spec.h): defaults, normalization round trips,
 * a table of bad specs each refused naming its field, files, and the rank layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/common.h"
#include "jobs/spec.h"

static json_t *load(const char *text)
{
	struct yard_err err = {0};
	json_t *v = jsonx_parse(text, strlen(text), 1 << 20, 32, &err);
	if (v == NULL)
		fail_msg("test JSON does not parse: %s: %s", err.msg, text);
	return v;
}

/* Parses text, expecting success. */
static void parse_ok(const char *text, struct jobspec *spec)
{
	struct yard_err err = {0};
	json_t *v = load(text);
	int rc = jobspec_parse(v, spec, &err);
	json_decref(v);
	if (rc != 0)
		fail_msg("spec refused: %s\n  spec: %s", err.msg, text);
}

static void test_defaults_are_a_small_valid_trainer_job(void **state)
{
	struct jobspec spec;
	parse_ok("{\"name\": \"d\"}", &spec);
	assert_string_equal(spec.name, "d");
	assert_int_equal(spec.is_command, 0);
	assert_int_equal(spec.priority, 0);
	assert_int_equal(spec.time_limit_s, 0);
	assert_int_equal(spec.model.d_in, 32);
	assert_int_equal(spec.model.d_model, 64);
	assert_int_equal(spec.model.d_ff, 256);
	assert_int_equal(spec.model.layers, 8);
	assert_int_equal(spec.model.classes, 10);
	assert_int_equal(spec.train.steps, 200);
	assert_int_equal(spec.train.batch_size, 64);
	assert_int_equal(spec.train.optimizer, JOBSPEC_ADAMW);
	assert_string_equal(spec.train.dataset, "synthetic");
	assert_int_equal(spec.parallel.is_auto, 0);
	assert_int_equal(spec.parallel.dp * spec.parallel.tp * spec.parallel.pp, 1);
	assert_int_equal(spec.parallel.schedule, JOBSPEC_1F1B);
	assert_int_equal(spec.parallel.virtual_stages, 1);
	assert_int_equal(spec.parallel.micro_batches, 1);
	assert_int_equal(spec.ranks, 1);
	assert_int_equal(spec.device, JOBSPEC_DEVICE_ANY);
	assert_int_equal(spec.checkpoint.every_steps, 0);
	assert_int_equal(spec.checkpoint.keep, 3);
	assert_string_equal(spec.checkpoint.store, "controller");
	assert_int_equal(spec.checkpoint.before_restart_s, -1); /* not set */
	assert_int_equal(jobspec_before_restart_s(&spec), 30);
	assert_int_equal(spec.failure.max_restarts, 3);
	assert_int_equal(spec.failure.straggler_policy, JOBSPEC_STRAGGLER_REPORT);
	assert_true(spec.failure.stop_on_disconnect_s == 0);
	assert_true(spec.failure.straggler_persist_s == 10);
	{
		/* stored only when set: the spec of a job without it still parses on a controller
		 * or agent that predates the field */
		json_t *normal = jobspec_to_json(&spec);
		const json_t *failure = json_object_get(normal, "failure");
		assert_non_null(failure);
		assert_null(json_object_get(failure, "stop_on_disconnect_s"));
		assert_null(json_object_get(failure, "first_step_timeout_s"));
		assert_null(json_object_get(json_object_get(failure, "straggler"), "persist_s"));
		assert_null(
		    json_object_get(json_object_get(normal, "checkpoint"), "before_restart_s"));
		json_decref(normal);
	}
	assert_int_equal(spec.debug.slow_rank, -1);
	assert_string_equal(spec.debug.slow_node, "");
	assert_true(spec.debug.block_ms == 0);
	assert_int_equal(spec.debug.hang_rank, -1);
	assert_int_equal(spec.debug.crash_rank, -1);
	assert_int_equal(spec.argc, 0);
	assert_null(spec.argv[0]);
	jobspec_free(&spec);

	/* jobspec_defaults gives the same values as parsing a spec with only a name */
	struct jobspec d;
	jobspec_defaults(&d);
	assert_int_equal(d.model.d_ff, 256);
	assert_int_equal(d.train.samples, 4096);
	assert_true(d.train.lr == 0.01);
}

/* parse → to_json → parse gives the same normalized JSON, and to_json is a fixed point. */
static void assert_round_trip(const char *text)
{
	struct jobspec a, b;
	struct yard_err err = {0};
	parse_ok(text, &a);
	json_t *ja = jobspec_to_json(&a);
	assert_non_null(ja);
	if (jobspec_parse(ja, &b, &err) != 0)
		fail_msg("normalized spec refused: %s", err.msg);
	json_t *jb = jobspec_to_json(&b);
	if (!json_equal(ja, jb)) {
		char *sa = json_dumps(ja, JSON_SORT_KEYS), *sb = json_dumps(jb, JSON_SORT_KEYS);
		fail_msg("round trip changed the spec:\n  %s\n  %s", sa, sb);
	}
	assert_int_equal(a.ranks, b.ranks);
	assert_int_equal(a.argc, b.argc);
	assert_int_equal(a.envc, b.envc);
	for (int i = 0; i < a.envc; i++)
		assert_string_equal(a.env[i], b.env[i]);
	for (int i = 0; i < a.argc; i++)
		assert_string_equal(a.argv[i], b.argv[i]);
	assert_memory_equal(&a.train, &b.train, sizeof a.train);
	assert_memory_equal(&a.failure, &b.failure, sizeof a.failure);
	assert_memory_equal(&a.debug, &b.debug, sizeof a.debug);
	json_decref(ja);
	json_decref(jb);
	jobspec_free(&a);
	jobspec_free(&b);
}

/* time_limit_s is in the normalized spec only when set (members built before it refuse
 * the key, so a spec without it must not carry it) */
static void test_time_limit_only_when_set(void **state)
{
	struct jobspec spec;
	parse_ok("{\"name\": \"d\"}", &spec);
	json_t *j = jobspec_to_json(&spec);
	assert_null(json_object_get(j, "time_limit_s"));
	json_decref(j);
	jobspec_free(&spec);
	parse_ok("{\"name\": \"d\", \"time_limit_s\": 90}", &spec);
	assert_int_equal(spec.time_limit_s, 90);
	j = jobspec_to_json(&spec);
	assert_int_equal(json_integer_value(json_object_get(j, "time_limit_s")), 90);
	assert_null(json_object_get(j, "after"));
	json_decref(j);
	jobspec_free(&spec);
	parse_ok("{\"name\": \"d\", \"after\": [\"j-000007\"]}", &spec);
	assert_int_equal(spec.n_after, 1);
	assert_string_equal(spec.after[0], "j-000007");
	j = jobspec_to_json(&spec);
	assert_string_equal(json_string_value(json_array_get(json_object_get(j, "after"), 0)),
	                    "j-000007");
	json_decref(j);
	jobspec_free(&spec);
}

static void test_round_trip(void **state)
{
	assert_round_trip("{\"name\": \"d\"}");
	assert_round_trip("{\"name\": \"d\", \"time_limit_s\": 3600}");
	assert_round_trip("{\"name\": \"d\", \"after\": [\"j-000002\", \"j-000001\"]}");
	assert_round_trip(
	    "{\"name\": \"hybrid-demo\", \"priority\": -7,"
	    " \"model\": {\"d_in\": 16, \"d_model\": 48, \"d_ff\": 96, \"layers\": 12,"
	    "  \"classes\": 4, \"seed\": 9007199254740993},"
	    " \"train\": {\"steps\": 300, \"batch_size\": 96, \"lr\": 0.003, \"optimizer\": "
	    "\"sgd\","
	    "  \"momentum\": 0.5, \"beta1\": 0.8, \"beta2\": 0.95, \"eps\": 1e-6, "
	    "\"weight_decay\": 0.1,"
	    "  \"clip_norm\": 0, \"bucket_mb\": 0.25, \"dataset\": \"/data/x.bin\", \"data_seed\": "
	    "5,"
	    "  \"samples\": 100},"
	    " \"env\": {\"OMP_NUM_THREADS\": \"1\", \"EMPTY\": \"\", \"EQ\": \"a=b\"},"
	    " \"parallel\": {\"dp\": 2, \"tp\": 2, \"pp\": 3, \"schedule\": \"interleaved\","
	    "  \"virtual_stages\": 2, \"micro_batches\": 6},"
	    " \"resources\": {\"device\": \"cuda\", \"memory_mb\": 8000},"
	    " \"checkpoint\": {\"every_steps\": 50, \"keep\": 2, \"store\": \"dir:/mnt/ckpt\","
	    "  \"before_restart_s\": 0},"
	    " \"failure\": {\"max_restarts\": 0, \"hang_timeout_s\": 5, \"first_step_timeout_s\": "
	    "600,"
	    "  \"stop_on_disconnect_s\": 1.5, \"allow_shrink_dp\": true,"
	    "  \"straggler\": {\"policy\": \"replace\", \"threshold\": 0.5, \"windows\": 2,"
	    "   \"window_steps\": 4, \"persist_s\": 2.5, \"max_replacements\": 1}},"
	    " \"debug\": {\"slow_rank\": 11, \"slow_node\": \"node-b\", \"slow_factor\": 3,"
	    "  \"block_ms\": 2.5, \"hang_rank\": 0,"
	    "  \"hang_at_step\": 7, \"crash_rank\": 5, \"crash_at_step\": 9}}");
	assert_round_trip("{\"name\": \"cmd\", \"command\": [\"sh\", \"-c\", \"\"], \"ranks\": 3,"
	                  " \"env\": {\"A\": \"1\"}}");
	assert_round_trip("{\"name\": \"planned\", \"parallel\": \"auto\"}");
	assert_round_trip("{\"name\": \"planned8\", \"parallel\": \"auto\", \"ranks\": 8}");
}

static void test_layout_fields_and_ranks(void **state)
{
	struct jobspec spec;
	parse_ok("{\"name\": \"h\", \"model\": {\"d_ff\": 128},"
	         " \"parallel\": {\"dp\": 2, \"tp\": 2, \"pp\": 2, \"micro_batches\": 4}}",
	         &spec);
	assert_int_equal(spec.ranks, 8);
	assert_int_equal(spec.parallel.micro_batches, 4);
	jobspec_free(&spec);

	parse_ok("{\"name\": \"h\", \"parallel\": {\"dp\": 2}, \"ranks\": 2}", &spec);
	assert_int_equal(spec.ranks, 2);
	jobspec_free(&spec);

	parse_ok("{\"name\": \"a\", \"parallel\": \"auto\"}", &spec);
	assert_int_equal(spec.parallel.is_auto, 1);
	assert_int_equal(spec.ranks, 0);
	jobspec_free(&spec);

	parse_ok(
	    "{\"name\": \"c\", \"command\": [\"python3\", \"train.py\", \"--x\"], \"ranks\": 4,"
	    " \"env\": {\"K\": \"V=W\"}}",
	    &spec);
	assert_int_equal(spec.is_command, 1);
	assert_int_equal(spec.argc, 3);
	assert_string_equal(spec.argv[0], "python3");
	assert_string_equal(spec.argv[2], "--x");
	assert_null(spec.argv[3]);
	assert_int_equal(spec.envc, 1);
	assert_string_equal(spec.env[0], "K=V=W");
	assert_null(spec.env[1]);
	assert_int_equal(spec.ranks, 4);
	jobspec_free(&spec);
}

/* A bad spec and the field path its error must name. */
struct bad_spec {
	const char *json;
	const char *field;
};

static const struct bad_spec bad_specs[] = {
    /* top level */
    {"[]", "spec"},
    {"{}", "name"},
    {"{\"name\": 5}", "name"},
    {"{\"name\": \"\"}", "name"},
    {"{\"name\": \"has space\"}", "name"},
    {"{\"name\": \"sl/ash\"}", "name"},
    {"{\"name\": \"a234567890123456789012345678901234567890123456789012345678901234\"}", "name"},
    {"{\"name\": \"n\", \"nmae\": 1}", "nmae"},
    {"{\"name\": \"n\", \"priority\": 1001}", "priority"},
    {"{\"name\": \"n\", \"priority\": \"high\"}", "priority"},
    {"{\"name\": \"n\", \"priority\": 1.5}", "priority"},
    {"{\"name\": \"n\", \"time_limit_s\": -1}", "time_limit_s"},
    {"{\"name\": \"n\", \"time_limit_s\": 31622401}", "time_limit_s"},
    {"{\"name\": \"n\", \"time_limit_s\": \"1h\"}", "time_limit_s"},
    {"{\"name\": \"n\", \"after\": \"j-000001\"}", "after"},
    {"{\"name\": \"n\", \"after\": [1]}", "after[0]"},
    {"{\"name\": \"n\", \"after\": [\"j-000001\", \"job-2\"]}", "after[1]"},
    {"{\"name\": \"n\", \"after\": [\"j-\"]}", "after[0]"},
    {"{\"name\": \"n\", \"after\": [\"j-12x\"]}", "after[0]"},
    {"{\"name\": \"n\", \"after\": [\"j-000001\", \"j-000001\"]}", "after[1]"},
    {"{\"name\": \"n\", \"after\": [\"j-1\",\"j-2\",\"j-3\",\"j-4\",\"j-5\",\"j-6\",\"j-7\","
     "\"j-8\",\"j-9\",\"j-10\",\"j-11\",\"j-12\",\"j-13\",\"j-14\",\"j-15\",\"j-16\",\"j-17\"]}",
     "after"},
    /* model */
    {"{\"name\": \"n\", \"model\": 3}", "model"},
    {"{\"name\": \"n\", \"model\": {\"width\": 3}}", "model.width"},
    {"{\"name\": \"n\", \"model\": {\"d_in\": 0}}", "model.d_in"},
    {"{\"name\": \"n\", \"model\": {\"d_model\": 65537}}", "model.d_model"},
    {"{\"name\": \"n\", \"model\": {\"d_ff\": \"256\"}}", "model.d_ff"},
    {"{\"name\": \"n\", \"model\": {\"layers\": 4097}}", "model.layers"},
    {"{\"name\": \"n\", \"model\": {\"classes\": 1}}", "model.classes"},
    {"{\"name\": \"n\", \"model\": {\"seed\": -1}}", "model.seed"},
    /* train */
    {"{\"name\": \"n\", \"train\": {\"epochs\": 1}}", "train.epochs"},
    {"{\"name\": \"n\", \"train\": {\"steps\": 0}}", "train.steps"},
    {"{\"name\": \"n\", \"train\": {\"steps\": 1000000001}}", "train.steps"},
    {"{\"name\": \"n\", \"train\": {\"lr\": 0}}", "train.lr"},
    {"{\"name\": \"n\", \"train\": {\"lr\": 10.5}}", "train.lr"},
    {"{\"name\": \"n\", \"train\": {\"lr\": true}}", "train.lr"},
    {"{\"name\": \"n\", \"train\": {\"optimizer\": \"adam\"}}", "train.optimizer"},
    {"{\"name\": \"n\", \"train\": {\"beta2\": 1}}", "train.beta2"},
    {"{\"name\": \"n\", \"train\": {\"eps\": 0}}", "train.eps"},
    {"{\"name\": \"n\", \"train\": {\"momentum\": -0.1}}", "train.momentum"},
    {"{\"name\": \"n\", \"train\": {\"bucket_mb\": 0}}", "train.bucket_mb"},
    {"{\"name\": \"n\", \"train\": {\"dataset\": \"\"}}", "train.dataset"},
    {"{\"name\": \"n\", \"train\": {\"samples\": 0}}", "train.samples"},
    {"{\"name\": \"n\", \"train\": {\"batch_size\": 0}}", "train.batch_size"},
    /* parallel */
    {"{\"name\": \"n\", \"parallel\": \"manual\"}", "parallel"},
    {"{\"name\": \"n\", \"parallel\": [1, 2]}", "parallel"},
    {"{\"name\": \"n\", \"parallel\": {\"ep\": 2}}", "parallel.ep"},
    {"{\"name\": \"n\", \"parallel\": {\"dp\": 0}}", "parallel.dp"},
    {"{\"name\": \"n\", \"parallel\": {\"dp\": 1025}}", "parallel.dp"},
    {"{\"name\": \"n\", \"parallel\": {\"tp\": 2.0}}", "parallel.tp"},
    {"{\"name\": \"n\", \"parallel\": {\"pp\": 65}}", "parallel.pp"},
    {"{\"name\": \"n\", \"parallel\": {\"schedule\": \"zb\"}}", "parallel.schedule"},
    {"{\"name\": \"n\", \"parallel\": {\"micro_batches\": 4097}}", "parallel.micro_batches"},
    {"{\"name\": \"n\", \"parallel\": {\"virtual_stages\": 0}}", "parallel.virtual_stages"},
    /* cross-field rules */
    {"{\"name\": \"n\", \"parallel\": {\"tp\": 3}}", "parallel.tp"},
    {"{\"name\": \"n\", \"model\": {\"layers\": 4}, \"parallel\": {\"pp\": 8}}", "parallel.pp"},
    {"{\"name\": \"n\", \"parallel\": {\"pp\": 2, \"virtual_stages\": 2}}",
     "parallel.virtual_stages"},
    {"{\"name\": \"n\", \"model\": {\"layers\": 10}, \"parallel\": {\"pp\": 2, "
     "\"schedule\": \"interleaved\", \"virtual_stages\": 2, \"micro_batches\": 4}}",
     "model.layers"},
    {"{\"name\": \"n\", \"parallel\": {\"pp\": 2, \"schedule\": \"interleaved\", "
     "\"virtual_stages\": 2, \"micro_batches\": 3}}",
     "parallel.micro_batches"},
    {"{\"name\": \"n\", \"parallel\": {\"dp\": 3}}", "train.batch_size"},
    {"{\"name\": \"n\", \"parallel\": {\"dp\": 4, \"micro_batches\": 32}}", "train.batch_size"},
    {"{\"name\": \"n\", \"parallel\": {\"dp\": 2}, \"ranks\": 4}", "ranks"},
    {"{\"name\": \"n\", \"parallel\": {\"dp\": 1024, \"tp\": 128}, \"model\": {\"d_ff\": 128}, "
     "\"train\": {\"batch_size\": 1024}}",
     "parallel"},
    {"{\"name\": \"n\", \"debug\": {\"crash_rank\": 1}}", "debug.crash_rank"},
    {"{\"name\": \"n\", \"parallel\": {\"dp\": 2}, \"debug\": {\"slow_rank\": 2}}",
     "debug.slow_rank"},
    {"{\"name\": \"n\", \"command\": [\"true\"], \"ranks\": 2, \"debug\": {\"hang_rank\": 2}}",
     "debug.hang_rank"},
    /* command jobs */
    {"{\"name\": \"n\", \"command\": [\"true\"]}", "ranks"},
    {"{\"name\": \"n\", \"command\": [\"true\"], \"ranks\": 1, \"model\": {}}", "model"},
    {"{\"name\": \"n\", \"command\": [\"true\"], \"ranks\": 1, \"train\": {\"steps\": 5}}",
     "train"},
    {"{\"name\": \"n\", \"command\": [\"true\"], \"ranks\": 1, \"parallel\": {\"dp\": 1}}",
     "parallel"},
    {"{\"name\": \"n\", \"command\": \"python3 train.py\", \"ranks\": 1}", "command"},
    {"{\"name\": \"n\", \"command\": [], \"ranks\": 1}", "command"},
    {"{\"name\": \"n\", \"command\": [\"\"], \"ranks\": 1}", "command[0]"},
    {"{\"name\": \"n\", \"command\": [\"x\", 3], \"ranks\": 1}", "command[1]"},
    {"{\"name\": \"n\", \"command\": [\"true\"], \"ranks\": 0}", "ranks"},
    {"{\"name\": \"n\", \"command\": [\"true\"], \"ranks\": 65537}", "ranks"},
    /* env */
    {"{\"name\": \"n\", \"env\": [\"A=1\"]}", "env"},
    {"{\"name\": \"n\", \"env\": {\"A\": 1}}", "env.A"},
    {"{\"name\": \"n\", \"env\": {\"1A\": \"x\"}}", "env.1A"},
    {"{\"name\": \"n\", \"env\": {\"A-B\": \"x\"}}", "env.A-B"},
    {"{\"name\": \"n\", \"env\": {\"RANK\": \"0\"}}", "env.RANK"},
    {"{\"name\": \"n\", \"env\": {\"YARD_JOB\": \"x\"}}", "env.YARD_JOB"},
    {"{\"name\": \"n\", \"env\": {\"A\": {\"nested\": \"x\"}}}", "env.A"},
    /* resources */
    {"{\"name\": \"n\", \"resources\": {\"gpus\": 1}}", "resources.gpus"},
    {"{\"name\": \"n\", \"resources\": {\"device\": \"tpu\"}}", "resources.device"},
    {"{\"name\": \"n\", \"resources\": {\"memory_mb\": -1}}", "resources.memory_mb"},
    /* checkpoint */
    {"{\"name\": \"n\", \"checkpoint\": {\"every\": 5}}", "checkpoint.every"},
    {"{\"name\": \"n\", \"checkpoint\": {\"every_steps\": -1}}", "checkpoint.every_steps"},
    {"{\"name\": \"n\", \"checkpoint\": {\"keep\": 0}}", "checkpoint.keep"},
    {"{\"name\": \"n\", \"checkpoint\": {\"before_restart_s\": -1}}",
     "checkpoint.before_restart_s"},
    {"{\"name\": \"n\", \"checkpoint\": {\"before_restart_s\": 3601}}",
     "checkpoint.before_restart_s"},
    {"{\"name\": \"n\", \"checkpoint\": {\"before_restart_s\": \"30\"}}",
     "checkpoint.before_restart_s"},
    {"{\"name\": \"n\", \"checkpoint\": {\"store\": \"s3://b\"}}", "checkpoint.store"},
    {"{\"name\": \"n\", \"checkpoint\": {\"store\": \"dir:relative\"}}", "checkpoint.store"},
    /* failure */
    {"{\"name\": \"n\", \"failure\": {\"retries\": 1}}", "failure.retries"},
    {"{\"name\": \"n\", \"failure\": {\"max_restarts\": -1}}", "failure.max_restarts"},
    {"{\"name\": \"n\", \"failure\": {\"hang_timeout_s\": 0}}", "failure.hang_timeout_s"},
    {"{\"name\": \"n\", \"failure\": {\"first_step_timeout_s\": -1}}",
     "failure.first_step_timeout_s"},
    {"{\"name\": \"n\", \"failure\": {\"first_step_timeout_s\": 86401}}",
     "failure.first_step_timeout_s"},
    {"{\"name\": \"n\", \"failure\": {\"first_step_timeout_s\": \"1m\"}}",
     "failure.first_step_timeout_s"},
    {"{\"name\": \"n\", \"failure\": {\"stop_on_disconnect_s\": -0.5}}",
     "failure.stop_on_disconnect_s"},
    {"{\"name\": \"n\", \"failure\": {\"stop_on_disconnect_s\": 86400.5}}",
     "failure.stop_on_disconnect_s"},
    {"{\"name\": \"n\", \"failure\": {\"stop_on_disconnect_s\": \"30s\"}}",
     "failure.stop_on_disconnect_s"},
    {"{\"name\": \"n\", \"failure\": {\"allow_shrink_dp\": 1}}", "failure.allow_shrink_dp"},
    {"{\"name\": \"n\", \"parallel\": \"auto\", \"failure\": {\"allow_shrink_dp\": true}}",
     "failure.allow_shrink_dp"},
    {"{\"name\": \"n\", \"command\": [\"x\"], \"ranks\": 2, \"failure\": {\"allow_shrink_dp\": "
     "true}}",
     "failure.allow_shrink_dp"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": \"replace\"}}", "failure.straggler"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"k\": 1}}}", "failure.straggler.k"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"policy\": \"kill\"}}}",
     "failure.straggler.policy"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"threshold\": 0}}}",
     "failure.straggler.threshold"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"windows\": 0}}}",
     "failure.straggler.windows"},
    /* debug */
    {"{\"name\": \"n\", \"debug\": {\"slow\": 1}}", "debug.slow"},
    {"{\"name\": \"n\", \"debug\": {\"slow_rank\": -2}}", "debug.slow_rank"},
    {"{\"name\": \"n\", \"debug\": {\"slow_factor\": 0.5}}", "debug.slow_factor"},
    {"{\"name\": \"n\", \"debug\": {\"crash_at_step\": -1}}", "debug.crash_at_step"},
    {"{\"name\": \"n\", \"debug\": {\"slow_node\": \"\"}}", "debug.slow_node"},
    {"{\"name\": \"n\", \"debug\": {\"slow_node\": 3}}", "debug.slow_node"},
    {"{\"name\": \"n\", \"debug\": {\"block_ms\": -1}}", "debug.block_ms"},
    {"{\"name\": \"n\", \"debug\": {\"block_ms\": 20000}}", "debug.block_ms"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"window_steps\": 0}}}",
     "failure.straggler.window_steps"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"max_replacements\": -1}}}",
     "failure.straggler.max_replacements"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"persist_s\": -1}}}",
     "failure.straggler.persist_s"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"persist_s\": 86401}}}",
     "failure.straggler.persist_s"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"persist_s\": \"10\"}}}",
     "failure.straggler.persist_s"},
    {"{\"name\": \"n\", \"failure\": {\"straggler\": {\"threshold\": 101}}}",
     "failure.straggler.threshold"},
};

static void test_bad_specs_name_their_field(void **state)
{
	for (size_t i = 0; i < YARD_ARRAY_LEN(bad_specs); i++) {
		const struct bad_spec *b = &bad_specs[i];
		struct jobspec spec;
		struct yard_err err = {0};
		char want[128];
		json_t *v = load(b->json);
		int rc = jobspec_parse(v, &spec, &err);
		json_decref(v);
		if (rc != YARD_EINVAL)
			fail_msg("bad spec #%zu accepted (rc %d): %s", i, rc, b->json);
		/* The message starts with the field path and ": " (the API's "field"). */
		snprintf(want, sizeof want, "%s: ", b->field);
		if (strncmp(err.msg, want, strlen(want)) != 0)
			fail_msg(
			    "bad spec #%zu: error does not start with \"%s\": \"%s\"\n  spec: %s",
			    i, want, err.msg, b->json);
		/* and nothing is left to free */
		assert_int_equal(spec.argc, 0);
		assert_int_equal(spec.envc, 0);
		assert_null(spec.argv[0]);
		assert_null(spec.env[0]);
	}
}

static void test_messages_say_what_is_wrong(void **state)
{
	struct jobspec spec;
	struct yard_err err = {0};
	json_t *v = load("{\"name\": \"n\", \"parallel\": {\"tp\": 3}}");
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "parallel.tp: 3 does not divide model.d_ff (256)");
	json_decref(v);

	v = load("{\"name\": \"n\", \"parallel\": {\"dp\": 2, \"tp\": 5}}");
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "parallel.tp: 5 does not divide model.d_ff (256)");
	json_decref(v);

	v = load("{\"name\": \"n\", \"train\": {\"optimizer\": \"adam\"}}");
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "train.optimizer: \"adam\" is not one of \"sgd\", \"adamw\"");
	json_decref(v);

	v = load("{\"name\": \"n\", \"train\": {\"lr\": 0}}");
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "train.lr: 0 is out of range (0, 10]");
	json_decref(v);

	/* a failure after env and command were allocated still frees them */
	v = load("{\"name\": \"n\", \"command\": [\"a\", \"b\"], \"ranks\": 1,"
	         " \"env\": {\"A\": \"1\", \"B\": \"2\"}, \"debug\": {\"crash_rank\": 3}}");
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "world size 1"));
	assert_int_equal(spec.argc, 0);
	assert_int_equal(spec.envc, 0);
	json_decref(v);
}

static void test_limits_on_lists(void **state)
{
	struct jobspec spec;
	struct yard_err err = {0};
	json_t *v = json_pack("{s:s,s:i,s:[]}", "name", "n", "ranks", 1, "command");
	json_t *argv = json_object_get(v, "command");
	for (int i = 0; i < JOBSPEC_ARGV_MAX; i++)
		json_array_append_new(argv, json_string("x"));
	assert_int_equal(jobspec_parse(v, &spec, &err), 0);
	assert_int_equal(spec.argc, JOBSPEC_ARGV_MAX);
	assert_null(spec.argv[JOBSPEC_ARGV_MAX]);
	jobspec_free(&spec);
	json_array_append_new(argv, json_string("x"));
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "command: 65 arguments"));
	json_decref(v);

	v = json_pack("{s:s,s:{}}", "name", "n", "env");
	json_t *env = json_object_get(v, "env");
	char key[16];
	for (int i = 0; i < JOBSPEC_ENV_MAX; i++) {
		snprintf(key, sizeof key, "V%d", i);
		json_object_set_new(env, key, json_string("1"));
	}
	assert_int_equal(jobspec_parse(v, &spec, &err), 0);
	assert_int_equal(spec.envc, JOBSPEC_ENV_MAX);
	assert_string_equal(spec.env[JOBSPEC_ENV_MAX - 1], "V63=1");
	jobspec_free(&spec);
	json_object_set_new(env, "ONE_TOO_MANY", json_string("1"));
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "env: 65 variables"));
	json_decref(v);

	/* a command argument and an env value are bounded at 4096 bytes, env names at 128 */
	char big[4098];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	v = json_pack("{s:s,s:i,s:[s,s]}", "name", "n", "ranks", 1, "command", "echo", big);
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "command[1]: longer than 4096 bytes");
	json_decref(v);
	v = json_pack("{s:s,s:{s:s}}", "name", "n", "env", "BIG", big);
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "env.BIG: longer than 4096 bytes");
	json_decref(v);
	big[129] = '\0';
	v = json_pack("{s:s,s:{s:s}}", "name", "n", "env", big, "x");
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "not a valid variable name"));
	json_decref(v);
	big[128] = '\0';
	v = json_pack("{s:s,s:{s:s}}", "name", "n", "env", big, "x");
	assert_int_equal(jobspec_parse(v, &spec, &err), 0);
	jobspec_free(&spec);
	json_decref(v);

	/* strings with NUL bytes (jansson only builds them on request) */
	v = json_pack("{s:o,s:{s:o}}", "name", json_stringn("n\0x", 3), "env", "A",
	              json_stringn("a\0b", 3));
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "name: contains a NUL byte");
	json_object_set_new(v, "name", json_string("n"));
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "env.A: contains a NUL byte");
	json_decref(v);
	v = json_pack("{s:s,s:{s:s}}", "name", "n", "checkpoint", "store", "");
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "checkpoint.store: must not be empty");
	json_decref(v);
	v = json_pack("{s:s,s:{s:i}}", "name", "n", "checkpoint", "store", 3);
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "checkpoint.store: must be a string");
	json_decref(v);
	v = json_pack("{s:s,s:i}", "name", "n", "checkpoint", 3);
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "checkpoint: must be an object");
	json_decref(v);

	/* strings: the dataset path is bounded by JOBSPEC_PATH_MAX */
	char path[JOBSPEC_PATH_MAX + 2];
	memset(path, 'p', sizeof path - 1);
	path[0] = '/';
	path[sizeof path - 1] = '\0';
	v = json_pack("{s:s,s:{s:s}}", "name", "n", "train", "dataset", path);
	assert_int_equal(jobspec_parse(v, &spec, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "train.dataset: longer than 255 bytes"));
	json_decref(v);
	path[JOBSPEC_PATH_MAX] = '\0';
	v = json_pack("{s:s,s:{s:s}}", "name", "n", "train", "dataset", path);
	assert_int_equal(jobspec_parse(v, &spec, &err), 0);
	assert_string_equal(spec.train.dataset, path);
	json_decref(v);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_load_file_names_file_and_field(void **state)
{
	char dir[] = "/tmp/test_jobspec.XXXXXX", path[128];
	struct jobspec spec;
	struct yard_err err = {0};
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/job.json", dir);

	write_file(path, "{\"name\": \"f\", \"parallel\": {\"dp\": 2, \"tp\": 2}}\n");
	assert_int_equal(jobspec_load_file(path, &spec, &err), 0);
	assert_int_equal(spec.ranks, 4);
	jobspec_free(&spec);

	write_file(path, "{\"name\": \"f\", \"parallel\": {\"tp\": 3}}");
	assert_int_equal(jobspec_load_file(path, &spec, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, ": parallel.tp: 3 does not divide"));

	write_file(path, "{\"name\": \"f\",}");
	assert_int_equal(jobspec_load_file(path, &spec, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "malformed JSON at line 1"));

	char deep[100];
	memset(deep, '[', 40);
	memset(deep + 40, ']', 40);
	deep[80] = '\0';
	write_file(path, deep);
	assert_int_equal(jobspec_load_file(path, &spec, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "deeper than 32"));

	unlink(path);
	assert_int_equal(jobspec_load_file(path, &spec, &err), YARD_EIO);
	assert_non_null(strstr(err.msg, "cannot open"));
	rmdir(dir);
}

static void test_examples_are_valid(void **state)
{
	static const char *const files[] = {"examples/hybrid.json", "examples/single.json",
	                                    "examples/command.json"};
	const char *top = getenv("top_srcdir");
	char path[1024];
	for (size_t i = 0; i < YARD_ARRAY_LEN(files); i++) {
		struct jobspec spec;
		struct yard_err err = {0};
		snprintf(path, sizeof path, "%s/%s", top ? top : ".", files[i]);
		if (jobspec_load_file(path, &spec, &err) != 0)
			fail_msg("%s", err.msg);
		if (i == 0) {
			assert_int_equal(spec.parallel.dp, 2);
			assert_int_equal(spec.parallel.tp, 2);
			assert_int_equal(spec.parallel.pp, 2);
			assert_int_equal(spec.parallel.schedule, JOBSPEC_1F1B);
			assert_int_equal(spec.ranks, 8);
		}
		if (i == 2)
			assert_int_equal(spec.is_command, 1);
		jobspec_free(&spec);
	}
}

static void test_rank_layout_is_megatron_order(void **state)
{
	struct jobspec_parallel p = {.dp = 2, .tp = 2, .pp = 2};
	int seen[8] = {0};
	/* tp innermost: ranks 0,1 are one TP group of stage 0 of replica 0 */
	assert_int_equal(jobspec_rank(&p, 0, 0, 1), 1);
	assert_int_equal(jobspec_rank(&p, 0, 1, 0), 2);
	assert_int_equal(jobspec_rank(&p, 1, 0, 0), 4);
	assert_int_equal(jobspec_rank(&p, 1, 1, 1), 7);
	for (int d = 0; d < 2; d++)
		for (int s = 0; s < 2; s++)
			for (int t = 0; t < 2; t++) {
				int r = jobspec_rank(&p, d, s, t), d2, s2, t2;
				assert_in_range(r, 0, 7);
				seen[r]++;
				jobspec_coords(&p, r, &d2, &s2, &t2);
				assert_int_equal(d2, d);
				assert_int_equal(s2, s);
				assert_int_equal(t2, t);
			}
	for (int r = 0; r < 8; r++)
		assert_int_equal(seen[r], 1);
	/* an asymmetric layout catches swapped strides */
	struct jobspec_parallel q = {.dp = 3, .tp = 4, .pp = 5};
	for (int r = 0; r < 60; r++) {
		int d, s, t;
		jobspec_coords(&q, r, &d, &s, &t);
		assert_in_range(d, 0, 2);
		assert_in_range(s, 0, 4);
		assert_in_range(t, 0, 3);
		assert_int_equal(jobspec_rank(&q, d, s, t), r);
	}
	assert_int_equal(jobspec_rank(&q, 0, 1, 0), 4);
	assert_int_equal(jobspec_rank(&q, 1, 0, 0), 20);
}

/* The spec a shrunk job's ranks run: dp and ranks change, nothing else; a dp the trainer
 * could not run (batch not divisible, a debug rank outside the world) or a job that did not
 * allow shrinking is refused naming why. */
static void test_with_dp_shrinks_only_what_the_trainer_can_run(void **state)
{
	struct jobspec js;
	struct yard_err err = {0};
	json_t *in = load("{\"name\": \"s\", \"train\": {\"batch_size\": 24},"
	                  " \"parallel\": {\"dp\": 6, \"tp\": 1, \"pp\": 1, \"micro_batches\": 2},"
	                  " \"failure\": {\"allow_shrink_dp\": true}}");
	assert_int_equal(jobspec_parse(in, &js, &err), 0);
	json_t *spec = jobspec_to_json(&js);
	jobspec_free(&js);
	json_decref(in);
	static const struct {
		int dp, ok;
		const char *why;
	} cases[] = {
	    {6, 1, NULL},
	    {4, 1, NULL}, /* 24 = 4 x 2 x 3 */
	    {3, 1, NULL},
	    {5, 0, "train.batch_size: 24 is not divisible by parallel.dp × micro_batches (5 × 2)"},
	    {7, 0, "dp: 7 is outside 1..parallel.dp (6)"},
	    {0, 0, "dp: 0 is outside 1..parallel.dp (6)"},
	    {1, 1, NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct yard_err e = {0};
		json_t *out = jobspec_with_dp(spec, cases[i].dp, &e);
		if (cases[i].ok) {
			if (out == NULL)
				fail_msg("dp %d refused: %s", cases[i].dp, e.msg);
			json_t *p = json_object_get(out, "parallel");
			assert_int_equal(json_integer_value(json_object_get(p, "dp")), cases[i].dp);
			assert_int_equal(json_integer_value(json_object_get(out, "ranks")),
			                 cases[i].dp);
			assert_int_equal(json_integer_value(json_object_get(
			                     json_object_get(out, "train"), "batch_size")),
			                 24);
			json_decref(out);
		} else if (out != NULL || strstr(e.msg, cases[i].why) == NULL) {
			fail_msg("dp %d: want refusal '%s', got %s", cases[i].dp, cases[i].why,
			         out ? "a spec" : e.msg);
		}
	}
	/* a debug rank outside the smaller world */
	json_object_set_new(json_object_get(spec, "debug"), "crash_rank", json_integer(5));
	json_t *out = jobspec_with_dp(spec, 3, &err);
	assert_null(out);
	assert_non_null(strstr(err.msg, "debug.crash_rank: 5 is not a rank of this job"));
	/* shrinking not allowed */
	json_object_set_new(json_object_get(spec, "debug"), "crash_rank", json_integer(-1));
	json_object_set_new(json_object_get(spec, "failure"), "allow_shrink_dp", json_false());
	out = jobspec_with_dp(spec, 3, &err);
	assert_null(out);
	assert_non_null(strstr(err.msg, "failure.allow_shrink_dp is false"));
	json_decref(spec);
	/* command jobs have no data-parallel degree */
	json_t *cmd = load("{\"name\": \"c\", \"command\": [\"true\"], \"ranks\": 2}");
	out = jobspec_with_dp(cmd, 1, &err);
	assert_null(out);
	assert_non_null(strstr(err.msg, "only a trainer job with a fixed parallel layout"));
	json_decref(cmd);
}

static void test_schedule_names(void **state)
{
	assert_string_equal(jobspec_schedule_name(JOBSPEC_GPIPE), "gpipe");
	assert_string_equal(jobspec_schedule_name(JOBSPEC_1F1B), "1f1b");
	assert_string_equal(jobspec_schedule_name(JOBSPEC_INTERLEAVED), "interleaved");
	assert_string_equal(jobspec_schedule_name((enum jobspec_schedule)42), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults_are_a_small_valid_trainer_job),
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_time_limit_only_when_set),
	    cmocka_unit_test(test_layout_fields_and_ranks),
	    cmocka_unit_test(test_bad_specs_name_their_field),
	    cmocka_unit_test(test_messages_say_what_is_wrong),
	    cmocka_unit_test(test_limits_on_lists),
	    cmocka_unit_test(test_load_file_names_file_and_field),
	    cmocka_unit_test(test_examples_are_valid),
	    cmocka_unit_test(test_rank_layout_is_megatron_order),
	    cmocka_unit_test(test_schedule_names),
	    cmocka_unit_test(test_with_dp_shrinks_only_what_the_trainer_can_run),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
