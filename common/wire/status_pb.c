// The Status reply's pieces (status_pb.h): groups, label maps, consumers, jobs and the autoscale
// signal to and from their protobuf messages, for the request and reply codecs. Everything from
// the peer is bounded before it is allocated for.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "status_pb.h"
#include "stoker/error.h"

#define COPY_FIELD(f) d->f = s->f;

// n messages of desc's type, initialised, behind the array of pointers to them that a repeated
// field holds: one allocation (free the pointers). NULL when n is 0 or out of memory.
void *
wire_pb_repeated(const ProtobufCMessageDescriptor *desc, size_t n)
{
    if (n == 0)
        return NULL;
    size_t head = n * sizeof(void *);
    head += (_Alignof(max_align_t) - head % _Alignof(max_align_t)) % _Alignof(max_align_t);
    void **ptrs = malloc(head + n * desc->sizeof_message);
    if (ptrs == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = (char *)ptrs + head + i * desc->sizeof_message;
        protobuf_c_message_init(desc, ptrs[i]);
    }
    return ptrs;
}

static const char *const group_states[] = {"open", "ended", "broken"};

uint32_t
wire_group_state_code(const char *state)
{
    for (uint32_t i = 0; i < 3; i++)
        if (state != NULL && strcmp(state, group_states[i]) == 0)
            return i;
    return 0;
}

const char *
wire_group_state_name(uint32_t code)
{
    return code < 3 ? group_states[code] : "unknown";
}

// The listed names of l as pointers, for a repeated string field: malloc'd (the caller frees),
// NULL when none are listed or out of memory (tell them apart by l->n_listed).
char **
wire_label_name_ptrs(const stoker_labels *l)
{
    if (l->n_listed == 0)
        return NULL;
    char **ptrs = malloc(l->n_listed * sizeof(*ptrs));
    if (ptrs == NULL)
        return NULL;
    char *name = l->names;
    for (uint32_t i = 0; i < l->n_listed; i++) {
        ptrs[i] = name;
        name += strlen(name) + 1;
    }
    return ptrs;
}

// A peer's map (classes, then names and file counts of the first classes) into *out, within
// the bounds of stoker/labels.h (extra names are dropped, not refused).
int
wire_labels_from_pb(stoker_labels *out, uint32_t classes, size_t n_names, char **names,
                    size_t n_files, const uint64_t *files, const char *what, char *err,
                    size_t err_len)
{
    if (n_names != n_files || n_names > classes)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "%s: %zu class names and %zu file counts for %u classes", what,
                             n_names, n_files, classes);
    for (size_t i = 0; i < n_names; i++)
        if (names[i] == NULL)
            return stoker_errorf(err, err_len, STOKER_INVALID, "%s: a class without a name", what);
    uint32_t n =
        n_names > STOKER_LABELS_MAX_CLASSES ? STOKER_LABELS_MAX_CLASSES : (uint32_t)n_names;
    if (stoker_labels_build(out, classes, (const char *const *)names, files, n) != STOKER_OK)
        return stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", what);
    return STOKER_OK;
}

// Frees what wire_label_maps_to_pb set in r.
void
wire_label_maps_pb_free(Stoker__Reply *r)
{
    for (size_t i = 0; r->label_maps != NULL && i < r->n_label_maps; i++)
        free(r->label_maps[i]->names);
    free(r->label_maps);
}

// The reply's label maps as r's LabelMap messages (free with wire_label_maps_pb_free, also after a
// failure). STOKER_OK or STOKER_NOMEM.
int
wire_label_maps_to_pb(const stoker_reply *rep, Stoker__Reply *r)
{
    Stoker__LabelMap **maps = wire_pb_repeated(&stoker__label_map__descriptor, rep->n_label_maps);
    if (maps == NULL && rep->n_label_maps > 0)
        return STOKER_NOMEM;
    r->n_label_maps = rep->n_label_maps;
    r->label_maps = maps;
    r->label_maps_omitted = rep->label_maps_omitted;
    for (uint32_t i = 0; i < rep->n_label_maps; i++) {
        const stoker_label_map *s = &rep->label_maps[i];
        Stoker__LabelMap *m = maps[i];
        m->n_producers = s->n_producers;
        m->producers = s->producers;
        m->classes = s->labels.n_classes;
        m->n_names = m->n_files = s->labels.n_listed;
        m->names = wire_label_name_ptrs(&s->labels);
        m->files = s->labels.files;
        if (m->names == NULL && m->n_names > 0)
            return STOKER_NOMEM;
    }
    return STOKER_OK;
}

int
wire_label_maps_from_pb(Stoker__LabelMap *const *pb, size_t n, stoker_reply *rep, char *err,
                        size_t err_len)
{
    if (n > STOKER_LABEL_MAPS_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "reply lists %zu label maps (at most %d)", n, STOKER_LABEL_MAPS_MAX);
    if (n == 0)
        return STOKER_OK;
    rep->label_maps = calloc(n, sizeof(*rep->label_maps));
    if (rep->label_maps == NULL)
        return STOKER_NOMEM;
    for (size_t i = 0; i < n; i++) {
        stoker_label_map *d = &rep->label_maps[i];
        rep->n_label_maps = (uint32_t)i + 1; // freed with the reply from here on
        if (pb[i]->n_producers > MAX_PRODUCERS)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "reply: a label map of %zu producers", pb[i]->n_producers);
        d->producers = malloc((pb[i]->n_producers ? pb[i]->n_producers : 1) * sizeof(uint32_t));
        if (d->producers == NULL)
            return STOKER_NOMEM;
        memcpy(d->producers, pb[i]->producers, pb[i]->n_producers * sizeof(uint32_t));
        d->n_producers = (uint32_t)pb[i]->n_producers;
        int rv =
            wire_labels_from_pb(&d->labels, pb[i]->classes, pb[i]->n_names, pb[i]->names,
                                pb[i]->n_files, pb[i]->files, "reply: label map", err, err_len);
        if (rv != STOKER_OK)
            return rv;
    }
    return STOKER_OK;
}

// A consumer's mixture into d (its shares one allocation of messages: wire_pb_repeated).
static int
mix_to_pb(const stoker_consumer_info *s, Stoker__ConsumerState *d)
{
    d->mix_waits_for = s->mix_waits_for >= 0 ? (uint32_t)s->mix_waits_for + 1 : 0;
    d->mix_stop = s->mix_stop;
    if (s->n_mix == 0)
        return STOKER_OK;
    Stoker__MixShare **ms = wire_pb_repeated(&stoker__mix_share__descriptor, s->n_mix);
    if (ms == NULL)
        return STOKER_NOMEM;
    for (uint32_t k = 0; k < s->n_mix; k++) {
        ms[k]->pool = (char *)s->mix[k].pool;
        ms[k]->share = s->mix[k].share;
        ms[k]->delivered = s->mix[k].delivered;
        ms[k]->dry = s->mix[k].dry != 0;
    }
    d->n_mix = s->n_mix;
    d->mix = ms;
    return STOKER_OK;
}

// A ConsumerState's mixture into d, checked.
static int
mix_from_pb(const Stoker__ConsumerState *s, stoker_consumer_info *d, char *err, size_t err_len)
{
    if (s->n_mix > STOKER_MIX_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "reply: a consumer's mixture of %zu sources, at most %d", s->n_mix,
                             STOKER_MIX_MAX);
    for (size_t k = 0; k < s->n_mix; k++) {
        const Stoker__MixShare *m = s->mix[k];
        snprintf(d->mix[k].pool, sizeof(d->mix[k].pool), "%s", m->pool != NULL ? m->pool : "");
        d->mix[k].share = m->share;
        d->mix[k].delivered = m->delivered;
        d->mix[k].dry = m->dry;
    }
    d->n_mix = (uint32_t)s->n_mix;
    d->mix_waits_for =
        s->mix_waits_for > 0 && s->mix_waits_for <= s->n_mix ? (int32_t)s->mix_waits_for - 1 : -1;
    d->mix_stop = s->mix_stop <= STOKER_MIX_STOP_ALL ? s->mix_stop : STOKER_MIX_STOP_FIRST;
    return STOKER_OK;
}

// The reply's consumers as r's ConsumerState messages (free r->consumers). STOKER_NOMEM.
int
wire_consumers_to_pb(const stoker_reply *rep, Stoker__Reply *r)
{
    Stoker__ConsumerState **ds =
        wire_pb_repeated(&stoker__consumer_state__descriptor, rep->n_consumers);
    if (ds == NULL && rep->n_consumers > 0)
        return STOKER_NOMEM;
    r->n_consumers = rep->n_consumers; // from here on freed by wire_consumers_pb_free
    r->consumers = ds;
    for (uint32_t i = 0; i < rep->n_consumers; i++) {
        const stoker_consumer_info *s = &rep->consumers[i];
        Stoker__ConsumerState *d = ds[i];
        CONSUMER_FIELDS(COPY_FIELD)
        d->name = (char *)s->name;
        d->connected = s->connected != 0;
        d->delivery = (uint32_t)s->delivery;
        d->job = (char *)s->job;
        if (mix_to_pb(s, d) != STOKER_OK)
            return STOKER_NOMEM; // the caller frees what was made (wire_consumers_pb_free)
    }
    return STOKER_OK;
}

void
wire_consumers_pb_free(Stoker__Reply *r)
{
    for (size_t i = 0; r->consumers != NULL && i < r->n_consumers; i++)
        free(r->consumers[i]->mix);
    free(r->consumers);
    r->consumers = NULL;
    r->n_consumers = 0;
}

int
wire_consumers_from_pb(const Stoker__Reply *r, stoker_reply *rep, char *err, size_t err_len)
{
    if (r->n_consumers == 0)
        return STOKER_OK;
    if (r->n_consumers > MAX_PRODUCERS)
        return stoker_errorf(err, err_len, STOKER_INVALID, "reply lists %zu consumers, at most %d",
                             r->n_consumers, MAX_PRODUCERS);
    rep->consumers = calloc(r->n_consumers, sizeof(*rep->consumers));
    if (rep->consumers == NULL)
        return STOKER_NOMEM;
    for (size_t i = 0; i < r->n_consumers; i++) {
        const Stoker__ConsumerState *s = r->consumers[i];
        stoker_consumer_info *d = &rep->consumers[i];
        CONSUMER_FIELDS(COPY_FIELD)
        snprintf(d->name, sizeof(d->name), "%s", s->name != NULL ? s->name : "");
        snprintf(d->job, sizeof(d->job), "%s", s->job != NULL ? s->job : "");
        d->connected = s->connected;
        d->delivery = s->delivery <= STOKER_DELIVERY_SHM ? (stoker_delivery)s->delivery
                                                         : STOKER_DELIVERY_NONE;
        int rv = mix_from_pb(s, d, err, err_len);
        if (rv != STOKER_OK)
            return rv; // the caller frees rep
    }
    rep->n_consumers = (uint32_t)r->n_consumers;
    return STOKER_OK;
}

int
wire_jobs_to_pb(const stoker_reply *rep, Stoker__Reply *r)
{
    Stoker__JobState **ds = wire_pb_repeated(&stoker__job_state__descriptor, rep->n_jobs);
    if (ds == NULL && rep->n_jobs > 0)
        return STOKER_NOMEM;
    for (uint32_t i = 0; i < rep->n_jobs; i++) {
        const stoker_job_info *s = &rep->jobs[i];
        Stoker__JobState *d = ds[i];
        JOB_FIELDS(COPY_FIELD)
        d->name = (char *)s->name;
        d->state = s->state;
        d->end_reason = (char *)s->end_reason;
    }
    r->n_jobs = rep->n_jobs;
    r->jobs = ds;
    return STOKER_OK;
}

void
wire_jobs_pb_free(Stoker__Reply *r)
{
    free(r->jobs);
    r->jobs = NULL;
    r->n_jobs = 0;
}

int
wire_jobs_from_pb(const Stoker__Reply *r, stoker_reply *rep, char *err, size_t err_len)
{
    if (r->n_jobs == 0)
        return STOKER_OK;
    if (r->n_jobs > STOKER_JOBS_MAX)
        return stoker_errorf(err, err_len, STOKER_INVALID, "reply lists %zu jobs, at most %d",
                             r->n_jobs, STOKER_JOBS_MAX);
    rep->jobs = calloc(r->n_jobs, sizeof(*rep->jobs));
    if (rep->jobs == NULL)
        return STOKER_NOMEM;
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Stoker__JobState *s = r->jobs[i];
        stoker_job_info *d = &rep->jobs[i];
        JOB_FIELDS(COPY_FIELD)
        snprintf(d->name, sizeof(d->name), "%s", s->name != NULL ? s->name : "");
        snprintf(d->end_reason, sizeof(d->end_reason), "%s",
                 s->end_reason != NULL ? s->end_reason : "");
        d->state = s->state; // an unknown state is rendered "unknown" (stoker_job_state_name)
    }
    rep->n_jobs = (uint32_t)r->n_jobs;
    return STOKER_OK;
}

// The reply's autoscale signal into r (free r->pools). STOKER_NOMEM.
int
wire_pools_to_pb(const stoker_reply *rep, Stoker__Reply *r)
{
    if (!rep->has_autoscale)
        return STOKER_OK;
    Stoker__PoolState **ds = wire_pb_repeated(&stoker__pool_state__descriptor, rep->n_pools);
    if (ds == NULL && rep->n_pools > 0)
        return STOKER_NOMEM;
    for (uint32_t i = 0; i < rep->n_pools; i++) {
        const stoker_pool_info *s = &rep->pools[i];
        ds[i]->name = (char *)s->name;
        ds[i]->demand = s->demand;
        ds[i]->supply = s->supply;
        ds[i]->supply_low = s->supply_low;
        ds[i]->supply_high = s->supply_high;
        ds[i]->wanted = s->wanted;
        ds[i]->current = s->current;
        ds[i]->why = (char *)s->why;
    }
    r->has_autoscale = 1;
    r->autoscale_headroom = rep->autoscale_headroom;
    r->autoscale_min = rep->autoscale_min;
    r->autoscale_max = rep->autoscale_max;
    r->idle_ms = rep->idle_ms;
    r->n_pools = rep->n_pools;
    r->pools = ds;
    return STOKER_OK;
}

int
wire_pools_from_pb(const Stoker__Reply *r, stoker_reply *rep, char *err, size_t err_len)
{
    if (!r->has_autoscale)
        return STOKER_OK;
    if (r->n_pools > MAX_PRODUCERS)
        return stoker_errorf(err, err_len, STOKER_INVALID, "reply lists %zu pools, at most %d",
                             r->n_pools, MAX_PRODUCERS);
    rep->pools = calloc(r->n_pools ? r->n_pools : 1, sizeof(*rep->pools));
    if (rep->pools == NULL)
        return STOKER_NOMEM;
    for (size_t i = 0; i < r->n_pools; i++) {
        const Stoker__PoolState *s = r->pools[i];
        stoker_pool_info *d = &rep->pools[i];
        snprintf(d->name, sizeof(d->name), "%s", s->name != NULL ? s->name : "");
        snprintf(d->why, sizeof(d->why), "%s", s->why != NULL ? s->why : "");
        d->demand = s->demand;
        d->supply = s->supply;
        d->supply_low = s->supply_low;
        d->supply_high = s->supply_high;
        d->wanted = s->wanted;
        d->current = s->current;
    }
    rep->n_pools = (uint32_t)r->n_pools;
    rep->has_autoscale = 1;
    rep->autoscale_headroom = r->autoscale_headroom;
    rep->autoscale_min = r->autoscale_min;
    rep->autoscale_max = r->autoscale_max;
    rep->idle_ms = r->idle_ms;
    return STOKER_OK;
}
