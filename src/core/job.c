/* job.c - job specs: validation, phase names, WEAVE Table 2 working sets. */
#include <math.h>
#include <string.h>

#include "loom/job.h"

const char *loom_phase_name(loom_phase p)
{
        switch (p) {
        case LOOM_PHASE_ROLLOUT:
                return "rollout";
        case LOOM_PHASE_TRAIN:
                return "train";
        case LOOM_PHASE_SYNC:
                return "sync";
        }
        return "?";
}

int loom_phase_parse(const char *s, loom_phase *out)
{
        for (int p = LOOM_PHASE_ROLLOUT; p <= LOOM_PHASE_SYNC; p++)
                if (!strcmp(s, loom_phase_name((loom_phase)p))) {
                        *out = (loom_phase)p;
                        return 0;
                }
        return LOOM_EINVAL;
}

void loom_job_spec_init(loom_job_spec *s)
{
        memset(s, 0, sizeof *s);
        s->slo = 1.0;
        s->max_restarts = LOOM_MAX_RESTARTS_DEFAULT;
}

static int check_gpus(int gpus, const char *field, const loom_cluster_cfg *c, loom_err *e)
{
        if (gpus < 1)
                return loom_err_set(e, LOOM_EINVAL, field, "%s must be >= 1, got %d", field, gpus);
        if (gpus % c->gpus_per_node)
                return loom_err_set(e, LOOM_EINVAL, field,
                                    "%s must be a multiple of the node size (%d), got %d", field,
                                    c->gpus_per_node, gpus);
        if (gpus / c->gpus_per_node > LOOM_MAX_JOB_NODES)
                return loom_err_set(e, LOOM_EINVAL, field,
                                    "%s asks for %d nodes; at most %d per pool are supported",
                                    field, gpus / c->gpus_per_node, LOOM_MAX_JOB_NODES);
        return 0;
}

int loom__job_calls_validate(const loom_job_spec *s, loom_err *e); /* job_calls.c */

int loom_job_spec_validate(const loom_job_spec *s, const loom_cluster_cfg *c, loom_err *e)
{
        int rc;
        if ((rc = check_gpus(s->rollout_gpus, "rollout_gpus", c, e)) ||
            (rc = check_gpus(s->train_gpus, "train_gpus", c, e)))
                return rc;
        /* Upper bound keeps every sum of a group's phase times far from int64 overflow. */
        const loom_us max_t = INT64_C(1000000) * LOOM_US_PER_S;
        if (s->t_roll <= 0 || s->t_roll > max_t)
                return loom_err_set(e, LOOM_EINVAL, "t_roll_s",
                                    "t_roll_s must be > 0 and <= 1e6 seconds");
        if (s->t_train <= 0 || s->t_train > max_t)
                return loom_err_set(e, LOOM_EINVAL, "t_train_s",
                                    "t_train_s must be > 0 and <= 1e6 seconds");
        if (s->t_sync < 0 || s->t_sync > max_t)
                return loom_err_set(e, LOOM_EINVAL, "sync_s",
                                    "sync_s must be >= 0 and <= 1e6 seconds");
        if (!isfinite(s->slo) || s->slo < 1.0 || s->slo > 1000.0)
                return loom_err_set(e, LOOM_EINVAL, "slo",
                                    "slo must be a slowdown factor >= 1.0, got %g", s->slo);
        if (s->iterations < 0)
                return loom_err_set(e, LOOM_EINVAL, "iterations", "iterations must be >= 0");
        if (s->t_switch < 0 || s->t_switch > max_t)
                return loom_err_set(e, LOOM_EINVAL, "switch_s",
                                    "switch_s must be >= 0 and <= 1e6 seconds");
        if (s->t_cold < 0 || s->t_cold > max_t)
                return loom_err_set(e, LOOM_EINVAL, "cold_s",
                                    "cold_s must be >= 0 and <= 1e6 seconds");
        if (s->t_head < 0 || s->t_head > s->t_roll)
                return loom_err_set(e, LOOM_EINVAL, "head_s",
                                    "head_s must be >= 0 and <= t_roll_s");
        if (s->t_solo_ref < 0 || s->t_solo_ref > 4 * max_t)
                return loom_err_set(e, LOOM_EINVAL, "t_solo_ref",
                                    "t_solo_ref must be >= 0 and <= 4e6 seconds");
        return loom__job_calls_validate(s, e);
}

/* WEAVE Table 2 (GB per 8-GPU node); 3B is not in the table and is taken as half of 7B. */
static const double table2_b[] = {3, 7, 14, 32, 70};
static const double table2_roll[] = {137.85, 275.7, 445.4, 490.3, 391.2};
static const double table2_train[] = {120.0, 240.0, 456.1, 520.4, 458.7};

static uint64_t table2(const double *col, double b)
{
        int n = (int)(sizeof table2_b / sizeof table2_b[0]);
        double gb;
        if (b <= table2_b[0])
                gb = col[0];
        else if (b >= table2_b[n - 1])
                gb = col[n - 1];
        else {
                int i = 1;
                while (table2_b[i] < b)
                        i++;
                double f = (b - table2_b[i - 1]) / (table2_b[i] - table2_b[i - 1]);
                gb = col[i - 1] + f * (col[i] - col[i - 1]);
        }
        return (uint64_t)llround(gb * 1e9);
}

uint64_t loom_table2_mem_rollout(double model_b)
{
        return table2(table2_roll, model_b);
}

uint64_t loom_table2_mem_train(double model_b)
{
        return table2(table2_train, model_b);
}
