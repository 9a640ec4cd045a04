// TLS: a throwaway CA and certificates made by the test with openssl; the broker listens on
// tls+tcp://127.0.0.1:0 requiring client certificates from its CA (and on ipc:// for the test's
// status requests). A client with a certificate from another CA, or with none, never connects
// and never gets data, while the broker keeps serving the right clients, which train end to end.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "training.h"
#include "stoker/clock.h"
#include "stoker/error.h"

TestSuite(tls, .init = h_setup, .fini = h_teardown, .timeout = 120);

// Makes DIR/NAME.key and DIR/NAME.crt signed by DIR/CA (CN cn, SAN IP 127.0.0.1 and localhost).
static void
make_cert(const char *ca, const char *name, const char *cn)
{
    int rv = proc_sh("cd '%s' && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                     "-nodes -keyout %s.key -out %s.csr -subj '/CN=%s' 2>>openssl.log && "
                     "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > %s.ext && "
                     "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key -CAcreateserial "
                     "-days 2 -extfile %s.ext -out %s.crt 2>>openssl.log",
                     testdir_path(), name, name, cn, name, name, ca, ca, name, name);
    cr_assert_eq(rv, 0, "openssl could not make %s (see %s/openssl.log)", name, testdir_path());
}

static void
make_ca(const char *name)
{
    int rv = proc_sh("cd '%s' && openssl req -x509 -newkey ec -pkeyopt "
                     "ec_paramgen_curve:prime256v1 -nodes -keyout %s.key -out %s.crt -days 2 "
                     "-subj '/CN=%s' 2>>openssl.log",
                     testdir_path(), name, name, name);
    cr_assert_eq(rv, 0, "openssl could not make the CA %s", name);
}

static char tls_url[256], ipc_url[256];

static void
start_broker(void)
{
    cr_assert_eq(proc_sh("command -v openssl >/dev/null"), 0,
                 "openssl is missing (scripts/deps.sh installs it)");
    make_ca("ca");
    make_ca("rogue-ca");
    make_cert("ca", "server", "localhost");
    make_cert("ca", "client", "stoker-client");
    make_cert("rogue-ca", "rogue", "stoker-client");
    char ipc[256];
    snprintf(ipc, sizeof(ipc), "ipc://%s/b.sock", testdir_path());
    char cert[512], key[512], ca[512];
    snprintf(cert, sizeof(cert), "%s", testdir_file("server.crt"));
    snprintf(key, sizeof(key), "%s", testdir_file("server.key"));
    snprintf(ca, sizeof(ca), "%s", testdir_file("ca.crt"));
    const char *argv[] = {getenv("STOKER_BROKER_BIN"),
                          "--listen",
                          "tls+tcp://127.0.0.1:0",
                          "--listen",
                          ipc,
                          "--tls-cert",
                          cert,
                          "--tls-key",
                          key,
                          "--tls-ca",
                          ca,
                          "--log-level",
                          "info",
                          NULL};
    cr_assert_not_null(argv[0]);
    proc_child *b = proc_spawn("broker", argv, &(proc_io){.capture = 1, .log = "broker.log"});
    char urls[2][256];
    proc_listening(b, 2, urls);
    snprintf(tls_url, sizeof(tls_url), "%s", urls[0]);
    snprintf(ipc_url, sizeof(ipc_url), "%s", urls[1]);
    cr_assert(strncmp(tls_url, "tls+tcp://127.0.0.1:", 20) == 0, "first URL: %s", tls_url);
}

// A trainer client in this process with the given certificate (NULL: none); its create result.
static int
try_trainer(const char *cert_name)
{
    char cert[512] = "", key[512] = "", ca[512];
    if (cert_name != NULL) {
        snprintf(cert, sizeof(cert), "%s/%s.crt", testdir_path(), cert_name);
        snprintf(key, sizeof(key), "%s/%s.key", testdir_path(), cert_name);
    }
    snprintf(ca, sizeof(ca), "%s/ca.crt", testdir_path());
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = tls_url;
    o.client.name = "tls-trainer";
    o.client.give_up_ms = 2500;
    o.client.request_timeout_ms = 1000;
    o.client.tls.cert = cert_name != NULL ? cert : NULL;
    o.client.tls.key = cert_name != NULL ? key : NULL;
    o.client.tls.ca = ca;
    o.batch_size = 4;
    o.stall_timeout_ms = 3000;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    stoker_trainer_client_destroy(tc);
    return rv;
}

Test(tls, other_ca_refused_right_client_trains)
{
    start_broker();
    // A producer with a certificate from another CA, started first and left trying throughout.
    char rogue_cert[512], rogue_key[512], ca[512];
    snprintf(rogue_cert, sizeof(rogue_cert), "%s", testdir_file("rogue.crt"));
    snprintf(rogue_key, sizeof(rogue_key), "%s", testdir_file("rogue.key"));
    snprintf(ca, sizeof(ca), "%s", testdir_file("ca.crt"));
    const char *rogue[] = {getenv("STOKER_PRODUCER_BIN"),
                           "--broker",
                           tls_url,
                           "--name",
                           "rogue",
                           "--tls-cert",
                           rogue_cert,
                           "--tls-key",
                           rogue_key,
                           "--tls-ca",
                           ca,
                           "--delay",
                           "0:0",
                           NULL};
    proc_spawn("rogue producer", rogue, &(proc_io){.log = "rogue.log"});

    // In-process trainers: another CA's certificate, and none at all, never get through.
    cr_assert_eq(try_trainer("rogue"), STOKER_CONNECTION, "a rogue certificate connected");
    cr_assert_eq(try_trainer(NULL), STOKER_CONNECTION, "a client without certificate connected");

    // The right producer and trainer train end to end over TLS meanwhile.
    char cert[512], key[512];
    snprintf(cert, sizeof(cert), "%s", testdir_file("client.crt"));
    snprintf(key, sizeof(key), "%s", testdir_file("client.key"));
    const char *json = testdir_file("summary.json");
    const char *const client_args[] = {"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, NULL};
    train_end_to_end(tls_url, "good", client_args, json);

    // The rogue producer never said hello: only 'good' is known to the broker.
    stoker_status *st = h_status(ipc_url);
    cr_assert_not_null(h_status_producer(st, "good"), "the good producer is not in status");
    cr_assert_null(h_status_producer(st, "rogue"), "the rogue producer got through");
    cr_assert_eq(st->n_producers, 1);
    stoker_status_destroy(st);
}
