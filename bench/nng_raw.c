// nng-raw: the baseline stoker is measured against — raw nng PUSH/PULL moving messages of the
// same size, with no protocol, no acknowledgement and no copies beyond nng's own.
//   nng-raw push URL BYTES COUNT     sends COUNT messages of BYTES (dials URL)
//   nng-raw pull URL COUNT           receives COUNT messages (listens), prints one JSON line
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>

#include "stoker/clock.h"
#include "stoker/process.h"

static int
fail(const char *what, int rv)
{
    fprintf(stderr, "nng-raw: %s: %s\n", what, nng_strerror(rv));
    return 1;
}

int
main(int argc, char **argv)
{
    nng_socket s;
    int rv;
    stoker_process_init(); // the same malloc settings as stoker's processes: a fair baseline
    if (argc == 5 && strcmp(argv[1], "push") == 0) {
        size_t bytes = strtoull(argv[3], NULL, 10);
        unsigned long long count = strtoull(argv[4], NULL, 10);
        if ((rv = nng_push0_open(&s)) != 0)
            return fail("open", rv);
        nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 10);
        if ((rv = nng_dial(s, argv[2], NULL, NNG_FLAG_NONBLOCK)) != 0)
            return fail("dial", rv);
        for (unsigned long long i = 0; i < count; i++) {
            nng_msg *m;
            if ((rv = nng_msg_alloc(&m, bytes)) != 0)
                return fail("alloc", rv);
            memset(nng_msg_body(m), (int)(i & 0xff), bytes);
            if ((rv = nng_sendmsg(s, m, 0)) != 0)
                return fail("send", rv);
        }
        stoker_sleep_ms(200, NULL); // let the last messages drain before closing
        nng_close(s);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "pull") == 0) {
        unsigned long long count = strtoull(argv[3], NULL, 10), got = 0;
        if ((rv = nng_pull0_open(&s)) != 0)
            return fail("open", rv);
        nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 1u << 30);
        nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
        if ((rv = nng_listen(s, argv[2], NULL, 0)) != 0)
            return fail("listen", rv);
        printf("listening\n");
        fflush(stdout);
        uint64_t start = 0, bytes = 0;
        while (got < count) {
            nng_msg *m;
            if ((rv = nng_recvmsg(s, &m, 0)) != 0)
                return fail("recv", rv);
            if (start == 0)
                start = stoker_now_ns(); // from the first message, like the stoker consumer
            else
                bytes += nng_msg_len(m);
            got++;
            nng_msg_free(m);
        }
        double seconds = (double)(stoker_now_ns() - start) / 1e9;
        printf("{\"messages\": %llu, \"seconds\": %.6f, \"bytes_per_second\": %.1f, "
               "\"messages_per_second\": %.1f}\n",
               got - 1, seconds, bytes / seconds, (got - 1) / seconds);
        nng_close(s);
        return 0;
    }
    fprintf(stderr, "usage: nng-raw push URL BYTES COUNT | nng-raw pull URL COUNT\n");
    return 2;
}
