/*
 * train.c - a training rank: pushes the streams it sends to the relays of their landing rollout
 * ranks, one TCP connection and one thread per stream, so a rank with several destinations
 * drives them in parallel.
 *
 * Before the clock starts the rank materialises only the elements it sends (its part of its
 * shard, in stream order, once even when several streams carry the same pieces) for versions 0
 * and 1 from the seed; nothing else of the model exists in this process. After the clock starts it
 * encodes bucket by bucket (dense plans send the values in place with a CRC; topo+sparse encodes
 * the XOR delta against version 0), pushes without waiting for any rollout rank, sends the manifest
 * of per-piece checksums, and waits for the relay's acknowledgement so the recorded time covers the
 * bytes actually crossing the link.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

typedef struct pusher {
        loom__trainer *t;
        const loom_sync_stream *st;
        uint16_t *nw, *old; /* the stream's data in stream order, versions 1 and 0 */
        int shared;         /* nw/old belong to an earlier pusher with the same pieces */
        double cpu, t_done;
        uint64_t enc_bytes, sent;
        int rc;
        loom_err err;
} pusher;

struct loom__trainer {
        const loom__ctx *c;
        uint32_t rank;
        loom__view view;
        size_t n;
        pusher *ps;
};

typedef struct gen_acc {
        const loom_sync_run_cfg *cfg;
        uint16_t *nw, *old;
} gen_acc;

static void gen_run(const loom__run *run, void *arg)
{
        gen_acc *a = arg;
        loom_sync_synth(a->cfg->seed, 1, a->cfg->density, run->g, (size_t)run->len,
                        a->nw + run->soff);
        if (a->old)
                loom_sync_synth(a->cfg->seed, 0, a->cfg->density, run->g, (size_t)run->len,
                                a->old + run->soff);
}

int loom__trainer_prepare(const loom__ctx *c, uint32_t rank, loom__trainer **out, loom_err *e)
{
        loom__trainer *t = calloc(1, sizeof *t);
        const loom_sync_plan *p = c->plan;
        if (!t || loom__view_init(&t->view, c->map, -1) ||
            !(t->ps = calloc(p->nstreams ? p->nstreams : 1, sizeof *t->ps))) {
                loom__trainer_free(t);
                return loom_err_set(e, LOOM_ENOMEM, "train", "out of memory");
        }
        t->c = c;
        t->rank = rank;
        int sparse = p->kind == LOOM_SYNC_TOPO_SPARSE;
        for (size_t s = 0; s < p->nstreams; s++) {
                const loom_sync_stream *st = &p->streams[s];
                if (st->src != rank)
                        continue;
                pusher *ps = &t->ps[t->n++];
                ps->t = t;
                ps->st = st;
                /* Streams with the same pieces (flat: one per rollout DP replica) share data. */
                pusher *twin = NULL;
                for (size_t j = 0; !twin && j + 1 < t->n; j++)
                        if (t->ps[j].st->count == st->count && !t->ps[j].shared &&
                            !memcmp(&p->order[t->ps[j].st->first], &p->order[st->first],
                                    st->count * sizeof *p->order))
                                twin = &t->ps[j];
                if (twin) {
                        ps->nw = twin->nw, ps->old = twin->old, ps->shared = 1;
                        continue;
                }
                ps->nw = malloc((size_t)st->elems * 2 + 2);
                ps->old = sparse ? malloc((size_t)st->elems * 2 + 2) : NULL;
                if (!ps->nw || (sparse && !ps->old)) {
                        loom__trainer_free(t);
                        return loom_err_set(e, LOOM_ENOMEM, "train",
                                            "cannot hold the %.2f GB this rank sends",
                                            (double)st->elems * 2 / 1e9);
                }
                gen_acc a = {c->cfg, ps->nw, ps->old};
                loom__walk(&t->view, p, st, 0, st->elems, gen_run, &a);
        }
        *out = t;
        return 0;
}

void loom__trainer_free(loom__trainer *t)
{
        if (!t)
                return;
        for (size_t i = 0; t->ps && i < t->n; i++) {
                if (t->ps[i].shared)
                        continue;
                free(t->ps[i].nw);
                free(t->ps[i].old);
        }
        free(t->ps);
        loom__view_fini(&t->view);
        free(t);
}

typedef struct man_acc {
        const uint16_t *nw;
        loom__mentry *m;
        size_t j;
        int started;
} man_acc;

static void man_run(const loom__run *run, void *arg)
{
        man_acc *a = arg;
        if (!a->started || a->m[a->j].piece != run->piece) {
                a->j += a->started;
                a->started = 1;
                a->m[a->j].piece = run->piece;
                a->m[a->j].hash = 0;
        }
        a->m[a->j].hash += loom_sync_hash(a->nw + run->soff, (size_t)run->len, run->g);
}

/* Fault injection works on private copies: stream buffers may be shared between threads. */
static const uint8_t *inject(int mode, const uint16_t **nw, uint64_t n, const uint8_t *payload,
                             uint64_t len, void **tmp)
{
        if (mode == 2) { /* a wrong value in an otherwise well-formed frame */
                uint16_t *v = malloc(2 * n);
                if (v) {
                        memcpy(v, *nw, 2 * n);
                        v[0] ^= 0x0101;
                        *nw = v;
                }
                *tmp = v;
                return payload;
        }
        uint8_t *c = malloc(len); /* a byte flipped after the CRC was computed */
        if (c) {
                memcpy(c, payload, len);
                c[0] ^= 0x5a;
        }
        *tmp = c;
        return c ? c : payload;
}

static int push_buckets(pusher *ps, int fd, uint8_t *enc, loom__mac *m)
{
        const loom__ctx *c = ps->t->c;
        const loom_sync_plan *p = c->plan;
        const loom_sync_stream *st = ps->st;
        uint64_t nb = loom_sync_stream_buckets(p, st);
        for (uint64_t k = 0; k < nb; k++) {
                uint64_t s0 = k * p->bucket_elems;
                uint64_t n = st->elems - s0 < p->bucket_elems ? st->elems - s0 : p->bucket_elems;
                loom_sync_frame f = {0};
                const uint8_t *payload;
                const uint16_t *nw = ps->nw + s0;
                int fault = ps->t->rank == 0 && ps == &ps->t->ps[0] && !k ? c->cfg->corrupt : 0;
                void *tmp = NULL, *tmp2 = NULL;
                if (fault == 2)
                        inject(2, &nw, n, NULL, 0, &tmp);
                double t0 = loom__cpu();
                if (enc) {
                        /* keyed: the tag is computed in the pass that encodes, and replaces
                         * the CRC (auth.c) */
                        loom__encode(ps->old + s0, nw, (size_t)n, LOOM_SYNC_ENC_AUTO, enc, &f, m,
                                     NULL);
                        payload = enc;
                } else {
                        /* dense: the values go out in place; only the CRC, or keyed the tag,
                         * is computed */
                        f.type = LOOM_SYNC_FRAME_BUCKET;
                        f.enc = LOOM_SYNC_ENC_DENSE;
                        f.elems = n;
                        f.payload_len = 2 * n;
                        payload = (const uint8_t *)nw;
                        if (m->on) {
                                loom__mac_begin(m);
                                loom__mac_update(m, payload, (size_t)f.payload_len);
                        } else
                                f.payload_crc = loom_sync_crc32c(0, payload, (size_t)f.payload_len);
                }
                ps->cpu += loom__cpu() - t0;
                ps->enc_bytes += 2 * n;
                f.stream = st->id, f.seq = (uint32_t)k, f.version = 1, f.start = s0;
                /* a byte flipped after the CRC or the tag was computed: what a wire can do */
                if (fault == 1 && f.payload_len)
                        payload = inject(1, &nw, n, payload, f.payload_len, &tmp2);
                int rc = m->on ? loom__frame_send_tagged(fd, m, &f, payload, &ps->sent)
                               : loom__frame_send(fd, &f, payload, &ps->sent);
                free(tmp);
                free(tmp2);
                if (rc)
                        return loom_err_set(&ps->err, LOOM_EIO, "push",
                                            "stream %u to rollout rank %u: connection lost", st->id,
                                            st->dst);
        }
        return 0;
}

static int push_manifest(pusher *ps, int fd, loom__mac *mac)
{
        const loom_sync_plan *p = ps->t->c->plan;
        const loom_sync_stream *st = ps->st;
        loom__mentry *m = calloc(st->count ? st->count : 1, sizeof *m);
        if (!m)
                return loom_err_set(&ps->err, LOOM_ENOMEM, "push", "out of memory");
        man_acc a = {ps->nw, m, 0, 0};
        loom__walk(&ps->t->view, p, st, 0, st->elems, man_run, &a);
        loom_sync_frame f = {.type = LOOM_SYNC_FRAME_MANIFEST,
                             .stream = st->id,
                             .seq = (uint32_t)loom_sync_stream_buckets(p, st),
                             .version = 1,
                             .elems = st->count,
                             .payload_len = st->count * sizeof *m};
        if (!mac->on) /* keyed frames carry the tag instead */
                f.payload_crc = loom_sync_crc32c(0, m, (size_t)f.payload_len);
        int rc = loom__frame_send_mac(fd, mac, &f, m, &ps->sent);
        free(m);
        return rc ? loom_err_set(&ps->err, LOOM_EIO, "push", "stream %u: connection lost", st->id)
                  : 0;
}

static void *push_main(void *arg)
{
        pusher *ps = arg;
        const loom__ctx *c = ps->t->c;
        int fd;
        ps->rc = loom__connect(c->relay_ip, c->ports[ps->st->dst], c->deadline - loom__now(), &fd,
                               &ps->err);
        if (ps->rc)
                return NULL;
        uint8_t *enc = NULL;
        if (c->plan->kind == LOOM_SYNC_TOPO_SPARSE &&
            !(enc = malloc((size_t)(2 * c->plan->bucket_elems + 16)))) {
                ps->rc = loom_err_set(&ps->err, LOOM_ENOMEM, "push", "out of memory");
                close(fd);
                return NULL;
        }
        loom__hello h = {LOOM__HELLO_PUSH, ps->st->id, 1, 0};
        loom__mac m;
        ps->rc = loom__link_open(fd, &h, c->cfg->key, &m, &ps->err);
        if (!ps->rc)
                ps->rc = push_buckets(ps, fd, enc, &m);
        if (!ps->rc)
                ps->rc = push_manifest(ps, fd, &m);
        free(enc);
        if (!ps->rc) {
                /* the relay answers once it holds the whole stream */
                loom_sync_frame ack;
                uint8_t *payload;
                ps->rc = loom__frame_recv_mac(fd, &m, &ack, &payload, 0, NULL, &ps->err);
                if (!ps->rc && ack.type != LOOM_SYNC_FRAME_END)
                        ps->rc = loom_err_set(&ps->err, LOOM_EPROTO, "push", "no acknowledgement");
                free(payload);
        }
        ps->t_done = loom__now();
        close(fd);
        return NULL;
}

int loom__trainer_run(loom__trainer *t, loom__report *rep)
{
        pthread_t *th = calloc(t->n ? t->n : 1, sizeof *th);
        size_t started = 0;
        int rc = th ? 0 : LOOM_ENOMEM;
        for (; !rc && started < t->n; started++)
                if (pthread_create(&th[started], NULL, push_main, &t->ps[started]))
                        rc = LOOM_EIO;
        for (size_t i = 0; i < started; i++)
                pthread_join(th[i], NULL);
        free(th);
        double last = 0;
        if (rc)
                snprintf(rep->msg, sizeof rep->msg, "cannot start push threads");
        for (size_t i = 0; i < t->n; i++) {
                pusher *ps = &t->ps[i];
                rep->cpu_codec += ps->cpu;
                rep->codec_bytes += ps->enc_bytes;
                rep->sent_bytes += ps->sent;
                if (ps->t_done > last)
                        last = ps->t_done;
                if (ps->rc && !rc) {
                        rc = ps->rc;
                        snprintf(rep->msg, sizeof rep->msg, "%s", ps->err.msg);
                }
        }
        rep->t_done = last > 0 ? last : loom__now();
        rep->rc = rc;
        rep->verified = !rc;
        return rc;
}
