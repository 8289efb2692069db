/* test_fsm_store.c: the blob store, builds and advisories of the replicated state machine:
 * a table of bad commands that each get an error naming the field and change nothing;
 * a chunked build round trip (out of order, idempotent re-puts, commit checks, quotas);
 * the advisory life cycle with the 14-day rule, visibility and the deadline; determinism
 * and snapshots with blobs; the upgrade of a snapshot holding the old placeholder tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/base64.h"
#include "jobs/fsm.h"

static const int64_t T0 = 1763740000000LL;
static const int64_t DAY = 24LL * 3600 * 1000;

static int apply_json(struct fsm *f, const char *op, json_t *args, int64_t ts, const char *actor,
                      const char *role, const json_t **result)
{
	size_t len;
	char *cmd = fsm_command_encode(op, args, NULL, ts, actor, role, &len);
	assert_non_null(cmd);
	const json_t *r = fsm_apply(f, cmd, len);
	free(cmd);
	if (result)
		*result = r;
	return (int)json_integer_value(json_object_get(r, "status"));
}

static int apply(struct fsm *f, const char *op, const char *args, int64_t ts, const char *role,
                 const json_t **result)
{
	json_t *a = json_loads(args, 0, NULL);
	assert_non_null(a);
	return apply_json(f, op, a, ts, role, role, result);
}

static void digest(struct fsm *f, char hex[SHA256_HEX_LEN + 1])
{
	struct yard_err err = {0};
	assert_int_equal(fsm_digest(f, hex, &err), 0);
}

/* Deterministic test bytes. */
static unsigned char *bytes_of(size_t len, unsigned seed)
{
	unsigned char *b = malloc(len);
	for (size_t i = 0; i < len; i++)
		b[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 9)) & 0xff);
	return b;
}

static int put_chunk(struct fsm *f, const char *version, int64_t index, const unsigned char *data,
                     size_t len, const json_t **result)
{
	char *text = malloc(base64_encoded_len(len) + 1);
	base64_encode(data, len, text);
	json_t *args = json_pack("{s:s,s:I,s:s}", "version", version, "index", (json_int_t)index,
	                         "data", text);
	free(text);
	return apply_json(f, "build.chunk", args, T0 + 10, "sec", "security", result);
}

static int create_build(struct fsm *f, const char *version, const unsigned char *data, size_t len,
                        const char *advisory)
{
	char sha[SHA256_HEX_LEN + 1];
	sha256_hex(data, len, sha);
	json_t *args = json_pack("{s:s,s:s,s:s,s:I,s:s}", "version", version, "component", "agent",
	                         "sha256", sha, "size", (json_int_t)len, "notes", "secret notes");
	if (advisory)
		json_object_set_new(args, "advisory", json_string(advisory));
	return apply_json(f, "build.create", args, T0, "sec", "security", NULL);
}

static const char *field_of(const json_t *r)
{
	const char *s = json_string_value(json_object_get(r, "field"));
	return s ? s : "";
}

static void test_bad_commands_name_the_field_and_change_nothing(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&f, &err), 0);
	size_t len = FSM_CHUNK_MAX + 1000;
	unsigned char *data = bytes_of(len, 1);
	assert_int_equal(create_build(&f, "1.0", data, len, NULL), 201);
	char zeros[SHA256_HEX_LEN + 1];
	memset(zeros, '0', SHA256_HEX_LEN);
	zeros[SHA256_HEX_LEN] = '\0';
	char bad_sha_build[256];
	snprintf(bad_sha_build, sizeof bad_sha_build,
	         "{\"version\":\"1.1\",\"component\":\"agent\",\"sha256\":\"%s\",\"size\":5}",
	         zeros);
	assert_int_equal(apply(&f, "build.create", bad_sha_build, T0, "security", NULL), 201);
	unsigned char five[5] = {1, 2, 3, 4, 5};
	assert_int_equal(put_chunk(&f, "1.1", 0, five, 5, NULL), 200);

	static const struct {
		const char *op, *args;
		int status;
		const char *field;
	} cases[] = {
	    {"build.create",
	     "{\"version\":\"2.0\",\"component\":\"agent\",\"sha256\":\"%Z\",\"size\":1,\"bogus\":"
	     "1}",
	     400, "bogus"},
	    {"build.create",
	     "{\"version\":\"a b\",\"component\":\"agent\",\"sha256\":\"%Z\",\"size\":1}", 400,
	     "version"},
	    {"build.create",
	     "{\"version\":\"2.0\",\"component\":\"kernel\",\"sha256\":\"%Z\",\"size\":1}", 400,
	     "component"},
	    {"build.create",
	     "{\"version\":\"2.0\",\"component\":\"agent\",\"sha256\":\"ABC\",\"size\":1}", 400,
	     "sha256"},
	    {"build.create",
	     "{\"version\":\"2.0\",\"component\":\"agent\",\"sha256\":\"%Z\",\"size\":0}", 400,
	     "size"},
	    {"build.create",
	     "{\"version\":\"2.0\",\"component\":\"agent\",\"sha256\":\"%Z\",\"size\":"
	     "999999999999}",
	     400, "size"},
	    {"build.create",
	     "{\"version\":\"2.0\",\"component\":\"agent\",\"sha256\":\"%Z\",\"size\":1,"
	     "\"advisory\":\"a-000404\"}",
	     404, "advisory"},
	    {"build.create",
	     "{\"version\":\"1.0\",\"component\":\"agent\",\"sha256\":\"%Z\",\"size\":1}", 409,
	     "version"},
	    {"build.chunk", "{\"version\":\"1.0\",\"index\":0,\"data\":\"AAAA\"}", 400, "data"},
	    {"build.chunk", "{\"version\":\"1.0\",\"index\":0,\"data\":\"not base64!\"}", 400,
	     "data"},
	    {"build.chunk", "{\"version\":\"1.0\",\"index\":2,\"data\":\"AAAA\"}", 400, "index"},
	    {"build.chunk", "{\"version\":\"1.0\",\"index\":-1,\"data\":\"AAAA\"}", 400, "index"},
	    {"build.chunk", "{\"version\":\"9.9\",\"index\":0,\"data\":\"AAAA\"}", 404, "version"},
	    {"build.chunk", "{\"version\":\"1.0\",\"index\":0,\"data\":\"AAAA\",\"x\":1}", 400,
	     "x"},
	    {"build.commit", "{\"version\":\"1.0\"}", 409, "chunks"},
	    {"build.commit", "{\"version\":\"1.1\"}", 422, "sha256"},
	    {"advisory.create",
	     "{\"title\":\"t\",\"severity\":\"high\",\"text\":\"x\",\"embargo_days\":15}", 400,
	     "embargo_days"},
	    {"advisory.create",
	     "{\"title\":\"t\",\"severity\":\"high\",\"text\":\"x\",\"embargo_days\":0}", 400,
	     "embargo_days"},
	    {"advisory.create", "{\"title\":\"t\",\"severity\":\"grave\",\"text\":\"x\"}", 400,
	     "severity"},
	    {"advisory.create",
	     "{\"title\":\"t\",\"severity\":\"low\",\"text\":\"x\",\"cve\":\"CVE-1\"}", 400, "cve"},
	    {"advisory.create",
	     "{\"title\":\"t\",\"severity\":\"low\",\"text\":\"x\",\"owner\":\"me\"}", 400,
	     "owner"},
	    {"advisory.create",
	     "{\"title\":\"t\",\"severity\":\"low\",\"text\":\"x\",\"visibility\":{\"roles\":"
	     "[\"king\"]}}",
	     400, "visibility"},
	    {"advisory.create",
	     "{\"title\":\"t\",\"severity\":\"low\",\"text\":\"x\",\"visibility\":{\"groups\":[]}}",
	     400, "visibility.groups"},
	    {"advisory.embargo", "{\"id\":\"a-000404\",\"embargo_days\":3}", 404, "id"},
	    {"advisory.publish", "{\"id\":\"a-000404\"}", 404, "id"},
	    {"audit.read", "{}", 400, "what"},
	};
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	digest(&f, before);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char args[512];
		const char *z = strstr(cases[i].args, "%Z");
		if (z)
			snprintf(args, sizeof args, "%.*s%s%s", (int)(z - cases[i].args),
			         cases[i].args, zeros, z + 2);
		else
			snprintf(args, sizeof args, "%s", cases[i].args);
		int status = apply(&f, cases[i].op, args, T0 + 1, "security", &r);
		if (status != cases[i].status || strcmp(field_of(r), cases[i].field) != 0)
			fail_msg("case %zu %s %s: got %d field '%s' (%s), want %d field '%s'", i,
			         cases[i].op, args, status, field_of(r),
			         json_string_value(json_object_get(r, "error")), cases[i].status,
			         cases[i].field);
		digest(&f, after);
		if (strcmp(before, after) != 0)
			fail_msg("case %zu %s %s changed the database", i, cases[i].op, args);
	}

	/* an oversized chunk: one byte over the chunk size */
	unsigned char *big = bytes_of(FSM_CHUNK_MAX + 1, 2);
	assert_int_equal(put_chunk(&f, "1.0", 0, big, FSM_CHUNK_MAX + 1, &r), 400);
	assert_string_equal(field_of(r), "data");
	/* a short chunk that is not the last */
	assert_int_equal(put_chunk(&f, "1.0", 0, big, 1000, &r), 400);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "want 524288"));
	digest(&f, after);
	assert_string_equal(before, after);
	/* the 15-day message says why */
	apply(&f, "advisory.create",
	      "{\"title\":\"t\",\"severity\":\"high\",\"text\":\"x\",\"embargo_days\":15}", T0,
	      "security", &r);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "14-day maximum"));
	free(big);
	free(data);
	fsm_close(&f);
}

static void test_chunked_build_round_trip(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&f, &err), 0);
	size_t len = 3 * FSM_CHUNK_MAX + 12345;
	unsigned char *data = bytes_of(len, 3);
	assert_int_equal(create_build(&f, "2.0", data, len, NULL), 201);
	/* chunks out of order; chunk 1 first with wrong bytes, then replaced */
	unsigned char *wrong = bytes_of(FSM_CHUNK_MAX, 9);
	assert_int_equal(put_chunk(&f, "2.0", 1, wrong, FSM_CHUNK_MAX, NULL), 200);
	for (int i = 3; i >= 0; i--) {
		size_t off = (size_t)i * FSM_CHUNK_MAX;
		size_t n = len - off < FSM_CHUNK_MAX ? len - off : FSM_CHUNK_MAX;
		assert_int_equal(put_chunk(&f, "2.0", i, data + off, n, &r), 200);
	}
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(r, "body"), "received")), 4);
	/* the same chunk again is accepted and changes nothing */
	char before[SHA256_HEX_LEN + 1], after[SHA256_HEX_LEN + 1];
	digest(&f, before);
	assert_int_equal(put_chunk(&f, "2.0", 3, data + 3 * FSM_CHUNK_MAX, 12345, NULL), 200);
	digest(&f, after);
	assert_string_equal(before, after);
	/* not downloadable as complete bytes before commit is checked by the API; commit */
	assert_int_equal(
	    apply(&f, "build.commit", "{\"version\":\"2.0\"}", T0 + 20, "security", &r), 200);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "state")),
	                    "ready");
	assert_int_equal(
	    apply(&f, "build.commit", "{\"version\":\"2.0\"}", T0 + 21, "security", &r), 409);
	/* after commit: the same bytes are fine, different bytes are refused */
	assert_int_equal(put_chunk(&f, "2.0", 0, data, FSM_CHUNK_MAX, NULL), 200);
	assert_int_equal(put_chunk(&f, "2.0", 1, wrong, FSM_CHUNK_MAX, &r), 409);
	unsigned char *out = NULL;
	size_t out_len = 0;
	assert_int_equal(fsm_blob_read(&f, "build", "2.0", &out, &out_len, &err), 0);
	assert_int_equal(out_len, len);
	assert_memory_equal(out, data, len);
	free(out);
	json_t *b = fsm_build_get(&f, "2.0", &err);
	assert_int_equal(json_integer_value(json_object_get(b, "chunks")), 4);
	assert_string_equal(json_string_value(json_object_get(b, "notes")), "secret notes");
	json_decref(b);

	/* quota: the store holds len bytes; a limit just above refuses a second build, until an
	 * unfinished upload is deleted; a committed build cannot be */
	char args[128];
	snprintf(args, sizeof args, "{\"key\":\"blob_store_max_bytes\",\"value\":%zu}", len + 10);
	assert_int_equal(apply(&f, "config.set", args, T0 + 30, "admin", NULL), 200);
	assert_int_equal(create_build(&f, "2.1", data, 11, NULL), 507);
	assert_int_equal(create_build(&f, "2.1", data, 10, NULL), 201);
	assert_int_equal(put_chunk(&f, "2.1", 0, data, 10, NULL), 200);
	assert_int_equal(create_build(&f, "2.2", data, 10, NULL), 507);
	assert_int_equal(
	    apply(&f, "build.delete", "{\"version\":\"2.0\"}", T0 + 31, "security", &r), 409);
	assert_int_equal(
	    apply(&f, "build.delete", "{\"version\":\"2.1\"}", T0 + 31, "security", &r), 200);
	assert_int_equal(create_build(&f, "2.2", data, 10, NULL), 201);
	assert_null(fsm_build_get(&f, "2.1", &err));
	assert_int_equal(fsm_blob_read(&f, "build", "2.1", &out, &out_len, &err), YARD_ENOTFOUND);
	free(wrong);
	free(data);
	fsm_close(&f);
}

/* A blob store filled to its default limit fits in the state machine's database, with room
 * to spare: SQLite's memdb used to stop every database at 1 GiB, where the store's default
 * is, so a full store failed the commit of the entry that filled it on every member (each
 * restarting into the same failure). Four builds of the default largest size, committed. */
static void test_full_blob_store_fits(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&f, &err), 0);
	size_t len = (size_t)FSM_BUILD_MAX_DEFAULT;
	unsigned char *data = bytes_of(len, 5);
	char *text = malloc(base64_encoded_len(FSM_CHUNK_MAX) + 1);
	for (int b = 0; b < (int)(FSM_BLOB_STORE_MAX_DEFAULT / FSM_BUILD_MAX_DEFAULT); b++) {
		char version[16];
		snprintf(version, sizeof version, "9.%d", b);
		data[0] = (unsigned char)b; /* four different builds */
		assert_int_equal(create_build(&f, version, data, len, NULL), 201);
		for (size_t off = 0, i = 0; off < len; off += FSM_CHUNK_MAX, i++) {
			base64_encode(data + off, FSM_CHUNK_MAX, text);
			json_t *args = json_pack("{s:s,s:I,s:s}", "version", version, "index",
			                         (json_int_t)i, "data", text);
			if (i % 8 == 0) /* eight commands to an entry, as raft batches them */
				fsm_apply_batch_begin(&f);
			assert_int_equal(
			    apply_json(&f, "build.chunk", args, T0 + 10, "sec", "security", NULL),
			    200);
			if (i % 8 == 7 || off + FSM_CHUNK_MAX >= len)
				assert_int_equal(fsm_apply_batch_end(&f), 0);
		}
		char args[64];
		snprintf(args, sizeof args, "{\"version\":\"%s\"}", version);
		assert_int_equal(apply(&f, "build.commit", args, T0 + 20, "security", NULL), 200);
	}
	/* full: the store refuses the next build, the database does not */
	assert_int_equal(create_build(&f, "9.9", data, 1, NULL), 507);
	const unsigned char *img = NULL;
	size_t img_len = 0;
	assert_int_equal(fsm_image(&f, &img, &img_len), 0);
	assert_true(img_len > (size_t)FSM_BLOB_STORE_MAX_DEFAULT);
	assert_int_equal(apply(&f, "config.set", "{\"key\":\"node_down_ms\",\"value\":5000}",
	                       T0 + 30, "admin", NULL),
	                 200);
	free(text);
	free(data);
	fsm_close(&f);
}

static void test_advisory_embargo_visibility_and_deadline(void **state)
{
	struct fsm f;
	struct yard_err err = {0};
	const json_t *r;
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(
	    apply(&f, "advisory.create",
	          "{\"title\":\"ring overflow\",\"severity\":\"critical\",\"text\":\"x\","
	          "\"visibility\":{\"principals\":[\"distro\"]}}",
	          T0, "security", &r),
	    201);
	const json_t *a = json_object_get(r, "body");
	assert_string_equal(json_string_value(json_object_get(a, "id")), "a-000001");
	assert_string_equal(json_string_value(json_object_get(a, "state")), "reported");
	assert_string_equal(json_string_value(json_object_get(a, "cve")), "RESERVED");
	assert_true(fsm_advisory_restricted(&f, "a-000001"));
	assert_false(fsm_advisory_visible(&f, "a-000001", "alice", "user"));
	assert_true(fsm_advisory_visible(&f, "a-000001", "distro", "user"));
	assert_true(fsm_advisory_visible(&f, "a-000001", "security", "security")); /* creator */
	assert_true(fsm_advisory_visible(&f, "a-000001", "root", "admin"));
	assert_false(fsm_advisory_visible(&f, "a-000001", "ops", "operator"));
	assert_int_equal(apply(&f, "advisory.share",
	                       "{\"id\":\"a-000001\",\"roles\":[\"operator\"]}", T0 + 1, "security",
	                       NULL),
	                 200);
	assert_true(fsm_advisory_visible(&f, "a-000001", "ops", "operator"));

	/* a lower cluster limit is named in the refusal */
	assert_int_equal(apply(&f, "config.set", "{\"key\":\"embargo_max_days\",\"value\":7}",
	                       T0 + 2, "admin", NULL),
	                 200);
	assert_int_equal(apply(&f, "advisory.embargo", "{\"id\":\"a-000001\",\"embargo_days\":8}",
	                       T0 + 3, "security", &r),
	                 400);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "embargo_max_days"));
	assert_int_equal(apply(&f, "advisory.embargo", "{\"id\":\"a-000001\",\"embargo_days\":7}",
	                       T0 + 4, "security", &r),
	                 200);
	int64_t until =
	    json_integer_value(json_object_get(json_object_get(r, "body"), "embargo_until_ms"));
	assert_int_equal(until, T0 + 4 + 7 * DAY);
	assert_int_equal(apply(&f, "advisory.embargo", "{\"id\":\"a-000001\",\"embargo_days\":3}",
	                       T0 + 5, "security", NULL),
	                 409);

	/* the deadline: nothing due before it; the leader may not publish early */
	json_t *due = fsm_advisories_due(&f, until - 1);
	assert_int_equal(json_array_size(due), 0);
	json_decref(due);
	due = fsm_advisories_due(&f, until);
	assert_int_equal(json_array_size(due), 1);
	json_decref(due);
	assert_int_equal(apply_json(&f, "advisory.publish", json_pack("{s:s}", "id", "a-000001"),
	                            until - 1, "scheduler", "admin", &r),
	                 403);
	assert_true(fsm_advisory_restricted(&f, "a-000001"));
	assert_int_equal(apply_json(&f, "advisory.publish", json_pack("{s:s}", "id", "a-000001"),
	                            until, "scheduler", "admin", &r),
	                 200);
	a = json_object_get(r, "body");
	assert_string_equal(json_string_value(json_object_get(a, "state")), "public");
	assert_false(fsm_advisory_restricted(&f, "a-000001"));
	assert_true(fsm_advisory_visible(&f, "a-000001", "alice", "user"));
	/* the timeline tells the story; event messages name no title */
	assert_int_equal(json_array_size(json_object_get(a, "timeline")), 4);
	json_t *events = fsm_events_list(&f, 0, 100, NULL, &err);
	char *text = json_dumps(events, 0);
	assert_null(strstr(text, "ring overflow"));
	assert_non_null(strstr(text, "advisory a-000001 published: embargo deadline passed"));
	free(text);
	json_decref(events);
	assert_int_equal(apply_json(&f, "advisory.publish", json_pack("{s:s}", "id", "a-000001"),
	                            until + 1, "sec", "security", NULL),
	                 409);

	/* the security role publishes a fresh report at once */
	assert_int_equal(apply(&f, "advisory.create",
	                       "{\"title\":\"t\",\"severity\":\"low\",\"text\":\"x\",\"cve\":"
	                       "\"CVE-2026-12345\",\"embargo_days\":2}",
	                       T0 + 6, "security", NULL),
	                 201);
	assert_int_equal(
	    apply(&f, "advisory.publish", "{\"id\":\"a-000002\"}", T0 + 7, "security", NULL), 200);
	assert_int_equal(fsm_events_verify(&f, &err), 0);
	fsm_close(&f);
}

static void store_workload(struct fsm *f)
{
	size_t len = FSM_CHUNK_MAX + 77;
	unsigned char *data = bytes_of(len, 5);
	apply(f, "advisory.create",
	      "{\"title\":\"t\",\"severity\":\"high\",\"text\":\"x\",\"embargo_days\":14}", T0,
	      "security", NULL);
	assert_int_equal(create_build(f, "3.0", data, len, "a-000001"), 201);
	put_chunk(f, "3.0", 1, data + FSM_CHUNK_MAX, 77, NULL);
	put_chunk(f, "3.0", 0, data, FSM_CHUNK_MAX, NULL);
	apply(f, "build.commit", "{\"version\":\"3.0\"}", T0 + 50, "security", NULL);
	apply(f, "audit.read", "{\"what\":\"embargoed build 3.0 (binary)\"}", T0 + 60, "security",
	      NULL);
	free(data);
}

static void test_store_is_deterministic_and_survives_snapshots(void **state)
{
	struct fsm a, b, c;
	struct yard_err err = {0};
	char da[SHA256_HEX_LEN + 1], db[SHA256_HEX_LEN + 1], dc[SHA256_HEX_LEN + 1];
	assert_int_equal(fsm_init(&a, &err), 0);
	assert_int_equal(fsm_init(&b, &err), 0);
	assert_int_equal(fsm_init(&c, &err), 0);
	store_workload(&a);
	store_workload(&b);
	digest(&a, da);
	digest(&b, db);
	assert_string_equal(da, db);
	unsigned char *image = NULL;
	size_t len = 0;
	assert_int_equal(fsm_serialize(&a, &image, &len, &err), 0);
	assert_int_equal(fsm_restore(&c, image, len, &err), 0);
	sqlite3_free(image);
	digest(&c, dc);
	assert_string_equal(da, dc);
	unsigned char *out = NULL;
	size_t out_len = 0;
	assert_int_equal(fsm_blob_read(&c, "build", "3.0", &out, &out_len, &err), 0);
	assert_int_equal(out_len, FSM_CHUNK_MAX + 77);
	free(out);
	json_t *audit = fsm_audit_list(&c, 0, 100, 1, &err);
	assert_int_equal(json_array_size(json_object_get(audit, "events")), 1);
	json_decref(audit);
	fsm_close(&a);
	fsm_close(&b);
	fsm_close(&c);
}

/* A snapshot from a binary before the store holds placeholder builds/advisories tables. */
static void test_old_snapshot_gets_the_store_tables(void **state)
{
	struct fsm old, f;
	struct yard_err err = {0};
	assert_int_equal(fsm_init(&old, &err), 0);
	assert_int_equal(
	    sqlite3_exec(old.db,
	                 "DROP TABLE builds; DROP TABLE advisories; DROP TABLE blobs;"
	                 " DROP TABLE blob_chunks;"
	                 "CREATE TABLE builds(id TEXT PRIMARY KEY, version TEXT NOT NULL,"
	                 " sha256 TEXT NOT NULL, notes TEXT, created_ms INTEGER NOT NULL);"
	                 "CREATE TABLE advisories(id TEXT PRIMARY KEY, state TEXT NOT NULL,"
	                 " embargo_until_ms INTEGER, visibility TEXT NOT NULL, text TEXT,"
	                 " created_ms INTEGER NOT NULL);",
	                 NULL, NULL, NULL),
	    SQLITE_OK);
	unsigned char *image = NULL;
	size_t len = 0;
	assert_int_equal(fsm_serialize(&old, &image, &len, &err), 0);
	assert_int_equal(fsm_init(&f, &err), 0);
	assert_int_equal(fsm_restore(&f, image, len, &err), 0);
	sqlite3_free(image);
	unsigned char five[5] = {5, 4, 3, 2, 1};
	assert_int_equal(create_build(&f, "4.0", five, 5, NULL), 201);
	assert_int_equal(put_chunk(&f, "4.0", 0, five, 5, NULL), 200);
	assert_int_equal(apply(&f, "build.commit", "{\"version\":\"4.0\"}", T0, "security", NULL),
	                 200);
	fsm_close(&old);
	fsm_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bad_commands_name_the_field_and_change_nothing),
	    cmocka_unit_test(test_chunked_build_round_trip),
	    cmocka_unit_test(test_full_blob_store_fits),
	    cmocka_unit_test(test_advisory_embargo_visibility_and_deadline),
	    cmocka_unit_test(test_store_is_deterministic_and_survives_snapshots),
	    cmocka_unit_test(test_old_snapshot_gets_the_store_tables),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
