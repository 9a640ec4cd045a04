// A command-line window onto augment_apply for tests/producer/test_augment.py, which compares
// each operation with Pillow/torchvision: reads (H, W, 3) bytes on stdin, applies SPEC with an
// rng seeded by SEED, writes (OUT_H, OUT_W, 3) float32 values in [0, 255] on stdout.
//   augment_tool SPEC SEED W H OUT_H OUT_W
// or one RandAugment operation alone (randaug.h) at a signed magnitude, same size out:
//   augment_tool --op NAME MAGNITUDE W H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "randaug.h"
#include "stoker/error.h"

static int
one_op(char **argv)
{
    int op = randaug_find(argv[2]);
    unsigned long w = strtoul(argv[4], NULL, 10), h = strtoul(argv[5], NULL, 10);
    uint8_t *in = malloc(w * h * 3);
    float *px = malloc(w * h * 3 * sizeof *px);
    if (op < 0 || in == NULL || px == NULL || fread(in, 1, w * h * 3, stdin) != w * h * 3) {
        fprintf(stderr, "augment_tool: unknown operation or short input\n");
        return 2;
    }
    for (size_t i = 0; i < w * h * 3; i++)
        px[i] = in[i];
    int rv = randaug_apply_op(op, strtod(argv[3], NULL), px, (uint32_t)h, (uint32_t)w);
    if (rv == STOKER_OK)
        fwrite(px, sizeof *px, w * h * 3, stdout);
    free(in);
    free(px);
    return rv == STOKER_OK ? 0 : 1;
}

int
main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--op") == 0)
        return one_op(argv);
    if (argc != 7) {
        fprintf(stderr, "usage: augment_tool SPEC SEED W H OUT_H OUT_W\n");
        return 2;
    }
    char err[256];
    augment *a;
    if (augment_parse(argv[1], &a, err, sizeof err) != STOKER_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    unsigned long w = strtoul(argv[3], NULL, 10), h = strtoul(argv[4], NULL, 10);
    unsigned long oh = strtoul(argv[5], NULL, 10), ow = strtoul(argv[6], NULL, 10);
    uint8_t *in = malloc(w * h * 3);
    float *out = malloc(oh * ow * 3 * sizeof *out);
    if (in == NULL || out == NULL || fread(in, 1, w * h * 3, stdin) != w * h * 3) {
        fprintf(stderr, "augment_tool: expected %lu bytes on stdin\n", w * h * 3);
        return 2;
    }
    stoker_rng rng;
    stoker_rng_seed(&rng, strtoull(argv[2], NULL, 10));
    int rv = augment_apply(a, in, (uint32_t)w, (uint32_t)h, &rng, (uint32_t)oh, (uint32_t)ow, out);
    if (rv == STOKER_OK)
        fwrite(out, sizeof *out, oh * ow * 3, stdout);
    free(in);
    free(out);
    augment_destroy(a);
    return rv == STOKER_OK ? 0 : 1;
}
