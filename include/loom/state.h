/*
 * state.h - loom-state, the per-node state manager: the node's single authority over where each
 * job's tensors live (docs/state.md).
 *
 * Tiers, fastest first:
 *   device  the worker's own memory. Emulated on this machine by a memfd shared-memory buffer the
 *           worker owns (it stands in for GPU memory; the copy path is the same: the daemon maps
 *           the buffer it is handed and copies into or out of it).
 *   host    a pool of pinned (mlocked) host memory inside the daemon.
 *   disk    one file per slice under the daemon's directory, written and read with O_DIRECT from
 *           aligned buffers, so the page cache never holds a copy.
 *
 * Keys are canonical: (job, version, tensor name, slice rectangle, dtype), never the process that
 * owned the bytes. Data-parallel replicas offloading the same slice store it once; a rank may
 * load any rectangle of a tensor that the stored slices cover, whatever parallel layout saved
 * them (loom_state_key_for() turns a src/sync tensor and a TP rank into a key).
 *
 * Calls are synchronous: loom_state_offload() returns once the slices are resident in the tier
 * asked for (on disk: written, fsynced and renamed, so they survive a crash of the daemon);
 * loom_state_load() returns once the bytes are in the caller's buffer. Every slice carries a
 * CRC32C; a slice read from disk is checked before use and a mismatch fails the load with the key.
 *
 * Memory: loom_state_connect() returns a handle owned by the caller, released by
 * loom_state_close(); loom_state_daemon_new()/_free() likewise. Errors: 0 or a negative LOOM_E*
 * code, message in loom_err.
 */
#ifndef LOOM_STATE_H
#define LOOM_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/common.h"

typedef enum loom_state_tier {
        LOOM_STATE_NONE = 0, /* not stored anywhere */
        LOOM_STATE_DEVICE = 1,
        LOOM_STATE_HOST = 2,
        LOOM_STATE_DISK = 3,
} loom_state_tier;

const char *loom_state_tier_name(loom_state_tier t);
int loom_state_tier_parse(const char *s, loom_state_tier *out);

#define LOOM_STATE_JOB_MAX 64
#define LOOM_STATE_NAME_MAX 128
#define LOOM_STATE_DTYPE_MAX 8

/* A canonical key. The tensor is row-major rows x cols (a 1-D tensor is n x 1); the slice is the
 * rectangle rows [r0, r1) x columns [c0, c1), stored row-major. dtype is one of "bf16", "f16",
 * "f32", "f64", "i8", "u8", "i16", "i32", "i64". */
typedef struct loom_state_key {
        char job[LOOM_STATE_JOB_MAX];
        uint64_t version;
        char name[LOOM_STATE_NAME_MAX];
        uint64_t r0, r1, c0, c1;
        char dtype[LOOM_STATE_DTYPE_MAX];
} loom_state_key;

/* Bytes per element of a dtype name; 0 when unknown. */
size_t loom_state_dtype_size(const char *dtype);
/* Bytes of the slice a key names. */
uint64_t loom_state_key_bytes(const loom_state_key *k);
/* Check a key (job and name non-empty and short enough, rectangle non-empty, dtype known). */
int loom_state_key_check(const loom_state_key *k, const char *field, loom_err *e);
/* A whole-tensor key: rows [0, n) x column [0, 1). */
void loom_state_key_flat(loom_state_key *k, const char *job, uint64_t version, const char *name,
                         uint64_t n, const char *dtype);

/*
 * One key and the caller's buffer for it. The buffer is either a region of a memfd the caller
 * owns (fd >= 0, off: the emulated device memory; passed to the daemon by SCM_RIGHTS and mapped
 * there, no extra copy; it must be sealed with F_SEAL_SHRINK, else the request fails with
 * LOOM_EINVAL on field "fd") or plain memory (fd = -1, ptr), which the client library stages
 * through a memfd of its own (one extra copy, said in the result). len must equal the key's bytes.
 */
typedef struct loom_state_io {
        loom_state_key key;
        int fd;
        uint64_t off;
        void *ptr;
        uint64_t len;
} loom_state_io;

/* What a call did. */
typedef struct loom_state_result {
        loom_state_tier found; /* load: the slowest tier any slice was found in */
        uint64_t bytes;        /* bytes copied into or out of the caller's buffers */
        uint64_t dedup_bytes;  /* offload: bytes already stored under the same key, not copied */
        uint64_t disk_bytes;   /* bytes read from or written to the disk tier */
        uint64_t staged_bytes; /* bytes the client copied through its staging memfd */
        double seconds;        /* daemon-side time of the call */
        uint32_t buckets;      /* CUDA path: requests the call was cut into (else 1) */
        char path[16];         /* which copy path ran: "cuda" or "emulated" (memfd/plain memory) */
} loom_state_result;

/* Usage of one job (or the whole daemon, job = ""). */
typedef struct loom_state_usage {
        char job[LOOM_STATE_JOB_MAX];
        uint64_t host_bytes, disk_bytes, device_bytes;
        uint64_t slices;
} loom_state_usage;

typedef struct loom_state_stats {
        uint64_t host_cap, host_used, disk_cap, disk_used, device_cap;
        int host_locked; /* the host pool is mlocked (0: the limit was too low, see warning) */
        uint64_t evictions, prefetches, prefetch_bytes;
        size_t njobs;
        loom_state_usage *jobs; /* njobs entries, owned by the stats; loom_state_stats_free() */
} loom_state_stats;

void loom_state_stats_free(loom_state_stats *s);
/* Print a daemon's usage to f: text (one line, then one per job) or one JSON object. */
void loom_state_stats_print(FILE *f, const loom_state_stats *st, int json);

/* The key of TP rank `rank` of `tp` for a src/sync tensor (bf16): the rectangle
 * loom_sync_slice() gives that rank. */
struct loom_sync_tensor;
int loom_state_key_for(loom_state_key *k, const char *job, uint64_t version,
                       const struct loom_sync_tensor *t, uint32_t rank, uint32_t tp, loom_err *e);

/* ---- client ---------------------------------------------------------------------------- */

typedef struct loom_state_client loom_state_client;

/* Connect to the daemon's Unix socket. */
int loom_state_connect(const char *sock_path, loom_state_client **out, loom_err *e);
void loom_state_close(loom_state_client *c);

/*
 * Copy n slices out of the caller's buffers into `tier` (HOST or DISK). All or nothing: when the
 * tier (after evicting host slices to disk) cannot hold them, nothing is stored and the call
 * fails with LOOM_ERANGE naming the tier. A key already stored (same job, version, name,
 * rectangle, dtype) is not copied again (dedup_bytes). A rectangle that overlaps a different
 * stored rectangle of the same tensor version is refused (LOOM_EEXIST).
 */
int loom_state_offload(loom_state_client *c, const loom_state_io *io, size_t n,
                       loom_state_tier tier, loom_state_result *res, loom_err *e);
/*
 * Copy n slices into the caller's buffers. Each requested rectangle may be any rectangle the
 * stored slices of that tensor version cover together (re-layout reload). device names the
 * emulated device the buffers belong to ("" = none): a job whose slices were loaded onto a
 * device and not displaced there since is found on LOOM_STATE_DEVICE and nothing is copied.
 * Fails with LOOM_ENOENT naming the key when a rectangle is not covered, LOOM_ECORRUPT naming
 * the key when a disk slice fails its checksum; the caller's buffers may then be partly written.
 */
int loom_state_load(loom_state_client *c, const loom_state_io *io, size_t n, const char *device,
                    loom_state_result *res, loom_err *e);
/* Ask the daemon to pull `job`'s slices up to the host tier ahead of use. Returns when the hint
 * is queued; the pull runs in the daemon. A load that comes while it runs waits for it. */
int loom_state_prefetch(loom_state_client *c, const char *job, loom_err *e);
/* Tell the daemon the predicted order of the next jobs (first = next to run). Host->disk
 * eviction picks the job whose next use is furthest away in this order (absent = furthest). */
int loom_state_order(loom_state_client *c, const char *const *jobs, size_t n, loom_err *e);
/* Forget a job's slices (all versions when version = UINT64_MAX, else versions <= version). */
int loom_state_drop(loom_state_client *c, const char *job, uint64_t version, loom_err *e);
/* Usage per job and tier. */
int loom_state_stat(loom_state_client *c, loom_state_stats *out, loom_err *e);

/* ---- CUDA device tier -------------------------------------------------------------------
 *
 * Tensors in GPU memory, through the CUDA runtime loaded with dlopen at run time (libcudart.so,
 * .so.13, .so.12, .so.11, or the file $LOOM_CUDART names; loom never links it). The client owns
 * a staging memfd of two buckets (default 64 MiB each), registered with cudaHostRegister (pinned)
 * and mapped by the daemon like any other buffer, and a CUDA stream of its own. An offload copies
 * bucket i+1 device -> staging (cudaMemcpyAsync) while the daemon stores bucket i from the other
 * half; a load has the daemon fill one half while the other half goes staging -> device. A
 * bucket is whole tensors; a tensor bigger than the bucket is a bucket of its own.
 *
 * io[i].ptr is a device pointer on CUDA device `device` and io[i].fd must be -1. The call
 * returns when every copy it issued is complete (the stream is synchronized), with res->path
 * "cuda" and res->buckets the number of daemon requests. Each bucket is one request, all or
 * nothing on its own: a call that fails at bucket k leaves buckets < k stored (an offload that
 * is retried finds them as dedup_bytes). Loads never count as device resident (the staging
 * buffer is the client's). Errors: LOOM_EIO "no CUDA runtime: ...", LOOM_ENOENT "no CUDA
 * device: ...", LOOM_EIO naming the CUDA call that failed. The caller orders its own streams
 * before the call (e.g. torch.cuda.current_stream().synchronize()).
 */

/* The number of CUDA devices (> 0), or a negative LOOM_E* with the reason in e. lib (may be
 * NULL) gets the runtime file that was loaded. */
int loom_state_cuda_probe(char *lib, size_t len, loom_err *e);
int loom_state_cuda_offload(loom_state_client *c, const loom_state_io *io, size_t n, int device,
                            loom_state_tier tier, loom_state_result *res, loom_err *e);
int loom_state_cuda_load(loom_state_client *c, const loom_state_io *io, size_t n, int device,
                         loom_state_result *res, loom_err *e);
/* Bucket size of the client's CUDA path (rounded up to 4 KiB; 0: the default, 64 MiB). Takes
 * effect at the next CUDA call. */
void loom_state_cuda_bucket(loom_state_client *c, uint64_t bytes);

/* ---- daemon ---------------------------------------------------------------------------- */

typedef struct loom_state_cfg {
        const char *dir;       /* disk tier directory (created); the socket defaults to dir/sock */
        const char *sock_path; /* NULL: <dir>/loom-state.sock */
        uint64_t host_bytes;   /* host tier capacity (default 1 GiB) */
        uint64_t disk_bytes;   /* disk tier capacity (default 16 GiB) */
        uint64_t device_bytes; /* per emulated device (default 0 = device residency off) */
        int no_mlock;          /* do not try to mlock the host pool */
        long group;            /* gid whose members may touch every job's state; -1 (default):
                                * only the uid that first stored a job's state (SO_PEERCRED) */
        /* Connections (a local user must not lock others out; docs/state.md). 0: the default;
         * a timeout < 0: none. */
        int max_conns;         /* open at once (default 256) */
        int max_conns_per_uid; /* open at once from one uid (default 64) */
        double idle_timeout_s; /* closed after this long with no request (default 300 s);
                                * the C client reconnects by itself */
        double msg_timeout_s;  /* a request, once its first byte is in, must arrive whole
                                * within this, and each reply be taken (default 30 s) */
        void (*log)(void *arg, const char *line); /* events and warnings; may be NULL */
        void *log_arg;
} loom_state_cfg;

#define LOOM_STATE_MAX_CONNS 256
#define LOOM_STATE_MAX_CONNS_PER_UID 64
#define LOOM_STATE_IDLE_TIMEOUT_S 300.0
#define LOOM_STATE_MSG_TIMEOUT_S 30.0

void loom_state_cfg_default(loom_state_cfg *cfg);
/* A size in bytes: a number (a fraction allowed) and an optional binary suffix K, M, G, T or P
 * (either case; 1K = 1024). Returns 0, or LOOM_EINVAL for anything else (a sign, another
 * suffix, more than 2^60 bytes) and leaves *out unchanged. */
int loom_state_parse_bytes(const char *text, uint64_t *out);

typedef struct loom_state_daemon loom_state_daemon;

/* Open (and recover) the disk tier, allocate the host pool, bind the socket. Slices found on disk
 * with a valid header are indexed; unfinished writes (temporary files) are removed. */
int loom_state_daemon_new(const loom_state_cfg *cfg, loom_state_daemon **out, loom_err *e);
/* Serve until loom_state_daemon_stop() is called (from another thread). */
int loom_state_daemon_run(loom_state_daemon *d, loom_err *e);
void loom_state_daemon_stop(loom_state_daemon *d);
void loom_state_daemon_free(loom_state_daemon *d);
const char *loom_state_daemon_sock(const loom_state_daemon *d);

/* ---- bench ----------------------------------------------------------------------------- */

typedef struct loom_state_bench_cfg {
        const char *dir;       /* scratch directory on the disk to measure */
        uint64_t total_bytes;  /* load figure: bytes moved (default 1 GiB) */
        uint64_t tensor_bytes; /* load figure: per tensor (default 64 MiB) */
        uint64_t switch_bytes; /* prefetch and cold/warm figures: one job's state */
        int repeats;           /* best of N (default 5) */
        int quick;             /* smaller sizes (tests) */
} loom_state_bench_cfg;

typedef struct loom_state_bench_result {
        double load_gbps, memcpy_gbps;
        double disk_read_gbps, dd_direct_gbps;
        double dedup_ratio;
        double prefetch_hidden_fraction; /* the intervening phase 2x the cold load + 50 ms */
        double switch_noprefetch_s, switch_prefetch_s;
        /* The same with the intervening phase at LOOM_STATE_BENCH_PHASES fractions of the cold
         * load (0.25, 0.5, 1, 2): a phase shorter than the load leaves the rest to the load. */
        double phase_fraction[4], hidden_at[4], switch_at_s[4];
        double cold_switch_s, warm_switch_s; /* 7B-class scaled state: from disk vs from host */
        uint64_t state_bytes;                /* bytes of the scaled 7B-class state */
        uint64_t state_scale;                /* the full state is this many times larger */
        int host_locked;
        char dd_note[160];
} loom_state_bench_result;

/* Run the figures with a private daemon in this process's child threads. */
int loom_state_bench(const loom_state_bench_cfg *cfg, loom_state_bench_result *res, loom_err *e);
/* Print the figures to f: the text table of bench/state.sh or one JSON object. */
void loom_state_bench_print(FILE *f, const loom_state_bench_result *r, int json);

/* ---- CUDA bench (`loom-state bench --device cuda`) ------------------------------------- */

typedef struct loom_state_gpu_bench_cfg {
        const char *dir;       /* scratch directory of the private daemon */
        uint64_t bytes;        /* one state in GPU memory (default 4 GiB) */
        uint64_t tensor_bytes; /* per tensor (default 64 MiB; under 1 GiB: bytes / 16) */
        uint64_t bucket_bytes; /* the client's bucket (default 64 MiB) */
        int device;            /* CUDA device ordinal */
        int repeats;           /* best of N (default 3) */
} loom_state_gpu_bench_cfg;

typedef struct loom_state_gpu_bench_result {
        char lib[256]; /* the CUDA runtime loaded */
        int device;
        uint64_t bytes;
        double offload_gbps, load_gbps;              /* GPU -> host tier, host tier -> GPU */
        double pinned_d2h_gbps, pinned_h2d_gbps;     /* cudaMemcpy to/from cudaMallocHost */
        double pageable_d2h_gbps, pageable_h2d_gbps; /* cudaMemcpy to/from malloc */
        double switch_gbps;                          /* offload one state while loading another */
        double switch_s;
        uint32_t buckets; /* per offload of one state */
        int host_locked;
} loom_state_gpu_bench_result;

/* Offload and load cfg->bytes of GPU memory through a private daemon (in this process's threads)
 * over the CUDA path, with the pinned and pageable cudaMemcpy baselines and a switch (two
 * clients, two streams) in the same run. Every load is checked byte for byte. Fails with "no
 * CUDA runtime: ..." / "no CUDA device: ..." where there is none. */
int loom_state_gpu_bench(const loom_state_gpu_bench_cfg *cfg, loom_state_gpu_bench_result *res,
                         loom_err *e);
void loom_state_gpu_bench_print(FILE *f, const loom_state_gpu_bench_result *r, int json);

#endif
