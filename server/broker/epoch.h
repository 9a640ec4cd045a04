// The broker's epochs over a dataset: which items of which epoch each producer makes. The broker
// owns the epoch: a permutation of 0..N-1 from the shuffle seed and the epoch number, handed out
// in shards on request; a lost producer's unaccepted items go back to be handed out again; a push
// of items that are no longer the pusher's (it was lost meanwhile) is refused, so every item is
// accepted once per epoch; an epoch ends when its every item was acknowledged by trainers (an
// EPOCH_END event). It does not queue or deliver examples (push.c, lease.c).
// Private to the broker's rooms; every call runs under the broker's lock and does no I/O.
#ifndef BROKER_EPOCH_H
#define BROKER_EPOCH_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/status.h"
#include "stoker/wire.h"

struct broker;
struct producer;
struct queue_range;
struct remake;
struct broker_outbox;

typedef struct epochs epochs;

// An item on the wire: epoch and index in one number.
#define EPOCH_ITEM(epoch, index) (((uint64_t)(epoch) << 32) | (uint64_t)(index))
#define EPOCH_OF(item)           ((uint32_t)((item) >> 32))
#define EPOCH_INDEX(item)        ((item)&0xffffffffu)

// A new state for cfg's dataset (cfg->dataset_size > 0), or NULL when out of memory. Starts a
// thread drawing the first epoch's permutation (each epoch's is drawn while the one before is
// made); epochs_destroy waits for it.
epochs *epochs_create(uint64_t dataset_size, uint64_t seed, uint32_t shard_items, uint32_t epochs,
                      int strict);
// Frees; accepts NULL.
void epochs_destroy(epochs *e);

// Whether a producer's hello fits the dataset: STOKER_OK, or STOKER_DATASET_MISMATCH with the
// reason in err (a stream producer, another size, another listing than the first producer's).
int epochs_check_hello(struct broker *b, const stoker_request *req, char *err, size_t err_len);

// Answers a SHARD request (takes req): the producer's next items and the shard's id, RETRY when
// none can be handed out now, END_OF_DATA when the last epoch is made. The producer keeps the
// shard it still pushes (it asks ahead, while that shard's last pushes are in flight), up to
// two shards in all: one asking while it holds two first has the older one's rest handed back.
int epochs_handle_shard(struct broker *b, void *token, uint32_t pipe, stoker_request *req,
                        uint64_t now_ms, struct broker_outbox *out);

// Whether examples skip.. of push req from p may be accepted: they must be the next items of
// the shard the push names (req->shard; 0: p's oldest), assigned to p, not yet accepted, in
// the shard's order. STOKER_OK, or STOKER_SHARD_REVOKED / STOKER_INVALID (out of order) with
// err; on SHARD_REVOKED what p still holds of that shard is handed back (it drops the shard).
int epochs_check_push(struct broker *b, struct producer *p, const stoker_request *req,
                      uint32_t skip, char *err, size_t err_len);
// Marks examples skip.. of req (just queued) accepted; a shard pushed in full leaves p's list.
void epochs_accepted(struct broker *b, struct producer *p, const stoker_request *req,
                     uint32_t skip);
// Hands back the items of every shard p holds (both, when it asked ahead) that it has not
// pushed (it was lost or said goodbye).
void epochs_release(struct broker *b, struct producer *p, const char *why);
// Marks the items of r (leased, now acknowledged) done; an epoch whose last item this was gets
// its EPOCH_END event.
void epochs_acked(struct broker *b, const struct queue_range *r, uint64_t now_ms);

// Nonzero when no item can reach the queues until some that were handed out are acknowledged:
// no shard is with a producer, no open epoch has items to hand out, and no epoch may open (a
// strict epoch, or two open, waits for its last acknowledgements; or the last epoch was made).
// A group then forms its last, short step from what is queued (group.c).
int epochs_waiting(const struct broker *b);
// Lets the next epoch open before the oldest is acknowledged in full (once, until one opens or
// the oldest ends): a group's last examples of an epoch, fewer than its ranks, then ride with
// the next epoch's first step. Returns 0 when no further epoch will be made (--epochs reached).
int epochs_open_early(struct broker *b);

// The first epoch not yet opened (none of its items handed out); UINT32_MAX when no further
// epoch will be made (--epochs reached). A job joining late starts with it (jobs.c).
uint32_t epochs_next_unopened(const epochs *e);

// The newest epoch open (some of its items handed out), UINT32_MAX when none is. A job joining
// late takes it as its first, whole: the items of it accepted before it joined are made again
// for it (epochs_remake_accepted), the rest it shares.
uint32_t epochs_newest_open(const epochs *e);
// Adds to r every item of epoch k accepted so far (in the order they were handed out).
// STOKER_NOMEM.
int epochs_remake_accepted(const epochs *e, uint32_t k, struct remake *r);

// Items to make again for some jobs only (their job_slot bits in targets), index[0..n) of
// epoch `epoch`, handed to p as a shard (at most epochs_shard_items): its pushes go to those
// jobs only (epochs_push_remade), its unmade rest back to their sets. STOKER_NOMEM (nothing
// handed: the caller keeps the items).
int epochs_give_remade(struct broker *b, struct producer *p, uint32_t epoch, const uint32_t *index,
                       uint32_t n, uint32_t targets, void *token, struct broker_outbox *out);
// Whether shard `shard` of p (0: its oldest) holds items made again; then its jobs in targets.
int epochs_push_remade(const struct broker *b, const struct producer *p, uint64_t shard,
                       uint32_t *targets);
// The job of slot `slot` is gone: no shard is made for it any more.
void epochs_forget_slot(struct broker *b, uint32_t slot);
// Items a shard holds at most; items in the dataset; whether epochs are strict (one open at once).
uint32_t epochs_shard_items(const epochs *e);
uint64_t epochs_items(const epochs *e);
int epochs_strict(const epochs *e);
// Job `job` acknowledged range r (a dataset's items, all of one epoch): an epoch whose every
// item it trained, its copies made again included, ends for it (an EPOCH_END event in its
// log), in order, whatever the other jobs have trained.
void epochs_job_acked(struct broker *job, const struct queue_range *r, uint64_t now_ms);
// Job `job`'s epochs start with `first` (a job joining late): those before ended for it.
void epochs_job_starts(struct broker *job, uint32_t first, uint64_t now_ms);

// For the status: items per epoch, epochs acknowledged in full, the epoch being handed out,
// items handed back after losses, pushes refused as revoked.
void epochs_report(const epochs *e, stoker_status *st);

#endif
