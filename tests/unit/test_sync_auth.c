/*
 * test_sync_auth.c - authenticated weight pulls (src/sync/auth.c): with the job's sync key a
 * pull works, dense and delta, bit for bit; another job's key, no key, a publisher without the
 * key, a forged frame (payload changed and its CRCs recomputed, so only the tag can tell), and
 * a reply recorded from an earlier pull and replayed to a new one are all refused and leave the
 * puller's weights unchanged. The forged and replayed streams come from a man in the middle on
 * loopback that records and rewrites the publisher's reply.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loom/sync.h"

static const uint64_t shards[2] = {3000, 1000};
#define ELEMS 4000
#define BUCKET 512
static const uint8_t key_a[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                                  17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
static const uint8_t key_b[32] = {99};

static void fill(uint16_t *w, uint64_t seed)
{
        for (size_t i = 0; i < ELEMS; i++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                w[i] = (uint16_t)(seed >> 48);
        }
}

static loom_sync_pub *publisher(const uint8_t *key, const uint16_t *w)
{
        loom_err e;
        loom_sync_pub *p;
        loom_sync_pub_stats ps;
        cr_assert_eq(loom_sync_pub_new("job", shards, 2, BUCKET, "127.0.0.1", 0, &p, &e), 0);
        cr_assert_eq(loom_sync_pub_set_key(p, key, &e), 0);
        cr_assert_eq(loom_sync_pub_publish(p, 0, w, &ps, &e), 0, "%s", e.msg);
        return p;
}

static int pull(const uint8_t *key, uint16_t port, uint16_t *w, loom_err *e)
{
        loom_sync_pull_stats st;
        return loom_sync_pull_keyed(key, "job", "127.0.0.1", port, shards, 2, w,
                                    LOOM_SYNC_NO_VERSION, 0, 3, &st, e);
}

/* ---- a man in the middle: one connection, request forwarded, reply recorded ---------------- */

typedef struct mitm {
        int lfd;
        uint16_t port, upstream;
        size_t req_len;
        uint8_t *reply; /* the publisher's reply as recorded (upstream != 0) or to replay */
        size_t len;
        int forge; /* flip a payload byte of the first bucket frame; 1: recompute its CRCs and
                    * shard hash (a forgery), 2: leave them (corruption) */
        uint32_t bucket_crc; /* that bucket's payload_crc as sent */
        int bucket_crc_ok;   /* ... and whether it was the payload's CRC32C */
        size_t tag;          /* bytes after each frame: 8 with a key, 0 without */
        size_t nshards;
} mitm;

static int listen_any(uint16_t *port)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t n = sizeof a;
        cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        cr_assert_eq(listen(fd, 4), 0);
        getsockname(fd, (struct sockaddr *)&a, &n);
        *port = ntohs(a.sin_port);
        return fd;
}

static void read_n(int fd, uint8_t *b, size_t n)
{
        for (size_t got = 0; got < n;) {
                ssize_t r = read(fd, b + got, n - got);
                cr_assert_gt(r, 0);
                got += (size_t)r;
        }
}

/* Change element 3 of the first (dense) bucket and fix everything a check without a key
 * looks at: the bucket's payload CRC, the manifest's shard hash (additive, so one element's
 * term is swapped) and the manifest's CRC. */
static void forge(mitm *m)
{
        size_t off = 64 + 8 * m->nshards + m->tag; /* past the manifest and its tag */
        loom_sync_frame f, mf;
        cr_assert_eq(loom_sync_frame_unpack(m->reply + off, &f, NULL), 0);
        cr_assert_eq(f.enc, LOOM_SYNC_ENC_DENSE);
        uint8_t *pl = m->reply + off + 64;
        /* a keyed bucket carries no CRC (its tag covers the same bytes); a plain one does */
        m->bucket_crc = f.payload_crc;
        m->bucket_crc_ok = f.payload_crc == loom_sync_crc32c(0, pl, (size_t)f.payload_len);
        uint16_t was, now;
        memcpy(&was, pl + 6, 2);
        now = was ^ 0x4000;
        memcpy(pl + 6, &now, 2);
        if (m->forge == 2)
                return; /* corrupted in flight: nothing else fixed */
        f.payload_crc = loom_sync_crc32c(0, pl, (size_t)f.payload_len);
        loom_sync_frame_pack(&f, m->reply + off);
        cr_assert_eq(loom_sync_frame_unpack(m->reply, &mf, NULL), 0);
        uint64_t h;
        memcpy(&h, m->reply + 64, 8);
        h = h - loom_sync_hash(&was, 1, 3) + loom_sync_hash(&now, 1, 3);
        memcpy(m->reply + 64, &h, 8);
        mf.payload_crc = loom_sync_crc32c(0, m->reply + 64, (size_t)mf.payload_len);
        loom_sync_frame_pack(&mf, m->reply);
}

static void *mitm_main(void *arg)
{
        mitm *m = arg;
        int c = accept(m->lfd, NULL, NULL);
        uint8_t req[128];
        read_n(c, req, m->req_len);
        if (m->upstream) {
                int u = socket(AF_INET, SOCK_STREAM, 0);
                struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(m->upstream)};
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                cr_assert_eq(connect(u, (struct sockaddr *)&a, sizeof a), 0);
                cr_assert_eq(write(u, req, m->req_len), (ssize_t)m->req_len);
                size_t cap = 1 << 16;
                m->reply = malloc(cap);
                m->len = 0;
                ssize_t r;
                while ((r = read(u, m->reply + m->len, cap - m->len)) > 0)
                        if ((m->len += (size_t)r) == cap)
                                m->reply = realloc(m->reply, cap *= 2);
                close(u);
        }
        if (m->forge)
                forge(m);
        cr_assert_eq(write(c, m->reply, m->len), (ssize_t)m->len);
        close(c);
        return NULL;
}

static pthread_t mitm_start(mitm *m)
{
        m->lfd = listen_any(&m->port);
        pthread_t t;
        pthread_create(&t, NULL, mitm_main, m);
        return t;
}

static void mitm_end(mitm *m, pthread_t t)
{
        pthread_join(t, NULL);
        close(m->lfd);
}

/* Pull through a middle that alters the first bucket in flight (forge: as mitm.forge), with
 * the job's key or without one; m keeps what the middle saw and its recorded reply. */
static int pull_altered(int keyed, int forge, const uint16_t *w, uint16_t *got, mitm *m,
                        loom_err *e)
{
        loom_sync_pub *p = publisher(keyed ? key_a : NULL, w);
        *m = (mitm){.upstream = loom_sync_pub_port(p),
                    .req_len = keyed ? 96 : 48,
                    .forge = forge,
                    .tag = keyed ? 8 : 0,
                    .nshards = 2};
        pthread_t t = mitm_start(m);
        int rc = pull(keyed ? key_a : NULL, m->port, got, e);
        mitm_end(m, t);
        loom_sync_pub_free(p);
        return rc;
}

/* ---- tests ----------------------------------------------------------------------------------- */

Test(sync_auth, the_jobs_key_pulls_dense_and_delta_bit_exact)
{
        uint16_t *w = malloc(2 * ELEMS), *w1 = malloc(2 * ELEMS), *got = calloc(ELEMS, 2);
        fill(w, 1);
        loom_sync_pub *p = publisher(key_a, w);
        loom_err e;
        cr_assert_eq(pull(key_a, loom_sync_pub_port(p), got, &e), 0, "%s", e.msg);
        cr_assert_eq(memcmp(got, w, 2 * ELEMS), 0);
        memcpy(w1, w, 2 * ELEMS);
        for (int k = 0; k < 30; k++)
                w1[(k * 131) % ELEMS] ^= 0x11;
        loom_sync_pub_stats ps;
        cr_assert_eq(loom_sync_pub_publish(p, 1, w1, &ps, &e), 0);
        loom_sync_pull_stats st;
        cr_assert_eq(loom_sync_pull_keyed(key_a, "job", "127.0.0.1", loom_sync_pub_port(p), shards,
                                          2, got, 0, 1, 3, &st, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st.base, 0);
        cr_assert_eq(st.changed, 30);
        cr_assert_eq(memcmp(got, w1, 2 * ELEMS), 0);
        uint64_t v;
        cr_assert_eq(loom_sync_pull_latest_keyed(key_a, "job", "127.0.0.1", loom_sync_pub_port(p),
                                                 shards, 2, 0, 3, &v, &e),
                     0, "%s", e.msg);
        cr_assert_eq(v, 1);
        loom_sync_pub_free(p);
        free(w), free(w1), free(got);
}

Test(sync_auth, another_jobs_key_or_none_is_refused_and_changes_nothing)
{
        uint16_t *w = malloc(2 * ELEMS), *got = malloc(2 * ELEMS), *before = malloc(2 * ELEMS);
        fill(w, 2);
        fill(got, 3);
        memcpy(before, got, 2 * ELEMS);
        loom_sync_pub *p = publisher(key_a, w);
        loom_err e;
        cr_assert_eq(pull(key_b, loom_sync_pub_port(p), got, &e), LOOM_EPROTO);
        cr_assert_str_eq(e.field, "sync_key");
        cr_assert_eq(pull(NULL, loom_sync_pub_port(p), got, &e), LOOM_EPROTO);
        cr_assert(strstr(e.msg, "authenticated pulls only"), "%s", e.msg);
        cr_assert_eq(memcmp(got, before, 2 * ELEMS), 0);
        loom_sync_pub_free(p);
        /* a publisher without the key (e.g. one that took over the port) feeds no keyed puller */
        loom_sync_pub *q = publisher(NULL, w);
        cr_assert_eq(pull(key_a, loom_sync_pub_port(q), got, &e), LOOM_EPROTO);
        cr_assert_eq(memcmp(got, before, 2 * ELEMS), 0);
        loom_sync_pub_free(q);
        free(w), free(got), free(before);
}

/* A frame changed in flight with valid CRCs: accepted without a key (CRCs catch corruption,
 * not forgery), refused with one. */
Test(sync_auth, a_forged_frame_is_refused_only_a_tag_can_tell)
{
        uint16_t *w = malloc(2 * ELEMS), *got = malloc(2 * ELEMS), *before = malloc(2 * ELEMS);
        fill(w, 4);
        fill(got, 5);
        memcpy(before, got, 2 * ELEMS);
        loom_err e;
        for (int keyed = 0; keyed < 2; keyed++) {
                mitm m;
                int rc = pull_altered(keyed, 1, w, got, &m, &e);
                if (!keyed) {
                        /* the forgery lands: element 3 is the forger's, not the trainer's */
                        cr_assert_eq(rc, 0, "%s", e.msg);
                        cr_assert_eq(got[3], w[3] ^ 0x4000);
                        cr_assert_eq(memcmp(got + 4, w + 4, 2 * (ELEMS - 4)), 0);
                        memcpy(got, before, 2 * ELEMS);
                } else {
                        cr_assert_eq(rc, LOOM_ECORRUPT);
                        cr_assert_str_eq(e.field, "frame.tag", "%s", e.msg);
                        cr_assert_eq(memcmp(got, before, 2 * ELEMS), 0);
                }
                free(m.reply);
        }
        free(w), free(got), free(before);
}

/* A bit flipped in flight, nothing recomputed: without a key the CRC refuses it; with a key
 * the bucket carries no CRC (payload_crc 0) and the tag alone refuses it. Either way the
 * weights are untouched. */
Test(sync_auth, a_corrupted_keyed_frame_is_refused_by_its_tag)
{
        uint16_t *w = malloc(2 * ELEMS), *got = malloc(2 * ELEMS), *before = malloc(2 * ELEMS);
        fill(w, 8);
        fill(got, 9);
        memcpy(before, got, 2 * ELEMS);
        loom_err e;
        for (int keyed = 0; keyed < 2; keyed++) {
                mitm m;
                int rc = pull_altered(keyed, 2, w, got, &m, &e);
                cr_assert_eq(rc, LOOM_ECORRUPT, "%s", e.msg);
                if (keyed) {
                        cr_assert_eq(m.bucket_crc, 0);
                        cr_assert_str_eq(e.field, "frame.tag", "%s", e.msg);
                } else {
                        cr_assert(m.bucket_crc_ok);
                        cr_assert_str_eq(e.field, "frame.payload_crc", "%s", e.msg);
                }
                cr_assert_eq(memcmp(got, before, 2 * ELEMS), 0);
                free(m.reply);
        }
        free(w), free(got), free(before);
}

Test(sync_auth, a_reply_replayed_to_a_new_pull_is_refused)
{
        uint16_t *w = malloc(2 * ELEMS), *got = calloc(ELEMS, 2), *before = malloc(2 * ELEMS);
        fill(w, 6);
        loom_sync_pub *p = publisher(key_a, w);
        loom_err e;
        /* record an honest pull through the middle */
        mitm rec = {.upstream = loom_sync_pub_port(p), .req_len = 96, .tag = 8, .nshards = 2};
        pthread_t t = mitm_start(&rec);
        cr_assert_eq(pull(key_a, rec.port, got, &e), 0, "%s", e.msg);
        mitm_end(&rec, t);
        cr_assert_eq(memcmp(got, w, 2 * ELEMS), 0);
        /* replay it, word for word, to a later pull of another worker */
        fill(got, 7);
        memcpy(before, got, 2 * ELEMS);
        mitm rep = {.req_len = 96, .reply = rec.reply, .len = rec.len};
        t = mitm_start(&rep);
        cr_assert_eq(pull(key_a, rep.port, got, &e), LOOM_ECORRUPT);
        mitm_end(&rep, t);
        cr_assert_str_eq(e.field, "frame.tag", "%s", e.msg);
        cr_assert_eq(memcmp(got, before, 2 * ELEMS), 0);
        free(rec.reply);
        loom_sync_pub_free(p);
        free(w), free(got), free(before);
}
