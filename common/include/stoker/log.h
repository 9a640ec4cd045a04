// Logging for operators: levels, a check before formatting, one line per call with time, role,
// pid and message, to stderr unless a sink is installed (tests capture with one).
// Lifecycle events use a stable first word a user can grep: "producer-lost", "queue-full", ...
#ifndef STOKER_LOG_H
#define STOKER_LOG_H

#include <stdarg.h>

typedef enum stoker_log_level {
    STOKER_LOG_ERROR = 0,
    STOKER_LOG_WARN = 1,
    STOKER_LOG_INFO = 2,
    STOKER_LOG_DEBUG = 3,
} stoker_log_level;

// The sink receives the formatted message (no newline). It is called with an internal lock
// held, from any thread: it must not log itself.
typedef void (*stoker_log_sink)(stoker_log_level level, const char *line, void *arg);

// Role printed in each line ("broker", "producer", "trainer"); borrowed, keep it static.
void stoker_log_init(const char *role, stoker_log_level level);
void stoker_log_set_level(stoker_log_level level);
stoker_log_level stoker_log_get_level(void);
// Installs sink (NULL restores stderr).
void stoker_log_set_sink(stoker_log_sink sink, void *arg);
// Parses "error|warn|info|debug"; returns STOKER_INVALID otherwise.
int stoker_log_parse_level(const char *s, stoker_log_level *out);

void stoker_log_write(stoker_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define STOKER_LOG(level, ...)                                                                     \
    do {                                                                                           \
        if ((level) <= stoker_log_get_level())                                                     \
            stoker_log_write((level), __VA_ARGS__);                                                \
    } while (0)
#define stoker_error(...) STOKER_LOG(STOKER_LOG_ERROR, __VA_ARGS__)
#define stoker_warn(...)  STOKER_LOG(STOKER_LOG_WARN, __VA_ARGS__)
#define stoker_info(...)  STOKER_LOG(STOKER_LOG_INFO, __VA_ARGS__)
#define stoker_debug(...) STOKER_LOG(STOKER_LOG_DEBUG, __VA_ARGS__)

#endif
