/*
 * daemon.c - loom-state's server: a Unix socket, one thread per client connection, and one
 * prefetch thread.
 *
 * Requests (JSON objects, see wire.c) have an "op": offload, load, prefetch, order, drop, stat.
 * offload and load carry "items" ([{key..., "fd": i, "off": o, "len": n}]) and the memfds of the
 * client's buffers, each sealed with F_SEAL_SHRINK (refused otherwise: a buffer that shrinks
 * under a copy would fault the daemon). The connection maps each memfd once (MAP_SHARED, the
 * whole file) and keeps the mapping for later requests (the MAX_MAPS most recently used), like
 * a registered buffer: the copy into or out of the client's memory is one memcpy with no page
 * faults after the first use. A reply is
 * {"ok": true, ...} or {"ok": false, "code": c, "error": msg, "field": f}; it is sent only after
 * the work is done (synchronous semantics).
 *
 * A thread per connection means a connection is a resource one local user must not be able to
 * hoard: at most max_conns are open, at most max_conns_per_uid of them from one uid (the kernel's
 * SO_PEERCRED, taken at accept); one over a limit is told why and closed. A connection waits at
 * most the idle timeout for its next request, and a request, once its first byte is in, must
 * arrive whole within the message timeout (a reply, likewise, must be taken: SO_SNDTIMEO).
 *
 * Prefetch hints are queued; the prefetch thread promotes the job's slices one at a time, so a
 * load that arrives meanwhile interleaves with it slice by slice and finishes what is left.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

#define MAX_MAPS 16 /* mappings a connection keeps between requests */

typedef struct st_map {
        dev_t dev;
        ino_t ino;
        uint8_t *p;
        uint64_t len;
        uint64_t used; /* the connection's request counter at the last use */
        bool stale;    /* replaced by a larger mapping of the same file */
} st_map;

struct loom_state_daemon {
        st_store store;
        char sock[108];
        int lfd;
        int wake[2];
        pthread_mutex_t mu; /* connections, prefetch queue, stop flag */
        pthread_cond_t cv;
        int *conns;      /* max_conns entries: the open connections' fds */
        uid_t *conn_uid; /* and their peers' uids */
        int nconns;
        int max_conns, max_per_uid;
        double idle_s, msg_s; /* <= 0: none */
        double refused_at;    /* when a refusal was last logged (one a second at most) */
        uint64_t refused;
        bool stop;
        char (*queue)[LOOM_STATE_JOB_MAX];
        size_t nqueue, capqueue;
        pthread_t prefetcher;
        bool prefetcher_up;
        st_owners *owners; /* peer.c: which uid owns which job */
};

typedef struct conn {
        loom_state_daemon *d;
        int fd;
        st_peer peer; /* who is calling (SO_PEERCRED) */
        st_map *maps; /* kept between requests: at most MAX_MAPS after each */
        size_t nmaps, capmaps;
        uint64_t tick; /* requests served */
} conn;

void loom_state_cfg_default(loom_state_cfg *cfg)
{
        memset(cfg, 0, sizeof *cfg);
        cfg->host_bytes = LOOM_GIB;
        cfg->disk_bytes = 16 * LOOM_GIB;
        cfg->group = -1;
        cfg->max_conns = LOOM_STATE_MAX_CONNS;
        cfg->max_conns_per_uid = LOOM_STATE_MAX_CONNS_PER_UID;
        cfg->idle_timeout_s = LOOM_STATE_IDLE_TIMEOUT_S;
        cfg->msg_timeout_s = LOOM_STATE_MSG_TIMEOUT_S;
}

st_store *loom__state_daemon_store(loom_state_daemon *d)
{
        return &d->store;
}

const char *loom_state_daemon_sock(const loom_state_daemon *d)
{
        return d->sock;
}

/* ---- buffer mappings -------------------------------------------------------------------- */

/* Map (or reuse the mapping of) memfd `fd` covering [off, off + len). Takes ownership of fd.
 *
 * The buffer must be sealed against shrinking (F_SEAL_SHRINK): a file that its owner truncates
 * while the daemon copies would raise SIGBUS in the daemon. Growing stays allowed (the client's
 * staging buffer grows), and a mapping of the old size still covers valid pages.
 *
 * Mappings used by the running request are never unmapped here, however many distinct files it
 * names: a replaced or surplus mapping is only marked, and trim_maps() unmaps it after the
 * request. */
static int map_fd(conn *c, int fd, uint64_t off, uint64_t len, uint8_t **p, st_where *at,
                  loom_err *e)
{
        struct stat st;
        if (fstat(fd, &st) != 0) {
                close(fd);
                return loom_err_set(e, LOOM_EIO, "fd", "fstat: %s", strerror(errno));
        }
        *at = (st_where){(uint64_t)st.st_dev, (uint64_t)st.st_ino, off};
        int seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
                close(fd);
                return loom_err_set(e, LOOM_EINVAL, "fd",
                                    "buffer is not a memfd sealed with F_SEAL_SHRINK (create it "
                                    "with MFD_ALLOW_SEALING and add the seal with F_ADD_SEALS)");
        }
        if (off + len < off || off + len > (uint64_t)st.st_size) {
                close(fd);
                return loom_err_set(e, LOOM_EINVAL, "off",
                                    "buffer [%" PRIu64 ", +%" PRIu64 ") beyond the %lld-byte fd",
                                    off, len, (long long)st.st_size);
        }
        /* Reuse a mapping only while it covers the whole file: a memfd that grew since (the
         * client's staging buffer) is mapped again. */
        for (size_t i = 0; i < c->nmaps; i++)
                if (!c->maps[i].stale && c->maps[i].dev == st.st_dev &&
                    c->maps[i].ino == st.st_ino && c->maps[i].len >= (uint64_t)st.st_size) {
                        close(fd);
                        c->maps[i].used = c->tick;
                        *p = c->maps[i].p + off;
                        return 0;
                }
        if (loom_reserve(&c->maps, &c->capmaps, c->nmaps + 1, sizeof *c->maps, MAX_MAPS)) {
                close(fd);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        uint8_t *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
                return loom_err_set(e, LOOM_EIO, "fd", "mmap: %s", strerror(errno));
        for (size_t i = 0; i < c->nmaps; i++)
                if (c->maps[i].dev == st.st_dev && c->maps[i].ino == st.st_ino)
                        c->maps[i].stale = true; /* the file grew: the new mapping replaces it */
        c->maps[c->nmaps++] =
            (st_map){st.st_dev, st.st_ino, m, (uint64_t)st.st_size, c->tick, false};
        *p = m + off;
        return 0;
}

/* After a request: unmap replaced mappings, then the least recently used beyond MAX_MAPS. */
static void trim_maps(conn *c)
{
        for (;;) {
                size_t victim = SIZE_MAX, live = 0;
                for (size_t i = 0; i < c->nmaps; i++) {
                        live += !c->maps[i].stale;
                        if (c->maps[i].stale)
                                victim = i;
                }
                if (victim == SIZE_MAX && live > MAX_MAPS)
                        for (size_t i = 0; i < c->nmaps; i++)
                                if (victim == SIZE_MAX || c->maps[i].used < c->maps[victim].used)
                                        victim = i;
                if (victim == SIZE_MAX)
                        return;
                munmap(c->maps[victim].p, c->maps[victim].len);
                c->maps[victim] = c->maps[--c->nmaps];
        }
}

/* ---- requests --------------------------------------------------------------------------- */

static json_t *reply_err(int code, const loom_err *e)
{
        return json_pack("{s:b, s:i, s:s, s:s}", "ok", 0, "code", code, "error",
                         e->msg[0] ? e->msg : loom_strerror(code), "field", e->field);
}

static json_t *reply_result(const loom_state_result *r)
{
        return json_pack("{s:b, s:s, s:I, s:I, s:I, s:f}", "ok", 1, "found",
                         loom_state_tier_name(r->found), "bytes", (json_int_t)r->bytes,
                         "dedup_bytes", (json_int_t)r->dedup_bytes, "disk_bytes",
                         (json_int_t)r->disk_bytes, "seconds", r->seconds);
}

/* Parse items and map their buffers. fds[] are consumed (closed or kept mapped). */
static int parse_items(conn *c, json_t *req, int *fds, int nfds, st_buf **out, size_t *n,
                       loom_err *e)
{
        json_t *items = json_object_get(req, "items");
        size_t k = json_array_size(items);
        st_buf *b = calloc(k ? k : 1, sizeof *b);
        int rc = 0;
        if (!json_is_array(items))
                rc = loom_err_set(e, LOOM_EINVAL, "items", "items must be an array");
        else if (!b)
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        for (size_t i = 0; i < k && !rc; i++) {
                char field[32];
                snprintf(field, sizeof field, "items[%zu]", i);
                json_t *it = json_array_get(items, i);
                rc = loom__state_key_parse(it, field, &b[i].key, e);
                if (rc)
                        break;
                json_t *jf = json_object_get(it, "fd"), *jo = json_object_get(it, "off"),
                       *jl = json_object_get(it, "len");
                if (!json_is_integer(jf) || json_integer_value(jf) < 0 ||
                    json_integer_value(jf) >= nfds || !json_is_integer(jo) ||
                    json_integer_value(jo) < 0 || !json_is_integer(jl)) {
                        rc = loom_err_set(e, LOOM_EINVAL, field,
                                          "fd (index of a passed descriptor), off and len needed");
                        break;
                }
                b[i].len = (uint64_t)json_integer_value(jl);
                if (b[i].len != loom_state_key_bytes(&b[i].key)) {
                        rc = loom_err_set(e, LOOM_EINVAL, field,
                                          "len %" PRIu64 " is not the slice's %" PRIu64 " bytes",
                                          b[i].len, loom_state_key_bytes(&b[i].key));
                        break;
                }
                int fi = (int)json_integer_value(jf);
                int dupfd = fcntl(fds[fi], F_DUPFD_CLOEXEC, 0);
                if (dupfd < 0) {
                        rc = loom_err_set(e, LOOM_EIO, field, "dup: %s", strerror(errno));
                        break;
                }
                rc = map_fd(c, dupfd, (uint64_t)json_integer_value(jo), b[i].len, &b[i].p, &b[i].at,
                            e);
        }
        for (int i = 0; i < nfds; i++)
                close(fds[i]);
        if (rc) {
                free(b);
                return rc;
        }
        *out = b;
        *n = k;
        return 0;
}

static void enqueue_prefetch(loom_state_daemon *d, const char *job)
{
        pthread_mutex_lock(&d->mu);
        bool dup = false;
        for (size_t i = 0; i < d->nqueue; i++)
                dup = dup || !strcmp(d->queue[i], job);
        if (!dup && !loom_reserve(&d->queue, &d->capqueue, d->nqueue + 1, sizeof *d->queue, 8)) {
                snprintf(d->queue[d->nqueue], sizeof d->queue[0], "%s", job);
                d->nqueue++;
                pthread_cond_broadcast(&d->cv);
        }
        pthread_mutex_unlock(&d->mu);
}

static json_t *stat_reply(loom_state_daemon *d, loom_err *e)
{
        loom_state_stats st;
        int rc = loom__store_stat(&d->store, &st, e);
        if (rc)
                return reply_err(rc, e);
        json_t *jobs = json_array();
        for (size_t i = 0; i < st.njobs; i++)
                json_array_append_new(jobs,
                                      json_pack("{s:s, s:I, s:I, s:I, s:I}", "job", st.jobs[i].job,
                                                "host_bytes", (json_int_t)st.jobs[i].host_bytes,
                                                "disk_bytes", (json_int_t)st.jobs[i].disk_bytes,
                                                "device_bytes", (json_int_t)st.jobs[i].device_bytes,
                                                "slices", (json_int_t)st.jobs[i].slices));
        json_t *r = json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:I, s:o}", "ok", 1,
                              "host_cap", (json_int_t)st.host_cap, "host_used",
                              (json_int_t)st.host_used, "disk_cap", (json_int_t)st.disk_cap,
                              "disk_used", (json_int_t)st.disk_used, "device_cap",
                              (json_int_t)st.device_cap, "host_locked", st.host_locked, "evictions",
                              (json_int_t)st.evictions, "prefetches", (json_int_t)st.prefetches,
                              "prefetch_bytes", (json_int_t)st.prefetch_bytes, "jobs", jobs);
        loom_state_stats_free(&st);
        return r;
}

static const char *jstr(json_t *req, const char *k)
{
        json_t *v = json_object_get(req, k);
        return json_is_string(v) ? json_string_value(v) : NULL;
}

static json_t *handle(conn *c, json_t *req, int *fds, int nfds)
{
        loom_state_daemon *d = c->d;
        loom_err e;
        loom_err_clear(&e);
        const char *op = jstr(req, "op");
        if (!op)
                op = "";
        if (!strcmp(op, "offload") || !strcmp(op, "load")) {
                st_buf *b = NULL;
                size_t n = 0;
                loom_state_result res;
                double t0 = loom__state_now();
                c->tick++;
                int rc = parse_items(c, req, fds, nfds, &b, &n, &e);
                /* once per job: a request's tensors are usually all one job's, and a group
                 * check looks the peer up in the user and group databases */
                for (size_t i = 0; i < n && !rc; i++)
                        if (i == 0 || strcmp(b[i].key.job, b[i - 1].key.job))
                                rc = loom__owners_check(d->owners, &c->peer, b[i].key.job,
                                                        !strcmp(op, "offload"), &e);
                if (!rc && !strcmp(op, "offload")) {
                        loom_state_tier tier = LOOM_STATE_HOST;
                        const char *ts = jstr(req, "tier");
                        if (ts && loom_state_tier_parse(ts, &tier))
                                rc = loom_err_set(&e, LOOM_EINVAL, "tier", "unknown tier '%s'", ts);
                        if (!rc)
                                rc = loom__store_offload(&d->store, b, n, tier, &res, &e);
                } else if (!rc) {
                        const char *dev = jstr(req, "device");
                        rc = loom__store_load(&d->store, b, n, dev ? dev : "", &res, &e);
                }
                free(b);
                trim_maps(c);
                if (rc)
                        return reply_err(rc, &e);
                res.seconds = loom__state_now() - t0;
                return reply_result(&res);
        }
        for (int i = 0; i < nfds; i++)
                close(fds[i]);
        if (!strcmp(op, "prefetch")) {
                const char *job = jstr(req, "job");
                int rc = loom__state_job_check(job, LOOM_STATE_JOB_MAX, "job", &e);
                if (!rc)
                        rc = loom__owners_check(d->owners, &c->peer, job, false, &e);
                if (rc)
                        return reply_err(rc, &e);
                pthread_mutex_lock(&d->store.mu);
                d->store.prefetches++;
                pthread_mutex_unlock(&d->store.mu);
                enqueue_prefetch(d, job);
                return json_pack("{s:b}", "ok", 1);
        }
        if (!strcmp(op, "order")) {
                json_t *jobs = json_object_get(req, "jobs");
                if (!json_is_array(jobs))
                        return reply_err(loom_err_set(&e, LOOM_EINVAL, "jobs", "jobs: an array"),
                                         &e);
                size_t n = json_array_size(jobs);
                const char **v = calloc(n ? n : 1, sizeof *v);
                if (!v)
                        return reply_err(loom_err_set(&e, LOOM_ENOMEM, "", "out of memory"), &e);
                for (size_t i = 0; i < n; i++) {
                        v[i] = json_string_value(json_array_get(jobs, i));
                        char field[32];
                        snprintf(field, sizeof field, "jobs[%zu]", i);
                        int rc = loom__state_job_check(v[i], LOOM_STATE_JOB_MAX, field, &e);
                        if (rc) {
                                free(v);
                                return reply_err(rc, &e);
                        }
                }
                int rc = loom__store_order(&d->store, v, n);
                free(v);
                return rc ? reply_err(rc, &e) : json_pack("{s:b}", "ok", 1);
        }
        if (!strcmp(op, "drop")) {
                const char *job = jstr(req, "job");
                json_t *v = json_object_get(req, "version");
                if (!json_is_integer(v))
                        return reply_err(loom_err_set(&e, LOOM_EINVAL, "version", "version needed"),
                                         &e);
                int rc = loom__state_job_check(job, LOOM_STATE_JOB_MAX, "job", &e);
                if (!rc)
                        rc = loom__owners_check(d->owners, &c->peer, job, false, &e);
                if (rc)
                        return reply_err(rc, &e);
                rc = loom__store_drop(&d->store, job, (uint64_t)json_integer_value(v), &e);
                if (rc)
                        return reply_err(rc, &e);
                /* every version (loom_state_drop): the job has no owner any more; if the file
                 * cannot say so, the old owner keeps the name of a job with no state */
                if (json_integer_value(v) == INT64_MAX &&
                    loom__owners_release(d->owners, job, &e) && d->store.cfg.log)
                        d->store.cfg.log(d->store.cfg.log_arg, e.msg);
                return json_pack("{s:b}", "ok", 1);
        }
        if (!strcmp(op, "stat"))
                return stat_reply(d, &e);
        return reply_err(loom_err_set(&e, LOOM_EINVAL, "op", "unknown op '%s'", op), &e);
}

static void *conn_main(void *arg)
{
        conn *c = arg;
        loom_state_daemon *d = c->d;
        for (;;) {
                json_t *req;
                int fds[ST_MAX_FDS], nfds;
                loom_err e;
                /* an idle connection is closed: it holds a thread and a slot of max_conns */
                struct pollfd pf = {.fd = c->fd, .events = POLLIN};
                int k = poll(&pf, 1, d->idle_s > 0 ? (int)(d->idle_s * 1000) : -1);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                if (loom__state_recv_by(c->fd, d->msg_s, &req, fds, &nfds, &e)) {
                        for (int i = 0; i < nfds; i++)
                                close(fds[i]);
                        break;
                }
                json_t *rep = handle(c, req, fds, nfds);
                json_decref(req);
                int rc = rep ? loom__state_send(c->fd, rep, NULL, 0, &e) : LOOM_ENOMEM;
                json_decref(rep);
                if (rc)
                        break;
        }
        for (size_t i = 0; i < c->nmaps; i++)
                munmap(c->maps[i].p, c->maps[i].len);
        free(c->maps);
        pthread_mutex_lock(&d->mu);
        for (int i = 0; i < d->nconns; i++)
                if (d->conns[i] == c->fd) {
                        d->nconns--;
                        d->conns[i] = d->conns[d->nconns];
                        d->conn_uid[i] = d->conn_uid[d->nconns];
                        break;
                }
        close(c->fd);
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        free(c);
        return NULL;
}

static void *prefetch_main(void *arg)
{
        loom_state_daemon *d = arg;
        pthread_mutex_lock(&d->mu);
        for (;;) {
                while (!d->stop && !d->nqueue)
                        pthread_cond_wait(&d->cv, &d->mu);
                if (d->stop)
                        break;
                char job[LOOM_STATE_JOB_MAX];
                memcpy(job, d->queue[0], sizeof job);
                memmove(d->queue, d->queue + 1, (d->nqueue - 1) * sizeof *d->queue);
                d->nqueue--;
                pthread_mutex_unlock(&d->mu);
                loom_err e;
                int rc;
                while ((rc = loom__store_prefetch_step(&d->store, job, &e)) == 1)
                        ;
                if (rc < 0 && d->store.cfg.log) {
                        char line[700];
                        snprintf(line, sizeof line, "prefetch %s stopped: %s", job, e.msg);
                        d->store.cfg.log(d->store.cfg.log_arg, line);
                }
                pthread_mutex_lock(&d->mu);
        }
        pthread_mutex_unlock(&d->mu);
        return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------------- */

/* Every job with state on disk was claimed before its first slice was stored, so one without
 * an owner lost its line (bad, conflicting, or the file unreadable): nobody may be sure whose
 * it is, so nobody but the group may touch it (peer.c). */
static void orphan_unowned(loom_state_daemon *d)
{
        st_store *s = &d->store;
        for (size_t i = 0; i < s->nslices; i++) {
                const char *job = s->slices[i]->key.job;
                if (loom__owners_orphan(d->owners, job) && s->cfg.log) {
                        char line[4400];
                        snprintf(line, sizeof line,
                                 "job '%s' has state on disk but no owner in %s/owners: only "
                                 "--group may touch it until its \"UID JOB\" line is restored",
                                 job, s->dir);
                        s->cfg.log(s->cfg.log_arg, line);
                }
        }
}

/* Why a new connection from uid cannot be served (d->mu held), or NULL. */
static const char *over_limit(loom_state_daemon *d, uid_t uid, char *why, size_t len)
{
        int mine = 0;
        for (int i = 0; i < d->nconns; i++)
                mine += d->conn_uid[i] == uid;
        if (mine >= d->max_per_uid)
                snprintf(why, len,
                         "too many connections from uid %u: %d open, at most %d "
                         "(loom-state --max-conns-per-uid)",
                         (unsigned)uid, mine, d->max_per_uid);
        else if (d->nconns >= d->max_conns)
                snprintf(why, len,
                         "too many connections: %d open, at most %d (loom-state "
                         "--max-conns)",
                         d->nconns, d->max_conns);
        else
                return NULL;
        return why;
}

/* Tell a refused client why before closing (it reads this as the reply to its first request),
 * and log it, once a second at most: a flood of refusals must not flood the log. */
static void refuse(loom_state_daemon *d, int fd, const char *why)
{
        struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        loom_err e;
        loom_err_clear(&e);
        loom_err_set(&e, LOOM_ERANGE, "connections", "%s", why);
        json_t *r = reply_err(LOOM_ERANGE, &e);
        if (r)
                loom__state_send(fd, r, NULL, 0, &e);
        json_decref(r);
        close(fd);
        double now = loom__state_now();
        d->refused++;
        if (d->store.cfg.log && now - d->refused_at >= 1) {
                char line[300];
                snprintf(line, sizeof line, "refused a connection (%" PRIu64 " so far): %s",
                         d->refused, why);
                d->store.cfg.log(d->store.cfg.log_arg, line);
                d->refused_at = now;
        }
}

/* Replies and message reads may not block for ever on a peer that stopped reading. */
static void set_send_timeout(loom_state_daemon *d, int fd)
{
        if (d->msg_s <= 0)
                return;
        struct timeval tv = {.tv_sec = (time_t)d->msg_s,
                             .tv_usec = (suseconds_t)((d->msg_s - (double)(time_t)d->msg_s) * 1e6)};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int loom_state_daemon_new(const loom_state_cfg *cfg, loom_state_daemon **out, loom_err *e)
{
        *out = NULL;
        loom_state_daemon *d = calloc(1, sizeof *d);
        if (!d)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        d->lfd = -1;
        d->wake[0] = d->wake[1] = -1;
        int rc = loom__store_open(&d->store, cfg, e);
        if (!rc && (rc = loom__owners_open(&d->owners, cfg, e)))
                loom__store_close(&d->store);
        if (rc) {
                free(d);
                return rc;
        }
        pthread_mutex_init(&d->mu, NULL);
        pthread_cond_init(&d->cv, NULL);
        orphan_unowned(d);
        d->max_conns = cfg->max_conns > 0 ? cfg->max_conns : LOOM_STATE_MAX_CONNS;
        d->max_per_uid =
            cfg->max_conns_per_uid > 0 ? cfg->max_conns_per_uid : LOOM_STATE_MAX_CONNS_PER_UID;
        d->idle_s = cfg->idle_timeout_s == 0 ? LOOM_STATE_IDLE_TIMEOUT_S : cfg->idle_timeout_s;
        d->msg_s = cfg->msg_timeout_s == 0 ? LOOM_STATE_MSG_TIMEOUT_S : cfg->msg_timeout_s;
        d->conns = calloc((size_t)d->max_conns, sizeof *d->conns);
        d->conn_uid = calloc((size_t)d->max_conns, sizeof *d->conn_uid);
        if (!d->conns || !d->conn_uid) {
                loom_state_daemon_free(d);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        int n = cfg->sock_path ? snprintf(d->sock, sizeof d->sock, "%s", cfg->sock_path)
                               : snprintf(d->sock, sizeof d->sock, "%s/loom-state.sock", cfg->dir);
        if (n < 0 || (size_t)n >= sizeof d->sock) {
                loom_state_daemon_free(d);
                return loom_err_set(e, LOOM_EINVAL, "sock", "socket path longer than %zu bytes",
                                    sizeof d->sock - 1);
        }
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, d->sock, sizeof d->sock);
        unlink(d->sock);
        d->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (d->lfd < 0 || bind(d->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
            listen(d->lfd, 64) != 0 || pipe2(d->wake, O_CLOEXEC) != 0 ||
            chmod(d->sock, 0666) != 0) { /* any local user; each job's owner checked (peer.c) */
                rc = loom_err_set(e, LOOM_EIO, "sock", "%s: %s", d->sock, strerror(errno));
                loom_state_daemon_free(d);
                return rc;
        }
        if (pthread_create(&d->prefetcher, NULL, prefetch_main, d) != 0) {
                loom_state_daemon_free(d);
                return loom_err_set(e, LOOM_ENOMEM, "", "cannot start the prefetch thread");
        }
        d->prefetcher_up = true;
        *out = d;
        return 0;
}

int loom_state_daemon_run(loom_state_daemon *d, loom_err *e)
{
        for (;;) {
                struct pollfd p[2] = {{.fd = d->lfd, .events = POLLIN},
                                      {.fd = d->wake[0], .events = POLLIN}};
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return loom_err_set(e, LOOM_EIO, "sock", "poll: %s", strerror(errno));
                }
                if (p[1].revents)
                        return 0;
                int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                st_peer peer;
                if (loom__peer_cred(fd, &peer)) {
                        close(fd);
                        continue;
                }
                char why[200];
                pthread_mutex_lock(&d->mu);
                const char *full = over_limit(d, peer.uid, why, sizeof why);
                if (!full) {
                        d->conns[d->nconns] = fd;
                        d->conn_uid[d->nconns++] = peer.uid;
                }
                pthread_mutex_unlock(&d->mu);
                if (full) {
                        refuse(d, fd, full);
                        continue;
                }
                set_send_timeout(d, fd);
                conn *c = calloc(1, sizeof *c);
                bool started = false;
                if (c) {
                        c->d = d;
                        c->fd = fd;
                        c->peer = peer;
                        pthread_t t;
                        pthread_attr_t at;
                        pthread_attr_init(&at);
                        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                        started = pthread_create(&t, &at, conn_main, c) == 0;
                        pthread_attr_destroy(&at);
                }
                if (!started) {
                        pthread_mutex_lock(&d->mu);
                        for (int i = 0; i < d->nconns; i++)
                                if (d->conns[i] == fd) {
                                        d->nconns--;
                                        d->conns[i] = d->conns[d->nconns];
                                        d->conn_uid[i] = d->conn_uid[d->nconns];
                                        break;
                                }
                        pthread_mutex_unlock(&d->mu);
                        free(c);
                        close(fd);
                }
        }
}

/* The daemon's loop on a thread of its own (loom__state_serve). */
static void *serve(void *arg)
{
        loom_err e;
        loom_state_daemon_run(arg, &e);
        return NULL;
}

int loom__state_serve(const loom_state_cfg *cfg, loom_state_daemon **d, pthread_t *thr, loom_err *e)
{
        int rc = loom_state_daemon_new(cfg, d, e);
        if (rc)
                return rc;
        if (pthread_create(thr, NULL, serve, *d) != 0) {
                loom_state_daemon_free(*d);
                *d = NULL;
                return loom_err_set(e, LOOM_ENOMEM, "", "cannot start the daemon thread");
        }
        return 0;
}

void loom__state_unserve(loom_state_daemon *d, pthread_t thr)
{
        if (!d)
                return;
        loom_state_daemon_stop(d);
        pthread_join(thr, NULL);
        loom_state_daemon_free(d);
}

void loom_state_daemon_stop(loom_state_daemon *d)
{
        char x = 1;
        ssize_t w = write(d->wake[1], &x, 1);
        (void)w;
}

void loom_state_daemon_free(loom_state_daemon *d)
{
        if (!d)
                return;
        pthread_mutex_lock(&d->mu);
        d->stop = true;
        for (int i = 0; i < d->nconns; i++)
                shutdown(d->conns[i], SHUT_RDWR);
        while (d->nconns)
                pthread_cond_wait(&d->cv, &d->mu);
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        if (d->prefetcher_up)
                pthread_join(d->prefetcher, NULL);
        if (d->lfd >= 0) {
                close(d->lfd);
                unlink(d->sock);
        }
        for (int i = 0; i < 2; i++)
                if (d->wake[i] >= 0)
                        close(d->wake[i]);
        free(d->queue);
        free(d->conns);
        free(d->conn_uid);
        loom__store_close(&d->store);
        loom__owners_close(d->owners);
        free(d);
}
