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
} scale_config;

// One pool as the controller sees it between decisions.
typedef struct scale_pool {
    char name[STOKER_NAME_MAX];
    uint32_t current;        // what it last scaled to (at first: the producers the broker sees)
    uint64_t last_change_ms; // 0: never changed
} scale_pool;

// Decides for pool from the broker's view of it (info) and the signal's idle time (idle_s < 0:
// no trainer ever pulled) at now_ms. Returns 1 and writes *to and why (a sentence) when the
// pool should change, 0 when it stays (why then says why, for the debug log).
int scale_decide(const scale_config *cfg, const scale_pool *pool, const stoker_pool_info *info,
                 double idle_s, uint32_t broker_min, uint32_t broker_max, uint64_t now_ms,
                 uint32_t *to, char *why, size_t why_len);

// Runs `/bin/sh -c 'CMD "$STOKER_WANTED"'`-like: CMD with the count as its last argument and
// STOKER_WANTED, STOKER_POOL in its environment, and waits up to timeout_ms for it. Returns 0
// when it exited 0; otherwise -1 with the reason in err.
int scale_exec(const char *cmd, const char *pool, uint32_t wanted, uint32_t timeout_ms, char *err,
               size_t err_len);

#endif
