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

// Per producer and per trainer: what the signal accumulates between samples.
typedef struct autoscale_meter {
    uint64_t busy_ms;           // producer: held by full queues; trainer: a pull parked for data
    uint64_t last_count;        // examples (accepted / sent) at the latest sample
    uint64_t last_busy_ms;      // busy_ms at the latest sample
    double ewma_count, ewma_ms; // smoothed examples per sample and ms counted per sample
    int provisional;            // the EWMAs hold only the first sample: the next replaces it
    int sampled;                // the EWMAs hold at least one sample
    uint64_t last_make_us;      // producer: its making time at the latest sample
    uint64_t last_wait_said_ms; // trainer: its data wait as its pulls said, at the latest sample
} autoscale_meter;

// Called every few ms (broker_tick) under the broker's lock: counts held and waiting time, and
// once every AUTOSCALE_SAMPLE_MS takes a sample.
void autoscale_tick(struct broker *b, uint64_t now_ms);
// Fills st's autoscale block (malloc'd pools; freed with the snapshot). Returns STOKER_NOMEM
// or STOKER_OK.
int autoscale_report(const struct broker *b, uint64_t now_ms, stoker_status *st);

struct broker_outbox;
struct stoker_request;
// SCALED: a controller (stoker-scale) changed a pool; logged as `scaled` and added as a SCALED
// event (in /status and the trainers' events). Takes req (frees it); answers on token.
void autoscale_scaled(struct broker *b, void *token, struct stoker_request *req, uint64_t now_ms,
                      struct broker_outbox *out);

#endif
