/*
 * loom-state - the per-node state manager daemon (docs/state.md), and its figures and
 * inspection commands:
 *
 *   loom-state --dir DIR [options]         serve until SIGTERM/SIGINT
 *   loom-state bench [--json] [options]    the figures of bench/state.sh
 *   loom-state stat --sock PATH [--json]   capacity and usage per job and tier
 *
 * Exit status: 0 success, 1 invalid input or a failed start, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon.h"
#include "loom/state.h"

static void usage(FILE *f)
{
        fprintf(
            f,
            "usage: loom-state --dir DIR [options]      serve\n"
            "       loom-state bench [--json] [--dir DIR] [--quick] [--repeats N]\n"
            "       loom-state stat --sock PATH [--json]\n"
            "\n"
            "The per-node state manager: holds each job's tensors on the device, host\n"
            "(pinned) and disk (O_DIRECT) tiers under canonical keys (docs/state.md).\n"
            "\n"
            "serve options:\n"
            "  --dir DIR            disk tier directory (created; recovered on start)\n"
            "  --sock PATH          Unix socket (default DIR/loom-state.sock)\n"
            "  --host-bytes N       host tier capacity (default 1G); sizes take a suffix\n"
            "                       K, M, G, T or P (powers of 1024)\n"
            "  --disk-bytes N       disk tier capacity (default 16G)\n"
            "  --device-bytes N     per emulated device; 0 = no device residency (default 0)\n"
            "  --no-mlock           do not pin the host pool\n"
            "  --group GROUP        members (name or gid) may touch every job's state; else\n"
            "                       only the uid that first stored a job's state may\n"
            "  --quiet              no event log on stderr\n"
            "bench options:\n"
            "  --json               one JSON object (load_gbps, memcpy_gbps, disk_read_gbps,\n"
            "                       dd_direct_gbps, dedup_ratio, prefetch_hidden_fraction, ...)\n"
            "  --dir DIR            scratch directory on the disk to measure (default .)\n"
            "  --quick              small sizes (seconds, for tests)\n"
            "  --repeats N          best of N (default 5)\n"
            "  --help               this text\n");
}

static int parse_bytes(const char *opt, const char *v, uint64_t *out)
{
        if (loom_state_parse_bytes(v, out) == 0)
                return 0;
        fprintf(stderr,
                "loom-state: %s: '%s' is not a size in bytes (a number with an optional suffix "
                "K, M, G, T or P, powers of 1024, e.g. 512M or 1T)\n",
                opt, v);
        return -1;
}

typedef struct runner {
        loom_state_daemon *d;
        loom_err e;
        int rc;
} runner;

static void *run_thread(void *arg)
{
        runner *r = arg;
        r->rc = loom_state_daemon_run(r->d, &r->e);
        return NULL;
}

static int serve(int argc, char **argv)
{
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.log = daemon_log_line;
        cfg.log_arg = "loom-state";
        static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                             {"sock", required_argument, 0, 's'},
                                             {"host-bytes", required_argument, 0, 'H'},
                                             {"disk-bytes", required_argument, 0, 'D'},
                                             {"device-bytes", required_argument, 0, 'V'},
                                             {"no-mlock", no_argument, 0, 'm'},
                                             {"group", required_argument, 0, 'g'},
                                             {"quiet", no_argument, 0, 'q'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
        int o;
        while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (o) {
                case 'd':
                        cfg.dir = optarg;
                        break;
                case 's':
                        cfg.sock_path = optarg;
                        break;
                case 'H':
                        if (parse_bytes("--host-bytes", optarg, &cfg.host_bytes))
                                return 2;
                        break;
                case 'D':
                        if (parse_bytes("--disk-bytes", optarg, &cfg.disk_bytes))
                                return 2;
                        break;
                case 'V':
                        if (parse_bytes("--device-bytes", optarg, &cfg.device_bytes))
                                return 2;
                        break;
                case 'm':
                        cfg.no_mlock = 1;
                        break;
                case 'g': {
                        struct group *g = getgrnam(optarg);
                        char *end;
                        long gid = g ? (long)g->gr_gid : strtol(optarg, &end, 10);
                        if (!g && (end == optarg || *end || gid < 0)) {
                                fprintf(stderr, "loom-state: --group: no group '%s'\n", optarg);
                                return 2;
                        }
                        cfg.group = gid;
                        break;
                }
                case 'q':
                        cfg.log = NULL;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc || !cfg.dir) {
                fprintf(stderr, "loom-state: %s\n",
                        optind < argc ? "unexpected argument" : "--dir is required");
                usage(stderr);
                return 2;
        }
        cfg.host_bytes = (cfg.host_bytes + 4095) & ~UINT64_C(4095);
        sigset_t set;
        daemon_block_stop(&set);
        runner r = {0};
        if (loom_state_daemon_new(&cfg, &r.d, &r.e)) {
                fprintf(stderr, "loom-state: %s%s%s\n", r.e.field[0] ? r.e.field : "",
                        r.e.field[0] ? ": " : "", r.e.msg);
                return 1;
        }
        if (cfg.log) {
                char line[600];
                snprintf(line, sizeof line,
                         "serving on %s (host %" PRIu64 " MiB, disk %" PRIu64 " MiB, dir %s)",
                         loom_state_daemon_sock(r.d), cfg.host_bytes >> 20, cfg.disk_bytes >> 20,
                         cfg.dir);
                daemon_log_line("loom-state", line);
        }
        pthread_t t;
        pthread_create(&t, NULL, run_thread, &r);
        int sig;
        sigwait(&set, &sig);
        loom_state_daemon_stop(r.d);
        pthread_join(t, NULL);
        loom_state_daemon_free(r.d);
        return r.rc ? 1 : 0;
}

static int bench(int argc, char **argv)
{
        loom_state_bench_cfg cfg = {.dir = "."};
        int json = 0;
        static const struct option opts[] = {
            {"json", no_argument, 0, 'j'},  {"dir", required_argument, 0, 'd'},
            {"quick", no_argument, 0, 'k'}, {"repeats", required_argument, 0, 'r'},
            {"help", no_argument, 0, 'h'},  {0, 0, 0, 0}};
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
                case 'r': {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (*end || v < 1 || v > 100) {
                                fprintf(stderr, "loom-state: --repeats: 1..100, got '%s'\n",
                                        optarg);
                                return 2;
                        }
                        cfg.repeats = (int)v;
                        break;
                }
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        loom_state_bench_result r;
        loom_err e;
        loom_err_clear(&e);
        if (loom_state_bench(&cfg, &r, &e)) {
                fprintf(stderr, "loom-state bench: %s\n", e.msg);
                return 1;
        }
        if (json) {
                printf("{\"load_gbps\": %.3f, \"memcpy_gbps\": %.3f, \"disk_read_gbps\": %.3f, "
                       "\"dd_direct_gbps\": %.3f, \"dedup_ratio\": %.6f, "
                       "\"prefetch_hidden_fraction\": %.4f, \"switch_noprefetch_s\": %.4f, "
                       "\"switch_prefetch_s\": %.4f, \"state_bytes\": %" PRIu64
                       ", \"state_scale\": %" PRIu64 ", \"cold_switch_s\": %.4f, "
                       "\"warm_switch_s\": %.4f, \"host_locked\": %s, "
                       "\"prefetch_by_phase\": [",
                       r.load_gbps, r.memcpy_gbps, r.disk_read_gbps, r.dd_direct_gbps,
                       r.dedup_ratio, r.prefetch_hidden_fraction, r.switch_noprefetch_s,
                       r.switch_prefetch_s, r.state_bytes, r.state_scale, r.cold_switch_s,
                       r.warm_switch_s, r.host_locked ? "true" : "false");
                for (int i = 0; i < 4; i++)
                        printf("%s{\"phase_vs_cold_load\": %.2f, \"hidden_fraction\": %.4f, "
                               "\"switch_s\": %.4f}",
                               i ? ", " : "", r.phase_fraction[i], r.hidden_at[i],
                               r.switch_at_s[i]);
                printf("]}\n");
                return 0;
        }
        printf("host -> device load      %8.2f GB/s   memcpy %8.2f GB/s   ratio %.2f\n",
               r.load_gbps, r.memcpy_gbps, r.load_gbps / r.memcpy_gbps);
        printf("disk read (O_DIRECT)     %8.2f GB/s   dd     %8.2f GB/s   ratio %.2f %s\n",
               r.disk_read_gbps, r.dd_direct_gbps,
               r.dd_direct_gbps > 0 ? r.disk_read_gbps / r.dd_direct_gbps : 0, r.dd_note);
        printf("DP=8 offload footprint   %8.4f of the naive bytes\n", r.dedup_ratio);
        printf("prefetch one phase ahead %8.1f%% of the load hidden (%.3f s -> %.3f s)\n",
               100 * r.prefetch_hidden_fraction, r.switch_noprefetch_s, r.switch_prefetch_s);
        for (int i = 0; i < 4; i++)
                printf("  phase %4.2fx the cold load %8.1f%% hidden (%.3f s)\n",
                       r.phase_fraction[i], 100 * r.hidden_at[i], r.switch_at_s[i]);
        printf("7B-class state (1/%" PRIu64 ", %.0f MiB)  cold %.3f s  warm %.3f s;"
               "  full size ~ cold %.1f s  warm %.1f s\n",
               r.state_scale, (double)r.state_bytes / (1 << 20), r.cold_switch_s, r.warm_switch_s,
               r.cold_switch_s * (double)r.state_scale, r.warm_switch_s * (double)r.state_scale);
        if (!r.host_locked)
                printf("note: the host pool was not mlocked (RLIMIT_MEMLOCK too low)\n");
        return 0;
}

static int stat_cmd(int argc, char **argv)
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
                        usage(stdout);
                        return 0;
                } else {
                        usage(stderr);
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
        if (json) {
                printf("{\"host_cap\": %" PRIu64 ", \"host_used\": %" PRIu64
                       ", \"disk_cap\": %" PRIu64 ", \"disk_used\": %" PRIu64
                       ", \"host_locked\": %s, \"evictions\": %" PRIu64 ", \"prefetches\": %" PRIu64
                       ", \"prefetch_bytes\": %" PRIu64 ", \"jobs\": [",
                       st.host_cap, st.host_used, st.disk_cap, st.disk_used,
                       st.host_locked ? "true" : "false", st.evictions, st.prefetches,
                       st.prefetch_bytes);
                for (size_t i = 0; i < st.njobs; i++)
                        printf("%s{\"job\": \"%s\", \"host_bytes\": %" PRIu64
                               ", \"disk_bytes\": %" PRIu64 ", \"slices\": %" PRIu64 "}",
                               i ? ", " : "", st.jobs[i].job, st.jobs[i].host_bytes,
                               st.jobs[i].disk_bytes, st.jobs[i].slices);
                printf("]}\n");
        } else {
                printf("host %" PRIu64 "/%" PRIu64 " bytes%s, disk %" PRIu64 "/%" PRIu64
                       " bytes, %" PRIu64 " evictions\n",
                       st.host_used, st.host_cap, st.host_locked ? " (pinned)" : "", st.disk_used,
                       st.disk_cap, st.evictions);
                for (size_t i = 0; i < st.njobs; i++)
                        printf("  %-24s host %12" PRIu64 "  disk %12" PRIu64 "  slices %" PRIu64
                               "\n",
                               st.jobs[i].job, st.jobs[i].host_bytes, st.jobs[i].disk_bytes,
                               st.jobs[i].slices);
        }
        loom_state_stats_free(&st);
        return 0;
}

int main(int argc, char **argv)
{
        if (argc > 1 && !strcmp(argv[1], "bench"))
                return bench(argc - 1, argv + 1);
        if (argc > 1 && !strcmp(argv[1], "stat"))
                return stat_cmd(argc - 1, argv + 1);
        if (argc > 1 && !strcmp(argv[1], "serve"))
                return serve(argc - 1, argv + 1);
        return serve(argc, argv);
}
