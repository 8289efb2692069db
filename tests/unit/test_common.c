/* test_common.c: the strict JSON helpers and error messages every API entry point uses. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "common/addr.h"
#include "common/base64.h"
#include "common/common.h"
#include "common/grow.h"
#include "common/hist.h"

/* yard_format_utc: the UTC time the API's messages name (a token's expiry, a time limit) */
static void test_format_utc(void **state)
{
	char out[32];
	yard_format_utc(0, out, sizeof out);
	assert_string_equal(out, "1970-01-01T00:00:00Z");
	yard_format_utc(1764670132999, out, sizeof out); /* milliseconds are cut, not rounded */
	assert_string_equal(out, "2025-12-02T10:08:52Z");
	yard_format_utc(0, out, 8); /* too small: says so rather than half a time */
	assert_string_equal(out, "?");
}

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
	/* a NUL in a string: said as such, not by the parser's flag */
	const char *nul = "{\"name\": \"a\\u0000b\"}";
	assert_null(jsonx_parse(nul, strlen(nul), 1024, 8, &err));
	assert_non_null(strstr(err.msg, "\\u0000 (a NUL character) is not allowed in a string"));
	assert_null(strstr(err.msg, "JSON_ALLOW_NUL"));
}

static void test_only_keys_names_unknown_field(void **state)
{
	struct yard_err err = {0};
	static const char *const allowed[] = {"dp", "tp", NULL};
	json_t *v = json_pack("{s:i, s:i, s:i}", "dp", 1, "tp", 2, "tq", 3);
	assert_int_equal(jsonx_only_keys(v, "parallel", allowed, &err), YARD_EINVAL);
	/* a near miss of a field it takes: that field is suggested (the closest: tp, not dp) */
	assert_string_equal(err.msg, "parallel.tq: unknown field (did you mean 'tp'?)");
	json_decref(v);
	static const char *const straggler[] = {"policy", "threshold", "window_steps", "windows",
	                                        NULL};
	v = json_pack("{s:s}", "polcy", "off"); /* one letter left out */
	assert_int_equal(jsonx_only_keys(v, "failure.straggler", straggler, &err), YARD_EINVAL);
	assert_string_equal(err.msg,
	                    "failure.straggler.polcy: unknown field (did you mean 'policy'?)");
	json_decref(v);
	v = json_pack("{s:i}", "window_stpes", 3); /* two letters swapped: two edits */
	assert_int_equal(jsonx_only_keys(v, "", straggler, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "window_stpes: unknown field (did you mean 'window_steps'?)");
	json_decref(v);
	/* another word: the fields it takes are listed instead */
	v = json_pack("{s:i}", "replace", 1);
	assert_int_equal(jsonx_only_keys(v, "failure.straggler", straggler, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "failure.straggler.replace: unknown field (known: policy, "
	                             "threshold, window_steps, windows)");
	json_decref(v);
	v = json_pack("{s:i}", "x", 1); /* a short key: one edit at most ("tp" is two away) */
	assert_int_equal(jsonx_only_keys(v, "parallel", allowed, &err), YARD_EINVAL);
	assert_string_equal(err.msg, "parallel.x: unknown field (known: dp, tp)");
	json_decref(v);
	/* many long fields: as many as the message holds, then "..." */
	static const char *const many[] = {
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
	    "cccccccccccccccccccccccccccccccccccccccc", "dddddddddddddddddddddddddddddddddddddddd",
	    "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", "ffffffffffffffffffffffffffffffffffffffff",
	    "gggggggggggggggggggggggggggggggggggggggg", "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh",
	    "iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii", NULL};
	v = json_pack("{s:i}", "zzz", 1);
	assert_int_equal(jsonx_only_keys(v, "", many, &err), YARD_EINVAL);
	assert_non_null(strstr(err.msg, "zzz: unknown field (known: aaaa"));
	assert_non_null(strstr(err.msg, ", ...)"));
	assert_null(strstr(err.msg, "iiii"));
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

/* ---- jsonx_dumps_compact: jansson's compact text, byte for byte ---- */

static unsigned rng_seed = 20261122; /* fixed: the same documents every run */
static uint64_t rnd64(void)
{
	uint64_t hi = (uint64_t)rand_r(&rng_seed), lo = (uint64_t)rand_r(&rng_seed);
	return hi << 32 ^ lo << 1 ^ (uint64_t)rand_r(&rng_seed);
}

static void random_text(char *out, size_t cap)
{
	static const char *const pieces[] = {"a",
	                                     "Z",
	                                     "0",
	                                     "_",
	                                     " ",
	                                     "\"",
	                                     "\\",
	                                     "/",
	                                     "\b",
	                                     "\f",
	                                     "\n",
	                                     "\r",
	                                     "\t",
	                                     "\x01",
	                                     "\x1f",
	                                     "\x7f",
	                                     "\xc3\xa9",
	                                     "\xe2\x82\xac",
	                                     "\xf0\x9f\x9a\x82",
	                                     "\xe2\x80\xa8",
	                                     "key",
	                                     "lr"};
	size_t n = rnd64() % 9, len = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const char *p = pieces[rnd64() % (sizeof pieces / sizeof pieces[0])];
		if (len + strlen(p) + 1 > cap)
			break;
		memcpy(out + len, p, strlen(p) + 1);
		len += strlen(p);
	}
}

static double random_real(void)
{
	static const double specials[] = {0.0,    -0.0,
	                                  0.1,    0.01,
	                                  1.0,    3.0,
	                                  1e16,   1e17,
	                                  1e20,   1e-5,
	                                  1.5e-7, 123456789012345678.0,
	                                  5e-324, 1.7976931348623157e308,
	                                  -2.5,   0.29999999999999999};
	if (rnd64() % 3 == 0)
		return specials[rnd64() % (sizeof specials / sizeof specials[0])];
	double mant = (double)(rnd64() % 2000000) / 1000.0 - 1000.0;
	int exp = (int)(rnd64() % 61) - 30;
	double v = mant;
	for (int i = 0; i < (exp < 0 ? -exp : exp); i++)
		v = exp < 0 ? v / 10 : v * 10;
	return v;
}

static json_t *random_json(int depth)
{
	char text[64];
	switch (depth > 3 ? 2 + rnd64() % 5 : rnd64() % 7) {
	case 0: {
		json_t *o = json_object();
		for (int i = (int)(rnd64() % 6); i > 0; i--) {
			random_text(text, sizeof text);
			json_object_set_new(o, text, random_json(depth + 1));
		}
		return o;
	}
	case 1: {
		json_t *a = json_array();
		for (int i = (int)(rnd64() % 5); i > 0; i--)
			json_array_append_new(a, random_json(depth + 1));
		return a;
	}
	case 2:
		random_text(text, sizeof text);
		return json_string(text);
	case 3: {
		static const json_int_t edges[] = {0, -1, 1, INT64_MAX, INT64_MIN, 1000000007};
		return json_integer(rnd64() % 2 ? edges[rnd64() % 6] : (json_int_t)rnd64());
	}
	case 4:
		return json_real(random_real());
	case 5:
		return json_boolean(rnd64() % 2);
	default:
		return json_null();
	}
}

static void test_dumps_compact_matches_jansson(void **state)
{
	for (int round = 0; round < 3000; round++) {
		json_t *doc = random_json(0);
		assert_non_null(doc);
		for (int sort = 0; sort < 2; sort++) {
			char *want = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY |
			                                 (sort ? JSON_SORT_KEYS : 0));
			size_t len = 0;
			char *got = jsonx_dumps_compact(doc, sort, &len);
			assert_non_null(want);
			assert_non_null(got);
			if (strcmp(want, got) != 0)
				fail_msg("round %d, sort %d:\n jansson %s\n ours    %s", round,
				         sort, want, got);
			assert_int_equal(len, strlen(got));
			free(want);
			free(got);
		}
		json_decref(doc);
	}
	/* jsonx_escape (the piece by piece form, which the events' hash chain reads) gives the
	 * same text as a dumped string */
	for (int round = 0; round < 2000; round++) {
		char text[64];
		random_text(text, sizeof text);
		json_t *str = json_string(text);
		char *want = json_dumps(str, JSON_COMPACT | JSON_ENCODE_ANY);
		struct jsonx_buf b = {0};
		jsonx_escape(text, strlen(text), jsonx_buf_put, &b);
		assert_non_null(b.text);
		assert_string_equal(b.text, want);
		free(b.text);
		free(want);
		json_decref(str);
	}
	/* a long string, escapes across its pieces, and room made for what it needs rather than
	 * six times its length (a build or a checkpoint goes through here) */
	{
		size_t n = 1 << 20;
		char *text = malloc(n + 1);
		assert_non_null(text);
		for (size_t i = 0; i < n; i++)
			text[i] = i % 4093 == 0 ? '"' : i % 5000 == 1 ? '\n' : (char)('a' + i % 26);
		text[n] = '\0';
		json_t *str = json_string(text);
		char *want = json_dumps(str, JSON_COMPACT | JSON_ENCODE_ANY);
		struct jsonx_buf b = {0};
		jsonx_buf_put_json(&b, str);
		assert_non_null(b.text);
		assert_true(strcmp(b.text, want) == 0);
		assert_true(b.cap < 3 * n);
		free(b.text);
		free(want);
		json_decref(str);
		free(text);
	}
	/* objects of more members than fit on the stack, in key order and in reverse order,
	 * and reals that come again (the cache of their text) */
	for (int order = 0; order < 2; order++) {
		json_t *doc = json_object();
		for (int i = 0; i < 40; i++) {
			char key[16];
			int k = order ? 39 - i : i;
			snprintf(key, sizeof key, "k%02d", k);
			json_object_set_new(doc, key, json_real(k % 3 ? 0.1 * k : -1e-7 * k));
		}
		char *want = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
		for (int again = 0; again < 2; again++) {
			char *got = jsonx_dumps_compact(doc, 1, NULL);
			assert_non_null(got);
			assert_string_equal(got, want);
			free(got);
		}
		free(want);
		json_decref(doc);
	}
}

/* ---- jsonx_loadb: jansson's values and errors, quicker ---- */

/* What jsonx_loadb gives text, checked against json_loadb: the same value down to key order,
 * integer vs real and each real's bits, or the same error. Returns 1 when our own reader took
 * the text (it must then be text jansson takes too). */
static int check_loadb(const char *text, size_t len, size_t flags)
{
	json_error_t want_err, got_err;
	json_t *want = json_loadb(text, len, flags, &want_err);
	json_t *fast = jsonx_parse_fast(text, len, (flags & JSON_DECODE_ANY) != 0);
	json_t *got = jsonx_loadb(text, len, flags, &got_err);
	if (fast != NULL && (want == NULL || !jsonx_identical(fast, want)))
		fail_msg("the reader took %.*s, jansson %s", (int)len, text,
		         want == NULL ? want_err.text : "read another value");
	if (want == NULL) {
		assert_null(got);
		assert_string_equal(got_err.text, want_err.text);
		assert_int_equal(got_err.line, want_err.line);
		assert_int_equal(got_err.column, want_err.column);
	} else if (!jsonx_identical(got, want)) {
		fail_msg("jsonx_loadb read %.*s differently", (int)len, text);
	}
	json_decref(want);
	json_decref(got);
	json_decref(fast);
	return fast != NULL;
}

static void test_loadb_reads_what_jansson_reads(void **state)
{
	static const size_t dump_flags[] = {JSON_COMPACT, JSON_COMPACT | JSON_ENSURE_ASCII,
	                                    JSON_INDENT(2) | JSON_SORT_KEYS,
	                                    JSON_INDENT(1) | JSON_ENSURE_ASCII, 0};
	static const char mutations[] = "\"\\{}[],:0-+.eE \t\nu/tfnx\x01\x80\xc3\xed";
	int taken = 0, mutated_taken = 0, mutated = 0;
	for (int round = 0; round < 3000; round++) {
		json_t *doc = random_json(0);
		assert_non_null(doc);
		int container = json_is_object(doc) || json_is_array(doc);
		for (size_t d = 0; d < sizeof dump_flags / sizeof dump_flags[0]; d++) {
			char *text = json_dumps(doc, dump_flags[d] | JSON_ENCODE_ANY);
			assert_non_null(text);
			size_t len = strlen(text);
			/* every printed document is the reader's, as a whole value */
			if (!check_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES))
				fail_msg("the reader left %s to jansson", text);
			taken++;
			assert_int_equal(check_loadb(text, len, 0), container);
			/* and what damage does to it reads the same both ways */
			char *bad = malloc(len + 2);
			assert_non_null(bad);
			for (int m = 0; m < 6; m++) {
				size_t at = len > 0 ? rnd64() % len : 0, n = len;
				memcpy(bad, text, len + 1);
				switch (rnd64() % 3) {
				case 0:
					bad[at] = mutations[rnd64() % (sizeof mutations - 1)];
					break;
				case 1: /* cut short */
					n = at;
					break;
				default: /* a byte more */
					memmove(bad + at + 1, bad + at, len - at + 1);
					bad[at] = mutations[rnd64() % (sizeof mutations - 1)];
					n = len + 1;
					break;
				}
				mutated++;
				mutated_taken +=
				    check_loadb(bad, n, rnd64() % 2 ? JSON_DECODE_ANY : 0);
			}
			free(bad);
			free(text);
		}
		json_decref(doc);
	}
	/* the mutations reach both sides: some damaged texts are still JSON, most are not */
	assert_true(mutated_taken > mutated / 50 && mutated_taken < mutated / 2);
	assert_true(taken == 3000 * 5);

	/* the edges, each read the same (the reader's choice between taking and leaving is
	 * what makes it quick, not what it returns) */
	static const struct {
		const char *text;
		int taken;
	} cases[] = {
	    {"{\"a\":1,\"a\":2}", 0},    /* duplicate: jansson's rule by the flags */
	    {"[\"\\u0000\"]", 0},        /* NUL: refused by jansson */
	    {"[\"\\ud800\"]", 0},        /* a lone high surrogate */
	    {"[\"\\udc00\"]", 0},        /* a lone low surrogate */
	    {"[\"\\ud800\\u0041\"]", 0}, /* a high surrogate before a non-surrogate */
	    {"[\"\\ud83d\\ude82 \\u00e9\\u20ac\\u0041\"]", 1},
	    {"[\"\\q\"]", 0},
	    {"[\"\\u12G4\"]", 0},
	    {"[\"\xff\"]", 0},
	    {"[\"\xc3\"]", 0},
	    {"[\"a\tb\"]", 0}, /* a raw control character */
	    {"[\"\x7f\"]", 1},
	    {"[1e400]", 0},
	    {"[-1e400]", 0},
	    {"[1e-400]", 1}, /* underflow is 0 for both */
	    {"[9223372036854775807, -9223372036854775808]", 1},
	    {"[9223372036854775808]", 0},
	    {"[-9223372036854775809]", 0},
	    {"[-0, -0.0, 0e0, 1E+2, 1.5e-3]", 1},
	    {"[01]", 0},
	    {"[1.]", 0},
	    {"[.5]", 0},
	    {"[1e]", 0},
	    {"[-]", 0},
	    {"[+1]", 0},
	    {"[1,]", 0},
	    {"[,1]", 0},
	    {"{\"a\" 1}", 0},
	    {"{\"a\":}", 0},
	    {"{\"a\":1,}", 0},
	    {"{1:1}", 0},
	    {"{} x", 0},
	    {" \n\t[ ] \r\n", 1},
	    {"[tru]", 0},
	    {"[nul]", 0},
	    {"[true,false,null]", 1},
	    {"", 0},
	    {"   ", 0},
	    {"[\"unterminated", 0},
	    {"{\"k\\n\\u00e9y\":{\"k\\n\\u00e9y\":[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]}}", 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		for (int any = 0; any < 2; any++)
			if (check_loadb(cases[i].text, strlen(cases[i].text),
			                any ? JSON_DECODE_ANY : 0) != cases[i].taken)
				fail_msg("%s: expected the reader to %s it", cases[i].text,
				         cases[i].taken ? "take" : "leave");
	/* a number longer than the reader's 63 characters, and nesting past its 64 levels,
	 * are jansson's */
	char big[200];
	snprintf(big, sizeof big, "[0.%0150d1]", 0);
	assert_false(check_loadb(big, strlen(big), 0));
	char deep[2 * 70 + 1];
	for (int k = 0; k < 70; k++) {
		deep[k] = '[';
		deep[70 + k] = ']';
	}
	deep[140] = '\0';
	assert_false(check_loadb(deep, 140, 0));
	assert_true(check_loadb(deep + 6, 128, 0)); /* 64 levels: the reader's */
	/* scalars alone only with JSON_DECODE_ANY; a text with a NUL inside is jansson's */
	assert_true(check_loadb("\"s\"", 3, JSON_DECODE_ANY));
	assert_false(check_loadb("\"s\"", 3, 0));
	assert_false(check_loadb("[1]\0[2]", 7, 0));
	assert_false(check_loadb("[\"a\0b\"]", 7, 0));
	json_t *v = jsonx_loads("{\"spec\":{\"lr\":0.01}}");
	assert_non_null(v);
	assert_true(json_real_value(json_object_get(json_object_get(v, "spec"), "lr")) == 0.01);
	json_decref(v);
	assert_null(jsonx_loads(NULL));
	assert_null(jsonx_loads("{"));
}

/* What json_string takes, and the repair of text quoted from a client: every byte that does
 * not begin a valid sequence becomes '?', valid characters stay, and the result always goes
 * into a JSON string. */
static void test_utf8_valid_and_sanitize(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
	    {"plain", "plain"},
	    {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
	     "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
	    {"\xff\xfe", "??"},
	    {"ab\xc3", "ab?"},            /* cut in two */
	    {"\xc0\xaf", "??"},           /* overlong '/' */
	    {"\xed\xa0\x80x", "???x"},    /* a surrogate */
	    {"\xf4\x90\x80\x80", "????"}, /* above U+10FFFF */
	    {"\xe2\x82", "??"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char buf[64];
		snprintf(buf, sizeof buf, "%s", cases[i].in);
		int valid = strcmp(cases[i].in, cases[i].out) == 0;
		assert_int_equal(jsonx_utf8_valid(buf, strlen(buf)), valid);
		jsonx_utf8_sanitize(buf);
		assert_string_equal(buf, cases[i].out);
		assert_true(jsonx_utf8_valid(buf, strlen(buf)));
		json_t *s = json_string(buf);
		assert_non_null(s);
		json_decref(s);
	}
}

/* yard_strcopy is snprintf(dst, size, "%s", src): whole when it fits, cut to size - 1 and
 * terminated when not, nothing but the terminator at size 1. */
/* An observation equal to a bound counts in that bound's bucket (Prometheus's le), the
 * quantiles interpolate within a bucket, and the text is what Prometheus reads. */
static void test_hist_buckets_quantiles_and_text(void **state)
{
	(void)state;
	struct yard_hist h = {0};
	assert_true(yard_hist_quantile(&h, 0.99) == 0);
	for (int b = 1; b < YARD_HIST_BUCKETS; b++)
		assert_true(yard_hist_bounds_ms[b] > yard_hist_bounds_ms[b - 1]);
	yard_hist_note(&h, 10);   /* le=10 */
	yard_hist_note(&h, 10.5); /* le=20 */
	yard_hist_note(&h, -3);   /* counts as 0: le=0.5 */
	yard_hist_note(&h, 1e9);  /* +Inf */
	assert_int_equal(yard_hist_count(&h), 4);
	assert_int_equal(h.n[0], 1);
	assert_int_equal(h.n[4], 1);
	assert_int_equal(h.n[5], 1);
	assert_int_equal(h.n[YARD_HIST_BUCKETS], 1);
	/* 100 observations spread evenly over (20, 30]: the median reads 25 */
	struct yard_hist u = {0};
	for (int i = 1; i <= 100; i++)
		yard_hist_note(&u, 20 + i / 10.0);
	assert_true(fabs(yard_hist_quantile(&u, 0.5) - 25) < 1e-9);
	assert_true(fabs(yard_hist_quantile(&u, 1) - 30) < 1e-9);
	assert_true(fabs(yard_hist_quantile(&h, 1) - 10000) < 1e-9); /* past the last bound */
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	yard_hist_render(f, "x_ms", "Help.", 1, "", &h);
	yard_hist_render(f, "y_ms", NULL, 0, "a=\"b\"", &h);
	fclose(f);
	assert_non_null(strstr(text, "# HELP x_ms Help.\n# TYPE x_ms histogram\n"));
	assert_non_null(strstr(text, "x_ms_bucket{le=\"0.5\"} 1\n"));
	assert_non_null(strstr(text, "x_ms_bucket{le=\"10\"} 2\n"));
	assert_non_null(strstr(text, "x_ms_bucket{le=\"20\"} 3\n"));
	assert_non_null(strstr(text, "x_ms_bucket{le=\"10000\"} 3\n"));
	assert_non_null(strstr(text, "x_ms_bucket{le=\"+Inf\"} 4\n"));
	assert_non_null(strstr(text, "x_ms_sum 1000000020.500\nx_ms_count 4\n"));
	assert_non_null(strstr(text, "y_ms_bucket{a=\"b\",le=\"+Inf\"} 4\n"));
	assert_non_null(strstr(text, "y_ms_count{a=\"b\"} 4\n"));
	assert_null(strstr(text, "# TYPE y_ms"));
	free(text);
}

static void test_strcopy_cuts_like_snprintf(void **state)
{
	(void)state;
	const char *srcs[] = {"", "a", "node-7", "0123456789abcdef", "0123456789abcdefX"};
	for (size_t i = 0; i < YARD_ARRAY_LEN(srcs); i++)
		for (size_t size = 1; size <= 20; size++) {
			char got[21], want[21];
			memset(got, '#', sizeof got);
			memset(want, '#', sizeof want);
			yard_strcopy(got, size, srcs[i]);
			snprintf(want, size, "%s", srcs[i]);
			assert_memory_equal(got, want, sizeof got);
		}
}

/* yard_grow: kept bytes stay, new ones read zero, capacity at least doubles, and a size
 * that overflows is refused with the array untouched. */
static void test_grow_keeps_bytes_and_zeroes_new_ones(void **state)
{
	int *a = NULL, cap = 0;
	assert_int_equal(yard_grow((void **)&a, sizeof *a, &cap, 0), 0);
	assert_null(a);
	assert_int_equal(yard_grow((void **)&a, sizeof *a, &cap, 10), 0);
	assert_non_null(a);
	assert_true(cap >= 10);
	int n = 0;
	for (int round = 0; round < 12; round++) {
		int before = cap;
		for (; n < cap; n++) {
			assert_int_equal(a[n], 0);
			a[n] = n * 7 + 1;
		}
		assert_int_equal(yard_grow((void **)&a, sizeof *a, &cap, cap + 1), 0);
		assert_true(cap >= 2 * before);
		for (int i = 0; i < n; i++)
			assert_int_equal(a[i], i * 7 + 1);
	}
	int same = cap;
	assert_int_equal(yard_grow((void **)&a, sizeof *a, &cap, cap), 0); /* no growth asked */
	assert_int_equal(cap, same);
	/* elements larger than a page */
	struct big {
		char b[5000];
	} *g = NULL;
	int gcap = 0;
	assert_int_equal(yard_grow((void **)&g, sizeof *g, &gcap, 3), 0);
	assert_int_equal(gcap, 3);
	memset(g[2].b, 'x', sizeof g[2].b);
	assert_int_equal(yard_grow((void **)&g, sizeof *g, &gcap, 4), 0);
	assert_int_equal(gcap, 6);
	assert_int_equal(g[2].b[4999], 'x');
	assert_int_equal(g[5].b[4999], 0);
	yard_grow_free(g, sizeof *g, gcap);
	/* a size that overflows: refused, the array as it was */
	int *kept = a;
	assert_int_equal(yard_grow((void **)&a, SIZE_MAX / 4, &cap, same + 1), -1);
	assert_ptr_equal(a, kept);
	assert_int_equal(cap, same);
	assert_int_equal(a[n - 1], (n - 1) * 7 + 1);
	yard_grow_free(a, sizeof *a, cap);
	yard_grow_free(NULL, sizeof *a, 0);
}

#if defined(__SANITIZE_ADDRESS__)
#define TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_LSAN 1
#endif
#endif
#ifdef TEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/* Under LeakSanitizer (scripts/sanitize): memory that only a yard_grow array points to is
 * not a leak (the daemons' soft jobs point to their JSON from such arrays; before the
 * arrays were root regions, every yardd that ended with jobs held "leaked" them). */
static void test_grow_arrays_are_leak_roots(void **state)
{
#ifdef TEST_LSAN
	void **a = NULL;
	int cap = 0;
	assert_int_equal(yard_grow((void **)&a, sizeof *a, &cap, 4), 0);
	a[0] = malloc(100);
	assert_int_equal(yard_grow((void **)&a, sizeof *a, &cap, 100000), 0); /* moved */
	a[99999] = malloc(200);
	assert_int_equal(__lsan_do_recoverable_leak_check(), 0);
	free(a[0]);
	free(a[99999]);
	yard_grow_free(a, sizeof *a, cap);
#else
	skip(); /* only a leak checker can tell */
#endif
}

static long minor_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* Growing copies no byte: doubling a 64 MiB array whose every page is in use faults in
 * (nearly) no page, where a copy into fresh memory (what realloc does with a large block
 * under tcmalloc) faults in all of them. The reference is what touching 64 MiB of fresh
 * memory costs here (fewer faults where the kernel gives huge pages). */
static void test_grow_copies_no_page(void **state)
{
	const size_t mib64 = (size_t)64 << 20;
	char *fresh = mmap(NULL, mib64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(fresh != MAP_FAILED);
	long f0 = minor_faults();
	memset(fresh, 1, mib64);
	long reference = minor_faults() - f0;
	munmap(fresh, mib64);
	assert_true(reference >= 32); /* at least one fault per 2 MiB */

	char *a = NULL;
	int cap = 0;
	assert_int_equal(yard_grow((void **)&a, 1, &cap, (int)mib64), 0);
	memset(a, 2, mib64);
	long g0 = minor_faults();
	assert_int_equal(yard_grow((void **)&a, 1, &cap, (int)mib64 + 1), 0);
	long grew = minor_faults() - g0;
	assert_true(cap >= 2 * (int)mib64);
	assert_int_equal(a[0], 2);
	assert_int_equal(a[mib64 - 1], 2);
	assert_int_equal(a[mib64], 0);
	yard_grow_free(a, 1, cap);
	if (grew * 8 >= reference)
		fail_msg("growing a 64 MiB array faulted in %ld pages (touching 64 MiB: %ld)", grew,
		         reference);
}

/* "a.b.c.d:port" is taken whole or not at all: trailing text, ports out of range, names and
 * malformed hosts are refused with nothing written */
static void test_addr_parse_whole_or_nothing(void **state)
{
	(void)state;
	char host[16] = "unchanged";
	int port = -7;
	assert_int_equal(yard_addr_parse("127.0.0.1:7001", host, sizeof host, &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 7001);
	assert_int_equal(yard_addr_parse("10.20.30.40:65535", host, sizeof host, &port), 0);
	assert_string_equal(host, "10.20.30.40");
	assert_int_equal(port, 65535);
	assert_int_equal(yard_addr_parse("0.0.0.0:1", NULL, 0, NULL), 0);
	const char *bad[] = {"127.0.0.1:7001x",
	                     "127.0.0.1:0",
	                     "127.0.0.1:65536",
	                     "127.0.0.1:",
	                     "127.0.0.1",
	                     ":7001",
	                     "localhost:7001",
	                     "1.2.3:80",
	                     "1.2.3.4.5:80",
	                     "256.1.1.1:80",
	                     "127.0.0.1:-80",
	                     "127.0.0.1:+80",
	                     "127.0.0.1: 80",
	                     "127.0.0.1:80 ",
	                     " 127.0.0.1:80",
	                     "[::1]:80",
	                     "127.0.0.1:99999999999999999999",
	                     "",
	                     "127.0.0.1:7001:7002"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		strcpy(host, "unchanged");
		port = -7;
		if (yard_addr_parse(bad[i], host, sizeof host, &port) != -1)
			fail_msg("'%s' was accepted", bad[i]);
		assert_string_equal(host, "unchanged");
		assert_int_equal(port, -7);
	}
	assert_int_equal(yard_addr_parse(NULL, host, sizeof host, &port), -1);
	/* a host buffer too small for the host: refused, not cut */
	char tiny[8] = "x";
	assert_int_equal(yard_addr_parse("127.0.0.1:80", tiny, sizeof tiny, &port), -1);
	assert_string_equal(tiny, "x");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_utf8_valid_and_sanitize),
	    cmocka_unit_test(test_format_utc),
	    cmocka_unit_test(test_parse_rejects_oversized_body),
	    cmocka_unit_test(test_dumps_compact_matches_jansson),
	    cmocka_unit_test(test_loadb_reads_what_jansson_reads),
	    cmocka_unit_test(test_parse_rejects_deep_nesting),
	    cmocka_unit_test(test_parse_reports_position_of_malformed_json),
	    cmocka_unit_test(test_only_keys_names_unknown_field),
	    cmocka_unit_test(test_typed_getters_name_field_and_range),
	    cmocka_unit_test(test_strerror_covers_codes),
	    cmocka_unit_test(test_base64_vectors_round_trip_and_strictness),
	    cmocka_unit_test(test_strcopy_cuts_like_snprintf),
	    cmocka_unit_test(test_hist_buckets_quantiles_and_text),
	    cmocka_unit_test(test_grow_keeps_bytes_and_zeroes_new_ones),
	    cmocka_unit_test(test_grow_copies_no_page),
	    cmocka_unit_test(test_grow_arrays_are_leak_roots),
	    cmocka_unit_test(test_addr_parse_whole_or_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
