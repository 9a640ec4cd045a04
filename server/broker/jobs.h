// Jobs sharing one broker's producers (docs/sharing.md): each job gets every example made after
// it joined exactly once, and the producers make each example once. A job is a broker of its
// own for its consumers (trainers, leases, groups, mixtures, batching, commits): the lead (the
// first job to say hello) owns the producers and their pushes; every further job is a follower
// broker whose producers are mirrors of the lead's (same ids) and whose queues hold the same
// pushes (shared, reference-counted blocks: no copy). A push is accepted when every job has room
// for it (the slowest job paces the producers, within --job-lag), and a producer may forget an
// example once every job trained it. Floor 2: it uses the core, the queues' blocks, the trained
// sets and commit.c's byte room; the dispatcher (broker.c) routes requests and calls it.
#ifndef BROKER_JOBS_H
#define BROKER_JOBS_H

#include <stdint.h>

#include "core.h"
#include "stoker/status.h"

// Whether job b is the one named name (a broker no trainer named yet: the default job's, "").
// A trainer's heartbeat reporting what it trained counts only in its own job.
int jobs_is(const broker *b, const char *name);
// Whether job b takes examples: running or absent (not ended or detached). The lead before its
// first trainer counts as taking: it keeps what producers push, as a lone broker does.
int jobs_takes(const broker *b);
// More than one job of b's lead (b: any job) takes examples now (running or absent).
int jobs_shared(const broker *b);
// The examples per producer job b's queues may hold beyond its queue depth while jobs share
// (--job-lag, 0: one queue depth); 0 when b's job is alone.
uint64_t jobs_lag(const broker *b);
// Room in job b for fresh examples (bytes) in its producer m's queue: its queue depth plus the
// lag while jobs share, an empty sized queue taking any chunk (push.c), its bytes within
// --max-bytes (bytes 0: not counted).
int jobs_fits(const broker *b, const producer *m, uint64_t fresh, uint64_t bytes);
// Every job (its job_slot bit): a push of the epochs' shards or of a stream.
#define JOBS_ALL UINT32_MAX
// The jobs of lead b among takers (job_slot bits) that take examples and have no room for fresh
// examples (bytes) of producer p (its queue or mirror's within depth and lag, its bytes within
// --max-bytes), or, with strict epochs, still wait for copies of an epoch before the push's
// `epoch` made again for them; 0 when every one takes it now.
uint32_t jobs_short(const broker *b, const producer *p, uint32_t fresh, uint64_t bytes,
                    uint32_t takers, uint32_t epoch);
// Of the jobs in short_mask (jobs_short), those that pass over a push of epoch `epoch` instead
// of holding it back, to have its items made again by index later: a job behind in its strict
// epochs, or (--job-policy remake) one lagging that has pulled; each with a set for that epoch
// or room for one, while some other job takes the push (when every job is short the producers
// wait).
uint32_t jobs_may_pass(const broker *b, uint32_t short_mask, uint32_t epoch);
// Whether follower room holds for p's next chunk in every follower of lead b (queues.c).
int jobs_have_room(const broker *b, const producer *p);
// Lead b just appended fresh examples (bytes) of p at its queue's tail (p->next_seq already past
// them): queued for every follower that takes examples too, and freed at once from b's own queue
// when b's job ended. takers: the jobs (job_slot bits) a shard made again goes to (JOBS_ALL:
// every job); passed: jobs that pass it over (jobs_may_pass), made again for them later.
void jobs_appended(broker *b, producer *p, uint32_t fresh, uint64_t bytes, uint32_t takers,
                   uint32_t passed, uint64_t now_ms);
// Trainers of job b acknowledged range r of producer p (its trained set already says so): with
// a dataset, the items every job that takes examples has now trained are acknowledged in the
// lead's epochs (an epoch ends when every job trained its every item).
void jobs_acked(broker *b, const producer *p, const queue_range *r, uint64_t now_ms);
// Whether any job was handed an example yet (a job joining a dataset then comes too late).
int jobs_started(const broker *b);
// Writes into rep what producer p of lead b may forget: the seqs every job that takes examples
// trained (the intersection of their trained sets).
void jobs_tell_trained(const broker *b, const producer *p, stoker_reply *rep);
// The follower of lead b with a trainer of that session, or NULL.
broker *jobs_find_trainer(const broker *b, uint64_t session);
// The job named name: lead b or one of its followers; NULL when none.
broker *jobs_find(broker *b, const char *name);
// Names b's job at its first trainer's hello, or starts it again after it ended (from the
// examples made from now on).
void jobs_start(broker *b, const char *name, uint64_t now_ms);
// Registers f, a new broker the dispatcher made for job name, as a follower of lead b: its
// producers mirror b's; when no job was handed an example yet, it gets a copy of what b has
// queued (jobs that start together get the same examples), else it starts from the examples
// made after it joined. STOKER_NOMEM (f is then the caller's).
int jobs_add(broker *b, broker *f, const char *name, uint64_t now_ms);
// The same for a job joining a dataset after its epochs began: it takes every item once per
// epoch from `epoch` on (epochs_newest_open: its first), the items of it the others took
// already made again for it by index (remake.h).
int jobs_add_late(broker *b, broker *f, const char *name, uint32_t epoch, uint64_t now_ms);
// Removes follower f from lead b (to be destroyed by the caller).
void jobs_remove(broker *b, broker *f);
// Mirrors lead b's producers (state, seqs, schema, producer events) into every follower.
void jobs_sync(broker *b, uint64_t now_ms);
// The jobs' states: running while a consumer of theirs is connected, absent otherwise; a job
// whose consumers all said goodbye, or absent beyond --job-timeout, ends while another job
// goes on, and what it held queued is freed (counted released).
void jobs_tick(broker *b, uint64_t now_ms);
// Whether job j still waits for copies made again for it of an epoch before `epoch`: with
// strict epochs it takes none of a later epoch's items meanwhile (passed over and made again
// for it once it is there), so its epochs come one after the other.
int jobs_owes_before(const broker *j, uint32_t epoch);
// Whether a consumer of job j pulled yet: one still starting (connecting, loading its model) is
// not detached or passed over for lagging; the producers wait for it meanwhile, within the lag.
int jobs_pulled(const broker *j);
// Whether job b was detached (--job-policy detach); then why, in why.
int jobs_detached(const broker *b, char *why, size_t why_len);

#endif
