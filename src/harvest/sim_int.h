/* sim_int.h - what each simulator policy switches on, the request-latency percentiles the
 * simulator and the replay client report, and the complete error messages of the runs behind
 * `loom harvest` (internal to src/harvest). */
#ifndef LOOM_HARVEST_SIM_INT_H
#define LOOM_HARVEST_SIM_INT_H

#include <time.h>

#include "loom/harvest.h"

typedef struct hv_flags {
        int borrow; /* use borrowed serving GPUs at all */
        loom_harvest_admit_mode admit;
        int chunk;        /* rollout prefill chunk on serving GPUs; 0 = monolithic */
        int prefix_cache; /* rollout prefix cache on serving GPUs */
        int preempt;      /* serving-first memory; 0 = static 50/50 split */
        int serverless;   /* evict/reload the rollout model */
        int affinity, pinned;
        int sound; /* sound admission and feedback guard (with dual admission) */
} hv_flags;

void hv_policy_flags(loom_harvest_policy p, hv_flags *f);

/* Sort ttft[0..n) and tpot[0..n) (ms) in place and give the p50 and p99 of each (0 when n is
 * 0). latency.c */
void hv_latency_pcts(double *ttft, double *tpot, size_t n, double *ttft_p50, double *ttft_p99,
                     double *tpot_p50, double *tpot_p99);

/* Put "what: " in front of e's message (what NULL: e's field; nothing when it is empty), so that
 * the message is complete on its own; returns rc. Does nothing when rc is 0 or e is NULL. run.c */
int hv_err_lead(loom_err *e, int rc, const char *what);

/* Seconds on the monotonic clock. */
static inline double hv_now_s(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#endif
