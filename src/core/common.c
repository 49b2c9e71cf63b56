/* common.c - error codes, the error buffer, growable arrays and quantiles. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/common.h"

const char *loom_strerror(int code)
{
        switch (code) {
        case LOOM_OK:
                return "ok";
        case LOOM_EINVAL:
                return "invalid argument";
        case LOOM_ENOMEM:
                return "out of memory";
        case LOOM_ENOENT:
                return "no such object";
        case LOOM_ESTATE:
                return "not valid in the current state";
        case LOOM_EREJECT:
                return "rejected";
        case LOOM_EIO:
                return "input/output error";
        case LOOM_ERANGE:
                return "out of range";
        case LOOM_ECORRUPT:
                return "corrupt data";
        case LOOM_ETIMEDOUT:
                return "timed out";
        case LOOM_EEXIST:
                return "already exists";
        case LOOM_EPROTO:
                return "protocol error";
        default:
                return "unknown error";
        }
}

void loom_err_clear(loom_err *e)
{
        if (e)
                memset(e, 0, sizeof *e);
}

int loom_err_set(loom_err *e, int code, const char *field, const char *fmt, ...)
{
        if (!e)
                return code;
        snprintf(e->field, sizeof e->field, "%s", field ? field : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        return code;
}

int loom_reserve(void *arrp, size_t *cap, size_t need, size_t size, size_t first)
{
        if (need <= *cap)
                return 0;
        size_t n = *cap ? *cap : (first ? first : 1);
        while (n < need) {
                if (n > SIZE_MAX / 2 / size)
                        return LOOM_ENOMEM;
                n *= 2;
        }
        void *old;
        memcpy(&old, arrp, sizeof old);
        void *p = realloc(old, n * size);
        if (!p)
                return LOOM_ENOMEM;
        memcpy(arrp, &p, sizeof p);
        *cap = n;
        return 0;
}

double loom_quantile(const double *v, size_t n, double q)
{
        double pos = q * (double)(n - 1);
        size_t i = (size_t)pos;
        if (i >= n - 1)
                return v[n - 1];
        return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

double loom_quantile_rank(const double *v, size_t n, double q)
{
        size_t i = (size_t)ceil(q * (double)n);
        i = i > 0 ? i - 1 : 0;
        return v[i < n ? i : n - 1];
}

int loom_cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}
