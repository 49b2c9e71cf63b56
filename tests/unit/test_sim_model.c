/*
 * test_sim_model.c - what the simulator bills and charges where loom's lone members and the
 * colocated baseline do the same thing: a job alone, rolling out and training on its training
 * nodes, pays a warm switch at every change of phase under both, and a restart is billed on
 * the nodes the job waits on, so the two cost exactly the same.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "loom/sim.h"

#define S(x) loom_us_from_s(x)

static void one_job(const loom_sim_cfg *c, int iters, loom_sim_workload *w)
{
        loom_job_spec s;
        loom_job_spec_init(&s);
        snprintf(s.id, sizeof s.id, "lone");
        s.rollout_gpus = s.train_gpus = 8;
        s.t_roll = S(100);
        s.t_train = S(60);
        s.slo = 1.5; /* room for two switches per iteration: it goes lone */
        s.mem_rollout = loom_table2_mem_rollout(7);
        s.mem_train = loom_table2_mem_train(7);
        s.iterations = iters;
        loom_sim_noise noise;
        loom_sim_noise_default(&noise);
        noise.deterministic = true;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_workload_from_specs(&s, NULL, 1, &noise, 1, &c->cluster, w, &e), 0,
                     "%s", e.msg);
}

static void cfg(loom_sim_cfg *c)
{
        loom_sim_cfg_default(c);
        for (int i = 0; i < 4; i++) {
                c->warm_s[i] = 10;
                c->cold_s[i] = 30;
        }
        c->policy.warm_switch = S(10);
        c->record_gantt = true;
}

static void run(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                loom_sim_result *r)
{
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_run(c, w, p, r, &e), 0, "%s: %s", loom_sim_policy_name(p), e.msg);
}

Test(sim_lone, a_lone_member_pays_both_switches_as_colocation_does)
{
        loom_sim_cfg c;
        cfg(&c);
        loom_sim_workload w;
        one_job(&c, 4, &w);
        loom_sim_result lone, colo;
        run(&c, &w, LOOM_SIM_LOOM, &lone);
        run(&c, &w, LOOM_SIM_COLOCATED, &colo);
        cr_assert_eq(lone.peak_gpus[LOOM_POOL_ROLLOUT], 0, "alone, it rolls out on training GPUs");
        /* load (30 s) and a warm start, then every phase after a change pays the 10 s switch:
         * the training node's rollout state and training state alternate */
        loom_us t = S(30 + 10 + 100);
        int k = 0;
        for (int i = 0; i < lone.n_gantt; i++) {
                const loom_sim_interval *iv = &lone.gantt[i];
                cr_assert_eq(iv->pool, LOOM_POOL_TRAIN);
                if (k++ == 0) {
                        cr_assert_eq(iv->end, t, "the first rollout waits for the load");
                        continue;
                }
                loom_us len = iv->phase == LOOM_PHASE_ROLLOUT ? S(100) : S(60);
                cr_assert_eq(iv->start, t, "phase %d starts when the last ends", k);
                cr_assert_eq(iv->end, t + S(10) + len, "phase %d (%s) pays its switch", k,
                             loom_phase_name(iv->phase));
                t = iv->end;
        }
        cr_assert_eq(k, 8, "four rollouts, four trainings");
        cr_assert_eq(lone.warm_switches, colo.warm_switches);
        cr_assert_float_eq(lone.total_cost, colo.total_cost, 1e-9 * colo.total_cost,
                           "loom %.6f, colocated %.6f", lone.total_cost, colo.total_cost);
        loom_sim_result_free(&lone);
        loom_sim_result_free(&colo);
        loom_sim_workload_free(&w);
}

Test(sim_restart, a_restart_is_billed_on_the_nodes_it_waits_on)
{
        loom_sim_cfg c;
        cfg(&c);
        c.record_gantt = false;
        loom_sim_workload w;
        one_job(&c, 40, &w);
        w.jobs[0].n_fail = 1;
        w.jobs[0].fail_h[0] = 0.5; /* mid-way through an iteration, well before the end */
        loom_sim_result lone, colo;
        run(&c, &w, LOOM_SIM_LOOM, &lone);
        run(&c, &w, LOOM_SIM_COLOCATED, &colo);
        cr_assert_eq(lone.restarts, 1);
        cr_assert_eq(colo.restarts, 1);
        /* colocated keeps its node through the restart; loom re-admits the job at once and its
         * new node is billed while the job restarts there: the same hours, the same $ */
        cr_assert_float_eq(lone.makespan_h, colo.makespan_h, 1e-9);
        cr_assert_float_eq(lone.total_cost, colo.total_cost, 1e-9 * colo.total_cost,
                           "loom %.6f, colocated %.6f", lone.total_cost, colo.total_cost);
        loom_sim_result_free(&lone);
        loom_sim_result_free(&colo);
        loom_sim_workload_free(&w);
}
