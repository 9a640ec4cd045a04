// TLS settings for nng endpoints (see tls.h): what callers check before starting anything, the
// nng TLS configuration built from PEM files (stoker_tls_config_create in the private
// tls_config.h, used by conn.c for dialers) and its public use on a listener (the broker's).
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/tls.h"

int
stoker_tls_url(const char *url)
{
    return url != NULL && strncmp(url, "tls+tcp://", 10) == 0;
}

static int
readable(const char *what, const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, err_len, "%s '%s': %s", what, path, strerror(errno));
        return STOKER_INVALID;
    }
    fclose(f);
    return STOKER_OK;
}

int
stoker_tls_check(const stoker_tls_options *tls, int listener, char *err, size_t err_len)
{
    if ((tls->cert == NULL) != (tls->key == NULL)) {
        snprintf(err, err_len, "--tls-cert and --tls-key go together");
        return STOKER_INVALID;
    }
    if (listener && tls->cert == NULL) {
        snprintf(err, err_len, "a tls+tcp:// listener needs --tls-cert and --tls-key");
        return STOKER_INVALID;
    }
    if (!listener && tls->ca == NULL && !tls->insecure) {
        snprintf(err, err_len,
                 "a tls+tcp:// broker is verified against a CA: give --tls-ca with the CA "
                 "certificate (PEM) that signed the broker's (or --tls-insecure to encrypt "
                 "without verifying the broker, which anyone in the middle can then pose as)");
        return STOKER_INVALID;
    }
    if (!listener && tls->ca != NULL && tls->insecure) {
        snprintf(err, err_len, "--tls-insecure and --tls-ca contradict each other: give one");
        return STOKER_INVALID;
    }
    if ((tls->cert != NULL && readable("--tls-cert", tls->cert, err, err_len) != STOKER_OK) ||
        (tls->key != NULL && readable("--tls-key", tls->key, err, err_len) != STOKER_OK) ||
        (tls->ca != NULL && readable("--tls-ca", tls->ca, err, err_len) != STOKER_OK))
        return STOKER_INVALID;
    return STOKER_OK;
}

// --- nng configuration ------------------------------------------------------------------------

#include <stdlib.h>

#include "tls_config.h"

static char *
slurp(const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_len, "'%s': %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (cap + 4096) * 2;
            if (cap > (1u << 22)) { // 4 MiB: no PEM file is that big
                snprintf(err, err_len, "'%s': too large for a PEM file", path);
                free(buf);
                fclose(f);
                return NULL;
            }
            char *nb = realloc(buf, cap);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                snprintf(err, err_len, "out of memory");
                return NULL;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, 4096, f);
        len += n;
        if (n < 4096)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

int
stoker_tls_config_create(const stoker_tls_options *tls, int server, const char *server_name,
                         nng_tls_config **out, char *err, size_t err_len)
{
    nng_tls_config *cfg;
    char *cert = NULL, *key = NULL, *ca = NULL;
    int rv;
    if ((rv = stoker_tls_check(tls, server, err, err_len)) != STOKER_OK)
        return rv;
    rv = nng_tls_config_alloc(&cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT);
    if (rv != 0) {
        snprintf(err, err_len, "TLS unavailable: %s", nng_strerror(rv));
        return STOKER_INVALID;
    }
    if (tls->cert != NULL) {
        if ((cert = slurp(tls->cert, err, err_len)) == NULL ||
            (key = slurp(tls->key, err, err_len)) == NULL)
            goto fail;
        if ((rv = nng_tls_config_own_cert(cfg, cert, key, NULL)) != 0) {
            snprintf(err, err_len, "--tls-cert/--tls-key refused: %s", nng_strerror(rv));
            goto fail;
        }
    }
    if (tls->ca != NULL) {
        if ((ca = slurp(tls->ca, err, err_len)) == NULL)
            goto fail;
        if ((rv = nng_tls_config_ca_chain(cfg, ca, NULL)) != 0) {
            snprintf(err, err_len, "--tls-ca refused: %s", nng_strerror(rv));
            goto fail;
        }
        if (!server && server_name != NULL && server_name[0] != '\0' &&
            (rv = nng_tls_config_server_name(cfg, server_name)) != 0) {
            snprintf(err, err_len, "TLS server name '%s': %s", server_name, nng_strerror(rv));
            goto fail;
        }
        nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED);
    } else {
        // A listener without a CA, or a client told --tls-insecure: encryption only (the peer
        // is not checked; stoker_tls_check refused a client that asked for neither).
        nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);
    }
    free(cert);
    free(key);
    free(ca);
    *out = cfg;
    return STOKER_OK;
fail:
    free(cert);
    free(key);
    free(ca);
    nng_tls_config_free(cfg);
    return STOKER_INVALID;
}

int
stoker_tls_listener_set(nng_listener l, const char *url, const stoker_tls_options *tls, char *err,
                        size_t err_len)
{
    nng_tls_config *cfg;
    int rv;
    if ((rv = stoker_tls_config_create(tls, 1, NULL, &cfg, err, err_len)) != STOKER_OK)
        return rv;
    rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
    nng_tls_config_free(cfg); // the listener holds its own reference
    if (rv != 0) {
        snprintf(err, err_len, "--listen '%s': TLS: %s", url, nng_strerror(rv));
        return stoker_err_from_nng(rv);
    }
    return STOKER_OK;
}
