// The broker's autoscale signal (server/broker_autoscale.c) driven directly, as test_broker.c
// drives the broker: requests encoded and decoded as the transport would, time a number the test
// advances in ticks of 10 ms. A trainer that trains 100 ms on each batch of 25 would take
// 250 examples/s if it never waited; it waits 0-300 ms for each batch (a producer that pushes
// late), and says each wait with its next pull, after the batch that ended it, so often in the
// next one-second sample. The demand the broker reads must stay 250 whatever the waits: each wait
// counted in the sample in which it happened (docs/autoscale.md). And the supply per producer's
// spread over the last minute (supply_low, supply_high) holds what the producer showed.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "broker.h"
#include "broker_fixture.h"
#include "helpers.h"
#include "stoker/error.h"

#define P1     11
#define T1     21
#define STATUS 31
#define BATCH  25

static stoker_schema schema;
static uint64_t pushed; // examples P1 pushed

static void
setup(void)
{
    bf_init();
    h_schema(&schema);
    broker_config cfg;
    broker_config_init(&cfg);
    cfg.queue_depth = 1000;
    cfg.queue_depth_auto = 0;
    cfg.producer_timeout_ms = 3000;
    cfg.trainer_timeout_ms = 10000;
    bf_create(&cfg);
    pushed = 0;
    bf_answered(bf_handle(P1, h_hello_producer(P1, "p1", &schema)), STOKER_OK);
    bf_answered(bf_handle(T1, h_hello_trainer(T1, "trainer")), STOKER_OK);
}

TestSuite(autoscale_signal, .init = setup, .fini = bf_fini);

// P1 pushes a batch's worth, saying it spent make_ms per example making them so far.
static void
push_batch(double make_ms)
{
    stoker_request *req = h_push(P1, &schema, pushed, BATCH);
    pushed += BATCH;
    req->make_us = (uint64_t)(make_ms * 1000.0 * (double)pushed);
    bf_answered(bf_handle(P1, req), STOKER_OK);
}

// T1 pulls a batch, acknowledging the one before (lease 0: none) and saying its wait so far.
static uintptr_t
pull_batch(uint64_t lease, uint64_t waited_ms)
{
    stoker_request r = {
        .method = STOKER_PULL,
        .session = T1,
        .max_examples = BATCH,
        .wait_ms = 5000,
        .n_acks = lease != 0,
        .acks = &lease,
        .data_wait_ms = waited_ms,
    };
    return bf_handle(T1, h_roundtrip(&r));
}

// The broker's signal for the default pool now.
static stoker_pool_info
signal_now(void)
{
    stoker_reply *rep = bf_answered(bf_handle(STATUS, h_simple(STOKER_STATUS, 0)), STOKER_OK);
    cr_assert(rep->has_autoscale, "no autoscale block in the status reply");
    cr_assert_eq(rep->n_pools, 1, "%u pools", rep->n_pools);
    stoker_pool_info p = rep->pools[0];
    bf_forget();
    return p;
}

// Advances ms in ticks of 10 ms.
static void
advance(uint32_t ms)
{
    for (uint32_t t = 0; t < ms; t += 10)
        bf_tick(10);
}

// The trainer's loop for seconds: wait (the producer pushes only then), train 100 ms, pull again
// saying its wait so far. Returns the farthest the demand read from 250 after the first 10 s
// (the smoothing's start), as a share; each second's reading printed for the log.
static double
run_trainer_as(uint32_t seconds, double make_ms, uint32_t *seed, uint32_t wait_ms,
               uint32_t train_ms, uint32_t read_from_s)
{
    uint64_t waited = 0, lease = 0, start = bf_now_ms;
    double worst = 0;
    uint64_t next_read = start + (uint64_t)read_from_s * 1000;
    while (bf_now_ms < start + (uint64_t)seconds * 1000) {
        *seed = *seed * 1103515245u + 12345u;
        uint32_t wait = wait_ms != UINT32_MAX ? wait_ms : ((*seed >> 16) % 31) * 10; // 0-300 ms
        uintptr_t t;
        if (wait == 0) {
            push_batch(make_ms);
            t = pull_batch(lease, waited);
        } else {
            t = pull_batch(lease, waited);
            cr_assert_null(bf_reply(t), "a pull served with nothing pushed");
            advance(wait);
            push_batch(make_ms);
        }
        stoker_reply *rep = bf_reply(t);
        cr_assert_not_null(rep, "the pull was not served when its batch came");
        cr_assert_eq(rep->code, STOKER_OK, "%s", rep->message);
        cr_assert_eq(rep->chunk.count, BATCH);
        lease = rep->lease;
        bf_forget(); // many steps: the fixture keeps at most 256 replies
        waited += wait;
        advance(train_ms); // training on it
        if (bf_now_ms >= next_read) {
            stoker_pool_info p = signal_now();
            double off = fabs(p.demand / 250.0 - 1.0);
            printf("at %.1f s: demand %.1f (%.1f %% off)\n", (bf_now_ms - start) / 1000.0, p.demand,
                   off * 100);
            if (off > worst)
                worst = off;
            next_read += 1000;
        }
    }
    return worst;
}

static double
run_trainer(uint32_t seconds, double make_ms, uint32_t *seed)
{
    return run_trainer_as(seconds, make_ms, seed, UINT32_MAX, 100, 10);
}

Test(autoscale_signal, a_wait_said_with_the_next_pull_counts_in_its_own_sample)
{
    uint32_t seed = 7;
    double worst = run_trainer(40, 2.0, &seed);
    // Each wait counted in the sample its pull came in (the sample with the batch read low, the
    // next high) made it read up to 9.5 % off; in their own samples, 3.9 %: what is left is a
    // batch's 100 ms of training counted in the sample it began in.
    cr_assert_lt(worst, 0.05, "demand read %.1f %% off 250 examples/s", worst * 100);
}

Test(autoscale_signal, the_supply_spread_holds_the_last_minute)
{
    uint32_t seed = 11;
    run_trainer(20, 2.0, &seed); // 500 examples/s of making time: 2 ms an example
    stoker_pool_info p = signal_now();
    cr_assert(fabs(p.supply - 500) < 5, "supply %.1f, made at 500/s", p.supply);
    cr_assert(fabs(p.supply_low - p.supply) < 5 && fabs(p.supply_high - p.supply) < 5,
              "steady supply %.1f read a spread of %.1f-%.1f", p.supply, p.supply_low,
              p.supply_high);
    run_trainer(30, 4.0, &seed); // slower: 250/s
    p = signal_now();
    cr_assert(p.supply < 300, "supply %.1f after it slowed to 250/s", p.supply);
    cr_assert(p.supply_high > 450, "the spread's top %.1f forgot the 500/s of 30 s ago",
              p.supply_high);
    cr_assert(p.supply_low <= p.supply + 1e-9, "low %.1f above supply %.1f", p.supply_low,
              p.supply);
    run_trainer(70, 4.0, &seed); // a minute and more at 250/s: the 500 is out of the window
    p = signal_now();
    cr_assert(p.supply_high < 270, "the spread's top %.1f still holds a rate of over a minute ago",
              p.supply_high);
}

// The bench's trainer, paced at 250 examples/s, starved: a batch every 125 ms (200/s), which it
// waits 105 ms for, so each sample's wait is capped at 75 % (it says 4 x 200 = 800/s). Fed again
// (no wait, 100 ms paced per batch), its demand must read its 250 within a few seconds: the
// capped samples blended in read 1.5-2x for 10 s, and the controller stepped up again on that.
Test(autoscale_signal, a_trainer_fed_again_reads_its_rate_soon)
{
    uint32_t seed = 5;
    run_trainer_as(10, 2.0, &seed, 105, 20, 10);
    stoker_pool_info p = signal_now();
    cr_assert_gt(p.demand, 600, "a starved trainer reads %.1f, not the cap's 4 x 200", p.demand);
    double worst = run_trainer_as(10, 2.0, &seed, 0, 100, 4);
    cr_assert_lt(worst, 0.1, "fed again, it read %.1f %% off 250 from its 4th second", worst * 100);
}
