// Reading image files: the whole file into memory, its header alone (signature and dimensions,
// for checking a folder without decoding it), and decoding PNG (libpng's simplified API), JPEG
// (libjpeg-turbo, at full size or reduced by its DCT scaling), WebP (libwebp, when built with it),
// BMP (image_bmp.c) and TIFF (image_tiff.c, libtiff when built with it) to 8-bit RGB. It knows
// nothing of folders, labels or augmentation (images.c).
#include "image_file.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>
#if STOKER_HAS_WEBP
#include <webp/decode.h>
#endif

#include "image_bmp.h"
#include "image_tiff.h"
#include "images.h"
#include "stoker/error.h"

#define MAX_IMAGE_SIDE 65535u // per side; protects the size arithmetic from hostile headers

// The decoded-pixel budget the caller keeps: bytes in use, and how many images hold them (for
// the message when it runs out).
typedef struct budget {
    size_t *decoded_bytes;
    size_t n_images;
} budget;

// Reserves bytes of the decoded-pixel budget for the image at path.
static int
reserve(budget *g, const char *path, uint32_t width, uint32_t height, size_t *bytes, char *err,
        size_t err_len)
{
    if (width == 0 || height == 0 || width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE) {
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: '%s': unsupported dimensions %ux%u", path, width, height);
    }
    size_t need = (size_t)width * height * 3;
    if (need > IMAGES_MAX_DECODED_BYTES - *g->decoded_bytes) {
        return stoker_errorf(
            err, err_len, STOKER_TOO_LARGE,
            "images: the decoded images need more than %zu MiB (limit reached at '%s', after "
            "%zu images); use fewer or smaller images, or --decode each "
            "(which keeps no pixels between examples)",
            IMAGES_MAX_DECODED_BYTES >> 20, path, g->n_images);
    }
    *bytes = need;
    return STOKER_OK;
}

static int
decode_png(budget *g, const char *path, const uint8_t *data, size_t len, image_pixels *im,
           char *err, size_t err_len)
{
    png_image png;
    memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&png, data, len)) {
        stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': corrupt or unsupported PNG: %s",
                      path, png.message);
        png_image_free(&png);
        return STOKER_INVALID;
    }
    size_t bytes;
    int rv = reserve(g, path, png.width, png.height, &bytes, err, err_len);
    if (rv != STOKER_OK) {
        png_image_free(&png);
        return rv;
    }
    // With alpha, read RGBA and drop the alpha (what PIL's convert("RGB") does) rather than let
    // libpng composite onto whatever the buffer holds.
    bool alpha = (png.format & PNG_FORMAT_FLAG_ALPHA) != 0;
    png.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
    uint8_t *buf = malloc(PNG_IMAGE_SIZE(png) + PIXEL_PAD);
    if (buf == NULL) {
        png_image_free(&png);
        return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory decoding '%s'",
                             path);
    }
    if (!png_image_finish_read(&png, NULL, buf, 0, NULL)) {
        stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': corrupt PNG: %s", path,
                      png.message);
        png_image_free(&png);
        free(buf);
        return STOKER_INVALID;
    }
    if (alpha) {
        size_t n = (size_t)png.width * png.height;
        for (size_t i = 0; i < n; i++) {
            buf[3 * i] = buf[4 * i];
            buf[3 * i + 1] = buf[4 * i + 1];
            buf[3 * i + 2] = buf[4 * i + 2];
        }
        uint8_t *shrunk = realloc(buf, bytes + PIXEL_PAD);
        if (shrunk != NULL)
            buf = shrunk;
    }
    memset(buf + bytes, 0, PIXEL_PAD);
    im->rgb = buf;
    im->width = png.width;
    im->height = png.height;
    *g->decoded_bytes += bytes;
    return STOKER_OK;
}

typedef struct jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} jpeg_err;

static void
jpeg_fail(j_common_ptr cinfo)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    e->pub.format_message(cinfo, e->message);
    longjmp(e->jump, 1);
}

// Warnings are tolerated (as PIL does), except a truncated file: that is corruption.
static void
jpeg_note(j_common_ptr cinfo, int level)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    if (level < 0 && e->pub.msg_code == JWRN_JPEG_EOF)
        jpeg_fail(cinfo);
    if (level < 0)
        e->pub.num_warnings++;
}

static void
jpeg_quiet(j_common_ptr cinfo)
{
    (void)cinfo;
}

static int
decode_jpeg(budget *g, const char *path, const uint8_t *data, size_t len, uint32_t scale,
            uint32_t max_rows, image_pixels *im, char *err, size_t err_len)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_err jerr;
    // Changed between setjmp and a possible longjmp: volatile, so their values survive the jump.
    uint8_t *volatile buf = NULL;
    uint8_t *volatile cmyk_row = NULL;
    volatile int rv = STOKER_OK;

    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = jpeg_fail;
    jerr.pub.emit_message = jpeg_note;
    jerr.pub.output_message = jpeg_quiet;
    if (setjmp(jerr.jump)) {
        stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': corrupt JPEG: %s", path,
                      jerr.message);
        jpeg_destroy_decompress(&cinfo);
        free(buf);
        free(cmyk_row);
        return STOKER_INVALID;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = scale;
    jpeg_start_decompress(&cinfo);
    size_t bytes;
    rv = reserve(g, path, cinfo.output_width, cinfo.output_height, &bytes, err, err_len);
    if (rv == STOKER_OK) {
        buf = malloc(bytes + PIXEL_PAD);
        if (cmyk)
            cmyk_row = malloc((size_t)cinfo.output_width * 4);
        if (buf == NULL || (cmyk && cmyk_row == NULL)) {
            stoker_errorf(err, err_len, STOKER_INVALID, "images: out of memory decoding '%s'",
                          path);
            rv = STOKER_NOMEM;
        }
    }
    if (rv != STOKER_OK) {
        jpeg_destroy_decompress(&cinfo);
        free(buf);
        free(cmyk_row);
        return rv;
    }
    size_t stride = (size_t)cinfo.output_width * 3;
    const uint32_t stop =
        max_rows > 0 && max_rows < cinfo.output_height ? max_rows : cinfo.output_height;
    while (cinfo.output_scanline < stop) {
        uint8_t *row = buf + (size_t)cinfo.output_scanline * stride;
        JSAMPROW rows[1] = {cmyk ? cmyk_row : row};
        jpeg_read_scanlines(&cinfo, rows, 1);
        if (cmyk) {
            // Adobe writes inverted CMYK: each channel times K gives RGB.
            for (uint32_t x = 0; x < cinfo.output_width; x++) {
                const uint8_t *p = cmyk_row + 4 * x;
                row[3 * x] = (uint8_t)((p[0] * p[3] + 127) / 255);
                row[3 * x + 1] = (uint8_t)((p[1] * p[3] + 127) / 255);
                row[3 * x + 2] = (uint8_t)((p[2] * p[3] + 127) / 255);
            }
        }
    }
    if (stop < cinfo.output_height) {
        memset(buf + stop * stride, 0, (cinfo.output_height - stop) * stride);
        jpeg_abort_decompress(&cinfo);
    } else {
        jpeg_finish_decompress(&cinfo);
    }
    memset(buf + bytes, 0, PIXEL_PAD);
    im->rgb = buf;
    im->width = cinfo.output_width;
    im->height = cinfo.output_height;
    im->scale = scale;
    im->full_width = cinfo.image_width;
    im->full_height = cinfo.image_height;
    jpeg_destroy_decompress(&cinfo);
    free(cmyk_row);
    *g->decoded_bytes += bytes;
    return STOKER_OK;
}

int
image_file_read(const char *path, uint8_t **data, size_t *len, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) != 0) {
        stoker_errorf(err, err_len, STOKER_INVALID, "images: cannot read '%s': %s", path,
                      strerror(errno));
        if (f != NULL)
            fclose(f);
        return STOKER_IO;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n > 0 ? n : 1);
    if (buf == NULL) {
        fclose(f);
        return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory reading '%s'",
                             path);
    }
    if (fread(buf, 1, n, f) != n) {
        stoker_errorf(err, err_len, STOKER_INVALID, "images: cannot read '%s': short read", path);
        fclose(f);
        free(buf);
        return STOKER_IO;
    }
    fclose(f);
    *data = buf;
    *len = n;
    return STOKER_OK;
}

static bool
is_webp(const uint8_t *data, size_t len)
{
    return len >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0;
}

static int
decode_webp(budget *g, const char *path, const uint8_t *data, size_t len, image_pixels *im,
            char *err, size_t err_len)
{
#if STOKER_HAS_WEBP
    int w = 0, h = 0;
    if (!WebPGetInfo(data, len, &w, &h)) {
        return stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': corrupt WebP", path);
    }
    size_t bytes;
    int rv = reserve(g, path, (uint32_t)w, (uint32_t)h, &bytes, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    uint8_t *buf = malloc(bytes + PIXEL_PAD);
    if (buf == NULL) {
        return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory decoding '%s'",
                             path);
    }
    // Alpha, if any, is dropped (RGB output), as PIL's convert("RGB") does.
    if (WebPDecodeRGBInto(data, len, buf, bytes, w * 3) == NULL) {
        free(buf);
        return stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': corrupt WebP data", path);
    }
    memset(buf + bytes, 0, PIXEL_PAD);
    im->rgb = buf;
    im->width = (uint32_t)w;
    im->height = (uint32_t)h;
    *g->decoded_bytes += bytes;
    return STOKER_OK;
#else
    (void)g, (void)data, (void)len, (void)im;
    return stoker_errorf(err, err_len, STOKER_INVALID,
                         "images: '%s': WebP support was not built (install libwebp-dev)", path);
#endif
}

static int
decode_bmp(budget *g, const char *path, const uint8_t *data, size_t len, image_pixels *im,
           char *err, size_t err_len)
{
    bmp_info info;
    const char *why;
    if (!bmp_parse(data, len, len, &info, &why))
        return stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': %s", path, why);
    size_t bytes;
    int rv = reserve(g, path, info.width, info.height, &bytes, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    uint8_t *buf = malloc(bytes + PIXEL_PAD);
    if (buf == NULL) {
        return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory decoding '%s'",
                             path);
    }
    bmp_rows(data, &info, buf);
    memset(buf + bytes, 0, PIXEL_PAD);
    im->rgb = buf;
    im->width = info.width;
    im->height = info.height;
    *g->decoded_bytes += bytes;
    return STOKER_OK;
}

static int
decode_tiff(budget *g, const char *path, const uint8_t *data, size_t len, image_pixels *im,
            char *err, size_t err_len)
{
    char why[300];
    uint32_t w, h;
    void *tif = tiff_open(data, len, &w, &h, why, sizeof(why));
    if (tif == NULL)
        return stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': %s", path, why);
    size_t bytes;
    int rv = reserve(g, path, w, h, &bytes, err, err_len);
    uint8_t *buf = NULL;
    if (rv == STOKER_OK && (buf = malloc(bytes + PIXEL_PAD)) == NULL)
        rv = stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory decoding '%s'", path);
    if (rv == STOKER_OK && !tiff_read(tif, buf, why, sizeof(why)))
        rv = stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': %s", path, why);
    tiff_close(tif);
    if (rv != STOKER_OK) {
        free(buf);
        return rv;
    }
    memset(buf + bytes, 0, PIXEL_PAD);
    im->rgb = buf;
    im->width = w;
    im->height = h;
    *g->decoded_bytes += bytes;
    return STOKER_OK;
}

// Decodes a PNG, JPEG, WebP, BMP or TIFF file (by its signature) into im.
static int
decode_any(budget *g, const char *path, const uint8_t *data, size_t len, uint32_t scale,
           uint32_t rows, image_pixels *im, char *err, size_t err_len)
{
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 8 && memcmp(data, png_magic, 8) == 0)
        return decode_png(g, path, data, len, im, err, err_len);
    if (image_file_scalable(data, len))
        return decode_jpeg(g, path, data, len, scale, rows, im, err, err_len);
    if (is_webp(data, len))
        return decode_webp(g, path, data, len, im, err, err_len);
    if (bmp_is(data, len))
        return decode_bmp(g, path, data, len, im, err, err_len);
    if (tiff_is(data, len))
        return decode_tiff(g, path, data, len, im, err, err_len);
    return stoker_errorf(err, err_len, STOKER_INVALID,
                         "images: '%s' is not a PNG or JPEG file (%s; nor WebP, BMP or TIFF)", path,
                         len == 0 ? "empty" : "unknown signature");
}

// Reads n bytes at off of fd into buf; false at the end of the file or on an error.
static bool
read_at(int fd, off_t off, uint8_t *buf, size_t n)
{
    while (n > 0) {
        ssize_t r = pread(fd, buf, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        buf += r;
        n -= (size_t)r;
        off += r;
    }
    return true;
}

static uint32_t
be16(const uint8_t *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// JPEG: walks the marker segments from the start of the image to the first frame header (SOF)
// and reads its dimensions. Only segment headers are read, not the data.
static bool
jpeg_dimensions(int fd, uint32_t *width, uint32_t *height)
{
    off_t off = 2; // after SOI
    uint8_t m[9];
    for (int segments = 0; segments < 1024; segments++) {
        if (!read_at(fd, off, m, 2) || m[0] != 0xff)
            return false;
        uint8_t marker = m[1];
        if (marker == 0xff) { // fill byte
            off++;
            continue;
        }
        if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd8)) { // no length
            off += 2;
            continue;
        }
        if (marker == 0xd9 || marker == 0xda) // end of image or scan data before any frame
            return false;
        bool sof =
            marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
        if (sof) {
            // length (2), precision (1), height (2), width (2)
            if (!read_at(fd, off + 2, m, 7))
                return false;
            *height = be16(m + 3);
            *width = be16(m + 5);
            return true;
        }
        if (!read_at(fd, off + 2, m, 2) || be16(m) < 2)
            return false;
        off += 2 + be16(m);
    }
    return false;
}

// Checks the file at path is a PNG (signature, IHDR) or a JPEG (SOI, a frame header) of
// dimensions that can be decoded, reading only its header. STOKER_OK with the dimensions;
// STOKER_IO (unreadable), STOKER_INVALID or STOKER_TOO_LARGE with err naming path.
int
image_file_probe(const char *path, uint32_t *width, uint32_t *height, char *err, size_t err_len)
{
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return stoker_errorf(err, err_len, STOKER_IO, "images: cannot read '%s': %s", path,
                             strerror(errno));
    }
    uint8_t h[BMP_HEADER_BYTES + 12]; // BMP's headers and bit-field masks; PNG's IHDR
    ssize_t n;
    while ((n = pread(fd, h, sizeof h, 0)) < 0 && errno == EINTR) {
    }
    bool ok;
    const char *kind;
    if (n >= 8 && memcmp(h, png_magic, 8) == 0) {
        kind = "PNG";
        ok = n >= 24 && memcmp(h + 12, "IHDR", 4) == 0;
        if (ok) {
            *width = be32(h + 16);
            *height = be32(h + 20);
        }
    } else if (n >= 3 && h[0] == 0xff && h[1] == 0xd8 && h[2] == 0xff) {
        kind = "JPEG";
        ok = jpeg_dimensions(fd, width, height);
    } else if (n >= 12 && is_webp(h, (size_t)n)) {
        kind = "WebP";
#if STOKER_HAS_WEBP
        // The VP8, VP8L or VP8X header holding the dimensions lies within the first 64 bytes.
        uint8_t head[64];
        ssize_t got;
        while ((got = pread(fd, head, sizeof head, 0)) < 0 && errno == EINTR) {
        }
        int w = 0, hh = 0;
        ok = got > 0 && WebPGetInfo(head, (size_t)got, &w, &hh);
        *width = (uint32_t)w;
        *height = (uint32_t)hh;
#else
        ok = false;
#endif
    } else if (n >= 2 && bmp_is(h, (size_t)n)) {
        struct stat st;
        bmp_info info;
        const char *why = NULL;
        kind = "BMP";
        ok = fstat(fd, &st) == 0 && bmp_parse(h, (size_t)n, (uint64_t)st.st_size, &info, &why);
        if (!ok) {
            close(fd);
            return stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': %s", path,
                                 why != NULL ? why : "cannot read its size");
        }
        *width = info.width;
        *height = info.height;
    } else if (n >= 4 && tiff_is(h, (size_t)n)) {
        char why[300];
        kind = "TIFF";
        if (!tiff_probe(fd, width, height, why, sizeof(why))) {
            close(fd);
            return stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s': %s", path, why);
        }
        ok = true;
    } else {
        close(fd);
        stoker_errorf(err, err_len, STOKER_INVALID,
                      "images: '%s' is not a PNG or JPEG file (%s; nor WebP, BMP or TIFF)", path,
                      n == 0 ? "empty" : "unknown signature");
        return n < 0 ? STOKER_IO : STOKER_INVALID;
    }
    close(fd);
    if (!ok) {
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: '%s': corrupt %s: no readable %s", path, kind,
                             strcmp(kind, "PNG") == 0    ? "IHDR chunk"
                             : strcmp(kind, "JPEG") == 0 ? "frame header"
                                                         : "header (or no WebP support built)");
    }
    if (*width == 0 || *height == 0 || *width > MAX_IMAGE_SIDE || *height > MAX_IMAGE_SIDE) {
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: '%s': unsupported dimensions %ux%u", path, *width, *height);
    }
    if ((size_t)*width * *height * 3 > IMAGES_MAX_DECODED_BYTES) {
        return stoker_errorf(err, err_len, STOKER_TOO_LARGE,
                             "images: '%s': %ux%u pixels need more than %zu MiB decoded", path,
                             *width, *height, IMAGES_MAX_DECODED_BYTES >> 20);
    }
    return STOKER_OK;
}

bool
image_file_scalable(const uint8_t *data, size_t len)
{
    return len >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff;
}

int
image_file_decode_scaled(const char *path, const uint8_t *data, size_t len, uint32_t scale,
                         uint32_t rows, size_t *decoded_bytes, size_t n_images, image_pixels *out,
                         char *err, size_t err_len)
{
    budget g = {decoded_bytes, n_images};
    image_pixels px = {0};
    if (scale != 2 && scale != 4 && scale != 8)
        scale = 1;
    int rv = decode_any(&g, path, data, len, scale, rows, &px, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    if (px.scale == 0) { // not a JPEG: full size
        px.scale = 1;
        px.full_width = px.width;
        px.full_height = px.height;
    }
    *out = px;
    return STOKER_OK;
}

int
image_file_decode(const char *path, const uint8_t *data, size_t len, size_t *decoded_bytes,
                  size_t n_images, image_pixels *out, char *err, size_t err_len)
{
    return image_file_decode_scaled(path, data, len, 1, 0, decoded_bytes, n_images, out, err,
                                    err_len);
}
