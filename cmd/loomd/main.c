/*
 * loomd - the loom control plane daemon. Parses options, builds a loom_server (src/server),
 * and serves until SIGTERM or SIGINT, then stops accepting, finishes the replies in flight and
 * closes the store. Signals are handled by sigwait on the main thread, so no library code runs
 * in signal context. Exit status: 0 after a clean stop, 1 for invalid input or a failed start,
 * 2 for bad usage, 3 when the store failed while running.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../daemon.h"
#include "loom/server.h"
#include "loom/spec.h"
#include "loomd_exec.h"
#include "loomd_state.h"
#include "loomd_token.h"

static void usage(FILE *f)
{
        fprintf(f, "usage: loomd --data-dir DIR [options]\n"
                   "       loomd token create|list|revoke|rotate-secret ... (loomd token --help)\n"
                   "\n"
                   "The loom control plane: schedules the phases of RL jobs (docs/api.md).\n"
                   "\n"
                   "options:\n"
                   "  --data-dir DIR        store (SQLite, WAL) location; created if missing\n"
                   "  --listen HOST:PORT    IPv4 address to serve on (default 127.0.0.1:7480;\n"
                   "                        port 0 picks a free one, see --port-file)\n"
                   "  --cluster FILE        cluster (and policy) JSON, as in `loom place`\n"
                   "  --lease-timeout S     lease/permit expiry without renewal (default 30)\n"
                   "  --idle-timeout S      close idle connections after S seconds (default 10)\n"
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
                   "  --quiet               no event log on stderr\n"
                   "  --help                this text\n");
}

static int parse_seconds(const char *opt, const char *v, double *out)
{
        char *end;
        errno = 0;
        *out = strtod(v, &end);
        if (errno || end == v || *end || !(*out >= 0)) {
                fprintf(stderr, "loomd: %s: '%s' is not a number of seconds\n", opt, v);
                return -1;
        }
        return 0;
}

static int parse_listen(const char *v, loom_server_cfg *c)
{
        const char *colon = strrchr(v, ':');
        char *end;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || colon == v || (size_t)(colon - v) >= sizeof c->listen_host ||
            end == colon + 1 || *end || port < 0 || port > 65535) {
                fprintf(stderr, "loomd: --listen: expected HOST:PORT, got '%s'\n", v);
                return -1;
        }
        snprintf(c->listen_host, sizeof c->listen_host, "%.*s", (int)(colon - v), v);
        c->port = (int)port;
        return 0;
}

/* A scenario-shaped file ({"cluster":{..},"policy":{..},"jobs":[..]}) or a bare cluster. */
static int load_cluster(const char *path, loom_server_cfg *c)
{
        FILE *f = fopen(path, "rb");
        if (!f) {
                fprintf(stderr, "loomd: %s: %s\n", path, strerror(errno));
                return -1;
        }
        char *text = NULL;
        size_t len = 0, cap = 0, n;
        char chunk[8192];
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
                if (len + n + 1 > cap) {
                        cap = (len + n + 1) * 2;
                        char *p = realloc(text, cap);
                        if (!p) {
                                free(text);
                                fclose(f);
                                return -1;
                        }
                        text = p;
                }
                memcpy(text + len, chunk, n);
                len += n;
        }
        fclose(f);
        loom_err e;
        loom_err_clear(&e);
        json_t *root = loom_json_parse(text ? text : "", len, &e);
        int rc = root ? 0 : -1;
        if (root && !json_is_object(root)) {
                loom_err_set(&e, LOOM_EINVAL, "", "must be a JSON object");
                rc = -1;
        }
        if (!rc) {
                json_t *cl = json_object_get(root, "cluster");
                json_t *pol = json_object_get(root, "policy");
                rc = loom_cluster_cfg_from_json(cl ? cl : root, cl ? "cluster" : "", text, len,
                                                &c->cluster, &e);
                if (!rc && pol)
                        rc = loom_policy_cfg_from_json(pol, "policy", text, len, &c->cluster,
                                                       &c->policy, &e);
        }
        if (rc) {
                /* The decoder's sentences usually name the field already. */
                bool named = !e.field[0] || strstr(e.msg, e.field);
                char where[64] = "";
                if (e.line > 0)
                        snprintf(where, sizeof where, ":%d:%d", e.line, e.col);
                fprintf(stderr, "loomd: %s%s: %s%s%s\n", path, where, named ? "" : e.field,
                        named ? "" : ": ", e.msg);
        }
        json_decref(root);
        free(text);
        c->have_cluster = rc == 0;
        return rc;
}

/* Long-polls hold one descriptor each: raise the soft limit to the hard one. */
static void raise_nofile(void)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
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
        loom_exec *exec = NULL;
        int c;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case 'd':
                        cfg.data_dir = optarg;
                        break;
                case 'l':
                        if (parse_listen(optarg, &cfg))
                                return 2;
                        break;
                case 'c':
                        if (load_cluster(optarg, &cfg))
                                return 1;
                        break;
                case 't':
                        if (parse_seconds("--lease-timeout", optarg, &cfg.lease_timeout_s))
                                return 2;
                        break;
                case 'i':
                        if (parse_seconds("--idle-timeout", optarg, &cfg.idle_timeout_s))
                                return 2;
                        break;
                case 'w':
                        if (parse_seconds("--max-wait", optarg, &cfg.max_wait_s))
                                return 2;
                        break;
                case 'S':
                        cfg.sync_full = true;
                        break;
                case 'W': {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (end == optarg || *end || v < 0 || v > 1000000) {
                                fprintf(stderr, "loomd: --drift-window: '%s' is not a count\n",
                                        optarg);
                                return 2;
                        }
                        cfg.drift_window = (int)v;
                        break;
                }
                case 'T': {
                        char *end;
                        errno = 0;
                        cfg.drift_threshold = strtod(optarg, &end);
                        if (errno || end == optarg || *end) {
                                fprintf(stderr, "loomd: --drift-threshold: '%s' is not a number\n",
                                        optarg);
                                return 2;
                        }
                        break;
                }
                case 'O': {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (end == optarg || *end || v < 0 || v > INT32_MAX) {
                                fprintf(stderr, "loomd: --compact-min: '%s' is not a count\n",
                                        optarg);
                                return 2;
                        }
                        cfg.compact_min = (int)v;
                        break;
                }
                case 'p':
                        port_file = optarg;
                        break;
                case 'q':
                        cfg.log = NULL;
                        break;
                case 'L':
                        if (loomd_state_add(&st, optarg))
                                return 2;
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
                case 'C':
                        cfg.tls_cert = optarg;
                        break;
                case 'k':
                        cfg.tls_key = optarg;
                        break;
                case 'R':
                case 'I':
                        if (cfg.auth != LOOM_AUTH_AUTO) {
                                fprintf(stderr, "loomd: --require-auth and --insecure-loopback "
                                                "exclude each other\n");
                                return 2;
                        }
                        cfg.auth = c == 'R' ? LOOM_AUTH_TOKENS : LOOM_AUTH_NONE;
                        break;
                case 'M':
                        cfg.public_metrics = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
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
        raise_nofile();
        /* Block the stop signals in every thread; main collects them with sigwait. */
        sigset_t stop;
        daemon_block_stop(&stop);

        loomd_state_wire(st, &cfg);
        int xrc = loomd_exec_create(&xo, &cfg, &exec);
        if (xrc)
                return xrc;
        loom_err e;
        loom_server *s = loom_server_new(&cfg, &e);
        if (s)
                loomd_exec_bound(exec, &cfg, loom_server_port(s));
        if (!s || loom_server_start(s, &e)) {
                fprintf(stderr, "loomd: %s%s%s\n", e.field[0] ? e.field : "",
                        e.field[0] ? ": " : "", e.msg);
                loom_server_free(s);
                loom_exec_free(exec);
                return 1;
        }
        if (port_file) {
                char tmp[4200];
                snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
                FILE *f = fopen(tmp, "w");
                if (!f || fprintf(f, "%d\n", loom_server_port(s)) < 0 || fclose(f) ||
                    rename(tmp, port_file)) {
                        fprintf(stderr, "loomd: %s: %s\n", port_file, strerror(errno));
                        loom_server_free(s);
                        return 1;
                }
        }
        if (cfg.log) {
                char line[512];
                snprintf(line, sizeof line, "serving %s on %s:%d, data in %s, admission %s",
                         cfg.tls_cert ? "https" : "http", cfg.listen_host, loom_server_port(s),
                         cfg.data_dir, loom_admission_name(cfg.policy.admission));
                daemon_log_line("loomd", line);
        }
        int status = 0;
        for (;;) {
                struct timespec tick = {.tv_sec = 1};
                int sig = sigtimedwait(&stop, NULL, &tick);
                if (sig == SIGTERM || sig == SIGINT)
                        break;
                if (loom_server_failed(s)) {
                        status = 3;
                        break;
                }
        }
        loom_server_stop(s);
        loom_server_free(s);
        loom_exec_free(exec);
        loomd_state_free(st);
        if (cfg.log)
                daemon_log_line("loomd", status ? "stopped after a store failure" : "stopped");
        return status;
}
