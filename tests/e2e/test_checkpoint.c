// stoker-trainer's checkpoints end to end: the real trainer with --checkpoint
// SIGKILLed between checkpoints and restarted with --resume, twice: what the resumed lineage
// trained (each process's --identity-log, cut at the position of the checkpoint the next one
// resumed from) is every example produced, each once. A checkpoint of another network is refused
// with a message naming the difference; a trainer SIGKILLed while it writes checkpoints always
// leaves a whole one behind (temporary file, fsync, rename). Checkpoints are read with the
// trainer's own reader (trainer/checkpoint.c). The same over a dataset trained in epochs.
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "checkpoint.h"
#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"

TestSuite(checkpoint, .init = e2e_setup, .fini = e2e_teardown, .timeout = 150);

#define SCHEMA "input:float32[10],output:float32[1]"

// The position of the checkpoint at path, or 0 in *ok when there is none (yet) to read.
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

// Waits (at most 30 s) until the checkpoint at path is past `examples`; its position.
static checkpoint_position
wait_checkpoint_past(const char *path, uint64_t examples, proc_child *trainer)
{
    for (int waited = 0; waited < 30000; waited += 10) {
        int ok;
        checkpoint_position pos = position(path, &ok);
        if (ok && pos.examples > examples)
            return pos;
        cr_assert(!proc_wait(trainer, 0),
                  "the trainer ended (status %d) before its checkpoint "
                  "passed %" PRIu64 " examples",
                  trainer->status, examples);
        stoker_sleep_ms(10, NULL);
    }
    cr_assert_fail("no checkpoint past %" PRIu64 " examples in 30 s", examples);
    return (checkpoint_position){0};
}

static void
add_example(e2e_examples *ex, uint64_t session, uint64_t seq)
{
    if (ex->n == ex->cap) {
        ex->cap = ex->cap ? 2 * ex->cap : 1024;
        ex->v = realloc(ex->v, ex->cap * sizeof(*ex->v));
        cr_assert_not_null(ex->v);
    }
    ex->v[ex->n++] = (e2e_example){.session = session, .seq = seq};
}

// Adds to lineage the first n examples of the identity log at path (lines "SESSION FIRST COUNT").
static void
take_log(e2e_examples *lineage, const char *path, uint64_t n)
{
    char *text = testdir_read(path, NULL);
    cr_assert_not_null(text, "no identity log %s", path);
    uint64_t taken = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL && taken < n;
         line = strtok_r(NULL, "\n", &save)) {
        unsigned long long session, first;
        unsigned count;
        cr_assert_eq(sscanf(line, "%llx %llu %u", &session, &first, &count), 3,
                     "bad identity log line '%s' in %s", line, path);
        for (unsigned i = 0; i < count && taken < n; i++, taken++)
            add_example(lineage, session, first + i);
    }
    free(text);
    cr_assert_eq(taken, n, "%s logs %" PRIu64 " examples, its checkpoint holds %" PRIu64, path,
                 taken, n);
}

// The identity logs of three runs in the test's folder: STEM-0, STEM-1, STEM-2.
static void
log_paths(char logs[3][320], const char *stem)
{
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s-%d", stem, i);
        snprintf(logs[i], 320, "%s", testdir_file(name));
    }
}

// The value of "key": N in the JSON text (the first one after `after`, when given).
static uint64_t
json_u64(const char *text, const char *after, const char *key)
{
    const char *p = after != NULL ? strstr(text, after) : text;
    cr_assert_not_null(p, "'%s' not in the summary %s", after, text);
    char needle[64];
    snprintf(needle, sizeof(needle), "\"%s\": ", key);
    p = strstr(p, needle);
    cr_assert_not_null(p, "'%s' not in the summary %s", key, text);
    return strtoull(p + strlen(needle), NULL, 10);
}

Test(checkpoint, a_trainer_killed_between_checkpoints_resumes_with_each_example_once)
{
    enum { PER = 600 };
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "64"));
    const char *const pargs[] = {"--max-examples", "600", "--delay", "0.001:0.003", "--chunk", "3",
                                 "--linger",       "60",  NULL};
    proc_child *p1 = e2e_producer_start(url, "keeper-1", pargs);
    proc_child *p2 = e2e_producer_start(url, "keeper-2", pargs);
    const char *ck = testdir_file("model.ckpt");
    char logs[3][320];
    log_paths(logs, "ids");
    const char *json = testdir_file("summary.json");
    // Enough rounds for all the data: the run ends when the supply does.
    const char *common[] = {"--broker",       url,   "--batch-size",       "4",
                            "--round-length", "20",  "--rounds",           "1000",
                            "--device",       "cpu", "--stall-timeout",    "10",
                            "--checkpoint",   ck,    "--checkpoint-every", "3"};
    enum { NC = sizeof(common) / sizeof(common[0]) };

    // 1: from scratch, killed after a checkpoint past 200 examples, between two checkpoints.
    const char *a1[NC + 3];
    memcpy(a1, common, sizeof(common));
    a1[NC] = "--identity-log";
    a1[NC + 1] = logs[0];
    a1[NC + 2] = NULL;
    proc_child *t = e2e_trainer_start(a1);
    wait_checkpoint_past(ck, 200, t);
    stoker_sleep_ms(40, NULL);
    proc_signal(t, SIGKILL);
    cr_assert(proc_wait(t, 5000), "the trainer did not die of SIGKILL");
    int ok;
    checkpoint_position at1 = position(ck, &ok);
    cr_assert(ok, "no readable checkpoint after the kill");

    // 2: resumed, killed again likewise.
    const char *a2[NC + 5];
    memcpy(a2, common, sizeof(common));
    a2[NC] = "--identity-log";
    a2[NC + 1] = logs[1];
    a2[NC + 2] = "--resume";
    a2[NC + 3] = ck;
    a2[NC + 4] = NULL;
    t = e2e_trainer_start(a2);
    wait_checkpoint_past(ck, at1.examples + 200, t);
    stoker_sleep_ms(40, NULL);
    proc_signal(t, SIGKILL);
    cr_assert(proc_wait(t, 5000), "the trainer did not die of SIGKILL");
    checkpoint_position at2 = position(ck, &ok);
    cr_assert(ok, "no readable checkpoint after the second kill");

    // 3: resumed, trains to the supply's end (exit 3) and checkpoints there.
    const char *a3[NC + 7];
    memcpy(a3, common, sizeof(common));
    a3[NC] = "--identity-log";
    a3[NC + 1] = logs[2];
    a3[NC + 2] = "--resume";
    a3[NC + 3] = ck;
    a3[NC + 4] = "--json";
    a3[NC + 5] = json;
    a3[NC + 6] = NULL;
    t = e2e_trainer_start(a3);
    proc_assert_exit(t, 3, 60000);
    proc_assert_exit(p1, 0, 10000);
    proc_assert_exit(p2, 0, 10000);
    checkpoint_position at3 = position(ck, &ok);
    cr_assert(ok, "no readable checkpoint at the end");

    char *summary = testdir_read(json, NULL);
    cr_assert_not_null(summary);
    cr_assert_eq(json_u64(summary, "\"resumed_from\"", "examples"), at2.examples, "%s", summary);
    cr_assert_eq(json_u64(summary, "\"resumed_from\"", "rounds"), at2.rounds, "%s", summary);
    cr_assert_eq(json_u64(summary, NULL, "examples"), at3.examples, "%s", summary);
    cr_assert_eq(json_u64(summary, NULL, "commits_failed"), 0, "%s", summary);
    free(summary);

    e2e_examples lineage = {0};
    take_log(&lineage, logs[0], at1.examples);
    take_log(&lineage, logs[1], at2.examples - at1.examples);
    take_log(&lineage, logs[2], at3.examples - at2.examples);
    fprintf(stderr,
            "checkpoint: killed at checkpoints of %" PRIu64 " and %" PRIu64 " examples, ended at "
            "%" PRIu64 "\n",
            at1.examples, at2.examples, at3.examples);
    e2e_assert_exactly(&lineage, 2, PER);
    e2e_examples_fini(&lineage);
    h_assert_identity(url);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->counters.acknowledged, 2 * PER, "the broker counts %" PRIu64 " trained",
                 st->counters.acknowledged);
    stoker_status_destroy(st);
    proc_broker_stop(broker);
}

// Group commit with the C trainer: two ranks with --checkpoint commit together at one
// step; both are SIGKILLed right after a checkpoint and the group resumes at three ranks (ranks 0
// and 1 from their own checkpoints, rank 2 from rank 0's), the step count going on from theirs.
// From each rank's identity log, cut at its checkpoint (less where it resumed from), the lineage
// trains each example at most once, and what it never trained is what stays queued.
// Starts rank `rank` of group "g" at world size `world` (batches of 4, a checkpoint to ck every
// 20 steps, identities logged to log), resuming from resume and adopting adopt when not NULL.
static proc_child *
start_rank(const char *url, const char *rank, const char *world, const char *ck, const char *log,
           const char *resume, const char *adopt)
{
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
                         "10",
                         "--group",
                         "g",
                         "--rank",
                         rank,
                         "--world",
                         world,
                         "--checkpoint",
                         ck,
                         "--checkpoint-every",
                         "1",
                         "--identity-log",
                         log};
    int k = 24;
    if (resume != NULL) {
        a[k++] = "--resume";
        a[k++] = resume;
    }
    if (adopt != NULL) {
        a[k++] = "--resume-also";
        a[k++] = adopt;
    }
    a[k] = NULL;
    return e2e_trainer_start(a);
}

Test(checkpoint, a_group_killed_between_checkpoints_resumes_at_three_ranks_with_each_example_once)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "64"));
    const char *const pargs[] = {"--max-examples", "600", "--delay", "0.001:0.003", "--chunk", "3",
                                 "--linger",       "60",  NULL};
    proc_child *p1 = e2e_producer_start(url, "grp-1", pargs);
    proc_child *p2 = e2e_producer_start(url, "grp-2", pargs);
    char ck[3][320], logs[2][3][320];
    for (int r = 0; r < 3; r++) {
        char name[64];
        snprintf(name, sizeof(name), "rank%d.ckpt", r);
        snprintf(ck[r], sizeof(ck[r]), "%s", testdir_file(name));
        for (int run = 0; run < 2; run++) {
            snprintf(name, sizeof(name), "ids-%d-%d", run, r);
            snprintf(logs[run][r], sizeof(logs[run][r]), "%s", testdir_file(name));
        }
    }
    char ranks[3][8], world[2][8];
    for (int r = 0; r < 3; r++)
        snprintf(ranks[r], sizeof(ranks[r]), "%d", r);
    snprintf(world[0], sizeof(world[0]), "2");
    snprintf(world[1], sizeof(world[1]), "3");
    proc_child *t[3] = {0};
    checkpoint_position from[2][3] = {{{0}}}, at[2][3] = {{{0}}};
    for (int run = 0; run < 2; run++) {
        int n = run == 0 ? 2 : 3;
        for (int r = 0; r < n; r++) {
            // Rank 2 of the resumed run starts from rank 0's checkpoint; it writes its own.
            const char *resume = run == 0 ? NULL : r < 2 ? ck[r] : ck[0];
            int ok = 1;
            if (resume != NULL)
                from[run][r] = position(resume, &ok);
            cr_assert(ok, "no checkpoint to resume rank %d from", r);
            t[r] = start_rank(url, ranks[r], world[run], ck[r], logs[run][r], resume, NULL);
        }
        if (run == 0) {
            wait_checkpoint_past(ck[0], 200, t[0]);
            for (int r = 0; r < n; r++)
                proc_signal(t[r], SIGKILL);
            for (int r = 0; r < n; r++)
                cr_assert(proc_wait(t[r], 5000), "rank %d did not die of SIGKILL", r);
        } else {
            for (int r = 0; r < n; r++)
                proc_assert_exit(t[r], 3, 60000); // the supply's end
        }
        for (int r = 0; r < n; r++) {
            int ok;
            at[run][r] = position(ck[r], &ok);
            cr_assert(ok, "no readable checkpoint of rank %d after run %d", r, run);
        }
    }
    cr_assert_eq(at[1][0].batches, at[1][1].batches,
                 "the resumed ranks ended at steps %" PRIu64 " and %" PRIu64, at[1][0].batches,
                 at[1][1].batches);
    cr_assert_eq(at[1][0].batches, at[1][2].batches, "rank 2 ended at step %" PRIu64,
                 at[1][2].batches);
    cr_assert_gt(from[1][0].batches, 0, "the first run left no step in its checkpoint");
    e2e_examples lineage = {0};
    for (int run = 0; run < 2; run++)
        for (int r = 0; r < (run == 0 ? 2 : 3); r++)
            take_log(&lineage, logs[run][r], at[run][r].examples - from[run][r].examples);
    stoker_status *st = h_status(url);
    uint64_t queued = st->counters.queued;
    stoker_status_destroy(st);
    fprintf(stderr,
            "checkpoint: group of 2 killed at steps %" PRIu64 "/%" PRIu64 ", resumed at 3 ranks, "
            "ended at step %" PRIu64 "; %zu examples in the lineage, %" PRIu64 " left queued\n",
            at[0][0].batches, at[0][1].batches, at[1][0].batches, lineage.n, queued);
    cr_assert_eq(e2e_duplicates(&lineage), 0, "an example was trained twice in the lineage");
    cr_assert_eq(lineage.n + queued, 2 * 600, "%zu trained in the lineage, %" PRIu64 " queued",
                 lineage.n, queued);
    e2e_examples_fini(&lineage);
    proc_signal(p1, SIGTERM);
    proc_signal(p2, SIGTERM);
    proc_wait(p1, 10000);
    proc_wait(p2, 10000);
    proc_broker_stop(broker);
}

// The identities the checkpoint at path holds as pending (trained, maybe not committed).
static size_t
pending_examples(const char *path)
{
    checkpoint *ck = NULL;
    char err[512];
    cr_assert_eq(checkpoint_load(path, &ck, err, sizeof(err)), STOKER_OK, "%s", err);
    size_t n = 0;
    const checkpoint_runs *p = checkpoint_pending(ck);
    for (size_t i = 0; i < p->n; i++)
        n += p->v[i].count;
    checkpoint_destroy(ck);
    return n;
}

// Resuming at a smaller world. Rank 0 of three is stopped right after a checkpoint;
// ranks 1 and 2 go on to the next checkpoint, save it and commit, and the commit waits for rank 0:
// their files then hold identities trained but not committed. All are SIGKILLed and the group
// resumes at two ranks: rank 2's file is given to rank 0 with --resume-also, so what it trained
// is not delivered again.
Test(checkpoint, a_group_resumed_at_fewer_ranks_keeps_what_the_gone_ranks_checkpointed)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "64"));
    const char *const pargs[] = {"--max-examples", "600", "--delay", "0.001:0.003", "--chunk", "3",
                                 "--linger",       "60",  NULL};
    proc_child *p1 = e2e_producer_start(url, "shrink-1", pargs);
    proc_child *p2 = e2e_producer_start(url, "shrink-2", pargs);
    char ck[3][320], logs[2][3][320], ranks[3][8];
    for (int r = 0; r < 3; r++) {
        char name[64];
        snprintf(name, sizeof(name), "rank%d.ckpt", r);
        snprintf(ck[r], sizeof(ck[r]), "%s", testdir_file(name));
        snprintf(ranks[r], sizeof(ranks[r]), "%d", r);
        for (int run = 0; run < 2; run++) {
            snprintf(name, sizeof(name), "ids-%d-%d", run, r);
            snprintf(logs[run][r], sizeof(logs[run][r]), "%s", testdir_file(name));
        }
    }
    proc_child *t[3] = {0};
    checkpoint_position from[2][3] = {{{0}}}, at[2][3] = {{{0}}};
    size_t uncommitted = 0;
    for (int run = 0; run < 2; run++) {
        int n = run == 0 ? 3 : 2;
        for (int r = 0; r < n; r++) {
            const char *resume = run == 0 ? NULL : ck[r];
            int ok = 1;
            if (resume != NULL)
                from[run][r] = position(resume, &ok);
            cr_assert(ok, "no checkpoint to resume rank %d from", r);
            t[r] = start_rank(url, ranks[r], run == 0 ? "3" : "2", ck[r], logs[run][r], resume,
                              run == 1 && r == 0 ? ck[2] : NULL);
        }
        if (run == 0) {
            checkpoint_position stopped_at = wait_checkpoint_past(ck[0], 120, t[0]);
            proc_signal(t[0], SIGSTOP);
            stopped_at = position(ck[0], &(int){0});
            // Ranks 1 and 2 save the next checkpoint and wait for rank 0's commit.
            for (int waited = 0;; waited += 10) {
                int ok1, ok2;
                checkpoint_position c1 = position(ck[1], &ok1), c2 = position(ck[2], &ok2);
                if (ok1 && ok2 && c1.batches > stopped_at.batches &&
                    c2.batches > stopped_at.batches)
                    break;
                cr_assert_lt(waited, 30000,
                             "ranks 1 and 2 saved no checkpoint past rank 0's step %" PRIu64
                             " in 30 s",
                             stopped_at.batches);
                stoker_sleep_ms(10, NULL);
            }
            for (int r = 0; r < n; r++)
                proc_signal(t[r], SIGKILL);
            for (int r = 0; r < n; r++)
                cr_assert(proc_wait(t[r], 5000), "rank %d did not die of SIGKILL", r);
            uncommitted = pending_examples(ck[2]);
        } else {
            for (int r = 0; r < n; r++)
                proc_assert_exit(t[r], 3, 60000); // the supply's end
        }
        for (int r = 0; r < n; r++) {
            int ok;
            at[run][r] = position(ck[r], &ok);
            cr_assert(ok, "no readable checkpoint of rank %d after run %d", r, run);
        }
    }
    cr_assert_gt(uncommitted, 0,
                 "rank 2's checkpoint held nothing uncommitted: the test did not "
                 "make the case it is about");
    cr_assert_eq(at[1][0].batches, at[1][1].batches,
                 "the resumed ranks ended at steps %" PRIu64 " and %" PRIu64, at[1][0].batches,
                 at[1][1].batches);
    e2e_examples lineage = {0};
    for (int run = 0; run < 2; run++)
        for (int r = 0; r < (run == 0 ? 3 : 2); r++)
            take_log(&lineage, logs[run][r], at[run][r].examples - from[run][r].examples);
    stoker_status *st = h_status(url);
    uint64_t queued = st->counters.queued;
    stoker_status_destroy(st);
    fprintf(stderr,
            "checkpoint: group of 3 killed at steps %" PRIu64 "/%" PRIu64 "/%" PRIu64
            " (%zu examples of rank 2 uncommitted), resumed at 2 ranks, ended at step %" PRIu64
            "; %zu examples in the lineage, %" PRIu64 " left queued\n",
            at[0][0].batches, at[0][1].batches, at[0][2].batches, uncommitted, at[1][0].batches,
            lineage.n, queued);
    cr_assert_eq(e2e_duplicates(&lineage), 0, "an example was trained twice in the lineage");
    cr_assert_eq(lineage.n + queued, 2 * 600, "%zu trained in the lineage, %" PRIu64 " queued",
                 lineage.n, queued);
    e2e_examples_fini(&lineage);
    proc_signal(p1, SIGTERM);
    proc_signal(p2, SIGTERM);
    proc_wait(p1, 10000);
    proc_wait(p2, 10000);
    proc_broker_stop(broker);
}

// Counts, into seen[epoch * items + index], the first n examples of a dataset's identity log
// (lines "SESSION SEQ 1 EPOCH INDEX").
static void
take_items(uint8_t *seen, uint32_t epochs, uint32_t items, const char *path, uint64_t n)
{
    char *text = testdir_read(path, NULL);
    cr_assert_not_null(text, "no identity log %s", path);
    uint64_t taken = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL && taken < n;
         line = strtok_r(NULL, "\n", &save), taken++) {
        unsigned long long session, seq, index;
        unsigned count, epoch;
        cr_assert_eq(sscanf(line, "%llx %llu %u %u %llu", &session, &seq, &count, &epoch, &index),
                     5, "bad identity log line '%s' in %s", line, path);
        cr_assert(count == 1 && epoch < epochs && index < items, "line '%s' of %s", line, path);
        seen[(size_t)epoch * items + index]++;
    }
    free(text);
    cr_assert_eq(taken, n, "%s logs %" PRIu64 " examples, its checkpoint holds %" PRIu64, path,
                 taken, n);
}

// The same lineage over a dataset trained in epochs: each index once per epoch in what the
// resumed lineage trained, though the items trained after each last checkpoint were delivered
// again (and, their shards' producers being gone meanwhile or not, made again).
Test(checkpoint, a_dataset_lineage_killed_between_checkpoints_trains_each_item_once_per_epoch)
{
    enum { ITEMS = 600, EPOCHS = 3 };
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(
        url, PROC_ARGS("--dataset-size", "600", "--epochs", "3", "--shard-items", "32"));
    proc_child *p[2];
    for (int i = 0; i < 2; i++)
        p[i] = e2e_producer_start(
            url, i == 0 ? "maker-1" : "maker-2",
            PROC_ARGS("--items", "600", "--chunk", "8", "--delay", "0.002:0.004"));
    const char *ck = testdir_file("epochs.ckpt");
    char logs[3][320];
    log_paths(logs, "items");
    const char *common[] = {"--broker",       url,   "--batch-size",       "8",
                            "--round-length", "40",  "--rounds",           "1000",
                            "--device",       "cpu", "--stall-timeout",    "10",
                            "--checkpoint",   ck,    "--checkpoint-every", "2"};
    enum { NC = sizeof(common) / sizeof(common[0]) };
    checkpoint_position at[3];
    for (int run = 0; run < 3; run++) {
        const char *a[NC + 5];
        memcpy(a, common, sizeof(common));
        int n = NC;
        a[n++] = "--identity-log";
        a[n++] = logs[run];
        if (run > 0) {
            a[n++] = "--resume";
            a[n++] = ck;
        }
        a[n] = NULL;
        proc_child *t = e2e_trainer_start(a);
        if (run < 2) { // killed between two checkpoints, past 400 more examples
            wait_checkpoint_past(ck, (run == 0 ? 0 : at[0].examples) + 400, t);
            stoker_sleep_ms(30, NULL);
            proc_signal(t, SIGKILL);
            cr_assert(proc_wait(t, 5000), "the trainer did not die of SIGKILL");
        } else { // trains to the dataset's end
            proc_assert_exit(t, 3, 60000);
        }
        int ok;
        at[run] = position(ck, &ok);
        cr_assert(ok, "no readable checkpoint after run %d", run);
    }
    for (int i = 0; i < 2; i++)
        proc_assert_exit(p[i], 0, 10000);
    uint8_t *seen = calloc((size_t)EPOCHS * ITEMS, 1);
    cr_assert_not_null(seen);
    take_items(seen, EPOCHS, ITEMS, logs[0], at[0].examples);
    take_items(seen, EPOCHS, ITEMS, logs[1], at[1].examples - at[0].examples);
    take_items(seen, EPOCHS, ITEMS, logs[2], at[2].examples - at[1].examples);
    fprintf(stderr,
            "checkpoint over epochs: killed at checkpoints of %" PRIu64 " and %" PRIu64
            " examples, ended at %" PRIu64 " (%u epochs)\n",
            at[0].examples, at[1].examples, at[2].examples, at[2].epochs);
    cr_assert_eq(at[2].examples, (uint64_t)EPOCHS * ITEMS);
    cr_assert_eq(at[2].epochs, EPOCHS, "the last checkpoint says %u epochs", at[2].epochs);
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t i = 0; i < ITEMS; i++)
            cr_assert_eq(seen[(size_t)e * ITEMS + i], 1,
                         "epoch %u item %u trained %u times in the lineage", e, i,
                         seen[(size_t)e * ITEMS + i]);
    free(seen);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->epochs_done, EPOCHS);
    stoker_status_destroy(st);
    proc_broker_stop(broker);
}

// Runs the trainer with args to its end (at most 20 s); asserts exit code and that its stderr
// holds every one of the needles (NULL-terminated).
static void
refused(const char *const *args, int code, const char *const *needles)
{
    proc_child *t = e2e_trainer_start(args);
    proc_assert_exit(t, code, 20000);
    char *err = testdir_read(t->err_path, NULL);
    cr_assert_not_null(err);
    for (int i = 0; needles[i] != NULL; i++)
        cr_assert_not_null(strstr(err, needles[i]), "'%s' not in the trainer's stderr: %s",
                           needles[i], err);
    free(err);
}

Test(checkpoint, a_checkpoint_of_another_network_is_refused_naming_the_difference)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA));
    proc_child *p = e2e_producer_start(url, "source", PROC_ARGS("--delay", "0:0"));
    const char *ck = testdir_file("model.ckpt");
    const char *weights = testdir_file("weights.safetensors");
    proc_child *t = e2e_trainer_start(PROC_ARGS("--broker", url, "--rounds", "3", "--device", "cpu",
                                                "--checkpoint", ck, "--weights", weights));
    proc_assert_exit(t, 0, 20000);

    // Known before any broker: the hidden widths, the loss, the file itself (usage: exit 2).
    refused(PROC_ARGS("--broker", url, "--hidden", "8", "--resume", ck), 2,
            PROC_ARGS("hidden layers 16", "--hidden is 8", "--hidden 16"));
    refused(PROC_ARGS("--broker", url, "--classes", "3", "--resume", ck), 2,
            PROC_ARGS("trained with MSE", "--classes 3"));
    refused(PROC_ARGS("--broker", url, "--resume", weights), 2,
            PROC_ARGS("not a stoker-trainer checkpoint", "stoker.checkpoint"));
    refused(PROC_ARGS("--broker", url, "--resume", testdir_file("nothing.ckpt")), 2,
            PROC_ARGS("--resume", "nothing.ckpt"));
    // Known from the broker's schema: the input size (an error of the run: exit 1).
    char url6[256];
    testdir_ipc_url(url6, sizeof(url6), "broker6");
    proc_child *broker6 =
        e2e_broker_start(url6, PROC_ARGS("--schema", "input:float32[6],output:float32[1]"));
    refused(PROC_ARGS("--broker", url6, "--resume", ck, "--stall-timeout", "2"), 1,
            PROC_ARGS("layers.0.weight is [16, 10] in the checkpoint, [16, 6] in this network"));
    proc_broker_stop(broker6);
    proc_stop(p, 5000);
    proc_broker_stop(broker);
}

// Temporary files a checkpoint write left beside path (a kill during the write).
static int
leftovers(const char *dir, const char *base)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    size_t len = strlen(base);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, base, len) == 0 && strstr(e->d_name + len, ".tmp.") != NULL;
    closedir(d);
    return n;
}

Test(checkpoint, a_kill_while_writing_leaves_the_previous_checkpoint_whole)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, NULL);
    proc_child *p = e2e_producer_start(url, "source", PROC_ARGS("--delay", "0:0", "--chunk", "8"));
    const char *ck = testdir_file("big.ckpt");
    // ~0.8 MB per checkpoint, one per batch: the trainer spends most of its time writing them.
    const char *const args[] = {"--broker",
                                url,
                                "--hidden",
                                "256,256",
                                "--batch-size",
                                "8",
                                "--round-length",
                                "8",
                                "--rounds",
                                "1000000",
                                "--device",
                                "cpu",
                                "--checkpoint",
                                ck,
                                "--checkpoint-every",
                                "1",
                                "--resume",
                                ck,
                                NULL};
    enum { N_ARGS = sizeof(args) / sizeof(args[0]) };
    const char *first[N_ARGS];
    memcpy(first, args, sizeof(args));
    first[N_ARGS - 3] = NULL; // no --resume before there is a checkpoint
    uint64_t last = 0;
    for (int kill_no = 0; kill_no < 8; kill_no++) {
        proc_child *t = e2e_trainer_start(kill_no == 0 ? first : args);
        wait_checkpoint_past(ck, last, t);
        stoker_sleep_ms(20 + 13 * kill_no, NULL);
        proc_signal(t, SIGKILL);
        cr_assert(proc_wait(t, 5000), "the trainer did not die of SIGKILL");
        int ok;
        checkpoint_position pos = position(ck, &ok);
        cr_assert(ok, "kill %d left no readable checkpoint", kill_no);
        cr_assert_geq(pos.examples, last,
                      "kill %d: the checkpoint went back from %" PRIu64 " to %" PRIu64 " examples",
                      kill_no, last, pos.examples);
        last = pos.examples;
    }
    fprintf(stderr, "checkpoint: 8 kills, %d temporary files left by kills during a write\n",
            leftovers(testdir_path(), "big.ckpt"));
    // The next run removes what killed writers left beside its checkpoint (and nothing else).
    const char *stale = testdir_file("big.ckpt.tmp.Zq3x9A");
    const char *other = testdir_file("other.ckpt.tmp.Zq3x9A");
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(i == 0 ? stale : other, "w");
        cr_assert_not_null(f);
        fclose(f);
    }
    proc_child *t = e2e_trainer_start(args);
    wait_checkpoint_past(ck, last, t);
    proc_signal(t, SIGTERM);
    cr_assert(proc_wait(t, 10000), "the trainer did not stop on SIGTERM");
    cr_assert_eq(leftovers(testdir_path(), "big.ckpt"), 0,
                 "a run left the temporary files of killed writers beside its checkpoint");
    cr_assert_eq(access(other, F_OK), 0, "a temporary file of another path was removed");
    proc_kill(p);
    proc_broker_stop(broker);
}

// Producers that linger until their examples are trained say goodbye only once the trainer
// commits; a committing trainer that waits a second without a batch checkpoints and commits, so
// the supply ends (exit 3) long before the stall timeout, not by it (exit 4).
Test(checkpoint, a_starved_trainer_commits_so_that_lingering_producers_can_finish)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, NULL);
    proc_child *p = e2e_producer_start(
        url, "lingering",
        PROC_ARGS("--max-examples", "130", "--delay", "0:0", "--chunk", "3", "--linger", "30"));
    const char *ck = testdir_file("model.ckpt");
    const char *json = testdir_file("summary.json");
    uint64_t t0 = stoker_now_ms();
    proc_child *t = e2e_trainer_start(PROC_ARGS("--broker", url, "--rounds", "1000", "--device",
                                                "cpu", "--checkpoint", ck, "--checkpoint-every",
                                                "1000", "--stall-timeout", "20", "--json", json));
    proc_assert_exit(t, 3, 15000);
    uint64_t took_ms = stoker_now_ms() - t0;
    cr_assert_lt(took_ms, 10000, "the supply ended after %llu ms", (unsigned long long)took_ms);
    proc_assert_exit(p, 0, 10000);
    char *summary = testdir_read(json, NULL);
    cr_assert_not_null(summary);
    cr_assert_eq(json_u64(summary, NULL, "examples"), 130, "%s", summary);
    cr_assert_geq(json_u64(summary, NULL, "checkpoints"), 2, "%s", summary);
    free(summary);
    int ok;
    cr_assert_eq(position(ck, &ok).examples, 130);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->counters.acknowledged, 130);
    stoker_status_destroy(st);
    proc_broker_stop(broker);
}

// Without --checkpoint nothing changes: acknowledged after each step, no checkpoint fields in the
// summary, and a completed run logs its end at INFO, not as an error.
Test(checkpoint, without_checkpoint_the_trainer_runs_as_before)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, NULL);
    proc_child *p = e2e_producer_start(url, "source", PROC_ARGS("--delay", "0:0"));
    const char *json = testdir_file("summary.json");
    proc_child *t = e2e_trainer_start(
        PROC_ARGS("--broker", url, "--rounds", "5", "--device", "cpu", "--json", json));
    proc_assert_exit(t, 0, 20000);
    char *summary = testdir_read(json, NULL), *err = testdir_read(t->err_path, NULL);
    cr_assert(summary != NULL && err != NULL);
    cr_assert_null(strstr(summary, "checkpoints"), "%s", summary);
    cr_assert_null(strstr(summary, "resumed_from"), "%s", summary);
    cr_assert_not_null(strstr(err, "INFO completed: all 5 rounds done"), "%s", err);
    cr_assert_null(strstr(err, "ERROR"), "%s", err);
    free(summary);
    free(err);
    stoker_status *st = h_status(url);
    cr_assert_geq(st->counters.acknowledged, 100, "acknowledged %llu",
                  (unsigned long long)st->counters.acknowledged);
    stoker_status_destroy(st);
    proc_stop(p, 5000);
    proc_broker_stop(broker);
}
