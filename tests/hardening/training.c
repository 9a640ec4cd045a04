// See training.h.
#include <stdlib.h>

#include <criterion/criterion.h>

#include "proc.h"
#include "testdir.h"
#include "training.h"

// Appends the NULL-terminated list more to argv (n entries so far, room for cap).
static int
append_args(const char **argv, int n, int cap, const char *const *more)
{
    for (; more != NULL && *more != NULL; more++) {
        cr_assert_lt(n, cap - 1, "too many arguments");
        argv[n++] = *more;
    }
    argv[n] = NULL;
    return n;
}

void
train_end_to_end(const char *url, const char *name, const char *const *client_args,
                 const char *json)
{
    const char *producer[32] = {getenv("STOKER_PRODUCER_BIN"), "--broker", url, "--name", name};
    const char *const producer_rest[] = {"--delay",        "0:0", "--chunk", "4",
                                         "--max-examples", "200", NULL};
    int n = append_args(producer, 5, 32, client_args);
    append_args(producer, n, 32, producer_rest);
    const char *trainer[32] = {getenv("STOKER_TRAINER_BIN"), "--broker", url};
    const char *const trainer_rest[] = {
        "--device", "cpu",    "--rounds", "5", "--round-length", "20", "--stall-timeout",
        "10",       "--json", json,       NULL};
    n = append_args(trainer, 3, 32, client_args);
    append_args(trainer, n, 32, trainer_rest);
    cr_assert_not_null(producer[0]);
    cr_assert_not_null(trainer[0]);
    proc_spawn("producer", producer, &(proc_io){.log = "producer.log"});
    proc_child *t = proc_spawn("trainer", trainer, &(proc_io){.log = "trainer.log"});
    cr_assert(proc_wait(t, 60000), "the trainer did not finish within 60 s");
    cr_assert_eq(proc_exit_code(t), 0, "trainer exit %d (log: %s)", proc_exit_code(t),
                 testdir_file("trainer.log"));
    cr_assert(testdir_contains(json, "\"status\": \"completed\""), "summary: not completed");
    cr_assert(testdir_contains(json, "\"examples\": 100"), "summary: not 100 examples");
    cr_assert(testdir_contains(json, "\"duplicates_seen\": 0"), "summary: duplicates");
    cr_assert(testdir_contains(json, "\"discrepancy\": 0"), "summary: discrepancy");
}
