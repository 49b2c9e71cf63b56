/*
 * weights.c - new rollout weights to the serving side, through src/sync's bucket codec.
 *
 * Serving GPUs join and leave the rollout pool between RL steps, so a borrowed GPU may have
 * missed versions. The publisher keeps one dense snapshot and the sparse deltas after it (each
 * bucket encoded by loom_sync_encode against the previous version: COO or bitmap when that is
 * smaller, dense otherwise). A worker within `keep` versions applies the deltas it lacks; one
 * further behind loads the snapshot first. Every frame of a version is checked (CRC, indices)
 * before the first value changes, so a bad frame leaves the worker on its old version. Weights
 * are the deterministic synthetic model of loom_sync_synth, so a result can be checked bit for
 * bit; the transfer itself (shard maps, relays, TCP) is `loom sync`'s.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/harvest.h"
#include "loom/sync.h"

typedef struct frame {
        loom_sync_frame f;
        uint8_t *payload;
} frame;

typedef struct version_frames {
        uint32_t version;
        frame *b; /* one per bucket */
} version_frames;

struct loom_harvest_wpub {
        uint64_t elems, bucket, seed;
        double density;
        uint32_t keep, version, nbuckets;
        version_frames snap;
        version_frames *deltas; /* versions snap.version + 1 .. version */
        uint32_t ndeltas;
        uint16_t *a, *b; /* scratch: one bucket of old and new values */
};

static void frames_free(version_frames *v, uint32_t n)
{
        if (!v->b)
                return;
        for (uint32_t i = 0; i < n; i++)
                free(v->b[i].payload);
        free(v->b);
        v->b = NULL;
}

void loom_harvest_wpub_free(loom_harvest_wpub *p)
{
        if (!p)
                return;
        frames_free(&p->snap, p->nbuckets);
        for (uint32_t i = 0; i < p->ndeltas; i++)
                frames_free(&p->deltas[i], p->nbuckets);
        free(p->deltas);
        free(p->a);
        free(p->b);
        free(p);
}

/* Encode version v (against v - 1 when sparse, else dense) into out. */
static int encode_version(loom_harvest_wpub *p, uint32_t v, int dense, version_frames *out,
                          loom_err *e)
{
        out->version = v;
        out->b = calloc(p->nbuckets, sizeof *out->b);
        if (!out->b)
                return loom_err_set(e, LOOM_ENOMEM, "weights", "out of memory");
        for (uint32_t i = 0; i < p->nbuckets; i++) {
                uint64_t g0 = (uint64_t)i * p->bucket;
                size_t n = (size_t)(g0 + p->bucket <= p->elems ? p->bucket : p->elems - g0);
                loom_sync_synth(p->seed, v, p->density, g0, n, p->b);
                if (!dense)
                        loom_sync_synth(p->seed, v - 1, p->density, g0, n, p->a);
                uint8_t *buf = malloc(loom_sync_enc_bound(n));
                if (!buf) {
                        frames_free(out, p->nbuckets);
                        return loom_err_set(e, LOOM_ENOMEM, "weights", "out of memory");
                }
                frame *fr = &out->b[i];
                memset(&fr->f, 0, sizeof fr->f);
                fr->f.type = LOOM_SYNC_FRAME_BUCKET;
                fr->f.seq = i;
                fr->f.version = v;
                fr->f.start = g0;
                int rc = loom_sync_encode(dense ? NULL : p->a, p->b, n,
                                          dense ? LOOM_SYNC_ENC_DENSE : LOOM_SYNC_ENC_AUTO, buf,
                                          &fr->f, e);
                fr->payload = buf;
                if (rc) {
                        frames_free(out, p->nbuckets);
                        return rc;
                }
        }
        return 0;
}

int loom_harvest_wpub_new(uint64_t elems, uint64_t bucket_elems, uint64_t seed, double density,
                          uint32_t keep, loom_harvest_wpub **out, loom_err *e)
{
        if (elems == 0 || bucket_elems == 0)
                return loom_err_set(e, LOOM_EINVAL, "elems", "model and bucket must be non-empty");
        if (!(density >= 0 && density <= 1))
                return loom_err_set(e, LOOM_EINVAL, "density", "must be in [0, 1]");
        if ((elems + bucket_elems - 1) / bucket_elems > UINT32_MAX)
                return loom_err_set(e, LOOM_ERANGE, "bucket", "too many buckets");
        loom_harvest_wpub *p = calloc(1, sizeof *p);
        if (!p)
                return loom_err_set(e, LOOM_ENOMEM, "weights", "out of memory");
        p->elems = elems;
        p->bucket = bucket_elems < elems ? bucket_elems : elems;
        p->seed = seed;
        p->density = density;
        p->keep = keep;
        p->nbuckets = (uint32_t)((elems + p->bucket - 1) / p->bucket);
        p->a = malloc(p->bucket * sizeof *p->a);
        p->b = malloc(p->bucket * sizeof *p->b);
        int rc = !p->a || !p->b ? loom_err_set(e, LOOM_ENOMEM, "weights", "out of memory")
                                : encode_version(p, 0, 1, &p->snap, e);
        if (rc) {
                loom_harvest_wpub_free(p);
                return rc;
        }
        *out = p;
        return 0;
}

int loom_harvest_wpub_publish(loom_harvest_wpub *p, loom_err *e)
{
        version_frames d;
        int rc = encode_version(p, p->version + 1, 0, &d, e);
        if (rc)
                return rc;
        version_frames *nd = realloc(p->deltas, (p->ndeltas + 1) * sizeof *nd);
        if (!nd) {
                frames_free(&d, p->nbuckets);
                return loom_err_set(e, LOOM_ENOMEM, "weights", "out of memory");
        }
        p->deltas = nd;
        p->deltas[p->ndeltas++] = d;
        p->version++;
        if (p->ndeltas > p->keep) { /* advance the snapshot past the oldest delta */
                version_frames s;
                rc = encode_version(p, p->deltas[0].version, 1, &s, e);
                if (rc)
                        return rc; /* one delta more than asked is kept: still correct */
                frames_free(&p->snap, p->nbuckets);
                p->snap = s;
                frames_free(&p->deltas[0], p->nbuckets);
                memmove(p->deltas, p->deltas + 1, (p->ndeltas - 1) * sizeof *p->deltas);
                p->ndeltas--;
        }
        return 0;
}

uint32_t loom_harvest_wpub_version(const loom_harvest_wpub *p)
{
        return p->version;
}

static int check_all(const loom_harvest_wpub *p, const version_frames *v, loom_err *e)
{
        for (uint32_t i = 0; i < p->nbuckets; i++) {
                int rc = loom_sync_payload_check(&v->b[i].f, v->b[i].payload, e);
                if (rc)
                        return rc;
        }
        return 0;
}

static int apply(const loom_harvest_wpub *p, const version_frames *v, uint16_t *w, uint64_t *bytes,
                 loom_err *e)
{
        for (uint32_t i = 0; i < p->nbuckets; i++) {
                const frame *fr = &v->b[i];
                uint16_t *at = w + fr->f.start;
                int rc = loom_sync_decode(&fr->f, fr->payload, at, at, (size_t)fr->f.elems, e);
                if (rc)
                        return rc;
                *bytes += LOOM_SYNC_FRAME_HDR + fr->f.payload_len;
        }
        return 0;
}

int loom_harvest_wsub_catchup(loom_harvest_worker_weights *ww, const loom_harvest_wpub *p,
                              uint64_t *bytes, int *from_snapshot, loom_err *e)
{
        uint64_t b = 0;
        int snap = !ww->loaded || ww->elems != p->elems || ww->version < p->snap.version ||
                   ww->version > p->version;
        if (snap) {
                int rc = check_all(p, &p->snap, e);
                if (rc)
                        return rc;
                uint16_t *w = malloc(p->elems * sizeof *w);
                if (!w)
                        return loom_err_set(e, LOOM_ENOMEM, "weights", "out of memory");
                rc = apply(p, &p->snap, w, &b, e);
                if (rc) {
                        free(w);
                        return rc;
                }
                free(ww->w);
                ww->w = w;
                ww->elems = p->elems;
                ww->version = p->snap.version;
                ww->loaded = 1;
        }
        for (uint32_t i = 0; i < p->ndeltas; i++) {
                const version_frames *d = &p->deltas[i];
                if (d->version <= ww->version)
                        continue;
                int rc = check_all(p, d, e);
                if (rc == 0)
                        rc = apply(p, d, ww->w, &b, e);
                if (rc)
                        return rc; /* the worker stays on its last complete version */
                ww->version = d->version;
        }
        if (bytes)
                *bytes = b;
        if (from_snapshot)
                *from_snapshot = snap;
        return 0;
}

void loom_harvest_wsub_free(loom_harvest_worker_weights *ww)
{
        free(ww->w);
        memset(ww, 0, sizeof *ww);
}

int loom_harvest_wsub_verify(const loom_harvest_worker_weights *ww, const loom_harvest_wpub *p)
{
        if (!ww->loaded || ww->elems != p->elems)
                return 0;
        uint16_t *x = malloc(p->bucket * sizeof *x);
        if (!x)
                return 0;
        int ok = 1;
        for (uint64_t g0 = 0; ok && g0 < p->elems; g0 += p->bucket) {
                size_t n = (size_t)(g0 + p->bucket <= p->elems ? p->bucket : p->elems - g0);
                loom_sync_synth(p->seed, ww->version, p->density, g0, n, x);
                ok = memcmp(x, ww->w + g0, n * sizeof *x) == 0;
        }
        free(x);
        return ok;
}
