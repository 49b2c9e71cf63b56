/*
 * publish.c - a synthetic trainer (`loom harvest publish`): its bf16 weights published through
 * src/sync's publisher, version 1 at start and a new version every interval, each one a line
 * of JSON on the caller's FILE *, until the caller says stop. With the job's sync key it
 * serves authenticated pulls only; without one it listens on loopback only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "loom/harvest.h"
#include "loom/sync.h"
#include "sim_int.h"

void loom_harvest_publish_defaults(loom_harvest_publish_cfg *c)
{
        *c = (loom_harvest_publish_cfg){.ip = "127.0.0.1",
                                        .elems = UINT64_C(4) << 20,
                                        .shards = 8,
                                        .bucket_elems = 65536,
                                        .seed = 1,
                                        .density = 0.01,
                                        .interval_s = 1};
}

/* Publish w as version, then its line: version, digests, what the encoding cost, when. */
static int publish_one(loom_sync_pub *p, uint64_t version, const uint16_t *w, uint64_t elems,
                       double t0, FILE *out, loom_err *e)
{
        loom_sync_pub_stats ps;
        int rc = loom_sync_pub_publish(p, version, w, &ps, e);
        if (rc)
                return rc;
        uint64_t hash;
        uint32_t crc;
        loom_harvest_wdigest(w, elems, &hash, &crc);
        fprintf(out,
                "{\"version\":%llu,\"hash\":\"%016llx\",\"crc32c\":\"%08x\",\"changed\":%llu,"
                "\"delta_bytes\":%llu,\"dense_bytes\":%llu,\"encode_ms\":%.3f,\"t_s\":%.3f}\n",
                (unsigned long long)version, (unsigned long long)hash, crc,
                (unsigned long long)ps.changed, (unsigned long long)ps.delta_bytes,
                (unsigned long long)ps.dense_bytes, ps.encode_s * 1e3, hv_now_s() - t0);
        fflush(out);
        return 0;
}

/* Version 1, then one version per interval until stop(), for_s or the last version. */
static int publish_loop(const loom_harvest_publish_cfg *c, loom_sync_pub *p, uint16_t *w,
                        int (*stop)(void), FILE *out, loom_err *e)
{
        double t0 = hv_now_s(), next = t0 + c->interval_s;
        uint64_t v = 1;
        loom_harvest_wgen(c->seed, 0, c->density, w, c->elems);
        int rc = publish_one(p, v, w, c->elems, t0, out, e);
        while (!rc && !stop() && (c->for_s <= 0 || hv_now_s() - t0 < c->for_s)) {
                usleep(5000);
                if ((c->versions && v >= c->versions) || hv_now_s() < next)
                        continue;
                next += c->interval_s;
                v++;
                loom_harvest_wgen(c->seed, (uint32_t)v, c->density, w, c->elems);
                rc = publish_one(p, v, w, c->elems, t0, out, e);
        }
        return rc;
}

int loom_harvest_publish_serve(const loom_harvest_publish_cfg *c, int (*stop)(void), FILE *out,
                               loom_err *e)
{
        uint64_t *shard = malloc(c->shards * sizeof *shard);
        uint16_t *w = malloc(2 * c->elems);
        loom_sync_pub *p = NULL;
        int rc;
        if (!shard || !w)
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        else if (!c->key && !loom_harvest_loopback(c->ip))
                rc = loom_err_set(e, LOOM_EINVAL, "key",
                                  "publishing on %s needs the job's sync key: unauthenticated "
                                  "weights are served on loopback only",
                                  c->ip);
        else if (!(rc = loom_harvest_wshards(c->elems, c->shards, shard, e)) &&
                 !(rc = loom_sync_pub_new(c->model, shard, c->shards, c->bucket_elems, c->ip,
                                          c->port, &p, e)) &&
                 !(rc = c->key ? loom_sync_pub_set_key(p, c->key, e) : 0)) {
                fprintf(out, "publishing on %s:%u\n", c->ip, loom_sync_pub_port(p));
                rc = publish_loop(c, p, w, stop, out, e);
        }
        hv_err_lead(e, rc, NULL);
        loom_sync_pub_free(p);
        free(shard);
        free(w);
        return rc;
}
