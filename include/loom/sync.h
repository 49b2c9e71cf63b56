/*
 * sync.h - the weight transfer engine: moves a new model version from the training cluster to the
 * rollout cluster after every training step.
 *
 * Pieces, bottom up:
 *   layout   a dense transformer's parameters (bf16), each tagged column-split, row-split or
 *            replicated under tensor parallelism; presets with Qwen2.5 shapes.
 *   map      for a training layout (TP, PP, DP) and a rollout layout (TP, DP): the pieces
 *            (rectangles of one tensor) that each training rank sends and which rollout tensor-
 *            parallel ranks keep them. Training DP replicas send disjoint pieces.
 *   plan     flat (every rollout rank pulls its needs across the slow link), topo (one copy
 *            crosses the slow link, landing ranks then serve their peers on the fast fabric),
 *            topo+sparse (topo with sparse bf16 deltas). A plan is a list of streams; a stream
 *            is cut into fixed-size buckets.
 *   codec    per-bucket frames: dense, COO with varint-delta indices, or bitmap; CRC32C of
 *            header and payload. Per-tensor checksums are position-keyed additive hashes, so
 *            partial sums from different senders add up to the sum over a rank's slice.
 *   run      a real multi-process transfer over TCP, one process per rank, optionally across a
 *            tc-shaped veth pair between two network namespaces.
 *   pub/pull a live model from a trainer process to its rollout workers, version after
 *            version (sparse deltas against the previous version, dense catch-up); what the
 *            Python package's job.publish / job.pull use (docs/real-jobs.md).
 *
 * Memory: every *_new returns a heap object owned by the caller and released by the matching
 * *_free; *_free(NULL) does nothing. Errors: 0 or a negative LOOM_E* code, message in loom_err.
 */
#ifndef LOOM_SYNC_H
#define LOOM_SYNC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/common.h"

/* ---- model layout ---------------------------------------------------------------------- */

typedef enum loom_sync_split {
        LOOM_SYNC_REPLICATED = 0, /* every TP rank keeps the whole tensor (norms) */
        LOOM_SYNC_COLUMN = 1,     /* output dimension (rows) split: QKV, gate/up, embedding, head */
        LOOM_SYNC_ROW = 2,        /* input dimension (columns) split: attention out, MLP down */
} loom_sync_split;

typedef struct loom_sync_model {
        char name[48];
        uint32_t hidden, intermediate, layers, heads, kv_heads, vocab;
        int tied_embeddings; /* the LM head is the embedding matrix (no separate tensor) */
        int qkv_bias;        /* Q, K and V projections carry a bias */
} loom_sync_model;

typedef struct loom_sync_tensor {
        char name[64];
        uint64_t rows, cols; /* row-major; a 1-D tensor is rows x 1 */
        uint64_t offset;     /* first element in the model's flat element space */
        loom_sync_split split;
        uint32_t unit; /* rows (COLUMN) or columns (ROW) per indivisible unit: head_dim for
                        * attention heads, 1 otherwise */
        int32_t layer; /* transformer layer, -1 before the first (embedding), -2 after the
                        * last (final norm, head) */
} loom_sync_tensor;

typedef struct loom_sync_layout {
        loom_sync_model model;
        size_t ntensors;
        loom_sync_tensor *tensors;
        uint64_t elems; /* parameters; bytes are 2 * elems (bf16) */
} loom_sync_layout;

/* Fill *out with a preset ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-14b",
 * "qwen2.5-32b") or "tiny" (a small test model). */
int loom_sync_model_preset(const char *name, loom_sync_model *out, loom_err *e);
/* Names of the presets, NULL-terminated. */
const char *const *loom_sync_model_presets(void);
int loom_sync_layout_new(const loom_sync_model *m, loom_sync_layout **out, loom_err *e);
void loom_sync_layout_free(loom_sync_layout *l);

/* ---- parallel layouts and the shard map ------------------------------------------------ */

typedef struct loom_sync_par {
        uint32_t tp, pp, dp;
} loom_sync_par;

/* Parse "tp=2,pp=1,dp=4" (keys in any order, missing keys are 1). A rollout layout must have
 * pp=1. field names the option for messages ("--train"). */
int loom_sync_par_parse(const char *s, int rollout, const char *field, loom_sync_par *out,
                        loom_err *e);
/* Check that the layout can be sharded this way (TP divides the attention heads, PP <= layers,
 * ...). */
int loom_sync_par_check(const loom_sync_layout *l, const loom_sync_par *p, const char *field,
                        loom_err *e);
static inline uint32_t loom_sync_par_ranks(const loom_sync_par *p)
{
        return p->tp * p->pp * p->dp;
}

/* A rectangle of one tensor: rows [r0, r1) x columns [c0, c1). */
typedef struct loom_sync_rect {
        uint64_t r0, r1, c0, c1;
} loom_sync_rect;

static inline uint64_t loom_sync_rect_elems(const loom_sync_rect *r)
{
        return (r->r1 - r->r0) * (r->c1 - r->c0);
}

/* The rectangle of tensor t that tensor-parallel rank `rank` of `tp` keeps. */
int loom_sync_slice(const loom_sync_tensor *t, uint32_t rank, uint32_t tp, loom_sync_rect *out);
/* Pipeline stage of `pp` that holds tensor t. */
uint32_t loom_sync_stage(const loom_sync_layout *l, const loom_sync_tensor *t, uint32_t pp);

/* Ranks: training rank = tp + TP * (pp + PP * dp); rollout rank = tp + TP * dp. */
typedef struct loom_sync_piece {
        uint32_t tensor;
        loom_sync_rect rect;
        uint32_t src;          /* training rank that sends it */
        uint32_t need0, need1; /* rollout TP ranks [need0, need1) keep it (every DP replica) */
} loom_sync_piece;

typedef struct loom_sync_map {
        const loom_sync_layout *layout; /* borrowed; must outlive the map */
        loom_sync_par train, roll;
        size_t npieces;
        loom_sync_piece *pieces; /* by tensor, then split interval, then DP replica */
} loom_sync_map;

int loom_sync_map_new(const loom_sync_layout *l, const loom_sync_par *train,
                      const loom_sync_par *roll, loom_sync_map **out, loom_err *e);
void loom_sync_map_free(loom_sync_map *m);

/* ---- plans ----------------------------------------------------------------------------- */

typedef enum loom_sync_plan_kind {
        LOOM_SYNC_FLAT = 0,
        LOOM_SYNC_TOPO = 1,
        LOOM_SYNC_TOPO_SPARSE = 2,
} loom_sync_plan_kind;

const char *loom_sync_plan_name(loom_sync_plan_kind k);
int loom_sync_plan_parse(const char *s, loom_sync_plan_kind *out, loom_err *e);

/* A stream: pieces one training rank sends across the slow link to one landing rollout rank, in
 * order, as one run of elements cut into buckets. Every present rollout rank whose TP rank is
 * in [need0, need1) consumes it: the landing rank from its own relay, the others by pulling
 * from the landing rank's relay over the fast fabric (never for flat, where need is just the
 * landing rank). */
typedef struct loom_sync_stream {
        uint32_t id, src, dst;
        uint32_t need0, need1;
        int only_dst;        /* flat: the landing rank is the only consumer */
        size_t first, count; /* pieces: plan->order[first .. first + count) */
        uint64_t elems;      /* total elements in the stream */
} loom_sync_stream;

typedef struct loom_sync_plan {
        loom_sync_plan_kind kind;
        const loom_sync_map *map; /* borrowed */
        uint64_t bucket_elems;    /* bucket size in elements (bytes / 2) */
        uint64_t present;         /* bit r set: rollout rank r takes part (at most 64 ranks) */
        size_t nstreams;
        loom_sync_stream *streams;
        uint32_t *order;     /* piece indices, grouped by stream */
        uint64_t slow_elems; /* dense elements that cross the slow link */
        uint64_t fast_elems; /* dense elements pulled between rollout ranks */
} loom_sync_plan;

#define LOOM_SYNC_MAX_ROLLOUT 64
#define LOOM_SYNC_DEFAULT_BUCKET (UINT64_C(64) << 20)

/* Build the streams of plan `kind`. bucket_bytes is even and >= 2; present selects the rollout
 * ranks that take part (catch-up serves the others later). */
int loom_sync_plan_new(const loom_sync_map *m, loom_sync_plan_kind kind, uint64_t bucket_bytes,
                       uint64_t present, loom_sync_plan **out, loom_err *e);
void loom_sync_plan_free(loom_sync_plan *p);
/* Does rollout rank r consume stream s? */
int loom_sync_stream_consumer(const loom_sync_plan *p, const loom_sync_stream *s, uint32_t r);
static inline uint64_t loom_sync_stream_buckets(const loom_sync_plan *p, const loom_sync_stream *s)
{
        return (s->elems + p->bucket_elems - 1) / p->bucket_elems;
}

/* ---- byte streams (net.c; loom-state's control socket uses them too) --------------------- */

/* Send or receive exactly len bytes on a stream socket, retrying short transfers and EINTR
 * (send never raises SIGPIPE). 0, LOOM_EIO on a socket error (errno says which), or for
 * loom__read_all LOOM_EPROTO when the peer closed before len bytes came. */
int loom__write_all(int fd, const void *buf, size_t len);
int loom__read_all(int fd, void *buf, size_t len);

/* ---- checksums ------------------------------------------------------------------------- */

/* CRC32C (Castagnoli) of buf, continuing from crc (start with 0). */
uint32_t loom_sync_crc32c(uint32_t crc, const void *buf, size_t len);
/* Copy len bytes from src to dst (which must not overlap) and return their CRC32C, continuing
 * from crc: one pass over the bytes, where memcpy then loom_sync_crc32c would read them twice. */
uint32_t loom_sync_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);
/* The CRC32C of A followed by B, from crc_a (of A), crc_b (of B, started from 0) and B's length:
 * pieces checksummed apart (on several threads) join into the whole's CRC. */
uint32_t loom_sync_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);
/* Position-keyed additive hash of bf16 values v[0..n) at flat element indices g0, g0+1, ...:
 * sum of (v + 2^16) * (2 * G * g + 1) mod 2^64. Sums over disjoint ranges add, so a rank's
 * per-tensor checksum is the sum of its pieces' checksums whoever sent them. */
uint64_t loom_sync_hash(const uint16_t *v, size_t n, uint64_t g0);
/* Contribution of a single element (for incremental updates after a sparse delta). */
static inline uint64_t loom_sync_hash1(uint16_t v, uint64_t g)
{
        return ((uint64_t)v + 0x10000u) * (UINT64_C(2) * UINT64_C(0x9E3779B97F4A7C15) * g + 1u);
}

/* ---- bucket codec ---------------------------------------------------------------------- */

typedef enum loom_sync_enc {
        LOOM_SYNC_ENC_DENSE = 0,  /* the new values, 2 bytes each */
        LOOM_SYNC_ENC_COO = 1,    /* per changed element: LEB128 gap to the previous one, then
                                   * the 16-bit XOR of old and new */
        LOOM_SYNC_ENC_BITMAP = 2, /* one bit per element, then the XORs of the set bits */
        LOOM_SYNC_ENC_AUTO = 3,   /* (encoder only) the smaller sparse encoding if it is at
                                   * most half the dense size, else dense */
} loom_sync_enc;

enum {
        LOOM_SYNC_FRAME_BUCKET = 1,   /* one bucket of a stream */
        LOOM_SYNC_FRAME_MANIFEST = 2, /* last frame of a stream: (piece, checksum) pairs */
        LOOM_SYNC_FRAME_END = 3,      /* a relay acknowledging a whole pushed stream */
};

#define LOOM_SYNC_FRAME_HDR 64
#define LOOM_SYNC_FRAME_MAX_PAYLOAD (UINT64_C(1) << 32)

typedef struct loom_sync_frame {
        uint8_t type, enc;
        uint32_t stream;
        uint32_t seq; /* bucket index within the stream */
        uint64_t version;
        uint64_t start; /* first element of the bucket within the stream */
        uint64_t elems; /* elements the bucket covers */
        uint64_t nnz;   /* changed elements (sparse encodings) */
        uint64_t payload_len;
        uint32_t payload_crc;
} loom_sync_frame;

/* Serialize / parse the fixed 64-byte header (parse checks magic and header CRC). */
void loom_sync_frame_pack(const loom_sync_frame *f, uint8_t out[LOOM_SYNC_FRAME_HDR]);
int loom_sync_frame_unpack(const uint8_t in[LOOM_SYNC_FRAME_HDR], loom_sync_frame *f, loom_err *e);

/* Upper bound on the payload of a bucket of n elements, any encoding. */
size_t loom_sync_enc_bound(size_t n);
/* Encode the bucket new[0..n) against old[0..n) (old may be NULL: dense). want selects the
 * encoding (AUTO: the smallest). Writes the payload to out (capacity loom_sync_enc_bound(n)),
 * fills f->enc, nnz, payload_len, payload_crc, elems. */
int loom_sync_encode(const uint16_t *old, const uint16_t *new_, size_t n, loom_sync_enc want,
                     uint8_t *out, loom_sync_frame *f, loom_err *e);
/* Check a payload against its header without applying it: CRC, structure, indices in range.
 * After success the payload can be applied and cannot fail. */
int loom_sync_payload_check(const loom_sync_frame *f, const uint8_t *payload, loom_err *e);
/* Call fn(i, xor, arg) for each changed element of a checked sparse payload, in order. */
typedef void (*loom_sync_delta_fn)(uint64_t i, uint16_t x, void *arg);
void loom_sync_payload_walk(const loom_sync_frame *f, const uint8_t *payload, loom_sync_delta_fn fn,
                            void *arg);
/* Decode a bucket: out[0..n) = the new values. old (n values) is the previous version; it is
 * never written, so a rejected frame leaves the caller's weights as they were. out and old may
 * be the same buffer only for a checked frame. */
int loom_sync_decode(const loom_sync_frame *f, const uint8_t *payload, const uint16_t *old,
                     uint16_t *out, size_t n, loom_err *e);

/* ---- synthetic weights ----------------------------------------------------------------- */

/* Deterministic bf16 weights: version 0 is a function of (seed, flat index); version v > 0
 * changes about `density` of the elements of version v-1 (same seed => same bytes). Fills
 * out[0..n) with the values of elements g0 .. g0+n-1. */
void loom_sync_synth(uint64_t seed, uint32_t version, double density, uint64_t g0, size_t n,
                     uint16_t *out);

/* ---- multi-process transfer ------------------------------------------------------------ */

typedef struct loom_sync_run_cfg {
        const loom_sync_layout *layout;
        loom_sync_par train, roll;
        loom_sync_plan_kind plan;
        uint64_t bucket_bytes;
        double density; /* fraction of elements the synthetic step changes */
        uint64_t seed;
        double link_gbps; /* shaped slow-link rate; 0 = unshaped */
        int netns;        /* 1: namespaces + veth + tc (needs root); 0: loopback only */
        uint32_t late;    /* this many rollout ranks (the last ones) join after the step and
                           * catch up from their peers' relays */
        int corrupt;      /* fault injection on training rank 0's first bucket: 1 flips a
                           * payload byte after its CRC (bad frame), 2 changes a value before
                           * encoding (well-formed frame, wrong weights: only the per-tensor
                           * checksums can tell) */
        double timeout_s; /* whole run; 0 = 600 */
        /* The job's sync key (LOOM_SYNC_KEY_LEN bytes): every connection between ranks is
         * keyed with fresh nonces from both ends and every frame carries a UMAC-64 tag, so a
         * frame forged, replayed from another connection or keyed for another job is refused
         * before it is looked at (docs/security.md). NULL: frames are not authenticated,
         * which loom_sync_run allows on loopback only (netns 0): over a network link it
         * refuses to start (LOOM_EINVAL, field "key"). */
        const uint8_t *key;
        const uint8_t *rollout_key; /* the rollout ranks' key when it is not `key` (to check
                                     * that ranks keyed for another job refuse); NULL: key */
} loom_sync_run_cfg;

typedef struct loom_sync_result {
        loom_sync_plan_kind plan;
        double wall_s; /* go -> last present rollout rank committed */
        double slow_s; /* go -> last training rank's push acknowledged */
        uint64_t model_bytes;
        uint64_t slow_link_bytes; /* frame bytes written by training ranks */
        uint64_t fast_link_bytes; /* frame bytes relays sent to pulling peers */
        double slow_link_copies;  /* slow_link_bytes / model_bytes */
        double goodput_fraction;  /* slow-link bits / (slow_s * rate); < 0 when unshaped */
        double encode_gbps;       /* dense bytes encoded per CPU-second (training ranks) */
        double decode_gbps;       /* dense bytes decoded per CPU-second (rollout ranks) */
        double catchup_s;         /* slowest late joiner's catch-up; 0 when none */
        uint64_t catchup_bytes;
        uint32_t ranks_ok, ranks_failed; /* rollout ranks (late joiners included) */
        uint32_t ranks_intact;           /* rollout ranks whose served weights equal the
                                          * synthetic version they claim, committed or kept */
        int verified;                    /* every rollout rank's per-tensor checksums match the
                                          * expected version and no frame was rejected */
        int shaped;                      /* the slow link was a shaped veth between namespaces */
        int keyed;                       /* frames between ranks carried the sync key's tags */
        char link_note[160];             /* how the slow link was built, or why not */
        char failure[256];               /* the first failing rank and why; empty when none */
} loom_sync_result;

/* Run one synthetic step (version 0 -> 1) through real processes and sockets. Blocks; forks
 * training and rollout rank processes, reaps them, and tears down namespaces on every path. */
int loom_sync_run(const loom_sync_run_cfg *cfg, loom_sync_result *res, loom_err *e);

/* Can this process build namespaces and shape a veth pair? Returns 1 and fills why with "ok",
 * or 0 with the reason. */
int loom_sync_netns_available(char *why, size_t whylen);

/* Estimated peak resident bytes of a loom_sync_run with this plan, every process together
 * (see docs/sync.md): what a caller checks against the host's memory before forking. */
double loom_sync_run_peak_bytes(const loom_sync_layout *l, const loom_sync_par *roll,
                                loom_sync_plan_kind kind, uint32_t late);
/* LOOM_EINVAL with the need and the limit in e when that estimate exceeds limit_bytes
 * (limit_bytes <= 0: 85% of the host's available memory). */
int loom_sync_run_check_memory(const loom_sync_layout *l, const loom_sync_par *roll,
                               loom_sync_plan_kind kind, uint32_t late, double limit_bytes,
                               loom_err *e);

/* ---- codec speed ------------------------------------------------------------------------ */

/* One encoding of one density in loom_sync_codec_bench: dense bytes per CPU-second. */
typedef struct loom_sync_codec_row {
        double density;
        loom_sync_enc enc;    /* asked for (LOOM_SYNC_ENC_AUTO: the encoder's own choice) */
        loom_sync_enc chosen; /* what the frame carries */
        double size_fraction; /* payload bytes / dense bytes */
        double encode_gbps, decode_gbps;
        int round_trip; /* decode(encode(new)) == new */
        /* Authenticated pulls: keyed encode (no CRC, UMAC-64 tag) / plain encode (CRC32C)
         * time minus one, and the same for decode, medians of runs alternated in this
         * process (negative: keyed is faster); HMAC-SHA-256 over the same bytes / plain encode
         * time for comparison. round_trip covers both paths. */
        double tag_encode_frac, tag_decode_frac, hmac_encode_frac;
} loom_sync_codec_row;

enum { LOOM_SYNC_CODEC_DENSITIES = 8 };

/* Single-core encode/decode speed and size of every encoding over one bucket of n synthetic
 * weights, at LOOM_SYNC_CODEC_DENSITIES densities from 0.1% to 100%: the numbers behind the
 * encoder's choice. rows gets LOOM_SYNC_CODEC_DENSITIES * (LOOM_SYNC_ENC_AUTO + 1) entries. */
int loom_sync_codec_bench(
    uint64_t seed, size_t n,
    loom_sync_codec_row rows[LOOM_SYNC_CODEC_DENSITIES * (LOOM_SYNC_ENC_AUTO + 1)], loom_err *e);

/* ---- the `loom sync` commands (report.c, suite.c) --------------------------------------- */

/* What `loom sync layout|plan|bench|codec` take; loom_sync_opts_default fills the defaults. */
typedef struct loom_sync_opts {
        const char *model;           /* preset name */
        uint32_t layers;             /* keep the first N transformer layers; 0: all */
        const char *train, *rollout; /* "tp=A,pp=B,dp=C" */
        const char *plan;            /* flat, topo, topo+sparse or all */
        const char *link;            /* auto, netns or loopback */
        double gbps, density, bucket_mib, timeout_s;
        double max_mem_gb; /* 0: 85% of the host's available memory */
        uint64_t seed;
        uint32_t late, repeat;
        int corrupt; /* as loom_sync_run_cfg.corrupt */
        int json;
        const uint8_t *key, *rollout_key; /* as loom_sync_run_cfg's; NULL: none (loopback
                                           * only) */
        const char *device; /* bench: "cuda" or "host" runs loom_sync_device_bench_print (one
                             * process, publish + pull); NULL: the multi-process bench */
} loom_sync_opts;
void loom_sync_opts_default(loom_sync_opts *o);

/* Each writes its table (or JSON lines with o->json) to out and returns 0, or an error with
 * the option at fault in e->field and nothing further written.
 *   layout   the tensors of the model and how TP splits them
 *   plan     streams and link volumes of every plan; JSON: the shard map, a line per piece
 *   codec    loom_sync_codec_bench's rows; LOOM_ECORRUPT when a round trip failed
 *   bench    loom_sync_run of every plan, o->repeat times each (the fastest is reported; all
 *            must verify). *verified: every run verified. notes gets a line when the shaped
 *            link cannot be had and the run falls back to loopback. */
int loom_sync_layout_print(const loom_sync_opts *o, FILE *out, loom_err *e);
int loom_sync_plan_print(const loom_sync_opts *o, FILE *out, loom_err *e);
int loom_sync_codec_print(const loom_sync_opts *o, FILE *out, loom_err *e);
int loom_sync_bench_print(const loom_sync_opts *o, FILE *out, FILE *notes, int *verified,
                          loom_err *e);

/* ---- publish / pull: a live model between a trainer and its rollout workers ------------ */

/* The trainer publishes each new version of its bf16 weights (a flat array cut into shards,
 * e.g. one per tensor); a publisher thread serves pulls over TCP. A puller that holds the
 * previous version receives sparse XOR deltas (only the buckets that changed); one a few
 * versions behind receives the chain of deltas since its version while the publisher keeps them
 * (the last 16 versions, at most twice the dense size in all) and they are smaller than a dense
 * copy; any other puller (a new or restarted worker, or one too far behind) receives the version
 * dense. Every frame carries CRC32C; the
 * puller checks each shard's additive hash (loom_sync_hash, g0 = the shard's first element)
 * against the publisher's manifest before it overwrites anything, so a failed pull leaves the
 * caller's weights as they were. Implemented in pubsub.c; the Python package reaches it
 * through libloomsync.so.
 *
 * Model ids: a publisher may serve under a model id (a job's name or id, up to 127 bytes) and a
 * puller may name the id it wants. A puller that names one is served only by a publisher of
 * that id (a publisher with another id, or none, is refused with LOOM_ENOENT, field "model"),
 * so a worker whose trainer died never takes the weights of another job's publisher that took
 * over the port. NULL or "" means no id: such a puller takes any publisher of the same shape. */

#define LOOM_SYNC_NO_VERSION UINT64_MAX
#define LOOM_SYNC_MODEL_MAX 127 /* bytes of a model id */

typedef struct loom_sync_pub loom_sync_pub;

typedef struct loom_sync_pub_stats {
        uint64_t version;
        uint64_t elems;       /* bf16 elements in the model */
        uint64_t changed;     /* elements whose bits differ from the previous version (every
                               * element for the first) */
        uint64_t delta_bytes; /* bytes a puller at the previous version receives */
        uint64_t dense_bytes; /* bytes of the same version sent dense */
        uint32_t buckets;     /* buckets in the model */
        uint32_t sent;        /* buckets in the delta (unchanged buckets are not sent) */
        double encode_s;      /* wall seconds spent encoding */
} loom_sync_pub_stats;

/* Listen on ip:port (port 0: ephemeral) for pulls of model `model` (NULL: no id) of nshards
 * shards of shard_elems[i] elements, cut into buckets of bucket_elems. Starts the serving
 * thread. */
int loom_sync_pub_new(const char *model, const uint64_t *shard_elems, size_t nshards,
                      uint64_t bucket_elems, const char *ip, uint16_t port, loom_sync_pub **out,
                      loom_err *e);
uint16_t loom_sync_pub_port(const loom_sync_pub *p);
/* What one publisher spends on its pullers (defaults: 256 connections served at once, a request
 * must arrive within 10 s of the connect, a pull waits at most 300 s for its version). A
 * connection over the cap is answered "busy" (the puller sees LOOM_EIO) and closed. */
typedef struct loom_sync_pub_limits {
        int max_conns;
        double idle_s;
        double wait_s;
} loom_sync_pub_limits;
void loom_sync_pub_limits_default(loom_sync_pub_limits *l);
/* 0, or LOOM_EINVAL naming the field; applies to connections accepted from now on. */
int loom_sync_pub_set_limits(loom_sync_pub *p, const loom_sync_pub_limits *l, loom_err *e);
/* Make w (every element of the model, copied) version `version`, which must be greater than
 * the last one; encodes its delta against the last version. Pulls waiting for it wake up. */
int loom_sync_pub_publish(loom_sync_pub *p, uint64_t version, const uint16_t *w,
                          loom_sync_pub_stats *st, loom_err *e);
/* Stops serving (a pull in flight fails) and frees everything. */
void loom_sync_pub_free(loom_sync_pub *p);

typedef struct loom_sync_pull_stats {
        uint64_t version; /* the version now in w */
        uint64_t base;    /* the version the delta applied to; LOOM_SYNC_NO_VERSION when dense */
        uint64_t bytes;   /* bytes received */
        uint64_t changed; /* elements whose bits changed */
        double wait_s;    /* from the request until the publisher had a new enough version */
        double seconds;   /* the whole pull */
} loom_sync_pull_stats;

/* Bring w (the model's every element; version `have`, or LOOM_SYNC_NO_VERSION when it holds
 * nothing) to the publisher's latest version, waiting up to timeout_s for one >= want. The
 * shard sizes must be the publisher's, and its model id `model` when not NULL. On any failure
 * w is unchanged. */
int loom_sync_pull(const char *model, const char *ip, uint16_t port, const uint64_t *shard_elems,
                   size_t nshards, uint16_t *w, uint64_t have, uint64_t want, double timeout_s,
                   loom_sync_pull_stats *st, loom_err *e);

/* The publisher's latest version, waiting up to timeout_s for one >= want (0: whatever it has),
 * without moving weights: the publisher answers a probe with the manifest alone. A worker that
 * must not or cannot pull yet still learns how far behind it is. */
#define LOOM_SYNC_PULL_PROBE UINT32_C(1)
int loom_sync_pull_latest(const char *model, const char *ip, uint16_t port,
                          const uint64_t *shard_elems, size_t nshards, uint64_t want,
                          double timeout_s, uint64_t *version, loom_err *e);

/* Authenticated pulls (docs/security.md). With a key (the job's `sync_key` from loomd: 32
 * bytes, 64 hex digits in the API) the publisher serves only pullers that prove the same key,
 * and tags every frame with HMAC-SHA-256 under it, per connection and per frame; a puller given
 * a key accepts only such frames. A forged frame, one replayed from another pull, re-ordered
 * or dropped within this one, or another job's, fails the pull with LOOM_ECORRUPT (field
 * "frame.tag") and leaves w unchanged. Frames are not encrypted. key NULL: as without. */
#define LOOM_SYNC_KEY_LEN 32
/* A sync key from its text, 64 hex digits (whitespace around them ignored), or from a file
 * holding that text (key.c). The file must be a regular file that neither group nor others may
 * read or write, else LOOM_EINVAL naming it and its mode; field names the source in messages
 * ("LOOM_SYNC_KEY", "--key-file"). key is written only on success. */
int loom_sync_key_parse(const char *text, const char *field, uint8_t key[LOOM_SYNC_KEY_LEN],
                        loom_err *e);
/* A fresh random key (getrandom), for a transfer whose every rank this process starts. */
int loom_sync_key_new(uint8_t key[LOOM_SYNC_KEY_LEN], loom_err *e);
int loom_sync_key_load(const char *path, const char *field, uint8_t key[LOOM_SYNC_KEY_LEN],
                       loom_err *e);
int loom_sync_pub_set_key(loom_sync_pub *p, const uint8_t *key, loom_err *e);
int loom_sync_pull_keyed(const uint8_t *key, const char *model, const char *ip, uint16_t port,
                         const uint64_t *shard_elems, size_t nshards, uint16_t *w, uint64_t have,
                         uint64_t want, double timeout_s, loom_sync_pull_stats *st, loom_err *e);
int loom_sync_pull_latest_keyed(const uint8_t *key, const char *model, const char *ip,
                                uint16_t port, const uint64_t *shard_elems, size_t nshards,
                                uint64_t want, double timeout_s, uint64_t *version, loom_err *e);

/* ---- publish from / pull into CUDA device memory (cuda_sync.c) --------------------------- */

/* The same publisher and puller with the weights in GPU memory (a device pointer to the
 * model's every element, bf16 bits). The CUDA runtime is loaded with dlopen on first use
 * ($LOOM_CUDART, else libcudart.so[.13|.12|.11]; loom/cuda.h); without one a call fails with
 * LOOM_EIO "no CUDA runtime: ..." (field "cuda"), without a device LOOM_ENOENT "no CUDA
 * device: ...", and changes nothing. Wire format, deltas and digests are the host path's: a GPU
 * publisher serves host pullers and a host publisher GPU pullers.
 *
 * Copies go through registered (pinned) staging halves on the call's own non-blocking
 * stream, which does not order itself after the caller's streams: synchronize the stream that
 * wrote the weights before publishing, and the stream that reads them after pulling.
 *
 *   publish  D2H(chunk 0); for k: D2H(chunk k+1) into the other half, wait chunk k, copy it
 *            into the new version and hash and encode its buckets: the copy of the next chunk
 *            overlaps the encoding of this one.
 *   pull     each received bucket is checked (CRC32C or tag) and applied on the host, copied
 *            into a staging half and sent H2D while the next bucket is received. A delta's
 *            old values are read D2H chunk by chunk, ahead of the frames that need them.
 *
 * Unlike the host pull, the device weights are written as buckets arrive, before the shards'
 * checksums can be compared: a pull that fails after its first bucket (connection lost,
 * checksum mismatch) leaves them partly updated, says so in the message and sets st->version
 * to LOOM_SYNC_NO_VERSION, so the next pull asks for a dense copy. A frame that fails its own
 * check never reaches the device. */
typedef struct loom_sync_cuda_opts {
        int device; /* the CUDA device that holds the weights; the call makes it the calling
                     * thread's current device (cudaSetDevice) and leaves it so */
        uint64_t staging_bytes; /* bytes per staging half, even; 0: 16 MiB. A call registers two
                                 * halves for its D2H copies and two for its H2D copies, each
                                 * pair on first use */
        /* Pulls only (nshards entries each; NULL: none). new_hash gets, on success, the shards'
         * checksums of the version now in the weights. Kept by the caller and given back as
         * have_hash with that version as `have`, they let a delta pull check its result from
         * the elements it changes (each one's change to its shard's additive hash) instead of
         * hashing the whole model: it reads the device only up to the last chunk it changes
         * (an up-to-date pull reads nothing) and trusts that the weights were not changed
         * outside loom since: only the bits the delta flips are checked against the device.
         * The two may be the same array. */
        const uint64_t *have_hash;
        uint64_t *new_hash;
        /* Pulls only: host memory of the model's size (every element, 2 bytes each) that the
         * pull decodes into, kept by the caller across pulls so that a pull does not fault in
         * a fresh model-sized buffer each time; its contents between pulls do not matter.
         * NULL: allocated per pull. With kept checksums a delta also needs no second buffer
         * (a chain's `changed` then counts an element once per link that flips it). */
        uint16_t *scratch;
} loom_sync_cuda_opts;

typedef struct loom_sync_cuda_stats {
        char path[8];       /* "cuda": the GPU path ran; "host" for the host calls' figures */
        char runtime[256];  /* the libcudart file loaded */
        double d2h_s;       /* waiting for device-to-host copies and copying out of staging */
        double h2d_s;       /* copying into staging and waiting for its copies to the device */
        double encode_s;    /* publish: the rest of the call (version copy, hashes, encoding) */
        double recv_s;      /* pull: reading frames from the socket */
        double decode_s;    /* pull: checking and applying frames on the host */
        uint64_t d2h_bytes; /* bytes copied device to host */
        uint64_t h2d_bytes; /* bytes copied host to device */
        uint32_t copies;    /* async copies issued */
} loom_sync_cuda_stats;

/* loom_sync_pub_publish with w in device memory. opts NULL: device 0, default staging; cs may
 * be NULL. A pointer that is not device memory of the model's size is refused (LOOM_EINVAL,
 * field "weights") before anything is published. */
int loom_sync_pub_publish_cuda(loom_sync_pub *p, uint64_t version, const void *dev_w,
                               const loom_sync_cuda_opts *opts, loom_sync_pub_stats *st,
                               loom_sync_cuda_stats *cs, loom_err *e);
/* loom_sync_pull_keyed into device memory (key NULL: unauthenticated); see above for what a
 * failure leaves. A bad pointer is refused (field "weights") before anything is connected. */
int loom_sync_pull_cuda(const uint8_t *key, const char *model, const char *ip, uint16_t port,
                        const uint64_t *shard_elems, size_t nshards, void *dev_w, uint64_t have,
                        uint64_t want, double timeout_s, const loom_sync_cuda_opts *opts,
                        loom_sync_pull_stats *st, loom_sync_cuda_stats *cs, loom_err *e);
/* Is a CUDA runtime with a device here? The device count, or the error above; lib gets the
 * runtime file (may be NULL). */
int loom_sync_cuda_probe(char *lib, size_t len, loom_err *e);

/* `loom sync bench --device cuda|host`: one process publishes a model of o->model's shape
 * (version 0, then version 1 changing o->density of it) and pulls it (dense, then the delta)
 * over loopback TCP, from and into GPU memory (cuda) or host memory (host), and prints each
 * stage's seconds and GB/s: D2H, encode, send+receive, decode, H2D. Every pulled version is
 * compared with the published one bit for bit (LOOM_ECORRUPT when not). */
int loom_sync_device_bench_print(const loom_sync_opts *o, const char *device, FILE *out,
                                 loom_err *e);

#endif
