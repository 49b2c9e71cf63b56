/*
 * plan_json.c - the JSON forms of a `loom plan` result: the report (`--json`: the run, the
 * plan's groups and tasks with every cost term) and the loom job spec built from a plan
 * (`--emit-job`, docs/formats.md).
 */
#include <stdio.h>

#include "loom/plan.h"
#include "loom/spec.h"

/* {gpus_count, gpus, types} of each group */
static json_t *groups_json(const loom_plan_cluster *c, const loom_plan *p)
{
        json_t *groups = json_array();
        for (int g = 0; g < p->n_groups; g++) {
                json_t *ids = json_array(), *types = json_object();
                for (int i = 0; i < p->group_size[g]; i++) {
                        int d = p->group_dev[g][i];
                        json_array_append_new(ids, json_integer(d));
                        const char *tn = c->types[c->dev[d].type].name;
                        json_t *v = json_object_get(types, tn);
                        json_object_set_new(types, tn,
                                            json_integer(v ? json_integer_value(v) + 1 : 1));
                }
                json_array_append_new(groups,
                                      json_pack("{s:i,s:o,s:o}", "gpus_count", p->group_size[g],
                                                "gpus", ids, "types", types));
        }
        return groups;
}

static json_t *task_json(const loom_plan *p, const loom_plan_cost *k, int t)
{
        const loom_plan_strategy *st = &p->st[t];
        json_t *ids = json_array();
        for (int i = 0; i < st->dp * st->pp * st->tp; i++)
                json_array_append_new(ids, json_integer(p->order[t][i]));
        json_t *layers = json_array();
        for (int j = 0; j < st->pp && j < LOOM_PLAN_MAX_PP; j++)
                json_array_append_new(layers, json_integer(k->layers[t][j]));
        return json_pack("{s:s,s:i,s:i,s:i,s:i,s:o,s:o,s:b,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "task",
                         loom_plan_task_name(t), "group", p->group[t], "dp", st->dp, "pp", st->pp,
                         "tp", st->tp, "gpus", ids, "layers", layers, "balanced", k->balanced[t],
                         "cost_s", k->task_s[t], "compute_s", k->comp_s[t], "tp_s", k->tp_s[t],
                         "pp_s", k->pp_s[t], "dp_s", k->dp_s[t], "bubble_s", k->bubble_s[t],
                         "hbm_s", k->hbm_s[t]);
}

json_t *loom_plan_to_json(const loom_plan_cluster *c, const loom_plan_workflow *w,
                          const loom_plan_result *r)
{
        const loom_plan *p = &r->plan;
        const loom_plan_cost *k = &r->cost;
        json_t *tasks = json_array();
        int tl[LOOM_PLAN_TASKS];
        int nt = loom_plan_workflow_tasks(w, tl);
        for (int x = 0; x < nt; x++)
                json_array_append_new(tasks, task_json(p, k, tl[x]));
        return json_pack("{s:o,s:o,s:f,s:f,s:f,s:f,s:b}", "groups", groups_json(c, p), "tasks",
                         tasks, "generation_s", k->generation_s, "rest_s", k->rest_s, "reshard_s",
                         k->reshard_s, "sync_s", k->sync_s, "overlapped", k->overlapped);
}

json_t *loom_plan_report_to_json(const char *fleet, const loom_plan_cluster *c,
                                 const loom_plan_workflow *w, const loom_plan_opts *o,
                                 const loom_plan_report *rep)
{
        const loom_plan_result *r = &rep->result;
        json_t *out = json_pack(
            "{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:f,s:f,s:f,s:b,s:o}", "cluster", fleet, "workflow",
            w->grpo ? "grpo" : "ppo", "mode", w->async ? "async" : "sync", "model", w->model.name,
            "solver", loom_plan_solver_name(o->solver), "seed", (json_int_t)o->seed, "evaluations",
            (json_int_t)r->evaluations, "search_s", rep->search_s, "iteration_s",
            r->cost.iteration_s, "tokens_per_s", r->cost.tokens_per_s, "optimal", r->optimal,
            "plan", loom_plan_to_json(c, w, r));
        if (out && rep->free_layout) {
                json_object_set_new(out, "free_layout_s", json_real(rep->free_s));
                json_object_set_new(out, "free_layout_plan",
                                    loom_plan_to_json(c, w, &rep->free_result));
        }
        return out;
}

static int round_up(int v, int m)
{
        return (v + m - 1) / m * m;
}

json_t *loom_plan_job_to_json(const loom_plan_workflow *w, const loom_plan_result *r, double slo,
                              int gpus_per_node)
{
        loom_plan_job j;
        loom_plan_to_job(&r->plan, &r->cost, &j);
        char id[64];
        snprintf(id, sizeof id, "%s-%s-%s", w->grpo ? "grpo" : "ppo", w->async ? "async" : "sync",
                 w->model.name);
        return json_pack("{s:s,s:i,s:i,s:f,s:f,s:f,s:f}", "id", id, "rollout_gpus",
                         round_up(j.rollout_gpus, gpus_per_node), "train_gpus",
                         round_up(j.train_gpus, gpus_per_node), "t_roll_s", j.t_roll_s, "t_train_s",
                         j.t_train_s, "sync_s", j.sync_s, "slo", slo);
}
