/*
 * api.c - loom_plan_search: sets up a search run (context, budget, clock) and dispatches to
 * the solver; names of solvers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

static const char *solver_names[] = {"sha-ea", "ea", "exact", "verl", "streamrl"};

const char *loom_plan_solver_name(int solver)
{
        return solver >= 0 && solver <= LOOM_PLAN_STREAMRL ? solver_names[solver] : "?";
}

int loom_plan_solver_from_name(const char *name)
{
        for (int i = 0; i <= LOOM_PLAN_STREAMRL; i++)
                if (!strcmp(name, solver_names[i]))
                        return i;
        return -1;
}

/* With a time budget the plain EA still runs by evaluations: the rate of the first
 * evaluations sets it, and the clock stops the run in any case. (SHA-EA runs fixed-size
 * rounds until the clock stops it, sha.c.) */
static int64_t budget_for_time(plan_search *s)
{
        uint64_t rng = s->o->seed ^ 0x7177ULL;
        plan_geno g;
        memset(&g, 0, sizeof g);
        g.size[0] = s->x.n;
        double t0 = s->o->now(s->o->now_ctx);
        int k = 0;
        double el = 0;
        do {
                plan_geno_random(&s->x, &rng, &g);
                plan_decode(&s->x, &g, &s->scratch);
                plan_cost_search(s->x.c, s->x.w, &s->scratch);
                k++;
                el = s->o->now(s->o->now_ctx) - t0;
        } while (k < 200000 && el < 0.05);
        double rate = k / (el > 1e-6 ? el : 1e-6);
        /* Offspring also pay for the locality search: count them at half the raw rate. */
        int64_t b = (int64_t)(rate * 0.5 * s->o->time_s);
        return b < 1000 ? 1000 : b;
}

int loom_plan_search(const loom_plan_cluster *c, const loom_plan_workflow *w,
                     const loom_plan_opts *o, loom_plan_result *r, loom_err *e)
{
        int rc = loom_plan_cluster_check(c, e);
        if (rc)
                return rc;
        if ((rc = loom_plan_workflow_check(w, e)))
                return rc;
        if (o->solver < 0 || o->solver > LOOM_PLAN_STREAMRL)
                return loom_err_set(e, LOOM_EINVAL, "solver", "unknown solver %d", o->solver);
        if (o->time_s > 0 && !o->now)
                return loom_err_set(e, LOOM_EINVAL, "time", "a time budget needs a clock");
        if (o->budget < 0)
                return loom_err_set(e, LOOM_EINVAL, "budget", "must be >= 0");
        plan_search *s = calloc(1, sizeof *s);
        if (!s)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (plan_ctx_init(&s->x, c, w)) {
                free(s);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        s->o = o;
        s->best_cost = INFINITY;
        s->kept = INFINITY;
        s->t0 = o->now && o->time_s > 0 ? o->now(o->now_ctx) : 0;
        s->budget = o->budget > 0 ? o->budget : 300000;
        if (o->time_s > 0 && o->budget <= 0 && o->solver == LOOM_PLAN_EA)
                s->budget = budget_for_time(s);
        if (o->solver == LOOM_PLAN_VERL || o->solver == LOOM_PLAN_STREAMRL ||
            o->solver == LOOM_PLAN_EXACT)
                s->budget = o->budget; /* enumerations: no cap unless asked */
        switch (o->solver) {
        case LOOM_PLAN_SHA_EA:
                rc = plan_run_sha_ea(s);
                break;
        case LOOM_PLAN_EA:
                rc = plan_run_ea(s);
                break;
        case LOOM_PLAN_VERL:
                rc = plan_run_verl(s);
                break;
        case LOOM_PLAN_STREAMRL:
                rc = plan_run_streamrl(s);
                break;
        default:
                rc = plan_run_exact(s, e);
                break;
        }
        if (rc == LOOM_ENOMEM)
                loom_err_set(e, rc, "", "out of memory");
        memset(r, 0, sizeof *r);
        r->evaluations = s->evals;
        r->arms_groupings = s->arms_groupings;
        r->arms_splits = s->arms_splits;
        r->optimal = s->optimal && rc == 0;
        if (rc == 0 && isfinite(s->best_cost)) {
                r->found = true;
                r->plan = s->best;
                rc = loom_plan_evaluate(c, w, &r->plan, &r->cost, e);
        }
        plan_ctx_free(&s->x);
        free(s);
        return rc;
}

int loom_plan_sample(const loom_plan_cluster *c, const loom_plan_workflow *w, uint64_t *rng,
                     loom_plan *out)
{
        plan_ctx x;
        if (plan_ctx_init(&x, c, w))
                return LOOM_ENOMEM;
        int rgs[203][LOOM_PLAN_TASKS];
        int ntg = loom_plan_groupings(x.nt, rgs, 203);
        plan_geno *g = calloc(1, sizeof *g);
        if (!g) {
                plan_ctx_free(&x);
                return LOOM_ENOMEM;
        }
        do {
                memset(g, 0, sizeof *g);
                memcpy(g->rgs, rgs[plan_rng_int(rng, ntg)], sizeof g->rgs);
        } while (!plan_canonical(&x, g, rng));
        plan_geno_random(&x, rng, g);
        plan_decode(&x, g, out);
        free(g);
        plan_ctx_free(&x);
        return 0;
}
