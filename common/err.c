/* err.c: names for the project-wide error codes and the yard_err message helper. */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *yard_strerror(int code)
{
	switch (code) {
	case YARD_OK: return "ok";
	case YARD_EINVAL: return "invalid argument";
	case YARD_ENOMEM: return "out of memory";
	case YARD_EIO: return "I/O error";
	case YARD_ETIMEDOUT: return "timed out";
	case YARD_ENOTFOUND: return "not found";
	case YARD_EEXIST: return "already exists";
	case YARD_ENOTLEADER: return "not the leader";
	case YARD_EUNKNOWN: return "outcome unknown";
	case YARD_ENOSPACE: return "no space left";
	case YARD_EPEER: return "peer failed";
	case YARD_EABORTED: return "aborted";
	case YARD_EMISMATCH: return "mismatch between participants";
	case YARD_EPERM: return "permission denied";
	case YARD_EBUSY: return "busy";
	case YARD_ECORRUPT: return "corrupt data";
	case YARD_EUNSUPPORTED: return "unsupported";
	case YARD_EINTERNAL: return "internal error";
	}
	return "unknown error";
}

int yard_err_set(struct yard_err *err, int code, const char *fmt, ...)
{
	if (err != NULL) {
		va_list ap;
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* The edit distance (insertions, deletions, substitutions) between a and b, or more than
 * limit as soon as it is sure to be: only near misses matter. */
static size_t edit_distance(const char *a, const char *b, size_t limit)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 64 || lb > 64 || (la > lb ? la - lb : lb - la) > limit)
		return limit + 1;
	size_t row[65];
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0], best = row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t v = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < v)
				v = up + 1;
			if (row[j - 1] + 1 < v)
				v = row[j - 1] + 1;
			row[j] = v;
			diag = up;
			if (v < best)
				best = v;
		}
		if (best > limit)
			return limit + 1;
	}
	return row[lb];
}

const char *yard_near_miss(const char *word, const char *const *candidates)
{
	size_t typo = strlen(word) < 6 ? 1 : 2, best_d = typo + 1;
	const char *best = NULL;
	for (const char *const *c = candidates; *c != NULL; c++) {
		size_t d = edit_distance(word, *c, typo);
		if (d < best_d && d > 0)
			best = *c, best_d = d;
	}
	return best;
}
