// stoker_err names and messages, and stoker_errorf, the one way a failure's message is written.
// Plain C, no nng (its codes are translated in error_nng.c): the trainer core, which the GPU
// machine builds without nng, compiles this file too.
#include <stdarg.h>
#include <stdio.h>

#include "stoker/error.h"

static const struct {
    const char *name;
    const char *text;
} errors[STOKER_ERR_COUNT] = {
    [STOKER_OK] = {"ok", "success"},
    [STOKER_RETRY] = {"retry", "broker busy (queue full), retry"},
    [STOKER_NO_PRODUCERS] = {"no_producers", "every producer is gone and nothing is queued"},
    [STOKER_END_OF_DATA] = {"end_of_data", "every producer finished and nothing is queued"},
    [STOKER_INVALID] = {"invalid", "invalid request or argument"},
    [STOKER_SCHEMA_MISMATCH] = {"schema_mismatch", "schema mismatch"},
    [STOKER_UNAUTHENTICATED] = {"unauthenticated", "authentication failed"},
    [STOKER_UNKNOWN_PEER] = {"unknown_peer", "session unknown to the broker"},
    [STOKER_SEQ_GAP] = {"seq_gap", "push starts beyond the next expected seq"},
    [STOKER_NOT_FOUND] = {"not_found", "unknown or already acknowledged lease"},
    [STOKER_TOO_LARGE] = {"too_large", "over a size limit"},
    [STOKER_LIMIT] = {"limit", "too many peers"},
    [STOKER_NOMEM] = {"nomem", "out of memory"},
    [STOKER_TIMEOUT] = {"timeout", "timed out"},
    [STOKER_CLOSED] = {"closed", "closed"},
    [STOKER_CONNECTION] = {"connection", "connection failed or lost"},
    [STOKER_STALLED] = {"stalled", "no data within the stall timeout"},
    [STOKER_INTERRUPTED] = {"interrupted", "interrupted"},
    [STOKER_IO] = {"io", "input/output error"},
    [STOKER_DEVICE] = {"device", "device error"},
    [STOKER_INTERNAL] = {"internal", "internal error"},
    [STOKER_DATASET_MISMATCH] = {"dataset_mismatch", "dataset differs from the broker's"},
    [STOKER_SHARD_REVOKED] = {"shard_revoked", "items were given to another producer"},
    [STOKER_TLS] = {"tls", "TLS handshake with the broker failed"},
    [STOKER_GROUP_BROKEN] = {"group_broken",
                             "a rank of the group died or left: the group is broken"},
};

const char *
stoker_strerror(int err)
{
    if (err < 0 || err >= STOKER_ERR_COUNT || errors[err].text == NULL)
        return "unknown error";
    return errors[err].text;
}

const char *
stoker_errname(int err)
{
    if (err < 0 || err >= STOKER_ERR_COUNT || errors[err].name == NULL)
        return "unknown";
    return errors[err].name;
}

int
stoker_errorf(char *err, size_t err_len, int code, const char *fmt, ...)
{
    if (err != NULL && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}
