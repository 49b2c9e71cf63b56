/*
 * test_spec_plan.c - the `loom plan` cluster file and its built-in GPU types: H100 parses with
 * its datasheet figures, joins a fleet's type table only when named (existing fleets keep their
 * type indices), can be overridden field by field, and an H100 fleet plans faster than the same
 * fleet of any other built-in type. Also the JSON forms of a plan run.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loom/spec.h"

static loom_plan_cluster cl;

static int parse(const char *text, loom_err *e)
{
        char name[64];
        loom_err_clear(e);
        return loom_plan_cluster_parse(text, strlen(text), &cl, name, sizeof name, e);
}

/* Two 4-GPU machines of one type in one region. */
static int two_machines(const char *type, loom_err *e)
{
        char t[512];
        snprintf(t, sizeof t,
                 "{\"devices\": [{\"type\": \"%s\", \"machine\": \"m0\", \"region\": \"r\", "
                 "\"count\": 4}, {\"type\": \"%s\", \"machine\": \"m1\", \"region\": \"r\", "
                 "\"count\": 4}]}",
                 type, type);
        return parse(t, e);
}

Test(spec_plan, h100_is_built_in_with_its_datasheet_figures)
{
        loom_err e;
        cr_assert_eq(two_machines("H100", &e), 0, "%s", e.msg);
        int t = cl.dev[0].type;
        cr_assert_str_eq(cl.types[t].name, "H100");
        cr_assert_eq(cl.types[t].tflops, 989);
        cr_assert_eq(cl.types[t].hbm_gb, 80);
        cr_assert_eq(cl.types[t].hbm_gbps, 3350);
        cr_assert_eq(cl.types[t].intra_gbps, 900);
        cr_assert_eq(cl.dev[7].type, t);
        cr_assert_eq(cl.n_dev, 8);
}

/* The search draws a random order over the type table, so a fleet that does not name H100 must
 * keep the table it had before H100 existed: A100, L40S, L4 at indices 0, 1, 2. */
Test(spec_plan, fleets_without_h100_keep_their_type_table)
{
        loom_err e;
        cr_assert_eq(two_machines("L4", &e), 0, "%s", e.msg);
        cr_assert_eq(cl.n_types, 3);
        cr_assert_str_eq(cl.types[0].name, "A100");
        cr_assert_str_eq(cl.types[2].name, "L4");
        cr_assert_eq(cl.dev[0].type, 2);
        cr_assert_eq(two_machines("H100", &e), 0, "%s", e.msg);
        cr_assert_eq(cl.n_types, 4);
        cr_assert_eq(cl.dev[0].type, 3);
}

Test(spec_plan, h100_fields_can_be_overridden_one_by_one)
{
        loom_err e;
        const char *t = "{\"gpu_types\": {\"H100\": {\"hbm_gb\": 94}},\n"
                        " \"devices\": [{\"type\": \"H100\", \"machine\": \"m\", \"region\": "
                        "\"r\", \"count\": 2}]}";
        cr_assert_eq(parse(t, &e), 0, "%s", e.msg);
        const loom_plan_gpu *g = &cl.types[cl.dev[0].type];
        cr_assert_eq(g->hbm_gb, 94);
        cr_assert_eq(g->tflops, 989);
        cr_assert_eq(cl.n_types, 4);
}

Test(spec_plan, unknown_type_lists_the_built_in_ones)
{
        loom_err e;
        cr_assert_eq(two_machines("B300", &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "unknown GPU type 'B300' (built in: A100, L40S, L4, H100"), "%s",
                  e.msg);
        cr_assert_str_eq(e.field, "devices[0].type");
}

/* Proved-optimal iteration time of a small GRPO job on 8 GPUs of one type. */
static double best_iteration(const char *type)
{
        loom_err e;
        cr_assert_eq(two_machines(type, &e), 0, "%s", e.msg);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        cr_assert_eq(loom_plan_model_lookup("qwen3-4b", &w.model), 0);
        w.grpo = true;
        w.batch = 64;
        w.responses = 4;
        loom_plan_opts o = {.solver = LOOM_PLAN_EXACT, .seed = 1};
        static loom_plan_result r;
        cr_assert_eq(loom_plan_search(&cl, &w, &o, &r, &e), 0, "%s", e.msg);
        cr_assert(r.found && r.optimal, "%s", type);
        return r.cost.iteration_s;
}

Test(spec_plan, an_h100_fleet_plans_faster_than_any_other_built_in_fleet)
{
        double h100 = best_iteration("H100");
        static const char *const others[] = {"A100", "L40S", "L4"};
        double next = INFINITY;
        for (int i = 0; i < 3; i++) {
                double v = best_iteration(others[i]);
                next = v < next ? v : next;
        }
        cr_assert(h100 > 0 && h100 < next, "H100 %.3f s, next best %.3f s", h100, next);
}

Test(spec_plan, a_run_and_its_job_spec_as_json)
{
        loom_err e;
        cr_assert_eq(two_machines("H100", &e), 0, "%s", e.msg);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        cr_assert_eq(loom_plan_model_lookup("qwen3-4b", &w.model), 0);
        w.async = true;
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .seed = 3, .budget = 2000};
        static loom_plan_report rep;
        cr_assert_eq(loom_plan_run(&cl, &w, &o, false, &rep, &e), 0, "%s", e.msg);
        json_t *j = loom_plan_report_to_json("x", &cl, &w, &o, &rep);
        cr_assert_not_null(j);
        cr_assert_eq(json_integer_value(json_object_get(j, "evaluations")), 2000);
        cr_assert_eq(json_real_value(json_object_get(j, "iteration_s")),
                     rep.result.cost.iteration_s);
        cr_assert_str_eq(json_string_value(json_object_get(j, "mode")), "async");
        json_t *tasks = json_object_get(json_object_get(j, "plan"), "tasks");
        cr_assert_eq(json_array_size(tasks), 6);
        cr_assert_null(json_object_get(j, "free_layout_s"));
        json_decref(j);
        j = loom_plan_job_to_json(&w, &rep.result, 2.0, 8);
        loom_plan_job job;
        loom_plan_to_job(&rep.result.plan, &rep.result.cost, &job);
        cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "ppo-async-qwen3-4b");
        cr_assert_eq(json_integer_value(json_object_get(j, "rollout_gpus")) % 8, 0);
        cr_assert_geq(json_integer_value(json_object_get(j, "rollout_gpus")), job.rollout_gpus);
        cr_assert_eq(json_real_value(json_object_get(j, "t_roll_s")), job.t_roll_s);
        cr_assert_eq(json_real_value(json_object_get(j, "slo")), 2.0);
        json_decref(j);
}
