/* test_fsm_ckpt.c: checkpoints of the controller store in the replicated state machine
 * (jobs/fsm_ckpt.c): a checkpoint is complete (and restorable) only when every rank's shard
 * is stored, chunked and inline uploads, keep-N pruning with the blobs' bytes, the per-job
 * quota (507 naming the job and the quota), only the node running a rank may upload it,
 * stale generations, bad input that changes nothing, restore_step on a placement, the
 * cleanup when a job ends, and a deleted job's checkpoints going with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/sql_count.h"

#include "common/base64.h"
#include "jobs/fsm.h"

static const int64_t T0 = 1763740000000LL;

static int apply_json(struct fsm *f, const char *op, json_t *args, const char *actor,
                      const char *role, const json_t **result)
{
	size_t len;
	char *cmd = fsm_command_encode(op, args, NULL, T0, actor, role, &len);
	assert_non_null(cmd);
	const json_t *r = fsm_apply(f, cmd, len);
	free(cmd);
	if (result)
		*result = r;
	return (int)json_integer_value(json_object_get(r, "status"));
}

static int apply(struct fsm *f, const char *op, const char *args, const char *actor,
                 const char *role, const json_t **result)
{
	json_t *a = json_loads(args, 0, NULL);
	assert_non_null(a);
	return apply_json(f, op, a, actor, role, result);
}

static const char *error_of(const json_t *r)
{
	const char *e = json_string_value(json_object_get(r, "error"));
	return e ? e : "";
}

static void digest(struct fsm *f, char hex[SHA256_HEX_LEN + 1])
{
	struct yard_err err = {0};
	assert_int_equal(fsm_digest(f, hex, &err), 0);
}

static unsigned char *bytes_of(size_t len, unsigned seed)
{
	unsigned char *b = malloc(len);
	for (size_t i = 0; i < len; i++)
		b[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 9)) & 0xff);
	return b;
}

/* A fresh state machine with node-a and node-b, one CPU device each. */
static void two_nodes(struct fsm *f)
{
	struct yard_err err = {0};
	char args[512];
	assert_int_equal(fsm_init(f, &err), 0);
	for (int n = 0; n < 2; n++) {
		snprintf(args, sizeof args,
		         "{\"name\":\"node-%c\",\"host\":\"10.0.0.%d\",\"port_base\":29500,"
		         "\"devices\":[{\"index\":0,\"kind\":\"cpu\"}],\"token_hash\":\"%064d\"}",
		         'a' + n, n + 1, n);
		assert_int_equal(apply(f, "node.register", args, "agent", "agent", NULL), 200);
	}
}

/* Two nodes; job j-000001 with 2 ranks (keep 2) placed rank 0 on node-a, rank 1 on node-b. */
static void setup_job(struct fsm *f, int keep)
{
	char args[512];
	two_nodes(f);
	snprintf(args, sizeof args,
	         "{\"name\":\"t\",\"spec\":{\"name\":\"t\",\"command\":[\"x\"],\"ranks\":2,"
	         "\"checkpoint\":{\"every_steps\":10,\"keep\":%d,\"store\":\"controller\"}}}",
	         keep);
	assert_int_equal(apply(f, "job.submit", args, "alice", "user", NULL), 201);
	assert_int_equal(apply(f, "job.assign",
	                       "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":[{\"node\":"
	                       "\"node-a\",\"device\":0},{\"node\":\"node-b\",\"device\":0}]}",
	                       "scheduler", "admin", NULL),
	                 200);
}

static json_t *shard_args(int64_t step, int rank, int64_t generation, const unsigned char *data,
                          size_t len, int inline_data)
{
	char sha[SHA256_HEX_LEN + 1];
	sha256_hex(data, len, sha);
	json_t *a = json_pack("{s:s,s:I,s:i,s:I,s:I,s:s}", "job", "j-000001", "step",
	                      (json_int_t)step, "rank", rank, "generation", (json_int_t)generation,
	                      "size", (json_int_t)len, "sha256", sha);
	if (inline_data) {
		char *text = malloc(base64_encoded_len(len) + 1);
		base64_encode(data, len, text);
		json_object_set_new(a, "data", json_string(text));
		free(text);
	}
	return a;
}

static const char *node_of(int rank)
{
	return rank == 0 ? "node-a" : "node-b";
}

/* Uploads a small shard in one command (declare with data). */
static int upload_inline(struct fsm *f, int64_t step, int rank, size_t len, const json_t **r)
{
	unsigned char *b = bytes_of(len, (unsigned)(step * 10 + rank));
	int st = apply_json(f, "checkpoint.shard", shard_args(step, rank, 1, b, len, 1),
	                    node_of(rank), "node", r);
	free(b);
	return st;
}

static int64_t complete_count(struct fsm *f)
{
	struct yard_err err = {0};
	json_t *list = fsm_checkpoints_list(f, "j-000001", &err);
	assert_non_null(list);
	int64_t n = 0;
	size_t i;
	json_t *c;
	json_array_foreach(list, i, c) n += json_is_true(json_object_get(c, "complete"));
	json_decref(list);
	return n;
}

static void test_incomplete_is_not_restorable(void **state)
{
	(void)state;
	struct fsm f;
	const json_t *r;
	setup_job(&f, 2);
	assert_int_equal(upload_inline(&f, 10, 0, 1000, &r), 201);
	assert_true(json_is_true(json_object_get(json_object_get(r, "body"), "stored")));
	/* one of two shards: listed, not complete, not served, not restorable */
	assert_int_equal(fsm_checkpoint_newest(&f, "j-000001"), -1);
	assert_int_equal(complete_count(&f), 0);
	int64_t size;
	char sha[SHA256_HEX_LEN + 1];
	struct yard_err err = {0};
	assert_int_equal(fsm_checkpoint_shard_info(&f, "j-000001", 10, 0, &size, sha, &err),
	                 YARD_ENOTFOUND);
	assert_int_equal(
	    apply(&f, "job.restart",
	          "{\"id\":\"j-000001\",\"generation\":1,\"reason\":\"x\",\"max_restarts\":3}",
	          "scheduler", "admin", NULL),
	    200);
	assert_int_equal(apply(&f, "job.assign",
	                       "{\"id\":\"j-000001\",\"generation\":2,\"restore_step\":10,"
	                       "\"ranks\":[{\"node\":\"node-a\",\"device\":0},"
	                       "{\"node\":\"node-b\",\"device\":0}]}",
	                       "scheduler", "admin", &r),
	                 409);
	assert_non_null(strstr(error_of(r), "no complete checkpoint at step 10"));
	/* placed without a restore step: the incomplete checkpoint of generation 1 is gone */
	assert_int_equal(apply(&f, "job.assign",
	                       "{\"id\":\"j-000001\",\"generation\":2,\"restore_step\":-1,"
	                       "\"ranks\":[{\"node\":\"node-a\",\"device\":0},"
	                       "{\"node\":\"node-b\",\"device\":0}]}",
	                       "scheduler", "admin", NULL),
	                 200);
	json_t *list = fsm_checkpoints_list(&f, "j-000001", &err);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);
	/* a shard of generation 1 is now stale */
	unsigned char *b = bytes_of(100, 1);
	assert_int_equal(apply_json(&f, "checkpoint.shard", shard_args(20, 0, 1, b, 100, 1),
	                            "node-a", "node", &r),
	                 409);
	assert_non_null(strstr(error_of(r), "generation 1 is stale"));
	free(b);
	fsm_close(&f);
}

static void test_complete_chunked_and_restore(void **state)
{
	(void)state;
	struct fsm f;
	const json_t *r;
	setup_job(&f, 2);
	/* rank 0 inline; rank 1 in three chunks, out of order, with a repeated chunk */
	assert_int_equal(upload_inline(&f, 10, 0, 5000, &r), 201);
	size_t len = 2 * FSM_CHUNK_MAX + 77;
	unsigned char *big = bytes_of(len, 9);
	assert_int_equal(apply_json(&f, "checkpoint.shard", shard_args(10, 1, 1, big, len, 0),
	                            "node-b", "node", &r),
	                 201);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "body"), "chunks")),
	                 3);
	assert_int_equal(apply(&f, "checkpoint.commit",
	                       "{\"job\":\"j-000001\",\"step\":10,\"rank\":1}", "node-b", "node",
	                       &r),
	                 409); /* chunks missing */
	assert_non_null(strstr(error_of(r), "3 of 3 chunks missing"));
	int order[] = {2, 0, 0, 1};
	for (int k = 0; k < 4; k++) {
		int64_t i = order[k];
		size_t n = i == 2 ? 77 : FSM_CHUNK_MAX;
		char *text = malloc(base64_encoded_len(n) + 1);
		base64_encode(big + i * FSM_CHUNK_MAX, n, text);
		json_t *a = json_pack("{s:s,s:i,s:i,s:I,s:s}", "job", "j-000001", "step", 10,
		                      "rank", 1, "index", (json_int_t)i, "data", text);
		free(text);
		assert_int_equal(apply_json(&f, "checkpoint.chunk", a, "node-b", "node", NULL),
		                 200);
	}
	assert_int_equal(fsm_checkpoint_newest(&f, "j-000001"), -1);
	assert_int_equal(apply(&f, "checkpoint.commit",
	                       "{\"job\":\"j-000001\",\"step\":10,\"rank\":1}", "node-b", "node",
	                       &r),
	                 200);
	assert_int_equal(fsm_checkpoint_newest(&f, "j-000001"), 10);
	/* the bytes come back as uploaded */
	unsigned char *data = NULL;
	size_t got = 0;
	int64_t size = 0;
	char sha[SHA256_HEX_LEN + 1], want[SHA256_HEX_LEN + 1];
	struct yard_err err = {0};
	assert_int_equal(fsm_checkpoint_shard_info(&f, "j-000001", 10, 1, &size, sha, &err), 0);
	assert_int_equal(fsm_checkpoint_shard_read(&f, "j-000001", 10, 1, &data, &got, &err), 0);
	sha256_hex(big, len, want);
	assert_int_equal(got, len);
	assert_int_equal((int64_t)len, size);
	assert_string_equal(sha, want);
	assert_memory_equal(data, big, len);
	free(data);
	free(big);
	/* the event */
	json_t *ev = fsm_events_list(&f, 0, 100, "j-000001", &err);
	int seen = 0;
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(ev, "events"), i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "type")), "checkpoint.complete") ==
		    0) {
			seen++;
			assert_non_null(strstr(json_string_value(json_object_get(e, "message")),
			                       "at step 10 complete: 2 shard(s)"));
		}
	}
	assert_int_equal(seen, 1);
	json_decref(ev);
	/* a shard of a step at or before the complete one is not wanted */
	assert_int_equal(upload_inline(&f, 10, 0, 5000, &r), 410);
	/* the restart restores step 10, and the placement records it for generation 2 */
	assert_int_equal(
	    apply(&f, "job.restart",
	          "{\"id\":\"j-000001\",\"generation\":1,\"reason\":\"x\",\"max_restarts\":3}",
	          "scheduler", "admin", NULL),
	    200);
	assert_int_equal(apply(&f, "job.assign",
	                       "{\"id\":\"j-000001\",\"generation\":2,\"restore_step\":10,"
	                       "\"ranks\":[{\"node\":\"node-b\",\"device\":0},"
	                       "{\"node\":\"node-a\",\"device\":0}]}",
	                       "scheduler", "admin", NULL),
	                 200);
	assert_int_equal(fsm_checkpoint_restore_step(&f, "j-000001", 2), 10);
	assert_int_equal(fsm_checkpoint_restore_step(&f, "j-000001", 1), -1);
	fsm_close(&f);
}

static void test_keep_n_deletes_old_bytes(void **state)
{
	(void)state;
	struct fsm f;
	const json_t *r;
	setup_job(&f, 2);
	/* an incomplete step 5 (rank 0 only), then steps 10, 20, 30 complete */
	assert_int_equal(upload_inline(&f, 5, 0, 3000, &r), 201);
	for (int64_t step = 10; step <= 30; step += 10)
		for (int rank = 0; rank < 2; rank++)
			assert_int_equal(upload_inline(&f, step, rank, 3000, &r), 201);
	struct yard_err err = {0};
	json_t *list = fsm_checkpoints_list(&f, "j-000001", &err);
	assert_int_equal(json_array_size(list), 2); /* 20 and 30; 5 and 10 deleted */
	assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "step")), 20);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 1), "step")), 30);
	json_t *c = json_array_get(list, 1);
	assert_int_equal(json_integer_value(json_object_get(c, "shards")), 2);
	assert_int_equal(json_integer_value(json_object_get(c, "bytes")), 6000);
	assert_true(json_is_true(json_object_get(c, "complete")));
	assert_true(json_integer_value(json_object_get(c, "ts_ms")) > 0);
	json_decref(list);
	unsigned char *data = NULL;
	size_t len = 0;
	assert_int_equal(fsm_checkpoint_shard_read(&f, "j-000001", 10, 0, &data, &len, &err),
	                 YARD_ENOTFOUND);
	assert_int_equal(fsm_checkpoint_shard_read(&f, "j-000001", 5, 0, &data, &len, &err),
	                 YARD_ENOTFOUND);
	assert_int_equal(fsm_checkpoint_shard_read(&f, "j-000001", 20, 1, &data, &len, &err), 0);
	free(data);
	/* the freed bytes count no more: the quota sees 4 shards of 3000 */
	assert_int_equal(apply(&f, "config.set",
	                       "{\"key\":\"checkpoint_job_max_bytes\",\"value\":15000}", "admin",
	                       "admin", NULL),
	                 200);
	assert_int_equal(upload_inline(&f, 40, 0, 3000, &r), 201);
	fsm_close(&f);
}

static void test_quota(void **state)
{
	(void)state;
	struct fsm f;
	const json_t *r;
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	setup_job(&f, 0);
	assert_int_equal(apply(&f, "config.set",
	                       "{\"key\":\"checkpoint_job_max_bytes\",\"value\":5000}", "admin",
	                       "admin", NULL),
	                 200);
	assert_int_equal(upload_inline(&f, 10, 0, 3000, &r), 201);
	digest(&f, before);
	assert_int_equal(upload_inline(&f, 10, 1, 3000, &r), 507);
	const char *e = error_of(r);
	assert_non_null(strstr(e, "job j-000001"));
	assert_non_null(strstr(e, "3000 of 5000 bytes in use"));
	assert_non_null(strstr(e, "checkpoint_job_max_bytes"));
	assert_string_equal(json_string_value(json_object_get(r, "field")), "size");
	digest(&f, after);
	assert_string_equal(before, after);
	fsm_close(&f);
}

static void test_bad_input_changes_nothing(void **state)
{
	(void)state;
	struct fsm f;
	const json_t *r;
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	setup_job(&f, 2);
	char sha[SHA256_HEX_LEN + 1];
	memset(sha, 'a', SHA256_HEX_LEN);
	sha[SHA256_HEX_LEN] = '\0';
	static const struct {
		const char *op, *args, *actor, *role;
		int status;
		const char *needle;
	} cases[] = {
	    {"checkpoint.shard", "{\"job\":\"j-000001\",\"step\":10,\"rank\":0}", "node-a", "node",
	     400, "generation"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":0,\"rank\":0,\"generation\":1,\"size\":1,"
	     "\"sha256\":\"SHA\"}",
	     "node-a", "node", 400, "step"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":-1,\"generation\":1,\"size\":1,"
	     "\"sha256\":\"SHA\"}",
	     "node-a", "node", 400, "rank"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":2,\"generation\":1,\"size\":1,"
	     "\"sha256\":\"SHA\"}",
	     "node-a", "node", 400, "has 2 ranks, no rank 2"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":0,\"generation\":1,\"size\":1,"
	     "\"sha256\":\"xyz\"}",
	     "node-a", "node", 400, "sha256"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":0,\"generation\":1,\"size\":1,"
	     "\"sha256\":\"SHA\",\"color\":1}",
	     "node-a", "node", 400, "color"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000009\",\"step\":10,\"rank\":0,\"generation\":1,\"size\":1,"
	     "\"sha256\":\"SHA\"}",
	     "node-a", "node", 404, "no job j-000009"},
	    /* rank 1 runs on node-b: node-a may not upload it, nor may a person */
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":1,\"generation\":1,\"size\":1,"
	     "\"sha256\":\"SHA\"}",
	     "node-a", "node", 403, "does not run rank 1 of job j-000001"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":0,\"generation\":1,\"size\":1,"
	     "\"sha256\":\"SHA\"}",
	     "alice", "user", 403, "does not run rank 0"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":0,\"generation\":1,\"size\":2000000,"
	     "\"sha256\":\"SHA\",\"data\":\"AAAA\"}",
	     "node-a", "node", 400, "at most one chunk"},
	    /* inline bytes that do not match the declaration */
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":0,\"generation\":1,\"size\":3,"
	     "\"sha256\":\"SHA\",\"data\":\"AAAA\"}",
	     "node-a", "node", 422, "hash to sha256"},
	    {"checkpoint.shard",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":0,\"generation\":1,\"size\":3,"
	     "\"sha256\":\"SHA\",\"data\":\"!!!!\"}",
	     "node-a", "node", 400, "not base64"},
	    {"checkpoint.chunk",
	     "{\"job\":\"j-000001\",\"step\":10,\"rank\":0,\"index\":0,\"data\":\"AAAA\"}",
	     "node-a", "node", 404, "no declared shard"},
	    {"checkpoint.commit", "{\"job\":\"j-000001\",\"step\":10,\"rank\":0}", "node-a", "node",
	     404, "no declared shard"},
	    {"job.assign",
	     "{\"id\":\"j-000001\",\"generation\":2,\"restore_step\":-2,\"ranks\":[]}", "scheduler",
	     "admin", 400, "restore_step"},
	};
	digest(&f, before);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char args[600];
		const char *p = strstr(cases[i].args, "SHA");
		if (p != NULL)
			snprintf(args, sizeof args, "%.*s%s%s", (int)(p - cases[i].args),
			         cases[i].args, sha, p + 3);
		else
			snprintf(args, sizeof args, "%s", cases[i].args);
		int st = apply(&f, cases[i].op, args, cases[i].actor, cases[i].role, &r);
		if (st != cases[i].status || strstr(error_of(r), cases[i].needle) == NULL)
			fail_msg("case %zu (%s %s): status %d, error '%s'; want %d with '%s'", i,
			         cases[i].op, args, st, error_of(r), cases[i].status,
			         cases[i].needle);
	}
	digest(&f, after);
	assert_string_equal(before, after);
	fsm_close(&f);
}

static void test_job_end_drops_incomplete(void **state)
{
	(void)state;
	struct fsm f;
	const json_t *r;
	setup_job(&f, 2);
	for (int rank = 0; rank < 2; rank++)
		assert_int_equal(upload_inline(&f, 10, rank, 1000, &r), 201);
	assert_int_equal(upload_inline(&f, 20, 0, 1000, &r), 201);
	assert_int_equal(apply(&f, "job.finish",
	                       "{\"id\":\"j-000001\",\"generation\":1,\"state\":\"succeeded\","
	                       "\"reason\":\"done\"}",
	                       "scheduler", "admin", &r),
	                 200);
	struct yard_err err = {0};
	json_t *list = fsm_checkpoints_list(&f, "j-000001", &err);
	assert_int_equal(json_array_size(list), 1); /* the complete step 10 stays */
	assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "step")), 10);
	json_decref(list);
	assert_int_equal(upload_inline(&f, 20, 1, 1000, &r), 410);
	assert_non_null(strstr(error_of(r), "job j-000001 is succeeded"));
	fsm_close(&f);
}

/* 70 complete checkpoints (more than one round of deletion) and an incomplete one. */
static void delete_setup(struct fsm *f)
{
	const json_t *r;
	setup_job(f, 0);
	for (int64_t step = 1; step <= 70; step++)
		for (int rank = 0; rank < 2; rank++)
			assert_int_equal(upload_inline(f, step, rank, 100, &r), 201);
	assert_int_equal(upload_inline(f, 71, 0, 100, &r), 201);
}

static int finish_job(struct fsm *f)
{
	return apply(f, "job.finish",
	             "{\"id\":\"j-000001\",\"generation\":1,\"state\":\"succeeded\","
	             "\"reason\":\"done\"}",
	             "scheduler", "admin", NULL);
}

static int submit_another(struct fsm *f, const json_t **r)
{
	return apply(f, "job.submit",
	             "{\"name\":\"t\",\"spec\":{\"name\":\"t\",\"command\":[\"x\"]}}", "alice",
	             "user", r);
}

/* job.delete: only an ended job, only its owner (or an operator), and then its row, its slots,
 * every checkpoint and their bytes are gone, its events stay, and its id is not reused. */
static void test_job_delete_frees_checkpoints(void **state)
{
	(void)state;
	struct fsm f, g;
	const json_t *r;
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	delete_setup(&f);
	int64_t events = sql_count(f.db, "SELECT count(*) FROM events WHERE job = 'j-000001'");
	digest(&f, before);
	assert_int_equal(apply(&f, "job.delete", "{\"id\":\"j-000001\"}", "alice", "user", &r),
	                 409);
	assert_non_null(strstr(error_of(r), "job j-000001 is running"));
	assert_int_equal(apply(&f, "job.delete", "{\"id\":\"j-000009\"}", "alice", "user", &r),
	                 404);
	assert_int_equal(
	    apply(&f, "job.delete", "{\"id\":\"j-000001\",\"force\":true}", "alice", "user", &r),
	    400);
	digest(&f, after);
	assert_string_equal(before, after);
	assert_int_equal(finish_job(&f), 200);
	digest(&f, before);
	assert_int_equal(apply(&f, "job.delete", "{\"id\":\"j-000001\"}", "mallory", "user", &r),
	                 403);
	assert_non_null(strstr(error_of(r), "belongs to alice"));
	digest(&f, after);
	assert_string_equal(before, after);

	assert_int_equal(apply(&f, "job.delete", "{\"id\":\"j-000001\"}", "alice", "user", &r),
	                 200);
	const json_t *body = json_object_get(r, "body");
	assert_true(json_is_true(json_object_get(body, "deleted")));
	assert_int_equal(json_integer_value(json_object_get(body, "checkpoints")), 70);
	assert_int_equal(json_integer_value(json_object_get(body, "checkpoint_bytes")), 70 * 200);
	struct yard_err err = {0};
	json_t *job = fsm_job_get(&f, "j-000001", &err);
	assert_null(job);
	assert_int_equal(err.code, YARD_ENOTFOUND);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM jobs"), 0);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM assignments"), 0);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM checkpoints"), 0);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM checkpoint_shards"), 0);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM checkpoint_restores"), 0);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM blobs"), 0);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM blob_chunks"), 0);
	/* the history stays, and says what went */
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM events WHERE job = 'j-000001'"),
	                 events + 2);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM events WHERE type = 'job.deleted'"
	                                 " AND message LIKE '%70 checkpoints (14000 bytes)%'"),
	                 1);
	assert_int_equal(apply(&f, "job.delete", "{\"id\":\"j-000001\"}", "alice", "user", &r),
	                 404);
	assert_int_equal(submit_another(&f, &r), 201);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "id")),
	                    "j-000002");

	/* a replica applying the same commands ends with the same bytes */
	delete_setup(&g);
	assert_int_equal(finish_job(&g), 200);
	assert_int_equal(apply(&g, "job.delete", "{\"id\":\"j-000001\"}", "alice", "user", &r),
	                 200);
	assert_int_equal(submit_another(&g, &r), 201);
	digest(&f, before);
	digest(&g, after);
	assert_string_equal(before, after);
	fsm_close(&f);
	fsm_close(&g);
}

/* j-000001 succeeded with 70 complete checkpoints, j-000002 cancelled without any, j-000003
 * pending: the commands every replica of test_jobs_collect applies. */
static void collect_setup(struct fsm *f)
{
	const json_t *r;
	delete_setup(f);
	assert_int_equal(finish_job(f), 200);
	assert_int_equal(submit_another(f, &r), 201);
	assert_int_equal(apply(f, "job.cancel", "{\"id\":\"j-000002\"}", "alice", "user", &r), 200);
	assert_int_equal(submit_another(f, &r), 201);
}

static int collect(struct fsm *f, const char *args, const char *role, const json_t **r)
{
	return apply(f, "jobs.collect", args, "scheduler", role, r);
}

/* jobs.collect (job_retention_s): an ended job without a complete checkpoint goes once it
 * ended before the cut-off, rows and slots, its events stay; a job with a complete checkpoint,
 * an active one, a recent one and an unknown id are skipped; bad input and other roles change
 * nothing; replicas agree. */
static void test_jobs_collect(void **state)
{
	(void)state;
	struct fsm f, g;
	const json_t *r;
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	collect_setup(&f);
	/* what the leader proposes: only j-000002, and nothing that ended at the cut-off */
	json_t *ids = fsm_jobs_collectable(&f, T0 + 1, FSM_COLLECT_MAX);
	assert_non_null(ids);
	assert_int_equal(json_array_size(ids), 1);
	assert_string_equal(json_string_value(json_array_get(ids, 0)), "j-000002");
	json_decref(ids);
	ids = fsm_jobs_collectable(&f, T0, FSM_COLLECT_MAX);
	assert_int_equal(json_array_size(ids), 0);
	json_decref(ids);

	digest(&f, before);
	static const char *const bad[] = {
	    "{\"before_ms\":1763740000001}",
	    "{\"ids\":[\"j-000002\"]}",
	    "{\"before_ms\":1763740000001,\"ids\":\"j-000002\"}",
	    "{\"before_ms\":1763740000001,\"ids\":[7]}",
	    "{\"before_ms\":-1,\"ids\":[\"j-000002\"]}",
	    "{\"before_ms\":1763740000001,\"ids\":[\"j-000002\"],\"all\":true}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(collect(&f, bad[i], "admin", &r), 400);
	json_t *many = json_pack("{s:I,s:[]}", "before_ms", (json_int_t)(T0 + 1), "ids");
	for (int i = 0; i <= FSM_COLLECT_MAX; i++)
		json_array_append_new(json_object_get(many, "ids"), json_string("j-000002"));
	assert_int_equal(apply_json(&f, "jobs.collect", many, "scheduler", "admin", &r), 400);
	assert_non_null(strstr(error_of(r), "at most 1000"));
	assert_int_equal(
	    collect(&f, "{\"before_ms\":1763740000001,\"ids\":[\"j-000002\"]}", "user", &r), 403);
	digest(&f, after);
	assert_string_equal(before, after);

	const char *args = "{\"before_ms\":1763740000001,\"ids\":[\"j-000001\",\"j-000002\","
	                   "\"j-000003\",\"j-000009\"]}";
	assert_int_equal(collect(&f, args, "admin", &r), 200);
	const json_t *body = json_object_get(r, "body");
	assert_int_equal(json_integer_value(json_object_get(body, "collected")), 1);
	assert_int_equal(json_integer_value(json_object_get(body, "skipped")), 3);
	struct yard_err err = {0};
	assert_null(fsm_job_get(&f, "j-000002", &err));
	assert_int_equal(err.code, YARD_ENOTFOUND);
	json_t *kept = fsm_job_get(&f, "j-000001", &err);
	assert_non_null(kept);
	json_decref(kept);
	kept = fsm_job_get(&f, "j-000003", &err);
	assert_non_null(kept);
	json_decref(kept);
	assert_int_equal(complete_count(&f), 70);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM events WHERE job = 'j-000002'"), 2);
	assert_int_equal(sql_count(f.db,
	                           "SELECT count(*) FROM events WHERE type = 'jobs.collected'"
	                           " AND message LIKE '1 ended job(s) collected (j-000002)%'"),
	                 1);
	/* again: nothing left to collect, and no event for nothing */
	assert_int_equal(collect(&f, args, "admin", &r), 200);
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(r, "body"), "collected")), 0);
	assert_int_equal(
	    sql_count(f.db, "SELECT count(*) FROM events WHERE type = 'jobs.collected'"), 1);

	collect_setup(&g);
	assert_int_equal(collect(&g, args, "admin", &r), 200);
	assert_int_equal(collect(&g, args, "admin", &r), 200);
	digest(&f, before);
	digest(&g, after);
	assert_string_equal(before, after);
	fsm_close(&f);
	fsm_close(&g);
}

/* Two nodes of one CPU device each, and the submissions of test_submit_with_place (their
 * results copied: an apply's result lasts until the next). */
static void place_setup(struct fsm *f, json_t *r[5])
{
	char args[512];
	two_nodes(f);
	static const char *const places[] = {
	    /* placed: the job runs */
	    "\"place\":{\"ranks\":[{\"node\":\"node-a\",\"device\":0},"
	    "{\"node\":\"node-b\",\"device\":0}]}",
	    /* the same devices again: taken */
	    "\"place\":{\"ranks\":[{\"node\":\"node-a\",\"device\":0},"
	    "{\"node\":\"node-b\",\"device\":0}]}",
	    /* malformed */
	    "\"place\":{\"ranks\":\"node-a\"}",
	    "\"place\":{\"ranks\":[],\"now\":true}",
	    /* one slot for two ranks */
	    "\"place\":{\"ranks\":[{\"node\":\"node-a\",\"device\":0}]}",
	};
	for (int i = 0; i < 5; i++) {
		snprintf(args, sizeof args,
		         "{\"name\":\"p%d\",\"spec\":{\"name\":\"p%d\",\"command\":[\"x\"],"
		         "\"ranks\":2},%s}",
		         i, i, places[i]);
		const json_t *res;
		assert_int_equal(apply(f, "job.submit", args, "alice", "user", &res), 201);
		r[i] = json_deep_copy(res);
	}
}

/* job.submit with the leader's placement (sched_submit_begin): applied as the job's first
 * job.assign in the same command; a placement the state machine refuses (devices taken,
 * malformed, the wrong number of ranks) leaves the job pending and says why, and the
 * submission stands; replicas agree. */
static void test_submit_with_place(void **state)
{
	(void)state;
	struct fsm f, g;
	json_t *r[5];
	char a[SHA256_HEX_LEN + 1], b[SHA256_HEX_LEN + 1];
	place_setup(&f, r);
	static const char *const want_state[] = {"running", "pending", "pending", "pending",
	                                         "pending"};
	static const char *const want_refused[] = {NULL, "is held by running job j-000001",
	                                           "place: must be", "place: must be",
	                                           "placement has 1"};
	for (int i = 0; i < 5; i++) {
		const json_t *body = json_object_get(r[i], "body");
		assert_string_equal(json_string_value(json_object_get(body, "state")),
		                    want_state[i]);
		const char *refused = json_string_value(json_object_get(body, "placement_refused"));
		if (want_refused[i] == NULL) {
			assert_null(refused);
		} else {
			assert_non_null(refused);
			if (strstr(refused, want_refused[i]) == NULL)
				fail_msg("job %d: refused '%s', want '%s'", i + 1, refused,
				         want_refused[i]);
		}
	}
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM jobs WHERE state = 'running'"
	                                 " AND generation = 1 AND id = 'j-000001'"),
	                 1);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM jobs WHERE state = 'pending'"
	                                 " AND generation = 0"),
	                 4);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM assignments"), 2);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM assignments WHERE job = 'j-000001'"),
	                 2);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM events WHERE job = 'j-000001' AND"
	                                 " type = 'job.placed' AND message LIKE"
	                                 " '%placed at submission'"),
	                 1);
	assert_int_equal(sql_count(f.db, "SELECT count(*) FROM events WHERE type = 'job.placed'"),
	                 1);
	for (int i = 0; i < 5; i++)
		json_decref(r[i]);
	place_setup(&g, r);
	for (int i = 0; i < 5; i++)
		json_decref(r[i]);
	digest(&f, a);
	digest(&g, b);
	assert_string_equal(a, b);
	fsm_close(&f);
	fsm_close(&g);
}

/* Replicas that apply the same uploads agree byte for byte, and a snapshot carries them. */
static void test_deterministic_and_snapshot(void **state)
{
	(void)state;
	struct fsm a, b, c;
	const json_t *r;
	char ha[SHA256_HEX_LEN + 1], hb[SHA256_HEX_LEN + 1], hc[SHA256_HEX_LEN + 1];
	setup_job(&a, 2);
	setup_job(&b, 2);
	for (int rank = 0; rank < 2; rank++) {
		assert_int_equal(upload_inline(&a, 10, rank, 4000, &r), 201);
		assert_int_equal(upload_inline(&b, 10, rank, 4000, &r), 201);
	}
	digest(&a, ha);
	digest(&b, hb);
	assert_string_equal(ha, hb);
	unsigned char *img = NULL;
	size_t len = 0;
	struct yard_err err = {0};
	assert_int_equal(fsm_serialize(&a, &img, &len, &err), 0);
	assert_int_equal(fsm_init(&c, &err), 0);
	assert_int_equal(fsm_restore(&c, img, len, &err), 0);
	sqlite3_free(img);
	digest(&c, hc);
	assert_string_equal(ha, hc);
	assert_int_equal(fsm_checkpoint_newest(&c, "j-000001"), 10);
	fsm_close(&a);
	fsm_close(&b);
	fsm_close(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_incomplete_is_not_restorable),
	    cmocka_unit_test(test_complete_chunked_and_restore),
	    cmocka_unit_test(test_keep_n_deletes_old_bytes),
	    cmocka_unit_test(test_quota),
	    cmocka_unit_test(test_bad_input_changes_nothing),
	    cmocka_unit_test(test_job_end_drops_incomplete),
	    cmocka_unit_test(test_job_delete_frees_checkpoints),
	    cmocka_unit_test(test_jobs_collect),
	    cmocka_unit_test(test_submit_with_place),
	    cmocka_unit_test(test_deterministic_and_snapshot),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
