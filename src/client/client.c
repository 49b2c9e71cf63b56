/*
 * client.c - libloom-client over libcurl (see loom/client.h for the contract).
 *
 * Two curl handles: one for the caller's calls, one owned by the heartbeat thread, because a
 * curl easy handle must not be used by two threads at once. Retries: a transport failure or a
 * 503 is retried with capped exponential backoff until retry_for_s has passed, so a worker
 * simply waits out a loomd restart; 4xx replies are answers, never retried.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "loom/client.h"
#include "reply.h"

#define MAX_HELD 8
#define MAX_REPLY (64u << 20)

typedef struct held {
        int64_t id;
        double interval_s;
        double next; /* monotonic seconds */
} held;

#define MAX_URLS 8

struct loom_client {
        /* loomd's URL, or each replica's (docs/ha.md): a request goes to urls[cur] and moves on
         * to the next when that one does not answer or follows another (307/503 from a
         * follower), or straight to the leader a follower names when it is one of urls */
        char urls[MAX_URLS][512];
        int n_urls;
        atomic_int cur;
        char *auth_hdr; /* "Authorization: Bearer ...", NULL without a token */
        char *ca_file;
        loom_client_opts o;
        CURL *curl;
        char err[512];
        int status;
        uint64_t key_base, key_seq;

        /* heartbeat thread */
        pthread_t hb;
        bool hb_running;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool stop;
        held leases[MAX_HELD];
        int n_held;
};

typedef struct reply_buf {
        char *p;
        size_t len;
        bool overflow;
} reply_buf;

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void set_err(loom_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(loom_client *c, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
}

void loom_client_opts_default(loom_client_opts *o)
{
        memset(o, 0, sizeof *o);
        o->request_timeout_s = 10;
        o->retry_for_s = 60;
        o->heartbeat = true;
}

const char *loom_client_error(const loom_client *c)
{
        return c->err;
}

int loom_client_status(const loom_client *c)
{
        return c->status;
}

void loom_client_free_string(char *s)
{
        free(s);
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
        reply_buf *b = arg;
        size_t n = size * nmemb;
        if (b->len + n > MAX_REPLY) {
                b->overflow = true;
                return 0;
        }
        char *p = realloc(b->p, b->len + n + 1);
        if (!p)
                return 0;
        memcpy(p + b->len, ptr, n);
        b->len += n;
        p[b->len] = '\0';
        b->p = p;
        return n;
}

/* One attempt. Returns the CURLcode; *status gets the HTTP status (0 if none). */
static CURLcode attempt(const loom_client *c, CURL *h, const char *url, const char *method,
                        const char *body, const char *key, double timeout_s, int *status,
                        reply_buf *out)
{
        curl_easy_reset(h);
        struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
        hdr = curl_slist_append(hdr, "Expect:");
        if (c->auth_hdr)
                hdr = curl_slist_append(hdr, c->auth_hdr);
        if (c->ca_file)
                curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
        char keyhdr[128];
        if (key) {
                snprintf(keyhdr, sizeof keyhdr, "Idempotency-Key: %s", key);
                hdr = curl_slist_append(hdr, keyhdr);
        }
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (!strcmp(method, "POST")) {
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(body ? strlen(body) : 0));
        }
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
        CURLcode rc = curl_easy_perform(h);
        long code = 0;
        if (rc == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        *status = (int)code;
        curl_slist_free_all(hdr);
        return rc;
}

/*
 * A request with retries. Returns 0 with *status and *body (malloc'd, may be NULL) or LOOM_EIO
 * after retry_for_s of failures. wait_s is added to the per-attempt timeout (long-polls).
 */
static int request(loom_client *c, CURL *h, const char *method, const char *path, const char *body,
                   const char *key, double wait_s, int *status, char **out)
{
        char url[1024];
        double deadline = now_s() + c->o.retry_for_s;
        double backoff = 0.05;
        *out = NULL;
        for (;;) {
                reply_buf b = {0};
                int at = atomic_load(&c->cur);
                snprintf(url, sizeof url, "%s%s", c->urls[at], path);
                CURLcode rc =
                    attempt(c, h, url, method, body, key,
                            c->o.request_timeout_s + (wait_s > 0 ? wait_s : 0), status, &b);
                bool follower = rc == CURLE_OK && (*status == 307 || *status == 503) &&
                                b.p && strstr(b.p, "\"role\":\"follower\"");
                if (rc == CURLE_OK && *status != 503 && !follower) {
                        *out = b.p;
                        return 0;
                }
                if (follower)
                        set_err(c, "%s %s: %s follows another replica (%d)", method, path,
                                c->urls[at], *status);
                else if (rc == CURLE_OK)
                        set_err(c, "%s %s: daemon unavailable (503)", method, path);
                else
                        set_err(c, "%s %s: %s", method, path,
                                b.overflow ? "reply too large" : curl_easy_strerror(rc));
                int next = (at + 1) % c->n_urls;
                bool named = false;
                char *loc = NULL;
                if (follower && *status == 307 &&
                    curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
                        for (int i = 0; i < c->n_urls; i++)
                                if (i != at && !strncmp(loc, c->urls[i], strlen(c->urls[i])))
                                        next = i, named = true; /* the leader, one of ours */
                free(b.p);
                if (c->n_urls > 1 && (follower || rc != CURLE_OK)) {
                        atomic_compare_exchange_strong(&c->cur, &at, next);
                        if (named && now_s() < deadline)
                                continue; /* straight to the leader */
                }
                if (b.overflow || now_s() + backoff > deadline) {
                        *status = rc == CURLE_OK ? *status : 0;
                        return LOOM_EIO;
                }
                usleep((useconds_t)(backoff * 1e6));
                backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
        }
}

/* Map a non-2xx status to a LOOM_E* code and fill the message. */
static int status_code(loom_client *c, int status, const char *body)
{
        return loom__client_parse_error(status, body, c->err, sizeof c->err);
}

/* ---- heartbeat thread --------------------------------------------------------------------- */

static void *hb_main(void *arg)
{
        loom_client *c = arg;
        CURL *h = curl_easy_init();
        pthread_mutex_lock(&c->mu);
        while (!c->stop) {
                double now = now_s(), next = now + 3600;
                for (int i = 0; i < c->n_held; i++) {
                        if (c->leases[i].next > now) {
                                if (c->leases[i].next < next)
                                        next = c->leases[i].next;
                                continue;
                        }
                        int64_t id = c->leases[i].id;
                        c->leases[i].next = now + c->leases[i].interval_s;
                        pthread_mutex_unlock(&c->mu);
                        char path[96], url[700];
                        snprintf(path, sizeof path, "/v1/leases/%lld/heartbeat", (long long)id);
                        snprintf(url, sizeof url, "%s%s", c->urls[atomic_load(&c->cur)], path);
                        reply_buf b = {0};
                        int st = 0;
                        /* One attempt; the next beat comes soon enough. */
                        if (h)
                                attempt(c, h, url, "POST", "", NULL, c->o.request_timeout_s, &st,
                                        &b);
                        free(b.p);
                        pthread_mutex_lock(&c->mu);
                        now = now_s();
                        if (next > now + 0.01)
                                next = now + 0.01; /* re-scan: the list may have changed */
                }
                struct timespec ts;
                double wait = next - now_s();
                clock_gettime(CLOCK_MONOTONIC, &ts);
                if (wait > 0) {
                        long ns = ts.tv_nsec + (long)((wait - (long)wait) * 1e9);
                        ts.tv_sec += (time_t)wait + ns / 1000000000L;
                        ts.tv_nsec = ns % 1000000000L;
                        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
                }
        }
        pthread_mutex_unlock(&c->mu);
        curl_easy_cleanup(h);
        return NULL;
}

static void hold(loom_client *c, const loom_client_lease *l)
{
        if (!c->o.heartbeat)
                return;
        pthread_mutex_lock(&c->mu);
        bool have = false;
        for (int i = 0; i < c->n_held; i++)
                have = have || c->leases[i].id == l->id;
        if (!have && c->n_held < MAX_HELD) {
                double iv = l->timeout_s > 0 ? l->timeout_s / 3 : 5;
                if (iv < 0.01) /* a lease of microseconds must not spin this thread */
                        iv = 0.01;
                c->leases[c->n_held++] = (held){l->id, iv, now_s() + iv};
        }
        if (!c->hb_running && pthread_create(&c->hb, NULL, hb_main, c) == 0)
                c->hb_running = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
}

static void unhold(loom_client *c, int64_t id)
{
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < c->n_held; i++)
                if (c->leases[i].id == id) {
                        c->leases[i] = c->leases[--c->n_held];
                        break;
                }
        pthread_mutex_unlock(&c->mu);
}

/* ---- API ------------------------------------------------------------------------------------ */

/* The token (opts, $LOOM_TOKEN, $LOOM_TOKEN_FILE) and CA file (opts, $LOOM_CA_FILE). */
static int credentials(loom_client *c)
{
        const char *tok = c->o.token ? c->o.token : getenv("LOOM_TOKEN");
        const char *file = tok ? NULL : getenv("LOOM_TOKEN_FILE");
        char line[256] = "";
        if (file && *file) {
                FILE *f = fopen(file, "r");
                if (!f || !fgets(line, sizeof line, f)) {
                        if (f)
                                fclose(f);
                        return -1;
                }
                fclose(f);
                line[strcspn(line, "\r\n")] = '\0';
                tok = line;
        }
        if (tok && *tok) {
                size_t n = strlen(tok) + 32;
                if (!(c->auth_hdr = malloc(n)))
                        return -1;
                snprintf(c->auth_hdr, n, "Authorization: Bearer %s", tok);
        }
        const char *ca = c->o.ca_file ? c->o.ca_file : getenv("LOOM_CA_FILE");
        if (ca && *ca && !(c->ca_file = strdup(ca)))
                return -1;
        return 0;
}

loom_client *loom_client_new(const char *url, const loom_client_opts *opts)
{
        if (!url || !*url)
                return NULL;
        loom_client *c = calloc(1, sizeof *c);
        if (!c)
                return NULL;
        for (const char *p = url; *p;) { /* "URL" or "URL,URL,..." (replicas) */
                size_t len = strcspn(p, ",");
                if (len >= sizeof c->urls[0] || c->n_urls == MAX_URLS) {
                        free(c);
                        return NULL;
                }
                if (len) {
                        char *u = c->urls[c->n_urls++];
                        snprintf(u, sizeof c->urls[0], "%.*s", (int)len, p);
                        size_t n = strlen(u);
                        while (n > 0 && u[n - 1] == '/')
                                u[--n] = '\0';
                }
                p += len + (p[len] == ',');
        }
        if (!c->n_urls) {
                free(c);
                return NULL;
        }
        if (opts)
                c->o = *opts;
        else
                loom_client_opts_default(&c->o);
        int cred = credentials(c);
        c->o.token = c->o.ca_file = NULL; /* the caller's strings; ours are above */
        curl_global_init(CURL_GLOBAL_DEFAULT);
        c->curl = cred ? NULL : curl_easy_init();
        if (!c->curl) {
                free(c->auth_hdr);
                free(c->ca_file);
                free(c);
                return NULL;
        }
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->cv, &ca);
        pthread_condattr_destroy(&ca);
        /* Keys differ across clients and calls: a collision needs the same address, pid,
         * microsecond and counter. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        c->key_base = (uint64_t)(uintptr_t)c ^ ((uint64_t)getpid() << 40) ^
                      ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(ts.tv_nsec / 1000);
        return c;
}

void loom_client_free(loom_client *c)
{
        if (!c)
                return;
        if (c->hb_running) {
                pthread_mutex_lock(&c->mu);
                c->stop = true;
                pthread_cond_signal(&c->cv);
                pthread_mutex_unlock(&c->mu);
                pthread_join(c->hb, NULL);
        }
        curl_easy_cleanup(c->curl);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        free(c->auth_hdr);
        free(c->ca_file);
        free(c);
}

int loom_client_submit(loom_client *c, const char *spec_json, const char *key, uint32_t *job,
                       char **reply)
{
        char gen[64];
        if (reply)
                *reply = NULL;
        if (!key) {
                snprintf(gen, sizeof gen, "c%016llx-%llu", (unsigned long long)c->key_base,
                         (unsigned long long)++c->key_seq);
                key = gen;
        }
        char *body = NULL;
        int rc = request(c, c->curl, "POST", "/v1/jobs", spec_json, key, 0, &c->status, &body);
        if (rc)
                return rc;
        if (c->status != 200 && c->status != 201) {
                rc = status_code(c, c->status, body);
                free(body);
                return rc;
        }
        rc = loom__client_parse_submit(body, job, c->err, sizeof c->err);
        if (!rc)
                c->err[0] = '\0';
        if (reply && !rc)
                *reply = body;
        else
                free(body);
        return rc;
}

int loom_client_get(loom_client *c, const char *path, char **reply)
{
        char *body = NULL;
        *reply = NULL;
        int rc = request(c, c->curl, "GET", path, NULL, NULL, 0, &c->status, &body);
        if (rc)
                return rc;
        if (c->status != 200) {
                rc = status_code(c, c->status, body);
                free(body);
                return rc;
        }
        c->err[0] = '\0';
        *reply = body;
        return 0;
}

int loom_client_cancel(loom_client *c, uint32_t job)
{
        char path[64], *body = NULL;
        snprintf(path, sizeof path, "/v1/jobs/%u", job);
        int rc = request(c, c->curl, "DELETE", path, NULL, NULL, 0, &c->status, &body);
        if (!rc && c->status != 200)
                rc = status_code(c, c->status, body);
        free(body);
        return rc;
}

int loom_client_acquire(loom_client *c, uint32_t job, const char *phase, double wait_s,
                        loom_client_lease *out)
{
        double until = wait_s >= 0 ? now_s() + wait_s : 0;
        for (;;) {
                double w = 30; /* one long-poll; an unbounded wait is a series of them */
                if (wait_s >= 0) {
                        w = until - now_s();
                        if (w < 0)
                                w = 0;
                        if (w > 30)
                                w = 30;
                }
                char path[128], *body = NULL;
                snprintf(path, sizeof path, "/v1/jobs/%u/phases/%s/acquire?wait=%.3f", job, phase,
                         w);
                int rc = request(c, c->curl, "POST", path, "", NULL, w, &c->status, &body);
                if (rc)
                        return rc;
                if (c->status == 200) {
                        rc = loom__client_parse_lease(body, out, c->err, sizeof c->err);
                        free(body);
                        if (!rc) {
                                c->err[0] = '\0';
                                hold(c, out);
                        }
                        return rc;
                }
                if (c->status != 204) {
                        rc = status_code(c, c->status, body);
                        free(body);
                        return rc;
                }
                free(body);
                if (wait_s >= 0 && now_s() >= until) {
                        set_err(c, "acquire %s of job %u: no permit within %.3f s", phase, job,
                                wait_s);
                        return LOOM_ETIMEDOUT;
                }
        }
}

static int lease_call(loom_client *c, const loom_client_lease *l, const char *verb,
                      const char *body, char **reply)
{
        char path[96], *out = NULL;
        snprintf(path, sizeof path, "/v1/leases/%lld/%s", (long long)l->id, verb);
        int rc = request(c, c->curl, "POST", path, body, NULL, 0, &c->status, &out);
        if (rc)
                return rc;
        if (c->status != 200) {
                rc = status_code(c, c->status, out);
                free(out);
                if (rc == LOOM_ENOENT)
                        unhold(c, l->id);
                return rc;
        }
        c->err[0] = '\0';
        *reply = out;
        return 0;
}

int loom_client_progress(loom_client *c, const loom_client_lease *l, int64_t done, int64_t total,
                         int *keep_gpus)
{
        char body[96], *out = NULL;
        snprintf(body, sizeof body, "{\"done\":%lld,\"total\":%lld}", (long long)done,
                 (long long)total);
        int rc = lease_call(c, l, "progress", body, &out);
        if (rc)
                return rc;
        rc = loom__client_parse_progress(out, keep_gpus);
        free(out);
        return rc;
}

int loom_client_release(loom_client *c, const loom_client_lease *l, bool ok, char **reply)
{
        char *out = NULL;
        if (reply)
                *reply = NULL;
        /* Stop renewing first: a heartbeat racing the release would only get a 410. */
        unhold(c, l->id);
        int rc = lease_call(c, l, "release", ok ? "{\"status\":\"ok\"}" : "{\"status\":\"failed\"}",
                            &out);
        if (!rc && reply)
                *reply = out;
        else
                free(out);
        return rc;
}

int loom_client_heartbeat(loom_client *c, const loom_client_lease *l)
{
        char *out = NULL;
        int rc = lease_call(c, l, "heartbeat", "", &out);
        free(out);
        return rc;
}

int loom_client_attach(loom_client *c, uint32_t job, const char *takeover, loom_client_resume *out)
{
        char path[64], req[64], *body = NULL;
        memset(out, 0, sizeof *out);
        if (takeover && strcmp(takeover, "any") && strcmp(takeover, "rollout") &&
            strcmp(takeover, "train")) {
                set_err(c, "attach: takeover must be NULL, \"any\", \"rollout\" or \"train\"");
                return LOOM_EINVAL;
        }
        snprintf(path, sizeof path, "/v1/jobs/%u/attach", job);
        if (!takeover)
                snprintf(req, sizeof req, "{\"takeover\":false}");
        else if (!strcmp(takeover, "any"))
                snprintf(req, sizeof req, "{\"takeover\":true}");
        else
                snprintf(req, sizeof req, "{\"takeover\":\"%s\"}", takeover);
        int rc = request(c, c->curl, "POST", path, req, NULL, 0, &c->status, &body);
        if (rc)
                return rc;
        if (c->status != 200) {
                rc = status_code(c, c->status, body);
                free(body);
                return rc;
        }
        rc = loom__client_parse_resume(body, out, c->err, sizeof c->err);
        free(body);
        if (rc)
                return rc;
        c->err[0] = '\0';
        return 0;
}

int loom_client_request(loom_client *c, const char *method, const char *path, const char *body,
                        const char *key, char **reply)
{
        char *out = NULL;
        *reply = NULL;
        int rc = request(c, c->curl, method, path, body, key, 0, &c->status, &out);
        if (rc)
                return rc;
        /* An error's body is returned too: a refused submit's carries the decision. */
        *reply = out;
        if (c->status < 200 || c->status > 299)
                return status_code(c, c->status, out);
        c->err[0] = '\0';
        return 0;
}
