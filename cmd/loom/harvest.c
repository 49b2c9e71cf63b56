/*
 * harvest.c - `loom harvest`: rollouts on idle serving GPUs (ROSE).
 *
 *   loom harvest sim    [options]   trace-driven simulation, one result per policy
 *   loom harvest node   [options]   a live co-serving executor of one emulated GPU over HTTP
 *   loom harvest replay [options]   drive a node with a trace, print its TTFT/TPOT (node, client)
 *   loom harvest publish [options]  publish new rollout weights every N s (harvest_weights.c)
 *
 * Exit status: 0 ok, 1 invalid input, 2 bad usage.
 */
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "harvest_cmd.h"
#include "loom/harvest.h"

#define TRACE "traces/azure/llm-2023-conv.csv" /* the default, bundled */
#define N(t) (sizeof(t) / sizeof *(t))

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
            "  --group N           samples per prompt (default 16; batch x group per step)\n"
            "  --train-s S         training + sync time between rollouts (default 60)\n"
            "  --ttft-ms, --tpot-ms    serving SLOs (default 500/150 for 7b, 1000/500 32b)\n"
            "  --lease-s S         prefix-cache lease (default 10)\n"
            "  --headroom F        serving headroom, fraction of device memory (0.2)\n"
            "  --stall-s S         stall timeout (default 2)\n"
            "  --noise F           iteration time x (1 +- up to F), unseen by admission (0)\n"
            "  --seed N            workload seed (default 1)\n"
            "  --json              one JSON object per policy\n"
            "\n"
            "`loom harvest <node|replay|publish> --help` describe those.\n");
}

static int sim_pair(const char *a, const char *v, void *ctx)
{
        if (strcmp(a, "--pair"))
                return -1;
        if (strcmp(v, "7b") && strcmp(v, "32b")) {
                fprintf(stderr, "loom harvest sim: --pair: '%s' is not 7b or 32b\n", v);
                return 1;
        }
        ((loom_harvest_sim_cfg *)ctx)->pair = v;
        return 0;
}

static int cmd_sim(int argc, char **argv)
{
        loom_harvest_sim_cfg c;
        loom_harvest_sim_defaults(&c);
        const char *trace = NULL, *policies = "rose,roll";
        int json = 0;
        const loom_cmd_opt t[] = {
            {"--json", 'f', 0, 0, &json},
            {"--trace", 's', 0, 0, &trace},
            {"--policy", 's', 0, 0, &policies},
            {"--density", 'n', 1e-3, 1000, &c.density},
            {"--duration-s", 'n', 0, 1e7, &c.duration_s},
            {"--serving-gpus", 'u', 2, 4096, &c.serving_gpus},
            {"--borrow", 'u', 0, 4096, &c.borrow},
            {"--rl-gpus", 'u', 1, 4096, &c.rl_gpus},
            {"--steps", 'u', 0, 10000, &c.steps},
            {"--batch", 'u', 1, 1e6, &c.batch},
            {"--group", 'u', 1, 1e6, &c.group},
            {"--train-s", 'n', 0, 1e6, &c.train_s},
            {"--ttft-ms", 'n', 1, 1e6, &c.ttft_ms},
            {"--tpot-ms", 'n', 1, 1e6, &c.tpot_ms},
            {"--lease-s", 'n', 0, 1e6, &c.lease_s},
            {"--headroom", 'n', 0, 0.99, &c.headroom},
            {"--stall-s", 'n', 0.001, 1e6, &c.stall_s},
            {"--weights-s", 'n', 0, 1e6, &c.weights_s},
            {"--staleness", 'u', 0, 1e6, &c.staleness},
            {"--noise", 'n', 0, 0.9, &c.noise},
            {"--seed", 'q', 0, 1e15, &c.seed},
        };
        loom_cmd_opts p = {"loom harvest sim", "loom harvest", usage, 1, t, N(t), sim_pair, &c};
        int rc = loom_cmd_parse(&p, argc, argv);
        if (rc)
                return rc == 3 ? 0 : rc;
        loom_harvest_policy list[LOOM_HARVEST_NPOLICIES];
        size_t n;
        loom_err e;
        if (loom_harvest_policy_list(policies, list, &n, &e)) {
                fprintf(stderr, "loom harvest sim: --policy: %s\n", e.msg);
                return 1;
        }
        char buf[4096];
        trace = trace ? trace : loom_cmd_bundled(TRACE, buf, sizeof buf);
        if (loom_harvest_sim_report(&c, trace, list, n, json, stdout, &e)) {
                fprintf(stderr, "loom harvest sim: %s\n", e.msg);
                return 1;
        }
        return 0;
}

/* ---- node ------------------------------------------------------------------------------ */
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
            "  GET /v1/generate?prompt=N&gen=M   \"first\", then \"done TTFT TPOT HOST_TTFT\n"
            "                                    HOST_TPOT\" (node clock; HOST_: host delays)\n"
            "  GET /v1/stats                     counters, pages, cuts, routing latency,\n"
            "                                    weight version, hash, bytes, last pull\n"
            "  GET /v1/weights[?hold=1|0]        the same; hold or resume weight pulls\n"
            "\n"
            "  --port N, --pair P  port (default 0: any free one); 7b (default) or 32b\n"
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
            "  --step-s S          an RL step every S emulated s (default 30): budgets renewed\n"
            "  --max-context N     refuse prompt + gen above N tokens with 422 (default\n"
            "                      32768); KV larger than serving's share of the pool: 413\n"
            "  --noise F           iteration time x (1 +- up to F), unseen by admission (0)\n"
            "  --for-s S           stop after S wall seconds\n");
        fputs(harvest_cmd_node_help, f);
}

/* --role, --admit and the weight options (harvest_weights.c). */
static int node_other(const char *a, const char *v, void *ctx)
{
        harvest_node_args *na = ctx;
        loom_harvest_node_cfg *c = na->c;
        loom_err e;
        int bad;
        if (!strcmp(a, "--role"))
                bad = loom_harvest_role_parse(v, &c->role, &e);
        else if (!strcmp(a, "--admit"))
                bad = loom_harvest_admit_parse(v, &c->admit, &c->plain_admission, &e);
        else
                return harvest_cmd_node_opt(a, v, na);
        if (bad)
                fprintf(stderr, "loom harvest node: %s: %s\n", a, e.msg);
        return bad ? 1 : 0;
}

static int cmd_node(int argc, char **argv)
{
        loom_harvest_node_cfg c;
        loom_harvest_node_defaults(&c);
        c.headroom_pages = UINT32_MAX; /* not given (loom_harvest_node_serve) */
        double for_s = 0;
        const loom_cmd_opt t[] = {
            {"--port", 'p', 0, 65535, &c.port},
            {"--pair", 's', 0, 0, &c.pair},
            {"--speed", 'n', 0.001, 10000, &c.speed},
            {"--pages", 'u', 1, 1e7, &c.pages},
            {"--headroom-pages", 'u', 0, 1e7, &c.headroom_pages},
            {"--rollouts", 'u', 0, 4096, &c.rollouts},
            {"--turn-prompt", 'u', 1, 1e6, &c.turn_prompt},
            {"--turn-resp", 'u', 1, 1e6, &c.turn_resp},
            {"--turns", 'u', 1, 1e5, &c.turns},
            {"--ttft-ms", 'n', 1, 1e6, &c.ttft_ms},
            {"--tpot-ms", 'n', 1, 1e6, &c.tpot_ms},
            {"--lease-s", 'n', 0, 1e6, &c.lease_s},
            {"--stall-s", 'n', 0.001, 1e6, &c.stall_s},
            {"--for-s", 'n', 0, 1e7, &for_s},
            {"--step-s", 'n', 0.01, 1e7, &c.step_s},
            {"--max-context", 'u', 1, 1e8, &c.max_context},
            {"--noise", 'n', 0, 0.9, &c.noise},
        };
        harvest_node_args na = {.c = &c};
        loom_cmd_opts p = {
            "loom harvest node", "loom harvest", node_usage, 0, t, N(t), node_other, &na};
        int rc = loom_cmd_parse(&p, argc, argv);
        if (rc)
                return rc == 3 ? 0 : rc;
        if (harvest_cmd_node_key(&na))
                return 1;
        loom_err e;
        loom_cmd_catch_stop();
        if (loom_harvest_node_serve(&c, for_s, loom_cmd_stopping, stdout, &e)) {
                fprintf(stderr, "loom harvest node: %s\n", e.msg);
                return 1;
        }
        return 0;
}

/* ---- replay ---------------------------------------------------------------------------- */
static void replay_usage(FILE *f)
{
        fprintf(f,
                "usage: loom harvest replay --port N [options]\n"
                "\n"
                "Send a trace's requests to a node at their arrival times (divided by --density,\n"
                "then by --speed on the wall clock) and print TTFT and TPOT percentiles, in\n"
                "emulated milliseconds, as the node measured them (its clock, from accepting each\n"
                "request: what the admission controls) and as the client saw them.\n"
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
        int json = 0;
        const loom_cmd_opt t[] = {
            {"--json", 'f', 0, 0, &json},
            {"--host", 's', 0, 0, &c.host},
            {"--port", 'p', 1, 65535, &c.port},
            {"--trace", 's', 0, 0, &trace},
            {"--density", 'n', 1e-3, 1000, &c.density},
            {"--speed", 'n', 0.001, 10000, &c.speed},
            {"--duration-s", 'n', 0, 1e7, &c.duration_s},
            {"--timeout-s", 'n', 0.1, 1e6, &c.timeout_s},
        };
        loom_cmd_opts p = {
            "loom harvest replay", "loom harvest", replay_usage, 0, t, N(t), NULL, NULL};
        int rc = loom_cmd_parse(&p, argc, argv);
        if (rc)
                return rc == 3 ? 0 : rc;
        if (!c.port) { /* --port takes 1 to 65535 */
                fprintf(stderr, "loom harvest replay: --port is required\n");
                return 2;
        }
        char buf[4096];
        trace = trace ? trace : loom_cmd_bundled(TRACE, buf, sizeof buf);
        loom_harvest_replay_result r;
        loom_err e;
        if (loom_harvest_replay_report(&c, trace, json, stdout, &r, &e)) {
                fprintf(stderr, "loom harvest replay: %s\n", e.msg);
                return 1;
        }
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
                return cmd_sim(argc - 1, argv + 1);
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
