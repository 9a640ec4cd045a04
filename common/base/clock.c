// Monotonic clock and interruptible sleep.
#include <time.h>

#include "stoker/clock.h"

uint64_t
stoker_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t
stoker_now_ms(void)
{
    return stoker_now_ns() / 1000000ull;
}

double
stoker_now_s(void)
{
    return (double)stoker_now_ns() / 1e9;
}

void
stoker_sleep_ms(uint64_t ms, const volatile int *stop)
{
    uint64_t end = stoker_now_ms() + ms;
    for (;;) {
        if (stop != NULL && *stop)
            return;
        uint64_t now = stoker_now_ms();
        if (now >= end)
            return;
        // Sleep in slices so a stop flag set by a signal handler is seen within 20 ms.
        uint64_t slice = end - now < 20 ? end - now : 20;
        struct timespec ts = {(time_t)(slice / 1000), (long)(slice % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}
