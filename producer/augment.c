// The augmentation pipeline: a spec parser into a list of operations, and each operation over a
// float (height, width, 3) working image in [0, 255]. Arithmetic follows what torchvision does on
// PIL images (PIL's resampling filter and affine bilinear sampling, ImageEnhance's blends), in
// float without PIL's rounding to 8 bits after each step; tests/producer/test_augment.py holds each
// operation to Pillow or to numpy within a stated tolerance. The per-pixel work (resampling,
// rotation, the color adjustments) runs four floats at a time through vector extensions; the
// built-in default pipeline in images.c is the faster path still (no antialiasing, fewer ops).
#include "augment.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "randaug.h"
#include "vec4.h"
#include "stoker/error.h"

#define MAX_OPS  32
#define MAX_ARGS 8

typedef enum op_kind {
    OP_RRC,
    OP_RESIZE,
    OP_CCROP,
    OP_HFLIP,
    OP_JITTER,
    OP_ROTATE,
    OP_BLUR,
    OP_ERASE,
    OP_RANDAUG,
    OP_NORMALIZE
} op_kind;

// One operation with its parameters; ranges are [lo, hi] drawn uniformly per example.
typedef struct op {
    op_kind kind;
    double a[2], b[2];  // rrc, erase: scale, ratio; rotate: a = degrees; blur: b = sigma
    double p;           // hflip, erase: probability
    uint32_t h, w;      // resize, ccrop: 0 = not given (ccrop: the output size; resize: see s)
    uint32_t s;         // resize: shorter side (when w == 0); blur: kernel size
    bool has[4];        // jitter: brightness, contrast, saturation, hue given
    double range[4][2]; // jitter: factor ranges (hue: shift in turns)
    float mean[3], std[3];
    uint32_t ra_n, ra_m, ra_bins; // randaug: operations per example, magnitude bin, bins
} op;

struct augment {
    op ops[MAX_OPS];
    size_t n;
};

// ITU-R 601-2 luma (PIL's convert("L"), torchvision's rgb_to_grayscale).
static const float LUMA[3] = {0.299f, 0.587f, 0.114f};

// ---- parsing ----

typedef struct arg {
    char name[8]; // "" for positional
    double lo, hi;
    bool range; // given as LO:HI
    int group;  // index of the ';'-separated group
} arg;

static int
parse_number(const char *s, const char *end, double *out)
{
    char buf[64];
    size_t n = (size_t)(end - s);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *stop;
    errno = 0;
    double v = strtod(buf, &stop);
    if (stop == buf || *stop != '\0' || errno != 0 || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

// Parses "X", "LO:HI", "name=X" or "name=LO:HI" in [s, end).
static int
parse_arg(const char *s, const char *end, int group, arg *out)
{
    while (s < end && *s == ' ')
        s++;
    while (end > s && end[-1] == ' ')
        end--;
    *out = (arg){.group = group};
    const char *eq = memchr(s, '=', (size_t)(end - s));
    if (eq != NULL) {
        size_t n = (size_t)(eq - s);
        if (n == 0 || n >= sizeof out->name)
            return -1;
        memcpy(out->name, s, n);
        s = eq + 1;
    }
    const char *colon = memchr(s, ':', (size_t)(end - s));
    if (colon != NULL) {
        out->range = true;
        return parse_number(s, colon, &out->lo) || parse_number(colon + 1, end, &out->hi) ? -1 : 0;
    }
    if (parse_number(s, end, &out->lo) != 0)
        return -1;
    out->hi = out->lo;
    return 0;
}

// Counts args in group g.
static int
in_group(const arg *args, int n, int g)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += args[i].group == g;
    return k;
}

static bool
positive_int(double v, uint32_t max)
{
    return v >= 1 && v <= max && v == floor(v);
}

#define BAD(...) stoker_errorf(err, err_len, STOKER_INVALID, "augment: " __VA_ARGS__)

// Fills o from its name and arguments.
static int
build_op(const char *name, const arg *args, int n, op *o, char *err, size_t err_len)
{
    int groups = n > 0 ? args[n - 1].group + 1 : 0;
    for (int i = 0; i < n; i++)
        if (args[i].name[0] != '\0' && strcmp(name, "jitter") != 0 && strcmp(name, "randaug") != 0)
            return BAD("%s: named argument '%s=' not understood (only jitter and randaug take "
                       "names)",
                       name, args[i].name);
    for (int i = 0; i < n; i++)
        if (args[i].range && strcmp(name, "jitter") != 0 && strcmp(name, "rotate") != 0)
            return BAD("%s: LO:HI ranges are for jitter and rotate", name);
    if (strcmp(name, "rrc") == 0) {
        *o = (op){.kind = OP_RRC, .a = {0.08, 1.0}, .b = {3.0 / 4.0, 4.0 / 3.0}};
        if (n > 0 && (groups != 2 || in_group(args, n, 0) != 2 || in_group(args, n, 1) != 2))
            return BAD("rrc takes (SMIN,SMAX;RMIN,RMAX), e.g. rrc(0.08,1;0.75,1.33)");
        if (n > 0) {
            o->a[0] = args[0].lo, o->a[1] = args[1].lo, o->b[0] = args[2].lo, o->b[1] = args[3].lo;
        }
        if (!(o->a[0] > 0 && o->a[0] <= o->a[1] && o->a[1] <= 1))
            return BAD("rrc: scale %g..%g must satisfy 0 < SMIN <= SMAX <= 1", o->a[0], o->a[1]);
        if (!(o->b[0] > 0 && o->b[0] <= o->b[1]))
            return BAD("rrc: ratio %g..%g must satisfy 0 < RMIN <= RMAX", o->b[0], o->b[1]);
    } else if (strcmp(name, "resize") == 0 || strcmp(name, "ccrop") == 0) {
        bool resize = name[0] == 'r';
        *o = (op){.kind = resize ? OP_RESIZE : OP_CCROP};
        if (groups > 1 || n > 2 || (resize && n == 0))
            return BAD("%s takes (S) or (H,W)%s", name, resize ? "" : " or nothing");
        for (int i = 0; i < n; i++)
            if (!positive_int(args[i].lo, 4096))
                return BAD("%s: size %g must be a whole number in 1..4096", name, args[i].lo);
        if (n == 1 && resize)
            o->s = (uint32_t)args[0].lo;
        else if (n == 1)
            o->h = o->w = (uint32_t)args[0].lo;
        else if (n == 2)
            o->h = (uint32_t)args[0].lo, o->w = (uint32_t)args[1].lo;
    } else if (strcmp(name, "hflip") == 0) {
        *o = (op){.kind = OP_HFLIP, .p = 0.5};
        if (n > 1)
            return BAD("hflip takes (P), the probability");
        if (n == 1)
            o->p = args[0].lo;
        if (!(o->p >= 0 && o->p <= 1))
            return BAD("hflip: probability %g is outside [0, 1]", o->p);
    } else if (strcmp(name, "erase") == 0) {
        *o = (op){.kind = OP_ERASE, .p = 0.5, .a = {0.02, 0.33}, .b = {0.3, 3.3}};
        bool full = groups == 3 && in_group(args, n, 0) == 1 && in_group(args, n, 1) == 2 &&
                    in_group(args, n, 2) == 2;
        if (n > 0 && !(n == 1 || full))
            return BAD("erase takes (P) or (P;SMIN,SMAX;RMIN,RMAX)");
        if (n > 0)
            o->p = args[0].lo;
        if (full)
            o->a[0] = args[1].lo, o->a[1] = args[2].lo, o->b[0] = args[3].lo, o->b[1] = args[4].lo;
        if (!(o->p >= 0 && o->p <= 1))
            return BAD("erase: probability %g is outside [0, 1]", o->p);
        if (!(o->a[0] > 0 && o->a[0] <= o->a[1] && o->a[1] <= 1))
            return BAD("erase: scale %g..%g must satisfy 0 < SMIN <= SMAX <= 1", o->a[0], o->a[1]);
        if (!(o->b[0] > 0 && o->b[0] <= o->b[1]))
            return BAD("erase: ratio %g..%g must satisfy 0 < RMIN <= RMAX", o->b[0], o->b[1]);
    } else if (strcmp(name, "jitter") == 0) {
        static const char *const keys[4] = {"b", "c", "s", "h"};
        *o = (op){.kind = OP_JITTER};
        if (n == 0)
            return BAD("jitter needs at least one of b=, c=, s=, h=");
        for (int i = 0; i < n; i++) {
            int k = 0;
            while (k < 4 && strcmp(args[i].name, keys[k]) != 0)
                k++;
            if (k == 4)
                return BAD("jitter: argument '%s' is not b=, c=, s= or h=", args[i].name);
            double lo = args[i].lo, hi = args[i].hi;
            if (!args[i].range) {
                if (lo < 0)
                    return BAD("jitter: %s=%g must not be negative", keys[k], lo);
                hi = k == 3 ? lo : 1 + lo;
                lo = k == 3 ? -lo : (1 - lo > 0 ? 1 - lo : 0);
            }
            if (lo > hi || (k < 3 && lo < 0) || (k == 3 && (lo < -0.5 || hi > 0.5)))
                return BAD("jitter: %s range %g..%g is invalid (%s)", keys[k], lo, hi,
                           k == 3 ? "hue within [-0.5, 0.5]" : "factors >= 0, LO <= HI");
            o->has[k] = true;
            o->range[k][0] = lo;
            o->range[k][1] = hi;
        }
    } else if (strcmp(name, "rotate") == 0) {
        *o = (op){.kind = OP_ROTATE};
        if (n != 1)
            return BAD("rotate takes (DEGREES) or (LO:HI)");
        o->a[0] = args[0].range ? args[0].lo : -fabs(args[0].lo);
        o->a[1] = args[0].range ? args[0].hi : fabs(args[0].lo);
        if (o->a[0] > o->a[1] || o->a[1] - o->a[0] > 720)
            return BAD("rotate: range %g..%g is invalid", o->a[0], o->a[1]);
    } else if (strcmp(name, "blur") == 0) {
        *o = (op){.kind = OP_BLUR, .b = {0.1, 2.0}};
        if (n < 1 || in_group(args, n, 0) != 1 || groups > 2 || (groups == 2 && n != 3))
            return BAD("blur takes (K) or (K;SMIN,SMAX)");
        if (!positive_int(args[0].lo, 255) || ((uint32_t)args[0].lo & 1) == 0)
            return BAD("blur: kernel size %g must be odd, in 1..255", args[0].lo);
        o->s = (uint32_t)args[0].lo;
        if (n == 3)
            o->b[0] = args[1].lo, o->b[1] = args[2].lo;
        if (!(o->b[0] > 0 && o->b[0] <= o->b[1]))
            return BAD("blur: sigma %g..%g must satisfy 0 < SMIN <= SMAX", o->b[0], o->b[1]);
    } else if (strcmp(name, "randaug") == 0) {
        // RandAugment(num_ops=N, magnitude=M, num_magnitude_bins=B): randaug, randaug(N,M),
        // randaug(n=N,m=M,bins=B).
        *o = (op){.kind = OP_RANDAUG, .ra_n = 2, .ra_m = 9, .ra_bins = RANDAUG_BINS};
        if (n > 3 || groups > 1)
            return BAD("randaug takes (N,M) or (n=N,m=M,bins=B), e.g. randaug(n=2,m=9)");
        for (int i = 0; i < n; i++) {
            const char *key = args[i].name[0] ? args[i].name : i == 0 ? "n" : i == 1 ? "m" : "";
            uint32_t *field = strcmp(key, "n") == 0      ? &o->ra_n
                              : strcmp(key, "m") == 0    ? &o->ra_m
                              : strcmp(key, "bins") == 0 ? &o->ra_bins
                                                         : NULL;
            if (field == NULL)
                return BAD("randaug: argument '%s' is not n=, m= or bins=", args[i].name);
            if (args[i].lo < 0 || args[i].lo > 1000 || args[i].lo != floor(args[i].lo))
                return BAD("randaug: %s=%g must be a whole number in 0..1000", key, args[i].lo);
            *field = (uint32_t)args[i].lo;
        }
        if (o->ra_n > 16 || o->ra_bins < 2 || o->ra_m >= o->ra_bins)
            return BAD("randaug: n=%u (at most 16), m=%u (below bins), bins=%u (at least 2)",
                       o->ra_n, o->ra_m, o->ra_bins);
    } else if (strcmp(name, "normalize") == 0) {
        *o = (op){.kind = OP_NORMALIZE,
                  .mean = {0.485f, 0.456f, 0.406f},
                  .std = {0.229f, 0.224f, 0.225f}};
        if (n > 0 && (groups != 2 || in_group(args, n, 0) != 3 || in_group(args, n, 1) != 3))
            return BAD("normalize takes nothing (ImageNet's) or (M,M,M;S,S,S)");
        for (int i = 0; i < n; i++) {
            if (i < 3)
                o->mean[i] = (float)args[i].lo;
            else if (args[i].lo <= 0)
                return BAD("normalize: std %g must be positive", args[i].lo);
            else
                o->std[i - 3] = (float)args[i].lo;
        }
    } else {
        return BAD("unknown operation '%s' (rrc, resize, ccrop, hflip, jitter, rotate, blur, "
                   "erase, randaug, normalize)",
                   name);
    }
    return STOKER_OK;
}

int
augment_parse(const char *spec, augment **out, char *err, size_t err_len)
{
    if (spec == NULL)
        return BAD("no spec");
    augment *a = calloc(1, sizeof *a);
    if (a == NULL)
        return stoker_errorf(err, err_len, STOKER_NOMEM, "augment: out of memory");
    const char *p = spec;
    int rv = STOKER_OK;
    while (rv == STOKER_OK) {
        while (*p == ' ')
            p++;
        const char *start = p;
        while ((*p >= 'a' && *p <= 'z') || *p == '_')
            p++;
        char name[16];
        size_t len = (size_t)(p - start);
        if (len == 0 || len >= sizeof name) {
            rv = BAD("expected an operation name at '%s' in '%s'", start, spec);
            break;
        }
        memcpy(name, start, len);
        name[len] = '\0';
        while (*p == ' ')
            p++;
        arg args[MAX_ARGS];
        int n = 0;
        if (*p == '(') {
            const char *close = strchr(p, ')');
            if (close == NULL) {
                rv = BAD("%s: missing ')'", name);
                break;
            }
            int group = 0;
            const char *s = p + 1;
            while (rv == STOKER_OK && s < close) {
                const char *e = s;
                while (e < close && *e != ',' && *e != ';')
                    e++;
                if (n == MAX_ARGS)
                    rv = BAD("%s: too many arguments", name);
                else if (parse_arg(s, e, group, &args[n]) != 0)
                    rv = BAD("%s: bad argument '%.*s'", name, (int)(e - s), s);
                n++;
                if (e < close && *e == ';')
                    group++;
                s = e < close ? e + 1 : e;
            }
            p = close + 1;
        }
        if (rv != STOKER_OK)
            break;
        if (a->n == MAX_OPS) {
            rv = BAD("more than %d operations", MAX_OPS);
            break;
        }
        if ((rv = build_op(name, args, n, &a->ops[a->n], err, err_len)) != STOKER_OK)
            break;
        a->n++;
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',') {
            rv = BAD("expected ',' between operations at '%s'", p);
            break;
        }
        p++;
    }
    for (size_t i = 0; rv == STOKER_OK && i + 1 < a->n; i++)
        if (a->ops[i].kind == OP_NORMALIZE)
            rv = BAD("normalize must be the last operation");
    if (rv != STOKER_OK) {
        free(a);
        return rv;
    }
    *out = a;
    return STOKER_OK;
}

void
augment_destroy(augment *a)
{
    free(a);
}

bool
augment_normalization(const augment *a, float mean[3], float std[3])
{
    if (a->n == 0 || a->ops[a->n - 1].kind != OP_NORMALIZE)
        return false;
    memcpy(mean, a->ops[a->n - 1].mean, sizeof a->ops[0].mean);
    memcpy(std, a->ops[a->n - 1].std, sizeof a->ops[0].std);
    return true;
}

// ---- four floats at a time ----

static inline v4f
clamp255_4(v4f v)
{
    return v4_max(v4_min(v, v4_splat(255)), v4_splat(0));
}

// Four floats at p (unaligned).
static inline v4f
load4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

// ---- the working image ----

typedef struct work {
    float *px;         // (h, w, 3), then one float of padding; NULL while the image is still the
                       // source's bytes
    const uint8_t *u8; // the source (h, w, 3), until an operation needs floats
    uint32_t h, w;
} work;

// The padding float lets any pixel of a working image be read as four floats (its three and the
// next one's red, unused), the last one included.
static int
work_alloc(work *im, uint32_t h, uint32_t w)
{
    const size_t n = (size_t)h * w * 3;
    im->px = malloc((n + 1) * sizeof(float));
    im->u8 = NULL;
    im->h = h;
    im->w = w;
    if (im->px == NULL)
        return STOKER_NOMEM;
    im->px[n] = 0;
    return STOKER_OK;
}

// The source's bytes as floats, for operations that work in place or sample freely. The
// resampling operations read the bytes directly: a crop of a large photo never converts it all.
static int
work_floats(work *im)
{
    if (im->px != NULL)
        return STOKER_OK;
    const uint8_t *u8 = im->u8;
    if (work_alloc(im, im->h, im->w) != STOKER_OK)
        return STOKER_NOMEM;
    for (size_t i = 0; i < (size_t)im->h * im->w * 3; i++)
        im->px[i] = u8[i];
    return STOKER_OK;
}

// Replaces *dst by next (dst's pixels freed).
static void
work_swap(work *dst, work *next)
{
    free(dst->px);
    *dst = *next;
    next->px = NULL;
}

// ---- resampling (PIL's ImagingResample with the bilinear filter) ----

typedef struct taps {
    uint32_t *first, *count; // per output: first source index and number of taps
    float *w;                // per output: ksize weights
    uint32_t ksize;
    uint32_t base, span; // the source pixels the span touches: [base, base + span)
} taps;

static float
triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? (float)(1.0 - x) : 0.0f;
}

// Taps of n outputs over the source span [first, first + len) of a line of src_len pixels
// (PIL's precompute_coeffs with the span as the whole input: the crop is taken first, as
// torchvision's crop-then-resize does). The span may have fractional ends (a box mapped onto an
// image decoded reduced): it then takes in the pixels it touches, PIL's resize(box=) of that
// crop. Integer ends give exactly the integer computation.
static int
taps_make(taps *t, double first, double len, uint32_t src_len, uint32_t n)
{
    double base = floor(first), end = ceil(first + len);
    if (end > src_len)
        end = src_len;
    const double offset = first - base; // 0 for integer ends
    const long span = (long)(end - base);
    double scale = len / n, filterscale = scale < 1 ? 1 : scale;
    double support = filterscale;
    t->ksize = (uint32_t)ceil(support) * 2 + 1;
    t->base = (uint32_t)base;
    t->span = (uint32_t)span;
    t->first = malloc(n * sizeof *t->first);
    t->count = malloc(n * sizeof *t->count);
    t->w = calloc((size_t)n * t->ksize, sizeof *t->w);
    if (!t->first || !t->count || !t->w)
        return STOKER_NOMEM;
    for (uint32_t i = 0; i < n; i++) {
        double center = offset + (i + 0.5) * scale;
        long lo = (long)(center - support + 0.5), hi = (long)(center + support + 0.5);
        if (lo < 0)
            lo = 0;
        if (hi > span)
            hi = span;
        float *w = t->w + (size_t)i * t->ksize;
        double total = 0;
        uint32_t k = 0;
        for (long x = lo; x < hi && k < t->ksize; x++, k++) {
            w[k] = triangle((x - center + 0.5) / filterscale);
            total += w[k];
        }
        for (uint32_t j = 0; j < k && total > 0; j++)
            w[j] = (float)(w[j] / total);
        t->first[i] = t->base + (uint32_t)lo;
        t->count[i] = k;
    }
    return STOKER_OK;
}

// Gives every output as many taps as the one with the most, zero weights added after its own
// (or before, moving its window left, at the end of the span): the sums do not change, and the
// loop over taps, now as long for every output, is predicted.
static void
taps_even(taps *t, uint32_t n)
{
    uint32_t most = 0;
    for (uint32_t i = 0; i < n; i++)
        most = t->count[i] > most ? t->count[i] : most;
    for (uint32_t i = 0; i < n; i++) {
        float *w = t->w + (size_t)i * t->ksize;
        const uint32_t end = t->base + t->span;
        const uint32_t shift = t->first[i] + most > end ? t->first[i] + most - end : 0;
        memmove(w + shift, w, t->count[i] * sizeof *w);
        memset(w, 0, shift * sizeof *w);
        t->first[i] -= shift;
        t->count[i] = most;
    }
}

static void
taps_fini(taps *t)
{
    free(t->first);
    free(t->count);
    free(t->w);
}

// Four values of src's row data from element at, as floats: bytes or floats; n < 4 reads only n
// (the rest 0), so a row's tail never reads past it.
static inline v4f
source4(const work *src, size_t at, size_t n)
{
    if (n >= 4)
        return src->px != NULL ? load4(src->px + at) : v4_from_u8(src->u8 + at);
    float f[4] = {0};
    for (size_t i = 0; i < n; i++)
        f[i] = src->px != NULL ? src->px[at + i] : src->u8[at + i];
    return load4(f);
}

// The weighted sum of the count source rows from element at (stride apart), four values (m < 4:
// the rest 0).
static inline v4f
rows4(const work *src, size_t at, size_t stride, const float *w, uint32_t count, size_t m)
{
    v4f acc = v4_splat(0);
    for (uint32_t k = 0; k < count; k++, at += stride)
        acc += v4_splat(w[k]) * source4(src, at, m);
    return acc;
}

// The vertical pass: row y of mid (oh rows of the tx.span columns the box touches) is the
// weighted sum of the source rows ty gives it, four contiguous values at a time.
static void
resample_rows(const work *src, const taps *ty, const taps *tx, work *mid)
{
    const size_t n = (size_t)tx->span * 3, stride = (size_t)src->w * 3;
    for (uint32_t y = 0; y < mid->h; y++) {
        const float *w = ty->w + (size_t)y * ty->ksize;
        const uint32_t count = ty->count[y];
        const size_t first = (size_t)ty->first[y] * stride + (size_t)tx->base * 3;
        float *o = mid->px + (size_t)y * n;
        size_t i = 0;
        for (; i + 8 <= n; i += 8) { // two independent sums per loop over the rows
            v4f a0 = v4_splat(0), a1 = v4_splat(0);
            for (uint32_t k = 0; k < count; k++) {
                const size_t at = first + i + k * stride;
                a0 += v4_splat(w[k]) * source4(src, at, 4);
                a1 += v4_splat(w[k]) * source4(src, at + 4, 4);
            }
            memcpy(o + i, &a0, sizeof a0);
            memcpy(o + i + 4, &a1, sizeof a1);
        }
        for (; i + 4 <= n; i += 4) {
            const v4f v = rows4(src, first + i, stride, w, count, 4);
            memcpy(o + i, &v, sizeof v);
        }
        if (i < n) {
            const v4f v = rows4(src, first + i, stride, w, count, n - i);
            memcpy(o + i, &v, (n - i) * sizeof(float));
        }
    }
}

// One output pixel of the horizontal pass: count taps from p, (r, g, b, unused).
static inline v4f
cols4(const float *p, const float *w, uint32_t count)
{
    v4f acc = v4_splat(0);
    for (uint32_t k = 0; k < count; k++)
        acc += v4_splat(w[k]) * load4(p + 3 * k);
    return acc;
}

// The horizontal pass: output pixel x of each row is the weighted sum of the mid pixels tx
// gives it, a pixel (and the next one's red, unused; mid is padded) per vector, two pixels at a
// time (taps_even gave them as many taps: one loop, two independent sums).
static void
resample_cols(const work *mid, const taps *tx, work *dst)
{
    const uint32_t ow = dst->w, count = ow > 0 ? tx->count[0] : 0;
    for (uint32_t y = 0; y < dst->h; y++) {
        const float *row = mid->px + (size_t)y * mid->w * 3 - (size_t)tx->base * 3;
        float *o = dst->px + (size_t)y * ow * 3;
        uint32_t x = 0;
        for (; x + 2 <= ow; x += 2) {
            const float *p0 = row + (size_t)tx->first[x] * 3, *w0 = tx->w + (size_t)x * tx->ksize;
            const float *p1 = row + (size_t)tx->first[x + 1] * 3, *w1 = w0 + tx->ksize;
            v4f a0 = v4_splat(0), a1 = v4_splat(0);
            for (uint32_t k = 0; k < count; k++) {
                a0 += v4_splat(w0[k]) * load4(p0 + 3 * k);
                a1 += v4_splat(w1[k]) * load4(p1 + 3 * k);
            }
            // Each store writes the next pixel's red too: the next store, or the padding.
            memcpy(o + 3 * x, &a0, sizeof a0);
            memcpy(o + 3 * x + 3, &a1, sizeof a1);
        }
        if (x < ow) {
            const float *p = row + (size_t)tx->first[x] * 3, *w = tx->w + (size_t)x * tx->ksize;
            const v4f v = cols4(p, w, count);
            memcpy(o + 3 * x, &v, sizeof v);
        }
    }
}

// Resamples the box (top, left, bh, bw) of src (in src's pixels; fractional where a box of the
// full image is mapped onto a reduced one) to oh x ow into *dst (allocated). PIL filters
// horizontally first; vertically first gives the same sums up to float rounding, and reads the
// source (bytes, not padded) only in whole contiguous rows.
static int
resample(const work *src, double top, double left, double bh, double bw, uint32_t oh, uint32_t ow,
         work *dst)
{
    taps tx = {0}, ty = {0};
    work mid = {0};
    int rv = STOKER_NOMEM;
    if (taps_make(&tx, left, bw, src->w, ow) != STOKER_OK ||
        taps_make(&ty, top, bh, src->h, oh) != STOKER_OK ||
        work_alloc(&mid, oh, tx.span) != STOKER_OK || work_alloc(dst, oh, ow) != STOKER_OK)
        goto out;
    taps_even(&tx, ow);
    resample_rows(src, &ty, &tx, &mid);
    resample_cols(&mid, &tx, dst);
    rv = STOKER_OK;
out:
    free(mid.px);
    taps_fini(&tx);
    taps_fini(&ty);
    if (rv != STOKER_OK) {
        free(dst->px);
        dst->px = NULL;
    }
    return rv;
}

// ---- geometric operations ----

// torchvision.transforms.RandomResizedCrop.get_params with the op's scale and ratio.
static void
rrc_box(const op *o, stoker_rng *rng, uint32_t width, uint32_t height, uint32_t box[4])
{
    const double area = (double)width * height;
    const double log_lo = log(o->b[0]), log_hi = log(o->b[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * stoker_rng_range(rng, o->a[0], o->a[1]);
        double aspect = exp(stoker_rng_range(rng, log_lo, log_hi));
        long w = lround(sqrt(target * aspect));
        long h = lround(sqrt(target / aspect));
        if (w > 0 && h > 0 && w <= (long)width && h <= (long)height) {
            box[2] = (uint32_t)h, box[3] = (uint32_t)w;
            box[0] = (uint32_t)(stoker_rng_u64(rng) % (height - box[2] + 1));
            box[1] = (uint32_t)(stoker_rng_u64(rng) % (width - box[3] + 1));
            return;
        }
    }
    // Fallback: the largest center crop within the ratio range.
    uint32_t h = height, w = width;
    double in_ratio = (double)width / height;
    if (in_ratio < o->b[0]) {
        long v = lround(width / o->b[0]);
        h = (uint32_t)(v < 1 ? 1 : v > (long)height ? (long)height : v);
    } else if (in_ratio > o->b[1]) {
        long v = lround(height * o->b[1]);
        w = (uint32_t)(v < 1 ? 1 : v > (long)width ? (long)width : v);
    }
    box[0] = (height - h) / 2, box[1] = (width - w) / 2, box[2] = h, box[3] = w;
}

// torchvision's center_crop: zero padding where the crop is larger, offsets rounded half to even
// (Python's round).
static int
center_crop(const work *src, uint32_t ch, uint32_t cw, work *dst)
{
    if (work_alloc(dst, ch, cw) != STOKER_OK)
        return STOKER_NOMEM;
    long top = (long)rint(((double)src->h - ch) / 2.0);
    long left = (long)rint(((double)src->w - cw) / 2.0);
    if (ch > src->h)
        top = -(long)((ch - src->h) / 2);
    if (cw > src->w)
        left = -(long)((cw - src->w) / 2);
    for (uint32_t y = 0; y < ch; y++)
        for (uint32_t x = 0; x < cw; x++) {
            long sy = top + y, sx = left + x;
            float *o = dst->px + ((size_t)y * cw + x) * 3;
            if (sy < 0 || sx < 0 || sy >= (long)src->h || sx >= (long)src->w) {
                o[0] = o[1] = o[2] = 0;
                continue;
            }
            memcpy(o, src->px + ((size_t)sy * src->w + sx) * 3, 3 * sizeof(float));
        }
    return STOKER_OK;
}

static void
hflip(work *im)
{
    for (uint32_t y = 0; y < im->h; y++) {
        float *row = im->px + (size_t)y * im->w * 3;
        for (uint32_t a = 0, b = im->w - 1; a < b; a++, b--) { // whole pixels: 12-byte moves
            float t[3];
            memcpy(t, row + 3 * a, sizeof t);
            memcpy(row + 3 * a, row + 3 * b, sizeof t);
            memcpy(row + 3 * b, t, sizeof t);
        }
    }
}

// Whether the source position (xi, yi) of an output pixel's center falls inside src: rotate
// samples it there, or fills it with 0.
static inline bool
inside(const work *src, double xi, double yi)
{
    return xi >= 0 && yi >= 0 && xi < src->w && yi < src->h;
}

// A source coordinate + 0.5 (the sample position + 1) in 32.32 fixed point: inside the source
// it is positive, so its integer part is the sample's floor + 1, and stepping it along a row is
// one exact integer addition (the fraction keeps more bits than the float weight it becomes).
static inline int64_t
fixed(double v)
{
    return llround(v * 4294967296.0);
}

// Bilinear samples of src (edges clamped) for the output pixels x in [lo, hi) of a row whose
// pixel x has its center at (xs + a x, ys + d x) in src, all inside it, into o (the row).
static void
rotate_span(const work *src, double xs, double ys, double a, double d, long lo, long hi, float *o)
{
    const long w = src->w, h = src->h;
    const float *px = src->px;
    int64_t fx = fixed(xs + a * lo + 0.5), fy = fixed(ys + d * lo + 0.5);
    const int64_t step_x = fixed(a), step_y = fixed(d);
    for (long x = lo; x < hi; x++, fx += step_x, fy += step_y) {
        const long ix = (long)(fx >> 32) - 1, iy = (long)(fy >> 32) - 1; // -1 at the least
        const v4f dx = v4_splat((float)(uint32_t)fx * 0x1p-32f);
        const v4f dy = v4_splat((float)(uint32_t)fy * 0x1p-32f);
        const long x0 = ix < 0 ? 0 : ix, x1 = ix + 1 < w ? ix + 1 : w - 1;
        const long y0 = iy < 0 ? 0 : iy, y1 = iy + 1 < h ? iy + 1 : h - 1;
        const float *row0 = px + (size_t)y0 * w * 3, *row1 = px + (size_t)y1 * w * 3;
        const v4f p00 = load4(row0 + 3 * x0), p01 = load4(row0 + 3 * x1);
        const v4f p10 = load4(row1 + 3 * x0), p11 = load4(row1 + 3 * x1);
        const v4f top = p00 + (p01 - p00) * dx, bottom = p10 + (p11 - p10) * dx;
        const v4f v = top + (bottom - top) * dy;
        memcpy(o + 3 * x, &v, sizeof v); // and the next red: written after, or the padding
    }
}

// PIL's Image.rotate(degrees, BILINEAR) about the center, fill 0: each output pixel center is
// mapped back and sampled bilinearly (edges clamped) if it falls inside the source. Along a row
// the source position moves linearly, so the pixels inside form one span: found from both ends,
// then sampled without per-pixel bounds tests.
static int
rotate(const work *src, double degrees, work *dst)
{
    if (work_alloc(dst, src->h, src->w) != STOKER_OK)
        return STOKER_NOMEM;
    double t = -degrees * M_PI / 180.0;
    double a = cos(t), b = sin(t), d = -sin(t), e = cos(t);
    double cx = src->w / 2.0, cy = src->h / 2.0;
    double c = a * -cx + b * -cy + cx, f = d * -cx + e * -cy + cy;
    const long w = src->w;
    for (uint32_t y = 0; y < src->h; y++) {
        const double xs = a * 0.5 + b * (y + 0.5) + c, ys = d * 0.5 + e * (y + 0.5) + f;
        float *o = dst->px + (size_t)y * w * 3;
        long lo = 0, hi = w;
        while (lo < hi && !inside(src, xs + a * lo, ys + d * lo))
            lo++;
        while (hi > lo && !inside(src, xs + a * (hi - 1), ys + d * (hi - 1)))
            hi--;
        memset(o, 0, (size_t)lo * 3 * sizeof(float));
        rotate_span(src, xs, ys, a, d, lo, hi, o);
        memset(o + 3 * hi, 0, (size_t)(w - hi) * 3 * sizeof(float));
    }
    return STOKER_OK;
}

static long
reflect(long i, long n)
{
    if (n == 1)
        return 0;
    while (i < 0 || i >= n)
        i = i < 0 ? -i : 2 * (n - 1) - i;
    return i;
}

// torchvision's gaussian_blur: a separable kernel of size k, reflect padding.
static int
blur(work *im, uint32_t k, double sigma)
{
    float kernel[255];
    double half = (k - 1) * 0.5, total = 0;
    for (uint32_t i = 0; i < k; i++) {
        double x = -half + i;
        kernel[i] = (float)exp(-0.5 * (x / sigma) * (x / sigma));
        total += kernel[i];
    }
    for (uint32_t i = 0; i < k; i++)
        kernel[i] = (float)(kernel[i] / total);
    work tmp;
    const long r = (long)k / 2, w = im->w, h = im->h;
    // Reflected source index of every padded position, columns then rows.
    long *at = malloc((size_t)(w + h + 4 * r) * sizeof *at);
    if (at == NULL || work_alloc(&tmp, im->h, im->w) != STOKER_OK) {
        free(at);
        return STOKER_NOMEM;
    }
    long *cols = at, *rows = at + w + 2 * r;
    for (long i = -r; i < w + r; i++)
        cols[i + r] = reflect(i, w) * 3;
    for (long i = -r; i < h + r; i++)
        rows[i + r] = reflect(i, h) * w * 3;
    for (long y = 0; y < h; y++) { // horizontal into tmp
        const float *row = im->px + (size_t)y * w * 3;
        float *o = tmp.px + (size_t)y * w * 3;
        for (long x = 0; x < w; x++) {
            float acc0 = 0, acc1 = 0, acc2 = 0;
            for (long j = 0; j <= 2 * r; j++) {
                const float *p = row + cols[x + j];
                acc0 += kernel[j] * p[0], acc1 += kernel[j] * p[1], acc2 += kernel[j] * p[2];
            }
            o[3 * x] = acc0, o[3 * x + 1] = acc1, o[3 * x + 2] = acc2;
        }
    }
    for (long y = 0; y < h; y++) { // vertical back, a row at a time
        float *o = im->px + (size_t)y * w * 3;
        memset(o, 0, (size_t)w * 3 * sizeof(float));
        for (long j = 0; j <= 2 * r; j++) {
            const float *src = tmp.px + rows[y + j];
            for (long i = 0; i < 3 * w; i++)
                o[i] += kernel[j] * src[i];
        }
    }
    free(at);
    free(tmp.px);
    return STOKER_OK;
}

// torchvision's RandomErasing(p, scale, ratio, value=0) as it is used, after Normalize: the box
// is filled with the color that normalizes to 0 (the mean), or 0 when nothing normalizes.
static void
erase(const augment *a, const op *o, work *im, stoker_rng *rng)
{
    if (stoker_rng_uniform(rng) >= o->p)
        return;
    float fill[3] = {0, 0, 0}, mean[3], std[3];
    if (augment_normalization(a, mean, std))
        for (int c = 0; c < 3; c++)
            fill[c] = mean[c] * 255.0f;
    const double area = (double)im->h * im->w;
    const double log_lo = log(o->b[0]), log_hi = log(o->b[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * stoker_rng_range(rng, o->a[0], o->a[1]);
        double aspect = exp(stoker_rng_range(rng, log_lo, log_hi));
        long h = lround(sqrt(target * aspect)), w = lround(sqrt(target / aspect));
        if (!(h < (long)im->h && w < (long)im->w) || h < 1 || w < 1)
            continue;
        uint32_t top = (uint32_t)(stoker_rng_u64(rng) % (im->h - (uint32_t)h + 1));
        uint32_t left = (uint32_t)(stoker_rng_u64(rng) % (im->w - (uint32_t)w + 1));
        for (uint32_t y = top; y < top + (uint32_t)h; y++)
            for (uint32_t x = left; x < left + (uint32_t)w; x++)
                memcpy(im->px + ((size_t)y * im->w + x) * 3, fill, sizeof fill);
        return;
    }
}

// ---- color ----

// ColorJitter's adjustments, in the order of op.has and op.range.
enum { BRIGHTNESS, CONTRAST, SATURATION, HUE };

// One adjustment with its drawn factor (hue: the shift in turns); contrast also needs the mean
// gray of the image it applies to.
typedef struct color_op {
    int kind;
    float f, mean;
} color_op;

// Four pixels as planes: the adjustments mix a pixel's channels, so each works on all three at
// once, four pixels per vector.
typedef struct quad {
    v4f r, g, b;
} quad;

// Four pixels at p (12 floats) as planes.
static inline quad
quad_load(const float *p)
{
#if defined(__SSE2__)
    const __m128 a = _mm_loadu_ps(p), b = _mm_loadu_ps(p + 4), c = _mm_loadu_ps(p + 8);
    const __m128 r23 = _mm_shuffle_ps(b, c, _MM_SHUFFLE(1, 0, 3, 2));
    const __m128 g01 = _mm_shuffle_ps(a, b, _MM_SHUFFLE(0, 0, 1, 1));
    const __m128 g23 = _mm_shuffle_ps(b, c, _MM_SHUFFLE(2, 2, 3, 3));
    const __m128 b01 = _mm_shuffle_ps(a, b, _MM_SHUFFLE(1, 1, 2, 2));
    const __m128 b23 = _mm_shuffle_ps(c, c, _MM_SHUFFLE(3, 3, 0, 0));
    return (quad){(v4f)_mm_shuffle_ps(a, r23, _MM_SHUFFLE(3, 0, 3, 0)),
                  (v4f)_mm_shuffle_ps(g01, g23, _MM_SHUFFLE(2, 0, 2, 0)),
                  (v4f)_mm_shuffle_ps(b01, b23, _MM_SHUFFLE(2, 0, 2, 0))};
#else
    return (quad){(v4f){p[0], p[3], p[6], p[9]}, (v4f){p[1], p[4], p[7], p[10]},
                  (v4f){p[2], p[5], p[8], p[11]}};
#endif
}

static inline void
quad_store(float *p, const quad *q)
{
#if defined(__SSE2__)
    const __m128 r = (__m128)q->r, g = (__m128)q->g, b = (__m128)q->b;
    const __m128 rg01 = _mm_unpacklo_ps(r, g), b0r1 = _mm_shuffle_ps(b, r, _MM_SHUFFLE(1, 1, 0, 0));
    const __m128 g1b1 = _mm_shuffle_ps(g, b, _MM_SHUFFLE(1, 1, 1, 1));
    const __m128 r2g2 = _mm_shuffle_ps(r, g, _MM_SHUFFLE(2, 2, 2, 2));
    const __m128 b2r3 = _mm_shuffle_ps(b, r, _MM_SHUFFLE(3, 3, 2, 2));
    const __m128 g3b3 = _mm_shuffle_ps(g, b, _MM_SHUFFLE(3, 3, 3, 3));
    _mm_storeu_ps(p, _mm_shuffle_ps(rg01, b0r1, _MM_SHUFFLE(2, 0, 1, 0)));
    _mm_storeu_ps(p + 4, _mm_shuffle_ps(g1b1, r2g2, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm_storeu_ps(p + 8, _mm_shuffle_ps(b2r3, g3b3, _MM_SHUFFLE(2, 0, 2, 0)));
#else
    for (int i = 0; i < 4; i++)
        p[3 * i] = q->r[i], p[3 * i + 1] = q->g[i], p[3 * i + 2] = q->b[i];
#endif
}

static inline v4f
gray4(const quad *q)
{
    return v4_splat(LUMA[0]) * q->r + v4_splat(LUMA[1]) * q->g + v4_splat(LUMA[2]) * q->b;
}

// ImageEnhance's blend with a degenerate image: out = degenerate + f * (in - degenerate); for
// brightness the degenerate image is black.
static inline void
blend4(quad *q, v4f degenerate, float f)
{
    q->r = clamp255_4(degenerate + v4_splat(f) * (q->r - degenerate));
    q->g = clamp255_4(degenerate + v4_splat(f) * (q->g - degenerate));
    q->b = clamp255_4(degenerate + v4_splat(f) * (q->b - degenerate));
}

// The lanes of a where mask is set, 0 elsewhere.
static inline v4f
and4(v4i mask, v4f a)
{
    return (v4f)(mask & (v4i)a);
}

// One channel of hue4's conversion back: n is 5, 3, 1 for r, g, b.
static inline v4f
hue_channel(v4f mx, v4f d, v4f h6, float n)
{
    v4f k = h6 + n;
    k -= and4(k >= 6, v4_splat(6));
    const v4f x = v4_max(v4_min(v4_min(k, 4 - k), v4_splat(1)), v4_splat(0));
    return clamp255_4(mx - d * x);
}

// Hue rotation by shift turns through HSV, as torchvision's adjust_hue, without branches: the
// hue h6 in sixths of a turn from whichever channel is largest, then each channel of the shifted
// color as max - (max - min) * clamp(min(k, 4 - k), 0, 1) with k = (n + h6) mod 6 and n = 5, 3, 1
// for r, g, b (the six sectors of the usual conversion in one formula). Gray pixels (max = min)
// come back unchanged.
static inline void
hue4(quad *q, float shift)
{
    const v4f r = q->r, g = q->g, b = q->b;
    const v4f mx = v4_max(r, v4_max(g, b)), d = mx - v4_min(r, v4_min(g, b));
    const v4i is_r = mx == r, is_g = ~is_r & (mx == g), is_b = ~(is_r | is_g);
    // In [-1, 5] before the shift; a gray pixel's difference is 0 (and d is kept off 0).
    const v4f diff = v4_select(is_r, g - b, v4_select(is_g, b - r, r - g));
    v4f h6 =
        diff / v4_max(d, v4_splat(FLT_MIN)) + and4(is_g, v4_splat(2)) + and4(is_b, v4_splat(4));
    h6 += 6 * shift; // at most half a turn: one step either way wraps it into [0, 6)
    h6 += and4(h6 < 0, v4_splat(6));
    h6 -= and4(h6 >= 6, v4_splat(6));
    q->r = hue_channel(mx, d, h6, 5);
    q->g = hue_channel(mx, d, h6, 3);
    q->b = hue_channel(mx, d, h6, 1);
}

static inline void
color4(quad *q, const color_op *o)
{
    switch (o->kind) {
    case BRIGHTNESS:
        blend4(q, v4_splat(0), o->f);
        break;
    case CONTRAST:
        blend4(q, v4_splat(o->mean), o->f);
        break;
    case SATURATION:
        blend4(q, gray4(q), o->f);
        break;
    default:
        hue4(q, o->f);
        break;
    }
}

// Applies ops[0..n) to every pixel of im in one pass over it. With total != NULL, also adds the
// gray of every resulting pixel to *total (contrast's mean): in float over runs of 256 pixels,
// those sums in double, in a fixed order.
static void
color_pass(work *im, const color_op *ops, int n, double *total)
{
    const size_t pixels = (size_t)im->h * im->w;
    v4f sum = v4_splat(0);
    float tail[12]; // the last pixels, padded with zeros: they go through the same code
    for (size_t i = 0; i < pixels; i += 4) {
        const size_t m = pixels - i < 4 ? pixels - i : 4;
        float *p = m == 4 ? im->px + 3 * i : tail;
        if (m < 4) {
            memset(tail, 0, sizeof tail);
            memcpy(tail, im->px + 3 * i, m * 3 * sizeof(float));
        }
        quad q = quad_load(p);
        for (int k = 0; k < n; k++)
            color4(&q, &ops[k]);
        if (n > 0)
            quad_store(p, &q);
        if (n > 0 && m < 4)
            memcpy(im->px + 3 * i, tail, m * 3 * sizeof(float));
        if (total == NULL)
            continue;
        sum += v4_select((v4i){0, 1, 2, 3} < (int32_t)m, gray4(&q), v4_splat(0));
        if (i % 256 == 252 || i + m == pixels) {
            *total += (double)sum[0] + sum[1] + sum[2] + sum[3];
            sum = v4_splat(0);
        }
    }
}

// ColorJitter: the four adjustments in a random order, in at most two passes over the pixels.
// All but contrast are per pixel and fuse into one pass; contrast blends with the mean gray of
// the image it meets, so the adjustments before it run in a first pass that also sums that gray.
static void
jitter(const op *o, work *im, stoker_rng *rng)
{
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) { // Fisher-Yates: torchvision draws a permutation per call
        int j = (int)(stoker_rng_u64(rng) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    float f[4];
    for (int k = 0; k < 4; k++)
        f[k] = o->has[k] ? (float)stoker_rng_range(rng, o->range[k][0], o->range[k][1]) : 0;
    color_op ops[4];
    int n = 0, contrast_at = -1;
    for (int i = 0; i < 4; i++) {
        int k = order[i];
        if (!o->has[k])
            continue;
        if (k == CONTRAST)
            contrast_at = n;
        ops[n++] = (color_op){.kind = k, .f = f[k]};
    }
    if (contrast_at < 0) {
        color_pass(im, ops, n, NULL);
        return;
    }
    double total = 0;
    color_pass(im, ops, contrast_at, &total);
    ops[contrast_at].mean = (float)(total / ((size_t)im->h * im->w));
    color_pass(im, ops + contrast_at, n - contrast_at, NULL);
}

// ---- the pipeline ----

// resize's target for a width x height image: shorter side to s, the longer scaled and truncated
// (torchvision), or exactly h x w.
static void
resize_target(const op *o, uint32_t width, uint32_t height, uint32_t *h, uint32_t *w)
{
    *h = o->h, *w = o->w;
    if (o->s > 0) {
        bool wide = width > height;
        uint32_t s = wide ? height : width, l = wide ? width : height;
        uint32_t nl = (uint32_t)((uint64_t)o->s * l / s);
        *h = wide ? o->s : nl;
        *w = wide ? nl : o->s;
    }
}

uint32_t
augment_draft_scale(uint32_t box_h, uint32_t box_w, uint32_t out_h, uint32_t out_w)
{
    uint32_t s = 1;
    while (s < 8 && (uint64_t)box_h >= (uint64_t)out_h * s * 2 &&
           (uint64_t)box_w >= (uint64_t)out_w * s * 2)
        s *= 2;
    return s;
}

uint32_t
augment_draft(const augment *a, uint32_t width, uint32_t height, const stoker_rng *rng,
              uint32_t out_h, uint32_t out_w, uint32_t *rows)
{
    if (rows != NULL)
        *rows = height;
    if (a->n == 0)
        return 1;
    const op *o = &a->ops[0];
    if (o->kind == OP_RRC) {
        stoker_rng r = *rng; // the draws augment_apply_image will make
        uint32_t box[4];
        rrc_box(o, &r, width, height, box);
        if (rows != NULL)
            *rows = box[0] + box[2];
        return augment_draft_scale(box[2], box[3], out_h, out_w);
    }
    if (o->kind == OP_RESIZE) {
        uint32_t h, w;
        resize_target(o, width, height, &h, &w);
        return augment_draft_scale(height, width, h, w);
    }
    return 1;
}

void
augment_draft_range(const augment *a, uint32_t width, uint32_t height, uint32_t out_h,
                    uint32_t out_w, uint32_t *lo, uint32_t *hi)
{
    *lo = *hi = 1;
    if (a->n > 0 && a->ops[0].kind == OP_RRC) { // any box up to the whole image
        *hi = augment_draft_scale(height, width, out_h, out_w);
    } else if (a->n > 0 && a->ops[0].kind == OP_RESIZE) { // always the same
        uint32_t h, w;
        resize_target(&a->ops[0], width, height, &h, &w);
        *lo = *hi = augment_draft_scale(height, width, h, w);
    }
}

int
augment_apply_image(const augment *a, const augment_image *src, stoker_rng *rng, uint32_t out_h,
                    uint32_t out_w, float *out)
{
    const uint32_t scale = src->scale;
    if (scale != 1 &&
        (scale > augment_draft(a, src->full_width, src->full_height, rng, out_h, out_w, NULL) ||
         src->width != (src->full_width + scale - 1) / scale ||
         src->height != (src->full_height + scale - 1) / scale))
        return STOKER_INVALID;
    work im = {.u8 = src->rgb, .h = src->height, .w = src->width}, next = {0};
    int rv = STOKER_OK;
    for (size_t i = 0; i < a->n && rv == STOKER_OK; i++) {
        const op *o = &a->ops[i];
        bool samples = o->kind == OP_RRC || o->kind == OP_RESIZE || o->kind == OP_NORMALIZE;
        if (!samples && (rv = work_floats(&im)) != STOKER_OK)
            break;
        // The first operation computes its geometry at full size and reads the pixels at
        // 1/s of it (s is 1 past it: the image is then the pipeline's own).
        const double s = i == 0 ? scale : 1;
        const uint32_t gw = i == 0 ? src->full_width : im.w;
        const uint32_t gh = i == 0 ? src->full_height : im.h;
        switch (o->kind) {
        case OP_RRC: {
            uint32_t box[4];
            rrc_box(o, rng, gw, gh, box);
            rv = resample(&im, box[0] / s, box[1] / s, box[2] / s, box[3] / s, out_h, out_w, &next);
            break;
        }
        case OP_RESIZE: {
            uint32_t h, w;
            resize_target(o, gw, gh, &h, &w);
            rv = resample(&im, 0, 0, gh / s, gw / s, h, w, &next);
            break;
        }
        case OP_CCROP:
            rv = center_crop(&im, o->h ? o->h : out_h, o->w ? o->w : out_w, &next);
            break;
        case OP_HFLIP:
            if (stoker_rng_uniform(rng) < o->p)
                hflip(&im);
            break;
        case OP_JITTER:
            jitter(o, &im, rng);
            break;
        case OP_ROTATE:
            rv = rotate(&im, stoker_rng_range(rng, o->a[0], o->a[1]), &next);
            break;
        case OP_BLUR:
            rv = blur(&im, o->s, stoker_rng_range(rng, o->b[0], o->b[1]));
            break;
        case OP_ERASE:
            erase(a, o, &im, rng);
            break;
        case OP_RANDAUG:
            rv = randaug_apply(o->ra_n, o->ra_m, o->ra_bins, im.px, im.h, im.w, rng);
            break;
        case OP_NORMALIZE: // applied by the caller, by output dtype
            break;
        }
        if (next.px != NULL)
            work_swap(&im, &next);
    }
    if (rv == STOKER_OK && (im.h != out_h || im.w != out_w)) {
        rv = resample(&im, 0, 0, im.h, im.w, out_h, out_w, &next);
        if (rv == STOKER_OK)
            work_swap(&im, &next);
    }
    if (rv == STOKER_OK)
        rv = work_floats(&im); // a pipeline of normalize alone, at the output size
    if (rv == STOKER_OK)
        memcpy(out, im.px, (size_t)out_h * out_w * 3 * sizeof(float));
    free(im.px);
    return rv;
}

int
augment_apply(const augment *a, const uint8_t *rgb, uint32_t width, uint32_t height,
              stoker_rng *rng, uint32_t out_h, uint32_t out_w, float *out)
{
    const augment_image src = {.rgb = rgb,
                               .width = width,
                               .height = height,
                               .scale = 1,
                               .full_width = width,
                               .full_height = height};
    return augment_apply_image(a, &src, rng, out_h, out_w, out);
}
