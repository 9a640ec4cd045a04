// The broker's batches planned ahead (ahead.c): with length buckets a plan sorts a window of
// queued sequences, and one sort yields several batches that the next pulls with the same
// batching take in turn, while nothing but new arrivals changed the queues. Private to server/.
#ifndef BROKER_AHEAD_H
#define BROKER_AHEAD_H

#include <stdint.h>

#include "budget.h"
#include "core.h"

typedef struct budget_ahead budget_ahead; // b->ahead (private)

// The most batches one sort plans.
#define AHEAD_MAX 8

// The next batch planned ahead for this batching (max and cap as for budget_plan_make) into
// *plan, which the caller then owns: 0. -1 when there is none or they no longer hold (the
// queues changed by more than appends since the last lease, a producer gone or back, a pick said
// trained meanwhile): all are dropped.
int ahead_next(broker *b, const stoker_batching *batching, uint32_t max, uint32_t cap,
               budget_plan *plan);
// Keeps plans[1 .. n) (their picks move there; freed when there is no room) for the next pulls
// with this batching, in place of any kept before.
void ahead_keep(broker *b, budget_plan *plans, uint32_t n, const stoker_batching *batching,
                uint32_t max, uint32_t cap);
// Drops every batch planned ahead.
void ahead_drop(broker *b);
// A plan's batch is leased (lease.c, after its takes): the batches planned ahead hold while the
// queues change by appends only from here on.
void ahead_taken(broker *b);
// Frees b's batches planned ahead (at the broker's end).
void ahead_free(broker *b);

#endif
