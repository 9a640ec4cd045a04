// stoker-scale: reads the broker's autoscale signal (the Status request), decides per pool with
// scale.c, acts through an engine (exec: a command given the count; swarm: a Docker Swarm
// service's replicas, engine_swarm.c; slurm: producer jobs, engine_slurm.c) and reports each change
// to the broker (a SCALED event). Only options, wiring and the loop live here.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "engine_slurm.h"
#include "engine_swarm.h"
#include "scale.h"
#include "stoker/cli.h"
#include "stoker/client.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"

#define POOLS_MAX 64

static volatile int stop;

static void
on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

typedef struct scale_options {
    stoker_client_options client;
    scale_config cfg;
    const char *engine;
    const char *exec_cmd;
    const char *pool; // NULL: every pool the broker names
    engine_swarm swarm;
    uint32_t interval_ms, exec_timeout_ms, rounds;
    int dry_run;
    slurm_engine slurm;
} scale_options;

static const char *const engines[] = {"exec", "swarm", "slurm", NULL};

#define AT(member) STOKER_CLI_AT(scale_options, member)
static const stoker_cli_option rows[] = {
    {"engine", "KIND",
     "how to act: exec (runs --exec-cmd with the count), swarm (sets\n"
     "--service's replicas through the Docker Engine API), slurm\n"
     "(sbatch/scancel of --slurm-template jobs)",
     STOKER_CLI_CHOICE, AT(engine), .choices = engines},
    {"service", "NAME", "swarm engine: the Docker Swarm service of --pool's producers",
     STOKER_CLI_STRING, AT(swarm.service), .imin = 1, .imax = 200},
    {"docker-socket", "PATH", "swarm engine: the Docker Engine's Unix socket", STOKER_CLI_STRING,
     AT(swarm.socket_path), .imin = 1, .imax = 107},
    {"docker-timeout", "S", "swarm engine: each Docker Engine API request within this long",
     STOKER_CLI_SECONDS_MS, AT(swarm.timeout_ms), .dmin = 0.1, .dmax = 600},
    {"exec-cmd", "CMD",
     "exec engine: run CMD with /bin/sh -c, the count as its last\n"
     "argument and STOKER_WANTED, STOKER_POOL in its environment",
     STOKER_CLI_STRING, AT(exec_cmd), .imin = 1, .imax = 4000},
    {"pool", "NAME", "act on this pool only (default: every pool)", STOKER_CLI_STRING, AT(pool),
     .imin = 1, .imax = 63},
    {"cooldown", "S", "after a change, wait this long before the next", STOKER_CLI_SECONDS_MS,
     AT(cfg.cooldown_ms), .dmin = 0, .dmax = 86400},
    {"max-step", "N", "producers added or removed by one decision", STOKER_CLI_UINT,
     AT(cfg.max_step), .imin = 1, .imax = 100000},
    {"tolerance", "F",
     "hold while the producers there meet the demand and give its\n"
     "x headroom within this share (0: follow the broker's count)",
     STOKER_CLI_NUMBER, AT(cfg.tolerance), .dmin = 0, .dmax = 1},
    {"down-window", "S",
     "step down only once the broker has wanted fewer for this long,\n"
     "to the most it wanted meanwhile",
     STOKER_CLI_SECONDS_MS, AT(cfg.down_window_ms), .dmin = 0, .dmax = 86400},
    {"min", "N", "fewest producers (default: the broker's --autoscale-min)", STOKER_CLI_UINT,
     AT(cfg.min), .imin = 0, .imax = 100000},
    {"max", "N", "most producers (default: the broker's --autoscale-max)", STOKER_CLI_UINT,
     AT(cfg.max), .imin = 1, .imax = 100000},
    {"idle", "S", "no trainer pulled for this long: scale to the minimum", STOKER_CLI_SECONDS_MS,
     AT(cfg.idle_ms), .dmin = 0, .dmax = 86400 * 7},
    {"interval", "S", "read the signal this often", STOKER_CLI_SECONDS_MS, AT(interval_ms),
     .dmin = 0.1, .dmax = 3600},
    {"exec-timeout", "S", "kill --exec-cmd when it runs longer", STOKER_CLI_SECONDS_MS,
     AT(exec_timeout_ms), .dmin = 0.1, .dmax = 86400},
    {"rounds", "N", "stop after N readings (default: until SIGINT/SIGTERM)", STOKER_CLI_UINT,
     AT(rounds), .imin = 0, .imax = UINT32_MAX},
    {"dry-run", NULL, "print the decisions, act on nothing", STOKER_CLI_FLAG, AT(dry_run)},
};

static scale_pool *
find_pool(scale_pool *pools, uint32_t *n, const stoker_pool_info *info)
{
    for (uint32_t i = 0; i < *n; i++)
        if (strcmp(pools[i].name, info->name) == 0)
            return &pools[i];
    if (*n == POOLS_MAX)
        return NULL;
    scale_pool *p = &pools[(*n)++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", info->name);
    p->current = info->current; // at first: what runs now
    return p;
}

// The engine's act: the pool to `to` producers. 0, or -1 with err.
static int
act(const scale_options *o, const char *pool, uint32_t to, char *err, size_t err_len)
{
    if (strcmp(o->engine, "swarm") == 0)
        return engine_swarm_set(&o->swarm, to, err, err_len);
    if (strcmp(o->engine, "slurm") == 0)
        return slurm_engine_scale(&o->slurm, pool, to, err, err_len);
    return scale_exec(o->exec_cmd, pool, to, o->exec_timeout_ms, err, err_len);
}

// What the controller remembers of the broker across readings: a restarted broker has forgotten
// its trainers (idle_s -1, "none ever pulled"), and its "no trainer has pulled yet: the minimum"
// would take every producer but one away while the trainer is reconnecting.
typedef struct broker_memory {
    uint64_t uptime_ms;    // the broker's uptime at the last reading (0: none yet)
    uint64_t last_pull_ms; // on this controller's clock, when a trainer last pulled (0: never seen)
    uint64_t restart_ms;   // on this controller's clock, when it saw the broker restart (0: never)
} broker_memory;

// A broker that says no trainer ever pulled after this controller saw one pull has restarted:
// its idle time is counted from the last pull the controller saw instead, so the pool holds
// (as for any pause under --idle) until the trainers are back, and goes to the minimum only
// when none pulls for --idle. Nothing else of the signal is changed.
static void
remember_broker(broker_memory *m, stoker_status *st, const char *url, uint64_t now_ms)
{
    if (m->uptime_ms != 0 && st->uptime_ms < m->uptime_ms) {
        m->restart_ms = now_ms;
        stoker_warn("broker-restarted: %s is up for %.1f s (it was %.1f s at the last reading): "
                    "%s",
                    url, st->uptime_ms / 1000.0, m->uptime_ms / 1000.0,
                    m->last_pull_ms != 0 ? "the pools hold until its trainers pull again"
                                         : "no trainer pulled before it either");
    }
    m->uptime_ms = st->uptime_ms;
    if (st->idle_s >= 0) {
        uint64_t idle_ms = (uint64_t)(st->idle_s * 1000.0);
        m->last_pull_ms = now_ms > idle_ms ? now_ms - idle_ms : 1;
    } else if (m->last_pull_ms != 0) {
        st->idle_s = (double)(now_ms - m->last_pull_ms) / 1000.0;
    }
}

// A producer gone for this long (and at least one reading) is dead, not reconnecting.
#define MISSING_GRACE_MS 2000

static uint64_t
missing_grace_ms(const scale_options *o)
{
    return o->interval_ms > MISSING_GRACE_MS ? o->interval_ms : MISSING_GRACE_MS;
}

// The exec engine asks its command for the pool's count again: the command scales to a count,
// so it starts as many as died. Not a change of count: the broker is not told.
static void
replace_missing(const scale_options *o, scale_pool *p, uint32_t missing, uint32_t alive)
{
    char err[512];
    stoker_warn("producers-missing: pool '%s': %u of the %u asked for were alive and are gone "
                "(%u alive now)%s",
                p->name, missing, p->current, alive,
                o->dry_run ? " (dry run: nothing done)" : ": running --exec-cmd again");
    printf("scale: pool '%s' replaces %u of %u%s: they died (%u alive)\n", p->name, missing,
           p->current, o->dry_run ? " (dry run)" : "", alive);
    fflush(stdout);
    if (o->dry_run) {
        scale_acted(p);
        return;
    }
    if (act(o, p->name, p->current, err, sizeof(err)) != 0) {
        // Tried again after another grace: a command that fails is not run at every reading.
        stoker_error("scale-failed: pool '%s' replacing %u at %u: %s", p->name, missing, p->current,
                     err);
        p->missing_since_ms = stoker_now_ms();
        return;
    }
    scale_acted(p);
}

// What --exec-cmd started in the background and left behind (producers, usually) is this
// controller's: it is their reaper (below), so that they are not zombies where it runs as a
// container's first process, and their ends are logged. Whether a pool has the producers it
// asked for is the broker's count (scale_missing): a pool's producers need not be children.
static void
become_reaper(void)
{
#ifdef __linux__
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        stoker_debug("stoker-scale: cannot adopt what --exec-cmd leaves running: %s",
                     strerror(errno));
#endif
}

static void
reap_children(void)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (WIFSIGNALED(status))
            stoker_warn("child-ended: pid %d, left running by --exec-cmd, killed by signal %d",
                        (int)pid, WTERMSIG(status));
        else
            stoker_info("child-ended: pid %d, left running by --exec-cmd, exited %d", (int)pid,
                        WEXITSTATUS(status));
    }
}

// One reading of the signal and a decision per pool. Returns 0, or 1 when the broker did not
// answer (logged; the next round tries again, and nothing changes meanwhile).
static int
round_once(const scale_options *o, broker_memory *memory, scale_pool *pools, uint32_t *n_pools)
{
    stoker_status *st = NULL;
    char err[512];
    if (stoker_status_fetch_tls(o->client.url, o->client.token, &o->client.tls, 5000, &st, err,
                                sizeof(err)) != STOKER_OK) {
        stoker_warn("stoker-scale: no signal from %s: %s", o->client.url, err);
        return 1;
    }
    if (!st->has_autoscale) {
        stoker_warn("stoker-scale: the broker at %s sends no autoscale signal (an older broker)",
                    o->client.url);
        stoker_status_destroy(st);
        return 1;
    }
    uint64_t restarted_before = memory->restart_ms;
    remember_broker(memory, st, o->client.url, stoker_now_ms());
    if (memory->restart_ms != restarted_before)
        for (uint32_t i = 0; i < *n_pools; i++)
            scale_acted(&pools[i]); // a new broker counts its producers again as they return
    if (strcmp(o->engine, "slurm") == 0 && slurm_engine_pool_absent(st, o->pool) != 0)
        stoker_warn("stoker-scale: out of memory");
    for (uint32_t i = 0; i < st->n_pools; i++) {
        const stoker_pool_info *info = &st->pools[i];
        if (o->pool != NULL && strcmp(o->pool, info->name) != 0)
            continue;
        uint32_t known = *n_pools;
        scale_pool *p = find_pool(pools, n_pools, info);
        if (p == NULL)
            continue;
        if (*n_pools > known && strcmp(o->engine, "swarm") == 0) {
            // A restarted controller picks up where the service stands, not where the broker's
            // count of producers (some still starting) is.
            if (engine_swarm_get(&o->swarm, &p->current, err, sizeof(err)) != 0) {
                stoker_error("scale-failed: pool '%s': %s", p->name, err);
                (*n_pools)--;
                continue;
            }
            stoker_info("pool '%s': service '%s' stands at %u replicas", p->name, o->swarm.service,
                        p->current);
        }
        // The slurm engine counts its jobs every time: one that ended is replaced.
        if (strcmp(o->engine, "slurm") == 0 &&
            slurm_engine_count(&o->slurm, p->name, &p->current, err, sizeof(err)) != 0) {
            stoker_error("scale-failed: pool '%s': cannot count its jobs: %s", p->name, err);
            continue;
        }
        uint32_t to;
        char why[512];
        uint64_t now = stoker_now_ms();
        // The exec engine's command starts producers and forgets them: the broker's count of
        // those alive is how the engine learns that some died (killed, crashed). Swarm restarts
        // its tasks itself; slurm counts its jobs above.
        uint32_t missing =
            strcmp(o->engine, "exec") == 0 ? scale_missing(p, info, now, missing_grace_ms(o)) : 0;
        // A restarted broker's readings are provisional for a --down-window: no step either way
        // (scale_decide), and the down-window's readings from before it went away age out.
        p->settle_until_ms =
            memory->restart_ms != 0 ? memory->restart_ms + o->cfg.down_window_ms : 0;
        if (!scale_decide(&o->cfg, p, info, st, now, &to, why, sizeof(why))) {
            if (now < p->settle_until_ms && info->wanted != p->current)
                stoker_info("pool '%s' stays at %u: %s", p->name, p->current, why);
            else
                stoker_debug("pool '%s' stays at %u: %s", p->name, p->current, why);
            if (missing > 0)
                replace_missing(o, p, missing, info->current);
            continue;
        }
        printf("scale: pool '%s' from %u to %u%s: %s\n", p->name, p->current, to,
               o->dry_run ? " (dry run)" : "", why);
        fflush(stdout);
        if (!o->dry_run && act(o, p->name, to, err, sizeof(err)) != 0) {
            stoker_error("scale-failed: pool '%s' to %u: %s (tried again after the cool-down)",
                         p->name, to, err);
            p->last_change_ms = now;
            continue;
        }
        // The broker shows it (a SCALED event: /status, the trainers, its log); a broker that
        // cannot be told does not undo the change.
        if (!o->dry_run &&
            stoker_scaled_report(o->client.url, o->client.token, &o->client.tls, 5000, p->name,
                                 p->current, to, o->engine, why, err, sizeof(err)) != STOKER_OK)
            stoker_warn("scaled-unreported: pool '%s' from %u to %u: the broker was not told: %s",
                        p->name, p->current, to, err);
        p->current = to;
        p->last_change_ms = now;
        scale_acted(p);
    }
    stoker_status_destroy(st);
    return 0;
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    scale_options o = {.engine = "exec",
                       .interval_ms = 5000,
                       .exec_timeout_ms = 60000,
                       .swarm = {.socket_path = "/var/run/docker.sock", .timeout_ms = 10000}};
    stoker_client_options_init(&o.client);
    slurm_engine_init(&o.slurm);
    o.cfg = (scale_config){.cooldown_ms = 30000,
                           .max_step = 2,
                           .idle_ms = 300000,
                           .tolerance = 0.1,
                           .down_window_ms = 30000};
    stoker_cli cli;
    stoker_cli_init(&cli, "stoker-scale",
                    "--broker URL (--exec-cmd CMD | --engine swarm --service NAME --pool NAME | "
                    "--dry-run) [options]",
                    "Follows the broker's autoscale signal (docs/autoscale.md): reads how many\n"
                    "producers each pool wants and scales the pool there, within bounds, a\n"
                    "bounded step at a time, after a cool-down. Every decision is one line on\n"
                    "stdout: pool, from, to, why.",
                    STOKER_LOG_WARN);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_broker_rows), &o.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_tls_rows), &o.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(rows), &o);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(slurm_engine_rows), &o.slurm);
    int code = stoker_cli_parse(&cli, argc, argv);
    if (code >= 0 || (code = stoker_cli_require(&cli, "broker", NULL)) != 0 ||
        (code = stoker_cli_check_url(&cli, "broker", o.client.url)) != 0 ||
        (code = stoker_cli_check_tls(&cli, &o.client)) != 0)
        return code;
    int slurm = strcmp(o.engine, "slurm") == 0;
    if (!slurm && o.slurm.template_path != NULL)
        return stoker_cli_fail(&cli, "--slurm-template is for --engine slurm");
    o.slurm.broker_url = o.client.url;
    if (slurm) {
        if (o.slurm.template_path == NULL)
            return stoker_cli_fail(&cli, "the slurm engine needs --slurm-template FILE (the "
                                         "producer job script it submits)");
        if (access(o.slurm.template_path, R_OK) != 0)
            return stoker_cli_fail(&cli, "cannot read --slurm-template %s: %s",
                                   o.slurm.template_path, strerror(errno));
    } else if (strcmp(o.engine, "swarm") == 0) {
        if (o.swarm.service == NULL || o.pool == NULL)
            return stoker_cli_fail(&cli, "the swarm engine needs --service NAME (the producers' "
                                         "service) and --pool NAME (the pool they are)");
    } else if (!o.dry_run && o.exec_cmd == NULL)
        return stoker_cli_fail(&cli, "the exec engine needs --exec-cmd CMD (or --dry-run to only "
                                     "print the decisions)");
    o.cfg.has_min = stoker_cli_given(&cli, "min");
    o.cfg.has_max = stoker_cli_given(&cli, "max");
    if (o.cfg.has_min && o.cfg.has_max && o.cfg.min > o.cfg.max)
        return stoker_cli_fail(&cli, "--min %u is above --max %u", o.cfg.min, o.cfg.max);
    stoker_process_on_stop(on_signal);
    if (strcmp(o.engine, "exec") == 0 && !o.dry_run)
        become_reaper();
    static scale_pool pools[POOLS_MAX];
    uint32_t n_pools = 0;
    broker_memory memory = {0};
    for (uint32_t round = 0; !stop && (o.rounds == 0 || round < o.rounds); round++) {
        if (round > 0)
            stoker_sleep_ms(o.interval_ms, &stop);
        reap_children();
        if (!stop)
            round_once(&o, &memory, pools, &n_pools);
    }
    return 0;
}
