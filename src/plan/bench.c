/*
 * bench.c - what the cost model costs: evaluations per second on one core over random plans
 * (`loom plan evalrate`, bench/plan.sh). The clock is the caller's.
 */
#include <math.h>
#include <stdlib.h>

#include "plan_int.h"

#define RATE_PLANS 1000

int loom_plan_evalrate(const loom_plan_cluster *c, const loom_plan_workflow *w, double seconds,
                       double (*now)(void *ctx), void *now_ctx, loom_plan_rate *out, loom_err *e)
{
        if (!now || !(seconds > 0))
                return loom_err_set(e, LOOM_EINVAL, "seconds", "needs a clock and seconds > 0");
        loom_plan *plans = malloc(sizeof *plans * RATE_PLANS);
        if (!plans)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        /* Plans that fit in memory: an overflowing plan is rejected before it is priced, which
         * would flatter the rate. */
        uint64_t rng = 1;
        long tries = 0;
        for (int i = 0; i < RATE_PLANS; tries++) {
                if (loom_plan_sample(c, w, &rng, &plans[i])) {
                        free(plans);
                        return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                }
                if (isfinite(loom_plan_cost_fast(c, w, &plans[i])) || tries > 1000000)
                        i++;
        }
        double t0 = now(now_ctx), el = 0, sink = 0;
        int64_t n = 0;
        do {
                for (int i = 0; i < RATE_PLANS; i++)
                        sink += loom_plan_cost_fast(c, w, &plans[i]);
                n += RATE_PLANS;
                el = now(now_ctx) - t0;
        } while (el < seconds);
        free(plans);
        out->evaluations = n;
        out->elapsed_s = el;
        out->mean_iteration_s = sink / n;
        return 0;
}
