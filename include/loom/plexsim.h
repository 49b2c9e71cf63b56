/*
 * plexsim.h - PlexRL reproductions in the simulator: a shared training pool serving jobs'
 * serviceized training calls under rr | hrrs | fcfs, and a trace-driven cluster of node groups
 * placed on the timeline by the plex placer (isolated, pack, spread, spread + backfill).
 *
 * GPU time is simulated: nothing runs on a GPU; call and rollout lengths come from PlexRL
 * Table 2 (docs/sim.md). Placement is the core's loom_plex and dispatch the core's
 * loom_hrrs_* functions, the same code loomd's scheduler runs. Same inputs + seed = same
 * results. Results own their arrays; every _free accepts NULL.
 */
#ifndef LOOM_PLEXSIM_H
#define LOOM_PLEXSIM_H

#include <stdio.h>

#include "loom/timeline.h"

/* PlexRL Table 2 (cycle and calls) and Table 1 (parallel settings -> GPUs). */
typedef struct loom_plexsim_model {
        const char *name;
        double model_b;
        double cycle_s;
        double calls_s[3];   /* compute_log_prob, update_actor, sync_weight */
        int train_gpus;      /* DP x CP x PP of Table 1 */
        int rollout_gpus;    /* DP_R x TP_R */
        double paper_bubble; /* Table 2 */
        double paper_saved;  /* §6.2: GPU-hours saved by two-job packing */
} loom_plexsim_model;

/* The three models (7B, 30B, 235B); *n gets 3. */
const loom_plexsim_model *loom_plexsim_models(int *n);
/* Optimizer-state load per switch: 19.0 s for the 30B model (§6.2), scaled by size. */
double loom_plexsim_setup_s(double model_b);

/* ---- one shared training pool ------------------------------------------------------------ */

typedef struct loom_plexsim_pool_job {
        double roll_s; /* rollout (and reward) on the job's own GPUs */
        int n_calls;
        double calls_s[3]; /* training calls, back to back */
        double setup_s;    /* T_offload + T_load paid when the pool switches to this job */
        double start_s;    /* first rollout starts here (its phase offset) */
        int iterations;
        double jitter; /* rollout lengths uniform in roll_s * [1 - jitter, 1 + jitter] */
} loom_plexsim_pool_job;

typedef struct loom_plexsim_pool_cfg {
        loom_dispatch dispatch;
        double margin; /* HRRS preemption margin; default 1.1 */
        uint64_t seed;
} loom_plexsim_pool_cfg;

typedef struct loom_plexsim_pool_res {
        double makespan_s; /* first start to last iteration done */
        double busy_s;     /* pool running calls or loading state */
        double bubble;     /* 1 - busy / makespan */
        int64_t switches;  /* the pool changed resident job */
        double switches_per_h;
        int64_t chains;                          /* training phases served */
        double delay_mean, delay_p50, delay_p99; /* per training phase: (done - ready - work)
                                                    / work */
} loom_plexsim_pool_res;

int loom_plexsim_pool_run(const loom_plexsim_pool_cfg *c, const loom_plexsim_pool_job *jobs, int n,
                          loom_plexsim_pool_res *out, loom_err *e);

/* ---- a cluster of node groups (Figure 8) --------------------------------------------------- */

typedef enum loom_plexsim_policy {
        LOOM_PLEXSIM_ISOLATED = 0, /* a dedicated group per job, FIFO */
        LOOM_PLEXSIM_PACK,         /* plex placer, densest group first, FIFO */
        LOOM_PLEXSIM_SPREAD,       /* plex placer, most slack first, FIFO */
        LOOM_PLEXSIM_BACKFILL,     /* spread, and later jobs that fit start past a blocked head */
} loom_plexsim_policy;

const char *loom_plexsim_policy_name(loom_plexsim_policy p); /* "plex-isolated", ... */
int loom_plexsim_policy_parse(const char *s, loom_plexsim_policy *out);

typedef struct loom_plexsim_job {
        double arrival_s;
        int model; /* index into loom_plexsim_models() */
        int iterations;
        bool cold; /* no profile yet: a dedicated group for one cycle, then a repack */
} loom_plexsim_job;

/* Jobs from a trace: arrivals as given; the model by the trace's GPU count (1: 7B, 2-4: 30B,
 * more: 235B); iterations = duration / cycle (at least 1); profiled (warm). out is
 * caller-allocated (n). */
void loom_plexsim_jobs_from_trace(const double *arrival_s, const double *duration_s,
                                  const int *gpus, int n, loom_plexsim_job *out);

typedef struct loom_plexsim_cluster_res {
        loom_plexsim_policy policy;
        int n;
        double makespan_h;
        double *queue_delay; /* per job: wait / run time; owned */
        double queue_delay_p50, queue_delay_p99, queue_delay_max;
        double switches_per_h;  /* state loads implied by shared groups */
        double pruned_fraction; /* groups pruned before fitting / groups seen */
        int max_groups;
        int repacked; /* cold-started jobs that moved to a shared group after one cycle */
} loom_plexsim_cluster_res;

/* nodes: training nodes of the cluster (8 GPUs each). */
int loom_plexsim_cluster_run(loom_plexsim_policy p, const loom_plexsim_job *jobs, int n, int nodes,
                             loom_plexsim_cluster_res *out, loom_err *e);
void loom_plexsim_cluster_res_free(loom_plexsim_cluster_res *r);

/* Figure 8's CDF of normalised queuing delay, one curve per result, as an SVG file. */
int loom_plexsim_plot_cdf(const char *path, const loom_plexsim_cluster_res *r, int n, loom_err *e);

/* ---- the whole `loom sim --policy plex-...` study (plex_study.c) ----------------------------- */

typedef struct loom_plexsim_study_cfg {
        const char *trace; /* Philly-style CSV */
        int start, count;  /* its rows; default 165:300 */
        unsigned policies; /* mask of 1u << loom_plexsim_policy; default all four */
        int nodes;         /* training nodes of the cluster; default 20 */
        double jitter;     /* rollout spread of the dispatch runs, [0, 1); default 0.2 */
        uint64_t seed;     /* dispatch jitter and WEAVE workload; default 1 */
        bool cold;         /* jobs arrive unprofiled (a dedicated group for one cycle) */
        bool dispatch;     /* HRRS / FCFS / round robin on shared groups; default on */
        bool weave;        /* loom vs the plex placer on WEAVE's workload; default on */
        bool json;         /* JSON lines instead of tables */
        const char *plot;  /* directory for plex_queue_delay_cdf.svg (created), or NULL */
} loom_plexsim_study_cfg;

void loom_plexsim_study_cfg_default(loom_plexsim_study_cfg *c);
/* "plex-pack,plex-spread" or "plex-all" into a mask of (1u << policy); -1 on an unknown name or
 * an empty list. */
int loom_plexsim_policy_list_parse(const char *s, unsigned *mask);
/* Figure 8 (isolated always runs as the makespan baseline), then the dispatch and WEAVE
 * comparisons, each part printed to f as it finishes. On an error e says why (trace errors start
 * with file:line:column); the parts already done stay printed. 0, LOOM_EINVAL, LOOM_EIO or
 * LOOM_ENOMEM. */
int loom_plexsim_study(const loom_plexsim_study_cfg *c, FILE *f, loom_err *e);

#endif
