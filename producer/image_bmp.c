// BMP headers and rows (see image_bmp.h). Every offset is computed in 64 bits from values
// already bounded (sides at most 65535, 4 bytes a pixel), and checked against the file length
// before a row is read.
#include "image_bmp.h"

#include <string.h>

#define MAX_SIDE 65535u // as image_file.c: protects the arithmetic from hostile headers

static uint32_t
le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

bool
bmp_is(const uint8_t *data, size_t len)
{
    return len >= 2 && data[0] == 'B' && data[1] == 'M';
}

bool
bmp_parse(const uint8_t *data, size_t len, uint64_t file_len, bmp_info *out, const char **why)
{
    if (len < BMP_HEADER_BYTES || !bmp_is(data, len)) {
        *why = "file too short for its headers";
        return false;
    }
    uint32_t offset = le32(data + 10), header = le32(data + 14);
    if (header == 12) {
        *why = "unsupported BMP: OS/2 header";
        return false;
    }
    if (header < 40 || header > 4096) {
        *why = "unknown BMP header size";
        return false;
    }
    int32_t w = (int32_t)le32(data + 18), h = (int32_t)le32(data + 22);
    uint32_t planes = le16(data + 26), bits = le16(data + 28), compression = le32(data + 30);
    if (planes != 1 || w <= 0 || h == 0 || h == INT32_MIN) {
        *why = "invalid BMP dimensions or planes";
        return false;
    }
    uint32_t height = h < 0 ? (uint32_t)-h : (uint32_t)h;
    if ((uint32_t)w > MAX_SIDE || height > MAX_SIDE) {
        *why = "BMP dimensions over 65535";
        return false;
    }
    if (bits != 24 && bits != 32) {
        *why = bits <= 8 ? "unsupported BMP: palette colors (only 24- and 32-bit)"
                         : "unsupported BMP: 16 bits per pixel (only 24- and 32-bit)";
        return false;
    }
    bmp_info info = {.width = (uint32_t)w, .height = height, .bits = bits, .top_down = h < 0};
    if (compression == 3 && bits == 32) { // BI_BITFIELDS: masks after a 40-byte header, or in it
        size_t at = 14 + 40;
        if (at + 12 > len) {
            *why = "BMP bit-field masks missing";
            return false;
        }
        for (int c = 0; c < 3; c++)
            info.masks[c] = le32(data + at + 4 * c);
        if (info.masks[0] != 0xff0000u || info.masks[1] != 0xff00u || info.masks[2] != 0xffu) {
            *why = "unsupported BMP: bit-field masks other than 8-bit BGR";
            return false;
        }
    } else if (compression != 0) {
        *why = "unsupported BMP: compressed (RLE, JPEG or PNG inside)";
        return false;
    }
    info.stride = ((uint64_t)info.width * bits + 31) / 32 * 4;
    info.offset = offset;
    if (offset < 14 + (uint64_t)header || offset > file_len ||
        info.stride * height > file_len - offset) {
        *why = "BMP pixel data lies outside the file (truncated?)";
        return false;
    }
    *out = info;
    return true;
}

void
bmp_rows(const uint8_t *data, const bmp_info *info, uint8_t *rgb)
{
    const uint32_t step = info->bits / 8;
    for (uint32_t y = 0; y < info->height; y++) {
        uint32_t stored = info->top_down ? y : info->height - 1 - y;
        const uint8_t *p = data + info->offset + (uint64_t)stored * info->stride;
        uint8_t *o = rgb + (size_t)y * info->width * 3;
        for (uint32_t x = 0; x < info->width; x++, p += step, o += 3) {
            o[0] = p[2];
            o[1] = p[1];
            o[2] = p[0];
        }
    }
}
