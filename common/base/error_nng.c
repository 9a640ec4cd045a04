// The translation of nng's error codes into stoker_err (see stoker/error.h), apart from error.c
// so that file builds where nng does not exist.
#include <nng/nng.h>

#include "stoker/error.h"

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
