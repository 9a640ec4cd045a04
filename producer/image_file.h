// Reading and decoding one image file (PNG, JPEG, WebP, BMP, TIFF) to 8-bit RGB, JPEG also at
// 1/2, 1/4 or 1/8 of its size (libjpeg's DCT scaling), or only its header. The images generator
// (images.c) calls it for each file; it keeps no state.
#ifndef PRODUCER_IMAGE_FILE_H
#define PRODUCER_IMAGE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PIXEL_PAD 1 // bytes after each image: a pixel is read as 4 bytes (RGB + 1)

typedef struct image_pixels {
    uint8_t *rgb; // (height, width, 3), then PIXEL_PAD zero bytes; malloc'd, the caller frees
    uint32_t width, height;
    uint32_t scale;                   // rgb is the image reduced by this factor: 1, 2, 4 or 8
    uint32_t full_width, full_height; // the image's own size (width, height when scale is 1)
} image_pixels;

// The reductions a JPEG decodes at: 1, 2, 4, 8 (IMAGE_SCALES of them, 1 << level).
#define IMAGE_SCALES 4

// Reads the whole file at path into *data (malloc'd; the caller frees) and *len. STOKER_OK;
// STOKER_INVALID or STOKER_IO (err names path); STOKER_NOMEM.
int image_file_read(const char *path, uint8_t **data, size_t *len, char *err, size_t err_len);

// Decodes data (len bytes of the file at path, by its signature: PNG, JPEG, WebP, BMP or TIFF)
// into *out:
// grayscale expanded, alpha dropped, 16-bit reduced, CMYK converted. *decoded_bytes is the
// caller's running total of decoded pixel bytes: the image is refused (STOKER_TOO_LARGE) if it
// would take the total past IMAGES_MAX_DECODED_BYTES, else added to it; n_images (how many
// images the total holds) is only for that message. STOKER_OK; STOKER_INVALID (corrupt,
// unsupported; err names path); STOKER_TOO_LARGE; STOKER_NOMEM. *out written only on success.
int image_file_decode(const char *path, const uint8_t *data, size_t len, size_t *decoded_bytes,
                      size_t n_images, image_pixels *out, char *err, size_t err_len);

// Like image_file_decode, a JPEG decoded reduced by scale (1, 2, 4 or 8; anything else is
// taken as 1) with libjpeg's DCT scaling, as PIL's Image.draft does: ceil(width / scale) x
// ceil(height / scale) pixels, pixel (x, y) standing for the full image's square of side scale
// at (x * scale, y * scale). rows > 0 decodes only the first rows rows of that (a JPEG's data
// is in row order: the rest is neither decoded nor checked) and zeroes the others; they are the
// same pixels a whole decode gives. Other formats decode whole at full size (out->scale 1).
int image_file_decode_scaled(const char *path, const uint8_t *data, size_t len, uint32_t scale,
                             uint32_t rows, size_t *decoded_bytes, size_t n_images,
                             image_pixels *out, char *err, size_t err_len);

// Whether data (a file's contents) decodes at reduced scale: a JPEG.
bool image_file_scalable(const uint8_t *data, size_t len);

// Reads only the header of the file at path (signature, then the PNG IHDR, the JPEG frame
// header, the WebP header, BMP's headers or TIFF's first directory) and writes its dimensions.
// STOKER_OK; STOKER_IO (unreadable); STOKER_INVALID (not an image, corrupt header, unsupported
// dimensions); STOKER_TOO_LARGE (one image over IMAGES_MAX_DECODED_BYTES). err names path.
int image_file_probe(const char *path, uint32_t *width, uint32_t *height, char *err,
                     size_t err_len);

#endif
