// The trainer client's events and what every reply carries besides its batch (trainer_impl.h):
// events are de-duplicated (replies to prefetched pulls overtake each other and may repeat
// one), then queued for stoker_trainer_client_poll_event or handed to opts.on_event.
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "stoker/log.h"
#include "trainer_impl.h"

// Whether event `index` was seen before; marks it seen.
static int
event_seen(stoker_trainer_client *tc, uint64_t index)
{
    if (index + SEEN_EVENTS <= tc->last_event_index)
        return 1; // older than any reordering of replies can explain
    if (index >= tc->last_event_index + SEEN_EVENTS) {
        memset(tc->seen_events, 0, sizeof(tc->seen_events));
        tc->last_event_index = index;
    }
    while (tc->last_event_index < index) { // the window moves up: forget what leaves it
        uint64_t i = ++tc->last_event_index % SEEN_EVENTS;
        tc->seen_events[i / 64] &= ~(UINT64_C(1) << (i % 64));
    }
    uint64_t i = index % SEEN_EVENTS, bit = UINT64_C(1) << (i % 64);
    if (tc->seen_events[i / 64] & bit)
        return 1;
    tc->seen_events[i / 64] |= bit;
    return 0;
}

static void
push_event(stoker_trainer_client *tc, const stoker_event *e)
{
    if (e->index != 0 && event_seen(tc, e->index))
        return; // already seen
    if (tc->opts.on_event != NULL) {
        tc->opts.on_event(e, tc->opts.on_event_arg);
        return;
    }
    if (tc->ev_len == MAX_EVENTS) {
        stoker_warn("trainer: event queue full, dropping the oldest event");
        tc->ev_head = (tc->ev_head + 1) % MAX_EVENTS;
        tc->ev_len--;
    }
    tc->events[(tc->ev_head + tc->ev_len) % MAX_EVENTS] = *e;
    tc->ev_len++;
}

void
trainer_note_broker(stoker_trainer_client *tc, const stoker_reply *rep)
{
    uint64_t before = atomic_load(&tc->broker_id);
    if (rep->broker_id == 0 || rep->broker_id == before)
        return;
    atomic_store(&tc->broker_id, rep->broker_id);
    if (before == 0)
        return; // the first broker we hear of
    uint32_t n = atomic_fetch_add(&tc->broker_restarts, 1) + 1;
    memset(tc->seen_events, 0, sizeof(tc->seen_events));
    tc->last_event_index = 0;
    stoker_event e = {.kind = STOKER_EVENT_BROKER_RESTARTED};
    snprintf(e.reason, sizeof(e.reason),
             "broker restarted: instance %016llx answered, %016llx before (restart %u); its "
             "epochs and steps start anew",
             (unsigned long long)rep->broker_id, (unsigned long long)before, n);
    stoker_warn("broker-restarted: %s", e.reason);
    push_event(tc, &e);
}

uint32_t
stoker_trainer_client_broker_restarts(const stoker_trainer_client *tc)
{
    return atomic_load(&((stoker_trainer_client *)tc)->broker_restarts);
}

uint64_t
stoker_trainer_client_broker_id(const stoker_trainer_client *tc)
{
    return atomic_load(&((stoker_trainer_client *)tc)->broker_id);
}

void
trainer_take_extras(stoker_trainer_client *tc, const stoker_reply *rep)
{
    for (uint32_t i = 0; i < rep->n_events; i++)
        push_event(tc, &rep->events[i]);
    tc->acks_refused += rep->acks_refused;
    if (rep->has_schema && tc->schema.n_fields == 0)
        tc->schema = rep->schema;
}

int
stoker_trainer_client_poll_event(stoker_trainer_client *tc, stoker_event *out)
{
    if (tc->ev_len == 0)
        return 0;
    *out = tc->events[tc->ev_head];
    tc->ev_head = (tc->ev_head + 1) % MAX_EVENTS;
    tc->ev_len--;
    return 1;
}
