/* common.h: the one include for what every trainyard module shares (errors, logging,
 * clocks, JSON helpers). Nothing here knows about jobs, raft or the data plane. */
#ifndef YARD_COMMON_H
#define YARD_COMMON_H

#include "common/clock.h"
#include "common/err.h"
#include "common/jsonx.h"
#include "common/log.h"

#define YARD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define YARD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define YARD_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
