// Chaos for group commit: stoker-trainer ranks of one group checkpoint together
// (--checkpoint, every rank its own file) while producers are frozen at random moments; every rank
// is SIGKILLed at a random moment after a checkpoint, and the group is started again from the
// checkpoints at a smaller world size, then killed again and started at a larger one (sizes drawn):
// a rank resumes from its own file, a new rank from rank 0's, and the files of the ranks that are
// gone go to rank 0 with --resume-also until it has written a checkpoint of its own. The third run
// trains to the supply's end. From each rank's identity log, cut at its checkpoint (less the one it
// resumed from), the lineage trains each example at most once, and what it never trained is what
// stays queued. The moments and world sizes come from a printed seed (STOKER_CHAOS_SEED repeats
// it). Runs alone, bounded (about 30 s here); a plain program (exit 0 / 1), no criterion.
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "proc.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/client.h"
#include "stoker/status.h"
#include "testdir.h"

#define RUNS      3
#define MAX_RANKS 4
#define PRODUCERS 2
#define PER       "1500"
#define PER_N     1500

static uint64_t rng_state;

// The identities of the lineage: (session, seq) pairs.
typedef struct ids {
    uint64_t (*v)[2];
    size_t n, cap;
} ids;

static void
ids_add(ids *s, uint64_t session, uint64_t seq)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        if ((s->v = realloc(s->v, s->cap * sizeof(*s->v))) == NULL)
            proc_fail("out of memory");
    }
    s->v[s->n][0] = session;
    s->v[s->n++][1] = seq;
}

static int
ids_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : x[1] != y[1] ? (x[1] < y[1] ? -1 : 1) : 0;
}

// Sorts s and returns how many of its entries repeat an earlier one.
static size_t
ids_duplicates(ids *s)
{
    qsort(s->v, s->n, sizeof(*s->v), ids_cmp);
    size_t d = 0;
    for (size_t i = 1; i < s->n; i++)
        d += ids_cmp(s->v[i], s->v[i - 1]) == 0;
    return d;
}

static void
die_hook(const char *msg)
{
    fprintf(stderr, "chaos-group-resume: FAIL: %s\n", msg);
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

// The position of the checkpoint at path; *ok 0 when there is none (yet) to read.
static checkpoint_position
position(const char *path, int *ok)
{
    checkpoint_position pos = {0};
    checkpoint *ck = NULL;
    char err[512];
    *ok = testdir_exists(path) && checkpoint_load(path, &ck, err, sizeof(err)) == STOKER_OK;
    if (*ok)
        pos = *checkpoint_position_of(ck);
    checkpoint_destroy(ck);
    return pos;
}

// Adds the first n examples of the identity log at path (lines "SESSION FIRST COUNT").
static void
take_log(ids *lineage, const char *path, uint64_t n)
{
    char *text = testdir_read(path, NULL);
    if (text == NULL)
        proc_fail("no identity log %s", path);
    uint64_t taken = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL && taken < n;
         line = strtok_r(NULL, "\n", &save)) {
        unsigned long long session, first;
        unsigned count;
        if (sscanf(line, "%llx %llu %u", &session, &first, &count) != 3)
            proc_fail("bad identity log line '%s' in %s", line, path);
        for (unsigned i = 0; i < count && taken < n; i++, taken++)
            ids_add(lineage, session, first + i);
    }
    free(text);
    if (taken != n)
        proc_fail("%s logs %" PRIu64 " examples, its checkpoint holds %" PRIu64, path, taken, n);
}

int
main(void)
{
    proc_set_fail(die_hook);
    const char *seed_env = getenv("STOKER_CHAOS_SEED");
    uint64_t seed = seed_env != NULL ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
    rng_state = seed;
    printf("chaos-group-resume: seed %llu (STOKER_CHAOS_SEED=%llu repeats it)\n",
           (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
    testdir_create("stoker-chaos-resume-");
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_io io = {.files = 1};
    proc_child *broker = proc_broker_start(url, PROC_ARGS("--queue-depth", "64"), &io);
    proc_child *prod[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "p%d", i);
        prod[i] =
            proc_producer_start(url, name,
                                PROC_ARGS("--max-examples", PER, "--delay", "0.0005:0.002",
                                          "--chunk", "3", "--retain", "2048", "--linger", "60"),
                                &io);
    }
    char ck[MAX_RANKS][320], logs[RUNS][MAX_RANKS][320], ranks[MAX_RANKS][8], worlds[RUNS][8];
    for (int r = 0; r < MAX_RANKS; r++) {
        char name[64];
        snprintf(name, sizeof(name), "rank%d.ckpt", r);
        snprintf(ck[r], sizeof(ck[r]), "%s", testdir_file(name));
        snprintf(ranks[r], sizeof(ranks[r]), "%d", r);
        for (int run = 0; run < RUNS; run++) {
            snprintf(name, sizeof(name), "ids-%d-%d", run, r);
            snprintf(logs[run][r], sizeof(logs[run][r]), "%s", testdir_file(name));
        }
    }
    _Static_assert(RUNS == 3 && MAX_RANKS >= 3, "the worlds drawn below: shrink, then grow");
    int world[RUNS];
    world[0] = (int)rnd(3, MAX_RANKS);
    world[1] = (int)rnd(2, (uint64_t)world[0] - 1);
    world[2] = (int)rnd((uint64_t)world[1] + 1, MAX_RANKS);
    // The files of ranks that are gone, adopted by rank 0 until it has saved a checkpoint.
    char gone[RUNS * MAX_RANKS][320], adopt[RUNS * MAX_RANKS * 321];
    int n_gone = 0;
    checkpoint_position from[RUNS][MAX_RANKS] = {{{0}}}, at[RUNS][MAX_RANKS] = {{{0}}};
    for (int run = 0; run < RUNS; run++) {
        int n = world[run];
        snprintf(worlds[run], sizeof(worlds[run]), "%d", n);
        proc_child *t[MAX_RANKS];
        for (int r = n; run > 0 && r < MAX_RANKS; r++) {
            if (!testdir_exists(ck[r]))
                continue;
            char name[64];
            snprintf(name, sizeof(name), "rank%d-gone-%d.ckpt", r, run);
            snprintf(gone[n_gone], sizeof(gone[n_gone]), "%s", testdir_file(name));
            if (rename(ck[r], gone[n_gone]) != 0)
                proc_fail("cannot move %s aside", ck[r]);
            n_gone++;
        }
        adopt[0] = '\0';
        for (int i = 0; i < n_gone; i++)
            snprintf(adopt + strlen(adopt), sizeof(adopt) - strlen(adopt), "%s%s", i ? "," : "",
                     gone[i]);
        for (int r = 0; r < n; r++) {
            // A rank resumes from its own checkpoint, a new one from rank 0's.
            const char *resume = NULL;
            int ok = 1;
            if (run > 0)
                resume = testdir_exists(ck[r]) ? ck[r] : ck[0];
            if (resume != NULL)
                from[run][r] = position(resume, &ok);
            if (!ok)
                proc_fail("no checkpoint to resume rank %d from", r);
            if (resume != NULL && resume != ck[r]) // its own file starts as rank 0's lineage
                at[run][r] = from[run][r];
            const char *a[40] = {"--broker",
                                 url,
                                 "--batch-size",
                                 "4",
                                 "--round-length",
                                 "20",
                                 "--rounds",
                                 "1000",
                                 "--device",
                                 "cpu",
                                 "--stall-timeout",
                                 "20",
                                 "--progress",
                                 "off",
                                 "--log-level",
                                 "error",
                                 "--group",
                                 "g",
                                 "--rank",
                                 ranks[r],
                                 "--world",
                                 worlds[run],
                                 "--checkpoint",
                                 ck[r],
                                 "--checkpoint-every",
                                 "1",
                                 "--identity-log",
                                 logs[run][r]};
            int k = 28;
            if (resume != NULL) {
                a[k++] = "--resume";
                a[k++] = resume;
            }
            if (r == 0 && n_gone > 0) {
                a[k++] = "--resume-also";
                a[k++] = adopt;
            }
            a[k] = NULL;
            char what[32];
            snprintf(what, sizeof(what), "rank%d-%d", r, run);
            t[r] = proc_start_bin(what, "STOKER_TRAINER_BIN", a, &io);
        }
        if (run < RUNS - 1) {
            // Producers frozen now and then until rank 0's checkpoint passes a drawn mark; then
            // every rank dies at once, a drawn moment later.
            uint64_t past = from[run][0].examples + rnd(60, 200);
            uint64_t deadline = stoker_now_ms() + 60000;
            for (;;) {
                int ok;
                checkpoint_position pos = position(ck[0], &ok);
                if (ok && pos.examples > past)
                    break;
                if (stoker_now_ms() > deadline)
                    proc_fail("run %d: no checkpoint of rank 0 past %" PRIu64 " in 60 s", run,
                              past);
                for (int r = 0; r < n; r++)
                    if (proc_wait(t[r], 0))
                        proc_fail("run %d: rank %d exited (%d) before it was killed", run, r,
                                  proc_exit_code(t[r]));
                if (rnd(0, 9) == 0) {
                    int i = (int)rnd(0, PRODUCERS - 1);
                    proc_signal(prod[i], SIGSTOP);
                    stoker_sleep_ms((uint32_t)rnd(20, 200), NULL);
                    proc_signal(prod[i], SIGCONT);
                }
                stoker_sleep_ms(10, NULL);
            }
            stoker_sleep_ms((uint32_t)rnd(0, 60), NULL);
            for (int r = 0; r < n; r++)
                proc_signal(t[r], SIGKILL);
            for (int r = 0; r < n; r++)
                if (!proc_wait(t[r], 5000))
                    proc_fail("rank %d did not die of SIGKILL", r);
        } else {
            for (int r = 0; r < n; r++)
                proc_assert_exit(t[r], 3, 90000); // the supply's end
        }
        for (int r = 0; r < n; r++) {
            int ok;
            checkpoint_position pos = position(ck[r], &ok);
            if (ok) // a rank killed before its first checkpoint trained nothing that counts
                at[run][r] = pos;
            else
                at[run][r] = from[run][r];
        }
        if (at[run][0].batches != from[run][0].batches)
            n_gone = 0; // rank 0's own file holds what the gone ranks' files did
        printf("chaos-group-resume: run %d, %d ranks, checkpoints at steps", run, n);
        for (int r = 0; r < n; r++)
            printf(" %" PRIu64, at[run][r].batches);
        printf("\n");
        fflush(stdout);
    }
    ids lineage = {0};
    for (int run = 0; run < RUNS; run++)
        for (int r = 0; r < world[run]; r++)
            take_log(&lineage, logs[run][r], at[run][r].examples - from[run][r].examples);
    size_t twice = ids_duplicates(&lineage);
    stoker_status *st = NULL;
    char err[256] = "";
    if (stoker_status_fetch(url, NULL, 2000, &st, err, sizeof(err)) != STOKER_OK)
        proc_fail("status: %s", err);
    uint64_t queued = st->counters.queued;
    stoker_status_destroy(st);
    size_t trained = lineage.n - twice;
    free(lineage.v);
    printf("chaos-group-resume: worlds %d, %d, %d; %zu examples in the lineage, %zu twice, "
           "%" PRIu64 " queued\n",
           world[0], world[1], world[2], trained, twice, queued);
    if (twice != 0)
        proc_fail("%zu examples trained twice in the lineage", twice);
    if (trained + queued != (uint64_t)PRODUCERS * PER_N)
        proc_fail("%zu trained in the lineage and %" PRIu64 " queued of %d", trained, queued,
                  PRODUCERS * PER_N);
    for (int i = 0; i < PRODUCERS; i++)
        proc_kill(prod[i]);
    proc_broker_stop(broker);
    proc_kill_all();
    testdir_remove();
    printf("1 passed, 0 failed\n");
    return 0;
}
