/*
 * cuda.c - loading the CUDA runtime with dlopen (loom/cuda.h), for the sync engine and loom-state
 * alike. The first caller loads it; every later
 * caller gets the same table, or the same error (a machine does not grow a GPU mid-process).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/cuda.h"

static pthread_mutex_t cuda_mu = PTHREAD_MUTEX_INITIALIZER;
static loom__cuda cuda_tab;
static int cuda_done;     /* 1 once the load was tried */
static int cuda_rc;       /* its outcome */
static loom_err cuda_err; /* its message when it failed */

static int load_syms(void *h, loom__cuda *cu, loom_err *e)
{
        static const struct {
                const char *name;
                size_t off;
        } syms[] = {
#define S(f) {"cuda" #f, offsetof(loom__cuda, f)}
            S(GetDeviceCount),
            S(SetDevice),
            S(HostRegister),
            S(HostUnregister),
            S(Malloc),
            S(Free),
            S(MallocHost),
            S(FreeHost),
            S(Memset),
            S(Memcpy),
            S(MemcpyAsync),
            S(StreamCreateWithFlags),
            S(StreamSynchronize),
            S(StreamDestroy),
            S(EventCreateWithFlags),
            S(EventRecord),
            S(EventSynchronize),
            S(EventDestroy),
            S(DeviceSynchronize),
            S(GetErrorString),
#undef S
        };
        for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
                void *f = dlsym(h, syms[i].name);
                if (!f)
                        return loom_err_set(e, LOOM_EIO, "cuda", "no CUDA runtime: %s has no %s",
                                            cu->lib, syms[i].name);
                memcpy((char *)cu + syms[i].off, &f, sizeof f);
        }
        return 0;
}

static int load(loom__cuda *cu, loom_err *e)
{
        static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                            "libcudart.so.11"};
        const char *env = getenv("LOOM_CUDART");
        void *h = NULL;
        char tried[512] = "";
        if (env && *env) {
                h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
                snprintf(cu->lib, sizeof cu->lib, "%s", env);
                if (!h)
                        return loom_err_set(e, LOOM_EIO, "cuda",
                                            "no CUDA runtime: LOOM_CUDART=%s: %s", env, dlerror());
        }
        for (size_t i = 0; !h && i < sizeof names / sizeof names[0]; i++) {
                h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
                snprintf(cu->lib, sizeof cu->lib, "%s", names[i]);
                size_t n = strlen(tried);
                snprintf(tried + n, sizeof tried - n, "%s%s", n ? ", " : "", names[i]);
        }
        if (!h)
                return loom_err_set(e, LOOM_EIO, "cuda",
                                    "no CUDA runtime: none of %s loads (set LOOM_CUDART to the "
                                    "path of libcudart.so)",
                                    tried);
        int rc = load_syms(h, cu, e); /* the handle stays open for the process's life */
        if (rc)
                return rc;
        int n = 0, err = cu->GetDeviceCount(&n);
        if (err || n <= 0)
                return loom_err_set(e, LOOM_ENOENT, "cuda", "no CUDA device: %s: %s", cu->lib,
                                    err ? cu->GetErrorString(err) : "cudaGetDeviceCount gave 0");
        cu->devices = n;
        return 0;
}

int loom__cuda_get(const loom__cuda **out, loom_err *e)
{
        pthread_mutex_lock(&cuda_mu);
        if (!cuda_done) {
                loom_err_clear(&cuda_err);
                cuda_rc = load(&cuda_tab, &cuda_err);
                cuda_done = 1;
        }
        int rc = cuda_rc;
        pthread_mutex_unlock(&cuda_mu);
        *out = rc ? NULL : &cuda_tab;
        if (rc && e)
                *e = cuda_err;
        return rc;
}

int loom__cuda_check(const loom__cuda *cu, int rc, const char *what, loom_err *e)
{
        if (!rc)
                return 0;
        return loom_err_set(e, LOOM_EIO, "cuda", "%s: cudaError %d (%s)", what, rc,
                            cu->GetErrorString(rc));
}
