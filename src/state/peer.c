/*
 * peer.c - whose state a connection may touch (docs/security.md).
 *
 * loom-state's socket is open to every local user (mode 0666); what protects a job's state is
 * the kernel's word on who is calling (SO_PEERCRED on the Unix socket, which a client cannot
 * forge). The first uid that offloads a job's state owns the job; from then on only
 * that uid, or a member of the group given with --group, may offload, load, prefetch or drop
 * it. Anyone else is told the job has no state (LOOM_ENOENT), as for a job that never had
 * any. Owners survive restarts in DIR/owners, one "uid job" line per claim, appended; a job
 * whose state is dropped entirely has no owner any more (the file is rewritten, and removed
 * when no job is owned).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

typedef struct owner {
        char job[LOOM_STATE_JOB_MAX];
        uid_t uid;
} owner;

struct st_owners {
        pthread_mutex_t mu;
        char path[4200];
        owner *v;
        size_t n, cap;
        long group; /* -1: none */
};

static owner *find(st_owners *o, const char *job)
{
        for (size_t i = 0; i < o->n; i++)
                if (!strcmp(o->v[i].job, job))
                        return &o->v[i];
        return NULL;
}

static int add(st_owners *o, const char *job, uid_t uid)
{
        owner *w = find(o, job);
        if (!w) {
                if (loom_reserve(&o->v, &o->cap, o->n + 1, sizeof *o->v, 16))
                        return LOOM_ENOMEM;
                w = &o->v[o->n++];
                snprintf(w->job, sizeof w->job, "%s", job);
        }
        w->uid = uid;
        return 0;
}

int loom__owners_open(st_owners **out, const char *dir, long group, loom_err *e)
{
        st_owners *o = calloc(1, sizeof *o);
        if (!o)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        pthread_mutex_init(&o->mu, NULL);
        o->group = group;
        snprintf(o->path, sizeof o->path, "%s/owners", dir);
        FILE *f = fopen(o->path, "r");
        char line[LOOM_STATE_JOB_MAX + 32];
        int rc = 0;
        while (f && !rc && fgets(line, sizeof line, f)) {
                unsigned long uid;
                int at = 0;
                line[strcspn(line, "\n")] = '\0';
                if (sscanf(line, "%lu %n", &uid, &at) != 1 || !line[at])
                        rc = loom_err_set(e, LOOM_ECORRUPT, "owners", "%s: bad line '%s'", o->path,
                                          line);
                else if (add(o, line + at, (uid_t)uid))
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        if (f)
                fclose(f);
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
        if (w && w->uid != p->uid && !in_group(p, o->group)) {
                rc = loom_err_set(e, LOOM_ENOENT, "job", "no state of job '%s' for uid %u", job,
                                  (unsigned)p->uid);
        } else if (!w && claim) {
                FILE *f = fopen(o->path, "a");
                if (!f || fprintf(f, "%u %s\n", (unsigned)p->uid, job) < 0 || fflush(f))
                        rc =
                            loom_err_set(e, LOOM_EIO, "owners", "%s: %s", o->path, strerror(errno));
                else if (add(o, job, p->uid))
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                if (f)
                        fclose(f);
        }
        pthread_mutex_unlock(&o->mu);
        return rc;
}

void loom__owners_release(st_owners *o, const char *job)
{
        if (!o)
                return;
        pthread_mutex_lock(&o->mu);
        owner *w = find(o, job);
        if (w) {
                *w = o->v[--o->n];
                char tmp[4300];
                snprintf(tmp, sizeof tmp, "%s.tmp", o->path);
                FILE *f = o->n ? fopen(tmp, "w") : NULL;
                for (size_t i = 0; f && i < o->n; i++)
                        fprintf(f, "%u %s\n", (unsigned)o->v[i].uid, o->v[i].job);
                if (f && !fclose(f))
                        rename(tmp, o->path);
                else if (!o->n)
                        unlink(o->path);
        }
        pthread_mutex_unlock(&o->mu);
}
