// Behaviour of the `exec` generator against real child processes (sh, awk, printf): values in
// text and raw form, malformed lines and short records, exit statuses, and that destroy leaves no
// child behind. Logged errors are captured with a log sink.
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"
#include "stoker/error.h"
#include "stoker/log.h"

static char logged[16384];

static void
capture(stoker_log_level level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    size_t used = strlen(logged);
    snprintf(logged + used, sizeof logged - used, "%s\n", line);
}

static void
setup(void)
{
    logged[0] = '\0';
    stoker_log_set_sink(capture, NULL);
}

static stoker_schema
schema_of(const char *spec)
{
    stoker_schema s;
    char err[256];
    cr_assert_eq(stoker_schema_parse(spec, &s, err, sizeof err), STOKER_OK, "%s", err);
    return s;
}

static void
start(stoker_generator *gen, const char *cmd, const char *spec, exec_format format)
{
    stoker_schema s = schema_of(spec);
    char err[256] = "";
    int rv = exec_generator_create(cmd, &s, format, gen, err, sizeof err);
    cr_assert_eq(rv, STOKER_OK, "create: %s", err);
    cr_assert_str_eq(gen->kind, "exec");
    cr_assert(stoker_schema_equal(&gen->schema, &s));
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// True when pid no longer exists or is a zombie that is not ours (reparented to init).
static bool
process_gone(pid_t pid)
{
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    char path[64], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return true;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *close_paren = strrchr(stat, ')');
    return close_paren != NULL && close_paren[1] == ' ' && close_paren[2] == 'Z';
}

TestSuite(exec, .init = setup);

Test(exec, text_lines_give_values_in_schema_order)
{
    stoker_generator gen;
    start(&gen, "awk 'BEGIN { for (i = 0; i < 5; i++) printf \"%d, %d.5 %d\\n\", i, i, -10 * i }'",
          "input:float32[2],label:int32[1]", EXEC_TEXT);
    for (int i = 0; i < 5; i++) {
        float input[2] = {-1, -1};
        int32_t label = 99;
        void *fields[] = {input, &label};
        cr_assert_eq(gen.fill(gen.user, (uint64_t)i, 0, fields), STOKER_OK, "example %d", i);
        cr_expect_float_eq(input[0], (float)i, 0);
        cr_expect_float_eq(input[1], i + 0.5f, 0);
        cr_expect_eq(label, -10 * i);
    }
    float input[2] = {-1, -1};
    int32_t label = 99;
    void *fields[] = {input, &label};
    cr_expect_eq(gen.fill(gen.user, 5, 0, fields), STOKER_END_OF_DATA);
    cr_expect_eq(gen.fill(gen.user, 6, 0, fields), STOKER_END_OF_DATA, "end is sticky");
    cr_expect_float_eq(input[0], -1.0f, 0, "nothing written at the end");
    cr_expect_eq(label, 99);
    stoker_generator_fini(&gen);
}

Test(exec, all_dtypes_and_blank_lines_and_last_line_without_newline)
{
    stoker_generator gen;
    start(&gen, "printf '1.25 -2 200 -3 60000 -70000 9000000000 0.125\\n\\n  \\n1 2 3 4 5 6 7 8'",
          "a:float64[1],b:int8[1],c:uint8[1],d:int16[1],e:uint16[1],f:int32[1],g:int64[1],"
          "h:float32[1]",
          EXEC_TEXT);
    double a;
    int8_t b;
    uint8_t c;
    int16_t d;
    uint16_t e;
    int32_t f;
    int64_t g;
    float h;
    void *fields[] = {&a, &b, &c, &d, &e, &f, &g, &h};
    cr_assert_eq(gen.fill(gen.user, 0, 0, fields), STOKER_OK, "%s", logged);
    cr_expect_eq(a, 1.25);
    cr_expect_eq(b, -2);
    cr_expect_eq(c, 200);
    cr_expect_eq(d, -3);
    cr_expect_eq(e, 60000);
    cr_expect_eq(f, -70000);
    cr_expect_eq(g, 9000000000LL);
    cr_expect_eq(h, 0.125f);
    cr_assert_eq(gen.fill(gen.user, 1, 0, fields), STOKER_OK, "%s", logged);
    cr_expect_eq(g, 7);
    cr_expect_eq(h, 8.0f);
    cr_expect_eq(gen.fill(gen.user, 2, 0, fields), STOKER_END_OF_DATA, "%s", logged);
    stoker_generator_fini(&gen);
}

Test(exec, malformed_line_7_is_invalid_and_named)
{
    stoker_generator gen;
    start(&gen,
          "awk 'BEGIN { for (i = 1; i <= 10; i++) if (i == 7) print 1, 2; else print i, i, i }'",
          "input:float32[2],output:float32[1]", EXEC_TEXT);
    float in[2], out[1];
    void *fields[] = {in, out};
    for (int i = 1; i <= 6; i++)
        cr_assert_eq(gen.fill(gen.user, 0, 0, fields), STOKER_OK, "line %d", i);
    cr_expect_float_eq(in[0], 6.0f, 0);
    in[0] = -1;
    cr_expect_eq(gen.fill(gen.user, 0, 0, fields), STOKER_INVALID);
    cr_expect_float_eq(in[0], -1.0f, 0, "the bad line wrote nothing");
    cr_expect(strstr(logged, "exec: line 7: expected 3 numbers "
                             "(input:float32[2],output:float32[1]), got 2") != NULL,
              "logged: %s", logged);
    cr_expect_eq(gen.fill(gen.user, 0, 0, fields), STOKER_INVALID, "the error is sticky");
    stoker_generator_fini(&gen);
}

Test(exec, integer_fields_reject_fractions_and_out_of_range)
{
    stoker_generator gen;
    start(&gen, "printf '1 3.0\\n2 2.5\\n'", "x:float32[1],label:int32[1]", EXEC_TEXT);
    float x;
    int32_t label;
    void *fields[] = {&x, &label};
    cr_assert_eq(gen.fill(gen.user, 0, 0, fields), STOKER_OK, "3.0 is an integer: %s", logged);
    cr_expect_eq(label, 3);
    cr_expect_eq(gen.fill(gen.user, 1, 0, fields), STOKER_INVALID);
    cr_expect(strstr(logged, "line 2") && strstr(logged, "'2.5'") &&
                  strstr(logged, "not an integer"),
              "logged: %s", logged);
    stoker_generator_fini(&gen);

    logged[0] = '\0';
    start(&gen, "echo 1 300", "x:float32[1],label:uint8[1]", EXEC_TEXT);
    uint8_t small;
    void *fields8[] = {&x, &small};
    cr_expect_eq(gen.fill(gen.user, 0, 0, fields8), STOKER_INVALID);
    cr_expect(strstr(logged, "out of range for uint8"), "logged: %s", logged);
    stoker_generator_fini(&gen);

    logged[0] = '\0';
    start(&gen, "echo 1 abc", "x:float32[2]", EXEC_TEXT);
    float xs[2];
    void *fields2[] = {xs};
    cr_expect_eq(gen.fill(gen.user, 0, 0, fields2), STOKER_INVALID);
    cr_expect(strstr(logged, "line 1: number 2 ('abc')") && strstr(logged, "not a number"),
              "logged: %s", logged);
    stoker_generator_fini(&gen);
}

// Appends bytes to a printf format as octal escapes.
static void
escape_bytes(char *dst, const void *src, size_t n)
{
    const unsigned char *p = src;
    for (size_t i = 0; i < n; i++)
        dst += sprintf(dst, "\\%03o", p[i]);
}

Test(exec, raw_records_round_trip)
{
    // Three records of input:float32[2], label:int32[1], little-endian, written by printf.
    const float inputs[3][2] = {{1.5f, -2.25f}, {0.0f, 1e-3f}, {3.4e38f, -0.0f}};
    const int32_t labels[3] = {7, -1, 123456789};
    char cmd[1024] = "printf '", *p = cmd + strlen(cmd);
    for (int r = 0; r < 3; r++) {
        escape_bytes(p, inputs[r], sizeof inputs[r]);
        p += strlen(p);
        escape_bytes(p, &labels[r], sizeof labels[r]);
        p += strlen(p);
    }
    strcpy(p, "'");
    stoker_generator gen;
    start(&gen, cmd, "input:float32[2],label:int32[1]", EXEC_RAW);
    for (int r = 0; r < 3; r++) {
        float in[2];
        int32_t label;
        void *fields[] = {in, &label};
        cr_assert_eq(gen.fill(gen.user, (uint64_t)r, 0, fields), STOKER_OK, "record %d: %s", r,
                     logged);
        cr_expect_eq(memcmp(in, inputs[r], sizeof in), 0, "record %d input", r);
        cr_expect_eq(label, labels[r]);
    }
    float in[2];
    int32_t label;
    void *fields[] = {in, &label};
    cr_expect_eq(gen.fill(gen.user, 3, 0, fields), STOKER_END_OF_DATA, "%s", logged);
    stoker_generator_fini(&gen);
}

Test(exec, short_raw_record_is_invalid_and_named)
{
    stoker_generator gen;
    // 2 whole records of 12 bytes, then 5 bytes.
    start(&gen, "head -c 29 /dev/zero", "input:float32[2],label:int32[1]", EXEC_RAW);
    float in[2];
    int32_t label;
    void *fields[] = {in, &label};
    cr_assert_eq(gen.fill(gen.user, 0, 0, fields), STOKER_OK);
    cr_assert_eq(gen.fill(gen.user, 1, 0, fields), STOKER_OK);
    in[0] = 42;
    cr_expect_eq(gen.fill(gen.user, 2, 0, fields), STOKER_INVALID);
    cr_expect_float_eq(in[0], 42.0f, 0, "nothing written from the short record");
    cr_expect(strstr(logged, "exec: record 3: expected 12 bytes") && strstr(logged, "got 5"),
              "logged: %s", logged);
    stoker_generator_fini(&gen);
}

Test(exec, missing_command_is_an_error_naming_it)
{
    stoker_generator gen;
    start(&gen, "no_such_command_stoker_test", "x:float32[1]", EXEC_TEXT);
    float x;
    void *fields[] = {&x};
    cr_expect_eq(gen.fill(gen.user, 0, 0, fields), STOKER_IO);
    cr_expect(strstr(logged, "exec: command 'no_such_command_stoker_test' exited with status 127"),
              "logged: %s", logged);
    stoker_generator_fini(&gen);
}

Test(exec, failing_command_after_good_output_is_an_error)
{
    stoker_generator gen;
    start(&gen, "echo 1; echo 2; exit 3", "x:float32[1]", EXEC_TEXT);
    float x;
    void *fields[] = {&x};
    cr_expect_eq(gen.fill(gen.user, 0, 0, fields), STOKER_OK);
    cr_expect_eq(gen.fill(gen.user, 1, 0, fields), STOKER_OK);
    cr_expect_float_eq(x, 2.0f, 0);
    cr_expect_eq(gen.fill(gen.user, 2, 0, fields), STOKER_IO);
    cr_expect(strstr(logged, "exited with status 3"), "logged: %s", logged);
    stoker_generator_fini(&gen);
}

Test(exec, destroy_stops_an_endless_child_and_its_children)
{
    stoker_generator gen;
    // The shell reports its background sleep's pid, then writes forever.
    start(&gen, "sleep 30 & echo $!; while :; do echo 0; done", "x:int32[1]", EXEC_TEXT);
    int32_t grandchild;
    void *fields[] = {&grandchild};
    cr_assert_eq(gen.fill(gen.user, 0, 0, fields), STOKER_OK);
    pid_t pid = exec_generator_pid(&gen);
    cr_assert_gt(pid, 0);
    cr_assert_eq(kill(pid, 0), 0, "child running");
    double t0 = now_s();
    stoker_generator_fini(&gen);
    cr_expect_lt(now_s() - t0, 0.9, "SIGTERM was enough");
    cr_expect_eq(kill(pid, 0), -1, "child reaped");
    cr_expect_eq(errno, ESRCH);
    cr_expect_eq(waitpid(-1, NULL, WNOHANG), -1, "no zombie child left");
    for (int i = 0; i < 100 && !process_gone(grandchild); i++)
        usleep(10000);
    cr_expect(process_gone(grandchild), "the background sleep %d was stopped too", grandchild);
}

Test(exec, destroy_kills_a_child_that_ignores_sigterm)
{
    stoker_generator gen;
    start(&gen, "trap '' TERM; echo 1; while :; do sleep 0.05; done", "x:float32[1]", EXEC_TEXT);
    float x;
    void *fields[] = {&x};
    cr_assert_eq(gen.fill(gen.user, 0, 0, fields), STOKER_OK);
    pid_t pid = exec_generator_pid(&gen);
    double t0 = now_s();
    stoker_generator_fini(&gen);
    double took = now_s() - t0;
    cr_expect(took >= 0.9 && took < 3.0, "SIGKILL after the 1 s grace (took %.2f s)", took);
    cr_expect_eq(kill(pid, 0), -1);
    cr_expect_eq(errno, ESRCH);
    cr_expect(strstr(logged, "ignored SIGTERM"), "logged: %s", logged);
}

Test(exec, child_is_reaped_at_end_of_output)
{
    stoker_generator gen;
    start(&gen, "echo 5", "x:float32[1]", EXEC_TEXT);
    float x;
    void *fields[] = {&x};
    pid_t pid = exec_generator_pid(&gen);
    cr_assert_eq(gen.fill(gen.user, 0, 0, fields), STOKER_OK);
    cr_assert_eq(gen.fill(gen.user, 1, 0, fields), STOKER_END_OF_DATA);
    cr_expect_eq(exec_generator_pid(&gen), -1);
    cr_expect_eq(kill(pid, 0), -1, "no zombie after the end");
    stoker_generator_fini(&gen);
}

Test(exec, bad_arguments_are_refused)
{
    stoker_schema s = schema_of("x:float32[1]");
    stoker_generator gen = {0};
    char err[256] = "";
    cr_expect_eq(exec_generator_create("", &s, EXEC_TEXT, &gen, err, sizeof err), STOKER_INVALID);
    cr_expect(strstr(err, "no command"), "%s", err);
    cr_expect_eq(exec_generator_create("echo 1", &s, (exec_format)7, &gen, err, sizeof err),
                 STOKER_INVALID);
    cr_expect_null(gen.user, "out untouched on failure");
    exec_format f;
    cr_expect_eq(exec_format_parse("raw", &f), STOKER_OK);
    cr_expect_eq(f, EXEC_RAW);
    cr_expect_eq(exec_format_parse("text", &f), STOKER_OK);
    cr_expect_eq(f, EXEC_TEXT);
    cr_expect_eq(exec_format_parse("csv", &f), STOKER_INVALID);
}

Test(exec, child_dies_when_the_producer_is_killed)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t producer = fork();
    cr_assert_geq(producer, 0);
    if (producer == 0) {
        // Stands in for a producer process: starts a child, reports its pid, waits to be killed.
        stoker_schema s = schema_of("x:float32[1]");
        stoker_generator gen;
        pid_t child = -1;
        float x;
        void *fields[] = {&x};
        // One example first, so the child has surely exec'd before the pid is reported.
        if (exec_generator_create("echo 1; while :; do sleep 0.05; done", &s, EXEC_TEXT, &gen, NULL,
                                  0) == STOKER_OK &&
            gen.fill(gen.user, 0, 0, fields) == STOKER_OK)
            child = exec_generator_pid(&gen);
        if (write(fds[1], &child, sizeof child) != (ssize_t)sizeof child)
            _exit(1);
        for (;;)
            pause();
    }
    close(fds[1]);
    pid_t child = -1;
    cr_assert_eq(read(fds[0], &child, sizeof child), (ssize_t)sizeof child);
    cr_assert_gt(child, 0);
    cr_assert(!process_gone(child));
    kill(producer, SIGKILL);
    waitpid(producer, NULL, 0);
    for (int i = 0; i < 200 && !process_gone(child); i++)
        usleep(10000);
    bool gone = process_gone(child);
    if (!gone)
        kill(-child, SIGKILL); // leave nothing behind even when the test fails
    cr_expect(gone, "child %d outlived its killed producer", (int)child);
}
