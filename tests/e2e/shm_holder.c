// A consumer for tests/e2e/test_shm.c that must be its own process: it takes N batches through
// the broker's shared memory and holds them unreleased and unacknowledged (its leases and
// regions stay held until it dies), or writes into the read-only mapping (which must fault).
// Usage: shm_holder URL N BATCH hold|write (N batches of BATCH examples). Prints "holding N" once
// it holds them, then sleeps at most 60 s; exits 1 when a batch did not come through shared memory,
// 2 on usage.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/trainer_client.h"

int
main(int argc, char **argv)
{
    if (argc != 5 || (strcmp(argv[4], "hold") != 0 && strcmp(argv[4], "write") != 0)) {
        fprintf(stderr, "usage: shm_holder URL N BATCH hold|write\n");
        return 2;
    }
    int n = atoi(argv[2]), batch = atoi(argv[3]);
    if (n < 1 || n > 64 || batch < 1 || batch > 1024)
        return 2;
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = argv[1];
    o.client.name = "shm-holder";
    o.client.give_up_ms = 5000;
    o.batch_size = (uint32_t)batch;
    o.prefetch = 1;
    o.stall_timeout_ms = 10000;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    if (rv != STOKER_OK) {
        fprintf(stderr, "shm_holder: %s: %s\n", stoker_strerror(rv), err);
        return 1;
    }
    stoker_batch *held[64];
    for (int i = 0; i < n; i++) {
        if ((rv = stoker_trainer_client_next(tc, &held[i])) != STOKER_OK) {
            fprintf(stderr, "shm_holder: batch %d: %s\n", i, stoker_strerror(rv));
            return 1;
        }
    }
    if (stoker_trainer_client_arena_batches(tc) != (uint64_t)n) {
        fprintf(stderr, "shm_holder: %llu of %d batches came through shared memory\n",
                (unsigned long long)stoker_trainer_client_arena_batches(tc), n);
        return 1;
    }
    printf("holding %d\n", n);
    fflush(stdout);
    if (strcmp(argv[4], "write") == 0) {
        ((volatile uint8_t *)held[0]->chunk.data[0])[0] = 1; // read-only mapping: SIGSEGV
        printf("wrote\n");
        fflush(stdout);
        return 0;
    }
    stoker_sleep_ms(60000, NULL); // the test SIGKILLs it long before
    return 0;
}
