/*
 * test_harvest_weights.c - a live node's rollout weights over src/sync's publish / pull
 * (wlive.c): bit-exact after every version, sparse deltas when one behind, a dense catch-up
 * after versions were missed while pulls were held (the latest version still learned), and a
 * corrupted transfer - a flipped byte (CRC) or a well-formed frame with a wrong value (shard
 * hash) - rejected with the old version and its bytes still served. With the job's sync key a
 * node follows a keyed publisher and takes nothing from one without the key or with another
 * job's; without a key it pulls from loopback only, and only when asked to.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loom/harvest.h"
#include "loom/sync.h"

#define ELEMS 100003
#define SHARDS 3

static double now_s(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Poll until the worker's stats satisfy the predicate (5 s at most). */
static int wait_until(loom_harvest_wlive *l, int (*ok)(const loom_harvest_wlive_stats *, uint64_t),
                      uint64_t arg, loom_harvest_wlive_stats *st)
{
        double end = now_s() + 5;
        do {
                loom_harvest_wlive_stats_get(l, st);
                if (ok(st, arg))
                        return 1;
                usleep(5000);
        } while (now_s() < end);
        return 0;
}
static int at_version(const loom_harvest_wlive_stats *s, uint64_t v)
{
        return s->version == v;
}
static int knows(const loom_harvest_wlive_stats *s, uint64_t v)
{
        return s->latest == v;
}
static int failed(const loom_harvest_wlive_stats *s, uint64_t n)
{
        return s->pulls_failed >= n;
}

Test(harvest_weights, generator_is_seeded_and_sparse)
{
        uint16_t *a = malloc(2 * ELEMS), *b = malloc(2 * ELEMS), *c = malloc(2 * ELEMS);
        loom_harvest_wgen(5, 0, 0.01, a, ELEMS);
        loom_harvest_wgen(5, 0, 0.01, b, ELEMS);
        cr_assert_eq(memcmp(a, b, 2 * ELEMS), 0);
        memcpy(c, a, 2 * ELEMS);
        loom_harvest_wgen(5, 1, 0.01, b, ELEMS);
        size_t diff = 0;
        for (size_t i = 0; i < ELEMS; i++)
                diff += a[i] != b[i];
        cr_assert(diff > ELEMS / 200 && diff < ELEMS / 50, "%zu changed", diff);
        /* versions beyond 8 still change (loom_sync_synth stops at 8) */
        memcpy(a, b, 2 * ELEMS);
        loom_harvest_wgen(5, 20, 0.01, b, ELEMS);
        cr_assert_neq(memcmp(a, b, 2 * ELEMS), 0);
        uint64_t sh[SHARDS];
        loom_err e;
        cr_assert_eq(loom_harvest_wshards(ELEMS, SHARDS, sh, &e), 0);
        cr_assert_eq(sh[0] + sh[1] + sh[2], ELEMS);
        cr_assert_eq(loom_harvest_wshards(2, 3, sh, &e), LOOM_EINVAL);
        char ip[64];
        uint16_t port;
        cr_assert_eq(loom_harvest_wlive_addr("10.0.0.2:7000", ip, sizeof ip, &port, &e), 0);
        cr_assert_str_eq(ip, "10.0.0.2");
        cr_assert_eq(port, 7000);
        cr_assert_eq(loom_harvest_wlive_addr("7001", ip, sizeof ip, &port, &e), 0);
        cr_assert_str_eq(ip, "127.0.0.1");
        cr_assert_eq(loom_harvest_wlive_addr("127.0.0.1:0", ip, sizeof ip, &port, &e), LOOM_EINVAL);
        cr_assert_eq(loom_harvest_wlive_addr("host:7000", ip, sizeof ip, &port, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "IPv4"), "%s", e.msg);
        cr_assert_str_eq(e.field, "weights");
        free(a);
        free(b);
        free(c);
}

typedef struct trainer {
        loom_sync_pub *p;
        uint64_t shard[SHARDS];
        uint16_t *w;
        uint64_t version;
} trainer;

static void trainer_new(trainer *t)
{
        loom_err e;
        cr_assert_eq(loom_harvest_wshards(ELEMS, SHARDS, t->shard, &e), 0);
        cr_assert_eq(loom_sync_pub_new(NULL, t->shard, SHARDS, 4096, "127.0.0.1", 0, &t->p, &e), 0,
                     "%s", e.msg);
        t->w = malloc(2 * ELEMS);
        t->version = 0;
}

static void trainer_publish(trainer *t)
{
        loom_err e;
        loom_harvest_wgen(9, (uint32_t)t->version, 0.01, t->w, ELEMS);
        t->version++;
        cr_assert_eq(loom_sync_pub_publish(t->p, t->version, t->w, NULL, &e), 0, "%s", e.msg);
}

static void trainer_free(trainer *t)
{
        loom_sync_pub_free(t->p);
        free(t->w);
}

/* The worker serves exactly the trainer's current weights, and reports their digest. */
static void assert_same(loom_harvest_wlive *l, const trainer *t)
{
        uint16_t *got = malloc(2 * ELEMS);
        cr_assert_eq(loom_harvest_wlive_copy(l, got), t->version);
        cr_assert_eq(memcmp(got, t->w, 2 * ELEMS), 0, "weights differ at version %llu",
                     (unsigned long long)t->version);
        loom_harvest_wlive_stats st;
        loom_harvest_wlive_stats_get(l, &st);
        uint64_t h;
        uint32_t crc;
        loom_harvest_wdigest(t->w, ELEMS, &h, &crc);
        cr_assert_eq(st.hash, h);
        cr_assert_eq(st.crc, crc);
        free(got);
}

/* A node's pull thread on 127.0.0.1:port, probing every 50 ms. */
static loom_harvest_wlive_cfg puller_cfg(uint16_t port)
{
        return (loom_harvest_wlive_cfg){.ip = "127.0.0.1",
                                        .port = port,
                                        .elems = ELEMS,
                                        .shards = SHARDS,
                                        .poll_s = 0.05,
                                        .timeout_s = 5,
                                        .unkeyed = 1};
}

Test(harvest_weights, follows_the_publisher_and_catches_up)
{
        trainer t;
        trainer_new(&t);
        loom_harvest_wlive_cfg c = puller_cfg(loom_sync_pub_port(t.p));
        loom_harvest_wlive *l;
        loom_err e;
        cr_assert_eq(loom_harvest_wlive_start(&c, &l, &e), 0, "%s", e.msg);
        loom_harvest_wlive_stats st;
        for (int k = 0; k < 3; k++) {
                trainer_publish(&t);
                cr_assert(wait_until(l, at_version, t.version, &st), "stuck at %llu",
                          (unsigned long long)st.version);
                assert_same(l, &t);
        }
        cr_assert_eq(st.pulls_dense, 1); /* the first */
        cr_assert_eq(st.pulls_delta, 2);
        cr_assert_lt(st.last_bytes, 2 * ELEMS / 10); /* a 1% delta, not a dense copy */
        cr_assert_eq(st.pulls_failed, 0);
        /* held: three more versions are announced but not pulled */
        loom_harvest_wlive_hold(l, 1);
        for (int k = 0; k < 3; k++)
                trainer_publish(&t);
        cr_assert(wait_until(l, knows, t.version, &st));
        cr_assert_eq(st.version, 3);
        cr_assert(st.held);
        uint64_t served, latest;
        loom_harvest_wlive_versions(l, &served, &latest);
        cr_assert_eq(served, 3);
        cr_assert_eq(latest, 6);
        /* released: one pull of the chain of the three deltas, straight to the latest */
        loom_harvest_wlive_hold(l, 0);
        cr_assert(wait_until(l, at_version, 6, &st));
        assert_same(l, &t);
        cr_assert_eq(st.pulls_dense, 1);
        cr_assert_eq(st.pulls_delta, 3);
        cr_assert_lt(st.last_bytes, 2 * ELEMS / 3); /* three 1% deltas, not a dense copy */
        /* further behind than the publisher keeps deltas (16 versions): one dense catch-up */
        loom_harvest_wlive_hold(l, 1);
        for (int k = 0; k < 17; k++)
                trainer_publish(&t);
        cr_assert(wait_until(l, knows, t.version, &st));
        loom_harvest_wlive_hold(l, 0);
        cr_assert(wait_until(l, at_version, t.version, &st));
        assert_same(l, &t);
        cr_assert_eq(st.pulls_dense, 2);
        cr_assert_gt(st.last_bytes, 2 * ELEMS);
        loom_harvest_wlive_stop(l);
        trainer_free(&t);
}

/* ---- a man in the middle that corrupts one reply ------------------------------------------ */

enum { PASS = 0, FLIP = 1, FLIP_FIX_CRC = 2 };

typedef struct mitm {
        int lfd;
        uint16_t port, up;
        int mode, left; /* applied to the next `left` replies that carry a bucket frame */
        int stop, corrupted;
        pthread_mutex_t mu;
        pthread_t th;
} mitm;

static int read_full(int fd, void *buf, size_t n)
{
        for (size_t got = 0; got < n;) {
                ssize_t k = read(fd, (char *)buf + got, n - got);
                if (k <= 0)
                        return -1;
                got += (size_t)k;
        }
        return 0;
}

/* One pull: forward the request, read the publisher's whole reply, corrupt it, pass it on. */
static void relay_one(mitm *m, int cfd)
{
        uint8_t req[48]; /* pubsub.c's request */
        struct timeval tv = {.tv_sec = 5};
        setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (read_full(cfd, req, sizeof req))
                return;
        int ufd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(m->up)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(ufd, (struct sockaddr *)&sa, sizeof sa) ||
            write(ufd, req, sizeof req) != (ssize_t)sizeof req) {
                close(ufd);
                return;
        }
        size_t cap = 1 << 20, len = 0;
        uint8_t *buf = malloc(cap);
        for (;;) { /* until the publisher is done, or the puller gave up (a probe timed out) */
                struct pollfd pf[2] = {{.fd = ufd, .events = POLLIN},
                                       {.fd = cfd, .events = POLLIN}};
                poll(pf, 2, 100);
                if (pf[1].revents) {
                        len = 0;
                        break;
                }
                if (!pf[0].revents)
                        continue;
                ssize_t k = read(ufd, buf + len, cap - len);
                if (k <= 0)
                        break;
                if ((len += (size_t)k) == cap)
                        buf = realloc(buf, cap *= 2);
        }
        close(ufd);
        if (!len) {
                free(buf);
                return;
        }
        size_t bucket = LOOM_SYNC_FRAME_HDR + 8 * SHARDS; /* after the manifest */
        pthread_mutex_lock(&m->mu);
        int mode = len > bucket + LOOM_SYNC_FRAME_HDR + 8 && m->left ? m->mode : PASS;
        if (mode != PASS) {
                m->left--;
                m->corrupted++;
        }
        pthread_mutex_unlock(&m->mu);
        uint8_t *pl = buf + bucket + LOOM_SYNC_FRAME_HDR;
        if (mode != PASS)
                pl[6] ^= 0x10;
        if (mode == FLIP_FIX_CRC) {
                loom_sync_frame f;
                loom_err e;
                cr_assert_eq(loom_sync_frame_unpack(buf + bucket, &f, &e), 0);
                f.payload_crc = loom_sync_crc32c(0, pl, (size_t)f.payload_len);
                loom_sync_frame_pack(&f, buf + bucket);
        }
        (void)!send(cfd, buf, len, MSG_NOSIGNAL);
        free(buf);
}

static void *mitm_main(void *arg)
{
        mitm *m = arg;
        for (;;) {
                pthread_mutex_lock(&m->mu);
                int stop = m->stop;
                pthread_mutex_unlock(&m->mu);
                if (stop)
                        return NULL;
                struct timeval tv = {.tv_usec = 50000};
                setsockopt(m->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                int cfd = accept(m->lfd, NULL, NULL);
                if (cfd < 0)
                        continue;
                relay_one(m, cfd);
                close(cfd);
        }
}

static void mitm_start(mitm *m, uint16_t up)
{
        memset(m, 0, sizeof *m);
        m->up = up;
        m->lfd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sizeof sa;
        cr_assert_eq(bind(m->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
        cr_assert_eq(listen(m->lfd, 16), 0);
        getsockname(m->lfd, (struct sockaddr *)&sa, &sl);
        m->port = ntohs(sa.sin_port);
        pthread_mutex_init(&m->mu, NULL);
        pthread_create(&m->th, NULL, mitm_main, m);
}

static void mitm_arm(mitm *m, int mode, int left)
{
        pthread_mutex_lock(&m->mu);
        m->mode = mode;
        m->left = left;
        pthread_mutex_unlock(&m->mu);
}

static void mitm_stop(mitm *m)
{
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->th, NULL);
        close(m->lfd);
        pthread_mutex_destroy(&m->mu);
}

Test(harvest_weights, corrupt_transfer_keeps_the_old_version)
{
        trainer t;
        trainer_new(&t);
        mitm m;
        mitm_start(&m, loom_sync_pub_port(t.p));
        loom_harvest_wlive_cfg c = puller_cfg(m.port);
        loom_harvest_wlive *l;
        loom_err e;
        /* the first (dense) reply has one value changed and its checksums recomputed: only the
         * shard hash can tell, and nothing is applied */
        mitm_arm(&m, FLIP_FIX_CRC, 1);
        cr_assert_eq(loom_harvest_wlive_start(&c, &l, &e), 0, "%s", e.msg);
        trainer_publish(&t);
        loom_harvest_wlive_stats st;
        cr_assert(wait_until(l, failed, 1, &st));
        cr_assert(strstr(st.last_error, "checksum"), "%s", st.last_error);
        cr_assert(wait_until(l, at_version, 1, &st)); /* the next pull is clean */
        assert_same(l, &t);
        /* a flipped byte in every delta reply: each frame CRC rejects it, version 1 is still
         * served bit for bit while the worker knows version 2 exists */
        uint16_t *v1 = malloc(2 * ELEMS), *got = malloc(2 * ELEMS);
        memcpy(v1, t.w, 2 * ELEMS);
        mitm_arm(&m, FLIP, 1000);
        trainer_publish(&t);
        cr_assert(wait_until(l, failed, 4, &st));
        cr_assert(strstr(st.last_error, "checksum"), "%s", st.last_error);
        cr_assert_eq(st.latest, 2);
        cr_assert_eq(loom_harvest_wlive_copy(l, got), 1);
        cr_assert_eq(memcmp(got, v1, 2 * ELEMS), 0);
        loom_harvest_wlive_stats_get(l, &st);
        uint64_t h;
        uint32_t crc;
        loom_harvest_wdigest(v1, ELEMS, &h, &crc);
        cr_assert_eq(st.hash, h);
        cr_assert_eq(st.crc, crc);
        /* the link heals: the next pull lands */
        mitm_arm(&m, PASS, 0);
        cr_assert(wait_until(l, at_version, 2, &st));
        assert_same(l, &t);
        cr_assert_geq(m.corrupted, 4);
        cr_assert_eq(st.pulls_failed, (uint64_t)m.corrupted);
        loom_harvest_wlive_stop(l);
        mitm_stop(&m);
        trainer_free(&t);
        free(v1);
        free(got);
}

/* ---- the job's sync key ------------------------------------------------------------------ */

static const uint8_t job_key[LOOM_SYNC_KEY_LEN] = {0x6a, 0x6f, 0x62};
static const uint8_t other_key[LOOM_SYNC_KEY_LEN] = {0x6f, 0x74, 0x68};

static int refused(const loom_harvest_wlive_stats *s, uint64_t n)
{
        return s->pulls_failed + s->probes_failed >= n;
}

/* A node keyed with the job's key next to a publisher holding `key` (NULL: none): after it
 * tried three times, nothing applied and the error says the key is why. */
static void keyed_node_refuses(const uint8_t *key)
{
        trainer t;
        trainer_new(&t);
        loom_err e;
        if (key)
                cr_assert_eq(loom_sync_pub_set_key(t.p, key, &e), 0, "%s", e.msg);
        trainer_publish(&t);
        loom_harvest_wlive_cfg c = puller_cfg(loom_sync_pub_port(t.p));
        c.key = job_key;
        c.unkeyed = 0;
        loom_harvest_wlive *l;
        cr_assert_eq(loom_harvest_wlive_start(&c, &l, &e), 0, "%s", e.msg);
        loom_harvest_wlive_stats st;
        cr_assert(wait_until(l, refused, 3, &st), "no refusal: %s", st.last_error);
        cr_assert_eq(st.version, 0, "took version %llu from a publisher without the job's key",
                     (unsigned long long)st.version);
        cr_assert(st.keyed);
        cr_assert(strstr(st.last_error, "key") || strstr(st.last_error, "tag") ||
                      strstr(st.last_error, "authenticated"),
                  "%s", st.last_error);
        uint16_t *got = malloc(2 * ELEMS), *zero = calloc(ELEMS, 2);
        cr_assert_eq(loom_harvest_wlive_copy(l, got), 0);
        cr_assert_eq(memcmp(got, zero, 2 * ELEMS), 0, "weights changed");
        free(got);
        free(zero);
        loom_harvest_wlive_stop(l);
        trainer_free(&t);
}

Test(harvest_weights, keyed_node_follows_a_publisher_with_the_key)
{
        trainer t;
        trainer_new(&t);
        loom_err e;
        cr_assert_eq(loom_sync_pub_set_key(t.p, job_key, &e), 0, "%s", e.msg);
        loom_harvest_wlive_cfg c = puller_cfg(loom_sync_pub_port(t.p));
        c.key = job_key;
        c.unkeyed = 0;
        loom_harvest_wlive *l;
        cr_assert_eq(loom_harvest_wlive_start(&c, &l, &e), 0, "%s", e.msg);
        loom_harvest_wlive_stats st;
        for (int k = 0; k < 2; k++) {
                trainer_publish(&t);
                cr_assert(wait_until(l, at_version, t.version, &st), "stuck at %llu: %s",
                          (unsigned long long)st.version, st.last_error);
                assert_same(l, &t);
        }
        cr_assert(st.keyed);
        cr_assert_eq(st.pulls_failed, 0);
        loom_harvest_wlive_stop(l);
        trainer_free(&t);
}

Test(harvest_weights, keyed_node_takes_nothing_from_a_publisher_without_the_key)
{
        keyed_node_refuses(NULL); /* anyone serving the publisher protocol at the address */
}

Test(harvest_weights, keyed_node_takes_nothing_from_another_jobs_publisher)
{
        keyed_node_refuses(other_key);
}

Test(harvest_weights, unkeyed_pulls_from_loopback_only_and_only_when_asked)
{
        loom_harvest_wlive_cfg c = puller_cfg(7000);
        loom_harvest_wlive *l = NULL;
        loom_err e;
        c.ip = "10.1.2.3";
        cr_assert_eq(loom_harvest_wlive_start(&c, &l, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "weights_key");
        cr_assert(strstr(e.msg, "10.1.2.3:7000") && strstr(e.msg, "loopback"), "%s", e.msg);
        cr_assert_null(l);
        c.ip = "127.0.0.1";
        c.unkeyed = 0;
        cr_assert_eq(loom_harvest_wlive_start(&c, &l, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "weights_key");
        c.ip = "127.3.2.1"; /* all of 127.0.0.0/8 is loopback */
        c.unkeyed = 1;
        cr_assert_eq(loom_harvest_wlive_start(&c, &l, &e), 0, "%s", e.msg);
        loom_harvest_wlive_stop(l);
        cr_assert(loom_harvest_loopback("127.0.0.1"));
        cr_assert(!loom_harvest_loopback("128.0.0.1"));
        cr_assert(!loom_harvest_loopback("0.0.0.0"));
        cr_assert(!loom_harvest_loopback("not an address"));
}

static int stop_now(void)
{
        return 1;
}

Test(harvest_weights, unkeyed_publisher_listens_on_loopback_only)
{
        loom_harvest_publish_cfg c;
        loom_harvest_publish_defaults(&c);
        c.elems = 4096;
        c.ip = "0.0.0.0";
        loom_err e;
        FILE *out = tmpfile();
        cr_assert_eq(loom_harvest_publish_serve(&c, stop_now, out, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "sync key"), "%s", e.msg);
        c.ip = "127.0.0.1";
        cr_assert_eq(loom_harvest_publish_serve(&c, stop_now, out, &e), 0, "%s", e.msg);
        fclose(out);
}
