// Variable-length fields with real processes (docs/schema.md): two producers of
// tokens:int32[?<=64],points:float32[?,3],label:int64 (tests/lib/var_producer.c, every byte
// follows from the label) and the C trainer client over the socket and through the broker's
// shared memory: every value byte for byte, every identity exactly once, the broker's books
// balanced. The Python side of the same promises, and the other paths, is
// tests/python/test_varlen.py.
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "helpers.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "var_data.h"

TestSuite(varlen, .init = e2e_setup, .fini = e2e_teardown, .timeout = 90);

static proc_child *
var_producer(const char *url, const char *name, const char *count, const char *chunk)
{
    const char *args[] = {url, name, count, "--chunk", chunk, NULL};
    return e2e_start(name, "STOKER_VAR_PRODUCER_BIN", args);
}

// Checks example i of b against what var_producer made for its label; returns the label.
static uint64_t
check_example(const stoker_batch *b, uint32_t i)
{
    const stoker_chunk *c = &b->chunk;
    int64_t label;
    memcpy(&label, c->data[2] + (size_t)i * 8, 8);
    uint64_t seq = (uint64_t)label, rows;
    const int32_t *t = stoker_chunk_var_value(c, 0, i, &rows);
    cr_assert_eq(rows, var_tokens(seq), "example %llu: %llu tokens", (unsigned long long)seq,
                 (unsigned long long)rows);
    for (uint32_t j = 0; j < rows; j++)
        cr_assert_eq(t[j], var_token(seq, j), "example %llu: token %u", (unsigned long long)seq, j);
    const float *p = stoker_chunk_var_value(c, 1, i, &rows);
    cr_assert_eq(rows, var_points(seq));
    for (uint32_t r = 0; r < rows; r++) {
        float want[3];
        var_point(seq, r, want);
        cr_assert(memcmp(p + 3 * r, want, sizeof want) == 0, "example %llu: point %u",
                  (unsigned long long)seq, r);
    }
    return seq;
}

static void
run_path(int shm)
{
    char url[256];
    testdir_ipc_url(url, sizeof url, shm ? "shm" : "socket");
    e2e_broker_start(url, NULL);
    proc_child *a = var_producer(url, "a", "400", "7");
    proc_child *b = var_producer(url, "b", "300", "64");
    // Both known before any consumer: the supply ends only when both are done.
    cr_assert(h_wait_producer(url, "a", 0, 10000) && h_wait_producer(url, "b", 0, 10000),
              "the producers did not say hello within 10 s");
    if (!shm)
        setenv("STOKER_SHM", "0", 1);
    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 10000);
    unsetenv("STOKER_SHM");
    e2e_examples ex = {0};
    uint64_t deadline = stoker_now_ms() + 60000;
    int rv;
    for (;;) {
        cr_assert_lt(stoker_now_ms(), deadline, "700 examples not pulled within 60 s");
        stoker_batch *batch = NULL;
        if ((rv = stoker_trainer_client_next(tc, &batch)) != STOKER_OK)
            break;
        uint32_t at = 0;
        for (uint32_t r = 0; r < batch->n_runs; r++) {
            for (uint32_t k = 0; k < batch->runs[r].count; k++, at++) {
                uint64_t seq = check_example(batch, at);
                cr_assert_eq(seq, batch->runs[r].first_seq + k, "the label is the seq");
                if (ex.n == ex.cap) {
                    ex.cap = ex.cap ? 2 * ex.cap : 256;
                    ex.v = realloc(ex.v, ex.cap * sizeof(*ex.v));
                }
                ex.v[ex.n++] = (e2e_example){.session = batch->runs[r].session, .seq = seq};
            }
        }
        cr_assert_eq(at, batch->chunk.count);
        stoker_trainer_client_ack(tc, batch->lease);
        stoker_batch_destroy(batch);
    }
    cr_assert_eq(rv, STOKER_END_OF_DATA, "ended with %s", stoker_errname(rv));
    cr_assert_str_eq(stoker_trainer_client_delivery(tc), shm ? "shm" : "socket");
    stoker_trainer_client_flush(tc);
    // 400 of one session and 300 of the other, each once.
    e2e_examples_sort(&ex);
    cr_assert_eq(ex.n, 700);
    cr_assert_eq(e2e_duplicates(&ex), 0);
    size_t first = 0;
    while (first < ex.n && ex.v[first].session == ex.v[0].session)
        first++;
    cr_assert(first == 400 || first == 300, "sessions of %zu and %zu", first, ex.n - first);
    for (size_t i = 0; i < ex.n; i++)
        cr_assert_eq(ex.v[i].seq, i < first ? i : i - first, "a gap or a repeat");
    h_assert_identity(url);
    stoker_trainer_client_destroy(tc);
    cr_assert(proc_wait(a, 10000) && proc_exit_code(a) == 0, "producer a did not end cleanly");
    cr_assert(proc_wait(b, 10000) && proc_exit_code(b) == 0, "producer b did not end cleanly");
    e2e_examples_fini(&ex);
}

Test(varlen, the_socket_carries_every_value_exactly_once)
{
    run_path(0);
}

Test(varlen, shared_memory_carries_every_value_exactly_once)
{
    run_path(1);
}
