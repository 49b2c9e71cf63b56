/*
 * ha.c - the fenced log on etcd (ha.h, docs/ha.md).
 */
#define _POSIX_C_SOURCE 200809L
#include "ha.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etcd.h"

struct loom_ha {
        etcd_client *c;
        char *prefix, *me, *election, *logp;
        int ttl;
        int64_t lease;
        char *key; /* the leader key while leading */
        int64_t rev;
        uint64_t next;
        uint64_t snap; /* the latest snapshot's seq (0: none), as of the campaign or the last put */
};

static char *cat(const char *a, const char *b)
{
        size_t n = strlen(a) + strlen(b) + 1;
        char *s = malloc(n);
        if (s)
                snprintf(s, n, "%s%s", a, b);
        return s;
}

int loom_ha_open(loom_ha **out, const char *endpoints, const char *prefix, const char *me,
                 int ttl_s, loom_err *e)
{
        *out = NULL;
        if (!prefix || !*prefix)
                return loom_err_set(e, LOOM_EINVAL, "prefix", "an etcd key prefix is required");
        if (ttl_s < 1)
                return loom_err_set(e, LOOM_EINVAL, "ttl", "must be >= 1 s, got %d", ttl_s);
        loom_ha *h = calloc(1, sizeof *h);
        if (!h)
                return loom_err_set(e, LOOM_ENOMEM, "ha", "out of memory");
        int rc = etcd_open(&h->c, endpoints, 0, e);
        if (rc) {
                free(h);
                return rc;
        }
        h->prefix = strdup(prefix);
        h->me = strdup(me ? me : "");
        h->election = cat(prefix, "election");
        h->logp = cat(prefix, "log/");
        h->ttl = ttl_s;
        if (!h->prefix || !h->me || !h->election || !h->logp) {
                loom_ha_close(h);
                return loom_err_set(e, LOOM_ENOMEM, "ha", "out of memory");
        }
        *out = h;
        return 0;
}

void loom_ha_close(loom_ha *h)
{
        if (!h)
                return;
        etcd_close(h->c);
        free(h->prefix);
        free(h->me);
        free(h->election);
        free(h->logp);
        free(h->key);
        free(h);
}

static int parse_seq(const loom_ha *h, const char *key, uint64_t *seq)
{
        size_t n = strlen(h->logp);
        if (strncmp(key, h->logp, n) != 0 || strlen(key + n) != 20)
                return -1;
        char *end;
        *seq = strtoull(key + n, &end, 10);
        return *end ? -1 : 0;
}

static void seq_key(const loom_ha *h, uint64_t seq, char *out, size_t cap)
{
        snprintf(out, cap, "%s%020" PRIu64, h->logp, seq);
}

static int snap_seq(loom_ha *h, uint64_t *seq, loom_err *e);

int loom_ha_grant(loom_ha *h, int64_t *lease, loom_err *e)
{
        int rc = etcd_lease_grant(h->c, h->ttl, &h->lease, e);
        if (!rc && lease)
                *lease = h->lease;
        return rc;
}

int loom_ha_campaign(loom_ha *h, loom_err *e)
{
        free(h->key);
        h->key = NULL;
        int rc = h->lease ? 0 : etcd_lease_grant(h->c, h->ttl, &h->lease, e);
        if (rc)
                return rc;
        rc = etcd_campaign(h->c, h->election, h->me, h->lease, &h->key, &h->rev, e);
        if (rc)
                return rc;
        /* the log's end: the greatest key under log/ */
        char *end = etcd_prefix_end(h->logp);
        json_t *kvs = NULL;
        rc = end ? etcd_range(h->c, h->logp, end, 1, 1, &kvs, NULL, e) : LOOM_ENOMEM;
        free(end);
        if (rc)
                return rc;
        uint64_t snap = 0;
        rc = snap_seq(h, &snap, e); /* a log compacted away up to a snapshot goes on after it */
        if (rc && rc != LOOM_ENOENT) {
                json_decref(kvs);
                return rc;
        }
        rc = 0;
        h->snap = snap;
        h->next = snap + 1;
        json_t *kv = json_array_get(kvs, 0);
        if (kv) {
                char *k;
                size_t kn;
                uint64_t s;
                const char *ks = json_string_value(json_object_get(kv, "key"));
                if (ks && etcd_unb64(ks, &k, &kn) == 0) {
                        if (parse_seq(h, k, &s) == 0 && s + 1 > h->next)
                                h->next = s + 1;
                        free(k);
                }
        }
        json_decref(kvs);
        return 0;
}

uint64_t loom_ha_next(const loom_ha *h)
{
        return h->next;
}

uint64_t loom_ha_snapshot_seq(const loom_ha *h)
{
        return h->snap;
}

int loom_ha_keepalive(loom_ha *h, loom_err *e)
{
        if (!h->key)
                return loom_err_set(e, LOOM_HA_DEPOSED, "leader", "not leading");
        int rc = etcd_lease_keepalive(h->c, h->lease, NULL, e);
        return rc == LOOM_ENOENT ? LOOM_HA_DEPOSED : rc;
}

int loom_ha_append(loom_ha *h, const void *entry, size_t n, uint64_t *seq, loom_err *e)
{
        if (!h->key)
                return loom_err_set(e, LOOM_HA_DEPOSED, "leader", "not leading (campaign first)");
        char key[512];
        seq_key(h, h->next, key, sizeof key);
        int ok;
        int64_t fence_now;
        char *existing;
        size_t en;
        int rc = etcd_txn_put_if(h->c, h->key, h->rev, key, entry, n, &ok, NULL, &fence_now,
                                 &existing, &en, e);
        if (rc)
                return rc;
        if (!ok && fence_now == h->rev && existing && en == n && memcmp(existing, entry, n) == 0)
                ok = 1; /* a retried txn that had already been applied */
        free(existing);
        if (ok) {
                if (seq)
                        *seq = h->next;
                h->next++;
                return 0;
        }
        if (fence_now != h->rev) {
                free(h->key);
                h->key = NULL;
                return loom_err_set(e, LOOM_HA_DEPOSED, "leader",
                                    "deposed: the leader key of revision %lld is gone; the store refused log seq %" PRIu64,
                                    (long long)h->rev, h->next);
        }
        return loom_err_set(e, LOOM_EEXIST, "seq",
                            "log seq %" PRIu64 " already holds another entry", h->next);
}

int loom_ha_resign(loom_ha *h, loom_err *e)
{
        int rc = 0;
        if (h->key)
                rc = etcd_resign(h->c, h->election, h->key, h->rev, h->lease, e);
        if (h->lease) {
                int r2 = etcd_lease_revoke(h->c, h->lease, e);
                if (!rc && r2 != LOOM_EPROTO) /* an expired lease: nothing to revoke */
                        rc = r2;
        }
        free(h->key);
        h->key = NULL;
        h->lease = 0;
        return rc;
}

int loom_ha_leader(loom_ha *h, char **url, loom_err *e)
{
        return etcd_leader(h->c, h->election, url, e);
}

int loom_ha_candidates(loom_ha *h, char **urls, loom_err *e)
{
        *urls = NULL;
        char *start = cat(h->election, "/"), *end = start ? etcd_prefix_end(start) : NULL;
        json_t *kvs = NULL;
        int rc = end ? etcd_range(h->c, start, end, 0, 0, &kvs, NULL, e)
                     : loom_err_set(e, LOOM_ENOMEM, "ha", "out of memory");
        free(start);
        free(end);
        /* the leader is the candidate of the lowest create revision (etcd's election) */
        size_t n = rc ? 0 : json_array_size(kvs), cap = 1, first = 0;
        for (size_t i = 0; i < n; i++) {
                json_t *kv = json_array_get(kvs, i);
                const char *v = json_string_value(json_object_get(kv, "value"));
                cap += (v ? strlen(v) : 0) + 1; /* base64: longer than the URL it holds */
                if (etcd_int(kv, "create_revision") <
                    etcd_int(json_array_get(kvs, first), "create_revision"))
                        first = i;
        }
        char *out = rc ? NULL : calloc(1, cap);
        if (!rc && !out)
                rc = loom_err_set(e, LOOM_ENOMEM, "ha", "out of memory");
        size_t len = 0;
        for (size_t k = 0; !rc && k < n; k++) {
                size_t i = k == 0 ? first : (k <= first ? k - 1 : k);
                const char *v = json_string_value(json_object_get(json_array_get(kvs, i), "value"));
                char *url = NULL;
                size_t un;
                if (!v || etcd_unb64(v, &url, &un))
                        continue;
                len += (size_t)snprintf(out + len, cap - len, "%s%.*s", len ? "," : "", (int)un,
                                        url);
                free(url);
        }
        json_decref(kvs);
        if (rc)
                free(out);
        else
                *urls = out;
        return rc;
}

int loom_ha_read_from(loom_ha *h, uint64_t from, loom_ha_fn fn, void *arg, int64_t *rev,
                      loom_err *e)
{
        char start[512];
        seq_key(h, from, start, sizeof start);
        char *end = etcd_prefix_end(h->logp);
        if (!end)
                return loom_err_set(e, LOOM_ENOMEM, "ha", "out of memory");
        json_t *kvs;
        int rc = etcd_range(h->c, start, end, 0, 0, &kvs, rev, e);
        free(end);
        if (rc)
                return rc;
        for (size_t i = 0; i < json_array_size(kvs) && rc == 0; i++) {
                json_t *kv = json_array_get(kvs, i);
                char *k = NULL, *v = NULL;
                size_t kn, vn;
                uint64_t s;
                const char *ks = json_string_value(json_object_get(kv, "key"));
                const char *vs = json_string_value(json_object_get(kv, "value"));
                if (!ks || etcd_unb64(ks, &k, &kn) || etcd_unb64(vs ? vs : "", &v, &vn) ||
                    parse_seq(h, k, &s))
                        rc = loom_err_set(e, LOOM_ECORRUPT, "log", "undecodable log key");
                else if (fn(arg, s, v, vn))
                        rc = 1;
                free(k);
                free(v);
        }
        json_decref(kvs);
        return rc < 0 ? rc : 0;
}

typedef struct {
        loom_ha *h;
        loom_ha_fn fn;
        void *arg;
        uint64_t next;
        int stop;
} wctx;

static int read_cb(void *arg, uint64_t seq, const char *entry, size_t n)
{
        wctx *w = arg;
        w->next = seq + 1;
        w->stop = w->fn(w->arg, seq, entry, n);
        return w->stop;
}

static int watch_cb(void *arg, const char *key, const char *val, size_t n, int64_t rev,
                    int deleted)
{
        (void)rev;
        wctx *w = arg;
        uint64_t s;
        if (deleted || parse_seq(w->h, key, &s) || s < w->next)
                return 0; /* compaction deletes, or an entry already delivered */
        w->next = s + 1;
        w->stop = w->fn(w->arg, s, val, n);
        return w->stop;
}

int loom_ha_watch(loom_ha *h, uint64_t from, loom_ha_fn fn, void *arg, long timeout_ms,
                  loom_err *e)
{
        wctx w = {h, fn, arg, from, 0};
        int64_t rev;
        int rc = loom_ha_read_from(h, from, read_cb, &w, &rev, e);
        if (rc || w.stop)
                return rc;
        int64_t until = timeout_ms > 0 ? etcd_now_ms() + timeout_ms : 0;
        char *end = etcd_prefix_end(h->logp);
        if (!end)
                return loom_err_set(e, LOOM_ENOMEM, "ha", "out of memory");
        int64_t start = rev + 1;
        for (;;) {
                long left = 0;
                if (until) {
                        left = (long)(until - etcd_now_ms());
                        if (left <= 0) {
                                rc = loom_err_set(e, LOOM_ETIMEDOUT, "watch",
                                                  "no log entry past seq %" PRIu64 " in time", w.next - 1);
                                break;
                        }
                }
                int64_t last;
                rc = etcd_watch(h->c, h->logp, end, start, watch_cb, &w, left, &last, e);
                if (rc == 0 || w.stop || rc != LOOM_EIO)
                        break;
                /* the member died: resume after the last revision seen, on the next one; entries
                 * already delivered are skipped by seq */
                if (last + 1 > start)
                        start = last + 1;
                etcd_sleep_ms(100);
        }
        free(end);
        return w.stop ? 0 : rc;
}

/* ---- snapshots (docs/ha.md, "Compaction") -------------------------------------------------- */

#define SNAP_CHUNK (1u << 20) /* under etcd's request limit (1.5 MiB by default) */

static char *snap_key(const loom_ha *h, const char *what, uint64_t seq, int chunk)
{
        char *k = malloc(strlen(h->prefix) + 64);
        if (k && chunk >= 0)
                sprintf(k, "%ssnap/%020" PRIu64 "/%06d", h->prefix, seq, chunk);
        else if (k)
                sprintf(k, "%s%s/%020" PRIu64, h->prefix, what, seq);
        return k;
}

int loom_ha_snapshot_put(loom_ha *h, uint64_t seq, const void *image, size_t n, loom_err *e)
{
        if (!h->key)
                return loom_err_set(e, LOOM_HA_DEPOSED, "leader", "not leading");
        int chunks = (int)((n + SNAP_CHUNK - 1) / SNAP_CHUNK), rc = 0;
        int64_t rev = 0;
        for (int i = 0; !rc && i <= chunks; i++) {
                /* the chunks, then the index that makes them a snapshot: a reader never sees an
                 * index without its chunks */
                char idx[96];
                const void *p = idx;
                size_t len;
                char *k = i < chunks ? snap_key(h, NULL, seq, i) : snap_key(h, "snapshot", seq, -1);
                if (i < chunks) {
                        p = (const char *)image + (size_t)i * SNAP_CHUNK;
                        len = n - (size_t)i * SNAP_CHUNK < SNAP_CHUNK ? n - (size_t)i * SNAP_CHUNK
                                                                      : SNAP_CHUNK;
                } else {
                        len = (size_t)snprintf(idx, sizeof idx, "%d %zu", chunks, n);
                }
                int ok = 0;
                int64_t fence_now = 0;
                char *existing = NULL;
                size_t en;
                rc = k ? etcd_txn_put_if(h->c, h->key, h->rev, k, p, len, &ok, &rev, &fence_now,
                                         &existing, &en, e)
                       : loom_err_set(e, LOOM_ENOMEM, "ha", "out of memory");
                free(existing);
                free(k);
                if (!rc && !ok && fence_now != h->rev)
                        rc = loom_err_set(e, LOOM_HA_DEPOSED, "leader", "deposed while writing a snapshot");
                else if (!rc && !ok)
                        rc = loom_err_set(e, LOOM_EEXIST, "snapshot", "a snapshot at seq %" PRIu64 " exists",
                                          seq);
        }
        if (rc)
                return rc;
        h->snap = seq;
        /* what it covers goes: the log up to seq, older snapshots, etcd's history before it */
        char from[512], *to = snap_key(h, "snapshot", seq, -1), *sto = snap_key(h, NULL, seq, 0);
        seq_key(h, seq + 1, from, sizeof from);
        char first[512];
        seq_key(h, 0, first, sizeof first);
        rc = to && sto ? etcd_delete_range(h->c, first, from, e) : LOOM_ENOMEM;
        if (!rc) {
                char *s0 = snap_key(h, "snapshot", 0, -1), *c0 = snap_key(h, NULL, 0, 0);
                rc = s0 && c0 ? etcd_delete_range(h->c, s0, to, e) : LOOM_ENOMEM;
                if (!rc)
                        rc = etcd_delete_range(h->c, c0, sto, e);
                free(s0);
                free(c0);
        }
        free(to);
        free(sto);
        if (!rc)
                rc = etcd_compact(h->c, rev, e);
        return rc;
}

/* The seq of the latest snapshot (LOOM_ENOENT: none). */
static int snap_seq(loom_ha *h, uint64_t *seq, loom_err *e)
{
        char pre[512];
        snprintf(pre, sizeof pre, "%ssnapshot/", h->prefix);
        char *hi = etcd_prefix_end(pre);
        json_t *kvs = NULL;
        int rc = hi ? etcd_range(h->c, pre, hi, 1, 1, &kvs, NULL, e) : LOOM_ENOMEM;
        free(hi);
        json_t *kv = rc ? NULL : json_array_get(kvs, 0);
        char *k = NULL;
        size_t kn;
        if (!rc && !kv)
                rc = LOOM_ENOENT;
        else if (!rc && (etcd_unb64(json_string_value(json_object_get(kv, "key")), &k, &kn) ||
                         sscanf(k + strlen(pre), "%" SCNu64, seq) != 1))
                rc = loom_err_set(e, LOOM_ECORRUPT, "snapshot", "unreadable snapshot index");
        free(k);
        json_decref(kvs);
        return rc;
}

int loom_ha_snapshot_get(loom_ha *h, uint64_t *seq, void **image, size_t *n, loom_err *e)
{
        *image = NULL;
        *n = 0;
        *seq = 0;
        char *lo = snap_key(h, "snapshot", 0, -1);
        char *pre = lo ? strdup(lo) : NULL;
        if (pre)
                pre[strlen(pre) - 20] = 0; /* "<prefix>snapshot/" */
        char *hi = pre ? etcd_prefix_end(pre) : NULL;
        json_t *kvs = NULL;
        int rc = lo && hi ? etcd_range(h->c, pre, hi, 1, 1, &kvs, NULL, e) : LOOM_ENOMEM;
        free(lo);
        free(hi);
        json_t *kv = rc ? NULL : json_array_get(kvs, 0);
        if (!rc && !kv)
                rc = LOOM_ENOENT;
        char *k = NULL, *v = NULL;
        size_t kn, vn;
        int chunks = 0;
        size_t total = 0;
        if (!rc && (etcd_unb64(json_string_value(json_object_get(kv, "key")), &k, &kn) ||
                    etcd_unb64(json_string_value(json_object_get(kv, "value")), &v, &vn) ||
                    sscanf(v, "%d %zu", &chunks, &total) != 2 || chunks < 0 ||
                    sscanf(k + strlen(pre), "%" SCNu64, seq) != 1))
                rc = loom_err_set(e, LOOM_ECORRUPT, "snapshot", "unreadable snapshot index");
        free(pre);
        free(k);
        free(v);
        json_decref(kvs);
        char *img = rc ? NULL : malloc(total ? total : 1);
        if (!rc && !img)
                rc = loom_err_set(e, LOOM_ENOMEM, "snapshot", "out of memory");
        size_t at = 0;
        for (int i = 0; !rc && i < chunks; i++) {
                char *ck = snap_key(h, NULL, *seq, i);
                json_t *ckv = NULL;
                rc = ck ? etcd_range(h->c, ck, NULL, 0, 0, &ckv, NULL, e) : LOOM_ENOMEM;
                free(ck);
                char *cv = NULL;
                size_t cn = 0;
                json_t *one = rc ? NULL : json_array_get(ckv, 0);
                if (!rc && (!one ||
                            etcd_unb64(json_string_value(json_object_get(one, "value")), &cv, &cn) ||
                            at + cn > total))
                        rc = loom_err_set(e, LOOM_ECORRUPT, "snapshot",
                                          "chunk %d of the snapshot at seq %" PRIu64 " is missing", i, *seq);
                if (!rc) {
                        memcpy(img + at, cv, cn);
                        at += cn;
                }
                free(cv);
                json_decref(ckv);
        }
        if (!rc && at != total)
                rc = loom_err_set(e, LOOM_ECORRUPT, "snapshot", "snapshot is %zu bytes, not %zu", at,
                                  total);
        if (rc) {
                free(img);
                *seq = 0;
                return rc;
        }
        *image = img;
        *n = total;
        return 0;
}
