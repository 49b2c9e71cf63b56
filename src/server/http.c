/*
 * http.c - loomd's HTTP side: libmicrohttpd glue, routing and request parsing.
 *
 * Runs on libmicrohttpd's polling thread. A request is parsed here (JSON bodies are decoded
 * and validated with the same spec.h functions as `loom place`), then queued for the scheduler
 * thread while its connection is suspended; the scheduler resumes the connection once the reply
 * is committed, and the access handler is called again to send it. Nothing here touches the
 * scheduler's state, so a slow or malicious client only costs a connection slot, and few of
 * those: idle connections are closed after cfg.idle_timeout_s; a connection that has not sent a
 * whole request cfg.request_timeout_s after it opened (or after its last reply) is closed by
 * the guard thread below however it trickles bytes (the idle timer restarts at every byte);
 * one client address holds at most cfg.max_conns_per_addr of the cfg.max_conns connections;
 * bodies over 1 MiB get 413. Framing a proxy could read differently (two Content-Lengths, or
 * one with a Transfer-Encoding) is refused with 400 and the connection closed (RFC 9112 6.3),
 * as is a malformed Content-Length, and TLS is 1.2 or 1.3 only.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <pthread.h>
#include <strings.h>

#include "loom/spec.h"
#include "srv.h"

/* ---- parsing ------------------------------------------------------------------------------ */

/* A positive decimal id without sign, spaces or leading zeros; 0 if s is not one. */
static uint64_t parse_id(const char *s, size_t len)
{
        if (len == 0 || len > 18 || s[0] == '0')
                return 0;
        uint64_t v = 0;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return 0;
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        return v;
}

/* Split "/v1/a/b/c" into at most max segments; returns the count, -1 if more. */
static int split_path(const char *url, const char *seg[], size_t seglen[], int max)
{
        int n = 0;
        const char *p = url;
        while (*p) {
                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                const char *q = p;
                while (*q && *q != '/')
                        q++;
                if (n == max)
                        return -1;
                seg[n] = p;
                seglen[n++] = (size_t)(q - p);
                p = q;
        }
        return n;
}

/* A header or query argument of the request (from r->value when there is no connection). */
static const char *req_value(srv_req *r, bool header, const char *key)
{
        if (!r->conn)
                return r->value ? r->value(r, header, key) : NULL;
        return MHD_lookup_connection_value(r->conn,
                                           header ? MHD_HEADER_KIND : MHD_GET_ARGUMENT_KIND, key);
}

static bool seg_is(const char *seg, size_t len, const char *word)
{
        return strlen(word) == len && !memcmp(seg, word, len);
}

/* Parse the body as a JSON object; replies 400/422 and returns NULL when it is not one. */
static json_t *body_object(srv_req *r, bool required)
{
        loom_err e;
        loom_err_clear(&e);
        if (r->upload_len == 0) {
                if (required)
                        srv_reply_error(r, 400, "", "request body must be a JSON object");
                return required ? NULL : json_object();
        }
        json_t *j = loom_json_parse(r->upload, r->upload_len, &e);
        if (!j) {
                srv_reply_loom_err(r, 400, &e);
                return NULL;
        }
        if (!json_is_object(j)) {
                json_decref(j);
                srv_reply_error(r, 422, "", "request body must be a JSON object");
                return NULL;
        }
        return j;
}

/* A required non-negative integer field of a request body. */
static int get_count(srv_req *r, json_t *obj, const char *field, int64_t min, int64_t *out)
{
        json_t *v = json_object_get(obj, field);
        if (!v)
                return srv_reply_error(r, 422, field, "missing field '%s'", field), -1;
        if (!json_is_integer(v))
                return srv_reply_error(r, 422, field, "'%s' must be an integer", field), -1;
        *out = json_integer_value(v);
        if (*out < min)
                return srv_reply_error(r, 422, field, "'%s' must be >= %lld, got %lld", field,
                                       (long long)min, (long long)*out),
                       -1;
        return 0;
}

static int only_fields(srv_req *r, json_t *obj, const char *const *allowed)
{
        const char *k;
        json_t *v;
        json_object_foreach(obj, k, v)
        {
                bool ok = false;
                for (int i = 0; allowed[i]; i++)
                        ok = ok || !strcmp(k, allowed[i]);
                if (!ok)
                        return srv_reply_error(r, 422, k, "unknown field '%s'", k), -1;
        }
        return 0;
}

static void parse_submit(loom_server *s, srv_req *r)
{
        const char *key = req_value(r, true, "Idempotency-Key");
        if (key && (strlen(key) == 0 || strlen(key) >= SRV_KEY_MAX))
                return srv_reply_error(r, 422, "Idempotency-Key", "must be 1..%d characters",
                                       SRV_KEY_MAX - 1);
        snprintf(r->key, sizeof r->key, "%s", key ? key : "");
        const char *ex = req_value(r, false, "explain");
        r->explain = ex && (!strcmp(ex, "1") || !strcmp(ex, "true"));
        const char *dry = req_value(r, false, "dry_run");
        r->dry_run = dry && (!strcmp(dry, "1") || !strcmp(dry, "true"));
        json_t *obj = body_object(r, true);
        if (!obj)
                return;
        json_t *name = json_object_get(obj, "name");
        if (name && (!json_is_string(name) || json_string_length(name) >= SRV_NAME_MAX)) {
                json_decref(obj);
                return srv_reply_error(r, 422, "name",
                                       "'name' must be a string of at most %d "
                                       "characters",
                                       SRV_NAME_MAX - 1);
        }
        static const char *const extra[] = {"name", NULL};
        loom_err e;
        loom_err_clear(&e);
        if (name &&
            loom_spec_name_check(json_string_value(name), json_string_length(name), "name", &e)) {
                json_decref(obj);
                return srv_reply_loom_err(r, 422, &e);
        }
        if (loom_job_spec_from_json(obj, "", r->upload, r->upload_len, &s->cfg.cluster, extra,
                                    &r->spec, &e)) {
                json_decref(obj);
                return srv_reply_loom_err(r, 422, &e);
        }
        snprintf(r->name, sizeof r->name, "%s", name ? json_string_value(name) : r->spec.id);
        json_decref(obj);
        r->kind = RQ_SUBMIT;
}

static void parse_acquire(loom_server *s, srv_req *r, const char *phase, size_t len)
{
        char ph[16];
        snprintf(ph, sizeof ph, "%.*s", (int)(len < 15 ? len : 15), phase);
        if (loom_phase_parse(ph, &r->phase) || r->phase == LOOM_PHASE_SYNC)
                return srv_reply_error(r, 404, "phase", "no phase '%s' (rollout or train)", ph);
        const char *w = req_value(r, false, "wait");
        double wait = 0;
        if (w) {
                char *end;
                errno = 0;
                wait = strtod(w, &end);
                if (errno || end == w || *end || !(wait >= 0) || wait > 1e6)
                        return srv_reply_error(r, 422, "wait",
                                               "'wait' must be a number of seconds >= 0");
        }
        if (wait > s->cfg.max_wait_s)
                wait = s->cfg.max_wait_s;
        r->wait = loom_us_from_s(wait);
        r->kind = RQ_ACQUIRE;
}

static void parse_lease_call(srv_req *r, const char *verb, size_t len)
{
        if (seg_is(verb, len, "heartbeat")) {
                r->kind = RQ_HEARTBEAT;
                return;
        }
        if (seg_is(verb, len, "progress")) {
                json_t *obj = body_object(r, true);
                static const char *const ok[] = {"done", "total", NULL};
                if (!obj)
                        return;
                if (!only_fields(r, obj, ok) && !get_count(r, obj, "done", 0, &r->done) &&
                    !get_count(r, obj, "total", 1, &r->total)) {
                        if (r->done > r->total)
                                srv_reply_error(r, 422, "done",
                                                "'done' (%lld) exceeds 'total' (%lld)",
                                                (long long)r->done, (long long)r->total);
                        else
                                r->kind = RQ_PROGRESS;
                }
                json_decref(obj);
                return;
        }
        if (seg_is(verb, len, "release")) {
                json_t *obj = body_object(r, false);
                static const char *const ok[] = {"status", NULL};
                if (!obj || only_fields(r, obj, ok)) {
                        json_decref(obj);
                        return;
                }
                json_t *st = json_object_get(obj, "status");
                const char *v = json_is_string(st) ? json_string_value(st) : NULL;
                if (!st) {
                        r->ok = true; /* no body: a plain successful release */
                        r->kind = RQ_RELEASE;
                } else if (v && (!strcmp(v, "ok") || !strcmp(v, "failed"))) {
                        r->ok = !strcmp(v, "ok");
                        r->kind = RQ_RELEASE;
                } else {
                        srv_reply_error(r, 422, "status", "'status' must be \"ok\" or \"failed\"");
                }
                json_decref(obj);
                return;
        }
        srv_reply_error(r, 404, "", "no such lease operation");
}

/* POST /v1/jobs/{id}/attach: body {} or {"takeover": false | true | "rollout" | "train"}. */
static void parse_attach(srv_req *r)
{
        json_t *obj = body_object(r, false);
        static const char *const ok[] = {"takeover", NULL};
        if (!obj || only_fields(r, obj, ok)) {
                json_decref(obj);
                return;
        }
        json_t *t = json_object_get(obj, "takeover");
        const char *ph = json_string_value(t);
        if (ph && !loom_phase_parse(ph, &r->phase) && r->phase != LOOM_PHASE_SYNC) {
                r->takeover = 2;
        } else if (!t || json_is_boolean(t)) {
                r->takeover = json_is_true(t);
        } else {
                json_decref(obj);
                return srv_reply_error(r, 422, "takeover",
                                       "'takeover' must be true, false, \"rollout\" or \"train\"");
        }
        r->kind = RQ_ATTACH;
        json_decref(obj);
}

/* Decide what a complete request is. Either r->kind is set (for the scheduler) or a reply is
 * ready. */
void srv_http_route(loom_server *s, srv_req *r, const char *method, const char *url)
{
        const char *seg[7];
        size_t len[7];
        int n = split_path(url, seg, len, 7);
        bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
        bool del = !strcmp(method, "DELETE");
        const char *allowed = NULL;

        if (n == 1 && seg_is(seg[0], len[0], "healthz")) {
                if (get)
                        r->kind = RQ_HEALTH;
                allowed = "GET";
        } else if (n == 1 && seg_is(seg[0], len[0], "metrics")) {
                /* HEAD: a probe that the endpoint answers (MHD sends the headers only) */
                if (get || !strcmp(method, "HEAD"))
                        r->kind = RQ_METRICS;
                allowed = "GET, HEAD";
        } else if (n >= 2 && seg_is(seg[0], len[0], "v1")) {
                if (n == 2 && seg_is(seg[1], len[1], "jobs")) {
                        if (get)
                                srv_list_parse(s, r);
                        else if (post)
                                parse_submit(s, r);
                        allowed = "GET, POST";
                } else if (n == 2 && seg_is(seg[1], len[1], "groups")) {
                        if (get)
                                srv_groups_parse(s, r);
                        allowed = "GET";
                } else if (n == 2 && seg_is(seg[1], len[1], "timeline")) {
                        if (get)
                                srv_dashboard_parse(s, r);
                        allowed = "GET";
                } else if (n == 2 && seg_is(seg[1], len[1], "cluster")) {
                        if (get)
                                r->kind = RQ_CLUSTER;
                        allowed = "GET";
                } else if ((n == 3 || n == 6) && seg_is(seg[1], len[1], "jobs")) {
                        uint64_t id = parse_id(seg[2], len[2]);
                        if (id == 0 || id > UINT32_MAX)
                                return srv_reply_error(r, 404, "id", "no such job");
                        r->job = (uint32_t)id;
                        if (n == 3) {
                                if (get)
                                        r->kind = RQ_GET_JOB;
                                else if (del)
                                        r->kind = RQ_CANCEL;
                                allowed = "GET, DELETE";
                        } else if (seg_is(seg[3], len[3], "phases") &&
                                   seg_is(seg[5], len[5], "acquire")) {
                                if (post)
                                        parse_acquire(s, r, seg[4], len[4]);
                                allowed = "POST";
                        }
                } else if (n == 4 && seg_is(seg[1], len[1], "jobs") &&
                           seg_is(seg[3], len[3], "attach")) {
                        uint64_t id = parse_id(seg[2], len[2]);
                        if (id == 0 || id > UINT32_MAX)
                                return srv_reply_error(r, 404, "id", "no such job");
                        r->job = (uint32_t)id;
                        if (post)
                                parse_attach(r);
                        allowed = "POST";
                } else if (n == 4 && seg_is(seg[1], len[1], "leases")) {
                        uint64_t id = parse_id(seg[2], len[2]);
                        if (id == 0 || id > INT64_MAX / 2)
                                return srv_reply_error(r, 404, "lease", "no such lease");
                        r->lease = (int64_t)id;
                        if (post)
                                parse_lease_call(r, seg[3], len[3]);
                        allowed = "POST";
                }
        }
        if (r->ready || r->kind != RQ_BAD)
                return;
        if (allowed)
                srv_reply_error(r, 405, "", "method %s not allowed here (allowed: %s)", method,
                                allowed);
        else
                srv_reply_error(r, 404, "", "no such resource: %s", url);
}

/* ---- framing (RFC 9112 6.3) ---------------------------------------------------------------- */

typedef struct framing {
        int n_cl, n_te;
        bool te_chunked;
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
        framing *f = cls;
        if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
                f->n_cl++;
        if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
                f->n_te++;
                f->te_chunked = value && !strcasecmp(value, "chunked");
        }
        return MHD_YES;
}

/* The status (400, 501) a request's framing earns, with the sentence in *why; 0 when the body's
 * length is unambiguous. libmicrohttpd reads the first Content-Length and lets a
 * Transfer-Encoding override any, where a proxy in front may read another: a request two hops
 * can split differently is refused, never guessed at. */
static int framing_error(struct MHD_Connection *conn, const char **why)
{
        framing f = {0};
        MHD_get_connection_values(conn, MHD_HEADER_KIND, count_framing, &f);
        if (f.n_cl > 1)
                *why = "more than one Content-Length header";
        else if (f.n_te > 0 && f.n_cl > 0)
                *why = "both Content-Length and Transfer-Encoding";
        else if (f.n_te > 1)
                *why = "more than one Transfer-Encoding header";
        else if (f.n_te == 1 && !f.te_chunked)
                return *why = "only Transfer-Encoding: chunked is supported", 501;
        else
                return 0;
        return 400;
}

/* ---- the guard: a deadline for each connection's next request ----------------------------- */

/* A connection while it owes loomd a whole request: from its opening, and again from each reply
 * on it, until srv_http's handler has the request (then it is the scheduler's, however long a
 * long-poll waits). Owned by the connection (libmicrohttpd's socket context). */
typedef struct conn_watch {
        struct conn_watch *prev, *next;
        struct MHD_Connection *conn;
        loom_us since;
        int fd;
        bool listed;
} conn_watch;

struct srv_http_guard {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t th;
        bool running, stop;
        loom_us limit;            /* cfg.request_timeout_s; 0: no deadline */
        conn_watch *head, *tail;  /* oldest first: since only grows along the list */
        uint64_t cut, cut_logged; /* connections closed for their deadline */
        loom_us next_log;
};

static void watch_unlink(struct srv_http_guard *g, conn_watch *w)
{
        if (!w->listed)
                return;
        if (w->prev)
                w->prev->next = w->next;
        else
                g->head = w->next;
        if (w->next)
                w->next->prev = w->prev;
        else
                g->tail = w->prev;
        w->prev = w->next = NULL;
        w->listed = false;
}

/* (Re)start the connection's deadline now: appended, so the list stays oldest first. */
static void watch_arm(struct srv_http_guard *g, conn_watch *w)
{
        pthread_mutex_lock(&g->mu);
        watch_unlink(g, w);
        w->since = srv_now_mono();
        w->prev = g->tail;
        if (g->tail)
                g->tail->next = w;
        else
                g->head = w;
        g->tail = w;
        w->listed = true;
        pthread_mutex_unlock(&g->mu);
}

static conn_watch *watch_of(struct MHD_Connection *conn)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return ci ? ci->socket_context : NULL;
}

/* The request is in: no deadline until its reply has gone. */
static void watch_received(loom_server *s, struct MHD_Connection *conn)
{
        conn_watch *w = conn ? watch_of(conn) : NULL;
        if (!w || !s->guard)
                return;
        pthread_mutex_lock(&s->guard->mu);
        watch_unlink(s->guard, w);
        pthread_mutex_unlock(&s->guard->mu);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
        loom_server *s = cls;
        struct srv_http_guard *g = s->guard;
        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                conn_watch *w = calloc(1, sizeof *w);
                const union MHD_ConnectionInfo *ci =
                    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
                *socket_context = w;
                if (!w || !ci) /* unwatched: the idle timeout still applies */
                        return;
                w->fd = ci->connect_fd;
                w->conn = conn;
                watch_arm(g, w);
                return;
        }
        conn_watch *w = *socket_context;
        if (w) { /* CLOSED, called before libmicrohttpd closes the descriptor */
                pthread_mutex_lock(&g->mu);
                watch_unlink(g, w);
                pthread_mutex_unlock(&g->mu);
                free(w);
        }
        *socket_context = NULL;
}

/* Cut every connection past its deadline. shutdown(), not close(): libmicrohttpd sees the end
 * of the stream, closes the connection the usual way and frees its slot; the descriptor stays
 * valid because the list is left, under the same mutex, before libmicrohttpd closes it. */
static void *guard_main(void *arg)
{
        loom_server *s = arg;
        struct srv_http_guard *g = s->guard;
        pthread_mutex_lock(&g->mu);
        while (!g->stop) {
                loom_us now = srv_now_mono(), wake = now + LOOM_US_PER_S;
                while (g->head && g->head->since + g->limit <= now) {
                        conn_watch *w = g->head;
                        watch_unlink(g, w);
                        shutdown(w->fd, SHUT_RDWR);
                        g->cut++;
                }
                if (g->head && g->head->since + g->limit < wake)
                        wake = g->head->since + g->limit;
                if (g->cut > g->cut_logged && now >= g->next_log) {
                        /* at most one line a minute, however many are cut */
                        srv_log(s,
                                "closed %llu connections that sent no whole request within %.1f s",
                                (unsigned long long)(g->cut - g->cut_logged),
                                (double)g->limit / LOOM_US_PER_S);
                        g->cut_logged = g->cut;
                        g->next_log = now + 60 * LOOM_US_PER_S;
                }
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                loom_us at = (loom_us)ts.tv_sec * LOOM_US_PER_S + ts.tv_nsec / 1000 + (wake - now);
                ts.tv_sec = (time_t)(at / LOOM_US_PER_S);
                ts.tv_nsec = (long)(at % LOOM_US_PER_S) * 1000;
                pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        }
        pthread_mutex_unlock(&g->mu);
        return NULL;
}

static int guard_start(loom_server *s, loom_err *e)
{
        struct srv_http_guard *g = calloc(1, sizeof *g);
        if (!g)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, &ca);
        pthread_condattr_destroy(&ca);
        g->limit = loom_us_from_s(s->cfg.request_timeout_s);
        s->guard = g;
        if (g->limit > 0 && pthread_create(&g->th, NULL, guard_main, s) != 0)
                return loom_err_set(e, LOOM_EIO, "", "cannot start the connection guard thread");
        g->running = g->limit > 0;
        return 0;
}

/* After libmicrohttpd stopped: every connection is closed and unlisted by then. */
static void guard_stop(loom_server *s)
{
        struct srv_http_guard *g = s->guard;
        if (!g)
                return;
        if (g->running) {
                pthread_mutex_lock(&g->mu);
                g->stop = true;
                pthread_cond_signal(&g->cv);
                pthread_mutex_unlock(&g->mu);
                pthread_join(g->th, NULL);
        }
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        s->guard = NULL;
}

/* ---- a malformed Content-Length ---------------------------------------------------------- */

/* libmicrohttpd answers a Content-Length it cannot parse itself, before loomd sees the request,
 * and before 1.0 it writes that reply's status line and headers twice (after a header-stage
 * error its state machine overwrites the error state and builds the headers again): a garbled
 * reply. It logs the error just before, on its own thread, while that connection is the only
 * one watched whose headers are in (the others still await theirs, or on_request took them):
 * loomd writes the whole 400 (413 for a length too large) there itself and shuts the
 * connection for writing, so libmicrohttpd's copy cannot go out and it closes the connection.
 * Over TLS the bytes are not loomd's to write; that reply stays as the library sends it. */
#if MHD_VERSION < 0x01000000
static void reply_bad_length(loom_server *s, int status)
{
        struct srv_http_guard *g = s->guard;
        const char *body = status == 413 ? "{\"error\":\"Content-Length too large\","
                                           "\"field\":\"Content-Length\"}"
                                         : "{\"error\":\"malformed Content-Length header\","
                                           "\"field\":\"Content-Length\"}";
        char reply[320];
        int n = snprintf(reply, sizeof reply,
                         "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: application/json"
                         "\r\nContent-Length: %zu\r\n\r\n%s",
                         status, status == 413 ? "Content Too Large" : "Bad Request", strlen(body),
                         body);
        pthread_mutex_lock(&g->mu);
        for (conn_watch *w = g->head; w; w = w->next) {
                if (!MHD_get_connection_info(w->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE))
                        continue;
                if (send(w->fd, reply, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) > 0)
                        shutdown(w->fd, SHUT_WR);
                watch_unlink(g, w);
                break;
        }
        pthread_mutex_unlock(&g->mu);
}
#endif

/* libmicrohttpd's error log: none of it is loomd's log; it is read for the one case above. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
#if MHD_VERSION < 0x01000000
        loom_server *s = cls;
        int status = !strncmp(fmt, "Failed to parse `Content-Length'", 32)      ? 400
                     : !strncmp(fmt, "Too large value of 'Content-Length'", 35) ? 413
                                                                                : 0;
        if (status && !s->cfg.tls_cert && s->guard)
                reply_bad_length(s, status);
#endif
}

/* ---- libmicrohttpd callbacks ---------------------------------------------------------------- */

/* close: end the connection after this reply (a request whose framing cannot be trusted
 * leaves no way to find where the next one starts). */
static enum MHD_Result send_reply_close(srv_req *r, bool close)
{
        size_t len = r->body ? strlen(r->body) : 0;
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            len, r->body ? r->body : (void *)"",
            r->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return MHD_NO;
        r->body = NULL; /* owned by resp now */
        if (len)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->ctype);
        char after[16];
        if (r->retry_after_s > 0 && snprintf(after, sizeof after, "%d", r->retry_after_s) > 0)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, after);
        if (r->status == 401)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                        "Bearer realm=\"loomd\"");
        if (close)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)r->status, resp);
        MHD_destroy_response(resp);
        return ret;
}

static enum MHD_Result send_reply(srv_req *r)
{
        return send_reply_close(r, false);
}

static void req_free(srv_req *r)
{
        if (!r)
                return;
        free(r->upload);
        free(r->body);
        json_decref(r->body_json);
        free(r);
}

static bool enqueue_or_refuse(loom_server *s, srv_req *r)
{
        pthread_mutex_lock(&s->mu);
        bool ok = !s->stopping;
        if (ok) {
                /* Suspend before the scheduler can see it: it may resume at once. */
                MHD_suspend_connection(r->conn);
                r->dispatched = true;
                r->qnext = NULL;
                if (s->q_tail)
                        s->q_tail->qnext = r;
                else
                        s->q_head = r;
                s->q_tail = r;
                pthread_cond_signal(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
        loom_server *s = cls;
        srv_req *r = *con_cls;
        if (!r) {
                r = calloc(1, sizeof *r);
                if (!r)
                        return MHD_NO;
                atomic_fetch_add(&s->inflight, 1);
                r->conn = conn;
                r->t_arrival = srv_now_mono();
                *con_cls = r;
                /* Answered at once or read on: either way its deadline has done its work (a
                 * body is bounded by SRV_MAX_BODY and the idle timeout). */
                watch_received(s, conn);
                const char *why;
                int bad = framing_error(conn, &why);
                if (bad) {
                        srv_reply_error(r, bad, "", "%s", why);
                        return send_reply_close(r, true);
                }
                int page = srv_dashboard_serve(conn, method, url); /* public */
                if (page >= 0)
                        return (enum MHD_Result)page;
                const char *cl =
                    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
                if (cl && strtoull(cl, NULL, 10) > SRV_MAX_BODY) {
                        srv_reply_error(r, 413, "", "request body larger than %u bytes",
                                        SRV_MAX_BODY);
                        return send_reply(r);
                }
                /* Before any body is read: an unauthenticated client gets 401 at once. */
                if (!srv_auth_request(s, r, url))
                        return send_reply(r);
                return MHD_YES;
        }
        if (r->ready)
                return send_reply(r);
        if (*upload_data_size) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                if (r->too_big)
                        return MHD_YES;
                if (r->upload_len + n > SRV_MAX_BODY) {
                        r->too_big = true;
                        free(r->upload);
                        r->upload = NULL;
                        r->upload_len = 0;
                        return MHD_YES;
                }
                if (loom_reserve(&r->upload, &r->upload_cap, r->upload_len + n + 1, 1, 4096))
                        return MHD_NO;
                memcpy(r->upload + r->upload_len, upload_data, n);
                r->upload_len += n;
                r->upload[r->upload_len] = '\0';
                return MHD_YES;
        }
        if (r->dispatched)
                return MHD_YES; /* resumed without a reply cannot happen; wait for it */
        if (r->too_big)
                srv_reply_error(r, 413, "", "request body larger than %u bytes", SRV_MAX_BODY);
        else
                srv_http_route(s, r, method, url);
        srv_auth_route(s, r);
        if (r->ready)
                return send_reply(r);
        if (!enqueue_or_refuse(s, r)) {
                srv_reply_error(r, 503, "", "loomd is shutting down");
                return send_reply(r);
        }
        return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
        loom_server *s = cls;
        srv_req *r = *con_cls;
        if (r) {
                req_free(r);
                atomic_fetch_sub(&s->inflight, 1);
        }
        *con_cls = NULL;
        /* Kept alive for a next request: its deadline starts now. (A connection closing is
         * unlisted again by on_connection right after.) */
        conn_watch *w = watch_of(conn);
        if (w && s->guard && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
                watch_arm(s->guard, w);
}

void srv_http_resume(srv_req *r)
{
        MHD_resume_connection(r->conn);
}

int srv_http_bind(loom_server *s, loom_err *e)
{
        return srv_listen_open(s->cfg.listen_host, s->cfg.port, &s->listen_fd, &s->port, e);
}

/* TLS 1.2 and 1.3 only, GnuTLS's usual ciphers within them: 1.0 and 1.1 are deprecated
 * (RFC 8996) and every client loom supports speaks 1.2. */
#define SRV_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

int srv_http_start(loom_server *s, loom_err *e)
{
        unsigned idle = s->cfg.idle_timeout_s < 1 ? 1 : (unsigned)(s->cfg.idle_timeout_s + 0.5);
        const char *cert, *key;
        if (srv_auth_tls(s, &cert, &key, e))
                return LOOM_EIO;
        struct MHD_OptionItem tls[] = {
            {cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)cert},
            {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key},
            {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)SRV_TLS_PRIORITIES},
            {MHD_OPTION_END, 0, NULL},
        };
        if (guard_start(s, e)) {
                guard_stop(s);
                return LOOM_EIO;
        }
        unsigned flags =
            MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
        s->mhd = MHD_start_daemon(flags | (cert ? MHD_USE_TLS : 0), 0, NULL, NULL, on_request, s,
                                  MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, /* first: see there */
                                  MHD_OPTION_ARRAY, tls, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
                                  MHD_OPTION_CONNECTION_TIMEOUT, idle, MHD_OPTION_CONNECTION_LIMIT,
                                  (unsigned)s->cfg.max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                                  (unsigned)s->cfg.max_conns_per_addr, MHD_OPTION_NOTIFY_COMPLETED,
                                  on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                  MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024, MHD_OPTION_END);
        if (!s->mhd) {
                guard_stop(s);
                return loom_err_set(e, LOOM_EIO, cert ? "tls_cert" : "listen",
                                    cert ? "cannot start the HTTPS server (is the key the "
                                           "certificate's, both PEM?)"
                                         : "cannot start the HTTP server");
        }
        return 0;
}

void srv_http_quiesce(loom_server *s)
{
        if (!s->mhd || s->listen_fd < 0)
                return;
        MHD_socket fd = MHD_quiesce_daemon(s->mhd);
        if (fd != MHD_INVALID_SOCKET)
                close(fd);
        s->listen_fd = -1;
}

void srv_http_stop(loom_server *s)
{
        if (s->mhd) {
                /* Give resumed replies a moment to leave before connections are torn down. */
                for (int i = 0; i < 200 && atomic_load(&s->inflight) > 0; i++)
                        usleep(10000);
                MHD_stop_daemon(s->mhd);
                s->mhd = NULL;
        }
        guard_stop(s);
        if (s->listen_fd >= 0) {
                close(s->listen_fd);
                s->listen_fd = -1;
        }
}
