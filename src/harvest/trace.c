/*
 * trace.c - serving traces: CSV with TIMESTAMP,ContextTokens,GeneratedTokens (the Azure LLM
 * inference trace format). TIMESTAMP is "YYYY-MM-DD HH:MM:SS[.fraction]" or seconds; arrivals
 * are shifted so the first request comes at 0 and must not go backwards.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/harvest.h"

static int bad(loom_err *e, const char *path, int line, int col, const char *field,
               const char *what)
{
        int rc =
            loom_err_set(e, LOOM_EINVAL, field, "%s:%d:%d: %s: %s", path, line, col, field, what);
        if (e) {
                e->line = line;
                e->col = col;
        }
        return rc;
}

/* Seconds since the epoch (UTC) of a timestamp, or plain seconds. */
static int parse_time(const char *s, double *out)
{
        int Y, M, D, h, m;
        double sec;
        char tail;
        if (sscanf(s, "%d-%d-%d %d:%d:%lf%c", &Y, &M, &D, &h, &m, &sec, &tail) == 6) {
                if (M < 1 || M > 12 || D < 1 || D > 31 || h < 0 || h > 23 || m < 0 || m > 59 ||
                    sec < 0 || sec >= 61)
                        return -1;
                struct tm tm = {.tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D};
                *out = (double)timegm(&tm) + h * 3600.0 + m * 60.0 + sec;
                return 0;
        }
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || *end || !(v >= 0))
                return -1;
        *out = v;
        return 0;
}

static int parse_count(const char *s, uint32_t *out)
{
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || *end || v < 0 || v > 10000000)
                return -1;
        *out = (uint32_t)v;
        return 0;
}

int loom_harvest_trace_load(const char *path, loom_harvest_trace *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        FILE *f = fopen(path, "r");
        if (!f)
                return loom_err_set(e, LOOM_EIO, "trace", "%s: %s", path, strerror(errno));
        char *line = NULL;
        size_t lcap = 0, cap = 0;
        ssize_t len;
        int ln = 0, rc = 0;
        double t0 = 0, prev = 0;
        loom_harvest_trace t = {0};
        while ((len = getline(&line, &lcap, f)) >= 0) {
                ln++;
                while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                        line[--len] = 0;
                if (ln == 1) {
                        if (strcmp(line, "TIMESTAMP,ContextTokens,GeneratedTokens")) {
                                rc = bad(e, path, 1, 1, "header",
                                         "expected TIMESTAMP,ContextTokens,GeneratedTokens");
                                break;
                        }
                        continue;
                }
                if (len == 0)
                        continue;
                char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
                if (!c1 || !c2 || strchr(c2 + 1, ',')) {
                        rc = bad(e, path, ln, 1, "row", "expected three comma-separated fields");
                        break;
                }
                *c1 = *c2 = 0;
                double ts;
                loom_harvest_req r;
                if (parse_time(line, &ts)) {
                        rc = bad(e, path, ln, 1, "TIMESTAMP", "not a timestamp or seconds");
                        break;
                }
                if (parse_count(c1 + 1, &r.prompt) || r.prompt == 0) {
                        rc = bad(e, path, ln, (int)(c1 - line) + 2, "ContextTokens",
                                 "not a positive token count");
                        break;
                }
                if (parse_count(c2 + 1, &r.gen)) {
                        rc = bad(e, path, ln, (int)(c2 - line) + 2, "GeneratedTokens",
                                 "not a token count");
                        break;
                }
                if (t.n == 0)
                        t0 = prev = ts;
                if (ts < prev) {
                        rc = bad(e, path, ln, 1, "TIMESTAMP", "goes backwards");
                        break;
                }
                prev = ts;
                if (r.gen == 0)
                        r.gen = 1;
                r.arrival = loom_us_from_s(ts - t0);
                if (loom_reserve(&t.reqs, &cap, t.n + 1, sizeof *t.reqs, 1024)) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "trace", "out of memory");
                        break;
                }
                t.reqs[t.n++] = r;
        }
        free(line);
        fclose(f);
        if (rc == 0 && t.n == 0)
                rc = bad(e, path, ln > 0 ? ln : 1, 1, "trace", "no requests");
        if (rc) {
                free(t.reqs);
                return rc;
        }
        *out = t;
        return 0;
}

void loom_harvest_trace_free(loom_harvest_trace *t)
{
        if (!t)
                return;
        free(t->reqs);
        t->reqs = NULL;
        t->n = 0;
}
