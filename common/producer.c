// The producer loop: fill a chunk, push it until acknowledged, repeat; goodbye at the end.
// Generation and pushing overlap: the calling thread fills one chunk, and encodes its push,
// while a pusher thread sends the previous one (two chunks, double-buffered), so a CPU-bound
// generator keeps its core busy instead of idling for each push's round trip, and the pusher's
// path holds no copy of the examples (retention keeps the pushed chunk's own buffers). Pushes still
// go out one at a time and in seq order, so the broker's seq rule works as with a single chunk in
// flight.
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/producer.h"
#include "stoker/producer_client.h"
#include "producer_dataset.h"

static volatile int signal_stop;

static void
on_signal(int sig)
{
    (void)sig;
    signal_stop = 1;
}

const volatile int *
stoker_producer_stop_flag(void)
{
    return &signal_stop;
}

void
stoker_producer_config_init(stoker_producer_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    stoker_client_options_init(&cfg->client);
    cfg->chunk = 3;
    cfg->retain = STOKER_RETAIN_AUTO;
}

// A stop flag that watches both the caller's and the signal handler's.
typedef struct stops {
    const volatile int *user;
} stops;

static int
should_stop(const stops *s)
{
    return signal_stop || (s->user != NULL && *s->user);
}

// --- the pusher thread ---------------------------------------------------------------------------

typedef struct pipeline {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stoker_chunk chunks[2];
    uint64_t first_seq[2];
    int full[2];       // filled and waiting for (or in) its push
    int fill, push;    // the next chunk to fill, the next to push
    int done;          // no more chunks will come
    int rv;            // the pusher's failure (it then stops), STOKER_OK while it works
    uint64_t examples; // acknowledged by the broker
    uint64_t pushes;
    stoker_producer_client *pc;
    const char *name;
    pthread_t thread;
} pipeline;

// Pushes chunk from first_seq. Normally first_seq is the client's next seq; when the broker
// already holds part of the chunk (it answered a hello with a later seq) only the rest is sent.
static int
push_chunk(pipeline *pl, stoker_chunk *chunk, uint64_t first_seq)
{
    uint64_t next = stoker_producer_client_next_seq(pl->pc);
    if (next >= first_seq + chunk->count)
        return STOKER_OK;  // all of it is held already
    if (next <= first_seq) // the whole chunk: retention may keep its buffers rather than a copy
        return stoker_producer_client_push_owned(pl->pc, chunk, first_seq);
    stoker_chunk view = *chunk;
    view.owns_data = 0;
    if (next > first_seq) {
        uint32_t skip = (uint32_t)(next - first_seq);
        for (uint32_t f = 0; f < view.schema.n_fields; f++)
            view.data[f] += (size_t)skip * stoker_field_bytes(&view.schema.fields[f]);
        view.count -= skip;
        first_seq = next;
    }
    return stoker_producer_client_push(pl->pc, &view, first_seq);
}

static void *
pusher_main(void *arg)
{
    pipeline *pl = arg;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (!pl->full[pl->push] && !pl->done)
            pthread_cond_wait(&pl->cv, &pl->mu);
        if (!pl->full[pl->push])
            break; // done, and everything was pushed
        stoker_chunk *chunk = &pl->chunks[pl->push];
        uint64_t first_seq = pl->first_seq[pl->push];
        uint32_t count = chunk->count; // a push may swap the chunk's buffers (retention)
        pthread_mutex_unlock(&pl->mu);
        int rv = push_chunk(pl, chunk, first_seq);
        pthread_mutex_lock(&pl->mu);
        if (rv == STOKER_INTERRUPTED) {
            // Stopped while the broker had no room (or was unreachable): the push was abandoned;
            // goodbye's answer says whether the broker took it after all.
            stoker_info("producer '%s': stopped with seq %llu.. waiting for room (queue full); "
                        "not pushing it",
                        pl->name, (unsigned long long)first_seq);
        } else if (rv != STOKER_OK) {
            stoker_error("producer '%s': push of seq %llu failed: %s (%s)", pl->name,
                         (unsigned long long)first_seq, stoker_strerror(rv),
                         stoker_producer_client_error(pl->pc));
        }
        if (rv != STOKER_OK) {
            pl->rv = rv;
            break;
        }
        pl->examples += count;
        pl->pushes++;
        pl->full[pl->push] = 0;
        pl->push ^= 1;
        pthread_cond_broadcast(&pl->cv);
    }
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

static int
pipeline_start(pipeline *pl, stoker_producer_client *pc, const stoker_schema *schema,
               uint32_t chunk, const char *name)
{
    memset(pl, 0, sizeof(*pl));
    pl->pc = pc;
    pl->name = name;
    int rv;
    if ((rv = stoker_chunk_init(&pl->chunks[0], schema, chunk)) != STOKER_OK)
        return rv;
    if ((rv = stoker_chunk_init(&pl->chunks[1], schema, chunk)) != STOKER_OK) {
        stoker_chunk_fini(&pl->chunks[0]);
        return rv;
    }
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->cv, NULL);
    if (pthread_create(&pl->thread, NULL, pusher_main, pl) != 0) {
        pthread_cond_destroy(&pl->cv);
        pthread_mutex_destroy(&pl->mu);
        stoker_chunk_fini(&pl->chunks[0]);
        stoker_chunk_fini(&pl->chunks[1]);
        return STOKER_NOMEM;
    }
    return STOKER_OK;
}

// Waits for a chunk to fill; NULL when the pusher has stopped.
static stoker_chunk *
pipeline_free_chunk(pipeline *pl)
{
    pthread_mutex_lock(&pl->mu);
    while (pl->full[pl->fill] && pl->rv == STOKER_OK)
        pthread_cond_wait(&pl->cv, &pl->mu);
    stoker_chunk *chunk = pl->rv == STOKER_OK ? &pl->chunks[pl->fill] : NULL;
    pthread_mutex_unlock(&pl->mu);
    return chunk;
}

// Hands the chunk pipeline_free_chunk returned, filled from first_seq, to the pusher.
static void
pipeline_submit(pipeline *pl, uint64_t first_seq)
{
    // Encoded here, on the generating thread, while the pusher waits on the previous push; if
    // this fails the pusher encodes it itself.
    (void)stoker_producer_client_prepare(pl->pc, &pl->chunks[pl->fill], first_seq);
    pthread_mutex_lock(&pl->mu);
    pl->first_seq[pl->fill] = first_seq;
    pl->full[pl->fill] = 1;
    pl->fill ^= 1;
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
}

// Lets the pusher push what was submitted, stops it and frees the pipeline. Returns the
// pusher's failure or STOKER_OK; adds what it pushed to *st.
static int
pipeline_finish(pipeline *pl, stoker_producer_stats *st)
{
    pthread_mutex_lock(&pl->mu);
    pl->done = 1;
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
    pthread_join(pl->thread, NULL);
    st->examples += pl->examples;
    st->pushes += pl->pushes;
    stoker_chunk_fini(&pl->chunks[0]);
    stoker_chunk_fini(&pl->chunks[1]);
    pthread_cond_destroy(&pl->cv);
    pthread_mutex_destroy(&pl->mu);
    return pl->rv;
}

int
stoker_producer_run(const stoker_producer_config *cfg, const stoker_generator *gen,
                    stoker_producer_stats *stats)
{
    stoker_producer_stats st = {0};
    uint64_t start_ns = stoker_now_ns();
    stops stop = {.user = cfg->client.stop};
    stoker_client_options copts = cfg->client;
    // The client watches the signal flag; the caller's flag is checked here between examples.
    copts.stop = &signal_stop;
    const char *name = copts.name != NULL ? copts.name : "producer";
    int rv;

    if (cfg->chunk == 0 || (gen->n_items > 0 ? gen->fill_item == NULL : gen->fill == NULL)) {
        stoker_error("producer: chunk must be at least 1 and the generator needs a fill function");
        return STOKER_INVALID;
    }
    if (cfg->handle_signals)
        stoker_process_on_stop(on_signal);
    stoker_producer_client *pc;
    if ((rv = stoker_producer_client_create(&copts, &gen->schema, &pc)) != STOKER_OK) {
        stoker_error("producer '%s': cannot start a client for %s: %s", name,
                     copts.url ? copts.url : "(no URL)", stoker_strerror(rv));
        return rv;
    }
    // A dataset's items are owned by the broker's epoch, which a restarted broker starts anew:
    // replaying retained chunks (which keep no item numbers) would not fit it, so retention is
    // for streams only.
    if (gen->n_items > 0)
        stoker_producer_client_set_dataset(pc, gen->n_items, gen->fingerprint);
    stoker_producer_client_set_retain(pc, gen->n_items > 0 ? 0 : cfg->retain);
    if ((rv = stoker_producer_client_hello(pc)) != STOKER_OK) {
        stoker_error("producer '%s': broker refused hello: %s (%s)", name, stoker_strerror(rv),
                     stoker_producer_client_error(pc));
        goto out;
    }
    stoker_info("producer '%s' connected to %s as producer %u (generator %s)", name, copts.url,
                stoker_producer_client_id(pc), gen->kind != NULL ? gen->kind : "custom");
    if (gen->n_items > 0) {
        rv = producer_dataset_run(cfg, gen, pc, &st);
        goto out;
    }
    pipeline pl;
    if ((rv = pipeline_start(&pl, pc, &gen->schema, cfg->chunk, name)) != STOKER_OK)
        goto out;
    uint64_t seq = stoker_producer_client_next_seq(pc), generated = 0;
    int gen_rv = STOKER_OK;
    while (gen_rv == STOKER_OK && !should_stop(&stop)) {
        uint32_t n = cfg->chunk;
        if (cfg->max_examples > 0) {
            if (generated >= cfg->max_examples)
                break;
            if (cfg->max_examples - generated < n)
                n = (uint32_t)(cfg->max_examples - generated);
        }
        stoker_chunk *chunk = pipeline_free_chunk(&pl);
        if (chunk == NULL)
            break; // the pusher stopped
        chunk->count = 0;
        // One example at a time, so a stop request is seen between examples.
        for (uint32_t i = 0; i < n && gen_rv == STOKER_OK && !should_stop(&stop); i++)
            gen_rv = stoker_generator_fill_chunk(gen, chunk, 1, seq + i, cfg->seed, name);
        // Read before the chunk is handed over: once submitted, the pusher may push it and give
        // its buffers to retention (the chunk then holds other buffers, count 0).
        uint32_t made = chunk->count;
        if (made > 0) {
            pipeline_submit(&pl, seq);
            seq += made;
            generated += made;
        }
    }
    rv = pipeline_finish(&pl, &st);
    if (rv == STOKER_INTERRUPTED) {
        rv = STOKER_OK; // stopped while the broker had no room: see pusher_main
    } else if (rv != STOKER_OK) {
        goto out;
    }
    if (gen_rv == STOKER_INTERRUPTED)
        gen_rv = STOKER_OK; // a stop while generating: what was made is pushed
    if (gen_rv != STOKER_OK && gen_rv != STOKER_END_OF_DATA) {
        stoker_error("producer '%s': generator failed after %llu examples: %s", name,
                     (unsigned long long)st.examples, stoker_strerror(gen_rv));
        rv = gen_rv;
        goto out;
    }
    if (cfg->linger_ms > 0 && !should_stop(&stop)) {
        rv = stoker_producer_client_drain(pc, cfg->linger_ms);
        if (rv != STOKER_OK && rv != STOKER_INTERRUPTED)
            stoker_warn("producer '%s': %llu pushed examples not reported trained after "
                        "--linger %.1f s (%s); a broker death now loses them",
                        name, (unsigned long long)stoker_producer_client_retained(pc),
                        cfg->linger_ms / 1000.0, stoker_strerror(rv));
    }
    uint64_t acked_seq = stoker_producer_client_next_seq(pc);
    if ((rv = stoker_producer_client_goodbye(pc)) != STOKER_OK)
        stoker_warn("producer '%s': goodbye not acknowledged: %s", name, stoker_strerror(rv));
    if (stoker_producer_client_next_seq(pc) > acked_seq) {
        // A push abandoned on stop had been taken: count it, so our count is the broker's.
        uint64_t taken = stoker_producer_client_next_seq(pc) - acked_seq;
        stoker_info("producer '%s': the broker had taken seq %llu..%llu before the stop", name,
                    (unsigned long long)acked_seq, (unsigned long long)(acked_seq + taken - 1));
        st.examples += taken;
        st.pushes++;
    }
    rv = STOKER_OK;
    stoker_info("producer '%s' finished: %llu examples in %llu pushes (%s)", name,
                (unsigned long long)st.examples, (unsigned long long)st.pushes,
                should_stop(&stop)             ? "stopped"
                : gen_rv == STOKER_END_OF_DATA ? "generator ended"
                                               : "max examples reached");
out:
    stoker_producer_client_destroy(pc);
    st.seconds = (double)(stoker_now_ns() - start_ns) / 1e9;
    if (stats != NULL)
        *stats = st;
    return rv;
}
