// Process-wide settings every stoker executable applies at start.
#ifndef STOKER_PROCESS_H
#define STOKER_PROCESS_H

// Raises glibc's mmap and trim thresholds so large messages (hundreds of KB) are recycled from
// the heap instead of being mapped and unmapped each time (13 page faults per 150 KB message,
// 3-4x less throughput; see TOOLCHAIN.md), and ignores SIGPIPE (a closed peer is an error
// return, not a signal). Call once, early in main.
void stoker_process_init(void);

// Installs handler for SIGINT and SIGTERM (without SA_RESTART: blocking calls return EINTR) and
// ignores SIGPIPE: every executable's stop signals, set up in one place. handler must be
// async-signal-safe (set a flag, interrupt a client).
void stoker_process_on_stop(void (*handler)(int sig));

#endif
