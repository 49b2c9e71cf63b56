/*
 * auth.c - authenticated weight pulls: every frame a publisher sends carries a tag derived
 * from the job's sync key (the `sync_key` loomd hands out with the job's worker token), so
 * only a process that holds the key can feed a puller weights.
 *
 * Per connection the puller picks a random 16-byte nonce and sends it after its request with
 * HMAC-SHA-256(key, "loom sync request" || request || nonce); the publisher refuses a request
 * whose tag is not its key's (a process without the key learns nothing but the refusal). Both
 * sides then derive the connection's frame key, HMAC-SHA-256(key, "loom sync session" ||
 * nonce) cut to 16 bytes, and every frame the publisher sends is followed by its UMAC-64
 * (RFC 4418) under that key with nonce n = 0, 1, ... counting the frames of the connection,
 * taken over the payload then the header (so a dense bucket is tagged while it is copied, and
 * a received one while it is read, 64 KiB at a time). The tag covers everything the frame's
 * CRC32C covers, so keyed frames carry payload_crc 0 and nobody computes or checks the CRC:
 * that, not a faster MAC, is what keeps keyed pulls as cheap as plain ones.
 * A frame recorded from another pull (another connection key), re-ordered, dropped or
 * repeated within this one (another n), or tagged under another job's key does not verify,
 * and the puller stops before it applies anything (pull.c applies only after every check).
 * UMAC-64 rather than HMAC for the frames: it runs at about 16 GB/s a core here against 1.8
 * for HMAC-SHA-256 (UMAC-128: 11), which is what keeps its cost small next to the encoder's
 * (loom sync codec prints both); a forgery passes with probability about 2^-60 per frame, and
 * the first failure ends the pull. What this does not give: secrecy (frames travel in clear) and
 * protection from a holder of the key. HMAC, SHA-256 and UMAC are nettle's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <nettle/memops.h>

#include "internal.h"

static const char session_label[] = "loom sync session";
static const char req_label[] = "loom sync request";

int loom__mac_init(loom__mac *m, const uint8_t *key, loom_err *e)
{
        memset(m, 0, sizeof *m);
        if (!key)
                return 0;
        m->on = 1;
        hmac_sha256_set_key(&m->base, LOOM_SYNC_KEY_LEN, key);
        return 0;
}

int loom__mac_nonce(loom__mac *m, loom_err *e)
{
        size_t got = 0;
        while (got < sizeof m->nonce) {
                ssize_t r = getrandom(m->nonce + got, sizeof m->nonce - got, 0);
                if (r < 0 && errno != EINTR)
                        return loom_err_set(e, LOOM_EIO, "nonce", "getrandom: %s", strerror(errno));
                got += r > 0 ? (size_t)r : 0;
        }
        return 0;
}

void loom__mac_request(const loom__mac *m, const uint8_t *req, size_t len,
                       uint8_t tag[LOOM__REQ_TAG_LEN])
{
        struct hmac_sha256_ctx c = m->base; /* the keyed state, copied: no re-keying per use */
        hmac_sha256_update(&c, sizeof req_label, (const uint8_t *)req_label);
        hmac_sha256_update(&c, len, req);
        hmac_sha256_update(&c, sizeof m->nonce, m->nonce);
        hmac_sha256_digest(&c, LOOM__REQ_TAG_LEN, tag);
}

void loom__mac_session(loom__mac *m)
{
        struct hmac_sha256_ctx c = m->base;
        uint8_t k[SHA256_DIGEST_SIZE];
        hmac_sha256_update(&c, sizeof session_label, (const uint8_t *)session_label);
        hmac_sha256_update(&c, sizeof m->nonce, m->nonce);
        hmac_sha256_digest(&c, sizeof k, k);
        umac64_set_key(&m->frame, k); /* the first 16 bytes: an AES-128 key */
        m->seq = 0;
}

void loom__mac_begin(loom__mac *m)
{
        uint8_t n[8];
        loom__put64(n, m->seq++);
        umac64_set_nonce(&m->frame, sizeof n, n);
}

void loom__mac_update(loom__mac *m, const void *p, size_t len)
{
        if (len)
                umac64_update(&m->frame, len, p);
}

void loom__mac_end(loom__mac *m, const uint8_t hdr[LOOM_SYNC_FRAME_HDR], uint8_t tag[LOOM__MAC_LEN])
{
        /* the header last: a sender can tag the payload while it encodes it, before the
         * header's fields are final */
        umac64_update(&m->frame, LOOM_SYNC_FRAME_HDR, hdr);
        umac64_digest(&m->frame, LOOM__MAC_LEN, tag);
}

int loom__mac_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
        return memeql_sec(a, b, n);
}

static int send_tagged(int fd, loom__mac *m, const loom_sync_frame *f, const void *payload,
                       uint64_t *bytes)
{
        uint8_t hdr[LOOM_SYNC_FRAME_HDR], tag[LOOM__MAC_LEN];
        loom_sync_frame_pack(f, hdr);
        loom__mac_end(m, hdr, tag);
        int rc = loom__write_all(fd, hdr, sizeof hdr);
        if (!rc && f->payload_len)
                rc = loom__write_all(fd, payload, (size_t)f->payload_len);
        if (!rc)
                rc = loom__write_all(fd, tag, sizeof tag);
        if (!rc && bytes)
                *bytes += sizeof hdr + f->payload_len + sizeof tag;
        return rc;
}

int loom__frame_send_mac(int fd, loom__mac *m, const loom_sync_frame *f, const void *payload,
                         uint64_t *bytes)
{
        if (!m || !m->on)
                return loom__frame_send(fd, f, payload, bytes);
        loom__mac_begin(m);
        loom__mac_update(m, payload, (size_t)f->payload_len);
        return send_tagged(fd, m, f, payload, bytes);
}

int loom__frame_send_tagged(int fd, loom__mac *m, const loom_sync_frame *f, const void *payload,
                            uint64_t *bytes)
{
        return send_tagged(fd, m, f, payload, bytes);
}

int loom__frames_send_mac(int fd, loom__mac *m, const uint8_t *frames, size_t len)
{
        if (!m || !m->on)
                return loom__write_all(fd, frames, len);
        for (size_t off = 0; off < len;) {
                loom_sync_frame f;
                if (len - off < LOOM_SYNC_FRAME_HDR ||
                    loom_sync_frame_unpack(frames + off, &f, NULL) ||
                    f.payload_len > len - off - LOOM_SYNC_FRAME_HDR)
                        return LOOM_ECORRUPT; /* our own packed frames: cannot happen */
                int rc = loom__frame_send_mac(fd, m, &f, frames + off + LOOM_SYNC_FRAME_HDR, NULL);
                if (rc)
                        return rc;
                off += LOOM_SYNC_FRAME_HDR + (size_t)f.payload_len;
        }
        return 0;
}

/* Read the tag that follows a frame and check it against the frame's (begun and updated with
 * the payload; hdr ends it). */
static int read_tag(int fd, loom__mac *m, const uint8_t hdr[LOOM_SYNC_FRAME_HDR], loom_err *e)
{
        uint8_t tag[LOOM__MAC_LEN], want[LOOM__MAC_LEN];
        if (loom__read_all(fd, tag, sizeof tag))
                return loom_err_set(e, LOOM_EIO, "frame", "connection lost before a frame's tag");
        loom__mac_end(m, hdr, want);
        if (!loom__mac_equal(tag, want, sizeof tag))
                return loom_err_set(e, LOOM_ECORRUPT, "frame.tag",
                                    "frame %llu is not authenticated by the job's sync key "
                                    "(forged, corrupted, replayed or another job's)",
                                    (unsigned long long)(m->seq - 1));
        return 0;
}

int loom__frame_recv_mac(int fd, loom__mac *m, loom_sync_frame *f, uint8_t **payload,
                         uint64_t max_payload, uint64_t *bytes, loom_err *e)
{
        if (!m || !m->on)
                return loom__frame_recv(fd, f, payload, max_payload, bytes, e);
        /* As loom__frame_recv, but the payload is tagged a block at a time as it arrives,
         * while the block is still in cache: one pass over the bytes. */
        uint8_t hdr[LOOM_SYNC_FRAME_HDR];
        *payload = NULL;
        int rc = loom__frame_recv_hdr(fd, hdr, f, max_payload, e);
        if (rc)
                return rc;
        size_t len = (size_t)f->payload_len;
        if (len && !(*payload = malloc(len)))
                return loom_err_set(e, LOOM_ENOMEM, "frame", "out of memory");
        loom__mac_begin(m);
        for (size_t off = 0; off < len && !rc; off += LOOM__MAC_BLOCK) {
                size_t k = len - off < LOOM__MAC_BLOCK ? len - off : LOOM__MAC_BLOCK;
                if (loom__read_all(fd, *payload + off, k))
                        rc = loom_err_set(e, LOOM_EIO, "frame", "connection lost mid-frame");
                else
                        loom__mac_update(m, *payload + off, k);
        }
        if (!rc)
                rc = read_tag(fd, m, hdr, e);
        if (rc) {
                free(*payload);
                *payload = NULL;
        } else if (bytes)
                *bytes += sizeof hdr + len + LOOM__MAC_LEN;
        return rc;
}

int loom__frame_check_mac(int fd, loom__mac *m, const loom_sync_frame *f, uint8_t **payload,
                          uint64_t *bytes, loom_err *e)
{
        int rc = 0;
        if (!m || !m->on)
                return 0;
        uint8_t hdr[LOOM_SYNC_FRAME_HDR];
        loom_sync_frame_pack(f, hdr);
        loom__mac_begin(m);
        loom__mac_update(m, *payload, (size_t)f->payload_len);
        rc = read_tag(fd, m, hdr, e);
        if (!rc && bytes)
                *bytes += LOOM__MAC_LEN;
        if (rc) {
                free(*payload);
                *payload = NULL;
        }
        return rc;
}

/* ---- connections between the ranks of a transfer (loom_sync_run) ------------------------ */

static const char link_label[] = "loom sync link";
static const char confirm_label[] = "loom sync link confirm";

/* What the opening side sends once the connection's key is agreed, to prove it holds the sync
 * key: the accepting side serves nothing to a peer that cannot (a relay hands each stream to
 * a fixed number of pulls, so an unauthenticated pull would take a real peer's turn). */
static void link_confirm(const loom__mac *m, uint8_t out[LOOM__REQ_TAG_LEN])
{
        struct hmac_sha256_ctx c = m->base;
        hmac_sha256_update(&c, sizeof confirm_label, (const uint8_t *)confirm_label);
        hmac_sha256_update(&c, sizeof m->nonce, m->nonce); /* the connection's, from both */
        hmac_sha256_digest(&c, LOOM__REQ_TAG_LEN, out);
}

/* Both nonces and the hello into the connection's frame key. */
static void link_session(loom__mac *m, const loom__hello *h, const uint8_t *mine,
                         const uint8_t *theirs, int opener)
{
        uint8_t hb[LOOM__HELLO_LEN], d[SHA256_DIGEST_SIZE];
        struct hmac_sha256_ctx c = m->base;
        loom__hello_pack(h, hb);
        hmac_sha256_update(&c, sizeof link_label, (const uint8_t *)link_label);
        hmac_sha256_update(&c, sizeof hb, hb);
        hmac_sha256_update(&c, 16, opener ? mine : theirs);
        hmac_sha256_update(&c, 16, opener ? theirs : mine);
        hmac_sha256_digest(&c, sizeof d, d);
        memcpy(m->nonce, d, sizeof m->nonce);
        loom__mac_session(m);
}

int loom__link_open(int fd, loom__hello *h, const uint8_t *key, loom__mac *m, loom_err *e)
{
        uint8_t theirs[16];
        int rc = loom__mac_init(m, key, e);
        if (!rc && key)
                rc = loom__mac_nonce(m, e);
        if (rc)
                return rc;
        h->flags = key ? LOOM__HELLO_KEYED : 0;
        uint8_t mine[sizeof m->nonce];
        memcpy(mine, m->nonce, sizeof mine);
        if (loom__hello_send(fd, h) || (key && loom__write_all(fd, mine, sizeof mine)))
                return loom_err_set(e, LOOM_EIO, "hello", "send failed");
        if (!key)
                return 0;
        if (loom__read_all(fd, theirs, sizeof theirs))
                return loom_err_set(e, LOOM_EPROTO, "key",
                                    "the peer refused an authenticated connection (it holds no "
                                    "sync key)");
        link_session(m, h, mine, theirs, 1);
        uint8_t proof[LOOM__REQ_TAG_LEN];
        link_confirm(m, proof);
        if (loom__write_all(fd, proof, sizeof proof))
                return loom_err_set(e, LOOM_EIO, "hello", "send failed");
        return 0;
}

int loom__link_accept(int fd, loom__hello *h, const uint8_t *key, loom__mac *m, loom_err *e)
{
        uint8_t theirs[16];
        int rc = loom__hello_recv(fd, h, e);
        if (!rc)
                rc = loom__mac_init(m, key, e);
        if (rc)
                return rc;
        int keyed = (h->flags & LOOM__HELLO_KEYED) != 0;
        if (keyed && !key)
                return loom_err_set(e, LOOM_EPROTO, "key",
                                    "a peer sent authenticated frames but this rank holds no sync "
                                    "key");
        if (!keyed && key)
                return loom_err_set(e, LOOM_EPROTO, "key",
                                    "a peer sent unauthenticated frames but this rank holds the "
                                    "job's sync key: refused");
        if (!key)
                return 0;
        if (loom__read_all(fd, theirs, sizeof theirs))
                return loom_err_set(e, LOOM_EIO, "hello", "connection closed before the nonce");
        if ((rc = loom__mac_nonce(m, e)))
                return rc;
        uint8_t mine[sizeof m->nonce];
        memcpy(mine, m->nonce, sizeof mine);
        if (loom__write_all(fd, mine, sizeof mine))
                return loom_err_set(e, LOOM_EIO, "hello", "send failed");
        link_session(m, h, mine, theirs, 0);
        uint8_t proof[LOOM__REQ_TAG_LEN], want[LOOM__REQ_TAG_LEN];
        if (loom__read_all(fd, proof, sizeof proof))
                return loom_err_set(e, LOOM_EIO, "hello", "connection closed before the key proof");
        link_confirm(m, want);
        if (!loom__mac_equal(proof, want, sizeof want))
                return loom_err_set(e, LOOM_ECORRUPT, "key",
                                    "a peer does not hold the job's sync key: refused before "
                                    "anything was served or stored");
        return 0;
}
