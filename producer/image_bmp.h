// Windows BMP files, the uncompressed kinds photo folders hold: 24-bit BGR and 32-bit BGRA (the
// alpha dropped, as PIL's convert("RGB") does), rows stored bottom-up or top-down. Everything
// else (palettes, 16-bit, RLE or other compression, OS/2 headers) is reported unsupported. It
// reads only the bytes the headers say are there, checked against the length it is given, so a
// hostile or truncated file is an error, never an out-of-bounds read. It does not allocate:
// image_file.c owns the pixel budget and the buffer.
#ifndef PRODUCER_IMAGE_BMP_H
#define PRODUCER_IMAGE_BMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BMP_HEADER_BYTES 54 // file header (14) and BITMAPINFOHEADER (40): enough for bmp_parse

typedef struct bmp_info {
    uint32_t width, height;
    uint32_t bits;     // 24 or 32
    bool top_down;     // rows stored first to last (negative height in the file)
    uint64_t offset;   // of the first stored row
    uint64_t stride;   // bytes per stored row (4-byte aligned)
    uint32_t masks[3]; // 32-bit BI_BITFIELDS: red, green and blue masks (else 0)
} bmp_info;

// Whether data starts with BMP's signature "BM".
bool bmp_is(const uint8_t *data, size_t len);

// Parses the headers at data (len bytes read from the start of a file of file_len bytes; len
// may be less than file_len, for a header-only probe, but at least BMP_HEADER_BYTES, or more
// when the BITFIELDS masks follow a longer header) into *out, and checks that the rows fit in
// file_len. true, or false with why (a static string) set.
bool bmp_parse(const uint8_t *data, size_t len, uint64_t file_len, bmp_info *out, const char **why);

// Converts the rows of the whole file (data, file_len bytes, parsed into info) to (height, width,
// 3) RGB in rgb (the caller's, width * height * 3 bytes).
void bmp_rows(const uint8_t *data, const bmp_info *info, uint8_t *rgb);

#endif
