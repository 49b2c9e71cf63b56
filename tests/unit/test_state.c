/*
 * test_state.c - loom-state through its real socket: a daemon in a thread of the test process,
 * clients connecting to it, buffers in memfds (the emulated device) or plain memory.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "loom/state.h"
#include "loom/sync.h"

typedef struct fx {
        char dir[64];
        loom_state_daemon *d;
        pthread_t t;
        loom_state_client *c;
} fx;

static void fx_start(fx *f, uint64_t host, uint64_t disk, uint64_t device, int fresh)
{
        if (fresh) {
                snprintf(f->dir, sizeof f->dir, "/tmp/loom-state-test-XXXXXX");
                cr_assert(mkdtemp(f->dir));
        }
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = f->dir;
        cfg.host_bytes = host;
        cfg.disk_bytes = disk;
        cfg.device_bytes = device;
        cfg.no_mlock = 1;
        loom_err e;
        cr_assert_eq(loom__state_serve(&cfg, &f->d, &f->t, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_state_connect(loom_state_daemon_sock(f->d), &f->c, &e), 0, "%s", e.msg);
}

static void fx_stop(fx *f, int remove)
{
        loom_state_close(f->c);
        loom__state_unserve(f->d, f->t);
        if (remove) {
                char cmd[128];
                snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
                cr_assert_eq(system(cmd), 0);
        }
}

/* A device buffer as clients make them: a memfd sealed against shrinking (the daemon refuses
 * others). */
static uint8_t *device(int *fd, size_t len)
{
        *fd = memfd_create("test-device", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        cr_assert(*fd >= 0 && ftruncate(*fd, (off_t)len) == 0);
        cr_assert_eq(fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
        uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
        cr_assert(p != MAP_FAILED);
        return p;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t)((i + seed) * 2654435761u >> 11);
}

static loom_state_io io_at(const char *job, uint64_t v, const char *name, uint64_t n, int fd,
                           uint64_t off)
{
        loom_state_io io = {.fd = fd, .off = off, .len = n * 4};
        loom_state_key_flat(&io.key, job, v, name, n, "f32");
        return io;
}

static uint64_t job_bytes(fx *f, const char *job, int disk)
{
        loom_state_stats st;
        loom_err e;
        cr_assert_eq(loom_state_stat(f->c, &st, &e), 0, "%s", e.msg);
        uint64_t b = 0;
        for (size_t i = 0; i < st.njobs; i++)
                if (!strcmp(st.jobs[i].job, job))
                        b = disk ? st.jobs[i].disk_bytes : st.jobs[i].host_bytes;
        loom_state_stats_free(&st);
        return b;
}

Test(state, offload_load_roundtrip_fd_and_staged)
{
        fx f;
        fx_start(&f, 16 << 20, 64 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 1 << 20);
        fill(dev, 1 << 20, 1);
        uint8_t *plain = malloc(40000);
        fill(plain, 40000, 2);
        loom_state_io io[2] = {io_at("a", 1, "w", (1 << 20) / 4, fd, 0),
                               io_at("a", 1, "b", 10000, -1, 0)};
        io[1].ptr = plain;
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, io, 2, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.bytes, (1 << 20) + 40000);
        cr_assert_eq(r.staged_bytes, 40000);
        uint8_t *want = malloc(1 << 20);
        memcpy(want, dev, 1 << 20);
        memset(dev, 0, 1 << 20);
        memset(plain, 0, 40000);
        cr_assert_eq(loom_state_load(f.c, io, 2, "", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.found, LOOM_STATE_HOST);
        cr_assert_eq(memcmp(dev, want, 1 << 20), 0);
        uint8_t chk[40000];
        fill(chk, 40000, 2);
        cr_assert_eq(memcmp(plain, chk, 40000), 0);
        free(want);
        free(plain);
        munmap(dev, 1 << 20);
        close(fd);
        fx_stop(&f, 1);
}

/* The client's staging memfd grows when a request of plain memory outgrows it: the daemon must
 * map it again for the whole request, not keep the first item in the old, smaller mapping that
 * a later item of the same request replaces. */
Test(state, staging_buffer_that_grows_between_requests)
{
        fx f;
        fx_start(&f, 32 << 20, 64 << 20, 0, 1);
        loom_state_result r;
        loom_err e;
        float *small = malloc(4096 * 4);
        fill((uint8_t *)small, 4096 * 4, 3);
        loom_state_io one = io_at("g", 1, "s", 4096, -1, 0);
        one.ptr = small;
        cr_assert_eq(loom_state_offload(f.c, &one, 1, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        /* two items of 768 KiB: the first fits the 1 MiB buffer mapped so far, the second not */
        enum { N = 3 << 16 };
        uint8_t *x = malloc(4 * N), *y = malloc(4 * N);
        fill(x, 4 * N, 4);
        fill(y, 4 * N, 5);
        loom_state_io two[2] = {io_at("g", 2, "x", N, -1, 0), io_at("g", 2, "y", N, -1, 0)};
        two[0].ptr = x;
        two[1].ptr = y;
        cr_assert_eq(loom_state_offload(f.c, two, 2, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.staged_bytes, 8 * N);
        memset(x, 0, 4 * N);
        memset(y, 0, 4 * N);
        cr_assert_eq(loom_state_load(f.c, two, 2, "", &r, &e), 0, "%s", e.msg);
        uint8_t *chk = malloc(4 * N);
        fill(chk, 4 * N, 4);
        cr_assert_eq(memcmp(x, chk, 4 * N), 0);
        fill(chk, 4 * N, 5);
        cr_assert_eq(memcmp(y, chk, 4 * N), 0);
        free(chk);
        free(x);
        free(y);
        free(small);
        fx_stop(&f, 1);
}

/* Saved by TP=2 ranks, reloaded by TP=4 ranks and by a TP=1 rank: every rectangle is assembled
 * from the stored ones and equals the synthetic weights. */
Test(state, relayout_reload_via_shard_maps)
{
        fx f;
        fx_start(&f, 64 << 20, 64 << 20, 0, 1);
        loom_sync_model m;
        loom_sync_layout *l;
        loom_err e;
        cr_assert_eq(loom_sync_model_preset("tiny", &m, &e), 0);
        cr_assert_eq(loom_sync_layout_new(&m, &l, &e), 0);
        int fd;
        size_t cap = l->elems * 2 + l->ntensors * 64;
        uint8_t *dev = device(&fd, cap);
        loom_state_io *io = calloc(l->ntensors, sizeof *io);
        for (uint32_t rank = 0; rank < 2; rank++) {
                uint64_t off = 0;
                for (size_t i = 0; i < l->ntensors; i++) {
                        const loom_sync_tensor *t = &l->tensors[i];
                        cr_assert_eq(loom_state_key_for(&io[i].key, "j", 7, t, rank, 2, &e), 0);
                        io[i].fd = fd, io[i].off = off,
                        io[i].len = loom_state_key_bytes(&io[i].key);
                        uint16_t *v = (uint16_t *)(dev + off);
                        for (uint64_t r = io[i].key.r0; r < io[i].key.r1; r++)
                                loom_sync_synth(9, 0, 0, t->offset + r * t->cols + io[i].key.c0,
                                                io[i].key.c1 - io[i].key.c0,
                                                v + (r - io[i].key.r0) *
                                                        (io[i].key.c1 - io[i].key.c0));
                        off += (io[i].len + 63) & ~UINT64_C(63);
                }
                loom_state_result r;
                cr_assert_eq(loom_state_offload(f.c, io, l->ntensors, LOOM_STATE_HOST, &r, &e), 0,
                             "%s", e.msg);
        }
        for (uint32_t tp = 1; tp <= 4; tp *= 4)
                for (uint32_t rank = 0; rank < tp; rank++) {
                        memset(dev, 0, cap);
                        uint64_t off = 0;
                        for (size_t i = 0; i < l->ntensors; i++) {
                                cr_assert_eq(loom_state_key_for(&io[i].key, "j", 7, &l->tensors[i],
                                                                rank, tp, &e),
                                             0);
                                io[i].fd = fd, io[i].off = off;
                                io[i].len = loom_state_key_bytes(&io[i].key);
                                off += (io[i].len + 63) & ~UINT64_C(63);
                        }
                        loom_state_result r;
                        cr_assert_eq(loom_state_load(f.c, io, l->ntensors, "", &r, &e), 0, "%s",
                                     e.msg);
                        for (size_t i = 0; i < l->ntensors; i++) {
                                const loom_sync_tensor *t = &l->tensors[i];
                                uint64_t w = io[i].key.c1 - io[i].key.c0;
                                uint16_t *got = (uint16_t *)(dev + io[i].off), want[4096];
                                for (uint64_t row = io[i].key.r0; row < io[i].key.r1; row++) {
                                        cr_assert(w <= 4096);
                                        loom_sync_synth(9, 0, 0,
                                                        t->offset + row * t->cols + io[i].key.c0, w,
                                                        want);
                                        cr_assert_eq(
                                            memcmp(got + (row - io[i].key.r0) * w, want, w * 2), 0,
                                            "tp=%u rank %u tensor %s row %llu", tp, rank, t->name,
                                            (unsigned long long)row);
                                }
                        }
                }
        /* a rectangle beyond what was stored names the key */
        io[0].key.r1 += 1;
        io[0].len = loom_state_key_bytes(&io[0].key);
        loom_state_result r;
        cr_assert_eq(loom_state_load(f.c, io, 1, "", &r, &e), LOOM_ENOENT);
        cr_assert(strstr(e.field, io[0].key.name), "%s", e.field);
        free(io);
        munmap(dev, cap);
        close(fd);
        loom_sync_layout_free(l);
        fx_stop(&f, 1);
}

Test(state, dp_replicas_store_once)
{
        fx f;
        fx_start(&f, 16 << 20, 64 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 1 << 20);
        fill(dev, 1 << 20, 3);
        uint64_t copied = 0, skipped = 0;
        for (int rep = 0; rep < 8; rep++) {
                loom_state_client *c;
                loom_err e;
                cr_assert_eq(loom_state_connect(loom_state_daemon_sock(f.d), &c, &e), 0);
                loom_state_io io[2] = {io_at("dp", 1, "x", 65536, fd, 0),
                                       io_at("dp", 1, "y", 65536, fd, 262144)};
                loom_state_result r;
                cr_assert_eq(loom_state_offload(c, io, 2, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
                copied += r.bytes, skipped += r.dedup_bytes;
                loom_state_close(c);
        }
        cr_assert_eq(copied, 2 * 262144);
        cr_assert_eq(skipped, 7 * 2 * 262144);
        cr_assert_eq(job_bytes(&f, "dp", 0), 2 * 262144);
        munmap(dev, 1 << 20);
        close(fd);
        fx_stop(&f, 1);
}

Test(state, full_tier_changes_nothing)
{
        fx f;
        fx_start(&f, 1 << 20, 1 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 4 << 20);
        loom_state_io ok = io_at("a", 1, "w", 65536, fd, 0);
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, &ok, 1, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        /* two slices, the second does not fit even after evicting: nothing of either */
        loom_state_io two[2] = {io_at("b", 1, "p", 1024, fd, 0),
                                io_at("b", 1, "q", (3 << 20) / 4, fd, 4096)};
        cr_assert_eq(loom_state_offload(f.c, two, 2, LOOM_STATE_HOST, &r, &e), LOOM_ERANGE);
        cr_assert(strstr(e.msg, "host tier full"), "%s", e.msg);
        cr_assert_eq(job_bytes(&f, "b", 0), 0);
        cr_assert_eq(job_bytes(&f, "a", 0), 262144);
        loom_state_io big = io_at("c", 1, "w", (768 << 10) / 4, fd, 0);
        cr_assert_eq(loom_state_offload(f.c, &big, 1, LOOM_STATE_DISK, &r, &e), 0, "%s", e.msg);
        loom_state_io more = io_at("d", 1, "w", (512 << 10) / 4, fd, 0);
        cr_assert_eq(loom_state_offload(f.c, &more, 1, LOOM_STATE_DISK, &r, &e), LOOM_ERANGE);
        cr_assert(strstr(e.msg, "disk tier full"), "%s", e.msg);
        cr_assert_eq(job_bytes(&f, "d", 1), 0);
        munmap(dev, 4 << 20);
        close(fd);
        fx_stop(&f, 1);
}

Test(state, corrupt_disk_file_names_the_key)
{
        fx f;
        fx_start(&f, 4 << 20, 16 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 1 << 20);
        fill(dev, 1 << 20, 4);
        loom_state_io io = io_at("cj", 3, "layer.0.w", 65536, fd, 0);
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_DISK, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(job_bytes(&f, "cj", 0), 0);
        char cmd[256];
        snprintf(cmd, sizeof cmd,
                 "f=$(ls %s/*.slc) && printf '\\x5a' | dd of=$f bs=1 seek=10000 conv=notrunc "
                 "status=none",
                 f.dir);
        cr_assert_eq(system(cmd), 0);
        cr_assert_eq(loom_state_load(f.c, &io, 1, "", &r, &e), LOOM_ECORRUPT);
        cr_assert(strstr(e.msg, "cj/v3/layer.0.w"), "%s", e.msg);
        cr_assert_eq(job_bytes(&f, "cj", 0), 0); /* nothing promoted */
        munmap(dev, 1 << 20);
        close(fd);
        fx_stop(&f, 1);
}

/* Host holds two of three states; the order hint says "b" runs next, so "a" goes to disk. */
Test(state, eviction_spares_the_next_job)
{
        fx f;
        fx_start(&f, 2 << 20, 16 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 1 << 20);
        fill(dev, 1 << 20, 5);
        loom_state_result r;
        loom_err e;
        const char *jobs[] = {"a", "b", "c"};
        for (int i = 0; i < 2; i++) {
                loom_state_io io = io_at(jobs[i], 1, "w", 196608, fd, 0);
                cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_HOST, &r, &e), 0);
        }
        const char *order[] = {"c", "b", "a"};
        cr_assert_eq(loom_state_order(f.c, order, 3, &e), 0);
        loom_state_io io = io_at("c", 1, "w", 196608, fd, 0);
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(job_bytes(&f, "a", 0), 0);
        cr_assert_gt(job_bytes(&f, "a", 1), 0);
        cr_assert_eq(job_bytes(&f, "b", 0), 786432);
        /* and a reads back intact from disk */
        memset(dev, 0, 1 << 20);
        loom_state_io back = io_at("a", 1, "w", 196608, fd, 0);
        cr_assert_eq(loom_state_load(f.c, &back, 1, "", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.found, LOOM_STATE_DISK);
        uint8_t want[786432];
        fill(want, sizeof want, 5);
        cr_assert_eq(memcmp(dev, want, sizeof want), 0);
        munmap(dev, 1 << 20);
        close(fd);
        fx_stop(&f, 1);
}

Test(state, prefetch_pulls_state_up)
{
        fx f;
        fx_start(&f, 8 << 20, 16 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 4 << 20);
        loom_state_io io[2] = {io_at("p", 2, "w", 262144, fd, 0),
                               io_at("p", 2, "v", 262144, fd, 1 << 20)};
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, io, 2, LOOM_STATE_DISK, &r, &e), 0);
        cr_assert_eq(job_bytes(&f, "p", 0), 0);
        cr_assert_eq(loom_state_prefetch(f.c, "p", &e), 0);
        for (int i = 0; i < 500 && job_bytes(&f, "p", 0) < (2 << 20); i++)
                usleep(10000);
        cr_assert_eq(job_bytes(&f, "p", 0), 2 << 20);
        cr_assert_eq(loom_state_load(f.c, io, 2, "", &r, &e), 0);
        cr_assert_eq(r.found, LOOM_STATE_HOST);
        munmap(dev, 4 << 20);
        close(fd);
        fx_stop(&f, 1);
}

Test(state, disk_state_survives_restart)
{
        fx f;
        fx_start(&f, 4 << 20, 16 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 1 << 20);
        fill(dev, 1 << 20, 6);
        loom_state_io io = io_at("r", 1, "w", 262144, fd, 0);
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_DISK, &r, &e), 0);
        fx_stop(&f, 0);
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%s/00000000000000ff.tmp", f.dir); /* an unfinished write */
        FILE *t = fopen(tmp, "w");
        fputs("partial", t);
        fclose(t);
        fx_start(&f, 4 << 20, 16 << 20, 0, 0);
        cr_assert(access(tmp, F_OK) != 0);
        memset(dev, 0, 1 << 20);
        cr_assert_eq(loom_state_load(f.c, &io, 1, "", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.found, LOOM_STATE_DISK);
        uint8_t want[1 << 20];
        fill(want, sizeof want, 6);
        cr_assert_eq(memcmp(dev, want, sizeof want), 0);
        munmap(dev, 1 << 20);
        close(fd);
        fx_stop(&f, 1);
}

/* Slice files hold a job's state: only the daemon may read them (other users go through the
 * socket, where ownership is checked), and only names the store writes are its files. */
Test(state, slice_files_are_private_and_named_canonically)
{
        fx f;
        fx_start(&f, 4 << 20, 16 << 20, 0, 1);
        uint8_t buf[4096], got[4096];
        fill(buf, sizeof buf, 3);
        loom_state_io io = {.fd = -1, .ptr = buf, .len = sizeof buf};
        loom_state_key_flat(&io.key, "p", 1, "w", 1024, "f32");
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_DISK, &r, &e), 0, "%s", e.msg);
        fx_stop(&f, 0);
        char slc[128], alias[128], cmd[300];
        snprintf(slc, sizeof slc, "%s/0000000000000000.slc", f.dir);
        struct stat st;
        cr_assert_eq(stat(slc, &st), 0);
        cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
        /* a file an older daemon left world-readable, and a copy under a name that strtoull
         * would read as the same id */
        cr_assert_eq(chmod(slc, 0644), 0);
        snprintf(alias, sizeof alias, "%s/0x00000000000000.slc", f.dir);
        snprintf(cmd, sizeof cmd, "cp -p %s %s", slc, alias);
        cr_assert_eq(system(cmd), 0);
        fx_start(&f, 4 << 20, 16 << 20, 0, 0);
        cr_assert_eq(stat(slc, &st), 0, "the store's own file is kept");
        cr_assert_eq(st.st_mode & 0777, 0600, "tightened on recovery: %o", st.st_mode & 0777);
        io.ptr = got;
        cr_assert_eq(loom_state_load(f.c, &io, 1, "", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(memcmp(got, buf, sizeof buf), 0);
        cr_assert_eq(job_bytes(&f, "p", 1), 8192, "indexed once");
        fx_stop(&f, 1);
}

/* A slice past 8 MiB is copied in pieces over several threads and its CRC joined from theirs:
 * that CRC is what a promotion from disk checks the bytes against, after a restart, so a wrong
 * join fails the load, and a wrong piece fails the comparison. */
Test(state, large_slices_copied_in_pieces_keep_their_checksums)
{
        fx f;
        size_t n = (12u << 20) + 12; /* not a multiple of the pieces' page alignment */
        fx_start(&f, 32 << 20, 64 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, n);
        fill(dev, n, 9);
        loom_state_io io = io_at("big", 1, "w", n / 4, fd, 0);
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_DISK, &r, &e), 0, "%s", e.msg);
        memset(dev, 0, n);
        cr_assert_eq(loom_state_load(f.c, &io, 1, "", &r, &e), 0, "%s", e.msg);
        uint8_t *want = malloc(n);
        cr_assert(want);
        fill(want, n, 9);
        cr_assert_eq(memcmp(dev, want, n), 0, "from the host tier");
        fx_stop(&f, 0);
        fx_start(&f, 32 << 20, 64 << 20, 0, 0);
        memset(dev, 0, n);
        cr_assert_eq(loom_state_load(f.c, &io, 1, "", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.found, LOOM_STATE_DISK);
        cr_assert_eq(memcmp(dev, want, n), 0, "from disk, its CRC checked");
        free(want);
        munmap(dev, n);
        close(fd);
        fx_stop(&f, 1);
}

Test(state, bad_input_is_refused)
{
        fx f;
        fx_start(&f, 4 << 20, 16 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 1 << 20);
        loom_state_io io = io_at("x", 1, "w", 1024, fd, 0);
        io.len = 100;
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_HOST, &r, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "io[0]");
        io = io_at("x", 1, "w", 1024, fd, (1 << 20) - 100); /* beyond the memfd */
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_HOST, &r, &e), LOOM_EINVAL);
        snprintf(io.key.dtype, sizeof io.key.dtype, "f33");
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_HOST, &r, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "dtype"), "%s", e.msg);
        /* an overlapping, different rectangle of a stored tensor */
        loom_state_io a = io_at("x", 1, "w", 1024, fd, 0);
        cr_assert_eq(loom_state_offload(f.c, &a, 1, LOOM_STATE_HOST, &r, &e), 0);
        a.key.r0 = 512, a.key.r1 = 2048;
        a.len = loom_state_key_bytes(&a.key);
        cr_assert_eq(loom_state_offload(f.c, &a, 1, LOOM_STATE_HOST, &r, &e), LOOM_EEXIST);
        cr_assert_eq(job_bytes(&f, "x", 0), 4096);
        munmap(dev, 1 << 20);
        close(fd);
        fx_stop(&f, 1);
}

Test(state, device_residency_until_displaced)
{
        fx f;
        fx_start(&f, 8 << 20, 16 << 20, 1 << 20, 1);
        int fd;
        uint8_t *dev = device(&fd, 2 << 20);
        loom_state_io a = io_at("a", 1, "w", 262144, fd, 0);
        loom_state_io b = io_at("b", 1, "w", 262144, fd, 1 << 20);
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, &a, 1, LOOM_STATE_HOST, &r, &e), 0);
        cr_assert_eq(loom_state_offload(f.c, &b, 1, LOOM_STATE_HOST, &r, &e), 0);
        cr_assert_eq(loom_state_load(f.c, &a, 1, "gpu0", &r, &e), 0);
        cr_assert_eq(r.found, LOOM_STATE_HOST);
        cr_assert_eq(loom_state_load(f.c, &a, 1, "gpu0", &r, &e), 0);
        cr_assert_eq(r.found, LOOM_STATE_DEVICE);
        cr_assert_eq(r.bytes, 0);
        cr_assert_eq(loom_state_load(f.c, &b, 1, "gpu0", &r, &e), 0);
        cr_assert_eq(r.found, LOOM_STATE_HOST);
        cr_assert_eq(loom_state_load(f.c, &a, 1, "gpu0", &r, &e), 0);
        cr_assert_eq(r.found, LOOM_STATE_HOST); /* b displaced it */
        munmap(dev, 2 << 20);
        close(fd);
        fx_stop(&f, 1);
}

/* One request of 20 tensors, each in its own memfd: more distinct buffers than the daemon keeps
 * mapped between requests. Every item must still point into a live mapping while it is copied. */
Test(state, one_request_of_many_memfds)
{
        enum { K = 20, N = 1 << 18 };
        fx f;
        fx_start(&f, 64 << 20, 64 << 20, 0, 1);
        int fds[K];
        uint8_t *bufs[K];
        loom_state_io io[K];
        char names[K][16];
        for (int i = 0; i < K; i++) {
                bufs[i] = device(&fds[i], 4 * N);
                fill(bufs[i], 4 * N, 100 + (uint32_t)i);
                snprintf(names[i], sizeof names[i], "t%d", i);
                io[i] = io_at("many", 1, names[i], N, fds[i], 0);
        }
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, io, K, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.bytes, (uint64_t)K * 4 * N);
        for (int i = 0; i < K; i++)
                memset(bufs[i], 0, 4 * N);
        cr_assert_eq(loom_state_load(f.c, io, K, "", &r, &e), 0, "%s", e.msg);
        uint8_t *chk = malloc(4 * N);
        for (int i = 0; i < K; i++) {
                fill(chk, 4 * N, 100 + (uint32_t)i);
                cr_assert_eq(memcmp(bufs[i], chk, 4 * N), 0, "tensor %d", i);
                munmap(bufs[i], 4 * N);
                close(fds[i]);
        }
        free(chk);
        fx_stop(&f, 1);
}

/* A memfd its owner can shrink while the daemon copies from it would fault the daemon: such a
 * buffer is refused with a message that says what to do, and nothing is stored. */
Test(state, unsealed_memfd_is_refused)
{
        fx f;
        fx_start(&f, 4 << 20, 16 << 20, 0, 1);
        int fd = memfd_create("unsealed", MFD_CLOEXEC);
        cr_assert(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
        loom_state_io io = io_at("u", 1, "w", 65536, fd, 0);
        loom_state_result r;
        loom_err e;
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_HOST, &r, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "F_SEAL_SHRINK"), "%s", e.msg);
        cr_assert_eq(job_bytes(&f, "u", 0), 0);
        /* sealed, the same buffer is accepted, and can no longer shrink under the daemon */
        int sfd;
        uint8_t *dev = device(&sfd, 1 << 20);
        io.fd = sfd;
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        cr_assert_neq(ftruncate(sfd, 4096), 0);
        munmap(dev, 1 << 20);
        close(sfd);
        close(fd);
        fx_stop(&f, 1);
}

/* Residency is per tensor: a different tensor of the same size and job version on the same
 * device is not "already there". */
Test(state, device_residency_compares_tensors)
{
        fx f;
        fx_start(&f, 8 << 20, 16 << 20, 4 << 20, 1);
        int fd;
        uint8_t *dev = device(&fd, 1 << 20);
        loom_state_io w1 = io_at("j", 1, "w1", 262144, fd, 0);
        loom_state_io w2 = io_at("j", 1, "w2", 262144, fd, 0);
        loom_state_result r;
        loom_err e;
        fill(dev, 1 << 20, 7);
        cr_assert_eq(loom_state_offload(f.c, &w1, 1, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        fill(dev, 1 << 20, 8);
        cr_assert_eq(loom_state_offload(f.c, &w2, 1, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_state_load(f.c, &w1, 1, "gpu0", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.found, LOOM_STATE_HOST);
        cr_assert_eq(loom_state_load(f.c, &w2, 1, "gpu0", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.found, LOOM_STATE_HOST);
        uint8_t *want = malloc(1 << 20);
        fill(want, 1 << 20, 8);
        cr_assert_eq(memcmp(dev, want, 1 << 20), 0);
        /* the same tensor into another place of the device is not resident either */
        int fd2;
        uint8_t *dev2 = device(&fd2, 1 << 20);
        w2.fd = fd2;
        cr_assert_eq(loom_state_load(f.c, &w2, 1, "gpu0", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.found, LOOM_STATE_HOST);
        cr_assert_eq(memcmp(dev2, want, 1 << 20), 0);
        cr_assert_eq(loom_state_load(f.c, &w2, 1, "gpu0", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(r.found, LOOM_STATE_DEVICE);
        free(want);
        munmap(dev2, 1 << 20);
        close(fd2);
        munmap(dev, 1 << 20);
        close(fd);
        fx_stop(&f, 1);
}

/* Two slice files that overlap (a dropped slice whose unlink did not reach the disk, and the
 * slice written after it): recovery keeps the newer one and loads return its bytes. */
Test(state, recovery_drops_overlapping_slices)
{
        fx f;
        fx_start(&f, 4 << 20, 16 << 20, 0, 1);
        int fd;
        uint8_t *dev = device(&fd, 1 << 20);
        loom_state_io io = io_at("o", 1, "w", 262144, fd, 0);
        loom_state_result r;
        loom_err e;
        fill(dev, 1 << 20, 11);
        cr_assert_eq(loom_state_offload(f.c, &io, 1, LOOM_STATE_DISK, &r, &e), 0, "%s", e.msg);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "cp %s/0000000000000000.slc %s/keep.old", f.dir, f.dir);
        cr_assert_eq(system(cmd), 0);
        cr_assert_eq(loom_state_drop(f.c, "o", 1, &e), 0, "%s", e.msg);
        /* a slice of the same tensor covering half of the old one's rows, written later */
        loom_state_io half = io;
        half.key.r1 = 131072;
        half.len = loom_state_key_bytes(&half.key);
        fill(dev, 1 << 20, 12);
        cr_assert_eq(loom_state_offload(f.c, &half, 1, LOOM_STATE_DISK, &r, &e), 0, "%s", e.msg);
        fx_stop(&f, 0);
        snprintf(cmd, sizeof cmd, "mv %s/keep.old %s/0000000000000000.slc", f.dir, f.dir);
        cr_assert_eq(system(cmd), 0); /* the dropped slice reappears */
        fx_start(&f, 4 << 20, 16 << 20, 0, 0);
        cr_assert_eq(job_bytes(&f, "o", 1), ST_HDR + 131072 * 4);
        memset(dev, 0, 1 << 20);
        cr_assert_eq(loom_state_load(f.c, &half, 1, "", &r, &e), 0, "%s", e.msg);
        uint8_t *want = malloc(1 << 20);
        fill(want, 1 << 20, 12);
        cr_assert_eq(memcmp(dev, want, 131072 * 4), 0);
        cr_assert_eq(loom_state_load(f.c, &io, 1, "", &r, &e), LOOM_ENOENT);
        free(want);
        munmap(dev, 1 << 20);
        close(fd);
        fx_stop(&f, 1);
}

Test(state, byte_sizes_with_suffixes)
{
        uint64_t v;
        cr_assert_eq(loom_state_parse_bytes("1T", &v), 0);
        cr_assert_eq(v, UINT64_C(1) << 40);
        cr_assert_eq(loom_state_parse_bytes("512M", &v), 0);
        cr_assert_eq(v, UINT64_C(512) << 20);
        cr_assert_eq(loom_state_parse_bytes("1.5g", &v), 0);
        cr_assert_eq(v, UINT64_C(3) << 29);
        cr_assert_eq(loom_state_parse_bytes("4096", &v), 0);
        cr_assert_eq(v, 4096);
        cr_assert_eq(loom_state_parse_bytes("2K", &v), 0);
        cr_assert_eq(v, 2048);
        cr_assert_neq(loom_state_parse_bytes("1X", &v), 0);
        cr_assert_neq(loom_state_parse_bytes("", &v), 0);
        cr_assert_neq(loom_state_parse_bytes("-1G", &v), 0);
        cr_assert_neq(loom_state_parse_bytes("1TB", &v), 0);
        cr_assert_neq(loom_state_parse_bytes("99999P", &v), 0);
}
