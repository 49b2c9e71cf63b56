/*
 * loomd - the loom control plane daemon. Parses options, builds a loom_server (src/server),
 * and serves until SIGTERM or SIGINT, then stops accepting, finishes the replies in flight and
 * closes the store. Signals are handled by sigwait on the main thread, so no library code runs
 * in signal context. Exit status: 0 after a clean stop, 1 for invalid input or a failed start,
 * 2 for bad usage, 3 when the store could no longer be read while running (a
 * store that refuses writes is survived: docs/operations.md), 4 when a replica was deposed
 * (another leads; docs/ha.md).
 */
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../daemon.h"
#include "loom/server.h"
#include "loomd_exec.h"
#include "loomd_ha.h"
#include "loomd_state.h"
#include "loomd_token.h"

static void usage(FILE *f)
{
        fprintf(
            f,
            "usage: loomd --data-dir DIR [options]\n"
            "       loomd token create|list|revoke|rotate-secret ... (loomd token --help)\n"
            "\n"
            "The loom control plane: schedules the phases of RL jobs (docs/api.md).\n"
            "\n"
            "options:\n"
            "  --data-dir DIR        store (SQLite, WAL) location; created if missing\n"
            "  --listen HOST:PORT    IPv4, [IPv6] or name to serve on (default 127.0.0.1:7480;\n"
            "                        port 0 picks a free one, see --port-file)\n"
            "  --cluster FILE        cluster (and policy, quotas) JSON, as in `loom place`\n"
            "  --lease-timeout S     lease/permit expiry without renewal (default 30)\n"
            "  --idle-timeout S      close idle connections after S seconds (default 10)\n"
            "  --request-timeout S   close a connection that has not sent a whole request\n"
            "                        S seconds after opening or after its last reply,\n"
            "                        however slowly it trickles bytes (default 10; 0: off)\n"
            "  --max-conns N         connections served at once (default 8192)\n"
            "  --max-conns-per-addr N  of them from one client address (default 2048;\n"
            "                        0: no limit); see docs/operations.md\n"
            "  --max-wait S          upper bound of an acquire's ?wait= (default 300)\n"
            "  --drift-window N      iterations whose phase times are checked against\n"
            "                        the planned ones (default 5; 0 = no drift\n"
            "                        re-admission)\n"
            "  --drift-threshold X   re-admit a job whose recent p95 phase time exceeds\n"
            "                        X times the planned one (default 1.05)\n"
            "  --admission A         worst (default) | p99 | p95: after --learn-after\n"
            "                        iterations, re-plan a job's group on that quantile\n"
            "                        of its observed phase times (docs/operations.md)\n"
            "  --learn-after K       iterations observed before re-planning (1..20,\n"
            "                        default 3); with --admission p99|p95\n"
            "  --sync-full           fsync every commit (survives power loss, slower)\n"
            "  --compact-min N       compact the store's log from N entries on (4096; 0: never)\n"
            "  --port-file FILE      write the bound port to FILE once serving\n"
            "  --state [NODE=]SOCK   loom-state socket (all nodes, or NODE): prefetch\n"
            "                        hints and host-tier accounting (docs/state.md)\n"
            "  --executor local|slurm  start, watch and stop the jobs' workers (with\n"
            "                        --worker CMD) and power nodes (docs/slurm.md)\n"
            "  --exec-nodes FILE     pools -> partitions, node ids -> node names\n"
            "  --worker CMD          each worker's command (sh -c), env LOOM_URL, ...\n"
            "  --exec-dir DIR        workers' output files (default: the data dir)\n"
            "  --slurm-conf FILE     slurm.conf for the Slurm tools\n"
            "  --no-power            leave node power to the cluster\n"
            "  --tls-cert FILE       serve HTTPS with this PEM certificate (chain)...\n"
            "  --tls-key FILE        ...and its PEM key; required off loopback\n"
            "  --require-auth        tokens even before any exists (default: tokens\n"
            "                        once `loomd token create` made one; none on\n"
            "                        loopback until then; docs/security.md)\n"
            "  --insecure-loopback   no authentication, every caller is admin; refused\n"
            "                        unless --listen is a loopback address\n"
            "  --public-metrics      /metrics without a token (default: admin only)\n"
            "  --store etcd://H:P,..  replicate: one of several loomd replicas on etcd\n"
            "                        (default sqlite: this loomd alone; docs/ha.md)\n"
            "  --ha-name NAME        the replica set's name in etcd (default loom)\n"
            "  --ha-ttl S            leadership lease (default 3; failover takes ~S s)\n"
            "  --advertise URL       this replica's URL for clients (default from --listen)\n"
            "  --ha-snapshot N       snapshot the store into etcd every N commits and drop\n"
            "                        the log it covers (default 10000)\n"
            "  --quiet               no event log on stderr\n"
            "  --help                this text\n");
}

static int fail(const loom_err *e, int status)
{
        fprintf(stderr, "loomd: %s%s%s\n", e->field, e->field[0] ? ": " : "", e->msg);
        return status;
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
            {"data-dir", required_argument, NULL, 'd'},
            {"listen", required_argument, NULL, 'l'},
            {"cluster", required_argument, NULL, 'c'},
            {"lease-timeout", required_argument, NULL, 't'},
            {"idle-timeout", required_argument, NULL, 'i'},
            {"max-wait", required_argument, NULL, 'w'},
            {"request-timeout", required_argument, NULL, 'Q'},
            {"max-conns", required_argument, NULL, 'j'},
            {"max-conns-per-addr", required_argument, NULL, 'J'},
            {"sync-full", no_argument, NULL, 'S'},
            {"drift-window", required_argument, NULL, 'W'},
            {"drift-threshold", required_argument, NULL, 'T'},
            {"port-file", required_argument, NULL, 'p'},
            {"quiet", no_argument, NULL, 'q'},
            {"state", required_argument, NULL, 'L'},
            {"admission", required_argument, NULL, 'A'},
            {"learn-after", required_argument, NULL, 'K'},
            {"executor", required_argument, NULL, 'X'},
            {"exec-nodes", required_argument, NULL, 'N'},
            {"worker", required_argument, NULL, 'E'},
            {"exec-dir", required_argument, NULL, 'D'},
            {"slurm-conf", required_argument, NULL, 'F'},
            {"no-power", no_argument, NULL, 'P'},
            {"tls-cert", required_argument, NULL, 'C'},
            {"tls-key", required_argument, NULL, 'k'},
            {"require-auth", no_argument, NULL, 'R'},
            {"insecure-loopback", no_argument, NULL, 'I'},
            {"public-metrics", no_argument, NULL, 'M'},
            {"compact-min", required_argument, NULL, 'O'},
            {"store", required_argument, NULL, 'H'},
            {"ha-name", required_argument, NULL, 'H'},
            {"ha-ttl", required_argument, NULL, 'H'},
            {"advertise", required_argument, NULL, 'H'},
            {"ha-snapshot", required_argument, NULL, 'H'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
        };
        if (argc > 1 && !strcmp(argv[1], "token"))
                return loomd_token_main(argc - 1, argv + 1);
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.log = daemon_log_line;
        cfg.log_arg = "loomd";
        const char *port_file = NULL;
        /* applied after every option: they override a --cluster file's policy wherever given */
        bool set_admission = false;
        loom_admission admission = LOOM_ADMIT_WORST;
        int learn_after = 0;
        loomd_state *st = NULL;
        loomd_exec_opts xo = {0};
        loomd_ha_opts ho = {0};
        loom_replica *rep = NULL;
        loom_exec *exec = NULL;
        loom_err e;
        int c, idx = 0;
        while ((c = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
                switch (c) {
                case 'c':
                        if (loom_server_cfg_load(&cfg, optarg, &e))
                                return fail(&e, 1);
                        break;
                case 'p':
                        port_file = optarg;
                        break;
                case 'q':
                        cfg.log = NULL;
                        break;
                case 'L':
                        if (loomd_state_add(&st, optarg)) {
                                loomd_state_free(st);
                                return 2;
                        }
                        break;
                case 'A':
                        if (loom_admission_parse(optarg, &admission)) {
                                fprintf(stderr,
                                        "loomd: --admission: expected worst, p99 or p95, got "
                                        "'%s'\n",
                                        optarg);
                                return 2;
                        }
                        set_admission = true;
                        break;
                case 'K': {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (end == optarg || *end || v < 1 || v > LOOM_LEARN_WINDOW) {
                                fprintf(stderr,
                                        "loomd: --learn-after: expected 1..%d iterations, got "
                                        "'%s'\n",
                                        LOOM_LEARN_WINDOW, optarg);
                                return 2;
                        }
                        learn_after = (int)v;
                        break;
                }
                case 'X':
                        xo.kind = optarg;
                        break;
                case 'N':
                        xo.nodes = optarg;
                        break;
                case 'E':
                        xo.worker = optarg;
                        break;
                case 'D':
                        xo.dir = optarg;
                        break;
                case 'F':
                        xo.slurm_conf = optarg;
                        break;
                case 'P':
                        xo.no_power = true;
                        break;
                case 'H':
                        if (loomd_ha_option(&ho, opts[idx].name, optarg))
                                return 2;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                case '?':
                        usage(stderr);
                        return 2;
                default: /* the server's own options (options.c) */
                        if (loom_server_cfg_option(&cfg, opts[idx].name, optarg, &e))
                                return fail(&e, 2);
                        break;
                }
        }
        if (optind < argc || !cfg.data_dir) {
                fprintf(stderr,
                        optind < argc ? "loomd: unexpected argument '%s'\n"
                                      : "loomd: --data-dir is required\n",
                        argv[optind]);
                usage(stderr);
                return 2;
        }
        if (set_admission)
                cfg.policy.admission = admission;
        if (learn_after)
                cfg.policy.learn_after = learn_after;
        daemon_raise_nofile();
        /* Block the stop signals in every thread; main collects them with sigwait. */
        sigset_t stop;
        daemon_block_stop(&stop);

        loomd_state_wire(st, &cfg);
        if (ho.store) { /* a replica: follow until it leads (docs/ha.md) */
                int hrc = loomd_ha_follow(&ho, &cfg, &stop, &rep);
                if (hrc || !rep) {
                        loomd_state_free(st);
                        return hrc;
                }
        }
        int xrc = loomd_exec_create(&xo, &cfg, &exec);
        if (xrc)
                return xrc;
        loom_server *s = loom_server_new(&cfg, &e);
        if (s)
                loomd_exec_bound(exec, &cfg, loom_server_port(s), rep);
        if (!s || loom_server_start(s, &e)) {
                loom_server_free(s);
                loom_exec_free(exec);
                return fail(&e, 1);
        }
        if (port_file && loom_server_write_port_file(s, port_file, &e)) {
                loom_server_free(s);
                return fail(&e, 1);
        }
        if (cfg.log) {
                char line[512];
                loom_server_serving_line(&cfg, loom_server_port(s), line, sizeof line);
                daemon_log_line("loomd", line);
        }
        int status = 0;
        for (;;) {
                struct timespec tick = {.tv_sec = 1};
                int sig = sigtimedwait(&stop, NULL, &tick);
                if (sig == SIGTERM || sig == SIGINT)
                        break;
                if (rep && loom_replica_deposed(rep)) {
                        status = 4; /* another replica may lead: stop at once */
                        break;
                }
                if (loom_server_failed(s)) {
                        status = 3;
                        break;
                }
        }
        loom_server_stop(s);
        loom_server_free(s);
        loom_exec_free(exec);
        loomd_state_free(st);
        loom_replica_close(rep);
        if (cfg.log)
                daemon_log_line("loomd", status == 4   ? "stopped: deposed, another replica leads"
                                         : status ? "stopped after a store failure"
                                                  : "stopped");
        return status;
}
