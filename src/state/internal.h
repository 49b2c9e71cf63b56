/*
 * internal.h - what the files of src/state share: the wire format (wire.c), the store with its
 * three tiers (store.c) and the daemon around it (daemon.c).
 */
#ifndef LOOM_STATE_INTERNAL_H
#define LOOM_STATE_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "loom/state.h"

#define ST_ALIGN 4096u         /* O_DIRECT and host-pool granularity */
#define ST_HDR 4096u           /* slice file header, one aligned block */
#define ST_MAX_FDS 64          /* descriptors per request */
#define ST_MAX_MSG (64u << 20) /* control message bytes */
#define ST_IO_CHUNK (8u << 20) /* O_DIRECT request size */

static inline uint64_t st_round(uint64_t n)
{
        return (n + ST_ALIGN - 1) & ~(uint64_t)(ST_ALIGN - 1);
}

double loom__state_now(void);

/* ---- wire.c: length-prefixed JSON messages, descriptors by SCM_RIGHTS ------------------ */

/* Send the JSON message (and nfds descriptors with its first byte). */
int loom__state_send(int sock, json_t *msg, const int *fds, int nfds, loom_err *e);
/* Receive one message; *fds gets up to ST_MAX_FDS descriptors (caller closes them). Returns
 * LOOM_EIO with msg "closed" on a clean end of stream. */
int loom__state_recv(int sock, json_t **msg, int *fds, int *nfds, loom_err *e);
/* The same, with the rest of the message due within limit_s seconds of its first byte
 * (LOOM_ETIMEDOUT otherwise); limit_s <= 0: no limit. */
int loom__state_recv_by(int sock, double limit_s, json_t **msg, int *fds, int *nfds, loom_err *e);
json_t *loom__state_key_json(const loom_state_key *k);
int loom__state_key_parse(json_t *j, const char *field, loom_state_key *k, loom_err *e);
/* A job name: 1..cap-1 bytes, no '/', no control characters (it is written into DIR/owners and
 * the log one line per record). LOOM_EINVAL on field otherwise. */
int loom__state_job_check(const char *job, size_t cap, const char *field, loom_err *e);
/* "job/v3/name[r0:r1,c0:c1]/dtype", the key as messages name it. */
void loom__state_key_str(const loom_state_key *k, char *buf, size_t len);

/* ---- store.c: the index and the tiers --------------------------------------------------- */

typedef struct st_slice {
        loom_state_key key;
        uint64_t bytes;
        uint32_t crc;      /* CRC32C of the bytes */
        bool on_host;      /* host_off valid */
        uint64_t host_off; /* in the pool; the allocation is st_round(bytes) */
        bool on_disk;      /* file <id>.slc is complete and fsynced */
        uint64_t id;       /* file name */
        uint64_t used;     /* store tick of the last use (LRU among equals) */
        int pin;           /* taking part in the running operation: never evicted */
} st_slice;

/* Where a request's buffer lives: the file (device and inode numbers) and the offset in it. */
typedef struct st_where {
        uint64_t fdev, fino, off;
} st_where;

typedef struct st_dev_item { /* one tensor slice of a resident state, and where it sits */
        loom_state_key key;
        st_where at;
} st_dev_item;

typedef struct st_dev_rec { /* a job's state resident on an emulated device */
        char dev[64];
        char job[LOOM_STATE_JOB_MAX];
        uint64_t version, bytes, used;
        st_dev_item *items; /* exactly what the load that made it resident asked for; owned */
        size_t nitems;
} st_dev_rec;

typedef struct st_extent {
        uint64_t off, len;
} st_extent;

typedef struct st_store {
        loom_state_cfg cfg;
        char dir[4096];
        pthread_mutex_t mu;
        uint8_t *pool; /* host tier, cfg.host_bytes, page aligned */
        int locked;
        st_extent *free;
        size_t nfree, capfree;
        uint64_t host_used, disk_used;
        st_slice **slices;
        size_t nslices, capslices;
        st_dev_rec *devs;
        size_t ndevs, capdevs;
        char (*order)[LOOM_STATE_JOB_MAX]; /* predicted next jobs, soonest first */
        size_t norder, caporder;
        uint64_t next_id, tick;
        uint64_t evictions, prefetches, prefetch_bytes;
        int copy_threads; /* threads a large copy is cut over (store.c, par_copy) */
} st_store;

/* One buffer of a request, already mapped into the daemon. */
typedef struct st_buf {
        loom_state_key key;
        uint8_t *p;
        uint64_t len;
        st_where at;
} st_buf;

/* A slice file: one ST_HDR block holding this header (zero padded), then the bytes, padded to
 * ST_ALIGN. hdr_crc is the CRC32C of the header with hdr_crc = 0. */
typedef struct st_fhdr {
        char magic[8]; /* "LOOMSLC1" */
        loom_state_key key;
        uint64_t bytes;
        uint32_t crc; /* of the bytes */
        uint32_t hdr_crc;
} st_fhdr;

int loom__store_open(st_store *s, const loom_state_cfg *cfg, loom_err *e);

/* Recovery, in pieces a test can feed from memory (store.c). */
enum { ST_NAME_OTHER, ST_NAME_SLICE, ST_NAME_TMP };
/* What a directory entry is: "<16 lower-case hex>.slc" (ST_NAME_SLICE, *id), ".tmp" (an
 * unfinished write), or anything else (not the store's). */
int loom__store_name_kind(const char *name, uint64_t *id);
/* The header block of a slice file for k (blk: ST_HDR bytes). */
void loom__store_header_make(const loom_state_key *k, uint64_t bytes, uint32_t crc,
                             uint8_t blk[ST_HDR]);
/* Check a slice file's header (blk[0..len), the file's size): magic, header CRC, a key that
 * loom_state_key_check accepts, bytes and size that match it. 0 and *h, or LOOM_ECORRUPT
 * naming path. */
int loom__store_header_parse(const uint8_t *blk, size_t len, uint64_t file_size, const char *path,
                             st_fhdr *h, loom_err *e);
/* Index slice file id with checked header h: 0, 1 when the id cannot be used (taken, or the
 * last one), or LOOM_ENOMEM. */
int loom__store_index(st_store *s, uint64_t id, const st_fhdr *h, loom_err *e);
/* After every file is indexed: overlapping slices resolved (the newer kept), a log line. */
int loom__store_recover_finish(st_store *s, loom_err *e);
void loom__store_close(st_store *s);
/* The operations take s->mu themselves. */
int loom__store_offload(st_store *s, const st_buf *b, size_t n, loom_state_tier tier,
                        loom_state_result *res, loom_err *e);
int loom__store_load(st_store *s, const st_buf *b, size_t n, const char *dev,
                     loom_state_result *res, loom_err *e);
/* Pull one host-absent slice of `job` (latest version) up from disk. Returns 1 when it moved
 * one, 0 when nothing is left, < 0 on error. */
int loom__store_prefetch_step(st_store *s, const char *job, loom_err *e);
int loom__store_order(st_store *s, const char *const *jobs, size_t n);
/* Forget every slice of `job` up to `version`; fsyncs the directory after unlinking files. */
int loom__store_drop(st_store *s, const char *job, uint64_t version, loom_err *e);
int loom__store_stat(st_store *s, loom_state_stats *out, loom_err *e);
/* Read a slice's file into an aligned buffer (the bench's disk figure uses it). */
int loom__store_read_file(st_store *s, uint64_t id, uint8_t *dst, uint64_t bytes, loom_err *e);
/* Path of slice file id. */
void loom__store_path(const st_store *s, uint64_t id, const char *ext, char *buf, size_t len);

/* The daemon's store (the bench reads slice files through it). */
st_store *loom__state_daemon_store(loom_state_daemon *d);
/* A daemon on cfg served by a new thread of this process (the benches): 0, or the error, with
 * nothing left running. loom__state_unserve stops it, joins the thread and frees it. */
int loom__state_serve(const loom_state_cfg *cfg, loom_state_daemon **d, pthread_t *thr,
                      loom_err *e);
void loom__state_unserve(loom_state_daemon *d, pthread_t thr);

/* ---- client.c and client_cuda.c ------------------------------------------------------- */

/* Check each io's key, length and buffer (fields io[i]). */
int loom__state_check_io(const loom_state_io *io, size_t n, loom_err *e);
/* One offload (load = 0) or load (load = 1) request of buffers in memfds or plain memory. */
int loom__state_transfer(loom_state_client *c, const loom_state_io *io, size_t n, int load,
                         loom_state_tier tier, const char *device, loom_state_result *res,
                         loom_err *e);
struct st_client_cuda;
/* The client's CUDA state (NULL until its first CUDA call); freed with the client. */
struct st_client_cuda **loom__state_client_cu(loom_state_client *c);
void loom__state_cuda_free(struct st_client_cuda *cu);

/* ---- peers and job owners (peer.c) ------------------------------------------------------ */

#include <sys/types.h>

typedef struct st_peer {
        uid_t uid;
        gid_t gid;
} st_peer;
typedef struct st_owners st_owners;
/* An empty owner table for cfg (dir, group, log); nothing read or written yet. */
int loom__owners_new(st_owners **out, const loom_state_cfg *cfg, loom_err *e);
/* The owners recorded in cfg->dir/owners (peer.c says the format). Never fails on the file's
 * content: a bad line is skipped and logged, a job claimed by two uids is orphaned. Fails only
 * for memory. A missing file is no owners. */
int loom__owners_open(st_owners **out, const loom_state_cfg *cfg, loom_err *e);
/* Add the lines of text[0..len) to o, as loom__owners_open does with the file's bytes. */
int loom__owners_parse(st_owners *o, const char *text, size_t len, loom_err *e);
/* The file's text for what o holds (orphans left out): *out malloc'd, the caller frees it. */
int loom__owners_format(st_owners *o, char **out, size_t *len);
/* 1 and *uid when job is owned, -1 when it is orphaned, 0 when nobody owns it. */
int loom__owners_lookup(st_owners *o, const char *job, uid_t *uid);
/* job has state but no owner: from now on only the group may touch it. true if it was made an
 * orphan (it had no entry), false if it has one (or memory ran out). */
bool loom__owners_orphan(st_owners *o, const char *job);
void loom__owners_close(st_owners *o);
int loom__peer_cred(int fd, st_peer *p); /* SO_PEERCRED */
/* 0 when peer may touch job's state; claim: an unowned job becomes the peer's, recorded durably
 * in DIR/owners before this returns. LOOM_ENOENT (field "job") when another uid owns it or it
 * is orphaned (and the peer is not in the group); LOOM_EIO when the claim cannot be recorded
 * (nothing changed then). o NULL: everything allowed. */
int loom__owners_check(st_owners *o, const st_peer *p, const char *job, bool claim, loom_err *e);
/* job's state was dropped entirely: it has no owner any more (DIR/owners rewritten). The entry
 * is gone from memory even when the rewrite fails (the error says why). */
int loom__owners_release(st_owners *o, const char *job, loom_err *e);

#endif
