// A command-line window onto augment_apply for tests/producer/test_augment.py, which compares
// each operation with Pillow/torchvision: reads (H, W, 3) bytes on stdin, applies SPEC with an
// rng seeded by SEED, writes (OUT_H, OUT_W, 3) float32 values in [0, 255] on stdout.
//   augment_tool SPEC SEED W H OUT_H OUT_W
// or one RandAugment operation alone (randaug.h) at a signed magnitude, same size out:
//   augment_tool --op NAME MAGNITUDE W H
// or a JPEG file decoded as the images generator decodes it for that seed (reduced by the
// scale augment_draft allows, or at full size with --full), SPEC applied; the scale on stderr:
//   augment_tool --jpeg FILE SPEC SEED OUT_H OUT_W [--full]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "image_file.h"
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

static int
jpeg(int argc, char **argv)
{
    char err[512];
    augment *a;
    if (augment_parse(argv[3], &a, err, sizeof err) != STOKER_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    uint8_t *data;
    size_t len, budget = 0;
    image_pixels px;
    if (image_file_read(argv[2], &data, &len, err, sizeof err) != STOKER_OK ||
        image_file_decode(argv[2], data, len, &budget, 0, &px, err, sizeof err) != STOKER_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    free(px.rgb); // only its size: the draft is chosen from it
    uint32_t oh = (uint32_t)strtoul(argv[5], NULL, 10), ow = (uint32_t)strtoul(argv[6], NULL, 10);
    stoker_rng rng;
    stoker_rng_seed(&rng, strtoull(argv[4], NULL, 10));
    uint32_t scale = argc == 8 ? 1 : augment_draft(a, px.width, px.height, &rng, oh, ow, NULL);
    int rv =
        image_file_decode_scaled(argv[2], data, len, scale, 0, &budget, 0, &px, err, sizeof err);
    float *out = malloc((size_t)oh * ow * 3 * sizeof *out);
    if (rv == STOKER_OK && out != NULL) {
        const augment_image src = {px.rgb,   px.width,      px.height,
                                   px.scale, px.full_width, px.full_height};
        rv = augment_apply_image(a, &src, &rng, oh, ow, out);
        free(px.rgb);
    }
    if (rv == STOKER_OK) {
        fprintf(stderr, "%u\n", scale);
        fwrite(out, sizeof *out, (size_t)oh * ow * 3, stdout);
    }
    free(out);
    free(data);
    augment_destroy(a);
    return rv == STOKER_OK ? 0 : 1;
}

int
main(int argc, char **argv)
{
    if ((argc == 7 || argc == 8) && strcmp(argv[1], "--jpeg") == 0)
        return jpeg(argc, argv);
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
