// Variable-length fields in memory and on the wire (docs/schema.md): a chunk written
// value by value with stoker_chunk_var_reserve (bounded by the field and the chunk), appended
// with its offsets rebased, encoded as a push (one message, or pieces for the push stream) and
// as a reply made of parts that start mid-chunk; bad offsets refused with a message naming the
// field and the example; the broker answers a push with bad offsets INVALID and keeps serving.
#include <criterion/criterion.h>
#include <string.h>

#include "broker.h"
#include "broker_fixture.h"
#include "helpers.h"
#include "stoker/chunk.h"
#include "stoker/error.h"
#include "stoker/wire.h"

#define SPEC "t:int32[?<=40],p:float32[?,3],y:int64[1]"

static stoker_schema schema;

static void
setup(void)
{
    h_setup();
    h_schema_parse(SPEC, &schema);
}

static void
teardown(void)
{
    h_teardown();
}

TestSuite(varlen, .init = setup, .fini = teardown, .timeout = 10);

// Example k: k % 7 tokens 100 k + j, k % 3 points (k, j, -1), label k.
static void
write_example(stoker_chunk *c, uint32_t k)
{
    stoker_chunk_begin_example(c);
    int32_t *t;
    cr_assert_eq(stoker_chunk_var_reserve(c, 0, k % 7, (void **)&t), STOKER_OK);
    for (uint32_t j = 0; j < k % 7; j++)
        t[j] = (int32_t)(100 * k + j);
    for (uint32_t j = 0; j < k % 3; j++) { // row by row: the rows add up
        float *row;
        cr_assert_eq(stoker_chunk_var_reserve(c, 1, 1, (void **)&row), STOKER_OK);
        row[0] = (float)k, row[1] = (float)j, row[2] = -1.0f;
    }
    *(int64_t *)stoker_chunk_at(c, 2, c->count) = k;
    stoker_chunk_commit_example(c);
}

static void
make_chunk(stoker_chunk *c, uint32_t first, uint32_t n)
{
    cr_assert_eq(stoker_chunk_init(c, &schema, n), STOKER_OK);
    for (uint32_t k = first; k < first + n; k++)
        write_example(c, k);
}

// Example i of c is example k of write_example.
static void
check_example(const stoker_chunk *c, uint32_t i, uint32_t k)
{
    uint64_t rows;
    const int32_t *t = stoker_chunk_var_value(c, 0, i, &rows);
    cr_assert_eq(rows, k % 7, "example %u: %llu tokens", i, (unsigned long long)rows);
    for (uint32_t j = 0; j < rows; j++)
        cr_assert_eq(t[j], (int32_t)(100 * k + j));
    const float *p = stoker_chunk_var_value(c, 1, i, &rows);
    cr_assert_eq(rows, k % 3);
    for (uint32_t j = 0; j < rows; j++)
        cr_assert(p[3 * j] == (float)k && p[3 * j + 1] == (float)j && p[3 * j + 2] == -1.0f);
    int64_t y;
    memcpy(&y, c->data[2] + (size_t)i * 8, 8);
    cr_assert_eq(y, (int64_t)k);
}

Test(varlen, values_are_written_bounded_and_counted_in_real_bytes)
{
    stoker_chunk c;
    make_chunk(&c, 0, 10);
    for (uint32_t i = 0; i < 10; i++)
        check_example(&c, i, i);
    uint64_t tokens = 0, points = 0;
    for (uint32_t k = 0; k < 10; k++)
        tokens += k % 7, points += k % 3;
    cr_assert_eq(stoker_chunk_field_bytes(&c, 0, 0, 10), tokens * 4);
    cr_assert_eq(stoker_chunk_field_bytes(&c, 1, 0, 10), points * 12);
    cr_assert_eq(stoker_chunk_bytes(&c, 0, 10), tokens * 4 + points * 12 + 10 * (8 + 8 + 8));
    stoker_chunk_fini(&c);

    // Over the bound (40): refused, nothing appended; the example can still be made.
    cr_assert_eq(stoker_chunk_init(&c, &schema, 2), STOKER_OK);
    stoker_chunk_begin_example(&c);
    void *p;
    cr_assert_eq(stoker_chunk_var_reserve(&c, 0, 30, &p), STOKER_OK);
    cr_assert_eq(stoker_chunk_var_reserve(&c, 0, 11, &p), STOKER_TOO_LARGE);
    cr_assert_eq(stoker_chunk_var_rows(&c, 0), 30);
    cr_assert_eq(stoker_chunk_var_reserve(&c, 0, 10, &p), STOKER_OK, "40 is within the bound");
    cr_assert_eq(stoker_chunk_var_reserve(&c, 2, 1, &p), STOKER_INVALID, "y is fixed");
    stoker_chunk_fini(&c);
}

Test(varlen, values_grow_past_the_first_buffer)
{
    stoker_schema s;
    h_schema_parse("b:bytes", &s);
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 3), STOKER_OK);
    for (uint32_t k = 0; k < 3; k++) {
        stoker_chunk_begin_example(&c);
        uint8_t *v;
        cr_assert_eq(stoker_chunk_var_reserve(&c, 0, 10000, (void **)&v), STOKER_OK);
        memset(v, (int)k + 1, 10000);
        stoker_chunk_commit_example(&c);
    }
    for (uint32_t k = 0; k < 3; k++) {
        uint64_t rows;
        const uint8_t *v = stoker_chunk_var_value(&c, 0, k, &rows);
        cr_assert_eq(rows, 10000);
        cr_assert(v[0] == k + 1 && v[9999] == k + 1, "value %u moved wrongly when grown", k);
    }
    stoker_chunk_fini(&c);
}

Test(varlen, append_rebases_the_offsets)
{
    stoker_chunk a, b;
    make_chunk(&a, 0, 9);
    cr_assert_eq(stoker_chunk_init(&b, &schema, 20), STOKER_OK);
    cr_assert_eq(stoker_chunk_append(&b, &a, 5, 4), STOKER_OK); // examples 5..8
    cr_assert_eq(stoker_chunk_append(&b, &a, 1, 3), STOKER_OK); // then 1..3
    cr_assert_eq(b.count, 7);
    cr_assert_eq(b.offsets[0][0], 0);
    uint32_t want[] = {5, 6, 7, 8, 1, 2, 3};
    for (uint32_t i = 0; i < 7; i++)
        check_example(&b, i, want[i]);
    stoker_chunk_fini(&a);
    stoker_chunk_fini(&b);
}

// Encodes a push of c as one message and as pieces; both decode to c's examples.
Test(varlen, a_push_travels_as_one_message_and_as_pieces)
{
    stoker_chunk c;
    make_chunk(&c, 3, 11);
    stoker_request req = {.method = STOKER_PUSH, .session = 5, .first_seq = 0, .chunk = c};
    stoker_request *got = h_roundtrip(&req);
    char err[256];
    cr_assert_eq(
        stoker_wire_bind_chunk(&got->chunk, got->n_data, got->data_len, &schema, err, sizeof(err)),
        STOKER_OK, "%s", err);
    for (uint32_t i = 0; i < 11; i++)
        check_example(&got->chunk, i, 3 + i);

    nng_msg *msg;
    cr_assert_eq(stoker_wire_encode_request(&req, &msg), STOKER_OK);
    stoker_wire_pieces pieces;
    cr_assert_eq(stoker_wire_encode_request_pieces(&req, &pieces), STOKER_OK);
    cr_assert_eq(pieces.total, nng_msg_len(msg));
    uint8_t *flat = malloc(pieces.total);
    size_t at = 0;
    for (uint32_t k = 0; k < pieces.n; k++) {
        memcpy(flat + at, pieces.piece[k].buf, pieces.piece[k].len);
        at += pieces.piece[k].len;
    }
    cr_assert_eq(at, pieces.total);
    cr_assert(memcmp(flat, nng_msg_body(msg), at) == 0, "the pieces differ from the message");
    free(flat);
    stoker_wire_pieces_free(&pieces);
    nng_msg_free(msg);
    stoker_request_free(got);
    stoker_chunk_fini(&c);
}

Test(varlen, a_reply_of_parts_from_mid_chunk_is_rebased)
{
    stoker_chunk a, b;
    make_chunk(&a, 0, 8);
    make_chunk(&b, 20, 6);
    // Parts as the broker makes them from queue ranges: a's examples 3..7, b's 1..4.
    stoker_chunk_part parts[2] = {{.count = 5}, {.count = 4}};
    const stoker_chunk *src[2] = {&a, &b};
    uint32_t first[2] = {3, 1};
    for (int k = 0; k < 2; k++) {
        for (uint32_t f = 0; f < 3; f++) {
            const stoker_chunk *c = src[k];
            if (schema.fields[f].variable) {
                parts[k].offsets[f] = (const uint8_t *)(c->offsets[f] + first[k]);
                parts[k].data[f] = c->data[f] + stoker_chunk_var_offset(c, f, first[k]) *
                                                    stoker_field_row_bytes(&schema.fields[f]);
            } else {
                parts[k].data[f] = c->data[f] + (size_t)first[k] * 8;
            }
        }
    }
    stoker_reply rep = {.code = STOKER_OK, .lease = 1, .parts = parts, .n_parts = 2};
    rep.chunk.schema = schema;
    rep.chunk.count = 9;
    nng_msg *msg;
    cr_assert_eq(stoker_wire_encode_reply(&rep, &msg), STOKER_OK);
    stoker_reply *got;
    char err[256];
    cr_assert_eq(stoker_wire_decode_reply_msg(msg, &got, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert_eq(
        stoker_wire_bind_chunk(&got->chunk, got->n_data, got->data_len, &schema, err, sizeof(err)),
        STOKER_OK, "%s", err);
    uint32_t want[] = {3, 4, 5, 6, 7, 21, 22, 23, 24};
    for (uint32_t i = 0; i < 9; i++)
        check_example(&got->chunk, i, want[i]);
    cr_assert_eq(((uintptr_t)got->chunk.offsets[0]) % 8, 0, "a consumer's offsets are aligned");
    stoker_reply_free(got);
    stoker_chunk_fini(&a);
    stoker_chunk_fini(&b);
}

// Binds count examples of schema t:int32[?<=40] whose offsets are offs and values values_bytes.
static int
bind_tokens(const uint64_t *offs, uint32_t count, size_t values_bytes, char *err, size_t len)
{
    stoker_schema s;
    h_schema_parse("t:int32[?<=40]", &s);
    static uint8_t blob[4096] __attribute__((aligned(8)));
    size_t off_bytes = ((size_t)count + 1) * 8;
    memcpy(blob, offs, off_bytes);
    memset(blob + off_bytes, 0, values_bytes);
    stoker_chunk c = {.count = count};
    c.data[0] = blob;
    size_t data_len = off_bytes + values_bytes;
    return stoker_wire_bind_chunk(&c, 1, &data_len, &s, err, len);
}

static void
refused_with(const uint64_t *offs, uint32_t count, size_t values_bytes, const char *words)
{
    char err[256] = "";
    cr_assert_eq(bind_tokens(offs, count, values_bytes, err, sizeof(err)), STOKER_INVALID,
                 "accepted offsets that should be refused (%s)", words);
    cr_assert(strstr(err, "'t'") != NULL, "does not name the field: %s", err);
    cr_assert(strstr(err, words) != NULL, "'%s' does not say '%s'", err, words);
}

Test(varlen, bad_offsets_are_refused_naming_field_example_and_length)
{
    char err[256];
    cr_assert_eq(bind_tokens((uint64_t[]){0, 2, 2, 5}, 3, 20, err, sizeof(err)), STOKER_OK, "%s",
                 err);
    refused_with((uint64_t[]){1, 2, 2, 5}, 3, 20, "start at 1");
    refused_with((uint64_t[]){0, 4, 2, 5}, 3, 20, "example 1 decrease");
    refused_with((uint64_t[]){0, 2, 2, 6}, 3, 20, "example 2 ends at row 6, past the 5 rows");
    refused_with((uint64_t[]){0, 2, 2, UINT64_MAX / 2}, 3, 20, "past the 5 rows");
    refused_with((uint64_t[]){0, 2, 2, 4}, 3, 20, "offsets end at row 4");
    refused_with((uint64_t[]){0, 41}, 1, 164, "example 0 has length 41, over its bound 40");
    // Shorter than its own offsets.
    stoker_schema s;
    h_schema_parse("t:int32[?<=40]", &s);
    uint64_t blob[2] = {0, 0};
    stoker_chunk c = {.count = 3};
    c.data[0] = (uint8_t *)blob;
    size_t len = sizeof blob;
    cr_assert_eq(stoker_wire_bind_chunk(&c, 1, &len, &s, err, sizeof(err)), STOKER_INVALID);
    cr_assert(strstr(err, "shorter than their 32 bytes of offsets") != NULL, "%s", err);
}

// --- the broker ---------------------------------------------------------------------------------

TestSuite(varlen_broker, .init = setup, .fini = teardown, .timeout = 10);

Test(varlen_broker, bad_offsets_are_invalid_and_the_broker_keeps_serving)
{
    bf_init();
    broker_config cfg;
    broker_config_init(&cfg);
    bf_create(&cfg);
    bf_answered(bf_handle(11, h_hello_producer(11, "p", &schema)), STOKER_OK);
    // A producer bypassing the writer: a value of 50 tokens, over its bound of 40.
    stoker_chunk bad;
    cr_assert_eq(stoker_chunk_init(&bad, &schema, 2), STOKER_OK);
    write_example(&bad, 1);
    stoker_chunk_begin_example(&bad);
    void *p;
    cr_assert_eq(stoker_chunk_var_reserve(&bad, 0, 40, &p), STOKER_OK);
    bad.offsets[0][bad.count + 1] += 10; // the writer would have refused these
    cr_assert_eq(stoker_chunk_var_reserve(&bad, 1, 0, &p), STOKER_OK);
    stoker_chunk_commit_example(&bad);
    stoker_request req = {.method = STOKER_PUSH, .session = 11, .first_seq = 0, .chunk = bad};
    stoker_reply *rep = bf_answered(bf_handle(11, h_roundtrip(&req)), STOKER_INVALID);
    cr_assert(strstr(rep->message, "field 't': example 1 has length 50, over its bound 40") != NULL,
              "%s", rep->message);
    // Offsets that go down (with two examples: the first then points past the values).
    bad.offsets[0][1] = 5;
    bad.offsets[0][2] = 3;
    rep = bf_answered(bf_handle(11, h_roundtrip(&req)), STOKER_INVALID);
    cr_assert(strstr(rep->message, "field 't': example 0 ends at row 5, past the 3 rows") != NULL,
              "%s", rep->message);
    stoker_chunk_fini(&bad);
    // The same producer's good push is taken, and a trainer gets it byte for byte.
    stoker_chunk good;
    make_chunk(&good, 0, 6);
    stoker_request ok = {.method = STOKER_PUSH, .session = 11, .first_seq = 0, .chunk = good};
    bf_answered(bf_handle(11, h_roundtrip(&ok)), STOKER_OK);
    bf_answered(bf_handle(21, h_hello_trainer(21, "t")), STOKER_OK);
    rep = bf_answered(bf_handle(21, h_pull(21, 4, 0, 0, NULL)), STOKER_OK);
    stoker_chunk c = rep->chunk;
    char err[256];
    cr_assert_eq(stoker_wire_bind_chunk(&c, rep->n_data, rep->data_len, &schema, err, sizeof(err)),
                 STOKER_OK, "%s", err);
    cr_assert_eq(c.count, 4);
    for (uint32_t i = 0; i < 4; i++)
        check_example(&c, i, i);
    stoker_counters k;
    broker_counters(bf_broker, &k);
    cr_assert_eq(k.queued, 2);
    cr_assert_eq(k.queued_bytes, stoker_chunk_bytes(&good, 4, 2), "real bytes of what is queued");
    stoker_chunk_fini(&good);
    bf_fini();
}
