// The producer loop: fill a chunk, push it until acknowledged, repeat; goodbye at the end.
// Generation and pushing overlap: the calling thread fills one chunk while a pusher thread
// (producer_pipeline.c) sends the previous one. When a chunk is closed is chunk_policy.c's
// call. A dataset's loop is producer_dataset.c.
#include <string.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/producer.h"
#include "stoker/producer_client.h"
#include "chunk_policy.h"
#include "producer_dataset.h"
#include "producer_pipeline.h"
#include "producer_stop.h"

void
stoker_producer_config_init(stoker_producer_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    stoker_client_options_init(&cfg->client);
    cfg->chunk = STOKER_CHUNK_AUTO;
    // 256 KiB: a push of it costs nng's per-message overhead (~100 us) once for thousands of
    // small examples, and stays far below the broker's --max-message; 5 ms: an example waits at
    // most that long for the others of its chunk (one that takes longer goes out on its own).
    cfg->chunk_bytes = 256u << 10;
    cfg->chunk_ms = 5;
    // 8 MiB: a batch of 32 images of 224x224x3 bytes (4.8 MB) is one chunk, and a producer's
    // two chunks in the making stay a small part of what the broker's queues hold (--max-bytes,
    // 1 GiB by default).
    cfg->chunk_batch_bytes = 8u << 20;
    cfg->retain = STOKER_RETAIN_AUTO;
    // A producer outlives a broker restart, however long it takes to come back within reason:
    // it waits with what it retains (stoker-producer --broker-wait).
    cfg->client.give_up_ms = STOKER_PRODUCER_BROKER_WAIT_MS;
}

int
stoker_producer_run(const stoker_producer_config *cfg, const stoker_generator *gen,
                    stoker_producer_stats *stats)
{
    stoker_producer_stats st = {0};
    uint64_t refused_before = stoker_generator_refused();
    uint64_t start_ns = stoker_now_ns();
    const volatile int *user_stop = cfg->client.stop;
    stoker_client_options copts = cfg->client;
    // The client watches the signal flag; the caller's flag is checked here between examples.
    copts.stop = stoker_producer_stop_flag();
    const char *name = copts.name != NULL ? copts.name : "producer";
    int rv;

    if (cfg->chunk > STOKER_CHUNK_MAX ||
        (cfg->chunk == STOKER_CHUNK_AUTO && (cfg->chunk_bytes == 0 || !(cfg->chunk_ms > 0))) ||
        (gen->n_items > 0 ? gen->fill_item == NULL : gen->fill == NULL)) {
        stoker_error("producer: chunk must be 1..%u or STOKER_CHUNK_AUTO (with chunk_bytes and "
                     "chunk_ms above 0), and the generator needs a fill function",
                     STOKER_CHUNK_MAX);
        return STOKER_INVALID;
    }
    if (cfg->handle_signals)
        producer_stop_on_signals();
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
    stoker_producer_client_set_labels(pc, gen->labels);
    stoker_producer_client_set_retain(pc, gen->n_items > 0 ? 0 : cfg->retain);
    // Two pushes in flight where the push stream and retention allow: goodbye below reads the
    // last answer, and its count is the broker's.
    stoker_producer_client_set_pipelined(pc, 1);
    if ((rv = stoker_producer_client_hello(pc)) != STOKER_OK) {
        // No broker within --broker-wait was said by the client; a refusal is the broker's word.
        if (rv == STOKER_TLS)
            stoker_error("producer '%s': %s", name, stoker_producer_client_error(pc));
        else if (rv != STOKER_CONNECTION && rv != STOKER_INTERRUPTED)
            stoker_error("producer '%s': broker refused hello: %s (%s)", name, stoker_strerror(rv),
                         stoker_producer_client_error(pc));
        goto out;
    }
    stoker_info("producer '%s' connected to %s as producer %u (generator %s)", name, copts.url,
                stoker_producer_client_id(pc), gen->kind != NULL ? gen->kind : "custom");
    chunk_policy cp;
    if ((rv = chunk_policy_init(&cp, cfg, &gen->schema, stoker_producer_client_max_chunk(pc),
                                name)) != STOKER_OK)
        goto out;
    if (gen->n_items > 0) {
        rv = producer_dataset_run(cfg, gen, pc, &cp, &st);
        goto out;
    }
    producer_pipeline *pl;
    if ((rv = producer_pipeline_create(pc, &gen->schema, cp.capacity, name, &pl)) != STOKER_OK)
        goto out;
    uint64_t seq = stoker_producer_client_next_seq(pc), generated = 0;
    int gen_rv = STOKER_OK;
    while (gen_rv == STOKER_OK && !producer_stop_requested(user_stop)) {
        chunk_policy_fit_batch(&cp, stoker_producer_client_batch_examples(pc));
        stoker_chunk *chunk = producer_pipeline_free_chunk(pl, cp.capacity);
        if (chunk == NULL)
            break; // the pusher stopped
        uint32_t n = cp.capacity < chunk->capacity ? cp.capacity : chunk->capacity;
        if (cfg->max_examples > 0) {
            if (generated >= cfg->max_examples)
                break;
            if (cfg->max_examples - generated < n)
                n = (uint32_t)(cfg->max_examples - generated);
        }
        chunk->count = 0;
        chunk_policy_begin(&cp);
        // One example at a time, so a stop request is seen between examples, and the chunk
        // closes at its byte budget or time bound (chunk_policy.h). The time spent making them
        // is the producer's supply in the broker's autoscale signal.
        uint64_t make_from_us = stoker_now_ns() / 1000;
        for (uint32_t i = 0; i < n && gen_rv == STOKER_OK && !producer_stop_requested(user_stop);
             i++) {
            gen_rv = stoker_generator_fill_chunk(gen, chunk, 1, seq + i, cfg->seed, name);
            if (gen_rv == STOKER_OK && chunk_policy_close(&cp, chunk->count))
                break;
        }
        stoker_producer_client_add_make_us(pc, (stoker_now_ns() / 1000) - make_from_us);
        // Read before the chunk is handed over: once submitted, the pusher may push it and give
        // its buffers to retention (the chunk then holds other buffers, count 0).
        uint32_t made = chunk->count;
        if (made > 0) {
            (void)producer_pipeline_submit(pl, seq, NULL, 0);
            seq += made;
            generated += made;
        }
    }
    rv = producer_pipeline_finish(pl, &st);
    if (rv == STOKER_INTERRUPTED) {
        rv = STOKER_OK; // stopped while the broker had no room: the pusher logged it
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
    if (cfg->linger_ms > 0 && !producer_stop_requested(user_stop)) {
        rv = stoker_producer_client_drain(pc, cfg->linger_ms);
        if (rv == STOKER_CONNECTION)
            goto out; // the broker stayed away past --broker-wait: said, with what is lost
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
    } else if (stoker_producer_client_next_seq(pc) < acked_seq) {
        // The last push went out (pipelined) but was not taken: its answer was abandoned on a
        // stop, or never came. The count is the broker's.
        uint64_t lost = acked_seq - stoker_producer_client_next_seq(pc);
        stoker_info("producer '%s': the broker did not take seq %llu..%llu (the last push, sent "
                    "before goodbye)",
                    name, (unsigned long long)(acked_seq - lost),
                    (unsigned long long)(acked_seq - 1));
        st.examples = st.examples > lost ? st.examples - lost : 0;
        st.pushes -= st.pushes > 0;
    }
    rv = STOKER_OK;
    st.refused = stoker_generator_refused() - refused_before;
    stoker_info("producer '%s' finished: %llu example%s in %llu push%s, %llu refused (a value "
                "over its bound) (%s)",
                name, (unsigned long long)st.examples, st.examples == 1 ? "" : "s",
                (unsigned long long)st.pushes, st.pushes == 1 ? "" : "es",
                (unsigned long long)st.refused,
                producer_stop_requested(user_stop) ? "stopped"
                : gen_rv == STOKER_END_OF_DATA     ? "generator ended"
                                                   : "max examples reached");
out:
    stoker_producer_client_destroy(pc);
    st.refused = stoker_generator_refused() - refused_before;
    st.seconds = (double)(stoker_now_ns() - start_ns) / 1e9;
    if (stats != NULL)
        *stats = st;
    return rv;
}
