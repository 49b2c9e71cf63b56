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

#ifdef LOOM_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "../daemon.h"
#include "loom/state.h"
#include "state_cmd.h"

void loom_state_cmd_usage(FILE *f)
{
        fprintf(
            f,
            "usage: loom-state --dir DIR [options]      serve\n"
            "       loom-state bench [--json] [--dir DIR] [--quick] [--repeats N]\n"
            "       loom-state bench --device cuda [--bytes N] [--bucket N] [--gpu I] [--json]\n"
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
            "  --max-conns N        connections open at once (default 256)\n"
            "  --max-conns-per-uid N  connections open at once from one uid (default 64);\n"
            "                       the one over the limit is told why, and closed\n"
            "  --idle-timeout S     close a connection with no request for S seconds\n"
            "                       (default 300; 0: never); the C and Python clients\n"
            "                       reconnect by themselves\n"
            "  --msg-timeout S      a request, once begun, must arrive whole within S\n"
            "                       seconds, and each reply be taken (default 30; 0: never)\n"
            "  --quiet              no event log on stderr\n"
            "bench options:\n"
            "  --json               one JSON object (load_gbps, memcpy_gbps, disk_read_gbps,\n"
            "                       dd_direct_gbps, dedup_ratio, prefetch_hidden_fraction, ...)\n"
            "  --dir DIR            scratch directory on the disk to measure (default .)\n"
            "  --quick              small sizes (seconds, for tests)\n"
            "  --repeats N          best of N (default 5; cuda: 3)\n"
            "  --device D           emulated (default: the memfd device tier) or cuda: GPU\n"
            "                       memory through the CUDA runtime (dlopen'd libcudart;\n"
            "                       LOOM_CUDART=PATH picks the file), with pinned and pageable\n"
            "                       cudaMemcpy baselines and a two-stream switch\n"
            "  --bytes N            cuda: one state in GPU memory (default 4G), 64M tensors\n"
            "                       (under 1G: 16 tensors)\n"
            "  --bucket N           cuda: the client's bucket (default 64M)\n"
            "  --gpu I              cuda: device ordinal (default 0)\n"
            "  --help               this text\n");
}

/* A count for --max-conns*: 1..1000000. */
static int cmd_count(const char *opt, const char *v, int *out)
{
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || end == v || *end || n < 1 || n > 1000000 || v[0] == '+' || v[0] == ' ') {
                fprintf(stderr, "loom-state: %s: '%s' is not a count from 1 to 1000000\n", opt, v);
                return -1;
        }
        *out = (int)n;
        return 0;
}

/* Seconds for --*-timeout: a number >= 0 (a fraction allowed); 0 is stored as -1, "none". */
static int cmd_seconds(const char *opt, const char *v, double *out)
{
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !(x >= 0) || x > 1e6 || v[0] == '+' || v[0] == '-') {
                fprintf(stderr,
                        "loom-state: %s: '%s' is not a number of seconds from 0 (never) to "
                        "1000000\n",
                        opt, v);
                return -1;
        }
        *out = x > 0 ? x : -1;
        return 0;
}

int loom_state_cmd_bytes(const char *opt, const char *v, uint64_t *out)
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
        _Atomic int done; /* the serving thread returned: no more watchdog pings */
} runner;

static void *run_thread(void *arg)
{
        runner *r = arg;
        r->rc = loom_state_daemon_run(r->d, &r->e);
        r->done = 1;
        return NULL;
}

/* Under systemd (Type=notify): READY=1 once the socket listens and the disk tier is recovered,
 * WATCHDOG=1 at half of WatchdogSec while the serving thread runs, then STOPPING=1. Waits for
 * SIGTERM/SIGINT. Outside systemd (no $NOTIFY_SOCKET) only waits. */
static void wait_for_stop(const sigset_t *set, const runner *r)
{
        uint64_t wd_us = 0;
#ifdef LOOM_HAVE_SYSTEMD
        sd_notify(0, "READY=1\nSTATUS=serving");
        if (sd_watchdog_enabled(0, &wd_us) <= 0)
                wd_us = 0;
#endif
        for (;;) {
                uint64_t ns = wd_us ? wd_us * 500 : UINT64_C(3600) * 1000000000;
                struct timespec tick = {.tv_sec = (time_t)(ns / 1000000000),
                                        .tv_nsec = (long)(ns % 1000000000)};
                int sig = sigtimedwait(set, NULL, &tick);
                if (sig == SIGTERM || sig == SIGINT)
                        break;
#ifdef LOOM_HAVE_SYSTEMD
                if (wd_us && !r->done)
                        sd_notify(0, "WATCHDOG=1");
#endif
        }
#ifdef LOOM_HAVE_SYSTEMD
        sd_notify(0, "STOPPING=1");
#endif
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
                                             {"max-conns", required_argument, 0, 'c'},
                                             {"max-conns-per-uid", required_argument, 0, 'u'},
                                             {"idle-timeout", required_argument, 0, 'i'},
                                             {"msg-timeout", required_argument, 0, 't'},
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
                        if (loom_state_cmd_bytes("--host-bytes", optarg, &cfg.host_bytes))
                                return 2;
                        break;
                case 'D':
                        if (loom_state_cmd_bytes("--disk-bytes", optarg, &cfg.disk_bytes))
                                return 2;
                        break;
                case 'V':
                        if (loom_state_cmd_bytes("--device-bytes", optarg, &cfg.device_bytes))
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
                case 'c':
                        if (cmd_count("--max-conns", optarg, &cfg.max_conns))
                                return 2;
                        break;
                case 'u':
                        if (cmd_count("--max-conns-per-uid", optarg, &cfg.max_conns_per_uid))
                                return 2;
                        break;
                case 'i':
                        if (cmd_seconds("--idle-timeout", optarg, &cfg.idle_timeout_s))
                                return 2;
                        break;
                case 't':
                        if (cmd_seconds("--msg-timeout", optarg, &cfg.msg_timeout_s))
                                return 2;
                        break;
                case 'q':
                        cfg.log = NULL;
                        break;
                case 'h':
                        loom_state_cmd_usage(stdout);
                        return 0;
                default:
                        loom_state_cmd_usage(stderr);
                        return 2;
                }
        }
        if (optind < argc || !cfg.dir) {
                fprintf(stderr, "loom-state: %s\n",
                        optind < argc ? "unexpected argument" : "--dir is required");
                loom_state_cmd_usage(stderr);
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
                         "serving on %s (host %" PRIu64 " MiB, disk %" PRIu64
                         " MiB, dir %s; connections %d, %d per uid)",
                         loom_state_daemon_sock(r.d), cfg.host_bytes >> 20, cfg.disk_bytes >> 20,
                         cfg.dir, cfg.max_conns, cfg.max_conns_per_uid);
                daemon_log_line("loom-state", line);
        }
        pthread_t t;
        pthread_create(&t, NULL, run_thread, &r);
        wait_for_stop(&set, &r);
        loom_state_daemon_stop(r.d);
        pthread_join(t, NULL);
        loom_state_daemon_free(r.d);
        return r.rc ? 1 : 0;
}

int main(int argc, char **argv)
{
        if (argc > 1 && !strcmp(argv[1], "bench"))
                return loom_state_cmd_bench(argc - 1, argv + 1); /* tools.c */
        if (argc > 1 && !strcmp(argv[1], "stat"))
                return loom_state_cmd_stat(argc - 1, argv + 1);
        if (argc > 1 && !strcmp(argv[1], "serve"))
                return serve(argc - 1, argv + 1);
        return serve(argc, argv);
}
