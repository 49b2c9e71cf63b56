/*
 * gpubench.c - `loom-state bench --device cuda`: loom-state's CUDA path against the copies the
 * CUDA runtime does on its own, in one run. A private daemon serves in a thread of this process;
 * clients talk to it over its socket, as workers would.
 *
 *   offload / load     one state of cfg->bytes in GPU memory, GPU -> host tier -> GPU
 *   pinned, pageable   cudaMemcpy of the same bytes to and from cudaMallocHost / malloc memory:
 *                      the ceiling (pinned DMA) and what an unregistered copy gets
 *   switch             one client offloads state B while another loads state A, two threads and
 *                      two streams: the combined GB/s of a context switch on one GPU
 *
 * Every load is checked: the state is copied back to the host and its CRC32C compared.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/cuda.h"
#include "internal.h"
#include "loom/sync.h"

typedef struct gbench {
        const loom_state_gpu_bench_cfg *cfg;
        const loom__cuda *cu;
        loom_state_daemon *d;
        pthread_t thr;
        loom_state_client *c[2];
        uint8_t *gpu[2]; /* two states in GPU memory */
        uint8_t *host;   /* pageable scratch of cfg->bytes */
        uint32_t crc[2];
        char dir[4096];
} gbench;

static void ios(const gbench *b, int s, const char *job, uint64_t version, loom_state_io *io,
                size_t n)
{
        uint64_t each = b->cfg->tensor_bytes;
        for (size_t i = 0; i < n; i++) {
                char name[32];
                snprintf(name, sizeof name, "t%zu", i);
                memset(&io[i], 0, sizeof io[i]);
                loom_state_key_flat(&io[i].key, job, version, name, each / 2, "bf16");
                io[i].fd = -1;
                io[i].ptr = b->gpu[s] + i * each;
                io[i].len = each;
        }
}

/* Fill GPU state s with a pattern (through the pageable scratch) and remember its CRC. */
static int fill(gbench *b, int s, loom_err *e)
{
        for (uint64_t i = 0; i < b->cfg->bytes; i++)
                b->host[i] = (uint8_t)((i * 2654435761u >> 13) + (uint64_t)s * 77);
        b->crc[s] = loom_sync_crc32c(0, b->host, b->cfg->bytes);
        return loom__cuda_check(b->cu,
                                b->cu->Memcpy(b->gpu[s], b->host, b->cfg->bytes, LOOM__CUDA_H2D),
                                "cudaMemcpy", e);
}

static int verify(gbench *b, int s, const char *what, loom_err *e)
{
        int rc = loom__cuda_check(b->cu,
                                  b->cu->Memcpy(b->host, b->gpu[s], b->cfg->bytes, LOOM__CUDA_D2H),
                                  "cudaMemcpy", e);
        if (!rc && loom_sync_crc32c(0, b->host, b->cfg->bytes) != b->crc[s])
                rc = loom_err_set(e, LOOM_ECORRUPT, "load", "%s: the bytes back on the GPU differ",
                                  what);
        return rc;
}

/* Seconds of one cudaMemcpy of the state between GPU state 0 and h (kind). */
static int copy_time(gbench *b, void *h, int kind, double *best, loom_err *e)
{
        uint8_t *g = b->gpu[0];
        double t0 = loom__state_now();
        int rc = b->cu->Memcpy(kind == LOOM__CUDA_D2H ? h : g, kind == LOOM__CUDA_D2H ? g : h,
                               b->cfg->bytes, kind);
        double dt = loom__state_now() - t0;
        if (dt < *best)
                *best = dt;
        return loom__cuda_check(b->cu, rc, "cudaMemcpy", e);
}

static int fig_baselines(gbench *b, loom_state_gpu_bench_result *r, loom_err *e)
{
        void *pin = NULL;
        int rc =
            loom__cuda_check(b->cu, b->cu->MallocHost(&pin, b->cfg->bytes), "cudaMallocHost", e);
        double pd = 1e30, ph = 1e30, gd = 1e30, gh = 1e30;
        for (int k = 0; k < b->cfg->repeats && !rc; k++) {
                rc = copy_time(b, pin, LOOM__CUDA_D2H, &pd, e);
                if (!rc)
                        rc = copy_time(b, pin, LOOM__CUDA_H2D, &ph, e);
                if (!rc)
                        rc = copy_time(b, b->host, LOOM__CUDA_D2H, &gd, e);
                if (!rc)
                        rc = copy_time(b, b->host, LOOM__CUDA_H2D, &gh, e);
        }
        if (pin)
                b->cu->FreeHost(pin);
        double g = (double)b->cfg->bytes / 1e9;
        r->pinned_d2h_gbps = g / pd;
        r->pinned_h2d_gbps = g / ph;
        r->pageable_d2h_gbps = g / gd;
        r->pageable_h2d_gbps = g / gh;
        return rc;
}

static int fig_offload_load(gbench *b, loom_state_gpu_bench_result *r, loom_err *e)
{
        size_t n = b->cfg->bytes / b->cfg->tensor_bytes;
        loom_state_io *io = calloc(n, sizeof *io);
        if (!io)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int rc = fill(b, 0, e);
        double off = 1e30, ld = 1e30;
        for (int k = 0; k < b->cfg->repeats && !rc; k++) {
                /* a fresh version each time: the same key again would be deduplicated */
                ios(b, 0, "gpu-a", (uint64_t)k + 1, io, n);
                loom_state_result res;
                double t0 = loom__state_now();
                rc = loom_state_cuda_offload(b->c[0], io, n, b->cfg->device, LOOM_STATE_HOST, &res,
                                             e);
                double dt = loom__state_now() - t0;
                off = dt < off ? dt : off;
                r->buckets = res.buckets;
                if (!rc)
                        rc = loom__cuda_check(b->cu, b->cu->Memset(b->gpu[0], 0, b->cfg->bytes),
                                              "cudaMemset", e);
                t0 = loom__state_now();
                if (!rc)
                        rc = loom_state_cuda_load(b->c[0], io, n, b->cfg->device, &res, e);
                dt = loom__state_now() - t0;
                ld = dt < ld ? dt : ld;
                if (!rc)
                        rc = verify(b, 0, "load", e);
                if (!rc && k + 1 < b->cfg->repeats)
                        rc = loom_state_drop(b->c[0], "gpu-a", (uint64_t)k + 1, e);
        }
        free(io);
        r->offload_gbps = (double)b->cfg->bytes / off / 1e9;
        r->load_gbps = (double)b->cfg->bytes / ld / 1e9;
        return rc;
}

typedef struct sw_arg {
        gbench *b;
        int load;
        int rc;
        loom_err e;
} sw_arg;

static void *sw_run(void *p)
{
        sw_arg *a = p;
        gbench *b = a->b;
        size_t n = b->cfg->bytes / b->cfg->tensor_bytes;
        loom_state_io *io = calloc(n, sizeof *io);
        if (!io) {
                a->rc = loom_err_set(&a->e, LOOM_ENOMEM, "", "out of memory");
                return NULL;
        }
        loom_state_result res;
        if (a->load) { /* state A, stored by fig_offload_load as the last version */
                ios(b, 0, "gpu-a", (uint64_t)b->cfg->repeats, io, n);
                a->rc = loom_state_cuda_load(b->c[0], io, n, b->cfg->device, &res, &a->e);
        } else {
                ios(b, 1, "gpu-b", 1, io, n);
                a->rc = loom_state_cuda_offload(b->c[1], io, n, b->cfg->device, LOOM_STATE_HOST,
                                                &res, &a->e);
        }
        free(io);
        return NULL;
}

static int fig_switch(gbench *b, loom_state_gpu_bench_result *r, loom_err *e)
{
        int rc = fill(b, 1, e);
        if (!rc)
                rc = loom__cuda_check(b->cu, b->cu->Memset(b->gpu[0], 0, b->cfg->bytes),
                                      "cudaMemset", e);
        if (rc)
                return rc;
        sw_arg a[2] = {{.b = b, .load = 1}, {.b = b, .load = 0}};
        pthread_t t[2];
        int started = 0;
        double t0 = loom__state_now();
        for (; started < 2; started++)
                if (pthread_create(&t[started], NULL, sw_run, &a[started]) != 0)
                        break;
        for (int i = 0; i < started; i++)
                pthread_join(t[i], NULL);
        double dt = loom__state_now() - t0;
        if (started < 2)
                return loom_err_set(e, LOOM_ENOMEM, "", "cannot start the switch threads");
        for (int i = 0; i < 2; i++)
                if (a[i].rc) {
                        *e = a[i].e;
                        return a[i].rc;
                }
        r->switch_s = dt;
        r->switch_gbps = 2.0 * (double)b->cfg->bytes / dt / 1e9;
        return verify(b, 0, "switch load", e);
}

static void cleanup(gbench *b)
{
        for (int i = 0; i < 2; i++) {
                loom_state_close(b->c[i]);
                if (b->gpu[i])
                        b->cu->Free(b->gpu[i]);
        }
        loom__state_unserve(b->d, b->thr);
        free(b->host);
        rmdir(b->dir);
}

static int start(gbench *b, loom_state_gpu_bench_result *r, loom_err *e)
{
        const loom_state_gpu_bench_cfg *cfg = b->cfg;
        loom_state_cfg dc;
        loom_state_cfg_default(&dc);
        dc.dir = b->dir;
        dc.host_bytes = st_round(2 * cfg->bytes + (8 << 20)); /* states A and B */
        dc.disk_bytes = st_round(cfg->bytes);
        int rc = loom__state_serve(&dc, &b->d, &b->thr, e);
        if (rc)
                return rc;
        r->host_locked = loom__state_daemon_store(b->d)->locked;
        for (int i = 0; i < 2 && !rc; i++) {
                rc = loom_state_connect(loom_state_daemon_sock(b->d), &b->c[i], e);
                if (!rc && cfg->bucket_bytes)
                        loom_state_cuda_bucket(b->c[i], cfg->bucket_bytes);
        }
        for (int i = 0; i < 2 && !rc; i++)
                rc = loom__cuda_check(b->cu, b->cu->Malloc((void **)&b->gpu[i], cfg->bytes),
                                      "cudaMalloc", e);
        if (!rc && !(b->host = malloc(cfg->bytes)))
                rc = loom_err_set(e, LOOM_ENOMEM, "bytes", "host scratch of %llu bytes",
                                  (unsigned long long)cfg->bytes);
        return rc;
}

int loom_state_gpu_bench(const loom_state_gpu_bench_cfg *in, loom_state_gpu_bench_result *r,
                         loom_err *e)
{
        loom_state_gpu_bench_cfg cfg = *in;
        if (!cfg.bytes)
                cfg.bytes = UINT64_C(4) << 30;
        if (!cfg.tensor_bytes) /* 64 MiB, or 16 tensors of a smaller state */
                cfg.tensor_bytes = cfg.bytes >= (UINT64_C(1) << 30) ? UINT64_C(64) << 20
                                                                    : st_round(cfg.bytes / 16);
        if (cfg.repeats <= 0)
                cfg.repeats = 3;
        if (!cfg.dir)
                return loom_err_set(e, LOOM_EINVAL, "dir", "a scratch directory is needed");
        if (cfg.tensor_bytes % ST_ALIGN || cfg.bytes % cfg.tensor_bytes)
                return loom_err_set(e, LOOM_EINVAL, "bytes",
                                    "the state must be whole tensors of a multiple of 4096 bytes "
                                    "(%llu per tensor)",
                                    (unsigned long long)cfg.tensor_bytes);
        memset(r, 0, sizeof *r);
        gbench b = {.cfg = &cfg};
        int rc = loom__cuda_get(&b.cu, e);
        if (!rc && (cfg.device < 0 || cfg.device >= b.cu->devices))
                rc = loom_err_set(e, LOOM_EINVAL, "device", "CUDA device %d of %d", cfg.device,
                                  b.cu->devices);
        if (rc)
                return rc;
        snprintf(r->lib, sizeof r->lib, "%s", b.cu->lib);
        r->device = cfg.device;
        r->bytes = cfg.bytes;
        snprintf(b.dir, sizeof b.dir, "%.4000s/loom-state-gpubench-%d", cfg.dir, (int)getpid());
        rc = start(&b, r, e);
        if (!rc)
                rc = fig_baselines(&b, r, e);
        if (!rc)
                rc = fig_offload_load(&b, r, e);
        if (!rc)
                rc = fig_switch(&b, r, e);
        cleanup(&b);
        return rc;
}

void loom_state_gpu_bench_print(FILE *f, const loom_state_gpu_bench_result *r, int json)
{
        double gib = (double)r->bytes / (double)(UINT64_C(1) << 30);
        if (json) {
                fprintf(f,
                        "{\"path\":\"cuda\",\"lib\":\"%s\",\"device\":%d,\"bytes\":%llu,"
                        "\"offload_gbps\":%.3f,\"load_gbps\":%.3f,\"pinned_d2h_gbps\":%.3f,"
                        "\"pinned_h2d_gbps\":%.3f,\"pageable_d2h_gbps\":%.3f,"
                        "\"pageable_h2d_gbps\":%.3f,\"switch_gbps\":%.3f,\"switch_s\":%.4f,"
                        "\"buckets\":%u,\"host_locked\":%s}\n",
                        r->lib, r->device, (unsigned long long)r->bytes, r->offload_gbps,
                        r->load_gbps, r->pinned_d2h_gbps, r->pinned_h2d_gbps, r->pageable_d2h_gbps,
                        r->pageable_h2d_gbps, r->switch_gbps, r->switch_s, r->buckets,
                        r->host_locked ? "true" : "false");
                return;
        }
        fprintf(f, "loom-state bench, path cuda (%s, device %d), state %.2f GiB in %u buckets\n",
                r->lib, r->device, gib, r->buckets);
        fprintf(f,
                "  offload GPU -> host tier   %8.2f GB/s  (pinned cudaMemcpy D2H %.2f, "
                "pageable %.2f; %.0f%% of pinned)\n",
                r->offload_gbps, r->pinned_d2h_gbps, r->pageable_d2h_gbps,
                100 * r->offload_gbps / r->pinned_d2h_gbps);
        fprintf(f,
                "  load host tier -> GPU      %8.2f GB/s  (pinned cudaMemcpy H2D %.2f, "
                "pageable %.2f; %.0f%% of pinned)\n",
                r->load_gbps, r->pinned_h2d_gbps, r->pageable_h2d_gbps,
                100 * r->load_gbps / r->pinned_h2d_gbps);
        fprintf(f, "  switch (offload B + load A, two streams) %.2f GB/s combined, %.3f s\n",
                r->switch_gbps, r->switch_s);
        fprintf(f, "  host pool pinned (mlock): %s\n", r->host_locked ? "yes" : "no");
}
