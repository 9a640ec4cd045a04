// The broker's autoscale signal (docs/autoscale.md): how many producers each pool wants so that
// the trainers never wait for data. Demand is what the trainers would take if they never waited
// (their rate over the share of time they were not waiting); supply is each producer's rate while
// its pushes were not held by full queues. Both are smoothed (EWMAs, AUTOSCALE_*_TAU_MS) so that
// one slow batch does not swing the answer. It only measures and says; stoker-scale acts.
#ifndef BROKER_AUTOSCALE_H
#define BROKER_AUTOSCALE_H

#include <stdint.h>

#include "stoker/status.h"

struct broker;

#define AUTOSCALE_SAMPLE_MS 1000 // one sample of the counters a second
// The smoothing's time constants. Supply: a producer's rate moves only with its load. Demand:
// shorter, because a trainer's demand after a starved spell reads high until its smoothed
// free time has recovered (the deficit decays as exp(-t / tau)); at 10 s it still read 10 %
// high 20 s after the trainer was fed, and the controller stopped a step down one short.
#define AUTOSCALE_SUPPLY_TAU_MS 10000
#define AUTOSCALE_DEMAND_TAU_MS 5000
// A trainer waiting more than this share of the time counts as waiting this share: its demand
// is at most 1 / (1 - AUTOSCALE_WAIT_CAP) = 4 times what it takes now. A starved trainer says
// "more", not how much more: a trainer paced by its own clock (or one with little compute) waits
// nearly all the time when supply falls even a little short, so its rate / (1 - wait) says
// nothing of its need; 4x (at 0.9, 10x) was an overshoot the controller then had to undo.
#define AUTOSCALE_WAIT_CAP 0.75
// A starved trainer's capped samples say "at least four times more", no rate; once it waits less
// than this share of a sample (fed again), its average starts afresh from that sample (the first
// sample after a start, provisional: the next replaces it). Blended in, they made demand read
// 1.5-2x for 10 s after the producers caught up (bench.py --only autoscale: 555 examples/s for a
// trainer of 250 a second after it was fed), and the controller stepped up again on that.
#define AUTOSCALE_FED_SHARE 0.25

// The spread of a pool's supply per producer: its smoothed value once a sample over the last
// AUTOSCALE_SPREAD_SLOTS samples (a minute), whose lowest and highest the signal reports. A
// producer's real rate moves with the machine's load (42-49 examples/s within minutes for a
// producer that sleeps 0.02 s per example on a loaded 2-core host): stoker-scale holds a count
// that meets the demand and gives demand x headroom within its tolerance at the best supply of
// that spread, instead of adding a producer each time the load slows them for a while.
#define AUTOSCALE_SPREAD_SLOTS 60
#define AUTOSCALE_POOLS_MAX                                                                        \
    64 // pools named in the signal; producers of further pools are not counted

typedef struct autoscale_spread {
    char pool[STOKER_NAME_MAX];                 // "": a free entry
    double supply[AUTOSCALE_SPREAD_SLOTS];      // per sample, at slot sample % SLOTS
    uint64_t sample_of[AUTOSCALE_SPREAD_SLOTS]; // the sample number + 1 it holds (0: none)
} autoscale_spread;

// Per producer and per trainer: what the signal accumulates between samples.
typedef struct autoscale_meter {
    uint64_t busy_ms;           // producer: held by full queues; trainer: a pull parked for data
    uint64_t last_count;        // examples (accepted / sent) at the latest sample
    uint64_t last_busy_ms;      // busy_ms at the latest sample
    double ewma_count, ewma_ms; // smoothed examples per sample and ms counted per sample
    int provisional;            // the EWMAs hold only the first sample: the next replaces it
    int sampled;                // the EWMAs hold at least one sample
    int capped;                 // trainer: they hold a sample whose wait was capped
    uint64_t last_make_us;      // producer: its making time at the latest sample
    // Trainer: a wait reaches us with the pull after the batch that ended it, often in the next
    // sample, while that batch's examples count in the sample it was sent in: the sample read
    // low and the next high. So a trainer's sample is folded in one sample late (pend_*), and
    // a wait said whose batch was sent before the open sample began goes to it (wait_late_ms);
    // one whose batch was sent in the open sample stays there (wait_open_ms).
    uint64_t last_sent_ms;                // when we last sent it a batch (at a tick)
    uint64_t sent_count;                  // examples sent to it, as of that tick
    uint64_t wait_open_ms, wait_late_ms;  // waits said in the open sample, by where they belong
    uint64_t pend_examples, pend_wait_ms; // the closed sample not yet folded in
    uint64_t pend_busy_ms, pend_span_ms;  // (pend_span_ms 0: none)
} autoscale_meter;

// Called every few ms (broker_tick) under the broker's lock: counts held and waiting time, and
// once every AUTOSCALE_SAMPLE_MS takes a sample.
void autoscale_tick(struct broker *b, uint64_t now_ms);
// A trainer's pull said its data wait so far is wait_ms (Pull.data_wait_ms): the growth is a
// wait that ended with the latest batch we sent it, counted in the sample that batch was sent in.
struct trainer;
void autoscale_trainer_wait(struct broker *b, struct trainer *t, uint64_t wait_ms, uint64_t now_ms);
// Fills st's autoscale block (malloc'd pools; freed with the snapshot). Returns STOKER_NOMEM
// or STOKER_OK.
int autoscale_report(const struct broker *b, uint64_t now_ms, stoker_status *st);

struct broker_outbox;
struct stoker_request;
// SCALED: a controller (stoker-scale) changed a pool; logged as `scaled` and added as a SCALED
// event (in /status and the trainers' events). Takes req (frees it); answers on token.
int autoscale_scaled(struct broker *b, void *token, uint32_t pipe, struct stoker_request *req,
                     uint64_t now_ms, struct broker_outbox *out);

#endif
