// The chaos test's consumer: a trainer built on libstoker's trainer client that records exactly
// what it trained and what the broker acknowledged, in a log that survives SIGKILL.
//
//   chaos-consumer --broker URL --log PATH [--batch N] [--prefetch N] [--train-ms MIN:MAX]
//                  [--seed N] [--dataset] [--var]
//
// For every batch it appends (one write() each, O_APPEND, so a line is either there or not):
//   "B <lease> <session-hex>:<first_seq>:<count> ..."  before the batch counts as trained;
//   then it "trains" (sleeps MIN..MAX ms), acknowledges the lease and flushes the
//   acknowledgement, and appends
//   "A <lease>"           once the flush returned OK with no acknowledgement refused, or
//   "N <lease> <code>"    when the acknowledgement failed or was refused (not acknowledged).
// It also appends "D <n>" when the client's duplicate counter grew by n, "C" each time it
// connects with a new trainer client, "V s" or "V b" after each "B" line (the batch came through
// the broker's shared memory, or as bytes over the socket), and, when it closes a client,
// "P <delivery> <shm batches> <socket batches> <of those, arena full>" (the client's summary;
// STOKER_SHM=0 in its environment keeps it on the socket).
// A dataset's batch (the broker serves a dataset) is followed by "I <lease> <epoch>:<index> ..."
// (its items, before it counts as trained) and each EPOCH_END event the client heard of by
// "E <epoch>" (after the batch that brought it). With --dataset it ends (exit 0, after an "X"
// line) when the supply ended and the broker's status says its last epoch ended.
// With --var the examples are tests/lib/var_producer.c's: each is checked byte for
// byte against what its seq makes, and one that differs is logged "M <lease> <seq>".
// The supply ending (no producers) or any error other than a stall closes the client and
// connects again; SIGTERM / SIGINT end it cleanly (exit 0). Every wait is bounded by the
// client's stall timeout.
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"
#include "stoker/status.h"
#include "stoker/trainer_client.h"
#include "var_data.h"

static volatile int stop_flag;

static void
on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static int log_fd = -1;

static void
put_line(const char *line, size_t len)
{
    // One write per line: after a SIGKILL a line is either complete or absent.
    while (len > 0) {
        ssize_t n = write(log_fd, line, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "chaos-consumer: write to log: %s\n", strerror(errno));
            exit(1);
        }
        line += n;
        len -= (size_t)n;
    }
}

static void put_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
put_fmt(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line))
        n = (int)strlen(line);
    put_line(line, (size_t)n);
}

static void
usage(void)
{
    fprintf(stderr, "usage: chaos-consumer --broker URL --log PATH [--batch N] [--prefetch N] "
                    "[--train-ms MIN:MAX] [--seed N] [--dataset] [--var]\n");
    exit(2);
}

// Logs the items of a dataset's batch (before it counts as trained).
static void
put_items(const stoker_batch *b, char *line, size_t cap)
{
    if (b->items == NULL)
        return;
    size_t len = (size_t)snprintf(line, cap, "I %" PRIu64, b->lease);
    for (uint32_t i = 0; i < b->chunk.count && len < cap - 32; i++)
        len += (size_t)snprintf(line + len, cap - len, " %u:%" PRIu64,
                                stoker_item_epoch(b->items[i]), stoker_item_index(b->items[i]));
    line[len++] = '\n';
    put_line(line, len);
}

// Logs the EPOCH_END events the client heard of.
static void
put_events(stoker_trainer_client *tc)
{
    stoker_event ev;
    while (stoker_trainer_client_poll_event(tc, &ev)) {
        if (ev.kind == STOKER_EVENT_EPOCH_END)
            put_fmt("E %u\n", ev.epoch);
    }
}

// Whether the broker's dataset is done: its last epoch ended.
static int
dataset_done(const char *url)
{
    stoker_status *st = NULL;
    char err[256] = "";
    if (stoker_status_fetch(url, NULL, 2000, &st, err, sizeof(err)) != STOKER_OK)
        return 0;
    int done = st->epochs_limit > 0 && st->epochs_done >= st->epochs_limit;
    stoker_status_destroy(st);
    return done;
}

// Example i of b against var_producer's example seq: 1 when every byte is as made.
static int
var_exact(const stoker_batch *b, uint32_t i, uint64_t seq)
{
    const stoker_chunk *c = &b->chunk;
    if (c->schema.n_fields != 3 || !c->schema.fields[0].variable || !c->schema.fields[1].variable)
        return 0;
    int64_t label;
    memcpy(&label, c->data[2] + (size_t)i * 8, 8);
    uint64_t rows;
    const int32_t *t = stoker_chunk_var_value(c, 0, i, &rows);
    if ((uint64_t)label != seq || rows != var_tokens(seq))
        return 0;
    for (uint32_t j = 0; j < rows; j++)
        if (t[j] != var_token(seq, j))
            return 0;
    const float *p = stoker_chunk_var_value(c, 1, i, &rows);
    if (rows != var_points(seq))
        return 0;
    for (uint32_t r = 0; r < rows; r++) {
        float want[3];
        var_point(seq, r, want);
        if (memcmp(p + 3 * r, want, sizeof want) != 0)
            return 0;
    }
    return 1;
}

static void
check_var(const stoker_batch *b)
{
    uint32_t at = 0;
    for (uint32_t r = 0; r < b->n_runs; r++) {
        for (uint32_t k = 0; k < b->runs[r].count && at < b->chunk.count; k++, at++) {
            uint64_t seq = b->runs[r].first_seq + k;
            if (!var_exact(b, at, seq)) {
                put_fmt("M %" PRIu64 " %" PRIu64 "\n", b->lease, seq);
                fprintf(stderr,
                        "chaos-consumer: lease %" PRIu64 ": example %" PRIu64
                        " is not what its producer made\n",
                        b->lease, seq);
            }
        }
    }
}

int
main(int argc, char **argv)
{
    const char *url = NULL, *log_path = NULL;
    unsigned batch = 8, prefetch = 4, train_min = 0, train_max = 3;
    uint64_t seed = 1;
    int dataset = 0, var = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--dataset") == 0) {
            dataset = 1;
            continue;
        }
        if (strcmp(a, "--var") == 0) {
            var = 1;
            continue;
        }
        if (v == NULL)
            usage();
        if (strcmp(a, "--broker") == 0)
            url = v;
        else if (strcmp(a, "--log") == 0)
            log_path = v;
        else if (strcmp(a, "--batch") == 0)
            batch = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--prefetch") == 0)
            prefetch = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--train-ms") == 0) {
            if (sscanf(v, "%u:%u", &train_min, &train_max) != 2 || train_max < train_min)
                usage();
        } else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, NULL, 10);
        else
            usage();
        i++;
    }
    if (url == NULL || log_path == NULL || batch == 0 || prefetch == 0)
        usage();
    log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        fprintf(stderr, "chaos-consumer: %s: %s\n", log_path, strerror(errno));
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    stoker_log_init("chaos-consumer", STOKER_LOG_WARN);

    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    char line[8192];
    while (!stop_flag) {
        stoker_trainer_options opts;
        stoker_trainer_options_init(&opts);
        opts.client.url = url;
        opts.client.name = "chaos-consumer";
        opts.client.stop = &stop_flag;
        opts.client.request_timeout_ms = 2000;
        opts.client.reconnect_max_ms = 100;
        opts.client.give_up_ms = 5000;
        opts.batch_size = batch;
        opts.prefetch = prefetch;
        opts.stall_timeout_ms = 1000;
        stoker_trainer_client *tc = NULL;
        char err[256] = "";
        int rv = stoker_trainer_client_create(&opts, &tc, err, sizeof(err));
        if (rv != STOKER_OK) {
            if (rv != STOKER_INTERRUPTED)
                fprintf(stderr, "chaos-consumer: connect: %s (%s)\n", stoker_strerror(rv), err);
            stoker_sleep_ms(50, &stop_flag);
            continue;
        }
        put_line("C\n", 2);
        uint64_t dups_logged = 0;
        while (!stop_flag) {
            stoker_batch *b = NULL;
            rv = stoker_trainer_client_next(tc, &b);
            put_events(tc);
            if (rv == STOKER_STALLED)
                continue;
            if (rv != STOKER_OK)
                break;
            size_t len = (size_t)snprintf(line, sizeof(line), "B %" PRIu64, b->lease);
            uint64_t covered = 0;
            for (uint32_t i = 0; i < b->n_runs && len < sizeof(line) - 64; i++) {
                len += (size_t)snprintf(line + len, sizeof(line) - len,
                                        " %016" PRIx64 ":%" PRIu64 ":%u", b->runs[i].session,
                                        b->runs[i].first_seq, b->runs[i].count);
                covered += b->runs[i].count;
            }
            line[len++] = '\n';
            put_line(line, len);
            put_line(b->arena != NULL ? "V s\n" : "V b\n", 4);
            if (covered != b->chunk.count)
                fprintf(stderr,
                        "chaos-consumer: lease %" PRIu64 ": runs cover %" PRIu64
                        " examples, batch has %u\n",
                        b->lease, covered, b->chunk.count);
            put_items(b, line, sizeof(line));
            if (var)
                check_var(b);
            uint64_t d = stoker_trainer_client_duplicates(tc);
            if (d > dups_logged) {
                put_fmt("D %" PRIu64 "\n", d - dups_logged);
                dups_logged = d;
            }
            // Training: hold the lease a little while, so kills find leases in flight.
            unsigned ms =
                train_min + (unsigned)(stoker_rng_u64(&rng) % (train_max - train_min + 1));
            if (ms > 0)
                stoker_sleep_ms(ms, NULL);
            uint64_t refused = stoker_trainer_client_acks_refused(tc);
            stoker_trainer_client_ack(tc, b->lease);
            int frv = stoker_trainer_client_flush(tc);
            if (frv == STOKER_OK && stoker_trainer_client_acks_refused(tc) == refused)
                put_fmt("A %" PRIu64 "\n", b->lease);
            else
                put_fmt("N %" PRIu64 " %d\n", b->lease, frv);
            stoker_batch_destroy(b);
        }
        if (rv != STOKER_OK && rv != STOKER_INTERRUPTED && rv != STOKER_NO_PRODUCERS &&
            rv != STOKER_END_OF_DATA)
            fprintf(stderr, "chaos-consumer: next: %s\n", stoker_strerror(rv));
        // The reply that ended the supply may carry the last epoch's end with it.
        put_events(tc);
        put_fmt("P %s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", stoker_trainer_client_delivery(tc),
                stoker_trainer_client_arena_batches(tc), stoker_trainer_client_socket_batches(tc),
                stoker_trainer_client_arena_full_batches(tc));
        stoker_trainer_client_destroy(tc);
        if (dataset && (rv == STOKER_NO_PRODUCERS || rv == STOKER_END_OF_DATA) &&
            dataset_done(url)) {
            put_line("X\n", 2);
            break;
        }
        // The supply ended (every producer gone, nothing queued) or an error: connect again.
        if (!stop_flag)
            stoker_sleep_ms(20, &stop_flag);
    }
    close(log_fd);
    return 0;
}
