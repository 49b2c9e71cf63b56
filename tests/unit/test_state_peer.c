/*
 * test_state_peer.c - loom-state lets only a job's own uid (or the configured group) touch its
 * state (src/state/peer.c, SO_PEERCRED), with two real uids: the test (root) and a forked child
 * that drops to uid/gid 65534 before it connects. Skipped when not run as root.
 *
 * Also what must never hand one uid's job to another: a job name that would add a line to
 * DIR/owners, a line that does not parse (the daemon starts, and the job stays unreachable
 * rather than becoming someone's), and one uid holding every connection.
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

/* offload (store = 1, 2: to the disk tier) or load job's one tensor of N floats filled with `seed`;
 * the status. */
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
        rc = store ? loom_state_offload(c, &x, 1, store == 2 ? LOOM_STATE_DISK : LOOM_STATE_HOST,
                                        &r, e)
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

/* As the other uid: a job whose name carries a second owners line. */
static int other_injects(const char *sock)
{
        loom_err e;
        int rc = io(sock, "evil\n65534 root-job", 1, 9, NULL, &e);
        return rc == LOOM_EINVAL && strstr(e.msg, "control characters") ? 0 : 1;
}

static int other_touches_root_job(const char *sock)
{
        loom_err e;
        float got[N];
        if (io(sock, "root-job", 0, 0, got, &e) != LOOM_ENOENT || got[0] != -1)
                return 1;
        return io(sock, "root-job", 1, 500, NULL, &e) == LOOM_ENOENT ? 0 : 2;
}

Test(state_peer, a_job_name_cannot_add_an_owners_line)
{
        fx f;
        fx_start(&f, -1);
        const char *sock = loom_state_daemon_sock(f.d);
        loom_err e;
        float got[N];
        cr_assert_eq(io(sock, "root-job", 2, 1, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(as_other(other_injects, sock), 0, "the name is refused");
        fx_halt(&f);
        fx_serve(&f, -1);
        sock = loom_state_daemon_sock(f.d);
        cr_assert_eq(as_other(other_touches_root_job, sock), 0, "root's job stays root's");
        cr_assert_eq(io(sock, "root-job", 0, 0, got, &e), 0, "%s", e.msg);
        cr_assert_eq(got[10], 11);
        fx_stop(&f);
}

static void write_owners(fx *f, const char *text)
{
        char path[128];
        snprintf(path, sizeof path, "%s/owners", f->dir);
        FILE *o = fopen(path, "w");
        cr_assert(o);
        fputs(text, o);
        fclose(o);
}

Test(state_peer, a_bad_owners_line_never_stops_the_daemon_nor_hands_a_job_over)
{
        fx f;
        fx_start(&f, -1);
        loom_err e;
        float got[N];
        cr_assert_eq(io(loom_state_daemon_sock(f.d), "root-job", 2, 1, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(io(loom_state_daemon_sock(f.d), "kept", 2, 1, NULL, &e), 0, "%s", e.msg);
        fx_halt(&f);
        /* root-job's line is lost to a line that does not parse */
        write_owners(&f, "0 kept\nthis is not a line\n");
        fx_serve(&f, -1); /* asserts it starts */
        const char *sock = loom_state_daemon_sock(f.d);
        cr_assert_eq(as_other(other_touches_root_job, sock), 0, "nobody claims the orphan");
        cr_assert_eq(io(sock, "root-job", 0, 0, got, &e), LOOM_ENOENT, "not even its old owner");
        cr_assert_eq(io(sock, "kept", 0, 0, got, &e), 0, "%s", e.msg);
        fx_halt(&f);
        /* two claims of one job, or one whose name is spelled with a leading space */
        write_owners(&f, "0 kept\n0 root-job\n65534 root-job\n65534  kept\n");
        fx_serve(&f, -1);
        sock = loom_state_daemon_sock(f.d);
        cr_assert_eq(as_other(other_touches_root_job, sock), 0);
        cr_assert_eq(io(sock, "root-job", 0, 0, got, &e), LOOM_ENOENT);
        cr_assert_eq(io(sock, "kept", 0, 0, got, &e), 0, "' kept' is another job: %s", e.msg);
        fx_halt(&f);
        /* the group still reaches an orphan, and may drop it */
        fx_serve(&f, 0);
        cr_assert_eq(io(loom_state_daemon_sock(f.d), "root-job", 0, 0, got, &e), 0, "%s", e.msg);
        fx_stop(&f);
}

/* As the other uid: store and read back its own job. */
static int other_works(const char *sock)
{
        loom_err e;
        float got[N];
        if (io(sock, "other-job", 1, 7, NULL, &e))
                return 1;
        return io(sock, "other-job", 0, 0, got, &e) == 0 && got[5] == 12 ? 0 : 2;
}

Test(state_peer, one_uid_holding_idle_connections_locks_nobody_else_out)
{
        fx f;
        fx_start(&f, -1);
        const char *sock = loom_state_daemon_sock(f.d);
        enum { HELD = 300 }; /* more than the daemon's whole connection limit */
        loom_state_client *held[HELD];
        loom_err e;
        for (int i = 0; i < HELD; i++)
                cr_assert_eq(loom_state_connect(sock, &held[i], &e), 0, "%s", e.msg);
        cr_assert_eq(as_other(other_works, sock), 0, "another uid is still served");
        /* the uid over its cap is told why */
        loom_state_stats st;
        cr_assert_eq(loom_state_stat(held[HELD - 1], &st, &e), LOOM_ERANGE);
        cr_assert_str_eq(e.field, "connections");
        cr_assert(strstr(e.msg, "--max-conns-per-uid"), "%s", e.msg);
        for (int i = 0; i < HELD; i++)
                loom_state_close(held[i]);
        fx_stop(&f);
}
