// Datasets end to end: the real broker with --dataset-size, real producers with
// --items, and libstoker's trainer client checking every batch's items. Every index exactly
// once per epoch while producers are SIGKILLed, SIGSTOPped and restarted mid-epoch, each
// EPOCH_END after its epoch's last item; the same seed gives the same order and the same data
// whoever makes an item; producers whose dataset differs are refused.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include <criterion/criterion.h>
#include <png.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"

TestSuite(dataset, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

#define MAX_EPOCHS 4

// What a trainer saw: per epoch, how often each index came, and the epochs ended in order.
typedef struct seen {
    uint64_t n_items;
    uint32_t epochs;
    uint8_t *count[MAX_EPOCHS]; // (n_items,)
    uint64_t total;
    uint32_t ended[MAX_EPOCHS];
    uint32_t n_ended;
    uint64_t *order; // items in delivery order (when order_cap > 0)
    uint8_t *bytes;  // each delivered example's bytes (when order_cap > 0)
    size_t stride;   // bytes kept per example
    uint64_t order_cap;
} seen;

static void seen_init_stride(seen *s, uint64_t n_items, uint32_t epochs, uint64_t order_cap,
                             size_t stride);

static void
seen_init(seen *s, uint64_t n_items, uint32_t epochs, uint64_t order_cap)
{
    seen_init_stride(s, n_items, epochs, order_cap, 64);
}

static void
seen_init_stride(seen *s, uint64_t n_items, uint32_t epochs, uint64_t order_cap, size_t stride)
{
    memset(s, 0, sizeof(*s));
    s->n_items = n_items;
    s->epochs = epochs;
    for (uint32_t e = 0; e < epochs; e++)
        s->count[e] = calloc(n_items, 1);
    s->order_cap = order_cap;
    s->stride = stride;
    if (order_cap > 0) {
        s->order = calloc(order_cap, sizeof(*s->order));
        s->bytes = calloc(order_cap, stride);
    }
}

static void
seen_fini(seen *s)
{
    for (uint32_t e = 0; e < s->epochs; e++)
        free(s->count[e]);
    free(s->order);
    free(s->bytes);
}

// Asserts epoch e is complete: every index exactly once.
static void
assert_epoch_complete(const seen *s, uint32_t e)
{
    for (uint64_t i = 0; i < s->n_items; i++)
        cr_assert_eq(s->count[e][i], 1, "epoch %u: index %llu delivered %u times", e,
                     (unsigned long long)i, s->count[e][i]);
}

static void
take_events(stoker_trainer_client *tc, seen *s)
{
    stoker_event ev;
    while (stoker_trainer_client_poll_event(tc, &ev)) {
        if (ev.kind != STOKER_EVENT_EPOCH_END)
            continue;
        cr_assert_lt(s->n_ended, s->epochs, "more epoch ends than epochs");
        cr_assert_eq(ev.epoch, s->n_ended, "epoch %u ended, expected %u next", ev.epoch,
                     s->n_ended);
        // The boundary comes after the epoch's last item.
        assert_epoch_complete(s, ev.epoch);
        s->ended[s->n_ended++] = ev.epoch;
    }
}

// Records batch b's items.
static void
record(seen *s, const stoker_batch *b)
{
    cr_assert_not_null(b->items, "a dataset's batch carries its items");
    for (uint32_t i = 0; i < b->chunk.count; i++) {
        uint32_t e = stoker_item_epoch(b->items[i]);
        uint64_t idx = stoker_item_index(b->items[i]);
        cr_assert_lt(e, s->epochs, "item of epoch %u beyond the broker's %u", e, s->epochs);
        cr_assert_lt(idx, s->n_items, "index %llu beyond the dataset", (unsigned long long)idx);
        cr_assert_lt(s->n_ended, e + 1, "item of epoch %u after that epoch ended", e);
        s->count[e][idx]++;
        if (s->total < s->order_cap) {
            s->order[s->total] = b->items[i];
            size_t off = 0;
            for (uint32_t f = 0; f < b->chunk.schema.n_fields; f++) {
                size_t w = stoker_field_bytes(&b->chunk.schema.fields[f]);
                cr_assert_leq(off + w, s->stride);
                memcpy(s->bytes + s->total * s->stride + off, stoker_chunk_at(&b->chunk, f, i), w);
                off += w;
            }
        }
        s->total++;
    }
}

// Pulls one batch into s and acknowledges it. Returns next's code.
static int
pull_one(stoker_trainer_client *tc, seen *s)
{
    stoker_batch *b = NULL;
    int rv = stoker_trainer_client_next(tc, &b);
    take_events(tc, s);
    if (rv != STOKER_OK)
        return rv;
    record(s, b);
    stoker_trainer_client_ack(tc, b->lease);
    stoker_batch_destroy(b);
    return STOKER_OK;
}

// Pulls until the supply ends (asserting it ends within timeout_ms).
static void
drain(stoker_trainer_client *tc, seen *s, int timeout_ms)
{
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    int rv;
    while ((rv = pull_one(tc, s)) == STOKER_OK || rv == STOKER_STALLED)
        cr_assert_lt(stoker_now_ms(), deadline, "the dataset did not end within %d ms", timeout_ms);
    cr_assert(rv == STOKER_END_OF_DATA || rv == STOKER_NO_PRODUCERS, "supply ended with %s",
              stoker_strerror(rv));
}

static proc_child *
dataset_producer(const char *url, const char *name, const char *items)
{
    return e2e_producer_start(
        url, name, PROC_ARGS("--items", items, "--chunk", "8", "--delay", "0.0001:0.0004"));
}

Test(dataset, every_index_once_per_epoch_while_producers_die_freeze_and_return)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(
        url, PROC_ARGS("--dataset-size", "10000", "--epochs", "3", "--shuffle-seed", "5",
                       "--producer-timeout", "0.5", "--shard-items", "32"));
    proc_child *p[8];
    char name[8][16];
    for (int i = 0; i < 4; i++) {
        snprintf(name[i], sizeof(name[i]), "p%d", i);
        p[i] = dataset_producer(url, name[i], "10000");
    }
    stoker_trainer_client *tc = e2e_trainer_client(url, 64, 8000);
    seen s;
    seen_init(&s, 10000, 3, 0);
    // Kills, a freeze longer than the producer timeout and restarts, each mid-epoch.
    int step = 0, next_id = 4;
    uint64_t frozen_at = 0;
    int rv;
    uint64_t deadline = stoker_now_ms() + 150000;
    while ((rv = pull_one(tc, &s)) == STOKER_OK || rv == STOKER_STALLED) {
        cr_assert_lt(stoker_now_ms(), deadline, "three epochs did not end in time");
        if (step == 0 && s.total >= 3000) { // epoch 0: one killed, one new
            proc_signal(p[0], SIGKILL);
            snprintf(name[next_id], sizeof(name[0]), "p%d", next_id);
            p[next_id] = dataset_producer(url, name[next_id], "10000");
            next_id++;
            step++;
        } else if (step == 1 && s.total >= 8000) { // epoch 0: one frozen past its timeout
            proc_signal(p[1], SIGSTOP);
            frozen_at = stoker_now_ms();
            step++;
        } else if (step == 2 && stoker_now_ms() >= frozen_at + 1500) { // it comes back late
            proc_signal(p[1], SIGCONT);
            step++;
        } else if (step == 3 && s.total >= 15000) { // epoch 1: killed and restarted
            proc_signal(p[2], SIGKILL);
            snprintf(name[next_id], sizeof(name[0]), "p%d", next_id);
            p[next_id] = dataset_producer(url, name[next_id], "10000");
            next_id++;
            step++;
        } else if (step == 4 && s.total >= 24000) { // epoch 2: another one killed
            proc_signal(p[3], SIGKILL);
            step++;
        }
    }
    cr_assert(rv == STOKER_END_OF_DATA || rv == STOKER_NO_PRODUCERS, "supply ended with %s",
              stoker_strerror(rv));
    cr_assert_eq(step, 5, "only %d of the 5 disruptions happened", step);
    cr_assert_eq(s.n_ended, 3, "%u epoch ends, expected 3", s.n_ended);
    for (uint32_t e = 0; e < 3; e++)
        assert_epoch_complete(&s, e);
    cr_assert_eq(s.total, 30000, "%llu examples delivered, expected 30000",
                 (unsigned long long)s.total);
    cr_assert_eq(stoker_trainer_client_duplicates(tc), 0);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->dataset_size, 10000);
    cr_assert_eq(st->epochs_done, 3);
    cr_assert_gt(st->items_reassigned, 0, "the lost producers' shards were handed out again");
    fprintf(stderr, "dataset under kills: %llu items reassigned, %llu pushes revoked\n",
            (unsigned long long)st->items_reassigned, (unsigned long long)st->pushes_revoked);
    stoker_status_destroy(st);
    h_assert_identity(url);
    // Nothing hangs at the end: the producers still alive said goodbye on their own.
    for (int i = 0; i < next_id; i++) {
        if (i == 0 || i == 2 || i == 3)
            continue;
        proc_assert_exit(p[i], 0, 10000);
    }
    stoker_trainer_client_destroy(tc);
    seen_fini(&s);
    proc_broker_stop(broker);
}

// The last epoch's end comes from the trainer's last acknowledgement, which can follow the reply
// that ended the supply (a pull sent ahead was answered "ended" while the last batch was being
// trained): the client still reports that epoch's end before the end of the supply.
Test(dataset, the_last_epoch_end_is_heard_when_the_supply_ended_before_its_last_ack)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--dataset-size", "64", "--epochs", "1", "--shard-items",
                                        "64", "--producer-timeout", "0.3"));
    proc_child *p = e2e_producer_start(
        url, "once", PROC_ARGS("--items", "64", "--chunk", "64", "--delay", "0:0"));
    stoker_trainer_client *tc = e2e_trainer_client(url, 64, 8000);
    seen s;
    seen_init(&s, 64, 1, 0);
    stoker_batch *b = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &b), STOKER_OK);
    take_events(tc, &s);
    record(&s, b);
    // Held, not acknowledged, while the producer is killed and declared lost: the pull sent
    // ahead is answered with the end of the supply while the epoch still waits for this batch.
    proc_signal(p, SIGKILL);
    cr_assert(proc_wait(p, 5000), "the producer did not die of SIGKILL");
    stoker_sleep_ms(1000, NULL);
    cr_assert_eq(s.n_ended, 0, "the epoch ended before its last batch was acknowledged");
    stoker_trainer_client_ack(tc, b->lease);
    stoker_batch_destroy(b);
    int rv = pull_one(tc, &s);
    cr_assert_eq(rv, STOKER_NO_PRODUCERS, "supply ended with %s", stoker_strerror(rv));
    cr_assert_eq(s.n_ended, 1, "the epoch's end was not reported before the end of the supply");
    assert_epoch_complete(&s, 0);
    stoker_trainer_client_destroy(tc);
    seen_fini(&s);
    proc_broker_stop(broker);
}

// One producer, so delivery follows the broker's order; seed and producer name as given.
static void
one_run(seen *s, const char *seed, const char *producer_name, const char *dir_name)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), dir_name);
    proc_child *broker = e2e_broker_start(
        url, PROC_ARGS("--dataset-size", "300", "--epochs", "2", "--shuffle-seed", seed));
    proc_child *p = dataset_producer(url, producer_name, "300");
    // One pull in flight, so batches arrive in the broker's order.
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.batch_size = 16;
    o.prefetch = 1;
    o.stall_timeout_ms = 8000;
    stoker_trainer_client *tc = NULL;
    char err[256] = "";
    cr_assert_eq(stoker_trainer_client_create(&o, &tc, err, sizeof(err)), STOKER_OK, "%s", err);
    seen_init(s, 300, 2, 600);
    drain(tc, s, 60000);
    cr_assert_eq(s->n_ended, 2);
    cr_assert_eq(s->total, 600);
    proc_assert_exit(p, 0, 10000);
    stoker_trainer_client_destroy(tc);
    proc_broker_stop(broker);
}

Test(dataset, same_seed_same_order_and_same_data_whoever_makes_an_item)
{
    seen a, b, c;
    one_run(&a, "9", "alpha", "a");
    one_run(&b, "9", "beta", "b");
    one_run(&c, "10", "alpha", "c");
    cr_assert_eq(memcmp(a.order, b.order, 600 * sizeof(uint64_t)), 0,
                 "two runs with seed 9 delivered different orders");
    cr_assert_eq(memcmp(a.bytes, b.bytes, 600 * 64), 0,
                 "the same item of the same epoch differs between producers");
    cr_assert_neq(memcmp(a.order, c.order, 600 * sizeof(uint64_t)), 0,
                  "seeds 9 and 10 gave the same order");
    // Epochs are different permutations, and an item is augmented afresh in each epoch.
    cr_assert_neq(memcmp(a.order, a.order + 300, 300 * sizeof(uint64_t)), 0);
    seen_fini(&a);
    seen_fini(&b);
    seen_fini(&c);
}

Test(dataset, producers_whose_dataset_differs_are_refused)
{
    char url[256], stream_url[256];
    testdir_ipc_url(url, sizeof(url), "ds");
    testdir_ipc_url(stream_url, sizeof(stream_url), "st");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--dataset-size", "100"));
    proc_child *streams = e2e_broker_start(stream_url, NULL);
    proc_child *other_size = dataset_producer(url, "other-size", "99");
    proc_assert_exit(other_size, 1, 10000);
    cr_assert(testdir_contains(other_size->err_path, "dataset mismatch"));
    proc_child *stream = e2e_producer_start(url, "stream", PROC_ARGS("--delay", "0:0"));
    proc_assert_exit(stream, 1, 10000);
    cr_assert(testdir_contains(stream->err_path, "serves a stream"));
    proc_child *to_streams = dataset_producer(stream_url, "to-streams", "100");
    proc_assert_exit(to_streams, 1, 10000);
    cr_assert(testdir_contains(to_streams->err_path, "the broker streams"));
    // A dataset of size 0 is refused on the command line, with the flag named.
    proc_child *zero =
        e2e_start("broker0", "STOKER_BROKER_BIN",
                  PROC_ARGS("--listen", "ipc:///nonexistent/x", "--dataset-size", "0"));
    proc_assert_exit(zero, 2, 10000);
    cr_assert(testdir_contains(zero->err_path, "--dataset-size"));
    proc_child *zero_items =
        e2e_producer_start(url, "zero", PROC_ARGS("--items", "0", "--delay", "0:0"));
    proc_assert_exit(zero_items, 2, 10000);
    cr_assert(testdir_contains(zero_items->err_path, "--items"));
    proc_broker_stop(streams);
    proc_broker_stop(broker);
}

// --- images over a folder ------------------------------------------------------------------------

#define IMG_SIDE  16
#define IMG_BYTES (3 * IMG_SIDE * IMG_SIDE * 4 + 8) // float32 pixels, int64 label

// DIR/name: two classes of three PNGs each (file names from names[6]).
static const char *
write_folder(const char *name, const char *const names[6])
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", testdir_file(name));
    cr_assert_eq(mkdir(dir, 0755), 0);
    for (int c = 0; c < 2; c++) {
        char sub[600];
        snprintf(sub, sizeof(sub), "%s/class%d", dir, c);
        cr_assert_eq(mkdir(sub, 0755), 0);
        for (int i = 0; i < 3; i++) {
            uint32_t w = 20 + 7 * (uint32_t)i, h = 24 + 5 * (uint32_t)c;
            uint8_t *rgb = malloc((size_t)w * h * 3);
            for (uint32_t k = 0; k < w * h * 3; k++)
                rgb[k] = (uint8_t)(k * 7 + (uint32_t)(c * 50 + i * 20));
            png_image png;
            memset(&png, 0, sizeof(png));
            png.version = PNG_IMAGE_VERSION;
            png.width = w;
            png.height = h;
            png.format = PNG_FORMAT_RGB;
            char path[800];
            snprintf(path, sizeof(path), "%s/%s", sub, names[c * 3 + i]);
            cr_assert(png_image_write_to_file(&png, path, 0, rgb, 0, NULL), "png %s", path);
            free(rgb);
        }
    }
    return testdir_file(name);
}

static const char *const NAMES[6] = {"a.png", "b.png", "c.png", "d.png", "e.png", "f.png"};

// One images producer over folder (decode once or each) for a broker of 6 items, 2 epochs.
static void
images_run(seen *s, const char *folder, const char *decode, const char *url_name)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), url_name);
    proc_child *broker = e2e_broker_start(
        url, PROC_ARGS("--dataset-size", "6", "--epochs", "2", "--shuffle-seed", "3"));
    proc_child *p =
        e2e_producer_start(url, url_name,
                           PROC_ARGS("--generator", "images", "--images", folder, "--size", "16",
                                     "--decode", decode, "--dataset", "--chunk", "2"));
    // One pull in flight: with two, the replies bringing epoch 0's and epoch 1's ends (this
    // run is short) may complete swapped, and take_events asserts the ends in order.
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.batch_size = 4;
    o.prefetch = 1;
    o.stall_timeout_ms = 8000;
    stoker_trainer_client *tc = NULL;
    char err[256] = "";
    cr_assert_eq(stoker_trainer_client_create(&o, &tc, err, sizeof(err)), STOKER_OK, "%s", err);
    seen_init_stride(s, 6, 2, 12, IMG_BYTES);
    drain(tc, s, 60000);
    cr_assert_eq(s->total, 12);
    cr_assert_eq(s->n_ended, 2);
    proc_assert_exit(p, 0, 10000);
    stoker_trainer_client_destroy(tc);
    proc_broker_stop(broker);
}

Test(dataset, images_same_item_same_pixels_whoever_makes_it)
{
    const char *a = write_folder("imgs_a", NAMES);
    char folder_a[512];
    snprintf(folder_a, sizeof(folder_a), "%s", a);
    const char *b = write_folder("imgs_b", NAMES); // a copy on "another box"
    char folder_b[512];
    snprintf(folder_b, sizeof(folder_b), "%s", b);
    seen x, y;
    images_run(&x, folder_a, "once", "img1");
    images_run(&y, folder_b, "each", "img2");
    // Match items by identity: the two runs need not deliver them in the same order.
    for (int i = 0; i < 12; i++) {
        int j = 0;
        while (j < 12 && y.order[j] != x.order[i])
            j++;
        cr_assert_lt(j, 12, "item %llx of one run is missing from the other",
                     (unsigned long long)x.order[i]);
        cr_assert_eq(memcmp(x.bytes + i * IMG_BYTES, y.bytes + j * IMG_BYTES, IMG_BYTES), 0,
                     "item %llu of epoch %u differs between producers",
                     (unsigned long long)stoker_item_index(x.order[i]),
                     stoker_item_epoch(x.order[i]));
    }
    // Each epoch augments afresh: item k of epoch 0 and of epoch 1 differ.
    for (int i = 0; i < 6; i++) {
        for (int j = 6; j < 12; j++) {
            if (stoker_item_index(x.order[i]) == stoker_item_index(x.order[j]))
                cr_assert_neq(memcmp(x.bytes + i * IMG_BYTES, x.bytes + j * IMG_BYTES, IMG_BYTES),
                              0, "item %llu looks the same in both epochs",
                              (unsigned long long)stoker_item_index(x.order[i]));
        }
    }
    seen_fini(&x);
    seen_fini(&y);
}

Test(dataset, images_with_another_listing_are_refused)
{
    static const char *const renamed[6] = {"a.png", "b.png", "c.png", "d.png", "e.png", "g.png"};
    char folder_a[512], folder_b[512];
    snprintf(folder_a, sizeof(folder_a), "%s", write_folder("same", NAMES));
    snprintf(folder_b, sizeof(folder_b), "%s", write_folder("renamed", renamed));
    char url[256];
    testdir_ipc_url(url, sizeof(url), "lst");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--dataset-size", "6"));
    proc_child *first = e2e_producer_start(
        url, "first",
        PROC_ARGS("--generator", "images", "--images", folder_a, "--size", "16", "--dataset"));
    cr_assert(h_wait_producer(url, "first", 1, 10000), "the first images producer never pushed");
    proc_child *other = e2e_producer_start(
        url, "other",
        PROC_ARGS("--generator", "images", "--images", folder_b, "--size", "16", "--dataset"));
    proc_assert_exit(other, 1, 10000);
    cr_assert(testdir_contains(other->err_path, "lists other items"));
    proc_stop(first, 5000);
    proc_broker_stop(broker);
}

// --- exec fed indices ----------------------------------------------------------------------------

#define EXEC_SCHEMA "input:float32[10],output:float32[1]"
// Item i: input[0] = i, output = the seed's low digits are not checked; output = 2i.
// Item i: input[0] = i, output = 2i (sh's read takes one line at a time, unbuffered).
#define EXEC_ITEMS "while read i s; do echo \"$i 0 0 0 0 0 0 0 0 0 $((2 * i))\"; done"

Test(dataset, exec_makes_the_item_it_is_asked_for)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "exec");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--dataset-size", "50", "--epochs", "2"));
    proc_child *p =
        e2e_producer_start(url, "exec",
                           PROC_ARGS("--generator", "exec", "--exec", EXEC_ITEMS, "--schema",
                                     EXEC_SCHEMA, "--items", "50", "--chunk", "4"));
    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 8000);
    seen s;
    seen_init(&s, 50, 2, 100);
    drain(tc, &s, 60000);
    cr_assert_eq(s.total, 100);
    cr_assert_eq(s.n_ended, 2);
    for (uint64_t k = 0; k < 100; k++) {
        float v[11];
        memcpy(v, s.bytes + k * s.stride, sizeof(v));
        uint64_t idx = stoker_item_index(s.order[k]);
        cr_assert_eq(v[0], (float)idx, "item %llu carries input[0] = %g", (unsigned long long)idx,
                     v[0]);
        cr_assert_eq(v[10], (float)(2 * idx));
    }
    proc_assert_exit(p, 0, 10000);
    stoker_trainer_client_destroy(tc);
    seen_fini(&s);
    proc_broker_stop(broker);
}

Test(dataset, exec_that_cannot_make_an_index_fails_and_its_items_go_to_others)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "exec_range");
    proc_child *broker = e2e_broker_start(
        url, PROC_ARGS("--dataset-size", "20", "--epochs", "1", "--producer-timeout", "0.5"));
    // Knows only items 0..4: exits 3 when asked for another.
    proc_child *bad = e2e_producer_start(
        url, "short",
        PROC_ARGS("--generator", "exec", "--exec",
                  "while read i s; do [ $i -ge 5 ] && exit 3; echo \"$i 0 0 0 0 0 0 0 0 0 0\"; "
                  "done",
                  "--schema", EXEC_SCHEMA, "--items", "20", "--chunk", "1"));
    proc_assert_exit(bad, 1, 15000);
    cr_assert(testdir_contains(bad->err_path, "failed on item") ||
                  testdir_contains(bad->err_path, "without writing item"),
              "the producer names the item its command could not make");
    // A producer that knows them all finishes the epoch.
    proc_child *good = e2e_producer_start(url, "full",
                                          PROC_ARGS("--generator", "exec", "--exec", EXEC_ITEMS,
                                                    "--schema", EXEC_SCHEMA, "--items", "20"));
    cr_assert(h_wait_producer(url, "full", 1, 10000), "the second producer never pushed");
    stoker_trainer_client *tc = e2e_trainer_client(url, 4, 8000);
    seen s;
    seen_init(&s, 20, 1, 0);
    drain(tc, &s, 60000);
    cr_assert_eq(s.n_ended, 1);
    assert_epoch_complete(&s, 0);
    proc_assert_exit(good, 0, 10000);
    stoker_trainer_client_destroy(tc);
    seen_fini(&s);
    proc_broker_stop(broker);
}

// A producer asks for its next shard while its current one's last pushes are in flight, so it
// may hold two when it dies: both go back, and the one asked ahead is made once, by others.
Test(dataset, producer_killed_holding_two_shards_hands_both_back)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "two_shards");
    // A queue of 8 examples and no trainer yet: the victim's second push waits for room, so
    // it has made its first shard (16 items, two chunks) and asked for the next one.
    proc_child *broker = e2e_broker_start(
        url, PROC_ARGS("--dataset-size", "200", "--epochs", "1", "--shard-items", "16",
                       "--queue-depth", "8", "--producer-timeout", "0.5", "--log-level", "debug"));
    proc_child *victim = e2e_producer_start(
        url, "victim",
        PROC_ARGS("--items", "200", "--chunk", "8", "--delay", "0:0", "--retain", "0"));
    uint64_t deadline = stoker_now_ms() + 10000;
    while (!testdir_contains(broker->err_path, "'victim', which holds 2")) {
        cr_assert_lt(stoker_now_ms(), deadline, "the victim never held two shards");
        stoker_sleep_ms(10, NULL);
    }
    cr_assert(h_wait_producer(url, "victim", 8, 10000), "the victim's first push never landed");
    stoker_sleep_ms(100, NULL); // its second push is parked for room, its next shard begun
    proc_signal(victim, SIGKILL);
    proc_wait(victim, 5000);
    // Both shards go back: the first one's 8 unpushed items and the second one's 16.
    stoker_status *st = NULL;
    deadline = stoker_now_ms() + 10000;
    for (;;) {
        st = h_status(url);
        if (st->items_reassigned > 0)
            break;
        stoker_status_destroy(st);
        cr_assert_lt(stoker_now_ms(), deadline, "the victim's shards were never handed back");
        stoker_sleep_ms(20, NULL);
    }
    cr_assert_eq(st->items_reassigned, 24,
                 "%llu items handed back, expected 8 of the first shard and 16 of the second",
                 (unsigned long long)st->items_reassigned);
    stoker_status_destroy(st);
    // Another producer makes them, each once: the epoch is every index exactly once.
    proc_child *heir = e2e_producer_start(
        url, "heir", PROC_ARGS("--items", "200", "--chunk", "8", "--delay", "0:0"));
    cr_assert(h_wait_producer(url, "heir", 8, 10000), "the heir never pushed");
    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 8000);
    seen s;
    seen_init(&s, 200, 1, 0);
    drain(tc, &s, 60000);
    cr_assert_eq(s.n_ended, 1, "%u epoch ends, expected 1", s.n_ended);
    assert_epoch_complete(&s, 0);
    cr_assert_eq(s.total, 200, "%llu examples delivered, expected 200",
                 (unsigned long long)s.total);
    cr_assert_eq(stoker_trainer_client_duplicates(tc), 0);
    proc_assert_exit(heir, 0, 10000);
    stoker_trainer_client_destroy(tc);
    seen_fini(&s);
    proc_broker_stop(broker);
}
