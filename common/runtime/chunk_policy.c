// Closing chunks (see chunk_policy.h). The time bound is measured from when the chunk's first
// example was begun, so an example that alone takes longer than the bound is pushed as soon as
// it is made: the reference workload (tens of ms per example) pushes every example on its own.
#include "chunk_policy.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

#define CHECK_NS 1000u // estimated work between two reads of the clock (a read costs ~25 ns)
#define STEP_MAX 64u

// Rows a value of an unbounded variable field is taken to have when sizing chunks.
#define UNBOUNDED_ROWS_ESTIMATE 1024u

// Bytes one example is taken to hold when sizing chunks: its fixed fields, and a variable field
// at its bound (so a bounded schema's chunk never passes chunk_bytes), or at
// UNBOUNDED_ROWS_ESTIMATE rows, plus its 8 bytes of offsets.
static size_t
example_estimate(const stoker_schema *schema)
{
    size_t bytes = stoker_schema_example_bytes(schema);
    for (uint32_t i = 0; i < schema->n_fields; i++) {
        const stoker_field *f = &schema->fields[i];
        if (f->variable)
            bytes += 8 + (size_t)(f->max_rows ? f->max_rows : UNBOUNDED_ROWS_ESTIMATE) *
                             stoker_field_row_bytes(f);
    }
    return bytes;
}

uint32_t
stoker_producer_chunk_capacity(const stoker_producer_config *cfg, const stoker_schema *schema)
{
    if (cfg->chunk != STOKER_CHUNK_AUTO)
        return cfg->chunk;
    size_t example = example_estimate(schema);
    uint64_t n = example > 0 ? cfg->chunk_bytes / example : STOKER_CHUNK_MAX;
    return n < 1 ? 1 : n > STOKER_CHUNK_MAX ? STOKER_CHUNK_MAX : (uint32_t)n;
}

int
chunk_policy_init(chunk_policy *cp, const stoker_producer_config *cfg, const stoker_schema *schema,
                  uint32_t broker_max, const char *name)
{
    *cp = (chunk_policy){.capacity = stoker_producer_chunk_capacity(cfg, schema)};
    if (cfg->chunk != STOKER_CHUNK_AUTO) {
        if (broker_max > 0 && cfg->chunk > broker_max) {
            stoker_error("producer '%s': chunks of %u examples (--chunk) are more than the broker "
                         "takes in one push, %u (its --max-chunk, a fixed --queue-depth, "
                         "--max-bytes or --max-message): use --chunk %u or less, or leave "
                         "--chunk out (chunks sized by bytes and time)",
                         name, cfg->chunk, broker_max, broker_max);
            return STOKER_TOO_LARGE;
        }
        stoker_info("producer '%s': chunks of %u examples (--chunk)", name, cp->capacity);
        return STOKER_OK;
    }
    if (broker_max > 0 && cp->capacity > broker_max)
        cp->capacity = broker_max;
    cp->bytes_capacity = cp->capacity;
    cp->broker_max = broker_max;
    cp->example_bytes = example_estimate(schema);
    cp->batch_bytes = cfg->chunk_batch_bytes;
    cp->name = name;
    cp->bound_ns = (uint64_t)(cfg->chunk_ms * 1e6);
    if (cp->bound_ns == 0)
        cp->bound_ns = 1;
    stoker_info("producer '%s': chunks sized: up to %u examples (%llu bytes, --chunk-bytes %llu) "
                "or %g ms (--chunk-ms), whichever first",
                name, cp->capacity, (unsigned long long)cp->capacity * example_estimate(schema),
                (unsigned long long)cfg->chunk_bytes, cfg->chunk_ms);
    return STOKER_OK;
}

void
chunk_policy_fit_batch(chunk_policy *cp, uint32_t batch)
{
    if (cp->bytes_capacity == 0 || batch == cp->batch)
        return;
    cp->batch = batch;
    uint64_t cap = cp->bytes_capacity;
    if (batch > cap && cp->batch_bytes > 0) {
        // A batch too large for chunk_batch_bytes goes in equal shares, so that each batch is
        // still a whole number of chunks.
        uint64_t bytes = (uint64_t)batch * (cp->example_bytes > 0 ? cp->example_bytes : 1);
        uint64_t shares = (bytes + cp->batch_bytes - 1) / cp->batch_bytes;
        uint64_t share = (batch + shares - 1) / shares;
        if (share > cap)
            cap = share;
    }
    if (cp->broker_max > 0 && cap > cp->broker_max)
        cap = cp->broker_max;
    if (cap > STOKER_CHUNK_MAX)
        cap = STOKER_CHUNK_MAX;
    if (cap == cp->capacity)
        return;
    cp->capacity = (uint32_t)cap;
    if (cap > cp->bytes_capacity)
        stoker_info("producer '%s': chunks sized: up to %u examples (%llu bytes), for the "
                    "trainers' batches of %u (--chunk-batch-bytes %llu), or %g ms",
                    cp->name, cp->capacity, (unsigned long long)(cap * cp->example_bytes), batch,
                    (unsigned long long)cp->batch_bytes, cp->bound_ns / 1e6);
    else
        stoker_info("producer '%s': chunks sized: up to %u examples (--chunk-bytes), the "
                    "trainers' batches being %u",
                    cp->name, cp->capacity, batch);
}

void
chunk_policy_begin(chunk_policy *cp)
{
    if (cp->bound_ns == 0)
        return;
    cp->start_ns = stoker_now_ns();
    cp->next_check = 1;
}

int
chunk_policy_close(chunk_policy *cp, uint32_t count)
{
    if (count >= cp->capacity)
        return 1;
    if (cp->bound_ns == 0 || count < cp->next_check)
        return 0;
    uint64_t elapsed = stoker_now_ns() - cp->start_ns;
    if (elapsed >= cp->bound_ns)
        return 1;
    // The next read after about CHECK_NS of work at this chunk's pace so far: every example
    // when examples cost a microsecond or more.
    uint64_t per = elapsed / count;
    uint64_t step = per >= CHECK_NS ? 1 : per == 0 ? STEP_MAX : CHECK_NS / per;
    cp->next_check = count + (uint32_t)(step > STEP_MAX ? STEP_MAX : step);
    return 0;
}
