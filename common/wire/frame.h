// Private to the wire floor: what its files share below the request and reply codecs. A
// message is [u32 protobuf length][protobuf][tensor blobs, each 8-byte aligned]; this module
// converts schemas and chunks to and from their protobuf parts, lays a message out (into one nng
// message or into pieces), reads its header back, and owns what a decoded struct points into
// (wire_owner). It knows no request or reply: request.c and reply.c build on it.
#ifndef STOKER_WIRE_FRAME_H
#define STOKER_WIRE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "stoker.pb-c.h"
#include "stoker/chunk.h"
#include "stoker/schema.h"
#include "stoker/wire.h"

// Bounds on repeated fields from a peer; generous, but they keep a hostile message from making
// us allocate or loop over what it claims.
#define MAX_ACKS      65536
#define MAX_REPLACES  1024 // lost pulls one pull names (Pull.replaces); the client keeps 128
#define MAX_RUNS      (1u << 20)
#define MAX_EVENTS    4096
#define MAX_PRODUCERS 65536
#define MAX_ITEMS     (1u << 24)

// The protobuf Schema of a stoker_schema, in storage the caller owns (it borrows the schema's
// names and shapes: keep the schema alive while the message is packed).
typedef struct schema_pb {
    Stoker__Schema schema;
    Stoker__Field fields[STOKER_MAX_FIELDS];
    Stoker__Field *field_ptrs[STOKER_MAX_FIELDS];
} schema_pb;

#define HEADER_BYTES 4

typedef struct chunk_pb {
    Stoker__Chunk chunk;
    uint64_t sizes[STOKER_MAX_FIELDS];
} chunk_pb;

// What a chunk contributes to an encoded message: its sizes in the protobuf part, its blobs
// after it (from the chunk itself, or from parts).
typedef struct blob_source {
    const stoker_chunk *chunk; // schema, count and (without parts) data
    const stoker_chunk_part *parts;
    uint32_t n_parts;
} blob_source;

// What a decoded struct owns: the unpacked protobuf part, the message its blobs live in, and an
// aligned copy of the blobs in the rare case the message body itself is not 8-byte aligned.
typedef struct wire_owner {
    ProtobufCMessage *pb;
    nng_msg *msg;
    // Or, instead of msg, a buffer of the caller's (stoker_wire_decode_request_buf), given back
    // with buf_free(buf_arg, buf) when the owner goes.
    uint8_t *buf;
    void (*buf_free)(void *, void *);
    void *buf_arg;
    // What the chunk points into while decoding: msg's body or buf.
    uint8_t *body;
    size_t len;
    void *aligned;
    void (*hold_fn)(void *); // stoker_request_hold
    void *hold_arg;
    void *shared_offsets; // stoker_request_bind_shared's copies
} wire_owner;

// Copies the peer's string src (NULL: "") into dst of cap bytes. STOKER_INVALID naming what
// when it does not fit; dst unchanged then.
int wire_copy_string(char *dst, size_t cap, const char *src, const char *what, char *err,
                     size_t err_len);

// s into pb (borrows s's names and shapes).
void wire_schema_to_pb(const stoker_schema *s, schema_pb *pb);
// A peer's schema, checked field by field and validated; *out written only on success.
int wire_schema_from_pb(const Stoker__Schema *pb, stoker_schema *out, char *err, size_t err_len);

// The Chunk message of src: its count and each field's blob size (the blobs go after it).
void wire_chunk_to_pb(const blob_source *src, chunk_pb *pb);

// Packs m and the blobs of src (may be NULL) into a new nng message (*out, the caller's).
// STOKER_TOO_LARGE, STOKER_NOMEM or an nng error translated.
int wire_pack_into_msg(const ProtobufCMessage *m, const blob_source *src, nng_msg **out);
// Lays m and the blobs of src (may be NULL; without parts) out as pieces: a head of its own
// (header word, protobuf part, padding) and then the blobs where they are (borrowed: they must
// outlive the pieces), with padding between them from a static block of zeros. Free with
// stoker_wire_pieces_free.
int wire_pack_into_pieces(const ProtobufCMessage *m, const blob_source *src,
                          stoker_wire_pieces *out);

// Frees what o owns (the unpacked message, the nng message or the caller's buffer, the aligned
// copy) and runs its hold function; accepts NULL.
void wire_owner_free(wire_owner *o);

// Reads the header of the len bytes at body: *pb and *pb_len give the protobuf part.
// STOKER_INVALID with a message when the header is short or claims more than is there.
int wire_frame_header(const uint8_t *body, size_t len, const uint8_t **pb, size_t *pb_len,
                      char *err, size_t err_len);

// Points c at the blobs that follow the protobuf part (pb_end bytes into owner->body), after
// checking that pb's sizes describe exactly the rest of the message; blobs at a misaligned
// address are copied once into aligned memory owned by owner. The schema is not on the wire
// with the data: the receiver checks data_len against its own (stoker_wire_bind_chunk).
int wire_chunk_from_pb(const Stoker__Chunk *pb, wire_owner *owner, size_t pb_end, stoker_chunk *c,
                       uint32_t *n_data, size_t *data_len, char *err, size_t err_len);
// As wire_chunk_from_pb; aligned: 0 leaves blobs where they are even when misaligned (for a
// reader that only copies them, as the broker does: the aligned copy would double its work per
// push).
int wire_chunk_from_pb_at(const Stoker__Chunk *pb, wire_owner *owner, size_t pb_end, int aligned,
                          stoker_chunk *c, uint32_t *n_data, size_t *data_len, char *err,
                          size_t err_len);
// A chunk whose blobs are elsewhere (in the broker's arena, stoker/arena.h, or for a push by
// reference in the producer's shared memory): only its count and sizes, data pointers NULL.
int wire_sizes_only_from_pb(const Stoker__Chunk *pb, stoker_chunk *c, uint32_t *n_data,
                            size_t *data_len, char *err, size_t err_len);

// Makes owner the owner of msg (may be NULL) on a successful decode, or frees msg at once when
// nothing points into it any more (the blobs were copied to aligned memory).
void wire_keep_msg(wire_owner *owner, nng_msg *msg);
// STOKER_INVALID when a message without a chunk has bytes after its protobuf part.
int wire_no_trailing(size_t len, size_t pb_end, char *err, size_t err_len);
// A new nng message holding a copy of the len bytes at buf (*out, the caller's).
int wire_copy_to_msg(const void *buf, size_t len, nng_msg **out);

#endif
