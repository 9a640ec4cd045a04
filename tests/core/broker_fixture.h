// The broker state machine (server/broker.c) driven directly, for test_broker.c and test_group.c:
// requests are handed to broker_handle as the transport would, tokens are fake (1, 2, 3...), time
// is a number the test advances, every reply is decoded and kept by token, and after every step
// the accounting identity produced == acknowledged + queued + in_flight is checked. Names start
// with bf_ (broker fixture) as helpers.h's start with h_. This file does not choose the broker's
// configuration (each test passes its own to bf_create, or makes bf_broker itself) nor own the
// suite's setup, and it does not build requests (helpers.h does).
#ifndef TESTS_CORE_BROKER_FIXTURE_H
#define TESTS_CORE_BROKER_FIXTURE_H

#include <stdint.h>

#include "broker.h"
#include "stoker/wire.h"

// The broker under test (made by the test, destroyed by bf_fini) and the time it lives at.
extern broker *bf_broker;
extern uint64_t bf_now_ms;

// Call from a suite's .init before making bf_broker: tokens start at 1, no replies are kept.
void bf_init(void);
// Makes bf_broker from cfg at time 1000 ms (bf_now_ms); fails the test if it cannot.
void bf_create(const broker_config *cfg);
// Call from a suite's .fini: destroys bf_broker (its goodbyes are dropped) and frees every kept
// reply.
void bf_fini(void);

// Frees every reply kept so far (their tokens are no longer answered): for a test of many steps.
void bf_forget(void);
// Fails the test unless produced == acknowledged + queued + in_flight; after names the step.
void bf_check_identity(const char *after);
// Decodes everything in out (fails the test on a reply that cannot be encoded or decoded), keeps
// it by token and finishes out.
void bf_collect(broker_outbox *out);
// Hands req (taken over) to the broker on pipe; returns the token its reply will carry.
uintptr_t bf_handle(uint32_t pipe, stoker_request *req);
// Advances the time by advance_ms and lets the broker act on it.
void bf_tick(uint64_t advance_ms);
// Tells the broker pipe closed.
void bf_pipe_closed(uint32_t pipe);
// The reply for token (owned by the fixture until bf_fini), or NULL if not answered yet.
stoker_reply *bf_reply(uintptr_t token);
// The reply for token, which must exist, with its code.
stoker_reply *bf_answered(uintptr_t token, int code);

#endif
