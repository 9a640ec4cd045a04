// The trainer client's batches as replies bring them (trainer_impl.h): bound to the reply's
// buffer or to their blobs in the broker's shared memory (mapped here after a hello), with the
// examples this client trained before dropped, and the counts of how batches came.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/log.h"
#include "trainer_impl.h"

void
trainer_attach_arena(stoker_trainer_client *tc, const stoker_reply *rep)
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
int
trainer_make_batch(stoker_trainer_client *tc, stoker_reply *rep, stoker_batch **out)
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

uint64_t
stoker_trainer_client_duplicates(const stoker_trainer_client *tc)
{
    return tc->duplicates;
}

const char *
stoker_trainer_client_delivery(const stoker_trainer_client *tc)
{
    return tc->arena != NULL && tc->arena_batches > 0 ? "shm" : "socket";
}

void
stoker_trainer_client_batches_by_path(const stoker_trainer_client *tc, uint64_t *shm,
                                      uint64_t *socket, uint64_t *arena_full)
{
    if (shm != NULL)
        *shm = tc->arena_batches;
    if (socket != NULL)
        *socket = tc->socket_batches;
    if (arena_full != NULL)
        *arena_full = tc->arena_full_batches;
}
