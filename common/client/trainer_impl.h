// Private to the trainer client's files: its state, shared by the rooms it is split into.
// trainer_client.c (create, hello, next, destroy) sits on top and calls the others:
// trainer_prefetch.c (the pulls in flight and their issuer thread), trainer_acks.c (holds,
// acknowledgements, commits), trainer_delivery.c (batches from replies, shared memory) and
// trainer_events.c (events and what every reply carries besides its batch), which call none
// of the rooms above them. The session with the broker is session.h's.
#ifndef STOKER_CLIENT_TRAINER_IMPL_H
#define STOKER_CLIENT_TRAINER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "conn.h"
#include "idset.h"
#include "session.h"
#include "stoker/arena.h"
#include "stoker/trainer_client.h"

#define MAX_PREFETCH 64
#define MAX_EVENTS   1024
#define MAX_ACKS     4096
// Replies to the pulls in flight complete in any order, so events can arrive out of order: the
// client remembers which of the last SEEN_EVENTS indices it saw (MAX_PREFETCH replies of at most
// the broker's 64 events each) instead of only the highest.
#define SEEN_EVENTS 4096
// Acknowledgements wait for the next pull to carry them; while the caller waits this long for a
// batch with every pull parked at the broker (nothing to deliver), they are sent on their own
// instead: the broker may wait for them (a dataset's epoch ends when its last item is
// acknowledged) and a parked pull comes back only after its wait_ms.
#define ACK_LINGER_MS 5
// Pulls whose replies were lost (the request timed out on our side, e.g. after a SIGSTOP, while
// the broker may already have leased a batch for it): their ids ride on the next pull
// (Pull.replaces) until the broker answered one that carried them. Beyond this the oldest are
// forgotten (the broker then gives their leases back when we leave).
#define MAX_LOST (2 * MAX_PREFETCH)

typedef enum slot_state { SLOT_IDLE, SLOT_SENDING, SLOT_RECEIVING, SLOT_DONE } slot_state;

typedef struct slot {
    stoker_trainer_client *tc;
    nng_ctx ctx;
    nng_aio *aio;
    slot_state state;
    int result;       // nng result of the failed step, 0 on success
    int sent;         // the failed pull had reached the socket (the broker may have answered it)
    nng_msg *reply;   // on success
    uint64_t pull_id; // of the request in flight (Pull.id)
    uint32_t n_lost;  // lost pull ids this request carries (Pull.replaces), re-queued if it fails
    uint64_t lost[MAX_LOST];
    uint32_t n_acks;
    uint64_t acks[MAX_ACKS]; // carried by the request in flight, re-queued if it fails
} slot;

struct stoker_trainer_client {
    stoker_trainer_options opts;
    char url[512];
    char name[STOKER_NAME_MAX];
    char token[STOKER_TOKEN_MAX];
    char group[STOKER_NAME_MAX];
    char job[STOKER_NAME_MAX]; // its job (docs/sharing.md); "": the default job
    // The caller's data wait: milliseconds spent in next() so far, and when the
    // current call began (0: none). Pulls, sent by the issuer thread, carry their sum.
    _Atomic uint64_t waited_ms, waiting_since_ms;
    uint64_t group_steps, group_leftover;
    // Batches of a mixture taken so far: the broker numbers them (Reply.group_step), and they
    // reach the caller in that order, as a rank's steps do (trainer_keep_early).
    uint64_t mix_steps;
    // A rank's replies that came before an earlier step's (prefetched pulls complete in any
    // order): kept, decoded, until their step is next, so batches and the events that ride
    // with them (an epoch's end) reach the caller in step order on every rank.
    stoker_reply *early[MAX_PREFETCH];
    uint32_t early_pipe[MAX_PREFETCH]; // the connection each came on
    uint64_t hello_ms;                 // the last hello the broker took
    uint32_t n_early;
    // The socket, hello, heartbeats and the broker's presence (session.h). Its heartbeats go on
    // whatever the caller does (a long evaluation step pulls nothing), so a frozen or dead
    // process stops beating and is dropped.
    session session;
    nng_ctx ctl_ctx; // hello, ack, status
    stoker_schema schema;
    int supply_ended;  // STOKER_NO_PRODUCERS / STOKER_END_OF_DATA, once returned
    atomic_int ending; // the same, seen but not returned while other pulls are in flight
                       // (read by the issuer thread)
    char end_reason[STOKER_MESSAGE_MAX];
    char refusal[STOKER_MESSAGE_MAX]; // the broker's reason for its last refusal (next returns it)
    uint32_t wait_ms;
    uint32_t failures;       // consecutive transport failures, for backoff
    uint64_t next_pull_id;   // under lock
    uint64_t lost[MAX_LOST]; // under lock: see MAX_LOST
    uint32_t n_lost;
    uint32_t claim_wait_ms; // a RETRY hello: its rank's holder is judged within this

    pthread_mutex_t lock;
    pthread_cond_t cond;
    int closing;               // set by destroy: callbacks start no new operation
    pthread_cond_t issue_cond; // wakes the issuer thread
    int issue_requested;       // next() wants the idle slots' pulls sent
    pthread_t issuer;
    int issuer_started;
    slot slots[MAX_PREFETCH];
    uint32_t n_slots;
    uint32_t done[MAX_PREFETCH]; // FIFO of completed slot indices
    uint32_t done_head, done_len;

    uint64_t pending_acks[MAX_ACKS];
    uint32_t n_pending_acks;
    // Leases handed to the caller and not acknowledged yet (under lock), named in
    // the goodbye: the broker counts them as redelivered, the rest it holds for us (prefetched,
    // never handed out) as returned unused. Beyond MAX_ACKS the oldest are forgotten.
    uint64_t held[MAX_ACKS];
    uint32_t n_held;

    stoker_event events[MAX_EVENTS];
    uint32_t ev_head, ev_len;
    uint64_t last_event_index;              // the highest event index seen
    uint64_t seen_events[SEEN_EVENTS / 64]; // bit i % SEEN_EVENTS: event i seen, for the
                                            // indices within SEEN_EVENTS below the highest

    // The broker instance that answered the latest hello (0: none said one), and the restarts
    // noticed: hellos answered by another instance (trainer_events.c trainer_note_broker).
    _Atomic uint64_t broker_id;
    _Atomic uint32_t broker_restarts;

    idset *seen;
    pthread_mutex_t seen_lock; // adds to seen vs its export by the heartbeat thread
    uint64_t duplicates;
    uint64_t acks_refused;

    // Shared memory (stoker/arena.h): the mapping, its socket's name, and its secret (read by
    // the issuer under lock); arena_said: the fallback was logged.
    stoker_arena *arena;
    char arena_socket[108];
    uint64_t arena_secret;
    int arena_said, last_in_arena;
    uint64_t arena_batches;
    uint64_t socket_batches, arena_full_batches; // bytes over the socket; ... while mapped
    // opts.commit: acknowledgements kept until stoker_trainer_client_commit (trainer_acks.c).
    uint64_t *uncommitted;
    uint32_t n_uncommitted, cap_uncommitted;
    int told_commit_wait;                 // the broker's "waiting for a commit" was logged
    char wait_reason[STOKER_MESSAGE_MAX]; // the broker's latest word on why no batch came
};

// --- trainer_events.c ---
// After a hello the broker took: notes its instance; another one than before is a restart,
// counted, its event queued (before any batch of the new broker), and the events seen forgotten
// (the new broker's indices start again from 1). Training thread.
void trainer_note_broker(stoker_trainer_client *tc, const stoker_reply *rep);
// Takes what any reply carries besides its batch: events (queued for poll_event, or given to
// opts.on_event), refused acknowledgements, the schema. Training thread.
void trainer_take_extras(stoker_trainer_client *tc, const stoker_reply *rep);

// --- trainer_delivery.c ---
// After a hello that asked for shared memory: maps the broker's arena if it offered one we do
// not map yet; otherwise says once why batches come over the socket.
void trainer_attach_arena(stoker_trainer_client *tc, const stoker_reply *rep);
// Turns a successful pull reply into a batch (*out, the caller's), dropping examples this client
// trained before. Takes ownership of rep whatever the outcome. STOKER_OK or an error (logged).
int trainer_make_batch(stoker_trainer_client *tc, stoker_reply *rep, stoker_batch **out);

// --- trainer_acks.c --- (each takes tc->lock itself)
// Whether the caller holds lease (handed to it, not yet acknowledged).
int trainer_holds(stoker_trainer_client *tc, uint64_t lease);
// Remembers that lease was handed to the caller (see held).
void trainer_hold(stoker_trainer_client *tc, uint64_t lease);
// Sends the pending acknowledgements on the control context, so that an OK means the broker
// applied them. background: from the pull loop (ACK_LINGER_MS): a failure makes them pending
// again and nothing is logged. STOKER_OK (also when none were pending), the transport error or
// the broker's code.
int trainer_send_acks(stoker_trainer_client *tc, int background);

// --- trainer_prefetch.c ---
// Opens the contexts and aios of opts.prefetch slots. STOKER_OK or an error (slots made so far
// are freed by trainer_prefetch_free).
int trainer_prefetch_open(stoker_trainer_client *tc);
// Starts the issuer thread. STOKER_OK or STOKER_NOMEM.
int trainer_prefetch_start(stoker_trainer_client *tc);
// Stops the issuer thread and the pulls in flight (no callback runs after it); then
// trainer_prefetch_free, after the socket closed, frees the slots.
void trainer_prefetch_stop(stoker_trainer_client *tc);
void trainer_prefetch_free(stoker_trainer_client *tc);
// Asks the issuer thread for a pull on every idle slot (tc->lock held); the number of slots
// busy with a pull, those asked for included.
uint32_t trainer_prefetch_ask(stoker_trainer_client *tc);
// Waits until the pulls asked for are sent (a status request made after them reaches the
// broker after them).
void trainer_wait_issued(stoker_trainer_client *tc);
// Slot s's pull failed (tc->lock held): its acknowledgements and lost pulls go to the next one;
// a pull that reached the socket and timed out is named lost (see MAX_LOST).
void trainer_prefetch_failed(stoker_trainer_client *tc, slot *s);
// Slot s's pull was answered (tc->lock held): the lost pulls it named are settled, except, when
// the broker sent one of their leases again (resent, 0: none), the others.
void trainer_settle_lost(stoker_trainer_client *tc, slot *s, uint64_t resent);
// Keeps rep for later when it is a rank's batch of a step beyond the next one; 1 when kept.
int trainer_keep_early(stoker_trainer_client *tc, stoker_reply *rep, uint32_t pipe);
// The kept reply whose step is next (or the earliest, when every pull came back), or NULL.
stoker_reply *trainer_take_early(stoker_trainer_client *tc, uint32_t *pipe);
// Whether rep is a batch that came on a connection that closed since; frees rep when it is.
int trainer_stale_batch(stoker_trainer_client *tc, stoker_reply *rep, uint32_t pipe);
// Before the goodbye: waits, bounded, until the pulls in flight that carry acknowledgements
// are answered.
void trainer_wait_inflight_acks(stoker_trainer_client *tc);

#endif
