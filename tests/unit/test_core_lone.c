/*
 * test_core_lone.c - lone members colocated on their training nodes (policy.colocate_lone):
 * a group of one runs its member's rollouts on the training pool and provisions no rollout
 * node; a second member provisions the planned nodes and the first member's rollouts move
 * there; jobs whose SLO cannot absorb the two switches per iteration, or whose rollout does not
 * fit the training GPUs or host memory, get their rollout node at once.
 */
#include <criterion/criterion.h>
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
}

TestSuite(lone, .init = setup);

static loom_job_spec spec(const char *id, double roll, double train, double slo)
{
        return core_spec(id, roll, train, slo, 10 * LOOM_GB, 20 * LOOM_GB);
}

typedef struct seen {
        int provisioned[2], released[2];
        int starts;
        loom_action last_start;
        loom_action of[8]; /* last start per job id */
} seen;

static void drain(loom_sched *s, seen *v)
{
        loom_action a;
        while (loom_sched_next_action(s, &a)) {
                if (a.type == LOOM_ACT_PROVISION_NODE)
                        v->provisioned[a.pool]++;
                else if (a.type == LOOM_ACT_RELEASE_NODE)
                        v->released[a.pool]++;
                else if (a.type == LOOM_ACT_START_PHASE) {
                        v->starts++;
                        v->last_start = a;
                        if (a.job < 8)
                                v->of[a.job] = a;
                }
        }
}

static loom_job_id submit(loom_sched *s, const loom_job_spec *sp, loom_decision *d)
{
        loom_job_id id;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sched_submit(s, 0, sp, d, &id, &e), 0, "%s", e.msg);
        return id;
}

Test(lone, on_by_default_and_a_lone_member_rolls_out_on_its_training_nodes)
{
        cr_assert(po.colocate_lone);
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec a = spec("A", 100, 50, 1.5);
        loom_job_id ia = submit(s, &a, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        cr_assert_float_eq(d.marginal_cost_per_hour, loom_cluster_node_price(&cl, LOOM_POOL_TRAIN),
                           1e-9, "only the training node is paid for");
        cr_assert(strstr(d.reason, "until a second member joins"), "%s", d.reason);
        seen v = {0};
        drain(s, &v);
        cr_assert_eq(v.provisioned[LOOM_POOL_TRAIN], 1);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 0, "the rollout node waits");
        cr_assert_eq(v.starts, 1);
        cr_assert_eq(v.last_start.phase, LOOM_PHASE_ROLLOUT);
        cr_assert_eq(v.last_start.pool, LOOM_POOL_TRAIN, "on the training nodes");
        cr_assert_eq(v.last_start.nodes[0], d.train_nodes[0]);
        loom_group_info g;
        cr_assert_eq(loom_sched_group_info(s, d.group, &g), 0);
        cr_assert(g.lone);
        cr_assert_float_eq(g.cost_per_hour, loom_cluster_node_price(&cl, LOOM_POOL_TRAIN), 1e-9);
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.nodes[LOOM_POOL_ROLLOUT], 0);

        /* its rollout holds the training pool; then it trains, and (no sync: the weights are
         * where they run) rolls out again on the training nodes */
        cr_assert_eq(loom_sched_phase_done(s, 100, ia, LOOM_PHASE_ROLLOUT), 0);
        drain(s, &v);
        cr_assert_eq(v.last_start.phase, LOOM_PHASE_TRAIN);
        cr_assert_eq(loom_sched_phase_done(s, 150, ia, LOOM_PHASE_TRAIN), 0);
        drain(s, &v);
        cr_assert_eq(v.last_start.phase, LOOM_PHASE_ROLLOUT);
        cr_assert_eq(v.last_start.pool, LOOM_POOL_TRAIN);
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* B joins A's group: A's planned rollout node is provisioned (B pays for it), B's rollout runs
 * there at once while A's current rollout finishes on the training nodes, and A's next rollout
 * is on the rollout node. */
Test(lone, a_second_member_provisions_the_rollout_node_and_moves_the_first_there)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec a = spec("A", 100, 50, 2.0), b = spec("B", 40, 40, 2.0);
        loom_job_id ia = submit(s, &a, &d);
        loom_group_id grp = d.group;
        seen v = {0};
        drain(s, &v);
        loom_job_id ib = submit(s, &b, &d);
        cr_assert_eq(d.group, grp, "B joins A: %s", d.reason);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK, "%s", d.reason);
        cr_assert_float_eq(d.marginal_cost_per_hour,
                           loom_cluster_node_price(&cl, LOOM_POOL_ROLLOUT), 1e-9,
                           "joining a lone group pays for its planned rollout node");
        memset(&v, 0, sizeof v);
        drain(s, &v);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 1);
        cr_assert_eq(v.starts, 1, "B's rollout starts on the rollout node");
        cr_assert_eq(v.last_start.job, ib);
        cr_assert_eq(v.last_start.pool, LOOM_POOL_ROLLOUT);
        loom_group_info g;
        cr_assert_eq(loom_sched_group_info(s, grp, &g), 0);
        cr_assert_not(g.lone);
        cr_assert_eq(loom_sched_phase_done(s, 40, ib, LOOM_PHASE_ROLLOUT), 0);
        memset(&v, 0, sizeof v);
        drain(s, &v);
        cr_assert_eq(v.starts, 0, "A's rollout still holds the training pool");
        cr_assert_eq(loom_sched_phase_done(s, 100, ia, LOOM_PHASE_ROLLOUT), 0);
        drain(s, &v);
        cr_assert_eq(loom_sched_phase_done(s, 150, ia, LOOM_PHASE_TRAIN), 0);
        memset(&v, 0, sizeof v);
        drain(s, &v);
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, ia, &ji), 0);
        cr_assert(ji.state == LOOM_JOB_ROLLING || ji.state == LOOM_JOB_WAIT_ROLL ||
                  ji.state == LOOM_JOB_SYNCING);
        loom_sched_free(s);
        loom_decision_free(&d);
}

/* A's rollouts on the rollout node once B is in: driven phase by phase, every rollout start of
 * A after B joined names the rollout pool. */
Test(lone, after_the_join_every_rollout_is_on_the_rollout_pool)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec a = spec("A", 100, 50, 2.0), b = spec("B", 40, 40, 2.0);
        loom_job_id ia = submit(s, &a, &d);
        loom_job_id ib = submit(s, &b, &d);
        /* complete phases in the order they start, 60 of them */
        loom_action q[64];
        int head = 0, tail = 0, a_rolls = 0;
        loom_us now = 0;
        for (int done = 0; done < 60; done++) {
                loom_action act;
                while (loom_sched_next_action(s, &act))
                        if (act.type == LOOM_ACT_START_PHASE && tail - head < 64)
                                q[tail++ % 64] = act;
                cr_assert_lt(head, tail, "something runs");
                act = q[head++ % 64];
                if (act.job == ia && act.phase == LOOM_PHASE_ROLLOUT) {
                        if (a_rolls > 0)
                                cr_assert_eq(act.pool, LOOM_POOL_ROLLOUT, "A's rollout %d",
                                             a_rolls);
                        a_rolls++;
                }
                now += 10;
                cr_assert_eq(loom_sched_phase_done(s, now, act.job, act.phase), 0);
        }
        cr_assert_geq(a_rolls, 3);
        (void)ib;
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* When it stays lone is decided by the SLO and the hardware: two switches per iteration must
 * fit the job's budget, its rollout the training GPUs, both working sets a node's memory. */
Test(lone, slo_gpus_and_memory_decide_whether_a_job_may_run_alone_colocated)
{
        po.warm_switch = loom_us_from_s(5);
        struct {
                double slo;
                int roll_gpus;
                uint64_t mem_roll;
                bool lone;
        } cases[] = {
            {1.0, 8, 10 * LOOM_GB, false},  /* no room for 2 x 5 s */
            {1.1, 8, 10 * LOOM_GB, true},   /* 150 + 10 <= 165 */
            {1.05, 8, 10 * LOOM_GB, false}, /* 160 > 157.5 */
            {1.5, 16, 10 * LOOM_GB, false}, /* 16 rollout GPUs on 8 */
            {1.5, 8, 0, false},             /* memory: set below */
        };
        cases[4].mem_roll = cl.host_mem_bytes - 20 * LOOM_GB + 1;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_decision d;
                loom_decision_init(&d, false);
                loom_job_spec a = spec("A", 100, 50, cases[c].slo);
                a.rollout_gpus = cases[c].roll_gpus;
                a.mem_rollout = cases[c].mem_roll;
                submit(s, &a, &d);
                loom_group_info g;
                cr_assert_eq(loom_sched_group_info(s, d.group, &g), 0);
                cr_assert_eq(g.lone, cases[c].lone, "case %zu", c);
                seen v = {0};
                drain(s, &v);
                cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT],
                             cases[c].lone ? 0 : g.n_rollout_nodes, "case %zu", c);
                loom_decision_free(&d);
                loom_sched_free(s);
        }
}

/* A job that declares its own switch (spec.t_switch) is checked on it, not on the policy's: a
 * small model whose state reloads in 1 s runs alone where the planned 5 s would not fit. */
Test(lone, a_job_s_own_switch_decides_whether_it_may_run_alone)
{
        po.warm_switch = loom_us_from_s(5);
        struct {
                double t_switch;
                bool lone;
        } cases[] = {
            {0, false},    /* the policy's 5 s: 150 + 10 > 157.5 */
            {1, true},     /* 150 + 2 <= 157.5 */
            {3.75, true},  /* 150 + 7.5 = 157.5: just fits */
            {3.76, false}, /* just does not */
            {9, false},    /* larger than the policy's: its own, too */
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_decision d;
                loom_decision_init(&d, false);
                loom_job_spec a = spec("A", 100, 50, 1.05);
                a.t_switch = loom_us_from_s(cases[c].t_switch);
                submit(s, &a, &d);
                loom_group_info g;
                cr_assert_eq(loom_sched_group_info(s, d.group, &g), 0);
                cr_assert_eq(g.lone, cases[c].lone, "case %zu", c);
                loom_decision_free(&d);
                loom_sched_free(s);
        }
        loom_job_spec bad = spec("A", 100, 50, 1.05);
        bad.t_switch = -1;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_job_spec_validate(&bad, &cl, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "switch_s");
}

/* Off, a new group provisions its rollout node at once, as WEAVE's groups do. */
Test(lone, off_provisions_the_rollout_node_at_once)
{
        po.colocate_lone = false;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec a = spec("A", 100, 50, 1.5);
        submit(s, &a, &d);
        seen v = {0};
        drain(s, &v);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 1);
        cr_assert_eq(v.last_start.pool, LOOM_POOL_ROLLOUT);
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* A pair: A (of `iterations`, 0: unbounded, and cold start `cold` s, 0: not known) alone, then
 * B joins; driven until A's second rollout runs on the rollout node. */
typedef struct pair {
        loom_sched *s;
        loom_decision d;
        loom_job_id ia, ib;
        loom_group_id grp;
        seen v;
} pair;

static void pair_start(pair *p, int64_t iterations, double cold)
{
        memset(p, 0, sizeof *p);
        p->s = loom_sched_new(&cl, &po, NULL);
        loom_decision_init(&p->d, false);
        loom_job_spec a = spec("A", 100, 50, 2.0), b = spec("B", 40, 40, 2.0);
        a.iterations = iterations;
        a.t_cold = loom_us_from_s(cold);
        loom_sched *s = p->s;
        p->ia = submit(s, &a, &p->d);
        p->grp = p->d.group;
        p->ib = submit(s, &b, &p->d);
        drain(s, &p->v);
        /* A's first rollout (on the training nodes) ends; B's ends; A trains, and its second
         * rollout starts on the rollout node */
        cr_assert_eq(loom_sched_phase_done(s, 40, p->ib, LOOM_PHASE_ROLLOUT), 0);
        cr_assert_eq(loom_sched_phase_done(s, 100, p->ia, LOOM_PHASE_ROLLOUT), 0);
        drain(s, &p->v);
        cr_assert_eq(p->v.last_start.job, p->ia);
        cr_assert_eq(p->v.last_start.phase, LOOM_PHASE_TRAIN);
        cr_assert_eq(loom_sched_phase_done(s, 150, p->ia, LOOM_PHASE_TRAIN), 0);
        drain(s, &p->v);
        cr_assert_eq(p->v.of[p->ia].phase, LOOM_PHASE_ROLLOUT);
        cr_assert_eq(p->v.of[p->ia].pool, LOOM_POOL_ROLLOUT);
}

static void pair_end(pair *p)
{
        loom_decision_free(&p->d);
        loom_sched_free(p->s);
}

/* Whether p's group is lone now. */
static bool pair_lone(const pair *p)
{
        loom_group_info g;
        cr_assert_eq(loom_sched_group_info(p->s, p->grp, &g), 0);
        return g.lone;
}

/* Back to one member: its rollout node is released and its rollouts return to the training
 * nodes, but not while its rollout runs on the node: then at that rollout's end. */
Test(lone, a_group_left_with_one_member_goes_lone_again)
{
        pair p;
        pair_start(&p, 0, 0);
        loom_sched *s = p.s;
        /* B leaves while A's rollout runs on the node: nothing is released yet */
        memset(&p.v, 0, sizeof p.v);
        cr_assert_eq(loom_sched_job_exit(s, 160, p.ib, LOOM_EXIT_CANCELLED), 0);
        drain(s, &p.v);
        cr_assert_eq(p.v.released[LOOM_POOL_ROLLOUT], 0, "A's rollout holds the node");
        cr_assert_not(pair_lone(&p));
        /* its end releases the node; the next rollout is on the training nodes */
        cr_assert_eq(loom_sched_phase_done(s, 250, p.ia, LOOM_PHASE_ROLLOUT), 0);
        drain(s, &p.v);
        cr_assert_eq(p.v.released[LOOM_POOL_ROLLOUT], 1);
        cr_assert(pair_lone(&p));
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.nodes[LOOM_POOL_ROLLOUT], 0);
        cr_assert_eq(p.v.of[p.ia].phase, LOOM_PHASE_TRAIN);
        cr_assert_eq(loom_sched_phase_done(s, 300, p.ia, LOOM_PHASE_TRAIN), 0);
        memset(&p.v, 0, sizeof p.v);
        drain(s, &p.v);
        cr_assert_eq(p.v.of[p.ia].phase, LOOM_PHASE_ROLLOUT);
        cr_assert_eq(p.v.of[p.ia].pool, LOOM_POOL_TRAIN);
        /* a newcomer provisions the node again, under the same id */
        loom_job_spec c = spec("C", 40, 40, 2.0);
        submit(s, &c, &p.d);
        cr_assert_eq(p.d.group, p.grp, "%s", p.d.reason);
        drain(s, &p.v);
        cr_assert_eq(p.v.provisioned[LOOM_POOL_ROLLOUT], 1);
        pair_end(&p);
}

/* The pair with A of `iterations` and cold start `cold`; B leaves and A's rollout ends (A has
 * trained once). Whether A's group went lone, with p left for more. */
static bool lone_after_partner_left(pair *p, int64_t iterations, double cold)
{
        pair_start(p, iterations, cold);
        cr_assert_eq(loom_sched_job_exit(p->s, 160, p->ib, LOOM_EXIT_CANCELLED), 0);
        cr_assert_eq(loom_sched_phase_done(p->s, 250, p->ia, LOOM_PHASE_ROLLOUT), 0);
        memset(&p->v, 0, sizeof p->v);
        drain(p->s, &p->v);
        return pair_lone(p);
}

static bool goes_lone(int64_t iterations, double cold)
{
        pair p;
        bool lone = lone_after_partner_left(&p, iterations, cold);
        pair_end(&p);
        return lone;
}

/* Its budget is 2 x 150 s and its lone iteration 150 s plus two switches: a known cold start
 * must fit in the slack over the iterations left. */
Test(lone, a_known_cold_start_decides_the_switch_to_lone)
{
        cr_assert(goes_lone(6, 100), "5 left: 20 s a round of 300 s fits");
        cr_assert_not(goes_lone(6, 1000), "5 left: 200 s a round does not");
        cr_assert(goes_lone(101, 1000), "100 left: 10 s a round fits");
        cr_assert(goes_lone(0, 1e5), "unbounded: any cold start pays");
}

/* Switching to lone makes the member's next rollout a cold start on its training nodes: one
 * that does not say what it costs (cold_s) and has fewer than LOOM_LONE_LEFT iterations left
 * keeps its rollout node to its end instead. */
Test(lone, a_member_near_its_end_does_not_switch_to_lone)
{
        for (int near = 0; near < 2; near++) {
                pair p;
                /* LOOM_LONE_LEFT (or one fewer) iterations left */
                cr_assert_eq(lone_after_partner_left(&p, LOOM_LONE_LEFT + !near, 0), !near);
                cr_assert_eq(p.v.released[LOOM_POOL_ROLLOUT], !near, "near %d", near);
                cr_assert_eq(loom_sched_phase_done(p.s, 300, p.ia, LOOM_PHASE_TRAIN), 0);
                drain(p.s, &p.v);
                cr_assert_eq(p.v.of[p.ia].phase, LOOM_PHASE_ROLLOUT);
                cr_assert_eq(p.v.of[p.ia].pool, near ? LOOM_POOL_ROLLOUT : LOOM_POOL_TRAIN);
                pair_end(&p);
        }
}

/* A restart that resumes the member (loom_sched_job_resume, as loomd does after a replay) ends
 * its rollout on the node: a group left with that member goes lone then, as it would have at
 * the rollout's end. */
Test(lone, resuming_the_last_member_makes_its_group_lone)
{
        pair p;
        pair_start(&p, 0, 0);
        cr_assert_eq(loom_sched_job_exit(p.s, 160, p.ib, LOOM_EXIT_CANCELLED), 0);
        cr_assert_not(pair_lone(&p), "A's rollout holds the node");
        cr_assert_eq(loom_sched_job_resume(p.s, 170, p.ia, LOOM_PHASE_ROLLOUT, 0), 0);
        cr_assert(pair_lone(&p), "resumed, its rollout restarts on the training nodes");
        memset(&p.v, 0, sizeof p.v);
        drain(p.s, &p.v);
        cr_assert_eq(p.v.released[LOOM_POOL_ROLLOUT], 1);
        cr_assert_eq(p.v.of[p.ia].pool, LOOM_POOL_TRAIN);
        pair_end(&p);
}

/* policy.lone_grow: a job whose SLO leaves no room for the two switches on its own training
 * node runs lone on more training nodes (faster training pays for the switches) when an
 * iteration there costs less than one of its own disaggregated group, at the cluster's prices. */
static loom_decision place_alone(const loom_job_spec *a, loom_group_info *g, seen *v)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        submit(s, a, &d);
        cr_assert_eq(loom_sched_group_info(s, d.group, g), 0);
        drain(s, v);
        loom_sched_free(s);
        return d;
}

Test(lone, a_job_too_tight_for_its_own_node_runs_lone_on_more_where_that_is_cheaper)
{
        po.warm_switch = loom_us_from_s(5);
        cr_assert(po.lone_grow, "on by default");
        double pt = loom_cluster_node_price(&cl, LOOM_POOL_TRAIN);
        /* all training, no slack: 410 + 10 > 410 on one node; on two 10 + 200 + 10 = 220, and
         * 2 x 5.28 x 220 = 2323 is 21% below (1.85 + 5.28) x 410 = 2923: it grows */
        loom_job_spec c = spec("C", 10, 400, 1.0);
        loom_group_info g;
        seen v = {0};
        loom_decision d = place_alone(&c, &g, &v);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(d.n_train_nodes, 2, "grown to two training nodes");
        cr_assert_float_eq(d.marginal_cost_per_hour, 2 * pt, 1e-9, "no rollout node paid for");
        cr_assert(g.lone);
        cr_assert_eq(v.provisioned[LOOM_POOL_TRAIN], 2);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 0);
        cr_assert_eq(v.last_start.phase, LOOM_PHASE_ROLLOUT);
        cr_assert_eq(v.last_start.pool, LOOM_POOL_TRAIN, "its rollout on its training nodes");
        cr_assert_eq(v.last_start.n_nodes, 2);
        loom_decision_free(&d);

        /* 60 s + 240 s: two nodes save only 6% at the default prices (2 x 5.28 x 190 against
         * 7.13 x 300), less than LOOM_MOVE_GROW_GAIN: its own rollout and training node */
        loom_job_spec a = spec("A", 60, 240, 1.0);
        v = (seen){0};
        d = place_alone(&a, &g, &v);
        cr_assert_eq(d.n_train_nodes, 1);
        cr_assert(!g.lone);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 1);
        loom_decision_free(&d);

        /* where rollout GPUs cost what training GPUs cost, 2 x 190 is 37% below 2 x 300 */
        cl.gpu[LOOM_POOL_ROLLOUT].price_per_hour = cl.gpu[LOOM_POOL_TRAIN].price_per_hour;
        v = (seen){0};
        d = place_alone(&a, &g, &v);
        cr_assert_eq(d.n_train_nodes, 2);
        cr_assert(g.lone);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 0);
        loom_decision_free(&d);

        /* rollout-heavy (240 s + 60 s): two nodes save 30 s of 300, 7%: not grown */
        loom_job_spec b = spec("B", 240, 60, 1.0);
        v = (seen){0};
        d = place_alone(&b, &g, &v);
        cr_assert_eq(d.n_train_nodes, 1);
        cr_assert(!g.lone);
        loom_decision_free(&d);

        /* off: the disaggregated group of its declared nodes, as before */
        po.lone_grow = false;
        v = (seen){0};
        d = place_alone(&a, &g, &v);
        cr_assert_eq(d.n_train_nodes, 1);
        cr_assert(!g.lone);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 1);
        loom_decision_free(&d);
}

/* policy.slo_cap: a job whose SLO its own node cannot keep lone is placed where it keeps that
 * SLO only when an iteration there costs at most 1 + slo_premium times one lone; otherwise it
 * runs lone, held to its lone iteration, and the decision says so. */
Test(lone, the_slo_cap_runs_a_job_colocated_where_keeping_its_slo_costs_more)
{
        po.warm_switch = loom_us_from_s(5);
        double pt = loom_cluster_node_price(&cl, LOOM_POOL_TRAIN),
               pr = loom_cluster_node_price(&cl, LOOM_POOL_ROLLOUT);
        /* 240 s + 60 s at SLO 1.0: lone 250 + 60 = 310 s > 300 s; not grown (7%); its own
         * disaggregated group costs (pr + pt) x 300 against pt x 310 lone */
        loom_job_spec b = spec("B", 240, 60, 1.0);
        double premium = (pr + pt) * 300 / (pt * 310) - 1;
        cr_assert(premium > 0.25 && premium < 0.5, "%g", premium);
        cr_assert_not(po.slo_cap, "off by default");
        loom_group_info g;
        seen v = {0};
        loom_decision d = place_alone(&b, &g, &v);
        cr_assert(!g.lone);
        cr_assert_eq(d.slo_effective, 0);
        loom_decision_free(&d);

        po.slo_cap = true;
        po.slo_premium = 0.5; /* within the cap: its SLO kept */
        v = (seen){0};
        d = place_alone(&b, &g, &v);
        cr_assert(!g.lone);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 1);
        cr_assert_eq(d.slo_effective, 0);
        loom_decision_free(&d);

        po.slo_premium = 0.25; /* past it: lone, its SLO relaxed to 310 / 300 */
        v = (seen){0};
        d = place_alone(&b, &g, &v);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        cr_assert(g.lone);
        cr_assert_eq(d.n_train_nodes, 1);
        cr_assert_float_eq(d.marginal_cost_per_hour, pt, 1e-9);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 0);
        cr_assert_float_eq(d.slo_effective, 310.0 / 300, 1e-6);
        cr_assert(strstr(d.reason, "SLO relaxed to 1.033"), "%s", d.reason);
        loom_decision_free(&d);
        /* explained: the SLO-keeping group costlier, the relaxed lone group chosen */
        loom_sched *sx = loom_sched_new(&cl, &po, NULL);
        loom_decision_init(&d, true);
        submit(sx, &b, &d);
        cr_assert_geq(d.n_candidates, 2);
        const loom_candidate *lc = &d.candidates[d.n_candidates - 1];
        cr_assert_eq(lc->reject, LOOM_REJECT_NONE);
        cr_assert_float_eq(lc->marginal_cost_per_hour, pt, 1e-9);
        int costlier = 0;
        for (int i = 0; i < d.n_candidates - 1; i++) {
                cr_assert_neq(d.candidates[i].reject, LOOM_REJECT_NONE, "one chosen");
                costlier += strstr(d.candidates[i].why, "past policy.slo_premium") != NULL;
        }
        cr_assert_eq(costlier, 1);
        loom_decision_free(&d);
        loom_sched_free(sx);

        /* a job that fits lone is never relaxed, even at 0 */
        po.slo_premium = 0;
        loom_job_spec a = spec("A", 240, 60, 1.5);
        v = (seen){0};
        d = place_alone(&a, &g, &v);
        cr_assert(g.lone);
        cr_assert_eq(d.slo_effective, 0);
        loom_decision_free(&d);
}

/* policy.slo_cap under learned admission: a relaxed job is held, once learned, to its measured
 * lone iteration, so it stays lone instead of getting the rollout node its SLO would need. */
Test(lone, a_relaxed_job_is_held_to_its_measured_lone_iteration_once_learned)
{
        po.warm_switch = loom_us_from_s(5);
        po.admission = LOOM_ADMIT_P99;
        po.slo_cap = true;
        po.slo_premium = 0;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec b = spec("B", 240, 60, 1.0);
        loom_job_id ib = submit(s, &b, &d);
        cr_assert_float_eq(d.slo_effective, 310.0 / 300, 1e-6, "%s", d.reason);
        /* until B has learned, its budget is its lone iteration on its declared phases, which
         * a joiner could stretch it to: its group takes no one (A would, for a rollout node) */
        loom_decision da;
        loom_decision_init(&da, false);
        loom_job_spec sa = spec("A", 60, 30, 3.0);
        submit(s, &sa, &da);
        cr_assert_neq(da.group, d.group, "%s", da.reason);
        loom_decision_free(&da);
        loom_us now = 0;
        loom_action a;
        for (int it = 0; it < 4; it++) {
                while (loom_sched_next_action(s, &a))
                        ;
                now += loom_us_from_s(205); /* its switch, then a 200 s rollout */
                cr_assert_geq(
                    loom_sched_observe(s, now, ib, LOOM_PHASE_ROLLOUT, loom_us_from_s(200)), 0);
                cr_assert_eq(loom_sched_phase_done(s, now, ib, LOOM_PHASE_ROLLOUT), 0);
                while (loom_sched_next_action(s, &a))
                        ;
                now += loom_us_from_s(65);
                cr_assert_geq(loom_sched_observe(s, now, ib, LOOM_PHASE_TRAIN, loom_us_from_s(60)),
                              0);
                cr_assert_eq(loom_sched_phase_done(s, now, ib, LOOM_PHASE_TRAIN), 0);
        }
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, ib, &ji), 0);
        /* its SLO would give 1.0 x 260 s; alone it takes 200 + 60 + 2 x 5 */
        cr_assert_eq(ji.learned_budget, loom_us_from_s(270), "%lld", (long long)ji.learned_budget);
        loom_group_info g;
        cr_assert_eq(loom_sched_group_info(s, d.group, &g), 0);
        cr_assert(g.lone, "still colocated: no rollout node");
        seen v = {0};
        drain(s, &v);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 0);
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* policy.slo_cap once learned: a job that fit lone at admission but whose learned lone iteration
 * no longer fits its SLO keeps running lone, held to that lone iteration, where keeping the SLO
 * (its group's rollout node) costs more than the cap allows; within the cap it gets the node. */
static loom_group_info learn_alone(double premium, loom_us *budget, seen *v)
{
        po.warm_switch = loom_us_from_s(5);
        po.admission = LOOM_ADMIT_P99;
        po.slo_cap = true;
        po.slo_premium = premium;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        /* 1.035 x 300 s >= 240 + 60 + 10: lone at admission; learned 200 + 30 s: 240 s lone
         * against 1.035 x 230 = 238 s */
        loom_job_spec a = spec("D", 240, 60, 1.035);
        loom_job_id id = submit(s, &a, &d);
        cr_assert_eq(d.slo_effective, 0, "%s", d.reason);
        loom_us now = 0;
        for (int it = 0; it < 4; it++) {
                drain(s, v);
                now += loom_us_from_s(205);
                loom_sched_observe(s, now, id, LOOM_PHASE_ROLLOUT, loom_us_from_s(200));
                cr_assert_eq(loom_sched_phase_done(s, now, id, LOOM_PHASE_ROLLOUT), 0);
                drain(s, v);
                now += loom_us_from_s(35);
                loom_sched_observe(s, now, id, LOOM_PHASE_TRAIN, loom_us_from_s(30));
                cr_assert_eq(loom_sched_phase_done(s, now, id, LOOM_PHASE_TRAIN), 0);
        }
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, id, &ji), 0);
        *budget = ji.learned_budget;
        loom_group_info g;
        cr_assert_eq(loom_sched_group_info(s, d.group, &g), 0);
        drain(s, v);
        loom_decision_free(&d);
        loom_sched_free(s);
        return g;
}

Test(lone, a_learned_lone_member_past_its_slo_stays_lone_where_keeping_it_costs_more)
{
        loom_us budget;
        seen v = {0};
        /* its own rollout node: (1.85 + 5.28) x 230 s is 29% more than 5.28 x 240 s lone */
        loom_group_info g = learn_alone(0, &budget, &v);
        cr_assert(g.lone, "relaxed: still lone");
        cr_assert_eq(budget, loom_us_from_s(240), "%lld", (long long)budget);
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 0);
        v = (seen){0};
        g = learn_alone(0.5, &budget, &v);
        cr_assert(!g.lone, "kept: its rollout node provisioned");
        cr_assert_lt(budget, loom_us_from_s(240));
        cr_assert_eq(v.provisioned[LOOM_POOL_ROLLOUT], 1);
}
