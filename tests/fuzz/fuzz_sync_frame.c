/*
 * fuzz_sync_frame.c - libFuzzer target for the bucket decoder: any byte string, read as a 64-byte
 * frame header followed by a payload, must be rejected with an error or decode to exactly
 * `elems` values, and must never write to the previous version. (fuzz_sync.c covers the
 * request, the manifest and delta chains around it.) Build and run with `make fuzz`.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loom/sync.h"

#define N 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static uint16_t old[N], keep[N], out[N];
        if (size < LOOM_SYNC_FRAME_HDR)
                return 0;
        for (size_t i = 0; i < N; i++)
                old[i] = keep[i] = (uint16_t)(i * 2654435761u >> 7);
        loom_sync_frame f;
        loom_err e;
        /* Fix the magic and header CRC so inputs reach the field checks and the decoder. */
        uint8_t hdr[LOOM_SYNC_FRAME_HDR];
        memcpy(hdr, data, sizeof hdr);
        memcpy(hdr, "LSY1", 4);
        uint32_t crc = loom_sync_crc32c(0, hdr, 60);
        memcpy(hdr + 60, &crc, 4);
        if (loom_sync_frame_unpack(hdr, &f, &e))
                return 0;
        /* The header claims a length; the receiver reads exactly that many bytes, so a shorter
         * input is a truncated frame and is not offered to the decoder. */
        if (f.payload_len > size - LOOM_SYNC_FRAME_HDR)
                return 0;
        const uint8_t *payload = data + LOOM_SYNC_FRAME_HDR;
        /* Exercise the structural checks, not only the checksum. */
        f.payload_crc = loom_sync_crc32c(0, payload, (size_t)f.payload_len);
        int rc = loom_sync_decode(&f, payload, old, out, N, &e);
        if (memcmp(old, keep, sizeof old))
                abort();
        if (rc && !e.msg[0])
                abort();
        return 0;
}
