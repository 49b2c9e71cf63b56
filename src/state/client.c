/*
 * client.c - the C client of loom-state. Buffers in a caller's memfd go to the daemon as
 * descriptors; plain memory is staged through one memfd the client owns (grown as needed and
 * kept for the connection's life, so the daemon maps it once).
 *
 * The daemon closes a connection that stays idle past its --idle-timeout; the client notices
 * before its next request (or when that request meets the closed socket) and connects again,
 * once, transparently: every request is idempotent (an offload repeated finds its slices as
 * dedup_bytes), and a request the daemon closed on unread was never acted on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

struct loom_state_client {
        int fd;
        char sock[108]; /* to connect again after an idle close */
        int stage_fd;
        uint8_t *stage;
        uint64_t stage_len;
        struct st_client_cuda *cu; /* the CUDA path's stream and staging (client_cuda.c) */
};

struct st_client_cuda **loom__state_client_cu(loom_state_client *c)
{
        return &c->cu;
}

/* (Re)connect c->fd to c->sock. */
static int dial(loom_state_client *c, loom_err *e)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, c->sock, sizeof c->sock);
        if (c->fd >= 0)
                close(c->fd);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
                return loom_err_set(e, LOOM_EIO, "sock", "connect %s: %s", c->sock,
                                    strerror(errno));
        return 0;
}

/* The daemon closed the connection and left nothing to read (an idle close). */
static bool hung_up(int fd)
{
        struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
        if (poll(&pf, 1, 0) <= 0)
                return false;
        char b;
        ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
}

int loom_state_connect(const char *sock_path, loom_state_client **out, loom_err *e)
{
        *out = NULL;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (!sock_path || strlen(sock_path) >= sizeof sa.sun_path)
                return loom_err_set(e, LOOM_EINVAL, "sock", "socket path missing or too long");
        loom_state_client *c = calloc(1, sizeof *c);
        if (!c)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        c->stage_fd = -1;
        c->fd = -1;
        memcpy(c->sock, sock_path, strlen(sock_path) + 1);
        int rc = dial(c, e);
        if (rc) {
                loom_state_close(c);
                return rc;
        }
        *out = c;
        return 0;
}

void loom_state_close(loom_state_client *c)
{
        if (!c)
                return;
        if (c->fd >= 0)
                close(c->fd);
        if (c->stage)
                munmap(c->stage, c->stage_len);
        if (c->stage_fd >= 0)
                close(c->stage_fd);
        loom__state_cuda_free(c->cu);
        free(c);
}

static int stage_reserve(loom_state_client *c, uint64_t len, loom_err *e)
{
        if (len <= c->stage_len)
                return 0;
        if (c->stage_fd < 0) {
                /* sealed against shrinking, as the daemon requires; it still grows */
                c->stage_fd = memfd_create("loom-state-stage", MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (c->stage_fd < 0 || fcntl(c->stage_fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
                        return loom_err_set(e, LOOM_EIO, "stage", "sealed memfd: %s",
                                            strerror(errno));
        }
        uint64_t want = len < (UINT64_C(1) << 20) ? (UINT64_C(1) << 20) : len;
        if (c->stage)
                munmap(c->stage, c->stage_len);
        c->stage = NULL;
        c->stage_len = 0;
        if (ftruncate(c->stage_fd, (off_t)want) != 0)
                return loom_err_set(e, LOOM_ENOMEM, "stage", "staging buffer of %llu bytes: %s",
                                    (unsigned long long)want, strerror(errno));
        void *p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, c->stage_fd, 0);
        if (p == MAP_FAILED)
                return loom_err_set(e, LOOM_ENOMEM, "stage", "mmap: %s", strerror(errno));
        c->stage = p;
        c->stage_len = want;
        return 0;
}

static int call(loom_state_client *c, json_t *req, const int *fds, int nfds, json_t **rep,
                loom_err *e)
{
        *rep = NULL;
        int rc;
        for (int attempt = 0;; attempt++) {
                if (hung_up(c->fd) && (rc = dial(c, e)) != 0)
                        return rc;
                rc = loom__state_send(c->fd, req, fds, nfds, e);
                /* a send that met a closed socket may still have a reply waiting: the daemon's
                 * refusal of a connection over its limits, sent before it closed */
                if (rc && rc != LOOM_EIO)
                        return rc;
                int rfds[ST_MAX_FDS], nr;
                rc = loom__state_recv(c->fd, rep, rfds, &nr, e);
                for (int i = 0; i < nr; i++)
                        close(rfds[i]);
                if (rc && attempt == 0 && !strcmp(e->msg, "closed")) {
                        /* closed before a byte of the reply: the request was not acted on */
                        if ((rc = dial(c, e)) != 0)
                                return rc;
                        continue;
                }
                if (rc)
                        return rc;
                break;
        }
        if (json_is_true(json_object_get(*rep, "ok")))
                return 0;
        json_t *code = json_object_get(*rep, "code");
        const char *msg = json_string_value(json_object_get(*rep, "error"));
        const char *field = json_string_value(json_object_get(*rep, "field"));
        rc = json_is_integer(code) ? (int)json_integer_value(code) : LOOM_EPROTO;
        if (rc >= 0)
                rc = LOOM_EPROTO;
        loom_err_set(e, rc, field ? field : "", "%s", msg ? msg : "loom-state refused");
        json_decref(*rep);
        *rep = NULL;
        return rc;
}

static void fill_result(json_t *rep, loom_state_result *res)
{
        const char *found = json_string_value(json_object_get(rep, "found"));
        loom_state_tier t = LOOM_STATE_NONE;
        if (found)
                loom_state_tier_parse(found, &t);
        res->found = t;
        res->bytes = (uint64_t)json_integer_value(json_object_get(rep, "bytes"));
        res->dedup_bytes = (uint64_t)json_integer_value(json_object_get(rep, "dedup_bytes"));
        res->disk_bytes = (uint64_t)json_integer_value(json_object_get(rep, "disk_bytes"));
        res->seconds = json_real_value(json_object_get(rep, "seconds"));
}

int loom__state_check_io(const loom_state_io *io, size_t n, loom_err *e)
{
        for (size_t i = 0; i < n; i++) {
                char field[32];
                snprintf(field, sizeof field, "io[%zu]", i);
                int rc = loom_state_key_check(&io[i].key, field, e);
                if (rc)
                        return rc;
                if (io[i].len != loom_state_key_bytes(&io[i].key))
                        return loom_err_set(e, LOOM_EINVAL, field,
                                            "len %llu is not the slice's %llu bytes",
                                            (unsigned long long)io[i].len,
                                            (unsigned long long)loom_state_key_bytes(&io[i].key));
                if (io[i].fd < 0 && !io[i].ptr)
                        return loom_err_set(e, LOOM_EINVAL, field, "no fd and no ptr");
        }
        return 0;
}

/* offload (load = 0) or load (load = 1). */
int loom__state_transfer(loom_state_client *c, const loom_state_io *io, size_t n, int load,
                         loom_state_tier tier, const char *device, loom_state_result *res,
                         loom_err *e)
{
        loom_state_result dummy;
        if (!res)
                res = &dummy;
        memset(res, 0, sizeof *res);
        snprintf(res->path, sizeof res->path, "emulated");
        res->buckets = 1;
        int rc = loom__state_check_io(io, n, e);
        if (rc)
                return rc;
        uint64_t staged = 0;
        for (size_t i = 0; i < n; i++)
                if (io[i].fd < 0)
                        staged += (io[i].len + 63) & ~UINT64_C(63);
        rc = staged ? stage_reserve(c, staged, e) : 0;
        if (rc)
                return rc;
        int fds[ST_MAX_FDS], nfds = 0;
        json_t *items = json_array();
        uint64_t so = 0;
        for (size_t i = 0; i < n && !rc; i++) {
                int fd = io[i].fd;
                uint64_t off = io[i].off;
                if (fd < 0) {
                        fd = c->stage_fd;
                        off = so;
                        if (!load)
                                memcpy(c->stage + so, io[i].ptr, io[i].len);
                        so += (io[i].len + 63) & ~UINT64_C(63);
                }
                int k = 0;
                while (k < nfds && fds[k] != fd)
                        k++;
                if (k == nfds) {
                        if (nfds == ST_MAX_FDS) {
                                rc = loom_err_set(e, LOOM_ERANGE, "io",
                                                  "more than %d distinct descriptors", ST_MAX_FDS);
                                break;
                        }
                        fds[nfds++] = fd;
                }
                json_t *it = loom__state_key_json(&io[i].key);
                json_object_set_new(it, "fd", json_integer(k));
                json_object_set_new(it, "off", json_integer((json_int_t)off));
                json_object_set_new(it, "len", json_integer((json_int_t)io[i].len));
                json_array_append_new(items, it);
        }
        json_t *req = json_pack("{s:s, s:o}", "op", load ? "load" : "offload", "items", items);
        /* Staged bytes pass through the client's own buffer, which the next request reuses:
         * the daemon cannot know they are still in the caller's memory, so no residency. */
        if (load)
                json_object_set_new(req, "device", json_string(device && !staged ? device : ""));
        else
                json_object_set_new(req, "tier", json_string(loom_state_tier_name(tier)));
        json_t *rep = NULL;
        if (!rc)
                rc = call(c, req, fds, nfds, &rep, e);
        json_decref(req);
        if (rc)
                return rc;
        fill_result(rep, res);
        json_decref(rep);
        res->staged_bytes = 0;
        so = 0;
        for (size_t i = 0; i < n; i++)
                if (io[i].fd < 0) {
                        if (load && res->found != LOOM_STATE_DEVICE)
                                memcpy(io[i].ptr, c->stage + so, io[i].len);
                        so += (io[i].len + 63) & ~UINT64_C(63);
                        res->staged_bytes += io[i].len;
                }
        return 0;
}

int loom_state_offload(loom_state_client *c, const loom_state_io *io, size_t n,
                       loom_state_tier tier, loom_state_result *res, loom_err *e)
{
        return loom__state_transfer(c, io, n, 0, tier, NULL, res, e);
}

int loom_state_load(loom_state_client *c, const loom_state_io *io, size_t n, const char *device,
                    loom_state_result *res, loom_err *e)
{
        return loom__state_transfer(c, io, n, 1, LOOM_STATE_NONE, device, res, e);
}

static int simple(loom_state_client *c, json_t *req, loom_err *e)
{
        json_t *rep = NULL;
        int rc = req ? call(c, req, NULL, 0, &rep, e)
                     : loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        json_decref(req);
        json_decref(rep);
        return rc;
}

int loom_state_prefetch(loom_state_client *c, const char *job, loom_err *e)
{
        return simple(c, json_pack("{s:s, s:s}", "op", "prefetch", "job", job), e);
}

int loom_state_order(loom_state_client *c, const char *const *jobs, size_t n, loom_err *e)
{
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, json_string(jobs[i]));
        return simple(c, json_pack("{s:s, s:o}", "op", "order", "jobs", a), e);
}

int loom_state_drop(loom_state_client *c, const char *job, uint64_t version, loom_err *e)
{
        json_int_t v = version > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)version;
        return simple(c, json_pack("{s:s, s:s, s:I}", "op", "drop", "job", job, "version", v), e);
}

static uint64_t geti(json_t *o, const char *k)
{
        return (uint64_t)json_integer_value(json_object_get(o, k));
}

int loom_state_stat(loom_state_client *c, loom_state_stats *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        json_t *req = json_pack("{s:s}", "op", "stat"), *rep = NULL;
        int rc = call(c, req, NULL, 0, &rep, e);
        json_decref(req);
        if (rc)
                return rc;
        out->host_cap = geti(rep, "host_cap");
        out->host_used = geti(rep, "host_used");
        out->disk_cap = geti(rep, "disk_cap");
        out->disk_used = geti(rep, "disk_used");
        out->device_cap = geti(rep, "device_cap");
        out->host_locked = json_is_true(json_object_get(rep, "host_locked"));
        out->evictions = geti(rep, "evictions");
        out->prefetches = geti(rep, "prefetches");
        out->prefetch_bytes = geti(rep, "prefetch_bytes");
        json_t *jobs = json_object_get(rep, "jobs");
        size_t n = json_array_size(jobs);
        out->jobs = calloc(n ? n : 1, sizeof *out->jobs);
        if (!out->jobs) {
                json_decref(rep);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
                json_t *j = json_array_get(jobs, i);
                const char *name = json_string_value(json_object_get(j, "job"));
                snprintf(out->jobs[i].job, sizeof out->jobs[i].job, "%s", name ? name : "");
                out->jobs[i].host_bytes = geti(j, "host_bytes");
                out->jobs[i].disk_bytes = geti(j, "disk_bytes");
                out->jobs[i].device_bytes = geti(j, "device_bytes");
                out->jobs[i].slices = geti(j, "slices");
        }
        out->njobs = n;
        json_decref(rep);
        return 0;
}
