/*
 * fuzz_trace.c - libFuzzer target for the trace CSV readers: the first byte picks the reader,
 * the rest is the file.
 *   even: the Philly job trace (loom_sim_trace_parse; the byte also picks the row window),
 *   odd:  the Azure conversation trace (loom_harvest_trace_load, which reads a path: the bytes
 *         go to a memfd read through /proc/self/fd).
 * A reader returns rows that satisfy what it documents, or an error with a line and column.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom/harvest.h"
#include "loom/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void philly(int sel, const char *text, size_t len)
{
        loom_sim_trace t;
        loom_err e;
        loom_err_clear(&e);
        int start = sel >> 4 & 3, count = (sel >> 6) ? (sel >> 6) : -1;
        int rc = loom_sim_trace_parse(text, len, "fuzz.csv", start, count, &t, &e);
        if (rc) {
                if (!e.msg[0])
                        abort();
                return;
        }
        double first = t.n ? t.rows[0].arrival_s : 0;
        for (int i = 0; i < t.n; i++)
                first = t.rows[i].arrival_s < first ? t.rows[i].arrival_s : first;
        if (first != 0)
                abort(); /* arrivals are shifted so that the earliest kept row arrives at 0 */
        if (count > 0 && t.n > count)
                abort();
        loom_sim_trace_free(&t);
}

static void azure(const uint8_t *data, size_t len)
{
        static int fd = -1;
        if (fd < 0 && (fd = memfd_create("fuzz-trace", MFD_CLOEXEC)) < 0)
                abort();
        if (ftruncate(fd, 0) || pwrite(fd, data, len, 0) != (ssize_t)len)
                abort();
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        loom_harvest_trace t;
        loom_err e;
        loom_err_clear(&e);
        if (loom_harvest_trace_load(path, &t, &e)) {
                if (!e.msg[0])
                        abort();
                return;
        }
        for (size_t i = 1; i < t.n; i++)
                if (t.reqs[i].arrival < t.reqs[i - 1].arrival)
                        abort(); /* documented: sorted by arrival */
        if (t.n && t.reqs[0].arrival != 0)
                abort(); /* documented: the first at 0 */
        loom_harvest_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > (1u << 20))
                return 0;
        if (data[0] & 1)
                azure(data + 1, size - 1);
        else
                philly(data[0], (const char *)data + 1, size - 1);
        return 0;
}
