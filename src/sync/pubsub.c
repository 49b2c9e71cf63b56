/*
 * pubsub.c - a live model's weights from a trainer process to its rollout workers: the
 * publisher keeps the latest version and the sparse deltas of the last versions (each against
 * the one before), a thread serves pulls over TCP, and the puller applies what it gets only
 * after every checksum matched.
 *
 * Wire (all little-endian, after connect):
 *   puller -> request: magic "LSYN", nshards, have, want, elems, CRC32C of the shard sizes,
 *               flags, FNV-1a of the model id wanted or 0 (48 bytes; flag 1: a probe, answered
 *               with the manifest alone)
 *   publisher -> a MANIFEST frame: version, start = base version (LOOM_SYNC_NO_VERSION for a
 *               dense reply), elems = model elements, nnz = bucket frames that follow, payload
 *               = one additive hash per shard; or an END frame whose payload says why not.
 *             -> that many BUCKET frames: stream = shard, seq = bucket in the shard, start =
 *               first element within the shard, version = the version the frame brings the
 *               bucket to. A delta skips unchanged buckets; a dense reply covers every element.
 *               A puller several versions behind gets the chain of deltas from its version to
 *               the latest, oldest first (each frame XORs onto the one before), when the
 *               publisher still keeps them and they are smaller than a dense copy.
 * A refusal (other magic, shape or model id) is an END frame saying why.
 * With a sync key (loom_sync_pub_set_key), request flag 2 says a 16-byte nonce and a 32-byte
 * tag follow the request, and every frame of the reply is followed by an 8-byte tag (auth.c); a
 * request without a valid tag is refused with an (untagged) END frame of kind
 * LOOM__REFUSED_AUTH.
 * One connection serves one pull; each connection gets its own thread. The puller is pull.c.
 *
 * Limits, so that a crowd of idle or hostile connections cannot pin threads: at most
 * max_conns connections are served at once (one more is answered with an END frame "busy" and
 * closed at once), a request must arrive within idle_s of the connect, and a pull waits at
 * most wait_s for a version >= want before it is answered with an END frame saying so (the
 * puller bounds its own wait too, and backs off before it asks again: see docs/sync.md).
 *
 * Versions are reference counted: publish swaps in the new one while a pull keeps sending the
 * one it started with.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

/* How far back a delta chain reaches: at most this many versions, and at most twice the
 * model's dense size in all. */
#define CHAIN_VERSIONS 16

/* The delta that made `version` from `base`, and (older) the one before it: the chain. */
typedef struct pdelta {
        uint64_t version, base; /* base: the version the delta applies to, or NO_VERSION */
        uint8_t *frames;        /* packed frames (header + payload) of the changed buckets */
        size_t len;
        uint64_t nframes;
        struct pdelta *older; /* referenced; NULL past the kept history */
        int refs;
} pdelta;

typedef struct pver {
        uint64_t version;
        uint16_t *w;    /* every element */
        uint64_t *hash; /* per shard */
        pdelta *d;      /* its delta (referenced) */
        int refs;
} pver;

struct loom_sync_pub {
        char model[LOOM_SYNC_MODEL_MAX + 1]; /* "" for none */
        uint64_t model_hash;
        uint64_t *shard, *shard_off, elems, bucket;
        size_t nshards;
        int lfd;
        uint16_t port;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pver *cur;
        int stop, active; /* active: connection threads still running */
        /* With a sync key, pulls must prove it and frames are tagged (auth.c). The HMAC
         * state is keyed once, by loom_sync_pub_set_key; a pull copies it (under mu) and
         * does the rest of its work on the copy. */
        int keyed;
        struct hmac_sha256_ctx key_base;
        loom_sync_pub_limits lim;
        pthread_t accept_thread;
};

typedef struct conn {
        loom_sync_pub *p;
        int fd;
} conn;

static void pdelta_unref(pdelta *d)
{
        while (d && --d->refs == 0) {
                pdelta *older = d->older;
                free(d->frames);
                free(d);
                d = older;
        }
}

static void pver_unref(pver *v)
{
        if (v && --v->refs == 0) {
                free(v->w);
                free(v->hash);
                pdelta_unref(v->d);
                free(v);
        }
}

/* ---- publishing ------------------------------------------------------------------------ */

static uint64_t buckets_of(const loom_sync_pub *p)
{
        uint64_t n = 0;
        for (size_t s = 0; s < p->nshards; s++)
                n += (p->shard[s] + p->bucket - 1) / p->bucket;
        return n;
}

/* Bytes of a dense reply's bucket frames (the manifest not counted). */
static uint64_t dense_frames_bytes(const loom_sync_pub *p)
{
        return buckets_of(p) * LOOM_SYNC_FRAME_HDR + 2 * p->elems;
}

/* Fill v->w bucket by bucket from fill, hash each bucket into its shard's sum and encode the
 * changed ones against old (NULL: the first version, all of it) into v->d. */
static int encode_delta(loom_sync_pub *p, pver *v, const uint16_t *old, loom__fill_fn fill,
                        void *arg, loom_sync_pub_stats *st, loom_err *e)
{
        pdelta *d = v->d;
        size_t cap = 0;
        for (size_t s = 0; s < p->nshards; s++)
                for (uint64_t b = 0; b < p->shard[s]; b += p->bucket) {
                        uint64_t n = p->shard[s] - b < p->bucket ? p->shard[s] - b : p->bucket;
                        cap += LOOM_SYNC_FRAME_HDR + loom_sync_enc_bound((size_t)n);
                }
        d->frames = malloc(cap ? cap : 1);
        if (!d->frames)
                return loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");
        for (size_t s = 0; s < p->nshards; s++) {
                uint64_t off = p->shard_off[s];
                for (uint64_t b = 0, seq = 0; b < p->shard[s]; b += p->bucket, seq++) {
                        size_t n =
                            (size_t)(p->shard[s] - b < p->bucket ? p->shard[s] - b : p->bucket);
                        int rc = fill(arg, v->w, off + b + n, e);
                        if (rc)
                                return rc;
                        v->hash[s] += loom_sync_hash(v->w + off + b, n, off + b);
                        const uint16_t *o = old ? old + off + b : NULL;
                        if (o && !memcmp(o, v->w + off + b, 2 * n))
                                continue; /* unchanged: not sent */
                        loom_sync_frame f = {.stream = (uint32_t)s,
                                             .seq = (uint32_t)seq,
                                             .version = v->version,
                                             .start = b};
                        uint8_t *hdr = d->frames + d->len;
                        rc = loom_sync_encode(o, v->w + off + b, n, LOOM_SYNC_ENC_AUTO,
                                              hdr + LOOM_SYNC_FRAME_HDR, &f, e);
                        if (rc)
                                return rc;
                        loom_sync_frame_pack(&f, hdr);
                        d->len += LOOM_SYNC_FRAME_HDR + f.payload_len;
                        d->nframes++;
                        st->changed += f.enc == LOOM_SYNC_ENC_DENSE && o ? 0 : f.nnz;
                        if (f.enc == LOOM_SYNC_ENC_DENSE) {
                                if (!o)
                                        st->changed += n;
                                else
                                        for (size_t i = 0; i < n; i++)
                                                st->changed += o[i] != v->w[off + b + i];
                        }
                }
        }
        uint8_t *fit = realloc(d->frames, d->len ? d->len : 1); /* kept in the history */
        if (fit)
                d->frames = fit;
        return 0;
}

/* Cut the chain from d to CHAIN_VERSIONS deltas and `budget` bytes (under p->mu). */
static void trim_chain(pdelta *d, size_t budget)
{
        size_t bytes = 0;
        for (int depth = 1; d; depth++) {
                bytes += d->len;
                pdelta *older = d->older;
                if (older && (depth >= CHAIN_VERSIONS || bytes + older->len > budget)) {
                        d->older = NULL;
                        pdelta_unref(older);
                        return;
                }
                d = older;
        }
}

/* Host weights: each bucket copied as it is reached. */
typedef struct host_fill {
        const uint16_t *w;
        uint64_t done;
} host_fill;

static int fill_host(void *arg, uint16_t *w, uint64_t upto, loom_err *e)
{
        host_fill *h = arg;
        memcpy(w + h->done, h->w + h->done, 2 * (upto - h->done));
        h->done = upto;
        return 0;
}

int loom_sync_pub_publish(loom_sync_pub *p, uint64_t version, const uint16_t *w,
                          loom_sync_pub_stats *st, loom_err *e)
{
        host_fill h = {w, 0};
        return loom__pub_publish_from(p, version, fill_host, &h, st, e);
}

uint64_t loom__pub_elems(const loom_sync_pub *p)
{
        return p->elems;
}

int loom__pub_publish_from(loom_sync_pub *p, uint64_t version, loom__fill_fn fill, void *arg,
                           loom_sync_pub_stats *st, loom_err *e)
{
        loom_sync_pub_stats tmp;
        st = st ? st : &tmp;
        memset(st, 0, sizeof *st);
        double t0 = loom__now();
        pthread_mutex_lock(&p->mu);
        pver *old = p->cur;
        if (old)
                old->refs++;
        pthread_mutex_unlock(&p->mu);
        int rc = 0;
        pver *v = NULL;
        if (version == LOOM_SYNC_NO_VERSION || (old && version <= old->version)) {
                rc = loom_err_set(
                    e, LOOM_EINVAL, "version", "version %llu is not after the published %llu",
                    (unsigned long long)version, (unsigned long long)(old ? old->version : 0));
                goto out;
        }
        v = calloc(1, sizeof *v);
        if (!v || !(v->w = malloc(2 * p->elems + 2)) ||
            !(v->hash = calloc(p->nshards, sizeof *v->hash)) || !(v->d = calloc(1, sizeof *v->d))) {
                rc = loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");
                goto out;
        }
        v->refs = 1;
        v->version = version;
        v->d->refs = 1;
        v->d->version = version;
        v->d->base = old ? old->version : LOOM_SYNC_NO_VERSION;
        rc = encode_delta(p, v, old ? old->w : NULL, fill, arg, st, e);
        if (rc)
                goto out;
        uint64_t nb = buckets_of(p), manifest = LOOM_SYNC_FRAME_HDR + 8 * p->nshards;
        st->version = version;
        st->elems = p->elems;
        st->buckets = (uint32_t)nb;
        st->sent = (uint32_t)v->d->nframes;
        st->delta_bytes = manifest + v->d->len;
        st->dense_bytes = manifest + dense_frames_bytes(p);
        pthread_mutex_lock(&p->mu);
        pver *prev = p->cur;
        /* the chain: this delta, then the ones before it (not the first version's frames,
         * which are the whole model and no link of any chain) */
        if (prev && prev->d->base != LOOM_SYNC_NO_VERSION) {
                v->d->older = prev->d;
                prev->d->refs++;
                trim_chain(v->d, (size_t)(2 * st->dense_bytes));
        }
        p->cur = v;
        v = NULL;
        pver_unref(prev);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        st->encode_s = loom__now() - t0;
out:
        pthread_mutex_lock(&p->mu);
        pver_unref(old);
        pthread_mutex_unlock(&p->mu);
        if (v) {
                v->refs = 1;
                pver_unref(v);
        }
        return rc;
}

/* ---- serving --------------------------------------------------------------------------- */

static int send_end(int fd, loom__mac *m, uint32_t kind, const char *why)
{
        loom_sync_frame f = {
            .type = LOOM_SYNC_FRAME_END, .stream = kind, .payload_len = strlen(why)};
        f.payload_crc = loom_sync_crc32c(0, why, f.payload_len);
        return loom__frame_send_mac(fd, m, &f, why, NULL);
}

/* Has the peer gone away (EOF or error while we wait)? */
static int peer_gone(int fd)
{
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 0) <= 0)
                return 0;
        char c;
        return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

/* Wait (in short slices, watching the peer) for a version >= want; returns it referenced. */
static pver *wait_version(loom_sync_pub *p, int fd, uint64_t want, double deadline)
{
        pver *v = NULL;
        pthread_mutex_lock(&p->mu);
        while (!p->stop && (!p->cur || p->cur->version < want || want == LOOM_SYNC_NO_VERSION)) {
                if (want == LOOM_SYNC_NO_VERSION && p->cur)
                        break;
                double now = loom__now();
                if (now >= deadline || peer_gone(fd))
                        break;
                double until = now + 0.1 < deadline ? now + 0.1 : deadline;
                struct timespec ts = {.tv_sec = (time_t)until,
                                      .tv_nsec = (long)((until - (double)(time_t)until) * 1e9)};
                pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        }
        if (!p->stop && p->cur && (want == LOOM_SYNC_NO_VERSION || p->cur->version >= want)) {
                v = p->cur;
                v->refs++;
        }
        pthread_mutex_unlock(&p->mu);
        return v;
}

static int send_manifest(int fd, loom__mac *m, const loom_sync_pub *p, const pver *v, uint64_t base,
                         uint64_t nframes)
{
        uint8_t *buf = malloc(8 * p->nshards);
        if (!buf)
                return LOOM_ENOMEM;
        for (size_t s = 0; s < p->nshards; s++)
                loom__put64(buf + 8 * s, v->hash[s]);
        loom_sync_frame f = {.type = LOOM_SYNC_FRAME_MANIFEST,
                             .version = v->version,
                             .start = base,
                             .elems = p->elems,
                             .nnz = nframes,
                             .payload_len = 8 * p->nshards};
        f.payload_crc = loom_sync_crc32c(0, buf, f.payload_len);
        int rc = loom__frame_send_mac(fd, m, &f, buf, NULL);
        free(buf);
        return rc;
}

static int send_dense(int fd, loom__mac *m, const loom_sync_pub *p, const pver *v)
{
        int rc = send_manifest(fd, m, p, v, LOOM_SYNC_NO_VERSION, buckets_of(p));
        uint8_t *buf = malloc(loom_sync_enc_bound((size_t)p->bucket));
        if (!buf)
                return LOOM_ENOMEM;
        for (size_t s = 0; s < p->nshards && !rc; s++)
                for (uint64_t b = 0, seq = 0; b < p->shard[s] && !rc; b += p->bucket, seq++) {
                        size_t n =
                            (size_t)(p->shard[s] - b < p->bucket ? p->shard[s] - b : p->bucket);
                        loom_sync_frame f = {.stream = (uint32_t)s,
                                             .seq = (uint32_t)seq,
                                             .version = v->version,
                                             .start = b};
                        loom_err e;
                        rc = loom__encode(NULL, v->w + p->shard_off[s] + b, n, LOOM_SYNC_ENC_DENSE,
                                          buf, &f, m, &e);
                        if (!rc)
                                rc = m->on ? loom__frame_send_tagged(fd, m, &f, buf, NULL)
                                           : loom__frame_send(fd, &f, buf, NULL);
                }
        free(buf);
        return rc;
}

/* The deltas from `have` to v, newest first, referenced, when the publisher still keeps them
 * all and they are smaller than a dense copy; else 0. */
static int chain_from(loom_sync_pub *p, const pver *v, uint64_t have, pdelta **out)
{
        size_t bytes = 0, dense = (size_t)dense_frames_bytes(p);
        int n = 0;
        pthread_mutex_lock(&p->mu);
        for (pdelta *d = v->d; d && n < CHAIN_VERSIONS && d->version > have; d = d->older) {
                out[n++] = d;
                bytes += d->len;
                if (d->base == have)
                        break;
        }
        int ok = n > 0 && out[n - 1]->base == have && (n == 1 || bytes < dense);
        for (int i = 0; ok && i < n; i++)
                out[i]->refs++;
        pthread_mutex_unlock(&p->mu);
        return ok ? n : 0;
}

/* Set up m for this connection: off for an unkeyed publisher; otherwise the request must
 * carry a nonce and the tag of the publisher's key. Non-zero when the pull was refused. */
static int authenticate(loom_sync_pub *p, int fd, const uint8_t *req, uint32_t flags, loom__mac *m)
{
        uint8_t extra[sizeof m->nonce + LOOM__REQ_TAG_LEN], tag[LOOM__REQ_TAG_LEN];
        if ((flags & LOOM__PULL_AUTH) && loom__read_all(fd, extra, sizeof extra))
                return -1;
        loom__mac_init(m, NULL, NULL);
        pthread_mutex_lock(&p->mu);
        int keyed = m->on = p->keyed;
        if (keyed)
                m->base = p->key_base; /* keyed once, by loom_sync_pub_set_key */
        pthread_mutex_unlock(&p->mu);
        const char *why = NULL;
        if (!keyed && (flags & LOOM__PULL_AUTH))
                why = "this publisher has no sync key: it cannot authenticate its frames";
        else if (keyed && !(flags & LOOM__PULL_AUTH))
                why = "this publisher serves authenticated pulls only: give the job's sync key";
        else if (keyed) {
                memcpy(m->nonce, extra, sizeof m->nonce);
                loom__mac_request(m, req, LOOM__PULL_REQ_LEN, tag);
                if (!loom__mac_equal(tag, extra + sizeof m->nonce, sizeof tag))
                        why = "the pull's tag is not this job's sync key";
                else
                        loom__mac_session(m);
        }
        if (why)
                send_end(fd, NULL, LOOM__REFUSED_AUTH, why);
        return why != NULL;
}

static struct timeval timeval_of(double s)
{
        return (struct timeval){.tv_sec = (time_t)s,
                                .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
}

void loom__pub_serve(loom_sync_pub *p, int fd)
{
        uint8_t req[LOOM__PULL_REQ_LEN];
        uint32_t magic, nshards;
        /* loom_sync_pub_set_limits may change p->lim from another thread at any time: this
         * connection keeps the limits in force when it started */
        pthread_mutex_lock(&p->mu);
        loom_sync_pub_limits lim = p->lim;
        pthread_mutex_unlock(&p->mu);
        struct timeval tv = timeval_of(lim.idle_s);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        /* the part every version of the request has, then the model id when it is this one */
        if (loom__read_all(fd, req, LOOM__PULL_REQ_OLD_LEN))
                return;
        memcpy(&magic, req, 4);
        if (magic != LOOM__PULL_MAGIC) {
                send_end(fd, NULL, LOOM__REFUSED,
                         magic == LOOM__PULL_MAGIC_OLD
                             ? "the puller speaks an older protocol (no model ids): upgrade it"
                             : "not a loom weight pull");
                return;
        }
        if (loom__read_all(fd, req + LOOM__PULL_REQ_OLD_LEN,
                           LOOM__PULL_REQ_LEN - LOOM__PULL_REQ_OLD_LEN))
                return;
        memcpy(&nshards, req + 4, 4);
        uint64_t have = loom__get64(req + 8), want = loom__get64(req + 16),
                 elems = loom__get64(req + 24);
        uint32_t shape, flags;
        memcpy(&shape, req + 32, 4);
        memcpy(&flags, req + 36, 4);
        uint64_t model = loom__get64(req + 40);
        loom__mac mac, *m = &mac;
        if (authenticate(p, fd, req, flags, m))
                return;
        if (model && model != p->model_hash) {
                char why[LOOM_SYNC_MODEL_MAX + 64];
                snprintf(why, sizeof why, "this publisher serves %s%s%s",
                         p->model[0] ? "model '" : "no model id", p->model, p->model[0] ? "'" : "");
                send_end(fd, m, LOOM__REFUSED_MODEL, why);
                return;
        }
        if (nshards != p->nshards || elems != p->elems ||
            shape != loom_sync_crc32c(0, p->shard, p->nshards * sizeof *p->shard)) {
                char why[160];
                snprintf(why, sizeof why,
                         "shape mismatch: the publisher has %zu shards / %llu elements, the "
                         "puller %u / %llu (or other shard sizes)",
                         p->nshards, (unsigned long long)p->elems, nshards,
                         (unsigned long long)elems);
                send_end(fd, m, LOOM__REFUSED, why);
                return;
        }
        /* The puller bounds its own wait; this bound frees the thread of one that forgot. */
        pver *v = wait_version(p, fd, want, loom__now() + lim.wait_s);
        if (!v) {
                char why[96];
                snprintf(why, sizeof why, "no version >= %llu within %.0f s",
                         (unsigned long long)want, lim.wait_s);
                send_end(fd, m, LOOM__REFUSED_WAIT, why);
                return;
        }
        pdelta *chain[CHAIN_VERSIONS];
        int n = 0;
        if (have == v->version || (flags & LOOM_SYNC_PULL_PROBE))
                send_manifest(fd, m, p, v, v->version, 0); /* no frames: nothing to apply */
        else if (have != LOOM_SYNC_NO_VERSION && (n = chain_from(p, v, have, chain)) > 0) {
                uint64_t frames = 0;
                for (int i = 0; i < n; i++)
                        frames += chain[i]->nframes;
                int rc = send_manifest(fd, m, p, v, have, frames);
                for (int i = n - 1; i >= 0 && !rc; i--) /* oldest first */
                        rc = loom__frames_send_mac(fd, m, chain[i]->frames, chain[i]->len);
                pthread_mutex_lock(&p->mu);
                for (int i = 0; i < n; i++)
                        pdelta_unref(chain[i]);
                pthread_mutex_unlock(&p->mu);
        } else
                send_dense(fd, m, p, v);
        pthread_mutex_lock(&p->mu);
        pver_unref(v);
        pthread_mutex_unlock(&p->mu);
}

static void *conn_main(void *arg)
{
        conn *c = arg;
        loom_sync_pub *p = c->p;
        loom__pub_serve(p, c->fd);
        close(c->fd);
        free(c);
        pthread_mutex_lock(&p->mu);
        p->active--;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        return NULL;
}

static void *accept_main(void *arg)
{
        loom_sync_pub *p = arg;
        for (;;) {
                pthread_mutex_lock(&p->mu);
                int stop = p->stop;
                pthread_mutex_unlock(&p->mu);
                if (stop)
                        break;
                struct pollfd pf = {.fd = p->lfd, .events = POLLIN};
                if (poll(&pf, 1, 100) <= 0)
                        continue;
                int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0) {
                        /* out of descriptors: do not spin on a listening socket still ready */
                        if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
                                usleep(10000);
                        continue;
                }
                pthread_mutex_lock(&p->mu);
                int cap = p->lim.max_conns, busy = p->active >= cap;
                if (!busy)
                        p->active++;
                pthread_mutex_unlock(&p->mu);
                if (busy) {
                        /* the END goes into an empty socket buffer: this does not block */
                        char why[64];
                        snprintf(why, sizeof why, "busy: %d pulls in flight", cap);
                        send_end(fd, NULL, LOOM__REFUSED_BUSY, why);
                        close(fd);
                        continue;
                }
                conn *c = malloc(sizeof *c);
                if (c)
                        *c = (conn){p, fd};
                if (!c || loom__spawn_detached(conn_main, c)) {
                        free(c);
                        close(fd);
                        pthread_mutex_lock(&p->mu);
                        p->active--;
                        pthread_mutex_unlock(&p->mu);
                }
        }
        return NULL;
}

static int check_shards(const uint64_t *shard_elems, size_t nshards, uint64_t *elems, loom_err *e)
{
        if (!shard_elems || nshards == 0 || nshards > UINT32_MAX)
                return loom_err_set(e, LOOM_EINVAL, "shards", "need at least one shard");
        *elems = 0;
        for (size_t s = 0; s < nshards; s++) {
                if (shard_elems[s] == 0)
                        return loom_err_set(e, LOOM_EINVAL, "shards", "shard %zu is empty", s);
                *elems += shard_elems[s];
        }
        return 0;
}

int loom_sync_pub_new(const char *model, const uint64_t *shard_elems, size_t nshards,
                      uint64_t bucket_elems, const char *ip, uint16_t port, loom_sync_pub **out,
                      loom_err *e)
{
        *out = NULL;
        uint64_t elems = 0;
        int rc = loom__model_check(model, e);
        if (!rc)
                rc = check_shards(shard_elems, nshards, &elems, e);
        if (rc)
                return rc;
        if (bucket_elems == 0 || bucket_elems > LOOM_SYNC_FRAME_MAX_PAYLOAD / 4)
                return loom_err_set(e, LOOM_EINVAL, "bucket_elems", "must be in [1, 2^30]");
        struct in_addr a;
        if (!ip || inet_pton(AF_INET, ip, &a) != 1)
                return loom_err_set(e, LOOM_EINVAL, "ip", "not an IPv4 address: %s",
                                    ip ? ip : "(null)");
        loom_sync_pub *p = calloc(1, sizeof *p);
        if (!p || !(p->shard = malloc(nshards * sizeof *p->shard)) ||
            !(p->shard_off = malloc(nshards * sizeof *p->shard_off))) {
                if (p)
                        free(p->shard);
                free(p);
                return loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");
        }
        if (model)
                strcpy(p->model, model); /* length checked above */
        p->model_hash = loom__model_hash(model);
        p->nshards = nshards;
        p->elems = elems;
        p->bucket = bucket_elems;
        for (size_t s = 0, off = 0; s < nshards; off += shard_elems[s], s++) {
                p->shard[s] = shard_elems[s];
                p->shard_off[s] = off;
        }
        p->port = port;
        loom_sync_pub_limits_default(&p->lim);
        rc = loom__listen(ntohl(a.s_addr), &p->port, &p->lfd, e);
        if (rc) {
                free(p->shard);
                free(p->shard_off);
                free(p);
                return rc;
        }
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&p->cv, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&p->mu, NULL);
        if (pthread_create(&p->accept_thread, NULL, accept_main, p)) {
                close(p->lfd);
                pthread_cond_destroy(&p->cv);
                pthread_mutex_destroy(&p->mu);
                free(p->shard);
                free(p->shard_off);
                free(p);
                return loom_err_set(e, LOOM_EIO, NULL, "pthread_create failed");
        }
        *out = p;
        return 0;
}

int loom_sync_pub_set_key(loom_sync_pub *p, const uint8_t *key, loom_err *e)
{
        loom__mac m; /* keyed here, outside the lock: pulls only copy the keyed state */
        int rc = loom__mac_init(&m, key, e);
        if (rc)
                return rc;
        pthread_mutex_lock(&p->mu);
        p->keyed = m.on;
        p->key_base = m.base;
        pthread_mutex_unlock(&p->mu);
        return 0;
}

void loom_sync_pub_limits_default(loom_sync_pub_limits *l)
{
        *l = (loom_sync_pub_limits){.max_conns = 256, .idle_s = 10, .wait_s = 300};
}

int loom_sync_pub_set_limits(loom_sync_pub *p, const loom_sync_pub_limits *l, loom_err *e)
{
        if (l->max_conns < 1 || l->max_conns > 65536)
                return loom_err_set(e, LOOM_EINVAL, "max_conns", "must be in [1, 65536]");
        if (!(l->idle_s >= 0.01 && l->idle_s <= 3600))
                return loom_err_set(e, LOOM_EINVAL, "idle_s", "must be in [0.01, 3600] s");
        if (!(l->wait_s >= 0 && l->wait_s <= 86400))
                return loom_err_set(e, LOOM_EINVAL, "wait_s", "must be in [0, 86400] s");
        pthread_mutex_lock(&p->mu);
        p->lim = *l;
        pthread_mutex_unlock(&p->mu);
        return 0;
}

uint16_t loom_sync_pub_port(const loom_sync_pub *p)
{
        return p->port;
}

void loom_sync_pub_free(loom_sync_pub *p)
{
        if (!p)
                return;
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->accept_thread, NULL);
        close(p->lfd);
        pthread_mutex_lock(&p->mu);
        while (p->active > 0)
                pthread_cond_wait(&p->cv, &p->mu);
        pver_unref(p->cur);
        pthread_mutex_unlock(&p->mu);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p->shard);
        free(p->shard_off);
        free(p);
}
