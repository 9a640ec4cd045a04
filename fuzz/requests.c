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
