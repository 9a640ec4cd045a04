// The request codec: a stoker_request to and from its protobuf Request (stoker/wire.h). A
// push's chunk travels after the protobuf part (frame.h) and a decoded request points into the
// message or buffer it came in; every count, length and enum from the peer is checked first.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "frame.h"
#include "status_pb.h"
#include "stoker/error.h"
#include "stoker/wire.h"

// A hello's mixture into *mix, checked (stoker_mix_check).
static int
mix_from_pb(const Stoker__Hello *h, stoker_mix *mix, char *err, size_t err_len)
{
    memset(mix, 0, sizeof(*mix));
    if (h->n_mix_pools != h->n_mix_weights || h->n_mix_pools > STOKER_MIX_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "hello: a mixture of %zu pools and %zu weights (one each, at most %d)",
                             h->n_mix_pools, h->n_mix_weights, STOKER_MIX_MAX);
    for (size_t i = 0; i < h->n_mix_pools; i++) {
        if (h->mix_pools[i] == NULL || strlen(h->mix_pools[i]) >= STOKER_NAME_MAX)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "hello: mixture pool %zu missing or longer than %d bytes", i + 1,
                                 STOKER_NAME_MAX - 1);
        memcpy(mix->names[i], h->mix_pools[i], strlen(h->mix_pools[i]) + 1);
        mix->weights[i] = h->mix_weights[i];
    }
    mix->n = (uint32_t)h->n_mix_pools;
    mix->stop = h->mix_stop;
    if (h->n_mix_at > STOKER_MIX_POINTS || h->n_mix_at_weights != h->n_mix_at * mix->n)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "hello: a mixture schedule of %zu points and %zu weights (at most %d "
                             "points, a weight per pool each)",
                             h->n_mix_at, h->n_mix_at_weights, STOKER_MIX_POINTS);
    mix->n_points = (uint32_t)h->n_mix_at;
    for (uint32_t k = 0; k < mix->n_points; k++) {
        mix->at[k] = h->mix_at[k];
        for (uint32_t s = 0; s < mix->n; s++)
            mix->at_weights[k][s] = h->mix_at_weights[k * mix->n + s];
    }
    mix->blend = h->mix_blend;
    return stoker_mix_check(mix, err, err_len);
}

// mix into h's mix fields, pointing into mix and the caller's arrays pools and at_weights.
static void
mix_to_pb(const stoker_mix *mix, Stoker__Hello *h, char **pools, double *at_weights)
{
    for (uint32_t i = 0; i < mix->n && i < STOKER_MIX_MAX; i++)
        pools[i] = (char *)mix->names[i];
    h->n_mix_pools = h->n_mix_weights = mix->n;
    h->mix_pools = pools;
    h->mix_weights = (double *)mix->weights;
    h->mix_stop = mix->stop;
    h->n_mix_at = mix->n_points;
    h->mix_at = (uint64_t *)mix->at;
    for (uint32_t k = 0; k < mix->n_points && k < STOKER_MIX_POINTS; k++)
        for (uint32_t s = 0; s < mix->n && s < STOKER_MIX_MAX; s++)
            at_weights[k * mix->n + s] = mix->at_weights[k][s];
    h->n_mix_at_weights = (size_t)mix->n_points * mix->n;
    h->mix_at_weights = at_weights;
    h->mix_blend = mix->blend;
}

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
    char *mix_pools[STOKER_MIX_MAX];
    double mix_at_weights[STOKER_MIX_POINTS * STOKER_MIX_MAX];

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
        hello.job = (char *)req->job;
        hello.rank = req->rank;
        hello.world = req->world;
        hello.batch = req->group_batch;
        hello.group_steps = req->group_steps;
        hello.known_producers = req->known_producers;
        hello.known_trainers = req->known_trainers;
        hello.max_tokens = req->batching.max_tokens;
        hello.buckets = req->batching.buckets;
        hello.pack = req->batching.pack;
        hello.pack_whole = req->batching.pack_whole;
        mix_to_pb(&req->mix, &hello, mix_pools, mix_at_weights);
        hello.n_trained = (size_t)req->n_trained * 3;
        hello.trained = (uint64_t *)req->trained;
        hello.label_classes = req->labels.n_classes;
        if (req->labels.n_listed > 0) {
            if ((label_names = wire_label_name_ptrs(&req->labels)) == NULL)
                return STOKER_NOMEM;
            hello.n_label_names = req->labels.n_listed;
            hello.label_names = label_names;
            hello.n_label_files = req->labels.n_listed;
            hello.label_files = req->labels.files;
        }
        if (req->has_schema) {
            wire_schema_to_pb(&req->schema, &spb);
            hello.schema = &spb.schema;
        }
        r.hello = &hello;
        break;
    case STOKER_PUSH:
        stoker__push__init(&push);
        push.first_seq = req->first_seq;
        wire_chunk_to_pb(&(blob_source){.chunk = &req->chunk}, &cpb);
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
        if (req->job[0] != '\0') { // a trainer's report names its job (docs/sharing.md)
            stoker__hello__init(&hello);
            hello.job = (char *)req->job;
            r.hello = &hello;
        }
        break;
    case STOKER_MIX:
        stoker__hello__init(&hello);
        mix_to_pb(&req->mix, &hello, mix_pools, mix_at_weights);
        r.hello = &hello;
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
    int rv = out != NULL ? wire_pack_into_msg(&r.base, src, out)
                         : wire_pack_into_pieces(&r.base, src, pieces);
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
    if (wire_frame_header(body, len, &pb, &pb_len, err, err_len) != STOKER_OK)
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
        if ((rv = wire_copy_string(req->name, sizeof(req->name), r->hello->name, "hello: name", err,
                                   err_len)) != STOKER_OK ||
            (rv = wire_copy_string(req->token, sizeof(req->token), r->hello->token, "hello: token",
                                   err, err_len)) != STOKER_OK ||
            (rv = wire_copy_string(req->pool, sizeof(req->pool), r->hello->pool, "hello: pool", err,
                                   err_len)) != STOKER_OK ||
            (rv = wire_copy_string(req->group, sizeof(req->group), r->hello->group, "hello: group",
                                   err, err_len)) != STOKER_OK ||
            (rv = wire_copy_string(req->job, sizeof(req->job), r->hello->job, "hello: job", err,
                                   err_len)) != STOKER_OK)
            break;
        req->rank = r->hello->rank;
        req->world = r->hello->world;
        req->group_batch = r->hello->batch;
        req->group_steps = r->hello->group_steps;
        req->known_producers = r->hello->known_producers;
        req->known_trainers = r->hello->known_trainers;
        req->batching = (stoker_batching){.max_tokens = r->hello->max_tokens,
                                          .buckets = r->hello->buckets,
                                          .pack = r->hello->pack,
                                          .pack_whole = r->hello->pack_whole};
        if ((rv = mix_from_pb(r->hello, &req->mix, err, err_len)) != STOKER_OK)
            break;
        if (r->hello->n_trained % 3 != 0 || r->hello->n_trained / 3 > STOKER_HELLO_TRAINED_MAX) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "hello: %zu trained values, a multiple of 3 up to %d triples",
                               r->hello->n_trained, STOKER_HELLO_TRAINED_MAX);
            break;
        }
        req->n_trained = (uint32_t)(r->hello->n_trained / 3);
        req->trained = r->hello->trained;
        if (r->hello->schema != NULL) {
            rv = wire_schema_from_pb(r->hello->schema, &req->schema, err, err_len);
            req->has_schema = rv == STOKER_OK;
        }
        if (rv == STOKER_OK && r->hello->label_classes > 0)
            rv = wire_labels_from_pb(&req->labels, r->hello->label_classes, r->hello->n_label_names,
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
            rv = wire_chunk_from_pb_at(r->push->chunk, owner, pb_end, aligned, &req->chunk,
                                       &req->n_data, req->data_len, err, err_len);
            has_chunk = 1;
        } else if (r->push->n_pool_offsets != r->push->chunk->n_sizes) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "push by reference names %zu offsets for %zu fields",
                               r->push->n_pool_offsets, r->push->chunk->n_sizes);
        } else {
            // By reference: only the sizes here; the broker resolves the offsets.
            rv = wire_sizes_only_from_pb(r->push->chunk, &req->chunk, &req->n_data, req->data_len,
                                         err, err_len);
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
        if (r->hello != NULL)
            rv = wire_copy_string(req->job, sizeof(req->job), r->hello->job, "heartbeat: job", err,
                                  err_len);
        break;
    case STOKER__METHOD__MIX:
        if (r->hello == NULL) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "mix request without its body");
            break;
        }
        rv = mix_from_pb(r->hello, &req->mix, err, err_len);
        if (rv == STOKER_OK && req->mix.n == 0)
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "mix request naming no pool");
        break;
    case STOKER__METHOD__SCALED:
        if (r->scaled == NULL) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID, "scaled request without its body");
            break;
        }
        req->scaled_from = r->scaled->from;
        req->scaled_to = r->scaled->to;
        if ((rv = wire_copy_string(req->pool, sizeof(req->pool), r->scaled->pool, "scaled: pool",
                                   err, err_len)) != STOKER_OK ||
            (rv = wire_copy_string(req->why, sizeof(req->why), r->scaled->why, "scaled: why", err,
                                   err_len)) != STOKER_OK)
            break;
        rv = wire_copy_string(req->engine, sizeof(req->engine), r->scaled->engine, "scaled: engine",
                              err, err_len);
        break;
    case STOKER__METHOD__STATUS:
    case STOKER__METHOD__SHARD:
        break;
    default:
        rv = stoker_errorf(err, err_len, STOKER_INVALID, "unknown method %d", (int)r->method);
        break;
    }
    if (rv == STOKER_OK && !has_chunk)
        rv = wire_no_trailing(len, pb_end, err, err_len);
    if (rv != STOKER_OK) {
        stoker_request_free(req); // leaves msg to the caller
        return rv;
    }
    wire_keep_msg(owner, msg);
    *out = req;
    return STOKER_OK;
}

int
stoker_wire_decode_request(const void *buf, size_t len, stoker_request **out, char *err,
                           size_t err_len)
{
    nng_msg *msg = NULL;
    int rv = wire_copy_to_msg(buf, len, &msg);
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
    wire_owner_free(req->owner);
    stoker_labels_fini(&req->labels);
    free(req);
}
