/*
 * cuda_bench.c - `loom sync bench --device cuda|host` (sync.h): one process publishes a model
 * (version 0, then version 1 changing --density of it) and pulls it back over loopback TCP,
 * from and into GPU memory or host memory, and prints each stage's time, so a GPU run shows
 * where a publish + pull spends it: D2H, encode, send+receive, decode, H2D. The same figures
 * with --device host are the baseline. Every pulled version is read back and compared with
 * the published one bit for bit. The GPU puller keeps its checksums and its host buffer
 * between pulls (loom_sync_cuda_opts), as a rollout worker does through loom.weights; the host
 * puller, whose API has neither, allocates per pull.
 *
 * send and receive are one stage: the publisher's thread writes what the puller reads on the
 * same socket, so the puller's time in the socket reads covers both.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "loom/cuda.h"

typedef struct brow {
        const char *what;
        loom_sync_pub_stats ps;
        loom_sync_cuda_stats pc, lc; /* publish, pull */
        loom_sync_pull_stats ls;
        double publish_s;
} brow;

typedef struct bench {
        const loom__cuda *cu; /* NULL: host memory */
        loom_sync_pub *pub;
        uint64_t *shards;
        size_t nshards;
        uint64_t elems;
        uint16_t *want, *got; /* host: the version and the puller's weights */
        void *dsrc, *ddst;    /* GPU: the trainer's and the rollout worker's weights */
        const uint8_t *key;
        uint64_t *hash;    /* GPU: the checksums the puller keeps between pulls */
        uint16_t *scratch; /* GPU: the host buffer it keeps to apply frames in */
} bench;

static int publish(bench *b, uint64_t version, brow *r, loom_err *e)
{
        double t0 = loom__now();
        int rc;
        if (b->cu) {
                rc = loom__cuda_check(b->cu,
                                      b->cu->Memcpy(b->dsrc, b->want, 2 * b->elems, LOOM__CUDA_H2D),
                                      "cudaMemcpy (the version to the GPU, untimed)", e);
                t0 = loom__now();
                if (!rc)
                        rc = loom_sync_pub_publish_cuda(b->pub, version, b->dsrc, NULL, &r->ps,
                                                        &r->pc, e);
        } else {
                rc = loom_sync_pub_publish(b->pub, version, b->want, &r->ps, e);
                snprintf(r->pc.path, sizeof r->pc.path, "host");
                r->pc.encode_s = r->ps.encode_s;
        }
        r->publish_s = loom__now() - t0;
        return rc;
}

static int pull(bench *b, uint64_t have, uint64_t want, brow *r, loom_err *e)
{
        uint16_t port = loom_sync_pub_port(b->pub);
        int rc;
        if (b->cu) { /* as a rollout worker would: keeping the checksums of what it holds */
                loom_sync_cuda_opts o = {
                    .have_hash = b->hash, .new_hash = b->hash, .scratch = b->scratch};
                rc = loom_sync_pull_cuda(b->key, "bench", "127.0.0.1", port, b->shards, b->nshards,
                                         b->ddst, have, want, 60, &o, &r->ls, &r->lc, e);
                if (!rc) /* read back for the comparison, untimed */
                        rc = loom__cuda_check(
                            b->cu, b->cu->Memcpy(b->got, b->ddst, 2 * b->elems, LOOM__CUDA_D2H),
                            "cudaMemcpy (read back, untimed)", e);
        } else {
                snprintf(r->lc.path, sizeof r->lc.path, "host");
                rc = loom__pull_ex(b->key, "bench", "127.0.0.1", port, b->shards, b->nshards,
                                   b->got, NULL, NULL, have, want, 60, &r->ls, &r->lc, e);
        }
        if (!rc && memcmp(b->got, b->want, 2 * b->elems))
                rc = loom_err_set(e, LOOM_ECORRUPT, "verify",
                                  "%s: the pulled weights differ from the published ones", r->what);
        return rc;
}

static double gbps(uint64_t bytes, double s)
{
        return s > 0 ? (double)bytes / s / 1e9 : 0;
}

static void print_row(const brow *r, const loom__setup *s, int json, FILE *out)
{
        double other = r->ls.seconds - r->lc.recv_s;
        /* the rest of the pull: the wait for the manifest, clearing or copying the scratch
         * copy, the shards' checksums, the copy into host weights */
        double rest = other - r->lc.decode_s - r->lc.h2d_s - r->lc.d2h_s;
        if (json) {
                fprintf(out,
                        "{\"model\":\"%s\",\"elems\":%llu,\"version\":\"%s\",\"path\":\"%s\","
                        "\"d2h_s\":%.6f,\"encode_s\":%.6f,"
                        "\"publish_s\":%.6f,\"send_recv_s\":%.6f,\"decode_s\":%.6f,\"h2d_s\":%.6f,"
                        "\"base_d2h_s\":%.6f,\"other_s\":%.6f,\"pull_s\":%.6f,\"bytes\":%llu,"
                        "\"changed\":%llu,"
                        "\"recv_share\":%.4f,\"verified\":true}\n",
                        s->layout->model.name, (unsigned long long)s->layout->elems, r->what,
                        r->pc.path, r->pc.d2h_s, r->pc.encode_s, r->publish_s, r->lc.recv_s,
                        r->lc.decode_s, r->lc.h2d_s, r->lc.d2h_s, rest, r->ls.seconds,
                        (unsigned long long)r->ls.bytes, (unsigned long long)r->ls.changed,
                        r->ls.seconds > 0 ? r->lc.recv_s / r->ls.seconds : 0);
                return;
        }
        fprintf(out,
                "%-9s %8.4f %8.4f %9.4f | %9.4f %8.4f %8.4f %8.4f %8.4f %8.4f %12llu %7.2f "
                "%6.1f%%\n",
                r->what, r->pc.d2h_s, r->pc.encode_s, r->publish_s, r->lc.recv_s, r->lc.decode_s,
                r->lc.h2d_s, r->lc.d2h_s, rest, r->ls.seconds, (unsigned long long)r->ls.bytes,
                gbps(r->ls.bytes, r->lc.recv_s),
                r->ls.seconds > 0 ? 100 * (1 - other / r->ls.seconds) : 0);
}

static int run(bench *b, const loom_sync_opts *o, brow rows[2], loom_err *e)
{
        uint64_t bucket = (uint64_t)(o->bucket_mib * (1 << 20)) / 2;
        int rc = loom_sync_pub_new("bench", b->shards, b->nshards, bucket ? bucket : 1, "127.0.0.1",
                                   0, &b->pub, e);
        if (!rc && o->key)
                rc = loom_sync_pub_set_key(b->pub, o->key, e);
        b->key = o->key;
        rows[0].what = "v0 dense";
        rows[1].what = "v1 delta";
        for (uint32_t v = 0; v < 2 && !rc; v++) {
                loom_sync_synth(o->seed, v, o->density, 0, (size_t)b->elems, b->want);
                rc = publish(b, v, &rows[v], e);
                if (!rc)
                        rc = pull(b, v ? 0 : LOOM_SYNC_NO_VERSION, v, &rows[v], e);
        }
        loom_sync_pub_free(b->pub);
        return rc;
}

static int alloc_bench(bench *b, const char *device, const loom_sync_layout *l, loom_err *e)
{
        b->nshards = l->ntensors;
        b->elems = l->elems;
        b->shards = malloc(b->nshards * sizeof *b->shards);
        b->want = malloc(2 * b->elems);
        b->got = calloc(b->elems, 2);
        b->hash = calloc(b->nshards, sizeof *b->hash);
        b->scratch = strcmp(device, "host") ? malloc(2 * b->elems) : NULL;
        if (!b->shards || !b->want || !b->got || !b->hash ||
            (strcmp(device, "host") && !b->scratch))
                return loom_err_set(e, LOOM_ENOMEM, "--model",
                                    "%.2f GB of host memory: out of "
                                    "memory",
                                    4e-9 * (double)b->elems);
        for (size_t t = 0; t < b->nshards; t++)
                b->shards[t] = l->tensors[t].rows * l->tensors[t].cols;
        if (!strcmp(device, "host"))
                return 0;
        int rc = loom__cuda_get(&b->cu, e);
        if (!rc)
                rc =
                    loom__cuda_check(b->cu, b->cu->Malloc(&b->dsrc, 2 * b->elems), "cudaMalloc", e);
        if (!rc)
                rc =
                    loom__cuda_check(b->cu, b->cu->Malloc(&b->ddst, 2 * b->elems), "cudaMalloc", e);
        return rc;
}

static void free_bench(bench *b)
{
        if (b->cu) {
                if (b->dsrc)
                        b->cu->Free(b->dsrc);
                if (b->ddst)
                        b->cu->Free(b->ddst);
        }
        free(b->shards);
        free(b->want);
        free(b->got);
        free(b->hash);
        free(b->scratch);
}

int loom_sync_device_bench_print(const loom_sync_opts *o, const char *device, FILE *out,
                                 loom_err *e)
{
        if (strcmp(device, "cuda") && strcmp(device, "host"))
                return loom_err_set(e, LOOM_EINVAL, "--device", "'%s' is not cuda or host", device);
        loom__setup s;
        int rc = loom__setup_build(o, &s, e);
        if (rc)
                return rc;
        bench b = {0};
        brow rows[2];
        memset(rows, 0, sizeof rows);
        rc = alloc_bench(&b, device, s.layout, e);
        if (rc && !strcmp(e->field, "cuda"))
                snprintf(e->field, sizeof e->field, "--device cuda");
        if (!rc)
                rc = run(&b, o, rows, e);
        if (!rc && !o->json) {
                fprintf(out,
                        "device %s%s%s, model %s: %llu elements (%.2f GB bf16) in %zu shards, "
                        "bucket %g MiB, density %g, loopback TCP%s\n",
                        device, b.cu ? ", runtime " : "", b.cu ? b.cu->lib : "",
                        s.layout->model.name, (unsigned long long)b.elems, 2e-9 * (double)b.elems,
                        b.nshards, o->bucket_mib, o->density, o->key ? ", keyed" : "");
                fprintf(out, "%-9s %8s %8s %9s | %9s %8s %8s %8s %8s %8s %12s %7s %7s\n", "version",
                        "D2H s", "encode s", "publish s", "send+recv", "decode s", "H2D s",
                        "base D2H", "other s", "pull s", "bytes", "net GB/s", "net %");
        }
        for (int i = 0; i < 2 && !rc; i++)
                print_row(&rows[i], &s, o->json, out);
        if (!rc && !o->json)
                fprintf(out,
                        "verified: each pulled version equals the published one bit for bit.\n"
                        "net %%: the pull's time in socket reads (send+recv) over its wall time. "
                        "D2H, H2D: time not hidden behind encoding and receiving. other: the "
                        "manifest's wait, scratch, checksums\n");
        free_bench(&b);
        loom__setup_free(&s);
        return rc;
}
