/*
 * codec.c - bucket frames and the lossless bf16 delta codec, plus the two checksums.
 *
 * A delta is the bitwise XOR of the old and new 16-bit patterns, so applying it is exact whatever
 * the values are (no floating-point subtraction). Three encodings:
 *   COO     per changed element a LEB128 gap from the previous changed element (one byte while
 *           changes are less than 128 apart) and the 16-bit XOR: ~3 bytes per change.
 *   BITMAP  n/8 bytes of change bits, then 2 bytes per change: smaller than COO above ~1/8
 *           density.
 *   DENSE   the new values.
 * The encoder takes the smaller sparse encoding when it is at most half the dense size, else
 * dense. Applying a sparse frame costs several times more CPU per element than copying a dense
 * one (`loom sync codec`: ~1 GB/s for bitmap at 20-50% density against ~4 GB/s dense), so a
 * sparse frame has to halve the bytes to pay for itself at multi-Gbit/s rates; with these
 * encodings that puts the dense switch at ~44% density (docs/sync.md has the table).
 *
 * Frames carry a CRC32C of the 64-byte header and of the payload; a frame is checked completely
 * before anything is applied, so a bad frame never changes the receiver's weights.
 */
#include <pthread.h>
#include <string.h>

#include "internal.h"
#include "loom/sync.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire format stores bf16 values little-endian and copies them as-is"
#endif

#define MAGIC UINT32_C(0x3159534C) /* "LSY1" */

/* ---- CRC32C ---------------------------------------------------------------------------- */

#define CRC32C_POLY UINT32_C(0x82F63B78) /* reflected */

/* The register c after one zero bit: c x mod P */
static uint32_t crc_bit(uint32_t c)
{
        return (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
}

/* a * b modulo the CRC32C polynomial, reflected (bit 31 is x^0) */
static uint32_t crc_mulmod(uint32_t a, uint32_t b)
{
        uint32_t p = 0;
        for (uint32_t m = UINT32_C(1) << 31; m; m >>= 1, b = crc_bit(b))
                if (a & m)
                        p ^= b;
        return p;
}

/* x^(8 n) mod P: what advancing a register over n zero bytes multiplies it by; by squaring,
 * from x^8 */
static uint32_t crc_x8n(size_t n)
{
        uint32_t xn = UINT32_C(1) << 31, sq = UINT32_C(1) << 23; /* 1 and x^8 */
        for (; n; n >>= 1, sq = crc_mulmod(sq, sq))
                if (n & 1)
                        xn = crc_mulmod(xn, sq);
        return xn;
}

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t len)
{
        while (len--) {
                crc ^= *p++;
                for (int k = 0; k < 8; k++)
                        crc = crc_bit(crc);
        }
        return crc;
}

#if defined(__x86_64__)
/*
 * The SSE4.2 crc32 instruction has a latency of three cycles and a throughput of one, so one
 * dependency chain runs at a third of what the unit can do (~9 GB/s on a 3 GHz core). Long
 * buffers are cut into runs of three blocks of CRC_BLOCK bytes, each block's CRC computed in its
 * own chain in the same loop, and the three joined: the CRC register is linear over GF(2), so
 * the register after A||B is the register after A advanced over |B| zero bytes, XOR the register
 * of B from zero. Advancing over CRC_BLOCK zero bytes is itself linear in the register: four
 * 256-entry tables (one per register byte) built once, each entry a product by x^(8 CRC_BLOCK).
 */
enum { CRC_BLOCK = 8192 };
static uint32_t crc_shift_tab[4][256];
static pthread_once_t crc_shift_once = PTHREAD_ONCE_INIT;

static void crc_shift_init(void)
{
        uint32_t x = crc_x8n(CRC_BLOCK);
        for (int k = 0; k < 4; k++)
                for (uint32_t v = 0; v < 256; v++)
                        crc_shift_tab[k][v] = crc_mulmod(x, v << (8 * k));
}

/* The register c advanced over CRC_BLOCK zero bytes. */
static uint32_t crc_shift(uint32_t c)
{
        return crc_shift_tab[0][c & 0xff] ^ crc_shift_tab[1][c >> 8 & 0xff] ^
               crc_shift_tab[2][c >> 16 & 0xff] ^ crc_shift_tab[3][c >> 24];
}

/* CRC registers of src (no pre- or post-inversion), copying it to dst when dst is not NULL:
 * each word is loaded once, checksummed and stored, so a copy costs one pass over memory. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, uint8_t *dst,
                                                            const uint8_t *p, size_t len)
{
        uint64_t c = crc;
        if (len >= 3 * (size_t)CRC_BLOCK)
                pthread_once(&crc_shift_once, crc_shift_init);
        while (len >= 3 * (size_t)CRC_BLOCK) {
                uint64_t c1 = 0, c2 = 0;
                for (size_t i = 0; i < CRC_BLOCK; i += 8) {
                        uint64_t w0, w1, w2;
                        memcpy(&w0, p + i, 8);
                        memcpy(&w1, p + CRC_BLOCK + i, 8);
                        memcpy(&w2, p + 2 * CRC_BLOCK + i, 8);
                        c = __builtin_ia32_crc32di(c, w0);
                        c1 = __builtin_ia32_crc32di(c1, w1);
                        c2 = __builtin_ia32_crc32di(c2, w2);
                        if (dst) {
                                memcpy(dst + i, &w0, 8);
                                memcpy(dst + CRC_BLOCK + i, &w1, 8);
                                memcpy(dst + 2 * CRC_BLOCK + i, &w2, 8);
                        }
                }
                c = crc_shift(crc_shift((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
                p += 3 * CRC_BLOCK, len -= 3 * CRC_BLOCK;
                if (dst)
                        dst += 3 * CRC_BLOCK;
        }
        while (len >= 8) {
                uint64_t w;
                memcpy(&w, p, 8);
                c = __builtin_ia32_crc32di(c, w);
                if (dst) {
                        memcpy(dst, &w, 8);
                        dst += 8;
                }
                p += 8, len -= 8;
        }
        uint32_t c32 = (uint32_t)c;
        if (dst)
                memcpy(dst, p, len);
        while (len--)
                c32 = __builtin_ia32_crc32qi(c32, *p++);
        return c32;
}
#endif

uint32_t loom_sync_crc32c(uint32_t crc, const void *buf, size_t len)
{
        crc = ~crc;
#if defined(__x86_64__)
        if (__builtin_cpu_supports("sse4.2"))
                return ~crc32c_hw(crc, NULL, buf, len);
#endif
        return ~crc32c_sw(crc, buf, len);
}

uint32_t loom_sync_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
        if (__builtin_cpu_supports("sse4.2"))
                return ~crc32c_hw(~crc, dst, src, len);
#endif
        memcpy(dst, src, len);
        return loom_sync_crc32c(crc, dst, len);
}

uint32_t loom_sync_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
        /* crc(A||B) = crc_a advanced over len_b zero bytes, XOR crc_b: the inversions at both
         * ends cancel */
        return crc_mulmod(crc_x8n(len_b), crc_a) ^ crc_b;
}

/* ---- position-keyed additive hash ------------------------------------------------------ */

#define HASH_G UINT64_C(0x9E3779B97F4A7C15)

#if defined(__x86_64__)
#include <immintrin.h>

/* Eight elements per iteration: widen to 64-bit lanes and multiply by the position keys as two
 * 32x32->64 products (value < 2^32, so value * key mod 2^64 = v*lo + (v*hi << 32)). */
__attribute__((target("avx2"))) static uint64_t hash_avx2(const uint16_t *v, size_t n, uint64_t g0)
{
        const uint64_t step = 2 * HASH_G;
        __m256i ka =
            _mm256_set_epi64x((long long)(step * (g0 + 3) + 1), (long long)(step * (g0 + 2) + 1),
                              (long long)(step * (g0 + 1) + 1), (long long)(step * g0 + 1));
        __m256i kb = _mm256_add_epi64(ka, _mm256_set1_epi64x((long long)(4 * step)));
        const __m256i inc = _mm256_set1_epi64x((long long)(8 * step));
        const __m256i off = _mm256_set1_epi64x(0x10000);
        __m256i acc = _mm256_setzero_si256();
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
                __m128i x = _mm_loadu_si128((const __m128i *)(v + i));
                __m256i a = _mm256_add_epi64(_mm256_cvtepu16_epi64(x), off);
                __m256i b = _mm256_add_epi64(_mm256_cvtepu16_epi64(_mm_srli_si128(x, 8)), off);
                __m256i pa = _mm256_add_epi64(
                    _mm256_mul_epu32(a, ka),
                    _mm256_slli_epi64(_mm256_mul_epu32(a, _mm256_srli_epi64(ka, 32)), 32));
                __m256i pb = _mm256_add_epi64(
                    _mm256_mul_epu32(b, kb),
                    _mm256_slli_epi64(_mm256_mul_epu32(b, _mm256_srli_epi64(kb, 32)), 32));
                acc = _mm256_add_epi64(acc, _mm256_add_epi64(pa, pb));
                ka = _mm256_add_epi64(ka, inc);
                kb = _mm256_add_epi64(kb, inc);
        }
        uint64_t lanes[4];
        _mm256_storeu_si256((__m256i *)lanes, acc);
        uint64_t h = lanes[0] + lanes[1] + lanes[2] + lanes[3];
        for (uint64_t k = step * (g0 + i) + 1; i < n; i++, k += step)
                h += ((uint64_t)v[i] + 0x10000u) * k;
        return h;
}
#endif

uint64_t loom_sync_hash(const uint16_t *v, size_t n, uint64_t g0)
{
#if defined(__x86_64__)
        if (n >= 64 && __builtin_cpu_supports("avx2"))
                return hash_avx2(v, n, g0);
#endif
        const uint64_t step = 2 * HASH_G;
        uint64_t k0 = step * g0 + 1, a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        size_t i = 0;
        /* four independent chains so the multiplies overlap */
        for (; i + 4 <= n; i += 4, k0 += 4 * step) {
                a0 += ((uint64_t)v[i] + 0x10000u) * k0;
                a1 += ((uint64_t)v[i + 1] + 0x10000u) * (k0 + step);
                a2 += ((uint64_t)v[i + 2] + 0x10000u) * (k0 + 2 * step);
                a3 += ((uint64_t)v[i + 3] + 0x10000u) * (k0 + 3 * step);
        }
        for (; i < n; i++, k0 += step)
                a0 += ((uint64_t)v[i] + 0x10000u) * k0;
        return a0 + a1 + a2 + a3;
}

/* ---- frame header ---------------------------------------------------------------------- */

void loom_sync_frame_pack(const loom_sync_frame *f, uint8_t out[LOOM_SYNC_FRAME_HDR])
{
        memset(out, 0, LOOM_SYNC_FRAME_HDR);
        loom__put32(out, MAGIC);
        out[4] = f->type;
        out[5] = f->enc;
        loom__put32(out + 8, f->stream);
        loom__put32(out + 12, f->seq);
        loom__put64(out + 16, f->version);
        loom__put64(out + 24, f->start);
        loom__put64(out + 32, f->elems);
        loom__put64(out + 40, f->nnz);
        loom__put64(out + 48, f->payload_len);
        loom__put32(out + 56, f->payload_crc);
        loom__put32(out + 60, loom_sync_crc32c(0, out, 60));
}

int loom_sync_frame_unpack(const uint8_t in[LOOM_SYNC_FRAME_HDR], loom_sync_frame *f, loom_err *e)
{
        if (loom__get32(in) != MAGIC)
                return loom_err_set(e, LOOM_EPROTO, "frame.magic", "not a loom sync frame");
        if (loom__get32(in + 60) != loom_sync_crc32c(0, in, 60))
                return loom_err_set(e, LOOM_ECORRUPT, "frame.header_crc",
                                    "frame header checksum mismatch");
        memset(f, 0, sizeof *f);
        f->type = in[4];
        f->enc = in[5];
        f->stream = loom__get32(in + 8);
        f->seq = loom__get32(in + 12);
        f->version = loom__get64(in + 16);
        f->start = loom__get64(in + 24);
        f->elems = loom__get64(in + 32);
        f->nnz = loom__get64(in + 40);
        f->payload_len = loom__get64(in + 48);
        f->payload_crc = loom__get32(in + 56);
        if (f->type < LOOM_SYNC_FRAME_BUCKET || f->type > LOOM_SYNC_FRAME_END)
                return loom_err_set(e, LOOM_EPROTO, "frame.type", "unknown frame type %u", f->type);
        if (f->payload_len > LOOM_SYNC_FRAME_MAX_PAYLOAD)
                return loom_err_set(e, LOOM_ERANGE, "frame.payload_len",
                                    "payload of %llu bytes exceeds the limit",
                                    (unsigned long long)f->payload_len);
        return 0;
}

/* ---- encoder --------------------------------------------------------------------------- */

size_t loom_sync_enc_bound(size_t n)
{
        return 3 * n + 16; /* COO with every element changed: 1-byte gaps + 2-byte values */
}

/* t has bit 0 of each 16-bit lane set where that lane changed: count them with one multiply
 * (no popcount instruction is assumed). */
static inline uint64_t lanes_set(uint64_t t)
{
        return ((t & UINT64_C(0x0001000100010001)) * UINT64_C(0x0001000100010001)) >> 48;
}

static size_t varint_put(uint8_t *p, uint64_t v)
{
        size_t k = 0;
        while (v >= 0x80) {
                p[k++] = (uint8_t)(v | 0x80);
                v >>= 7;
        }
        p[k++] = (uint8_t)v;
        return k;
}

static size_t varint_len(uint64_t v)
{
        size_t k = 1;
        while (v >= 0x80)
                v >>= 7, k++;
        return k;
}

/* One pass over old/new, four elements per 64-bit word so unchanged runs cost one compare.
 * Writes COO into out while it stays smaller than `limit` bytes; always counts nnz. Returns the
 * COO size, or SIZE_MAX when it passed the limit. */
static size_t coo_pass(const uint16_t *old, const uint16_t *nw, size_t n, uint8_t *out,
                       size_t limit, uint64_t *nnz_out)
{
        size_t w = 0, i = 0;
        uint64_t next = 0, nnz = 0;
        int writing = 1;
        for (; i + 4 <= n; i += 4) {
                uint64_t a, b;
                memcpy(&a, old + i, 8);
                memcpy(&b, nw + i, 8);
                uint64_t x = a ^ b;
                if (!x)
                        continue;
                if (!writing) { /* only counting: changed 16-bit lanes, without branches */
                        uint64_t t = x | x >> 8;
                        t |= t >> 4;
                        t |= t >> 2;
                        t |= t >> 1;
                        nnz += lanes_set(t);
                        continue;
                }
                for (unsigned j = 0; j < 4; j++, x >>= 16) {
                        uint16_t d = (uint16_t)x;
                        if (!d)
                                continue;
                        nnz++;
                        if (!writing)
                                continue;
                        uint64_t gap = i + j - next;
                        if (gap < 0x80 && w + 3 <= limit) { /* the common case: one-byte gap */
                                out[w] = (uint8_t)gap;
                                out[w + 1] = (uint8_t)d;
                                out[w + 2] = (uint8_t)(d >> 8);
                                w += 3;
                                next = i + j + 1;
                                continue;
                        }
                        if (w + varint_len(gap) + 2 > limit) {
                                writing = 0;
                                continue;
                        }
                        w += varint_put(out + w, gap);
                        out[w++] = (uint8_t)d;
                        out[w++] = (uint8_t)(d >> 8);
                        next = i + j + 1;
                }
        }
        for (; i < n; i++) {
                uint16_t d = old[i] ^ nw[i];
                if (!d)
                        continue;
                nnz++;
                if (!writing)
                        continue;
                uint64_t gap = i - next;
                if (w + varint_len(gap) + 2 > limit) {
                        writing = 0;
                        continue;
                }
                w += varint_put(out + w, gap);
                out[w++] = (uint8_t)d;
                out[w++] = (uint8_t)(d >> 8);
                next = i + 1;
        }
        *nnz_out = nnz;
        return writing ? w : SIZE_MAX;
}

static uint64_t count_changes(const uint16_t *old, const uint16_t *nw, size_t n)
{
        uint64_t nnz = 0;
        size_t i = 0;
        for (; i + 4 <= n; i += 4) {
                uint64_t a, b;
                memcpy(&a, old + i, 8);
                memcpy(&b, nw + i, 8);
                uint64_t t = a ^ b; /* fold each 16-bit lane onto its lowest bit */
                t |= t >> 8;
                t |= t >> 4;
                t |= t >> 2;
                t |= t >> 1;
                nnz += lanes_set(t);
        }
        for (; i < n; i++)
                nnz += old[i] != nw[i];
        return nnz;
}

static size_t bitmap_write(const uint16_t *old, const uint16_t *nw, size_t n, uint8_t *out)
{
        size_t nb = (n + 7) / 8, w = nb, i = 0;
        /* eight elements (one bitmap byte) per step, two 64-bit compares when nothing changed */
        for (; i + 8 <= n; i += 8) {
                uint64_t a0, a1, b0, b1;
                memcpy(&a0, old + i, 8), memcpy(&a1, old + i + 4, 8);
                memcpy(&b0, nw + i, 8), memcpy(&b1, nw + i + 4, 8);
                uint64_t x[2] = {a0 ^ b0, a1 ^ b1};
                unsigned bits = 0;
                if (!(x[0] | x[1])) {
                        out[i / 8] = 0;
                        continue;
                }
                /* branch-free: changes sit at random positions, so a branch per element
                 * mispredicts; write every value and advance only past the changed ones
                 * (the buffer has slack for the one extra value) */
                for (unsigned h = 0; h < 2; h++) {
                        for (unsigned j = 0; j < 4; j++) {
                                uint16_t d = (uint16_t)(x[h] >> (16 * j));
                                unsigned nz = d != 0;
                                bits |= nz << (4 * h + j);
                                out[w] = (uint8_t)d;
                                out[w + 1] = (uint8_t)(d >> 8);
                                w += 2 * nz;
                        }
                }
                out[i / 8] = (uint8_t)bits;
        }
        if (i < n) {
                out[i / 8] = 0;
                for (; i < n; i++) {
                        uint16_t d = old[i] ^ nw[i];
                        if (!d)
                                continue;
                        out[i / 8] |= (uint8_t)(1u << (i % 8));
                        out[w++] = (uint8_t)d;
                        out[w++] = (uint8_t)(d >> 8);
                }
        }
        return w;
}

/* The dense copy with the tag taken a block at a time, while the block is in cache. */
static void copy_tagged(uint8_t *out, const uint16_t *nw, size_t len, loom__mac *m)
{
        const uint8_t *in = (const uint8_t *)nw;
        for (size_t off = 0; off < len; off += LOOM__MAC_BLOCK) {
                size_t k = len - off < LOOM__MAC_BLOCK ? len - off : LOOM__MAC_BLOCK;
                memcpy(out + off, in + off, k);
                loom__mac_update(m, out + off, k);
        }
}

int loom_sync_encode(const uint16_t *old, const uint16_t *nw, size_t n, loom_sync_enc want,
                     uint8_t *out, loom_sync_frame *f, loom_err *e)
{
        return loom__encode(old, nw, n, want, out, f, NULL, e);
}

int loom__encode(const uint16_t *old, const uint16_t *nw, size_t n, loom_sync_enc want,
                 uint8_t *out, loom_sync_frame *f, loom__mac *m, loom_err *e)
{
        if (want > LOOM_SYNC_ENC_AUTO)
                return loom_err_set(e, LOOM_EINVAL, "enc", "unknown encoding %d", (int)want);
        if (n > LOOM_SYNC_FRAME_MAX_PAYLOAD / 4)
                return loom_err_set(e, LOOM_ERANGE, "elems", "bucket too large");
        f->type = LOOM_SYNC_FRAME_BUCKET;
        f->elems = n;
        f->nnz = 0;
        size_t dense = 2 * n, bitmap_fixed = (n + 7) / 8, len = dense;
        loom_sync_enc enc = LOOM_SYNC_ENC_DENSE;
        if (old && want != LOOM_SYNC_ENC_DENSE) {
                /* Guess the density from the first sixteenth of the bucket (branch-free count).
                 * Clearly sparse: one COO pass, which counts as it writes. Otherwise count
                 * exactly first: that sizes the bitmap and bounds COO from below (3 bytes per
                 * change), so dense buckets skip the branchy COO pass. The guess only decides
                 * speed; the choice below always uses exact sizes. */
                uint64_t est = count_changes(old, nw, n / 16) * 16, nnz;
                size_t coo = SIZE_MAX, bitmap;
                int sparse_guess = want == LOOM_SYNC_ENC_AUTO && 3 * est <= dense / 4;
                if (want == LOOM_SYNC_ENC_COO || sparse_guess) {
                        size_t limit =
                            want == LOOM_SYNC_ENC_COO ? loom_sync_enc_bound(n) : dense / 2;
                        coo = coo_pass(old, nw, n, out, limit, &nnz);
                        bitmap = bitmap_fixed + 2 * nnz;
                } else {
                        nnz = count_changes(old, nw, n);
                        bitmap = bitmap_fixed + 2 * nnz;
                        if (want == LOOM_SYNC_ENC_AUTO && 3 * nnz < bitmap && 3 * nnz <= dense / 2)
                                coo = coo_pass(old, nw, n, out,
                                               bitmap < dense / 2 ? bitmap : dense / 2, &nnz);
                }
                f->nnz = nnz;
                if (want == LOOM_SYNC_ENC_AUTO && coo != SIZE_MAX && coo > bitmap)
                        coo = SIZE_MAX; /* the bitmap is smaller after all */
                if (want != LOOM_SYNC_ENC_BITMAP && coo != SIZE_MAX) {
                        enc = LOOM_SYNC_ENC_COO, len = coo;
                } else if (want == LOOM_SYNC_ENC_BITMAP ||
                           (want == LOOM_SYNC_ENC_AUTO && bitmap <= dense / 2)) {
                        enc = LOOM_SYNC_ENC_BITMAP;
                        len = bitmap_write(old, nw, n, out);
                }
        }
        int keyed = m && m->on;
        if (keyed)
                loom__mac_begin(m);
        if (enc == LOOM_SYNC_ENC_DENSE) {
                f->nnz = 0;
                if (keyed)
                        copy_tagged(out, nw, dense, m);
                else
                        memcpy(out, nw, dense);
        } else if (keyed) {
                loom__mac_update(m, out, len); /* a sparse payload: small next to its scan */
        }
        f->enc = (uint8_t)enc;
        f->payload_len = len;
        f->payload_crc = keyed ? 0 : loom_sync_crc32c(0, out, len);
        return 0;
}

/* ---- checking and applying ------------------------------------------------------------- */

/* Read a LEB128 value of at most 10 bytes that fits 64 bits. */
static int varint_get(const uint8_t *p, size_t avail, uint64_t *v, size_t *used)
{
        uint64_t x = 0;
        for (size_t k = 0; k < avail && k < 10; k++) {
                uint64_t b = p[k];
                if (k == 9 && b > 1)
                        return -1;
                x |= (b & 0x7f) << (7 * k);
                if (!(b & 0x80)) {
                        *v = x;
                        *used = k + 1;
                        return 0;
                }
        }
        return -1;
}

static int check_coo(const loom_sync_frame *f, const uint8_t *p, loom_err *e)
{
        size_t pos = 0, len = (size_t)f->payload_len;
        uint64_t next = 0;
        if (f->nnz && !len) /* an empty payload comes as NULL: nothing to read an index from */
                return loom_err_set(e, LOOM_ECORRUPT, "frame.payload",
                                    "%llu changes in an empty payload", (unsigned long long)f->nnz);
        for (uint64_t k = 0; k < f->nnz; k++) {
                uint64_t gap;
                size_t used;
                if (varint_get(p + pos, len - pos, &gap, &used))
                        return loom_err_set(e, LOOM_ECORRUPT, "frame.payload",
                                            "bad index varint at byte %zu", pos);
                pos += used;
                if (gap >= f->elems - next)
                        return loom_err_set(e, LOOM_ECORRUPT, "frame.payload",
                                            "change %llu lies outside the bucket",
                                            (unsigned long long)k);
                if (len - pos < 2)
                        return loom_err_set(e, LOOM_ECORRUPT, "frame.payload",
                                            "truncated value at byte %zu", pos);
                if (!(p[pos] | p[pos + 1]))
                        return loom_err_set(e, LOOM_ECORRUPT, "frame.payload",
                                            "zero delta at byte %zu", pos);
                pos += 2;
                next += gap + 1;
        }
        if (pos != len)
                return loom_err_set(e, LOOM_ECORRUPT, "frame.payload",
                                    "%zu trailing bytes after %llu changes", len - pos,
                                    (unsigned long long)f->nnz);
        return 0;
}

static int check_bitmap(const loom_sync_frame *f, const uint8_t *p, loom_err *e)
{
        uint64_t nb = (f->elems + 7) / 8, pop = 0;
        if (f->payload_len != nb + 2 * f->nnz)
                return loom_err_set(e, LOOM_ECORRUPT, "frame.payload_len",
                                    "bitmap payload of %llu bytes, expected %llu",
                                    (unsigned long long)f->payload_len,
                                    (unsigned long long)(nb + 2 * f->nnz));
        for (uint64_t i = 0; i < nb; i++)
                pop += (uint64_t)__builtin_popcount(p[i]);
        if (f->elems % 8 && (p[nb - 1] >> (f->elems % 8)))
                return loom_err_set(e, LOOM_ECORRUPT, "frame.payload", "bits past the bucket end");
        if (pop != f->nnz)
                return loom_err_set(e, LOOM_ECORRUPT, "frame.nnz",
                                    "bitmap has %llu changes, header says %llu",
                                    (unsigned long long)pop, (unsigned long long)f->nnz);
        for (uint64_t k = 0; k < f->nnz; k++)
                if (!(p[nb + 2 * k] | p[nb + 2 * k + 1]))
                        return loom_err_set(e, LOOM_ECORRUPT, "frame.payload",
                                            "zero delta for change %llu", (unsigned long long)k);
        return 0;
}

int loom_sync_payload_check(const loom_sync_frame *f, const uint8_t *payload, loom_err *e)
{
        return loom__payload_check(f, payload, 1, e);
}

int loom__payload_check(const loom_sync_frame *f, const uint8_t *payload, int crc, loom_err *e)
{
        if (f->type != LOOM_SYNC_FRAME_BUCKET)
                return loom_err_set(e, LOOM_EPROTO, "frame.type", "not a bucket frame");
        if (f->elems > LOOM_SYNC_FRAME_MAX_PAYLOAD / 4 ||
            f->payload_len > loom_sync_enc_bound((size_t)f->elems))
                return loom_err_set(e, LOOM_ERANGE, "frame.payload_len",
                                    "payload larger than any encoding of %llu elements",
                                    (unsigned long long)f->elems);
        if (crc && loom_sync_crc32c(0, payload, (size_t)f->payload_len) != f->payload_crc)
                return loom_err_set(e, LOOM_ECORRUPT, "frame.payload_crc",
                                    "bucket %u of stream %u: payload checksum mismatch", f->seq,
                                    f->stream);
        switch (f->enc) {
        case LOOM_SYNC_ENC_DENSE:
                if (f->payload_len != 2 * f->elems || f->nnz)
                        return loom_err_set(e, LOOM_ECORRUPT, "frame.payload_len",
                                            "dense payload of %llu bytes for %llu elements",
                                            (unsigned long long)f->payload_len,
                                            (unsigned long long)f->elems);
                return 0;
        case LOOM_SYNC_ENC_COO:
                if (f->nnz > f->elems)
                        return loom_err_set(e, LOOM_ECORRUPT, "frame.nnz",
                                            "more changes than elements");
                return check_coo(f, payload, e);
        case LOOM_SYNC_ENC_BITMAP:
                if (f->nnz > f->elems)
                        return loom_err_set(e, LOOM_ECORRUPT, "frame.nnz",
                                            "more changes than elements");
                return check_bitmap(f, payload, e);
        default:
                return loom_err_set(e, LOOM_EPROTO, "frame.enc", "unknown encoding %u", f->enc);
        }
}

void loom_sync_payload_walk(const loom_sync_frame *f, const uint8_t *p, loom_sync_delta_fn fn,
                            void *arg)
{
        if (f->enc == LOOM_SYNC_ENC_COO) {
                size_t pos = 0;
                uint64_t next = 0;
                for (uint64_t k = 0; k < f->nnz; k++) {
                        uint64_t gap = 0;
                        size_t used = 0;
                        varint_get(p + pos, (size_t)f->payload_len - pos, &gap, &used);
                        pos += used;
                        uint64_t i = next + gap;
                        fn(i, (uint16_t)(p[pos] | p[pos + 1] << 8), arg);
                        pos += 2;
                        next = i + 1;
                }
        } else if (f->enc == LOOM_SYNC_ENC_BITMAP) {
                uint64_t nb = (f->elems + 7) / 8;
                const uint8_t *v = p + nb;
                for (uint64_t b = 0; b < nb; b++) {
                        unsigned bits = p[b];
                        while (bits) {
                                unsigned j = (unsigned)__builtin_ctz(bits);
                                bits &= bits - 1;
                                fn(b * 8 + j, (uint16_t)(v[0] | v[1] << 8), arg);
                                v += 2;
                        }
                }
        }
}

static void xor_into(uint64_t i, uint16_t x, void *arg)
{
        ((uint16_t *)arg)[i] ^= x;
}

int loom_sync_decode(const loom_sync_frame *f, const uint8_t *payload, const uint16_t *old,
                     uint16_t *out, size_t n, loom_err *e)
{
        return loom__decode(f, payload, old, out, n, 1, e);
}

int loom__decode(const loom_sync_frame *f, const uint8_t *payload, const uint16_t *old,
                 uint16_t *out, size_t n, int crc, loom_err *e)
{
        if (f->elems != n)
                return loom_err_set(e, LOOM_EPROTO, "frame.elems",
                                    "bucket has %llu elements, receiver expects %zu",
                                    (unsigned long long)f->elems, n);
        int rc = loom__payload_check(f, payload, crc, e);
        if (rc)
                return rc;
        if (f->enc == LOOM_SYNC_ENC_DENSE) {
                memcpy(out, payload, 2 * n);
                return 0;
        }
        if (!old)
                return loom_err_set(e, LOOM_ESTATE, "old",
                                    "a sparse delta needs the previous version");
        if (out != old)
                memcpy(out, old, 2 * n);
        loom_sync_payload_walk(f, payload, xor_into, out);
        return 0;
}
