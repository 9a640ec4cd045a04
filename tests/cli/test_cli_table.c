// The option table module in-process: each kind sets its field (units converted), bad values
// return 2, repeated flags stop at their cap, the checks across flags answer as documented, and
// the usage shows defaults read from the struct. The binaries' tables are test_cli.py's.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/cli.h"

typedef struct conf {
    int verbose;
    const char *name;
    const char *urls[2];
    uint32_t n_urls;
    uint32_t depth;
    size_t bytes;
    uint32_t timeout_ms;
    float rate;
    double lo, hi;
    const char *mode;
    int format;
} conf;

static const char *const modes[] = {"fast", "slow", NULL};
static const char *const formats[] = {"text", "raw", NULL};

#define AT(member) STOKER_CLI_AT(conf, member)
static const stoker_cli_option rows[] = {
    {"verbose", NULL, "say more", STOKER_CLI_FLAG, AT(verbose)},
    {"name", "S", "a name", STOKER_CLI_STRING, AT(name), .imin = 1, .imax = 4},
    {"url", "URL", "where", STOKER_CLI_STRINGS, AT(urls), .offset2 = offsetof(conf, n_urls),
     .imax = 2},
    {"depth", "N", "how deep", STOKER_CLI_UINT, AT(depth), .imin = 1, .imax = 100},
    {"bytes", "N", "how much", STOKER_CLI_BYTES, AT(bytes), .imin = 1024, .imax = 1ull << 40},
    {"timeout", "SEC", "how long", STOKER_CLI_SECONDS_MS, AT(timeout_ms), .dmin = 0.05, .dmax = 60},
    {"rate", "X", "how fast", STOKER_CLI_NUMBER, AT(rate), .dmin = 0, .dmax = 1},
    {"delay", "MIN:MAX", "a range", STOKER_CLI_RANGE, AT(lo), .offset2 = offsetof(conf, hi),
     .dmax = 10},
    {"mode", "M", "fast or slow", STOKER_CLI_CHOICE, AT(mode), .choices = modes},
    {"format", "F", "text or raw", STOKER_CLI_ENUM, AT(format), .choices = formats},
};

static conf c;
static stoker_cli cli;

static int
parse(const char *const *args)
{
    char *argv[32] = {"prog"};
    int argc = 1;
    while (args[argc - 1] != NULL)
        argv[argc] = (char *)args[argc - 1], argc++;
    c = (conf){
        .depth = 64, .bytes = 1u << 20, .timeout_ms = 3000, .lo = 0.05, .hi = 0.5, .mode = "fast"};
    stoker_cli_init(&cli, "prog", "[options]", NULL, STOKER_LOG_INFO);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(rows), &c);
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w"); // the messages are test_cli.py's business
    int code = stoker_cli_parse(&cli, argc, argv);
    fclose(stderr);
    stderr = saved;
    return code;
}
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(cli_table, each_kind_sets_its_field_in_its_unit)
{
    cr_assert_eq(
        parse(ARGS("--verbose", "--name", "ab", "--url", "a", "--url", "b", "--depth", "100",
                   "--bytes", "4096", "--timeout", "0.25", "--rate", "0.5", "--delay", "1:2",
                   "--mode", "slow", "--format", "raw", "--log-level", "DEBUG")),
        -1);
    cr_expect_eq(c.verbose, 1);
    cr_expect_str_eq(c.name, "ab");
    cr_expect(c.n_urls == 2 && strcmp(c.urls[1], "b") == 0);
    cr_expect_eq(c.depth, 100);
    cr_expect_eq(c.bytes, 4096);
    cr_expect_eq(c.timeout_ms, 250);
    cr_expect_float_eq(c.rate, 0.5f, 1e-9);
    cr_expect(c.lo == 1 && c.hi == 2);
    cr_expect_str_eq(c.mode, "slow");
    cr_expect_eq(c.format, 1);
    cr_expect_eq(cli.log_level, STOKER_LOG_DEBUG);
    cr_expect(stoker_cli_given(&cli, "depth") && stoker_cli_given(&cli, "format"));
}

Test(cli_table, defaults_stay_when_not_given)
{
    cr_assert_eq(parse(ARGS("--verbose")), -1);
    cr_expect(c.depth == 64 && c.timeout_ms == 3000 && strcmp(c.mode, "fast") == 0);
    cr_expect(!stoker_cli_given(&cli, "depth") && stoker_cli_given(&cli, "verbose"));
}

Test(cli_table, bad_values_are_usage_errors_and_leave_the_field)
{
    const char *const bad[][2] = {
        {"--depth", "0"},     {"--depth", "101"},   {"--depth", "1x"}, {"--bytes", "1023"},
        {"--timeout", "0"},   {"--timeout", "nan"}, {"--rate", "2"},   {"--delay", "3:1"},
        {"--mode", "FAST"},   {"--format", "csv"},  {"--name", ""},    {"--name", "abcde"},
        {"--log-level", "x"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_expect_eq(parse(ARGS(bad[i][0], bad[i][1])), 2, "%s '%s' accepted", bad[i][0],
                     bad[i][1]);
        cr_expect(c.depth == 64 && c.timeout_ms == 3000 && c.lo == 0.05 && c.format == 0);
    }
    cr_expect_eq(parse(ARGS("--url", "a", "--url", "b", "--url", "c")), 2);
    cr_expect_eq(parse(ARGS("--no-such")), 2);
    cr_expect_eq(parse(ARGS("--depth")), 2);
    cr_expect_eq(parse(ARGS("stray")), 2);
}

Test(cli_table, checks_across_flags)
{
    FILE *saved = stderr;
    cr_assert_eq(parse(ARGS("--verbose", "--depth", "3")), -1);
    stderr = fopen("/dev/null", "w");
    int need_name = stoker_cli_require(&cli, "name", NULL);
    int need_unless = stoker_cli_require(&cli, "name", "verbose");
    int one = stoker_cli_one_of(&cli, "verbose", "depth");
    int one_ok = stoker_cli_one_of(&cli, "verbose", "mode");
    int excl = stoker_cli_exclude(&cli, "verbose", "depth", "not both");
    int excl_ok = stoker_cli_exclude(&cli, "verbose", "mode", "not both");
    fclose(stderr);
    stderr = saved;
    cr_expect_eq(need_name, 2);
    cr_expect_eq(need_unless, 0);
    cr_expect_eq(one, 2);
    cr_expect_eq(one_ok, 0);
    cr_expect_eq(excl, 2);
    cr_expect_eq(excl_ok, 0);
}

Test(cli_table, usage_reads_defaults_from_the_struct)
{
    cr_assert_eq(parse(ARGS("--verbose")), -1);
    c.depth = 77; // as if an init function had set it
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    stoker_cli_usage(&cli, f);
    fclose(f);
    cr_expect(strstr(text, "--depth N") && strstr(text, "how deep (default 77)"), "%s", text);
    cr_expect(strstr(text, "(default 3)") && strstr(text, "(default 0.05:0.5)"), "%s", text);
    cr_expect(strstr(text, "(default fast)") && strstr(text, "(default text)"), "%s", text);
    cr_expect(strstr(text, "--log-level L") && strstr(text, "(default info)"), "%s", text);
    cr_expect(strstr(text, "--help, --version") != NULL);
    free(text);
}
