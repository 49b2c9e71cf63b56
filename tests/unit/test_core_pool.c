/*
 * test_core_pool.c - training pools that grow with their members (policy.pool_grow): a job that
 * can neither run lone nor join a group as its pool stands joins one whose training pool it
 * grows by its own training node, where an iteration of it costs less there than in a group of
 * its own; every member then trains on the larger pool; its departure shrinks the pool again,
 * the node released once no training runs there; a replay takes the grown placement from its
 * record, and a core without the policy refuses it.
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
        po.warm_switch = loom_us_from_s(5);
}

TestSuite(pool, .init = setup);

static loom_job_spec spec(const char *id, double roll, double train, double slo)
{
        return core_spec(id, roll, train, slo, 10 * LOOM_GB, 20 * LOOM_GB);
}

typedef struct seen {
        int provisioned[2], released[2];
        loom_node_id released_train[8];
        loom_action start[8]; /* the last START_PHASE per job id */
        loom_action train[8]; /* ... of its training */
        bool running[8];      /* drain() saw a phase start that still runs */
} seen;

static void drain(loom_sched *s, seen *v)
{
        loom_action a;
        while (loom_sched_next_action(s, &a)) {
                if (a.type == LOOM_ACT_PROVISION_NODE)
                        v->provisioned[a.pool]++;
                else if (a.type == LOOM_ACT_RELEASE_NODE && a.pool == LOOM_POOL_TRAIN &&
                         v->released[a.pool] < 8)
                        v->released_train[v->released[a.pool]++] = a.node;
                else if (a.type == LOOM_ACT_RELEASE_NODE)
                        v->released[a.pool]++;
                else if (a.type == LOOM_ACT_START_PHASE && a.job < 8) {
                        v->start[a.job] = a;
                        v->running[a.job] = true;
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

/* A and B share one training node, its pool full; C (lone: 240 + 60 + 2 x 5 > 300 s) cannot
 * run lone, nor fit their pool as it stands (its own iteration there is 300 s and more). */
static loom_sched *two_and_a_tight_one(loom_decision *d, loom_job_id *ids, seen *v)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = spec("A", 100, 100, 2.0), b = spec("B", 100, 100, 2.0),
                      c = spec("C", 240, 60, 1.0);
        ids[0] = submit(s, &a, d);
        loom_group_id g = d->group;
        ids[1] = submit(s, &b, d);
        cr_assert_eq(d->group, g, "B joins A: %s", d->reason);
        cr_assert_eq(d->n_train_nodes, 1);
        drain(s, v);
        ids[2] = submit(s, &c, d);
        return s;
}

Test(pool, a_join_grows_the_training_pool_where_an_iteration_costs_less_there)
{
        cr_assert(po.pool_grow, "on by default");
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id id[3];
        seen v = {0};
        loom_sched *s = two_and_a_tight_one(&d, id, &v);
        double pt = loom_cluster_node_price(&cl, LOOM_POOL_TRAIN),
               pr = loom_cluster_node_price(&cl, LOOM_POOL_ROLLOUT);
        cr_assert_neq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        cr_assert_eq(d.n_train_nodes, 2, "%s", d.reason);
        cr_assert(strstr(d.reason, "grown by 1 to 2 nodes"), "%s", d.reason);
        /* one training node and the rollout node its 240 s rollout needs: what a group of
         * its own would cost per hour, for a shorter iteration */
        cr_assert_float_eq(d.marginal_cost_per_hour, pt + pr, 1e-9);
        cr_assert_lt(d.t_meta, loom_us_from_s(300));
        cr_assert_eq(d.train_nodes[1], d.train_nodes[0] + 1, "the next free id");
        drain(s, &v);
        cr_assert_eq(v.provisioned[LOOM_POOL_TRAIN], 2, "A's node, then the one C adds");
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, id[0], &ji), 0);
        cr_assert_eq(ji.n_train_nodes, 2, "A now trains on both");
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.pool_grown, 1);

        /* A's next training runs on the grown pool, 16 GPUs */
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(100), id[0], LOOM_PHASE_ROLLOUT), 0);
        drain(s, &v);
        cr_assert_eq(v.start[id[0]].phase, LOOM_PHASE_TRAIN);
        cr_assert_eq(v.start[id[0]].n_nodes, 2);
        cr_assert_eq(v.start[id[0]].gpus, 16);
        cr_assert_eq(v.start[id[0]].nodes[1], d.train_nodes[1]);
        loom_decision_free(&d);
        loom_sched_free(s);

        /* without the policy C opens a group of its own */
        po.pool_grow = false;
        loom_decision_init(&d, false);
        v = (seen){0};
        s = two_and_a_tight_one(&d, id, &v);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "%s", d.reason);
        cr_assert_eq(d.n_train_nodes, 1);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(pool, a_departure_shrinks_the_pool_and_releases_the_node_once_no_training_runs_there)
{
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id id[3];
        seen v = {0};
        loom_sched *s = two_and_a_tight_one(&d, id, &v);
        loom_group_id g = d.group;
        loom_node_id added = d.train_nodes[1];
        drain(s, &v);
        /* A trains on both nodes when C leaves: the pool shrinks at once, the node is released
         * when A's training ends */
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(100), id[0], LOOM_PHASE_ROLLOUT), 0);
        drain(s, &v);
        cr_assert_eq(v.start[id[0]].phase, LOOM_PHASE_TRAIN);
        cr_assert_eq(loom_sched_job_exit(s, loom_us_from_s(110), id[2], LOOM_EXIT_CANCELLED), 0);
        drain(s, &v);
        loom_group_info gi;
        cr_assert_eq(loom_sched_group_info(s, g, &gi), 0);
        cr_assert_eq(gi.n_train_nodes, 1, "A and B keep their SLOs on one node again");
        cr_assert_eq(v.released[LOOM_POOL_TRAIN], 0, "A still trains on it");
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.pool_shrunk, 1);
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(160), id[0], LOOM_PHASE_TRAIN), 0);
        drain(s, &v);
        cr_assert_eq(v.released[LOOM_POOL_TRAIN], 1);
        cr_assert_eq(v.released_train[0], added);
        /* B's training, next, runs on the one node left */
        cr_assert_eq(loom_sched_phase_done(s, loom_us_from_s(200), id[1], LOOM_PHASE_ROLLOUT), 0);
        drain(s, &v);
        cr_assert_eq(v.start[id[1]].phase, LOOM_PHASE_TRAIN);
        cr_assert_eq(v.start[id[1]].n_nodes, 1);
        cr_assert_eq(v.start[id[1]].gpus, 8);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(pool, a_replay_takes_the_grown_placement_and_a_core_without_the_policy_refuses_it)
{
        loom_decision want, d;
        loom_decision_init(&want, false);
        loom_decision_init(&d, false);
        loom_job_id id[3];
        seen v = {0};
        loom_sched *s = two_and_a_tight_one(&want, id, &v);
        cr_assert_eq(want.n_train_nodes, 2);
        loom_sched_free(s);

        /* the same history, the record handed back: applied as recorded */
        s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = spec("A", 100, 100, 2.0), b = spec("B", 100, 100, 2.0),
                      c = spec("C", 240, 60, 1.0);
        submit(s, &a, &d);
        submit(s, &b, &d);
        loom_job_id ic;
        loom_err e;
        loom_err_clear(&e);
        cr_assert_eq(loom_sched_submit_as(s, 0, &c, &want, &d, &ic, &e), 0, "%s", e.msg);
        cr_assert_eq(d.n_train_nodes, 2);
        loom_sched_free(s);

        /* under a policy without growth the record cannot be applied: the search's choice is,
         * and the error names the field */
        po.pool_grow = false;
        s = loom_sched_new(&cl, &po, NULL);
        submit(s, &a, &d);
        submit(s, &b, &d);
        loom_err_clear(&e);
        cr_assert_eq(loom_sched_submit_as(s, 0, &c, &want, &d, &ic, &e), LOOM_SUBMIT_SEARCHED);
        cr_assert(strstr(e.field, "train_nodes"), "%s: %s", e.field, e.msg);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        loom_decision_free(&want);
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* Phases in flight, run for their declared time (a training for its time on the GPUs it got,
 * scaled linearly) and observed, as a driver would. */
typedef struct clock {
        struct {
                bool on;
                loom_phase ph;
                loom_pool pool;
                int gpus; /* what its START_PHASE said, which a driver logs */
                loom_us end, took;
        } r[8];
        loom_us now;
        int trains[8];       /* trainings started per job */
        loom_us ends[8][64]; /* ... and when each ended */
        int n_ends[8];
} clock;

/* The clock with what drain() saw start at 0 (A's and B's rollouts) running. */
static clock started(loom_sched *s, const seen *v)
{
        clock k = {0};
        for (int j = 0; j < 8; j++)
                if (v->running[j]) {
                        loom_job_info ji;
                        cr_assert_eq(loom_sched_job_info(s, (loom_job_id)j, &ji), 0);
                        k.r[j].on = true;
                        k.r[j].ph = LOOM_PHASE_ROLLOUT;
                        k.r[j].pool = v->start[j].pool;
                        k.r[j].gpus = v->start[j].gpus;
                        k.r[j].end = k.r[j].took = ji.declared.t_roll;
                }
        return k;
}

/* Run until job `job` starts its `n`-th training (then its phase is left running). */
static void run(loom_sched *s, seen *v, clock *k, loom_job_id job, int n)
{
        for (;;) {
                loom_action a;
                while (loom_sched_next_action(s, &a)) {
                        if (a.type != LOOM_ACT_START_PHASE || a.job >= 8)
                                continue;
                        loom_job_info ji;
                        cr_assert_eq(loom_sched_job_info(s, a.job, &ji), 0);
                        v->start[a.job] = a;
                        if (a.phase == LOOM_PHASE_TRAIN)
                                v->train[a.job] = a;
                        loom_us took = a.phase == LOOM_PHASE_ROLLOUT ? ji.declared.t_roll
                                       : a.phase == LOOM_PHASE_TRAIN
                                           ? ji.declared.t_train * ji.spec.train_gpus / a.gpus
                                           : ji.spec.t_sync;
                        k->r[a.job].on = true;
                        k->r[a.job].ph = a.phase;
                        k->r[a.job].pool = a.pool;
                        k->r[a.job].gpus = a.gpus;
                        k->r[a.job].took = took;
                        k->r[a.job].end = k->now + took;
                        if (a.phase == LOOM_PHASE_TRAIN && ++k->trains[a.job] == n && a.job == job)
                                return;
                }
                int next = -1;
                for (int j = 0; j < 8; j++)
                        if (k->r[j].on && (next < 0 || k->r[j].end < k->r[next].end))
                                next = j;
                cr_assert_geq(next, 0, "nothing runs");
                k->now = k->r[next].end;
                k->r[next].on = false;
                if (k->r[next].ph == LOOM_PHASE_TRAIN && k->n_ends[next] < 64)
                        k->ends[next][k->n_ends[next]++] = k->now;
                cr_assert_eq(loom_sched_phase_done(s, k->now, (loom_job_id)next, k->r[next].ph), 0);
                loom_sched_observe_ran(s, k->now, (loom_job_id)next, k->r[next].ph, k->r[next].pool,
                                       k->r[next].gpus, k->r[next].took);
        }
}

/* Every member of the grown group settles at the period its placement admitted, the grown
 * pool's T_meta, within its SLO: the dispatcher runs each training on both nodes. */
Test(pool, the_grown_group_runs_at_its_admitted_period)
{
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id id[3];
        seen v = {0};
        loom_sched *s = two_and_a_tight_one(&d, id, &v);
        cr_assert_eq(d.n_train_nodes, 2, "%s", d.reason);
        clock k = started(s, &v);
        run(s, &v, &k, id[2], 40);
        loom_group_info gi;
        cr_assert_eq(loom_sched_group_info(s, d.group, &gi), 0);
        cr_assert_eq(gi.t_meta, d.t_meta);
        for (int m = 0; m < 3; m++) {
                int n = k.n_ends[id[m]];
                cr_assert_geq(n, 30);
                loom_us per = (k.ends[id[m]][n - 1] - k.ends[id[m]][n - 11]) / 10;
                loom_job_info ji;
                cr_assert_eq(loom_sched_job_info(s, id[m], &ji), 0);
                cr_assert_leq(per, d.t_meta, "member %d: %.3f s, admitted %.3f s", m,
                              loom_us_to_s(per), loom_us_to_s(d.t_meta));
                cr_assert_leq(per, loom_job_budget(&ji.spec), "member %d within its SLO", m);
        }
        loom_decision_free(&d);
        loom_sched_free(s);
}

/* A training observed on a pool that shrank under it is measured against the pool it ran on:
 * A's third training runs on both nodes (50 s for its declared 100 s on one) while C leaves,
 * and A's learned budget stays SLO x its declared solo iteration, 2 x (100 + 100) s. */
Test(pool, a_training_is_learned_against_the_pool_it_ran_on)
{
        po.admission = LOOM_ADMIT_P99;
        po.regroup = false;
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id id[3];
        seen v = {0};
        loom_sched *s = two_and_a_tight_one(&d, id, &v);
        cr_assert_eq(d.n_train_nodes, 2, "%s", d.reason);
        clock k = started(s, &v);
        run(s, &v, &k, id[0], 3);
        cr_assert_eq(v.train[id[0]].gpus, 16, "A's third training runs on the grown pool");
        cr_assert_eq(loom_sched_job_exit(s, k.now, id[2], LOOM_EXIT_CANCELLED), 0);
        k.r[id[2]].on = false;
        loom_group_info gi;
        cr_assert_eq(loom_sched_group_info(s, d.group, &gi), 0);
        cr_assert_eq(gi.n_train_nodes, 1, "shrunk under A's training");
        run(s, &v, &k, id[0], 4); /* A's third training observed */
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, id[0], &ji), 0);
        cr_assert_eq(ji.learned_budget, loom_us_from_s(400), "%.3f s, %d replans, learned %d",
                     loom_us_to_s(ji.learned_budget), (int)ji.replans, ji.learned);
        loom_decision_free(&d);
        loom_sched_free(s);
}
