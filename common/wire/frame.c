// The wire's framing (frame.h): schemas and chunks to and from their protobuf parts, a message's
// layout [u32 protobuf length][protobuf][tensor blobs, each 8-byte aligned] (see
// proto/stoker.proto), and the owner a decoded struct keeps. Encoding writes the blobs straight
// into the nng message (the one copy of tensor data on each side); decoding keeps the nng message
// alive as the owner the returned chunk points into, so nothing is copied again. Every count,
// length and offset from the peer is checked before use.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "frame.h"
#include "stoker/error.h"

int
wire_copy_string(char *dst, size_t cap, const char *src, const char *what, char *err,
                 size_t err_len)
{
    size_t len = src != NULL ? strlen(src) : 0;
    if (len >= cap)
        return stoker_errorf(err, err_len, STOKER_INVALID, "%s longer than %zu bytes", what,
                             cap - 1);
    memcpy(dst, src != NULL ? src : "", len);
    dst[len] = '\0';
    return STOKER_OK;
}

void
wire_schema_to_pb(const stoker_schema *s, schema_pb *pb)
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

int
wire_schema_from_pb(const Stoker__Schema *pb, stoker_schema *out, char *err, size_t err_len)
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
        if (wire_copy_string(s.fields[i].name, STOKER_NAME_MAX, f->name, "field name", err,
                             err_len) != STOKER_OK)
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

void
wire_chunk_to_pb(const blob_source *src, chunk_pb *pb)
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
int
wire_pack_into_msg(const ProtobufCMessage *m, const blob_source *src, nng_msg **out)
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
int
wire_pack_into_pieces(const ProtobufCMessage *m, const blob_source *src, stoker_wire_pieces *out)
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

void
wire_owner_free(wire_owner *o)
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
int
wire_frame_header(const uint8_t *body, size_t len, const uint8_t **pb, size_t *pb_len, char *err,
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

// Points chunk at the blobs that follow the protobuf part (pb_end bytes into msg), after
// checking that sizes describe exactly the rest of the message. The schema is not on the wire
// with the data: the receiver checks data_len against its own (stoker_wire_bind_chunk).
int
wire_chunk_from_pb(const Stoker__Chunk *pb, wire_owner *owner, size_t pb_end, stoker_chunk *c,
                   uint32_t *n_data, size_t *data_len, char *err, size_t err_len)
{
    return wire_chunk_from_pb_at(pb, owner, pb_end, 1, c, n_data, data_len, err, err_len);
}

// As wire_chunk_from_pb; aligned: 0 leaves blobs where they are even when misaligned (for a reader
// that only copies them, as the broker does: the aligned copy would double its work per push).
int
wire_chunk_from_pb_at(const Stoker__Chunk *pb, wire_owner *owner, size_t pb_end, int aligned,
                      stoker_chunk *c, uint32_t *n_data, size_t *data_len, char *err,
                      size_t err_len)
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
int
wire_sizes_only_from_pb(const Stoker__Chunk *pb, stoker_chunk *c, uint32_t *n_data,
                        size_t *data_len, char *err, size_t err_len)
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
void
wire_keep_msg(wire_owner *owner, nng_msg *msg)
{
    if (owner->aligned != NULL) {
        nng_msg_free(msg);
        owner->msg = NULL;
    } else {
        owner->msg = msg;
    }
}

// Checks that a message without a chunk has nothing after its protobuf part.
int
wire_no_trailing(size_t len, size_t pb_end, char *err, size_t err_len)
{
    if (len != pb_end)
        return stoker_errorf(err, err_len, STOKER_INVALID, "%zu unexpected bytes after the message",
                             len - pb_end);
    return STOKER_OK;
}

int
wire_copy_to_msg(const void *buf, size_t len, nng_msg **out)
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
