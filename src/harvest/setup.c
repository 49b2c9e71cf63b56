/*
 * setup.c - which serving GPUs an RL job borrows. Pure.
 *
 * ROSE lends a job the serving GPUs whose KV cache has been least used recently (they have the
 * most memory and compute slack to give), and a serving GPU hosts the rollout model of at most
 * one job, so two jobs never fight over one GPU's slack.
 */
#include <stdlib.h>

#include "loom/harvest.h"

int loom_harvest_setup(loom_harvest_gpu *gpus, size_t n, int32_t job, uint32_t n_rl,
                       uint32_t n_serving, uint32_t *picked, loom_err *e)
{
        if (job < 0)
                return loom_err_set(e, LOOM_EINVAL, "job", "must be >= 0, got %d", job);
        if (n_rl == 0)
                return loom_err_set(e, LOOM_EINVAL, "n_rl",
                                    "a job needs at least one dedicated "
                                    "rollout GPU");
        for (size_t i = 0; i < n; i++) {
                if (!(gpus[i].kv_use >= 0 && gpus[i].kv_use <= 1))
                        return loom_err_set(e, LOOM_EINVAL, "kv_use",
                                            "gpu %u: must be in [0, 1], got %g", gpus[i].id,
                                            gpus[i].kv_use);
                if (gpus[i].owner == job)
                        return loom_err_set(e, LOOM_EEXIST, "job", "job %d already holds gpu %u",
                                            job, gpus[i].id);
        }
        uint32_t k = 0;
        while (k < n_serving) { /* selection: n_serving is small, no sort needed */
                long best = -1;
                for (size_t i = 0; i < n; i++) {
                        if (gpus[i].owner >= 0)
                                continue;
                        if (best < 0 || gpus[i].kv_use < gpus[best].kv_use ||
                            (gpus[i].kv_use == gpus[best].kv_use && gpus[i].id < gpus[best].id))
                                best = (long)i;
                }
                if (best < 0)
                        break;
                gpus[best].owner = job;
                picked[k++] = (uint32_t)best;
        }
        return (int)k;
}

void loom_harvest_release(loom_harvest_gpu *gpus, size_t n, int32_t job)
{
        for (size_t i = 0; i < n; i++)
                if (gpus[i].owner == job)
                        gpus[i].owner = -1;
}
