/*
 * test_sync_codec.c - the bf16 delta codec and its frames: round trips at densities from 0 to
 * 100% in every encoding, empty and odd-sized buckets, the encoder's size choice, checksums, and
 * a deterministic mutation fuzz of the decoder (truncated, corrupted, oversized frames must be
 * rejected and leave the old weights untouched).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "loom/sync.h"

static uint64_t rng_state;
static uint64_t rnd(void)
{
        return loom_splitmix64(&rng_state);
}

static void make_pair(uint16_t *old, uint16_t *nw, size_t n, double density)
{
        for (size_t i = 0; i < n; i++) {
                old[i] = (uint16_t)rnd();
                nw[i] = old[i];
                if ((double)(rnd() >> 11) / 9007199254740992.0 < density)
                        nw[i] ^= (uint16_t)(1 + rnd() % 0xfffe);
        }
}

static void round_trip(size_t n, double density, loom_sync_enc want)
{
        uint16_t *old = malloc(2 * n + 2), *nw = malloc(2 * n + 2), *out = malloc(2 * n + 2);
        uint8_t *buf = malloc(loom_sync_enc_bound(n));
        make_pair(old, nw, n, density);
        loom_sync_frame f = {0}, g;
        loom_err e;
        cr_assert_eq(loom_sync_encode(old, nw, n, want, buf, &f, &e), 0, "%s", e.msg);
        if (want != LOOM_SYNC_ENC_AUTO)
                cr_assert_eq(f.enc, want == LOOM_SYNC_ENC_DENSE ? 0 : (int)want);
        cr_assert_leq(f.payload_len, loom_sync_enc_bound(n));
        /* through the wire header */
        uint8_t hdr[LOOM_SYNC_FRAME_HDR];
        f.stream = 3, f.seq = 7, f.version = 9;
        loom_sync_frame_pack(&f, hdr);
        cr_assert_eq(loom_sync_frame_unpack(hdr, &g, &e), 0, "%s", e.msg);
        cr_assert_eq(g.payload_len, f.payload_len);
        cr_assert_eq(g.seq, 7);
        memset(out, 0xAB, 2 * n);
        cr_assert_eq(loom_sync_decode(&g, buf, old, out, n, &e), 0, "n=%zu d=%g enc=%d: %s", n,
                     density, f.enc, e.msg);
        cr_assert(n == 0 || !memcmp(out, nw, 2 * n), "n=%zu density=%g enc=%d not bit-identical", n,
                  density, f.enc);
        /* in place too */
        if (f.enc != LOOM_SYNC_ENC_DENSE) {
                memcpy(out, old, 2 * n);
                cr_assert_eq(loom_sync_decode(&g, buf, out, out, n, &e), 0);
                cr_assert(n == 0 || !memcmp(out, nw, 2 * n));
        }
        free(old), free(nw), free(out), free(buf);
}

Test(sync_codec, round_trips_every_density_and_encoding)
{
        rng_state = 1;
        static const double dens[] = {0, 0.0001, 0.001, 0.01, 0.05, 0.125, 0.2, 0.5, 0.9, 1};
        static const size_t sizes[] = {0, 1, 3, 4, 5, 7, 8, 9, 1000, 4097, 65536, 100003};
        for (size_t d = 0; d < sizeof dens / sizeof dens[0]; d++)
                for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                        for (int enc = 0; enc <= LOOM_SYNC_ENC_AUTO; enc++)
                                round_trip(sizes[s], dens[d], (loom_sync_enc)enc);
        for (int i = 0; i < 200; i++) /* random sizes and densities */
                round_trip(rnd() % 5000, (double)(rnd() % 1001) / 1000.0, LOOM_SYNC_ENC_AUTO);
}

Test(sync_codec, auto_picks_sparse_only_when_it_halves_the_bytes)
{
        rng_state = 2;
        size_t n = 1 << 16;
        uint16_t *old = malloc(2 * n), *nw = malloc(2 * n);
        uint8_t *buf = malloc(loom_sync_enc_bound(n));
        loom_err e;
        static const struct {
                double density;
                int enc;
        } want[] = {{0, LOOM_SYNC_ENC_COO},      {0.01, LOOM_SYNC_ENC_COO},
                    {0.05, LOOM_SYNC_ENC_COO},   {0.3, LOOM_SYNC_ENC_BITMAP},
                    {0.4, LOOM_SYNC_ENC_BITMAP}, {0.6, LOOM_SYNC_ENC_DENSE},
                    {1.0, LOOM_SYNC_ENC_DENSE}};
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
                make_pair(old, nw, n, want[k].density);
                uint64_t sizes[3];
                for (int enc = 0; enc < 3; enc++) {
                        loom_sync_frame f;
                        loom_sync_encode(old, nw, n, (loom_sync_enc)enc, buf, &f, &e);
                        sizes[enc] = f.payload_len;
                }
                loom_sync_frame f;
                loom_sync_encode(old, nw, n, LOOM_SYNC_ENC_AUTO, buf, &f, &e);
                cr_expect_eq(f.enc, want[k].enc, "density %g: picked %d", want[k].density, f.enc);
                /* the smaller sparse size when it at least halves the dense one */
                uint64_t sparse = sizes[1] <= sizes[2] ? sizes[1] : sizes[2];
                cr_expect_eq(f.payload_len, sparse <= sizes[0] / 2 ? sparse : sizes[0]);
        }
        /* 1% density: about 3 bytes per change, so ~1.5% of the dense size */
        make_pair(old, nw, n, 0.01);
        loom_sync_frame f;
        loom_sync_encode(old, nw, n, LOOM_SYNC_ENC_AUTO, buf, &f, &e);
        cr_expect_lt(f.payload_len, 2 * n * 2 / 100);
        cr_expect_gt(f.nnz, n / 200);
        free(old), free(nw), free(buf);
}

Test(sync_codec, checksums)
{
        /* CRC32C check value */
        cr_expect_eq(loom_sync_crc32c(0, "123456789", 9), UINT32_C(0xE3069283));
        cr_expect_eq(loom_sync_crc32c(loom_sync_crc32c(0, "1234", 4), "56789", 5),
                     UINT32_C(0xE3069283));
        uint16_t v[1000];
        rng_state = 3;
        for (int i = 0; i < 1000; i++)
                v[i] = (uint16_t)rnd();
        /* additive over disjoint ranges, and equal to the per-element form */
        uint64_t all = loom_sync_hash(v, 1000, 77);
        cr_expect_eq(all, loom_sync_hash(v, 333, 77) + loom_sync_hash(v + 333, 667, 77 + 333));
        uint64_t one = 0;
        for (int i = 0; i < 1000; i++)
                one += loom_sync_hash1(v[i], 77 + (uint64_t)i);
        cr_expect_eq(all, one);
        /* position matters: swapping two different values changes it */
        uint16_t t = v[10];
        v[10] = v[20], v[20] = t;
        cr_expect_neq(loom_sync_hash(v, 1000, 77), all);
}

/* CRC32C one bit at a time, the definition the fast paths must agree with */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t len)
{
        crc = ~crc;
        while (len--) {
                crc ^= *p++;
                for (int k = 0; k < 8; k++)
                        crc = (crc >> 1) ^ (UINT32_C(0x82F63B78) & (0u - (crc & 1u)));
        }
        return ~crc;
}

Test(sync_codec, long_checksums_and_the_copying_checksum_agree_with_the_definition)
{
        /* lengths around the three-block runs (3 x 8192 bytes) the fast path interleaves,
         * odd tails, misaligned starts, and a crc carried in from an earlier buffer */
        enum { MAX = 4 * 24576 + 77 };
        uint8_t *src = malloc(MAX + 8), *dst = malloc(MAX + 8);
        cr_assert(src && dst);
        rng_state = 11;
        for (size_t i = 0; i < MAX + 8; i++)
                src[i] = (uint8_t)rnd();
        const size_t lens[] = {0, 1, 7, 8, 24575, 24576, 24577, 24576 + 8191, 2 * 24576 + 5, MAX};
        for (size_t a = 0; a < 3; a++)
                for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
                        size_t n = lens[i];
                        const uint8_t *p = src + a;
                        uint32_t want = crc_bitwise(0, p, n),
                                 carried = crc_bitwise(0xdeadbeef, p, n);
                        cr_expect_eq(loom_sync_crc32c(0, p, n), want, "len %zu at +%zu", n, a);
                        cr_expect_eq(loom_sync_crc32c(0xdeadbeef, p, n), carried, "len %zu", n);
                        memset(dst, 0xa5, MAX + 8);
                        cr_expect_eq(loom_sync_crc32c_copy(0xdeadbeef, dst + 1, p, n), carried,
                                     "copy, len %zu at +%zu", n, a);
                        cr_expect(memcmp(dst + 1, p, n) == 0, "copy, len %zu: bytes differ", n);
                        cr_expect_eq(dst[0], 0xa5);
                        cr_expect_eq(dst[n + 1], 0xa5, "copy, len %zu: wrote past the end", n);
                }
        /* pieces checksummed apart join into the whole's CRC, at every cut */
        for (size_t cut = 0; cut <= MAX; cut += cut < 40 ? 1 : 9973)
                cr_expect_eq(loom_sync_crc32c_combine(loom_sync_crc32c(0, src, cut),
                                                      loom_sync_crc32c(0, src + cut, MAX - cut),
                                                      MAX - cut),
                             crc_bitwise(0, src, MAX), "cut at %zu", cut);
        /* one flipped bit anywhere in a long buffer changes it */
        uint32_t all = loom_sync_crc32c(0, src, MAX);
        src[30000] ^= 4;
        cr_expect_neq(loom_sync_crc32c(0, src, MAX), all);
        free(src);
        free(dst);
}

Test(sync_codec, synthetic_weights_are_deterministic_and_sparse)
{
        size_t n = 100000;
        uint16_t *a = malloc(2 * n), *b = malloc(2 * n), *c = malloc(2 * n);
        loom_sync_synth(42, 0, 0.01, 1000, n, a);
        loom_sync_synth(42, 1, 0.01, 1000, n, b);
        /* any sub-range gives the same bytes */
        loom_sync_synth(42, 1, 0.01, 1003, 517, c);
        cr_expect(!memcmp(c, b + 3, 517 * 2));
        size_t changed = 0;
        for (size_t i = 0; i < n; i++)
                changed += a[i] != b[i];
        cr_expect(changed > n / 200 && changed < n / 50, "changed %zu", changed);
        loom_sync_synth(43, 0, 0.01, 1000, n, c);
        cr_expect(memcmp(a, c, 2 * n));
        free(a), free(b), free(c);
}

/* Deterministic mutation fuzz: frames truncated, bit-flipped, with forged lengths and counts,
 * with and without recomputed CRCs (so the structural checks run, not only the checksum). No
 * crash, no sanitizer report, every rejected frame leaves `old` untouched, and every accepted
 * frame decodes to exactly elems values. */
Test(sync_codec, decoder_fuzz_rejects_bad_frames)
{
        rng_state = 4;
        size_t n = 2048;
        uint16_t *old = malloc(2 * n), *nw = malloc(2 * n), *keep = malloc(2 * n),
                 *out = malloc(2 * n);
        uint8_t *good = malloc(loom_sync_enc_bound(n)), *bad = malloc(loom_sync_enc_bound(n) + 64);
        int rejected = 0, accepted = 0;
        for (int iter = 0; iter < 20000; iter++) {
                double dens = (double)(rnd() % 1000) / 1000.0 * ((iter & 3) ? 0.05 : 1.0);
                make_pair(old, nw, n, dens);
                memcpy(keep, old, 2 * n);
                loom_sync_frame f;
                loom_err e;
                loom_sync_encode(old, nw, n, (loom_sync_enc)(iter % 4), good, &f, &e);
                size_t len = (size_t)f.payload_len;
                memcpy(bad, good, len);
                int fix_crc = rnd() & 1;
                switch (rnd() % 6) {
                case 0: /* truncated */
                        if (len)
                                len = (size_t)(rnd() % len);
                        break;
                case 1: /* flipped bytes */
                        for (int k = 0; k < 1 + (int)(rnd() % 4) && len; k++)
                                bad[rnd() % len] ^= (uint8_t)(1 + rnd() % 255);
                        break;
                case 2: /* forged change count */
                        f.nnz = rnd() % 3 ? f.nnz + 1 + rnd() % 3 : rnd();
                        break;
                case 3: /* forged length, oversized */
                        len += 1 + rnd() % 64;
                        memset(bad + f.payload_len, (int)rnd(), len - f.payload_len);
                        break;
                case 4: /* wrong encoding tag */
                        f.enc = (uint8_t)(rnd() % 5);
                        break;
                default: /* forged element count */
                        f.elems = rnd() % 2 ? f.elems - 1 : rnd();
                        break;
                }
                f.payload_len = len;
                if (fix_crc)
                        f.payload_crc = loom_sync_crc32c(0, bad, len);
                /* also through the header codec, with a flipped header bit now and then */
                uint8_t hdr[LOOM_SYNC_FRAME_HDR];
                loom_sync_frame g;
                loom_sync_frame_pack(&f, hdr);
                if (rnd() % 8 == 0)
                        hdr[rnd() % LOOM_SYNC_FRAME_HDR] ^= (uint8_t)(1u << (rnd() % 8));
                int rc = loom_sync_frame_unpack(hdr, &g, &e);
                if (!rc)
                        rc = loom_sync_decode(&g, bad, old, out, n, &e);
                cr_assert(!memcmp(old, keep, 2 * n), "old weights changed");
                if (rc) {
                        cr_assert(e.msg[0], "rejection without a message");
                        rejected++;
                } else {
                        accepted++;
                }
        }
        /* most mutations must be caught; an accepted one is a different valid delta */
        cr_expect_gt(rejected, 15000, "rejected %d accepted %d", rejected, accepted);
        free(old), free(nw), free(keep), free(out), free(good), free(bad);
}

Test(sync_codec, rejects_with_named_fields)
{
        uint16_t old[16] = {0}, nw[16] = {0};
        nw[3] = 5;
        uint8_t buf[64];
        loom_sync_frame f;
        loom_err e;
        loom_sync_encode(old, nw, 16, LOOM_SYNC_ENC_COO, buf, &f, &e);
        buf[0] ^= 1;
        uint16_t out[16];
        cr_expect_eq(loom_sync_decode(&f, buf, old, out, 16, &e), LOOM_ECORRUPT);
        cr_expect_str_eq(e.field, "frame.payload_crc");
        buf[0] ^= 1;
        cr_expect_eq(loom_sync_decode(&f, buf, old, out, 15, &e), LOOM_EPROTO);
        cr_expect_eq(loom_sync_decode(&f, buf, NULL, out, 16, &e), LOOM_ESTATE);
        uint8_t hdr[LOOM_SYNC_FRAME_HDR];
        loom_sync_frame_pack(&f, hdr);
        hdr[0] ^= 0xff;
        cr_expect_eq(loom_sync_frame_unpack(hdr, &f, &e), LOOM_EPROTO);
}
