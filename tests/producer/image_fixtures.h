// The temporary folder the images tests write their image files into (test_images.c,
// test_images_decode_each.c, test_images_output.c): making it, paths inside it, class
// subfolders, PNG files from pixels, removing it with everything below. Names start with img_.
// The pixel patterns, and JPEG and WebP files, stay in each test: what the pixels are is what its
// assertions check. Failures fail the test (criterion's cr_assert).
#ifndef TESTS_PRODUCER_IMAGE_FIXTURES_H
#define TESTS_PRODUCER_IMAGE_FIXTURES_H

#include <stdint.h>

// The folder, "/tmp/<prefix>-XXXXXX" once made; empty before.
extern char img_root[64];

// Makes a fresh img_root named after prefix (mkdtemp); call from a suite's .init.
void img_root_make(const char *prefix);
// Removes img_root and everything below it; call from a suite's .fini.
void img_root_remove(void);
// img_root/rel, in one of four rotating static buffers (valid until the fourth next call).
char *img_path_in(const char *rel);
// Makes the folder img_root/rel (its parent must exist).
void img_make_dir(const char *rel);
// What the library logged at WARN and above since img_capture_log (lines, each ending in a
// newline, until it fills), for assertions on what is reported.
extern char img_logged[16384];
// Starts capturing the log into img_logged (emptied); img_release_log gives the log back.
void img_capture_log(void);
void img_release_log(void);
// Writes pixels (h rows of w pixels in libpng's format, PNG_FORMAT_RGB, _GRAY, ...) as the PNG
// file img_root/rel.
void img_write_png(const char *rel, const uint8_t *pixels, uint32_t w, uint32_t h, uint32_t format);

#endif
