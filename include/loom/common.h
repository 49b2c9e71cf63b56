/*
 * common.h - units, error codes and the error buffer shared by every loom module.
 *
 * Units are fixed across the code base: time is int64_t microseconds (loom_us), money is US$
 * per hour (double), memory is bytes (uint64_t). Functions return 0 or a negative LOOM_E* code;
 * text for the user goes into a caller-owned loom_err, never to stderr.
 */
#ifndef LOOM_COMMON_H
#define LOOM_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef int64_t loom_us;

#define LOOM_US_PER_MS INT64_C(1000)
#define LOOM_US_PER_S INT64_C(1000000)
#define LOOM_GB UINT64_C(1000000000) /* host memory sizes in the papers are decimal GB */
#define LOOM_GIB (UINT64_C(1) << 30)

/* Rounded to the nearest microsecond; saturates at the ends of loom_us (about +-292,000 years)
 * and maps NaN to 0, so that a reader handed an absurd time never converts out of range. */
static inline loom_us loom_us_from_s(double s)
{
        double us = s * 1e6 + (s >= 0 ? 0.5 : -0.5);
        if (!(us == us))
                return 0;
        if (us >= 9223372036854775807.0)
                return INT64_MAX;
        if (us <= -9223372036854775808.0)
                return INT64_MIN;
        return (loom_us)us;
}
static inline double loom_us_to_s(loom_us t)
{
        return (double)t / 1e6;
}

enum {
        LOOM_OK = 0,
        LOOM_EINVAL = -1,   /* invalid argument or input; loom_err says which field */
        LOOM_ENOMEM = -2,   /* allocation failed */
        LOOM_ENOENT = -3,   /* no such job, group, node, lease */
        LOOM_ESTATE = -4,   /* call not valid in the object's current state */
        LOOM_EREJECT = -5,  /* a job cannot be placed (reason in loom_err) */
        LOOM_EIO = -6,      /* file or socket error; loom_err has the OS message */
        LOOM_ERANGE = -7,   /* a value or size is beyond a documented limit */
        LOOM_ECORRUPT = -8, /* data failed a checksum or format check */
        LOOM_ETIMEDOUT = -9,
        LOOM_EEXIST = -10,
        LOOM_EPROTO = -11, /* peer spoke something unexpected */
};

/*
 * Make room for at least `need` elements of `size` bytes in a growable array. arrp points at
 * the array pointer (any T **), *cap is its capacity in elements; the capacity doubles, starting
 * at `first`. New room is not initialised. Returns 0, or LOOM_ENOMEM with the array and *cap
 * unchanged.
 */
int loom_reserve(void *arrp, size_t *cap, size_t need, size_t size, size_t first);

/*
 * splitmix64, the one generator of every seeded stream in loom (workloads, searches, synthetic
 * weights, tests). A stream is its 64-bit state: loom_splitmix64() advances *state and returns
 * the next output; loom_mix64(z) is the output for state z without keeping one, for values that
 * are pure functions of a key (hash of (seed, job, iteration)). loom_mix64(s) is the output that
 * loom_splitmix64(&s) returns.
 */
static inline uint64_t loom_mix64(uint64_t z)
{
        z += UINT64_C(0x9E3779B97F4A7C15);
        z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
        return z ^ (z >> 31);
}
static inline uint64_t loom_splitmix64(uint64_t *state)
{
        uint64_t z = loom_mix64(*state);
        *state += UINT64_C(0x9E3779B97F4A7C15);
        return z;
}

/*
 * Quantiles of an ascending array v[0..n), n >= 1 (sort it with qsort and loom_cmp_double).
 * loom_quantile: linear interpolation between the closest ranks, v[i] + f * (v[i+1] - v[i]) at
 * position q * (n - 1) = i + f (numpy's default). loom_quantile_rank: the nearest rank, the
 * ceil(q * n)-th smallest value (at least the first). q in [0, 1].
 */
double loom_quantile(const double *v, size_t n, double q);
double loom_quantile_rank(const double *v, size_t n, double q);
/* qsort comparison of two doubles, ascending. */
int loom_cmp_double(const void *a, const void *b);

/* Decode the 2n hex digits s[0..2n) (either case) into out[0..n). Returns 2n, or the index of
 * the first character that is not a hex digit (a NUL included: s shorter than 2n stops there);
 * then out holds only the bytes before it. */
size_t loom_hex_decode(const char *s, uint8_t *out, size_t n);

/* Static text for a LOOM_E* code; never NULL. */
const char *loom_strerror(int code);

/*
 * A caller-owned error description. Functions that can fail on user input fill it: msg is the
 * sentence for a person; field names the offending field ("jobs[2].slo"); line and col are
 * 1-based positions in the input file, 0 when unknown.
 */
typedef struct loom_err {
        char msg[512];
        char field[128];
        int line;
        int col;
} loom_err;

/* Reset *e to "no error". e may be NULL. */
void loom_err_clear(loom_err *e);
/* Fill e (if not NULL) with field and a printf-style message; returns code, so a caller can
 * write `return loom_err_set(e, LOOM_EINVAL, "slo", "must be >= 1.0, got %g", v);`. */
int loom_err_set(loom_err *e, int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
