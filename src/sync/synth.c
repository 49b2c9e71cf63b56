/*
 * synth.c - deterministic synthetic bf16 weights for benchmarks and tests.
 *
 * Every element's value is a pure function of (seed, version, flat index), so any rank can
 * produce exactly the bytes of any slice without a full copy of the model existing anywhere,
 * and a receiver's result can be compared with what the sender meant to send. One 64-bit hash
 * yields four consecutive elements. Version 0 values look like trained weights (random sign,
 * magnitudes 2^-8 .. 2^-1); version v flips a few low mantissa bits of about `density` of the
 * elements of version v-1, the way a small optimizer step leaves most bf16 values unchanged.
 */
#include "loom/sync.h"

static inline uint16_t base_value(uint16_t lane)
{
        uint16_t sign = lane & 0x8000, mant = lane & 0x7f;
        uint16_t exp = (uint16_t)(119 + ((lane >> 7) & 7)); /* 2^-8 .. 2^-1 */
        return (uint16_t)(sign | exp << 7 | mant);
}

void loom_sync_synth(uint64_t seed, uint32_t version, double density, uint64_t g0, size_t n,
                     uint16_t *out)
{
        uint32_t thr = density <= 0 ? 0 : density >= 1 ? 65536 : (uint32_t)(density * 65536 + 0.5);
        uint64_t sbase = loom_mix64(seed), vseed[8];
        uint32_t nv = version < 8 ? version : 8;
        for (uint32_t v = 0; v < nv; v++)
                vseed[v] = loom_mix64(sbase + (v + 1) * UINT64_C(0xD1B54A32D192ED03));
        size_t i = 0;
        while (i < n) {
                uint64_t g = g0 + i, blk = g >> 2;
                unsigned lane = (unsigned)(g & 3), first = lane;
                uint64_t w = loom_mix64(sbase ^ blk);
                uint16_t x[4];
                for (unsigned j = 0; j < 4; j++)
                        x[j] = base_value((uint16_t)(w >> (16 * j)));
                for (uint32_t v = 0; v < nv && thr; v++) {
                        uint64_t ch = loom_mix64(vseed[v] ^ blk), fl = 0;
                        for (unsigned j = 0; j < 4; j++) {
                                if (((ch >> (16 * j)) & 0xffff) >= thr)
                                        continue;
                                if (!fl)
                                        fl = loom_mix64(ch) | 1; /* only for blocks with a change */
                                x[j] ^= (uint16_t)(1 + ((fl >> (16 * j)) & 0x3f));
                        }
                }
                for (lane = first; lane < 4 && i < n; lane++, i++)
                        out[i] = x[lane];
        }
}
