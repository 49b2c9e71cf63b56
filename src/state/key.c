/*
 * key.c - canonical keys: dtypes, checks, tier names, and the key of a src/sync tensor shard.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "loom/sync.h"

static const struct {
        const char *name;
        size_t size;
} dtypes[] = {{"bf16", 2}, {"f16", 2}, {"f32", 4}, {"f64", 8}, {"i8", 1},
              {"u8", 1},   {"i16", 2}, {"i32", 4}, {"i64", 8}};

double loom__state_now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int loom_state_parse_bytes(const char *text, uint64_t *out)
{
        static const char suffixes[] = "kmgtp";
        char *end;
        errno = 0;
        double x = strtod(text, &end);
        double mul = 1;
        const char *s = *end ? strchr(suffixes, tolower((unsigned char)*end)) : NULL;
        if (s) {
                mul = ldexp(1.0, 10 * (int)(s - suffixes + 1));
                end++;
        }
        if (errno || end == text || *end || text[0] == '-' || text[0] == '+' || !(x >= 0) ||
            x * mul > ldexp(1.0, 60))
                return LOOM_EINVAL;
        *out = (uint64_t)(x * mul);
        return 0;
}

size_t loom_state_dtype_size(const char *dtype)
{
        for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
                if (strcmp(dtype, dtypes[i].name) == 0)
                        return dtypes[i].size;
        return 0;
}

uint64_t loom_state_key_bytes(const loom_state_key *k)
{
        return (k->r1 - k->r0) * (k->c1 - k->c0) * loom_state_dtype_size(k->dtype);
}

static int bounded(const char *s, size_t cap)
{
        return memchr(s, '\0', cap) != NULL;
}

/* A job name goes into DIR/owners as the rest of a "uid job" line and into the daemon's log, so
 * a byte that ends or rewrites a line there (a newline, a carriage return, an escape) must never
 * be part of one: a name with a control character is refused rather than written. */
int loom__state_job_check(const char *job, size_t cap, const char *field, loom_err *e)
{
        if (!job || !bounded(job, cap) || !job[0])
                return loom_err_set(e, LOOM_EINVAL, field, "job must be 1..%zu characters",
                                    cap - 1);
        for (size_t i = 0; job[i]; i++) {
                unsigned char ch = (unsigned char)job[i];
                if (ch == '/')
                        return loom_err_set(e, LOOM_EINVAL, field, "job must not contain '/'");
                if (ch < 0x20 || ch == 0x7f)
                        return loom_err_set(e, LOOM_EINVAL, field,
                                            "job must not contain control characters (byte "
                                            "0x%02x at offset %zu)",
                                            ch, i);
        }
        return 0;
}

int loom_state_key_check(const loom_state_key *k, const char *field, loom_err *e)
{
        int rc = loom__state_job_check(k->job, sizeof k->job, field, e);
        if (rc)
                return rc;
        if (!bounded(k->name, sizeof k->name) || !k->name[0])
                return loom_err_set(e, LOOM_EINVAL, field, "name must be 1..%zu characters",
                                    sizeof k->name - 1);
        if (!bounded(k->dtype, sizeof k->dtype) || !loom_state_dtype_size(k->dtype))
                return loom_err_set(e, LOOM_EINVAL, field,
                                    "dtype must be one of bf16 f16 f32 f64 i8 u8 i16 i32 i64");
        if (k->r1 <= k->r0 || k->c1 <= k->c0)
                return loom_err_set(e, LOOM_EINVAL, field, "slice [%llu:%llu, %llu:%llu] is empty",
                                    (unsigned long long)k->r0, (unsigned long long)k->r1,
                                    (unsigned long long)k->c0, (unsigned long long)k->c1);
        if (k->r1 - k->r0 > (UINT64_C(1) << 40) / (k->c1 - k->c0))
                return loom_err_set(e, LOOM_ERANGE, field, "slice larger than 1 Ti elements");
        return 0;
}

void loom_state_key_flat(loom_state_key *k, const char *job, uint64_t version, const char *name,
                         uint64_t n, const char *dtype)
{
        memset(k, 0, sizeof *k);
        snprintf(k->job, sizeof k->job, "%s", job);
        k->version = version;
        snprintf(k->name, sizeof k->name, "%s", name);
        k->r1 = n;
        k->c1 = 1;
        snprintf(k->dtype, sizeof k->dtype, "%s", dtype);
}

int loom_state_key_for(loom_state_key *k, const char *job, uint64_t version,
                       const struct loom_sync_tensor *t, uint32_t rank, uint32_t tp, loom_err *e)
{
        loom_sync_rect r;
        if (loom_sync_slice(t, rank, tp, &r) != 0)
                return loom_err_set(e, LOOM_EINVAL, "rank", "rank %u of tp=%u does not slice %s",
                                    rank, tp, t->name);
        loom_state_key_flat(k, job, version, t->name, 1, "bf16");
        k->r0 = r.r0, k->r1 = r.r1, k->c0 = r.c0, k->c1 = r.c1;
        return 0;
}

const char *loom_state_tier_name(loom_state_tier t)
{
        switch (t) {
        case LOOM_STATE_DEVICE:
                return "device";
        case LOOM_STATE_HOST:
                return "host";
        case LOOM_STATE_DISK:
                return "disk";
        default:
                return "none";
        }
}

int loom_state_tier_parse(const char *s, loom_state_tier *out)
{
        for (int t = LOOM_STATE_DEVICE; t <= LOOM_STATE_DISK; t++)
                if (strcmp(s, loom_state_tier_name((loom_state_tier)t)) == 0) {
                        *out = (loom_state_tier)t;
                        return 0;
                }
        return LOOM_EINVAL;
}

void loom__state_key_str(const loom_state_key *k, char *buf, size_t len)
{
        snprintf(buf, len, "%.64s/v%llu/%.128s[%llu:%llu,%llu:%llu]/%.8s", k->job,
                 (unsigned long long)k->version, k->name, (unsigned long long)k->r0,
                 (unsigned long long)k->r1, (unsigned long long)k->c0, (unsigned long long)k->c1,
                 k->dtype);
}

void loom_state_stats_free(loom_state_stats *s)
{
        if (!s)
                return;
        free(s->jobs);
        s->jobs = NULL;
        s->njobs = 0;
}
