// Jobs in the Status (docs/sharing.md), the wire and the renderings without a broker: a hello
// names its job, a Status reply carries the jobs and each consumer's job through encode, decode
// and the client's snapshot, a peer listing too many jobs is refused, and /status and /metrics
// render the jobs (and render "jobs": [] and "sharing": null without any).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>
#include <nng/nng.h>

#include "conn.h"
#include "stoker/error.h"
#include "stoker/status.h"
#include "stoker/wire.h"

Test(status_jobs, a_hello_names_its_job)
{
    stoker_request req = {.method = STOKER_HELLO, .role = STOKER_ROLE_TRAINER};
    snprintf(req.job, sizeof(req.job), "%s", "eval-b");
    nng_msg *msg;
    cr_assert_eq(stoker_wire_encode_request(&req, &msg), STOKER_OK);
    stoker_request *got;
    char err[256];
    cr_assert_eq(stoker_wire_decode_request_msg(msg, &got, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_expect_str_eq(got->job, "eval-b");
    stoker_request_free(got);
}

// Two consumers (one of job "b", one of the default job) and two jobs, one detached.
static void
two_jobs(stoker_consumer_info cons[2], stoker_job_info jobs[2])
{
    memset(cons, 0, 2 * sizeof(*cons));
    memset(jobs, 0, 2 * sizeof(*jobs));
    cons[0].id = 1;
    snprintf(cons[0].name, sizeof(cons[0].name), "%s", "t-a");
    cons[0].mix_waits_for = -1;
    cons[1].id = 2;
    snprintf(cons[1].name, sizeof(cons[1].name), "%s", "t-b");
    snprintf(cons[1].job, sizeof(cons[1].job), "%s", "b");
    cons[1].mix_waits_for = -1;
    jobs[0] = (stoker_job_info){.state = STOKER_JOB_RUNNING,
                                .trainers = 1,
                                .made = 100,
                                .delivered = 80,
                                .acknowledged = 70,
                                .queued = 15,
                                .in_flight = 5,
                                .lag = 0,
                                .joined_s = 0.5,
                                .data_wait_ms = 1500,
                                .rate = 1234.5,
                                .remade = 7};
    jobs[1] = (stoker_job_info){.state = STOKER_JOB_DETACHED,
                                .made = 60,
                                .delivered = 20,
                                .acknowledged = 20,
                                .queued = 40,
                                .lag = 35,
                                .joined_s = 2.25,
                                .data_wait_ms = 250};
    snprintf(jobs[1].name, sizeof(jobs[1].name), "%s", "b \"x\"");
    snprintf(jobs[1].end_reason, sizeof(jobs[1].end_reason), "%s", "lagged 35 beyond --job-lag");
}

Test(status_jobs, a_status_reply_carries_the_jobs_and_each_consumers_job)
{
    stoker_consumer_info cons[2];
    stoker_job_info jobs[2];
    two_jobs(cons, jobs);
    stoker_reply rep = {
        .code = STOKER_OK, .n_consumers = 2, .consumers = cons, .n_jobs = 2, .jobs = jobs};
    nng_msg *msg;
    cr_assert_eq(stoker_wire_encode_reply(&rep, &msg), STOKER_OK);
    stoker_reply *back;
    char err[256];
    cr_assert_eq(stoker_wire_decode_reply_msg(msg, &back, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert_eq(back->n_consumers, 2);
    cr_expect_str_eq(back->consumers[0].job, "");
    cr_expect_str_eq(back->consumers[1].job, "b");
    cr_assert_eq(back->n_jobs, 2);
    for (int i = 0; i < 2; i++) {
        const stoker_job_info *a = &jobs[i], *b = &back->jobs[i];
        cr_expect_str_eq(b->name, a->name);
        cr_expect_str_eq(b->end_reason, a->end_reason);
        cr_expect_eq(b->state, a->state);
        cr_expect_eq(b->trainers, a->trainers);
        cr_expect_eq(b->made, a->made);
        cr_expect_eq(b->delivered, a->delivered);
        cr_expect_eq(b->acknowledged, a->acknowledged);
        cr_expect_eq(b->queued, a->queued);
        cr_expect_eq(b->in_flight, a->in_flight);
        cr_expect_eq(b->lag, a->lag);
        cr_expect_eq(b->joined_s, a->joined_s);
        cr_expect_eq(b->data_wait_ms, a->data_wait_ms);
        cr_expect_eq(b->remade, a->remade);
    }
    // The client's snapshot takes the jobs over (stoker_status_destroy frees them).
    stoker_status *st;
    cr_assert_eq(conn_status_from_reply(back, &st), STOKER_OK);
    cr_expect_eq(back->n_jobs, 0);
    cr_expect_null(back->jobs);
    stoker_reply_free(back);
    cr_assert_eq(st->n_jobs, 2);
    cr_expect_eq(st->jobs[1].lag, 35);
    cr_expect_str_eq(st->consumers[1].job, "b");
    stoker_status_destroy(st);
}

Test(status_jobs, a_reply_listing_more_than_64_jobs_is_refused)
{
    stoker_job_info *jobs = calloc(STOKER_JOBS_MAX + 1, sizeof(*jobs));
    cr_assert_not_null(jobs);
    stoker_reply rep = {.code = STOKER_OK, .n_jobs = STOKER_JOBS_MAX + 1, .jobs = jobs};
    nng_msg *msg;
    cr_assert_eq(stoker_wire_encode_reply(&rep, &msg), STOKER_OK);
    stoker_reply *back = NULL;
    char err[256] = "";
    cr_expect_eq(stoker_wire_decode_reply_msg(msg, &back, err, sizeof(err)), STOKER_INVALID);
    cr_expect_str_eq(err, "reply lists 65 jobs, at most 64");
    nng_msg_free(msg);
    // 64 are fine.
    rep.n_jobs = STOKER_JOBS_MAX;
    cr_assert_eq(stoker_wire_encode_reply(&rep, &msg), STOKER_OK);
    cr_assert_eq(stoker_wire_decode_reply_msg(msg, &back, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_expect_eq(back->n_jobs, STOKER_JOBS_MAX);
    stoker_reply_free(back);
    free(jobs);
}

static void
expect_in(const char *text, const char *needle)
{
    cr_expect_not_null(strstr(text, needle), "no %s in:\n%s", needle, text);
}

Test(status_jobs, status_and_metrics_render_the_jobs)
{
    stoker_consumer_info cons[2];
    stoker_job_info jobs[2];
    two_jobs(cons, jobs);
    stoker_status st = {.n_consumers = 2, .consumers = cons, .n_jobs = 2, .jobs = jobs};
    st.counters.produced = 150;
    char *json = stoker_status_render_json(&st);
    cr_assert_not_null(json);
    expect_in(json, "{\"id\": 1, \"name\": \"t-a\", \"job\": \"\",");
    expect_in(json, "{\"id\": 2, \"name\": \"t-b\", \"job\": \"b\",");
    expect_in(json, "\"jobs\": [{\"name\": \"\", \"state\": \"running\", \"trainers\": 1, "
                    "\"made\": 100, \"delivered\": 80, \"acknowledged\": 70, \"queued\": 15, "
                    "\"in_flight\": 5, \"lag\": 0, \"joined_s\": 0.500, \"data_wait_s\": 1.500, "
                    "\"rate\": 1234.5, \"remade\": 7, \"end_reason\": null}, ");
    expect_in(json, "{\"name\": \"b \\\"x\\\"\", \"state\": \"detached\", \"trainers\": 0, ");
    expect_in(json, "\"end_reason\": \"lagged 35 beyond --job-lag\"}]");
    // 150 made for 100 delivered over both jobs.
    expect_in(json, "\"sharing\": {\"jobs\": 2, \"made\": 150, \"delivered\": 100, "
                    "\"made_per_delivered\": 1.500000}");
    free(json);

    char *m = stoker_status_render_metrics(&st);
    cr_assert_not_null(m);
    expect_in(m, "\nstoker_jobs 1\n"); // the detached job is not counted
    expect_in(m, "\nstoker_job_delivered_total{job=\"\"} 80\n");
    expect_in(m, "\nstoker_job_delivered_total{job=\"b _x_\"} 20\n"); // quotes escaped as labels
    expect_in(m, "\nstoker_job_acknowledged_total{job=\"\"} 70\n");
    expect_in(m, "\nstoker_job_queued{job=\"b _x_\"} 40\n");
    expect_in(m, "\nstoker_job_lag{job=\"b _x_\"} 35\n");
    expect_in(m, "\nstoker_job_data_wait_seconds_total{job=\"\"} 1.500\n");
    expect_in(m, "\nstoker_job_rate{job=\"\"} 1234.5\n");
    expect_in(m, "\nstoker_job_state{job=\"\",state=\"running\"} 1\n");
    expect_in(m, "\nstoker_job_state{job=\"b _x_\",state=\"detached\"} 1\n");
    expect_in(m, "# TYPE stoker_job_lag gauge\n");
    expect_in(m, "# TYPE stoker_job_delivered_total counter\n");
    free(m);
}

Test(status_jobs, without_jobs_the_list_is_empty_and_sharing_null)
{
    stoker_status st = {0};
    char *json = stoker_status_render_json(&st);
    cr_assert_not_null(json);
    expect_in(json, ", \"jobs\": [], \"sharing\": null, ");
    free(json);
    char *m = stoker_status_render_metrics(&st);
    cr_assert_not_null(m);
    expect_in(m, "\nstoker_jobs 0\n");
    cr_expect_null(strstr(m, "stoker_job_"), "%s", m);
    free(m);
}

Test(status_jobs, state_names)
{
    cr_expect_str_eq(stoker_job_state_name(STOKER_JOB_RUNNING), "running");
    cr_expect_str_eq(stoker_job_state_name(STOKER_JOB_ABSENT), "absent");
    cr_expect_str_eq(stoker_job_state_name(STOKER_JOB_ENDED), "ended");
    cr_expect_str_eq(stoker_job_state_name(STOKER_JOB_DETACHED), "detached");
    cr_expect_str_eq(stoker_job_state_name(9), "unknown");
}
