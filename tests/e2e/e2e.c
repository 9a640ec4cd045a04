// Fixtures of the end-to-end tests (see e2e.h). Children are started with fork+exec (nng is not
// fork-safe), die with the test process (PR_SET_PDEATHSIG) and are killed and reaped by
// e2e_teardown whatever the test did.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

#define MAX_CHILDREN 24
#define MAX_ARGS     64

static char test_dir[64];
static e2e_child children[MAX_CHILDREN];
static int n_children;

void
e2e_setup(void)
{
    stoker_log_init("test", STOKER_LOG_WARN);
    snprintf(test_dir, sizeof(test_dir), "/tmp/stoker-e2e-XXXXXX");
    cr_assert_not_null(mkdtemp(test_dir), "mkdtemp: %s", strerror(errno));
    n_children = 0;
}

static void
remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *e;
    char file[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
        unlink(file);
    }
    closedir(d);
    rmdir(path);
}

void
e2e_teardown(void)
{
    for (int i = 0; i < n_children; i++) {
        e2e_child *c = &children[i];
        if (c->pid > 0) {
            kill(c->pid, SIGCONT); // a stopped child must not outlive the test either
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &c->status, 0);
            c->pid = 0;
        }
    }
    n_children = 0;
    if (test_dir[0] != '\0' && getenv("STOKER_E2E_KEEP") == NULL)
        remove_dir(test_dir);
    test_dir[0] = '\0';
}

const char *
e2e_path(const char *name)
{
    static char bufs[8][320];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(bufs[0]), "%s/%s", test_dir, name);
    return b;
}

static const char *
binary(const char *env)
{
    const char *path = getenv(env);
    cr_assert(path != NULL && path[0] != '\0',
              "%s is not set: run the tests with meson test (tests/e2e/meson.build sets it)", env);
    return path;
}

e2e_child *
e2e_start(const char *what, const char *bin_env, const char *const *args)
{
    cr_assert_lt(n_children, MAX_CHILDREN, "too many child processes in one test");
    char *argv[MAX_ARGS];
    int argc = 0;
    argv[argc++] = (char *)binary(bin_env);
    for (int i = 0; args != NULL && args[i] != NULL; i++) {
        cr_assert_lt(argc, MAX_ARGS - 1, "too many arguments");
        argv[argc++] = (char *)args[i];
    }
    argv[argc] = NULL;

    int idx = n_children;
    e2e_child *c = &children[n_children++];
    memset(c, 0, sizeof(*c));
    snprintf(c->what, sizeof(c->what), "%s", what);
    snprintf(c->out_path, sizeof(c->out_path), "%s/%s-%d.out", test_dir, what, idx);
    snprintf(c->err_path, sizeof(c->err_path), "%s/%s-%d.err", test_dir, what, idx);
    int out = open(c->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int err = open(c->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(out >= 0 && err >= 0, "cannot create output files in %s: %s", test_dir,
              strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        // Only async-signal-safe calls until exec.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        dup2(out, STDOUT_FILENO);
        dup2(err, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    close(out);
    close(err);
    c->pid = pid;
    return c;
}

void
e2e_broker_url(char *url, size_t len, const char *name)
{
    snprintf(url, len, "ipc://%s/%s.sock", test_dir, name);
}

e2e_child *
e2e_broker_start(const char *url, const char *const *extra)
{
    const char *args[MAX_ARGS];
    int n = 0;
    args[n++] = "--listen";
    args[n++] = url;
    args[n++] = "--log-level";
    args[n++] = "warn";
    for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
        cr_assert_lt(n, MAX_ARGS - 1);
        args[n++] = extra[i];
    }
    args[n] = NULL;
    e2e_child *c = e2e_start("broker", "STOKER_BROKER_BIN", args);
    uint64_t deadline = stoker_now_ms() + 10000;
    for (;;) {
        char *out = e2e_read_file(c->out_path);
        int ready = out != NULL && strstr(out, "listening ") != NULL && strchr(out, '\n');
        free(out);
        if (ready)
            return c;
        if (e2e_wait(c, 0)) {
            char *err = e2e_read_file(c->err_path);
            cr_assert_fail("the broker exited (code %d) before listening: %s", e2e_exit_code(c),
                           err != NULL ? err : "");
        }
        cr_assert_lt(stoker_now_ms(), deadline, "the broker printed no 'listening' line in 10 s");
        stoker_sleep_ms(5, NULL);
    }
}

e2e_child *
e2e_producer_start(const char *url, const char *name, const char *const *extra)
{
    const char *args[MAX_ARGS];
    int n = 0;
    args[n++] = "--broker";
    args[n++] = url;
    args[n++] = "--name";
    args[n++] = name;
    args[n++] = "--log-level";
    args[n++] = "warn";
    for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
        cr_assert_lt(n, MAX_ARGS - 1);
        args[n++] = extra[i];
    }
    args[n] = NULL;
    return e2e_start("producer", "STOKER_PRODUCER_BIN", args);
}

e2e_child *
e2e_trainer_start(const char *const *extra)
{
    const char *args[MAX_ARGS];
    int n = 0;
    args[n++] = "--progress";
    args[n++] = "off";
    for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
        cr_assert_lt(n, MAX_ARGS - 1);
        args[n++] = extra[i];
    }
    args[n] = NULL;
    return e2e_start("trainer", "STOKER_TRAINER_BIN", args);
}

void
e2e_signal(e2e_child *c, int sig)
{
    cr_assert_gt(c->pid, 0, "%s is not running", c->what);
    cr_assert_eq(kill(c->pid, sig), 0, "kill: %s", strerror(errno));
}

int
e2e_wait(e2e_child *c, int timeout_ms)
{
    if (c->pid <= 0)
        return 1;
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pid_t r = waitpid(c->pid, &c->status, WNOHANG);
        if (r == c->pid) {
            c->pid = 0;
            return 1;
        }
        if (stoker_now_ms() >= deadline)
            return 0;
        stoker_sleep_ms(2, NULL);
    }
}

int
e2e_exit_code(const e2e_child *c)
{
    if (WIFEXITED(c->status))
        return WEXITSTATUS(c->status);
    if (WIFSIGNALED(c->status))
        return 128 + WTERMSIG(c->status);
    return -1;
}

void
e2e_assert_exit(e2e_child *c, int code, int timeout_ms)
{
    int ended = e2e_wait(c, timeout_ms);
    char *err = e2e_read_file(c->err_path);
    cr_assert(ended, "%s did not exit within %d ms; its stderr:\n%s", c->what, timeout_ms,
              err != NULL ? err : "");
    cr_assert(WIFEXITED(c->status), "%s was killed by signal %d; its stderr:\n%s", c->what,
              WIFSIGNALED(c->status) ? WTERMSIG(c->status) : -1, err != NULL ? err : "");
    cr_assert_eq(WEXITSTATUS(c->status), code, "%s exited %d, expected %d; its stderr:\n%s",
                 c->what, WEXITSTATUS(c->status), code, err != NULL ? err : "");
    free(err);
}

int
e2e_stop(e2e_child *c, int timeout_ms)
{
    if (c->pid <= 0)
        return 1;
    kill(c->pid, SIGTERM);
    if (e2e_wait(c, timeout_ms))
        return 1;
    kill(c->pid, SIGKILL);
    waitpid(c->pid, &c->status, 0);
    c->pid = 0;
    return 0;
}

void
e2e_broker_stop(e2e_child *c)
{
    int exited = e2e_stop(c, 5000);
    cr_assert(exited, "the broker did not stop within 5 s of SIGTERM");
    cr_assert(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0,
              "the broker did not exit cleanly (status %#x)", c->status);
}

char *
e2e_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

int
e2e_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

// --- status -------------------------------------------------------------------------------------

int
e2e_wait_producer(const char *url, const char *name, uint64_t min_accepted, int status,
                  int timeout_ms)
{
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        stoker_status *st = h_status(url);
        const stoker_producer_info *p = h_status_producer(st, name);
        int ok =
            p != NULL && p->accepted >= min_accepted && (status < 0 || (int)p->status == status);
        stoker_status_destroy(st);
        if (ok)
            return 1;
        if (stoker_now_ms() >= deadline)
            return 0;
        stoker_sleep_ms(10, NULL);
    }
}

int
e2e_wait_trainers(const char *url, uint32_t n, int timeout_ms)
{
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        stoker_status *st = h_status(url);
        int ok = st->counters.trainers >= n;
        stoker_status_destroy(st);
        if (ok)
            return 1;
        if (stoker_now_ms() >= deadline)
            return 0;
        stoker_sleep_ms(10, NULL);
    }
}

// --- trainer clients ----------------------------------------------------------------------------

stoker_trainer_client *
e2e_trainer_client(const char *url, uint32_t batch_size, uint32_t stall_ms)
{
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.client.name = "e2e-test";
    o.client.give_up_ms = 5000;
    o.client.request_timeout_ms = 2000;
    o.batch_size = batch_size;
    o.prefetch = 2;
    o.stall_timeout_ms = stall_ms;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "trainer client for %s: %s (%s)", url, stoker_strerror(rv), err);
    return tc;
}

static void
record(e2e_examples *ex, const stoker_batch *b)
{
    const stoker_schema *s = &b->chunk.schema;
    size_t eb = stoker_schema_example_bytes(s);
    if (ex->example_bytes == 0)
        ex->example_bytes = eb;
    cr_assert_eq(ex->example_bytes, eb, "the schema changed between batches");
    uint32_t i = 0;
    for (uint32_t r = 0; r < b->n_runs; r++) {
        for (uint32_t k = 0; k < b->runs[r].count; k++, i++) {
            cr_assert_lt(i, b->chunk.count, "runs describe more examples than the batch holds");
            if (ex->n == ex->cap) {
                ex->cap = ex->cap ? ex->cap * 2 : 256;
                ex->v = realloc(ex->v, ex->cap * sizeof(*ex->v));
                cr_assert_not_null(ex->v);
            }
            e2e_example *e = &ex->v[ex->n++];
            e->session = b->runs[r].session;
            e->seq = b->runs[r].first_seq + k;
            e->bytes = malloc(eb);
            cr_assert_not_null(e->bytes);
            size_t off = 0;
            for (uint32_t f = 0; f < s->n_fields; f++) {
                size_t fb = stoker_field_bytes(&s->fields[f]);
                memcpy(e->bytes + off, stoker_chunk_at(&b->chunk, f, i), fb);
                off += fb;
            }
        }
    }
    cr_assert_eq(i, b->chunk.count, "runs describe %u examples, the batch holds %u", i,
                 b->chunk.count);
}

static void
poll_events(stoker_trainer_client *tc, e2e_examples *ex)
{
    stoker_event e;
    while (stoker_trainer_client_poll_event(tc, &e)) {
        if (ex->n_events < (int)(sizeof(ex->events) / sizeof(ex->events[0])))
            ex->events[ex->n_events++] = e;
    }
}

static int
pull(stoker_trainer_client *tc, e2e_examples *ex, size_t n, int timeout_ms)
{
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (ex->n >= n)
            return STOKER_OK;
        if (stoker_now_ms() >= deadline)
            return STOKER_TIMEOUT;
        stoker_batch *b = NULL;
        int rv = stoker_trainer_client_next(tc, &b);
        poll_events(tc, ex);
        if (rv != STOKER_OK)
            return rv;
        record(ex, b);
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
    }
}

int
e2e_drain(stoker_trainer_client *tc, e2e_examples *ex, int timeout_ms)
{
    int rv = pull(tc, ex, SIZE_MAX, timeout_ms);
    stoker_trainer_client_flush(tc);
    return rv;
}

int
e2e_pull_n(stoker_trainer_client *tc, e2e_examples *ex, size_t n, int timeout_ms)
{
    int rv = pull(tc, ex, n, timeout_ms);
    stoker_trainer_client_flush(tc);
    return rv;
}

static int
cmp_example(const void *a, const void *b)
{
    const e2e_example *x = a, *y = b;
    if (x->session != y->session)
        return x->session < y->session ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void
e2e_examples_sort(e2e_examples *ex)
{
    if (ex->n > 1)
        qsort(ex->v, ex->n, sizeof(*ex->v), cmp_example);
}

size_t
e2e_duplicates(const e2e_examples *ex)
{
    if (ex->n < 2)
        return 0;
    e2e_example *v = malloc(ex->n * sizeof(*v));
    cr_assert_not_null(v);
    memcpy(v, ex->v, ex->n * sizeof(*v));
    qsort(v, ex->n, sizeof(*v), cmp_example);
    size_t dups = 0;
    for (size_t i = 1; i < ex->n; i++)
        dups += cmp_example(&v[i - 1], &v[i]) == 0;
    free(v);
    return dups;
}

void
e2e_examples_fini(e2e_examples *ex)
{
    for (size_t i = 0; i < ex->n; i++)
        free(ex->v[i].bytes);
    free(ex->v);
    memset(ex, 0, sizeof(*ex));
}

// --- the Python checker -------------------------------------------------------------------------

int
e2e_check(const char *const *args)
{
    const char *python = getenv("STOKER_PYTHON");
    const char *script = getenv("STOKER_E2E_CHECK");
    if (python == NULL || python[0] == '\0' || script == NULL || script[0] == '\0')
        return 77;
    char *argv[MAX_ARGS];
    int argc = 0;
    argv[argc++] = (char *)python;
    argv[argc++] = (char *)script;
    for (int i = 0; args != NULL && args[i] != NULL; i++) {
        cr_assert_lt(argc, MAX_ARGS - 1);
        argv[argc++] = (char *)args[i];
    }
    argv[argc] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    uint64_t deadline = stoker_now_ms() + 20000;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (stoker_now_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            cr_assert_fail("the checker did not finish within 20 s");
        }
        stoker_sleep_ms(5, NULL);
    }
    cr_assert(WIFEXITED(status), "the checker was killed by a signal");
    return WEXITSTATUS(status);
}
