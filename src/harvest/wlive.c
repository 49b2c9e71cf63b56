/*
 * wlive.c - a live node's rollout weights, kept current through src/sync's publish / pull.
 *
 * A background thread asks the trainer's publisher (pubsub.c) for its latest version with a
 * probe (a manifest, no weights) that waits up to poll_s for a newer one, so a new version is
 * seen as soon as it is published. When the node is behind and pulls are not held, it pulls:
 * a sparse delta when it holds the version just before the latest, a dense copy otherwise (a
 * node that missed several versions, or holds nothing). loom_sync_pull checks every frame's
 * CRC32C, the coverage of a dense reply and every shard's hash before it writes the staging
 * buffer; only then are the staging and serving buffers swapped under the lock, so a failed or
 * corrupt pull leaves the served version and its bytes untouched.
 *
 * With the job's sync key every probe and pull is keyed (loom_sync_pull_keyed): a publisher
 * that cannot prove the key (none, or another job's) gets its frames refused by their tags and
 * nothing is applied. Without a key pulls are unauthenticated, which start() allows only from a
 * loopback publisher and only when asked for (cfg.unkeyed): anyone who can reach the
 * publisher's address could otherwise feed the node weights.
 *
 * The buffers stand in for the rollout model's weights on the GPU: on a real node the swap
 * would be a copy into device memory (or a pointer flip between two device buffers); here the
 * host buffer is the thing served and hashed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/harvest.h"
#include "loom/sync.h"
#include "sim_int.h"

struct loom_harvest_wlive {
        loom_harvest_wlive_cfg cfg;
        char ip[64];
        char model[LOOM_SYNC_MODEL_MAX + 1];
        uint64_t *shard;
        uint16_t *serve, *stage; /* served weights; scratch for the next version */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t th;
        uint8_t key[LOOM_SYNC_KEY_LEN];
        int keyed;
        int started, stop, held;
        double t0;
        loom_harvest_wlive_stats st;
};

void loom_harvest_wgen(uint64_t seed, uint32_t version, double density, uint16_t *w, uint64_t n)
{
        if (version == 0) {
                loom_sync_synth(seed, 0, 0, 0, (size_t)n, w);
                return;
        }
        uint32_t thr = density <= 0 ? 0 : density >= 1 ? 65536 : (uint32_t)(density * 65536 + 0.5);
        if (!thr)
                return;
        uint64_t vs =
            loom_mix64(loom_mix64(seed) ^ loom_mix64(UINT64_C(0xA0761D6478BD642F) * version));
        for (uint64_t blk = 0; blk * 4 < n; blk++) {
                uint64_t ch = loom_mix64(vs ^ blk), fl = 0;
                for (unsigned j = 0; j < 4 && blk * 4 + j < n; j++) {
                        if (((ch >> (16 * j)) & 0xffff) >= thr)
                                continue;
                        if (!fl)
                                fl = loom_mix64(ch) | 1;
                        w[blk * 4 + j] ^= (uint16_t)(1 + ((fl >> (16 * j)) & 0x3f));
                }
        }
}

int loom_harvest_wshards(uint64_t elems, uint32_t nshards, uint64_t *out, loom_err *e)
{
        if (nshards == 0 || elems < nshards)
                return loom_err_set(e, LOOM_EINVAL, "shards",
                                    "need 1 to %llu shards for %llu elements",
                                    (unsigned long long)elems, (unsigned long long)elems);
        for (uint32_t s = 0; s < nshards; s++)
                out[s] = elems / nshards + (s < elems % nshards);
        return 0;
}

void loom_harvest_wdigest(const uint16_t *w, uint64_t n, uint64_t *hash, uint32_t *crc)
{
        *hash = loom_sync_hash(w, (size_t)n, 0);
        *crc = loom_sync_crc32c(0, w, (size_t)(2 * n));
}

/* ---- the pull thread ---------------------------------------------------------------------- */

static void set_error(loom_harvest_wlive *l, const loom_err *e)
{
        snprintf(l->st.last_error, sizeof l->st.last_error, "%.40s: %.140s",
                 e->field[0] ? e->field : "pull", e->msg);
}

static void pause_for(loom_harvest_wlive *l, double s)
{
        double until = hv_now_s() + s;
        struct timespec t = {.tv_sec = (time_t)until,
                             .tv_nsec = (long)((until - (double)(time_t)until) * 1e9)};
        pthread_mutex_lock(&l->mu);
        if (!l->stop)
                pthread_cond_timedwait(&l->cv, &l->mu, &t);
        pthread_mutex_unlock(&l->mu);
}

static void pull_once(loom_harvest_wlive *l, uint64_t have, uint64_t latest)
{
        loom_err e;
        loom_sync_pull_stats ps;
        const loom_harvest_wlive_cfg *c = &l->cfg;
        /* the staging buffer must hold the served version for a delta to apply to it */
        double t0 = hv_now_s();
        if (have)
                memcpy(l->stage, l->serve, 2 * c->elems);
        int rc = loom_sync_pull_keyed(l->keyed ? l->key : NULL, c->model, l->ip, c->port, l->shard,
                                      c->shards, l->stage, have ? have : LOOM_SYNC_NO_VERSION,
                                      latest, c->timeout_s, &ps, &e);
        double dt = hv_now_s() - t0;
        uint64_t hash = 0;
        uint32_t crc = 0;
        if (!rc)
                loom_harvest_wdigest(l->stage, c->elems, &hash, &crc);
        pthread_mutex_lock(&l->mu);
        l->st.pulls++;
        l->st.bytes += ps.bytes;
        if (rc) {
                l->st.pulls_failed++;
                set_error(l, &e);
        } else if (ps.version != have) {
                uint16_t *t = l->serve;
                l->serve = l->stage;
                l->stage = t;
                l->st.version = ps.version;
                l->st.latest = ps.version > l->st.latest ? ps.version : l->st.latest;
                l->st.hash = hash;
                l->st.crc = crc;
                l->st.last_bytes = ps.bytes;
                l->st.last_changed = ps.changed;
                l->st.last_pull_s = dt;
                l->st.last_ok_at_s = hv_now_s() - l->t0;
                if (ps.base == LOOM_SYNC_NO_VERSION)
                        l->st.pulls_dense++;
                else
                        l->st.pulls_delta++;
        }
        pthread_mutex_unlock(&l->mu);
        if (rc)
                pause_for(l, c->poll_s);
}

static void *pull_main(void *arg)
{
        loom_harvest_wlive *l = arg;
        const loom_harvest_wlive_cfg *c = &l->cfg;
        for (;;) {
                pthread_mutex_lock(&l->mu);
                int stop = l->stop, held = l->held;
                uint64_t have = l->st.version, latest = l->st.latest;
                pthread_mutex_unlock(&l->mu);
                if (stop)
                        break;
                if (!held && latest > have) {
                        pull_once(l, have, latest);
                        continue;
                }
                /* up to date (or held): wait for the publisher to announce a newer version */
                loom_err e;
                uint64_t v = 0;
                int rc =
                    loom_sync_pull_latest_keyed(l->keyed ? l->key : NULL, c->model, l->ip, c->port,
                                                l->shard, c->shards, latest + 1, c->poll_s, &v, &e);
                pthread_mutex_lock(&l->mu);
                if (!rc && v > l->st.latest)
                        l->st.latest = v;
                if (rc && rc != LOOM_ETIMEDOUT) {
                        l->st.probes_failed++;
                        set_error(l, &e);
                }
                pthread_mutex_unlock(&l->mu);
                if (rc && rc != LOOM_ETIMEDOUT)
                        pause_for(l, c->poll_s);
        }
        return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

int loom_harvest_wlive_addr(const char *s, char *ip, size_t cap, uint16_t *port, loom_err *e)
{
        const char *colon = s ? strrchr(s, ':') : NULL;
        const char *ps = colon ? colon + 1 : s;
        size_t iplen = colon ? (size_t)(colon - s) : 0;
        char *end;
        unsigned long p = ps && *ps ? strtoul(ps, &end, 10) : 0;
        if (!ps || !*ps || *end || p == 0 || p > 65535 || iplen >= cap)
                return loom_err_set(e, LOOM_EINVAL, "weights",
                                    "'%s' is not IP:PORT or PORT (the publisher's address)",
                                    s ? s : "");
        snprintf(ip, cap, "%.*s", (int)iplen, s);
        if (!iplen)
                snprintf(ip, cap, "127.0.0.1");
        struct in_addr a;
        if (inet_pton(AF_INET, ip, &a) != 1)
                return loom_err_set(e, LOOM_EINVAL, "weights", "'%s' is not an IPv4 address", ip);
        *port = (uint16_t)p;
        return 0;
}

int loom_harvest_loopback(const char *ip)
{
        struct in_addr a;
        return ip && inet_pton(AF_INET, ip, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

int loom_harvest_wlive_start(const loom_harvest_wlive_cfg *c, loom_harvest_wlive **out, loom_err *e)
{
        *out = NULL;
        if (!c->ip || !*c->ip || c->port == 0)
                return loom_err_set(e, LOOM_EINVAL, "weights", "need the publisher's address");
        if (!c->key && !loom_harvest_loopback(c->ip))
                return loom_err_set(e, LOOM_EINVAL, "weights_key",
                                    "pulling weights from %s:%u needs the job's sync key: "
                                    "unauthenticated pulls are allowed from a loopback "
                                    "publisher only (anyone who can reach %s could feed this "
                                    "node weights)",
                                    c->ip, c->port, c->ip);
        if (!c->key && !c->unkeyed)
                return loom_err_set(e, LOOM_EINVAL, "weights_key",
                                    "no sync key: give the job's key, or allow unauthenticated "
                                    "pulls from this loopback publisher");
        if (c->elems == 0 || c->elems > (UINT64_C(1) << 32))
                return loom_err_set(e, LOOM_EINVAL, "weights_elems", "must be in [1, 2^32]");
        if (c->model && strlen(c->model) > LOOM_SYNC_MODEL_MAX)
                return loom_err_set(e, LOOM_EINVAL, "weights_model", "longer than %d bytes",
                                    LOOM_SYNC_MODEL_MAX);
        if (!(c->poll_s > 0 && c->poll_s <= 60) || !(c->timeout_s > 0))
                return loom_err_set(e, LOOM_EINVAL, "weights_poll",
                                    "poll must be in (0, 60] s, timeout > 0");
        loom_harvest_wlive *l = calloc(1, sizeof *l);
        if (!l)
                return loom_err_set(e, LOOM_ENOMEM, "weights", "out of memory");
        l->cfg = *c;
        l->keyed = c->key != NULL;
        if (c->key)
                memcpy(l->key, c->key, sizeof l->key);
        l->cfg.key = NULL; /* the copy in l->key is the one used */
        snprintf(l->ip, sizeof l->ip, "%s", c->ip);
        l->cfg.ip = l->ip;
        snprintf(l->model, sizeof l->model, "%s", c->model ? c->model : "");
        l->cfg.model = c->model ? l->model : NULL;
        l->shard = calloc(c->shards ? c->shards : 1, sizeof *l->shard);
        l->serve = calloc(c->elems, 2);
        l->stage = calloc(c->elems, 2);
        int rc = 0;
        if (!l->shard || !l->serve || !l->stage)
                rc = loom_err_set(e, LOOM_ENOMEM, "weights", "out of memory");
        if (!rc)
                rc = loom_harvest_wshards(c->elems, c->shards, l->shard, e);
        if (rc) {
                free(l->shard);
                free(l->serve);
                free(l->stage);
                free(l);
                return rc;
        }
        l->st.elems = c->elems;
        loom_harvest_wdigest(l->serve, c->elems, &l->st.hash, &l->st.crc);
        pthread_mutex_init(&l->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&l->cv, &ca);
        pthread_condattr_destroy(&ca);
        l->t0 = hv_now_s();
        if (pthread_create(&l->th, NULL, pull_main, l)) {
                loom_harvest_wlive_stop(l);
                return loom_err_set(e, LOOM_EIO, "weights", "cannot start the pull thread");
        }
        l->started = 1;
        *out = l;
        return 0;
}

void loom_harvest_wlive_hold(loom_harvest_wlive *l, int hold)
{
        pthread_mutex_lock(&l->mu);
        l->held = hold != 0;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
}

void loom_harvest_wlive_versions(loom_harvest_wlive *l, uint64_t *served, uint64_t *latest)
{
        pthread_mutex_lock(&l->mu);
        *served = l->st.version;
        *latest = l->st.latest; /* >= version: a pull raises it to what it applied */
        pthread_mutex_unlock(&l->mu);
}

void loom_harvest_wlive_stats_get(loom_harvest_wlive *l, loom_harvest_wlive_stats *s)
{
        pthread_mutex_lock(&l->mu);
        *s = l->st;
        s->held = l->held;
        s->keyed = l->keyed;
        s->now_s = hv_now_s() - l->t0;
        pthread_mutex_unlock(&l->mu);
}

uint64_t loom_harvest_wlive_copy(loom_harvest_wlive *l, uint16_t *out)
{
        pthread_mutex_lock(&l->mu);
        memcpy(out, l->serve, 2 * l->cfg.elems);
        uint64_t v = l->st.version;
        pthread_mutex_unlock(&l->mu);
        return v;
}

void loom_harvest_wlive_stop(loom_harvest_wlive *l)
{
        if (!l)
                return;
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        if (l->started)
                pthread_join(l->th, NULL);
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        memset(l->key, 0, sizeof l->key);
        free(l->shard);
        free(l->serve);
        free(l->stage);
        free(l);
}
