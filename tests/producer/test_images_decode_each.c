// The `images` generator with decode_each: creation reads headers only, so
// the first example comes far sooner than decoding the whole folder, and a file whose header is
// good but whose data is broken is found when an example needs it: reported with its path,
// skipped, counted, replaced by another image chosen from the seed, never fatal. Folders are
// written by the tests (PNG with libpng, JPEG with libjpeg), as in test_images.c.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "image_fixtures.h"
#include "images.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

#define SIZE 32

static void
make_root(void)
{
    img_root_make("stoker-images-each");
    img_capture_log();
}

static void
remove_root(void)
{
    img_release_log();
    img_root_remove();
}

TestSuite(decode_each, .init = make_root, .fini = remove_root, .timeout = 60);

// An (h, w, 3) image of smooth gradients (cheap to encode, still a real decode).
static uint8_t *
pattern(uint32_t w, uint32_t h, uint32_t salt)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t c = 0; c < 3; c++)
                rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)((x * (c + 1) / 4 + y / 2 + salt * 7));
    return rgb;
}

static void
write_png(const char *rel, uint32_t w, uint32_t h, uint32_t salt)
{
    uint8_t *rgb = pattern(w, h, salt);
    img_write_png(rel, rgb, w, h, PNG_FORMAT_RGB);
    free(rgb);
}

static void
write_jpeg(const char *rel, uint32_t w, uint32_t h, uint32_t salt)
{
    uint8_t *rgb = pattern(w, h, salt);
    FILE *f = fopen(img_path_in(rel), "wb");
    cr_assert_not_null(f);
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    cinfo.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cinfo);
    jpeg_stdio_dest(&cinfo, f);
    cinfo.image_width = w;
    cinfo.image_height = h;
    cinfo.input_components = 3;
    cinfo.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, 90, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    // An APP segment before the frame header, as cameras write (EXIF): the header walk skips it.
    static const uint8_t app[100] = "Exif";
    jpeg_write_marker(&cinfo, JPEG_APP0 + 1, app, sizeof app);
    while (cinfo.next_scanline < h) {
        JSAMPROW row = rgb + (size_t)cinfo.next_scanline * w * 3;
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    fclose(f);
    free(rgb);
}

// Keeps the first keep_percent of the file at rel: the header stays good, the data is cut.
static void
truncate_file(const char *rel, int keep_percent)
{
    struct stat st;
    cr_assert_eq(stat(img_path_in(rel), &st), 0);
    cr_assert_eq(truncate(img_path_in(rel), st.st_size * keep_percent / 100), 0);
}

static int
create(stoker_generator *gen, bool each, char *err, size_t err_len)
{
    return images_generator_create(img_root, SIZE, each, gen, err, err_len);
}

// Fills one example for seed; returns fill's code.
static int
fill(stoker_generator *gen, uint64_t seed, float *img, int32_t *label)
{
    void *fields[] = {img, label};
    return gen->fill(gen->user, 0, seed, fields);
}

// Two classes of n_per_class files each, PNG and JPEG, w x h.
static void
make_folder(int n_per_class, uint32_t w, uint32_t h)
{
    img_make_dir("a");
    img_make_dir("b");
    for (int i = 0; i < n_per_class; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "a/%03d.png", i);
        write_png(rel, w, h, (uint32_t)i);
        snprintf(rel, sizeof rel, "b/%03d.jpg", i);
        write_jpeg(rel, w, h, (uint32_t)i);
    }
}

Test(decode_each, first_example_comes_without_decoding_the_folder)
{
    // 80 files of 640x480: decoding them all takes hundreds of ms, their headers almost nothing.
    make_folder(40, 640, 480);
    char err[512] = "";
    float *img = malloc(3 * SIZE * SIZE * sizeof *img);
    int32_t label;

    stoker_generator once, each;
    uint64_t t0 = stoker_now_ns();
    cr_assert_eq(create(&once, false, err, sizeof err), STOKER_OK, "create once: %s", err);
    cr_assert_eq(fill(&once, 1, img, &label), STOKER_OK);
    double once_ms = (double)(stoker_now_ns() - t0) / 1e6;
    stoker_generator_fini(&once);

    t0 = stoker_now_ns();
    cr_assert_eq(create(&each, true, err, sizeof err), STOKER_OK, "create each: %s", err);
    cr_assert_eq(fill(&each, 1, img, &label), STOKER_OK);
    double each_ms = (double)(stoker_now_ns() - t0) / 1e6;
    stoker_generator_fini(&each);
    free(img);

    fprintf(stderr,
            "80 files of 640x480: first example after %.1f ms decoding all, %.1f ms with "
            "decode each\n",
            once_ms, each_ms);
    cr_assert_lt(each_ms * 5, once_ms,
                 "decode each took %.1f ms to its first example, decoding all %.1f ms: start-up "
                 "still decodes the folder",
                 each_ms, once_ms);
}

Test(decode_each, headers_of_png_and_jpeg_give_the_decoded_dimensions)
{
    // Odd sizes, so that width and height cannot be mixed up unnoticed: same bytes as decoding
    // all at start, for many seeds (the crop depends on the dimensions).
    img_make_dir("a");
    write_png("a/x.png", 37, 91, 1);
    write_jpeg("a/y.jpg", 203, 45, 2);
    char err[512] = "";
    stoker_generator once, each;
    cr_assert_eq(create(&once, false, err, sizeof err), STOKER_OK, "%s", err);
    cr_assert_eq(create(&each, true, err, sizeof err), STOKER_OK, "%s", err);
    float *x = malloc(3 * SIZE * SIZE * sizeof *x), *y = malloc(3 * SIZE * SIZE * sizeof *y);
    for (uint64_t seed = 1; seed <= 20; seed++) {
        int32_t lx, ly;
        cr_assert_eq(fill(&once, seed, x, &lx), STOKER_OK);
        cr_assert_eq(fill(&each, seed, y, &ly), STOKER_OK);
        cr_expect_eq(memcmp(x, y, 3 * SIZE * SIZE * sizeof *x), 0, "seed %llu",
                     (unsigned long long)seed);
    }
    free(x);
    free(y);
    stoker_generator_fini(&once);
    stoker_generator_fini(&each);
}

Test(decode_each, corrupt_files_are_named_skipped_and_counted_and_production_goes_on)
{
    make_folder(5, 48, 40);
    truncate_file("a/002.png", 50);
    truncate_file("b/003.jpg", 50);
    char err[512] = "";
    stoker_generator gen;

    // Decoding all at start refuses the folder, naming the first bad file.
    cr_assert_eq(create(&gen, false, err, sizeof err), STOKER_INVALID);
    cr_assert(strstr(err, "a/002.png") != NULL, "err: %s", err);

    // decode_each starts (the headers are good) and keeps making examples.
    cr_assert_eq(create(&gen, true, err, sizeof err), STOKER_OK, "create: %s", err);
    float *img = malloc(3 * SIZE * SIZE * sizeof *img);
    for (uint64_t seed = 1; seed <= 300; seed++) {
        int32_t label = -1;
        cr_assert_eq(fill(&gen, seed, img, &label), STOKER_OK, "seed %llu",
                     (unsigned long long)seed);
        cr_assert(label == 0 || label == 1, "label %d", label);
    }
    cr_assert_eq(images_generator_skipped(&gen), 2, "%zu files skipped, expected 2",
                 images_generator_skipped(&gen));
    cr_assert(strstr(img_logged, "a/002.png") != NULL, "the bad PNG is not named:\n%s", img_logged);
    cr_assert(strstr(img_logged, "b/003.jpg") != NULL, "the bad JPEG is not named:\n%s",
              img_logged);
    // Each is reported once, not for every example that drew it.
    const char *first = strstr(img_logged, "a/002.png");
    cr_assert_null(strstr(first + 1, "a/002.png"), "reported twice:\n%s", img_logged);
    stoker_generator_fini(&gen);
    cr_assert(strstr(img_logged, "2 of 10 files could not be decoded") != NULL,
              "no count at the end:\n%s", img_logged);
    free(img);
}

Test(decode_each, replacements_depend_on_the_seed_not_on_the_order_of_discovery)
{
    make_folder(4, 40, 30);
    truncate_file("a/001.png", 40);
    truncate_file("b/000.jpg", 40);
    truncate_file("b/002.jpg", 40);
    char err[512] = "";
    stoker_generator up, down;
    cr_assert_eq(create(&up, true, err, sizeof err), STOKER_OK, "%s", err);
    cr_assert_eq(create(&down, true, err, sizeof err), STOKER_OK, "%s", err);
    enum { N = 100 };
    float *a = malloc((size_t)N * 3 * SIZE * SIZE * sizeof *a);
    float *b = malloc((size_t)N * 3 * SIZE * SIZE * sizeof *b);
    int32_t la[N], lb[N];
    // up meets the bad files in one order, down in another.
    for (int i = 0; i < N; i++)
        cr_assert_eq(fill(&up, (uint64_t)i + 1, a + (size_t)i * 3 * SIZE * SIZE, &la[i]),
                     STOKER_OK);
    for (int i = N - 1; i >= 0; i--)
        cr_assert_eq(fill(&down, (uint64_t)i + 1, b + (size_t)i * 3 * SIZE * SIZE, &lb[i]),
                     STOKER_OK);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(la[i], lb[i], "seed %d", i + 1);
        cr_expect_eq(memcmp(a + (size_t)i * 3 * SIZE * SIZE, b + (size_t)i * 3 * SIZE * SIZE,
                            3 * SIZE * SIZE * sizeof *a),
                     0, "seed %d made different examples", i + 1);
    }
    cr_assert_eq(images_generator_skipped(&up), 3);
    cr_assert_eq(images_generator_skipped(&down), 3);
    free(a);
    free(b);
    stoker_generator_fini(&up);
    stoker_generator_fini(&down);
}

Test(decode_each, a_folder_where_every_file_is_corrupt_fails_the_fill_clearly)
{
    make_folder(2, 40, 30);
    truncate_file("a/000.png", 50);
    truncate_file("a/001.png", 50);
    truncate_file("b/000.jpg", 50);
    truncate_file("b/001.jpg", 50);
    char err[512] = "";
    stoker_generator gen;
    cr_assert_eq(create(&gen, true, err, sizeof err), STOKER_OK, "%s", err);
    float *img = malloc(3 * SIZE * SIZE * sizeof *img);
    int32_t label;
    cr_assert_eq(fill(&gen, 1, img, &label), STOKER_INVALID);
    cr_assert(strstr(img_logged, "none of the 4 files could be decoded") != NULL, "%s", img_logged);
    free(img);
    stoker_generator_fini(&gen);
}

Test(decode_each, a_bad_header_is_still_refused_at_start_naming_the_file)
{
    make_folder(2, 40, 30);
    // A JPEG that ends before its frame header, and a PNG whose IHDR is missing.
    static const uint8_t jpeg_stub[] = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 'J', 'F'};
    FILE *f = fopen(img_path_in("b/zz.jpg"), "wb");
    fwrite(jpeg_stub, 1, sizeof jpeg_stub, f);
    fclose(f);
    char err[512] = "";
    stoker_generator gen = {0};
    cr_assert_eq(create(&gen, true, err, sizeof err), STOKER_INVALID);
    cr_assert(strstr(err, "b/zz.jpg") != NULL && strstr(err, "JPEG") != NULL, "err: %s", err);
    cr_assert_null(gen.user, "out untouched on failure");
    remove(img_path_in("b/zz.jpg"));
    static const uint8_t png_stub[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0};
    f = fopen(img_path_in("a/zz.png"), "wb");
    fwrite(png_stub, 1, sizeof png_stub, f);
    fclose(f);
    cr_assert_eq(create(&gen, true, err, sizeof err), STOKER_INVALID);
    cr_assert(strstr(err, "a/zz.png") != NULL && strstr(err, "PNG") != NULL, "err: %s", err);
}

// Opens img_root with pipeline spec (NULL: the built-in one), the JPEG draft on or off.
static void
open_with(const char *spec, images_output output, bool each, bool draft, stoker_generator *gen)
{
    images_config cfg;
    images_config_init(&cfg);
    cfg.dir = img_root;
    cfg.height = cfg.width = SIZE;
    cfg.augment = spec;
    cfg.output = output;
    cfg.decode_each = each;
    cfg.jpeg_draft = draft;
    cfg.quiet = true;
    char err[512] = "";
    cr_assert_eq(images_generator_open(&cfg, gen, err, sizeof err), STOKER_OK, "%s", err);
}

// JPEGs decoded reduced (the default, --jpeg-draft on): decoding once (each JPEG held at every
// scale its examples may use) makes exactly the bytes decoding each example does, for the
// built-in pipeline, a rich one and an evaluation one (resize first: one reduced scale only),
// float32 and uint8; sizes from no reduction possible to 1/8, odd ones (fractional boxes).
// With the draft off the two modes agree as well, and the draft does change some examples.
Test(decode_each, jpeg_draft_decode_once_and_each_make_the_same_bytes)
{
    static const uint32_t sizes[][2] = {{300, 260}, {301, 203}, {97, 75}, {33, 40}, {130, 517}};
    img_make_dir("a");
    img_make_dir("b");
    write_png("a/big.png", 300, 260, 9);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "%s/%zu.jpg", i % 2 ? "a" : "b", i);
        write_jpeg(rel, sizes[i][0], sizes[i][1], (uint32_t)i);
    }
    static const char *const specs[] = {
        NULL, "rrc(0.08,1;0.75,1.33),hflip,jitter(b=0.4,c=0.4,s=0.4,h=0.1),rotate(15),normalize",
        "resize(37),ccrop(32),normalize", "rrc(0.5,1;0.75,1.33)"};
    for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
        for (int out = 0; out < 2; out++) {
            images_output output = out ? IMAGES_UINT8 : IMAGES_FLOAT32;
            stoker_generator once, each, full_once, full_each;
            open_with(specs[k], output, false, true, &once);
            open_with(specs[k], output, true, true, &each);
            open_with(specs[k], output, false, false, &full_once);
            open_with(specs[k], output, true, false, &full_each);
            size_t bytes = stoker_field_bytes(&once.schema.fields[0]);
            uint8_t *x = malloc(bytes), *y = malloc(bytes), *fx = malloc(bytes),
                    *fy = malloc(bytes);
            int changed = 0;
            for (uint64_t seed = 1; seed <= 60; seed++) {
                int64_t lx, ly, lfx, lfy;
                void *fx_fields[] = {fx, &lfx}, *fy_fields[] = {fy, &lfy};
                void *x_fields[] = {x, &lx}, *y_fields[] = {y, &ly};
                cr_assert_eq(once.fill(once.user, 0, seed, x_fields), STOKER_OK);
                cr_assert_eq(each.fill(each.user, 0, seed, y_fields), STOKER_OK);
                cr_assert_eq(full_once.fill(full_once.user, 0, seed, fx_fields), STOKER_OK);
                cr_assert_eq(full_each.fill(full_each.user, 0, seed, fy_fields), STOKER_OK);
                cr_expect(memcmp(x, y, bytes) == 0 && lx == ly,
                          "spec '%s' %s seed %llu: decode once and each differ with the draft",
                          specs[k] ? specs[k] : "(built-in)", out ? "uint8" : "float32",
                          (unsigned long long)seed);
                cr_expect(memcmp(fx, fy, bytes) == 0 && lfx == lfy,
                          "spec '%s' seed %llu: decode once and each differ without the draft",
                          specs[k] ? specs[k] : "(built-in)", (unsigned long long)seed);
                cr_expect_eq(lx, lfx);
                changed += memcmp(x, fx, bytes) != 0;
            }
            cr_expect_gt(changed, 10, "spec '%s': the draft changed only %d of 60 examples",
                         specs[k] ? specs[k] : "(built-in)", changed);
            free(x);
            free(y);
            free(fx);
            free(fy);
            stoker_generator_fini(&once);
            stoker_generator_fini(&each);
            stoker_generator_fini(&full_once);
            stoker_generator_fini(&full_each);
        }
    }
}
