// Reading and decoding one image file (PNG, JPEG, WebP, BMP, TIFF) to 8-bit RGB, or only its
// header. The
// images generator (images.c) calls it for each file; it keeps no state.
#ifndef PRODUCER_IMAGE_FILE_H
#define PRODUCER_IMAGE_FILE_H

#include <stddef.h>
#include <stdint.h>

#define PIXEL_PAD 1 // bytes after each image: a pixel is read as 4 bytes (RGB + 1)

typedef struct image_pixels {
    uint8_t *rgb; // (height, width, 3), then PIXEL_PAD zero bytes; malloc'd, the caller frees
    uint32_t width, height;
} image_pixels;

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

// Reads only the header of the file at path (signature, then the PNG IHDR, the JPEG frame
// header, the WebP header, BMP's headers or TIFF's first directory) and writes its dimensions.
// STOKER_OK; STOKER_IO (unreadable); STOKER_INVALID (not an image, corrupt header, unsupported
// dimensions); STOKER_TOO_LARGE (one image over IMAGES_MAX_DECODED_BYTES). err names path.
int image_file_probe(const char *path, uint32_t *width, uint32_t *height, char *err,
                     size_t err_len);

#endif
