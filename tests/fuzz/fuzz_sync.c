/*
 * fuzz_sync.c - libFuzzer target for the weight publisher's wire protocol, both ends, over a
 * socketpair (no TCP, one thread):
 *
 *   'S' + bytes: the bytes are a puller's request to a live publisher (two shards, three
 *                versions published, so dense replies, single deltas and delta chains are all
 *                reachable); it must answer or refuse without crashing or hanging.
 *   'P' h + bytes: the bytes are what a publisher sent to a puller holding version h % 4
 *                (0: nothing). The pull must fail with an error message and leave the caller's
 *                weights unchanged, or succeed (pull.c has then checked every shard's hash).
 *
 * Seeds (fuzz/corpus/sync/) are real exchanges: with LOOM_FUZZ_SAVE=DIR, each 'S' input also
 * writes the publisher's reply as a 'P' input into DIR.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sync/internal.h"

#define MAX_INPUT (64 * 1024) /* the reply must fit a socket buffer: no second thread */

static const uint64_t shards[2] = {3000, 1100};
#define ELEMS 4100
static uint16_t versions[4][ELEMS]; /* [v]: the publisher's version v (1..3) */
static loom_sync_pub *pub;

static void make_versions(void)
{
        for (size_t i = 0; i < ELEMS; i++)
                versions[1][i] = (uint16_t)((i * 2654435761u) >> 7);
        memcpy(versions[2], versions[1], sizeof versions[1]);
        for (size_t i = 0; i < ELEMS; i += 37)
                versions[2][i] ^= 0x5a5a;
        memcpy(versions[3], versions[2], sizeof versions[2]);
        for (size_t i = 5; i < ELEMS; i += 101)
                versions[3][i] += 3;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        make_versions();
        loom_err e;
        if (loom_sync_pub_new("fuzz-model", shards, 2, 1024, "127.0.0.1", 0, &pub, &e))
                abort();
        loom_sync_pub_limits l;
        loom_sync_pub_limits_default(&l);
        l.idle_s = 0.2;
        l.wait_s = 0; /* a request for a version not there yet is answered at once */
        if (loom_sync_pub_set_limits(pub, &l, &e))
                abort();
        for (uint64_t v = 1; v <= 3; v++)
                if (loom_sync_pub_publish(pub, v, versions[v], NULL, &e))
                        abort();
        return 0;
}

static void save_reply(const uint8_t *req, size_t n, int fd)
{
        const char *dir = getenv("LOOM_FUZZ_SAVE");
        if (!dir || n < LOOM__PULL_REQ_LEN)
                return;
        uint64_t have = loom__get64(req + 8);
        static uint8_t buf[MAX_INPUT];
        size_t len = 2;
        ssize_t k;
        buf[0] = 'P';
        buf[1] = (uint8_t)(have == LOOM_SYNC_NO_VERSION ? 0 : have);
        while (len < sizeof buf && (k = read(fd, buf + len, sizeof buf - len)) > 0)
                len += (size_t)k;
        char path[4096];
        snprintf(path, sizeof path, "%s/reply-have%u-%zu", dir, buf[1], len);
        FILE *f = fopen(path, "wb");
        if (f) {
                fwrite(buf, 1, len, f);
                fclose(f);
        }
}

static void serve_side(const uint8_t *data, size_t size)
{
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
                abort();
        /* The publisher reads one 48-byte request; more bytes would only keep it waiting for
         * the peer to go (its wait is bounded by wait_s = 0 here anyway). */
        size_t n = size < LOOM__PULL_REQ_LEN ? size : LOOM__PULL_REQ_LEN;
        if (n && write(sv[0], data, n) != (ssize_t)n)
                abort();
        shutdown(sv[0], SHUT_WR);
        loom__pub_serve(pub, sv[1]);
        close(sv[1]);
        save_reply(data, n, sv[0]);
        close(sv[0]);
}

static void pull_side(const uint8_t *data, size_t size)
{
        if (size < 1)
                return;
        uint64_t have = data[0] % 4 == 0 ? LOOM_SYNC_NO_VERSION : (uint64_t)(data[0] % 4);
        static uint16_t w[ELEMS], keep[ELEMS];
        if (have == LOOM_SYNC_NO_VERSION)
                memset(w, 0, sizeof w);
        else
                memcpy(w, versions[have], sizeof w);
        memcpy(keep, w, sizeof w);
        data++;
        size--;
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
                abort();
        int big = 4 * MAX_INPUT;
        setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
        setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        if (size && write(sv[1], data, size) != (ssize_t)size)
                abort();
        shutdown(sv[1], SHUT_WR);
        loom_sync_pull_stats st;
        memset(&st, 0, sizeof st);
        loom_err e;
        loom_err_clear(&e);
        int rc = loom__pull_fd(sv[0], "fuzz-model", shards, 2, w, have, 0, &st, &e);
        close(sv[0]);
        close(sv[1]);
        if (rc) {
                if (!e.msg[0] || memcmp(w, keep, sizeof w))
                        abort(); /* a failed pull must say why and change nothing */
                return;
        }
        /* Success: pull.c checked every frame and each shard's hash against the manifest before
         * it overwrote w; a forged reply can carry any hash, so there is nothing more to check
         * here than that no sanitizer fired on the way. */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > MAX_INPUT)
                return 0;
        if (data[0] == 'S')
                serve_side(data + 1, size - 1);
        else if (data[0] == 'P')
                pull_side(data + 1, size - 1);
        return 0;
}
