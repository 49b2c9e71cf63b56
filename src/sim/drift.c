/*
 * drift.c - workload drift templates (WEAVE §6.6, Figure 16) and failure instants.
 *
 * The paper derives its templates from production runs and shows them only as a figure; the
 * shape chosen here follows its description: response length (and with it rollout and
 * training time) rises over the first part of a job's training and then levels off. The
 * increasing x1.0 template multiplies a job's phase times at fraction x of its iterations by
 *
 *     f(x) = 1 + A_b * h(min(1, x / T_b)),   h(u) = 3u^2 - 2u^3 (a smooth ramp),
 *
 * with the growth A_b and the levelling point T_b per model size: 3B/7B +60% by 40% of the
 * run, 14B +50% by 50%, 32B +40% by 60% (larger models lengthen their responses more slowly).
 * The x0.5 / x1.5 templates scale A_b; the decreasing ones mirror the ramp in log space,
 * 1 / f(x), so a decreasing x1.0 job ends at 1/1.6 of its declared time. The multiplier is
 * applied to every drawn fraction of the job (rollout, tail threshold, training), so a job
 * drifting up outgrows the worst case it declared at submission.
 *
 * Settings: increasing samples {none, +x0.5, +x1.0, +x1.5}, decreasing {none, -x0.5, -x1.0,
 * -x1.5}, mixed all seven, uniformly per job, from a stream of its own so that the rest of the
 * workload is drawn exactly as without drift.
 */
#include <math.h>
#include <string.h>

#include "sim_int.h"

static const char *const drift_names[] = {"none", "increasing", "decreasing", "mixed"};

const char *loom_sim_drift_name(loom_sim_drift d)
{
        return (unsigned)d < 4 ? drift_names[d] : "?";
}

int loom_sim_drift_parse(const char *s, loom_sim_drift *out)
{
        int i = loom__sim_name_find(drift_names, 4, s);
        if (i < 0)
                return LOOM_EINVAL;
        *out = (loom_sim_drift)i;
        return 0;
}

double loom_sim_drift_factor(int dir, double scale, double model_b, double x)
{
        if (dir == 0 || scale <= 0)
                return 1.0;
        double amp = model_b <= 10 ? 0.6 : model_b <= 20 ? 0.5 : 0.4;
        double lev = model_b <= 10 ? 0.4 : model_b <= 20 ? 0.5 : 0.6;
        double u = x <= 0 ? 0 : x >= lev ? 1 : x / lev;
        double f = 1.0 + amp * scale * u * u * (3 - 2 * u);
        return dir > 0 ? f : 1.0 / f;
}

/* Pick job j's template for setting d from its own stream. */
static void pick_template(loom_sim_drift d, sim_rng *r, int *dir, double *scale)
{
        static const double scales[4] = {0, 0.5, 1.0, 1.5};
        *dir = 0;
        *scale = 0;
        if (d == LOOM_SIM_DRIFT_NONE)
                return;
        if (d == LOOM_SIM_DRIFT_MIXED) {
                int k = (int)(sim_rng_unit(r) * 7); /* 0 none, 1-3 up, 4-6 down */
                if (k == 0)
                        return;
                *dir = k <= 3 ? 1 : -1;
                *scale = scales[k <= 3 ? k : k - 3];
                return;
        }
        int k = (int)(sim_rng_unit(r) * 4);
        *dir = k ? (d == LOOM_SIM_DRIFT_INCREASING ? 1 : -1) : 0;
        *scale = scales[k];
}

void loom__sim_drift_apply(loom_sim_workload *w, loom_sim_drift d, double mtbf_h, uint64_t seed)
{
        w->drift = d;
        for (int j = 0; j < w->n; j++) {
                loom_sim_job *job = &w->jobs[j];
                sim_rng r = sim_rng_key(seed ^ UINT64_C(0xD41F7), (uint64_t)j + 1, 7);
                pick_template(d, &r, &job->drift_dir, &job->drift_scale);
                int64_t n = job->spec.iterations;
                for (int64_t i = 0; job->drift_dir && i < n; i++) {
                        float f = (float)loom_sim_drift_factor(job->drift_dir, job->drift_scale,
                                                               job->model_b, (double)i / (double)n);
                        job->roll[i] *= f;
                        job->tailq[i] *= f;
                        job->train[i] *= f;
                }
                job->n_fail = 0;
                if (mtbf_h > 0) {
                        sim_rng fr = sim_rng_key(seed ^ UINT64_C(0xFA11), (uint64_t)j + 1, 9);
                        double t = 0;
                        for (int k = 0; k < 4; k++) {
                                t += -log(1.0 - sim_rng_unit(&fr)) * mtbf_h;
                                job->fail_h[job->n_fail++] = t;
                        }
                }
        }
}
