/*
 * test_core_sched.c - inter-group placement (Algorithm 1), the scheduler facade, round-robin
 * dispatch, tail migration, job exit and determinism.
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
        po.multirate = false;     /* single-rate round robin (test_core_multirate.c covers rates) */
        po.colocate_lone = false; /* WEAVE's groups (test_core_lone.c covers lone members) */
}

TestSuite(sched, .init = setup);

static loom_job_spec spec(const char *id, double roll, double train, double slo)
{
        return core_spec(id, roll, train, slo, 300 * LOOM_GB, 300 * LOOM_GB);
}

static loom_job_id submit(loom_sched *s, loom_job_spec sp, loom_decision *d)
{
        loom_job_id id = 0;
        loom_err e;
        int rc = loom_sched_submit(s, 0, &sp, d, &id, &e);
        cr_assert_eq(rc, 0, "submit %s: %s", sp.id, e.msg);
        return id;
}

static void drain(loom_sched *s)
{
        loom_action a;
        while (loom_sched_next_action(s, &a))
                ;
}

static const loom_candidate *find_cand(const loom_decision *d, loom_group_id g,
                                       loom_decision_kind k, loom_node_id first_node)
{
        for (int i = 0; i < d->n_candidates; i++) {
                const loom_candidate *c = &d->candidates[i];
                if (c->group == g && c->kind == k &&
                    (c->n_rollout_nodes == 0 || c->rollout_nodes[0] == first_node))
                        return c;
        }
        return NULL;
}

/*
 * WEAVE §4.2's running example. G1 (group 0) is saturated: A1 and A2 share roll-0 and train-0
 * with T_load 200 s = T_cycle 200 s. G2 (group 1) holds C on (roll-1, train-1) and D on
 * (roll-2, train-1): D could not share roll-1 within its SLO (T_meta would be 200 s > 1.2 x
 * 150 s), so it scaled the rollout pool. E (50 s rollout, 40 s training) then arrives.
 *
 * By hand: G1 is pruned. In G2, direct packing onto roll-1 gives node load 150 s, training
 * load 140 s, T_cycle 150 s: a full group whose round robin (C,E on roll-1; D on roll-2;
 * C,D,E training) repeats every 150 s, within every SLO (E, solo 90 s, tolerates 2.0x = 180 s),
 * at zero marginal cost. Packing onto
 * roll-2 is the same by symmetry and loses the tie on node id; rollout scaling to roll-3 costs
 * one H20 node ($14.80/h); a new group costs $57.04/h. Decision: direct_pack, group 1,
 * rollout node 1, training node 1, T_meta 150 s.
 */
Test(sched, paper_running_example)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, true);
        submit(s, spec("A1", 100, 100, 1.0), &d);
        submit(s, spec("A2", 100, 100, 1.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK);
        cr_assert_eq(d.group, 0);
        submit(s, spec("C", 100, 50, 1.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "C must open G2 (G1 saturated)");
        cr_assert_eq(d.group, 1);
        cr_assert_eq(d.rollout_nodes[0], 1);
        submit(s, spec("D", 100, 50, 1.2), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE);
        cr_assert_eq(d.rollout_nodes[0], 2);
        const loom_candidate *dp = find_cand(&d, 1, LOOM_DECISION_DIRECT_PACK, 1);
        cr_assert(dp && dp->reject == LOOM_REJECT_SLO, "D on roll-1 must break an SLO");
        cr_assert_eq(dp->t_meta, loom_us_from_s(200));

        loom_job_spec e = spec("E", 50, 40, 2.0);
        submit(s, e, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK);
        cr_assert_eq(d.group, 1);
        cr_assert_eq(d.n_rollout_nodes, 1);
        cr_assert_eq(d.rollout_nodes[0], 1);
        cr_assert_eq(d.train_nodes[0], 1);
        cr_assert_float_eq(d.marginal_cost_per_hour, 0.0, 1e-9);
        cr_assert_eq(d.t_meta, loom_us_from_s(150));
        cr_assert_eq(d.groups_pruned_saturated, 1);
        const loom_candidate *g1 = find_cand(&d, 0, LOOM_DECISION_DIRECT_PACK, 0);
        cr_assert(g1 && g1->reject == LOOM_REJECT_SATURATED);
        const loom_candidate *r2 = find_cand(&d, 1, LOOM_DECISION_DIRECT_PACK, 2);
        cr_assert(r2 && r2->reject == LOOM_REJECT_COSTLIER);
        const loom_candidate *sc = find_cand(&d, 1, LOOM_DECISION_ROLLOUT_SCALE, 3);
        cr_assert(sc && sc->reject == LOOM_REJECT_COSTLIER);
        cr_assert_float_eq(sc->marginal_cost_per_hour, 14.8, 1e-9);
        const loom_candidate *ng = find_cand(&d, LOOM_NEW_GROUP, LOOM_DECISION_NEW_GROUP, 3);
        cr_assert(ng && ng->reject == LOOM_REJECT_COSTLIER);
        cr_assert_float_eq(ng->marginal_cost_per_hour, 57.04, 1e-9);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(sched, memory_residency_rejects_a_node)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, true);
        loom_job_spec a = spec("A", 100, 100, 2.0);
        a.mem_rollout = 1500 * LOOM_GB;
        submit(s, a, &d);
        loom_job_spec b = spec("B", 50, 50, 2.0);
        b.mem_rollout = 600 * LOOM_GB;
        submit(s, b, &d);
        const loom_candidate *dp = find_cand(&d, 0, LOOM_DECISION_DIRECT_PACK, 0);
        cr_assert(dp && dp->reject == LOOM_REJECT_MEMORY, "2100 GB on a 2000 GB node");
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(sched, too_big_working_set_is_rejected_with_a_reason_and_changes_nothing)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, true);
        loom_job_spec a = spec("A", 100, 100, 2.0);
        a.mem_train = 2100 * LOOM_GB;
        loom_job_id id = 0;
        loom_err e;
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &id, &e), LOOM_EREJECT);
        cr_assert_eq(d.kind, LOOM_DECISION_REJECTED);
        cr_assert_str_eq(e.field, "mem_train_gb");
        cr_assert(strstr(d.reason, "exceeds"));
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.jobs, 0);
        cr_assert_eq(st.nodes[0] + st.nodes[1], 0);
        loom_action act;
        cr_assert_not(loom_sched_next_action(s, &act));
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(sched, invalid_spec_names_the_field)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id id;
        loom_err e;
        loom_job_spec a = spec("A", 100, 100, 0.9);
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &id, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "slo");
        a = spec("A", 100, 100, 1.0);
        a.rollout_gpus = 12;
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &id, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "rollout_gpus");
        a = spec("A", 0, 100, 1.0);
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &id, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "t_roll_s");
        loom_sched_free(s);
}

Test(sched, saturated_groups_are_pruned_and_a_new_group_opens)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, true);
        submit(s, spec("A", 100, 100, 3.0), &d);
        submit(s, spec("B", 100, 100, 3.0), &d); /* direct pack: load 200 = cycle 200 */
        loom_group_info gi;
        cr_assert_eq(loom_sched_group_info(s, 0, &gi), 0);
        cr_assert(gi.saturated);
        submit(s, spec("C", 10, 10, 3.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(d.groups_pruned_saturated, 1);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(sched, full_groups_are_skipped)
{
        po.max_group_size = 2;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, true);
        submit(s, spec("A", 100, 100, 4.0), &d);
        submit(s, spec("B", 50, 50, 4.0), &d);
        cr_assert_eq(d.group, 0);
        submit(s, spec("C", 50, 50, 4.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP);
        cr_assert_eq(d.groups_pruned_full, 1);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(sched, joining_a_larger_training_pool_scales_data_parallel)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec a = spec("A", 400, 100, 1.5);
        a.train_gpus = 16;
        submit(s, a, &d);
        loom_job_id b = submit(s, spec("B", 50, 200, 2.0), &d);
        cr_assert_eq(d.group, 0);
        cr_assert_eq(d.n_train_nodes, 2);
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, b, &ji), 0);
        cr_assert_eq(ji.t_train_in_group, loom_us_from_s(100), "8 -> 16 GPUs halves training");
        loom_decision_free(&d);
        loom_sched_free(s);
}

static loom_action next(loom_sched *s)
{
        loom_action a;
        cr_assert(loom_sched_next_action(s, &a), "expected an action");
        return a;
}

Test(sched, round_robin_and_tail_migration)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, spec("A", 100, 100, 2.0), &d);
        loom_job_id b = submit(s, spec("B", 100, 100, 2.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK);
        loom_action x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_PROVISION_NODE);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_PROVISION_NODE);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_START_PHASE);
        cr_assert_eq(x.job, a);
        cr_assert_eq(x.phase, LOOM_PHASE_ROLLOUT);
        cr_assert_eq(x.gpus, 8);
        cr_assert_not(loom_sched_next_action(s, &x), "B waits for the node");

        cr_assert_eq(loom_sched_progress(s, 10, a, LOOM_PHASE_ROLLOUT, 50, 100), 0);
        cr_assert_not(loom_sched_next_action(s, &x), "below the threshold nothing happens");
        cr_assert_eq(loom_sched_progress(s, 20, a, LOOM_PHASE_ROLLOUT, 80, 100), 1);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_MIGRATE_TAIL);
        cr_assert_eq(x.job, a);
        cr_assert_eq(x.keep_gpus, 1);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_START_PHASE);
        cr_assert_eq(x.job, b);
        cr_assert_eq(x.gpus, 7, "B starts on the 7 freed GPUs");
        cr_assert_eq(loom_sched_progress(s, 25, a, LOOM_PHASE_ROLLOUT, 90, 100), 0,
                     "a tail migrates once");

        cr_assert_eq(loom_sched_phase_done(s, 30, a, LOOM_PHASE_ROLLOUT), 0);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_RESIZE_PHASE);
        cr_assert_eq(x.job, b);
        cr_assert_eq(x.gpus, 8);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_START_PHASE);
        cr_assert_eq(x.job, a);
        cr_assert_eq(x.phase, LOOM_PHASE_TRAIN);
        cr_assert_eq(loom_sched_phase_done(s, 40, a, LOOM_PHASE_ROLLOUT), LOOM_ESTATE);

        /* A trains while B rolls out; A's next rollout waits behind B on the node. */
        cr_assert_eq(loom_sched_phase_done(s, 50, a, LOOM_PHASE_TRAIN), 0);
        cr_assert_not(loom_sched_next_action(s, &x));
        cr_assert_eq(loom_sched_phase_done(s, 60, b, LOOM_PHASE_ROLLOUT), 0);
        x = next(s);
        cr_assert_eq(x.job, a);
        cr_assert_eq(x.phase, LOOM_PHASE_ROLLOUT);
        x = next(s);
        cr_assert_eq(x.job, b);
        cr_assert_eq(x.phase, LOOM_PHASE_TRAIN);
        loom_job_info ji;
        loom_sched_job_info(s, a, &ji);
        cr_assert_eq(ji.iterations_done, 1);
        loom_decision_free(&d);
        loom_sched_free(s);
}

Test(sched, migration_off_keeps_the_node)
{
        po.tail_migration = false;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, spec("A", 100, 100, 2.0), &d);
        submit(s, spec("B", 100, 100, 2.0), &d);
        drain(s);
        cr_assert_eq(loom_sched_progress(s, 20, a, LOOM_PHASE_ROLLOUT, 99, 100), 0);
        loom_action x;
        cr_assert_not(loom_sched_next_action(s, &x));
        loom_sched_free(s);
}

Test(sched, sync_phase_and_iterations_end_the_job)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec sp = spec("A", 10, 10, 1.0);
        sp.t_sync = loom_us_from_s(5);
        sp.iterations = 2;
        loom_job_id a = submit(s, sp, &d);
        drain(s);
        for (int it = 0; it < 2; it++) {
                cr_assert_eq(loom_sched_phase_done(s, 0, a, LOOM_PHASE_ROLLOUT), 0);
                drain(s);
                cr_assert_eq(loom_sched_phase_done(s, 0, a, LOOM_PHASE_TRAIN), 0);
                loom_action x = next(s);
                if (it == 0) {
                        cr_assert_eq(x.type, LOOM_ACT_START_PHASE);
                        cr_assert_eq(x.phase, LOOM_PHASE_SYNC);
                        cr_assert_eq(loom_sched_phase_done(s, 0, a, LOOM_PHASE_SYNC), 0);
                        x = next(s);
                        cr_assert_eq(x.phase, LOOM_PHASE_ROLLOUT);
                } else {
                        cr_assert_eq(x.type, LOOM_ACT_JOB_DONE);
                }
        }
        loom_job_info ji;
        cr_assert_eq(loom_sched_job_info(s, a, &ji), LOOM_ENOENT);
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.nodes[0] + st.nodes[1], 0, "the finished job's nodes were released");
        loom_sched_free(s);
}

Test(sched, job_exit_releases_nodes)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec sa = spec("A", 100, 100, 1.0), sb = spec("B", 100, 20, 2.0);
        sa.mem_rollout = 1500 * LOOM_GB; /* B cannot share A's rollout node */
        sb.mem_rollout = 600 * LOOM_GB;
        loom_job_id a = submit(s, sa, &d);
        loom_job_id b = submit(s, sb, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE);
        drain(s);
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_float_eq(st.cost_per_hour, 2 * 14.8 + 42.24, 1e-9);
        cr_assert_eq(loom_sched_job_exit(s, 0, b, LOOM_EXIT_CANCELLED), 0);
        loom_action x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_RELEASE_NODE);
        cr_assert_eq(x.pool, LOOM_POOL_ROLLOUT);
        cr_assert_eq(x.node, 1);
        cr_assert_eq(loom_sched_job_exit(s, 0, a, LOOM_EXIT_FAILED), 0);
        drain(s);
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.groups, 0);
        cr_assert_float_eq(st.cost_per_hour, 0.0, 1e-9);
        cr_assert_eq(loom_sched_job_exit(s, 0, a, LOOM_EXIT_FAILED), LOOM_ENOENT);
        loom_sched_free(s);
}

Test(sched, exit_of_a_running_job_lets_the_next_start)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, spec("A", 100, 100, 2.0), &d);
        loom_job_id b = submit(s, spec("B", 100, 100, 2.0), &d);
        drain(s);
        cr_assert_eq(loom_sched_job_exit(s, 0, a, LOOM_EXIT_FAILED), 0);
        loom_action x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_START_PHASE);
        cr_assert_eq(x.job, b);
        loom_sched_free(s);
}

/* Deterministic pseudo-random workload: the same seed gives the same decisions and actions. */
static uint64_t run_workload(uint64_t seed, loom_placer placer)
{
        po.placer = placer;
        po.seed = seed;
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        uint64_t h = 1469598103934665603ULL, r = seed;
        loom_job_id live[400];
        int n = 0;
        for (int i = 0; i < 400; i++) {
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                if (n > 0 && (r >> 60) < 4) {
                        int k = (int)((r >> 20) % (uint64_t)n);
                        loom_sched_job_exit(s, i, live[k], LOOM_EXIT_FINISHED);
                        live[k] = live[--n];
                } else {
                        char id[16];
                        snprintf(id, sizeof id, "j%d", i);
                        loom_job_spec sp =
                            spec(id, 50 + (double)((r >> 8) % 500), 25 + (double)((r >> 24) % 500),
                                 1.0 + (double)((r >> 40) % 100) / 100.0);
                        loom_decision d;
                        loom_decision_init(&d, false);
                        loom_job_id id_out;
                        cr_assert_eq(loom_sched_submit(s, i, &sp, &d, &id_out, NULL), 0);
                        live[n++] = id_out;
                        h = (h ^ (uint64_t)d.kind ^ ((uint64_t)d.group << 8) ^
                             ((uint64_t)d.rollout_nodes[0] << 32)) *
                            1099511628211ULL;
                }
                loom_action a;
                while (loom_sched_next_action(s, &a))
                        h = (h ^ (uint64_t)a.type ^ ((uint64_t)a.job << 8) ^
                             ((uint64_t)a.node << 40)) *
                            1099511628211ULL;
        }
        loom_sched_free(s);
        return h;
}

Test(sched, deterministic)
{
        for (int p = LOOM_PLACER_LOOM; p <= LOOM_PLACER_GREEDY; p++) {
                uint64_t a = run_workload(7, (loom_placer)p);
                uint64_t b = run_workload(7, (loom_placer)p);
                cr_assert_eq(a, b, "placer %d not deterministic", p);
        }
        cr_assert_neq(run_workload(7, LOOM_PLACER_RANDOM), run_workload(8, LOOM_PLACER_RANDOM));
}

Test(sched, loom_never_violates_an_slo_at_admission)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        uint64_t r = 42;
        for (int i = 0; i < 300; i++) {
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                char id[16];
                snprintf(id, sizeof id, "j%d", i);
                loom_job_spec sp =
                    spec(id, 50 + (double)((r >> 8) % 550), 25 + (double)((r >> 24) % 575),
                         1.0 + (double)((r >> 40) % 100) / 100.0);
                loom_decision d;
                loom_decision_init(&d, false);
                loom_job_id id_out;
                cr_assert_eq(loom_sched_submit(s, 0, &sp, &d, &id_out, NULL), 0);
        }
        loom_group_id gids[400];
        int ng = loom_sched_groups(s, gids, 400);
        for (int i = 0; i < ng; i++) {
                loom_group_info gi;
                loom_sched_group_info(s, gids[i], &gi);
                for (int m = 0; m < gi.n_members; m++) {
                        loom_job_info ji;
                        loom_sched_job_info(s, gi.members[m], &ji);
                        double bound = ji.spec.slo * (double)loom_job_t_solo(&ji.spec);
                        cr_assert_leq((double)gi.t_meta, bound + 1,
                                      "group %u: T_meta %lld > SLO bound of job %u", gi.id,
                                      (long long)gi.t_meta, ji.id);
                }
        }
        loom_sched_free(s);
}

/*
 * The dispatcher realises the meta-iteration admission simulated: run every phase at its
 * worst case through the facade with a small event loop, and each member's steady iteration
 * time equals its group's T_meta. Covers multi-node rollouts, sync phases and the example of a
 * fast member on a private rollout node that must not take a slower member's training turn.
 */
typedef struct ev {
        loom_us at;
        loom_job_id job;
        loom_phase phase;
        uint64_t seq;
} ev;

/* A job submitted mid-run, when the clock first passes `at`. */
typedef struct joiner {
        loom_us at;
        loom_job_spec spec;
        bool done;
} joiner;

static void run_worst_case_join(loom_sched *s, int iterations, loom_us *last_train,
                                loom_us *period_of, int max_jobs, joiner *jn);

static void run_worst_case(loom_sched *s, int iterations, loom_us *last_train, loom_us *period_of,
                           int max_jobs)
{
        run_worst_case_join(s, iterations, last_train, period_of, max_jobs, NULL);
}

static void run_worst_case_join(loom_sched *s, int iterations, loom_us *last_train,
                                loom_us *period_of, int max_jobs, joiner *jn)
{
        ev evs[256];
        int n = 0;
        uint64_t seq = 0;
        loom_us now = 0;
        int64_t trains[256] = {0};
        loom_us hist[256][64];
        for (;;) {
                loom_action a;
                while (loom_sched_next_action(s, &a)) {
                        if (a.type != LOOM_ACT_START_PHASE)
                                continue;
                        loom_job_info ji;
                        cr_assert_eq(loom_sched_job_info(s, a.job, &ji), 0);
                        loom_us d = a.phase == LOOM_PHASE_ROLLOUT ? ji.spec.t_roll
                                    : a.phase == LOOM_PHASE_TRAIN ? ji.t_train_in_group
                                                                  : ji.spec.t_sync;
                        evs[n++] = (ev){now + d, a.job, a.phase, seq++};
                }
                if (!n)
                        break;
                int b = 0;
                for (int i = 1; i < n; i++)
                        if (evs[i].at < evs[b].at ||
                            (evs[i].at == evs[b].at && evs[i].seq < evs[b].seq))
                                b = i;
                ev e = evs[b];
                evs[b] = evs[--n];
                now = e.at;
                if (jn && !jn->done && now >= jn->at) {
                        loom_decision d;
                        loom_decision_init(&d, false);
                        loom_job_id id;
                        cr_assert_eq(loom_sched_submit(s, now, &jn->spec, &d, &id, NULL), 0);
                        jn->done = true;
                }
                if (e.phase == LOOM_PHASE_TRAIN && (int)e.job < max_jobs) {
                        int64_t k = trains[e.job]++;
                        if (k < 64)
                                hist[e.job][k] = now;
                        if (k + 1 >= iterations) {
                                cr_assert_eq(loom_sched_job_exit(s, now, e.job, LOOM_EXIT_FINISHED),
                                             0);
                                continue;
                        }
                }
                cr_assert_eq(loom_sched_phase_done(s, now, e.job, e.phase), 0);
        }
        for (int j = 1; j < max_jobs; j++)
                if (trains[j] >= iterations) {
                        last_train[j] = hist[j][iterations - 1];
                        /* steady state: the last 10 iterations before anyone left */
                        period_of[j] = (hist[j][iterations - 2] - hist[j][iterations - 12]) / 10;
                }
}

Test(sched, dispatch_realises_the_admitted_meta_iteration)
{
        /* the fast member: A = 190 + 40 s (SLO 1.0), B = 100 + 36 s on its own rollout node */
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_spec a = spec("A", 190, 40, 1.0), b = spec("B", 100, 36, 2.5);
        a.mem_rollout = 1500 * LOOM_GB;
        b.mem_rollout = 600 * LOOM_GB;
        submit(s, a, &d);
        submit(s, b, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_ROLLOUT_SCALE);
        cr_assert_eq(d.t_meta, loom_us_from_s(230));
        loom_us last[8] = {0}, per[8] = {0};
        run_worst_case(s, 30, last, per, 8);
        cr_assert_eq(per[1], loom_us_from_s(230), "A runs every %lld us", (long long)per[1]);
        cr_assert_eq(per[2], loom_us_from_s(230), "B keeps A's pace: %lld", (long long)per[2]);
        loom_sched_free(s);

        /* random groups, some with two-node rollouts and sync phases */
        uint64_t r = 99;
        for (int trial = 0; trial < 40; trial++) {
                s = loom_sched_new(&cl, &po, NULL);
                loom_us tmeta[32] = {0};
                loom_group_id grp[32];
                int nj = 2 + (int)(r % 6);
                for (int i = 1; i <= nj; i++) {
                        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                        char id[16];
                        snprintf(id, sizeof id, "j%d", i);
                        loom_job_spec sp = spec(id, 20 + (double)((r >> 10) % 300),
                                                20 + (double)((r >> 30) % 300), 3.0);
                        sp.mem_rollout = 100 * LOOM_GB;
                        if ((r >> 50) % 3 == 0)
                                sp.rollout_gpus = 16;
                        if ((r >> 55) % 3 == 0)
                                sp.t_sync = loom_us_from_s((double)((r >> 40) % 30));
                        loom_job_id id_out = submit(s, sp, &d);
                        grp[id_out] = d.group;
                }
                for (int i = 1; i <= nj; i++) {
                        loom_group_info gi;
                        cr_assert_eq(loom_sched_group_info(s, grp[i], &gi), 0);
                        tmeta[i] = gi.t_meta;
                }
                loom_us last2[32] = {0}, per2[32] = {0};
                run_worst_case(s, 40, last2, per2, 32);
                for (int i = 1; i <= nj; i++)
                        cr_assert_eq(
                            per2[i], tmeta[i],
                            "trial %d job %d: dispatched period %lld, admitted T_meta %lld", trial,
                            i, (long long)per2[i], (long long)tmeta[i]);
                loom_sched_free(s);
        }
}

/* A member joining in the middle of a round does not change the order the others run in: after
 * the join every member settles at the group's new admitted T_meta. (Without pools that grow: a
 * departure could shrink a grown pool, slowing the others within their SLOs; test_core_pool.c
 * checks the periods of grown groups.) */
Test(sched, a_member_joining_mid_round_keeps_the_admitted_period)
{
        po.pool_grow = false;
        uint64_t r = 7;
        int checked = 0;
        for (int trial = 0; trial < 40; trial++) {
                loom_sched *s = loom_sched_new(&cl, &po, NULL);
                loom_decision d;
                loom_decision_init(&d, false);
                int nj = 2 + (int)(r % 3);
                loom_group_id grp[8];
                for (int i = 1; i <= nj; i++) {
                        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                        char id[16];
                        snprintf(id, sizeof id, "j%d", i);
                        loom_job_spec sp = spec(id, 20 + (double)((r >> 10) % 200),
                                                20 + (double)((r >> 30) % 200), 4.0);
                        sp.mem_rollout = 100 * LOOM_GB;
                        submit(s, sp, &d);
                        grp[i] = d.group;
                }
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                joiner jn = {.at = loom_us_from_s(1000 + (double)((r >> 20) % 997))};
                jn.spec = spec("late", 20 + (double)((r >> 10) % 200),
                               20 + (double)((r >> 30) % 200), 4.0);
                jn.spec.mem_rollout = 100 * LOOM_GB;
                loom_decision probe;
                loom_decision_init(&probe, false);
                cr_assert_eq(loom_sched_decide(s, &jn.spec, &probe, NULL), 0);
                loom_us last[16] = {0}, per[16] = {0};
                run_worst_case_join(s, 60, last, per, 16, &jn);
                cr_assert(jn.done);
                int joined = 0;
                for (int i = 1; i <= nj + 1; i++) {
                        if (probe.kind == LOOM_DECISION_NEW_GROUP ||
                            (i <= nj && grp[i] != probe.group))
                                continue;
                        joined++;
                        /* at most: members that finish first leave the group faster */
                        cr_assert_leq(per[i], probe.t_meta,
                                      "trial %d job %d: %lld after the join, admitted %lld", trial,
                                      i, (long long)per[i], (long long)probe.t_meta);
                }
                checked += joined > 1;
                loom_sched_free(s);
        }
        cr_assert_geq(checked, 10, "only %d trials joined an existing group", checked);
}

/* A rollout reported past its threshold while nobody waited migrates by itself the moment a
 * rollout comes to wait on its node: the driver reports progress once. */
Test(sched, a_tail_bound_rollout_migrates_when_a_waiter_arrives)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, spec("A", 100, 100, 2.0), &d);
        drain(s);
        cr_assert_eq(loom_sched_progress(s, 10, a, LOOM_PHASE_ROLLOUT, 90, 100), 0,
                     "nobody waits: no migration yet");
        loom_action x;
        cr_assert_not(loom_sched_next_action(s, &x));
        loom_job_id b = submit(s, spec("B", 100, 100, 2.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_MIGRATE_TAIL);
        cr_assert_eq(x.job, a);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_START_PHASE);
        cr_assert_eq(x.job, b);
        cr_assert_eq(x.gpus, 7);
        loom_sched_free(s);
}

/* A node holds one tail. A's tail runs on the node when B, started on the other 7 GPUs, passes
 * its own threshold with C waiting: B keeps its GPUs until A's tail ends (else the node would
 * run two tails and C's rollout, 9 GPUs of 8), then migrates and C starts. */
Test(sched, a_node_holds_one_tail_at_a_time)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, spec("A", 100, 300, 3.0), &d);
        drain(s);
        cr_assert_eq(loom_sched_progress(s, 10, a, LOOM_PHASE_ROLLOUT, 90, 100), 0);
        loom_job_id b = submit(s, spec("B", 50, 50, 8.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK);
        loom_action x = next(s);
        cr_assert(x.type == LOOM_ACT_MIGRATE_TAIL && x.job == a);
        x = next(s);
        cr_assert(x.type == LOOM_ACT_START_PHASE && x.job == b && x.gpus == 7);
        cr_assert_eq(loom_sched_phase_started(s, 11, b, LOOM_PHASE_ROLLOUT), 0);
        cr_assert_eq(loom_sched_progress(s, 20, b, LOOM_PHASE_ROLLOUT, 90, 100), 0);
        loom_job_id c = submit(s, spec("C", 50, 20, 8.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK, "%s", d.reason);
        cr_assert_eq(d.rollout_nodes[0], 0, "C shares the node");
        loom_action y;
        while (loom_sched_next_action(s, &y))
                cr_assert(y.type != LOOM_ACT_MIGRATE_TAIL && y.type != LOOM_ACT_START_PHASE,
                          "%s of job %u while A's tail holds the node",
                          loom_action_type_name(y.type), y.job);
        /* A's tail ends: its GPU goes back to B, then B's tail moves aside for C */
        cr_assert_eq(loom_sched_phase_done(s, 30, a, LOOM_PHASE_ROLLOUT), 0);
        bool migrated = false, started = false;
        while (loom_sched_next_action(s, &y)) {
                migrated |= y.type == LOOM_ACT_MIGRATE_TAIL && y.job == b;
                started |= y.type == LOOM_ACT_START_PHASE && y.job == c && y.gpus == 7;
        }
        cr_assert(migrated && started, "B migrates and C starts once A's tail is gone");
        loom_decision_free(&d);
        loom_sched_free(s);
}

/*
 * Equal marginal cost is broken by lifetime. A (1,000 iterations) and B (20) each hold a group
 * of their own (their training working sets cannot share a node), and either group takes E at
 * +$0/h: E packs onto the rollout node beside the member, T_meta stays 200 s. A job that would
 * outlive B by far joins A's group, whose nodes stay paid for anyway; a short job that ends
 * inside both joins B's group, the one that ends soonest, and leaves A's bubbles for later.
 * (B at SLO 1.0 has no slack for the round a join may add: with 10 iterations or fewer left,
 * policy.join_wait would keep E out of its group, test_core_join.c.)
 */
static loom_sched *two_lifetimes(loom_decision *d)
{
        po.pool_grow = false; /* on two training nodes their working sets would fit */
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = spec("A", 100, 100, 1.0), b = spec("B", 100, 100, 1.0);
        a.mem_train = b.mem_train = cl.host_mem_bytes - 100 * LOOM_GB;
        a.iterations = 1000;
        b.iterations = 20;
        submit(s, a, d);
        cr_assert_eq(d->group, 0);
        submit(s, b, d);
        cr_assert_eq(d->kind, LOOM_DECISION_NEW_GROUP, "A and B cannot share training nodes");
        cr_assert_eq(d->group, 1);
        return s;
}

Test(sched, equal_cost_ties_go_to_the_group_the_job_outlives_least)
{
        loom_decision d;
        loom_decision_init(&d, true);
        for (int k = 0; k < 2; k++) {
                loom_sched *s = two_lifetimes(&d);
                loom_job_spec e = spec("E", 50, 40, 3.0);
                e.mem_train = 50 * LOOM_GB;
                e.iterations = k == 0 ? 500 : 5;
                submit(s, e, &d);
                cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK);
                cr_assert_float_eq(d.marginal_cost_per_hour, 0.0, 1e-9);
                cr_assert_eq(d.t_meta, loom_us_from_s(200));
                loom_group_id other = k == 0 ? 1 : 0;
                const loom_candidate *o = find_cand(&d, other, LOOM_DECISION_DIRECT_PACK, other);
                cr_assert(o && o->reject == LOOM_REJECT_COSTLIER && o->marginal_cost_per_hour == 0,
                          "the other group is an equally cheap, feasible candidate");
                cr_assert_eq(d.group, k == 0 ? 0 : 1, "E with %lld iterations went to group %u",
                             (long long)e.iterations, (unsigned)d.group);
                loom_sched_free(s);
        }
        loom_decision_free(&d);
}

/*
 * Jobs that never end (iterations 0) tie on both lifetime keys, so the next key decides: the
 * group the job packs tightest (highest T_load / T_meta), not the one with the most SLO slack.
 * A (100 s + 100 s, SLO 1.5) and B (100 s + 20 s, SLO 1.3) hold a group each; E (50 s + 40 s)
 * fits either at +$0/h. Beside A it runs in A's bubble (T_meta 200 s, utilisation 0.75, 100 s
 * of slack); beside B it saturates the group (utilisation 1, little slack). Spreading such jobs
 * by slack keeps many groups open, and every later decision scans them.
 */
Test(sched, unbounded_jobs_tie_on_lifetime_and_pack_tightest)
{
        loom_decision d;
        loom_decision_init(&d, true);
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = spec("A", 100, 100, 1.5), b = spec("B", 100, 20, 1.3);
        a.mem_train = b.mem_train = cl.host_mem_bytes - 100 * LOOM_GB;
        submit(s, a, &d);
        submit(s, b, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_NEW_GROUP, "A and B cannot share training nodes");
        loom_job_spec e = spec("E", 50, 40, 3.0);
        e.mem_train = 50 * LOOM_GB;
        submit(s, e, &d);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK);
        cr_assert_float_eq(d.marginal_cost_per_hour, 0.0, 1e-9);
        const loom_candidate *o = find_cand(&d, 0, LOOM_DECISION_DIRECT_PACK, 0);
        cr_assert(o && o->reject == LOOM_REJECT_COSTLIER && o->marginal_cost_per_hour == 0,
                  "A's group is an equally cheap, feasible candidate");
        cr_assert_eq(o->t_meta, loom_us_from_s(200));
        cr_assert_eq(d.group, 1, "E went to group %u (T_meta %.1f s, utilisation %.2f)",
                     (unsigned)d.group, loom_us_to_s(d.t_meta), d.utilisation);
        cr_assert_gt(d.utilisation, 0.75 + 1e-6);
        loom_sched_free(s);
        loom_decision_free(&d);
}

/*
 * A new member joins the round after the one in progress, so its first iteration may take two
 * meta-iterations: a job of n iterations joins only where (n + 1) T_meta <= n x its budget.
 * A (100 s + 100 s, SLO 1) and B (50 s + 50 s, SLO 2.5: budget 250 s) share the training
 * node at T_meta 200 s (A's own chain). B joins for four iterations or more (5 x 200 <=
 * 4 x 250) and when it is unbounded (it amortises the wait), not for one or three; the
 * rejection names the first iteration.
 */
Test(sched, a_short_job_joins_only_where_its_first_round_fits)
{
        po.pool_grow = false; /* grown to two nodes, the pool would take B at T_meta 150 s */
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, true);
        submit(s, spec("A", 100, 100, 1.0), &d);
        loom_decision_free(&d);
        const int64_t iters[] = {1, 3, 4, 1000, 0};
        const bool joins[] = {false, false, true, true, true};
        for (int i = 0; i < 5; i++) {
                loom_job_spec b = spec("B", 50, 50, 2.5);
                b.iterations = iters[i];
                loom_decision_init(&d, true);
                cr_assert_eq(loom_sched_decide(s, &b, &d, NULL), 0);
                cr_assert_eq(d.kind != LOOM_DECISION_NEW_GROUP, joins[i], "%lld iterations: %s",
                             (long long)iters[i], loom_decision_kind_name(d.kind));
                if (joins[i])
                        cr_assert_eq(d.t_meta, loom_us_from_s(200));
                bool named = false;
                for (int k = 0; k < d.n_candidates; k++)
                        named |= strstr(d.candidates[k].why, "first iteration") != NULL;
                cr_assert_eq(named, !joins[i], "%lld iterations", (long long)iters[i]);
                loom_decision_free(&d);
        }
        loom_sched_free(s);
}

/* loom_sched_resume: a phase that still runs under a grant the driver kept (a replica taking
 * over with the old leader's leases) starts again before anyone is dispatched, even out of
 * turn, and holds its nodes; the others wait behind it. Checked entries change nothing. */
Test(sched, resume_restarts_running_phases_before_the_turns)
{
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id a = submit(s, spec("A", 100, 100, 2.0), &d);
        loom_job_id b = submit(s, spec("B", 100, 100, 2.0), &d);
        cr_assert_eq(d.kind, LOOM_DECISION_DIRECT_PACK, "A and B share one rollout node");
        drain(s);

        /* the last entry is invalid: nothing moves (A keeps its rollout, nothing is emitted) */
        loom_resume bad[] = {{.job = a, .phase = LOOM_PHASE_TRAIN},
                             {.job = b, .phase = LOOM_PHASE_ROLLOUT, .call = 1}};
        cr_assert_eq(loom_sched_resume(s, 5, bad, 2), LOOM_EINVAL);
        loom_action x;
        cr_assert_not(loom_sched_next_action(s, &x));
        loom_job_info ji;
        loom_sched_job_info(s, a, &ji);
        cr_assert_eq(ji.state, LOOM_JOB_ROLLING);

        /* B's rollout runs under a kept grant though A's turn on the node comes first */
        loom_resume r[] = {{.job = a, .phase = LOOM_PHASE_ROLLOUT},
                           {.job = b, .phase = LOOM_PHASE_ROLLOUT, .running = true}};
        cr_assert_eq(loom_sched_resume(s, 10, r, 2), 1);
        x = next(s);
        cr_assert_eq(x.type, LOOM_ACT_START_PHASE);
        cr_assert_eq(x.job, b);
        cr_assert_eq(x.phase, LOOM_PHASE_ROLLOUT);
        cr_assert_not(loom_sched_next_action(s, &x), "A waits for the node B runs on");
        loom_sched_job_info(s, a, &ji);
        cr_assert_eq(ji.state, LOOM_JOB_WAIT_ROLL);

        /* the same without the grant kept: the turns decide, A first */
        r[1].running = false;
        cr_assert_eq(loom_sched_resume(s, 20, r, 2), 0);
        x = next(s);
        cr_assert_eq(x.job, a);
        cr_assert_eq(x.phase, LOOM_PHASE_ROLLOUT);
        cr_assert_not(loom_sched_next_action(s, &x));

        /* training: B's runs on; A, waiting for it too, does not get the pool */
        loom_resume t[] = {{.job = a, .phase = LOOM_PHASE_TRAIN},
                           {.job = b, .phase = LOOM_PHASE_TRAIN, .running = true}};
        cr_assert_eq(loom_sched_resume(s, 30, t, 2), 1);
        x = next(s);
        cr_assert_eq(x.job, b);
        cr_assert_eq(x.phase, LOOM_PHASE_TRAIN);
        cr_assert_not(loom_sched_next_action(s, &x));
        cr_assert_eq(loom_sched_phase_done(s, 40, b, LOOM_PHASE_TRAIN), 0);
        x = next(s);
        cr_assert_eq(x.job, a, "A trains once B's training is done");
        cr_assert_eq(x.phase, LOOM_PHASE_TRAIN);

        /* two running phases on one node: the first listed keeps it, the second waits */
        loom_resume two[] = {{.job = b, .phase = LOOM_PHASE_ROLLOUT, .running = true},
                             {.job = a, .phase = LOOM_PHASE_ROLLOUT, .running = true}};
        drain(s);
        cr_assert_eq(loom_sched_resume(s, 50, two, 2), 1);
        x = next(s);
        cr_assert_eq(x.job, b);
        cr_assert_not(loom_sched_next_action(s, &x));
        loom_decision_free(&d);
        loom_sched_free(s);
}
