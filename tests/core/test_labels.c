// Class-to-label maps (stoker/labels.h): the bounds that keep a map of 100,000 classes from
// blowing up a hello or /status, names cut on a UTF-8 boundary, equal maps of several producers
// grouped, and the map's round trip through a hello and a Status reply (common/wire/).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nng/nng.h>

#include "stoker/error.h"
#include "stoker/labels.h"
#include "stoker/wire.h"

// n names "class00000", ... (malloc'd, with the array; free with free_names).
static char **
make_names(uint32_t n, size_t len)
{
    char **names = calloc(n, sizeof(*names));
    cr_assert_not_null(names);
    for (uint32_t i = 0; i < n; i++) {
        names[i] = malloc(len + 1);
        cr_assert_not_null(names[i]);
        memset(names[i], 'x', len);
        snprintf(names[i], len + 1, "class%05u", i);
        if (len > 10)
            names[i][10] = 'x'; // snprintf's NUL, back to padding
        names[i][len] = '\0';
    }
    return names;
}

static void
free_names(char **names, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static char *
render(const stoker_label_map *maps, uint32_t n, uint32_t omitted)
{
    stoker_text t = {0};
    stoker_labels_render_json(&t, maps, n, omitted);
    char *s = stoker_text_finish(&t);
    cr_assert_not_null(s);
    return s;
}

Test(labels, a_hundred_thousand_classes_are_counted_but_only_the_first_thousand_listed)
{
    const uint32_t n = 100000;
    char **names = make_names(n, 10);
    uint64_t *files = calloc(n, sizeof(*files));
    for (uint32_t i = 0; i < n; i++)
        files[i] = i % 7;
    stoker_labels l;
    cr_assert_eq(stoker_labels_build(&l, n, (const char *const *)names, files, n), STOKER_OK);
    cr_expect_eq(l.n_classes, n);
    cr_expect_eq(l.n_listed, STOKER_LABELS_MAX_CLASSES);
    cr_expect_str_eq(stoker_labels_name(&l, 999), "class00999");
    cr_expect_eq(l.files[999], 999 % 7);
    uint32_t producer = 3;
    stoker_label_map map = {.n_producers = 1, .producers = &producer, .labels = l};
    char *json = render(&map, 1, 0);
    cr_expect_lt(strlen(json), 64 * 1024, "the block is %zu bytes", strlen(json));
    cr_expect_not_null(strstr(json, "\"classes\": 100000, \"listed\": 1000, \"truncated\": true"),
                       "%.200s", json);
    cr_expect_null(strstr(json, "class01000"), "class 1000 is not listed");
    free(json);
    stoker_labels_fini(&l);
    free(files);
    free_names(names, n);
}

Test(labels, long_names_are_cut_and_the_listed_bytes_bounded)
{
    const uint32_t n = 400;
    char **names = make_names(n, 1000);
    stoker_labels l;
    cr_assert_eq(stoker_labels_build(&l, n, (const char *const *)names, NULL, n), STOKER_OK);
    cr_expect_eq(strlen(stoker_labels_name(&l, 0)), STOKER_LABEL_NAME_MAX - 1);
    cr_expect_leq(l.names_len, STOKER_LABELS_MAX_BYTES);
    cr_expect_eq(l.n_listed, STOKER_LABELS_MAX_BYTES / STOKER_LABEL_NAME_MAX);
    cr_expect_eq(l.files[0], 0);
    stoker_labels_fini(&l);
    free_names(names, n);
}

Test(labels, a_name_is_never_cut_inside_a_utf8_character)
{
    char name[STOKER_LABEL_NAME_MAX + 8];
    memset(name, 'a', STOKER_LABEL_NAME_MAX - 2);
    strcpy(name + STOKER_LABEL_NAME_MAX - 2, "\xc3\xa9tre"); // 'é' straddles the cut
    const char *names[1] = {name};
    stoker_labels l;
    cr_assert_eq(stoker_labels_build(&l, 1, names, NULL, 1), STOKER_OK);
    cr_expect_eq(strlen(stoker_labels_name(&l, 0)), STOKER_LABEL_NAME_MAX - 2);
    stoker_labels_fini(&l);
}

Test(labels, equal_maps_are_grouped_and_distinct_ones_bounded)
{
    char **names = make_names(40, 10);
    stoker_label_map *maps = NULL;
    uint32_t n = 0, omitted = 0;
    for (uint32_t k = 0; k < STOKER_LABEL_MAPS_MAX + 3; k++) { // k + 1 classes: all distinct
        stoker_labels l;
        cr_assert_eq(stoker_labels_build(&l, k + 1, (const char *const *)names, NULL, k + 1),
                     STOKER_OK);
        cr_assert_eq(stoker_label_maps_add(&maps, &n, &omitted, 100 + k, &l), STOKER_OK);
        cr_assert_eq(stoker_label_maps_add(&maps, &n, &omitted, 200 + k, &l), STOKER_OK);
        stoker_labels_fini(&l);
    }
    cr_expect_eq(n, STOKER_LABEL_MAPS_MAX);
    cr_expect_eq(omitted, 2 * 3, "two producers each of three maps that did not fit");
    cr_expect_eq(maps[0].n_producers, 2);
    cr_expect_eq(maps[0].producers[0], 100);
    cr_expect_eq(maps[0].producers[1], 200);
    char *json = render(maps, n, omitted);
    cr_expect_not_null(strstr(json, "\"omitted\": 6}"), "%s", json + strlen(json) - 40);
    free(json);
    stoker_label_maps_free(maps, n);
    free_names(names, 40);
}

Test(labels, a_map_travels_in_a_hello_and_in_a_status_reply)
{
    const char *names[3] = {"cat", "dog \"big\"", "emu"};
    const uint64_t files[3] = {12, 7, 1};
    stoker_labels l;
    cr_assert_eq(stoker_labels_build(&l, 5, names, files, 3), STOKER_OK);

    stoker_request req = {.method = STOKER_HELLO, .role = STOKER_ROLE_PRODUCER, .labels = l};
    nng_msg *msg;
    cr_assert_eq(stoker_wire_encode_request(&req, &msg), STOKER_OK);
    stoker_request *got;
    char err[256];
    cr_assert_eq(stoker_wire_decode_request_msg(msg, &got, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_expect(stoker_labels_equal(&got->labels, &l));
    cr_expect_eq(got->labels.n_classes, 5);
    stoker_request_free(got);

    uint32_t ids[2] = {4, 9};
    stoker_label_map map = {.n_producers = 2, .producers = ids, .labels = l};
    stoker_reply rep = {
        .code = STOKER_OK, .label_maps = &map, .n_label_maps = 1, .label_maps_omitted = 2};
    cr_assert_eq(stoker_wire_encode_reply(&rep, &msg), STOKER_OK);
    stoker_reply *back;
    cr_assert_eq(stoker_wire_decode_reply_msg(msg, &back, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert_eq(back->n_label_maps, 1);
    cr_expect_eq(back->label_maps_omitted, 2);
    cr_expect_eq(back->label_maps[0].n_producers, 2);
    cr_expect_eq(back->label_maps[0].producers[1], 9);
    cr_expect(stoker_labels_equal(&back->label_maps[0].labels, &l));
    stoker_reply_free(back); // and msg, which the decoded reply took
    stoker_labels_fini(&l);
}
