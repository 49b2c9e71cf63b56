/*
 * internal.h - declarations shared by the files of src/sync and nothing else: sockets and
 * frame I/O, the walk from stream positions to tensor elements, the relay, the two rank roles,
 * and the namespace link.
 */
#ifndef LOOM_SYNC_INTERNAL_H
#define LOOM_SYNC_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "loom/sync.h"

/* ---- clocks ---------------------------------------------------------------------------- */

static inline double loom__now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double loom__cpu(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- fixed-width fields in frames and deltas (host byte order) ------------------------- */

static inline void loom__put32(uint8_t *p, uint32_t v)
{
        memcpy(p, &v, 4);
}

static inline void loom__put64(uint8_t *p, uint64_t v)
{
        memcpy(p, &v, 8);
}

static inline uint32_t loom__get32(const uint8_t *p)
{
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
}

static inline uint64_t loom__get64(const uint8_t *p)
{
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
}

/* ---- sockets --------------------------------------------------------------------------- */

/* The pull request of pubsub.c / pull.c (see pubsub.c for the layout): the first 40 bytes are
 * those of the request before model ids ("LSYM"), the model id's hash follows. */
#define LOOM__PULL_MAGIC UINT32_C(0x4E59534C)     /* "LSYN" */
#define LOOM__PULL_MAGIC_OLD UINT32_C(0x4D59534C) /* "LSYM": before model ids, refused */
#define LOOM__PULL_REQ_OLD_LEN 40
#define LOOM__PULL_REQ_LEN 48
/* An END frame refusing a pull says why in its payload and what kind in its stream field. */
enum {
        LOOM__REFUSED = 0,
        LOOM__REFUSED_MODEL = 1, /* another model is served here */
        LOOM__REFUSED_BUSY = 2,  /* the publisher is at its connection cap: retry later */
        LOOM__REFUSED_WAIT = 3,  /* no version >= want within the publisher's wait bound */
        LOOM__REFUSED_AUTH = 4,  /* the request's tag was refused (auth.c) */
};
/* Serve one pull on a connected socket (pubsub.c; the fuzz target calls it on a socketpair). */
void loom__pub_serve(loom_sync_pub *p, int fd);
/* Pull over a connected socket (pull.c), as loom_sync_pull does after its connect. */
int loom__pull_fd(int fd, const char *model, const uint64_t *shard_elems, size_t nshards,
                  uint16_t *w, uint64_t have, uint64_t want, loom_sync_pull_stats *st, loom_err *e);
/* The elements of a version being published come from fill(arg, w, upto): on return
 * w[0..upto) holds them. Called with increasing upto, bucket by bucket, just before each
 * bucket is hashed and encoded (pubsub.c; host memory: a memcpy; GPU memory: cuda_sync.c). */
typedef int (*loom__fill_fn)(void *arg, uint16_t *w, uint64_t upto, loom_err *e);
int loom__pub_publish_from(loom_sync_pub *p, uint64_t version, loom__fill_fn fill, void *arg,
                           loom_sync_pub_stats *st, loom_err *e);
uint64_t loom__pub_elems(const loom_sync_pub *p);

/* GPU memory behind registered staging halves on its own stream (cuda_sync.c).
 * read: dst[0..upto) = the device's elements [0, upto), increasing upto, chunks copied ahead;
 * write: device elements [g, g + n) = src[0..n) (asynchronous: src may change on return);
 * finish: wait for every copy. The times and bytes go to the stats given to open. */
typedef struct loom__cudev loom__cudev;
int loom__cudev_open(void *dev, uint64_t elems, const loom_sync_cuda_opts *o,
                     loom_sync_cuda_stats *cs, loom__cudev **out, loom_err *e);
int loom__cudev_read(loom__cudev *d, uint16_t *dst, uint64_t upto, loom_err *e);
int loom__cudev_write(loom__cudev *d, const uint16_t *src, uint64_t g, uint64_t n, loom_err *e);
int loom__cudev_finish(loom__cudev *d, loom_err *e);
void loom__cudev_close(loom__cudev *d);
int loom__cudev_wrote(const loom__cudev *d);        /* an H2D copy was issued */
uint64_t loom__cudev_fetched(const loom__cudev *d); /* elements read so far (whole chunks) */
/* A pull with its device (NULL: host memory, w), the device's options (checksums kept between
 * pulls; NULL: none) and its stage times (cs may be NULL). */
int loom__pull_ex(const uint8_t *key, const char *model, const char *ip, uint16_t port,
                  const uint64_t *shard_elems, size_t nshards, uint16_t *w, loom__cudev *dev,
                  const loom_sync_cuda_opts *o, uint64_t have, uint64_t want, double timeout_s,
                  loom_sync_pull_stats *st, loom_sync_cuda_stats *cs, loom_err *e);

/* FNV-1a (64) of a model id; 0 for none (NULL or ""). */
uint64_t loom__model_hash(const char *model);
/* NULL, or at most LOOM_SYNC_MODEL_MAX bytes without control characters; else EINVAL on
 * field "model". */
int loom__model_check(const char *model, loom_err *e);

/* Listening TCP socket on addr (host order, e.g. INADDR_ANY) and an ephemeral port. */
int loom__listen(uint32_t addr, uint16_t *port, int *fd, loom_err *e);
/* Connect to ip:port, retrying until timeout_s (the peer may still be starting). */
int loom__connect(const char *ip, uint16_t port, double timeout_s, int *fd, loom_err *e);

/* Lower the calling thread's CPU priority: it moves bytes on the (emulated) fast intra-cluster
 * fabric and must not starve the slow link of CPU on a shared host. */
void loom__fast_link_thread(void);
/* Run fn(arg) on a new detached thread; 0 or pthread_create's error (then fn never runs). */
int loom__spawn_detached(void *(*fn)(void *), void *arg);

/* Connection opening: what the client wants from a relay. */
enum { LOOM__HELLO_PUSH = 1, LOOM__HELLO_PULL = 2, LOOM__HELLO_SNAP = 3 };
enum { LOOM__HELLO_KEYED = 1 }; /* flags: a nonce follows, every frame carries a tag */
typedef struct loom__hello {
        uint32_t kind, stream;
        uint64_t version;
        uint32_t flags;
} loom__hello;
#define LOOM__HELLO_LEN 24
void loom__hello_pack(const loom__hello *h, uint8_t b[LOOM__HELLO_LEN]);
int loom__hello_send(int fd, const loom__hello *h);
int loom__hello_recv(int fd, loom__hello *h, loom_err *e);

/* Write a frame (header + payload); returns bytes written via *bytes. */
int loom__frame_send(int fd, const loom_sync_frame *f, const void *payload, uint64_t *bytes);
/* Read a frame; *payload is malloc'd (NULL when empty) and owned by the caller. Payloads larger
 * than max_payload are refused before allocating. */
/* Read one frame's header into hdr and check it (payload_len <= max_payload); the payload
 * stays unread. */
int loom__frame_recv_hdr(int fd, uint8_t hdr[LOOM_SYNC_FRAME_HDR], loom_sync_frame *f,
                         uint64_t max_payload, loom_err *e);
int loom__frame_recv(int fd, loom_sync_frame *f, uint8_t **payload, uint64_t max_payload,
                     uint64_t *bytes, loom_err *e);

/* ---- authenticated frames (auth.c) ------------------------------------------------------ */

#include <nettle/hmac.h>
#include <nettle/umac.h>

#define LOOM__REQ_TAG_LEN 32        /* HMAC-SHA-256 of the request */
#define LOOM__MAC_LEN 8             /* UMAC-64 of a frame */
#define LOOM__PULL_AUTH UINT32_C(2) /* request flag: a nonce and a tag follow the request */
/* One connection's authentication state; on = 0 sends and receives frames as they were. */
typedef struct loom__mac {
        int on;
        struct hmac_sha256_ctx base; /* keyed with the sync key */
        struct umac64_ctx frame;     /* keyed with this connection's key */
        uint8_t nonce[16];
        uint64_t seq; /* frames tagged so far */
} loom__mac;
int loom__mac_init(loom__mac *m, const uint8_t *key, loom_err *e); /* key NULL: off */
int loom__mac_nonce(loom__mac *m, loom_err *e);                    /* a fresh random nonce */
void loom__mac_request(const loom__mac *m, const uint8_t *req, size_t len,
                       uint8_t tag[LOOM__REQ_TAG_LEN]);
void loom__mac_session(loom__mac *m); /* once the nonce is agreed: the frames' key */
/* A frame's tag in pieces: begin (the next nonce), the payload in any number of updates, then
 * end with the final header. */
enum { LOOM__MAC_BLOCK = 64 * 1024 }; /* bytes tagged per step while copying or reading */
void loom__mac_begin(loom__mac *m);
void loom__mac_update(loom__mac *m, const void *p, size_t len);
void loom__mac_end(loom__mac *m, const uint8_t hdr[LOOM_SYNC_FRAME_HDR],
                   uint8_t tag[LOOM__MAC_LEN]);
int loom__mac_equal(const uint8_t *a, const uint8_t *b, size_t n); /* constant time */
/* loom__frame_send / loom__frame_recv with the tag after each frame (m NULL or off: none). */
int loom__frame_send_mac(int fd, loom__mac *m, const loom_sync_frame *f, const void *payload,
                         uint64_t *bytes);
int loom__frame_recv_mac(int fd, loom__mac *m, loom_sync_frame *f, uint8_t **payload,
                         uint64_t max_payload, uint64_t *bytes, loom_err *e);
/* The tag that follows a frame already received: 0, or the error with *payload freed. */
int loom__frame_check_mac(int fd, loom__mac *m, const loom_sync_frame *f, uint8_t **payload,
                          uint64_t *bytes, loom_err *e);
/* A frame whose payload loom__encode already tagged (m on): the header and the tag. */
int loom__frame_send_tagged(int fd, loom__mac *m, const loom_sync_frame *f, const void *payload,
                            uint64_t *bytes);
/* loom_sync_encode / _decode / _payload_check for a keyed connection (m on / crc 0): the tag
 * covers everything the CRC would, so a keyed frame carries payload_crc 0 and nobody
 * computes or checks it. loom__encode tags the payload in the pass that writes it (dense:
 * 64 KiB blocks copied then tagged while in cache); m NULL or off is loom_sync_encode. */
int loom__encode(const uint16_t *old, const uint16_t *nw, size_t n, loom_sync_enc want,
                 uint8_t *out, loom_sync_frame *f, loom__mac *m, loom_err *e);
int loom__payload_check(const loom_sync_frame *f, const uint8_t *payload, int crc, loom_err *e);
int loom__decode(const loom_sync_frame *f, const uint8_t *payload, const uint16_t *old,
                 uint16_t *out, size_t n, int crc, loom_err *e);
/* A connection between ranks of loom_sync_run (auth.c), keyed when key is not NULL: the
 * connecting side sends its hello (flag LOOM__HELLO_KEYED) and a fresh nonce, the accepting
 * side answers with a fresh nonce of its own, both key the connection's frames with
 * HMAC-SHA-256(key, hello || both nonces), and the connecting side proves it holds the key
 * (an HMAC of that connection key) before the accepting side serves or stores anything
 * (LOOM_ECORRUPT, field "key", when it does not). Each side's own nonce makes frames recorded from
 * another connection fail their tags, whichever side replays them. A keyed side refuses an
 * unkeyed peer and the reverse (LOOM_EPROTO, field "key"). key NULL: m off, the hello as it was. */
int loom__link_open(int fd, loom__hello *h, const uint8_t *key, loom__mac *m, loom_err *e);
int loom__link_accept(int fd, loom__hello *h, const uint8_t *key, loom__mac *m, loom_err *e);
/* Packed frames (header + payload, back to back), each tagged. */
int loom__frames_send_mac(int fd, loom__mac *m, const uint8_t *frames, size_t len);

/* Manifest entry: a piece and the additive hash of its new values. */
typedef struct loom__mentry {
        uint32_t piece, pad;
        uint64_t hash;
} loom__mentry;

/* ---- stream walking -------------------------------------------------------------------- */

/* A run of elements contiguous in the stream, in the tensor (one row of a piece) and in the
 * receiver's local slice. loc is only meaningful when the view has a rollout slice. */
typedef struct loom__run {
        uint32_t piece, tensor;
        uint64_t soff, g, loc, len;
} loom__run;

/* Where a rollout rank keeps each tensor: its slice and the slice's first local element. */
typedef struct loom__view {
        const loom_sync_layout *layout;
        const loom_sync_map *map;
        loom_sync_rect *slice; /* per tensor; NULL for a training rank */
        uint64_t *loc_off;     /* per tensor */
        uint64_t local_elems;
} loom__view;

int loom__view_init(loom__view *v, const loom_sync_map *m, int rollout_tp_rank);
void loom__view_fini(loom__view *v);

typedef void (*loom__run_fn)(const loom__run *r, void *arg);
/* Call fn for every run of stream s within stream positions [s0, s0 + n), in order. */
void loom__walk(const loom__view *v, const loom_sync_plan *p, const loom_sync_stream *s,
                uint64_t s0, uint64_t n, loom__run_fn fn, void *arg);
/* Map one stream position to its global and local element (cursor kept in *k, *kstart for
 * increasing positions; start both at 0). */
void loom__locate(const loom__view *v, const loom_sync_plan *p, const loom_sync_stream *s,
                  uint64_t pos, size_t *k, uint64_t *kstart, uint32_t *tensor, uint64_t *g,
                  uint64_t *loc);

/* ---- the relay ------------------------------------------------------------------------- */

typedef struct loom__relay loom__relay;
typedef struct loom__rollout loom__rollout;

/* A stored frame shared by the local consumer and remote pullers; freed on the last release. */
typedef struct loom__slot {
        loom_sync_frame f;
        uint8_t *payload;
        int refs;
        int filled;
} loom__slot;

int loom__relay_start(loom__relay **out, int listen_fd, const loom_sync_plan *plan,
                      const loom_sync_plan *catchup, loom__rollout *owner, uint32_t rank,
                      double deadline, const uint8_t *key, loom_err *e);
/* listen_fd < 0: no accepting thread; the caller hands connections to loom__relay_serve
 * (tests, the fuzz target), and only such a relay may be freed. owner NULL: no snapshots. */
/* Serve one connection to the end (hello, then a push, a pull or a snapshot); closes fd. */
void loom__relay_serve(loom__relay *r, int fd);
/* Free a relay started without an accepting thread, with the frames it still holds. */
void loom__relay_free(loom__relay *r);
/* Why the relay refused a push or a connection ("field: message"), or "" when it did not. */
void loom__relay_why(loom__relay *r, char *buf, size_t len);
/* Wait for frame `seq` of stream `stream` (seq == buckets: the manifest). Returns the slot, or
 * NULL on timeout or when the pushing connection broke. A slot starts with one reference per
 * consumer of its stream; each consumer calls loom__relay_release exactly once when done. */
loom__slot *loom__relay_get(loom__relay *r, uint32_t stream, uint32_t seq, double deadline);
void loom__relay_release(loom__relay *r, loom__slot *s);
uint64_t loom__relay_served(loom__relay *r);

/* ---- rank roles (each runs in its own process) ----------------------------------------- */

/* The key the rollout ranks hold: the job's (cfg->key) unless a test gives them another. */
static inline const uint8_t *loom__rollout_key(const loom_sync_run_cfg *c)
{
        return c->rollout_key ? c->rollout_key : c->key;
}

typedef struct loom__ctx {
        const loom_sync_run_cfg *cfg;
        const loom_sync_map *map;
        const loom_sync_plan *plan;    /* this run's plan */
        const loom_sync_plan *catchup; /* topo streams used to serve late joiners */
        uint16_t *ports;               /* relay port of every rollout rank */
        const char *relay_ip;          /* how training ranks reach the rollout cluster */
        double deadline;               /* absolute monotonic time */
} loom__ctx;

typedef struct loom__report {
        int32_t role; /* 0 training, 1 rollout, 2 late rollout */
        int32_t rank;
        int32_t rc;
        int32_t verified;       /* committed and the served weights equal the synthetic version */
        int32_t intact;         /* the served weights equal the synthetic version they claim */
        double t_ready, t_done; /* monotonic; t_done: last ack (training) / commit (rollout) */
        double cpu_codec;       /* thread CPU seconds in encode (training) / decode+apply */
        uint64_t codec_bytes;   /* dense bytes encoded / decoded */
        uint64_t sent_bytes;    /* training: frame bytes pushed over the slow link */
        uint64_t pulled_bytes;  /* rollout: frame bytes pulled from peers' relays */
        char msg[512];
} loom__report;

/* Training rank: builds its streams' data (untimed), then on go() pushes them. */
typedef struct loom__trainer loom__trainer;
int loom__trainer_prepare(const loom__ctx *c, uint32_t rank, loom__trainer **out, loom_err *e);
int loom__trainer_run(loom__trainer *t, loom__report *rep);
void loom__trainer_free(loom__trainer *t);

/* Rollout rank: holds its slice at version 0 (or nothing when late), serves its relay. */
int loom__rollout_prepare(const loom__ctx *c, uint32_t rank, int late, int listen_fd,
                          loom__rollout **out, loom_err *e);
/* Consume this run's streams (or catch up when late), verify, commit. */
int loom__rollout_run(loom__rollout *r, loom__report *rep);

/* Relay access to the owner's committed weights (for snapshots). */
int loom__rollout_snapshot_lock(loom__rollout *r, uint64_t version, double deadline,
                                const uint16_t **live, const uint64_t **piece_hash);
void loom__rollout_snapshot_unlock(loom__rollout *r);
const loom__view *loom__rollout_view(loom__rollout *r);

/* ---- the slow link --------------------------------------------------------------------- */

typedef struct loom__link {
        int netns;
        char ns_train[32], ns_roll[32];
        char dev_train[16], dev_roll[16];
        int fd_train, fd_roll, fd_orig; /* namespace handles; -1 when unused */
        char note[160];
} loom__link;

/* Build two namespaces joined by a veth pair shaped to gbps (0: unshaped). On failure nothing
 * is left behind. */
int loom__link_up(loom__link *l, double gbps, loom_err *e);
void loom__link_down(loom__link *l);
/* Move the calling thread into a namespace (fd from the link), or stay when fd < 0. */
int loom__link_enter(int fd, loom_err *e);

#define LOOM__TRAIN_IP "10.213.0.1"
#define LOOM__ROLL_IP "10.213.0.2"

/* ---- the `loom sync` commands (report.c, suite.c) ---------------------------------------- */

/* What every command builds from its options: the layout, both parallel layouts, the map and
 * the plans asked for. */
typedef struct loom__setup {
        loom_sync_layout *layout;
        loom_sync_par train, roll;
        loom_sync_map *map;
        loom_sync_plan_kind plans[3];
        int nplans;
} loom__setup;
int loom__setup_build(const loom_sync_opts *o, loom__setup *s, loom_err *e); /* free on error too */
void loom__setup_free(loom__setup *s);
uint64_t loom__all_ranks(uint32_t n);                 /* mask of rollout ranks 0..n-1 */
uint64_t loom__bucket_bytes(const loom_sync_opts *o); /* --bucket-mib, even */
void loom__result_json(const loom_sync_opts *o, const loom__setup *s, const loom_sync_result *r,
                       FILE *out);
void loom__result_text(const loom_sync_result *r, FILE *out);

#endif
