/*
 * test_core_timeline.c - the cyclic timeline: Eq. 2 worked example, segment-tree range-min,
 * wrap splitting, atomic commit/release, and a property test that random commits and releases
 * never over-commit a slot.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "loom/timeline.h"

#include "test_rng.h"

static const loom_tl_seg eq2_seg[] = {{0, 10}, {30, 10}};

Test(timeline, eq2_feasible_shifts_are_exactly_5_to_8)
{
        loom_tl_win w[] = {{5, 18}, {35, 50}};
        for (int32_t d = 0; d <= 30; d++)
                cr_assert_eq(loom_tl_fits_at(w, 2, eq2_seg, 2, d), d >= 5 && d <= 8, "shift %d", d);
        loom_tl_fit_cfg c = {.alpha = 0.5, .w1 = 1.0, .w2 = 0.25};
        int32_t delta = -1;
        double cost = -1;
        cr_assert_eq(loom_tl_fit(&c, w, 2, eq2_seg, 2, 60, &delta, &cost), 0);
        cr_assert_eq(delta, 5);
        /* t_end(5) = max(60, 5 + 40) = 60: no completion delay, only the start shift. */
        cr_assert_float_eq(cost, 0.25 * 5.0 / 60.0, 1e-12);
}

Test(timeline, eq2_short_window_refuses_the_group)
{
        loom_tl_win w[] = {{5, 14}, {35, 50}};
        loom_tl_fit_cfg c;
        loom_tl_fit_cfg_default(&c);
        int32_t delta;
        double cost;
        for (int32_t d = 0; d <= 30; d++)
                cr_assert(!loom_tl_fits_at(w, 2, eq2_seg, 2, d));
        cr_assert_eq(loom_tl_fit(&c, w, 2, eq2_seg, 2, 60, &delta, &cost), LOOM_EREJECT);
}

Test(timeline, alpha_bounds_the_shift)
{
        loom_tl_win w[] = {{20, 40}};
        loom_tl_seg s[] = {{0, 10}};
        loom_tl_fit_cfg c = {.alpha = 0.25, .w1 = 1, .w2 = 0.25};
        int32_t delta;
        double cost;
        cr_assert_eq(loom_tl_fit(&c, w, 1, s, 1, 60, &delta, &cost), LOOM_EREJECT); /* <= 15 */
        c.alpha = 0.5;
        cr_assert_eq(loom_tl_fit(&c, w, 1, s, 1, 60, &delta, &cost), 0);
        cr_assert_eq(delta, 20);
}

Test(timeline, cost_charges_completion_delay_past_the_period)
{
        loom_tl_fit_cfg c = {.alpha = 0.5, .w1 = 1.0, .w2 = 0.25};
        loom_tl_seg s[] = {{0, 10}, {40, 15}}; /* ends at 55 of 60 */
        cr_assert_float_eq(loom_tl_cost(&c, s, 2, 60, 5), 0.25 * 5 / 60.0, 1e-12);
        cr_assert_float_eq(loom_tl_cost(&c, s, 2, 60, 10), 5 / 60.0 + 0.25 * 10 / 60.0, 1e-12);
}

Test(timeline, range_min_tracks_commits_across_the_wrap)
{
        loom_err e;
        loom_timeline *t = loom_timeline_new(100, LOOM_US_PER_S, 10, &e);
        cr_assert_not_null(t);
        loom_tl_group g;
        cr_assert_eq(loom_timeline_group_new(t, 4, &g, &e), 0);
        cr_assert_eq(loom_timeline_unassigned(t), 6);
        loom_tl_seg s[] = {{0, 20}}; /* at phase 90: wraps to 90..100 and 0..10 */
        loom_tl_footprint f = {s, 1, 100, 90};
        cr_assert_eq(loom_timeline_commit(t, g, 7, &f, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_timeline_min_free(t, 0, 10), 6);
        cr_assert_eq(loom_timeline_min_free(t, 10, 80), 10);
        cr_assert_eq(loom_timeline_min_free(t, 95, 10), 6);
        cr_assert_eq(loom_timeline_min_free(t, 85, 5), 10);
        loom_tl_win w[4];
        cr_assert_eq(loom_timeline_group_windows(t, g, w, 4), 1);
        cr_assert_eq(w[0].s, 10);
        cr_assert_eq(w[0].e, 90);
        cr_assert_eq(loom_timeline_group_busy(t, g), 20);
        cr_assert_eq(loom_timeline_check(t), 0);
        /* A second job that touches the busy span is refused and changes nothing. */
        loom_tl_seg s2[] = {{5, 10}};
        loom_tl_footprint f2 = {s2, 1, 100, 0};
        cr_assert_eq(loom_timeline_commit(t, g, 8, &f2, &e), LOOM_EREJECT);
        cr_assert_eq(loom_timeline_group_jobs(t, g), 1);
        cr_assert_eq(loom_timeline_check(t), 0);
        cr_assert_eq(loom_timeline_group_free(t, g), LOOM_ESTATE);
        cr_assert_eq(loom_timeline_release(t, 7), 0);
        cr_assert_eq(loom_timeline_min_free(t, 0, 100), 10);
        cr_assert_eq(loom_timeline_release(t, 7), LOOM_ENOENT);
        cr_assert_eq(loom_timeline_group_free(t, g), 0);
        cr_assert_eq(loom_timeline_unassigned(t), 10);
        cr_assert_eq(loom_timeline_check(t), 0);
        loom_timeline_free(t);
}

Test(timeline, repetitions_fill_the_horizon_and_fit_shifts_past_residents)
{
        loom_err e;
        loom_timeline *t = loom_timeline_new(600, LOOM_US_PER_S, 2, &e);
        loom_tl_group g;
        cr_assert_eq(loom_timeline_group_new(t, 2, &g, &e), 0);
        loom_tl_seg a[] = {{0, 20}, {30, 10}};
        loom_tl_footprint fa = {a, 2, 60, 0};
        cr_assert_eq(loom_timeline_commit(t, g, 1, &fa, &e), 0);
        cr_assert_eq(loom_timeline_group_busy(t, g), 300); /* 10 periods x 30 slots */
        cr_assert_eq(loom_timeline_min_free(t, 0, 600), 0);
        /* Same shape: the least shift that avoids 0..20 and 30..40 in every period is 20... */
        loom_tl_fit_cfg c;
        loom_tl_fit_cfg_default(&c);
        int32_t d, slack;
        double cost;
        loom_tl_seg b[] = {{0, 10}};
        loom_tl_footprint fb = {b, 1, 60, 0};
        cr_assert_eq(loom_timeline_fit(t, g, &c, &fb, &d, &cost, &slack), 0);
        cr_assert_eq(d, 20);
        cr_assert_eq(slack, 0); /* it ends where the resident's second segment starts */
        fb.offset = d;
        cr_assert_eq(loom_timeline_commit(t, g, 2, &fb, &e), 0);
        cr_assert_eq(loom_timeline_check(t), 0);
        /* ...and now only 40..60 is left: a 25-slot segment cannot fit anywhere. */
        loom_tl_seg big[] = {{0, 25}};
        loom_tl_footprint fc = {big, 1, 60, 0};
        cr_assert_eq(loom_timeline_fit(t, g, &c, &fc, &d, &cost, NULL), LOOM_EREJECT);
        loom_timeline_free(t);
}

Test(timeline, group_creation_is_bounded_by_unassigned_nodes)
{
        loom_err e;
        loom_timeline *t = loom_timeline_new(10, 1, 3, &e);
        loom_tl_group g;
        cr_assert_eq(loom_timeline_group_new(t, 4, &g, &e), LOOM_EREJECT);
        cr_assert_str_eq(e.field, "nodes");
        cr_assert_eq(loom_timeline_group_new(t, 3, &g, &e), 0);
        cr_assert_eq(loom_timeline_group_new(t, 1, &g, &e), LOOM_EREJECT);
        cr_assert_null(loom_timeline_new(0, 1, 3, &e));
        cr_assert_str_eq(e.field, "slots");
        loom_timeline_free(t);
}

Test(timeline, slots_map_time_modulo_the_horizon)
{
        loom_err e;
        loom_timeline *t = loom_timeline_new(LOOM_TL_DEFAULT_SLOTS, LOOM_US_PER_S, 1, &e);
        cr_assert_eq(loom_timeline_slot_of(t, 28800 * LOOM_US_PER_S + 5 * LOOM_US_PER_S), 5);
        cr_assert_eq(loom_timeline_span(t, 1), 1);
        cr_assert_eq(loom_timeline_span(t, 2 * LOOM_US_PER_S), 2);
        cr_assert_eq(loom_timeline_span(t, 2 * LOOM_US_PER_S + 1), 3);
        loom_timeline_free(t);
}

/* Property: random commits (fitted or forced at random phases) and releases keep every
 * invariant; a commit either applies fully or leaves the timeline byte-for-byte the same in
 * every observable (busy, jobs, free profile). */
Test(timeline, random_commits_never_over_commit)
{
        rng_state = 0x9e3779b97f4a7c15ull;
        loom_err e;
        const int32_t L = 720;
        loom_timeline *t = loom_timeline_new(L, LOOM_US_PER_S, 12, &e);
        loom_tl_group gs[4];
        for (int i = 0; i < 4; i++)
                cr_assert_eq(loom_timeline_group_new(t, 1 + i, &gs[i], &e), 0);
        bool live[200] = {false};
        loom_tl_fit_cfg c;
        loom_tl_fit_cfg_default(&c);
        int committed = 0, refused = 0;
        for (int step = 0; step < 3000; step++) {
                uint32_t id = (uint32_t)uniform(1, 199);
                if (live[id]) {
                        cr_assert_eq(loom_timeline_release(t, id), 0);
                        live[id] = false;
                } else {
                        loom_tl_seg s[3];
                        int32_t period = uniform(30, 240);
                        int ns = uniform(1, 3);
                        int32_t at = 0;
                        for (int k = 0; k < ns; k++) {
                                s[k].a = at + uniform(0, period / (4 * ns));
                                s[k].d = uniform(1, period / (4 * ns));
                                at = s[k].a + s[k].d;
                        }
                        loom_tl_footprint f = {s, ns, period, uniform(0, L - 1)};
                        loom_tl_group g = gs[uniform(0, 3)];
                        int32_t d;
                        double cost;
                        if (rnd() & 1) {
                                /* The jump search returns the least shift that fits, or none
                                 * in [0, alpha T]: check against trying every shift. */
                                int rc = loom_timeline_fit(t, g, &c, &f, &d, &cost, NULL);
                                int32_t base = f.offset, lim = rc ? period / 2 : d;
                                for (int32_t x = 0; x <= lim; x++) {
                                        f.offset = base + x;
                                        cr_assert_eq(loom_timeline_fits(t, g, &f), !rc && x == d,
                                                     "shift %d of %d (rc %d)", x, lim, rc);
                                }
                                f.offset = rc ? base : base + d;
                        }
                        int32_t busy = loom_timeline_group_busy(t, g);
                        int jobs = loom_timeline_group_jobs(t, g);
                        bool fits = loom_timeline_fits(t, g, &f);
                        int rc = loom_timeline_commit(t, g, id, &f, &e);
                        cr_assert_eq(rc == 0, fits, "commit %d vs fits %d", rc, fits);
                        if (rc == 0) {
                                live[id] = true;
                                committed++;
                        } else {
                                cr_assert_eq(rc, LOOM_EREJECT);
                                cr_assert_eq(loom_timeline_group_busy(t, g), busy);
                                cr_assert_eq(loom_timeline_group_jobs(t, g), jobs);
                                refused++;
                        }
                }
                if (step % 50 == 0)
                        cr_assert_eq(loom_timeline_check(t), 0, "step %d", step);
                cr_assert_geq(loom_timeline_min_free(t, 0, L), 0);
        }
        cr_assert_eq(loom_timeline_check(t), 0);
        cr_log_info("committed %d refused %d", committed, refused);
        cr_assert_gt(committed, 100);
        cr_assert_gt(refused, 100);
        loom_timeline_free(t);
}
