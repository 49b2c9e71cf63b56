/*
 * test_plan.c - the HetRL cost model pinned to hand arithmetic (Appendix B), the ring and
 * composition rules, memory (C3), and the search's determinism and budget.
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

/* n_regions regions; devices given as (type, machine, region) triples. Intra-region 100 Gb/s,
 * 20 us; every region pair lat_ms/gbps unless set after. */
static void mk(loom_plan_cluster *c, int n, const int (*d)[3], int n_regions, double lat_ms,
               double gbps)
{
        memset(c, 0, sizeof *c);
        c->n_types = 3;
        c->types[0] = A100;
        c->types[1] = L40S;
        c->types[2] = L4;
        c->n_dev = n;
        int maxm = 0;
        for (int i = 0; i < n; i++) {
                c->dev[i] = (loom_plan_device){d[i][0], d[i][1], d[i][2], d[i][2]};
                if (d[i][1] + 1 > maxm)
                        maxm = d[i][1] + 1;
        }
        c->n_machines = maxm;
        c->n_zones = n_regions;
        c->n_regions = n_regions;
        c->intra_lat_s = 5e-6;
        for (int r = 0; r < n_regions; r++) {
                snprintf(c->region_name[r], sizeof c->region_name[r], "r%d", r);
                c->region_lat_s[r] = 20e-6;
                c->region_bw[r] = 100e9 / 8;
                for (int q = 0; q < n_regions; q++) {
                        c->pair_lat_s[r][q] = lat_ms / 1e3;
                        c->pair_bw[r][q] = gbps * 1e9 / 8;
                }
        }
}

/* Every task of the workflow in one group of the first n devices, strategy (1,1,1) on device 0
 * unless changed by the caller. */
static void one_group(loom_plan *p, int n)
{
        memset(p, 0, sizeof *p);
        p->n_groups = 1;
        p->group_size[0] = n;
        for (int i = 0; i < n; i++)
                p->group_dev[0][i] = i;
        for (int t = 0; t < LOOM_PLAN_TASKS; t++) {
                p->group[t] = 0;
                p->st[t] = (loom_plan_strategy){1, 1, 1};
                for (int i = 0; i < n; i++)
                        p->order[t][i] = i;
        }
}

Test(plan_model, qwen3_8b_layer_flops_and_weights)
{
        loom_plan_model m;
        cr_assert_eq(loom_plan_model_lookup("qwen3-8b", &m), 0);
        cr_assert_eq(m.h1, 4096);
        cr_assert_eq(m.h2, 12288);
        cr_assert_eq(m.layers, 36);
        NEAR(loom_plan_layer_flops(&m, 2048), 9.6207e11, 1e-4);
        NEAR(loom_plan_weight_bytes(&m, m.layers), 15.70e9, 1e-3);
        cr_assert_eq(loom_plan_model_lookup("qwen3-9b", &m), LOOM_ENOENT);
}

Test(plan_model, phi_interpolates_between_sum_and_max)
{
        double c[] = {1, 2, 3};
        NEAR(loom_plan_phi(c, 3, 1.0), 3.0, 1e-12);
        NEAR(loom_plan_phi(c, 3, 0.0), 6.0, 1e-12);
        NEAR(loom_plan_phi(c, 3, 0.5), 4.5, 1e-12);
}

/* Pushing Qwen3-8B's bf16 weights point to point over 10 ms, 5 Gb/s: 25.14 s. Async GRPO with
 * generation alone on GPU 0 (region 0) and the rest on GPU 1 (region 1), no TP or PP, so the
 * sync term is the p2p push alone. */
Test(plan_model, weight_push_over_wan_is_25_14_s)
{
        static const int d[][3] = {{0, 0, 0}, {0, 1, 1}};
        loom_plan_cluster c;
        mk(&c, 2, d, 2, 10, 5);
        c.types[0].hbm_gb = 400; /* room for the actor's optimizer state on one GPU */
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        w.grpo = true;
        w.async = true;
        loom_plan p;
        memset(&p, 0, sizeof p);
        p.n_groups = 2;
        p.group_size[0] = p.group_size[1] = 1;
        p.group_dev[0][0] = 0;
        p.group_dev[1][0] = 1;
        for (int t = 0; t < LOOM_PLAN_TASKS; t++) {
                p.group[t] = t == LOOM_PLAN_GEN ? 0 : 1;
                p.st[t] = (loom_plan_strategy){1, 1, 1};
                p.order[t][0] = t == LOOM_PLAN_GEN ? 0 : 1;
        }
        p.group[LOOM_PLAN_CRITIC_INF] = p.group[LOOM_PLAN_CRITIC_TRAIN] = -1;
        loom_plan_cost k;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, NULL), 0);
        NEAR(k.sync_s, 25.14, 2e-4);
        cr_assert_eq(k.reshard_s, 0);
        cr_assert(k.overlapped);
        /* Async composition: max(C1, Phi(reward, ref) + C5) + C_sync. Both inference tasks
         * share group 1 (auto eta: one after the other). */
        double rest =
            k.task_s[LOOM_PLAN_REWARD] + k.task_s[LOOM_PLAN_REF] + k.task_s[LOOM_PLAN_ACTOR_TRAIN];
        NEAR(k.rest_s, rest, 1e-12);
        double gen = k.task_s[LOOM_PLAN_GEN];
        NEAR(k.iteration_s, (gen > rest ? gen : rest) + k.sync_s, 1e-12);
}

/* Reward inference of Qwen3-8B on one A100: 3072 samples x 36 layers x 9.6207e11 FLOPs /
 * 312 TFLOP/s = 341.0 s; no TP/PP/DP terms. */
Test(plan_model, inference_compute_hand_arithmetic)
{
        static const int d[][3] = {{0, 0, 0}, {0, 0, 0}};
        loom_plan_cluster c;
        mk(&c, 2, d, 1, 0, 1);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        w.grpo = true;
        loom_plan p;
        one_group(&p, 2);
        loom_plan_cost k;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, NULL), 0);
        NEAR(k.task_s[LOOM_PLAN_REWARD], 3072.0 * 36 * 9.6207e11 / 312e12, 1e-4);
        NEAR(k.task_s[LOOM_PLAN_REWARD], 341.0, 1e-3);
        /* training is 3x the forward compute */
        NEAR(k.comp_s[LOOM_PLAN_ACTOR_TRAIN], 3 * k.task_s[LOOM_PLAN_REWARD], 1e-9);
}

/* TP=2 on one machine: cv = 2 B * 8 * 2048 * 4096 * 2 * 1/2 = 134217728 B per all-reduce; the
 * NVLink edge costs 5 us + cv / 600 GB/s; forward inference does 2 per layer per micro-batch:
 * 2 * 384 * 36 * edge. */
Test(plan_model, tp_ring_hand_arithmetic)
{
        static const int d[][3] = {{0, 0, 0}, {0, 0, 0}};
        loom_plan_cluster c;
        mk(&c, 2, d, 1, 0, 1);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        w.grpo = true;
        loom_plan p;
        one_group(&p, 2);
        p.st[LOOM_PLAN_REWARD].tp = 2;
        loom_plan_cost k;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, NULL), 0);
        double edge = 5e-6 + 134217728.0 / 600e9;
        NEAR(k.tp_s[LOOM_PLAN_REWARD], 2.0 * 384 * 36 * edge, 1e-9);
        NEAR(k.comp_s[LOOM_PLAN_REWARD], 341.02 / 2, 1e-3);
}

/* Ring bottleneck: inside a machine the NVLink edge; across machines the LAN; across three
 * regions the ring avoids the one slow pair when a region can be entered twice. */
Test(plan_model, ring_bottleneck_by_level)
{
        static const int d[][3] = {{0, 0, 0}, {0, 0, 0}, {1, 1, 0}, {1, 1, 0},
                                   {0, 2, 1}, {0, 2, 1}, {0, 3, 2}, {0, 3, 2}};
        loom_plan_cluster c;
        mk(&c, 8, d, 3, 10, 5);
        c.pair_lat_s[1][2] = c.pair_lat_s[2][1] = 0.5; /* a slow pair */
        double v = 1e6;
        int m0[] = {0, 1};
        NEAR(loom_plan_ring(&c, m0, 2, v), 5e-6 + v / 600e9, 1e-12);
        int mixed[] = {0, 2}; /* A100 machine to L40S machine: the LAN */
        NEAR(loom_plan_ring(&c, mixed, 2, v), 20e-6 + v / 12.5e9, 1e-12);
        int same_machine_mixed[] = {2, 3};
        NEAR(loom_plan_ring(&c, same_machine_mixed, 2, v), 5e-6 + v / 64e9, 1e-12);
        int three[] = {0, 1, 4, 6};
        NEAR(loom_plan_ring(&c, three, 4, v), 0.010 + v / 625e6, 1e-12);
        cr_assert_eq(loom_plan_ring(&c, three, 1, v), 0);
}

Test(plan_model, memory_constraint_c3)
{
        static const int d[][3] = {{2, 0, 0}};
        loom_plan_cluster c;
        mk(&c, 1, d, 1, 0, 1);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-14b", &w.model);
        loom_plan p;
        one_group(&p, 1);
        loom_plan_cost k;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, NULL), 0);
        cr_assert(!k.feasible);
        cr_assert(isinf(k.iteration_s));
        cr_assert_gt(k.mem_over_gb, 100);
        cr_assert(isinf(loom_plan_cost_fast(&c, &w, &p)));
}

Test(plan_model, malformed_plan_is_rejected)
{
        static const int d[][3] = {{0, 0, 0}, {0, 0, 0}};
        loom_plan_cluster c;
        mk(&c, 2, d, 1, 0, 1);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan p;
        one_group(&p, 2);
        p.st[LOOM_PLAN_REF] = (loom_plan_strategy){2, 1, 2}; /* 4 tasklets on 2 GPUs */
        loom_plan_cost k;
        loom_err e;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "reference_inference"), "%s", e.msg);
        one_group(&p, 2);
        p.order[LOOM_PLAN_GEN][0] = 1;
        p.st[LOOM_PLAN_GEN].dp = 2; /* GPU 1 twice */
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, &e), LOOM_EINVAL);
}

/* Sync PPO: C1 + Phi(C2..C4) + Phi(C5, C6) + reshard, with all tasks in one group (eta auto:
 * everything in sequence) and with an explicit eta. */
Test(plan_model, sync_ppo_composition)
{
        static const int d[][3] = {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0},
                                   {1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
        loom_plan_cluster c;
        mk(&c, 8, d, 1, 0, 1);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        loom_plan p;
        one_group(&p, 8);
        for (int t = 0; t < LOOM_PLAN_TASKS; t++)
                p.st[t] = (loom_plan_strategy){2, 2, 2};
        loom_plan_cost k;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, NULL), 0);
        cr_assert(k.feasible);
        double sum = 0;
        for (int t = 0; t < LOOM_PLAN_TASKS; t++)
                sum += k.task_s[t];
        cr_assert_gt(k.reshard_s, 0);
        NEAR(k.iteration_s, sum + k.reshard_s, 1e-12);
        w.eta = 1.0;
        loom_plan_cost k1;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k1, NULL), 0);
        double inf = fmax(k.task_s[1], fmax(k.task_s[2], k.task_s[3]));
        double tr = fmax(k.task_s[4], k.task_s[5]);
        NEAR(k1.iteration_s, k.task_s[0] + inf + tr + k.reshard_s, 1e-12);
        /* training pays DP rings and bubbles; generation pays decoding */
        cr_assert_gt(k.dp_s[LOOM_PLAN_ACTOR_TRAIN], 0);
        cr_assert_gt(k.bubble_s[LOOM_PLAN_ACTOR_TRAIN], 0);
        cr_assert_gt(k.hbm_s[LOOM_PLAN_GEN], 0);
        cr_assert_eq(k.dp_s[LOOM_PLAN_REWARD], 0);
        /* async with generation colocated cannot overlap: same as sync */
        w.eta = -1;
        w.async = true;
        loom_plan_cost ka;
        cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &ka, NULL), 0);
        cr_assert(!ka.overlapped);
        NEAR(ka.iteration_s, k.iteration_s, 1e-12);
}

Test(plan_search, bell_numbers)
{
        int g[203][LOOM_PLAN_TASKS];
        cr_assert_eq(loom_plan_groupings(6, g, 203), 203);
        cr_assert_eq(loom_plan_groupings(4, g, 203), 15);
        cr_assert_eq(loom_plan_groupings(1, g, 203), 1);
}

static void small16(loom_plan_cluster *c)
{
        int d[16][3];
        for (int i = 0; i < 16; i++) {
                d[i][0] = i < 8 ? 0 : i < 12 ? 1 : 2;
                d[i][1] = i < 8 ? 0 : i < 12 ? 1 : 2;
                d[i][2] = 0;
        }
        mk(c, 16, (const int(*)[3])d, 1, 0, 1);
}

Test(plan_search, deterministic_and_counts_evaluations)
{
        loom_plan_cluster c;
        small16(&c);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .seed = 7, .budget = 20000};
        loom_plan_result a, b;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &a, NULL), 0);
        cr_assert_eq(loom_plan_search(&c, &w, &o, &b, NULL), 0);
        cr_assert(a.found);
        cr_assert_eq(a.evaluations, 20000);
        cr_assert_eq(memcmp(&a.plan, &b.plan, sizeof a.plan), 0);
        cr_assert_eq(a.cost.iteration_s, b.cost.iteration_s);
        cr_assert_eq(a.arms_groupings, 203);
}

/* Above one round's evaluations the search runs rounds of a fixed size and keeps the best, so
 * a run is a prefix of any longer one with the same seed: more evaluations never end worse, the
 * result is reproducible. */
Test(plan_search, larger_budgets_never_end_worse)
{
        loom_plan_cluster c;
        small16(&c);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .seed = 3, .round_evals = 4000};
        double prev = INFINITY;
        loom_plan_result r, again;
        for (int64_t b = 4000; b <= 40000; b += 3000) {
                o.budget = b;
                cr_assert_eq(loom_plan_search(&c, &w, &o, &r, NULL), 0);
                cr_assert(r.found);
                cr_assert_eq(r.evaluations, b);
                cr_assert_leq(r.cost.iteration_s, prev, "budget %lld: %f after %f", (long long)b,
                              r.cost.iteration_s, prev);
                prev = r.cost.iteration_s;
        }
        cr_assert_eq(loom_plan_search(&c, &w, &o, &again, NULL), 0);
        cr_assert_eq(memcmp(&r.plan, &again.plan, sizeof r.plan), 0);
}

Test(plan_search, sha_ea_beats_baselines_on_a_mixed_fleet)
{
        loom_plan_cluster c;
        small16(&c);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .seed = 1, .budget = 60000};
        loom_plan_result h, v;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &h, NULL), 0);
        o.solver = LOOM_PLAN_VERL;
        o.budget = 0;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &v, NULL), 0);
        cr_assert(h.found && v.found);
        cr_assert_lt(h.cost.iteration_s, v.cost.iteration_s);
        /* verl keeps every task on every GPU with one strategy */
        cr_assert_eq(v.plan.n_groups, 1);
        for (int t = 1; t < LOOM_PLAN_TASKS; t++)
                cr_assert_eq(memcmp(&v.plan.st[t], &v.plan.st[0], sizeof v.plan.st[0]), 0);
}

/* Async PPO on the mixed 16-GPU fleet: the optimum puts generation alone on the L4s and every
 * other task on one group of the rest, a grouping the halving ranks below a three-group one;
 * the regrouping after the halving (merging two groups) has to find it. */
Test(plan_search, sha_ea_reaches_the_exact_optimum_on_async_ppo)
{
        loom_plan_cluster c;
        small16(&c);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-8b", &w.model);
        w.async = true;
        loom_plan_opts o = {.solver = LOOM_PLAN_EXACT, .seed = 1};
        loom_plan_result x, h;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &x, NULL), 0);
        cr_assert(x.found && x.optimal);
        o.solver = LOOM_PLAN_SHA_EA;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &h, NULL), 0);
        cr_assert(h.found);
        cr_assert_geq(h.cost.iteration_s, x.cost.iteration_s * (1 - 1e-9));
        cr_assert_leq(h.cost.iteration_s, x.cost.iteration_s * 1.01,
                      "sha-ea %.3f s, optimum %.3f s", h.cost.iteration_s, x.cost.iteration_s);
}

Test(plan_search, streamrl_splits_by_type)
{
        loom_plan_cluster c;
        small16(&c);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        loom_plan_model_lookup("qwen3-4b", &w.model);
        w.async = true;
        loom_plan_opts o = {.solver = LOOM_PLAN_STREAMRL};
        loom_plan_result r;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &r, NULL), 0);
        cr_assert(r.found);
        cr_assert_eq(r.plan.n_groups, 2);
        for (int g = 0; g < 2; g++)
                for (int i = 1; i < r.plan.group_size[g]; i++)
                        cr_assert_eq(c.dev[r.plan.group_dev[g][i]].type,
                                     c.dev[r.plan.group_dev[g][0]].type);
        cr_assert(r.cost.overlapped);
}

Test(plan_search, bad_inputs_name_the_field)
{
        loom_plan_cluster c;
        small16(&c);
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        w.batch = 0;
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .budget = 10};
        loom_plan_result r;
        loom_err e;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &r, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "batch");
        loom_plan_workflow_default(&w);
        c.dev[3].type = 9;
        cr_assert_eq(loom_plan_search(&c, &w, &o, &r, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "devices");
}

/* The weight push is priced per link level; it must equal the minimum over every pair of
 * actor-training and generation GPUs. Random plans on a three-region fleet. */
Test(plan_model, p2p_by_level_equals_all_pairs)
{
        int d[24][3];
        for (int i = 0; i < 24; i++) {
                d[i][0] = i % 3;
                d[i][1] = i / 4;
                d[i][2] = i / 8;
        }
        loom_plan_cluster c;
        mk(&c, 24, (const int(*)[3])d, 3, 10, 5);
        c.pair_lat_s[0][2] = c.pair_lat_s[2][0] = 0.03;
        c.pair_bw[1][2] = c.pair_bw[2][1] = 1e9 / 8;
        c.types[0].hbm_gb = c.types[1].hbm_gb = c.types[2].hbm_gb = 1000;
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        w.grpo = true;
        w.async = true;
        uint64_t rng = 5;
        int checked = 0;
        for (int n = 0; n < 400; n++) {
                loom_plan p;
                cr_assert_eq(loom_plan_sample(&c, &w, &rng, &p), 0);
                if (p.group[LOOM_PLAN_GEN] == p.group[LOOM_PLAN_ACTOR_TRAIN])
                        continue;
                loom_plan_cost k;
                cr_assert_eq(loom_plan_evaluate(&c, &w, &p, &k, NULL), 0);
                const loom_plan_strategy *a = &p.st[LOOM_PLAN_ACTOR_TRAIN],
                                         *g = &p.st[LOOM_PLAN_GEN];
                double v = loom_plan_weight_bytes(&w.model, w.model.layers), best = INFINITY;
                for (int x = 0; x < a->dp * a->pp * a->tp; x++)
                        for (int y = 0; y < g->dp * g->pp * g->tp; y++) {
                                double lat, bw;
                                loom_plan_link(&c, p.order[LOOM_PLAN_ACTOR_TRAIN][x],
                                               p.order[LOOM_PLAN_GEN][y], &lat, &bw);
                                best = fmin(best, lat + v / bw);
                        }
                /* sync = min all-gather(actor) + max broadcast(generation) + p2p */
                int nta = a->pp * a->tp, ntg = g->pp * g->tp;
                double ag = INFINITY, bc = 0;
                for (int i = 0; i < a->dp; i++)
                        ag = fmin(ag, nta > 1 ? loom_plan_ring(
                                                    &c, p.order[LOOM_PLAN_ACTOR_TRAIN] + i * nta,
                                                    nta, v * (nta - 1) / nta)
                                              : 0);
                for (int i = 0; i < g->dp; i++)
                        bc = fmax(bc, ntg > 1 ? loom_plan_ring(&c, p.order[LOOM_PLAN_GEN] + i * ntg,
                                                               ntg, v * (ntg - 1) / ntg)
                                              : 0);
                NEAR(k.sync_s, ag + bc + best, 1e-12);
                checked++;
        }
        cr_assert_gt(checked, 50);
}

/* ---- the exact solver against brute force on tiny fleets ----
 * Every task grouping, every assignment of every GPU to a group, and every (dp, pp, tp) that
 * uses all of the group's GPUs (heads, KV heads and layers divisible, dp at most the samples),
 * priced by loom_plan_evaluate with each group's GPUs in index order (the fleets below list them
 * by region, machine and type, the solver's rank layout). Written without the solver's code. */
typedef struct brute {
        const loom_plan_cluster *c;
        const loom_plan_workflow *w;
        int tasks[LOOM_PLAN_TASKS], nt, ng;
        int rgs[LOOM_PLAN_TASKS];
        int owner[LOOM_PLAN_MAX_DEV];
        loom_plan p;
        double best;
        long plans;
} brute;

static bool strat_ok(const loom_plan_workflow *w, loom_plan_strategy s)
{
        const loom_plan_model *m = &w->model;
        return m->heads % s.tp == 0 && m->kv_heads % s.tp == 0 && m->layers % s.pp == 0 &&
               s.dp <= w->batch * w->responses;
}

static void brute_strats(brute *b, int i)
{
        if (i == b->nt) {
                loom_plan_cost cost;
                loom_err e;
                cr_assert_eq(loom_plan_evaluate(b->c, b->w, &b->p, &cost, &e), 0, "%s", e.msg);
                b->plans++;
                if (cost.feasible && cost.iteration_s < b->best)
                        b->best = cost.iteration_s;
                return;
        }
        int t = b->tasks[i], n = b->p.group_size[b->p.group[t]];
        for (int dp = 1; dp <= n; dp++)
                for (int pp = 1; dp * pp <= n; pp++) {
                        if (n % (dp * pp))
                                continue;
                        loom_plan_strategy s = {dp, pp, n / (dp * pp)};
                        if (!strat_ok(b->w, s))
                                continue;
                        b->p.st[t] = s;
                        brute_strats(b, i + 1);
                }
}

static void brute_assign(brute *b, int d)
{
        if (d == b->c->n_dev) {
                memset(&b->p, 0, sizeof b->p);
                b->p.n_groups = b->ng;
                for (int t = 0; t < LOOM_PLAN_TASKS; t++)
                        b->p.group[t] = -1;
                for (int k = 0; k < b->c->n_dev; k++) {
                        int g = b->owner[k];
                        b->p.group_dev[g][b->p.group_size[g]++] = k;
                }
                for (int g = 0; g < b->ng; g++)
                        if (!b->p.group_size[g])
                                return;
                for (int i = 0; i < b->nt; i++) {
                        int t = b->tasks[i], g = b->rgs[i];
                        b->p.group[t] = g;
                        memcpy(b->p.order[t], b->p.group_dev[g], sizeof b->p.order[t]);
                }
                brute_strats(b, 0);
                return;
        }
        for (int g = 0; g < b->ng; g++) {
                b->owner[d] = g;
                brute_assign(b, d + 1);
        }
}

static double brute_force(const loom_plan_cluster *c, const loom_plan_workflow *w, long *plans)
{
        brute b = {.c = c, .w = w, .best = INFINITY};
        b.nt = loom_plan_workflow_tasks(w, b.tasks);
        int rgs[203][LOOM_PLAN_TASKS];
        int n = loom_plan_groupings(b.nt, rgs, 203);
        for (int k = 0; k < n; k++) {
                memcpy(b.rgs, rgs[k], sizeof b.rgs);
                b.ng = 0;
                for (int i = 0; i < b.nt; i++)
                        if (b.rgs[i] + 1 > b.ng)
                                b.ng = b.rgs[i] + 1;
                if (b.ng <= c->n_dev)
                        brute_assign(&b, 0);
        }
        *plans = b.plans;
        return b.best;
}

static void exact_matches_brute_force(const loom_plan_cluster *c, const char *model,
                                      const char *workflow, bool async)
{
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        cr_assert_eq(loom_plan_model_lookup(model, &w.model), 0);
        w.grpo = !strcmp(workflow, "grpo");
        w.async = async;
        long plans;
        double want = brute_force(c, &w, &plans);
        cr_assert(isfinite(want), "no plan fits: pick a fleet where one does");
        loom_plan_opts o = {.solver = LOOM_PLAN_EXACT, .seed = 1};
        loom_plan_result x;
        loom_err e;
        cr_assert_eq(loom_plan_search(c, &w, &o, &x, &e), 0, "%s", e.msg);
        cr_assert(x.found && x.optimal);
        cr_assert(fabs(x.cost.iteration_s - want) <= want * 1e-9,
                  "%s %s %s, %d GPUs: exact %.9g s, brute force %.9g s over %ld plans", model,
                  workflow, async ? "async" : "sync", c->n_dev, x.cost.iteration_s, want, plans);
}

Test(plan_exact, matches_brute_force_on_4_gpus)
{
        /* two A100 on one machine, two L40S on another */
        static const int d[4][3] = {{0, 0, 0}, {0, 0, 0}, {1, 1, 0}, {1, 1, 0}};
        loom_plan_cluster c;
        mk(&c, 4, d, 1, 0, 1);
        exact_matches_brute_force(&c, "qwen3-4b", "grpo", false);
        exact_matches_brute_force(&c, "qwen3-4b", "grpo", true);
        exact_matches_brute_force(&c, "qwen3-4b", "ppo", false);
}

Test(plan_exact, matches_brute_force_on_5_and_6_gpus)
{
        /* three kinds on three machines, two regions with a slow link between them */
        static const int d5[5][3] = {{0, 0, 0}, {0, 0, 0}, {1, 1, 0}, {2, 2, 1}, {2, 2, 1}};
        loom_plan_cluster c;
        mk(&c, 5, d5, 2, 30, 5);
        exact_matches_brute_force(&c, "qwen3-4b", "grpo", false);
        static const int d6[6][3] = {{0, 0, 0}, {0, 0, 0}, {1, 1, 0},
                                     {1, 1, 0}, {2, 2, 0}, {2, 2, 0}};
        mk(&c, 6, d6, 1, 0, 1);
        exact_matches_brute_force(&c, "qwen3-4b", "grpo", true);
}
