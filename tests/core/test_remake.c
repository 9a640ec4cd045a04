// A job's items to make again in one epoch (server/broker/remake.c): the sets behind a late job's
// first epoch and a lagging job's passed-over items (docs/sharing.md). Checked against a model
// (plain arrays) over thousands of adds, cuts, takes by another job's shard, hand-backs after a
// lost producer and acknowledgements in a seeded random order: only pending members are cut, each
// once per time it was pending, and the set is complete exactly when every member was
// acknowledged.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "remake.h"
#include "stoker/error.h"

#define N 1000

Test(remake, cuts_members_in_the_order_they_were_added_skipping_those_taken)
{
    remake *r = remake_create(N, 3);
    cr_assert_not_null(r);
    cr_expect_eq(r->epoch, 3);
    for (uint32_t i = 10; i < 20; i++)
        cr_assert_eq(remake_add(r, i), STOKER_OK);
    cr_expect_eq(remake_add(r, 12), STOKER_OK, "adding a member again is harmless");
    cr_expect_eq(r->members, 10);
    cr_expect_eq(remake_add(r, N), STOKER_OK, "an index past the dataset is not added");
    cr_expect_eq(r->members, 10);
    remake_take(r, 11); // another job's shard makes 11 for this one too
    uint32_t out[16];
    cr_assert_eq(remake_cut(r, 3, out), 3);
    cr_expect_eq(out[0], 10);
    cr_expect_eq(out[1], 12, "11 was taken by another job's shard");
    cr_expect_eq(out[2], 13);
    cr_expect(!remake_is_pending(r, 12) && remake_is_member(r, 12));
    cr_expect(!remake_is_member(r, 9));
    // A lost producer's shard: 12 and 13 pending again, after those pending now.
    cr_assert_eq(remake_give_back(r, 13), STOKER_OK);
    cr_assert_eq(remake_give_back(r, 12), STOKER_OK);
    cr_assert_eq(remake_give_back(r, 9), STOKER_OK, "not a member: nothing to give back");
    uint32_t n = remake_cut(r, 16, out);
    uint32_t want[] = {14, 15, 16, 17, 18, 19, 13, 12};
    cr_assert_eq(n, 8);
    cr_expect_arr_eq(out, want, sizeof(want));
    cr_expect_eq(remake_cut(r, 16, out), 0);
    cr_expect_eq(r->pending_count, 0);
    cr_expect(!remake_complete(r));
    remake_acked(r, 9);
    cr_expect(!remake_complete(r));
    remake_acked(r, 1);
    cr_expect(remake_complete(r), "all 10 members acknowledged");
    remake_destroy(r);
}

Test(remake, finds_a_set_by_its_epoch)
{
    remake *a = remake_create(N, 4), *b = remake_create(N, 5);
    remake *sets[REMAKE_SETS] = {NULL, b};
    cr_expect_eq(remake_find(sets, 5), b);
    cr_expect_null(remake_find(sets, 4));
    sets[0] = a;
    cr_expect_eq(remake_find(sets, 4), a);
    remake_destroy(a);
    remake_destroy(b);
}

// The model: per index, whether a member and whether pending.
Test(remake, matches_a_model_over_a_random_history)
{
    remake *r = remake_create(N, 0);
    cr_assert_not_null(r);
    static uint8_t member[N], pending[N];
    memset(member, 0, sizeof(member));
    memset(pending, 0, sizeof(pending));
    uint64_t members = 0, acked = 0, cut_total = 0, pend_total = 0;
    srand(42);
    for (uint64_t step = 1; step <= 20000; step++) {
        int op = rand() % 10;
        uint32_t i = (uint32_t)(rand() % N);
        if (op < 4) { // add
            cr_assert_eq(remake_add(r, i), STOKER_OK);
            if (!member[i]) {
                member[i] = pending[i] = 1;
                members++;
                pend_total++;
            }
        } else if (op < 7) { // cut up to 8: pending members, oldest-pending first
            uint32_t out[8];
            uint32_t n = remake_cut(r, 8, out);
            for (uint32_t k = 0; k < n; k++) {
                cr_assert(member[out[k]] && pending[out[k]], "cut %u: not pending", out[k]);
                pending[out[k]] = 0;
                cut_total++;
            }
        } else if (op < 8) { // another job's shard takes it
            remake_take(r, i);
            pending[i] = 0;
        } else if (op < 9) { // a lost producer gives it back
            cr_assert_eq(remake_give_back(r, i), STOKER_OK);
            if (member[i] && !pending[i]) {
                pending[i] = 1;
                pend_total++;
            }
        } else if (acked < members) {
            remake_acked(r, 1);
            acked++;
        }
        uint64_t want_pending = 0;
        for (uint32_t k = 0; k < N; k++)
            want_pending += pending[k];
        cr_assert_eq(r->pending_count, want_pending, "step %llu", (unsigned long long)step);
        cr_assert_eq(r->members, members);
        cr_assert_eq(remake_complete(r), acked == members);
        for (uint32_t k = 0; k < N && step % 1000 == 0; k++) {
            cr_assert_eq(remake_is_member(r, k), member[k]);
            cr_assert_eq(remake_is_pending(r, k), pending[k]);
        }
    }
    // Whatever is still pending comes out, each once.
    uint32_t out[N];
    uint32_t n = remake_cut(r, N, out);
    for (uint32_t k = 0; k < n; k++) {
        cr_assert(pending[out[k]]);
        pending[out[k]] = 0;
    }
    for (uint32_t k = 0; k < N; k++)
        cr_assert(!pending[k], "%u still pending", k);
    cr_expect_gt(cut_total, 1000, "the history cut often (%llu)", (unsigned long long)cut_total);
    cr_expect_gt(pend_total, members, "and gave back often");
    // The list stays bounded: members plus what was given back since the last full walk.
    cr_expect_leq(r->cap, 4 * N);
    remake_destroy(r);
}
