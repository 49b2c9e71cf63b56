/* sim_int.h - what each simulator policy switches on, and the request-latency percentiles the
 * simulator and the replay client report (internal to src/harvest). */
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

/* Sort ttft[0..n) and tpot[0..n) (ms) in place; out: ttft p50, ttft p99, tpot p50, tpot p99
 * (0 when n is 0). latency.c */
void hv_latency_pcts(double *ttft, double *tpot, size_t n, double out[4]);

#endif
