/*
 * test_server.c - loomd's library parts in one process: the SQLite store, restart recovery
 * (replayed placements must equal the stored ones, a tampered store is refused), cluster
 * pinning, the Prometheus histogram, and a permit handed over HTTP on loopback.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loom/server.h"
#include "loom/spec.h"
#include "server_http.h"
#include "srv.h"

static int add_job(void *arg, srv_job *j)
{
        return srv_job_add(arg, j);
}

/* One HTTP request on a fresh connection; returns the status, *body gets the body (malloc). */
static const char *spec(char *buf, size_t cap, const char *name, double roll, double train)
{
        snprintf(buf, cap,
                 "{\"name\":\"%s\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":%g,"
                 "\"t_train_s\":%g,\"slo\":1.5,\"iterations\":5}",
                 name, roll, train);
        return buf;
}

/* A loomd on dir, any free port; compact_min < 0: the default. */
static loom_server *start_compacting(const char *dir, int compact_min, loom_err *e)
{
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.data_dir = dir;
        cfg.port = 0;
        if (compact_min >= 0)
                cfg.compact_min = compact_min;
        loom_server *s = loom_server_new(&cfg, e);
        if (s)
                cr_assert_eq(loom_server_start(s, e), 0, "%s", e->msg);
        return s;
}

static loom_server *start(const char *dir, loom_err *e)
{
        return start_compacting(dir, -1, e);
}

/* Stop s, start a loomd again on dir (replaying its store) and check that it shows the groups
 * it showed before; returns the new server, its port in *port. With s NULL, just start one. */
static loom_server *restart_same_groups(loom_server *s, const char *dir, int *port)
{
        char *before = NULL, *after;
        loom_err e;
        if (s) /* NULL: a first start, on an empty store */
                cr_assert_eq(test_http(*port, "GET", "/v1/groups", NULL, &before), 200);
        loom_server_free(s);
        s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        *port = loom_server_port(s);
        cr_assert_eq(test_http(*port, "GET", "/v1/groups", NULL, &after), 200);
        if (before)
                cr_assert_str_eq(after, before);
        free(before);
        free(after);
        return s;
}

Test(server, restart_replays_the_same_placements)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server *s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        int port = loom_server_port(s);
        char b[512], *out;
        const double shapes[5][2] = {{2, 1}, {1, 2}, {3, 1}, {1, 3}, {2, 2}};
        for (int i = 0; i < 5; i++) {
                char name[8];
                snprintf(name, sizeof name, "J%d", i);
                cr_assert_eq(test_http(port, "POST", "/v1/jobs",
                                  spec(b, sizeof b, name, shapes[i][0], shapes[i][1]), &out),
                             201, "%s", out);
                free(out);
        }
        cr_assert_eq(test_http(port, "DELETE", "/v1/jobs/2", NULL, &out), 200);
        free(out);
        /* job 1 runs its rollout and finishes it: next phase train */
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/phases/rollout/acquire?wait=1", "", &out), 200,
                     "%s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/leases/1/release", "{\"status\":\"ok\"}", &out), 200);
        free(out);
        s = restart_same_groups(s, dir, &port);
        cr_assert_eq(test_http(port, "GET", "/v1/jobs/1", NULL, &out), 200);
        cr_assert(strstr(out, "\"next_phase\":\"train\"") != NULL, "%s", out);
        free(out);
        cr_assert_eq(test_http(port, "GET", "/v1/jobs/2", NULL, &out), 200);
        cr_assert(strstr(out, "\"state\":\"cancelled\"") != NULL, "%s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/phases/train/acquire?wait=1", "", &out), 200,
                     "%s", out);
        cr_assert(strstr(out, "\"lease\":2") != NULL, "lease ids continue: %s", out);
        free(out);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

/* A job's own switch (switch_s), rollout head (head_s) and cold start (cold_s) are stored with
 * it: a restart plans the job on the same switch, so it replays the same placement (kept off
 * its training node: two 2 s switches do not fit a 1.02 SLO on a 150 s iteration) and shows
 * all three in its spec. */
Test(server, a_job_s_switch_and_head_survive_a_restart)
{
        char *dir = test_tmpdir(), *out;
        int port;
        loom_server *s = restart_same_groups(NULL, dir, &port);
        const char *job = "{\"name\":\"A\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":100,"
                          "\"t_train_s\":50,\"slo\":1.02,\"iterations\":5,\"switch_s\":2,"
                          "\"head_s\":40,\"cold_s\":55}";
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", job, &out), 201, "%s", out);
        free(out);
        cr_assert_eq(test_http(port, "GET", "/v1/groups", NULL, &out), 200);
        /* its rollout node is provisioned: $42.24 + $14.80 */
        cr_assert(strstr(out, "\"cost_per_hour\":57.04") != NULL, "%s", out);
        free(out);
        s = restart_same_groups(s, dir, &port);
        cr_assert_eq(test_http(port, "GET", "/v1/jobs/1", NULL, &out), 200);
        cr_assert(strstr(out, "\"switch_s\":2") != NULL, "%s", out);
        cr_assert(strstr(out, "\"head_s\":40") != NULL, "the store keeps its head: %s", out);
        cr_assert(strstr(out, "\"cold_s\":55") != NULL, "and its cold start: %s", out);
        free(out);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

/* The meta value of key in dir's store (the caller frees it), or NULL. */
static char *meta_of(const char *dir, const char *key)
{
        char path[300];
        snprintf(path, sizeof path, "%s/loom.db", dir);
        sqlite3 *db;
        sqlite3_stmt *st;
        char *v = NULL;
        cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key=?", -1, &st, NULL),
                     SQLITE_OK);
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
                v = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        sqlite3_close(db);
        return v;
}

/* A recorded placement no core could have made (a group that never existed) does not stop
 * loomd: it starts, reports the divergence and gives the job this core's placement, stored. */
Test(server, a_tampered_placement_is_reported_and_replaced)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server *s = start(dir, &e);
        cr_assert_not_null(s);
        char b[512], *out;
        cr_assert_eq(
            test_http(loom_server_port(s), "POST", "/v1/jobs", spec(b, sizeof b, "A", 2, 1), &out), 201);
        free(out);
        loom_server_free(s);

        char path[300];
        snprintf(path, sizeof path, "%s/loom.db", dir);
        sqlite3 *db;
        cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
        cr_assert_eq(sqlite3_exec(db, "UPDATE jobs SET decision=json_set(decision,'$.group',7)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
        sqlite3_close(db);
        s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(test_http(loom_server_port(s), "GET", "/v1/jobs/1", NULL, &out), 200);
        cr_assert(strstr(out, "\"group\":0") != NULL, "this core's placement: %s", out);
        free(out);
        loom_server_free(s);
        char *div = meta_of(dir, "replay_divergences");
        cr_assert(div && strstr(div, "1 placements came out otherwise than recorded (0 kept as "
                                     "recorded, 1 placed by this core)") != NULL,
                  "%s", div ? div : "(none)");
        free(div);
        /* and it was written back: the next start replays it without a divergence */
        s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

Test(server, store_keeps_its_cluster)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.data_dir = dir;
        cfg.port = 0;
        loom_server *s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        loom_server_free(s);
        cfg.have_cluster = true;
        cfg.cluster.gpus_per_node = 4;
        cr_assert_null(loom_server_new(&cfg, &e));
        cr_assert_str_eq(e.field, "cluster");
        test_rmdir(dir);
        free(dir);
}

Test(server, bad_config_names_the_field)
{
        loom_err e;
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cr_assert_null(loom_server_new(&cfg, &e));
        cr_assert_str_eq(e.field, "data_dir");
        cfg.data_dir = "/tmp";
        cfg.lease_timeout_s = 0;
        cr_assert_null(loom_server_new(&cfg, &e));
        cr_assert_str_eq(e.field, "lease_timeout");
        cfg.lease_timeout_s = 30;
        snprintf(cfg.listen_host, sizeof cfg.listen_host, "no-such-host.invalid");
        char *dir = test_tmpdir();
        cfg.data_dir = dir;
        cr_assert_null(loom_server_new(&cfg, &e));
        cr_assert_str_eq(e.field, "listen");
        cr_assert(strstr(e.msg, "cannot resolve no-such-host.invalid:7480"), "%s", e.msg);
        test_rmdir(dir);
        free(dir);
}

Test(server, store_round_trip)
{
        char *dir = test_tmpdir();
        loom_err e;
        srv_store *st;
        cr_assert_eq(srv_store_open(&st, dir, false, &e), 0, "%s", e.msg);
        srv_job j = {.id = 1,
                     .state = SJ_RUNNING,
                     .target = 4,
                     .done = 2,
                     .next = LOOM_PHASE_TRAIN,
                     .submitted_wall = 123};
        snprintf(j.name, sizeof j.name, "A");
        loom_job_spec_init(&j.spec);
        j.spec.rollout_gpus = j.spec.train_gpus = 8;
        j.spec.t_roll = 2000001;
        j.spec.t_train = 999999;
        j.spec.slo = 1.25;
        j.spec.mem_rollout = 5 * LOOM_GB;
        j.decision = json_pack("{s:i}", "group", 0);
        cr_assert_eq(srv_store_begin(st, &e), 0);
        cr_assert_eq(srv_store_job_insert(st, &j, "key-1", &e), 0, "%s", e.msg);
        cr_assert_eq(srv_store_log(st, "submit", 1, NULL, &e), 0);
        srv_lease l = {.id = 9, .phase = LOOM_PHASE_TRAIN, .n_nodes = 1, .gpus = 8};
        cr_assert_eq(srv_store_lease_insert(st, 1, &l, &e), 0);
        cr_assert_eq(srv_store_commit(st, &e), 0);
        srv_store_close(st);

        cr_assert_eq(srv_store_open(&st, dir, false, &e), 0);
        uint32_t job = 0;
        cr_assert_eq(srv_store_job_by_key(st, "key-1", &job, &e), 0);
        cr_assert_eq(job, 1);
        cr_assert_eq(srv_store_job_by_key(st, "key-2", &job, &e), LOOM_ENOENT);
        loom_phase ph;
        char state[16];
        cr_assert_eq(srv_store_lease_get(st, 9, &job, &ph, state, &e), 0);
        cr_assert_str_eq(state, "active");
        cr_assert_eq(ph, LOOM_PHASE_TRAIN);
        cr_assert_eq(srv_store_leases_lose_active(st, 5, &e), 0);
        cr_assert_eq(srv_store_lease_get(st, 9, &job, &ph, state, &e), 0);
        cr_assert_str_eq(state, "lost");
        int64_t next;
        cr_assert_eq(srv_store_lease_next_id(st, &next, &e), 0);
        cr_assert_eq(next, 10);
        loom_server *s = calloc(1, sizeof *s);
        cr_assert_eq(srv_store_load_jobs(st, add_job, s, &e), 0, "%s", e.msg);
        cr_assert_eq(s->n_jobs, 1);
        srv_job *k = s->jobs[0];
        cr_assert_eq(k->spec.t_roll, 2000001);
        cr_assert_eq(k->spec.t_train, 999999);
        cr_assert_eq(k->spec.mem_rollout, 5 * LOOM_GB);
        cr_assert_eq(k->done, 2);
        cr_assert_eq(k->next, LOOM_PHASE_TRAIN);
        cr_assert_eq(k->state, SJ_RUNNING);
        json_decref(k->decision);
        free(k);
        free(s->jobs);
        free(s);
        json_decref(j.decision);
        srv_store_close(st);
        test_rmdir(dir);
        free(dir);
}

Test(server, histogram_buckets_are_cumulative_upper_bounds)
{
        srv_hist h;
        const double le[] = {0.001, 0.01, 0.1};
        srv_hist_init(&h, le, 3);
        srv_hist_add(&h, 0.001); /* le is inclusive */
        srv_hist_add(&h, 0.005);
        srv_hist_add(&h, 5);
        cr_assert_eq(h.count[0], 1);
        cr_assert_eq(h.count[1], 1);
        cr_assert_eq(h.count[2], 0);
        cr_assert_eq(h.count[3], 1);
        cr_assert_eq(h.total, 3);
        cr_assert_float_eq(h.sum, 5.006, 1e-12);
}

/* ---- retries and drift re-admission (retry.c) ------------------------------------------------ */

static bool has(const char *text, const char *needle)
{
        return strstr(text, needle) != NULL;
}

Test(server, a_replaced_worker_restarts_the_job_and_replay_keeps_it)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server *s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        int port = loom_server_port(s);
        char b[512], *out;
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", spec(b, sizeof b, "A", 2, 1), &out), 201);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", spec(b, sizeof b, "B", 1, 2), &out), 201);
        free(out);
        /* A rolls out, then dies holding its train lease */
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/phases/rollout/acquire?wait=1", "", &out), 200,
                     "%s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/leases/1/release", "{\"status\":\"ok\"}", &out), 200);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/phases/train/acquire?wait=1", "", &out), 200,
                     "%s", out);
        free(out);
        /* a second process of a live worker takes nothing over */
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/attach", "{\"takeover\":false}", &out), 200);
        cr_assert(has(out, "\"took_over\":false") && has(out, "\"restarts\":0"), "%s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/attach", "", &out), 200);
        cr_assert(has(out, "\"took_over\":false"), "no takeover unless asked: %s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/attach", "{\"takeover\":\"rollout\"}", &out),
                     200);
        cr_assert(has(out, "\"took_over\":false"), "A holds a train lease, not a rollout: %s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/attach", "{\"takeover\":\"train\"}", &out),
                     200);
        cr_assert(has(out, "\"took_over\":true") && has(out, "\"restarts\":1"), "%s", out);
        cr_assert(has(out, "\"iterations_done\":0") && has(out, "\"resume_iteration\":1"), "%s",
                  out);
        cr_assert(has(out, "\"next_phase\":\"rollout\"") && has(out, "\"cause\":\"restart\""), "%s",
                  out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/leases/2/release", "{\"status\":\"ok\"}", &out), 410,
                     "the dead worker's lease is gone: %s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/attach", "{\"takeover\":1}", &out), 422);
        cr_assert(has(out, "takeover"), "%s", out);
        free(out);
        char *metrics;
        cr_assert_eq(test_http(port, "GET", "/metrics", NULL, &metrics), 200);
        cr_assert(has(metrics, "loom_readmissions_total{cause=\"restart\"} 1"), "%s", metrics);
        free(metrics);
        s = restart_same_groups(s, dir, &port);
        cr_assert_eq(test_http(port, "GET", "/v1/jobs/1", NULL, &out), 200);
        cr_assert(has(out, "\"restarts\":1") && has(out, "\"next_phase\":\"rollout\""), "%s", out);
        free(out);
        /* A came back behind B in the same group: B rolls out, then A redoes iteration 1 */
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/2/phases/rollout/acquire?wait=2", "", &out), 200,
                     "%s", out);
        cr_assert(has(out, "\"lease\":3"), "%s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/leases/3/release", "{}", &out), 200);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/phases/rollout/acquire?wait=2", "", &out), 200,
                     "%s", out);
        cr_assert(has(out, "\"iteration\":1"), "%s", out);
        free(out);
        loom_server_free(s);

        /* a re-admission recorded in a group that never existed: reported, this core's taken */
        char path[300];
        snprintf(path, sizeof path, "%s/loom.db", dir);
        sqlite3 *db;
        cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
        cr_assert_eq(sqlite3_exec(db,
                                  "UPDATE log SET reason=json_set(reason,'$.group',9) "
                                  "WHERE kind='readmit'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
        sqlite3_close(db);
        s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        loom_server_free(s);
        char *div = meta_of(dir, "replay_divergences");
        cr_assert(div && has(div, "replay at"), "%s", div ? div : "(none)");
        free(div);
        test_rmdir(dir);
        free(dir);
}

Test(server, max_restarts_zero_fails_at_once_and_bad_values_name_the_field)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server *s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        int port = loom_server_port(s);
        char *out;
        const char *bad[] = {"-1", "1.5", "\"3\"", "1001"};
        for (int i = 0; i < 4; i++) {
                char b[300];
                snprintf(b, sizeof b,
                         "{\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":1,\"t_train_s\":1,"
                         "\"slo\":1.5,\"max_restarts\":%s}",
                         bad[i]);
                cr_assert_eq(test_http(port, "POST", "/v1/jobs", b, &out), 422, "%s: %s", bad[i], out);
                cr_assert(has(out, "\"field\":\"max_restarts\""), "%s", out);
                free(out);
        }
        cr_assert_eq(test_http(port, "GET", "/v1/jobs", NULL, &out), 200);
        cr_assert_str_eq(out, "{\"jobs\":[],\"next\":null}", "nothing was admitted");
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs",
                          "{\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":1,\"t_train_s\":1,"
                          "\"slo\":1.5,\"max_restarts\":0}",
                          &out),
                     201);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/phases/rollout/acquire?wait=1", "", &out), 200);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/leases/1/release", "{\"status\":\"failed\"}", &out),
                     200);
        cr_assert(has(out, "\"state\":\"failed\"") && has(out, "\"restarts\":0"), "%s", out);
        free(out);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

Test(server, phases_longer_than_planned_readmit_the_job_on_its_observed_profile)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.data_dir = dir;
        cfg.port = 0;
        cfg.drift_window = 2;
        loom_server *s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(loom_server_start(s, &e), 0, "%s", e.msg);
        int port = loom_server_port(s);
        char b[512], *out;
        /* planned 20 ms per phase; each rollout takes >= 60 ms */
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", spec(b, sizeof b, "D", 0.02, 0.02), &out), 201);
        free(out);
        int64_t lease = 1;
        for (int it = 1; it <= 2; it++) {
                char p[96];
                cr_assert_eq(
                    test_http(port, "POST", "/v1/jobs/1/phases/rollout/acquire?wait=2", "", &out), 200,
                    "%s", out);
                free(out);
                usleep(60000);
                snprintf(p, sizeof p, "/v1/leases/%lld/release", (long long)lease++);
                cr_assert_eq(test_http(port, "POST", p, "{}", &out), 200);
                free(out);
                cr_assert_eq(test_http(port, "POST", "/v1/jobs/1/phases/train/acquire?wait=2", "", &out),
                             200, "%s", out);
                free(out);
                snprintf(p, sizeof p, "/v1/leases/%lld/release", (long long)lease++);
                cr_assert_eq(test_http(port, "POST", p, "{}", &out), 200);
                cr_assert(has(out, it == 1 ? "\"resubmits\":0" : "\"resubmits\":1"), "%d: %s", it,
                          out);
                free(out);
                if (it == 1) {
                        /* the observed times survive a restart of loomd: the second iteration
                         * fills the window */
                        loom_server_free(s);
                        s = loom_server_new(&cfg, &e);
                        cr_assert_not_null(s, "%s", e.msg);
                        cr_assert_eq(loom_server_start(s, &e), 0, "%s", e.msg);
                        port = loom_server_port(s);
                        cr_assert_eq(test_http(port, "GET", "/v1/jobs/1", NULL, &out), 200);
                        cr_assert(has(out, "\"samples\":1"), "%s", out);
                        free(out);
                }
        }
        cr_assert_eq(test_http(port, "GET", "/v1/jobs/1", NULL, &out), 200);
        cr_assert(has(out, "\"cause\":\"drift\"") && has(out, "planned rollout"), "%s", out);
        cr_assert(has(out, "\"iterations_done\":2") && has(out, "\"restarts\":0"), "%s", out);
        double roll = 0;
        const char *p = strstr(out, "\"profile\":{\"t_roll_s\":");
        cr_assert_not_null(p, "%s", out);
        sscanf(p + strlen("\"profile\":{\"t_roll_s\":"), "%lf", &roll);
        cr_assert(roll >= 0.06, "planned rollout raised to the observed p95: %g", roll);
        free(out);
        cr_assert_eq(test_http(port, "GET", "/metrics", NULL, &out), 200);
        cr_assert(has(out, "loom_readmissions_total{cause=\"drift\"} 1"), "%s", out);
        free(out);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

/* The quota table of a cluster file: a tenant's entry starts from the default, null lifts a
 * limit, and a bad table names the field and its line, changing nothing. */
Test(server, quota_table_decodes_all_or_nothing)
{
        const char *text = "{\"default\": {\"jobs\": 4, \"gpus\": {\"train\": 16}},\n"
                           " \"tenants\": {\"a\": {\"cost_per_hour\": 99.5},\n"
                           "             \"b\": {\"jobs\": null, \"nodes\": {\"rollout\": 2}}}}";
        loom_err e;
        json_t *j = loom_json_parse(text, strlen(text), &e);
        cr_assert_not_null(j);
        loom_quota_cfg *q = calloc(1, sizeof *q);
        cr_assert_eq(loom_quota_cfg_from_json(j, "quotas", text, strlen(text), q, &e), 0, "%s",
                     e.msg);
        json_decref(j);
        const loom_quota *a = loom_quota_for(q, "a"), *b = loom_quota_for(q, "b");
        const loom_quota *c = loom_quota_for(q, "c");
        cr_assert_eq(c, &q->def, "a tenant not listed gets the default");
        cr_assert_eq(a->set, LOOM_QUOTA_JOBS | LOOM_QUOTA_GPUS_TRAIN | LOOM_QUOTA_COST);
        cr_assert_eq(a->jobs, 4);
        cr_assert_eq(a->gpus[LOOM_POOL_TRAIN], 16);
        cr_assert_float_eq(a->cost_per_hour, 99.5, 1e-9);
        cr_assert_eq(b->set, LOOM_QUOTA_GPUS_TRAIN | LOOM_QUOTA_NODES_ROLLOUT, "null lifts jobs");
        cr_assert_eq(b->nodes[LOOM_POOL_ROLLOUT], 2);

        /* as in a cluster file: the text is the file's, the object its "quotas" */
        const char *bad =
            "{\"quotas\": {\"tenants\": {\"a\": {\"jobs\": 1},\n \"b\": {\"jobs\": 1.5}}}}";
        j = loom_json_parse(bad, strlen(bad), &e);
        loom_quota_cfg *before = malloc(sizeof *before);
        memcpy(before, q, sizeof *q);
        cr_assert_eq(loom_quota_cfg_from_json(json_object_get(j, "quotas"), "quotas", bad,
                                              strlen(bad), q, &e),
                     LOOM_EINVAL);
        json_decref(j);
        cr_assert_str_eq(e.field, "quotas.tenants.b.jobs");
        cr_assert_eq(e.line, 2, "%d", e.line);
        cr_assert(memcmp(before, q, sizeof *q) == 0, "a refused table changes nothing");
        free(before);
        free(q);
}

static int cmp_u32(const void *a, const void *b)
{
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        return (x > y) - (x < y);
}

/* The job and lease ids the API shows under tokens: a permutation of loomd's (each maps back,
 * none is 0, none repeats), not in submit order. */
Test(server, shown_job_ids_are_a_permutation)
{
        loom_server *s = calloc(1, sizeof *s);
        s->jobid_mode = 2;
        for (int i = 0; i < 16; i++)
                s->jobid_key[i] = (uint8_t)(i * 37 + 1);
        enum { N = 20000 };
        uint32_t *pub = malloc(N * sizeof *pub);
        int rises = 0;
        for (uint32_t id = 1; id <= N; id++) {
                pub[id - 1] = srv_job_pub(s, id);
                cr_assert_neq(pub[id - 1], 0);
                cr_assert_eq(srv_job_unpub(s, pub[id - 1]), id);
                rises += id > 1 && pub[id - 1] > pub[id - 2];
        }
        cr_assert(rises > N / 4 && rises < 3 * N / 4, "%d of %d consecutive ids rise", rises, N);
        for (uint32_t x = UINT32_MAX; x > UINT32_MAX - 1000; x--)
                cr_assert_eq(srv_job_pub(s, srv_job_unpub(s, x)), x);
        qsort(pub, N, sizeof *pub, cmp_u32); /* distinct: no two neighbours equal */
        for (int i = 1; i < N; i++)
                cr_assert_neq(pub[i], pub[i - 1]);
        for (int64_t id = 1; id <= 5000; id++) { /* lease ids: 48 bits, never 0 */
                int64_t p = srv_lease_pub(s, id);
                cr_assert(p > 0 && p < ((int64_t)1 << 48), "%lld", (long long)p);
                cr_assert_eq(srv_lease_unpub(s, p), id);
        }
        cr_assert_neq(srv_lease_pub(s, 1), (int64_t)srv_job_pub(s, 1));
        for (uint32_t a = 1; a <= 1000; a++) /* admissions: another permutation */
                pub[a - 1] = srv_admission_pub(s, a);
        qsort(pub, 1000, sizeof *pub, cmp_u32);
        for (int i = 1; i < 1000; i++)
                cr_assert(pub[i] != pub[i - 1] && pub[i - 1] != 0);
        cr_assert_neq(srv_admission_pub(s, 5), srv_job_pub(s, 5));
        s->jobid_mode = 1;
        cr_assert_eq(srv_job_pub(s, 7), 7, "without tokens ids are shown as they are");
        cr_assert_eq(srv_lease_pub(s, 7), 7);
        free(pub);
        free(s);
}

/* One phase of job 1: acquire, then release. */
static void run_phase(int port, const char *phase)
{
        char path[96], *out;
        snprintf(path, sizeof path, "/v1/jobs/1/phases/%s/acquire?wait=2", phase);
        cr_assert_eq(test_http(port, "POST", path, "", &out), 200, "%s", out);
        const char *l = strstr(out, "\"lease\":");
        cr_assert_not_null(l, "%s", out);
        snprintf(path, sizeof path, "/v1/leases/%lld/release", strtoll(l + 8, NULL, 10));
        free(out);
        cr_assert_eq(test_http(port, "POST", path, "{\"status\":\"ok\"}", &out), 200, "%s", out);
        free(out);
}

/* Job A (2 s + 1 s, SLO 1.5) with its iterations; the server must take it. */
static void submit_a(int port, int iterations)
{
        char body[200], *out;
        snprintf(body, sizeof body,
                 "{\"name\":\"A\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":2,"
                 "\"t_train_s\":1,\"slo\":1.5,\"iterations\":%d}",
                 iterations);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", body, &out), 201, "%s", out);
        free(out);
}

static int64_t log_count(const char *dir, const char *sql)
{
        char p[512];
        snprintf(p, sizeof p, "%s/loom.db", dir);
        sqlite3 *db;
        sqlite3_stmt *q;
        cr_assert_eq(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
        cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
        int64_t n = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
        sqlite3_close(db);
        return n;
}

static int64_t core_count(loom_server *s)
{
        loom_job_info info;
        cr_assert_eq(loom_sched_job_info(s->sched, s->jobs[0]->retry.core, &info), 0);
        return info.iterations_done;
}

/* loomd submits a job with its iterations (placement reads what each member has left) and the
 * core's count of them survives a restart: each training that leaves the job short of its
 * target appends an "iter" entry that the replay sets the count from, and compaction keeps the
 * last of a run of them. */
Test(server, the_core_s_iteration_count_survives_restarts_and_compaction)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server *s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        int port = loom_server_port(s);
        char *out;
        submit_a(port, 20);
        loom_job_info info;
        cr_assert_eq(loom_sched_job_info(s->sched, s->jobs[0]->retry.core, &info), 0);
        cr_assert_eq(info.spec.iterations, 20, "the core plans the job's 20 iterations");
        for (int k = 0; k < 6; k++) {
                run_phase(port, "rollout");
                run_phase(port, "train");
        }
        cr_assert_eq(core_count(s), 6);
        cr_assert_eq(log_count(dir, "SELECT count(*) FROM log WHERE kind = 'iter'"), 6);
        cr_assert_eq(log_count(dir, "SELECT max(CAST(reason AS INTEGER)) FROM log "
                                    "WHERE kind = 'iter'"),
                     6);
        s = restart_same_groups(s, dir, &port);
        cr_assert_eq(core_count(s), 6, "replayed from the iter entries");

        /* compaction from one entry on: at this start the run of six folds into its last,
         * then the seventh iteration adds one */
        loom_server_free(s);
        s = start_compacting(dir, 1, &e);
        cr_assert_not_null(s, "%s", e.msg);
        port = loom_server_port(s);
        run_phase(port, "rollout");
        run_phase(port, "train");
        cr_assert_eq(core_count(s), 7);
        int64_t left = log_count(dir, "SELECT count(*) FROM log WHERE kind = 'iter'");
        cr_assert_eq(left, 2, "the counts before the sixth are dropped: %lld left", (long long)left);
        cr_assert_eq(log_count(dir, "SELECT min(CAST(reason AS INTEGER)) FROM log "
                                    "WHERE kind = 'iter'"),
                     6);
        s = restart_same_groups(s, dir, &port);
        cr_assert_eq(core_count(s), 7, "replayed from the entries left");
        cr_assert_eq(test_http(port, "GET", "/v1/jobs/1", NULL, &out), 200);
        cr_assert(strstr(out, "\"iterations_done\":7") != NULL, "%s", out);
        free(out);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

static void say(void *arg, const char *line)
{
        (void)arg;
        cr_log_info("loomd: %s", line);
}

/* Run sql on dir's store (loomd stopped). */
static void store_exec(const char *dir, const char *sql)
{
        char p[512];
        snprintf(p, sizeof p, "%s/loom.db", dir);
        sqlite3 *db;
        cr_assert_eq(sqlite3_open(p, &db), SQLITE_OK);
        cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
        sqlite3_close(db);
}

/* One phase of job `job`: acquire, then release. */
static void run_phase_of(int port, int job, const char *phase)
{
        char path[96], *out;
        snprintf(path, sizeof path, "/v1/jobs/%d/phases/%s/acquire?wait=2", job, phase);
        cr_assert_eq(test_http(port, "POST", path, "", &out), 200, "%s", out);
        const char *l = strstr(out, "\"lease\":");
        cr_assert_not_null(l, "%s", out);
        snprintf(path, sizeof path, "/v1/leases/%lld/release", strtoll(l + 8, NULL, 10));
        free(out);
        cr_assert_eq(test_http(port, "POST", path, "{\"status\":\"ok\"}", &out), 200, "%s", out);
        free(out);
}

/* A store written before "iter" entries (emulated: its iter entries deleted, its arithmetic
 * 12) with A 3 iterations in: the restart sets A's count from its row (replay_store's
 * fallback). Compaction's shadow replay must come to the same count, or every compaction is
 * skipped until A trains again. B (groups of one) trains after the upgrade: its iter entries
 * are what there is to fold. without_iters false is the control: the same store as written. */
static int64_t compact_after_upgrade(bool without_iters)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.data_dir = dir;
        cfg.port = 0;
        cfg.log = say;
        cfg.policy.max_group_size = 1;
        static const char *job =
            "{\"name\":\"%s\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":2,\"t_train_s\":1,"
            "\"slo\":1.5,\"iterations\":200}";
        char b[256];
        loom_server *s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(loom_server_start(s, &e), 0, "%s", e.msg);
        int port = loom_server_port(s);
        char *out;
        snprintf(b, sizeof b, job, "A");
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", b, &out), 201, "%s", out);
        free(out);
        for (int k = 0; k < 3; k++) {
                run_phase_of(port, 1, "rollout");
                run_phase_of(port, 1, "train");
        }
        loom_server_free(s);
        if (without_iters)
                store_exec(dir, "DELETE FROM log WHERE kind = 'iter';"
                                "UPDATE meta SET value = '12' WHERE key = 'arith';");
        s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(loom_server_start(s, &e), 0, "%s", e.msg);
        port = loom_server_port(s);
        cr_assert_eq(core_count(s), 3, "A's count from its row");
        snprintf(b, sizeof b, job, "B");
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", b, &out), 201, "%s", out);
        cr_assert(strstr(out, "new_group") != NULL, "%s", out);
        free(out);
        for (int k = 0; k < 3; k++) {
                run_phase_of(port, 2, "rollout");
                run_phase_of(port, 2, "train");
        }
        int64_t dropped = -1;
        cr_assert_eq(srv_compact(s, &dropped, &e), 0, "%s", e.msg);
        cr_assert_eq(core_count(s), 3);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
        return dropped;
}

Test(server, compaction_after_an_upgrade_replays_the_counts_the_restart_set)
{
        int64_t control = compact_after_upgrade(false);
        cr_assert_gt(control, 0, "control: the store as written compacts");
        int64_t dropped = compact_after_upgrade(true);
        cr_assert_gt(dropped, 0, "compaction skipped: %lld dropped", (long long)dropped);
}

/* One phase of job `job` released as failed (a restart: re-admission). */
static void fail_phase_of(int port, int job, const char *phase)
{
        char path[96], *out;
        snprintf(path, sizeof path, "/v1/jobs/%d/phases/%s/acquire?wait=2", job, phase);
        cr_assert_eq(test_http(port, "POST", path, "", &out), 200, "%s", out);
        const char *l = strstr(out, "\"lease\":");
        cr_assert_not_null(l, "%s", out);
        snprintf(path, sizeof path, "/v1/leases/%lld/release", strtoll(l + 8, NULL, 10));
        free(out);
        cr_assert_eq(test_http(port, "POST", path, "{\"status\":\"failed\"}", &out), 200, "%s",
                     out);
        free(out);
}

/* After an upgrade from a store without iter entries, A (3 iterations in) is re-admitted before
 * it trains again: live, the new admission is submitted for the 197 left and counts from 0.
 * A restart replays the "readmit" entry with the count its log has by then (0: no iter entry
 * yet): the replayed admission is submitted for 200 and counts from 3 - not the live core. */
Test(server, a_readmission_after_an_upgrade_replays_the_live_admission_s_iterations)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.data_dir = dir;
        cfg.port = 0;
        cfg.log = say;
        loom_server *s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(loom_server_start(s, &e), 0, "%s", e.msg);
        int port = loom_server_port(s);
        submit_a(port, 200);
        for (int k = 0; k < 3; k++) {
                run_phase_of(port, 1, "rollout");
                run_phase_of(port, 1, "train");
        }
        loom_server_free(s);
        store_exec(dir, "DELETE FROM log WHERE kind = 'iter';"
                        "UPDATE meta SET value = '12' WHERE key = 'arith';");
        s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(loom_server_start(s, &e), 0, "%s", e.msg);
        port = loom_server_port(s);
        fail_phase_of(port, 1, "rollout");
        run_phase_of(port, 1, "rollout");
        run_phase_of(port, 1, "train");
        loom_job_info live, back;
        cr_assert_eq(loom_sched_job_info(s->sched, s->jobs[0]->retry.core, &live), 0);
        cr_assert_eq(live.spec.iterations, 197);
        cr_assert_eq(live.iterations_done, 1);
        loom_server_free(s);
        s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(loom_sched_job_info(s->sched, s->jobs[0]->retry.core, &back), 0);
        cr_expect_eq(back.spec.iterations, live.spec.iterations, "replayed %lld, live %lld",
                     (long long)back.spec.iterations, (long long)live.spec.iterations);
        cr_expect_eq(back.iterations_done, live.iterations_done, "replayed %lld, live %lld",
                     (long long)back.iterations_done, (long long)live.iterations_done);
        char *div = NULL;
        cr_expect_eq(srv_store_meta_get(s->store, "replay_divergences", &div, &e), 0);
        cr_expect_null(div, "%s", div);
        free(div);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

/* The timeline's events are the log's placement events (docs/api.md: submit, exit, readmit,
 * regroup); like "observe", one "iter" entry per training is not one of them (it would fill the
 * 5000 events a window shows). */
Test(server, the_timeline_shows_no_iter_entries)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server *s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        int port = loom_server_port(s);
        char *out;
        submit_a(port, 20);
        for (int k = 0; k < 3; k++) {
                run_phase(port, "rollout");
                run_phase(port, "train");
        }
        cr_assert_eq(test_http(port, "GET", "/v1/timeline?window_s=3600", NULL, &out), 200);
        const char *ev = strstr(out, "\"events\"");
        cr_assert_not_null(ev);
        cr_expect(strstr(ev, "\"kind\":\"submit\"") != NULL, "%.300s", ev);
        cr_expect(strstr(ev, "\"kind\":\"iter\"") == NULL, "%.300s", ev);
        free(out);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}
