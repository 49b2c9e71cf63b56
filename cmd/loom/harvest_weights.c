/*
 * harvest_weights.c - the weight side of `loom harvest`:
 *
 *   loom harvest publish [options]   a synthetic trainer publishing a new version every N s
 *   loom harvest node --weights ...  the node options that make its rollout model pull them
 *
 * Both take the job's sync key from a file or $LOOM_SYNC_KEY, as loomd's executors start a
 * job's processes; without one they work on loopback only (docs/security.md).
 *
 * Exit status: 0 ok, 1 invalid input, 2 bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "harvest_cmd.h"
#include "loom/harvest.h"
#include "loom/sync.h"

/* A sync key from a file (a path given) or $LOOM_SYNC_KEY; 1 when one was read into key, 0
 * when there is none, -1 after a line on stderr. */
static int read_key(const char *cmd, const char *opt, const char *path, uint8_t *key)
{
        const char *env = getenv("LOOM_SYNC_KEY");
        loom_err e;
        int rc = 0;
        if (path)
                rc = loom_sync_key_load(path, opt, key, &e);
        else if (env && *env)
                rc = loom_sync_key_parse(env, "LOOM_SYNC_KEY", key, &e);
        else
                return 0;
        if (rc) {
                fprintf(stderr, "%s: %s: %s\n", cmd, e.field, e.msg);
                return -1;
        }
        return 1;
}

int harvest_cmd_node_key(harvest_node_args *n)
{
        const char *cmd = "loom harvest node";
        int got = read_key(cmd, "--weights-key-file", n->key_file, n->key);
        if (got < 0)
                return 1;
        if (got)
                n->c->weights_key = n->key;
        else if (n->c->weights) {
                /* the node refuses this unless the publisher is on loopback */
                n->c->weights_unkeyed = 1;
                fprintf(stderr,
                        "%s: no sync key (--weights-key-file or LOOM_SYNC_KEY): weight "
                        "pulls are not authenticated\n",
                        cmd);
        }
        return 0;
}

int harvest_cmd_node_opt(const char *a, const char *v, harvest_node_args *n)
{
        const char *cmd = "loom harvest node";
        loom_harvest_node_cfg *c = n->c;
        uint64_t u = 0;
        double d;
        int bad = 0;
        if (!strcmp(a, "--weights")) {
                char ip[64];
                uint16_t port;
                loom_err e;
                bad = loom_harvest_wlive_addr(v, ip, sizeof ip, &port, &e) != 0;
                if (bad)
                        fprintf(stderr, "%s: --weights: %s\n", cmd, e.msg);
                c->weights = v;
        } else if (!strcmp(a, "--weights-elems")) {
                bad = loom_cmd_whole(cmd, a, v, 1, 4294967296.0, &c->weights_elems);
        } else if (!strcmp(a, "--weights-shards")) {
                bad = loom_cmd_whole(cmd, a, v, 1, 65536, &u);
                c->weights_shards = (uint32_t)u;
        } else if (!strcmp(a, "--weights-key-file")) {
                n->key_file = v;
        } else if (!strcmp(a, "--weights-model")) {
                c->weights_model = v;
        } else if (!strcmp(a, "--weights-poll-ms")) {
                bad = loom_cmd_num(cmd, a, v, 1, 60000, &d);
                if (!bad)
                        c->weights_poll_s = d / 1e3;
        } else if (!strcmp(a, "--staleness")) {
                bad = loom_cmd_whole(cmd, a, v, 0, 1000000, &u);
                c->staleness = (uint32_t)u;
        } else {
                return -1;
        }
        return bad;
}

const char *harvest_cmd_node_help =
    "  --weights ADDR      pull rollout weights from a publisher at IP:PORT or PORT\n"
    "                      (`loom harvest publish`, or any loom_sync_pub); the node serves\n"
    "                      the latest version it verified and GET /v1/weights?hold=1|0 holds\n"
    "                      or resumes pulls (an emulated partition)\n"
    "  --weights-elems N   bf16 elements of the rollout weight buffer (default 4194304);\n"
    "                      must match the publisher's\n"
    "  --weights-shards N  shards, as the publisher's (default 8)\n"
    "  --weights-key-file PATH  the job's sync key (64 hex digits; the file must not be\n"
    "                      group- or world-readable), else $LOOM_SYNC_KEY: the node takes\n"
    "                      weights only from a publisher that proves the key. Without a\n"
    "                      key pulls are not authenticated, and --weights must then be a\n"
    "                      loopback address (127.0.0.0/8)\n"
    "  --weights-model ID  accept only a publisher serving model ID (its --model);\n"
    "                      default: any publisher of the same shape\n"
    "  --weights-poll-ms M a probe waits this long for a new version (default 200)\n"
    "  --staleness N       route rollout turns here only while at most N versions behind\n"
    "                      the newest published (default 0)\n";

/* ---- publish ------------------------------------------------------------------------------ */

static void publish_usage(FILE *f)
{
        fprintf(f,
                "usage: loom harvest publish [options]\n"
                "\n"
                "A synthetic trainer: publishes its bf16 weights through loom's sync publisher\n"
                "(the one `loom harvest node --weights` and the Python job.pull read), version 1\n"
                "at start, then a new version every --interval-s seconds in which about\n"
                "--density of the elements change (low mantissa bits, seeded). A puller at the\n"
                "previous version gets a sparse delta, any other a dense copy. Prints\n"
                "\"publishing on IP:PORT\", then one JSON line per version (version, hash,\n"
                "crc32c, changed, delta_bytes, dense_bytes, encode_ms, t_s), and serves pulls\n"
                "until SIGINT/SIGTERM or --for-s.\n"
                "\n"
                "  --ip A              listen address (default 127.0.0.1); any other than\n"
                "                      loopback needs a sync key\n"
                "  --key-file PATH     the job's sync key (64 hex digits, a file readable by its\n"
                "                      owner only), else $LOOM_SYNC_KEY: serve authenticated\n"
                "                      pulls only (nodes need --weights-key-file with the same\n"
                "                      key). Without a key pulls are not authenticated and\n"
                "                      --ip must be loopback\n"
                "  --model ID          serve under model id ID: a puller naming another id\n"
                "                      is refused (default: none)\n"
                "  --port N            (default 0: any free port)\n"
                "  --elems N           bf16 elements (default 4194304, the node's default)\n"
                "  --shards N          shards (default 8, the node's default)\n"
                "  --bucket-elems N    elements per frame (default 65536)\n"
                "  --density D         fraction of elements changed per version (default 0.01)\n"
                "  --interval-s S      seconds between versions (default 1)\n"
                "  --versions N        stop publishing after version N, keep serving (default\n"
                "                      0: never stop)\n"
                "  --seed N            weight seed (default 1)\n"
                "  --for-s S           exit after S seconds\n");
}

/* 0 ok, 1 invalid, 2 usage, 3 help shown */
static int parse_publish(int argc, char **argv, loom_harvest_publish_cfg *c, const char **key_file)
{
        loom_harvest_publish_defaults(c);
        const loom_cmd_opt t[] = {
            {"--ip", 's', 0, 0, &c->ip},
            {"--key-file", 's', 0, 0, key_file},
            {"--model", 's', 0, 0, &c->model},
            {"--port", 'p', 0, 65535, &c->port},
            {"--elems", 'w', 1, 4294967296.0, &c->elems},
            {"--shards", 'u', 1, 65536, &c->shards},
            {"--bucket-elems", 'w', 1, 1 << 30, &c->bucket_elems},
            {"--density", 'n', 0, 1, &c->density},
            {"--interval-s", 'n', 0.001, 1e6, &c->interval_s},
            {"--versions", 'w', 0, 4294967295.0, &c->versions},
            {"--seed", 'w', 0, 1e18, &c->seed},
            {"--for-s", 'n', 0, 1e7, &c->for_s},
        };
        const char *cmd = "loom harvest publish";
        loom_cmd_opts p = {cmd, cmd, publish_usage, 0, t, sizeof t / sizeof *t, NULL, NULL};
        return loom_cmd_parse(&p, argc, argv);
}

int harvest_cmd_publish(int argc, char **argv)
{
        loom_harvest_publish_cfg c;
        const char *key_file = NULL;
        uint8_t key[LOOM_SYNC_KEY_LEN];
        int rc = parse_publish(argc, argv, &c, &key_file);
        if (rc)
                return rc == 3 ? 0 : rc;
        int got = read_key("loom harvest publish", "--key-file", key_file, key);
        if (got < 0)
                return 1;
        if (got)
                c.key = key;
        else
                fprintf(stderr, "loom harvest publish: no sync key (--key-file or LOOM_SYNC_KEY): "
                                "pulls are not authenticated\n");
        loom_err e;
        loom_cmd_catch_stop();
        if (loom_harvest_publish_serve(&c, loom_cmd_stopping, stdout, &e)) {
                fprintf(stderr, "loom harvest publish: %s\n", e.msg);
                return 1;
        }
        return 0;
}
