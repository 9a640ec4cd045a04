// Mixtures of sources (stoker/mix.h): their text form, their checks and the quota rule.
#include "stoker/mix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"

// Checks source i of mix against the rules of stoker_mix_parse (zero: a weight of 0 allowed, as
// in a schedule's points).
static int
check_source(const stoker_mix *mix, uint32_t i, int zero, char *err, size_t err_len)
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
    if (!isfinite(w) || w < 0.0 || (w == 0.0 && !zero))
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "mix: pool '%s' has weight %g; weights are positive numbers", name, w);
    return STOKER_OK;
}

// Checks point k of mix's schedule.
static int
check_point(const stoker_mix *mix, uint32_t k, char *err, size_t err_len)
{
    if (mix->at[k] == 0 || (k > 0 && mix->at[k] <= mix->at[k - 1]))
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "mix schedule: point %u at step %llu: steps start at 1 and increase",
                             k + 1, (unsigned long long)mix->at[k]);
    double sum = 0.0;
    for (uint32_t s = 0; s < mix->n; s++) {
        double w = mix->at_weights[k][s];
        if (!isfinite(w) || w < 0.0)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "mix schedule: at step %llu pool '%s' has weight %g; weights "
                                 "are numbers >= 0",
                                 (unsigned long long)mix->at[k], mix->names[s], w);
        sum += w;
    }
    if (sum <= 0.0)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "mix schedule: at step %llu every weight is 0",
                             (unsigned long long)mix->at[k]);
    return STOKER_OK;
}

int
stoker_mix_check(const stoker_mix *mix, char *err, size_t err_len)
{
    if (mix->n_points > STOKER_MIX_POINTS || mix->blend > STOKER_MIX_BLEND_LINEAR ||
        (mix->n_points > 0 && mix->n == 0))
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "mix schedule: %u points (at most %d, with a mixture) blended %u "
                             "(step or linear)",
                             mix->n_points, STOKER_MIX_POINTS, mix->blend);
    for (uint32_t k = 0; k < mix->n_points; k++) {
        int rv = check_point(mix, k, err, err_len);
        if (rv != STOKER_OK)
            return rv;
    }
    if (mix->n > STOKER_MIX_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID, "mix: %u sources, at most %d", mix->n,
                             STOKER_MIX_MAX);
    if (mix->stop > STOKER_MIX_STOP_ALL)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "mix: unknown stop rule %u (first or all)", mix->stop);
    for (uint32_t i = 0; i < mix->n; i++) {
        int rv = check_source(mix, i, 0, err, err_len);
        if (rv != STOKER_OK)
            return rv;
    }
    return STOKER_OK;
}

// Parses spec's pool=weight pairs into out's names and weights (zero: weights of 0 allowed).
static int
parse_pairs(const char *spec, stoker_mix *out, int zero, char *err, size_t err_len)
{
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
        int rv = check_source(out, out->n, zero, err, err_len);
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
stoker_mix_parse(const char *spec, stoker_mix *out, char *err, size_t err_len)
{
    uint32_t stop = out->stop;
    memset(out, 0, sizeof(*out));
    out->stop = stop;
    return parse_pairs(spec, out, 0, err, err_len);
}

int
stoker_mix_schedule_parse(const char *spec, stoker_mix *mix, char *err, size_t err_len)
{
    mix->n_points = 0;
    const char *p = spec != NULL ? spec : "";
    while (*p != '\0') {
        size_t len = strcspn(p, ";");
        char point[1024];
        if (len >= sizeof(point) || mix->n_points == STOKER_MIX_POINTS)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "mix schedule '%s': at most %d points of at most %zu bytes", spec,
                                 STOKER_MIX_POINTS, sizeof(point) - 1);
        memcpy(point, p, len);
        point[len] = '\0';
        char *colon = strchr(point, ':'), *end = NULL;
        unsigned long long at = colon != NULL ? strtoull(point, &end, 10) : 0;
        if (colon == NULL || end != colon || point[0] == '-')
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "mix schedule '%s': '%s' is not STEP:pool=weight,... (e.g. "
                                 "1000:code=0.5,web=0.5)",
                                 spec, point);
        stoker_mix w = {0};
        int rv = parse_pairs(colon + 1, &w, 1, err, err_len);
        if (rv != STOKER_OK)
            return rv;
        uint32_t k = mix->n_points;
        mix->at[k] = at;
        for (uint32_t s = 0; s < mix->n; s++) {
            uint32_t i = 0;
            while (i < w.n && strcmp(w.names[i], mix->names[s]) != 0)
                i++;
            if (i == w.n || w.n != mix->n)
                return stoker_errorf(err, err_len, STOKER_INVALID,
                                     "mix schedule: the point at step %llu names %u pools; it "
                                     "names each of the mixture's %u (pool '%s' missing or one "
                                     "too many)",
                                     at, w.n, mix->n, mix->names[s]);
            mix->at_weights[k][s] = w.weights[i];
        }
        mix->n_points++;
        if ((rv = check_point(mix, k, err, err_len)) != STOKER_OK)
            return rv;
        p += len;
        if (*p == ';' && *++p == '\0')
            return stoker_errorf(err, err_len, STOKER_INVALID, "mix schedule '%s' ends with ';'",
                                 spec);
    }
    return STOKER_OK;
}

int
stoker_mix_blend_parse(const char *text, uint32_t *blend, char *err, size_t err_len)
{
    if (text == NULL || text[0] == '\0' || strcmp(text, "step") == 0) {
        *blend = STOKER_MIX_BLEND_STEP;
        return STOKER_OK;
    }
    if (strcmp(text, "linear") == 0) {
        *blend = STOKER_MIX_BLEND_LINEAR;
        return STOKER_OK;
    }
    return stoker_errorf(err, err_len, STOKER_INVALID,
                         "mix blend '%s': step (a point's weights hold until the next) or linear "
                         "(from point to point)",
                         text);
}

void
stoker_mix_weights_at(const stoker_mix *mix, uint64_t step, double *w)
{
    uint32_t k = 0;
    while (k < mix->n_points && mix->at[k] <= step)
        k++;
    // k points at or before step: the last of them holds (step), or leads to the next (linear).
    const double *from = k == 0 ? mix->weights : mix->at_weights[k - 1];
    uint64_t from_at = k == 0 ? 0 : mix->at[k - 1];
    for (uint32_t s = 0; s < mix->n; s++)
        w[s] = from[s];
    if (mix->blend != STOKER_MIX_BLEND_LINEAR || k == mix->n_points)
        return;
    double t = (double)(step - from_at) / (double)(mix->at[k] - from_at);
    // Blend shares, not raw weights: the points' weights may sum differently.
    double sum_from = 0.0, sum_to = 0.0;
    for (uint32_t s = 0; s < mix->n; s++) {
        sum_from += from[s];
        sum_to += mix->at_weights[k][s];
    }
    for (uint32_t s = 0; s < mix->n; s++)
        w[s] = (1.0 - t) * from[s] / sum_from + t * mix->at_weights[k][s] / sum_to;
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
    if (a->n != b->n || a->stop != b->stop || a->n_points != b->n_points || a->blend != b->blend)
        return 0;
    for (uint32_t k = 0; k < a->n_points; k++)
        if (a->at[k] != b->at[k] ||
            memcmp(a->at_weights[k], b->at_weights[k], a->n * sizeof(double)) != 0)
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
