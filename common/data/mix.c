// Mixtures of sources (stoker/mix.h): their text form, their checks and the quota rule.
#include "stoker/mix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"

// Checks source i of mix against the rules of stoker_mix_parse.
static int
check_source(const stoker_mix *mix, uint32_t i, char *err, size_t err_len)
{
    const char *name = mix->names[i];
    if (name[0] == '\0')
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "mix: source %u has an empty pool name (give pool=weight pairs, "
                             "e.g. code=0.3,web=0.7)",
                             i + 1);
    for (uint32_t k = 0; k < i; k++)
        if (strcmp(mix->names[k], name) == 0)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "mix: pool '%s' named twice (each source once)", name);
    double w = mix->weights[i];
    if (!isfinite(w) || w <= 0.0)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "mix: pool '%s' has weight %g; weights are positive numbers", name, w);
    return STOKER_OK;
}

int
stoker_mix_check(const stoker_mix *mix, char *err, size_t err_len)
{
    if (mix->n > STOKER_MIX_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID, "mix: %u sources, at most %d",
                             mix->n, STOKER_MIX_MAX);
    if (mix->stop > STOKER_MIX_STOP_ALL)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "mix: unknown stop rule %u (first or all)", mix->stop);
    for (uint32_t i = 0; i < mix->n; i++) {
        int rv = check_source(mix, i, err, err_len);
        if (rv != STOKER_OK)
            return rv;
    }
    return STOKER_OK;
}

int
stoker_mix_parse(const char *spec, stoker_mix *out, char *err, size_t err_len)
{
    uint32_t stop = out->stop;
    memset(out, 0, sizeof(*out));
    out->stop = stop;
    const char *p = spec != NULL ? spec : "";
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        if (out->n == STOKER_MIX_MAX)
            return stoker_errorf(err, err_len, STOKER_INVALID, "mix '%s': more than %d sources",
                                 spec, STOKER_MIX_MAX);
        const char *eq = memchr(p, '=', len);
        if (eq == NULL)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "mix '%s': '%.*s' is not pool=weight (e.g. code=0.3,web=0.7)",
                                 spec, (int)len, p);
        size_t name_len = (size_t)(eq - p);
        if (name_len >= STOKER_NAME_MAX)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "mix '%s': pool name '%.*s' longer than %d bytes", spec,
                                 (int)name_len, p, STOKER_NAME_MAX - 1);
        memcpy(out->names[out->n], p, name_len);
        out->names[out->n][name_len] = '\0';
        char weight[64];
        size_t w_len = len - name_len - 1;
        snprintf(weight, sizeof(weight), "%.*s", (int)(w_len < 63 ? w_len : 63), eq + 1);
        char *end = NULL;
        double w = strtod(weight, &end);
        if (w_len == 0 || w_len >= sizeof(weight) || end == NULL || *end != '\0')
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "mix '%s': weight '%.*s' of pool '%s' is not a number", spec,
                                 (int)w_len, eq + 1, out->names[out->n]);
        out->weights[out->n] = w;
        int rv = check_source(out, out->n, err, err_len);
        if (rv != STOKER_OK)
            return rv;
        out->n++;
        p += len;
        if (*p == ',' && *++p == '\0')
            return stoker_errorf(err, err_len, STOKER_INVALID, "mix '%s' ends with ','", spec);
    }
    return STOKER_OK;
}

int
stoker_mix_stop_parse(const char *text, uint32_t *stop, char *err, size_t err_len)
{
    if (text == NULL || text[0] == '\0' || strcmp(text, "first") == 0) {
        *stop = STOKER_MIX_STOP_FIRST;
        return STOKER_OK;
    }
    if (strcmp(text, "all") == 0) {
        *stop = STOKER_MIX_STOP_ALL;
        return STOKER_OK;
    }
    return stoker_errorf(err, err_len, STOKER_INVALID,
                         "mix stop '%s': first (end with the first source that runs dry) or "
                         "all (go on re-weighted until every source ran dry)",
                         text);
}

const char *
stoker_mix_stop_name(uint32_t stop)
{
    return stop == STOKER_MIX_STOP_ALL ? "all" : "first";
}

void
stoker_mix_format(const stoker_mix *mix, char *buf, size_t len)
{
    size_t at = 0;
    if (len > 0)
        buf[0] = '\0';
    for (uint32_t i = 0; i < mix->n && at < len; i++) {
        int w = snprintf(buf + at, len - at, "%s%s=%g", i > 0 ? "," : "", mix->names[i],
                         mix->weights[i]);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

int
stoker_mix_equal(const stoker_mix *a, const stoker_mix *b)
{
    if (a->n != b->n || a->stop != b->stop)
        return 0;
    for (uint32_t i = 0; i < a->n; i++)
        if (strcmp(a->names[i], b->names[i]) != 0 || a->weights[i] != b->weights[i])
            return 0;
    return 1;
}

void
stoker_mix_counts(uint32_t n_sources, const double *owed, uint32_t n, uint32_t *counts)
{
    // Floors first (a source owed less than nothing gets nothing), then the rest of n to the
    // largest fractional parts. A hair of slack keeps a value computed as 2.9999999 a 3.
    const double slack = 1e-9;
    double frac[STOKER_MIX_MAX];
    uint64_t given = 0;
    for (uint32_t s = 0; s < n_sources; s++) {
        double o = owed[s] > 0.0 ? owed[s] + slack : 0.0;
        double f = floor(o);
        if (given + (uint64_t)f > n)
            f = (double)(n - given); // never more than n in all, whatever rounding did
        counts[s] = (uint32_t)f;
        frac[s] = o - f;
        given += counts[s];
    }
    while (given < n && n_sources > 0) {
        uint32_t best = 0;
        for (uint32_t s = 1; s < n_sources; s++)
            if (frac[s] > frac[best])
                best = s;
        counts[best]++;
        frac[best] -= 1.0; // one each before any gets a second
        given++;
    }
}
