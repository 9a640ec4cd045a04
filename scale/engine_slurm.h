// stoker-scale's slurm engine (docs/cluster.md, "Slurm"): one producer is one batch job,
// submitted with `sbatch` from a job script the user owns and cancelled with `scancel`. The
// engine finds its own jobs with `squeue` by their job name (PREFIX-POOL, the user's own jobs,
// pending or running), so a restarted controller counts what runs instead of remembering it.
// Every sbatch and scancel it runs is one line on stdout. It keeps no state between calls.
#ifndef ENGINE_SLURM_H
#define ENGINE_SLURM_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/cli.h"
#include "stoker/status.h"

typedef struct slurm_engine {
    const char *template_path; // --slurm-template: the job script sbatch submits (borrowed)
    const char *job_name;      // --slurm-job-name: prefix of the jobs' names (PREFIX-POOL)
    const char *partition;     // --slurm-partition: NULL leaves it to the script or the default
    const char *broker_url;    // exported to the jobs as STOKER_BROKER (borrowed)
    uint32_t timeout_ms;       // each sbatch, squeue or scancel must end within this
} slurm_engine;

// The engine's flags (--slurm-template, --slurm-job-name, --slurm-partition), over a
// slurm_engine as the cli group's base.
extern const stoker_cli_option slurm_engine_rows[3];

// Initialises e with the defaults (job-name prefix "stoker-producer", 60 s per command).
void slurm_engine_init(slurm_engine *e);

// The longest argument vector a builder below writes, its terminating NULL included.
#define SLURM_ARGV_MAX 16

// Argument vectors of the three commands, for pool: each writes argv (NULL-terminated, strings
// borrowed from e, pool, ids and buf, which must outlive argv) and returns its length, or -1
// when buf (len bytes) is too small or a name has characters Slurm cannot take (err says which).
//   sbatch --parsable --job-name=PREFIX-POOL [--partition=P] TEMPLATE
//   squeue --noheader --me --name=PREFIX-POOL --states=PENDING,CONFIGURING,RUNNING,SUSPENDED
//          --format=%i %T
//   scancel ID...                                    (n_ids in 1..SLURM_ARGV_MAX - 2)
int slurm_sbatch_argv(const slurm_engine *e, const char *pool, char *buf, size_t len,
                      const char **argv, char *err, size_t err_len);
int slurm_squeue_argv(const slurm_engine *e, const char *pool, char *buf, size_t len,
                      const char **argv, char *err, size_t err_len);
int slurm_scancel_argv(const char *const *ids, size_t n_ids, const char **argv);

// One job of the engine's as squeue lists it.
typedef struct slurm_job {
    char id[32];
    int pending; // 1: PENDING (or CONFIGURING), 0: running
} slurm_job;

// Parses squeue's "ID STATE" lines into jobs (at most max). Returns the number of jobs, or -1
// with err naming the line it could not read.
int slurm_parse_squeue(const char *text, slurm_job *jobs, size_t max, char *err, size_t err_len);

// Which of n jobs to cancel to keep `keep`: pending ones first (the newest first), then the
// newest running ones. Writes all n indexes into order (room for n), those to cancel first, and
// returns how many to cancel (n - keep, or 0).
size_t slurm_pick_cancel(const slurm_job *jobs, size_t n, size_t keep, size_t *order);

// Counts the pool's jobs with squeue into *count. Returns 0, or -1 with the reason in err.
int slurm_engine_count(const slurm_engine *e, const char *pool, uint32_t *count, char *err,
                       size_t err_len);

// Brings the pool's jobs to `to`: submits the missing ones (STOKER_BROKER and STOKER_POOL in
// their environment) or cancels the surplus (slurm_pick_cancel), logging each job. Returns 0,
// or -1 with the reason in err (jobs submitted before a failure stay and are counted next time).
int slurm_engine_scale(const slurm_engine *e, const char *pool, uint32_t to, char *err,
                       size_t err_len);

// A broker names a pool only once one of its producers has said hello; the slurm engine starts
// from no job at all. When st does not name `pool` (the --pool acted on; NULL: "default", and
// only when st names no pool at all), adds it with no producer (wanted: the broker's minimum),
// so the controller submits the first job. Returns 0, or -1 out of memory.
int slurm_engine_pool_absent(stoker_status *st, const char *pool);

#endif
