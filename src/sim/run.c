/* run.c - loom_sim_run: validate the configuration, dispatch to the policy's driver, time it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_int.h"

static int check_cfg(const loom_sim_cfg *c, loom_err *e)
{
        int rc = loom_cluster_cfg_validate(&c->cluster, e);
        if (rc || (rc = loom_policy_cfg_validate(&c->policy, &c->cluster, e)))
                return rc;
        for (int i = 0; i < 4; i++)
                if (!(c->warm_s[i] >= 0 && c->warm_s[i] <= 3600) ||
                    !(c->cold_s[i] >= c->warm_s[i] && c->cold_s[i] <= 3600))
                        return loom_err_set(
                            e, LOOM_EINVAL, "switch",
                            "switch times must satisfy 0 <= warm <= cold <= 3600 s");
        /* Below the price ratio a training GPU would roll out more cheaply than a rollout GPU,
         * which would void the lower bound's argument (docs/lower-bound.md). */
        double ratio = c->cluster.gpu[LOOM_POOL_TRAIN].price_per_hour > 0
                           ? c->cluster.gpu[LOOM_POOL_ROLLOUT].price_per_hour /
                                 c->cluster.gpu[LOOM_POOL_TRAIN].price_per_hour
                           : 0;
        if (!(c->colocated_roll_factor >= ratio && c->colocated_roll_factor <= 100))
                return loom_err_set(e, LOOM_EINVAL, "colocated_roll_factor",
                                    "colocated_roll_factor must be in [%.4f, 100] (the rollout/"
                                    "training price ratio is the least)",
                                    ratio);
        for (int i = 0; i < 4; i++)
                if (!(c->restart_s[i] >= 0 && c->restart_s[i] <= 36000))
                        return loom_err_set(e, LOOM_EINVAL, "restart_s",
                                            "restart times must be in [0, 36000] s");
        if (c->max_restarts < 0 || c->max_restarts > 1000)
                return loom_err_set(e, LOOM_EINVAL, "max_restarts", "max_restarts must be 0..1000");
        if (!(c->drift_trigger == 0 || (c->drift_trigger >= 1 && c->drift_trigger <= 100)) ||
            !(c->drift_headroom >= 1 && c->drift_headroom <= 100))
                return loom_err_set(e, LOOM_EINVAL, "drift_trigger",
                                    "drift_trigger must be 0 (off) or in [1, 100], drift_headroom "
                                    "in [1, 100]");
        if (!(c->readmit_min_ratio >= 0 && c->readmit_min_ratio <= 1e6))
                return loom_err_set(e, LOOM_EINVAL, "readmit_min_ratio",
                                    "readmit_min_ratio must be in [0, 1e6]");
        if (!(c->regroup_period_h >= 0.01 && c->regroup_period_h <= 1000))
                return loom_err_set(e, LOOM_EINVAL, "regroup_period_h",
                                    "regroup_period_h must be in [0.01, 1000]");
        if (!(c->boot_s >= 0 && c->boot_s <= 3600))
                return loom_err_set(e, LOOM_EINVAL, "boot_s", "boot_s must be in [0, 3600] s");
        if (!(c->launch_s >= 0 && c->launch_s <= 3600))
                return loom_err_set(e, LOOM_EINVAL, "launch_s", "launch_s must be in [0, 3600] s");
        if (!(c->tail_slowdown >= 1 && c->tail_slowdown <= 100))
                return loom_err_set(e, LOOM_EINVAL, "tail_slowdown",
                                    "tail_slowdown must be in [1, 100]");
        return 0;
}

int loom_sim_run(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                 loom_sim_result *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        out->policy = p;
        out->ran = true;
        out->drift = w->drift;
        out->cluster = c->cluster;
        int rc = check_cfg(c, e);
        if (rc)
                return rc;
        if ((unsigned)p >= LOOM_SIM_NPOLICIES)
                return loom_err_set(e, LOOM_EINVAL, "policy", "unknown policy %d", (int)p);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        switch (p) {
        case LOOM_SIM_SOLO:
        case LOOM_SIM_COLOCATED:
        case LOOM_SIM_COLOCATED_SLO:
                rc = loom__sim_run_private(c, w, p, out, e);
                break;
        case LOOM_SIM_ORACLE:
                rc = loom__sim_run_oracle(c, w, out, e);
                break;
        case LOOM_SIM_LB:
                rc = loom__sim_run_lb(c, w, out, e);
                break;
        case LOOM_SIM_GAVEL:
                rc = loom__sim_run_gavel(c, w, out, e);
                break;
        default:
                rc = loom__sim_run_core(c, w, p, out, e);
                break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        out->wall_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (rc) {
                loom_sim_result_free(out);
                out->policy = p;
                out->cluster = c->cluster;
        }
        return rc;
}
