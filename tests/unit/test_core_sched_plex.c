/*
 * test_core_sched_plex.c - the facade with placer = plex (timeline fitting) and dispatch =
 * hrrs | fcfs | rr on a shared training pool.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "loom/sched.h"

static loom_cluster_cfg cl;
static loom_policy_cfg po;

static void setup(void)
{
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        po.placer = LOOM_PLACER_PLEX;
}

TestSuite(plexsched, .init = setup);

static loom_job_spec spec(double roll, double train, int train_gpus)
{
        loom_job_spec s;
        loom_job_spec_init(&s);
        s.rollout_gpus = 8;
        s.train_gpus = train_gpus;
        s.t_roll = loom_us_from_s(roll);
        s.t_train = loom_us_from_s(train);
        s.slo =
            2.0; /* loose enough for every shift up to a whole cycle: the SLO tests set theirs */
        s.mem_rollout = 100 * LOOM_GB;
        s.mem_train = 100 * LOOM_GB;
        return s;
}

static loom_job_id submit(loom_sched *s, loom_job_spec sp, loom_decision *d)
{
        loom_job_id id = 0;
        loom_err e;
        cr_assert_eq(loom_sched_submit(s, 0, &sp, d, &id, &e), 0, "%s", e.msg);
        return id;
}

static void drain(loom_sched *s)
{
        loom_action a;
        while (loom_sched_next_action(s, &a))
                ;
}

Test(plexsched, jobs_share_a_training_pool_with_rollout_nodes_of_their_own)
{
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        cr_assert_not_null(s, "%s", e.msg);
        loom_decision d;
        loom_decision_init(&d, false);
        /* 7B of Table 2: 231.5 s of rollout, 57.5 s of training calls. */
        loom_job_id a = submit(s, spec(231.53, 57.50, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        loom_group_id g = d.group;
        loom_job_id b = submit(s, spec(231.53, 57.50, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "%s", d.reason);
        cr_assert_eq(d.group, g);
        cr_assert_eq(d.n_rollout_nodes, 1);
        loom_job_info ja, jb;
        loom_sched_job_info(s, a, &ja);
        loom_sched_job_info(s, b, &jb);
        cr_assert_neq(ja.rollout_nodes[0], jb.rollout_nodes[0]);
        cr_assert_eq(ja.train_nodes[0], jb.train_nodes[0]);
        /* Each 7B job holds 59 of every 290 slots; the third goes at shift 118 s, a fourth
         * would need 177 s > alpha T = 145 s: refused by the fitting, a new group. */
        submit(s, spec(231.53, 57.50, 8), &d);
        cr_assert_eq(d.group, g, "%s", d.reason);
        submit(s, spec(231.53, 57.50, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        cr_assert_eq(d.groups_pruned_bound, 0);
        /* A job larger than every pool never joins one. */
        submit(s, spec(231.53, 57.50, 16), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        drain(s);
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.groups, 3);
        for (loom_job_id id = 1; id <= 5; id++)
                cr_assert_eq(loom_sched_job_exit(s, 0, id, LOOM_EXIT_FINISHED), 0);
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.groups, 0);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(plexsched, a_cycle_longer_than_the_horizon_gets_a_group_of_its_own)
{
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, spec(8 * 3600.0, 600, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        loom_job_id b = submit(s, spec(8 * 3600.0, 600, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        submit(s, spec(231.53, 57.50, 8), &d); /* plannable jobs still share among themselves */
        submit(s, spec(231.53, 57.50, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "%s", d.reason);
        cr_assert_eq(loom_sched_job_exit(s, 0, a, LOOM_EXIT_FINISHED), 0);
        cr_assert_eq(loom_sched_job_exit(s, 0, b, LOOM_EXIT_CANCELLED), 0);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(plexsched, duty_bound_prunes_before_fitting)
{
        po.plex_alpha = 1.0; /* shifts up to a whole cycle: only the duty bound stops packing */
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        loom_decision d;
        loom_decision_init(&d, false);
        for (int i = 0; i < 4; i++) {
                submit(s, spec(231.53, 57.50, 8), &d);
                cr_assert_eq(d.group, 0, "job %d: %s", i, d.reason);
        }
        /* Four residents: each would see 4 x 59 x 99 / 28800 = 81% foreign duty > 75%. */
        loom_decision ex;
        loom_decision_init(&ex, true);
        loom_job_spec sp = spec(231.53, 57.50, 8);
        cr_assert_eq(loom_sched_decide(s, &sp, &ex, &e), 0);
        cr_assert_eq(ex.n_candidates, 2);
        cr_assert_eq(ex.candidates[0].group, 0);
        cr_assert_eq(ex.candidates[0].reject, LOOM_REJECT_DUTY);
        cr_assert_str_eq(loom_reject_name(ex.candidates[0].reject), "duty");
        cr_assert_eq(ex.candidates[1].kind, LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(ex.candidates[1].reject, LOOM_REJECT_NONE);
        loom_decision_free(&ex);
        submit(s, spec(231.53, 57.50, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        cr_assert_eq(d.groups_pruned_bound, 1);
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* A member's iteration on the pool is its period in whole slots plus the shift it waits for
 * its window: 290 s + 59 s for a second 7B job. */
Test(plexsched, a_job_whose_slo_the_pool_cannot_meet_gets_a_new_group_with_the_reason)
{
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        loom_decision d;
        loom_decision_init(&d, false);
        submit(s, spec(231.53, 57.50, 8), &d);
        loom_group_id g = d.group;
        loom_job_spec tight = spec(231.53, 57.50, 8);
        tight.slo = 1.1; /* budget 317.9 s < 349 s */
        loom_decision ex;
        loom_decision_init(&ex, true);
        cr_assert_eq(loom_sched_decide(s, &tight, &ex, &e), 0);
        cr_assert_eq(ex.kind, LOOM_DECISION_NEW_GROUP, "%s", ex.reason);
        cr_assert_eq(ex.n_candidates, 2);
        cr_assert_eq(ex.candidates[0].group, g);
        cr_assert_eq(ex.candidates[0].reject, LOOM_REJECT_SLO, "%s", ex.candidates[0].why);
        cr_assert(strstr(ex.candidates[0].why, "349.0 s (shift 59 s") != NULL, "%s",
                  ex.candidates[0].why);
        cr_assert(strstr(ex.reason, "slo: a shared pool only at shift <= 27.9 s") != NULL, "%s",
                  ex.reason);
        loom_decision_free(&ex);
        submit(s, tight, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        cr_assert_eq(d.t_meta, loom_job_t_solo(&tight));
        /* A job whose budget covers the wait joins. */
        loom_job_spec ok = spec(231.53, 57.50, 8);
        ok.slo = 1.25; /* budget 361.3 s >= 349 s */
        submit(s, ok, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "%s", d.reason);
        cr_assert_eq(d.group, g);
        cr_assert_eq(d.t_meta, loom_us_from_s(349));
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* Alone, a resident runs at T_solo; shared, it keeps to its reserved windows, whose period is
 * rounded up to whole slots (289.03 s -> 290 s): a join would break a resident at SLO 1.0. */
Test(plexsched, a_join_that_breaks_a_residents_slo_is_refused_naming_the_resident)
{
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec r = spec(231.53, 57.50, 8);
        r.slo = 1.0;
        loom_job_id a = submit(s, r, &d);
        loom_job_spec n = spec(231.53, 57.50, 8);
        loom_decision ex;
        loom_decision_init(&ex, true);
        cr_assert_eq(loom_sched_decide(s, &n, &ex, &e), 0);
        cr_assert_eq(ex.kind, LOOM_DECISION_NEW_GROUP, "%s", ex.reason);
        cr_assert_eq(ex.candidates[0].reject, LOOM_REJECT_SLO, "%s", ex.candidates[0].why);
        char want[64];
        snprintf(want, sizeof want, "job %u's iteration on a shared pool 290.0 s", (unsigned)a);
        cr_assert(strstr(ex.candidates[0].why, want) != NULL, "%s", ex.candidates[0].why);
        loom_decision_free(&ex);
        /* With room for the rounding the same join goes through. */
        r.slo = 1.01;
        loom_sched *s2 = loom_sched_new(&cl, &po, &e);
        submit(s2, r, &d);
        submit(s2, n, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "%s", d.reason);
        loom_decision_free(&d);
        loom_sched_free(s2);
        loom_sched_free(s);
}

/* Three jobs in one group; A trains while B (long call, waits first) and C (short call) wait.
 * When A finishes: FCFS takes B, HRRS takes C (higher response ratio). */
static loom_job_id next_trainer(loom_dispatch dsp)
{
        po.dispatch = dsp;
        po.warm_switch = loom_us_from_s(10);
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        cr_assert_not_null(s, "%s", e.msg);
        loom_decision d;
        loom_decision_init(&d, false);
        /* One 500 s cycle each, so their phases fit one timeline at offsets. */
        loom_job_id a = submit(s, spec(480, 20, 8), &d);
        loom_job_id b = submit(s, spec(400, 100, 8), &d);
        loom_job_id c = submit(s, spec(490, 10, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "%s", d.reason);
        drain(s);
        loom_us t = loom_us_from_s(1);
        cr_assert_eq(loom_sched_phase_done(s, t, a, LOOM_PHASE_ROLLOUT), 0);
        drain(s); /* A trains */
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(10), b, LOOM_PHASE_ROLLOUT), 0);
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(20), c, LOOM_PHASE_ROLLOUT), 0);
        drain(s);
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(50), a, LOOM_PHASE_TRAIN), 0);
        loom_action act;
        loom_job_id who = 0;
        while (loom_sched_next_action(s, &act))
                if (act.type == LOOM_ACT_START_PHASE && act.phase == LOOM_PHASE_TRAIN)
                        who = act.job;
        loom_decision_free(&d);
        loom_sched_free(s);
        cr_assert(who == b || who == c);
        return who;
}

Test(plexsched, fcfs_takes_the_oldest_hrrs_the_highest_ratio)
{
        cr_assert_eq(next_trainer(LOOM_DISPATCH_FCFS), 2);
        /* B: 1 + 40 / (100 + 10) = 1.36; C: 1 + 30 / (10 + 10) = 2.5 */
        cr_assert_eq(next_trainer(LOOM_DISPATCH_HRRS), 3);
}

Test(plexsched, bad_policy_knobs_name_the_field)
{
        loom_err e;
        po.plex_duty_max = 0;
        cr_assert_null(loom_sched_new(&cl, &po, &e));
        cr_assert_str_eq(e.field, "plex_duty_max");
        loom_policy_cfg_default(&po);
        po.preempt_margin = 0.5;
        cr_assert_null(loom_sched_new(&cl, &po, &e));
        cr_assert_str_eq(e.field, "preempt_margin");
        loom_policy_cfg_default(&po);
        po.dispatch = (loom_dispatch)7;
        cr_assert_null(loom_sched_new(&cl, &po, &e));
        cr_assert_str_eq(e.field, "dispatch");
}

static loom_job_spec calls_spec(double roll, double c0, double c1, double c2)
{
        loom_job_spec s = spec(roll, c0 + c1 + c2, 8);
        s.t_calls[LOOM_CALL_LOG_PROB] = loom_us_from_s(c0);
        s.t_calls[LOOM_CALL_UPDATE_ACTOR] = loom_us_from_s(c1);
        s.t_calls[LOOM_CALL_SYNC_WEIGHT] = loom_us_from_s(c2);
        s.t_train = s.t_calls[0] + s.t_calls[1] + s.t_calls[2];
        return s;
}

/* The next START_PHASE(TRAIN) in the queue: its job and call; 0 if none. */
static loom_job_id next_train(loom_sched *s, int *call, int *n_calls)
{
        loom_action a;
        loom_job_id who = 0;
        while (loom_sched_next_action(s, &a))
                if (a.type == LOOM_ACT_START_PHASE && a.phase == LOOM_PHASE_TRAIN && !who) {
                        who = a.job;
                        *call = a.call;
                        *n_calls = a.n_calls;
                }
        return who;
}

/* A trains call by call (10 + 400 + 10 s); B (5 + 5 + 5 s) becomes ready during A's first call.
 * At A's first call boundary: rr lets A go on, fcfs takes B (queued first), hrrs takes B
 * (1 + 9/15 = 1.6 beats 1.1 x A's running 1 + 10/410). */
static loom_job_id after_first_call(loom_dispatch dsp, double b_call)
{
        po.dispatch = dsp;
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, calls_spec(580, 10, 400, 10), &d);
        loom_job_id b = submit(s, calls_spec(1000 - 3 * b_call, b_call, b_call, b_call), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "%s", d.reason);
        drain(s);
        int call = -1, n = 0;
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(1), a, LOOM_PHASE_ROLLOUT), 0);
        cr_assert_eq(next_train(s, &call, &n), a);
        cr_assert_eq(call, LOOM_CALL_LOG_PROB);
        cr_assert_eq(n, 3);
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(2), b, LOOM_PHASE_ROLLOUT), 0);
        drain(s);
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(11), a, LOOM_PHASE_TRAIN), 0);
        loom_job_id who = next_train(s, &call, &n), first = who;
        loom_job_info ji;
        loom_sched_job_info(s, a, &ji);
        cr_assert_eq(ji.iterations_done, 0); /* one call is not an iteration */
        if (who == a)
                cr_assert_eq(call, LOOM_CALL_UPDATE_ACTOR);
        else
                cr_assert_eq(call, LOOM_CALL_LOG_PROB);
        /* Finish everything: both jobs complete one iteration after their third call. */
        for (int k = 0; k < 12 && who; k++) {
                cr_assert_eq(
                    loom_sched_phase_done(s, loom_us_from_s(20 + k), who, LOOM_PHASE_TRAIN), 0);
                who = next_train(s, &call, &n);
        }
        loom_sched_job_info(s, a, &ji);
        cr_assert_eq(ji.iterations_done, 1);
        loom_sched_job_info(s, b, &ji);
        cr_assert_eq(ji.iterations_done, 1);
        loom_decision_free(&d);
        loom_sched_free(s);
        return first;
}

Test(plexsched, training_calls_are_dispatched_one_by_one)
{
        cr_assert_eq(after_first_call(LOOM_DISPATCH_RR, 5), 1);
        cr_assert_eq(after_first_call(LOOM_DISPATCH_FCFS, 5), 2);
        cr_assert_eq(after_first_call(LOOM_DISPATCH_HRRS, 5), 2);
        /* B's calls of 30 s: 1 + 9/90 = 1.10 beats A's 1.024, but not by the 1.1x margin. */
        cr_assert_eq(after_first_call(LOOM_DISPATCH_HRRS, 30), 1);
        po.preempt_margin = 1.0;
        cr_assert_eq(after_first_call(LOOM_DISPATCH_HRRS, 30), 2);
}

/* A driver that lost its state mid-chain (loomd restarted after A's first call) resumes A at
 * its second call: the calls before it are not run again, the next rollout follows the third
 * call, and the iteration is counted once. A call past the last, or a call for a rollout, is
 * refused. */
Test(plexsched, resume_at_a_call_does_not_rerun_the_calls_before_it)
{
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, calls_spec(100, 10, 20, 5), &d);
        drain(s);
        cr_assert_eq(loom_sched_job_resume(s, 0, a, LOOM_PHASE_TRAIN, 3), LOOM_EINVAL);
        cr_assert_eq(loom_sched_job_resume(s, 0, a, LOOM_PHASE_ROLLOUT, 1), LOOM_EINVAL);
        cr_assert_eq(loom_sched_job_resume(s, 0, a, LOOM_PHASE_TRAIN, -1), LOOM_EINVAL);
        cr_assert_eq(loom_sched_job_resume(s, loom_us_from_s(1), a, LOOM_PHASE_TRAIN, 1), 0);
        int call = -1, n = 0;
        cr_assert_eq(next_train(s, &call, &n), a);
        cr_assert_eq(call, LOOM_CALL_UPDATE_ACTOR);
        cr_assert_eq(n, 3);
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(21), a, LOOM_PHASE_TRAIN), 0);
        cr_assert_eq(next_train(s, &call, &n), a);
        cr_assert_eq(call, LOOM_CALL_SYNC_WEIGHT);
        loom_job_info ji;
        loom_sched_job_info(s, a, &ji);
        cr_assert_eq(ji.iterations_done, 0);
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(26), a, LOOM_PHASE_TRAIN), 0);
        loom_sched_job_info(s, a, &ji);
        cr_assert_eq(ji.iterations_done, 1);
        /* then the next round: a rollout, and the training starts at its first call again */
        loom_action act;
        bool rolled = false;
        while (loom_sched_next_action(s, &act))
                rolled |= act.type == LOOM_ACT_START_PHASE && act.phase == LOOM_PHASE_ROLLOUT &&
                          act.job == a;
        cr_assert(rolled);
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(130), a, LOOM_PHASE_ROLLOUT), 0);
        cr_assert_eq(next_train(s, &call, &n), a);
        cr_assert_eq(call, LOOM_CALL_LOG_PROB);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(plexsched, a_one_node_job_joins_a_two_node_pool_whose_timeline_has_room)
{
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        cr_assert_not_null(s, "%s", e.msg);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, spec(231.53, 57.50, 16), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        loom_group_id g = d.group;
        /* One node of training joins the two-node pool: no new training node is bought, it
         * holds the whole pool during its window (the timeline is per pool). */
        loom_job_id b = submit(s, spec(231.53, 57.50, 8), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "%s", d.reason);
        cr_assert_eq(d.group, g);
        cr_assert_eq(d.n_train_nodes, 2);
        cr_assert_float_eq(d.marginal_cost_per_hour,
                           loom_cluster_node_price(&cl, LOOM_POOL_ROLLOUT), 1e-9);
        loom_job_info ja, jb;
        loom_sched_job_info(s, a, &ja);
        loom_sched_job_info(s, b, &jb);
        cr_assert_eq(ja.train_nodes[0], jb.train_nodes[0]);
        cr_assert_eq(ja.n_train_nodes, jb.n_train_nodes);
        /* The SLO check still applies across sizes: at slo 1.1 the shift to its window
         * (59 s) passes the 1-node job's budget, so it gets a pool of its own. */
        loom_job_spec tight = spec(231.53, 57.50, 8);
        tight.slo = 1.1;
        submit(s, tight, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        drain(s);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(plexsched, a_job_larger_than_a_pool_never_joins_it_and_the_candidate_says_why)
{
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        cr_assert_not_null(s, "%s", e.msg);
        loom_decision d;
        loom_decision_init(&d, false);
        submit(s, spec(231.53, 57.50, 8), &d); /* a 1-node pool with room for more */
        loom_decision ex;
        loom_decision_init(&ex, true);
        loom_job_spec big = spec(231.53, 57.50, 16);
        cr_assert_eq(loom_sched_decide(s, &big, &ex, &e), 0, "%s", e.msg);
        cr_assert_eq(ex.kind, LOOM_DECISION_NEW_GROUP, "%s", ex.reason);
        cr_assert_eq(ex.n_candidates, 2);
        cr_assert_eq(ex.candidates[0].reject, LOOM_REJECT_NO_FIT);
        cr_assert_str_eq(ex.candidates[0].why, "pool of 1 training nodes < the job's 2");
        cr_assert_eq(ex.candidates[1].kind, LOOM_DECISION_NEW_GROUP);
        submit(s, big, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        cr_assert_eq(d.n_train_nodes, 2);
        loom_decision_free(&ex);
        loom_decision_free(&d);
        loom_sched_free(s);
}
