// Mixing sources by weight (docs/mixing.md): a consumer's batches drawn from several sources in
// fixed proportions. A source is a pool of producers (a producer's --pool). The consumer names
// the mixture when it connects; the broker makes every batch with per-source counts that keep
// each source's running total within one example of weight x examples delivered: a
// deterministic quota (largest remainders, carried from batch to batch), exact by construction,
// not on average. This header holds the mixture, its text form and the quota rule, which the
// broker and the tests share.
#ifndef STOKER_MIX_H
#define STOKER_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/schema.h"

#define STOKER_MIX_MAX 16 // sources in one mixture

// What a mixture does when a source runs dry (no producer of its pool may send, none queued).
typedef enum stoker_mix_stop {
    // The mixture ends with the first source that runs dry: proportions exact to the last batch
    // (what the other sources still hold stays queued). The default.
    STOKER_MIX_STOP_FIRST = 0,
    // A source that runs dry leaves the mixture and the others go on, their weights scaled up to
    // fill its share, until every source ran dry.
    STOKER_MIX_STOP_ALL = 1,
} stoker_mix_stop;

#define STOKER_MIX_POINTS 8 // points of a schedule

// How a schedule's weights go from point to point.
typedef enum stoker_mix_blend {
    STOKER_MIX_BLEND_STEP = 0,   // a point's weights hold from its step until the next point's
    STOKER_MIX_BLEND_LINEAR = 1, // linear from point to point (the first from the weights at 0)
} stoker_mix_blend;

typedef struct stoker_mix {
    uint32_t n;                                  // sources (0: no mixture)
    char names[STOKER_MIX_MAX][STOKER_NAME_MAX]; // pool names, each once
    double weights[STOKER_MIX_MAX];              // > 0 and finite; shares are weight / sum
    uint32_t stop;                               // stoker_mix_stop
    // A schedule (n_points 0: none): from batch at[k] on (a group's global step), the weights
    // at_weights[k] (each source's, in names' order, >= 0, not all 0), blended by blend; at[]
    // increasing from 1. Before the first point, weights.
    uint32_t n_points;
    uint64_t at[STOKER_MIX_POINTS];
    double at_weights[STOKER_MIX_POINTS][STOKER_MIX_MAX];
    uint32_t blend; // stoker_mix_blend
} stoker_mix;

// Parses "code=0.3,web=0.7" (pool=weight pairs, weights relative: "a=3,b=1" is 0.75 / 0.25)
// into *out (its stop untouched). STOKER_INVALID with err naming what is wrong: a pair without
// '=', an empty or repeated pool, a weight that is not a positive finite number, more than
// STOKER_MIX_MAX sources. An empty spec is no mixture (n 0).
int stoker_mix_parse(const char *spec, stoker_mix *out, char *err, size_t err_len);
// "first" or "all" into *stop; STOKER_INVALID with err naming the choices otherwise.
int stoker_mix_stop_parse(const char *text, uint32_t *stop, char *err, size_t err_len);
const char *stoker_mix_stop_name(uint32_t stop);
// Parses a schedule "1000:code=0.5,web=0.5;5000:code=0.7,web=0.3" (points of step:weights, steps
// increasing, each naming every source of mix with a weight >= 0, not all 0) into mix's points.
// An empty spec is no schedule. STOKER_INVALID with err naming what is wrong.
int stoker_mix_schedule_parse(const char *spec, stoker_mix *mix, char *err, size_t err_len);
// "step" or "linear" into *blend; STOKER_INVALID naming the choices otherwise.
int stoker_mix_blend_parse(const char *text, uint32_t *blend, char *err, size_t err_len);
// The weights of mix's sources for batch (or group step) number step, 1 for the first, into w.
void stoker_mix_weights_at(const stoker_mix *mix, uint64_t step, double *w);
// Checks a mixture that came over the wire: the same rules as parse.
int stoker_mix_check(const stoker_mix *mix, char *err, size_t err_len);
// The spec form of mix ("code=0.3,web=0.7"), truncated to len.
void stoker_mix_format(const stoker_mix *mix, char *buf, size_t len);
// Nonzero when a and b name the same sources, in the same order, with the same weights and stop.
int stoker_mix_equal(const stoker_mix *a, const stoker_mix *b);

// The quota rule. owed[s] is what source s is owed after the next batch of n examples: its
// target then (its running target, carried, plus its share of the n) less what it was given so
// far; the owed values sum to n. Fills counts (summing to n): each source's floor of what it is
// owed, the remainder one by one to the largest fractional parts (ties: the lower index).
// Every source then stays within one example of its target.
void stoker_mix_counts(uint32_t n_sources, const double *owed, uint32_t n, uint32_t *counts);

#endif
