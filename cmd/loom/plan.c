/*
 * plan.c - `loom plan`: place one RL workflow on a heterogeneous fleet with HetRL's cost model
 * and search (src/plan), print the plan as text (src/plan) or JSON, or the loom job spec built
 * from it (src/spec). `loom plan sweep` lives in plan_sweep.c.
 */
#include <jansson.h>
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

static double plan_now(void *ctx)
{
        (void)ctx;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int bad_usage(const char *msg)
{
        fprintf(stderr, "loom plan: %s\n", msg);
        return 2;
}

static void print_err(const char *path, const loom_err *e)
{
        size_t n = strlen(path);
        if (!strncmp(e->msg, path, n) && e->msg[n] == ':') /* unreadable: the path is there */
                fprintf(stderr, "loom plan: %s\n", e->msg);
        else if (e->line > 0)
                fprintf(stderr, "loom plan: %s:%d:%d: %s\n", path, e->line, e->col, e->msg);
        else
                fprintf(stderr, "loom plan: %s: %s\n", path, e->msg);
}

/* Read and decode a cluster file (c, its name into name) or a workflow file (w). */
static int load(const char *path, loom_plan_cluster *c, char *name, size_t nlen,
                loom_plan_workflow *w)
{
        loom_err e = {0};
        char *text;
        size_t len;
        int rc = loom_spec_read_file(path, &text, &len, &e);
        if (!rc) {
                rc = c ? loom_plan_cluster_parse(text, len, c, name, nlen, &e)
                       : loom_plan_workflow_parse(text, len, w, &e);
                free(text);
        }
        if (rc)
                print_err(path, &e);
        return rc ? 1 : 0;
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
        char name[208];
        loom_plan_rate rate;
        loom_err e = {0};
        int ret = 1;
        if (!c)
                fprintf(stderr, "loom plan evalrate: out of memory\n");
        else if (load(cluster, c, name, sizeof name, NULL))
                ;
        else if (loom_plan_evalrate(c, &w, secs, plan_now, NULL, &rate, &e))
                fprintf(stderr, "loom plan evalrate: %s\n", e.msg);
        else {
                printf("%.0f evaluations/s (%lld in %.2f s, %d GPUs, %s; mean iteration %.1f s)\n",
                       rate.evaluations / rate.elapsed_s, (long long)rate.evaluations,
                       rate.elapsed_s, c->n_dev, w.model.name, rate.mean_iteration_s);
                ret = 0;
        }
        free(c);
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
                        if (*end || o.budget < 1)
                                return bad_usage("--budget wants a count >= 1");
                } else if (!strcmp(a, "--time")) {
                        o.time_s = strtod(argv[++i], &end);
                        if (*end || !(o.time_s > 0) || o.time_s > 86400)
                                return bad_usage("--time wants seconds in (0, 86400]");
                } else if (!strcmp(a, "--seed")) {
                        o.seed = strtoull(argv[++i], &end, 10);
                        if (*end)
                                return bad_usage("--seed wants an integer");
                } else if (!strcmp(a, "--slo")) {
                        slo = strtod(argv[++i], &end);
                        if (*end || !(slo >= 1) || slo > 1000)
                                return bad_usage("--slo wants a factor in 1..1000");
                } else if (!strcmp(a, "--gpus-per-node")) {
                        gpn = (int)strtol(argv[++i], &end, 10);
                        if (*end || gpn < 1 || gpn > 64)
                                return bad_usage("--gpus-per-node wants 1..64");
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
        if (o.budget && o.time_s > 0)
                return bad_usage("--budget or --time, not both");
        if (json && emit)
                return bad_usage("--json or --emit-job, not both");
        loom_plan_workflow w;
        loom_plan_workflow_default(&w);
        if (!strcmp(workflow, "grpo"))
                w.grpo = true;
        else if (strcmp(workflow, "ppo") && load(workflow, NULL, NULL, 0, &w))
                return 1;
        if (mode) {
                if (strcmp(mode, "sync") && strcmp(mode, "async"))
                        return bad_usage("--mode is sync or async");
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
        loom_plan_report *r = malloc(sizeof *r);
        char cname[208] = "";
        int ret = 1;
        loom_err e = {0};
        if (!c || !r) {
                fprintf(stderr, "loom plan: out of memory\n");
                goto out;
        }
        if (load(cluster, c, cname, sizeof cname, NULL))
                goto out;
        o.now = plan_now;
        if (loom_plan_run(c, &w, &o, free_layout, r, &e)) {
                fprintf(stderr, "loom plan: %s\n", e.msg);
                goto out;
        }
        if (emit || json) {
                json_t *j = emit ? loom_plan_job_to_json(&w, &r->result, slo, gpn)
                                 : loom_plan_report_to_json(cname, c, &w, &o, r);
                char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
                if (s)
                        printf("%s\n", s);
                else
                        fprintf(stderr, "loom plan: the plan has no JSON form\n");
                ret = s ? 0 : 1;
                free(s);
                json_decref(j);
                goto out;
        }
        loom_plan_report_print(stdout, cname, c, &w, &o, r);
        ret = 0;
out:
        free(c);
        free(r);
        return ret;
}
