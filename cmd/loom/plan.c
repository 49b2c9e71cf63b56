/*
 * plan.c - `loom plan`: place one RL workflow on a heterogeneous fleet with HetRL's cost model
 * and search, print the plan (text or JSON) or a loom job spec built from it. `loom plan sweep`
 * lives in plan_sweep.c, the file decoders in plan_input.c.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "loom/spec.h"
#include "plan_cmd.h"

static void usage(FILE *f)
{
        fprintf(
            f, "usage: loom plan --cluster FILE [--workflow ppo|grpo|FILE] [--mode sync|async]\n"
               "                 [--model qwen3-4b|qwen3-8b|qwen3-14b] [--solver NAME]\n"
               "                 [--budget N | --time S] [--seed N] [--json | --emit-job]\n"
               "       loom plan sweep [--help]\n"
               "\n"
               "Splits an RL workflow (PPO: actor generation, reward/reference/critic inference,\n"
               "actor and critic training; GRPO: no critic) into task groups, gives each group\n"
               "GPUs of the fleet, picks (dp, pp, tp) per task and maps tasklets to GPUs so the\n"
               "modelled iteration time is smallest (HetRL). Prints the plan with per-task costs,\n"
               "iteration time and tokens/s.\n"
               "\n"
               "  --cluster FILE   the fleet: devices, GPU types, links (docs/plan.md;\n"
               "                   examples/plan/*.json)\n"
               "  --workflow W     ppo (default), grpo, or a workflow JSON file\n"
               "  --mode M         sync (default) or async; overrides the workflow file\n"
               "  --model M        qwen3-4b, qwen3-8b (default), qwen3-14b\n"
               "  --solver S       sha-ea (default), ea, exact, verl, streamrl\n"
               "  --budget N       cost-model evaluations (default 300000; deterministic)\n"
               "  --time S         wall-clock seconds instead of a count\n"
               "  --seed N         random seed (default 1); same seed and budget, same plan\n"
               "  --json           one JSON object: iteration_s, tokens_per_s, evaluations,\n"
               "                   search_s, plan\n"
               "  --emit-job       a loom job spec (docs/formats.md) for `loom place`/loomd\n"
               "  --balance        HetRL's load balancing: samples by replica speed, uneven\n"
               "                   pipeline stages (--no-balance: off; default: workflow file)\n"
               "  --free-layout    then search near the plan outside the layout rule (tasks on\n"
               "                   fewer GPUs than their group, other rank orders): what it costs\n"
               "  --slo X          the job spec's SLO (default 1.5)\n"
               "  --gpus-per-node N  GPU counts of the job spec round up to this (default 8)\n"
               "\n"
               "Exit status: 0 planned, 1 invalid input or nothing fits, 2 bad usage.\n");
}

double plan_now(void *ctx)
{
        (void)ctx;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void print_err(const char *path, const loom_err *e)
{
        if (e->line > 0)
                fprintf(stderr, "loom plan: %s:%d:%d: %s\n", path, e->line, e->col, e->msg);
        else
                fprintf(stderr, "loom plan: %s: %s\n", path, e->msg);
}

static int load_cluster(const char *path, loom_plan_cluster *c, char *name, size_t nlen)
{
        loom_err e = {0};
        char *text;
        size_t len;
        if (loom_spec_read_file(path, &text, &len, &e)) {
                print_err(path, &e);
                return 1;
        }
        int rc = loom_plan_cluster_parse(text, len, c, name, nlen, &e);
        free(text);
        if (rc) {
                print_err(path, &e);
                return 1;
        }
        return 0;
}

static json_t *plan_json(const loom_plan_cluster *c, const loom_plan_workflow *w,
                         const loom_plan_result *r)
{
        const loom_plan *p = &r->plan;
        const loom_plan_cost *k = &r->cost;
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
        json_t *tasks = json_array();
        int tl[LOOM_PLAN_TASKS];
        int nt = loom_plan_workflow_tasks(w, tl);
        for (int x = 0; x < nt; x++) {
                int t = tl[x];
                const loom_plan_strategy *st = &p->st[t];
                json_t *ids = json_array();
                for (int i = 0; i < st->dp * st->pp * st->tp; i++)
                        json_array_append_new(ids, json_integer(p->order[t][i]));
                json_t *layers = json_array();
                for (int j = 0; j < st->pp && j < LOOM_PLAN_MAX_PP; j++)
                        json_array_append_new(layers, json_integer(k->layers[t][j]));
                json_array_append_new(
                    tasks,
                    json_pack("{s:s,s:i,s:i,s:i,s:i,s:o,s:o,s:b,s:f,s:f,s:f,s:f,s:f,s:f,s:f}",
                              "task", loom_plan_task_name(t), "group", p->group[t], "dp", st->dp,
                              "pp", st->pp, "tp", st->tp, "gpus", ids, "layers", layers, "balanced",
                              k->balanced[t], "cost_s", k->task_s[t], "compute_s", k->comp_s[t],
                              "tp_s", k->tp_s[t], "pp_s", k->pp_s[t], "dp_s", k->dp_s[t],
                              "bubble_s", k->bubble_s[t], "hbm_s", k->hbm_s[t]));
        }
        return json_pack("{s:o,s:o,s:f,s:f,s:f,s:f,s:b}", "groups", groups, "tasks", tasks,
                         "generation_s", k->generation_s, "rest_s", k->rest_s, "reshard_s",
                         k->reshard_s, "sync_s", k->sync_s, "overlapped", k->overlapped);
}

static void print_text(const char *cname, const loom_plan_cluster *c, const loom_plan_workflow *w,
                       const loom_plan_opts *o, const loom_plan_result *r, double search_s)
{
        const loom_plan *p = &r->plan;
        const loom_plan_cost *k = &r->cost;
        printf("fleet: %s (%d GPUs, %d machines, %d regions)\n", cname[0] ? cname : "-", c->n_dev,
               c->n_machines, c->n_regions);
        printf("workflow: %s %s, %s, %d prompts x %d responses, %d/%d tokens\n",
               w->grpo ? "grpo" : "ppo", w->async ? "async" : "sync", w->model.name, w->batch,
               w->responses, w->seq_in, w->seq_out);
        printf("solver: %s, seed %llu, %lld evaluations in %.2f s%s\n",
               loom_plan_solver_name(o->solver), (unsigned long long)o->seed,
               (long long)r->evaluations, search_s, r->optimal ? " (proved optimal)" : "");
        printf("iteration %.2f s, %.0f tokens/s\n\n", k->iteration_s, k->tokens_per_s);
        int tl[LOOM_PLAN_TASKS];
        int nt = loom_plan_workflow_tasks(w, tl);
        for (int g = 0; g < p->n_groups; g++) {
                int cnt[LOOM_PLAN_MAX_TYPES] = {0};
                for (int i = 0; i < p->group_size[g]; i++)
                        cnt[c->dev[p->group_dev[g][i]].type]++;
                printf("group %d: %d GPUs (", g, p->group_size[g]);
                bool first = true;
                for (int t = 0; t < c->n_types; t++)
                        if (cnt[t]) {
                                printf("%s%d %s", first ? "" : ", ", cnt[t], c->types[t].name);
                                first = false;
                        }
                printf(")\n");
                for (int x = 0; x < nt; x++) {
                        int t = tl[x];
                        if (p->group[t] != g)
                                continue;
                        const loom_plan_strategy *st = &p->st[t];
                        printf("  %-20s dp %2d pp %2d tp %d  %9.2f s  (compute %.2f, tp %.2f, "
                               "pp %.2f",
                               loom_plan_task_name(t), st->dp, st->pp, st->tp, k->task_s[t],
                               k->comp_s[t], k->tp_s[t], k->pp_s[t]);
                        if (t == LOOM_PLAN_GEN)
                                printf(", decode %.2f", k->hbm_s[t]);
                        if (t == LOOM_PLAN_ACTOR_TRAIN || t == LOOM_PLAN_CRITIC_TRAIN)
                                printf(", dp %.2f, bubble %.2f", k->dp_s[t], k->bubble_s[t]);
                        printf(")%s", k->balanced[t] ? " balanced" : "");
                        if (k->balanced[t] && st->pp > 1 &&
                            k->layers[t][0] * st->pp != w->model.layers) {
                                printf(", layers");
                                for (int j = 0; j < st->pp && j < LOOM_PLAN_MAX_PP; j++)
                                        printf("%s%d", j ? "/" : " ", k->layers[t][j]);
                        }
                        printf("\n");
                }
        }
        printf("weights: %s %.2f s\n", k->reshard_s > 0 || k->sync_s == 0 ? "reshard" : "sync",
               k->reshard_s + k->sync_s);
        /* The explanation: which term decides the iteration. */
        if (k->overlapped)
                printf("\nwhy: generation runs on its own GPUs and overlaps the rest (async); the "
                       "iteration is max(generation %.2f s, inference+training %.2f s) + weight "
                       "sync %.2f s.\n",
                       k->generation_s, k->rest_s, k->sync_s);
        else
                printf("\nwhy: generation %.2f s, then inference+training %.2f s, then weights "
                       "%.2f s, one after the other%s.\n",
                       k->generation_s, k->rest_s, k->reshard_s + k->sync_s,
                       w->async ? " (generation shares GPUs with other tasks, so async cannot "
                                  "overlap)"
                                : "");
        int slow = tl[0];
        for (int x = 1; x < nt; x++)
                if (k->task_s[tl[x]] > k->task_s[slow])
                        slow = tl[x];
        printf("     the longest task is %s (%.0f%% of the iteration).\n",
               loom_plan_task_name(slow), 100.0 * k->task_s[slow] / k->iteration_s);
}

static int round_up(int v, int m)
{
        return (v + m - 1) / m * m;
}

/* `loom plan evalrate --cluster FILE [--model M] [--workflow ppo|grpo] [--seconds S]`: the raw
 * cost-model rate on one core over 1000 random plans (bench/plan.sh). */
static int evalrate(int argc, char **argv)
{
        const char *cluster = NULL, *model = "qwen3-8b";
        double secs = 1.0;
        bool grpo = false;
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--help")) {
                        printf("usage: loom plan evalrate --cluster FILE [--model M] [--workflow "
                               "ppo|grpo] [--seconds S]\n"
                               "Prices 1000 random plans that fit in memory over and over for S "
                               "seconds (default "
                               "1) and prints cost-model evaluations per second.\n");
                        return 0;
                } else if (i + 1 < argc && !strcmp(argv[i], "--cluster")) {
                        cluster = argv[++i];
                } else if (i + 1 < argc && !strcmp(argv[i], "--model")) {
                        model = argv[++i];
                } else if (i + 1 < argc && !strcmp(argv[i], "--workflow")) {
                        grpo = !strcmp(argv[++i], "grpo");
                } else if (i + 1 < argc && !strcmp(argv[i], "--seconds")) {
                        secs = atof(argv[++i]);
                } else {
                        fprintf(stderr, "loom plan evalrate: bad option '%s'\n", argv[i]);
                        return 2;
                }
        }
        if (!cluster || !(secs > 0)) {
                fprintf(stderr, "loom plan evalrate: --cluster FILE is required\n");
                return 2;
        }
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        w.grpo = grpo;
        if (loom_plan_model_lookup(model, &w.model)) {
                fprintf(stderr, "loom plan evalrate: unknown model '%s'\n", model);
                return 2;
        }
        loom_plan_cluster *c = malloc(sizeof *c);
        loom_plan *plans = malloc(sizeof *plans * 1000);
        char name[208];
        int ret = 1;
        if (!c || !plans || load_cluster(cluster, c, name, sizeof name))
                goto out;
        /* Plans that fit in memory: an overflowing plan is rejected before it is priced, which
         * would flatter the rate. */
        uint64_t rng = 1;
        long tries = 0;
        for (int i = 0; i < 1000; tries++) {
                if (loom_plan_sample(c, &w, &rng, &plans[i]))
                        goto out;
                if (isfinite(loom_plan_cost_fast(c, &w, &plans[i])) || tries > 1000000)
                        i++;
        }
        double t0 = plan_now(NULL), el = 0, sink = 0;
        long n = 0;
        do {
                for (int i = 0; i < 1000; i++)
                        sink += loom_plan_cost_fast(c, &w, &plans[i]);
                n += 1000;
                el = plan_now(NULL) - t0;
        } while (el < secs);
        printf("%.0f evaluations/s (%ld in %.2f s, %d GPUs, %s; mean iteration %.1f s)\n", n / el,
               n, el, c->n_dev, w.model.name, sink / n);
        ret = 0;
out:
        free(c);
        free(plans);
        return ret;
}

int loom_cmd_plan(int argc, char **argv)
{
        if (argc >= 2 && !strcmp(argv[1], "sweep"))
                return plan_cmd_sweep(argc - 1, argv + 1);
        if (argc >= 2 && !strcmp(argv[1], "evalrate"))
                return evalrate(argc - 1, argv + 1);
        const char *cluster = NULL, *workflow = "ppo", *mode = NULL, *model = NULL;
        const char *solver = "sha-ea";
        loom_plan_opts o = {0};
        o.seed = 1;
        bool json = false, emit = false;
        double slo = 1.5;
        int gpn = 8;
        int balance = -1; /* -1: as the workflow file says */
        bool free_layout = false;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                bool has = i + 1 < argc;
                char *end = NULL;
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        usage(stdout);
                        return 0;
                } else if (!strcmp(a, "--json")) {
                        json = true;
                } else if (!strcmp(a, "--emit-job")) {
                        emit = true;
                } else if (!strcmp(a, "--free-layout")) {
                        free_layout = true;
                } else if (!strcmp(a, "--balance")) {
                        balance = 1;
                } else if (!strcmp(a, "--no-balance")) {
                        balance = 0;
                } else if (!has) {
                        fprintf(stderr, "loom plan: %s needs a value or is unknown\n", a);
                        usage(stderr);
                        return 2;
                } else if (!strcmp(a, "--cluster")) {
                        cluster = argv[++i];
                } else if (!strcmp(a, "--workflow")) {
                        workflow = argv[++i];
                } else if (!strcmp(a, "--mode")) {
                        mode = argv[++i];
                } else if (!strcmp(a, "--model")) {
                        model = argv[++i];
                } else if (!strcmp(a, "--solver")) {
                        solver = argv[++i];
                } else if (!strcmp(a, "--budget")) {
                        o.budget = strtoll(argv[++i], &end, 10);
                        if (*end || o.budget < 1) {
                                fprintf(stderr, "loom plan: --budget wants a count >= 1\n");
                                return 2;
                        }
                } else if (!strcmp(a, "--time")) {
                        o.time_s = strtod(argv[++i], &end);
                        if (*end || !(o.time_s > 0) || o.time_s > 86400) {
                                fprintf(stderr, "loom plan: --time wants seconds in (0, 86400]\n");
                                return 2;
                        }
                } else if (!strcmp(a, "--seed")) {
                        o.seed = strtoull(argv[++i], &end, 10);
                        if (*end) {
                                fprintf(stderr, "loom plan: --seed wants an integer\n");
                                return 2;
                        }
                } else if (!strcmp(a, "--slo")) {
                        slo = strtod(argv[++i], &end);
                        if (*end || !(slo >= 1) || slo > 1000) {
                                fprintf(stderr, "loom plan: --slo wants a factor in 1..1000\n");
                                return 2;
                        }
                } else if (!strcmp(a, "--gpus-per-node")) {
                        gpn = (int)strtol(argv[++i], &end, 10);
                        if (*end || gpn < 1 || gpn > 64) {
                                fprintf(stderr, "loom plan: --gpus-per-node wants 1..64\n");
                                return 2;
                        }
                } else {
                        fprintf(stderr, "loom plan: unknown option '%s'\n", a);
                        usage(stderr);
                        return 2;
                }
        }
        if (!cluster) {
                fprintf(stderr, "loom plan: --cluster FILE is required\n");
                usage(stderr);
                return 2;
        }
        if ((o.solver = loom_plan_solver_from_name(solver)) < 0) {
                fprintf(stderr,
                        "loom plan: unknown solver '%s' (sha-ea, ea, exact, verl, "
                        "streamrl)\n",
                        solver);
                return 2;
        }
        if (o.budget && o.time_s > 0) {
                fprintf(stderr, "loom plan: --budget or --time, not both\n");
                return 2;
        }
        if (json && emit) {
                fprintf(stderr, "loom plan: --json or --emit-job, not both\n");
                return 2;
        }
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        if (!strcmp(workflow, "grpo")) {
                w.grpo = true;
        } else if (strcmp(workflow, "ppo")) {
                loom_err e = {0};
                char *text;
                size_t len;
                if (loom_spec_read_file(workflow, &text, &len, &e)) {
                        print_err(workflow, &e);
                        return 1;
                }
                int rc = loom_plan_workflow_parse(text, len, &w, &e);
                free(text);
                if (rc) {
                        print_err(workflow, &e);
                        return 1;
                }
        }
        if (mode) {
                if (strcmp(mode, "sync") && strcmp(mode, "async")) {
                        fprintf(stderr, "loom plan: --mode is sync or async\n");
                        return 2;
                }
                w.async = !strcmp(mode, "async");
        }
        if (balance >= 0)
                w.balance = balance;
        if (model && loom_plan_model_lookup(model, &w.model)) {
                fprintf(stderr, "loom plan: unknown model '%s' (qwen3-4b, qwen3-8b, qwen3-14b)\n",
                        model);
                return 2;
        }
        loom_plan_cluster *c = malloc(sizeof *c);
        loom_plan_result *r = malloc(sizeof *r);
        char cname[208] = "";
        int ret = 1;
        if (!c || !r) {
                fprintf(stderr, "loom plan: out of memory\n");
                goto out;
        }
        if (load_cluster(cluster, c, cname, sizeof cname))
                goto out;
        o.now = plan_now;
        double t0 = plan_now(NULL);
        loom_err e = {0};
        int rc = loom_plan_search(c, &w, &o, r, &e);
        double search_s = plan_now(NULL) - t0;
        if (rc) {
                fprintf(stderr, "loom plan: %s\n", e.msg);
                ret = rc == LOOM_ENOMEM ? 1 : 1;
                goto out;
        }
        if (!r->found) {
                fprintf(stderr,
                        "loom plan: no plan fits the fleet's memory (%lld evaluations); "
                        "try a smaller model or more GPUs\n",
                        (long long)r->evaluations);
                goto out;
        }
        double free_s = NAN;
        loom_plan_result *fr = NULL;
        if (free_layout) {
                fr = malloc(sizeof *fr);
                if (!fr || (*fr = *r, loom_plan_free_layout(c, &w, &fr->plan, 0, &free_s)) ||
                    loom_plan_evaluate(c, &w, &fr->plan, &fr->cost, NULL)) {
                        fprintf(stderr, "loom plan: the layout search failed\n");
                        free(fr);
                        goto out;
                }
        }
        if (emit) {
                loom_plan_job j;
                loom_plan_to_job(&r->plan, &r->cost, &j);
                char id[64];
                snprintf(id, sizeof id, "%s-%s-%s", w.grpo ? "grpo" : "ppo",
                         w.async ? "async" : "sync", w.model.name);
                json_t *job = json_pack("{s:s,s:i,s:i,s:f,s:f,s:f,s:f}", "id", id, "rollout_gpus",
                                        round_up(j.rollout_gpus, gpn), "train_gpus",
                                        round_up(j.train_gpus, gpn), "t_roll_s", j.t_roll_s,
                                        "t_train_s", j.t_train_s, "sync_s", j.sync_s, "slo", slo);
                char *s = json_dumps(job, JSON_COMPACT | JSON_REAL_PRECISION(9));
                printf("%s\n", s);
                free(s);
                json_decref(job);
        } else if (json) {
                json_t *out = json_pack(
                    "{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:f,s:f,s:f,s:b,s:o}", "cluster", cname,
                    "workflow", w.grpo ? "grpo" : "ppo", "mode", w.async ? "async" : "sync",
                    "model", w.model.name, "solver", loom_plan_solver_name(o.solver), "seed",
                    (json_int_t)o.seed, "evaluations", (json_int_t)r->evaluations, "search_s",
                    search_s, "iteration_s", r->cost.iteration_s, "tokens_per_s",
                    r->cost.tokens_per_s, "optimal", r->optimal, "plan", plan_json(c, &w, r));
                if (fr) {
                        json_object_set_new(out, "free_layout_s", json_real(free_s));
                        json_object_set_new(out, "free_layout_plan", plan_json(c, &w, fr));
                }
                char *s = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(9));
                printf("%s\n", s);
                free(s);
                json_decref(out);
        } else {
                print_text(cname, c, &w, &o, r, search_s);
                if (free_layout)
                        printf("free layout: %.2f s (%.2f%% below the plan)\n", free_s,
                               100 * (1 - free_s / r->cost.iteration_s));
        }
        free(fr);
        ret = 0;
out:
        free(c);
        free(r);
        return ret;
}
