/*
 * sim_plex.c - `loom sim --policy plex-...`: PlexRL's cluster reproductions (Figure 8), the
 * HRRS / FCFS / round-robin comparison on shared groups, and loom against PlexRL's placer on
 * WEAVE's default workload. The work is in src/sim (plex_*.c) and src/core (plex.c, hrrs.c).
 */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd.h"
#include "loom/plexsim.h"
#include "loom/sim.h"

#define DEFAULT_TRACE "traces/philly/103959.csv"

static void usage(FILE *f)
{
        fprintf(f, "usage: loom sim --policy plex-isolated,plex-pack,plex-spread,plex-backfill "
                   "[options]\n"
                   "\n"
                   "PlexRL's trace-driven cluster (Figure 8): jobs of the Table 2 models (by the\n"
                   "trace's GPU count: 1 -> 7B, 2-4 -> 30B, more -> 235B; iterations = duration /\n"
                   "cycle) arrive as the trace says and queue for a fixed training pool; the plex\n"
                   "placer fits them onto node groups. Prints the makespan against isolated and\n"
                   "the p50/p99 of wait / run time. Then HRRS, FCFS and round robin on the same\n"
                   "shared groups, and loom against the plex placer on WEAVE's workload.\n"
                   "GPU time is simulated.\n"
                   "\n"
                   "  --policy LIST     plex-isolated, plex-pack, plex-spread, plex-backfill or\n"
                   "                    plex-all (default plex-all)\n"
                   "  --trace FILE      Philly-style CSV (default " DEFAULT_TRACE ")\n"
                   "  --window S:N      rows S..S+N-1 of the trace (default 165:300)\n"
                   "  --nodes N         training nodes of the pool (default 20)\n"
                   "  --jitter X        rollout length spread for the dispatch runs (default 0.2)\n"
                   "  --seed N          (default 1)\n"
                   "  --cold            jobs arrive without a profile: a dedicated group for one\n"
                   "                    cycle, then a repacking event moves them (cold start)\n"
                   "  --no-dispatch     skip the HRRS/FCFS/RR comparison\n"
                   "  --no-weave        skip loom vs plex on WEAVE's workload\n"
                   "  --plot DIR        write DIR/plex_queue_delay_cdf.svg\n"
                   "  --json            one JSON object per line\n"
                   "\n"
                   "Exit status: 0 ok, 1 invalid input, 2 bad usage.\n");
}

bool loom_cmd_sim_is_plex(int argc, char **argv)
{
        for (int i = 1; i < argc; i++) {
                const char *v = NULL;
                if (!strcmp(argv[i], "--policy") && i + 1 < argc)
                        v = argv[i + 1];
                else if (!strncmp(argv[i], "--policy=", 9))
                        v = argv[i] + 9;
                if (v && !strncmp(v, "plex-", 5))
                        return true;
        }
        return false;
}

typedef struct opts {
        unsigned mask;
        const char *trace, *plot;
        int start, count, nodes;
        double jitter;
        unsigned long seed;
        bool json, dispatch, weave, cold;
} opts;

static int parse_policies(const char *s, unsigned *mask)
{
        char buf[256];
        snprintf(buf, sizeof buf, "%s", s);
        *mask = 0;
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                loom_plexsim_policy p;
                if (!strcmp(t, "plex-all"))
                        *mask |= 0xf;
                else if (loom_plexsim_policy_parse(t, &p) == 0)
                        *mask |= 1u << p;
                else
                        return -1;
        }
        return *mask ? 0 : -1;
}

static int parse(int argc, char **argv, opts *o)
{
        static const struct option lo[] = {{"policy", 1, 0, 'p'},
                                           {"trace", 1, 0, 't'},
                                           {"window", 1, 0, 'w'},
                                           {"nodes", 1, 0, 'n'},
                                           {"jitter", 1, 0, 'J'},
                                           {"seed", 1, 0, 's'},
                                           {"plot", 1, 0, 'P'},
                                           {"json", 0, 0, 'j'},
                                           {"no-dispatch", 0, 0, 'D'},
                                           {"no-weave", 0, 0, 'W'},
                                           {"cold", 0, 0, 'C'},
                                           {"help", 0, 0, 'h'},
                                           {0, 0, 0, 0}};
        int c;
        opterr = 0;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
                char *end = NULL;
                switch (c) {
                case 'h':
                        usage(stdout);
                        return 0;
                case 'p':
                        if (parse_policies(optarg, &o->mask))
                                goto bad;
                        break;
                case 't':
                        o->trace = optarg;
                        break;
                case 'w':
                        if (sscanf(optarg, "%d:%d", &o->start, &o->count) != 2 || o->start < 0 ||
                            o->count < 1)
                                goto bad;
                        break;
                case 'n':
                        o->nodes = (int)strtol(optarg, &end, 10);
                        if (*end || o->nodes < 12 || o->nodes > 100000)
                                goto bad;
                        break;
                case 'J':
                        o->jitter = strtod(optarg, &end);
                        if (*end || !(o->jitter >= 0 && o->jitter < 1))
                                goto bad;
                        break;
                case 's':
                        o->seed = strtoul(optarg, &end, 10);
                        if (*end || end == optarg)
                                goto bad;
                        break;
                case 'P':
                        o->plot = optarg;
                        break;
                case 'j':
                        o->json = true;
                        break;
                case 'D':
                        o->dispatch = false;
                        break;
                case 'W':
                        o->weave = false;
                        break;
                case 'C':
                        o->cold = true;
                        break;
                default:
                        return loom_cmd_bad_option("loom sim", argv, usage);
                }
        }
        if (optind != argc) {
                usage(stderr);
                return 2;
        }
        return -1;
bad:
        fprintf(stderr, "loom sim: invalid --%s '%s' (%s)\n",
                c == 'p'   ? "policy"
                : c == 'w' ? "window"
                : c == 'n' ? "nodes"
                : c == 'J' ? "jitter"
                           : "seed",
                optarg,
                c == 'p'   ? "plex-isolated, plex-pack, plex-spread, plex-backfill, plex-all"
                : c == 'w' ? "START:COUNT"
                : c == 'n' ? "12..100000"
                : c == 'J' ? "in [0, 1)"
                           : "an integer");
        return 2;
}

static int cluster(const opts *o, const loom_sim_trace *t)
{
        loom_plexsim_job *jobs = calloc((size_t)t->n, sizeof *jobs);
        double *arr = calloc((size_t)t->n, sizeof *arr), *dur = calloc((size_t)t->n, sizeof *dur);
        int *gpus = calloc((size_t)t->n, sizeof *gpus);
        loom_plexsim_cluster_res res[4];
        int nres = 0, rc = 0;
        if (!jobs || !arr || !dur || !gpus) {
                rc = 1;
                goto out;
        }
        for (int i = 0; i < t->n; i++) {
                arr[i] = t->rows[i].arrival_s;
                dur[i] = t->rows[i].duration_s;
                gpus[i] = t->rows[i].gpus;
        }
        loom_plexsim_jobs_from_trace(arr, dur, gpus, t->n, jobs);
        for (int i = 0; i < t->n; i++)
                jobs[i].cold = o->cold;
        double iso = 0;
        if (!o->json)
                printf("%-14s %10s %8s %9s %9s %11s %8s %7s\n", "policy", "makespan_h", "vs_iso",
                       "qdelay_50", "qdelay_99", "switches/h", "pruned", "groups");
        for (int p = 0; p <= LOOM_PLEXSIM_BACKFILL; p++) {
                if (!(o->mask & (1u << p)) && !(p == 0))
                        continue;
                loom_err e;
                loom_plexsim_cluster_res *r = &res[nres];
                if (loom_plexsim_cluster_run((loom_plexsim_policy)p, jobs, t->n, o->nodes, r, &e)) {
                        fprintf(stderr, "loom sim: %s: %s\n", e.field, e.msg);
                        rc = 1;
                        goto out;
                }
                nres++;
                if (p == 0)
                        iso = r->makespan_h;
                if (!(o->mask & (1u << p)))
                        continue; /* isolated ran only as the baseline */
                if (o->json)
                        printf("{\"policy\":\"%s\",\"jobs\":%d,\"nodes\":%d,\"makespan_h\":%.3f,"
                               "\"makespan_vs_isolated\":%.4f,\"queue_delay_p50\":%.4f,"
                               "\"queue_delay_p99\":%.4f,\"queue_delay_max\":%.4f,"
                               "\"switches_per_h\":%.2f,\"pruned_fraction\":%.4f,"
                               "\"max_groups\":%d,\"repacked\":%d}\n",
                               loom_plexsim_policy_name(r->policy), r->n, o->nodes, r->makespan_h,
                               iso > 0 ? r->makespan_h / iso : 0, r->queue_delay_p50,
                               r->queue_delay_p99, r->queue_delay_max, r->switches_per_h,
                               r->pruned_fraction, r->max_groups, r->repacked);
                else
                        printf("%-14s %10.1f %7.2fx %9.3f %9.3f %11.1f %7.1f%% %7d\n",
                               loom_plexsim_policy_name(r->policy), r->makespan_h,
                               iso > 0 ? r->makespan_h / iso : 0, r->queue_delay_p50,
                               r->queue_delay_p99, r->switches_per_h, 100 * r->pruned_fraction,
                               r->max_groups);
        }
        if (o->plot) {
                char path[PATH_MAX];
                mkdir(o->plot, 0777);
                snprintf(path, sizeof path, "%s/plex_queue_delay_cdf.svg", o->plot);
                loom_err e;
                loom_plexsim_cluster_res show[4];
                int ns = 0;
                for (int i = 0; i < nres; i++)
                        if (o->mask & (1u << res[i].policy))
                                show[ns++] = res[i];
                if (loom_plexsim_plot_cdf(path, show, ns, &e)) {
                        fprintf(stderr, "loom sim: %s\n", e.msg);
                        rc = 1;
                } else if (!o->json) {
                        printf("wrote %s\n", path);
                }
        }
out:
        for (int i = 0; i < nres; i++)
                loom_plexsim_cluster_res_free(&res[i]);
        free(jobs);
        free(arr);
        free(dur);
        free(gpus);
        return rc;
}

/* The shared groups: per model, as many jobs as the plex placer puts on one group, at the
 * phase offsets it chose; then each dispatch policy serves them with jittered rollouts. */
static int dispatch(const opts *o)
{
        int nm;
        const loom_plexsim_model *m = loom_plexsim_models(&nm);
        if (!o->json)
                printf("\n%-6s %-5s %4s %11s %10s %10s %10s\n", "model", "disp", "jobs",
                       "switches/h", "delay_mean", "delay_p50", "delay_p99");
        for (int i = 0; i < nm; i++) {
                loom_plex_cfg pc;
                loom_plex_cfg_default(&pc);
                pc.nodes = 2 * m[i].train_gpus / 8;
                loom_plex *p = loom_plex_new(&pc, NULL);
                if (!p)
                        return 1;
                loom_us calls[3];
                for (int k = 0; k < 3; k++)
                        calls[k] = loom_us_from_s(m[i].calls_s[k]);
                loom_plex_job pj;
                loom_plex_job_from_calls(
                    &pj, pc.nodes / 2,
                    loom_us_from_s(m[i].cycle_s) - calls[0] - calls[1] - calls[2], calls, 3,
                    loom_us_from_s(loom_plexsim_setup_s(m[i].model_b)), true);
                loom_plexsim_pool_job jobs[16];
                int n = 0;
                loom_tl_group g0 = LOOM_TL_NO_GROUP;
                for (; n < 16; n++) {
                        loom_plex_decision d;
                        if (loom_plex_place(p, (uint32_t)n + 1, &pj, &d, NULL) || !d.placed ||
                            (n > 0 && d.group != g0))
                                break;
                        g0 = d.group;
                        jobs[n] = (loom_plexsim_pool_job){
                            m[i].cycle_s - m[i].calls_s[0] - m[i].calls_s[1] - m[i].calls_s[2],
                            3,
                            {m[i].calls_s[0], m[i].calls_s[1], m[i].calls_s[2]},
                            loom_plexsim_setup_s(m[i].model_b),
                            d.shift * loom_us_to_s(pc.slot_us),
                            200,
                            o->jitter};
                }
                loom_plex_free(p);
                for (int d = LOOM_DISPATCH_RR; d <= LOOM_DISPATCH_FCFS; d++) {
                        loom_plexsim_pool_cfg c = {(loom_dispatch)d, 1.1, o->seed};
                        loom_plexsim_pool_res r;
                        loom_err e;
                        if (loom_plexsim_pool_run(&c, jobs, n, &r, &e)) {
                                fprintf(stderr, "loom sim: %s\n", e.msg);
                                return 1;
                        }
                        if (o->json)
                                printf("{\"compare\":\"dispatch\",\"model\":\"%s\",\"dispatch\":"
                                       "\"%s\",\"jobs\":%d,\"makespan_h\":%.3f,\"switches_per_h\":"
                                       "%.2f,\"delay_mean\":%.4f,\"queue_delay_p50\":%.4f,"
                                       "\"queue_delay_p99\":%.4f,\"bubble\":%.4f}\n",
                                       m[i].name, loom_dispatch_name((loom_dispatch)d), n,
                                       r.makespan_s / 3600, r.switches_per_h, r.delay_mean,
                                       r.delay_p50, r.delay_p99, r.bubble);
                        else
                                printf("%-6s %-5s %4d %11.2f %10.4f %10.4f %10.4f\n", m[i].name,
                                       loom_dispatch_name((loom_dispatch)d), n, r.switches_per_h,
                                       r.delay_mean, r.delay_p50, r.delay_p99);
                }
        }
        return 0;
}

/* loom (Algorithm 1 + round robin) and the plex placer (+ HRRS) through the same core and
 * simulator on WEAVE's default workload. */
static int weave(const opts *o, const loom_sim_trace *t)
{
        loom_sim_cfg cfg;
        loom_sim_cfg_default(&cfg);
        loom_sim_workload_cfg wc;
        loom_sim_workload_cfg_default(&wc);
        wc.seed = o->seed;
        wc.noise.tail_threshold = cfg.policy.tail_threshold;
        loom_sim_workload w;
        loom_err e;
        if (loom_sim_workload_build(&wc, t, &cfg.cluster, &w, &e)) {
                fprintf(stderr, "loom sim: %s\n", e.msg);
                return 1;
        }
        if (!o->json)
                printf("\n%-12s %10s %9s %9s %9s %10s %10s %7s %7s\n", "placer", "cost_$/h",
                       "slo_att", "slo_prof", "slowdown99", "bubble_tr", "bubble_ro", "joined",
                       "new");
        int rc = 0;
        for (int k = 0; k < 2 && !rc; k++) {
                cfg.policy.placer = k ? LOOM_PLACER_PLEX : LOOM_PLACER_LOOM;
                cfg.policy.dispatch = k ? LOOM_DISPATCH_HRRS : LOOM_DISPATCH_RR;
                loom_sim_result r;
                if ((rc = loom_sim_run(&cfg, &w, LOOM_SIM_LOOM, &r, &e))) {
                        fprintf(stderr, "loom sim: %s\n", e.msg);
                        break;
                }
                const char *name = k ? "plex+hrrs" : "loom+rr";
                unsigned long long joined = r.decisions[0] + r.decisions[1], fresh = r.decisions[2];
                if (o->json)
                        printf(
                            "{\"compare\":\"weave\",\"placer\":\"%s\",\"avg_cost_per_hour\":%.2f,"
                            "\"slo_attainment\":%.4f,\"slo_attainment_profiled\":%.4f,"
                            "\"slowdown_p99\":%.4f,\"bubble_train\":"
                            "%.4f,\"bubble_rollout\":%.4f,\"makespan_h\":%.3f,"
                            "\"joined_group\":%llu,\"new_group\":%llu}\n",
                            name, r.avg_cost_per_hour, r.slo_attainment, r.slo_attainment_wc,
                            r.slowdown_p99, r.bubble[LOOM_POOL_TRAIN], r.bubble[LOOM_POOL_ROLLOUT],
                            r.makespan_h, joined, fresh);
                else
                        printf("%-12s %10.1f %8.1f%% %8.1f%% %9.3f %9.1f%% %9.1f%% %7llu %7llu\n",
                               name, r.avg_cost_per_hour, 100 * r.slo_attainment,
                               100 * r.slo_attainment_wc, r.slowdown_p99,
                               100 * r.bubble[LOOM_POOL_TRAIN], 100 * r.bubble[LOOM_POOL_ROLLOUT],
                               joined, fresh);
                loom_sim_result_free(&r);
        }
        loom_sim_workload_free(&w);
        return rc ? 1 : 0;
}

int loom_cmd_sim_plex(int argc, char **argv)
{
        opts o = {.mask = 0xf,
                  .start = 165,
                  .count = 300,
                  .nodes = 20,
                  .jitter = 0.2,
                  .seed = 1,
                  .dispatch = true,
                  .weave = true};
        int rc = parse(argc, argv, &o);
        if (rc >= 0)
                return rc;
        char buf[PATH_MAX];
        const char *path = o.trace ? o.trace : loom_cmd_bundled(DEFAULT_TRACE, buf, sizeof buf);
        loom_sim_trace t;
        loom_err e;
        loom_err_clear(&e);
        if (loom_sim_trace_load(path, o.start, o.count, &t, &e)) {
                fprintf(stderr, "loom sim: %s\n", e.msg);
                return 1;
        }
        rc = cluster(&o, &t);
        if (!rc && o.dispatch)
                rc = dispatch(&o);
        if (!rc && o.weave)
                rc = weave(&o, &t);
        loom_sim_trace_free(&t);
        return rc;
}
