// The images generator's other formats and its bad files: uncompressed 24- and 32-bit
// BMP in both row orders decode to their pixels and stay in bounds on every truncation and on
// thousands of corrupted headers; TIFF through libtiff (when built with it); a corrupt,
// unsupported or unreadable file is named and skipped by images_generator_open, never fatal,
// while images_generator_create keeps refusing it; the memory cap's message.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <png.h>
#include <zlib.h>
#if STOKER_HAS_TIFF
#include <tiffio.h>
#endif

#include "image_bmp.h"
#include "image_file.h"
#include "image_fixtures.h"
#include "images.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"

static void
make_root(void)
{
    img_root_make("stoker-images-formats");
    img_capture_log();
}

static void
remove_root(void)
{
    img_release_log();
    img_root_remove();
}

TestSuite(formats, .init = make_root, .fini = remove_root, .timeout = 60);

static uint8_t *
pattern(uint32_t w, uint32_t h, uint32_t salt)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (uint32_t i = 0; i < w * h * 3; i++)
        rgb[i] = (uint8_t)(i * 7 + salt * 31 + i / 5);
    return rgb;
}

static void
put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}

static void
put32(uint8_t *p, uint32_t v)
{
    put16(p, v & 0xffff), put16(p + 2, v >> 16);
}

// A BMP of rgb ((h, w, 3)) in memory: bits 24 or 32 (alpha 0x80; bitfields: BI_BITFIELDS with
// BGR masks), rows bottom-up unless top_down. *len its size; malloc'd.
static uint8_t *
bmp_bytes(const uint8_t *rgb, uint32_t w, uint32_t h, uint32_t bits, bool top_down, bool bitfields,
          size_t *len)
{
    uint32_t stride = (w * bits + 31) / 32 * 4, offset = 54 + (bitfields ? 12 : 0);
    *len = offset + (size_t)stride * h;
    uint8_t *b = calloc(1, *len);
    b[0] = 'B', b[1] = 'M';
    put32(b + 2, (uint32_t)*len);
    put32(b + 10, offset);
    put32(b + 14, 40);
    put32(b + 18, w);
    put32(b + 22, top_down ? (uint32_t) - (int32_t)h : h);
    put16(b + 26, 1);
    put16(b + 28, bits);
    put32(b + 30, bitfields ? 3 : 0);
    if (bitfields)
        put32(b + 54, 0xff0000), put32(b + 58, 0xff00), put32(b + 62, 0xff);
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *row = b + offset + (size_t)(top_down ? y : h - 1 - y) * stride;
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            uint8_t *o = row + x * (bits / 8);
            o[0] = p[2], o[1] = p[1], o[2] = p[0];
            if (bits == 32)
                o[3] = 0x80;
        }
    }
    return b;
}

static void
write_file(const char *rel, const void *data, size_t len)
{
    FILE *f = fopen(img_path_in(rel), "wb");
    cr_assert_not_null(f, "cannot write %s", rel);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

// Decodes data as the file rel; STOKER_OK with *out or the error code (err written).
static int
decode(const char *rel, const uint8_t *data, size_t len, image_pixels *out, char *err,
       size_t err_len)
{
    size_t budget = 0;
    return image_file_decode(img_path_in(rel), data, len, &budget, 0, out, err, err_len);
}

static void
expect_pixels(const image_pixels *px, const uint8_t *rgb, uint32_t w, uint32_t h, const char *what)
{
    cr_assert_eq(px->width, w, "%s", what);
    cr_assert_eq(px->height, h, "%s", what);
    cr_assert(memcmp(px->rgb, rgb, (size_t)w * h * 3) == 0, "%s: pixels differ", what);
}

Test(formats, bmp_24_and_32_bit_in_both_row_orders_decode_to_their_pixels)
{
    const uint32_t w = 7, h = 5; // 21-byte rows of 24-bit: padded to 24
    uint8_t *rgb = pattern(w, h, 1);
    const struct {
        uint32_t bits;
        bool top_down, bitfields;
    } kinds[] = {{24, false, false}, {24, true, false}, {32, false, false}, {32, true, true}};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        size_t len;
        uint8_t *b =
            bmp_bytes(rgb, w, h, kinds[k].bits, kinds[k].top_down, kinds[k].bitfields, &len);
        image_pixels px;
        char err[256] = "", what[64];
        snprintf(what, sizeof what, "%u-bit%s%s", kinds[k].bits,
                 kinds[k].top_down ? " top-down" : "", kinds[k].bitfields ? " bitfields" : "");
        cr_assert_eq(decode("x.bmp", b, len, &px, err, sizeof err), STOKER_OK, "%s: %s", what, err);
        expect_pixels(&px, rgb, w, h, what);
        free(px.rgb);
        // The header alone gives the same dimensions.
        write_file("probe.bmp", b, len);
        uint32_t pw = 0, ph = 0;
        cr_assert_eq(image_file_probe(img_path_in("probe.bmp"), &pw, &ph, err, sizeof err),
                     STOKER_OK, "%s: %s", what, err);
        cr_expect(pw == w && ph == h, "%s: probe %ux%u", what, pw, ph);
        free(b);
    }
    free(rgb);
}

Test(formats, every_truncation_and_corrupted_bmp_header_is_an_error_or_stays_in_bounds)
{
    const uint32_t w = 9, h = 6;
    uint8_t *rgb = pattern(w, h, 2);
    size_t len;
    uint8_t *good = bmp_bytes(rgb, w, h, 24, false, false, &len);
    char err[256];
    image_pixels px;
    for (size_t n = 0; n < len; n++) { // each cut copied so ASan sees reads past it
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, good, n);
        int rv = decode("cut.bmp", cut, n, &px, err, sizeof err);
        cr_assert_neq(rv, STOKER_OK, "a BMP cut to %zu of %zu bytes decoded", n, len);
        free(cut);
    }
    // Corrupted headers: random bytes among the first 66, decoded from an exact-size copy.
    stoker_rng rng;
    stoker_rng_seed(&rng, 18);
    int decoded = 0;
    for (int round = 0; round < 4000; round++) {
        uint8_t *bad = malloc(len);
        memcpy(bad, good, len);
        for (int k = 0, n = 1 + (int)(stoker_rng_u64(&rng) % 4); k < n; k++)
            bad[stoker_rng_u64(&rng) % 54] = (uint8_t)stoker_rng_u64(&rng);
        if (decode("bad.bmp", bad, len, &px, err, sizeof err) == STOKER_OK) {
            decoded++;
            cr_assert((size_t)px.width * px.height * 3 <= (size_t)1 << 30);
            free(px.rgb);
        } else {
            cr_assert(strstr(err, "bad.bmp") != NULL, "error without the path: %s", err);
        }
        free(bad);
    }
    cr_expect_gt(decoded, 0, "some corruptions (of unused header fields) still decode");
    free(good);
    free(rgb);
}

Test(formats, unsupported_bmp_kinds_are_named)
{
    uint8_t *rgb = pattern(4, 4, 3);
    size_t len;
    uint8_t *b = bmp_bytes(rgb, 4, 4, 24, false, false, &len);
    const struct {
        size_t at;
        uint32_t value;
        const char *want;
    } cases[] = {{28, 8, "palette"},
                 {28, 16, "16 bits"},
                 {30, 1, "compressed"},
                 {14, 12, "OS/2"},
                 {26, 2, "planes"}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint8_t *c = malloc(len);
        memcpy(c, b, len);
        if (cases[k].at == 28 || cases[k].at == 26)
            put16(c + cases[k].at, cases[k].value);
        else
            put32(c + cases[k].at, cases[k].value);
        image_pixels px;
        char err[256] = "";
        cr_expect_eq(decode("odd.bmp", c, len, &px, err, sizeof err), STOKER_INVALID);
        cr_expect(strstr(err, "odd.bmp") && strstr(err, cases[k].want), "%s", err);
        free(c);
    }
    free(b);
    free(rgb);
}

#if STOKER_HAS_TIFF
// Writes rgb as a TIFF (8-bit RGB, or gray from the red channel), with the given compression.
static void
write_tiff(const char *rel, const uint8_t *rgb, uint32_t w, uint32_t h, bool gray,
           uint16_t compression)
{
    TIFF *t = TIFFOpen(img_path_in(rel), "w");
    cr_assert_not_null(t);
    uint16_t spp = gray ? 1 : 3;
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, spp);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, gray ? PHOTOMETRIC_MINISBLACK : PHOTOMETRIC_RGB);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_COMPRESSION, compression);
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 2);
    uint8_t *row = malloc((size_t)w * 3);
    for (uint32_t y = 0; y < h; y++) {
        for (uint32_t x = 0; x < w; x++)
            for (uint16_t c = 0; c < spp; c++)
                row[x * spp + c] = rgb[((size_t)y * w + x) * 3 + c];
        cr_assert(TIFFWriteScanline(t, row, y, 0) == 1);
    }
    free(row);
    TIFFClose(t);
}

static uint8_t *
read_all(const char *rel, size_t *len)
{
    uint8_t *data;
    char err[256];
    cr_assert_eq(image_file_read(img_path_in(rel), &data, len, err, sizeof err), STOKER_OK, "%s",
                 err);
    return data;
}

Test(formats, tiff_rgb_and_gray_decode_to_their_pixels)
{
    const uint32_t w = 11, h = 7;
    uint8_t *rgb = pattern(w, h, 4);
    write_tiff("a.tif", rgb, w, h, false, COMPRESSION_LZW);
    write_tiff("g.tiff", rgb, w, h, true, COMPRESSION_NONE);
    size_t len;
    uint8_t *data = read_all("a.tif", &len);
    image_pixels px;
    char err[256] = "";
    cr_assert_eq(decode("a.tif", data, len, &px, err, sizeof err), STOKER_OK, "%s", err);
    expect_pixels(&px, rgb, w, h, "RGB LZW TIFF");
    free(px.rgb);
    free(data);
    uint8_t *gray = malloc((size_t)w * h * 3);
    for (size_t i = 0; i < (size_t)w * h; i++)
        gray[3 * i] = gray[3 * i + 1] = gray[3 * i + 2] = rgb[3 * i];
    data = read_all("g.tiff", &len);
    cr_assert_eq(decode("g.tiff", data, len, &px, err, sizeof err), STOKER_OK, "%s", err);
    expect_pixels(&px, gray, w, h, "gray TIFF");
    free(px.rgb);
    uint32_t pw = 0, ph = 0;
    cr_assert_eq(image_file_probe(img_path_in("g.tiff"), &pw, &ph, err, sizeof err), STOKER_OK,
                 "%s", err);
    cr_expect(pw == w && ph == h);
    // Cut in its pixel data (the directory sits at the end for libtiff's writer: cut there
    // too): an error naming the file, whatever the cut.
    for (size_t n = 8; n < len; n += 13) {
        int rv = decode("g.tiff", data, n, &px, err, sizeof err);
        if (rv == STOKER_OK)
            free(px.rgb);
        cr_expect(rv != STOKER_OK || n >= len - 1, "a TIFF cut to %zu of %zu decoded", n, len);
        if (rv != STOKER_OK)
            cr_expect(strstr(err, "g.tiff") != NULL, "%s", err);
    }
    free(data);
    free(gray);
    free(rgb);
}
#endif

// A PNG that says it is w x h (IHDR with a valid CRC) and holds one empty IDAT: the header is
// all a decoder sees before the memory cap refuses it.
static void
write_png_header(const char *rel, uint32_t w, uint32_t h)
{
    uint8_t b[8 + 25 + 12 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t *c = b + 8;
    c[3] = 13;
    memcpy(c + 4, "IHDR", 4);
    for (int i = 0; i < 4; i++)
        c[8 + i] = (uint8_t)(w >> (24 - 8 * i)), c[12 + i] = (uint8_t)(h >> (24 - 8 * i));
    c[16] = 8, c[17] = 2; // 8-bit RGB
    uint32_t crc = (uint32_t)crc32(0, c + 4, 17);
    for (int i = 0; i < 4; i++)
        c[21 + i] = (uint8_t)(crc >> (24 - 8 * i));
    uint8_t *idat = c + 25;
    memcpy(idat + 4, "IDAT", 4);
    crc = (uint32_t)crc32(0, idat + 4, 4);
    for (int i = 0; i < 4; i++)
        idat[8 + i] = (uint8_t)(crc >> (24 - 8 * i));
    uint8_t *iend = idat + 12;
    memcpy(iend + 4, "IEND", 4);
    crc = (uint32_t)crc32(0, iend + 4, 4);
    for (int i = 0; i < 4; i++)
        iend[8 + i] = (uint8_t)(crc >> (24 - 8 * i));
    write_file(rel, b, sizeof b);
}

static void
good_png(const char *rel, uint32_t salt)
{
    uint8_t *rgb = pattern(24, 16, salt);
    img_write_png(rel, rgb, 24, 16, PNG_FORMAT_RGB);
    free(rgb);
}

static int
open_folder(bool decode_each, stoker_generator *gen, char *err, size_t err_len)
{
    images_config cfg;
    images_config_init(&cfg);
    cfg.dir = img_root;
    cfg.height = cfg.width = 8;
    cfg.decode_each = decode_each;
    cfg.quiet = true;
    *gen = (stoker_generator){0};
    return images_generator_open(&cfg, gen, err, err_len);
}

Test(formats, bad_files_are_named_and_skipped_at_start_never_fatal)
{
    img_make_dir("a");
    img_make_dir("b");
    img_make_dir("c");
    good_png("a/1.png", 1);
    good_png("a/2.png", 2);
    good_png("b/1.png", 3);
    write_file("a/broken.png", "\x89PNG\r\n\x1a\n\0\0", 10);
    write_file("b/text.jpg", "not a jpeg at all", 17);
    uint8_t *rgb = pattern(4, 4, 5);
    size_t len;
    uint8_t *b = bmp_bytes(rgb, 4, 4, 24, false, false, &len);
    put16(b + 28, 8); // a palette BMP: unsupported
    write_file("b/palette.bmp", b, len);
    write_file("c/only.tif", "II*\0\x08\0\0\0\0\0", 10); // a TIFF without a directory
    free(b);
    free(rgb);
    for (int each = 0; each < 2; each++) {
        img_logged[0] = '\0';
        stoker_generator gen;
        char err[512] = "";
        cr_assert_eq(open_folder(each, &gen, err, sizeof err), STOKER_OK, "decode_each %d: %s",
                     each, err);
        // Named with the path; the PNG's and the text file's problems found at start in both
        // modes (a decode_each header check sees them too).
        const char *bad[] = {"a/broken.png", "b/text.jpg", "b/palette.bmp", "c/only.tif"};
        for (size_t i = 0; i < 4; i++)
            cr_expect(strstr(img_logged, bad[i]) != NULL, "decode_each %d: %s not named:\n%s", each,
                      bad[i], img_logged);
        cr_expect_eq(images_generator_skipped_at_start(&gen), 4);
        cr_expect(strstr(img_logged, "class 'c' (label 2) has no readable image") != NULL, "%s",
                  img_logged);
        cr_expect_eq(images_generator_classes(&gen), 3, "class c keeps its label");
        size_t files = 99;
        images_generator_class_name(&gen, 0, &files);
        cr_expect_eq(files, 2, "class a counts its readable files");
        cr_expect_eq(gen.labels->n_classes, 3);
        cr_expect_eq(gen.labels->files[2], 0);
        // Examples come (from a and b only).
        float img[3 * 8 * 8];
        int64_t label = -1;
        void *fields[2] = {img, &label};
        for (uint64_t seed = 1; seed <= 20; seed++) {
            cr_assert_eq(gen.fill(gen.user, seed, seed, fields), STOKER_OK);
            cr_assert(label == 0 || label == 1, "label %lld", (long long)label);
        }
        stoker_generator_fini(&gen);
    }
    // images_generator_create keeps its contract: the first bad file refuses the folder.
    stoker_generator gen = {0};
    char err[512] = "";
    cr_expect_eq(images_generator_create(img_root, 8, false, &gen, err, sizeof err),
                 STOKER_INVALID);
    cr_expect(strstr(err, "a/broken.png") != NULL, "%s", err);
}

Test(formats, a_folder_of_only_bad_files_is_refused_clearly)
{
    img_make_dir("a");
    write_file("a/x.png", "\x89PNG\r\n\x1a\n\0\0", 10);
    stoker_generator gen;
    char err[512] = "";
    cr_expect_eq(open_folder(false, &gen, err, sizeof err), STOKER_INVALID);
    cr_expect(strstr(err, "none of its 1 image files could be read") != NULL, "%s", err);
}

Test(formats, the_memory_cap_names_the_decoded_images_and_decode_each_holds_none)
{
    img_make_dir("a");
    good_png("a/0.png", 1);
    // Two of 15000 x 15000 (644 MiB each decoded): together past the 1 GiB cap.
    write_png_header("a/1.png", 15000, 15000);
    write_png_header("a/2.png", 15000, 15000);
    // Decoding the second after the first (the budget as the generator keeps it): refused on
    // its header, before any pixel is allocated, with the message a user sees.
    size_t len, used = (size_t)15000 * 15000 * 3 + 24 * 16 * 3;
    uint8_t *data;
    char err[512] = "";
    cr_assert_eq(image_file_read(img_path_in("a/2.png"), &data, &len, err, sizeof err), STOKER_OK);
    image_pixels px;
    cr_assert_eq(
        image_file_decode(img_path_in("a/2.png"), data, len, &used, 2, &px, err, sizeof err),
        STOKER_TOO_LARGE, "%s", err);
    free(data);
    cr_expect(strstr(err, "images: the decoded images need more than 1024 MiB") == err, "%s", err);
    cr_expect(strstr(err, "a/2.png") != NULL && strstr(err, "after 2 images") != NULL, "%s", err);
    cr_expect(strstr(err, "--decode each") != NULL, "the way out is said: %s", err);
    cr_expect(strstr(err, "images: images:") == NULL, "%s", err);
    // decode_each reads headers only: the folder opens holding no pixels at all.
    stoker_generator gen;
    cr_assert_eq(open_folder(true, &gen, err, sizeof err), STOKER_OK, "%s", err);
    stoker_generator_fini(&gen);
}
