/*
 * peer.c - whose state a connection may touch (docs/security.md), and the file that remembers it.
 *
 * loom-state's socket is open to every local user (mode 0666); what protects a job's state is
 * the kernel's word on who is calling (SO_PEERCRED on the Unix socket, which a client cannot
 * forge). The first uid that offloads a job's state owns the job; from then on only that uid,
 * or a member of the group given with --group, may offload, load, prefetch or drop it. Anyone
 * else is told the job has no state (LOOM_ENOENT), as for a job that never had any. A job whose
 * state is dropped entirely has no owner any more.
 *
 * Owners survive restarts in DIR/owners: '#' comment lines, then one "UID JOB\n" line per owned
 * job, UID in canonical decimal, one space, JOB the rest of the line. Job names never hold a
 * control character (loom__state_job_check refuses them at the API), so a name cannot end its
 * line or add one. The file is only ever replaced whole: written to DIR/owners.tmp, fsynced,
 * renamed over DIR/owners, and the directory fsynced, before the claim or release it records is
 * acted on; a crash leaves the old file or the new one, never a torn line.
 *
 * Reading is strict and never fatal. A line that does not parse is skipped and logged. A job
 * named by two lines with different uids belongs to neither. And a job that has state on disk
 * but no owner (its line was bad, lost or conflicting: see loom__owners_orphan) is *orphaned*:
 * no uid may touch it and none may claim it, only members of --group (who may touch every job
 * anyway), until an operator writes its line back (or its state is dropped by the group). The
 * safe failure is a job nobody can reach, never one the wrong uid can.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define OWNERS_HEAD "# loom-state owners: one \"UID JOB\" line per owned job (docs/state.md)\n"

typedef struct owner {
        char job[LOOM_STATE_JOB_MAX];
        uid_t uid;
        bool orphan; /* no uid owns it for sure: reachable by the group only, never written */
} owner;

struct st_owners {
        pthread_mutex_t mu;
        char dir[4096];
        char path[4200];
        owner *v;
        size_t n, cap;
        long group; /* -1: none */
        void (*log)(void *arg, const char *line);
        void *log_arg;
};

static void logf_(st_owners *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(st_owners *o, const char *fmt, ...)
{
        if (!o->log)
                return;
        char line[700];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
        o->log(o->log_arg, line);
}

static owner *find(st_owners *o, const char *job)
{
        for (size_t i = 0; i < o->n; i++)
                if (!strcmp(o->v[i].job, job))
                        return &o->v[i];
        return NULL;
}

static owner *add(st_owners *o, const char *job, uid_t uid, bool orphan)
{
        if (loom_reserve(&o->v, &o->cap, o->n + 1, sizeof *o->v, 16))
                return NULL;
        owner *w = &o->v[o->n++];
        snprintf(w->job, sizeof w->job, "%s", job);
        w->uid = uid;
        w->orphan = orphan;
        return w;
}

static void remove_at(st_owners *o, owner *w)
{
        *w = o->v[--o->n];
}

int loom__owners_new(st_owners **out, const loom_state_cfg *cfg, loom_err *e)
{
        st_owners *o = calloc(1, sizeof *o);
        if (!o)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        pthread_mutex_init(&o->mu, NULL);
        o->group = cfg->group;
        o->log = cfg->log;
        o->log_arg = cfg->log_arg;
        snprintf(o->dir, sizeof o->dir, "%s", cfg->dir ? cfg->dir : ".");
        snprintf(o->path, sizeof o->path, "%s/owners", o->dir);
        *out = o;
        return 0;
}

/* The line as the log may show it: printable ASCII kept, other bytes as \xNN, cut at 80. */
static void escape(const char *p, size_t n, char *buf, size_t cap)
{
        size_t k = 0;
        for (size_t i = 0; i < n && k + 5 < cap; i++) {
                unsigned char ch = (unsigned char)p[i];
                if (i == 80) {
                        snprintf(buf + k, cap - k, "...");
                        k += 3;
                        break;
                }
                if (ch >= 0x20 && ch < 0x7f && ch != '\\')
                        buf[k++] = (char)ch;
                else
                        k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", ch);
        }
        buf[k] = '\0';
}

/* "UID JOB" without its newline: 0 and the fields, or a reason. */
static const char *parse_line(const char *p, size_t n, uid_t *uid, char *job)
{
        size_t i = 0;
        uint64_t v = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9' && i < 11)
                v = v * 10 + (uint64_t)(p[i++] - '0');
        if (i == 0)
                return "no uid";
        if ((p[0] == '0' && i > 1) || i > 10 || v >= (uint64_t)(uid_t)-1)
                return "uid not a canonical number below 4294967295";
        if (i >= n || p[i] != ' ')
                return "no single space after the uid";
        i++;
        if (n - i >= LOOM_STATE_JOB_MAX || n == i)
                return "job name empty or too long";
        if (memchr(p + i, '\0', n - i))
                return "job name holds a NUL byte";
        memcpy(job, p + i, n - i);
        job[n - i] = '\0';
        loom_err e;
        if (loom__state_job_check(job, LOOM_STATE_JOB_MAX, "job", &e))
                return "job name not valid";
        *uid = (uid_t)v;
        return NULL;
}

int loom__owners_parse(st_owners *o, const char *text, size_t len, loom_err *e)
{
        size_t lineno = 0;
        for (size_t at = 0; at < len;) {
                const char *p = text + at, *nl = memchr(p, '\n', len - at);
                size_t n = nl ? (size_t)(nl - p) : len - at;
                at += n + 1;
                lineno++;
                if (n == 0 || p[0] == '#')
                        continue;
                uid_t uid;
                char job[LOOM_STATE_JOB_MAX], shown[400];
                const char *why = nl ? parse_line(p, n, &uid, job) : "unterminated last line";
                if (why) {
                        escape(p, n, shown, sizeof shown);
                        logf_(o, "%s line %zu skipped (%s): '%s'", o->path, lineno, why, shown);
                        continue;
                }
                owner *w = find(o, job);
                if (w && !w->orphan && w->uid != uid) {
                        logf_(o,
                              "%s line %zu: job '%s' is claimed by uid %u and uid %u: "
                              "neither may touch it",
                              o->path, lineno, job, (unsigned)w->uid, (unsigned)uid);
                        w->orphan = true;
                } else if (!w && !add(o, job, uid, false))
                        return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        return 0;
}

int loom__owners_open(st_owners **out, const loom_state_cfg *cfg, loom_err *e)
{
        st_owners *o;
        int rc = loom__owners_new(&o, cfg, e);
        if (rc)
                return rc;
        FILE *f = fopen(o->path, "r");
        if (!f && errno != ENOENT)
                logf_(o, "%s: %s: no job has a known owner; jobs with state are orphaned", o->path,
                      strerror(errno));
        char *text = NULL;
        size_t len = 0, cap = 0;
        while (f && !rc) {
                if (loom_reserve(&text, &cap, len + 4096, 1, 4096)) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                size_t k = fread(text + len, 1, cap - len, f);
                len += k;
                if (k == 0) {
                        if (ferror(f))
                                logf_(o, "%s: read error: lines after byte %zu are lost", o->path,
                                      len);
                        break;
                }
        }
        if (f)
                fclose(f);
        if (!rc)
                rc = loom__owners_parse(o, text, len, e);
        free(text);
        if (rc) {
                loom__owners_close(o);
                return rc;
        }
        *out = o;
        return 0;
}

void loom__owners_close(st_owners *o)
{
        if (!o)
                return;
        pthread_mutex_destroy(&o->mu);
        free(o->v);
        free(o);
}

int loom__owners_format(st_owners *o, char **out, size_t *len)
{
        size_t cap = sizeof OWNERS_HEAD + o->n * (LOOM_STATE_JOB_MAX + 12);
        char *buf = malloc(cap);
        if (!buf)
                return LOOM_ENOMEM;
        size_t k = (size_t)snprintf(buf, cap, "%s", OWNERS_HEAD);
        for (size_t i = 0; i < o->n; i++)
                if (!o->v[i].orphan)
                        k += (size_t)snprintf(buf + k, cap - k, "%u %s\n", (unsigned)o->v[i].uid,
                                              o->v[i].job);
        *out = buf;
        *len = k;
        return 0;
}

int loom__owners_lookup(st_owners *o, const char *job, uid_t *uid)
{
        pthread_mutex_lock(&o->mu);
        owner *w = find(o, job);
        int r = !w ? 0 : w->orphan ? -1 : 1;
        if (w && uid)
                *uid = w->uid;
        pthread_mutex_unlock(&o->mu);
        return r;
}

static int write_file(int fd, const char *p, size_t n)
{
        while (n) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return -1;
                p += w, n -= (size_t)w;
        }
        return 0;
}

static int fsync_path(const char *path, int flags)
{
        int fd = open(path, flags | O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        int rc = fsync(fd);
        close(fd);
        return rc;
}

/* Replace DIR/owners with what o holds (no file when nothing is owned): temporary file,
 * fsync, rename, fsync of the directory, so the change is whole and durable once this
 * returns 0. */
static int save(st_owners *o, loom_err *e)
{
        char tmp[4300], *text = NULL;
        size_t len = 0;
        bool any = false;
        for (size_t i = 0; i < o->n; i++)
                any = any || !o->v[i].orphan;
        snprintf(tmp, sizeof tmp, "%s.tmp", o->path);
        if (!any) {
                if (unlink(o->path) && errno != ENOENT)
                        return loom_err_set(e, LOOM_EIO, "owners", "unlink %s: %s", o->path,
                                            strerror(errno));
        } else {
                if (loom__owners_format(o, &text, &len))
                        return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                /* the file names other users' jobs: only the daemon reads it */
                int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                int rc = fd < 0 || write_file(fd, text, len) || fsync(fd) ? -1 : 0;
                int err = errno;
                if (fd >= 0)
                        close(fd);
                free(text);
                if (!rc && rename(tmp, o->path))
                        rc = -1, err = errno;
                if (rc) {
                        unlink(tmp);
                        return loom_err_set(e, LOOM_EIO, "owners", "%s: %s", tmp, strerror(err));
                }
        }
        if (fsync_path(o->dir, O_DIRECTORY))
                return loom_err_set(e, LOOM_EIO, "owners", "fsync %s: %s", o->dir, strerror(errno));
        return 0;
}

int loom__peer_cred(int fd, st_peer *p)
{
        struct ucred c;
        socklen_t n = sizeof c;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &n))
                return LOOM_EIO;
        p->uid = c.uid;
        p->gid = c.gid;
        return 0;
}

static bool in_group(const st_peer *p, long group)
{
        if (group < 0)
                return false;
        if (p->gid == (gid_t)group)
                return true;
        struct passwd pw, *res = NULL;
        char buf[4096];
        if (getpwuid_r(p->uid, &pw, buf, sizeof buf, &res) || !res)
                return false;
        gid_t groups[256];
        int n = 256;
        if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0)
                return false;
        for (int i = 0; i < n; i++)
                if (groups[i] == (gid_t)group)
                        return true;
        return false;
}

int loom__owners_check(st_owners *o, const st_peer *p, const char *job, bool claim, loom_err *e)
{
        if (!o)
                return 0;
        pthread_mutex_lock(&o->mu);
        owner *w = find(o, job);
        int rc = 0;
        if (w && (w->orphan || w->uid != p->uid) && !in_group(p, o->group)) {
                rc = loom_err_set(e, LOOM_ENOENT, "job", "no state of job '%s' for uid %u", job,
                                  (unsigned)p->uid);
        } else if (!w && claim) {
                /* on disk before the state it protects is stored */
                if (!add(o, job, p->uid, false))
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                else if ((rc = save(o, e)) != 0)
                        remove_at(o, &o->v[o->n - 1]);
        }
        pthread_mutex_unlock(&o->mu);
        return rc;
}

bool loom__owners_orphan(st_owners *o, const char *job)
{
        pthread_mutex_lock(&o->mu);
        bool made = !find(o, job) && add(o, job, (uid_t)-1, true);
        pthread_mutex_unlock(&o->mu);
        return made;
}

int loom__owners_release(st_owners *o, const char *job, loom_err *e)
{
        if (!o)
                return 0;
        pthread_mutex_lock(&o->mu);
        owner *w = find(o, job);
        int rc = 0;
        if (w) {
                bool written = !w->orphan;
                remove_at(o, w);
                if (written)
                        rc = save(o, e);
        }
        pthread_mutex_unlock(&o->mu);
        return rc;
}
