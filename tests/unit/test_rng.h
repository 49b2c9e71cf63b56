/* test_rng.h - the xorshift generator the core's randomised tests draw from; each test seeds
 * rng_state itself, so a failure replays. */
#ifndef LOOM_TEST_RNG_H
#define LOOM_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state;

static inline uint64_t rnd(void)
{
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return rng_state;
}

/* Uniform in [lo, hi]. */
static inline int64_t uniform(int64_t lo, int64_t hi)
{
        return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

#endif
