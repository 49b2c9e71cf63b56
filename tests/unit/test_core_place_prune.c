/*
 * test_core_place_prune.c - the bounds multi-rate placement uses to skip simulations never
 * reject what the simulation would accept: the gap bounds hold against loom_meta_eval on random
 * groups, and a decision taken with pruning (no candidate list) is the one taken with every
 * candidate simulated (record_candidates), submission after submission on random workloads.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "loom/group.h"
#include "loom/sched.h"

#include "test_rng.h"

/* Random multi-rate groups (multi-node rollouts, sync phases, warm switches): every member's
 * simulated longest gap is at least loom_meta_gap_bound's, and at least its training plus
 * ceil(r_k / r_i) trainings of any other member k (the pigeonhole bound placement closes its
 * rates under). */
Test(place_prune, gap_bounds_hold_against_the_simulation)
{
        rng_state = 0x9a9b0u;
        int checked = 0, tight = 0;
        for (int trial = 0; trial < 3000; trial++) {
                int n = (int)uniform(2, 6), R = (int)uniform(1, 3);
                int nodes[8][3], rates[8], slots = 0;
                loom_meta_job j[8];
                for (int i = 0; i < n; i++) {
                        int k = R > 1 && uniform(0, 4) == 0 ? 2 : 1;
                        nodes[i][0] = (int)uniform(0, R - 1);
                        if (k == 2)
                                nodes[i][1] = (nodes[i][0] + 1) % R;
                        if (k == 2 && nodes[i][1] < nodes[i][0]) {
                                nodes[i][1] = nodes[i][0];
                                nodes[i][0] = 0;
                        }
                        j[i] = (loom_meta_job){uniform(1, 600) * 1000,
                                               uniform(1, 600) * 1000,
                                               uniform(0, 3) ? 0 : uniform(1, 60) * 1000,
                                               k,
                                               nodes[i],
                                               0,
                                               0,
                                               0};
                        rates[i] = (int)uniform(1, 8);
                        slots += rates[i];
                }
                if (slots > LOOM_META_MAX_SLOTS)
                        continue;
                loom_us warm = uniform(0, 3) ? 0 : uniform(1, 20) * 1000;
                loom_us t, gaps[8], lb[8];
                cr_assert_eq(loom_meta_eval(j, rates, n, R, warm, &t, gaps, NULL), 0);
                cr_assert_eq(loom_meta_gap_bound(j, rates, n, lb), 0);
                for (int i = 0; i < n; i++) {
                        cr_assert_geq(gaps[i], lb[i], "trial %d member %d: gap %lld < bound %lld",
                                      trial, i, (long long)gaps[i], (long long)lb[i]);
                        tight += gaps[i] == lb[i];
                        for (int k = 0; k < n; k++) {
                                if (k == i)
                                        continue;
                                loom_us per = (rates[k] + rates[i] - 1) / rates[i];
                                cr_assert_geq(gaps[i], j[i].t_train + per * j[k].t_train,
                                              "trial %d: member %d's gap %lld holds fewer than "
                                              "%lld of member %d's trainings",
                                              trial, i, (long long)gaps[i], (long long)per, k);
                        }
                        checked++;
                }
        }
        cr_assert_gt(checked, 5000);
        cr_assert_gt(tight, 100, "the bound is often exact, not vacuous (%d of %d)", tight,
                     checked);
}

Test(place_prune, gap_bound_arguments)
{
        int node = 0;
        loom_meta_job j[2] = {{100, 200, 0, 1, &node, 0, 0, 0}, {300, 50, 10, 1, &node, 0, 0, 0}};
        loom_us lb[2];
        cr_assert_eq(loom_meta_gap_bound(j, (int[]){1, 1}, 2, lb), 0);
        /* rate 1: the whole pool's work, or the member's own iteration if longer */
        cr_assert_eq(lb[0], 300);
        cr_assert_eq(lb[1], 360);
        cr_assert_eq(loom_meta_gap_bound(j, (int[]){1, 17}, 2, lb), LOOM_EINVAL);
        cr_assert_eq(loom_meta_gap_bound(NULL, NULL, 2, lb), LOOM_EINVAL);
        cr_assert_eq(loom_meta_gap_bound(j, NULL, 0, lb), LOOM_EINVAL);
}

/* Draw as `loom bench placement` does (one node per pool, no sync, unbounded, Table 2
 * working sets; and no job leaves) rather than with the wider mix below. */
static bool bench_like;

/* A WEAVE Table 6 "Mixed" job (the placement benchmark's), with what the simulator adds: a
 * bounded iteration count for some, a sync phase for some, and two rollout nodes for some. */
static void draw(int i, loom_job_spec *sp)
{
        static const double t6[3][3][4] = {
            {{50, 100, 50, 100}, {100, 200, 100, 200}, {200, 300, 200, 300}},
            {{100, 200, 25, 50}, {200, 400, 50, 100}, {400, 600, 100, 200}},
            {{25, 50, 100, 200}, {50, 100, 200, 400}, {100, 200, 400, 600}},
        };
        const double *t = t6[uniform(0, 2)][uniform(0, 2)];
        loom_job_spec_init(sp);
        snprintf(sp->id, sizeof sp->id, "j%d", i);
        sp->rollout_gpus = uniform(0, 7) ? 8 : 16;
        sp->train_gpus = 8;
        sp->t_roll = loom_us_from_s((double)uniform((int64_t)t[0], (int64_t)t[1]));
        sp->t_train = loom_us_from_s((double)uniform((int64_t)t[2], (int64_t)t[3]));
        sp->t_sync = uniform(0, 3) ? 0 : loom_us_from_s((double)uniform(1, 30));
        sp->slo = 1.0 + (double)uniform(0, 1000) / 1000.0;
        sp->iterations = uniform(0, 1) ? 0 : uniform(5, 400);
        sp->mem_rollout = (uint64_t)uniform(20, 400) * LOOM_GB;
        sp->mem_train = (uint64_t)uniform(20, 400) * LOOM_GB;
        if (bench_like) {
                static const double models[] = {3, 7, 14, 32};
                double b = models[uniform(0, 3)];
                sp->rollout_gpus = 8;
                sp->t_sync = 0;
                sp->iterations = 0;
                sp->mem_rollout = loom_table2_mem_rollout(b);
                sp->mem_train = loom_table2_mem_train(b);
        }
}

static void same_decision(const loom_decision *a, const loom_decision *b, int job)
{
        cr_assert_eq(a->kind, b->kind, "job %d: %s / %s", job, a->reason, b->reason);
        cr_assert_eq(a->group, b->group, "job %d: %s / %s", job, a->reason, b->reason);
        cr_assert_eq(a->n_rollout_nodes, b->n_rollout_nodes, "job %d", job);
        for (int i = 0; i < a->n_rollout_nodes; i++)
                cr_assert_eq(a->rollout_nodes[i], b->rollout_nodes[i], "job %d", job);
        cr_assert_eq(a->n_train_nodes, b->n_train_nodes, "job %d", job);
        cr_assert_eq(a->t_meta, b->t_meta, "job %d", job);
        cr_assert_eq(a->rate, b->rate, "job %d", job);
        cr_assert_eq(a->marginal_cost_per_hour, b->marginal_cost_per_hour, "job %d", job);
        cr_assert_eq(a->n_rerated, b->n_rerated, "job %d", job);
        for (int i = 0; i < a->n_rerated; i++) {
                cr_assert_eq(a->rerated[i], b->rerated[i], "job %d", job);
                cr_assert_eq(a->rerated_rate[i], b->rerated_rate[i], "job %d", job);
        }
        cr_assert_str_eq(a->reason, b->reason, "job %d", job);
}

/* Place jobs one by one (some leave again); before each placement the pruned search and the
 * full one must choose the same. rate_search_open 0 is the default (a deep rate search in
 * clusters this small), 1 makes every search with two open groups or more a wide one. Returns
 * how many decisions were compared. */
static int cross_check(uint64_t seed, int jobs, loom_us warm, int max_group, int rate_search_open)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        cr_assert(po.multirate, "multi-rate is the default");
        po.warm_switch = warm;
        po.max_group_size = max_group;
        po.rate_search_open = rate_search_open;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        cr_assert_not_null(s);
        rng_state = seed;
        loom_job_id ids[4096];
        int n_ids = 0, compared = 0;
        loom_decision fast, full;
        loom_decision_init(&fast, false);
        loom_decision_init(&full, true);
        loom_action a;
        for (int i = 0; i < jobs; i++) {
                loom_job_spec sp;
                draw(i, &sp);
                cr_assert_eq(loom_sched_decide(s, &sp, &fast, NULL), 0);
                cr_assert_eq(loom_sched_decide(s, &sp, &full, NULL), 0);
                same_decision(&fast, &full, i);
                compared++;
                cr_assert_eq(loom_sched_submit(s, 0, &sp, &fast, &ids[n_ids], NULL), 0);
                n_ids++;
                if (n_ids > 8 && !bench_like && uniform(0, 5) == 0) {
                        int v = (int)uniform(0, n_ids - 1);
                        cr_assert_eq(loom_sched_job_exit(s, 0, ids[v], LOOM_EXIT_FINISHED), 0);
                        ids[v] = ids[--n_ids];
                }
                while (loom_sched_next_action(s, &a))
                        ;
        }
        loom_decision_free(&full);
        loom_decision_free(&fast);
        loom_sched_free(s);
        return compared;
}

Test(place_prune, pruned_search_decides_as_the_full_search, .timeout = 60)
{
        int n = cross_check(0x51a7e5ull, 400, 0, 5, 0);
        n += cross_check(0xc0ffeeull, 300, 0, 8, 0);
        n += cross_check(0xbadcafeull, 200, loom_us_from_s(5), 5, 0);
        cr_assert_eq(n, 900);
}

/* The same in wide searches (one simulation per candidate), as a cluster with many open groups
 * runs them: the rollout-density bound and the pre-simulation gap bounds skip only candidates
 * the single simulation would reject. */
Test(place_prune, pruned_wide_search_decides_as_the_full_wide_search, .timeout = 60)
{
        int n = cross_check(0x51a7e5ull, 400, 0, 5, 1);
        n += cross_check(0xc0ffeeull, 300, 0, 8, 1);
        n += cross_check(0xbadcafeull, 200, loom_us_from_s(5), 5, 1);
        cr_assert_eq(n, 900);
}

/* Wide searches on a workload like the placement benchmark's, long enough for groups with many
 * pinned rollouts: a direct packing is judged by the least rates found on new nodes only where
 * its nodes keep their bound, and the decisions stay the full search's (judging every packing
 * so, without the node check, changes a decision here). */
Test(place_prune, pruned_wide_search_decides_as_the_full_one_on_dense_groups, .timeout = 60)
{
        bench_like = true;
        int n = cross_check(0x5eed5ull, 2000, 0, 5, 1) + cross_check(0x5eed8ull, 3000, 0, 8, 1);
        bench_like = false;
        cr_assert_eq(n, 5000);
}

Test(place_prune, rate_search_open_is_validated)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        po.rate_search_open = -1;
        loom_err e;
        cr_assert_eq(loom_policy_cfg_validate(&po, &cl, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "rate_search_open");
        po.rate_search_open = 0;
        cr_assert_eq(loom_policy_cfg_validate(&po, &cl, &e), 0);
}
