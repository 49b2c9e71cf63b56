/*
 * pull.c - the rollout worker's side of pubsub.c: ask the trainer's publisher for the latest
 * version, apply its sparse delta, chain of deltas or dense copy to a scratch copy of the
 * weights, check every
 * frame's CRC, the coverage of a dense reply and each shard's additive hash against the
 * manifest, and only then overwrite the caller's weights. With a sync key, every frame's tag
 * too (auth.c), before the frame is looked at.
 *
 * Into GPU memory (cuda_sync.c) the scratch copy is the same, but each applied bucket is also
 * sent H2D at once (so the copy overlaps the receive of the next one), and a delta's base is
 * read from the device chunk by chunk ahead of the frames that need it; see sync.h for what a
 * failure then leaves.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

typedef struct pull {
        const char *model;
        const uint64_t *shard;
        uint64_t *off;
        size_t nshards;
        uint64_t elems;
        uint16_t *scratch;
        uint64_t *covered;         /* per shard, dense replies only */
        uint64_t at;               /* a delta chain: the version of the last frame applied */
        loom__mac mac;             /* off without a key */
        loom__cudev *dev;          /* the weights in GPU memory; NULL: host memory */
        loom_sync_cuda_stats *cs;  /* stage times; NULL: not kept */
        int fetching;              /* a delta into GPU memory: its base is read as frames come */
        uint16_t *base;            /* ... into here and copied to scratch; NULL: straight into
                                    * scratch (kept checksums: no recount needs the base) */
        uint64_t based;            /* elements of the base in scratch */
        int scratch_given;         /* scratch is the caller's (loom_sync_cuda_opts.scratch) */
        const uint64_t *have_hash; /* GPU: the checksums of the version held, kept by the
                                    * caller; NULL: unknown */
        uint64_t *hsum;            /* incremental check: per shard, have_hash plus the change
                                    * each applied element made to it; NULL: hash it all */
        uint64_t *cs_hash;         /* on success: the held version's checksums; NULL: not kept */
} pull;

/* An applied sparse frame's elements: at[i] is the new value, new ^ x the old one. */
typedef struct hstep {
        const uint16_t *at;
        uint64_t g0, sum;
} hstep;

static void hash_step(uint64_t i, uint16_t x, void *arg)
{
        hstep *h = arg;
        uint16_t nw = h->at[i];
        h->sum += loom_sync_hash1(nw, h->g0 + i) - loom_sync_hash1((uint16_t)(nw ^ x), h->g0 + i);
}

/* A delta into GPU memory: scratch[0..upto) (at least) holds the device's weights. The read
 * runs ahead in chunks, so it overlaps the receive of the frames before upto. */
static int fetch_base(pull *p, uint64_t upto, loom_err *e)
{
        if (!p->fetching || upto <= p->based)
                return 0;
        int rc = loom__cudev_read(p->dev, p->base ? p->base : p->scratch, upto, e);
        uint64_t got = loom__cudev_fetched(p->dev);
        if (p->base)
                memcpy(p->scratch + p->based, p->base + p->based, 2 * (got - p->based));
        p->based = got;
        return rc;
}

static int recv_manifest(int fd, pull *p, loom_sync_frame *m, uint64_t **hash, uint64_t *bytes,
                         loom_err *e)
{
        uint8_t *pl = NULL;
        int rc = loom__frame_recv(fd, m, &pl, 8 * p->nshards + 4096, bytes, e);
        if (!rc && p->mac.on && m->type == LOOM_SYNC_FRAME_END && m->stream == LOOM__REFUSED_AUTH) {
                /* refused before any key was agreed: untagged, and it changes nothing */
                rc = loom_err_set(e, LOOM_EPROTO, "sync_key", "%.*s", (int)m->payload_len,
                                  pl ? (const char *)pl : "refused");
                free(pl);
                return rc;
        }
        if (!rc)
                rc = loom__frame_check_mac(fd, &p->mac, m, &pl, bytes, e);
        if (rc)
                return rc;
        if (m->payload_len && loom_sync_crc32c(0, pl, m->payload_len) != m->payload_crc) {
                free(pl);
                return loom_err_set(e, LOOM_ECORRUPT, "manifest", "payload checksum mismatch");
        }
        if (m->type == LOOM_SYNC_FRAME_END) {
                /* A publisher of another model (e.g. one that took over a dead trainer's port)
                 * is "no such model here", which a caller may retry elsewhere. */
                const char *why = pl ? (const char *)pl : "refused";
                int len = (int)m->payload_len;
                /* busy and "no version in time" are worth asking again (after a pause) */
                rc = m->stream == LOOM__REFUSED_MODEL
                         ? loom_err_set(e, LOOM_ENOENT, "model", "want '%s', but %.*s",
                                        p->model ? p->model : "", len, why)
                     : m->stream == LOOM__REFUSED_BUSY
                         ? loom_err_set(e, LOOM_EIO, "publisher", "%.*s", len, why)
                     : m->stream == LOOM__REFUSED_WAIT
                         ? loom_err_set(e, LOOM_ETIMEDOUT, "want", "%.*s", len, why)
                         : loom_err_set(e, LOOM_EPROTO, "publisher", "%.*s", len, why);
                free(pl);
                return rc;
        }
        if (m->type != LOOM_SYNC_FRAME_MANIFEST || m->payload_len != 8 * p->nshards ||
            m->elems != p->elems) {
                free(pl);
                return loom_err_set(e, LOOM_EPROTO, "manifest", "unexpected first frame");
        }
        *hash = (uint64_t *)(void *)pl; /* 8-byte entries, malloc'd so aligned */
        return 0;
}

static int apply_frame(int fd, pull *p, const loom_sync_frame *m, int dense, uint64_t *bytes,
                       uint64_t *changed, loom_err *e)
{
        loom_sync_frame f;
        uint8_t *pl = NULL;
        double t0 = loom__now();
        int rc = loom__frame_recv_mac(fd, &p->mac, &f, &pl, LOOM_SYNC_FRAME_MAX_PAYLOAD, bytes, e);
        double t1 = loom__now();
        if (p->cs)
                p->cs->recv_s += t1 - t0;
        if (rc)
                return rc;
        /* a dense reply and a single delta are all of the manifest's version; a chain's frames
         * go from just after the base to it, oldest first */
        int in_order = dense
                           ? f.version == m->version
                           : f.version > m->start && f.version <= m->version && f.version >= p->at;
        if (f.type != LOOM_SYNC_FRAME_BUCKET || !in_order || f.stream >= p->nshards ||
            f.elems == 0 || f.start > p->shard[f.stream] ||
            f.elems > p->shard[f.stream] - f.start || (dense && f.enc != LOOM_SYNC_ENC_DENSE)) {
                free(pl);
                return loom_err_set(e, LOOM_EPROTO, "frame", "bucket outside the model");
        }
        p->at = f.version;
        uint16_t *at = p->scratch + p->off[f.stream] + f.start;
        size_t n = (size_t)f.elems;
        rc = fetch_base(p, p->off[f.stream] + f.start + n, e);
        if (rc) {
                free(pl);
                return rc;
        }
        t1 = loom__now(); /* the base read counts as D2H, not decode */
        uint16_t *before = NULL;
        if (f.enc == LOOM_SYNC_ENC_DENSE && !dense && (before = malloc(2 * n)))
                memcpy(before, at, 2 * n);
        if (!before && p->hsum && f.enc == LOOM_SYNC_ENC_DENSE) {
                free(pl);
                return loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");
        }
        rc = loom__decode(&f, pl, at, at, n, !p->mac.on, e); /* keyed: the tag checked it */
        if (!rc && p->hsum) { /* the shard's checksum moves by what each element changed */
                uint64_t g0 = p->off[f.stream] + f.start;
                hstep h = {at, g0, 0};
                if (before)
                        for (size_t i = 0; i < n; i++)
                                h.sum += loom_sync_hash1(at[i], g0 + i) -
                                         loom_sync_hash1(before[i], g0 + i);
                else
                        loom_sync_payload_walk(&f, pl, hash_step, &h);
                p->hsum[f.stream] += h.sum;
        }
        if (!rc && dense)
                p->covered[f.stream] += n;
        if (!rc)
                *changed += f.enc != LOOM_SYNC_ENC_DENSE ? f.nnz : 0;
        if (!rc && before)
                for (size_t i = 0; i < n; i++)
                        *changed += before[i] != at[i];
        else if (!rc && f.enc == LOOM_SYNC_ENC_DENSE && dense)
                *changed += n;
        free(before);
        free(pl);
        if (p->cs)
                p->cs->decode_s += loom__now() - t1;
        if (!rc && p->dev) /* checked and applied: on its way to the device */
                rc = loom__cudev_write(p->dev, at, p->off[f.stream] + f.start, n, e);
        return rc;
}

static int verify(const pull *p, const uint64_t *hash, int dense, loom_err *e)
{
        for (size_t s = 0; s < p->nshards; s++) {
                if (dense && p->covered[s] != p->shard[s])
                        return loom_err_set(e, LOOM_EPROTO, "frame",
                                            "dense reply left shard %zu incomplete", s);
                uint64_t h = p->hsum ? p->hsum[s]
                                     : loom_sync_hash(p->scratch + p->off[s], (size_t)p->shard[s],
                                                      p->off[s]);
                if (h != hash[s])
                        return loom_err_set(e, LOOM_ECORRUPT, "checksum",
                                            "shard %zu does not match the publisher's checksum", s);
        }
        return 0;
}

/* Send the request and receive the manifest. */
static int request(int fd, pull *p, uint64_t have, uint64_t want, uint32_t flags,
                   loom_sync_frame *m, uint64_t **hash, uint64_t *bytes, loom_err *e)
{
        uint8_t req[LOOM__PULL_REQ_LEN] = {0};
        uint32_t magic = LOOM__PULL_MAGIC, ns = (uint32_t)p->nshards;
        uint64_t model = loom__model_hash(p->model);
        uint32_t shape = loom_sync_crc32c(0, p->shard, p->nshards * sizeof *p->shard);
        memcpy(req, &magic, 4);
        memcpy(req + 4, &ns, 4);
        memcpy(req + 8, &have, 8);
        memcpy(req + 16, &want, 8);
        memcpy(req + 24, &p->elems, 8);
        memcpy(req + 32, &shape, 4);
        memcpy(req + 36, &flags, 4);
        memcpy(req + 40, &model, 8);
        uint8_t auth[sizeof p->mac.nonce + LOOM__REQ_TAG_LEN];
        if (p->mac.on) {
                flags |= LOOM__PULL_AUTH;
                memcpy(req + 36, &flags, 4);
                int rc = loom__mac_nonce(&p->mac, e);
                if (rc)
                        return rc;
                memcpy(auth, p->mac.nonce, sizeof p->mac.nonce);
                loom__mac_request(&p->mac, req, sizeof req, auth + sizeof p->mac.nonce);
                loom__mac_session(&p->mac);
        }
        if (loom__write_all(fd, req, sizeof req) ||
            (p->mac.on && loom__write_all(fd, auth, sizeof auth)))
                return loom_err_set(e, LOOM_EIO, "publisher",
                                    "connection lost sending the request");
        int rc = recv_manifest(fd, p, m, hash, bytes, e);
        if (rc == LOOM_EIO && strcmp(e->field, "publisher")) /* lost, not answered "busy" */
                return loom_err_set(e, LOOM_ETIMEDOUT, "want", "no version >= %llu in time",
                                    (unsigned long long)want);
        return rc;
}

static int exchange(int fd, pull *p, uint16_t *w, uint64_t have, uint64_t want,
                    loom_sync_pull_stats *st, loom_err *e)
{
        double t0 = loom__now();
        loom_sync_frame m;
        uint64_t *hash = NULL;
        int rc = request(fd, p, have, want, 0, &m, &hash, &st->bytes, e);
        if (rc)
                return rc;
        st->wait_s = loom__now() - t0;
        int dense = m.start == LOOM_SYNC_NO_VERSION;
        if (!dense && m.start != have)
                rc = loom_err_set(e, LOOM_EPROTO, "manifest", "delta against a version we lack");
        if (!rc && dense && m.nnz == 0)
                rc = loom_err_set(e, LOOM_EPROTO, "manifest", "empty dense reply");
        if (!rc && !dense && p->dev) { /* the base is read from the device as frames come */
                p->fetching = 1;
                if (p->have_hash) { /* checked incrementally: see sync.h */
                        if (!(p->hsum = malloc(p->nshards * sizeof *p->hsum)))
                                rc = loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");
                        else
                                memcpy(p->hsum, p->have_hash, p->nshards * sizeof *p->hsum);
                } else if (!(p->base = malloc(2 * p->elems + 2))) {
                        rc = loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");
                }
                w = p->base;
        }
        if (!rc) {
                if (dense)
                        memset(p->scratch, 0, 2 * p->elems);
                else if (!p->dev)
                        memcpy(p->scratch, w, 2 * p->elems);
        }
        p->at = 0;
        bool chain = false;
        for (uint64_t i = 0; i < m.nnz && !rc; i++) {
                rc = apply_frame(fd, p, &m, dense, &st->bytes, &st->changed, e);
                chain |= !dense && p->at != m.version;
        }
        if (!rc && !p->hsum)
                rc = fetch_base(p, p->elems, e); /* the rest, for the checksums */
        if (!rc && p->dev)
                rc = loom__cudev_finish(p->dev, e);
        if (!rc)
                rc = verify(p, hash, dense, e);
        if (!rc && chain && w) { /* an element may change in several links: count it once
                                  * (kept checksums: no base is kept, each link counts) */
                st->changed = 0;
                for (uint64_t i = 0; i < p->elems; i++)
                        st->changed += w[i] != p->scratch[i];
        }
        if (!rc) {
                if (!p->dev)
                        memcpy(w, p->scratch, 2 * p->elems);
                st->version = m.version;
                st->base = dense ? LOOM_SYNC_NO_VERSION : m.start;
        } else if (p->dev && loom__cudev_wrote(p->dev)) {
                loom__cudev_finish(p->dev, NULL); /* nothing in flight once we return */
                st->version = LOOM_SYNC_NO_VERSION;
                size_t len = strlen(e->msg);
                snprintf(e->msg + len, sizeof e->msg - len,
                         " (the device weights were partly overwritten: they hold no version; "
                         "the next pull is dense)");
        }
        if (!rc && p->cs_hash) /* the checksums of the version now held, for the next pull */
                memcpy(p->cs_hash, hash, p->nshards * sizeof *hash);
        free(p->base);
        p->base = NULL;
        free(p->hsum);
        p->hsum = NULL;
        free(hash);
        return rc;
}

/* Connect with the remaining time as the receive timeout. */
static int open_conn(const char *ip, uint16_t port, double timeout_s, double t0, int *fd,
                     loom_err *e)
{
        int rc = loom__connect(ip, port, timeout_s, fd, e);
        if (rc)
                return rc;
        double left = timeout_s - (loom__now() - t0);
        left = left > 0.05 ? left : 0.05;
        struct timeval tv = {.tv_sec = (time_t)left,
                             .tv_usec = (suseconds_t)((left - (double)(time_t)left) * 1e6)};
        setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        return 0;
}

/* The arguments both calls take, checked, into p (model, shards, elements). */
static int pull_args(const uint8_t *key, const char *model, const uint64_t *shard_elems,
                     size_t nshards, double timeout_s, pull *p, loom_err *e)
{
        if (!shard_elems || nshards == 0 || nshards > UINT32_MAX)
                return loom_err_set(e, LOOM_EINVAL, "shards", "need at least one shard");
        if (!(timeout_s > 0))
                return loom_err_set(e, LOOM_EINVAL, "timeout_s", "must be > 0");
        int rc = loom__model_check(model, e);
        if (rc)
                return rc;
        *p = (pull){.model = model, .shard = shard_elems, .nshards = nshards};
        loom__mac_init(&p->mac, key, e);
        for (size_t s = 0; s < nshards; s++)
                p->elems += shard_elems[s];
        return 0;
}

int loom_sync_pull_latest(const char *model, const char *ip, uint16_t port,
                          const uint64_t *shard_elems, size_t nshards, uint64_t want,
                          double timeout_s, uint64_t *version, loom_err *e)
{
        return loom_sync_pull_latest_keyed(NULL, model, ip, port, shard_elems, nshards, want,
                                           timeout_s, version, e);
}

int loom_sync_pull_latest_keyed(const uint8_t *key, const char *model, const char *ip,
                                uint16_t port, const uint64_t *shard_elems, size_t nshards,
                                uint64_t want, double timeout_s, uint64_t *version, loom_err *e)
{
        pull p;
        int rc = pull_args(key, model, shard_elems, nshards, timeout_s, &p, e);
        if (rc)
                return rc;
        int fd = -1;
        uint64_t bytes = 0, *hash = NULL;
        loom_sync_frame m;
        rc = open_conn(ip, port, timeout_s, loom__now(), &fd, e);
        if (!rc)
                rc = request(fd, &p, LOOM_SYNC_NO_VERSION, want, LOOM_SYNC_PULL_PROBE, &m, &hash,
                             &bytes, e);
        if (!rc && m.nnz != 0)
                rc = loom_err_set(e, LOOM_EPROTO, "manifest", "a probe got weights");
        if (!rc)
                *version = m.version;
        free(hash);
        if (fd >= 0)
                close(fd);
        return rc;
}

/* One pull over a connected fd, with the arguments pull_args checked into p. */
static int pull_on(int fd, pull *p, uint16_t *w, uint64_t have, uint64_t want,
                   loom_sync_pull_stats *st, loom_err *e)
{
        int rc = 0;
        p->off = malloc(p->nshards * sizeof *p->off);
        if (!p->scratch_given)
                p->scratch = malloc(2 * p->elems + 2);
        p->covered = calloc(p->nshards, sizeof *p->covered);
        if (!p->off || !p->scratch || !p->covered)
                rc = loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");
        uint64_t before = 0; /* elements of the shards before */
        for (size_t s = 0; !rc && s < p->nshards; before += p->shard[s++])
                p->off[s] = before;
        if (!rc)
                rc = exchange(fd, p, w, have, want, st, e);
        if (!p->scratch_given)
                free(p->scratch);
        free(p->covered);
        free(p->off);
        return rc;
}

int loom__pull_fd(int fd, const char *model, const uint64_t *shard_elems, size_t nshards,
                  uint16_t *w, uint64_t have, uint64_t want, loom_sync_pull_stats *st, loom_err *e)
{
        pull p;
        int rc = pull_args(NULL, model, shard_elems, nshards, 1, &p, e);
        return rc ? rc : pull_on(fd, &p, w, have, want, st, e);
}

int loom_sync_pull(const char *model, const char *ip, uint16_t port, const uint64_t *shard_elems,
                   size_t nshards, uint16_t *w, uint64_t have, uint64_t want, double timeout_s,
                   loom_sync_pull_stats *st, loom_err *e)
{
        return loom_sync_pull_keyed(NULL, model, ip, port, shard_elems, nshards, w, have, want,
                                    timeout_s, st, e);
}

int loom_sync_pull_keyed(const uint8_t *key, const char *model, const char *ip, uint16_t port,
                         const uint64_t *shard_elems, size_t nshards, uint16_t *w, uint64_t have,
                         uint64_t want, double timeout_s, loom_sync_pull_stats *st, loom_err *e)
{
        return loom__pull_ex(key, model, ip, port, shard_elems, nshards, w, NULL, NULL, have, want,
                             timeout_s, st, NULL, e);
}

int loom__pull_ex(const uint8_t *key, const char *model, const char *ip, uint16_t port,
                  const uint64_t *shard_elems, size_t nshards, uint16_t *w, loom__cudev *dev,
                  const loom_sync_cuda_opts *o, uint64_t have, uint64_t want, double timeout_s,
                  loom_sync_pull_stats *st, loom_sync_cuda_stats *cs, loom_err *e)
{
        loom_sync_pull_stats tmp;
        st = st ? st : &tmp;
        memset(st, 0, sizeof *st);
        st->version = have;
        pull p; /* the arguments are checked before anything is connected */
        int rc = pull_args(key, model, shard_elems, nshards, timeout_s, &p, e);
        if (rc)
                return rc;
        p.dev = dev;
        p.cs = cs;
        if (dev && o) {
                p.have_hash = have != LOOM_SYNC_NO_VERSION ? o->have_hash : NULL;
                p.cs_hash = o->new_hash;
                p.scratch = o->scratch;
                p.scratch_given = o->scratch != NULL;
        }
        double t0 = loom__now();
        int fd = -1;
        rc = open_conn(ip, port, timeout_s, t0, &fd, e);
        if (!rc)
                rc = pull_on(fd, &p, w, have, want, st, e);
        if (fd >= 0)
                close(fd);
        st->seconds = loom__now() - t0;
        return rc;
}
