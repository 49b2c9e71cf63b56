/* fakecudart.h - what the CUDA runtime test double (fakecudart.c) counts, and how a test reads
 * it from the copy the code under test loaded. Needs _GNU_SOURCE (RTLD_NOLOAD). */
#ifndef LOOM_TEST_FAKECUDART_H
#define LOOM_TEST_FAKECUDART_H

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

typedef struct fakecudart_counters {
        unsigned long async_copies, async_unpinned, sync_copies, registers, unregisters;
        unsigned long long async_bytes;
        size_t registered_bytes; /* currently registered */
} fakecudart_counters;

/* The counters of the double at `lib`, already loaded: 0, or -1 when it is not. */
static inline int fakecudart_read(const char *lib, fakecudart_counters *out)
{
        void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
        if (!h)
                return -1;
        void (*stats)(fakecudart_counters *);
        void *f = dlsym(h, "fakecudart_stats");
        if (f) {
                memcpy(&stats, &f, sizeof f);
                stats(out);
        }
        dlclose(h);
        return f ? 0 : -1;
}

#endif
