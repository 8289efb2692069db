/* test_logstore.c: the leader's rank-output store (scheduler/logstore.h): offsets, pieces
 * that arrive twice or out of order, gaps reported as skipped bytes, the per-rank and total
 * bounds, and the UTF-8 text of a read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/common.h"
#include "scheduler/logstore.h"

static struct logstore *store(size_t rank_max, size_t total_max)
{
	struct logstore_limits lim = {.rank_max_bytes = rank_max, .total_max_bytes = total_max};
	struct logstore *ls = logstore_create(&lim);
	assert_non_null(ls);
	return ls;
}

/* Reads the whole stream from offset, as a client following it would, into buf. */
static size_t read_all(struct logstore *ls, const char *job, int rank, int64_t gen, int64_t offset,
                       size_t max, char *buf, int64_t *skipped)
{
	size_t n = 0;
	*skipped = 0;
	for (int i = 0; i < 1000; i++) {
		struct logstore_read r;
		assert_int_equal(logstore_read(ls, job, rank, gen, offset, max, &r), 0);
		*skipped += r.skipped;
		if (r.len == 0) {
			free(r.data);
			break;
		}
		memcpy(buf + n, r.data, r.len);
		n += r.len;
		assert_int_equal(r.next_offset, r.offset + (int64_t)r.len);
		offset = r.next_offset;
		free(r.data);
	}
	buf[n] = '\0';
	return n;
}

static void test_pieces_in_order_read_back_exactly(void **state)
{
	struct logstore *ls = store(1 << 20, 1 << 24);
	char buf[256];
	int64_t skipped;
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "node-a", 0, "hello\n", 6), 6);
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "node-a", 6, "world\n", 6), 6);
	assert_int_equal(read_all(ls, "j-1", 0, 1, 0, 4, buf, &skipped), 12);
	assert_string_equal(buf, "hello\nworld\n");
	assert_int_equal(skipped, 0);
	/* reading from the middle, and past the end */
	struct logstore_read r;
	assert_int_equal(logstore_read(ls, "j-1", 0, 1, 6, 100, &r), 0);
	assert_int_equal(r.len, 6);
	assert_memory_equal(r.data, "world\n", 6);
	assert_int_equal(r.first_offset, 0);
	assert_int_equal(r.end_offset, 12);
	assert_string_equal(r.node, "node-a");
	free(r.data);
	assert_int_equal(logstore_read(ls, "j-1", 0, 1, 50, 100, &r), 0);
	assert_int_equal(r.len, 0);
	assert_int_equal(r.next_offset, 50);
	assert_int_equal(logstore_read(ls, "j-1", 1, 1, 0, 100, &r), YARD_ENOTFOUND);
	logstore_destroy(ls);
}

static void test_duplicates_and_overlaps_are_stored_once(void **state)
{
	struct logstore *ls = store(1 << 20, 1 << 24);
	char buf[256];
	int64_t skipped;
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "a", 0, "abcdef", 6), 6);
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "a", 0, "abcdef", 6), 0); /* retried */
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "a", 3, "defghi", 6), 3); /* overlap */
	assert_int_equal(read_all(ls, "j-1", 0, 1, 0, 100, buf, &skipped), 9);
	assert_string_equal(buf, "abcdefghi");
	assert_int_equal(logstore_bytes(ls), 9);
	logstore_destroy(ls);
}

static void test_gap_is_reported_then_filled(void **state)
{
	struct logstore *ls = store(1 << 20, 1 << 24);
	char buf[256];
	int64_t skipped;
	struct logstore_read r;
	/* a new leader first hears offset 10 on: bytes 0..9 are a gap */
	assert_int_equal(logstore_add(ls, "j-1", 2, 1, "a", 10, "KLMNO", 5), 5);
	assert_int_equal(logstore_read(ls, "j-1", 2, 1, 0, 100, &r), 0);
	assert_int_equal(r.skipped, 10);
	assert_int_equal(r.offset, 10);
	assert_int_equal(r.len, 5);
	free(r.data);
	/* the agent's resent tail fills part of it; a reader from 0 sees the rest as skipped */
	assert_int_equal(logstore_add(ls, "j-1", 2, 1, "a", 4, "efghijKL", 8), 6);
	assert_int_equal(read_all(ls, "j-1", 2, 1, 0, 3, buf, &skipped), 11);
	assert_string_equal(buf, "efghijKLMNO");
	assert_int_equal(skipped, 4);
	/* a gap in the middle stops a read; the next read reports it */
	assert_int_equal(logstore_add(ls, "j-1", 2, 1, "a", 20, "UV", 2), 2);
	assert_int_equal(logstore_read(ls, "j-1", 2, 1, 4, 100, &r), 0);
	assert_int_equal(r.len, 11);
	assert_int_equal(r.next_offset, 15);
	free(r.data);
	assert_int_equal(logstore_read(ls, "j-1", 2, 1, 15, 100, &r), 0);
	assert_int_equal(r.skipped, 5);
	assert_int_equal(r.len, 2);
	assert_int_equal(r.end_offset, 22);
	free(r.data);
	logstore_destroy(ls);
}

static void test_long_streams_merge_into_few_chunks_and_read_back(void **state)
{
	struct logstore *ls = store(1 << 20, 1 << 24);
	static char want[200000], got[200001];
	int64_t skipped;
	for (size_t i = 0; i < sizeof want; i++)
		want[i] = (char)('a' + (i * 7) % 26);
	for (size_t off = 0; off < sizeof want; off += 1000)
		assert_int_equal(logstore_add(ls, "j-1", 0, 1, "a", (int64_t)off, want + off, 1000),
		                 1000);
	assert_int_equal(read_all(ls, "j-1", 0, 1, 0, 65536, got, &skipped), sizeof want);
	assert_memory_equal(got, want, sizeof want);
	assert_int_equal(skipped, 0);
	logstore_destroy(ls);
}

static void test_rank_bound_drops_oldest_generation_first(void **state)
{
	struct logstore *ls = store(100, 1 << 24);
	char data[80];
	memset(data, 'x', sizeof data);
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "a", 0, data, 80), 80);
	memset(data, 'y', sizeof data);
	assert_int_equal(logstore_add(ls, "j-1", 0, 2, "b", 0, data, 80), 80);
	/* 160 > 100: generation 1 lost its oldest 60 bytes */
	struct logstore_read r;
	assert_int_equal(logstore_read(ls, "j-1", 0, 1, 0, 1000, &r), 0);
	assert_int_equal(r.skipped, 60);
	assert_int_equal(r.len, 20);
	free(r.data);
	assert_int_equal(logstore_bytes(ls), 100);
	/* dropped bytes are not taken again when an agent resends them */
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "a", 0, data, 80), 0);
	/* other ranks are not affected */
	assert_int_equal(logstore_add(ls, "j-1", 1, 1, "a", 0, data, 80), 80);
	assert_int_equal(logstore_bytes(ls), 180);
	json_t *streams = logstore_streams(ls, "j-1");
	assert_int_equal(json_array_size(streams), 3);
	assert_int_equal(
	    json_integer_value(json_object_get(json_array_get(streams, 0), "first_offset")), 60);
	assert_int_equal(
	    json_integer_value(json_object_get(json_array_get(streams, 1), "generation")), 2);
	json_decref(streams);
	assert_int_equal(logstore_latest_generation(ls, "j-1", 0), 2);
	assert_int_equal(logstore_latest_generation(ls, "j-9", 0), -1);
	logstore_destroy(ls);
}

static void test_total_bound_trims_least_recently_written(void **state)
{
	struct logstore *ls = store(1000, 150);
	char data[100];
	memset(data, 'z', sizeof data);
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "a", 0, data, 100), 100);
	assert_int_equal(logstore_add(ls, "j-2", 0, 1, "a", 0, data, 100), 100);
	assert_int_equal(logstore_bytes(ls), 150);
	struct logstore_read r;
	assert_int_equal(logstore_read(ls, "j-1", 0, 1, 0, 1000, &r), 0);
	assert_int_equal(r.skipped, 50);
	free(r.data);
	assert_int_equal(logstore_read(ls, "j-2", 0, 1, 0, 1000, &r), 0);
	assert_int_equal(r.skipped, 0);
	assert_int_equal(r.len, 100);
	free(r.data);
	logstore_clear(ls);
	assert_int_equal(logstore_bytes(ls), 0);
	assert_int_equal(logstore_read(ls, "j-2", 0, 1, 0, 1000, &r), YARD_ENOTFOUND);
	logstore_destroy(ls);
}

static void test_bad_input_changes_nothing(void **state)
{
	struct logstore *ls = store(1000, 1000);
	assert_int_equal(logstore_add(ls, "j-1", 0, 1, "a", -1, "x", 1), YARD_EINVAL);
	assert_int_equal(
	    logstore_add(ls, "j-0123456789012345678901234567890123", 0, 1, "a", 0, "x", 1),
	    YARD_EINVAL);
	assert_int_equal(logstore_bytes(ls), 0);
	json_t *streams = logstore_streams(ls, "j-1");
	assert_int_equal(json_array_size(streams), 0);
	json_decref(streams);
	logstore_destroy(ls);
}

static void test_text_is_valid_utf8(void **state)
{
	size_t used;
	json_t *s = logstore_text("ok \xff\n", 5, &used);
	assert_int_equal(used, 5);
	assert_string_equal(json_string_value(s), "ok \xEF\xBF\xBD\n");
	json_decref(s);
	/* "é" cut after its first byte: left for the next read */
	s = logstore_text("caf\xC3", 4, &used);
	assert_int_equal(used, 3);
	assert_string_equal(json_string_value(s), "caf");
	json_decref(s);
	/* ... unless it is all there is */
	s = logstore_text("\xC3", 1, &used);
	assert_int_equal(used, 1);
	assert_string_equal(json_string_value(s), "\xEF\xBF\xBD");
	json_decref(s);
	s = logstore_text("\xE2\x82\xAC \xED\xA0\x80", 7, &used); /* euro sign, a surrogate */
	assert_int_equal(used, 7);
	assert_string_equal(json_string_value(s),
	                    "\xE2\x82\xAC \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
	json_decref(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pieces_in_order_read_back_exactly),
	    cmocka_unit_test(test_duplicates_and_overlaps_are_stored_once),
	    cmocka_unit_test(test_gap_is_reported_then_filled),
	    cmocka_unit_test(test_long_streams_merge_into_few_chunks_and_read_back),
	    cmocka_unit_test(test_rank_bound_drops_oldest_generation_first),
	    cmocka_unit_test(test_total_bound_trims_least_recently_written),
	    cmocka_unit_test(test_bad_input_changes_nothing),
	    cmocka_unit_test(test_text_is_valid_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
