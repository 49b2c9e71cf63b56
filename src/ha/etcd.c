/*
 * etcd.c - etcd v3 over its HTTP/JSON gateway with libcurl, jansson and nettle's base64
 * (etcd.h, docs/ha.md).
 */
#define _POSIX_C_SOURCE 200809L
#include "etcd.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <nettle/base64.h>

struct etcd_client {
        char **ep;
        size_t nep;
        size_t cur; /* the endpoint that answered last */
        int retry_ms;
};

int64_t etcd_now_ms(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void etcd_sleep_ms(long ms)
{
        struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
}

int etcd_open(etcd_client **out, const char *endpoints, int retry_ms, loom_err *e)
{
        *out = NULL;
        if (!endpoints || !*endpoints)
                return loom_err_set(e, LOOM_EINVAL, "endpoints", "no etcd endpoint given");
        etcd_client *c = calloc(1, sizeof *c);
        char *dup = strdup(endpoints);
        if (!c || !dup) {
                free(c);
                free(dup);
                return loom_err_set(e, LOOM_ENOMEM, "endpoints", "out of memory");
        }
        c->retry_ms = retry_ms > 0 ? retry_ms : 5000;
        char *save = NULL;
        for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (strncmp(t, "http://", 7) != 0 && strncmp(t, "https://", 8) != 0) {
                        loom_err_set(e, LOOM_EINVAL, "endpoints",
                                     "endpoint \"%s\" is not an http:// or https:// URL", t);
                        free(dup);
                        etcd_close(c);
                        return LOOM_EINVAL;
                }
                char **n = realloc(c->ep, (c->nep + 1) * sizeof *n);
                if (!n || !(n[c->nep] = strdup(t))) {
                        if (n)
                                c->ep = n;
                        free(dup);
                        etcd_close(c);
                        return loom_err_set(e, LOOM_ENOMEM, "endpoints", "out of memory");
                }
                c->ep = n;
                c->nep++;
        }
        free(dup);
        if (c->nep == 0) {
                etcd_close(c);
                return loom_err_set(e, LOOM_EINVAL, "endpoints", "no etcd endpoint given");
        }
        *out = c;
        return 0;
}

void etcd_close(etcd_client *c)
{
        if (!c)
                return;
        for (size_t i = 0; i < c->nep; i++)
                free(c->ep[i]);
        free(c->ep);
        free(c);
}

const char *etcd_endpoint(const etcd_client *c)
{
        return c->ep[c->cur];
}

char *etcd_b64(const void *p, size_t n)
{
        char *s = malloc(BASE64_ENCODE_RAW_LENGTH(n) + 1);
        if (!s)
                return NULL;
        base64_encode_raw(s, n, p);
        s[BASE64_ENCODE_RAW_LENGTH(n)] = 0;
        return s;
}

int etcd_unb64(const char *s, char **out, size_t *n)
{
        size_t len = strlen(s);
        char *b = malloc(BASE64_DECODE_LENGTH(len) + 1);
        if (!b)
                return LOOM_ENOMEM;
        struct base64_decode_ctx ctx;
        base64_decode_init(&ctx);
        size_t got = BASE64_DECODE_LENGTH(len);
        if (!base64_decode_update(&ctx, &got, (uint8_t *)b, len, s) || !base64_decode_final(&ctx)) {
                free(b);
                return LOOM_EPROTO;
        }
        b[got] = 0;
        *out = b;
        *n = got;
        return 0;
}

int64_t etcd_int(const json_t *o, const char *field)
{
        json_t *v = json_object_get(o, field);
        if (json_is_integer(v))
                return json_integer_value(v);
        if (json_is_string(v))
                return strtoll(json_string_value(v), NULL, 10);
        return 0;
}

static json_t *jstr64(int64_t v)
{
        char b[32];
        snprintf(b, sizeof b, "%lld", (long long)v);
        return json_string(b);
}

static json_t *jb64(const void *p, size_t n)
{
        char *s = etcd_b64(p, n);
        json_t *j = s ? json_string(s) : NULL;
        free(s);
        return j;
}

typedef struct {
        char *p;
        size_t n, cap;
} buf;

static size_t buf_write(char *d, size_t sz, size_t nm, void *arg)
{
        buf *b = arg;
        size_t k = sz * nm;
        if (b->n + k + 1 > b->cap) {
                size_t cap = (b->n + k + 1) * 2;
                char *p = realloc(b->p, cap);
                if (!p)
                        return 0;
                b->p = p;
                b->cap = cap;
        }
        memcpy(b->p + b->n, d, k);
        b->n += k;
        b->p[b->n] = 0;
        return k;
}

/* One POST to one endpoint. Returns 0 (a JSON answer with HTTP 200), LOOM_EIO (transport: try
 * another), LOOM_EPROTO/LOOM_ESTATE (the member answered an error). */
static int post_one(const char *url, const char *body, CURL *h, buf *b, long timeout_ms,
                    long *code, char *why, size_t whylen)
{
        curl_easy_reset(h);
        struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, buf_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        CURLcode rc = curl_easy_perform(h);
        curl_slist_free_all(hd);
        if (rc != CURLE_OK) {
                snprintf(why, whylen, "%s", curl_easy_strerror(rc));
                return rc == CURLE_OPERATION_TIMEDOUT ? LOOM_ETIMEDOUT : LOOM_EIO;
        }
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
        return 0;
}

int etcd_call(etcd_client *c, const char *path, json_t *req, json_t **resp, long timeout_ms,
              loom_err *e)
{
        *resp = NULL;
        if (!req)
                req = json_object();
        char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
        json_decref(req);
        CURL *h = curl_easy_init();
        if (!body || !h) {
                free(body);
                if (h)
                        curl_easy_cleanup(h);
                return loom_err_set(e, LOOM_ENOMEM, path, "out of memory");
        }
        int64_t until = etcd_now_ms() + c->retry_ms;
        int rc = LOOM_EIO;
        char why[256] = "";
        size_t tried = 0;
        for (;;) {
                const char *ep = c->ep[c->cur];
                char url[512];
                snprintf(url, sizeof url, "%s%s", ep, path);
                buf b = {0};
                long code = 0;
                rc = post_one(url, body, h, &b, timeout_ms, &code, why, sizeof why);
                if (rc == 0) {
                        json_error_t je;
                        json_t *j = b.p ? json_loads(b.p, 0, &je) : NULL;
                        /* A member without a leader answers 503 "etcdserver: no leader" (or a
                         * gRPC "Unavailable" code 14): another member may have one. */
                        int unavailable = code == 503 || etcd_int(j, "code") == 14;
                        if (code == 200 && j) {
                                *resp = j;
                                free(b.p);
                                break;
                        }
                        const char *msg = json_string_value(json_object_get(j, "error"));
                        if (!msg)
                                msg = json_string_value(json_object_get(j, "message"));
                        snprintf(why, sizeof why, "HTTP %ld: %s", code,
                                 msg ? msg : (b.p ? b.p : "(empty answer)"));
                        json_decref(j);
                        free(b.p);
                        rc = unavailable ? LOOM_EIO : LOOM_EPROTO;
                        if (!unavailable) {
                                loom_err_set(e, rc, path, "endpoint %s: %s", ep, why);
                                break;
                        }
                } else {
                        free(b.p);
                        if (rc == LOOM_ETIMEDOUT) {
                                loom_err_set(e, rc, path, "endpoint %s: %s", ep, why);
                                break;
                        }
                }
                /* transport error or no leader there: the next endpoint */
                c->cur = (c->cur + 1) % c->nep;
                if (++tried % c->nep == 0) {
                        if (etcd_now_ms() >= until) {
                                loom_err_set(e, LOOM_EIO, path,
                                             "no etcd endpoint answered (%zu tried); endpoint %s: %s",
                                             c->nep, ep, why);
                                break;
                        }
                        etcd_sleep_ms(100);
                }
        }
        curl_easy_cleanup(h);
        free(body);
        return *resp ? 0 : rc;
}

int etcd_put(etcd_client *c, const char *key, const void *val, size_t n, int64_t lease,
             int64_t *rev, loom_err *e)
{
        json_t *r = json_pack("{s:o,s:o}", "key", jb64(key, strlen(key)), "value", jb64(val, n));
        if (lease)
                json_object_set_new(r, "lease", jstr64(lease));
        json_t *a;
        int rc = etcd_call(c, "/v3/kv/put", r, &a, 10000, e);
        if (rc)
                return rc;
        if (rev)
                *rev = etcd_int(json_object_get(a, "header"), "revision");
        json_decref(a);
        return 0;
}

char *etcd_prefix_end(const char *prefix)
{
        char *s = strdup(prefix);
        if (!s)
                return NULL;
        size_t n = strlen(s);
        while (n > 0 && (unsigned char)s[n - 1] == 0xff)
                s[--n] = 0;
        if (n == 0) { /* every key: "\0" */
                free(s);
                return strdup("");
        }
        s[n - 1]++;
        return s;
}

static json_t *range_req(const char *key, const char *range_end, int64_t limit, int descend)
{
        json_t *r = json_pack("{s:o}", "key", jb64(key, strlen(key)));
        if (range_end)
                json_object_set_new(r, "range_end",
                                    *range_end ? jb64(range_end, strlen(range_end)) : json_string("AA=="));
        if (limit)
                json_object_set_new(r, "limit", jstr64(limit));
        if (descend) {
                json_object_set_new(r, "sort_order", json_string("DESCEND"));
                json_object_set_new(r, "sort_target", json_string("KEY"));
        }
        return r;
}

int etcd_range(etcd_client *c, const char *key, const char *range_end, int64_t limit,
               int descend, json_t **kvs, int64_t *rev, loom_err *e)
{
        json_t *a;
        int rc = etcd_call(c, "/v3/kv/range", range_req(key, range_end, limit, descend), &a, 10000,
                           e);
        if (rc)
                return rc;
        json_t *k = json_object_get(a, "kvs");
        *kvs = json_is_array(k) ? json_incref(k) : json_array();
        if (rev)
                *rev = etcd_int(json_object_get(a, "header"), "revision");
        json_decref(a);
        return 0;
}

int etcd_txn_put_if(etcd_client *c, const char *fence_key, int64_t fence_rev, const char *key,
                    const void *val, size_t n, int *ok, int64_t *rev, int64_t *fence_now,
                    char **existing, size_t *existing_n, loom_err *e)
{
        *ok = 0;
        *fence_now = 0;
        *existing = NULL;
        *existing_n = 0;
        json_t *cmp = json_pack(
            "[{s:o,s:s,s:s,s:o},{s:o,s:s,s:s,s:s}]", "key", jb64(fence_key, strlen(fence_key)),
            "target", "CREATE", "result", "EQUAL", "create_revision", jstr64(fence_rev), "key",
            jb64(key, strlen(key)), "target", "CREATE", "result", "EQUAL", "create_revision", "0");
        json_t *succ = json_pack("[{s:{s:o,s:o}}]", "request_put", "key", jb64(key, strlen(key)),
                                 "value", jb64(val, n));
        json_t *fail = json_pack("[{s:o},{s:o}]", "request_range", range_req(fence_key, NULL, 0, 0),
                                 "request_range", range_req(key, NULL, 0, 0));
        json_t *r = json_pack("{s:o,s:o,s:o}", "compare", cmp, "success", succ, "failure", fail);
        json_t *a;
        int rc = etcd_call(c, "/v3/kv/txn", r, &a, 10000, e);
        if (rc)
                return rc;
        if (json_is_true(json_object_get(a, "succeeded"))) {
                *ok = 1;
                if (rev)
                        *rev = etcd_int(json_object_get(a, "header"), "revision");
                json_decref(a);
                return 0;
        }
        json_t *rs = json_object_get(a, "responses");
        for (size_t i = 0; i < 2 && i < json_array_size(rs); i++) {
                json_t *kv = json_array_get(
                    json_object_get(json_object_get(json_array_get(rs, i), "response_range"), "kvs"), 0);
                if (!kv)
                        continue;
                if (i == 0)
                        *fence_now = etcd_int(kv, "create_revision");
                else {
                        const char *v = json_string_value(json_object_get(kv, "value"));
                        if (etcd_unb64(v ? v : "", existing, existing_n))
                                *existing = NULL;
                }
        }
        json_decref(a);
        return 0;
}

int etcd_put_cas(etcd_client *c, const char *key, int64_t mod_rev, const void *val, size_t n,
                 int *ok, loom_err *e)
{
        *ok = 0;
        json_t *cmp = mod_rev ? json_pack("[{s:o,s:s,s:s,s:o}]", "key", jb64(key, strlen(key)),
                                          "target", "MOD", "result", "EQUAL", "mod_revision",
                                          jstr64(mod_rev))
                              : json_pack("[{s:o,s:s,s:s,s:s}]", "key", jb64(key, strlen(key)),
                                          "target", "CREATE", "result", "EQUAL",
                                          "create_revision", "0");
        json_t *succ = json_pack("[{s:{s:o,s:o}}]", "request_put", "key", jb64(key, strlen(key)),
                                 "value", jb64(val, n));
        json_t *a;
        int rc = etcd_call(c, "/v3/kv/txn", json_pack("{s:o,s:o}", "compare", cmp, "success", succ),
                           &a, 10000, e);
        if (rc)
                return rc;
        *ok = json_is_true(json_object_get(a, "succeeded"));
        json_decref(a);
        return 0;
}

int etcd_delete_range(etcd_client *c, const char *key, const char *range_end, loom_err *e)
{
        json_t *a;
        int rc = etcd_call(c, "/v3/kv/deleterange", range_req(key, range_end, 0, 0), &a, 10000, e);
        json_decref(a);
        return rc;
}

int etcd_compact(etcd_client *c, int64_t rev, loom_err *e)
{
        json_t *a;
        int rc = etcd_call(c, "/v3/kv/compaction", json_pack("{s:o}", "revision", jstr64(rev)), &a,
                           30000, e);
        json_decref(a);
        return rc;
}

int etcd_lease_grant(etcd_client *c, int ttl_s, int64_t *id, loom_err *e)
{
        if (ttl_s < 1)
                return loom_err_set(e, LOOM_EINVAL, "ttl", "must be >= 1 s, got %d", ttl_s);
        json_t *a;
        int rc = etcd_call(c, "/v3/lease/grant", json_pack("{s:o}", "TTL", jstr64(ttl_s)), &a, 10000,
                           e);
        if (rc)
                return rc;
        *id = etcd_int(a, "ID");
        json_decref(a);
        if (*id == 0)
                return loom_err_set(e, LOOM_EPROTO, "ID", "endpoint %s: lease grant without an ID",
                                    etcd_endpoint(c));
        return 0;
}

int etcd_lease_keepalive(etcd_client *c, int64_t id, int64_t *ttl, loom_err *e)
{
        json_t *a;
        int rc = etcd_call(c, "/v3/lease/keepalive", json_pack("{s:o}", "ID", jstr64(id)), &a, 10000,
                           e);
        if (rc)
                return rc;
        json_t *res = json_object_get(a, "result");
        int64_t t = etcd_int(res ? res : a, "TTL");
        json_decref(a);
        if (ttl)
                *ttl = t;
        if (t <= 0)
                return loom_err_set(e, LOOM_ENOENT, "lease", "lease %llx expired",
                                    (unsigned long long)id);
        return 0;
}

int etcd_lease_revoke(etcd_client *c, int64_t id, loom_err *e)
{
        json_t *a;
        int rc = etcd_call(c, "/v3/lease/revoke", json_pack("{s:o}", "ID", jstr64(id)), &a, 10000, e);
        json_decref(a);
        return rc;
}

int etcd_campaign(etcd_client *c, const char *name, const char *value, int64_t lease,
                  char **key, int64_t *rev, loom_err *e)
{
        json_t *a;
        json_t *r = json_pack("{s:o,s:o,s:o}", "name", jb64(name, strlen(name)), "value",
                              jb64(value, strlen(value)), "lease", jstr64(lease));
        int rc = etcd_call(c, "/v3/election/campaign", r, &a, 0, e);
        if (rc)
                return rc;
        json_t *l = json_object_get(a, "leader");
        const char *k = json_string_value(json_object_get(l, "key"));
        size_t n;
        *rev = etcd_int(l, "rev");
        rc = k ? etcd_unb64(k, key, &n) : LOOM_EPROTO;
        json_decref(a);
        if (rc || *rev == 0)
                return loom_err_set(e, LOOM_EPROTO, "leader", "endpoint %s: campaign answer without a leader key",
                                    etcd_endpoint(c));
        return 0;
}

int etcd_leader(etcd_client *c, const char *name, char **value, loom_err *e)
{
        json_t *a;
        int rc = etcd_call(c, "/v3/election/leader", json_pack("{s:o}", "name", jb64(name, strlen(name))),
                           &a, 10000, e);
        if (rc)
                return rc == LOOM_EPROTO && strstr(e ? e->msg : "", "no leader")
                           ? loom_err_set(e, LOOM_ENOENT, "leader", "election %s has no leader", name)
                           : rc;
        const char *v = json_string_value(json_object_get(json_object_get(a, "kv"), "value"));
        size_t n;
        rc = v ? etcd_unb64(v, value, &n)
               : loom_err_set(e, LOOM_ENOENT, "leader", "election %s has no leader", name);
        json_decref(a);
        return rc;
}

int etcd_resign(etcd_client *c, const char *name, const char *key, int64_t rev, int64_t lease,
                loom_err *e)
{
        json_t *a;
        json_t *r = json_pack("{s:{s:o,s:o,s:o,s:o}}", "leader", "name", jb64(name, strlen(name)),
                              "key", jb64(key, strlen(key)), "rev", jstr64(rev), "lease",
                              jstr64(lease));
        int rc = etcd_call(c, "/v3/election/resign", r, &a, 10000, e);
        json_decref(a);
        return rc;
}

typedef struct {
        buf b;
        etcd_watch_fn fn;
        void *arg;
        int64_t last_rev;
        int stopped;
        int bad;
} wstate;

/* Handles each complete line (one JSON message) in the stream. */
static size_t watch_write(char *d, size_t sz, size_t nm, void *arg)
{
        wstate *w = arg;
        size_t k = sz * nm;
        if (buf_write(d, sz, nm, &w->b) != k)
                return 0;
        char *nl;
        while ((nl = memchr(w->b.p, '\n', w->b.n))) {
                size_t len = (size_t)(nl - w->b.p);
                json_t *j = json_loadb(w->b.p, len, 0, NULL);
                memmove(w->b.p, nl + 1, w->b.n - len - 1);
                w->b.n -= len + 1;
                if (!j)
                        continue;
                json_t *res = json_object_get(j, "result");
                json_t *ev = json_object_get(res, "events");
                if (json_object_get(j, "error") || json_is_true(json_object_get(res, "canceled"))) {
                        w->bad = 1;
                        json_decref(j);
                        return 0;
                }
                for (size_t i = 0; i < json_array_size(ev); i++) {
                        json_t *x = json_array_get(ev, i);
                        json_t *kv = json_object_get(x, "kv");
                        const char *ks = json_string_value(json_object_get(kv, "key"));
                        const char *vs = json_string_value(json_object_get(kv, "value"));
                        char *key = NULL, *val = NULL;
                        size_t kn = 0, vn = 0;
                        if (etcd_unb64(ks ? ks : "", &key, &kn) || etcd_unb64(vs ? vs : "", &val, &vn)) {
                                free(key);
                                w->bad = 1;
                                json_decref(j);
                                return 0;
                        }
                        int64_t mr = etcd_int(kv, "mod_revision");
                        int del = json_is_string(json_object_get(x, "type")) &&
                                  strcmp(json_string_value(json_object_get(x, "type")), "DELETE") == 0;
                        int stop = w->fn(w->arg, key, val, vn, mr, del);
                        free(key);
                        free(val);
                        if (mr > w->last_rev)
                                w->last_rev = mr;
                        if (stop) {
                                w->stopped = 1;
                                json_decref(j);
                                return 0;
                        }
                }
                json_decref(j);
        }
        return k;
}

int etcd_watch(etcd_client *c, const char *key, const char *range_end, int64_t start_rev,
               etcd_watch_fn fn, void *arg, long timeout_ms, int64_t *last_rev, loom_err *e)
{
        json_t *cr = range_req(key, range_end, 0, 0);
        json_object_set_new(cr, "start_revision", jstr64(start_rev));
        json_t *r = json_pack("{s:o}", "create_request", cr);
        char *body = json_dumps(r, JSON_COMPACT);
        json_decref(r);
        CURL *h = curl_easy_init();
        wstate w = {.fn = fn, .arg = arg, .last_rev = start_rev - 1};
        if (!body || !h) {
                free(body);
                if (h)
                        curl_easy_cleanup(h);
                return loom_err_set(e, LOOM_ENOMEM, "watch", "out of memory");
        }
        const char *ep = c->ep[c->cur];
        char url[512];
        snprintf(url, sizeof url, "%s/v3/watch", ep);
        struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, watch_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &w);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        CURLcode rc = curl_easy_perform(h);
        curl_slist_free_all(hd);
        curl_easy_cleanup(h);
        free(body);
        free(w.b.p);
        if (last_rev)
                *last_rev = w.last_rev;
        if (w.stopped)
                return 0;
        if (w.bad)
                return loom_err_set(e, LOOM_EPROTO, "watch", "endpoint %s: watch canceled or undecodable (revision compacted?)", ep);
        if (rc == CURLE_OPERATION_TIMEDOUT)
                return loom_err_set(e, LOOM_ETIMEDOUT, "watch", "endpoint %s: %s", ep, curl_easy_strerror(rc));
        c->cur = (c->cur + 1) % c->nep; /* the stream broke: resume on the next member */
        return loom_err_set(e, LOOM_EIO, "watch", "endpoint %s: stream ended: %s", ep,
                            rc == CURLE_OK ? "closed by the member" : curl_easy_strerror(rc));
}
