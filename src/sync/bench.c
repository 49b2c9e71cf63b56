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

/* CPU seconds of HMAC-SHA-256 over the frame (header + payload), for comparison. */
static double hmac_seconds(const loom_sync_frame *f, const uint8_t *payload);

static double cpu_seconds(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double median(double *v, int n)
{
        for (int i = 1; i < n; i++)
                for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
                        double t = v[j];
                        v[j] = v[j - 1], v[j - 1] = t;
                }
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* What a keyed receiver does with a frame: tag the payload a block at a time (as
 * loom__frame_recv_mac does while reading it), compare, then decode without the CRC.
 * Non-zero when the tag or the decode fails. */
static int keyed_decode(loom__mac *rx, const loom_sync_frame *f, const uint8_t *payload,
                        const uint8_t tag[LOOM__MAC_LEN], const uint16_t *old, uint16_t *out,
                        size_t n)
{
        uint8_t hdr[LOOM_SYNC_FRAME_HDR], want[LOOM__MAC_LEN];
        loom_err ignored;
        loom_sync_frame_pack(f, hdr);
        loom__mac_begin(rx);
        for (size_t off = 0; off < f->payload_len; off += LOOM__MAC_BLOCK) {
                size_t k = (size_t)f->payload_len - off;
                loom__mac_update(rx, payload + off, k < LOOM__MAC_BLOCK ? k : LOOM__MAC_BLOCK);
        }
        loom__mac_end(rx, hdr, want);
        if (!loom__mac_equal(tag, want, LOOM__MAC_LEN))
                return -1;
        return loom__decode(f, payload, old, out, n, 0, &ignored);
}

enum { CODEC_REPS = 5 }; /* plain and keyed alternate this many times per row */

int loom_sync_codec_bench(
    uint64_t seed, size_t n,
    loom_sync_codec_row rows[LOOM_SYNC_CODEC_DENSITIES * (LOOM_SYNC_ENC_AUTO + 1)], loom_err *e)
{
        static const double dens[LOOM_SYNC_CODEC_DENSITIES] = {0.001, 0.01, 0.05, 0.1,
                                                               0.2,   0.5,  0.9,  1.0};
        static const uint8_t key[LOOM_SYNC_KEY_LEN] = {1};
        if (!n)
                return loom_err_set(e, LOOM_EINVAL, "bucket", "an empty bucket");
        uint16_t *old = malloc(2 * n + 2), *nw = malloc(2 * n + 2), *out = malloc(2 * n + 2);
        uint8_t *buf = malloc(loom_sync_enc_bound(n)), *kbuf = malloc(loom_sync_enc_bound(n));
        int rc = 0;
        if (!old || !nw || !out || !buf || !kbuf) {
                rc = loom_err_set(e, LOOM_ENOMEM, "bucket", "cannot allocate a %zu-element bucket",
                                  n);
                goto done;
        }
        loom__mac tx, rx; /* both ends of one keyed pull */
        loom__mac_init(&tx, key, NULL);
        loom__mac_session(&tx); /* once per pull, not per frame */
        rx = tx;
        loom_sync_codec_row *row = rows;
        for (size_t d = 0; d < LOOM_SYNC_CODEC_DENSITIES; d++) {
                loom_sync_synth(seed, 0, dens[d], 0, n, old);
                loom_sync_synth(seed, 1, dens[d], 0, n, nw);
                memcpy(out, old, 2 * n); /* fault the pages in before timing */
                memcpy(kbuf, old, 2 * n);
                for (int k = 0; k <= LOOM_SYNC_ENC_AUTO; k++, row++) {
                        double enc[CODEC_REPS], dec[CODEC_REPS], tenc[CODEC_REPS], tdec[CODEC_REPS];
                        loom_sync_frame f, kf;
                        uint8_t hdr[LOOM_SYNC_FRAME_HDR], tag[LOOM__MAC_LEN];
                        loom_err ignored;
                        int ok = 1;
                        for (int r = 0; r < CODEC_REPS; r++) {
                                /* alternate which goes first, so neither always finds the
                                 * other's bytes in cache */
                                for (int pass = 0; pass < 2; pass++) {
                                        double t0 = cpu_seconds();
                                        if ((pass ^ r) & 1) {
                                                loom__encode(old, nw, n, (loom_sync_enc)k, kbuf,
                                                             &kf, &tx, &ignored);
                                                loom_sync_frame_pack(&kf, hdr);
                                                loom__mac_end(&tx, hdr, tag);
                                                tenc[r] = cpu_seconds() - t0;
                                        } else {
                                                loom_sync_encode(old, nw, n, (loom_sync_enc)k, buf,
                                                                 &f, &ignored);
                                                enc[r] = cpu_seconds() - t0;
                                        }
                                }
                                for (int pass = 0; pass < 2; pass++) {
                                        double t0 = cpu_seconds();
                                        if ((pass ^ r) & 1) {
                                                ok &= !keyed_decode(&rx, &kf, kbuf, tag, old, out,
                                                                    n) &&
                                                      !memcmp(out, nw, 2 * n);
                                                tdec[r] = cpu_seconds() - t0;
                                        } else {
                                                ok &= !loom_sync_decode(&f, buf, old, out, n,
                                                                        &ignored) &&
                                                      !memcmp(out, nw, 2 * n);
                                                dec[r] = cpu_seconds() - t0;
                                        }
                                }
                                double te = tenc[r], td = tdec[r];
                                tenc[r] = te / enc[r], tdec[r] = td / dec[r];
                        }
                        double hmac = hmac_seconds(&f, buf);
                        double me = median(enc, CODEC_REPS), md = median(dec, CODEC_REPS);
                        *row = (loom_sync_codec_row){
                            .density = dens[d],
                            .enc = (loom_sync_enc)k,
                            .chosen = f.enc,
                            .size_fraction = (double)f.payload_len / (double)(2 * n),
                            .encode_gbps = 2.0 * (double)n / me / 1e9,
                            .decode_gbps = 2.0 * (double)n / md / 1e9,
                            .round_trip = ok,
                            .tag_encode_frac = median(tenc, CODEC_REPS) - 1,
                            .tag_decode_frac = median(tdec, CODEC_REPS) - 1,
                            .hmac_encode_frac = hmac / me};
                }
        }
done:
        free(old), free(nw), free(out), free(buf), free(kbuf);
        return rc;
}

static double hmac_seconds(const loom_sync_frame *f, const uint8_t *payload)
{
        static const uint8_t key[LOOM_SYNC_KEY_LEN] = {1};
        uint8_t hdr[LOOM_SYNC_FRAME_HDR], tag[LOOM__REQ_TAG_LEN];
        struct hmac_sha256_ctx c;
        hmac_sha256_set_key(&c, sizeof key, key);
        loom_sync_frame_pack(f, hdr);
        double t0 = cpu_seconds();
        hmac_sha256_update(&c, sizeof hdr, hdr);
        hmac_sha256_update(&c, (size_t)f->payload_len, payload);
        hmac_sha256_digest(&c, sizeof tag, tag);
        return cpu_seconds() - t0;
}
