/*
 * fakecudart.c - a TEST DOUBLE of the CUDA runtime (libcudart), built only for the tests. It is
 * not CUDA and moves no data to any GPU: it lets the tests load loom's CUDA paths through
 * $LOOM_CUDART on a machine without a GPU, so the dlopen, the bucketing, the host registration
 * and the round trip are checked in CI. Real GPUs are measured by `make test-gpu` (docs/gpu.md).
 *
 *   cudaMalloc         malloc, and the range is recorded as "device memory"
 *   cudaMemcpy         memcpy; the device side must lie in a cudaMalloc'd range (else
 *                      cudaErrorInvalidValue)
 *   cudaMemcpyAsync    the same checks when called, and an async copy whose host side is not
 *                      registered or cudaMallocHost'd is counted unpinned; the memcpy runs at
 *                      once, or, with $FAKECUDART_ASYNC=1, later on the stream's own thread
 *                      (in order, each after $FAKECUDART_DELAY_US microseconds), so a caller
 *                      that reads or reuses a buffer before synchronizing sees the wrong bytes
 *   cudaHostRegister   records the range; unregister drops it
 *   streams, events    a queue and a thread per stream (async mode) or tokens; an event is the
 *                      count of copies queued on its stream when it was recorded
 *
 * $FAKECUDART_DEVICES sets the device count (default 1; 0 makes cudaGetDeviceCount fail with
 * cudaErrorNoDevice). fakecudart_stats() gives the tests the counters.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecudart.h"

#define FAKE_MAX 256

typedef struct range {
        uintptr_t p;
        size_t len;
} range;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static range dev[FAKE_MAX], pinned[FAKE_MAX];
static fakecudart_counters cnt;
static int current = 0;

static int add(range *t, void *p, size_t len)
{
        for (int i = 0; i < FAKE_MAX; i++)
                if (!t[i].p) {
                        t[i] = (range){(uintptr_t)p, len};
                        return 0;
                }
        return 2; /* cudaErrorMemoryAllocation */
}

static int drop(range *t, void *p)
{
        for (int i = 0; i < FAKE_MAX; i++)
                if (t[i].p == (uintptr_t)p) {
                        t[i] = (range){0, 0};
                        return 0;
                }
        return 1; /* cudaErrorInvalidValue */
}

static int inside(const range *t, const void *p, size_t len)
{
        for (int i = 0; i < FAKE_MAX; i++)
                if (t[i].p && (uintptr_t)p >= t[i].p && (uintptr_t)p + len <= t[i].p + t[i].len)
                        return 1;
        return 0;
}

void fakecudart_stats(fakecudart_counters *out)
{
        pthread_mutex_lock(&mu);
        *out = cnt;
        pthread_mutex_unlock(&mu);
}

const char *cudaGetErrorString(int err)
{
        switch (err) {
        case 0:
                return "no error";
        case 1:
                return "invalid argument (fake runtime)";
        case 2:
                return "out of memory (fake runtime)";
        case 100:
                return "no CUDA-capable device is detected (fake runtime)";
        default:
                return "unknown error (fake runtime)";
        }
}

int cudaGetDeviceCount(int *n)
{
        const char *v = getenv("FAKECUDART_DEVICES");
        *n = v ? atoi(v) : 1;
        return *n > 0 ? 0 : 100;
}

int cudaSetDevice(int d)
{
        int n;
        if (cudaGetDeviceCount(&n) || d < 0 || d >= n)
                return 1;
        current = d;
        return 0;
}

int cudaMalloc(void **p, size_t len)
{
        *p = malloc(len ? len : 1);
        if (!*p)
                return 2;
        pthread_mutex_lock(&mu);
        int rc = add(dev, *p, len);
        pthread_mutex_unlock(&mu);
        return rc;
}

int cudaFree(void *p)
{
        if (!p)
                return 0;
        pthread_mutex_lock(&mu);
        int rc = drop(dev, p);
        pthread_mutex_unlock(&mu);
        if (!rc)
                free(p);
        return rc;
}

int cudaMallocHost(void **p, size_t len)
{
        *p = malloc(len ? len : 1);
        if (!*p)
                return 2;
        pthread_mutex_lock(&mu);
        int rc = add(pinned, *p, len);
        pthread_mutex_unlock(&mu);
        return rc;
}

int cudaFreeHost(void *p)
{
        pthread_mutex_lock(&mu);
        int rc = drop(pinned, p);
        pthread_mutex_unlock(&mu);
        if (!rc)
                free(p);
        return rc;
}

int cudaHostRegister(void *p, size_t len, unsigned flags)
{
        (void)flags;
        pthread_mutex_lock(&mu);
        int rc = inside(pinned, p, len) ? 1 : add(pinned, p, len); /* twice: an error, as in CUDA */
        if (!rc) {
                cnt.registers++;
                cnt.registered_bytes += len;
        }
        pthread_mutex_unlock(&mu);
        return rc;
}

int cudaHostUnregister(void *p)
{
        pthread_mutex_lock(&mu);
        size_t len = 0;
        for (int i = 0; i < FAKE_MAX; i++)
                if (pinned[i].p == (uintptr_t)p)
                        len = pinned[i].len;
        int rc = drop(pinned, p);
        if (!rc) {
                cnt.unregisters++;
                cnt.registered_bytes -= len;
        }
        pthread_mutex_unlock(&mu);
        return rc;
}

int cudaMemset(void *p, int v, size_t len)
{
        pthread_mutex_lock(&mu);
        int ok = inside(dev, p, len);
        pthread_mutex_unlock(&mu);
        if (!ok)
                return 1;
        memset(p, v, len);
        return 0;
}

typedef struct fop { /* one queued copy */
        void *dst;
        const void *src;
        size_t len;
        struct fop *next;
} fop;

typedef struct fstream {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t thr;
        int async, stop;
        fop *head, *tail;
        unsigned long queued, done;
} fstream;

typedef struct fevent {
        fstream *s;
        unsigned long ticket;
} fevent;

static void *worker(void *arg)
{
        fstream *s = arg;
        const char *d = getenv("FAKECUDART_DELAY_US");
        unsigned delay = d ? (unsigned)atoi(d) : 0;
        pthread_mutex_lock(&s->mu);
        for (;;) {
                while (!s->head && !s->stop)
                        pthread_cond_wait(&s->cv, &s->mu);
                if (!s->head)
                        break;
                fop *o = s->head;
                s->head = o->next;
                if (!s->head)
                        s->tail = NULL;
                pthread_mutex_unlock(&s->mu);
                if (delay)
                        usleep(delay);
                memcpy(o->dst, o->src, o->len);
                free(o);
                pthread_mutex_lock(&s->mu);
                s->done++;
                pthread_cond_broadcast(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        return NULL;
}

/* kind 1: host -> device, 2: device -> host. Checks and counts; 0 when the copy may run. */
static int check(void *dst, const void *src, size_t len, int kind, int async)
{
        if (kind != 1 && kind != 2)
                return 1;
        const void *d = kind == 1 ? dst : src, *h = kind == 1 ? src : dst;
        pthread_mutex_lock(&mu);
        int ok = inside(dev, d, len);
        if (ok && async) {
                cnt.async_copies++;
                cnt.async_bytes += len;
                cnt.async_unpinned += !inside(pinned, h, len);
        } else if (ok) {
                cnt.sync_copies++;
        }
        pthread_mutex_unlock(&mu);
        return ok ? 0 : 1;
}

int cudaMemcpy(void *dst, const void *src, size_t len, int kind)
{
        int rc = check(dst, src, len, kind, 0);
        if (!rc)
                memcpy(dst, src, len);
        return rc;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t len, int kind, void *stream)
{
        fstream *s = stream;
        int rc = s ? check(dst, src, len, kind, 1) : 1;
        if (rc)
                return rc;
        if (!s->async) {
                memcpy(dst, src, len);
                s->queued++;
                s->done++;
                return 0;
        }
        fop *o = calloc(1, sizeof *o);
        if (!o)
                return 2;
        *o = (fop){dst, src, len, NULL};
        pthread_mutex_lock(&s->mu);
        if (s->tail)
                s->tail->next = o;
        else
                s->head = o;
        s->tail = o;
        s->queued++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return 0;
}

int cudaStreamCreateWithFlags(void **out, unsigned flags)
{
        (void)flags;
        fstream *s = calloc(1, sizeof *s);
        if (!s)
                return 2;
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        const char *a = getenv("FAKECUDART_ASYNC");
        s->async = a && atoi(a) > 0;
        if (s->async && pthread_create(&s->thr, NULL, worker, s) != 0) {
                free(s);
                return 2;
        }
        *out = s;
        return 0;
}

static void wait_done(fstream *s, unsigned long ticket)
{
        pthread_mutex_lock(&s->mu);
        while (s->done < ticket)
                pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
}

int cudaStreamSynchronize(void *stream)
{
        fstream *s = stream;
        if (!s)
                return 1;
        pthread_mutex_lock(&s->mu);
        unsigned long q = s->queued;
        pthread_mutex_unlock(&s->mu);
        wait_done(s, q);
        return 0;
}

int cudaStreamDestroy(void *stream)
{
        fstream *s = stream;
        if (!s)
                return 1;
        if (s->async) {
                pthread_mutex_lock(&s->mu);
                s->stop = 1;
                pthread_cond_broadcast(&s->cv);
                pthread_mutex_unlock(&s->mu);
                pthread_join(s->thr, NULL); /* drains the queue first, as CUDA does */
        }
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return 0;
}

int cudaEventCreateWithFlags(void **ev, unsigned flags)
{
        (void)flags;
        *ev = calloc(1, sizeof(fevent));
        return *ev ? 0 : 2;
}

int cudaEventRecord(void *event, void *stream)
{
        fevent *ev = event;
        fstream *s = stream;
        if (!ev || !s)
                return 1;
        pthread_mutex_lock(&s->mu);
        ev->s = s;
        ev->ticket = s->queued;
        pthread_mutex_unlock(&s->mu);
        return 0;
}

int cudaEventSynchronize(void *event)
{
        fevent *ev = event;
        if (!ev)
                return 1;
        if (ev->s) /* never recorded: complete, as in CUDA */
                wait_done(ev->s, ev->ticket);
        return 0;
}

int cudaEventDestroy(void *ev)
{
        free(ev);
        return 0;
}

int cudaDeviceSynchronize(void)
{
        return 0;
}
