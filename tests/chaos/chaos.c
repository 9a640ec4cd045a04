// Chaos test: repeated runs of a real broker, synthetic producers and a
// consumer (chaos-consumer, built on libstoker's trainer client) in which, at random moments
// drawn from a printed seed (STOKER_CHAOS_SEED repeats a run):
// - producers are killed (SIGKILL) and restarted later, frozen (SIGSTOP) and thawed (SIGCONT),
//   or replaced at once (a new process: a new session whose seqs start at 0);
//   half of them pushing by reference (their examples in shared memory the broker maps, even
//   their small chunks: STOKER_SHM_PUSH_MIN=0);
// - the consumer is killed once per run and a new one started: the broker must redeliver the
//   leases of the closed connection;
// - the broker is killed once per run: producers and consumer are frozen, its Status taken (what
//   it holds), then it is SIGKILLed, everyone thawed, and a new broker started on the same
//   ipc:// path; producers and consumer reconnect on their own.
// At the end of a run the producers are killed and the consumer drains the broker. Consumers
// alternate between the broker's shared memory (the default on its host) and the socket
// (STOKER_SHM=0); each must have taken its own path (its "V" and "P" log lines).
//
// The consumer logs every batch ("B lease runs") before it counts as trained and every
// acknowledgement that the broker confirmed ("A lease"; "N lease" when refused or failed). From
// those logs and the two Status snapshots the test asserts, per run:
// - within one broker lifetime an identity is delivered again only if every earlier delivery was
//   in a batch that was not acknowledged (its consumer was killed before its "A" line, or the
//   acknowledgement failed); an acknowledged identity is never delivered again within that
//   lifetime, and a consumer process never trains one twice, not even across brokers (an
//   identity acknowledged under a killed broker can come back from the next one when its
//   producer's push acknowledgement died with the broker: the trainer client drops it);
// - the broker that survived: discrepancy = produced - acknowledged - queued - in_flight = 0,
//   and after the drain every example it accepted was delivered (identities trained = identities
//   accepted, exactly; a session's range there is [next_seq - accepted - skipped, next_seq): the
//   seqs its producer skipped were trained before, a trainer said so, and were never pushed);
// - the killed broker: its Status while frozen has discrepancy 0; every identity it delivered was
//   one it accepted; the identities it accepted that no consumer ever trained (the loss) are a
//   subset of what it held (never an acknowledged one), and their number is exactly
//   held (queued + in_flight) - trained but unacknowledged - re-pushed by producers to the next
//   broker (producers retain what is not trained and push it again);
// - the broker's death loses nothing: every lost identity belongs to a producer that the chaos
//   SIGKILLed itself (before the broker's death, or after it but before it pushed its retained
//   examples to the new broker). A producer that lived on loses nothing: the drain waits until
//   each such producer is known to the new broker beyond what the killed one held.
// Every wait is bounded, a watchdog ends the whole test, and children die with it.
// STOKER_CHAOS_TCP=1: the broker listens on tcp://127.0.0.1 (a port free at the run's start,
// the same for its restart) instead of ipc://, so that the pushes in bytes go through its
// intake (server/intake.h), whose port changes with each broker.
//
// Environment: STOKER_BROKER_BIN, STOKER_PRODUCER_BIN, STOKER_CHAOS_CONSUMER_BIN (set by meson),
// STOKER_CHAOS_SEED, STOKER_CHAOS_RUNS (default 8), STOKER_CHAOS_RUN_MS (default 14000),
// STOKER_CHAOS_KEEP=1 keeps the temporary directory.
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "stoker/client.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/rng.h"

#include "harness.h"
#include "proc.h"
#include "testdir.h"

#define MAX_PRODUCERS 4
#define MAX_CONSUMERS 8
#define MAX_SESSIONS  256
#define MAX_SEQ       (1u << 22)
#define LEASE_NEAR    1000000u // leases of one broker lie within this of each other

// ---- the temporary directory -----------------------------------------------------------------

static char tmpdir[256];
static int keep_dir;

// ---- processes -----------------------------------------------------------------------------

typedef struct proc {
    proc_child child; // child.pid 0 when not running
    int frozen;
    uint64_t thaw_at;
} proc;

static const char *broker_bin, *producer_bin, *consumer_bin;
// STOKER_CHAOS_VAR_PRODUCER_BIN (the chaos-varlen test): producers of variable-length examples
// (tests/lib/var_producer.c) instead of synthetic ones, each example checked byte for byte by
// the consumer ("M" lines). Their chunks may be under the size that goes by reference, so the
// check that some push came by reference is not made for them.
static const char *var_bin;

// stdout and stderr appended to log; dies with us (the test library's PR_SET_PDEATHSIG).
static void
spawn(proc *p, const char *what, const char *const *argv, const char *log)
{
    proc_start(&p->child, what, argv, &(proc_io){.log = log});
    p->frozen = 0;
}

static void
kill_proc(proc *p)
{
    proc_kill(&p->child);
    p->frozen = 0;
}

// SIGTERM, at most timeout_ms, then SIGKILL. 1 when it exited on its own.
static int
stop_proc(proc *p, int timeout_ms)
{
    int exited = proc_stop(&p->child, timeout_ms);
    p->frozen = 0;
    return exited;
}

// Waits (bounded) until a SIGSTOPped process is really stopped.
static void
wait_stopped(const proc *p)
{
    proc_wait_stopped(&p->child, 2000);
}

static void
append_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        harness_die("open %s: %s", path, strerror(errno));
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len)
        harness_die("write %s: %s", path, strerror(errno));
    close(fd);
}

// ---- one run's processes -------------------------------------------------------------------

typedef struct consumer_rec {
    char log[300];
    int killed; // SIGKILLed by the chaos (its unacknowledged batches may come again)
    // Its delivery path (docs/shm.md): shm 1 for the default (shared memory on the broker's
    // host), 0 when started with STOKER_SHM=0; and what its log says: batches through shared
    // memory and as bytes ("V" lines), its clients' summaries ("P" lines) and their paths.
    int shm;
    uint64_t via_shm, via_socket;
    int summaries, summaries_shm;
} consumer_rec;

typedef struct run_state {
    int index;
    stoker_rng *rng;
    const char *train_ms; // the consumer's training time per batch, MIN:MAX ms
    char url[300];
    char broker_log[300];
    proc broker;
    int broker_gen;
    proc producers[MAX_PRODUCERS];
    int n_producers;
    uint64_t restart_at[MAX_PRODUCERS]; // dead producer slot: start a new one then (0: none)
    int producer_gen;
    proc consumer;
    consumer_rec consumers[MAX_CONSUMERS];
    int n_consumers;
    char names[MAX_PRODUCERS][32]; // the name of the process in each producer slot
    char killed[MAX_SESSIONS][32]; // names of the producers the chaos SIGKILLed
    int n_killed;
    // Of those, the ones that may lose examples: SIGKILLed before the broker's death, while it was
    // down, or before the new broker had their session beyond what the killed one held.
    char may_lose[MAX_SESSIONS][32];
    int n_may_lose;
    int marker_consumer;  // consumer running when the broker was killed (-1 before)
    stoker_status *held;  // the killed broker's status while everything was frozen
    stoker_status *final; // the surviving broker's status after the drain
    // chaos counts
    int producer_kills, producer_freezes, producer_replacements, producer_starts;
    int consumer_kills, broker_kills;
} run_state;

static uint64_t
rnd(run_state *r, uint64_t lo, uint64_t hi) // uniform in [lo, hi]
{
    return lo + stoker_rng_u64(r->rng) % (hi - lo + 1);
}

static void
start_broker(run_state *r)
{
    const char *argv[] = {
        broker_bin,    "--listen", r->url, "--producer-timeout", "2", "--queue-depth", "48",
        "--log-level", "info",     NULL};
    spawn(&r->broker, "broker", argv, r->broker_log);
    r->broker_gen++;
    proc_listening(&r->broker.child, 1, NULL); // in what it appended to its log (at most 10 s)
}

static void
start_producer(run_state *r, int slot)
{
    char name[32], seed[32], log[300], chunk[16];
    snprintf(name, sizeof(name), "p%d-%d", slot, r->producer_gen++);
    snprintf(seed, sizeof(seed), "%" PRIu64, rnd(r, 1, 1000000));
    snprintf(chunk, sizeof(chunk), "%" PRIu64, rnd(r, 1, 6));
    snprintf(log, sizeof(log), "%s/run%d-producers.log", tmpdir, r->index);
    const char *argv_synthetic[] = {producer_bin, "--broker",    r->url,    "--name", name,
                                    "--delay",    "0.002:0.01",  "--chunk", chunk,    "--seed",
                                    seed,         "--log-level", "warn",    NULL};
    // Endless (0 examples: no limit), 5 ms an example.
    const char *argv_var[] = {var_bin, r->url,       name,   "0", "--chunk",
                              chunk,   "--delay-us", "5000", NULL};
    const char *const *argv = var_bin != NULL ? argv_var : argv_synthetic;
    // Odd slots push by reference (their small chunks too): the faults below then also hit
    // producers whose queued examples live in their own shared memory.
    if (slot % 2 == 1)
        setenv("STOKER_SHM_PUSH_MIN", "0", 1);
    spawn(&r->producers[slot], "producer", argv, log);
    unsetenv("STOKER_SHM_PUSH_MIN");
    snprintf(r->names[slot], sizeof(r->names[slot]), "%s", name);
    r->restart_at[slot] = 0;
    r->producer_starts++;
}

static void
start_consumer(run_state *r)
{
    if (r->n_consumers == MAX_CONSUMERS)
        harness_die("run %d: too many consumers", r->index);
    consumer_rec *c = &r->consumers[r->n_consumers++];
    memset(c, 0, sizeof(*c));
    snprintf(c->log, sizeof(c->log), "%s/run%d-consumer%d.log", tmpdir, r->index,
             r->n_consumers - 1);
    char seed[32], errlog[300];
    snprintf(seed, sizeof(seed), "%" PRIu64, rnd(r, 1, 1000000));
    snprintf(errlog, sizeof(errlog), "%s/run%d-consumers.err", tmpdir, r->index);
    const char *argv[] = {consumer_bin, "--broker",
                          r->url,       "--log",
                          c->log,       "--batch",
                          "8",          "--prefetch",
                          "4",          "--train-ms",
                          r->train_ms,  "--seed",
                          seed,         var_bin != NULL ? "--var" : NULL,
                          NULL};
    // Every other consumer takes its batches over the socket (STOKER_SHM=0), the others through
    // the broker's shared memory; which one starts alternates between runs.
    c->shm = (r->index + r->n_consumers) % 2 == 0;
    if (!c->shm)
        setenv("STOKER_SHM", "0", 1);
    spawn(&r->consumer, "consumer", argv, errlog);
    unsetenv("STOKER_SHM");
}

// A broker that stops answering is a bug to find, not just a failure: where each of its
// threads is (gdb, when installed) and how much CPU each used over a second (a spinning thread
// or a blocked one) are printed before the test stops.
static void
dump_threads(pid_t pid, const char *log)
{
    char cmd[512];
    printf("chaos: the broker (pid %d) does not answer; its threads' CPU ticks over 1 s:\n",
           (int)pid);
    fflush(stdout);
    snprintf(cmd, sizeof(cmd),
             "cd /proc/%d/task 2>/dev/null && for t in *; do echo \"$t $(cut -d' ' -f2,14,15 "
             "$t/stat)\"; done > /tmp/chaos-ticks.$$; sleep 1; for t in *; do "
             "echo \"  thread $t $(cut -d' ' -f2,14,15 $t/stat)  (1 s before: $(grep \"^$t \" "
             "/tmp/chaos-ticks.$$ | cut -d' ' -f3-))\"; done; rm -f /tmp/chaos-ticks.$$",
             (int)pid);
    if (system(cmd) != 0)
        printf("chaos: (no /proc entry for pid %d)\n", (int)pid);
    snprintf(cmd, sizeof(cmd),
             "command -v gdb >/dev/null && timeout 60 gdb -p %d -batch -ex 'thread apply all bt' "
             "2>&1 | grep -E '^(Thread|#)' | head -n 300",
             (int)pid);
    printf("chaos: backtraces (gdb):\n");
    fflush(stdout);
    if (system(cmd) != 0)
        printf("chaos: (gdb not installed or could not attach)\n");
    printf("chaos: the broker's log: %s\n", log);
    fflush(stdout);
}

static stoker_status *
fetch_status(run_state *r)
{
    stoker_status *st = NULL;
    char err[256] = "";
    // Generous: on a loaded 2-core machine (the rest of the suite, a build) a live broker can
    // be starved for seconds; a broker that never answers still fails the run after 15 s.
    for (int attempt = 0; attempt < 3; attempt++) {
        int rv = stoker_status_fetch(r->url, NULL, 5000, &st, err, sizeof(err));
        if (rv == STOKER_OK)
            return st;
        stoker_sleep_ms(50, NULL);
    }
    dump_threads(r->broker.child.pid, r->broker_log);
    harness_die("run %d: no Status from the broker: %s", r->index, err);
}

static int
same_counters(const stoker_status *a, const stoker_status *b)
{
    return a->counters.produced == b->counters.produced &&
           a->counters.acknowledged == b->counters.acknowledged &&
           a->counters.queued == b->counters.queued &&
           a->counters.in_flight == b->counters.in_flight &&
           a->counters.delivered == b->counters.delivered;
}

// Freeze producers and consumer, take the broker's (stable) status, SIGKILL it, mark the
// consumer's log, thaw everyone. The broker is started again later by the caller.
static void
kill_broker(run_state *r)
{
    for (int i = 0; i < r->n_producers; i++) {
        if (r->producers[i].child.pid > 0) {
            kill(r->producers[i].child.pid, SIGSTOP);
            r->producers[i].frozen = 1;
        }
    }
    kill(r->consumer.child.pid, SIGSTOP);
    for (int i = 0; i < r->n_producers; i++) {
        if (r->producers[i].child.pid > 0)
            wait_stopped(&r->producers[i]);
    }
    wait_stopped(&r->consumer);
    // Let the broker finish what was already in its sockets, then wait for a stable snapshot.
    stoker_sleep_ms(100, NULL);
    stoker_status *st = fetch_status(r);
    for (int i = 0;; i++) {
        stoker_sleep_ms(50, NULL);
        stoker_status *again = fetch_status(r);
        int same = same_counters(st, again);
        stoker_status_destroy(st);
        st = again;
        if (same)
            break;
        if (i == 20)
            harness_die("run %d: the frozen broker's counters keep changing", r->index);
    }
    kill_proc(&r->broker);
    r->held = st;
    r->marker_consumer = r->n_consumers - 1;
    append_file(r->consumers[r->marker_consumer].log, "K\n");
    r->broker_kills++;
    for (int i = 0; i < r->n_producers; i++) {
        if (r->producers[i].child.pid > 0) {
            kill(r->producers[i].child.pid, SIGCONT);
            r->producers[i].frozen = 0;
        }
    }
    kill(r->consumer.child.pid, SIGCONT);
}

static int
named(const char (*names)[32], int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0)
            return 1;
    }
    return 0;
}

static int
was_killed(const run_state *r, const char *name)
{
    return named(r->killed, r->n_killed, name);
}

// Whether examples of the producer called name may be lost: it was SIGKILLed while the killed
// broker held examples of it that no other copy was sure to reach the new broker.
static int
may_lose(const run_state *r, const char *name)
{
    return named(r->may_lose, r->n_may_lose, name);
}

static const stoker_producer_info *status_session(const stoker_status *st, uint64_t session);

// SIGKILLs the producer in slot i during the chaos and remembers its name, and whether it may
// lose examples: unless the broker was killed before and the new one already has this
// producer's session beyond what the killed one held (its retained examples pushed again), a
// broker death around its own takes the only copies of what it retained.
static void
kill_producer(run_state *r, int i)
{
    int lose = 1;
    const stoker_producer_info *held = NULL;
    for (uint32_t k = 0; r->held != NULL && k < r->held->n_producers; k++)
        held = strcmp(r->held->producers[k].name, r->names[i]) == 0 ? &r->held->producers[k] : held;
    if (r->held != NULL && held == NULL) {
        lose = 0; // started after the broker's death: the killed broker held nothing of it
    } else if (held != NULL && r->broker.child.pid > 0) {
        // Taken before the kill: what it shows pushed again stays pushed.
        stoker_status *st = fetch_status(r);
        const stoker_producer_info *now = status_session(st, held->session);
        lose = now == NULL || now->next_seq < held->next_seq;
        stoker_status_destroy(st);
    }
    kill_proc(&r->producers[i]);
    if (r->n_killed < MAX_SESSIONS)
        memcpy(r->killed[r->n_killed++], r->names[i], sizeof(r->killed[0]));
    if (lose && r->n_may_lose < MAX_SESSIONS)
        memcpy(r->may_lose[r->n_may_lose++], r->names[i], sizeof(r->may_lose[0]));
}

// Reaps children that ended on their own (none should): a producer slot restarts, a consumer
// is replaced.
static void
reap_unexpected(run_state *r)
{
    for (int i = 0; i < r->n_producers; i++) {
        proc *p = &r->producers[i];
        if (p->child.pid > 0 && proc_wait(&p->child, 0)) {
            printf("chaos: run %d: producer slot %d exited on its own (status %d); restarting\n",
                   r->index, i, p->child.status);
            p->frozen = 0;
            r->restart_at[i] = stoker_now_ms() + 100;
        }
    }
    if (r->consumer.child.pid > 0 && proc_wait(&r->consumer.child, 0)) {
        harness_fail("run %d: the consumer exited on its own (status %d)", r->index,
                     r->consumer.child.status);
        start_consumer(r);
    }
    if (r->broker.child.pid > 0 && proc_wait(&r->broker.child, 0))
        harness_die("run %d: the broker died on its own (status %d; see %s)", r->index,
                    r->broker.child.status, r->broker_log);
}

static void
chaos_phase(run_state *r, uint64_t run_ms)
{
    uint64_t t0 = stoker_now_ms();
    uint64_t end = t0 + run_ms;
    // The two kills at least a fifth of the run apart, so that the consumer's leases meet a
    // live broker (redelivery) and the broker's kill finds a consumer at work.
    uint64_t broker_kill_at = t0 + rnd(r, run_ms * 30 / 100, run_ms * 80 / 100);
    uint64_t consumer_kill_at;
    do
        consumer_kill_at = t0 + rnd(r, run_ms * 10 / 100, run_ms * 90 / 100);
    while (consumer_kill_at + run_ms / 5 > broker_kill_at &&
           consumer_kill_at < broker_kill_at + run_ms / 5);
    uint64_t broker_start_at = 0;
    uint64_t next_action = t0 + rnd(r, 100, 400);
    int consumer_killed = 0, broker_killed = 0;
    while (stoker_now_ms() < end || broker_start_at != 0) {
        uint64_t now = stoker_now_ms();
        reap_unexpected(r);
        for (int i = 0; i < r->n_producers; i++) {
            proc *p = &r->producers[i];
            if (p->child.pid > 0 && p->frozen && now >= p->thaw_at) {
                kill(p->child.pid, SIGCONT);
                p->frozen = 0;
            }
            if (p->child.pid == 0 && r->restart_at[i] != 0 && now >= r->restart_at[i])
                start_producer(r, i);
        }
        if (broker_start_at != 0 && now >= broker_start_at) {
            start_broker(r);
            broker_start_at = 0;
        }
        if (!consumer_killed && now >= consumer_kill_at) {
            kill_proc(&r->consumer);
            r->consumers[r->n_consumers - 1].killed = 1;
            r->consumer_kills++;
            consumer_killed = 1;
            start_consumer(r);
        }
        if (!broker_killed && now >= broker_kill_at) {
            kill_broker(r);
            broker_killed = 1;
            broker_start_at = stoker_now_ms() + rnd(r, 0, 800);
        }
        if (now >= next_action && now < end) {
            next_action = now + rnd(r, 100, 500);
            int i = (int)rnd(r, 0, (uint64_t)r->n_producers - 1);
            proc *p = &r->producers[i];
            uint64_t what = rnd(r, 0, 99);
            if (p->child.pid == 0) {
                // dead, waiting for its restart
            } else if (what < 30) { // kill; a new one later
                kill_producer(r, i);
                r->restart_at[i] = now + rnd(r, 0, 600);
                r->producer_kills++;
            } else if (what < 75) { // freeze, sometimes beyond --producer-timeout (2 s)
                if (!p->frozen) {
                    kill(p->child.pid, SIGSTOP);
                    p->frozen = 1;
                    p->thaw_at = now + (rnd(r, 0, 9) == 0 ? rnd(r, 2100, 3000) : rnd(r, 20, 1200));
                    r->producer_freezes++;
                }
            } else { // replace at once
                kill_producer(r, i);
                start_producer(r, i);
                r->producer_replacements++;
            }
        }
        stoker_sleep_ms(3, NULL);
    }
}

// Kills the producers and lets the consumer drain the broker (bounded); then the final
// status, consumer and broker stopped.
static void
drain_phase(run_state *r)
{
    // Every producer that lived through the broker's death pushes its retained examples to the
    // new broker before the drain kills it: thaw them all, then wait (bounded) until the new
    // broker knows each one's session beyond what the killed broker held of it.
    for (int i = 0; i < r->n_producers; i++) {
        if (r->producers[i].child.pid > 0 && r->producers[i].frozen) {
            kill(r->producers[i].child.pid, SIGCONT);
            r->producers[i].frozen = 0;
        }
    }
    for (uint64_t deadline = stoker_now_ms() + 15000; r->held != NULL;) {
        stoker_status *st = fetch_status(r);
        const char *behind = NULL;
        for (uint32_t i = 0; i < r->held->n_producers && behind == NULL; i++) {
            const stoker_producer_info *p = &r->held->producers[i];
            if (was_killed(r, p->name))
                continue;
            const stoker_producer_info *now = NULL;
            for (uint32_t j = 0; j < st->n_producers; j++)
                now = st->producers[j].session == p->session ? &st->producers[j] : now;
            if (now == NULL || now->next_seq < p->next_seq)
                behind = p->name;
        }
        stoker_status_destroy(st);
        if (behind == NULL)
            break;
        if (stoker_now_ms() > deadline) {
            harness_fail(
                "run %d: producer '%s' lived on but did not reach the new broker beyond what the "
                "killed one held within 15 s",
                r->index, behind);
            break;
        }
        reap_unexpected(r);
        stoker_sleep_ms(20, NULL);
    }
    for (int i = 0; i < r->n_producers; i++) {
        kill_proc(&r->producers[i]);
        r->restart_at[i] = 0;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t deadline = stoker_now_ms() + 8000;
        int drained = 0;
        while (!drained && stoker_now_ms() < deadline) {
            reap_unexpected(r);
            stoker_status *st = fetch_status(r);
            drained = st->counters.queued == 0 && st->counters.in_flight == 0;
            stoker_status_destroy(st);
            if (!drained)
                stoker_sleep_ms(20, NULL);
        }
        if (drained)
            break;
        if (attempt == 1) {
            harness_fail(
                "run %d: the broker was not drained (queued or in flight) within 8 s, twice",
                r->index);
            break;
        }
        // A lease whose acknowledgement failed on a live connection stays in flight until its
        // trainer leaves: a new consumer takes over.
        printf("chaos: run %d: not drained in 8 s; replacing the consumer\n", r->index);
        stop_proc(&r->consumer, 5000);
        start_consumer(r);
    }
    if (!stop_proc(&r->consumer, 5000))
        harness_fail("run %d: the consumer did not exit within 5 s of SIGTERM", r->index);
    r->final = fetch_status(r);
    uint64_t by_reference = 0;
    for (uint32_t i = 0; i < r->final->n_producers; i++)
        by_reference += r->final->producers[i].pushes_shm;
    if (r->n_producers >= 2 && by_reference == 0 && var_bin == NULL)
        harness_fail("run %d: no push came by reference to the last broker, yet odd producer "
                     "slots push so",
                     r->index);
    printf("chaos: run %d: %" PRIu64 " pushes by reference to the last broker\n", r->index,
           by_reference);
    if (!stop_proc(&r->broker, 5000))
        harness_fail("run %d: the broker did not exit within 5 s of SIGTERM", r->index);
}

// ---- the check -----------------------------------------------------------------------------

typedef struct idrec {
    uint32_t n[3];   // deliveries per broker lifetime (1, 2)
    int32_t last[3]; // batch of the latest delivery per lifetime, -1 none
} idrec;

typedef struct sess {
    uint64_t session;
    idrec *v;
    uint64_t cap;
} sess;

typedef struct brun {
    uint64_t session, first, count;
} brun;

typedef struct batch {
    uint64_t lease;
    int consumer;
    int client;   // which trainer client of that consumer process (a new one after an error)
    int lifetime; // 1, 2, or 0 until classified
    char ack;     // 'A', 'N' or 0
    int n_runs;
    brun *runs;
} batch;

typedef struct check {
    sess sessions[MAX_SESSIONS];
    int n_sessions;
    batch *batches;
    size_t n_batches, cap_batches;
    uint64_t dup_seen; // trainer clients' duplicate counters, summed
    int clients;       // trainer clients the consumer process made so far ("C" lines)
} check;

static sess *
find_sess(check *c, uint64_t session, int create)
{
    for (int i = 0; i < c->n_sessions; i++) {
        if (c->sessions[i].session == session)
            return &c->sessions[i];
    }
    if (!create)
        return NULL;
    if (c->n_sessions == MAX_SESSIONS)
        harness_die("more than %d producer sessions in one run", MAX_SESSIONS);
    sess *s = &c->sessions[c->n_sessions++];
    memset(s, 0, sizeof(*s));
    s->session = session;
    return s;
}

static idrec *
find_id(check *c, uint64_t session, uint64_t seq, int create)
{
    sess *s = find_sess(c, session, create);
    if (s == NULL)
        return NULL;
    if (seq >= s->cap) {
        if (!create)
            return NULL;
        if (seq >= MAX_SEQ)
            harness_die("implausible seq %" PRIu64 " of session %016" PRIx64, seq, session);
        uint64_t cap = s->cap ? s->cap : 1024;
        while (cap <= seq)
            cap *= 2;
        s->v = realloc(s->v, cap * sizeof(idrec));
        for (uint64_t i = s->cap; i < cap; i++)
            s->v[i] = (idrec){.last = {-1, -1, -1}};
        s->cap = cap;
    }
    return &s->v[seq];
}

// Parses one consumer's log into batches. Lifetime: 1 for a consumer that ended before the
// broker's kill and for lines before the "K" marker, otherwise classified later by lease.
static void
parse_log(check *c, run_state *r, int ci)
{
    size_t len = 0;
    char *text = testdir_read(r->consumers[ci].log, &len);
    if (text == NULL)
        return; // killed before it opened its log
    int before_kill = ci < r->marker_consumer;
    int at_kill = ci == r->marker_consumer;
    char *save = NULL;
    size_t first_batch = c->n_batches;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (line + strlen(line) == text + len)
            break; // a last line without its newline (cut by a kill): not written
        if (line[0] == 'K') {
            at_kill = 0;
            continue;
        }
        if (line[0] == 'D') {
            c->dup_seen += strtoull(line + 2, NULL, 10);
            continue;
        }
        if (line[0] == 'M') { // --var: an example that differs from what its producer made
            harness_fail("run %d consumer %d: lease and seq '%s': the example's values are not "
                         "what its producer made",
                         r->index, ci, line + 2);
            continue;
        }
        if (line[0] == 'C') { // a new trainer client: its identity filter starts empty
            c->clients++;
            continue;
        }
        if (line[0] == 'V') { // the path of the batch just logged
            consumer_rec *cr = &r->consumers[ci];
            line[2] == 's' ? cr->via_shm++ : cr->via_socket++;
            continue;
        }
        if (line[0] == 'P') { // a client's summary: its delivery path
            // A client that got no batch has no path to report (one that met a new broker before
            // any producer did, answered NO_PRODUCERS at once, and the consumer connects again).
            unsigned long long via_shm = 0, via_socket = 0;
            const char *nums = strchr(line + 2, ' ');
            if (nums != NULL && sscanf(nums, "%llu %llu", &via_shm, &via_socket) == 2 &&
                via_shm + via_socket == 0)
                continue;
            r->consumers[ci].summaries++;
            r->consumers[ci].summaries_shm += strncmp(line + 2, "shm ", 4) == 0;
            continue;
        }
        if (line[0] == 'A' || line[0] == 'N') {
            uint64_t lease = strtoull(line + 2, NULL, 10);
            size_t i = c->n_batches;
            while (i > first_batch && c->batches[i - 1].lease != lease)
                i--;
            if (i == first_batch)
                harness_fail("run %d consumer %d: '%c %" PRIu64 "' without its batch", r->index, ci,
                             line[0], lease);
            else
                c->batches[i - 1].ack = line[0];
            continue;
        }
        if (line[0] != 'B')
            continue;
        if (c->n_batches == c->cap_batches) {
            c->cap_batches = c->cap_batches ? 2 * c->cap_batches : 4096;
            c->batches = realloc(c->batches, c->cap_batches * sizeof(batch));
        }
        batch *b = &c->batches[c->n_batches++];
        memset(b, 0, sizeof(*b));
        b->consumer = ci;
        b->client = c->clients;
        b->lifetime = before_kill || at_kill ? 1 : 0;
        char *p = line + 2, *end;
        b->lease = strtoull(p, &end, 10);
        p = end;
        while (*p == ' ') {
            brun run;
            run.session = strtoull(p + 1, &end, 16);
            if (*end != ':')
                harness_die("run %d consumer %d: bad line '%s'", r->index, ci, line);
            run.first = strtoull(end + 1, &end, 10);
            if (*end != ':')
                harness_die("run %d consumer %d: bad line '%s'", r->index, ci, line);
            run.count = strtoull(end + 1, &end, 10);
            p = end;
            b->runs = realloc(b->runs, (size_t)(b->n_runs + 1) * sizeof(brun));
            b->runs[b->n_runs++] = run;
        }
    }
    free(text);
}

typedef struct producer_range {
    uint64_t first, end; // [first, end) accepted by that broker
} producer_range;

// The first seq of a session a broker took: it accepted [first_seq(p), next_seq) less the seqs
// its producer's hellos skipped (trained before: a producer pushing its retention again to a
// restarted broker jumps over what a trainer reported trained; the broker counts them `skipped`).
static uint64_t
first_seq(const stoker_producer_info *p)
{
    return p->next_seq - p->accepted - p->skipped;
}

// A broker's entry for a session in its status (NULL: none).
static const stoker_producer_info *
status_session(const stoker_status *st, uint64_t session)
{
    for (uint32_t i = 0; i < st->n_producers; i++) {
        if (st->producers[i].session == session)
            return &st->producers[i];
    }
    return NULL;
}

static int
accepted_by(const stoker_status *st, uint64_t session, uint64_t seq)
{
    const stoker_producer_info *p = status_session(st, session);
    return p != NULL && seq >= first_seq(p) && seq < p->next_seq;
}

typedef struct totals {
    uint64_t examples_trained, batches, redelivered_killed, redelivered_nack, ack_refused_batches;
    uint64_t held, trained_unacked, repushed, lost, lost_by_killed, twice_across, dup_seen;
    uint64_t broker_redelivered;
    int producer_kills, producer_freezes, producer_replacements, producer_starts;
    int consumer_kills, broker_kills;
    uint64_t via_shm, via_socket_only; // batches of shm consumers via shm, of STOKER_SHM=0 ones
} totals;

static int64_t
discrepancy(const stoker_counters *k)
{
    return (int64_t)(k->produced - k->acknowledged - k->queued - k->in_flight);
}

// Each consumer took the path it was started for: with STOKER_SHM=0 never shared memory, its
// summaries "socket"; by default shared memory for most batches (a pull in flight while the
// broker was replaced comes as bytes: its secret was the old arena's), its summaries "shm".
static void
check_paths(run_state *r, totals *tot)
{
    uint64_t shm_batches[2] = {0, 0}, socket_batches[2] = {0, 0};
    for (int ci = 0; ci < r->n_consumers; ci++) {
        const consumer_rec *cr = &r->consumers[ci];
        shm_batches[cr->shm] += cr->via_shm;
        socket_batches[cr->shm] += cr->via_socket;
        if (!cr->shm && (cr->via_shm > 0 || cr->summaries_shm > 0))
            harness_fail("run %d: consumer %d, started with STOKER_SHM=0, had %" PRIu64 " batches "
                         "through shared memory (%d summaries said shm)",
                         r->index, ci, cr->via_shm, cr->summaries_shm);
        if (cr->shm && cr->via_shm + cr->via_socket >= 10 && cr->via_shm <= cr->via_socket)
            harness_fail("run %d: consumer %d, on the broker's host, had %" PRIu64
                         " batches through "
                         "shared memory and %" PRIu64 " over the socket",
                         r->index, ci, cr->via_shm, cr->via_socket);
        if (cr->shm && cr->via_shm > 0 && cr->summaries_shm < cr->summaries - 1)
            harness_fail("run %d: consumer %d: %d of its %d clients' summaries said shm", r->index,
                         ci, cr->summaries_shm, cr->summaries);
    }
    printf("chaos: run %d: delivery: shm consumers %" PRIu64 " batches through shared memory, "
           "%" PRIu64 " as bytes; STOKER_SHM=0 consumers %" PRIu64 " as bytes\n",
           r->index, shm_batches[1], socket_batches[1], socket_batches[0]);
    tot->via_shm += shm_batches[1];
    tot->via_socket_only += socket_batches[0];
}

static void
check_run(run_state *r, totals *tot)
{
    check *c = calloc(1, sizeof(*c));
    for (int ci = 0; ci < r->n_consumers; ci++)
        parse_log(c, r, ci);

    // Lifetime of each batch: the killed broker's leases lie near those seen before the kill.
    uint64_t min1 = UINT64_MAX, max1 = 0;
    for (size_t i = 0; i < c->n_batches; i++) {
        if (c->batches[i].lifetime == 1) {
            min1 = c->batches[i].lease < min1 ? c->batches[i].lease : min1;
            max1 = c->batches[i].lease > max1 ? c->batches[i].lease : max1;
        }
    }
    uint64_t min2 = UINT64_MAX, max2 = 0;
    for (size_t i = 0; i < c->n_batches; i++) {
        batch *b = &c->batches[i];
        if (b->lifetime == 0) {
            b->lifetime =
                min1 != UINT64_MAX && b->lease >= min1 && b->lease <= max1 + LEASE_NEAR ? 1 : 2;
            if (b->lifetime == 1 && b->consumer > r->marker_consumer)
                harness_fail(
                    "run %d: consumer %d, started after the broker's kill, has lease %" PRIu64
                    " of the killed broker",
                    r->index, b->consumer, b->lease);
        }
        if (b->lifetime == 2) {
            min2 = b->lease < min2 ? b->lease : min2;
            max2 = b->lease > max2 ? b->lease : max2;
        }
    }
    if (min2 != UINT64_MAX && max2 - min2 > LEASE_NEAR)
        harness_fail("run %d: the surviving broker's leases span %" PRIu64 " ids", r->index,
                     max2 - min2);
    if (max1 - min1 > LEASE_NEAR && min1 != UINT64_MAX)
        harness_fail("run %d: the killed broker's leases span %" PRIu64 " ids", r->index,
                     max1 - min1);

    // Deliveries in order (consumers ran one after the other, lines in order).
    uint64_t redel_killed = 0, redel_nack = 0, nacks = 0, examples = 0;
    int reported = 0;
    for (size_t bi = 0; bi < c->n_batches; bi++) {
        batch *b = &c->batches[bi];
        int l = b->lifetime;
        nacks += b->ack == 'N';
        for (int k = 0; k < b->n_runs; k++) {
            for (uint64_t q = b->runs[k].first; q < b->runs[k].first + b->runs[k].count; q++) {
                idrec *id = find_id(c, b->runs[k].session, q, 1);
                examples++;
                if (id->n[l] > 0) {
                    const batch *pb = &c->batches[id->last[l]];
                    const char *why = NULL;
                    if (id->last[l] == (int32_t)bi)
                        why = "twice in one batch";
                    else if (pb->ack == 'A')
                        why = "delivered again after its acknowledgement";
                    else if (pb->ack == 'N')
                        redel_nack++;
                    else if (r->consumers[pb->consumer].killed)
                        redel_killed++;
                    else
                        why = "delivered again though its earlier batch was neither "
                              "acknowledged, refused, nor held by a killed consumer";
                    if (why != NULL && reported++ < 10)
                        harness_fail(
                            "run %d: identity %016" PRIx64 ":%" PRIu64 " %s (broker lifetime "
                            "%d; leases %" PRIu64 " consumer %d, then %" PRIu64 " consumer %d)",
                            r->index, b->runs[k].session, q, why, l, pb->lease, pb->consumer,
                            b->lease, b->consumer);
                }
                id->n[l]++;
                id->last[l] = (int32_t)bi;
            }
        }
    }

    // Distinct identities trained / acknowledged per lifetime; against what each broker accepted.
    const stoker_status *s1 = r->held, *s2 = r->final;
    uint64_t trained[3] = {0, 0, 0}, acked[3] = {0, 0, 0}, twice_across = 0;
    int bad1 = 0, bad2 = 0, across_reported = 0;
    for (int si = 0; si < c->n_sessions; si++) {
        sess *s = &c->sessions[si];
        for (uint64_t q = 0; q < s->cap; q++) {
            idrec *id = &s->v[q];
            for (int l = 1; l <= 2; l++) {
                if (id->n[l] == 0)
                    continue;
                trained[l]++;
                acked[l] += c->batches[id->last[l]].ack == 'A';
                const stoker_status *st = l == 1 ? s1 : s2;
                if (!accepted_by(st, s->session, q) && (l == 1 ? bad1++ : bad2++) < 5)
                    harness_fail("run %d: identity %016" PRIx64 ":%" PRIu64 " trained in broker "
                                 "lifetime %d, which never accepted it",
                                 r->index, s->session, q, l);
            }
            if (id->n[1] > 0 && id->n[2] > 0) {
                twice_across++;
                // Trained under both brokers: its producer pushed it again to the new broker
                // (the push's acknowledgement died with the broker: e.g. the producer was frozen
                // when the reply came, and nng drops a reply that arrives with the hang-up).
                // The new broker cannot know it was trained; a consumer that trained it before
                // drops it (the trainer client's identity filter), so the same trainer client
                // never trains it twice. (A consumer process that had to make a new client, after
                // the broker was gone longer than its give-up time, starts with an empty filter.)
                const batch *b1 = &c->batches[id->last[1]], *b2 = &c->batches[id->last[2]];
                if (b1->ack == 'A' && b1->consumer == b2->consumer && b1->client == b2->client &&
                    across_reported++ < 5)
                    harness_fail("run %d: identity %016" PRIx64 ":%" PRIu64
                                 " acknowledged under the "
                                 "killed broker (lease %" PRIu64 ") was trained again by the same "
                                 "consumer %d",
                                 r->index, s->session, q, b1->lease, b1->consumer);
            }
        }
    }

    // The killed broker.
    const stoker_counters *k1 = &s1->counters;
    if (discrepancy(k1) != 0)
        harness_fail("run %d: the killed broker's frozen status: discrepancy %" PRId64, r->index,
                     discrepancy(k1));
    uint64_t sum1 = 0, held = k1->queued + k1->in_flight, lost = 0, repushed = 0;
    uint64_t lost_by_killed = 0;
    for (uint32_t i = 0; i < s1->n_producers; i++) {
        const stoker_producer_info *p = &s1->producers[i];
        uint64_t lost_before = lost;
        sum1 += p->accepted;
        if (first_seq(p) != 0)
            harness_fail("run %d: killed broker: session %016" PRIx64 " accepted %" PRIu64
                         " and skipped %" PRIu64 " but next_seq %" PRIu64
                         " (a fresh session starts at 0)",
                         r->index, p->session, p->accepted, p->skipped, p->next_seq);
        for (uint64_t q = first_seq(p); q < p->next_seq; q++) {
            idrec *id = find_id(c, p->session, q, 0);
            int t1 = id != NULL && id->n[1] > 0, t2 = id != NULL && id->n[2] > 0;
            lost += !t1 && !t2;
            repushed += !t1 && t2;
        }
        // Loss is allowed only where the producer died too before it pushed its retained
        // examples to the new broker.
        if (lost > lost_before && !may_lose(r, p->name))
            harness_fail("run %d: producer '%s' (session %016" PRIx64 ") %s, yet %" PRIu64
                         " of its examples held by the killed broker were never trained",
                         r->index, p->name, p->session,
                         was_killed(r, p->name)
                             ? "was SIGKILLed only after it reached the new broker"
                             : "was never SIGKILLed",
                         lost - lost_before);
        if (may_lose(r, p->name))
            lost_by_killed += lost - lost_before;
        // A producer that lived on resumed with the next broker where its acknowledgements
        // ended: never beyond what the killed broker held.
        const stoker_producer_info *p2 = status_session(s2, p->session);
        if (p2 != NULL && first_seq(p2) > p->next_seq)
            harness_fail("run %d: session %016" PRIx64 " resumed at seq %" PRIu64
                         " with the new broker, "
                         "the killed one held only up to %" PRIu64 " (examples skipped)",
                         r->index, p->session, first_seq(p2), p->next_seq);
    }
    if (sum1 != k1->produced)
        harness_fail("run %d: killed broker: producers' accepted sum to %" PRIu64
                     ", produced %" PRIu64,
                     r->index, sum1, k1->produced);
    if (trained[1] < k1->acknowledged)
        harness_fail("run %d: killed broker acknowledged %" PRIu64
                     " examples, consumers trained only %" PRIu64,
                     r->index, k1->acknowledged, trained[1]);
    if (acked[1] > k1->acknowledged)
        harness_fail("run %d: consumers logged %" PRIu64
                     " acknowledged examples, the killed broker "
                     "counted %" PRIu64,
                     r->index, acked[1], k1->acknowledged);
    uint64_t trained_unacked = trained[1] - k1->acknowledged;
    if (lost + trained_unacked + repushed != held)
        harness_fail("run %d: the killed broker held %" PRIu64 " (queued %" PRIu64
                     " + in flight %" PRIu64 "); lost %" PRIu64 " + trained unacknowledged %" PRIu64
                     " + re-pushed %" PRIu64 " should equal it",
                     r->index, held, k1->queued, k1->in_flight, lost, trained_unacked, repushed);

    // The surviving broker, drained.
    const stoker_counters *k2 = &s2->counters;
    if (discrepancy(k2) != 0)
        harness_fail("run %d: surviving broker: discrepancy %" PRId64, r->index, discrepancy(k2));
    if (k2->queued != 0 || k2->in_flight != 0)
        harness_fail("run %d: surviving broker not drained: queued %" PRIu64 ", in flight %" PRIu64,
                     r->index, k2->queued, k2->in_flight);
    uint64_t sum2 = 0, missing2 = 0, dropped2 = 0;
    for (uint32_t i = 0; i < s2->n_producers; i++) {
        const stoker_producer_info *p = &s2->producers[i];
        sum2 += p->accepted;
        if (p->accepted + p->skipped > p->next_seq)
            harness_fail("run %d: surviving broker: session %016" PRIx64 " accepted %" PRIu64
                         " and skipped %" PRIu64 " > next_seq %" PRIu64,
                         r->index, p->session, p->accepted, p->skipped, p->next_seq);
        // Trained under the killed broker and not under this one: dropped as seen before by a
        // trainer client, or by the broker (a trainer reported it), or skipped by the producer.
        uint64_t before = 0;
        for (uint64_t q = first_seq(p); q < p->next_seq; q++) {
            idrec *id = find_id(c, p->session, q, 0);
            if (id != NULL && id->n[2] == 0 && id->n[1] > 0) {
                before++;
            } else if (id == NULL || id->n[2] == 0) {
                if (missing2++ < 5)
                    harness_fail("run %d: identity %016" PRIx64 ":%" PRIu64 " accepted by the "
                                 "surviving broker was never delivered",
                                 r->index, p->session, q);
            }
        }
        if (before < p->skipped)
            harness_fail("run %d: surviving broker: session %016" PRIx64 " skipped %" PRIu64
                         " seqs, only %" PRIu64 " of its range were trained before",
                         r->index, p->session, p->skipped, before);
        else
            dropped2 += before - p->skipped;
    }
    if (sum2 != k2->produced)
        harness_fail("run %d: surviving broker: producers' accepted sum to %" PRIu64
                     ", produced %" PRIu64,
                     r->index, sum2, k2->produced);
    if (trained[2] + dropped2 != k2->produced || k2->acknowledged != k2->produced)
        harness_fail("run %d: surviving broker: produced %" PRIu64 ", acknowledged %" PRIu64
                     ", identities trained %" PRIu64 " + dropped as seen before %" PRIu64,
                     r->index, k2->produced, k2->acknowledged, trained[2], dropped2);
    if (acked[2] > k2->acknowledged)
        harness_fail("run %d: consumers logged %" PRIu64
                     " acknowledged examples, the surviving broker "
                     "counted %" PRIu64,
                     r->index, acked[2], k2->acknowledged);

    printf("chaos: run %d: %zu batches, %" PRIu64 " examples trained (%" PRIu64 " + %" PRIu64
           " distinct per broker); producers: %d started, %d killed, %d frozen, %d replaced; "
           "consumer killed %d, broker killed %d\n",
           r->index, c->n_batches, examples, trained[1], trained[2], r->producer_starts,
           r->producer_kills, r->producer_freezes, r->producer_replacements, r->consumer_kills,
           r->broker_kills);
    printf("chaos: run %d: redelivered to the next consumer: %" PRIu64
           " (killed before 'A') + %" PRIu64 " (ack refused/failed, %" PRIu64
           " batches); broker counted %" PRIu64 " + %" PRIu64 " redelivered\n",
           r->index, redel_killed, redel_nack, nacks, k1->redelivered, k2->redelivered);
    printf("chaos: run %d: killed broker held %" PRIu64 " (queued %" PRIu64 ", in flight %" PRIu64
           "): %" PRIu64 " trained but unacknowledged, %" PRIu64 " re-pushed to the new broker, "
           "%" PRIu64 " LOST (%" PRIu64
           " of producers SIGKILLed before pushing it again, 0 allowed of the "
           "others); trained under both brokers %" PRIu64 "; trainer-counted duplicates %" PRIu64
           "\n",
           r->index, held, k1->queued, k1->in_flight, trained_unacked, repushed, lost,
           lost_by_killed, twice_across, c->dup_seen);
    printf("chaos: run %d: surviving broker: produced %" PRIu64 " = acknowledged %" PRIu64
           ", queued %" PRIu64 ", in flight %" PRIu64 ", discrepancy %" PRId64 "\n",
           r->index, k2->produced, k2->acknowledged, k2->queued, k2->in_flight, discrepancy(k2));

    check_paths(r, tot);
    tot->batches += c->n_batches;
    tot->examples_trained += examples;
    tot->redelivered_killed += redel_killed;
    tot->redelivered_nack += redel_nack;
    tot->ack_refused_batches += nacks;
    tot->held += held;
    tot->trained_unacked += trained_unacked;
    tot->repushed += repushed;
    tot->lost += lost;
    tot->lost_by_killed += lost_by_killed;
    tot->twice_across += twice_across;
    tot->dup_seen += c->dup_seen;
    tot->broker_redelivered += k1->redelivered + k2->redelivered;

    for (int i = 0; i < c->n_sessions; i++)
        free(c->sessions[i].v);
    for (size_t i = 0; i < c->n_batches; i++)
        free(c->batches[i].runs);
    free(c->batches);
    free(c);
}

// ---- main ----------------------------------------------------------------------------------

// A port of 127.0.0.1 that was free a moment ago.
static unsigned
free_tcp_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        harness_die("no free tcp port: %s", strerror(errno));
    close(fd);
    return ntohs(sa.sin_port);
}

int
main(void)
{
    harness_init("chaos", tmpdir);
    broker_bin = getenv("STOKER_BROKER_BIN");
    producer_bin = getenv("STOKER_PRODUCER_BIN");
    consumer_bin = getenv("STOKER_CHAOS_CONSUMER_BIN");
    var_bin = getenv("STOKER_CHAOS_VAR_PRODUCER_BIN");
    if (broker_bin == NULL || producer_bin == NULL || consumer_bin == NULL) {
        printf("chaos: SKIP: STOKER_BROKER_BIN, STOKER_PRODUCER_BIN and "
               "STOKER_CHAOS_CONSUMER_BIN must be set (meson test sets them)\n");
        return 77;
    }
    uint64_t seed = harness_seed();
    uint64_t runs = harness_env_u64("STOKER_CHAOS_RUNS", 8);
    uint64_t run_ms = harness_env_u64("STOKER_CHAOS_RUN_MS", 14000);
    keep_dir = getenv("STOKER_CHAOS_KEEP") != NULL;
    if (run_ms < 2000)
        run_ms = 2000;
    printf("chaos: seed %" PRIu64 " (STOKER_CHAOS_SEED=%" PRIu64 " repeats it), %" PRIu64
           " runs of %" PRIu64 " ms\n",
           seed, seed, runs, run_ms);

    // Every run ends within run_ms + ~1 s of broker restart + 2 x 8 s of drain + stops (5 s
    // each at most); the watchdog bounds the whole test whatever happens.
    harness_watchdog((unsigned)(runs * (run_ms / 1000 + 35) + 30));

    const char *base = getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/stoker-chaos-XXXXXX", base);
    if (mkdtemp(tmpdir) == NULL)
        harness_die("mkdtemp %s: %s", tmpdir, strerror(errno));

    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    totals tot;
    memset(&tot, 0, sizeof(tot));
    int failed_runs = 0;
    for (uint64_t ri = 0; ri < runs; ri++) {
        run_state *r = calloc(1, sizeof(*r));
        r->index = (int)ri;
        r->rng = &rng;
        r->marker_consumer = -1;
        r->n_producers = (int)rnd(r, 2, MAX_PRODUCERS);
        // Even runs: a consumer slower than the producers (full queues, leases held, backpressure);
        // odd runs: a fast one (empty queues, parked pulls).
        r->train_ms = ri % 2 == 0 ? "8:30" : "0:3";
        if (getenv("STOKER_CHAOS_TCP") != NULL && strcmp(getenv("STOKER_CHAOS_TCP"), "1") == 0)
            snprintf(r->url, sizeof(r->url), "tcp://127.0.0.1:%u", free_tcp_port());
        else
            snprintf(r->url, sizeof(r->url), "ipc://%s/broker%d.sock", tmpdir, r->index);
        snprintf(r->broker_log, sizeof(r->broker_log), "%s/run%d-broker.log", tmpdir, r->index);
        harness_run_failed = 0;
        uint64_t t0 = stoker_now_ms();
        start_broker(r);
        for (int i = 0; i < r->n_producers; i++)
            start_producer(r, i);
        start_consumer(r);
        chaos_phase(r, run_ms);
        drain_phase(r);
        for (int i = 0; i < r->n_producers; i++)
            kill_proc(&r->producers[i]);
        kill_proc(&r->consumer);
        kill_proc(&r->broker);
        check_run(r, &tot);
        printf("chaos: run %d: %s in %.1f s (%d producers, consumer trains %s ms per batch)\n",
               r->index, harness_run_failed ? "FAILED" : "ok",
               (double)(stoker_now_ms() - t0) / 1000.0, r->n_producers, r->train_ms);
        failed_runs += harness_run_failed;
        tot.producer_kills += r->producer_kills;
        tot.producer_freezes += r->producer_freezes;
        tot.producer_replacements += r->producer_replacements;
        tot.producer_starts += r->producer_starts;
        tot.consumer_kills += r->consumer_kills;
        tot.broker_kills += r->broker_kills;
        stoker_status_destroy(r->held);
        stoker_status_destroy(r->final);
        free(r);
    }
    printf("chaos: seed %" PRIu64 ": %" PRIu64 " runs, %d failed; %" PRIu64 " batches, %" PRIu64
           " examples trained; producers started %d, killed %d, frozen %d, replaced %d; "
           "consumers killed %d; brokers killed %d\n",
           seed, runs, failed_runs, tot.batches, tot.examples_trained, tot.producer_starts,
           tot.producer_kills, tot.producer_freezes, tot.producer_replacements, tot.consumer_kills,
           tot.broker_kills);
    printf("chaos: redelivered identities: %" PRIu64 " from killed consumers' unacknowledged "
           "batches, %" PRIu64 " after a refused/failed ack (%" PRIu64 " batches); broker-counted "
           "redeliveries %" PRIu64 "\n",
           tot.redelivered_killed, tot.redelivered_nack, tot.ack_refused_batches,
           tot.broker_redelivered);
    printf("chaos: killed brokers held %" PRIu64 ": trained but unacknowledged %" PRIu64
           ", re-pushed %" PRIu64 ", lost %" PRIu64 " (%" PRIu64
           " of producers SIGKILLed before pushing it "
           "again); trained under both brokers %" PRIu64 "; trainer-counted duplicates %" PRIu64
           "\n",
           tot.held, tot.trained_unacked, tot.repushed, tot.lost, tot.lost_by_killed,
           tot.twice_across, tot.dup_seen);
    printf("chaos: delivery: %" PRIu64 " batches through shared memory (default consumers), "
           "%" PRIu64 " as bytes to STOKER_SHM=0 consumers\n",
           tot.via_shm, tot.via_socket_only);
    if (runs >= 2 && (tot.via_shm == 0 || tot.via_socket_only == 0)) {
        printf("chaos: FAIL: a delivery path was never taken (each run starts with the other)\n");
        failed_runs++;
    }
    if (failed_runs == 0 && !keep_dir) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            printf("chaos: could not remove %s\n", tmpdir);
    } else {
        printf("chaos: logs kept in %s\n", tmpdir);
    }
    printf("chaos: %s\n", failed_runs == 0 ? "PASS" : "FAIL");
    return failed_runs == 0 ? 0 : 1;
}
