// The wire layer: converts stoker's requests and replies to and from nng messages. It is the
// only module that sees protobuf-c. Tensor data travels after the protobuf part, 8-byte aligned
// (see proto/stoker.proto), so a decoded chunk points into the received message: no copy.
// Decoding never trusts the peer: every length, count and enum is checked, and a failure is a
// STOKER_INVALID with a message, never a crash.
#ifndef STOKER_WIRE_H
#define STOKER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/batching.h"
#include "stoker/chunk.h"
#include "stoker/mix.h"
#include "stoker/protocol.h"
#include "stoker/status.h"

struct nng_msg;

#define STOKER_TOKEN_MAX   256
#define STOKER_MESSAGE_MAX 512

#define STOKER_HELLO_TRAINED_MAX 4096
// A group commit's final part waits at most this long for the other ranks' (docs/groups.md).
#define STOKER_GROUP_COMMIT_WAIT_MS 60000

typedef struct stoker_request {
    stoker_method method;
    uint64_t session; // the sender's session id (producers and trainers)
    // HELLO
    stoker_role role;
    char name[STOKER_NAME_MAX];
    int has_schema;
    stoker_schema schema;
    uint64_t next_seq; // producer: the seq it will push next (resumption)
    char token[STOKER_TOKEN_MAX];
    int want_arena;               // HELLO of a trainer: asks for batches in shared memory
    uint32_t pid;                 // HELLO of a trainer: its process id (0: not said)
    char pool[STOKER_NAME_MAX];   // HELLO of a producer: its pool (empty: "default")
    uint64_t dataset_size;        // producer of a dataset: items it serves (0: a stream)
    uint64_t dataset_fingerprint; // and the fingerprint of its listing
    int commit; // trainer: acknowledges only when it commits (leases count in --max-bytes)
    // HELLO of a trainer in a data-parallel group (group[0] == '\0': none): its rank in
    // 0..world-1 and the examples each rank gets per step (docs/groups.md).
    char group[STOKER_NAME_MAX];
    uint32_t rank, world, group_batch;
    // HELLO of a trainer, and its HEARTBEAT reporting what it trained: its job (docs/sharing.md;
    // job[0] == '\0': the default job).
    char job[STOKER_NAME_MAX];
    uint64_t group_steps;     // HELLO of a rank: the steps it has taken (0: a new rank)
    stoker_batching batching; // HELLO of a trainer: how its batches are made (all 0: by count)
    stoker_mix mix;           // HELLO of a trainer: its mixture of sources (n 0: none)
    // HELLO (and HEARTBEAT, to a broker that does not know it) of a trainer: identities it trained,
    // n_trained (session, first_seq, end) triples (at most STOKER_HELLO_TRAINED_MAX); aliases the
    // decoded message.
    uint32_t n_trained;
    const uint64_t *trained;
    // HELLO of a producer: its class-to-label map (n_classes 0: none). Encoding borrows the
    // caller's arrays; a decoded request owns a copy built within the map's bounds.
    stoker_labels labels;
    // HELLO of a producer: the producers alive and trainers connected at the broker it last
    // heard from, as that broker said (stoker_reply.peers_*); 0: it heard from none.
    uint32_t known_producers, known_trainers;
    // PUSH: chunk.schema is unset (only count and data are on the wire); data aliases the
    // decoded message and is only valid until stoker_request_free.
    uint64_t first_seq;
    uint32_t n_data; // blobs received (must equal the schema's field count)
    size_t data_len[STOKER_MAX_FIELDS];
    stoker_chunk chunk;
    // PUSH of a dataset: one item per example ((epoch << 32) | index), or none; aliases the
    // decoded message.
    uint32_t n_items;
    const uint64_t *items;
    uint64_t shard;   // PUSH of a dataset: the shard of items (0: the oldest one held)
    uint64_t make_us; // PUSH: microseconds its producer spent making examples so far (0: not said)
    // PUSH by reference (a producer on the broker's host): nonzero, the blobs are not in the
    // message but in the producer's shared memory that the broker maps under this secret, field
    // i at pool_offsets[i]; decoding leaves chunk.data NULL for the broker to point there.
    uint64_t pool_secret;
    uint64_t pool_offsets[STOKER_MAX_FIELDS];
    // PULL
    uint32_t max_examples;
    uint32_t wait_ms;
    // PULL (piggybacked) and ACK
    uint32_t n_acks;
    const uint64_t *acks;  // aliases the decoded message
    uint64_t commit_step;  // ACK of a committing rank: the group step (see the proto), or 0
    int commit_final;      // ACK with commit_step: the rank's last part of that commit
    uint64_t arena_secret; // PULL: nonzero: the consumer maps the arena (see stoker/arena.h)
    // PULL: its id and the ids of earlier pulls whose replies were lost (see the proto)
    uint64_t pull_id;
    uint64_t data_wait_ms; // PULL: the consumer's data wait so far
    uint32_t n_replaces;
    const uint64_t *replaces; // aliases the decoded message
    // GOODBYE of a trainer: leases handed to its caller and not acknowledged (see the proto)
    uint32_t n_held;
    const uint64_t *held; // aliases the decoded message
    int done_making;      // HEARTBEAT of a producer: it pushes nothing more (see the proto)
    // SCALED: a controller changed pool (in pool) from scaled_from to scaled_to producers, why,
    // through engine.
    uint32_t scaled_from, scaled_to;
    char why[STOKER_REASON_MAX];
    char engine[STOKER_NAME_MAX];
    void *owner; // internal
} stoker_request;

// Part of a chunk to encode: count examples whose field i starts at data[i]. A reply built from
// parts sends their concatenation without collating it first.
// Ties a reference to a decoded request: fn(arg) runs when req is freed (the broker's hold on
// the shared memory a push by reference points into). At most one: STOKER_INVALID when req
// holds one already.
int stoker_request_hold(stoker_request *req, void (*fn)(void *), void *arg);

// A variable field's offsets[f] points at the part's count + 1 offsets as they lie in its chunk
// (little-endian, any alignment, the first not necessarily 0) and data[f] at the values of the
// part's first example; encoding rebases them (docs/schema.md).
typedef struct stoker_chunk_part {
    const uint8_t *data[STOKER_MAX_FIELDS];
    const uint8_t *offsets[STOKER_MAX_FIELDS];
    uint32_t count;
} stoker_chunk_part;

// Field f's blob on the wire (and in the arena) for count examples in parts: a fixed field's
// values; a variable field's count + 1 offsets rebased to start at 0, then its values.
// stoker_wire_blob_bytes gives its length, stoker_wire_blob_write writes it at dst.
uint64_t stoker_wire_blob_bytes(const stoker_schema *schema, uint32_t f,
                                const stoker_chunk_part *parts, uint32_t n_parts, uint32_t count);
void stoker_wire_blob_write(const stoker_schema *schema, uint32_t f, const stoker_chunk_part *parts,
                            uint32_t n_parts, uint32_t count, uint8_t *dst);

typedef struct stoker_reply {
    int code; // a stoker_err
    char message[STOKER_MESSAGE_MAX];
    // HELLO
    uint32_t peer_id;
    uint64_t next_seq;
    int has_schema;
    stoker_schema schema;
    uint32_t heartbeat_ms;
    uint32_t intake_port; // HELLO of a producer: the broker's intake port on its host (0: none)
    uint32_t max_chunk;   // HELLO of a producer: the most examples one push may carry (0: not said)
    // HELLO, PUSH, HEARTBEAT of a producer: the producers alive and trainers connected at the
    // broker now (0 and 0: not said), for the producer to tell a broker after this one.
    uint32_t peers_producers, peers_trainers;
    // HELLO and STATUS: the broker's instance, drawn at its start, never 0 (0: not said).
    uint64_t broker_id;
    // PUSH
    uint64_t acked_through;
    uint32_t batch_examples; // PUSH: the largest batch trainers counting examples pull (0: none)
    // PUSH, HEARTBEAT, GOODBYE of a producer: seqs below it are trained (0: not said)
    uint64_t trained_through;
    // ... and [first, end) pairs of trained seqs beyond it (n_trained_after values, even)
#define STOKER_TRAINED_AFTER_MAX 32
    uint32_t n_trained_after;
    uint64_t trained_after[STOKER_TRAINED_AFTER_MAX];
    // PULL: chunk data and runs alias the decoded message (or, when encoding, the caller's).
    // When encoding with n_parts > 0, the data comes from parts (chunk gives schema and count).
    uint64_t lease;
    uint32_t n_data;
    size_t data_len[STOKER_MAX_FIELDS];
    stoker_chunk chunk;
    const stoker_chunk_part *parts;
    uint32_t n_parts;
    uint32_t n_runs;
    stoker_run *runs;
    uint32_t n_events;
    stoker_event *events;
    uint32_t acks_refused;
    // PULL of a dataset: one item per example; SHARD: the items to make. Decoded: aliases the
    // message (writable, the trainer client compacts it).
    uint32_t n_items;
    uint64_t *items;
    uint64_t dataset_seed; // SHARD
    uint64_t shard;        // SHARD: the shard's id (never 0), which its pushes name
    // STATUS of a dataset broker
    uint64_t dataset_size;
    uint32_t epochs_done, epochs_limit;
    uint64_t items_reassigned, pushes_revoked;
    int epochs_overlap;
    uint64_t epoch_acknowledged; // Status: items of the oldest open epoch acknowledged
    // PULL of a grouped trainer: the batch's step (1-based); with the end, the examples left
    // over (fewer than one per rank) that no step could hold.
    uint64_t group_step, group_leftover;
    // PULL: the earlier pull (of its replaces) whose lease this batch is, sent again; 0: none.
    uint64_t resent_pull;
    // STATUS
    int has_counters;
    stoker_counters counters;
    uint32_t n_producers;
    stoker_producer_info *producers;
    uint64_t uptime_ms;   // since the broker started
    uint32_t queue_depth; // the broker's limits (also in a producer's HELLO reply)
    uint64_t max_bytes;
    int queue_depth_auto;
    char queue_limit[STOKER_MESSAGE_MAX];
    uint32_t n_groups;
    stoker_group_info *groups;
    uint32_t n_consumers; // STATUS: the trainers and their delivery paths
    stoker_consumer_info *consumers;
    uint32_t n_jobs; // STATUS: the jobs sharing the producers (docs/sharing.md)
    stoker_job_info *jobs;
    // STATUS: the producers' distinct label maps (encoding borrows them; decoded, owned) and
    // the producers whose maps did not fit.
    uint32_t n_label_maps;
    stoker_label_map *label_maps;
    uint32_t label_maps_omitted;
    // STATUS: the autoscale signal (encoding borrows pools, decoded, owned).
    int has_autoscale;
    double autoscale_headroom;
    uint32_t autoscale_min, autoscale_max;
    int64_t idle_ms; // -1: no trainer ever pulled
    uint32_t n_pools;
    stoker_pool_info *pools;
    // PULL in shared memory: the chunk's blobs are in the broker's arena, field i at
    // arena_offset + the 64-byte aligned sizes of the fields before it; nothing follows the
    // protobuf part, and a decoded chunk's data pointers are NULL (data_len is set).
    int in_arena;
    uint64_t arena_offset;
    // HELLO of a trainer that asked for the arena: its Unix socket and a one-time ticket.
    char arena_socket[108];
    uint64_t arena_ticket;
    void *owner; // internal
} stoker_reply;

// Encodes req into a new nng message (*out, owned by the caller on success). For PUSH the chunk's
// schema must be set (it gives the field sizes).
int stoker_wire_encode_request(const stoker_request *req, struct nng_msg **out);
// The same encoding as pieces to be written one after another (a gather list) instead of one
// message: a sender that writes to a stream itself sends the chunk's blobs from where they are
// (the producer's push stream), with no copy. The pieces point into req's chunk, which must
// outlive them; free with stoker_wire_pieces_free.
typedef struct stoker_wire_piece {
    const void *buf;
    size_t len;
} stoker_wire_piece;
typedef struct stoker_wire_pieces {
    uint8_t *head; // header word, protobuf part, padding: owned
    size_t total;  // the message's length, all pieces together
    uint32_t n;
    stoker_wire_piece piece[1 + 3 * STOKER_MAX_FIELDS]; // head, then padding, (offsets,) values
} stoker_wire_pieces;
int stoker_wire_encode_request_pieces(const stoker_request *req, stoker_wire_pieces *out);
void stoker_wire_pieces_free(stoker_wire_pieces *p);
// Decodes the request in msg. On success takes ownership of msg (the request's data points into
// it) and *out is a new request owned by the caller (free with stoker_request_free). On failure
// returns STOKER_INVALID (or STOKER_NOMEM) with the reason in err, and the caller still owns msg.
int stoker_wire_decode_request_msg(struct nng_msg *msg, stoker_request **out, char *err,
                                   size_t err_len);
// The same, leaving a push's blobs where they are in msg even when they are not aligned for
// their dtype (an nng REP body is 4 bytes off): for a reader that only copies them (the broker).
int stoker_wire_decode_request_msg_unaligned(struct nng_msg *msg, stoker_request **out, char *err,
                                             size_t err_len);
// The same from len bytes at buf, read into memory of the caller's rather than an nng message
// (the broker's intake, server/intake.c): on STOKER_OK the request owns buf and gives it back
// with buf_free(arg, buf) when freed (a push's blobs stay in it, unaligned as above); on
// failure the caller still owns buf.
int stoker_wire_decode_request_buf(void *buf, size_t len, void (*buf_free)(void *arg, void *buf),
                                   void *arg, stoker_request **out, char *err, size_t err_len);
// The same from len bytes at buf (copied first); the caller keeps buf.
int stoker_wire_decode_request(const void *buf, size_t len, stoker_request **out, char *err,
                               size_t err_len);
void stoker_request_free(stoker_request *req);

// As above for replies. A PULL reply's chunk must have its schema set when encoding.
int stoker_wire_encode_reply(const stoker_reply *rep, struct nng_msg **out);
int stoker_wire_decode_reply_msg(struct nng_msg *msg, stoker_reply **out, char *err,
                                 size_t err_len);
int stoker_wire_decode_reply(const void *buf, size_t len, stoker_reply **out, char *err,
                             size_t err_len);
void stoker_reply_free(stoker_reply *rep);

// Gives a decoded chunk its schema after checking that the n_data blobs of data_len bytes are
// exactly count examples of schema; a variable field's blob is split into its offsets
// (chunk->offsets, checked by stoker_chunk_check_offsets) and values (chunk->data).
// STOKER_INVALID with a reason in err otherwise (the chunk unchanged).
int stoker_wire_bind_chunk(stoker_chunk *chunk, uint32_t n_data, const size_t *data_len,
                           const stoker_schema *schema, char *err, size_t err_len);
// The same for a push by reference (its blobs in the pusher's shared memory, where it could
// change them at any time): each variable field's offsets are copied into memory the request
// owns first, then checked and used from there, so that no later change of the pusher's makes
// the broker read outside a value.
int stoker_request_bind_shared(stoker_request *req, const stoker_schema *schema, char *err,
                               size_t err_len);

#endif
