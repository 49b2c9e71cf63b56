/* sim.c - `loom sim`: replay a trace (or Poisson arrivals) through placement policies and compare
 * cost, SLO and utilisation; `loom sim sweep`: WEAVE Figure 15 a-c. The options become a
 * loom_sim_study_cfg; the study (src/sim/study.c) computes all before it prints. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "loom/sim.h"

#define DEFAULT_TRACE "traces/philly/103959.csv"

static void usage(FILE *f)
{
        fprintf(
            f,
            "usage: loom sim [options]\n"
            "       loom sim sweep [options]\n"
            "\n"
            "Simulates RL jobs arriving at a disaggregated cluster (rollout and training\n"
            "pools, nodes provisioned on demand) under placement policies, all driving the\n"
            "same scheduling core as loomd. GPU time is modelled, not run (docs/sim.md).\n"
            "\n"
            "arrivals:\n"
            "  --trace FILE           Philly-style CSV (default " DEFAULT_TRACE "; docs/sim.md)\n"
            "  --rows START:COUNT     rows of the trace after the header (default 165:300)\n"
            "  --arrivals poisson:R   Poisson arrivals, R jobs per hour (instead of a trace)\n"
            "  --jobs N               number of Poisson jobs (default 300)\n"
            "  --duration-h H         mean Poisson job duration (default 12.5)\n"
            "jobs:\n"
            "  --workload W           balanced | rollout-heavy | train-heavy | mixed (default)\n"
            "  --slo S                uniform:LO,HI (default uniform:1,2) | fixed:X\n"
            "  --size GPUS            GPUs per pool for every job (default: from the trace)\n"
            "  --sync SECONDS         weight sync time per iteration (default 0)\n"
            "  --deterministic        every response at the max-token limit (no noise)\n"
            "  --jitter F             with --deterministic: each phase x U(1-F, 1+F) (0)\n"
            "  --drift D              none (default) | increasing | decreasing | mixed:\n"
            "                         per-job drift templates (WEAVE §6.6)\n"
            "  --mtbf-h H             a running job fails every H hours on average (0:\n"
            "                         never, the default); failed jobs are re-admitted\n"
            "  --max-restarts N       re-admissions of a failed job before it fails (3)\n"
            "policies:\n"
            "  --policy LIST          comma list or all (default all): loom, loom-nomig,\n"
            "                         solo, colocated, random, greedy, oracle, lb,\n"
            "                         random-slo, greedy-slo, regroup, gavel (Gavel+),\n"
            "                         colocated-slo (colocated, held to SLOs by solo)\n"
            "                         or PlexRL's plex-isolated, plex-pack, plex-spread,\n"
            "                         plex-backfill, plex-all (--policy plex-all --help)\n"
            "  --admission A          worst (default) | p99 | p95: plan on a quantile's bound\n"
            "  --learn-after K        iterations observed before re-planning (default 3)\n"
            "  --learn-bound B        normal (default) | order: the quantile's bound\n"
            "  --move-lone on|off     learned lone members move to cheaper groups (on)\n"
            "  --move-members on|off  and members of shared groups, where it saves (on)\n"
            "  --plan-tails on|off    plan learned rollouts to free their nodes at the tail (on)\n"
            "  --multirate on|off     members may run several iterations per meta-iteration (on)\n"
            "  --train-rightsize on|off  new groups get the fewest training nodes in SLO (off)\n"
            "  --colocate-lone on|off a lone member rolls out on its training nodes (on)\n"
            "  --lone-grow on|off     ... on more of them where its SLO needs it and it pays (on)\n"
            "  --pool-grow on|off     a join may grow a group's training pool, where it pays (on)\n"
            "  --join-wait on|off     no join a member near its end cannot absorb (on)\n"
            "  --regroup on|off       re-solve the groups around each departure exactly (on)\n"
            "  --slo-premium F|off    keep SLOs only where that costs <= (1+F) x colocated (off)\n"
            "  --job-switch on|off    each job declares its warm switch (on; off: the largest, 4 s)\n"
            "  --max-group N          max jobs per group (default 5)\n"
            "  --colocated-factor F   rollout time on a training GPU vs a rollout GPU (1.0)\n"
            "  --tail-slowdown F      a migrated tail's time on its kept GPUs vs full speed (1)\n"
            "  --sleep-phases         phases are sleeps: no state load, switch or tail (off)\n"
            "  --boot-s S             a provisioned node takes S s to come up, billed (default 0)\n"
            "  --launch-s S           a worker starts S s after its nodes are up (loom; 0)\n"
            "  --cluster C            h20-h800 (default), h100 or h200 (one GPU type), or a\n"
            "                         JSON file with a cluster object (as in scenario files)\n"
            "  --seed N               workload and placement seed (default 1)\n"
            "output:\n"
            "  --json | --csv         one JSON object per policy per line | CSV\n"
            "  --plot DIR             cost.svg/png, gpus.svg/png, slowdown.svg/png\n"
            "  --per-job FILE         CSV of every job under every policy (slowdown, SLO)\n"
            "  --timeline FILE        JSON lines: nodes up and down, phase segments, stops,\n"
            "                         restarts, completions (all but the fluid oracle, lb)\n"
            "  --no-progress          no progress bar (it is drawn only on a terminal)\n"
            "  --decompose            the cost as a ladder from the fluid lower bound, then the\n"
            "                         oracle's regroupings the targets need (docs/sim.md)\n"
            "  --oracle-rates         the oracle gives members rates > 1 as well (slow)\n"
            "  --oracle-restarts      each job the oracle moves loses its restart, as loom's do\n"
            "  --oracle-timeslice T   off|tails|elastic: the oracle time-slices 2-3 jobs (off)\n"
            "sweep (Figure 15 a-c, 5 policies vs lb): --seeds N per setting (3), --threads N (2)\n"
            "Exit status: 0 ok, 1 invalid input (trace, values), 2 bad usage.\n");
}

typedef struct opts {
        loom_sim_study_cfg c;
        bool poisson, json, csv, no_progress, sweep, decompose;
} opts;

static int bad(const char *what, const char *val)
{
        fprintf(stderr, "loom sim: invalid %s '%s' (see loom sim --help)\n", what, val);
        return 2;
}

/* s as a number in [lo, hi]: decimal digits into *i when i is given, else any number into *d. */
static bool number(const char *s, double lo, double hi, int *i, double *d)
{
        char *end;
        double v = i ? (double)strtol(s, &end, 10) : strtod(s, &end);
        if (*end || end == s || !(v >= lo && v <= hi))
                return false;
        if (i)
                *i = (int)v;
        else
                *d = v;
        return true;
}

/* An option: a number in [lo, hi] into *i or *d, a value into *s, a flag into *b; else special() */
typedef struct optdef {
        const char *name, *what;
        double lo, hi;
        int *i;
        double *d;
        const char **s;
        bool *b;
} optdef;

/* The options that are not a plain number, string or flag: 0, or 2 after bad(). */
static int special(opts *o, const char *name, const char *v)
{
        loom_sim_workload_cfg *wl = &o->c.workload;
        loom_policy_cfg *pol = &o->c.sim.policy;
        loom_err e;
        double d;
        int s;
        if (!strcmp(name, "rows")) {
                if (sscanf(v, "%d:%d", &o->c.start, &o->c.count) != 2 || o->c.start < 0 ||
                    o->c.count < 1)
                        return bad("--rows (START:COUNT)", v);
        } else if (!strcmp(name, "arrivals")) {
                if (sscanf(v, "poisson:%lf", &d) != 1 || !(d > 0 && d < 1e6))
                        return bad("--arrivals (poisson:JOBS_PER_HOUR)", v);
                o->poisson = true;
                wl->poisson_per_hour = d;
        } else if (!strcmp(name, "duration-h")) {
                if (!number(v, 0.01, 1e5, NULL, &d))
                        return bad("--duration-h", v);
                wl->poisson_mean_duration_s = d * 3600;
        } else if (!strcmp(name, "seed")) {
                if (!number(v, 0, 1 << 30, &s, NULL))
                        return bad("--seed", v);
                wl->seed = pol->seed = (uint64_t)s;
        } else if (!strcmp(name, "workload") && loom_sim_profile_parse(v, &wl->profile)) {
                return bad("--workload", v);
        } else if (!strcmp(name, "slo") && loom_sim_slo_parse(v, &wl->slo, &e)) {
                return bad("--slo", v);
        } else if (!strcmp(name, "policy") && loom_sim_policy_list_parse(v, &o->c.policies, &e)) {
                fprintf(stderr, "loom sim: --policy: %s\n", e.msg); /* it lists the valid ones */
                return 2;
        } else if (!strcmp(name, "drift") && loom_sim_drift_parse(v, &wl->drift)) {
                return bad("--drift (none|increasing|decreasing|mixed)", v);
        } else if (!strcmp(name, "admission") && loom_admission_parse(v, &pol->admission)) {
                return bad("--admission (worst|p99|p95)", v);
        } else if (!strcmp(name, "oracle-timeslice") &&
                   loom_sim_timeslice_parse(v, &o->c.sim.oracle_timeslice)) {
                return bad("--oracle-timeslice (off|tails|elastic)", v);
        } else if (!strcmp(name, "slo-premium") && strcmp(v, "off") &&
                   !(pol->slo_cap = number(v, 0, 100, NULL, &pol->slo_premium))) {
                return bad("--slo-premium (off, or 0..100)", v);
        } else if (!strcmp(name, "learn-bound") && loom_learn_bound_parse(v, &pol->learn_bound)) {
                return bad("--learn-bound (normal|order)", v);
        } else if (loom_sim_switch(&o->c.sim, name)) {
                char what[40];
                snprintf(what, sizeof what, "--%s (on|off)", name);
                if (strcmp(v, "on") && strcmp(v, "off"))
                        return bad(what, v);
                *loom_sim_switch(&o->c.sim, name) = !strcmp(v, "on");
        }
        return 0;
}

/* The value v of option t: 0, or 2 after bad(). */
static int apply(opts *o, const optdef *t, const char *v)
{
        if (t->b)
                *t->b = true;
        else if (t->s)
                *t->s = v;
        else if (t->i || t->d)
                return number(v, t->lo, t->hi, t->i, t->d) ? 0 : bad(t->what, v);
        else
                return special(o, t->name, v);
        return 0;
}

/* Options that exclude each other: 0, or 2 after a line on stderr; sets kind and format. */
static int check(int argc, char **argv, opts *o)
{
        if (optind < argc) {
                fprintf(stderr, "loom sim: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }
        o->c.kind = o->sweep       ? LOOM_SIM_STUDY_SWEEP
                    : o->decompose ? LOOM_SIM_STUDY_DECOMPOSE
                                   : LOOM_SIM_STUDY_COMPARE;
        o->c.format = o->json ? LOOM_SIM_JSON : o->csv ? LOOM_SIM_CSV : LOOM_SIM_TABLE;
        const char *why = o->json && o->csv          ? "--json and --csv exclude each other"
                          : o->poisson && o->c.trace ? "--trace and --arrivals exclude each other"
                          : o->decompose && o->sweep ? "--decompose and sweep exclude each other"
                                                     : loom_sim_study_conflict(&o->c);
        if (why)
                fprintf(stderr, "loom sim: %s\n", why);
        return why ? 2 : 0;
}

/* 0 ok, 2 bad usage, -1 --help printed */
static int parse(int argc, char **argv, opts *o)
{
        loom_sim_workload_cfg *wl = &o->c.workload;
        loom_sim_cfg *sim = &o->c.sim;
        const optdef t[] = {
            {"trace", .s = &o->c.trace},
            {.name = "rows"},
            {.name = "arrivals"},
            {"jobs", "--jobs", 1, 10000000, .i = &wl->poisson_jobs},
            {.name = "duration-h"}, {.name = "workload"}, {.name = "slo"},
            {"size", "--size (GPUs, 1..256)", 1, 256, .i = &wl->size_gpus},
            {"sync", "--sync", 0, 1e5, .d = &wl->sync_s},
            {"deterministic", .b = &wl->noise.deterministic},
            {"jitter", "--jitter (0..0.5)", 0, 0.5, .d = &wl->noise.jitter},
            {.name = "policy"},
            {"max-group", "--max-group", 1, LOOM_MAX_GROUP_SIZE, .i = &sim->policy.max_group_size},
            {"colocated-factor", "--colocated-factor (0.35..100)", 0.35, 100,
             .d = &sim->colocated_roll_factor},
            {"tail-slowdown", "--tail-slowdown (1..100)", 1, 100, .d = &sim->tail_slowdown},
            {"sleep-phases", .b = &sim->sleep_phases}, {.name = "slo-premium"},
            {"boot-s", "--boot-s (0..3600)", 0, 3600, .d = &sim->boot_s},
            {"launch-s", "--launch-s (0..3600)", 0, 3600, .d = &sim->launch_s},
            {.name = "seed"}, {"json", .b = &o->json}, {"csv", .b = &o->csv},
            {"plot", .s = &o->c.plot}, {"no-progress", .b = &o->no_progress},
            {"seeds", "--seeds", 1, 100, .i = &o->c.seeds},
            {"threads", "--threads", 1, 64, .i = &o->c.threads},
            {"per-job", .s = &o->c.per_job}, {"timeline", .s = &o->c.timeline},
            {"cluster", .s = &o->c.cluster}, {.name = "drift"},
            {"mtbf-h", "--mtbf-h (hours, 0..1e6)", 0, 1e6, .d = &wl->mtbf_h},
            {"max-restarts", "--max-restarts (0..1000)", 0, 1000, .i = &sim->max_restarts},
            {.name = "admission"},
            {"learn-after", "--learn-after (1..20)", 1, LOOM_LEARN_WINDOW,
             .i = &sim->policy.learn_after},
            {"decompose", .b = &o->decompose}, {"oracle-rates", .b = &sim->oracle_rates},
            {"oracle-restarts", .b = &sim->oracle_restarts},
            {.name = "multirate"}, {.name = "train-rightsize"},
            {.name = "colocate-lone"}, {.name = "lone-grow"}, {.name = "oracle-timeslice"},
            {.name = "join-wait"}, {.name = "regroup"},
            {.name = "learn-bound"}, {.name = "move-lone"}, {.name = "move-members"},
            {.name = "plan-tails"}, {.name = "job-switch"}, {.name = "pool-grow"},
        };
        enum { N = sizeof t / sizeof t[0] };
        struct option lo[N + 2] = {[N] = {"help", 0, 0, 'h'}};
        for (int k = 0; k < N; k++)
                lo[k] = (struct option){t[k].name, t[k].b ? 0 : 1, 0, 256 + k};
        int c, rc;
        opterr = 0, optind = 1;
        while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
                if (c == 'h') {
                        usage(stdout);
                        return -1;
                }
                if (c < 256)
                        return loom_cmd_bad_option("loom sim", argv, NULL);
                if ((rc = apply(o, &t[c - 256], optarg)))
                        return rc;
        }
        return check(argc, argv, o);
}

int loom_cmd_sim(int argc, char **argv)
{
        if (loom_cmd_sim_is_plex(argc, argv))
                return loom_cmd_sim_plex(argc, argv); /* sim_plex.c */
        opts o = {0};
        loom_sim_study_cfg_default(&o.c);
        if (argc > 1 && !strcmp(argv[1], "sweep")) {
                o.sweep = true, argc--, argv++;
        }
        int rc = parse(argc, argv, &o);
        if (rc)
                return rc < 0 ? 0 : rc;
        if (!o.no_progress && isatty(STDERR_FILENO))
                o.c.sim.progress = loom_sim_progress_bar;
        char buf[PATH_MAX + 64];
        if (!o.c.trace && (!o.poisson || o.sweep))
                o.c.trace = loom_cmd_bundled(DEFAULT_TRACE, buf, sizeof buf);
        loom_err e;
        loom_err_clear(&e);
        if (loom_sim_study(&o.c, stdout, &e)) { /* trace errors start with file:line:col */
                fprintf(stderr, "loom sim: %s\n", e.msg);
                return 1;
        }
        return 0;
}
