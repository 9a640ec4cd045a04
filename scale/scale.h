// stoker-scale's decisions (docs/autoscale.md): from the broker's autoscale signal for one pool,
// the count to scale to now, within bounds, in bounded steps, after a cool-down; and the exec
// engine that acts on it. It does not fetch the signal (main.c does) nor keep a clock.
#ifndef SCALE_H
#define SCALE_H

#include <stdint.h>

#include "stoker/status.h"

typedef struct scale_config {
    uint32_t cooldown_ms; // after a change, this long before the next one
    uint32_t max_step;    // producers added or removed by one decision
    uint32_t min, max;    // bounds (defaults: the broker's --autoscale-min/--autoscale-max)
    int has_min, has_max;
    uint32_t idle_ms; // no trainer pulled for this long: the minimum
    // The producers there stay while they give demand x headroom within this share (and at least
    // meet the demand), whatever the broker's count: a signal near the middle between two counts
    // otherwise flips between them with its noise.
    double tolerance;
    // A step down waits until the broker has wanted fewer for this long, and goes to the most it
    // wanted meanwhile (0: at once).
    uint32_t down_window_ms;
} scale_config;

#define SCALE_WINDOW_SLOTS 32

// One pool as the controller sees it between decisions.
typedef struct scale_pool {
    char name[STOKER_NAME_MAX];
    uint32_t current;        // what it last scaled to (at first: the producers the broker sees)
    uint64_t last_change_ms; // 0: never changed
    // The broker's counts over the last --down-window: the most per slot of a 32nd of it,
    // slot_of[i] the slot number (time / slot length) + 1 that wanted[i] holds (0: none).
    uint32_t window_wanted[SCALE_WINDOW_SLOTS];
    uint64_t window_slot_of[SCALE_WINDOW_SLOTS];
    // The broker restarted: its readings are provisional until then (0: they are not), and the
    // pool holds either way meanwhile.
    uint64_t settle_until_ms;
    // What is alive, not what was asked for: the most producers the broker saw alive since the
    // engine last acted (or the broker restarted), and since when fewer are (0: not fewer).
    uint32_t alive_high;
    uint64_t missing_since_ms;
} scale_pool;

// Decides for pool from the broker's view of it (info, one of st's pools; st: the signal's idle
// time, idle_s < 0 when no trainer ever pulled, its headroom and bounds) at now_ms. Returns 1 and
// writes *to and why (a sentence) when the pool should change, 0 when it stays (why then says
// why, for the debug log). Records the broker's count in pool's window (for --down-window);
// borrows everything.
int scale_decide(const scale_config *cfg, scale_pool *pool, const stoker_pool_info *info,
                 const stoker_status *st, uint64_t now_ms, uint32_t *to, char *why, size_t why_len);

// The producers of pool that were alive since the engine last acted and are gone now (killed,
// crashed), once they have been gone for grace_ms: the engine asks for pool->current again to
// replace them. Producers still starting are not missing (they were never seen alive), nor are
// those a step down stops. Records info->current; call once per reading. Returns how many are
// missing (0: none, or not for grace_ms yet).
uint32_t scale_missing(scale_pool *pool, const stoker_pool_info *info, uint64_t now_ms,
                       uint64_t grace_ms);

// The engine acted on pool (or the broker restarted): what is alive is counted again from here.
void scale_acted(scale_pool *pool);

// Runs `/bin/sh -c 'CMD "$STOKER_WANTED"'`-like: CMD with the count as its last argument and
// STOKER_WANTED, STOKER_POOL in its environment, and waits up to timeout_ms for it. Returns 0
// when it exited 0; otherwise -1 with the reason in err.
int scale_exec(const char *cmd, const char *pool, uint32_t wanted, uint32_t timeout_ms, char *err,
               size_t err_len);

#endif
