// The `images` generator: decodes a class-per-subfolder tree of PNG (libpng's simplified API),
// JPEG (libjpeg-turbo) and WebP (libwebp, when built with it) files into memory once, then makes
// each example from those pixels with a random resized crop, flip and color jitter. Decoding
// everything up front keeps fill free of I/O and allocation; the price is memory, bounded by
// IMAGES_MAX_DECODED_BYTES, and start-up time. With decode_each only the files' headers are read at
// start (signature and dimensions) and each example reads and decodes its file, as a data loader
// reading a dataset does (the same bytes come out either way); a file that fails then is reported,
// skipped and counted, and another image is drawn in its place. Shrinking is plain bilinear without
// antialiasing (torchvision's antialias=False), which is cheaper than PIL's filter and fine for
// augmentation. An augment spec (augment.c) replaces that default pipeline; this file then only
// chooses the image and converts the pipeline's floats to the output's dtype and layout. A JPEG
// is taken reduced (DCT scaling) where the first crop or resize shrinks it anyway, chosen from
// the example's seed; decoded once, it is held at each scale its examples may use.
// Reading and decoding one file is image_file.c's. Encoded output skips all of it: an example
// is its file's bytes as they are, read when it is made, and the label.
#include "images.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "augment.h"
#include "image_file.h"
#include "vec4.h"

#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"
#include "stoker/schema.h"

#define MAX_REDRAWS 16 // random draws for a bad file's replacement; then the next good file

// Decoded pixels at one scale: (height, width, 3), then PIXEL_PAD zero bytes.
typedef struct level {
    uint8_t *rgb; // NULL when not held
    uint32_t width, height;
} level;

typedef struct image {
    // Decoded once: the pixels reduced by 1 << i, held for each reduction an example may ask
    // (a JPEG with the draft on: draft_range's; else at[0] alone). All NULL when decoded per
    // example.
    level at[IMAGE_SCALES];
    // The file, read for each example when decoded per example, or for its first one when
    // decoded once when used (else NULL).
    char *path;
    uint32_t width, height; // full size
    int32_t label;
    bool scalable;       // decoded once, a JPEG: examples may take it reduced
    bool bad;            // decoded per example or when used, it failed once: skipped from then on
    bool held;           // decoded when used: its levels are held
    bool refused;        // encoded: over the field's bound when last read (said once)
    uint64_t file_bytes; // encoded: its size at start
} image;

typedef struct class_info {
    char *name;
    size_t files;
} class_info;

typedef struct images_gen {
    uint32_t out_h, out_w;
    bool decode_each;
    // Decoded once, each file when an example first uses it (only headers at start): a dataset's
    // producer, handed only its own shards, decodes what they need, when they come.
    bool decode_when_used;
    augment *aug; // NULL: the built-in default pipeline
    images_output output;
    bool hwc;
    bool jpeg_draft; // JPEGs decoded reduced where the first resampling shrinks anyway
    images_label label;
    bool normalize;        // float32 output is normalized with mean and std
    float mean[3], std[3]; // what the pipeline normalizes with (declared for uint8 output)
    float *scratch;        // (3, h, w) or (h, w, 3) floats when the output is not written directly
    class_info *classes;
    uint32_t n_classes;
    size_t n_images, cap_images;
    image *images;
    size_t decoded_bytes;
    size_t reduced_bytes; // of decoded_bytes, the JPEGs' reduced copies (decoded once)
    bool strict;          // a bad file at start fails creation (else it is reported and skipped)
    size_t n_skipped;     // files left out at start: corrupt, unsupported or unreadable
    size_t n_bad;         // decode_each: files that failed to decode and are skipped
    uint64_t n_replaced;  // decode_each: examples made from another image than the one drawn
    // Per-example sampling tables, reused by every fill: for output column x, the byte offsets in
    // a source row of its two neighbours and the weight of the second; the same for rows.
    uint32_t *col0, *col1, *row0, *row1;
    float *wx, *wy;
    uint64_t listing;     // hash of the class/file names in index order (a dataset's fingerprint)
    stoker_labels labels; // the class-to-label map the producer says in its hello (bounded)
    // Encoded output: the field's bound (0: none), the files' bytes at start, and the largest.
    uint64_t max_file_bytes;
    uint64_t encoded_bytes;
    size_t largest; // index of the largest file
    uint8_t *file;  // encoded: the file being sent, read whole before it is appended
    size_t file_cap;
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
        for (int l = 0; l < IMAGE_SCALES; l++)
            free(g->images[i].at[l].rgb);
        free(g->images[i].path);
    }
    free(g->images);
    free(g->file);
    for (uint32_t c = 0; c < g->n_classes && g->classes != NULL; c++)
        free(g->classes[c].name);
    free(g->classes);
    augment_destroy(g->aug);
    stoker_labels_fini(&g->labels);
    free(g->scratch);
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
    static const char *const known[] = {".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff"};
    for (size_t i = 0; dot != NULL && i < sizeof known / sizeof *known; i++)
        if (strcasecmp(dot, known[i]) == 0)
            return true;
    return false;
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
        bool keep;
        if (e->d_type == DT_REG || e->d_type == DT_DIR) {
            // The entry's type as the folder has it: no stat per file (a folder of 60,000
            // files took a second and a half to list with two).
            keep = want_dirs ? e->d_type == DT_DIR : e->d_type == DT_REG;
        } else { // a link (followed), or a file system that does not say
            char *path;
            struct stat st;
            if (asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
                rv = STOKER_NOMEM;
                break;
            }
            keep = stat(path, &st) == 0 && (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
            free(path);
        }
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

#define MAX_DEPTH 32 // nested folders inside a class; deeper (or a link loop) is an error

static int
names_push(name_list *l, char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **names = realloc(l->names, cap * sizeof *names);
        if (names == NULL)
            return STOKER_NOMEM;
        l->names = names;
        l->cap = cap;
    }
    l->names[l->n++] = name;
    return STOKER_OK;
}

// Appends the image files under dir to out as paths relative to the class folder (prefix is
// dir's own relative path, "" at the top): dir's files sorted by name, then each subfolder's,
// depth first in name order (torchvision's ImageFolder also walks nested folders).
static int
list_tree(const char *dir, const char *prefix, int depth, name_list *out, char *err, size_t err_len)
{
    if (depth > MAX_DEPTH) {
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: '%s' is nested more than %d folders deep (a link loop?)", dir,
                             MAX_DEPTH);
    }
    name_list files = {0}, dirs = {0};
    int rv = list_dir(dir, false, &files, err, err_len);
    if (rv == STOKER_OK)
        rv = list_dir(dir, true, &dirs, err, err_len);
    for (size_t i = 0; i < files.n && rv == STOKER_OK; i++) {
        char *rel;
        if (asprintf(&rel, "%s%s", prefix, files.names[i]) < 0)
            rv = STOKER_NOMEM;
        else if ((rv = names_push(out, rel)) != STOKER_OK)
            free(rel);
    }
    for (size_t i = 0; i < dirs.n && rv == STOKER_OK; i++) {
        char *sub, *sub_prefix;
        if (asprintf(&sub, "%s/%s", dir, dirs.names[i]) < 0)
            rv = STOKER_NOMEM;
        else if (asprintf(&sub_prefix, "%s%s/", prefix, dirs.names[i]) < 0) {
            free(sub);
            rv = STOKER_NOMEM;
        } else {
            rv = list_tree(sub, sub_prefix, depth + 1, out, err, err_len);
            free(sub);
            free(sub_prefix);
        }
    }
    if (rv == STOKER_NOMEM)
        stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory listing '%s'", dir);
    names_free(&files);
    names_free(&dirs);
    return rv;
}

static uint32_t draft(const images_gen *g, uint32_t width, uint32_t height, const stoker_rng *rng,
                      uint32_t *rows);
static void draft_range(const images_gen *g, uint32_t width, uint32_t height, uint32_t *lo,
                        uint32_t *hi);

// Decodes data (the file at path) reduced by scale (JPEG; others at full size) into *px,
// counted in g's decoded-pixel budget; with rows > 0 a JPEG only down to the full image's row
// rows (what the example reads).
static int
decode_into(images_gen *g, const char *path, const uint8_t *data, size_t len, uint32_t scale,
            uint32_t rows, image_pixels *px, char *err, size_t err_len)
{
    return image_file_decode_scaled(path, data, len, scale, (rows + scale - 1) / scale,
                                    &g->decoded_bytes, g->n_images, px, err, err_len);
}

static int
level_of(uint32_t scale)
{
    return scale == 8 ? 3 : scale == 4 ? 2 : scale == 2 ? 1 : 0;
}

static void
level_free(images_gen *g, level *l)
{
    g->decoded_bytes -= (size_t)l->width * l->height * 3;
    free(l->rgb);
    *l = (level){0};
}

// Decode once: data (the file at path) into im at every scale an example may ask: full size,
// and for a JPEG with the draft on each reduction of draft_range (1.33x the pixels of full size
// at most), so that examples are the pixels --decode each makes.
static int
decode_levels(images_gen *g, const char *path, const uint8_t *data, size_t len, image *im,
              char *err, size_t err_len)
{
    image_pixels px;
    int rv = decode_into(g, path, data, len, 1, 0, &px, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    im->at[0] = (level){px.rgb, px.width, px.height};
    im->width = px.width;
    im->height = px.height;
    im->scalable = g->jpeg_draft && image_file_scalable(data, len);
    if (!im->scalable)
        return STOKER_OK;
    uint32_t lo, hi;
    draft_range(g, im->width, im->height, &lo, &hi);
    for (uint32_t s = 2; s <= hi && rv == STOKER_OK; s *= 2) {
        if (s < lo)
            continue;
        rv = decode_into(g, path, data, len, s, 0, &px, err, err_len);
        if (rv == STOKER_OK) {
            im->at[level_of(s)] = (level){px.rgb, px.width, px.height};
            g->reduced_bytes += (size_t)px.width * px.height * 3;
        }
    }
    if (rv == STOKER_OK && lo > 1) // every example takes it reduced: full size is not needed
        level_free(g, &im->at[0]);
    if (rv != STOKER_OK) {
        for (int l = 0; l < IMAGE_SCALES; l++) {
            if (l > 0 && im->at[l].rgb != NULL)
                g->reduced_bytes -= (size_t)im->at[l].width * im->at[l].height * 3;
            if (im->at[l].rgb != NULL)
                level_free(g, &im->at[l]);
        }
    }
    return rv;
}

static uint64_t file_limit(const images_gen *g);

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
    if (g->output == IMAGES_ENCODED) {
        // The header tells a real image from a stray file; the pixels are never decoded here,
        // so their size (IMAGES_MAX_DECODED_BYTES) is the consumer's business.
        rv = image_file_probe(path, &im.width, &im.height, err, err_len);
        struct stat st;
        if (rv == STOKER_OK || rv == STOKER_TOO_LARGE) {
            rv = stat(path, &st) == 0
                     ? STOKER_OK
                     : stoker_errorf(err, err_len, STOKER_IO, "images: cannot read '%s': %s", path,
                                     strerror(errno));
        }
        if (rv != STOKER_OK)
            return rv;
        if ((im.path = strdup(path)) == NULL)
            return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory");
        im.file_bytes = (uint64_t)st.st_size;
        im.refused = im.file_bytes > file_limit(g); // said at start (log_encoded)
        if (g->n_images == 0 || im.file_bytes > g->images[g->largest].file_bytes)
            g->largest = g->n_images;
        g->encoded_bytes += im.file_bytes;
        g->images[g->n_images++] = im;
        return STOKER_OK;
    }
    if (g->decode_when_used) {
        // A dataset's producer opens no file at start (checking 60,000 small files' headers
        // took seconds before the first batch): decode_used reads, decodes and checks each
        // when a shard it is handed first needs it, and names a file that fails then.
        if ((im.path = strdup(path)) == NULL)
            return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory");
        g->images[g->n_images++] = im;
        return STOKER_OK;
    }
    if (g->decode_each) {
        // Only the header now; the pixels when an example needs them.
        if ((rv = image_file_probe(path, &im.width, &im.height, err, err_len)) != STOKER_OK)
            return rv;
        if ((im.path = strdup(path)) == NULL) {
            return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory");
        }
        g->images[g->n_images++] = im;
        return STOKER_OK;
    }
    uint8_t *data = NULL;
    size_t len = 0;
    if ((rv = image_file_read(path, &data, &len, err, err_len)) != STOKER_OK)
        return rv;
    rv = decode_levels(g, path, data, len, &im, err, err_len);
    free(data);
    if (rv == STOKER_OK)
        g->images[g->n_images++] = im;
    if (rv == STOKER_TOO_LARGE && g->reduced_bytes > 0 && err != NULL) {
        size_t n = strlen(err);
        snprintf(err + n, err_len - n,
                 "; %.1f MiB of it are JPEGs also held at the reduced scales examples use "
                 "(--jpeg-draft off holds full size only, and decodes slower)",
                 g->reduced_bytes / 1048576.0);
    }
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
    if ((g->classes = calloc(classes.n, sizeof *g->classes)) == NULL) {
        names_free(&classes);
        return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory");
    }
    g->n_classes = (uint32_t)classes.n;
    for (size_t c = 0; c < classes.n && rv == STOKER_OK; c++) {
        char *class_dir;
        if (asprintf(&class_dir, "%s/%s", dir, classes.names[c]) < 0) {
            rv = STOKER_NOMEM;
            break;
        }
        name_list files = {0};
        rv = list_tree(class_dir, "", 0, &files, err, err_len);
        if (rv == STOKER_OK && files.n == 0) {
            stoker_errorf(err, err_len, STOKER_INVALID,
                          "images: class folder '%s' has no .png, .jpg or .jpeg (or .webp, .bmp, "
                          ".tif, .tiff) files",
                          class_dir);
            rv = STOKER_INVALID;
        }
        g->classes[c].files = files.n;
        g->classes[c].name = classes.names[c];
        classes.names[c] = NULL; // now the generator's
        for (size_t i = 0; i < files.n && rv == STOKER_OK; i++) {
            char *path;
            if (asprintf(&path, "%s/%s", class_dir, files.names[i]) < 0) {
                rv = STOKER_NOMEM;
                break;
            }
            char why[512] = "";
            rv = load_image(g, path, (int32_t)c, why, sizeof why);
            if ((rv == STOKER_INVALID || rv == STOKER_IO) && !g->strict) {
                // A corrupt, unsupported or unreadable file: said with its path, left out.
                stoker_warn("%s; skipped", why);
                g->n_skipped++;
                g->classes[c].files--;
                free(path);
                rv = STOKER_OK;
                continue;
            }
            if (rv != STOKER_OK && err != NULL)
                snprintf(err, err_len, "%s", why);
            const char *rel = path + strlen(dir) + 1; // class/file: the same on every box
            g->listing = stoker_hash64(rel, strlen(rel) + 1, g->listing);
            free(path);
        }
        if (rv == STOKER_OK && g->classes[c].files == 0 && files.n > 0)
            stoker_warn("images: class '%s' (label %zu) has no readable image: none of its "
                        "examples can be made",
                        g->classes[c].name, c);
        names_free(&files);
        free(class_dir);
    }
    if (rv == STOKER_NOMEM)
        stoker_errorf(err, err_len, STOKER_INVALID, "images: out of memory loading '%s'", dir);
    if (rv == STOKER_OK && g->n_images == 0)
        rv = stoker_errorf(err, err_len, STOKER_INVALID,
                           "images: '%s': none of its %zu image files could be read", dir,
                           g->n_skipped);
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
// of len full-size pixels starting at first, in a line of src_len pixels that is the image
// reduced by scale: the span maps to [first / scale, (first + len) / scale), and the clamping
// is to the pixels it touches. Offsets scaled by unit bytes. reversed fills them back to front
// (the horizontal flip). With scale 1 this is the plain integer span.
static void
sample_table(uint32_t n, uint32_t first, uint32_t len, uint32_t scale, uint32_t src_len,
             uint32_t unit, bool reversed, uint32_t *i0, uint32_t *i1, float *w)
{
    const uint32_t base = first / scale;
    const double offset = (double)first / scale - base; // 0 when scale is 1
    uint32_t end = (first + len + scale - 1) / scale;
    if (end > src_len)
        end = src_len;
    const uint32_t span = end - base;
    const double step = (double)len / scale / n;
    for (uint32_t k = 0; k < n; k++) {
        double s = offset + (k + 0.5) * step - 0.5;
        if (s < 0)
            s = 0;
        if (s > span - 1)
            s = span - 1;
        uint32_t a = (uint32_t)s;
        uint32_t b = a + 1 < span ? a + 1 : a;
        uint32_t at = reversed ? n - 1 - k : k;
        i0[at] = (base + a) * unit;
        i1[at] = (base + b) * unit;
        w[at] = (float)(s - a);
    }
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
            acc += v4_min(load4(o + i, end - i) * b, top);
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
            v = v4_min(v * b, top);
            v = v4_max(v4_min(v * c + sh, top), zero);
        } else {
            v = v4_max(v4_min(v * c + sh, top), zero);
            v = v4_min(v * b, top);
        }
        store4(o + i, v * sc + bi, n - i);
    }
}

// Reads and decodes im's file (decode_each) into *out, a JPEG reduced as far as the example
// drawn from rng (not advanced) allows and only down to the last row it reads (draft): the
// pixels it reads are those decode once holds. STOKER_OK; STOKER_NOMEM; another code with err
// written when the file cannot be read or decoded.
static int
decode_file(images_gen *g, const image *im, const stoker_rng *rng, image_pixels *out, char *err,
            size_t err_len)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rv = image_file_read(im->path, &data, &len, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    // The size its header had at start (the same pixels decode once holds).
    uint32_t rows = 0, scale = 1;
    if (image_file_scalable(data, len))
        scale = draft(g, im->width, im->height, rng, &rows);
    rv = decode_into(g, im->path, data, len, scale, rows, out, err, err_len);
    if (rv == STOKER_OK && image_file_scalable(data, len) &&
        (out->full_width != im->width || out->full_height != im->height)) {
        // Rewritten since: choose from the size it has now.
        uint32_t again = draft(g, out->full_width, out->full_height, rng, &rows);
        g->decoded_bytes -= (size_t)out->width * out->height * 3;
        free(out->rgb);
        rv = decode_into(g, im->path, data, len, again, rows, out, err, err_len);
    }
    free(data);
    return rv;
}

// A file of a draw failed with rv (err says how): STOKER_NOMEM ends the draw; otherwise the
// file is marked bad, said once and counted, and the draw goes on (STOKER_OK) unless every file
// is bad (STOKER_INVALID). what: "decoded" or "read", for that last message.
static int
give_up(images_gen *g, image *im, int rv, const char *err, const char *what)
{
    if (rv == STOKER_NOMEM) {
        stoker_error("%s", err);
        return rv;
    }
    im->bad = true;
    g->n_bad++;
    stoker_warn("%s; skipping this file from now on (%zu of %zu skipped)", err, g->n_bad,
                g->n_images);
    if (g->n_bad == g->n_images) {
        stoker_error("images: none of the %zu files could be %s", g->n_images, what);
        return STOKER_INVALID;
    }
    return STOKER_OK;
}

// The image a draw tries after image i failed on its attempt-th try: drawn again from rng for
// MAX_REDRAWS tries, then the next in order (so a draw ends even when most files are bad).
static size_t
redraw(const images_gen *g, stoker_rng *rng, size_t i, unsigned attempt)
{
    return attempt <= MAX_REDRAWS ? stoker_rng_u64(rng) % g->n_images : (i + 1) % g->n_images;
}

// decode_each: decodes image drawn into *out, as a data loader reading its dataset does. A file
// that fails (corrupt data behind a good header, removed, unreadable) is reported with its path
// once, marked bad and counted, and another image is used: further draws from rng, then the next
// good image in order. Which image replaces which depends only on the seed and on which files are
// bad, so the examples stay determined by the seed. STOKER_OK; STOKER_NOMEM; STOKER_INVALID when
// every file failed.
static int
decode_drawn(images_gen *g, stoker_rng *rng, size_t drawn, image_pixels *out, int32_t *label)
{
    size_t i = drawn;
    for (unsigned attempt = 1;; attempt++) {
        image *im = &g->images[i];
        if (!im->bad) {
            char err[512];
            int rv = decode_file(g, im, rng, out, err, sizeof err);
            if (rv == STOKER_OK) {
                *label = im->label;
                if (i != drawn)
                    g->n_replaced++;
                return STOKER_OK;
            }
            if ((rv = give_up(g, im, rv, err, "decoded")) != STOKER_OK)
                return rv;
        }
        i = redraw(g, rng, i, attempt);
    }
}

// The default pipeline (see images.h) from im into out, (3, out_h, out_w) floats: normalized
// with ImageNet's statistics, or with normalize false left in [0, 255]. im may be reduced: the
// crop is drawn at full size and sampled from its pixels.
static void
default_pipeline(images_gen *g, stoker_rng *rng_state, const augment_image *im, float *out,
                 bool normalize)
{
    stoker_rng rng = *rng_state;
    crop box = random_crop(&rng, im->full_width, im->full_height);
    bool flip = stoker_rng_uniform(&rng) < 0.5;
    float brightness = (float)stoker_rng_range(&rng, 0.6, 1.4);
    float contrast = (float)stoker_rng_range(&rng, 0.6, 1.4);
    bool brightness_first = stoker_rng_uniform(&rng) < 0.5;

    const uint32_t n = g->out_w, rows = g->out_h;
    const size_t plane = (size_t)rows * n;
    sample_table(n, box.left, box.width, im->scale, im->width, 3, flip, g->col0, g->col1, g->wx);
    sample_table(rows, box.top, box.height, im->scale, im->height, 1, false, g->row0, g->row1,
                 g->wy);

    // Pass 1: bilinear resample into the output, values in [0, 255]; (3, rows, n). A pixel is one
    // vector (r, g, b, unused), so the three channels are interpolated together.
    float *out_r = out, *out_g = out + plane, *out_b = out + 2 * plane;
    const size_t stride = (size_t)im->width * 3;
    const v4f zero = {0, 0, 0, 0};
    v4f max_value = zero;
    double sum[3] = {0, 0, 0};
    for (uint32_t y = 0; y < rows; y++) {
        const uint8_t *r0 = im->rgb + g->row0[y] * stride;
        const uint8_t *r1 = im->rgb + g->row1[y] * stride;
        const v4f fy = zero + g->wy[y];
        float *o_r = out_r + (size_t)y * n, *o_g = out_g + (size_t)y * n;
        float *o_b = out_b + (size_t)y * n;
        v4f row_sum = zero;
        for (uint32_t x = 0; x < n; x++) {
            const uint32_t c0 = g->col0[x], c1 = g->col1[x];
            const v4f fx = zero + g->wx[x];
            v4f a = v4_from_u8(r0 + c0), b = v4_from_u8(r0 + c1), p = v4_from_u8(r1 + c0),
                q = v4_from_u8(r1 + c1);
            v4f top = a + (b - a) * fx, bottom = p + (q - p) * fx;
            v4f v = top + (bottom - top) * fy;
            o_r[x] = v[0];
            o_g[x] = v[1];
            o_b[x] = v[2];
            row_sum += v;
            max_value = v4_max(max_value, v);
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

    // Pass 2: jitter, then (v / 255 - mean) / std (or nothing more, for uint8 output).
    for (int ch = 0; ch < 3; ch++)
        jitter_plane(out + ch * plane, plane, brightness_first, brightness, contrast, shift,
                     normalize ? 1.0f / (255.0f * STD[ch]) : 1.0f,
                     normalize ? -MEAN[ch] / STD[ch] : 0.0f);
    *rng_state = rng;
}

// Converts src, (3, h, w) when src_chw else (h, w, 3), to the image field dst in the output's
// dtype and layout. src is already normalized (src_normalized) or holds values in [0, 255].
static void
emit(const images_gen *g, const float *src, bool src_chw, bool src_normalized, void *dst)
{
    const size_t plane = (size_t)g->out_h * g->out_w;
    for (int c = 0; c < 3; c++) {
        const float scale = g->normalize ? 1.0f / (255.0f * g->std[c]) : 1.0f / 255.0f;
        const float bias = g->normalize ? -g->mean[c] / g->std[c] : 0.0f;
        for (size_t i = 0; i < plane; i++) {
            float v = src_chw ? src[c * plane + i] : src[3 * i + (size_t)c];
            size_t at = g->hwc ? 3 * i + (size_t)c : c * plane + i;
            if (g->output == IMAGES_UINT8) {
                v = v < 0 ? 0 : v > 255 ? 255 : v;
                ((uint8_t *)dst)[at] = (uint8_t)(v + 0.5f);
            } else {
                ((float *)dst)[at] = src_normalized ? v : v * scale + bias;
            }
        }
    }
}

// The reduction example rng (not advanced) may decode a width x height JPEG at: where the
// pipeline's first resampling shrinks by 2, 4 or 8 anyway (augment_draft; the default
// pipeline's crop alike). *rows (if not NULL): how many of the image's top rows the example
// reads. With the draft off: 1, and every row (0).
static uint32_t
draft(const images_gen *g, uint32_t width, uint32_t height, const stoker_rng *rng, uint32_t *rows)
{
    if (rows != NULL)
        *rows = 0;
    if (!g->jpeg_draft)
        return 1;
    if (g->aug != NULL)
        return augment_draft(g->aug, width, height, rng, g->out_h, g->out_w, rows);
    stoker_rng r = *rng; // the draws default_pipeline will make
    crop box = random_crop(&r, width, height);
    if (rows != NULL)
        *rows = box.top + box.height;
    return augment_draft_scale(box.height, box.width, g->out_h, g->out_w);
}

// The reductions draft can give for some example of a width x height JPEG.
static void
draft_range(const images_gen *g, uint32_t width, uint32_t height, uint32_t *lo, uint32_t *hi)
{
    if (g->aug != NULL) {
        augment_draft_range(g->aug, width, height, g->out_h, g->out_w, lo, hi);
        return;
    }
    *lo = 1; // crops down to a few pixels; up to the whole image
    *hi = augment_draft_scale(height, width, g->out_h, g->out_w);
}

// Decoded once when used: the image an example of image drawn is made from, its levels decoded
// now unless held already, then held. A file that fails is handled as decode_drawn handles one
// (said once, marked bad, counted; another drawn from rng). STOKER_OK with *used; STOKER_NOMEM,
// STOKER_TOO_LARGE (the decoded budget); STOKER_INVALID when every file failed.
static int
decode_used(images_gen *g, stoker_rng *rng, size_t drawn, size_t *used)
{
    size_t i = drawn;
    for (unsigned attempt = 1;; attempt++) {
        image *im = &g->images[i];
        int rv = STOKER_OK;
        if (!im->bad && !im->held) {
            char err[512];
            uint8_t *data = NULL;
            size_t len = 0;
            if ((rv = image_file_read(im->path, &data, &len, err, sizeof err)) == STOKER_OK)
                rv = decode_levels(g, im->path, data, len, im, err, sizeof err);
            free(data);
            im->held = rv == STOKER_OK;
            if (rv == STOKER_TOO_LARGE) { // the budget of all held pixels, not this file
                stoker_error("%s", err);
                return rv;
            }
            if (rv != STOKER_OK && (rv = give_up(g, im, rv, err, "decoded")) != STOKER_OK)
                return rv;
        }
        if (im->held) {
            *used = i;
            if (i != drawn)
                g->n_replaced++;
            return STOKER_OK;
        }
        i = redraw(g, rng, i, attempt);
    }
}

// Makes an example of image drawn through the pipeline, the rest of its randomness from
// from_rng (a stream's fill and a dataset's fill_item share it).
static int
make_example(images_gen *g, const stoker_rng *from_rng, size_t drawn, void *const fields[])
{
    stoker_rng rng = *from_rng;
    if (g->decode_when_used && !g->decode_each) {
        int rv = decode_used(g, &rng, drawn, &drawn);
        if (rv != STOKER_OK)
            return rv;
    }
    const image *im = &g->images[drawn];
    image_pixels decoded = {0};
    augment_image src;
    int32_t label = im->label;
    if (g->decode_each) {
        int rv = decode_drawn(g, &rng, drawn, &decoded, &label);
        if (rv != STOKER_OK)
            return rv;
        src = (augment_image){decoded.rgb,   decoded.width,      decoded.height,
                              decoded.scale, decoded.full_width, decoded.full_height};
    } else {
        uint32_t scale = im->scalable ? draft(g, im->width, im->height, &rng, NULL) : 1;
        const level *l = &im->at[level_of(scale)];
        if (l->rgb == NULL) { // draft_range said which it holds: a broken invariant
            stoker_error("images: no pixels at 1/%u for image %zu", scale, drawn);
            return STOKER_INTERNAL;
        }
        src = (augment_image){l->rgb, l->width, l->height, scale, im->width, im->height};
    }
    int rv = STOKER_OK;
    if (g->aug != NULL) {
        rv = augment_apply_image(g->aug, &src, &rng, g->out_h, g->out_w, g->scratch);
        if (rv == STOKER_OK)
            emit(g, g->scratch, false, false, fields[0]);
    } else if (g->output == IMAGES_FLOAT32 && !g->hwc) {
        default_pipeline(g, &rng, &src, fields[0], true); // straight into the field
    } else {
        bool normalize = g->output == IMAGES_FLOAT32;
        default_pipeline(g, &rng, &src, g->scratch, normalize);
        emit(g, g->scratch, true, normalize, fields[0]);
    }
    if (g->label == IMAGES_LABEL_INT64)
        *(int64_t *)fields[1] = label;
    else
        *(int32_t *)fields[1] = label;
    if (g->decode_each) {
        free(decoded.rgb);
        g->decoded_bytes -= (size_t)decoded.width * decoded.height * 3;
    }
    return rv;
}

// The most bytes a file of encoded output may have: the field's bound, else what a chunk's
// values may hold (past either, the slot refuses it: encoded_example relies on that).
static uint64_t
file_limit(const images_gen *g)
{
    return g->max_file_bytes != 0 ? g->max_file_bytes : STOKER_CHUNK_VALUE_BYTES_MAX;
}

// Reads the whole file at path into g->file (grown as needed): *len bytes. Only its size is
// read from a file over file_limit (*len; STOKER_TOO_LARGE). STOKER_OK; STOKER_IO (err names
// the path); STOKER_NOMEM.
static int
read_encoded(images_gen *g, const char *path, size_t *len, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        stoker_errorf(err, err_len, STOKER_IO, "images: cannot read '%s': %s", path,
                      strerror(errno));
        if (fd >= 0)
            close(fd);
        return STOKER_IO;
    }
    uint64_t n = (uint64_t)st.st_size;
    *len = (size_t)n;
    if (n > file_limit(g)) {
        close(fd);
        return STOKER_TOO_LARGE;
    }
    if (n > g->file_cap) {
        uint8_t *p = realloc(g->file, (size_t)n);
        if (p == NULL) {
            close(fd);
            return stoker_errorf(err, err_len, STOKER_NOMEM,
                                 "images: out of memory reading '%s' (%llu bytes)", path,
                                 (unsigned long long)n);
        }
        g->file = p;
        g->file_cap = (size_t)n;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, g->file + got, (size_t)n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            stoker_errorf(err, err_len, STOKER_IO, "images: cannot read '%s': %s", path,
                          r < 0 ? strerror(errno) : "shorter than its size");
            close(fd);
            return STOKER_IO;
        }
        got += (size_t)r;
    }
    close(fd);
    return STOKER_OK;
}

// Encoded output: the example is the bytes of image drawn and its label. A file that cannot be
// read is skipped as decode_drawn skips one (the same replacement draws from rng). A file over
// the field's bound is refused through the slot (the runtime counts it and makes the example
// again from another seed; a dataset item stops the producer), said once per file with its
// path and size.
static int
encoded_example(images_gen *g, stoker_rng *rng, size_t drawn, void *const fields[])
{
    size_t i = drawn;
    for (unsigned attempt = 1;; attempt++) {
        image *im = &g->images[i];
        if (!im->bad) {
            char err[512];
            size_t len = 0;
            int rv = read_encoded(g, im->path, &len, err, sizeof err);
            if (rv == STOKER_TOO_LARGE) {
                void *unused;
                rv = stoker_var_reserve(fields[0], len, &unused); // refused: nothing appended
                if (rv == STOKER_OK) // the chunk took it after all: a broken invariant
                    return STOKER_INTERNAL;
                if (!im->refused)
                    stoker_warn("images: '%s' is %zu bytes, over %s %llu bytes: refused (each "
                                "time it is drawn; counted in the producer's refused)",
                                im->path, len,
                                g->max_file_bytes ? "the image field's bound (--max-file-bytes)"
                                                  : "an example's limit",
                                (unsigned long long)file_limit(g));
                im->refused = true;
                return rv;
            }
            if (rv == STOKER_OK) {
                rv = stoker_var_append(fields[0], g->file, len);
                if (rv == STOKER_TOO_LARGE)
                    stoker_warn("images: '%s' (%zu bytes) does not fit the chunk's values: "
                                "refused",
                                im->path, len);
                if (rv != STOKER_OK)
                    return rv;
                if (g->label == IMAGES_LABEL_INT64)
                    *(int64_t *)fields[1] = im->label;
                else
                    *(int32_t *)fields[1] = im->label;
                if (i != drawn)
                    g->n_replaced++;
                return STOKER_OK;
            }
            if ((rv = give_up(g, im, rv, err, "read")) != STOKER_OK)
                return rv;
        }
        i = redraw(g, rng, i, attempt);
    }
}

void
images_config_init(images_config *cfg)
{
    *cfg = (images_config){.height = 64, .width = 64, .jpeg_draft = true};
}

// One INFO line per class up to this many; beyond, a summary (the label map has them all).
#define LOGGED_CLASSES 32

static void
log_classes(const images_gen *g, const char *dir)
{
    size_t lo = SIZE_MAX, hi = 0;
    for (uint32_t c = 0; c < g->n_classes; c++) {
        size_t n = g->classes[c].files;
        lo = n < lo ? n : lo;
        hi = n > hi ? n : hi;
        if (g->n_classes <= LOGGED_CLASSES)
            stoker_info("images: label %u = '%s': %zu files", c, g->classes[c].name, n);
        else
            stoker_debug("images: label %u = '%s': %zu files", c, g->classes[c].name, n);
    }
    if (g->n_classes > LOGGED_CLASSES)
        stoker_info("images: %s: %u classes of %zu to %zu files each (labels in name order; "
                    "--label-map FILE writes them all)",
                    dir, g->n_classes, lo, hi);
}

// The class-to-label map the producer says in its hello (stoker/labels.h bounds it).
static int
label_map(images_gen *g)
{
    const char **names = malloc((g->n_classes ? g->n_classes : 1) * sizeof(*names));
    uint64_t *files = malloc((g->n_classes ? g->n_classes : 1) * sizeof(*files));
    int rv = STOKER_NOMEM;
    if (names != NULL && files != NULL) {
        for (uint32_t c = 0; c < g->n_classes; c++) {
            names[c] = g->classes[c].name;
            files[c] = g->classes[c].files;
        }
        rv = stoker_labels_build(&g->labels, g->n_classes, names, files, g->n_classes);
    }
    free(names);
    free(files);
    return rv;
}

// Encoded output's start-up lines: what the folder holds, and each file over the bound.
static void
log_encoded(const images_gen *g, const char *dir)
{
    const image *big = &g->images[g->largest];
    stoker_info("images: %s: %u classes, %zu files, %.1f MiB encoded, the largest %llu bytes "
                "('%s'); each example is a file's bytes as they are (headers checked)",
                dir, g->n_classes, g->n_images, g->encoded_bytes / 1048576.0,
                (unsigned long long)big->file_bytes, big->path);
    size_t over = 0;
    for (size_t i = 0; i < g->n_images; i++) {
        if (g->images[i].file_bytes <= file_limit(g))
            continue;
        over++;
        stoker_warn("images: '%s' is %llu bytes, over %s %llu bytes: refused each time it is "
                    "drawn (counted in the producer's refused)",
                    g->images[i].path, (unsigned long long)g->images[i].file_bytes,
                    g->max_file_bytes ? "the image field's bound (--max-file-bytes)"
                                      : "an example's limit",
                    (unsigned long long)file_limit(g));
    }
    if (over > 0)
        stoker_warn("images: %s: %zu of %zu files are over %llu bytes (each named above)", dir,
                    over, g->n_images, (unsigned long long)file_limit(g));
}

static int
images_fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    images_gen *g = user;
    (void)seq;
    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    size_t drawn = stoker_rng_u64(&rng) % g->n_images;
    if (g->output == IMAGES_ENCODED)
        return encoded_example(g, &rng, drawn, fields);
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
    if (g->output == IMAGES_ENCODED)
        return encoded_example(g, &rng, (size_t)index, fields);
    return make_example(g, &rng, (size_t)index, fields);
}

int
images_generator_open(const images_config *cfg, stoker_generator *out, char *err, size_t err_len)
{
    const char *dir = cfg->dir;
    if (dir == NULL || dir[0] == '\0') {
        return stoker_errorf(err, err_len, STOKER_INVALID, "images: no folder given");
    }
    const uint32_t h = cfg->height, w = cfg->width;
    if (h == 0 || h > IMAGES_MAX_SIZE || w == 0 || w > IMAGES_MAX_SIZE) {
        if (h == w)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "images: size %u is out of range (1..%u)", h, IMAGES_MAX_SIZE);
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: size %ux%u is out of range (1..%u a side)", h, w,
                             IMAGES_MAX_SIZE);
    }
    const bool encoded = cfg->output == IMAGES_ENCODED;
    if (encoded && cfg->max_file_bytes > IMAGES_MAX_FILE_BYTES)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "images: a file bound of %llu bytes is over an example's limit "
                             "(%llu)",
                             (unsigned long long)cfg->max_file_bytes,
                             (unsigned long long)IMAGES_MAX_FILE_BYTES);
    stoker_schema schema = {0};
    const uint32_t chw[3] = {3, h, w}, hwc[3] = {h, w, 3}, label_shape[1] = {1}, bytes[1] = {0};
    stoker_dtype image_dtype = cfg->output == IMAGES_FLOAT32 ? STOKER_FLOAT32 : STOKER_UINT8;
    bool label64 = cfg->label == IMAGES_LABEL_INT64;
    if (stoker_schema_add(&schema, "image", image_dtype, encoded ? 1 : 3,
                          encoded    ? bytes
                          : cfg->hwc ? hwc
                                     : chw) != STOKER_OK ||
        stoker_schema_add(&schema, "label", label64 ? STOKER_INT64 : STOKER_INT32, label64 ? 0 : 1,
                          label_shape) != STOKER_OK) {
        return stoker_errorf(err, err_len, STOKER_INTERNAL, "images: cannot build the schema");
    }
    if (encoded)
        schema.fields[0].max_rows = (uint32_t)cfg->max_file_bytes; // image:uint8[?<=N] or bytes

    images_gen *g = calloc(1, sizeof *g);
    if (g == NULL) {
        return stoker_errorf(err, err_len, STOKER_NOMEM, "images: out of memory");
    }
    g->out_h = h;
    g->out_w = w;
    g->decode_each = cfg->decode_each && !encoded;
    g->decode_when_used = cfg->decode_when_used && !g->decode_each && !encoded;
    g->output = cfg->output;
    g->max_file_bytes = encoded ? cfg->max_file_bytes : 0;
    g->hwc = cfg->hwc;
    g->jpeg_draft = cfg->jpeg_draft;
    g->label = cfg->label;
    g->strict = cfg->strict;
    int rv;
    if (encoded) {
        g->normalize = false; // nothing is decoded here: the consumer decodes and normalizes
    } else if (cfg->augment != NULL) {
        if ((rv = augment_parse(cfg->augment, &g->aug, err, err_len)) != STOKER_OK) {
            images_destroy(g);
            return rv;
        }
        g->normalize = augment_normalization(g->aug, g->mean, g->std);
    } else {
        g->normalize = true;
        memcpy(g->mean, MEAN, sizeof g->mean);
        memcpy(g->std, STD, sizeof g->std);
    }
    g->col0 = malloc(w * sizeof *g->col0);
    g->col1 = malloc(w * sizeof *g->col1);
    g->row0 = malloc(h * sizeof *g->row0);
    g->row1 = malloc(h * sizeof *g->row1);
    g->wx = malloc(w * sizeof *g->wx);
    g->wy = malloc(h * sizeof *g->wy);
    g->scratch = malloc((size_t)h * w * 3 * sizeof *g->scratch);
    if (!g->col0 || !g->col1 || !g->row0 || !g->row1 || !g->wx || !g->wy || !g->scratch) {
        stoker_errorf(err, err_len, STOKER_INVALID, "images: out of memory");
        images_destroy(g);
        return STOKER_NOMEM;
    }
    rv = load_tree(g, dir, err, err_len);
    if (rv != STOKER_OK) {
        images_destroy(g);
        return rv;
    }
    if (g->n_skipped > 0)
        stoker_warn("images: %s: %zu files could not be read and were skipped (each named above)",
                    dir, g->n_skipped);
    char reduced[96] = "";
    if (g->reduced_bytes > 0)
        snprintf(reduced, sizeof reduced, " (%.1f MiB of it JPEGs at reduced scales)",
                 g->reduced_bytes / 1048576.0);
    if (encoded)
        log_encoded(g, dir);
    else if (cfg->decode_each)
        stoker_info("images: %s: %u classes, %zu images (headers checked; each example reads "
                    "and decodes its file)",
                    dir, g->n_classes, g->n_images);
    else if (g->decode_when_used)
        stoker_info("images: %s: %u classes, %zu images (listed; each file read and decoded "
                    "when its first example is made, then held)",
                    dir, g->n_classes, g->n_images);
    else
        stoker_info("images: %s: %u classes, %zu images, %.1f MiB decoded%s", dir, g->n_classes,
                    g->n_images, g->decoded_bytes / 1048576.0, reduced);
    if (!cfg->quiet)
        log_classes(g, dir);
    if ((rv = label_map(g)) != STOKER_OK) {
        images_destroy(g);
        return stoker_errorf(err, err_len, rv, "images: out of memory");
    }
    if (g->output == IMAGES_UINT8 && g->normalize)
        stoker_info("images: uint8 output: normalize on the consumer with mean (%.4g, %.4g, %.4g) "
                    "std (%.4g, %.4g, %.4g) for x / 255",
                    g->mean[0], g->mean[1], g->mean[2], g->std[0], g->std[1], g->std[2]);

    out->kind = "images";
    out->schema = schema;
    out->fill = images_fill;
    out->user = g;
    out->destroy = images_destroy;
    out->n_items = 0; // a stream unless images_generator_dataset
    out->fingerprint = 0;
    out->fill_item = NULL;
    out->labels = &g->labels;
    return STOKER_OK;
}

int
images_generator_create(const char *dir, uint32_t size, bool decode_each, stoker_generator *out,
                        char *err, size_t err_len)
{
    images_config cfg;
    images_config_init(&cfg);
    cfg.dir = dir;
    cfg.height = cfg.width = size;
    cfg.decode_each = decode_each;
    cfg.label = IMAGES_LABEL_INT32;
    cfg.quiet = true;
    cfg.strict = true;
    return images_generator_open(&cfg, out, err, err_len);
}

size_t
images_generator_skipped(const stoker_generator *gen)
{
    const images_gen *g = gen->user;
    return g->n_bad;
}

size_t
images_generator_skipped_at_start(const stoker_generator *gen)
{
    const images_gen *g = gen->user;
    return g->n_skipped;
}

int
images_generator_dataset(stoker_generator *gen, char *err, size_t err_len)
{
    const images_gen *g = gen->user;
    for (size_t i = 0; g->output == IMAGES_ENCODED && i < g->n_images; i++) {
        const image *im = &g->images[i];
        if (im->file_bytes > file_limit(g))
            return stoker_errorf(
                err, err_len, STOKER_TOO_LARGE,
                "images: '%s' (item %zu) is %llu bytes, over %s %llu bytes, and a dataset "
                "item cannot be skipped: raise --max-file-bytes or move the file out",
                im->path, i, (unsigned long long)im->file_bytes,
                g->max_file_bytes ? "the image field's bound (--max-file-bytes)"
                                  : "an example's limit",
                (unsigned long long)file_limit(g));
    }
    gen->n_items = g->n_images;
    gen->fingerprint = g->listing ^ g->n_images;
    gen->fill_item = images_fill_item;
    return STOKER_OK;
}

bool
images_generator_normalization(const stoker_generator *gen, float mean[3], float std[3])
{
    const images_gen *g = gen->user;
    if (!g->normalize)
        return false;
    memcpy(mean, g->mean, sizeof g->mean);
    memcpy(std, g->std, sizeof g->std);
    return true;
}

uint32_t
images_generator_classes(const stoker_generator *gen)
{
    const images_gen *g = gen->user;
    return g->n_classes;
}

const char *
images_generator_class_name(const stoker_generator *gen, uint32_t i, size_t *files)
{
    const images_gen *g = gen->user;
    if (i >= g->n_classes)
        return NULL;
    if (files != NULL)
        *files = g->classes[i].files;
    return g->classes[i].name;
}

// Writes s as a JSON string (folder names may hold quotes or control bytes).
static void
json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

int
images_generator_write_label_map(const stoker_generator *gen, const char *path, char *err,
                                 size_t err_len)
{
    const images_gen *g = gen->user;
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        return stoker_errorf(err, err_len, STOKER_IO, "images: cannot write the label map '%s': %s",
                             path, strerror(errno));
    }
    fprintf(f, "{\"classes\": [");
    for (uint32_t c = 0; c < g->n_classes; c++) {
        fprintf(f, "%s\n  {\"label\": %u, \"name\": ", c ? "," : "", c);
        json_string(f, g->classes[c].name);
        fprintf(f, ", \"files\": %zu}", g->classes[c].files);
    }
    fprintf(f, "\n],\n\"normalize\": ");
    if (g->normalize)
        fprintf(f, "{\"mean\": [%.6g, %.6g, %.6g], \"std\": [%.6g, %.6g, %.6g]}", g->mean[0],
                g->mean[1], g->mean[2], g->std[0], g->std[1], g->std[2]);
    else
        fprintf(f, "null");
    fprintf(f, "}\n");
    if (fclose(f) != 0) {
        return stoker_errorf(err, err_len, STOKER_IO, "images: cannot write the label map '%s'",
                             path);
    }
    return STOKER_OK;
}
