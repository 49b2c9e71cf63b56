/*
 * test_plan_balance.c - HetRL's load balancing in the cost model and the search: rollout batch
 * sizes by replica speed, uneven layer counts across pipeline stages, equal sample counts for
 * the other tasks; balancing never changes whether a plan fits and never makes it slower, and
 * the exact solver still proves its optimum with it.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loom/plan.h"

#define NEAR(a, b, rel) cr_assert(fabs((a) - (b)) <= (rel)*fabs(b), "%.9g vs %.9g", (a), (b))

static const loom_plan_gpu A100 = {"A100", 312, 40, 2039, 600};
static const loom_plan_gpu L40S = {"L40S", 366, 48, 864, 64};
static const loom_plan_gpu L4 = {"L4", 121, 24, 300, 64};

/* One region, 100 Gb/s between machines; dev i has type type[i] on machine mach[i]. */
static void mk(loom_plan_cluster *c, int n, const int *type, const int *mach)
{
        memset(c, 0, sizeof *c);
        c->n_types = 3;
        c->types[0] = A100;
        c->types[1] = L40S;
        c->types[2] = L4;
        c->n_dev = n;
        for (int i = 0; i < n; i++) {
                c->dev[i] = (loom_plan_device){type[i], mach[i], 0, 0};
                if (mach[i] + 1 > c->n_machines)
                        c->n_machines = mach[i] + 1;
        }
        c->n_zones = c->n_regions = 1;
        snprintf(c->region_name[0], sizeof c->region_name[0], "r0");
        c->intra_lat_s = 5e-6;
        c->region_lat_s[0] = 20e-6;
        c->region_bw[0] = 100e9 / 8;
}

/* A small model so every task fits on one GPU: 36 layers, h 1024. */
static void small_model(loom_plan_workflow *w)
{
        loom_plan_workflow_default(w);
        w->model = (loom_plan_model){"tiny", 1024, 4096, 36, 16, 8, 64};
        w->grpo = true;
}

/* GRPO: each task in its own group... all on devices 0..n-1 with (1,1,1) on device 0, except
 * task t with strategy st over the first st.dp*st.pp*st.tp devices. */
static void plan_with(loom_plan *p, int n, int t, loom_plan_strategy st)
{
        memset(p, 0, sizeof *p);
        p->n_groups = 1;
        p->group_size[0] = n;
        for (int i = 0; i < n; i++)
                p->group_dev[0][i] = i;
        for (int x = 0; x < LOOM_PLAN_TASKS; x++) {
                p->group[x] = 0;
                p->st[x] = (loom_plan_strategy){1, 1, 1};
                for (int i = 0; i < n; i++)
                        p->order[x][i] = i;
        }
        p->st[t] = st;
}

static void eval2(const loom_plan_cluster *c, loom_plan_workflow *w, const loom_plan *p,
                  loom_plan_cost *off, loom_plan_cost *on)
{
        w->balance = false;
        cr_assert_eq(loom_plan_evaluate(c, w, p, off, NULL), 0);
        w->balance = true;
        cr_assert_eq(loom_plan_evaluate(c, w, p, on, NULL), 0);
        cr_assert(off->feasible && on->feasible);
}

/* Rollout on an A100 and an L4 replica: the balanced batch split finishes when both finish,
 * between the all-A100 time and the uniform split's (set by the L4). */
Test(plan_balance, rollout_batch_follows_replica_speed)
{
        const int type[] = {0, 2}, mach[] = {0, 1};
        loom_plan_cluster c;
        mk(&c, 2, type, mach);
        loom_plan_workflow w;
        small_model(&w);
        loom_plan p;
        plan_with(&p, 2, LOOM_PLAN_GEN, (loom_plan_strategy){2, 1, 1});
        loom_plan_cost off, on;
        eval2(&c, &w, &p, &off, &on);
        cr_assert(on.balanced[LOOM_PLAN_GEN]);
        cr_assert_lt(on.task_s[LOOM_PLAN_GEN], off.task_s[LOOM_PLAN_GEN] * 0.9);
        /* both replicas on A100s: the lower limit of any split */
        const int fast[] = {0, 0};
        loom_plan_cluster cf;
        mk(&cf, 2, fast, mach);
        loom_plan_cost a, b;
        eval2(&cf, &w, &p, &a, &b);
        cr_assert_leq(b.task_s[LOOM_PLAN_GEN], a.task_s[LOOM_PLAN_GEN]);
        cr_assert_gt(on.task_s[LOOM_PLAN_GEN], b.task_s[LOOM_PLAN_GEN]);
        /* the other phases are untouched */
        NEAR(on.task_s[LOOM_PLAN_REWARD], off.task_s[LOOM_PLAN_REWARD], 1e-12);
}

/* Inference and training keep equal sample counts per replica (longer sequences go to faster
 * GPUs, and every sequence is priced at its limit): no change. */
Test(plan_balance, other_tasks_keep_equal_counts)
{
        const int type[] = {0, 2}, mach[] = {0, 1};
        loom_plan_cluster c;
        mk(&c, 2, type, mach);
        loom_plan_workflow w;
        small_model(&w);
        loom_plan p;
        plan_with(&p, 2, LOOM_PLAN_REWARD, (loom_plan_strategy){2, 1, 1});
        loom_plan_cost off, on;
        eval2(&c, &w, &p, &off, &on);
        cr_assert(!on.balanced[LOOM_PLAN_REWARD]);
        NEAR(on.task_s[LOOM_PLAN_REWARD], off.task_s[LOOM_PLAN_REWARD], 1e-12);
}

/* Two pipeline stages on an A100 (312 TFLOPS) and an L4 (121): 36 layers split 26/10, the
 * min-max of 26/312 = 0.0833 and 10/121 = 0.0826 (25/11 would leave 0.0909 on the L4); the
 * stage compute shrinks from 18/121 to 26/312 of the layers' work. */
Test(plan_balance, layers_follow_stage_speed)
{
        const int type[] = {0, 2}, mach[] = {0, 0};
        loom_plan_cluster c;
        mk(&c, 2, type, mach);
        loom_plan_workflow w;
        small_model(&w);
        loom_plan p;
        plan_with(&p, 2, LOOM_PLAN_REWARD, (loom_plan_strategy){1, 2, 1});
        loom_plan_cost off, on;
        eval2(&c, &w, &p, &off, &on);
        cr_assert(on.balanced[LOOM_PLAN_REWARD]);
        cr_assert_eq(on.layers[LOOM_PLAN_REWARD][0], 26);
        cr_assert_eq(on.layers[LOOM_PLAN_REWARD][1], 10);
        cr_assert_eq(off.layers[LOOM_PLAN_REWARD][0], 18);
        NEAR(on.comp_s[LOOM_PLAN_REWARD] / off.comp_s[LOOM_PLAN_REWARD],
             (26.0 / 312) / (18.0 / 121), 1e-9);
}

/* Over random plans of a mixed fleet: balancing never changes whether a plan fits (C3 is
 * checked with even layers, uneven ones are kept only where they fit too) and never makes a
 * plan slower. */
Test(plan_balance, never_slower_never_changes_feasibility)
{
        int type[16], mach[16];
        for (int i = 0; i < 16; i++) {
                type[i] = mach[i] = i < 8 ? 0 : i < 12 ? 1 : 2;
        }
        loom_plan_cluster c;
        mk(&c, 16, type, mach);
        uint64_t rng = 42;
        int balanced = 0, feasible = 0;
        for (int k = 0; k < 1500; k++) {
                loom_plan_workflow w;
                loom_plan_workflow_default(&w);
                loom_plan_model_lookup(k % 2 ? "qwen3-4b" : "qwen3-8b", &w.model);
                w.grpo = k % 3 == 0;
                w.async = k % 5 == 0;
                loom_plan p;
                cr_assert_eq(loom_plan_sample(&c, &w, &rng, &p), 0);
                loom_plan_cost off, on;
                w.balance = false;
                cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &off, NULL), 0);
                w.balance = true;
                cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &on, NULL), 0);
                cr_assert_eq(on.feasible, off.feasible);
                if (!off.feasible)
                        continue;
                feasible++;
                cr_assert_leq(on.iteration_s, off.iteration_s * (1 + 1e-12));
                balanced += on.iteration_s < off.iteration_s * (1 - 1e-9);
        }
        cr_assert_gt(feasible, 150);
        cr_assert_gt(balanced, feasible / 10, "%d of %d plans gained", balanced, feasible);
}

/* The exact solver, balancing on: it still proves its optimum, the optimum is no slower than
 * without, and SHA-EA never lands below it (its bound cut nothing better off). */
Test(plan_balance, exact_solver_still_proves_the_optimum)
{
        int type[16], mach[16];
        for (int i = 0; i < 16; i++)
                type[i] = mach[i] = i < 8 ? 0 : i < 12 ? 1 : 2;
        loom_plan_cluster c;
        mk(&c, 16, type, mach);
        loom_plan_workflow w; /* GRPO sync, Qwen3-4B: seconds under the sanitizers */
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        w.grpo = true;
        loom_plan_opts o = {.solver = LOOM_PLAN_EXACT, .seed = 1};
        loom_plan_result off, on, h;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &off, NULL), 0);
        w.balance = true;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &on, NULL), 0);
        cr_assert(off.optimal && on.optimal && on.found);
        cr_assert_lt(on.cost.iteration_s, off.cost.iteration_s * 0.99,
                     "balanced optimum %.3f s, unbalanced %.3f s", on.cost.iteration_s,
                     off.cost.iteration_s);
        o.solver = LOOM_PLAN_SHA_EA;
        o.budget = 30000;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &h, NULL), 0);
        cr_assert_geq(h.cost.iteration_s, on.cost.iteration_s * (1 - 1e-9),
                      "sha-ea %.4f below the proved optimum %.4f", h.cost.iteration_s,
                      on.cost.iteration_s);
}

/* Same seed and budget, same balanced plan. */
Test(plan_balance, balanced_search_is_deterministic)
{
        int type[16], mach[16];
        for (int i = 0; i < 16; i++)
                type[i] = mach[i] = i < 8 ? 0 : i < 12 ? 1 : 2;
        loom_plan_cluster c;
        mk(&c, 16, type, mach);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        w.balance = true;
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .seed = 3, .budget = 8000};
        loom_plan_result a, b;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &a, NULL), 0);
        cr_assert_eq(loom_plan_search(&c, &w, &o, &b, NULL), 0);
        cr_assert(a.found);
        cr_assert_eq(a.evaluations, 8000);
        cr_assert_eq(memcmp(&a.plan, &b.plan, sizeof a.plan), 0);
        cr_assert_eq(a.cost.iteration_s, b.cost.iteration_s);
}
