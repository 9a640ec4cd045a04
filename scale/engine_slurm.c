// stoker-scale's slurm engine (engine_slurm.h): sbatch, squeue and scancel run as child
// processes (posix_spawnp, found on PATH), their output read through pipes within a timeout.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine_slurm.h"
#include "stoker/clock.h"
#include "stoker/log.h"

extern char **environ;

#define AT(member) STOKER_CLI_AT(slurm_engine, member)
const stoker_cli_option slurm_engine_rows[3] = {
    {"slurm-template", "FILE",
     "slurm engine: the producer job script sbatch submits\n"
     "(STOKER_BROKER and STOKER_POOL in its environment)",
     STOKER_CLI_STRING, AT(template_path), .imin = 1, .imax = 4000},
    {"slurm-job-name", "NAME",
     "slurm engine: jobs are named NAME-POOL; the engine\ncounts and cancels only those",
     STOKER_CLI_STRING, AT(job_name), .imin = 1, .imax = 100},
    {"slurm-partition", "P", "slurm engine: submit to partition P (default: the script's)",
     STOKER_CLI_STRING, AT(partition), .imin = 1, .imax = 200},
};

void
slurm_engine_init(slurm_engine *e)
{
    memset(e, 0, sizeof(*e));
    e->job_name = "stoker-producer";
    e->timeout_ms = 60000;
}

// A name Slurm takes as one job name in one argument and in squeue's comma-separated --name.
static int
name_ok(const char *what, const char *s, char *err, size_t err_len)
{
    for (const char *c = s; *c; c++)
        if (*c <= ' ' || *c == ',' || *c == '\'' || *c == '"' || *c == '\\' || *c == 0x7f) {
            snprintf(err, err_len,
                     "%s '%s' has a character a Slurm job name cannot carry ('%c'): use "
                     "letters, digits, '-', '_' or '.'",
                     what, s, *c > ' ' ? *c : '?');
            return 0;
        }
    return 1;
}

// Appends "PREFIXVALUE" (NUL-terminated) at *at in buf; returns it, or NULL when it does not fit.
static const char *
put(char *buf, size_t len, size_t *at, const char *prefix, const char *value, const char *suffix)
{
    int n = snprintf(buf + *at, len - *at, "%s%s%s", prefix, value, suffix);
    if (n < 0 || (size_t)n >= len - *at)
        return NULL;
    const char *s = buf + *at;
    *at += (size_t)n + 1;
    return s;
}

static int
job_name_arg(const slurm_engine *e, const char *pool, const char *flag, char *buf, size_t len,
             size_t *at, const char **out, char *err, size_t err_len)
{
    if (!name_ok("--slurm-job-name", e->job_name, err, err_len) ||
        !name_ok("pool", pool, err, err_len))
        return -1;
    char name[512];
    snprintf(name, sizeof(name), "%s-", e->job_name);
    if ((*out = put(buf, len, at, flag, name, pool)) == NULL) {
        snprintf(err, err_len, "the job name %s%s is too long", name, pool);
        return -1;
    }
    return 0;
}

int
slurm_sbatch_argv(const slurm_engine *e, const char *pool, char *buf, size_t len, const char **argv,
                  char *err, size_t err_len)
{
    size_t at = 0;
    int n = 0;
    argv[n++] = "sbatch";
    argv[n++] = "--parsable";
    if (job_name_arg(e, pool, "--job-name=", buf, len, &at, &argv[n++], err, err_len) != 0)
        return -1;
    if (e->partition != NULL) {
        if (!name_ok("--slurm-partition", e->partition, err, err_len))
            return -1;
        if ((argv[n++] = put(buf, len, &at, "--partition=", e->partition, "")) == NULL) {
            snprintf(err, err_len, "--slurm-partition is too long");
            return -1;
        }
    }
    argv[n++] = e->template_path;
    argv[n] = NULL;
    return n;
}

int
slurm_squeue_argv(const slurm_engine *e, const char *pool, char *buf, size_t len, const char **argv,
                  char *err, size_t err_len)
{
    size_t at = 0;
    int n = 0;
    argv[n++] = "squeue";
    argv[n++] = "--noheader";
    argv[n++] = "--me";
    if (job_name_arg(e, pool, "--name=", buf, len, &at, &argv[n++], err, err_len) != 0)
        return -1;
    // A COMPLETING job is on its way out: it no longer counts.
    argv[n++] = "--states=PENDING,CONFIGURING,RUNNING,SUSPENDED";
    argv[n++] = "--format=%i %T";
    argv[n] = NULL;
    return n;
}

int
slurm_scancel_argv(const char *const *ids, size_t n_ids, const char **argv)
{
    if (n_ids == 0 || n_ids > SLURM_ARGV_MAX - 2)
        return -1;
    int n = 0;
    argv[n++] = "scancel";
    for (size_t i = 0; i < n_ids; i++)
        argv[n++] = ids[i];
    argv[n] = NULL;
    return n;
}

int
slurm_parse_squeue(const char *text, slurm_job *jobs, size_t max, char *err, size_t err_len)
{
    size_t n = 0;
    const char *line = text;
    while (*line != '\0') {
        const char *end = strchr(line, '\n');
        size_t line_len = end != NULL ? (size_t)(end - line) : strlen(line);
        char copy[256], id[64], state[64], extra[2];
        if (line_len >= sizeof(copy))
            line_len = sizeof(copy) - 1;
        memcpy(copy, line, line_len);
        copy[line_len] = '\0';
        int got = sscanf(copy, "%63s %63s %1s", id, state, extra);
        if (got == 2 && strlen(id) < sizeof(jobs[0].id)) {
            if (n == max) {
                snprintf(err, err_len, "squeue lists more than %zu jobs", max);
                return -1;
            }
            snprintf(jobs[n].id, sizeof(jobs[n].id), "%s", id);
            jobs[n].pending = strcmp(state, "PENDING") == 0 || strcmp(state, "CONFIGURING") == 0;
            n++;
        } else if (got != EOF) {
            snprintf(err, err_len, "cannot read squeue's line '%s' (expected: JOBID STATE)", copy);
            return -1;
        }
        line = end != NULL ? end + 1 : line + line_len;
    }
    return (int)n;
}

// Orders a before b: pending before running, then the higher job id (the newer) first.
static int
cancel_before(const slurm_job *a, const slurm_job *b)
{
    if (a->pending != b->pending)
        return a->pending;
    return strtoull(a->id, NULL, 10) > strtoull(b->id, NULL, 10);
}

size_t
slurm_pick_cancel(const slurm_job *jobs, size_t n, size_t keep, size_t *order)
{
    if (keep >= n)
        return 0;
    // Insertion sort of the indexes (n is at most a few thousand jobs), then the first n - keep.
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        while (j > 0 && cancel_before(&jobs[i], &jobs[order[j - 1]])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    return n - keep;
}

// Runs argv (PATH lookup) with extra (NULL-terminated "NAME=VALUE"s, or NULL) added to the
// environment; its stdout into out (NUL-terminated, cut at out_len) and the start of its
// stderr into err. Returns 0 when it exited 0 within timeout_ms, otherwise -1 with the reason in
// err.
static int
run_command(const char *const *argv, char *const *extra, uint32_t timeout_ms, char *out,
            size_t out_len, char *err, size_t err_len)
{
    size_t n_env = 0, n_extra = 0;
    while (environ[n_env] != NULL)
        n_env++;
    while (extra != NULL && extra[n_extra] != NULL)
        n_extra++;
    char **env = calloc(n_env + n_extra + 1, sizeof(*env));
    if (env == NULL) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++) {
        int replaced = 0;
        for (size_t j = 0; j < n_extra; j++) {
            size_t name_len = strcspn(extra[j], "=") + 1;
            replaced |= strncmp(environ[i], extra[j], name_len) == 0;
        }
        if (!replaced)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < n_extra; j++)
        env[k++] = extra[j];

    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    int rv;
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
        rv = errno;
        snprintf(err, err_len, "cannot make a pipe for %s: %s", argv[0], strerror(rv));
        goto close_pipes;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    pid_t pid;
    rv = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, env);
    posix_spawn_file_actions_destroy(&fa);
    close(out_pipe[1]);
    close(err_pipe[1]);
    out_pipe[1] = err_pipe[1] = -1;
    if (rv != 0) {
        snprintf(err, err_len, "cannot run %s: %s (is Slurm's client on PATH?)", argv[0],
                 strerror(rv));
        goto close_pipes;
    }

    char err_text[1024];
    size_t out_at = 0, err_at = 0;
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    int timed_out = 0;
    struct pollfd fds[2] = {{.fd = out_pipe[0], .events = POLLIN},
                            {.fd = err_pipe[0], .events = POLLIN}};
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
        uint64_t now = stoker_now_ms();
        if (now >= deadline) {
            timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        if (poll(fds, 2, (int)(deadline - now)) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || fds[i].revents == 0)
                continue;
            char chunk[4096];
            ssize_t got = read(fds[i].fd, chunk, sizeof(chunk));
            if (got <= 0) {
                fds[i].fd = -1;
                continue;
            }
            char *to = i == 0 ? out : err_text;
            size_t cap = i == 0 ? out_len : sizeof(err_text);
            size_t *at = i == 0 ? &out_at : &err_at;
            size_t take = (size_t)got < cap - 1 - *at ? (size_t)got : cap - 1 - *at;
            memcpy(to + *at, chunk, take);
            *at += take;
        }
    }
    out[out_at] = '\0';
    err_text[err_at] = '\0';
    while (err_at > 0 && (err_text[err_at - 1] == '\n' || err_text[err_at - 1] == ' '))
        err_text[--err_at] = '\0';
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    rv = -1;
    if (timed_out)
        snprintf(err, err_len, "%s ran past %.0f s and was killed", argv[0], timeout_ms / 1000.0);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        rv = 0;
    else if (WIFEXITED(status))
        snprintf(err, err_len, "%s exited %d: %s", argv[0], WEXITSTATUS(status),
                 err_at > 0 ? err_text : "(nothing on stderr)");
    else
        snprintf(err, err_len, "%s ended by signal %d", argv[0], WTERMSIG(status));
close_pipes:
    for (int i = 0; i < 2; i++) {
        if (out_pipe[i] >= 0)
            close(out_pipe[i]);
        if (err_pipe[i] >= 0)
            close(err_pipe[i]);
    }
    free(env);
    return rv == 0 ? 0 : -1;
}

#define JOBS_MAX 4096

static int
list_jobs(const slurm_engine *e, const char *pool, slurm_job *jobs, char *err, size_t err_len)
{
    char buf[1024];
    const char *argv[SLURM_ARGV_MAX];
    if (slurm_squeue_argv(e, pool, buf, sizeof(buf), argv, err, err_len) < 0)
        return -1;
    static char out[JOBS_MAX * 48];
    if (run_command(argv, NULL, e->timeout_ms, out, sizeof(out), err, err_len) != 0)
        return -1;
    return slurm_parse_squeue(out, jobs, JOBS_MAX, err, err_len);
}

int
slurm_engine_count(const slurm_engine *e, const char *pool, uint32_t *count, char *err,
                   size_t err_len)
{
    static slurm_job jobs[JOBS_MAX];
    int n = list_jobs(e, pool, jobs, err, err_len);
    if (n < 0)
        return -1;
    *count = (uint32_t)n;
    return 0;
}

static int
submit(const slurm_engine *e, const char *pool, uint32_t nth, uint32_t to, char *err,
       size_t err_len)
{
    char buf[1024], env_broker[4200], env_pool[128];
    const char *argv[SLURM_ARGV_MAX];
    if (slurm_sbatch_argv(e, pool, buf, sizeof(buf), argv, err, err_len) < 0)
        return -1;
    snprintf(env_broker, sizeof(env_broker), "STOKER_BROKER=%s", e->broker_url);
    snprintf(env_pool, sizeof(env_pool), "STOKER_POOL=%s", pool);
    char *extra[] = {env_broker, env_pool, NULL};
    char out[256];
    if (run_command(argv, extra, e->timeout_ms, out, sizeof(out), err, err_len) != 0)
        return -1;
    out[strcspn(out, ";\n")] = '\0'; // --parsable: "ID" or "ID;CLUSTER"
    printf("slurm: pool '%s': submitted job %s (%u of %u): %s %s %s\n", pool, out, nth, to, argv[0],
           argv[2], e->template_path);
    fflush(stdout);
    return 0;
}

int
slurm_engine_scale(const slurm_engine *e, const char *pool, uint32_t to, char *err, size_t err_len)
{
    static slurm_job jobs[JOBS_MAX];
    int n = list_jobs(e, pool, jobs, err, err_len);
    if (n < 0)
        return -1;
    if ((uint32_t)n < to) {
        if (to > JOBS_MAX) {
            snprintf(err, err_len, "%u jobs is more than the slurm engine keeps (%d)", to,
                     JOBS_MAX);
            return -1;
        }
        for (uint32_t i = (uint32_t)n; i < to; i++)
            if (submit(e, pool, i + 1, to, err, err_len) != 0)
                return -1;
        return 0;
    }
    static size_t order[JOBS_MAX];
    size_t k = slurm_pick_cancel(jobs, (size_t)n, to, order);
    // scancel in batches of what one argument vector holds.
    for (size_t first = 0; first < k; first += SLURM_ARGV_MAX - 2) {
        const char *ids[SLURM_ARGV_MAX - 2];
        size_t m = k - first < SLURM_ARGV_MAX - 2 ? k - first : SLURM_ARGV_MAX - 2;
        char list[SLURM_ARGV_MAX * 40];
        size_t at = 0;
        for (size_t i = 0; i < m; i++) {
            const slurm_job *j = &jobs[order[first + i]];
            ids[i] = j->id;
            at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s (%s)", i ? ", " : " ", j->id,
                                   j->pending ? "pending" : "running");
        }
        const char *argv[SLURM_ARGV_MAX];
        slurm_scancel_argv(ids, m, argv);
        char out[256];
        if (run_command(argv, NULL, e->timeout_ms, out, sizeof(out), err, err_len) != 0)
            return -1;
        printf("slurm: pool '%s': cancelled job%s%s: %d to %u\n", pool, m > 1 ? "s" : "", list, n,
               to);
        fflush(stdout);
    }
    return 0;
}

int
slurm_engine_pool_absent(stoker_status *st, const char *pool)
{
    if (pool == NULL && st->n_pools > 0)
        return 0; // every pool: those the broker names
    if (pool == NULL)
        pool = "default";
    for (uint32_t i = 0; i < st->n_pools; i++)
        if (strcmp(st->pools[i].name, pool) == 0)
            return 0;
    stoker_pool_info *pools = realloc(st->pools, (st->n_pools + 1) * sizeof(*pools));
    if (pools == NULL)
        return -1;
    st->pools = pools;
    stoker_pool_info *p = &pools[st->n_pools++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", pool);
    p->wanted = st->autoscale_min;
    snprintf(p->why, sizeof(p->why), "no producer of pool '%s' has joined the broker yet", pool);
    return 0;
}
