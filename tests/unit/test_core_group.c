/*
 * test_core_group.c - group arithmetic and the meta-iteration simulation, including WEAVE
 * Theorem 1 as a property test over random unsaturated groups.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>

#include "loom/group.h"

#include "test_rng.h"

Test(group, single_job_period_is_its_solo_time)
{
        int nodes[] = {0};
        loom_meta_job j = {130, 120, 10, 1, nodes, 0, 0, 0};
        loom_us t;
        cr_assert_eq(loom_meta_period(&j, 1, 1, 0, &t, NULL), 0);
        cr_assert_eq(t, 260);
}

Test(group, two_rollout_heavy_jobs_on_one_node_are_node_bound)
{
        /* Figure 3's bad case: two rollout-heavy jobs on one rollout node. */
        int n0[] = {0};
        loom_meta_job j[2] = {{300, 100, 0, 1, n0, 0, 0, 0}, {300, 100, 0, 1, n0, 0, 0, 0}};
        loom_us t;
        cr_assert_eq(loom_meta_period(j, 2, 1, 0, &t, NULL), 0);
        cr_assert_eq(t, 600, "period %lld", (long long)t);
        cr_assert_eq(loom_meta_t_load(j, 2, 1), 600);
        cr_assert_eq(loom_meta_t_cycle(j, 2), 400);
}

Test(group, warm_switch_is_paid_when_a_node_changes_job)
{
        int n0[] = {0};
        loom_meta_job j[2] = {{100, 100, 0, 1, n0, 0, 0, 0}, {100, 100, 0, 1, n0, 0, 0, 0}};
        loom_us t0, t5;
        cr_assert_eq(loom_meta_period(j, 2, 1, 0, &t0, NULL), 0);
        cr_assert_eq(loom_meta_period(j, 2, 1, 5, &t5, NULL), 0);
        cr_assert_eq(t0, 200);
        /* each period switches the node twice and the training pool twice */
        cr_assert_eq(t5, 210, "got %lld", (long long)t5);
}

/* A member's own switch (t_switch) replaces the evaluation's warm_switch for the nodes that
 * change to it: declaring the evaluation's value changes nothing, and every member declaring
 * w is the evaluation at w. */
Test(group, a_member_s_own_switch_replaces_the_evaluation_s)
{
        int n0[] = {0};
        loom_meta_job j[2] = {{100, 100, 0, 1, n0, 0, 0, 0}, {100, 100, 0, 1, n0, 0, 0, 0}};
        loom_us t1, t5, t;
        cr_assert_eq(loom_meta_period(j, 2, 1, 1, &t1, NULL), 0);
        cr_assert_eq(loom_meta_period(j, 2, 1, 5, &t5, NULL), 0);
        cr_assert_lt(t1, t5);
        j[0].t_switch = j[1].t_switch = 5;
        cr_assert_eq(loom_meta_period(j, 2, 1, 0, &t, NULL), 0);
        cr_assert_eq(t, t5, "all declared 5 against warm_switch 5: %lld", (long long)t);
        j[0].t_switch = j[1].t_switch = 1;
        cr_assert_eq(loom_meta_period(j, 2, 1, 5, &t, NULL), 0);
        cr_assert_eq(t, t1, "all declared 1 under warm_switch 5: %lld", (long long)t);
        j[1].t_switch = 0; /* job 1 falls back to the evaluation's 5 s */
        cr_assert_eq(loom_meta_period(j, 2, 1, 5, &t, NULL), 0);
        cr_assert(t > t1 && t < t5, "one of each: %lld", (long long)t);
        j[1].t_switch = -1;
        cr_assert_eq(loom_meta_period(j, 2, 1, 5, &t, NULL), LOOM_EINVAL);
}

/* Two almost equally loaded resources: the simulation's transient outlasts its iteration limit
 * and the period comes from the max-plus eigenvalue. Both pools are saturated; the training
 * pool (669.625 s of work) is the bottleneck. */
Test(group, near_tie_saturated_group_uses_the_eigenvalue)
{
        int n0[] = {0};
        loom_meta_job j[4] = {{279558000, 223820000, 0, 1, n0, 0, 0, 0},
                              {212700000, 259375000, 0, 1, n0, 0, 0, 0},
                              {87664000, 86782000, 0, 1, n0, 0, 0, 0},
                              {89675000, 99648000, 0, 1, n0, 0, 0, 0}};
        loom_us t;
        cr_assert_eq(loom_meta_period(j, 4, 1, 0, &t, NULL), 0);
        cr_assert_eq(t, 669625000, "period %lld", (long long)t);
        cr_assert_eq(loom_meta_period(j, 4, 1, 4000000, &t, NULL), 0);
        cr_assert_eq(t, 669625000 + 4 * 4000000, "period %lld", (long long)t);
}

Test(group, bad_arguments_are_rejected)
{
        int bad[] = {3};
        loom_meta_job j = {1, 1, 0, 1, bad, 0, 0, 0};
        loom_us t;
        cr_assert_eq(loom_meta_period(&j, 1, 2, 0, &t, NULL), LOOM_EINVAL);
        cr_assert_eq(loom_meta_period(&j, 0, 2, 0, &t, NULL), LOOM_EINVAL);
}

Test(group, data_parallel_scaling)
{
        cr_assert_eq(loom_group_train_time(100, 8, 16, 1.0), 50);
        cr_assert_eq(loom_group_train_time(100, 16, 8, 1.0), 200);
        cr_assert_eq(loom_group_train_time(100, 8, 8, 0.5), 100);
        /* half efficiency: speed-up 1 + (2 - 1) * 0.5 = 1.5 */
        cr_assert_eq(loom_group_train_time(150, 8, 16, 0.5), 100);
        cr_assert_eq(loom_group_train_mem(400, 8, 16), 200);
        cr_assert_eq(loom_group_train_mem(400, 16, 8), 800);
}

/* A random group: n jobs over R rollout nodes, each pinned to 1..2 distinct nodes. */
typedef struct rgroup {
        int n, R;
        int nodes[8][2];
        loom_meta_job j[8];
} rgroup;

/* coupled: allow multi-node rollouts and sync phases (outside Theorem 1's hypotheses). */
static void random_group_k(rgroup *g, bool coupled)
{
        g->n = (int)uniform(1, 5);
        g->R = (int)uniform(1, 4);
        for (int i = 0; i < g->n; i++) {
                int k = coupled && g->R > 1 ? (int)uniform(1, 2) : 1;
                g->nodes[i][0] = (int)uniform(0, g->R - 1);
                if (k == 2) {
                        g->nodes[i][1] = (g->nodes[i][0] + (int)uniform(1, g->R - 1)) % g->R;
                        if (g->nodes[i][1] < g->nodes[i][0]) {
                                int t = g->nodes[i][0];
                                g->nodes[i][0] = g->nodes[i][1];
                                g->nodes[i][1] = t;
                        }
                }
                g->j[i] = (loom_meta_job){uniform(1, 600) * 1000,
                                          uniform(1, 600) * 1000,
                                          coupled && !uniform(0, 3) ? uniform(1, 60) * 1000 : 0,
                                          k,
                                          g->nodes[i],
                                          0,
                                          0,
                                          0};
        }
}

static void random_group(rgroup *g)
{
        random_group_k(g, false);
}

static bool nodes_all_used(const rgroup *g)
{
        for (int r = 0; r < g->R; r++) {
                bool used = false;
                for (int i = 0; i < g->n; i++)
                        for (int k = 0; k < g->j[i].n_nodes; k++)
                                used |= g->j[i].nodes[k] == r;
                if (!used)
                        return false;
        }
        return true;
}

Test(group, theorem1_unsaturated_groups_run_at_their_cycle)
{
        rng_state = 0x9e3779b97f4a7c15ULL;
        int checked = 0;
        for (int trial = 0; trial < 200000 && checked < 3000; trial++) {
                rgroup g;
                random_group(&g);
                if (!nodes_all_used(&g))
                        continue;
                loom_us cyc = loom_meta_t_cycle(g.j, g.n);
                loom_us load = loom_meta_t_load(g.j, g.n, g.R);
                if (load > cyc)
                        continue; /* the theorem covers unsaturated and full groups */
                loom_us t;
                cr_assert_eq(loom_meta_period(g.j, g.n, g.R, 0, &t, NULL), 0);
                cr_assert_eq(t, cyc, "trial %d: n=%d R=%d period %lld != T_cycle %lld", trial, g.n,
                             g.R, (long long)t, (long long)cyc);
                checked++;
        }
        cr_assert_geq(checked, 1000, "only %d unsaturated groups generated", checked);
}

/*
 * Reference model for the appendix's second claim: one rollout node and one training pool run
 * the members round robin, and member k runs its rollout and training a second time at the end
 * of each meta-iteration (its second rollout waits for its first training, as on-policy RL
 * requires). Both resources follow their fixed orders; whichever next phase has its dependency
 * met is placed. Returns the long-run period.
 */
static double repeated_period(const loom_meta_job *j, int n, int k)
{
        enum { ITERS = 200 };
        int m = n + 1; /* slots per meta-iteration; slot n is k's repetition */
        loom_us node = 0, pool = 0, last_train[9] = {0}, roll_end[9] = {0};
        loom_us first_half = 0, end = 0;
        for (int it = 0; it < ITERS; it++) {
                int ri = 0, ti = 0;
                while (ti < m) {
                        int jr = ri < n ? ri : k, jt = ti < n ? ti : k;
                        /* a slot's rollout may go once its job's previous training is placed */
                        bool roll_ready = ri < m && (ri < n ? true : ti > k);
                        if (roll_ready && ri <= ti + (ri < n ? m : 0)) {
                                loom_us st = node > last_train[jr] + j[jr].t_sync
                                                 ? node
                                                 : last_train[jr] + j[jr].t_sync;
                                node = st + j[jr].t_roll;
                                roll_end[ri] = node;
                                ri++;
                                continue;
                        }
                        loom_us st = pool > roll_end[ti] ? pool : roll_end[ti];
                        pool = st + j[jt].t_train;
                        last_train[jt] = pool;
                        ti++;
                }
                end = pool;
                if (it == ITERS / 2 - 1)
                        first_half = end;
        }
        return (double)(end - first_half) / (ITERS / 2);
}

Test(group, theorem1_repeating_a_phase_never_raises_utilisation)
{
        rng_state = 0x1234567ULL;
        int checked = 0;
        for (int trial = 0; trial < 200000 && checked < 2000; trial++) {
                rgroup g;
                random_group(&g);
                /* the appendix's setting: one rollout node, one training pool */
                g.R = 1;
                for (int i = 0; i < g.n; i++)
                        g.nodes[i][0] = 0;
                if (loom_meta_t_load(g.j, g.n, 1) > loom_meta_t_cycle(g.j, g.n))
                        continue;
                loom_us t;
                cr_assert_eq(loom_meta_period(g.j, g.n, 1, 0, &t, NULL), 0);
                int k = (int)uniform(0, g.n - 1);
                double t2 = repeated_period(g.j, g.n, k);
                double work = 0;
                for (int i = 0; i < g.n; i++)
                        work += (double)(g.j[i].t_roll + g.j[i].t_train);
                double u = work / (double)t;
                double u2 = (work + (double)(g.j[k].t_roll + g.j[k].t_train)) / t2;
                cr_assert_leq(u2, u + 1e-9,
                              "trial %d: repeating job %d raised utilisation %f -> %f", trial, k, u,
                              u2);
                checked++;
        }
        cr_assert_geq(checked, 1000);
}

/* Outside the theorem's hypotheses the simulation is still bounded below by both the cycle and
 * the load, and it does exceed the cycle in some unsaturated groups: a two-node rollout couples
 * its nodes' FIFOs. This is why the scheduler simulates such groups. */
Test(group, coupled_groups_are_simulated_not_assumed)
{
        rng_state = 0xabcdefULL;
        int above = 0;
        for (int trial = 0; trial < 20000; trial++) {
                rgroup g;
                random_group_k(&g, true);
                if (!nodes_all_used(&g))
                        continue;
                loom_us cyc = loom_meta_t_cycle(g.j, g.n), load = loom_meta_t_load(g.j, g.n, g.R);
                loom_us t;
                cr_assert_eq(loom_meta_period(g.j, g.n, g.R, 0, &t, NULL), 0);
                cr_assert_geq(t, cyc);
                cr_assert_geq(t, load);
                above += load < cyc && t > cyc;
        }
        cr_assert_gt(above, 0);

        int n01[] = {0, 1}, n1[] = {1}, n0[] = {0};
        loom_meta_job j[3] = {{231, 108, 0, 2, n01, 0, 0, 0},
                              {537, 195, 0, 1, n1, 0, 0, 0},
                              {407, 387, 0, 1, n0, 0, 0, 0}};
        loom_us t;
        cr_assert_eq(loom_meta_period(j, 3, 2, 0, &t, NULL), 0);
        cr_assert_eq(loom_meta_t_cycle(j, 3), 794);
        cr_assert_eq(loom_meta_t_load(j, 3, 2), 768);
        cr_assert_gt(t, 794, "unsaturated, yet the coupled round robin needs %lld", (long long)t);
}

/*
 * A rollout planned on its head frees its node at the head; its tail, kept on one GPU of the
 * node's eight, slows the next rollout there by the tail's share. A: rollout 800 (head 320,
 * tail 480, t_pen 480 / 8 = 60), training 10; B: rollout 100, training 10, on A's node. Held to
 * its end, A's rollout keeps B waiting 800: B's training ends at 910 and A's next rollout starts
 * after B's at 900, the node-bound period. With the head, B starts at 320 + 60 (all of A's tail
 * is still ahead) and ends at 480, inside A's tail: A's next rollout starts when its training
 * ends at 810, and B, ready at 820, waits for A's next head (1130) and tail share: the period is
 * A's own chain, 810. The load bound counts A at 320 + 60.
 */
Test(group, a_planned_head_frees_the_node_for_the_next_rollout)
{
        int n0[] = {0};
        loom_meta_job j[2] = {{800, 10, 0, 1, n0, 0, 0, 0}, {100, 10, 0, 1, n0, 0, 0, 0}};
        loom_us t, starts[2];
        cr_assert_eq(loom_meta_period(j, 2, 1, 0, &t, NULL), 0);
        cr_assert_eq(t, 900);
        cr_assert_eq(loom_meta_t_load(j, 2, 1), 900);
        j[0].t_head = 320;
        j[0].t_pen = 60;
        cr_assert_eq(loom_meta_period(j, 2, 1, 0, &t, starts), 0);
        cr_assert_eq(t, 810, "period %lld", (long long)t);
        cr_assert_eq(starts[1] - starts[0], 380, "B starts %lld after A",
                     (long long)(starts[1] - starts[0]));
        cr_assert_eq(loom_meta_t_load(j, 2, 1), 480);
        /* a head past the rollout is refused */
        j[0].t_head = 801;
        cr_assert_eq(loom_meta_period(j, 2, 1, 0, &t, NULL), LOOM_EINVAL);
}

/* On random groups, heads only ever shorten the period (a rollout starts no later than when
 * the one before it on its node ended), and the period stays at least each member's own
 * chain and each node's occupancy (head plus tail share). */
Test(group, heads_never_lengthen_the_period)
{
        rng_state = 0x5eedULL;
        int shorter = 0;
        for (int trial = 0; trial < 5000; trial++) {
                rgroup g;
                random_group_k(&g, trial % 2);
                if (!nodes_all_used(&g))
                        continue;
                loom_us before, after;
                cr_assert_eq(loom_meta_period(g.j, g.n, g.R, 0, &before, NULL), 0);
                for (int i = 0; i < g.n; i++)
                        if (uniform(0, 2)) {
                                g.j[i].t_head = uniform(1, g.j[i].t_roll);
                                g.j[i].t_pen = (g.j[i].t_roll - g.j[i].t_head + 7) / 8;
                        }
                cr_assert_eq(loom_meta_period(g.j, g.n, g.R, 0, &after, NULL), 0);
                cr_assert_leq(after, before, "trial %d: %lld > %lld", trial, (long long)after,
                              (long long)before);
                cr_assert_geq(after, loom_meta_t_cycle(g.j, g.n));
                cr_assert_geq(after, loom_meta_t_load(g.j, g.n, g.R));
                shorter += after < before;
        }
        cr_assert_gt(shorter, 0);
}
