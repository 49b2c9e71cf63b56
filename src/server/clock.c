/*
 * clock.c - the two clocks loomd reads (the bottom of src/server; docs/architecture.md):
 * monotonic for deadlines and durations, wall for what the store and the API show.
 */
#include <time.h>

#include "srv.h"

loom_us srv_now_mono(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (loom_us)ts.tv_sec * LOOM_US_PER_S + ts.tv_nsec / 1000;
}

int64_t srv_now_wall(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * LOOM_US_PER_S + ts.tv_nsec / 1000;
}
