// The items of one epoch that a job takes as copies made again for it (docs/sharing.md): those
// the other jobs had already taken when it joined a dataset late (its first epoch is then whole
// at once), or those passed over while it lagged (--job-policy remake). Producers make them again
// by index in shards of their own, each shard for every job that still needs all of its items
// (jobs that joined together share them). A set is only books: which items are its (member),
// which are still to be cut into a shard (pending, in the order they are to be made), and how
// many the job has yet to acknowledge. Floor of the core: no call upward, no I/O.
#ifndef BROKER_REMAKE_H
#define BROKER_REMAKE_H

#include <stdint.h>

typedef struct remake {
    uint32_t epoch;
    uint64_t n;       // items in the dataset
    uint8_t *member;  // (n bits) the items of this epoch the job takes as copies made again
    uint8_t *pending; // (n bits) members not yet in a shard
    uint32_t *order;  // members to make, in order: [head, len) still to look at
    uint64_t head, len, cap;
    uint64_t members, pending_count, outstanding; // outstanding: members not yet acknowledged
} remake;

// A job holds sets for this many epochs at most (one per epoch it lags in or joined late to).
#define REMAKE_SETS 2

// A new, empty set for epoch `epoch` of a dataset of n items; NULL without memory.
remake *remake_create(uint64_t n, uint32_t epoch);
void remake_destroy(remake *r);
// Adds item `index` (a member from now on, pending). STOKER_OK, or STOKER_NOMEM (nothing added);
// a member already is left as it is.
int remake_add(remake *r, uint32_t index);
// Cuts up to want pending members, in order, into out (indices); returns how many.
uint32_t remake_cut(remake *r, uint32_t want, uint32_t *out);
int remake_is_member(const remake *r, uint32_t index);
int remake_is_pending(const remake *r, uint32_t index);
// Another job's shard makes member `index` for this job too: no longer pending.
void remake_take(remake *r, uint32_t index);
// A shard of member `index` was not made in full (its producer was lost): pending again, made
// after those pending now. STOKER_NOMEM when it cannot be kept (the set then never completes:
// said by the caller).
int remake_give_back(remake *r, uint32_t index);
// The job acknowledged count of its members.
void remake_acked(remake *r, uint64_t count);
// Whether every member was acknowledged.
int remake_complete(const remake *r);

// The set of epoch `epoch` among sets[0..REMAKE_SETS), or NULL.
remake *remake_find(remake *const *sets, uint32_t epoch);

#endif
