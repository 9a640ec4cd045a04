// Interval sets per session, kept sorted and merged; a small open-addressing table of sessions.
#include <stdlib.h>
#include <string.h>

#include "idset.h"

typedef struct interval {
    uint64_t lo, hi; // [lo, hi)
} interval;

typedef struct session_set {
    uint64_t session;
    interval *iv;
    uint32_t n, cap;
} session_set;

struct idset {
    session_set *slots;
    uint32_t n, cap; // cap is a power of two
};

idset *
idset_create(void)
{
    idset *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->cap = 64;
    s->slots = calloc(s->cap, sizeof(*s->slots));
    if (s->slots == NULL) {
        free(s);
        return NULL;
    }
    return s;
}

void
idset_destroy(idset *s)
{
    if (s == NULL)
        return;
    for (uint32_t i = 0; i < s->cap; i++)
        free(s->slots[i].iv);
    free(s->slots);
    free(s);
}

static session_set *
find(session_set *slots, uint32_t cap, uint64_t session)
{
    // session ids are random: their low bits are a fine hash. Slot session 0 means empty;
    // a real session 0 is stored as ~0 (both never collide in practice; see stoker_random_u64).
    uint64_t key = session != 0 ? session : ~0ull;
    for (uint32_t i = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 40) & (cap - 1);;
         i = (i + 1) & (cap - 1)) {
        if (slots[i].session == key || slots[i].session == 0)
            return &slots[i];
    }
}

static int
grow(idset *s)
{
    uint32_t cap = s->cap * 2;
    session_set *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return -1;
    for (uint32_t i = 0; i < s->cap; i++) {
        if (s->slots[i].session != 0)
            *find(slots, cap, s->slots[i].session) = s->slots[i];
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

uint64_t
idset_add(idset *s, uint64_t session, uint64_t first, uint64_t count)
{
    if (count == 0)
        return 0;
    if (s->n * 2 >= s->cap && grow(s) != 0)
        return UINT64_MAX;
    uint64_t key = session != 0 ? session : ~0ull;
    session_set *ss = find(s->slots, s->cap, session);
    if (ss->session == 0) {
        ss->session = key;
        s->n++;
    }
    uint64_t lo = first, hi = first + count;
    // Count the overlap with existing intervals, then merge [lo, hi) in.
    uint64_t dup = 0;
    uint32_t i = 0;
    while (i < ss->n && ss->iv[i].hi < lo)
        i++;
    uint32_t j = i;
    uint64_t mlo = lo, mhi = hi;
    while (j < ss->n && ss->iv[j].lo <= hi) {
        uint64_t a = ss->iv[j].lo > lo ? ss->iv[j].lo : lo;
        uint64_t b = ss->iv[j].hi < hi ? ss->iv[j].hi : hi;
        if (b > a)
            dup += b - a;
        if (ss->iv[j].lo < mlo)
            mlo = ss->iv[j].lo;
        if (ss->iv[j].hi > mhi)
            mhi = ss->iv[j].hi;
        j++;
    }
    if (j == i) { // no touching interval: insert at i
        if (ss->n == ss->cap) {
            uint32_t cap = ss->cap ? ss->cap * 2 : 4;
            interval *iv = realloc(ss->iv, cap * sizeof(*iv));
            if (iv == NULL)
                return UINT64_MAX;
            ss->iv = iv;
            ss->cap = cap;
        }
        memmove(&ss->iv[i + 1], &ss->iv[i], (ss->n - i) * sizeof(interval));
        ss->n++;
    } else if (j > i + 1) { // several merge into one
        memmove(&ss->iv[i + 1], &ss->iv[j], (ss->n - j) * sizeof(interval));
        ss->n -= j - i - 1;
    }
    ss->iv[i].lo = mlo;
    ss->iv[i].hi = mhi;
    return dup;
}

uint64_t
idset_count(const idset *s, uint64_t session, uint64_t first, uint64_t count)
{
    uint64_t key = session != 0 ? session : ~0ull;
    const session_set *ss = find(s->slots, s->cap, session);
    if (ss->session != key || count == 0)
        return 0;
    uint32_t lo = 0, hi = ss->n; // the first interval ending after first
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ss->iv[mid].hi <= first)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t end = first + count, n = 0;
    for (uint32_t i = lo; i < ss->n && ss->iv[i].lo < end; i++) {
        uint64_t a = ss->iv[i].lo > first ? ss->iv[i].lo : first;
        uint64_t b = ss->iv[i].hi < end ? ss->iv[i].hi : end;
        n += b - a;
    }
    return n;
}

uint32_t
idset_export(const idset *s, uint64_t *out, uint32_t max)
{
    if (s->n == 0 || max == 0)
        return 0;
    uint32_t per = max / s->n > 0 ? max / s->n : 1, k = 0;
    for (uint32_t i = 0; i < s->cap && k < max; i++) {
        const session_set *ss = &s->slots[i];
        if (ss->session == 0)
            continue;
        uint64_t session = ss->session == ~0ull ? 0 : ss->session;
        uint32_t from = ss->n > per ? ss->n - per : 0; // the newest: what retention may hold
        for (uint32_t j = from; j < ss->n && k < max; j++, k++) {
            out[3 * k] = session;
            out[3 * k + 1] = ss->iv[j].lo;
            out[3 * k + 2] = ss->iv[j].hi;
        }
    }
    return k;
}
