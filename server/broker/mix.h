// A consumer's mixture at the broker (docs/mixing.md): its sources (pools of producers), its
// running books (examples given per source, the running targets) and the plan of the next
// batch's per-source counts, kept within one example of weight x examples given by the quota
// rule (stoker_mix_counts). Floor 2: it reads the core's producers and queues (and queues.c's
// room test); the leases take what it plans (lease.c) and give back through it.
#ifndef BROKER_MIX_H
#define BROKER_MIX_H

#include <stdint.h>

#include "core.h"
#include "stoker/mix.h"

typedef struct mix {
    stoker_mix spec;               // as the consumer asked (names, weights, schedule, stop)
    double weight[STOKER_MIX_MAX]; // the weights now (the schedule's at the latest batch)
    // Each source's share now (its weight over the sum of the sources still in the mixture) and
    // its running target: base[s] + share[s] x (given - from), rebased at every change of shares
    // so that no source's target jumps.
    double share[STOKER_MIX_MAX];
    double base[STOKER_MIX_MAX];
    uint64_t from;
    uint64_t given;               // examples given (leased, not given back) in all
    uint64_t got[STOKER_MIX_MAX]; // of them per source
    uint8_t dry[STOKER_MIX_MAX];  // ran dry and left the mixture (stop rule "all")
    int32_t waits_for;            // the source the latest full batch waited for (-1: none)
    uint64_t steps;               // batches numbered so far (a plain trainer's, in order)
    uint32_t refs;                // holds (mix_hold, mix_release)
    int tokens; // its books count tokens (a consumer's batches made by tokens), not examples
} mix;

// A new mixture of spec (checked by the caller), nothing given yet, held once (its owner's: a
// trainer's or a group's); NULL when out of memory. Each lease of it holds it too, so that a
// lease outliving its owner (a group ended while a rank held a step) still has its books.
mix *mix_new(const stoker_mix *spec);
void mix_hold(mix *m);
// Lets go of one hold; the last frees m. Accepts NULL.
void mix_release(mix *m);
// What each source's pool has queued now, into avail.
void mix_avail(const broker *b, const mix *m, uint64_t *avail);
// Nonzero when source s ran dry: no producer of its pool may send, none of its examples queued,
// and its pool had producers (or no producer at all may send any more).
int mix_source_dry(const broker *b, const mix *m, uint32_t s, uint64_t now_ms);
// Nonzero when a producer of source s's pool may still send examples (not one that said it
// makes nothing more).
int mix_source_sends_more(const broker *b, const mix *m, uint32_t s, uint64_t now_ms);
// Nonzero when source s cannot queue more now although producers of its pool are alive: none
// of their queues has room (a batch larger than its queues hold waits for nothing).
int mix_source_full(const broker *b, const mix *m, uint32_t s);
// The producers of source s's pool (returned), of them alive and lost.
uint32_t mix_producers(const broker *b, const mix *m, uint32_t s, uint32_t *alive, uint32_t *lost);
// The per-source counts of a batch of n, into counts (the quota rule).
void mix_plan(const mix *m, uint32_t n, uint32_t *counts);
// What source s is owed (its running target less what it got) once more is given.
static inline double
mix_owed(const mix *m, uint32_t s, uint64_t more)
{
    double target = m->base[s] + m->share[s] * ((double)m->given + (double)more - (double)m->from);
    return target - (double)m->got[s];
}
// The largest batch of at most n whose per-source counts avail holds (0: none), counts filled.
uint32_t mix_fit(const mix *m, uint32_t n, const uint64_t *avail, uint32_t *counts);
// Books n examples of source s as given (a lease took them) or given back (a lease returned).
void mix_took(mix *m, uint32_t s, uint32_t n);
void mix_gave_back(mix *m, uint32_t s, uint32_t n);
// Sets the weights for batch (or a group's step) number step from the schedule; the shares
// change from there on (every running target goes on from where it is).
void mix_at_step(mix *m, uint64_t step);
// The shares from m->weight again (changed by its caller), from here on.
void mix_reweigh(mix *m);
// Source s leaves the mixture (ran dry, stop rule "all"): the others' shares grow to fill it.
void mix_drop_source(mix *m, uint32_t s);
// Whether m is over (STOKER_OK: not): with stop rule "first" a source ran dry, with "all" every
// one (a source that runs dry then leaves the mixture, said in the log for who, and the others'
// shares grow). END_OF_DATA, or NO_PRODUCERS when producers of it were lost, with why.
int mix_end(const broker *b, mix *m, const uint64_t *avail, uint64_t now_ms, const char *who,
            char *why, size_t len);
// One rank's part of a step's per-source counts: want examples of what is left (left[s] per
// source, want at most their sum), in the same proportions (the quota rule), into counts.
void mix_split(const uint32_t *left, uint32_t n_sources, uint32_t want, uint32_t *counts);
// The source whose producers are in pool (index), or -1.
int mix_source_of(const mix *m, const char *pool);

#endif
