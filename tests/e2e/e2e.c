// Fixtures of the end-to-end tests (see e2e.h). Children and the temporary directory are the test
// library's (tests/lib); e2e_teardown kills and reaps every child whatever the test did.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

// The test library's fixtures fail the criterion test that called them.
static void
fail_test(const char *msg)
{
    cr_assert_fail("%s", msg);
}

void
e2e_setup(void)
{
    stoker_log_init("test", STOKER_LOG_WARN);
    proc_set_fail(fail_test);
    testdir_create("stoker-e2e");
}

void
e2e_teardown(void)
{
    proc_kill_all();
    testdir_remove();
}

// Output in files, stdin from /dev/null.
static const proc_io files_io = {.files = 1};

proc_child *
e2e_start(const char *what, const char *bin_env, const char *const *args)
{
    return proc_start_bin(what, bin_env, args, &files_io);
}

proc_child *
e2e_broker_start(const char *url, const char *const *extra)
{
    return proc_broker_start(url, extra, &files_io);
}

proc_child *
e2e_producer_start(const char *url, const char *name, const char *const *extra)
{
    return proc_producer_start(url, name, extra, &files_io);
}

proc_child *
e2e_trainer_start(const char *const *extra)
{
    const char *args[64] = {"--progress", "off"};
    int n = 2;
    for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
        cr_assert_lt(n, 63, "too many arguments");
        args[n++] = extra[i];
    }
    args[n] = NULL;
    return e2e_start("trainer", "STOKER_TRAINER_BIN", args);
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

void
e2e_record(e2e_examples *ex, const stoker_batch *b)
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
        e2e_record(ex, b);
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
    h_ids ids = {0};
    for (size_t i = 0; i < ex->n; i++)
        h_ids_add(&ids, ex->v[i].session, ex->v[i].seq);
    size_t dups = h_ids_duplicates(&ids);
    h_ids_fini(&ids);
    return dups;
}

void
e2e_assert_exactly(e2e_examples *ex, size_t n_sessions, uint64_t per_session)
{
    cr_assert_eq(e2e_duplicates(ex), 0, "an example was trained twice");
    e2e_examples_sort(ex);
    size_t sessions = 0;
    for (size_t i = 0; i < ex->n; i++) {
        if (i == 0 || ex->v[i].session != ex->v[i - 1].session) {
            sessions++;
            cr_assert_eq(ex->v[i].seq, 0, "session %zu starts at seq %" PRIu64 ": examples lost",
                         sessions, ex->v[i].seq);
        } else {
            cr_assert_eq(ex->v[i].seq, ex->v[i - 1].seq + 1, "seq %" PRIu64 " lost",
                         ex->v[i - 1].seq + 1);
        }
        cr_assert_lt(ex->v[i].seq, per_session, "seq %" PRIu64 " beyond what was produced",
                     ex->v[i].seq);
    }
    cr_assert_eq(sessions, n_sessions, "%zu sessions trained, %zu produced", sessions, n_sessions);
    cr_assert_eq(ex->n, n_sessions * per_session, "%zu examples trained, %" PRIu64 " produced",
                 ex->n, (uint64_t)(n_sessions * per_session));
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

// Runs check.py and returns its exit code (77: python3 unavailable).
static int
run_check(const char *const *args)
{
    const char *python = getenv("STOKER_PYTHON");
    const char *script = getenv("STOKER_E2E_CHECK");
    if (python == NULL || python[0] == '\0' || script == NULL || script[0] == '\0')
        return 77;
    const char *argv[64] = {python, script};
    int argc = 2;
    for (int i = 0; args != NULL && args[i] != NULL; i++) {
        cr_assert_lt(argc, 63, "too many arguments");
        argv[argc++] = args[i];
    }
    argv[argc] = NULL;
    return proc_run(argv, 20000);
}

void
e2e_check_ok(const char *const *args)
{
    int rv = run_check(args);
    if (rv == 77) {
        fprintf(stderr, "python3 not available: check.py %s %s skipped\n", args[0], args[1]);
        return;
    }
    cr_assert_eq(rv, 0, "check.py %s %s failed (message above)", args[0], args[1]);
}
