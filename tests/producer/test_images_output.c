// The images generator's output forms and folders: uint8 and float32, CHW and HWC,
// rectangular sizes, int64 scalar or int32[1] labels, an augment spec's pipeline (determinism,
// decode each, normalization or none), nested class folders with their file counts and label
// map, WebP, and clear errors for bad specs. Pixel accuracy of each operation against Pillow is
// test_augment.py's.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <png.h>
#if STOKER_HAS_WEBP
#include <webp/encode.h>
#endif

#include "image_fixtures.h"
#include "images.h"
#include "stoker/error.h"
#include "stoker/log.h"

static const float MEAN[3] = {0.485f, 0.456f, 0.406f};
static const float STD[3] = {0.229f, 0.224f, 0.225f};
static const char *const RICH =
    "rrc(0.08,1;0.75,1.33),hflip,jitter(b=0.4,c=0.4,s=0.4,h=0.1),rotate(15),blur(3),erase,"
    "normalize";

// (h, w, 3) bytes varying with x, y and salt.
static uint8_t *
pattern(uint32_t w, uint32_t h, uint32_t salt)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t c = 0; c < 3; c++)
                rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)(x * 7 + y * 3 + c * 50 + salt * 31);
    return rgb;
}

static void
write_png(const char *rel, uint32_t w, uint32_t h, uint32_t salt)
{
    uint8_t *px = pattern(w, h, salt);
    img_write_png(rel, px, w, h, PNG_FORMAT_RGB);
    free(px);
}

// Two classes: a/ with two files and a nested folder a/sub/deeper/ with one; b/ with two.
static void
make_tree(void)
{
    img_make_dir("a");
    img_make_dir("a/sub");
    img_make_dir("a/sub/deeper");
    img_make_dir("b");
    write_png("a/1.png", 40, 30, 1);
    write_png("a/2.png", 30, 40, 2);
    write_png("a/sub/deeper/3.png", 50, 50, 3);
    write_png("b/1.png", 36, 36, 4);
    write_png("b/2.png", 64, 20, 5);
}

static void
setup(void)
{
    img_root_make("stoker-images-out");
    stoker_log_set_level(STOKER_LOG_WARN);
    make_tree();
}

static void
teardown(void)
{
    img_root_remove();
}

TestSuite(images_output, .init = setup, .fini = teardown, .timeout = 60);

static images_config
config(void)
{
    images_config cfg;
    images_config_init(&cfg);
    cfg.dir = img_root;
    cfg.height = 24;
    cfg.width = 40;
    return cfg;
}

static void
open_gen(const images_config *cfg, stoker_generator *gen)
{
    char err[512] = "";
    cr_assert_eq(images_generator_open(cfg, gen, err, sizeof err), STOKER_OK, "%s", err);
}

// One example: the image field's bytes (caller frees) and the label as int64.
static void *
example(stoker_generator *gen, uint64_t seed, int64_t *label)
{
    void *img = malloc(stoker_field_bytes(&gen->schema.fields[0]));
    union {
        int64_t i64;
        int32_t i32;
    } l = {0};
    void *fields[] = {img, &l};
    cr_assert_eq(gen->fill(gen->user, 0, seed, fields), STOKER_OK);
    *label = gen->schema.fields[1].dtype == STOKER_INT64 ? l.i64 : l.i32;
    return img;
}

static void
expect_schema(const images_config *cfg, const char *want)
{
    stoker_generator gen;
    open_gen(cfg, &gen);
    char spec[256];
    stoker_schema_format(&gen.schema, spec, sizeof spec);
    cr_expect_str_eq(spec, want);
    stoker_generator_fini(&gen);
}

Test(images_output, schema_follows_output_layout_size_and_label)
{
    images_config cfg = config();
    expect_schema(&cfg, "image:float32[3,24,40],label:int64[]");
    cfg.output = IMAGES_UINT8;
    cfg.hwc = true;
    expect_schema(&cfg, "image:uint8[24,40,3],label:int64[]");
    cfg.label = IMAGES_LABEL_INT32;
    cfg.augment = "resize(30),ccrop";
    expect_schema(&cfg, "image:uint8[24,40,3],label:int32[1]");
}

// uint8 is the same picture as float32 before normalization: float = (u8 / 255 - mean) / std
// within half a level, for the default pipeline and an augment spec alike; labels agree.
static void
expect_uint8_matches_float(const char *augment)
{
    images_config cf = config(), cu = config();
    cf.augment = cu.augment = augment;
    cu.output = IMAGES_UINT8;
    stoker_generator gf, gu;
    open_gen(&cf, &gf);
    open_gen(&cu, &gu);
    const size_t plane = 24 * 40;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        int64_t lf, lu;
        float *f = example(&gf, seed, &lf);
        uint8_t *u = example(&gu, seed, &lu);
        cr_expect_eq(lf, lu);
        for (size_t i = 0; i < 3 * plane; i++) {
            int c = (int)(i / plane);
            float want = ((float)u[i] / 255.0f - MEAN[c]) / STD[c];
            if (fabsf(f[i] - want) > 0.5f / 255.0f / STD[c] + 1e-4f) {
                cr_expect_fail("%s seed %llu element %zu: float %f, uint8 %u gives %f",
                               augment ? augment : "default", (unsigned long long)seed, i, f[i],
                               u[i], want);
                break;
            }
        }
        free(f);
        free(u);
    }
    stoker_generator_fini(&gf);
    stoker_generator_fini(&gu);
}

Test(images_output, uint8_is_the_float_output_before_normalization)
{
    expect_uint8_matches_float(NULL);
    expect_uint8_matches_float(RICH);
}

Test(images_output, hwc_is_chw_transposed_and_int32_labels_equal_int64)
{
    images_config a = config(), b = config();
    b.hwc = true;
    b.label = IMAGES_LABEL_INT32;
    stoker_generator ga, gb;
    open_gen(&a, &ga);
    open_gen(&b, &gb);
    const size_t plane = 24 * 40;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        int64_t la, lb;
        float *x = example(&ga, seed, &la), *y = example(&gb, seed, &lb);
        cr_expect_eq(la, lb);
        for (size_t i = 0; i < plane; i++)
            for (int c = 0; c < 3; c++)
                cr_assert_eq(x[c * plane + i], y[3 * i + c], "seed %llu", (unsigned long long)seed);
        free(x);
        free(y);
    }
    stoker_generator_fini(&ga);
    stoker_generator_fini(&gb);
}

Test(images_output, augment_same_seed_same_bytes_and_decode_each_agrees)
{
    images_config a = config(), b = config();
    a.augment = b.augment = RICH;
    b.decode_each = true;
    stoker_generator ga, gb;
    open_gen(&a, &ga);
    open_gen(&b, &gb);
    size_t bytes = stoker_field_bytes(&ga.schema.fields[0]);
    int differ = 0;
    void *prev = NULL;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        int64_t la, lb, lc;
        void *x = example(&ga, seed, &la), *y = example(&gb, seed, &lb);
        void *z = example(&ga, seed, &lc);
        cr_expect_eq(memcmp(x, y, bytes), 0, "decode each differs, seed %llu",
                     (unsigned long long)seed);
        cr_expect_eq(memcmp(x, z, bytes), 0, "same seed differs, seed %llu",
                     (unsigned long long)seed);
        cr_expect(la == lb && la == lc && (la == 0 || la == 1));
        differ += prev != NULL && memcmp(prev, x, bytes) != 0;
        free(prev);
        free(y);
        free(z);
        prev = x;
    }
    free(prev);
    cr_expect_eq(differ, 9, "seeds must vary the pixels");
    stoker_generator_fini(&ga);
    stoker_generator_fini(&gb);
}

Test(images_output, without_normalize_float_output_is_pixels_over_255)
{
    images_config cf = config(), cu = config();
    cf.augment = cu.augment = "resize(30),ccrop";
    cu.output = IMAGES_UINT8;
    stoker_generator gf, gu;
    open_gen(&cf, &gf);
    open_gen(&cu, &gu);
    float mean[3], std[3];
    cr_expect_not(images_generator_normalization(&gf, mean, std));
    int64_t l;
    float *f = example(&gf, 3, &l);
    uint8_t *u = example(&gu, 3, &l);
    for (size_t i = 0; i < 3 * 24 * 40; i++)
        cr_assert(fabsf(f[i] - u[i] / 255.0f) <= 0.5f / 255.0f + 1e-6f, "element %zu", i);
    free(f);
    free(u);
    stoker_generator_fini(&gf);
    stoker_generator_fini(&gu);
}

Test(images_output, nested_folders_are_walked_counted_and_mapped)
{
    images_config cfg = config();
    stoker_generator gen;
    open_gen(&cfg, &gen);
    cr_assert_eq(images_generator_classes(&gen), 2);
    size_t files;
    cr_expect_str_eq(images_generator_class_name(&gen, 0, &files), "a");
    cr_expect_eq(files, 3, "a/sub/deeper/3.png counts for class a");
    cr_expect_str_eq(images_generator_class_name(&gen, 1, &files), "b");
    cr_expect_eq(files, 2);
    cr_expect_null(images_generator_class_name(&gen, 2, NULL));
    float mean[3], std[3];
    cr_expect(images_generator_normalization(&gen, mean, std));
    cr_expect_float_eq(mean[0], 0.485f, 1e-6);

    char err[256];
    const char *map = img_path_in("labels.json");
    cr_assert_eq(images_generator_write_label_map(&gen, map, err, sizeof err), STOKER_OK, "%s",
                 err);
    FILE *f = fopen(map, "r");
    char text[1024] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    cr_expect(strstr(text, "{\"label\": 0, \"name\": \"a\", \"files\": 3}") != NULL, "%s", text);
    cr_expect(strstr(text, "{\"label\": 1, \"name\": \"b\", \"files\": 2}") != NULL, "%s", text);
    cr_expect(strstr(text, "\"mean\": [0.485, 0.456, 0.406]") != NULL, "%s", text);
    cr_expect_eq(images_generator_write_label_map(&gen, "/nonexistent/x.json", err, sizeof err),
                 STOKER_IO);
    cr_expect(strstr(err, "/nonexistent/x.json") != NULL, "%s", err);
    stoker_generator_fini(&gen);
}

#if STOKER_HAS_WEBP
// A lossless WebP decodes to its exact pixels: with ccrop at the image's own size the pipeline
// is the identity and uint8 HWC output is the file's pixels.
Test(images_output, lossless_webp_decodes_to_its_pixels)
{
    teardown();
    setup();
    img_make_dir("c");
    const uint32_t w = 40, h = 24;
    uint8_t *px = pattern(w, h, 9), *webp = NULL;
    size_t len = WebPEncodeLosslessRGB(px, (int)w, (int)h, (int)w * 3, &webp);
    cr_assert(len > 0);
    FILE *f = fopen(img_path_in("c/x.webp"), "wb");
    fwrite(webp, 1, len, f);
    fclose(f);
    WebPFree(webp);
    remove(img_path_in("a/1.png")); // class a keeps its other files
    for (int each = 0; each < 2; each++) {
        images_config cfg = config();
        cfg.augment = "ccrop";
        cfg.output = IMAGES_UINT8;
        cfg.hwc = true;
        cfg.decode_each = each;
        stoker_generator gen;
        open_gen(&cfg, &gen);
        int found = 0;
        for (uint64_t seed = 1; seed <= 60 && !found; seed++) {
            int64_t label;
            uint8_t *out = example(&gen, seed, &label);
            if (label == 2) {
                cr_expect_eq(memcmp(out, px, (size_t)w * h * 3), 0, "decode_each %d", each);
                found = 1;
            }
            free(out);
        }
        cr_expect(found, "the WebP class was never drawn");
        stoker_generator_fini(&gen);
    }
    free(px);
}
#endif

Test(images_output, bad_augment_specs_are_named)
{
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"foo", "unknown operation 'foo'"},
        {"rrc(0.5,0.2;0.75,1.33)", "rrc: scale"},
        {"rrc(0.08,1)", "rrc takes"},
        {"resize", "resize takes"},
        {"resize(0)", "whole number"},
        {"hflip(2)", "probability 2"},
        {"jitter", "at least one"},
        {"jitter(x=1)", "'x'"},
        {"jitter(h=0.7)", "hue within"},
        {"rotate", "rotate takes"},
        {"blur(4)", "odd"},
        {"normalize,hflip", "normalize must be the last"},
        {"normalize(1,2;3,4)", "normalize takes"},
        {"hflip hflip", "expected ','"},
        {"ccrop(3", "missing ')'"},
        {"rotate(a)", "bad argument 'a'"},
        {"erase(1;0.5,0.1;1,1)", "erase: scale"},
        {"erase(1,2)", "erase takes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        images_config cfg = config();
        cfg.augment = cases[i].spec;
        stoker_generator gen;
        char err[512] = "";
        cr_expect_eq(images_generator_open(&cfg, &gen, err, sizeof err), STOKER_INVALID, "%s",
                     cases[i].spec);
        cr_expect(strstr(err, cases[i].want) != NULL, "spec '%s': got '%s', want '%s'",
                  cases[i].spec, err, cases[i].want);
    }
}
