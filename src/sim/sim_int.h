/*
 * sim_int.h - what the simulator's files share and nobody else sees: the random number
 * streams, the event heap and the per-policy run functions. Shared functions carry the
 * loom__sim_ prefix (internal, not API); the rest is static inline.
 */
#ifndef LOOM_SIM_INT_H
#define LOOM_SIM_INT_H

#include <cairo.h>
#include <math.h>
#include <string.h>

#include "loom/sim.h"

/* ---- random numbers --------------------------------------------------------------------- */

/* splitmix64: a stream is just its 64-bit state, so a stream keyed by (seed, job, iteration)
 * costs nothing to create; that is how the realisations stay common across policies. */
typedef struct sim_rng {
        uint64_t s;
} sim_rng;

static inline uint64_t sim_rng_next(sim_rng *r)
{
        return loom_splitmix64(&r->s);
}

/* A stream for a key path (seed, a, b): independent of how many draws other keys made. */
static inline sim_rng sim_rng_key(uint64_t seed, uint64_t a, uint64_t b)
{
        sim_rng r = {seed ^ UINT64_C(0x5851F42D4C957F2D)};
        r.s = sim_rng_next(&r) ^ (a * UINT64_C(0xD6E8FEB86659FD93));
        r.s = sim_rng_next(&r) ^ (b * UINT64_C(0xA0761D6478BD642F));
        return r;
}

/* Uniform in [0, 1). */
static inline double sim_rng_unit(sim_rng *r)
{
        return (double)(sim_rng_next(r) >> 11) * 0x1.0p-53;
}

static inline double sim_rng_uniform(sim_rng *r, double lo, double hi)
{
        return lo + (hi - lo) * sim_rng_unit(r);
}

/* A phase's realised length: the worst case times its drawn fraction, rounded the same way
 * everywhere so that closed forms and the event engine agree to the microsecond. */
static inline loom_us sim_phase_us(loom_us worst, float frac)
{
        return (loom_us)llround((double)worst * (double)frac);
}

/* ---- the event heap ----------------------------------------------------------------------- */

typedef enum sim_ev_type {
        SIM_EV_ARRIVAL = 0,
        SIM_EV_PROGRESS, /* a rollout reached the tail threshold */
        SIM_EV_END,      /* the running phase (or its tail) of a job ended */
        SIM_EV_FAIL,     /* the job's worker crashed */
        SIM_EV_RESUBMIT, /* a stopped job is re-admitted (after a failure or drift) */
        SIM_EV_REGROUP,  /* regroup: re-place every active job */
} sim_ev_type;

/* Ordered by time, then by insertion sequence, so equal-time events run in a fixed order. */
typedef struct sim_event {
        loom_us t;
        uint64_t seq;
        uint32_t job;     /* workload index */
        uint32_t version; /* stale when it differs from the job's current version */
        sim_ev_type type;
} sim_event;

typedef struct sim_heap {
        sim_event *a;
        size_t n, cap;
        uint64_t seq;
} sim_heap;

void loom__sim_heap_init(sim_heap *h);
void loom__sim_heap_free(sim_heap *h);
int loom__sim_heap_push(sim_heap *h, loom_us t, sim_ev_type type, uint32_t job, uint32_t version);
/* Push every job's arrival and the instants of its failures (hours after arrival). */
int loom__sim_heap_seed(sim_heap *h, const loom_sim_workload *w);
/* Pop the earliest event; false when empty. */
bool loom__sim_heap_pop(sim_heap *h, sim_event *out);

static inline void sim_progress(const loom_sim_cfg *c, loom_sim_policy p, double frac)
{
        if (c->progress)
                c->progress(c->progress_ctx, loom_sim_policy_name(p), frac);
}

/* ---- charts (plot.c) ---------------------------------------------------------------------- */

/* Paints one chart; runs once for the SVG surface and once for the PNG one. */
typedef void (*sim_draw_fn)(cairo_t *cr, const void *arg);
/* Create dir if missing; an error when it is not a directory. */
int loom__sim_plot_dir(const char *dir, loom_err *e);
/* Write <dir>/<name>.svg and .png, w x h points, both painted by fn(cr, arg). */
int loom__sim_render(const char *dir, const char *name, int w, int h, sim_draw_fn fn,
                     const void *arg, loom_err *e);

/* ---- drift, failures, restarts (drift.c) --------------------------------------------------- */

/* Pick every job's drift template, scale its drawn fractions, draw its failure instants. */
void loom__sim_drift_apply(loom_sim_workload *w, loom_sim_drift d, double mtbf_h, uint64_t seed);
/* Migration-and-restart time for a model size (nearest of 3/7/14/32B). */
loom_us loom__sim_restart(const loom_sim_cfg *c, double model_b);
/* The switch a job is planned at, which it declares to the core (loom_job_spec.t_switch): its
 * model's warm switch under cfg.job_switch, else the policy's (the largest). */
loom_us loom__sim_job_switch(const loom_sim_cfg *c, double model_b);

/* regroup.c: the cheapest grouping found for specs[0..n) on an empty scheduler: the submission
 * order, each job's group in it, and its $/h. */
int loom__sim_regroup_plan(const loom_sim_cfg *c, const loom_job_spec *sp, int n, uint64_t seed,
                           int *order, int *group_of, double *cost, loom_err *e);
/* Whether every group of s still meets every member's SLO when members have the profiles
 * cur_by_id[job id] (worst case, as admission plans). */
int loom__sim_regroup_feasible(const loom_sched *s, const loom_job_spec *cur_by_id, bool *ok);
/* Which of n jobs move when the grouping goes from old_g[i] to new_g[i] (group labels): each
 * new group keeps the old group it shares most members with (each old group at most once);
 * its members from that old group stay, everyone else moves. Fills moved[], returns how many
 * moved. */
int loom__sim_mark_moved(const int *old_g, const int *new_g, int n, bool *moved);
/* The index of s in names[0..n) (the tables of the loom_sim_*_name functions), or -1. */
static inline int loom__sim_name_find(const char *const *names, int n, const char *s)
{
        for (int i = 0; i < n; i++)
                if (!strcmp(s, names[i]))
                        return i;
        return -1;
}

/* The SLO band of a lone member (loom_sim_result.lone_cost_by_slo): below 1.25, 1.5, 1.75,
 * and the rest. */
static inline int loom__sim_slo_band(double slo)
{
        int b = (int)((slo - 1.0) / 0.25);
        return b < 0 ? 0 : b > 3 ? 3 : b;
}

/* ---- the timeline (tl.c; loom_sim_cfg.timeline, nothing when NULL) ------------------------ */

/* One phase segment: a phase on fixed nodes and GPUs, from start to end. */
typedef struct sim_tl_seg {
        int job; /* workload index */
        int64_t iter;
        loom_phase phase;
        loom_pool pool;
        int n_nodes;
        const loom_node_id *nodes;
        const int *gpus; /* per node */
        loom_us sw, work, start, end;
        bool tail, lost;
        int call, calls;
} sim_tl_seg;

/* The cluster's prices and every job of w, at the start of policy p's run. */
void loom__sim_tl_head(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p);
void loom__sim_tl_node(const loom_sim_cfg *c, loom_sim_policy p, loom_us t, loom_pool pool,
                       loom_node_id id, bool up);
void loom__sim_tl_seg(const loom_sim_cfg *c, loom_sim_policy p, const sim_tl_seg *s);
/* "stop" (why), "restart" (ready >= 0), "done", "rejected"; why NULL and ready < 0: not said. */
void loom__sim_tl_event(const loom_sim_cfg *c, loom_sim_policy p, const char *ev, int job,
                        loom_us t, const char *why, loom_us ready);

/* ---- runs --------------------------------------------------------------------------------- */

/* loom's bill by group kind (loom_sim_result.group_cost, lone_cost_by_slo) into object o as
 * "group_cost" and "lone_cost_by_slo", when anything was measured (report.c). */
struct json_t;
void loom__sim_group_cost_json(struct json_t *o, const double (*cost)[2], const double *by_slo);

/* w with every job planned on its realised q-quantile phase times and held to its realised
 * mean solo iteration, its realisations re-expressed so every phase lasts as long as in w (the
 * `informed` rung, decompose.c). 0 or LOOM_ENOMEM; free with loom_sim_workload_free. */
int loom__sim_realised_profiles(const loom_sim_workload *w, double q, loom_sim_workload *out);

int loom__sim_run_core(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                       loom_sim_result *r, loom_err *e);
int loom__sim_run_private(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                          loom_sim_result *r, loom_err *e);
int loom__sim_run_oracle(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_result *r,
                         loom_err *e);
/* Gavel+ (gavel.c): job-level time fractions on shared node sets, no phase interleaving. */
int loom__sim_run_gavel(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_result *r,
                        loom_err *e);
int loom__sim_run_lb(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_result *r,
                     loom_err *e);

/* Shared bookkeeping: cost and GPU integrals, peaks, the time series. */
typedef struct sim_meter {
        const loom_cluster_cfg *cl;
        loom_us last;
        int nodes[2];
        int busy[2];    /* GPUs running a phase */
        double cost_us; /* $/h x us, summed */
        double busy_us[2], prov_us[2];
        loom_sim_result *r;
        bool series;
        size_t cap_series;
} sim_meter;

void loom__sim_meter_init(sim_meter *m, const loom_cluster_cfg *cl, loom_sim_result *r,
                          bool series);
/* Advance the integrals to `now` (before any change at now). */
void loom__sim_meter_advance(sim_meter *m, loom_us now);
/* Change provisioned nodes (+1/-1) of a pool at now, recording a series point. */
int loom__sim_meter_nodes(sim_meter *m, loom_us now, loom_pool p, int delta);
void loom__sim_meter_busy(sim_meter *m, loom_us now, loom_pool p, int delta);
/* Fill the cost/GPU figures of r at the end of the run. */
void loom__sim_meter_finish(sim_meter *m, loom_us end);

/* Slowdown and SLO figures from per-job completion times (-1 = not finished) and first
 * rollout starts (NULL: arrivals). */
int loom__sim_finish_jobs(const loom_sim_cfg *c, const loom_sim_workload *w, const loom_us *done_at,
                          const loom_us *start_at, loom_sim_result *r);

int loom__sim_gantt_add(loom_sim_result *r, size_t *cap, const loom_sim_interval *iv);
/* Append a point to r's cost/GPU series (capacity in *cap); 0 or LOOM_ENOMEM. */
int loom__sim_series_add(loom_sim_result *r, size_t *cap, loom_sim_point pt);

/* The q-quantile (0..1) of sorted v[0..n) by linear interpolation, NaN when n == 0. */
static inline double sim_pct(const double *v, int n, double q)
{
        return n > 0 ? loom_quantile(v, (size_t)n, q) : NAN;
}

#endif
