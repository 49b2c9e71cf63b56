/*
 * job.h - what an RL job asks for: GPUs per pool, worst-case phase times, SLO, working sets.
 *
 * Phase times are worst-case (every response at the max-token limit) on the job's own requested
 * GPUs. The SLO is the tolerated slowdown of the co-executed iteration time against running
 * alone (>= 1.0). Working sets are host-memory bytes per node: mem_rollout on every rollout node
 * the job is pinned to, mem_train per training node at the job's own training size (it shrinks
 * as a group spreads the job over more training nodes).
 */
#ifndef LOOM_JOB_H
#define LOOM_JOB_H

#include <stdbool.h>

#include "loom/cluster.h"

#define LOOM_JOB_ID_MAX 64
#define LOOM_MAX_JOB_NODES 32 /* per pool; 256 GPUs at 8 per node */

typedef enum loom_phase {
        LOOM_PHASE_ROLLOUT = 0,
        LOOM_PHASE_TRAIN = 1,
        LOOM_PHASE_SYNC = 2, /* weights travel train -> rollout; uses no pool */
} loom_phase;

const char *loom_phase_name(loom_phase p); /* "rollout", "train", "sync" */
/* Parse "rollout"/"train"/"sync"; 0 or LOOM_EINVAL. */
int loom_phase_parse(const char *s, loom_phase *out);

typedef struct loom_job_spec {
        char id[LOOM_JOB_ID_MAX]; /* the user's name for the job; may be empty */
        int rollout_gpus;         /* multiple of gpus_per_node */
        int train_gpus;           /* multiple of gpus_per_node */
        loom_us t_roll;           /* worst case, > 0 */
        loom_us t_train;          /* worst case, > 0 */
        loom_us t_sync;           /* >= 0 */
        double slo;               /* >= 1.0 */
        uint64_t mem_rollout;     /* bytes per rollout node */
        uint64_t mem_train;       /* bytes per training node at train_gpus */
        int64_t iterations;       /* 0 = unbounded */
        int max_restarts;         /* loomd: retries of a failed job (default 3); core ignores */
        /* 0: the SLO is a slowdown against t_roll + t_train + t_sync. > 0: against this solo
         * iteration instead (a job re-admitted on a learned profile keeps the budget measured
         * on its mean observed phases, while t_roll/t_train carry a high quantile of them). */
        loom_us t_solo_ref;
        /* The training phase as PlexRL's serviceized calls (LOOM_CALL_*), run back to back on
         * the training pool; all 0 = not given (the phase is one call of t_train). When given,
         * t_train is their sum. */
        loom_us t_calls[3];
        /* The warm switch onto a node: the job's state reloaded from host memory when a node
         * changes to it from another job. 0 = not given: the policy's warm_switch. */
        loom_us t_switch;
        /* The rollout's head: how long it takes to reach the tail threshold (policy
         * tail_threshold of its responses done), after which its tail can migrate to
         * tail_keep_gpus GPUs and free the rest of its nodes (docs/scheduling.md, "Planning
         * the tails"). 0 = not known: the rollout is planned to hold its nodes to its end. At
         * most t_roll. Learned admission learns it from the driver's progress reports. */
        loom_us t_head;
        /* The cold start of the job's rollout on a node that does not hold it: its engine and
         * weights loaded from storage, as when a member switches to running lone on its
         * training nodes. 0 = not known: such a switch is then not made in its last
         * LOOM_LONE_LEFT iterations. */
        loom_us t_cold;
} loom_job_spec;

#define LOOM_MAX_RESTARTS_DEFAULT 3
#define LOOM_MAX_RESTARTS_LIMIT 1000

enum { LOOM_CALL_LOG_PROB = 0, LOOM_CALL_UPDATE_ACTOR, LOOM_CALL_SYNC_WEIGHT, LOOM_N_CALLS };
/* "compute_log_prob", "update_actor", "sync_weight" */
const char *loom_call_name(int call);
/* The calls of the training phase: t_calls when given, else the one call t_train. Fills out
 * (LOOM_N_CALLS entries) and returns how many. */
int loom_job_calls(const loom_job_spec *s, loom_us *out);

/* A spec with zero times and SLO 1.0; callers fill the rest. */
void loom_job_spec_init(loom_job_spec *s);
/* 0, or LOOM_EINVAL naming the field. Checks values and their fit to cluster c (GPU multiples,
 * node count limit). A working set larger than a node is NOT an error here: placement rejects
 * such a job with a reason. */
int loom_job_spec_validate(const loom_job_spec *s, const loom_cluster_cfg *c, loom_err *e);

/* Solo iteration time on the job's own resources: t_roll + t_train + t_sync. */
static inline loom_us loom_job_t_solo(const loom_job_spec *s)
{
        return s->t_roll + s->t_train + s->t_sync;
}

/* The most a co-executed iteration may take: slo x the solo iteration it is measured against. */
static inline loom_us loom_job_budget(const loom_job_spec *s)
{
        loom_us ref = s->t_solo_ref > 0 ? s->t_solo_ref : loom_job_t_solo(s);
        return (loom_us)(s->slo * (double)ref);
}

/* Host memory per node, WEAVE Table 2, for a model size in billions of parameters (3, 7, 14,
 * 32, 70; other sizes interpolate). Table 2 gives 7B..70B; 3B is taken as half of 7B. */
uint64_t loom_table2_mem_rollout(double model_b);
uint64_t loom_table2_mem_train(double model_b);

#endif
