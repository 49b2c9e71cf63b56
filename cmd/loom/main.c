/*
 * loom - the command-line front end. Thin: each subcommand lives in its own file in this folder,
 * parses its arguments, calls the library and prints. Exit status: 0 ok, 1 invalid input,
 * 2 bad usage; the commands that talk to loomd add 3 (unreachable) and 4 (credentials).
 */
#include <stdio.h>
#include <string.h>

#include "cmd.h"

static const struct subcommand {
        const char *name;
        int (*run)(int argc, char **argv);
        const char *summary;
} subcommands[] = {
    {"place", loom_cmd_place, "place the jobs of a scenario file, one JSON decision per job"},
    {"sim", loom_cmd_sim, "trace-driven simulation of placement policies"},
    {"micro", loom_cmd_micro,
     "micro-benchmarks: WEAVE temporal, trainmux, spatial; PlexRL plex-bubbles, plex-pack"},
    {"sync", loom_cmd_sync, "weight transfer engine: bench and plans"},
    {"demo", loom_cmd_demo,
     "live demo: loomd plus CPU-bound RL jobs, or real PyTorch GRPO jobs (--real)"},
    {"bench", loom_cmd_bench, "benchmarks of the scheduler core"},
    {"harvest", loom_cmd_harvest, "ROSE: rollouts on idle serving GPUs (sim, node, replay)"},
    {"plan", loom_cmd_plan, "HetRL: place an RL workflow on a heterogeneous fleet"},
    {"submit", loom_cmd_submit, "submit a job to loomd (--dry-run: where it would go)"},
    {"jobs", loom_cmd_jobs, "list loomd's jobs (--state, --tenant, --group)"},
    {"job", loom_cmd_job, "one job in full: placement, leases, SLO headroom, events, cost"},
    {"cancel", loom_cmd_cancel, "cancel jobs"},
    {"groups", loom_cmd_groups, "loomd's co-execution groups (admin)"},
    {"nodes", loom_cmd_nodes, "the nodes loomd's groups hold"},
    {"cluster", loom_cmd_cluster, "nodes, cost, jobs, policy and quotas of loomd"},
    {"events", loom_cmd_events, "loomd's events (--watch follows them)"},
};

static void usage(FILE *f)
{
        fprintf(f, "usage: loom <command> [options]\n\ncommands:\n");
        for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
                fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
        fprintf(f, "\n`loom <command> --help` describes each command.\n");
        loom_cmd_ctl_help(f);
}

int main(int argc, char **argv)
{
        if (argc < 2) {
                usage(stderr);
                return 2;
        }
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
                usage(stdout);
                return 0;
        }
        if (!strcmp(argv[1], "--version")) {
                printf("loom 0.1.0\n");
                return 0;
        }
        for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
                if (!strcmp(argv[1], subcommands[i].name))
                        return subcommands[i].run(argc - 1, argv + 1);
        fprintf(stderr, "loom: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
}
