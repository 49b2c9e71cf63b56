/*
 * test_core_slice.c - the cycle of members time-slicing one node set (loom_slice_period): a
 * member alone is its colocated iteration, members without heads save nothing, tails overlap
 * the next member's rollout at the GPUs they leave, and elastic trainings beside the last tail.
 */
#include <criterion/criterion.h>
#include <stdbool.h>

#include "loom/group.h"

#include "test_rng.h"

static loom_meta_job member(loom_us roll, loom_us head, loom_us train, loom_us sw)
{
        return (loom_meta_job){.t_roll = roll,
                               .t_train = train,
                               .t_sync = 7,
                               .n_nodes = 0,
                               .t_switch = sw,
                               .t_head = head};
}

Test(slice, one_member_is_its_colocated_iteration)
{
        loom_meta_job j = member(200000, 100000, 100000, 2000);
        /* two switches, the rollout and the training; the sync crosses no network */
        cr_assert_eq(loom_slice_period(&j, 1, 1, 8, 1, false), 304000);
        cr_assert_eq(loom_slice_period(&j, 1, 1, 8, 1, true), 304000);
        j.t_head = 0;
        cr_assert_eq(loom_slice_period(&j, 1, 2, 8, 1, true), 304000);
}

Test(slice, members_without_heads_only_take_turns)
{
        loom_meta_job j[2] = {member(200000, 0, 100000, 2000), member(150000, 0, 300000, 4000)};
        cr_assert_eq(loom_slice_period(j, 2, 1, 8, 1, false), 304000 + 458000);
        cr_assert_eq(loom_slice_period(j, 2, 1, 8, 1, true), 304000 + 458000);
}

Test(slice, a_tail_overlaps_the_next_rollout_at_the_gpus_it_leaves)
{
        loom_meta_job j[2] = {member(200000, 100000, 100000, 2000),
                              member(200000, 100000, 100000, 2000)};
        /* rollout 0: 2..202 ms, head at 102; rollout 1 switches from 102, runs on 7 of 8 GPUs
         * from 104 until the tail ends at 202 (85.75 ms of work), then at full speed: ends at
         * 316.25; trainings after it, each with its switch: 316.25 + 2 * 102 */
        cr_assert_eq(loom_slice_period(j, 2, 1, 8, 1, false), 520250);
        /* elastic: rollout 1's head at 216.25; training 0 from 218.25 on 7 GPUs until 316.25,
         * done at 330.5; training 1 at 332.5 .. 432.5 */
        cr_assert_eq(loom_slice_period(j, 2, 1, 8, 1, true), 432500);
        /* on two nodes the tail leaves 15 of 16 GPUs: rollout 1 is slowed less */
        loom_us two = loom_slice_period(j, 2, 2, 8, 1, false);
        cr_assert_lt(two, 520250);
        cr_assert_gt(two, 316000 - 6250);
}

Test(slice, bad_input_is_refused)
{
        loom_meta_job j = member(200000, 100000, 100000, 2000);
        cr_assert_eq(loom_slice_period(&j, 0, 1, 8, 1, false), -1);
        cr_assert_eq(loom_slice_period(&j, 1, 1, 8, 0, false), -1);
        cr_assert_eq(loom_slice_period(&j, 1, 1, 8, 8, false), -1);
        j.n_nodes = 2;
        cr_assert_eq(loom_slice_period(&j, 1, 1, 8, 1, false), -1);
        j.n_nodes = 1;
        j.t_head = 300000;
        cr_assert_eq(loom_slice_period(&j, 1, 1, 8, 1, false), -1);
}

/* On random members: never longer than taking turns, never shorter than any member alone or
 * than the GPU time the set must do, and elastic never longer than not. */
Test(slice, random_members_keep_the_bounds)
{
        rng_state = 0x51ce5eedULL;
        for (int rep = 0; rep < 5000; rep++) {
                int n = (int)uniform(1, 4), set = (int)uniform(1, 3), keep = (int)uniform(1, 7);
                loom_meta_job j[4];
                loom_us serial = 0, longest = 0;
                double gpu_time = 0;
                for (int i = 0; i < n; i++) {
                        loom_us roll = uniform(1000, 600000);
                        loom_us head = uniform(0, 1) ? uniform(1, roll) : 0;
                        j[i] = member(roll, head, uniform(1000, 600000), uniform(0, 4000));
                        j[i].n_nodes = (int)uniform(0, set);
                        loom_us alone = 2 * j[i].t_switch + roll + j[i].t_train;
                        serial += alone;
                        longest = alone > longest ? alone : longest;
                        int g = (j[i].n_nodes > 0 ? j[i].n_nodes : set) * 8;
                        /* a rollout's head uses its GPUs, its tail `keep` of them */
                        double h = head > 0 ? (double)head : (double)roll;
                        gpu_time +=
                            h * g + ((double)roll - h) * keep + (double)j[i].t_train * 8 * set;
                }
                loom_us plain = loom_slice_period(j, n, set, 8, keep, false);
                loom_us el = loom_slice_period(j, n, set, 8, keep, true);
                cr_assert_leq(plain, serial + 1, "rep %d", rep);
                cr_assert_leq(el, plain + 1, "rep %d", rep);
                cr_assert_geq(el + 1, longest, "rep %d", rep);
                cr_assert_geq((double)el + 1, gpu_time / (8.0 * set), "rep %d", rep);
        }
}
