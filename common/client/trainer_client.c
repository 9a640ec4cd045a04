// Trainer client: hello, then `prefetch` pull requests kept in flight on their own contexts, so
// a batch is usually waiting when a training step ends. Acknowledgements ride on the next pull.
// nng completes each pull on its own threads (slot_cb); the training thread takes completed
// slots in completion order under one lock. Sending the next pulls is the issuer thread's job
// (it was a tenth of a millisecond per batch of the training thread's time: encoding and the
// socket write); the training thread only asks for it. Every wait ends at the stall deadline.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "idset.h"
#include "stoker/arena.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"
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
    // The caller's data wait (issue 29): milliseconds spent in next() so far, and when the
    // current call began (0: none). Pulls, sent by the issuer thread, carry their sum.
    _Atomic uint64_t waited_ms, waiting_since_ms;
    uint64_t group_steps, group_leftover;
    // A rank's replies that came before an earlier step's (prefetched pulls complete in any
    // order): kept, decoded, until their step is next, so batches and the events that ride
    // with them (an epoch's end) reach the caller in step order on every rank.
    stoker_reply *early[MAX_PREFETCH];
    uint32_t early_pipe[MAX_PREFETCH]; // the connection each came on
    uint64_t hello_ms;                 // the last hello the broker took
    uint32_t n_early;
    conn conn;
    nng_ctx ctl_ctx; // hello, ack, status
    stoker_schema schema;
    uint32_t id;
    int need_hello;
    int supply_ended;  // STOKER_NO_PRODUCERS / STOKER_END_OF_DATA, once returned
    atomic_int ending; // the same, seen but not returned while other pulls are in flight
                       // (read by the issuer thread)
    char end_reason[STOKER_MESSAGE_MAX];
    char refusal[STOKER_MESSAGE_MAX]; // the broker's reason for its last refusal (next returns it)
    uint32_t wait_ms;
    uint32_t failures;       // consecutive transport failures, for backoff
    _Atomic int away;        // see broker_away
    uint64_t next_pull_id;   // under lock
    uint64_t lost[MAX_LOST]; // under lock: see MAX_LOST
    uint32_t n_lost;

    // Liveness (beat_main): a heartbeat every heartbeat_ms on its own context and thread, so
    // the broker hears from a live trainer whatever its caller does (a long evaluation step
    // pulls nothing); a frozen or dead process stops beating and is dropped.
    nng_ctx beat_ctx;
    pthread_t beat_thread;
    int beat_started;
    _Atomic uint32_t heartbeat_ms; // from the broker's hello reply
    uint32_t claim_wait_ms;        // a RETRY hello: its rank's holder is judged within this
    volatile int beat_stop;        // destroy: abandon a heartbeat in flight (conn_call_until)

    pthread_mutex_t lock;
    pthread_cond_t cond;
    int closing;               // set by destroy: callbacks start no new operation
    pthread_cond_t issue_cond; // wakes the issuer thread
    pthread_cond_t beat_cond;  // wakes the heartbeat thread (destroy)
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
    // opts.commit: acknowledgements kept until stoker_trainer_client_commit (trainer_commit.c).
    uint64_t *uncommitted;
    uint32_t n_uncommitted, cap_uncommitted;
    int told_commit_wait;                 // the broker's "waiting for a commit" was logged
    char wait_reason[STOKER_MESSAGE_MAX]; // the broker's latest word on why no batch came
};

void
stoker_trainer_options_init(stoker_trainer_options *o)
{
    memset(o, 0, sizeof(*o));
    stoker_client_options_init(&o->client);
    o->batch_size = 4;
    o->prefetch = 4;
    o->stall_timeout_ms = 4000;
    const char *shm = getenv("STOKER_SHM");
    o->shm = shm == NULL || strcmp(shm, "0") != 0;
}

static int
stopped(const stoker_trainer_client *tc)
{
    return tc->opts.client.stop != NULL && *tc->opts.client.stop;
}

static void
slot_cb(void *arg)
{
    slot *s = arg;
    stoker_trainer_client *tc = s->tc;
    int rv = nng_aio_result(s->aio);
    pthread_mutex_lock(&tc->lock);
    if (tc->closing) {
        // stoker_trainer_client_destroy is stopping the aios: start nothing new.
        if (s->state == SLOT_SENDING)
            nng_msg_free(nng_aio_get_msg(s->aio));
        else if (rv == 0)
            nng_msg_free(nng_aio_get_msg(s->aio));
        nng_aio_set_msg(s->aio, NULL);
        s->state = SLOT_IDLE;
        pthread_mutex_unlock(&tc->lock);
        return;
    }
    if (s->state == SLOT_SENDING && rv == 0) {
        s->state = SLOT_RECEIVING;
        pthread_mutex_unlock(&tc->lock);
        nng_ctx_recv(s->ctx, s->aio);
        return;
    }
    if (s->state == SLOT_SENDING)
        nng_msg_free(nng_aio_get_msg(s->aio));
    s->sent = s->state == SLOT_RECEIVING;
    s->result = rv;
    s->reply = rv == 0 ? nng_aio_get_msg(s->aio) : NULL;
    nng_aio_set_msg(s->aio, NULL);
    s->state = SLOT_DONE;
    tc->done[(tc->done_head + tc->done_len) % MAX_PREFETCH] = (uint32_t)(s - tc->slots);
    tc->done_len++;
    pthread_cond_signal(&tc->cond);
    pthread_mutex_unlock(&tc->lock);
}

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

static void
take_reply_extras(stoker_trainer_client *tc, const stoker_reply *rep)
{
    for (uint32_t i = 0; i < rep->n_events; i++)
        push_event(tc, &rep->events[i]);
    tc->acks_refused += rep->acks_refused;
    if (rep->has_schema && tc->schema.n_fields == 0)
        tc->schema = rep->schema;
}

// After a hello that asked for shared memory: maps the broker's arena if it offered one we do not
// map yet (a new broker has a new one); otherwise says once why batches come over the socket.
static void
attach_arena(stoker_trainer_client *tc, const stoker_reply *rep)
{
    char why[384];
    if (rep->arena_socket[0] == '\0') {
        // A broker without an arena (restarted so): the old one's secret means nothing there.
        pthread_mutex_lock(&tc->lock);
        stoker_arena *old = tc->arena;
        tc->arena = NULL;
        tc->arena_secret = 0;
        pthread_mutex_unlock(&tc->lock);
        stoker_arena_unref(old); // batches still in it keep it mapped
        tc->arena_socket[0] = '\0';
        if (!tc->arena_said++)
            stoker_info("shm-fallback: the broker offers no shared memory (remote, or started "
                        "with --shm-bytes 0): batches come over the socket");
        return;
    }
    if (tc->arena != NULL && strcmp(tc->arena_socket, rep->arena_socket) == 0)
        return;
    stoker_arena *a = NULL;
    int rv = stoker_arena_attach(rep->arena_socket, rep->arena_ticket,
                                 tc->opts.client.request_timeout_ms, &a, why, sizeof(why));
    if (rv != STOKER_OK) {
        if (!tc->arena_said++)
            stoker_info("shm-fallback: %s: batches come over the socket", why);
        return;
    }
    if (tc->opts.on_arena != NULL) { // e.g. CUDA pinning (see the option)
        tc->opts.on_arena(stoker_arena_base(a), stoker_arena_bytes(a), 1, tc->opts.on_arena_arg);
        stoker_arena_on_unmap(a, tc->opts.on_arena, tc->opts.on_arena_arg);
    }
    pthread_mutex_lock(&tc->lock);
    stoker_arena *old = tc->arena;
    tc->arena = a;
    tc->arena_secret = stoker_arena_secret(a);
    pthread_mutex_unlock(&tc->lock);
    stoker_arena_unref(old); // batches still in it keep it mapped
    snprintf(tc->arena_socket, sizeof(tc->arena_socket), "%s", rep->arena_socket);
    stoker_info("shm: batches come through the broker's shared memory (%llu MiB mapped "
                "read-only)",
                (unsigned long long)(stoker_arena_bytes(a) >> 20));
}

// Says hello on the control context, waiting at most timeout_ms and returning soon after the
// stop flag is set (STOKER_INTERRUPTED). Returns the broker's code or a transport error.
static int
hello_within(stoker_trainer_client *tc, uint32_t timeout_ms, char *err, size_t err_len)
{
    stoker_request req = {
        .method = STOKER_HELLO,
        .session = tc->opts.client.session,
        .role = STOKER_ROLE_TRAINER,
        .commit = tc->opts.commit,
    };
    conn_copy_str(req.name, sizeof(req.name), tc->name);
    conn_copy_str(req.token, sizeof(req.token), tc->token);
    req.want_arena = tc->opts.shm;
    req.pid = (uint32_t)getpid(); // /status names each consumer's process
    conn_copy_str(req.group, sizeof(req.group), tc->group);
    req.rank = tc->opts.rank;
    req.world = tc->opts.world;
    req.group_batch = tc->group[0] != '\0' ? tc->opts.batch_size : 0;
    req.group_steps = tc->group[0] != '\0' ? tc->group_steps : 0;
    req.batching = tc->opts.batching;
    // What this trainer trained, for a broker that restarted: it counts it trained, so that the
    // producers' re-pushed examples reach no other trainer (issue 26). A broker that knew us
    // already learns nothing new from it.
    uint64_t *trained = malloc(3 * sizeof(uint64_t) * STOKER_HELLO_TRAINED_MAX);
    if (trained != NULL) {
        pthread_mutex_lock(&tc->seen_lock);
        req.n_trained = idset_export(tc->seen, trained, STOKER_HELLO_TRAINED_MAX);
        pthread_mutex_unlock(&tc->seen_lock);
        req.trained = trained;
    }
    stoker_reply *rep = NULL;
    // A TLS failure of the connection ends the wait at once (conn_failure), as STOKER_TLS.
    conn_stop stop = {.flag = tc->opts.client.stop, .conn = &tc->conn};
    int rv = conn_call_until(tc->ctl_ctx, &req, timeout_ms, &stop, &rep, err, err_len);
    free(trained);
    if (rv != STOKER_OK)
        return rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
    rv = rep->code;
    if (rv == STOKER_OK) {
        tc->id = rep->peer_id;
        tc->need_hello = 0;
        tc->hello_ms = stoker_now_ms();
        tc->away = 0;
        if (rep->heartbeat_ms > 0)
            tc->heartbeat_ms = rep->heartbeat_ms;
        take_reply_extras(tc, rep);
        if (tc->opts.shm)
            attach_arena(tc, rep);
    } else {
        snprintf(err, err_len, "%s", rep->message);
        if (rv == STOKER_RETRY) // a group's rank held by a silent trainer: the broker judges it
            tc->claim_wait_ms = 2 * rep->heartbeat_ms;
    }
    stoker_reply_free(rep);
    return rv;
}

// A broker that died and stays away: the last pull failed in transport (away, cleared by the
// next reply or hello) and the socket has no connection. Requests then wait at most
// AWAY_CALL_MS: there is nobody to answer them, and a stopping trainer's flush, status and
// goodbye would otherwise add their request timeouts to its stall or time goal.
#define AWAY_CALL_MS 200

static int
broker_away(stoker_trainer_client *tc)
{
    return tc->away && tc->conn.pipes == 0;
}

// The timeout of a request on the control context: the request timeout, or AWAY_CALL_MS.
static uint32_t
call_timeout(stoker_trainer_client *tc)
{
    uint32_t t = tc->opts.client.request_timeout_ms;
    return broker_away(tc) && t > AWAY_CALL_MS ? AWAY_CALL_MS : t;
}

static int
hello(stoker_trainer_client *tc, char *err, size_t err_len)
{
    return hello_within(tc, tc->opts.client.request_timeout_ms, err, err_len);
}

static void *issuer_main(void *arg);

// How often the heartbeat thread looks whether the socket connected again (beat_wait).
#define BEAT_LOOK_MS 50

// A broker that does not know us (it restarted; the pulls have not said hello yet, maybe
// because the caller pulls nothing now): one heartbeat that tells it what we trained, as a
// hello would, so that no other trainer gets those examples again (issue 26).
static void
report_trained(stoker_trainer_client *tc, uint32_t timeout, conn_stop *stop)
{
    uint64_t *trained = malloc(3 * sizeof(uint64_t) * STOKER_HELLO_TRAINED_MAX);
    if (trained == NULL)
        return;
    stoker_request req = {.method = STOKER_HEARTBEAT, .session = tc->opts.client.session};
    pthread_mutex_lock(&tc->seen_lock);
    req.n_trained = idset_export(tc->seen, trained, STOKER_HELLO_TRAINED_MAX);
    pthread_mutex_unlock(&tc->seen_lock);
    req.trained = trained;
    stoker_reply *rep = NULL;
    char err[256];
    if (req.n_trained > 0 &&
        conn_call_until(tc->beat_ctx, &req, timeout, stop, &rep, err, sizeof(err)) == STOKER_OK)
        stoker_reply_free(rep);
    free(trained);
}

// Waits (tc->lock held) up to every ms, or until destroy, or until the socket connected again
// after it had lost its connection (*lost: the last loss seen): a broker that restarted then
// hears from us at once, not a heartbeat period later, so our report of what we trained
// (report_trained) reaches it within its returning window (issue 26).
static void
beat_wait(stoker_trainer_client *tc, uint32_t every, uint64_t *lost)
{
    uint64_t deadline = stoker_now_ms() + every;
    while (!tc->beat_stop) {
        uint64_t now = stoker_now_ms();
        if (now >= deadline)
            return;
        uint64_t at = atomic_load(&tc->conn.pipeless_since_ms);
        if (at != *lost && atomic_load(&tc->conn.pipes) > 0) {
            *lost = at;
            return;
        }
        uint32_t nap = deadline - now < BEAT_LOOK_MS ? (uint32_t)(deadline - now) : BEAT_LOOK_MS;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)nap * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&tc->beat_cond, &tc->lock, &ts);
    }
}

// The heartbeat thread (see heartbeat_ms): from create to destroy. A heartbeat that fails is
// not retried early (the pulls find out what is wrong and say hello again), but one goes out as
// soon as the socket is connected again after a loss (beat_wait).
static void *
beat_main(void *arg)
{
    stoker_trainer_client *tc = arg;
    pthread_mutex_lock(&tc->lock);
    uint64_t lost = atomic_load(&tc->conn.pipeless_since_ms);
    while (!tc->beat_stop) {
        uint32_t every = tc->heartbeat_ms > 0 ? tc->heartbeat_ms : 1000;
        beat_wait(tc, every, &lost);
        if (tc->beat_stop)
            break;
        pthread_mutex_unlock(&tc->lock);
        stoker_request req = {.method = STOKER_HEARTBEAT, .session = tc->opts.client.session};
        stoker_reply *rep = NULL;
        char err[256];
        conn_stop stop = {.flag = &tc->beat_stop};
        uint32_t timeout =
            tc->opts.client.request_timeout_ms < every ? tc->opts.client.request_timeout_ms : every;
        if (conn_call_until(tc->beat_ctx, &req, timeout, &stop, &rep, err, sizeof(err)) ==
            STOKER_OK) {
            if (rep->code != STOKER_OK)
                stoker_debug("trainer: heartbeat refused: %s", rep->message);
            int unknown = rep->code == STOKER_UNKNOWN_PEER;
            stoker_reply_free(rep);
            if (unknown)
                report_trained(tc, timeout, &stop);
        } else {
            stoker_debug("trainer: heartbeat: %s", err);
        }
        pthread_mutex_lock(&tc->lock);
    }
    pthread_mutex_unlock(&tc->lock);
    return NULL;
}

int
stoker_trainer_client_create(const stoker_trainer_options *opts, stoker_trainer_client **out,
                             char *err, size_t err_len)
{
    int rv;
    if (opts->client.url == NULL || opts->batch_size == 0 || opts->prefetch == 0 ||
        opts->prefetch > MAX_PREFETCH || opts->stall_timeout_ms == 0) {
        snprintf(err, err_len,
                 "trainer options: need a URL, batch size > 0, prefetch 1..%d and "
                 "a stall timeout",
                 MAX_PREFETCH);
        return STOKER_INVALID;
    }
    if ((rv = stoker_batching_check(&opts->batching, NULL, opts->batch_size, err, err_len)) !=
        STOKER_OK)
        return rv;
    if (opts->group != NULL && (opts->group[0] == '\0' || strlen(opts->group) >= STOKER_NAME_MAX ||
                                opts->rank >= opts->world))
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "trainer options: group '%s' needs a name of 1..%d bytes and a rank "
                             "below the world size (rank %u, world %u)",
                             opts->group, STOKER_NAME_MAX - 1, opts->rank, opts->world);
    stoker_trainer_client *tc = calloc(1, sizeof(*tc));
    if (tc == NULL)
        return STOKER_NOMEM;
    tc->opts = *opts;
    conn_copy_str(tc->url, sizeof(tc->url), opts->client.url);
    conn_copy_str(tc->name, sizeof(tc->name),
                  opts->client.name != NULL ? opts->client.name : "trainer");
    conn_copy_str(tc->token, sizeof(tc->token), opts->client.token);
    tc->opts.client.url = tc->url;
    tc->opts.client.name = tc->name;
    tc->opts.client.token = tc->token;
    conn_copy_str(tc->group, sizeof(tc->group), opts->group);
    tc->group_steps = opts->group != NULL ? opts->group_resume_step : 0;
    tc->opts.group = tc->group;
    if (tc->opts.client.session == 0)
        tc->opts.client.session = stoker_random_u64();
    // A parked pull comes back empty after wait_ms, which keeps the broker aware we are alive.
    tc->wait_ms = opts->stall_timeout_ms / 4 < 1000 ? opts->stall_timeout_ms / 4 : 1000;
    if (tc->wait_ms < 10)
        tc->wait_ms = 10;
    pthread_mutex_init(&tc->lock, NULL);
    pthread_mutex_init(&tc->seen_lock, NULL);
    pthread_cond_init(&tc->cond, NULL);
    pthread_cond_init(&tc->issue_cond, NULL);
    pthread_cond_init(&tc->beat_cond, NULL);
    if ((tc->seen = idset_create()) == NULL) {
        rv = STOKER_NOMEM;
        goto fail_seen;
    }
    if ((rv = conn_open(&tc->conn, tc->url, opts->client.max_message_bytes,
                        opts->client.reconnect_max_ms, &opts->client.tls, err, err_len)) !=
        STOKER_OK)
        goto fail_conn;
    if ((rv = nng_ctx_open(&tc->ctl_ctx, tc->conn.sock)) != 0 ||
        (rv = nng_ctx_open(&tc->beat_ctx, tc->conn.sock)) != 0) {
        rv = stoker_err_from_nng(rv);
        goto fail_slots;
    }
    tc->n_slots = opts->prefetch;
    for (uint32_t i = 0; i < tc->n_slots; i++) {
        slot *s = &tc->slots[i];
        s->tc = tc;
        if ((rv = nng_ctx_open(&s->ctx, tc->conn.sock)) != 0 ||
            (rv = nng_aio_alloc(&s->aio, slot_cb, s)) != 0) {
            rv = stoker_err_from_nng(rv);
            goto fail_slots;
        }
        nng_aio_set_timeout(s->aio, (nng_duration)(tc->wait_ms + opts->client.request_timeout_ms));
    }

    // What a resumed trainer trained before (its checkpoint's pending identities): in the
    // identity filter before the first hello, whose report of what it trained then names them.
    for (uint32_t i = 0; i < opts->n_trained_runs; i++) {
        const uint64_t *r = &opts->trained_runs[3 * i];
        if (idset_add(tc->seen, r[0], r[1], r[2]) == UINT64_MAX) {
            rv = stoker_errorf(err, err_len, STOKER_NOMEM, "trainer: out of memory");
            goto fail_slots;
        }
    }
    // Hello, retried until the broker answers; then wait (bounded by the stall timeout) until the
    // broker knows the schema, which it learns from its first producer unless given --schema.
    uint64_t give_up = stoker_now_ms() + opts->client.give_up_ms;
    uint32_t delay = 10;
    int claimed = 0;
    for (;;) {
        if (stopped(tc)) {
            rv = STOKER_INTERRUPTED;
            goto fail_slots;
        }
        rv = hello(tc, err, err_len);
        if (rv == STOKER_OK)
            break;
        if (rv == STOKER_RETRY && !claimed) {
            // Our group rank is held by a trainer the broker has not heard for a while (an old
            // rank that hangs): it takes it over or refuses us within claim_wait_ms (issue 26).
            stoker_warn("trainer: waiting at hello: %s", err);
            claimed = 1;
            give_up += tc->claim_wait_ms;
        }
        if (rv != STOKER_TIMEOUT && rv != STOKER_CONNECTION && rv != STOKER_RETRY)
            goto fail_slots;
        if (stoker_now_ms() >= give_up) {
            // Handshakes that failed for a TLS reason found meanwhile are the answer.
            if ((rv = conn_failure(&tc->conn, err, err_len)) == STOKER_TLS)
                goto fail_slots;
            char why[STOKER_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", err);
            if (rv == STOKER_RETRY) {
                snprintf(err, err_len, "still waiting at hello: %s", why);
                rv = STOKER_TIMEOUT;
                goto fail_slots;
            }
            char unknown[320];
            if (conn_unknown_host(tc->url, unknown, sizeof(unknown)))
                snprintf(err, err_len,
                         "%s in %s: no broker answered within %u ms; check the "
                         "host name",
                         unknown, tc->url, opts->client.give_up_ms);
            else
                snprintf(err, err_len, "no broker answered at %s within %u ms (%s)", tc->url,
                         opts->client.give_up_ms, why);
            rv = STOKER_CONNECTION;
            goto fail_slots;
        }
        if (rv == STOKER_RETRY) {
            stoker_sleep_ms(100, opts->client.stop);
            continue;
        }
        stoker_sleep_ms(delay, opts->client.stop);
        delay =
            delay * 2 > opts->client.reconnect_max_ms ? opts->client.reconnect_max_ms : delay * 2;
    }
    uint64_t schema_deadline = stoker_now_ms() + opts->stall_timeout_ms;
    while (tc->schema.n_fields == 0) {
        if (stopped(tc)) {
            rv = STOKER_INTERRUPTED;
            goto fail_slots;
        }
        if (stoker_now_ms() >= schema_deadline) {
            snprintf(err, err_len,
                     "the broker has no schema yet (no producer connected within "
                     "%u ms)",
                     opts->stall_timeout_ms);
            rv = STOKER_STALLED;
            goto fail_slots;
        }
        stoker_sleep_ms(50, opts->client.stop);
        if ((rv = hello(tc, err, err_len)) != STOKER_OK && rv != STOKER_TIMEOUT &&
            rv != STOKER_CONNECTION)
            goto fail_slots;
    }
    if (pthread_create(&tc->issuer, NULL, issuer_main, tc) != 0) {
        rv = STOKER_NOMEM;
        goto fail_slots;
    }
    tc->issuer_started = 1;
    if (opts->no_heartbeat) {
        *out = tc;
        return STOKER_OK;
    }
    if (pthread_create(&tc->beat_thread, NULL, beat_main, tc) != 0) {
        stoker_trainer_client_destroy(tc);
        snprintf(err, err_len, "trainer: cannot start its heartbeat thread");
        return STOKER_NOMEM;
    }
    tc->beat_started = 1;
    *out = tc;
    return STOKER_OK;

fail_slots:
    for (uint32_t i = 0; i < tc->n_slots; i++) {
        if (tc->slots[i].aio != NULL)
            nng_aio_free(tc->slots[i].aio);
    }
    conn_close(&tc->conn);
fail_conn:
    idset_destroy(tc->seen);
    free(tc->uncommitted); // not committed: the broker redelivers those leases
fail_seen:
    pthread_cond_destroy(&tc->beat_cond);
    pthread_cond_destroy(&tc->issue_cond);
    pthread_cond_destroy(&tc->cond);
    pthread_mutex_destroy(&tc->lock);
    pthread_mutex_destroy(&tc->seen_lock);
    free(tc);
    return rv;
}

const stoker_schema *
stoker_trainer_client_schema(const stoker_trainer_client *tc)
{
    return &tc->schema;
}

// Starts a pull on an idle slot, carrying the pending acknowledgements.
static void
issue(stoker_trainer_client *tc, slot *s)
{
    stoker_request req = {
        .method = STOKER_PULL,
        .session = tc->opts.client.session,
        .max_examples = tc->opts.batch_size,
        .wait_ms = tc->wait_ms,
        .arena_secret = tc->arena_secret,
    };
    uint64_t since = atomic_load(&tc->waiting_since_ms), now = stoker_now_ms();
    req.data_wait_ms = atomic_load(&tc->waited_ms) + (since != 0 && now > since ? now - since : 0);
    s->n_acks = tc->n_pending_acks;
    memcpy(s->acks, tc->pending_acks, s->n_acks * sizeof(uint64_t));
    tc->n_pending_acks = 0;
    req.n_acks = s->n_acks;
    req.acks = s->acks;
    s->pull_id = ++tc->next_pull_id;
    s->n_lost = tc->n_lost;
    memcpy(s->lost, tc->lost, s->n_lost * sizeof(uint64_t));
    tc->n_lost = 0;
    req.pull_id = s->pull_id;
    req.n_replaces = s->n_lost;
    req.replaces = s->lost;
    nng_msg *msg;
    if (stoker_wire_encode_request(&req, &msg) != STOKER_OK) {
        // Out of memory: leave the slot idle and the acks pending; the next call retries.
        memcpy(tc->pending_acks, s->acks, s->n_acks * sizeof(uint64_t));
        tc->n_pending_acks = s->n_acks;
        s->n_acks = 0;
        memcpy(tc->lost, s->lost, s->n_lost * sizeof(uint64_t));
        tc->n_lost = s->n_lost;
        s->n_lost = 0;
        return;
    }
    s->state = SLOT_SENDING;
    nng_aio_set_msg(s->aio, msg);
    nng_ctx_send(s->ctx, s->aio);
}

// The issuer thread: sends a pull on every idle slot when next() asks, until destroy.
static void *
issuer_main(void *arg)
{
    stoker_trainer_client *tc = arg;
    pthread_mutex_lock(&tc->lock);
    for (;;) {
        while (!tc->issue_requested && !tc->closing)
            pthread_cond_wait(&tc->issue_cond, &tc->lock);
        if (tc->closing)
            break;
        // Once the supply ended only a pull that names lost ones goes out: it may bring back a
        // batch the broker leased us while we could not take it.
        for (uint32_t i = 0; i < tc->n_slots; i++) {
            if (tc->slots[i].state == SLOT_IDLE && (!tc->ending || tc->n_lost > 0))
                issue(tc, &tc->slots[i]);
        }
        tc->issue_requested = 0;
        pthread_cond_broadcast(&tc->cond); // for wait_issued
    }
    pthread_mutex_unlock(&tc->lock);
    return NULL;
}

// Waits until the pulls next() asked for are sent, so that a status request made after them
// reaches the broker after them, as when next() sent them itself.
static void
wait_issued(stoker_trainer_client *tc)
{
    pthread_mutex_lock(&tc->lock);
    while (tc->issue_requested && !tc->closing)
        pthread_cond_wait(&tc->cond, &tc->lock);
    pthread_mutex_unlock(&tc->lock);
}

static void
requeue_acks(stoker_trainer_client *tc, slot *s)
{
    for (uint32_t i = 0; i < s->n_acks && tc->n_pending_acks < MAX_ACKS; i++)
        tc->pending_acks[tc->n_pending_acks++] = s->acks[i];
    s->n_acks = 0;
}

// Remembers lost pull id for the next pull to name (see MAX_LOST); the oldest goes when full.
static void
add_lost(stoker_trainer_client *tc, uint64_t id)
{
    if (tc->n_lost == MAX_LOST) {
        memmove(&tc->lost[0], &tc->lost[1], (MAX_LOST - 1) * sizeof(uint64_t));
        tc->n_lost--;
    }
    tc->lost[tc->n_lost++] = id;
}

// Slot s's pull was answered: the lost pulls it named are settled, except, when the broker sent
// one of their leases again (resent), the others, which may hold leases too: the next pull names
// them again. Under lock.
static void
settle_lost(stoker_trainer_client *tc, slot *s, uint64_t resent)
{
    for (uint32_t i = 0; resent != 0 && i < s->n_lost; i++) {
        if (s->lost[i] != resent)
            add_lost(tc, s->lost[i]);
    }
    s->n_lost = 0;
}

// Removes from batch b the dups examples whose identities this client saw before, so that a
// trainer never trains on an identity twice: the broker gives a dropped trainer's leases to
// others, and this trainer may be one of them when it comes back; and when a broker dies, a
// producer whose push acknowledgement died with it pushes those examples again to the next
// broker, which cannot know they were trained. Counted as duplicates (duplicates_seen).
static void
drop_seen(stoker_trainer_client *tc, stoker_batch *b, uint64_t dups)
{
    stoker_chunk *c = &b->chunk;
    stoker_run *runs = calloc((size_t)b->n_runs + dups, sizeof(*runs));
    if (runs == NULL) {
        stoker_warn("trainer: out of memory dropping %llu examples seen before; kept",
                    (unsigned long long)dups);
        return;
    }
    if (b->arena != NULL && !c->owns_data) {
        // The arena is read-only: drop from a private copy (the region is released as usual).
        stoker_chunk copy;
        if (stoker_chunk_init(&copy, &c->schema, c->count) != STOKER_OK ||
            stoker_chunk_append(&copy, c, 0, c->count) != STOKER_OK) {
            stoker_chunk_fini(&copy);
            free(runs);
            stoker_warn("trainer: out of memory dropping %llu examples seen before; kept",
                        (unsigned long long)dups);
            return;
        }
        *c = copy;
    }
    // Variable-length values cannot move in place (offsets): the kept examples go to a copy.
    int var = stoker_schema_first_variable(&c->schema) >= 0;
    stoker_chunk fresh = {0};
    if (var && stoker_chunk_init(&fresh, &c->schema, c->count) != STOKER_OK) {
        free(runs);
        stoker_warn("trainer: out of memory dropping %llu examples seen before; kept",
                    (unsigned long long)dups);
        return;
    }
    uint32_t n_runs = 0, kept = 0, at = 0;
    for (uint32_t i = 0; i < b->n_runs; i++) {
        const stoker_run *r = &b->runs[i];
        for (uint64_t q = r->first_seq; q < r->first_seq + r->count; q++, at++) {
            if (idset_count(tc->seen, r->session, q, 1) > 0)
                continue;
            if (var && stoker_chunk_append(&fresh, c, at, 1) != STOKER_OK)
                stoker_warn("trainer: out of memory copying example %u of batch %llu", at,
                            (unsigned long long)b->lease);
            for (uint32_t f = 0; f < c->schema.n_fields && !var; f++) {
                size_t w = stoker_field_bytes(&c->schema.fields[f]);
                if (kept != at)
                    memmove(c->data[f] + (size_t)kept * w, c->data[f] + (size_t)at * w, w);
            }
            if (b->items != NULL)
                b->items[kept] = b->items[at];
            stoker_run *last = n_runs > 0 ? &runs[n_runs - 1] : NULL;
            if (last != NULL && last->session == r->session && last->producer == r->producer &&
                last->first_seq + last->count == q)
                last->count++;
            else
                runs[n_runs++] = (stoker_run){
                    .producer = r->producer, .session = r->session, .first_seq = q, .count = 1};
            kept++;
        }
    }
    tc->duplicates += dups;
    stoker_warn("duplicate-identity: %llu examples seen before were dropped from batch %llu "
                "(given back after this trainer was dropped, or pushed again after a broker "
                "restart)",
                (unsigned long long)dups, (unsigned long long)b->lease);
    free(b->runs);
    b->runs = runs;
    b->n_runs = n_runs;
    if (var) {
        if (c->owns_data)
            stoker_chunk_fini(c);
        *c = fresh;
    }
    c->count = kept;
}

// Points batch b at its blobs in the arena (the reply carried only their offset); b holds a
// reference to the arena and releases its region when destroyed.
static int
arena_batch(stoker_trainer_client *tc, const stoker_reply *rep, stoker_batch *b)
{
    char err[256];
    if (tc->arena == NULL) {
        stoker_error("trainer: the broker sent a batch in shared memory we do not map");
        return STOKER_INVALID;
    }
    int rv = stoker_arena_resolve(tc->arena, rep->arena_offset, rep->n_data, rep->data_len,
                                  b->chunk.data, err, sizeof(err));
    if (rv != STOKER_OK) {
        stoker_error("trainer: malformed batch from broker: %s", err);
        return rv;
    }
    stoker_arena_ref(tc->arena);
    b->arena = tc->arena;
    tc->arena_batches++;
    return STOKER_OK;
}

// Turns a successful pull reply into a batch. Takes ownership of rep.
static int
make_batch(stoker_trainer_client *tc, stoker_reply *rep, stoker_batch **out)
{
    char err[256];
    stoker_batch *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        stoker_reply_free(rep);
        return STOKER_NOMEM;
    }
    b->chunk = rep->chunk;
    // A batch in the arena is bound once its blobs are found there (below).
    int rv = rep->in_arena ? STOKER_OK
                           : stoker_wire_bind_chunk(&b->chunk, rep->n_data, rep->data_len,
                                                    &tc->schema, err, sizeof(err));
    if (rv != STOKER_OK) {
        stoker_error("trainer: malformed batch from broker: %s", err);
        stoker_reply_free(rep);
        free(b);
        return rv;
    }
    b->lease = rep->lease;
    b->n_runs = rep->n_runs;
    b->runs = rep->runs;
    rep->runs = NULL;
    b->owner = rep;
    if (rep->n_items == b->chunk.count)
        b->items = rep->items; // points into rep, which the batch owns
    else if (rep->n_items != 0)
        stoker_warn("trainer: batch carries %u items for %u examples; items ignored", rep->n_items,
                    b->chunk.count);
    if (rep->in_arena && (rv = arena_batch(tc, rep, b)) != STOKER_OK) {
        stoker_batch_destroy(b);
        return rv;
    }
    if (rep->in_arena &&
        (rv = stoker_wire_bind_chunk(&b->chunk, rep->n_data, rep->data_len, &tc->schema, err,
                                     sizeof(err))) != STOKER_OK) {
        stoker_error("trainer: malformed batch from broker: %s", err);
        stoker_batch_destroy(b);
        return rv;
    }
    tc->last_in_arena = rep->in_arena;
    if (!rep->in_arena) {
        tc->socket_batches++;
        tc->arena_full_batches += tc->arena != NULL; // mapped, yet bytes: no room in the arena
    }
    uint64_t counted = 0, dups = 0;
    for (uint32_t i = 0; i < b->n_runs; i++)
        counted += b->runs[i].count;
    if (counted != b->chunk.count) {
        stoker_warn("trainer: batch runs cover %llu examples, batch has %u",
                    (unsigned long long)counted, b->chunk.count);
    } else {
        for (uint32_t i = 0; i < b->n_runs; i++)
            dups +=
                idset_count(tc->seen, b->runs[i].session, b->runs[i].first_seq, b->runs[i].count);
        if (dups > 0)
            drop_seen(tc, b, dups);
    }
    for (uint32_t i = 0; i < b->n_runs; i++) {
        pthread_mutex_lock(&tc->seen_lock);
        uint64_t added =
            idset_add(tc->seen, b->runs[i].session, b->runs[i].first_seq, b->runs[i].count);
        pthread_mutex_unlock(&tc->seen_lock);
        if (added == UINT64_MAX)
            stoker_warn("trainer: out of memory tracking identities; duplicates not counted");
    }
    *out = b;
    return STOKER_OK;
}

// Whether the caller holds lease (handed to it, not yet acknowledged).
static int
holds(stoker_trainer_client *tc, uint64_t lease)
{
    int found = 0;
    pthread_mutex_lock(&tc->lock);
    for (uint32_t i = 0; i < tc->n_held && !found; i++)
        found = tc->held[i] == lease;
    pthread_mutex_unlock(&tc->lock);
    return found;
}

// Remembers that lease was handed to the caller (see held).
static void
hold(stoker_trainer_client *tc, uint64_t lease)
{
    pthread_mutex_lock(&tc->lock);
    if (tc->n_held == MAX_ACKS) {
        memmove(&tc->held[0], &tc->held[1], (MAX_ACKS - 1) * sizeof(uint64_t));
        tc->n_held--;
    }
    tc->held[tc->n_held++] = lease;
    pthread_mutex_unlock(&tc->lock);
}

// Takes the pending acknowledgements at once (a pull the issuer sends meanwhile does not carry
// them) and sends them on the control context, so that an OK means the broker applied them.
// From the pull loop (background, see ACK_LINGER_MS) a failed request makes them pending again,
// for the next pull to carry, and nothing is logged; otherwise failures and refusals are logged.
// STOKER_OK (also when none were pending), the transport error or the broker's code.
static int
send_pending_acks(stoker_trainer_client *tc, int background)
{
    uint64_t acks[MAX_ACKS];
    pthread_mutex_lock(&tc->lock);
    uint32_t n = tc->n_pending_acks;
    memcpy(acks, tc->pending_acks, n * sizeof(uint64_t));
    tc->n_pending_acks = 0;
    pthread_mutex_unlock(&tc->lock);
    if (n == 0)
        return STOKER_OK;
    stoker_request req = {
        .method = STOKER_ACK, .session = tc->opts.client.session, .n_acks = n, .acks = acks};
    stoker_reply *rep = NULL;
    char err[256];
    int rv = conn_call(tc->ctl_ctx, &req, call_timeout(tc), &rep, err, sizeof(err));
    if (rv != STOKER_OK) {
        if (background) {
            pthread_mutex_lock(&tc->lock);
            for (uint32_t i = 0; i < n && tc->n_pending_acks < MAX_ACKS; i++)
                tc->pending_acks[tc->n_pending_acks++] = acks[i];
            pthread_mutex_unlock(&tc->lock);
        } else {
            stoker_warn("trainer: could not acknowledge %u leases: %s", n, err);
        }
        return rv;
    }
    rv = rep->code;
    take_reply_extras(tc, rep); // events an acknowledgement brought about (an epoch's end)
    if (rv != STOKER_OK && !background)
        stoker_warn("trainer: acknowledgement refused: %s", rep->message);
    stoker_reply_free(rep);
    return rv;
}

// The end of a wait of wait_ms without a batch: STOKER_TIMEOUT when that is shorter than the
// stall timeout, else STOKER_STALLED with its warning (why: the last failure, or NULL).
static int
stalled(stoker_trainer_client *tc, uint32_t wait_ms, const char *why)
{
    // The broker's word on why nothing came (a group waiting for a full step) is the reason.
    if (why == NULL && tc->wait_reason[0] != '\0') {
        snprintf(tc->refusal, sizeof(tc->refusal), "%s", tc->wait_reason);
        why = tc->wait_reason;
    }
    if (wait_ms < tc->opts.stall_timeout_ms)
        return STOKER_TIMEOUT;
    if (why != NULL)
        stoker_warn("stalled: no batch for %u ms (broker %s: %s)", tc->opts.stall_timeout_ms,
                    tc->url, why);
    else
        stoker_warn("stalled: no batch for %u ms", tc->opts.stall_timeout_ms);
    return STOKER_STALLED;
}

// next, waiting at most wait_ms: STOKER_TIMEOUT when that is shorter than the stall timeout and
// ran out, else STOKER_STALLED (with its warning).
// Keeps rep for later when it is a rank's batch of a step beyond the next one (the earlier
// step's reply is still on its way) and there is room; 1 when kept.
static int
keep_early(stoker_trainer_client *tc, stoker_reply *rep, uint32_t pipe)
{
    if (tc->group[0] == '\0' || rep->code != STOKER_OK || rep->chunk.count == 0 ||
        rep->group_step <= tc->group_steps + 1 || tc->n_early == MAX_PREFETCH)
        return 0;
    tc->early_pipe[tc->n_early] = pipe;
    tc->early[tc->n_early++] = rep;
    return 1;
}

// Whether rep is a batch that came on a connection that closed since (conn_reply_stale): the
// broker took it back (a lost connection's leases go to other trainers; a broker that died has
// its producers push them again, and what we train before our hello there would not be in the
// hello's report), so it is not trained; its events still count. Frees rep when it says so.
static int
stale_batch(stoker_trainer_client *tc, stoker_reply *rep, uint32_t pipe)
{
    if (rep->code != STOKER_OK || rep->chunk.count == 0 || pipe == 0 ||
        pipe == atomic_load(&tc->conn.live_pipe))
        return 0;
    take_reply_extras(tc, rep);
    stoker_info("trainer: batch of lease %llu (%u examples) came on a connection that closed "
                "since: not trained (the broker hands its examples out again)",
                (unsigned long long)rep->lease, rep->chunk.count);
    stoker_reply_free(rep);
    return 1;
}

// The kept reply whose step is next, or NULL; with none of them next while every pull in flight
// came back (a step's reply lost for good), the earliest, so nothing waits for it forever.
static stoker_reply *
take_early(stoker_trainer_client *tc, uint32_t *pipe)
{
    if (tc->n_early == 0)
        return NULL;
    uint32_t best = 0;
    for (uint32_t i = 1; i < tc->n_early; i++)
        if (tc->early[i]->group_step < tc->early[best]->group_step)
            best = i;
    if (tc->early[best]->group_step != tc->group_steps + 1) {
        int waiting = 0;
        pthread_mutex_lock(&tc->lock);
        for (uint32_t i = 0; i < tc->n_slots; i++)
            waiting += tc->slots[i].state != SLOT_IDLE;
        pthread_mutex_unlock(&tc->lock);
        if (waiting > 0)
            return NULL;
    }
    stoker_reply *rep = tc->early[best];
    *pipe = tc->early_pipe[best];
    tc->n_early--;
    tc->early[best] = tc->early[tc->n_early];
    tc->early_pipe[best] = tc->early_pipe[tc->n_early];
    return rep;
}

// A pull refused for want of a hello this soon after one waits this long before the next hello.
#define HELLO_PACE_MS 50

static int
next_batch(stoker_trainer_client *tc, stoker_batch **out, uint32_t wait_ms)
{
    char err[STOKER_MESSAGE_MAX];
    uint64_t wait_start = stoker_now_ms();
    int acks_sent = 0;
    tc->refusal[0] = '\0'; // this call's, if any
    for (;;) {
        if (tc->supply_ended)
            return tc->supply_ended;
        if (stopped(tc))
            return STOKER_INTERRUPTED;
        // The stall clock runs while the caller waits, not during its training step.
        uint64_t stall_at = wait_start + wait_ms;
        if (tc->need_hello) {
            uint64_t now = stoker_now_ms();
            if (now >= stall_at)
                return stalled(tc, wait_ms, "no broker answered hello");
            uint32_t left = (uint32_t)(stall_at - now);
            int rv = hello_within(tc,
                                  left < tc->opts.client.request_timeout_ms
                                      ? left
                                      : tc->opts.client.request_timeout_ms,
                                  err, sizeof(err));
            if (rv == STOKER_INTERRUPTED)
                return rv;
            if (rv != STOKER_OK && rv != STOKER_TIMEOUT && rv != STOKER_CONNECTION) {
                snprintf(tc->refusal, sizeof(tc->refusal), "%s", err);
                if (rv == STOKER_TLS)
                    stoker_error("trainer: %s", err);
                else
                    stoker_error("trainer: broker refused hello: %s", err);
                return rv;
            }
            if (rv != STOKER_OK) { // the deadline above ends it
                uint64_t after = stoker_now_ms();
                if (after < stall_at)
                    stoker_sleep_ms(stall_at - after < 50 ? (uint32_t)(stall_at - after) : 50,
                                    tc->opts.client.stop);
                continue;
            }
        }

        uint32_t pipe = 0;
        stoker_reply *rep = take_early(tc, &pipe);
        if (rep != NULL)
            goto process; // a later step's reply that came first: now its turn

        pthread_mutex_lock(&tc->lock);
        uint32_t busy = 0, idle = 0;
        for (uint32_t i = 0; i < tc->n_slots; i++) {
            if (tc->slots[i].state != SLOT_IDLE)
                busy++;
            else if (!tc->ending || tc->n_lost > 0)
                idle++;
        }
        if (idle > 0) {
            // The issuer sends them; the training thread goes on to wait for a reply.
            tc->issue_requested = 1;
            pthread_cond_signal(&tc->issue_cond);
            busy += idle;
        }
        if (tc->ending && busy == 0 && tc->n_early == 0) {
            // Replies can overtake each other: the end was only final once every pull that
            // was in flight with it came back (with the last batches, if any).
            int acks = tc->n_pending_acks > 0 && !tc->opts.commit;
            pthread_mutex_unlock(&tc->lock);
            // The last acknowledgements go now rather than at close: one may end a dataset's
            // epoch, and its reply brings that event before the end is reported.
            if (acks)
                (void)send_pending_acks(tc, 0);
            stoker_info("supply-ended: %s", tc->end_reason);
            tc->supply_ended = tc->ending;
            return tc->supply_ended;
        }
        while (tc->done_len == 0 && !stopped(tc)) {
            uint64_t now = stoker_now_ms();
            if (now >= stall_at)
                break;
            uint64_t wait = stall_at - now < 100 ? stall_at - now : 100;
            // --- acknowledgements held back while starving (ACK_LINGER_MS), once per call ---
            if (!acks_sent && tc->n_pending_acks > 0 && !tc->opts.commit) {
                if (now >= wait_start + ACK_LINGER_MS) {
                    acks_sent = 1;
                    pthread_mutex_unlock(&tc->lock);
                    (void)send_pending_acks(tc, 1);
                    pthread_mutex_lock(&tc->lock);
                    continue;
                }
                wait = wait_start + ACK_LINGER_MS - now;
            }
            // --- end of the acknowledgements hook ---
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (long)wait * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&tc->cond, &tc->lock, &ts);
        }
        if (tc->done_len == 0) {
            pthread_mutex_unlock(&tc->lock);
            if (stopped(tc))
                return STOKER_INTERRUPTED;
            return stalled(tc, wait_ms, NULL);
        }
        slot *s = &tc->slots[tc->done[tc->done_head]];
        tc->done_head = (tc->done_head + 1) % MAX_PREFETCH;
        tc->done_len--;
        s->state = SLOT_IDLE;
        int result = s->result;
        nng_msg *msg = s->reply;
        s->reply = NULL;
        if (result != 0) {
            // The request or its connection failed: the broker returns leases of a closed
            // connection to their queues, so re-sending our acks can only be refused, never
            // lose anything. A pull that reached the socket may have been answered with a lease
            // we will never read (nng drops a reply that comes after the request timed out):
            // the next pull names it, and the broker sends that lease again.
            requeue_acks(tc, s);
            for (uint32_t i = 0; i < s->n_lost; i++)
                add_lost(tc, s->lost[i]);
            s->n_lost = 0;
            if (s->sent && result == NNG_ETIMEDOUT)
                add_lost(tc, s->pull_id);
            pthread_mutex_unlock(&tc->lock);
            tc->away = 1;
            if (tc->failures++ == 0)
                stoker_warn("trainer: pull failed (%s), retrying", nng_strerror(result));
            if (result != NNG_ETIMEDOUT)
                tc->need_hello = 1;
            // Retrying never outlasts the wait: a broker that died and stays down ends in a
            // stall like any other silence (issue 26).
            uint64_t now = stoker_now_ms();
            if (now >= stall_at)
                return stalled(tc, wait_ms, nng_strerror(result));
            uint32_t backoff = tc->failures < 8 ? 10u << tc->failures : 1000;
            stoker_sleep_ms(now + backoff < stall_at ? backoff : (uint32_t)(stall_at - now),
                            tc->opts.client.stop);
            continue;
        }
        s->n_acks = 0;
        pthread_mutex_unlock(&tc->lock);
        if (tc->failures > 0)
            stoker_info("trainer: broker reachable again");
        tc->failures = 0;
        tc->away = 0;

        pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
        // The batch will point into msg: no copy between the socket and the training step.
        int rv = stoker_wire_decode_reply_msg(msg, &rep, err, sizeof(err));
        if (rv != STOKER_OK)
            nng_msg_free(msg);
        if (rv != STOKER_OK) {
            stoker_error("trainer: undecodable reply from broker: %s", err);
            return rv;
        }
        pthread_mutex_lock(&tc->lock);
        settle_lost(tc, s, rep->code == STOKER_OK ? rep->resent_pull : 0);
        pthread_mutex_unlock(&tc->lock);
        if (keep_early(tc, rep, pipe))
            continue;
    process:
        if (stale_batch(tc, rep, pipe))
            continue;
        if (rep->resent_pull != 0)
            stoker_info("trainer: lease %llu of a pull whose reply was lost came again",
                        (unsigned long long)rep->lease);
        take_reply_extras(tc, rep);
        rv = rep->code;
        if (rv == STOKER_OK && rep->chunk.count > 0) {
            rv = make_batch(tc, rep, out);
            if (rv == STOKER_OK)
                tc->ending = 0; // more data came after all (a producer reconnected)
            if (rv == STOKER_OK && tc->group[0] != '\0')
                tc->group_steps++;
            if (rv == STOKER_OK && (*out)->chunk.count == 0) {
                // Every example was seen before (drop_seen): nothing to train, done with it,
                // unless it is a copy of a batch the caller holds (the broker sends a lease
                // again that it thinks lost): the caller's own acknowledgement comes.
                if (!holds(tc, (*out)->lease))
                    stoker_trainer_client_ack(tc, (*out)->lease);
                stoker_batch_destroy(*out);
                *out = NULL;
                continue;
            }
            if (rv == STOKER_OK) {
                hold(tc, (*out)->lease);
                tc->wait_reason[0] = '\0';
            }
            return rv;
        }
        if (rv == STOKER_OK) { // the broker's wait expired, or it brought events
            snprintf(tc->wait_reason, sizeof(tc->wait_reason), "%s", rep->message);
            if (rep->message[0] != '\0' && !tc->told_commit_wait) {
                stoker_warn("trainer: waiting: %s", rep->message); // once: commit to go on
                tc->told_commit_wait = 1;
            }
            stoker_reply_free(rep);
            continue;
        }
        if (rv == STOKER_GROUP_BROKEN) {
            // Final: the other ranks wait for a rank that is gone; no step will come.
            snprintf(tc->end_reason, sizeof(tc->end_reason), "%s", rep->message);
            stoker_error("group-broken: %s", tc->end_reason);
            tc->supply_ended = rv;
            stoker_reply_free(rep);
            return rv;
        }
        if (rv == STOKER_NO_PRODUCERS || rv == STOKER_END_OF_DATA) {
            tc->group_leftover = rep->group_leftover;
            if (!tc->ending)
                snprintf(tc->end_reason, sizeof(tc->end_reason), "%s", rep->message);
            tc->ending = rv;
            stoker_reply_free(rep);
            continue;
        }
        if (rv == STOKER_UNKNOWN_PEER) {
            tc->need_hello = 1;
            stoker_reply_free(rep);
            // A broker that restarted takes pulls only once a producer came back: until then
            // each hello is answered and the next pull refused, so the hellos are paced.
            uint64_t now = stoker_now_ms();
            if (now < tc->hello_ms + HELLO_PACE_MS && now < stall_at)
                stoker_sleep_ms(stall_at - now < HELLO_PACE_MS ? (uint32_t)(stall_at - now)
                                                               : HELLO_PACE_MS,
                                tc->opts.client.stop);
            continue;
        }
        snprintf(tc->refusal, sizeof(tc->refusal), "%s", rep->message);
        stoker_error("trainer: broker refused pull: %s", rep->message);
        stoker_reply_free(rep);
        return rv;
    }
}

// next_batch, its time counted as the caller's data wait.
static int
timed_next(stoker_trainer_client *tc, stoker_batch **out, uint32_t wait_ms)
{
    uint64_t start = stoker_now_ms();
    atomic_store(&tc->waiting_since_ms, start);
    int rv = next_batch(tc, out, wait_ms);
    uint64_t end = stoker_now_ms();
    atomic_fetch_add(&tc->waited_ms, end > start ? end - start : 0);
    atomic_store(&tc->waiting_since_ms, 0);
    return rv;
}

int
stoker_trainer_client_next(stoker_trainer_client *tc, stoker_batch **out)
{
    return timed_next(tc, out, tc->opts.stall_timeout_ms);
}

int
stoker_trainer_client_next_within(stoker_trainer_client *tc, stoker_batch **out, uint32_t wait_ms)
{
    return timed_next(tc, out,
                      wait_ms < tc->opts.stall_timeout_ms ? wait_ms : tc->opts.stall_timeout_ms);
}

const char *
stoker_trainer_client_refusal(const stoker_trainer_client *tc)
{
    return tc->refusal;
}

const char *
stoker_trainer_client_end_reason(const stoker_trainer_client *tc)
{
    return tc->supply_ended != STOKER_OK ? tc->end_reason : "";
}

uint64_t
stoker_trainer_client_group_steps(const stoker_trainer_client *tc)
{
    return tc->group_steps;
}

uint64_t
stoker_trainer_client_group_leftover(const stoker_trainer_client *tc)
{
    return tc->group_leftover;
}

// Forgets that lease is held by the caller (acknowledged, or kept for the commit).
static void
unhold(stoker_trainer_client *tc, uint64_t lease)
{
    pthread_mutex_lock(&tc->lock);
    for (uint32_t i = 0; i < tc->n_held; i++) {
        if (tc->held[i] == lease) {
            memmove(&tc->held[i], &tc->held[i + 1], (tc->n_held - i - 1) * sizeof(uint64_t));
            tc->n_held--;
            break;
        }
    }
    pthread_mutex_unlock(&tc->lock);
}

void
stoker_trainer_client_ack(stoker_trainer_client *tc, uint64_t lease)
{
    if (tc->opts.commit) {
        // Kept until the next commit. Out of memory: sent now (it counts as trained at once).
        if (tc->n_uncommitted == tc->cap_uncommitted) {
            uint32_t cap = tc->cap_uncommitted ? tc->cap_uncommitted * 2 : 256;
            uint64_t *u = realloc(tc->uncommitted, cap * sizeof(*u));
            if (u != NULL) {
                tc->uncommitted = u;
                tc->cap_uncommitted = cap;
            }
        }
        if (tc->n_uncommitted < tc->cap_uncommitted) {
            unhold(tc, lease); // the goodbye names it among the uncommitted instead
            tc->uncommitted[tc->n_uncommitted++] = lease;
            return;
        }
        stoker_warn("trainer: out of memory keeping an acknowledgement for the commit");
    }
    unhold(tc, lease);
    pthread_mutex_lock(&tc->lock);
    int full = tc->n_pending_acks == MAX_ACKS;
    pthread_mutex_unlock(&tc->lock);
    if (full)
        stoker_trainer_client_flush(tc);
    pthread_mutex_lock(&tc->lock);
    if (tc->n_pending_acks < MAX_ACKS)
        tc->pending_acks[tc->n_pending_acks++] = lease;
    pthread_mutex_unlock(&tc->lock);
}

int
stoker_trainer_client_flush(stoker_trainer_client *tc)
{
    return send_pending_acks(tc, 0);
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

// A rank's commit (group commit, docs/groups.md): its acknowledgements in parts at its step
// count, the last part final; the broker applies every rank's at once when all are in, and
// answers the final part then (at most STOKER_GROUP_COMMIT_WAIT_MS after the first rank's part, or
// GROUP_BROKEN when a rank is lost meanwhile). Nothing counts unless the final part says OK.

static int
group_commit(stoker_trainer_client *tc)
{
    if (tc->group_steps == 0 && tc->n_uncommitted == 0)
        return STOKER_OK; // no step taken: nothing to commit
    uint32_t done = 0;
    int rv = STOKER_OK;
    for (;;) {
        uint32_t n = tc->n_uncommitted - done < MAX_ACKS ? tc->n_uncommitted - done : MAX_ACKS;
        int final = done + n == tc->n_uncommitted;
        stoker_request req = {.method = STOKER_ACK,
                              .session = tc->opts.client.session,
                              .n_acks = n,
                              .acks = tc->uncommitted + done,
                              .commit_step = tc->group_steps,
                              .commit_final = final};
        stoker_reply *rep = NULL;
        char err[256];
        uint32_t timeout = tc->opts.client.request_timeout_ms;
        if (final)
            timeout += STOKER_GROUP_COMMIT_WAIT_MS;
        rv = conn_call(tc->ctl_ctx, &req, timeout, &rep, err, sizeof(err));
        if (rv != STOKER_OK) {
            stoker_warn("trainer: group commit at step %llu failed: %s",
                        (unsigned long long)tc->group_steps, err);
            return rv;
        }
        rv = rep->code;
        if (rv != STOKER_OK && rv != STOKER_NOT_FOUND) {
            snprintf(tc->refusal, sizeof(tc->refusal), "%s", rep->message);
            stoker_warn("trainer: group commit at step %llu refused: %s",
                        (unsigned long long)tc->group_steps, rep->message);
            stoker_reply_free(rep);
            return rv; // kept: the next commit sends them again
        }
        if (final)
            take_reply_extras(tc, rep);
        stoker_reply_free(rep);
        done += n;
        if (final)
            break;
    }
    tc->n_uncommitted = 0;
    tc->told_commit_wait = 0;
    return STOKER_OK;
}

int
stoker_trainer_client_commit(stoker_trainer_client *tc)
{
    int rv = stoker_trainer_client_flush(tc);
    if (rv == STOKER_OK && tc->group[0] != '\0' && tc->opts.commit)
        return group_commit(tc);
    uint32_t done = 0;
    while (rv == STOKER_OK && done < tc->n_uncommitted) {
        // Sent here, not through the pending acknowledgements, so that no pull in flight carries
        // them: an OK means the broker applied every one.
        uint32_t n = tc->n_uncommitted - done < MAX_ACKS ? tc->n_uncommitted - done : MAX_ACKS;
        stoker_request req = {.method = STOKER_ACK,
                              .session = tc->opts.client.session,
                              .n_acks = n,
                              .acks = tc->uncommitted + done};
        stoker_reply *rep = NULL;
        char err[256];
        rv = conn_call(tc->ctl_ctx, &req, tc->opts.client.request_timeout_ms, &rep, err,
                       sizeof(err));
        if (rv != STOKER_OK) {
            stoker_warn("trainer: commit of %u leases failed: %s", n, err);
            break;
        }
        rv = rep->code;
        take_reply_extras(tc, rep); // events the commit brought about (an epoch's end)
        stoker_reply_free(rep);
        // Refused acknowledgements (leases given back after a disconnect) are final too.
        if (rv == STOKER_OK || rv == STOKER_NOT_FOUND) {
            rv = STOKER_OK;
            done += n;
        }
    }
    memmove(tc->uncommitted, tc->uncommitted + done, (tc->n_uncommitted - done) * sizeof(uint64_t));
    tc->n_uncommitted -= done;
    tc->told_commit_wait = 0;
    return rv;
}

void
stoker_trainer_client_set_commit(stoker_trainer_client *tc, int on)
{
    if ((tc->opts.commit != 0) == (on != 0))
        return;
    if (!on)
        stoker_trainer_client_commit(tc); // what was kept is sent now
    tc->opts.commit = on != 0;
    tc->need_hello = 1;
}

uint64_t
stoker_trainer_client_uncommitted(const stoker_trainer_client *tc)
{
    return tc->n_uncommitted;
}

int
stoker_trainer_client_mark_trained(stoker_trainer_client *tc, uint64_t session, uint64_t first_seq,
                                   uint64_t count)
{
    pthread_mutex_lock(&tc->seen_lock);
    uint64_t added = idset_add(tc->seen, session, first_seq, count);
    pthread_mutex_unlock(&tc->seen_lock);
    return added == UINT64_MAX ? STOKER_NOMEM : STOKER_OK;
}

uint64_t
stoker_trainer_client_duplicates(const stoker_trainer_client *tc)
{
    return tc->duplicates;
}

uint64_t
stoker_trainer_client_acks_refused(const stoker_trainer_client *tc)
{
    return tc->acks_refused;
}

const char *
stoker_trainer_client_delivery(const stoker_trainer_client *tc)
{
    return tc->arena != NULL && tc->arena_batches > 0 ? "shm" : "socket";
}

uint64_t
stoker_trainer_client_socket_batches(const stoker_trainer_client *tc)
{
    return tc->socket_batches;
}

uint64_t
stoker_trainer_client_arena_full_batches(const stoker_trainer_client *tc)
{
    return tc->arena_full_batches;
}

uint64_t
stoker_trainer_client_arena_batches(const stoker_trainer_client *tc)
{
    return tc->arena_batches;
}

int
stoker_trainer_client_status(stoker_trainer_client *tc, stoker_status **out)
{
    wait_issued(tc);
    // The connection said hello with the token already (the broker knows it by its pipe).
    stoker_request req = {.method = STOKER_STATUS, .session = tc->opts.client.session};
    stoker_reply *rep = NULL;
    char err[256];
    int rv = conn_call(tc->ctl_ctx, &req, call_timeout(tc), &rep, err, sizeof(err));
    if (rv != STOKER_OK)
        return rv;
    if ((rv = rep->code) == STOKER_OK)
        rv = conn_status_from_reply(rep, out);
    stoker_reply_free(rep);
    return rv;
}

// Before the goodbye: waits (at most a pull's wait at the broker, plus a little) until the pulls
// in flight that carry acknowledgements are answered, which tells that the broker applied them.
// It handles a connection's requests on parallel contexts, so such a pull could otherwise reach
// it after the goodbye, when it has already handed those leases to other trainers.
static void
wait_inflight_acks(stoker_trainer_client *tc)
{
    uint64_t deadline = stoker_now_ms() + tc->wait_ms + 200;
    pthread_mutex_lock(&tc->lock);
    for (;;) {
        int carrying = 0;
        for (uint32_t i = 0; i < tc->n_slots; i++) {
            const slot *s = &tc->slots[i];
            carrying |= (s->state == SLOT_SENDING || s->state == SLOT_RECEIVING) && s->n_acks > 0;
        }
        if (!carrying || stoker_now_ms() >= deadline || broker_away(tc))
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&tc->cond, &tc->lock, &ts);
    }
    pthread_mutex_unlock(&tc->lock);
}

void
stoker_trainer_client_destroy(stoker_trainer_client *tc)
{
    if (tc == NULL)
        return;
    // The heartbeats end first: one after the goodbye would speak for a trainer that left.
    pthread_mutex_lock(&tc->lock);
    tc->beat_stop = 1;
    pthread_cond_signal(&tc->beat_cond);
    pthread_mutex_unlock(&tc->lock);
    if (tc->beat_started)
        pthread_join(tc->beat_thread, NULL);
    stoker_trainer_client_flush(tc);
    wait_inflight_acks(tc);
    // Goodbye: the broker hands what we still hold to other trainers at once and logs a clean
    // leave instead of a lost connection. Bounded; without it the closed pipe does the same.
    // It names the batches our caller held unacknowledged (a loss: counted as redelivered); the
    // leases we got ahead and never handed out come back counted as returned unused.
    // A committing trainer's trained but uncommitted leases were used too (they come back
    // counted as redelivered): the newest of them fill what the goodbye can name after held.
    uint64_t named[MAX_ACKS];
    uint32_t n_named = tc->n_held;
    memcpy(named, tc->held, n_named * sizeof(uint64_t));
    for (uint32_t i = tc->n_uncommitted; i-- > 0 && n_named < MAX_ACKS;)
        named[n_named++] = tc->uncommitted[i];
    stoker_request bye = {.method = STOKER_GOODBYE,
                          .session = tc->opts.client.session,
                          .n_held = n_named,
                          .held = named};
    stoker_reply *rep = NULL;
    char err[256];
    uint32_t timeout = call_timeout(tc) < 1000 ? call_timeout(tc) : 1000;
    if (conn_call(tc->ctl_ctx, &bye, timeout, &rep, err, sizeof(err)) == STOKER_OK)
        stoker_reply_free(rep);
    // Stop the pulls in flight before closing the socket, so no callback runs (and restarts an
    // operation) while nng tears the contexts down.
    pthread_mutex_lock(&tc->lock);
    tc->closing = 1;
    pthread_cond_signal(&tc->issue_cond);
    pthread_mutex_unlock(&tc->lock);
    if (tc->issuer_started)
        pthread_join(tc->issuer, NULL);
    for (uint32_t i = 0; i < tc->n_slots; i++)
        nng_aio_stop(tc->slots[i].aio);
    conn_close(&tc->conn);
    for (uint32_t i = 0; i < tc->n_slots; i++) {
        nng_msg_free(tc->slots[i].reply);
        nng_aio_free(tc->slots[i].aio);
    }
    for (uint32_t i = 0; i < tc->n_early; i++)
        stoker_reply_free(tc->early[i]);
    idset_destroy(tc->seen);
    stoker_arena_unref(tc->arena); // batches still alive keep it mapped
    free(tc->uncommitted);         // not committed: the broker redelivers those leases
    pthread_cond_destroy(&tc->beat_cond);
    pthread_cond_destroy(&tc->issue_cond);
    pthread_cond_destroy(&tc->cond);
    pthread_mutex_destroy(&tc->lock);
    pthread_mutex_destroy(&tc->seen_lock);
    free(tc);
}
