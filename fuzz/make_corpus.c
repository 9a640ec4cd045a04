// Writes the seed corpus of the broker fuzz target: valid requests of every method, alone and in
// short conversations (hello, push, pull with acks, ack, status, heartbeat, goodbye, ticks and
// closed connections), with and without a token and small limits. Usage: make_corpus DIR
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "requests.h"

typedef struct seed {
    uint8_t buf[65536];
    size_t len;
    const char *token;
} seed;

static void
put(seed *s, const void *p, size_t n)
{
    if (s->len + n > sizeof(s->buf)) {
        fprintf(stderr, "make_corpus: seed too large\n");
        exit(1);
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static void
start(seed *s, uint8_t flags)
{
    s->len = 0;
    s->token = (flags & FUZZ_FLAG_TOKEN) ? FUZZ_TOKEN : NULL;
    put(s, &flags, 1);
}

static void
msg(seed *s, uint8_t pipe, nng_msg *m)
{
    if (m == NULL) {
        fprintf(stderr, "make_corpus: cannot encode\n");
        exit(1);
    }
    size_t n = nng_msg_len(m);
    uint8_t head[4] = {FUZZ_OP_MESSAGE, (uint8_t)(pipe - 1), (uint8_t)n, (uint8_t)(n >> 8)};
    put(s, head, 4);
    put(s, nng_msg_body(m), n);
    nng_msg_free(m);
}

static void
tick(seed *s, uint16_t ms)
{
    uint8_t rec[3] = {FUZZ_OP_TICK, (uint8_t)ms, (uint8_t)(ms >> 8)};
    put(s, rec, 3);
}

static void
close_pipe(seed *s, uint8_t pipe)
{
    uint8_t rec[2] = {FUZZ_OP_CLOSE, (uint8_t)(pipe - 1)};
    put(s, rec, 2);
}

static void
save(const seed *s, const char *dir, const char *name, unsigned flags)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s-%u", dir, name, flags);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(s->buf, 1, s->len, f) != s->len || fclose(f) != 0) {
        fprintf(stderr, "make_corpus: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_corpus DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    static const uint64_t lease1[] = {1}, leases[] = {1, 2, 7};
    static const uint8_t flag_sets[] = {0, FUZZ_FLAG_TOKEN, FUZZ_FLAG_SMALL,
                                        FUZZ_FLAG_TOKEN | FUZZ_FLAG_SMALL};
    seed *s = malloc(sizeof(*s));
    if (s == NULL)
        return 1;
    for (size_t k = 0; k < sizeof(flag_sets); k++) {
        uint8_t fl = flag_sets[k];
        // One request each, after the preamble.
        start(s, fl);
        msg(s, 1, fuzz_push(FUZZ_PRODUCER, 4, 3));
        save(s, dir, "push", fl);
        start(s, fl);
        msg(s, 2, fuzz_pull(FUZZ_TRAINER, 2, 100, 1, lease1));
        save(s, dir, "pull-ack", fl);
        start(s, fl);
        msg(s, 2, fuzz_ack(FUZZ_TRAINER, 3, leases));
        save(s, dir, "ack", fl);
        start(s, fl);
        msg(s, 3, fuzz_simple(STOKER_STATUS, 0));
        save(s, dir, "status", fl);
        start(s, fl);
        msg(s, 1, fuzz_simple(STOKER_HEARTBEAT, FUZZ_PRODUCER));
        msg(s, 1, fuzz_simple(STOKER_GOODBYE, FUZZ_PRODUCER));
        save(s, dir, "goodbye", fl);
        start(s, fl);
        msg(s, 3, fuzz_hello(0x3333, STOKER_ROLE_PRODUCER, "q", s->token, 1));
        msg(s, 3, fuzz_push(0x3333, 0, 2));
        msg(s, 3, fuzz_push(0x3333, 1, 3)); // overlaps: idempotent
        msg(s, 3, fuzz_push(0x3333, 9, 1)); // a gap
        save(s, dir, "second-producer", fl);
        start(s, fl);
        close_pipe(s, 2); // the trainer's lease goes back
        msg(s, 4, fuzz_hello(FUZZ_TRAINER, STOKER_ROLE_TRAINER, "t", s->token, 0));
        msg(s, 4, fuzz_pull(FUZZ_TRAINER, 4, 0, 1, lease1));
        save(s, dir, "redeliver", fl);
        start(s, fl);
        msg(s, 1, fuzz_push(FUZZ_PRODUCER, 4, 8));
        msg(s, 1, fuzz_push(FUZZ_PRODUCER, 12, 8)); // parked or refused
        tick(s, 300);
        close_pipe(s, 1);
        msg(s, 2, fuzz_pull(FUZZ_TRAINER, 8, 1000, 0, NULL));
        tick(s, 2000);
        msg(s, 2, fuzz_pull(FUZZ_TRAINER, 8, 1000, 0, NULL));
        tick(s, 12000);
        save(s, dir, "full-loss", fl);
        // Variable-length values: good pushes delivered, bad offsets refused.
        start(s, fl | FUZZ_FLAG_NO_PREAMBLE);
        msg(s, 1, fuzz_hello_var(FUZZ_PRODUCER, "v", s->token));
        msg(s, 1, fuzz_push_var(FUZZ_PRODUCER, 0, 4, FUZZ_VAR_GOOD));
        msg(s, 1, fuzz_push_var(FUZZ_PRODUCER, 4, 3, FUZZ_VAR_DECREASING));
        msg(s, 1, fuzz_push_var(FUZZ_PRODUCER, 4, 3, FUZZ_VAR_OVER_BOUND));
        msg(s, 1, fuzz_push_var(FUZZ_PRODUCER, 4, 3, FUZZ_VAR_PAST_DATA));
        msg(s, 1, fuzz_push_var(FUZZ_PRODUCER, 4, 3, FUZZ_VAR_NOT_ZERO));
        msg(s, 1, fuzz_push_var(FUZZ_PRODUCER, 4, 5, FUZZ_VAR_GOOD));
        msg(s, 2, fuzz_hello(FUZZ_TRAINER, STOKER_ROLE_TRAINER, "t", s->token, 0));
        msg(s, 2, fuzz_pull(FUZZ_TRAINER, 6, 50, 0, NULL));
        msg(s, 2, fuzz_pull(FUZZ_TRAINER, 6, 50, 1, lease1));
        close_pipe(s, 2); // the second lease goes back
        msg(s, 3, fuzz_hello(0x4444, STOKER_ROLE_TRAINER, "u", s->token, 0));
        msg(s, 3, fuzz_pull(0x4444, 9, 50, 0, NULL));
        save(s, dir, "varlen", fl);
        // A conversation from nothing.
        start(s, fl | FUZZ_FLAG_NO_PREAMBLE);
        msg(s, 1, fuzz_push(FUZZ_PRODUCER, 0, 1)); // before hello
        msg(s, 1, fuzz_hello(FUZZ_PRODUCER, STOKER_ROLE_PRODUCER, "p", s->token, 1));
        msg(s, 1, fuzz_push(FUZZ_PRODUCER, 0, 2));
        msg(s, 2, fuzz_hello(FUZZ_TRAINER, STOKER_ROLE_TRAINER, "t", s->token, 0));
        msg(s, 2, fuzz_pull(FUZZ_TRAINER, 2, 50, 0, NULL));
        msg(s, 2, fuzz_ack(FUZZ_TRAINER, 1, lease1));
        msg(s, 2, fuzz_ack(FUZZ_TRAINER, 1, lease1)); // twice: refused
        msg(s, 1, fuzz_simple(STOKER_GOODBYE, FUZZ_PRODUCER));
        msg(s, 2, fuzz_pull(FUZZ_TRAINER, 2, 50, 0, NULL)); // end of data
        msg(s, 3, fuzz_hello(0x4444, STOKER_ROLE_OBSERVER, "o", "wrong", 0));
        msg(s, 3, fuzz_simple(STOKER_STATUS, 0));
        save(s, dir, "conversation", fl);
    }
    free(s);
    return 0;
}
