// Leveled logging: one line per call ("2026-11-29T21:40:01.123Z broker[1234] INFO message") to
// stderr or an installed sink. A mutex keeps lines whole when several threads log. When stderr is
// the systemd journal's stream (JOURNAL_STREAM names its device and inode, as systemd sets it
// for a service), a line is "<6>broker INFO message": the journal has the time and the pid, and
// takes the <N> prefix as the line's priority.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
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
static const int syslog_priority[] = {3, 4, 6, 7}; // err, warning, info, debug
static int to_journal = -1;                        // -1: not looked at yet

// Whether stderr is the journal's stream: JOURNAL_STREAM is "DEV:INO" of it (systemd.exec(5)).
static int
stderr_is_journal(void)
{
    const char *v = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (v == NULL || sscanf(v, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) != 0)
        return 0;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void
stoker_log_init(const char *role, stoker_log_level level)
{
    pthread_mutex_lock(&log_lock);
    log_role = role != NULL ? role : "stoker";
    log_level = level;
    to_journal = stderr_is_journal();
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
    int lv = level < 4 ? (int)level : 3;
    if (to_journal < 0)
        to_journal = stderr_is_journal();
    if (log_sink != NULL) {
        log_sink(level, msg, log_sink_arg);
    } else if (to_journal) {
        fprintf(stderr, "<%d>%s %s %s\n", syslog_priority[lv], log_role, level_names[lv], msg);
    } else {
        struct timeval tv;
        struct tm tm;
        char when[32];
        gettimeofday(&tv, NULL);
        gmtime_r(&tv.tv_sec, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(stderr, "%s.%03dZ %s[%d] %s %s\n", when, (int)(tv.tv_usec / 1000), log_role,
                (int)getpid(), level_names[lv], msg);
    }
    pthread_mutex_unlock(&log_lock);
}
