// The producers' stop flag: one per process, set by the signal handler, read by both loops and
// handed to the client so a blocking push returns soon after a signal (see producer_stop.h).
#include "producer_stop.h"
#include "stoker/process.h"
#include "stoker/producer.h"

static volatile int signal_stop;

static void
on_signal(int sig)
{
    (void)sig;
    signal_stop = 1;
}

const volatile int *
stoker_producer_stop_flag(void)
{
    return &signal_stop;
}

void
producer_stop_on_signals(void)
{
    stoker_process_on_stop(on_signal);
}

int
producer_stop_requested(const volatile int *user)
{
    return signal_stop || (user != NULL && *user);
}
