// stoker-bench-consumer: pulls batches and acknowledges them, doing nothing else, and prints one
// JSON line with what it measured. Events are printed as they arrive with the CLOCK_MONOTONIC
// time they were seen ("event KIND NAME T"), which the harness compares with the time it sent a
// signal (Python's time.monotonic() reads the same clock).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/chunk.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/cli.h"
#include "stoker/trainer_client.h"

static void
print_event(const stoker_event *e, void *arg)
{
    (void)arg;
    printf("event %s %s %.6f\n", stoker_event_kind_name(e->kind), e->name,
           (double)stoker_now_ns() / 1e9);
    fflush(stdout);
}

typedef struct bench_options {
    stoker_trainer_options feed;
    uint64_t examples; // stop after this many (UINT64_MAX: until the supply ends)
} bench_options;

#define AT(member) STOKER_CLI_AT(bench_options, member)
static const stoker_cli_option rows[] = {
    {"batch-size", "N", "examples per pull", STOKER_CLI_UINT, AT(feed.batch_size), .imin = 1,
     .imax = 1u << 20},
    {"prefetch", "N", "pull requests in flight", STOKER_CLI_UINT, AT(feed.prefetch), .imin = 1,
     .imax = 64},
    {"examples", "N", "stop after N examples (default: until the supply ends)", STOKER_CLI_UINT,
     AT(examples), .imin = 1, .imax = UINT64_MAX},
    {"stall-timeout", "SEC", "stop when no batch arrives for this long", STOKER_CLI_SECONDS_MS,
     AT(feed.stall_timeout_ms), .dmin = 0.05, .dmax = 3600},
};

int
main(int argc, char **argv)
{
    stoker_process_init();
    bench_options o = {.examples = UINT64_MAX};
    stoker_trainer_options_init(&o.feed);
    o.feed.on_event = print_event;
    stoker_cli cli;
    stoker_cli_init(&cli, "stoker-bench-consumer", "--broker URL [options]",
                    "Pulls and acknowledges batches, doing nothing else, and prints one JSON "
                    "line\nwith what it measured.",
                    STOKER_LOG_WARN);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_broker_rows), &o.feed.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_tls_rows), &o.feed.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(rows), &o);
    int code = stoker_cli_parse(&cli, argc, argv);
    if (code >= 0)
        return code;
    if (stoker_cli_require(&cli, "broker", NULL) != 0 ||
        stoker_cli_check_tls(&cli, &o.feed.client) != 0)
        return 2;
    stoker_log_init("bench-consumer", cli.log_level);
    stoker_trainer_client *tc;
    char err[256];
    int rv = stoker_trainer_client_create(&o.feed, &tc, err, sizeof(err));
    if (rv != STOKER_OK) {
        fprintf(stderr, "stoker-bench-consumer: %s\n", err);
        return 1;
    }
    uint64_t examples = 0, bytes = 0, batches = 0;
    uint64_t start = 0, end = 0;
    while (examples < o.examples) {
        stoker_batch *b;
        rv = stoker_trainer_client_next(tc, &b);
        if (rv != STOKER_OK)
            break;
        if (start == 0)
            start = stoker_now_ns(); // from the first batch: steady state, not connection setup
        else
            examples += b->chunk.count;
        for (uint32_t i = 0; i < b->chunk.schema.n_fields; i++) // variable fields: values
            bytes += stoker_chunk_field_bytes(&b->chunk, i, 0, b->chunk.count);
        batches++;
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
        end = stoker_now_ns();
    }
    double seconds = end > start ? (double)(end - start) / 1e9 : 0;
    printf("{\"status\": \"%s\", \"examples\": %llu, \"batches\": %llu, \"seconds\": %.6f, "
           "\"examples_per_second\": %.1f, \"bytes_per_second\": %.1f, \"duplicates\": %llu}\n",
           rv == STOKER_OK ? "ok" : stoker_errname(rv), (unsigned long long)examples,
           (unsigned long long)batches, seconds, seconds > 0 ? examples / seconds : 0,
           seconds > 0 ? (double)bytes / seconds : 0,
           (unsigned long long)stoker_trainer_client_duplicates(tc));
    stoker_trainer_client_destroy(tc);
    return 0;
}
