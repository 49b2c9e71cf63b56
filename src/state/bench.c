/*
 * bench.c - the figures of `loom-state bench`: a private daemon runs in a thread of this process
 * and a client talks to it over its Unix socket, exactly as a worker would. Baselines (memcpy,
 * dd iflag=direct) run in the same process or on the same file, so each figure is a ratio taken
 * under the same load. Timings are best of cfg->repeats.
 *
 * The "device" is emulated by a memfd this process owns (docs/state.md): a host -> device load is
 * the daemon copying from its host pool into that memfd, the same path a GPU build takes with a
 * mapped device buffer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "loom/sync.h"

typedef struct bench {
        const loom_state_bench_cfg *cfg;
        loom_state_daemon *d;
        pthread_t thr;
        loom_state_client *c;
        int dev_fd;
        uint8_t *dev;
        uint64_t dev_len;
        char dir[4096];
} bench;

/* n tensors of `each` bytes of job at dev[0..]: io[] describes them. */
static void tensors(bench *b, loom_state_io *io, size_t n, uint64_t each, const char *job)
{
        for (size_t i = 0; i < n; i++) {
                char name[32];
                snprintf(name, sizeof name, "t%zu", i);
                memset(&io[i], 0, sizeof io[i]);
                loom_state_key_flat(&io[i].key, job, 1, name, each / 4, "f32");
                io[i].fd = b->dev_fd;
                io[i].off = i * each;
                io[i].len = each;
        }
}

/* One load of io[0..n) into the device, taking *dt seconds. */
static int timed_load(bench *b, loom_state_io *io, size_t n, loom_state_result *res, double *dt,
                      loom_err *e)
{
        double t0 = loom__state_now();
        int rc = loom_state_load(b->c, io, n, "", res, e);
        *dt = loom__state_now() - t0;
        return rc;
}

static int fig_load(bench *b, loom_state_bench_result *r, loom_err *e)
{
        uint64_t each = b->cfg->tensor_bytes, n = b->cfg->total_bytes / each;
        loom_state_io *io = calloc(n, sizeof *io);
        if (!io)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        tensors(b, io, n, each, "bench-load");
        for (uint64_t i = 0; i < n * each; i++)
                b->dev[i] = (uint8_t)(i * 2654435761u >> 13);
        uint32_t want = loom_sync_crc32c(0, b->dev, n * each);
        loom_state_result res;
        int rc = loom_state_offload(b->c, io, n, LOOM_STATE_HOST, &res, e);
        /* the baseline: the same bytes, the same tensor sizes, memcpy in this process; taken
         * alternately with the load so both see the same background load */
        uint8_t *src = malloc(n * each), *dst = malloc(n * each);
        if (!src || !dst) {
                free(src);
                free(dst);
                free(io);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        memset(src, 1, n * each);
        memset(dst, 2, n * each);
        double best = 1e30, best_cp = 1e30;
        for (int k = 0; k < b->cfg->repeats && !rc; k++) {
                memset(b->dev, 0, n * each);
                double dt;
                rc = timed_load(b, io, n, &res, &dt, e);
                if (!rc && loom_sync_crc32c(0, b->dev, n * each) != want)
                        rc = loom_err_set(e, LOOM_ECORRUPT, "load", "loaded bytes differ");
                if (dt < best)
                        best = dt;
                double t0 = loom__state_now();
                for (uint64_t i = 0; i < n; i++)
                        memcpy(dst + i * each, src + i * each, each);
                dt = loom__state_now() - t0;
                if (dt < best_cp)
                        best_cp = dt;
        }
        free(io);
        r->load_gbps = (double)(n * each) / best / 1e9;
        r->memcpy_gbps = dst[n * each - 1] == 1 ? (double)(n * each) / best_cp / 1e9 : 0;
        free(src);
        free(dst);
        if (rc)
                return rc;
        return loom_state_drop(b->c, "bench-load", UINT64_MAX, e);
}

/* dd iflag=direct of the file; returns GB/s or 0 with a note. */
static double dd_direct(const char *path, char *note, size_t len)
{
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "dd if='%s' of=/dev/null bs=%u iflag=direct 2>&1", path,
                 ST_IO_CHUNK);
        FILE *p = popen(cmd, "r");
        if (!p) {
                snprintf(note, len, "popen: %s", strerror(errno));
                return 0;
        }
        char line[512];
        double gbps = 0;
        while (fgets(line, sizeof line, p)) {
                unsigned long long bytes;
                double secs;
                char *c = strstr(line, "copied, ");
                if (c && sscanf(line, "%llu", &bytes) == 1 && sscanf(c + 8, "%lf", &secs) == 1 &&
                    secs > 0)
                        gbps = (double)bytes / secs / 1e9;
        }
        pclose(p);
        if (!gbps)
                snprintf(note, len, "dd gave no rate");
        return gbps;
}

static int fig_disk(bench *b, loom_state_bench_result *r, loom_err *e)
{
        uint64_t bytes = b->cfg->switch_bytes;
        loom_state_io io;
        tensors(b, &io, 1, bytes, "bench-disk");
        memset(b->dev, 7, bytes);
        loom_state_result res;
        int rc = loom_state_offload(b->c, &io, 1, LOOM_STATE_DISK, &res, e);
        if (rc)
                return rc;
        st_store *s = loom__state_daemon_store(b->d);
        uint64_t id = 0;
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < s->nslices; i++)
                if (!strcmp(s->slices[i]->key.job, "bench-disk"))
                        id = s->slices[i]->id;
        pthread_mutex_unlock(&s->mu);
        uint8_t *buf;
        if (posix_memalign((void **)&buf, ST_ALIGN, st_round(bytes)))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        double best = 1e30, dd = 0;
        char path[4200];
        loom__store_path(s, id, "slc", path, sizeof path);
        for (int k = 0; k < b->cfg->repeats && !rc; k++) {
                double t0 = loom__state_now();
                rc = loom__store_read_file(s, id, buf, bytes, e);
                double dt = loom__state_now() - t0;
                if (dt < best)
                        best = dt;
                double g = dd_direct(path, r->dd_note, sizeof r->dd_note);
                if (g > dd)
                        dd = g;
        }
        if (!rc && buf[bytes - 1] != 7)
                rc = loom_err_set(e, LOOM_ECORRUPT, "disk", "read back the wrong bytes");
        free(buf);
        if (rc)
                return rc;
        r->disk_read_gbps = (double)bytes / best / 1e9;
        r->dd_direct_gbps = dd;
        return loom_state_drop(b->c, "bench-disk", UINT64_MAX, e);
}

/* DP=8 replicas of the tiny model each offload their whole state; the daemon keeps one copy. */
static int fig_dedup(bench *b, loom_state_bench_result *r, loom_err *e)
{
        loom_sync_model m;
        loom_sync_layout *l = NULL;
        int rc = loom_sync_model_preset("tiny", &m, e);
        if (!rc)
                rc = loom_sync_layout_new(&m, &l, e);
        if (rc)
                return rc;
        uint64_t offered = 0, copied = 0;
        const uint32_t tp = 1, dp = 8;
        loom_state_io *io = calloc(l->ntensors, sizeof *io);
        if (!io)
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        for (uint32_t d = 0; d < dp && !rc; d++)
                for (uint32_t t = 0; t < tp && !rc; t++) {
                        uint64_t off = 0;
                        for (size_t i = 0; i < l->ntensors && !rc; i++) {
                                rc = loom_state_key_for(&io[i].key, "bench-dp", 1, &l->tensors[i],
                                                        t, tp, e);
                                io[i].fd = b->dev_fd;
                                io[i].off = off;
                                io[i].len = loom_state_key_bytes(&io[i].key);
                                off += (io[i].len + 63) & ~UINT64_C(63);
                        }
                        loom_state_result res;
                        if (!rc)
                                rc = loom_state_offload(b->c, io, l->ntensors, LOOM_STATE_HOST,
                                                        &res, e);
                        offered += res.bytes + res.dedup_bytes;
                        copied += res.bytes;
                }
        free(io);
        loom_sync_layout_free(l);
        if (rc)
                return rc;
        r->dedup_ratio = (double)copied / (double)offered;
        return loom_state_drop(b->c, "bench-dp", UINT64_MAX, e);
}

/* n tensors of `each` bytes of job, the device filled with `fill`, offloaded to disk; *io holds
 * them (NULL when out of memory) and the caller frees it. */
static int on_disk(bench *b, size_t n, uint64_t each, const char *job, int fill, loom_state_io **io,
                   loom_err *e)
{
        *io = calloc(n, sizeof **io);
        if (!*io)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        tensors(b, *io, n, each, job);
        memset(b->dev, fill, n * each);
        loom_state_result res;
        return loom_state_offload(b->c, *io, n, LOOM_STATE_DISK, &res, e);
}

/* A switch to a job whose state is on disk, with and without a prefetch hint given when the
 * phase before it starts. That phase is emulated by a sleep of `phase` x the cold load time (or,
 * phase < 0, 2x it + 50 ms): a hint given one phase ahead has that long to promote the state. */
static int switch_with_hint(bench *b, loom_state_io *io, size_t n, double phase, double *cold,
                            double *warm, loom_err *e)
{
        loom_state_result res;
        int rc = 0;
        *cold = *warm = 1e30;
        for (int k = 0; k < b->cfg->repeats && !rc; k++) {
                double t0 = loom__state_now(), dt;
                rc = timed_load(b, io, n, &res, &dt, e);
                if (!rc && res.found != LOOM_STATE_DISK)
                        rc = loom_err_set(e, LOOM_ESTATE, "prefetch", "cold switch found %s",
                                          loom_state_tier_name(res.found));
                if (dt < *cold)
                        *cold = dt;
                /* back to disk only; then the scheduler's hint one phase ahead */
                if (!rc)
                        rc = loom_state_offload(b->c, io, n, LOOM_STATE_DISK, &res, e);
                if (!rc)
                        rc = loom_state_prefetch(b->c, "bench-next", e);
                double len = phase < 0 ? 2 * dt + 0.05 : phase * dt;
                while (loom__state_now() - t0 - dt < len)
                        usleep(1000);
                if (!rc)
                        rc = timed_load(b, io, n, &res, &dt, e);
                if (!rc && phase < 0 && res.found != LOOM_STATE_HOST)
                        rc = loom_err_set(e, LOOM_ESTATE, "prefetch", "prefetched switch found %s",
                                          loom_state_tier_name(res.found));
                if (dt < *warm)
                        *warm = dt;
                /* the prefetch thread, if it was still promoting when the load came, finds
                 * nothing left once the load is done; let it see that before the state goes
                 * back to disk, or it would promote part of the next cold switch */
                usleep(20000);
                if (!rc)
                        rc = loom_state_offload(b->c, io, n, LOOM_STATE_DISK, &res, e);
        }
        return rc;
}

static int fig_prefetch(bench *b, loom_state_bench_result *r, loom_err *e)
{
        static const double phases[4] = {0.25, 0.5, 1, 2};
        uint64_t each = b->cfg->tensor_bytes, n = b->cfg->switch_bytes / each;
        loom_state_io *io;
        int rc = on_disk(b, n, each, "bench-next", 3, &io, e);
        double cold, warm;
        if (!rc)
                rc = switch_with_hint(b, io, n, -1, &cold, &warm, e);
        if (!rc) {
                r->switch_noprefetch_s = cold;
                r->switch_prefetch_s = warm;
                r->prefetch_hidden_fraction = 1 - warm / cold;
        }
        for (int i = 0; i < 4 && !rc; i++) {
                rc = switch_with_hint(b, io, n, phases[i], &cold, &warm, e);
                r->phase_fraction[i] = phases[i];
                r->hidden_at[i] = 1 - warm / cold;
                r->switch_at_s[i] = warm;
        }
        free(io);
        if (rc)
                return rc;
        return loom_state_drop(b->c, "bench-next", UINT64_MAX, e);
}

/* A 7B-class training state (bf16 weights + fp32 master, Adam m and v: 16 bytes a parameter),
 * scaled down by `scale`, switched in cold (from disk) and warm (from host). */
static int fig_7b(bench *b, loom_state_bench_result *r, uint64_t scale, loom_err *e)
{
        loom_sync_model m;
        loom_sync_layout *l = NULL;
        int rc = loom_sync_model_preset("qwen2.5-7b", &m, e);
        if (!rc)
                rc = loom_sync_layout_new(&m, &l, e);
        if (rc)
                return rc;
        uint64_t bytes = l->elems * 16 / scale;
        loom_sync_layout_free(l);
        uint64_t each = b->cfg->tensor_bytes, n = (bytes + each - 1) / each;
        if (n * each > b->dev_len)
                n = b->dev_len / each;
        r->state_bytes = n * each;
        r->state_scale = scale;
        loom_state_io *io;
        loom_state_result res;
        rc = on_disk(b, n, each, "bench-7b", 5, &io, e);
        double cold = 1e30, warm = 1e30;
        for (int k = 0; k < b->cfg->repeats && !rc; k++) {
                double dt;
                rc = timed_load(b, io, n, &res, &dt, e); /* disk -> host -> device */
                if (dt < cold)
                        cold = dt;
                if (!rc)
                        rc = timed_load(b, io, n, &res, &dt, e); /* host -> device */
                if (dt < warm)
                        warm = dt;
                if (!rc)
                        rc = loom_state_offload(b->c, io, n, LOOM_STATE_DISK, &res, e);
        }
        free(io);
        if (rc)
                return rc;
        r->cold_switch_s = cold;
        r->warm_switch_s = warm;
        return loom_state_drop(b->c, "bench-7b", UINT64_MAX, e);
}

static void cleanup(bench *b)
{
        loom_state_close(b->c);
        loom__state_unserve(b->d, b->thr);
        if (b->dev)
                munmap(b->dev, b->dev_len);
        if (b->dev_fd >= 0)
                close(b->dev_fd);
        rmdir(b->dir);
}

int loom_state_bench(const loom_state_bench_cfg *in, loom_state_bench_result *r, loom_err *e)
{
        loom_state_bench_cfg cfg = *in;
        if (!cfg.total_bytes)
                cfg.total_bytes = cfg.quick ? 64 << 20 : LOOM_GIB;
        if (!cfg.tensor_bytes)
                cfg.tensor_bytes = cfg.quick ? 8 << 20 : 64 << 20;
        if (!cfg.switch_bytes)
                cfg.switch_bytes = cfg.quick ? 32 << 20 : 256 << 20;
        if (cfg.repeats <= 0)
                cfg.repeats = cfg.quick ? 1 : 5;
        if (!cfg.dir)
                return loom_err_set(e, LOOM_EINVAL, "dir", "a scratch directory is needed");
        if (cfg.tensor_bytes % ST_ALIGN || cfg.total_bytes < cfg.tensor_bytes ||
            cfg.switch_bytes < cfg.tensor_bytes)
                return loom_err_set(e, LOOM_EINVAL, "tensor_bytes",
                                    "tensor size must be a multiple of 4096 and fit the totals");
        memset(r, 0, sizeof *r);
        bench b = {.cfg = &cfg, .dev_fd = -1};
        snprintf(b.dir, sizeof b.dir, "%.4000s/loom-state-bench-%d", cfg.dir, (int)getpid());
        loom_state_cfg dc;
        loom_state_cfg_default(&dc);
        dc.dir = b.dir;
        uint64_t biggest =
            cfg.total_bytes > 2 * cfg.switch_bytes ? cfg.total_bytes : 2 * cfg.switch_bytes;
        dc.host_bytes = st_round(biggest + (8 << 20));
        dc.disk_bytes = 4 * biggest;
        b.dev_len = biggest;
        int rc = loom__state_serve(&dc, &b.d, &b.thr, e);
        if (rc) {
                rmdir(b.dir);
                return rc;
        }
        r->host_locked = loom__state_daemon_store(b.d)->locked;
        rc = loom_state_connect(loom_state_daemon_sock(b.d), &b.c, e);
        if (!rc) {
                b.dev_fd = memfd_create("loom-bench-device", MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (b.dev_fd < 0 || ftruncate(b.dev_fd, (off_t)b.dev_len) != 0 ||
                    fcntl(b.dev_fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 ||
                    (b.dev = mmap(NULL, b.dev_len, PROT_READ | PROT_WRITE, MAP_SHARED, b.dev_fd,
                                  0)) == MAP_FAILED) {
                        b.dev = NULL;
                        rc = loom_err_set(e, LOOM_ENOMEM, "device", "emulated device: %s",
                                          strerror(errno));
                }
        }
        if (!rc)
                rc = fig_load(&b, r, e);
        if (!rc)
                rc = fig_disk(&b, r, e);
        if (!rc)
                rc = fig_dedup(&b, r, e);
        if (!rc)
                rc = fig_prefetch(&b, r, e);
        if (!rc)
                rc = fig_7b(&b, r, cfg.quick ? 4096 : 256, e);
        cleanup(&b);
        return rc;
}
