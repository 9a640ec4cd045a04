// Text for people and programs: a growing string with printf-style appends, and the one JSON
// string escaper of the code base (every JSON writer uses it: the status renderings, the
// trainer's summary). It does not parse JSON.
#ifndef STOKER_TEXT_H
#define STOKER_TEXT_H

#include <stddef.h>
#include <stdio.h>

// A growing, NUL-terminated string. Zero-initialise it ({0}); an allocation failure marks it
// failed, after which appends do nothing and stoker_text_finish returns NULL.
typedef struct stoker_text {
    char *s;
    size_t len, cap;
    int failed;
} stoker_text;

// Appends printf-style.
void stoker_text_printf(stoker_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Appends s as a JSON string: in double quotes, with quotes, backslashes and control characters
// (below 0x20, and 0x7f) escaped; other bytes pass unchanged.
void stoker_text_json_string(stoker_text *t, const char *s);
// Returns the string (malloc'd, the caller frees; "" when nothing was appended), or NULL when an
// allocation failed (then everything was freed).
char *stoker_text_finish(stoker_text *t);

// Writes s to f as a JSON string (the same escaping as stoker_text_json_string). Returns 0, or
// EOF when the write (or an allocation) failed.
int stoker_text_fput_json(const char *s, FILE *f);

#endif
