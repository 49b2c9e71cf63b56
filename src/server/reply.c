/*
 * reply.c - a request's answer as the handlers set it (status, body, content type), to be sent
 * by http.c once the batch that made it is committed. The bottom of src/server
 * (docs/architecture.md): it knows requests, not the server.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

void srv_reply_text(srv_req *r, int status, char *text, const char *ctype)
{
        free(r->body);
        r->status = status;
        r->body = text;
        r->ctype = ctype;
        r->ready = true;
}

void srv_reply_json(srv_req *r, int status, json_t *j)
{
        char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(12)) : NULL;
        json_decref(j);
        if (j && !text) {
                status = 500;
                text = strdup("{\"error\":\"out of memory\",\"field\":\"\"}");
        }
        srv_reply_text(r, status, text, "application/json");
}

static bool utf8_ok(const char *s)
{
        json_t *j = json_string(s);
        json_decref(j);
        return j != NULL;
}

void srv_reply_error(srv_req *r, int status, const char *field, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        json_t *j = json_pack("{s:s,s:s}", "error", msg, "field", field);
        if (!j) { /* the message quotes bytes of the request that are not UTF-8 */
                for (char *c = msg; *c; c++)
                        *c = (unsigned char)*c < 0x80 ? *c : '?';
                j = json_pack("{s:s,s:s}", "error", msg, "field", utf8_ok(field) ? field : "?");
        }
        srv_reply_json(r, status, j);
}

void srv_reply_loom_err(srv_req *r, int status, const loom_err *e)
{
        json_t *j = json_pack("{s:s,s:s}", "error", e->msg, "field", e->field);
        if (!j) { /* a message quoting bytes of the request that are not UTF-8 */
                char msg[sizeof e->msg];
                snprintf(msg, sizeof msg, "%s", e->msg);
                for (char *c = msg; *c; c++)
                        *c = (unsigned char)*c < 0x80 ? *c : '?';
                j = json_pack("{s:s,s:s}", "error", msg, "field",
                              utf8_ok(e->field) ? e->field : "?");
        }
        if (j && e->line > 0) {
                json_object_set_new(j, "line", json_integer(e->line));
                json_object_set_new(j, "col", json_integer(e->col));
        }
        srv_reply_json(r, status, j);
}
