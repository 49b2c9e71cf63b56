/*
 * test_state_peer.c - loom-state lets only a job's own uid (or the configured group) touch its
 * state (src/state/peer.c, SO_PEERCRED), with two real uids: the test (root) and a forked child
 * that drops to uid/gid 65534 before it connects. Skipped when not run as root.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loom/state.h"

#define OTHER 65534 /* nobody / nogroup */
#define N 1000

typedef struct fx {
        char dir[64];
        loom_state_daemon *d;
        pthread_t t;
} fx;

static void *serve(void *arg)
{
        loom_err e;
        loom_state_daemon_run(arg, &e);
        return NULL;
}

/* A daemon on f->dir, serving in a thread. */
static void fx_serve(fx *f, long group)
{
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = f->dir;
        cfg.no_mlock = 1;
        cfg.group = group;
        loom_err e;
        cr_assert_eq(loom_state_daemon_new(&cfg, &f->d, &e), 0, "%s", e.msg);
        cr_assert_eq(pthread_create(&f->t, NULL, serve, f->d), 0);
}

static void fx_start(fx *f, long group)
{
        if (geteuid() != 0)
                cr_skip_test("needs root to act as a second uid");
        snprintf(f->dir, sizeof f->dir, "/tmp/loom-state-peer-XXXXXX");
        cr_assert(mkdtemp(f->dir));
        chmod(f->dir, 0755); /* the other uid must reach the socket */
        fx_serve(f, group);
}

static void fx_halt(fx *f)
{
        loom_state_daemon_stop(f->d);
        pthread_join(f->t, NULL);
        loom_state_daemon_free(f->d);
}

static void fx_stop(fx *f)
{
        fx_halt(f);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
        cr_assert_eq(system(cmd), 0);
}

/* offload (store = 1) or load job's one tensor of N floats filled with `seed`; the status. */
static int io(const char *sock, const char *job, int store, float seed, float *got, loom_err *e)
{
        loom_state_client *c;
        int rc = loom_state_connect(sock, &c, e);
        if (rc)
                return rc;
        float *buf = malloc(N * sizeof *buf);
        for (int i = 0; i < N; i++)
                buf[i] = store ? seed + (float)i : -1;
        loom_state_io x = {.fd = -1, .ptr = buf, .len = N * 4};
        loom_state_key_flat(&x.key, job, 1, "w", N, "f32");
        loom_state_result r;
        rc = store ? loom_state_offload(c, &x, 1, LOOM_STATE_HOST, &r, e)
                   : loom_state_load(c, &x, 1, "", &r, e);
        if (got)
                memcpy(got, buf, N * sizeof *buf);
        free(buf);
        loom_state_close(c);
        return rc;
}

/* Run fn as uid/gid OTHER in a child; its exit status. */
static int as_other(int (*fn)(const char *sock), const char *sock)
{
        pid_t pid = fork();
        if (pid == 0) {
                if (setgroups(0, NULL) || setgid(OTHER) || setuid(OTHER))
                        _exit(99);
                _exit(fn(sock));
        }
        int st;
        waitpid(pid, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 98;
}

/* As the other uid: root's job is invisible, its own job works. */
static int other_isolated(const char *sock)
{
        loom_err e;
        float got[N];
        if (io(sock, "root-job", 0, 0, got, &e) != LOOM_ENOENT || strcmp(e.field, "job"))
                return 1; /* read root's job */
        if (got[0] != -1)
                return 2; /* and got bytes anyway */
        if (io(sock, "root-job", 1, 500, NULL, &e) != LOOM_ENOENT)
                return 3; /* overwrote root's job */
        if (io(sock, "other-job", 1, 7, NULL, &e))
                return 4;
        if (io(sock, "other-job", 0, 0, got, &e) || got[5] != 12)
                return 5;
        loom_state_client *c;
        if (loom_state_connect(sock, &c, &e))
                return 6;
        int rc = loom_state_drop(c, "root-job", UINT64_MAX, &e);
        loom_state_close(c);
        return rc == LOOM_ENOENT ? 0 : 7;
}

static int other_reads_root_job(const char *sock)
{
        loom_err e;
        float got[N];
        return io(sock, "root-job", 0, 0, got, &e) == 0 && got[3] == 4 ? 0 : 1;
}

Test(state_peer, only_the_owning_uid_touches_a_jobs_state)
{
        fx f;
        fx_start(&f, -1);
        const char *sock = loom_state_daemon_sock(f.d);
        loom_err e;
        float got[N];
        cr_assert_eq(io(sock, "root-job", 1, 1, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(as_other(other_isolated, sock), 0);
        /* root is just another uid to other-job */
        cr_assert_eq(io(sock, "other-job", 0, 0, got, &e), LOOM_ENOENT);
        cr_assert_eq(got[0], -1);
        /* root's own job is intact */
        cr_assert_eq(io(sock, "root-job", 0, 0, got, &e), 0, "%s", e.msg);
        cr_assert_eq(got[10], 11);
        fx_stop(&f);
}

Test(state_peer, the_configured_group_may_touch_every_job_and_owners_survive_restart)
{
        fx f;
        fx_start(&f, OTHER);
        const char *sock = loom_state_daemon_sock(f.d);
        loom_err e;
        cr_assert_eq(io(sock, "root-job", 1, 1, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(as_other(other_reads_root_job, sock), 0);
        /* the owner list is on disk: a restarted daemon (no group now) still refuses */
        fx_halt(&f);
        fx_serve(&f, -1);
        cr_assert_eq(as_other(other_reads_root_job, loom_state_daemon_sock(f.d)), 1);
        fx_stop(&f);
}
