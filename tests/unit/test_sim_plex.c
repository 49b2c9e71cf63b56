/*
 * test_sim_plex.c - the PlexRL simulators: Table 2 bubbles from the shared-pool model, two-job
 * packing, HRRS against FCFS and round robin, and the cluster policies of Figure 8.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "loom/plexsim.h"
#include "loom/sim.h"

static loom_plexsim_pool_job job_of(const loom_plexsim_model *m, int iters, double start,
                                    double jitter)
{
        double train = m->calls_s[0] + m->calls_s[1] + m->calls_s[2];
        return (loom_plexsim_pool_job){m->cycle_s - train,
                                       3,
                                       {m->calls_s[0], m->calls_s[1], m->calls_s[2]},
                                       loom_plexsim_setup_s(m->model_b),
                                       start,
                                       iters,
                                       jitter};
}

Test(plexsim, one_job_leaves_the_table2_bubble)
{
        int n;
        const loom_plexsim_model *m = loom_plexsim_models(&n);
        cr_assert_eq(n, 3);
        for (int i = 0; i < n; i++) {
                loom_plexsim_pool_cfg c = {LOOM_DISPATCH_HRRS, 1.1, 1};
                loom_plexsim_pool_job j = job_of(&m[i], 50, 0, 0);
                loom_plexsim_pool_res r;
                cr_assert_eq(loom_plexsim_pool_run(&c, &j, 1, &r, NULL), 0);
                /* Table 2 prints the ratio truncated to two decimals of a percent. */
                cr_assert(fabs(r.bubble - m[i].paper_bubble) < 1e-4, "%s: %f vs %f", m[i].name,
                          r.bubble, m[i].paper_bubble);
                cr_assert_eq(r.switches, 0);
                cr_assert_float_eq(r.makespan_s, 50 * m[i].cycle_s, 1e-6);
        }
}

Test(plexsim, two_offset_jobs_share_a_pool_without_slowing_down)
{
        const loom_plexsim_model *m = loom_plexsim_models(&(int){0});
        loom_plexsim_pool_cfg c = {LOOM_DISPATCH_HRRS, 1.1, 1};
        loom_plexsim_pool_job two[2] = {job_of(&m[0], 50, 0, 0), job_of(&m[0], 50, 63, 0)};
        loom_plexsim_pool_res r;
        cr_assert_eq(loom_plexsim_pool_run(&c, two, 2, &r, NULL), 0);
        /* 7B: each switch costs 4.4 s, which fits the 80% bubble: the second job only pays
         * its setup once per iteration and neither job's cycle stretches by more than that. */
        cr_assert_lt(r.makespan_s, 63 + 50 * (m[0].cycle_s + loom_plexsim_setup_s(7)) + 1);
        cr_assert_eq(r.switches, 99);
        cr_assert_lt(r.bubble, 0.65);
}

Test(plexsim, hrrs_switches_less_than_fcfs_without_more_delay)
{
        const loom_plexsim_model *m = loom_plexsim_models(&(int){0});
        loom_plexsim_pool_job jobs[3];
        for (int k = 0; k < 3; k++)
                jobs[k] = job_of(&m[0], 100, 63.0 * k, 0.2);
        loom_plexsim_pool_res r[3];
        for (int d = LOOM_DISPATCH_RR; d <= LOOM_DISPATCH_FCFS; d++) {
                loom_plexsim_pool_cfg c = {(loom_dispatch)d, 1.1, 7};
                cr_assert_eq(loom_plexsim_pool_run(&c, jobs, 3, &r[d], NULL), 0);
                cr_assert_eq(r[d].chains, 300);
        }
        cr_assert_lt(r[LOOM_DISPATCH_HRRS].switches, r[LOOM_DISPATCH_FCFS].switches);
        cr_assert_leq(r[LOOM_DISPATCH_HRRS].delay_mean, r[LOOM_DISPATCH_FCFS].delay_mean);
        /* Same seed, same bytes. */
        loom_plexsim_pool_cfg c = {LOOM_DISPATCH_HRRS, 1.1, 7};
        loom_plexsim_pool_res again;
        cr_assert_eq(loom_plexsim_pool_run(&c, jobs, 3, &again, NULL), 0);
        cr_assert_eq(again.switches, r[LOOM_DISPATCH_HRRS].switches);
        cr_assert_eq(again.makespan_s, r[LOOM_DISPATCH_HRRS].makespan_s);
}

Test(plexsim, sharing_policies_drain_the_queue_sooner_than_isolation)
{
        /* 40 jobs arriving in a burst on 12 nodes: isolation queues them one group each. */
        loom_plexsim_job jobs[40];
        for (int i = 0; i < 40; i++)
                jobs[i] =
                    (loom_plexsim_job){60.0 * i, i % 4 == 3 ? 1 : 0, 100 + 10 * (i % 7), false};
        loom_plexsim_cluster_res r[4];
        for (int p = 0; p <= LOOM_PLEXSIM_BACKFILL; p++) {
                loom_err e;
                cr_assert_eq(
                    loom_plexsim_cluster_run((loom_plexsim_policy)p, jobs, 40, 12, &r[p], &e), 0,
                    "%s", e.msg);
                cr_assert_eq(r[p].n, 40);
        }
        cr_assert_eq(r[LOOM_PLEXSIM_ISOLATED].switches_per_h, 0);
        for (int p = LOOM_PLEXSIM_PACK; p <= LOOM_PLEXSIM_BACKFILL; p++) {
                cr_assert_lt(r[p].makespan_h, r[LOOM_PLEXSIM_ISOLATED].makespan_h, "%s",
                             loom_plexsim_policy_name((loom_plexsim_policy)p));
                cr_assert_leq(r[p].queue_delay_p99, r[LOOM_PLEXSIM_ISOLATED].queue_delay_p99);
                cr_assert_gt(r[p].switches_per_h, 0);
        }
        cr_assert_leq(r[LOOM_PLEXSIM_BACKFILL].makespan_h, r[LOOM_PLEXSIM_SPREAD].makespan_h);
        for (int p = 0; p < 4; p++)
                loom_plexsim_cluster_res_free(&r[p]);
        /* A job bigger than the pool is refused up front. */
        loom_plexsim_job big = {0, 2, 1, false};
        loom_plexsim_cluster_res x;
        loom_err e;
        cr_assert_eq(loom_plexsim_cluster_run(LOOM_PLEXSIM_PACK, &big, 1, 8, &x, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "nodes");
}

Test(plexsim, cold_starts_profile_alone_then_repack)
{
        loom_plexsim_job jobs[40];
        for (int i = 0; i < 40; i++)
                jobs[i] =
                    (loom_plexsim_job){60.0 * i, i % 4 == 3 ? 1 : 0, 100 + 10 * (i % 7), false};
        loom_plexsim_cluster_res warm, cold;
        cr_assert_eq(loom_plexsim_cluster_run(LOOM_PLEXSIM_SPREAD, jobs, 40, 12, &warm, NULL), 0);
        for (int i = 0; i < 40; i++)
                jobs[i].cold = true;
        cr_assert_eq(loom_plexsim_cluster_run(LOOM_PLEXSIM_SPREAD, jobs, 40, 12, &cold, NULL), 0);
        cr_assert_eq(warm.repacked, 0);
        cr_assert_gt(cold.repacked, 0);
        /* A dedicated group per newcomer holds nodes a warm start would have shared. */
        cr_assert_geq(cold.makespan_h, warm.makespan_h);
        loom_plexsim_cluster_res_free(&warm);
        loom_plexsim_cluster_res_free(&cold);
}

Test(plexsim, trace_rows_map_to_models)
{
        double arr[] = {0, 10, 20}, dur[] = {2890.3, 100, 5897.1};
        int gpus[] = {1, 4, 16};
        loom_plexsim_job j[3];
        loom_plexsim_jobs_from_trace(arr, dur, gpus, 3, j);
        cr_assert_eq(j[0].model, 0);
        cr_assert_eq(j[0].iterations, 10);
        cr_assert_eq(j[1].model, 1);
        cr_assert_eq(j[1].iterations, 1);
        cr_assert_eq(j[2].model, 2);
        cr_assert_eq(j[2].iterations, 10);
}

/* The simulator drives a call-by-call training phase through the core: every job finishes
 * its iterations, each iteration takes its calls' time, not three times the whole phase. */
Test(plexsim, the_engine_runs_training_call_by_call)
{
        loom_sim_cfg cfg;
        loom_sim_cfg_default(&cfg);
        cfg.policy.placer = LOOM_PLACER_PLEX;
        cfg.policy.dispatch = LOOM_DISPATCH_HRRS;
        loom_job_spec sp[2];
        loom_us at[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
                loom_job_spec_init(&sp[i]);
                sp[i].rollout_gpus = sp[i].train_gpus = 8;
                sp[i].t_roll = loom_us_from_s(231.53);
                sp[i].t_calls[0] = loom_us_from_s(9.66);
                sp[i].t_calls[1] = loom_us_from_s(38.08);
                sp[i].t_calls[2] = loom_us_from_s(9.76);
                sp[i].t_train = sp[i].t_calls[0] + sp[i].t_calls[1] + sp[i].t_calls[2];
                sp[i].slo = 2.0;
                sp[i].iterations = 10;
        }
        loom_sim_noise nz;
        loom_sim_noise_default(&nz);
        nz.deterministic = true;
        loom_sim_workload w;
        loom_err e;
        cr_assert_eq(loom_sim_workload_from_specs(sp, at, 2, &nz, 1, &cfg.cluster, &w, &e), 0, "%s",
                     e.msg);
        loom_sim_result r;
        cr_assert_eq(loom_sim_run(&cfg, &w, LOOM_SIM_LOOM, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.jobs_done, 2);
        cr_assert_eq(r.decisions[LOOM_DECISION_ROLLOUT_SCALE], 1); /* they share a pool */
        for (int i = 0; i < 2; i++)
                cr_assert(r.iter_s[i] > 289.0 && r.iter_s[i] < 289.03 + 60, "job %d: %.2f s", i,
                          r.iter_s[i]);
        loom_sim_result_free(&r);
        loom_sim_workload_free(&w);
}
