// Shared memory between a broker and the trainers on its host: the broker's arena, as a consumer
// sees it. The broker (server/broker_arena.c) writes each batch it leases to a local trainer into
// a region of the arena and sends only the region's offset; the trainer maps the arena read-only
// and uses the batch in place. This module is the consumer's side: proving it shares the host
// (the arena's file descriptor comes over a Unix-domain socket, SCM_RIGHTS, after the broker
// checked the peer's user and a one-time ticket from the hello), the mapping, and telling the
// broker when a region is no longer used. It does not decide who asks (trainer_delivery.c).
//
// The Unix socket protocol: the consumer connects to the abstract name from the hello reply and
// writes the ticket (8 bytes, little-endian); the broker answers 16 bytes (the consumer's secret,
// the arena's size) with a read-only descriptor of the arena attached, and keeps the connection:
// each 8 bytes the consumer writes afterwards is the lease id of a region it released, and the
// connection's end (the process exited or unmapped) releases every region it still held.
#ifndef STOKER_ARENA_H
#define STOKER_ARENA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define STOKER_ARENA_ALIGN 64 // each blob of a batch in the arena starts at a multiple of this

// Lays out n blobs of sizes[] from offset at: offsets[i] gets blob i's start. Returns the bytes
// the batch spans from at (what the broker reserves).
uint64_t stoker_arena_layout(uint64_t at, uint32_t n, const size_t *sizes, uint64_t *offsets);

// The socket protocol's 8-byte words (little-endian), for both sides.
void stoker_arena_put_word(uint8_t *p, uint64_t v);
uint64_t stoker_arena_get_word(const uint8_t *p);

// Connects to the abstract Unix socket socket_name (without its leading NUL), trying again
// while the listener's backlog is full, at most timeout_ms; *sock is then a blocking socket.
// STOKER_CONNECTION (nobody listens there here: another host or network namespace) or
// STOKER_INVALID, with err.
int stoker_arena_connect(const char *socket_name, uint32_t timeout_ms, int *sock, char *err,
                         size_t err_len);
// Room for one descriptor's control message, aligned as a struct cmsghdr.
typedef union stoker_cmsg_buf {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
} stoker_cmsg_buf;
// Sends len bytes of buf with descriptor fd attached (SCM_RIGHTS); sendmsg's result.
ssize_t stoker_arena_send_fd(int sock, const void *buf, size_t len, int fd);

typedef struct stoker_arena stoker_arena;

// Connects to the broker's arena socket (socket_name without the leading NUL of an abstract
// name), presents ticket and maps what comes back read-only. On STOKER_OK *out is a new arena
// with one reference (the caller's). Otherwise err says why: STOKER_CONNECTION (no such socket:
// the broker is on another host or in another network namespace), STOKER_UNAUTHENTICATED (the
// broker refused the ticket or our user), STOKER_IO. Bounded by timeout_ms.
int stoker_arena_attach(const char *socket_name, uint64_t ticket, uint32_t timeout_ms,
                        stoker_arena **out, char *err, size_t err_len);
// The secret that proves to the broker, in each pull, that we map the arena.
uint64_t stoker_arena_secret(const stoker_arena *a);
uint64_t stoker_arena_bytes(const stoker_arena *a);
// Points data[i] at blob i of a batch at offset whose blobs have sizes[] (stoker_arena_layout).
// STOKER_INVALID (reason in err) when it would reach past the arena: nothing written then.
int stoker_arena_resolve(const stoker_arena *a, uint64_t offset, uint32_t n, const size_t *sizes,
                         uint8_t **data, char *err, size_t err_len);
// References: each batch in the arena holds one, so the mapping (and the broker's promise not to
// reuse regions not released) outlives the client while a batch is alive. Thread-safe.
void stoker_arena_ref(stoker_arena *a);
// Tells the broker the region of lease is no longer read (it may reuse it once the lease is also
// acknowledged or redelivered) and drops one reference. Thread-safe; never blocks long.
void stoker_arena_release(stoker_arena *a, uint64_t lease);
// Drops one reference; the last unmaps the arena and closes the socket (which releases every
// region still held). Accepts NULL.
void stoker_arena_unref(stoker_arena *a);

// The read-only mapping (borrowed, valid while a reference is held): for a caller that registers
// it elsewhere, e.g. as CUDA pinned memory (trainer/backend_cuda.c).
const void *stoker_arena_base(const stoker_arena *a);
// A hook told of the mapping: mapped 1 once it exists, 0 just before it goes.
typedef void (*stoker_arena_hook)(const void *base, uint64_t bytes, int mapped, void *arg);
// Sets the hook the last unref calls (mapped 0) just before unmapping, to undo such a
// registration, on whichever thread drops that reference; NULL for none. arg must outlive the
// arena. Set it right after attach, before any other reference exists.
void stoker_arena_on_unmap(stoker_arena *a, stoker_arena_hook fn, void *arg);

#endif
