// stoker-scale's decisions and its exec engine (scale.h).
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scale.h"
#include "stoker/clock.h"

extern char **environ;

// A step up waits for the producers of the last one up to this many cool-downs.
#define ARRIVAL_COOLDOWNS 3

// The producers there meet the demand and give demand x headroom within cfg->tolerance (as
// Kubernetes' HPA holds a ratio within 10 % of its target): no change. Above the count, the
// ratio is taken at the best supply per producer the broker saw over its last minute
// (supply_high): a producer's real rate moves with the machine's load (42-49 examples/s within
// minutes, bench.py --only autoscale), and a count that still meets the demand stays while it
// is within the tolerance of what that spread allows, instead of a producer added each time the
// load slows them for a while and removed when it passes. Below the count, --down-window holds.
static int
within_tolerance(const scale_config *cfg, const scale_pool *pool, const stoker_pool_info *info,
                 double headroom)
{
    if (cfg->tolerance <= 0 || info->supply <= 0 || info->demand <= 0 || pool->current == 0)
        return 0;
    double meet = ceil(info->demand / info->supply - 1e-9);
    if (pool->current < meet)
        return 0;
    double ratio = info->demand * headroom / info->supply;
    if (ratio > pool->current && info->supply_high > info->supply)
        return info->demand * headroom / info->supply_high / pool->current - 1.0 <= cfg->tolerance;
    return fabs(ratio / pool->current - 1.0) <= cfg->tolerance;
}

// Records the broker's count `wanted` at now_ms in pool's window; returns the most it wanted
// over the last cfg->down_window_ms (wanted itself when the window is 0).
static uint32_t
window_record(const scale_config *cfg, scale_pool *pool, uint32_t wanted, uint64_t now_ms)
{
    if (cfg->down_window_ms == 0)
        return wanted;
    uint64_t slot_ms = cfg->down_window_ms / SCALE_WINDOW_SLOTS;
    if (slot_ms == 0)
        slot_ms = 1;
    uint64_t k = now_ms / slot_ms;
    uint32_t i = (uint32_t)(k % SCALE_WINDOW_SLOTS);
    if (pool->window_slot_of[i] != k + 1) {
        pool->window_slot_of[i] = k + 1;
        pool->window_wanted[i] = wanted;
    } else if (wanted > pool->window_wanted[i]) {
        pool->window_wanted[i] = wanted;
    }
    uint32_t most = wanted;
    for (uint32_t j = 0; j < SCALE_WINDOW_SLOTS; j++)
        if (pool->window_slot_of[j] != 0 && pool->window_slot_of[j] + SCALE_WINDOW_SLOTS > k + 1 &&
            pool->window_wanted[j] > most)
            most = pool->window_wanted[j];
    return most;
}

int
scale_decide(const scale_config *cfg, scale_pool *pool, const stoker_pool_info *info,
             const stoker_status *st, uint64_t now_ms, uint32_t *to, char *why, size_t why_len)
{
    uint32_t lo = cfg->has_min ? cfg->min : st->autoscale_min;
    uint32_t hi = cfg->has_max ? cfg->max : st->autoscale_max;
    double idle_s = st->idle_s;
    if (hi < lo)
        hi = lo;
    uint32_t target;
    double idle_limit_s = (double)cfg->idle_ms / 1000.0;
    if (idle_s < 0 || idle_s >= idle_limit_s) {
        target = lo;
        if (idle_s < 0)
            snprintf(why, why_len, "no trainer has pulled yet: the minimum, %u", lo);
        else
            snprintf(why, why_len, "no trainer pulled for %.0f s (--idle %.0f): the minimum, %u",
                     idle_s, idle_limit_s, lo);
    } else if (info->demand <= 0 && pool->current < lo) {
        // A trainer waits for a pool that has no producer (or fewer than the minimum): no rate
        // can be measured until some run.
        target = lo;
        snprintf(why, why_len, "fewer than the minimum, %u, with a trainer pulling", lo);
    } else if (info->demand <= 0) {
        // The broker says "no trainer is pulling" within the idle time: a pause (a checkpoint,
        // an evaluation), not an end.
        snprintf(why, why_len, "no trainer pulled for %.0f s, under --idle %.0f: hold", idle_s,
                 idle_limit_s);
        return 0;
    } else if (now_ms < pool->settle_until_ms) {
        // A restarted broker's first readings are provisional: its averages start again, its
        // producers push what they retained (their rate reads high) and its trainers catch up,
        // dropping what they trained before (their demand reads high; 3 -> 6 -> 3 producers in
        // containers-swarm-scale). The producers that stand come back by themselves: hold, and
        // keep these readings out of the down-window.
        snprintf(why, why_len,
                 "broker: %s; it restarted, its readings are provisional for %.0f s more: hold",
                 info->why, (double)(pool->settle_until_ms - now_ms) / 1000.0);
        return 0;
    } else {
        target = info->wanted;
        snprintf(why, why_len, "broker: %s", info->why);
        uint32_t most = window_record(cfg, pool, target, now_ms);
        if (target != pool->current && within_tolerance(cfg, pool, info, st->autoscale_headroom)) {
            size_t n = strlen(why);
            if (info->supply_high > info->supply)
                snprintf(why + n, why_len - n,
                         "; the %u there are within --tolerance %.2f of it at %.1f per producer, "
                         "the most of the last minute: hold",
                         pool->current, cfg->tolerance, info->supply_high);
            else
                snprintf(why + n, why_len - n,
                         "; the %u there are within --tolerance %.2f of it: hold", pool->current,
                         cfg->tolerance);
            return 0;
        }
        if (target < pool->current && most > target) {
            // Down only to the most the broker wanted over the window (as Kubernetes' HPA
            // stabilizes scale-down): one reading low is no reason to starve the trainer.
            size_t n = strlen(why);
            snprintf(why + n, why_len - n, "; it wanted %u within --down-window %.0f s", most,
                     (double)cfg->down_window_ms / 1000.0);
            if (most >= pool->current)
                return 0;
            target = most;
        }
        if (target < pool->current && info->supply_low > 0) {
            // Down only to a count that meets the demand at the least supply per producer of
            // the broker's last minute (supply_low): a demand on the edge between two counts
            // (50 examples/s of producers making 24.6-25.1: 2.0 of them) otherwise goes down
            // each time the supply reads high and up each time it reads low.
            double need = ceil(info->demand / info->supply_low - 1e-9);
            if (need > target) {
                size_t n = strlen(why);
                snprintf(why + n, why_len - n,
                         "; %u would not meet the demand at %.1f per producer, the least of the "
                         "last minute",
                         target, info->supply_low);
                if (need >= pool->current)
                    return 0;
                target = (uint32_t)need;
            }
        }
    }
    if (target < lo)
        target = lo;
    if (target > hi)
        target = hi;
    if (target == pool->current)
        return 0;
    if (target > pool->current && info->current < pool->current && pool->last_change_ms != 0 &&
        now_ms - pool->last_change_ms < ARRIVAL_COOLDOWNS * cfg->cooldown_ms) {
        // The producers of the last step up are not all there yet (a container starting, a
        // job queued): the demand they will meet still reads as unmet, and another step now
        // overshoots. Wait for them, at most ARRIVAL_COOLDOWNS cool-downs (some never come).
        size_t n = strlen(why);
        snprintf(why + n, why_len - n, "; %u of the %u asked for are there: waiting for them",
                 info->current, pool->current);
        return 0;
    }
    if (pool->last_change_ms != 0 && now_ms - pool->last_change_ms < cfg->cooldown_ms) {
        size_t n = strlen(why);
        snprintf(why + n, why_len - n, "; cooling down %.0f s more",
                 (double)(pool->last_change_ms + cfg->cooldown_ms - now_ms) / 1000.0);
        return 0;
    }
    uint32_t next = target;
    if (target > pool->current && target - pool->current > cfg->max_step)
        next = pool->current + cfg->max_step;
    if (target < pool->current && pool->current - target > cfg->max_step)
        next = pool->current - cfg->max_step;
    if (next != target) {
        size_t n = strlen(why);
        snprintf(why + n, why_len - n, "; a step of at most %u toward %u", cfg->max_step, target);
    }
    *to = next;
    return 1;
}

uint32_t
scale_missing(scale_pool *pool, const stoker_pool_info *info, uint64_t now_ms, uint64_t grace_ms)
{
    if (info->current > pool->alive_high)
        pool->alive_high = info->current;
    uint32_t seen = pool->alive_high < pool->current ? pool->alive_high : pool->current;
    if (info->current >= seen) {
        pool->missing_since_ms = 0;
        return 0;
    }
    // One reading short is not yet a death: a producer whose connection broke reconnects
    // within its retry (the broker counts it lost meanwhile).
    if (pool->missing_since_ms == 0)
        pool->missing_since_ms = now_ms;
    if (now_ms - pool->missing_since_ms < grace_ms)
        return 0;
    return seen - info->current;
}

void
scale_acted(scale_pool *pool)
{
    pool->alive_high = 0;
    pool->missing_since_ms = 0;
}

int
scale_exec(const char *cmd, const char *pool, uint32_t wanted, uint32_t timeout_ms, char *err,
           size_t err_len)
{
    char count[16], env_wanted[32], env_pool[STOKER_NAME_MAX + 16];
    snprintf(count, sizeof(count), "%u", wanted);
    snprintf(env_wanted, sizeof(env_wanted), "STOKER_WANTED=%u", wanted);
    snprintf(env_pool, sizeof(env_pool), "STOKER_POOL=%s", pool);
    size_t n_env = 0;
    while (environ[n_env] != NULL)
        n_env++;
    char **env = calloc(n_env + 3, sizeof(*env));
    if (env == NULL) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "STOKER_WANTED=", 14) != 0 &&
            strncmp(environ[i], "STOKER_POOL=", 12) != 0)
            env[k++] = environ[i];
    env[k++] = env_wanted;
    env[k++] = env_pool;
    // sh -c 'CMD "$@"' sh COUNT: the count is CMD's last argument, quoted by the shell.
    char script[4096];
    snprintf(script, sizeof(script), "%s \"$@\"", cmd);
    char *argv[] = {"sh", "-c", script, "sh", count, NULL};
    pid_t pid;
    int rv = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, env);
    free(env);
    if (rv != 0) {
        snprintf(err, err_len, "cannot start /bin/sh for --exec-cmd: %s", strerror(rv));
        return -1;
    }
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    int status;
    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            break;
        if (got < 0 && errno != EINTR) {
            snprintf(err, err_len, "waiting for --exec-cmd: %s", strerror(errno));
            return -1;
        }
        if (stoker_now_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            snprintf(err, err_len, "--exec-cmd ran past %.0f s and was killed",
                     timeout_ms / 1000.0);
            return -1;
        }
        usleep(10000);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status))
        snprintf(err, err_len, "--exec-cmd exited %d", WEXITSTATUS(status));
    else
        snprintf(err, err_len, "--exec-cmd ended by signal %d", WTERMSIG(status));
    return -1;
}
