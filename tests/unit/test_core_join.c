/*
 * test_core_join.c - joins that a member near its end can absorb (policy.join_wait): a job
 * joining a group starts in the first round no member has trained in yet, so a member in that
 * round may wait out the new job's phases before its own training, once. A member with few
 * iterations left must still meet its budget over them with that extra meta-iteration; a long
 * run amortises it.
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
}

TestSuite(join, .init = setup);

static loom_job_spec spec(const char *id, int64_t iterations)
{
        /* 100 s + 50 s, SLO 1.5: a budget of 225 s per iteration */
        loom_job_spec s = core_spec(id, 100, 50, 1.5, 10 * LOOM_GB, 20 * LOOM_GB);
        s.iterations = iterations;
        return s;
}

static bool joined(const loom_decision *d, loom_group_id g)
{
        return d->kind != LOOM_DECISION_NEW_GROUP && d->kind != LOOM_DECISION_REJECTED &&
               d->group == g;
}

/* A alone (lone, on its training node), A_done of its iterations done (set as a driver's
 * replay sets them), then B: where B joins and at what T_meta. */
static loom_decision join_after_done(int64_t a_iterations, int64_t a_done, loom_group_id *a_group)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        cr_assert_not_null(s);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_err e;
        loom_err_clear(&e);
        loom_job_id id;
        loom_job_spec a = spec("A", a_iterations), b = spec("B", 1000);
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &id, &e), 0, "%s", e.msg);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        *a_group = d.group;
        if (a_done)
                cr_assert_eq(loom_sched_job_iterations(s, id, a_done), 0);
        loom_decision_free(&d);
        loom_decision_init(&d, false);
        cr_assert_eq(loom_sched_submit(s, 0, &b, &d, &id, &e), 0, "%s", e.msg);
        loom_sched_free(s);
        return d;
}

static loom_decision join_after(int64_t a_iterations, loom_group_id *a_group)
{
        return join_after_done(a_iterations, 0, a_group);
}

Test(join, a_member_in_its_last_iterations_is_not_joined_past_what_it_can_absorb)
{
        cr_assert(po.join_wait, "on by default");
        /* Off: B joins A's group on one shared rollout node, the cheapest place; the node
         * carries both rollouts, T_meta 200 s <= 225 s. A, with 4 iterations left, may wait a
         * round more in the one in progress: 5 x 200 > 4 x 225, its SLO broken. */
        po.join_wait = false;
        loom_group_id ga;
        loom_decision d = join_after(4, &ga);
        cr_assert(joined(&d, ga), "kind %d", d.kind);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK, "onto A's planned rollout node");
        cr_assert_eq(d.t_meta, loom_us_from_s(200));
        cr_assert_gt(5 * d.t_meta, 4 * loom_us_from_s(225), "T_meta %lld", (long long)d.t_meta);
        loom_decision_free(&d);

        /* On: B joins on a rollout node of its own (one more node, still cheaper than a
         * training node), where A absorbs the round: 5 x 150 <= 4 x 225 */
        po.join_wait = true;
        d = join_after(4, &ga);
        cr_assert_leq(5 * d.t_meta, 4 * loom_us_from_s(225), "T_meta %lld", (long long)d.t_meta);
        cr_assert(joined(&d, ga), "kind %d", d.kind);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "a rollout node of its own");
        cr_assert_eq(d.t_meta, loom_us_from_s(150), "T_meta is the 150 s cycle");
        loom_decision_free(&d);

        /* A far from its end (more than LOOM_JOIN_WAIT_LEFT iterations) amortises the round:
         * the cheapest place, as with the check off */
        d = join_after(LOOM_JOIN_WAIT_LEFT + 100, &ga);
        cr_assert(joined(&d, ga), "kind %d", d.kind);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK);
        cr_assert_eq(d.t_meta, loom_us_from_s(200));
        loom_decision_free(&d);
}

Test(join, the_switch_is_a_policy_switch)
{
        bool *sw = loom_policy_switch(&po, "join-wait");
        cr_assert_not_null(sw);
        cr_assert_eq(sw, &po.join_wait);
}

/* What placement reads is the iterations a member has left: A asked for 14, and with 10 done
 * (its driver's count, loom_sched_job_iterations) it is held to the round B adds as a job of 4
 * is; with none done it amortises it. The count is checked. */
Test(join, the_iterations_a_member_has_left_are_what_the_check_reads)
{
        loom_group_id ga;
        loom_decision d = join_after_done(14, 0, &ga);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK, "14 left: amortised");
        loom_decision_free(&d);
        d = join_after_done(14, 10, &ga);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE, "4 left: held to the round");
        cr_assert_eq(d.t_meta, loom_us_from_s(150));
        loom_decision_free(&d);

        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision_init(&d, false);
        loom_job_id id;
        loom_job_spec a = spec("A", 14), u = spec("U", 0);
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &id, NULL), 0);
        cr_assert_eq(loom_sched_job_iterations(s, id, 14), LOOM_EINVAL, "all done: it ended");
        cr_assert_eq(loom_sched_job_iterations(s, id, -1), LOOM_EINVAL);
        cr_assert_eq(loom_sched_job_iterations(s, id + 7, 1), LOOM_ENOENT);
        loom_job_info info;
        cr_assert_eq(loom_sched_job_info(s, id, &info), 0);
        cr_assert_eq(info.iterations_done, 0, "a refused count changes nothing");
        cr_assert_eq(loom_sched_job_iterations(s, id, 13), 0);
        cr_assert_eq(loom_sched_job_info(s, id, &info), 0);
        cr_assert_eq(info.iterations_done, 13);
        loom_decision_free(&d);
        loom_decision_init(&d, false);
        cr_assert_eq(loom_sched_submit(s, 0, &u, &d, &id, NULL), 0);
        cr_assert_eq(loom_sched_job_iterations(s, id, 1000000), 0, "an unbounded job: any count");
        loom_decision_free(&d);
        loom_sched_free(s);
}
