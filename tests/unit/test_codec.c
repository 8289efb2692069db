/* test_codec.c: command frames are padded to 8 bytes, round-trip, and reject corruption
 * (raft 0.15 corrupts unpadded entries: shared/research/raft-probe.md §4.1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jobs/codec.h"

static void test_round_trip_and_padding_for_lengths_0_to_100(void **state)
{
	char payload[101];
	for (size_t i = 0; i < sizeof payload; i++)
		payload[i] = (char)('A' + i % 26);
	for (size_t len = 0; len <= 100; len++) {
		size_t total = codec_frame_len(len);
		assert_int_equal(total % 8, 0);
		assert_true(total >= CODEC_HEADER_LEN + len);
		assert_true(total < CODEC_HEADER_LEN + len + 8);
		unsigned char *frame = malloc(total);
		memset(frame, 0xee, total);
		codec_encode(frame, payload, len);
		const void *out = NULL;
		size_t out_len = 999;
		struct yard_err err = {0};
		assert_int_equal(codec_decode(frame, total, &out, &out_len, &err), 0);
		assert_int_equal(out_len, len);
		assert_memory_equal(out, payload, len);
		free(frame);
	}
}

static void test_corrupt_frames_are_rejected(void **state)
{
	const char *payload = "{\"op\":\"job.submit\"}"; /* 19 bytes → 24 padded */
	size_t len = strlen(payload), total = codec_frame_len(len);
	unsigned char frame[64], bad[64];
	const void *out;
	size_t out_len;
	struct yard_err err = {0};
	codec_encode(frame, payload, len);

	memcpy(bad, frame, total);
	bad[0] ^= 1; /* magic */
	assert_int_equal(codec_decode(bad, total, &out, &out_len, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "magic"));

	memcpy(bad, frame, total);
	bad[4] = 2; /* version */
	assert_int_equal(codec_decode(bad, total, &out, &out_len, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "version"));

	memcpy(bad, frame, total);
	bad[8] = (unsigned char)(len + 9); /* length that does not fit the frame */
	assert_int_equal(codec_decode(bad, total, &out, &out_len, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "payload bytes"));

	memcpy(bad, frame, total);
	bad[6] = 1; /* a flag this build does not know */
	assert_int_equal(codec_decode(bad, total, &out, &out_len, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "flags"));

	memcpy(bad, frame, total);
	bad[13] = 1; /* reserved */
	assert_int_equal(codec_decode(bad, total, &out, &out_len, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "reserved"));

	memcpy(bad, frame, total);
	bad[total - 1] = 'x'; /* padding must be zero */
	assert_int_equal(codec_decode(bad, total, &out, &out_len, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "padding"));

	assert_int_equal(codec_decode(frame, total - 1, &out, &out_len, &err), YARD_ECORRUPT);
	assert_int_equal(codec_decode(frame, 8, &out, &out_len, &err), YARD_ECORRUPT);
	assert_int_equal(codec_decode(frame, total, &out, &out_len, &err), 0);
}

/* Version-2 batch frames: round trip of 1..5 commands of assorted lengths (0 included),
 * version-1 frames still decode through codec_decode_entry, and corruption is caught. */
static void test_batch_frames(void **state)
{
	const char *texts[] = {"{\"op\":\"a\"}", "", "1234567", "12345678", "{\"x\":[1,2,3]}"};
	const void *payloads[5];
	size_t lens[5];
	for (int i = 0; i < 5; i++) {
		payloads[i] = texts[i];
		lens[i] = strlen(texts[i]);
	}
	for (int n = 1; n <= 5; n++) {
		size_t total = codec_batch_len(lens, n);
		assert_int_equal(total % 8, 0);
		unsigned char *frame = malloc(total);
		memset(frame, 0xee, total);
		codec_batch_encode(frame, payloads, lens, n);
		const void *out[8];
		size_t out_lens[8];
		int got = 0, is_batch = 0;
		struct yard_err err = {0};
		assert_int_equal(
		    codec_decode_entry(frame, total, out, out_lens, 8, &got, &is_batch, &err), 0);
		assert_int_equal(got, n);
		assert_int_equal(is_batch, 1);
		for (int i = 0; i < n; i++) {
			assert_int_equal(out_lens[i], lens[i]);
			assert_memory_equal(out[i], texts[i], lens[i]);
		}
		/* a batch is not a version-1 frame */
		assert_int_equal(codec_decode(frame, total, &out[0], &out_lens[0], &err),
		                 YARD_ECORRUPT);
		free(frame);
	}

	/* version 1 through the entry decoder */
	unsigned char v1[64];
	codec_encode(v1, texts[0], lens[0]);
	const void *out[8];
	size_t out_lens[8];
	int got = 0, is_batch = 1;
	struct yard_err err = {0};
	assert_int_equal(codec_decode_entry(v1, codec_frame_len(lens[0]), out, out_lens, 8, &got,
	                                    &is_batch, &err),
	                 0);
	assert_int_equal(got, 1);
	assert_int_equal(is_batch, 0);
	assert_int_equal(out_lens[0], lens[0]);

	/* corruption */
	size_t total = codec_batch_len(lens, 3);
	unsigned char frame[128], bad[128];
	codec_batch_encode(frame, payloads, lens, 3);
	memcpy(bad, frame, total);
	bad[12] = 0; /* count 0 */
	assert_int_equal(codec_decode_entry(bad, total, out, out_lens, 8, &got, &is_batch, &err),
	                 YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "commands"));
	memcpy(bad, frame, total);
	bad[12] = 9; /* more commands than the frame holds */
	assert_int_equal(codec_decode_entry(bad, total, out, out_lens, 16, &got, &is_batch, &err),
	                 YARD_ECORRUPT);
	memcpy(bad, frame, total);
	bad[16] = 200; /* first record's length overruns */
	assert_int_equal(codec_decode_entry(bad, total, out, out_lens, 8, &got, &is_batch, &err),
	                 YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "batch command 1"));
	memcpy(bad, frame, total);
	bad[20] = 1; /* reserved */
	assert_int_equal(codec_decode_entry(bad, total, out, out_lens, 8, &got, &is_batch, &err),
	                 YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "reserved"));
	memcpy(bad, frame, total);
	bad[CODEC_HEADER_LEN + CODEC_BATCH_RECORD_LEN + lens[0]] = 'x'; /* padding */
	assert_int_equal(codec_decode_entry(bad, total, out, out_lens, 8, &got, &is_batch, &err),
	                 YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "padding"));
	assert_int_equal(
	    codec_decode_entry(frame, total - 8, out, out_lens, 8, &got, &is_batch, &err),
	    YARD_ECORRUPT);
	assert_int_equal(codec_decode_entry(frame, total, out, out_lens, 2, &got, &is_batch, &err),
	                 YARD_ECORRUPT); /* more than the caller has room for */
	assert_int_equal(codec_decode_entry(frame, total, out, out_lens, 8, &got, &is_batch, &err),
	                 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip_and_padding_for_lengths_0_to_100),
	    cmocka_unit_test(test_corrupt_frames_are_rejected),
	    cmocka_unit_test(test_batch_frames),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
