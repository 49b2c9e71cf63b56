/*
 * ctl.c - the command line of `loom submit`, `jobs`, `job`, `cancel`, `groups`, `nodes`,
 * `cluster`, `events` (ctl_cmds.c runs them over libloom-client, ctl_io.c reports): their help,
 * options and arguments; the exit status says who said no (see loom_cmd_ctl_help).
 */
#include "ctl.h"

void loom_cmd_ctl_help(FILE *f)
{
        fputs(
            "\n"
            "Operating a running loomd (loom submit|jobs|job|cancel|groups|nodes|cluster|events):\n"
            "  --server URL     loomd's address (default $LOOM_URL, else http://127.0.0.1:7480)\n"
            "  --token TOKEN    bearer token (default $LOOM_TOKEN, else $LOOM_TOKEN_FILE's)\n"
            "  --token-file F   read the token from the first line of F\n"
            "  --ca-file PEM    the CA of loomd's certificate (default $LOOM_CA_FILE)\n"
            "  -o table|json    tables for people (default), or loomd's JSON for scripts\n"
            "  submit FILE|-    submit a job: FILE holds what POST /v1/jobs takes (docs/api.md)\n"
            "  --dry-run        submit: show where it would go and why; submit nothing\n"
            "  --explain        submit: also list the candidates placement passed over\n"
            "  --name N         submit: the spec from flags, also --rollout-gpus G,\n"
            "                   --train-gpus G, --t-roll S, --t-train S, --slo X,\n"
            "                   --iterations N, --sync S, --model-b B, --mem-rollout GB,\n"
            "                   --mem-train GB, --max-restarts N (over FILE's fields)\n"
            "  jobs             list jobs (a tenant: its own)\n"
            "  --state S        jobs: live, queued, running, finished, failed, cancelled, any\n"
            "  --tenant T       jobs: only T's (admin)\n"
            "  --group G        jobs: only those in group G\n"
            "  job ID           one job: spec, placement, rate, iterations, leases, SLO\n"
            "                   headroom, restarts, events, cost so far\n"
            "  cancel ID...     cancel jobs\n"
            "  groups           co-execution groups (admin tokens)\n"
            "  nodes            nodes in use (a tenant: those of its own jobs)\n"
            "  cluster          nodes, cost, live jobs, policy and quotas\n"
            "  events           recent events: submits, exits, re-admissions\n"
            "  --job ID         events: only this job's\n"
            "  --since S        events: look back S seconds first (default 600, at most 3600)\n"
            "  --watch          events: keep following, every --interval S (default 2)\n"
            "\n"
            "Environment: LOOM_URL, LOOM_TOKEN, LOOM_TOKEN_FILE, LOOM_CA_FILE, the names the\n"
            "client library, the Python package and the executors' workers read. Tokens are\n"
            "issued, listed and revoked with `loomd token` on loomd's host: the API has no\n"
            "route for them.\n"
            "\n"
            "Exit status of these commands:\n"
            "  0  done\n"
            "  1  invalid input, or loomd said no (not found, wrong state, over quota,\n"
            "     cannot be placed)\n"
            "  2  bad usage\n"
            "  3  loomd unreachable (connection refused, TLS verification, shutting down)\n"
            "  4  no valid token, or a role that may not do it\n",
            f);
}

static void usage(FILE *f)
{
        fprintf(f, "usage: loom <submit|jobs|job|cancel|groups|nodes|cluster|events> ...\n");
        loom_cmd_ctl_help(f);
}

/* Spec fields a flag may set: the flag, the field, whether it is a whole number. */
static const struct spec_flag {
        const char *flag, *field;
        bool whole;
} spec_flags[] = {
    {"--rollout-gpus", "rollout_gpus", true},
    {"--train-gpus", "train_gpus", true},
    {"--t-roll", "t_roll_s", false},
    {"--t-train", "t_train_s", false},
    {"--sync", "sync_s", false},
    {"--slo", "slo", false},
    {"--iterations", "iterations", true},
    {"--model-b", "model_b", false},
    {"--mem-rollout", "mem_rollout_gb", false},
    {"--mem-train", "mem_train_gb", false},
    {"--max-restarts", "max_restarts", true},
};

static int spec_flag(ctl *c, const char *a, const char *v)
{
        if (!strcmp(a, "--name")) {
                json_object_set_new(c->spec_flags, "name", json_string(v));
                return 0;
        }
        for (size_t i = 0; i < sizeof spec_flags / sizeof spec_flags[0]; i++) {
                if (strcmp(a, spec_flags[i].flag))
                        continue;
                double d;
                uint64_t u;
                if (spec_flags[i].whole) {
                        if (loom_cmd_whole(c->cmd, a, v, 0, 4294967295.0, &u))
                                return 1;
                        json_object_set_new(c->spec_flags, spec_flags[i].field,
                                            json_integer((json_int_t)u));
                } else {
                        if (loom_cmd_num(c->cmd, a, v, 0, 1e12, &d))
                                return 1;
                        json_object_set_new(c->spec_flags, spec_flags[i].field, json_real(d));
                }
                return 0;
        }
        return -1;
}

/* The option a with value v for command c->cmd: 0 taken, 1 invalid value, -1 unknown. */
static int option(ctl *c, const char *a, const char *v)
{
        const char *name = c->cmd + 5; /* "loom " */
        if (!strcmp(a, "--server"))
                c->server = v;
        else if (!strcmp(a, "--token"))
                c->token = v;
        else if (!strcmp(a, "--token-file"))
                c->token_file = v;
        else if (!strcmp(a, "--ca-file"))
                c->ca_file = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
                if (strcmp(v, "json") && strcmp(v, "table")) {
                        fprintf(stderr, "%s: -o: '%s' is not 'table' or 'json'\n", c->cmd, v);
                        return 1;
                }
                c->json = !strcmp(v, "json");
        } else if (!strcmp(name, "submit"))
                return spec_flag(c, a, v);
        else if (!strcmp(name, "jobs") && !strcmp(a, "--state"))
                c->filter.state = v;
        else if (!strcmp(name, "jobs") && !strcmp(a, "--tenant"))
                c->filter.tenant = v;
        else if (!strcmp(name, "jobs") && !strcmp(a, "--group")) {
                uint64_t g;
                if (loom_cmd_whole(c->cmd, a, v, 0, 4294967295.0, &g))
                        return 1;
                c->filter.group = (int64_t)g;
                c->filter.has_group = true;
        } else if (!strcmp(name, "events") && !strcmp(a, "--job")) {
                uint64_t j;
                if (loom_cmd_whole(c->cmd, a, v, 1, 4294967295.0, &j))
                        return 1;
                c->job = (uint32_t)j;
        } else if (!strcmp(name, "events") && !strcmp(a, "--since"))
                return loom_cmd_num(c->cmd, a, v, 0.001, 3600, &c->since_s);
        else if (!strcmp(name, "events") && !strcmp(a, "--interval"))
                return loom_cmd_num(c->cmd, a, v, 0.1, 3600, &c->interval_s);
        else
                return -1;
        return 0;
}

/* argv into c: 0, 1 (invalid value), 2 (bad usage), 3 (--help printed). */
static int parse(ctl *c, int argc, char **argv)
{
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        usage(stdout);
                        return 3;
                }
                if (!strcmp(a, "--dry-run") || !strcmp(a, "--explain") || !strcmp(a, "--watch")) {
                        bool ok = strcmp(a, "--watch") ? !strcmp(c->cmd, "loom submit")
                                                       : !strcmp(c->cmd, "loom events");
                        if (!ok) {
                                fprintf(stderr, "%s: unknown option '%s'\n", c->cmd, a);
                                return 2;
                        }
                        c->dry_run |= !strcmp(a, "--dry-run");
                        c->explain |= !strcmp(a, "--explain");
                        c->watch |= !strcmp(a, "--watch");
                        continue;
                }
                if (a[0] != '-' || !strcmp(a, "-")) {
                        if (c->n_pos == 64) {
                                fprintf(stderr, "%s: too many arguments\n", c->cmd);
                                return 2;
                        }
                        c->pos[c->n_pos++] = a;
                        continue;
                }
                if (i + 1 >= argc) {
                        fprintf(stderr, "%s: %s needs a value (see `%s --help`)\n", c->cmd, a,
                                c->cmd);
                        return 2;
                }
                int rc = option(c, a, argv[++i]);
                if (rc < 0)
                        fprintf(stderr, "%s: unknown option '%s' (see `%s --help`)\n", c->cmd, a,
                                c->cmd);
                if (rc)
                        return rc < 0 ? 2 : 1;
        }
        return 0;
}

int ctl_setup(ctl *c, const char *name, int argc, char **argv, int min_pos, int max_pos)
{
        static char cmd[32];
        snprintf(cmd, sizeof cmd, "loom %s", name);
        c->cmd = cmd;
        c->interval_s = 2;
        c->since_s = 600;
        int rc = parse(c, argc, argv);
        if (rc)
                return rc == 3 ? -1 : rc;
        if (c->n_pos < min_pos || c->n_pos > max_pos) {
                fprintf(stderr, "%s: expected %s (see `%s --help`)\n", cmd,
                        max_pos == 0         ? "no arguments"
                        : min_pos == max_pos ? "one argument"
                                             : "an id",
                        cmd);
                return EXIT_USAGE;
        }
        return 0;
}

/* A positional job id. */
int ctl_job_id(const ctl *c, const char *s, uint32_t *id)
{
        char *end;
        errno = 0;
        unsigned long long u = strtoull(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-' || u < 1 || u > UINT32_MAX) {
                fprintf(stderr,
                        "%s: '%s' is not a job id (a whole number from 1 to %u, as `loom "
                        "jobs` shows them)\n",
                        c->cmd, s, UINT32_MAX);
                return EXIT_USAGE;
        }
        *id = (uint32_t)u;
        return 0;
}
