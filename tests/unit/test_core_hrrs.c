/*
 * test_core_hrrs.c - HRRS scores (PlexRL Eq. 3-4), the 1.1x preemption margin, and the order
 * HRRS, FCFS and round robin give the same queue.
 */
#include <criterion/criterion.h>

#include "loom/timeline.h"

#define S(x) ((loom_us)(x)*LOOM_US_PER_S)

Test(hrrs, worked_scores)
{
        loom_hrrs_req r = {.job = 2, .arrival = 0, .exec = S(20), .setup = S(20)};
        cr_assert_float_eq(loom_hrrs_score(&r, S(20), false), 2.0, 1e-12);
        cr_assert_float_eq(loom_hrrs_score(&r, S(20), true), 1.5, 1e-12);
}

Test(hrrs, running_request_preempted_only_past_the_margin)
{
        loom_hrrs_req run = {.job = 1, .arrival = 0, .exec = S(100), .setup = S(38)};
        cr_assert_float_eq(loom_hrrs_score(&run, S(30), false), 1.30, 1e-12);
        /* W = 25, E = 10, setup 38: 1 + 25/48 = 1.52 > 1.1 x 1.30 = 1.43. */
        loom_hrrs_req q[] = {{.job = 2, .arrival = S(5), .exec = S(10), .setup = S(38), .seq = 1}};
        cr_assert_float_eq(loom_hrrs_score(&q[0], S(30), true), 1.0 + 25.0 / 48.0, 1e-12);
        cr_assert_eq(loom_hrrs_preempt(&run, q, 1, S(30), 1.1), 0);
        /* W = 5: 1 + 5/48 = 1.10, below the running 1.30. */
        q[0].arrival = S(25);
        cr_assert_float_eq(loom_hrrs_score(&q[0], S(30), true), 1.0 + 5.0 / 48.0, 1e-12);
        cr_assert_eq(loom_hrrs_preempt(&run, q, 1, S(30), 1.1), -1);
}

Test(hrrs, margin_stops_near_ties)
{
        loom_hrrs_req run = {.job = 1, .arrival = 0, .exec = S(100)};
        /* 1 + 40/100 = 1.40 against a challenger at 1 + 15/(10+20) = 1.50: above the running
         * score, but not by 10%: no preemption; without a margin it would preempt. */
        loom_hrrs_req q[] = {{.job = 2, .arrival = S(25), .exec = S(10), .setup = S(20)}};
        cr_assert_eq(loom_hrrs_preempt(&run, q, 1, S(40), 1.1), -1);
        cr_assert_eq(loom_hrrs_preempt(&run, q, 1, S(40), 1.0), 0);
        /* The running job's own queued call never preempts it. */
        q[0].job = 1;
        cr_assert_eq(loom_hrrs_preempt(&run, q, 1, S(40), 1.0), -1);
}

Test(hrrs, hrrs_batches_the_resident_job_fcfs_does_not)
{
        /* Job 2 arrived first; job 1 is resident and its next call came 1 s later. */
        loom_hrrs_req q[] = {
            {.job = 2, .arrival = S(10), .exec = S(20), .setup = S(20), .seq = 1},
            {.job = 1, .arrival = S(11), .exec = S(20), .setup = S(20), .seq = 2},
        };
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_HRRS, q, 2, S(20), 1, 0), 1);
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_FCFS, q, 2, S(20), 1, 0), 0);
        /* Once job 1's calls are done, job 2 is the only one left and goes next. */
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_HRRS, q, 1, S(300), 1, 0), 0);
}

Test(hrrs, short_waiting_work_overtakes_long_under_hrrs)
{
        loom_hrrs_req q[] = {
            {.job = 3, .arrival = 0, .exec = S(100), .setup = S(10), .seq = 1},
            {.job = 4, .arrival = S(30), .exec = S(5), .setup = S(10), .seq = 2},
        };
        /* now 60: job 3 1 + 60/110 = 1.55, job 4 1 + 30/15 = 3.0 */
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_HRRS, q, 2, S(60), 0, 0), 1);
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_FCFS, q, 2, S(60), 0, 0), 0);
}

Test(hrrs, round_robin_rotates_by_job)
{
        loom_hrrs_req q[] = {
            {.job = 1, .arrival = 0, .seq = 1},
            {.job = 3, .arrival = 5, .seq = 2},
            {.job = 2, .arrival = 9, .seq = 3},
        };
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_RR, q, 3, 10, 0, 1), 2); /* after 1: job 2 */
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_RR, q, 3, 10, 0, 2), 1); /* after 2: job 3 */
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_RR, q, 3, 10, 0, 3), 0); /* wraps to job 1 */
        cr_assert_eq(loom_hrrs_pick(LOOM_DISPATCH_RR, q, 0, 10, 0, 3), -1);
}

Test(hrrs, dispatch_names_round_trip)
{
        loom_dispatch d;
        for (int i = LOOM_DISPATCH_RR; i <= LOOM_DISPATCH_FCFS; i++) {
                cr_assert_eq(loom_dispatch_parse(loom_dispatch_name((loom_dispatch)i), &d), 0);
                cr_assert_eq((int)d, i);
        }
        cr_assert_eq(loom_dispatch_parse("sjf", &d), LOOM_EINVAL);
}
