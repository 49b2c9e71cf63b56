/*
 * micro.c - `loom micro temporal|trainmux|spatial`: WEAVE §6.2's micro-benchmarks on the
 * simulator. Each scenario (bench/micro/NAME.json, WEAVE Table 3 job types with phase times
 * chosen to match Table 4's solo iteration times and the stated rollout/train ratios) runs
 * under loom, solo (Solo-D) and colocated (veRL-style); the command prints every job's mean
 * iteration time, training throughput per dollar and loom's gain, and draws a Gantt chart of
 * loom's schedule.
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
#include "loom/spec.h"

static const struct micro {
        const char *name, *title;
        double paper_solo_iter, paper_loom_iter, paper_gain_solo, paper_gain_coloc,
            paper_gain_gavel;
} micros[] = {
    {"temporal", "Temporal multiplexing: 2 x Type-A", 257.7, 261.8, 1.82, 1.47, 1.73},
    {"trainmux", "Train multiplexing: 2 x Type-D + Type-E", 525.4, 552.0, 1.90, 1.35, 1.43},
    {"spatial", "Spatial multiplexing: Type-C + 2 x Type-D", 574.6, 630.8, 1.99, 1.43, 1.78},
};

static void usage(FILE *f)
{
        fprintf(f,
                "usage: loom micro temporal|trainmux|spatial [options]\n"
                "\n"
                "Runs one of WEAVE's micro-benchmarks (section 6.2) in the simulator under loom,\n"
                "solo (dedicated pools per job), colocated (every phase on the training GPUs) and\n"
                "gavel (Gavel+: job-level time fractions of shared nodes, no phase interleaving)\n"
                "and prints mean iteration times and training throughput per dollar. Phase times\n"
                "come from bench/micro/NAME.json (WEAVE Table 3 job types).\n"
                "\n"
                "  --scenario FILE   use this scenario instead of bench/micro/NAME.json\n"
                "  --out DIR         write the Gantt chart of loom's schedule (NAME.svg/.png)\n"
                "  --window S        seconds of schedule in the chart (default: 3 iterations)\n"
                "  --stochastic      draw response lengths (default: every phase at worst case)\n"
                "  --seed N          seed for --stochastic (default 1)\n"
                "  --json            one JSON object per policy per line\n"
                "\n"
                "PlexRL's plex-bubbles and plex-pack: see `loom micro plex-pack --help`.\n"
                "\n"
                "Exit status: 0 ok, 1 invalid scenario, 2 bad usage.\n");
}

typedef struct row {
        loom_sim_policy p;
        double iter_mean, cost_per_hour, iters_per_dollar, makespan_h;
} row;

int loom_cmd_micro(int argc, char **argv)
{
        static const struct option lo[] = {{"scenario", 1, 0, 's'}, {"out", 1, 0, 'o'},
                                           {"window", 1, 0, 'w'},   {"stochastic", 0, 0, 'r'},
                                           {"seed", 1, 0, 'S'},     {"json", 0, 0, 'j'},
                                           {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
        if (loom_cmd_micro_is_plex(argc, argv))
                return loom_cmd_micro_plex(argc, argv);
        const char *scen = NULL, *out = NULL;
        double window = 0;
        bool stochastic = false, json = false;
        unsigned long seed = 1;
        int c;
        opterr = 0;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
                char *end;
                switch (c) {
                case 'h':
                        usage(stdout);
                        return 0;
                case 's':
                        scen = optarg;
                        break;
                case 'o':
                        out = optarg;
                        break;
                case 'w':
                        window = strtod(optarg, &end);
                        if (*end || !(window > 0)) {
                                fprintf(stderr, "loom micro: invalid --window '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'r':
                        stochastic = true;
                        break;
                case 'S':
                        seed = strtoul(optarg, &end, 10);
                        if (*end || end == optarg) {
                                fprintf(stderr, "loom micro: invalid --seed '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'j':
                        json = true;
                        break;
                default:
                        return loom_cmd_bad_option("loom micro", argv, usage);
                }
        }
        if (optind != argc - 1) {
                usage(stderr);
                return 2;
        }
        const struct micro *m = NULL;
        for (size_t i = 0; i < sizeof micros / sizeof micros[0]; i++)
                if (!strcmp(argv[optind], micros[i].name))
                        m = &micros[i];
        if (!m) {
                fprintf(stderr,
                        "loom micro: unknown benchmark '%s' (temporal, trainmux, spatial)\n",
                        argv[optind]);
                return 2;
        }
        char rel[64], path[PATH_MAX + 64];
        if (!scen) {
                snprintf(rel, sizeof rel, "bench/micro/%s.json", m->name);
                scen = loom_cmd_bundled(rel, path, sizeof path);
        }
        loom_err e;
        loom_err_clear(&e);
        loom_scenario sc;
        if (loom_scenario_load(scen, &sc, &e)) {
                size_t n = strlen(scen);
                if (!strncmp(e.msg, scen, n) && e.msg[n] == ':') /* unreadable: path named */
                        fprintf(stderr, "loom micro: %s\n", e.msg);
                else if (e.line > 0)
                        fprintf(stderr, "loom micro: %s:%d:%d: %s\n", scen, e.line, e.col, e.msg);
                else
                        fprintf(stderr, "loom micro: %s: %s\n", scen, e.msg);
                return 1;
        }
        loom_sim_cfg cfg;
        loom_sim_cfg_default(&cfg);
        cfg.cluster = sc.cluster;
        cfg.policy = sc.policy;
        cfg.record_gantt = true;
        loom_sim_noise noise;
        loom_sim_noise_default(&noise);
        noise.deterministic = !stochastic;
        noise.tail_threshold = cfg.policy.tail_threshold;
        loom_sim_workload w;
        int rc = loom_sim_workload_from_specs(sc.jobs, NULL, sc.n_jobs, &noise, seed, &cfg.cluster,
                                              &w, &e);
        loom_scenario_free(&sc);
        if (rc) {
                fprintf(stderr, "loom micro: %s: %s\n", scen, e.msg);
                return 1;
        }
        static const loom_sim_policy pols[4] = {LOOM_SIM_LOOM, LOOM_SIM_SOLO, LOOM_SIM_COLOCATED,
                                                LOOM_SIM_GAVEL};
        loom_sim_result res[4];
        row rows[4];
        int n = 0;
        for (; n < 4; n++) {
                if ((rc = loom_sim_run(&cfg, &w, pols[n], &res[n], &e)))
                        break;
                double iters = 0, it = 0;
                for (int j = 0; j < w.n; j++) {
                        iters += (double)w.jobs[j].spec.iterations;
                        it += res[n].iter_s[j];
                }
                rows[n] = (row){pols[n], it / w.n, res[n].avg_cost_per_hour,
                                iters / res[n].total_cost, res[n].makespan_h};
        }
        if (!rc && out) {
                loom_sim_result g = res[0];
                double span = window;
                if (span <= 0) {
                        span = 0;
                        for (int j = 0; j < w.n; j++)
                                span = fmax(span, res[0].iter_s[j]);
                        span *= 3;
                }
                /* only the first `span` seconds, so phases stay readable */
                int k = 0;
                loom_sim_interval *iv = malloc(sizeof *iv * (size_t)(g.n_gantt ? g.n_gantt : 1));
                for (int i = 0; iv && i < g.n_gantt; i++)
                        if (loom_us_to_s(g.gantt[i].start) < span) {
                                iv[k] = g.gantt[i];
                                if (loom_us_to_s(iv[k].end) > span)
                                        iv[k].end = loom_us_from_s(span);
                                k++;
                        }
                g.gantt = iv;
                g.n_gantt = k;
                char title[128];
                snprintf(title, sizeof title, "loom: %s", m->title);
                rc = iv ? loom_sim_plot_gantt(out, m->name, title, &g, &w, &e) : LOOM_ENOMEM;
                free(iv);
        }
        if (rc) {
                fprintf(stderr, "loom micro: %s\n", e.msg[0] ? e.msg : loom_strerror(rc));
        } else {
                const row *solo = &rows[1], *coloc = &rows[2];
                if (!json) {
                        printf("%s (%s%s)\n", m->title, scen, stochastic ? ", stochastic" : "");
                        printf("%-10s %12s %10s %12s %9s %9s\n", "policy", "iter_s(mean)", "$/h",
                               "iters/$", "vs_solo", "vs_coloc");
                }
                for (int i = 0; i < n; i++) {
                        double gs = rows[i].iters_per_dollar / solo->iters_per_dollar;
                        double gc = rows[i].iters_per_dollar / coloc->iters_per_dollar;
                        if (json)
                                printf("{\"micro\":\"%s\",\"policy\":\"%s\",\"iteration_s\":%.2f,"
                                       "\"avg_cost_per_hour\":%.2f,\"iterations_per_dollar\":%.5f,"
                                       "\"throughput_per_dollar_vs_solo\":%.4f,"
                                       "\"throughput_per_dollar_vs_colocated\":%.4f}\n",
                                       m->name, loom_sim_policy_name(rows[i].p), rows[i].iter_mean,
                                       rows[i].cost_per_hour, rows[i].iters_per_dollar, gs, gc);
                        else
                                printf("%-10s %12.1f %10.2f %12.4f %8.2fx %8.2fx\n",
                                       loom_sim_policy_name(rows[i].p), rows[i].iter_mean,
                                       rows[i].cost_per_hour, rows[i].iters_per_dollar, gs, gc);
                }
                if (!json)
                        printf("WEAVE (testbed): solo %.1f s, WEAVE %.1f s per iteration; "
                               "%.2fx over Solo-D, %.2fx over veRL, %.2fx over Gavel+\n",
                               m->paper_solo_iter, m->paper_loom_iter, m->paper_gain_solo,
                               m->paper_gain_coloc, m->paper_gain_gavel);
        }
        for (int i = 0; i < n; i++)
                loom_sim_result_free(&res[i]);
        loom_sim_workload_free(&w);
        return rc ? 1 : 0;
}
