/*
 * sim_plex.c - `loom sim --policy plex-...`: PlexRL's cluster reproductions (Figure 8), the
 * HRRS / FCFS / round-robin comparison on shared groups, and loom against PlexRL's placer on
 * WEAVE's default workload. The options become a loom_plexsim_study_cfg; the work is in src/sim
 * (plex_*.c) and src/core (plex.c, hrrs.c).
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "loom/plexsim.h"

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

static int parse(int argc, char **argv, loom_plexsim_study_cfg *o)
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
                        if (loom_plexsim_policy_list_parse(optarg, &o->policies))
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
                        o->seed = strtoull(optarg, &end, 10);
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

int loom_cmd_sim_plex(int argc, char **argv)
{
        loom_plexsim_study_cfg c;
        loom_plexsim_study_cfg_default(&c);
        int rc = parse(argc, argv, &c);
        if (rc >= 0)
                return rc;
        char buf[PATH_MAX];
        if (!c.trace)
                c.trace = loom_cmd_bundled(DEFAULT_TRACE, buf, sizeof buf);
        loom_err e;
        loom_err_clear(&e);
        if (loom_plexsim_study(&c, stdout, &e)) {
                fprintf(stderr, "loom sim: %s\n", e.msg);
                return 1;
        }
        return 0;
}
