/*
 * trace.c - the Philly-style job trace reader (traces/README.md): a CSV with a header naming
 * at least job_id, arrival_s, duration_s and gpus, and optionally a job's explicit profile
 * (t_roll_s, t_train_s, iterations, slo: all four or none). Every row is checked before anything
 * is returned; an error names the file, line and column and the column's name.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

/* The first NREQ columns are required; the others, a job's explicit profile, are optional. */
enum {
        COL_ID,
        COL_ARRIVAL,
        COL_DURATION,
        COL_GPUS,
        NREQ,
        COL_TROLL = NREQ,
        COL_TTRAIN,
        COL_ITER,
        COL_SLO,
        NCOLS
};
static const char *const col_name[NCOLS] = {"job_id",   "arrival_s", "duration_s", "gpus",
                                            "t_roll_s", "t_train_s", "iterations", "slo"};

typedef struct field {
        const char *p;
        size_t len;
        int col; /* 1-based column of its first character */
} field;

/* Split one line (without its newline) at commas; returns the number of fields (<= cap). */
static int split(const char *line, size_t len, field *f, int cap)
{
        int n = 0;
        size_t start = 0;
        for (size_t i = 0; i <= len; i++) {
                if (i == len || line[i] == ',') {
                        if (n < cap)
                                f[n] = (field){line + start, i - start, (int)start + 1};
                        n++;
                        start = i + 1;
                }
        }
        return n;
}

static bool field_is(const field *f, const char *s)
{
        size_t l = f->len;
        while (l > 0 && (f->p[l - 1] == ' ' || f->p[l - 1] == '\r'))
                l--;
        return l == strlen(s) && !memcmp(f->p, s, l);
}

/* Fill e with "file:line:col: column what" and the position. */
static int where(loom_err *e, int code, const char *name, int line, int col, const char *column,
                 const char *what)
{
        loom_err_set(e, code, column, "%s:%d:%d: %s %s", name, line, col, column, what);
        if (e) {
                e->line = line;
                e->col = col;
        }
        return code;
}

static int parse_num(const field *f, double *out)
{
        char buf[64];
        size_t l = f->len;
        while (l > 0 && (f->p[l - 1] == ' ' || f->p[l - 1] == '\r'))
                l--;
        if (l == 0 || l >= sizeof buf)
                return -1;
        memcpy(buf, f->p, l);
        buf[l] = 0;
        char *end;
        errno = 0;
        double v = strtod(buf, &end);
        if (*end || errno || !isfinite(v))
                return -1;
        *out = v;
        return 0;
}

/* Parse the header: where each needed column is. */
static int parse_header(const char *line, size_t len, const char *name, int *pos, int *ncols,
                        loom_err *e)
{
        field f[64];
        int n = split(line, len, f, 64);
        *ncols = n;
        for (int c = 0; c < NCOLS; c++) {
                pos[c] = -1;
                for (int i = 0; i < n && i < 64; i++)
                        if (field_is(&f[i], col_name[c]))
                                pos[c] = i;
                if (pos[c] < 0 && c < NREQ)
                        return where(e, LOOM_EINVAL, name, 1, 1, col_name[c],
                                     "column is missing from the header");
        }
        /* An explicit profile is all four columns or none. */
        for (int c = NREQ + 1; c < NCOLS; c++)
                if ((pos[c] < 0) != (pos[NREQ] < 0))
                        return where(e, LOOM_EINVAL, name, 1, 1, col_name[pos[c] < 0 ? c : NREQ],
                                     "column is missing from the header (t_roll_s, t_train_s, "
                                     "iterations and slo go together)");
        return 0;
}

static int parse_row(const char *line, size_t len, const char *name, int lineno, const int *pos,
                     loom_sim_trace_row *row, loom_sim_trace_profile *prof, loom_err *e)
{
        field f[64];
        int n = split(line, len, f, 64);
        for (int c = 0; c < NCOLS; c++)
                if (pos[c] >= n)
                        return where(e, LOOM_EINVAL, name, lineno, (int)len + 1, col_name[c],
                                     "is missing (the row has too few columns)");
        const field *id = &f[pos[COL_ID]];
        size_t idl = id->len < LOOM_JOB_ID_MAX - 1 ? id->len : LOOM_JOB_ID_MAX - 1;
        memcpy(row->id, id->p, idl);
        row->id[idl] = 0;
        double v[NCOLS] = {0};
        for (int c = COL_ARRIVAL; c < NCOLS; c++)
                if (pos[c] >= 0 && parse_num(&f[pos[c]], &v[c]))
                        return where(e, LOOM_EINVAL, name, lineno, f[pos[c]].col, col_name[c],
                                     "is not a number");
        if (v[COL_ARRIVAL] < 0)
                return where(e, LOOM_EINVAL, name, lineno, f[pos[COL_ARRIVAL]].col, "arrival_s",
                             "must be >= 0");
        if (v[COL_DURATION] <= 0)
                return where(e, LOOM_EINVAL, name, lineno, f[pos[COL_DURATION]].col, "duration_s",
                             "must be > 0");
        if (v[COL_GPUS] < 1 || v[COL_GPUS] > 4096 || v[COL_GPUS] != (int)v[COL_GPUS])
                return where(e, LOOM_EINVAL, name, lineno, f[pos[COL_GPUS]].col, "gpus",
                             "must be a whole number in 1..4096");
        for (int c = COL_TROLL; c <= COL_TTRAIN; c++)
                if (pos[c] >= 0 && !(v[c] > 0 && v[c] <= 1e7))
                        return where(e, LOOM_EINVAL, name, lineno, f[pos[c]].col, col_name[c],
                                     "must be > 0 and <= 1e7 seconds");
        if (pos[COL_ITER] >= 0 &&
            (v[COL_ITER] < 1 || v[COL_ITER] > 1e9 || v[COL_ITER] != (int64_t)v[COL_ITER]))
                return where(e, LOOM_EINVAL, name, lineno, f[pos[COL_ITER]].col, "iterations",
                             "must be a whole number in 1..1e9");
        if (pos[COL_SLO] >= 0 && !(v[COL_SLO] >= 1 && v[COL_SLO] <= 1000))
                return where(e, LOOM_EINVAL, name, lineno, f[pos[COL_SLO]].col, "slo",
                             "must be in 1..1000");
        prof->t_roll_s = v[COL_TROLL];
        prof->t_train_s = v[COL_TTRAIN];
        prof->iterations = (int64_t)v[COL_ITER];
        prof->slo = v[COL_SLO];
        row->arrival_s = v[COL_ARRIVAL];
        row->duration_s = v[COL_DURATION];
        row->gpus = (int)v[COL_GPUS];
        return 0;
}

/* The kept rows into *out and, where profs is given, their profiles into *profs (NULL when the
 * trace has no profile columns). */
static int parse(const char *text, size_t len, const char *name, int start, int count,
                 loom_sim_trace *out, loom_sim_trace_profile **profs, loom_err *e)
{
        memset(out, 0, sizeof *out);
        if (profs)
                *profs = NULL;
        if (start < 0)
                return loom_err_set(e, LOOM_EINVAL, "rows", "rows: start must be >= 0");
        int pos[NCOLS], ncols, lineno = 0, row = 0, rc = 0;
        size_t cap = 0, pcap = 0;
        loom_sim_trace_profile *pr = NULL;
        loom_sim_trace t = {0};
        size_t i = 0;
        bool header = false;
        while (i < len) {
                size_t j = i;
                while (j < len && text[j] != '\n')
                        j++;
                lineno++;
                size_t l = j - i;
                bool blank = l == 0 || (l == 1 && text[i] == '\r');
                if (!header) {
                        if ((rc = parse_header(text + i, l, name, pos, &ncols, e)))
                                goto fail;
                        header = true;
                } else if (!blank) {
                        loom_sim_trace_row r;
                        loom_sim_trace_profile p;
                        if ((rc = parse_row(text + i, l, name, lineno, pos, &r, &p, e)))
                                goto fail;
                        if (row >= start && (count < 0 || t.n < count)) {
                                if (loom_reserve(&t.rows, &cap, (size_t)t.n + 1, sizeof *t.rows,
                                                 256) ||
                                    (profs && pos[COL_TROLL] >= 0 &&
                                     loom_reserve(&pr, &pcap, (size_t)t.n + 1, sizeof *pr, 256))) {
                                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                                        goto fail;
                                }
                                if (pr)
                                        pr[t.n] = p;
                                t.rows[t.n++] = r;
                        }
                        row++;
                }
                i = j + 1;
        }
        if (!header) {
                rc = loom_err_set(e, LOOM_EINVAL, "job_id", "%s: empty trace (no header)", name);
                goto fail;
        }
        if (t.n == 0 || (count > 0 && t.n < count)) {
                rc = loom_err_set(e, LOOM_EINVAL, "rows",
                                  "%s: rows %d:%d asked for, the trace has %d data rows", name,
                                  start, count, row);
                goto fail;
        }
        double t0 = t.rows[0].arrival_s;
        for (int k = 0; k < t.n; k++) {
                if (t.rows[k].arrival_s < t0)
                        t0 = t.rows[k].arrival_s;
        }
        for (int k = 0; k < t.n; k++)
                t.rows[k].arrival_s -= t0;
        *out = t;
        if (profs)
                *profs = pr;
        return 0;
fail:
        free(t.rows);
        free(pr);
        return rc;
}

int loom_sim_trace_parse(const char *text, size_t len, const char *name, int start, int count,
                         loom_sim_trace *out, loom_err *e)
{
        return parse(text, len, name, start, count, out, NULL, e);
}

static int load(const char *path, int start, int count, loom_sim_trace *out,
                loom_sim_trace_profile **profs, loom_err *e)
{
        memset(out, 0, sizeof *out);
        FILE *f = fopen(path, "rb");
        if (!f)
                return loom_err_set(e, LOOM_EIO, "trace", "%s: %s", path, strerror(errno));
        size_t cap = 1 << 16, len = 0;
        char *buf = malloc(cap);
        size_t got;
        while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
                len += got;
                if (len == cap) {
                        char *nb = realloc(buf, cap *= 2);
                        if (!nb) {
                                free(buf);
                                buf = NULL;
                        }
                        buf = nb;
                }
        }
        bool err = ferror(f);
        fclose(f);
        if (!buf)
                return loom_err_set(e, LOOM_ENOMEM, "trace", "out of memory reading %s", path);
        if (err) {
                free(buf);
                return loom_err_set(e, LOOM_EIO, "trace", "%s: read error", path);
        }
        int rc = parse(buf, len, path, start, count, out, profs, e);
        free(buf);
        return rc;
}

int loom_sim_trace_load(const char *path, int start, int count, loom_sim_trace *out, loom_err *e)
{
        return load(path, start, count, out, NULL, e);
}

int loom_sim_trace_profiles_load(const char *path, int start, int count,
                                 loom_sim_trace_profile **out, loom_err *e)
{
        loom_sim_trace t;
        int rc = load(path, start, count, &t, out, e);
        loom_sim_trace_free(&t);
        return rc;
}

void loom_sim_trace_free(loom_sim_trace *t)
{
        if (!t)
                return;
        free(t->rows);
        memset(t, 0, sizeof *t);
}
