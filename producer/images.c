// The `images` generator: decodes a class-per-subfolder tree of PNG (libpng's simplified API) and
// JPEG (libjpeg-turbo) files into memory once, then makes each example from those pixels with a
// random resized crop, flip and color jitter. Decoding everything up front keeps fill free of
// I/O and allocation; the price is memory, bounded by IMAGES_MAX_DECODED_BYTES, and start-up
// time. With decode_each only the files' headers are read at start (signature and dimensions)
// and each example reads and decodes its file, as a data loader reading a dataset does (the same
// bytes come out either way); a file that fails then is reported, skipped and counted, and
// another image is drawn in its place. Shrinking is plain bilinear
// without antialiasing (torchvision's antialias=False), which is cheaper than PIL's filter and fine
// for augmentation.
#include "images.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"
#include "stoker/schema.h"

#define MAX_IMAGE_SIDE 65535u // per side; protects the size arithmetic from hostile headers
#define PIXEL_PAD      1      // bytes after each image: a pixel is read as 4 bytes (RGB + 1)

#define MAX_REDRAWS 16 // random draws for a bad file's replacement; then the next good file

typedef struct image {
    uint8_t *rgb; // (height, width, 3), then PIXEL_PAD zero bytes; NULL when decoded per example
    char *path;   // the file, read for each example when decoded per example (else NULL)
    uint32_t width, height;
    int32_t label;
    bool bad; // decoded per example, it failed once: skipped from then on
} image;

typedef struct images_gen {
    uint32_t size;
    bool decode_each;
    uint32_t n_classes;
    size_t n_images, cap_images;
    image *images;
    size_t decoded_bytes;
    size_t n_bad;        // decode_each: files that failed to decode and are skipped
    uint64_t n_replaced; // decode_each: examples made from another image than the one drawn
    // Per-example sampling tables, reused by every fill: for output column x, the byte offsets in
    // a source row of its two neighbours and the weight of the second; the same for rows.
    uint32_t *col0, *col1, *row0, *row1;
    float *wx, *wy;
    uint64_t listing; // hash of the class/file names in index order (a dataset's fingerprint)
} images_gen;

// ImageNet statistics (torchvision's Normalize for its pretrained models).
static const float MEAN[3] = {0.485f, 0.456f, 0.406f};
static const float STD[3] = {0.229f, 0.224f, 0.225f};
// ITU-R 601-2 luma, as torchvision's rgb_to_grayscale (used by adjust_contrast).
static const float LUMA[3] = {0.299f, 0.587f, 0.114f};

static void
images_destroy(void *user)
{
    images_gen *g = user;
    if (g == NULL)
        return;
    if (g->n_bad > 0)
        stoker_warn("images: %zu of %zu files could not be decoded and were skipped; %llu "
                    "examples were made from another image instead",
                    g->n_bad, g->n_images, (unsigned long long)g->n_replaced);
    for (size_t i = 0; i < g->n_images; i++) {
        free(g->images[i].rgb);
        free(g->images[i].path);
    }
    free(g->images);
    free(g->col0);
    free(g->col1);
    free(g->row0);
    free(g->row1);
    free(g->wx);
    free(g->wy);
    free(g);
}

// ---- listing folders ----

typedef struct name_list {
    char **names;
    size_t n, cap;
} name_list;

static void
names_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool
has_image_extension(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot != NULL && (strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
                           strcasecmp(dot, ".jpeg") == 0);
}

// Lists the non-hidden entries of dir that are folders (want_dirs) or regular image files,
// sorted by name. STOKER_OK, STOKER_INVALID (dir unreadable: err written), STOKER_NOMEM.
static int
list_dir(const char *dir, bool want_dirs, name_list *out, char *err, size_t err_len)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT)
            return stoker_errorf(err, err_len, STOKER_INVALID, "images: folder '%s' does not exist",
                                 dir);
        if (errno == ENOTDIR)
            return stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s' is not a folder", dir);
        return stoker_errorf(err, err_len, STOKER_INVALID, "images: cannot open folder '%s': %s",
                             dir, strerror(errno));
    }
    name_list l = {0};
    struct dirent *e;
    int rv = STOKER_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (!want_dirs && !has_image_extension(e->d_name))
            continue;
        char *path;
        struct stat st;
        if (asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
            rv = STOKER_NOMEM;
            break;
        }
        bool keep = stat(path, &st) == 0 && (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
        free(path);
        if (!keep)
            continue;
        if (l.n == l.cap) {
            size_t cap = l.cap ? l.cap * 2 : 16;
            char **names = realloc(l.names, cap * sizeof *names);
            if (names == NULL) {
                rv = STOKER_NOMEM;
                break;
            }
            l.names = names;
            l.cap = cap;
        }
        if ((l.names[l.n] = strdup(e->d_name)) == NULL) {
            rv = STOKER_NOMEM;
            break;
        }
        l.n++;
    }
    closedir(d);
    if (rv != STOKER_OK) {
        stoker_errorf(err, err_len, STOKER_INVALID, "images: out of memory listing '%s'", dir);
        names_free(&l);
        return rv;
    }
    if (l.n > 0)
        qsort(l.names, l.n, sizeof *l.names, cmp_names);
    *out = l;
    return STOKER_OK;
}

// ---- decoding ----

// Reserves bytes of the decoded-pixel budget for the image at path.
static int
reserve(images_gen *g, const char *path, uint32_t width, uint32_t height, size_t *bytes, char *err,
        size_t err_len)
{
    if (width == 0 || height == 0 || width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE) {
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: '%s': unsupported dimensions %ux%u", path, width, height);
    }
    size_t need = (size_t)width * height * 3;
    if (need > IMAGES_MAX_DECODED_BYTES - g->decoded_bytes) {
        return stoker_errorf(
            err, err_len, STOKER_TOO_LARGE,
            "images: the decoded images need more than %zu MiB (limit reached at '%s', after "
            "%zu images); use fewer or smaller images",
            IMAGES_MAX_DECODED_BYTES >> 20, path, g->n_images);
    }
    *bytes = need;
    return STOKER_OK;
}

static int
decode_png(images_gen *g, const char *path, const uint8_t *data, size_t len, image *im, char *err,
           size_t err_len)
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
    g->decoded_bytes += bytes;
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
decode_jpeg(images_gen *g, const char *path, const uint8_t *data, size_t len, image *im, char *err,
            size_t err_len)
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
    while (cinfo.output_scanline < cinfo.output_height) {
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
    jpeg_finish_decompress(&cinfo);
    memset(buf + bytes, 0, PIXEL_PAD);
    im->rgb = buf;
    im->width = cinfo.output_width;
    im->height = cinfo.output_height;
    jpeg_destroy_decompress(&cinfo);
    free(cmyk_row);
    g->decoded_bytes += bytes;
    return STOKER_OK;
}

static int
read_file(const char *path, uint8_t **data, size_t *len, char *err, size_t err_len)
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

// Decodes a PNG or JPEG file (by its signature) into im.
static int
decode_any(images_gen *g, const char *path, const uint8_t *data, size_t len, image *im, char *err,
           size_t err_len)
{
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 8 && memcmp(data, png_magic, 8) == 0)
        return decode_png(g, path, data, len, im, err, err_len);
    if (len >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        return decode_jpeg(g, path, data, len, im, err, err_len);
    return stoker_errorf(err, err_len, STOKER_INVALID,
                         "images: '%s' is not a PNG or JPEG file (%s)", path,
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
static int
probe_header(const char *path, uint32_t *width, uint32_t *height, char *err, size_t err_len)
{
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return stoker_errorf(err, err_len, STOKER_IO, "images: cannot read '%s': %s", path,
                             strerror(errno));
    }
    uint8_t h[24];
    ssize_t n;
    while ((n = pread(fd, h, sizeof h, 0)) < 0 && errno == EINTR) {
    }
    bool ok;
    const char *kind;
    if (n >= 8 && memcmp(h, png_magic, 8) == 0) {
        kind = "PNG";
        ok = n == (ssize_t)sizeof h && memcmp(h + 12, "IHDR", 4) == 0;
        if (ok) {
            *width = be32(h + 16);
            *height = be32(h + 20);
        }
    } else if (n >= 3 && h[0] == 0xff && h[1] == 0xd8 && h[2] == 0xff) {
        kind = "JPEG";
        ok = jpeg_dimensions(fd, width, height);
    } else {
        close(fd);
        stoker_errorf(err, err_len, STOKER_INVALID, "images: '%s' is not a PNG or JPEG file (%s)",
                      path, n == 0 ? "empty" : "unknown signature");
        return n < 0 ? STOKER_IO : STOKER_INVALID;
    }
    close(fd);
    if (!ok) {
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: '%s': corrupt %s: no readable %s", path, kind,
                             strcmp(kind, "PNG") == 0 ? "IHDR chunk" : "frame header");
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

static int
load_image(images_gen *g, const char *path, int32_t label, char *err, size_t err_len)
{
    if (g->n_images == g->cap_images) {
        size_t cap = g->cap_images ? g->cap_images * 2 : 64;
        image *images = realloc(g->images, cap * sizeof *images);
        if (images == NULL) {
            return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory");
        }
        g->images = images;
        g->cap_images = cap;
    }
    image im = {.label = label};
    int rv;
    if (g->decode_each) {
        // Only the header now; the pixels when an example needs them.
        if ((rv = probe_header(path, &im.width, &im.height, err, err_len)) != STOKER_OK)
            return rv;
        if ((im.path = strdup(path)) == NULL) {
            return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory");
        }
        g->images[g->n_images++] = im;
        return STOKER_OK;
    }
    uint8_t *data = NULL;
    size_t len = 0;
    if ((rv = read_file(path, &data, &len, err, err_len)) != STOKER_OK)
        return rv;
    rv = decode_any(g, path, data, len, &im, err, err_len);
    free(data);
    if (rv == STOKER_OK)
        g->images[g->n_images++] = im;
    return rv;
}

static int
load_tree(images_gen *g, const char *dir, char *err, size_t err_len)
{
    name_list classes = {0};
    int rv = list_dir(dir, true, &classes, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    if (classes.n == 0) {
        stoker_errorf(
            err, err_len, STOKER_INVALID,
            "images: '%s' has no class subfolders (expected one subfolder of PNG/JPEG images "
            "per class)",
            dir);
        names_free(&classes);
        return STOKER_INVALID;
    }
    if (classes.n > INT32_MAX) {
        names_free(&classes);
        return STOKER_INVALID;
    }
    for (size_t c = 0; c < classes.n && rv == STOKER_OK; c++) {
        char *class_dir;
        if (asprintf(&class_dir, "%s/%s", dir, classes.names[c]) < 0) {
            rv = STOKER_NOMEM;
            break;
        }
        name_list files = {0};
        rv = list_dir(class_dir, false, &files, err, err_len);
        if (rv == STOKER_OK && files.n == 0) {
            stoker_errorf(err, err_len, STOKER_INVALID,
                          "images: class folder '%s' has no .png, .jpg or .jpeg files", class_dir);
            rv = STOKER_INVALID;
        }
        for (size_t i = 0; i < files.n && rv == STOKER_OK; i++) {
            char *path;
            if (asprintf(&path, "%s/%s", class_dir, files.names[i]) < 0) {
                rv = STOKER_NOMEM;
                break;
            }
            rv = load_image(g, path, (int32_t)c, err, err_len);
            const char *rel = path + strlen(dir) + 1; // class/file: the same on every box
            g->listing = stoker_hash64(rel, strlen(rel) + 1, g->listing);
            free(path);
        }
        names_free(&files);
        free(class_dir);
    }
    if (rv == STOKER_NOMEM)
        stoker_errorf(err, err_len, STOKER_INVALID, "images: out of memory loading '%s'", dir);
    g->n_classes = (uint32_t)classes.n;
    names_free(&classes);
    return rv;
}

// ---- augmentation ----

typedef struct crop {
    uint32_t top, left, height, width;
} crop;

// torchvision.transforms.RandomResizedCrop.get_params, scale (0.08, 1), ratio (3/4, 4/3).
static crop
random_crop(stoker_rng *rng, uint32_t width, uint32_t height)
{
    const double area = (double)width * height;
    const double log_lo = log(3.0 / 4.0), log_hi = log(4.0 / 3.0);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * stoker_rng_range(rng, 0.08, 1.0);
        double aspect = exp(stoker_rng_range(rng, log_lo, log_hi));
        long w = lround(sqrt(target * aspect));
        long h = lround(sqrt(target / aspect));
        if (w > 0 && h > 0 && w <= (long)width && h <= (long)height) {
            crop c = {.height = (uint32_t)h, .width = (uint32_t)w};
            c.top = (uint32_t)(stoker_rng_u64(rng) % (height - c.height + 1));
            c.left = (uint32_t)(stoker_rng_u64(rng) % (width - c.width + 1));
            return c;
        }
    }
    // Fallback: the largest center crop within the ratio range.
    crop c = {.height = height, .width = width};
    double in_ratio = (double)width / height;
    if (in_ratio < 3.0 / 4.0) {
        long h = lround(width / (3.0 / 4.0));
        c.height = (uint32_t)(h < 1 ? 1 : h > (long)height ? (long)height : h);
    } else if (in_ratio > 4.0 / 3.0) {
        long w = lround(height * (4.0 / 3.0));
        c.width = (uint32_t)(w < 1 ? 1 : w > (long)width ? (long)width : w);
    }
    c.top = (height - c.height) / 2;
    c.left = (width - c.width) / 2;
    return c;
}

// Bilinear sampling positions (half-pixel centers, edges clamped) of n outputs over a source span
// of len pixels starting at first; offsets scaled by unit bytes. reversed fills them back to
// front (the horizontal flip).
static void
sample_table(uint32_t n, uint32_t first, uint32_t len, uint32_t unit, bool reversed, uint32_t *i0,
             uint32_t *i1, float *w)
{
    const double step = (double)len / n;
    for (uint32_t k = 0; k < n; k++) {
        double s = (k + 0.5) * step - 0.5;
        if (s < 0)
            s = 0;
        if (s > len - 1)
            s = len - 1;
        uint32_t a = (uint32_t)s;
        uint32_t b = a + 1 < len ? a + 1 : a;
        uint32_t at = reversed ? n - 1 - k : k;
        i0[at] = (first + a) * unit;
        i1[at] = (first + b) * unit;
        w[at] = (float)(s - a);
    }
}

// Four floats at a time through GCC/Clang vector extensions (SSE on x86-64, NEON on ARM): the
// per-pixel jitter passes are plain elementwise math, and -O2 does not vectorize them itself.
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

// min and max with SSE semantics (a < b ? a : b), identical on every path.
static inline v4f
vmin(v4f a, v4f b)
{
#if defined(__SSE2__)
    return (v4f)_mm_min_ps((__m128)a, (__m128)b);
#else
    v4i lt = a < b;
    return (v4f)((lt & (v4i)a) | (~lt & (v4i)b));
#endif
}

static inline v4f
vmax(v4f a, v4f b)
{
#if defined(__SSE2__)
    return (v4f)_mm_max_ps((__m128)a, (__m128)b);
#else
    v4i gt = a > b;
    return (v4f)((gt & (v4i)a) | (~gt & (v4i)b));
#endif
}

// Loads up to 4 floats (the rest 0) and stores them back: the tail of a plane goes through the
// same vector code as the body, so every element gets bit-identical arithmetic. The common case
// (n >= 4) is a constant-size copy, i.e. one unaligned vector load or store.
static inline v4f
load4(const float *p, size_t n)
{
    v4f v = {0, 0, 0, 0};
    if (n >= 4)
        memcpy(&v, p, sizeof v);
    else
        memcpy(&v, p, n * sizeof(float));
    return v;
}

static inline void
store4(float *p, v4f v, size_t n)
{
    if (n >= 4)
        memcpy(p, &v, sizeof v);
    else
        memcpy(p, &v, n * sizeof(float));
}

// The pixel at p as (r, g, b, next byte); images carry PIXEL_PAD bytes so the last one is safe.
static inline v4f
pixel(const uint8_t *p)
{
#if defined(__SSE2__)
    // GCC scalarizes the generic conversion below; widening with unpacks is 4 instructions.
    int32_t bits;
    memcpy(&bits, p, sizeof bits);
    const __m128i zero = _mm_setzero_si128();
    __m128i wide = _mm_unpacklo_epi8(_mm_cvtsi32_si128(bits), zero);
    return (v4f)_mm_cvtepi32_ps(_mm_unpacklo_epi16(wide, zero));
#else
    typedef uint8_t v4u8 __attribute__((vector_size(4)));
    v4u8 bytes;
    memcpy(&bytes, p, sizeof bytes);
    return __builtin_convertvector(bytes, v4f);
#endif
}

// Sum over a plane of min(v * brightness, 255).
static double
clamped_sum(const float *o, size_t n, float brightness)
{
    const v4f b = (v4f){0, 0, 0, 0} + brightness, top = (v4f){0, 0, 0, 0} + 255.0f;
    double total = 0;
    for (size_t i = 0; i < n;) {
        v4f acc = {0, 0, 0, 0};
        size_t end = n - i > 1024 ? i + 1024 : n; // float partial sums of 4 x 256 values
        for (; i < end; i += 4)
            acc += vmin(load4(o + i, end - i) * b, top);
        total += (double)acc[0] + acc[1] + acc[2] + acc[3];
    }
    return total;
}

// Brightness and contrast in the given order (each clamped to [0, 255]), then the
// normalization v * scale + bias, in place over a plane.
static void
jitter_plane(float *o, size_t n, bool brightness_first, float brightness, float contrast,
             float shift, float scale, float bias)
{
    const v4f zero = {0, 0, 0, 0}, top = zero + 255.0f;
    const v4f b = zero + brightness, c = zero + contrast, sh = zero + shift;
    const v4f sc = zero + scale, bi = zero + bias;
    for (size_t i = 0; i < n; i += 4) {
        v4f v = load4(o + i, n - i);
        if (brightness_first) {
            v = vmin(v * b, top);
            v = vmax(vmin(v * c + sh, top), zero);
        } else {
            v = vmax(vmin(v * c + sh, top), zero);
            v = vmin(v * b, top);
        }
        store4(o + i, v * sc + bi, n - i);
    }
}

// Reads and decodes im's file (decode_each) into *out. STOKER_OK; STOKER_NOMEM; another code
// with err written when the file cannot be read or decoded.
static int
decode_file(images_gen *g, const image *im, image *out, char *err, size_t err_len)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rv = read_file(im->path, &data, &len, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    rv = decode_any(g, im->path, data, len, out, err, err_len);
    free(data);
    if (rv == STOKER_OK)
        out->label = im->label;
    return rv;
}

// decode_each: decodes image drawn into *out, as a data loader reading its dataset does. A file
// that fails (corrupt data behind a good header, removed, unreadable) is reported with its path
// once, marked bad and counted, and another image is used: further draws from rng, then the next
// good image in order. Which image replaces which depends only on the seed and on which files are
// bad, so the examples stay determined by the seed. STOKER_OK; STOKER_NOMEM; STOKER_INVALID when
// every file failed.
static int
decode_drawn(images_gen *g, stoker_rng *rng, size_t drawn, image *out)
{
    size_t i = drawn;
    for (unsigned attempt = 1;; attempt++) {
        image *im = &g->images[i];
        if (!im->bad) {
            char err[512];
            int rv = decode_file(g, im, out, err, sizeof err);
            if (rv == STOKER_OK) {
                if (i != drawn)
                    g->n_replaced++;
                return STOKER_OK;
            }
            if (rv == STOKER_NOMEM) {
                stoker_error("%s", err);
                return rv;
            }
            im->bad = true;
            g->n_bad++;
            stoker_warn("%s; skipping this file from now on (%zu of %zu skipped)", err, g->n_bad,
                        g->n_images);
            if (g->n_bad == g->n_images) {
                stoker_error("images: none of the %zu files could be decoded", g->n_images);
                return STOKER_INVALID;
            }
        }
        i = attempt <= MAX_REDRAWS ? stoker_rng_u64(rng) % g->n_images : (i + 1) % g->n_images;
    }
}

// Makes an example of image drawn, the rest of its randomness from from_rng.
static int
make_example(images_gen *g, const stoker_rng *from_rng, size_t drawn, void *const fields[])
{
    stoker_rng rng = *from_rng;
    const image *im = &g->images[drawn];
    image decoded = {0};
    if (g->decode_each) {
        int rv = decode_drawn(g, &rng, drawn, &decoded);
        if (rv != STOKER_OK)
            return rv;
        im = &decoded;
    }
    crop box = random_crop(&rng, im->width, im->height);
    bool flip = stoker_rng_uniform(&rng) < 0.5;
    float brightness = (float)stoker_rng_range(&rng, 0.6, 1.4);
    float contrast = (float)stoker_rng_range(&rng, 0.6, 1.4);
    bool brightness_first = stoker_rng_uniform(&rng) < 0.5;

    const uint32_t n = g->size;
    const size_t plane = (size_t)n * n;
    sample_table(n, box.left, box.width, 3, flip, g->col0, g->col1, g->wx);
    sample_table(n, box.top, box.height, 1, false, g->row0, g->row1, g->wy);

    // Pass 1: bilinear resample into the output, values in [0, 255]; (3, n, n). A pixel is one
    // vector (r, g, b, unused), so the three channels are interpolated together.
    float *out = fields[0];
    float *out_r = out, *out_g = out + plane, *out_b = out + 2 * plane;
    const size_t stride = (size_t)im->width * 3;
    const v4f zero = {0, 0, 0, 0};
    v4f max_value = zero;
    double sum[3] = {0, 0, 0};
    for (uint32_t y = 0; y < n; y++) {
        const uint8_t *r0 = im->rgb + g->row0[y] * stride;
        const uint8_t *r1 = im->rgb + g->row1[y] * stride;
        const v4f fy = zero + g->wy[y];
        float *o_r = out_r + (size_t)y * n, *o_g = out_g + (size_t)y * n;
        float *o_b = out_b + (size_t)y * n;
        v4f row_sum = zero;
        for (uint32_t x = 0; x < n; x++) {
            const uint32_t c0 = g->col0[x], c1 = g->col1[x];
            const v4f fx = zero + g->wx[x];
            v4f a = pixel(r0 + c0), b = pixel(r0 + c1), p = pixel(r1 + c0), q = pixel(r1 + c1);
            v4f top = a + (b - a) * fx, bottom = p + (q - p) * fx;
            v4f v = top + (bottom - top) * fy;
            o_r[x] = v[0];
            o_g[x] = v[1];
            o_b[x] = v[2];
            row_sum += v;
            max_value = vmax(max_value, v);
        }
        for (int ch = 0; ch < 3; ch++)
            sum[ch] += row_sum[ch];
    }
    const float max_channel = fmaxf(fmaxf(max_value[0], max_value[1]), max_value[2]);

    // Contrast blends with the mean gray of the image as it is at that step (ColorJitter order).
    // Brightness first changes that mean by its factor, unless it clamps: then sum again.
    float mean_gray = (float)((LUMA[0] * sum[0] + LUMA[1] * sum[1] + LUMA[2] * sum[2]) / plane);
    if (brightness_first && max_channel * brightness <= 255.0f) {
        mean_gray *= brightness;
    } else if (brightness_first) {
        double total = 0;
        for (int ch = 0; ch < 3; ch++)
            total += LUMA[ch] * clamped_sum(out + ch * plane, plane, brightness);
        mean_gray = (float)(total / plane);
    }
    const float shift = (1.0f - contrast) * mean_gray;

    // Pass 2: jitter, then (v / 255 - mean) / std.
    for (int ch = 0; ch < 3; ch++)
        jitter_plane(out + ch * plane, plane, brightness_first, brightness, contrast, shift,
                     1.0f / (255.0f * STD[ch]), -MEAN[ch] / STD[ch]);
    *(int32_t *)fields[1] = im->label;
    if (g->decode_each) {
        free(decoded.rgb);
        g->decoded_bytes -= (size_t)decoded.width * decoded.height * 3;
    }
    return STOKER_OK;
}

static int
images_fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    images_gen *g = user;
    (void)seq;
    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    size_t drawn = stoker_rng_u64(&rng) % g->n_images;
    return make_example(g, &rng, drawn, fields);
}

// A dataset's item: image index of the sorted listing, augmented from seed.
static int
images_fill_item(void *user, uint64_t index, uint64_t seed, void *const fields[])
{
    images_gen *g = user;
    if (index >= g->n_images) {
        stoker_error("images: item %llu asked of a folder of %zu images", (unsigned long long)index,
                     g->n_images);
        return STOKER_INVALID;
    }
    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    return make_example(g, &rng, (size_t)index, fields);
}

int
images_generator_create(const char *dir, uint32_t size, bool decode_each, stoker_generator *out,
                        char *err, size_t err_len)
{
    if (dir == NULL || dir[0] == '\0') {
        return stoker_errorf(err, err_len, STOKER_INVALID, "images: no folder given");
    }
    if (size == 0 || size > IMAGES_MAX_SIZE) {
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: size %u is out of range (1..%u)", size, IMAGES_MAX_SIZE);
    }
    stoker_schema schema = {0};
    const uint32_t image_shape[3] = {3, size, size}, label_shape[1] = {1};
    if (stoker_schema_add(&schema, "image", STOKER_FLOAT32, 3, image_shape) != STOKER_OK ||
        stoker_schema_add(&schema, "label", STOKER_INT32, 1, label_shape) != STOKER_OK) {
        return stoker_errorf(err, err_len, STOKER_INTERNAL, "images: cannot build the schema");
    }

    images_gen *g = calloc(1, sizeof *g);
    if (g == NULL) {
        return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory");
    }
    g->size = size;
    g->decode_each = decode_each;
    g->col0 = malloc(size * sizeof *g->col0);
    g->col1 = malloc(size * sizeof *g->col1);
    g->row0 = malloc(size * sizeof *g->row0);
    g->row1 = malloc(size * sizeof *g->row1);
    g->wx = malloc(size * sizeof *g->wx);
    g->wy = malloc(size * sizeof *g->wy);
    if (!g->col0 || !g->col1 || !g->row0 || !g->row1 || !g->wx || !g->wy) {
        stoker_errorf(err, err_len, STOKER_INVALID, "images: out of memory");
        images_destroy(g);
        return STOKER_NOMEM;
    }
    int rv = load_tree(g, dir, err, err_len);
    if (rv != STOKER_OK) {
        images_destroy(g);
        return rv;
    }
    if (decode_each)
        stoker_info("images: %s: %u classes, %zu images (headers checked; each example reads "
                    "and decodes its file)",
                    dir, g->n_classes, g->n_images);
    else
        stoker_info("images: %s: %u classes, %zu images, %.1f MiB decoded", dir, g->n_classes,
                    g->n_images, g->decoded_bytes / 1048576.0);

    out->kind = "images";
    out->schema = schema;
    out->fill = images_fill;
    out->user = g;
    out->destroy = images_destroy;
    out->n_items = 0; // a stream unless images_generator_dataset
    out->fingerprint = 0;
    out->fill_item = NULL;
    return STOKER_OK;
}

size_t
images_generator_skipped(const stoker_generator *gen)
{
    const images_gen *g = gen->user;
    return g->n_bad;
}

void
images_generator_dataset(stoker_generator *gen)
{
    const images_gen *g = gen->user;
    gen->n_items = g->n_images;
    gen->fingerprint = g->listing ^ g->n_images;
    gen->fill_item = images_fill_item;
}
