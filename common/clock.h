/* clock.h: monotonic and wall clocks in the units their names say. */
#ifndef YARD_CLOCK_H
#define YARD_CLOCK_H

#include <stdint.h>

uint64_t yard_now_mono_ns(void);
uint64_t yard_now_mono_ms(void);
/* Milliseconds since the Unix epoch (for timestamps the leader stamps into commands). */
int64_t yard_now_wall_ms(void);
/* Sleeps for the given milliseconds (restarting on EINTR). */
void yard_sleep_ms(uint64_t ms);

#endif
