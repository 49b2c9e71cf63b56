/*
 * test_state_cuda.c - loom-state's CUDA path (client_cuda.c, cuda.c, gpubench.c) against the
 * test double of the CUDA runtime (tests/gpu/fakecudart.c), loaded through $LOOM_CUDART exactly
 * as a real libcudart would be. The double copies with memcpy and checks that every copy's
 * device side was cudaMalloc'd and counts async copies from unregistered host memory, so these
 * tests check the dlopen, the bucketing, the registration and the round trip; real GPUs are
 * measured by `make test-gpu` (docs/gpu.md). Each test runs in its own process (Criterion), so
 * each loads the runtime afresh.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/fakecudart.h"
#include "loom/cuda.h"
#include "internal.h"
#include "loom/state.h"

typedef struct fx {
        char dir[64];
        loom_state_daemon *d;
        pthread_t t;
        loom_state_client *c;
} fx;

static void fx_start(fx *f)
{
        snprintf(f->dir, sizeof f->dir, "/tmp/loom-state-cuda-XXXXXX");
        cr_assert(mkdtemp(f->dir));
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = f->dir;
        cfg.host_bytes = 16 << 20;
        cfg.disk_bytes = 16 << 20;
        cfg.no_mlock = 1;
        loom_err e;
        cr_assert_eq(loom__state_serve(&cfg, &f->d, &f->t, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_state_connect(loom_state_daemon_sock(f->d), &f->c, &e), 0, "%s", e.msg);
}

static void fx_stop(fx *f)
{
        loom_state_close(f->c);
        loom__state_unserve(f->d, f->t);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
        cr_assert_eq(system(cmd), 0);
}

static const loom__cuda *fake(void)
{
        setenv("LOOM_CUDART", FAKECUDART, 1);
        const loom__cuda *cu;
        loom_err e;
        cr_assert_eq(loom__cuda_get(&cu, &e), 0, "%s", e.msg);
        cr_assert_str_eq(cu->lib, FAKECUDART);
        return cu;
}

static fakecudart_counters counters(void)
{
        fakecudart_counters c;
        cr_assert_eq(fakecudart_read(FAKECUDART, &c), 0, "the double is loaded");
        return c;
}

/* bf16 tensors of these sizes (bytes), each in its own cudaMalloc. */
static const uint64_t sizes[] = {16384, 16384, 16384, 16384, 16384, 204800, 8192};
#define NT (sizeof sizes / sizeof sizes[0])

static void tensors(const loom__cuda *cu, loom_state_io *io, uint8_t **host, uint64_t version)
{
        for (size_t i = 0; i < NT; i++) {
                char name[16];
                snprintf(name, sizeof name, "w%zu", i);
                memset(&io[i], 0, sizeof io[i]);
                loom_state_key_flat(&io[i].key, "job", version, name, sizes[i] / 2, "bf16");
                io[i].fd = -1;
                io[i].len = sizes[i];
                cr_assert_eq(cu->Malloc(&io[i].ptr, sizes[i]), 0);
                host[i] = malloc(sizes[i]);
                for (uint64_t k = 0; k < sizes[i]; k++)
                        host[i][k] = (uint8_t)((k + i * 131) * 2654435761u >> 9);
                cr_assert_eq(cu->Memcpy(io[i].ptr, host[i], sizes[i], LOOM__CUDA_H2D), 0);
        }
}

static void tensors_free(const loom__cuda *cu, loom_state_io *io, uint8_t **host)
{
        for (size_t i = 0; i < NT; i++) {
                free(host[i]);
                cu->Free(io[i].ptr);
        }
}

/* A 4 MiB state of 256 KiB tensors in 1 MiB buckets, through the double. */
static loom_state_gpu_bench_cfg small_bench(int repeats)
{
        return (loom_state_gpu_bench_cfg){.dir = "/tmp",
                                          .bytes = 4 << 20,
                                          .tensor_bytes = 256 << 10,
                                          .bucket_bytes = 1 << 20,
                                          .repeats = repeats};
}

Test(state_cuda, no_runtime_is_a_clear_error)
{
        setenv("LOOM_CUDART", "/nonexistent/libcudart.so", 1);
        loom_err e;
        char lib[64] = "x";
        cr_assert_eq(loom_state_cuda_probe(lib, sizeof lib, &e), LOOM_EIO);
        cr_assert(strstr(e.msg, "no CUDA runtime: LOOM_CUDART=/nonexistent/libcudart.so"), "%s",
                  e.msg);
        cr_assert_str_eq(lib, "");
        fx f;
        fx_start(&f);
        loom_state_io io;
        memset(&io, 0, sizeof io);
        loom_state_key_flat(&io.key, "job", 1, "w", 8, "f32");
        io.fd = -1;
        io.ptr = &io; /* never touched: the runtime is missing */
        io.len = 32;
        loom_state_result res;
        cr_assert_eq(loom_state_cuda_offload(f.c, &io, 1, 0, LOOM_STATE_HOST, &res, &e), LOOM_EIO);
        cr_assert(strstr(e.msg, "no CUDA runtime"), "%s", e.msg);
        loom_state_stats st;
        cr_assert_eq(loom_state_stat(f.c, &st, &e), 0);
        cr_assert_eq(st.host_used, 0, "nothing stored");
        loom_state_stats_free(&st);
        fx_stop(&f);
}

Test(state_cuda, no_device_is_a_clear_error)
{
        setenv("LOOM_CUDART", FAKECUDART, 1);
        setenv("FAKECUDART_DEVICES", "0", 1);
        loom_err e;
        cr_assert_eq(loom_state_cuda_probe(NULL, 0, &e), LOOM_ENOENT);
        cr_assert(strstr(e.msg, "no CUDA device"), "%s", e.msg);
        loom_state_gpu_bench_cfg g = {.dir = "/tmp", .bytes = 1 << 20, .tensor_bytes = 1 << 18};
        loom_state_gpu_bench_result r;
        cr_assert_eq(loom_state_gpu_bench(&g, &r, &e), LOOM_ENOENT);
}

static void round_trip(void)
{
        const loom__cuda *cu = fake();
        char lib[256];
        loom_err e;
        cr_assert_eq(loom_state_cuda_probe(lib, sizeof lib, &e), 1);
        fx f;
        fx_start(&f);
        loom_state_cuda_bucket(f.c, 65536);
        loom_state_io io[NT];
        uint8_t *host[NT];
        tensors(cu, io, host, 1);
        fakecudart_counters c0 = counters();
        loom_state_result res;
        cr_assert_eq(loom_state_cuda_offload(f.c, io, NT, 0, LOOM_STATE_HOST, &res, &e), 0, "%s",
                     e.msg);
        uint64_t total = 0;
        for (size_t i = 0; i < NT; i++)
                total += sizes[i];
        cr_assert_str_eq(res.path, "cuda");
        /* 4 x 16K fill the 64K bucket; then 16K; the 200K tensor alone; 8K */
        cr_assert_eq(res.buckets, 4);
        cr_assert_eq(res.bytes, total);
        fakecudart_counters c1 = counters();
        cr_assert_eq(c1.async_copies - c0.async_copies, NT, "one async copy per tensor");
        cr_assert_eq(c1.async_bytes - c0.async_bytes, total);
        cr_assert_eq(c1.async_unpinned, 0, "every async copy went through registered staging");
        cr_assert_eq(c1.registers, 1);
        cr_assert_geq(c1.registered_bytes, 2 * 204800, "two halves, each the largest bucket");

        /* the stored bytes are the device's: the plain-memory path reads them back */
        uint8_t *plain = malloc(sizes[5]);
        loom_state_io p = io[5];
        p.ptr = plain;
        cr_assert_eq(loom_state_load(f.c, &p, 1, "", &res, &e), 0, "%s", e.msg);
        cr_assert_str_eq(res.path, "emulated");
        cr_assert_eq(memcmp(plain, host[5], sizes[5]), 0);
        free(plain);

        /* zero the device, load back into it */
        for (size_t i = 0; i < NT; i++)
                cr_assert_eq(cu->Memset(io[i].ptr, 0, sizes[i]), 0);
        cr_assert_eq(loom_state_cuda_load(f.c, io, NT, 0, &res, &e), 0, "%s", e.msg);
        cr_assert_str_eq(res.path, "cuda");
        cr_assert_eq(res.buckets, 4);
        cr_assert_eq(res.found, LOOM_STATE_HOST);
        cr_assert_eq(counters().async_unpinned, 0);
        for (size_t i = 0; i < NT; i++) {
                uint8_t *back = malloc(sizes[i]);
                cr_assert_eq(cu->Memcpy(back, io[i].ptr, sizes[i], LOOM__CUDA_D2H), 0);
                cr_assert_eq(memcmp(back, host[i], sizes[i]), 0, "tensor %zu", i);
                free(back);
                free(host[i]);
                cu->Free(io[i].ptr);
        }
        fx_stop(&f);
}

Test(state_cuda, round_trip_in_buckets_through_registered_staging)
{
        round_trip();
}

/* The double's copies run later on a thread per stream, each 2 ms after the previous one: a
 * bucket handed to the daemon before its D2H finished, a half refilled before its H2D finished,
 * or a return before the stream drained would show as wrong bytes. */
Test(state_cuda, round_trip_with_copies_that_complete_late)
{
        setenv("FAKECUDART_ASYNC", "1", 1);
        setenv("FAKECUDART_DELAY_US", "2000", 1);
        round_trip();
}

Test(state_cuda, bench_with_copies_that_complete_late)
{
        setenv("FAKECUDART_ASYNC", "1", 1);
        setenv("FAKECUDART_DELAY_US", "200", 1);
        fake();
        loom_state_gpu_bench_cfg g = small_bench(1);
        loom_state_gpu_bench_result r;
        loom_err e;
        cr_assert_eq(loom_state_gpu_bench(&g, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.buckets, 4);
}

Test(state_cuda, offload_of_one_bucket_and_growth_of_the_staging)
{
        const loom__cuda *cu = fake();
        fx f;
        fx_start(&f);
        loom_state_io io[NT];
        uint8_t *host[NT];
        tensors(cu, io, host, 1);
        loom_state_result res;
        loom_err e;
        /* default bucket (64 MiB): everything in one request */
        cr_assert_eq(loom_state_cuda_offload(f.c, io, 2, 0, LOOM_STATE_HOST, &res, &e), 0);
        cr_assert_eq(res.buckets, 1);
        /* a second call with a bigger tensor grows (re-registers) the staging */
        loom_state_cuda_bucket(f.c, 4096);
        cr_assert_eq(loom_state_cuda_offload(f.c, io + 2, NT - 2, 0, LOOM_STATE_DISK, &res, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(res.buckets, NT - 2, "a bucket smaller than every tensor: one per tensor");
        cr_assert_eq(res.disk_bytes, res.bytes);
        fakecudart_counters c = counters();
        cr_assert_eq(c.registers, c.unregisters + 1, "the old staging was unregistered");
        cr_assert_eq(c.async_unpinned, 0);
        /* the same keys again: deduplicated, nothing copied */
        cr_assert_eq(loom_state_cuda_offload(f.c, io, NT, 0, LOOM_STATE_HOST, &res, &e), 0);
        cr_assert_eq(res.bytes, 0);
        cr_assert_eq(res.dedup_bytes, 16384 * 5 + 204800 + 8192);
        tensors_free(cu, io, host);
        fx_stop(&f);
}

Test(state_cuda, bad_buffers_are_refused)
{
        const loom__cuda *cu = fake();
        fx f;
        fx_start(&f);
        loom_state_io io[NT];
        uint8_t *host[NT];
        tensors(cu, io, host, 1);
        loom_state_result res;
        loom_err e;
        io[1].fd = 3;
        cr_assert_eq(loom_state_cuda_offload(f.c, io, 2, 0, LOOM_STATE_HOST, &res, &e),
                     LOOM_EINVAL);
        cr_assert(strstr(e.msg, "io[1]"), "%s", e.msg);
        io[1].fd = -1;
        io[1].len = 7;
        cr_assert_eq(loom_state_cuda_offload(f.c, io, 2, 0, LOOM_STATE_HOST, &res, &e),
                     LOOM_EINVAL);
        cr_assert_str_eq(e.field, "io[1]");
        io[1].len = sizes[1];
        /* host memory is not device memory: the runtime refuses the copy, the call says which */
        void *dev = io[0].ptr;
        io[0].ptr = host[0];
        cr_assert_eq(loom_state_cuda_offload(f.c, io, 1, 0, LOOM_STATE_HOST, &res, &e), LOOM_EIO);
        cr_assert(strstr(e.msg, "cudaMemcpyAsync: cudaError 1"), "%s", e.msg);
        io[0].ptr = dev;
        cr_assert_eq(loom_state_cuda_offload(f.c, io, 1, 7, LOOM_STATE_HOST, &res, &e), LOOM_EIO);
        cr_assert(strstr(e.msg, "cudaSetDevice"), "%s", e.msg);
        loom_state_stats st;
        cr_assert_eq(loom_state_stat(f.c, &st, &e), 0);
        cr_assert_eq(st.host_used, 0, "nothing stored");
        loom_state_stats_free(&st);
        tensors_free(cu, io, host);
        fx_stop(&f);
}

Test(state_cuda, bench_runs_and_checks_every_load)
{
        fake();
        loom_state_gpu_bench_cfg g = small_bench(2);
        loom_state_gpu_bench_result r;
        loom_err e;
        cr_assert_eq(loom_state_gpu_bench(&g, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.buckets, 4);
        cr_assert_str_eq(r.lib, FAKECUDART);
        cr_assert(r.offload_gbps > 0 && r.load_gbps > 0 && r.switch_gbps > 0);
        cr_assert(r.pinned_d2h_gbps > 0 && r.pageable_h2d_gbps > 0);
        g.bytes = (4 << 20) + 4096;
        cr_assert_eq(loom_state_gpu_bench(&g, &r, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "bytes");
}

/* The machine's own CUDA runtime, when there is one: every entry point loom uses must resolve in
 * it (a missing symbol is a failure, whatever the machine), and with a device the round trip
 * runs on the GPU. Without a runtime or a device the test says why and checks nothing more. */
Test(state_cuda, real_runtime_round_trip_or_the_reason)
{
        unsetenv("LOOM_CUDART");
        char lib[256];
        loom_err e;
        int n = loom_state_cuda_probe(lib, sizeof lib, &e);
        if (n <= 0) {
                cr_assert(!strstr(e.msg, " has no "), "a CUDA entry point is missing: %s", e.msg);
                cr_assert(strstr(e.msg, "no CUDA runtime") || strstr(e.msg, "no CUDA device"), "%s",
                          e.msg);
                cr_skip_test("real GPU round trip: %s", e.msg);
                return;
        }
        const loom__cuda *cu;
        cr_assert_eq(loom__cuda_get(&cu, &e), 0);
        fx f;
        fx_start(&f);
        loom_state_cuda_bucket(f.c, 65536);
        loom_state_io io[NT];
        uint8_t *host[NT];
        tensors(cu, io, host, 1);
        loom_state_result res;
        cr_assert_eq(loom_state_cuda_offload(f.c, io, NT, 0, LOOM_STATE_HOST, &res, &e), 0, "%s",
                     e.msg);
        for (size_t i = 0; i < NT; i++)
                cr_assert_eq(cu->Memset(io[i].ptr, 0, sizes[i]), 0);
        cr_assert_eq(loom_state_cuda_load(f.c, io, NT, 0, &res, &e), 0, "%s", e.msg);
        cr_assert_str_eq(res.path, "cuda");
        for (size_t i = 0; i < NT; i++) {
                uint8_t *back = malloc(sizes[i]);
                cr_assert_eq(cu->Memcpy(back, io[i].ptr, sizes[i], LOOM__CUDA_D2H), 0);
                cr_assert_eq(memcmp(back, host[i], sizes[i]), 0, "tensor %zu on %s", i, lib);
                free(back);
                free(host[i]);
                cu->Free(io[i].ptr);
        }
        fx_stop(&f);
}
