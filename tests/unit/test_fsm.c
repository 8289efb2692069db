/* test_fsm.c: the replicated state machine: determinism (byte-identical databases),
 * snapshot/restore, request-id dedup, errors as results, the event hash chain, tokens,
 * members and config. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/sql_count.h"

#include "jobs/fsm.h"
#include "jobs/fsm_internal.h"

static const int64_t T0 = 1763740000000LL;

/* Applies a command built from a JSON args literal; returns the result's status. */
static int apply(struct fsm *f, const char *op, const char *args, const char *rid, int64_t ts,
                 const char *actor, const char *role, const json_t **result)
{
	size_t len;
	char *cmd = fsm_command_encode(op, json_loads(args, 0, NULL), rid, ts, actor, role, &len);
	assert_non_null(cmd);
	const json_t *r = fsm_apply(f, cmd, len);
	free(cmd);
	assert_non_null(r);
	if (result)
		*result = r;
	return (int)json_integer_value(json_object_get(r, "status"));
}

static void digest(struct fsm *f, char hex[SHA256_HEX_LEN + 1])
{
	struct yard_err err = {0};
	assert_int_equal(fsm_digest(f, hex, &err), 0);
}

static void assert_same_digest(struct fsm *a, struct fsm *b)
{
	char ha[SHA256_HEX_LEN + 1], hb[SHA256_HEX_LEN + 1];
	digest(a, ha);
	digest(b, hb);
	assert_string_equal(ha, hb);
}

/* A mixed workload: submissions, cancels, state changes, tokens, members, config, and
 * some failing commands in between. */
static void workload(struct fsm *f, int from, int to)
{
	char args[256], rid[32];
	for (int i = from; i < to; i++) {
		snprintf(args, sizeof args,
		         "{\"name\":\"job%d\",\"priority\":%d,\"spec\":{\"ranks\":%d}}", i, i % 7,
		         i % 4 + 1);
		snprintf(rid, sizeof rid, "r%d", i);
		apply(f, "job.submit", args, rid, T0 + i, "alice", "user", NULL);
		if (i % 3 == 0) {
			snprintf(args, sizeof args, "{\"id\":\"j-%06d\"}", i / 2 + 1);
			apply(f, "job.cancel", args, NULL, T0 + i, "admin", "admin", NULL);
		}
		if (i % 5 == 0) {
			snprintf(args, sizeof args,
			         "{\"id\":\"j-%06d\",\"state\":\"running\",\"step\":%d}", i + 1, i);
			apply(f, "job.set_state", args, NULL, T0 + i, "scheduler", "admin", NULL);
		}
		if (i % 11 == 0) {
			snprintf(args, sizeof args,
			         "{\"id\":%d,\"raft_address\":\"127.0.0.1:%d\",\"api_url\":"
			         "\"http://127.0.0.1:%d\",\"role\":\"voter\"}",
			         i % 5 + 1, 7000 + i, 8000 + i);
			apply(f, "member.set", args, NULL, T0 + i, "admin", "admin", NULL);
			apply(f, "config.set", "{\"key\":\"node_down_ms\",\"value\":5000}", NULL,
			      T0 + i, "admin", "admin", NULL);
		}
		if (i % 13 == 0)
			apply(f, "no.such.op", "{}", NULL, T0 + i, "admin", "admin", NULL);
	}
}

static void test_same_commands_give_byte_identical_databases(void **state)
{
	struct fsm a, b;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&b, &err), 0);
	workload(&a, 0, 120);
	workload(&b, 0, 120);
	unsigned char *da, *db;
	size_t la, lb;
	assert_int_equal(fsm_serialize(&a, &da, &la, &err), 0);
	assert_int_equal(fsm_serialize(&b, &db, &lb, &err), 0);
	assert_int_equal(la, lb);
	assert_memory_equal(da, db, la);
	sqlite3_free(da);
	sqlite3_free(db);
	fsm_close(&a);
	fsm_close(&b);
}

static void test_restored_follower_converges_byte_for_byte(void **state)
{
	/* a applies everything; c restores a's snapshot taken midway, then applies the rest —
	 * as a follower does after InstallSnapshot. Their databases must be identical. */
	struct fsm a, c;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&c, &err), 0);
	workload(&a, 0, 60);
	unsigned char *snap;
	size_t snap_len;
	assert_int_equal(fsm_serialize(&a, &snap, &snap_len, &err), 0);
	assert_int_equal(fsm_restore(&c, snap, snap_len, &err), 0);
	sqlite3_free(snap);
	workload(&a, 60, 120);
	workload(&c, 60, 120);
	assert_same_digest(&a, &c);
	fsm_close(&a);
	fsm_close(&c);
}

static void test_snapshot_restore_round_trip(void **state)
{
	struct fsm a, b;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&b, &err), 0);
	assert_int_equal(apply(&a, "job.submit", "{\"name\":\"x\",\"spec\":{\"a\":[1,2]}}", "r1",
	                       T0, "bob", "user", &r),
	                 201);
	unsigned char *snap;
	size_t len;
	assert_int_equal(fsm_serialize(&a, &snap, &len, &err), 0);
	assert_int_equal(fsm_restore(&b, snap, len, &err), 0);
	json_t *job = fsm_job_get(&b, "j-000001", &err);
	assert_non_null(job);
	assert_string_equal(json_string_value(json_object_get(job, "actor")), "bob");
	assert_int_equal(json_integer_value(
	                     json_array_get(json_object_get(json_object_get(job, "spec"), "a"), 1)),
	                 2);
	json_decref(job);
	/* restored state keeps counting: the next job is j-000002, and the dedup table came along
	 */
	assert_int_equal(apply(&b, "job.submit", "{\"name\":\"y\",\"spec\":{}}", "r2", T0 + 1,
	                       "bob", "user", &r),
	                 201);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "id")),
	                    "j-000002");
	assert_int_equal(apply(&b, "job.submit", "{\"name\":\"x\",\"spec\":{}}", "r1", T0 + 2,
	                       "bob", "user", &r),
	                 201);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "id")),
	                    "j-000001");

	/* a garbage image is refused and the old database stays */
	char garbage[4096];
	memset(garbage, 'z', sizeof garbage);
	assert_int_not_equal(fsm_restore(&b, garbage, sizeof garbage, &err), 0);
	job = fsm_job_get(&b, "j-000002", &err);
	assert_non_null(job);
	json_decref(job);
	sqlite3_free(snap);
	fsm_close(&a);
	fsm_close(&b);
}

/* Grows a database by n jobs, each with a 2 KiB spec; checks after every one that the image
 * is where it was. */
static void grow_in_place(struct fsm *f, const unsigned char *at, int n, int64_t ts)
{
	char args[2300];
	char pad[2049];
	memset(pad, 'p', sizeof pad - 1);
	pad[sizeof pad - 1] = '\0';
	for (int i = 0; i < n; i++) {
		snprintf(args, sizeof args, "{\"name\":\"g%d\",\"spec\":{\"pad\":\"%s\"}}", i, pad);
		assert_int_equal(apply(f, "job.submit", args, NULL, ts + i, "alice", "user", NULL),
		                 201);
		const unsigned char *img = NULL;
		size_t len = 0;
		assert_int_equal(fsm_image(f, &img, &len), 0);
		assert_ptr_equal(img, at);
	}
}

/* The database grows where it is: memdb's own growth copied the whole image into a buffer
 * twice the size (on the loop, in the apply that crossed the line, mostly page faults);
 * the reservation never moves, fresh and restored alike, and the limit stays SQLite's. */
static void test_database_grows_in_place(void **state)
{
	struct fsm a, b;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&b, &err), 0);
	const unsigned char *img = NULL;
	size_t len0 = 0, len = 0;
	assert_int_equal(fsm_image(&a, &img, &len0), 0);
	assert_non_null(img);
	grow_in_place(&a, img, 3000, T0);
	assert_int_equal(fsm_image(&a, &img, &len), 0);
	assert_true(len > 6u << 20 && len > 32 * len0);
	assert_true(len <= FSM_DB_MAX);

	unsigned char *snap = NULL;
	size_t snap_len = 0;
	assert_int_equal(fsm_serialize(&a, &snap, &snap_len, &err), 0);
	assert_int_equal(fsm_restore(&b, snap, snap_len, &err), 0);
	sqlite3_free(snap);
	assert_int_equal(fsm_image(&b, &img, &len), 0);
	assert_int_equal(len, snap_len);
	grow_in_place(&b, img, 3000, T0 + 10000);
	assert_int_equal(fsm_image(&b, &img, &len), 0);
	assert_true(len > 2 * snap_len - (1u << 20));
	fsm_close(&a);
	fsm_close(&b);
}

/* A member whose database SQLite grows itself (no address space to reserve: a strict
 * overcommit policy; YARD_FSM_RESERVE=0 forces it here) ends with the same bytes as one
 * whose database lives in the reservation, restores the same snapshots, and its buffer
 * moves as it grows (proof that the knob took the other path). */
static void test_database_without_reservation_is_the_same(void **state)
{
	struct fsm a, b, c;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&a, &err), 0);
	setenv("YARD_FSM_RESERVE", "0", 1);
	assert_int_equal(fsm_init(&b, &err), 0);
	assert_int_equal(fsm_init(&c, &err), 0);
	const unsigned char *b0 = NULL, *b1 = NULL;
	size_t len = 0;
	assert_int_equal(fsm_image(&b, &b0, &len), 0);
	workload(&a, 0, 400);
	workload(&b, 0, 400);
	assert_int_equal(fsm_image(&b, &b1, &len), 0);
	assert_ptr_not_equal(b0, b1);
	const unsigned char *image_a = NULL, *image_b = NULL;
	size_t len_a = 0, len_b = 0;
	assert_int_equal(fsm_image(&a, &image_a, &len_a), 0);
	assert_int_equal(fsm_image(&b, &image_b, &len_b), 0);
	assert_int_equal(len_a, len_b);
	assert_memory_equal(image_a, image_b, len_a);
	/* c (no reservation) restores a's image and both go on alike */
	assert_int_equal(fsm_restore(&c, image_a, len_a, &err), 0);
	unsetenv("YARD_FSM_RESERVE");
	workload(&a, 400, 500);
	workload(&c, 400, 500);
	assert_same_digest(&a, &c);
	fsm_close(&a);
	fsm_close(&b);
	fsm_close(&c);
}

/* SQLite keeps no memory statistics (a process-wide mutex on every malloc and free): they
 * stay at zero however much the state machine allocates. */
static void test_sqlite_memory_statistics_off(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&f, &err), 0);
	workload(&f, 0, 50);
	sqlite3_int64 used = -1, high = -1;
	assert_int_equal(sqlite3_status64(SQLITE_STATUS_MEMORY_USED, &used, &high, 0), SQLITE_OK);
	assert_int_equal(used, 0);
	assert_int_equal(high, 0);
	fsm_close(&f);
}

static void test_request_id_dedup_returns_original_result(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(
	    apply(&f, "job.submit", "{\"name\":\"a\",\"spec\":{}}", "req-1", T0, "u", "user", &r),
	    201);
	char *first = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
	/* the retry (leader changed, different ts) gets the same result and no new job */
	assert_int_equal(apply(&f, "job.submit", "{\"name\":\"a\",\"spec\":{}}", "req-1", T0 + 500,
	                       "u", "user", &r),
	                 201);
	char *second = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(first, second);
	json_t *list = fsm_jobs_list(&f, NULL, NULL, 100, &err);
	assert_int_equal(json_array_size(json_object_get(list, "jobs")), 1);
	json_decref(list);
	/* a different request id is a different submission */
	assert_int_equal(
	    apply(&f, "job.submit", "{\"name\":\"a\",\"spec\":{}}", "req-2", T0, "u", "user", &r),
	    201);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "id")),
	                    "j-000002");
	/* errors are remembered too: a retried failing cancel fails the same way */
	assert_int_equal(
	    apply(&f, "job.cancel", "{\"id\":\"j-000009\"}", "req-3", T0, "u", "user", &r), 404);
	assert_int_equal(
	    apply(&f, "job.cancel", "{\"id\":\"j-000009\"}", "req-3", T0, "u", "user", &r), 404);
	/* request ids older than the TTL (in command time) are forgotten */
	assert_int_equal(apply(&f, "job.submit", "{\"name\":\"a\",\"spec\":{}}", "req-1",
	                       T0 + FSM_REQUEST_ID_TTL_MS + 1000, "u", "user", &r),
	                 201);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "id")),
	                    "j-000003");
	free(first);
	free(second);
	fsm_close(&f);
}

static void test_garbage_and_business_errors_are_results_that_change_nothing(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(
	    apply(&f, "job.submit", "{\"name\":\"a\",\"spec\":{}}", NULL, T0, "u", "user", &r),
	    201);
	digest(&f, before);

	const char *garbage[] = {"",
	                         "not json",
	                         "[1,2]",
	                         "{\"op\":1}",
	                         "{\"op\":\"job.submit\"}",
	                         "{\"op\":\"job.submit\",\"ts\":1,\"actor\":\"a\",\"args\":[]}",
	                         "{\"op\":\"job.submit\",\"ts\":1,\"actor\":\"a\",\"extra\":1}"};
	for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
		r = fsm_apply(&f, garbage[i], strlen(garbage[i]));
		assert_int_equal(json_integer_value(json_object_get(r, "status")), 400);
		assert_non_null(json_object_get(r, "error"));
	}
	unsigned char bytes[300];
	for (size_t i = 0; i < sizeof bytes; i++)
		bytes[i] = (unsigned char)(i * 37 + 11);
	r = fsm_apply(&f, bytes, sizeof bytes);
	assert_int_equal(json_integer_value(json_object_get(r, "status")), 400);

	assert_int_equal(apply(&f, "no.such", "{}", NULL, T0, "u", "admin", &r), 400);
	assert_int_equal(apply(&f, "job.submit", "{\"name\":\"a\"}", NULL, T0, "u", "user", &r),
	                 400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "spec");
	assert_int_equal(apply(&f, "job.submit", "{\"name\":\"a\",\"spec\":{},\"priority\":5000}",
	                       NULL, T0, "u", "user", &r),
	                 400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "priority");
	assert_int_equal(
	    apply(&f, "job.submit", "{\"name\":\"a b\",\"spec\":{}}", NULL, T0, "u", "user", &r),
	    400);
	assert_int_equal(
	    apply(&f, "job.cancel", "{\"id\":\"j-000042\"}", NULL, T0, "u", "user", &r), 404);
	assert_int_equal(
	    apply(&f, "job.cancel", "{\"id\":\"j-000001\"}", NULL, T0, "mallory", "user", &r), 403);
	assert_int_equal(apply(&f, "job.set_state", "{\"id\":\"j-000001\",\"state\":\"succeeded\"}",
	                       NULL, T0, "s", "admin", &r),
	                 409);
	assert_int_equal(apply(&f, "job.set_state", "{\"id\":\"j-000001\",\"state\":\"bogus\"}",
	                       NULL, T0, "s", "admin", &r),
	                 400);
	assert_int_equal(apply(&f, "token.create",
	                       "{\"name\":\"x\",\"role\":\"king\",\"hash\":\"00\"}", NULL, T0, "s",
	                       "admin", &r),
	                 400);
	assert_int_equal(apply(&f, "config.set", "{\"key\":\"node_down_ms\",\"value\":1}", NULL, T0,
	                       "s", "admin", &r),
	                 400);
	assert_int_equal(
	    apply(&f, "config.set", "{\"key\":\"nope\",\"value\":1}", NULL, T0, "s", "admin", &r),
	    400);
	assert_int_equal(apply(&f, "config.set", "{\"key\":\"max_heartbeats_per_s\",\"value\":-1}",
	                       NULL, T0, "s", "admin", &r),
	                 400);
	assert_int_equal(apply(&f, "config.set",
	                       "{\"key\":\"max_heartbeats_per_s.before\",\"value\":1}", NULL, T0,
	                       "s", "admin", &r),
	                 400);
	assert_int_equal(apply(&f, "member.remove", "{\"id\":9}", NULL, T0, "s", "admin", &r), 404);
	digest(&f, after);
	assert_string_equal(before, after);

	/* and the owner may cancel, once */
	assert_int_equal(
	    apply(&f, "job.cancel", "{\"id\":\"j-000001\"}", NULL, T0, "u", "user", &r), 200);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "state")),
	                    "cancelled");
	assert_int_equal(
	    apply(&f, "job.cancel", "{\"id\":\"j-000001\"}", NULL, T0, "u", "user", &r), 409);
	fsm_close(&f);
}

static void test_event_hash_chain_links_and_detects_tampering(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&f, &err), 0);
	workload(&f, 0, 20);
	assert_int_equal(fsm_events_verify(&f, &err), 0);
	json_t *page = fsm_events_list(&f, 0, 1000, NULL, &err);
	json_t *events = json_object_get(page, "events");
	assert_true(json_array_size(events) > 20);
	const char *prev = "0000000000000000000000000000000000000000000000000000000000000000";
	for (size_t i = 0; i < json_array_size(events); i++) {
		json_t *e = json_array_get(events, i);
		assert_int_equal(json_integer_value(json_object_get(e, "seq")), (json_int_t)i + 1);
		assert_string_equal(json_string_value(json_object_get(e, "prev_hash")), prev);
		prev = json_string_value(json_object_get(e, "hash"));
	}
	/* paging: 5 at a time, next points at the last seq returned */
	json_t *p5 = fsm_events_list(&f, 0, 5, NULL, &err);
	assert_int_equal(json_array_size(json_object_get(p5, "events")), 5);
	assert_int_equal(json_integer_value(json_object_get(p5, "next")), 5);
	json_decref(p5);
	/* the newest 3, oldest first, with no next page; after bounds them from below */
	size_t total = json_array_size(events);
	json_t *n3 = fsm_events_newest(&f, 0, 3, NULL, &err);
	json_t *n3e = json_object_get(n3, "events");
	assert_int_equal(json_array_size(n3e), 3);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(json_integer_value(json_object_get(json_array_get(n3e, i), "seq")),
		                 (json_int_t)(total - 2 + i));
	assert_true(json_is_null(json_object_get(n3, "next")));
	json_decref(n3);
	json_t *tail = fsm_events_newest(&f, (int64_t)total - 1, 3, NULL, &err);
	assert_int_equal(json_array_size(json_object_get(tail, "events")), 1);
	json_decref(tail);
	json_t *none = fsm_events_newest(&f, 0, 3, "j-no-such", &err);
	assert_int_equal(json_array_size(json_object_get(none, "events")), 0);
	json_decref(none);
	json_decref(page);

	/* rewrite history: the chain no longer verifies and names the event */
	sqlite3_exec(f.db, "UPDATE events SET message = 'nothing happened' WHERE seq = 3", NULL,
	             NULL, NULL);
	assert_int_equal(fsm_events_verify(&f, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "event 3"));
	fsm_close(&f);
}

/* max_heartbeats_per_s keeps its value before the change and the change's time (every
 * leader judges silence by the longer interval for a while after a change shortens it). */
/* Submits one job with a 4 KiB environment value through a command of its own; its status. */
static int submit_padded(struct fsm *f, int i, const char *rid)
{
	char pad[4097], args[4300];
	memset(pad, 'a' + i % 26, sizeof pad - 1);
	pad[sizeof pad - 1] = '\0';
	snprintf(args, sizeof args, "{\"name\":\"fill%d\",\"spec\":{\"env\":{\"PAD\":\"%s\"}}}", i,
	         pad);
	return apply(f, "job.submit", args, rid, T0 + i, "alice", "user", NULL);
}

static size_t used_bytes(struct fsm *f)
{
	size_t used = 0, file = 0;
	assert_int_equal(fsm_state_bytes(f, &used, &file), 0);
	assert_true(used <= file);
	return used;
}

/* Past its line the state machine refuses creating commands, inside a batch too, and nothing
 * else: the entry commits, what exists still changes, and deleting ended jobs makes room
 * again (the pages in use fall; the file does not). The line holds across a restore. */
static void test_full_state_refuses_new_and_keeps_the_rest(void **state)
{
	(void)state;
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&f, &err), 0);
	fsm_set_create_limit(&f, used_bytes(&f) + (512 << 10));
	int submitted = 0, refused_at = -1;
	for (int i = 0; i < 1000 && refused_at < 0; i++) {
		if (i % 8 == 0)
			fsm_apply_batch_begin(&f);
		int st = submit_padded(&f, i, NULL);
		if (st == 201)
			submitted++;
		else
			refused_at = i;
		if (i % 8 == 7 || refused_at >= 0) /* the refusal does not fail its entry */
			assert_int_equal(fsm_apply_batch_end(&f), 0);
	}
	assert_true(refused_at > 50); /* 512 KiB of 4 KiB specs: about a hundred */
	assert_int_equal(submitted, refused_at);
	assert_int_equal(submit_padded(&f, 5000, "again-1"), 507);
	r = f.last_result;
	const char *msg = json_string_value(json_object_get(r, "error"));
	assert_non_null(strstr(msg, "job.submit refused"));
	assert_non_null(strstr(msg, "in use, at the state machine's line of"));
	assert_int_equal(apply(&f, "token.create", "{\"name\":\"t\",\"role\":\"user\"}", NULL, T0,
	                       "admin", "admin", NULL),
	                 507);
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	digest(&f, before);
	assert_int_equal(submit_padded(&f, 5001, NULL), 507);
	digest(&f, after);
	assert_string_equal(before, after); /* a refused command changes nothing */

	/* what exists goes on: cancels, state changes, settings */
	char args[64];
	for (int i = 1; i <= submitted; i++) {
		snprintf(args, sizeof args, "{\"id\":\"j-%06d\"}", i);
		assert_int_equal(
		    apply(&f, "job.cancel", args, NULL, T0 + 6000, "alice", "user", NULL), 200);
	}
	assert_int_equal(apply(&f, "config.set", "{\"key\":\"node_down_ms\",\"value\":5000}", NULL,
	                       T0 + 6000, "admin", "admin", NULL),
	                 200);
	/* a restore keeps the line */
	unsigned char *img = NULL;
	size_t img_len = 0;
	assert_int_equal(fsm_serialize(&f, &img, &img_len, &err), 0);
	assert_int_equal(fsm_restore(&f, img, img_len, &err), 0);
	sqlite3_free(img);
	assert_int_equal(submit_padded(&f, 5002, NULL), 507);

	/* deleting the ended jobs makes room: the pages in use fall below the line */
	size_t file_full = 0;
	assert_int_equal(fsm_state_bytes(&f, NULL, &file_full), 0);
	for (int i = 1; i <= submitted; i++) {
		snprintf(args, sizeof args, "{\"id\":\"j-%06d\"}", i);
		assert_int_equal(
		    apply(&f, "job.delete", args, NULL, T0 + 7000, "alice", "user", NULL), 200);
	}
	size_t file_after = 0, used_after = used_bytes(&f);
	assert_int_equal(fsm_state_bytes(&f, NULL, &file_after), 0);
	assert_true(file_after >= file_full); /* the file keeps the freed pages */
	assert_true(used_after + (256 << 10) < file_after);
	/* the refused request passes now (its refusal was not remembered under its id) */
	assert_int_equal(submit_padded(&f, 5000, "again-1"), 201);
	for (int i = 0; i < 20; i++)
		assert_int_equal(submit_padded(&f, 6000 + i, NULL), 201);
	fsm_close(&f);
}

static void test_heartbeat_setting_keeps_what_it_replaced(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&f, &err), 0);
	uint64_t v0 = f.config_version;
	assert_int_equal(apply(&f, "config.set", "{\"key\":\"max_heartbeats_per_s\",\"value\":50}",
	                       NULL, T0, "admin", "admin", NULL),
	                 200);
	assert_true(f.config_version > v0);
	assert_int_equal(fsm_config_get(&f, "max_heartbeats_per_s", -1), 50);
	assert_int_equal(fsm_config_get(&f, "max_heartbeats_per_s.before", -1),
	                 FSM_MAX_HEARTBEATS_DEFAULT);
	assert_int_equal(fsm_config_get(&f, "max_heartbeats_per_s.changed_ms", -1), T0);
	assert_int_equal(apply(&f, "config.set", "{\"key\":\"max_heartbeats_per_s\",\"value\":0}",
	                       NULL, T0 + 5000, "admin", "admin", NULL),
	                 200);
	assert_int_equal(fsm_config_get(&f, "max_heartbeats_per_s", -1), 0);
	assert_int_equal(fsm_config_get(&f, "max_heartbeats_per_s.before", -1), 50);
	assert_int_equal(fsm_config_get(&f, "max_heartbeats_per_s.changed_ms", -1), T0 + 5000);
	fsm_close(&f);
}

static void prune_workload(struct fsm *f)
{
	struct yard_err err = {0};
	assert_int_equal(fsm_init(f, &err), 0);
	assert_int_equal(apply(f, "config.set", "{\"key\":\"events_max\",\"value\":999}", NULL, T0,
	                       "admin", "admin", NULL),
	                 400);
	assert_int_equal(apply(f, "config.set", "{\"key\":\"events_max\",\"value\":1000}", NULL, T0,
	                       "admin", "admin", NULL),
	                 200);
	workload(f, 0, 1500);
}

/* events_max: the oldest events go in batches, an events.pruned event anchors what stays,
 * the chain still verifies from there and tampering with the anchor is found; replicas
 * prune alike. */
static void test_events_pruned_keep_a_verifiable_chain(void **state)
{
	struct fsm f, g;
	struct yard_err err = {0};
	char a[SHA256_HEX_LEN + 1], b[SHA256_HEX_LEN + 1];
	prune_workload(&f);
	int64_t n = sql_count(f.db, "SELECT count(*) FROM events"),
	        first = sql_count(f.db, "SELECT min(seq) FROM events"),
	        last = sql_count(f.db, "SELECT max(seq) FROM events");
	assert_true(last > 2000); /* far more events than kept */
	assert_in_range(n, 1000, 1000 + 125 + 1);
	assert_int_equal(n, last - first + 1); /* no gap */
	assert_true(sql_count(f.db, "SELECT count(*) FROM events WHERE type = 'events.pruned'") >=
	            1);
	assert_int_equal(fsm_events_verify(&f, &err), 0);
	prune_workload(&g);
	assert_int_equal(fsm_digest(&f, a, &err), 0);
	assert_int_equal(fsm_digest(&g, b, &err), 0);
	assert_string_equal(a, b);
	/* a new setting holds from the next event on (it is not kept from before) */
	assert_int_equal(apply(&g, "config.set", "{\"key\":\"events_max\",\"value\":2000}", NULL,
	                       T0, "admin", "admin", NULL),
	                 200);
	workload(&g, 1500, 2500);
	assert_in_range(sql_count(g.db, "SELECT count(*) FROM events"), 1127, 2000 + 250 + 1);
	assert_int_equal(fsm_events_verify(&g, &err), 0);

	/* the first kept event's link to the anchor */
	char sql[256];
	snprintf(sql, sizeof sql, "UPDATE events SET prev_hash = '%064d' WHERE seq = %lld", 0,
	         (long long)first);
	sqlite3_exec(f.db, sql, NULL, NULL, NULL);
	assert_int_equal(fsm_events_verify(&f, &err), YARD_ECORRUPT);
	fsm_close(&f);
	/* the anchor's own text: its hash no longer matches */
	prune_workload(&f);
	sqlite3_exec(f.db,
	             "UPDATE events SET message = replace(message, 'had hash ', 'had hash 0')"
	             " WHERE seq = (SELECT max(seq) FROM events WHERE type = 'events.pruned')",
	             NULL, NULL, NULL);
	assert_int_equal(fsm_events_verify(&f, &err), YARD_ECORRUPT);
	fsm_close(&f);
	/* old events removed without a prune event to anchor the rest */
	prune_workload(&f);
	sqlite3_exec(f.db, "DELETE FROM events WHERE type = 'events.pruned'", NULL, NULL, NULL);
	snprintf(sql, sizeof sql, "DELETE FROM events WHERE seq < %lld", (long long)last - 10);
	sqlite3_exec(f.db, sql, NULL, NULL, NULL);
	assert_int_equal(fsm_events_verify(&f, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "no events.pruned event names event"));
	fsm_close(&f);
	fsm_close(&g);
}

/* The chain's canonical form, as every version before the direct writer produced it:
 * sha256(prev || compact key-sorted jansson dump of the event's fields). */
static void reference_event_hash(const char *prev, int64_t seq, int64_t ts, const char *type,
                                 const char *job, const char *actor, const char *message,
                                 char hex[SHA256_HEX_LEN + 1])
{
	json_t *canon = json_pack("{s:I,s:I,s:s,s:o,s:s,s:s}", "seq", (json_int_t)seq, "ts_ms",
	                          (json_int_t)ts, "type", type, "job",
	                          job ? json_string(job) : json_null(), "actor", actor, "message",
	                          message);
	assert_non_null(canon);
	char *text = json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS);
	size_t n = strlen(prev) + strlen(text);
	char *all = malloc(n + 1);
	snprintf(all, n + 1, "%s%s", prev, text);
	sha256_hex(all, n, hex);
	free(all);
	free(text);
	json_decref(canon);
}

static void test_event_hash_is_the_canonical_json_form(void **state)
{
	const char *strings[] = {"",
	                         "plain",
	                         "quote \" backslash \\ slash /",
	                         "\b\f\n\r\t and \x01\x02\x1f\x7f",
	                         "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x82 \xe2\x80\xa8",
	                         "job j-000001 (train-7b) submitted by alice"};
	size_t n = sizeof strings / sizeof strings[0];
	char got[SHA256_HEX_LEN + 1], want[SHA256_HEX_LEN + 1];
	const char *prev = "0000000000000000000000000000000000000000000000000000000000000000";
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			const char *job = j % 3 == 0 ? NULL : strings[(i + j) % n];
			int64_t seq = (int64_t)(i * n + j) - 3, ts = T0 * (j % 2 ? -1 : 1);
			fsm_event_hash(prev, seq, ts, strings[i], job, strings[j], strings[(i * 7 + j) % n],
			               got);
			reference_event_hash(prev, seq, ts, strings[i], job, strings[j],
			                     strings[(i * 7 + j) % n], want);
			assert_string_equal(got, want);
		}
	/* a long message crosses the writer's buffer many times, escapes included */
	char message[512];
	for (size_t i = 0; i < sizeof message - 1; i++)
		message[i] = "ab\"\\\n\x03c"[i % 7];
	message[sizeof message - 1] = '\0';
	fsm_event_hash(prev, 1, T0, "t", "j", "a", message, got);
	reference_event_hash(prev, 1, T0, "t", "j", "a", message, want);
	assert_string_equal(got, want);
}

/* Every row of a table, in key order, as [[col, ...], ...] of text or null. */
static json_t *dump_table(struct fsm *f, const char *table)
{
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT * FROM %s ORDER BY 1", table);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(f->db, sql, -1, &st, NULL) != SQLITE_OK)
		return NULL;
	json_t *rows = json_array();
	while (sqlite3_step(st) == SQLITE_ROW) {
		json_t *row = json_array();
		for (int c = 0; c < sqlite3_column_count(st); c++) {
			const unsigned char *v = sqlite3_column_text(st, c);
			json_array_append_new(row, v ? json_string((const char *)v) : json_null());
		}
		json_array_append_new(rows, row);
	}
	sqlite3_finalize(st);
	return rows;
}

/* The commands of one raft entry share a transaction: the state after the batch is the
 * state after applying them one by one, a failing command in the middle undoes only itself,
 * and a repeated request id inside the batch answers with the first result. */
static void test_batch_applies_like_single_commands(void **state)
{
	struct fsm a, b;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&b, &err), 0);
	const json_t *r;
	struct {
		const char *op, *args, *rid;
		int status;
	} cmds[] = {
	    {"job.submit", "{\"name\":\"a\",\"spec\":{\"ranks\":1}}", "r1", 201},
	    {"job.submit", "{\"name\":\"bad name\",\"spec\":{}}", "r2", 400},
	    {"job.cancel", "{\"id\":\"j-000001\"}", NULL, 200},
	    {"job.submit", "{\"name\":\"b\",\"spec\":{\"ranks\":2}}", "r3", 201},
	    {"job.submit", "{\"name\":\"b\",\"spec\":{\"ranks\":2}}", "r3", 201}, /* retry */
	    {"job.cancel", "{\"id\":\"j-000001\"}", NULL, 409},
	    {"no.such.op", "{}", NULL, 400},
	    {"job.submit", "{\"name\":\"c\",\"spec\":{\"ranks\":3}}", NULL, 201},
	};
	size_t n = sizeof cmds / sizeof cmds[0];
	fsm_apply_batch_begin(&b);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(apply(&a, cmds[i].op, cmds[i].args, cmds[i].rid, T0 + (int64_t)i,
		                       "admin", "admin", NULL),
		                 cmds[i].status);
		assert_int_equal(apply(&b, cmds[i].op, cmds[i].args, cmds[i].rid, T0 + (int64_t)i,
		                       "admin", "admin", &r),
		                 cmds[i].status);
	}
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "id")),
	                    "j-000003");
	assert_int_equal(fsm_apply_batch_end(&b), 0);
	/* same rows in both (page layout may differ: one transaction instead of eight) */
	const char *tables[] = {"jobs", "events", "request_ids", "meta"};
	for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
		json_t *ra = dump_table(&a, tables[t]), *rb = dump_table(&b, tables[t]);
		assert_non_null(ra);
		assert_true(json_equal(ra, rb));
		json_decref(ra);
		json_decref(rb);
	}
	assert_int_equal(fsm_events_verify(&b, &err), 0);
	/* after the batch, commands are transactions of their own again */
	assert_int_equal(apply(&b, "job.cancel", "{\"id\":\"j-000002\"}", NULL, T0 + 9, "admin",
	                       "admin", NULL),
	                 200);
	assert_false(b.in_batch);
	fsm_close(&a);
	fsm_close(&b);
}

/* The leader applies its own commands from the objects it printed them from
 * (fsm_command_encode_own): the same results and the same database as a member that parses
 * the text. Not kept: a command whose text jansson would refuse (a NUL in a string), one
 * whose values something else still references, one that was not submitted. A payload that
 * is not the next kept command (another leader's entry) is parsed and leaves them kept. */
static int apply_own(struct fsm *a, struct fsm *b, const char *op, json_t *args, int64_t ts)
{
	size_t la = 0, lb = 0;
	char *ta = fsm_command_encode(op, json_deep_copy(args), NULL, ts, "admin", "admin", &la);
	char *tb = fsm_command_encode_own(b, op, args, NULL, ts, "admin", "admin", &lb);
	assert_non_null(ta);
	assert_non_null(tb);
	assert_int_equal(la, lb);
	assert_memory_equal(ta, tb, la);
	int sa = (int)json_integer_value(json_object_get(fsm_apply(a, ta, la), "status"));
	int sb = (int)json_integer_value(json_object_get(fsm_apply(b, tb, lb), "status"));
	assert_int_equal(sa, sb);
	free(ta);
	free(tb);
	return sb;
}

static void test_own_commands_apply_like_parsed(void **state)
{
	struct fsm a, b;
	struct yard_err err = {0};
	char ha[SHA256_HEX_LEN + 1], hb[SHA256_HEX_LEN + 1];
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&b, &err), 0);
	b.keep_submitted = 1; /* b leads */
	b.verify_own = 1;     /* and aborts if a kept object is not what its text parses to */
	const char *specs[] = {
	    "{\"ranks\":2,\"env\":{\"A\":\"\\u00e9\\\"q\\\"\",\"B\":\"\\ud83d\\ude00\",\"D\":\"ü\","
	    "\"C\":\"tab\\t\"}}",
	    "{\"ranks\":1,\"lr\":0.1,\"big\":1e300,\"neg\":-0.0,\"i\":-9007199254740993,"
	    "\"deep\":[[1,[2,{\"x\":[true,false,null]}]]],\"z\":{},\"e\":[]}",
	    "{\"ranks\":3,\"command\":[\"sh\",\"-c\",\"echo \\\\u0000\"]}",
	};
	int kept = 0;
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		char args[600];
		snprintf(args, sizeof args, "{\"name\":\"j%zu\",\"spec\":%s}", i, specs[i]);
		json_t *v = json_loads(args, 0, NULL);
		assert_non_null(v);
		assert_int_equal(apply_own(&a, &b, "job.submit", v, T0 + (int64_t)i), 201);
		kept += i != 2; /* the third prints a backslash before u0000: parsed to be safe */
		assert_int_equal(b.own_taken, (uint64_t)kept);
	}
	/* a NUL in a string: printed as \u0000, which jansson refuses: parsed, refused alike */
	json_t *nul = json_pack("{s:s,s:{s:i,s:o}}", "name", "n", "spec", "ranks", 1, "x",
	                        json_stringn("a\0b", 3));
	assert_int_equal(apply_own(&a, &b, "job.submit", nul, T0 + 10), 400);
	assert_int_equal(b.own_taken, (uint64_t)kept);
	/* something else still holds the spec: parsed */
	json_t *shared = json_pack("{s:i}", "ranks", 2);
	json_t *args = json_pack("{s:s,s:O}", "name", "s", "spec", shared);
	assert_int_equal(apply_own(&a, &b, "job.submit", args, T0 + 11), 201);
	assert_int_equal(b.own_taken, (uint64_t)kept);
	json_decref(shared);
	/* not submitted: dropped; another leader's entry between: parsed, the kept one waits */
	size_t l1 = 0, l2 = 0, l3 = 0;
	char *t1 = fsm_command_encode_own(&b, "job.cancel", json_pack("{s:s}", "id", "j-000001"),
	                                  NULL, T0 + 12, "admin", "admin", &l1);
	fsm_command_unsent(&b, t1, l1);
	assert_int_equal(b.own_n, 0);
	char *t2 = fsm_command_encode_own(&b, "job.cancel", json_pack("{s:s}", "id", "j-000002"),
	                                  NULL, T0 + 13, "admin", "admin", &l2);
	char *t3 = fsm_command_encode(
	    "job.submit", json_pack("{s:s,s:{s:i}}", "name", "other", "spec", "ranks", 1), NULL,
	    T0 + 14, "admin", "admin", &l3);
	assert_int_equal(json_integer_value(json_object_get(fsm_apply(&b, t3, l3), "status")), 201);
	assert_int_equal(b.own_n, 1);
	assert_int_equal(json_integer_value(json_object_get(fsm_apply(&a, t3, l3), "status")), 201);
	assert_int_equal(json_integer_value(json_object_get(fsm_apply(&b, t2, l2), "status")), 200);
	assert_int_equal(json_integer_value(json_object_get(fsm_apply(&a, t2, l2), "status")), 200);
	assert_int_equal(b.own_taken, (uint64_t)kept + 1);
	assert_int_equal(b.own_n, 0);
	free(t1);
	free(t2);
	free(t3);
	digest(&a, ha);
	digest(&b, hb);
	assert_string_equal(ha, hb);
	/* no longer leading: nothing is kept */
	b.keep_submitted = 0;
	free(fsm_command_encode_own(&b, "job.cancel", json_pack("{s:s}", "id", "j-000003"), NULL,
	                            T0 + 15, "admin", "admin", &l1));
	assert_int_equal(b.own_n, 0);
	fsm_close(&a);
	fsm_close(&b);
}

static void test_tokens_members_config(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	char role[16], name[FSM_NAME_MAX + 1], hash[SHA256_HEX_LEN + 1], args[256];
	assert_int_equal(fsm_init(&f, &err), 0);

	sha256_hex("s3cret", 6, hash);
	snprintf(args, sizeof args, "{\"name\":\"admin\",\"hash\":\"%s\"}", hash);
	assert_int_equal(apply(&f, "token.bootstrap", args, "boot", T0, "yardd", "admin", &r), 201);
	assert_int_equal(fsm_token_lookup(&f, hash, T0, role, name, NULL, &err), 0);
	assert_string_equal(role, "admin");
	/* a second bootstrap (another leader, another token) does nothing */
	sha256_hex("other", 5, hash);
	snprintf(args, sizeof args, "{\"name\":\"admin\",\"hash\":\"%s\"}", hash);
	assert_int_equal(apply(&f, "token.bootstrap", args, "boot2", T0, "yardd", "admin", &r),
	                 409);
	assert_int_equal(fsm_token_lookup(&f, hash, T0, role, name, NULL, &err), YARD_ENOTFOUND);

	sha256_hex("alice-secret", 12, hash);
	snprintf(args, sizeof args, "{\"name\":\"alice\",\"role\":\"user\",\"hash\":\"%s\"}", hash);
	assert_int_equal(apply(&f, "token.create", args, NULL, T0, "admin", "admin", &r), 201);
	const char *id = json_string_value(json_object_get(json_object_get(r, "body"), "id"));
	assert_string_equal(id, "t-000002");
	assert_int_equal(fsm_token_lookup(&f, hash, T0, role, name, NULL, &err), 0);
	assert_string_equal(name, "alice");
	json_t *list = fsm_tokens_list(&f, &err);
	char *text = json_dumps(list, 0);
	assert_null(strstr(text, hash)); /* never the hash */
	free(text);
	json_decref(list);
	assert_int_equal(
	    apply(&f, "token.revoke", "{\"id\":\"t-000002\"}", NULL, T0, "admin", "admin", &r),
	    200);
	assert_int_equal(fsm_token_lookup(&f, hash, T0, role, name, NULL, &err), YARD_ENOTFOUND);
	assert_int_equal(
	    apply(&f, "token.revoke", "{\"id\":\"t-000002\"}", NULL, T0, "admin", "admin", &r),
	    404);

	char url[128];
	assert_int_equal(apply(&f, "member.set",
	                       "{\"id\":2,\"raft_address\":\"127.0.0.1:7002\","
	                       "\"api_url\":\"http://127.0.0.1:7102\",\"role\":\"voter\"}",
	                       NULL, T0, "admin", "admin", &r),
	                 200);
	assert_int_equal(fsm_member_api_url(&f, 2, url, sizeof url), 0);
	assert_string_equal(url, "http://127.0.0.1:7102");
	assert_int_equal(apply(&f, "member.remove", "{\"id\":2}", NULL, T0, "admin", "admin", &r),
	                 200);
	assert_int_equal(fsm_member_api_url(&f, 2, url, sizeof url), YARD_ENOTFOUND);

	assert_int_equal(fsm_config_get(&f, "node_down_ms", 1234), 1234);
	assert_int_equal(apply(&f, "config.set", "{\"key\":\"node_down_ms\",\"value\":9000}", NULL,
	                       T0, "admin", "admin", &r),
	                 200);
	assert_int_equal(fsm_config_get(&f, "node_down_ms", 1234), 9000);
	fsm_close(&f);
}

static void test_jobs_list_filters_and_pages(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&f, &err), 0);
	for (int i = 0; i < 7; i++)
		apply(&f, "job.submit", "{\"name\":\"j\",\"spec\":{}}", NULL, T0 + i, "u", "user",
		      NULL);
	apply(&f, "job.cancel", "{\"id\":\"j-000003\"}", NULL, T0, "u", "user", NULL);
	json_t *page = fsm_jobs_list(&f, "pending", NULL, 4, &err);
	assert_int_equal(json_array_size(json_object_get(page, "jobs")), 4);
	assert_string_equal(json_string_value(json_object_get(page, "next")), "j-000005");
	json_decref(page);
	page = fsm_jobs_list(&f, "pending", "j-000005", 4, &err);
	assert_int_equal(json_array_size(json_object_get(page, "jobs")), 2);
	assert_true(json_is_null(json_object_get(page, "next")));
	json_decref(page);
	page = fsm_jobs_list(&f, "cancelled", NULL, 10, &err);
	assert_int_equal(json_array_size(json_object_get(page, "jobs")), 1);
	json_decref(page);
	assert_null(fsm_jobs_list(&f, NULL, "bogus", 10, &err));
	assert_int_equal(err.code, YARD_EINVAL);
	fsm_close(&f);
}

/* to: a new FSM restored from a snapshot of from. */
static void restore_copy(struct fsm *from, struct fsm *to)
{
	struct yard_err err = {0};
	unsigned char *img = NULL;
	size_t len = 0;
	assert_int_equal(fsm_serialize(from, &img, &len, &err), 0);
	assert_int_equal(fsm_init(to, &err), 0);
	assert_int_equal(fsm_restore(to, img, len, &err), 0);
	sqlite3_free(img);
}

static const char *NODE_A =
    "{\"name\":\"node-a\",\"host\":\"127.0.0.1\",\"port_base\":29500,\"version\":\"0.1\","
    "\"devices\":[{\"index\":0,\"kind\":\"cpu\"},{\"index\":1,\"kind\":\"cpu\"}],"
    "\"token_hash\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}";
static const char *NODE_B =
    "{\"name\":\"node-b\",\"host\":\"127.0.0.2\",\"port_base\":29600,"
    "\"devices\":[{\"index\":0,\"kind\":\"cpu\"},{\"index\":1,\"kind\":\"cpu\"}],"
    "\"token_hash\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"}";

static const char *job_state(struct fsm *f, const char *id, int64_t *generation, int64_t *restarts)
{
	static char state[16];
	struct yard_err err = {0};
	json_t *job = fsm_job_get(f, id, &err);
	assert_non_null(job);
	snprintf(state, sizeof state, "%s", json_string_value(json_object_get(job, "state")));
	if (generation)
		*generation = json_integer_value(json_object_get(job, "generation"));
	if (restarts)
		*restarts = json_integer_value(json_object_get(job, "restarts"));
	json_decref(job);
	return state;
}

/* Nodes, placements, restarts: the rules apply enforces whatever the leader believed. */
static void test_nodes_and_placements(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	char name[FSM_NAME_MAX + 1];
	int64_t gen, restarts;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(apply(&f, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	assert_int_equal(apply(&f, "node.register", NODE_B, NULL, T0, "nodes", "agent", NULL), 200);
	/* bad registrations change nothing and name the field */
	assert_int_equal(
	    apply(&f, "node.register",
	          "{\"name\":\"x\",\"host\":\"h\",\"port_base\":1,\"devices\":[],"
	          "\"token_hash\":"
	          "\"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\"}",
	          NULL, T0, "nodes", "agent", &r),
	    400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "devices");
	assert_int_equal(
	    fsm_node_token_lookup(
	        &f, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", name, &err),
	    0);
	assert_string_equal(name, "node-a");

	apply(&f, "job.submit", "{\"name\":\"j1\",\"spec\":{\"ranks\":2}}", NULL, T0, "alice",
	      "user", NULL);
	apply(&f, "job.submit", "{\"name\":\"j2\",\"spec\":{\"ranks\":2}}", NULL, T0, "alice",
	      "user", NULL);
	/* wrong generation, wrong rank count, a device twice, a device out of range */
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000001\",\"generation\":2,\"ranks\":[{\"node\":\"node-a\","
	          "\"device\":0},{\"node\":\"node-a\",\"device\":1}]}",
	          NULL, T0, "yardd", "admin", NULL),
	    409);
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":[{\"node\":\"node-a\","
	          "\"device\":0}]}",
	          NULL, T0, "yardd", "admin", NULL),
	    400);
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":[{\"node\":\"node-a\","
	          "\"device\":0},{\"node\":\"node-a\",\"device\":0}]}",
	          NULL, T0, "yardd", "admin", NULL),
	    409);
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":[{\"node\":\"node-a\","
	          "\"device\":0},{\"node\":\"node-a\",\"device\":2}]}",
	          NULL, T0, "yardd", "admin", NULL),
	    409);
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":[{\"node\":\"node-a\","
	          "\"device\":0},{\"node\":\"node-a\",\"device\":1}]}",
	          NULL, T0, "yardd", "admin", NULL),
	    200);
	assert_string_equal(job_state(&f, "j-000001", &gen, NULL), "running");
	assert_int_equal(gen, 1);
	/* a device held by a running job is never given to another */
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000002\",\"generation\":1,\"ranks\":[{\"node\":\"node-a\","
	          "\"device\":1},{\"node\":\"node-b\",\"device\":0}]}",
	          NULL, T0, "yardd", "admin", &r),
	    409);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "j-000001"));
	json_t *slots = fsm_running_slots(&f);
	assert_int_equal(json_array_size(slots), 2);
	json_decref(slots);

	/* node-a goes down: no placement there; the job restarts and moves to node-b */
	assert_int_equal(apply(&f, "node.set_state",
	                       "{\"id\":\"node-a\",\"state\":\"down\",\"reason\":\"no heartbeat\"}",
	                       NULL, T0 + 1, "yardd", "admin", NULL),
	                 200);
	assert_int_equal(apply(&f, "job.restart",
	                       "{\"id\":\"j-000001\",\"generation\":1,\"reason\":\"node-a down\","
	                       "\"max_restarts\":1,\"step\":40}",
	                       NULL, T0 + 2, "yardd", "admin", NULL),
	                 200);
	assert_string_equal(job_state(&f, "j-000001", &gen, &restarts), "restarting");
	assert_int_equal(restarts, 1);
	/* a second detection of the same failure (stale generation) does not count twice */
	assert_int_equal(apply(&f, "job.restart",
	                       "{\"id\":\"j-000001\",\"generation\":1,\"reason\":\"again\","
	                       "\"max_restarts\":1}",
	                       NULL, T0 + 2, "yardd", "admin", NULL),
	                 409);
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000001\",\"generation\":2,\"ranks\":[{\"node\":\"node-a\","
	          "\"device\":0},{\"node\":\"node-b\",\"device\":1}]}",
	          NULL, T0 + 3, "yardd", "admin", &r),
	    409);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "down"));
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000001\",\"generation\":2,\"ranks\":[{\"node\":\"node-b\","
	          "\"device\":0},{\"node\":\"node-b\",\"device\":1}],\"note\":\"restoring\"}",
	          NULL, T0 + 3, "yardd", "admin", NULL),
	    200);
	/* started_ms stays the first placement's time (time_limit_s counts from it) */
	struct yard_err jerr = {0};
	json_t *placed = fsm_job_get(&f, "j-000001", &jerr);
	assert_int_equal(json_integer_value(json_object_get(placed, "started_ms")), T0);
	json_decref(placed);
	placed = fsm_job_get(&f, "j-000002", &jerr);
	assert_null(json_object_get(placed, "started_ms")); /* never placed */
	json_decref(placed);
	assert_int_equal(
	    apply(&f, "job.note",
	          "{\"id\":\"j-000001\",\"generation\":1,\"type\":\"running\",\"message\":\"old\"}",
	          NULL, T0 + 3, "yardd", "admin", NULL),
	    409);
	assert_int_equal(apply(&f, "job.note",
	                       "{\"id\":\"j-000001\",\"generation\":2,\"type\":\"running\","
	                       "\"message\":\"all ranks up\"}",
	                       NULL, T0 + 3, "yardd", "admin", NULL),
	                 200);
	/* a new leader proposing the same note again does not add a second event */
	assert_int_equal(
	    apply(
	        &f, "job.note",
	        "{\"id\":\"j-000001\",\"generation\":2,\"type\":\"running\",\"message\":\"again\"}",
	        NULL, T0 + 3, "yardd", "admin", &r),
	    200);
	assert_true(json_is_true(json_object_get(json_object_get(r, "body"), "duplicate")));
	/* the second failure exceeds max_restarts 1: failed, not restarting */
	assert_int_equal(
	    apply(&f, "job.restart",
	          "{\"id\":\"j-000001\",\"generation\":2,\"reason\":\"rank 1 exited with code 1\","
	          "\"max_restarts\":1}",
	          NULL, T0 + 4, "yardd", "admin", NULL),
	    200);
	assert_string_equal(job_state(&f, "j-000001", NULL, &restarts), "failed");
	assert_int_equal(restarts, 1);
	/* its devices are free again */
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000002\",\"generation\":1,\"ranks\":[{\"node\":\"node-b\","
	          "\"device\":0},{\"node\":\"node-b\",\"device\":1}]}",
	          NULL, T0 + 5, "yardd", "admin", NULL),
	    200);
	assert_int_equal(apply(&f, "job.finish",
	                       "{\"id\":\"j-000002\",\"generation\":1,\"state\":\"succeeded\","
	                       "\"reason\":\"every rank exited 0\"}",
	                       NULL, T0 + 6, "yardd", "admin", NULL),
	                 200);
	assert_string_equal(job_state(&f, "j-000002", NULL, NULL), "succeeded");
	/* events tell the story, and the chain verifies */
	json_t *page = fsm_events_list(&f, 0, 100, "j-000001", &err);
	const char *want[] = {"job.submitted", "job.placed",  "job.restarting",
	                      "job.placed",    "job.running", "job.failed"};
	assert_int_equal(json_array_size(json_object_get(page, "events")), 6);
	for (size_t i = 0; i < 6; i++)
		assert_string_equal(
		    json_string_value(json_object_get(
		        json_array_get(json_object_get(page, "events"), i), "type")),
		    want[i]);
	json_decref(page);
	assert_int_equal(fsm_events_verify(&f, &err), 0);
	/* re-registering keeps the node and replaces its token */
	assert_int_equal(apply(&f, "node.register", NODE_B, NULL, T0 + 7, "nodes", "agent", NULL),
	                 200);
	json_t *nodes = fsm_nodes_list(&f, &err);
	assert_int_equal(json_array_size(nodes), 2);
	assert_null(json_object_get(json_array_get(nodes, 0), "token_hash"));
	json_decref(nodes);
	fsm_close(&f);
}

/* Statements are compiled once per connection: a warm FSM applies commands without
 * preparing anything, a restore replaces the connection (every cached statement is
 * finalized and compiled again on the new one) and the result is still byte-identical. */
static void test_statement_cache_survives_restore(void **state)
{
	struct fsm a, b;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&b, &err), 0);
	workload(&a, 0, 40);
	workload(&b, 0, 40);
	uint64_t warm = a.prepares;
	assert_true(warm > 0);
	workload(&a, 40, 80);
	assert_int_equal(a.prepares, warm); /* nothing new to compile: all cached */
	/* b, warm too, installs a snapshot of a taken now, then both go on */
	unsigned char *snap;
	size_t snap_len;
	assert_int_equal(fsm_serialize(&a, &snap, &snap_len, &err), 0);
	uint64_t before = b.prepares;
	assert_int_equal(fsm_restore(&b, snap, snap_len, &err), 0);
	sqlite3_free(snap);
	for (unsigned i = 0; i < FSM_STMT_CACHE_SLOTS; i++)
		assert_null(b.stmts[i].st); /* the old connection's statements are gone */
	workload(&a, 80, 120);
	workload(&b, 80, 120);
	assert_true(b.prepares > before); /* compiled again on the new connection */
	char ha[SHA256_HEX_LEN + 1], hb[SHA256_HEX_LEN + 1];
	digest(&a, ha);
	digest(&b, hb);
	assert_string_equal(ha, hb);
	/* a nested use of a busy statement gets a private one; both release cleanly */
	sqlite3_stmt *outer = fsm_prepare(&a, "SELECT id FROM jobs ORDER BY seq");
	assert_non_null(outer);
	assert_int_equal(sqlite3_step(outer), SQLITE_ROW);
	sqlite3_stmt *inner = fsm_prepare(&a, "SELECT id FROM jobs ORDER BY seq");
	assert_non_null(inner);
	assert_ptr_not_equal(inner, outer);
	assert_int_equal(sqlite3_step(inner), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(inner, 0), "j-000001");
	fsm_release(&a, inner);
	fsm_release(&a, outer);
	/* released means reset: the cached one starts from the first row again */
	sqlite3_stmt *again = fsm_prepare(&a, "SELECT id FROM jobs ORDER BY seq");
	assert_ptr_equal(again, outer);
	assert_int_equal(sqlite3_step(again), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(again, 0), "j-000001");
	fsm_release(&a, again);
	fsm_close(&a);
	fsm_close(&b);
}

/* The change journal names the jobs rows applies touched, and asks for a full reread after
 * a restore (the scheduler's incremental refresh depends on both). */
static void test_job_change_journal(void **state)
{
	struct fsm a, b;
	struct yard_err err = {0};
	const int64_t *rowids;
	int n;
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&b, &err), 0);
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 1); /* first call: read all */
	assert_int_equal(
	    apply(&a, "job.submit", "{\"name\":\"x\",\"spec\":{}}", NULL, T0, "bob", "user", NULL),
	    201);
	assert_int_equal(
	    apply(&a, "job.submit", "{\"name\":\"y\",\"spec\":{}}", NULL, T0, "bob", "user", NULL),
	    201);
	assert_int_equal(
	    apply(&a, "token.create",
	          "{\"name\":\"t\",\"role\":\"user\",\"hash\":"
	          "\"0000000000000000000000000000000000000000000000000000000000000001\"}",
	          NULL, T0, "admin", "admin", NULL),
	    201);
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 0);
	assert_int_equal(n, 2); /* the two jobs, not the token */
	json_t *job = fsm_job_by_rowid(&a, rowids[1]);
	assert_non_null(job);
	assert_string_equal(json_string_value(json_object_get(job, "id")), "j-000002");
	assert_int_equal(json_integer_value(json_object_get(job, "seq")), 2);
	json_decref(job);
	assert_int_equal(
	    apply(&a, "job.cancel", "{\"id\":\"j-000001\"}", NULL, T0 + 1, "bob", "user", NULL),
	    200);
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 0);
	assert_int_equal(n, 1);
	job = fsm_job_by_rowid(&a, rowids[0]);
	assert_string_equal(json_string_value(json_object_get(job, "state")), "cancelled");
	json_decref(job);
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 0);
	assert_int_equal(n, 0);
	/* the nodes table has its own journal */
	assert_int_equal(fsm_nodes_changed_take(&a, &rowids, &n), 1); /* first call: all */
	uint64_t version = a.nodes_version;
	assert_int_equal(apply(&a, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	assert_true(a.nodes_version > version);
	assert_int_equal(fsm_nodes_changed_take(&a, &rowids, &n), 0);
	assert_int_equal(n, 1);
	json_t *node = fsm_node_by_rowid(&a, rowids[0]);
	assert_non_null(node);
	assert_string_equal(json_string_value(json_object_get(node, "id")), "node-a");
	json_decref(node);
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 0);
	assert_int_equal(n, 0); /* a node is not a job */
	/* a restore replaces everything: the reader must reread all */
	unsigned char *snap;
	size_t len;
	assert_int_equal(fsm_serialize(&a, &snap, &len, &err), 0);
	assert_int_equal(fsm_jobs_changed_take(&b, &rowids, &n), 1);
	assert_int_equal(fsm_restore(&b, snap, len, &err), 0);
	sqlite3_free(snap);
	assert_int_equal(fsm_jobs_changed_take(&b, &rowids, &n), 1);
	/* nobody reading (a follower): the journal stops at FSM_CHANGED_MAX and says "all" */
	for (int i = 0; i <= FSM_CHANGED_MAX; i++)
		assert_int_equal(apply(&b, "job.set_state",
		                       i % 2 ? "{\"id\":\"j-000002\",\"state\":\"pending\"}"
		                             : "{\"id\":\"j-000002\",\"state\":\"running\"}",
		                       NULL, T0 + 2, "admin", "admin", NULL),
		                 200);
	assert_int_equal(fsm_jobs_changed_take(&b, &rowids, &n), 1);
	assert_null(fsm_job_by_rowid(&b, 999));
	fsm_close(&a);
	fsm_close(&b);
}

/* The specs of jobs submitted since the take before the last are kept for the scheduler
 * (fsm_submitted_spec), equal to what the row stores; they go after two takes, on a restore,
 * and past FSM_SUBMITTED_MAX unread; a failed submission leaves none; the row read with a
 * known spec equals the row read from the stored text. */
static const json_t *submitted_spec_of(void *data, const char *id)
{
	return fsm_submitted_spec(data, id);
}

static void test_submitted_specs_are_kept_until_read(void **state)
{
	struct fsm a;
	struct yard_err err = {0};
	const int64_t *rowids;
	int n;
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 1);
	/* a follower (nobody reads them) keeps none */
	assert_int_equal(
	    apply(&a, "job.submit", "{\"name\":\"f\",\"spec\":{}}", NULL, T0, "bob", "user", NULL),
	    201);
	assert_null(fsm_submitted_spec(&a, "j-000001"));
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 0);
	a.keep_submitted = 1;
	assert_int_equal(apply(&a, "job.submit",
	                       "{\"name\":\"x\",\"spec\":{\"b\":[1,2.5,\"s\"],\"a\":{\"z\":null}}}",
	                       NULL, T0, "bob", "user", NULL),
	                 201);
	assert_int_equal(apply(&a, "job.submit", "{\"name\":\"bad name\",\"spec\":{\"c\":1}}", NULL,
	                       T0, "bob", "user", NULL),
	                 400);
	const json_t *kept = fsm_submitted_spec(&a, "j-000002");
	assert_non_null(kept);
	assert_null(fsm_submitted_spec(&a, "j-000003")); /* refused: no job, no spec */
	json_t *job = fsm_job_get(&a, "j-000002", &err);
	assert_non_null(job);
	assert_true(json_equal(json_object_get(job, "spec"), kept));
	json_decref(job);
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 0);
	assert_int_equal(n, 1);
	assert_non_null(fsm_submitted_spec(&a, "j-000002")); /* still there for this read */
	json_t *fresh = fsm_job_by_rowid(&a, rowids[0]);
	json_t *known = fsm_job_by_rowid_known(&a, rowids[0], submitted_spec_of, &a);
	assert_true(json_equal(fresh, known));
	json_decref(fresh);
	json_decref(known);
	assert_int_equal(fsm_jobs_changed_take(&a, &rowids, &n), 0);
	assert_null(fsm_submitted_spec(&a, "j-000002"));
	/* a restore forgets them */
	assert_int_equal(
	    apply(&a, "job.submit", "{\"name\":\"y\",\"spec\":{}}", NULL, T0, "bob", "user", NULL),
	    201);
	assert_non_null(fsm_submitted_spec(&a, "j-000003"));
	unsigned char *snap;
	size_t len;
	assert_int_equal(fsm_serialize(&a, &snap, &len, &err), 0);
	assert_int_equal(fsm_restore(&a, snap, len, &err), 0);
	sqlite3_free(snap);
	assert_null(fsm_submitted_spec(&a, "j-000003"));
	/* nobody reading (a follower): at most FSM_SUBMITTED_MAX are kept */
	for (int i = 0; i <= FSM_SUBMITTED_MAX; i++)
		assert_int_equal(apply(&a, "job.submit", "{\"name\":\"z\",\"spec\":{}}", NULL, T0,
		                       "bob", "user", NULL),
		                 201);
	assert_true(json_object_size(a.submitted) <= FSM_SUBMITTED_MAX);
	fsm_close(&a);
}

/* A job's spec "after" names jobs that exist and have not failed or been cancelled: a
 * mistyped id or a job that already failed would keep it waiting for ever. */
static void test_submit_after_checks_the_jobs(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(apply(&f, "job.submit", "{\"name\":\"a\",\"spec\":{\"name\":\"a\"}}", NULL,
	                       T0, "alice", "user", &r),
	                 201);
	assert_int_equal(apply(&f, "job.submit",
	                       "{\"name\":\"b\",\"spec\":{\"name\":\"b\",\"after\":[\"j-000001\","
	                       "\"j-000009\"]}}",
	                       NULL, T0, "alice", "user", &r),
	                 400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "after");
	assert_string_equal(json_string_value(json_object_get(r, "error")),
	                    "after[1]: no job j-000009");
	assert_int_equal(
	    apply(&f, "job.submit",
	          "{\"name\":\"b\",\"spec\":{\"name\":\"b\",\"after\":[\"j-000001\"]}}", NULL, T0,
	          "alice", "user", &r),
	    201);
	assert_int_equal(
	    apply(&f, "job.cancel", "{\"id\":\"j-000001\"}", NULL, T0, "alice", "user", &r), 200);
	assert_int_equal(
	    apply(&f, "job.submit",
	          "{\"name\":\"c\",\"spec\":{\"name\":\"c\",\"after\":[\"j-000001\"]}}", NULL, T0,
	          "alice", "user", &r),
	    400);
	assert_string_equal(
	    json_string_value(json_object_get(r, "error")),
	    "after[0]: job j-000001 has ended cancelled: this job could never start");
	fsm_close(&f);
}

/* A token created with ttl_s works until its command's time plus ttl_s, then is refused by
 * name with when it expired, also when the cache remembers it; the list shows the expiry; a
 * bad ttl_s is refused by name; an image from before expiry gets the column. */
static void test_token_expiry(void **state)
{
	struct fsm f, g;
	struct yard_err err = {0};
	const json_t *r;
	char role[16], name[FSM_NAME_MAX + 1], hash[SHA256_HEX_LEN + 1], args[256];
	int64_t expires = -1;
	assert_int_equal(fsm_init(&f, &err), 0);
	sha256_hex("ci-secret", 9, hash);
	snprintf(args, sizeof args,
	         "{\"name\":\"ci\",\"role\":\"user\",\"hash\":\"%s\",\"ttl_s\":60}", hash);
	assert_int_equal(apply(&f, "token.create", args, NULL, T0, "admin", "admin", &r), 201);
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(r, "body"), "expires_ms")),
	    T0 + 60000);
	assert_int_equal(fsm_token_lookup(&f, hash, T0 + 59999, role, name, &expires, &err), 0);
	assert_int_equal(expires, T0 + 60000);
	for (int round = 0; round < 2; round++) /* the second from the cache */
		assert_int_equal(fsm_auth_lookup(&f, hash, T0 + 1000, role, name, &err), 0);
	memset(&err, 0, sizeof err);
	assert_int_equal(fsm_auth_lookup(&f, hash, T0 + 60000, role, name, &err), YARD_EPERM);
	assert_non_null(strstr(err.msg, "token t-000001 (ci) expired at "));
	memset(&err, 0, sizeof err);
	assert_int_equal(fsm_token_lookup(&f, hash, T0 + 60000, role, name, NULL, &err),
	                 YARD_EPERM);
	json_t *list = fsm_tokens_list(&f, &err);
	json_t *t = json_array_get(json_object_get(list, "tokens"), 0);
	assert_int_equal(json_integer_value(json_object_get(t, "expires_ms")), T0 + 60000);
	json_decref(list);
	/* without ttl_s: never expires, no expires_ms */
	sha256_hex("forever", 7, hash);
	snprintf(args, sizeof args, "{\"name\":\"bot\",\"role\":\"user\",\"hash\":\"%s\"}", hash);
	assert_int_equal(apply(&f, "token.create", args, NULL, T0, "admin", "admin", &r), 201);
	assert_null(json_object_get(json_object_get(r, "body"), "expires_ms"));
	assert_int_equal(fsm_auth_lookup(&f, hash, INT64_MAX / 2, role, name, &err), 0);
	const char *bad[] = {"0", "-5", "\"60\"", "315360001", "1.5"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(args, sizeof args,
		         "{\"name\":\"x\",\"role\":\"user\",\"hash\":\"%064d\",\"ttl_s\":%s}", 7,
		         bad[i]);
		assert_int_equal(apply(&f, "token.create", args, NULL, T0, "admin", "admin", &r),
		                 400);
		assert_string_equal(json_string_value(json_object_get(r, "field")), "ttl_s");
	}
	/* an image without the column (before expiry) restores with it */
	assert_int_equal(fsm_exec(&f, "ALTER TABLE tokens DROP COLUMN expires_ms"), 0);
	unsigned char *snap;
	size_t len;
	assert_int_equal(fsm_serialize(&f, &snap, &len, &err), 0);
	assert_int_equal(fsm_init(&g, &err), 0);
	assert_int_equal(fsm_restore(&g, snap, len, &err), 0);
	assert_int_equal(fsm_auth_lookup(&g, hash, T0, role, name, &err), 0);
	snprintf(args, sizeof args,
	         "{\"name\":\"ci2\",\"role\":\"user\",\"hash\":\"%064d\",\"ttl_s\":5}", 9);
	assert_int_equal(apply(&g, "token.create", args, NULL, T0, "admin", "admin", &r), 201);
	sqlite3_free(snap);
	fsm_close(&g);
	fsm_close(&f);
}

/* fsm_auth_lookup remembers principals but never outlives a change: a revoked token, a node
 * that registered again with a new token and a restore are seen at once; an unknown hash is
 * refused; many principals do not break it. */
static void test_auth_cache_follows_tokens_and_nodes(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	char role[16], name[FSM_NAME_MAX + 1], hash[SHA256_HEX_LEN + 1], args[512];
	const char *node_hash = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	assert_int_equal(fsm_init(&f, &err), 0);
	sha256_hex("alice-secret", 12, hash);
	snprintf(args, sizeof args, "{\"name\":\"alice\",\"role\":\"user\",\"hash\":\"%s\"}", hash);
	assert_int_equal(apply(&f, "token.create", args, NULL, T0, "admin", "admin", &r), 201);
	assert_int_equal(apply(&f, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	for (int round = 0; round < 2; round++) { /* the second round answers from the cache */
		assert_int_equal(fsm_auth_lookup(&f, hash, T0, role, name, &err), 0);
		assert_string_equal(role, "user");
		assert_string_equal(name, "alice");
		assert_int_equal(fsm_auth_lookup(&f, node_hash, T0, role, name, &err), 0);
		assert_string_equal(role, "node");
		assert_string_equal(name, "node-a");
		assert_int_equal(fsm_auth_lookup(&f, "00", T0, role, name, &err), YARD_ENOTFOUND);
	}
	assert_int_equal(
	    apply(&f, "token.revoke", "{\"id\":\"t-000001\"}", NULL, T0, "admin", "admin", &r),
	    200);
	assert_int_equal(fsm_auth_lookup(&f, hash, T0, role, name, &err), YARD_ENOTFOUND);
	/* node-a registers again with another token: the old one stops working */
	char *again = strdup(NODE_A);
	char *at = strstr(again, node_hash);
	assert_non_null(at);
	memset(at, 'd', 64);
	char new_hash[SHA256_HEX_LEN + 1];
	snprintf(new_hash, sizeof new_hash, "%.64s", at);
	assert_int_equal(apply(&f, "node.register", again, NULL, T0, "nodes", "agent", NULL), 200);
	assert_int_equal(fsm_auth_lookup(&f, node_hash, T0, role, name, &err), YARD_ENOTFOUND);
	assert_int_equal(fsm_auth_lookup(&f, new_hash, T0, role, name, &err), 0);
	assert_string_equal(name, "node-a");
	/* a restore from before the second registration brings the old token back */
	struct fsm g;
	unsigned char *snap;
	size_t len;
	assert_int_equal(fsm_init(&g, &err), 0);
	assert_int_equal(apply(&g, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	assert_int_equal(fsm_serialize(&g, &snap, &len, &err), 0);
	assert_int_equal(fsm_restore(&f, snap, len, &err), 0);
	sqlite3_free(snap);
	fsm_close(&g);
	assert_int_equal(fsm_auth_lookup(&f, new_hash, T0, role, name, &err), YARD_ENOTFOUND);
	assert_int_equal(fsm_auth_lookup(&f, node_hash, T0, role, name, &err), 0);
	/* many principals: every one is still found after the cache grew */
	for (int i = 0; i < 600; i++) {
		snprintf(hash, sizeof hash, "%064d", i + 1);
		snprintf(args, sizeof args, "{\"name\":\"u%d\",\"role\":\"user\",\"hash\":\"%s\"}",
		         i, hash);
		assert_int_equal(apply(&f, "token.create", args, NULL, T0, "admin", "admin", &r),
		                 201);
	}
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 600; i++) {
			char want[16];
			snprintf(hash, sizeof hash, "%064d", i + 1);
			snprintf(want, sizeof want, "u%d", i);
			assert_int_equal(fsm_auth_lookup(&f, hash, T0, role, name, &err), 0);
			assert_string_equal(name, want);
		}
	free(again);
	fsm_close(&f);
}

/* parallel "auto": the first placement must carry the planner's layout, with as many ranks
 * as the placement; a fixed-layout job may not carry one; the plan is stored with the job
 * and survives a snapshot, and a snapshot from before jobs had plans gains the column. */
static json_int_t effective(struct fsm *f, const char *id, const char *key)
{
	struct yard_err err = {0};
	json_t *job = fsm_job_get(f, id, &err);
	assert_non_null(job);
	json_t *v = json_object_get(json_object_get(job, "effective"), key);
	json_int_t n = json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
	json_decref(job);
	return n;
}

/* failure.allow_shrink_dp: a re-placement may name a smaller dp; the job then shows it and
 * an event says why. A job that does not allow it, a first placement, a dp the spec cannot
 * run and a rank count that does not match are refused, naming the field. */
static void test_shrunk_placement_is_recorded(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(apply(&f, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	assert_int_equal(apply(&f, "node.register", NODE_B, NULL, T0, "nodes", "agent", NULL), 200);
	const char *spec =
	    "{\"name\":\"s\",\"train\":{\"batch_size\":8},\"parallel\":{\"dp\":4,\"tp\":1,\"pp\":1,"
	    "\"micro_batches\":2},\"failure\":{\"allow_shrink_dp\":%s}}";
	char args[1024];
	snprintf(args, sizeof args, "{\"name\":\"s\",\"spec\":%s}", spec);
	char body[1024];
	snprintf(body, sizeof body, args, "true");
	assert_int_equal(apply(&f, "job.submit", body, NULL, T0, "alice", "user", NULL), 201);
	snprintf(body, sizeof body, args, "false");
	assert_int_equal(apply(&f, "job.submit", body, NULL, T0, "alice", "user", NULL), 201);
	const char *four = "[{\"node\":\"node-a\",\"device\":0},{\"node\":\"node-a\",\"device\":1},"
	                   "{\"node\":\"node-b\",\"device\":0},{\"node\":\"node-b\",\"device\":1}]";
	const char *two = "[{\"node\":\"node-b\",\"device\":0},{\"node\":\"node-b\",\"device\":1}]";
	/* a first placement never shrinks */
	snprintf(body, sizeof body, "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":%s,\"dp\":2}",
	         two);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0, "yardd", "admin", &r), 409);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "dp");
	snprintf(body, sizeof body, "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":%s,\"dp\":4}",
	         four);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0, "yardd", "admin", NULL), 200);
	assert_int_equal(effective(&f, "j-000001", "dp"), 4);
	assert_int_equal(effective(&f, "j-000001", "shrunk"), 0);
	assert_int_equal(apply(&f, "node.set_state",
	                       "{\"id\":\"node-a\",\"state\":\"down\",\"reason\":\"no heartbeat\"}",
	                       NULL, T0 + 1, "yardd", "admin", NULL),
	                 200);
	assert_int_equal(apply(&f, "job.restart",
	                       "{\"id\":\"j-000001\",\"generation\":1,\"reason\":\"node-a down\","
	                       "\"max_restarts\":3}",
	                       NULL, T0 + 2, "yardd", "admin", NULL),
	                 200);
	/* dp 3 does not divide the batch (8 = dp x 2 x rows); 2 ranks are not dp 1's world */
	snprintf(body, sizeof body, "{\"id\":\"j-000001\",\"generation\":2,\"ranks\":%s,\"dp\":3}",
	         two);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0 + 3, "yardd", "admin", &r), 400);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")),
	                       "train.batch_size: 8 is not divisible"));
	snprintf(body, sizeof body, "{\"id\":\"j-000001\",\"generation\":2,\"ranks\":%s,\"dp\":1}",
	         two);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0 + 3, "yardd", "admin", &r), 400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "ranks");
	assert_string_equal(job_state(&f, "j-000001", NULL, NULL), "restarting");
	snprintf(body, sizeof body,
	         "{\"id\":\"j-000001\",\"generation\":2,\"ranks\":%s,\"dp\":2,"
	         "\"shrink_reason\":\"needs 4 devices, 2 free\"}",
	         two);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0 + 3, "yardd", "admin", NULL), 200);
	assert_int_equal(effective(&f, "j-000001", "dp"), 2);
	assert_int_equal(effective(&f, "j-000001", "world"), 2);
	assert_int_equal(effective(&f, "j-000001", "spec_dp"), 4);
	assert_int_equal(effective(&f, "j-000001", "shrunk"), 1);
	json_t *page = fsm_events_list(&f, 0, 100, "j-000001", &err);
	json_t *events = json_object_get(page, "events");
	int found = 0;
	for (size_t i = 0; i < json_array_size(events); i++) {
		const json_t *e = json_array_get(events, i);
		if (strcmp(json_string_value(json_object_get(e, "type")), "job.shrunk") == 0) {
			assert_string_equal(json_string_value(json_object_get(e, "message")),
			                    "job j-000001 re-placed with dp 2 (spec dp 4), 2 of 4 "
			                    "ranks: needs 4 devices, 2 free");
			found++;
		}
	}
	assert_int_equal(found, 1);
	json_decref(page);
	/* a snapshot keeps it; an image from before jobs.shrunk_dp restores with the column */
	struct fsm g;
	restore_copy(&f, &g);
	assert_int_equal(effective(&g, "j-000001", "dp"), 2);
	assert_int_equal(
	    sqlite3_exec(g.db, "ALTER TABLE jobs DROP COLUMN shrunk_dp", NULL, NULL, NULL),
	    SQLITE_OK);
	struct fsm old_image;
	restore_copy(&g, &old_image);
	fsm_close(&g);
	assert_int_equal(effective(&old_image, "j-000001", "dp"), 4);
	assert_int_equal(effective(&old_image, "j-000001", "shrunk"), 0);
	fsm_close(&old_image);
	/* the next re-placement with the spec's dp clears it */
	assert_int_equal(apply(&f, "node.set_state", "{\"id\":\"node-a\",\"state\":\"up\"}", NULL,
	                       T0 + 4, "yardd", "admin", NULL),
	                 200);
	assert_int_equal(apply(&f, "job.restart",
	                       "{\"id\":\"j-000001\",\"generation\":2,\"reason\":\"again\","
	                       "\"max_restarts\":3}",
	                       NULL, T0 + 5, "yardd", "admin", NULL),
	                 200);
	snprintf(body, sizeof body, "{\"id\":\"j-000001\",\"generation\":3,\"ranks\":%s,\"dp\":4}",
	         four);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0 + 6, "yardd", "admin", NULL), 200);
	assert_int_equal(effective(&f, "j-000001", "shrunk"), 0);
	assert_int_equal(effective(&f, "j-000001", "world"), 4);
	/* a job that does not allow shrinking */
	assert_int_equal(apply(&f, "job.finish",
	                       "{\"id\":\"j-000001\",\"generation\":3,\"state\":\"succeeded\","
	                       "\"reason\":\"done\"}",
	                       NULL, T0 + 7, "yardd", "admin", NULL),
	                 200);
	snprintf(body, sizeof body, "{\"id\":\"j-000002\",\"generation\":1,\"ranks\":%s,\"dp\":2}",
	         two);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0 + 8, "yardd", "admin", &r), 400);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")),
	                       "failure.allow_shrink_dp is false"));
	assert_string_equal(job_state(&f, "j-000002", NULL, NULL), "pending");
	fsm_close(&f);
}

/* f: a new FSM with node-a and node-b (2 devices each) and job j-000001 of `ranks` ranks. */
static void two_nodes_and_a_job(struct fsm *f, int ranks)
{
	struct yard_err err = {0};
	char spec[96];
	assert_int_equal(fsm_init(f, &err), 0);
	assert_int_equal(apply(f, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	assert_int_equal(apply(f, "node.register", NODE_B, NULL, T0, "nodes", "agent", NULL), 200);
	snprintf(spec, sizeof spec, "{\"name\":\"j\",\"spec\":{\"ranks\":%d}}", ranks);
	assert_int_equal(apply(f, "job.submit", spec, NULL, T0, "alice", "user", NULL), 201);
}

/* A placement's slots are judged in rank order, the first bad one named; a device given
 * twice names the first rank that has it. */
static void test_placement_refusals_name_the_first_bad_slot(void **state)
{
	static const struct {
		const char *slots, *error;
	} cases[] = {
	    {"a1,a0,b0,a0", "ranks[3]: node-a:0 is given to rank 1 too"},
	    {"a0,a0,a1,a0", "ranks[1]: node-a:0 is given to rank 0 too"},
	    {"a0,a0,a9,b1", "ranks[1]: node-a:0 is given to rank 0 too"},
	    {"a9,a0,a0,b1", "ranks[0]: node node-a has 2 devices, no device 9"},
	    {"b1,b0,c0,b1", "ranks: no node node-c"},
	    {"b1,b0,a1,b1", "ranks[3]: node-b:1 is given to rank 0 too"},
	};
	struct fsm f;
	const json_t *r;
	(void)state;
	two_nodes_and_a_job(&f, 4);
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		char body[512] = "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":[";
		/* "a1,b0": node-a device 1, node-b device 0 */
		for (const char *p = cases[c].slots; p[0] != '\0' && p[1] != '\0'; p += 3) {
			size_t len = strlen(body);
			snprintf(body + len, sizeof body - len,
			         "%s{\"node\":\"node-%c\",\"device\":%c}",
			         p == cases[c].slots ? "" : ",", p[0], p[1]);
			if (p[2] == '\0')
				break;
		}
		strcat(body, "]}");
		assert_int_equal(apply(&f, "job.assign", body, NULL, T0, "yardd", "admin", &r),
		                 409);
		assert_string_equal(json_string_value(json_object_get(r, "error")), cases[c].error);
		assert_string_equal(job_state(&f, "j-000001", NULL, NULL), "pending");
	}
	fsm_close(&f);
}

/* The job.placed event counts a placement's ranks per node, nodes in order of their first
 * rank, whatever the order of the slots. */
static void test_placed_event_counts_ranks_per_node(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	(void)state;
	two_nodes_and_a_job(&f, 4);
	assert_int_equal(
	    apply(&f, "job.assign",
	          "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":[{\"node\":\"node-b\","
	          "\"device\":1},{\"node\":\"node-a\",\"device\":0},{\"node\":\"node-b\","
	          "\"device\":0},{\"node\":\"node-a\",\"device\":1}]}",
	          NULL, T0, "yardd", "admin", NULL),
	    200);
	json_t *page = fsm_events_list(&f, 0, 100, "j-000001", &err);
	const char *placed = NULL;
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(page, "events"), i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "type")), "job.placed") == 0)
			placed = json_string_value(json_object_get(e, "message"));
	}
	assert_non_null(placed);
	assert_string_equal(placed, "job j-000001 placed (generation 1): 4 rank(s) on node-b (2), "
	                            "node-a (2)");
	json_decref(page);
	fsm_close(&f);
}

/* The slots whose running flag disagrees with their job's state. */
static int64_t running_flags(struct fsm *f)
{
	sqlite3_stmt *st;
	int64_t n = -1;
	assert_int_equal(sqlite3_prepare_v2(f->db,
	                                    "SELECT count(*) FROM assignments a JOIN jobs j"
	                                    " ON j.id = a.job WHERE a.running !="
	                                    " (j.state = 'running')",
	                                    -1, &st, NULL),
	                 SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

/* The node's running slots (fsm_node_slots) as "job/rank" words. */
static void assert_node_slots(struct fsm *f, const char *node, const char *want)
{
	struct fsm_slot *slots = NULL;
	int n = fsm_node_slots(f, node, &slots);
	char got[256] = "";
	assert_true(n >= 0);
	for (int i = 0; i < n; i++) {
		size_t len = strlen(got);
		snprintf(got + len, sizeof got - len, "%s%s/%lld", len ? " " : "", slots[i].job,
		         (long long)slots[i].rank);
	}
	free(slots);
	assert_string_equal(got, want);
}

/* Applies a command (as the scheduler would) that must give status, then checks node-a's
 * running slots and that every slot's running flag agrees with its job. */
static void apply_then_slots(struct fsm *f, const char *op, const char *args, int64_t ts,
                             int status, const char *want)
{
	assert_int_equal(apply(f, op, args, NULL, ts, "yardd", "admin", NULL), status);
	assert_node_slots(f, "node-a", want);
	assert_int_equal(running_flags(f), 0);
}

/* Submits n jobs of 2 ranks as alice: j-000001 and on. */
static void submit_two_rank_jobs(struct fsm *f, int n)
{
	for (int k = 0; k < n; k++)
		assert_int_equal(apply(f, "job.submit", "{\"name\":\"j\",\"spec\":{\"ranks\":2}}",
		                       NULL, T0, "alice", "user", NULL),
		                 201);
}

/* The active jobs' rowids (a new leader's reread) come in submission order across states
 * (read state by state from the index and merged), without the ended ones. */
static void test_active_rowids_in_submission_order(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	(void)state;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(apply(&f, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	assert_int_equal(apply(&f, "node.register", NODE_B, NULL, T0, "nodes", "agent", NULL), 200);
	submit_two_rank_jobs(&f, 6);
	/* j-000002 and j-000005 run, j-000003 ends */
	const char *on = "{\"id\":\"%s\",\"generation\":1,\"ranks\":[{\"node\":\"%s\","
	                 "\"device\":0},{\"node\":\"%s\",\"device\":1}]}";
	char body[256];
	snprintf(body, sizeof body, on, "j-000002", "node-a", "node-a");
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0, "yardd", "admin", NULL), 200);
	snprintf(body, sizeof body, on, "j-000005", "node-b", "node-b");
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0, "yardd", "admin", NULL), 200);
	assert_int_equal(
	    apply(&f, "job.cancel", "{\"id\":\"j-000003\"}", NULL, T0, "alice", "user", NULL), 200);
	int n = 0;
	int64_t *ids = fsm_jobs_active_rowids(&f, &n);
	assert_non_null(ids);
	json_t *active = fsm_jobs_active(&f);
	assert_int_equal(n, 5);
	assert_int_equal(json_array_size(active), 5);
	const char *want[] = {"j-000001", "j-000002", "j-000004", "j-000005", "j-000006"};
	for (int i = 0; i < n; i++) {
		json_t *row = fsm_job_by_rowid(&f, ids[i]);
		assert_string_equal(json_string_value(json_object_get(row, "id")), want[i]);
		assert_string_equal(
		    json_string_value(json_object_get(json_array_get(active, (size_t)i), "id")),
		    want[i]);
		json_decref(row);
	}
	json_decref(active);
	free(ids);
	fsm_close(&f);
}

/* assignments.running follows every state change of its job, and the node's slots, the
 * device holder check and an upgraded image read it. */
static void test_running_flag_follows_job_state(void **state)
{
	struct fsm f, g;
	struct yard_err err = {0};
	const json_t *r;
	(void)state;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(apply(&f, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	submit_two_rank_jobs(&f, 3);
	const char *on01 = "{\"id\":\"%s\",\"generation\":%d,\"ranks\":[{\"node\":\"node-a\","
	                   "\"device\":0},{\"node\":\"node-a\",\"device\":1}]}";
	char body[256];
	snprintf(body, sizeof body, on01, "j-000001", 1);
	apply_then_slots(&f, "job.assign", body, T0, 200, "j-000001/0 j-000001/1");
	/* held while j-000001 runs */
	snprintf(body, sizeof body, on01, "j-000002", 1);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0, "yardd", "admin", &r), 409);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "j-000001"));
	/* finished: its slots stay (the job's layout) but no longer run or hold devices */
	apply_then_slots(&f, "job.finish",
	                 "{\"id\":\"j-000001\",\"generation\":1,\"state\":\"succeeded\","
	                 "\"reason\":\"done\"}",
	                 T0 + 1, 200, "");
	apply_then_slots(&f, "job.assign", body, T0 + 2, 200, "j-000002/0 j-000002/1");
	/* restarting, then running again on the same devices */
	apply_then_slots(&f, "job.restart",
	                 "{\"id\":\"j-000002\",\"generation\":1,\"reason\":\"x\","
	                 "\"max_restarts\":3}",
	                 T0 + 3, 200, "");
	snprintf(body, sizeof body, on01, "j-000003", 1);
	apply_then_slots(&f, "job.assign", body, T0 + 4, 200, "j-000003/0 j-000003/1");
	apply_then_slots(&f, "job.cancel", "{\"id\":\"j-000003\"}", T0 + 5, 200, "");
	snprintf(body, sizeof body, on01, "j-000002", 2);
	apply_then_slots(&f, "job.assign", body, T0 + 6, 200, "j-000002/0 j-000002/1");

	/* an image from before the flag: restored with it set from the jobs' states, and the
	 * trigger keeps it from then on */
	assert_int_equal(sqlite3_exec(f.db,
	                              "DROP TRIGGER assignments_running;"
	                              "DROP INDEX assignments_running;"
	                              "ALTER TABLE assignments DROP COLUMN running",
	                              NULL, NULL, NULL),
	                 SQLITE_OK);
	restore_copy(&f, &g);
	assert_int_equal(running_flags(&g), 0);
	assert_node_slots(&g, "node-a", "j-000002/0 j-000002/1");
	apply_then_slots(&g, "job.finish",
	                 "{\"id\":\"j-000002\",\"generation\":2,\"state\":\"failed\","
	                 "\"reason\":\"x\"}",
	                 T0 + 7, 200, "");
	fsm_close(&g);
	fsm_close(&f);
}

/* A node's slots come by job and rank, whatever devices the ranks hold (the index reads
 * them by device): the heartbeat's desired set and its tag follow that order. */
static void test_node_slots_by_job_and_rank(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	(void)state;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(
	    apply(&f, "node.register",
	          "{\"name\":\"node-a\",\"host\":\"127.0.0.1\",\"port_base\":29500,\"devices\":"
	          "[{\"index\":0,\"kind\":\"cpu\"},{\"index\":1,\"kind\":\"cpu\"},"
	          "{\"index\":2,\"kind\":\"cpu\"},{\"index\":3,\"kind\":\"cpu\"}],\"token_hash\":"
	          "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
	          NULL, T0, "nodes", "agent", NULL),
	    200);
	submit_two_rank_jobs(&f, 2);
	/* devices 0..3 hold j-000002/1, j-000001/1, j-000001/0, j-000002/0 */
	const char *on = "{\"id\":\"%s\",\"generation\":1,\"ranks\":[{\"node\":\"node-a\","
	                 "\"device\":%d},{\"node\":\"node-a\",\"device\":%d}]}";
	char body[256];
	snprintf(body, sizeof body, on, "j-000002", 3, 0);
	apply_then_slots(&f, "job.assign", body, T0, 200, "j-000002/0 j-000002/1");
	snprintf(body, sizeof body, on, "j-000001", 2, 1);
	apply_then_slots(&f, "job.assign", body, T0, 200,
	                 "j-000001/0 j-000001/1 j-000002/0 j-000002/1");
	struct fsm_slot *slots = NULL;
	assert_int_equal(fsm_node_slots(&f, "node-b", &slots), 0);
	assert_null(slots);
	fsm_close(&f);
}

/* A cache of fsm_node_slots kept the way the leader keeps it: each node's slots as a
 * "job/rank@generation" text, dropped when fsm_slot_nodes_changed_take names the node (or
 * says every node). */
struct slot_cache {
	struct fsm *f;
	char text[2][256];
	int cached[2];
	int names_seen; /* names the journal gave, over every take */
};
static const char *const CACHE_NODES[2] = {"node-a", "node-b"};

static void slots_text(struct fsm *f, const char *node, char *out, size_t size)
{
	struct fsm_slot *slots = NULL;
	int n = fsm_node_slots(f, node, &slots);
	assert_true(n >= 0);
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		size_t len = strlen(out);
		snprintf(out + len, size - len, "%s%s/%lld@%lld", len ? " " : "", slots[i].job,
		         (long long)slots[i].rank, (long long)slots[i].generation);
	}
	free(slots);
}

/* Takes the journal, drops what it names, then checks every node's cached text against a
 * fresh read (and caches it). Returns how many names the take gave (-1: every node). */
static int cache_check(struct slot_cache *c)
{
	const char(*names)[FSM_NAME_MAX + 1] = NULL;
	int n = 0, all = fsm_slot_nodes_changed_take(c->f, &names, &n);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < n; i++)
			if (strcmp(names[i], CACHE_NODES[k]) == 0)
				c->cached[k] = 0;
	if (all)
		c->cached[0] = c->cached[1] = 0;
	c->names_seen += n;
	for (int k = 0; k < 2; k++) {
		char fresh[256];
		slots_text(c->f, CACHE_NODES[k], fresh, sizeof fresh);
		if (c->cached[k])
			assert_string_equal(c->text[k], fresh);
		snprintf(c->text[k], sizeof c->text[k], "%s", fresh);
		c->cached[k] = 1;
	}
	return all ? -1 : n;
}

static void cache_apply(struct slot_cache *c, const char *op, const char *args, int64_t ts,
                        int status)
{
	assert_int_equal(apply(c->f, op, args, NULL, ts, "yardd", "admin", NULL), status);
	cache_check(c);
}

/* The journal of nodes whose slots changed keeps such a cache exact through placements on
 * two nodes, refused placements (rolled back), every state change, a new generation, a
 * delete and a restore; and it names only the nodes that changed. */
static void test_slot_nodes_journal_keeps_a_cache_exact(void **state)
{
	struct fsm f, g;
	struct yard_err err = {0};
	struct slot_cache c = {.f = &f};
	(void)state;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(cache_check(&c), -1); /* first take: every node */
	assert_int_equal(apply(&f, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	assert_int_equal(apply(&f, "node.register", NODE_B, NULL, T0, "nodes", "agent", NULL), 200);
	submit_two_rank_jobs(&f, 3);
#ifdef HAVE_SQLITE_PREUPDATE_HOOK
	assert_int_equal(cache_check(&c), 0); /* nothing placed: no slot changed */
#else
	assert_int_equal(cache_check(&c), -1); /* no hook: the journal always says every node */
#endif
	const char *across = "{\"id\":\"%s\",\"generation\":%d,\"ranks\":[{\"node\":\"node-a\","
	                     "\"device\":%d},{\"node\":\"node-b\",\"device\":%d}]}";
	const char *on_a = "{\"id\":\"%s\",\"generation\":%d,\"ranks\":[{\"node\":\"node-a\","
	                   "\"device\":0},{\"node\":\"node-a\",\"device\":1}]}";
	char body[256];
	snprintf(body, sizeof body, across, "j-000001", 1, 0, 0);
	assert_int_equal(apply(&f, "job.assign", body, NULL, T0, "yardd", "admin", NULL), 200);
#ifdef HAVE_SQLITE_PREUPDATE_HOOK
	assert_int_equal(cache_check(&c), 2);
#else
	assert_int_equal(cache_check(&c), -1);
#endif
	assert_string_equal(c.text[0], "j-000001/0@1");
	assert_string_equal(c.text[1], "j-000001/1@1");
	/* refused: node-a:0 and node-b:0 are held */
	snprintf(body, sizeof body, on_a, "j-000002", 1);
	cache_apply(&c, "job.assign", body, T0, 409);
	snprintf(body, sizeof body, across, "j-000002", 1, 1, 0);
	cache_apply(&c, "job.assign", body, T0, 409);
	snprintf(body, sizeof body, across, "j-000002", 1, 1, 1);
	cache_apply(&c, "job.assign", body, T0, 200);
	cache_apply(&c, "job.restart",
	            "{\"id\":\"j-000001\",\"generation\":1,\"reason\":\"x\",\"max_restarts\":3}",
	            T0 + 1, 200);
	assert_string_equal(c.text[0], "j-000002/0@1");
	snprintf(body, sizeof body, across, "j-000001", 2, 0, 0);
	cache_apply(&c, "job.assign", body, T0 + 2, 200);
	assert_string_equal(c.text[0], "j-000001/0@2 j-000002/0@1");
	cache_apply(&c, "job.finish",
	            "{\"id\":\"j-000002\",\"generation\":1,\"state\":\"succeeded\","
	            "\"reason\":\"done\"}",
	            T0 + 3, 200);
	assert_string_equal(c.text[1], "j-000001/1@2");
	cache_apply(&c, "job.delete", "{\"id\":\"j-000002\"}", T0 + 4, 200);
	cache_apply(&c, "job.cancel", "{\"id\":\"j-000001\"}", T0 + 5, 200);
	assert_string_equal(c.text[0], "");
	snprintf(body, sizeof body, on_a, "j-000003", 1);
	cache_apply(&c, "job.assign", body, T0 + 6, 200);
	assert_string_equal(c.text[0], "j-000003/0@1 j-000003/1@1");
	/* a restore replaces every slot at once */
	restore_copy(&f, &g);
	assert_int_equal(apply(&g, "job.finish",
	                       "{\"id\":\"j-000003\",\"generation\":1,\"state\":\"failed\","
	                       "\"reason\":\"x\"}",
	                       NULL, T0 + 7, "yardd", "admin", NULL),
	                 200);
	unsigned char *img = NULL;
	size_t len = 0;
	assert_int_equal(fsm_serialize(&g, &img, &len, &err), 0);
	assert_int_equal(fsm_restore(&f, img, len, &err), 0);
	sqlite3_free(img);
	assert_int_equal(cache_check(&c), -1);
	assert_string_equal(c.text[0], "");
#ifdef HAVE_SQLITE_PREUPDATE_HOOK
	assert_true(c.names_seen > 0);
#endif
	fsm_close(&g);
	fsm_close(&f);
}

static void test_auto_job_placement_records_plan(void **state)
{
	struct fsm f, g;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(apply(&f, "node.register", NODE_A, NULL, T0, "nodes", "agent", NULL), 200);
	apply(&f, "job.submit", "{\"name\":\"a\",\"spec\":{\"parallel\":\"auto\"}}", NULL, T0,
	      "alice", "user", NULL);
	apply(&f, "job.submit", "{\"name\":\"b\",\"spec\":{\"ranks\":2}}", NULL, T0, "alice",
	      "user", NULL);
	const char *two = "[{\"node\":\"node-a\",\"device\":0},{\"node\":\"node-a\",\"device\":1}]";
	const char *plan2 = "{\"layout\":{\"dp\":2,\"tp\":1,\"pp\":1,\"schedule\":\"1f1b\","
	                    "\"virtual_stages\":1,\"micro_batches\":1},\"step_ms\":3.5}";
	const char *plan1 = "{\"layout\":{\"dp\":1,\"tp\":1,\"pp\":1,\"schedule\":\"1f1b\","
	                    "\"virtual_stages\":1,\"micro_batches\":1}}";
	char args[1024];
	snprintf(args, sizeof args, "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":%s}", two);
	assert_int_equal(apply(&f, "job.assign", args, NULL, T0, "yardd", "admin", &r), 400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "plan");
	snprintf(args, sizeof args,
	         "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":%s,\"plan\":%s}", two, plan1);
	assert_int_equal(apply(&f, "job.assign", args, NULL, T0, "yardd", "admin", &r), 400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "ranks");
	snprintf(args, sizeof args,
	         "{\"id\":\"j-000002\",\"generation\":1,\"ranks\":%s,\"plan\":%s}", two, plan2);
	assert_int_equal(apply(&f, "job.assign", args, NULL, T0, "yardd", "admin", &r), 400);
	assert_string_equal(json_string_value(json_object_get(r, "field")), "plan");
	assert_string_equal(job_state(&f, "j-000001", NULL, NULL), "pending");
	snprintf(args, sizeof args,
	         "{\"id\":\"j-000001\",\"generation\":1,\"ranks\":%s,\"plan\":%s}", two, plan2);
	assert_int_equal(apply(&f, "job.assign", args, NULL, T0, "yardd", "admin", NULL), 200);
	json_t *job = fsm_job_get(&f, "j-000001", &err);
	json_t *want = json_loads(plan2, 0, NULL);
	assert_true(json_equal(json_object_get(job, "plan"), want));
	json_decref(job);
	job = fsm_job_get(&f, "j-000002", &err);
	assert_null(json_object_get(job, "plan"));
	json_decref(job);

	/* snapshot round trip keeps it */
	restore_copy(&f, &g);
	job = fsm_job_get(&g, "j-000001", &err);
	assert_true(json_equal(json_object_get(job, "plan"), want));
	json_decref(job);
	fsm_close(&g);

	/* an image from before jobs.plan existed restores with the column added */
	assert_int_equal(sqlite3_exec(f.db, "ALTER TABLE jobs DROP COLUMN plan", NULL, NULL, NULL),
	                 SQLITE_OK);
	restore_copy(&f, &g);
	job = fsm_job_get(&g, "j-000001", &err);
	assert_non_null(job);
	assert_null(json_object_get(job, "plan"));
	json_decref(job);
	fsm_close(&g);
	json_decref(want);
	fsm_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_commands_give_byte_identical_databases),
	    cmocka_unit_test(test_restored_follower_converges_byte_for_byte),
	    cmocka_unit_test(test_snapshot_restore_round_trip),
	    cmocka_unit_test(test_database_grows_in_place),
	    cmocka_unit_test(test_database_without_reservation_is_the_same),
	    cmocka_unit_test(test_sqlite_memory_statistics_off),
	    cmocka_unit_test(test_statement_cache_survives_restore),
	    cmocka_unit_test(test_job_change_journal),
	    cmocka_unit_test(test_submitted_specs_are_kept_until_read),
	    cmocka_unit_test(test_auth_cache_follows_tokens_and_nodes),
	    cmocka_unit_test(test_token_expiry),
	    cmocka_unit_test(test_submit_after_checks_the_jobs),
	    cmocka_unit_test(test_request_id_dedup_returns_original_result),
	    cmocka_unit_test(test_garbage_and_business_errors_are_results_that_change_nothing),
	    cmocka_unit_test(test_event_hash_chain_links_and_detects_tampering),
	    cmocka_unit_test(test_event_hash_is_the_canonical_json_form),
	    cmocka_unit_test(test_events_pruned_keep_a_verifiable_chain),
	    cmocka_unit_test(test_batch_applies_like_single_commands),
	    cmocka_unit_test(test_own_commands_apply_like_parsed),
	    cmocka_unit_test(test_tokens_members_config),
	    cmocka_unit_test(test_jobs_list_filters_and_pages),
	    cmocka_unit_test(test_nodes_and_placements),
	    cmocka_unit_test(test_active_rowids_in_submission_order),
	    cmocka_unit_test(test_running_flag_follows_job_state),
	    cmocka_unit_test(test_node_slots_by_job_and_rank),
	    cmocka_unit_test(test_slot_nodes_journal_keeps_a_cache_exact),
	    cmocka_unit_test(test_placement_refusals_name_the_first_bad_slot),
	    cmocka_unit_test(test_placed_event_counts_ranks_per_node),
	    cmocka_unit_test(test_auto_job_placement_records_plan),
	    cmocka_unit_test(test_shrunk_placement_is_recorded),
	    cmocka_unit_test(test_heartbeat_setting_keeps_what_it_replaced),
	    cmocka_unit_test(test_full_state_refuses_new_and_keeps_the_rest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
