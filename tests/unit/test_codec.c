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
	bad[total - 1] = 'x'; /* padding must be zero */
	assert_int_equal(codec_decode(bad, total, &out, &out_len, &err), YARD_ECORRUPT);
	assert_non_null(strstr(err.msg, "padding"));

	assert_int_equal(codec_decode(frame, total - 1, &out, &out_len, &err), YARD_ECORRUPT);
	assert_int_equal(codec_decode(frame, 8, &out, &out_len, &err), YARD_ECORRUPT);
	assert_int_equal(codec_decode(frame, total, &out, &out_len, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip_and_padding_for_lengths_0_to_100),
	    cmocka_unit_test(test_corrupt_frames_are_rejected),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
