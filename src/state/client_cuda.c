/*
 * client_cuda.c - the CUDA path of the loom-state client (state.h, "CUDA device tier").
 *
 * Staging: one sealed memfd of two halves, each one bucket, mapped here and registered with
 * cudaHostRegister so copies to and from it are pinned DMA; the daemon maps the same memfd as it
 * maps any client buffer. Per call, tensors are cut into buckets of whole tensors.
 *
 *   offload  D2H(0); for i: [D2H(i+1) into the other half] ; wait D2H(i) ; daemon stores half i
 *   load     for i: wait H2D(i-2) (its half) ; daemon fills half i ; H2D(i) from half i
 *
 * so the device copy of one bucket overlaps the daemon's copy of the next (or the previous).
 * One stream and one event per half; both are the client's, so two clients (two threads) move
 * two states at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom/cuda.h"
#include "loom/sync.h"
#include "internal.h"

#define ST_CUDA_BUCKET (UINT64_C(64) << 20)

typedef struct st_client_cuda {
        const loom__cuda *api;
        void *stream;
        void *ev[2];
        int fd;
        uint8_t *buf;  /* 2 * half bytes, registered */
        uint64_t half; /* bytes per half */
        uint64_t want_bucket;
} st_client_cuda;

void loom__state_cuda_free(st_client_cuda *cu)
{
        if (!cu)
                return;
        if (cu->api) {
                if (cu->stream)
                        cu->api->StreamSynchronize(cu->stream);
                for (int i = 0; i < 2; i++)
                        if (cu->ev[i])
                                cu->api->EventDestroy(cu->ev[i]);
                if (cu->stream)
                        cu->api->StreamDestroy(cu->stream);
                if (cu->buf)
                        cu->api->HostUnregister(cu->buf);
        }
        if (cu->buf)
                munmap(cu->buf, 2 * cu->half);
        if (cu->fd >= 0)
                close(cu->fd);
        free(cu);
}

static uint64_t bucket_of(const st_client_cuda *cu)
{
        return cu && cu->want_bucket ? cu->want_bucket : ST_CUDA_BUCKET;
}

/* The client's CUDA state, made on first use; NULL when out of memory. */
static st_client_cuda *state_of(loom_state_client *c)
{
        st_client_cuda **p = loom__state_client_cu(c);
        if (!*p && (*p = calloc(1, sizeof **p)))
                (*p)->fd = -1;
        return *p;
}

void loom_state_cuda_bucket(loom_state_client *c, uint64_t bytes)
{
        st_client_cuda *cu = state_of(c);
        if (cu) /* else the next CUDA call reports the allocation failure */
                cu->want_bucket = st_round(bytes);
}

int loom_state_cuda_probe(char *lib, size_t len, loom_err *e)
{
        return loom_sync_cuda_probe(lib, len, e); /* one runtime loader for both */
}

/* The client's CUDA state with a registered staging of two halves of at least `half` bytes. */
static int setup(loom_state_client *c, uint64_t half, st_client_cuda **out, loom_err *e)
{
        st_client_cuda *cu = state_of(c);
        if (!cu)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        *out = cu;
        int rc = cu->api ? 0 : loom__cuda_get(&cu->api, e);
        const loom__cuda *a = cu->api;
        if (!rc && !cu->stream) /* cudaStreamNonBlocking: no implicit sync with stream 0 */
                rc = loom__cuda_check(a, a->StreamCreateWithFlags(&cu->stream, 1),
                                      "cudaStreamCreateWithFlags", e);
        for (int i = 0; i < 2 && !rc; i++) /* cudaEventDisableTiming */
                if (!cu->ev[i])
                        rc = loom__cuda_check(a, a->EventCreateWithFlags(&cu->ev[i], 2),
                                              "cudaEventCreateWithFlags", e);
        if (rc || half <= cu->half)
                return rc;
        if (cu->buf) { /* grow: unregister and unmap; the memfd only grows (sealed) */
                a->HostUnregister(cu->buf);
                munmap(cu->buf, 2 * cu->half);
                cu->buf = NULL;
                cu->half = 0;
        }
        if (cu->fd < 0) {
                cu->fd = memfd_create("loom-state-cuda", MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (cu->fd < 0 || fcntl(cu->fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
                        return loom_err_set(e, LOOM_EIO, "stage", "sealed memfd: %s",
                                            strerror(errno));
        }
        if (ftruncate(cu->fd, (off_t)(2 * half)) != 0)
                return loom_err_set(e, LOOM_ENOMEM, "stage", "staging of 2 x %llu bytes: %s",
                                    (unsigned long long)half, strerror(errno));
        void *m = mmap(NULL, 2 * half, PROT_READ | PROT_WRITE, MAP_SHARED, cu->fd, 0);
        if (m == MAP_FAILED)
                return loom_err_set(e, LOOM_ENOMEM, "stage", "mmap: %s", strerror(errno));
        rc = loom__cuda_check(a, a->HostRegister(m, 2 * half, 0), "cudaHostRegister", e);
        if (rc) {
                munmap(m, 2 * half);
                return rc;
        }
        cu->buf = m;
        cu->half = half;
        return 0;
}

/* Cut io[0..n) into buckets of whole tensors of at most `bucket` bytes (64-byte aligned in the
 * half); starts[k] is bucket k's first io, starts[nb] = n. Returns the largest bucket's bytes. */
static uint64_t cut(const loom_state_io *io, size_t n, uint64_t bucket, size_t *starts, size_t *nb)
{
        uint64_t fill = 0, most = 0;
        *nb = 0;
        for (size_t i = 0; i < n; i++) {
                uint64_t sz = (io[i].len + 63) & ~UINT64_C(63);
                if (i == 0 || fill + sz > bucket) {
                        starts[(*nb)++] = i;
                        fill = 0;
                }
                fill += sz;
                if (fill > most)
                        most = fill;
        }
        starts[*nb] = n;
        return most;
}

/* Bucket k of the call as memfd ios in half h (tmp has room for every io). */
static size_t bucket_ios(const st_client_cuda *cu, const loom_state_io *io, const size_t *starts,
                         size_t k, int h, loom_state_io *tmp)
{
        uint64_t off = (uint64_t)h * cu->half;
        size_t m = 0;
        for (size_t i = starts[k]; i < starts[k + 1]; i++, m++) {
                tmp[m] = io[i];
                tmp[m].fd = cu->fd;
                tmp[m].off = off;
                tmp[m].ptr = NULL;
                off += (io[i].len + 63) & ~UINT64_C(63);
        }
        return m;
}

/* Issue the copies of bucket k between the device and half h, then record h's event. */
static int issue(st_client_cuda *cu, const loom_state_io *io, const size_t *starts, size_t k, int h,
                 int kind, loom_err *e)
{
        const loom__cuda *a = cu->api;
        uint8_t *host = cu->buf + (uint64_t)h * cu->half;
        int rc = 0;
        for (size_t i = starts[k]; i < starts[k + 1] && !rc; i++) {
                void *dst = kind == LOOM__CUDA_D2H ? (void *)host : io[i].ptr;
                const void *src = kind == LOOM__CUDA_D2H ? io[i].ptr : (const void *)host;
                rc = loom__cuda_check(a, a->MemcpyAsync(dst, src, io[i].len, kind, cu->stream),
                                      "cudaMemcpyAsync", e);
                host += (io[i].len + 63) & ~UINT64_C(63);
        }
        return rc ? rc
                  : loom__cuda_check(a, a->EventRecord(cu->ev[h], cu->stream), "cudaEventRecord",
                                     e);
}

static void add_result(loom_state_result *sum, const loom_state_result *r)
{
        if (r->found > sum->found)
                sum->found = r->found;
        sum->bytes += r->bytes;
        sum->dedup_bytes += r->dedup_bytes;
        sum->disk_bytes += r->disk_bytes;
        sum->staged_bytes += r->staged_bytes;
        sum->seconds += r->seconds;
        sum->buckets++;
}

static int run(loom_state_client *c, const loom_state_io *io, size_t n, int device, int load,
               loom_state_tier tier, loom_state_result *res, loom_err *e)
{
        loom_state_result dummy;
        if (!res)
                res = &dummy;
        memset(res, 0, sizeof *res);
        snprintf(res->path, sizeof res->path, "cuda");
        int rc = loom__state_check_io(io, n, e);
        for (size_t i = 0; i < n && !rc; i++)
                if (io[i].fd >= 0 || !io[i].ptr)
                        rc = loom_err_set(e, LOOM_EINVAL, "io",
                                          "io[%zu]: a CUDA buffer is a "
                                          "device pointer (ptr) with fd -1",
                                          i);
        if (rc || !n)
                return rc;
        size_t *starts = malloc((n + 1) * sizeof *starts);
        loom_state_io *tmp = malloc(n * sizeof *tmp);
        st_client_cuda *cu = NULL;
        size_t nb = 0;
        if (!starts || !tmp)
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (!rc)
                rc = setup(c,
                           st_round(cut(io, n, bucket_of(*loom__state_client_cu(c)), starts, &nb)),
                           &cu, e);
        if (!rc)
                rc = loom__cuda_check(cu->api, cu->api->SetDevice(device), "cudaSetDevice", e);
        int kind = load ? LOOM__CUDA_H2D : LOOM__CUDA_D2H;
        if (!rc && !load)
                rc = issue(cu, io, starts, 0, 0, kind, e);
        for (size_t k = 0; k < nb && !rc; k++) {
                int h = (int)(k & 1);
                if (!load && k + 1 < nb)
                        rc = issue(cu, io, starts, k + 1, !h, kind, e);
                if (!rc) /* offload: bucket k is in half h; load: half h's last H2D is done */
                        rc = loom__cuda_check(cu->api, cu->api->EventSynchronize(cu->ev[h]),
                                              "cudaEventSynchronize", e);
                loom_state_result r;
                size_t m = bucket_ios(cu, io, starts, k, h, tmp);
                if (!rc)
                        rc = loom__state_transfer(c, tmp, m, load, tier, "", &r, e);
                if (!rc)
                        add_result(res, &r);
                if (!rc && load)
                        rc = issue(cu, io, starts, k, h, kind, e);
        }
        /* never return with copies in flight into or out of memory the caller may free */
        if (cu && cu->stream) {
                int s = cu->api->StreamSynchronize(cu->stream);
                if (!rc)
                        rc = loom__cuda_check(cu->api, s, "cudaStreamSynchronize", e);
        }
        res->staged_bytes = 0;
        for (size_t i = 0; i < n && !rc; i++)
                res->staged_bytes += io[i].len;
        free(starts);
        free(tmp);
        return rc;
}

int loom_state_cuda_offload(loom_state_client *c, const loom_state_io *io, size_t n, int device,
                            loom_state_tier tier, loom_state_result *res, loom_err *e)
{
        return run(c, io, n, device, 0, tier, res, e);
}

int loom_state_cuda_load(loom_state_client *c, const loom_state_io *io, size_t n, int device,
                         loom_state_result *res, loom_err *e)
{
        return run(c, io, n, device, 1, LOOM_STATE_NONE, res, e);
}
