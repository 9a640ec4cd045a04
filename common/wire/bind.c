// A decoded chunk bound to a schema: the receiver checks the blob sizes the wire carried
// against its own schema, and every offset of a variable field before anyone reads a value
// (stoker_wire_bind_chunk, stoker_request_bind_shared).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_check.h"
#include "frame.h"
#include "stoker/error.h"
#include "stoker/wire.h"

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
