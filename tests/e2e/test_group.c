// Data-parallel groups end to end: stoker-trainer processes as the ranks of one group (--group,
// --rank, --world) against the real broker and producers. Every rank runs the same number of
// steps and gets the end at the same step; a SIGKILLed rank makes the other exit with the
// group's own code (5) at once (a closed connection is a lost rank), never a hang.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"

TestSuite(group, .init = e2e_setup, .fini = e2e_teardown, .timeout = 60);

#define SCHEMA "input:float32[10],output:float32[1]"

static proc_child *
rank_start(const char *url, const char *rank, const char *json)
{
    return e2e_trainer_start(PROC_ARGS("--broker", url, "--group", "g", "--rank", rank, "--world",
                                       "2", "--batch-size", "8", "--round-length", "16", "--rounds",
                                       "100000", "--device", "cpu", "--stall-timeout", "20",
                                       "--json", json));
}

// The value of "key": N in the JSON summary at path.
static unsigned long long
summary_number(const char *path, const char *key)
{
    size_t len;
    char *text = testdir_read(path, &len);
    cr_assert_not_null(text, "no summary at %s", path);
    char pattern[64];
    snprintf(pattern, sizeof(pattern), "\"%s\": ", key);
    const char *at = strstr(text, pattern);
    cr_assert_not_null(at, "no %s in %s", key, text);
    unsigned long long v = strtoull(at + strlen(pattern), NULL, 10);
    free(text);
    return v;
}

Test(group, trainer_ranks_run_equal_steps_and_end_together)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA));
    const char *json0 = testdir_file("rank0.json"), *json1 = testdir_file("rank1.json");
    proc_child *r0 = rank_start(url, "0", json0);
    proc_child *r1 = rank_start(url, "1", json1);
    cr_assert(h_wait_trainers(url, 2, 15000), "the ranks did not connect within 15 s");
    // 203 = 12 steps of 2 x 8, a short step of 2 x 5, and 1 left over.
    proc_child *p =
        e2e_producer_start(url, "finite", PROC_ARGS("--delay", "0:0.001", "--max-examples", "203"));
    proc_assert_exit(r0, 3, 30000);
    proc_assert_exit(r1, 3, 30000);
    proc_assert_exit(p, 0, 5000);
    cr_assert_eq(summary_number(json0, "batches"), 13);
    cr_assert_eq(summary_number(json1, "batches"), 13);
    cr_assert_eq(summary_number(json0, "examples"), 101);
    cr_assert_eq(summary_number(json1, "examples"), 101);
    cr_assert_eq(summary_number(json0, "group_leftover"), 1, "the audit reports the leftover");
    cr_assert_eq(summary_number(json1, "group_leftover"), 1);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->counters.acknowledged, 202);
    cr_assert_eq(st->counters.queued, 1, "the leftover example is still queued");
    cr_assert_eq(st->n_groups, 1);
    cr_assert_str_eq(st->groups[0].state, "ended");
    cr_assert_eq(st->groups[0].leftover, 1);
    stoker_status_destroy(st);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(group, killed_rank_makes_the_other_exit_with_group_broken)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA, "--trainer-timeout", "2"));
    proc_child *p = e2e_producer_start(url, "endless", PROC_ARGS("--delay", "0.0005:0.0005"));
    proc_child *r0 = rank_start(url, "0", testdir_file("rank0.json"));
    proc_child *r1 = rank_start(url, "1", testdir_file("rank1.json"));
    cr_assert(h_wait_acknowledged(url, 160, 20000), "the group did not train within 20 s");
    uint64_t t0 = stoker_now_ms();
    proc_signal(r1, SIGKILL);
    proc_assert_exit(r0, 5, 5000);
    uint64_t took = stoker_now_ms() - t0;
    cr_assert_lt(took, 2000 + 1000, "rank 0 left %llu ms after the kill (trainer timeout 2 s)",
                 (unsigned long long)took);
    proc_signal(p, SIGTERM);
    h_assert_identity(url);
    proc_broker_stop(broker);
}
