/*
 * test_sim.c - the simulator's engine and models: event ordering, determinism and common
 * random numbers, Solo-D against its closed form, lb <= oracle <= loom, a micro-benchmark
 * schedule checked phase by phase, and the trace reader's errors.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/sim.h"
#include "sim_int.h"

/* ---- event heap ----------------------------------------------------------------------------- */

Test(sim_heap, pops_in_time_then_insertion_order)
{
        sim_heap h;
        loom__sim_heap_init(&h);
        sim_rng r = sim_rng_key(42, 0, 0);
        for (uint32_t i = 0; i < 5000; i++)
                cr_assert_eq(
                    loom__sim_heap_push(&h, (loom_us)(sim_rng_next(&r) % 200), SIM_EV_END, i, 0),
                    0);
        sim_event prev = {.t = -1}, ev;
        int n = 0;
        while (loom__sim_heap_pop(&h, &ev)) {
                cr_assert(ev.t > prev.t || (ev.t == prev.t && ev.seq > prev.seq),
                          "event %d out of order: t=%lld seq=%llu after t=%lld seq=%llu", n,
                          (long long)ev.t, (unsigned long long)ev.seq, (long long)prev.t,
                          (unsigned long long)prev.seq);
                cr_assert_eq(ev.job, (uint32_t)ev.seq, "payload travels with its event");
                prev = ev;
                n++;
        }
        cr_assert_eq(n, 5000);
        loom__sim_heap_free(&h);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static void poisson(loom_sim_workload *w, uint64_t seed, int jobs, double per_hour, double dur_h,
                    bool det, loom_sim_profile prof)
{
        loom_sim_workload_cfg wc;
        loom_sim_workload_cfg_default(&wc);
        wc.seed = seed;
        wc.poisson_jobs = jobs;
        wc.poisson_per_hour = per_hour;
        wc.poisson_mean_duration_s = dur_h * 3600;
        wc.noise.deterministic = det;
        wc.profile = prof;
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

/* ---- determinism and common random numbers ------------------------------------------------ */

Test(sim_determinism, same_seed_same_results_other_seed_other_results)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.record_series = true;
        loom_sim_workload w1, w2, w3;
        poisson(&w1, 7, 40, 2, 3, false, LOOM_SIM_MIXED);
        poisson(&w2, 7, 40, 2, 3, false, LOOM_SIM_MIXED);
        poisson(&w3, 8, 40, 2, 3, false, LOOM_SIM_MIXED);
        loom_sim_result a, b, d;
        run(&c, &w1, LOOM_SIM_LOOM, &a);
        run(&c, &w2, LOOM_SIM_LOOM, &b);
        run(&c, &w3, LOOM_SIM_LOOM, &d);
        cr_assert_eq(a.events, b.events);
        cr_assert_eq(a.total_cost, b.total_cost);
        cr_assert_eq(a.migrations, b.migrations);
        cr_assert_eq(a.n_series, b.n_series);
        cr_assert_eq(memcmp(a.series, b.series, sizeof *a.series * (size_t)a.n_series), 0);
        for (int i = 0; i < w1.n; i++)
                cr_assert(a.slowdown[i] == b.slowdown[i] ||
                          (isnan(a.slowdown[i]) && isnan(b.slowdown[i])));
        cr_assert_neq(a.total_cost, d.total_cost, "a different seed is a different workload");
        cr_assert_gt(a.migrations, 0, "the stochastic model triggers tail migrations");
        loom_sim_result_free(&a);
        loom_sim_result_free(&b);
        loom_sim_result_free(&d);
        loom_sim_workload_free(&w1);
        loom_sim_workload_free(&w2);
        loom_sim_workload_free(&w3);
}

Test(sim_determinism, realisations_are_common_and_below_worst_case)
{
        loom_sim_workload w1, w2;
        poisson(&w1, 3, 20, 2, 2, false, LOOM_SIM_MIXED);
        poisson(&w2, 3, 20, 2, 2, false, LOOM_SIM_MIXED);
        double sum_roll = 0, sum_train = 0, n = 0;
        for (int j = 0; j < w1.n; j++) {
                const loom_sim_job *a = &w1.jobs[j], *b = &w2.jobs[j];
                cr_assert_eq(a->spec.iterations, b->spec.iterations);
                for (int64_t i = 0; i < a->spec.iterations; i++) {
                        cr_assert_eq(a->roll[i], b->roll[i]);
                        cr_assert_eq(a->train[i], b->train[i]);
                        cr_assert(a->roll[i] > 0 && a->roll[i] <= 1, "rollout <= worst case");
                        cr_assert(a->tailq[i] <= a->roll[i], "threshold before the end");
                        cr_assert(a->train[i] > 0 && a->train[i] <= 1, "training <= worst case");
                        sum_roll += a->roll[i];
                        sum_train += a->train[i];
                        n++;
                }
        }
        /* heavy tail: most rollouts reach the cap, training follows the mean length */
        cr_assert_gt(sum_roll / n, 0.85);
        cr_assert_lt(sum_train / n, 0.7);
        loom_sim_workload_free(&w1);
        loom_sim_workload_free(&w2);
}

/* ---- Solo-D --------------------------------------------------------------------------------- */

Test(sim_solo, cost_equals_closed_form)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload w;
        loom_sim_workload_cfg wc;
        loom_sim_workload_cfg_default(&wc);
        wc.seed = 11;
        wc.poisson_jobs = 30;
        wc.poisson_per_hour = 3;
        wc.poisson_mean_duration_s = 2 * 3600;
        wc.sync_s = 9;
        wc.size_gpus = 16;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_workload_build(&wc, NULL, &c.cluster, &w, &e), 0, "%s", e.msg);
        loom_sim_result r;
        run(&c, &w, LOOM_SIM_SOLO, &r);
        double expect = 0;
        double node = loom_cluster_node_price(&c.cluster, LOOM_POOL_ROLLOUT) +
                      loom_cluster_node_price(&c.cluster, LOOM_POOL_TRAIN);
        for (int j = 0; j < w.n; j++)
                expect += node * (w.jobs[j].spec.rollout_gpus / 8) *
                          loom_us_to_s(loom_sim_job_solo_time(&w.jobs[j], &c)) / 3600;
        cr_assert_float_eq(r.total_cost, expect, 1e-9 * expect, "solo %.6f vs closed form %.6f",
                           r.total_cost, expect);
        cr_assert_eq(r.slo_attainment, 1.0);
        cr_assert_float_eq(r.slowdown_p99, 1.0, 1e-12);
        loom_sim_result_free(&r);
        loom_sim_workload_free(&w);
}

/* ---- lb <= oracle <= loom ------------------------------------------------------------------ */

static void bound_chain(bool det)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.policy.colocate_lone = false; /* WEAVE's groups: a rollout node from the start */
        c.policy.multirate = false;     /* the oracle searches single-rate groupings */
        for (uint64_t seed = 1; seed <= 6; seed++) {
                loom_sim_workload w;
                poisson(&w, seed, 10, 1, 4, det, LOOM_SIM_MIXED);
                loom_sim_result lb, opt, loom;
                run(&c, &w, LOOM_SIM_LB, &lb);
                run(&c, &w, LOOM_SIM_ORACLE, &opt);
                run(&c, &w, LOOM_SIM_LOOM, &loom);
                cr_assert(opt.ran, "seed %llu: oracle gave up: %s", (unsigned long long)seed,
                          opt.note);
                cr_assert_leq(lb.total_cost, opt.total_cost * (1 + 1e-9),
                              "seed %llu: lb %.2f > "
                              "oracle %.2f",
                              (unsigned long long)seed, lb.total_cost, opt.total_cost);
                cr_assert_leq(opt.total_cost, loom.total_cost * (1 + 1e-9),
                              "seed %llu: oracle %.2f > loom %.2f", (unsigned long long)seed,
                              opt.total_cost, loom.total_cost);
                cr_assert_eq(opt.slo_attainment_wc, 1.0, "the oracle only forms feasible groups");
                loom_sim_result_free(&lb);
                loom_sim_result_free(&opt);
                loom_sim_result_free(&loom);
                loom_sim_workload_free(&w);
        }
}

Test(sim_bounds, lb_le_oracle_le_loom_deterministic)
{
        bound_chain(true);
}

Test(sim_bounds, lb_le_oracle_le_loom_stochastic)
{
        bound_chain(false);
}

/* A job alone: the oracle colocates it on its training nodes as loom does its lone members
 * (policy.colocate_lone), paying no rollout node, so both cost the same; without colocation
 * it pays a rollout node as well. */
Test(sim_bounds, oracle_colocates_a_job_alone_as_loom_does)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.policy.warm_switch = 0;
        loom_sim_workload w;
        poisson(&w, 2, 1, 1, 3, true, LOOM_SIM_MIXED);
        loom_sim_result r[3]; /* the oracle colocating, loom, the oracle not colocating */
        for (int k = 0; k < 3; k++) {
                c.policy.colocate_lone = k < 2;
                run(&c, &w, k == 1 ? LOOM_SIM_LOOM : LOOM_SIM_ORACLE, &r[k]);
        }
        cr_assert(r[0].ran && r[2].ran, "%s %s", r[0].note, r[2].note);
        cr_assert_eq(r[0].peak_gpus[LOOM_POOL_ROLLOUT], 0, "no rollout node");
        cr_assert_eq(r[0].peak_gpus[LOOM_POOL_TRAIN], w.jobs[0].spec.train_gpus);
        cr_assert_float_eq(r[0].total_cost, r[1].total_cost, 0.02 * r[1].total_cost, "%f vs %f",
                           r[0].total_cost, r[1].total_cost);
        cr_assert_gt(r[2].peak_gpus[LOOM_POOL_ROLLOUT], 0);
        cr_assert_gt(r[2].total_cost, r[0].total_cost * 1.1);
        for (int k = 0; k < 3; k++)
                loom_sim_result_free(&r[k]);
        loom_sim_workload_free(&w);
}

/* 20 jobs arrive within ~20 minutes and run 10 h each: all 20 are active at once, and the
 * branch and bound still proves its grouping optimal at every event (groups of up to 3 keep
 * the test fast; bench/sim.sh runs groups of 5). */
Test(sim_bounds, oracle_is_exact_with_twenty_active_jobs)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.policy.max_group_size = 3;
        loom_sim_workload w;
        poisson(&w, 5, 20, 60, 10, true, LOOM_SIM_MIXED);
        loom_sim_result opt, lm, lb;
        run(&c, &w, LOOM_SIM_ORACLE, &opt);
        run(&c, &w, LOOM_SIM_LOOM, &lm);
        run(&c, &w, LOOM_SIM_LB, &lb);
        cr_assert(opt.ran, "oracle gave up: %s", opt.note);
        cr_assert(strstr(opt.note, "up to 20 jobs active; exact"), "note: %s", opt.note);
        cr_assert_eq(opt.oracle_gap, 0);
        cr_assert_leq(lb.total_cost, opt.total_cost * (1 + 1e-9));
        cr_assert_leq(opt.total_cost, lm.total_cost * (1 + 1e-9), "oracle %.2f > loom %.2f",
                      opt.total_cost, lm.total_cost);
        cr_assert_eq(opt.slo_attainment_wc, 1.0);
        loom_sim_result_free(&opt);
        loom_sim_result_free(&lm);
        loom_sim_result_free(&lb);
        loom_sim_workload_free(&w);
}

Test(sim_bounds, oracle_gives_up_beyond_its_limit)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.policy.max_group_size = 1; /* every job alone: the search is trivial up to the limit */
        loom_sim_workload w;
        poisson(&w, 5, LOOM_SIM_ORACLE_MAX_JOBS + 2, 60, 10, true, LOOM_SIM_MIXED);
        loom_sim_result r;
        run(&c, &w, LOOM_SIM_ORACLE, &r);
        cr_assert(!r.ran);
        char want[32];
        snprintf(want, sizeof want, "%d jobs active", LOOM_SIM_ORACLE_MAX_JOBS + 1);
        cr_assert(strstr(r.note, want), "note: %s", r.note);
        loom_sim_result_free(&r);
        loom_sim_workload_free(&w);
}

/* Held to a solo time below its own (a learned budget under noise), a job alone still runs:
 * alone it is its own solo, as learned admission takes it; grouped it must meet the budget. */
Test(sim_bounds, oracle_keeps_a_job_alone_whatever_its_budget)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload w;
        poisson(&w, 5, 4, 60, 2, true, LOOM_SIM_MIXED);
        for (int i = 0; i < w.n; i++) /* no group of two can meet half a solo iteration */
                w.jobs[i].spec.t_solo_ref = loom_job_t_solo(&w.jobs[i].spec) / 2;
        loom_sim_result r;
        run(&c, &w, LOOM_SIM_ORACLE, &r);
        cr_assert(r.ran, "%s", r.note);
        cr_assert_float_eq(r.slowdown_p99, 1.0, 1e-9, "every job alone");
        loom_sim_result_free(&r);
        loom_sim_workload_free(&w);
}

/* ---- a micro-benchmark, phase by phase ----------------------------------------------------- */

static void job(loom_job_spec *s, const char *id, double roll, double train, double sync, int iters)
{
        loom_job_spec_init(s);
        snprintf(s->id, sizeof s->id, "%s", id);
        s->rollout_gpus = s->train_gpus = 8;
        s->t_roll = loom_us_from_s(roll);
        s->t_train = loom_us_from_s(train);
        s->t_sync = loom_us_from_s(sync);
        s->slo = 1.1;
        s->mem_rollout = loom_table2_mem_rollout(7);
        s->mem_train = loom_table2_mem_train(7);
        s->iterations = iters;
}

/* Workload w of the n jobs specs, all arriving at 0, every phase at its declared length. */
static void deterministic(const loom_sim_cfg *c, const loom_job_spec *specs, int n,
                          loom_sim_workload *w)
{
        loom_sim_noise noise;
        loom_sim_noise_default(&noise);
        noise.deterministic = true;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_workload_from_specs(specs, NULL, n, &noise, 1, &c->cluster, w, &e), 0,
                     "%s", e.msg);
}

/* A (900 s rollout + 100 s training, SLO 1.5) and B (50 s + 50 s, SLO 2) cannot share a group
 * at one iteration each per meta-iteration: its period, at least A's 1,000 s, is five times B's
 * 200 s budget, so the single-rate oracle runs both alone on their training nodes. With rates
 * (cfg.oracle_rates) B runs five iterations per period on a rollout node of its own and both
 * share one training node, which costs less than two; both meet their SLOs. */
Test(sim_bounds, the_oracle_with_rates_groups_what_one_rate_cannot)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_job_spec specs[2];
        job(&specs[0], "A", 900, 100, 0, 5);
        specs[0].slo = 1.5;
        job(&specs[1], "B", 50, 50, 0, 50);
        specs[1].slo = 2.0;
        loom_sim_workload w;
        deterministic(&c, specs, 2, &w);
        loom_sim_result one, multi;
        run(&c, &w, LOOM_SIM_ORACLE, &one);
        c.oracle_rates = true;
        run(&c, &w, LOOM_SIM_ORACLE, &multi);
        cr_assert(one.ran && multi.ran, "%s %s", one.note, multi.note);
        cr_assert_eq(one.peak_gpus[LOOM_POOL_TRAIN], 16, "single-rate: each alone");
        cr_assert_eq(one.peak_gpus[LOOM_POOL_ROLLOUT], 0);
        cr_assert_eq(multi.peak_gpus[LOOM_POOL_TRAIN], 8, "with rates: one training node");
        cr_assert_gt(multi.peak_gpus[LOOM_POOL_ROLLOUT], 0);
        cr_assert_lt(multi.total_cost, one.total_cost);
        cr_assert_eq(multi.slo_attainment_wc, 1.0);
        loom_sim_result_free(&one);
        loom_sim_result_free(&multi);
        loom_sim_workload_free(&w);
}

/* A job the oracle moves loses its restart (cfg.oracle_restarts), as loom's moved members do:
 * where the oracle moves no one the run is the same to the dollar; where it moves jobs, they
 * finish later, so the jobs spend longer in the system and the bill grows. */
Test(sim_bounds, the_oracle_charges_restarts_to_the_jobs_it_moves)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload w;
        poisson(&w, 3, 20, 2, 4, false, LOOM_SIM_MIXED);
        loom_sim_result r[2][2]; /* [never, departures][instant, restarts] */
        loom_sim_oracle_regroup modes[2] = {LOOM_SIM_REGROUP_NEVER, LOOM_SIM_REGROUP_DEPARTURES};
        double in_system[2][2] = {{0}};
        for (int m = 0; m < 2; m++)
                for (int k = 0; k < 2; k++) {
                        c.oracle_regroup = modes[m];
                        c.oracle_restarts = k;
                        run(&c, &w, LOOM_SIM_ORACLE, &r[m][k]);
                        cr_assert(r[m][k].ran, "%s", r[m][k].note);
                        for (int j = 0; j < w.n; j++)
                                in_system[m][k] += r[m][k].slowdown[j] *
                                                   (double)loom_sim_job_solo_time(&w.jobs[j], &c);
                }
        cr_assert_eq(r[0][0].moves, 0, "never regrouping moves no one here");
        cr_assert_eq(r[0][1].moves, 0);
        cr_assert_float_eq(r[0][1].total_cost, r[0][0].total_cost, 1e-9);
        cr_assert_float_eq(in_system[0][1], in_system[0][0], 1e-6 * in_system[0][0]);
        cr_assert_gt(r[1][1].moves, 0);
        cr_assert_eq(r[1][0].regroup_migration_h, 0, "instant moves restart no one");
        cr_assert_gt(r[1][1].regroup_migration_h, 0);
        /* each moved job's restart, 161.5-419 s by model size */
        cr_assert_leq(r[1][1].regroup_migration_h, (double)r[1][1].moves * 419 / 3600 + 1e-9);
        cr_assert_geq(r[1][1].regroup_migration_h, (double)r[1][1].moves * 161.5 / 3600 - 1e-9);
        cr_assert_gt(in_system[1][1], in_system[1][0] * (1 + 1e-6),
                     "moved jobs finish later when they pay their restart");
        cr_assert_gt(r[1][1].total_cost, r[1][0].total_cost);
        for (int m = 0; m < 2; m++)
                for (int k = 0; k < 2; k++)
                        loom_sim_result_free(&r[m][k]);
        loom_sim_workload_free(&w);
}

/* Find job j's k-th interval of phase ph; fails the test if missing. */
static const loom_sim_interval *nth(const loom_sim_result *r, int j, loom_phase ph, int k)
{
        for (int i = 0; i < r->n_gantt; i++)
                if (r->gantt[i].job == j && r->gantt[i].phase == ph && k-- == 0)
                        return &r->gantt[i];
        cr_assert_fail("job %d has no %s #%d", j, loom_phase_name(ph), k);
        return NULL;
}

#define S(x) loom_us_from_s(x)

Test(sim_micro, temporal_mux_schedule_phase_by_phase)
{
        /* Two Type-A jobs (WEAVE §6.2) with switches free, so the round robin is exact: A rolls
         * while nobody trains, then B rolls while A trains, and so on. */
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.policy.colocate_lone = false; /* WEAVE's groups: a rollout node from the start */
        for (int i = 0; i < 4; i++)
                c.warm_s[i] = c.cold_s[i] = 0;
        c.policy.warm_switch = 0;
        c.record_gantt = true;
        loom_job_spec specs[2];
        /* twelve iterations: a job of three may not join a group whose period is within a
         * quarter of its budget (its first iteration may wait out the round in progress) */
        job(&specs[0], "A1", 125, 120, 12.7, 12);
        job(&specs[1], "A2", 125, 120, 12.7, 12);
        loom_sim_workload w;
        deterministic(&c, specs, 2, &w);
        loom_sim_result r;
        run(&c, &w, LOOM_SIM_LOOM, &r);
        cr_assert_eq(r.decisions[LOOM_DECISION_NEW_GROUP], 1);
        cr_assert_eq(r.decisions[LOOM_DECISION_DIRECT_PACK], 1, "A2 shares A1's nodes");
        cr_assert_eq(r.peak_gpus[0], 8);
        cr_assert_eq(r.peak_gpus[1], 8);
        /* expected: A1 roll [0,125] train [125,245] sync [245,257.7];
         *           A2 roll [125,250] train [250,370] sync [370,382.7];
         *           A1 roll [257.7,382.7] train [382.7,502.7] ... period 257.7 s */
        const double period = 257.7;
        for (int k = 0; k < 3; k++) {
                double a = k * period, b = 125 + k * period;
                const loom_sim_interval *iv = nth(&r, 0, LOOM_PHASE_ROLLOUT, k);
                cr_assert_eq(iv->start, S(a), "A1 roll %d starts at %lld", k, (long long)iv->start);
                cr_assert_eq(iv->end, S(a + 125));
                iv = nth(&r, 0, LOOM_PHASE_TRAIN, k);
                cr_assert_eq(iv->start, S(a + 125));
                cr_assert_eq(iv->end, S(a + 245));
                iv = nth(&r, 1, LOOM_PHASE_ROLLOUT, k);
                cr_assert_eq(iv->start, S(b), "A2 roll %d starts at %lld", k, (long long)iv->start);
                cr_assert_eq(iv->end, S(b + 125));
                iv = nth(&r, 1, LOOM_PHASE_TRAIN, k);
                cr_assert_eq(iv->start, S(b + 125));
                cr_assert_eq(iv->end, S(b + 245));
                cr_assert_eq(iv->row, 0, "one training node");
        }
        /* both share rollout node 0 and never overlap on it */
        cr_assert_eq(nth(&r, 0, LOOM_PHASE_ROLLOUT, 0)->row,
                     nth(&r, 1, LOOM_PHASE_ROLLOUT, 0)->row);
        cr_assert_float_eq(r.iter_s[0], (11 * period + 245) / 12, 1e-6);
        cr_assert_float_eq(r.slowdown[0], 1.0, 1e-9, "the pair runs at solo speed");
        loom_sim_result_free(&r);
        loom_sim_workload_free(&w);
}

Test(sim_micro, tail_migration_starts_the_next_rollout_early)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.record_gantt = true;
        loom_job_spec specs[2];
        job(&specs[0], "D1", 300, 60, 0, 20);
        job(&specs[1], "D2", 300, 60, 0, 20);
        specs[0].slo = specs[1].slo = 2.0;
        loom_sim_noise noise;
        loom_sim_noise_default(&noise);
        loom_sim_workload w;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_workload_from_specs(specs, NULL, 2, &noise, 3, &c.cluster, &w, &e),
                     0);
        loom_sim_result with, without;
        run(&c, &w, LOOM_SIM_LOOM, &with);
        run(&c, &w, LOOM_SIM_LOOM_NOMIG, &without);
        cr_assert_gt(with.migrations, 0);
        cr_assert_eq(without.migrations, 0);
        bool overlap = false;
        for (int i = 0; i < with.n_gantt && !overlap; i++) {
                const loom_sim_interval *t = &with.gantt[i];
                if (!t->tail)
                        continue;
                for (int k = 0; k < with.n_gantt; k++) {
                        const loom_sim_interval *o = &with.gantt[k];
                        if (o->job != t->job && o->phase == LOOM_PHASE_ROLLOUT &&
                            o->row == t->row && o->start < t->end && o->end > t->start)
                                overlap = true;
                }
        }
        cr_assert(overlap, "a tail and the next rollout share the node");
        cr_assert_lt(with.makespan_h, without.makespan_h, "migration reclaims the tail bubble");
        loom_sim_result_free(&with);
        loom_sim_result_free(&without);
        loom_sim_workload_free(&w);
}

/* ---- trace reader ------------------------------------------------------------------------- */

static void bad_trace(const char *text, int line, int col, const char *field)
{
        loom_sim_trace t;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_trace_parse(text, strlen(text), "t.csv", 0, -1, &t, &e), LOOM_EINVAL);
        cr_assert_eq(e.line, line, "line %d, want %d (%s)", e.line, line, e.msg);
        cr_assert_eq(e.col, col, "col %d, want %d (%s)", e.col, col, e.msg);
        cr_assert_str_eq(e.field, field);
        char where[64];
        snprintf(where, sizeof where, "t.csv:%d:%d:", line, col);
        cr_assert(strstr(e.msg, where), "message names the place: %s", e.msg);
        cr_assert_null(t.rows, "nothing allocated on error");
}

#define HDR "job_id,arrival_s,duration_s,gpus,source_model\n"

Test(sim_trace, malformed_rows_are_rejected_with_line_and_column)
{
        bad_trace(HDR "a,0,100,1,x\nb,10,200\n", 3, 9, "gpus");
        bad_trace(HDR "a,0,100,1,x\nb,1o,200,2,x\n", 3, 3, "arrival_s");
        bad_trace(HDR "a,0,-5,1,x\n", 2, 5, "duration_s");
        bad_trace(HDR "a,0,100,0,x\n", 2, 9, "gpus");
        bad_trace("job_id,arrival_s,gpus\na,0,1\n", 1, 1, "duration_s");
}

Test(sim_trace, window_and_shift)
{
        const char *text = HDR "a,5,100,1,x\nb,15,200,9,y\r\n\nc,35,300,16,z\n";
        loom_sim_trace t;
        loom_err e;
        cr_assert_eq(loom_sim_trace_parse(text, strlen(text), "t.csv", 1, 2, &t, &e), 0, "%s",
                     e.msg);
        cr_assert_eq(t.n, 2);
        cr_assert_str_eq(t.rows[0].id, "b");
        cr_assert_eq(t.rows[0].arrival_s, 0, "the window starts at 0");
        cr_assert_eq(t.rows[1].arrival_s, 20);
        cr_assert_eq(t.rows[1].gpus, 16);
        loom_sim_trace_free(&t);
        cr_assert_eq(loom_sim_trace_parse(text, strlen(text), "t.csv", 2, 5, &t, &e), LOOM_EINVAL,
                     "asking for more rows than exist");
}

Test(sim_workload, table6_ranges_and_trace_sizes)
{
        static const double lo[3][2] = {{50, 50}, {100, 25}, {25, 100}},
                            hi[3][2] = {{300, 300}, {600, 200}, {200, 600}};
        for (int p = 0; p < 3; p++) {
                loom_sim_workload w;
                poisson(&w, 9, 60, 5, 1, true, (loom_sim_profile)p);
                for (int j = 0; j < w.n; j++) {
                        double r = loom_us_to_s(w.jobs[j].spec.t_roll),
                               t = loom_us_to_s(w.jobs[j].spec.t_train);
                        cr_assert(r >= lo[p][0] && r <= hi[p][0], "%s roll %g",
                                  loom_sim_profile_name((loom_sim_profile)p), r);
                        cr_assert(t >= lo[p][1] && t <= hi[p][1], "%s train %g",
                                  loom_sim_profile_name((loom_sim_profile)p), t);
                        cr_assert(w.jobs[j].spec.slo >= 1 && w.jobs[j].spec.slo <= 2);
                        cr_assert_eq(w.jobs[j].spec.mem_rollout,
                                     loom_table2_mem_rollout(w.jobs[j].model_b));
                }
                loom_sim_workload_free(&w);
        }
        loom_sim_trace t = {.n = 2};
        loom_sim_trace_row rows[2] = {{"x", 0, 3600, 3}, {"y", 60, 7200, 12}};
        t.rows = rows;
        loom_sim_workload_cfg wc;
        loom_sim_workload_cfg_default(&wc);
        loom_cluster_cfg c;
        loom_cluster_cfg_default(&c);
        loom_sim_workload w;
        cr_assert_eq(loom_sim_workload_build(&wc, &t, &c, &w, NULL), 0);
        cr_assert_eq(w.jobs[0].spec.rollout_gpus, 8, "3 GPUs round up to one node");
        cr_assert_eq(w.jobs[1].spec.train_gpus, 16, "12 GPUs round up to two nodes");
        cr_assert_eq(w.jobs[1].arrival, S(60));
        double er, et;
        loom_sim_noise_expect(&wc.noise, &er, &et);
        double iter =
            loom_us_to_s(w.jobs[1].spec.t_roll) * er + loom_us_to_s(w.jobs[1].spec.t_train) * et;
        cr_assert_eq(w.jobs[1].spec.iterations, (int64_t)llround(7200 / iter),
                     "iterations follow from the solo duration");
        loom_sim_workload_free(&w);
}

/* ---- the sweep ------------------------------------------------------------------------------ */

Test(sim_sweep, rows_do_not_depend_on_the_thread_count)
{
        loom_sim_trace_row rows[24];
        sim_rng r = sim_rng_key(77, 0, 0);
        for (int i = 0; i < 24; i++) {
                snprintf(rows[i].id, sizeof rows[i].id, "t%d", i);
                rows[i].arrival_s = i * 900.0;
                rows[i].duration_s = 1800 + sim_rng_uniform(&r, 0, 5400);
                rows[i].gpus = i % 5 == 0 ? 16 : 8;
        }
        loom_sim_trace t = {24, rows};
        loom_sim_sweep_cfg c;
        loom_sim_sweep_cfg_default(&c);
        c.trace = &t;
        c.seeds = 2;
        loom_sim_sweep_out one, two;
        loom_err e;
        c.threads = 1;
        cr_assert_eq(loom_sim_sweep(&c, &one, &e), 0, "%s", e.msg);
        c.threads = 2;
        cr_assert_eq(loom_sim_sweep(&c, &two, &e), 0, "%s", e.msg);
        cr_assert_eq(one.n, 12 * 6 * 2, "12 settings x 6 policies x 2 seeds");
        cr_assert_eq(one.n, two.n);
        for (int i = 0; i < one.n; i++) {
                cr_assert_eq(one.rows[i].figure, two.rows[i].figure);
                cr_assert_str_eq(one.rows[i].setting, two.rows[i].setting);
                cr_assert_eq(one.rows[i].policy, two.rows[i].policy);
                cr_assert_eq(one.rows[i].events, two.rows[i].events);
                cr_assert(one.rows[i].cost_vs_lb == two.rows[i].cost_vs_lb, "row %d", i);
                if (one.rows[i].policy == LOOM_SIM_LB)
                        cr_assert_eq(one.rows[i].cost_vs_lb, 1.0);
                else
                        cr_assert_geq(one.rows[i].cost_vs_lb, 1.0, "nobody beats the bound");
        }
        loom_sim_sweep_out_free(&one);
        loom_sim_sweep_out_free(&two);
}

/* ---- switches ------------------------------------------------------------------------------- */

Test(sim_switch, warm_switch_hides_in_idle_time_and_first_phase_waits_for_the_load)
{
        /* A1 and A2 alternate on one rollout node and one training node. With a 10 s warm switch
         * and cold 30 s: A1's first rollout waits for its load (30 s) plus a warm start; A2's
         * rollout follows A1's immediately, so it pays the whole switch; later switches land
         * in idle time only partly. */
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.policy.colocate_lone = false; /* WEAVE's groups: a rollout node from the start */
        for (int i = 0; i < 4; i++) {
                c.warm_s[i] = 10;
                c.cold_s[i] = 30;
        }
        c.policy.warm_switch = loom_us_from_s(10);
        c.record_gantt = true;
        loom_job_spec specs[2];
        job(&specs[0], "A1", 100, 100, 0, 4);
        job(&specs[1], "A2", 100, 100, 0, 4);
        specs[0].slo = specs[1].slo = 1.5;
        loom_sim_noise noise;
        loom_sim_noise_default(&noise);
        noise.deterministic = true;
        loom_sim_workload w;
        loom_err e;
        cr_assert_eq(loom_sim_workload_from_specs(specs, NULL, 2, &noise, 1, &c.cluster, &w, &e),
                     0);
        loom_sim_result r;
        run(&c, &w, LOOM_SIM_LOOM, &r);
        const loom_sim_interval *a1 = nth(&r, 0, LOOM_PHASE_ROLLOUT, 0);
        cr_assert_eq(a1->start, 0);
        cr_assert_eq(a1->end, S(30 + 10 + 100), "load, warm start, rollout");
        const loom_sim_interval *a2 = nth(&r, 1, LOOM_PHASE_ROLLOUT, 0);
        cr_assert_eq(a2->start, S(140));
        /* A2's load finished at 30 s, long before; the node changes job with no idle time */
        cr_assert_eq(a2->end, S(140 + 10 + 100));
        const loom_sim_interval *t1 = nth(&r, 0, LOOM_PHASE_TRAIN, 0);
        cr_assert_eq(t1->end, S(140 + 10 + 100), "A1's first training: a warm start");
        /* A1's second rollout: its training ended at 250 and A2's rollout freed the node at 250,
         * so the switch back to A1 is paid in full */
        const loom_sim_interval *a1b = nth(&r, 0, LOOM_PHASE_ROLLOUT, 1);
        cr_assert_eq(a1b->start, S(250));
        cr_assert_eq(a1b->end, S(250 + 10 + 100));
        cr_assert_eq(r.cold_starts, 4, "each job loads once per pool");
        cr_assert_gt(r.warm_switches, 0);
        loom_sim_result_free(&r);
        loom_sim_workload_free(&w);
}

/* ---- the decomposition ladder ---------------------------------------------------------------- */

/* The ladder of a Poisson workload (built into w) under the default configuration c. */
static void decompose(loom_sim_cfg *c, loom_sim_workload *w, int jobs, double dur_h, bool det,
                      loom_sim_rung *r)
{
        loom_sim_cfg_default(c);
        poisson(w, 3, jobs, 2, dur_h, det, LOOM_SIM_MIXED);
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_decompose(c, w, r, &e), 0, "%s", e.msg);
}

/* Its first rung is the lb policy's cost, whole nodes and memory residency can only add to the
 * fluid schedule, and its schedule rungs are the regroup and loom runs of the same workload. */
Test(sim_decompose, rungs_are_the_bound_the_node_rounding_and_the_runs)
{
        loom_sim_cfg c;
        loom_sim_workload w;
        loom_sim_rung r[LOOM_SIM_RUNGS];
        decompose(&c, &w, 20, 4, false, r);
        loom_sim_result lb, opt, loom, rg, multi;
        c.policy.multirate = true;
        run(&c, &w, LOOM_SIM_LOOM, &multi);
        c.policy.multirate = false; /* regroup and online are the single-rate rungs */
        run(&c, &w, LOOM_SIM_LB, &lb);
        run(&c, &w, LOOM_SIM_ORACLE, &opt);
        run(&c, &w, LOOM_SIM_LOOM, &loom);
        run(&c, &w, LOOM_SIM_REGROUP, &rg);
        cr_assert(opt.ran, "%s", opt.note);
        cr_assert_float_eq(r[0].total_cost, lb.total_cost, 1e-6);
        cr_assert_gt(r[1].total_cost, r[0].total_cost, "whole nodes round the fluid rates up");
        cr_assert_geq(r[2].total_cost, r[1].total_cost);
        cr_assert(r[3].measured, "%s", r[3].note);
        cr_assert_str_eq(r[3].name, "informed");
        cr_assert_float_eq(r[4].total_cost, opt.total_cost, 1e-6);
        cr_assert_str_eq(r[5].name, "departures");
        cr_assert_str_eq(r[6].name, "local");
        cr_assert_str_eq(r[7].name, "greedy");
        cr_assert(r[5].measured && r[6].measured && r[7].measured, "%s %s %s", r[5].note, r[6].note,
                  r[7].note);
        /* on this instance regrouping pays: at every event most, at departures less, by
         * single-job moves at departures less again, never least (not a theorem: the oracle
         * minimises $/h at each event, not the total) */
        cr_assert_lt(r[4].total_cost, r[5].total_cost);
        cr_assert_lt(r[5].total_cost, r[6].total_cost);
        cr_assert_lt(r[6].total_cost, r[7].total_cost);
        /* moves: the exact search regroups freely, single-job moves move fewer, and the
         * regroup rung counts the jobs its re-placements migrated */
        cr_assert_gt(r[6].moves, 0);
        cr_assert_lt(r[6].moves, r[5].moves);
        cr_assert_eq(r[4].moves, opt.moves);
        cr_assert_eq(r[8].moves, rg.moves);
        cr_assert_gt(rg.moves, 0, "an hourly re-placement migrated someone");
        cr_assert_float_eq(r[8].total_cost, rg.total_cost, 1e-6);
        cr_assert_float_eq(r[9].total_cost, loom.total_cost, 1e-6);
        cr_assert_float_eq(r[9].slo_attainment, loom.slo_attainment, 1e-12);
        cr_assert_leq(r[4].total_cost, r[9].total_cost * (1 + 1e-9), "the optimum is below loom");
        cr_assert(r[10].measured);
        cr_assert_float_eq(r[10].total_cost, multi.total_cost, 1e-6,
                           "the last rung is multi-rate loom");
        cr_assert_float_eq(r[10].lone_rollout_cost, multi.lone_rollout_cost, 1e-6);
        cr_assert_float_eq(r[9].lone_rollout_cost, loom.lone_rollout_cost, 1e-6);
        double roll_price = loom_cluster_node_price(&c.cluster, LOOM_POOL_ROLLOUT);
        double roll_spend =
            multi.prov_gpu_h[LOOM_POOL_ROLLOUT] / c.cluster.gpus_per_node * roll_price;
        cr_assert_gt(multi.lone_rollout_cost, 0, "some job runs alone in its group");
        cr_assert_leq(multi.lone_rollout_cost, roll_spend * (1 + 1e-9),
                      "lone members' nodes are a part of the rollout pool's spend");
        cr_assert_eq(lb.lone_rollout_cost, 0, "only loom's groups are measured");
        /* every provisioned node belongs to a group: the split adds up to the bill */
        double by_group = 0, lone_slo = 0;
        for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++)
                by_group += multi.group_cost[k][0] + multi.group_cost[k][1];
        for (int b = 0; b < 4; b++)
                lone_slo += multi.lone_cost_by_slo[b];
        cr_assert_float_eq(by_group, multi.total_cost, 1e-6 * multi.total_cost);
        cr_assert_eq(multi.group_cost[0][0], 0, "lone members provision no rollout nodes");
        cr_assert_float_eq(lone_slo, multi.group_cost[0][1], 1e-6 * multi.total_cost + 1e-9);
        cr_assert_float_eq(r[10].group_cost[2][1], multi.group_cost[2][1], 1e-6);
        cr_assert_float_eq(r[10].lone_cost_by_slo[0], multi.lone_cost_by_slo[0], 1e-6);
        cr_assert_eq(lb.group_cost[0][1] + lb.group_cost[1][1], 0, "only loom's groups");
        loom_sim_result_free(&multi);
        loom_sim_result_free(&lb);
        loom_sim_result_free(&opt);
        loom_sim_result_free(&loom);
        loom_sim_result_free(&rg);
        loom_sim_workload_free(&w);
}

/* What the targets need: the informed oracle regrouping in five modes, pools free then fixed.
 * Its free `always` row is the ladder's `informed` rung, taken from it or run again alike; a
 * price on moves moves fewer jobs than free regrouping at departures, never moves none; fixed
 * pools (a subset of the free ones' choices at every event) cost more on this instance; each
 * row's ratios are the baselines' bills over its own. */
Test(sim_decompose, what_the_targets_need)
{
        loom_sim_cfg c;
        loom_sim_workload w;
        loom_sim_rung r[LOOM_SIM_RUNGS];
        decompose(&c, &w, 20, 4, false, r);
        loom_sim_regrouping g[LOOM_SIM_REGROUPINGS], again[LOOM_SIM_REGROUPINGS];
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sim_decompose_regroupings(&c, &w, r, g, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sim_decompose_regroupings(&c, &w, NULL, again, &e), 0, "%s", e.msg);
        for (int i = 0; i < LOOM_SIM_REGROUPINGS; i++) {
                cr_assert(g[i].measured, "%s", g[i].note);
                cr_assert_float_eq(g[i].total_cost, again[i].total_cost, 1e-6, "row %d", i);
                cr_assert_eq(g[i].moves, again[i].moves, "row %d", i);
                cr_assert_eq(g[i].fixed_pools, i >= 5);
                /* the bill by group kind adds up to the total; pools fixed at the largest ask
                 * never grow */
                double sum = 0;
                for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++)
                        sum += g[i].group_cost[k][0] + g[i].group_cost[k][1];
                cr_assert_float_eq(sum, g[i].total_cost, 1e-6 * g[i].total_cost, "row %d", i);
                cr_assert_float_eq(g[i].grown_pool_cost, again[i].grown_pool_cost, 1e-6);
                if (g[i].fixed_pools)
                        cr_assert_eq(g[i].grown_pool_cost, 0, "row %d", i);
                cr_assert_leq(g[i].grown_pool_cost, g[i].total_cost * (1 + 1e-9), "row %d", i);
        }
        cr_assert_gt(g[0].grown_pool_cost, 0, "free pools grow where that is cheaper here");
        cr_assert_str_eq(g[0].mode, "always");
        cr_assert_str_eq(g[2].mode, "priced");
        cr_assert_str_eq(g[9].mode, "never");
        cr_assert_float_eq(g[0].total_cost, r[3].total_cost, 1e-6);
        cr_assert_lt(g[2].moves, g[1].moves, "a price on moves moves fewer jobs");
        cr_assert_eq(g[4].moves, 0);
        cr_assert_eq(g[9].moves, 0);
        cr_assert_gt(g[5].total_cost, g[0].total_cost, "fixed pools cost more here");
        loom_sim_result col;
        run(&c, &w, LOOM_SIM_COLOCATED, &col);
        cr_assert_float_eq(g[3].colocated_ratio, col.total_cost / g[3].total_cost, 1e-9);
        loom_sim_result_free(&col);
        loom_sim_workload_free(&w);
}

/* Every response at its token limit: the realised times are the declared worst cases, and the
 * informed optimum is the worst-case one exactly. */
Test(sim_decompose, informed_is_the_optimum_when_realised_times_are_the_worst_case)
{
        loom_sim_cfg c;
        loom_sim_workload w;
        loom_sim_rung r[LOOM_SIM_RUNGS];
        decompose(&c, &w, 12, 3, true, r);
        cr_assert(r[3].measured && r[4].measured, "%s %s", r[3].note, r[4].note);
        cr_assert_float_eq(r[3].total_cost, r[4].total_cost, 1e-6 * r[4].total_cost);
        loom_sim_workload_free(&w);
}

/* Phase lengths equal to a float fraction's precision (realisations are floats). */
static void assert_same_len(loom_us a, loom_us b)
{
        cr_assert_leq(llabs(a - b), 2 + (loom_us)(1e-6 * (double)a), "%lld vs %lld", (long long)a,
                      (long long)b);
}

/* The informed rung plans each job on its realised p99 but must not change how long anything
 * takes: every realised phase lasts as long on the new profile as on the declared one (to a
 * float's precision), so every job's realised solo run is the same. */
Test(sim_decompose, realised_profiles_keep_every_phase_length)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload w, k;
        poisson(&w, 5, 15, 2, 3, false, LOOM_SIM_MIXED);
        cr_assert_eq(loom__sim_realised_profiles(&w, 0.99, &k), 0);
        bool shorter = false;
        for (int i = 0; i < w.n; i++) {
                const loom_sim_job *a = &w.jobs[i], *b = &k.jobs[i];
                shorter |= b->spec.t_roll < a->spec.t_roll || b->spec.t_train < a->spec.t_train;
                for (int64_t it = 0; it < a->spec.iterations; it++) {
                        assert_same_len(sim_phase_us(a->spec.t_roll, a->roll[it]),
                                        sim_phase_us(b->spec.t_roll, b->roll[it]));
                        assert_same_len(sim_phase_us(a->spec.t_roll, a->tailq[it]),
                                        sim_phase_us(b->spec.t_roll, b->tailq[it]));
                        assert_same_len(sim_phase_us(a->spec.t_train, a->train[it]),
                                        sim_phase_us(b->spec.t_train, b->train[it]));
                }
                assert_same_len(loom_sim_job_solo_time(a, &c), loom_sim_job_solo_time(b, &c));
                cr_assert_gt(b->spec.t_solo_ref, 0);
        }
        cr_assert(shorter, "the p99 of noisy phases is below the declared worst case");
        loom_sim_workload_free(&k);
        loom_sim_workload_free(&w);
}

/* A job alone all its life: every rollout node the run pays for is a lone member's. */
Test(sim_decompose, a_lone_job_pays_all_of_its_rollout_nodes_as_lone)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        c.policy.colocate_lone = false; /* WEAVE's groups: a rollout node from the start */
        loom_sim_workload w;
        poisson(&w, 5, 1, 1, 2, true, LOOM_SIM_MIXED);
        loom_sim_result r;
        run(&c, &w, LOOM_SIM_LOOM, &r);
        double roll_price = loom_cluster_node_price(&c.cluster, LOOM_POOL_ROLLOUT);
        double roll_spend = r.prov_gpu_h[LOOM_POOL_ROLLOUT] / c.cluster.gpus_per_node * roll_price;
        cr_assert_gt(roll_spend, 0);
        cr_assert_float_eq(r.lone_rollout_cost, roll_spend, 1e-6 * roll_spend);
        cr_assert_float_eq(r.group_cost[1][0] + r.group_cost[1][1], r.total_cost,
                           1e-6 * r.total_cost, "all of it in a one-member group");
        loom_sim_result_free(&r);
        /* colocated, the same job is lone: training nodes only, under its SLO's bucket */
        c.policy.colocate_lone = true;
        run(&c, &w, LOOM_SIM_LOOM, &r);
        cr_assert_float_eq(r.group_cost[0][1], r.total_cost, 1e-6 * r.total_cost);
        int b = (int)((w.jobs[0].spec.slo - 1.0) / 0.25);
        b = b < 0 ? 0 : b > 3 ? 3 : b;
        cr_assert_float_eq(r.lone_cost_by_slo[b], r.total_cost, 1e-6 * r.total_cost, "SLO %.2f",
                           w.jobs[0].spec.slo);
        loom_sim_result_free(&r);
        loom_sim_workload_free(&w);
}

/* Two jobs with long tails and room in their SLOs: the oracle that may time-slice runs them on
 * one node set, each tail overlapping the other's rollout, for less than the grouping it finds
 * otherwise; trainings beside a tail save more. Without heads, taking turns saves no node time
 * and the oracle does not slice them. */
static void slice_pair(loom_sim_cfg *c, loom_us head, loom_sim_result r[3])
{
        loom_sim_cfg_default(c);
        loom_job_spec specs[2];
        job(&specs[0], "S1", 200, 20, 0, 30);
        job(&specs[1], "S2", 200, 20, 0, 30);
        for (int i = 0; i < 2; i++) {
                specs[i].slo = 3;
                specs[i].t_head = head;
        }
        loom_sim_workload w;
        deterministic(c, specs, 2, &w);
        for (int m = 0; m < 3; m++) {
                c->oracle_timeslice = (loom_sim_timeslice)m;
                run(c, &w, LOOM_SIM_ORACLE, &r[m]);
        }
        loom_sim_workload_free(&w);
}

Test(sim_oracle, time_slicing_shares_one_node_set_where_tails_overlap)
{
        loom_sim_cfg c;
        loom_sim_result r[3];
        slice_pair(&c, loom_us_from_s(40), r);
        cr_assert_eq(r[0].timeslice_cost, 0);
        cr_assert_gt(r[1].timeslice_cost, 0.99 * r[1].total_cost, "%f of %f", r[1].timeslice_cost,
                     r[1].total_cost);
        cr_assert_lt(r[1].total_cost, r[0].total_cost);
        cr_assert_lt(r[2].total_cost, r[1].total_cost);
        /* one training node set, no rollout node */
        cr_assert_eq(r[1].peak_gpus[LOOM_POOL_ROLLOUT], 0);
        cr_assert_eq(r[1].peak_gpus[LOOM_POOL_TRAIN], 8);
        for (int m = 0; m < 3; m++) {
                cr_assert_float_eq(r[m].slo_attainment, 1.0, 1e-12);
                loom_sim_result_free(&r[m]);
        }
        slice_pair(&c, 0, r);
        cr_assert_eq(r[1].timeslice_cost, 0, "in turn without overlap: nothing saved");
        cr_assert_eq(r[2].timeslice_cost, 0);
        cr_assert_float_eq(r[1].total_cost, r[0].total_cost, 1e-9 * r[0].total_cost);
        for (int m = 0; m < 3; m++)
                loom_sim_result_free(&r[m]);
}

/* ---- Gavel+ -----------------------------------------------------------------------------------
 */

/*
 * Two Type-A jobs (125 s + 120 s + 12.7 s sync, 10 iterations, switches free). Under SLO 1.1
 * neither can give up half of a set's time, so Gavel+ gives each its own nodes and costs what
 * Solo-D costs. Under SLO 3 they share one set, taking whole iterations in turn: one set's
 * price, but each job's iteration is about the pair's, because nothing runs in the other
 * job's bubbles; loom interleaves their phases instead.
 */
static void gavel_pair(double slo, loom_sim_result *gv, loom_sim_result *solo,
                       loom_sim_result *loom)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        for (int i = 0; i < 4; i++)
                c.warm_s[i] = c.cold_s[i] = 0;
        c.policy.warm_switch = 0;
        loom_job_spec specs[2];
        job(&specs[0], "A1", 125, 120, 12.7, 10);
        job(&specs[1], "A2", 125, 120, 12.7, 10);
        specs[0].slo = specs[1].slo = slo;
        loom_sim_workload w;
        deterministic(&c, specs, 2, &w);
        run(&c, &w, LOOM_SIM_GAVEL, gv);
        run(&c, &w, LOOM_SIM_SOLO, solo);
        run(&c, &w, LOOM_SIM_LOOM, loom);
        loom_sim_workload_free(&w);
}

Test(sim_gavel, job_level_fractions_share_only_what_the_slos_allow)
{
        loom_sim_result gv, solo, lm;
        gavel_pair(1.1, &gv, &solo, &lm);
        cr_assert_eq(gv.peak_gpus[0], 16, "SLO 1.1: a set each");
        cr_assert_float_eq(gv.total_cost, solo.total_cost, 1e-6 * solo.total_cost);
        cr_assert_float_eq(gv.iter_s[0], solo.iter_s[0], 1e-6);
        loom_sim_result_free(&gv);
        loom_sim_result_free(&solo);
        loom_sim_result_free(&lm);

        gavel_pair(3.0, &gv, &solo, &lm);
        cr_assert_eq(gv.peak_gpus[0], 8, "SLO 3: one shared set");
        cr_assert_eq(gv.peak_gpus[1], 8);
        cr_assert_float_eq(gv.slo_attainment, 1.0, 1e-12);
        /* each runs every other turn: its 10th iteration ends 18 turns of 257.7 s and 245 s
         * after its first starts, less A1's last sync (none after a job's last iteration) for
         * A2 */
        for (int j = 0; j < 2; j++)
                cr_assert_float_eq(gv.iter_s[j], (18 * 257.7 + 245 - 12.7 * j) / 10, 1e-3,
                                   "job %d: %.3f s per iteration", j, gv.iter_s[j]);
        cr_assert_lt(lm.iter_s[0], 0.6 * gv.iter_s[0], "loom interleaves the phases instead");
        cr_assert_lt(lm.total_cost, 0.6 * gv.total_cost);
        loom_sim_result_free(&gv);
        loom_sim_result_free(&solo);
        loom_sim_result_free(&lm);
}

/* Colocating lone members pays for fewer rollout nodes than WEAVE's groups on the same
 * workload, and keeps every job's profiled SLO. */
Test(sim_lone, colocating_lone_members_is_cheaper_and_keeps_the_profiled_slo)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        loom_sim_workload w;
        poisson(&w, 7, 30, 2, 4, false, LOOM_SIM_MIXED);
        loom_sim_result on, off;
        run(&c, &w, LOOM_SIM_LOOM, &on);
        c.policy.colocate_lone = false;
        run(&c, &w, LOOM_SIM_LOOM, &off);
        cr_assert_lt(on.total_cost, off.total_cost, "on $%.0f, off $%.0f", on.total_cost,
                     off.total_cost);
        cr_assert_lt(on.prov_gpu_h[LOOM_POOL_ROLLOUT], off.prov_gpu_h[LOOM_POOL_ROLLOUT]);
        cr_assert_float_eq(on.slo_attainment_wc, 1.0, 1e-12, "profiled SLO");
        cr_assert_eq(on.jobs_done, w.n);
        loom_sim_result_free(&on);
        loom_sim_result_free(&off);
        loom_sim_workload_free(&w);
}

/* One lookup for loom sim's on/off options: the simulator's own, then the policy's. */
Test(sim, switches_are_the_simulator_s_then_the_policy_s)
{
        loom_sim_cfg c;
        loom_sim_cfg_default(&c);
        cr_assert(c.job_switch, "jobs declare their own switch by default");
        cr_assert_eq(loom_sim_switch(&c, "job-switch"), &c.job_switch);
        cr_assert_eq(loom_sim_switch(&c, "multirate"), &c.policy.multirate);
        cr_assert_eq(loom_sim_switch(&c, "colocate-lone"), &c.policy.colocate_lone);
        cr_assert_null(loom_sim_switch(&c, "no-such-switch"));
}
