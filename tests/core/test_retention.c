// The producer's retention buffer (common/client/retention.c): what it keeps, and that adopting a
// chunk keeps the chunk's own buffers (no copy) and hands back others to fill.
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "retention.h"
#include "stoker/error.h"
#include "stoker/schema.h"

static stoker_schema
schema_of(const char *spec)
{
    stoker_schema s;
    char err[128];
    cr_assert_eq(stoker_schema_parse(spec, &s, err, sizeof(err)), STOKER_OK, "%s", err);
    return s;
}

static void
fill(stoker_chunk *c, uint32_t count, uint8_t byte)
{
    for (uint32_t f = 0; f < c->schema.n_fields; f++)
        memset(c->data[f], byte, (size_t)count * stoker_field_bytes(&c->schema.fields[f]));
    c->count = count;
}

Test(retention, adopt_keeps_the_buffers_and_gives_back_others)
{
    stoker_schema s = schema_of("x:uint8[1000],y:float32[1]");
    retention *r = retention_create();
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    uint8_t *kept[3];
    for (int i = 0; i < 3; i++) {
        fill(&c, 8, (uint8_t)(i + 1));
        kept[i] = c.data[0];
        cr_assert_eq(retention_adopt(r, &c, 8 * (uint64_t)i), STOKER_OK);
        cr_assert_neq(c.data[0], kept[i], "the caller gets other buffers");
        cr_assert_eq(c.count, 0);
        cr_assert_geq(c.capacity, 8);
        cr_assert(c.owns_data);
    }
    cr_assert_eq(retention_examples(r), 24);
    uint64_t first;
    int hole;
    const stoker_chunk *k = retention_find(r, 9, &first, &hole);
    cr_assert_not_null(k);
    cr_assert_eq(first, 8);
    cr_assert_eq(hole, 0);
    cr_assert_eq(k->data[0], kept[1], "kept without a copy");
    cr_assert_eq(k->data[0][999], 2);
    // Released slots' buffers come back to the caller once the ring wraps: in the steady state
    // (push, then trained) the same few buffers circulate and nothing is allocated.
    uint8_t *seen[64];
    uint32_t n_seen = 0;
    uint64_t seq = 24;
    for (int i = 0; i < 40; i++, seq += 8) {
        fill(&c, 8, (uint8_t)i);
        uint8_t *mine = c.data[0];
        cr_assert_eq(retention_adopt(r, &c, seq), STOKER_OK);
        k = retention_find(r, seq, &first, &hole);
        cr_assert_eq(k->data[0], mine);
        cr_assert_eq(k->data[0][0], (uint8_t)i);
        retention_release(r, seq); // all but the newest trained
        int known = 0;
        for (uint32_t j = 0; j < n_seen; j++)
            known |= seen[j] == c.data[0];
        if (!known)
            seen[n_seen++] = c.data[0];
    }
    cr_assert_leq(n_seen, 10, "%u distinct buffers for a ring of 8", n_seen);
    cr_assert_eq(retention_examples(r), 8);
    // A borrowed or empty chunk is not adopted, and nothing changes.
    stoker_chunk view = c;
    view.owns_data = 0;
    view.count = 1;
    cr_assert_eq(retention_adopt(r, &view, seq), STOKER_INVALID);
    cr_assert_eq(retention_adopt(r, &c, seq), STOKER_INVALID, "count 0");
    cr_assert_eq(retention_examples(r), 8);
    stoker_chunk_fini(&c);
    retention_destroy(r);
}

Test(retention, add_copies_and_release_ranges_leaves_holes)
{
    stoker_schema s = schema_of("x:uint8[16]");
    retention *r = retention_create();
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 4), STOKER_OK);
    fill(&c, 4, 5);
    cr_assert_eq(retention_add(r, &c, 0), STOKER_OK);
    fill(&c, 4, 6);
    cr_assert_eq(retention_adopt(r, &c, 4), STOKER_OK);
    const stoker_chunk *k = retention_find(r, 0, &(uint64_t){0}, &(int){0});
    cr_assert_neq(k->data[0], c.data[0]);
    cr_assert_eq(k->data[0][15], 5, "a copy");
    uint64_t pairs[] = {4, 8};
    retention_release_ranges(r, pairs, 2);
    int hole = 0;
    k = retention_find(r, 5, &(uint64_t){0}, &hole);
    cr_assert_not_null(k);
    cr_assert_eq(hole, 1);
    cr_assert_eq(retention_examples(r), 4);
    retention_release(r, 4);
    cr_assert_eq(retention_examples(r), 0);
    cr_assert_eq(retention_oldest(r, 99), 99);
    stoker_chunk_fini(&c);
    retention_destroy(r);
}

// A pipelined push taken back (abandoned on a stop): the newest chunks go, the older stay, and
// the next add continues after what is left.
Test(retention, forget_from_takes_back_the_newest_chunks)
{
    stoker_schema s = schema_of("x:uint8[16]");
    retention *r = retention_create();
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 4), STOKER_OK);
    for (uint64_t i = 0; i < 3; i++) {
        fill(&c, 4, (uint8_t)(i + 1));
        cr_assert_eq(retention_add(r, &c, 4 * i), STOKER_OK);
    }
    retention_forget_from(r, 8);
    cr_assert_eq(retention_examples(r), 8);
    cr_assert_null(retention_find(r, 8, &(uint64_t){0}, &(int){0}), "seq 8 was taken back");
    retention_forget_from(r, 100); // nothing from there: nothing goes
    cr_assert_eq(retention_examples(r), 8);
    fill(&c, 4, 9);
    cr_assert_eq(retention_add(r, &c, 8), STOKER_OK);
    uint64_t first = 0;
    const stoker_chunk *got = retention_find(r, 9, &first, &(int){0});
    cr_assert_not_null(got);
    cr_assert_eq(first, 8);
    cr_assert_eq(got->data[0][0], 9, "the chunk added again, not the one taken back");
    retention_forget_from(r, 0);
    cr_assert_eq(retention_examples(r), 0);
    stoker_chunk_fini(&c);
    retention_destroy(r);
}
