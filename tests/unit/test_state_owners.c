/*
 * test_state_owners.c - who owns a job's state, as DIR/owners keeps it (src/state/peer.c), and
 * what the daemon does with connections that hold it without asking anything (daemon.c).
 *
 * The owners file is read strictly and never fatally; it is replaced whole and fsynced before a
 * claim or release counts. fsync() is interposed here (this executable's definition wins over
 * libc's for the statically linked daemon code) to see which files reach the disk, in order.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "loom/state.h"

/* ---- fsync, recorded ------------------------------------------------------------------- */

static char synced[32][256]; /* paths given to fsync, in order */
static int nsynced;

int fsync(int fd)
{
        static int (*real)(int);
        if (!real)
                real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        if (nsynced < 32) {
                ssize_t n = readlink(link, synced[nsynced], sizeof synced[0] - 1);
                synced[nsynced][n > 0 ? n : 0] = '\0';
                nsynced++;
        }
        return real(fd);
}

/* The index of the first fsync of path at or after `from`, or -1. */
static int synced_at(const char *path, int from)
{
        for (int i = from; i < nsynced; i++)
                if (!strcmp(synced[i], path))
                        return i;
        return -1;
}

/* ---- helpers --------------------------------------------------------------------------- */

static char dir[64];

static void mkdir_tmp(void)
{
        snprintf(dir, sizeof dir, "/tmp/loom-state-owners-XXXXXX");
        cr_assert(mkdtemp(dir));
}

static void rm_tmp(void)
{
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
}

static char logged[4096];

static void log_line(void *arg, const char *line)
{
        size_t n = strlen(logged);
        snprintf(logged + n, sizeof logged - n, "%s\n", line);
}

static st_owners *owners_of(const char *text)
{
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = dir;
        cfg.log = log_line;
        logged[0] = '\0';
        st_owners *o;
        loom_err e;
        cr_assert_eq(loom__owners_new(&o, &cfg, &e), 0);
        cr_assert_eq(loom__owners_parse(o, text, strlen(text), &e), 0);
        return o;
}

static long owner(st_owners *o, const char *job)
{
        uid_t uid;
        int r = loom__owners_lookup(o, job, &uid);
        return r == 1 ? (long)uid : r == 0 ? -1 : -2; /* -1 nobody, -2 orphaned */
}

/* ---- the file's format ----------------------------------------------------------------- */

Test(state_owners, lines_are_read_strictly_and_a_bad_one_is_skipped_and_logged)
{
        mkdir_tmp();
        st_owners *o = owners_of("# comment\n"
                                 "1000 a\n"
                                 "\n"
                                 "1000  spaced\n"     /* the job is " spaced", not "spaced" */
                                 "01000 zero\n"       /* not canonical */
                                 "-1 neg\n"           /* not a uid */
                                 "+7 plus\n"          /* not canonical */
                                 "4294967295 max\n"   /* (uid_t)-1 is nobody's */
                                 "4294967294 big\n"   /* the largest uid */
                                 "99999999999 huge\n" /* beyond uid_t */
                                 "12\n"               /* no job */
                                 "12 \n"              /* empty job */
                                 "5 a/b\n"            /* no '/' in a job */
                                 "5 tab\there\n"      /* no control characters */
                                 "5 cr\r\n"
                                 "1000 b c\n"
                                 "7 last"); /* unterminated: a torn write */
        cr_assert_eq(owner(o, "a"), 1000);
        cr_assert_eq(owner(o, " spaced"), 1000);
        cr_assert_eq(owner(o, "spaced"), -1);
        cr_assert_eq(owner(o, "big"), 4294967294L);
        cr_assert_eq(owner(o, "b c"), 1000);
        const char *skipped[] = {"zero", "neg",       "plus", "max",  "huge",
                                 "a/b",  "tab\there", "cr\r", "last", "cr"};
        for (size_t i = 0; i < sizeof skipped / sizeof *skipped; i++)
                cr_assert_eq(owner(o, skipped[i]), -1, "%s", skipped[i]);
        cr_assert(strstr(logged, "line 5 skipped"), "%s", logged);
        cr_assert(strstr(logged, "line 17 skipped (unterminated last line): '7 last'"), "%s",
                  logged);
        cr_assert(strstr(logged, "'5 tab\\x09here'"), "control bytes are escaped: %s", logged);
        loom__owners_close(o);
        rm_tmp();
}

Test(state_owners, a_job_claimed_by_two_uids_belongs_to_neither)
{
        mkdir_tmp();
        st_owners *o = owners_of("1000 victim\n65534 victim\n1000 victim\n5 x\n5 x\n");
        cr_assert_eq(owner(o, "victim"), -2);
        cr_assert_eq(owner(o, "x"), 5, "the same claim twice is one claim");
        cr_assert(strstr(logged, "claimed by uid 1000 and uid 65534"), "%s", logged);
        st_peer a = {1000, 1000}, b = {65534, 65534};
        loom_err e;
        cr_assert_eq(loom__owners_check(o, &a, "victim", true, &e), LOOM_ENOENT);
        cr_assert_eq(loom__owners_check(o, &b, "victim", false, &e), LOOM_ENOENT);
        /* orphans are never written: the file says only what is known */
        char *text;
        size_t len;
        cr_assert_eq(loom__owners_format(o, &text, &len), 0);
        cr_assert(!strstr(text, "victim"), "%s", text);
        cr_assert(strstr(text, "\n5 x\n"), "%s", text);
        free(text);
        loom__owners_close(o);
        rm_tmp();
}

Test(state_owners, an_orphaned_job_is_reachable_by_the_group_only)
{
        mkdir_tmp();
        st_owners *o = owners_of("");
        cr_assert(loom__owners_orphan(o, "lost"));
        cr_assert(!loom__owners_orphan(o, "lost"));
        st_peer p = {1000, 1000}, g = {2000, 77};
        loom_err e;
        cr_assert_eq(loom__owners_check(o, &p, "lost", true, &e), LOOM_ENOENT);
        cr_assert_str_eq(e.field, "job");
        loom__owners_close(o);
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = dir;
        cfg.group = 77;
        cr_assert_eq(loom__owners_new(&o, &cfg, &e), 0);
        cr_assert(loom__owners_orphan(o, "lost"));
        cr_assert_eq(loom__owners_check(o, &g, "lost", false, &e), 0);
        cr_assert_eq(loom__owners_check(o, &p, "lost", false, &e), LOOM_ENOENT);
        cr_assert_eq(loom__owners_release(o, "lost", &e), 0);
        cr_assert_eq(loom__owners_check(o, &p, "lost", true, &e), 0, "unowned after the drop");
        cr_assert_eq(owner(o, "lost"), 1000);
        loom__owners_close(o);
        rm_tmp();
}

Test(state_owners, a_claim_is_on_disk_whole_before_it_counts)
{
        mkdir_tmp();
        st_owners *o = owners_of("");
        char path[128], tmp[128];
        snprintf(path, sizeof path, "%s/owners", dir);
        snprintf(tmp, sizeof tmp, "%s/owners.tmp", dir);
        st_peer p = {1000, 1000};
        loom_err e;
        nsynced = 0;
        cr_assert_eq(loom__owners_check(o, &p, "job-a", true, &e), 0, "%s", e.msg);
        /* the new file's bytes, then the directory entry that names it */
        int f = synced_at(tmp, 0);
        cr_assert(f >= 0, "owners.tmp fsynced (%d fsyncs)", nsynced);
        cr_assert(synced_at(dir, f) > f, "the directory fsynced after the rename");
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(st.st_mode & 0777, 0600, "only the daemon reads it: %o", st.st_mode & 0777);
        cr_assert_eq(access(tmp, F_OK), -1, "renamed, not left behind");
        /* a second job, then the first released: the file is replaced whole each time */
        cr_assert_eq(loom__owners_check(o, &p, "job-b", true, &e), 0);
        nsynced = 0;
        cr_assert_eq(loom__owners_release(o, "job-a", &e), 0);
        f = synced_at(tmp, 0);
        cr_assert(f >= 0 && synced_at(dir, f) > f);
        loom__owners_close(o);
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = dir;
        cr_assert_eq(loom__owners_open(&o, &cfg, &e), 0);
        cr_assert_eq(owner(o, "job-a"), -1);
        cr_assert_eq(owner(o, "job-b"), 1000);
        /* the last owner released: no file, and the unlink is durable */
        nsynced = 0;
        cr_assert_eq(loom__owners_release(o, "job-b", &e), 0);
        cr_assert_eq(access(path, F_OK), -1);
        cr_assert(synced_at(dir, 0) >= 0);
        loom__owners_close(o);
        rm_tmp();
}

Test(state_owners, names_that_would_break_a_line_are_refused)
{
        loom_state_key k;
        loom_err e;
        const char *bad[] = {"evil\n65534 victim", "cr\r", "esc\x1b[2J", "del\x7f", "tab\t"};
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                loom_state_key_flat(&k, bad[i], 1, "w", 4, "f32");
                cr_assert_eq(loom_state_key_check(&k, "key", &e), LOOM_EINVAL, "%zu", i);
                cr_assert(strstr(e.msg, "control characters"), "%s", e.msg);
        }
        loom_state_key_flat(&k, "ok name \xc3\xa9", 1, "w", 4, "f32");
        cr_assert_eq(loom_state_key_check(&k, "key", &e), 0, "spaces and UTF-8 are fine");
}

/* ---- a daemon: names on the wire, and connections ------------------------------------- */

typedef struct fx {
        loom_state_daemon *d;
        pthread_t t;
} fx;

static void fx_start(fx *f, double idle_s, double msg_s)
{
        mkdir_tmp();
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = dir;
        cfg.host_bytes = 4 << 20;
        cfg.disk_bytes = 16 << 20;
        cfg.no_mlock = 1;
        cfg.idle_timeout_s = idle_s;
        cfg.msg_timeout_s = msg_s;
        loom_err e;
        cr_assert_eq(loom__state_serve(&cfg, &f->d, &f->t, &e), 0, "%s", e.msg);
}

static void fx_stop(fx *f)
{
        loom__state_unserve(f->d, f->t);
        rm_tmp();
}

static int raw_connect(fx *f)
{
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", loom_state_daemon_sock(f->d));
        cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
        return fd;
}

/* Send msg (JSON text) and read the reply's code (0 when ok) and field. */
static int raw_call(int fd, const char *msg, char *field)
{
        json_t *req = json_loads(msg, 0, NULL), *rep;
        cr_assert(req);
        loom_err e;
        int fds[ST_MAX_FDS], nfds;
        cr_assert_eq(loom__state_send(fd, req, NULL, 0, &e), 0);
        json_decref(req);
        cr_assert_eq(loom__state_recv(fd, &rep, fds, &nfds, &e), 0, "%s", e.msg);
        int code = json_is_true(json_object_get(rep, "ok"))
                       ? 0
                       : (int)json_integer_value(json_object_get(rep, "code"));
        const char *fl = json_string_value(json_object_get(rep, "field"));
        snprintf(field, 64, "%s", fl ? fl : "");
        json_decref(rep);
        return code;
}

/* true when the daemon closed fd within `s` seconds */
static bool closed_within(int fd, double s)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(s * 1000)) <= 0)
                return false;
        char b;
        return recv(fd, &b, 1, MSG_DONTWAIT) == 0;
}

Test(state_owners, the_daemon_refuses_control_characters_in_every_job_it_is_sent)
{
        fx f;
        fx_start(&f, 0, 0);
        int fd = raw_connect(&f);
        char field[64];
        cr_assert_eq(raw_call(fd, "{\"op\":\"prefetch\",\"job\":\"a\\nb\"}", field), LOOM_EINVAL);
        cr_assert_str_eq(field, "job");
        cr_assert_eq(raw_call(fd, "{\"op\":\"drop\",\"job\":\"a\\nb\",\"version\":1}", field),
                     LOOM_EINVAL);
        cr_assert_str_eq(field, "job");
        cr_assert_eq(raw_call(fd, "{\"op\":\"order\",\"jobs\":[\"x\",\"a\\u001b\"]}", field),
                     LOOM_EINVAL);
        cr_assert_str_eq(field, "jobs[1]");
        cr_assert_eq(raw_call(fd,
                              "{\"op\":\"offload\",\"items\":[{\"job\":\"e\\n0 v\",\"version\":1,"
                              "\"name\":\"w\",\"rect\":[0,1,0,1],\"dtype\":\"u8\",\"fd\":0,"
                              "\"off\":0,\"len\":1}]}",
                              field),
                     LOOM_EINVAL);
        cr_assert_str_eq(field, "items[0]");
        char path[128];
        snprintf(path, sizeof path, "%s/owners", dir);
        cr_assert_eq(access(path, F_OK), -1, "nothing was claimed");
        close(fd);
        fx_stop(&f);
}

Test(state_owners, an_idle_connection_is_closed_and_the_client_reconnects)
{
        fx f;
        fx_start(&f, 0.3, 0);
        int fd = raw_connect(&f);
        cr_assert(closed_within(fd, 5), "an idle connection is closed after the idle timeout");
        close(fd);
        /* a library client that sat idle past the timeout carries on */
        loom_state_client *c;
        loom_err e;
        cr_assert_eq(loom_state_connect(loom_state_daemon_sock(f.d), &c, &e), 0);
        uint8_t buf[64] = {1, 2, 3}, got[64] = {0};
        loom_state_io io = {.fd = -1, .ptr = buf, .len = sizeof buf};
        loom_state_key_flat(&io.key, "j", 1, "w", sizeof buf, "u8");
        loom_state_result r;
        cr_assert_eq(loom_state_offload(c, &io, 1, LOOM_STATE_HOST, &r, &e), 0, "%s", e.msg);
        usleep(700 * 1000);
        io.ptr = got;
        cr_assert_eq(loom_state_load(c, &io, 1, "", &r, &e), 0, "%s", e.msg);
        cr_assert_eq(memcmp(buf, got, sizeof buf), 0);
        loom_state_close(c);
        fx_stop(&f);
}

Test(state_owners, a_message_that_stalls_half_way_is_cut_off)
{
        fx f;
        fx_start(&f, -1, 0.3);
        int fd = raw_connect(&f);
        uint8_t part[6] = {100, 0, 0, 0, '{', '"'}; /* 100 bytes announced, 2 sent */
        cr_assert_eq(write(fd, part, sizeof part), (ssize_t)sizeof part);
        cr_assert(closed_within(fd, 5), "a stalled message is dropped after the message timeout");
        close(fd);
        /* no idle timeout (-1): a connection that sends nothing stays */
        fd = raw_connect(&f);
        cr_assert(!closed_within(fd, 0.6));
        char field[64];
        cr_assert_eq(raw_call(fd, "{\"op\":\"stat\"}", field), 0);
        close(fd);
        fx_stop(&f);
}
