// RandAugment's operations and policy (see randaug.h). The arithmetic is float, without PIL's
// rounding to 8 bits after each step, except where an operation is defined on 8-bit levels
// (posterize, equalize: the value is rounded first). tests/producer/test_augment.py holds each
// operation to Pillow/torchvision within a stated tolerance.
#include "randaug.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "stoker/error.h"

enum {
    IDENTITY,
    SHEAR_X,
    SHEAR_Y,
    TRANSLATE_X,
    TRANSLATE_Y,
    ROTATE,
    BRIGHTNESS,
    COLOR,
    CONTRAST,
    SHARPNESS,
    POSTERIZE,
    SOLARIZE,
    AUTOCONTRAST,
    EQUALIZE
};

const char *const randaug_names[RANDAUG_OPS] = {
    "Identity", "ShearX",   "ShearY",    "TranslateX", "TranslateY", "Rotate",       "Brightness",
    "Color",    "Contrast", "Sharpness", "Posterize",  "Solarize",   "AutoContrast", "Equalize"};

static const float LUMA[3] = {0.299f, 0.587f, 0.114f};

int
randaug_find(const char *name)
{
    for (int k = 0; k < RANDAUG_OPS; k++)
        if (strcasecmp(name, randaug_names[k]) == 0)
            return k;
    return -1;
}

// torch.linspace(lo, hi, bins)[bin]
static double
linspace(double lo, double hi, uint32_t bin, uint32_t bins)
{
    return bins < 2 ? lo : lo + (hi - lo) * bin / (bins - 1);
}

double
randaug_magnitude(int op, uint32_t bin, uint32_t bins, uint32_t width, uint32_t height,
                  bool *is_signed)
{
    *is_signed = op >= SHEAR_X && op <= SHARPNESS;
    switch (op) {
    case SHEAR_X:
    case SHEAR_Y:
        return linspace(0, 0.3, bin, bins);
    case TRANSLATE_X:
        return linspace(0, 150.0 / 331.0 * width, bin, bins);
    case TRANSLATE_Y:
        return linspace(0, 150.0 / 331.0 * height, bin, bins);
    case ROTATE:
        return linspace(0, 30, bin, bins);
    case BRIGHTNESS:
    case COLOR:
    case CONTRAST:
    case SHARPNESS:
        return linspace(0, 0.9, bin, bins);
    case POSTERIZE: // 8 - (arange(bins) / ((bins - 1) / 4)).round()
        return 8 - (bins < 2 ? 0 : nearbyint(bin / ((bins - 1) / 4.0)));
    case SOLARIZE:
        return linspace(255, 0, bin, bins);
    default:
        return 0;
    }
}

static float
clamp255(float v)
{
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

// PIL's Image.transform(AFFINE, m, NEAREST), fill 0: output pixel (x, y) takes the source pixel
// at floor(m applied to (x + 0.5, y + 0.5)) when that lies inside.
static int
affine_nearest(float *px, uint32_t h, uint32_t w, const double m[6])
{
    size_t n = (size_t)h * w * 3;
    float *src = malloc(n * sizeof(*src));
    if (src == NULL)
        return STOKER_NOMEM;
    memcpy(src, px, n * sizeof(*src));
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            double xi = m[0] * (x + 0.5) + m[1] * (y + 0.5) + m[2];
            double yi = m[3] * (x + 0.5) + m[4] * (y + 0.5) + m[5];
            float *o = px + ((size_t)y * w + x) * 3;
            if (xi < 0 || yi < 0 || xi >= w || yi >= h) {
                o[0] = o[1] = o[2] = 0;
                continue;
            }
            memcpy(o, src + ((size_t)yi * w + (size_t)xi) * 3, 3 * sizeof(float));
        }
    free(src);
    return STOKER_OK;
}

static double
round15(double v) // PIL's rotate rounds its matrix to 15 decimals
{
    return nearbyint(v * 1e15) / 1e15;
}

// ImageEnhance: out = degenerate + f * (in - degenerate), clamped.
static void
blend(float *px, const float *degenerate, size_t n, float f)
{
    for (size_t i = 0; i < n; i++)
        px[i] = clamp255(degenerate[i] + f * (px[i] - degenerate[i]));
}

static float
gray(const float *p)
{
    return LUMA[0] * p[0] + LUMA[1] * p[1] + LUMA[2] * p[2];
}

// ImageEnhance.Sharpness: the degenerate image is ImageFilter.SMOOTH ((1 1 1; 1 5 1; 1 1 1) / 13)
// inside a one-pixel border that stays as it is.
static int
sharpness(float *px, uint32_t h, uint32_t w, float f)
{
    size_t n = (size_t)h * w * 3;
    float *deg = malloc(n * sizeof(*deg));
    if (deg == NULL)
        return STOKER_NOMEM;
    memcpy(deg, px, n * sizeof(*deg));
    for (uint32_t y = 1; y + 1 < h; y++)
        for (uint32_t x = 1; x + 1 < w; x++)
            for (int c = 0; c < 3; c++) {
                float s = 0;
                for (int dy = -1; dy <= 1; dy++)
                    for (int dx = -1; dx <= 1; dx++)
                        s += px[((size_t)(y + dy) * w + (x + dx)) * 3 + c] *
                             (dx == 0 && dy == 0 ? 5.0f : 1.0f);
                deg[((size_t)y * w + x) * 3 + c] = s / 13.0f;
            }
    blend(px, deg, n, f);
    free(deg);
    return STOKER_OK;
}

static int
level(float v) // an 8-bit level
{
    v = clamp255(v);
    return (int)(v + 0.5f);
}

// ImageOps.autocontrast (cutoff 0), per channel: its range stretched to 0..255.
static void
autocontrast(float *px, size_t pixels)
{
    for (int c = 0; c < 3; c++) {
        float lo = 255, hi = 0;
        for (size_t i = 0; i < pixels; i++) {
            float v = clamp255(px[3 * i + c]);
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        if (hi <= lo)
            continue;
        float scale = 255.0f / (hi - lo);
        for (size_t i = 0; i < pixels; i++)
            px[3 * i + c] = clamp255((px[3 * i + c] - lo) * scale);
    }
}

// ImageOps.equalize, per channel, on 8-bit levels (PIL's lookup table).
static void
equalize(float *px, size_t pixels)
{
    for (int c = 0; c < 3; c++) {
        uint64_t hist[256] = {0};
        for (size_t i = 0; i < pixels; i++)
            hist[level(px[3 * i + c])]++;
        uint64_t last = 0, nonzero = 0, total = 0;
        for (int i = 0; i < 256; i++)
            if (hist[i] > 0)
                last = hist[i], nonzero++, total += hist[i];
        uint64_t step = nonzero > 1 ? (total - last) / 255 : 0;
        float lut[256];
        uint64_t acc = step / 2;
        for (int i = 0; i < 256; i++) {
            lut[i] = step > 0 ? (float)(acc / step > 255 ? 255 : acc / step) : (float)i;
            acc += hist[i];
        }
        for (size_t i = 0; i < pixels; i++)
            px[3 * i + c] = lut[level(px[3 * i + c])];
    }
}

int
randaug_apply_op(int op, double magnitude, float *px, uint32_t h, uint32_t w)
{
    const size_t pixels = (size_t)h * w, n = pixels * 3;
    const float f = (float)(1.0 + magnitude);
    switch (op) {
    case SHEAR_X:
    case SHEAR_Y: {
        // torchvision: affine(shear = degrees(atan(m)), center (0, 0)); the inverse matrix.
        double t = tan(atan(magnitude));
        double m[6] = {1, op == SHEAR_X ? t : 0, 0, op == SHEAR_Y ? t : 0, 1, 0};
        return affine_nearest(px, h, w, m);
    }
    case TRANSLATE_X:
    case TRANSLATE_Y: {
        double t = trunc(magnitude); // translate=[int(m), 0]
        double m[6] = {1, 0, op == TRANSLATE_X ? -t : 0, 0, 1, op == TRANSLATE_Y ? -t : 0};
        return affine_nearest(px, h, w, m);
    }
    case ROTATE: { // PIL's Image.rotate(m, NEAREST) about the center
        double a = -magnitude * M_PI / 180.0, cx = w / 2.0, cy = h / 2.0;
        double m[6] = {round15(cos(a)), round15(sin(a)), 0, round15(-sin(a)), round15(cos(a)), 0};
        m[2] = m[0] * -cx + m[1] * -cy + cx;
        m[5] = m[3] * -cx + m[4] * -cy + cy;
        return affine_nearest(px, h, w, m);
    }
    case BRIGHTNESS:
        for (size_t i = 0; i < n; i++)
            px[i] = clamp255(px[i] * f);
        return STOKER_OK;
    case COLOR:
        for (size_t i = 0; i < pixels; i++) {
            float *p = px + 3 * i, g = gray(p);
            for (int c = 0; c < 3; c++)
                p[c] = clamp255(g + f * (p[c] - g));
        }
        return STOKER_OK;
    case CONTRAST: {
        double total = 0;
        for (size_t i = 0; i < pixels; i++)
            total += gray(px + 3 * i);
        float mean = (float)(total / pixels);
        for (size_t i = 0; i < n; i++)
            px[i] = clamp255(mean + f * (px[i] - mean));
        return STOKER_OK;
    }
    case SHARPNESS:
        return sharpness(px, h, w, f);
    case POSTERIZE: {
        int bits = (int)magnitude, mask = bits >= 8 ? 0xff : bits <= 0 ? 0 : 0xff << (8 - bits);
        for (size_t i = 0; i < n; i++)
            px[i] = (float)(level(px[i]) & mask);
        return STOKER_OK;
    }
    case SOLARIZE:
        for (size_t i = 0; i < n; i++)
            px[i] = px[i] < magnitude ? px[i] : 255.0f - px[i];
        return STOKER_OK;
    case AUTOCONTRAST:
        autocontrast(px, pixels);
        return STOKER_OK;
    case EQUALIZE:
        equalize(px, pixels);
        return STOKER_OK;
    default: // IDENTITY
        return STOKER_OK;
    }
}

int
randaug_apply(uint32_t n, uint32_t bin, uint32_t bins, float *px, uint32_t h, uint32_t w,
              stoker_rng *rng)
{
    for (uint32_t i = 0; i < n; i++) {
        int op = (int)(stoker_rng_u64(rng) % RANDAUG_OPS);
        bool is_signed;
        double m = randaug_magnitude(op, bin, bins, w, h, &is_signed);
        if (is_signed && (stoker_rng_u64(rng) & 1))
            m = -m;
        int rv = randaug_apply_op(op, m, px, h, w);
        if (rv != STOKER_OK)
            return rv;
    }
    return STOKER_OK;
}
