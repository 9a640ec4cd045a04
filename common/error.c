// stoker_err names and messages, and the translation of nng's codes.
#include <nng/nng.h>

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

stoker_err
stoker_err_from_nng(int rv)
{
    switch (rv) {
    case 0:
        return STOKER_OK;
    case NNG_ENOMEM:
        return STOKER_NOMEM;
    case NNG_ETIMEDOUT:
        return STOKER_TIMEOUT;
    case NNG_ECLOSED:
    case NNG_ECANCELED:
        return STOKER_CLOSED;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP:
        return STOKER_INVALID;
    case NNG_EMSGSIZE:
        return STOKER_TOO_LARGE;
    case NNG_EINTR:
        return STOKER_INTERRUPTED;
    default:
        return STOKER_CONNECTION;
    }
}
