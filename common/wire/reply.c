// The reply codec: a stoker_reply to and from its protobuf Reply (stoker/wire.h), the Status
// snapshot's counters, runs, events, producers and groups included (the other Status pieces are
// status_pb.c's). A batch travels after the protobuf part (frame.h), or as its description only
// when it sits in the arena; a decoded reply points into the message it came in.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "frame.h"
#include "status_pb.h"
#include "stoker/error.h"
#include "stoker/wire.h"

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
    r.batch_examples = rep->batch_examples;
    r.trained_through = rep->trained_through;
    r.peers_producers = rep->peers_producers;
    r.peers_trainers = rep->peers_trainers;
    r.broker_id = rep->broker_id;
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
        wire_schema_to_pb(&rep->schema, &spb);
        r.schema = &spb.schema;
    }
    blob_source blobs = {.chunk = &rep->chunk, .parts = rep->parts, .n_parts = rep->n_parts};
    if (rep->chunk.count > 0) {
        wire_chunk_to_pb(&blobs, &cpb);
        r.chunk = &cpb.chunk;
    }
    if (rep->has_counters) {
        stoker__counters__init(&counters);
        const stoker_counters *s = &rep->counters;
        Stoker__Counters *d = &counters;
        STOKER_COUNTERS(COPY_COUNTER, COPY_COUNTER, COPY_COUNTER)
        r.counters = &counters;
        r.uptime_ms = rep->uptime_ms;
        r.max_bytes = rep->max_bytes;
        r.queue_depth_auto = rep->queue_depth_auto != 0;
        r.queue_limit = (char *)rep->queue_limit;
    }

    // Repeated sub-messages: each an array of pointers to messages, one allocation
    // (wire_pb_repeated), freed at out. rv is STOKER_NOMEM until the message is packed.
    Stoker__Run **runs = wire_pb_repeated(&stoker__run__descriptor, rep->n_runs);
    Stoker__Event **events = wire_pb_repeated(&stoker__event__descriptor, rep->n_events);
    Stoker__ProducerState **prods =
        wire_pb_repeated(&stoker__producer_state__descriptor, rep->n_producers);
    Stoker__GroupState **groups = wire_pb_repeated(&stoker__group_state__descriptor, rep->n_groups);
    if ((runs == NULL && rep->n_runs > 0) || (events == NULL && rep->n_events > 0) ||
        (prods == NULL && rep->n_producers > 0) || (groups == NULL && rep->n_groups > 0) ||
        wire_consumers_to_pb(rep, &r) != STOKER_OK || wire_label_maps_to_pb(rep, &r) != STOKER_OK ||
        wire_pools_to_pb(rep, &r) != STOKER_OK || wire_jobs_to_pb(rep, &r) != STOKER_OK)
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
        d->state = wire_group_state_code(s->state);
        d->end_reason = (char *)s->end_reason;
        d->ended_at_s = s->ended_at_s;
        d->n_rank_steps = d->n_rank_ready = s->world;
        d->rank_steps = (uint64_t *)s->rank_steps;
        d->rank_ready = (uint32_t *)s->rank_ready;
    }
    r.n_groups = rep->n_groups;
    r.groups = groups;
    // A batch in the arena travels as its description only.
    rv = wire_pack_into_msg(&r.base, rep->chunk.count > 0 && !rep->in_arena ? &blobs : NULL, out);
out:
    free(runs);
    free(events);
    free(prods);
    free(groups);
    wire_consumers_pb_free(&r);
    free(r.pools);
    wire_jobs_pb_free(&r);
    wire_label_maps_pb_free(&r);
    return rv;
}

int
stoker_wire_decode_reply_msg(nng_msg *msg, stoker_reply **out, char *err, size_t err_len)
{
    const uint8_t *pb = NULL;
    size_t pb_len = 0;
    if (wire_frame_header(nng_msg_body(msg), nng_msg_len(msg), &pb, &pb_len, err, err_len) !=
        STOKER_OK)
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
    if ((rv = wire_copy_string(rep->message, sizeof(rep->message), r->message, "reply message", err,
                               err_len)) != STOKER_OK)
        goto fail;
    rep->peer_id = r->peer_id;
    rep->next_seq = r->next_seq;
    rep->heartbeat_ms = r->heartbeat_ms;
    rep->intake_port = r->intake_port;
    rep->max_chunk = r->max_chunk;
    rep->acked_through = r->acked_through;
    rep->batch_examples = r->batch_examples;
    rep->trained_through = r->trained_through;
    rep->peers_producers = r->peers_producers;
    rep->peers_trainers = r->peers_trainers;
    rep->broker_id = r->broker_id;
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
        if ((rv = wire_schema_from_pb(r->schema, &rep->schema, err, err_len)) != STOKER_OK)
            goto fail;
        rep->has_schema = 1;
    }
    if ((rv = wire_copy_string(rep->arena_socket, sizeof(rep->arena_socket), r->arena_socket,
                               "reply arena socket", err, err_len)) != STOKER_OK)
        goto fail;
    rep->arena_ticket = r->arena_ticket;
    rep->in_arena = r->in_arena;
    rep->arena_offset = r->arena_offset;
    owner->body = nng_msg_body(msg); // the chunk points into it
    owner->len = nng_msg_len(msg);
    if (r->chunk != NULL && r->in_arena)
        rv = wire_sizes_only_from_pb(r->chunk, &rep->chunk, &rep->n_data, rep->data_len, err,
                                     err_len);
    else
        rv = r->chunk != NULL ? wire_chunk_from_pb(r->chunk, owner, pb_end, &rep->chunk,
                                                   &rep->n_data, rep->data_len, err, err_len)
                              : wire_no_trailing(nng_msg_len(msg), pb_end, err, err_len);
    if (rv == STOKER_OK && r->chunk != NULL && r->in_arena)
        rv = wire_no_trailing(nng_msg_len(msg), pb_end, err, err_len);
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
                              s->kind == STOKER_EVENT_EPOCH_END || s->kind == STOKER_EVENT_SCALED ||
                              s->kind == STOKER_EVENT_JOB_DETACHED ||
                              s->kind == STOKER_EVENT_JOB_REMAKING
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
        STOKER_COUNTERS(COPY_COUNTER, COPY_COUNTER, COPY_COUNTER)
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
            d->state = wire_group_state_name(s->state);
            snprintf(d->end_reason, sizeof(d->end_reason), "%s",
                     s->end_reason != NULL ? s->end_reason : "");
            d->ended_at_s = s->ended_at_s;
            memcpy(d->rank_steps, s->rank_steps, s->world * sizeof(uint64_t));
            memcpy(d->rank_ready, s->rank_ready, s->world * sizeof(uint32_t));
        }
        rep->n_groups = (uint32_t)r->n_groups;
    }
    rep->label_maps_omitted = r->label_maps_omitted;
    if ((rv = wire_label_maps_from_pb(r->label_maps, r->n_label_maps, rep, err, err_len)) !=
        STOKER_OK)
        goto fail;
    if ((rv = wire_consumers_from_pb(r, rep, err, err_len)) != STOKER_OK ||
        (rv = wire_pools_from_pb(r, rep, err, err_len)) != STOKER_OK ||
        (rv = wire_jobs_from_pb(r, rep, err, err_len)) != STOKER_OK)
        goto fail;
    wire_keep_msg(owner, msg);
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
    int rv = wire_copy_to_msg(buf, len, &msg);
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
    wire_owner_free(rep->owner);
    free(rep->runs);
    free(rep->events);
    free(rep->producers);
    free(rep->groups);
    stoker_label_maps_free(rep->label_maps, rep->n_label_maps);
    free(rep->consumers);
    free(rep->pools);
    free(rep->jobs);
    free(rep);
}
