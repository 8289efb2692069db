/* jsonx.c: bounded parsing and typed, field-naming getters for untrusted JSON. */
#include "common/jsonx.h"

#include <stdarg.h>
#include <stdio.h>
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
	v = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (v == NULL) {
		yard_err_set(err, YARD_EINVAL, "malformed JSON at line %d column %d: %s", jerr.line,
		             jerr.column, jerr.text);
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
		for (const char *const *a = allowed; *a != NULL; a++)
			if (strcmp(*a, k) == 0) {
				ok = 1;
				break;
			}
		if (!ok) {
			jsonx_path(path, sizeof path, prefix, k);
			return yard_err_set(err, YARD_EINVAL, "%s: unknown field", path);
		}
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
