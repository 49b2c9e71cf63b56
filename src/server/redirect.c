/*
 * redirect.c - what a following replica serves on loomd's address (docs/ha.md, "Clients").
 *
 * A follower does not schedule: /healthz says it follows and whom, and every other request is
 * sent to the leader with 307 (same method, path and query, so a client that follows it
 * repeats its POST there) or, while no replica leads, answered 503 with Retry-After. Clients
 * given every replica's URL (LOOM_SERVER / LOOM_URL as a comma-separated list) also simply try
 * the next one. Same address, same TLS certificate as the server that replaces it on
 * promotion; no token is needed for an answer that carries nothing but the leader's URL.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "srv.h"

struct loom_redirector {
        struct MHD_Daemon *d;
        void (*leader)(void *arg, char *buf, size_t cap);
        void *arg;
        char *cert, *key;
};

/* The request's query string again (libmicrohttpd hands it over decoded). */
typedef struct {
        char buf[2048];
        size_t n;
} qbuf;

static void put_enc(qbuf *q, const char *v)
{
        static const char hex[] = "0123456789ABCDEF";
        for (; v && *v && q->n + 4 < sizeof q->buf; v++) {
                unsigned char ch = (unsigned char)*v;
                if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    strchr("-._~", ch)) {
                        q->buf[q->n++] = (char)ch;
                } else {
                        q->buf[q->n++] = '%';
                        q->buf[q->n++] = hex[ch >> 4];
                        q->buf[q->n++] = hex[ch & 15];
                }
        }
        q->buf[q->n] = 0;
}

static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
        qbuf *q = cls;
        if (q->n && q->n + 1 < sizeof q->buf)
                q->buf[q->n++] = '&';
        put_enc(q, key);
        if (value && q->n + 1 < sizeof q->buf) {
                q->buf[q->n++] = '=';
                put_enc(q, value);
        }
        (void)kind;
        return MHD_YES;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **state)
{
        loom_redirector *r = cls;
        if (!*state) { /* the headers: wait for the body (discarded) before answering */
                *state = r;
                return MHD_YES;
        }
        if (*upload_len) {
                *upload_len = 0;
                return MHD_YES;
        }
        char leader[512] = "";
        r->leader(r->arg, leader, sizeof leader);
        bool health = !strcmp(url, "/healthz");
        json_t *j = json_pack("{s:s,s:s,s:o}", "status", health ? "ok" : "follower", "role",
                              "follower", "leader", leader[0] ? json_string(leader) : json_null());
        if (!health)
                json_object_set_new(j, "error",
                                    json_string(leader[0] ? "this replica follows: ask the leader"
                                                          : "no replica leads yet: retry"));
        char *text = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        size_t tn = text ? strlen(text) : 0;
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(tn, text ? text : (char *)"", MHD_RESPMEM_MUST_FREE);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "application/json");
        unsigned status = MHD_HTTP_OK;
        if (!health && leader[0]) {
                char loc[4096];
                qbuf q = {.n = 0};
                MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_arg, &q);
                snprintf(loc, sizeof loc, "%s%s%s%s", leader, url, q.n ? "?" : "", q.buf);
                MHD_add_response_header(resp, "Location", loc);
                status = MHD_HTTP_TEMPORARY_REDIRECT;
        } else if (!health) {
                MHD_add_response_header(resp, "Retry-After", "1");
                status = MHD_HTTP_SERVICE_UNAVAILABLE;
        }
        MHD_add_response_header(resp, "X-Loom-Role", "follower");
        enum MHD_Result ok = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        (void)method;
        (void)version;
        (void)upload;
        return ok;
}

int loom_redirector_start(loom_redirector **out, const loom_server_cfg *cfg,
                          void (*leader)(void *arg, char *buf, size_t cap), void *arg, loom_err *e)
{
        *out = NULL;
        loom_redirector *r = calloc(1, sizeof *r);
        if (!r)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        r->leader = leader;
        r->arg = arg;
        int fd = -1, port = 0;
        int rc = srv_listen_open(cfg->listen_host, cfg->port, &fd, &port, e);
        if (rc) {
                free(r);
                return rc;
        }
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
        if (cfg->tls_cert) {
                if (!(r->cert = srv_read_file(cfg->tls_cert, "tls_cert", e)) ||
                    !(r->key = srv_read_file(cfg->tls_key, "tls_key", e))) {
                        close(fd);
                        loom_redirector_stop(r);
                        return LOOM_EIO;
                }
                flags |= MHD_USE_TLS;
        }
        r->d = cfg->tls_cert
                   ? MHD_start_daemon(flags, 0, NULL, NULL, answer, r, MHD_OPTION_LISTEN_SOCKET, fd,
                                      MHD_OPTION_HTTPS_MEM_CERT, r->cert, MHD_OPTION_HTTPS_MEM_KEY,
                                      r->key, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END)
                   : MHD_start_daemon(flags, 0, NULL, NULL, answer, r, MHD_OPTION_LISTEN_SOCKET, fd,
                                      MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
        if (!r->d) {
                close(fd);
                loom_redirector_stop(r);
                return loom_err_set(e, LOOM_EIO, "listen", "cannot serve on %s:%d",
                                    cfg->listen_host, cfg->port);
        }
        *out = r;
        srv_notify(NULL, "READY"); /* a follower is up: systemd need not wait for it to lead */
        return 0;
}

void loom_redirector_stop(loom_redirector *r)
{
        if (!r)
                return;
        if (r->d)
                MHD_stop_daemon(r->d);
        free(r->cert);
        if (r->key)
                explicit_bzero(r->key, strlen(r->key));
        free(r->key);
        free(r);
}
