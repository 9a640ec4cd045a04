// The broker state-machine fixture (see broker_fixture.h): the broker under test, its clock, the
// fake tokens and the decoded replies. Requests and examples are helpers.c's.
#include "broker_fixture.h"

#include <stddef.h>

#include <criterion/criterion.h>
#include <nng/nng.h>

#include "stoker/error.h"

#define MAX_REPLIES 256

broker *bf_broker;
uint64_t bf_now_ms;

static uintptr_t next_token;
static struct {
    uintptr_t token;
    stoker_reply *rep;
} replies[MAX_REPLIES];
static size_t n_replies;

void
bf_init(void)
{
    next_token = 1;
    n_replies = 0;
}

void
bf_create(const broker_config *cfg)
{
    bf_now_ms = 1000;
    bf_broker = broker_create(cfg, bf_now_ms);
    cr_assert_not_null(bf_broker);
}

void
bf_fini(void)
{
    broker_outbox out = {0};
    broker_destroy(bf_broker, &out);
    broker_outbox_fini(&out);
    bf_broker = NULL;
    for (size_t i = 0; i < n_replies; i++)
        stoker_reply_free(replies[i].rep);
    n_replies = 0;
}

void
bf_forget(void)
{
    for (size_t i = 0; i < n_replies; i++)
        stoker_reply_free(replies[i].rep);
    n_replies = 0;
}

void
bf_check_identity(const char *after)
{
    stoker_counters c;
    broker_counters(bf_broker, &c);
    cr_assert_eq(c.produced, c.acknowledged + c.queued + c.in_flight + c.released,
                 "after %s: produced %llu != acknowledged %llu + queued %llu + in_flight %llu + "
                 "released %llu",
                 after, (unsigned long long)c.produced, (unsigned long long)c.acknowledged,
                 (unsigned long long)c.queued, (unsigned long long)c.in_flight,
                 (unsigned long long)c.released);
}

void
bf_collect(broker_outbox *out)
{
    for (size_t i = 0; i < out->n; i++) {
        cr_assert_not_null(out->items[i].msg, "the broker could not encode a reply");
        cr_assert_lt(n_replies, MAX_REPLIES);
        stoker_reply *rep = NULL;
        char err[256];
        nng_msg *msg = out->items[i].msg;
        cr_assert_eq(
            stoker_wire_decode_reply(nng_msg_body(msg), nng_msg_len(msg), &rep, err, sizeof(err)),
            STOKER_OK, "undecodable reply: %s", err);
        replies[n_replies].token = (uintptr_t)out->items[i].token;
        replies[n_replies].rep = rep;
        n_replies++;
    }
    broker_outbox_fini(out);
}

uintptr_t
bf_handle(uint32_t pipe, stoker_request *req)
{
    uintptr_t token = next_token++;
    broker_outbox out = {0};
    broker_handle(bf_broker, (void *)token, pipe, req, bf_now_ms, &out);
    bf_collect(&out);
    bf_check_identity("a request");
    return token;
}

void
bf_tick(uint64_t advance_ms)
{
    bf_now_ms += advance_ms;
    broker_outbox out = {0};
    broker_tick(bf_broker, bf_now_ms, &out);
    bf_collect(&out);
    bf_check_identity("a tick");
}

void
bf_pipe_closed(uint32_t pipe)
{
    broker_outbox out = {0};
    broker_pipe_closed(bf_broker, pipe, bf_now_ms, &out);
    bf_collect(&out);
    bf_check_identity("a closed pipe");
}

stoker_reply *
bf_reply(uintptr_t token)
{
    for (size_t i = 0; i < n_replies; i++) {
        if (replies[i].token == token)
            return replies[i].rep;
    }
    return NULL;
}

stoker_reply *
bf_answered(uintptr_t token, int code)
{
    stoker_reply *rep = bf_reply(token);
    cr_assert_not_null(rep, "request %lu was not answered", (unsigned long)token);
    cr_assert_eq(rep->code, code, "request %lu answered %s (%s), expected %s", (unsigned long)token,
                 stoker_errname(rep->code), rep->message, stoker_errname(code));
    return rep;
}
