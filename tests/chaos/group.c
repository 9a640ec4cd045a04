// Chaos for data-parallel groups: three stoker-pull ranks of one group fed by
// producers that are frozen (SIGSTOP), killed and restarted at random moments drawn from a
// printed seed (STOKER_CHAOS_SEED repeats it). Then one rank is SIGKILLed: the other two must
// exit with the group's code (5) within the trainer timeout, never hang. The ranks are started
// again under the same group name (torchrun's restart): the group re-forms, and when the
// producers finish every rank exits with the end (3) having written the same number of examples.
// Runs alone, bounded (about 10 s here); a plain program (exit 0 / 1), no criterion.
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/rng.h"
#include "stoker/status.h"
#include "stoker/client.h"
#include "testdir.h"

#define RANKS      3
#define PRODUCERS  2
#define TIMEOUT_S  "2" // --trainer-timeout
#define TIMEOUT_MS 2000

static uint64_t rng_state;

static void
die_hook(const char *msg)
{
    fprintf(stderr, "chaos-group: FAIL: %s\n", msg);
    proc_kill_all();
    testdir_remove();
    exit(1);
}

static uint64_t
rnd(uint64_t lo, uint64_t hi)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (rng_state >> 33) % (hi - lo + 1);
}

static proc_child *
start_rank(const char *url, int rank, int round)
{
    char r[16], what[32], out[64];
    snprintf(r, sizeof(r), "%d", rank);
    snprintf(what, sizeof(what), "rank%d-%d", rank, round);
    snprintf(out, sizeof(out), "rank%d-%d.out", rank, round);
    proc_io io = {.files = 1};
    return proc_start_bin(what, "STOKER_PULL_BIN",
                          PROC_ARGS("--broker", url, "--group", "chaos", "--rank", r, "--world",
                                    "3", "--batch-size", "4", "--stall-timeout", "20",
                                    "--log-level", "error"),
                          &io);
}

static proc_child *
start_producer(const char *url, int i, const char *max)
{
    char name[16];
    snprintf(name, sizeof(name), "p%d", i);
    proc_io io = {.files = 1};
    if (max != NULL)
        return proc_producer_start(
            url, name, PROC_ARGS("--delay", "0.0005:0.002", "--max-examples", max), &io);
    return proc_producer_start(url, name, PROC_ARGS("--delay", "0.0005:0.002"), &io);
}

static size_t
lines_of(const proc_child *c)
{
    char *text = testdir_read(c->out_path, NULL);
    if (text == NULL)
        proc_fail("%s: no output at %s", c->what, c->out_path);
    size_t n = 0;
    for (const char *p = text; *p != '\0'; p++)
        n += *p == '\n';
    free(text);
    return n;
}

// Producers whose name is given and are alive.
static int
alive(const char *url, const char *a, const char *b)
{
    stoker_status *st = NULL;
    char err[256] = "";
    if (stoker_status_fetch(url, NULL, 2000, &st, err, sizeof(err)) != STOKER_OK)
        proc_fail("status from %s failed: %s", url, err);
    int n = 0;
    for (uint32_t i = 0; i < st->n_producers; i++)
        n += st->producers[i].status == STOKER_PRODUCER_ALIVE &&
             (strcmp(st->producers[i].name, a) == 0 || strcmp(st->producers[i].name, b) == 0);
    stoker_status_destroy(st);
    return n;
}

static uint64_t
group_steps(const char *url)
{
    stoker_status *st = NULL;
    char err[256] = "";
    if (stoker_status_fetch(url, NULL, 2000, &st, err, sizeof(err)) != STOKER_OK)
        proc_fail("status from %s failed: %s", url, err);
    uint64_t steps = 0;
    for (uint32_t i = 0; i < st->n_groups; i++)
        if (strcmp(st->groups[i].state, "open") == 0)
            steps = st->groups[i].steps;
    stoker_status_destroy(st);
    return steps;
}

int
main(void)
{
    proc_set_fail(die_hook);
    const char *seed_env = getenv("STOKER_CHAOS_SEED");
    uint64_t seed = seed_env != NULL ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
    rng_state = seed;
    printf("chaos-group: seed %llu (STOKER_CHAOS_SEED=%llu repeats it)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    fflush(stdout);
    testdir_create("stoker-chaos-group-");
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_io bio = {.files = 1};
    proc_child *broker = proc_broker_start(url,
                                           PROC_ARGS("--trainer-timeout", TIMEOUT_S, "--schema",
                                                     "input:float32[10],output:float32[1]"),
                                           &bio);

    // Phase 1: ranks train while producers are frozen, killed and restarted.
    proc_child *prod[PRODUCERS], *ranks[RANKS];
    for (int i = 0; i < PRODUCERS; i++)
        prod[i] = start_producer(url, i, NULL);
    for (int r = 0; r < RANKS; r++)
        ranks[r] = start_rank(url, r, 1);
    uint64_t until = stoker_now_ms() + 6000;
    while (stoker_now_ms() < until) {
        stoker_sleep_ms((uint32_t)rnd(100, 600), NULL);
        int i = (int)rnd(0, PRODUCERS - 1);
        switch (rnd(0, 2)) {
        case 0: // freeze briefly (shorter than the producer timeout)
            proc_signal(prod[i], SIGSTOP);
            stoker_sleep_ms((uint32_t)rnd(50, 400), NULL);
            proc_signal(prod[i], SIGCONT);
            break;
        case 1: // kill and restart
            proc_kill(prod[i]);
            prod[i] = start_producer(url, i, NULL);
            break;
        default:
            break;
        }
        for (int r = 0; r < RANKS; r++)
            if (proc_wait(ranks[r], 0))
                proc_fail("rank %d exited (%d) while its group was whole", r,
                          proc_exit_code(ranks[r]));
    }
    if (group_steps(url) == 0)
        proc_fail("the group formed no step in 6 s");

    // Phase 2: a rank dies; the others learn it within the trainer timeout.
    int victim = (int)rnd(0, RANKS - 1);
    uint64_t t0 = stoker_now_ms();
    proc_signal(ranks[victim], SIGKILL);
    for (int r = 0; r < RANKS; r++) {
        if (r == victim)
            continue;
        proc_assert_exit(ranks[r], 5, TIMEOUT_MS + 3000);
    }
    uint64_t took = stoker_now_ms() - t0;
    proc_wait(ranks[victim], 5000);
    printf("chaos-group: rank %d killed; the others exited with 5 after %llu ms\n", victim,
           (unsigned long long)took);

    // Phase 3: the group re-forms and ends together.
    // Finite producers join before the endless ones stop (SIGTERM: they finish), so the
    // supply never looks over in between.
    proc_child *finite[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++)
        finite[i] = start_producer(url, i + 10, "400");
    uint64_t deadline = stoker_now_ms() + 10000;
    while (alive(url, "p10", "p11") < PRODUCERS) {
        if (stoker_now_ms() > deadline)
            proc_fail("the finite producers did not join within 10 s");
        stoker_sleep_ms(20, NULL);
    }
    for (int r = 0; r < RANKS; r++)
        ranks[r] = start_rank(url, r, 2);
    for (int i = 0; i < PRODUCERS; i++)
        proc_stop(prod[i], 5000);
    (void)finite;
    for (int r = 0; r < RANKS; r++)
        proc_assert_exit(ranks[r], 3, 30000);
    size_t n0 = lines_of(ranks[0]);
    for (int r = 1; r < RANKS; r++) {
        size_t n = lines_of(ranks[r]);
        if (n != n0)
            proc_fail("rank %d wrote %zu examples, rank 0 %zu: unequal steps", r, n, n0);
    }
    if (n0 == 0)
        proc_fail("the re-formed group trained nothing");
    printf("chaos-group: re-formed group ended together, %zu examples per rank\n", n0);
    proc_broker_stop(broker);
    proc_kill_all();
    testdir_remove();
    printf("1 passed, 0 failed\n");
    return 0;
}
