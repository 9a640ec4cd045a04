// Growing strings and JSON string escaping (see text.h).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "stoker/text.h"

static void
vappend(stoker_text *t, const char *fmt, va_list ap0)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_copy(ap, ap0);
        // Before the first allocation s is NULL: no arithmetic on it (undefined behaviour).
        int n = vsnprintf(t->s != NULL ? t->s + t->len : NULL, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *s = realloc(t->s, cap);
        if (s == NULL) {
            t->failed = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

void
stoker_text_printf(stoker_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vappend(t, fmt, ap);
    va_end(ap);
}

void
stoker_text_json_string(stoker_text *t, const char *s)
{
    stoker_text_printf(t, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            stoker_text_printf(t, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            stoker_text_printf(t, "\\u%04x", *p);
        else
            stoker_text_printf(t, "%c", *p);
    }
    stoker_text_printf(t, "\"");
}

char *
stoker_text_finish(stoker_text *t)
{
    if (t->failed) {
        free(t->s);
        t->s = NULL;
        return NULL;
    }
    if (t->s == NULL)
        stoker_text_printf(t, "%s", "");
    return t->failed ? NULL : t->s;
}

int
stoker_text_fput_json(const char *s, FILE *f)
{
    stoker_text t = {0};
    stoker_text_json_string(&t, s);
    char *q = stoker_text_finish(&t);
    int rv = q != NULL ? fputs(q, f) : EOF;
    free(q);
    return rv == EOF ? EOF : 0;
}
