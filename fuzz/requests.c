// Encoders of fuzz/requests.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "requests.h"
#include "stoker/error.h"

const stoker_schema *
fuzz_schema(void)
{
    static stoker_schema schema;
    static int parsed;
    if (!parsed) {
        char err[128];
        if (stoker_schema_parse(FUZZ_SCHEMA, &schema, err, sizeof(err)) != STOKER_OK) {
            fprintf(stderr, "fuzz: schema: %s\n", err);
            abort();
        }
        parsed = 1;
    }
    return &schema;
}

static nng_msg *
encode(const stoker_request *req)
{
    nng_msg *msg = NULL;
    if (stoker_wire_encode_request(req, &msg) != STOKER_OK)
        return NULL;
    return msg;
}

nng_msg *
fuzz_hello(uint64_t session, stoker_role role, const char *name, const char *token, int with_schema)
{
    stoker_request req = {.method = STOKER_HELLO, .session = session, .role = role};
    snprintf(req.name, sizeof(req.name), "%s", name);
    snprintf(req.token, sizeof(req.token), "%s", token != NULL ? token : "");
    if (with_schema) {
        req.has_schema = 1;
        req.schema = *fuzz_schema();
    }
    return encode(&req);
}

nng_msg *
fuzz_push(uint64_t session, uint64_t first_seq, uint32_t count)
{
    stoker_request req = {.method = STOKER_PUSH, .session = session, .first_seq = first_seq};
    if (stoker_chunk_init(&req.chunk, fuzz_schema(), count) != STOKER_OK)
        return NULL;
    req.chunk.count = count;
    for (uint32_t f = 0; f < req.chunk.schema.n_fields; f++)
        memset(req.chunk.data[f], (int)(first_seq & 0xff),
               (size_t)count * stoker_field_bytes(&req.chunk.schema.fields[f]));
    nng_msg *msg = encode(&req);
    stoker_chunk_fini(&req.chunk);
    return msg;
}

static const stoker_schema *
var_schema(void)
{
    static stoker_schema schema;
    static int parsed;
    if (!parsed) {
        char err[128];
        if (stoker_schema_parse(FUZZ_VAR_SCHEMA, &schema, err, sizeof(err)) != STOKER_OK) {
            fprintf(stderr, "fuzz: schema: %s\n", err);
            abort();
        }
        parsed = 1;
    }
    return &schema;
}

nng_msg *
fuzz_hello_var(uint64_t session, const char *name, const char *token)
{
    stoker_request req = {.method = STOKER_HELLO, .session = session, .role = STOKER_ROLE_PRODUCER};
    snprintf(req.name, sizeof(req.name), "%s", name);
    snprintf(req.token, sizeof(req.token), "%s", token != NULL ? token : "");
    req.has_schema = 1;
    req.schema = *var_schema();
    return encode(&req);
}

static void
put_u64(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

nng_msg *
fuzz_push_var(uint64_t session, uint64_t first_seq, uint32_t count, int how)
{
    stoker_request req = {.method = STOKER_PUSH, .session = session, .first_seq = first_seq};
    if (count < 2 || stoker_chunk_init(&req.chunk, var_schema(), count) != STOKER_OK)
        return NULL;
    for (uint32_t k = 0; k < count; k++) {
        stoker_chunk_begin_example(&req.chunk);
        void *t;
        uint32_t rows = how == FUZZ_VAR_OVER_BOUND && k == 1 ? 8 : k % 5;
        if (stoker_chunk_var_reserve(&req.chunk, 0, rows, &t) != STOKER_OK) {
            stoker_chunk_fini(&req.chunk);
            return NULL;
        }
        memset(t, (int)k, rows * 4);
        if (how == FUZZ_VAR_OVER_BOUND && k == 1)
            req.chunk.offsets[0][k + 1]++; // 9 rows: past what the writer allows
        memset(stoker_chunk_at(&req.chunk, 1, k), (int)k, 8);
        stoker_chunk_commit_example(&req.chunk);
    }
    if (how == FUZZ_VAR_DECREASING)
        req.chunk.offsets[0][1] = req.chunk.offsets[0][2] + 1;
    nng_msg *msg = encode(&req);
    stoker_chunk_fini(&req.chunk);
    if (msg != NULL && (how == FUZZ_VAR_PAST_DATA || how == FUZZ_VAR_NOT_ZERO)) {
        // The encoder rebases offsets: change them in the message. The variable field's blob
        // is the first, 8-byte aligned after [u32 length][protobuf part].
        uint8_t *body = nng_msg_body(msg);
        size_t pb =
            (size_t)body[0] | (size_t)body[1] << 8 | (size_t)body[2] << 16 | (size_t)body[3] << 24;
        uint8_t *offs = body + ((4 + pb + 7) & ~(size_t)7);
        if (how == FUZZ_VAR_PAST_DATA)
            put_u64(offs + (size_t)count * 8, 1000);
        else
            put_u64(offs, 1);
    }
    return msg;
}

nng_msg *
fuzz_pull(uint64_t session, uint32_t max_examples, uint32_t wait_ms, uint32_t n_acks,
          const uint64_t *acks)
{
    stoker_request req = {.method = STOKER_PULL,
                          .session = session,
                          .max_examples = max_examples,
                          .wait_ms = wait_ms,
                          .n_acks = n_acks,
                          .acks = acks};
    return encode(&req);
}

nng_msg *
fuzz_ack(uint64_t session, uint32_t n_acks, const uint64_t *acks)
{
    stoker_request req = {.method = STOKER_ACK, .session = session, .n_acks = n_acks, .acks = acks};
    return encode(&req);
}

nng_msg *
fuzz_simple(stoker_method method, uint64_t session)
{
    stoker_request req = {.method = method, .session = session};
    return encode(&req);
}
