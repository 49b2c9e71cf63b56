/*
 * relay.c - the relay a rollout rank runs beside itself.
 *
 * Training ranks push the streams that land on this rank, bucket by bucket, without waiting for
 * anyone; the relay keeps each frame until every consumer of its stream (this rank and the peers
 * that pull it) has taken it, then frees it. Pullers get frames as they arrive, so the fast-fabric
 * broadcast overlaps the slow-link transfer. A rank that joins late, or restarts, asks for a
 * snapshot instead: dense frames cut from this rank's committed weights, with the per-piece
 * checksums the training ranks sent, so the joiner verifies against the senders, not the relay.
 *
 * With the job's sync key every connection is keyed (loom__link_accept, auth.c): a peer that
 * cannot prove the key is refused before anything is served or stored, a pushed frame whose
 * tag fails is never stored, the stream fails, and the reason is kept for the rank's report.
 * A stream is served to as many pulls as it has consumers besides this rank.
 *
 * Threads: one accepting, one per connection. One mutex guards every slot; a condition variable
 * wakes waiters when a frame lands or a stream fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

struct loom__relay {
        int lfd;
        uint32_t rank;
        const loom_sync_plan *plan, *catchup;
        loom__rollout *owner;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        loom__slot **slots; /* by stream id: buckets then the manifest; NULL if not landing here */
        int *failed;        /* by stream id */
        int *consumers;     /* by stream id */
        int *pulls;         /* by stream id: peers that pulled it (at most its other consumers) */
        uint64_t served;    /* frame bytes sent to pullers and snapshot readers */
        double deadline;    /* waits for frames or snapshots give up then (monotonic) */
        const uint8_t *key; /* the job's sync key: every connection is keyed; NULL: none */
        char why[256];      /* the first refused push or connection, for the rank's report */
        pthread_t accept_thread;
};

typedef struct conn {
        loom__relay *r;
        int fd;
} conn;

/* Remember the first reason a push or a connection was refused (field: message). */
static void note_refusal(loom__relay *r, const loom_err *e)
{
        pthread_mutex_lock(&r->mu);
        if (!r->why[0])
                snprintf(r->why, sizeof r->why, "%.60s: %.190s", e->field, e->msg);
        pthread_mutex_unlock(&r->mu);
}

void loom__relay_why(loom__relay *r, char *buf, size_t len)
{
        pthread_mutex_lock(&r->mu);
        snprintf(buf, len, "%s", r->why);
        pthread_mutex_unlock(&r->mu);
}

static void fail_stream(loom__relay *r, uint32_t s)
{
        pthread_mutex_lock(&r->mu);
        r->failed[s] = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
}

static void abs_deadline(double deadline, struct timespec *ts)
{
        /* condition variables below use CLOCK_MONOTONIC */
        double d = deadline < 1e12 ? deadline : 1e12;
        ts->tv_sec = (time_t)d;
        ts->tv_nsec = (long)((d - (double)ts->tv_sec) * 1e9);
}

loom__slot *loom__relay_get(loom__relay *r, uint32_t stream, uint32_t seq, double deadline)
{
        if (stream >= r->plan->nstreams || !r->slots[stream])
                return NULL;
        struct timespec ts;
        abs_deadline(deadline, &ts);
        loom__slot *s = &r->slots[stream][seq];
        pthread_mutex_lock(&r->mu);
        while (!s->filled && !r->failed[stream])
                if (pthread_cond_timedwait(&r->cv, &r->mu, &ts))
                        break;
        loom__slot *got = s->filled ? s : NULL;
        pthread_mutex_unlock(&r->mu);
        return got;
}

void loom__relay_release(loom__relay *r, loom__slot *s)
{
        pthread_mutex_lock(&r->mu);
        if (--s->refs == 0) {
                free(s->payload);
                s->payload = NULL;
        }
        pthread_mutex_unlock(&r->mu);
}

uint64_t loom__relay_served(loom__relay *r)
{
        pthread_mutex_lock(&r->mu);
        uint64_t v = r->served;
        pthread_mutex_unlock(&r->mu);
        return v;
}

static void add_served(loom__relay *r, uint64_t n)
{
        pthread_mutex_lock(&r->mu);
        r->served += n;
        pthread_mutex_unlock(&r->mu);
}

static uint64_t max_payload(const loom_sync_plan *p, const loom_sync_stream *st, uint32_t seq)
{
        uint64_t nb = loom_sync_stream_buckets(p, st);
        if (seq == nb)
                return st->count * sizeof(loom__mentry);
        return loom_sync_enc_bound((size_t)p->bucket_elems);
}

/* A training rank pushes one stream: buckets 0..nb-1, then the manifest; we acknowledge it. */
static void serve_push(loom__relay *r, int fd, const loom__hello *h, loom__mac *m)
{
        const loom_sync_plan *p = r->plan;
        if (h->stream >= p->nstreams || !r->slots[h->stream])
                return;
        const loom_sync_stream *st = &p->streams[h->stream];
        uint64_t nb = loom_sync_stream_buckets(p, st);
        for (uint64_t k = 0; k <= nb; k++) {
                loom_sync_frame f;
                uint8_t *payload;
                loom_err e = {0};
                int rc = loom__frame_recv_mac(fd, m, &f, &payload, max_payload(p, st, (uint32_t)k),
                                              NULL, &e);
                if (rc || f.stream != h->stream || f.seq != k || f.version != h->version ||
                    f.type != (k == nb ? LOOM_SYNC_FRAME_MANIFEST : LOOM_SYNC_FRAME_BUCKET)) {
                        if (rc == LOOM_ECORRUPT) /* a refused tag: say so in the report */
                                note_refusal(r, &e);
                        free(payload);
                        fail_stream(r, h->stream);
                        return;
                }
                pthread_mutex_lock(&r->mu);
                loom__slot *s = &r->slots[h->stream][k];
                if (s->filled) { /* a second push of the same stream and version */
                        pthread_mutex_unlock(&r->mu);
                        free(payload);
                        return;
                }
                s->f = f;
                s->payload = payload;
                s->refs = r->consumers[h->stream];
                s->filled = 1;
                pthread_cond_broadcast(&r->cv);
                pthread_mutex_unlock(&r->mu);
        }
        loom_sync_frame ack = {.type = LOOM_SYNC_FRAME_END,
                               .stream = h->stream,
                               .version = h->version,
                               .seq = (uint32_t)nb};
        loom__frame_send_mac(fd, m, &ack, NULL, NULL);
}

/* A peer pulls a stream that landed here, frame by frame as the frames arrive. */
static void serve_pull(loom__relay *r, int fd, const loom__hello *h, double deadline, loom__mac *m)
{
        const loom_sync_plan *p = r->plan;
        if (h->stream >= p->nstreams || !r->slots[h->stream])
                return;
        const loom_sync_stream *st = &p->streams[h->stream];
        /* Each pull releases every frame once: a stream serves as many pulls as it has
         * consumers besides this rank, or a pull too many (a peer asking twice, or one that
         * does not consume the stream) would free frames this rank has yet to take. */
        int peers = r->consumers[h->stream] - loom_sync_stream_consumer(p, st, r->rank);
        pthread_mutex_lock(&r->mu);
        int ok = r->pulls[h->stream] < peers;
        r->pulls[h->stream] += ok;
        pthread_mutex_unlock(&r->mu);
        if (!ok)
                return;
        uint64_t nb = loom_sync_stream_buckets(p, st);
        for (uint64_t k = 0; k <= nb; k++) {
                loom__slot *s = loom__relay_get(r, h->stream, (uint32_t)k, deadline);
                if (!s)
                        return; /* the puller sees the connection close and gives up */
                uint64_t sent = 0;
                int rc = loom__frame_send_mac(fd, m, &s->f, s->payload, &sent);
                loom__relay_release(r, s);
                add_served(r, sent);
                if (rc)
                        return;
        }
}

typedef struct snap {
        const uint16_t *live;
        uint16_t *buf;
        uint64_t s0;
} snap;

static void snap_run(const loom__run *run, void *arg)
{
        snap *s = arg;
        memcpy(s->buf + (run->soff - s->s0), s->live + run->loc, 2 * run->len);
}

/* A late joiner asks for a catch-up stream: dense frames cut from our committed weights. */
static void serve_snap(loom__relay *r, int fd, const loom__hello *h, double deadline, loom__mac *m)
{
        const loom_sync_plan *p = r->catchup;
        if (!r->owner || h->stream >= p->nstreams || /* a relay without its rank has no weights */
            !loom_sync_stream_consumer(p, &p->streams[h->stream], r->rank))
                return;
        const loom_sync_stream *st = &p->streams[h->stream];
        const uint16_t *live;
        const uint64_t *ph;
        if (loom__rollout_snapshot_lock(r->owner, h->version, deadline, &live, &ph))
                return;
        uint64_t nb = loom_sync_stream_buckets(p, st), sent = 0;
        uint16_t *buf = malloc((size_t)(p->bucket_elems * 2));
        uint8_t *enc = malloc(loom_sync_enc_bound((size_t)p->bucket_elems));
        loom__mentry *man = malloc((st->count ? st->count : 1) * sizeof *man);
        int rc = buf && enc && man ? 0 : LOOM_ENOMEM;
        for (uint64_t k = 0; !rc && k < nb; k++) {
                uint64_t s0 = k * p->bucket_elems;
                uint64_t n = st->elems - s0 < p->bucket_elems ? st->elems - s0 : p->bucket_elems;
                snap sn = {live, buf, s0};
                loom__walk(loom__rollout_view(r->owner), p, st, s0, n, snap_run, &sn);
                loom_sync_frame f = {0};
                /* keyed: tagged while encoding, no CRC (auth.c) */
                loom__encode(NULL, buf, (size_t)n, LOOM_SYNC_ENC_DENSE, enc, &f, m, NULL);
                f.stream = h->stream, f.seq = (uint32_t)k, f.version = h->version, f.start = s0;
                rc = m->on ? loom__frame_send_tagged(fd, m, &f, enc, &sent)
                           : loom__frame_send(fd, &f, enc, &sent);
        }
        if (!rc) {
                for (size_t j = 0; j < st->count; j++) {
                        man[j].piece = p->order[st->first + j];
                        man[j].pad = 0;
                        man[j].hash = ph[man[j].piece];
                }
                loom_sync_frame f = {.type = LOOM_SYNC_FRAME_MANIFEST,
                                     .stream = h->stream,
                                     .seq = (uint32_t)nb,
                                     .version = h->version,
                                     .elems = st->count,
                                     .payload_len = st->count * sizeof *man};
                if (!m->on)
                        f.payload_crc = loom_sync_crc32c(0, man, (size_t)f.payload_len);
                loom__frame_send_mac(fd, m, &f, man, &sent);
        }
        loom__rollout_snapshot_unlock(r->owner);
        add_served(r, sent);
        free(buf);
        free(enc);
        free(man);
}

void loom__relay_serve(loom__relay *r, int fd)
{
        loom__hello h = {0};
        loom__mac m;
        loom_err e = {0};
        double deadline = r->deadline;
        int rc = loom__link_accept(fd, &h, r->key, &m, &e);
        /* keyed and unkeyed ranks, or a peer without the key: refused, and said why; a
         * refused push fails its stream at once (the transfer fails closed, not late) */
        if (rc == LOOM_EPROTO || rc == LOOM_ECORRUPT) {
                note_refusal(r, &e);
                if (h.kind == LOOM__HELLO_PUSH && h.stream < r->plan->nstreams &&
                    r->slots[h.stream])
                        fail_stream(r, h.stream);
        }
        if (!rc) {
                if (h.kind == LOOM__HELLO_PUSH)
                        serve_push(r, fd, &h, &m);
                else if (h.kind == LOOM__HELLO_PULL) {
                        if (r->owner) /* a rank's relay: its own sends go first */
                                loom__fast_link_thread();
                        serve_pull(r, fd, &h, deadline, &m);
                } else if (h.kind == LOOM__HELLO_SNAP)
                        serve_snap(r, fd, &h, deadline, &m);
        }
        close(fd);
}

static void *conn_main(void *arg)
{
        conn c = *(conn *)arg;
        free(arg);
        loom__relay_serve(c.r, c.fd);
        return NULL;
}

static void *accept_main(void *arg)
{
        loom__relay *r = arg;
        for (;;) {
                int fd = accept(r->lfd, NULL, NULL);
                if (fd < 0)
                        continue;
                conn *c = malloc(sizeof *c);
                if (!c || (c->r = r, c->fd = fd, loom__spawn_detached(conn_main, c))) {
                        free(c);
                        close(fd);
                }
        }
        return NULL;
}

int loom__relay_start(loom__relay **out, int lfd, const loom_sync_plan *plan,
                      const loom_sync_plan *catchup, loom__rollout *owner, uint32_t rank,
                      double deadline, const uint8_t *key, loom_err *e)
{
        loom__relay *r = calloc(1, sizeof *r);
        if (!r)
                return loom_err_set(e, LOOM_ENOMEM, "relay", "out of memory");
        /* From here on a relay with an accepting thread lives as long as its process: rank
         * processes end with _exit while connection threads may still be blocked in the
         * kernel. */
        r->lfd = lfd;
        r->rank = rank;
        r->deadline = deadline;
        r->key = key;
        r->plan = plan;
        r->catchup = catchup;
        r->owner = owner;
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&r->cv, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&r->mu, NULL);
        size_t ns = plan->nstreams ? plan->nstreams : 1;
        if (!(r->slots = calloc(ns, sizeof *r->slots)) ||
            !(r->failed = calloc(ns, sizeof *r->failed)) ||
            !(r->consumers = calloc(ns, sizeof *r->consumers)) ||
            !(r->pulls = calloc(ns, sizeof *r->pulls)))
                goto nomem;
        uint32_t nr = loom_sync_par_ranks(&plan->map->roll);
        for (size_t s = 0; s < plan->nstreams; s++) {
                const loom_sync_stream *st = &plan->streams[s];
                if (st->dst != rank)
                        continue;
                r->slots[s] = calloc(loom_sync_stream_buckets(plan, st) + 1, sizeof(loom__slot));
                if (!r->slots[s])
                        goto nomem;
                for (uint32_t k = 0; k < nr; k++)
                        r->consumers[s] += loom_sync_stream_consumer(plan, st, k);
        }
        if (lfd >= 0 && pthread_create(&r->accept_thread, NULL, accept_main, r))
                return loom_err_set(e, LOOM_EIO, "relay", "cannot start the relay thread");
        *out = r;
        return 0;
nomem:
        loom__relay_free(r);
        return loom_err_set(e, LOOM_ENOMEM, "relay", "out of memory");
}

void loom__relay_free(loom__relay *r)
{
        if (!r)
                return;
        for (size_t s = 0; r->slots && s < r->plan->nstreams; s++) {
                if (!r->slots[s])
                        continue;
                uint64_t nb = loom_sync_stream_buckets(r->plan, &r->plan->streams[s]);
                for (uint64_t k = 0; k <= nb; k++)
                        free(r->slots[s][k].payload);
                free(r->slots[s]);
        }
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        free(r->slots);
        free(r->failed);
        free(r->consumers);
        free(r->pulls);
        free(r);
}
