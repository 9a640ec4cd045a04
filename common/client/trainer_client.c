// Trainer client: hello, then pulls kept in flight (trainer_prefetch.c) so a batch is usually
// waiting when a training step ends, handed to the caller in step order with the events that
// rode with them. Acknowledgements ride on the next pull (trainer_acks.c). The session with the
// broker, its heartbeats and whether the broker answers are session.c's. Every wait ends at the
// stall deadline. This file is the top of the trainer client's rooms (trainer_impl.h).
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"
#include "trainer_impl.h"

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

// Says hello on the control context, waiting at most timeout_ms and returning soon after the
// stop flag is set (STOKER_INTERRUPTED). Returns the broker's code or a transport error.
static int
hello_within(stoker_trainer_client *tc, uint32_t timeout_ms, char *err, size_t err_len)
{
    stoker_request req = {
        .role = STOKER_ROLE_TRAINER,
        .commit = tc->opts.commit,
        .want_arena = tc->opts.shm,
        .pid = (uint32_t)getpid(), // /status names each consumer's process
        .rank = tc->opts.rank,
        .world = tc->opts.world,
        .group_batch = tc->group[0] != '\0' ? tc->opts.batch_size : 0,
        .group_steps = tc->group[0] != '\0' ? tc->group_steps : 0,
        .batching = tc->opts.batching,
        .mix = tc->opts.mix,
    };
    conn_copy_str(req.group, sizeof(req.group), tc->group);
    conn_copy_str(req.job, sizeof(req.job), tc->job);
    // What this trainer trained, for a broker that restarted: it counts it trained, so that the
    // producers' re-pushed examples reach no other trainer. A broker that knew us
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
    conn_stop stop = {.flag = tc->opts.client.stop, .conn = &tc->session.conn};
    int rv = session_hello(&tc->session, tc->ctl_ctx, &req, timeout_ms, &stop, &rep, err, err_len);
    free(trained);
    if (rep == NULL)
        return rv;
    if (rv == STOKER_OK) {
        tc->hello_ms = stoker_now_ms();
        trainer_note_broker(tc, rep); // its event comes before the snapshot's
        trainer_take_extras(tc, rep);
        if (tc->opts.shm)
            trainer_attach_arena(tc, rep);
    } else {
        snprintf(err, err_len, "%s", rep->message);
        if (rv == STOKER_RETRY) // a group's rank held by a silent trainer: the broker judges it
            tc->claim_wait_ms = 2 * rep->heartbeat_ms;
    }
    stoker_reply_free(rep);
    return rv;
}

static int
hello(stoker_trainer_client *tc, char *err, size_t err_len)
{
    return hello_within(tc, tc->opts.client.request_timeout_ms, err, err_len);
}

// A broker that does not know us (it restarted; the pulls have not said hello yet, maybe
// because the caller pulls nothing now): one heartbeat that tells it what we trained, as a
// hello would, so that no other trainer gets those examples again.
static void
report_trained(void *owner, session *s, const stoker_reply *beat, uint32_t timeout, conn_stop *stop)
{
    stoker_trainer_client *tc = owner;
    if (beat->code != STOKER_UNKNOWN_PEER)
        return;
    uint64_t *trained = malloc(3 * sizeof(uint64_t) * STOKER_HELLO_TRAINED_MAX);
    if (trained == NULL)
        return;
    stoker_request req = {.method = STOKER_HEARTBEAT, .session = tc->opts.client.session};
    conn_copy_str(req.job, sizeof(req.job), tc->job);
    pthread_mutex_lock(&tc->seen_lock);
    req.n_trained = idset_export(tc->seen, trained, STOKER_HELLO_TRAINED_MAX);
    pthread_mutex_unlock(&tc->seen_lock);
    req.trained = trained;
    stoker_reply *rep = NULL;
    char err[256];
    if (req.n_trained > 0 &&
        conn_call_until(s->beat_ctx, &req, timeout, stop, &rep, err, sizeof(err)) == STOKER_OK)
        stoker_reply_free(rep);
    free(trained);
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
            STOKER_OK ||
        (rv = stoker_mix_check(&opts->mix, err, err_len)) != STOKER_OK)
        return rv;
    if (opts->group != NULL && (opts->group[0] == '\0' || strlen(opts->group) >= STOKER_NAME_MAX ||
                                opts->rank >= opts->world))
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "trainer options: group '%s' needs a name of 1..%d bytes and a rank "
                             "below the world size (rank %u, world %u)",
                             opts->group, STOKER_NAME_MAX - 1, opts->rank, opts->world);
    if (opts->job != NULL && strlen(opts->job) >= STOKER_NAME_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "trainer options: job '%.*s%s' is %zu bytes; a job's name is "
                             "1..%d bytes",
                             STOKER_NAME_MAX, opts->job,
                             strlen(opts->job) > STOKER_NAME_MAX ? "..." : "", strlen(opts->job),
                             STOKER_NAME_MAX - 1);
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
    conn_copy_str(tc->job, sizeof(tc->job), opts->job);
    tc->opts.job = tc->job;
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
    if ((tc->seen = idset_create()) == NULL) {
        rv = STOKER_NOMEM;
        goto fail_seen;
    }
    if ((rv = session_open(&tc->session, &tc->opts.client, "trainer", err, err_len)) != STOKER_OK)
        goto fail_conn;
    if ((rv = nng_ctx_open(&tc->ctl_ctx, tc->session.conn.sock)) != 0) {
        rv = stoker_err_from_nng(rv);
        goto fail_slots;
    }
    if ((rv = trainer_prefetch_open(tc)) != STOKER_OK)
        goto fail_slots;

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
            // rank that hangs): it takes it over or refuses us within claim_wait_ms.
            stoker_warn("trainer: waiting at hello: %s", err);
            claimed = 1;
            give_up += tc->claim_wait_ms;
        }
        if (rv != STOKER_TIMEOUT && rv != STOKER_CONNECTION && rv != STOKER_RETRY)
            goto fail_slots;
        if (stoker_now_ms() >= give_up) {
            // Handshakes that failed for a TLS reason found meanwhile are the answer.
            if ((rv = conn_failure(&tc->session.conn, err, err_len)) == STOKER_TLS)
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
    if ((rv = trainer_prefetch_start(tc)) != STOKER_OK)
        goto fail_slots;
    if (opts->no_heartbeat) {
        *out = tc;
        return STOKER_OK;
    }
    // A heartbeat every heartbeat_ms whatever the pulls do; one to a broker that does not know
    // us tells it what we trained (report_trained).
    session_beat beat = {.while_unknown = 1, .answered = report_trained, .owner = tc};
    if (session_start_heartbeat(&tc->session, &beat) != STOKER_OK) {
        stoker_trainer_client_destroy(tc);
        snprintf(err, err_len, "trainer: cannot start its heartbeat thread");
        return STOKER_NOMEM;
    }
    *out = tc;
    return STOKER_OK;

fail_slots:
    trainer_prefetch_stop(tc);
    session_close(&tc->session);
    trainer_prefetch_free(tc);
fail_conn:
    idset_destroy(tc->seen);
    free(tc->uncommitted); // not committed: the broker redelivers those leases
fail_seen:
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
        if (!atomic_load(&tc->session.known)) {
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
        stoker_reply *rep = trainer_take_early(tc, &pipe);
        if (rep != NULL)
            goto process; // a later step's reply that came first: now its turn

        pthread_mutex_lock(&tc->lock);
        uint32_t busy = trainer_prefetch_ask(tc);
        if (tc->ending && busy == 0 && tc->n_early == 0) {
            // Replies can overtake each other: the end was only final once every pull that
            // was in flight with it came back (with the last batches, if any).
            int acks = tc->n_pending_acks > 0 && !tc->opts.commit;
            pthread_mutex_unlock(&tc->lock);
            // The last acknowledgements go now rather than at close: one may end a dataset's
            // epoch, and its reply brings that event before the end is reported.
            if (acks)
                (void)trainer_send_acks(tc, 0);
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
                    (void)trainer_send_acks(tc, 1);
                    pthread_mutex_lock(&tc->lock);
                    continue;
                }
                wait = wait_start + ACK_LINGER_MS - now;
            }
            // --- end of the acknowledgements hook ---
            session_cond_wait_ms(&tc->cond, &tc->lock, wait);
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
            trainer_prefetch_failed(tc, s);
            pthread_mutex_unlock(&tc->lock);
            session_failed(&tc->session);
            if (tc->failures++ == 0)
                stoker_warn("trainer: pull failed (%s), retrying", nng_strerror(result));
            if (result != NNG_ETIMEDOUT)
                session_forget(&tc->session);
            // Retrying never outlasts the wait: a broker that died and stays down ends in a
            // stall like any other silence.
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
        session_answered(&tc->session);

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
        trainer_settle_lost(tc, s, rep->code == STOKER_OK ? rep->resent_pull : 0);
        pthread_mutex_unlock(&tc->lock);
        if (trainer_keep_early(tc, rep, pipe))
            continue;
    process:
        if (trainer_stale_batch(tc, rep, pipe))
            continue;
        if (rep->resent_pull != 0)
            stoker_info("trainer: lease %llu of a pull whose reply was lost came again",
                        (unsigned long long)rep->lease);
        trainer_take_extras(tc, rep);
        rv = rep->code;
        if (rv == STOKER_OK && rep->chunk.count > 0) {
            rv = trainer_make_batch(tc, rep, out);
            if (rv == STOKER_OK)
                tc->ending = 0; // more data came after all (a producer reconnected)
            if (rv == STOKER_OK && tc->group[0] != '\0')
                tc->group_steps++;
            else if (rv == STOKER_OK && rep->group_step > 0)
                tc->mix_steps = rep->group_step; // a mixture's batch, numbered
            if (rv == STOKER_OK && (*out)->chunk.count == 0) {
                // Every example was seen before (drop_seen): nothing to train, done with it,
                // unless it is a copy of a batch the caller holds (the broker sends a lease
                // again that it thinks lost): the caller's own acknowledgement comes.
                if (!trainer_holds(tc, (*out)->lease))
                    stoker_trainer_client_ack(tc, (*out)->lease);
                stoker_batch_destroy(*out);
                *out = NULL;
                continue;
            }
            if (rv == STOKER_OK) {
                trainer_hold(tc, (*out)->lease);
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
            session_forget(&tc->session);
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

int
stoker_trainer_client_set_mix(stoker_trainer_client *tc, const stoker_mix *mix,
                              uint64_t *from_batch, char *err, size_t err_len)
{
    if (tc->opts.mix.n == 0 || tc->group[0] != '\0')
        return stoker_errorf(err, err_len, STOKER_INVALID, "set_mix: %s",
                             tc->group[0] != '\0' ? "a rank's mixture changes by its group's "
                                                    "schedule (mix_schedule)"
                                                  : "this trainer has no mixture (mix=)");
    stoker_request req = {.method = STOKER_MIX, .session = tc->opts.client.session, .mix = *mix};
    req.mix.stop = tc->opts.mix.stop;
    stoker_reply *rep = NULL;
    int rv = conn_call(tc->ctl_ctx, &req, session_call_timeout(&tc->session), &rep, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    if ((rv = rep->code) != STOKER_OK) {
        stoker_errorf(err, err_len, rv, "set_mix: %s", rep->message);
    } else {
        // A hello again (a reconnect) then names the mixture the broker has now.
        memcpy(tc->opts.mix.weights, mix->weights, sizeof(mix->weights));
        tc->opts.mix.n_points = 0;
        if (from_batch != NULL)
            *from_batch = rep->group_step;
    }
    stoker_reply_free(rep);
    return rv;
}

int
stoker_trainer_client_status(stoker_trainer_client *tc, stoker_status **out)
{
    trainer_wait_issued(tc);
    // The connection said hello with the token already (the broker knows it by its pipe).
    stoker_request req = {.method = STOKER_STATUS, .session = tc->opts.client.session};
    stoker_reply *rep = NULL;
    char err[256];
    int rv =
        conn_call(tc->ctl_ctx, &req, session_call_timeout(&tc->session), &rep, err, sizeof(err));
    if (rv != STOKER_OK)
        return rv;
    if ((rv = rep->code) == STOKER_OK)
        rv = conn_status_from_reply(rep, out);
    stoker_reply_free(rep);
    return rv;
}

void
stoker_trainer_client_destroy(stoker_trainer_client *tc)
{
    if (tc == NULL)
        return;
    // The heartbeats end first: one after the goodbye would speak for a trainer that left.
    session_stop_heartbeat(&tc->session);
    stoker_trainer_client_flush(tc);
    trainer_wait_inflight_acks(tc);
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
    uint32_t timeout = session_call_timeout(&tc->session);
    if (conn_call(tc->ctl_ctx, &bye, timeout < 1000 ? timeout : 1000, &rep, err, sizeof(err)) ==
        STOKER_OK)
        stoker_reply_free(rep);
    trainer_prefetch_stop(tc); // before the socket closes
    session_close(&tc->session);
    trainer_prefetch_free(tc);
    idset_destroy(tc->seen);
    stoker_arena_unref(tc->arena); // batches still alive keep it mapped
    free(tc->uncommitted);         // not committed: the broker redelivers those leases
    pthread_cond_destroy(&tc->issue_cond);
    pthread_cond_destroy(&tc->cond);
    pthread_mutex_destroy(&tc->lock);
    pthread_mutex_destroy(&tc->seen_lock);
    free(tc);
}
