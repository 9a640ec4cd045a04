// Chaos over a dataset: runs of a real broker serving a dataset for several epochs
// (--dataset-size, --epochs), synthetic producers serving it (--items) and a consumer
// (chaos-consumer --dataset), in which, at random moments drawn from a printed seed
// (STOKER_CHAOS_SEED repeats a run), producers are SIGKILLed and restarted later, replaced at
// once, frozen briefly (SIGSTOP shorter than the producer timeout) and frozen past it (taken
// for lost: their shards go to others, and their late pushes must be refused), and the consumer
// is SIGKILLed once and a new one started (its unacknowledged leases come again); half the
// producers push by reference (STOKER_SHM_PUSH_MIN=0). The broker is
// not killed: it owns the epochs, and a new broker starts them anew (docs/datasets.md).
//
// From the consumers' logs (chaos-consumer: "I" items of each batch, "A" acknowledged, "E" epoch
// ends) and the broker's status the test asserts, per run:
// - exactly once per epoch, from the identities (epoch, index): every item of every epoch was
//   delivered; an item is delivered again only if every earlier delivery was not acknowledged
//   (its consumer was killed first); no item is acknowledged twice; the broker accepted exactly
//   items x epochs examples and acknowledged them all (so each item was accepted once);
// - each epoch-end event comes after every item of its epoch was delivered, in epoch order, and
//   no item of an epoch comes after its end; an epoch's end is missing only where the consumer
//   that took its last items was killed (the event went to its next pull); with --strict-epochs
//   (odd runs) no batch mixes epochs;
// - nothing hangs at the end: once the last epoch ended, the consumer sees the supply end and
//   exits 0, and every producer still running exits 0 on its own (END_OF_DATA, goodbye).
// Every wait is bounded and a watchdog ends the whole test.
//
// Environment: STOKER_BROKER_BIN, STOKER_PRODUCER_BIN, STOKER_CHAOS_CONSUMER_BIN (set by meson),
// STOKER_CHAOS_SEED, STOKER_CHAOS_RUNS (default 2), STOKER_CHAOS_KEEP=1 keeps the directory.
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/client.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/rng.h"
#include "stoker/status.h"

#include "harness.h"
#include "proc.h"
#include "testdir.h"

#define MAX_PRODUCERS 4
#define MAX_CONSUMERS 4
#define EPOCHS        3
#define EPOCHS_ARG    "3"    // EPOCHS, for the broker's command line
#define RUN_LIMIT_MS  120000 // a run's epochs must end within this
#define END_MS        20000  // after the last epoch, everyone exits within this
#define TIMEOUT_MS    1000   // the broker's --producer-timeout

typedef struct slot {
    proc_child child;    // child.pid 0 when not running
    uint64_t thaw_at;    // frozen until then (0: not frozen)
    uint64_t restart_at; // dead: a new one starts then (0: none)
} slot;

typedef struct run_state {
    int index;
    stoker_rng *rng;
    uint64_t n_items;
    int strict;
    char url[300];
    proc_child broker;
    slot producers[MAX_PRODUCERS];
    int n_producers, producer_gen;
    proc_child consumer;
    char consumer_log[MAX_CONSUMERS][300];
    int n_consumers;
    int consumer_killed[MAX_CONSUMERS];
    const char *train_ms;
    int kills, replacements, freezes, long_freezes, starts;
} run_state;

static uint64_t
rnd(run_state *r, uint64_t lo, uint64_t hi) // uniform in [lo, hi]
{
    return lo + stoker_rng_u64(r->rng) % (hi - lo + 1);
}

static void
start_broker(run_state *r)
{
    char items[32], seed[32], shard[16];
    snprintf(items, sizeof(items), "%" PRIu64, r->n_items);
    snprintf(seed, sizeof(seed), "%" PRIu64, rnd(r, 1, 1000000));
    snprintf(shard, sizeof(shard), "%" PRIu64, rnd(r, 8, 64));
    const char *argv[] = {proc_bin("STOKER_BROKER_BIN"),
                          "--listen",
                          r->url,
                          "--dataset-size",
                          items,
                          "--epochs",
                          EPOCHS_ARG,
                          "--shuffle-seed",
                          seed,
                          "--shard-items",
                          shard,
                          "--producer-timeout",
                          "1",
                          "--queue-depth",
                          "48",
                          "--log-level",
                          "info",
                          r->strict ? "--strict-epochs" : "--overlap-epochs",
                          NULL};
    char log[64];
    snprintf(log, sizeof(log), "run%d-broker.log", r->index);
    proc_start(&r->broker, "broker", argv, &(proc_io){.log = log});
    proc_listening(&r->broker, 1, NULL);
    printf("chaos-dataset: run %d: %" PRIu64 " items, %d epochs, shards of %s%s, %d producers, "
           "consumer trains %s ms per batch\n",
           r->index, r->n_items, EPOCHS, shard, r->strict ? ", strict epochs" : "", r->n_producers,
           r->train_ms);
}

static void
start_producer(run_state *r, int i)
{
    char name[32], items[32], chunk[16], log[64];
    snprintf(name, sizeof(name), "p%d-%d", i, r->producer_gen++);
    snprintf(items, sizeof(items), "%" PRIu64, r->n_items);
    snprintf(chunk, sizeof(chunk), "%" PRIu64, rnd(r, 1, 6));
    snprintf(log, sizeof(log), "run%d-producers.log", r->index);
    const char *argv[] = {proc_bin("STOKER_PRODUCER_BIN"),
                          "--broker",
                          r->url,
                          "--name",
                          name,
                          "--items",
                          items,
                          "--chunk",
                          chunk,
                          "--delay",
                          "0.001:0.004",
                          "--log-level",
                          "info",
                          NULL};
    slot *s = &r->producers[i];
    // Odd slots push by reference (their small chunks too): a revoked push, a freeze or a kill
    // then also meets examples that live in the producer's shared memory.
    if (i % 2 == 1)
        setenv("STOKER_SHM_PUSH_MIN", "0", 1);
    proc_start(&s->child, "producer", argv, &(proc_io){.log = log});
    unsetenv("STOKER_SHM_PUSH_MIN");
    s->thaw_at = s->restart_at = 0;
    r->starts++;
}

static void
start_consumer(run_state *r)
{
    if (r->n_consumers == MAX_CONSUMERS)
        proc_fail("run %d: too many consumers", r->index);
    int c = r->n_consumers++;
    snprintf(r->consumer_log[c], sizeof(r->consumer_log[c]), "%s/run%d-consumer%d.log",
             testdir_path(), r->index, c);
    char seed[32], errlog[64];
    snprintf(seed, sizeof(seed), "%" PRIu64, rnd(r, 1, 1000000));
    snprintf(errlog, sizeof(errlog), "run%d-consumers.err", r->index);
    const char *argv[] = {proc_bin("STOKER_CHAOS_CONSUMER_BIN"),
                          "--broker",
                          r->url,
                          "--log",
                          r->consumer_log[c],
                          "--batch",
                          "8",
                          "--prefetch",
                          "4",
                          "--train-ms",
                          r->train_ms,
                          "--seed",
                          seed,
                          "--dataset",
                          NULL};
    proc_start(&r->consumer, "consumer", argv, &(proc_io){.log = errlog});
}

static stoker_status *
status(run_state *r)
{
    stoker_status *st = NULL;
    char err[256] = "";
    for (int attempt = 0; attempt < 3; attempt++) {
        if (stoker_status_fetch(r->url, NULL, 5000, &st, err, sizeof(err)) == STOKER_OK)
            return st;
        stoker_sleep_ms(50, NULL);
    }
    proc_fail("run %d: no status from the broker: %s", r->index, err);
}

// One random disruption of a running, unfrozen producer (if any).
static void
disrupt(run_state *r, uint64_t now)
{
    int i = (int)rnd(r, 0, (uint64_t)r->n_producers - 1);
    slot *s = &r->producers[i];
    if (s->child.pid == 0 || s->thaw_at != 0)
        return;
    switch (rnd(r, 0, 9)) {
    case 0:
    case 1:
    case 2: // killed, back later
        proc_kill(&s->child);
        s->restart_at = now + rnd(r, 200, 1500);
        r->kills++;
        break;
    case 3:
    case 4: // frozen briefly: still the broker's
        proc_signal(&s->child, SIGSTOP);
        s->thaw_at = now + rnd(r, 50, TIMEOUT_MS / 2);
        r->freezes++;
        break;
    case 5: // frozen past the producer timeout: lost, its shard goes to others, it comes back
        proc_signal(&s->child, SIGSTOP);
        s->thaw_at = now + rnd(r, TIMEOUT_MS * 3 / 2, TIMEOUT_MS * 5 / 2);
        r->long_freezes++;
        break;
    case 6:
    case 7: // replaced at once
        proc_kill(&s->child);
        start_producer(r, i);
        r->replacements++;
        break;
    default:
        break;
    }
}

// Whether the broker's last epoch ended.
static int
epochs_done(run_state *r)
{
    stoker_status *st = status(r);
    int done = st->epochs_done >= EPOCHS;
    stoker_status_destroy(st);
    return done;
}

// The chaos, until the broker's last epoch ended.
static void
chaos_phase(run_state *r)
{
    uint64_t t0 = stoker_now_ms();
    uint64_t consumer_kill_at = t0 + rnd(r, 300, 3000);
    uint64_t next_action = t0 + rnd(r, 100, 400);
    int consumer_killed = 0;
    while (!epochs_done(r)) {
        uint64_t now = stoker_now_ms();
        if (now > t0 + RUN_LIMIT_MS)
            proc_fail("run %d: %d epochs of %" PRIu64 " items did not end within %d s", r->index,
                      EPOCHS, r->n_items, RUN_LIMIT_MS / 1000);
        for (int i = 0; i < r->n_producers; i++) {
            slot *s = &r->producers[i];
            // A producer ends on its own only after the last epoch (END_OF_DATA).
            if (s->child.pid > 0 && s->thaw_at == 0 && proc_wait(&s->child, 0) &&
                (proc_exit_code(&s->child) != 0 || !epochs_done(r)))
                proc_fail("run %d: producer slot %d exited (status %d) before the last epoch "
                          "ended",
                          r->index, i, s->child.status);
            if (s->thaw_at != 0 && now >= s->thaw_at) {
                proc_signal(&s->child, SIGCONT);
                s->thaw_at = 0;
            }
            if (s->restart_at != 0 && now >= s->restart_at)
                start_producer(r, i);
        }
        if (r->consumer.pid > 0 && proc_wait(&r->consumer, 0) &&
            (proc_exit_code(&r->consumer) != 0 || !epochs_done(r)))
            proc_fail("run %d: the consumer exited (status %d) before the last epoch ended",
                      r->index, r->consumer.status);
        if (!consumer_killed && now >= consumer_kill_at && r->consumer.pid > 0) {
            proc_kill(&r->consumer);
            r->consumer_killed[r->n_consumers - 1] = 1;
            start_consumer(r);
            consumer_killed = 1;
        }
        if (now >= next_action) {
            disrupt(r, now);
            next_action = now + rnd(r, 100, 400);
        }
        stoker_sleep_ms(20, NULL);
    }
    // Thaw the frozen; the dead stay dead.
    for (int i = 0; i < r->n_producers; i++) {
        slot *s = &r->producers[i];
        if (s->thaw_at != 0)
            proc_signal(&s->child, SIGCONT);
        s->thaw_at = 0;
    }
    printf("chaos-dataset: run %d: epochs ended after %.1f s; producers started %d, killed %d, "
           "replaced %d, frozen %d briefly and %d past the timeout; consumer killed %d\n",
           r->index, (double)(stoker_now_ms() - t0) / 1000.0, r->starts, r->kills, r->replacements,
           r->freezes, r->long_freezes, consumer_killed);
}

// Nothing hangs: the consumer and the producers still running end on their own.
static void
end_phase(run_state *r)
{
    uint64_t t0 = stoker_now_ms();
    if (!proc_wait(&r->consumer, END_MS))
        harness_fail("run %d: the consumer did not see the supply end within %d s", r->index,
                     END_MS / 1000);
    else if (proc_exit_code(&r->consumer) != 0)
        harness_fail("run %d: the consumer exited %d, not 0", r->index,
                     proc_exit_code(&r->consumer));
    for (int i = 0; i < r->n_producers; i++) {
        slot *s = &r->producers[i];
        if (s->child.pid == 0)
            continue;
        uint64_t spent = stoker_now_ms() - t0;
        int left = spent < END_MS ? (int)(END_MS - spent) : 0;
        if (!proc_wait(&s->child, left))
            harness_fail("run %d: producer slot %d still runs %d s after the last epoch", r->index,
                         i, END_MS / 1000);
        else if (proc_exit_code(&s->child) != 0)
            harness_fail("run %d: producer slot %d exited %d, not 0", r->index, i,
                         proc_exit_code(&s->child));
    }
    printf("chaos-dataset: run %d: consumer and producers ended %.1f s after the last epoch\n",
           r->index, (double)(stoker_now_ms() - t0) / 1000.0);
}

// ---- the check ------------------------------------------------------------------------------

typedef struct lease_items {
    uint64_t lease;
    uint64_t *items; // (epoch << 32) | index
    uint32_t n;
} lease_items;

typedef struct ledger {
    uint64_t n_items;
    uint16_t *delivered[EPOCHS];   // (n_items,) deliveries
    uint8_t *acked[EPOCHS];        // (n_items,) deliveries in batches logged "A"
    int8_t *last_consumer[EPOCHS]; // (n_items,) consumer of each item's latest delivery
    int last_of_epoch[EPOCHS];     // consumer of the epoch's latest delivery
    int ended[EPOCHS];             // its "E" line was seen
    int last_end;                  // highest epoch ended so far (-1)
    uint64_t deliveries, redeliveries, unlogged_acks, mixed_batches;
} ledger;

static lease_items *
find_lease(lease_items *l, size_t n, uint64_t lease)
{
    for (size_t i = n; i-- > 0;) {
        if (l[i].lease == lease)
            return &l[i];
    }
    return NULL;
}

// Reads consumer c's log into the ledger, in the order it was written.
static void
read_consumer(run_state *r, ledger *g, int c)
{
    char *text = testdir_read(r->consumer_log[c], NULL);
    if (text == NULL) {
        harness_fail("run %d: no log from consumer %d (%s)", r->index, c, r->consumer_log[c]);
        return;
    }
    lease_items *leases = NULL;
    size_t n_leases = 0, cap = 0;
    for (char *line = text, *next; line != NULL && *line != '\0'; line = next) {
        next = strchr(line, '\n');
        if (next == NULL)
            break; // a line cut by SIGKILL is not there (one write per line)
        *next++ = '\0';
        if (line[0] == 'I') {
            if (n_leases == cap) {
                cap = cap ? cap * 2 : 256;
                leases = realloc(leases, cap * sizeof(*leases));
            }
            lease_items *li = &leases[n_leases++];
            char *p = line + 1;
            li->lease = strtoull(p, &p, 10);
            li->items = malloc(64 * sizeof(*li->items));
            li->n = 0;
            unsigned e;
            uint64_t i;
            int len, first_epoch = -1;
            while (li->n < 64 && sscanf(p, " %u:%" SCNu64 "%n", &e, &i, &len) == 2) {
                p += len;
                if (e >= EPOCHS || i >= g->n_items) {
                    harness_fail("run %d: consumer %d got item %u:%" PRIu64
                                 ", outside %d epochs of %" PRIu64,
                                 r->index, c, e, i, EPOCHS, g->n_items);
                    continue;
                }
                if (g->ended[e])
                    harness_fail("run %d: item %u:%" PRIu64 " delivered after epoch %u ended",
                                 r->index, e, i, e);
                if (g->acked[e][i] > 0)
                    harness_fail("run %d: item %u:%" PRIu64
                                 " delivered again after it was acknowledged",
                                 r->index, e, i);
                g->redeliveries += g->delivered[e][i] > 0;
                g->delivered[e][i]++;
                g->last_consumer[e][i] = (int8_t)c;
                g->last_of_epoch[e] = c;
                g->deliveries++;
                if (first_epoch >= 0 && (unsigned)first_epoch != e)
                    g->mixed_batches++;
                if (first_epoch < 0)
                    first_epoch = (int)e;
                li->items[li->n++] = ((uint64_t)e << 32) | i;
            }
        } else if (line[0] == 'A') {
            lease_items *li = find_lease(leases, n_leases, strtoull(line + 1, NULL, 10));
            for (uint32_t j = 0; li != NULL && j < li->n; j++) {
                uint32_t e = (uint32_t)(li->items[j] >> 32);
                uint64_t i = li->items[j] & 0xffffffffu;
                if (++g->acked[e][i] > 1)
                    harness_fail("run %d: item %u:%" PRIu64 " acknowledged twice", r->index, e, i);
            }
        } else if (line[0] == 'E') {
            int e = atoi(line + 1);
            if (e < 0 || e >= EPOCHS) {
                harness_fail("run %d: an end of epoch %d, outside the %d epochs", r->index, e,
                             EPOCHS);
                continue;
            }
            if (e <= g->last_end)
                harness_fail("run %d: epoch %d ended after epoch %d", r->index, e, g->last_end);
            uint64_t missing = 0;
            for (uint64_t i = 0; i < g->n_items; i++)
                missing += g->delivered[e][i] == 0;
            if (missing > 0)
                harness_fail("run %d: epoch %d ended with %" PRIu64
                             " of its items not yet delivered",
                             r->index, e, missing);
            g->ended[e] = 1;
            g->last_end = e;
        }
    }
    for (size_t i = 0; i < n_leases; i++)
        free(leases[i].items);
    free(leases);
    free(text);
}

static void
check_run(run_state *r)
{
    ledger g;
    memset(&g, 0, sizeof(g));
    g.n_items = r->n_items;
    g.last_end = -1;
    for (int e = 0; e < EPOCHS; e++) {
        g.delivered[e] = calloc(r->n_items, sizeof(*g.delivered[e]));
        g.acked[e] = calloc(r->n_items, 1);
        g.last_consumer[e] = calloc(r->n_items, 1);
    }
    for (int c = 0; c < r->n_consumers; c++)
        read_consumer(r, &g, c);

    for (int e = 0; e < EPOCHS; e++) {
        uint64_t never = 0, unacked_ok = 0;
        for (uint64_t i = 0; i < r->n_items; i++) {
            if (g.delivered[e][i] == 0) {
                if (never++ < 5)
                    harness_fail("run %d: item %d:%" PRIu64 " was never delivered", r->index, e, i);
                continue;
            }
            int c = g.last_consumer[e][i];
            if (g.acked[e][i] == 0) {
                // Acknowledged by a consumer killed before it logged "A" (else the broker
                // would have delivered it again): only the killed one may leave such items.
                if (r->consumer_killed[c])
                    unacked_ok++;
                else if (unacked_ok + g.unlogged_acks < 5)
                    harness_fail("run %d: item %d:%" PRIu64
                                 " was never acknowledged by consumer %d, "
                                 "which lived on",
                                 r->index, e, i, c);
            }
        }
        g.unlogged_acks += unacked_ok;
        // The end goes with the pull after the epoch's last acknowledgement: to the consumer
        // that took its last items, which may have been killed first.
        if (!g.ended[e] && !r->consumer_killed[g.last_of_epoch[e]])
            harness_fail("run %d: no consumer heard of epoch %d's end", r->index, e);
        else if (!g.ended[e])
            printf("chaos-dataset: run %d: epoch %d's end went to the killed consumer\n", r->index,
                   e);
    }
    if (r->strict && g.mixed_batches > 0)
        harness_fail("run %d: %" PRIu64 " batches mixed epochs under --strict-epochs", r->index,
                     g.mixed_batches);

    stoker_status *st = status(r);
    uint64_t want = r->n_items * EPOCHS;
    if (st->counters.produced != want)
        harness_fail("run %d: the broker accepted %" PRIu64 " examples, %" PRIu64
                     " items x %d epochs "
                     "is %" PRIu64 " (an item accepted twice, or lost)",
                     r->index, st->counters.produced, r->n_items, EPOCHS, want);
    if (st->counters.acknowledged != want || st->counters.queued != 0 ||
        st->counters.in_flight != 0)
        harness_fail("run %d: the broker acknowledged %" PRIu64 " of %" PRIu64 " (queued %" PRIu64
                     ", in flight %" PRIu64 ")",
                     r->index, st->counters.acknowledged, want, st->counters.queued,
                     st->counters.in_flight);
    if (st->epochs_done != EPOCHS)
        harness_fail("run %d: the broker says %u epochs done, not %d", r->index, st->epochs_done,
                     EPOCHS);
    uint64_t by_reference = 0;
    for (uint32_t i = 0; i < st->n_producers; i++)
        by_reference += st->producers[i].pushes_shm;
    if (r->n_producers >= 2 && by_reference == 0)
        harness_fail("run %d: no push came by reference, yet odd producer slots push so", r->index);
    printf("chaos-dataset: run %d: %" PRIu64 " pushes by reference\n", r->index, by_reference);
    printf("chaos-dataset: run %d: %" PRIu64 " deliveries of %" PRIu64 " items, %" PRIu64
           " again after a killed consumer, %" PRIu64 " acknowledged unlogged; broker: accepted "
           "%" PRIu64 ", %" PRIu64 " items reassigned, %" PRIu64 " pushes revoked, %" PRIu64
           " redelivered\n",
           r->index, g.deliveries, want, g.redeliveries, g.unlogged_acks, st->counters.produced,
           st->items_reassigned, st->pushes_revoked, st->counters.redelivered);
    stoker_status_destroy(st);
    for (int e = 0; e < EPOCHS; e++) {
        free(g.delivered[e]);
        free(g.acked[e]);
        free(g.last_consumer[e]);
    }
}

int
main(void)
{
    harness_init("chaos-dataset", testdir_path());
    if (getenv("STOKER_BROKER_BIN") == NULL || getenv("STOKER_PRODUCER_BIN") == NULL ||
        getenv("STOKER_CHAOS_CONSUMER_BIN") == NULL) {
        printf("chaos-dataset: SKIP: STOKER_BROKER_BIN, STOKER_PRODUCER_BIN and "
               "STOKER_CHAOS_CONSUMER_BIN must be set (meson test sets them)\n");
        return 77;
    }
    uint64_t seed = harness_seed();
    uint64_t runs = harness_env_u64("STOKER_CHAOS_RUNS", 2);
    printf("chaos-dataset: seed %" PRIu64 " (STOKER_CHAOS_SEED=%" PRIu64 " repeats it), %" PRIu64
           " runs\n",
           seed, seed, runs);
    harness_watchdog((unsigned)(runs * (RUN_LIMIT_MS + END_MS + 10000) / 1000 + 30));
    testdir_create("stoker-chaos-dataset-");

    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    int failed_runs = 0;
    for (uint64_t ri = 0; ri < runs; ri++) {
        run_state *r = calloc(1, sizeof(*r));
        r->index = (int)ri;
        r->rng = &rng;
        r->n_producers = (int)rnd(r, 2, MAX_PRODUCERS);
        r->n_items = rnd(r, 2000, 4000);
        // Even runs: a consumer slower than the producers (full queues, backpressure), the next
        // epoch's work overlapping the last one's drain; odd runs: a fast one, strict epochs.
        r->train_ms = ri % 2 == 0 ? "4:15" : "0:3";
        r->strict = ri % 2 == 1;
        snprintf(r->url, sizeof(r->url), "ipc://%s/broker%d.sock", testdir_path(), r->index);
        harness_run_failed = 0;
        uint64_t t0 = stoker_now_ms();
        start_broker(r);
        for (int i = 0; i < r->n_producers; i++)
            start_producer(r, i);
        start_consumer(r);
        chaos_phase(r);
        end_phase(r);
        check_run(r);
        for (int i = 0; i < r->n_producers; i++)
            proc_kill(&r->producers[i].child);
        proc_kill(&r->consumer);
        if (proc_stop(&r->broker, 5000) != 1 || proc_exit_code(&r->broker) != 0)
            harness_fail("run %d: the broker did not exit cleanly on SIGTERM", r->index);
        printf("chaos-dataset: run %d: %s in %.1f s\n", r->index,
               harness_run_failed ? "FAILED" : "ok", (double)(stoker_now_ms() - t0) / 1000.0);
        failed_runs += harness_run_failed;
        free(r);
    }
    if (failed_runs == 0 && getenv("STOKER_CHAOS_KEEP") == NULL)
        testdir_remove();
    else
        printf("chaos-dataset: logs kept in %s\n", testdir_path());
    printf("chaos-dataset: seed %" PRIu64 ": %" PRIu64 " runs, %d failed\n", seed, runs,
           failed_runs);
    printf("chaos-dataset: %s\n", failed_runs == 0 ? "PASS" : "FAIL");
    return failed_runs == 0 ? 0 : 1;
}
