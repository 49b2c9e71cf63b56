/*
 * test_sync_pubsub.c - publish / pull of a live model (src/sync/pubsub.c, pull.c) over loopback:
 * a first pull is dense, the next one a sparse delta smaller than dense, the puller's weights
 * equal the published ones bit for bit, and a mismatched or absent publisher changes nothing.
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

#include "loom/sync.h"

static const uint64_t shards[3] = {1000, 5000, 37};
#define ELEMS 6037

static void fill(uint16_t *w, uint64_t seed)
{
        for (size_t i = 0; i < ELEMS; i++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                w[i] = (uint16_t)(seed >> 48);
        }
}

Test(sync_pubsub, dense_then_sparse_delta_bit_exact)
{
        loom_err e;
        loom_sync_pub *p;
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        uint16_t *a = malloc(2 * ELEMS), *b = malloc(2 * ELEMS), *got = calloc(ELEMS, 2);
        fill(a, 1);
        loom_sync_pub_stats ps;
        cr_assert_eq(loom_sync_pub_publish(p, 0, a, &ps, &e), 0, "%s", e.msg);
        cr_assert_eq(ps.changed, ELEMS);
        loom_sync_pull_stats st;
        uint16_t port = loom_sync_pub_port(p);
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION,
                                    0, 5, &st, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st.version, 0);
        cr_assert_eq(st.base, LOOM_SYNC_NO_VERSION);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        /* version 1: 40 elements change, spread over two shards */
        memcpy(b, a, 2 * ELEMS);
        for (int k = 0; k < 40; k++)
                b[(k * 149) % ELEMS] ^= (uint16_t)(1 + k);
        cr_assert_eq(loom_sync_pub_publish(p, 1, b, &ps, &e), 0, "%s", e.msg);
        cr_assert_eq(ps.changed, 40);
        cr_assert_lt(ps.delta_bytes, ps.dense_bytes / 4);
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, 0, 1, 5, &st, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(st.version, 1);
        cr_assert_eq(st.base, 0);
        cr_assert_eq(st.changed, 40);
        cr_assert_eq(st.bytes, ps.delta_bytes);
        cr_assert_eq(memcmp(got, b, 2 * ELEMS), 0);
        /* up to date: nothing but the manifest, weights unchanged */
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, 1, 1, 5, &st, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(st.changed, 0);
        cr_assert_eq(memcmp(got, b, 2 * ELEMS), 0);
        /* a worker that restarted with nothing gets the latest dense */
        uint16_t *fresh = calloc(ELEMS, 2);
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, fresh, LOOM_SYNC_NO_VERSION,
                                    1, 5, &st, &e),
                     0, "%s", e.msg);
        cr_assert_eq(memcmp(fresh, b, 2 * ELEMS), 0);
        /* versions only move forward */
        cr_assert_eq(loom_sync_pub_publish(p, 1, a, &ps, &e), LOOM_EINVAL);
        loom_sync_pub_free(p);
        free(a);
        free(b);
        free(got);
        free(fresh);
}

Test(sync_pubsub, mismatch_and_timeout_leave_weights_alone)
{
        loom_err e;
        loom_sync_pub *p;
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        uint16_t *a = malloc(2 * ELEMS), *got = malloc(2 * ELEMS), *keep = malloc(2 * ELEMS);
        fill(a, 2);
        fill(got, 3);
        memcpy(keep, got, 2 * ELEMS);
        cr_assert_eq(loom_sync_pub_publish(p, 5, a, NULL, &e), 0, "%s", e.msg);
        uint16_t port = loom_sync_pub_port(p);
        const uint64_t other[3] = {1000, 5001, 36};
        int rc = loom_sync_pull(NULL, "127.0.0.1", port, other, 3, got, LOOM_SYNC_NO_VERSION, 0, 5,
                                NULL, &e);
        cr_assert_eq(rc, LOOM_EPROTO);
        cr_assert(strstr(e.msg, "shape mismatch"), "%s", e.msg);
        cr_assert_eq(memcmp(got, keep, 2 * ELEMS), 0);
        /* version 6 never comes */
        rc = loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION, 6, 0.3,
                            NULL, &e);
        cr_assert_eq(rc, LOOM_ETIMEDOUT, "%d %s", rc, e.msg);
        cr_assert_eq(memcmp(got, keep, 2 * ELEMS), 0);
        /* a delta against a version the puller does not have is refused */
        rc = loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, 4, 5, 5, NULL, &e);
        cr_assert_eq(rc, 0, "%s", e.msg); /* base is none: the publisher answers dense */
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        loom_sync_pub_free(p);
        free(a);
        free(got);
        free(keep);
}

/* A trainer killed and restarted from its checkpoint of version N starts a new publisher whose
 * first publish is N again: a puller that holds N from the dead publisher keeps it (only the
 * manifest crosses, its checksums verify the bits held), then receives N+1 as a delta. If the
 * new publisher's N is not the old one's bits, the checksums refuse it and nothing changes. */
Test(sync_pubsub, restarted_publisher_resumes_at_version_n)
{
        loom_err e;
        loom_sync_pub *p;
        uint16_t *a = malloc(2 * ELEMS), *b = malloc(2 * ELEMS), *c = malloc(2 * ELEMS);
        uint16_t *got = calloc(ELEMS, 2);
        fill(a, 11);
        memcpy(b, a, 2 * ELEMS);
        for (int k = 0; k < 50; k++)
                b[(k * 97) % ELEMS] ^= (uint16_t)(3 + k);
        memcpy(c, b, 2 * ELEMS);
        for (int k = 0; k < 30; k++)
                c[(k * 211) % ELEMS] ^= (uint16_t)(7 + k);
        loom_sync_pull_stats st;
        loom_sync_pub_stats ps;
        /* the first trainer publishes 6 and 7; the puller ends with 7 */
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        cr_assert_eq(loom_sync_pub_publish(p, 6, a, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sync_pub_publish(p, 7, b, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", loom_sync_pub_port(p), shards, 3, got,
                                    LOOM_SYNC_NO_VERSION, 7, 5, &st, &e),
                     0, "%s", e.msg);
        loom_sync_pub_free(p); /* the trainer dies */
        /* its successor resumes at 7 with the same bits */
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        uint16_t port = loom_sync_pub_port(p);
        cr_assert_eq(loom_sync_pub_publish(p, 7, b, &ps, &e), 0, "%s", e.msg);
        cr_assert_eq(ps.changed, ELEMS); /* its first version: no base to diff against */
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, 7, 7, 5, &st, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(st.version, 7);
        cr_assert_eq(st.base, 7);
        cr_assert_eq(st.changed, 0);
        cr_assert_eq(st.bytes, LOOM_SYNC_FRAME_HDR + 8 * 3); /* the manifest alone */
        cr_assert_eq(memcmp(got, b, 2 * ELEMS), 0);
        /* 8 is a delta against the resumed 7 */
        cr_assert_eq(loom_sync_pub_publish(p, 8, c, &ps, &e), 0, "%s", e.msg);
        cr_assert_eq(ps.changed, 30);
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, 7, 8, 5, &st, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(st.base, 7);
        cr_assert_eq(st.bytes, ps.delta_bytes);
        cr_assert_lt(ps.delta_bytes, ps.dense_bytes / 4);
        cr_assert_eq(memcmp(got, c, 2 * ELEMS), 0);
        loom_sync_pub_free(p);
        /* a successor that resumes at 8 with other bits (a diverged rerun) is refused by the
         * checksums, and the puller keeps what it had */
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        cr_assert_eq(loom_sync_pub_publish(p, 8, b, NULL, &e), 0, "%s", e.msg);
        int rc = loom_sync_pull(NULL, "127.0.0.1", loom_sync_pub_port(p), shards, 3, got, 8, 8, 5,
                                &st, &e);
        cr_assert_eq(rc, LOOM_ECORRUPT, "%d %s", rc, e.msg);
        cr_assert_str_eq(e.field, "checksum");
        cr_assert_eq(memcmp(got, c, 2 * ELEMS), 0);
        loom_sync_pub_free(p);
        free(a);
        free(b);
        free(c);
        free(got);
}

Test(sync_pubsub, bad_arguments)
{
        loom_err e;
        loom_sync_pub *p;
        const uint64_t empty[1] = {0};
        cr_assert_eq(loom_sync_pub_new(NULL, empty, 1, 512, "127.0.0.1", 0, &p, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "shards");
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 0, "127.0.0.1", 0, &p, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "bucket_elems");
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "localhost", 0, &p, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "ip");
        loom_sync_pub_free(NULL);
}

Test(sync_pubsub, probe_reports_latest_without_weights)
{
        loom_err e;
        loom_sync_pub *p;
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        uint16_t port = loom_sync_pub_port(p);
        uint64_t v = 99;
        /* nothing published yet: the probe times out and says so */
        cr_assert_eq(loom_sync_pull_latest(NULL, "127.0.0.1", port, shards, 3, 0, 0.3, &v, &e),
                     LOOM_ETIMEDOUT);
        cr_assert_eq(v, 99);
        uint16_t *a = malloc(2 * ELEMS), *got = calloc(ELEMS, 2);
        fill(a, 7);
        for (uint64_t ver = 1; ver <= 3; ver++) {
                a[ver * 11] ^= 1;
                cr_assert_eq(loom_sync_pub_publish(p, ver, a, NULL, &e), 0, "%s", e.msg);
        }
        cr_assert_eq(loom_sync_pull_latest(NULL, "127.0.0.1", port, shards, 3, 0, 5, &v, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(v, 3);
        /* waits for a newer one */
        cr_assert_eq(loom_sync_pull_latest(NULL, "127.0.0.1", port, shards, 3, 4, 0.3, &v, &e),
                     LOOM_ETIMEDOUT);
        cr_assert_eq(v, 3);
        /* the probe moved nothing: a pull from scratch is still a dense copy of version 3 */
        loom_sync_pull_stats st;
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION,
                                    0, 5, &st, &e),
                     0, "%s", e.msg);
        cr_assert_eq(st.version, 3);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        /* a shape the publisher does not have is refused by name */
        const uint64_t other[2] = {1000, 5037};
        cr_assert_eq(loom_sync_pull_latest(NULL, "127.0.0.1", port, other, 2, 0, 5, &v, &e),
                     LOOM_EPROTO);
        cr_assert(strstr(e.msg, "shape mismatch"), "%s", e.msg);
        loom_sync_pub_free(p);
        free(a);
        free(got);
}

/* Model ids: a puller that names one is served only by a publisher of that id; a publisher of
 * another id (say another job's trainer that took over a dead trainer's port) or of none is
 * refused with ENOENT on field "model", and the puller's weights stay as they were. A puller
 * that names none takes any publisher of the same shape. */
Test(sync_pubsub, model_id_refuses_another_jobs_publisher)
{
        loom_err e;
        loom_sync_pub *p, *anon;
        cr_assert_eq(loom_sync_pub_new("job-17", shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &anon, &e), 0, "%s",
                     e.msg);
        uint16_t *a = malloc(2 * ELEMS), *got = malloc(2 * ELEMS), *keep = malloc(2 * ELEMS);
        fill(a, 5);
        fill(got, 6);
        memcpy(keep, got, 2 * ELEMS);
        cr_assert_eq(loom_sync_pub_publish(p, 1, a, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_sync_pub_publish(anon, 1, a, NULL, &e), 0, "%s", e.msg);
        uint16_t port = loom_sync_pub_port(p), aport = loom_sync_pub_port(anon);
        int rc = loom_sync_pull("job-18", "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION,
                                0, 5, NULL, &e);
        cr_assert_eq(rc, LOOM_ENOENT, "%d %s", rc, e.msg);
        cr_assert_str_eq(e.field, "model");
        cr_assert(strstr(e.msg, "'job-18'") && strstr(e.msg, "'job-17'"), "%s", e.msg);
        cr_assert_eq(memcmp(got, keep, 2 * ELEMS), 0);
        uint64_t v = 0;
        cr_assert_eq(loom_sync_pull_latest("job-18", "127.0.0.1", port, shards, 3, 0, 5, &v, &e),
                     LOOM_ENOENT);
        /* a publisher with no id cannot prove it serves job-17 */
        rc = loom_sync_pull("job-17", "127.0.0.1", aport, shards, 3, got, LOOM_SYNC_NO_VERSION, 0,
                            5, NULL, &e);
        cr_assert_eq(rc, LOOM_ENOENT, "%d %s", rc, e.msg);
        cr_assert(strstr(e.msg, "no model id"), "%s", e.msg);
        cr_assert_eq(memcmp(got, keep, 2 * ELEMS), 0);
        /* the right id, and no id at all, are served */
        cr_assert_eq(loom_sync_pull("job-17", "127.0.0.1", port, shards, 3, got,
                                    LOOM_SYNC_NO_VERSION, 0, 5, NULL, &e),
                     0, "%s", e.msg);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        memcpy(got, keep, 2 * ELEMS);
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION,
                                    0, 5, NULL, &e),
                     0, "%s", e.msg);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        /* bad ids are refused up front, by name */
        char longid[200];
        memset(longid, 'x', sizeof longid - 1);
        longid[sizeof longid - 1] = 0;
        cr_assert_eq(loom_sync_pull(longid, "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION,
                                    0, 5, NULL, &e),
                     LOOM_EINVAL);
        cr_assert_str_eq(e.field, "model");
        loom_sync_pub *bad;
        cr_assert_eq(loom_sync_pub_new("a\nb", shards, 3, 512, "127.0.0.1", 0, &bad, &e),
                     LOOM_EINVAL);
        cr_assert_str_eq(e.field, "model");
        loom_sync_pub_free(p);
        loom_sync_pub_free(anon);
        free(a);
        free(got);
        free(keep);
}

/* A puller a few versions behind gets the chain of deltas since its version in one pull: bit
 * exact, its base is the version it held, an element changed in several versions counts once,
 * and it moves far less than a dense copy. A version the publisher never had gets dense. */
Test(sync_pubsub, delta_chain_for_a_puller_behind)
{
        loom_err e;
        loom_sync_pub *p;
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        uint16_t port = loom_sync_pub_port(p);
        uint16_t *a = malloc(2 * ELEMS), *v1 = malloc(2 * ELEMS), *got = calloc(ELEMS, 2);
        fill(a, 21);
        loom_sync_pub_stats ps;
        cr_assert_eq(loom_sync_pub_publish(p, 1, a, &ps, &e), 0, "%s", e.msg);
        memcpy(v1, a, 2 * ELEMS);
        loom_sync_pull_stats st;
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION,
                                    1, 5, &st, &e),
                     0, "%s", e.msg);
        uint64_t delta_sum = 0;
        for (uint64_t ver = 2; ver <= 4; ver++) { /* 30 changes each; element 7 in every one */
                a[7] ^= (uint16_t)ver;
                for (int k = 1; k < 30; k++)
                        a[(k * 173 + ver * 31) % ELEMS] ^= (uint16_t)(k + ver);
                cr_assert_eq(loom_sync_pub_publish(p, ver, a, &ps, &e), 0, "%s", e.msg);
                delta_sum += ps.delta_bytes;
        }
        uint64_t changed = 0;
        for (size_t i = 0; i < ELEMS; i++)
                changed += v1[i] != a[i];
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, 1, 4, 5, &st, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        cr_assert_eq(st.version, 4);
        cr_assert_eq(st.base, 1);
        cr_assert_eq(st.changed, changed);
        cr_assert_lt(st.bytes, delta_sum); /* one manifest, not three */
        cr_assert_lt(st.bytes, ps.dense_bytes / 4);
        /* held version unknown to the publisher: dense */
        memcpy(got, v1, 2 * ELEMS);
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, 99, 4, 5, &st, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(st.base, LOOM_SYNC_NO_VERSION);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        loom_sync_pub_free(p);
        free(a);
        free(v1);
        free(got);
}

static int raw_connect(uint16_t port)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
        return fd;
}

/* Whether the peer closed fd within secs (EOF, or a refusal frame then EOF). */
static bool closed_within(int fd, double secs)
{
        char buf[512];
        for (;;) {
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (poll(&pf, 1, (int)(secs * 1000)) <= 0)
                        return false;
                ssize_t k = recv(fd, buf, sizeof buf, 0);
                if (k <= 0)
                        return true;
        }
}

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A crowd of connections that never send a request cannot pin the publisher's threads: over the
 * cap a puller is told "busy" at once, idle connections are closed after idle_s, and a pull for
 * a version that never comes is answered after wait_s instead of an hour. */
Test(sync_pubsub, connections_capped_idle_closed_waits_bounded)
{
        loom_err e;
        loom_sync_pub *p;
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        loom_sync_pub_limits l;
        loom_sync_pub_limits_default(&l);
        cr_assert_eq(l.max_conns, 256);
        l.max_conns = 2;
        l.idle_s = 0.5;
        l.wait_s = 0.3;
        cr_assert_eq(loom_sync_pub_set_limits(p, &l, &e), 0, "%s", e.msg);
        l.max_conns = 0;
        cr_assert_eq(loom_sync_pub_set_limits(p, &l, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "max_conns");
        uint16_t *a = malloc(2 * ELEMS), *got = calloc(ELEMS, 2), *zero = calloc(ELEMS, 2);
        fill(a, 9);
        cr_assert_eq(loom_sync_pub_publish(p, 1, a, NULL, &e), 0, "%s", e.msg);
        uint16_t port = loom_sync_pub_port(p);
        int idle[2] = {raw_connect(port), raw_connect(port)};
        usleep(100000); /* both accepted and counted */
        loom_sync_pull_stats st;
        double t0 = now_s();
        int rc = loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION, 1, 5,
                                &st, &e);
        cr_assert_eq(rc, LOOM_EIO, "over the cap: %d %s", rc, e.msg);
        cr_assert(strstr(e.msg, "busy"), "%s", e.msg);
        cr_assert_lt(now_s() - t0, 1.0);
        cr_assert_eq(memcmp(got, zero, 2 * ELEMS), 0);
        /* the idle ones are closed by the publisher, well before the old 10 s */
        for (int i = 0; i < 2; i++) {
                cr_assert(closed_within(idle[i], 3.0), "idle connection %d still open", i);
                close(idle[i]);
        }
        usleep(100000);
        cr_assert_eq(loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, LOOM_SYNC_NO_VERSION,
                                    1, 5, &st, &e),
                     0, "%s", e.msg);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        /* a version that never comes: answered after wait_s, though the puller would wait 30 s */
        t0 = now_s();
        rc = loom_sync_pull(NULL, "127.0.0.1", port, shards, 3, got, 1, 7, 30, &st, &e);
        cr_assert_eq(rc, LOOM_ETIMEDOUT, "%d %s", rc, e.msg);
        cr_assert(strstr(e.msg, "no version >= 7"), "%s", e.msg);
        cr_assert_lt(now_s() - t0, 5.0);
        cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0);
        loom_sync_pub_free(p);
        free(a);
        free(got);
        free(zero);
}

/* Limits and the key change while pulls are served: each connection works with the limits in
 * force when it started and a key set up once, never with a half-written one. This loop, run
 * under ThreadSanitizer (a plain main: Criterion does not start under it), reported two data
 * races before loom__pub_serve took its limits under the lock (the reads of idle_s and
 * wait_s against loom_sync_pub_set_limits) and none since. */
typedef struct churn {
        loom_sync_pub *p;
        const uint8_t *key;
        _Atomic int stop, rounds;
} churn;

static void *churn_main(void *arg)
{
        churn *c = arg;
        loom_err e;
        for (int i = 0; !c->stop; i++, c->rounds++) {
                loom_sync_pub_limits l;
                loom_sync_pub_limits_default(&l);
                l.idle_s = i % 2 ? 5 : 6;
                l.wait_s = i % 2 ? 30 : 40;
                loom_sync_pub_set_limits(c->p, &l, &e);
                loom_sync_pub_set_key(c->p, c->key, &e);
                usleep(200);
        }
        return NULL;
}

Test(sync_pubsub, limits_and_key_changed_while_serving)
{
        static const uint8_t key[32] = {7, 1, 7, 1, 7, 1, 7};
        loom_err e;
        loom_sync_pub *p;
        cr_assert_eq(loom_sync_pub_new(NULL, shards, 3, 512, "127.0.0.1", 0, &p, &e), 0, "%s",
                     e.msg);
        cr_assert_eq(loom_sync_pub_set_key(p, key, &e), 0, "%s", e.msg);
        uint16_t *a = malloc(2 * ELEMS), *got = calloc(ELEMS, 2);
        fill(a, 11);
        cr_assert_eq(loom_sync_pub_publish(p, 1, a, NULL, &e), 0, "%s", e.msg);
        churn c = {.p = p, .key = key};
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, churn_main, &c), 0);
        uint16_t port = loom_sync_pub_port(p);
        for (int i = 0; i < 20; i++) {
                memset(got, 0, 2 * ELEMS);
                cr_assert_eq(loom_sync_pull_keyed(key, NULL, "127.0.0.1", port, shards, 3, got,
                                                  LOOM_SYNC_NO_VERSION, 1, 5, NULL, &e),
                             0, "pull %d: %s", i, e.msg);
                cr_assert_eq(memcmp(got, a, 2 * ELEMS), 0, "pull %d", i);
        }
        c.stop = 1;
        pthread_join(t, NULL);
        cr_assert_gt(c.rounds, 0);
        loom_sync_pub_free(p);
        free(a);
        free(got);
}
