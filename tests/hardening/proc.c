// See proc.h. fork+exec only (nng is not fork-safe), children die with the test process.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "proc.h"
#include "stoker/clock.h"

#define MAX_CHILDREN 64

static p_child children[MAX_CHILDREN];
static int n_children;

p_child *
p_spawn(const char *what, const char *const *argv, int capture, const char *log)
{
    cr_assert_lt(n_children, MAX_CHILDREN, "too many child processes in one test");
    int fds[2] = {-1, -1};
    if (capture)
        cr_assert_eq(pipe2(fds, O_CLOEXEC), 0, "pipe: %s", strerror(errno));
    int log_fd = -1;
    if (log != NULL) {
        log_fd = open(p_path(7, log), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        cr_assert_geq(log_fd, 0, "open %s: %s", log, strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (capture)
            dup2(fds[1], STDOUT_FILENO);
        else
            dup2(log_fd >= 0 ? log_fd : STDERR_FILENO, STDOUT_FILENO);
        if (log_fd >= 0)
            dup2(log_fd, STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (log_fd >= 0)
        close(log_fd);
    p_child *c = &children[n_children++];
    memset(c, 0, sizeof(*c));
    c->pid = pid;
    c->out_fd = -1;
    snprintf(c->what, sizeof(c->what), "%s", what);
    if (capture) {
        close(fds[1]);
        c->out_fd = fds[0];
    }
    return c;
}

void
p_listening(p_child *c, int n, char urls[][256])
{
    char buf[4096];
    size_t len = 0;
    uint64_t deadline = stoker_now_ms() + 10000;
    for (;;) {
        buf[len] = '\0';
        int found = 0;
        for (char *line = buf; (line = strstr(line, "listening ")) != NULL; line++) {
            char *end = strchr(line, '\n');
            if (end == NULL)
                break;
            if (found < n)
                snprintf(urls[found], 256, "%.*s", (int)(end - line - 10), line + 10);
            found++;
        }
        if (found >= n)
            return;
        uint64_t now = stoker_now_ms();
        cr_assert_lt(now, deadline, "%s printed %d of %d 'listening' lines within 10 s: %s",
                     c->what, found, n, buf);
        struct pollfd p = {.fd = c->out_fd, .events = POLLIN};
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue;
        ssize_t got = read(c->out_fd, buf + len, sizeof(buf) - 1 - len);
        cr_assert_gt(got, 0, "%s closed its stdout before listening: %s", c->what, buf);
        len += (size_t)got;
        cr_assert_lt(len, sizeof(buf) - 1, "%s printed too much before listening", c->what);
    }
}

static void
reaped(p_child *c)
{
    c->pid = 0;
    if (c->out_fd >= 0) {
        close(c->out_fd);
        c->out_fd = -1;
    }
}

int
p_wait(p_child *c, int timeout_ms)
{
    if (c->pid <= 0)
        return 1;
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (waitpid(c->pid, &c->status, WNOHANG) == c->pid) {
            reaped(c);
            return 1;
        }
        if (stoker_now_ms() >= deadline)
            return 0;
        stoker_sleep_ms(2, NULL);
    }
}

void
p_signal(p_child *c, int sig)
{
    if (c->pid > 0)
        kill(c->pid, sig);
}

void
p_kill(p_child *c)
{
    if (c->pid <= 0)
        return;
    kill(c->pid, SIGKILL);
    waitpid(c->pid, &c->status, 0);
    reaped(c);
}

int
p_exit_code(const p_child *c)
{
    return WIFEXITED(c->status) ? WEXITSTATUS(c->status) : -1;
}

uint64_t
p_rss_bytes(const p_child *c)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)c->pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    uint64_t kb = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %lu kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb * 1024;
}

void
p_teardown(void)
{
    for (int i = 0; i < n_children; i++) {
        p_child *c = &children[i];
        if (c->pid > 0) {
            kill(c->pid, SIGCONT);
            p_kill(c);
        }
        reaped(c);
    }
    n_children = 0;
}

const char *
p_path(int slot, const char *name)
{
    static char paths[8][512];
    snprintf(paths[slot], sizeof(paths[slot]), "%s/%s", h_dir(), name);
    return paths[slot];
}

const char *
p_write_file(int slot, const char *name, const char *text)
{
    const char *path = p_path(slot, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
    return path;
}

int
p_file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

int
p_sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    fflush(NULL);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Appends the NULL-terminated list more to argv (n entries so far, room for cap).
static int
append_args(const char **argv, int n, int cap, const char *const *more)
{
    for (; more != NULL && *more != NULL; more++) {
        cr_assert_lt(n, cap - 1, "too many arguments");
        argv[n++] = *more;
    }
    argv[n] = NULL;
    return n;
}

void
p_train_end_to_end(const char *url, const char *name, const char *const *client_args,
                   const char *json)
{
    const char *producer[32] = {getenv("STOKER_PRODUCER_BIN"), "--broker", url, "--name", name};
    const char *const producer_rest[] = {"--delay",        "0:0", "--chunk", "4",
                                         "--max-examples", "200", NULL};
    int n = append_args(producer, 5, 32, client_args);
    append_args(producer, n, 32, producer_rest);
    const char *trainer[32] = {getenv("STOKER_TRAINER_BIN"), "--broker", url};
    const char *const trainer_rest[] = {
        "--device", "cpu",    "--rounds", "5", "--round-length", "20", "--stall-timeout",
        "10",       "--json", json,       NULL};
    n = append_args(trainer, 3, 32, client_args);
    append_args(trainer, n, 32, trainer_rest);
    cr_assert_not_null(producer[0]);
    cr_assert_not_null(trainer[0]);
    p_spawn("producer", producer, 0, "producer.log");
    p_child *t = p_spawn("trainer", trainer, 0, "trainer.log");
    cr_assert(p_wait(t, 60000), "the trainer did not finish within 60 s");
    cr_assert_eq(p_exit_code(t), 0, "trainer exit %d (log: %s)", p_exit_code(t),
                 p_path(7, "trainer.log"));
    cr_assert(p_file_contains(json, "\"status\": \"completed\""), "summary: not completed");
    cr_assert(p_file_contains(json, "\"examples\": 100"), "summary: not 100 examples");
    cr_assert(p_file_contains(json, "\"duplicates_seen\": 0"), "summary: duplicates");
    cr_assert(p_file_contains(json, "\"discrepancy\": 0"), "summary: discrepancy");
}
