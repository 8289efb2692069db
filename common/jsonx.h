/* jsonx.h: strict JSON input helpers on top of jansson. Untrusted input goes through
 * jsonx_parse (size and depth bounds) and the typed getters, which name the offending
 * field ("parallel.tp") in the yard_err on failure. */
#ifndef YARD_JSONX_H
#define YARD_JSONX_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Parses buf[0..len) as one JSON value. Rejects more than max_bytes, nesting deeper than
 * max_depth, and trailing garbage. Returns a new reference or NULL with err set. */
json_t *jsonx_parse(const char *buf, size_t len, size_t max_bytes, int max_depth,
                    struct yard_err *err);

/* What json_loadb(buf, len, flags, err) gives, the same values and the same errors, about
 * three times quicker on well-formed text: a reader of our own takes what it can and leaves
 * the rest (malformed text included) to jansson. jsonx_loads: a NUL-terminated text with
 * flags 0 (as json_loads(text, 0, NULL)); NULL text gives NULL. YARD_JSON_READER=jansson in
 * the environment leaves every text to jansson (a benchmark's reference). */
json_t *jsonx_loadb(const char *buf, size_t len, size_t flags, json_error_t *err);
json_t *jsonx_loads(const char *text);
/* The reader alone: the value, or NULL for text it leaves to jansson. any: a scalar may
 * stand alone (JSON_DECODE_ANY). For tests; callers use jsonx_loadb. */
json_t *jsonx_parse_fast(const char *buf, size_t len, int any);

/* Nesting depth of a value (scalars are 0, [] and {} are 1). */
int jsonx_depth(const json_t *v);

/* Fails naming the first key of obj that is not in allowed (NULL-terminated list).
 * prefix is the dotted path of obj, "" at the top. */
int jsonx_only_keys(const json_t *obj, const char *prefix, const char *const *allowed,
                    struct yard_err *err);

/* Typed getters. `required` makes absence an error; otherwise *out keeps its default.
 * Range-checked integers fail naming the field and the allowed range. */
int jsonx_get_int(const json_t *obj, const char *prefix, const char *key, int required,
                  int64_t min, int64_t max, int64_t *out, struct yard_err *err);
int jsonx_get_double(const json_t *obj, const char *prefix, const char *key, int required,
                     double min, double max, double *out, struct yard_err *err);
int jsonx_get_bool(const json_t *obj, const char *prefix, const char *key, int required,
                   int *out, struct yard_err *err);
/* *out points into obj (borrowed). max_len bounds the string length in bytes. */
int jsonx_get_string(const json_t *obj, const char *prefix, const char *key, int required,
                     size_t max_len, const char **out, struct yard_err *err);

/* Writes "prefix.key" (or "key" when prefix is empty) into out. */
void jsonx_path(char *out, size_t out_len, const char *prefix, const char *key);

/* 1 when jsonx_parse(text, len, max_bytes, max_depth) accepts text printed by
 * jsonx_dumps_compact: within the size and raw depth, no \u0000 (jansson refuses NUL
 * without JSON_ALLOW_NUL), valid UTF-8 (a string made with json_string_nocheck may not be).
 * What the printer writes is otherwise well-formed JSON. Linear, allocates nothing. */
int jsonx_printed_parses(const char *text, size_t len, size_t max_bytes, int max_depth);

/* 1 when text[0..n) is valid UTF-8 as jansson takes it (no overlong forms, no surrogates,
 * nothing above U+10FFFF): what json_string accepts. */
int jsonx_utf8_valid(const char *text, size_t n);
/* Replaces, in place, each byte of the NUL-terminated text that does not begin a valid UTF-8
 * sequence with '?': text that quotes what a client sent (or cuts a character in two) can
 * then always go into a JSON answer. */
void jsonx_utf8_sanitize(char *text);

/* 1 when a and b are the same JSON down to object key order, integer vs real, and each
 * real's bits: what parsing b's printed text would give if b is a. */
int jsonx_identical(const json_t *a, const json_t *b);

/* A growing text: jsonx_buf_put appends n bytes (kept NUL-terminated); failed turns 1 at
 * the first allocation failure and later puts do nothing. Start from {0}; free text. */
struct jsonx_buf {
	char *text;
	size_t len, cap;
	int failed;
};
void jsonx_buf_put(void *buf, const char *s, size_t n);

/* s (n bytes) as a JSON string, quotes included, escaped as jansson's compact dump escapes
 * it ('"', '\\', control characters; all else as is), handed to put piece by piece. */
void jsonx_escape(const char *s, size_t n, void (*put)(void *ctx, const char *p, size_t len),
                  void *ctx);

/* The text jansson's json_dumps(v, JSON_COMPACT | (sort_keys ? JSON_SORT_KEYS : 0)) gives,
 * byte for byte (same escapes, same "%.17g" reals with ".0" and the exponent trimmed), two
 * to five times faster: what members store must not depend on which printer a build uses.
 * malloc'd, *len bytes; NULL without memory. */
char *jsonx_dumps_compact(const json_t *v, int sort_keys, size_t *len);
/* The same text appended to b (keys in the object's order). */
void jsonx_buf_put_json(struct jsonx_buf *b, const json_t *v);

#endif
