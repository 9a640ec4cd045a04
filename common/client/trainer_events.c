// The trainer client's events and what every reply carries besides its batch (trainer_impl.h):
// events are de-duplicated (replies to prefetched pulls overtake each other and may repeat
// one), then queued for stoker_trainer_client_poll_event or handed to opts.on_event.
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
