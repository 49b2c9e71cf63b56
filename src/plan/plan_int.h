/* plan_int.h - shared by the files of src/plan: the search context and genotypes. */
#ifndef LOOM_PLAN_INT_H
#define LOOM_PLAN_INT_H

#include "loom/plan.h"

/* Costs at or above this mark a plan that breaks C3; the excess grows with the overflow in GB,
 * so the search can walk towards plans that fit. */
#define PLAN_INFEASIBLE 1e7
double plan_cost_search(const loom_plan_cluster *c, const loom_plan_workflow *w,
                        const loom_plan *p);
/* Task t alone on devs (every one used, in this order) with strategy st: its cost when only its
 * own tasklets sit on those GPUs (a lower bound of its cost next to others), and its
 * per-tasklet model memory and working set. INFINITY means exactly "does not fit alone": the
 * exact solver prunes on it, so the function allocates nothing and cannot fail otherwise; p is
 * the caller's scratch plan. */
double plan_task_alone(const loom_plan_cluster *c, const loom_plan_workflow *w, int t,
                       const loom_plan_strategy *st, const int *devs, int n, loom_plan *p,
                       double *model_mem, double *work_mem);
/* Model memory of one tasklet of task t under st; *work gets its working set. */
double plan_tasklet_mem(const loom_plan_workflow *w, int t, const loom_plan_strategy *st,
                        double *work);
bool plan_strategy_ok(const loom_plan_workflow *w, const loom_plan_strategy *st, int group_n);

/* Workflow + fleet facts every search step needs. strats[strat_off[s] ..
 * strat_off[s+1]) are the feasible (dp, pp, tp) for a group of s GPUs. */
typedef struct plan_ctx {
        const loom_plan_cluster *c;
        const loom_plan_workflow *w;
        int n;  /* devices */
        int nt; /* tasks of the workflow */
        int tasks[LOOM_PLAN_TASKS];
        loom_plan_strategy *strats;
        int *strat_off;
} plan_ctx;

int plan_ctx_init(plan_ctx *x, const loom_plan_cluster *c, const loom_plan_workflow *w);
void plan_ctx_free(plan_ctx *x);
int plan_n_strats(const plan_ctx *x, int size);

/* A genotype (see search.c). rgs/strat/local are indexed by the workflow's task position. */
typedef struct plan_geno {
        double cost;
        int rgs[LOOM_PLAN_TASKS];
        int size[LOOM_PLAN_TASKS];
        uint16_t strat[LOOM_PLAN_TASKS];
        uint8_t perm[LOOM_PLAN_MAX_DEV];
} plan_geno;

/* One search run: the budget, the best plan so far and the counter of evaluations. */
typedef struct plan_search {
        plan_ctx x;
        const loom_plan_opts *o;
        int64_t budget;
        int64_t hard; /* > 0: no evaluation past this count, whatever budget says */
        int64_t evals;
        double t0;
        bool stop;
        bool optimal;
        int arms_groupings, arms_splits;
        double best_cost;
        double kept; /* the best cost of earlier SHA-EA rounds (INFINITY: none) */
        loom_plan best;
        plan_geno best_geno;
        loom_plan scratch;
} plan_search;

int plan_rng_int(uint64_t *s, int n);
/* Order devices by (region, machine, type): the rank layout of every task. */
void plan_sort_local(const loom_plan_cluster *c, int *a, int n);
void plan_decode(const plan_ctx *x, const plan_geno *g, loom_plan *p);
double plan_eval(plan_search *s, const plan_geno *g, loom_plan *scratch);
void plan_geno_random(const plan_ctx *x, uint64_t *rng, plan_geno *g);
void plan_mutate(const plan_ctx *x, uint64_t *rng, plan_geno *g, bool custom, bool structure);
bool plan_canonical(const plan_ctx *x, plan_geno *g, uint64_t *rng);
bool plan_local_search(const plan_ctx *x, plan_geno *g, int max_steps);
void plan_polish(plan_search *s, plan_geno *g);
bool plan_regroup(plan_search *s, plan_geno *g, const int *lab, const int *into);

int plan_run_sha_ea(plan_search *s);
int plan_run_ea(plan_search *s);
int plan_run_verl(plan_search *s);
int plan_run_streamrl(plan_search *s);
int plan_run_exact(plan_search *s, loom_err *e);

#endif
