/*
 * tools.c - loom-state's figures and inspection commands:
 *
 *   loom-state bench [--json] [--device emulated|cuda] [options]
 *   loom-state stat --sock PATH [--json]
 *
 * Exit status: 0 success, 1 invalid input or a failed run, 2 bad usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/state.h"
#include "state_cmd.h"

static int bench_cuda(const loom_state_bench_cfg *cfg, loom_state_gpu_bench_cfg *g, int json)
{
        g->dir = cfg->dir;
        g->repeats = cfg->repeats;
        loom_state_gpu_bench_result r;
        loom_err e;
        loom_err_clear(&e);
        if (loom_state_gpu_bench(g, &r, &e)) {
                fprintf(stderr, "loom-state bench --device cuda: %s\n", e.msg);
                return 1;
        }
        loom_state_gpu_bench_print(stdout, &r, json);
        return 0;
}

/* An integer option's value in lo..100 into *out: 0, or -1 after a message. */
static int int_opt(const char *opt, const char *v, int lo, int *out)
{
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < lo || n > 100) {
                fprintf(stderr, "loom-state: %s: %d..100, got '%s'\n", opt, lo, v);
                return -1;
        }
        *out = (int)n;
        return 0;
}

int loom_state_cmd_bench(int argc, char **argv)
{
        loom_state_bench_cfg cfg = {.dir = "."};
        loom_state_gpu_bench_cfg g = {0};
        int json = 0, cuda = 0;
        static const struct option opts[] = {
            {"json", no_argument, 0, 'j'},         {"dir", required_argument, 0, 'd'},
            {"quick", no_argument, 0, 'k'},        {"repeats", required_argument, 0, 'r'},
            {"device", required_argument, 0, 'D'}, {"bytes", required_argument, 0, 'b'},
            {"bucket", required_argument, 0, 'B'}, {"gpu", required_argument, 0, 'g'},
            {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
        int o;
        while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (o) {
                case 'j':
                        json = 1;
                        break;
                case 'd':
                        cfg.dir = optarg;
                        break;
                case 'k':
                        cfg.quick = 1;
                        break;
                case 'D':
                        if (strcmp(optarg, "cuda") && strcmp(optarg, "emulated")) {
                                fprintf(stderr,
                                        "loom-state: --device: cuda or emulated, got "
                                        "'%s'\n",
                                        optarg);
                                return 2;
                        }
                        cuda = !strcmp(optarg, "cuda");
                        break;
                case 'b':
                        if (loom_state_cmd_bytes("--bytes", optarg, &g.bytes))
                                return 2;
                        break;
                case 'B':
                        if (loom_state_cmd_bytes("--bucket", optarg, &g.bucket_bytes))
                                return 2;
                        break;
                case 'g':
                        if (int_opt("--gpu", optarg, 0, &g.device))
                                return 2;
                        break;
                case 'r':
                        if (int_opt("--repeats", optarg, 1, &cfg.repeats))
                                return 2;
                        break;
                case 'h':
                        loom_state_cmd_usage(stdout);
                        return 0;
                default:
                        loom_state_cmd_usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                loom_state_cmd_usage(stderr);
                return 2;
        }
        if (cuda)
                return bench_cuda(&cfg, &g, json);
        loom_state_bench_result r;
        loom_err e;
        loom_err_clear(&e);
        if (loom_state_bench(&cfg, &r, &e)) {
                fprintf(stderr, "loom-state bench: %s\n", e.msg);
                return 1;
        }
        loom_state_bench_print(stdout, &r, json);
        return 0;
}

int loom_state_cmd_stat(int argc, char **argv)
{
        const char *sock = NULL;
        int json = 0;
        static const struct option opts[] = {{"sock", required_argument, 0, 's'},
                                             {"json", no_argument, 0, 'j'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
        int o;
        while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                if (o == 's')
                        sock = optarg;
                else if (o == 'j')
                        json = 1;
                else if (o == 'h') {
                        loom_state_cmd_usage(stdout);
                        return 0;
                } else {
                        loom_state_cmd_usage(stderr);
                        return 2;
                }
        }
        if (!sock || optind < argc) {
                fprintf(stderr, "loom-state stat: --sock is required\n");
                return 2;
        }
        loom_state_client *c;
        loom_state_stats st;
        loom_err e;
        if (loom_state_connect(sock, &c, &e) || loom_state_stat(c, &st, &e)) {
                fprintf(stderr, "loom-state stat: %s\n", e.msg);
                return 1;
        }
        loom_state_close(c);
        loom_state_stats_print(stdout, &st, json);
        loom_state_stats_free(&st);
        return 0;
}
