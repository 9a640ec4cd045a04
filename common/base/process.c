// Process-wide settings (see process.h).
#include <malloc.h>
#include <signal.h>

#include "stoker/process.h"

void
stoker_process_init(void)
{
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    signal(SIGPIPE, SIG_IGN);
}

void
stoker_process_on_stop(void (*handler)(int sig))
{
    struct sigaction sa = {0};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
