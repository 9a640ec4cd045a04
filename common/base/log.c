// Leveled logging: one line per call ("2026-11-29T21:40:01.123Z broker[1234] INFO message") to
// stderr or an installed sink. A mutex keeps lines whole when several threads log.
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "stoker/error.h"
#include "stoker/log.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *log_role = "stoker";
static volatile stoker_log_level log_level = STOKER_LOG_INFO;
static stoker_log_sink log_sink;
static void *log_sink_arg;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void
stoker_log_init(const char *role, stoker_log_level level)
{
    pthread_mutex_lock(&log_lock);
    log_role = role != NULL ? role : "stoker";
    log_level = level;
    pthread_mutex_unlock(&log_lock);
}

void
stoker_log_set_level(stoker_log_level level)
{
    log_level = level;
}

stoker_log_level
stoker_log_get_level(void)
{
    return log_level;
}

void
stoker_log_set_sink(stoker_log_sink sink, void *arg)
{
    pthread_mutex_lock(&log_lock);
    log_sink = sink;
    log_sink_arg = arg;
    pthread_mutex_unlock(&log_lock);
}

int
stoker_log_parse_level(const char *s, stoker_log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (s != NULL && strcasecmp(s, level_names[i]) == 0) {
            *out = (stoker_log_level)i;
            return STOKER_OK;
        }
    }
    if (s != NULL && strcasecmp(s, "warning") == 0) {
        *out = STOKER_LOG_WARN;
        return STOKER_OK;
    }
    return STOKER_INVALID;
}

void
stoker_log_write(stoker_log_level level, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&log_lock);
    if (log_sink != NULL) {
        log_sink(level, msg, log_sink_arg);
    } else {
        struct timeval tv;
        struct tm tm;
        char when[32];
        gettimeofday(&tv, NULL);
        gmtime_r(&tv.tv_sec, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(stderr, "%s.%03dZ %s[%d] %s %s\n", when, (int)(tv.tv_usec / 1000), log_role,
                (int)getpid(), level_names[level < 4 ? level : 3], msg);
    }
    pthread_mutex_unlock(&log_lock);
}
