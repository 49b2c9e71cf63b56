/*
 * harvest.c - `loom harvest`: rollouts on idle serving GPUs (ROSE).
 *
 *   loom harvest sim    [options]   trace-driven simulation, one result per policy
 *   loom harvest node   [options]   a live co-serving executor of one emulated GPU over HTTP
 *   loom harvest replay [options]   drive a node with a trace, print client-side TTFT/TPOT
 *   loom harvest publish [options]  publish new rollout weights every N s (harvest_weights.c)
 *
 * Exit status: 0 ok, 1 invalid input, 2 bad usage.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "harvest_cmd.h"
#include "loom/harvest.h"

static void usage(FILE *f)
{
        fprintf(
            f,
            "usage: loom harvest <sim|node|replay|publish> [options]\n"
            "\n"
            "  sim      replay a serving trace on PD-disaggregated serving GPUs while an agentic\n"
            "           RL job rolls out on dedicated and borrowed serving GPUs; one result per\n"
            "           policy (GPU time is simulated from latency models)\n"
            "  node     one emulated serving GPU running the co-serving executor behind HTTP\n"
            "  replay   drive a node with a trace at (compressed) wall-clock speed\n"
            "  publish  publish new rollout weights every N seconds for nodes to pull\n"
            "\n"
            "sim options:\n"
            "  --trace FILE        CSV TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "                      (default traces/azure/llm-2023-conv.csv)\n"
            "  --policy LIST       comma-separated, or all (default rose,roll): rose, roll,\n"
            "                      static, serverless, prism, ttft-only, tpot-only, pinned,\n"
            "                      preempt, turnwise, prefix, eq12 (plain Eq. 1-2)\n"
            "  --pair P            7b (default) or 32b model pair on H800\n"
            "  --density D         divide inter-arrival times by D (default 1)\n"
            "  --duration-s S      replay at most S seconds of the compressed trace\n"
            "  --serving-gpus N    serving cluster size (default 16; prefill:decode 1:3)\n"
            "  --borrow N          serving GPUs the RL job may borrow (default 16)\n"
            "  --rl-gpus N         dedicated rollout GPUs (default 8)\n"
            "  --steps N           RL steps (default 5; 0 = as many as the trace lasts)\n"
            "  --batch N           prompts per RL step (default 256)\n"
            "  --group N           samples per prompt (default 16): batch x group\n"
            "                      trajectories per step (4,096)\n"
            "  --train-s S         training + sync time between rollouts (default 60)\n"
            "  --ttft-ms, --tpot-ms    serving SLOs (default 500/150 for 7b, 1000/500 32b)\n"
            "  --lease-s S         prefix-cache lease (default 10)\n"
            "  --headroom F        serving headroom, fraction of device memory (0.2)\n"
            "  --stall-s S         stall timeout (default 2)\n"
            "  --noise F           each GPU iteration takes its modelled time x (1 +- up to\n"
            "                      F), unseen by admission: latency-model error (default 0)\n"
            "  --seed N            workload seed (default 1)\n"
            "  --json              one JSON object per policy\n"
            "\n"
            "`loom harvest <node|replay|publish> --help` describe those.\n");
}

static int integer(const char *name, const char *v, double lo, double hi, uint32_t *out)
{
        uint64_t u;
        if (loom_cmd_whole("loom harvest", name, v, lo, hi, &u))
                return 1;
        *out = (uint32_t)u;
        return 0;
}

typedef struct sim_opts {
        loom_harvest_sim_cfg c;
        const char *trace, *policies;
        int json;
} sim_opts;

/* 0 ok, 1 invalid, 2 usage, 3 help shown */
static int parse_sim(int argc, char **argv, sim_opts *o)
{
        loom_harvest_sim_defaults(&o->c);
        o->trace = NULL;
        o->policies = "rose,roll";
        o->json = 0;
        for (int i = 2; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        usage(stdout);
                        return 3;
                }
                if (!strcmp(a, "--json")) {
                        o->json = 1;
                        continue;
                }
                if (strncmp(a, "--", 2)) {
                        fprintf(stderr, "loom harvest sim: unexpected argument '%s'\n", a);
                        return 2;
                }
                if (i + 1 >= argc) {
                        fprintf(stderr, "loom harvest sim: %s needs a value\n", a);
                        return 2;
                }
                const char *v = argv[++i];
                double d;
                int bad = 0;
                loom_harvest_sim_cfg *c = &o->c;
                if (!strcmp(a, "--trace"))
                        o->trace = v;
                else if (!strcmp(a, "--policy"))
                        o->policies = v;
                else if (!strcmp(a, "--pair")) {
                        if (strcmp(v, "7b") && strcmp(v, "32b")) {
                                fprintf(stderr, "loom harvest sim: --pair: '%s' is not 7b or 32b\n",
                                        v);
                                return 1;
                        }
                        c->pair = v;
                } else if (!strcmp(a, "--density"))
                        bad = loom_cmd_num("loom harvest", a, v, 1e-3, 1000, &c->density);
                else if (!strcmp(a, "--duration-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 1e7, &c->duration_s);
                else if (!strcmp(a, "--serving-gpus"))
                        bad = integer(a, v, 2, 4096, &c->serving_gpus);
                else if (!strcmp(a, "--borrow"))
                        bad = integer(a, v, 0, 4096, &c->borrow);
                else if (!strcmp(a, "--rl-gpus"))
                        bad = integer(a, v, 1, 4096, &c->rl_gpus);
                else if (!strcmp(a, "--steps"))
                        bad = integer(a, v, 0, 10000, &c->steps);
                else if (!strcmp(a, "--batch"))
                        bad = integer(a, v, 1, 1000000, &c->batch);
                else if (!strcmp(a, "--group"))
                        bad = integer(a, v, 1, 1000000, &c->group);
                else if (!strcmp(a, "--train-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 1e6, &c->train_s);
                else if (!strcmp(a, "--ttft-ms"))
                        bad = loom_cmd_num("loom harvest", a, v, 1, 1e6, &c->ttft_ms);
                else if (!strcmp(a, "--tpot-ms"))
                        bad = loom_cmd_num("loom harvest", a, v, 1, 1e6, &c->tpot_ms);
                else if (!strcmp(a, "--lease-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 1e6, &c->lease_s);
                else if (!strcmp(a, "--headroom"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 0.99, &c->headroom);
                else if (!strcmp(a, "--stall-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0.001, 1e6, &c->stall_s);
                else if (!strcmp(a, "--weights-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 1e6, &c->weights_s);
                else if (!strcmp(a, "--staleness"))
                        bad = integer(a, v, 0, 1000000, &c->staleness);
                else if (!strcmp(a, "--noise"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 0.9, &c->noise);
                else if (!strcmp(a, "--seed")) {
                        bad = loom_cmd_num("loom harvest", a, v, 0, 1e15, &d);
                        c->seed = (uint64_t)d;
                } else {
                        fprintf(stderr, "loom harvest sim: unknown option '%s'\n", a);
                        return 2;
                }
                if (bad)
                        return 1;
        }
        return 0;
}

static void print_json(const loom_harvest_sim_cfg *c, const loom_harvest_sim_result *r,
                       double roll_s)
{
        printf(
            "{\"policy\":\"%s\",\"pair\":\"%s\",\"density\":%g,\"borrow\":%u,\"batch\":%u,"
            "\"group\":%u,"
            "\"trajectories_per_step\":%llu,\"rollout_s\":%.3f,"
            "\"ttft_p50_ms\":%.2f,\"ttft_p99_ms\":%.2f,\"tpot_p50_ms\":%.2f,\"tpot_p99_ms\":%.2f,"
            "\"itl_p50_ms\":%.2f,\"itl_p99_ms\":%.2f,\"serving_slo_attainment\":%.5f,\"speedup_vs_"
            "roll\":%.4f,"
            "\"preempted_gpu_time_frac\":%.5f,\"served\":%llu,\"turns\":%llu,"
            "\"turns_on_serving\":%llu,\"affinity_hits\":%llu,\"aborted\":%llu,\"stalls\":%llu,"
            "\"cuts\":%llu,\"evictions\":%llu,\"route_us_mean\":%.3f,\"route_us_p99\":%.1f,\"route_"
            "us_max\":%.3f,"
            "\"sim_s\":%.1f,\"wall_s\":%.3f}\n",
            loom_harvest_policy_name(r->policy), c->pair, c->density,
            r->policy == LOOM_HARVEST_ROLL ? 0 : c->borrow, c->batch, c->group,
            (unsigned long long)c->batch * c->group, r->rollout_s, r->ttft_p50_ms, r->ttft_p99_ms,
            r->tpot_p50_ms, r->tpot_p99_ms, r->itl_p50_ms, r->itl_p99_ms, r->serving_slo_attainment,
            r->rollout_s > 0 ? roll_s / r->rollout_s : 0, r->preempted_gpu_time_frac,
            (unsigned long long)r->served, (unsigned long long)r->turns,
            (unsigned long long)r->turns_on_serving, (unsigned long long)r->affinity_hits,
            (unsigned long long)r->aborted, (unsigned long long)r->stalls,
            (unsigned long long)r->cuts, (unsigned long long)r->evictions, r->route_us_mean,
            r->route_us_p99, r->route_us_max, r->sim_s, r->wall_s);
}

static int cmd_sim(int argc, char **argv)
{
        sim_opts o;
        int rc = parse_sim(argc, argv, &o);
        if (rc)
                return rc == 3 ? 0 : rc;
        loom_harvest_policy list[LOOM_HARVEST_NPOLICIES + 1];
        size_t n = 0;
        loom_err e;
        if (!strcmp(o.policies, "all")) {
                for (int i = 0; i < LOOM_HARVEST_NPOLICIES; i++)
                        list[n++] = (loom_harvest_policy)i;
        } else {
                char buf[256];
                snprintf(buf, sizeof buf, "%s", o.policies);
                for (char *save, *tok = strtok_r(buf, ",", &save); tok;
                     tok = strtok_r(NULL, ",", &save)) {
                        if (n >= LOOM_HARVEST_NPOLICIES ||
                            loom_harvest_policy_parse(tok, &list[n], &e)) {
                                fprintf(stderr, "loom harvest sim: --policy: %s\n",
                                        n >= LOOM_HARVEST_NPOLICIES ? "too many" : e.msg);
                                return 1;
                        }
                        n++;
                }
        }
        char pbuf[4096];
        const char *path =
            o.trace ? o.trace
                    : loom_cmd_bundled("traces/azure/llm-2023-conv.csv", pbuf, sizeof pbuf);
        loom_harvest_trace tr;
        if (loom_harvest_trace_load(path, &tr, &e)) {
                fprintf(stderr, "loom harvest sim: %s\n", e.msg);
                return 1;
        }
        o.c.trace = &tr;
        /* roll first: every other policy's speedup is against it */
        loom_harvest_sim_result roll;
        o.c.policy = LOOM_HARVEST_ROLL;
        if (loom_harvest_sim_run(&o.c, &roll, &e)) {
                fprintf(stderr, "loom harvest sim: %s%s%s\n", e.field, e.field[0] ? ": " : "",
                        e.msg);
                loom_harvest_trace_free(&tr);
                return 1;
        }
        if (!o.json)
                printf("%-11s %10s %8s %8s %8s %8s %8s %8s %7s %7s %7s\n", "policy", "rollout_s",
                       "speedup", "ttft99", "tpot99", "itl99", "slo_att", "preempt", "spill",
                       "aborts", "cuts");
        int ret = 0;
        for (size_t i = 0; i < n; i++) {
                loom_harvest_sim_result r = roll;
                if (list[i] != LOOM_HARVEST_ROLL) {
                        o.c.policy = list[i];
                        if (loom_harvest_sim_run(&o.c, &r, &e)) {
                                fprintf(stderr, "loom harvest sim: %s: %s\n",
                                        loom_harvest_policy_name(list[i]), e.msg);
                                ret = 1;
                                break;
                        }
                }
                if (o.json) {
                        print_json(&o.c, &r, roll.rollout_s);
                } else {
                        printf(
                            "%-11s %10.1f %8.3f %8.1f %8.1f %8.1f %8.4f %8.4f %7llu %7llu %7llu\n",
                            loom_harvest_policy_name(r.policy), r.rollout_s,
                            r.rollout_s > 0 ? roll.rollout_s / r.rollout_s : 0, r.ttft_p99_ms,
                            r.tpot_p99_ms, r.itl_p99_ms, r.serving_slo_attainment,
                            r.preempted_gpu_time_frac, (unsigned long long)r.turns_on_serving,
                            (unsigned long long)r.aborted, (unsigned long long)r.cuts);
                }
                fflush(stdout);
        }
        loom_harvest_trace_free(&tr);
        return ret;
}

/* ---- node ------------------------------------------------------------------------------ */

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
        got_signal = sig;
}

void harvest_cmd_catch_stop(void)
{
        struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
}

int harvest_cmd_stopping(void)
{
        return got_signal != 0;
}

static void node_usage(FILE *f)
{
        fprintf(
            f,
            "usage: loom harvest node [options]\n"
            "\n"
            "One emulated serving GPU: the co-serving executor on the wall clock (GPU time from\n"
            "the latency models divided by --speed), serving requests over HTTP on 127.0.0.1,\n"
            "a rollout feeder keeping --rollouts turns in flight through the turn router, and\n"
            "the KV page pool in real memory. Prints \"listening on 127.0.0.1:PORT\", serves\n"
            "until SIGINT/SIGTERM or --for-s, then prints its statistics as JSON.\n"
            "\n"
            "  GET /v1/generate?prompt=N&gen=M   streams \"first\" then \"done TTFT_MS TPOT_MS\"\n"
            "  GET /v1/stats                     counters, pages, cuts, routing latency,\n"
            "                                    weight version, hash, bytes, last pull\n"
            "  GET /v1/weights[?hold=1|0]        the same; hold or resume weight pulls\n"
            "\n"
            "  --port N            (default 0: any free port)\n"
            "  --pair P            7b (default) or 32b\n"
            "  --role R            colocated (default) or decode\n"
            "  --admit A           dual (default: sound Eq. 1-2 with the feedback guard),\n"
            "                      eq12 (the plain Eq. 1-2), ttft, tpot, none\n"
            "  --speed X           emulated seconds per wall second (default 1)\n"
            "  --pages N           KV pool pages of 2 MB (default: from the pair's memory)\n"
            "  --headroom-pages N  serving headroom with --pages (default 20%% of them)\n"
            "  --rollouts N        rollout turns kept in flight (default 16; 0 = none)\n"
            "  --turn-prompt N, --turn-resp N, --turns N   rollout trajectory shape\n"
            "                      (default 1000, 300, 8)\n"
            "  --ttft-ms, --tpot-ms, --lease-s, --stall-s   SLOs and timers\n"
            "  --step-s S          an RL step every S emulated seconds (default 30): the\n"
            "                      rollout budget is derived again, a cut budget released\n"
            "  --max-context N     refuse prompt + gen above N tokens with 422 (default\n"
            "                      32768); KV larger than serving's share of the pool: 413\n"
            "  --for-s S           stop after S wall seconds\n");
        fputs(harvest_cmd_node_help, f);
}

static int cmd_node(int argc, char **argv)
{
        loom_harvest_node_cfg c;
        loom_harvest_node_defaults(&c);
        double for_s = 0;
        uint32_t u;
        int head_set = 0;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        node_usage(stdout);
                        return 0;
                }
                if (strncmp(a, "--", 2) || i + 1 >= argc) {
                        fprintf(stderr, "loom harvest node: %s '%s'\n",
                                strncmp(a, "--", 2) ? "unexpected argument" : "missing value for",
                                a);
                        return 2;
                }
                const char *v = argv[++i];
                int bad = 0;
                if (harvest_cmd_node_opt(a, v, &c, &bad)) {
                } else if (!strcmp(a, "--port")) {
                        bad = integer(a, v, 0, 65535, &u);
                        c.port = (uint16_t)u;
                } else if (!strcmp(a, "--pair")) {
                        c.pair = v;
                } else if (!strcmp(a, "--role")) {
                        if (!strcmp(v, "colocated"))
                                c.role = LOOM_HARVEST_COLOCATED;
                        else if (!strcmp(v, "decode"))
                                c.role = LOOM_HARVEST_DECODE;
                        else {
                                fprintf(stderr,
                                        "loom harvest node: --role: '%s' is not colocated "
                                        "or decode\n",
                                        v);
                                return 1;
                        }
                } else if (!strcmp(a, "--admit") && !strcmp(v, "eq12")) {
                        c.admit = LOOM_HARVEST_ADMIT_DUAL;
                        c.plain_admission = 1;
                } else if (!strcmp(a, "--admit")) {
                        const char *names[] = {"dual", "ttft", "tpot", "none"};
                        int k = 0;
                        while (k < 4 && strcmp(v, names[k]))
                                k++;
                        if (k == 4) {
                                fprintf(stderr,
                                        "loom harvest node: --admit: '%s' is not dual, "
                                        "eq12, ttft, tpot or none\n",
                                        v);
                                return 1;
                        }
                        c.admit = (loom_harvest_admit_mode)k;
                } else if (!strcmp(a, "--speed"))
                        bad = loom_cmd_num("loom harvest", a, v, 0.001, 10000, &c.speed);
                else if (!strcmp(a, "--pages"))
                        bad = integer(a, v, 1, 10000000, &c.pages);
                else if (!strcmp(a, "--headroom-pages")) {
                        bad = integer(a, v, 0, 10000000, &c.headroom_pages);
                        head_set = 1;
                } else if (!strcmp(a, "--rollouts"))
                        bad = integer(a, v, 0, 4096, &c.rollouts);
                else if (!strcmp(a, "--turn-prompt"))
                        bad = integer(a, v, 1, 1000000, &c.turn_prompt);
                else if (!strcmp(a, "--turn-resp"))
                        bad = integer(a, v, 1, 1000000, &c.turn_resp);
                else if (!strcmp(a, "--turns"))
                        bad = integer(a, v, 1, 100000, &c.turns);
                else if (!strcmp(a, "--ttft-ms"))
                        bad = loom_cmd_num("loom harvest", a, v, 1, 1e6, &c.ttft_ms);
                else if (!strcmp(a, "--tpot-ms"))
                        bad = loom_cmd_num("loom harvest", a, v, 1, 1e6, &c.tpot_ms);
                else if (!strcmp(a, "--lease-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 1e6, &c.lease_s);
                else if (!strcmp(a, "--stall-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0.001, 1e6, &c.stall_s);
                else if (!strcmp(a, "--for-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 1e7, &for_s);
                else if (!strcmp(a, "--step-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0.01, 1e7, &c.step_s);
                else if (!strcmp(a, "--max-context"))
                        bad = integer(a, v, 1, 100000000, &c.max_context);
                else {
                        fprintf(stderr, "loom harvest node: unknown option '%s'\n", a);
                        return 2;
                }
                if (bad)
                        return 1;
        }
        if (c.pages && !head_set)
                c.headroom_pages = c.pages / 5;
        if (c.headroom_pages > c.pages && c.pages) {
                fprintf(stderr, "loom harvest node: --headroom-pages: %u exceeds --pages %u\n",
                        c.headroom_pages, c.pages);
                return 1;
        }
        loom_harvest_node *n;
        loom_err e;
        if (loom_harvest_node_start(&c, &n, &e)) {
                fprintf(stderr, "loom harvest node: %s: %s\n", e.field, e.msg);
                return 1;
        }
        harvest_cmd_catch_stop();
        printf("listening on 127.0.0.1:%u\n", loom_harvest_node_port(n));
        fflush(stdout);
        double waited = 0;
        while (!harvest_cmd_stopping() && (for_s <= 0 || waited < for_s)) {
                usleep(20000);
                waited += 0.02;
        }
        loom_harvest_node_stats s;
        loom_harvest_node_stats_get(n, &s);
        loom_harvest_node_stop(n);
        char line[2048];
        loom_harvest_node_stats_json(&s, c.weights != NULL, line, sizeof line);
        fputs(line, stdout);
        return 0;
}

/* ---- replay ---------------------------------------------------------------------------- */

static void replay_usage(FILE *f)
{
        fprintf(f,
                "usage: loom harvest replay --port N [options]\n"
                "\n"
                "Send a trace's requests to a node at their arrival times (divided by --density,\n"
                "then by --speed on the wall clock) and print TTFT and TPOT percentiles measured\n"
                "at the client, in emulated milliseconds.\n"
                "\n"
                "  --host A            IPv4 address (default 127.0.0.1)\n"
                "  --port N            the node's port (required)\n"
                "  --trace FILE        (default traces/azure/llm-2023-conv.csv)\n"
                "  --density D         (default 1)\n"
                "  --speed X           must match the node's (default 1)\n"
                "  --duration-s S      emulated seconds of trace to send (default 60)\n"
                "  --timeout-s S       per request, wall (default 60)\n"
                "  --json              one JSON object\n");
}

static int cmd_replay(int argc, char **argv)
{
        loom_harvest_replay_cfg c = {
            .host = "127.0.0.1", .density = 1, .speed = 1, .duration_s = 60, .timeout_s = 60};
        const char *trace = NULL;
        int json = 0, port_set = 0;
        uint32_t u;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        replay_usage(stdout);
                        return 0;
                }
                if (!strcmp(a, "--json")) {
                        json = 1;
                        continue;
                }
                if (strncmp(a, "--", 2) || i + 1 >= argc) {
                        fprintf(stderr, "loom harvest replay: %s '%s'\n",
                                strncmp(a, "--", 2) ? "unexpected argument" : "missing value for",
                                a);
                        return 2;
                }
                const char *v = argv[++i];
                int bad = 0;
                if (!strcmp(a, "--host"))
                        c.host = v;
                else if (!strcmp(a, "--port")) {
                        bad = integer(a, v, 1, 65535, &u);
                        c.port = (uint16_t)u;
                        port_set = 1;
                } else if (!strcmp(a, "--trace"))
                        trace = v;
                else if (!strcmp(a, "--density"))
                        bad = loom_cmd_num("loom harvest", a, v, 1e-3, 1000, &c.density);
                else if (!strcmp(a, "--speed"))
                        bad = loom_cmd_num("loom harvest", a, v, 0.001, 10000, &c.speed);
                else if (!strcmp(a, "--duration-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0, 1e7, &c.duration_s);
                else if (!strcmp(a, "--timeout-s"))
                        bad = loom_cmd_num("loom harvest", a, v, 0.1, 1e6, &c.timeout_s);
                else {
                        fprintf(stderr, "loom harvest replay: unknown option '%s'\n", a);
                        return 2;
                }
                if (bad)
                        return 1;
        }
        if (!port_set) {
                fprintf(stderr, "loom harvest replay: --port is required\n");
                return 2;
        }
        char pbuf[4096];
        const char *path =
            trace ? trace : loom_cmd_bundled("traces/azure/llm-2023-conv.csv", pbuf, sizeof pbuf);
        loom_harvest_trace tr;
        loom_err e;
        if (loom_harvest_trace_load(path, &tr, &e)) {
                fprintf(stderr, "loom harvest replay: %s\n", e.msg);
                return 1;
        }
        c.trace = &tr;
        loom_harvest_replay_result r;
        int rc = loom_harvest_replay(&c, &r, &e);
        loom_harvest_trace_free(&tr);
        if (rc) {
                fprintf(stderr, "loom harvest replay: %s: %s\n", e.field, e.msg);
                return 1;
        }
        if (json)
                printf("{\"sent\":%llu,\"ok\":%llu,\"failed\":%llu,\"ttft_p50_ms\":%.2f,"
                       "\"ttft_p99_ms\":%.2f,\"tpot_p50_ms\":%.2f,\"tpot_p99_ms\":%.2f,"
                       "\"wall_s\":%.2f}\n",
                       (unsigned long long)r.sent, (unsigned long long)r.ok,
                       (unsigned long long)r.failed, r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_p50_ms,
                       r.tpot_p99_ms, r.wall_s);
        else
                printf("sent %llu ok %llu failed %llu  ttft p50 %.1f p99 %.1f ms  tpot p50 %.1f "
                       "p99 %.1f ms  (client-measured, emulated; %.1f s wall)\n",
                       (unsigned long long)r.sent, (unsigned long long)r.ok,
                       (unsigned long long)r.failed, r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_p50_ms,
                       r.tpot_p99_ms, r.wall_s);
        return r.failed ? 1 : 0;
}

int loom_cmd_harvest(int argc, char **argv)
{
        if (argc < 2) {
                usage(stderr);
                return 2;
        }
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
                usage(stdout);
                return 0;
        }
        if (!strcmp(argv[1], "sim"))
                return cmd_sim(argc, argv);
        if (!strcmp(argv[1], "node"))
                return cmd_node(argc - 1, argv + 1);
        if (!strcmp(argv[1], "replay"))
                return cmd_replay(argc - 1, argv + 1);
        if (!strcmp(argv[1], "publish"))
                return harvest_cmd_publish(argc - 1, argv + 1);
        fprintf(stderr, "loom harvest: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
}
