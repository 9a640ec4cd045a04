// Batching of variable-length data (stoker/batching.h): the checks and the row arithmetic the
// broker and the consumers share, so that both count a batch's rows the same way.
#include "stoker/batching.h"

#include "stoker/error.h"

int
stoker_batching_active(const stoker_batching *batching)
{
    return batching->max_tokens > 0 || batching->buckets || batching->pack > 0;
}

int
stoker_batching_check(const stoker_batching *batching, const stoker_schema *schema,
                      uint32_t batch_size, char *err, size_t err_len)
{
    if (batching->pack > 0 && batching->max_tokens > 0)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "batching: pack=%u and max_tokens=%u together: a packed batch's "
                             "budget is its rows (batch_size=%u) x pack; give one of them",
                             batching->pack, batching->max_tokens, batch_size);
    if (batching->pack_whole && batching->pack == 0)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "batching: whole sequences per row asked for without pack= (the "
                             "row length)");
    if (batching->pack > 0 && batching->buckets)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "batching: buckets with pack=%u: packed rows have no padding to "
                             "save; give one of them",
                             batching->pack);
    if (batching->pack > 0 && (uint64_t)batching->pack * batch_size > UINT32_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "batching: %u rows of pack=%u tokens is more than 2^32 tokens",
                             batch_size, batching->pack);
    if (schema != NULL && stoker_batching_active(batching) &&
        stoker_schema_first_variable(schema) < 0)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "batching: %s needs a variable-length field (e.g. tokens:int32[?]) "
                             "to count tokens in, and the schema has none",
                             batching->pack > 0         ? "pack="
                             : batching->max_tokens > 0 ? "max_tokens="
                                                        : "buckets");
    return STOKER_OK;
}

uint64_t
stoker_batching_budget(const stoker_batching *batching, uint32_t batch_size)
{
    if (batching->pack > 0)
        return (uint64_t)batching->pack * batch_size;
    return batching->max_tokens;
}

uint64_t
stoker_pack_rows(const uint64_t *lengths, uint32_t n, uint32_t pack, int whole)
{
    if (pack == 0)
        return 0;
    uint64_t rows = 0, used = 0; // used: tokens in the current (last) row
    for (uint32_t i = 0; i < n; i++) {
        uint64_t len = lengths[i];
        if (!whole) {
            used += len;
            continue;
        }
        if (rows > 0 && used + len <= pack) {
            used += len;
            continue;
        }
        // A new row; a sequence longer than a row takes as many as it needs.
        rows += len == 0 ? 1 : (len + pack - 1) / pack;
        used = len == 0 ? 0 : len - (len - 1) / pack * pack;
    }
    if (!whole)
        return (used + pack - 1) / pack;
    return rows;
}
