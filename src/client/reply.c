/*
 * reply.c - what the C client believes of loomd's replies (reply.h). The bytes come from the
 * network, so every number is range-checked before it becomes a job id, a lease id or a count:
 * an id that does not fit is a protocol error, never silently wrapped into another job's, and
 * the heartbeat period derived from a lease's timeout stays within what a lease can be.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "reply.h"

static int proto(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int proto(char *err, size_t n, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
        return LOOM_EPROTO;
}

static json_t *object(const char *body)
{
        json_error_t je;
        json_t *j = body ? json_loads(body, 0, &je) : NULL;
        if (j && !json_is_object(j)) {
                json_decref(j);
                j = NULL;
        }
        return j;
}

/* An integer member in [lo, hi]. */
static bool int_in(json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *out)
{
        json_t *v = json_object_get(o, key);
        if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
                return false;
        *out = json_integer_value(v);
        return true;
}

/* An optional integer member: 0 when absent, the value when in [lo, hi], else false. */
/* An optional integer: absent or null (loomd's resume_iteration of a job that has ended) is 0. */
static bool opt_int(json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *out)
{
        *out = 0;
        json_t *v = json_object_get(o, key);
        return !v || json_is_null(v) || int_in(o, key, lo, hi, out);
}

static void copy_str(char *dst, size_t n, json_t *v)
{
        const char *s = json_string_value(v);
        snprintf(dst, n, "%s", s ? s : "");
}

int loom__client_parse_submit(const char *body, uint32_t *job, char *err, size_t n)
{
        json_t *j = object(body);
        json_int_t id = 0;
        *job = 0;
        bool ok = j && int_in(j, "id", 1, UINT32_MAX, &id);
        json_decref(j);
        if (!ok)
                return proto(err, n, "submit: reply has no job id in 1..%u", UINT32_MAX);
        *job = (uint32_t)id;
        return 0;
}

int loom__client_parse_lease(const char *body, loom_client_lease *l, char *err, size_t n)
{
        memset(l, 0, sizeof *l);
        json_t *j = object(body);
        json_t *nodes = json_object_get(j, "nodes");
        json_int_t id, job, gpus, it;
        json_t *to = json_object_get(j, "lease_timeout_s");
        double timeout = json_number_value(to);
        bool ok = j && json_is_array(nodes) && int_in(j, "lease", 1, INT64_MAX, &id) &&
                  int_in(j, "job", 1, UINT32_MAX, &job) && opt_int(j, "gpus", 0, 1 << 20, &gpus) &&
                  opt_int(j, "iteration", 0, INT64_MAX, &it) &&
                  (!to || (json_is_number(to) && timeout >= 0 && timeout <= 1e6));
        for (size_t i = 0; ok && i < json_array_size(nodes); i++) {
                json_int_t node;
                json_t *one = json_array_get(nodes, i);
                ok = json_is_integer(one) && (node = json_integer_value(one)) >= 0 &&
                     node <= UINT32_MAX;
                if (ok && l->n_nodes < 32)
                        l->nodes[l->n_nodes++] = (uint32_t)node;
        }
        if (ok) {
                l->id = id;
                l->job = (uint32_t)job;
                copy_str(l->phase, sizeof l->phase, json_object_get(j, "phase"));
                l->gpus = (int)gpus;
                l->timeout_s = timeout;
                l->iteration = it;
        }
        json_decref(j);
        if (!ok) {
                memset(l, 0, sizeof *l);
                return proto(err, n, "acquire: malformed lease in reply");
        }
        return 0;
}

int loom__client_parse_resume(const char *body, loom_client_resume *out, char *err, size_t n)
{
        memset(out, 0, sizeof *out);
        json_t *j = object(body);
        json_t *state = json_object_get(j, "state");
        json_int_t its, done, resume, restarts, maxr, resub;
        bool ok = json_is_string(state) && opt_int(j, "iterations", 0, INT64_MAX, &its) &&
                  opt_int(j, "iterations_done", 0, INT64_MAX, &done) &&
                  opt_int(j, "resume_iteration", 0, INT64_MAX, &resume) &&
                  opt_int(j, "restarts", 0, INT32_MAX, &restarts) &&
                  opt_int(j, "max_restarts", 0, INT32_MAX, &maxr) &&
                  opt_int(j, "resubmits", 0, INT32_MAX, &resub);
        if (ok) {
                copy_str(out->state, sizeof out->state, state);
                copy_str(out->next_phase, sizeof out->next_phase, json_object_get(j, "next_phase"));
                out->iterations = its;
                out->iterations_done = done;
                out->resume_iteration = resume;
                out->restarts = (int)restarts;
                out->max_restarts = (int)maxr;
                out->resubmits = (int)resub;
                out->took_over = json_is_true(json_object_get(j, "took_over"));
        }
        json_decref(j);
        return ok ? 0 : proto(err, n, "attach: malformed job in reply");
}

int loom__client_parse_progress(const char *body, int *keep_gpus)
{
        json_t *j = object(body);
        const char *action = json_string_value(json_object_get(j, "action"));
        json_int_t keep = 0;
        int rc =
            action && !strcmp(action, "migrate_tail") && opt_int(j, "keep_gpus", 0, 1 << 20, &keep);
        if (rc && keep_gpus)
                *keep_gpus = (int)keep;
        json_decref(j);
        return rc;
}

int loom__client_parse_error(int status, const char *body, char *err, size_t n)
{
        json_t *j = object(body);
        const char *msg = json_string_value(json_object_get(j, "error"));
        const char *field = json_string_value(json_object_get(j, "field"));
        if (msg && field && *field)
                snprintf(err, n, "HTTP %d: %s: %s", status, field, msg);
        else
                snprintf(err, n, "HTTP %d: %s", status, msg ? msg : "(no message)");
        int rc;
        switch (status) {
        case 400:
        case 413:
                rc = LOOM_EINVAL;
                break;
        case 422: /* a refused admission carries the decision; any other 422 is a bad request */
                rc = json_object_get(j, "decision") ? LOOM_EREJECT : LOOM_EINVAL;
                break;
        case 404:
        case 410:
                rc = LOOM_ENOENT;
                break;
        case 409:
                rc = LOOM_ESTATE;
                break;
        default:
                rc = LOOM_EPROTO;
        }
        json_decref(j);
        return rc;
}
