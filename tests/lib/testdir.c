// See testdir.h. One directory per test process (criterion runs each test in its own process).
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "testdir.h"

static char dir[64];

void
testdir_create(const char *prefix)
{
    snprintf(dir, sizeof(dir), "/tmp/%s-XXXXXX", prefix);
    if (mkdtemp(dir) == NULL) {
        int e = errno;
        dir[0] = '\0';
        proc_fail("mkdtemp: %s", strerror(e));
    }
}

void
testdir_remove(void)
{
    if (dir[0] == '\0')
        return;
    if (getenv("STOKER_TEST_KEEP") != NULL) {
        fprintf(stderr, "tests: kept %s (STOKER_TEST_KEEP)\n", dir);
        dir[0] = '\0';
        return;
    }
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        char file[512];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
            unlink(file);
        }
        closedir(d);
    }
    rmdir(dir);
    dir[0] = '\0';
}

const char *
testdir_path(void)
{
    return dir;
}

const char *
testdir_file(const char *name)
{
    static char bufs[16][320];
    static int next;
    char *b = bufs[next++ % 16];
    snprintf(b, sizeof(bufs[0]), "%s/%s", dir, name);
    return b;
}

void
testdir_ipc_url(char *url, size_t len, const char *name)
{
    snprintf(url, len, "ipc://%s/%s.sock", dir, name);
}

const char *
testdir_write(const char *name, const char *text)
{
    const char *path = testdir_file(name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        proc_fail("%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
    return path;
}

char *
testdir_read(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        proc_fail("out of memory reading %s", path);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            char *more = realloc(buf, cap);
            if (more == NULL)
                proc_fail("out of memory reading %s", path);
            buf = more;
        }
    }
    fclose(f);
    buf[len] = '\0';
    if (len_out != NULL)
        *len_out = len;
    return buf;
}

int
testdir_contains(const char *path, const char *needle)
{
    char *text = testdir_read(path, NULL);
    int found = text != NULL && strstr(text, needle) != NULL;
    free(text);
    return found;
}

int
testdir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}
