/*
 * plan.h - HetRL: where to run one RL workflow on a fleet of mixed GPUs, machines and regions.
 *
 * Three parts, all pure (no I/O, no clock unless the caller passes one, no globals):
 *  - the analytical cost model of HetRL's Appendix B: per-tasklet compute, TP/PP/DP ring
 *    communication, pipeline bubbles, HBM-bound decoding, resharding and weight sync, the task
 *    costs Psi and the end-to-end compositions of sync/async PPO and GRPO, with the memory
 *    constraint C3;
 *  - the search: nested successive halving over task groupings and GPU-count splits, each arm
 *    an evolutionary search (SHA-EA), a plain EA, the verl and StreamRL baselines and an exact
 *    branch and bound for small fleets;
 *  - helpers to turn a plan into a loom job spec (rollout/training GPUs and phase times).
 *
 * Beside them, the drivers of `loom plan`: one planning run and its text report, the cost-model
 * rate benchmark and the comparison grid of HetRL's evaluation (sweep), which write to a FILE *
 * the caller passes and read cluster files only through a callback. The JSON forms are in
 * loom/spec.h, the sweep's charts in loom/sim.h.
 *
 * Units inside this module: seconds (double), bytes (double), FLOP/s, bytes/s. Modelling
 * choices are listed in docs/plan.md.
 */
#ifndef LOOM_PLAN_H
#define LOOM_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/common.h"

#define LOOM_PLAN_MAX_DEV 256
#define LOOM_PLAN_MAX_TYPES 8
#define LOOM_PLAN_MAX_REGIONS 16
#define LOOM_PLAN_MAX_MACHINES 256
#define LOOM_PLAN_TASKS 6
#define LOOM_PLAN_MAX_PP 16 /* pipeline stages the search tries (and balances) at most */
#define LOOM_PLAN_BF16 2.0

/* Tasks of the workflow, in the paper's order. GRPO has no critic (tasks 3 and 5 absent). */
enum {
        LOOM_PLAN_GEN = 0,    /* actor generation */
        LOOM_PLAN_REWARD = 1, /* reward inference */
        LOOM_PLAN_REF = 2,    /* reference inference */
        LOOM_PLAN_CRITIC_INF = 3,
        LOOM_PLAN_ACTOR_TRAIN = 4,
        LOOM_PLAN_CRITIC_TRAIN = 5,
};
const char *loom_plan_task_name(int task);

typedef struct loom_plan_gpu {
        char name[32];
        double tflops;     /* dense bf16/fp16 peak, TFLOP/s */
        double hbm_gb;     /* memory capacity, decimal GB */
        double hbm_gbps;   /* HBM bandwidth, GB/s */
        double intra_gbps; /* intra-machine GPU-GPU bandwidth, GB/s */
} loom_plan_gpu;

typedef struct loom_plan_device {
        int type;    /* index into cluster types */
        int machine; /* dense index */
        int zone;    /* dense index; used by the locality score only */
        int region;  /* dense index */
} loom_plan_device;

/* Links are per level: inside a machine (the GPU type's intra_gbps, intra_lat_s), between
 * machines of one region (region_lat_s/region_bw), between regions (pair matrices). Bandwidths
 * are bytes/s, latencies seconds. */
typedef struct loom_plan_cluster {
        int n_types;
        loom_plan_gpu types[LOOM_PLAN_MAX_TYPES];
        int n_dev;
        loom_plan_device dev[LOOM_PLAN_MAX_DEV];
        int n_machines, n_zones, n_regions;
        char region_name[LOOM_PLAN_MAX_REGIONS][32];
        double intra_lat_s;
        double region_lat_s[LOOM_PLAN_MAX_REGIONS];
        double region_bw[LOOM_PLAN_MAX_REGIONS];
        double pair_lat_s[LOOM_PLAN_MAX_REGIONS][LOOM_PLAN_MAX_REGIONS];
        double pair_bw[LOOM_PLAN_MAX_REGIONS][LOOM_PLAN_MAX_REGIONS];
} loom_plan_cluster;

/* Latency (s) and bandwidth (bytes/s) between two devices; same device: 0 and infinity. */
void loom_plan_link(const loom_plan_cluster *c, int a, int b, double *lat, double *bw);
/* min over rings through devs of the slowest edge's alpha + bytes/beta (Appendix B's ring).
 * Exact when links are identical within each level; see docs/plan.md. n <= 1 costs 0. */
double loom_plan_ring(const loom_plan_cluster *c, const int *devs, int n, double bytes);
/* Checks a filled cluster (indices in range, positive numbers); names the field on error. */
int loom_plan_cluster_check(const loom_plan_cluster *c, loom_err *e);

typedef struct loom_plan_model {
        char name[32];
        int h1, h2, layers; /* hidden, intermediate, layers */
        int heads, kv_heads, head_dim;
} loom_plan_model;
/* Qwen3 4B/8B/14B from their public configs; name "qwen3-8b" etc. Returns 0 or LOOM_ENOENT. */
int loom_plan_model_lookup(const char *name, loom_plan_model *out);

typedef struct loom_plan_workflow {
        bool grpo;  /* no critic */
        bool async; /* generation overlaps the rest; weights synchronised each iteration */
        loom_plan_model model;
        int seq_in, seq_out;  /* max prompt / response tokens (1024/1024) */
        int batch, responses; /* prompts per iteration and responses per prompt (384 x 8) */
        int mbs;              /* micro-batch size of inference and training (default 8) */
        int max_decode_batch; /* serving engine's cap on concurrent sequences (256) */
        double eta;           /* Phi's task parallelism in [0,1]; < 0: from the placement */
        /* HetRL's load balancing (section 4.2): each task's samples split across its replicas
         * by their modelled speed (rollout batches; longer sequences to faster GPUs for the
         * rest) and uneven layer counts across pipeline stages. Off: uniform work. */
        bool balance;
} loom_plan_workflow;
/* Paper defaults: PPO sync, Qwen3-8B, 1024/1024, 384 x 8, mbs 8, decode cap 256, eta auto. */
void loom_plan_workflow_default(loom_plan_workflow *w);
int loom_plan_workflow_check(const loom_plan_workflow *w, loom_err *e);
/* The tasks the workflow runs (PPO 6, GRPO 4), in order, into tasks[]; returns the count. */
int loom_plan_workflow_tasks(const loom_plan_workflow *w, int tasks[LOOM_PLAN_TASKS]);

/* ---- cost-model building blocks (exposed for tests and explanations) ---- */
double loom_plan_layer_flops(const loom_plan_model *m, double seq);  /* forward, one sample */
double loom_plan_weight_bytes(const loom_plan_model *m, int layers); /* bf16, no embeddings */
/* Phi of Appendix B: max + (1 - eta) * (sum - max). */
double loom_plan_phi(const double *c, int n, double eta);

/* ---- a plan ---- */
typedef struct loom_plan_strategy {
        int dp, pp, tp;
} loom_plan_strategy;

/* One full execution plan. group[t] is the task's group (-1 when the workflow lacks the task);
 * each group owns a disjoint device set; each task uses the first dp*pp*tp devices of its order
 * (a permutation of its group's devices): slot (i,j,k) = replica i, stage j, shard k sits at
 * order[(i*pp + j)*tp + k]. */
typedef struct loom_plan {
        int n_groups;
        int group[LOOM_PLAN_TASKS];
        int group_size[LOOM_PLAN_TASKS];
        int group_dev[LOOM_PLAN_TASKS][LOOM_PLAN_MAX_DEV];
        loom_plan_strategy st[LOOM_PLAN_TASKS];
        int order[LOOM_PLAN_TASKS][LOOM_PLAN_MAX_DEV];
} loom_plan;

/* What the cost model says about a plan. */
typedef struct loom_plan_cost {
        double iteration_s; /* end-to-end; infinite when the plan breaks C3 or C1 */
        bool feasible;
        double task_s[LOOM_PLAN_TASKS]; /* C^t */
        double comp_s[LOOM_PLAN_TASKS], tp_s[LOOM_PLAN_TASKS], pp_s[LOOM_PLAN_TASKS];
        double dp_s[LOOM_PLAN_TASKS], bubble_s[LOOM_PLAN_TASKS], hbm_s[LOOM_PLAN_TASKS];
        double reshard_s, sync_s;       /* the weight-movement term used (one of them is 0) */
        double generation_s, rest_s;    /* C^1 and the inference + training phases after it */
        bool overlapped;                /* async generation overlapped the rest */
        double mem_over_gb;             /* worst C3 overflow over devices (0 when it fits) */
        bool balanced[LOOM_PLAN_TASKS]; /* the task's cost is its load-balanced execution */
        int layers[LOOM_PLAN_TASKS][LOOM_PLAN_MAX_PP]; /* layers per pipeline stage */
        int mem_worst_dev;
        double tokens_per_s;
} loom_plan_cost;

/* Evaluate a plan. Returns 0, or LOOM_EINVAL when the plan is malformed (message in e). An
 * infeasible plan (C3) is not an error: cost->feasible is false and iteration_s infinite. */
int loom_plan_evaluate(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p,
                       loom_plan_cost *cost, loom_err *e);
/* The same without checks or detail, for the search's inner loop. */
double loom_plan_cost_fast(const loom_plan_cluster *c, const loom_plan_workflow *w,
                           const loom_plan *p);

/* ---- the search ---- */
enum {
        LOOM_PLAN_SHA_EA = 0, /* nested successive halving + EA (HetRL) */
        LOOM_PLAN_EA,         /* plain evolutionary search over the whole space */
        LOOM_PLAN_EXACT,      /* branch and bound, small fleets */
        LOOM_PLAN_VERL,       /* one group, homogeneous strategy, devices in file order */
        LOOM_PLAN_STREAMRL,   /* generation vs the rest, one GPU type in one region each */
};
const char *loom_plan_solver_name(int solver);
int loom_plan_solver_from_name(const char *name); /* -1 when unknown */

typedef struct loom_plan_opts {
        int solver;
        uint64_t seed;
        int64_t budget; /* cost-model evaluations; 0 = solver default */
        double time_s;  /* > 0: stop after this many seconds by now() */
        /* SHA-EA: budgets above this many evaluations, and time budgets, run as successive
         * independent rounds of this size, keeping the best plan; 0 = 3,000,000. */
        int64_t round_evals;
        double (*now)(void *ctx); /* monotonic seconds; needed only with time_s */
        void *now_ctx;
        /* Optional progress: called with the best cost whenever evaluations cross a multiple
         * of trace_every (for budget curves). */
        int64_t trace_every;
        void (*trace)(void *ctx, int64_t evals, double best_s);
        void *trace_ctx;
} loom_plan_opts;

typedef struct loom_plan_result {
        loom_plan plan;
        loom_plan_cost cost;
        int64_t evaluations;
        bool found;                      /* a feasible plan */
        bool optimal;                    /* the exact solver proved it */
        int arms_groupings, arms_splits; /* SHA arms at levels 1 and 2 */
} loom_plan_result;

/* Search for the fastest plan. Deterministic for a given seed and evaluation budget. Returns
 * 0 (result->found false when nothing fits in memory), LOOM_EINVAL for bad inputs,
 * LOOM_ERANGE when the exact solver is asked for a fleet beyond its limit, LOOM_ENOMEM. */
int loom_plan_search(const loom_plan_cluster *c, const loom_plan_workflow *w,
                     const loom_plan_opts *o, loom_plan_result *r, loom_err *e);

/* What the layout rule costs: from plan p (modified in place), a local search that lets each
 * task use fewer GPUs than its group and other rank orders (see src/plan/layout.c), within
 * budget cost-model evaluations (0: 2,000,000). *cost gets the best iteration time found.
 * Returns 0, or LOOM_EINVAL when p does not fit. Not a proof: it searches near p only. */
int loom_plan_free_layout(const loom_plan_cluster *c, const loom_plan_workflow *w, loom_plan *p,
                          int64_t budget, double *cost);

/* A random plan from the search space (a random grouping, split, strategies and layout, as the
 * plain EA starts from), for benchmarks and tests. Returns 0 or LOOM_ENOMEM. */
int loom_plan_sample(const loom_plan_cluster *c, const loom_plan_workflow *w, uint64_t *rng,
                     loom_plan *out);

/* Bell number of groupings of n tasks, and the groupings themselves as restricted-growth
 * strings (out[k][t] = group of t); returns the count (at most 203 for n <= 6). */
int loom_plan_groupings(int n, int out[][LOOM_PLAN_TASKS], int cap);

/* ---- bridge to the scheduler ---- */
typedef struct loom_plan_job {
        int rollout_gpus, train_gpus; /* devices of generation / of everything else */
        double t_roll_s, t_train_s, sync_s;
} loom_plan_job;
/* Phases of a plan as a loom job: rollout = actor generation, train = the inference and
 * training tasks after it, sync = resharding or weight synchronisation. */
void loom_plan_to_job(const loom_plan *p, const loom_plan_cost *cost, loom_plan_job *out);

/* ---- one planning run (`loom plan`) ---- */
typedef struct loom_plan_report {
        loom_plan_result result;
        double search_s;              /* by opts->now; 0 when the caller gave no clock */
        bool free_layout;             /* free_result and free_s hold the layout search */
        loom_plan_result free_result; /* the plan loom_plan_free_layout found, evaluated */
        double free_s;                /* its iteration time as the layout search priced it */
} loom_plan_report;

/* loom_plan_search, timed by o->now when set; with free_layout, then loom_plan_free_layout near
 * the plan. Returns 0; LOOM_ENOENT when no plan fits the fleet's memory, the search's error
 * otherwise, each with a message in e. */
int loom_plan_run(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan_opts *o,
                  bool free_layout, loom_plan_report *out, loom_err *e);
/* The text report: fleet (fleet: its name, "" for none), workflow, solver, each group's GPUs
 * and each task's strategy and cost terms, the weight term, what sets the iteration time, and
 * the free layout's time when it was searched. */
void loom_plan_report_print(FILE *f, const char *fleet, const loom_plan_cluster *c,
                            const loom_plan_workflow *w, const loom_plan_opts *o,
                            const loom_plan_report *r);

/* Cost-model evaluations per second over 1000 random plans that fit in memory (an overflowing
 * plan is rejected before it is priced, which would flatter the rate), priced over and over for
 * at least `seconds` by now(). */
typedef struct loom_plan_rate {
        int64_t evaluations;
        double elapsed_s;
        double mean_iteration_s; /* of the priced plans, so the work cannot be optimised away */
} loom_plan_rate;
int loom_plan_evalrate(const loom_plan_cluster *c, const loom_plan_workflow *w, double seconds,
                       double (*now)(void *ctx), void *now_ctx, loom_plan_rate *out, loom_err *e);

/* ---- the comparison grid (`loom plan sweep`) ---- */
#define LOOM_PLAN_SWEEP_SCENARIOS 4 /* S1-S4, the example fleets of HetRL's network scenarios */
#define LOOM_PLAN_SWEEP_MODELS 3    /* Qwen3 4B, 8B, 14B */
#define LOOM_PLAN_SWEEP_MAX_ROWS (LOOM_PLAN_SWEEP_SCENARIOS * LOOM_PLAN_SWEEP_MODELS * 4)

/* Scenario k's name ("S1".."S4") and its cluster file relative to the source tree; model k's
 * name ("qwen3-4b"...). NULL beyond the range. */
const char *loom_plan_sweep_scenario(int k);
const char *loom_plan_sweep_scenario_file(int k);
const char *loom_plan_sweep_model(int k);

typedef struct loom_plan_sweep_cfg {
        const char *scenarios, *models; /* comma-separated names to keep; NULL: all */
        int64_t budget;                 /* SHA-EA evaluations per instance */
        uint64_t seed;
        /* HetRL section 5.3 instead of the grid: sync PPO/GRPO without and with balancing. */
        bool balance_ablation;
        /* Fills *out with the cluster of the file (loom_plan_sweep_scenario_file); 0, or an error
         * code with a message in e that names the file. Called once per kept scenario. */
        int (*load)(void *ctx, const char *file, loom_plan_cluster *out, loom_err *e);
        void *load_ctx;
} loom_plan_sweep_cfg;

/* One instance of the grid: modelled tokens/s, 0 when no plan fits (StreamRL: async only). */
typedef struct loom_plan_sweep_row {
        int scen, model;
        bool grpo, async;
        double hetrl, verl, streamrl;
} loom_plan_sweep_row;

/* One instance of the ablation: the better of the two searches' plans priced without (off)
 * and with (on) balancing; search_short > 0: the balanced search alone fell short of `on` by
 * this fraction, < 0: the unbalanced one of `off`. */
typedef struct loom_plan_balance_row {
        int scen, model;
        bool grpo;
        double off, on, search_short;
} loom_plan_balance_row;

typedef struct loom_plan_sweep_out {
        bool ablation; /* the rows are the ablation's (balance[]), not the grid's */
        int n;         /* rows of the grid */
        loom_plan_sweep_row rows[LOOM_PLAN_SWEEP_MAX_ROWS];
        int n_balance;
        loom_plan_balance_row balance[LOOM_PLAN_SWEEP_MAX_ROWS / 2];
} loom_plan_sweep_out;

/* Plans every kept instance and writes the table to f as it goes (a row per instance, flushed),
 * then the notes and the summary lines. Deterministic for a seed and budget. Returns 0, the
 * loader's error (rows so far kept in out), or LOOM_ENOMEM; a message in e. */
int loom_plan_sweep(const loom_plan_sweep_cfg *cfg, FILE *f, loom_plan_sweep_out *out, loom_err *e);

#endif
