/*
 * test_sim_drift.c - drift templates, failures and their re-admission, drift resubmission,
 * the regroup baseline, learned-profile admission and the fair baselines in the simulator.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "loom/sim.h"
#include "sim_int.h"

static void build(loom_sim_workload *w, uint64_t seed, int jobs, double dur_h, loom_sim_drift d,
                  double mtbf_h)
{
        loom_sim_workload_cfg wc;
        loom_sim_workload_cfg_default(&wc);
        wc.seed = seed;
        wc.poisson_jobs = jobs;
        wc.poisson_per_hour = 2;
        wc.poisson_mean_duration_s = dur_h * 3600;
        wc.drift = d;
        wc.mtbf_h = mtbf_h;
        loom_cluster_cfg c;
        loom_cluster_cfg_default(&c);
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_workload_build(&wc, NULL, &c, w, &e), 0, "%s", e.msg);
}

static void run(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                loom_sim_result *r)
{
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_run(c, w, p, r, &e), 0, "%s: %s", loom_sim_policy_name(p), e.msg);
}

Test(sim_drift, templates_rise_level_off_and_mirror)
{
        cr_assert_eq(loom_sim_drift_factor(0, 1.0, 7, 0.7), 1.0);
        cr_assert_eq(loom_sim_drift_factor(1, 1.0, 7, 0.0), 1.0);
        cr_assert_float_eq(loom_sim_drift_factor(1, 1.0, 7, 0.4), 1.6, 1e-12);
        cr_assert_float_eq(loom_sim_drift_factor(1, 1.0, 7, 1.0), 1.6, 1e-12);
        cr_assert_float_eq(loom_sim_drift_factor(1, 1.5, 7, 1.0), 1.9, 1e-12);
        cr_assert_float_eq(loom_sim_drift_factor(1, 0.5, 32, 1.0), 1.2, 1e-12);
        cr_assert_float_eq(loom_sim_drift_factor(-1, 1.0, 14, 0.9), 1 / 1.5, 1e-12);
        double prev = 1.0;
        for (int i = 1; i <= 100; i++) {
                double f = loom_sim_drift_factor(1, 1.0, 32, i / 100.0);
                cr_assert_geq(f, prev, "increasing template must not fall");
                prev = f;
        }
        loom_sim_drift d;
        cr_assert_eq(loom_sim_drift_parse("mixed", &d), 0);
        cr_assert_eq(d, LOOM_SIM_DRIFT_MIXED);
        cr_assert_eq(loom_sim_drift_parse("sideways", &d), LOOM_EINVAL);
}

/* Drift scales each job's draws by its template; everything else is drawn as without drift. */
Test(sim_drift, drift_scales_the_same_draws)
{
        loom_sim_workload a, b;
        build(&a, 3, 60, 3, LOOM_SIM_DRIFT_NONE, 0);
        build(&b, 3, 60, 3, LOOM_SIM_DRIFT_MIXED, 0);
        int up = 0, down = 0;
        for (int j = 0; j < a.n; j++) {
                const loom_sim_job *x = &a.jobs[j], *y = &b.jobs[j];
                cr_assert_eq(x->spec.t_roll, y->spec.t_roll);
                cr_assert_eq(x->spec.iterations, y->spec.iterations);
                cr_assert_eq(x->drift_dir, 0);
                up += y->drift_dir > 0;
                down += y->drift_dir < 0;
                for (int64_t i = 0; i < x->spec.iterations; i++) {
                        double f = loom_sim_drift_factor(y->drift_dir, y->drift_scale, y->model_b,
                                                         (double)i / (double)x->spec.iterations);
                        cr_assert_float_eq(y->train[i], (float)(x->train[i] * (float)f), 1e-5);
                }
        }
        cr_assert_gt(up, 0);
        cr_assert_gt(down, 0);
        loom_sim_workload_free(&a);
        loom_sim_workload_free(&b);
}

Test(sim_drift, growing_jobs_are_resubmitted_shrinking_ones_are_not)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload up, down;
        build(&up, 5, 40, 6, LOOM_SIM_DRIFT_INCREASING, 0);
        build(&down, 5, 40, 6, LOOM_SIM_DRIFT_DECREASING, 0);
        loom_sim_result ru, rd;
        run(&c, &up, LOOM_SIM_LOOM, &ru);
        run(&c, &down, LOOM_SIM_LOOM, &rd);
        cr_assert_gt(ru.resubmits, 0);
        cr_assert_eq(rd.resubmits, 0);
        cr_assert_eq(ru.jobs_done, up.n, "a resubmitted job still finishes");
        cr_assert_eq(ru.drift, LOOM_SIM_DRIFT_INCREASING);
        c.drift_trigger = 0; /* off */
        loom_sim_result off;
        run(&c, &up, LOOM_SIM_LOOM, &off);
        cr_assert_eq(off.resubmits, 0);
        loom_sim_result_free(&ru);
        loom_sim_result_free(&rd);
        loom_sim_result_free(&off);
        loom_sim_workload_free(&up);
        loom_sim_workload_free(&down);
}

/* A failed job is re-admitted up to max_restarts times, then fails; the same failure instants
 * hit every policy. */
Test(sim_drift, failures_restart_then_fail)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload w;
        build(&w, 9, 40, 6, LOOM_SIM_DRIFT_NONE, 4);
        static const loom_sim_policy ps[] = {LOOM_SIM_LOOM, LOOM_SIM_SOLO, LOOM_SIM_COLOCATED};
        for (int i = 0; i < 3; i++) {
                loom_sim_result r;
                run(&c, &w, ps[i], &r);
                cr_assert_gt(r.restarts, 0, "%s", loom_sim_policy_name(ps[i]));
                cr_assert_eq(r.jobs_done + r.jobs_failed + r.jobs_rejected, w.n);
                cr_assert_leq(r.restarts, (uint64_t)(3 * w.n));
                loom_sim_result_free(&r);
        }
        c.max_restarts = 0;
        loom_sim_result r;
        run(&c, &w, LOOM_SIM_LOOM, &r);
        cr_assert_eq(r.restarts, 0);
        cr_assert_gt(r.jobs_failed, 0);
        cr_assert_eq(r.jobs_done + r.jobs_failed, w.n);
        loom_sim_result_free(&r);
        loom_sim_workload_free(&w);
}

Test(sim_drift, regroup_migrates_and_finishes_every_job_deterministically)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload w;
        build(&w, 11, 40, 6, LOOM_SIM_DRIFT_MIXED, 0);
        loom_sim_result a, b;
        run(&c, &w, LOOM_SIM_REGROUP, &a);
        run(&c, &w, LOOM_SIM_REGROUP, &b);
        cr_assert_gt(a.regroups, 0);
        cr_assert_gt(a.regroup_migration_h, 0);
        cr_assert_eq(a.resubmits, 0, "regroup does not also resubmit");
        cr_assert_eq(a.jobs_done, w.n);
        cr_assert_eq(a.total_cost, b.total_cost);
        cr_assert_eq(a.regroup_migration_h, b.regroup_migration_h);
        /* every move costs at least the smallest restart */
        cr_assert_geq(a.regroup_migration_h * 3600, c.restart_s[0] - 1e-6);
        loom_sim_result_free(&a);
        loom_sim_result_free(&b);
        loom_sim_workload_free(&w);
}

Test(sim_drift, learned_admission_replans_and_fair_baselines_keep_the_profiled_slo)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload w;
        build(&w, 13, 60, 6, LOOM_SIM_DRIFT_NONE, 0);
        loom_sim_result worst, p99;
        run(&c, &w, LOOM_SIM_LOOM, &worst);
        c.policy.admission = LOOM_ADMIT_P99;
        run(&c, &w, LOOM_SIM_LOOM, &p99);
        cr_assert_eq(worst.replans, 0);
        cr_assert_gt(p99.replans, 0);
        cr_assert_eq(p99.admission, LOOM_ADMIT_P99);
        cr_assert_eq(p99.jobs_done, w.n);
        c.policy.admission = LOOM_ADMIT_WORST;
        for (int p = LOOM_SIM_RANDOM_SLO; p <= LOOM_SIM_GREEDY_SLO; p++) {
                loom_sim_result r;
                run(&c, &w, (loom_sim_policy)p, &r);
                cr_assert(r.admits);
                /* admission checks the worst-case contract: with no drift it holds */
                cr_assert_geq(r.slo_attainment_wc, 0.97, "%s", loom_sim_policy_name(r.policy));
                loom_sim_result_free(&r);
        }
        loom_sim_result_free(&worst);
        loom_sim_result_free(&p99);
        loom_sim_workload_free(&w);
}
