// The trainer's batch sources (trainer/source.h) on their own: the inline source's batches,
// numbering, stop and audit, and the broker source's bounded failure when no broker answers.
// Whole training runs through either source are the e2e suite's business.
#include "source.h"

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/synthetic.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void
no_events(const stoker_event *e, void *arg)
{
    (void)e;
    (void)arg;
    cr_assert_fail("the inline source has no producers to report");
}

static const source_hooks no_hooks = {.on_event = no_events};

static train_config
inline_config(uint32_t batch_size)
{
    train_config cfg;
    train_config_init(&cfg);
    cfg.inline_mode = 1;
    cfg.delay_min_s = cfg.delay_max_s = 0; // no pauses: the test measures nothing
    cfg.batch_size = batch_size;
    return cfg;
}

static source *
open_inline(const train_config *cfg)
{
    source *src = NULL;
    char why[256] = "";
    cr_assert_eq(source_inline_open(cfg, &no_hooks, &src, why, sizeof(why)), STOKER_OK, "%s", why);
    cr_assert_not_null(src);
    return src;
}

Test(source_inline, batches_are_full_and_fit_the_synthetic_schema)
{
    train_config cfg = inline_config(5);
    source *src = open_inline(&cfg);
    const stoker_schema *schema = src->ops->schema(src);
    int in = stoker_schema_find(schema, "input"), out = stoker_schema_find(schema, "output");
    cr_assert(in >= 0 && out >= 0);
    cr_assert_eq(schema->fields[in].dtype, STOKER_FLOAT32);
    for (int i = 0; i < 3; i++) {
        const stoker_chunk *chunk = NULL;
        cr_assert_eq(src->ops->next(src, &chunk), STOKER_OK);
        cr_assert_not_null(chunk);
        cr_assert_eq(chunk->count, 5u);
        src->ops->settle(src);
    }
    src->ops->destroy(src);
}

Test(source_inline, batches_follow_the_seed_and_never_repeat)
{
    train_config cfg = inline_config(4);
    source *a = open_inline(&cfg), *b = open_inline(&cfg);
    int in = stoker_schema_find(a->ops->schema(a), "input");
    size_t bytes = 4 * stoker_field_bytes(&a->ops->schema(a)->fields[in]);
    float first_a[4 * STOKER_SYNTHETIC_INPUTS], first_b[4 * STOKER_SYNTHETIC_INPUTS],
        second_a[4 * STOKER_SYNTHETIC_INPUTS];
    cr_assert_eq(sizeof(first_a), bytes);
    const stoker_chunk *chunk;
    cr_assert_eq(a->ops->next(a, &chunk), STOKER_OK);
    memcpy(first_a, chunk->data[in], bytes);
    a->ops->settle(a);
    cr_assert_eq(a->ops->next(a, &chunk), STOKER_OK);
    memcpy(second_a, chunk->data[in], bytes);
    a->ops->settle(a);
    cr_assert_eq(b->ops->next(b, &chunk), STOKER_OK);
    memcpy(first_b, chunk->data[in], bytes);
    b->ops->settle(b);
    cr_assert_arr_eq(first_a, first_b, bytes, "the same seed must give the same first batch");
    cr_assert(memcmp(first_a, second_a, bytes) != 0, "the second batch repeats the first");
    a->ops->destroy(a);
    b->ops->destroy(b);
}

Test(source_inline, a_stop_request_interrupts_next)
{
    volatile int stop = 0;
    train_config cfg = inline_config(4);
    cfg.stop = &stop;
    source *src = open_inline(&cfg);
    const stoker_chunk *chunk = NULL;
    cr_assert_eq(src->ops->next(src, &chunk), STOKER_OK);
    src->ops->settle(src);
    stop = 1;
    cr_assert_eq(src->ops->next(src, &chunk), STOKER_INTERRUPTED);
    src->ops->destroy(src);
}

Test(source_inline, audit_counts_every_example_once_unless_the_run_failed)
{
    train_config cfg = inline_config(4);
    source *src = open_inline(&cfg);
    train_result *res = calloc(1, sizeof(*res));
    cr_assert_not_null(res);
    res->status = TRAIN_SUPPLY_ENDED;
    res->examples = 40;
    src->ops->audit(src, res);
    cr_assert_eq(res->has_audit, 1);
    cr_assert_eq(res->produced, 40u);
    cr_assert_eq(res->acknowledged, 40u);
    cr_assert_eq(res->discrepancy, 0);

    memset(res, 0, sizeof(*res));
    res->status = TRAIN_ERROR;
    res->examples = 40;
    src->ops->audit(src, res);
    cr_assert_eq(res->has_audit, 0, "a failed run has no audit");
    free(res);
    src->ops->destroy(src);
}

Test(source_inline, has_no_supply_to_report)
{
    train_config cfg = inline_config(4);
    source *src = open_inline(&cfg);
    uint32_t alive = 7;
    uint64_t queued = 9;
    cr_assert_neq(src->ops->supply(src, &alive, &queued), STOKER_OK);
    cr_assert_eq(alive, 7u);
    cr_assert_eq(queued, 9u);
    src->ops->destroy(src);
}

Test(source_inline, a_zero_batch_size_is_refused)
{
    train_config cfg = inline_config(0);
    source *src = NULL;
    char why[256] = "";
    cr_assert_neq(source_inline_open(&cfg, &no_hooks, &src, why, sizeof(why)), STOKER_OK);
    cr_assert_null(src);
    cr_assert_str_eq(why, "out of memory");
}

Test(source_broker, no_broker_fails_within_the_stall_timeout_and_names_the_url)
{
    char dir[] = "/tmp/stoker-source-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char url[128];
    snprintf(url, sizeof(url), "ipc://%s/nobody", dir);
    train_config cfg;
    train_config_init(&cfg);
    cfg.broker_url = url;
    cfg.stall_timeout_ms = 300;
    source *src = NULL;
    char why[512] = "";
    uint64_t t0 = stoker_now_ms();
    int rv = source_broker_open(&cfg, &no_hooks, &src, why, sizeof(why));
    uint64_t took_ms = stoker_now_ms() - t0;
    rmdir(dir);
    cr_assert(rv == STOKER_CONNECTION || rv == STOKER_STALLED, "rv %d (%s)", rv, why);
    cr_assert_null(src);
    // Bounded by the stall timeout plus the one hello in flight (request timeout 3 s), not by
    // the client's default 30 s of retries.
    cr_assert_lt(took_ms, 8000u, "gave up only after %llu ms", (unsigned long long)took_ms);
    char want[160];
    snprintf(want, sizeof(want), "cannot start feeding from %s: ", url);
    cr_assert(strncmp(why, want, strlen(want)) == 0, "why: %s", why);
    cr_assert_gt(strlen(why), strlen(want), "the reason after the url is empty");
}
