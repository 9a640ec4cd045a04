// Running a generator as a producer: the loop every stoker producer uses, the built-in
// generators and yours. It connects, fills chunks, pushes them (idempotent by seq, so retries,
// RETRY answers and reconnects never duplicate or lose examples), and says goodbye when done.
//
//   stoker_producer_config cfg;
//   stoker_producer_config_init(&cfg);
//   cfg.client.url = "tcp://gpu-box:7070";
//   cfg.client.name = "aug-1";
//   stoker_generator gen = {.kind = "mine", .schema = schema, .fill = my_fill, .user = &state};
//   return stoker_producer_run(&cfg, &gen, NULL) == STOKER_OK ? 0 : 1;
#ifndef STOKER_PRODUCER_H
#define STOKER_PRODUCER_H

#include <stdint.h>

#include "stoker/client.h"
#include "stoker/generator.h"

// How long a producer waits for a broker that does not answer (at the start, or gone mid-run),
// with what it retains, before it gives up: client.give_up_ms's default here.
#define STOKER_PRODUCER_BROKER_WAIT_MS 600000u

#define STOKER_CHUNK_AUTO 0
#define STOKER_CHUNK_MAX  (1u << 20) // examples in one chunk, at most (the broker's --max-chunk)

typedef struct stoker_producer_config {
    // url (required), name, token, session, stop; give_up_ms: how long to wait for a broker
    // that does not answer (default STOKER_PRODUCER_BROKER_WAIT_MS, stoker-producer
    // --broker-wait).
    stoker_client_options client;
    // Chunks (docs/running.md#chunks): chunk N > 0 fixes the examples per push (stoker-producer
    // --chunk N). STOKER_CHUNK_AUTO (0, the default) sizes them: a chunk closes once it holds
    // chunk_bytes of examples (default 256 KiB) or chunk_ms after its first example was begun
    // (default 5 ms), whichever comes first, and never beyond what the broker takes in one push.
    // A cheap generator fills large chunks; an example that takes longer than chunk_ms to make
    // leaves on its own as soon as it is made. When the broker's trainers take batches of more
    // examples than chunk_bytes holds (its push replies say how many), a chunk holds one batch
    // instead, or an equal share of one, within chunk_batch_bytes (default 8 MiB; 0: chunks
    // follow chunk_bytes alone): a batch is then one or a few chunks, delivered with no
    // reassembly, and chunk_ms still bounds how long an example waits.
    uint32_t chunk;
    uint64_t chunk_bytes;
    double chunk_ms;
    uint64_t max_examples; // stop after this many (0: until the generator ends or stop)
    uint64_t seed;         // run seed; example seeds derive from (seed, name, seq)
    int handle_signals;    // install SIGINT/SIGTERM handlers that stop the run cleanly
    // Retention (see producer_client.h): pushed examples are kept until trained, at most this
    // many (0: off; default STOKER_RETAIN_AUTO, twice the broker's queue depth), so a broker
    // restart loses nothing. linger_ms: before goodbye, wait up to this long until everything
    // pushed is trained (default 0: a broker that dies after the goodbye loses what it held).
    uint32_t retain;
    uint32_t linger_ms;
    uint64_t chunk_batch_bytes; // with STOKER_CHUNK_AUTO: see chunk above
} stoker_producer_config;

typedef struct stoker_producer_stats {
    uint64_t examples; // pushed and acknowledged by the broker
    uint64_t pushes;
    uint64_t refused; // not pushed: a variable-length value over its bound (generator.h)
    double seconds;
} stoker_producer_stats;

void stoker_producer_config_init(stoker_producer_config *cfg);

// The examples a chunk of cfg may hold for schema, before the broker's limit: chunk when fixed,
// else chunk_bytes' worth (at least 1, at most STOKER_CHUNK_MAX).
uint32_t stoker_producer_chunk_capacity(const stoker_producer_config *cfg,
                                        const stoker_schema *schema);

// The flag the signal handlers set (nonzero after SIGINT/SIGTERM when handle_signals is on).
// Generators with long waits may watch it.
const volatile int *stoker_producer_stop_flag(void);

// A generator with n_items > 0 serves a dataset: the broker (started with --dataset-size) hands
// out shards of (epoch, index) items; each is made with gen->fill_item and pushed carrying its
// item, until the broker's last epoch is made (then goodbye and STOKER_OK) or a stop. A shard
// the broker took back (this producer was taken for lost) is dropped for a new one. chunk,
// stop, signals and errors work as below; max_examples and seed do not apply; a chunk never
// holds items of two shards.
//
// Runs gen (borrowed) until max_examples were pushed, the generator returns STOKER_END_OF_DATA,
// or a stop is requested: then pushes what was made, says goodbye (the broker reports the
// producer finished) and returns STOKER_OK. After a stop, what the broker cannot take at once
// (its queue is full, or it is unreachable) is not waited for: pushing ends within about 50 ms
// of the stop, and stats count what the broker accepted (exactly, once it answered goodbye). A
// generator error pushes the good examples made before it and returns the error without goodbye
// (the broker reports the producer lost).
// A broker that does not answer (not started yet, or gone mid-run) is waited for with what is
// retained, said in the log, up to client.give_up_ms from its first failed request; then
// STOKER_CONNECTION (said, with how many retained examples are lost).
// stats (may be NULL) is written in every case.
int stoker_producer_run(const stoker_producer_config *cfg, const stoker_generator *gen,
                        stoker_producer_stats *stats);

#endif
