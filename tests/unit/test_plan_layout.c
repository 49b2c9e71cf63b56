/*
 * test_plan_layout.c - the local search outside the layout rule (loom_plan_free_layout): it
 * never ends above its start, what it returns is a valid plan priced at the cost it reports,
 * and on the mixed 16-GPU fleet it finds a plan below the exact solver's optimum within the
 * rule (the rule has a price there).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loom/plan.h"

static const loom_plan_gpu A100 = {"A100", 312, 40, 2039, 600};
static const loom_plan_gpu L40S = {"L40S", 366, 48, 864, 64};
static const loom_plan_gpu L4 = {"L4", 121, 24, 300, 64};

/* examples/plan/small-16.json: 8 A100, 4 L40S, 4 L4 on three machines of one region. */
static void small16(loom_plan_cluster *c)
{
        memset(c, 0, sizeof *c);
        c->n_types = 3;
        c->types[0] = A100;
        c->types[1] = L40S;
        c->types[2] = L4;
        c->n_dev = 16;
        for (int i = 0; i < 16; i++) {
                int k = i < 8 ? 0 : i < 12 ? 1 : 2;
                c->dev[i] = (loom_plan_device){k, k, 0, 0};
        }
        c->n_machines = 3;
        c->n_zones = c->n_regions = 1;
        snprintf(c->region_name[0], sizeof c->region_name[0], "r0");
        c->intra_lat_s = 5e-6;
        c->region_lat_s[0] = 20e-6;
        c->region_bw[0] = 100e9 / 8;
}

Test(plan_layout, free_layout_prices_what_it_returns_and_beats_the_rule)
{
        loom_plan_cluster c;
        small16(&c);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        loom_plan_opts o = {.solver = LOOM_PLAN_EXACT, .seed = 1};
        loom_plan_result x;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &x, NULL), 0);
        cr_assert(x.found && x.optimal);
        loom_plan p = x.plan;
        double v;
        cr_assert_eq(loom_plan_free_layout(&c, &w, &p, 400000, &v), 0);
        cr_assert_leq(v, x.cost.iteration_s);
        loom_plan_cost k;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, NULL), 0);
        cr_assert(k.feasible);
        cr_assert_eq(k.iteration_s, v);
        cr_assert_lt(v, x.cost.iteration_s * 0.99, "free %.3f s vs the rule's optimum %.3f s", v,
                     x.cost.iteration_s);
}

Test(plan_layout, a_plan_that_does_not_fit_is_refused)
{
        loom_plan_cluster c;
        small16(&c);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-14b", &w.model);
        loom_plan p;
        memset(&p, 0, sizeof p);
        p.n_groups = 1;
        p.group_size[0] = 1;
        p.group_dev[0][0] = 15; /* one L4 for every 14B task */
        for (int t = 0; t < LOOM_PLAN_TASKS; t++)
                p.st[t] = (loom_plan_strategy){1, 1, 1}, p.order[t][0] = 15;
        double v = 0;
        cr_assert_eq(loom_plan_free_layout(&c, &w, &p, 1000, &v), LOOM_EINVAL);
}
