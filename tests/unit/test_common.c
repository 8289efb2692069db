/* test_common.c: the strict JSON helpers and error messages every API entry point uses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/base64.h"
#include "common/common.h"

static void test_parse_rejects_oversized_body(void **state)
{
	struct yard_err err = {0};
	const char *body = "{\"a\": 1}";
	assert_null(jsonx_parse(body, strlen(body), 4, 8, &err));
	assert_int_equal(err.code, YARD_EINVAL);
	assert_non_null(strstr(err.msg, "over the limit"));
}

static void test_parse_rejects_deep_nesting(void **state)
{
	struct yard_err err = {0};
	char body[200];
	memset(body, '[', 100);
	memset(body + 100, ']', 100);
	assert_null(jsonx_parse(body, sizeof body, 1024, 32, &err));
	assert_non_null(strstr(err.msg, "deeper than 32"));
	/* brackets inside strings do not count */
	const char *ok = "{\"s\": \"[[[[[[[[[[\"}";
	json_t *v = jsonx_parse(ok, strlen(ok), 1024, 2, &err);
	assert_non_null(v);
	json_decref(v);
}

static void test_parse_reports_position_of_malformed_json(void **state)
{
	struct yard_err err = {0};
	const char *body = "{\"a\": 1,, }";
	assert_null(jsonx_parse(body, strlen(body), 1024, 8, &err));
	assert_non_null(strstr(err.msg, "malformed JSON at line 1"));
	const char *dup = "{\"a\": 1, \"a\": 2}";
	assert_null(jsonx_parse(dup, strlen(dup), 1024, 8, &err));
}

static void test_only_keys_names_unknown_field(void **state)
{
	struct yard_err err = {0};
	static const char *const allowed[] = {"dp", "tp", NULL};
	json_t *v = json_pack("{s:i, s:i, s:i}", "dp", 1, "tp", 2, "tq", 3);
	assert_int_equal(jsonx_only_keys(v, "parallel", allowed, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "parallel.tq: unknown field");
	json_decref(v);
}

static void test_typed_getters_name_field_and_range(void **state)
{
	struct yard_err err = {0};
	int64_t n = 7;
	const char *s = NULL;
	json_t *v = json_pack("{s:i, s:s, s:f}", "tp", 0, "name", "x", "lr", 0.1);
	assert_int_equal(jsonx_get_int(v, "parallel", "tp", 1, 1, 64, &n, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "parallel.tp: 0 is out of range [1, 64]");
	assert_int_equal(n, 7);
	assert_int_equal(jsonx_get_int(v, "", "name", 1, 0, 1, &n, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "name: must be an integer");
	assert_int_equal(jsonx_get_int(v, "", "absent", 1, 0, 1, &n, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "absent: required field missing");
	assert_int_equal(jsonx_get_int(v, "", "absent", 0, 0, 1, &n, &err), 0);
	assert_int_equal(n, 7);
	assert_int_equal(jsonx_get_string(v, "", "name", 1, 10, &s, &err), 0);
	assert_string_equal(s, "x");
	assert_int_equal(jsonx_get_string(v, "", "name", 1, 0, &s, &err), YARD_EINVAL);
	json_decref(v);
}

static void test_strerror_covers_codes(void **state)
{
	for (int c = 0; c >= YARD_EINTERNAL; c--)
		assert_string_not_equal(yard_strerror(c), "unknown error");
	assert_string_equal(yard_strerror(12345), "unknown error");
}

/* RFC 4648 §10 vectors, a round trip of every byte value, and strict decoding. */
static void test_base64_vectors_round_trip_and_strictness(void **state)
{
	static const char *const vectors[][2] = {{"", ""},
	                                         {"f", "Zg=="},
	                                         {"fo", "Zm8="},
	                                         {"foo", "Zm9v"},
	                                         {"foob", "Zm9vYg=="},
	                                         {"fooba", "Zm9vYmE="},
	                                         {"foobar", "Zm9vYmFy"}};
	char text[64];
	unsigned char out[64];
	size_t n;
	for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
		base64_encode(vectors[i][0], strlen(vectors[i][0]), text);
		assert_string_equal(text, vectors[i][1]);
		assert_int_equal(base64_encoded_len(strlen(vectors[i][0])), strlen(vectors[i][1]));
		assert_int_equal(base64_decode(text, strlen(text), out, &n), 0);
		assert_int_equal(n, strlen(vectors[i][0]));
		assert_memory_equal(out, vectors[i][0], n);
	}
	unsigned char all[256], back[256];
	char all_text[400];
	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	base64_encode(all, sizeof all, all_text);
	assert_int_equal(base64_decode(all_text, strlen(all_text), back, &n), 0);
	assert_int_equal(n, 256);
	assert_memory_equal(all, back, 256);
	static const char *const bad[] = {
	    "Zg=", "Zg", "Z===", "Zh==", "Zm9v\n", "Zm 9", "Zm9v!A==", "=Zg="};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (base64_decode(bad[i], strlen(bad[i]), out, &n) == 0)
			fail_msg("'%s' decoded, but is not strict base64", bad[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_rejects_oversized_body),
	    cmocka_unit_test(test_parse_rejects_deep_nesting),
	    cmocka_unit_test(test_parse_reports_position_of_malformed_json),
	    cmocka_unit_test(test_only_keys_names_unknown_field),
	    cmocka_unit_test(test_typed_getters_name_field_and_range),
	    cmocka_unit_test(test_strerror_covers_codes),
	    cmocka_unit_test(test_base64_vectors_round_trip_and_strictness),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
