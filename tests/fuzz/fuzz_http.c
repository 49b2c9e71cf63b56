/*
 * fuzz_http.c - libFuzzer target for loomd's request handling without a socket: the input is
 * one HTTP request as text,
 *
 *     METHOD SP URL[?QUERY] LF  (Header: value LF)*  LF  BODY
 *
 * and goes through srv_http_route, the function libmicrohttpd's callback hands every complete
 * request to: routing, ids in the path, query arguments (wait, explain), headers
 * (Idempotency-Key) and the JSON bodies of submit, progress, release and attach, decoded with
 * the spec codec. A request is either queued for the scheduler with its arguments in range, or
 * answered at once with a status and a JSON error naming the field.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "loom/spec.h"
#include "server/srv.h"

#define MAX_ARGS 16

typedef struct fake {
        char *hk[MAX_ARGS], *hv[MAX_ARGS];
        int nh;
        char *qk[MAX_ARGS], *qv[MAX_ARGS];
        int nq;
} fake;

static loom_server *srv;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        srv = calloc(1, sizeof *srv);
        if (!srv)
                abort();
        loom_server_cfg_default(&srv->cfg);
        return 0;
}

static const char *lookup(const srv_req *r, int header, const char *key)
{
        const fake *f = r->value_arg;
        for (int i = 0; header && i < f->nh; i++)
                if (!strcasecmp(f->hk[i], key))
                        return f->hv[i];
        for (int i = 0; !header && i < f->nq; i++)
                if (!strcmp(f->qk[i], key))
                        return f->qv[i];
        return NULL;
}

static int hexval(char c)
{
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

/* In place, as libmicrohttpd does for query arguments: %XX and '+'. */
static void unescape(char *s)
{
        char *o = s;
        for (; *s; s++) {
                if (*s == '+') {
                        *o++ = ' ';
                } else if (*s == '%' && hexval(s[1]) >= 0 && hexval(s[2]) >= 0) {
                        *o++ = (char)(hexval(s[1]) * 16 + hexval(s[2]));
                        s += 2;
                } else {
                        *o++ = *s;
                }
        }
        *o = '\0';
}

static void parse_query(fake *f, char *q)
{
        for (char *save = NULL, *kv = strtok_r(q, "&", &save); kv && f->nq < MAX_ARGS;
             kv = strtok_r(NULL, "&", &save)) {
                char *eq = strchr(kv, '=');
                if (eq)
                        *eq = '\0';
                unescape(kv);
                f->qk[f->nq] = kv;
                f->qv[f->nq] = eq ? eq + 1 : kv + strlen(kv);
                unescape(f->qv[f->nq++]);
        }
}

/* Request line and headers of text (NUL-terminated, modified); returns the body. */
static char *parse_head(char *text, char **method, char **url, fake *f)
{
        char *nl = strchr(text, '\n');
        if (!nl)
                return NULL;
        *nl = '\0';
        char *sp = strchr(text, ' ');
        if (!sp)
                return NULL;
        *sp = '\0';
        *method = text;
        *url = sp + 1;
        char *q = strchr(*url, '?');
        if (q) {
                *q = '\0';
                parse_query(f, q + 1);
        }
        char *line = nl + 1;
        while ((nl = strchr(line, '\n')) && nl != line) {
                *nl = '\0';
                char *colon = strchr(line, ':');
                if (colon && f->nh < MAX_ARGS) {
                        *colon = '\0';
                        f->hk[f->nh] = line;
                        f->hv[f->nh++] = colon[1] == ' ' ? colon + 2 : colon + 1;
                }
                line = nl + 1;
        }
        return nl ? nl + 1 : line + strlen(line);
}

static void check(const srv_req *r)
{
        if (r->ready) {
                /* answered here: a status with a JSON error naming the field */
                if (r->status < 400 || r->status > 599 || !r->body)
                        abort();
                json_error_t je;
                json_t *j = json_loads(r->body, 0, &je);
                if (!j || !json_is_string(json_object_get(j, "error")) ||
                    !json_is_string(json_object_get(j, "field")))
                        abort();
                json_decref(j);
                return;
        }
        switch (r->kind) {
        case RQ_BAD:
                abort(); /* neither queued nor answered */
        case RQ_SUBMIT:
                if (loom_job_spec_validate(&r->spec, &srv->cfg.cluster, &(loom_err){0}))
                        abort();
                break;
        case RQ_ACQUIRE:
                if (r->wait < 0 || r->wait > loom_us_from_s(srv->cfg.max_wait_s))
                        abort();
                break;
        case RQ_PROGRESS:
                if (r->done < 0 || r->total < 1 || r->done > r->total)
                        abort();
                break;
        default:
                break;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size > SRV_MAX_BODY + 4096)
                return 0;
        /* the head is text up to its blank line; the body is the bytes after it, as sent */
        const uint8_t *blank = memmem(data, size, "\n\n", 2);
        size_t hlen = blank ? (size_t)(blank - data) + 1 : size;
        if (memchr(data, 0, hlen))
                return 0;
        char *head = malloc(hlen + 2);
        if (!head)
                return 0;
        memcpy(head, data, hlen);
        head[hlen] = '\n';
        head[hlen + 1] = '\0';
        fake f = {0};
        char *method, *url;
        if (!parse_head(head, &method, &url, &f)) {
                free(head);
                return 0;
        }
        srv_req *r = calloc(1, sizeof *r);
        if (!r)
                abort();
        r->value = lookup;
        r->value_arg = &f;
        size_t off = blank ? hlen + 1 : size, blen = size - off;
        if (blen) { /* exactly the body's bytes, NUL-terminated as http.c stores an upload */
                r->upload = malloc(blen + 1);
                memcpy(r->upload, data + off, blen);
                r->upload[blen] = '\0';
                r->upload_len = blen;
        }
        srv_http_route(srv, r, method, url);
        check(r);
        free(r->upload);
        free(r->body);
        json_decref(r->body_json);
        free(r);
        free(head);
        return 0;
}
