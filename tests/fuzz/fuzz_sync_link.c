/*
 * fuzz_sync_link.c - libFuzzer target for the link between the ranks of a transfer
 * (loom_sync_run): the relay a rollout rank runs, fed what connecting ranks send, and the
 * opening side of a connection, fed what a relay answers. Over socketpairs, one thread: the
 * relay is started without its accepting thread and each connection is handed to
 * loom__relay_serve. (fuzz_sync covers the publisher's protocol, fuzz_sync_frame the decoder.)
 *
 * Input: a mode byte, then up to three connections, each a 2-byte little-endian length and
 * that many bytes. Mode bits:
 *   0  the relay (or the opener) holds a sync key
 *   1  fix up the framing so inputs get past the checksums: each connection is read as a
 *      hello (magic set), a 16-byte nonce when the hello says keyed, then frames whose magic,
 *      header CRC and payload CRC are recomputed and whose payload_len is cut to what is left,
 *      each followed by an 8-byte tag when keyed
 *   2  the opening side instead of the relay: one connection's bytes are a relay's answer to a
 *      rank that opened a pull (loom__link_open), read frame by frame as rollout.c does
 * Checked: a keyed relay stores no frame and a keyed opener accepts none (their tags cannot
 * verify: each side's own random nonce is in the key); an unkeyed relay stores only frames
 * of the stream, position, version and type that hello and plan say; pulls never send a frame
 * past its consumers; nothing crashes, leaks or hangs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sync/internal.h"

static loom_sync_layout *layout;
static loom_sync_map *map;
static loom_sync_plan *plan;
static const uint8_t key[LOOM_SYNC_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        loom_sync_model m;
        loom_err e;
        loom_sync_par train = {1, 1, 1}, roll = {1, 1, 2};
        /* one layer of the tiny model in 64 KiB buckets: a few streams of a few buckets */
        if (loom_sync_model_preset("tiny", &m, &e))
                abort();
        m.layers = 1;
        if (loom_sync_layout_new(&m, &layout, &e) ||
            loom_sync_map_new(layout, &train, &roll, &map, &e) ||
            loom_sync_plan_new(map, LOOM_SYNC_TOPO, 65536, 3, &plan, &e)) {
                fprintf(stderr, "fuzz_sync_link: %s: %s\n", e.field, e.msg);
                abort();
        }
        return 0;
}

/* Rewrite one connection's bytes so that its hello and frames are well formed (mode bit 1). */
static void fix_up(uint8_t *b, size_t n)
{
        uint8_t hb[LOOM__HELLO_LEN];
        loom__hello h = {0};
        if (n < LOOM__HELLO_LEN)
                return;
        loom__hello_pack(&h, hb);
        memcpy(b, hb, 4); /* the magic */
        uint32_t flags;
        memcpy(&flags, b + 12, 4);
        int keyed = (flags & LOOM__HELLO_KEYED) != 0;
        size_t off = LOOM__HELLO_LEN + (keyed ? 16 : 0);
        while (off + LOOM_SYNC_FRAME_HDR <= n) {
                uint8_t *hdr = b + off;
                loom_sync_frame f;
                memcpy(hdr, "LSY1", 4);
                uint32_t crc = loom_sync_crc32c(0, hdr, 60);
                memcpy(hdr + 60, &crc, 4);
                if (loom_sync_frame_unpack(hdr, &f, NULL))
                        return;
                size_t left = n - off - LOOM_SYNC_FRAME_HDR;
                f.payload_len %= left + 1;
                f.payload_crc = keyed ? 0 : loom_sync_crc32c(0, hdr + 64, (size_t)f.payload_len);
                loom_sync_frame_pack(&f, hdr);
                off += LOOM_SYNC_FRAME_HDR + (size_t)f.payload_len + (keyed ? LOOM__MAC_LEN : 0);
        }
}

static void drain(int fd)
{
        char buf[65536];
        while (read(fd, buf, sizeof buf) > 0)
                ;
}

/* What the relay holds after the connections: only frames the hello and the plan allow. */
static void check_relay(loom__relay *r, int keyed, uint64_t version_seen[], int nver)
{
        for (size_t s = 0; s < plan->nstreams; s++) {
                const loom_sync_stream *st = &plan->streams[s];
                if (st->dst != 0)
                        continue;
                uint64_t nb = loom_sync_stream_buckets(plan, st);
                for (uint64_t k = 0; k <= nb; k++) {
                        loom__slot *sl = loom__relay_get(r, (uint32_t)s, (uint32_t)k, 0);
                        if (!sl)
                                continue;
                        if (keyed) /* a frame no one with the key sent was stored */
                                abort();
                        int ok = sl->f.stream == s && sl->f.seq == k &&
                                 sl->f.type ==
                                     (k == nb ? LOOM_SYNC_FRAME_MANIFEST : LOOM_SYNC_FRAME_BUCKET);
                        int v = 0;
                        for (int i = 0; i < nver; i++)
                                v |= version_seen[i] == sl->f.version;
                        if (!ok || !v)
                                abort();
                        /* this rank consumes every stream that lands on it and has not taken
                         * the frame yet: no pull may have released its payload */
                        if (sl->f.payload_len && !sl->payload)
                                abort();
                }
        }
}

static void relay_side(const uint8_t *data, size_t size, int mode)
{
        loom__relay *r;
        loom_err e;
        int keyed = mode & 1;
        if (loom__relay_start(&r, -1, plan, plan, NULL, 0, 0, keyed ? key : NULL, &e))
                abort();
        uint64_t versions[3];
        int nver = 0;
        for (int c = 0; c < 3 && size >= 2; c++) {
                size_t len = data[0] | (size_t)data[1] << 8;
                data += 2, size -= 2;
                len = len < size ? len : size;
                uint8_t *b = malloc(len + 1);
                memcpy(b, data, len);
                data += len, size -= len;
                if (mode & 2)
                        fix_up(b, len);
                if (len >= LOOM__HELLO_LEN)
                        memcpy(&versions[nver++], b + 16, 8);
                int sv[2];
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
                        abort();
                if (len && loom__write_all(sv[0], b, len))
                        abort();
                shutdown(sv[0], SHUT_WR);
                free(b);
                loom__relay_serve(r, sv[1]); /* closes sv[1] */
                fcntl(sv[0], F_SETFL, O_NONBLOCK);
                drain(sv[0]);
                close(sv[0]);
        }
        check_relay(r, keyed, versions, nver);
        loom__relay_free(r);
}

/* The opening side of a pull: what a relay answers, read as rollout.c's consume_remote does. */
static void opener_side(const uint8_t *data, size_t size, int mode)
{
        int keyed = mode & 1;
        if (size < 2)
                return;
        size_t len = data[0] | (size_t)data[1] << 8;
        data += 2, size -= 2;
        len = len < size ? len : size;
        uint8_t *b = malloc(len + LOOM__HELLO_LEN);
        /* a hello in front, as if the relay echoed one, so fix_up finds the frames */
        loom__hello h = {LOOM__HELLO_PULL, 0, 1, keyed ? LOOM__HELLO_KEYED : 0};
        loom__hello_pack(&h, b);
        memcpy(b + LOOM__HELLO_LEN, data, len);
        if (mode & 2)
                fix_up(b, len + LOOM__HELLO_LEN);
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
                abort();
        /* the relay's side: its nonce (when keyed) and frames, then the end */
        if (len && loom__write_all(sv[0], b + LOOM__HELLO_LEN, len))
                abort();
        shutdown(sv[0], SHUT_WR);
        free(b);
        loom__mac m;
        loom_err e;
        int rc = loom__link_open(sv[1], &h, keyed ? key : NULL, &m, &e);
        const loom_sync_stream *st = &plan->streams[0];
        uint64_t nb = loom_sync_stream_buckets(plan, st);
        for (uint64_t k = 0; !rc && k <= nb; k++) {
                loom_sync_frame f;
                uint8_t *payload = NULL;
                uint64_t maxp = k == nb ? st->count * sizeof(loom__mentry)
                                        : loom_sync_enc_bound((size_t)plan->bucket_elems);
                rc = loom__frame_recv_mac(sv[1], &m, &f, &payload, maxp, NULL, &e);
                if (!rc && keyed) /* a tag verified under a key and a nonce it never saw */
                        abort();
                if (!rc && f.payload_len > maxp)
                        abort();
                if (!rc && k < nb)
                        rc = loom__payload_check(&f, payload, 1, &e);
                if (rc && !e.msg[0])
                        abort();
                free(payload);
        }
        close(sv[0]);
        close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        int mode = data[0];
        if (mode & 4)
                opener_side(data + 1, size - 1, mode);
        else
                relay_side(data + 1, size - 1, mode);
        return 0;
}
