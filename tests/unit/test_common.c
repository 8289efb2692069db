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

static void test_base64_round_trip_and_rejects_bad_text(void **state)
{
	static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *const coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
	                                    "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	char text[32], bytes[32];
	for (size_t i = 0; i < YARD_ARRAY_LEN(plain); i++) {
		yard_base64_encode(plain[i], strlen(plain[i]), text);
		assert_string_equal(text, coded[i]);
		assert_int_equal(strlen(text), YARD_BASE64_LEN(strlen(plain[i])));
		long n = yard_base64_decode(text, strlen(text), bytes);
		assert_int_equal(n, strlen(plain[i]));
		assert_memory_equal(bytes, plain[i], (size_t)n);
	}
	unsigned char all[256];
	char all_text[YARD_BASE64_LEN(256) + 1];
	unsigned char back[256];
	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	yard_base64_encode(all, sizeof all, all_text);
	assert_int_equal(yard_base64_decode(all_text, strlen(all_text), back), 256);
	assert_memory_equal(back, all, 256);
	assert_int_equal(yard_base64_decode("Zm9", 3, bytes), -1);      /* length */
	assert_int_equal(yard_base64_decode("Zm9v!A==", 8, bytes), -1); /* alphabet */
	assert_int_equal(yard_base64_decode("Zg==Zg==", 8, bytes), -1); /* padding inside */
	assert_int_equal(yard_base64_decode("Z=g=", 4, bytes), -1);
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
	    cmocka_unit_test(test_base64_round_trip_and_rejects_bad_text),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
