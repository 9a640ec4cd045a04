// Strict parsing of command-line values, shared by every executable.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/opts.h"

int
stoker_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s == '\0' || *s == '-' || *s == ' ')
        return STOKER_INVALID;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return STOKER_INVALID;
    *out = v;
    return STOKER_OK;
}

int
stoker_parse_double(const char *s, double min, double max, double *out)
{
    if (s == NULL || *s == '\0' || *s == ' ')
        return STOKER_INVALID;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < min || v > max)
        return STOKER_INVALID;
    *out = v;
    return STOKER_OK;
}

int
stoker_parse_range(const char *s, double max, double *lo, double *hi)
{
    char buf[128];
    if (s == NULL || strlen(s) >= sizeof(buf))
        return STOKER_INVALID;
    strcpy(buf, s);
    char *colon = strchr(buf, ':');
    double a, b;
    if (colon == NULL) {
        if (stoker_parse_double(buf, 0, max, &a) != STOKER_OK)
            return STOKER_INVALID;
        b = a;
    } else {
        *colon = '\0';
        if (stoker_parse_double(buf, 0, max, &a) != STOKER_OK ||
            stoker_parse_double(colon + 1, 0, max, &b) != STOKER_OK || a > b)
            return STOKER_INVALID;
    }
    *lo = a;
    *hi = b;
    return STOKER_OK;
}

int
stoker_read_token_file(const char *path, char *buf, size_t cap, char *err, size_t err_len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, err_len, "cannot read token file '%s': %s", path, strerror(errno));
        return STOKER_IO;
    }
    char line[1024];
    if (fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    fclose(f);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                     line[n - 1] == '\t'))
        line[--n] = '\0';
    if (n == 0 || n >= cap) {
        snprintf(err, err_len, "token file '%s': token empty or longer than %zu bytes", path,
                 cap - 1);
        return STOKER_INVALID;
    }
    memcpy(buf, line, n + 1);
    return STOKER_OK;
}
