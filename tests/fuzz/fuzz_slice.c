/*
 * fuzz_slice.c - libFuzzer target for loom-state's slice-file recovery (src/state/store.c): what
 * a restarted daemon makes of the files it finds in its directory. The first byte picks:
 *   'N' + name    a directory entry's name (loom__store_name_kind): a name it takes as a slice
 *                 or an unfinished write is exactly the one loom__store_path writes for its id.
 *   'H' + 8-byte little-endian file size + header bytes (zero padded to a block)
 *                 a slice file's header (loom__store_header_parse); the size's top bit set
 *                 means "recompute the header CRC", so inputs reach the checks behind it, the
 *                 next one "pass only the bytes given" (a short read). An
 *                 accepted header has a key loom_state_key_check accepts, bytes that are the
 *                 key's, the size those bytes need, and makes the same header again.
 *   'R' + records a directory of slice files, each record 12 bytes (id, job, version, tensor,
 *                 r0, r1, c0, c1 from small alphabets so that slices collide, overlap and share
 *                 ids; dtype; a byte of flags to corrupt the header, its size or the CRC),
 *                 indexed as recovery does and then resolved (loom__store_recover_finish). The
 *                 index then holds unique ids below next_id, no two overlapping rectangles of
 *                 one tensor version, and disk_used is the sum of its files.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/sync.h"
#include "state/internal.h"

/* 170 records over 32 ids collide enough; longer inputs only slow the campaign */
#define MAX_INPUT 2048

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static st_store store;
/* in memory where there is a tmpfs: resolving overlaps unlinks and fsyncs the directory, which
 * on a disk would be most of an input's time */
static char dir[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        snprintf(dir, sizeof dir, "/dev/shm/loom-fuzz-slice-XXXXXX");
        if (!mkdtemp(dir)) {
                snprintf(dir, sizeof dir, "/tmp/loom-fuzz-slice-XXXXXX");
                if (!mkdtemp(dir))
                        abort();
        }
        loom_state_cfg c;
        loom_state_cfg_default(&c);
        c.dir = dir;
        c.host_bytes = 4096;
        c.disk_bytes = UINT64_MAX;
        c.no_mlock = 1;
        loom_err e;
        if (loom__store_open(&store, &c, &e)) {
                fprintf(stderr, "fuzz_slice: %s\n", e.msg);
                abort();
        }
        return 0;
}

static void name_side(const uint8_t *data, size_t size)
{
        char name[300], again[64];
        size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
        memcpy(name, data, n);
        name[n] = '\0';
        uint64_t id = 0;
        int kind = loom__store_name_kind(name, &id);
        if (kind == ST_NAME_OTHER)
                return;
        snprintf(again, sizeof again, "%016" PRIx64 ".%s", id,
                 kind == ST_NAME_SLICE ? "slc" : "tmp");
        if (strcmp(again, name))
                abort();
}

static void check_header(const st_fhdr *h, uint64_t file_size)
{
        loom_err e;
        if (loom_state_key_check(&h->key, "key", &e) || loom_state_key_bytes(&h->key) != h->bytes ||
            file_size != ST_HDR + st_round(h->bytes))
                abort();
        uint8_t blk[ST_HDR];
        st_fhdr h2;
        loom__store_header_make(&h->key, h->bytes, h->crc, blk);
        if (loom__store_header_parse(blk, sizeof blk, file_size, "again", &h2, &e) ||
            memcmp(&h2.key, &h->key, sizeof h->key) || h2.bytes != h->bytes || h2.crc != h->crc)
                abort();
}

static void header_side(const uint8_t *data, size_t size)
{
        if (size < 8)
                return;
        uint64_t file_size = 0;
        for (int i = 0; i < 8; i++)
                file_size |= (uint64_t)data[i] << (8 * i);
        bool fix = file_size >> 63, whole = !(file_size >> 62 & 1);
        file_size &= ~(UINT64_C(3) << 62);
        static uint8_t blk[ST_HDR];
        size_t n = size - 8 < ST_HDR ? size - 8 : ST_HDR;
        memset(blk, 0, sizeof blk);
        memcpy(blk, data + 8, n);
        if (fix) { /* the CRC the writer would have put there */
                st_fhdr h;
                memcpy(&h, blk, sizeof h);
                h.hdr_crc = 0;
                h.hdr_crc = loom_sync_crc32c(0, &h, sizeof h);
                memcpy(blk, &h, sizeof h);
        }
        st_fhdr h;
        loom_err e;
        loom_err_clear(&e);
        int rc = loom__store_header_parse(blk, whole ? sizeof blk : n, file_size, "slice", &h, &e);
        if (rc && (rc != LOOM_ECORRUPT || !e.msg[0]))
                abort();
        if (!rc)
                check_header(&h, file_size);
}

static void reset(void)
{
        for (size_t i = 0; i < store.nslices; i++)
                free(store.slices[i]);
        store.nslices = 0;
        store.disk_used = 0;
        store.next_id = 0;
}

static bool overlaps(const loom_state_key *a, const loom_state_key *b)
{
        /* a tensor is (job, version, name, dtype): the same name in two dtypes is two tensors */
        return !strcmp(a->job, b->job) && a->version == b->version && !strcmp(a->name, b->name) &&
               !strcmp(a->dtype, b->dtype) && a->r0 < b->r1 && b->r0 < a->r1 && a->c0 < b->c1 &&
               b->c0 < a->c1;
}

static void recover_side(const uint8_t *data, size_t size)
{
        static const char *jobs[] = {"a", "b", "job with spaces", "\xc3\xa9t\xc3\xa9", "bad\njob"};
        static const char *names[] = {"w", "v", "layers.0.attn.q_proj.weight", ""};
        static const char *dtypes[] = {"bf16", "f32", "u8", "f64", "x"};
        static uint8_t blk[ST_HDR];
        for (size_t at = 0; at + 12 <= size; at += 12) {
                const uint8_t *r = data + at;
                loom_state_key k;
                memset(&k, 0, sizeof k);
                snprintf(k.job, sizeof k.job, "%s", jobs[r[1] % 5]);
                k.version = r[2] % 4;
                snprintf(k.name, sizeof k.name, "%s", names[r[3] % 4]);
                k.r0 = r[4] % 16, k.r1 = r[5] % 16, k.c0 = r[6] % 4, k.c1 = r[7] % 4;
                snprintf(k.dtype, sizeof k.dtype, "%s", dtypes[r[8] % 5]);
                uint8_t flags = r[9];
                uint64_t id = r[0] == 255 ? UINT64_MAX : r[0] % 32;
                uint64_t bytes = loom_state_key_bytes(&k) + (flags & 1);
                uint32_t crc = (uint32_t)r[10] | (uint32_t)r[11] << 8;
                loom__store_header_make(&k, bytes, crc, blk);
                if (flags & 2)
                        blk[flags % 64 + 8] ^= (uint8_t)(1u << (flags >> 5)); /* a flipped bit */
                uint64_t file_size = ST_HDR + st_round(bytes) + ((flags & 4) ? ST_ALIGN : 0);
                st_fhdr h;
                loom_err e;
                if (loom__store_header_parse(blk, sizeof blk, file_size, "slice", &h, &e))
                        continue;
                check_header(&h, file_size);
                int rc = loom__store_index(&store, id, &h, &e);
                if (rc < 0 || (rc == 1 && id != UINT64_MAX && !store.nslices))
                        abort();
        }
        loom_err e;
        if (loom__store_recover_finish(&store, &e))
                abort();
        uint64_t used = 0;
        for (size_t i = 0; i < store.nslices; i++) {
                const st_slice *a = store.slices[i];
                used += ST_HDR + st_round(a->bytes);
                if (a->id >= store.next_id || !a->on_disk || a->on_host)
                        abort();
                for (size_t j = i + 1; j < store.nslices; j++)
                        if (store.slices[j]->id == a->id ||
                            overlaps(&store.slices[j]->key, &a->key))
                                abort();
        }
        if (used != store.disk_used)
                abort();
        reset();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > MAX_INPUT)
                return 0;
        if (data[0] == 'N')
                name_side(data + 1, size - 1);
        else if (data[0] == 'H')
                header_side(data + 1, size - 1);
        else if (data[0] == 'R')
                recover_side(data + 1, size - 1);
        return 0;
}
