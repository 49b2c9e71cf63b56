/*
 * demo.c - `loom demo`: parses the options and runs the live demo (src/demo, loom/demo.h):
 * loomd plus real CPU-bound RL jobs on this machine, a timeline and a final table on stdout.
 * Exit status: 0 when every job finished with exactly its iterations, 1 otherwise, 2 for bad
 * usage.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "loom/demo.h"

static void usage(FILE *f)
{
        fprintf(f,
                "usage: loom demo [options]\n"
                "\n"
                "Starts loomd on a temporary data dir and runs RL jobs of different shapes as\n"
                "separate processes doing real CPU work: rollouts on CPU 0 (the rollout pool),\n"
                "training on CPU 1 (the training pool), each phase under a run permit from\n"
                "loomd. Then runs each job alone for comparison and prints a table. About a\n"
                "minute; leaves nothing running.\n"
                "\n"
                "options:\n"
                "  --jobs N        3 or 4 (the 4th is rejected at admission; default 4)\n"
                "  --seed N        response lengths and crash times (default 1)\n"
                "  --scale X       multiply every phase time (default 1.0)\n"
                "  --alone N       iterations of each solo run (default 3)\n"
                "  --crash N       SIGKILL loomd N times during the shared run and restart it\n"
                "  --state-mib N   each job's state moved through loom-state on every switch\n"
                "                  (MiB, 0 = none; default 16; docs/state.md)\n"
                "  --data-dir DIR  use DIR instead of a temporary directory (kept)\n"
                "  --keep          keep the temporary directory\n"
                "  --quiet         no timeline, only the summary\n"
                "  --help          this text\n"
                "\n"
                "  --real          instead: three real PyTorch GRPO jobs (examples/rl) under\n"
                "                  loomd, weights through the sync engine, then the same jobs\n"
                "                  alone; reward curves (printed and PNG) and the table.\n"
                "                  Two to four minutes. With --real: --seed, --data-dir,\n"
                "                  --keep, --quiet, --state-mib (0: optimizer state in files\n"
                "                  instead of loom-state) and\n"
                "  --steps N       GRPO steps per job (default 20)\n"
                "  --plot FILE     write the reward curves there (PNG)\n"
                "  --python PATH   interpreter with torch and numpy (default /usr/bin/python3)\n"
                "\n"
                "  --executor slurm  instead: the jobs through a Slurm cluster started on this\n"
                "                  machine (scripts/slurm-cluster.sh, as root), printing where\n"
                "                  Slurm ran each phase (docs/slurm.md). With --data-dir, --keep,\n"
                "                  --quiet\n");
}

static bool via_slurm;       /* --executor slurm */
static double worker_s = -1; /* --exec-worker S: run as an executor's worker */

static int parse_opts(int argc, char **argv, loom_demo_opts *o, loom_demo_real_opts *r, bool *real)
{
        static const struct option lo[] = {
            {"jobs", required_argument, NULL, 'j'},
            {"seed", required_argument, NULL, 's'},
            {"scale", required_argument, NULL, 'x'},
            {"alone", required_argument, NULL, 'a'},
            {"crash", required_argument, NULL, 'c'},
            {"data-dir", required_argument, NULL, 'd'},
            {"keep", no_argument, NULL, 'k'},
            {"quiet", no_argument, NULL, 'q'},
            {"help", no_argument, NULL, 'h'},
            {"state-mib", required_argument, NULL, 'S'},
            {"real", no_argument, NULL, 'R'},
            {"steps", required_argument, NULL, 'N'},
            {"plot", required_argument, NULL, 'P'},
            {"python", required_argument, NULL, 'Y'},
            {"executor", required_argument, NULL, 'E'},
            {"exec-worker", required_argument, NULL, 'W'},
            {NULL, 0, NULL, 0},
        };
        loom_demo_opts_default(o);
        loom_demo_real_opts_default(r);
        optind = 1;
        int ch;
        char *end;
        while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
                switch (ch) {
                case 'j':
                        o->jobs = (int)strtol(optarg, &end, 10);
                        if (*end || o->jobs < 3 || o->jobs > 4)
                                return fprintf(stderr, "loom demo: --jobs must be 3 or 4\n"), 2;
                        break;
                case 's':
                        o->seed = strtoull(optarg, &end, 10);
                        if (*end)
                                return fprintf(stderr, "loom demo: --seed: not a number\n"), 2;
                        break;
                case 'x':
                        o->scale = strtod(optarg, &end);
                        if (*end || !(o->scale >= 0.1 && o->scale <= 10))
                                return fprintf(stderr, "loom demo: --scale in [0.1, 10]\n"), 2;
                        break;
                case 'a':
                        o->alone_iters = (int)strtol(optarg, &end, 10);
                        if (*end || o->alone_iters < 1 || o->alone_iters > 100)
                                return fprintf(stderr, "loom demo: --alone in [1, 100]\n"), 2;
                        break;
                case 'c':
                        o->crash = (int)strtol(optarg, &end, 10);
                        if (*end || o->crash < 0 || o->crash > 20)
                                return fprintf(stderr, "loom demo: --crash in [0, 20]\n"), 2;
                        break;
                case 'd':
                        o->dir = optarg;
                        break;
                case 'S':
                        o->state_mib = (int)strtol(optarg, &end, 10);
                        if (*end || o->state_mib < 0 || o->state_mib > 4096)
                                return fprintf(stderr, "loom demo: --state-mib in [0, 4096]\n"), 2;
                        break;
                case 'k':
                        o->keep = true;
                        break;
                case 'q':
                        o->quiet = true;
                        break;
                case 'R':
                        *real = true;
                        break;
                case 'N':
                        r->steps = (int)strtol(optarg, &end, 10);
                        if (*end || r->steps < 1 || r->steps > 1000)
                                return fprintf(stderr, "loom demo: --steps in [1, 1000]\n"), 2;
                        break;
                case 'P':
                        r->plot = optarg;
                        break;
                case 'Y':
                        r->python = optarg;
                        break;
                case 'E':
                        if (strcmp(optarg, "slurm") && strcmp(optarg, "local"))
                                return fprintf(stderr, "loom demo: --executor local|slurm\n"), 2;
                        via_slurm = !strcmp(optarg, "slurm");
                        break;
                case 'W':
                        worker_s = strtod(optarg, &end);
                        if (*end || !(worker_s >= 0 && worker_s <= 3600))
                                return fprintf(stderr, "loom demo: --exec-worker S\n"), 2;
                        break;
                case 'h':
                        usage(stdout);
                        return -1;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "loom demo: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }
        return 0;
}

int loom_cmd_demo(int argc, char **argv)
{
        loom_demo_opts o;
        loom_demo_real_opts r;
        bool real = false;
        int rc = parse_opts(argc, argv, &o, &r, &real);
        if (rc)
                return rc < 0 ? 0 : rc;
        loom_err e;
        if (worker_s >= 0)
                return loom_demo_exec_worker(worker_s);
        if (via_slurm) {
                loom_demo_slurm_opts so;
                loom_demo_slurm_opts_default(&so);
                so.dir = o.dir;
                so.keep = o.keep;
                so.quiet = o.quiet;
                rc = loom_demo_slurm_run(&so, stdout, &e);
                if (rc && rc != LOOM_ECORRUPT)
                        fprintf(stderr, "loom demo: %s%s%s\n", e.field, e.field[0] ? ": " : "",
                                e.msg);
                return rc ? 1 : 0;
        }
        if (real) {
                r.seed = o.seed;
                r.dir = o.dir;
                r.keep = o.keep;
                r.quiet = o.quiet;
                r.state_mib = o.state_mib;
        }
        rc = real ? loom_demo_real_run(&r, stdout, &e) : loom_demo_run(&o, stdout, &e);
        if (rc && rc != LOOM_ECORRUPT) /* a failed check is already in the report */
                fprintf(stderr, "loom demo: %s%s%s\n", e.field, e.field[0] ? ": " : "", e.msg);
        return rc ? 1 : 0;
}
