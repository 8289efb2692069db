/* clock.h: monotonic and wall clocks in the units their names say. */
#ifndef YARD_CLOCK_H
#define YARD_CLOCK_H

#include <stddef.h>
#include <stdint.h>

uint64_t yard_now_mono_ns(void);
uint64_t yard_now_mono_ms(void);
/* Milliseconds since the Unix epoch (for timestamps the leader stamps into commands). */
int64_t yard_now_wall_ms(void);
/* epoch_ms as UTC "2026-12-02T10:28:52Z" into out (at least 21 bytes; "?" if it cannot). */
void yard_format_utc(int64_t epoch_ms, char *out, size_t out_len);
/* Sleeps for the given milliseconds (restarting on EINTR). */
void yard_sleep_ms(uint64_t ms);

#endif
