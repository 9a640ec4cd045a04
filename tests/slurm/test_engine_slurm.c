// stoker-scale's slurm engine, the parts that need no Slurm: the sbatch, squeue and scancel
// command lines it builds, its reading of squeue's output and which jobs it cancels first. The
// engine against a real Slurm is test_slurm.py's.
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine_slurm.h"

static slurm_engine
engine(void)
{
    slurm_engine e;
    slurm_engine_init(&e);
    e.template_path = "/shared/producer.sbatch";
    e.broker_url = "tcp://gpu1:7070";
    return e;
}

static void
expect_argv(const char **argv, int n, const char *const *want)
{
    int i = 0;
    for (; want[i] != NULL; i++) {
        cr_assert_lt(i, n, "argv has %d words, expected at least %d", n, i + 1);
        cr_assert_str_eq(argv[i], want[i], "word %d", i);
    }
    cr_assert_eq(n, i, "argv has %d words, expected %d", n, i);
    cr_assert_null(argv[n], "argv ends with NULL");
}

Test(slurm_engine, sbatch_names_the_job_after_prefix_and_pool)
{
    slurm_engine e = engine();
    char buf[256], err[256];
    const char *argv[SLURM_ARGV_MAX];
    int n = slurm_sbatch_argv(&e, "aug", buf, sizeof(buf), argv, err, sizeof(err));
    const char *want[] = {"sbatch", "--parsable", "--job-name=stoker-producer-aug",
                          "/shared/producer.sbatch", NULL};
    expect_argv(argv, n, want);
}

Test(slurm_engine, sbatch_takes_partition_and_prefix)
{
    slurm_engine e = engine();
    e.partition = "cpu";
    e.job_name = "exp7";
    char buf[256], err[256];
    const char *argv[SLURM_ARGV_MAX];
    int n = slurm_sbatch_argv(&e, "default", buf, sizeof(buf), argv, err, sizeof(err));
    const char *want[] = {"sbatch",
                          "--parsable",
                          "--job-name=exp7-default",
                          "--partition=cpu",
                          "/shared/producer.sbatch",
                          NULL};
    expect_argv(argv, n, want);
}

Test(slurm_engine, squeue_lists_only_own_live_jobs_of_the_pool)
{
    slurm_engine e = engine();
    char buf[256], err[256];
    const char *argv[SLURM_ARGV_MAX];
    int n = slurm_squeue_argv(&e, "aug", buf, sizeof(buf), argv, err, sizeof(err));
    const char *want[] = {"squeue",
                          "--noheader",
                          "--me",
                          "--name=stoker-producer-aug",
                          "--states=PENDING,CONFIGURING,RUNNING,SUSPENDED",
                          "--format=%i %T",
                          NULL};
    expect_argv(argv, n, want);
}

Test(slurm_engine, scancel_takes_the_ids)
{
    const char *ids[] = {"17", "12"};
    const char *argv[SLURM_ARGV_MAX];
    int n = slurm_scancel_argv(ids, 2, argv);
    const char *want[] = {"scancel", "17", "12", NULL};
    expect_argv(argv, n, want);
    cr_assert_eq(slurm_scancel_argv(ids, 0, argv), -1, "nothing to cancel is no command");
}

Test(slurm_engine, names_slurm_cannot_carry_are_refused)
{
    slurm_engine e = engine();
    char buf[256], err[256];
    const char *argv[SLURM_ARGV_MAX];
    cr_assert_eq(slurm_squeue_argv(&e, "a,b", buf, sizeof(buf), argv, err, sizeof(err)), -1);
    cr_assert(strstr(err, "pool 'a,b'") != NULL && strstr(err, "','") != NULL, "%s", err);
    e.job_name = "my jobs";
    cr_assert_eq(slurm_sbatch_argv(&e, "aug", buf, sizeof(buf), argv, err, sizeof(err)), -1);
    cr_assert(strstr(err, "--slurm-job-name 'my jobs'") != NULL, "%s", err);
    e = engine();
    e.partition = "gpu,cpu";
    cr_assert_eq(slurm_sbatch_argv(&e, "aug", buf, sizeof(buf), argv, err, sizeof(err)), -1);
    cr_assert(strstr(err, "--slurm-partition") != NULL, "%s", err);
}

Test(slurm_engine, too_small_a_buffer_is_an_error)
{
    slurm_engine e = engine();
    char buf[8], err[256];
    const char *argv[SLURM_ARGV_MAX];
    cr_assert_eq(slurm_sbatch_argv(&e, "aug", buf, sizeof(buf), argv, err, sizeof(err)), -1);
    cr_assert(strstr(err, "too long") != NULL, "%s", err);
}

Test(slurm_engine, squeue_output_is_read)
{
    slurm_job jobs[8];
    char err[256];
    int n = slurm_parse_squeue("12 RUNNING\n  13 PENDING\n\n14 CONFIGURING\n15 SUSPENDED", jobs, 8,
                               err, sizeof(err));
    cr_assert_eq(n, 4, "%s", err);
    cr_assert_str_eq(jobs[0].id, "12");
    cr_assert_eq(jobs[0].pending, 0);
    cr_assert_str_eq(jobs[1].id, "13");
    cr_assert_eq(jobs[1].pending, 1);
    cr_assert_eq(jobs[2].pending, 1, "CONFIGURING is not running yet");
    cr_assert_eq(jobs[3].pending, 0);
    cr_assert_eq(slurm_parse_squeue("", jobs, 8, err, sizeof(err)), 0, "no jobs");
}

Test(slurm_engine, unreadable_squeue_output_is_named)
{
    slurm_job jobs[8];
    char err[256];
    cr_assert_eq(
        slurm_parse_squeue("12 RUNNING\nslurm_load_jobs error: x\n", jobs, 8, err, sizeof(err)),
        -1);
    cr_assert(strstr(err, "slurm_load_jobs error: x") != NULL, "%s", err);
    cr_assert_eq(slurm_parse_squeue("1 R\n2 R\n3 R\n", jobs, 2, err, sizeof(err)), -1);
    cr_assert(strstr(err, "more than 2 jobs") != NULL, "%s", err);
}

Test(slurm_engine, cancels_pending_then_newest_running)
{
    slurm_job jobs[] = {{"9", 0}, {"31", 0}, {"30", 1}, {"12", 0}, {"29", 1}};
    size_t order[5];
    size_t k = slurm_pick_cancel(jobs, 5, 2, order);
    cr_assert_eq(k, 3);
    cr_assert_str_eq(jobs[order[0]].id, "30", "the newest pending first");
    cr_assert_str_eq(jobs[order[1]].id, "29");
    cr_assert_str_eq(jobs[order[2]].id, "31", "then the newest running");
    cr_assert_eq(slurm_pick_cancel(jobs, 5, 5, order), 0, "keeping all cancels none");
    cr_assert_eq(slurm_pick_cancel(jobs, 5, 9, order), 0);
}

Test(slurm_engine, a_pool_without_producers_is_added_at_the_minimum)
{
    stoker_status *st = calloc(1, sizeof(*st));
    cr_assert_not_null(st);
    st->autoscale_min = 2;
    cr_assert_eq(slurm_engine_pool_absent(st, NULL), 0);
    cr_assert_eq(st->n_pools, 1, "no pool named: the default one");
    cr_assert_str_eq(st->pools[0].name, "default");
    cr_assert_eq(st->pools[0].current, 0);
    cr_assert_eq(st->pools[0].wanted, 2, "the broker's minimum");
    cr_assert(strstr(st->pools[0].why, "no producer of pool 'default'") != NULL, "%s",
              st->pools[0].why);
    cr_assert_eq(slurm_engine_pool_absent(st, NULL), 0);
    cr_assert_eq(slurm_engine_pool_absent(st, "default"), 0);
    cr_assert_eq(st->n_pools, 1, "a pool the broker names is not added again");
    cr_assert_eq(slurm_engine_pool_absent(st, "aug"), 0);
    cr_assert_eq(st->n_pools, 2, "--pool aug, not named yet");
    cr_assert_str_eq(st->pools[1].name, "aug");
    stoker_status_destroy(st);
}
