/*
 * replica.c - one loomd replica on etcd (loom/ha.h, docs/ha.md).
 *
 * Three etcd clients, one per thread that talks to etcd (an etcd_client serves one thread):
 * the campaign/append client (the campaign thread until it wins, then the scheduler thread's
 * commits), the follower's (watch, leader lookups) and the keeper's (lease renewals); and the
 * sharer's (rows every replica keeps a copy of, loom_replica_share).
 */
#define _GNU_SOURCE
#include "loom/ha.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etcd.h"
#include "ha.h"

struct loom_replica {
        loom_ha *hc, *hw; /* campaign + append; follower */
        etcd_client *kc;  /* keeper */
        etcd_client *sc;  /* sharer */
        char *prefix, *me;
        int ttl;
        _Atomic int64_t lease;

        int (*apply)(void *arg, const void *entry, size_t n, loom_err *e);
        int (*install)(void *arg, const void *image, size_t n, loom_err *e);
        void *apply_arg;
        bool behind; /* the follower saw a gap: the log was compacted past it */

        pthread_t follower, campaigner, keeper, sharer;
        bool have_follower, have_campaigner, have_keeper, have_sharer;
        char *share_dir;
        loom_replica_rows share;
        void *share_arg;
        atomic_bool stop_follow, stop_all, leading, deposed, failed, lease_lost;

        pthread_mutex_t mu;
        pthread_cond_t cv;
        uint64_t applied; /* the last seq applied (follower) or appended (leader) */
        char leader[512];
        loom_err err; /* failed: why */
};

/* "etcd://a:1,b:2" -> "http://a:1,http://b:2" (etcds: https). */
static char *endpoints_urls(const char *in, loom_err *e)
{
        const char *scheme = "http://";
        if (!strncmp(in, "etcd://", 7))
                in += 7;
        else if (!strncmp(in, "etcds://", 8)) {
                in += 8;
                scheme = "https://";
        }
        size_t cap = strlen(in) * 2 + 64, n = 0;
        char *out = malloc(cap);
        if (!out) {
                loom_err_set(e, LOOM_ENOMEM, "store", "out of memory");
                return NULL;
        }
        out[0] = 0;
        const char *p = in;
        while (*p) {
                size_t len = strcspn(p, ",");
                if (len) {
                        bool has = memmem(p, len, "://", 3) != NULL;
                        n += (size_t)snprintf(out + n, cap - n, "%s%s%.*s", n ? "," : "",
                                              has ? "" : scheme, (int)len, p);
                }
                p += len + (p[len] == ',');
        }
        if (!n) {
                free(out);
                loom_err_set(e, LOOM_EINVAL, "store", "no etcd endpoint in '%s'", in);
                return NULL;
        }
        return out;
}

int loom_replica_open(loom_replica **out, const char *endpoints, const char *name,
                      const char *me, int ttl_s, loom_err *e)
{
        *out = NULL;
        if (!name || !*name || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_.") != strlen(name) ||
            strlen(name) > 64)
                return loom_err_set(e, LOOM_EINVAL, "ha-name",
                                    "'%s': 1 to 64 letters, digits, '-', '_' or '.'",
                                    name ? name : "");
        if (ttl_s < 1 || ttl_s > 60)
                return loom_err_set(e, LOOM_EINVAL, "ha-ttl", "%d s: expected 1..60", ttl_s);
        if (!me || !*me)
                return loom_err_set(e, LOOM_EINVAL, "advertise", "this replica's URL is required");
        char *urls = endpoints_urls(endpoints ? endpoints : "", e);
        if (!urls)
                return LOOM_EINVAL;
        loom_replica *r = calloc(1, sizeof *r);
        char prefix[128];
        snprintf(prefix, sizeof prefix, "loom/%s/", name);
        int rc = r ? 0 : loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (!rc) {
                r->prefix = strdup(prefix);
                r->me = strdup(me);
                r->ttl = ttl_s;
                pthread_mutex_init(&r->mu, NULL);
                pthread_cond_init(&r->cv, NULL);
                rc = !r->prefix || !r->me ? loom_err_set(e, LOOM_ENOMEM, "", "out of memory") : 0;
        }
        if (!rc)
                rc = loom_ha_open(&r->hc, urls, prefix, me, ttl_s, e);
        if (!rc)
                rc = loom_ha_open(&r->hw, urls, prefix, me, ttl_s, e);
        if (!rc)
                rc = etcd_open(&r->kc, urls, 1000, e);
        if (!rc)
                rc = etcd_open(&r->sc, urls, 1000, e);
        free(urls);
        if (rc && r) {
                loom_replica_close(r);
                return rc;
        }
        *out = r;
        return 0;
}

/* ---- following ----------------------------------------------------------------------------- */

static int on_entry(void *arg, uint64_t seq, const char *entry, size_t n)
{
        loom_replica *r = arg;
        if (seq <= r->applied)
                return 0; /* applied from a snapshot already */
        if (seq != r->applied + 1) {
                r->behind = true; /* compacted past this replica: start from the snapshot */
                return 1;
        }
        loom_err e;
        loom_err_clear(&e);
        if (r->apply(r->apply_arg, entry, n, &e)) {
                r->err = e;
                atomic_store(&r->failed, true);
                return 1;
        }
        pthread_mutex_lock(&r->mu);
        r->applied = seq;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        return atomic_load(&r->stop_follow);
}

static void refresh_leader(loom_replica *r)
{
        char *url = NULL;
        loom_err e;
        int rc = loom_ha_leader(r->hw, &url, &e);
        pthread_mutex_lock(&r->mu);
        if (rc == 0 && url)
                snprintf(r->leader, sizeof r->leader, "%s", url);
        else if (rc == LOOM_ENOENT)
                r->leader[0] = 0;
        pthread_mutex_unlock(&r->mu);
        free(url);
}

/* The follower fell behind the leader's compaction (a replica restarting or slow while the
 * leader wrote a snapshot and deleted the log it covers): its store starts again from that
 * snapshot, and following goes on after it. */
static void catch_up(loom_replica *r)
{
        uint64_t seq = 0;
        void *image = NULL;
        size_t n = 0;
        loom_err e;
        loom_err_clear(&e);
        int rc = loom_ha_snapshot_get(r->hw, &seq, &image, &n, &e);
        if (rc == 0 && seq > r->applied) {
                rc = r->install(r->apply_arg, image, n, &e);
                if (!rc) {
                        pthread_mutex_lock(&r->mu);
                        r->applied = seq;
                        pthread_cond_broadcast(&r->cv);
                        pthread_mutex_unlock(&r->mu);
                        r->behind = false;
                }
        } else if (rc == 0 || rc == LOOM_ENOENT) {
                rc = loom_err_set(&e, LOOM_ECORRUPT, "log",
                                  "the log has a gap after entry %" PRIu64
                                  " that no snapshot covers",
                                  r->applied);
        } else {
                rc = 0; /* etcd unreachable: the next round tries again */
                etcd_sleep_ms(200);
        }
        free(image);
        if (rc) {
                r->err = e;
                atomic_store(&r->failed, true);
        }
}

static void *follow_main(void *arg)
{
        loom_replica *r = arg;
        while (!atomic_load(&r->stop_follow) && !atomic_load(&r->failed)) {
                refresh_leader(r);
                loom_err e;
                /* a bounded watch: the leader is looked up again, and a stop seen, each second */
                int rc = loom_ha_watch(r->hw, r->applied + 1, on_entry, r, 1000, &e);
                if (r->behind)
                        catch_up(r);
                else if (rc && rc != LOOM_ETIMEDOUT && !atomic_load(&r->failed))
                        etcd_sleep_ms(200); /* etcd unreachable: try again */
        }
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        return NULL;
}

/* ---- the lease ----------------------------------------------------------------------------- */

/* The lease lapsed: a leader is deposed; a candidate campaigns again under a new lease. */
static void lapsed(loom_replica *r)
{
        if (atomic_load(&r->leading))
                atomic_store(&r->deposed, true);
        else
                atomic_store(&r->lease_lost, true);
}

static void *keep_main(void *arg)
{
        loom_replica *r = arg;
        int64_t last_ok = etcd_now_ms(), lease = atomic_load(&r->lease);
        long every = r->ttl * 1000L / 3;
        while (!atomic_load(&r->stop_all) && !atomic_load(&r->deposed)) {
                for (long slept = 0; slept < every && !atomic_load(&r->stop_all); slept += 50)
                        etcd_sleep_ms(50);
                if (atomic_load(&r->stop_all))
                        break;
                if (atomic_load(&r->lease) != lease) { /* a new candidacy */
                        lease = atomic_load(&r->lease);
                        last_ok = etcd_now_ms();
                }
                if (atomic_load(&r->lease_lost))
                        continue; /* until the campaign thread has a new lease */
                /* a pause (SIGSTOP, a stalled VM) longer than the lease: it is gone, whatever
                 * the renewal below would say, since another replica may lead meanwhile */
                if (etcd_now_ms() - last_ok >= r->ttl * 1000L) {
                        lapsed(r);
                        continue;
                }
                loom_err e;
                int64_t left = 0;
                int rc = etcd_lease_keepalive(r->kc, lease, &left, &e);
                if (rc == LOOM_ENOENT || (rc == 0 && left <= 0))
                        lapsed(r);
                else if (rc == 0)
                        last_ok = etcd_now_ms();
        }
        return NULL;
}

/* Campaigns until it wins; etcd's errors (a member down, its own election under way) and a
 * lapsed lease only mean trying again. */
static void *campaign_main(void *arg)
{
        loom_replica *r = arg;
        while (!atomic_load(&r->stop_all)) {
                loom_err e;
                int rc = 0;
                if (atomic_load(&r->lease_lost)) {
                        int64_t lease = 0;
                        rc = loom_ha_grant(r->hc, &lease, &e);
                        if (!rc) {
                                atomic_store(&r->lease, lease);
                                atomic_store(&r->lease_lost, false);
                        }
                }
                if (!rc)
                        rc = loom_ha_campaign(r->hc, &e);
                if (!rc && !atomic_load(&r->lease_lost)) {
                        atomic_store(&r->leading, true);
                        return NULL;
                }
                for (int i = 0; i < 10 && !atomic_load(&r->stop_all); i++)
                        etcd_sleep_ms(50);
        }
        return NULL;
}

int loom_replica_follow(loom_replica *r,
                        int (*apply)(void *arg, const void *entry, size_t n, loom_err *e),
                        int (*install)(void *arg, const void *image, size_t n, loom_err *e),
                        void *arg, loom_err *e)
{
        r->apply = apply;
        r->install = install;
        r->apply_arg = arg;
        int64_t lease = 0;
        int rc = loom_ha_grant(r->hc, &lease, e);
        if (rc)
                return rc;
        atomic_store(&r->lease, lease);
        if (pthread_create(&r->keeper, NULL, keep_main, r) == 0)
                r->have_keeper = true;
        if (pthread_create(&r->follower, NULL, follow_main, r) == 0)
                r->have_follower = true;
        if (pthread_create(&r->campaigner, NULL, campaign_main, r) == 0)
                r->have_campaigner = true;
        if (!r->have_keeper || !r->have_follower || !r->have_campaigner)
                return loom_err_set(e, LOOM_ENOMEM, "ha", "cannot start the replica's threads");
        return 0;
}

bool loom_replica_leading(loom_replica *r)
{
        return atomic_load(&r->leading);
}

int loom_replica_promote(loom_replica *r, loom_err *e)
{
        if (!atomic_load(&r->leading))
                return loom_err_set(e, LOOM_ESTATE, "ha", "this replica does not lead");
        if (r->have_campaigner) {
                pthread_join(r->campaigner, NULL);
                r->have_campaigner = false;
        }
        uint64_t last = loom_ha_next(r->hc) - 1;
        pthread_mutex_lock(&r->mu);
        while (r->applied < last && !atomic_load(&r->failed) && !atomic_load(&r->deposed))
                pthread_cond_wait(&r->cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
        atomic_store(&r->stop_follow, true);
        if (r->have_follower) {
                pthread_join(r->follower, NULL);
                r->have_follower = false;
        }
        if (atomic_load(&r->failed)) {
                *e = r->err;
                return LOOM_ECORRUPT;
        }
        if (atomic_load(&r->deposed))
                return loom_err_set(e, LOOM_EIO, "ha", "deposed before taking over");
        /* the watch may have delivered entries past `last`: none can exist (only the leader
         * appends, and that is this replica now) */
        pthread_mutex_lock(&r->mu);
        snprintf(r->leader, sizeof r->leader, "%s", r->me);
        pthread_mutex_unlock(&r->mu);
        return 0;
}

int loom_replica_append(void *arg, const void *entry, size_t n, loom_err *e)
{
        loom_replica *r = arg;
        if (atomic_load(&r->deposed))
                return loom_err_set(e, LOOM_EIO, "ha",
                                    "deposed: this replica's lease lapsed; another may lead");
        uint64_t seq = 0;
        int rc = loom_ha_append(r->hc, entry, n, &seq, e);
        if (rc == LOOM_HA_DEPOSED) {
                atomic_store(&r->deposed, true);
                return LOOM_EIO;
        }
        if (rc)
                return rc;
        pthread_mutex_lock(&r->mu);
        r->applied = seq;
        pthread_mutex_unlock(&r->mu);
        return 0;
}

int loom_replica_snapshot(void *arg, const void *image, size_t n, loom_err *e)
{
        loom_replica *r = arg;
        int rc = loom_ha_snapshot_put(r->hc, loom_replica_seq(r), image, n, e);
        if (rc == LOOM_HA_DEPOSED) {
                atomic_store(&r->deposed, true);
                return LOOM_EIO;
        }
        return rc;
}

int loom_replica_load(loom_replica *r, void **image, size_t *n, loom_err *e)
{
        uint64_t seq = 0;
        int rc = loom_ha_snapshot_get(r->hw, &seq, image, n, e);
        if (rc == LOOM_ENOENT)
                return 0;
        if (!rc)
                r->applied = seq;
        return rc;
}

void loom_replica_leader(void *arg, char *buf, size_t cap)
{
        loom_replica *r = arg;
        pthread_mutex_lock(&r->mu);
        snprintf(buf, cap, "%s", r->leader);
        pthread_mutex_unlock(&r->mu);
}

/* ---- shared rows ----------------------------------------------------------------------------- */

/* The index of key k in keys[0..n) (an entry may be NULL: a row that did not decode), or -1. */
static ssize_t find_key(char **keys, size_t n, const char *k)
{
        for (size_t i = 0; i < n; i++)
                if (keys[i] && !strcmp(keys[i], k))
                        return (ssize_t)i;
        return -1;
}

/* One round: etcd's rows that differ from this replica's are merged here, then this replica's
 * rows that differ from etcd's are put there, each as a compare-and-swap on the revision read
 * (a writer that came first is merged at the next round). Rows that do not merge are skipped. */
static int share_round(loom_replica *r, loom_err *e)
{
        char **lk = NULL, **lv = NULL;
        size_t ln = 0;
        int rc = r->share.local(r->share_arg, &lk, &lv, &ln, e);
        if (rc)
                return rc;
        size_t plen = strlen(r->prefix) + strlen(r->share_dir);
        char *start = malloc(plen + 1), *end = NULL;
        if (start) {
                snprintf(start, plen + 1, "%s%s", r->prefix, r->share_dir);
                end = etcd_prefix_end(start);
        }
        json_t *kvs = NULL;
        rc = end ? etcd_range(r->sc, start, end, 0, 0, &kvs, NULL, e)
                 : loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        size_t n = rc ? 0 : json_array_size(kvs), merged = 0;
        char **ek = calloc(n + 1, sizeof *ek), **ev = calloc(n + 1, sizeof *ev);
        int64_t *mod = calloc(n + 1, sizeof *mod);
        if (!rc && (!ek || !ev || !mod))
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        for (size_t i = 0; !rc && i < n; i++) {
                json_t *kv = json_array_get(kvs, i);
                const char *k64 = json_string_value(json_object_get(kv, "key"));
                const char *v64 = json_string_value(json_object_get(kv, "value"));
                char *k = NULL;
                size_t kn, vn;
                if (!k64 || etcd_unb64(k64, &k, &kn) || etcd_unb64(v64 ? v64 : "", &ev[i], &vn) ||
                    kn <= plen) {
                        free(k);
                        continue;
                }
                ek[i] = strdup(k + plen);
                free(k);
                mod[i] = etcd_int(kv, "mod_revision");
                ssize_t at = ek[i] ? find_key(lk, ln, ek[i]) : -1;
                if (ek[i] && (at < 0 || strcmp(lv[at], ev[i]))) {
                        loom_err me;
                        if (!r->share.merge(r->share_arg, ek[i], ev[i], vn, &me))
                                merged++;
                }
        }
        if (!rc && merged) { /* this replica's rows as they are now */
                r->share.free_rows(lk, lv, ln);
                lk = lv = NULL;
                ln = 0;
                rc = r->share.local(r->share_arg, &lk, &lv, &ln, e);
        }
        for (size_t i = 0; !rc && i < ln; i++) {
                ssize_t at = find_key(ek, n, lk[i]);
                if (at >= 0 && !strcmp(ev[at], lv[i]))
                        continue;
                char *key = malloc(plen + strlen(lk[i]) + 1);
                int ok;
                if (!key) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                sprintf(key, "%s%s", start, lk[i]);
                rc = etcd_put_cas(r->sc, key, at >= 0 ? mod[at] : 0, lv[i], strlen(lv[i]), &ok, e);
                free(key);
        }
        for (size_t i = 0; i < n && ek && ev; i++) {
                free(ek[i]);
                free(ev[i]);
        }
        free(ek);
        free(ev);
        free(mod);
        json_decref(kvs);
        free(start);
        free(end);
        r->share.free_rows(lk, lv, ln);
        return rc;
}

static void *share_main(void *arg)
{
        loom_replica *r = arg;
        while (!atomic_load(&r->stop_all)) {
                for (long slept = 0; slept < 2000 && !atomic_load(&r->stop_all); slept += 50)
                        etcd_sleep_ms(50);
                loom_err e;
                if (!atomic_load(&r->stop_all))
                        share_round(r, &e); /* etcd unreachable: the next round tries again */
        }
        return NULL;
}

int loom_replica_share(loom_replica *r, const char *dir, const loom_replica_rows *rows, void *arg,
                       loom_err *e)
{
        if (r->have_sharer)
                return loom_err_set(e, LOOM_EINVAL, "ha", "rows are shared already");
        r->share = *rows;
        r->share_arg = arg;
        r->share_dir = strdup(dir);
        if (!r->share_dir)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int rc = share_round(r, e);
        if (rc)
                return rc;
        if (pthread_create(&r->sharer, NULL, share_main, r))
                return loom_err_set(e, LOOM_ENOMEM, "ha", "cannot start the sharing thread");
        r->have_sharer = true;
        return 0;
}

int loom_replica_candidates(loom_replica *r, char **urls, loom_err *e)
{
        return loom_ha_candidates(r->hw, urls, e); /* the follower's handle: it follows no more */
}

bool loom_replica_deposed(loom_replica *r)
{
        return atomic_load(&r->deposed);
}

bool loom_replica_failed(loom_replica *r, loom_err *e)
{
        if (!atomic_load(&r->failed))
                return false;
        if (e)
                *e = r->err;
        return true;
}

uint64_t loom_replica_seq(loom_replica *r)
{
        pthread_mutex_lock(&r->mu);
        uint64_t s = r->applied;
        pthread_mutex_unlock(&r->mu);
        return s;
}

uint64_t loom_replica_snapshot_due(loom_replica *r)
{
        uint64_t seq = loom_replica_seq(r), snap = loom_ha_snapshot_seq(r->hc);
        return seq > snap ? seq - snap : 0;
}

void loom_replica_close(loom_replica *r)
{
        if (!r)
                return;
        atomic_store(&r->stop_follow, true);
        atomic_store(&r->stop_all, true);
        if (r->have_follower)
                pthread_join(r->follower, NULL);
        if (r->have_keeper)
                pthread_join(r->keeper, NULL);
        if (r->have_sharer)
                pthread_join(r->sharer, NULL);
        loom_err e;
        if (r->have_campaigner && !atomic_load(&r->leading) && !atomic_load(&r->failed)) {
                /* a campaign blocks until it wins: revoking the lease withdraws the candidacy
                 * at once; the blocked call itself is left to the process's exit (this is
                 * called when loomd stops), with r, which it uses */
                etcd_lease_revoke(r->kc, atomic_load(&r->lease), &e);
                pthread_detach(r->campaigner);
                return;
        }
        if (r->have_campaigner)
                pthread_join(r->campaigner, NULL);
        if (r->hc && !atomic_load(&r->deposed))
                loom_ha_resign(r->hc, &e);
        loom_ha_close(r->hc);
        loom_ha_close(r->hw);
        etcd_close(r->kc);
        etcd_close(r->sc);
        free(r->share_dir);
        free(r->prefix);
        free(r->me);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        free(r);
}
