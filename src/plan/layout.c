/*
 * layout.c - a local search outside the search space's layout rule, to measure what the rule
 * costs. The space every solver walks has each task use all GPUs of its group, ranks in
 * (region, machine, type) order. HetRL's levels 4 and 5 also allow a task fewer GPUs than its
 * group and any tasklet-to-GPU mapping. Starting from a plan (the exact solver's optimum, say),
 * this tries, task by task, every strategy with dp*pp*tp up to the group's size on several rank
 * orders (canonical, fastest GPUs first, most HBM first, machines interleaved), then pairwise
 * swaps of ranks, keeping any change that lowers the cost, until nothing does or the budget is
 * spent. It finds better plans where they exist nearby; finding none is evidence, not proof.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

typedef struct lay {
        const loom_plan_cluster *c;
        const loom_plan_workflow *w;
        int64_t evals, budget;
        double best;
} lay;

static double try_plan(lay *L, const loom_plan *p)
{
        L->evals++;
        return loom_plan_cost_fast(L->c, L->w, p);
}

/* Stable insertion sort of devices by a key, highest first (n is small). */
static void sort_desc(const loom_plan_cluster *c, int *a, int n, bool hbm)
{
        for (int i = 1; i < n; i++) {
                int v = a[i], j = i;
                const loom_plan_gpu *x = &c->types[c->dev[v].type];
                double kv = hbm ? x->hbm_gb : x->tflops;
                while (j > 0) {
                        const loom_plan_gpu *y = &c->types[c->dev[a[j - 1]].type];
                        if ((hbm ? y->hbm_gb : y->tflops) >= kv)
                                break;
                        a[j] = a[j - 1];
                        j--;
                }
                a[j] = v;
        }
}

/* Rank orders of a group's devices: canonical, by TFLOPS, by HBM, machines interleaved. */
static int orders(const loom_plan_cluster *c, const int *dev, int n, int out[4][LOOM_PLAN_MAX_DEV])
{
        memcpy(out[0], dev, n * sizeof *dev);
        plan_sort_local(c, out[0], n);
        memcpy(out[1], out[0], n * sizeof *dev);
        memcpy(out[2], out[0], n * sizeof *dev);
        sort_desc(c, out[1], n, false);
        sort_desc(c, out[2], n, true);
        int k = 0, used[LOOM_PLAN_MAX_DEV] = {0};
        while (k < n) {
                int last_m = -1;
                for (int i = 0; i < n && k < n; i++)
                        if (!used[i] && c->dev[out[0][i]].machine != last_m) {
                                out[3][k++] = out[0][i];
                                used[i] = 1;
                                last_m = c->dev[out[0][i]].machine;
                        }
        }
        return 4;
}

/* One task: every strategy up to the group's size on every order; best kept in *p. */
static bool improve_task(lay *L, loom_plan *p, int t)
{
        int g = p->group[t], n = p->group_size[g];
        int ord[4][LOOM_PLAN_MAX_DEV];
        int no = orders(L->c, p->group_dev[g], n, ord);
        loom_plan q = *p;
        bool better = false;
        for (int tp = 1; tp <= 8; tp *= 2)
                for (int pp = 1; pp * tp <= n && pp <= LOOM_PLAN_MAX_PP; pp++)
                        for (int dp = 1; dp * pp * tp <= n; dp++) {
                                loom_plan_strategy st = {dp, pp, tp};
                                if (!plan_strategy_ok(L->w, &st, n))
                                        continue;
                                for (int o = 0; o < no; o++) {
                                        if (L->evals >= L->budget)
                                                return better;
                                        q.st[t] = st;
                                        memcpy(q.order[t], ord[o], n * sizeof(int));
                                        double v = try_plan(L, &q);
                                        if (v < L->best * (1 - 1e-12)) {
                                                L->best = v;
                                                *p = q;
                                                better = true;
                                        }
                                }
                        }
        return better;
}

/* One task: best-improvement swaps of two ranks (or a rank with an unused GPU of the group). */
static bool swap_task(lay *L, loom_plan *p, int t)
{
        int g = p->group[t], n = p->group_size[g];
        bool better = false, again = true;
        while (again) {
                again = false;
                loom_plan q = *p;
                for (int a = 0; a < n; a++)
                        for (int b = a + 1; b < n; b++) {
                                if (L->evals >= L->budget)
                                        return better;
                                int *o = q.order[t];
                                int x = o[a];
                                o[a] = o[b];
                                o[b] = x;
                                double v = try_plan(L, &q);
                                if (v < L->best * (1 - 1e-12)) {
                                        L->best = v;
                                        *p = q;
                                        better = again = true;
                                } else {
                                        o[b] = o[a];
                                        o[a] = x;
                                }
                        }
        }
        return better;
}

int loom_plan_free_layout(const loom_plan_cluster *c, const loom_plan_workflow *w, loom_plan *p,
                          int64_t budget, double *cost)
{
        int tasks[LOOM_PLAN_TASKS];
        int nt = loom_plan_workflow_tasks(w, tasks);
        lay L = {c, w, 0, budget > 0 ? budget : 2000000, INFINITY};
        /* the group's devices in full in each task's order, so swaps can bring unused ones in */
        for (int x = 0; x < nt; x++) {
                int t = tasks[x], g = p->group[t], n = p->group_size[g];
                int used = p->st[t].dp * p->st[t].pp * p->st[t].tp, k = used;
                for (int i = 0; i < n; i++) {
                        bool in = false;
                        for (int j = 0; j < used; j++)
                                in |= p->order[t][j] == p->group_dev[g][i];
                        if (!in)
                                p->order[t][k++] = p->group_dev[g][i];
                }
        }
        L.best = try_plan(&L, p);
        if (!isfinite(L.best))
                return LOOM_EINVAL;
        bool more = true;
        while (more && L.evals < L.budget) {
                more = false;
                for (int x = 0; x < nt; x++)
                        more |= improve_task(&L, p, tasks[x]);
                for (int x = 0; x < nt; x++)
                        more |= swap_task(&L, p, tasks[x]);
        }
        *cost = L.best;
        return 0;
}
