/*
 * micro_plex.c - `loom micro plex-bubbles|plex-pack`: PlexRL's Table 2 bubble ratios and the
 * two-job packing savings of §6.2 (Figure 7a), on the simulated shared training pool.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "loom/plexsim.h"

static void usage(FILE *f)
{
        fprintf(f, "usage: loom micro plex-bubbles|plex-pack [options]\n"
                   "\n"
                   "PlexRL micro-benchmarks on the simulated shared training pool (GPU time is\n"
                   "modelled, not run), with the Table 2 cycles and training calls of the 7B, 30B\n"
                   "and 235B models and the Table 1 GPU counts.\n"
                   "  plex-bubbles  one job alone: the fraction of time its training pool idles\n"
                   "  plex-pack     two jobs on one training pool (plex placement, HRRS, a state\n"
                   "                load of 19.0 s x size/30B per switch) against a pool each:\n"
                   "                GPU-hours per training step saved\n"
                   "\n"
                   "  --iterations N   steps per job (default 100)\n"
                   "  --dispatch D     rr | hrrs | fcfs for plex-pack (default hrrs)\n"
                   "  --json           one JSON line\n"
                   "\n"
                   "Exit status: 0 ok, 2 bad usage.\n");
}

bool loom_cmd_micro_is_plex(int argc, char **argv)
{
        for (int i = 1; i < argc; i++)
                if (!strcmp(argv[i], "plex-bubbles") || !strcmp(argv[i], "plex-pack"))
                        return true;
        return false;
}

static loom_plexsim_pool_job pool_job(const loom_plexsim_model *m, int iters, double start)
{
        double train = m->calls_s[0] + m->calls_s[1] + m->calls_s[2];
        return (loom_plexsim_pool_job){m->cycle_s - train,
                                       3,
                                       {m->calls_s[0], m->calls_s[1], m->calls_s[2]},
                                       loom_plexsim_setup_s(m->model_b),
                                       start,
                                       iters,
                                       0};
}

static int bubbles(int iters, bool json)
{
        int n;
        const loom_plexsim_model *m = loom_plexsim_models(&n);
        if (json)
                printf("{\"micro\":\"plex-bubbles\",\"models\":[");
        else
                printf("%-6s %9s %9s %9s\n", "model", "cycle_s", "bubble", "paper");
        for (int i = 0; i < n; i++) {
                loom_plexsim_pool_cfg c = {LOOM_DISPATCH_HRRS, 1.1, 1};
                loom_plexsim_pool_job j = pool_job(&m[i], iters, 0);
                loom_plexsim_pool_res r;
                loom_err e;
                if (loom_plexsim_pool_run(&c, &j, 1, &r, &e)) {
                        fprintf(stderr, "loom micro: %s\n", e.msg);
                        return 1;
                }
                if (json)
                        printf("%s{\"model\":\"%s\",\"bubble\":%.4f,\"paper_bubble\":%.4f}",
                               i ? "," : "", m[i].name, r.bubble, m[i].paper_bubble);
                else
                        printf("%-6s %9.2f %8.2f%% %8.2f%%\n", m[i].name, r.makespan_s / iters,
                               100 * r.bubble, 100 * m[i].paper_bubble);
        }
        if (json)
                printf("]}\n");
        return 0;
}

/* The second job's phase offset: what the plex placer chooses for it on the first job's
 * group. */
static double offset_of(const loom_plexsim_model *m)
{
        loom_plex_cfg pc;
        loom_plex_cfg_default(&pc);
        pc.nodes = m->train_gpus / 8;
        loom_plex *p = loom_plex_new(&pc, NULL);
        if (!p)
                return 0;
        loom_us calls[3];
        for (int i = 0; i < 3; i++)
                calls[i] = loom_us_from_s(m->calls_s[i]);
        loom_plex_job j;
        loom_plex_job_from_calls(&j, pc.nodes,
                                 loom_us_from_s(m->cycle_s) - calls[0] - calls[1] - calls[2], calls,
                                 3, loom_us_from_s(loom_plexsim_setup_s(m->model_b)), true);
        loom_plex_decision a, b;
        double off = 0;
        if (!loom_plex_place(p, 1, &j, &a, NULL) && !loom_plex_place(p, 2, &j, &b, NULL) &&
            b.placed && !b.new_group)
                off = b.shift * loom_us_to_s(pc.slot_us);
        loom_plex_free(p);
        return off;
}

static int pack(int iters, loom_dispatch d, bool json)
{
        int n;
        const loom_plexsim_model *m = loom_plexsim_models(&n);
        if (json)
                printf("{\"micro\":\"plex-pack\",\"dispatch\":\"%s\",\"models\":[",
                       loom_dispatch_name(d));
        else
                printf("%-12s %7s %9s %9s %9s %9s %8s %9s %8s\n", "model", "gpus", "offset_s",
                       "split_gh", "pack_gh", "iter_x", "switches", "saved", "paper");
        /* The last row is 235B with ZeRO-offload (§6.1): its optimizer state lives in host
         * memory already, so a switch moves no optimizer state (setup 0). */
        for (int i = 0; i <= n; i++) {
                bool offload = i == n;
                const loom_plexsim_model *mi = offload ? &m[n - 1] : &m[i];
                loom_plexsim_pool_cfg c = {d, 1.1, 1};
                loom_plexsim_pool_job one = pool_job(mi, iters, 0);
                loom_plexsim_pool_job two[2] = {pool_job(mi, iters, 0),
                                                pool_job(mi, iters, offset_of(mi))};
                if (offload)
                        two[0].setup_s = two[1].setup_s = 0;
                const char *name = offload ? "235B-offload" : mi->name;
                loom_plexsim_pool_res rs, rp;
                loom_err e;
                if (loom_plexsim_pool_run(&c, &one, 1, &rs, &e) ||
                    loom_plexsim_pool_run(&c, two, 2, &rp, &e)) {
                        fprintf(stderr, "loom micro: %s\n", e.msg);
                        return 1;
                }
                /* GPU-hours per step: every GPU a job holds, for as long as the run lasts. */
                double split = (mi->train_gpus + mi->rollout_gpus) * rs.makespan_s / 3600 / iters;
                double packed =
                    (mi->train_gpus + 2.0 * mi->rollout_gpus) * rp.makespan_s / 3600 / (2 * iters);
                double saved = 1 - packed / split;
                if (json)
                        printf("%s{\"model\":\"%s\",\"gpu_hours_saved\":%.4f,\"paper_saved\":%.4f,"
                               "\"split_gpu_h_per_step\":%.4f,\"pack_gpu_h_per_step\":%.4f,"
                               "\"switches\":%lld}",
                               i ? "," : "", name, saved, mi->paper_saved, split, packed,
                               (long long)rp.switches);
                else
                        printf("%-12s %3d+%-3d %9.1f %9.3f %9.3f %9.3f %8lld %8.2f%% %7.2f%%\n",
                               name, mi->train_gpus, mi->rollout_gpus, two[1].start_s, split,
                               packed, rp.makespan_s / rs.makespan_s, (long long)rp.switches,
                               100 * saved, 100 * mi->paper_saved);
        }
        if (json)
                printf("]}\n");
        return 0;
}

int loom_cmd_micro_plex(int argc, char **argv)
{
        static const struct option lo[] = {{"iterations", 1, 0, 'i'},
                                           {"dispatch", 1, 0, 'd'},
                                           {"json", 0, 0, 'j'},
                                           {"help", 0, 0, 'h'},
                                           {0, 0, 0, 0}};
        int iters = 100, c;
        bool json = false;
        loom_dispatch d = LOOM_DISPATCH_HRRS;
        opterr = 0;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
                char *end;
                switch (c) {
                case 'h':
                        usage(stdout);
                        return 0;
                case 'i':
                        iters = (int)strtol(optarg, &end, 10);
                        if (*end || iters < 1 || iters > 100000) {
                                fprintf(stderr, "loom micro: invalid --iterations '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'd':
                        if (loom_dispatch_parse(optarg, &d)) {
                                fprintf(stderr,
                                        "loom micro: --dispatch must be rr, hrrs or fcfs\n");
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
        if (!strcmp(argv[optind], "plex-bubbles"))
                return bubbles(iters, json);
        return pack(iters, d, json);
}
