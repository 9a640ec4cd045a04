// The fuzz target's findings, kept: every input in fuzz/regressions/ (and the seed corpus) goes
// through the same harness as in scripts/fuzz.sh (fuzz/harness.c: decode, hand to a broker
// state machine, tick, close pipes, check the accounting identity, decode every reply), here
// under meson's build (and its sanitizers with scripts/test.sh --sanitize). One test per finding
// states what was wrong.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "broker.h"
#include "harness.h"
#include "helpers.h"

TestSuite(regressions, .init = h_setup, .fini = h_teardown, .timeout = 120);

// Runs every file of DIR through the harness; returns how many.
static int
replay_dir(const char *sub)
{
    const char *root = getenv("STOKER_FUZZ_DIR");
    cr_assert_not_null(root, "STOKER_FUZZ_DIR is not set (tests/hardening/meson.build sets it)");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/%s", root, sub);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s", dir);
    int n = 0;
    struct dirent *e;
    static uint8_t buf[1 << 20];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".md") != NULL)
            continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        cr_assert_not_null(f, "%s", path);
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        fuzz_broker_run(buf, len); // aborts (the test crashes) on a broken invariant
        n++;
    }
    closedir(d);
    return n;
}

Test(regressions, every_regression_input_passes)
{
    cr_assert_gt(replay_dir("regressions"), 0, "no regression inputs found");
}

Test(regressions, every_seed_passes_and_decodes)
{
    cr_assert_gt(replay_dir("corpus"), 10, "the seed corpus is missing");
}

// Finding 1 (UBSan): an empty report computed NULL + 0 in sbuf_printf (broker.c) on every
// /metrics and /status request. Input: fuzz/regressions/empty-report.
Test(regressions, empty_report_has_no_null_arithmetic)
{
    broker_config cfg;
    broker_config_init(&cfg);
    broker *b = broker_create(&cfg, 0);
    cr_assert_not_null(b);
    char *text = broker_metrics_text(b, 0);
    cr_assert_not_null(text);
    cr_assert(strstr(text, "stoker_produced_total 0") != NULL);
    free(text);
    text = broker_status_json(b, 0);
    cr_assert_not_null(text);
    free(text);
    broker_outbox out = {0};
    broker_destroy(b, &out);
    broker_outbox_fini(&out);
}
