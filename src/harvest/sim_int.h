/* sim_int.h - what each simulator policy switches on (internal to src/harvest). */
#ifndef LOOM_HARVEST_SIM_INT_H
#define LOOM_HARVEST_SIM_INT_H

#include "loom/harvest.h"

typedef struct hv_flags {
        int borrow; /* use borrowed serving GPUs at all */
        loom_harvest_admit_mode admit;
        int chunk;        /* rollout prefill chunk on serving GPUs; 0 = monolithic */
        int prefix_cache; /* rollout prefix cache on serving GPUs */
        int preempt;      /* serving-first memory; 0 = static 50/50 split */
        int serverless;   /* evict/reload the rollout model */
        int affinity, pinned;
} hv_flags;

void hv_policy_flags(loom_harvest_policy p, hv_flags *f);

#endif
