/*
 * bench_plex.c - `loom bench hrrs`: the time of one HRRS decision (loom_hrrs_pick) over N
 * queued requests, best of several rounds of P probes on a loaded machine. Prints one JSON
 * line; never fails on timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "loom/timeline.h"

static double now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int loom_cmd_bench_hrrs(int argc, char **argv)
{
        long queued = 64, probes = 100000;
        for (int i = 1; i < argc; i++) {
                char *end = NULL;
                if (!strcmp(argv[i], "--help")) {
                        printf("usage: loom bench hrrs [--queued N] [--probes P]\n"
                               "Time of one HRRS decision over N queued requests (default 64),\n"
                               "best of 5 rounds of P decisions (default 100000).\n");
                        return 0;
                } else if (!strcmp(argv[i], "--queued") && i + 1 < argc) {
                        queued = strtol(argv[++i], &end, 10);
                        if (*end || queued < 1 || queued > 1000000)
                                goto bad;
                } else if (!strcmp(argv[i], "--probes") && i + 1 < argc) {
                        probes = strtol(argv[++i], &end, 10);
                        if (*end || probes < 1 || probes > 100000000)
                                goto bad;
                } else {
                        goto bad;
                }
        }
        loom_hrrs_req *q = calloc((size_t)queued, sizeof *q);
        if (!q)
                return 1;
        uint64_t r = 1;
        for (long i = 0; i < queued; i++) {
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                q[i] = (loom_hrrs_req){(uint32_t)(i % 16) + 1, (loom_us)(r >> 40),
                                       (loom_us)((r >> 20) % 100000000) + 1, 19 * LOOM_US_PER_S,
                                       (uint64_t)i};
        }
        double best = 1e30;
        long sink = 0;
        for (int round = 0; round < 5; round++) {
                double t0 = now_ns();
                for (long p = 0; p < probes; p++)
                        sink += loom_hrrs_pick(LOOM_DISPATCH_HRRS, q, (int)queued,
                                               (loom_us)(1LL << 24) + p, (uint32_t)(p % 16) + 1, 0);
                double per = (now_ns() - t0) / (double)probes;
                if (per < best)
                        best = per;
        }
        printf("{\"bench\":\"hrrs\",\"queued\":%ld,\"probes\":%ld,\"decision_us\":%.3f,"
               "\"check\":%ld}\n",
               queued, probes, best / 1e3, sink % 1000);
        free(q);
        return 0;
bad:
        fprintf(stderr, "loom bench hrrs: bad option (try --help)\n");
        return 2;
}
