/*
 * harvest_weights.c - the weight side of `loom harvest`:
 *
 *   loom harvest publish [options]   a synthetic trainer publishing a new version every N s
 *   loom harvest node --weights ...  the node options that make its rollout model pull them
 *
 * Exit status: 0 ok, 1 invalid input, 2 bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd.h"
#include "harvest_cmd.h"
#include "loom/harvest.h"
#include "loom/sync.h"

int harvest_cmd_node_opt(const char *a, const char *v, loom_harvest_node_cfg *c, int *bad)
{
        const char *cmd = "loom harvest node";
        uint64_t u = 0;
        double d;
        if (!strcmp(a, "--weights")) {
                char ip[64];
                uint16_t port;
                loom_err e;
                *bad = loom_harvest_wlive_addr(v, ip, sizeof ip, &port, &e) != 0;
                if (*bad)
                        fprintf(stderr, "%s: --weights: %s\n", cmd, e.msg);
                c->weights = v;
        } else if (!strcmp(a, "--weights-elems")) {
                *bad = loom_cmd_whole(cmd, a, v, 1, 4294967296.0, &c->weights_elems);
        } else if (!strcmp(a, "--weights-shards")) {
                *bad = loom_cmd_whole(cmd, a, v, 1, 65536, &u);
                c->weights_shards = (uint32_t)u;
        } else if (!strcmp(a, "--weights-model")) {
                c->weights_model = v;
        } else if (!strcmp(a, "--weights-poll-ms")) {
                *bad = loom_cmd_num(cmd, a, v, 1, 60000, &d);
                c->weights_poll_s = d / 1e3;
        } else if (!strcmp(a, "--staleness")) {
                *bad = loom_cmd_whole(cmd, a, v, 0, 1000000, &u);
                c->staleness = (uint32_t)u;
        } else {
                return 0;
        }
        return 1;
}

const char *harvest_cmd_node_help =
    "  --weights ADDR      pull rollout weights from a publisher at IP:PORT or PORT\n"
    "                      (`loom harvest publish`, or any loom_sync_pub); the node serves\n"
    "                      the latest version it verified and GET /v1/weights?hold=1|0 holds\n"
    "                      or resumes pulls (an emulated partition)\n"
    "  --weights-elems N   bf16 elements of the rollout weight buffer (default 4194304);\n"
    "                      must match the publisher's\n"
    "  --weights-shards N  shards, as the publisher's (default 8)\n"
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
                "  --ip A              listen address (default 127.0.0.1)\n"
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

typedef struct pub_opts {
        const char *ip, *model;
        uint64_t port, elems, shards, bucket, versions, seed;
        double density, interval_s, for_s;
} pub_opts;

/* 0 ok, 1 invalid, 2 usage, 3 help shown */
static int parse_publish(int argc, char **argv, pub_opts *o)
{
        const char *cmd = "loom harvest publish";
        *o = (pub_opts){"127.0.0.1", NULL, 0, UINT64_C(4) << 20, 8, 65536, 0, 1, 0.01, 1, 0};
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        publish_usage(stdout);
                        return 3;
                }
                if (strncmp(a, "--", 2) || i + 1 >= argc) {
                        fprintf(stderr, "%s: %s '%s'\n", cmd,
                                strncmp(a, "--", 2) ? "unexpected argument" : "missing value for",
                                a);
                        return 2;
                }
                const char *v = argv[++i];
                int bad = 0;
                if (!strcmp(a, "--ip"))
                        o->ip = v;
                else if (!strcmp(a, "--model"))
                        o->model = v;
                else if (!strcmp(a, "--port"))
                        bad = loom_cmd_whole(cmd, a, v, 0, 65535, &o->port);
                else if (!strcmp(a, "--elems"))
                        bad = loom_cmd_whole(cmd, a, v, 1, 4294967296.0, &o->elems);
                else if (!strcmp(a, "--shards"))
                        bad = loom_cmd_whole(cmd, a, v, 1, 65536, &o->shards);
                else if (!strcmp(a, "--bucket-elems"))
                        bad = loom_cmd_whole(cmd, a, v, 1, 1 << 30, &o->bucket);
                else if (!strcmp(a, "--density"))
                        bad = loom_cmd_num(cmd, a, v, 0, 1, &o->density);
                else if (!strcmp(a, "--interval-s"))
                        bad = loom_cmd_num(cmd, a, v, 0.001, 1e6, &o->interval_s);
                else if (!strcmp(a, "--versions"))
                        bad = loom_cmd_whole(cmd, a, v, 0, 4294967295.0, &o->versions);
                else if (!strcmp(a, "--seed"))
                        bad = loom_cmd_whole(cmd, a, v, 0, 1e18, &o->seed);
                else if (!strcmp(a, "--for-s"))
                        bad = loom_cmd_num(cmd, a, v, 0, 1e7, &o->for_s);
                else {
                        fprintf(stderr, "%s: unknown option '%s'\n", cmd, a);
                        return 2;
                }
                if (bad)
                        return 1;
        }
        return 0;
}

static double now_s(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int publish_one(loom_sync_pub *p, uint64_t version, const uint16_t *w, uint64_t elems,
                       double t0)
{
        loom_err e;
        loom_sync_pub_stats ps;
        if (loom_sync_pub_publish(p, version, w, &ps, &e)) {
                fprintf(stderr, "loom harvest publish: %s: %s\n", e.field, e.msg);
                return 1;
        }
        uint64_t hash;
        uint32_t crc;
        loom_harvest_wdigest(w, elems, &hash, &crc);
        printf("{\"version\":%llu,\"hash\":\"%016llx\",\"crc32c\":\"%08x\",\"changed\":%llu,"
               "\"delta_bytes\":%llu,\"dense_bytes\":%llu,\"encode_ms\":%.3f,\"t_s\":%.3f}\n",
               (unsigned long long)version, (unsigned long long)hash, crc,
               (unsigned long long)ps.changed, (unsigned long long)ps.delta_bytes,
               (unsigned long long)ps.dense_bytes, ps.encode_s * 1e3, now_s() - t0);
        fflush(stdout);
        return 0;
}

int harvest_cmd_publish(int argc, char **argv)
{
        pub_opts o;
        int rc = parse_publish(argc, argv, &o);
        if (rc)
                return rc == 3 ? 0 : rc;
        loom_err e;
        uint64_t *shard = malloc(o.shards * sizeof *shard);
        uint16_t *w = malloc(2 * o.elems);
        if (!shard || !w) {
                fprintf(stderr, "loom harvest publish: out of memory\n");
                free(shard);
                free(w);
                return 1;
        }
        loom_sync_pub *p = NULL;
        if (loom_harvest_wshards(o.elems, (uint32_t)o.shards, shard, &e) ||
            loom_sync_pub_new(o.model, shard, o.shards, o.bucket, o.ip, (uint16_t)o.port, &p, &e)) {
                fprintf(stderr, "loom harvest publish: %s: %s\n", e.field, e.msg);
                free(shard);
                free(w);
                return 1;
        }
        harvest_cmd_catch_stop();
        printf("publishing on %s:%u\n", o.ip, loom_sync_pub_port(p));
        double t0 = now_s(), next = t0 + o.interval_s;
        uint64_t v = 1;
        loom_harvest_wgen(o.seed, 0, o.density, w, o.elems);
        rc = publish_one(p, v, w, o.elems, t0);
        while (!rc && !harvest_cmd_stopping() && (o.for_s <= 0 || now_s() - t0 < o.for_s)) {
                usleep(5000);
                if ((o.versions && v >= o.versions) || now_s() < next)
                        continue;
                next += o.interval_s;
                v++;
                loom_harvest_wgen(o.seed, (uint32_t)v, o.density, w, o.elems);
                rc = publish_one(p, v, w, o.elems, t0);
        }
        loom_sync_pub_free(p);
        free(shard);
        free(w);
        return rc;
}
