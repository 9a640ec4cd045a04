// A dataset's producer (producer_impl.h): its size and fingerprint said in hello, pushes that
// carry their items, and the shards of items the broker hands out (asked ahead on the
// generating thread on a context of their own, or on the pushing thread's).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer_impl.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

void
stoker_producer_client_set_dataset(stoker_producer_client *pc, uint64_t n_items,
                                   uint64_t fingerprint)
{
    pc->dataset_size = n_items;
    pc->dataset_fingerprint = fingerprint;
}

int
stoker_producer_client_push_items(stoker_producer_client *pc, const stoker_chunk *chunk,
                                  uint64_t first_seq, const uint64_t *items, uint64_t shard)
{
    pc->push_items = items;
    pc->push_shard = shard;
    int rv = stoker_producer_client_push(pc, chunk, first_seq);
    pc->push_items = NULL;
    pc->push_shard = 0;
    return rv;
}

// Copies a SHARD reply's items (at most cap), seed and id to the caller.
static void
take_shard(const stoker_reply *rep, uint64_t *items, uint32_t cap, stoker_shard *out)
{
    uint32_t got = rep->n_items < cap ? rep->n_items : cap;
    memcpy(items, rep->items, got * sizeof(*items));
    out->n = got;
    out->seed = rep->dataset_seed;
    out->id = rep->shard;
}

int
stoker_producer_client_shard_ahead(stoker_producer_client *pc, uint64_t *items, uint32_t cap,
                                   stoker_shard *out)
{
    if (producer_stopped(pc))
        return STOKER_INTERRUPTED;
    if (!producer_known(pc))
        return STOKER_UNKNOWN_PEER; // the pusher's hello comes first
    stoker_request req = {.method = STOKER_SHARD, .session = pc->opts.session};
    stoker_reply *rep = NULL;
    char err[256];
    conn_stop stop = {.flag = pc->opts.stop, .grace_ms = STOP_GRACE_MS}; // not the pusher's
    session_sent(&pc->session);
    int rv = conn_call_until(pc->shard_ctx, &req, pc->opts.request_timeout_ms, &stop, &rep, err,
                             sizeof(err));
    if (rv != STOKER_OK) {
        stoker_debug("producer '%s': shard asked ahead: %s", pc->name, err);
        return rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
    }
    rv = rep->code;
    if (rv == STOKER_OK)
        take_shard(rep, items, cap, out);
    else
        stoker_debug("producer '%s': shard asked ahead: %s", pc->name, rep->message);
    stoker_reply_free(rep);
    return rv;
}

int
stoker_producer_client_shard(stoker_producer_client *pc, uint64_t *items, uint32_t cap,
                             stoker_shard *out)
{
    uint32_t delay = 10;
    for (;;) {
        if (producer_stopped(pc))
            return STOKER_INTERRUPTED;
        int rv = producer_known(pc) ? STOKER_OK : producer_hello_once(pc, &pc->stop, UINT64_MAX);
        if (rv == STOKER_OK) {
            stoker_request req = {.method = STOKER_SHARD, .session = pc->opts.session};
            stoker_reply *rep = NULL;
            char err[256];
            session_sent(&pc->session);
            rv = conn_call_until(pc->push_ctx, &req, pc->opts.request_timeout_ms, &pc->stop, &rep,
                                 err, sizeof(err));
            if (rv != STOKER_OK) {
                conn_copy_str(pc->error, sizeof(pc->error), err);
                rv = rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
            } else {
                session_answered(&pc->session);
                rv = rep->code;
                conn_copy_str(pc->error, sizeof(pc->error), rep->message);
                if (rv == STOKER_OK)
                    take_shard(rep, items, cap, out);
                stoker_reply_free(rep);
                if (rv == STOKER_OK || rv == STOKER_RETRY || rv == STOKER_END_OF_DATA)
                    return rv;
                if (rv == STOKER_UNKNOWN_PEER)
                    session_forget(&pc->session);
            }
        }
        if (rv == STOKER_INTERRUPTED || !producer_transient(rv))
            return rv;
        if (rv == STOKER_CONNECTION || rv == STOKER_TIMEOUT) {
            session_forget(&pc->session);
            if (producer_keep_waiting(pc) != STOKER_OK)
                return STOKER_CONNECTION;
        }
        producer_backoff(pc, &delay);
    }
}
