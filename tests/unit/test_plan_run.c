/*
 * test_plan_run.c - the drivers behind `loom plan`: one run (timed by the caller's clock, an
 * error when nothing fits, the layout search after it), its text report, the evaluation-rate
 * benchmark and the sweep (scenario and model filters, the loader's errors, the ablation).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/plan.h"

/* n GPUs, 4 per machine, one region; machine m has type ty (0 A100, 1 L40S, 2 L4), or with
 * mixed the types alternate by machine from ty. */
static void fleet(loom_plan_cluster *c, int n, int ty, bool mixed)
{
        static const loom_plan_gpu types[] = {
            {"A100", 312, 40, 2039, 600}, {"L40S", 366, 48, 864, 64}, {"L4", 121, 24, 300, 64}};
        memset(c, 0, sizeof *c);
        c->n_types = 3;
        memcpy(c->types, types, sizeof types);
        c->n_dev = n;
        for (int i = 0; i < n; i++)
                c->dev[i] = (loom_plan_device){mixed ? (ty + i / 4) % 2 : ty, i / 4, 0, 0};
        c->n_machines = (n + 3) / 4;
        c->n_zones = c->n_regions = 1;
        c->intra_lat_s = 5e-6;
        c->region_lat_s[0] = 20e-6;
        c->region_bw[0] = 100e9 / 8;
        snprintf(c->region_name[0], sizeof c->region_name[0], "r");
}

/* A clock that advances 0.5 s per reading. */
static double fake_now(void *ctx)
{
        double *t = ctx;
        return *t += 0.5;
}

static loom_plan_workflow small_grpo(void)
{
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        w.grpo = true;
        w.batch = 64;
        w.responses = 4;
        return w;
}

Test(plan_run, a_run_is_timed_by_the_callers_clock_and_reported)
{
        static loom_plan_cluster c;
        static loom_plan_report r;
        fleet(&c, 8, 0, false);
        loom_plan_workflow w = small_grpo();
        double t = 0;
        loom_plan_opts o = {.solver = LOOM_PLAN_EXACT, .seed = 1, .now = fake_now, .now_ctx = &t};
        loom_err e = {0};
        cr_assert_eq(loom_plan_run(&c, &w, &o, true, &r, &e), 0, "%s", e.msg);
        cr_assert(r.result.found && r.result.optimal);
        cr_assert_eq(r.search_s, 0.5);
        /* the free layout starts from the optimum and only keeps improvements */
        cr_assert(r.free_layout && r.free_s <= r.result.cost.iteration_s);
        cr_assert_eq(r.free_result.cost.iteration_s, r.free_s);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        loom_plan_report_print(f, "", &c, &w, &o, &r);
        fclose(f);
        char want[128];
        snprintf(want, sizeof want, "iteration %.2f s, %.0f tokens/s\n", r.result.cost.iteration_s,
                 r.result.cost.tokens_per_s);
        cr_assert(strstr(buf, "fleet: - (8 GPUs, 2 machines, 1 regions)\n"), "%s", buf);
        cr_assert(strstr(buf, "evaluations in 0.50 s (proved optimal)"), "%s", buf);
        cr_assert(strstr(buf, want), "%s", buf);
        cr_assert(strstr(buf, "group 0: "), "%s", buf);
        cr_assert(strstr(buf, "\nwhy: "), "%s", buf);
        cr_assert(strstr(buf, "free layout: "), "%s", buf);
        cr_assert_null(strstr(buf, "critic"), "GRPO has no critic: %s", buf);
        free(buf);
}

Test(plan_run, nothing_fitting_is_an_error_naming_the_evaluations)
{
        static loom_plan_cluster c;
        static loom_plan_report r;
        fleet(&c, 2, 2, false); /* two 24 GB L4s cannot hold Qwen3-14B's training state */
        loom_plan_workflow w = small_grpo();
        loom_plan_model_lookup("qwen3-14b", &w.model);
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .seed = 1, .budget = 500};
        loom_err e = {0};
        cr_assert_eq(loom_plan_run(&c, &w, &o, false, &r, &e), LOOM_ENOENT);
        cr_assert(strstr(e.msg, "no plan fits the fleet's memory"), "%s", e.msg);
        cr_assert_eq(r.search_s, 0);
}

Test(plan_run, evalrate_counts_whole_rounds_until_the_time_is_up)
{
        static loom_plan_cluster c;
        fleet(&c, 8, 0, false);
        loom_plan_workflow w = small_grpo();
        double t = 0;
        loom_plan_rate rate;
        loom_err e = {0};
        /* readings 0.5, 1.0, 1.5, 2.0: three rounds of 1000 reach 1.5 s */
        cr_assert_eq(loom_plan_evalrate(&c, &w, 1.2, fake_now, &t, &rate, &e), 0, "%s", e.msg);
        cr_assert_eq(rate.evaluations, 3000);
        cr_assert_eq(rate.elapsed_s, 1.5);
        cr_assert(rate.mean_iteration_s > 0 && isfinite(rate.mean_iteration_s));
        cr_assert_eq(loom_plan_evalrate(&c, &w, 0, fake_now, &t, &rate, &e), LOOM_EINVAL);
}

/* The sweep's loader: every scenario is an 8-GPU fleet of an A100 and an L40S machine (StreamRL
 * puts generation on one type); "fail" names a file to refuse. */
typedef struct loader {
        const char *fail;
        int calls;
} loader;

static int load(void *ctx, const char *file, loom_plan_cluster *out, loom_err *e)
{
        loader *l = ctx;
        l->calls++;
        if (l->fail && strstr(file, l->fail))
                return loom_err_set(e, LOOM_EIO, "", "%s: cannot read", file);
        fleet(out, 8, strstr(file, "s1-") ? 0 : 1, true);
        return 0;
}

static char *sweep(loom_plan_sweep_cfg *cfg, loom_plan_sweep_out *out, int *rc, loom_err *e)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        *rc = loom_plan_sweep(cfg, f, out, e);
        fclose(f);
        return buf;
}

Test(plan_run, the_sweep_plans_the_kept_scenarios_and_models)
{
        static loom_plan_sweep_out out;
        loader l = {0};
        loom_plan_sweep_cfg cfg = {.scenarios = "S1,S3",
                                   .models = "qwen3-4b",
                                   .budget = 300,
                                   .seed = 1,
                                   .load = load,
                                   .load_ctx = &l};
        loom_err e = {0};
        int rc;
        char *buf = sweep(&cfg, &out, &rc, &e);
        cr_assert_eq(rc, 0, "%s", e.msg);
        cr_assert_eq(l.calls, 2);
        cr_assert_eq(out.n, 8);
        cr_assert(!out.ablation && out.n_balance == 0);
        for (int i = 0; i < out.n; i++) {
                const loom_plan_sweep_row *r = &out.rows[i];
                cr_assert(r->scen == (i < 4 ? 0 : 2) && r->model == 0);
                cr_assert(r->hetrl > 0 && r->verl > 0);
                cr_assert(r->async ? r->streamrl > 0 : r->streamrl == 0);
        }
        cr_assert(strstr(buf, "net model ") == buf, "%s", buf);
        cr_assert(strstr(buf, "\nS3  qwen3-4b   grpo  async "), "%s", buf);
        cr_assert(strstr(buf, "hetrl async >= sync in "), "%s", buf);
        free(buf);
}

Test(plan_run, the_loaders_error_stops_the_sweep)
{
        static loom_plan_sweep_out out;
        loader l = {.fail = "s2-"};
        loom_plan_sweep_cfg cfg = {
            .models = "qwen3-4b", .budget = 100, .seed = 1, .load = load, .load_ctx = &l};
        loom_err e = {0};
        int rc;
        char *buf = sweep(&cfg, &out, &rc, &e);
        cr_assert_eq(rc, LOOM_EIO);
        cr_assert_str_eq(e.msg, "examples/plan/s2-hybrid.json: cannot read");
        cr_assert_eq(out.n, 4, "S1's rows are kept");
        cr_assert_null(strstr(buf, "hetrl async"), "no summary after an error: %s", buf);
        free(buf);
}

Test(plan_run, the_ablation_has_a_sync_ppo_and_grpo_row_per_model)
{
        static loom_plan_sweep_out out;
        loader l = {0};
        loom_plan_sweep_cfg cfg = {.scenarios = "S1",
                                   .models = "qwen3-4b",
                                   .budget = 300,
                                   .seed = 1,
                                   .balance_ablation = true,
                                   .load = load,
                                   .load_ctx = &l};
        loom_err e = {0};
        int rc;
        char *buf = sweep(&cfg, &out, &rc, &e);
        cr_assert_eq(rc, 0, "%s", e.msg);
        cr_assert(out.ablation && out.n == 0 && out.n_balance == 2);
        cr_assert(!out.balance[0].grpo && out.balance[1].grpo);
        for (int i = 0; i < 2; i++)
                cr_assert(out.balance[i].off > 0 && out.balance[i].on > 0);
        cr_assert(strstr(buf, "single-region: gain "), "%s", buf);
        cr_assert_null(strstr(buf, "cross-region"), "%s", buf);
        free(buf);
}
