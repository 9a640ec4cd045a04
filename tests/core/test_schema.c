// The schema syntax (docs/schema.md): dtypes, fixed and variable leading dimensions with and
// without a bound, "bytes"; errors that name the bad part; formatting that parses back to the
// same schema; and a schema with variable fields through the wire (a producer's hello).
#include <criterion/criterion.h>
#include <string.h>

#include "helpers.h"
#include "stoker/error.h"
#include "stoker/schema.h"

// Parses spec, fails the test otherwise; checks format(parse(spec)) == canonical.
static stoker_schema
parse_as(const char *spec, const char *canonical)
{
    stoker_schema s;
    char err[256] = "";
    cr_assert_eq(stoker_schema_parse(spec, &s, err, sizeof(err)), STOKER_OK, "'%s': %s", spec, err);
    char text[512];
    stoker_schema_format(&s, text, sizeof(text));
    cr_assert_str_eq(text, canonical);
    stoker_schema again;
    cr_assert_eq(stoker_schema_parse(text, &again, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert(stoker_schema_equal(&s, &again), "'%s' does not parse back to itself", text);
    return s;
}

// Asserts spec is refused with a message holding each of the words (NULL-terminated).
static void
refused(const char *spec, const char *const *words)
{
    stoker_schema s;
    char err[256] = "";
    cr_assert_eq(stoker_schema_parse(spec, &s, err, sizeof(err)), STOKER_INVALID,
                 "'%s' was accepted", spec);
    for (const char *const *w = words; *w != NULL; w++)
        cr_assert(strstr(err, *w) != NULL, "'%s': message '%s' does not say '%s'", spec, err, *w);
}

Test(schema, fixed_fields_keep_their_syntax_and_sizes)
{
    stoker_schema s = parse_as("input:float32[10], output : float32[1],label:int64",
                               "input:float32[10],output:float32[1],label:int64[1]");
    cr_assert_eq(stoker_schema_first_variable(&s), -1);
    cr_assert_eq(stoker_schema_example_bytes(&s), 40 + 4 + 8);
    cr_assert_eq(stoker_field_row_bytes(&s.fields[0]), 4);
}

Test(schema, new_dtypes_have_their_sizes)
{
    stoker_schema s =
        parse_as("h:float16[4],b:bfloat16[4],t:bool[3]", "h:float16[4],b:bfloat16[4],t:bool[3]");
    cr_assert_eq(stoker_schema_example_bytes(&s), 8 + 8 + 3);
}

Test(schema, a_variable_leading_dimension_with_and_without_a_bound)
{
    stoker_schema s =
        parse_as("tokens:int32[?],capped:int32[ ? <= 8192 ],points:float32[?,3],y:int64[1]",
                 "tokens:int32[?],capped:int32[?<=8192],points:float32[?,3],y:int64[1]");
    cr_assert_eq(stoker_schema_first_variable(&s), 0);
    cr_assert(s.fields[0].variable && s.fields[0].max_rows == 0 && s.fields[0].shape[0] == 0);
    cr_assert(s.fields[1].variable && s.fields[1].max_rows == 8192);
    cr_assert_eq(s.fields[2].rank, 2);
    cr_assert_eq(s.fields[2].shape[1], 3);
    cr_assert_eq(stoker_field_row_bytes(&s.fields[2]), 12, "a row of float32[?,3] is 12 bytes");
    cr_assert_eq(stoker_field_bytes(&s.fields[0]), 0, "a variable field has no fixed size");
    cr_assert_eq(stoker_schema_example_bytes(&s), 8, "only the fixed fields count");
    cr_assert(!s.fields[3].variable);
}

Test(schema, bytes_is_uint8_of_variable_length)
{
    stoker_schema s = parse_as("jpeg:bytes,label:int64", "jpeg:uint8[?],label:int64[1]");
    stoker_schema t = parse_as("jpeg:uint8[?],label:int64[1]", "jpeg:uint8[?],label:int64[1]");
    cr_assert(stoker_schema_equal(&s, &t));
}

Test(schema, a_bound_is_part_of_the_schema)
{
    stoker_schema a = parse_as("t:int32[?<=10]", "t:int32[?<=10]");
    stoker_schema b = parse_as("t:int32[?<=11]", "t:int32[?<=11]");
    stoker_schema c = parse_as("t:int32[?]", "t:int32[?]");
    stoker_schema d = parse_as("t:int32[1]", "t:int32[1]");
    cr_assert(!stoker_schema_equal(&a, &b));
    cr_assert(!stoker_schema_equal(&a, &c));
    cr_assert(!stoker_schema_equal(&c, &d));
}

Test(schema, bad_variable_dimensions_are_refused_naming_the_part)
{
    refused("p:float32[3,?]", (const char *[]){"'p'", "only the first dimension", NULL});
    refused("t:int32[?<=0]", (const char *[]){"'t'", "bad bound", NULL});
    refused("t:int32[?<=x]", (const char *[]){"'t'", "bad bound", "<=x", NULL});
    refused("t:int32[?<=-3]", (const char *[]){"'t'", "bad bound", NULL});
    refused("t:int32[?x]", (const char *[]){"'t'", "after '?'", "x]", NULL});
    refused("t:int32[?", (const char *[]){"'t'", "after '?'", NULL});
    refused("j:bytes[4]", (const char *[]){"'j'", "'bytes' takes no shape", NULL});
    refused("t:int32[?<=4294967296]", (const char *[]){"'t'", "bad bound", NULL});
    refused("t:float64[?<=1000000000]", (const char *[]){"'t'", "bytes per example", NULL});
    refused("t:float8[?]", (const char *[]){"'t'", "float8", "bfloat16", "bool", NULL});
}

Test(schema, validate_refuses_a_variable_field_without_its_mark)
{
    stoker_schema s;
    h_schema_parse("t:int32[?,2]", &s);
    char err[256];
    s.fields[0].shape[0] = 5; // variable, yet a size for its leading dimension
    cr_assert_eq(stoker_schema_validate(&s, err, sizeof(err)), STOKER_INVALID);
    cr_assert(strstr(err, "'t'") != NULL, "%s", err);
    h_schema_parse("t:int32[2]", &s);
    s.fields[0].max_rows = 9; // a bound on a fixed field
    cr_assert_eq(stoker_schema_validate(&s, err, sizeof(err)), STOKER_INVALID);
    cr_assert(strstr(err, "'t'") != NULL, "%s", err);
}

Test(schema, add_with_a_zero_leading_dimension_makes_a_variable_field)
{
    stoker_schema s = {0};
    uint32_t shape[2] = {0, 3};
    cr_assert_eq(stoker_schema_add(&s, "points", STOKER_FLOAT32, 2, shape), STOKER_OK);
    char text[128];
    stoker_schema_format(&s, text, sizeof(text));
    cr_assert_str_eq(text, "points:float32[?,3]");
}

Test(schema, a_variable_schema_travels_in_a_hello)
{
    stoker_schema s;
    h_schema_parse("tokens:int32[?<=8192],points:float32[?,3],jpeg:bytes,y:bfloat16[2]", &s);
    stoker_request *req = h_hello_producer(7, "var", &s);
    cr_assert(req->has_schema);
    cr_assert(stoker_schema_equal(&req->schema, &s), "the schema changed on the wire");
    cr_assert_eq(req->schema.fields[0].max_rows, 8192);
    cr_assert(req->schema.fields[2].variable);
    stoker_request_free(req);
}
