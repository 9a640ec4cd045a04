// See harness.h. Each input gets a new broker (no state leaks between inputs), a preamble of
// valid requests unless the input says otherwise (a producer with four queued examples, a trainer
// holding a lease of two: the fuzzer's pushes, pulls and acks then reach the state machine's deep
// paths instead of stopping at "say hello first"), then the input's records. Replies are
// decoded back (they must always decode: the broker never sends what its clients cannot read)
// and freed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "broker.h"
#include "harness.h"
#include "requests.h"
#include "stoker/error.h"
#include "stoker/log.h"

typedef struct run {
    broker *b;
    uint64_t now_ms;
    uintptr_t next_token;
    int decoded;
} run;

static void
check(run *r, broker_outbox *out)
{
    for (size_t i = 0; i < out->n; i++) {
        nng_msg *msg = out->items[i].msg;
        if (msg == NULL)
            continue;
        stoker_reply *rep = NULL;
        char err[256];
        if (stoker_wire_decode_reply(nng_msg_body(msg), nng_msg_len(msg), &rep, err, sizeof(err)) !=
            STOKER_OK) {
            fprintf(stderr, "fuzz: the broker sent a reply that does not decode: %s\n", err);
            abort();
        }
        stoker_reply_free(rep);
    }
    broker_outbox_fini(out);
    stoker_counters c;
    broker_counters(r->b, &c);
    if (c.produced != c.acknowledged + c.queued + c.in_flight) {
        fprintf(stderr,
                "fuzz: accounting identity broken: produced %llu, acknowledged %llu, queued "
                "%llu, in flight %llu\n",
                (unsigned long long)c.produced, (unsigned long long)c.acknowledged,
                (unsigned long long)c.queued, (unsigned long long)c.in_flight);
        abort();
    }
}

// Decodes len bytes as a request arriving on pipe and hands it to the broker.
static void
deliver(run *r, uint32_t pipe, const void *buf, size_t len)
{
    broker_outbox out = {0};
    stoker_request *req = NULL;
    char err[256];
    void *token = (void *)r->next_token++;
    int rv = stoker_wire_decode_request(buf, len, &req, err, sizeof(err));
    if (rv == STOKER_OK) {
        r->decoded++;
        broker_handle(r->b, token, pipe, req, r->now_ms, &out);
    } else {
        broker_refuse(r->b, token, pipe, rv, err, &out);
    }
    check(r, &out);
}

static void
deliver_msg(run *r, uint32_t pipe, nng_msg *msg)
{
    if (msg == NULL)
        abort(); // the preamble's encoders only fail when out of memory
    deliver(r, pipe, nng_msg_body(msg), nng_msg_len(msg));
    nng_msg_free(msg);
}

static void
preamble(run *r, const char *token)
{
    static const uint64_t none[1];
    deliver_msg(r, 1, fuzz_hello(FUZZ_PRODUCER, STOKER_ROLE_PRODUCER, "p", token, 1));
    deliver_msg(r, 1, fuzz_push(FUZZ_PRODUCER, 0, 4));
    deliver_msg(r, 2, fuzz_hello(FUZZ_TRAINER, STOKER_ROLE_TRAINER, "t", token, 0));
    deliver_msg(r, 2, fuzz_pull(FUZZ_TRAINER, 2, 0, 0, none)); // lease 1: seqs 0, 1
}

static uint16_t
u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

int
fuzz_broker_run(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    stoker_log_init("fuzz", STOKER_LOG_ERROR);
    uint8_t flags = data[0];
    broker_config cfg;
    broker_config_init(&cfg);
    cfg.first_lease_id = 1; // deterministic, so corpus inputs can name leases
    cfg.token = (flags & FUZZ_FLAG_TOKEN) ? FUZZ_TOKEN : NULL;
    if (flags & FUZZ_FLAG_SMALL) {
        cfg.queue_depth = 8;
        cfg.max_bytes = 64;
        cfg.max_producers = 2;
        cfg.max_trainers = 1;
        cfg.max_chunk_examples = 4;
        cfg.max_parked = 4;
    }
    run r = {.now_ms = 1000, .next_token = 1};
    if ((r.b = broker_create(&cfg, r.now_ms)) == NULL)
        return 0;
    if (!(flags & FUZZ_FLAG_NO_PREAMBLE))
        preamble(&r, cfg.token);
    size_t at = 1;
    while (at < size) {
        uint8_t op = data[at++] % 4;
        broker_outbox out = {0};
        if (op == FUZZ_OP_TICK) {
            if (size - at < 2)
                break;
            r.now_ms += u16(data + at);
            at += 2;
            broker_tick(r.b, r.now_ms, &out);
            check(&r, &out);
        } else if (op == FUZZ_OP_CLOSE) {
            if (size - at < 1)
                break;
            broker_pipe_closed(r.b, 1u + data[at++] % 4, r.now_ms, &out);
            check(&r, &out);
        } else {
            if (size - at < 3)
                break;
            uint32_t pipe = 1u + data[at] % 4;
            size_t len = u16(data + at + 1);
            at += 3;
            if (len > size - at)
                len = size - at;
            deliver(&r, pipe, data + at, len);
            at += len;
        }
    }
    // The reports print peer-given names: run them too.
    free(broker_metrics_text(r.b, r.now_ms));
    free(broker_status_json(r.b, r.now_ms));
    broker_outbox out = {0};
    broker_destroy(r.b, &out);
    broker_outbox_fini(&out);
    return r.decoded;
}
