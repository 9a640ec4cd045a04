// Private to libstoker: a producer's shared memory, for pushes by reference. A producer on the
// broker's host keeps its retained chunks (retention.c) in a sealed memfd that it hands the
// broker over the broker's arena socket (SCM_RIGHTS, the broker checks our user); a push then
// carries only where each blob is, and the broker reads the examples in place: no byte crosses
// a socket, and the broker's one pass over them is the copy into a batch.
//
// The rule that keeps it exact: a region is written again only after the broker reported every
// example in it trained (retention releases it then), for until then the broker may still read
// it. A region whose push was taken back (retention_forget_from) may be held by the broker all
// the same: it waits (push_pool_defer) until the seqs it carried are trained.
//
// The attach protocol, on the arena's Unix socket (stoker/arena.h for the consumers' side): the
// producer connects to the abstract name from its hello reply and writes the one-time ticket
// from that reply (8 bytes, little-endian) with the memfd attached; the broker answers 16 bytes
// (the pool's secret, its size) and keeps the connection: its end (the producer exited) drops
// the broker's table entry, while pushes it still queues keep the memory mapped.
#ifndef STOKER_PUSH_POOL_H
#define STOKER_PUSH_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/chunk.h"

#define PUSH_POOL_BYTES (1ull << 30) // virtual; memory is used only where regions are written
// Pushes below this many bytes go as bytes: no gain (STOKER_SHM_PUSH_MIN sets another).
#define PUSH_POOL_MIN (64u << 10)

typedef struct push_pool push_pool;

// A new pool of bytes (rounded up to pages), sealed against shrinking. STOKER_IO with err.
int push_pool_create(uint64_t bytes, push_pool **out, char *err, size_t err_len);
// Unmaps and closes; accepts NULL. The broker's mapping, if any, keeps the memory alive.
void push_pool_destroy(push_pool *p);

// A region of len bytes, 64-byte aligned; NULL when none is free. Thread-safe.
uint8_t *push_pool_alloc(push_pool *p, uint64_t len);
// Gives back a region from push_pool_alloc; accepts NULL. Thread-safe.
void push_pool_free(push_pool *p, uint8_t *region);
// Gives back region once every seq below end is trained (push_pool_trained). Thread-safe.
void push_pool_defer(push_pool *p, uint8_t *region, uint64_t end);
// Every seq below through is trained: deferred regions up to it are given back.
void push_pool_trained(push_pool *p, uint64_t through);

// Lays out a chunk of capacity examples of schema in one region (each field 64-byte aligned):
// data[] point into the pool, owns_data 0; the region's start in *region. STOKER_NOMEM when the
// pool is full (chunk zeroed).
int push_pool_chunk(push_pool *p, const stoker_schema *schema, uint32_t capacity,
                    stoker_chunk *chunk, uint8_t **region);

// A copy of src's examples in one region, laid out as a push's blobs: a fixed field's values, a
// variable field's count + 1 offsets followed by its values (offsets at chunk->offsets, values
// at chunk->data, contiguous), each blob 64-byte aligned; owns_data 0, capacity = count. The
// region's start in *region. STOKER_NOMEM when the pool is full (chunk zeroed).
int push_pool_copy(push_pool *p, const stoker_chunk *src, stoker_chunk *chunk, uint8_t **region);

// Hands the pool to the broker: connects to its arena socket, presents ticket with the memfd
// and keeps the connection. On STOKER_OK the secret pushes name is push_pool_secret's; else err
// says why (the caller keeps pushing bytes). Closes any earlier connection first. Bounded by
// timeout_ms.
int push_pool_attach(push_pool *p, const char *socket_name, uint64_t ticket, uint32_t timeout_ms,
                     char *err, size_t err_len);
// Forgets the broker's secret (a new broker must be attached to again) and closes the
// connection.
void push_pool_detach(push_pool *p);
// Nonzero when attached on socket_name and the broker still holds the connection (the same
// broker: its secret stays good).
int push_pool_attached_to(push_pool *p, const char *socket_name);
// The secret of the current attachment; 0 when not attached.
uint64_t push_pool_secret(const push_pool *p);
// Fills *offsets with where chunk's n fields start in the pool when all of them lie in it (a
// variable field's blob, its offsets then its values, laid out as push_pool_copy does); 0
// (nothing written) otherwise.
int push_pool_offsets(const push_pool *p, const stoker_chunk *chunk, uint64_t *offsets);

#endif
