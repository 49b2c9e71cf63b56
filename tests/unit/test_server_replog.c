/*
 * test_server_replog.c - the store's commits as replication entries (replog.c, docs/ha.md):
 * a follower that applies a leader's entries holds the same rows bit for bit, a commit the
 * log refuses leaves nothing behind, and a server started on a follower's store takes over
 * with the leader's jobs and placements.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <math.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loom/server.h"
#include "server_http.h"
#include "srv.h"

typedef struct {
        char **e;
        size_t *n;
        int count, refuse_from; /* refuse_from > 0: appends from that one on fail */
        void *snap;             /* the last snapshot, taken after entry snap_at */
        size_t snap_n;
        int snap_at, snaps;
        bool snap_off; /* from here on, snapshots are not kept */
} memlog;

static int mem_snapshot(void *arg, const void *image, size_t n, loom_err *e)
{
        memlog *l = arg;
        if (l->snap_off)
                return 0;
        free(l->snap);
        l->snap = malloc(n);
        memcpy(l->snap, image, n);
        l->snap_n = n;
        l->snap_at = l->count;
        l->snaps++;
        (void)e;
        return 0;
}

static int mem_append(void *arg, const void *entry, size_t n, loom_err *e)
{
        memlog *l = arg;
        if (l->refuse_from && l->count + 1 >= l->refuse_from)
                return loom_err_set(e, LOOM_EIO, "ha", "deposed (test)");
        l->e = realloc(l->e, (size_t)(l->count + 1) * sizeof *l->e);
        l->n = realloc(l->n, (size_t)(l->count + 1) * sizeof *l->n);
        l->e[l->count] = malloc(n);
        memcpy(l->e[l->count], entry, n);
        l->n[l->count++] = n;
        return 0;
}

static void memlog_free(memlog *l)
{
        for (int i = 0; i < l->count; i++)
                free(l->e[i]);
        free(l->e);
        free(l->n);
        free(l->snap);
}

static uint64_t serve_due;      /* loom_server_cfg.snapshot_due of the next serve() */
static unsigned serve_every = 4; /* and its snapshot_every */

static loom_server *serve(const char *dir, memlog *log, const char *url)
{
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.data_dir = dir;
        cfg.port = 0;
        cfg.auth = LOOM_AUTH_NONE;
        cfg.replicate = log ? mem_append : NULL;
        cfg.snapshot = log ? mem_snapshot : NULL;
        cfg.snapshot_every = serve_every;
        cfg.snapshot_due = serve_due;
        cfg.replicate_arg = log;
        cfg.replica_url = url;
        loom_err e;
        loom_server *s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(loom_server_start(s, &e), 0, "%s", e.msg);
        return s;
}

/* Every row of every table, each value with its type (reals to the last bit, "%a"). */
static char *dump(const char *dir)
{
        char path[512];
        snprintf(path, sizeof path, "%s/loom.db", dir);
        sqlite3 *db;
        cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        size_t cap = 1 << 20, n = 0;
        char *out = calloc(1, cap);
        static const char *const tables[] = {"meta", "jobs", "log", "leases", "admissions"};
        for (int t = 0; t < 5; t++) {
                char sql[128];
                snprintf(sql, sizeof sql, "SELECT rowid, * FROM %s ORDER BY rowid", tables[t]);
                sqlite3_stmt *q;
                cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
                n += (size_t)snprintf(out + n, cap - n, "[%s]\n", tables[t]);
                while (sqlite3_step(q) == SQLITE_ROW && n + 4096 < cap) {
                        for (int c = 0; c < sqlite3_column_count(q); c++) {
                                switch (sqlite3_column_type(q, c)) {
                                case SQLITE_INTEGER:
                                        n += (size_t)snprintf(out + n, cap - n, "i%lld|",
                                                              sqlite3_column_int64(q, c));
                                        break;
                                case SQLITE_FLOAT:
                                        n += (size_t)snprintf(out + n, cap - n, "r%a|",
                                                              sqlite3_column_double(q, c));
                                        break;
                                case SQLITE_NULL:
                                        n += (size_t)snprintf(out + n, cap - n, "null|");
                                        break;
                                default:
                                        n += (size_t)snprintf(out + n, cap - n, "t%s|",
                                                              sqlite3_column_text(q, c));
                                }
                        }
                        out[n++] = '\n';
                }
                sqlite3_finalize(q);
        }
        sqlite3_close(db);
        return out;
}

static void submit(int port, const char *name, double slo)
{
        char body[512];
        snprintf(body, sizeof body,
                 "{\"name\":\"%s\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":61.7,"
                 "\"t_train_s\":29.3,\"slo\":%.17g,\"iterations\":4}",
                 name, slo);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", body, NULL), 201, "submit %s", name);
}

static void run_iteration(int port, int job)
{
        static const char *const ph[] = {"rollout", "train"};
        for (int p = 0; p < 2; p++) {
                char path[128], *body;
                snprintf(path, sizeof path, "/v1/jobs/%d/phases/%s/acquire?wait=2", job, ph[p]);
                cr_assert_eq(test_http(port, "POST", path, NULL, &body), 200, "%s", body);
                long long lease = 0;
                char *l = strstr(body, "\"lease\":");
                cr_assert_not_null(l);
                sscanf(l, "\"lease\":%lld", &lease);
                free(body);
                snprintf(path, sizeof path, "/v1/leases/%lld/release", lease);
                cr_assert_eq(test_http(port, "POST", path, "{\"status\":\"ok\"}", NULL), 200);
        }
}

Test(replog, a_follower_holds_the_leader_s_rows_bit_for_bit)
{
        char *ld = test_tmpdir(), *fd = test_tmpdir();
        memlog log = {0};
        loom_server *s = serve(ld, &log, NULL);
        int port = loom_server_port(s);
        submit(port, "a", 1.0 / 3.0 + 1.0); /* a real that 15 digits would not keep */
        submit(port, "b", 2.0);
        submit(port, "c", M_PI);
        run_iteration(port, 1);
        run_iteration(port, 2);
        cr_assert_eq(test_http(port, "DELETE", "/v1/jobs/3", NULL, NULL), 200);
        loom_server_stop(s);
        loom_server_free(s);
        cr_assert_gt(log.count, 8, "every commit is an entry (%d)", log.count);

        loom_store_follower *f;
        loom_err e;
        cr_assert_eq(loom_store_follower_open(&f, fd, NULL, 0, &e), 0, "%s", e.msg);
        for (int i = 0; i < log.count; i++)
                cr_assert_eq(loom_store_follower_apply(f, log.e[i], log.n[i], &e), 0,
                             "entry %d: %s", i + 1, e.msg);
        loom_store_follower_close(f);
        char *a = dump(ld), *b = dump(fd);
        cr_assert_str_eq(b, a);
        free(a);
        free(b);

        /* a server on the follower's store takes over: the same jobs, placements and state */
        loom_server *t = serve(fd, NULL, "http://127.0.0.1:1");
        char *jobs;
        cr_assert_eq(test_http(loom_server_port(t), "GET", "/v1/jobs/1", NULL, &jobs), 200);
        cr_assert(strstr(jobs, "\"iterations_done\":1"), "%s", jobs);
        free(jobs);
        cr_assert_eq(test_http(loom_server_port(t), "GET", "/v1/jobs/3", NULL, &jobs), 200);
        cr_assert(strstr(jobs, "\"state\":\"cancelled\""), "%s", jobs);
        free(jobs);
        char *health;
        cr_assert_eq(test_http(loom_server_port(t), "GET", "/healthz", NULL, &health), 200);
        cr_assert(strstr(health, "\"role\":\"leader\""), "%s", health);
        free(health);
        loom_server_stop(t);
        loom_server_free(t);
        memlog_free(&log);
        test_rmdir(ld);
        test_rmdir(fd);
        free(ld);
        free(fd);
}

/* A follower that starts from the log's snapshot and applies the entries after it, and one the
 * compaction left behind (it applied two entries, the snapshot covers more), which starts again
 * from the snapshot: both end with the leader's rows. */
Test(replog, a_follower_from_a_snapshot_and_the_entries_after_it_matches)
{
        char *ld = test_tmpdir(), *fd = test_tmpdir(), *bd = test_tmpdir();
        memlog log = {0};
        loom_server *s = serve(ld, &log, NULL);
        int port = loom_server_port(s);
        submit(port, "a", 1.5);
        submit(port, "b", 2.0);
        run_iteration(port, 1);
        run_iteration(port, 2);
        submit(port, "c", 1.25);
        log.snap_off = true; /* entries past the last snapshot */
        run_iteration(port, 1);
        loom_server_stop(s);
        loom_server_free(s);
        cr_assert_gt(log.snaps, 1, "snapshots every 4 commits: %d", log.snaps);
        cr_assert_lt(log.snap_at, log.count, "entries after the last snapshot");
        loom_store_follower *f;
        loom_err e;
        cr_assert_eq(loom_store_follower_open(&f, fd, log.snap, log.snap_n, &e), 0, "%s", e.msg);
        for (int i = log.snap_at; i < log.count; i++)
                cr_assert_eq(loom_store_follower_apply(f, log.e[i], log.n[i], &e), 0, "%s", e.msg);
        loom_store_follower_close(f);
        cr_assert_gt(log.snap_at, 2, "the snapshot covers more than the follower applied");
        cr_assert_eq(loom_store_follower_open(&f, bd, NULL, 0, &e), 0, "%s", e.msg);
        for (int i = 0; i < 2; i++)
                cr_assert_eq(loom_store_follower_apply(f, log.e[i], log.n[i], &e), 0, "%s", e.msg);
        cr_assert_eq(loom_store_follower_reset(f, log.snap, log.snap_n, &e), 0, "%s", e.msg);
        for (int i = log.snap_at; i < log.count; i++)
                cr_assert_eq(loom_store_follower_apply(f, log.e[i], log.n[i], &e), 0, "%s", e.msg);
        loom_store_follower_close(f);
        char *a = dump(ld), *b = dump(fd), *c = dump(bd);
        cr_assert_str_eq(b, a);
        cr_assert_str_eq(c, a, "the follower left behind, reset to the snapshot");
        free(a);
        free(b);
        free(c);
        memlog_free(&log);
        char *dirs[] = {ld, fd, bd};
        for (int i = 0; i < 3; i++) {
                test_rmdir(dirs[i]);
                free(dirs[i]);
        }
}

/* A leader counts its commits toward the next snapshot from the latest one, whoever led then:
 * replicas that each lead for fewer commits than snapshot_every still cut the log. */
Test(replog, a_new_leader_counts_toward_the_next_snapshot_from_the_latest_one)
{
        char *d0 = test_tmpdir(), *d1 = test_tmpdir();
        memlog fresh = {0}, behind = {0};
        serve_every = 8;
        serve_due = 0; /* the latest snapshot is this leader's starting point */
        loom_server *s = serve(d0, &fresh, NULL);
        submit(loom_server_port(s), "a", 1.5);
        loom_server_stop(s);
        loom_server_free(s);
        cr_assert_lt(fresh.count, 8, "fewer commits than snapshot_every: %d", fresh.count);
        cr_assert_eq(fresh.snaps, 0, "no snapshot before snapshot_every commits");
        serve_due = 7; /* earlier leaders committed 7 since the latest snapshot */
        s = serve(d1, &behind, NULL);
        submit(loom_server_port(s), "a", 1.5);
        loom_server_stop(s);
        loom_server_free(s);
        serve_due = 0;
        serve_every = 4;
        cr_assert_eq(behind.count, fresh.count);
        cr_assert_eq(behind.snaps, 1, "the 8th commit since the latest snapshot takes one");
        memlog_free(&fresh);
        memlog_free(&behind);
        test_rmdir(d0);
        test_rmdir(d1);
        free(d0);
        free(d1);
}

Test(replog, a_commit_the_log_refuses_leaves_nothing)
{
        char *ld = test_tmpdir();
        memlog log = {0};
        loom_server *s = serve(ld, &log, NULL);
        int port = loom_server_port(s);
        submit(port, "kept", 2.0);
        log.refuse_from = log.count + 1; /* deposed from here on */
        char body[] = "{\"name\":\"lost\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":60,"
                      "\"t_train_s\":30,\"slo\":2,\"iterations\":4}";
        int st = test_http(port, "POST", "/v1/jobs", body, NULL);
        cr_assert(st >= 500, "a submit the log refused answered %d", st);
        loom_server_stop(s);
        loom_server_free(s);
        char *d = dump(ld);
        cr_assert(strstr(d, "tkept|"), "%s", d);
        cr_assert_null(strstr(d, "tlost|"), "the refused commit is in the store:\n%s", d);
        free(d);
        memlog_free(&log);
        test_rmdir(ld);
        free(ld);
}

Test(replog, a_malformed_entry_is_refused_whole)
{
        char *fd = test_tmpdir();
        loom_store_follower *f;
        loom_err e;
        cr_assert_eq(loom_store_follower_open(&f, fd, NULL, 0, &e), 0, "%s", e.msg);
        const char *good = "[{\"t\":\"meta\",\"o\":\"i\",\"k\":7,\"v\":[\"x\",\"1\"]}]";
        /* the second row names a table that does not exist: the first must not land either */
        const char *bad = "[{\"t\":\"meta\",\"o\":\"i\",\"k\":8,\"v\":[\"y\",\"2\"]},"
                          "{\"t\":\"nosuch\",\"o\":\"i\",\"k\":1,\"v\":[1]}]";
        cr_assert_eq(loom_store_follower_apply(f, good, strlen(good), &e), 0, "%s", e.msg);
        cr_assert_neq(loom_store_follower_apply(f, bad, strlen(bad), &e), 0);
        cr_assert(strstr(e.msg, "nosuch"), "%s", e.msg);
        cr_assert_neq(loom_store_follower_apply(f, "{", 1, &e), 0);
        loom_store_follower_close(f);
        char *d = dump(fd);
        cr_assert(strstr(d, "tx|t1|"), "%s", d);
        cr_assert_null(strstr(d, "ty|"), "%s", d);
        free(d);
        test_rmdir(fd);
        free(fd);
}
