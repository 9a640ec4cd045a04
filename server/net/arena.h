// The broker's shared-memory arena (stoker/arena.h has the consumer's side and the protocol): a
// sealed memfd the broker writes batches for local trainers into, the Unix socket that hands it
// (read-only) to consumers that prove they share the host and user, and the regions' books. A
// region is reused only when its lease is done (acknowledged or redelivered) AND its consumer
// released it or is gone. It decides nothing about leases: pull.c and lease.c call it.
// Thread-safety: its own lock (taken after the broker's, never the other way round) and its own
// thread (the socket); every function here may be called under the broker's lock.
#ifndef BROKER_ARENA_H
#define BROKER_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/wire.h"

typedef struct broker_arena broker_arena;

// Creates an arena of bytes (memfd, mapped, never grows) and its socket and thread. STOKER_OK and
// *out, or an error with the reason in err.
int broker_arena_create(uint64_t bytes, broker_arena **out, char *err, size_t err_len);
// Stops the thread, closes every consumer's connection, unmaps and closes. Accepts NULL.
void broker_arena_destroy(broker_arena *a);

// The socket's abstract name (without the leading NUL; borrowed) and a new one-time ticket for a
// trainer that said hello (and presented the token, if any).
const char *broker_arena_socket(const broker_arena *a);
uint64_t broker_arena_ticket(broker_arena *a);

// A one-time ticket for the producer of session (which said hello, with the token if any) to
// hand over its shared memory (common/transport/push_pool.h has the protocol).
uint64_t broker_arena_pool_ticket(broker_arena *a, uint64_t session);
// Points the chunk of req, a push by reference, into its producer's shared memory and ties a
// reference to the mapping to req (the queue keeps it as long as any of its examples). Errors,
// with err: STOKER_UNKNOWN_PEER when no connected producer of req's session holds its secret
// (the producer says hello again and hands it over anew), STOKER_INVALID when a blob lies
// outside the memory or is misaligned.
int broker_arena_pool_resolve(broker_arena *a, stoker_request *req, char *err, size_t err_len);

// Memory in the arena for a request of len bytes the intake reads from a producer's stream, whose
// first blob starts blob_at bytes in (common/wire: after the protobuf part): placed so that the
// blob starts at a multiple of STOKER_ARENA_ALIGN, so that a batch of its examples may be sent
// from where it lies (broker_arena_reserve) instead of copied. Held until broker_arena_unstage
// (buf as given, arg the arena: a stoker_wire_decode_request_buf buf_free), also past
// broker_arena_destroy. NULL when staged requests would take more than three quarters of the arena,
// or no room is free: the intake reads into memory of its own instead.
uint8_t *broker_arena_stage(broker_arena *a, size_t len, size_t blob_at);
void broker_arena_unstage(void *arg, void *buf);

// Reserves a region for lease (count examples of schema) of the consumer that holds secret.
// Reserves a region for the count examples in parts (their blobs' sizes, stoker_wire_blob_bytes).
// STOKER_OK with *offset; STOKER_NOT_FOUND when no connected consumer holds secret (unknown, or
// its connection ended); STOKER_LIMIT when no free region is large enough. Either way the caller
// sends bytes instead. The region is never reused before broker_arena_fill. When the examples
// already lie in a staged request as the batch would (one part, fixed-size fields, each field's
// values where the batch's layout puts them, the request's region held by no other lease),
// *placed is 1 and *offset is where they lie: nothing to fill (the region stays until the lease
// is done, the consumer let go and the request was let go).
int broker_arena_reserve(broker_arena *a, uint64_t secret, uint64_t lease,
                         const stoker_schema *schema, const stoker_chunk_part *parts,
                         uint32_t n_parts, uint32_t count, uint64_t *offset, int *placed);
// Copies the examples in parts into lease's region at offset (blob layout: stoker_arena_layout),
// then lets the region be reused as usual; with parts NULL only the latter (the reply is not
// sent). Meant to run outside the broker's lock: the copy is the costly part of a batch.
void broker_arena_fill(broker_arena *a, uint64_t lease, uint64_t offset,
                       const stoker_chunk_part *parts, uint32_t n_parts,
                       const stoker_schema *schema, uint32_t count);
// The lease is acknowledged or redelivered: its region is reused once the consumer let go too.
void broker_arena_lease_done(broker_arena *a, uint64_t lease);

typedef struct broker_arena_stats {
    uint64_t bytes;      // the arena's size
    uint64_t used_bytes; // in regions not yet reusable
    uint32_t regions;
    uint32_t consumers; // connected
    uint32_t producers; // connected producers whose shared memory we map
} broker_arena_stats;
void broker_arena_get_stats(broker_arena *a, broker_arena_stats *out);

#endif
