// stoker-trainer end to end: the real trainer process fed by the real broker and
// producers (or inline), its exit codes, JSON summary and safetensors weights checked from the
// outside (check.py reads them with Python's json/struct and numpy). The timing-sensitive
// supply tests (supply death, stall) live in test_timing.c.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"

#define SUITE(name) TestSuite(name, .init = e2e_setup, .fini = e2e_teardown, .timeout = 60)
SUITE(training);
SUITE(summary);
SUITE(signals);
SUITE(trainer_inline);
SUITE(trainer_cli);

#define SCHEMA "input:float32[10],output:float32[1]"

// A broker (knowing the synthetic schema up front) and n producers with extra arguments.
static proc_child *
supply(char *url, size_t len, int n, const char *const *pargs, proc_child **producers)
{
    testdir_ipc_url(url, len, "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA));
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "synth-%d", i);
        producers[i] = e2e_producer_start(url, name, pargs);
    }
    return broker;
}

static void
stop_all(proc_child **producers, int n)
{
    for (int i = 0; i < n; i++)
        proc_stop(producers[i], 5000);
}

Test(training, loss_halves_through_a_broker_and_four_producers)
{
    char url[256];
    proc_child *producers[4];
    proc_child *broker = supply(url, sizeof(url), 4, PROC_ARGS("--delay", "0:0"), producers);
    const char *json = testdir_file("summary.json");
    const char *weights = testdir_file("weights.safetensors");
    proc_child *t = e2e_trainer_start(PROC_ARGS(
        "--broker", url, "--batch-size", "32", "--round-length", "640", "--rounds", "30", "--lr",
        "0.01", "--hidden", "32,32", "--device", "cpu", "--json", json, "--weights", weights));
    proc_assert_exit(t, 0, 45000);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "completed", "--rounds", "30",
                           "--batch-size", "32", "--round-length", "640", "--loss-halved"));
    e2e_check_ok(
        PROC_ARGS("safetensors", weights, "--inputs", "10", "--hidden", "32,32", "--outputs", "1"));
    stop_all(producers, 4);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// The images generator's default output (int64 scalar labels) and its uint8 pixels train with
// --classes: the trainer narrows the labels and scales the pixels itself.
Test(training, trains_on_images_uint8_pixels_and_int64_labels)
{
    const char *dir = testdir_file("images");
    const char *py = getenv("STOKER_PYTHON") ? getenv("STOKER_PYTHON") : "python3";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' 2 4 32 24 >/dev/null", py,
             getenv("STOKER_MAKE_IMAGES"), dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char url[256];
    testdir_ipc_url(url, sizeof url, "broker");
    proc_child *broker = e2e_broker_start(url, NULL);
    const char *json = testdir_file("summary.json");
    proc_child *p[2];
    p[0] = e2e_producer_start(
        url, "img-u8",
        PROC_ARGS("--generator", "images", "--images", dir, "--size", "8x12", "--output", "uint8"));
    proc_child *t = e2e_trainer_start(PROC_ARGS(
        "--broker", url, "--input", "image", "--target", "label", "--classes", "2", "--batch-size",
        "8", "--round-length", "32", "--rounds", "4", "--device", "cpu", "--json", json));
    proc_assert_exit(t, 0, 30000);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "completed", "--rounds", "4"));
    stop_all(p, 1);
    proc_broker_stop(broker);
}

Test(summary, counts_every_example_once_when_the_data_ends)
{
    char url[256];
    proc_child *producers[1];
    proc_child *broker = supply(url, sizeof(url), 0, NULL, producers);
    const char *json = testdir_file("summary.json");
    proc_child *t =
        e2e_trainer_start(PROC_ARGS("--broker", url, "--batch-size", "8", "--round-length", "20",
                                    "--rounds", "1000", "--device", "cpu", "--json", json));
    // The trainer connects first, so it hears the producers join and finish (a trainer does not
    // get the events from before it connected). The broker knows the schema: the trainer can
    // connect before any producer.
    cr_assert(h_wait_trainers(url, 1, 15000), "the trainer did not connect within 15 s");
    // 90 examples, not a multiple of the batch size: the last batch is short. (One producer:
    // with two, the first could finish before the second said hello, and the broker would
    // rightly end the supply then.)
    producers[0] =
        e2e_producer_start(url, "finite", PROC_ARGS("--delay", "0:0.001", "--max-examples", "90"));
    proc_assert_exit(t, 3, 20000);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "supply_ended", "--batch-size", "8",
                           "--round-length", "20"));
    char *s = testdir_read(json, NULL);
    cr_assert_not_null(s);
    unsigned long long examples = 0, batches = 0, acknowledged = 0, produced = 0;
    const char *at = strstr(s, "\"examples\": ");
    cr_assert(at != NULL && sscanf(at, "\"examples\": %llu", &examples) == 1, "%s", s);
    at = strstr(s, "\"batches\": ");
    cr_assert(at != NULL && sscanf(at, "\"batches\": %llu", &batches) == 1, "%s", s);
    at = strstr(s, "\"produced\": ");
    cr_assert(at != NULL && sscanf(at, "\"produced\": %llu", &produced) == 1, "%s", s);
    at = strstr(s, "\"acknowledged\": ");
    cr_assert(at != NULL && sscanf(at, "\"acknowledged\": %llu", &acknowledged) == 1, "%s", s);
    cr_assert(strstr(s, "\"producer_finished\"") != NULL, "no producer_finished event: %s", s);
    free(s);
    // Every example produced was trained on exactly once: examples = sum of batch sizes =
    // what the broker acknowledged.
    cr_assert_eq(produced, 90, "produced %llu", produced);
    cr_assert_eq(examples, 90, "trained on %llu examples, 90 were produced", examples);
    cr_assert_eq(acknowledged, 90);
    cr_assert_geq(batches, 12, "%llu batches of at most 8 cannot hold 90 examples", batches);
    proc_assert_exit(producers[0], 0, 5000);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(summary, completed_run_has_every_field_and_valid_weights)
{
    char url[256];
    proc_child *producers[2];
    proc_child *broker = supply(url, sizeof(url), 2, PROC_ARGS("--delay", "0:0"), producers);
    const char *json = testdir_file("summary.json");
    const char *weights = testdir_file("w.safetensors");
    proc_child *t = e2e_trainer_start(
        PROC_ARGS("--broker", url, "--batch-size", "4", "--round-length", "20", "--rounds", "10",
                  "--hidden", "8,6,4", "--device", "cpu", "--json", json, "--weights", weights));
    proc_assert_exit(t, 0, 20000);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "completed", "--rounds", "10",
                           "--batch-size", "4", "--round-length", "20"));
    e2e_check_ok(
        PROC_ARGS("safetensors", weights, "--inputs", "10", "--hidden", "8,6,4", "--outputs", "1"));
    stop_all(producers, 2);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(signals, sigterm_interrupts_with_130_and_saves_the_weights)
{
    char url[256];
    proc_child *producers[2];
    proc_child *broker =
        supply(url, sizeof(url), 2, PROC_ARGS("--delay", "0.001:0.002"), producers);
    const char *json = testdir_file("summary.json");
    const char *weights = testdir_file("weights.safetensors");
    proc_child *t = e2e_trainer_start(PROC_ARGS("--broker", url, "--rounds", "1000000", "--device",
                                                "cpu", "--json", json, "--weights", weights));
    // Until it has trained a little.
    cr_assert(h_wait_acknowledged(url, 40, 15000), "the trainer acknowledged < 40 in 15 s");
    proc_signal(t, SIGTERM);
    proc_assert_exit(t, 130, 5000);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "interrupted", "--batch-size", "4"));
    cr_assert(testdir_exists(weights), "no weights written after SIGTERM");
    e2e_check_ok(
        PROC_ARGS("safetensors", weights, "--inputs", "10", "--hidden", "16", "--outputs", "1"));
    stop_all(producers, 2);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(trainer_inline, baseline_completes_and_reports_its_device)
{
    const char *json = testdir_file("summary.json");
    proc_child *t = e2e_trainer_start(PROC_ARGS("--inline", "--delay", "0:0", "--rounds", "5",
                                                "--device", "cpu", "--json", json));
    proc_assert_exit(t, 0, 20000);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "completed", "--rounds", "5",
                           "--batch-size", "4", "--round-length", "20"));
    char *s = testdir_read(json, NULL);
    cr_assert(strstr(s, "\"device\": \"cpu\"") != NULL, "%s", s);
    free(s);
}

Test(trainer_inline, forced_gpu_without_one_exits_1_with_a_message)
{
    const char *json = testdir_file("summary.json");
    proc_child *t = e2e_trainer_start(PROC_ARGS("--inline", "--delay", "0:0", "--rounds", "1",
                                                "--device", "gpu", "--json", json));
    cr_assert(proc_wait(t, 60000), "the trainer did not exit within 60 s");
    char *err = testdir_read(t->err_path, NULL);
    if (WIFEXITED(t->status) && WEXITSTATUS(t->status) == 0) {
        char *s = testdir_read(json, NULL);
        cr_assert(s != NULL && strstr(s, "\"device\": \"gpu\"") != NULL,
                  "--device gpu succeeded but did not train on the GPU: %s", s);
        free(s);
        free(err);
        cr_skip_test("a GPU is usable here: --device gpu trained on it (nothing to refuse)");
    }
    cr_assert(WIFEXITED(t->status) && WEXITSTATUS(t->status) == 1,
              "expected exit 1 without a GPU, got status %#x; stderr:\n%s", t->status, err);
    cr_assert(strstr(err, "gpu") != NULL || strstr(err, "GPU") != NULL ||
                  strstr(err, "CUDA") != NULL,
              "the message does not say the GPU is the problem:\n%s", err);
    free(err);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "error"));
}

static void
assert_usage_error(const char *const *args, const char *want)
{
    proc_child *t = e2e_start("trainer", "STOKER_TRAINER_BIN", args);
    proc_assert_exit(t, 2, 5000);
    char *err = testdir_read(t->err_path, NULL);
    cr_assert(strstr(err, want) != NULL, "stderr does not mention '%s':\n%s", want, err);
    free(err);
}

// (The trainer links cuBLAS: each start costs a second or more here, so a few per test.)
Test(trainer_cli, zero_batch_size_and_unknown_progress_exit_2)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "nobody");
    assert_usage_error(PROC_ARGS("--broker", url, "--batch-size", "0"), "--batch-size");
    assert_usage_error(PROC_ARGS("--broker", url, "--progress", "maybe"), "--progress");
}

Test(trainer_cli, broker_and_inline_together_or_neither_exit_2)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "nobody");
    assert_usage_error(PROC_ARGS("--broker", url, "--inline"), "--inline");
    assert_usage_error(PROC_ARGS("--rounds", "3"), "--broker");
}

Test(trainer_cli, unknown_flags_and_bad_values_exit_2)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "nobody");
    assert_usage_error(PROC_ARGS("--broker", url, "--device", "tpu"), "--device");
    assert_usage_error(PROC_ARGS("--broker", url, "--hidden", "8,,x"), "--hidden");
    assert_usage_error(PROC_ARGS("--broker", url, "--no-such-flag"), "--no-such-flag");
}
