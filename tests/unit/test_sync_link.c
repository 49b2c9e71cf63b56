/*
 * test_sync_link.c - keyed connections between the ranks of a transfer (loom__link_open /
 * loom__link_accept in src/sync/auth.c) on socket pairs: with the same key a frame passes each
 * way; an opener under another job's key, or with none, fails its proof of the key and the
 * relay reads nothing further; a keyed and an unkeyed side refuse each other; and what one
 * side sent on a recorded connection, replayed verbatim to a fresh connection, is refused
 * whichever side it is replayed to (each side's own nonce is in the key and in the proof).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static const uint8_t key_a[LOOM_SYNC_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
static const uint8_t key_b[LOOM_SYNC_KEY_LEN] = {99};

static void pair(int sv[2])
{
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

/* Everything the peer wrote so far (it wrote before we read: no waiting). */
static size_t drain(int fd, uint8_t *buf, size_t cap)
{
        size_t n = 0;
        ssize_t k;
        while (n < cap && (k = recv(fd, buf + n, cap - n, MSG_DONTWAIT)) > 0)
                n += (size_t)k;
        return n;
}

static loom_sync_frame bucket(uint16_t vals[64], uint8_t *payload)
{
        loom_sync_frame f = {0};
        for (int i = 0; i < 64; i++)
                vals[i] = (uint16_t)(i * 977);
        cr_assert_eq(loom_sync_encode(NULL, vals, 64, LOOM_SYNC_ENC_DENSE, payload, &f, NULL), 0);
        f.stream = 3, f.seq = 0, f.version = 1;
        return f;
}

typedef struct side {
        int fd;
        const uint8_t *key;
        int rc_link, rc_frame;
        loom_err e;
} side;

/* A relay: accept, take one frame, acknowledge it. */
static void *acceptor(void *arg)
{
        side *s = arg;
        loom__hello h;
        loom__mac m;
        loom_sync_frame f;
        uint8_t *payload = NULL;
        s->rc_link = loom__link_accept(s->fd, &h, s->key, &m, &s->e);
        if (!s->rc_link) {
                s->rc_frame = loom__frame_recv_mac(s->fd, &m, &f, &payload, 1 << 20, NULL, &s->e);
                loom_sync_frame ack = {.type = LOOM_SYNC_FRAME_END, .stream = h.stream};
                if (!s->rc_frame)
                        loom__frame_send_mac(s->fd, &m, &ack, NULL, NULL);
        }
        free(payload);
        shutdown(s->fd, SHUT_RDWR);
        return NULL;
}

/* One push from an opener with key `ko` to an acceptor with key `ka`. */
static void push(const uint8_t *ko, const uint8_t *ka, side *acc, int *rc_open, int *rc_ack)
{
        int sv[2];
        pthread_t th;
        uint8_t payload[256], *ackp = NULL;
        uint16_t vals[64];
        loom__mac m;
        loom_err e = {0};
        pair(sv);
        *acc = (side){.fd = sv[1], .key = ka};
        cr_assert_eq(pthread_create(&th, NULL, acceptor, acc), 0);
        loom__hello h = {LOOM__HELLO_PUSH, 3, 1, 0};
        loom_sync_frame f = bucket(vals, payload), ack;
        *rc_open = loom__link_open(sv[0], &h, ko, &m, &e);
        *rc_ack = -100;
        if (!*rc_open && !loom__frame_send_mac(sv[0], &m, &f, payload, NULL))
                *rc_ack = loom__frame_recv_mac(sv[0], &m, &ack, &ackp, 0, NULL, &e);
        pthread_join(th, NULL);
        free(ackp);
        close(sv[0]), close(sv[1]);
}

Test(sync_link, the_same_key_passes_both_ways)
{
        side acc;
        int ro, ra;
        push(key_a, key_a, &acc, &ro, &ra);
        cr_assert_eq(ro, 0);
        cr_assert_eq(acc.rc_link, 0);
        cr_assert_eq(acc.rc_frame, 0, "%s: %s", acc.e.field, acc.e.msg);
        cr_assert_eq(ra, 0);              /* the acknowledgement's tag checked too */
        push(NULL, NULL, &acc, &ro, &ra); /* unkeyed as before */
        cr_assert_eq(acc.rc_frame, 0);
        cr_assert_eq(ra, 0);
}

Test(sync_link, another_jobs_key_is_refused_before_any_frame)
{
        side acc;
        int ro, ra;
        push(key_a, key_b, &acc, &ro, &ra);
        /* the opener's proof of the key fails: the relay reads no frame at all */
        cr_assert_eq(acc.rc_link, LOOM_ECORRUPT);
        cr_assert_str_eq(acc.e.field, "key");
        cr_assert_neq(ra, 0); /* no acknowledgement */
}

Test(sync_link, an_opener_without_the_key_gets_nothing)
{
        /* a peer that sends a keyed hello and a nonce but cannot prove the key (it holds
         * none, or guesses): refused before the relay serves or stores anything */
        int sv[2];
        uint8_t opener[LOOM__HELLO_LEN + 16 + LOOM__REQ_TAG_LEN] = {0};
        loom__hello h = {LOOM__HELLO_PULL, 3, 1, LOOM__HELLO_KEYED}, got;
        loom__mac m;
        loom_err e = {0};
        pair(sv);
        loom__hello_pack(&h, opener);
        memset(opener + LOOM__HELLO_LEN, 5, sizeof opener - LOOM__HELLO_LEN);
        cr_assert_eq(loom__write_all(sv[0], opener, sizeof opener), 0);
        cr_assert_eq(loom__link_accept(sv[1], &got, key_a, &m, &e), LOOM_ECORRUPT);
        cr_assert_str_eq(e.field, "key");
        close(sv[0]), close(sv[1]);
}

Test(sync_link, keyed_and_unkeyed_refuse_each_other)
{
        side acc;
        int ro, ra;
        push(key_a, NULL, &acc, &ro, &ra);
        cr_assert_eq(acc.rc_link, LOOM_EPROTO);
        cr_assert_str_eq(acc.e.field, "key");
        cr_assert_neq(ro, 0); /* the opener hears no nonce */
        push(NULL, key_a, &acc, &ro, &ra);
        cr_assert_eq(acc.rc_link, LOOM_EPROTO);
        cr_assert_str_eq(acc.e.field, "key");
        cr_assert_neq(ra, 0);
}

Test(sync_link, a_push_replayed_to_a_fresh_relay_is_refused)
{
        int a[2], b[2];
        uint8_t raw[4096], payload[256], *p = NULL;
        uint16_t vals[64];
        uint8_t relay_nonce[16] = {7, 7, 7};
        loom__mac m;
        loom_err e = {0};
        loom__hello h = {LOOM__HELLO_PUSH, 3, 1, 0}, got;
        loom_sync_frame f = bucket(vals, payload), g;
        pair(a), pair(b);
        /* record a keyed push: the relay's nonce written ahead, the pusher's bytes kept */
        cr_assert_eq(loom__write_all(a[1], relay_nonce, sizeof relay_nonce), 0);
        cr_assert_eq(loom__link_open(a[0], &h, key_a, &m, &e), 0);
        cr_assert_eq(loom__frame_send_mac(a[0], &m, &f, payload, NULL), 0);
        size_t n = drain(a[1], raw, sizeof raw);
        cr_assert_eq(n, LOOM__HELLO_LEN + 16 + LOOM__REQ_TAG_LEN + LOOM_SYNC_FRAME_HDR +
                            f.payload_len + 8);
        /* replay it, byte for byte, to a relay holding the right key: its proof of the key
         * was for the other relay's nonce, so nothing after it is read */
        cr_assert_eq(loom__write_all(b[0], raw, n), 0);
        cr_assert_eq(loom__link_accept(b[1], &got, key_a, &m, &e), LOOM_ECORRUPT);
        cr_assert_str_eq(e.field, "key");
        (void)g, (void)p;
        close(a[0]), close(a[1]), close(b[0]), close(b[1]);
}

typedef struct relay_side {
        int fd;
        loom_sync_frame f;
        const uint8_t *payload;
        int rc;
} relay_side;

/* A relay answering a keyed pull with one frame. */
static void *reply_one(void *arg)
{
        relay_side *r = arg;
        loom__hello h;
        loom__mac m;
        loom_err e;
        r->rc = loom__link_accept(r->fd, &h, key_a, &m, &e);
        if (!r->rc)
                r->rc = loom__frame_send_mac(r->fd, &m, &r->f, r->payload, NULL);
        return NULL;
}

/* Between a puller (p) and a relay (r): pass each message on, keeping what the relay said. */
typedef struct tap_args {
        int p, r;
        size_t frame_len;
        uint8_t said[4096];
        size_t n;
} tap_args;

static int pass(int from, int to, size_t len, uint8_t *keep)
{
        uint8_t buf[4096];
        if (loom__read_all(from, buf, len) || loom__write_all(to, buf, len))
                return -1;
        if (keep)
                memcpy(keep, buf, len);
        return 0;
}

static void *tap(void *arg)
{
        tap_args *t = arg;
        if (!pass(t->p, t->r, LOOM__HELLO_LEN + 16, NULL) && /* hello, puller's nonce */
            !pass(t->r, t->p, 16, t->said) &&                /* the relay's nonce */
            !pass(t->p, t->r, LOOM__REQ_TAG_LEN, NULL) &&    /* the puller's proof */
            !pass(t->r, t->p, t->frame_len, t->said + 16))   /* the relay's frame */
                t->n = 16 + t->frame_len;
        return NULL;
}

Test(sync_link, a_relays_reply_replayed_to_a_fresh_puller_is_refused)
{
        int o[2], r[2], b[2];
        uint8_t payload[256], *p = NULL;
        uint16_t vals[64];
        loom__mac m;
        loom_err e = {0};
        loom__hello h = {LOOM__HELLO_PULL, 3, 1, 0};
        loom_sync_frame f = bucket(vals, payload), g;
        pair(o), pair(r), pair(b);
        /* record a relay's keyed reply to a real pull: its nonce and its frame */
        relay_side rs = {.fd = r[1], .f = f, .payload = payload};
        tap_args t = {.p = o[1], .r = r[0], .frame_len = LOOM_SYNC_FRAME_HDR + f.payload_len + 8};
        pthread_t th, tp;
        cr_assert_eq(pthread_create(&th, NULL, reply_one, &rs), 0);
        cr_assert_eq(pthread_create(&tp, NULL, tap, &t), 0);
        cr_assert_eq(loom__link_open(o[0], &h, key_a, &m, &e), 0);
        cr_assert_eq(loom__frame_recv_mac(o[0], &m, &g, &p, 1 << 20, NULL, &e), 0, "%s", e.msg);
        free(p);
        p = NULL;
        pthread_join(th, NULL);
        pthread_join(tp, NULL);
        cr_assert_eq(rs.rc, 0);
        cr_assert_eq(t.n, 16 + LOOM_SYNC_FRAME_HDR + f.payload_len + 8);
        /* replay it to a new pull of the same stream by a puller holding the right key */
        cr_assert_eq(loom__write_all(b[1], t.said, t.n), 0);
        h.flags = 0;
        cr_assert_eq(loom__link_open(b[0], &h, key_a, &m, &e), 0);
        cr_assert_eq(loom__frame_recv_mac(b[0], &m, &g, &p, 1 << 20, NULL, &e), LOOM_ECORRUPT);
        cr_assert_str_eq(e.field, "frame.tag");
        cr_assert_null(p);
        close(o[0]), close(o[1]), close(r[0]), close(r[1]), close(b[0]), close(b[1]);
}

Test(sync_link, key_text_and_key_files)
{
        uint8_t k[LOOM_SYNC_KEY_LEN], want[LOOM_SYNC_KEY_LEN] = {0};
        loom_err e = {0};
        char hex[2 * LOOM_SYNC_KEY_LEN + 2];
        for (int i = 0; i < LOOM_SYNC_KEY_LEN; i++) {
                want[i] = (uint8_t)(i * 37 + 1);
                snprintf(hex + 2 * i, 3, "%02X", want[i]);
        }
        cr_assert_eq(loom_sync_key_parse(hex, "LOOM_SYNC_KEY", k, &e), 0);
        cr_assert_eq(memcmp(k, want, sizeof k), 0);
        cr_assert_eq(loom_sync_key_parse("abc", "LOOM_SYNC_KEY", k, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "LOOM_SYNC_KEY");
        char path[] = "/tmp/loom-key-XXXXXX";
        int fd = mkstemp(path); /* mode 0600 */
        cr_assert_geq(fd, 0);
        strcat(hex, "\n");
        cr_assert_eq(write(fd, hex, strlen(hex)), (ssize_t)strlen(hex));
        memset(k, 0, sizeof k);
        cr_assert_eq(loom_sync_key_load(path, "--key-file", k, &e), 0);
        cr_assert_eq(memcmp(k, want, sizeof k), 0);
        cr_assert_eq(fchmod(fd, 0640), 0);
        memset(k, 0, sizeof k);
        cr_assert_eq(loom_sync_key_load(path, "--key-file", k, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "--key-file");
        cr_assert(strstr(e.msg, "0640"), "%s", e.msg);
        cr_assert_eq(k[0], 0); /* untouched on refusal */
        close(fd);
        unlink(path);
}
