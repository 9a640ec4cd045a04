// A replay driver for the broker fuzz target without libFuzzer: runs every input named on the
// command line (files, or folders whose regular files are each an input; names starting with '.'
// and *.md notes are skipped) once through LLVMFuzzerTestOneInput, as `fuzz_broker -runs=0`
// would. Built with the project's compiler in every build (fuzz/meson.build), so the harness
// and its seeds are exercised even where clang is missing. It does not fuzz.
// Usage: fuzz_replay PATH...   exits 0 after replaying at least one input, 1 on a read error or
// when nothing was found; a broken invariant aborts inside the harness.
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// Reads path whole into a new buffer (*out, caller frees; NULL with *len 0 for an empty file).
// Returns 0, or -1 with the reason printed.
static int
read_whole(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "fuzz_replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = NULL;
    size_t used = 0, cap = 0;
    for (;;) {
        if (used == cap) {
            size_t ncap = cap ? 2 * cap : 4096;
            uint8_t *nbuf = realloc(buf, ncap);
            if (nbuf == NULL) {
                fprintf(stderr, "fuzz_replay: out of memory reading %s\n", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nbuf;
            cap = ncap;
        }
        size_t got = fread(buf + used, 1, cap - used, f);
        used += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        free(buf);
        return -1;
    }
    *out = buf;
    *len = used;
    return 0;
}

static int
replay_file(const char *path, int *count)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (read_whole(path, &buf, &len) != 0)
        return -1;
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    (*count)++;
    return 0;
}

static int
skipped(const char *name)
{
    size_t n = strlen(name);
    return name[0] == '.' || (n >= 3 && strcmp(name + n - 3, ".md") == 0);
}

static int
replay_path(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return replay_file(path, count);
    DIR *d = opendir(path);
    if (d == NULL) {
        fprintf(stderr, "fuzz_replay: cannot list %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rv = 0;
    struct dirent *e;
    while (rv == 0 && (e = readdir(d)) != NULL) {
        if (skipped(e->d_name))
            continue;
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        rv = replay_file(full, count);
    }
    closedir(d);
    return rv;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_replay PATH...  (files, or folders of inputs)\n");
        return 2;
    }
    int count = 0;
    for (int i = 1; i < argc; i++) {
        int before = count;
        if (replay_path(argv[i], &count) != 0)
            return 1;
        printf("fuzz_replay: %s: %d inputs passed\n", argv[i], count - before);
    }
    if (count == 0) {
        fprintf(stderr, "fuzz_replay: no inputs found in the paths given\n");
        return 1;
    }
    printf("fuzz_replay: %d inputs passed\n", count);
    return 0;
}
