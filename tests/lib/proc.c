// See proc.h. fork+exec only (nng is not fork-safe, and the test process may already run nng
// threads); between fork and exec the child makes only async-signal-safe calls.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "stoker/clock.h"
#include "testdir.h"

#define MAX_CHILDREN 64
#define MAX_ARGS     64
#define LISTEN_MS    10000

static proc_child children[MAX_CHILDREN];
static int n_children;
static proc_fail_fn fail_fn;

// --- failures -----------------------------------------------------------------------------------

void
proc_set_fail(proc_fail_fn fail)
{
    fail_fn = fail;
}

void
proc_fail(const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (fail_fn != NULL)
        fail_fn(msg);
    fprintf(stderr, "tests: %s\n", msg);
    abort();
}

// --- starting -----------------------------------------------------------------------------------

static int
open_output(const char *path, int flags)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
    if (fd < 0)
        proc_fail("open %s: %s", path, strerror(errno));
    return fd;
}

static size_t
file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

void
proc_start(proc_child *c, const char *what, const char *const *argv, const proc_io *io)
{
    static const proc_io inherit;
    if (io == NULL)
        io = &inherit;
    memset(c, 0, sizeof(*c));
    c->out_fd = -1;
    snprintf(c->what, sizeof(c->what), "%s", what);
    if (argv[0] == NULL || argv[0][0] == '\0')
        proc_fail("%s: no binary to run", what);

    int fds[2] = {-1, -1}, out = -1, err = -1;
    if (io->capture && pipe2(fds, O_CLOEXEC) != 0)
        proc_fail("pipe: %s", strerror(errno));
    if (io->files) {
        static int n_files;
        int idx = n_files++;
        snprintf(c->out_path, sizeof(c->out_path), "%s/%s-%d.out", testdir_path(), what, idx);
        snprintf(c->err_path, sizeof(c->err_path), "%s/%s-%d.err", testdir_path(), what, idx);
        out = open_output(c->out_path, O_TRUNC);
        err = open_output(c->err_path, O_TRUNC);
    } else if (io->log != NULL) {
        const char *path = io->log[0] == '/' ? io->log : testdir_file(io->log);
        snprintf(c->err_path, sizeof(c->err_path), "%s", path);
        err = open_output(path, O_APPEND);
        if (!io->capture) {
            snprintf(c->out_path, sizeof(c->out_path), "%s", path);
            c->out_offset = file_size(path);
            out = err;
        }
    }
    if (io->capture)
        out = fds[1];

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        proc_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) // the test died before prctl took effect
            _exit(127);
        if (io->files) {
            int devnull = open("/dev/null", O_RDONLY);
            if (devnull >= 0)
                dup2(devnull, STDIN_FILENO);
        }
        if (out >= 0)
            dup2(out, STDOUT_FILENO);
        if (err >= 0)
            dup2(err, STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (out >= 0 && out != err)
        close(out);
    if (err >= 0)
        close(err);
    c->pid = pid;
    c->out_fd = fds[0];
}

proc_child *
proc_spawn(const char *what, const char *const *argv, const proc_io *io)
{
    if (n_children >= MAX_CHILDREN)
        proc_fail("too many child processes in one test (%d)", MAX_CHILDREN);
    proc_child *c = &children[n_children];
    proc_start(c, what, argv, io);
    n_children++;
    return c;
}

static void
reaped(proc_child *c)
{
    c->pid = 0;
    if (c->out_fd >= 0) {
        close(c->out_fd);
        c->out_fd = -1;
    }
}

void
proc_kill_all(void)
{
    for (int i = 0; i < n_children; i++) {
        proc_child *c = &children[i];
        if (c->pid > 0) {
            kill(c->pid, SIGCONT); // a stopped child must not outlive the test either
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &c->status, 0);
        }
        reaped(c);
    }
    n_children = 0;
}

// --- the "listening URL" lines ------------------------------------------------------------------

// Counts complete "listening URL" lines in text and copies the first n URLs.
static int
count_listening(const char *text, int n, char urls[][256])
{
    int found = 0;
    for (const char *line = text; (line = strstr(line, "listening ")) != NULL; line++) {
        const char *end = strchr(line, '\n');
        if (end == NULL)
            break;
        if (found < n && urls != NULL)
            snprintf(urls[found], 256, "%.*s", (int)(end - line - 10), line + 10);
        found++;
    }
    return found;
}

// What the child printed so far: from its pipe into buf (len bytes kept), or from its file.
static int
listening_so_far(proc_child *c, char *buf, size_t cap, size_t *len, int n, char urls[][256],
                 int wait_ms)
{
    if (c->out_fd >= 0) {
        struct pollfd p = {.fd = c->out_fd, .events = POLLIN};
        if (poll(&p, 1, wait_ms) > 0) {
            ssize_t got = read(c->out_fd, buf + *len, cap - 1 - *len);
            if (got <= 0) {
                int exited = proc_wait(c, 1000);
                proc_fail("%s closed its stdout before listening (exited: %d, status %d); "
                          "output: %s",
                          c->what, exited, c->status, buf);
            }
            *len += (size_t)got;
            buf[*len] = '\0';
            if (*len >= cap - 1)
                proc_fail("%s printed too much before listening", c->what);
        }
        return count_listening(buf, n, urls);
    }
    size_t flen = 0;
    char *text = testdir_read(c->out_path, &flen);
    int found = 0;
    if (text != NULL && flen >= c->out_offset) {
        found = count_listening(text + c->out_offset, n, urls);
        snprintf(buf, cap, "%s", text + c->out_offset);
    }
    free(text);
    if (found < n)
        stoker_sleep_ms((uint64_t)(wait_ms < 5 ? wait_ms : 5), NULL);
    return found;
}

void
proc_listening(proc_child *c, int n, char urls[][256])
{
    if (c->out_fd < 0 && c->out_path[0] == '\0')
        proc_fail("%s: its stdout is neither captured nor in a file", c->what);
    static char buf[8192];
    size_t len = 0;
    buf[0] = '\0';
    uint64_t deadline = stoker_now_ms() + LISTEN_MS;
    for (;;) {
        uint64_t now = stoker_now_ms();
        int found = listening_so_far(c, buf, sizeof(buf), &len, n, urls,
                                     now < deadline ? (int)(deadline - now) : 0);
        if (found >= n)
            return;
        if (c->out_fd < 0 && proc_wait(c, 0)) {
            char *err = c->err_path[0] != '\0' ? testdir_read(c->err_path, NULL) : NULL;
            proc_fail("%s exited (code %d) before listening: %s", c->what, proc_exit_code(c),
                      err != NULL ? err : buf);
        }
        if (stoker_now_ms() >= deadline)
            proc_fail("%s printed %d of %d 'listening' lines within %d s: %s", c->what, found, n,
                      LISTEN_MS / 1000, buf);
    }
}

// --- waiting and signals ------------------------------------------------------------------------

int
proc_wait(proc_child *c, int timeout_ms)
{
    if (c->pid <= 0)
        return 1;
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pid_t r = waitpid(c->pid, &c->status, WNOHANG);
        if (r == c->pid || (r < 0 && errno == ECHILD)) {
            reaped(c);
            return 1;
        }
        if (stoker_now_ms() >= deadline)
            return 0;
        stoker_sleep_ms(2, NULL);
    }
}

void
proc_signal(proc_child *c, int sig)
{
    if (c->pid <= 0)
        proc_fail("%s is not running", c->what);
    if (kill(c->pid, sig) != 0)
        proc_fail("kill %s: %s", c->what, strerror(errno));
}

void
proc_kill(proc_child *c)
{
    if (c->pid <= 0)
        return;
    kill(c->pid, SIGKILL);
    if (!proc_wait(c, 5000))
        proc_fail("%s (pid %d) did not die of SIGKILL within 5 s", c->what, (int)c->pid);
}

int
proc_stop(proc_child *c, int timeout_ms)
{
    if (c->pid <= 0)
        return 1;
    kill(c->pid, SIGCONT);
    kill(c->pid, SIGTERM);
    if (proc_wait(c, timeout_ms))
        return 1;
    proc_kill(c);
    return 0;
}

// The process state letter from /proc/PID/stat ('T' when stopped), or 0.
static char
state_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' ? p[2] : 0;
}

void
proc_wait_stopped(const proc_child *c, int timeout_ms)
{
    if (c->pid <= 0)
        return;
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    while (stoker_now_ms() < deadline) {
        char s = state_of(c->pid);
        if (s == 'T' || s == 't' || s == 0 || s == 'Z')
            return;
        stoker_sleep_ms(1, NULL);
    }
    proc_fail("%s (pid %d) did not stop within %d ms of SIGSTOP", c->what, (int)c->pid, timeout_ms);
}

int
proc_exit_code(const proc_child *c)
{
    if (WIFEXITED(c->status))
        return WEXITSTATUS(c->status);
    if (WIFSIGNALED(c->status))
        return 128 + WTERMSIG(c->status);
    return -1;
}

void
proc_assert_exit(proc_child *c, int code, int timeout_ms)
{
    int ended = proc_wait(c, timeout_ms);
    char *err = c->err_path[0] != '\0' ? testdir_read(c->err_path, NULL) : NULL;
    const char *text = err != NULL ? err : "";
    if (!ended)
        proc_fail("%s did not exit within %d ms; its stderr:\n%s", c->what, timeout_ms, text);
    if (!WIFEXITED(c->status))
        proc_fail("%s was killed by signal %d; its stderr:\n%s", c->what,
                  WIFSIGNALED(c->status) ? WTERMSIG(c->status) : -1, text);
    if (WEXITSTATUS(c->status) != code)
        proc_fail("%s exited %d, expected %d; its stderr:\n%s", c->what, WEXITSTATUS(c->status),
                  code, text);
    free(err);
}

uint64_t
proc_rss_bytes(const proc_child *c)
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

int
proc_run(const char *const *argv, int timeout_ms)
{
    proc_child c;
    proc_start(&c, argv[0], argv, NULL);
    if (!proc_wait(&c, timeout_ms)) {
        proc_kill(&c);
        proc_fail("%s did not finish within %d ms", c.what, timeout_ms);
    }
    if (!WIFEXITED(c.status))
        proc_fail("%s was killed by a signal", c.what);
    return WEXITSTATUS(c.status);
}

int
proc_sh(const char *fmt, ...)
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

// --- stoker's binaries --------------------------------------------------------------------------

const char *
proc_bin(const char *env)
{
    const char *path = getenv(env);
    if (path == NULL || path[0] == '\0')
        proc_fail("%s is not set: run the tests with meson test (the suite's meson.build sets it)",
                  env);
    return path;
}

// argv = first..., then more (NULL-terminated, may be NULL), NULL-terminated into out.
static void
join_args(const char **out, const char *const *first, const char *const *more)
{
    int n = 0;
    for (int i = 0; first[i] != NULL; i++)
        out[n++] = first[i];
    for (int i = 0; more != NULL && more[i] != NULL; i++) {
        if (n >= MAX_ARGS - 1)
            proc_fail("too many arguments (%d)", MAX_ARGS);
        out[n++] = more[i];
    }
    out[n] = NULL;
}

proc_child *
proc_start_bin(const char *what, const char *bin_env, const char *const *args, const proc_io *io)
{
    const char *argv[MAX_ARGS];
    join_args(argv, PROC_ARGS(proc_bin(bin_env)), args);
    return proc_spawn(what, argv, io);
}

proc_child *
proc_broker_start(const char *url, const char *const *extra, const proc_io *io)
{
    const char *args[MAX_ARGS];
    join_args(args, PROC_ARGS("--listen", url, "--log-level", "warn"), extra);
    proc_child *c = proc_start_bin("broker", "STOKER_BROKER_BIN", args, io);
    proc_listening(c, 1, NULL);
    return c;
}

proc_child *
proc_producer_start(const char *url, const char *name, const char *const *extra, const proc_io *io)
{
    const char *args[MAX_ARGS];
    join_args(args, PROC_ARGS("--broker", url, "--name", name, "--log-level", "warn"), extra);
    return proc_start_bin("producer", "STOKER_PRODUCER_BIN", args, io);
}

void
proc_broker_stop(proc_child *c)
{
    if (!proc_stop(c, 5000))
        proc_fail("the broker did not stop within 5 s of SIGTERM");
    if (!WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0)
        proc_fail("the broker did not exit cleanly (status %#x; exit code %d)", c->status,
                  proc_exit_code(c));
}
