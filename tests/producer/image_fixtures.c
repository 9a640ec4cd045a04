// The images tests' temporary folder (see image_fixtures.h).
#include "image_fixtures.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <png.h>

#include "stoker/log.h"

char img_root[64];
char img_logged[16384];

static void
capture(stoker_log_level level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    size_t n = strlen(img_logged);
    snprintf(img_logged + n, sizeof img_logged - n, "%s\n", line);
}

void
img_capture_log(void)
{
    img_logged[0] = '\0';
    stoker_log_set_level(STOKER_LOG_WARN);
    stoker_log_set_sink(capture, NULL);
}

void
img_release_log(void)
{
    stoker_log_set_sink(NULL, NULL);
}

static int
remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void
img_root_make(const char *prefix)
{
    snprintf(img_root, sizeof img_root, "/tmp/%s-XXXXXX", prefix);
    cr_assert_not_null(mkdtemp(img_root), "mkdtemp %s", img_root);
}

void
img_root_remove(void)
{
    nftw(img_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

char *
img_path_in(const char *rel)
{
    static char buf[4][256];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", img_root, rel);
    return p;
}

void
img_make_dir(const char *rel)
{
    cr_assert_eq(mkdir(img_path_in(rel), 0755), 0, "mkdir %s", rel);
}

void
img_write_png(const char *rel, const uint8_t *pixels, uint32_t w, uint32_t h, uint32_t format)
{
    png_image png;
    memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    png.width = w;
    png.height = h;
    png.format = format;
    cr_assert(png_image_write_to_file(&png, img_path_in(rel), 0, pixels, 0, NULL), "png %s: %s",
              rel, png.message);
}
