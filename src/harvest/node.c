/*
 * node.c - `loom harvest node`: one emulated serving GPU running the co-serving executor live.
 *
 * Threads: libmicrohttpd's (one per connection), the executor, nothing else. The executor asks
 * the engine (engine.c, the simulator's code) for the next iteration, sleeps its modelled GPU
 * time divided by `speed` on the wall clock, and reports it finished; HTTP threads submit
 * serving requests and stream "first" / "done" lines back as the engine reports tokens. A
 * rollout feeder routes turns of synthetic multi-turn trajectories through the turn router
 * (router.c) to keep `rollouts` turns in flight; aborted turns (stall, emergency cut) are
 * routed again. After every engine action the KV page pool (pool.c, real memory: memfd pages
 * mapped into PROT_NONE-reserved ranges) is brought to the engine's page accounting. One mutex
 * guards the engine, router, pool and requests.
 *
 * RL steps: every cfg.step_s emulated seconds the executor starts a new RL step, as the
 * simulator does at each rollout phase: the rollout budget is derived again from the serving
 * peak since the last step and a frozen budget (after an emergency cut) is released.
 * Requests whose KV could never fit serving's share of the pool (413) or that exceed the
 * model's context (422) are refused at the door, so no request can wait forever.
 *
 * With weights (cfg.weights), wlive.c's pull thread keeps the rollout model's weight buffer at
 * the publisher's latest version. Before routing, the feeder tells the router the version this
 * node serves (its heartbeat) and the newest version known (the policy version): a node more
 * than cfg.staleness versions behind gets no new turns until it has caught up. Every turn is
 * tagged with the version it started under.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "node_int.h"
#include "loom/sync.h"

typedef struct live_req {
        int refs;
        int first, done, phase;
        loom_us arr, t_first, t_done;
        loom_us lag_arr, lag_first, lag_done; /* the executor's host lag at those instants */
        uint32_t gen;
        struct loom_harvest_node *n;
} live_req;

struct loom_harvest_node {
        loom_harvest_node_cfg cfg;
        loom_harvest_model m;
        hv_engine g;
        loom_harvest_router *r;
        loom_harvest_pool *pool;
        uint32_t *vp[2]; /* mapped virtual pages per model, as a stack */
        uint32_t nvp[2];
        struct MHD_Daemon *mhd;
        uint16_t port;
        pthread_t exec;
        int exec_started, stop;
        pthread_mutex_t mu;
        pthread_cond_t cv_exec, cv_req;
        struct timespec wall0;
        uint64_t next_id;
        uint32_t next_traj, in_flight;
        uint32_t *turn_of; /* per trajectory: turns done */
        size_t cap_turn_of;
        uint32_t *ver_of; /* per trajectory: version its running turn started under */
        size_t cap_ver_of;
        loom_harvest_wlive *wl;
        uint32_t version, policy; /* as of the last feed */
        /* Host lag: emulated time the executor lost to the host (a sleep that overshot, a
         * wake-up or a start that came late), summed since start. From late_since on, the
         * executor is behind (the planned end of the running iteration, the end of the last
         * one, or the arrival that should have woken it); LOOM_HARVEST_INF while idle. */
        loom_us lag, late_since;
        loom_harvest_node_stats st;
};

static loom_us emu_now(const loom_harvest_node *n)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double s =
            (double)(t.tv_sec - n->wall0.tv_sec) + (double)(t.tv_nsec - n->wall0.tv_nsec) / 1e9;
        return (loom_us)(s * n->cfg.speed * 1e6);
}

static struct timespec wall_at(const loom_harvest_node *n, loom_us emu)
{
        double s = (double)emu / 1e6 / n->cfg.speed;
        struct timespec t = n->wall0;
        t.tv_sec += (time_t)s;
        t.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
        if (t.tv_nsec >= 1000000000L) {
                t.tv_sec++;
                t.tv_nsec -= 1000000000L;
        }
        return t;
}

/* The host lag accrued by emulated time t (now or later): what is summed, plus the delay
 * running at t. */
static loom_us lag_at(const loom_harvest_node *n, loom_us t)
{
        return n->lag + (t > n->late_since ? t - n->late_since : 0);
}

static void add_lag(loom_harvest_node *n, loom_us d)
{
        n->lag += d;
        if (d > n->st.host_lag_max_us)
                n->st.host_lag_max_us = d;
}

/* ---- page pool mirrors the engine's accounting ----------------------------------------- */

static void sync_pool(loom_harvest_node *n)
{
        uint32_t want[2] = {n->g.mem.serving_used, n->g.mem.rollout_used};
        for (int m = 0; m < 2; m++)
                while (n->nvp[m] > want[m])
                        loom_harvest_pool_unmap(n->pool, m, n->vp[m][--n->nvp[m]]);
        for (int m = 0; m < 2; m++)
                while (n->nvp[m] < want[m]) {
                        uint32_t v;
                        if (loom_harvest_pool_map(n->pool, m, &v, NULL))
                                break;
                        *(volatile char *)loom_harvest_pool_addr(n->pool, m, v) = 1; /* touch */
                        n->vp[m][n->nvp[m]++] = v;
                }
        n->st.pool_serving = loom_harvest_pool_used(n->pool, LOOM_HARVEST_SERVING);
        n->st.pool_rollout = loom_harvest_pool_used(n->pool, LOOM_HARVEST_ROLLOUT);
}

/* ---- rollout feeder ----------------------------------------------------------------------- */

static uint32_t turn_prompt(const loom_harvest_node *n, uint32_t k)
{
        return n->cfg.turn_prompt + k * (n->cfg.turn_resp + 200); /* response + observation */
}

static void submit_turn(loom_harvest_node *n, loom_us now, uint32_t traj)
{
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        uint32_t w = loom_harvest_router_route(n->r, now, traj, NULL);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double us = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
        n->st.route_calls++;
        if (us > n->st.route_us_max)
                n->st.route_us_max = us;
        if (w == LOOM_HARVEST_NONE) {
                n->st.route_stale += n->policy - n->version > n->cfg.staleness;
                return;
        }
        n->ver_of[traj] = n->version;
        uint32_t k = n->turn_of[traj];
        if (hv_engine_submit_turn(&n->g, now, traj, turn_prompt(n, k), n->cfg.turn_resp, NULL)) {
                loom_harvest_router_abort(n->r, traj);
                loom_harvest_router_close(n->r, w, now + n->g.stall / 2);
                return;
        }
        n->in_flight++;
}

static void feed(loom_harvest_node *n, loom_us now)
{
        if (n->wl) {
                uint64_t served, latest;
                loom_harvest_wlive_versions(n->wl, &served, &latest);
                n->version = (uint32_t)served;
                n->policy = (uint32_t)latest;
                loom_harvest_router_set_version(n->r, n->policy);
        }
        loom_harvest_router_heartbeat(n->r, 0, now, n->version);
        if (n->wl && n->version == 0)
                return; /* no rollout model to run until the first version is in */
        /* resume trajectories that are between turns, then start new ones */
        for (uint32_t t = 0; t < n->next_traj && n->in_flight < n->cfg.rollouts; t++)
                if (n->turn_of[t] < n->cfg.turns &&
                    loom_harvest_router_running(n->r, t) == LOOM_HARVEST_NONE)
                        submit_turn(n, now, t);
        while (n->in_flight < n->cfg.rollouts) {
                uint32_t t = n->next_traj;
                if (loom_reserve(&n->turn_of, &n->cap_turn_of, (size_t)t + 1, sizeof *n->turn_of,
                                 256) ||
                    loom_reserve(&n->ver_of, &n->cap_ver_of, (size_t)t + 1, sizeof *n->ver_of, 256))
                        return;
                n->turn_of[t] = 0;
                n->next_traj++;
                uint32_t before = n->in_flight;
                submit_turn(n, now, t);
                if (n->in_flight == before)
                        return; /* no room now */
        }
}

static void cb_turn_done(void *arg, loom_us now, uint32_t traj, uint32_t gpu)
{
        loom_harvest_node *n = arg;
        loom_harvest_router_done(n->r, now, traj);
        n->turn_of[traj]++;
        if (n->turn_of[traj] >= n->cfg.turns)
                loom_harvest_router_finish(n->r, traj); /* its reserved slot is free again */
        n->in_flight--;
        n->st.turns_done++;
        uint32_t v = n->ver_of[traj], slot = v % LOOM_HARVEST_NODE_VERSIONS;
        if (n->st.turn_version[slot] != v || n->st.turn_count[slot] == 0) {
                n->st.turn_version[slot] = v;
                n->st.turn_count[slot] = 0;
        }
        n->st.turn_count[slot]++;
}

static void cb_turn_aborted(void *arg, loom_us now, uint32_t traj, uint32_t gpu, int why)
{
        loom_harvest_node *n = arg;
        loom_harvest_router_abort(n->r, traj); /* routed again by the feeder */
        n->in_flight--;
        n->st.turns_aborted++;
        if (why == HV_ABORT_STALL)
                loom_harvest_router_close(n->r, 0, now + n->g.stall);
}

/* ---- serving callbacks -------------------------------------------------------------------- */

static void unref(live_req *q)
{
        if (--q->refs == 0)
                free(q);
}

static void cb_prefilled(void *arg, loom_us now, const hv_sreq *r)
{
        loom_harvest_node *n = arg;
        live_req *q = r->user;
        q->first = 1;
        q->t_first = now;
        q->lag_first = n->lag;
        hv_engine_submit_decode(&n->g, now, r);
        pthread_cond_broadcast(&n->cv_req);
}

static void cb_served(void *arg, loom_us now, const hv_sreq *r)
{
        loom_harvest_node *n = arg;
        live_req *q = r->user;
        q->done = 1;
        q->t_done = now;
        q->lag_done = n->lag;
        n->st.served++;
        pthread_cond_broadcast(&n->cv_req);
        unref(q); /* the engine's reference */
}

/* ---- executor ------------------------------------------------------------------------------ */

/* The executor. Host lag (see struct loom_harvest_node) is counted where the host, not the
 * engine, set the time: an iteration that starts after the last one finished (or after the
 * arrival that woke an idle executor), and one whose sleep ends after its modelled end. */
static void *exec_main(void *arg)
{
        loom_harvest_node *n = arg;
        pthread_mutex_lock(&n->mu);
        loom_us next_step = loom_us_from_s(n->cfg.step_s);
        while (!n->stop) {
                loom_us now = emu_now(n);
                if (now >= next_step) { /* an RL step: new budget from the serving peak, unfreeze */
                        hv_engine_rl_step(&n->g);
                        n->st.rl_steps++;
                        while (next_step <= now)
                                next_step += loom_us_from_s(n->cfg.step_s);
                }
                feed(n, now);
                if (!hv_engine_next(&n->g, now)) {
                        n->late_since = LOOM_HARVEST_INF; /* idle: nothing is late */
                        sync_pool(n);
                        loom_us until = now + (loom_us)(2000 * n->cfg.speed);
                        struct timespec t = wall_at(n, until < next_step ? until : next_step);
                        pthread_cond_timedwait(&n->cv_exec, &n->mu, &t);
                        continue;
                }
                if (now > n->late_since)
                        add_lag(n, now - n->late_since);
                sync_pool(n);
                /* the GPU's time, model error included; the host's delays come on top */
                loom_us end = now + hv_noisy(n->g.cur.dur, n->cfg.noise, 1, 0, n->g.cur.seq);
                n->late_since = end;
                struct timespec t = wall_at(n, end);
                while (!n->stop && emu_now(n) < end)
                        pthread_cond_timedwait(&n->cv_exec, &n->mu, &t);
                /* the iteration ends when the host says so: a sleep that overshot is delay
                 * the engine's estimates did not have, and the guard must see it */
                loom_us real = emu_now(n);
                if (real > end)
                        add_lag(n, real - end);
                n->late_since = real > end ? real : end;
                hv_engine_finish(&n->g, n->late_since);
                sync_pool(n);
                pthread_cond_broadcast(&n->cv_req);
        }
        pthread_mutex_unlock(&n->mu);
        return NULL;
}

/* ---- HTTP ------------------------------------------------------------------------------------ */

static ssize_t stream(void *cls, uint64_t pos, char *buf, size_t max)
{
        live_req *q = cls;
        loom_harvest_node *n = q->n;
        ssize_t len = 0;
        pthread_mutex_lock(&n->mu);
        while (!n->stop && ((q->phase == 0 && !q->first) || (q->phase == 1 && !q->done)))
                pthread_cond_wait(&n->cv_req, &n->mu);
        if (n->stop && q->phase < 2) {
                len = MHD_CONTENT_READER_END_WITH_ERROR;
        } else if (q->phase == 0) {
                len = snprintf(buf, max, "first\n");
                q->phase = 1;
        } else if (q->phase == 1) {
                double per = q->gen > 1 ? 1e3 * (q->gen - 1) : 0;
                double ttft = (double)(q->t_first - q->arr) / 1e3;
                double tpot = per > 0 ? (double)(q->t_done - q->t_first) / per : 0;
                double lttft = (double)(q->lag_first - q->lag_arr) / 1e3;
                double ltpot = per > 0 ? (double)(q->lag_done - q->lag_first) / per : 0;
                len = snprintf(buf, max, "done %.3f %.3f %.3f %.3f\n", ttft, tpot, lttft, ltpot);
                q->phase = 2;
        } else {
                len = MHD_CONTENT_READER_END_OF_STREAM;
        }
        pthread_mutex_unlock(&n->mu);
        return len;
}

static void stream_free(void *cls)
{
        live_req *q = cls;
        loom_harvest_node *n = q->n;
        pthread_mutex_lock(&n->mu);
        unref(q);
        pthread_mutex_unlock(&n->mu);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body)
{
        struct MHD_Response *r =
            MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
        enum MHD_Result ret = MHD_queue_response(c, status, r);
        MHD_destroy_response(r);
        return ret;
}

/* A query argument as a whole number in [lo, 1000000], else -1. */
static int arg_u32(const hv_node_ask *q, const char *key, uint32_t lo, uint32_t *out)
{
        const char *v = q->arg(q->ctx, key);
        char *end;
        if (!v)
                return -1;
        errno = 0;
        unsigned long x = strtoul(v, &end, 10);
        if (errno || end == v || *end || x < lo || x > 1000000)
                return -1;
        *out = (uint32_t)x;
        return 0;
}

static void answer(hv_node_answer *a, unsigned status, const char *body)
{
        a->status = status;
        snprintf(a->body, sizeof a->body, "%s", body);
}

/* /v1/generate's arguments against the model: what the request may ask for at all. */
static void route_generate(loom_harvest_node *n, const hv_node_ask *q, hv_node_answer *a)
{
        uint32_t prompt, gen;
        if (arg_u32(q, "prompt", 1, &prompt))
                return answer(a, 400, "prompt: need an integer in [1, 1000000]\n");
        if (arg_u32(q, "gen", 1, &gen))
                return answer(a, 400, "gen: need an integer in [1, 1000000]\n");
        if ((uint64_t)prompt + gen > n->cfg.max_context) {
                a->status = 422;
                snprintf(a->body, sizeof a->body,
                         "prompt + gen: %u + %u tokens exceed the model's context of %u\n", prompt,
                         gen, n->cfg.max_context);
                return;
        }
        uint32_t pages = loom_harvest_kv_pages(&n->m, (uint64_t)prompt + gen);
        if (pages > n->g.mem.serving_cap) {
                a->status = 413;
                snprintf(a->body, sizeof a->body,
                         "prompt + gen: their KV (%u pages) exceeds what serving can ever hold on "
                         "this GPU (%u pages)\n",
                         pages, n->g.mem.serving_cap);
                return;
        }
        a->status = 200;
        a->generate = 1;
        a->prompt = prompt;
        a->gen = gen;
}

void hv_node_route(loom_harvest_node *n, const hv_node_ask *q, hv_node_answer *a)
{
        memset(a, 0, sizeof *a);
        if (strcmp(q->method, "GET"))
                return answer(a, 405, "GET only\n");
        if (!strcmp(q->url, "/v1/generate"))
                return route_generate(n, q, a);
        int weights = !strcmp(q->url, "/v1/weights");
        if (weights) {
                if (!n->wl)
                        return answer(a, 404, "this node has no weights (--weights)\n");
                const char *h = q->arg(q->ctx, "hold");
                if (h && strcmp(h, "0") && strcmp(h, "1"))
                        return answer(a, 400, "hold: need 0 or 1\n");
                if (h)
                        loom_harvest_wlive_hold(n->wl, *h == '1');
        }
        if (weights || !strcmp(q->url, "/v1/stats")) {
                loom_harvest_node_stats s;
                loom_harvest_node_stats_get(n, &s);
                a->status = 200;
                loom_harvest_node_stats_json(&s, n->wl != NULL, a->body, sizeof a->body);
                return;
        }
        answer(a, 404, "not found\n");
}

/* Hand an accepted request to the executor and stream its two lines as they happen. */
static enum MHD_Result generate(loom_harvest_node *n, struct MHD_Connection *c, uint32_t prompt,
                                uint32_t gen)
{
        live_req *q = calloc(1, sizeof *q);
        if (!q)
                return MHD_NO;
        q->n = n;
        q->gen = gen;
        q->refs = 2; /* the connection and the engine */
        pthread_mutex_lock(&n->mu);
        loom_us now = emu_now(n);
        q->arr = now;
        if (n->late_since == LOOM_HARVEST_INF && !hv_engine_busy(&n->g))
                n->late_since = now; /* an idle executor should start on it now */
        q->lag_arr = q->lag_first = lag_at(n, now);
        hv_sreq r = {.id = n->next_id++, .arr = now, .prompt = prompt, .gen = gen, .user = q};
        int rc;
        if (n->cfg.role == LOOM_HARVEST_DECODE) {
                q->first = 1;
                q->t_first = now;
                r.first = r.last = now;
                r.done = 1;
                rc = hv_engine_submit_decode(&n->g, now, &r);
        } else {
                rc = hv_engine_submit_prefill(&n->g, now, &r);
        }
        if (rc)
                q->refs = 1;
        sync_pool(n);
        pthread_cond_signal(&n->cv_exec);
        pthread_mutex_unlock(&n->mu);
        if (rc) {
                free(q);
                return reply(c, 503, "out of memory\n");
        }
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64, stream, q, stream_free);
        if (!resp) {
                stream_free(q);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
}

static const char *mhd_arg(void *ctx, const char *key)
{
        return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, key);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
        loom_harvest_node *n = cls;
        hv_node_ask q = {.method = method, .url = url, .arg = mhd_arg, .ctx = c};
        hv_node_answer a;
        hv_node_route(n, &q, &a);
        return a.generate ? generate(n, c, a.prompt, a.gen) : reply(c, a.status, a.body);
}

/* ---- lifecycle ---------------------------------------------------------------------------------
 */

void loom_harvest_node_defaults(loom_harvest_node_cfg *c)
{
        *c = (loom_harvest_node_cfg){.pair = "7b",
                                     .role = LOOM_HARVEST_COLOCATED,
                                     .admit = LOOM_HARVEST_ADMIT_DUAL,
                                     .speed = 1,
                                     .lease_s = 10,
                                     .stall_s = 2,
                                     .rollouts = 16,
                                     .turn_prompt = 1000,
                                     .turn_resp = 300,
                                     .turns = 8,
                                     .step_s = 30,
                                     .max_context = 32768,
                                     .weights_elems = UINT64_C(4) << 20,
                                     .weights_shards = 8,
                                     .weights_poll_s = 0.2};
}

void loom_harvest_node_hold(loom_harvest_node *n, int hold)
{
        if (n->wl)
                loom_harvest_wlive_hold(n->wl, hold);
}

void loom_harvest_node_stats_get(loom_harvest_node *n, loom_harvest_node_stats *s)
{
        pthread_mutex_lock(&n->mu);
        n->st.cuts = n->g.mem.cuts;
        n->st.stalls = n->g.stalls;
        n->st.pages = n->g.mem.cfg.pages;
        n->st.budget = n->g.mem.budget;
        n->st.busy_serving_s = loom_us_to_s(n->g.busy_serving);
        n->st.busy_rollout_s = loom_us_to_s(n->g.busy_rollout);
        n->st.host_lag_s = loom_us_to_s(lag_at(n, emu_now(n)));
        if (n->wl) {
                loom_harvest_wlive_stats_get(n->wl, &n->st.w);
                n->st.version = (uint32_t)n->st.w.version;
                n->st.policy_version = (uint32_t)n->st.w.latest;
        }
        n->st.routable = n->st.policy_version - n->st.version <= n->cfg.staleness &&
                         (!n->wl || n->st.version > 0);
        *s = n->st;
        pthread_mutex_unlock(&n->mu);
}

uint16_t loom_harvest_node_port(const loom_harvest_node *n)
{
        return n->port;
}

static int check(const loom_harvest_node_cfg *c, loom_err *e)
{
        if (c->role != LOOM_HARVEST_COLOCATED && c->role != LOOM_HARVEST_DECODE)
                return loom_err_set(e, LOOM_EINVAL, "role", "must be colocated or decode");
        if (!(c->speed > 0 && c->speed <= 10000))
                return loom_err_set(e, LOOM_EINVAL, "speed", "must be in (0, 10000]");
        if (c->turn_prompt == 0 || c->turn_resp == 0 || c->turns == 0)
                return loom_err_set(e, LOOM_EINVAL, "turn",
                                    "prompt, response and turns must be "
                                    "positive");
        if (!(c->stall_s > 0) || !(c->lease_s >= 0))
                return loom_err_set(e, LOOM_EINVAL, "stall", "stall must be > 0, lease >= 0");
        if (!(c->step_s >= 0.01))
                return loom_err_set(e, LOOM_EINVAL, "step-s", "must be at least 0.01 s");
        if (c->max_context == 0)
                return loom_err_set(e, LOOM_EINVAL, "max-context", "must be at least 1 token");
        if (!(c->noise >= 0 && c->noise < 1))
                return loom_err_set(e, LOOM_EINVAL, "noise", "must be in [0, 1)");
        return 0;
}

int loom_harvest_node_start(const loom_harvest_node_cfg *c, loom_harvest_node **out, loom_err *e)
{
        int rc = check(c, e);
        if (rc)
                return rc;
        loom_harvest_node *n = calloc(1, sizeof *n);
        if (!n)
                return loom_err_set(e, LOOM_ENOMEM, "node", "out of memory");
        n->cfg = *c;
        n->cfg.weights_key = NULL; /* wlive keeps its own copy; the caller's may go away */
        pthread_mutex_init(&n->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&n->cv_exec, &ca);
        pthread_condattr_destroy(&ca);
        pthread_cond_init(&n->cv_req, NULL);
        rc = loom_harvest_model_preset(c->pair, &n->m, e);
        if (rc)
                goto fail;
        double dev = n->m.hbm_bytes * n->m.tp;
        uint32_t pages = c->pages
                             ? c->pages
                             : (uint32_t)((0.9 * dev - 2 * n->m.weight_bytes) / LOOM_HARVEST_PAGE);
        uint32_t head = c->pages ? c->headroom_pages : (uint32_t)(0.2 * dev / LOOM_HARVEST_PAGE);
        loom_harvest_mem_cfg mc = {.pages = pages,
                                   .headroom_pages = head,
                                   .watermark = 0.5,
                                   .lease = loom_us_from_s(c->lease_s),
                                   .preempt = 1};
        hv_policy pol = {.admit = c->admit,
                         .chunk = 512,
                         .prefix_cache = 1,
                         .prefill_batch_tokens = 8192,
                         .sound = c->admit == LOOM_HARVEST_ADMIT_DUAL && !c->plain_admission,
                         .est_err = HV_EST_ERR};
        hv_callbacks cb = {.arg = n,
                           .prefilled = cb_prefilled,
                           .served = cb_served,
                           .turn_done = cb_turn_done,
                           .turn_aborted = cb_turn_aborted};
        int big = n->m.tp > 1;
        loom_us ttft = loom_us_from_s((c->ttft_ms > 0 ? c->ttft_ms : big ? 1000 : 500) / 1e3);
        loom_us tpot = loom_us_from_s((c->tpot_ms > 0 ? c->tpot_ms : big ? 500 : 150) / 1e3);
        rc = hv_engine_init(&n->g, 0, c->role, &n->m, &pol, &mc, ttft, tpot,
                            loom_us_from_s(c->stall_s), &cb, e);
        if (rc)
                goto fail;
        hv_engine_rl_step(&n->g);
        loom_harvest_router_cfg rcfg = {.dedicated_cap = 16,
                                        .serving_cap = c->rollouts ? c->rollouts : 1,
                                        .affinity = 1,
                                        .heartbeat_timeout = 5 * LOOM_US_PER_S,
                                        .max_staleness = c->staleness};
        if ((rc = loom_harvest_router_new(&rcfg, &n->r, e)))
                goto fail;
        loom_harvest_router_add(n->r, LOOM_HARVEST_W_SERVING, 0);
        if ((rc = loom_harvest_pool_new(pages, LOOM_HARVEST_PAGE, &n->pool, e)))
                goto fail;
        n->vp[0] = malloc(pages * sizeof(uint32_t));
        n->vp[1] = malloc(pages * sizeof(uint32_t));
        if (!n->vp[0] || !n->vp[1]) {
                rc = loom_err_set(e, LOOM_ENOMEM, "node", "out of memory");
                goto fail;
        }
        if (c->weights) {
                loom_harvest_wlive_cfg wc = {.elems = c->weights_elems,
                                             .shards = c->weights_shards,
                                             .model = c->weights_model,
                                             .poll_s = c->weights_poll_s,
                                             .timeout_s = 10,
                                             .key = c->weights_key,
                                             .unkeyed = c->weights_unkeyed};
                char ip[64];
                if ((rc = loom_harvest_wlive_addr(c->weights, ip, sizeof ip, &wc.port, e)))
                        goto fail;
                wc.ip = ip;
                if ((rc = loom_harvest_wlive_start(&wc, &n->wl, e)))
                        goto fail;
        }
        clock_gettime(CLOCK_MONOTONIC, &n->wall0);
        n->late_since = LOOM_HARVEST_INF;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(c->port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        n->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD,
                                  c->port, NULL, NULL, on_request, n, MHD_OPTION_SOCK_ADDR, &sa,
                                  MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096,
                                  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                  MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024, MHD_OPTION_END);
        if (!n->mhd) {
                rc = loom_err_set(e, LOOM_EIO, "port", "cannot listen on 127.0.0.1:%u", c->port);
                goto fail;
        }
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(n->mhd, MHD_DAEMON_INFO_BIND_PORT);
        n->port = di ? di->port : c->port;
        if (pthread_create(&n->exec, NULL, exec_main, n)) {
                rc = loom_err_set(e, LOOM_EIO, "node", "cannot start the executor thread");
                goto fail;
        }
        n->exec_started = 1;
        *out = n;
        return 0;
fail:
        loom_harvest_node_stop(n);
        return rc;
}

void loom_harvest_node_stop(loom_harvest_node *n)
{
        if (!n)
                return;
        pthread_mutex_lock(&n->mu);
        n->stop = 1;
        pthread_cond_broadcast(&n->cv_exec);
        pthread_cond_broadcast(&n->cv_req);
        pthread_mutex_unlock(&n->mu);
        if (n->mhd)
                MHD_stop_daemon(n->mhd); /* joins the connection threads */
        if (n->exec_started)
                pthread_join(n->exec, NULL);
        loom_harvest_wlive_stop(n->wl);
        /* requests still inside the engine hold one reference each */
        for (size_t i = n->g.pq_head; i < n->g.pq_n; i++)
                free(n->g.pq[i].user);
        for (size_t i = 0; i < n->g.ndec; i++)
                free(n->g.dec[i].user);
        for (size_t i = 0; i < n->g.ndwait; i++)
                free(n->g.dwait[i].user);
        hv_engine_fini(&n->g);
        loom_harvest_router_free(n->r);
        loom_harvest_pool_free(n->pool);
        free(n->vp[0]);
        free(n->vp[1]);
        free(n->turn_of);
        free(n->ver_of);
        pthread_cond_destroy(&n->cv_exec);
        pthread_cond_destroy(&n->cv_req);
        pthread_mutex_destroy(&n->mu);
        free(n);
}
