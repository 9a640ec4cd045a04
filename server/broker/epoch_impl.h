// The epochs' state (epoch.c), shared with epoch_remake.c, which keeps the books of items made
// again for some jobs only. Private to those two files.
#ifndef BROKER_EPOCH_IMPL_H
#define BROKER_EPOCH_IMPL_H

#include <stdint.h>

#include "drawer.h"
#include "epoch.h"

struct broker;

// Epochs open at once at most: two (the oldest and, unless strict, the next), and one more
// opened early for a group's leftover of fewer examples than ranks (epochs_open_early).
#define WINDOW 3

typedef struct epoch {
    uint32_t number;
    uint32_t *order;    // (n,) the permutation, handed out from cursor on
    uint32_t *returned; // items handed back, handed out before the order's rest
    uint64_t n_returned, cap_returned;
    uint64_t cursor; // next position in order
    uint64_t acked;
} epoch;

// A producer's shard: the items handed to it, made and accepted in this order up to `done`.
// Removed once done == n (or handed back). A shard made again (remade) goes to the jobs of its
// targets only (bits of their job_slot), its unmade rest back to their sets (remake.h).
typedef struct held {
    uint32_t producer_id;
    uint64_t id; // named by the shard's pushes; ids grow with each shard cut
    uint32_t n, done;
    uint64_t *items; // (n,) EPOCH_ITEM, all of one epoch
    int remade;
    uint32_t targets;
} held;

struct epochs {
    uint64_t n;
    uint64_t seed;
    uint32_t shard_items;
    uint32_t limit; // epochs to make, 0: without end
    int strict;
    int has_fingerprint;
    uint64_t fingerprint;
    epoch win[WINDOW]; // epoch k at win[k % WINDOW] while lo <= k < opened
    uint32_t lo, opened;
    int early;  // a group may open one epoch more than the rule allows (epochs_open_early)
    held *held; // at most two per producer (HELD_MAX), unordered
    uint32_t n_held, cap_held;
    uint64_t first_shard;  // the id of this broker's first shard (shard_ids_start)
    uint64_t next_shard;   // the id of the next shard cut
    drawer *next;          // draws the next epoch's permutation meanwhile (NULL: no memory for it)
    uint32_t *spare_order; // a finished epoch's permutation array, for the next draw
    uint64_t *spare_items; // a released shard's list, for the next shard
    uint64_t reassigned, revoked;
};

// Shards a producer holds at most: the one its pushes fill and the one asked for ahead.
#define HELD_MAX 2
// Job slot `slot` of lead b (a remade shard names its jobs so), or NULL when it is gone.
struct broker *epoch_job_at(struct broker *b, uint32_t slot);
// The unmade rest of remade shard h, pending again in its jobs' sets.
void epoch_hand_back_remade(struct broker *b, const held *h);
// Whether a job of lead b still waits for copies made again for it (its producers go on).
int epoch_copies_owed(const struct broker *b);
// Job j trained count more items of epoch k (of n items): an epoch whose every item it trained
// ends for it (an EPOCH_END event in its log), in order.
void epoch_job_trained(struct broker *j, uint32_t k, uint64_t count, uint64_t n, uint64_t now_ms);
// Job j's epochs start with `first`: the ones before ended for it (said, so that its consumers
// count epoch ends by the dataset's numbers).
void epoch_job_starts(struct broker *j, uint32_t first, uint64_t n, uint64_t now_ms);

#endif
