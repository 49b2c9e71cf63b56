/*
 * rollout.c - a rollout rank: keeps its slice of every tensor, receives a new version, checks
 * it, and only then swaps it in.
 *
 * Lifecycle of one version:
 *
 *     SERVING(v) --run--> RECEIVING --all frames checked, per-tensor sums match--> COMMIT
 *         ^                   |                                                      |
 *         |                   +--any bad frame, lost stream, mismatch: drop staged --+
 *         +-------------------------------------------------------------------------- SERVING(v+1)
 *
 * While RECEIVING, the live weights are only read: dense frames are staged as received, sparse
 * frames as their payloads, and the per-tensor checksum of the new version is computed
 * incrementally (for a sparse delta only the changed elements are hashed, old and new, because the
 * position-keyed hash is additive). COMMIT takes the write lock and applies the staged frames; it
 * cannot fail. A rejected version leaves SERVING(v) untouched and the relay keeps serving v.
 *
 * One thread per consumed stream, reading either from this rank's own relay (streams that land
 * here) or from a peer's relay over TCP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct loom__rollout {
        const loom__ctx *c;
        uint32_t rank;
        int late;
        loom__view view;
        uint16_t *live;
        uint64_t *cur_hash;   /* per tensor, of the committed version */
        uint64_t *piece_hash; /* per map piece this rank keeps, of the committed version */
        uint64_t version;     /* committed */
        int have;             /* live holds a verified version */
        uint64_t tried;       /* last version whose receive finished (committed or not) */
        pthread_rwlock_t lock;
        pthread_mutex_t vmu;
        pthread_cond_t vcv;
        loom__relay *relay;
};

typedef struct staged {
        loom_sync_frame f;
        uint8_t *payload;
        loom__slot *slot; /* from our own relay: released, not freed */
} staged;

typedef struct consumer {
        loom__rollout *r;
        const loom_sync_plan *p;
        const loom_sync_stream *st;
        int snap;
        uint64_t version;
        staged *frames; /* nb buckets */
        uint64_t nb;
        loom__mentry *manifest;
        uint64_t *dense_new, *sparse_delta, *elems, *dense_elems; /* per tensor */
        double cpu;
        uint64_t dec_bytes, pulled;
        int rc;
        loom_err err;
} consumer;

const loom__view *loom__rollout_view(loom__rollout *r)
{
        return &r->view;
}

int loom__rollout_snapshot_lock(loom__rollout *r, uint64_t version, double deadline,
                                const uint16_t **live, const uint64_t **piece_hash)
{
        struct timespec ts;
        ts.tv_sec = (time_t)deadline;
        ts.tv_nsec = (long)((deadline - (double)ts.tv_sec) * 1e9);
        pthread_mutex_lock(&r->vmu);
        while (r->version < version && r->tried < version)
                if (pthread_cond_timedwait(&r->vcv, &r->vmu, &ts))
                        break;
        int ok = r->have && r->version >= version;
        pthread_mutex_unlock(&r->vmu);
        if (!ok)
                return LOOM_ESTATE;
        pthread_rwlock_rdlock(&r->lock);
        *live = r->live;
        *piece_hash = r->piece_hash;
        return 0;
}

void loom__rollout_snapshot_unlock(loom__rollout *r)
{
        pthread_rwlock_unlock(&r->lock);
}

/* Hash of the committed values of every tensor, keyed by flat element index. */
static void hash_live(loom__rollout *r)
{
        const loom_sync_layout *l = r->view.layout;
        for (size_t t = 0; t < l->ntensors; t++) {
                const loom_sync_rect *s = &r->view.slice[t];
                const loom_sync_tensor *x = &l->tensors[t];
                uint64_t w = s->c1 - s->c0, h = 0, loc = r->view.loc_off[t];
                for (uint64_t row = s->r0; row < s->r1; row++, loc += w)
                        h += loom_sync_hash(r->live + loc, (size_t)w,
                                            x->offset + row * x->cols + s->c0);
                r->cur_hash[t] = h;
        }
}

/* Does live equal the synthetic weights of `version`? (The bench's ground truth, untimed.) */
static int matches_truth(loom__rollout *r, uint64_t version)
{
        const loom_sync_layout *l = r->view.layout;
        const loom_sync_run_cfg *cfg = r->c->cfg;
        uint16_t *row = NULL;
        size_t cap = 0;
        int ok = 1;
        for (size_t t = 0; ok && t < l->ntensors; t++) {
                const loom_sync_rect *s = &r->view.slice[t];
                const loom_sync_tensor *x = &l->tensors[t];
                uint64_t w = s->c1 - s->c0, loc = r->view.loc_off[t];
                if (!w)
                        continue;
                if (w > cap) {
                        free(row);
                        cap = (size_t)w;
                        if (!(row = malloc(2 * cap)))
                                return 0;
                }
                for (uint64_t k = s->r0; ok && k < s->r1; k++, loc += w) {
                        loom_sync_synth(cfg->seed, (uint32_t)version, cfg->density,
                                        x->offset + k * x->cols + s->c0, (size_t)w, row);
                        ok = !memcmp(row, r->live + loc, 2 * w);
                }
        }
        free(row);
        return ok;
}

int loom__rollout_prepare(const loom__ctx *c, uint32_t rank, int late, int listen_fd,
                          loom__rollout **out, loom_err *e)
{
        loom__rollout *r = calloc(1, sizeof *r);
        if (!r)
                return loom_err_set(e, LOOM_ENOMEM, "rollout", "out of memory");
        r->c = c;
        r->rank = rank;
        r->late = late;
        const loom_sync_map *m = c->map;
        if (loom__view_init(&r->view, m, (int)(rank % m->roll.tp)))
                return loom_err_set(e, LOOM_ENOMEM, "rollout", "out of memory");
        size_t nt = m->layout->ntensors;
        r->cur_hash = calloc(nt, sizeof *r->cur_hash);
        r->piece_hash = calloc(m->npieces ? m->npieces : 1, sizeof *r->piece_hash);
        r->live = malloc((size_t)(r->view.local_elems * 2 + 2));
        if (!r->cur_hash || !r->piece_hash || !r->live)
                return loom_err_set(e, LOOM_ENOMEM, "rollout", "cannot hold a %.2f GB slice",
                                    (double)r->view.local_elems * 2 / 1e9);
        pthread_rwlock_init(&r->lock, NULL);
        pthread_mutex_init(&r->vmu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&r->vcv, &ca);
        pthread_condattr_destroy(&ca);
        if (!late) {
                /* As if the previous sync had completed: version 0 from the seed, untimed. */
                const loom_sync_layout *l = m->layout;
                for (size_t t = 0; t < nt; t++) {
                        const loom_sync_rect *s = &r->view.slice[t];
                        const loom_sync_tensor *x = &l->tensors[t];
                        uint64_t w = s->c1 - s->c0, loc = r->view.loc_off[t];
                        for (uint64_t k = s->r0; k < s->r1; k++, loc += w)
                                loom_sync_synth(c->cfg->seed, 0, c->cfg->density,
                                                x->offset + k * x->cols + s->c0, (size_t)w,
                                                r->live + loc);
                }
                hash_live(r);
                r->have = 1;
        }
        int rc = loom__relay_start(&r->relay, listen_fd, c->plan, c->catchup, r, rank, c->deadline,
                                   loom__rollout_key(c->cfg), e);
        if (rc)
                return rc;
        *out = r;
        return 0;
}

/* ---- receiving ------------------------------------------------------------------------- */

typedef struct hash_acc {
        consumer *c;
        const uint8_t *payload;
        uint64_t s0;
} hash_acc;

static void dense_run(const loom__run *run, void *arg)
{
        hash_acc *a = arg;
        const uint16_t *v = (const uint16_t *)a->payload + (run->soff - a->s0);
        a->c->dense_new[run->tensor] += loom_sync_hash(v, (size_t)run->len, run->g);
        a->c->dense_elems[run->tensor] += run->len;
        a->c->elems[run->tensor] += run->len;
}

static void sparse_run(const loom__run *run, void *arg)
{
        consumer *c = arg;
        c->elems[run->tensor] += run->len;
}

/* Check one bucket frame and fold it into the per-tensor sums. */
static int take_bucket(consumer *c, uint64_t k, const loom_sync_frame *f, const uint8_t *payload)
{
        const loom_sync_plan *p = c->p;
        uint64_t s0 = k * p->bucket_elems;
        uint64_t n = c->st->elems - s0 < p->bucket_elems ? c->st->elems - s0 : p->bucket_elems;
        if (f->start != s0 || f->elems != n || f->version != c->version)
                return loom_err_set(&c->err, LOOM_EPROTO, "frame",
                                    "stream %u bucket %llu: wrong position or version", c->st->id,
                                    (unsigned long long)k);
        double t0 = loom__cpu();
        /* keyed frames passed their tag, which covers what the CRC would (auth.c) */
        int rc = loom__payload_check(f, payload, !loom__rollout_key(c->r->c->cfg), &c->err);
        if (rc)
                return rc;
        if (f->enc == LOOM_SYNC_ENC_DENSE) {
                hash_acc a = {c, payload, s0};
                loom__walk(&c->r->view, p, c->st, s0, n, dense_run, &a);
        } else {
                if (!c->r->have)
                        return loom_err_set(&c->err, LOOM_ESTATE, "frame",
                                            "a sparse delta arrived but no base version is held");
                loom__walk(&c->r->view, p, c->st, s0, n, sparse_run, c);
        }
        c->cpu += loom__cpu() - t0;
        c->dec_bytes += 2 * n;
        return 0;
}

static int take_manifest(consumer *c, const loom_sync_frame *f, const uint8_t *payload)
{
        if (f->type != LOOM_SYNC_FRAME_MANIFEST || f->elems != c->st->count ||
            f->payload_len != c->st->count * sizeof(loom__mentry) ||
            (!loom__rollout_key(c->r->c->cfg) &&
             loom_sync_crc32c(0, payload, (size_t)f->payload_len) != f->payload_crc))
                return loom_err_set(&c->err, LOOM_ECORRUPT, "manifest", "stream %u: bad manifest",
                                    c->st->id);
        c->manifest = malloc((size_t)f->payload_len + 1);
        if (!c->manifest)
                return loom_err_set(&c->err, LOOM_ENOMEM, "manifest", "out of memory");
        memcpy(c->manifest, payload, (size_t)f->payload_len);
        for (size_t j = 0; j < c->st->count; j++)
                if (c->manifest[j].piece != c->p->order[c->st->first + j])
                        return loom_err_set(&c->err, LOOM_ECORRUPT, "manifest",
                                            "stream %u: manifest lists the wrong pieces",
                                            c->st->id);
        return 0;
}

static int consume_local(consumer *c, double deadline)
{
        for (uint64_t k = 0; k <= c->nb; k++) {
                loom__slot *s = loom__relay_get(c->r->relay, c->st->id, (uint32_t)k, deadline);
                char why[256];
                if (!s && (loom__relay_why(c->r->relay, why, sizeof why), why[0]))
                        return loom_err_set(&c->err, LOOM_ECORRUPT, "stream",
                                            "stream %u from training rank %u: %.200s", c->st->id,
                                            c->st->src, why);
                if (!s)
                        return loom_err_set(&c->err, LOOM_EIO, "stream",
                                            "stream %u from training rank %u broke off at frame "
                                            "%llu",
                                            c->st->id, c->st->src, (unsigned long long)k);
                int rc;
                if (k == c->nb) {
                        rc = take_manifest(c, &s->f, s->payload);
                        loom__relay_release(c->r->relay, s);
                        return rc;
                }
                c->frames[k] = (staged){s->f, s->payload, s};
                if ((rc = take_bucket(c, k, &s->f, s->payload)))
                        return rc;
        }
        return 0;
}

static int consume_remote(consumer *c, double deadline)
{
        const loom__ctx *x = c->r->c;
        int fd;
        int rc =
            loom__connect("127.0.0.1", x->ports[c->st->dst], deadline - loom__now(), &fd, &c->err);
        if (rc)
                return rc;
        loom__hello h = {c->snap ? LOOM__HELLO_SNAP : LOOM__HELLO_PULL, c->st->id, c->version, 0};
        loom__mac m;
        rc = loom__link_open(fd, &h, loom__rollout_key(x->cfg), &m, &c->err);
        for (uint64_t k = 0; !rc && k <= c->nb; k++) {
                loom_sync_frame f;
                uint8_t *payload;
                uint64_t maxp = k == c->nb ? c->st->count * sizeof(loom__mentry)
                                           : loom_sync_enc_bound((size_t)c->p->bucket_elems);
                rc = loom__frame_recv_mac(fd, &m, &f, &payload, maxp, &c->pulled, &c->err);
                if (!rc && (f.stream != c->st->id || f.seq != k))
                        rc = loom_err_set(&c->err, LOOM_EPROTO, "frame",
                                          "stream %u: frame out of order", c->st->id);
                if (rc) {
                        if (rc == LOOM_EIO)
                                loom_err_set(&c->err, LOOM_EIO, "stream",
                                             "stream %u from rank %u's relay broke off at frame "
                                             "%llu",
                                             c->st->id, c->st->dst, (unsigned long long)k);
                        free(payload);
                        break;
                }
                if (k == c->nb) {
                        rc = take_manifest(c, &f, payload);
                        free(payload);
                        break;
                }
                c->frames[k] = (staged){f, payload, NULL};
                rc = take_bucket(c, k, &f, payload);
        }
        close(fd);
        return rc;
}

static void *consumer_main(void *arg)
{
        consumer *c = arg;
        double deadline = c->r->c->deadline;
        int local = !c->snap && c->st->dst == c->r->rank;
        if (!local)
                loom__fast_link_thread();
        c->rc = local ? consume_local(c, deadline) : consume_remote(c, deadline);
        return NULL;
}

/* ---- verify, commit or drop ------------------------------------------------------------ */

typedef struct old_acc {
        uint64_t *dense_old;
        const uint16_t *live;
} old_acc;

static void old_run(const loom__run *run, void *arg)
{
        old_acc *a = arg;
        a->dense_old[run->tensor] += loom_sync_hash(a->live + run->loc, (size_t)run->len, run->g);
}

typedef struct apply_acc {
        uint16_t *live;
        const uint8_t *payload;
        uint64_t s0;
} apply_acc;

static void copy_run(const loom__run *run, void *arg)
{
        apply_acc *a = arg;
        memcpy(a->live + run->loc, (const uint16_t *)a->payload + (run->soff - a->s0),
               2 * run->len);
}

typedef struct xor_acc {
        consumer *c;
        uint64_t s0;
        size_t k;
        uint64_t kstart;
} xor_acc;

/* Apply one change in place and fold its effect on the tensor's checksum; the only random
 * access to the weights a sparse delta costs. */
static void xor_elem(uint64_t i, uint16_t x, void *arg)
{
        xor_acc *a = arg;
        uint32_t t;
        uint64_t g, loc;
        loom__locate(&a->c->r->view, a->c->p, a->c->st, a->s0 + i, &a->k, &a->kstart, &t, &g, &loc);
        uint16_t *w = &a->c->r->live[loc], old = *w;
        *w = old ^ x;
        a->c->sparse_delta[t] += loom_sync_hash1(*w, g) - loom_sync_hash1(old, g);
}

/* XOR is its own inverse: running this twice restores the previous version exactly. */
static void apply_sparse(consumer *c)
{
        for (uint64_t k = 0; k < c->nb; k++) {
                const staged *s = &c->frames[k];
                if (s->f.enc == LOOM_SYNC_ENC_DENSE)
                        continue;
                xor_acc a = {c, k * c->p->bucket_elems, 0, 0};
                loom_sync_payload_walk(&s->f, s->payload, xor_elem, &a);
        }
}

static void apply_dense(consumer *c)
{
        for (uint64_t k = 0; k < c->nb; k++) {
                const staged *s = &c->frames[k];
                uint64_t s0 = k * c->p->bucket_elems;
                if (s->f.enc != LOOM_SYNC_ENC_DENSE)
                        continue;
                apply_acc a = {c->r->live, s->payload, s0};
                loom__walk(&c->r->view, c->p, c->st, s0, s->f.elems, copy_run, &a);
        }
}

static void drop(consumer *c)
{
        for (uint64_t k = 0; c->frames && k < c->nb; k++) {
                if (c->frames[k].slot)
                        loom__relay_release(c->r->relay, c->frames[k].slot);
                else
                        free(c->frames[k].payload);
        }
        free(c->frames);
        free(c->manifest);
        free(c->dense_new);
        free(c->sparse_delta);
        free(c->elems);
        free(c->dense_elems);
}

/*
 * Check the new version against the senders' per-tensor checksums and swap it in, or leave the
 * old one. Tensors that arrived whole and dense are checked before anything is touched. Sparse
 * deltas are applied in place under the write lock, folding their checksum change as they go
 * (one pass over the changed elements instead of two); if any tensor then disagrees they are
 * applied again, which undoes them, and the dense frames are never copied. Tensors that arrived
 * partly dense and partly sparse need the old checksum of the dense part, taken first.
 */
static int commit(loom__rollout *r, consumer *cs, size_t n, loom_err *e)
{
        const loom_sync_layout *l = r->view.layout;
        const loom_sync_map *m = r->c->map;
        size_t nt = l->ntensors;
        uint64_t *want = calloc(nt, 8), *dn = calloc(nt, 8), *sd = calloc(nt, 8),
                 *el = calloc(nt, 8), *de = calloc(nt, 8), *dold = calloc(nt, 8),
                 *newh = calloc(nt, 8);
        int rc = want && dn && sd && el && de && dold && newh ? 0 : LOOM_ENOMEM, mixed = 0;
        if (rc)
                loom_err_set(e, rc, "commit", "out of memory");
        for (size_t i = 0; !rc && i < n; i++) {
                for (size_t j = 0; j < cs[i].st->count; j++)
                        want[m->pieces[cs[i].manifest[j].piece].tensor] += cs[i].manifest[j].hash;
                for (size_t t = 0; t < nt; t++) {
                        dn[t] += cs[i].dense_new[t];
                        el[t] += cs[i].elems[t];
                        de[t] += cs[i].dense_elems[t];
                }
        }
        for (size_t t = 0; !rc && t < nt; t++) {
                uint64_t slice = loom_sync_rect_elems(&r->view.slice[t]);
                if (el[t] != slice)
                        rc = loom_err_set(e, LOOM_EPROTO, l->tensors[t].name,
                                          "received %llu of %llu elements",
                                          (unsigned long long)el[t], (unsigned long long)slice);
                else if (de[t] == el[t] && (newh[t] = dn[t]) != want[t])
                        rc = loom_err_set(e, LOOM_ECORRUPT, l->tensors[t].name,
                                          "checksum of the new version does not match the "
                                          "senders'");
                mixed |= de[t] && de[t] != el[t];
        }
        for (size_t i = 0; !rc && mixed && i < n; i++) {
                old_acc a = {dold, r->live};
                for (uint64_t k = 0; k < cs[i].nb; k++)
                        if (cs[i].frames[k].f.enc == LOOM_SYNC_ENC_DENSE)
                                loom__walk(&r->view, cs[i].p, cs[i].st, k * cs[i].p->bucket_elems,
                                           cs[i].frames[k].f.elems, old_run, &a);
        }
        if (!rc) {
                pthread_rwlock_wrlock(&r->lock);
                for (size_t i = 0; i < n; i++)
                        apply_sparse(&cs[i]);
                for (size_t i = 0; i < n; i++)
                        for (size_t t = 0; t < nt; t++)
                                sd[t] += cs[i].sparse_delta[t];
                for (size_t t = 0; !rc && t < nt; t++) {
                        if (de[t] == el[t])
                                continue;
                        newh[t] = r->cur_hash[t] + sd[t] + dn[t] - dold[t];
                        if (newh[t] != want[t])
                                rc = loom_err_set(e, LOOM_ECORRUPT, l->tensors[t].name,
                                                  "checksum of the new version does not match "
                                                  "the senders'");
                }
                for (size_t i = 0; rc && i < n; i++)
                        apply_sparse(&cs[i]); /* undo */
                for (size_t i = 0; !rc && i < n; i++) {
                        apply_dense(&cs[i]);
                        for (size_t j = 0; j < cs[i].st->count; j++)
                                r->piece_hash[cs[i].manifest[j].piece] = cs[i].manifest[j].hash;
                }
                if (!rc)
                        memcpy(r->cur_hash, newh, nt * sizeof *newh);
                pthread_rwlock_unlock(&r->lock);
        }
        free(want), free(dn), free(sd), free(el), free(de), free(dold), free(newh);
        return rc;
}

static int consumer_init(consumer *c, loom__rollout *r, const loom_sync_plan *p,
                         const loom_sync_stream *st, int snap, uint64_t version)
{
        size_t nt = r->view.layout->ntensors;
        memset(c, 0, sizeof *c);
        c->r = r, c->p = p, c->st = st, c->snap = snap, c->version = version;
        c->nb = loom_sync_stream_buckets(p, st);
        c->frames = calloc(c->nb ? c->nb : 1, sizeof *c->frames);
        c->dense_new = calloc(nt, 8), c->sparse_delta = calloc(nt, 8);
        c->elems = calloc(nt, 8), c->dense_elems = calloc(nt, 8);
        return c->frames && c->dense_new && c->sparse_delta && c->elems && c->dense_elems
                   ? 0
                   : LOOM_ENOMEM;
}

int loom__rollout_run(loom__rollout *r, loom__report *rep)
{
        const uint64_t version = 1;
        const loom_sync_plan *p = r->late ? r->c->catchup : r->c->plan;
        size_t n = 0;
        loom_err e = {0};
        consumer *cs = calloc(p->nstreams ? p->nstreams : 1, sizeof *cs);
        pthread_t *th = calloc(p->nstreams ? p->nstreams : 1, sizeof *th);
        int rc = cs && th ? 0 : LOOM_ENOMEM;
        /* A late joiner takes the catch-up streams it keeps from the landing ranks' relays. */
        for (size_t s = 0; !rc && s < p->nstreams; s++) {
                const loom_sync_stream *st = &p->streams[s];
                int mine = r->late ? (r->rank % p->map->roll.tp >= st->need0 &&
                                      r->rank % p->map->roll.tp < st->need1)
                                   : loom_sync_stream_consumer(p, st, r->rank);
                if (!mine)
                        continue;
                if ((rc = consumer_init(&cs[n], r, p, st, r->late, version)))
                        break;
                if (pthread_create(&th[n], NULL, consumer_main, &cs[n])) {
                        rc = LOOM_EIO;
                        break;
                }
                n++;
        }
        for (size_t i = 0; i < n; i++)
                pthread_join(th[i], NULL);
        for (size_t i = 0; !rc && i < n; i++)
                if (cs[i].rc) {
                        rc = cs[i].rc;
                        e = cs[i].err;
                }
        if (rc && !e.msg[0])
                loom_err_set(&e, rc, "rollout", "%s", loom_strerror(rc));
        double t0 = loom__cpu();
        if (!rc)
                rc = commit(r, cs, n, &e);
        rep->t_done = loom__now();
        double commit_cpu = loom__cpu() - t0;
        pthread_mutex_lock(&r->vmu);
        r->tried = version;
        if (!rc) {
                r->version = version;
                r->have = 1;
        }
        pthread_cond_broadcast(&r->vcv);
        pthread_mutex_unlock(&r->vmu);
        rep->cpu_codec = commit_cpu;
        for (size_t i = 0; i < n; i++) {
                rep->cpu_codec += cs[i].cpu;
                rep->codec_bytes += cs[i].dec_bytes;
                rep->pulled_bytes += cs[i].pulled;
                drop(&cs[i]);
        }
        free(cs);
        free(th);
        rep->rc = rc;
        /* Ground truth, untimed: what this rank serves now must be the synthetic weights of
         * the version it claims, whether the new one was committed or the old one kept. */
        int truth = r->have && matches_truth(r, r->version);
        rep->verified = !rc && truth;
        rep->intact = truth;
        if (rc)
                snprintf(rep->msg, sizeof rep->msg, "%.60s%s%.150s (still serving version %llu%s)",
                         e.field, e.field[0] ? ": " : "", e.msg, (unsigned long long)r->version,
                         r->have ? (truth ? ", intact" : ", NOT intact") : ", none held");
        else if (!truth)
                snprintf(rep->msg, sizeof rep->msg,
                         "committed weights differ from the synthetic version %llu",
                         (unsigned long long)r->version);
        return rc;
}
