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
#include "srv.h"

static char *tmpdir(void)
{
        char *d = strdup("/tmp/loom-test-server-XXXXXX");
        cr_assert_not_null(mkdtemp(d));
        return d;
}

static void rmdir_all(const char *d)
{
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
        cr_assert_eq(system(cmd), 0);
}

/* One HTTP request on a fresh connection; returns the status, *body gets the body (malloc). */
static int http(int port, const char *method, const char *path, const char *body, char **out)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
        char req[4096];
        int n = snprintf(req, sizeof req,
                         "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         method, path, body ? strlen(body) : 0, body ? body : "");
        cr_assert_eq(write(fd, req, (size_t)n), n);
        size_t cap = 1 << 16, len = 0;
        char *buf = malloc(cap);
        ssize_t r;
        while ((r = read(fd, buf + len, cap - 1 - len)) > 0)
                len += (size_t)r;
        buf[len] = '\0';
        close(fd);
        int status = 0;
        sscanf(buf, "HTTP/1.1 %d", &status);
        char *b = strstr(buf, "\r\n\r\n");
        *out = strdup(b ? b + 4 : "");
        free(buf);
        return status;
}

static const char *spec(char *buf, size_t cap, const char *name, double roll, double train)
{
        snprintf(buf, cap,
                 "{\"name\":\"%s\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":%g,"
                 "\"t_train_s\":%g,\"slo\":1.5,\"iterations\":5}",
                 name, roll, train);
        return buf;
}

static loom_server *start(const char *dir, loom_err *e)
{
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.data_dir = dir;
        cfg.port = 0;
        loom_server *s = loom_server_new(&cfg, e);
        if (s)
                cr_assert_eq(loom_server_start(s, e), 0, "%s", e->msg);
        return s;
}

Test(server, restart_replays_the_same_placements)
{
        char *dir = tmpdir();
        loom_err e;
        loom_server *s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        int port = loom_server_port(s);
        char b[512], *out;
        const double shapes[5][2] = {{2, 1}, {1, 2}, {3, 1}, {1, 3}, {2, 2}};
        for (int i = 0; i < 5; i++) {
                char name[8];
                snprintf(name, sizeof name, "J%d", i);
                cr_assert_eq(http(port, "POST", "/v1/jobs",
                                  spec(b, sizeof b, name, shapes[i][0], shapes[i][1]), &out),
                             201, "%s", out);
                free(out);
        }
        cr_assert_eq(http(port, "DELETE", "/v1/jobs/2", NULL, &out), 200);
        free(out);
        /* job 1 runs its rollout and finishes it: next phase train */
        cr_assert_eq(http(port, "POST", "/v1/jobs/1/phases/rollout/acquire?wait=1", "", &out), 200,
                     "%s", out);
        free(out);
        cr_assert_eq(http(port, "POST", "/v1/leases/1/release", "{\"status\":\"ok\"}", &out), 200);
        free(out);
        char *groups_before;
        cr_assert_eq(http(port, "GET", "/v1/groups", NULL, &groups_before), 200);
        loom_server_free(s);

        s = start(dir, &e);
        cr_assert_not_null(s, "%s", e.msg);
        port = loom_server_port(s);
        char *groups_after;
        cr_assert_eq(http(port, "GET", "/v1/groups", NULL, &groups_after), 200);
        cr_assert_str_eq(groups_after, groups_before);
        cr_assert_eq(http(port, "GET", "/v1/jobs/1", NULL, &out), 200);
        cr_assert(strstr(out, "\"next_phase\":\"train\"") != NULL, "%s", out);
        free(out);
        cr_assert_eq(http(port, "GET", "/v1/jobs/2", NULL, &out), 200);
        cr_assert(strstr(out, "\"state\":\"cancelled\"") != NULL, "%s", out);
        free(out);
        cr_assert_eq(http(port, "POST", "/v1/jobs/1/phases/train/acquire?wait=1", "", &out), 200,
                     "%s", out);
        cr_assert(strstr(out, "\"lease\":2") != NULL, "lease ids continue: %s", out);
        free(out);
        free(groups_before);
        free(groups_after);
        loom_server_free(s);
        rmdir_all(dir);
        free(dir);
}

Test(server, a_tampered_placement_is_refused)
{
        char *dir = tmpdir();
        loom_err e;
        loom_server *s = start(dir, &e);
        cr_assert_not_null(s);
        char b[512], *out;
        cr_assert_eq(
            http(loom_server_port(s), "POST", "/v1/jobs", spec(b, sizeof b, "A", 2, 1), &out), 201);
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
        cr_assert_null(s);
        cr_assert(strstr(e.msg, "differently") != NULL, "%s", e.msg);
        rmdir_all(dir);
        free(dir);
}

Test(server, store_keeps_its_cluster)
{
        char *dir = tmpdir();
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
        rmdir_all(dir);
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
        snprintf(cfg.listen_host, sizeof cfg.listen_host, "localhost");
        char *dir = tmpdir();
        cfg.data_dir = dir;
        cr_assert_null(loom_server_new(&cfg, &e));
        cr_assert_str_eq(e.field, "listen");
        rmdir_all(dir);
        free(dir);
}

Test(server, store_round_trip)
{
        char *dir = tmpdir();
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
        cr_assert_eq(srv_store_load_jobs(st, s, &e), 0, "%s", e.msg);
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
        rmdir_all(dir);
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
