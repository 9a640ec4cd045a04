// stoker-bench-consumer: pulls batches and acknowledges them, doing nothing else, and prints one
// JSON line with what it measured. Events are printed as they arrive with the CLOCK_MONOTONIC
// time they were seen ("event KIND NAME T"), which the harness compares with the time it sent a
// signal (Python's time.monotonic() reads the same clock).
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/opts.h"
#include "stoker/trainer_client.h"

static void
print_event(const stoker_event *e, void *arg)
{
    (void)arg;
    printf("event %s %s %.6f\n", stoker_event_kind_name(e->kind), e->name,
           (double)stoker_now_ns() / 1e9);
    fflush(stdout);
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, 'b'},
        {"batch-size", required_argument, NULL, 'B'},
        {"prefetch", required_argument, NULL, 'p'},
        {"examples", required_argument, NULL, 'n'},
        {"stall-timeout", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.on_event = print_event;
    uint64_t want = UINT64_MAX, u;
    double d;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            o.client.url = optarg;
            break;
        case 'B':
            if (stoker_parse_u64(optarg, 1, 1u << 20, &u) != STOKER_OK)
                goto usage;
            o.batch_size = (uint32_t)u;
            break;
        case 'p':
            if (stoker_parse_u64(optarg, 1, 64, &u) != STOKER_OK)
                goto usage;
            o.prefetch = (uint32_t)u;
            break;
        case 'n':
            if (stoker_parse_u64(optarg, 1, UINT64_MAX, &want) != STOKER_OK)
                goto usage;
            break;
        case 's':
            if (stoker_parse_double(optarg, 0.05, 3600, &d) != STOKER_OK)
                goto usage;
            o.stall_timeout_ms = (uint32_t)(d * 1000);
            break;
        default:
            goto usage;
        }
    }
    if (o.client.url == NULL || optind != argc)
        goto usage;
    stoker_log_init("bench-consumer", STOKER_LOG_WARN);
    stoker_trainer_client *tc;
    char err[256];
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    if (rv != STOKER_OK) {
        fprintf(stderr, "stoker-bench-consumer: %s\n", err);
        return 1;
    }
    uint64_t examples = 0, bytes = 0, batches = 0;
    uint64_t start = 0, end = 0;
    while (examples < want) {
        stoker_batch *b;
        rv = stoker_trainer_client_next(tc, &b);
        if (rv != STOKER_OK)
            break;
        if (start == 0)
            start = stoker_now_ns(); // from the first batch: steady state, not connection setup
        else
            examples += b->chunk.count;
        for (uint32_t i = 0; i < b->chunk.schema.n_fields; i++)
            bytes += stoker_field_bytes(&b->chunk.schema.fields[i]) * b->chunk.count;
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
usage:
    fprintf(stderr, "usage: stoker-bench-consumer --broker URL [--batch-size N] [--prefetch N] "
                    "[--examples N] [--stall-timeout SEC]\n");
    return 2;
}
