/*
 * store.c - the index of slices and the three tiers of loom-state.
 *
 * A slice's life:
 *
 *     offload ----> [host] --evict/offload(disk)--> [host+disk] --drop host copy--> [disk]
 *                     ^                                                     |
 *                     +--------- promote (load, prefetch; CRC checked) -----+
 *
 * Invariants (under mu): a slice in the index is on the host, on disk, or both; its bytes there
 * are complete and match crc. A slice enters the index only after every byte is copied (host)
 * or written, fsynced and renamed (disk), so a client that dies mid-request or a daemon killed
 * mid-write leaves nothing half-written visible. host_used and disk_used are the sums of the
 * rounded allocations. Eviction (host -> disk) takes the unpinned host slice whose job is
 * predicted to run furthest in the future (loom_state_order; unknown jobs first), oldest use
 * first among equals.
 *
 * The device tier is the caller's memory: the store only records which slices of which job were
 * last loaded onto which emulated device, and where in the caller's buffers (st_dev_rec), so a
 * load of exactly those again copies nothing; any other load copies.
 *
 * One mutex guards everything, copies included: operations are synchronous and a node has a
 * handful of clients, so the simpler invariant wins over overlapping copies of different jobs.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "loom/sync.h"

#define MAGIC "LOOMSLC1"

static void logf_(st_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(st_store *s, const char *fmt, ...)
{
        if (!s->cfg.log)
                return;
        char line[640];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
        s->cfg.log(s->cfg.log_arg, line);
}

void loom__store_path(const st_store *s, uint64_t id, const char *ext, char *buf, size_t len)
{
        snprintf(buf, len, "%s/%016" PRIx64 ".%s", s->dir, id, ext);
}

/* ---- host pool: first fit over a sorted free list, coalescing on free ------------------- */

static int pool_alloc(st_store *s, uint64_t len, uint64_t *off)
{
        for (size_t i = 0; i < s->nfree; i++)
                if (s->free[i].len >= len) {
                        *off = s->free[i].off;
                        s->free[i].off += len;
                        s->free[i].len -= len;
                        if (!s->free[i].len) {
                                memmove(&s->free[i], &s->free[i + 1],
                                        (s->nfree - i - 1) * sizeof *s->free);
                                s->nfree--;
                        }
                        s->host_used += len;
                        return 0;
                }
        return LOOM_ERANGE;
}

static int pool_free(st_store *s, uint64_t off, uint64_t len)
{
        size_t i = 0;
        while (i < s->nfree && s->free[i].off < off)
                i++;
        s->host_used -= len;
        if (i > 0 && s->free[i - 1].off + s->free[i - 1].len == off) {
                s->free[i - 1].len += len;
                if (i < s->nfree && off + len == s->free[i].off) {
                        s->free[i - 1].len += s->free[i].len;
                        memmove(&s->free[i], &s->free[i + 1], (s->nfree - i - 1) * sizeof *s->free);
                        s->nfree--;
                }
                return 0;
        }
        if (i < s->nfree && off + len == s->free[i].off) {
                s->free[i].off = off;
                s->free[i].len += len;
                return 0;
        }
        if (loom_reserve(&s->free, &s->capfree, s->nfree + 1, sizeof *s->free, 16))
                return LOOM_ENOMEM; /* the bytes leak from the pool; never on a sane heap */
        memmove(&s->free[i + 1], &s->free[i], (s->nfree - i) * sizeof *s->free);
        s->free[i] = (st_extent){off, len};
        s->nfree++;
        return 0;
}

static void host_drop(st_store *s, st_slice *sl)
{
        if (sl->on_host) {
                pool_free(s, sl->host_off, st_round(sl->bytes));
                sl->on_host = false;
        }
}

/* ---- the index -------------------------------------------------------------------------- */

static bool same_tensor(const loom_state_key *a, const loom_state_key *b)
{
        return a->version == b->version && !strcmp(a->job, b->job) && !strcmp(a->name, b->name) &&
               !strcmp(a->dtype, b->dtype);
}

static bool same_rect(const loom_state_key *a, const loom_state_key *b)
{
        return a->r0 == b->r0 && a->r1 == b->r1 && a->c0 == b->c0 && a->c1 == b->c1;
}

/* Intersection of two rectangles; 0 elements when disjoint. */
static uint64_t inter(const loom_state_key *a, const loom_state_key *b, uint64_t q[4])
{
        q[0] = a->r0 > b->r0 ? a->r0 : b->r0;
        q[1] = a->r1 < b->r1 ? a->r1 : b->r1;
        q[2] = a->c0 > b->c0 ? a->c0 : b->c0;
        q[3] = a->c1 < b->c1 ? a->c1 : b->c1;
        if (q[0] >= q[1] || q[2] >= q[3])
                return 0;
        return (q[1] - q[0]) * (q[3] - q[2]);
}

static st_slice *find_exact(st_store *s, const loom_state_key *k)
{
        for (size_t i = 0; i < s->nslices; i++)
                if (same_tensor(&s->slices[i]->key, k) && same_rect(&s->slices[i]->key, k))
                        return s->slices[i];
        return NULL;
}

static size_t next_use(const st_store *s, const char *job)
{
        for (size_t i = 0; i < s->norder; i++)
                if (!strcmp(s->order[i], job))
                        return i;
        return SIZE_MAX;
}

/* ---- disk files ------------------------------------------------------------------------- */

static int fsync_dir(st_store *s, loom_err *e)
{
        int fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) != 0) {
                int err = errno;
                if (fd >= 0)
                        close(fd);
                return loom_err_set(e, LOOM_EIO, "dir", "fsync %s: %s", s->dir, strerror(err));
        }
        close(fd);
        return 0;
}

static int open_direct(const char *path, int flags, loom_err *e)
{
        /* 0600: a slice is a job's state, and only its owner may read it, through the socket */
        int fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EINVAL) /* a file system without O_DIRECT (tmpfs) */
                fd = open(path, flags | O_CLOEXEC, 0600);
        if (fd < 0)
                loom_err_set(e, LOOM_EIO, "dir", "open %s: %s", path, strerror(errno));
        return fd;
}

static int pwrite_all(int fd, const uint8_t *p, uint64_t n, uint64_t off, const char *path,
                      loom_err *e)
{
        while (n) {
                size_t k = n > ST_IO_CHUNK ? ST_IO_CHUNK : (size_t)n;
                ssize_t w = pwrite(fd, p, k, (off_t)off);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return loom_err_set(e, errno == ENOSPC ? LOOM_ERANGE : LOOM_EIO, "disk",
                                            "write %s: %s", path,
                                            w < 0 ? strerror(errno) : "short write");
                p += w, n -= (uint64_t)w, off += (uint64_t)w;
        }
        return 0;
}

static int pread_all(int fd, uint8_t *p, uint64_t n, uint64_t off, const char *path, loom_err *e)
{
        while (n) {
                size_t k = n > ST_IO_CHUNK ? ST_IO_CHUNK : (size_t)n;
                ssize_t r = pread(fd, p, k, (off_t)off);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return loom_err_set(e, LOOM_EIO, "disk", "read %s: %s", path,
                                            r < 0 ? strerror(errno) : "file too short");
                p += r, n -= (uint64_t)r, off += (uint64_t)r;
        }
        return 0;
}

/* Write a host slice to <id>.tmp, fsync, rename to <id>.slc, fsync the directory. */
static int write_file(st_store *s, st_slice *sl, loom_err *e)
{
        uint64_t need = ST_HDR + st_round(sl->bytes);
        if (s->disk_used + need > s->cfg.disk_bytes) {
                char k[400];
                loom__state_key_str(&sl->key, k, sizeof k);
                return loom_err_set(e, LOOM_ERANGE, "disk",
                                    "disk tier full: %s needs %" PRIu64 " bytes, %" PRIu64
                                    " of %" PRIu64 " free",
                                    k, need, s->cfg.disk_bytes - s->disk_used, s->cfg.disk_bytes);
        }
        char tmp[4200], fin[4200];
        loom__store_path(s, sl->id, "tmp", tmp, sizeof tmp);
        loom__store_path(s, sl->id, "slc", fin, sizeof fin);
        uint8_t *hdr;
        if (posix_memalign((void **)&hdr, ST_ALIGN, ST_HDR))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        loom__store_header_make(&sl->key, sl->bytes, sl->crc, hdr);
        int fd = open_direct(tmp, O_WRONLY | O_CREAT | O_TRUNC, e);
        int rc = fd < 0 ? LOOM_EIO : 0;
        if (!rc)
                rc = pwrite_all(fd, hdr, ST_HDR, 0, tmp, e);
        if (!rc)
                rc = pwrite_all(fd, s->pool + sl->host_off, st_round(sl->bytes), ST_HDR, tmp, e);
        if (!rc && fdatasync(fd) != 0)
                rc = loom_err_set(e, LOOM_EIO, "disk", "fdatasync %s: %s", tmp, strerror(errno));
        if (fd >= 0)
                close(fd);
        free(hdr);
        if (!rc && rename(tmp, fin) != 0)
                rc = loom_err_set(e, LOOM_EIO, "disk", "rename %s: %s", tmp, strerror(errno));
        if (!rc)
                rc = fsync_dir(s, e);
        if (rc) {
                unlink(tmp);
                return rc;
        }
        sl->on_disk = true;
        s->disk_used += need;
        return 0;
}

static void disk_drop(st_store *s, st_slice *sl)
{
        if (!sl->on_disk)
                return;
        char fin[4200];
        loom__store_path(s, sl->id, "slc", fin, sizeof fin);
        unlink(fin);
        sl->on_disk = false;
        s->disk_used -= ST_HDR + st_round(sl->bytes);
}

void loom__store_header_make(const loom_state_key *k, uint64_t bytes, uint32_t crc,
                             uint8_t blk[ST_HDR])
{
        st_fhdr h;
        memset(&h, 0, sizeof h);
        memcpy(h.magic, MAGIC, 8);
        h.key = *k;
        h.bytes = bytes;
        h.crc = crc;
        h.hdr_crc = loom_sync_crc32c(0, &h, sizeof h);
        memset(blk, 0, ST_HDR);
        memcpy(blk, &h, sizeof h);
}

int loom__store_header_parse(const uint8_t *blk, size_t len, uint64_t file_size, const char *path,
                             st_fhdr *h, loom_err *e)
{
        if (len < sizeof *h)
                return loom_err_set(e, LOOM_ECORRUPT, path, "%s: header of %zu bytes", path, len);
        memcpy(h, blk, sizeof *h);
        uint32_t want = h->hdr_crc;
        h->hdr_crc = 0;
        bool sound = !memcmp(h->magic, MAGIC, 8) && loom_sync_crc32c(0, h, sizeof *h) == want;
        h->hdr_crc = want;
        if (!sound)
                return loom_err_set(e, LOOM_ECORRUPT, path, "%s: bad slice header", path);
        /* the CRC says the header is what was written, not that a writer of another version
         * (or a bug) wrote a key loom accepts today: the key is checked as a request's is */
        loom_err ke;
        if (loom_state_key_check(&h->key, path, &ke) || loom_state_key_bytes(&h->key) != h->bytes)
                return loom_err_set(e, LOOM_ECORRUPT, path, "%s: bad key in header", path);
        if (file_size != ST_HDR + st_round(h->bytes))
                return loom_err_set(e, LOOM_ECORRUPT, path,
                                    "%s: size %" PRIu64 ", expected %" PRIu64, path, file_size,
                                    ST_HDR + st_round(h->bytes));
        return 0;
}

static int read_header(int fd, const char *path, st_fhdr *h, loom_err *e)
{
        struct stat st;
        if (fstat(fd, &st) != 0)
                return loom_err_set(e, LOOM_EIO, path, "fstat %s: %s", path, strerror(errno));
        /* files an older daemon left group- or world-readable are closed to other users */
        if ((st.st_mode & 077) && fchmod(fd, st.st_mode & 0700) != 0)
                return loom_err_set(e, LOOM_EIO, path, "chmod %s: %s", path, strerror(errno));
        uint8_t *blk;
        if (posix_memalign((void **)&blk, ST_ALIGN, ST_HDR))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int rc = pread_all(fd, blk, ST_HDR, 0, path, e);
        if (!rc)
                rc = loom__store_header_parse(blk, ST_HDR, (uint64_t)st.st_size, path, h, e);
        free(blk);
        return rc;
}

typedef struct rd_job {
        int fd;
        uint8_t *dst;
        uint64_t bytes, first; /* chunks first, first + ST_READERS, ... */
        const char *path;
        int rc;
        loom_err e;
} rd_job;

#define ST_READERS 4

static void *reader(void *arg)
{
        rd_job *j = arg;
        for (uint64_t o = j->first * ST_IO_CHUNK; o < j->bytes && !j->rc;
             o += (uint64_t)ST_READERS * ST_IO_CHUNK) {
                uint64_t k = j->bytes - o < ST_IO_CHUNK ? j->bytes - o : ST_IO_CHUNK;
                j->rc = pread_all(j->fd, j->dst + o, k, ST_HDR + o, j->path, &j->e);
        }
        return NULL;
}

/* Read a slice's data with ST_READERS requests in flight: a disk with a deep queue (NVMe)
 * delivers its rate only when it has several. */
int loom__store_read_file(st_store *s, uint64_t id, uint8_t *dst, uint64_t bytes, loom_err *e)
{
        char fin[4200];
        loom__store_path(s, id, "slc", fin, sizeof fin);
        int fd = open_direct(fin, O_RDONLY, e);
        if (fd < 0)
                return LOOM_EIO;
        uint64_t len = st_round(bytes);
        rd_job jobs[ST_READERS];
        pthread_t t[ST_READERS];
        int started = 0, rc = 0;
        for (int i = 0; i < ST_READERS; i++) {
                jobs[i] =
                    (rd_job){.fd = fd, .dst = dst, .bytes = len, .first = (uint64_t)i, .path = fin};
                if (i == 0 || (uint64_t)i * ST_IO_CHUNK >= len ||
                    pthread_create(&t[i], NULL, reader, &jobs[i]) != 0)
                        continue;
                started |= 1 << i;
        }
        reader(&jobs[0]);
        for (int i = 1; i < ST_READERS; i++)
                if (started & (1 << i))
                        pthread_join(t[i], NULL);
                else if ((uint64_t)i * ST_IO_CHUNK < len)
                        reader(&jobs[i]); /* no thread: read its share here */
        for (int i = 0; i < ST_READERS && !rc; i++)
                if (jobs[i].rc) {
                        rc = jobs[i].rc;
                        if (e)
                                *e = jobs[i].e;
                }
        close(fd);
        return rc;
}

/* ---- eviction and promotion ------------------------------------------------------------- */

static st_slice *pick_victim(st_store *s)
{
        st_slice *best = NULL;
        size_t best_rank = 0;
        for (size_t i = 0; i < s->nslices; i++) {
                st_slice *sl = s->slices[i];
                if (!sl->on_host || sl->pin)
                        continue;
                size_t r = next_use(s, sl->key.job);
                if (!best || r > best_rank || (r == best_rank && sl->used < best->used))
                        best = sl, best_rank = r;
        }
        return best;
}

/* Free `len` contiguous host bytes, writing victims to disk first. */
static int make_room(st_store *s, uint64_t len, uint64_t *off, loom_err *e)
{
        uint64_t evictable = 0;
        for (size_t i = 0; i < s->nslices; i++)
                if (s->slices[i]->on_host && !s->slices[i]->pin)
                        evictable += st_round(s->slices[i]->bytes);
        if (s->cfg.host_bytes - s->host_used + evictable < len)
                return loom_err_set(e, LOOM_ERANGE, "host",
                                    "host tier full: need %" PRIu64 " bytes, %" PRIu64
                                    " free and %" PRIu64 " evictable of %" PRIu64,
                                    len, s->cfg.host_bytes - s->host_used, evictable,
                                    s->cfg.host_bytes);
        while (pool_alloc(s, len, off) != 0) {
                st_slice *v = pick_victim(s);
                if (!v)
                        return loom_err_set(e, LOOM_ERANGE, "host",
                                            "host tier full: no contiguous %" PRIu64
                                            " bytes after evicting everything unpinned",
                                            len);
                if (!v->on_disk) {
                        int rc = write_file(s, v, e);
                        if (rc)
                                return rc;
                }
                char k[400];
                loom__state_key_str(&v->key, k, sizeof k);
                logf_(s, "evict %s to disk (next use rank %zu)", k, next_use(s, v->key.job));
                host_drop(s, v);
                s->evictions++;
        }
        return 0;
}

/* Bring a disk slice into the host tier, checking its CRC. */
static int promote(st_store *s, st_slice *sl, loom_err *e)
{
        uint64_t off;
        int rc = make_room(s, st_round(sl->bytes), &off, e);
        if (rc)
                return rc;
        rc = loom__store_read_file(s, sl->id, s->pool + off, sl->bytes, e);
        if (!rc && loom_sync_crc32c(0, s->pool + off, sl->bytes) != sl->crc) {
                char k[400], path[4200];
                loom__state_key_str(&sl->key, k, sizeof k);
                loom__store_path(s, sl->id, "slc", path, sizeof path);
                rc = loom_err_set(e, LOOM_ECORRUPT, k, "checksum mismatch in %s (slice %s)", path,
                                  k);
        }
        if (rc) {
                pool_free(s, off, st_round(sl->bytes));
                return rc;
        }
        sl->host_off = off;
        sl->on_host = true;
        return 0;
}

static void unpin_all(st_store *s)
{
        for (size_t i = 0; i < s->nslices; i++)
                s->slices[i]->pin = 0;
}

/* ---- copies over several threads --------------------------------------------------------- */

/*
 * One thread's memory copy bounds the host tier's rate (a 64 MiB bucket at ~10 GB/s; the GPU's
 * DMA into the staging runs at 55 GB/s: docs/gpu.md), so a copy of at least PAR_MIN bytes is cut
 * into page-aligned pieces over up to PAR_MAX threads, the caller's among them, their CRCs
 * joined (loom_sync_crc32c_combine). A thread that cannot start leaves its piece to the caller.
 */
enum { PAR_MIN = 8 << 20, PAR_MAX = 4 };

typedef struct par_piece {
        uint8_t *dst;
        const uint8_t *src;
        size_t len;
        bool crc;
        uint32_t c;
} par_piece;

static void *par_run(void *arg)
{
        par_piece *p = arg;
        if (p->crc)
                p->c = loom_sync_crc32c_copy(0, p->dst, p->src, p->len);
        else
                memcpy(p->dst, p->src, p->len);
        return NULL;
}

/* Copy len bytes from src to dst over up to `threads` threads; returns their CRC32C when crc,
 * else 0. */
static uint32_t par_copy(uint8_t *dst, const uint8_t *src, size_t len, bool crc, int threads)
{
        int t = len >= PAR_MIN ? threads : 1;
        size_t each = len / (size_t)t & ~(size_t)4095;
        par_piece pc[PAR_MAX];
        pthread_t th[PAR_MAX];
        bool started[PAR_MAX] = {false};
        for (int i = 0; i < t; i++)
                pc[i] = (par_piece){dst + (size_t)i * each, src + (size_t)i * each,
                                    i == t - 1 ? len - (size_t)i * each : each, crc, 0};
        for (int i = 1; i < t; i++)
                started[i] = pthread_create(&th[i], NULL, par_run, &pc[i]) == 0;
        par_run(&pc[0]);
        uint32_t c = pc[0].c;
        for (int i = 1; i < t; i++) {
                if (started[i])
                        pthread_join(th[i], NULL);
                else
                        par_run(&pc[i]);
                c = crc ? loom_sync_crc32c_combine(c, pc[i].c, pc[i].len) : 0;
        }
        return c;
}

/* ---- rectangle copies ------------------------------------------------------------------- */

/* Copy the elements of q (a rectangle inside both) from src (laid out as rect sk) to dst (laid
 * out as rect dk). */
static void copy_rect(uint8_t *dst, const loom_state_key *dk, const uint8_t *src,
                      const loom_state_key *sk, const uint64_t q[4], size_t es, int threads)
{
        uint64_t dw = (dk->c1 - dk->c0) * es, sw = (sk->c1 - sk->c0) * es;
        uint64_t w = (q[3] - q[2]) * es;
        uint8_t *d = dst + (q[0] - dk->r0) * dw + (q[2] - dk->c0) * es;
        const uint8_t *p = src + (q[0] - sk->r0) * sw + (q[2] - sk->c0) * es;
        if (w == dw && w == sw) {
                par_copy(d, p, (q[1] - q[0]) * w, false, threads);
                return;
        }
        for (uint64_t r = q[0]; r < q[1]; r++, d += dw, p += sw)
                memcpy(d, p, w);
}

/* ---- operations ------------------------------------------------------------------------- */

int loom__store_offload(st_store *s, const st_buf *b, size_t n, loom_state_tier tier,
                        loom_state_result *res, loom_err *e)
{
        if (tier != LOOM_STATE_HOST && tier != LOOM_STATE_DISK)
                return loom_err_set(e, LOOM_EINVAL, "tier", "offload goes to host or disk");
        memset(res, 0, sizeof *res);
        st_slice **fresh = calloc(n ? n : 1, sizeof *fresh);
        if (!fresh)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        pthread_mutex_lock(&s->mu);
        int rc = 0;
        uint64_t host_need = 0, disk_need = 0;
        /* 1. check: overlaps with stored slices or with each other, capacity */
        for (size_t i = 0; i < n && !rc; i++) {
                st_slice *x = find_exact(s, &b[i].key);
                bool dup = false;
                for (size_t j = 0; j < i && !dup; j++)
                        dup = same_tensor(&b[j].key, &b[i].key) && same_rect(&b[j].key, &b[i].key);
                if (x) {
                        x->pin = 1;
                        if (tier == LOOM_STATE_DISK && !x->on_disk)
                                disk_need += ST_HDR + st_round(x->bytes);
                        continue;
                }
                if (dup)
                        continue;
                uint64_t q[4];
                for (size_t j = 0; j < s->nslices && !rc; j++)
                        if (same_tensor(&s->slices[j]->key, &b[i].key) &&
                            inter(&s->slices[j]->key, &b[i].key, q)) {
                                char k[400], o[400];
                                loom__state_key_str(&b[i].key, k, sizeof k);
                                loom__state_key_str(&s->slices[j]->key, o, sizeof o);
                                rc = loom_err_set(e, LOOM_EEXIST, k,
                                                  "%s overlaps the stored slice %s", k, o);
                        }
                for (size_t j = 0; j < i && !rc; j++)
                        if (same_tensor(&b[j].key, &b[i].key) && inter(&b[j].key, &b[i].key, q)) {
                                char k[400];
                                loom__state_key_str(&b[i].key, k, sizeof k);
                                rc = loom_err_set(e, LOOM_EEXIST, k,
                                                  "%s overlaps another slice of the request", k);
                        }
                host_need += st_round(b[i].len);
                if (tier == LOOM_STATE_DISK)
                        disk_need += ST_HDR + st_round(b[i].len);
        }
        if (!rc && host_need > s->cfg.host_bytes)
                rc = loom_err_set(e, LOOM_ERANGE, "host",
                                  "host tier full: the request needs %" PRIu64
                                  " bytes, the tier holds %" PRIu64,
                                  host_need, s->cfg.host_bytes);
        if (!rc && disk_need > s->cfg.disk_bytes - s->disk_used)
                rc = loom_err_set(e, LOOM_ERANGE, "disk",
                                  "disk tier full: the request needs %" PRIu64 " bytes, %" PRIu64
                                  " of %" PRIu64 " free",
                                  disk_need, s->cfg.disk_bytes - s->disk_used, s->cfg.disk_bytes);
        /* 2. copy new slices into the host pool (not yet visible) */
        size_t nfresh = 0;
        for (size_t i = 0; i < n && !rc; i++) {
                if (find_exact(s, &b[i].key))
                        continue;
                bool dup = false;
                for (size_t j = 0; j < nfresh && !dup; j++)
                        dup = same_tensor(&fresh[j]->key, &b[i].key) &&
                              same_rect(&fresh[j]->key, &b[i].key);
                if (dup) {
                        res->dedup_bytes += b[i].len;
                        continue;
                }
                st_slice *sl = calloc(1, sizeof *sl);
                if (!sl) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                sl->key = b[i].key;
                sl->bytes = b[i].len;
                sl->pin = 1;
                sl->id = s->next_id++;
                rc = make_room(s, st_round(sl->bytes), &sl->host_off, e);
                if (rc) {
                        free(sl);
                        break;
                }
                sl->on_host = true;
                fresh[nfresh++] = sl;
                uint8_t *dst = s->pool + sl->host_off;
                sl->crc = par_copy(dst, b[i].p, sl->bytes, true, s->copy_threads);
                memset(dst + sl->bytes, 0, st_round(sl->bytes) - sl->bytes);
                res->bytes += sl->bytes;
        }
        /* 3. disk tier: write every slice of the request that is not there yet */
        for (size_t i = 0; i < nfresh && !rc && tier == LOOM_STATE_DISK; i++) {
                rc = write_file(s, fresh[i], e);
                res->disk_bytes += fresh[i]->bytes;
        }
        if (rc) {
                for (size_t i = 0; i < nfresh; i++) {
                        disk_drop(s, fresh[i]);
                        host_drop(s, fresh[i]);
                        free(fresh[i]);
                }
                unpin_all(s);
                pthread_mutex_unlock(&s->mu);
                free(fresh);
                return rc;
        }
        for (size_t i = 0; i < n && !rc; i++) {
                st_slice *x = find_exact(s, &b[i].key);
                if (!x)
                        continue;
                res->dedup_bytes += b[i].len;
                if (tier == LOOM_STATE_DISK && !x->on_disk && x->on_host) {
                        rc = write_file(s, x, e);
                        res->disk_bytes += x->bytes;
                }
        }
        /* 4. publish */
        if (!rc &&
            loom_reserve(&s->slices, &s->capslices, s->nslices + nfresh, sizeof *s->slices, 64))
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (rc) {
                for (size_t i = 0; i < nfresh; i++) {
                        disk_drop(s, fresh[i]);
                        host_drop(s, fresh[i]);
                        free(fresh[i]);
                }
        } else {
                for (size_t i = 0; i < nfresh; i++) {
                        fresh[i]->used = ++s->tick;
                        s->slices[s->nslices++] = fresh[i];
                }
                if (tier == LOOM_STATE_DISK) /* the caller asked for disk: free the host copy */
                        for (size_t i = 0; i < s->nslices; i++)
                                if (s->slices[i]->pin && s->slices[i]->on_disk)
                                        host_drop(s, s->slices[i]);
        }
        unpin_all(s);
        pthread_mutex_unlock(&s->mu);
        free(fresh);
        return rc;
}

static st_dev_rec *dev_find(st_store *s, const char *dev, const char *job)
{
        for (size_t i = 0; i < s->ndevs; i++)
                if (!strcmp(s->devs[i].dev, dev) && !strcmp(s->devs[i].job, job))
                        return &s->devs[i];
        return NULL;
}

static void dev_remove(st_store *s, size_t i)
{
        free(s->devs[i].items);
        s->devs[i] = s->devs[--s->ndevs];
}

/* Does the device still hold what this load asks for: the same slices, into the same places of
 * the same buffers, in the same order? Totals alone would take one tensor for another. */
static bool dev_holds(const st_dev_rec *r, const st_buf *b, size_t n)
{
        if (r->nitems != n)
                return false;
        for (size_t i = 0; i < n; i++) {
                const st_dev_item *it = &r->items[i];
                if (!same_tensor(&it->key, &b[i].key) || !same_rect(&it->key, &b[i].key) ||
                    it->at.fdev != b[i].at.fdev || it->at.fino != b[i].at.fino ||
                    it->at.off != b[i].at.off)
                        return false;
        }
        return true;
}

/* Record that `job` now occupies `bytes` of device `dev` with the request's slices, displacing
 * the least recently loaded jobs beyond the device's capacity. */
static void dev_note(st_store *s, const char *dev, const char *job, uint64_t version,
                     uint64_t bytes, const st_buf *b, size_t n)
{
        st_dev_item *items = malloc(n * sizeof *items);
        if (!items)
                return; /* residency is an optimisation; without room, forget it */
        for (size_t i = 0; i < n; i++)
                items[i] = (st_dev_item){b[i].key, b[i].at};
        st_dev_rec *r = dev_find(s, dev, job);
        if (!r) {
                if (loom_reserve(&s->devs, &s->capdevs, s->ndevs + 1, sizeof *s->devs, 8)) {
                        free(items);
                        return;
                }
                r = &s->devs[s->ndevs++];
                memset(r, 0, sizeof *r);
                snprintf(r->dev, sizeof r->dev, "%s", dev);
                snprintf(r->job, sizeof r->job, "%s", job);
        }
        free(r->items);
        r->items = items;
        r->nitems = n;
        r->version = version;
        r->bytes = bytes;
        r->used = ++s->tick;
        for (;;) {
                uint64_t total = 0;
                size_t old = SIZE_MAX;
                for (size_t i = 0; i < s->ndevs; i++)
                        if (!strcmp(s->devs[i].dev, dev)) {
                                total += s->devs[i].bytes;
                                if (strcmp(s->devs[i].job, job) &&
                                    (old == SIZE_MAX || s->devs[i].used < s->devs[old].used))
                                        old = i;
                        }
                if (total <= s->cfg.device_bytes || old == SIZE_MAX)
                        break;
                dev_remove(s, old);
        }
        if (bytes > s->cfg.device_bytes) /* does not fit even alone: not resident */
                dev_remove(s, (size_t)(dev_find(s, dev, job) - s->devs));
}

int loom__store_load(st_store *s, const st_buf *b, size_t n, const char *dev,
                     loom_state_result *res, loom_err *e)
{
        memset(res, 0, sizeof *res);
        pthread_mutex_lock(&s->mu);
        int rc = 0;
        bool one_job = n > 0;
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++) {
                one_job = one_job && !strcmp(b[i].key.job, b[0].key.job) &&
                          b[i].key.version == b[0].key.version;
                total += b[i].len;
        }
        /* 1. every rectangle covered by stored slices of its tensor version */
        for (size_t i = 0; i < n && !rc; i++) {
                uint64_t q[4], got = 0,
                               want = (b[i].key.r1 - b[i].key.r0) * (b[i].key.c1 - b[i].key.c0);
                for (size_t j = 0; j < s->nslices; j++)
                        if (same_tensor(&s->slices[j]->key, &b[i].key) &&
                            inter(&s->slices[j]->key, &b[i].key, q)) {
                                got += (q[1] - q[0]) * (q[3] - q[2]);
                                s->slices[j]->pin = 1;
                        }
                if (got != want) {
                        char k[400];
                        loom__state_key_str(&b[i].key, k, sizeof k);
                        rc = loom_err_set(e, LOOM_ENOENT, k,
                                          "%s: stored slices cover %" PRIu64 " of %" PRIu64
                                          " elements",
                                          k, got, want);
                }
        }
        /* 2. device residency: the caller's buffers still hold this state */
        st_dev_rec *r = !rc && one_job && dev && dev[0] && s->cfg.device_bytes
                            ? dev_find(s, dev, b[0].key.job)
                            : NULL;
        if (r && r->version == b[0].key.version && r->bytes == total && dev_holds(r, b, n)) {
                r->used = ++s->tick;
                res->found = LOOM_STATE_DEVICE;
                unpin_all(s);
                pthread_mutex_unlock(&s->mu);
                return 0;
        }
        /* 3. bring disk-only slices up, then copy */
        res->found = LOOM_STATE_HOST;
        for (size_t j = 0; j < s->nslices && !rc; j++) {
                st_slice *sl = s->slices[j];
                if (sl->pin && !sl->on_host) {
                        rc = promote(s, sl, e);
                        res->found = LOOM_STATE_DISK;
                        res->disk_bytes += sl->bytes;
                }
        }
        for (size_t i = 0; i < n && !rc; i++) {
                size_t es = loom_state_dtype_size(b[i].key.dtype);
                uint64_t q[4];
                for (size_t j = 0; j < s->nslices; j++) {
                        st_slice *sl = s->slices[j];
                        if (same_tensor(&sl->key, &b[i].key) && inter(&sl->key, &b[i].key, q)) {
                                copy_rect(b[i].p, &b[i].key, s->pool + sl->host_off, &sl->key, q,
                                          es, s->copy_threads);
                                sl->used = ++s->tick;
                        }
                }
                res->bytes += b[i].len;
        }
        if (!rc && one_job && dev && dev[0] && s->cfg.device_bytes)
                dev_note(s, dev, b[0].key.job, b[0].key.version, total, b, n);
        unpin_all(s);
        pthread_mutex_unlock(&s->mu);
        return rc;
}

int loom__store_prefetch_step(st_store *s, const char *job, loom_err *e)
{
        pthread_mutex_lock(&s->mu);
        uint64_t latest = 0;
        bool any = false;
        for (size_t i = 0; i < s->nslices; i++)
                if (!strcmp(s->slices[i]->key.job, job)) {
                        if (!any || s->slices[i]->key.version > latest)
                                latest = s->slices[i]->key.version;
                        any = true;
                }
        st_slice *want = NULL;
        for (size_t i = 0; i < s->nslices; i++) {
                st_slice *sl = s->slices[i];
                if (strcmp(sl->key.job, job) || sl->key.version != latest)
                        continue;
                if (sl->on_host)
                        sl->pin = 1; /* never evict what this prefetch already brought up */
                else if (!want)
                        want = sl;
        }
        int rc = 0;
        if (want) {
                want->pin = 1;
                rc = promote(s, want, e);
                if (!rc) {
                        s->prefetch_bytes += want->bytes;
                        rc = 1;
                }
        }
        unpin_all(s);
        pthread_mutex_unlock(&s->mu);
        return rc;
}

int loom__store_order(st_store *s, const char *const *jobs, size_t n)
{
        pthread_mutex_lock(&s->mu);
        int rc = 0;
        if (loom_reserve(&s->order, &s->caporder, n, sizeof *s->order, 16))
                rc = LOOM_ENOMEM;
        else {
                for (size_t i = 0; i < n; i++)
                        snprintf(s->order[i], sizeof s->order[i], "%s", jobs[i]);
                s->norder = n;
        }
        pthread_mutex_unlock(&s->mu);
        return rc;
}

int loom__store_drop(st_store *s, const char *job, uint64_t version, loom_err *e)
{
        pthread_mutex_lock(&s->mu);
        size_t k = 0;
        bool unlinked = false;
        for (size_t i = 0; i < s->nslices; i++) {
                st_slice *sl = s->slices[i];
                if (!strcmp(sl->key.job, job) && sl->key.version <= version) {
                        unlinked = unlinked || sl->on_disk;
                        host_drop(s, sl);
                        disk_drop(s, sl);
                        free(sl);
                } else
                        s->slices[k++] = sl;
        }
        s->nslices = k;
        for (size_t i = s->ndevs; i-- > 0;)
                if (!strcmp(s->devs[i].job, job))
                        dev_remove(s, i);
        /* the unlinks are durable only once the directory is: else a dropped slice could come
         * back after a power loss (recovery then also refuses overlaps, see recover()) */
        int rc = unlinked ? fsync_dir(s, e) : 0;
        pthread_mutex_unlock(&s->mu);
        return rc;
}

int loom__store_stat(st_store *s, loom_state_stats *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        pthread_mutex_lock(&s->mu);
        out->host_cap = s->cfg.host_bytes;
        out->host_used = s->host_used;
        out->disk_cap = s->cfg.disk_bytes;
        out->disk_used = s->disk_used;
        out->device_cap = s->cfg.device_bytes;
        out->host_locked = s->locked;
        out->evictions = s->evictions;
        out->prefetches = s->prefetches;
        out->prefetch_bytes = s->prefetch_bytes;
        size_t cap = 0;
        int rc = 0;
        for (size_t i = 0; i < s->nslices + s->ndevs && !rc; i++) {
                const char *job =
                    i < s->nslices ? s->slices[i]->key.job : s->devs[i - s->nslices].job;
                size_t j = 0;
                while (j < out->njobs && strcmp(out->jobs[j].job, job))
                        j++;
                if (j == out->njobs) {
                        if (loom_reserve(&out->jobs, &cap, j + 1, sizeof *out->jobs, 8)) {
                                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                                break;
                        }
                        memset(&out->jobs[j], 0, sizeof out->jobs[j]);
                        snprintf(out->jobs[j].job, sizeof out->jobs[j].job, "%s", job);
                        out->njobs++;
                }
                if (i < s->nslices) {
                        st_slice *sl = s->slices[i];
                        out->jobs[j].slices++;
                        if (sl->on_host)
                                out->jobs[j].host_bytes += st_round(sl->bytes);
                        if (sl->on_disk)
                                out->jobs[j].disk_bytes += ST_HDR + st_round(sl->bytes);
                } else
                        out->jobs[j].device_bytes += s->devs[i - s->nslices].bytes;
        }
        pthread_mutex_unlock(&s->mu);
        if (rc)
                loom_state_stats_free(out);
        return rc;
}

/* ---- open and recovery ------------------------------------------------------------------ */

static int by_id_desc(const void *a, const void *b)
{
        uint64_t x = (*(st_slice *const *)a)->id, y = (*(st_slice *const *)b)->id;
        return x < y ? 1 : x > y ? -1 : 0;
}

/* Slices of one tensor version never overlap (offload refuses it), so overlapping files on disk
 * are a slice that was dropped and came back (its unlink lost with the power) beside one written
 * after it. Keep the newest (ids grow with time), remove the files of the others. */
static int drop_overlaps(st_store *s, loom_err *e)
{
        if (s->nslices)
                qsort(s->slices, s->nslices, sizeof *s->slices, by_id_desc);
        size_t k = 0;
        bool removed = false;
        for (size_t i = 0; i < s->nslices; i++) {
                st_slice *sl = s->slices[i];
                const st_slice *newer = NULL;
                uint64_t q[4];
                for (size_t j = 0; j < k && !newer; j++)
                        if (same_tensor(&s->slices[j]->key, &sl->key) &&
                            inter(&s->slices[j]->key, &sl->key, q))
                                newer = s->slices[j];
                if (!newer) {
                        s->slices[k++] = sl;
                        continue;
                }
                char a[400], b[400];
                loom__state_key_str(&sl->key, a, sizeof a);
                loom__state_key_str(&newer->key, b, sizeof b);
                logf_(s, "removing slice file %016" PRIx64 " (%s): it overlaps the newer %s",
                      sl->id, a, b);
                disk_drop(s, sl);
                free(sl);
                removed = true;
        }
        s->nslices = k;
        return removed ? fsync_dir(s, e) : 0;
}

int loom__store_name_kind(const char *name, uint64_t *id)
{
        /* exactly what loom__store_path writes: 16 lower-case hex digits (strtoull alone would
         * take "0x", a sign or blanks, and two names could then claim one id) */
        size_t n = strlen(name);
        if (n != 20 || (strcmp(name + 16, ".slc") && strcmp(name + 16, ".tmp")))
                return ST_NAME_OTHER;
        uint64_t v = 0;
        for (int i = 0; i < 16; i++) {
                char c = name[i];
                if (c >= '0' && c <= '9')
                        v = v << 4 | (uint64_t)(c - '0');
                else if (c >= 'a' && c <= 'f')
                        v = v << 4 | (uint64_t)(c - 'a' + 10);
                else
                        return ST_NAME_OTHER;
        }
        *id = v;
        return name[17] == 's' ? ST_NAME_SLICE : ST_NAME_TMP;
}

int loom__store_index(st_store *s, uint64_t id, const st_fhdr *h, loom_err *e)
{
        if (id == UINT64_MAX) /* the next id would wrap onto files already there */
                return 1;
        for (size_t i = 0; i < s->nslices; i++)
                if (s->slices[i]->id == id)
                        return 1;
        st_slice *sl = calloc(1, sizeof *sl);
        if (!sl || loom_reserve(&s->slices, &s->capslices, s->nslices + 1, sizeof *s->slices, 64)) {
                free(sl);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        sl->key = h->key;
        sl->bytes = h->bytes;
        sl->crc = h->crc;
        sl->on_disk = true;
        sl->id = id;
        s->disk_used += ST_HDR + st_round(h->bytes);
        s->slices[s->nslices++] = sl;
        if (id >= s->next_id)
                s->next_id = id + 1;
        return 0;
}

int loom__store_recover_finish(st_store *s, loom_err *e)
{
        int rc = drop_overlaps(s, e);
        if (!rc && s->nslices)
                logf_(s, "recovered %zu slices (%" PRIu64 " bytes) from %s", s->nslices,
                      s->disk_used, s->dir);
        return rc;
}

static int recover(st_store *s, loom_err *e)
{
        DIR *d = opendir(s->dir);
        if (!d)
                return loom_err_set(e, LOOM_EIO, "dir", "%s: %s", s->dir, strerror(errno));
        struct dirent *de;
        int rc = 0;
        while ((de = readdir(d)) && !rc) {
                uint64_t id;
                int kind = loom__store_name_kind(de->d_name, &id);
                if (kind == ST_NAME_OTHER)
                        continue;
                char path[4200];
                snprintf(path, sizeof path, "%s/%.64s", s->dir, de->d_name);
                if (kind == ST_NAME_TMP) {
                        unlink(path);
                        logf_(s, "removed unfinished write %s", path);
                        continue;
                }
                int fd = open_direct(path, O_RDONLY, e);
                if (fd < 0) {
                        rc = LOOM_EIO;
                        break;
                }
                st_fhdr h;
                loom_err he;
                int bad = read_header(fd, path, &h, &he);
                close(fd);
                if (bad == LOOM_ENOMEM) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                if (bad) {
                        logf_(s, "ignoring slice file: %s", he.msg);
                        continue;
                }
                rc = loom__store_index(s, id, &h, e);
                if (rc == 1) {
                        logf_(s, "ignoring slice file %s: its id is not usable", path);
                        rc = 0;
                }
        }
        closedir(d);
        return rc ? rc : loom__store_recover_finish(s, e);
}

int loom__store_open(st_store *s, const loom_state_cfg *cfg, loom_err *e)
{
        memset(s, 0, sizeof *s);
        s->cfg = *cfg;
        if (!cfg->dir || !cfg->dir[0] || strlen(cfg->dir) >= sizeof s->dir - 64)
                return loom_err_set(e, LOOM_EINVAL, "dir",
                                    "a directory for the disk tier is needed");
        snprintf(s->dir, sizeof s->dir, "%s", cfg->dir);
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        s->copy_threads = cpus < 1 ? 1 : cpus > PAR_MAX ? PAR_MAX : (int)cpus;
        if (cfg->host_bytes < ST_ALIGN || cfg->host_bytes % ST_ALIGN)
                return loom_err_set(e, LOOM_EINVAL, "host_bytes",
                                    "host tier must be a positive multiple of 4096 bytes");
        if (mkdir(s->dir, 0755) != 0 && errno != EEXIST)
                return loom_err_set(e, LOOM_EIO, "dir", "mkdir %s: %s", s->dir, strerror(errno));
        s->pool = mmap(NULL, cfg->host_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (s->pool == MAP_FAILED) {
                s->pool = NULL;
                return loom_err_set(e, LOOM_ENOMEM, "host_bytes",
                                    "cannot map a %" PRIu64 "-byte host pool: %s", cfg->host_bytes,
                                    strerror(errno));
        }
        if (!cfg->no_mlock && mlock(s->pool, cfg->host_bytes) == 0)
                s->locked = 1;
        else if (!cfg->no_mlock) {
                struct rlimit rl;
                getrlimit(RLIMIT_MEMLOCK, &rl);
                logf_(s,
                      "warning: host tier (%" PRIu64 " MiB) is not pinned: mlock: %s "
                      "(RLIMIT_MEMLOCK %llu KiB); it may be swapped out, raise `ulimit -l`",
                      cfg->host_bytes >> 20, strerror(errno),
                      (unsigned long long)(rl.rlim_cur == RLIM_INFINITY ? 0 : rl.rlim_cur >> 10));
        }
        s->free = malloc(sizeof *s->free);
        if (!s->free) {
                loom__store_close(s);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        s->free[0] = (st_extent){0, cfg->host_bytes};
        s->nfree = s->capfree = 1;
        pthread_mutex_init(&s->mu, NULL);
        int rc = recover(s, e);
        if (rc)
                loom__store_close(s);
        return rc;
}

void loom__store_close(st_store *s)
{
        for (size_t i = 0; i < s->nslices; i++)
                free(s->slices[i]);
        free(s->slices);
        free(s->free);
        for (size_t i = 0; i < s->ndevs; i++)
                free(s->devs[i].items);
        free(s->devs);
        free(s->order);
        if (s->pool)
                munmap(s->pool, s->cfg.host_bytes);
        s->slices = NULL;
        s->free = NULL;
        s->devs = NULL;
        s->order = NULL;
        s->pool = NULL;
}
