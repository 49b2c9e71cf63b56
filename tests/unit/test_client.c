/*
 * test_client.c - libloom-client against a scripted HTTP server on 127.0.0.1: retries across
 * 503 and dropped connections, reply parsing, status-to-error mapping, unbounded acquires that
 * re-poll after 204, and the background heartbeat while a lease is held.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loom/client.h"

#define MAX_SCRIPT 16

/* One canned reply per connection, in order; the last one repeats. -1 = drop the connection. */
typedef struct fake {
        int fd, port;
        pthread_t th;
        int n;
        int status[MAX_SCRIPT];
        const char *body[MAX_SCRIPT];
        char paths[64][128];
        int n_req;
        pthread_mutex_t mu;
        volatile int stop;
} fake;

static void *serve(void *arg)
{
        fake *f = arg;
        int i = 0;
        while (!f->stop) {
                int c = accept(f->fd, NULL, NULL);
                if (c < 0)
                        continue;
                char buf[8192];
                size_t len = 0;
                ssize_t r;
                char *end = NULL;
                while (!end && (r = read(c, buf + len, sizeof buf - 1 - len)) > 0) {
                        len += (size_t)r;
                        buf[len] = '\0';
                        end = strstr(buf, "\r\n\r\n");
                }
                if (end) {
                        const char *cl = strcasestr(buf, "Content-Length:");
                        size_t want = cl ? strtoul(cl + 15, NULL, 10) : 0;
                        size_t have = len - (size_t)(end + 4 - buf);
                        while (have < want && (r = read(c, buf, sizeof buf)) > 0)
                                have += (size_t)r;
                        pthread_mutex_lock(&f->mu);
                        if (f->n_req < 64)
                                sscanf(strchr(buf, ' ') ? strchr(buf, ' ') + 1 : "", "%127s",
                                       f->paths[f->n_req]);
                        f->n_req++;
                        pthread_mutex_unlock(&f->mu);
                }
                int k = i < f->n ? i : f->n - 1;
                i++;
                if (f->status[k] >= 0) {
                        const char *b = f->body[k] ? f->body[k] : "";
                        char out[4096];
                        int n = snprintf(out, sizeof out,
                                         "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                                         f->status[k], strlen(b), b);
                        ssize_t w = write(c, out, (size_t)n);
                        (void)w;
                }
                close(c);
        }
        return NULL;
}

static void fake_start(fake *f)
{
        f->fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        socklen_t al = sizeof a;
        cr_assert_eq(bind(f->fd, (struct sockaddr *)&a, sizeof a), 0);
        cr_assert_eq(listen(f->fd, 16), 0);
        getsockname(f->fd, (struct sockaddr *)&a, &al);
        f->port = ntohs(a.sin_port);
        struct timeval tv = {.tv_usec = 100000};
        setsockopt(f->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        pthread_mutex_init(&f->mu, NULL);
        pthread_create(&f->th, NULL, serve, f);
}

static void fake_stop(fake *f)
{
        f->stop = 1;
        pthread_join(f->th, NULL);
        close(f->fd);
}

static loom_client *client_for(fake *f, double retry_for)
{
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/", f->port);
        loom_client_opts o;
        loom_client_opts_default(&o);
        o.retry_for_s = retry_for;
        o.request_timeout_s = 2;
        loom_client *c = loom_client_new(url, &o);
        cr_assert_not_null(c);
        return c;
}

static const char lease_body[] =
    "{\"lease\":7,\"job\":3,\"phase\":\"rollout\",\"pool\":\"rollout\","
    "\"nodes\":[4,5],\"gpus\":8,\"lease_timeout_s\":0.3,"
    "\"iteration\":2}";

Test(client, submit_retries_503_and_dropped_connections)
{
        fake f = {.n = 3,
                  .status = {503, -1, 201},
                  .body = {"{\"error\":\"busy\",\"field\":\"\"}", NULL, "{\"id\":42}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 10);
        uint32_t id = 0;
        char *reply = NULL;
        cr_assert_eq(loom_client_submit(c, "{}", "k1", &id, &reply), 0, "%s", loom_client_error(c));
        cr_assert_eq(id, 42);
        cr_assert_str_eq(reply, "{\"id\":42}");
        cr_assert_eq(f.n_req, 3, "two failures retried, got %d requests", f.n_req);
        loom_client_free_string(reply);
        loom_client_free(c);
        fake_stop(&f);
}

Test(client, refused_spec_names_the_field)
{
        fake f = {
            .n = 1, .status = {422}, .body = {"{\"error\":\"must be >= 1\",\"field\":\"slo\"}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 5);
        uint32_t id;
        cr_assert_eq(loom_client_submit(c, "{}", NULL, &id, NULL), LOOM_EINVAL);
        cr_assert(strstr(loom_client_error(c), "slo") != NULL, "%s", loom_client_error(c));
        cr_assert_eq(loom_client_status(c), 422);
        cr_assert_eq(f.n_req, 1, "4xx is an answer, not retried");
        loom_client_free(c);
        fake_stop(&f);
}

Test(client, unbounded_acquire_repolls_after_204_and_parses_the_lease)
{
        fake f = {.n = 3, .status = {204, 204, 200}, .body = {NULL, NULL, lease_body}};
        fake_start(&f);
        loom_client_opts o;
        loom_client_opts_default(&o);
        o.heartbeat = false;
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", f.port);
        loom_client *c = loom_client_new(url, &o);
        loom_client_lease l;
        cr_assert_eq(loom_client_acquire(c, 3, "rollout", -1, &l), 0, "%s", loom_client_error(c));
        cr_assert_eq(l.id, 7);
        cr_assert_eq(l.job, 3);
        cr_assert_str_eq(l.phase, "rollout");
        cr_assert_eq(l.n_nodes, 2);
        cr_assert_eq(l.nodes[1], 5);
        cr_assert_eq(l.gpus, 8);
        cr_assert_eq(l.iteration, 2);
        cr_assert_eq(f.n_req, 3);
        cr_assert(strstr(f.paths[0], "/v1/jobs/3/phases/rollout/acquire?wait=") != NULL, "%s",
                  f.paths[0]);
        loom_client_free(c);
        fake_stop(&f);
}

Test(client, bounded_acquire_times_out)
{
        fake f = {.n = 1, .status = {204}};
        fake_start(&f);
        loom_client *c = client_for(&f, 5);
        loom_client_lease l;
        cr_assert_eq(loom_client_acquire(c, 1, "train", 0.2, &l), LOOM_ETIMEDOUT);
        loom_client_free(c);
        fake_stop(&f);
}

Test(client, status_codes_map_to_errors)
{
        fake f = {.n = 4,
                  .status = {409, 404, 410, 200},
                  .body = {"{\"error\":\"job 1 is finished\",\"field\":\"state\"}",
                           "{\"error\":\"no such job\",\"field\":\"id\"}",
                           "{\"error\":\"lease 7 was lost\",\"field\":\"lease\"}",
                           "{\"action\":\"migrate_tail\",\"keep_gpus\":1}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 5);
        loom_client_lease l = {.id = 7};
        cr_assert_eq(loom_client_acquire(c, 1, "rollout", 0, &l), LOOM_ESTATE);
        cr_assert_eq(loom_client_acquire(c, 9, "rollout", 0, &l), LOOM_ENOENT);
        l.id = 7;
        cr_assert_eq(loom_client_progress(c, &l, 1, 2, NULL), LOOM_ENOENT);
        int keep = 0;
        cr_assert_eq(loom_client_progress(c, &l, 9, 10, &keep), 1);
        cr_assert_eq(keep, 1);
        cr_assert(strstr(f.paths[3], "/v1/leases/7/progress") != NULL);
        loom_client_free(c);
        fake_stop(&f);
}

Test(client, unreachable_daemon_gives_up_after_retry_window)
{
        fake f = {.n = 1, .status = {200}};
        fake_start(&f);
        int port = f.port;
        fake_stop(&f); /* nothing listens there now */
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
        loom_client_opts o;
        loom_client_opts_default(&o);
        o.retry_for_s = 0.3;
        loom_client *c = loom_client_new(url, &o);
        uint32_t id;
        cr_assert_eq(loom_client_submit(c, "{}", NULL, &id, NULL), LOOM_EIO);
        cr_assert_eq(loom_client_status(c), 0);
        loom_client_free(c);
}

Test(client, heartbeat_thread_renews_a_held_lease)
{
        fake f = {.n = 2, .status = {200, 200}, .body = {lease_body, "{\"lease\":7}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 5);
        loom_client_lease l;
        cr_assert_eq(loom_client_acquire(c, 3, "rollout", 1, &l), 0);
        /* lease_timeout_s 0.3: a beat every 0.1 s; wait for at least two (up to 5 s). */
        int beats = 0;
        for (int i = 0; i < 500 && beats < 2; i++) {
                usleep(10000);
                pthread_mutex_lock(&f.mu);
                beats = 0;
                for (int k = 1; k < f.n_req && k < 64; k++)
                        beats += strstr(f.paths[k], "/v1/leases/7/heartbeat") != NULL;
                pthread_mutex_unlock(&f.mu);
        }
        cr_assert_geq(beats, 2, "heartbeats seen: %d", beats);
        loom_client_free(c);
        fake_stop(&f);
}

Test(client, bad_url_is_refused)
{
        cr_assert_null(loom_client_new("", NULL));
        cr_assert_null(loom_client_new(NULL, NULL));
}

Test(client, attach_parses_where_to_resume)
{
        fake f = {.n = 2,
                  .status = {200, 404},
                  .body = {"{\"id\":4,\"state\":\"running\",\"iterations\":10,"
                           "\"iterations_done\":6,\"next_phase\":\"rollout\",\"restarts\":2,"
                           "\"max_restarts\":3,\"resubmits\":1,\"resume_iteration\":7,"
                           "\"took_over\":true}",
                           "{\"error\":\"no such job: 5\",\"field\":\"id\"}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 5);
        loom_client_resume r;
        cr_assert_eq(loom_client_attach(c, 4, "bogus", &r), LOOM_EINVAL);
        cr_assert_eq(loom_client_attach(c, 4, "any", &r), 0, "%s", loom_client_error(c));
        cr_assert_str_eq(r.state, "running");
        cr_assert_str_eq(r.next_phase, "rollout");
        cr_assert_eq(r.iterations, 10);
        cr_assert_eq(r.iterations_done, 6);
        cr_assert_eq(r.resume_iteration, 7);
        cr_assert(r.restarts == 2 && r.max_restarts == 3 && r.resubmits == 1 && r.took_over);
        cr_assert(strstr(f.paths[0], "/v1/jobs/4/attach") != NULL, "%s", f.paths[0]);
        cr_assert_eq(loom_client_attach(c, 5, NULL, &r), LOOM_ENOENT);
        cr_assert(strstr(loom_client_error(c), "no such job") != NULL);
        loom_client_free(c);
        fake_stop(&f);
}

/* A job that has ended has nothing to resume: loomd answers resume_iteration null, and the
 * reply is still the job's (the real jobs read their final counts this way). */
Test(client, attach_to_an_ended_job_reads_its_counts)
{
        fake f = {.n = 1,
                  .status = {200},
                  .body = {"{\"id\":4,\"state\":\"finished\",\"iterations\":4,"
                           "\"iterations_done\":4,\"next_phase\":\"rollout\",\"restarts\":1,"
                           "\"max_restarts\":3,\"resubmits\":0,\"resume_iteration\":null}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 1);
        loom_client_resume r;
        cr_assert_eq(loom_client_attach(c, 4, NULL, &r), 0, "%s", loom_client_error(c));
        cr_assert_str_eq(r.state, "finished");
        cr_assert(r.iterations_done == 4 && r.restarts == 1 && r.resume_iteration == 0);
        loom_client_free(c);
        fake_stop(&f);
}

/* Ids that do not fit what they name are protocol errors: a job id of 2^32 + 1 would otherwise
 * wrap to job 1, another job, and a lease id <= 0 names no lease. */
Test(client, out_of_range_ids_in_replies_are_protocol_errors)
{
        fake f = {.n = 4,
                  .status = {201, 201, 200, 200},
                  .body = {"{\"id\":4294967297}", "{\"id\":-3}",
                           "{\"lease\":-5,\"job\":1,\"phase\":\"rollout\",\"nodes\":[0]}",
                           "{\"lease\":7,\"job\":1,\"phase\":\"rollout\",\"nodes\":[-1]}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 1);
        uint32_t id = 99;
        cr_assert_eq(loom_client_submit(c, "{}", "k1", &id, NULL), LOOM_EPROTO);
        cr_assert_eq(id, 0, "no job id taken from a reply whose id does not fit (got %u)", id);
        cr_assert_eq(loom_client_submit(c, "{}", "k2", &id, NULL), LOOM_EPROTO);
        loom_client_lease l;
        cr_assert_eq(loom_client_acquire(c, 1, "rollout", 0, &l), LOOM_EPROTO);
        cr_assert_eq(l.id, 0);
        cr_assert_eq(loom_client_acquire(c, 1, "rollout", 0, &l), LOOM_EPROTO);
        cr_assert_eq(l.n_nodes, 0, "a rejected lease is not half-filled");
        loom_client_free(c);
        fake_stop(&f);
}

/* ---- operating loomd: pages, nodes, the event follower, tables ----------------------------- */

Test(client, jobs_walks_every_page_and_filters_tenant_and_group)
{
        fake f = {.n = 2,
                  .status = {200, 200},
                  .body = {"{\"jobs\":[{\"id\":5,\"tenant\":\"a\",\"group\":0},"
                           "{\"id\":6,\"tenant\":\"b\",\"group\":1}],\"next\":6}",
                           "{\"jobs\":[{\"id\":9,\"tenant\":\"b\",\"group\":2}],\"next\":null}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 2);
        loom_client_job_filter flt = {.state = "live", .tenant = "b"};
        char *js = NULL;
        cr_assert_eq(loom_client_jobs(c, &flt, &js), 0, "%s", loom_client_error(c));
        cr_assert_str_eq(js, "{\"jobs\":[{\"id\":6,\"tenant\":\"b\",\"group\":1},"
                             "{\"id\":9,\"tenant\":\"b\",\"group\":2}]}");
        cr_assert_eq(f.n_req, 2);
        cr_assert_str_eq(f.paths[0], "/v1/jobs?state=live&limit=1000");
        cr_assert_str_eq(f.paths[1], "/v1/jobs?state=live&limit=1000&after=6");
        loom_client_free_string(js);
        loom_client_free(c);
        fake_stop(&f);
}

Test(client, nodes_of_a_tenant_come_from_its_jobs_when_groups_are_refused)
{
        fake f = {.n = 2,
                  .status = {403, 200},
                  .body = {"{\"error\":\"a tenant token may not do this\",\"field\":\"\"}",
                           "{\"jobs\":[{\"id\":5,\"group\":3,\"rollout_nodes\":[2],"
                           "\"train_nodes\":[0,1]}],\"next\":null}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 2);
        char *js = NULL;
        cr_assert_eq(loom_client_nodes(c, &js), 0, "%s", loom_client_error(c));
        cr_assert_str_eq(js,
                         "{\"nodes\":[{\"id\":2,\"pool\":\"rollout\",\"groups\":[3],\"jobs\":[5]},"
                         "{\"id\":0,\"pool\":\"train\",\"groups\":[3],\"jobs\":[5]},"
                         "{\"id\":1,\"pool\":\"train\",\"groups\":[3],\"jobs\":[5]}],"
                         "\"source\":\"jobs\"}");
        loom_client_free_string(js);
        loom_client_free(c);
        fake_stop(&f);
}

Test(client, event_follower_returns_each_event_once_oldest_first)
{
        /* loomd lists events newest first; the second poll sees the same ones again */
        fake f = {.n = 1,
                  .status = {200},
                  .body = {"{\"events\":[{\"kind\":\"exit\",\"job\":1,\"at_us\":2000000,"
                           "\"reason\":\"cancelled\"},{\"kind\":\"submit\",\"job\":2,\"at_us\":"
                           "1500000,\"reason\":\"\"},{\"kind\":\"submit\",\"job\":1,\"at_us\":"
                           "1000000,\"reason\":\"\"}]}"}};
        fake_start(&f);
        loom_client *c = client_for(&f, 2);
        loom_client_events *w = loom_client_events_new(c, 1, 60);
        char *js = NULL;
        cr_assert_eq(loom_client_events_poll(w, &js), 0, "%s", loom_client_error(c));
        cr_assert(strstr(js, "\"submit\"") < strstr(js, "\"exit\""), "oldest first: %s", js);
        cr_assert_null(strstr(js, "\"job\":2"), "job 1 only: %s", js);
        loom_client_free_string(js);
        cr_assert_eq(loom_client_events_poll(w, &js), 0);
        cr_assert_str_eq(js, "{\"events\":[]}");
        cr_assert_str_eq(f.paths[0], "/v1/timeline?window_s=60.000");
        loom_client_free_string(js);
        loom_client_events_free(w);
        loom_client_free(c);
        fake_stop(&f);
}

/* What view prints for json, in a buffer the caller frees; *rc gets the return. */
static char *render(const char *view, const char *json, int *rc, char *err, size_t n)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        *rc = loom_client_render(view, json, m, err, n);
        fclose(m);
        return buf;
}

Test(client, render_tables_for_people)
{
        char err[128];
        int rc;
        char *out = render("jobs",
                           "{\"jobs\":[{\"id\":7,\"name\":\"math\",\"tenant\":\"a\",\"state\":"
                           "\"running\",\"iterations\":0,\"iterations_done\":4,\"phase\":\"train\","
                           "\"group\":1,\"rate\":2,\"restarts\":1,\"max_restarts\":3,"
                           "\"rollout_nodes\":[2],\"train_nodes\":[0,1]}]}",
                           &rc, err, sizeof err);
        cr_assert_eq(rc, 0, "%s", err);
        cr_assert(strstr(out, "ID  NAME  TENANT  STATE") == out, "%s", out);
        cr_assert(
            strstr(out, "7   math  a       running  4/inf  train  1      2     1/3       2/0,1"),
            "%s", out);
        free(out);
        out = render("job",
                     "{\"id\":7,\"name\":\"math\",\"state\":\"running\",\"iterations\":10,"
                     "\"iterations_done\":4,\"slo\":{\"slo\":1.5,\"budget_s\":9.0,"
                     "\"mean_iteration_s\":6.0,\"headroom\":0.3333},\"cost\":{\"per_hour\":57.04,"
                     "\"so_far\":1.5},\"events\":[{\"kind\":\"readmit\",\"job\":7,\"at_us\":0,"
                     "\"reason\":{\"cause\":\"drift\",\"why\":\"p95 1.3x\"}}]}",
                     &rc, err, sizeof err);
        cr_assert_eq(rc, 0, "%s", err);
        cr_assert(strstr(out, "iterations     4 of 10"), "%s", out);
        cr_assert(strstr(out, "mean iteration 6 s: headroom 33 %"), "%s", out);
        cr_assert(strstr(out, "US$1.50 so far, US$57.04/h"), "%s", out);
        cr_assert(strstr(out, "readmit  7           drift: p95 1.3x"), "%s", out);
        free(out);
        out = render("decision",
                     "{\"error\":\"too big\",\"decision\":{\"decision\":\"rejected\",\"reason\":"
                     "\"working set too big\",\"candidates\":[]}}",
                     &rc, err, sizeof err);
        cr_assert_eq(rc, 0, "%s", err);
        cr_assert_str_eq(out, "placement      rejected: working set too big\n");
        free(out);
}

Test(client, render_refuses_what_is_not_its_view)
{
        char err[128];
        int rc;
        free(render("jobs", "{\"groups\":[]}", &rc, err, sizeof err));
        cr_assert_eq(rc, LOOM_EINVAL);
        cr_assert_str_eq(err, "the reply is not what a 'jobs' view shows");
        free(render("jobs", "not json", &rc, err, sizeof err));
        cr_assert_eq(rc, LOOM_EINVAL);
        free(render("pods", "{}", &rc, err, sizeof err));
        cr_assert_eq(rc, LOOM_EINVAL);
        cr_assert_str_eq(err, "unknown view 'pods'");
}
