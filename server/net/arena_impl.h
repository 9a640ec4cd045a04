// The arena's private parts, shared by its two files: net/arena.c (the memfd, the Unix socket's
// thread, handshakes and the producers' shared memory) and net/arena_books.c (the regions: what is
// reserved, staged, filled and reusable). Both take the arena's own lock; see arena.h.
#ifndef ARENA_IMPL_H
#define ARENA_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "arena.h"

#define MAX_CONSUMERS  256
#define MAX_TICKETS    64
#define MAX_REGIONS    4096
#define MAX_POOLS      256
#define POOL_MAX_BYTES (1ull << 40) // a producer's shared memory we agree to map
// Requests read straight into the arena take at most this many quarters of it: the rest is for
// batches that are copied (from several pushes, or of producers on this host), which need room
// only while in flight, where a staged request stays as long as it is queued.
#define STAGE_QUARTERS 3

// A producer's shared memory, mapped read-only: one reference for the producer's connection,
// one for each push that points into it (stoker_request_hold), so the examples it queued stay
// readable after the producer is gone.
typedef struct broker_pool {
    atomic_uint refs;
    const uint8_t *base;
    uint64_t bytes;
} broker_pool;

typedef struct pool_slot {
    int fd; // the producer's connection; -1: free slot
    uint64_t secret, session;
    broker_pool *pool;
} pool_slot;

typedef struct pool_ticket {
    uint64_t ticket, session;
} pool_ticket;

typedef struct region {
    uint64_t off, len;
    uint64_t lease;
    uint32_t consumer;
    int lease_held;    // until acknowledged or redelivered
    int consumer_held; // until released, or the consumer's connection ends
    int filling;       // reserved, the batch not yet copied in (broker_arena_fill)
    int staged;        // a request read into it (broker_arena_stage) until broker_arena_unstage
} region;

typedef struct consumer {
    int fd; // -1: free slot
    uint64_t secret;
    uint8_t partial[8]; // a release split across reads
    uint32_t n_partial;
} arena_consumer;

struct broker_arena {
    pthread_mutex_t lock;
    int memfd, listen_fd, wake[2];
    uint8_t *base;
    uint64_t bytes;
    char name[80];
    pthread_t thread;

    region regions[MAX_REGIONS]; // sorted by off
    uint32_t n_regions;
    uint64_t used_bytes;
    arena_consumer consumers[MAX_CONSUMERS + 1]; // index = consumer id; 0 unused
    uint64_t tickets[MAX_TICKETS];
    uint32_t next_ticket;
    pool_slot pools[MAX_POOLS];
    pool_ticket pool_tickets[MAX_POOLS]; // as many as pools: a crowd of hellos expires none
    uint32_t next_pool_ticket;
    uint64_t staged_bytes; // in staged regions, at most STAGE_QUARTERS of the arena
    // Staged requests outlive the broker's books when they are let go late: the last of them
    // (or broker_arena_destroy, when none is out) frees the mapping and this.
    uint32_t staged_out;
    int destroyed;
};

// --- arena_books.c: regions (under the lock) ---

void drop_region(broker_arena *a, uint32_t i);
// Drops region i when nothing holds it any more.
void maybe_free(broker_arena *a, uint32_t i);
// The region of lease, or -1.
int find_lease(const broker_arena *a, uint64_t lease);
// The memory and the books, once the broker and every staged request let go.
void arena_free(broker_arena *a);

#endif
