/*
 * test_spec_plex.c - the PlexRL fields of the formats: serviceized training calls in a job
 * spec, placer "plex" and the dispatch knobs of a policy, with errors at line and column.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "loom/spec.h"

static int parse(const char *text, loom_scenario *sc, loom_err *e)
{
        loom_err_clear(e);
        return loom_scenario_parse(text, strlen(text), sc, e);
}

#define BASE "\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":231.53,\"slo\":1.5"

Test(spec_plex, calls_give_the_training_time)
{
        const char *t = "{\"policy\":{\"placer\":\"plex\",\"dispatch\":\"hrrs\","
                        "\"preempt_margin\":1.2,\"plex_alpha\":0.4,\"plex_duty_max\":0.6},"
                        "\"jobs\":[{" BASE ",\"compute_log_prob_s\":9.66,"
                        "\"update_actor_s\":38.08,\"sync_weight_s\":9.76},"
                        "{" BASE ",\"t_train_s\":57.5}]}";
        loom_scenario sc;
        loom_err e;
        cr_assert_eq(parse(t, &sc, &e), 0, "%s", e.msg);
        cr_assert_eq(sc.policy.placer, LOOM_PLACER_PLEX);
        cr_assert_eq(sc.policy.dispatch, LOOM_DISPATCH_HRRS);
        cr_assert_float_eq(sc.policy.preempt_margin, 1.2, 1e-12);
        cr_assert_float_eq(sc.policy.plex_alpha, 0.4, 1e-12);
        cr_assert_float_eq(sc.policy.plex_duty_max, 0.6, 1e-12);
        cr_assert_eq(sc.jobs[0].t_train,
                     loom_us_from_s(9.66) + loom_us_from_s(38.08) + loom_us_from_s(9.76));
        loom_us calls[LOOM_N_CALLS];
        cr_assert_eq(loom_job_calls(&sc.jobs[0], calls), 3);
        cr_assert_eq(calls[1], loom_us_from_s(38.08));
        cr_assert_eq(loom_job_calls(&sc.jobs[1], calls), 1);
        cr_assert_eq(calls[0], loom_us_from_s(57.5));
        /* Round trip through the encoder keeps the calls. */
        json_t *o = loom_job_spec_to_json(&sc.jobs[0]);
        cr_assert_not_null(json_object_get(o, "update_actor_s"));
        loom_job_spec back;
        cr_assert_eq(loom_job_spec_from_json(o, "", NULL, 0, &sc.cluster, NULL, &back, &e), 0, "%s",
                     e.msg);
        cr_assert_eq(back.t_train, sc.jobs[0].t_train);
        json_decref(o);
        loom_scenario_free(&sc);
}

Test(spec_plex, bad_fields_are_named_with_position)
{
        static const struct {
                const char *text, *field;
                int line, col;
        } cases[] = {
            {"{\"jobs\":[{" BASE ",\n\"update_actor_s\":10,\"t_train_s\":50}]}",
             "jobs[0].t_train_s", 2, 33},
            {"{\"jobs\":[{" BASE ",\"sync_weight_s\":-1}]}", "jobs[0].sync_weight_s", 1, 87},
            {"{\"jobs\":[{" BASE "}]}", "jobs[0].t_train_s", 1, 10},
            {"{\"policy\":{\"dispatch\":\"sjf\"},\"jobs\":[]}", "policy.dispatch", 1, 23},
            {"{\"policy\":{\"plex_duty_max\":2},\"jobs\":[]}", "policy.plex_duty_max", 1, 28},
            {"{\"policy\":{\"preempt_margin\":0.9},\"jobs\":[]}", "policy.preempt_margin", 1, 29},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                loom_scenario sc;
                loom_err e;
                cr_assert_eq(parse(cases[i].text, &sc, &e), LOOM_EINVAL, "case %zu accepted", i);
                cr_assert_str_eq(e.field, cases[i].field, "case %zu: %s (%s)", i, e.field, e.msg);
                cr_assert_eq(e.line, cases[i].line, "case %zu: line %d (%s)", i, e.line, e.msg);
                cr_assert_eq(e.col, cases[i].col, "case %zu: col %d (%s)", i, e.col, e.msg);
        }
}
