/*
 * cuda_sync.c - the sync engine's GPU path (sync.h, "publish from / pull into CUDA device
 * memory"): weights in GPU memory moved through registered staging halves on the call's own
 * stream, with the CUDA runtime loaded by dlopen (cuda.c, shared with loom-state).
 *
 *   read   (publish, and a delta pull's base)  D2H(chunk 0) ; for k: D2H(chunk k+1) into the
 *          other half ; wait chunk k ; copy it out. The caller hashes and encodes chunk k
 *          while chunk k+1 is on the bus.
 *   write  (pull)  wait the half's previous copy ; copy the applied bucket into it ; H2D. The
 *          caller receives the next bucket while this one is on the bus.
 *
 * Reads and writes have two halves each (a delta pull reads its base ahead while it writes
 * buckets), one stream, one event per half; nothing waits on the whole stream until finish.
 * On the one stream a region is never written before it was read: the puller reads a bucket's
 * base (and waits for it) before it writes that bucket, and reads ahead only past it. Everything
 * else (frames, deltas, checksums, the wire) is pubsub.c's and pull.c's.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "loom/cuda.h"

#define DEFAULT_STAGING (UINT64_C(16) << 20)

/* Two staging halves used in turn, each with the event of its last copy. Reads (D2H) and
 * writes (H2D) have a lane each: a delta pull reads its base ahead while it writes buckets. */
typedef struct lane {
        void *mem; /* its two halves, registered on the lane's first copy */
        uint16_t *half[2];
        void *ev[2];
        int busy[2];     /* a copy through the half was issued and not waited for */
        uint64_t len[2]; /* elements of that copy */
        int next;        /* the half the next copy uses; with both busy, the older one */
} lane;

struct loom__cudev {
        const loom__cuda *cu;
        uint16_t *dev;
        uint64_t elems;
        void *stream;
        lane rd, wr;
        uint64_t half_elems;
        uint64_t issued;  /* read: elements whose D2H was issued */
        uint64_t fetched; /* read: elements copied out */
        int wrote;
        loom_sync_cuda_stats *cs, own;
};

static int check(loom__cudev *d, int rc, const char *what, loom_err *e)
{
        return loom__cuda_check(d->cu, rc, what, e);
}

int loom_sync_cuda_probe(char *lib, size_t len, loom_err *e)
{
        const loom__cuda *cu;
        int rc = loom__cuda_get(&cu, e);
        if (lib && len)
                snprintf(lib, len, "%s", rc ? "" : cu->lib);
        return rc ? rc : cu->devices;
}

/* A 2-byte D2H copy of the first and the last element: a host pointer, a freed one or one too
 * short for the model is refused here, before anything is published or connected. */
static int probe_ptr(loom__cudev *d, loom_err *e)
{
        uint16_t v;
        int rc = d->cu->Memcpy(&v, d->dev, 2, LOOM__CUDA_D2H);
        if (!rc)
                rc = d->cu->Memcpy(&v, d->dev + d->elems - 1, 2, LOOM__CUDA_D2H);
        if (rc)
                return loom_err_set(e, LOOM_EINVAL, "weights",
                                    "%p is not CUDA device memory of %llu bf16 elements on this "
                                    "device: cudaMemcpy: cudaError %d (%s)",
                                    (void *)d->dev, (unsigned long long)d->elems, rc,
                                    d->cu->GetErrorString(rc));
        return 0;
}

static int setup(loom__cudev *d, const loom_sync_cuda_opts *o, loom_err *e)
{
        int dev = o ? o->device : 0;
        uint64_t bytes = o && o->staging_bytes ? o->staging_bytes : DEFAULT_STAGING;
        if (dev < 0 || dev >= d->cu->devices)
                return loom_err_set(e, LOOM_EINVAL, "device", "no CUDA device %d (%d here)", dev,
                                    d->cu->devices);
        if (bytes < 2 || bytes % 2 || bytes > (UINT64_C(1) << 34))
                return loom_err_set(e, LOOM_EINVAL, "staging_bytes",
                                    "must be even and in [2, 16 GiB], got %llu",
                                    (unsigned long long)bytes);
        int rc = check(d, d->cu->SetDevice(dev), "cudaSetDevice", e);
        if (!rc)
                rc = probe_ptr(d, e);
        if (rc)
                return rc;
        d->half_elems = bytes / 2 < d->elems ? bytes / 2 : d->elems;
        /* cudaStreamNonBlocking: no implicit ordering with the legacy default stream */
        return check(d, d->cu->StreamCreateWithFlags(&d->stream, 1), "cudaStreamCreateWithFlags",
                     e);
}

/* A lane's staging and events, on its first copy: a publish registers only the read lane, a
 * dense pull only the write lane. */
static int lane_open(loom__cudev *d, lane *l, loom_err *e)
{
        if (l->mem)
                return 0;
        size_t hb = (size_t)(2 * d->half_elems + 63) & ~(size_t)63;
        void *m;
        if (posix_memalign(&m, 4096, 2 * hb))
                return loom_err_set(e, LOOM_ENOMEM, "staging_bytes",
                                    "staging of 2 x %zu bytes: out of memory", hb);
        int rc = check(d, d->cu->HostRegister(m, 2 * hb, 0), "cudaHostRegister", e);
        if (rc) {
                free(m);
                return rc;
        }
        l->mem = m;
        l->half[0] = m;
        l->half[1] = (uint16_t *)(void *)((uint8_t *)m + hb);
        for (int i = 0; i < 2 && !rc; i++) /* cudaEventDisableTiming */
                rc = check(d, d->cu->EventCreateWithFlags(&l->ev[i], 2), "cudaEventCreateWithFlags",
                           e);
        return rc;
}

int loom__cudev_open(void *dev, uint64_t elems, const loom_sync_cuda_opts *o,
                     loom_sync_cuda_stats *cs, loom__cudev **out, loom_err *e)
{
        *out = NULL;
        if (!dev)
                return loom_err_set(e, LOOM_EINVAL, "weights", "no device pointer (NULL)");
        loom__cudev *d = calloc(1, sizeof *d);
        if (!d)
                return loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");
        d->dev = dev;
        d->elems = elems;
        d->cs = cs ? cs : &d->own;
        int rc = loom__cuda_get(&d->cu, e);
        if (!rc)
                rc = setup(d, o, e);
        if (rc) {
                loom__cudev_close(d);
                return rc;
        }
        snprintf(d->cs->path, sizeof d->cs->path, "cuda");
        snprintf(d->cs->runtime, sizeof d->cs->runtime, "%s", d->cu->lib);
        *out = d;
        return 0;
}

void loom__cudev_close(loom__cudev *d)
{
        if (!d)
                return;
        if (d->cu) {
                if (d->stream)
                        d->cu->StreamSynchronize(d->stream);
                lane *lanes[2] = {&d->rd, &d->wr};
                for (int k = 0; k < 2; k++) {
                        for (int i = 0; i < 2; i++)
                                if (lanes[k]->ev[i])
                                        d->cu->EventDestroy(lanes[k]->ev[i]);
                        if (lanes[k]->mem)
                                d->cu->HostUnregister(lanes[k]->mem);
                }
                if (d->stream)
                        d->cu->StreamDestroy(d->stream);
        }
        free(d->rd.mem);
        free(d->wr.mem);
        free(d);
}

int loom__cudev_wrote(const loom__cudev *d)
{
        return d->wrote;
}

uint64_t loom__cudev_fetched(const loom__cudev *d)
{
        return d->fetched;
}

/* Issue one copy through the lane's next half, record its event, and move on to the other. */
static int issue(loom__cudev *d, lane *l, void *dst, const void *src, uint64_t n, int kind,
                 loom_err *e)
{
        int h = l->next;
        int rc = check(d, d->cu->MemcpyAsync(dst, src, 2 * n, kind, d->stream),
                       kind == LOOM__CUDA_D2H ? "cudaMemcpyAsync (device to host)"
                                              : "cudaMemcpyAsync (host to device)",
                       e);
        if (!rc)
                rc = check(d, d->cu->EventRecord(l->ev[h], d->stream), "cudaEventRecord", e);
        if (!rc) {
                l->busy[h] = 1;
                l->len[h] = n;
                l->next ^= 1;
                d->cs->copies++;
        }
        return rc;
}

static int wait_half(loom__cudev *d, lane *l, int h, loom_err *e)
{
        if (!l->busy[h])
                return 0;
        l->busy[h] = 0;
        return check(d, d->cu->EventSynchronize(l->ev[h]), "cudaEventSynchronize", e);
}

/* D2H of the next chunk into the read lane's next half, if any is left and that half is free. */
static int read_ahead(loom__cudev *d, loom_err *e)
{
        lane *l = &d->rd;
        if (d->issued >= d->elems || l->busy[l->next])
                return 0;
        uint64_t n = d->elems - d->issued < d->half_elems ? d->elems - d->issued : d->half_elems;
        int rc = issue(d, l, l->half[l->next], d->dev + d->issued, n, LOOM__CUDA_D2H, e);
        if (!rc)
                d->issued += n;
        return rc;
}

int loom__cudev_read(loom__cudev *d, uint16_t *dst, uint64_t upto, loom_err *e)
{
        double t0 = loom__now();
        lane *l = &d->rd;
        int rc = upto > d->elems ? loom_err_set(e, LOOM_EINVAL, "weights", "read past the end")
                                 : lane_open(d, l, e);
        while (!rc && d->fetched < upto) {
                rc = read_ahead(d, e);
                if (!rc)
                        rc = read_ahead(d, e); /* two chunks in flight while there are two */
                /* halves are used in turn: with both in flight the older is `next` */
                int h = l->busy[l->next] ? l->next : l->next ^ 1;
                if (!rc)
                        rc = wait_half(d, l, h, e);
                if (!rc) {
                        memcpy(dst + d->fetched, l->half[h], 2 * l->len[h]);
                        d->fetched += l->len[h];
                        d->cs->d2h_bytes += 2 * l->len[h];
                        rc = read_ahead(d, e); /* refill the half just emptied */
                }
        }
        d->cs->d2h_s += loom__now() - t0;
        return rc;
}

int loom__cudev_write(loom__cudev *d, const uint16_t *src, uint64_t g, uint64_t n, loom_err *e)
{
        double t0 = loom__now();
        lane *l = &d->wr;
        int rc = lane_open(d, l, e);
        if (!rc && (g > d->elems || n > d->elems - g))
                rc = loom_err_set(e, LOOM_EINVAL, "weights", "write outside the device weights");
        for (uint64_t at = 0; !rc && at < n;) {
                int h = l->next;
                uint64_t k = n - at < d->half_elems ? n - at : d->half_elems;
                rc = wait_half(d, l, h, e); /* its previous H2D has left the half */
                if (!rc) {
                        memcpy(l->half[h], src + at, 2 * k);
                        rc = issue(d, l, d->dev + g + at, l->half[h], k, LOOM__CUDA_H2D, e);
                }
                if (!rc) {
                        d->wrote = 1;
                        d->cs->h2d_bytes += 2 * k;
                        at += k;
                }
        }
        d->cs->h2d_s += loom__now() - t0;
        return rc;
}

int loom__cudev_finish(loom__cudev *d, loom_err *e)
{
        double t0 = loom__now();
        int rc = check(d, d->cu->StreamSynchronize(d->stream), "cudaStreamSynchronize", e);
        d->wr.busy[0] = d->wr.busy[1] = 0; /* reads are waited for one by one */
        d->cs->h2d_s += loom__now() - t0;
        return rc;
}

/* ---- the public calls ------------------------------------------------------------------ */

static int fill_dev(void *arg, uint16_t *w, uint64_t upto, loom_err *e)
{
        return loom__cudev_read(arg, w, upto, e);
}

int loom_sync_pub_publish_cuda(loom_sync_pub *p, uint64_t version, const void *dev_w,
                               const loom_sync_cuda_opts *opts, loom_sync_pub_stats *st,
                               loom_sync_cuda_stats *cs, loom_err *e)
{
        loom_sync_cuda_stats tmp;
        cs = cs ? cs : &tmp;
        memset(cs, 0, sizeof *cs);
        loom__cudev *d;
        int rc = loom__cudev_open((void *)(uintptr_t)dev_w, loom__pub_elems(p), opts, cs, &d, e);
        if (rc)
                return rc;
        loom_sync_pub_stats tst;
        st = st ? st : &tst;
        rc = loom__pub_publish_from(p, version, fill_dev, d, st, e);
        loom__cudev_close(d);
        cs->encode_s = st->encode_s > cs->d2h_s ? st->encode_s - cs->d2h_s : 0;
        return rc;
}

int loom_sync_pull_cuda(const uint8_t *key, const char *model, const char *ip, uint16_t port,
                        const uint64_t *shard_elems, size_t nshards, void *dev_w, uint64_t have,
                        uint64_t want, double timeout_s, const loom_sync_cuda_opts *opts,
                        loom_sync_pull_stats *st, loom_sync_cuda_stats *cs, loom_err *e)
{
        loom_sync_cuda_stats tmp;
        cs = cs ? cs : &tmp;
        memset(cs, 0, sizeof *cs);
        loom_sync_pull_stats tst;
        st = st ? st : &tst;
        memset(st, 0, sizeof *st);
        st->version = have;
        if (!shard_elems || nshards == 0)
                return loom_err_set(e, LOOM_EINVAL, "shards", "need at least one shard");
        uint64_t elems = 0;
        for (size_t s = 0; s < nshards; s++)
                elems += shard_elems[s];
        if (elems == 0)
                return loom_err_set(e, LOOM_EINVAL, "shards", "the shards hold no element");
        loom__cudev *d;
        int rc = loom__cudev_open(dev_w, elems, opts, cs, &d, e);
        if (rc)
                return rc;
        rc = loom__pull_ex(key, model, ip, port, shard_elems, nshards, NULL, d, opts, have, want,
                           timeout_s, st, cs, e);
        loom__cudev_close(d);
        return rc;
}
