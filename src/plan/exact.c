/*
 * exact.c - the exact solver: branch and bound over the same space as the heuristic search,
 * for small fleets.
 *
 * The space: a task grouping, a partition of every GPU among the groups, and one (dp, pp, tp)
 * per task that uses all of its group's GPUs in the canonical rank layout. GPUs of one class
 * (same type on the same machine) are interchangeable, so a group is a vector of per-class
 * counts, and a task's cost alone on such a vector is memoised. Groups are filled one at a
 * time; a partial plan is bounded by composing, per task, its cost alone on its vector (or, not
 * yet placed, its best cost on any vector) with the weight terms left out. Every term of the
 * composition only grows when the rest of the plan is added (a task's cost next to others is at
 * least its cost alone, weights cost >= 0), so the bound is valid and pruning never loses the
 * optimum. Leaves are priced by the full cost model and counted as evaluations. Memory (C3) is
 * checked exactly per group: every task has one tasklet on every GPU of its group.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

#define MAX_CLASSES 8
#define MAX_EXACT_DEV 32

typedef struct memo {
        double *cost, *mm, *wk; /* per strategy of the vector's size; NULL until needed */
        double lb;              /* min over strategies */
} memo;

typedef struct ex {
        plan_search *s;
        int nc;
        int cnt[MAX_CLASSES];
        int cls_dev[MAX_CLASSES][MAX_EXACT_DEV];
        int stride[MAX_CLASSES];
        int nvec;
        memo *m; /* [task position][vector] */
        double task_min[LOOM_PLAN_TASKS];
        /* the current partial plan */
        int rgs[LOOM_PLAN_TASKS];
        int ng;
        int vec[LOOM_PLAN_TASKS]; /* per group */
        int k[LOOM_PLAN_TASKS];   /* per task position: strategy index */
        double best;
        int64_t nodes;
        loom_plan alone; /* plan_task_alone's scratch */
} ex;

static int vec_size(const ex *x, int v)
{
        int n = 0;
        for (int c = 0; c < x->nc; c++)
                n += v / x->stride[c] % (x->cnt[c] + 1);
        return n;
}

static int vec_devs(const ex *x, int v, int *devs)
{
        int n = 0;
        for (int c = 0; c < x->nc; c++) {
                int k = v / x->stride[c] % (x->cnt[c] + 1);
                for (int i = 0; i < k; i++)
                        devs[n++] = x->cls_dev[c][i];
        }
        plan_sort_local(x->s->x.c, devs, n);
        return n;
}

/* Costs of task position i alone on vector v, for every strategy. */
static memo *get_memo(ex *x, int i, int v)
{
        memo *m = &x->m[(size_t)i * x->nvec + v];
        if (m->cost)
                return m;
        const plan_ctx *px = &x->s->x;
        int devs[MAX_EXACT_DEV];
        int n = vec_devs(x, v, devs);
        int ns = plan_n_strats(px, n);
        m->cost = malloc(sizeof(double) * (ns ? ns : 1) * 3);
        if (!m->cost)
                return NULL;
        m->mm = m->cost + (ns ? ns : 1);
        m->wk = m->mm + (ns ? ns : 1);
        m->lb = INFINITY;
        for (int k = 0; k < ns; k++) {
                loom_plan_strategy st = px->strats[px->strat_off[n] + k];
                m->cost[k] = plan_task_alone(px->c, px->w, px->tasks[i], &st, devs, n, &x->alone,
                                             &m->mm[k], &m->wk[k]);
                if (m->cost[k] < m->lb)
                        m->lb = m->cost[k];
        }
        return m;
}

/* The composition with the weight terms left out (see the file comment). */
static double compose_lb(const ex *x, const double *c)
{
        const plan_ctx *px = &x->s->x;
        double cost[LOOM_PLAN_TASKS] = {0};
        int grp[LOOM_PLAN_TASKS];
        for (int i = 0; i < px->nt; i++) {
                cost[px->tasks[i]] = c[i];
                grp[px->tasks[i]] = x->rgs[i];
        }
        double eta = px->w->eta;
        static const int inf_set[] = {LOOM_PLAN_REWARD, LOOM_PLAN_REF, LOOM_PLAN_CRITIC_INF};
        static const int train_set[] = {LOOM_PLAN_ACTOR_TRAIN, LOOM_PLAN_CRITIC_TRAIN};
        int ninf = px->w->grpo ? 2 : 3, ntr = px->w->grpo ? 1 : 2;
        double phi[2];
        const int *sets[2] = {inf_set, train_set};
        int ns[2] = {ninf, ntr};
        for (int s = 0; s < 2; s++) {
                double v[3];
                for (int i = 0; i < ns[s]; i++)
                        v[i] = cost[sets[s][i]];
                if (eta >= 0) {
                        phi[s] = loom_plan_phi(v, ns[s], eta);
                } else {
                        double per[LOOM_PLAN_TASKS] = {0}, mx = 0;
                        for (int i = 0; i < ns[s]; i++) {
                                per[grp[sets[s][i]]] += v[i];
                                if (per[grp[sets[s][i]]] > mx)
                                        mx = per[grp[sets[s][i]]];
                        }
                        phi[s] = mx;
                }
        }
        double rest = phi[0] + phi[1], gen = cost[LOOM_PLAN_GEN];
        bool alone = true;
        for (int i = 1; i < px->nt; i++)
                alone &= x->rgs[i] != x->rgs[0];
        if (px->w->async && alone)
                return gen > rest ? gen : rest;
        return gen + rest;
}

/* Lower bound with groups [0, upto) placed and strategies of positions [0, kdone) chosen. */
static double bound(ex *x, int upto, int kdone)
{
        const plan_ctx *px = &x->s->x;
        double c[LOOM_PLAN_TASKS];
        for (int i = 0; i < px->nt; i++) {
                int g = x->rgs[i];
                if (g >= upto) {
                        c[i] = x->task_min[i];
                        continue;
                }
                memo *m = get_memo(x, i, x->vec[g]);
                if (!m)
                        return INFINITY;
                c[i] = i < kdone ? m->cost[x->k[i]] : m->lb;
        }
        return compose_lb(x, c);
}

static bool group_fits(ex *x, int g, int kdone)
{
        const plan_ctx *px = &x->s->x;
        double mm = 0, wk = 0;
        for (int i = 0; i < kdone; i++) {
                if (x->rgs[i] != g)
                        continue;
                memo *m = get_memo(x, i, x->vec[g]);
                mm += m->mm[x->k[i]];
                if (m->wk[x->k[i]] > wk)
                        wk = m->wk[x->k[i]];
        }
        for (int c = 0; c < x->nc; c++)
                if (x->vec[g] / x->stride[c] % (x->cnt[c] + 1) > 0 &&
                    mm + wk > px->c->types[px->c->dev[x->cls_dev[c][0]].type].hbm_gb * 1e9)
                        return false;
        return true;
}

static void leaf(ex *x)
{
        plan_search *s = x->s;
        const plan_ctx *px = &s->x;
        plan_geno g;
        memset(&g, 0, sizeof g);
        int used[MAX_CLASSES] = {0}, off = 0;
        for (int k = 0; k < x->ng; k++) {
                int n = 0;
                for (int c = 0; c < x->nc; c++) {
                        int take = x->vec[k] / x->stride[c] % (x->cnt[c] + 1);
                        for (int i = 0; i < take; i++)
                                g.perm[off + n++] = (uint8_t)x->cls_dev[c][used[c]++];
                }
                g.size[k] = n;
                off += n;
        }
        for (int i = 0; i < px->nt; i++) {
                g.rgs[i] = x->rgs[i];
                g.strat[i] = (uint16_t)x->k[i];
        }
        double v = plan_eval(s, &g, &s->scratch);
        if (v < x->best && v < PLAN_INFEASIBLE)
                x->best = v;
}

static void strategies(ex *x, int i)
{
        const plan_ctx *px = &x->s->x;
        if (x->s->stop)
                return;
        if (i == px->nt) {
                leaf(x);
                return;
        }
        memo *m = get_memo(x, i, x->vec[x->rgs[i]]);
        int ns = plan_n_strats(px, vec_size(x, x->vec[x->rgs[i]]));
        for (int k = 0; k < ns && !x->s->stop; k++) {
                if (!isfinite(m->cost[k]))
                        continue;
                x->k[i] = k;
                x->nodes++;
                if (!group_fits(x, x->rgs[i], i + 1))
                        continue;
                if (bound(x, x->ng, i + 1) >= x->best)
                        continue;
                strategies(x, i + 1);
        }
}

static void groups(ex *x, int g, int *left, int n_left)
{
        if (x->s->stop)
                return;
        if (g == x->ng) {
                if (n_left == 0)
                        strategies(x, 0);
                return;
        }
        /* every vector within what is left; the last group takes the rest */
        int lo[MAX_CLASSES], v = 0;
        for (int c = 0; c < x->nc; c++)
                lo[c] = 0;
        for (;;) {
                int n = 0, idx = 0;
                for (int c = 0; c < x->nc; c++) {
                        n += lo[c];
                        idx += lo[c] * x->stride[c];
                }
                bool last = g == x->ng - 1;
                if (n >= 1 && n_left - n >= x->ng - g - 1 && (!last || n == n_left)) {
                        x->vec[g] = idx;
                        x->nodes++;
                        bool ok = true;
                        for (int i = 0; i < x->s->x.nt && ok; i++)
                                if (x->rgs[i] == g) {
                                        memo *m = get_memo(x, i, idx);
                                        ok = m && isfinite(m->lb);
                                }
                        if (ok && bound(x, g + 1, 0) < x->best) {
                                for (int c = 0; c < x->nc; c++)
                                        left[c] -= lo[c];
                                groups(x, g + 1, left, n_left - n);
                                for (int c = 0; c < x->nc; c++)
                                        left[c] += lo[c];
                        }
                }
                /* next vector (mixed radix over what is left) */
                int c = 0;
                while (c < x->nc && lo[c] == left[c]) {
                        lo[c] = 0;
                        c++;
                }
                if (c == x->nc)
                        break;
                lo[c]++;
                v++;
        }
        (void)v;
}

int plan_run_exact(plan_search *s, loom_err *e)
{
        const plan_ctx *px = &s->x;
        const loom_plan_cluster *c = px->c;
        if (px->n > MAX_EXACT_DEV)
                return loom_err_set(e, LOOM_ERANGE, "solver",
                                    "the exact solver handles fleets of up to %d GPUs, this one "
                                    "has %d",
                                    MAX_EXACT_DEV, px->n);
        ex *x = calloc(1, sizeof *x);
        if (!x)
                return LOOM_ENOMEM;
        x->s = s;
        int key[MAX_CLASSES][4];
        for (int d = 0; d < px->n; d++) {
                const loom_plan_device *v = &c->dev[d];
                int f = -1;
                for (int k = 0; k < x->nc; k++)
                        if (key[k][0] == v->type && key[k][1] == v->machine &&
                            key[k][2] == v->zone && key[k][3] == v->region)
                                f = k;
                if (f < 0) {
                        if (x->nc == MAX_CLASSES) {
                                free(x);
                                return loom_err_set(e, LOOM_ERANGE, "solver",
                                                    "the exact solver handles up to %d classes "
                                                    "of identical GPUs (type and machine)",
                                                    MAX_CLASSES);
                        }
                        f = x->nc++;
                        key[f][0] = v->type;
                        key[f][1] = v->machine;
                        key[f][2] = v->zone;
                        key[f][3] = v->region;
                }
                x->cls_dev[f][x->cnt[f]++] = d;
        }
        x->nvec = 1;
        for (int k = 0; k < x->nc; k++) {
                x->stride[k] = x->nvec;
                x->nvec *= x->cnt[k] + 1;
        }
        x->m = calloc((size_t)px->nt * x->nvec, sizeof *x->m);
        int rc = 0;
        if (!x->m) {
                rc = LOOM_ENOMEM;
                goto out;
        }
        for (int i = 0; i < px->nt; i++) {
                x->task_min[i] = INFINITY;
                for (int v = 1; v < x->nvec; v++) {
                        memo *m = get_memo(x, i, v);
                        if (!m) {
                                rc = LOOM_ENOMEM;
                                goto out;
                        }
                        if (m->lb < x->task_min[i])
                                x->task_min[i] = m->lb;
                }
        }
        /* An incumbent from a short heuristic run makes the bound bite early; the result does
         * not depend on it. */
        int64_t cap = s->budget;
        s->budget = 20000;
        rc = plan_run_sha_ea(s);
        s->stop = false;
        s->budget = cap > 0 ? s->evals + cap : 0;
        if (rc)
                goto out;
        x->best = s->best_cost;
        int rgs[203][LOOM_PLAN_TASKS];
        int ntg = loom_plan_groupings(px->nt, rgs, 203);
        for (int t = 0; t < ntg && !s->stop; t++) {
                memcpy(x->rgs, rgs[t], sizeof x->rgs);
                x->ng = 0;
                for (int i = 0; i < px->nt; i++)
                        if (x->rgs[i] + 1 > x->ng)
                                x->ng = x->rgs[i] + 1;
                if (x->ng > px->n)
                        continue;
                int left[MAX_CLASSES];
                memcpy(left, x->cnt, sizeof left);
                groups(x, 0, left, px->n);
        }
        s->optimal = !s->stop;
out:
        if (x->m)
                for (size_t i = 0; i < (size_t)px->nt * x->nvec; i++)
                        free(x->m[i].cost);
        free(x->m);
        free(x);
        return rc;
}
