// The producer loop: fill a chunk, push it until acknowledged, repeat; goodbye at the end.
// Generation of the next chunk does not overlap the push of the previous one: pushes are
// short next to generation in every workload stoker targets, and one chunk in flight keeps the
// seq bookkeeping trivial.
#include <signal.h>
#include <string.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/producer.h"
#include "stoker/producer_client.h"

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

    if (cfg->chunk == 0 || gen->fill == NULL) {
        stoker_error("producer: chunk must be at least 1 and the generator needs a fill function");
        return STOKER_INVALID;
    }
    if (cfg->handle_signals) {
        struct sigaction sa = {0};
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
    }
    stoker_producer_client *pc;
    if ((rv = stoker_producer_client_create(&copts, &gen->schema, &pc)) != STOKER_OK) {
        stoker_error("producer '%s': cannot start a client for %s: %s", name,
                     copts.url ? copts.url : "(no URL)", stoker_strerror(rv));
        return rv;
    }
    if ((rv = stoker_producer_client_hello(pc)) != STOKER_OK) {
        stoker_error("producer '%s': broker refused hello: %s (%s)", name, stoker_strerror(rv),
                     stoker_producer_client_error(pc));
        goto out;
    }
    stoker_info("producer '%s' connected to %s as producer %u (generator %s)", name, copts.url,
                stoker_producer_client_id(pc), gen->kind != NULL ? gen->kind : "custom");
    stoker_chunk chunk;
    if ((rv = stoker_chunk_init(&chunk, &gen->schema, cfg->chunk)) != STOKER_OK)
        goto out;

    int gen_rv = STOKER_OK;
    while (gen_rv == STOKER_OK && !should_stop(&stop)) {
        uint64_t first_seq = stoker_producer_client_next_seq(pc);
        uint32_t n = cfg->chunk;
        if (cfg->max_examples > 0) {
            if (st.examples >= cfg->max_examples)
                break;
            if (cfg->max_examples - st.examples < n)
                n = (uint32_t)(cfg->max_examples - st.examples);
        }
        chunk.count = 0;
        // One example at a time, so a stop request is seen between examples.
        for (uint32_t i = 0; i < n && gen_rv == STOKER_OK && !should_stop(&stop); i++)
            gen_rv = stoker_generator_fill_chunk(gen, &chunk, 1, first_seq + i, cfg->seed, name);
        if (chunk.count > 0) {
            rv = stoker_producer_client_push(pc, &chunk, first_seq);
            if (rv == STOKER_INTERRUPTED) {
                // Stopped while the broker had no room: this chunk was not accepted (the seq
                // rule makes that exact), everything before it was. Finish cleanly.
                stoker_info("producer '%s': stopped with seq %llu.. not accepted (queue full)",
                            name, (unsigned long long)first_seq);
                break;
            }
            if (rv != STOKER_OK) {
                stoker_error("producer '%s': push of seq %llu failed: %s (%s)", name,
                             (unsigned long long)first_seq, stoker_strerror(rv),
                             stoker_producer_client_error(pc));
                stoker_chunk_fini(&chunk);
                goto out;
            }
            st.examples += chunk.count;
            st.pushes++;
        }
    }
    stoker_chunk_fini(&chunk);
    if (gen_rv == STOKER_INTERRUPTED)
        gen_rv = STOKER_OK; // a stop while generating: what was made is pushed
    if (gen_rv != STOKER_OK && gen_rv != STOKER_END_OF_DATA) {
        stoker_error("producer '%s': generator failed after %llu examples: %s", name,
                     (unsigned long long)st.examples, stoker_strerror(gen_rv));
        rv = gen_rv;
        goto out;
    }
    if ((rv = stoker_producer_client_goodbye(pc)) != STOKER_OK)
        stoker_warn("producer '%s': goodbye not acknowledged: %s", name, stoker_strerror(rv));
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
