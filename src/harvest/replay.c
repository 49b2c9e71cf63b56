/*
 * replay.c - `loom harvest replay`: drive a node with a trace at compressed wall-clock speed and
 * measure TTFT and TPOT at the client.
 *
 * One detached thread per request (small stacks): it connects at the request's arrival time,
 * sends GET /v1/generate over HTTP/1.0 and timestamps the "first" and "done" lines as they
 * arrive. Wall times are multiplied by the speed to give emulated milliseconds, comparable
 * with the SLOs. A request counts as failed on any socket error, timeout or missing line.
 *
 * The "done" line also carries the node's own figures (TTFT and TPOT on its clock from
 * accepting the request, and the host lag inside each), kept beside the client's: the client's
 * include loopback, HTTP and its own threads' scheduling, which no admission controls.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "loom/harvest.h"
#include "sim_int.h"

/* One answered request's figures, emulated ms: client, node, host lag, send lag. */
enum { C_TTFT, C_TPOT, N_TTFT, N_TPOT, H_TTFT, H_TPOT, SEND_LAG, NCOL };

typedef struct row {
        double v[NCOL];
        int node; /* the node's figures came with it */
} row;

typedef struct shared {
        const loom_harvest_replay_cfg *cfg;
        struct sockaddr_in sa;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        size_t running;
        uint64_t ok, failed;
        row *rows;
} shared;

typedef struct job {
        shared *s;
        uint32_t prompt, gen;
        double at_wall; /* when the trace says it arrives */
} job;

static int one(const job *j, row *out)
{
        const loom_harvest_replay_cfg *c = j->s->cfg;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        struct timeval tv = {.tv_sec = (time_t)(c->timeout_s > 0 ? c->timeout_s : 60)};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        double t0 = hv_now_s(), t_first = 0, t_done = 0;
        out->v[SEND_LAG] = t0 > j->at_wall ? (t0 - j->at_wall) * c->speed * 1e3 : 0;
        if (connect(fd, (const struct sockaddr *)&j->s->sa, sizeof j->s->sa)) {
                close(fd);
                return -1;
        }
        char req[160];
        int len = snprintf(req, sizeof req, "GET /v1/generate?prompt=%u&gen=%u HTTP/1.0\r\n\r\n",
                           j->prompt, j->gen);
        if (write(fd, req, (size_t)len) != len) {
                close(fd);
                return -1;
        }
        char buf[4096];
        size_t have = 0;
        int body = 0, status = 0;
        for (;;) {
                ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
                if (r <= 0)
                        break;
                have += (size_t)r;
                buf[have] = 0;
                if (!status && have > 12)
                        status = atoi(buf + 9);
                if (!body && strstr(buf, "\r\n\r\n"))
                        body = 1;
                if (body && !t_first && strstr(buf, "\nfirst\n"))
                        t_first = hv_now_s();
                if (body && !t_done && strstr(buf, "\ndone "))
                        t_done = hv_now_s();
                if (have >= sizeof buf - 1)
                        break;
        }
        close(fd);
        if (status != 200 || !t_first || !t_done)
                return -1;
        out->v[C_TTFT] = (t_first - t0) * c->speed * 1e3;
        out->v[C_TPOT] = j->gen > 1 ? (t_done - t_first) * c->speed * 1e3 / (j->gen - 1) : 0;
        const char *d = strstr(buf, "\ndone ");
        out->node = sscanf(d + 6, "%lf %lf %lf %lf", &out->v[N_TTFT], &out->v[N_TPOT],
                           &out->v[H_TTFT], &out->v[H_TPOT]) == 4;
        return 0;
}

static void *worker(void *arg)
{
        job *j = arg;
        shared *s = j->s;
        row r = {0};
        int rc = one(j, &r);
        pthread_mutex_lock(&s->mu);
        if (rc == 0) {
                s->rows[s->ok++] = r;
        } else {
                s->failed++;
        }
        s->running--;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        free(j);
        return NULL;
}

typedef struct pick {
        double v, with; /* v first: sorted by loom_cmp_double */
} pick;

/* The quantile q (nearest rank) of column k less column minus (when >= 0) over rows[0..n), only
 * those with the node's figures when node; *with (when w >= 0) gets column w of the row at
 * that rank. tmp holds n picks. */
static double col(const row *rows, size_t n, pick *tmp, int node, int k, int minus, int w, double q,
                  double *with)
{
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
                if (!node || rows[i].node)
                        tmp[m++] = (pick){rows[i].v[k] - (minus >= 0 ? rows[i].v[minus] : 0),
                                          w >= 0 ? rows[i].v[w] : 0};
        if (m == 0)
                return 0;
        qsort(tmp, m, sizeof *tmp, loom_cmp_double);
        size_t r = (size_t)ceil(q * (double)m);
        r = r > 0 ? r - 1 : 0;
        r = r < m ? r : m - 1;
        if (with)
                *with = tmp[r].with;
        return tmp[r].v;
}

static int summarise(const row *rows, size_t n, loom_harvest_replay_result *r)
{
        pick *t = malloc((n ? n : 1) * sizeof *t);
        if (!t)
                return LOOM_ENOMEM;
        r->ttft_p50_ms = col(rows, n, t, 0, C_TTFT, -1, -1, 0.5, NULL);
        r->ttft_p99_ms = col(rows, n, t, 0, C_TTFT, -1, -1, 0.99, NULL);
        r->tpot_p50_ms = col(rows, n, t, 0, C_TPOT, -1, -1, 0.5, NULL);
        r->tpot_p99_ms = col(rows, n, t, 0, C_TPOT, -1, -1, 0.99, NULL);
        r->send_lag_max_ms = col(rows, n, t, 0, SEND_LAG, -1, -1, 1, NULL);
        for (size_t i = 0; i < n; i++)
                r->node_figures += rows[i].node != 0;
        r->node_ttft_p50_ms = col(rows, n, t, 1, N_TTFT, -1, -1, 0.5, NULL);
        r->node_ttft_p99_ms = col(rows, n, t, 1, N_TTFT, -1, H_TTFT, 0.99, &r->host_ttft_p99_ms);
        r->node_tpot_p50_ms = col(rows, n, t, 1, N_TPOT, -1, -1, 0.5, NULL);
        r->node_tpot_p99_ms = col(rows, n, t, 1, N_TPOT, -1, H_TPOT, 0.99, &r->host_tpot_p99_ms);
        r->client_extra_p99_ms = col(rows, n, t, 1, C_TTFT, N_TTFT, -1, 0.99, NULL);
        free(t);
        return 0;
}

int loom_harvest_replay(const loom_harvest_replay_cfg *c, loom_harvest_replay_result *res,
                        loom_err *e)
{
        memset(res, 0, sizeof *res);
        int rc;
        if (!c->trace || c->trace->n == 0)
                return loom_err_set(e, LOOM_EINVAL, "trace", "no requests");
        if (!(c->speed > 0) || !(c->density > 0))
                return loom_err_set(e, LOOM_EINVAL, "speed", "speed and density must be positive");
        shared s = {.cfg = c};
        s.sa.sin_family = AF_INET;
        s.sa.sin_port = htons(c->port);
        if (inet_pton(AF_INET, c->host, &s.sa.sin_addr) != 1)
                return loom_err_set(e, LOOM_EINVAL, "host", "'%s' is not an IPv4 address", c->host);
        size_t n = c->trace->n;
        s.rows = malloc(n * sizeof *s.rows);
        if (!s.rows)
                return loom_err_set(e, LOOM_ENOMEM, "replay", "out of memory");
        pthread_mutex_init(&s.mu, NULL);
        pthread_cond_init(&s.cv, NULL);
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 128 * 1024);
        double t0 = hv_now_s();
        for (size_t i = 0; i < n; i++) {
                double emu = (double)c->trace->reqs[i].arrival / 1e6 / c->density;
                if (c->duration_s > 0 && emu > c->duration_s)
                        break;
                double at_wall = t0 + emu / c->speed, now = hv_now_s();
                if (at_wall > now) {
                        struct timespec d = {.tv_sec = (time_t)(at_wall - now)};
                        d.tv_nsec = (long)((at_wall - now - (double)d.tv_sec) * 1e9);
                        nanosleep(&d, NULL);
                }
                job *j = malloc(sizeof *j);
                if (!j)
                        break;
                *j = (job){&s, c->trace->reqs[i].prompt, c->trace->reqs[i].gen, at_wall};
                pthread_t th;
                pthread_mutex_lock(&s.mu);
                s.running++;
                pthread_mutex_unlock(&s.mu);
                res->sent++;
                if (pthread_create(&th, &at, worker, j)) {
                        free(j);
                        pthread_mutex_lock(&s.mu);
                        s.running--;
                        s.failed++;
                        pthread_mutex_unlock(&s.mu);
                }
        }
        pthread_mutex_lock(&s.mu);
        while (s.running > 0)
                pthread_cond_wait(&s.cv, &s.mu);
        pthread_mutex_unlock(&s.mu);
        pthread_attr_destroy(&at);
        res->wall_s = hv_now_s() - t0;
        res->ok = s.ok;
        res->failed = s.failed;
        rc = summarise(s.rows, s.ok, res);
        free(s.rows);
        pthread_mutex_destroy(&s.mu);
        pthread_cond_destroy(&s.cv);
        return rc ? loom_err_set(e, rc, "replay", "out of memory") : 0;
}
