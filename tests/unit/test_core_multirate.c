/*
 * test_core_multirate.c - multi-rate co-execution groups: the generalised meta-iteration
 * simulation (rates, slot order, gaps), placement choosing and re-rating rates, and dispatch
 * realising T_meta / r for every member when phases take their worst-case times.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core_spec.h"
#include "loom/sched.h"

#include "test_rng.h"

/* All rates 1 is the single-rate round robin: same period, every gap at least the mean. */
Test(multirate, all_rates_one_is_the_single_rate_period)
{
        rng_state = 0x5eed;
        for (int trial = 0; trial < 2000; trial++) {
                int n = (int)uniform(1, 6), R = (int)uniform(1, 3), nodes[8];
                loom_meta_job j[8];
                int ones[8];
                for (int i = 0; i < n; i++) {
                        nodes[i] = (int)uniform(0, R - 1);
                        j[i] = (loom_meta_job){uniform(1, 500) * 1000,
                                               uniform(1, 500) * 1000,
                                               uniform(0, 2) ? 0 : uniform(1, 30) * 1000,
                                               1,
                                               &nodes[i],
                                               0,
                                               0,
                                               0};
                        ones[i] = 1;
                }
                loom_us t0, t1, gaps[8];
                cr_assert_eq(loom_meta_period(j, n, R, 0, &t0, NULL), 0);
                cr_assert_eq(loom_meta_eval(j, ones, n, R, 0, &t1, gaps, NULL), 0);
                cr_assert_eq(t0, t1, "trial %d: %lld != %lld", trial, (long long)t0, (long long)t1);
                for (int i = 0; i < n; i++)
                        cr_assert_geq(gaps[i], t1 - 1, "trial %d job %d gap %lld < T_meta %lld",
                                      trial, i, (long long)gaps[i], (long long)t1);
                int slots[8];
                cr_assert_eq(loom_meta_order(j, ones, n, slots, 8), n);
                for (int i = 0; i < n; i++)
                        cr_assert_eq(slots[i], i, "rate-1 order is admission order");
        }
}

/* Random multi-rate groups: the period is bounded below by the weighted cycle and load, every
 * member's longest gap is at least its mean T_meta / r, and each member's repeats keep their
 * order in the slot sequence. */
Test(multirate, period_bounds_and_order_over_random_groups)
{
        rng_state = 0xfeedULL;
        for (int trial = 0; trial < 2000; trial++) {
                int n = (int)uniform(1, 5), R = (int)uniform(1, 3), nodes[8], rates[8];
                loom_meta_job j[8];
                for (int i = 0; i < n; i++) {
                        nodes[i] = (int)uniform(0, R - 1);
                        j[i] = (loom_meta_job){uniform(1, 600) * 1000,
                                               uniform(1, 600) * 1000,
                                               uniform(0, 3) ? 0 : uniform(1, 30) * 1000,
                                               1,
                                               &nodes[i],
                                               0,
                                               0,
                                               0};
                        rates[i] = (int)uniform(1, 4);
                }
                loom_us t, gaps[8];
                cr_assert_eq(loom_meta_eval(j, rates, n, R, 0, &t, gaps, NULL), 0);
                cr_assert_geq(t, loom_meta_t_cycle_r(j, rates, n));
                cr_assert_geq(t, loom_meta_t_load_r(j, rates, n, R));
                for (int i = 0; i < n; i++)
                        cr_assert_geq(gaps[i], t / rates[i] - 1);
                int slots[64], L = loom_meta_order(j, rates, n, slots, 64), seen[8] = {0};
                int sum = 0;
                for (int i = 0; i < n; i++)
                        sum += rates[i];
                cr_assert_eq(L, sum);
                for (int k = 0; k < L; k++)
                        seen[slots[k]]++;
                for (int i = 0; i < n; i++)
                        cr_assert_eq(seen[i], rates[i]);
        }
}

/* A short job in a long job's training bubble: rate 4 runs four short iterations while the long
 * one rolls out, and the period stays the long job's cycle; the long job's training (200 s) is
 * a gap the short one cannot avoid. */
Test(multirate, a_short_job_repeats_inside_a_long_cycle)
{
        int n0[] = {0}, n1[] = {1};
        loom_meta_job j[2] = {{800000, 200000, 0, 1, n0, 0, 0, 0},
                              {60000, 40000, 0, 1, n1, 0, 0, 0}};
        int rates[2] = {1, 4};
        loom_us t, gaps[2];
        cr_assert_eq(loom_meta_eval(j, rates, 2, 2, 0, &t, gaps, NULL), 0);
        cr_assert_eq(t, 1000000, "period %lld", (long long)t);
        cr_assert_geq(gaps[1], 240000, "the long job's training stalls the short one: %lld",
                      (long long)gaps[1]);
        cr_assert_eq(gaps[0], 1000000);
        cr_assert_eq(loom_meta_eval(j, (int[]){1, 17}, 2, 2, 0, &t, NULL, NULL), LOOM_EINVAL);
}

/* ---- the scheduler ---------------------------------------------------------------------- */

static loom_job_spec spec(const char *id, double roll, double train, double slo)
{
        return core_spec(id, roll, train, slo, 100 * LOOM_GB, 100 * LOOM_GB);
}

typedef struct ev {
        loom_us at;
        loom_job_id job;
        loom_phase phase;
} ev;

/* Drive s with worst-case phase lengths until `until`; ends[id] counts iterations after
 * `from`. */
static void drive(loom_sched *s, loom_us from, loom_us until, int64_t *count)
{
        ev evs[256];
        int n = 0;
        loom_us now = 0;
        for (;;) {
                loom_action a;
                while (loom_sched_next_action(s, &a)) {
                        if (a.type != LOOM_ACT_START_PHASE)
                                continue;
                        loom_job_info ji;
                        cr_assert_eq(loom_sched_job_info(s, a.job, &ji), 0);
                        loom_us len = a.phase == LOOM_PHASE_ROLLOUT ? ji.spec.t_roll
                                      : a.phase == LOOM_PHASE_TRAIN ? ji.t_train_in_group
                                                                    : ji.spec.t_sync;
                        cr_assert_lt(n, 256);
                        evs[n++] = (ev){now + len, a.job, a.phase};
                }
                if (n == 0)
                        return;
                int b = 0;
                for (int i = 1; i < n; i++)
                        if (evs[i].at < evs[b].at)
                                b = i;
                ev e = evs[b];
                evs[b] = evs[--n];
                now = e.at;
                if (now > until)
                        return;
                if (e.phase == LOOM_PHASE_TRAIN && now > from)
                        count[e.job]++;
                cr_assert_eq(loom_sched_phase_done(s, now, e.job, e.phase), 0);
        }
}

/* Placement puts a short job at the rate its SLO needs into a long job's group, names the
 * rate, and dispatch realises
 * T_meta / r for every member. With multirate off the same jobs need more groups. */
Test(multirate, placement_rates_and_dispatch_realise_them)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        cr_assert(po.multirate, "multirate is on by default");
        loom_job_spec js[2] = {spec("long", 800, 200, 1.2), spec("short", 60, 40, 3.0)};
        int groups[2] = {0, 0};
        for (int mode = 0; mode < 2; mode++) {
                po.multirate = mode == 1;
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_decision d;
                loom_job_id id[2];
                for (int i = 0; i < 2; i++) {
                        loom_decision_init(&d, true);
                        cr_assert_eq(loom_sched_submit(s, 0, &js[i], &d, &id[i], NULL), 0);
                        if (mode == 1 && i == 1) {
                                cr_assert_eq(d.group, 0);
                                cr_assert_gt(d.rate, 1, "rate %d", d.rate);
                                cr_assert(strstr(d.reason, "at rate"), "%s", d.reason);
                        }
                        if (mode == 0)
                                cr_assert_eq(d.rate, 1);
                        loom_decision_free(&d);
                }
                loom_sched_stats st;
                loom_sched_stats_get(s, &st);
                groups[mode] = st.groups;
                if (mode == 1)
                        cr_assert_lt(groups[1], groups[0], "multi-rate needs fewer groups");
                loom_group_info gi;
                cr_assert_eq(loom_sched_group_info(s, 0, &gi), 0);
                int64_t count[8] = {0};
                loom_us from = loom_us_from_s(20000), until = loom_us_from_s(120000);
                drive(s, from, until, count);
                for (int i = 0; i < 2; i++) {
                        loom_job_info ji;
                        cr_assert_eq(loom_sched_job_info(s, id[i], &ji), 0);
                        loom_group_info g;
                        cr_assert_eq(loom_sched_group_info(s, ji.group, &g), 0);
                        double mean = loom_us_to_s(until - from) / (double)count[id[i]];
                        double want = loom_us_to_s(g.t_meta) / ji.rate;
                        cr_assert(mean < want * 1.01 && mean > want * 0.99,
                                  "mode %d job %s rate %d: %.1f s per iteration, T_meta/r %.1f s",
                                  mode, ji.spec.id, ji.rate, mean, want);
                        cr_assert_leq(mean, loom_us_to_s(loom_job_budget(&ji.spec)) * 1.001);
                }
                loom_sched_free(s);
        }
}

/* Learned admission re-plans a multi-rate member on its observed profile: the member keeps its
 * rate, the group's period does not grow, and the budget it is held to is its rate times its
 * learned budget. */
Test(multirate, learned_replan_keeps_the_rates)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        po.admission = LOOM_ADMIT_P99;
        po.learn_after = 3;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec l = spec("long", 800, 200, 1.2), sh = spec("short", 60, 40, 3.0);
        loom_decision d;
        loom_job_id il, is;
        loom_decision_init(&d, false);
        cr_assert_eq(loom_sched_submit(s, 0, &l, &d, &il, NULL), 0);
        cr_assert_eq(loom_sched_submit(s, 0, &sh, &d, &is, NULL), 0);
        cr_assert_gt(d.rate, 1);
        int rate = d.rate;
        loom_group_info g0, g1;
        cr_assert_eq(loom_sched_group_info(s, d.group, &g0), 0);
        int rc = 0;
        for (int i = 0; i < 3; i++) {
                cr_assert_eq(loom_sched_observe(s, 0, is, LOOM_PHASE_ROLLOUT, loom_us_from_s(30)),
                             0);
                rc = loom_sched_observe(s, 0, is, LOOM_PHASE_TRAIN, loom_us_from_s(20));
        }
        cr_assert_eq(rc, 1, "the short job's group is re-planned (%d)", rc);
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, is, &ji), 0);
        cr_assert(ji.learned);
        cr_assert_eq(ji.rate, rate);
        cr_assert_eq(loom_sched_group_info(s, d.group, &g1), 0);
        cr_assert_leq(g1.t_meta, g0.t_meta);
        cr_assert_leq(g1.t_meta, (loom_us)rate * ji.learned_budget);
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* ---- training-pool right-sizing ---------------------------------------------------------- */

/* A job asking for 4 training nodes with SLO slack opens a group of the fewest training nodes
 * that keep its iteration (t_roll + t_train g / P) within its budget and its training working
 * set per node (mem_train g / P) within host memory; off, or without slack, or without memory,
 * it gets the 4 it asked for. The member's in-group training time is the scaled one, and
 * driving the core with worst-case phases keeps it within its budget. */
Test(multirate, rightsize_opens_the_fewest_training_nodes_within_slo_and_memory)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        cr_assert_not(po.train_rightsize, "off by default");
        po.colocate_lone = false; /* the price below includes the job's rollout node */
        /* T_solo 300 s, budget 540 s: 1 node -> 100 + 800 = 900 s, 2 -> 500 s fits */
        loom_job_spec big = spec("big", 100, 200, 1.8);
        big.train_gpus = 32;
        struct {
                bool on;
                double slo;
                uint64_t mem;
                int want;
        } cases[] = {
            {false, 1.8, 100 * LOOM_GB, 4}, /* off: what it asked for */
            {true, 1.8, 100 * LOOM_GB, 2},  /* 2 nodes meet 540 s */
            {true, 3.0, 100 * LOOM_GB, 1},  /* 900 s fits a 900 s budget */
            {true, 1.0, 100 * LOOM_GB, 4},  /* no slack */
            {true, 3.0, 0, 3},              /* memory: set below */
        };
        /* x4 on 1 node and x2 on 2 overflow, x4/3 on 3 fits: the SLO alone would allow 1 */
        cases[4].mem = cl.host_mem_bytes / 2 + LOOM_GB;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                po.train_rightsize = cases[c].on;
                big.slo = cases[c].slo;
                big.mem_train = cases[c].mem;
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_decision d;
                loom_job_id id;
                loom_decision_init(&d, true);
                cr_assert_eq(loom_sched_submit(s, 0, &big, &d, &id, NULL), 0);
                cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
                cr_assert_eq(d.n_train_nodes, cases[c].want, "case %zu: %d training nodes", c,
                             d.n_train_nodes);
                double price = loom_cluster_node_price(&cl, LOOM_POOL_ROLLOUT) +
                               cases[c].want * loom_cluster_node_price(&cl, LOOM_POOL_TRAIN);
                cr_assert_float_eq(d.marginal_cost_per_hour, price, 1e-9, "case %zu", c);
                loom_decision_free(&d);
                loom_group_info g;
                cr_assert_eq(loom_sched_group_info(s, 0, &g), 0);
                cr_assert_eq(g.n_train_nodes, cases[c].want);
                loom_job_info ji;
                cr_assert_eq(loom_sched_job_info(s, id, &ji), 0);
                cr_assert_eq(ji.t_train_in_group,
                             loom_group_train_time(big.t_train, 32, 8 * cases[c].want, 1.0));
                cr_assert_eq(ji.t_train_in_group * cases[c].want / 4, big.t_train, "case %zu", c);
                int64_t count[4] = {0};
                loom_us from = loom_us_from_s(10000), until = loom_us_from_s(40000);
                drive(s, from, until, count);
                /* at most one iteration short of one per budget over the window */
                int64_t least = (until - from) / loom_job_budget(&big) - 1;
                cr_assert_geq(count[id], least, "case %zu: %lld iterations < %lld", c,
                              (long long)count[id], (long long)least);
                loom_sched_free(s);
        }
}

/* A right-sized group takes later jobs on its smaller pool: a job asking for 2 training nodes
 * joins a one-node group and trains there at t_train g / P. */
Test(multirate, rightsize_group_takes_jobs_on_its_smaller_pool)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        po.train_rightsize = true;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = spec("a", 100, 100, 3.0), b = spec("b", 300, 50, 3.0);
        a.train_gpus = 16; /* 2 nodes asked; 1 meets 3 x 200 s */
        b.train_gpus = 16;
        loom_decision d;
        loom_job_id ia, ib;
        loom_decision_init(&d, false);
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &ia, NULL), 0);
        cr_assert_eq(d.n_train_nodes, 1);
        cr_assert_eq(loom_sched_submit(s, 0, &b, &d, &ib, NULL), 0);
        cr_assert_eq(d.group, 0, "b joins a's one-node group: %s", d.reason);
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, ib, &ji), 0);
        cr_assert_eq(ji.t_train_in_group, 2 * b.t_train);
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* A job joins a lone group while the lone member's rollout runs on the training nodes. That
 * rollout held the training pool the newcomer's turns assume free, so once it ends the member
 * trains first: a newcomer of rate 3 took three trainings ahead of it, past the one-iteration
 * member's SLO. */
Test(multirate, a_lone_member_s_colocated_rollout_trains_before_a_newcomer)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        po.join_wait = false; /* which would keep B out: A has no slack for the round B adds */
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = spec("A", 467.9, 101.7, 1.266), b = spec("B", 75.3, 90.1, 1.77);
        a.t_switch = loom_us_from_s(4);
        a.iterations = 1;
        b.t_switch = loom_us_from_s(1.5);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_err e;
        loom_job_id ia, ib;
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &ia, &e), 0, "%s", e.msg);
        loom_action act;
        bool colo = false;
        while (loom_sched_next_action(s, &act))
                colo |= act.type == LOOM_ACT_START_PHASE && act.job == ia &&
                        act.pool == LOOM_POOL_TRAIN && act.phase == LOOM_PHASE_ROLLOUT;
        cr_assert(colo, "A alone rolls out on its training node");
        cr_assert_eq(loom_sched_submit(s, loom_us_from_s(9), &b, &d, &ib, &e), 0, "%s", e.msg);
        cr_assert_eq(d.group, 0, "B joins A's group: %s", d.reason);
        /* B runs on its rollout node meanwhile; A's rollout ends at 467.9 s */
        loom_us now = loom_us_from_s(9), b_end = 0;
        loom_job_id trained[4] = {0};
        int n_trained = 0;
        bool a_rolling = true, b_running = false, b_rolled = false;
        loom_phase b_phase = LOOM_PHASE_ROLLOUT;
        while (n_trained < 2) {
                while (loom_sched_next_action(s, &act)) {
                        if (act.type != LOOM_ACT_START_PHASE)
                                continue;
                        if (act.phase == LOOM_PHASE_TRAIN && n_trained < 4)
                                trained[n_trained++] = act.job;
                        if (act.job != ib)
                                continue;
                        loom_job_info ji;
                        cr_assert_eq(loom_sched_job_info(s, ib, &ji), 0);
                        b_phase = act.phase;
                        b_end = now + (act.phase == LOOM_PHASE_ROLLOUT ? ji.spec.t_roll
                                                                       : ji.t_train_in_group);
                        b_running = true;
                }
                loom_us a_end = loom_us_from_s(467.9);
                if (a_rolling && (!b_running || a_end <= b_end)) {
                        now = a_end;
                        a_rolling = false;
                        cr_assert_eq(loom_sched_phase_done(s, now, ia, LOOM_PHASE_ROLLOUT), 0);
                } else if (b_running) {
                        now = b_end;
                        b_running = false;
                        b_rolled |= b_phase == LOOM_PHASE_ROLLOUT;
                        cr_assert_eq(loom_sched_phase_done(s, now, ib, b_phase), 0);
                } else {
                        break;
                }
        }
        cr_assert(b_rolled, "B rolled out while A's rollout held the training node");
        cr_assert_eq(trained[0], ia, "A trains first once its rollout ends (then %u, %u)",
                     trained[0], trained[1]);
        loom_decision_free(&d);
        loom_sched_free(s);
}
