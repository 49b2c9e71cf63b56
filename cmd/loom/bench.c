/*
 * bench.c - `loom bench placement`: decision latency of the inter-group placement with N jobs
 * already placed. Jobs are drawn from WEAVE Table 6 "Mixed" (a uniformly random profile and size
 * class, phase times uniform in its range), one 8-GPU node per pool, SLO ~ U(1, 2), host-memory
 * working sets from Table 2 for a random 3B/7B/14B/32B model. After placing N jobs, it times
 * `probes` further decisions (loom_sched_decide: the full search, nothing committed, so N stays
 * fixed) and prints one JSON line per N. Latency is reported as wall time and as the thread's
 * CPU time (which leaves out preemption by other processes on a shared machine). It never
 * fails on timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cmd.h"
#include "loom/sched.h"

static void usage(FILE *f)
{
        fprintf(f,
                "usage: loom bench placement [--n N,N,...] [--probes P] [--seed S]\n"
                "\n"
                "Decision latency of loom's placement with N concurrent jobs already placed\n"
                "(WEAVE Table 6 Mixed, SLO ~ U(1,2)). One JSON line per N: groups, p50/p99/max\n"
                "microseconds per decision, current and peak RSS.\n"
                "Defaults: --n 5,9,13,100,500,1000,2000,10000,100000 --probes 2000 --seed 1\n"
                "  --placer loom|plex   placement policy (default loom); with plex the line\n"
                "                       adds the fraction of groups pruned before fitting\n"
                "  --reps R             decide each probe R times (a decision changes nothing)\n"
                "                       and keep its fastest: a probe's own cost, without the\n"
                "                       machine's interruptions (default 1: each timed once)\n"
                "  --switch-s S         every switch of a node between jobs takes S s (default\n"
                "                       0): jobs too tight for two per iteration cannot run lone\n"
                "  --pool-grow on|off   joins may grow a group's training pool (default on)\n"
                "\n"
                "usage: loom bench hrrs [--queued N] [--probes P]: one HRRS decision\n");
}

static double uni(uint64_t *s, double lo, double hi)
{
        return lo + (hi - lo) * (double)(loom_splitmix64(s) >> 11) / 9007199254740992.0;
}

/* WEAVE Table 6: [profile][size] = {roll lo, roll hi, train lo, train hi} seconds. */
static const double table6[3][3][4] = {
    {{50, 100, 50, 100}, {100, 200, 100, 200}, {200, 300, 200, 300}},
    {{100, 200, 25, 50}, {200, 400, 50, 100}, {400, 600, 100, 200}},
    {{25, 50, 100, 200}, {50, 100, 200, 400}, {100, 200, 400, 600}},
};

static void draw_job(uint64_t *r, int i, loom_job_spec *sp)
{
        static const double models[] = {3, 7, 14, 32};
        const double *t = table6[loom_splitmix64(r) % 3][loom_splitmix64(r) % 3];
        loom_job_spec_init(sp);
        snprintf(sp->id, sizeof sp->id, "j%d", i);
        sp->rollout_gpus = sp->train_gpus = 8;
        sp->t_roll = loom_us_from_s(uni(r, t[0], t[1]));
        sp->t_train = loom_us_from_s(uni(r, t[2], t[3]));
        sp->slo = uni(r, 1.0, 2.0);
        double b = models[loom_splitmix64(r) % 4];
        sp->mem_rollout = loom_table2_mem_rollout(b);
        sp->mem_train = loom_table2_mem_train(b);
}

static double clock_us(clockid_t id)
{
        struct timespec ts;
        clock_gettime(id, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static long rss_kib(const char *key)
{
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        long v = -1;
        size_t n = strlen(key);
        while (f && fgets(line, sizeof line, f))
                if (!strncmp(line, key, n))
                        v = strtol(line + n, NULL, 10);
        if (f)
                fclose(f);
        return v;
}

/* Live groups, the denominator of the pruned fraction. */
static long st_groups(const loom_sched *s)
{
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        return st.groups;
}

static int bench_one(int n, int probes, int reps, uint64_t seed, loom_placer placer,
                     double switch_s, bool grow)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        po.placer = placer;
        po.warm_switch = loom_us_from_s(switch_s);
        po.pool_grow = grow;
        loom_err e;
        loom_sched *s = loom_sched_new(&cl, &po, &e);
        double *lat = malloc(sizeof *lat * (size_t)probes);
        double *cpu = malloc(sizeof *cpu * (size_t)probes);
        if (!s || !lat || !cpu) {
                free(cpu);
                fprintf(stderr, "loom bench: out of memory\n");
                free(lat);
                loom_sched_free(s);
                return 1;
        }
        uint64_t r = seed * 1000003ULL + (uint64_t)n;
        loom_decision d;
        loom_decision_init(&d, false);
        loom_action a;
        double t0 = clock_us(CLOCK_MONOTONIC);
        for (int i = 0; i < n; i++) {
                loom_job_spec sp;
                draw_job(&r, i, &sp);
                loom_job_id id;
                if (loom_sched_submit(s, 0, &sp, &d, &id, &e)) {
                        fprintf(stderr, "loom bench: submit failed: %s\n", e.msg);
                        return 1;
                }
                while (loom_sched_next_action(s, &a))
                        ;
        }
        double fill_s = (clock_us(CLOCK_MONOTONIC) - t0) / 1e6;
        long seen = 0, pruned = 0;
        for (int p = 0; p < probes; p++) {
                loom_job_spec sp;
                draw_job(&r, n + p, &sp);
                for (int k = 0; k < reps; k++) {
                        double c1 = clock_us(CLOCK_THREAD_CPUTIME_ID);
                        double t1 = clock_us(CLOCK_MONOTONIC);
                        int rc = loom_sched_decide(s, &sp, &d, &e);
                        double wall = clock_us(CLOCK_MONOTONIC) - t1;
                        double used = clock_us(CLOCK_THREAD_CPUTIME_ID) - c1;
                        if (rc) {
                                fprintf(stderr, "loom bench: decide failed: %s\n", e.msg);
                                return 1;
                        }
                        if (k == 0 || wall < lat[p])
                                lat[p] = wall;
                        if (k == 0 || used < cpu[p])
                                cpu[p] = used;
                }
                seen += st_groups(s), pruned += d.groups_pruned_bound;
        }
        qsort(lat, (size_t)probes, sizeof *lat, loom_cmp_double);
        qsort(cpu, (size_t)probes, sizeof *cpu, loom_cmp_double);
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        printf("{\"bench\":\"placement\",\"jobs\":%d,\"groups\":%d,\"rollout_nodes\":%d,"
               "\"train_nodes\":%d,\"closed_groups\":%d,\"bound_pruned\":%d,\"cost_per_hour\":%.2f,"
               "\"decisions\":%d,\"p50_us\":%.1f,"
               "\"p99_us\":%.1f,\"max_us\":%.1f,\"cpu_p50_us\":%.1f,\"cpu_p99_us\":%.1f,\"fill_s\":"
               "%.3f,\"rss_mib\":%.1f,"
               "\"peak_rss_mib\":%.1f,\"placer\":\"%s\",\"pruned_fraction\":%.4f,\"reps\":%d}\n",
               n, st.groups, st.nodes[0], st.nodes[1],
               d.groups_pruned_saturated + d.groups_pruned_full, d.groups_pruned_bound,
               st.cost_per_hour, probes, loom_quantile_rank(lat, (size_t)probes, 0.5),
               loom_quantile_rank(lat, (size_t)probes, 0.99), lat[probes - 1],
               loom_quantile_rank(cpu, (size_t)probes, 0.5),
               loom_quantile_rank(cpu, (size_t)probes, 0.99), fill_s,
               (double)rss_kib("VmRSS:") / 1024.0, (double)rss_kib("VmHWM:") / 1024.0,
               placer == LOOM_PLACER_PLEX ? "plex" : "loom",
               seen ? (double)pruned / (double)seen : 0.0, reps);
        fflush(stdout);
        free(lat);
        free(cpu);
        loom_sched_free(s);
        return 0;
}

int loom_cmd_bench(int argc, char **argv)
{
        if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
                usage(argc < 2 ? stderr : stdout);
                return argc < 2 ? 2 : 0;
        }
        if (strcmp(argv[1], "placement") && strcmp(argv[1], "hrrs")) {
                fprintf(stderr, "loom bench: unknown benchmark '%s' (try: placement)\n", argv[1]);
                return 2;
        }
        char list[256] = "5,9,13,100,500,1000,2000,10000,100000";
        long probes = 2000, reps = 1;
        unsigned long long seed = 1;
        loom_placer placer = LOOM_PLACER_LOOM;
        double switch_s = 0;
        bool grow = true;
        if (!strcmp(argv[1], "hrrs"))
                return loom_cmd_bench_hrrs(argc - 1, argv + 1); /* bench_plex.c */
        for (int i = 2; i < argc; i++) {
                char *end = NULL;
                if (!strcmp(argv[i], "--help")) {
                        usage(stdout);
                        return 0;
                } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
                        snprintf(list, sizeof list, "%s", argv[++i]);
                } else if (!strcmp(argv[i], "--placer") && i + 1 < argc) {
                        i++;
                        if (strcmp(argv[i], "loom") && strcmp(argv[i], "plex")) {
                                fprintf(stderr, "loom bench: --placer must be loom or plex\n");
                                return 2;
                        }
                        placer = argv[i][0] == 'p' ? LOOM_PLACER_PLEX : LOOM_PLACER_LOOM;
                } else if (!strcmp(argv[i], "--probes") && i + 1 < argc) {
                        probes = strtol(argv[++i], &end, 10);
                        if (*end || probes < 1 || probes > 10000000) {
                                fprintf(stderr, "loom bench: --probes must be 1..10000000\n");
                                return 2;
                        }
                } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
                        reps = strtol(argv[++i], &end, 10);
                        if (*end || reps < 1 || reps > 100) {
                                fprintf(stderr, "loom bench: --reps must be 1..100\n");
                                return 2;
                        }
                } else if (!strcmp(argv[i], "--switch-s") && i + 1 < argc) {
                        switch_s = strtod(argv[++i], &end);
                        if (*end || end == argv[i] || !(switch_s >= 0 && switch_s <= 3600)) {
                                fprintf(stderr, "loom bench: --switch-s must be 0..3600\n");
                                return 2;
                        }
                } else if (!strcmp(argv[i], "--pool-grow") && i + 1 < argc) {
                        i++;
                        if (strcmp(argv[i], "on") && strcmp(argv[i], "off")) {
                                fprintf(stderr, "loom bench: --pool-grow must be on or off\n");
                                return 2;
                        }
                        grow = argv[i][1] == 'n';
                } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
                        seed = strtoull(argv[++i], &end, 10);
                        if (*end) {
                                fprintf(stderr, "loom bench: --seed must be an integer\n");
                                return 2;
                        }
                } else {
                        fprintf(stderr, "loom bench: unknown option '%s'\n", argv[i]);
                        usage(stderr);
                        return 2;
                }
        }
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                char *end;
                long n = strtol(tok, &end, 10);
                if (*end || n < 0 || n > 10000000) {
                        fprintf(stderr, "loom bench: --n takes job counts 0..10000000, got '%s'\n",
                                tok);
                        return 2;
                }
                if (bench_one((int)n, (int)probes, (int)reps, seed, placer, switch_s, grow))
                        return 1;
        }
        return 0;
}
