// TLS for tls+tcp:// endpoints (nng's TLS transport; Debian's nng uses mbedTLS). PEM files:
// a certificate and its key identify this end; a CA file makes this end verify its peer (a
// listener given a CA requires client certificates signed by it; a dialer given a CA checks
// the broker's certificate and its name against the URL's host).
#ifndef STOKER_TLS_H
#define STOKER_TLS_H

#include <stddef.h>

struct nng_listener_s;
struct nng_dialer_s;

typedef struct stoker_tls_options {
    const char *cert; // PEM certificate (chain) of this end; NULL for none
    const char *key;  // PEM private key for cert (unencrypted)
    const char *ca;   // PEM CA certificate(s) to verify the peer
    // A client (dialer) verifies the broker: it needs ca unless insecure is set, which skips
    // verifying (encrypted, not authenticated: anyone in the middle can pose as the broker).
    // A listener without ca accepts any client; insecure means nothing to it.
    int insecure;
} stoker_tls_options;

// Nonzero when url uses TLS (tls+tcp://).
int stoker_tls_url(const char *url);
// Checks the combination (key with cert, files readable; a client's ca, or insecure);
// STOKER_INVALID with a reason naming the --tls-* flag.
int stoker_tls_check(const stoker_tls_options *tls, int listener, char *err, size_t err_len);
// Gives listener l (created on url, not yet started) the server-side TLS configuration of tls.
// STOKER_OK, or an error with err naming the file, setting or URL that was refused.
int stoker_tls_listener_set(struct nng_listener_s l, const char *url, const stoker_tls_options *tls,
                            char *err, size_t err_len);

#endif
