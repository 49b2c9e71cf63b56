/*
 * plan_sweep.c - `loom plan sweep`: HetRL's comparison grid (network scenarios x model sizes x
 * PPO/GRPO x sync/async) under the cost model, or its load-balancing ablation (src/plan,
 * loom_plan_sweep), printed as a table and drawn as a bar chart (src/sim, SVG and PNG).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "loom/sim.h"
#include "loom/spec.h"
#include "plan_cmd.h"

static void usage(FILE *f)
{
        fprintf(f, "usage: loom plan sweep [--budget N] [--seed N] [--scenarios S1,S2,...]\n"
                   "                       [--models qwen3-4b,...] [--plot DIR]\n"
                   "                       [--ablation load-balance]\n"
                   "\n"
                   "Plans every combination of the example network scenarios S1-S4\n"
                   "(examples/plan/s*.json), Qwen3 4B/8B/14B, PPO/GRPO and sync/async with\n"
                   "HetRL (SHA-EA), verl and StreamRL (async only), and prints modelled tokens/s\n"
                   "and HetRL's ratio to each baseline. --plot writes plan-sweep.svg/.png there.\n"
                   "\n"
                   "  --budget N   SHA-EA evaluations per instance (default 100000)\n"
                   "  --ablation load-balance\n"
                   "               HetRL section 5.3: sync PPO/GRPO planned without and with load\n"
                   "               balancing, tokens/s and the gain (plot: plan-balance.svg/.png)\n"
                   "\nExit status: 0 done, 1 invalid input, 2 bad usage.\n");
}

static int bad_usage(const char *msg)
{
        fprintf(stderr, "loom plan sweep: %s\n", msg);
        return 2;
}

/* A scenario's cluster file, found beside the binary when not under the working directory. */
static int load_scenario(void *ctx, const char *file, loom_plan_cluster *c, loom_err *e)
{
        char buf[4096], name[208];
        const char *path = loom_cmd_bundled(file, buf, sizeof buf);
        char *text;
        size_t len;
        int rc = loom_spec_read_file(path, &text, &len, e);
        if (!rc) {
                rc = loom_plan_cluster_parse(text, len, c, name, sizeof name, e);
                free(text);
        }
        if (rc && strncmp(e->msg, path, strlen(path))) { /* unless it names the file already */
                loom_err in = *e;
                loom_err_set(e, rc, in.field, "%s: %s", path, in.msg);
        }
        return rc;
}

int plan_cmd_sweep(int argc, char **argv)
{
        loom_plan_sweep_cfg cfg = {.budget = 100000, .seed = 1, .load = load_scenario};
        const char *plot_dir = NULL;
        for (int i = 1; i < argc; i++) {
                char *end;
                if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                        usage(stdout);
                        return 0;
                } else if (i + 1 >= argc) {
                        fprintf(stderr, "loom plan sweep: unknown option or missing value '%s'\n",
                                argv[i]);
                        usage(stderr);
                        return 2;
                } else if (!strcmp(argv[i], "--budget")) {
                        cfg.budget = strtoll(argv[++i], &end, 10);
                        if (*end || cfg.budget < 1)
                                return bad_usage("--budget wants a count >= 1");
                } else if (!strcmp(argv[i], "--seed")) {
                        cfg.seed = strtoull(argv[++i], &end, 10);
                        if (*end)
                                return bad_usage("--seed wants an integer");
                } else if (!strcmp(argv[i], "--scenarios")) {
                        cfg.scenarios = argv[++i];
                } else if (!strcmp(argv[i], "--models")) {
                        cfg.models = argv[++i];
                } else if (!strcmp(argv[i], "--plot")) {
                        plot_dir = argv[++i];
                } else if (!strcmp(argv[i], "--ablation")) {
                        if (strcmp(argv[++i], "load-balance"))
                                return bad_usage("--ablation is load-balance");
                        cfg.balance_ablation = true;
                } else {
                        fprintf(stderr, "loom plan sweep: unknown option '%s'\n", argv[i]);
                        usage(stderr);
                        return 2;
                }
        }
        loom_plan_sweep_out *out = malloc(sizeof *out);
        if (!out) {
                fprintf(stderr, "loom plan sweep: out of memory\n");
                return 1;
        }
        loom_err e = {0};
        int ret = 0;
        if (loom_plan_sweep(&cfg, stdout, out, &e)) {
                fprintf(stderr, "loom plan sweep: %s\n", e.msg);
                ret = 1;
        } else if (plot_dir && loom_sim_plot_plan_sweep(plot_dir, out, &e)) {
                fprintf(stderr, "loom plan sweep: cannot write the plot into %s\n", plot_dir);
                ret = 1;
        }
        free(out);
        return ret;
}
