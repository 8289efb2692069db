/* common.h: the one include for what every trainyard module shares (errors, logging,
 * clocks, JSON helpers). Nothing here knows about jobs, raft or the data plane. */
#ifndef YARD_COMMON_H
#define YARD_COMMON_H

#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/jsonx.h"
#include "common/log.h"

#define YARD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define YARD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define YARD_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Copies src into dst of size bytes (size > 0), cut to size - 1 bytes and NUL-terminated:
 * snprintf(dst, size, "%s", src) without the format machinery, for paths every heartbeat
 * takes. */
static inline void yard_strcopy(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

#endif
