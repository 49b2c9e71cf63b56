/*
 * test_core_plex.c - PlexRL placement on the timeline: cold start and repacking, warm-start
 * phase-shift fitting, the duty-ratio bound, pack vs spread ranking, isolation.
 */
#include <criterion/criterion.h>

#include "loom/timeline.h"

#define S(x) ((loom_us)((x)*1e6))

/* A job with a 100 s period: rollout 70 s, then 30 s of training calls (10 + 15 + 5). */
static void job100(loom_plex_job *j, bool profiled)
{
        loom_us calls[] = {S(10), S(15), S(5)};
        loom_plex_job_from_calls(j, 1, S(70), calls, 3, 0, profiled);
}

static loom_plex *mk_alpha(int nodes, loom_plex_mode m, double duty, double alpha)
{
        loom_plex_cfg c;
        loom_plex_cfg_default(&c);
        c.slots = 1000;
        c.nodes = nodes;
        c.mode = m;
        c.duty_max = duty;
        c.fit.alpha = alpha;
        loom_err e;
        loom_plex *p = loom_plex_new(&c, &e);
        cr_assert_not_null(p, "%s", e.msg);
        return p;
}

static loom_plex *mk(int nodes, loom_plex_mode m, double duty)
{
        return mk_alpha(nodes, m, duty, 0.5);
}

Test(plex, job_from_calls_is_one_segment_after_the_rollout)
{
        loom_plex_job j;
        loom_us calls[] = {S(9.66), S(38.08), S(9.76)};
        loom_plex_job_from_calls(&j, 1, S(231.53), calls, 3, S(4), true);
        cr_assert_eq(j.n_seg, 1);
        cr_assert_eq(j.period, S(231.53) + S(9.66) + S(38.08) + S(9.76));
        cr_assert_eq(j.seg_at[0], S(227.53));
        cr_assert_eq(j.seg_len[0], S(4) + S(9.66) + S(38.08) + S(9.76));
}

Test(plex, warm_jobs_share_a_group_at_phase_offsets)
{
        loom_plex *p = mk(4, LOOM_PLEX_SPREAD, 1.0);
        loom_plex_job j;
        job100(&j, true);
        loom_plex_decision a, b, c;
        loom_err e;
        cr_assert_eq(loom_plex_place(p, 1, &j, &a, &e), 0);
        cr_assert(a.placed && a.new_group && !a.cold);
        cr_assert_eq(loom_plex_place(p, 2, &j, &b, &e), 0);
        cr_assert(b.placed && !b.new_group);
        cr_assert_eq(b.group, a.group);
        cr_assert_eq(b.shift, 30); /* job 1 holds 70..100 of each period: 100..130 is free */
        cr_assert_eq(b.groups_fitted, 1);
        /* Job 3 would need 130..160, a shift of 60 > alpha T = 50: it gets its own group. */
        cr_assert_eq(loom_plex_place(p, 3, &j, &c, &e), 0);
        cr_assert(c.placed && c.new_group);
        cr_assert_neq(c.group, a.group);
        cr_assert_eq(loom_timeline_check(loom_plex_timeline(p)), 0);
        cr_assert_eq(loom_plex_groups(p), 2);
        loom_plex_free(p);
}

Test(plex, duty_bound_refuses_colocation)
{
        /* Each job is busy 30% of the horizon. Two residents: foreign duty 30%; a third would
         * give each resident 60% foreign duty. */
        for (int bound = 0; bound < 2; bound++) {
                /* alpha = 1: the third job fits at shift 60 when the bound allows it. */
                loom_plex *p = mk_alpha(4, LOOM_PLEX_SPREAD, bound ? 0.5 : 1.0, 1.0);
                loom_plex_job j;
                job100(&j, true);
                loom_plex_decision o;
                loom_err e;
                cr_assert_eq(loom_plex_place(p, 1, &j, &o, &e), 0);
                loom_tl_group g0 = o.group;
                cr_assert_eq(loom_plex_place(p, 2, &j, &o, &e), 0);
                cr_assert_eq(o.group, g0);
                cr_assert_eq(loom_plex_place(p, 3, &j, &o, &e), 0);
                if (bound) {
                        cr_assert(o.new_group);
                        cr_assert_eq(o.groups_pruned, 1);
                        cr_assert_eq(o.groups_fitted, 0);
                } else {
                        cr_assert_eq(o.group, g0);
                        cr_assert_eq(o.shift, 60);
                }
                loom_plex_free(p);
        }
}

Test(plex, cold_start_profiles_alone_then_repacks)
{
        loom_plex *p = mk(2, LOOM_PLEX_SPREAD, 1.0);
        loom_plex_job j;
        job100(&j, false);
        loom_plex_decision a, b;
        loom_err e;
        cr_assert_eq(loom_plex_place(p, 1, &j, &a, &e), 0);
        cr_assert(a.cold && a.new_group);
        cr_assert_eq(loom_plex_place(p, 2, &j, &b, &e), 0);
        cr_assert(b.cold && b.new_group);
        cr_assert_neq(a.group, b.group);
        cr_assert_eq(loom_timeline_unassigned(loom_plex_timeline(p)), 0);
        /* A third cold job has no unassigned node left. */
        loom_plex_decision c;
        cr_assert_eq(loom_plex_place(p, 3, &j, &c, &e), 0);
        cr_assert(!c.placed);
        /* Job 1 profiled one cycle: it stays (job 2's group is not profiled... but fits). */
        loom_plex_decision r;
        cr_assert_eq(loom_plex_repack(p, 2, &r), 0);
        cr_assert(r.placed && !r.new_group);
        cr_assert_eq(r.group, a.group); /* moved into job 1's group */
        loom_tl_group g;
        int32_t off;
        cr_assert_eq(loom_plex_job_group(p, 2, &g, &off), 0);
        cr_assert_eq(g, a.group);
        cr_assert_eq(off, 30);
        cr_assert_eq(loom_timeline_unassigned(loom_plex_timeline(p)), 1); /* b's node is back */
        cr_assert_eq(loom_timeline_check(loom_plex_timeline(p)), 0);
        /* Now the third job fits the freed node. */
        cr_assert_eq(loom_plex_place(p, 3, &j, &c, &e), 0);
        cr_assert(c.placed);
        /* Job 1 repacks: the only other group is job 3's cold one, which fits it, so it moves
         * (and the group it shared with job 2 keeps job 2). */
        cr_assert_eq(loom_plex_repack(p, 1, &r), 0);
        cr_assert_eq(loom_timeline_check(loom_plex_timeline(p)), 0);
        cr_assert_eq(loom_plex_release(p, 1), 0);
        cr_assert_eq(loom_plex_release(p, 2), 0);
        cr_assert_eq(loom_plex_release(p, 3), 0);
        cr_assert_eq(loom_plex_release(p, 3), LOOM_ENOENT);
        cr_assert_eq(loom_timeline_unassigned(loom_plex_timeline(p)), 2);
        cr_assert_eq(loom_plex_groups(p), 0);
        loom_plex_free(p);
}

Test(plex, pack_prefers_the_busiest_group_spread_the_most_slack)
{
        for (int mode = LOOM_PLEX_SPREAD; mode <= LOOM_PLEX_PACK; mode++) {
                loom_plex *p = mk(4, (loom_plex_mode)mode, 1.0);
                loom_plex_job big, small;
                loom_us cb[] = {S(70)}, cs[] = {S(10)};
                loom_plex_job_from_calls(&big, 1, S(30), cb, 1, 0, true);   /* 30..100 */
                loom_plex_job_from_calls(&small, 1, S(90), cs, 1, 0, true); /* 90..100 */
                loom_plex_decision o;
                loom_err e;
                /* Group A: the big job; group B: a small one (isolated placement first). */
                cr_assert_eq(loom_plex_place(p, 1, &big, &o, &e), 0);
                loom_tl_group A = o.group;
                loom_plex_job iso = small;
                iso.profiled = false; /* cold: forces a group of its own */
                cr_assert_eq(loom_plex_place(p, 2, &iso, &o, &e), 0);
                loom_tl_group B = o.group;
                cr_assert_neq(A, B);
                /* A job busy 20..30 fits both at shift 0; in A it ends where the big job
                 * starts (slack 0), in B it is 20 s from anything (past the 10 s guard). */
                loom_plex_job nj;
                loom_us cn[] = {S(10)};
                loom_plex_job_from_calls(&nj, 1, S(20), cn, 1, 0, true); /* 20..30, T 30 */
                nj.period = S(100);
                cr_assert_eq(loom_plex_decide(p, &nj, &o, &e), 0);
                cr_assert(o.placed && !o.new_group);
                if (mode == LOOM_PLEX_PACK)
                        cr_assert_eq(o.group, A, "pack: the busier group");
                else
                        cr_assert_eq(o.group, B, "spread: the group with more slack");
                loom_plex_free(p);
        }
}

Test(plex, isolated_never_shares_and_decide_changes_nothing)
{
        loom_plex *p = mk(3, LOOM_PLEX_ISOLATED, 1.0);
        loom_plex_job j;
        job100(&j, true);
        loom_plex_decision o;
        loom_err e;
        for (uint32_t id = 1; id <= 3; id++) {
                cr_assert_eq(loom_plex_place(p, id, &j, &o, &e), 0);
                cr_assert(o.placed && o.new_group);
        }
        cr_assert_eq(loom_plex_decide(p, &j, &o, &e), 0);
        cr_assert(!o.placed);
        cr_assert_eq(loom_plex_groups(p), 3);
        j.nodes = 0;
        cr_assert_eq(loom_plex_decide(p, &j, &o, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "nodes");
        loom_plex_free(p);
}

Test(plex, bad_config_names_the_field)
{
        loom_plex_cfg c;
        loom_plex_cfg_default(&c);
        c.duty_max = 1.5;
        loom_err e;
        cr_assert_null(loom_plex_new(&c, &e));
        cr_assert_str_eq(e.field, "duty_max");
        loom_plex_cfg_default(&c);
        c.fit.alpha = -1;
        cr_assert_null(loom_plex_new(&c, &e));
        cr_assert_str_eq(e.field, "alpha");
}

static void ignore(void *ctx, loom_tl_group g, loom_plex_outcome o, int32_t shift, double cost,
                   int32_t slack)
{
        (void)g, (void)shift, (void)cost, (void)slack;
        int *n = ctx;
        n[o]++;
}

/* Property: the pruning tree finds the same group and shift as visiting every group, and every
 * group it skips is one the O(1) bounds reject. */
Test(plex, pruning_tree_decides_like_the_full_scan)
{
        uint64_t r = 0x243f6a8885a308d3ull;
        for (int mode = LOOM_PLEX_SPREAD; mode <= LOOM_PLEX_PACK; mode++) {
                loom_plex *p = mk_alpha(200, (loom_plex_mode)mode, 0.8, 0.5);
                bool live[400] = {false};
                int shared = 0, cross = 0;
                for (int step = 0; step < 1500; step++) {
                        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                        uint32_t id = 1 + (uint32_t)(r % 399);
                        if (live[id]) {
                                cr_assert_eq(loom_plex_release(p, id), 0);
                                live[id] = false;
                                continue;
                        }
                        loom_plex_job j;
                        /* a few recipes (commensurate periods) so that groups do fill up */
                        static const double roll[] = {70, 170, 40, 140};
                        static const double call[] = {30, 30, 20, 10};
                        int k = (int)((r >> 20) % 4);
                        loom_us c[] = {S(call[k])};
                        loom_plex_job_from_calls(&j, 1 + (int)((r >> 30) % 2), S(roll[k]), c, 1, 0,
                                                 true);
                        loom_plex_decision fast, slow;
                        int notes[8] = {0};
                        loom_err e;
                        cr_assert_eq(loom_plex_decide(p, &j, &fast, &e), 0);
                        cr_assert_eq(
                            loom_plex_decide_explain(p, &j, NULL, NULL, ignore, notes, &slow, &e),
                            0);
                        cr_assert_eq(fast.placed, slow.placed, "step %d", step);
                        cr_assert_eq(fast.new_group, slow.new_group, "step %d", step);
                        cr_assert_eq(fast.group, slow.group, "step %d", step);
                        cr_assert_eq(fast.shift, slow.shift, "step %d", step);
                        cr_assert_eq(fast.groups_seen, slow.groups_seen, "step %d", step);
                        /* the tree skips exactly the groups the bounds reject */
                        cr_assert_eq(fast.groups_fitted, slow.groups_fitted, "step %d", step);
                        shared += fast.placed && !fast.new_group;
                        loom_plex_decision o;
                        cr_assert_eq(loom_plex_place(p, id, &j, &o, &e), 0);
                        live[id] = o.placed;
                        cross +=
                            o.placed && !o.new_group &&
                            loom_timeline_group_nodes(loom_plex_timeline(p), o.group) > j.nodes;
                }
                cr_assert_eq(loom_timeline_check(loom_plex_timeline(p)), 0);
                cr_assert_gt(loom_plex_groups(p), 3);
                cr_assert_gt(shared, 100);
                cr_assert_gt(cross, 10, "1-node jobs on 2-node groups: %d", cross);
                loom_plex_free(p);
        }
}

Test(plex, segments_that_touch_after_rounding_are_merged)
{
        loom_plex *p = mk(2, LOOM_PLEX_SPREAD, 1.0);
        loom_plex_job j = {.nodes = 1, .period = S(100), .n_seg = 2, .profiled = true};
        /* 40.5..50.5 s and 10.2..40.5 s (out of order): slots 40..51 and 10..41 overlap */
        j.seg_at[0] = S(40.5), j.seg_len[0] = S(10);
        j.seg_at[1] = S(10.2), j.seg_len[1] = S(30.3);
        loom_plex_decision o;
        loom_err e;
        cr_assert_eq(loom_plex_place(p, 1, &j, &o, &e), 0, "%s", e.msg);
        const loom_timeline *t = loom_plex_timeline(p);
        cr_assert_eq(loom_timeline_group_busy(t, o.group), 41 * 10); /* 10..51, 10 periods */
        cr_assert_eq(loom_timeline_check(t), 0);
        loom_plex_free(p);
        /* The timeline itself refuses overlapping or unsorted segments. */
        loom_timeline *tl = loom_timeline_new(100, 1, 1, &e);
        loom_tl_group g;
        cr_assert_eq(loom_timeline_group_new(tl, 1, &g, &e), 0);
        loom_tl_seg bad[] = {{10, 20}, {25, 5}};
        loom_tl_footprint f = {bad, 2, 50, 0};
        cr_assert_eq(loom_timeline_commit(tl, g, 1, &f, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "segments");
        loom_timeline_free(tl);
}

Test(plex, a_smaller_job_joins_a_larger_group_holding_all_its_nodes)
{
        loom_plex *p = mk(4, LOOM_PLEX_SPREAD, 1.0);
        loom_plex_job two, one;
        job100(&two, true);
        two.nodes = 2;
        job100(&one, true);
        loom_plex_decision a, b;
        loom_err e;
        cr_assert_eq(loom_plex_place(p, 1, &two, &a, &e), 0);
        cr_assert(a.placed && a.new_group);
        cr_assert_eq(loom_plex_place(p, 2, &one, &b, &e), 0, "%s", e.msg);
        cr_assert(b.placed && !b.new_group, "%s", b.why);
        cr_assert_eq(b.group, a.group);
        cr_assert_eq(b.shift, 30); /* after the 2-node job's 30 s segment */
        cr_assert_eq(b.groups_seen, 1);
        const loom_timeline *t = loom_plex_timeline(p);
        cr_assert_eq(loom_timeline_unassigned(t), 2); /* no node bought for it */
        cr_assert_eq(loom_timeline_check(t), 0);
        /* A 3-node job never joins the 2-node group: a group of its own (2 nodes left: none). */
        loom_plex_job three;
        job100(&three, true);
        three.nodes = 3;
        loom_plex_decision c;
        cr_assert_eq(loom_plex_decide(p, &three, &c, &e), 0);
        cr_assert(c.new_group && !c.placed);
        cr_assert_eq(c.groups_seen, 0);
        cr_assert_eq(c.groups_fitted, 0);
        loom_plex_free(p);
}

Test(plex, between_equal_fits_the_group_of_the_jobs_own_size_wins)
{
        loom_plex *p = mk(4, LOOM_PLEX_SPREAD, 1.0);
        loom_plex_job two, one;
        job100(&two, false); /* cold: each gets a dedicated group */
        two.nodes = 2;
        job100(&one, false);
        loom_plex_decision a, b, c;
        loom_err e;
        cr_assert_eq(loom_plex_place(p, 1, &two, &a, &e), 0);
        cr_assert_eq(loom_plex_place(p, 2, &one, &b, &e), 0);
        cr_assert(a.new_group && b.new_group);
        one.profiled = true;
        cr_assert_eq(loom_plex_place(p, 3, &one, &c, &e), 0);
        cr_assert(c.placed && !c.new_group, "%s", c.why);
        cr_assert_eq(c.groups_seen, 2);
        cr_assert_eq(c.group, b.group, "%s", c.why); /* same cost: fewer idle nodes */
        cr_assert_eq(loom_timeline_check(loom_plex_timeline(p)), 0);
        loom_plex_free(p);
}
