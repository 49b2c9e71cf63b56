/*
 * test_core_learn.c - learned-profile admission (loom_sched_observe, admission p99/p95), the
 * SLO budget a re-admitted job carries (t_solo_ref), and the fair baselines random-slo and
 * greedy-slo.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core_spec.h"
#include "loom/sched.h"

static loom_cluster_cfg cl;
static loom_policy_cfg po;

static void setup(void)
{
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        po.multirate = false; /* single-rate round robin (test_core_multirate.c covers rates) */
}

TestSuite(learn, .init = setup);

static loom_job_spec spec(const char *id, double roll, double train, double slo)
{
        return core_spec(id, roll, train, slo, 100 * LOOM_GB, 100 * LOOM_GB);
}

static loom_job_id submit(loom_sched *s, loom_job_spec sp)
{
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id id = 0;
        loom_err e;
        cr_assert_eq(loom_sched_submit(s, 0, &sp, &d, &id, &e), 0, "submit %s: %s", sp.id, e.msg);
        return id;
}

static void drain(loom_sched *s)
{
        loom_action a;
        while (loom_sched_next_action(s, &a))
                ;
}

/* Run `iters` iterations of a job alone in its group, observing roll_s and train_s each and,
 * when head_s >= 0, reporting each rollout's head (start to the tail threshold) before the
 * rollout's length; returns the last observe() result. */
static int run_alone_head(loom_sched *s, loom_job_id j, int iters, double roll_s, double head_s,
                          double train_s)
{
        int rc = 0;
        loom_us now = 0;
        for (int i = 0; i < iters; i++) {
                drain(s);
                if (head_s >= 0)
                        cr_assert_eq(loom_sched_observe_head(s, j, loom_us_from_s(head_s)), 0);
                now += loom_us_from_s(roll_s);
                cr_assert_geq(
                    loom_sched_observe(s, now, j, LOOM_PHASE_ROLLOUT, loom_us_from_s(roll_s)), 0);
                cr_assert_eq(loom_sched_phase_done(s, now, j, LOOM_PHASE_ROLLOUT), 0);
                drain(s);
                now += loom_us_from_s(train_s);
                rc = loom_sched_observe(s, now, j, LOOM_PHASE_TRAIN, loom_us_from_s(train_s));
                cr_assert_geq(rc, 0);
                cr_assert_eq(loom_sched_phase_done(s, now, j, LOOM_PHASE_TRAIN), 0);
        }
        drain(s);
        return rc;
}

static int run_alone(loom_sched *s, loom_job_id j, int iters, double roll_s, double train_s)
{
        return run_alone_head(s, j, iters, roll_s, -1, train_s);
}

static loom_decision_kind decide(loom_sched *s, loom_job_spec sp)
{
        loom_decision d;
        loom_decision_init(&d, false);
        cr_assert_eq(loom_sched_decide(s, &sp, &d, NULL), 0);
        return d.kind;
}

Test(learn, names_parse_and_config_is_checked)
{
        loom_admission a;
        cr_assert_eq(loom_admission_parse("p95", &a), 0);
        cr_assert_eq(a, LOOM_ADMIT_P95);
        cr_assert_str_eq(loom_admission_name(LOOM_ADMIT_P99), "p99");
        cr_assert_eq(loom_admission_parse("p50", &a), LOOM_EINVAL);
        loom_err e;
        po.learn_after = 0;
        cr_assert_eq(loom_policy_cfg_validate(&po, &cl, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "learn_after");
        po.learn_after = 3;
        po.admission = (loom_admission)7;
        cr_assert_eq(loom_policy_cfg_validate(&po, &cl, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "admission");
}

/*
 * A (100 s rollout, 300 s training worst case, SLO 2) really trains for 60 s. B (100 s + 100 s,
 * SLO 1.0) cannot join A's group on A's worst case (T_cycle 400 s > B's 200 s budget). After
 * learn_after (3) iterations A's budget is its measured solo iteration, but under the order
 * bound its plan stays on the worst case: a p99 is bounded at 90% confidence only from 230
 * iterations (1 - 0.99^230 >= 0.9). From then on A is planned on (100 s, 60 s): T_cycle 200 s,
 * B fits.
 */
Test(learn, a_learned_profile_opens_slack_for_a_new_member)
{
        po.admission = LOOM_ADMIT_P99;
        po.learn_bound = LOOM_LEARN_ORDER;
        po.warm_switch = 0;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_id a = submit(s, spec("A", 100, 300, 2.0));
        loom_job_spec b = spec("B", 100, 100, 1.0);
        cr_assert_eq(decide(s, b), LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(run_alone(s, a, 2, 100, 60), 0, "no re-plan before learn_after iterations");
        cr_assert_eq(decide(s, b), LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(run_alone(s, a, 1, 100, 60), 1, "the budget is re-planned at learn_after");
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, a, &ji), 0);
        cr_assert_eq(ji.learned_budget, loom_us_from_s(2.0 * 160));
        cr_assert_eq(ji.spec.t_train, loom_us_from_s(300), "3 samples do not bound a p99");
        cr_assert_eq(run_alone(s, a, 226, 100, 60), 0);
        cr_assert_eq(loom_sched_job_info(s, a, &ji), 0);
        cr_assert_eq(ji.spec.t_train, loom_us_from_s(300), "229 samples do not bound a p99");
        cr_assert_eq(decide(s, b), LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(run_alone(s, a, 1, 100, 60), 1);
        cr_assert_eq(loom_sched_job_info(s, a, &ji), 0);
        cr_assert(ji.learned);
        cr_assert_eq(ji.spec.t_train, loom_us_from_s(60));
        cr_assert_eq(ji.declared.t_train, loom_us_from_s(300));
        cr_assert_eq(ji.learned_budget, loom_us_from_s(2.0 * 160));
        cr_assert_neq(decide(s, b), LOOM_DECISION_NEW_GROUP);
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.replans, 2);
        loom_sched_free(s);
}

Test(learn, worst_case_admission_ignores_observations)
{
        po.warm_switch = 0;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_id a = submit(s, spec("A", 100, 300, 2.0));
        cr_assert_eq(run_alone(s, a, 5, 100, 60), 0);
        loom_job_info ji;
        loom_sched_job_info(s, a, &ji);
        cr_assert(!ji.learned);
        cr_assert_eq(ji.spec.t_train, loom_us_from_s(300));
        cr_assert_eq(decide(s, spec("B", 100, 100, 1.0)), LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(loom_sched_observe(s, 0, a, LOOM_PHASE_TRAIN, -1), LOOM_EINVAL);
        cr_assert_eq(loom_sched_observe(s, 0, 99, LOOM_PHASE_TRAIN, 1), LOOM_ENOENT);
        loom_sched_free(s);
}

/*
 * A (100 s + 100 s, SLO 1.0) shares a group with B (150 s + 40 s): T_cycle 200 s. Measured,
 * A trains for 50 s, so alone it would iterate in 150 s and its SLO allows no more; but B
 * alone takes 190 s. The re-plan is refused (observe returns 2), A keeps its plan, and the
 * group, now held to A's real budget, takes nobody else.
 */
Test(learn, a_replan_that_breaks_a_budget_is_refused_and_closes_the_group)
{
        po.admission = LOOM_ADMIT_P95;
        po.warm_switch = 0;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_id a = submit(s, spec("A", 100, 100, 1.0));
        loom_job_spec c = spec("C", 20, 10, 10.0);
        submit(s, spec("B", 150, 40, 4.0));
        cr_assert_neq(decide(s, c), LOOM_DECISION_NEW_GROUP, "C fits before A is measured");
        loom_job_info ji;
        loom_sched_job_info(s, a, &ji);
        cr_assert_eq(ji.group, 0);
        /* drive A's phases by hand: the group's round robin also runs B, which we only finish */
        int last = 0;
        loom_us now = 0;
        for (int i = 0; i < 3; i++) {
                loom_action act;
                while (loom_sched_next_action(s, &act))
                        ;
                now += loom_us_from_s(200);
                loom_sched_observe(s, now, a, LOOM_PHASE_ROLLOUT, loom_us_from_s(100));
                loom_sched_phase_done(s, now, a, LOOM_PHASE_ROLLOUT);
                loom_sched_phase_done(s, now, 2, LOOM_PHASE_ROLLOUT);
                while (loom_sched_next_action(s, &act))
                        ;
                last = loom_sched_observe(s, now, a, LOOM_PHASE_TRAIN, loom_us_from_s(50));
                loom_sched_phase_done(s, now, a, LOOM_PHASE_TRAIN);
                while (loom_sched_next_action(s, &act))
                        ;
                loom_sched_phase_done(s, now, 2, LOOM_PHASE_TRAIN);
        }
        cr_assert_eq(last, 2);
        loom_sched_job_info(s, a, &ji);
        cr_assert(!ji.learned);
        cr_assert_eq(ji.spec.t_train, loom_us_from_s(100));
        cr_assert_eq(ji.learned_budget, loom_us_from_s(150));
        cr_assert_eq(decide(s, c), LOOM_DECISION_NEW_GROUP, "the group must be closed");
        loom_sched_free(s);
}

/* A job re-admitted on a learned profile keeps the budget of its mean solo iteration. */
Test(learn, t_solo_ref_sets_the_budget)
{
        po.warm_switch = 0;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        submit(s, spec("A", 100, 100, 2.0));       /* T_cycle 200 s */
        loom_job_spec b = spec("B", 100, 50, 1.5); /* budget 225 s: fits */
        cr_assert_neq(decide(s, b), LOOM_DECISION_NEW_GROUP);
        b.t_solo_ref = loom_us_from_s(120); /* budget 180 s < T_cycle 200 s */
        cr_assert_eq(decide(s, b), LOOM_DECISION_NEW_GROUP);
        b.t_solo_ref = -1;
        loom_err e;
        loom_decision d;
        loom_decision_init(&d, false);
        cr_assert_eq(loom_sched_decide(s, &b, &d, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "t_solo_ref");
        loom_sched_free(s);
}

/* The fair baselines never admit a placement that breaks a member's SLO; the blind ones do. */
static int violations(loom_placer p)
{
        po.placer = p;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        uint64_t r = 7;
        for (int i = 0; i < 200; i++) {
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                char id[16];
                snprintf(id, sizeof id, "j%d", i);
                submit(s, spec(id, 50 + (double)((r >> 8) % 550), 25 + (double)((r >> 24) % 575),
                               1.0 + (double)((r >> 40) % 100) / 100.0));
        }
        int bad = 0;
        loom_group_id gids[256];
        int ng = loom_sched_groups(s, gids, 256);
        for (int i = 0; i < ng; i++) {
                loom_group_info gi;
                loom_sched_group_info(s, gids[i], &gi);
                for (int m = 0; m < gi.n_members; m++) {
                        loom_job_info ji;
                        loom_sched_job_info(s, gi.members[m], &ji);
                        bad += gi.t_meta > loom_job_budget(&ji.spec) + 1;
                }
        }
        loom_sched_free(s);
        return bad;
}

Test(learn, fair_baselines_check_slos)
{
        cr_assert_eq(violations(LOOM_PLACER_RANDOM_SLO), 0);
        cr_assert_eq(violations(LOOM_PLACER_GREEDY_SLO), 0);
        cr_assert_gt(violations(LOOM_PLACER_RANDOM), 0);
        cr_assert_gt(violations(LOOM_PLACER_GREEDY), 0);
}

/* The bound is the order statistic whose binomial confidence reaches the level asked; too few
 * samples give none. Values checked against the binomial tail by hand. */
Test(learn, quantile_upper_bound_is_an_order_statistic_at_the_stated_confidence)
{
        double top[10] = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
        bool ok = true;
        /* p99 from 3 samples: the largest is a bound only at 1 - 0.99^3 = 3% */
        cr_assert_eq(loom_quantile_ucb(top, 3, 3, 0.99, 0.9, &ok), 10);
        cr_assert_not(ok);
        /* p95 at 90%: 44 samples give 1 - 0.95^44 = 0.895, 45 give 0.901 */
        loom_quantile_ucb(top, 10, 44, 0.95, 0.9, &ok);
        cr_assert_not(ok);
        cr_assert_eq(loom_quantile_ucb(top, 10, 45, 0.95, 0.9, &ok), 10);
        cr_assert(ok);
        /* p50 of 10 at 90%: P(Bin(10, 0.5) >= r) >= 0.9 up to r = 3 (0.945; r = 4: 0.828) */
        cr_assert_eq(loom_quantile_ucb(top, 10, 10, 0.5, 0.9, &ok), 8);
        cr_assert(ok);
        /* a rank past the kept values: the smallest kept, larger, still a bound */
        cr_assert_eq(loom_quantile_ucb(top, 4, 1000, 0.5, 0.9, &ok), 7);
        cr_assert(ok);
}

/* The same A under the normal bound: re-planned at learn_after on mean + k(3) s of its three
 * iterations. Identical iterations (s = 0) plan A on exactly what it ran, and B fits at once;
 * spread ones (50, 60, 70 s: mean 60, s 10) plan it on 60 + 7.3404 x 10 s. */
Test(learn, the_normal_bound_replans_after_learn_after_iterations)
{
        po.admission = LOOM_ADMIT_P99;
        cr_assert_eq(po.learn_bound, LOOM_LEARN_NORMAL, "the default");
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_id a = submit(s, spec("A", 100, 300, 2.0));
        loom_job_spec b = spec("B", 100, 100, 1.0);
        cr_assert_eq(run_alone(s, a, 2, 100, 60), 0);
        cr_assert_eq(decide(s, b), LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(run_alone(s, a, 1, 100, 60), 1);
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, a, &ji), 0);
        cr_assert(ji.learned);
        cr_assert_eq(ji.spec.t_train, loom_us_from_s(60), "s = 0: the bound is the mean");
        cr_assert_eq(ji.spec.t_roll, loom_us_from_s(100));
        cr_assert_eq(ji.learned_budget, loom_us_from_s(2.0 * 160));
        cr_assert_neq(decide(s, b), LOOM_DECISION_NEW_GROUP);
        loom_sched_free(s);

        s = loom_sched_new(&cl, &po, NULL);
        a = submit(s, spec("A", 100, 300, 2.0));
        cr_assert_eq(run_alone(s, a, 1, 100, 50), 0);
        cr_assert_eq(run_alone(s, a, 1, 100, 60), 0);
        cr_assert_eq(run_alone(s, a, 1, 100, 70), 1);
        cr_assert_eq(loom_sched_job_info(s, a, &ji), 0);
        double f = 0.2 + 7.3404 * (10.0 / 300); /* fractions of the declared 300 s */
        cr_assert_leq(llabs(ji.spec.t_train - (loom_us)(300e6 * f + 0.5)), 1, "%lld",
                      (long long)ji.spec.t_train);
        loom_sched_free(s);
}

/* P(T' <= t) for T' noncentral t with nu degrees of freedom and noncentrality delta:
 * E over V ~ chi(nu) of Phi(t V / sqrt(nu) - delta), by Simpson's rule. */
static double nct_cdf(double t, int nu, double delta)
{
        const int n = 4000;
        double hi = sqrt((double)nu) + 12, h = hi / n, sum = 0;
        double lc = (1 - nu / 2.0) * log(2.0) - lgamma(nu / 2.0);
        for (int i = 1; i <= n; i++) {
                double v = i * h, f = exp(lc + (nu - 1) * log(v) - v * v / 2);
                double w = i == n ? 1 : i % 2 ? 4 : 2;
                sum += w * f * 0.5 * erfc(-(t * v / sqrt((double)nu) - delta) / sqrt(2.0));
        }
        return sum * h / 3;
}

/* k(n) for the z_q quantile: the noncentral t quantile at LOOM_LEARN_CONFIDENCE over sqrt(n),
 * by bisection on nct_cdf. */
static double tolerance_k(int n, double z)
{
        double lo = 0, hi = 1000, d = z * sqrt((double)n);
        for (int it = 0; it < 60; it++) {
                double m = (lo + hi) / 2;
                if (nct_cdf(m, n - 1, d) < LOOM_LEARN_CONFIDENCE)
                        lo = m;
                else
                        hi = m;
        }
        return (lo + hi) / 2 / sqrt((double)n);
}

/* The tabulated factors are the noncentral t quantiles, recomputed here by integration, and
 * the published one-sided tolerance factors where tables give them. */
Test(learn, tolerance_factors_are_noncentral_t_quantiles)
{
        const double z[2] = {1.6448536, 2.3263479}, q[2] = {0.95, 0.99};
        for (int r = 0; r < 2; r++)
                for (int n = 2; n <= LOOM_LEARN_WINDOW / 2; n++) {
                        double k = tolerance_k(n, z[r]);
                        cr_assert_float_eq(loom_normal_tolerance_k(n, q[r]), k, 1e-3,
                                           "q %g n %d: %g", q[r], n, k);
                }
        cr_assert_float_eq(loom_normal_tolerance_k(3, 0.99), 7.340, 1e-3);
        cr_assert_float_eq(loom_normal_tolerance_k(10, 0.99), 3.532, 1e-3);
        cr_assert_float_eq(loom_normal_tolerance_k(5, 0.95), 3.400, 1e-3);
        cr_assert(isinf(loom_normal_tolerance_k(1, 0.99)));
        /* past the table, an approximation that stays above the quantile, within 1% */
        const int big[] = {11, 12, 15, 20, 30, 50, 100, 200};
        for (int r = 0; r < 2; r++)
                for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
                        int n = big[i];
                        double k = tolerance_k(n, z[r]), a = loom_normal_tolerance_k(n, q[r]);
                        cr_assert(a >= k && a <= 1.01 * k, "q %g n %d: %g against %g", q[r], n, a,
                                  k);
                }
        cr_assert(isinf(loom_normal_tolerance_k(5, 0.9)));
        loom_learn_bound b;
        cr_assert_eq(loom_learn_bound_parse("order", &b), 0);
        cr_assert_eq(b, LOOM_LEARN_ORDER);
        cr_assert_str_eq(loom_learn_bound_name(LOOM_LEARN_NORMAL), "normal");
        cr_assert_eq(loom_learn_bound_parse("p99", &b), LOOM_EINVAL);
        po.learn_bound = (loom_learn_bound)5;
        loom_err e;
        cr_assert_eq(loom_policy_cfg_validate(&po, &cl, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "learn_bound");
}

/* A job without history is held to the fleet's prior once a learned job has ended: its budget
 * is slo x (t_roll x mean rollout fraction + t_train x mean training fraction); under worst
 * admission, or with t_solo_ref given, its own declaration. */
Test(learn, new_jobs_are_held_to_the_fleet_prior)
{
        po.admission = LOOM_ADMIT_P99;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_id a = submit(s, spec("A", 100, 300, 2.0));
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, a, &ji), 0);
        cr_assert_eq(ji.spec.t_solo_ref, 0, "no job has ended: no prior");
        cr_assert_eq(run_alone(s, a, 3, 50, 60), 1);
        cr_assert_eq(loom_sched_job_exit(s, 0, a, LOOM_EXIT_FINISHED), 0);
        loom_job_id c = submit(s, spec("C", 100, 300, 2.0));
        cr_assert_eq(loom_sched_job_info(s, c, &ji), 0);
        /* A's means: rollout 50/100, training 60/300 */
        cr_assert_eq(ji.spec.t_solo_ref, loom_us_from_s(100 * 0.5 + 300 * 0.2));
        /* a job too short to be re-planned on what it learns: the shortest solo iteration of
         * the prior's jobs; with one job ended, the same; with a lighter one, that one's */
        loom_job_spec short_job = spec("S", 100, 300, 2.0);
        short_job.iterations = LOOM_PRIOR_SHORT;
        loom_job_id sj = submit(s, short_job);
        cr_assert_eq(loom_sched_job_info(s, sj, &ji), 0);
        cr_assert_eq(ji.spec.t_solo_ref, loom_us_from_s(100 * 0.5 + 300 * 0.2));
        loom_job_spec given = spec("D", 100, 300, 2.0);
        given.t_solo_ref = loom_us_from_s(350);
        loom_job_id d = submit(s, given);
        cr_assert_eq(loom_sched_job_info(s, d, &ji), 0);
        cr_assert_eq(ji.spec.t_solo_ref, loom_us_from_s(350));
        loom_sched_free(s);

        s = loom_sched_new(&cl, &po, NULL);
        a = submit(s, spec("A", 100, 300, 2.0));
        run_alone(s, a, 3, 50, 60);
        cr_assert_eq(loom_sched_job_exit(s, 0, a, LOOM_EXIT_FINISHED), 0);
        loom_job_id b = submit(s, spec("B", 100, 300, 2.0));
        cr_assert_eq(run_alone(s, b, 3, 30, 30), 1);
        cr_assert_eq(loom_sched_job_exit(s, 0, b, LOOM_EXIT_FINISHED), 0);
        short_job.id[0] = 'T';
        sj = submit(s, short_job);
        cr_assert_eq(loom_sched_job_info(s, sj, &ji), 0);
        cr_assert_eq(ji.spec.t_solo_ref, loom_us_from_s(100 * 0.3 + 300 * 0.1),
                     "B's, not the mean");
        short_job.id[0] = 'U';
        short_job.iterations = LOOM_PRIOR_SHORT + 1;
        sj = submit(s, short_job);
        cr_assert_eq(loom_sched_job_info(s, sj, &ji), 0);
        cr_assert_eq(ji.spec.t_solo_ref, loom_us_from_s(100 * 0.4 + 300 * 0.15), "the mean");
        loom_sched_free(s);

        po.admission = LOOM_ADMIT_WORST;
        s = loom_sched_new(&cl, &po, NULL);
        a = submit(s, spec("A", 100, 300, 2.0));
        run_alone(s, a, 3, 50, 60);
        cr_assert_eq(loom_sched_job_exit(s, 0, a, LOOM_EXIT_FINISHED), 0);
        c = submit(s, spec("C", 100, 300, 2.0));
        cr_assert_eq(loom_sched_job_info(s, c, &ji), 0);
        cr_assert_eq(ji.spec.t_solo_ref, 0);
        loom_sched_free(s);
}

/*
 * A lone member is held to the budget it is measured by. A (100 s + 300 s declared, SLO S) fits
 * alone on its training node with two 2 s switches: 404 s within 1.02 x 400 s. It really trains
 * for 40 s and 80 s in turn, 160 s a mean iteration, and 164 s with the switches: its learned
 * budget (S x 160 s) pays for them at SLO 1.04 (166.4 s) and not at 1.02 (163.2 s), where its
 * rollout node is provisioned again once the rollout after its re-plan ends (before it, after
 * seven iterations, the mean was 157.1 s: the same on both sides), though the p99 plan of the
 * noisy phases, and the budget it would carry on its own, are far above that.
 */
Test(learn, a_lone_member_is_held_to_its_learned_budget)
{
        for (int k = 0; k < 2; k++) {
                double slo = k ? 1.04 : 1.02;
                po.admission = LOOM_ADMIT_P99;
                po.warm_switch = loom_us_from_s(2);
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_job_id a = submit(s, spec("A", 100, 300, slo));
                loom_job_info ja;
                loom_group_info ga;
                cr_assert_eq(loom_sched_job_info(s, a, &ja), 0);
                cr_assert_eq(loom_sched_group_info(s, ja.group, &ga), 0);
                cr_assert(ga.lone, "slo %.2f: lone on its declared profile", slo);
                for (int i = 0; i < 8; i++)
                        run_alone(s, a, 1, 100, i % 2 ? 80 : 40);
                cr_assert_eq(loom_sched_job_info(s, a, &ja), 0);
                cr_assert_eq(loom_sched_group_info(s, ja.group, &ga), 0);
                cr_assert_eq(ja.learned_budget, loom_us_from_s(slo * 160));
                cr_assert_gt(ja.spec.t_train, loom_us_from_s(64), "the plan is a p99 bound");
                cr_assert_eq(ga.lone, k == 1, "slo %.2f: lone %d", slo, ga.lone);
                cr_assert_eq(ga.cost_per_hour > loom_cluster_node_price(&cl, LOOM_POOL_TRAIN),
                             k == 0, "its rollout node is paid for again");
                loom_sched_free(s);
        }
}

/*
 * Moving a lone member. B (100 s + 30 s, SLO 2) has working sets too big to run its rollouts
 * on its training node (1,500 GB each, 2,000 GB per node), so its group has a rollout node.
 * A (100 s + 300 s worst case, SLO 2) cannot join it on its worst case (T_meta 400 s, past
 * B's 260 s budget) and runs alone on its own training node. Learned at 60 s, it fits on B's
 * rollout node for nothing: observe says 3, and a re-admission on the learned profile joins
 * B's group. With move_lone off it stays.
 */
Test(learn, a_lone_member_moves_when_another_group_takes_it_for_less)
{
        for (int on = 0; on < 2; on++) {
                po.admission = LOOM_ADMIT_P99;
                po.move_lone = on;
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_job_id b =
                    submit(s, core_spec("B", 100, 30, 2.0, 1500 * LOOM_GB, 1500 * LOOM_GB));
                loom_job_id a = submit(s, spec("A", 100, 300, 2.0));
                loom_job_info ja, jb;
                cr_assert_eq(loom_sched_job_info(s, a, &ja), 0);
                cr_assert_eq(loom_sched_job_info(s, b, &jb), 0);
                cr_assert_neq(ja.group, jb.group);
                loom_group_info ga, gb;
                cr_assert_eq(loom_sched_group_info(s, ja.group, &ga), 0);
                cr_assert_eq(loom_sched_group_info(s, jb.group, &gb), 0);
                cr_assert(ga.lone);
                cr_assert_not(gb.lone);
                cr_assert_eq(run_alone(s, a, 2, 100, 60), 0);
                int rc = run_alone(s, a, 1, 100, 60);
                cr_assert_eq(rc, on ? 3 : 1, "move_lone %d: observe said %d", on, rc);
                cr_assert_eq(loom_sched_job_info(s, a, &ja), 0);
                loom_job_spec moved = ja.spec;
                moved.t_solo_ref = (loom_us)((double)ja.learned_budget / moved.slo);
                loom_decision d;
                loom_decision_init(&d, false);
                cr_assert_eq(loom_sched_job_exit(s, 0, a, LOOM_EXIT_CANCELLED), 0);
                loom_job_id id;
                cr_assert_eq(loom_sched_submit(s, 0, &moved, &d, &id, NULL), 0);
                cr_assert_eq(d.group, jb.group, "the re-admission joins B's group: %s", d.reason);
                cr_assert_lt(d.marginal_cost_per_hour, LOOM_MOVE_GAIN * ga.cost_per_hour);
                loom_sched_free(s);
        }
}

/* Run every phase the core starts, in start order, to its end, each observed at its job's own
 * length (times[job] = {rollout s, training s}), for at most n phases; returns 3 as soon as an
 * observation of job `who`'s training says it should move, else the last one's result. */
static int drive(loom_sched *s, int n, const double (*times)[2], loom_job_id who)
{
        loom_action q[64];
        int head = 0, tail = 0, last = 0;
        loom_us now = 0;
        for (int k = 0; k < n; k++) {
                loom_action a;
                while (loom_sched_next_action(s, &a))
                        if (a.type == LOOM_ACT_START_PHASE && tail - head < 64)
                                q[tail++ % 64] = a;
                if (head == tail)
                        break;
                a = q[head++ % 64];
                cr_assert_lt(a.job, 8);
                double t = times[a.job][a.phase == LOOM_PHASE_TRAIN];
                now += loom_us_from_s(t);
                int rc = loom_sched_observe(s, now, a.job, a.phase, loom_us_from_s(t));
                cr_assert_geq(rc, 0);
                if (a.job == who && a.phase == LOOM_PHASE_TRAIN && (last = rc) == 3)
                        return 3;
                cr_assert_eq(loom_sched_phase_done(s, now, a.job, a.phase), 0);
        }
        return last;
}

/*
 * Moving a member of a shared group. B (100 s + 30 s, SLO 2) cannot roll out on its training
 * node (1,500 GB working sets) and has a rollout node of its own. A (100 s + 300 s, SLO 2) does
 * not fit with B and runs alone; C, declared like A with SLO 3, joins A's group, whose rollout
 * node is provisioned for it. Learned at 60 s of training, C fits on B's rollout node for nothing,
 * and without C, A goes back to rolling out on its training node: C's group would stop paying its
 * rollout node. Under policy.move_members observe says 3 for C and its re-admission joins B
 * at T_meta 200 s; with it off C stays, as it does when that would leave B less than
 * LOOM_MOVE_MARGIN of slack (B's SLO 1.56: budget 202.8 s), though a re-admission would still
 * land there.
 */
Test(learn, a_member_moves_when_its_group_saves_more_than_the_move_costs)
{
        for (int k = 0; k < 3; k++) {
                bool on = k != 1;
                double slo_b = k == 2 ? 1.56 : 2.0;
                po.admission = LOOM_ADMIT_P99;
                po.move_members = on;
                po.regroup = false; /* single member moves only (test_core_regroup.c) */
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_job_id b =
                    submit(s, core_spec("B", 100, 30, slo_b, 1500 * LOOM_GB, 1500 * LOOM_GB));
                loom_job_id a = submit(s, spec("A", 100, 300, 2.0));
                loom_job_id c = submit(s, spec("C", 100, 300, 3.0));
                loom_job_info ja, jb, jc;
                cr_assert_eq(loom_sched_job_info(s, a, &ja), 0);
                cr_assert_eq(loom_sched_job_info(s, b, &jb), 0);
                cr_assert_eq(loom_sched_job_info(s, c, &jc), 0);
                cr_assert_neq(ja.group, jb.group);
                cr_assert_eq(jc.group, ja.group, "C shares A's group");
                loom_group_info ga;
                cr_assert_eq(loom_sched_group_info(s, ja.group, &ga), 0);
                cr_assert_not(ga.lone);
                double times[8][2] = {{0}};
                times[a][0] = times[c][0] = times[b][0] = 100;
                times[a][1] = 300;
                times[c][1] = 60;
                times[b][1] = 30;
                int rc = drive(s, 60, (const double(*)[2])times, c);
                cr_assert_eq(rc == 3, k == 0, "case %d: observe said %d", k, rc);
                if (k == 1) {
                        loom_sched_free(s);
                        continue;
                }
                cr_assert_eq(loom_sched_job_info(s, c, &jc), 0);
                loom_job_spec moved = jc.spec;
                moved.t_solo_ref = (loom_us)((double)jc.learned_budget / moved.slo);
                cr_assert_eq(loom_sched_job_exit(s, 0, c, LOOM_EXIT_CANCELLED), 0);
                cr_assert_eq(loom_sched_group_info(s, ja.group, &ga), 0);
                cr_assert_eq(loom_sched_job_info(s, a, &ja), 0);
                cr_assert(ga.lone || ja.state == LOOM_JOB_ROLLING,
                          "without C, A rolls out on its training node again (after a rollout "
                          "on the rollout node in flight)");
                loom_decision d;
                loom_decision_init(&d, false);
                loom_job_id id;
                cr_assert_eq(loom_sched_submit(s, 0, &moved, &d, &id, NULL), 0);
                cr_assert_eq(d.group, jb.group, "the re-admission joins B's group: %s", d.reason);
                cr_assert_eq(d.marginal_cost_per_hour, 0);
                cr_assert_eq(d.t_meta, loom_us_from_s(200));
                cr_assert_eq((double)d.t_meta > (1 - LOOM_MOVE_MARGIN) * slo_b * 130e6, k == 2);
                loom_sched_free(s);
        }
}

/*
 * A rollout's head is learned like its phases and frees its rollout node for the next rollout.
 * A (rollout 100 s reaching the tail threshold at 40 s, training 20 s, SLO 1.2: budget 144 s)
 * runs three iterations; B (50 s, 10 s, SLO 2.5) then arrives. Sharing A's rollout node with
 * rollouts held to their ends, B waits for all of A's: T_meta 150 s > 144 s, so B needs a node
 * of its own (rollout scaling, two rollout nodes with A's). Planned on A's head, B starts
 * after it, slowed by A's tail on one of the node's 8 GPUs (60 s / 8 = 7.5 s) and done before
 * A's training ends: T_meta is A's own 120 s and B packs onto A's node (one rollout node).
 */
Test(learn, a_rollout_s_head_is_learned_and_lets_the_next_rollout_start)
{
        po.admission = LOOM_ADMIT_P99;
        loom_decision_kind kind[2];
        for (int on = 0; on < 2; on++) {
                po.plan_tails = on;
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_job_id a = submit(s, spec("A", 100, 20, 1.2));
                cr_assert_eq(run_alone_head(s, a, 3, 100, 40, 20), 1);
                loom_job_info ji;
                cr_assert_eq(loom_sched_job_info(s, a, &ji), 0);
                cr_assert_eq(ji.learned_head, loom_us_from_s(40), "identical heads: their mean");
                cr_assert_eq(ji.spec.t_head, loom_us_from_s(40));
                cr_assert_eq(ji.learned_budget, loom_us_from_s(144));
                loom_decision d;
                loom_decision_init(&d, false);
                loom_job_spec b = spec("B", 50, 10, 2.5);
                cr_assert_eq(loom_sched_decide(s, &b, &d, NULL), 0);
                kind[on] = d.kind;
                cr_assert_eq(d.n_rollout_nodes, 1);
                if (on) {
                        cr_assert_eq(d.t_meta, loom_us_from_s(120), "%lld", (long long)d.t_meta);
                        cr_assert_float_eq(d.marginal_cost_per_hour, 14.80, 0.01);
                } else {
                        cr_assert_float_eq(d.marginal_cost_per_hour, 2 * 14.80, 0.01);
                }
                loom_sched_free(s);
        }
        cr_assert_eq(kind[0], LOOM_DECISION_ROLLOUT_SCALE);
        cr_assert_eq(kind[1], LOOM_DECISION_DIRECT_PACK);
}

/* Heads that vary are bounded as phases are (mean + k(n) s), never past the rollout: three
 * heads of 30, 40 and 50 s bound at 40 + 7.34 x 10 s > 100 s, so none is planned; a rollout
 * without a head report teaches only its length; heads are never negative. */
Test(learn, a_head_is_bounded_and_reported_only_when_given)
{
        po.admission = LOOM_ADMIT_P99;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_id a = submit(s, spec("A", 100, 20, 1.2));
        run_alone_head(s, a, 1, 100, 30, 20);
        run_alone_head(s, a, 1, 100, 40, 20);
        run_alone_head(s, a, 1, 100, 50, 20);
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, a, &ji), 0);
        cr_assert(ji.learned);
        cr_assert_eq(ji.learned_head, loom_us_from_s(100), "capped at the planned rollout");
        loom_sched_free(s);
        s = loom_sched_new(&cl, &po, NULL);
        loom_job_id c = submit(s, spec("C", 100, 20, 1.2));
        cr_assert_eq(run_alone(s, c, 3, 90, 20), 1);
        cr_assert_eq(loom_sched_job_info(s, c, &ji), 0);
        cr_assert_eq(ji.learned_head, 0);
        cr_assert_eq(ji.spec.t_head, 0);
        cr_assert_eq(loom_sched_observe_head(s, c, -1), LOOM_EINVAL);
        cr_assert_eq(loom_sched_observe_head(s, 999, 1), LOOM_ENOENT);
        loom_sched_free(s);
}

/* A lone member's rollouts run on its training GPUs, slower there (x1.5 here): they plan its own
 * rollouts, but its SLO stays against its solo (disaggregated) iteration. Its budget must not
 * grow with its own colocation slowdown: with no rollout seen on rollout GPUs it is measured on
 * the declared rollout (no fleet prior yet) and the observed training, and the colocated rollouts
 * still count in its planned profile. */
Test(learn, a_lone_member_s_budget_does_not_grow_with_its_colocated_rollouts)
{
        po.admission = LOOM_ADMIT_P99;
        po.learn_after = 3;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = spec("A", 100, 100, 2.0);
        loom_job_id ia = submit(s, a);
        loom_us now = 0;
        for (int i = 0; i < 3; i++) {
                drain(s);
                now += loom_us_from_s(120);
                cr_assert_geq(loom_sched_observe_on(s, now, ia, LOOM_PHASE_ROLLOUT, LOOM_POOL_TRAIN,
                                                    loom_us_from_s(120)),
                              0);
                cr_assert_eq(loom_sched_phase_done(s, now, ia, LOOM_PHASE_ROLLOUT), 0);
                drain(s);
                now += loom_us_from_s(50);
                cr_assert_geq(loom_sched_observe(s, now, ia, LOOM_PHASE_TRAIN, loom_us_from_s(50)),
                              0);
                cr_assert_eq(loom_sched_phase_done(s, now, ia, LOOM_PHASE_TRAIN), 0);
        }
        loom_job_info in;
        cr_assert_eq(loom_sched_job_info(s, ia, &in), 0);
        cr_assert(in.learned_roll >= loom_us_from_s(120), "planned on what it ran: %lld",
                  (long long)in.learned_roll);
        cr_assert_eq(in.learned_budget, loom_us_from_s(2.0 * (100 + 50)),
                     "budget %.3f s: SLO x (declared rollout + observed training)",
                     loom_us_to_s(in.learned_budget));
        cr_assert_eq(loom_sched_observe_on(s, now, ia, LOOM_PHASE_TRAIN, LOOM_POOL_ROLLOUT + 7, 1),
                     LOOM_EINVAL);
        loom_sched_free(s);
}

/* A lone member whose observations take it out of lone (its rollouts on the training GPUs ran
 * long) gets its rollout node back; when later observations, on the rollout node, say it would
 * fit again, it stays: going lone again waits for a membership change, so an estimate at the
 * edge does not release and provision the node every iteration. */
Test(learn, a_member_out_of_lone_stays_out_until_its_group_changes)
{
        po.admission = LOOM_ADMIT_P99;
        po.learn_after = 2;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = spec("A", 100, 100, 1.05);
        a.t_switch = loom_us_from_s(4);
        loom_job_id ia = submit(s, a);
        loom_group_info gi;
        cr_assert_eq(loom_sched_group_info(s, 0, &gi), 0);
        cr_assert(gi.lone, "208 s of a lone iteration fits 1.05 x 200 s");
        int provisioned = 0, released = 0;
        loom_us now = 0;
        for (int i = 0; i < 16; i++) {
                loom_action act;
                loom_pool roll_pool = LOOM_POOL_ROLLOUT;
                while (loom_sched_next_action(s, &act)) {
                        provisioned += act.type == LOOM_ACT_PROVISION_NODE && act.pool == 0;
                        released += act.type == LOOM_ACT_RELEASE_NODE && act.pool == 0;
                        if (act.type == LOOM_ACT_START_PHASE && act.phase == LOOM_PHASE_ROLLOUT)
                                roll_pool = act.pool;
                }
                /* on the training GPUs 110 s, on its rollout node 70 s: once those fill the
                 * window, 70 + 100 + 2 x 4 s fits 1.05 x 170 s again */
                double roll = roll_pool == LOOM_POOL_TRAIN ? 110 : 70;
                now += loom_us_from_s(roll);
                cr_assert_geq(loom_sched_observe_on(s, now, ia, LOOM_PHASE_ROLLOUT, roll_pool,
                                                    loom_us_from_s(roll)),
                              0);
                cr_assert_eq(loom_sched_phase_done(s, now, ia, LOOM_PHASE_ROLLOUT), 0);
                while (loom_sched_next_action(s, &act)) {
                        provisioned += act.type == LOOM_ACT_PROVISION_NODE && act.pool == 0;
                        released += act.type == LOOM_ACT_RELEASE_NODE && act.pool == 0;
                }
                now += loom_us_from_s(100);
                cr_assert_geq(loom_sched_observe(s, now, ia, LOOM_PHASE_TRAIN, loom_us_from_s(100)),
                              0);
                cr_assert_eq(loom_sched_phase_done(s, now, ia, LOOM_PHASE_TRAIN), 0);
        }
        cr_assert_eq(loom_sched_group_info(s, 0, &gi), 0);
        cr_assert_not(gi.lone, "out of lone, and it stays out");
        cr_assert(provisioned == 1 && released == 0,
                  "its rollout node came up once and stayed (%d up, %d down)", provisioned,
                  released);
        loom_sched_free(s);
}
