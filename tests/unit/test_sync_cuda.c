/*
 * test_sync_cuda.c - the sync engine's GPU path (src/sync/cuda_sync.c) on the CUDA runtime's
 * test double (tests/gpu/fakecudart.c, through $LOOM_CUDART): no GPU is involved, the double's
 * "device memory" is malloc'd and its copies are memcpy, run at once or (FAKECUDART_ASYNC=1)
 * later on a thread per stream, so a staging half reused or read before its copy finished
 * shows up as wrong bytes. Checked: dense, sparse and chained pulls through device memory bit
 * for bit; a GPU publisher serves host pullers and a host publisher GPU pullers with the same
 * bytes on the wire; no runtime or device, a bad pointer or device refused naming it; a failed
 * pull into the device says what it left; the bench verifies. Real GPUs: `make test-gpu`.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "gpu/fakecudart.h"
#include "loom/cuda.h"
#include "loom/sync.h"

static const uint64_t shards[3] = {1000, 5000, 37};
#define ELEMS 6037
#define BUCKET 512
static const loom_sync_cuda_opts small = {.device = 0, .staging_bytes = 2 * 700}; /* 9 chunks */

static const loom__cuda *fake(int async)
{
        setenv("LOOM_CUDART", FAKECUDART, 1);
        if (async) {
                setenv("FAKECUDART_ASYNC", "1", 1);
                setenv("FAKECUDART_DELAY_US", "300", 1);
        }
        const loom__cuda *cu;
        loom_err e;
        cr_assert_eq(loom__cuda_get(&cu, &e), 0, "%s", e.msg);
        return cu;
}

static fakecudart_counters counters(void)
{
        fakecudart_counters c;
        cr_assert_eq(fakecudart_read(FAKECUDART, &c), 0, "the double is loaded");
        return c;
}

static void *dev_alloc(const loom__cuda *cu, size_t bytes)
{
        void *p = NULL;
        cr_assert_eq(cu->Malloc(&p, bytes), 0);
        return p;
}

static void to_dev(const loom__cuda *cu, void *dev, const uint16_t *w)
{
        cr_assert_eq(cu->Memcpy(dev, w, 2 * ELEMS, LOOM__CUDA_H2D), 0);
}

static void from_dev(const loom__cuda *cu, uint16_t *w, const void *dev)
{
        cr_assert_eq(cu->Memcpy(w, dev, 2 * ELEMS, LOOM__CUDA_D2H), 0);
}

/* The device buffer holds exactly want. */
static void assert_on_dev(const loom__cuda *cu, const void *dev, const uint16_t *want,
                          const char *what)
{
        uint16_t *got = malloc(2 * ELEMS);
        from_dev(cu, got, dev);
        bool same = !memcmp(got, want, 2 * ELEMS);
        free(got);
        cr_assert(same, "%s", what);
}

static void fill(uint16_t *w, uint64_t seed)
{
        for (size_t i = 0; i < ELEMS; i++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                w[i] = (uint16_t)(seed >> 48);
        }
}

/* v from u: n elements changed, spread over the shards */
static void step(uint16_t *v, const uint16_t *u, int n, int salt)
{
        memcpy(v, u, 2 * ELEMS);
        for (int k = 0; k < n; k++)
                v[(k * 149 + salt * 31) % ELEMS] ^= (uint16_t)(1 + k + salt);
}

static loom_sync_pub *publisher(void)
{
        loom_err e;
        loom_sync_pub *p;
        cr_assert_eq(loom_sync_pub_new("m", shards, 3, BUCKET, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        return p;
}

/* The publisher and the two device buffers every round trip uses. */
static void release(loom_sync_pub *p, const loom__cuda *cu, void *src, void *dst)
{
        loom_sync_pub_free(p);
        cu->Free(src);
        cu->Free(dst);
}

/* Dense, then a sparse delta, then a chain of two, published from device memory and pulled
 * into device memory, bit for bit; every async copy from registered staging. */
static void round_trip(int async)
{
        const loom__cuda *cu = fake(async);
        loom_err e;
        uint16_t *v[4];
        for (int i = 0; i < 4; i++)
                v[i] = malloc(2 * ELEMS);
        fill(v[0], 1);
        step(v[1], v[0], 40, 1);
        step(v[2], v[1], 25, 2);
        step(v[3], v[2], 25, 3);
        void *src = dev_alloc(cu, 2 * ELEMS), *dst = dev_alloc(cu, 2 * ELEMS);
        loom_sync_pub *p = publisher();
        uint16_t port = loom_sync_pub_port(p);
        loom_sync_pub_stats ps;
        loom_sync_cuda_stats pc, lc;
        loom_sync_pull_stats st;

        to_dev(cu, src, v[0]);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, src, &small, &ps, &pc, &e), 0, "%s", e.msg);
        cr_assert_str_eq(pc.path, "cuda");
        cr_assert_str_eq(pc.runtime, FAKECUDART);
        cr_assert_eq(pc.d2h_bytes, 2 * ELEMS);
        cr_assert_geq(pc.copies, 9);
        cr_assert_eq(ps.changed, ELEMS);
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst,
                                         LOOM_SYNC_NO_VERSION, 0, 5, &small, &st, &lc, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st.base, LOOM_SYNC_NO_VERSION);
        cr_assert_eq(lc.h2d_bytes, 2 * ELEMS);
        cr_assert_eq(lc.d2h_bytes, 0, "a dense pull reads nothing from the device");
        assert_on_dev(cu, dst, v[0], "dense pull");

        to_dev(cu, src, v[1]);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 1, src, &small, &ps, &pc, &e), 0, "%s", e.msg);
        cr_assert_eq(ps.changed, 40);
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst, 0, 1, 5,
                                         &small, &st, &lc, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st.base, 0);
        cr_assert_eq(st.changed, 40);
        cr_assert_eq(st.bytes, ps.delta_bytes);
        cr_assert_lt(lc.h2d_bytes, 2 * ELEMS, "only the changed buckets go to the device");
        assert_on_dev(cu, dst, v[1], "delta pull");

        for (int k = 2; k < 4; k++) {
                to_dev(cu, src, v[k]);
                cr_assert_eq(
                    loom_sync_pub_publish_cuda(p, (uint64_t)k, src, &small, NULL, NULL, &e), 0,
                    "%s", e.msg);
        }
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst, 1, 3, 5,
                                         &small, &st, &lc, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st.version, 3);
        cr_assert_eq(st.base, 1);
        assert_on_dev(cu, dst, v[3], "chain of deltas");

        fakecudart_counters c = counters();
        cr_assert_gt(c.async_copies, 20);
        cr_assert_eq(c.async_unpinned, 0, "every async copy goes through registered staging");
        cr_assert_eq(c.registered_bytes, 0, "staging unregistered after each call");
        release(p, cu, src, dst);
        for (int i = 0; i < 4; i++)
                free(v[i]);
}

Test(sync_cuda, round_trip_dense_sparse_chain)
{
        round_trip(0);
}

Test(sync_cuda, round_trip_copies_complete_late)
{
        round_trip(1);
}

/* The wire is the host path's: a host puller takes a GPU publisher's versions and a GPU puller
 * a host publisher's, and both publishers send the same bytes for the same versions. */
static void interop(int async)
{
        const loom__cuda *cu = fake(async);
        loom_err e;
        uint16_t *a = malloc(2 * ELEMS), *b = malloc(2 * ELEMS), *got = calloc(ELEMS, 2);
        fill(a, 5);
        step(b, a, 60, 4);
        void *src = dev_alloc(cu, 2 * ELEMS), *dst = dev_alloc(cu, 2 * ELEMS);
        loom_sync_pub *gp = publisher(), *hp = publisher();
        loom_sync_pub_stats gs, hs;
        loom_sync_pull_stats st, st2;
        /* GPU publisher, host puller */
        to_dev(cu, src, a);
        cr_assert_eq(loom_sync_pub_publish_cuda(gp, 0, src, &small, &gs, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sync_pub_publish(hp, 0, a, &hs, &e), 0, "%s", e.msg);
        cr_assert_eq(gs.delta_bytes, hs.delta_bytes);
        cr_assert_eq(loom_sync_pull("m", "127.0.0.1", loom_sync_pub_port(gp), shards, 3, got,
                                    LOOM_SYNC_NO_VERSION, 0, 5, &st, &e),
                     0, "%s", e.msg);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        to_dev(cu, src, b);
        cr_assert_eq(loom_sync_pub_publish_cuda(gp, 1, src, &small, &gs, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sync_pub_publish(hp, 1, b, &hs, &e), 0, "%s", e.msg);
        cr_assert_eq(gs.changed, hs.changed);
        cr_assert_eq(gs.delta_bytes, hs.delta_bytes);
        cr_assert_eq(loom_sync_pull("m", "127.0.0.1", loom_sync_pub_port(gp), shards, 3, got, 0, 1,
                                    5, &st, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st.base, 0, "a host puller takes the GPU publisher's delta");
        cr_assert_eq(memcmp(got, b, 2 * ELEMS), 0);
        /* host publisher, GPU puller: dense then (from a) the delta */
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", loom_sync_pub_port(hp), shards, 3,
                                         dst, LOOM_SYNC_NO_VERSION, 1, 5, NULL, &st, NULL, &e),
                     0, "%s", e.msg);
        assert_on_dev(cu, dst, b, "the pulled version");
        to_dev(cu, dst, a);
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", loom_sync_pub_port(hp), shards, 3,
                                         dst, 0, 1, 5, NULL, &st2, NULL, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st2.base, 0);
        cr_assert_eq(st2.bytes, hs.delta_bytes);
        assert_on_dev(cu, dst, b, "the pulled version");
        loom_sync_pub_free(gp);
        loom_sync_pub_free(hp);
        cu->Free(src);
        cu->Free(dst);
        free(a);
        free(b);
        free(got);
}

Test(sync_cuda, gpu_and_host_interoperate)
{
        interop(0);
}

Test(sync_cuda, gpu_and_host_interoperate_copies_late)
{
        interop(1);
}

/* With a sync key the GPU path's frames are tagged and checked as the host path's. */
Test(sync_cuda, keyed_pull_into_device)
{
        static const uint8_t key[32] = {3, 1, 4, 1, 5, 9, 2, 6};
        const loom__cuda *cu = fake(1);
        loom_err e;
        uint16_t *a = malloc(2 * ELEMS);
        fill(a, 8);
        void *src = dev_alloc(cu, 2 * ELEMS), *dst = dev_alloc(cu, 2 * ELEMS);
        loom_sync_pub *p = publisher();
        cr_assert_eq(loom_sync_pub_set_key(p, key, &e), 0);
        to_dev(cu, src, a);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 4, src, NULL, NULL, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sync_pull_cuda(key, "m", "127.0.0.1", loom_sync_pub_port(p), shards, 3,
                                         dst, LOOM_SYNC_NO_VERSION, 4, 5, NULL, NULL, NULL, &e),
                     0, "%s", e.msg);
        assert_on_dev(cu, dst, a, "the pulled version");
        release(p, cu, src, dst);
        free(a);
}

static void assert_nothing_published(loom_sync_pub *p)
{
        uint64_t version;
        loom_err e;
        int rc = loom_sync_pull_latest("m", "127.0.0.1", loom_sync_pub_port(p), shards, 3, 0, 0.3,
                                       &version, &e);
        cr_assert_eq(rc, LOOM_ETIMEDOUT, "the publisher has a version: %d %s", rc, e.msg);
}

Test(sync_cuda, no_runtime_or_device_is_a_clear_error)
{
        setenv("LOOM_CUDART", "/nonexistent/libcudart.so", 1);
        loom_err e;
        uint16_t w[4];
        loom_sync_pub *p = publisher();
        int rc = loom_sync_pub_publish_cuda(p, 0, w, NULL, NULL, NULL, &e);
        cr_assert_eq(rc, LOOM_EIO);
        cr_assert(!strncmp(e.msg, "no CUDA runtime: ", 17), "%s", e.msg);
        assert_nothing_published(p);
        loom_sync_cuda_stats cs;
        rc = loom_sync_pull_cuda(NULL, "m", "127.0.0.1", loom_sync_pub_port(p), shards, 3, w,
                                 LOOM_SYNC_NO_VERSION, 0, 1, NULL, NULL, &cs, &e);
        cr_assert_eq(rc, LOOM_EIO);
        cr_assert(!strncmp(e.msg, "no CUDA runtime: ", 17), "%s", e.msg);
        cr_assert_str_eq(cs.path, "", "no path ran");
        cr_assert_eq(loom_sync_cuda_probe(NULL, 0, &e), LOOM_EIO);
        loom_sync_pub_free(p);
}

Test(sync_cuda, no_device_is_a_clear_error)
{
        setenv("LOOM_CUDART", FAKECUDART, 1);
        setenv("FAKECUDART_DEVICES", "0", 1);
        loom_err e;
        uint16_t w[4];
        loom_sync_pub *p = publisher();
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, w, NULL, NULL, NULL, &e), LOOM_ENOENT);
        cr_assert(!strncmp(e.msg, "no CUDA device: ", 16), "%s", e.msg);
        assert_nothing_published(p);
        loom_sync_pub_free(p);
}

/* A host pointer, a short allocation or another device is refused naming the field; nothing is
 * published or connected. */
Test(sync_cuda, bad_pointer_or_device_refused)
{
        const loom__cuda *cu = fake(0);
        loom_err e;
        uint16_t *host = calloc(ELEMS, 2);
        void *shortd = dev_alloc(cu, ELEMS); /* half the model */
        loom_sync_pub *p = publisher();
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, host, NULL, NULL, NULL, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "weights");
        cr_assert(strstr(e.msg, "not CUDA device memory of 6037"), "%s", e.msg);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, shortd, NULL, NULL, NULL, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "weights");
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, NULL, NULL, NULL, NULL, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "weights");
        loom_sync_cuda_opts other = {.device = 3};
        void *d = dev_alloc(cu, 2 * ELEMS);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, d, &other, NULL, NULL, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "device");
        loom_sync_cuda_opts odd = {.staging_bytes = 7};
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, d, &odd, NULL, NULL, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "staging_bytes");
        assert_nothing_published(p);
        /* the pull refuses before it connects: port 1 has no publisher, yet the error is the
         * pointer's */
        loom_sync_pull_stats st;
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", 1, shards, 3, host,
                                         LOOM_SYNC_NO_VERSION, 0, 1, NULL, &st, NULL, &e),
                     LOOM_EINVAL);
        cr_assert_str_eq(e.field, "weights");
        cr_assert_eq(st.version, LOOM_SYNC_NO_VERSION);
        loom_sync_pub_free(p);
        cu->Free(shortd);
        cu->Free(d);
        free(host);
}

/* A pull whose base is not what the device holds writes buckets before the checksums can
 * disagree: it fails, says the device weights hold no version, and a dense pull repairs them. */
Test(sync_cuda, failed_pull_says_the_device_holds_no_version)
{
        const loom__cuda *cu = fake(1);
        loom_err e;
        uint16_t *a = malloc(2 * ELEMS), *b = malloc(2 * ELEMS);
        fill(a, 21);
        step(b, a, 30, 5);
        void *src = dev_alloc(cu, 2 * ELEMS), *dst = dev_alloc(cu, 2 * ELEMS);
        loom_sync_pub *p = publisher();
        to_dev(cu, src, a);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, src, NULL, NULL, NULL, &e), 0, "%s", e.msg);
        to_dev(cu, src, b);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 1, src, NULL, NULL, NULL, &e), 0, "%s", e.msg);
        uint16_t *wrong = malloc(2 * ELEMS);
        fill(wrong, 99); /* not version 0, though the pull says so */
        to_dev(cu, dst, wrong);
        loom_sync_pull_stats st;
        int rc = loom_sync_pull_cuda(NULL, "m", "127.0.0.1", loom_sync_pub_port(p), shards, 3, dst,
                                     0, 1, 5, NULL, &st, NULL, &e);
        cr_assert_eq(rc, LOOM_ECORRUPT, "%d %s", rc, e.msg);
        cr_assert_str_eq(e.field, "checksum");
        cr_assert(strstr(e.msg, "partly overwritten"), "%s", e.msg);
        cr_assert_eq(st.version, LOOM_SYNC_NO_VERSION);
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", loom_sync_pub_port(p), shards, 3,
                                         dst, st.version, 1, 5, NULL, &st, NULL, &e),
                     0, "%s", e.msg);
        assert_on_dev(cu, dst, b, "the pulled version");
        release(p, cu, src, dst);
        free(a);
        free(b);
        free(wrong);
}

/* `loom sync bench --device cuda` and `--device host` on the tiny model: both verify. */
Test(sync_cuda, device_bench_verifies)
{
        fake(1);
        loom_sync_opts o;
        loom_sync_opts_default(&o);
        o.model = "tiny";
        o.bucket_mib = 0.05;
        loom_err e;
        for (int k = 0; k < 2; k++) {
                char *buf = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&buf, &len);
                int rc = loom_sync_device_bench_print(&o, k ? "host" : "cuda", f, &e);
                fclose(f);
                cr_assert_eq(rc, 0, "%s: %s", e.field, e.msg);
                cr_assert(strstr(buf, "v1 delta"), "%s", buf);
                cr_assert(strstr(buf, k ? "device host" : "device cuda, runtime"), "%s", buf);
                free(buf);
        }
        cr_assert_eq(loom_sync_device_bench_print(&o, "tpu", stdout, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "--device");
}

/* Checksums kept from the last pull let a delta check only what it changes: the result is the
 * same bits, the device is read only up to the last changed chunk (an up-to-date pull reads
 * nothing), and wrong checksums or a base whose flipped bits are not the base's still fail the
 * pull. */
Test(sync_cuda, kept_checksums_check_only_what_changes)
{
        const loom__cuda *cu = fake(1);
        loom_err e;
        uint16_t *a = malloc(2 * ELEMS), *b = malloc(2 * ELEMS);
        fill(a, 31);
        memcpy(b, a, 2 * ELEMS);
        for (int k = 0; k < 50; k++) /* all in the first 300 elements: shard 0, chunk 0 */
                b[k * 6] ^= (uint16_t)(3 + k);
        void *src = dev_alloc(cu, 2 * ELEMS), *dst = dev_alloc(cu, 2 * ELEMS);
        loom_sync_pub *p = publisher();
        uint16_t port = loom_sync_pub_port(p);
        uint64_t h[3] = {0}, want[3];
        loom_sync_cuda_opts o = small;
        o.new_hash = h;
        o.scratch = malloc(2 * ELEMS); /* kept across pulls, as a rollout worker would */
        loom_sync_pull_stats st;
        loom_sync_cuda_stats lc;
        to_dev(cu, src, a);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 0, src, &o, NULL, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst,
                                         LOOM_SYNC_NO_VERSION, 0, 5, &o, &st, &lc, &e),
                     0, "%s", e.msg);
        for (size_t s = 0, off = 0; s < 3; off += shards[s++])
                want[s] = loom_sync_hash(a + off, shards[s], off);
        cr_assert_arr_eq(h, want, sizeof h, "the dense pull hands back version 0's checksums");
        to_dev(cu, src, b);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 1, src, NULL, NULL, NULL, &e), 0, "%s", e.msg);
        o.have_hash = h;
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst, 0, 1, 5, &o,
                                         &st, &lc, &e),
                     0, "%s", e.msg);
        assert_on_dev(cu, dst, b, "the pulled version");
        cr_assert_eq(st.changed, 50);
        cr_assert_leq(lc.d2h_bytes, 2 * 2 * 700, "read %llu bytes: more than the changed chunk",
                      (unsigned long long)lc.d2h_bytes);
        for (size_t s = 0, off = 0; s < 3; off += shards[s++])
                want[s] = loom_sync_hash(b + off, shards[s], off);
        cr_assert_arr_eq(h, want, sizeof h, "version 1's checksums, kept for the next pull");
        /* up to date: nothing read from the device */
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst, 1, 1, 5, &o,
                                         &st, &lc, &e),
                     0, "%s", e.msg);
        cr_assert_eq(lc.d2h_bytes, 0);
        /* a chain of two deltas, checked with the kept checksums */
        uint16_t *c2 = malloc(2 * ELEMS), *c3 = malloc(2 * ELEMS);
        step(c2, b, 20, 7);
        step(c3, c2, 20, 8);
        to_dev(cu, src, c2);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 2, src, NULL, NULL, NULL, &e), 0, "%s", e.msg);
        to_dev(cu, src, c3);
        cr_assert_eq(loom_sync_pub_publish_cuda(p, 3, src, NULL, NULL, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst, 1, 3, 5, &o,
                                         &st, &lc, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st.base, 1);
        cr_assert_eq(st.changed, 40, "each link's flips counted");
        assert_on_dev(cu, dst, c3, "chain with kept checksums");
        for (size_t s = 0, off = 0; s < 3; off += shards[s++])
                cr_assert_eq(h[s], loom_sync_hash(c3 + off, shards[s], off));
        to_dev(cu, dst, a); /* version 0 for what follows */
        /* without the checksums the same delta reads and hashes the whole model */
        to_dev(cu, dst, a);
        loom_sync_cuda_opts plain = small;
        cr_assert_eq(loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst, 0, 3, 5,
                                         &plain, &st, &lc, &e),
                     0, "%s", e.msg);
        cr_assert_eq(lc.d2h_bytes, 2 * ELEMS);
        assert_on_dev(cu, dst, c3, "the pulled version");
        /* wrong checksums are refused */
        uint64_t bad[3];
        memcpy(bad, want, sizeof bad);
        bad[2] ^= 1;
        o.have_hash = bad;
        o.new_hash = NULL;
        int rc = loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst, 3, 3, 5, &o, &st,
                                     &lc, &e);
        cr_assert_eq(rc, LOOM_ECORRUPT, "%d %s", rc, e.msg);
        /* a base whose bits differ where the delta flips bits is refused too (elsewhere the
         * check trusts the device: that is what the kept checksums stand for) */
        for (size_t s = 0, off = 0; s < 3; off += shards[s++])
                want[s] = loom_sync_hash(a + off, shards[s], off);
        o.have_hash = want;
        uint16_t *wrong = malloc(2 * ELEMS);
        memcpy(wrong, a, 2 * ELEMS);
        wrong[6] ^= 4; /* the bit the delta flips at element 6 (k = 1: xor 4) */
        to_dev(cu, dst, wrong);
        rc = loom_sync_pull_cuda(NULL, "m", "127.0.0.1", port, shards, 3, dst, 0, 3, 5, &o, &st,
                                 &lc, &e);
        cr_assert_eq(rc, LOOM_ECORRUPT, "%d %s", rc, e.msg);
        cr_assert_eq(st.version, LOOM_SYNC_NO_VERSION);
        free(c2);
        free(c3);
        free(o.scratch);
        release(p, cu, src, dst);
        free(a);
        free(b);
        free(wrong);
}
