/* jsonx.c: bounded parsing and typed, field-naming getters for untrusted JSON. */
#include "common/jsonx.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jsonx_path(char *out, size_t out_len, const char *prefix, const char *key)
{
	if (prefix == NULL || prefix[0] == '\0')
		snprintf(out, out_len, "%s", key);
	else
		snprintf(out, out_len, "%s.%s", prefix, key);
}

/* YARD_EINVAL naming field prefix.key: the path is formatted only when there is an error,
 * not on every field read. */
static int field_err(struct yard_err *err, const char *prefix, const char *key, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));
static int field_err(struct yard_err *err, const char *prefix, const char *key, const char *fmt,
                     ...)
{
	char path[256], what[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	jsonx_path(path, sizeof path, prefix, key);
	return yard_err_set(err, YARD_EINVAL, "%s: %s", path, what);
}

/* Depth is checked on the raw text before jansson builds anything, so a hostile
 * "[[[[..." cannot make the parser recurse deeply. Strings are skipped with escapes. */
static int raw_depth_exceeds(const char *buf, size_t len, int max_depth)
{
	int depth = 0, in_string = 0;
	for (size_t i = 0; i < len; i++) {
		char c = buf[i];
		if (in_string) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = 0;
			continue;
		}
		if (c == '"')
			in_string = 1;
		else if (c == '[' || c == '{') {
			if (++depth > max_depth)
				return 1;
		} else if (c == ']' || c == '}')
			depth--;
	}
	return 0;
}

/* The length of the UTF-8 sequence at s[i] (i < n) as jansson decodes it, or 0 when it is
 * not one: an overlong form, a surrogate, above U+10FFFF, or cut short by n. */
static size_t utf8_seq(const unsigned char *s, size_t i, size_t n)
{
	unsigned c = s[i];
	if (c < 0x80)
		return 1;
	int extra = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
	if (extra < 0 || i + (size_t)extra >= n) /* the sequence must end within s */
		return 0;
	unsigned v = c & (0x3fu >> extra);
	for (int k = 1; k <= extra; k++) {
		unsigned t = s[i + (size_t)k];
		if ((t & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (t & 0x3f);
	}
	if ((extra == 1 && v < 0x80) || (extra == 2 && v < 0x800) || (extra == 3 && v < 0x10000) ||
	    v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	return (size_t)extra + 1;
}

/* ---- a quicker reader for well-formed JSON ----
 * jansson's parser reads a byte at a time through a stream and a token buffer: ~30 µs for
 * a stored job spec of 825 bytes, of which building the values is ~7. The reader below
 * takes well-formed JSON straight from the buffer and builds the same values; anything it
 * does not take (malformed text, a duplicate key, \u0000, a lone surrogate, an integer or
 * real out of range, a number over 63 characters, nesting deeper than FAST_MAX_DEPTH) it
 * leaves to jansson, whose result and error text are then the answer. So it can only make
 * a parse quicker, never change what a parse gives (tests/unit/test_common.c compares the
 * two on random documents and on mutations of them). */
#define FAST_MAX_DEPTH 64

struct fast {
	const char *p, *end;
	char *tmp; /* an escaped string's decoded bytes */
	size_t tmp_len, tmp_cap;
	int depth;
};

static void fast_ws(struct fast *f)
{
	while (f->p < f->end && (*f->p == ' ' || *f->p == '\n' || *f->p == '\r' || *f->p == '\t'))
		f->p++;
}

static int fast_put(struct fast *f, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	if (f->tmp_len + n > f->tmp_cap) {
		size_t cap = f->tmp_cap ? 2 * f->tmp_cap : 256;
		while (cap < f->tmp_len + n)
			cap *= 2;
		char *grown = realloc(f->tmp, cap);
		if (grown == NULL)
			return -1;
		f->tmp = grown;
		f->tmp_cap = cap;
	}
	memcpy(f->tmp + f->tmp_len, s, n);
	f->tmp_len += n;
	return 0;
}

static int fast_hex4(const char *s, const char *end, unsigned *out)
{
	unsigned v = 0;
	if (end - s < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
		        : c >= 'a' && c <= 'f' ? c - 'a' + 10
		        : c >= 'A' && c <= 'F' ? c - 'A' + 10
		                               : -1;
		if (d < 0)
			return -1;
		v = v << 4 | (unsigned)d;
	}
	*out = v;
	return 0;
}

/* A \u escape at s (after the backslash and 'u'), with its low surrogate if it is a high
 * one, appended as UTF-8; returns the bytes read, 0 for what jansson refuses or we leave. */
static size_t fast_unicode(struct fast *f, const char *s)
{
	unsigned v, lo;
	size_t used = 4;
	if (fast_hex4(s, f->end, &v) != 0 || v == 0 || (v >= 0xdc00 && v <= 0xdfff))
		return 0;
	if (v >= 0xd800 && v <= 0xdbff) {
		if (f->end - s < 10 || s[4] != '\\' || s[5] != 'u' ||
		    fast_hex4(s + 6, f->end, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff)
			return 0;
		v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
		used = 10;
	}
	char u[4];
	size_t n;
	if (v < 0x80) {
		u[0] = (char)v;
		n = 1;
	} else if (v < 0x800) {
		u[0] = (char)(0xc0 | v >> 6);
		u[1] = (char)(0x80 | (v & 0x3f));
		n = 2;
	} else if (v < 0x10000) {
		u[0] = (char)(0xe0 | v >> 12);
		u[1] = (char)(0x80 | (v >> 6 & 0x3f));
		u[2] = (char)(0x80 | (v & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | v >> 18);
		u[1] = (char)(0x80 | (v >> 12 & 0x3f));
		u[2] = (char)(0x80 | (v >> 6 & 0x3f));
		u[3] = (char)(0x80 | (v & 0x3f));
		n = 4;
	}
	return fast_put(f, u, n) == 0 ? used : 0;
}

/* The string whose opening quote f->p is past: *s and *n its bytes, in the buffer itself
 * when it has no escape (*decoded 0), else in f->tmp (*decoded 1, valid until the next
 * string). -1: not taken. */
static int fast_string(struct fast *f, const char **s, size_t *n, int *decoded)
{
	const unsigned char *q = (const unsigned char *)f->p, *end = (const unsigned char *)f->end;
	while (q < end && *q != '"' && *q != '\\' && *q >= 0x20 && *q < 0x80)
		q++;
	if (q < end && *q == '"') {
		*s = f->p;
		*n = (size_t)((const char *)q - f->p);
		*decoded = 0;
		f->p = (const char *)q + 1;
		return 0;
	}
	f->tmp_len = 0;
	if (fast_put(f, f->p, (size_t)((const char *)q - f->p)) != 0)
		return -1;
	while (q < end) {
		unsigned char c = *q;
		size_t len = 1;
		if (c == '"') {
			*s = f->tmp;
			*n = f->tmp_len;
			*decoded = 1;
			f->p = (const char *)q + 1;
			return 0;
		}
		if (c < 0x20)
			return -1;
		if (c == '\\') {
			static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
			if (q + 1 >= end)
				return -1;
			if (q[1] == 'u') {
				size_t used = fast_unicode(f, (const char *)q + 2);
				if (used == 0)
					return -1;
				q += 2 + used;
				continue;
			}
			const char *hit = q[1] != '\0' ? strchr(from, q[1]) : NULL;
			if (hit == NULL || fast_put(f, &to[hit - from], 1) != 0)
				return -1;
			q += 2;
			continue;
		}
		if (c >= 0x80 && (len = utf8_seq(q, 0, (size_t)(end - q))) == 0)
			return -1;
		if (fast_put(f, (const char *)q, len) != 0)
			return -1;
		q += len;
	}
	return -1; /* no closing quote */
}

static int fast_digits(const char **q, const char *end)
{
	const char *start = *q;
	while (*q < end && **q >= '0' && **q <= '9')
		(*q)++;
	return *q > start ? 0 : -1;
}

/* A number as jansson reads it: an integer (strtoll) unless it has a fraction or an
 * exponent, then a real (strtod). */
static json_t *fast_number(struct fast *f)
{
	const char *q = f->p, *end = f->end;
	int real = 0;
	if (q < end && *q == '-')
		q++;
	if (q < end && *q == '0')
		q++;
	else if (fast_digits(&q, end) != 0)
		return NULL;
	if (q < end && *q == '.') {
		q++;
		if (fast_digits(&q, end) != 0)
			return NULL;
		real = 1;
	}
	if (q < end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < end && (*q == '+' || *q == '-'))
			q++;
		if (fast_digits(&q, end) != 0)
			return NULL;
		real = 1;
	}
	char text[64];
	size_t n = (size_t)(q - f->p);
	if (n >= sizeof text)
		return NULL;
	memcpy(text, f->p, n);
	text[n] = '\0';
	errno = 0;
	json_t *v;
	if (!real) {
		long long i = strtoll(text, NULL, 10);
		if (errno == ERANGE)
			return NULL;
		v = json_integer((json_int_t)i);
	} else {
		double d = strtod(text, NULL);
		if (errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL))
			return NULL;
		v = json_real(d);
	}
	if (v != NULL)
		f->p = q;
	return v;
}

static json_t *fast_value(struct fast *f);

/* 1, having read it, when the next character is c. */
static int fast_at(struct fast *f, char c)
{
	if (f->p < f->end && *f->p == c) {
		f->p++;
		return 1;
	}
	return 0;
}

/* After a member or an element: 1 when a comma leads to another, 0 at the closing
 * character (read), -1 for anything else. */
static int fast_next(struct fast *f, char close)
{
	fast_ws(f);
	if (fast_at(f, ',')) {
		fast_ws(f);
		return 1;
	}
	return fast_at(f, close) ? 0 : -1;
}

static json_t *fast_object(struct fast *f)
{
	json_t *obj = json_object();
	if (obj == NULL)
		return NULL;
	fast_ws(f);
	if (fast_at(f, '}'))
		return obj;
	for (;;) {
		const char *key;
		size_t key_len;
		int decoded;
		char *copy = NULL;
		if (!fast_at(f, '"') || fast_string(f, &key, &key_len, &decoded) != 0)
			break;
		if (decoded) { /* the value's strings reuse f->tmp */
			if ((copy = malloc(key_len + 1)) == NULL)
				break;
			memcpy(copy, key, key_len);
			key = copy;
		}
		fast_ws(f);
		json_t *v = NULL;
		if (fast_at(f, ':')) {
			fast_ws(f);
			v = fast_value(f);
		}
		size_t before = json_object_size(obj);
		/* a duplicate key replaces the value: left to jansson, which knows the flags */
		int ok = v != NULL && json_object_setn_new_nocheck(obj, key, key_len, v) == 0 &&
		         json_object_size(obj) > before;
		free(copy);
		int next = ok ? fast_next(f, '}') : -1;
		if (next == 0)
			return obj;
		if (next < 0)
			break;
	}
	json_decref(obj);
	return NULL;
}

static json_t *fast_array(struct fast *f)
{
	json_t *arr = json_array();
	if (arr == NULL)
		return NULL;
	fast_ws(f);
	if (fast_at(f, ']'))
		return arr;
	for (;;) {
		json_t *v = fast_value(f);
		int next = v != NULL && json_array_append_new(arr, v) == 0 ? fast_next(f, ']') : -1;
		if (next == 0)
			return arr;
		if (next < 0)
			break;
	}
	json_decref(arr);
	return NULL;
}

static json_t *fast_literal(struct fast *f, const char *word, json_t *v)
{
	size_t n = strlen(word);
	if ((size_t)(f->end - f->p) < n || memcmp(f->p, word, n) != 0)
		return NULL;
	f->p += n;
	return v;
}

static json_t *fast_value(struct fast *f)
{
	if (f->p >= f->end)
		return NULL;
	json_t *v = NULL;
	switch (*f->p) {
	case '{':
	case '[':
		if (f->depth >= FAST_MAX_DEPTH)
			return NULL;
		f->depth++;
		f->p++;
		v = f->p[-1] == '{' ? fast_object(f) : fast_array(f);
		f->depth--;
		return v;
	case '"': {
		const char *s;
		size_t n;
		int decoded;
		f->p++;
		return fast_string(f, &s, &n, &decoded) == 0 ? json_stringn_nocheck(s, n) : NULL;
	}
	case 't':
		return fast_literal(f, "true", json_true());
	case 'f':
		return fast_literal(f, "false", json_false());
	case 'n':
		return fast_literal(f, "null", json_null());
	default:
		return fast_number(f);
	}
}

json_t *jsonx_parse_fast(const char *buf, size_t len, int any)
{
	struct fast f = {.p = buf, .end = buf + len};
	fast_ws(&f);
	if (!any && (f.p >= f.end || (*f.p != '{' && *f.p != '[')))
		return NULL;
	json_t *v = fast_value(&f);
	free(f.tmp);
	if (v != NULL) {
		fast_ws(&f);
		if (f.p != f.end) { /* trailing text: jansson's error */
			json_decref(v);
			v = NULL;
		}
	}
	return v;
}

/* YARD_JSON_READER=jansson in the environment: jansson alone (the reference of
 * scripts/bench/reread). Read once; a race reads the same value twice. */
static int reader_is_ours(void)
{
	static int mode; /* 0: not read yet, 1: ours, 2: jansson's */
	int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
	if (m == 0) {
		const char *e = getenv("YARD_JSON_READER");
		m = e != NULL && strcmp(e, "jansson") == 0 ? 2 : 1;
		__atomic_store_n(&mode, m, __ATOMIC_RELAXED);
	}
	return m == 1;
}

json_t *jsonx_loadb(const char *buf, size_t len, size_t flags, json_error_t *err)
{
	/* the reader knows no other flag; duplicates it leaves to jansson whatever the flags */
	if ((flags & ~(size_t)(JSON_REJECT_DUPLICATES | JSON_DECODE_ANY)) == 0 &&
	    reader_is_ours()) {
		json_t *v = jsonx_parse_fast(buf, len, (flags & JSON_DECODE_ANY) != 0);
		if (v != NULL)
			return v;
	}
	return json_loadb(buf, len, flags, err);
}

json_t *jsonx_loads(const char *text)
{
	return text != NULL ? jsonx_loadb(text, strlen(text), 0, NULL) : NULL;
}

int jsonx_utf8_valid(const char *text, size_t n)
{
	const unsigned char *s = (const unsigned char *)text;
	for (size_t i = 0, len; i < n; i += len)
		if ((len = utf8_seq(s, i, n)) == 0)
			return 0;
	return 1;
}

void jsonx_utf8_sanitize(char *text)
{
	unsigned char *s = (unsigned char *)text;
	size_t n = strlen(text);
	for (size_t i = 0, len; i < n; i += len)
		if ((len = utf8_seq(s, i, n)) == 0) {
			s[i] = '?';
			len = 1;
		}
}

int jsonx_printed_parses(const char *text, size_t len, size_t max_bytes, int max_depth)
{
	static const char nul[] = "\\u0000";
	if (text == NULL || len > max_bytes || raw_depth_exceeds(text, len, max_depth))
		return 0;
	/* jansson refuses a NUL in a string or key (no JSON_ALLOW_NUL) */
	for (size_t i = 0; i + sizeof nul - 1 <= len; i++)
		if (text[i] == '\\' && memcmp(text + i, nul, sizeof nul - 1) == 0)
			return 0;
	return jsonx_utf8_valid(text, len);
}

int jsonx_identical(const json_t *a, const json_t *b)
{
	if (a == b)
		return 1;
	if (a == NULL || b == NULL || json_typeof(a) != json_typeof(b))
		return 0;
	switch (json_typeof(a)) {
	case JSON_OBJECT: {
		if (json_object_size(a) != json_object_size(b))
			return 0;
		void *ia = json_object_iter((json_t *)a), *ib = json_object_iter((json_t *)b);
		while (ia != NULL && ib != NULL) {
			if (strcmp(json_object_iter_key(ia), json_object_iter_key(ib)) != 0 ||
			    !jsonx_identical(json_object_iter_value(ia),
			                     json_object_iter_value(ib)))
				return 0;
			ia = json_object_iter_next((json_t *)a, ia);
			ib = json_object_iter_next((json_t *)b, ib);
		}
		return ia == NULL && ib == NULL;
	}
	case JSON_ARRAY:
		if (json_array_size(a) != json_array_size(b))
			return 0;
		for (size_t i = 0; i < json_array_size(a); i++)
			if (!jsonx_identical(json_array_get(a, i), json_array_get(b, i)))
				return 0;
		return 1;
	case JSON_STRING:
		return json_string_length(a) == json_string_length(b) &&
		       memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) ==
		           0;
	case JSON_INTEGER:
		return json_integer_value(a) == json_integer_value(b);
	case JSON_REAL: {
		double x = json_real_value(a), y = json_real_value(b);
		return memcmp(&x, &y, sizeof x) == 0;
	}
	default:
		return 1; /* true, false, null: same type */
	}
}

json_t *jsonx_parse(const char *buf, size_t len, size_t max_bytes, int max_depth,
                    struct yard_err *err)
{
	json_error_t jerr;
	json_t *v;

	if (len > max_bytes) {
		yard_err_set(err, YARD_EINVAL, "body is %zu bytes, over the limit of %zu", len,
		             max_bytes);
		return NULL;
	}
	if (raw_depth_exceeds(buf, len, max_depth)) {
		yard_err_set(err, YARD_EINVAL, "JSON nested deeper than %d levels", max_depth);
		return NULL;
	}
	v = jsonx_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (v == NULL) {
		/* jansson names its own flag there; say what is wrong with the input instead */
		const char *near = strstr(jerr.text, " near ");
		if (strstr(jerr.text, "JSON_ALLOW_NUL") != NULL)
			yard_err_set(
			    err, YARD_EINVAL,
			    "malformed JSON at line %d column %d: \\u0000 (a NUL character) "
			    "is not allowed in a string%s",
			    jerr.line, jerr.column, near != NULL ? near : "");
		else
			yard_err_set(err, YARD_EINVAL, "malformed JSON at line %d column %d: %s",
			             jerr.line, jerr.column, jerr.text);
		return NULL;
	}
	return v;
}

int jsonx_depth(const json_t *v)
{
	int max = 0;
	if (json_is_object(v)) {
		const char *k;
		json_t *c;
		json_object_foreach((json_t *)v, k, c)
		{
			int d = jsonx_depth(c);
			if (d > max)
				max = d;
		}
		return max + 1;
	}
	if (json_is_array(v)) {
		size_t i;
		json_t *c;
		json_array_foreach(v, i, c)
		{
			int d = jsonx_depth(c);
			if (d > max)
				max = d;
		}
		return max + 1;
	}
	return 0;
}

int jsonx_only_keys(const json_t *obj, const char *prefix, const char *const *allowed,
                    struct yard_err *err)
{
	const char *k;
	json_t *c;
	char path[256];

	json_object_foreach((json_t *)obj, k, c)
	{
		int ok = 0;
		for (const char *const *a = allowed; *a != NULL && !ok; a++)
			ok = strcmp(*a, k) == 0;
		if (ok)
			continue;
		jsonx_path(path, sizeof path, prefix, k);
		const char *near = yard_near_miss(k, allowed);
		if (near != NULL)
			return yard_err_set(err, YARD_EINVAL,
			                    "%s: unknown field (did you mean '%s'?)", path, near);
		/* else the fields it takes, as many as the message holds */
		char known[320];
		size_t used = 0;
		known[0] = '\0';
		for (const char *const *a = allowed; *a != NULL; a++) {
			size_t n = strlen(*a);
			if (used + n + 8 >= sizeof known) {
				memcpy(known + used, ", ...", 6);
				break;
			}
			used += (size_t)snprintf(known + used, sizeof known - used, "%s%s",
			                         used ? ", " : "", *a);
		}
		return yard_err_set(err, YARD_EINVAL, "%s: unknown field (known: %s)", path,
		                    known[0] ? known : "none");
	}
	return 0;
}

static json_t *lookup(const json_t *obj, const char *prefix, const char *key, int required,
                      struct yard_err *err, int *rc)
{
	json_t *v = json_object_get(obj, key);
	*rc = 0;
	if (v == NULL || json_is_null(v)) {
		if (required) {
			char path[256];
			jsonx_path(path, sizeof path, prefix, key);
			*rc = yard_err_set(err, YARD_EINVAL, "%s: required field missing", path);
		}
		return NULL;
	}
	return v;
}

int jsonx_get_int(const json_t *obj, const char *prefix, const char *key, int required, int64_t min,
                  int64_t max, int64_t *out, struct yard_err *err)
{
	int rc;
	json_t *v = lookup(obj, prefix, key, required, err, &rc);
	if (v == NULL)
		return rc;
	if (!json_is_integer(v))
		return field_err(err, prefix, key, "must be an integer");
	if (json_integer_value(v) < min || json_integer_value(v) > max)
		return field_err(err, prefix, key, "%lld is out of range [%lld, %lld]",
		                 (long long)json_integer_value(v), (long long)min, (long long)max);
	*out = json_integer_value(v);
	return 0;
}

int jsonx_get_double(const json_t *obj, const char *prefix, const char *key, int required,
                     double min, double max, double *out, struct yard_err *err)
{
	int rc;
	json_t *v = lookup(obj, prefix, key, required, err, &rc);
	if (v == NULL)
		return rc;
	if (!json_is_number(v))
		return field_err(err, prefix, key, "must be a number");
	if (json_number_value(v) < min || json_number_value(v) > max)
		return field_err(err, prefix, key, "%g is out of range [%g, %g]",
		                 json_number_value(v), min, max);
	*out = json_number_value(v);
	return 0;
}

int jsonx_get_bool(const json_t *obj, const char *prefix, const char *key, int required, int *out,
                   struct yard_err *err)
{
	int rc;
	json_t *v = lookup(obj, prefix, key, required, err, &rc);
	if (v == NULL)
		return rc;
	if (!json_is_boolean(v))
		return field_err(err, prefix, key, "must be true or false");
	*out = json_is_true(v);
	return 0;
}

int jsonx_get_string(const json_t *obj, const char *prefix, const char *key, int required,
                     size_t max_len, const char **out, struct yard_err *err)
{
	int rc;
	json_t *v = lookup(obj, prefix, key, required, err, &rc);
	if (v == NULL)
		return rc;
	if (!json_is_string(v))
		return field_err(err, prefix, key, "must be a string");
	if (json_string_length(v) > max_len)
		return field_err(err, prefix, key, "longer than %zu bytes", max_len);
	*out = json_string_value(v);
	return 0;
}

/* ---- jsonx_dumps_compact ---- */

/* Room for n more bytes and the NUL; 0, or -1 (failed). */
static int reserve(struct jsonx_buf *b, size_t n)
{
	if (b->failed)
		return -1;
	if (b->len + n + 1 <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n + 1)
		cap *= 2;
	char *grown = realloc(b->text, cap);
	if (grown == NULL) {
		b->failed = 1;
		return -1;
	}
	b->text = grown;
	b->cap = cap;
	return 0;
}

void jsonx_buf_put(void *ctx, const char *s, size_t n)
{
	struct jsonx_buf *b = ctx;
	if (reserve(b, n) != 0)
		return;
	memcpy(b->text + b->len, s, n);
	b->len += n;
	b->text[b->len] = '\0';
}

/* The escape of a byte that JSON text cannot hold as it is ('"', '\\', control
 * characters) into out; returns its length (2 or 6). */
static size_t escape_byte(unsigned char ch, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	out[0] = '\\';
	switch (ch) {
	case '"':
		out[1] = '"';
		return 2;
	case '\\':
		out[1] = '\\';
		return 2;
	case '\b':
		out[1] = 'b';
		return 2;
	case '\f':
		out[1] = 'f';
		return 2;
	case '\n':
		out[1] = 'n';
		return 2;
	case '\r':
		out[1] = 'r';
		return 2;
	case '\t':
		out[1] = 't';
		return 2;
	default:
		memcpy(out + 1, "u00", 3);
		out[4] = hex[ch >> 4];
		out[5] = hex[ch & 15];
		return 6;
	}
}

static int plain_byte(unsigned char ch)
{
	return ch >= 0x20 && ch != '"' && ch != '\\';
}

void jsonx_escape(const char *s, size_t n, void (*put)(void *ctx, const char *p, size_t len),
                  void *ctx)
{
	size_t run = 0; /* bytes copied as they are, pending */
	put(ctx, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (plain_byte(ch)) {
			run++;
			continue;
		}
		if (run > 0)
			put(ctx, s + i - run, run);
		run = 0;
		char esc[6];
		put(ctx, esc, escape_byte(ch, esc));
	}
	if (run > 0)
		put(ctx, s + n - run, run);
	put(ctx, "\"", 1);
}

/* jsonx_buf_put for the dumper's many short pieces: no call when there is room */
static inline void put(struct jsonx_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 <= b->cap) {
		memcpy(b->text + b->len, s, n);
		b->len += n;
		b->text[b->len] = '\0';
	} else {
		jsonx_buf_put(b, s, n);
	}
}

#define ESCAPE_PIECE 4096

/* jsonx_escape's text, written straight into the buffer: a piece of the string at a time,
 * so that a long string (a build, a checkpoint) never makes room for six times its length */
static void dump_string(struct jsonx_buf *b, const char *s, size_t n)
{
	put(b, "\"", 1);
	for (size_t at = 0; at < n && !b->failed;) {
		size_t piece = n - at < ESCAPE_PIECE ? n - at : ESCAPE_PIECE;
		if (reserve(b, 6 * piece) != 0)
			return;
		char *out = b->text + b->len;
		for (size_t i = at; i < at + piece; i++) {
			unsigned char ch = (unsigned char)s[i];
			if (plain_byte(ch))
				*out++ = (char)ch;
			else
				out += escape_byte(ch, out);
		}
		*out = '\0';
		b->len = (size_t)(out - b->text);
		at += piece;
	}
	put(b, "\"", 1);
}

/* an object's member, for dumping in key order */
struct member {
	const char *key;
	const json_t *value;
};

static int member_cmp(const void *a, const void *b)
{
	return strcmp(((const struct member *)a)->key, ((const struct member *)b)->key);
}

/* "%" JSON_INTEGER_FORMAT without printf (out: at least 21 bytes); returns the length. */
static size_t format_int(char *out, json_int_t v)
{
	char digits[24];
	size_t n = 0, len = 0;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	do {
		digits[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u > 0);
	if (v < 0)
		out[len++] = '-';
	while (n > 0)
		out[len++] = digits[--n];
	return len;
}

#define REAL_CACHE 64

/* jansson's real format: "%.17g", ".0" when neither '.' nor 'e' shows, and an exponent
 * without '+' or leading zeros */
static void dump_real(struct jsonx_buf *b, double v)
{
	char buf[64];
	if (v > -1e15 && v < 1e15 && v == (double)(long long)v && !(v == 0 && signbit(v))) {
		/* an integral value: "%.17g" prints its digits, then ".0" comes (the common case
		 * in specs, and glibc's "%.17g" is the slow part of printing one) */
		size_t k = format_int(buf, (json_int_t)v);
		memcpy(buf + k, ".0", 2);
		put(b, buf, k + 2);
		return;
	}
	/* the same few values (a spec's defaults) come again and again: the text of the last
	 * ones seen, per thread, by their bits */
	static _Thread_local struct {
		uint64_t bits;
		uint8_t len; /* 0: empty */
		char text[31];
	} cache[REAL_CACHE];
	uint64_t bits;
	memcpy(&bits, &v, sizeof bits);
	unsigned slot = (unsigned)((bits * 0x9E3779B97F4A7C15ULL) >> 58) % REAL_CACHE;
	if (cache[slot].len > 0 && cache[slot].bits == bits) {
		put(b, cache[slot].text, cache[slot].len);
		return;
	}
	int n = snprintf(buf, sizeof buf, "%.17g", v);
	if (n < 0 || (size_t)n >= sizeof buf - 3) {
		b->failed = 1;
		return;
	}
	if (strchr(buf, '.') == NULL && strchr(buf, 'e') == NULL) {
		memcpy(buf + n, ".0", 3);
		n += 2;
	}
	char *e = strchr(buf, 'e');
	if (e != NULL) {
		/* what follows 'e': a '+' goes, and so do the zeros before the first digit */
		char *start = e + 1, *end = start + 1;
		if (*start == '-')
			start++;
		while (*end == '0')
			end++;
		if (end != start) {
			memmove(start, end, strlen(end) + 1);
			n = (int)strlen(buf);
		}
	}
	if ((size_t)n < sizeof cache[slot].text) {
		cache[slot].bits = bits;
		cache[slot].len = (uint8_t)n;
		memcpy(cache[slot].text, buf, (size_t)n);
	}
	put(b, buf, (size_t)n);
}

static void dump_value(struct jsonx_buf *b, const json_t *v, int sort_keys)
{
	char num[32];
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		size_t n = json_object_size(v), i = 0;
		const char *key;
		json_t *value;
		put(b, "{", 1);
		if (!sort_keys || n < 2) {
			json_object_foreach((json_t *)v, key, value)
			{
				if (i++ > 0)
					put(b, ",", 1);
				dump_string(b, key, strlen(key));
				put(b, ":", 1);
				dump_value(b, value, sort_keys);
			}
		} else {
			/* members in key order: a spec built or read in key order (most of what is
			 * dumped) needs no sort; a small object needs no malloc */
			struct member small[16], *m = n <= 16 ? small : malloc(n * sizeof *m);
			int sorted = 1;
			if (m == NULL) {
				b->failed = 1;
				return;
			}
			json_object_foreach((json_t *)v, key, value)
			{
				m[i].key = key;
				m[i].value = value;
				sorted &= i == 0 || strcmp(m[i - 1].key, key) < 0;
				i++;
			}
			if (!sorted)
				qsort(m, n, sizeof *m, member_cmp);
			for (i = 0; i < n; i++) {
				if (i > 0)
					put(b, ",", 1);
				dump_string(b, m[i].key, strlen(m[i].key));
				put(b, ":", 1);
				dump_value(b, m[i].value, sort_keys);
			}
			if (m != small)
				free(m);
		}
		put(b, "}", 1);
		break;
	}
	case JSON_ARRAY: {
		put(b, "[", 1);
		for (size_t i = 0; i < json_array_size(v); i++) {
			if (i > 0)
				put(b, ",", 1);
			dump_value(b, json_array_get(v, i), sort_keys);
		}
		put(b, "]", 1);
		break;
	}
	case JSON_STRING:
		dump_string(b, json_string_value(v), json_string_length(v));
		break;
	case JSON_INTEGER: {
		size_t n = format_int(num, json_integer_value(v));
		put(b, num, n);
		break;
	}
	case JSON_REAL:
		dump_real(b, json_real_value(v));
		break;
	case JSON_TRUE:
		put(b, "true", 4);
		break;
	case JSON_FALSE:
		put(b, "false", 5);
		break;
	case JSON_NULL:
		put(b, "null", 4);
		break;
	}
}

void jsonx_buf_put_json(struct jsonx_buf *b, const json_t *v)
{
	dump_value(b, v, 0);
}

char *jsonx_dumps_compact(const json_t *v, int sort_keys, size_t *len)
{
	struct jsonx_buf b = {0};
	if (v == NULL || reserve(&b, 1023) != 0) /* a spec's text fits: no growing */
		return NULL;
	dump_value(&b, v, sort_keys);
	if (b.failed || b.text == NULL) {
		free(b.text);
		return NULL;
	}
	if (len != NULL)
		*len = b.len;
	return b.text;
}
