/*
 * test_core_regroup.c - coordinated regrouping at departures (policy.regroup): when a job
 * finishes, the core re-solves the grouping of the groups around it and moves the members its
 * plan moves, each at a training end where its planned group can take it, through the same
 * stop-and-re-admit as any member move.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core_spec.h"
#include "loom/sched.h"

static loom_cluster_cfg cl;
static loom_policy_cfg po;

static void setup(void)
{
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        po.admission = LOOM_ADMIT_P99;
        /* no single-job moves: what moves here, the regrouping moves */
        po.move_lone = false;
        po.move_members = false;
}

TestSuite(regroup, .init = setup);

/* 100 s + 300 s declared, SLO 1.2: 480 s per iteration, 1000 iterations */
static loom_job_spec spec(const char *id)
{
        loom_job_spec s = core_spec(id, 100, 300, 1.2, 10 * LOOM_GB, 800 * LOOM_GB);
        s.iterations = 1000;
        return s;
}

static loom_job_id submit(loom_sched *s, loom_job_spec sp, loom_decision *d)
{
        loom_job_id id = 0;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sched_submit(s, 0, &sp, d, &id, &e), 0, "submit %s: %s", sp.id, e.msg);
        return id;
}

/* The phases the core started and the test has not run yet, in start order. */
typedef struct runner {
        loom_action q[64];
        int head, tail;
        loom_us now;
} runner;

/* Run the phases the core starts, in start order, each observed at its job's own length
 * (times[job] = {rollout s, training s}), for at most n phases; returns the job whose training
 * observation said 3 (move), leaving that phase to the driver's move, else 0. */
static loom_job_id drive(loom_sched *s, runner *r, int n, const double (*times)[2])
{
        for (int k = 0; k < n; k++) {
                loom_action a;
                while (loom_sched_next_action(s, &a))
                        if (a.type == LOOM_ACT_START_PHASE && r->tail - r->head < 64)
                                r->q[r->tail++ % 64] = a;
                if (r->head == r->tail)
                        break;
                a = r->q[r->head++ % 64];
                cr_assert_lt(a.job, 8);
                loom_job_info ji;
                if (loom_sched_job_info(s, a.job, &ji) == LOOM_ENOENT)
                        continue; /* a phase of a job that has left since */
                double t = times[a.job][a.phase == LOOM_PHASE_TRAIN];
                r->now += loom_us_from_s(t);
                int rc = loom_sched_observe(s, r->now, a.job, a.phase, loom_us_from_s(t));
                cr_assert_geq(rc, 0);
                if (a.phase == LOOM_PHASE_TRAIN && rc == 3)
                        return a.job;
                cr_assert_eq(loom_sched_phase_done(s, r->now, a.job, a.phase), 0);
        }
        return 0;
}

/* The $/h of every live group. */
static double bill(const loom_sched *s)
{
        loom_group_id ids[16];
        int n = loom_sched_groups(s, ids, 16);
        double sum = 0;
        for (int i = 0; i < n; i++) {
                loom_group_info gi;
                cr_assert_eq(loom_sched_group_info(s, ids[i], &gi), 0);
                sum += gi.cost_per_hour;
        }
        return sum;
}

/*
 * A and B (100 s + 300 s declared, SLO 1.2: 480 s per iteration) cannot share a training node on
 * their declared trainings (600 s > 480 s). C (50 s + 50 s, SLO 5) joins A's group on A's
 * rollout node; B runs alone on its own training node, colocated. Three members never fit one
 * training node (800 GB of training working set each, 2,000 GB per node). Learned, A and B roll
 * out for 100 s and train for 60 s: a budget of 192 s; together on one training node they need
 * two rollout nodes (200 s of rollouts on one is past it). While C runs, no regrouping of the
 * three is cheaper than the two groups as they are (A and C share their rollout node). With
 * single-job moves off, nothing else moves anyone. When C finishes, A is alone and the
 * regrouping re-solves A's and B's groups: one joins the other, a training node ($42.24/h)
 * traded for two rollout nodes ($29.60/h). The mover's next training end says 3, its
 * re-admission lands in the planned group, and the bill falls, every member within its
 * budget. Without policy.regroup the same departure changes nothing.
 */
Test(regroup, a_departure_merges_two_groups_that_single_moves_leave_apart)
{
        for (int on = 0; on < 2; on++) {
                po.regroup = on;
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                cr_assert_not_null(s);
                loom_decision d;
                loom_decision_init(&d, false);
                loom_job_id a = submit(s, spec("A"), &d);
                loom_job_spec sc = core_spec("C", 50, 50, 5.0, 10 * LOOM_GB, 800 * LOOM_GB);
                sc.iterations = 1000;
                loom_job_id c = submit(s, sc, &d);
                cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK, "C joins A: %s", d.reason);
                loom_job_id b = submit(s, spec("B"), &d);
                cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "B cannot join A declared");
                double times[8][2] = {{0}};
                times[a][0] = times[b][0] = 100;
                times[a][1] = times[b][1] = 60;
                times[c][0] = times[c][1] = 50;
                runner run = {.head = 0};
                cr_assert_eq(drive(s, &run, 60, (const double(*)[2])times), 0,
                             "nothing moves while C runs");
                loom_job_info ja, jb;
                cr_assert_eq(loom_sched_job_info(s, a, &ja), 0);
                cr_assert_eq(loom_sched_job_info(s, b, &jb), 0);
                cr_assert(ja.learned && jb.learned);
                cr_assert_neq(ja.group, jb.group);
                double price_t = loom_cluster_node_price(&cl, LOOM_POOL_TRAIN);
                double price_r = loom_cluster_node_price(&cl, LOOM_POOL_ROLLOUT);
                cr_assert_eq(loom_sched_job_exit(s, run.now, c, LOOM_EXIT_FINISHED), 0);
                double before = bill(s);
                cr_assert_float_eq(before, 2 * price_t, 1e-6, "A and B alone, lone");

                loom_job_id mover = drive(s, &run, 30, (const double(*)[2])times);
                if (!on) {
                        cr_assert_eq(mover, 0, "without policy.regroup nothing moves");
                        cr_assert_float_eq(bill(s), before, 1e-6);
                        loom_decision_free(&d);
                        loom_sched_free(s);
                        continue;
                }
                cr_assert(mover == a || mover == b, "the regrouping moves A or B: %u",
                          (unsigned)mover);
                loom_job_id stays = mover == a ? b : a;
                loom_job_info jm, js;
                cr_assert_eq(loom_sched_job_info(s, mover, &jm), 0);
                cr_assert_eq(loom_sched_job_info(s, stays, &js), 0);
                /* the driver's move: stop, re-admit on the learned plan */
                loom_job_spec moved = jm.spec;
                moved.t_solo_ref = (loom_us)((double)jm.learned_budget / moved.slo);
                moved.iterations -= jm.iterations_done;
                cr_assert_eq(loom_sched_job_exit(s, run.now, mover, LOOM_EXIT_CANCELLED), 0);
                loom_decision_free(&d);
                loom_decision_init(&d, false);
                loom_job_id id = submit(s, moved, &d);
                cr_assert_eq(d.group, js.group, "the planned group: %s", d.reason);

                double after = bill(s);
                cr_assert_lt(after, before, "$%.2f/h after, $%.2f/h before", after, before);
                loom_group_info g;
                cr_assert_eq(loom_sched_group_info(s, js.group, &g), 0);
                cr_assert_eq(g.n_members, 2);
                cr_assert_eq(g.n_rollout_nodes, 2, "the rollouts do not fit one node's budget");
                cr_assert_float_eq(after, price_t + 2 * price_r, 1e-6);
                loom_job_info ji;
                cr_assert_eq(loom_sched_job_info(s, id, &ji), 0);
                cr_assert_eq(loom_sched_job_info(s, stays, &js), 0);
                cr_assert_leq(g.t_meta * (1 + LOOM_MOVE_MARGIN), js.learned_budget,
                              "T_meta %lld within %lld", (long long)g.t_meta,
                              (long long)js.learned_budget);
                cr_assert_leq(g.t_meta * (1 + LOOM_MOVE_MARGIN), loom_job_budget(&ji.spec));
                loom_decision_free(&d);
                loom_sched_free(s);
        }
}

/*
 * A replay does not search: it applies the plan the log recorded, whatever a search would find.
 * The fixture above, driven on a live core and, observation for observation, on a core in
 * replay mode (what a driver's log gives it: submits, observations, exits). C's departure makes
 * the live core plan one of A and B into the other's group; the replaying core makes no plan
 * and runs no search. It is handed the other plan, the one the search did not choose (A and B
 * are alike, so it is as feasible): it takes it as given, and the member that plan moves is the
 * one whose training end says 3. Plans naming no live job or group, or moving a member into
 * its own group, are refused and change nothing.
 */
Test(regroup, a_replay_applies_the_logged_plan_as_recorded_without_searching)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL), *rp = loom_sched_new(&cl, &po, NULL);
        cr_assert(s && rp && po.regroup);
        loom_sched_replaying(rp, true);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec sc = core_spec("C", 50, 50, 5.0, 10 * LOOM_GB, 800 * LOOM_GB);
        sc.iterations = 1000;
        loom_job_id a = submit(s, spec("A"), &d), c = submit(s, sc, &d),
                    b = submit(s, spec("B"), &d);
        cr_assert_eq(submit(rp, spec("A"), &d), a);
        cr_assert_eq(submit(rp, sc, &d), c);
        cr_assert_eq(submit(rp, spec("B"), &d), b);
        double times[8][2] = {{0}};
        times[a][0] = times[b][0] = 100;
        times[a][1] = times[b][1] = 60;
        times[c][0] = times[c][1] = 50;
        /* the live core runs the phases; each observation goes to both, as a log would */
        runner run = {.head = 0};
        for (int k = 0; k < 60; k++) {
                loom_action act;
                while (loom_sched_next_action(s, &act))
                        if (act.type == LOOM_ACT_START_PHASE)
                                run.q[run.tail++ % 64] = act;
                while (loom_sched_next_action(rp, &act))
                        ;
                if (run.head == run.tail)
                        break;
                act = run.q[run.head++ % 64];
                double t = times[act.job][act.phase == LOOM_PHASE_TRAIN];
                run.now += loom_us_from_s(t);
                int rc = loom_sched_observe(s, run.now, act.job, act.phase, loom_us_from_s(t));
                cr_assert_eq(loom_sched_observe(rp, 0, act.job, act.phase, loom_us_from_s(t)), rc);
                cr_assert_not(loom_sched_regroup_made(rp, NULL));
                cr_assert_eq(loom_sched_phase_done(s, run.now, act.job, act.phase), 0);
        }
        cr_assert_eq(loom_sched_job_exit(s, run.now, c, LOOM_EXIT_FINISHED), 0);
        cr_assert_eq(loom_sched_job_exit(rp, 0, c, LOOM_EXIT_FINISHED), 0);
        loom_regroup_plan live, other;
        cr_assert(loom_sched_regroup_made(s, &live), "C's departure regroups A and B");
        cr_assert_not(loom_sched_regroup_made(rp, NULL), "the replaying core does not search");
        loom_sched_stats st;
        loom_sched_stats_get(rp, &st);
        cr_assert_eq(st.regroup_solves, 0);
        loom_sched_stats_get(s, &st);
        cr_assert_gt(st.regroup_solves, 0);
        cr_assert_eq(live.n, 2);
        int mv = live.m[0].moves ? 0 : 1;
        cr_assert(live.m[mv].moves && !live.m[1 - mv].moves && !live.m[mv].alone);
        loom_job_info ja, jb;
        cr_assert_eq(loom_sched_job_info(s, a, &ja), 0);
        cr_assert_eq(loom_sched_job_info(s, b, &jb), 0);
        loom_job_id mover = live.m[mv].job, stays = live.m[1 - mv].job;
        cr_assert_eq(live.m[mv].to, mover == a ? jb.group : ja.group);

        /* refused, nothing changed */
        loom_regroup_plan bad = {.n = 1, .m = {{.job = 99, .moves = true, .alone = true}}};
        cr_assert_eq(loom_sched_regroup_apply(rp, &bad), LOOM_ENOENT);
        bad = (loom_regroup_plan){.n = 1, .m = {{.job = a, .moves = true, .to = ja.group}}};
        cr_assert_eq(loom_sched_regroup_apply(rp, &bad), LOOM_EINVAL, "into its own group");
        bad = (loom_regroup_plan){.n = 1, .m = {{.job = a, .moves = true, .to = 77}}};
        cr_assert_eq(loom_sched_regroup_apply(rp, &bad), LOOM_ENOENT, "no such group");
        bad = (loom_regroup_plan){.n = 2,
                                  .m = {{.job = a, .moves = true, .alone = true}, {.job = a}}};
        cr_assert_eq(loom_sched_regroup_apply(rp, &bad), LOOM_EINVAL, "listed twice");
        bad.n = 0;
        cr_assert_eq(loom_sched_regroup_apply(rp, &bad), LOOM_EINVAL);
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(rp, a, &ji), 0);
        cr_assert_not(ji.regroup_planned);

        /* the plan the search did not choose: the other one moves */
        other = (loom_regroup_plan){
            .n = 2,
            .m = {{.job = stays, .moves = true, .to = stays == a ? jb.group : ja.group},
                  {.job = mover}}};
        cr_assert_eq(loom_sched_regroup_apply(rp, &other), 0);
        loom_sched_stats_get(rp, &st);
        cr_assert(st.regroup_solves == 0 && st.regroup_applied == 1);
        cr_assert_eq(loom_sched_job_info(rp, stays, &ji), 0);
        cr_assert(ji.regroup_planned && !ji.regroup_alone && ji.regroup_tries == 0);
        cr_assert_eq(ji.regroup_to, other.m[0].to);
        cr_assert_eq(loom_sched_job_info(rp, mover, &ji), 0);
        cr_assert_not(ji.regroup_planned, "as recorded: it stays");
        /* the replaying core, run on from here, moves the member its recorded plan moves */
        loom_sched_replaying(rp, false);
        runner r2 = {.now = run.now};
        cr_assert_eq(loom_sched_resume(rp, run.now,
                                       (loom_resume[]){{.job = a, .phase = LOOM_PHASE_ROLLOUT},
                                                       {.job = b, .phase = LOOM_PHASE_ROLLOUT}},
                                       2),
                     0);
        cr_assert_eq(drive(rp, &r2, 30, (const double(*)[2])times), stays);
        loom_decision_free(&d);
        loom_sched_free(s);
        loom_sched_free(rp);
}
