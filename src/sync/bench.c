/*
 * bench.c - measurements the engine makes of itself: the codec's speed and size per encoding
 * and density, and the peak memory a multi-process run will need before it is started.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

double loom_sync_run_peak_bytes(const loom_sync_layout *l, const loom_sync_par *roll,
                                loom_sync_plan_kind kind, uint32_t late)
{
        uint32_t nr = loom_sync_par_ranks(roll);
        int sparse = kind == LOOM_SYNC_TOPO_SPARSE;
        /* training ranks hold what they send once (two versions for deltas) */
        double train = (double)l->elems * 2 * (sparse ? 2 : 1);
        double slice = 0;
        for (size_t t = 0; t < l->ntensors; t++) {
                loom_sync_rect r;
                loom_sync_slice(&l->tensors[t], 0, roll->tp, &r);
                slice += (double)loom_sync_rect_elems(&r) * 2;
        }
        /* live copy, plus the staged new version for dense plans and for catch-up */
        double per_rank = slice * (sparse ? 1.1 : 2.0);
        return train + per_rank * (nr - late) + 2 * slice * late;
}

static double mem_available(void)
{
        FILE *f = fopen("/proc/meminfo", "r");
        char line[128];
        double kb = 0;
        while (f && fgets(line, sizeof line, f))
                if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
                        break;
        if (f)
                fclose(f);
        return kb * 1024;
}

int loom_sync_run_check_memory(const loom_sync_layout *l, const loom_sync_par *roll,
                               loom_sync_plan_kind kind, uint32_t late, double limit_bytes,
                               loom_err *e)
{
        double limit = limit_bytes > 0 ? limit_bytes : 0.85 * mem_available();
        double need = loom_sync_run_peak_bytes(l, roll, kind, late);
        if (limit > 0 && need > limit)
                return loom_err_set(e, LOOM_EINVAL, "memory",
                                    "this run needs about %.1f GB of memory, %.1f GB allowed",
                                    need / 1e9, limit / 1e9);
        return 0;
}

/* CPU seconds to tag the frame (header + payload) as a keyed pull does (UMAC-64), and
 * *hmac to take HMAC-SHA-256 of the same bytes. */
static double tag_seconds(const loom_sync_frame *f, const uint8_t *payload, double *hmac);

static double cpu_seconds(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int loom_sync_codec_bench(
    uint64_t seed, size_t n,
    loom_sync_codec_row rows[LOOM_SYNC_CODEC_DENSITIES * (LOOM_SYNC_ENC_AUTO + 1)], loom_err *e)
{
        static const double dens[LOOM_SYNC_CODEC_DENSITIES] = {0.001, 0.01, 0.05, 0.1,
                                                               0.2,   0.5,  0.9,  1.0};
        if (!n)
                return loom_err_set(e, LOOM_EINVAL, "bucket", "an empty bucket");
        uint16_t *old = malloc(2 * n + 2), *nw = malloc(2 * n + 2), *out = malloc(2 * n + 2);
        uint8_t *buf = malloc(loom_sync_enc_bound(n));
        int rc = 0;
        if (!old || !nw || !out || !buf) {
                rc = loom_err_set(e, LOOM_ENOMEM, "bucket", "cannot allocate a %zu-element bucket",
                                  n);
                goto done;
        }
        loom_sync_codec_row *row = rows;
        for (size_t d = 0; d < LOOM_SYNC_CODEC_DENSITIES; d++) {
                loom_sync_synth(seed, 0, dens[d], 0, n, old);
                loom_sync_synth(seed, 1, dens[d], 0, n, nw);
                memcpy(out, old, 2 * n); /* fault the pages in before timing */
                for (int k = 0; k <= LOOM_SYNC_ENC_AUTO; k++, row++) {
                        loom_sync_frame f;
                        loom_err ignored;
                        double t0 = cpu_seconds();
                        loom_sync_encode(old, nw, n, (loom_sync_enc)k, buf, &f, &ignored);
                        double t1 = cpu_seconds();
                        int bad = loom_sync_decode(&f, buf, old, out, n, &ignored);
                        double t2 = cpu_seconds(), hmac;
                        double tag = tag_seconds(&f, buf, &hmac);
                        *row = (loom_sync_codec_row){
                            .density = dens[d],
                            .enc = (loom_sync_enc)k,
                            .chosen = f.enc,
                            .size_fraction = (double)f.payload_len / (double)(2 * n),
                            .encode_gbps = 2.0 * (double)n / (t1 - t0) / 1e9,
                            .decode_gbps = 2.0 * (double)n / (t2 - t1) / 1e9,
                            .round_trip = !bad && !memcmp(out, nw, 2 * n),
                            .tag_encode_frac = tag / (t1 - t0),
                            .tag_decode_frac = tag / (t2 - t1),
                            .hmac_encode_frac = hmac / (t1 - t0)};
                }
        }
done:
        free(old), free(nw), free(out), free(buf);
        return rc;
}

static double tag_seconds(const loom_sync_frame *f, const uint8_t *payload, double *hmac)
{
        static const uint8_t key[LOOM_SYNC_KEY_LEN] = {1};
        uint8_t hdr[LOOM_SYNC_FRAME_HDR], tag[LOOM__REQ_TAG_LEN];
        loom__mac m;
        loom__mac_init(&m, key, NULL);
        loom__mac_session(&m); /* once per pull, not per frame */
        loom_sync_frame_pack(f, hdr);
        double t0 = cpu_seconds();
        loom__mac_frame(&m, hdr, payload, (size_t)f->payload_len, tag);
        double t1 = cpu_seconds();
        struct hmac_sha256_ctx c = m.base;
        hmac_sha256_update(&c, sizeof hdr, hdr);
        hmac_sha256_update(&c, (size_t)f->payload_len, payload);
        hmac_sha256_digest(&c, sizeof tag, tag);
        *hmac = cpu_seconds() - t1;
        return t1 - t0;
}
