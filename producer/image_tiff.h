// TIFF files through libtiff (Debian's libtiff-dev), when built with it: any layout libtiff's
// RGBA interface reads (strips or tiles, 8 or 16 bits, gray, palette, RGB, CMYK, YCbCr, the usual
// compressions), decoded to 8-bit RGB with the alpha dropped; the first image of the file.
// libtiff's messages are kept for the error instead of going to stderr. It does not allocate
// the caller's pixels: image_file.c owns the budget and the buffer.
#ifndef PRODUCER_IMAGE_TIFF_H
#define PRODUCER_IMAGE_TIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Whether data starts with a TIFF signature (II*\0 or MM\0*; BigTIFF's too).
bool tiff_is(const uint8_t *data, size_t len);

// Opens the TIFF in data (len bytes) and reads its dimensions. Returns an opaque handle for
// tiff_read (the caller must tiff_close it), or NULL with why written (why_len bytes), also when
// built without libtiff. data is borrowed until tiff_close.
void *tiff_open(const uint8_t *data, size_t len, uint32_t *width, uint32_t *height, char *why,
                size_t why_len);
// Decodes the image into rgb ((height, width, 3), the caller's). true, or false with why.
bool tiff_read(void *handle, uint8_t *rgb, char *why, size_t why_len);
void tiff_close(void *handle);

// The dimensions of the TIFF file open at fd (read from its first directory only; fd stays
// open and the caller's). true, or false with why.
bool tiff_probe(int fd, uint32_t *width, uint32_t *height, char *why, size_t why_len);

#endif
