/*
 * sim.c - `loom sim`: replay a trace (or Poisson arrivals) through placement policies and
 * compare cost, SLO attainment and utilisation; `loom sim sweep`: WEAVE Figure 15 a-c.
 * Everything is computed before anything is printed or written, so invalid input leaves no
 * partial report behind.
 */
#include <getopt.h>
#include <limits.h>
#include <math.h>
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
            f, "usage: loom sim [options]\n"
               "       loom sim sweep [options]\n"
               "\n"
               "Simulates RL jobs arriving at a disaggregated cluster (rollout and training\n"
               "pools, nodes provisioned on demand) under placement policies, all driving the\n"
               "same scheduling core as loomd. GPU time is modelled, not run (docs/sim.md).\n"
               "\n"
               "arrivals:\n"
               "  --trace FILE           Philly-style CSV (default " DEFAULT_TRACE ")\n"
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
               "  --drift D              none (default) | increasing | decreasing | mixed:\n"
               "                         per-job drift templates (WEAVE §6.6)\n"
               "  --mtbf-h H             a running job fails every H hours on average\n"
               "                         (default 0: never); failed jobs are re-admitted\n"
               "  --max-restarts N       re-admissions of a failed job before it fails (3)\n"
               "policies:\n"
               "  --policy LIST          comma list or all (default all): loom, loom-nomig,\n"
               "                         solo, colocated, random, greedy, oracle, lb,\n"
               "                         random-slo, greedy-slo, regroup, gavel (Gavel+)\n"
               "                         or PlexRL's plex-isolated, plex-pack, plex-spread,\n"
               "                         plex-backfill, plex-all (--policy plex-all --help)\n"
               "  --admission A          worst (default) | p99 | p95: after --learn-after\n"
               "                         iterations, plan each job on a 90%% upper bound of\n"
               "                         that quantile of its observed phase times (worst\n"
               "                         case until enough iterations bound it)\n"
               "  --learn-after K        iterations observed before re-planning (default 3)\n"
               "  --multirate on|off     multi-rate groups: a member may run several iterations\n"
               "                         per meta-iteration (default on)\n"
               "  --train-rightsize on|off  a new group may get fewer training nodes than its\n"
               "                         job asked for, within its SLO and memory (default off)\n"
               "  --max-group N          max jobs per group (default 5)\n"
               "  --colocated-factor F   rollout time on a training GPU vs a rollout GPU (1.0)\n"
               "  --seed N               workload and placement seed (default 1)\n"
               "output:\n"
               "  --json | --csv         one JSON object per policy per line | CSV\n"
               "  --plot DIR             cost.svg/png, gpus.svg/png, slowdown.svg/png\n"
               "  --per-job FILE         CSV of every job under every policy (slowdown, SLO)\n"
               "  --no-progress          no progress bar (it is drawn only on a terminal)\n"
               "  --decompose            the cost as a ladder from the fluid lower bound, one\n"
               "                         constraint per rung (docs/sim.md); --json for lines\n"
               "sweep (Figure 15 a-c on the trace window, loom/random/greedy/random-slo/\n"
               "greedy-slo vs lb):\n"
               "  --seeds N              seeds per setting (default 3)\n"
               "  --threads N            worker threads (default 2)\n"
               "\n"
               "Exit status: 0 ok, 1 invalid input (trace, values), 2 bad usage.\n");
}

typedef struct opts {
        const char *trace, *plot, *per_job;
        int start, count;
        bool poisson, json, csv, progress, sweep, decompose;
        unsigned policies;
        int seeds, threads;
        loom_sim_cfg sim;
        loom_sim_workload_cfg wl;
} opts;

static void bar(void *ctx, const char *label, double frac)
{
        (void)ctx;
        if (frac < 0) {
                fprintf(stderr, "\r%70s\r", "");
                return;
        }
        int width = 40, fill = (int)(frac * width + 0.5);
        char b[64];
        for (int i = 0; i < width; i++)
                b[i] = i < fill ? '#' : '.';
        b[width] = 0;
        fprintf(stderr, "\r%-11s [%s] %3d%%", label, b, (int)(frac * 100 + 0.5));
        fflush(stderr);
}

static int bad(const char *what, const char *val)
{
        fprintf(stderr, "loom sim: invalid %s '%s' (see loom sim --help)\n", what, val);
        return 2;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
        char *end;
        long v = strtol(s, &end, 10);
        if (*end || end == s || v < lo || v > hi)
                return false;
        *out = (int)v;
        return true;
}

static bool parse_dbl(const char *s, double lo, double hi, double *out)
{
        char *end;
        double v = strtod(s, &end);
        if (*end || end == s || !(v >= lo && v <= hi))
                return false;
        *out = v;
        return true;
}

/* 0 ok, 2 bad usage, -1 --help printed */
static int parse(int argc, char **argv, opts *o)
{
        enum {
                O_TRACE = 256,
                O_ROWS,
                O_ARR,
                O_JOBS,
                O_DUR,
                O_WL,
                O_SLO,
                O_SIZE,
                O_SYNC,
                O_DET,
                O_POL,
                O_MAXG,
                O_COLOC,
                O_SEED,
                O_JSON,
                O_CSV,
                O_PLOT,
                O_NOPROG,
                O_SEEDS,
                O_THREADS,
                O_PERJOB,
                O_DRIFT,
                O_MTBF,
                O_MAXRS,
                O_ADMIT,
                O_LEARN,
                O_DECOMP,
                O_MULTI,
                O_RIGHTSIZE
        };
        static const struct option lo[] = {{"trace", 1, 0, O_TRACE},
                                           {"rows", 1, 0, O_ROWS},
                                           {"arrivals", 1, 0, O_ARR},
                                           {"jobs", 1, 0, O_JOBS},
                                           {"duration-h", 1, 0, O_DUR},
                                           {"workload", 1, 0, O_WL},
                                           {"slo", 1, 0, O_SLO},
                                           {"size", 1, 0, O_SIZE},
                                           {"sync", 1, 0, O_SYNC},
                                           {"deterministic", 0, 0, O_DET},
                                           {"policy", 1, 0, O_POL},
                                           {"max-group", 1, 0, O_MAXG},
                                           {"colocated-factor", 1, 0, O_COLOC},
                                           {"seed", 1, 0, O_SEED},
                                           {"json", 0, 0, O_JSON},
                                           {"csv", 0, 0, O_CSV},
                                           {"plot", 1, 0, O_PLOT},
                                           {"no-progress", 0, 0, O_NOPROG},
                                           {"seeds", 1, 0, O_SEEDS},
                                           {"threads", 1, 0, O_THREADS},
                                           {"per-job", 1, 0, O_PERJOB},
                                           {"drift", 1, 0, O_DRIFT},
                                           {"mtbf-h", 1, 0, O_MTBF},
                                           {"max-restarts", 1, 0, O_MAXRS},
                                           {"admission", 1, 0, O_ADMIT},
                                           {"learn-after", 1, 0, O_LEARN},
                                           {"decompose", 0, 0, O_DECOMP},
                                           {"multirate", 1, 0, O_MULTI},
                                           {"train-rightsize", 1, 0, O_RIGHTSIZE},
                                           {"help", 0, 0, 'h'},
                                           {0, 0, 0, 0}};
        int c, v;
        double d;
        loom_err e;
        opterr = 0;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
                switch (c) {
                case 'h':
                        usage(stdout);
                        return -1;
                case O_TRACE:
                        o->trace = optarg;
                        break;
                case O_ROWS:
                        if (sscanf(optarg, "%d:%d", &o->start, &o->count) != 2 || o->start < 0 ||
                            o->count < 1)
                                return bad("--rows (START:COUNT)", optarg);
                        break;
                case O_ARR:
                        if (sscanf(optarg, "poisson:%lf", &d) != 1 || !(d > 0 && d < 1e6))
                                return bad("--arrivals (poisson:JOBS_PER_HOUR)", optarg);
                        o->poisson = true;
                        o->wl.poisson_per_hour = d;
                        break;
                case O_JOBS:
                        if (!parse_int(optarg, 1, 10000000, &o->wl.poisson_jobs))
                                return bad("--jobs", optarg);
                        break;
                case O_DUR:
                        if (!parse_dbl(optarg, 0.01, 1e5, &d))
                                return bad("--duration-h", optarg);
                        o->wl.poisson_mean_duration_s = d * 3600;
                        break;
                case O_WL:
                        if (loom_sim_profile_parse(optarg, &o->wl.profile))
                                return bad("--workload", optarg);
                        break;
                case O_SLO:
                        if (loom_sim_slo_parse(optarg, &o->wl.slo, &e))
                                return bad("--slo", optarg);
                        break;
                case O_SIZE:
                        if (!parse_int(optarg, 1, 256, &o->wl.size_gpus))
                                return bad("--size (GPUs, 1..256)", optarg);
                        break;
                case O_SYNC:
                        if (!parse_dbl(optarg, 0, 1e5, &o->wl.sync_s))
                                return bad("--sync", optarg);
                        break;
                case O_DET:
                        o->wl.noise.deterministic = true;
                        break;
                case O_POL:
                        if (loom_sim_policy_list_parse(optarg, &o->policies, &e))
                                return bad("--policy", optarg);
                        break;
                case O_MAXG:
                        if (!parse_int(optarg, 1, LOOM_MAX_GROUP_SIZE, &v))
                                return bad("--max-group", optarg);
                        o->sim.policy.max_group_size = v;
                        break;
                case O_COLOC:
                        if (!parse_dbl(optarg, 0.35, 100, &o->sim.colocated_roll_factor))
                                return bad("--colocated-factor (0.35..100)", optarg);
                        break;
                case O_SEED:
                        if (!parse_int(optarg, 0, 1 << 30, &v))
                                return bad("--seed", optarg);
                        o->wl.seed = (uint64_t)v;
                        o->sim.policy.seed = (uint64_t)v;
                        break;
                case O_JSON:
                        o->json = true;
                        break;
                case O_DECOMP:
                        o->decompose = true;
                        break;
                case O_CSV:
                        o->csv = true;
                        break;
                case O_PLOT:
                        o->plot = optarg;
                        break;
                case O_PERJOB:
                        o->per_job = optarg;
                        break;
                case O_NOPROG:
                        o->progress = false;
                        break;
                case O_SEEDS:
                        if (!parse_int(optarg, 1, 100, &o->seeds))
                                return bad("--seeds", optarg);
                        break;
                case O_THREADS:
                        if (!parse_int(optarg, 1, 64, &o->threads))
                                return bad("--threads", optarg);
                        break;
                case O_DRIFT:
                        if (loom_sim_drift_parse(optarg, &o->wl.drift))
                                return bad("--drift (none|increasing|decreasing|mixed)", optarg);
                        break;
                case O_MTBF:
                        if (!parse_dbl(optarg, 0, 1e6, &o->wl.mtbf_h))
                                return bad("--mtbf-h (hours, 0..1e6)", optarg);
                        break;
                case O_MAXRS:
                        if (!parse_int(optarg, 0, 1000, &o->sim.max_restarts))
                                return bad("--max-restarts (0..1000)", optarg);
                        break;
                case O_ADMIT:
                        if (loom_admission_parse(optarg, &o->sim.policy.admission))
                                return bad("--admission (worst|p99|p95)", optarg);
                        break;
                case O_LEARN:
                        if (!parse_int(optarg, 1, LOOM_LEARN_WINDOW, &o->sim.policy.learn_after))
                                return bad("--learn-after (1..20)", optarg);
                        break;
                case O_MULTI:
                        if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                                return bad("--multirate (on|off)", optarg);
                        o->sim.policy.multirate = !strcmp(optarg, "on");
                        break;
                case O_RIGHTSIZE:
                        if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                                return bad("--train-rightsize (on|off)", optarg);
                        o->sim.policy.train_rightsize = !strcmp(optarg, "on");
                        break;
                default:
                        return loom_cmd_bad_option("loom sim", argv, NULL);
                }
        }
        if (optind < argc) {
                fprintf(stderr, "loom sim: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }
        if (o->json && o->csv) {
                fprintf(stderr, "loom sim: --json and --csv exclude each other\n");
                return 2;
        }
        if (o->poisson && o->trace) {
                fprintf(stderr, "loom sim: --trace and --arrivals exclude each other\n");
                return 2;
        }
        if (o->decompose && (o->sweep || o->csv || o->plot || o->per_job || o->policies)) {
                fprintf(stderr, "loom sim: --decompose runs its own policies and prints its own "
                                "table (or --json): not with sweep, --policy, --csv, --plot or "
                                "--per-job\n");
                return 2;
        }
        return 0;
}

static void print_err(const loom_err *e)
{
        /* trace errors already start with file:line:column */
        fprintf(stderr, "loom sim: %s\n", e->msg);
}

/* One row per job per policy that reports per-job figures. */
static int write_per_job(const char *path, const loom_sim_workload *w, const loom_sim_result *r,
                         int n, loom_err *e)
{
        FILE *f = fopen(path, "w");
        if (!f)
                return loom_err_set(e, LOOM_EIO, "per-job", "%s: cannot create", path);
        fprintf(f, "policy,job,arrival_h,model_b,gpus,t_roll_s,t_train_s,slo,iterations,"
                   "slowdown,iteration_s,met\n");
        for (int i = 0; i < n; i++) {
                if (!r[i].slowdown)
                        continue;
                for (int j = 0; j < w->n; j++) {
                        const loom_sim_job *sj = &w->jobs[j];
                        double sd = r[i].slowdown[j];
                        fprintf(f, "%s,%s,%.4f,%g,%d,%.3f,%.3f,%.4f,%lld,%.5f,%.4f,%d\n",
                                loom_sim_policy_name(r[i].policy), sj->spec.id,
                                loom_us_to_s(sj->arrival) / 3600, sj->model_b,
                                sj->spec.rollout_gpus, loom_us_to_s(sj->spec.t_roll),
                                loom_us_to_s(sj->spec.t_train), sj->spec.slo,
                                (long long)sj->spec.iterations, sd, r[i].iter_s[j],
                                isfinite(sd) && sd <= sj->spec.slo * (1 + 1e-9));
                }
        }
        if (fclose(f))
                return loom_err_set(e, LOOM_EIO, "per-job", "%s: write failed", path);
        return 0;
}

/* One sweep setting x policy, averaged over its seeds. */
typedef struct sweep_agg {
        const loom_sim_sweep_row *r; /* the first seed's row: figure, setting, policy */
        double cost, cost_min, cost_max, slo, slo_min, slo_max, slo_wc, avg;
} sweep_agg;

/* Rows come ordered by setting, policy, seed: every `seeds` rows make one aggregate. */
static void sweep_aggregate(const loom_sim_sweep_out *out, int seeds, sweep_agg *a)
{
        for (int g = 0; g < out->n / seeds; g++) {
                const loom_sim_sweep_row *r = &out->rows[g * seeds];
                sweep_agg x = {r, 0, INFINITY, -INFINITY, 0, INFINITY, -INFINITY, 0, 0};
                for (int k = 0; k < seeds; k++) {
                        x.cost += r[k].cost_vs_lb / seeds;
                        x.cost_min = fmin(x.cost_min, r[k].cost_vs_lb);
                        x.cost_max = fmax(x.cost_max, r[k].cost_vs_lb);
                        x.slo += r[k].slo_attainment / seeds;
                        x.slo_min = fmin(x.slo_min, r[k].slo_attainment);
                        x.slo_max = fmax(x.slo_max, r[k].slo_attainment);
                        x.slo_wc += r[k].slo_attainment_wc / seeds;
                        x.avg += r[k].avg_cost_per_hour / seeds;
                }
                a[g] = x;
        }
}

static void sweep_print(const opts *o, const sweep_agg *a, int n, int seeds)
{
        if (o->csv)
                printf("figure,setting,policy,cost_vs_lb,cost_vs_lb_min,cost_vs_lb_max,"
                       "slo_attainment,slo_min,slo_max,slo_attainment_profiled,"
                       "avg_cost_per_hour\n");
        else if (!o->json)
                printf("%-3s %-14s %-10s %9s %9s %9s %7s %7s %7s %7s\n", "fig", "setting", "policy",
                       "x_lb", "x_lb_min", "x_lb_max", "SLO%", "SLOmin", "SLOmax", "SLOp%");
        for (int g = 0; g < n; g++) {
                const sweep_agg *x = &a[g];
                const char *pn = loom_sim_policy_name(x->r->policy);
                bool lb = x->r->policy == LOOM_SIM_LB; /* a bound has no SLO figures */
                char slo[160] = "null,\"slo_min\":null,\"slo_max\":null,"
                                "\"slo_attainment_profiled\":null";
                if (!lb)
                        snprintf(slo, sizeof slo,
                                 "%.4f,\"slo_min\":%.4f,\"slo_max\":%.4f,"
                                 "\"slo_attainment_profiled\":%.4f",
                                 x->slo, x->slo_min, x->slo_max, x->slo_wc);
                if (o->json)
                        printf("{\"figure\":\"15%c\",\"setting\":\"%s\",\"policy\":\"%s\","
                               "\"seeds\":%d,\"cost_vs_lb\":%.4f,\"cost_vs_lb_min\":%.4f,"
                               "\"cost_vs_lb_max\":%.4f,\"slo_attainment\":%s,"
                               "\"avg_cost_per_hour\":%.2f}\n",
                               x->r->figure, x->r->setting, pn, seeds, x->cost, x->cost_min,
                               x->cost_max, slo, x->avg);
                else if (o->csv && lb)
                        printf("15%c,%s,%s,%.4f,%.4f,%.4f,,,,,%.2f\n", x->r->figure, x->r->setting,
                               pn, x->cost, x->cost_min, x->cost_max, x->avg);
                else if (o->csv)
                        printf("15%c,%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f\n", x->r->figure,
                               x->r->setting, pn, x->cost, x->cost_min, x->cost_max, x->slo,
                               x->slo_min, x->slo_max, x->slo_wc, x->avg);
                else if (lb)
                        printf("15%c %-14s %-10s %9.3f %9.3f %9.3f %7s %7s %7s %7s\n", x->r->figure,
                               x->r->setting, pn, x->cost, x->cost_min, x->cost_max, "-", "-", "-",
                               "-");
                else
                        printf("15%c %-14s %-10s %9.3f %9.3f %9.3f %7.1f %7.1f %7.1f %7.1f\n",
                               x->r->figure, x->r->setting, pn, x->cost, x->cost_min, x->cost_max,
                               100 * x->slo, 100 * x->slo_min, 100 * x->slo_max, 100 * x->slo_wc);
        }
}

/* fig15{a,b,c}_{cost,slo}: one bar group per setting, one bar per policy. */
static int sweep_plot(const char *dir, const sweep_agg *a, int n, loom_err *e)
{
        int npol = 0;
        const char *pl[LOOM_SIM_NPOLICIES];
        while (npol < n && !strcmp(a[npol].r->setting, a[0].r->setting))
                pl[npol] = loom_sim_policy_name(a[npol].r->policy), npol++;
        int rc = 0;
        for (int fig = 0; fig < 3 && !rc; fig++) {
                const char *gl[8];
                int ng = 0, first = -1;
                for (int g = 0; g < n && ng < 8; g += npol)
                        if (a[g].r->figure == 'a' + fig) {
                                first = first < 0 ? g : first;
                                gl[ng++] = a[g].r->setting;
                        }
                double vals[2][8 * LOOM_SIM_NPOLICIES];
                for (int k = 0; k < ng * npol; k++) {
                        bool lb = a[first + k].r->policy == LOOM_SIM_LB;
                        vals[0][k] = a[first + k].cost;
                        vals[1][k] = lb ? NAN : 100 * a[first + k].slo;
                }
                for (int m = 0; m < 2 && !rc; m++) {
                        char name[32], title[96];
                        snprintf(name, sizeof name, "fig15%c_%s", 'a' + fig, m ? "slo" : "cost");
                        snprintf(title, sizeof title, "Figure 15%c: %s", 'a' + fig,
                                 m ? "SLO attainment (%)" : "cost / lower bound");
                        loom_sim_bars b = {
                            title, m ? "% of jobs" : "x lower bound", ng, npol, gl, pl, vals[m]};
                        rc = loom_sim_plot_bars(dir, name, &b, e);
                }
        }
        return rc;
}

static int run_sweep(opts *o, const loom_sim_trace *t)
{
        loom_sim_sweep_cfg sc;
        loom_sim_sweep_cfg_default(&sc);
        sc.trace = t;
        sc.sim = o->sim;
        sc.sim.progress = NULL;
        sc.workload = o->wl;
        sc.seeds = o->seeds;
        sc.threads = o->threads;
        if (o->policies)
                sc.policies = o->policies;
        loom_sim_sweep_out out;
        loom_err e;
        loom_err_clear(&e);
        int rc = loom_sim_sweep(&sc, &out, &e);
        if (rc) {
                print_err(&e);
                return 1;
        }
        int n = out.n / sc.seeds;
        sweep_agg *agg = calloc((size_t)(n ? n : 1), sizeof *agg);
        if (!agg) {
                loom_sim_sweep_out_free(&out);
                fprintf(stderr, "loom sim: out of memory\n");
                return 1;
        }
        sweep_aggregate(&out, sc.seeds, agg);
        if (o->plot && (rc = sweep_plot(o->plot, agg, n, &e)))
                print_err(&e);
        if (!rc) {
                sweep_print(o, agg, n, sc.seeds);
                if (!o->json && !o->csv)
                        printf("%llu events in %.2f s of run time (%.2f M events/s per thread)\n",
                               (unsigned long long)out.events, out.cpu_s,
                               out.cpu_s > 0 ? (double)out.events / out.cpu_s / 1e6 : 0);
        }
        free(agg);
        loom_sim_sweep_out_free(&out);
        return rc ? 1 : 0;
}

int loom_cmd_sim(int argc, char **argv)
{
        if (loom_cmd_sim_is_plex(argc, argv))
                return loom_cmd_sim_plex(argc, argv); /* sim_plex.c */
        opts o = {.start = 165, .count = 300, .progress = true, .seeds = 3, .threads = 2};
        loom_sim_cfg_default(&o.sim);
        loom_sim_workload_cfg_default(&o.wl);
        if (argc > 1 && !strcmp(argv[1], "sweep")) {
                o.sweep = true;
                argc--;
                argv++;
        }
        int rc = parse(argc, argv, &o);
        if (rc)
                return rc < 0 ? 0 : rc;
        o.wl.noise.tail_threshold = o.sim.policy.tail_threshold;
        if (o.progress && isatty(STDERR_FILENO))
                o.sim.progress = bar;
        loom_err e;
        loom_err_clear(&e);
        loom_sim_trace t = {0};
        if (!o.poisson || o.sweep) {
                char buf[PATH_MAX + 64];
                const char *path =
                    o.trace ? o.trace : loom_cmd_bundled(DEFAULT_TRACE, buf, sizeof buf);
                if ((rc = loom_sim_trace_load(path, o.start, o.count, &t, &e))) {
                        print_err(&e);
                        return 1;
                }
        }
        if (o.sweep) {
                rc = run_sweep(&o, &t);
                loom_sim_trace_free(&t);
                return rc;
        }
        loom_sim_workload w;
        rc = loom_sim_workload_build(&o.wl, o.poisson ? NULL : &t, &o.sim.cluster, &w, &e);
        loom_sim_trace_free(&t);
        if (rc) {
                print_err(&e);
                return 1;
        }
        if (o.decompose) {
                loom_sim_rung rungs[LOOM_SIM_RUNGS];
                if ((rc = loom_sim_decompose(&o.sim, &w, rungs, &e)))
                        print_err(&e);
                else
                        loom_sim_decompose_print(stdout, rungs, o.json);
                loom_sim_workload_free(&w);
                return rc ? 1 : 0;
        }
        if (!o.policies)
                o.policies = (1u << LOOM_SIM_NPOLICIES) - 1;
        o.sim.record_series = o.plot != NULL;
        loom_sim_result res[LOOM_SIM_NPOLICIES];
        int n = 0;
        for (int p = 0; p < LOOM_SIM_NPOLICIES && !rc; p++) {
                if (!(o.policies & (1u << p)))
                        continue;
                if ((rc = loom_sim_run(&o.sim, &w, (loom_sim_policy)p, &res[n], &e)))
                        break;
                n++;
        }
        if (!rc && o.plot)
                rc = loom_sim_plot(o.plot, res, n, &e);
        if (!rc && o.per_job)
                rc = write_per_job(o.per_job, &w, res, n, &e);
        if (rc) {
                print_err(&e);
        } else if (o.json) {
                loom_sim_report_json(stdout, res, n);
        } else if (o.csv) {
                loom_sim_report_csv(stdout, res, n);
        } else {
                printf("%d jobs, workload %s, SLO %g..%g, max group %d, seed %llu%s\n", w.n,
                       loom_sim_profile_name(o.wl.profile), o.wl.slo.lo, o.wl.slo.hi,
                       o.sim.policy.max_group_size, (unsigned long long)o.wl.seed,
                       o.wl.noise.deterministic ? ", deterministic" : "");
                loom_sim_report_table(stdout, res, n);
        }
        for (int i = 0; i < n; i++)
                loom_sim_result_free(&res[i]);
        loom_sim_workload_free(&w);
        return rc ? 1 : 0;
}
