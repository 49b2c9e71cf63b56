/*
 * cuda.h - the CUDA runtime as loom uses it: a table of the few libcudart entry points that
 * loom-state's device tier (src/state) and the sync engine's GPU path (src/sync/cuda_sync.c)
 * call, filled by dlopen at run time (src/sync/cuda.c: sync is the lower layer, state links
 * it). Shared between modules, not API (loom__ names). loom never links libcudart, so every
 * build runs on a machine without one; the CUDA paths then fail with "no CUDA runtime".
 *
 * Only the C ABI of the runtime is used: opaque stream and event handles, int error codes,
 * cudaMemcpyKind values. Nothing depends on a CUDA header or on a struct whose layout changes
 * between runtime versions.
 */
#ifndef LOOM_CUDA_H
#define LOOM_CUDA_H

#include <stddef.h>

#include "loom/common.h"

enum { LOOM__CUDA_H2D = 1, LOOM__CUDA_D2H = 2 }; /* cudaMemcpyHostToDevice, ...DeviceToHost */

typedef struct loom__cuda {
        char lib[256]; /* the file dlopen found */
        int devices;   /* cudaGetDeviceCount */
        int (*GetDeviceCount)(int *n);
        int (*SetDevice)(int dev);
        int (*HostRegister)(void *p, size_t len, unsigned flags);
        int (*HostUnregister)(void *p);
        int (*Malloc)(void **p, size_t len);
        int (*Free)(void *p);
        int (*MallocHost)(void **p, size_t len);
        int (*FreeHost)(void *p);
        int (*Memset)(void *p, int v, size_t len);
        int (*Memcpy)(void *dst, const void *src, size_t len, int kind);
        int (*MemcpyAsync)(void *dst, const void *src, size_t len, int kind, void *stream);
        int (*StreamCreateWithFlags)(void **s, unsigned flags);
        int (*StreamSynchronize)(void *s);
        int (*StreamDestroy)(void *s);
        int (*EventCreateWithFlags)(void **ev, unsigned flags);
        int (*EventRecord)(void *ev, void *s);
        int (*EventSynchronize)(void *ev);
        int (*EventDestroy)(void *ev);
        int (*DeviceSynchronize)(void);
        const char *(*GetErrorString)(int err);
} loom__cuda;

/* The process's runtime, loaded once: $LOOM_CUDART if set, else libcudart.so, .so.13, .so.12,
 * .so.11. Fails with LOOM_EIO "no CUDA runtime: ..." (nothing loadable, a symbol missing) or
 * LOOM_ENOENT "no CUDA device: ..." (cudaGetDeviceCount failed or found none). The table lives
 * as long as the process. */
int loom__cuda_get(const loom__cuda **out, loom_err *e);
/* 0, or LOOM_EIO with "what: cudaError N (text)" when rc is a CUDA error. */
int loom__cuda_check(const loom__cuda *cu, int rc, const char *what, loom_err *e);

#endif
