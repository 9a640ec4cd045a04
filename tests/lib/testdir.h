// The test's temporary directory and the files in it, shared by the C test suites: a fresh
// directory per test, paths and ipc:// URLs inside it (never fixed TCP ports), and small file
// helpers. Failures go to proc.h's failure hook. Processes: proc.h.
#ifndef TESTS_LIB_TESTDIR_H
#define TESTS_LIB_TESTDIR_H

#include <stddef.h>

// Makes /tmp/PREFIX-XXXXXX, the current test directory. Fails on error.
void testdir_create(const char *prefix);
// Removes the directory and the files in it (one level), unless STOKER_TEST_KEEP is set.
void testdir_remove(void);
// The current test directory ("" before testdir_create).
const char *testdir_path(void);
// DIR/name (a static buffer, one of 16 in rotation).
const char *testdir_file(const char *name);
// ipc://DIR/name.sock, written to url.
void testdir_ipc_url(char *url, size_t len, const char *name);

// Writes text to DIR/name; returns the path (as testdir_file).
const char *testdir_write(const char *name, const char *text);
// The whole file (NUL-terminated, owned by the caller; its length in *len when len != NULL),
// or NULL when it cannot be read.
char *testdir_read(const char *path, size_t *len);
// 1 if the file at path contains needle.
int testdir_contains(const char *path, const char *needle);
// 1 when the file exists.
int testdir_exists(const char *path);

#endif
