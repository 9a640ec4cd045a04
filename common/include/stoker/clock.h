// Monotonic time and sleeping. All of stoker's deadlines use this clock.
#ifndef STOKER_CLOCK_H
#define STOKER_CLOCK_H

#include <stdint.h>

// Monotonic nanoseconds since an arbitrary origin.
uint64_t stoker_now_ns(void);
// Monotonic milliseconds / seconds since the same origin.
uint64_t stoker_now_ms(void);
double stoker_now_s(void);
// Sleeps for ms milliseconds (restarts after signals unless *stop becomes nonzero; stop may be
// NULL). Returns early when *stop is set.
void stoker_sleep_ms(uint64_t ms, const volatile int *stop);

#endif
