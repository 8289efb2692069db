/* clock.c: clock_gettime wrappers. */
#include "common/clock.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

uint64_t yard_now_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t yard_now_mono_ms(void) { return yard_now_mono_ns() / 1000000ull; }

int64_t yard_now_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void yard_sleep_ms(uint64_t ms)
{
	struct timespec req = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&req, &req) != 0 && errno == EINTR)
		;
}

void yard_format_utc(int64_t epoch_ms, char *out, size_t out_len)
{
	time_t t = (time_t)(epoch_ms / 1000);
	struct tm tm;
	if (out_len == 0)
		return;
	if (gmtime_r(&t, &tm) == NULL || strftime(out, out_len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(out, out_len, "?");
}
