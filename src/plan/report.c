/*
 * report.c - one planning run as `loom plan` makes it (the search, then optionally the layout
 * search near its plan) and the text report of the result: the groups, each task's strategy
 * and cost terms, and which term sets the iteration time.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan_int.h"

int loom_plan_run(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan_opts *o,
                  bool free_layout, loom_plan_report *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        double t0 = o->now ? o->now(o->now_ctx) : 0;
        int rc = loom_plan_search(c, w, o, &out->result, e);
        out->search_s = o->now ? o->now(o->now_ctx) - t0 : 0;
        if (rc)
                return rc;
        if (!out->result.found)
                return loom_err_set(e, LOOM_ENOENT, "cluster",
                                    "no plan fits the fleet's memory (%lld evaluations); try a "
                                    "smaller model or more GPUs",
                                    (long long)out->result.evaluations);
        if (!free_layout)
                return 0;
        out->free_layout = true;
        out->free_result = out->result;
        if (loom_plan_free_layout(c, w, &out->free_result.plan, 0, &out->free_s) ||
            loom_plan_evaluate(c, w, &out->free_result.plan, &out->free_result.cost, NULL))
                return loom_err_set(e, LOOM_EINVAL, "free_layout", "the layout search failed");
        return 0;
}

/* "group 0: 8 GPUs (4 A100, 4 L40S)" */
static void print_group(FILE *f, const loom_plan_cluster *c, const loom_plan *p, int g)
{
        int cnt[LOOM_PLAN_MAX_TYPES] = {0};
        for (int i = 0; i < p->group_size[g]; i++)
                cnt[c->dev[p->group_dev[g][i]].type]++;
        fprintf(f, "group %d: %d GPUs (", g, p->group_size[g]);
        bool first = true;
        for (int t = 0; t < c->n_types; t++)
                if (cnt[t]) {
                        fprintf(f, "%s%d %s", first ? "" : ", ", cnt[t], c->types[t].name);
                        first = false;
                }
        fprintf(f, ")\n");
}

/* One task's line: strategy, cost and its terms, the layer split of a balanced pipeline. */
static void print_task(FILE *f, const loom_plan_workflow *w, const loom_plan *p,
                       const loom_plan_cost *k, int t)
{
        const loom_plan_strategy *st = &p->st[t];
        fprintf(f, "  %-20s dp %2d pp %2d tp %d  %9.2f s  (compute %.2f, tp %.2f, pp %.2f",
                loom_plan_task_name(t), st->dp, st->pp, st->tp, k->task_s[t], k->comp_s[t],
                k->tp_s[t], k->pp_s[t]);
        if (t == LOOM_PLAN_GEN)
                fprintf(f, ", decode %.2f", k->hbm_s[t]);
        if (t == LOOM_PLAN_ACTOR_TRAIN || t == LOOM_PLAN_CRITIC_TRAIN)
                fprintf(f, ", dp %.2f, bubble %.2f", k->dp_s[t], k->bubble_s[t]);
        fprintf(f, ")%s", k->balanced[t] ? " balanced" : "");
        if (k->balanced[t] && st->pp > 1 && k->layers[t][0] * st->pp != w->model.layers) {
                fprintf(f, ", layers");
                for (int j = 0; j < st->pp && j < LOOM_PLAN_MAX_PP; j++)
                        fprintf(f, "%s%d", j ? "/" : " ", k->layers[t][j]);
        }
        fprintf(f, "\n");
}

/* The explanation: which term decides the iteration. */
static void print_why(FILE *f, const loom_plan_workflow *w, const loom_plan_cost *k)
{
        if (k->overlapped)
                fprintf(f,
                        "\nwhy: generation runs on its own GPUs and overlaps the rest (async); "
                        "the iteration is max(generation %.2f s, inference+training %.2f s) + "
                        "weight sync %.2f s.\n",
                        k->generation_s, k->rest_s, k->sync_s);
        else
                fprintf(f,
                        "\nwhy: generation %.2f s, then inference+training %.2f s, then weights "
                        "%.2f s, one after the other%s.\n",
                        k->generation_s, k->rest_s, k->reshard_s + k->sync_s,
                        w->async ? " (generation shares GPUs with other tasks, so async cannot "
                                   "overlap)"
                                 : "");
        int tl[LOOM_PLAN_TASKS];
        int nt = loom_plan_workflow_tasks(w, tl);
        int slow = tl[0];
        for (int x = 1; x < nt; x++)
                if (k->task_s[tl[x]] > k->task_s[slow])
                        slow = tl[x];
        fprintf(f, "     the longest task is %s (%.0f%% of the iteration).\n",
                loom_plan_task_name(slow), 100.0 * k->task_s[slow] / k->iteration_s);
}

void loom_plan_report_print(FILE *f, const char *fleet, const loom_plan_cluster *c,
                            const loom_plan_workflow *w, const loom_plan_opts *o,
                            const loom_plan_report *rep)
{
        const loom_plan_result *r = &rep->result;
        const loom_plan *p = &r->plan;
        const loom_plan_cost *k = &r->cost;
        fprintf(f, "fleet: %s (%d GPUs, %d machines, %d regions)\n", fleet[0] ? fleet : "-",
                c->n_dev, c->n_machines, c->n_regions);
        fprintf(f, "workflow: %s %s, %s, %d prompts x %d responses, %d/%d tokens\n",
                w->grpo ? "grpo" : "ppo", w->async ? "async" : "sync", w->model.name, w->batch,
                w->responses, w->seq_in, w->seq_out);
        fprintf(f, "solver: %s, seed %llu, %lld evaluations in %.2f s%s\n",
                loom_plan_solver_name(o->solver), (unsigned long long)o->seed,
                (long long)r->evaluations, rep->search_s, r->optimal ? " (proved optimal)" : "");
        fprintf(f, "iteration %.2f s, %.0f tokens/s\n\n", k->iteration_s, k->tokens_per_s);
        int tl[LOOM_PLAN_TASKS];
        int nt = loom_plan_workflow_tasks(w, tl);
        for (int g = 0; g < p->n_groups; g++) {
                print_group(f, c, p, g);
                for (int x = 0; x < nt; x++)
                        if (p->group[tl[x]] == g)
                                print_task(f, w, p, k, tl[x]);
        }
        fprintf(f, "weights: %s %.2f s\n", k->reshard_s > 0 || k->sync_s == 0 ? "reshard" : "sync",
                k->reshard_s + k->sync_s);
        print_why(f, w, k);
        if (rep->free_layout)
                fprintf(f, "free layout: %.2f s (%.2f%% below the plan)\n", rep->free_s,
                        100 * (1 - rep->free_s / k->iteration_s));
}
