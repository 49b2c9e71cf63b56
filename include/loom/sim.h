/*
 * sim.h - the trace-driven simulator: workloads, the stochastic phase model, a discrete-event
 * driver of the scheduling core (sched.h), the baselines that do not go through the core
 * (solo, colocated), an exact-search oracle, a fluid lower bound, reports and plots.
 *
 * The simulator drives the same loom_sched as the daemon: it submits arrivals, applies the
 * START_PHASE / MIGRATE_TAIL / RESIZE_PHASE / PROVISION_NODE / RELEASE_NODE / JOB_DONE actions
 * to a modelled cluster and reports phase progress and completion back. GPU time is simulated:
 * nothing runs on a GPU, every phase length comes from the model documented in docs/sim.md.
 *
 * Ownership: a loom_sim_workload owns its job array and the realisation table (every job's
 * per-iteration draws); results own their series, slowdowns and Gantt intervals. Every _free
 * accepts NULL. Same inputs + seed = same results, byte for byte, whatever the thread count.
 */
#ifndef LOOM_SIM_H
#define LOOM_SIM_H

#include <stdbool.h>
#include <stdio.h>

#include "loom/plan.h"
#include "loom/sched.h"

/* ---- arrivals and workloads ---------------------------------------------------------------- */

/* One row of a trace: when the job arrives, how long it runs alone, how many GPUs it used. */
typedef struct loom_sim_trace_row {
        char id[LOOM_JOB_ID_MAX];
        double arrival_s;
        double duration_s;
        int gpus;
} loom_sim_trace_row;

/* A trace row's explicit profile (optional columns t_roll_s, t_train_s, iterations, slo). */
typedef struct loom_sim_trace_profile {
        double t_roll_s, t_train_s, slo;
        int64_t iterations;
} loom_sim_trace_profile;

typedef struct loom_sim_trace {
        int n;
        loom_sim_trace_row *rows; /* owned */
} loom_sim_trace;

/* Read a Philly-style CSV (job_id,arrival_s,duration_s,gpus[,...]): rows [start, start+count)
 * after the header (count < 0: to the end). Arrivals are shifted so the first kept row arrives
 * at 0. Every row of the file is checked, so a malformed row fails with e->line/e->col set and
 * nothing allocated. */
int loom_sim_trace_load(const char *path, int start, int count, loom_sim_trace *out, loom_err *e);
/* The same from text; name is used in messages. */
int loom_sim_trace_parse(const char *text, size_t len, const char *name, int start, int count,
                         loom_sim_trace *out, loom_err *e);
void loom_sim_trace_free(loom_sim_trace *t);
/* The same rows' explicit profiles, when the trace has the columns t_roll_s, t_train_s,
 * iterations and slo (all four or none): *out is an array of the kept rows' profiles (free()),
 * or NULL when the trace has none of the columns. */
int loom_sim_trace_profiles_load(const char *path, int start, int count,
                                 loom_sim_trace_profile **out, loom_err *e);

typedef enum loom_sim_profile {
        LOOM_SIM_BALANCED = 0, /* WEAVE Table 6 BL */
        LOOM_SIM_ROLLOUT_HEAVY,
        LOOM_SIM_TRAIN_HEAVY,
        LOOM_SIM_MIXED, /* uniform over the nine (profile, size) configurations */
} loom_sim_profile;

const char *loom_sim_profile_name(loom_sim_profile p); /* "balanced", "rollout-heavy", ... */
int loom_sim_profile_parse(const char *s, loom_sim_profile *out);

/* Per-job SLO: uniform in [lo, hi] (lo == hi for a fixed SLO). */
typedef struct loom_sim_slo {
        double lo, hi;
} loom_sim_slo;

/* "uniform:1,2" or "fixed:1.5"; 0 or LOOM_EINVAL naming "slo". */
int loom_sim_slo_parse(const char *s, loom_sim_slo *out, loom_err *e);

/* The stochastic runtime (docs/sim.md). Each rollout generates `responses` responses whose
 * lengths, as a fraction of the max-token limit, are min(1, lognormal(ln median, sigma)). */
typedef struct loom_sim_noise {
        bool deterministic; /* every response at the cap: actual times = worst case */
        /* with deterministic: each phase's time x U(1 - jitter, 1 + jitter), drawn per job,
         * iteration and seed (what a real engine adds to a sleep: permits, start-up); 0 the
         * default, up to 0.5 */
        double jitter;
        int responses;         /* per rollout; default 64 */
        double median;         /* median response length / cap; default 0.25 */
        double sigma;          /* log-space spread; default 0.8 */
        double prompt;         /* prompt tokens / cap, for training cost; default 0.25 */
        double tail_threshold; /* fraction of responses done that the progress hook reports */
} loom_sim_noise;

void loom_sim_noise_default(loom_sim_noise *n);

/* Drift settings (WEAVE §6.6): each job samples a template from the setting's set. */
typedef enum loom_sim_drift {
        LOOM_SIM_DRIFT_NONE = 0,
        LOOM_SIM_DRIFT_INCREASING, /* {none, increasing x0.5, x1.0, x1.5} */
        LOOM_SIM_DRIFT_DECREASING, /* {none, decreasing x0.5, x1.0, x1.5} */
        LOOM_SIM_DRIFT_MIXED,      /* all seven templates */
} loom_sim_drift;

const char *loom_sim_drift_name(loom_sim_drift d); /* "none", "increasing", ... */
int loom_sim_drift_parse(const char *s, loom_sim_drift *out);

/* A drift template: direction (+1 increasing, -1 decreasing, 0 none) and scale (0.5, 1, 1.5).
 * Its multiplier on a job's phase times at fraction x (0..1) of its iterations: see drift.c. */
double loom_sim_drift_factor(int dir, double scale, double model_b, double x);

typedef struct loom_sim_workload_cfg {
        loom_sim_profile profile;
        loom_sim_slo slo;
        int size_gpus; /* > 0: every job asks for this many GPUs per pool; 0: from trace */
        double sync_s; /* weight sync time per iteration; default 0 */
        double poisson_per_hour; /* used when no trace is given */
        int poisson_jobs;
        double poisson_mean_duration_s; /* mean of the exponential job durations; default 12.5 h */
        uint64_t seed;
        loom_sim_noise noise;
        loom_sim_drift drift; /* default none */
        double mtbf_h;        /* mean hours between failures of a running job; 0 = none */
        /* With a trace: each row's worst-case phase times, iterations and SLO instead of the
         * drawn ones (loom_sim_trace_profiles_load); NULL: drawn. Not owned. */
        const loom_sim_trace_profile *profiles;
} loom_sim_workload_cfg;

void loom_sim_workload_cfg_default(loom_sim_workload_cfg *c);

/* One simulated job: the spec the core sees plus what the simulator knows about it. */
typedef struct loom_sim_job {
        loom_job_spec spec; /* worst-case times, SLO, working sets, iterations */
        double model_b;     /* 3, 7, 14 or 32 */
        loom_us arrival;
        loom_us duration; /* run time alone, as the trace gives it */
        /* The realisation: for iteration i, fractions of the worst case. */
        float *roll;  /* rollout length (longest response) / t_roll */
        float *tailq; /* time at which tail_threshold of responses are done / t_roll */
        float *train; /* training time / t_train */
        /* drift template (multipliers already applied to roll, tailq, train) */
        int drift_dir;
        double drift_scale;
        /* failure instants, hours of running after admission, ascending; n_fail of them */
        int n_fail;
        double fail_h[4];
} loom_sim_job;

typedef struct loom_sim_workload {
        int n;
        loom_sim_job *jobs; /* owned, by arrival time */
        float *draws;       /* owned storage behind every job's realisation arrays */
        loom_sim_noise noise;
        loom_sim_drift drift;
} loom_sim_workload;

/* Build jobs from a trace (t != NULL) or from Poisson arrivals (t == NULL). Table 6 phase
 * times, SLOs and model sizes are drawn from the seed; the realisation of job j's iteration i
 * depends only on (seed, j, i), so every policy sees the same draws. */
int loom_sim_workload_build(const loom_sim_workload_cfg *wc, const loom_sim_trace *t,
                            const loom_cluster_cfg *c, loom_sim_workload *out, loom_err *e);
/* Build from explicit specs (micro-benchmarks, tests): arrivals and iterations as given. */
int loom_sim_workload_from_specs(const loom_job_spec *specs, const loom_us *arrivals, int n,
                                 const loom_sim_noise *noise, uint64_t seed,
                                 const loom_cluster_cfg *c, loom_sim_workload *out, loom_err *e);
void loom_sim_workload_free(loom_sim_workload *w);

/* Expected fractions of the worst case under the noise model (for iteration counts). */
void loom_sim_noise_expect(const loom_sim_noise *n, double *roll, double *train);

/* ---- policies and runs --------------------------------------------------------------------- */

typedef enum loom_sim_policy {
        LOOM_SIM_LOOM = 0,   /* Algorithm 1 + round-robin + tail migration, through the core */
        LOOM_SIM_LOOM_NOMIG, /* the same without tail migration */
        LOOM_SIM_SOLO,       /* Solo-D: dedicated nodes per job */
        LOOM_SIM_COLOCATED,  /* veRL-style: every phase on the job's training GPUs */
        LOOM_SIM_RANDOM,     /* WEAVE §6.5 Random, through the core */
        LOOM_SIM_GREEDY,     /* WEAVE §6.5 Greedy (most idle), through the core */
        LOOM_SIM_ORACLE,     /* optimal regrouping at every arrival and departure (<= 24 jobs) */
        LOOM_SIM_LB,         /* fluid lower bound on cost, valid for any policy */
        LOOM_SIM_RANDOM_SLO, /* Random restricted to SLO- and memory-feasible candidates */
        LOOM_SIM_GREEDY_SLO, /* Greedy restricted to SLO- and memory-feasible candidates */
        LOOM_SIM_REGROUP,    /* loom, plus an hourly re-placement of every active job */
        LOOM_SIM_GAVEL,      /* Gavel+: job-level time fractions, no phase interleaving */
        /* colocated held to SLOs: jobs colocated cannot keep within SLO (on their profile) run
         * as Solo-D */
        LOOM_SIM_COLOCATED_SLO,
        LOOM_SIM_NPOLICIES
} loom_sim_policy;

const char *loom_sim_policy_name(loom_sim_policy p);
int loom_sim_policy_parse(const char *s, loom_sim_policy *out);
/* "loom,solo" or "all" into a mask of (1u << policy); LOOM_EINVAL naming "policy". */
int loom_sim_policy_list_parse(const char *s, unsigned *mask, loom_err *e);

#define LOOM_SIM_ORACLE_MAX_JOBS 24

/* When the oracle regroups (oracle.c): at every arrival and departure (the default, WEAVE's
 * "Opt"), only when a job leaves (each arrival joins the group, or opens the one, that costs
 * least then), never (each arrival placed that way, for good), or when a job leaves but only
 * by moving single jobs from the grouping it has (LOCAL: each move into another group or
 * alone, while one lowers the $/h; what moving members one at a time can reach). */
typedef enum loom_sim_oracle_regroup {
        LOOM_SIM_REGROUP_ALWAYS = 0,
        LOOM_SIM_REGROUP_DEPARTURES,
        LOOM_SIM_REGROUP_NEVER,
        LOOM_SIM_REGROUP_LOCAL,
} loom_sim_oracle_regroup;

/* Whether the oracle may also form time-sliced groups (cfg.oracle_timeslice; docs/sim.md,
 * "Time-slicing one node set"): 2 or 3 jobs colocated on one node set in turn
 * (loom_slice_period), a rollout's tail overlapping the next member's rollout (TAILS), and also a
 * training beside the cycle's last tail (ELASTIC: a training on the GPUs a tail leaves). */
typedef enum loom_sim_timeslice {
        LOOM_SIM_SLICE_OFF = 0,
        LOOM_SIM_SLICE_TAILS,
        LOOM_SIM_SLICE_ELASTIC,
} loom_sim_timeslice;
#define LOOM_SIM_SLICE_MAX 3 /* members of a time-sliced group */

const char *loom_sim_timeslice_name(loom_sim_timeslice t); /* "off", "tails", "elastic" */
int loom_sim_timeslice_parse(const char *s, loom_sim_timeslice *out);

typedef struct loom_sim_cfg {
        loom_cluster_cfg cluster;
        loom_policy_cfg
            policy;       /* base for the core-driven policies; placer/migration set per run */
        double warm_s[4]; /* warm switch per model size 3/7/14/32B, seconds */
        /* Each job declares its own warm switch (loom_job_spec.t_switch = warm_s of its model
         * size) to the core; false: every job declares policy.warm_switch (the largest). */
        bool job_switch;
        double cold_s[4]; /* cold start per model size */
        /* Phases are sleeps, as the workers of `bench/sim2slurm.sh` run them: no state load (cold
         * start), no warm switch (both 0), no progress reports (no tail migration), and the
         * core plans no switch (loomd's default policy); false (the default): the model above. */
        bool sleep_phases;
        /* A provisioned node comes up boot_s seconds after PROVISION_NODE (billed from it): no
         * phase starts on it before; 0 (the default): at once. */
        double boot_s;
        /* Each worker of a job (its rollouts', its trainings') is ready launch_s seconds after
         * it is launched: at the job's admission once its nodes are up, both side by side, as
         * loomd's Slurm executor starts them (an srun step, then the worker's start; measured by
         * bench/sim2slurm.sh); a worker moved to other nodes is launched there once they are up
         * if they were provisioned for it, else when its phase starts. A phase waits for its own
         * worker only. Not for the private engines (solo, colocated), whose jobs start as one
         * process. 0 (the default): at once. */
        double launch_s;
        double colocated_roll_factor; /* rollout time on a training GPU / on a rollout GPU */
        double tail_slowdown;         /* a migrated tail's speed on its kept GPUs (1 = same) */
        bool record_series;           /* cost and GPUs over time (plots) */
        bool record_gantt;            /* every phase interval (micro-benchmarks) */
        /* Where the run's timeline goes, one JSON object per line (docs/sim.md, "The
         * timeline"): nodes, phase segments, stops, restarts, completions. NULL: none. Written
         * by every policy but the fluid ones (oracle, lb); the caller owns and closes it. */
        FILE *timeline;
        /* Called now and then with the fraction of jobs handled, and with -1 at the end; the
         * command line draws a bar with it. NULL: silent. */
        void (*progress)(void *ctx, const char *label, double frac);
        void *progress_ctx;
        /* drift and failures (live-system behaviour, docs/sim.md) */
        double restart_s[4];     /* migration-and-restart per model size 3/7/14/32B, seconds */
        int max_restarts;        /* a failed job is re-admitted this often; default 3 */
        double drift_trigger;    /* resubmit past this x declared (p95 bound, last 5); 1.05 */
        double drift_headroom;   /* a resubmitted profile is the observed worst x this; 1.15 */
        double regroup_period_h; /* regroup: hours between re-placements; default 1 */
        /* re-admit a job whose group cannot serve its learned profile only when its remaining
         * iterations' SLO budget is at least this many restart times; default 10 */
        double readmit_min_ratio;
        loom_sim_oracle_regroup oracle_regroup; /* the oracle's; default ALWAYS */
        /* the oracle also gives members rates > 1 where a group's single-rate period breaks a
         * budget, by the core's raising rule (a heuristic; slow): `loom sim --oracle-rates` */
        bool oracle_rates;
        /* what the oracle's exact search charges, in $/h, per job a regrouping moves (the
         * members of a group it forms that do not come from that group's largest old group);
         * 0 (the default): moves are free */
        double oracle_move_price;
        /* each group's training pool is its largest member's ask, as loom's groups keep the
         * pool they opened with; false (the default): sized freely, up to the sum of the
         * members' asks (a larger pool trains every member faster) */
        bool oracle_fixed_pools;
        /* each job a regrouping moves loses its migration-and-restart time (restart_s of its
         * model), as loom's moved members do, holding its place in its new group meanwhile;
         * false (the default): a move is instant */
        bool oracle_restarts;
        /* the oracle may also time-slice 2 or 3 jobs on one node set; default OFF (WEAVE's
         * groups and lone members only): `loom sim --oracle-timeslice off|tails|elastic` */
        loom_sim_timeslice oracle_timeslice;
} loom_sim_cfg;

void loom_sim_cfg_default(loom_sim_cfg *c);
/* The cluster of `loom sim --cluster ARG`: a preset ("h20-h800", the default; "h100" and
 * "h200", one GPU type in both pools) or the path of a JSON file holding a cluster object, or
 * a scenario or loomd file with one under "cluster". 0, or LOOM_EINVAL / LOOM_EIO with e naming
 * file:line:column and the field. */
int loom_sim_cluster_load(const char *arg, loom_cluster_cfg *out, loom_err *e);
/* The preset names, NULL-terminated. */
const char *const *loom_sim_cluster_presets(void);
/* The on/off setting called name ("job-switch", or a loom_policy_switch name of c's policy), or
 * NULL when there is none: one lookup for every `--NAME on|off` of loom sim. */
bool *loom_sim_switch(loom_sim_cfg *c, const char *name);
/* A progress hook (cfg.progress) that draws a bar with its label on stderr and clears it at
 * the end; ctx is unused. */
void loom_sim_progress_bar(void *ctx, const char *label, double frac);
/* A job's solo run time under its realisation: the admission-time load into host memory
 * (cold), one warm start per pool, every iteration's phases and a sync between iterations. */
loom_us loom_sim_job_solo_time(const loom_sim_job *j, const loom_sim_cfg *c);
/* Switch times for a model size (nearest of 3/7/14/32B). */
loom_us loom_sim_warm(const loom_sim_cfg *c, double model_b);
loom_us loom_sim_cold(const loom_sim_cfg *c, double model_b);

typedef struct loom_sim_point {
        double t_h;
        double cost_per_hour;
        int gpus[2]; /* provisioned per pool */
} loom_sim_point;

typedef struct loom_sim_interval {
        int job; /* workload index */
        loom_phase phase;
        loom_pool pool;
        int row; /* rollout node id, or training node id (first of the pool) */
        loom_us start, end;
        bool tail; /* a migrated tail on kept GPUs */
} loom_sim_interval;

typedef struct loom_sim_result {
        loom_sim_policy policy;
        bool ran;       /* false: the policy gave up (oracle); see note */
        char note[256]; /* e.g. where the oracle gave up */
        int jobs, jobs_done, jobs_rejected;
        double makespan_h;
        double total_cost;
        double avg_cost_per_hour;
        double peak_cost_per_hour;
        int peak_gpus[2];
        double busy_gpu_h[2], prov_gpu_h[2];
        double bubble[2];         /* 1 - busy / provisioned GPU time */
        double slo_attainment;    /* mean iteration <= SLO x solo mean, same realisation */
        double slo_attainment_wc; /* ... <= SLO x profiled (worst-case) solo iteration */
        double slowdown_p50, slowdown_p99;
        uint64_t decisions[3]; /* direct_pack, rollout_scale, new_group */
        uint64_t events;
        uint64_t migrations;
        uint64_t cold_starts, warm_switches;
        double wall_s;
        double *slowdown; /* per job (workload order); NaN if it did not finish */
        double *iter_s;   /* per job mean iteration time, seconds */
        int n_series;
        loom_sim_point *series;
        int n_gantt;
        loom_sim_interval *gantt;
        /* drift, failures, learned profiles (docs/sim.md) */
        loom_sim_drift drift;       /* of the workload */
        bool admits;                /* the policy admits through the core's SLO check */
        loom_admission admission;   /* its admission mode, when admits */
        double regroup_migration_h; /* job-hours regroup (and the oracle under
                                       cfg.oracle_restarts) spent migrating and restarting */
        uint64_t regroups;          /* regroupings applied (regroup; the oracle's that moved
                                       a job) */
        uint64_t restarts;          /* failed jobs re-admitted */
        uint64_t resubmits;         /* jobs re-admitted on their observed profile (drift,
                                       learned budget, moves) */
        uint64_t moves;             /* jobs moved to another group: loom's member moves (of
                                       the resubmits); regroup's and the oracle's, the jobs
                                       their regroupings moved (an arrival's own placement
                                       is not a move) */
        uint64_t replans;           /* learned-profile re-plans (admission p99/p95) */
        uint64_t slo_relaxed;       /* admissions whose SLO policy.slo_cap relaxed */
        uint64_t pool_grown;        /* training nodes joins added to pools (policy.pool_grow) */
        uint64_t pool_shrunk;       /* ... and departures took out again */
        bool multirate;             /* the run's placer could run members at rates > 1 */
        bool plan_tails;            /* ... and plan rollouts on their learned heads */
        uint64_t rate_sum, rate_n;  /* the rates jobs were admitted at: mean = sum / n */
        int jobs_failed;            /* failed after their last restart */
        double oracle_gap; /* oracle: largest proven relative gap to the optimum (0: exact) */
        /* loom: $ spent on the rollout nodes of groups with a single member, which pay a
         * rollout node beside their training nodes where the colocated baseline pays only
         * the training nodes: what colocating lone members could save at most */
        double lone_rollout_cost;
        /* loom: where the bill goes. group_cost[k] is the $ of groups of k members, [0] that
         * of lone members colocated on their training nodes; [..][0] their rollout nodes,
         * [..][1] their training nodes. lone_cost_by_slo splits group_cost[0][1] by the lone
         * member's SLO: below 1.25, 1.5, 1.75, and the rest. */
        double group_cost[LOOM_MAX_GROUP_SIZE + 1][2];
        double lone_cost_by_slo[4];
        /* oracle (which sizes training pools freely unless cfg.oracle_fixed_pools): the $ of
         * groups whose training pool holds more nodes than their largest member asked for;
         * loom's never do. The oracle fills group_cost and lone_cost_by_slo as loom does. */
        double grown_pool_cost;
        /* oracle under cfg.oracle_timeslice: the $ of its time-sliced groups */
        double timeslice_cost;
        /* the cluster it ran on: $/GPU-h of each pool's GPU type (what --json echoes) */
        loom_cluster_cfg cluster;
} loom_sim_result;

void loom_sim_result_free(loom_sim_result *r);

/* Run one policy over a workload. Returns 0 (a policy that gives up still returns 0 with
 * ran == false and a note), LOOM_EINVAL on a bad config, LOOM_ENOMEM. */
int loom_sim_run(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                 loom_sim_result *out, loom_err *e);

/* ---- where the cost goes (decompose.c, `loom sim --decompose`) ------------------------------ */

#define LOOM_SIM_RUNGS 11

/* One rung of the ladder from the fluid lower bound to loom; each adds one constraint. */
typedef struct loom_sim_rung {
        const char *name;  /* fluid, nodes, memory, informed, optimal, departures, local,
                              greedy, regroup, online, multirate (static) */
        const char *adds;  /* the constraint it adds (static) */
        bool measured;     /* false: not run (multirate until the policy has it) */
        double total_cost; /* $ */
        double avg_cost_per_hour;
        double slo_attainment;    /* NaN for the rungs that are not schedules */
        char note[256];           /* why a rung was not measured */
        double lone_rollout_cost; /* online, multirate: loom_sim_result.lone_rollout_cost */
        uint64_t moves;           /* schedule rungs: loom_sim_result.moves */
        /* the schedule rungs: loom_sim_result.group_cost, lone_cost_by_slo, grown_pool_cost */
        double group_cost[LOOM_MAX_GROUP_SIZE + 1][2];
        double lone_cost_by_slo[4];
        double grown_pool_cost;
} loom_sim_rung;

/* Measure every rung on workload w under cfg (its policy is loom's: admission, group size).
 * 0, LOOM_EINVAL or LOOM_ENOMEM. */
int loom_sim_decompose(const loom_sim_cfg *cfg, const loom_sim_workload *w,
                       loom_sim_rung out[LOOM_SIM_RUNGS], loom_err *e);
/* The ladder as a table (x_fluid: cost over the fluid bound; step: over the rung below), or
 * one JSON object per rung per line. */
void loom_sim_decompose_print(FILE *f, const loom_sim_rung *r, bool json);

/* What the cost targets need (`loom sim --decompose`, below the ladder): the `informed` oracle
 * (each job planned on its realised p99, held to its realised mean solo iteration) regrouping
 * in each mode, with every group's training pool sized freely and then fixed at its largest
 * member's ask as loom's groups keep it, against the colocated and Solo-D baselines. Rates as
 * cfg.oracle_rates says. */
#define LOOM_SIM_REGROUPINGS 10
#define LOOM_SIM_MOVE_PRICE 10.0 /* $/h per moved job of the `priced` rows */

typedef struct loom_sim_regrouping {
        const char *mode; /* always, departures, priced (departures at LOOM_SIM_MOVE_PRICE per
                             move), local, never (static) */
        bool fixed_pools; /* cfg.oracle_fixed_pools */
        bool restarts;    /* cfg.oracle_restarts: each moved job lost its restart */
        bool measured;    /* false: the oracle gave up (note) */
        char note[256];
        double total_cost; /* $ */
        double avg_cost_per_hour;
        uint64_t moves;
        double colocated_ratio, solo_ratio; /* the baseline's total over this one's */
        /* where its bill goes, as loom_sim_result's: by group size, and in grown pools */
        double group_cost[LOOM_MAX_GROUP_SIZE + 1][2];
        double lone_cost_by_slo[4];
        double grown_pool_cost;
} loom_sim_regrouping;

/* Measure every row on workload w under cfg. `ladder` (may be NULL) is loom_sim_decompose's of
 * the same workload and cfg: its `informed` rung is the free-pool `always` row, which is then
 * not run again. 0, LOOM_EINVAL or LOOM_ENOMEM. */
int loom_sim_decompose_regroupings(const loom_sim_cfg *cfg, const loom_sim_workload *w,
                                   const loom_sim_rung *ladder,
                                   loom_sim_regrouping out[LOOM_SIM_REGROUPINGS], loom_err *e);
/* The rows as a table, or one JSON object per row per line (key "regrouping"). With the
 * ladder (or NULL) the table ends with loom's row (its last rung), for comparison. */
void loom_sim_regroupings_print(FILE *f, const loom_sim_regrouping *r, const loom_sim_rung *ladder,
                                bool json);

/* What time-slicing could add (`loom sim --decompose`, last): the `informed` oracle regrouping
 * at every event with free pools, and never with fixed pools (each arrival placed once, as loom
 * places it), each with cfg.oracle_timeslice off, tails and elastic, against colocated. */
#define LOOM_SIM_SLICINGS 6
typedef struct loom_sim_slicing {
        loom_sim_timeslice mode;
        const char *regrouping; /* "always" (free pools) or "never" (fixed pools); static */
        bool measured;          /* false: the oracle gave up (note) */
        char note[256];
        double total_cost, avg_cost_per_hour;
        double colocated_ratio; /* colocated's total over this one's */
        double timeslice_cost;  /* $ in time-sliced groups */
} loom_sim_slicing;

int loom_sim_decompose_slicings(const loom_sim_cfg *cfg, const loom_sim_workload *w,
                                loom_sim_slicing out[LOOM_SIM_SLICINGS], loom_err *e);
void loom_sim_slicings_print(FILE *f, const loom_sim_slicing *s, bool json);

/* ---- the Figure 15 sweep ------------------------------------------------------------------- */

/* WEAVE Figure 15: (a) workload type, (b) SLO, (c) max group size, each varied alone around the
 * default (mixed, SLO ~ U(1,2), group size 5); every setting runs `seeds` seeds. */
typedef struct loom_sim_sweep_cfg {
        const loom_sim_trace *trace; /* the arrival window */
        loom_sim_cfg sim;            /* base config (series/gantt are ignored) */
        loom_sim_workload_cfg workload;
        int seeds;         /* default 3 */
        int threads;       /* worker threads; default 2 */
        unsigned policies; /* mask; default loom, random, greedy, lb */
} loom_sim_sweep_cfg;

typedef struct loom_sim_sweep_row {
        char figure;      /* 'a', 'b' or 'c' */
        char setting[24]; /* "balanced", "slo=1.2", "max_group=3", ... */
        loom_sim_policy policy;
        int seed;
        double cost_vs_lb, avg_cost_per_hour, slo_attainment, slo_attainment_wc, slowdown_p99;
        uint64_t events;
} loom_sim_sweep_row;

typedef struct loom_sim_sweep_out {
        int n;
        loom_sim_sweep_row *rows; /* owned; by figure, setting, policy, seed */
        uint64_t events;
        double cpu_s; /* summed run times of every policy run */
} loom_sim_sweep_out;

void loom_sim_sweep_cfg_default(loom_sim_sweep_cfg *c);
int loom_sim_sweep(const loom_sim_sweep_cfg *c, loom_sim_sweep_out *out, loom_err *e);
void loom_sim_sweep_out_free(loom_sim_sweep_out *o);

/* ---- reports ------------------------------------------------------------------------------- */

/* Results of several policies over one workload; cost ratios are taken against the `lb` and
 * `oracle` entries when present. */
void loom_sim_report_table(FILE *f, const loom_sim_result *r, int n);
void loom_sim_report_json(FILE *f, const loom_sim_result *r, int n);
void loom_sim_report_csv(FILE *f, const loom_sim_result *r, int n);

/* Write cost.svg/png, gpus.svg/png and slowdown.svg/png into dir (created if missing). */
int loom_sim_plot(const char *dir, const loom_sim_result *r, int n, loom_err *e);
/* A Gantt chart of one result's intervals: <dir>/<name>.svg and .png. */
int loom_sim_plot_gantt(const char *dir, const char *name, const char *title,
                        const loom_sim_result *r, const loom_sim_workload *w, loom_err *e);

/* Bar chart helper for the sweep: groups of bars (x labels) per series (policies). */
typedef struct loom_sim_bars {
        const char *title, *ylabel;
        int n_groups, n_series;
        const char *const *group_labels;
        const char *const *series_labels;
        const double *values; /* [group * n_series + series] */
} loom_sim_bars;
int loom_sim_plot_bars(const char *dir, const char *name, const loom_sim_bars *b, loom_err *e);

/* ---- a whole `loom sim` study (study.c, sweep_report.c) ------------------------------------ */

typedef enum loom_sim_format {
        LOOM_SIM_TABLE = 0, /* aligned columns for a terminal */
        LOOM_SIM_JSON,      /* one JSON object per line */
        LOOM_SIM_CSV,       /* a header line, then one row per line */
} loom_sim_format;

typedef enum loom_sim_study_kind {
        LOOM_SIM_STUDY_COMPARE = 0, /* the chosen policies side by side on one workload */
        LOOM_SIM_STUDY_DECOMPOSE,   /* the cost ladder (loom_sim_decompose); table or JSON */
        LOOM_SIM_STUDY_SWEEP,       /* Figure 15 a-c (loom_sim_sweep) on the trace window */
} loom_sim_study_kind;

typedef struct loom_sim_study_cfg {
        loom_sim_study_kind kind;
        const char *trace; /* Philly-style CSV; NULL: Poisson arrivals (compare, decompose) */
        int start, count;  /* the trace rows; default 165:300 */
        loom_sim_cfg sim;  /* its progress hook is called while policies run (not the sweep) */
        loom_sim_workload_cfg workload; /* noise.tail_threshold follows sim.policy */
        unsigned policies;              /* mask; 0: every policy, or the sweep's default */
        loom_sim_format format;
        const char *plot;     /* directory for plots (compare, sweep), or NULL */
        const char *per_job;  /* path of the per-job CSV (compare), or NULL */
        const char *timeline; /* path of the timeline, JSON lines (compare), or NULL */
        const char *cluster;  /* a preset or cluster file (loom_sim_cluster_load) over sim's */
        int seeds, threads;   /* sweep; default 3 and 2 */
} loom_sim_study_cfg;

void loom_sim_study_cfg_default(loom_sim_study_cfg *c);
/* Why c's settings cannot go together (a decompose study with policies, CSV, plots or a
 * per-job file; oracle settings where no oracle runs), or NULL when they can. */
const char *loom_sim_study_conflict(const loom_sim_study_cfg *c);
/* Run the study and write its plots and files, then print its report to f. On an error
 * (LOOM_EINVAL for a bad trace or configuration, LOOM_EIO, LOOM_ENOMEM) e says why (trace errors
 * start with file:line:column) and nothing is printed to f. */
int loom_sim_study(const loom_sim_study_cfg *c, FILE *f, loom_err *e);

/* Every job under every result that has per-job figures, one CSV row each (slowdown, mean
 * iteration time, SLO met); path is created or truncated. 0 or LOOM_EIO. */
int loom_sim_write_per_job(const char *path, const loom_sim_workload *w, const loom_sim_result *r,
                           int n, loom_err *e);

/* A sweep's rows averaged over their `seeds` seeds (with the min and max across them), printed
 * to f in fmt; with plot_dir, the fig15{a,b,c}_{cost,slo} bar charts are written there first and
 * nothing is printed if they fail. 0, LOOM_EINVAL, LOOM_EIO or LOOM_ENOMEM. */
int loom_sim_sweep_report(FILE *f, const loom_sim_sweep_out *out, int seeds, loom_sim_format fmt,
                          const char *plot_dir, loom_err *e);

/* The chart of a `loom plan sweep` (loom_plan_sweep): <dir>/plan-sweep.svg and .png, HetRL's
 * ratio to verl and StreamRL per instance; for the load-balancing ablation plan-balance.svg and
 * .png, the gain per instance. dir is created if missing. */
int loom_sim_plot_plan_sweep(const char *dir, const loom_plan_sweep_out *o, loom_err *e);

#endif
