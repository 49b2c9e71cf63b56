/* cluster.c - GPU types, defaults (WEAVE Table 1) and node prices. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loom/cluster.h"

const char *loom_pool_name(loom_pool p)
{
        return p == LOOM_POOL_TRAIN ? "train" : "rollout";
}

void loom_cluster_cfg_default(loom_cluster_cfg *c)
{
        memset(c, 0, sizeof *c);
        loom_gpu_type *r = &c->gpu[LOOM_POOL_ROLLOUT], *t = &c->gpu[LOOM_POOL_TRAIN];
        snprintf(r->name, sizeof r->name, "H20");
        r->price_per_hour = 1.85;
        r->hbm_bytes = 96 * LOOM_GB;
        r->tflops = 148.0;
        r->hbm_tbps = 4.0;
        snprintf(t->name, sizeof t->name, "H800");
        t->price_per_hour = 5.28;
        t->hbm_bytes = 80 * LOOM_GB;
        t->tflops = 989.5;
        t->hbm_tbps = 3.35;
        c->gpus_per_node = 8;
        c->host_mem_bytes = 2000 * LOOM_GB;
}

int loom_cluster_cfg_validate(const loom_cluster_cfg *c, loom_err *e)
{
        static const char *const gpu_field[2] = {"rollout_gpu", "train_gpu"};
        if (c->gpus_per_node < 1 || c->gpus_per_node > 64)
                return loom_err_set(e, LOOM_EINVAL, "gpus_per_node",
                                    "gpus_per_node must be 1..64, got %d", c->gpus_per_node);
        if (c->host_mem_bytes == 0)
                return loom_err_set(e, LOOM_EINVAL, "host_mem_gb", "host_mem_gb must be > 0");
        for (int p = 0; p < 2; p++) {
                const loom_gpu_type *g = &c->gpu[p];
                char f[64];
                if (!isfinite(g->price_per_hour) || g->price_per_hour < 0) {
                        snprintf(f, sizeof f, "%s.price_per_hour", gpu_field[p]);
                        return loom_err_set(e, LOOM_EINVAL, f, "%s must be a number >= 0", f);
                }
                if (!isfinite(g->tflops) || g->tflops < 0 || !isfinite(g->hbm_tbps) ||
                    g->hbm_tbps < 0) {
                        snprintf(f, sizeof f, "%s", gpu_field[p]);
                        return loom_err_set(e, LOOM_EINVAL, f,
                                            "%s: tflops and hbm_tbps must be numbers >= 0", f);
                }
        }
        return 0;
}

double loom_cluster_node_price(const loom_cluster_cfg *c, loom_pool p)
{
        return c->gpu[p].price_per_hour * c->gpus_per_node;
}
