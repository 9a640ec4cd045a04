// TIFF through libtiff (see image_tiff.h): a memory-backed client for decoding, libtiff's own
// fd reader for header probes, and its error and warning handlers redirected into a per-thread
// message (libtiff's handlers are process-wide; they are set once).
#include "image_tiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if STOKER_HAS_TIFF
#include <pthread.h>
#include <stdarg.h>
#include <tiffio.h>
#endif

bool
tiff_is(const uint8_t *data, size_t len)
{
    return len >= 4 &&
           ((data[0] == 'I' && data[1] == 'I' && (data[2] == 42 || data[2] == 43) &&
             data[3] == 0) ||
            (data[0] == 'M' && data[1] == 'M' && data[2] == 0 && (data[3] == 42 || data[3] == 43)));
}

#if STOKER_HAS_TIFF

static _Thread_local char last_error[256];
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;

static void
on_error(const char *module, const char *fmt, va_list ap)
{
    (void)module;
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
}

static void
on_warning(const char *module, const char *fmt, va_list ap)
{
    (void)module, (void)fmt, (void)ap; // tolerated, as PIL does
}

static void
set_handlers(void)
{
    TIFFSetErrorHandler(on_error);
    TIFFSetWarningHandler(on_warning);
}

typedef struct source {
    const uint8_t *data;
    uint64_t len, at;
    TIFF *tif;
    uint32_t width, height;
} source;

static tmsize_t
src_read(thandle_t h, void *buf, tmsize_t n)
{
    source *s = h;
    if (n < 0)
        return -1;
    uint64_t left = s->len - s->at, k = (uint64_t)n < left ? (uint64_t)n : left;
    memcpy(buf, s->data + s->at, k);
    s->at += k;
    return (tmsize_t)k;
}

static tmsize_t
src_write(thandle_t h, void *buf, tmsize_t n)
{
    (void)h, (void)buf, (void)n;
    return -1;
}

static toff_t
src_seek(thandle_t h, toff_t off, int whence)
{
    source *s = h;
    uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->at : s->len;
    if (off > UINT64_MAX - base || base + off > s->len)
        return (toff_t)-1;
    s->at = base + off;
    return s->at;
}

static int
src_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t
src_size(thandle_t h)
{
    return ((source *)h)->len;
}

static int
src_map(thandle_t h, void **base, toff_t *size)
{
    (void)h, (void)base, (void)size;
    return 0; // no mapping: reads only
}

static void
src_unmap(thandle_t h, void *base, toff_t size)
{
    (void)h, (void)base, (void)size;
}

static void
why_from_libtiff(char *why, size_t why_len, const char *what)
{
    snprintf(why, why_len, "%s%s%s", what, last_error[0] ? ": " : "", last_error);
}

void *
tiff_open(const uint8_t *data, size_t len, uint32_t *width, uint32_t *height, char *why,
          size_t why_len)
{
    pthread_once(&handlers_once, set_handlers);
    last_error[0] = '\0';
    source *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    s->data = data;
    s->len = len;
    // "m": no memory mapping (the client reads from data).
    s->tif = TIFFClientOpen("tiff", "rm", s, src_read, src_write, src_seek, src_close, src_size,
                            src_map, src_unmap);
    uint32_t w = 0, h = 0;
    if (s->tif == NULL || !TIFFGetField(s->tif, TIFFTAG_IMAGEWIDTH, &w) ||
        !TIFFGetField(s->tif, TIFFTAG_IMAGELENGTH, &h)) {
        why_from_libtiff(why, why_len, "unreadable TIFF header");
        tiff_close(s);
        return NULL;
    }
    char emsg[1024] = "";
    if (!TIFFRGBAImageOK(s->tif, emsg)) {
        snprintf(why, why_len, "unsupported TIFF: %s", emsg);
        tiff_close(s);
        return NULL;
    }
    s->width = *width = w;
    s->height = *height = h;
    return s;
}

bool
tiff_read(void *handle, uint8_t *rgb, char *why, size_t why_len)
{
    source *s = handle;
    last_error[0] = '\0';
    size_t n = (size_t)s->width * s->height;
    uint32_t *raster = malloc(n * sizeof(*raster));
    if (raster == NULL) {
        snprintf(why, why_len, "out of memory");
        return false;
    }
    // stop on error (last argument 1): a corrupt strip is an error, not a gray band.
    if (!TIFFReadRGBAImageOriented(s->tif, s->width, s->height, raster, ORIENTATION_TOPLEFT, 1)) {
        why_from_libtiff(why, why_len, "corrupt TIFF data");
        free(raster);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        rgb[3 * i] = (uint8_t)TIFFGetR(raster[i]);
        rgb[3 * i + 1] = (uint8_t)TIFFGetG(raster[i]);
        rgb[3 * i + 2] = (uint8_t)TIFFGetB(raster[i]);
    }
    free(raster);
    return true;
}

void
tiff_close(void *handle)
{
    source *s = handle;
    if (s == NULL)
        return;
    if (s->tif != NULL)
        TIFFClose(s->tif);
    free(s);
}

bool
tiff_probe(int fd, uint32_t *width, uint32_t *height, char *why, size_t why_len)
{
    pthread_once(&handlers_once, set_handlers);
    last_error[0] = '\0';
    int own = dup(fd); // TIFFClose closes the descriptor it was given
    if (own < 0) {
        snprintf(why, why_len, "cannot duplicate the file descriptor");
        return false;
    }
    lseek(own, 0, SEEK_SET);
    TIFF *tif = TIFFFdOpen(own, "tiff", "rm");
    if (tif == NULL) {
        close(own);
        why_from_libtiff(why, why_len, "unreadable TIFF header");
        return false;
    }
    uint32_t w = 0, h = 0;
    bool ok =
        TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w) && TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
    char emsg[1024] = "";
    if (!ok)
        why_from_libtiff(why, why_len, "unreadable TIFF header");
    else if (!(ok = TIFFRGBAImageOK(tif, emsg)))
        snprintf(why, why_len, "unsupported TIFF: %s", emsg);
    TIFFClose(tif);
    if (ok) {
        *width = w;
        *height = h;
    }
    return ok;
}

#else // built without libtiff

void *
tiff_open(const uint8_t *data, size_t len, uint32_t *width, uint32_t *height, char *why,
          size_t why_len)
{
    (void)data, (void)len, (void)width, (void)height;
    snprintf(why, why_len, "TIFF support was not built (install libtiff-dev)");
    return NULL;
}

bool
tiff_read(void *handle, uint8_t *rgb, char *why, size_t why_len)
{
    (void)handle, (void)rgb;
    snprintf(why, why_len, "TIFF support was not built (install libtiff-dev)");
    return false;
}

void
tiff_close(void *handle)
{
    (void)handle;
}

bool
tiff_probe(int fd, uint32_t *width, uint32_t *height, char *why, size_t why_len)
{
    (void)fd, (void)width, (void)height;
    snprintf(why, why_len, "TIFF support was not built (install libtiff-dev)");
    return false;
}

#endif
