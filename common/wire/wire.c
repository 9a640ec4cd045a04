// The wire layer: stoker's requests and replies <-> protobuf-c messages <-> nng messages.
// The only module that includes the generated code. A message is [u32 protobuf length]
// [protobuf][tensor blobs, each 8-byte aligned] (see proto/stoker.proto). Encoding writes the
// blobs straight into the nng message (the one copy of tensor data on each side); decoding keeps
// the nng message alive as the owner the returned chunk points into, so nothing is copied again.
// Every count, length, offset and enum from the peer is checked before use.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "stoker.pb-c.h"
#include "stoker/error.h"
#include "stoker/wire.h"

// Bounds on repeated fields from a peer; generous, but they keep a hostile message from making
// us allocate or loop over what it claims.
#define MAX_ACKS      65536
#define MAX_REPLACES  1024 // lost pulls one pull names (Pull.replaces); the client keeps 128
#define MAX_RUNS      (1u << 20)
#define MAX_EVENTS    4096
#define MAX_PRODUCERS 65536
#define MAX_ITEMS     (1u << 24)

static int
copy_string(char *dst, size_t cap, const char *src, const char *what, char *err, size_t err_len)
{
    size_t len = src != NULL ? strlen(src) : 0;
    if (len >= cap)
        return stoker_errorf(err, err_len, STOKER_INVALID, "%s longer than %zu bytes", what,
                             cap - 1);
    memcpy(dst, src != NULL ? src : "", len);
    dst[len] = '\0';
    return STOKER_OK;
}

// --- schema ---------------------------------------------------------------------------------

typedef struct schema_pb {
    Stoker__Schema schema;
    Stoker__Field fields[STOKER_MAX_FIELDS];
    Stoker__Field *field_ptrs[STOKER_MAX_FIELDS];
} schema_pb;

static void
schema_to_pb(const stoker_schema *s, schema_pb *pb)
{
    stoker__schema__init(&pb->schema);
    uint32_t n = s->n_fields <= STOKER_MAX_FIELDS ? s->n_fields : STOKER_MAX_FIELDS;
    for (uint32_t i = 0; i < n; i++) {
        Stoker__Field *f = &pb->fields[i];
        stoker__field__init(f);
        f->name = (char *)s->fields[i].name;
        f->dtype = (uint32_t)s->fields[i].dtype;
        f->n_shape = s->fields[i].rank;
        f->shape = (uint32_t *)s->fields[i].shape;
        f->variable = s->fields[i].variable != 0;
        f->max_rows = s->fields[i].max_rows;
        pb->field_ptrs[i] = f;
    }
    pb->schema.n_fields = n;
    pb->schema.fields = pb->field_ptrs;
}

static int
schema_from_pb(const Stoker__Schema *pb, stoker_schema *out, char *err, size_t err_len)
{
    stoker_schema s;
    memset(&s, 0, sizeof(s));
    if (pb->n_fields > STOKER_MAX_FIELDS)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "schema has %zu fields, at most %d allowed", pb->n_fields,
                             STOKER_MAX_FIELDS);
    for (size_t i = 0; i < pb->n_fields; i++) {
        const Stoker__Field *f = pb->fields[i];
        if (f == NULL)
            return stoker_errorf(err, err_len, STOKER_INVALID, "schema field %zu missing", i);
        if (copy_string(s.fields[i].name, STOKER_NAME_MAX, f->name, "field name", err, err_len) !=
            STOKER_OK)
            return STOKER_INVALID;
        if (f->dtype >= STOKER_DTYPE_COUNT)
            return stoker_errorf(err, err_len, STOKER_INVALID, "field '%s': unknown dtype %u",
                                 s.fields[i].name, f->dtype);
        s.fields[i].dtype = (stoker_dtype)f->dtype;
        if (f->n_shape > STOKER_MAX_RANK)
            return stoker_errorf(err, err_len, STOKER_INVALID, "field '%s': rank %zu over %d",
                                 s.fields[i].name, f->n_shape, STOKER_MAX_RANK);
        s.fields[i].rank = (uint32_t)f->n_shape;
        for (size_t d = 0; d < f->n_shape; d++)
            s.fields[i].shape[d] = f->shape[d];
        s.fields[i].variable = f->variable ? 1 : 0;
        s.fields[i].max_rows = f->max_rows;
    }
    s.n_fields = (uint32_t)pb->n_fields;
    int rv = stoker_schema_validate(&s, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    *out = s;
    return STOKER_OK;
}

// --- chunk and framing ---------------------------------------------------------------------

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

static size_t
align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static uint64_t
read_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

static void
write_u64(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

// Rows of variable field f that part k holds.
static uint64_t
part_rows(const stoker_chunk_part *part, uint32_t f)
{
    return read_u64(part->offsets[f] + (size_t)part->count * 8) - read_u64(part->offsets[f]);
}

uint64_t
stoker_wire_blob_bytes(const stoker_schema *schema, uint32_t f, const stoker_chunk_part *parts,
                       uint32_t n_parts, uint32_t count)
{
    const stoker_field *field = &schema->fields[f];
    if (!field->variable)
        return (uint64_t)stoker_field_bytes(field) * count;
    uint64_t rows = 0;
    for (uint32_t k = 0; k < n_parts; k++)
        rows += part_rows(&parts[k], f);
    return ((uint64_t)count + 1) * 8 + rows * stoker_field_row_bytes(field);
}

void
stoker_wire_blob_write(const stoker_schema *schema, uint32_t f, const stoker_chunk_part *parts,
                       uint32_t n_parts, uint32_t count, uint8_t *dst)
{
    const stoker_field *field = &schema->fields[f];
    if (!field->variable) {
        size_t fb = stoker_field_bytes(field);
        for (uint32_t k = 0; k < n_parts; k++) {
            size_t n = fb * parts[k].count;
            memcpy(dst, parts[k].data[f], n);
            dst += n;
        }
        return;
    }
    // [count + 1 offsets, rebased to start at 0 and run on across parts][values]
    size_t row_bytes = stoker_field_row_bytes(field);
    uint8_t *values = dst + ((size_t)count + 1) * 8;
    uint64_t base = 0;
    write_u64(dst, 0);
    dst += 8;
    for (uint32_t k = 0; k < n_parts; k++) {
        const uint8_t *off = parts[k].offsets[f];
        uint64_t first = read_u64(off);
        for (uint32_t i = 1; i <= parts[k].count; i++, dst += 8)
            write_u64(dst, base + read_u64(off + (size_t)i * 8) - first);
        uint64_t rows = part_rows(&parts[k], f);
        memcpy(values, parts[k].data[f], (size_t)(rows * row_bytes));
        values += rows * row_bytes;
        base += rows;
    }
}

// The part that is all of chunk c.
static void
whole_part(const stoker_chunk *c, stoker_chunk_part *part)
{
    memset(part, 0, sizeof(*part));
    for (uint32_t f = 0; f < c->schema.n_fields && f < STOKER_MAX_FIELDS; f++) {
        part->data[f] = c->data[f];
        part->offsets[f] = (const uint8_t *)c->offsets[f];
    }
    part->count = c->count;
}

// The parts of src: its own, or one that is its whole chunk (in *one).
static const stoker_chunk_part *
source_parts(const blob_source *src, stoker_chunk_part *one, uint32_t *n_parts)
{
    if (src->n_parts > 0) {
        *n_parts = src->n_parts;
        return src->parts;
    }
    whole_part(src->chunk, one);
    *n_parts = 1;
    return one;
}

static void
chunk_to_pb(const blob_source *src, chunk_pb *pb)
{
    const stoker_chunk *c = src->chunk;
    stoker__chunk__init(&pb->chunk);
    pb->chunk.count = c->count;
    uint32_t n = c->schema.n_fields <= STOKER_MAX_FIELDS ? c->schema.n_fields : STOKER_MAX_FIELDS;
    stoker_chunk_part one;
    uint32_t n_parts;
    const stoker_chunk_part *parts = source_parts(src, &one, &n_parts);
    for (uint32_t i = 0; i < n; i++)
        pb->sizes[i] = stoker_wire_blob_bytes(&c->schema, i, parts, n_parts, c->count);
    pb->chunk.n_sizes = n;
    pb->chunk.sizes = pb->sizes;
}

// Where each part of an encoded message goes: [u32 pb_len][protobuf][pad][blob 0][pad][blob 1]...
typedef struct frame_layout {
    size_t pb_len, total;
    size_t offsets[STOKER_MAX_FIELDS], sizes[STOKER_MAX_FIELDS];
    uint32_t n_fields;
} frame_layout;

static int
frame_layout_of(const ProtobufCMessage *m, const blob_source *src, frame_layout *l)
{
    l->pb_len = protobuf_c_message_get_packed_size(m);
    if (l->pb_len > UINT32_MAX)
        return STOKER_TOO_LARGE;
    l->n_fields = 0;
    l->total = HEADER_BYTES + l->pb_len;
    if (src != NULL) {
        l->n_fields = src->chunk->schema.n_fields;
        stoker_chunk_part one;
        uint32_t n_parts;
        const stoker_chunk_part *parts = source_parts(src, &one, &n_parts);
        for (uint32_t i = 0; i < l->n_fields; i++) {
            l->sizes[i] =
                stoker_wire_blob_bytes(&src->chunk->schema, i, parts, n_parts, src->chunk->count);
            l->offsets[i] = align8(l->total);
            l->total = l->offsets[i] + l->sizes[i];
        }
    }
    return STOKER_OK;
}

// Writes the header word and the protobuf part of m at dst (HEADER_BYTES + pb_len bytes).
static void
write_head(const ProtobufCMessage *m, size_t pb_len, uint8_t *dst)
{
    dst[0] = (uint8_t)pb_len;
    dst[1] = (uint8_t)(pb_len >> 8);
    dst[2] = (uint8_t)(pb_len >> 16);
    dst[3] = (uint8_t)(pb_len >> 24);
    if (pb_len > 0)
        protobuf_c_message_pack(m, dst + HEADER_BYTES);
}

// Packs m and the blobs of src (may be NULL) into a new nng message.
static int
pack_into_msg(const ProtobufCMessage *m, const blob_source *src, nng_msg **out)
{
    frame_layout l;
    int rv = frame_layout_of(m, src, &l);
    if (rv != STOKER_OK)
        return rv;
    nng_msg *msg;
    if ((rv = nng_msg_alloc(&msg, l.total)) != 0)
        return stoker_err_from_nng(rv);
    uint8_t *body = nng_msg_body(msg);
    write_head(m, l.pb_len, body);
    size_t at = HEADER_BYTES + l.pb_len;
    stoker_chunk_part one;
    uint32_t n_parts = 0;
    const stoker_chunk_part *parts = src != NULL ? source_parts(src, &one, &n_parts) : NULL;
    for (uint32_t i = 0; i < l.n_fields; i++) {
        memset(body + at, 0, l.offsets[i] - at); // padding
        stoker_wire_blob_write(&src->chunk->schema, i, parts, n_parts, src->chunk->count,
                               body + l.offsets[i]);
        at = l.offsets[i] + l.sizes[i];
    }
    *out = msg;
    return STOKER_OK;
}

static const uint8_t zero_pad[8];

// Lays m and the blobs of src (may be NULL; without parts) out as pieces: a head of its own
// (header word, protobuf part, padding) and then the blobs where they are, with padding
// between them from a static block of zeros.
static int
pack_into_pieces(const ProtobufCMessage *m, const blob_source *src, stoker_wire_pieces *out)
{
    frame_layout l;
    int rv = frame_layout_of(m, src, &l);
    if (rv != STOKER_OK)
        return rv;
    if (src != NULL && src->n_parts > 0)
        return STOKER_INVALID;
    size_t head_len = l.n_fields > 0 ? l.offsets[0] : l.total;
    memset(out, 0, sizeof(*out));
    if ((out->head = calloc(1, head_len)) == NULL)
        return STOKER_NOMEM;
    write_head(m, l.pb_len, out->head);
    out->piece[out->n++] = (stoker_wire_piece){out->head, head_len};
    size_t at = head_len;
    for (uint32_t i = 0; i < l.n_fields; i++) {
        if (l.offsets[i] > at)
            out->piece[out->n++] = (stoker_wire_piece){zero_pad, l.offsets[i] - at};
        if (src->chunk->schema.fields[i].variable) {
            // A chunk's own offsets start at 0: they go as they are, then its values.
            size_t off_bytes = ((size_t)src->chunk->count + 1) * 8;
            out->piece[out->n++] = (stoker_wire_piece){src->chunk->offsets[i], off_bytes};
            if (l.sizes[i] > off_bytes)
                out->piece[out->n++] =
                    (stoker_wire_piece){src->chunk->data[i], l.sizes[i] - off_bytes};
        } else if (l.sizes[i] > 0) {
            out->piece[out->n++] = (stoker_wire_piece){src->chunk->data[i], l.sizes[i]};
        }
        at = l.offsets[i] + l.sizes[i];
    }
    out->total = l.total;
    return STOKER_OK;
}

void
stoker_wire_pieces_free(stoker_wire_pieces *p)
{
    free(p->head);
    p->head = NULL;
    p->n = 0;
}

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

static void
owner_free(wire_owner *o)
{
    if (o == NULL)
        return;
    if (o->pb != NULL)
        protobuf_c_message_free_unpacked(o->pb, NULL);
    nng_msg_free(o->msg);
    if (o->buf_free != NULL)
        o->buf_free(o->buf_arg, o->buf);
    free(o->aligned);
    free(o->shared_offsets);
    if (o->hold_fn != NULL)
        o->hold_fn(o->hold_arg);
    free(o);
}

// Reads the header of msg: *pb and *pb_len give the protobuf part.
static int
frame_header(const uint8_t *body, size_t len, const uint8_t **pb, size_t *pb_len, char *err,
             size_t err_len)
{
    if (len < HEADER_BYTES)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "message of %zu bytes is shorter than its header", len);
    size_t n =
        (size_t)body[0] | (size_t)body[1] << 8 | (size_t)body[2] << 16 | (size_t)body[3] << 24;
    if (n > len - HEADER_BYTES)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "message header claims %zu bytes, %zu present", n, len - HEADER_BYTES);
    *pb = body + HEADER_BYTES;
    *pb_len = n;
    return STOKER_OK;
}

static int chunk_from_pb_at(const Stoker__Chunk *pb, wire_owner *owner, size_t pb_end, int aligned,
                            stoker_chunk *c, uint32_t *n_data, size_t *data_len, char *err,
                            size_t err_len);

// Points chunk at the blobs that follow the protobuf part (pb_end bytes into msg), after
// checking that sizes describe exactly the rest of the message. The schema is not on the wire
// with the data: the receiver checks data_len against its own (stoker_wire_bind_chunk).
static int
chunk_from_pb(const Stoker__Chunk *pb, wire_owner *owner, size_t pb_end, stoker_chunk *c,
              uint32_t *n_data, size_t *data_len, char *err, size_t err_len)
{
    return chunk_from_pb_at(pb, owner, pb_end, 1, c, n_data, data_len, err, err_len);
}

// As chunk_from_pb; aligned: 0 leaves blobs where they are even when misaligned (for a reader
// that only copies them, as the broker does: the aligned copy would double its work per push).
static int
chunk_from_pb_at(const Stoker__Chunk *pb, wire_owner *owner, size_t pb_end, int aligned,
                 stoker_chunk *c, uint32_t *n_data, size_t *data_len, char *err, size_t err_len)
{
    if (pb->n_sizes > STOKER_MAX_FIELDS)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "chunk has %zu fields, at most %d allowed", pb->n_sizes,
                             STOKER_MAX_FIELDS);
    size_t len = owner->len;
    uint8_t *body = owner->body;
    size_t offsets[STOKER_MAX_FIELDS];
    size_t at = pb_end;
    for (size_t i = 0; i < pb->n_sizes; i++) {
        size_t off = align8(at);
        if (off > len || pb->sizes[i] > len - off)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "chunk field %zu: %llu bytes claimed past the message end", i,
                                 (unsigned long long)pb->sizes[i]);
        offsets[i] = off;
        at = off + (size_t)pb->sizes[i];
    }
    if (at != len)
        return stoker_errorf(err, err_len, STOKER_INVALID, "chunk: %zu bytes after the last field",
                             len - at);
    if (aligned && ((uintptr_t)body & 7) != 0 && pb->n_sizes > 0) {
        // Blobs must be aligned for their dtype: copy them once into aligned memory.
        size_t first = offsets[0];
        owner->aligned = aligned_alloc(64, (len - first + 64) & ~(size_t)63);
        if (owner->aligned == NULL)
            return STOKER_NOMEM;
        memcpy(owner->aligned, body + first, len - first);
        body = (uint8_t *)owner->aligned - first;
    }
    memset(c, 0, sizeof(*c));
    c->count = pb->count;
    c->capacity = pb->count;
    c->owns_data = 0;
    for (size_t i = 0; i < pb->n_sizes; i++) {
        c->data[i] = body + offsets[i];
        data_len[i] = (size_t)pb->sizes[i];
    }
    *n_data = (uint32_t)pb->n_sizes;
    return STOKER_OK;
}

// A chunk whose blobs are elsewhere (in the broker's arena, stoker/arena.h, or for a push by
// reference in the producer's shared memory): only its count and sizes, data pointers NULL.
static int
sizes_only_from_pb(const Stoker__Chunk *pb, stoker_chunk *c, uint32_t *n_data, size_t *data_len,
                   char *err, size_t err_len)
{
    if (pb->n_sizes > STOKER_MAX_FIELDS)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "chunk has %zu fields, at most %d allowed", pb->n_sizes,
                             STOKER_MAX_FIELDS);
    memset(c, 0, sizeof(*c));
    c->count = pb->count;
    c->capacity = pb->count;
    for (size_t i = 0; i < pb->n_sizes; i++)
        data_len[i] = (size_t)pb->sizes[i];
    *n_data = (uint32_t)pb->n_sizes;
    return STOKER_OK;
}

// Makes owner the owner of msg on a successful decode. When the blobs were copied to aligned
// memory (an nng REP body starts 4 bytes into its buffer, after the request id is moved to the
// header), nothing points into msg any more: free it now, or every queued push would hold its
// data twice and the broker's memory would reach twice --max-bytes.
static void
keep_msg(wire_owner *owner, nng_msg *msg)
{
    if (owner->aligned != NULL) {
        nng_msg_free(msg);
        owner->msg = NULL;
    } else {
        owner->msg = msg;
    }
}

// Checks that a message without a chunk has nothing after its protobuf part.
static int
no_trailing(size_t len, size_t pb_end, char *err, size_t err_len)
{
    if (len != pb_end)
        return stoker_errorf(err, err_len, STOKER_INVALID, "%zu unexpected bytes after the message",
                             len - pb_end);
    return STOKER_OK;
}

static int
copy_to_msg(const void *buf, size_t len, nng_msg **out)
{
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, len);
    if (rv != 0)
        return stoker_err_from_nng(rv);
    if (len > 0)
        memcpy(nng_msg_body(msg), buf, len);
    *out = msg;
    return STOKER_OK;
}

// --- Status: what is copied as it is ------------------------------------------------------------

// The fields each Status struct shares with its protobuf message, by the same name and meaning:
// the encoder and the decoder both walk these lists (COPY_FIELD: d->f = s->f), so a field is
// named once. Names, states and kinds are converted by hand beside them.
// clang-format off
#define COUNTERS_FIELDS(X)                                                                         \
    X(produced) X(acknowledged) X(queued) X(in_flight) X(redelivered) X(delivered)                 \
    X(queued_bytes) X(producers_alive) X(trainers) X(delivered_shm) X(trainers_shm) X(refused)     \
    X(returned_unused) X(short_by_queues) X(producers_lost) X(delivered_in_place)
#define RUN_FIELDS(X) X(producer) X(session) X(first_seq) X(count)
#define EVENT_FIELDS(X) X(index) X(producer) X(at_s) X(epoch) X(scaled_from) X(scaled_to)
#define PRODUCER_FIELDS(X)                                                                         \
    X(id) X(session) X(queued) X(accepted) X(delivered) X(acknowledged) X(redelivered)             \
    X(returned_unused) X(next_seq) X(silent_ms) X(pushes) X(pushes_streamed)        \
    X(pushes_shm) X(skipped)
#define GROUP_FIELDS(X) X(world) X(batch) X(joined) X(steps) X(leftover)
#define CONSUMER_FIELDS(X)                                                                         \
    X(id) X(pid) X(batches_shm) X(batches_socket) X(examples_shm) X(examples_socket)               \
    X(bytes_shm) X(bytes_socket) X(arena_full) X(data_wait_ms) X(tokens) X(padding)
// clang-format on
#define COPY_FIELD(f) d->f = s->f;

// n messages of desc's type, initialised, behind the array of pointers to them that a repeated
// field holds: one allocation (free the pointers). NULL when n is 0 or out of memory.
static void *
pb_repeated(const ProtobufCMessageDescriptor *desc, size_t n)
{
    if (n == 0)
        return NULL;
    size_t head = n * sizeof(void *);
    head += (_Alignof(max_align_t) - head % _Alignof(max_align_t)) % _Alignof(max_align_t);
    void **ptrs = malloc(head + n * desc->sizeof_message);
    if (ptrs == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = (char *)ptrs + head + i * desc->sizeof_message;
        protobuf_c_message_init(desc, ptrs[i]);
    }
    return ptrs;
}

// --- groups (Status) ----------------------------------------------------------------------------

static const char *const group_states[] = {"open", "ended", "broken"};

static uint32_t
group_state_code(const char *state)
{
    for (uint32_t i = 0; i < 3; i++)
        if (state != NULL && strcmp(state, group_states[i]) == 0)
            return i;
    return 0;
}

static const char *
group_state_name(uint32_t code)
{
    return code < 3 ? group_states[code] : "unknown";
}

// --- label maps (issue 18) ----------------------------------------------------------------------

// The listed names of l as pointers, for a repeated string field: malloc'd (the caller frees),
// NULL when none are listed or out of memory (tell them apart by l->n_listed).
static char **
label_name_ptrs(const stoker_labels *l)
{
    if (l->n_listed == 0)
        return NULL;
    char **ptrs = malloc(l->n_listed * sizeof(*ptrs));
    if (ptrs == NULL)
        return NULL;
    char *name = l->names;
    for (uint32_t i = 0; i < l->n_listed; i++) {
        ptrs[i] = name;
        name += strlen(name) + 1;
    }
    return ptrs;
}

// A peer's map (classes, then names and file counts of the first classes) into *out, within
// the bounds of stoker/labels.h (extra names are dropped, not refused).
static int
labels_from_pb(stoker_labels *out, uint32_t classes, size_t n_names, char **names, size_t n_files,
               const uint64_t *files, const char *what, char *err, size_t err_len)
{
    if (n_names != n_files || n_names > classes)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "%s: %zu class names and %zu file counts for %u classes", what,
                             n_names, n_files, classes);
    for (size_t i = 0; i < n_names; i++)
        if (names[i] == NULL)
            return stoker_errorf(err, err_len, STOKER_INVALID, "%s: a class without a name", what);
    uint32_t n =
        n_names > STOKER_LABELS_MAX_CLASSES ? STOKER_LABELS_MAX_CLASSES : (uint32_t)n_names;
    if (stoker_labels_build(out, classes, (const char *const *)names, files, n) != STOKER_OK)
        return stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", what);
    return STOKER_OK;
}

// Frees what label_maps_to_pb set in r.
static void
label_maps_pb_free(Stoker__Reply *r)
{
    for (size_t i = 0; r->label_maps != NULL && i < r->n_label_maps; i++)
        free(r->label_maps[i]->names);
    free(r->label_maps);
}

// The reply's label maps as r's LabelMap messages (free with label_maps_pb_free, also after a
// failure). STOKER_OK or STOKER_NOMEM.
static int
label_maps_to_pb(const stoker_reply *rep, Stoker__Reply *r)
{
    Stoker__LabelMap **maps = pb_repeated(&stoker__label_map__descriptor, rep->n_label_maps);
    if (maps == NULL && rep->n_label_maps > 0)
        return STOKER_NOMEM;
    r->n_label_maps = rep->n_label_maps;
    r->label_maps = maps;
    r->label_maps_omitted = rep->label_maps_omitted;
    for (uint32_t i = 0; i < rep->n_label_maps; i++) {
        const stoker_label_map *s = &rep->label_maps[i];
        Stoker__LabelMap *m = maps[i];
        m->n_producers = s->n_producers;
        m->producers = s->producers;
        m->classes = s->labels.n_classes;
        m->n_names = m->n_files = s->labels.n_listed;
        m->names = label_name_ptrs(&s->labels);
        m->files = s->labels.files;
        if (m->names == NULL && m->n_names > 0)
            return STOKER_NOMEM;
    }
    return STOKER_OK;
}

static int
label_maps_from_pb(Stoker__LabelMap *const *pb, size_t n, stoker_reply *rep, char *err,
                   size_t err_len)
{
    if (n > STOKER_LABEL_MAPS_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "reply lists %zu label maps (at most %d)", n, STOKER_LABEL_MAPS_MAX);
    if (n == 0)
        return STOKER_OK;
    rep->label_maps = calloc(n, sizeof(*rep->label_maps));
    if (rep->label_maps == NULL)
        return STOKER_NOMEM;
    for (size_t i = 0; i < n; i++) {
        stoker_label_map *d = &rep->label_maps[i];
        rep->n_label_maps = (uint32_t)i + 1; // freed with the reply from here on
        if (pb[i]->n_producers > MAX_PRODUCERS)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "reply: a label map of %zu producers", pb[i]->n_producers);
        d->producers = malloc((pb[i]->n_producers ? pb[i]->n_producers : 1) * sizeof(uint32_t));
        if (d->producers == NULL)
            return STOKER_NOMEM;
        memcpy(d->producers, pb[i]->producers, pb[i]->n_producers * sizeof(uint32_t));
        d->n_producers = (uint32_t)pb[i]->n_producers;
        int rv = labels_from_pb(&d->labels, pb[i]->classes, pb[i]->n_names, pb[i]->names,
                                pb[i]->n_files, pb[i]->files, "reply: label map", err, err_len);
        if (rv != STOKER_OK)
            return rv;
    }
    return STOKER_OK;
}

// --- consumers (Status; issue 13) -----------------------------------------------------------

// The reply's consumers as r's ConsumerState messages (free r->consumers). STOKER_NOMEM.
static int
consumers_to_pb(const stoker_reply *rep, Stoker__Reply *r)
{
    Stoker__ConsumerState **ds = pb_repeated(&stoker__consumer_state__descriptor, rep->n_consumers);
    if (ds == NULL && rep->n_consumers > 0)
        return STOKER_NOMEM;
    for (uint32_t i = 0; i < rep->n_consumers; i++) {
        const stoker_consumer_info *s = &rep->consumers[i];
        Stoker__ConsumerState *d = ds[i];
        CONSUMER_FIELDS(COPY_FIELD)
        d->name = (char *)s->name;
        d->connected = s->connected != 0;
        d->delivery = (uint32_t)s->delivery;
    }
    r->n_consumers = rep->n_consumers;
    r->consumers = ds;
    return STOKER_OK;
}

static int
consumers_from_pb(const Stoker__Reply *r, stoker_reply *rep, char *err, size_t err_len)
{
    if (r->n_consumers == 0)
        return STOKER_OK;
    if (r->n_consumers > MAX_PRODUCERS)
        return stoker_errorf(err, err_len, STOKER_INVALID, "reply lists %zu consumers, at most %d",
                             r->n_consumers, MAX_PRODUCERS);
    rep->consumers = calloc(r->n_consumers, sizeof(*rep->consumers));
    if (rep->consumers == NULL)
        return STOKER_NOMEM;
    for (size_t i = 0; i < r->n_consumers; i++) {
        const Stoker__ConsumerState *s = r->consumers[i];
        stoker_consumer_info *d = &rep->consumers[i];
        CONSUMER_FIELDS(COPY_FIELD)
        snprintf(d->name, sizeof(d->name), "%s", s->name != NULL ? s->name : "");
        d->connected = s->connected;
        d->delivery = s->delivery <= STOKER_DELIVERY_SHM ? (stoker_delivery)s->delivery
                                                         : STOKER_DELIVERY_NONE;
    }
    rep->n_consumers = (uint32_t)r->n_consumers;
    return STOKER_OK;
}

// --- autoscale (Status; issue 28) ----------------------------------------------------------

// The reply's autoscale signal into r (free r->pools). STOKER_NOMEM.
static int
pools_to_pb(const stoker_reply *rep, Stoker__Reply *r)
{
    if (!rep->has_autoscale)
        return STOKER_OK;
    Stoker__PoolState **ds = pb_repeated(&stoker__pool_state__descriptor, rep->n_pools);
    if (ds == NULL && rep->n_pools > 0)
        return STOKER_NOMEM;
    for (uint32_t i = 0; i < rep->n_pools; i++) {
        const stoker_pool_info *s = &rep->pools[i];
        ds[i]->name = (char *)s->name;
        ds[i]->demand = s->demand;
        ds[i]->supply = s->supply;
        ds[i]->supply_low = s->supply_low;
        ds[i]->supply_high = s->supply_high;
        ds[i]->wanted = s->wanted;
        ds[i]->current = s->current;
        ds[i]->why = (char *)s->why;
    }
    r->has_autoscale = 1;
    r->autoscale_headroom = rep->autoscale_headroom;
    r->autoscale_min = rep->autoscale_min;
    r->autoscale_max = rep->autoscale_max;
    r->idle_ms = rep->idle_ms;
    r->n_pools = rep->n_pools;
    r->pools = ds;
    return STOKER_OK;
}

static int
pools_from_pb(const Stoker__Reply *r, stoker_reply *rep, char *err, size_t err_len)
{
    if (!r->has_autoscale)
        return STOKER_OK;
    if (r->n_pools > MAX_PRODUCERS)
        return stoker_errorf(err, err_len, STOKER_INVALID, "reply lists %zu pools, at most %d",
                             r->n_pools, MAX_PRODUCERS);
    rep->pools = calloc(r->n_pools ? r->n_pools : 1, sizeof(*rep->pools));
    if (rep->pools == NULL)
        return STOKER_NOMEM;
    for (size_t i = 0; i < r->n_pools; i++) {
        const Stoker__PoolState *s = r->pools[i];
        stoker_pool_info *d = &rep->pools[i];
        snprintf(d->name, sizeof(d->name), "%s", s->name != NULL ? s->name : "");
        snprintf(d->why, sizeof(d->why), "%s", s->why != NULL ? s->why : "");
        d->demand = s->demand;
        d->supply = s->supply;
        d->supply_low = s->supply_low;
        d->supply_high = s->supply_high;
        d->wanted = s->wanted;
        d->current = s->current;
    }
    rep->n_pools = (uint32_t)r->n_pools;
    rep->has_autoscale = 1;
    rep->autoscale_headroom = r->autoscale_headroom;
    rep->autoscale_min = r->autoscale_min;
    rep->autoscale_max = r->autoscale_max;
    rep->idle_ms = r->idle_ms;
    return STOKER_OK;
}

// --- requests -------------------------------------------------------------------------------

// Encodes req into a new nng message (out) or into pieces (pieces); one of them is NULL.
static int
encode_request(const stoker_request *req, nng_msg **out, stoker_wire_pieces *pieces)
{
    Stoker__Request r;
    Stoker__Hello hello;
    Stoker__Push push;
    Stoker__Pull pull;
    Stoker__Ack ack;
    Stoker__Scaled scaled;
    schema_pb spb;
    chunk_pb cpb;
    blob_source blobs = {0}, *src = NULL;
    char **label_names = NULL;

    stoker__request__init(&r);
    r.method = (Stoker__Method)req->method;
    r.session = req->session;
    switch (req->method) {
    case STOKER_HELLO:
        stoker__hello__init(&hello);
        hello.role = (Stoker__Role)req->role;
        hello.name = (char *)req->name;
        hello.next_seq = req->next_seq;
        hello.token = (char *)req->token;
        hello.want_arena = req->want_arena != 0;
        hello.pid = req->pid;
        hello.pool = (char *)req->pool;
        hello.dataset_size = req->dataset_size;
        hello.dataset_fingerprint = req->dataset_fingerprint;
        hello.commit = req->commit != 0;
        hello.group = (char *)req->group;
        hello.rank = req->rank;
        hello.world = req->world;
        hello.batch = req->group_batch;
        hello.group_steps = req->group_steps;
        hello.max_tokens = req->batching.max_tokens;
        hello.buckets = req->batching.buckets;
        hello.pack = req->batching.pack;
        hello.pack_whole = req->batching.pack_whole;
        hello.n_trained = (size_t)req->n_trained * 3;
        hello.trained = (uint64_t *)req->trained;
        hello.label_classes = req->labels.n_classes;
        if (req->labels.n_listed > 0) {
            if ((label_names = label_name_ptrs(&req->labels)) == NULL)
                return STOKER_NOMEM;
            hello.n_label_names = req->labels.n_listed;
            hello.label_names = label_names;
            hello.n_label_files = req->labels.n_listed;
            hello.label_files = req->labels.files;
        }
        if (req->has_schema) {
            schema_to_pb(&req->schema, &spb);
            hello.schema = &spb.schema;
        }
        r.hello = &hello;
        break;
    case STOKER_PUSH:
        stoker__push__init(&push);
        push.first_seq = req->first_seq;
        chunk_to_pb(&(blob_source){.chunk = &req->chunk}, &cpb);
        push.chunk = &cpb.chunk;
        push.n_items = req->n_items;
        push.items = (uint64_t *)req->items;
        push.shard = req->shard;
        push.make_us = req->make_us;
        r.push = &push;
        if (req->pool_secret != 0) {
            // By reference: the blobs stay in the producer's shared memory.
            push.pool_secret = req->pool_secret;
            push.n_pool_offsets = cpb.chunk.n_sizes;
            push.pool_offsets = (uint64_t *)req->pool_offsets;
            break;
        }
        blobs.chunk = &req->chunk;
        src = &blobs;
        break;
    case STOKER_PULL:
        stoker__pull__init(&pull);
        pull.max_examples = req->max_examples;
        pull.wait_ms = req->wait_ms;
        pull.n_acks = req->n_acks;
        pull.acks = (uint64_t *)req->acks;
        pull.arena_secret = req->arena_secret;
        pull.id = req->pull_id;
        pull.data_wait_ms = req->data_wait_ms;
        pull.n_replaces = req->n_replaces;
        pull.replaces = (uint64_t *)req->replaces;
        r.pull = &pull;
        break;
    case STOKER_ACK:
        stoker__ack__init(&ack);
        ack.n_leases = req->n_acks;
        ack.leases = (uint64_t *)req->acks;
        ack.commit_step = req->commit_step;
        ack.commit_final = req->commit_final != 0;
        r.ack = &ack;
        break;
    case STOKER_GOODBYE:
        r.n_held_leases = req->n_held;
        r.held_leases = (uint64_t *)req->held;
        break;
    case STOKER_HEARTBEAT:
        r.n_trained = (size_t)req->n_trained * 3;
        r.trained = (uint64_t *)req->trained;
        r.done_making = req->done_making != 0;
        break;
    case STOKER_SCALED:
        stoker__scaled__init(&scaled);
        scaled.pool = (char *)req->pool;
        scaled.from = req->scaled_from;
        scaled.to = req->scaled_to;
        scaled.why = (char *)req->why;
        scaled.engine = (char *)req->engine;
        r.scaled = &scaled;
        break;
    default:
        break;
    }
    int rv =
        out != NULL ? pack_into_msg(&r.base, src, out) : pack_into_pieces(&r.base, src, pieces);
    free(label_names);
    return rv;
}

int
stoker_wire_encode_request(const stoker_request *req, nng_msg **out)
{
    return encode_request(req, out, NULL);
}

int
stoker_wire_encode_request_pieces(const stoker_request *req, stoker_wire_pieces *out)
{
    return encode_request(req, NULL, out);
}

static int decode_request(nng_msg *msg, uint8_t *buf, size_t len, int aligned, stoker_request **out,
                          char *err, size_t err_len);

int
stoker_wire_decode_request_msg(nng_msg *msg, stoker_request **out, char *err, size_t err_len)
{
    return decode_request(msg, nng_msg_body(msg), nng_msg_len(msg), 1, out, err, err_len);
}

int
stoker_wire_decode_request_msg_unaligned(nng_msg *msg, stoker_request **out, char *err,
                                         size_t err_len)
{
    return decode_request(msg, nng_msg_body(msg), nng_msg_len(msg), 0, out, err, err_len);
}

int
stoker_wire_decode_request_buf(void *buf, size_t len, void (*buf_free)(void *arg, void *buf),
                               void *arg, stoker_request **out, char *err, size_t err_len)
{
    stoker_request *req;
    int rv = decode_request(NULL, buf, len, 0, &req, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    wire_owner *o = req->owner;
    if (o->aligned == NULL) { // else nothing points into buf any more: the caller's to free
        o->buf = buf;
        o->buf_free = buf_free;
        o->buf_arg = arg;
    } else {
        buf_free(arg, buf);
    }
    *out = req;
    return STOKER_OK;
}

// Decodes the len bytes at body: msg's body (then owned by the request on success) or, with msg
// NULL, a buffer the caller gives the request after (stoker_wire_decode_request_buf).
static int
decode_request(nng_msg *msg, uint8_t *body, size_t len, int aligned, stoker_request **out,
               char *err, size_t err_len)
{
    const uint8_t *pb = NULL;
    size_t pb_len = 0;
    if (frame_header(body, len, &pb, &pb_len, err, err_len) != STOKER_OK)
        return STOKER_INVALID;
    Stoker__Request *r = stoker__request__unpack(NULL, pb_len, pb);
    if (r == NULL)
        return stoker_errorf(err, err_len, STOKER_INVALID, "not a valid stoker request (%zu bytes)",
                             len);
    stoker_request *req = calloc(1, sizeof(*req));
    wire_owner *owner = calloc(1, sizeof(*owner));
    if (req == NULL || owner == NULL) {
        stoker__request__free_unpacked(r, NULL);
        free(req);
        free(owner);
        return STOKER_NOMEM;
    }
    owner->pb = &r->base;
    req->owner = owner;
    size_t pb_end = HEADER_BYTES + pb_len;
    int has_chunk = 0;
    req->method = (stoker_method)r->method;
    req->session = r->session;
    int rv = STOKER_OK;
    switch (r->method) {
    case STOKER__METHOD__HELLO:
        if (r->hello == NULL) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "hello request without hello body");
            break;
        }
        if (r->hello->role < STOKER__ROLE__PRODUCER || r->hello->role > STOKER__ROLE__OBSERVER) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "hello: unknown role %d",
                               (int)r->hello->role);
            break;
        }
        req->role = (stoker_role)r->hello->role;
        req->next_seq = r->hello->next_seq;
        req->want_arena = r->hello->want_arena;
        req->pid = r->hello->pid;
        req->dataset_size = r->hello->dataset_size;
        req->dataset_fingerprint = r->hello->dataset_fingerprint;
        req->commit = r->hello->commit;
        if ((rv = copy_string(req->name, sizeof(req->name), r->hello->name, "hello: name", err,
                              err_len)) != STOKER_OK ||
            (rv = copy_string(req->token, sizeof(req->token), r->hello->token, "hello: token", err,
                              err_len)) != STOKER_OK ||
            (rv = copy_string(req->pool, sizeof(req->pool), r->hello->pool, "hello: pool", err,
                              err_len)) != STOKER_OK ||
            (rv = copy_string(req->group, sizeof(req->group), r->hello->group, "hello: group", err,
                              err_len)) != STOKER_OK)
            break;
        req->rank = r->hello->rank;
        req->world = r->hello->world;
        req->group_batch = r->hello->batch;
        req->group_steps = r->hello->group_steps;
        req->batching = (stoker_batching){.max_tokens = r->hello->max_tokens,
                                          .buckets = r->hello->buckets,
                                          .pack = r->hello->pack,
                                          .pack_whole = r->hello->pack_whole};
        if (r->hello->n_trained % 3 != 0 || r->hello->n_trained / 3 > STOKER_HELLO_TRAINED_MAX) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "hello: %zu trained values, a multiple of 3 up to %d triples",
                               r->hello->n_trained, STOKER_HELLO_TRAINED_MAX);
            break;
        }
        req->n_trained = (uint32_t)(r->hello->n_trained / 3);
        req->trained = r->hello->trained;
        if (r->hello->schema != NULL) {
            rv = schema_from_pb(r->hello->schema, &req->schema, err, err_len);
            req->has_schema = rv == STOKER_OK;
        }
        if (rv == STOKER_OK && r->hello->label_classes > 0)
            rv = labels_from_pb(&req->labels, r->hello->label_classes, r->hello->n_label_names,
                                r->hello->label_names, r->hello->n_label_files,
                                r->hello->label_files, "hello: label map", err, err_len);
        break;
    case STOKER__METHOD__PUSH:
        if (r->push == NULL || r->push->chunk == NULL) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "push request without a chunk");
            break;
        }
        req->first_seq = r->push->first_seq;
        if (r->push->pool_secret == 0) {
            owner->body = body; // the chunk points into it
            owner->len = len;
            rv = chunk_from_pb_at(r->push->chunk, owner, pb_end, aligned, &req->chunk, &req->n_data,
                                  req->data_len, err, err_len);
            has_chunk = 1;
        } else if (r->push->n_pool_offsets != r->push->chunk->n_sizes) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "push by reference names %zu offsets for %zu fields",
                               r->push->n_pool_offsets, r->push->chunk->n_sizes);
        } else {
            // By reference: only the sizes here; the broker resolves the offsets.
            rv = sizes_only_from_pb(r->push->chunk, &req->chunk, &req->n_data, req->data_len, err,
                                    err_len);
            req->pool_secret = r->push->pool_secret;
            for (uint32_t i = 0; rv == STOKER_OK && i < req->n_data; i++)
                req->pool_offsets[i] = r->push->pool_offsets[i];
        }
        if (rv == STOKER_OK && r->push->n_items != 0 && r->push->n_items != req->chunk.count)
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "push carries %zu items for %u examples (one each, or none)",
                               r->push->n_items, req->chunk.count);
        req->n_items = (uint32_t)r->push->n_items;
        req->items = r->push->items;
        req->shard = r->push->shard;
        req->make_us = r->push->make_us;
        break;
    case STOKER__METHOD__PULL:
        if (r->pull == NULL) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "pull request without pull body");
            break;
        }
        if (r->pull->n_acks > MAX_ACKS) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "pull carries %zu acks, at most %d",
                               r->pull->n_acks, MAX_ACKS);
            break;
        }
        if (r->pull->n_replaces > MAX_REPLACES) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "pull replaces %zu lost pulls, at most %d", r->pull->n_replaces,
                               MAX_REPLACES);
            break;
        }
        req->pull_id = r->pull->id;
        req->data_wait_ms = r->pull->data_wait_ms;
        req->n_replaces = (uint32_t)r->pull->n_replaces;
        req->replaces = r->pull->replaces;
        req->max_examples = r->pull->max_examples;
        req->wait_ms = r->pull->wait_ms;
        req->n_acks = (uint32_t)r->pull->n_acks;
        req->acks = r->pull->acks;
        req->arena_secret = r->pull->arena_secret;
        break;
    case STOKER__METHOD__ACK:
        if (r->ack == NULL || r->ack->n_leases > MAX_ACKS) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "ack request without leases or with too many");
            break;
        }
        req->n_acks = (uint32_t)r->ack->n_leases;
        req->acks = r->ack->leases;
        req->commit_step = r->ack->commit_step;
        req->commit_final = r->ack->commit_final != 0;
        break;
    case STOKER__METHOD__GOODBYE:
        if (r->n_held_leases > MAX_ACKS) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "goodbye names %zu held leases, at most %d", r->n_held_leases,
                               MAX_ACKS);
            break;
        }
        req->n_held = (uint32_t)r->n_held_leases;
        req->held = r->held_leases;
        break;
    case STOKER__METHOD__HEARTBEAT:
        if (r->n_trained % 3 != 0 || r->n_trained / 3 > STOKER_HELLO_TRAINED_MAX) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "heartbeat: %zu trained values, a multiple of 3 up to %d triples",
                               r->n_trained, STOKER_HELLO_TRAINED_MAX);
            break;
        }
        req->n_trained = (uint32_t)(r->n_trained / 3);
        req->trained = r->trained;
        req->done_making = r->done_making != 0;
        break;
    case STOKER__METHOD__SCALED:
        if (r->scaled == NULL) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "scaled request without its body");
            break;
        }
        req->scaled_from = r->scaled->from;
        req->scaled_to = r->scaled->to;
        if ((rv = copy_string(req->pool, sizeof(req->pool), r->scaled->pool, "scaled: pool", err,
                              err_len)) != STOKER_OK ||
            (rv = copy_string(req->why, sizeof(req->why), r->scaled->why, "scaled: why", err,
                              err_len)) != STOKER_OK)
            break;
        rv = copy_string(req->engine, sizeof(req->engine), r->scaled->engine, "scaled: engine", err,
                         err_len);
        break;
    case STOKER__METHOD__STATUS:
    case STOKER__METHOD__SHARD:
        break;
    default:
        rv = stoker_errorf(err, err_len, STOKER_INVALID, "unknown method %d", (int)r->method);
        break;
    }
    if (rv == STOKER_OK && !has_chunk)
        rv = no_trailing(len, pb_end, err, err_len);
    if (rv != STOKER_OK) {
        stoker_request_free(req); // leaves msg to the caller
        return rv;
    }
    keep_msg(owner, msg);
    *out = req;
    return STOKER_OK;
}

int
stoker_wire_decode_request(const void *buf, size_t len, stoker_request **out, char *err,
                           size_t err_len)
{
    nng_msg *msg = NULL;
    int rv = copy_to_msg(buf, len, &msg);
    if (rv != STOKER_OK)
        return rv;
    if ((rv = stoker_wire_decode_request_msg(msg, out, err, err_len)) != STOKER_OK)
        nng_msg_free(msg);
    return rv;
}

int
stoker_request_hold(stoker_request *req, void (*fn)(void *), void *arg)
{
    wire_owner *o = req->owner;
    if (o == NULL || o->hold_fn != NULL)
        return STOKER_INVALID;
    o->hold_fn = fn;
    o->hold_arg = arg;
    return STOKER_OK;
}

void
stoker_request_free(stoker_request *req)
{
    if (req == NULL)
        return;
    owner_free(req->owner);
    stoker_labels_fini(&req->labels);
    free(req);
}

// --- replies --------------------------------------------------------------------------------

int
stoker_wire_encode_reply(const stoker_reply *rep, nng_msg **out)
{
    Stoker__Reply r;
    schema_pb spb;
    chunk_pb cpb;
    Stoker__Counters counters;
    int rv = STOKER_NOMEM;

    stoker__reply__init(&r);
    r.code = (uint32_t)rep->code;
    r.message = (char *)rep->message;
    r.peer_id = rep->peer_id;
    r.next_seq = rep->next_seq;
    r.heartbeat_ms = rep->heartbeat_ms;
    r.intake_port = rep->intake_port;
    r.max_chunk = rep->max_chunk;
    r.acked_through = rep->acked_through;
    r.trained_through = rep->trained_through;
    r.n_trained_after = rep->n_trained_after < STOKER_TRAINED_AFTER_MAX ? rep->n_trained_after
                                                                        : STOKER_TRAINED_AFTER_MAX;
    r.trained_after = (uint64_t *)rep->trained_after;
    r.queue_depth = rep->queue_depth;
    r.lease = rep->lease;
    r.acks_refused = rep->acks_refused;
    r.in_arena = rep->in_arena != 0;
    r.arena_offset = rep->arena_offset;
    r.arena_socket = (char *)rep->arena_socket;
    r.arena_ticket = rep->arena_ticket;
    r.n_items = rep->n_items;
    r.items = rep->items;
    r.dataset_seed = rep->dataset_seed;
    r.shard = rep->shard;
    r.dataset_size = rep->dataset_size;
    r.epochs_done = rep->epochs_done;
    r.epochs_limit = rep->epochs_limit;
    r.items_reassigned = rep->items_reassigned;
    r.pushes_revoked = rep->pushes_revoked;
    r.epochs_overlap = rep->epochs_overlap != 0;
    r.epoch_acknowledged = rep->epoch_acknowledged;
    r.group_step = rep->group_step;
    r.group_leftover = rep->group_leftover;
    r.resent_pull = rep->resent_pull;
    if (rep->has_schema) {
        schema_to_pb(&rep->schema, &spb);
        r.schema = &spb.schema;
    }
    blob_source blobs = {.chunk = &rep->chunk, .parts = rep->parts, .n_parts = rep->n_parts};
    if (rep->chunk.count > 0) {
        chunk_to_pb(&blobs, &cpb);
        r.chunk = &cpb.chunk;
    }
    if (rep->has_counters) {
        stoker__counters__init(&counters);
        const stoker_counters *s = &rep->counters;
        Stoker__Counters *d = &counters;
        COUNTERS_FIELDS(COPY_FIELD)
        r.counters = &counters;
        r.uptime_ms = rep->uptime_ms;
        r.max_bytes = rep->max_bytes;
        r.queue_depth_auto = rep->queue_depth_auto != 0;
        r.queue_limit = (char *)rep->queue_limit;
    }

    // Repeated sub-messages: each an array of pointers to messages, one allocation
    // (pb_repeated), freed at out. rv is STOKER_NOMEM until the message is packed.
    Stoker__Run **runs = pb_repeated(&stoker__run__descriptor, rep->n_runs);
    Stoker__Event **events = pb_repeated(&stoker__event__descriptor, rep->n_events);
    Stoker__ProducerState **prods =
        pb_repeated(&stoker__producer_state__descriptor, rep->n_producers);
    Stoker__GroupState **groups = pb_repeated(&stoker__group_state__descriptor, rep->n_groups);
    if ((runs == NULL && rep->n_runs > 0) || (events == NULL && rep->n_events > 0) ||
        (prods == NULL && rep->n_producers > 0) || (groups == NULL && rep->n_groups > 0) ||
        consumers_to_pb(rep, &r) != STOKER_OK || label_maps_to_pb(rep, &r) != STOKER_OK ||
        pools_to_pb(rep, &r) != STOKER_OK)
        goto out;
    for (uint32_t i = 0; i < rep->n_runs; i++) {
        const stoker_run *s = &rep->runs[i];
        Stoker__Run *d = runs[i];
        RUN_FIELDS(COPY_FIELD)
    }
    r.n_runs = rep->n_runs;
    r.runs = runs;
    for (uint32_t i = 0; i < rep->n_events; i++) {
        const stoker_event *s = &rep->events[i];
        Stoker__Event *d = events[i];
        EVENT_FIELDS(COPY_FIELD)
        d->kind = (uint32_t)s->kind;
        d->name = (char *)s->name;
        d->reason = (char *)s->reason;
    }
    r.n_events = rep->n_events;
    r.events = events;
    for (uint32_t i = 0; i < rep->n_producers; i++) {
        const stoker_producer_info *s = &rep->producers[i];
        Stoker__ProducerState *d = prods[i];
        PRODUCER_FIELDS(COPY_FIELD)
        d->name = (char *)s->name;
        d->state = (uint32_t)s->status;
    }
    r.n_producers = rep->n_producers;
    r.producers = prods;
    for (uint32_t i = 0; i < rep->n_groups; i++) {
        const stoker_group_info *s = &rep->groups[i];
        Stoker__GroupState *d = groups[i];
        GROUP_FIELDS(COPY_FIELD)
        d->name = (char *)s->name;
        d->state = group_state_code(s->state);
        d->end_reason = (char *)s->end_reason;
        d->ended_at_s = s->ended_at_s;
        d->n_rank_steps = d->n_rank_ready = s->world;
        d->rank_steps = (uint64_t *)s->rank_steps;
        d->rank_ready = (uint32_t *)s->rank_ready;
    }
    r.n_groups = rep->n_groups;
    r.groups = groups;
    // A batch in the arena travels as its description only.
    rv = pack_into_msg(&r.base, rep->chunk.count > 0 && !rep->in_arena ? &blobs : NULL, out);
out:
    free(runs);
    free(events);
    free(prods);
    free(groups);
    free(r.consumers);
    free(r.pools);
    label_maps_pb_free(&r);
    return rv;
}

int
stoker_wire_decode_reply_msg(nng_msg *msg, stoker_reply **out, char *err, size_t err_len)
{
    const uint8_t *pb = NULL;
    size_t pb_len = 0;
    if (frame_header(nng_msg_body(msg), nng_msg_len(msg), &pb, &pb_len, err, err_len) != STOKER_OK)
        return STOKER_INVALID;
    Stoker__Reply *r = stoker__reply__unpack(NULL, pb_len, pb);
    if (r == NULL)
        return stoker_errorf(err, err_len, STOKER_INVALID, "not a valid stoker reply (%zu bytes)",
                             nng_msg_len(msg));
    stoker_reply *rep = calloc(1, sizeof(*rep));
    wire_owner *owner = calloc(1, sizeof(*owner));
    if (rep == NULL || owner == NULL) {
        stoker__reply__free_unpacked(r, NULL);
        free(rep);
        free(owner);
        return STOKER_NOMEM;
    }
    owner->pb = &r->base;
    rep->owner = owner;
    size_t pb_end = HEADER_BYTES + pb_len;
    int rv = STOKER_OK;
    rep->code = r->code < STOKER_ERR_COUNT ? (int)r->code : STOKER_INTERNAL;
    if ((rv = copy_string(rep->message, sizeof(rep->message), r->message, "reply message", err,
                          err_len)) != STOKER_OK)
        goto fail;
    rep->peer_id = r->peer_id;
    rep->next_seq = r->next_seq;
    rep->heartbeat_ms = r->heartbeat_ms;
    rep->intake_port = r->intake_port;
    rep->max_chunk = r->max_chunk;
    rep->acked_through = r->acked_through;
    rep->trained_through = r->trained_through;
    rep->n_trained_after = 0;
    for (size_t i = 0; i + 1 < r->n_trained_after && i + 1 < STOKER_TRAINED_AFTER_MAX; i += 2) {
        rep->trained_after[i] = r->trained_after[i];
        rep->trained_after[i + 1] = r->trained_after[i + 1];
        rep->n_trained_after = (uint32_t)i + 2;
    }
    rep->queue_depth = r->queue_depth;
    rep->lease = r->lease;
    rep->acks_refused = r->acks_refused;
    if (r->n_items > MAX_ITEMS) {
        rv = stoker_errorf(err, err_len, STOKER_INVALID, "reply lists %zu items, at most %d",
                           r->n_items, MAX_ITEMS);
        goto fail;
    }
    rep->n_items = (uint32_t)r->n_items;
    rep->items = r->items;
    rep->dataset_seed = r->dataset_seed;
    rep->shard = r->shard;
    rep->dataset_size = r->dataset_size;
    rep->epochs_done = r->epochs_done;
    rep->epochs_limit = r->epochs_limit;
    rep->items_reassigned = r->items_reassigned;
    rep->pushes_revoked = r->pushes_revoked;
    rep->epochs_overlap = r->epochs_overlap;
    rep->epoch_acknowledged = r->epoch_acknowledged;
    rep->group_step = r->group_step;
    rep->group_leftover = r->group_leftover;
    rep->resent_pull = r->resent_pull;
    if (r->schema != NULL) {
        if ((rv = schema_from_pb(r->schema, &rep->schema, err, err_len)) != STOKER_OK)
            goto fail;
        rep->has_schema = 1;
    }
    if ((rv = copy_string(rep->arena_socket, sizeof(rep->arena_socket), r->arena_socket,
                          "reply arena socket", err, err_len)) != STOKER_OK)
        goto fail;
    rep->arena_ticket = r->arena_ticket;
    rep->in_arena = r->in_arena;
    rep->arena_offset = r->arena_offset;
    owner->body = nng_msg_body(msg); // the chunk points into it
    owner->len = nng_msg_len(msg);
    if (r->chunk != NULL && r->in_arena)
        rv = sizes_only_from_pb(r->chunk, &rep->chunk, &rep->n_data, rep->data_len, err, err_len);
    else
        rv = r->chunk != NULL ? chunk_from_pb(r->chunk, owner, pb_end, &rep->chunk, &rep->n_data,
                                              rep->data_len, err, err_len)
                              : no_trailing(nng_msg_len(msg), pb_end, err, err_len);
    if (rv == STOKER_OK && r->chunk != NULL && r->in_arena)
        rv = no_trailing(nng_msg_len(msg), pb_end, err, err_len);
    if (rv != STOKER_OK)
        goto fail;
    if (r->n_runs > MAX_RUNS || r->n_events > MAX_EVENTS || r->n_producers > MAX_PRODUCERS) {
        rv = stoker_errorf(err, err_len, STOKER_INVALID,
                           "reply lists too many runs, events or producers");
        goto fail;
    }
    if (r->n_runs > 0) {
        rep->runs = calloc(r->n_runs, sizeof(*rep->runs));
        if (rep->runs == NULL) {
            rv = STOKER_NOMEM;
            goto fail;
        }
        for (size_t i = 0; i < r->n_runs; i++) {
            const Stoker__Run *s = r->runs[i];
            stoker_run *d = &rep->runs[i];
            RUN_FIELDS(COPY_FIELD)
        }
        rep->n_runs = (uint32_t)r->n_runs;
    }
    if (r->n_events > 0) {
        rep->events = calloc(r->n_events, sizeof(*rep->events));
        if (rep->events == NULL) {
            rv = STOKER_NOMEM;
            goto fail;
        }
        for (size_t i = 0; i < r->n_events; i++) {
            const Stoker__Event *s = r->events[i];
            stoker_event *d = &rep->events[i];
            EVENT_FIELDS(COPY_FIELD)
            d->kind = s->kind <= STOKER_EVENT_PRODUCER_RECONNECTED ||
                              s->kind == STOKER_EVENT_EPOCH_END || s->kind == STOKER_EVENT_SCALED
                          ? (stoker_event_kind)s->kind
                          : STOKER_EVENT_NONE;
            snprintf(d->name, sizeof(d->name), "%s", s->name != NULL ? s->name : "");
            snprintf(d->reason, sizeof(d->reason), "%s", s->reason != NULL ? s->reason : "");
        }
        rep->n_events = (uint32_t)r->n_events;
    }
    if (r->counters != NULL) {
        const Stoker__Counters *s = r->counters;
        stoker_counters *d = &rep->counters;
        rep->has_counters = 1;
        COUNTERS_FIELDS(COPY_FIELD)
        rep->uptime_ms = r->uptime_ms;
        rep->max_bytes = r->max_bytes;
        rep->queue_depth_auto = r->queue_depth_auto;
        snprintf(rep->queue_limit, sizeof(rep->queue_limit), "%s",
                 r->queue_limit != NULL ? r->queue_limit : "");
    }
    if (r->n_producers > 0) {
        rep->producers = calloc(r->n_producers, sizeof(*rep->producers));
        if (rep->producers == NULL) {
            rv = STOKER_NOMEM;
            goto fail;
        }
        for (size_t i = 0; i < r->n_producers; i++) {
            const Stoker__ProducerState *s = r->producers[i];
            stoker_producer_info *d = &rep->producers[i];
            PRODUCER_FIELDS(COPY_FIELD)
            snprintf(d->name, sizeof(d->name), "%s", s->name != NULL ? s->name : "");
            d->status = s->state <= STOKER_PRODUCER_FINISHED ? (stoker_producer_status)s->state
                                                             : STOKER_PRODUCER_LOST;
        }
        rep->n_producers = (uint32_t)r->n_producers;
    }
    if (r->n_groups > 0) {
        rep->groups = calloc(r->n_groups, sizeof(*rep->groups));
        if (rep->groups == NULL) {
            rv = STOKER_NOMEM;
            goto fail;
        }
        for (size_t i = 0; i < r->n_groups; i++) {
            const Stoker__GroupState *s = r->groups[i];
            stoker_group_info *d = &rep->groups[i];
            if (s->world > STOKER_GROUP_MAX_WORLD || s->n_rank_steps != s->world ||
                s->n_rank_ready != s->world) {
                rv = stoker_errorf(err, err_len, STOKER_INVALID,
                                   "reply: group of %u ranks with %zu/%zu rank entries", s->world,
                                   s->n_rank_steps, s->n_rank_ready);
                goto fail;
            }
            GROUP_FIELDS(COPY_FIELD)
            snprintf(d->name, sizeof(d->name), "%s", s->name != NULL ? s->name : "");
            d->state = group_state_name(s->state);
            snprintf(d->end_reason, sizeof(d->end_reason), "%s",
                     s->end_reason != NULL ? s->end_reason : "");
            d->ended_at_s = s->ended_at_s;
            memcpy(d->rank_steps, s->rank_steps, s->world * sizeof(uint64_t));
            memcpy(d->rank_ready, s->rank_ready, s->world * sizeof(uint32_t));
        }
        rep->n_groups = (uint32_t)r->n_groups;
    }
    rep->label_maps_omitted = r->label_maps_omitted;
    if ((rv = label_maps_from_pb(r->label_maps, r->n_label_maps, rep, err, err_len)) != STOKER_OK)
        goto fail;
    if ((rv = consumers_from_pb(r, rep, err, err_len)) != STOKER_OK ||
        (rv = pools_from_pb(r, rep, err, err_len)) != STOKER_OK)
        goto fail;
    keep_msg(owner, msg);
    *out = rep;
    return STOKER_OK;
fail:
    stoker_reply_free(rep); // leaves msg to the caller
    return rv;
}

int
stoker_wire_decode_reply(const void *buf, size_t len, stoker_reply **out, char *err, size_t err_len)
{
    nng_msg *msg = NULL;
    int rv = copy_to_msg(buf, len, &msg);
    if (rv != STOKER_OK)
        return rv;
    if ((rv = stoker_wire_decode_reply_msg(msg, out, err, err_len)) != STOKER_OK)
        nng_msg_free(msg);
    return rv;
}

void
stoker_reply_free(stoker_reply *rep)
{
    if (rep == NULL)
        return;
    owner_free(rep->owner);
    free(rep->runs);
    free(rep->events);
    free(rep->producers);
    free(rep->groups);
    stoker_label_maps_free(rep->label_maps, rep->n_label_maps);
    free(rep->consumers);
    free(rep->pools);
    free(rep);
}

// stoker_wire_bind_chunk; copied[i], when not NULL, holds variable field i's offsets (a copy of
// those its blob starts with): they are checked and used instead of the blob's.
static int
bind_chunk(stoker_chunk *c, uint32_t n_data, const size_t *data_len, const stoker_schema *schema,
           uint8_t *const *copied, char *err, size_t err_len)
{
    if (n_data != schema->n_fields)
        return stoker_errorf(err, err_len, STOKER_INVALID, "chunk has %u fields, schema has %u",
                             n_data, schema->n_fields);
    uint64_t *offsets[STOKER_MAX_FIELDS] = {0};
    uint8_t *data[STOKER_MAX_FIELDS];
    for (uint32_t i = 0; i < n_data; i++) {
        const stoker_field *f = &schema->fields[i];
        data[i] = c->data[i];
        if (f->variable) {
            // [count + 1 offsets][values]: every offset checked before anyone reads a value.
            size_t off_bytes = ((size_t)c->count + 1) * 8;
            if (data_len[i] < off_bytes)
                return stoker_errorf(err, err_len, STOKER_INVALID,
                                     "field '%s': %zu bytes for %u examples, shorter than their "
                                     "%zu bytes of offsets",
                                     f->name, data_len[i], c->count, off_bytes);
            if (c->data[i] == NULL)
                return stoker_errorf(err, err_len, STOKER_INVALID,
                                     "field '%s': a variable-length field by reference (not "
                                     "carried yet)",
                                     f->name);
            uint8_t *at = copied != NULL && copied[i] != NULL ? copied[i] : c->data[i];
            int rv =
                stoker_chunk_check_offsets(f, at, c->count, data_len[i] - off_bytes, err, err_len);
            if (rv != STOKER_OK)
                return rv;
            offsets[i] = (uint64_t *)(void *)at;
            data[i] = c->data[i] + off_bytes;
            continue;
        }
        size_t want = stoker_field_bytes(f) * (size_t)c->count;
        if (data_len[i] != want)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "field '%s': %zu bytes for %u examples, expected %zu", f->name,
                                 data_len[i], c->count, want);
    }
    for (uint32_t i = 0; i < n_data; i++) {
        c->data[i] = data[i];
        c->offsets[i] = offsets[i];
    }
    c->schema = *schema;
    return STOKER_OK;
}

int
stoker_wire_bind_chunk(stoker_chunk *c, uint32_t n_data, const size_t *data_len,
                       const stoker_schema *schema, char *err, size_t err_len)
{
    return bind_chunk(c, n_data, data_len, schema, NULL, err, err_len);
}

int
stoker_request_bind_shared(stoker_request *req, const stoker_schema *schema, char *err,
                           size_t err_len)
{
    wire_owner *o = req->owner;
    stoker_chunk *c = &req->chunk;
    if (o == NULL || o->shared_offsets != NULL || req->n_data != schema->n_fields)
        return bind_chunk(c, req->n_data, req->data_len, schema, NULL, err, err_len);
    size_t off_bytes = ((size_t)c->count + 1) * 8, total = 0;
    for (uint32_t i = 0; i < req->n_data; i++)
        if (schema->fields[i].variable && c->data[i] != NULL && req->data_len[i] >= off_bytes)
            total += off_bytes;
    if (total == 0)
        return bind_chunk(c, req->n_data, req->data_len, schema, NULL, err, err_len);
    // Copied first, then checked: the memory is the pusher's, who could change it after a check.
    uint8_t *buf = malloc(total), *copied[STOKER_MAX_FIELDS] = {0};
    if (buf == NULL)
        return stoker_errorf(err, err_len, STOKER_NOMEM, "out of memory copying offsets");
    size_t at = 0;
    for (uint32_t i = 0; i < req->n_data; i++) {
        if (schema->fields[i].variable && c->data[i] != NULL && req->data_len[i] >= off_bytes) {
            copied[i] = buf + at;
            memcpy(copied[i], c->data[i], off_bytes);
            at += off_bytes;
        }
    }
    int rv = bind_chunk(c, req->n_data, req->data_len, schema, copied, err, err_len);
    if (rv != STOKER_OK)
        free(buf);
    else
        o->shared_offsets = buf;
    return rv;
}
