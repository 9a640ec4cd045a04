// Behaviour of the `images` generator on small image folders each test writes itself (PNG with
// libpng, JPEG with libjpeg, a few sizes and color types): output schema, shape and range, labels
// by folder, determinism by seed, that crops and flips vary, and clear errors for bad folders.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <png.h>

#include "image_fixtures.h"
#include "images.h"
#include "stoker/error.h"
#include "stoker/log.h"

#define SIZE 32

static const float MEAN[3] = {0.485f, 0.456f, 0.406f};
static const float STD[3] = {0.229f, 0.224f, 0.225f};

static void
make_root(void)
{
    img_root_make("stoker-images");
    stoker_log_set_level(STOKER_LOG_WARN);
}

static void
remove_root(void)
{
    img_root_remove();
}

// An (h, w, 3) image whose channel `main` is 230 and the other two rise from 0 to 80 along x.
static uint8_t *
pattern(uint32_t w, uint32_t h, int main)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                rgb[((size_t)y * w + x) * 3 + c] =
                    c == main ? 230 : (uint8_t)(80 * x / (w > 1 ? w - 1 : 1));
    return rgb;
}

static void
write_jpeg(const char *rel, const uint8_t *pixels, uint32_t w, uint32_t h, int components)
{
    FILE *f = fopen(img_path_in(rel), "wb");
    cr_assert_not_null(f);
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    cinfo.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cinfo);
    jpeg_stdio_dest(&cinfo, f);
    cinfo.image_width = w;
    cinfo.image_height = h;
    cinfo.input_components = components;
    cinfo.in_color_space = components == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, 95, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < h) {
        JSAMPROW row = (JSAMPROW)pixels + (size_t)cinfo.next_scanline * w * components;
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    fclose(f);
}

static void
write_bytes(const char *rel, const void *data, size_t n)
{
    FILE *f = fopen(img_path_in(rel), "wb");
    cr_assert_not_null(f);
    fwrite(data, 1, n, f);
    fclose(f);
}

// Three classes (red, green, blue dominant), PNG and JPEG, several sizes, in unsorted creation
// order, plus a file that is not an image.
static void
make_three_classes(void)
{
    const char *classes[3] = {"a_red", "b_green", "c_blue"};
    const uint32_t sizes[3][2] = {{40, 30}, {17, 64}, {120, 90}};
    for (int c = 2; c >= 0; c--) {
        char rel[64];
        img_make_dir(classes[c]);
        for (int i = 0; i < 3; i++) {
            uint32_t w = sizes[(c + i) % 3][0], h = sizes[(c + i) % 3][1];
            uint8_t *rgb = pattern(w, h, c);
            snprintf(rel, sizeof rel, "%s/img%d.%s", classes[c], i, i == 1 ? "JPG" : "png");
            if (i == 1)
                write_jpeg(rel, rgb, w, h, 3);
            else
                img_write_png(rel, rgb, w, h, PNG_FORMAT_RGB);
            free(rgb);
        }
        snprintf(rel, sizeof rel, "%s/notes.txt", classes[c]);
        write_bytes(rel, "not an image", 12);
    }
}

static void
create(stoker_generator *gen, uint32_t size)
{
    char err[512] = "";
    int rv = images_generator_create(img_root, size, false, gen, err, sizeof err);
    cr_assert_eq(rv, STOKER_OK, "create: %s", err);
}

// One example into freshly allocated buffers.
static float *
example(stoker_generator *gen, uint64_t seed, int32_t *label)
{
    float *img = malloc(3 * SIZE * SIZE * sizeof *img);
    void *fields[] = {img, label};
    cr_assert_eq(gen->fill(gen->user, 0, seed, fields), STOKER_OK);
    return img;
}

// Expects generators a and b to make the same example (bytes and label) for seed.
static void
expect_same_example(stoker_generator *a, stoker_generator *b, uint64_t seed)
{
    int32_t la, lb;
    float *x = example(a, seed, &la);
    float *y = example(b, seed, &lb);
    cr_expect_eq(la, lb, "seed %llu", (unsigned long long)seed);
    cr_expect_eq(memcmp(x, y, 3 * SIZE * SIZE * sizeof *x), 0, "seed %llu",
                 (unsigned long long)seed);
    free(x);
    free(y);
}

// Mean of channel c over the image, back in [0, 1] units.
static double
channel_mean(const float *img, int c)
{
    double sum = 0;
    for (int i = 0; i < SIZE * SIZE; i++)
        sum += img[c * SIZE * SIZE + i] * STD[c] + MEAN[c];
    return sum / (SIZE * SIZE);
}

TestSuite(images, .init = make_root, .fini = remove_root);

Test(images, schema_shape_and_range)
{
    make_three_classes();
    stoker_generator gen;
    create(&gen, SIZE);
    char spec[256];
    stoker_schema_format(&gen.schema, spec, sizeof spec);
    cr_expect_str_eq(spec, "image:float32[3,32,32],label:int32[1]");
    cr_expect_str_eq(gen.kind, "images");
    for (uint64_t seed = 1; seed <= 50; seed++) {
        int32_t label;
        float *img = example(&gen, seed, &label);
        cr_expect(label >= 0 && label < 3, "label %d", label);
        for (int c = 0; c < 3; c++) {
            float lo = (0 - MEAN[c]) / STD[c] - 1e-4f, hi = (1 - MEAN[c]) / STD[c] + 1e-4f;
            for (int i = 0; i < SIZE * SIZE; i++) {
                float v = img[c * SIZE * SIZE + i];
                cr_assert(isfinite(v) && v >= lo && v <= hi, "seed %llu channel %d: %f",
                          (unsigned long long)seed, c, v);
            }
        }
        free(img);
    }
    stoker_generator_fini(&gen);
}

Test(images, labels_follow_sorted_class_folders)
{
    make_three_classes();
    stoker_generator gen;
    create(&gen, SIZE);
    int seen[3] = {0};
    for (uint64_t seed = 100; seed < 190; seed++) {
        int32_t label;
        float *img = example(&gen, seed, &label);
        cr_assert(label >= 0 && label < 3);
        seen[label]++;
        // The class's own color stays the brightest channel through crop and jitter.
        int brightest = 0;
        for (int c = 1; c < 3; c++)
            if (channel_mean(img, c) > channel_mean(img, brightest))
                brightest = c;
        cr_expect_eq(brightest, label, "seed %llu", (unsigned long long)seed);
        free(img);
    }
    for (int c = 0; c < 3; c++)
        cr_expect_gt(seen[c], 10, "class %d drawn %d times of 90", c, seen[c]);
    stoker_generator_fini(&gen);
}

Test(images, same_seed_same_bytes)
{
    make_three_classes();
    stoker_generator a, b;
    create(&a, SIZE);
    create(&b, SIZE);
    for (uint64_t seed = 7; seed < 17; seed++) {
        int32_t label;
        free(example(&a, seed + 1000, &label)); // state from other examples must not leak
        expect_same_example(&a, &b, seed);
    }
    stoker_generator_fini(&a);
    stoker_generator_fini(&b);
}

// --decode each (a data loader decoding its files for every example) makes the same examples
// as decoding once: same image choice, crop, flip, jitter and label for a seed.
Test(images, decode_each_makes_the_same_bytes)
{
    make_three_classes();
    stoker_generator once, each;
    create(&once, SIZE);
    char err[512] = "";
    cr_assert_eq(images_generator_create(img_root, SIZE, true, &each, err, sizeof err), STOKER_OK,
                 "create: %s", err);
    for (uint64_t seed = 1; seed < 41; seed++)
        expect_same_example(&once, &each, seed);
    stoker_generator_fini(&once);
    stoker_generator_fini(&each);
}

Test(images, seeds_vary_crop_and_flip)
{
    // One image: red rises left to right, so a flip shows as red falling.
    img_make_dir("only");
    const uint32_t w = 64, h = 48;
    uint8_t *rgb = malloc(w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *p = rgb + (y * w + x) * 3;
            p[0] = (uint8_t)(40 + 3 * x);
            p[1] = 100;
            p[2] = (uint8_t)(2 * y);
        }
    img_write_png("only/ramp.png", rgb, w, h, PNG_FORMAT_RGB);
    free(rgb);
    stoker_generator gen;
    create(&gen, SIZE);

    enum { N = 64 };
    int flipped = 0;
    double spans[N];
    float *first = NULL;
    int differ = 0;
    for (int s = 0; s < N; s++) {
        int32_t label;
        float *img = example(&gen, 5000 + (uint64_t)s, &label);
        cr_expect_eq(label, 0);
        double left = 0, right = 0;
        for (int y = 0; y < SIZE; y++) {
            left += img[y * SIZE + 0];
            right += img[y * SIZE + SIZE - 1];
        }
        cr_expect_neq(left, right);
        flipped += left > right;
        spans[s] = fabs(right - left) / SIZE;
        if (first == NULL) {
            first = img;
        } else {
            differ += memcmp(first, img, 3 * SIZE * SIZE * sizeof *img) != 0;
            free(img);
        }
    }
    free(first);
    cr_expect(flipped > N / 5 && flipped < N - N / 5, "flipped %d of %d", flipped, N);
    cr_expect_eq(differ, N - 1);
    // The red span across the output grows with the crop's width: crops of many sizes.
    double lo = spans[0], hi = spans[0];
    for (int s = 1; s < N; s++) {
        lo = fmin(lo, spans[s]);
        hi = fmax(hi, spans[s]);
    }
    cr_expect_gt(hi, 2 * lo, "red spans %.3f..%.3f", lo, hi);
    stoker_generator_fini(&gen);
}

Test(images, grayscale_jpeg_and_rgba_png_decode)
{
    img_make_dir("gray");
    img_make_dir("rgba");
    uint8_t gray[50 * 20];
    for (int i = 0; i < 50 * 20; i++)
        gray[i] = (uint8_t)(i % 50 * 5);
    write_jpeg("gray/g.jpeg", gray, 50, 20, 1);
    uint8_t rgba[16 * 16 * 4];
    for (int i = 0; i < 16 * 16; i++) {
        rgba[4 * i] = 20;
        rgba[4 * i + 1] = 220;
        rgba[4 * i + 2] = 60;
        rgba[4 * i + 3] = 0; // fully transparent: alpha is dropped, not composited
    }
    img_write_png("rgba/a.png", rgba, 16, 16, PNG_FORMAT_RGBA);
    stoker_generator gen;
    create(&gen, SIZE);
    int seen[2] = {0};
    for (uint64_t seed = 0; seed < 20; seed++) {
        int32_t label;
        float *img = example(&gen, seed, &label);
        seen[label]++;
        double r = channel_mean(img, 0), g = channel_mean(img, 1), b = channel_mean(img, 2);
        if (label == 0) {
            cr_expect(fabs(r - g) < 1e-3 && fabs(g - b) < 1e-3, "gray: %f %f %f", r, g, b);
        } else {
            cr_expect(g > b && b > r && g > 0.5, "rgba: %f %f %f", r, g, b);
        }
        free(img);
    }
    cr_expect(seen[0] > 0 && seen[1] > 0);
    stoker_generator_fini(&gen);
}

static void
expect_error(uint32_t size, int want_rv, const char *want1, const char *want2)
{
    stoker_generator gen = {0};
    char err[512] = "";
    int rv = images_generator_create(img_root, size, false, &gen, err, sizeof err);
    cr_expect_eq(rv, want_rv, "rv %d, err: %s", rv, err);
    cr_expect(strstr(err, want1) != NULL, "err '%s' lacks '%s'", err, want1);
    if (want2 != NULL)
        cr_expect(strstr(err, want2) != NULL, "err '%s' lacks '%s'", err, want2);
    cr_expect_null(gen.user, "out untouched on failure");
}

Test(images, missing_folder_is_named)
{
    char missing[128];
    snprintf(missing, sizeof missing, "%s/nope", img_root);
    stoker_generator gen = {0};
    char err[512] = "";
    cr_expect_eq(images_generator_create(missing, SIZE, false, &gen, err, sizeof err),
                 STOKER_INVALID);
    cr_expect(strstr(err, missing) && strstr(err, "does not exist"), "%s", err);
}

Test(images, folder_without_classes_is_refused)
{
    write_bytes("loose.png", "x", 1);
    expect_error(SIZE, STOKER_INVALID, img_root, "no class subfolders");
}

Test(images, empty_class_folder_is_named)
{
    make_three_classes();
    img_make_dir("d_empty");
    expect_error(SIZE, STOKER_INVALID, "d_empty", "no .png, .jpg or .jpeg");
}

Test(images, corrupt_png_is_named)
{
    make_three_classes();
    static const uint8_t header_only[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0};
    write_bytes("b_green/broken.png", header_only, sizeof header_only);
    expect_error(SIZE, STOKER_INVALID, "b_green/broken.png", "PNG");
}

Test(images, truncated_jpeg_is_named)
{
    img_make_dir("one");
    uint8_t *rgb = pattern(64, 64, 1);
    write_jpeg("one/full.jpg", rgb, 64, 64, 3);
    free(rgb);
    FILE *f = fopen(img_path_in("one/full.jpg"), "rb");
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_bytes("one/cut.jpg", buf, n / 2);
    expect_error(SIZE, STOKER_INVALID, "one/cut.jpg", "JPEG");
}

Test(images, file_that_is_no_image_is_named)
{
    img_make_dir("x");
    write_bytes("x/fake.jpg", "GIF89a......", 12);
    expect_error(SIZE, STOKER_INVALID, "x/fake.jpg", "not a PNG or JPEG");
}

Test(images, bad_size_is_refused)
{
    make_three_classes();
    expect_error(0, STOKER_INVALID, "size 0", NULL);
}
