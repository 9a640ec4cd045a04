// The trainer client's set of identities seen (common/data/idset.c): what it counts as seen before
// decides which examples a trainer drops as duplicates.
#include <stdint.h>

#include <criterion/criterion.h>

#include "idset.h"

Test(idset, counts_what_was_added_before_without_adding)
{
    idset *s = idset_create();
    cr_assert_not_null(s);
    cr_assert_eq(idset_count(s, 7, 0, 10), 0);
    cr_assert_eq(idset_add(s, 7, 10, 5), 0); // [10, 15)
    cr_assert_eq(idset_add(s, 7, 20, 5), 0); // [20, 25)
    cr_assert_eq(idset_count(s, 7, 0, 10), 0);
    cr_assert_eq(idset_count(s, 7, 0, 11), 1);
    cr_assert_eq(idset_count(s, 7, 12, 10), 5); // 12..14 and 20..21
    cr_assert_eq(idset_count(s, 7, 0, 100), 10);
    cr_assert_eq(idset_count(s, 7, 14, 1), 1);
    cr_assert_eq(idset_count(s, 7, 15, 1), 0);
    cr_assert_eq(idset_count(s, 8, 10, 5), 0, "another session");
    cr_assert_eq(idset_count(s, 7, 12, 0), 0);
    // Counting added nothing; adding an overlap reports it and merges.
    cr_assert_eq(idset_add(s, 7, 13, 10), 5); // 13, 14, 20, 21, 22 seen before
    cr_assert_eq(idset_count(s, 7, 10, 15), 15);
    cr_assert_eq(idset_count(s, 7, 9, 17), 15);
    idset_destroy(s);
}

Test(idset, many_sessions_and_gaps)
{
    idset *s = idset_create();
    cr_assert_not_null(s);
    for (uint64_t session = 1; session <= 500; session++)
        for (uint64_t q = 0; q < 100; q += 2) // every other seq
            cr_assert_eq(idset_add(s, session * 0x9e3779b97f4a7c15ull, q, 1), 0);
    for (uint64_t session = 1; session <= 500; session++) {
        uint64_t key = session * 0x9e3779b97f4a7c15ull;
        cr_assert_eq(idset_count(s, key, 0, 100), 50);
        cr_assert_eq(idset_count(s, key, 1, 1), 0);
        cr_assert_eq(idset_count(s, key, 98, 10), 1);
    }
    idset_destroy(s);
}
