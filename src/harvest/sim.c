/*
 * sim.c - `loom harvest sim`: a serving trace on PD-disaggregated serving instances plus an
 * agentic multi-turn RL job, on a virtual clock.
 *
 * Every GPU is an hv_engine (engine.c), the same executor `loom harvest node` runs; turns go
 * through the router (router.c); the borrowed GPUs are chosen by loom_harvest_setup after a
 * serving-only warm-up. GPU time is simulated from the latency models (latency.c): nothing
 * here runs on a GPU. Events: request arrivals, end of a GPU iteration, a trajectory's turn
 * becoming ready after its environment step, the start of an RL step, a closed worker
 * reopening.
 *
 * The RL job: `steps` synchronous steps; each rolls out `batch` prompts sampled `group` times
 * each (batch x group trajectories; a group shares its prompt), then trains for train_s while
 * borrowed GPUs serve only. A trajectory has 2-32 turns; its prompt grows by each response and
 * observation; responses are log-normal (long tail, capped); environment steps take 0.5-3 s.
 * Trajectories are drawn from (seed, step, index) only, so every policy rolls out the same work.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "sim_int.h"

enum { E_ARRIVE, E_GPU, E_TURN, E_STEP, E_DRAIN, E_WEIGHTS, E_WAKE };

typedef struct ev {
        loom_us t;
        uint64_t seq;
        uint32_t kind, a;
} ev;

#define MAX_TURNS 32
#define HV_MAX_TRAJ 1048576u /* trajectories per step */
typedef struct trj {
        uint32_t turns, k, prompt;
        uint32_t resp[MAX_TURNS], obs[MAX_TURNS];
        loom_us env[MAX_TURNS];
        int done;
        int queued;     /* in a queue (entries of routed turns are dropped when met) */
        int impatient;  /* waited for its prefix's worker as long as a re-prefill costs */
        int in_pending; /* has an entry in the queue for any slot (at most one) */
} trj;

#define GAP_BIN 100 /* us */
#define GAP_BINS 1200000

typedef struct wqueue {
        uint32_t *q;
        size_t n, cap;
} wqueue;

typedef struct sim {
        const loom_harvest_sim_cfg *cfg;
        uint32_t ntraj; /* trajectories per step: batch prompts x group samples */
        hv_flags fl;
        loom_harvest_model m;
        loom_us b_ttft, b_tpot;
        hv_engine *g;
        uint32_t ng, nprefill, nserving; /* engines: prefill, decode, then dedicated */
        uint32_t *worker_of, *engine_of;
        loom_harvest_router *r;
        ev *heap;
        size_t nheap, capheap;
        uint64_t seq;
        /* serving */
        size_t next_req;
        uint64_t cycle;
        loom_us period, warmup, end;
        int arrivals_on;
        double *ttft, *tpot;
        size_t nserved, capserved;
        uint64_t attained;
        uint32_t *gaps;
        uint64_t ngaps;
        /* RL job */
        trj *t;
        uint32_t step, remaining, *pending; /* turns waiting for a slot anywhere */
        size_t npending, cappending;
        wqueue *wq; /* per router worker: turns waiting for a slot there */
        loom_us last_drain_at;
        loom_us step_start;
        double rollout_sum;
        uint32_t steps_done;
        int job_done;
        loom_us job_start;
        double preempted_gpu_s;
        uint64_t turns, turns_on_serving, hits, aborted, stalls, evictions;
        double route_sum, route_max;
        uint64_t routes;
        uint32_t rhist[10000]; /* routing decision times, 0.1 us bins */
        int oom;
} sim;

/* ---- event heap ------------------------------------------------------------------------ */

static int before(const ev *a, const ev *b)
{
        return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(sim *s, loom_us t, uint32_t kind, uint32_t a)
{
        if (loom_reserve(&s->heap, &s->capheap, s->nheap + 1, sizeof *s->heap, 1024)) {
                s->oom = 1;
                return;
        }
        size_t i = s->nheap++;
        ev x = {t, s->seq++, kind, a};
        while (i > 0 && before(&x, &s->heap[(i - 1) / 2])) {
                s->heap[i] = s->heap[(i - 1) / 2];
                i = (i - 1) / 2;
        }
        s->heap[i] = x;
}

static ev pop(sim *s)
{
        ev top = s->heap[0], x = s->heap[--s->nheap];
        size_t i = 0, n = s->nheap;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= n)
                        break;
                if (c + 1 < n && before(&s->heap[c + 1], &s->heap[c]))
                        c++;
                if (!before(&s->heap[c], &x))
                        break;
                s->heap[i] = s->heap[c];
                i = c;
        }
        if (n > 0)
                s->heap[i] = x;
        return top;
}

/* A drain at t (a worker reopens then). Failures at one instant all ask for the same t:
 * one event serves them (else every refused turn adds one, and each drain refuses more). */
static void drain_at(sim *s, loom_us t)
{
        if (t == s->last_drain_at)
                return;
        s->last_drain_at = t;
        push(s, t, E_DRAIN, 0);
}

/* ---- randomness: a pure function of (seed, keys) -------------------------------------- */

static double unif(uint64_t *st)
{
        *st = loom_mix64(*st);
        return (double)(*st >> 11) / 9007199254740992.0;
}

static double normal(uint64_t *st)
{
        double u = unif(st), v = unif(st);
        return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

static void make_trajectory(const sim *s, uint32_t step, uint32_t i, trj *t)
{
        uint64_t gst =
            loom_mix64(s->cfg->seed ^ loom_mix64(((uint64_t)step << 32) | (i / s->cfg->group)));
        uint64_t st =
            loom_mix64(s->cfg->seed ^ loom_mix64(((uint64_t)step << 32) | i) ^ 0x5bd1e995);
        memset(t, 0, sizeof *t);
        t->prompt = 600 + (uint32_t)(unif(&gst) * 800); /* the group's shared task prompt */
        uint32_t turns = 2;
        while (turns < MAX_TURNS && unif(&st) < 0.85)
                turns++;
        t->turns = turns;
        for (uint32_t k = 0; k < turns; k++) {
                double r = exp(log(300.0) + 1.0 * normal(&st));
                t->resp[k] = r < 16 ? 16 : r > 8192 ? 8192 : (uint32_t)r;
                t->obs[k] = 200 + (uint32_t)(unif(&st) * 400);
                t->env[k] = loom_us_from_s(0.5 + 2.5 * unif(&st));
        }
}

/* ---- serving ---------------------------------------------------------------------------- */

/* An iteration takes its modelled time, or with cfg->noise a seeded uniform error of up to
 * +-noise around it, which the engine's admission does not see (latency-model error). */
static void kick(sim *s, uint32_t gi, loom_us now)
{
        hv_engine *g = &s->g[gi];
        if (hv_engine_busy(g) || !hv_engine_next(g, now))
                return;
        loom_us d = hv_noisy(g->cur.dur, s->cfg->noise, s->cfg->seed, gi, g->cur.seq);
        push(s, now + (d > 0 ? d : 1), E_GPU, gi);
}

static loom_us arrival_of(const sim *s, size_t i, uint64_t cycle)
{
        double a = (double)s->cfg->trace->reqs[i].arrival / s->cfg->density;
        return (loom_us)(cycle * (uint64_t)s->period) + (loom_us)a;
}

static void schedule_arrival(sim *s)
{
        const loom_harvest_trace *tr = s->cfg->trace;
        if (s->next_req >= tr->n) {
                if (s->cfg->steps == 0)
                        return; /* one pass of the trace */
                s->next_req = 0;
                s->cycle++;
        }
        loom_us t = arrival_of(s, s->next_req, s->cycle);
        if (s->cfg->duration_s > 0 && t > loom_us_from_s(s->cfg->duration_s))
                return;
        push(s, t, E_ARRIVE, (uint32_t)s->next_req);
}

static void on_arrive(sim *s, loom_us now, uint32_t i)
{
        s->next_req = i + 1;
        if (!s->arrivals_on)
                return;
        const loom_harvest_req *q = &s->cfg->trace->reqs[i];
        uint32_t best = 0;
        for (uint32_t k = 1; k < s->nprefill; k++)
                if (hv_engine_serving_load(&s->g[k]) < hv_engine_serving_load(&s->g[best]))
                        best = k;
        hv_sreq r = {.id = i, .arr = now, .prompt = q->prompt, .gen = q->gen};
        if (hv_engine_submit_prefill(&s->g[best], now, &r))
                s->oom = 1;
        kick(s, best, now);
        schedule_arrival(s);
}

static void cb_prefilled(void *arg, loom_us now, const hv_sreq *r)
{
        sim *s = arg;
        uint32_t best = s->nprefill;
        for (uint32_t k = s->nprefill + 1; k < s->nserving; k++)
                if (hv_engine_serving_load(&s->g[k]) < hv_engine_serving_load(&s->g[best]))
                        best = k;
        if (hv_engine_submit_decode(&s->g[best], now, r))
                s->oom = 1;
        kick(s, best, now);
}

static void cb_token(void *arg, loom_us gap)
{
        sim *s = arg;
        uint64_t b = (uint64_t)gap / GAP_BIN;
        s->gaps[b < GAP_BINS ? b : GAP_BINS - 1]++;
        s->ngaps++;
}

static void cb_served(void *arg, loom_us now, const hv_sreq *r)
{
        sim *s = arg;
        if (r->arr < s->warmup)
                return;
        size_t cap = s->capserved;
        if (loom_reserve(&s->ttft, &cap, s->nserved + 1, sizeof *s->ttft, 4096) ||
            loom_reserve(&s->tpot, &s->capserved, s->nserved + 1, sizeof *s->tpot, 4096)) {
                s->oom = 1;
                return;
        }
        double ttft = (double)(r->first - r->arr) / 1e3;
        double tpot = r->gen > 1 ? (double)(now - r->first) / 1e3 / (r->gen - 1) : 0;
        s->ttft[s->nserved] = ttft;
        s->tpot[s->nserved] = tpot;
        s->nserved++;
        if (ttft <= (double)s->b_ttft / 1e3 && tpot <= (double)s->b_tpot / 1e3)
                s->attained++;
}

/* ---- rollouts --------------------------------------------------------------------------- */

static void route_turn(sim *s, loom_us now, uint32_t i);

/* Route queued turns again, in FIFO order. A turn that waits for no particular worker needs a
 * free slot anywhere, so once the router has none left the rest of the queue stays as it is:
 * a call costs the turns it places, not the length of the queue (most of the batch at
 * 256 x 16). A turn that waits for one worker (its prefix is there, or its pinned slot) sits
 * in that worker's queue, tried when the worker has room (a pinned slot: whenever it reopens). */
static void drain_queue(sim *s, loom_us now, uint32_t *q, size_t *np, uint32_t w)
{
        size_t n = *np, j = 0;
        uint32_t room = w != LOOM_HARVEST_NONE ? 1 : loom_harvest_router_room(s->r, now);
        uint32_t misses = 0;
        *np = 0;
        for (; j < n && room > 0; j++) { /* route_turn re-queues what still does not fit */
                if (w != LOOM_HARVEST_NONE && !s->fl.pinned &&
                    loom_harvest_router_wait_us(s->r, w) != 0) {
                        room = 0;
                        break;
                }
                if (w == LOOM_HARVEST_NONE)
                        s->t[q[j]].in_pending = 0;
                if (!s->t[q[j]].queued)
                        continue; /* routed meanwhile (a copy left in another queue) */
                uint64_t before = s->turns;
                route_turn(s, now, q[j]);
                if (w != LOOM_HARVEST_NONE)
                        continue;
                if (s->turns > before) {
                        room--;
                        misses = 0;
                } else if (++misses >= 4) {
                        j++; /* a GPU with slots but no memory (it refuses until turns end) */
                        break;
                } else {
                        room = loom_harvest_router_room(s->r, now);
                }
        }
        if (n > j)
                memmove(q + *np, q + j, (n - j) * sizeof *q);
        *np += n - j;
}

static void drain(sim *s, loom_us now)
{
        for (uint32_t w = 0; w < s->ng; w++)
                if (s->wq[w].n > 0)
                        drain_queue(s, now, s->wq[w].q, &s->wq[w].n, w);
        drain_queue(s, now, s->pending, &s->npending, LOOM_HARVEST_NONE);
}

static uint32_t gid(const sim *s, uint32_t i)
{
        return s->step * s->ntraj + i;
}

/* GPU time a turn costs more where its prefix is not: the whole context prefilled instead of
 * the new observation after the cached prefix (the holder keeps the last turn's prompt and
 * response). */
static loom_us move_cost(const sim *s, const trj *t)
{
        if (t->k == 0 || !s->fl.borrow)
                return 0; /* roll, the baseline, routes as before: a full holder is left */
        uint32_t obs = t->obs[t->k - 1], prefix = t->prompt - obs;
        return loom_harvest_t_prefill(&s->m, t->prompt, 0) -
               loom_harvest_t_prefill(&s->m, obs, prefix);
}

static void route_turn(sim *s, loom_us now, uint32_t i)
{
        trj *t = &s->t[i];
        loom_us move = t->impatient ? 0 : move_cost(s, t);
        t->queued = 0;
        for (uint32_t tries = 0; tries <= s->ng; tries++) {
                struct timespec a, b;
                int affine;
                clock_gettime(CLOCK_MONOTONIC, &a);
                uint32_t w = loom_harvest_router_route_cost(s->r, now, gid(s, i), move, &affine);
                clock_gettime(CLOCK_MONOTONIC, &b);
                double us =
                    (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
                s->route_sum += us;
                s->routes++;
                s->rhist[us < 999.9 ? (size_t)(us * 10) : 9999]++;
                if (us > s->route_max)
                        s->route_max = us;
                if (w == LOOM_HARVEST_NONE)
                        break;
                uint32_t gi = s->engine_of[w];
                int hit;
                int rc = hv_engine_submit_turn(&s->g[gi], now, gid(s, i), t->prompt, t->resp[t->k],
                                               &hit);
                if (rc == 0) {
                        t->impatient = 0;
                        s->turns++;
                        s->hits += hit;
                        if (gi < s->nserving)
                                s->turns_on_serving++;
                        kick(s, gi, now);
                        return;
                }
                /* no memory there now: give the turn back and keep that worker out a moment */
                loom_harvest_router_abort(s->r, gid(s, i));
                loom_harvest_router_close(s->r, w, now + s->g[gi].stall / 2);
                drain_at(s, now + s->g[gi].stall / 2);
                if (s->g[gi].role == LOOM_HARVEST_DEDICATED)
                        break; /* a dedicated GPU under its cap has memory; do not spin */
        }
        t->queued = 1;
        uint32_t ww = loom_harvest_router_waiting(s->r, gid(s, i));
        if (ww != LOOM_HARVEST_NONE) {
                wqueue *x = &s->wq[ww];
                if (loom_reserve(&x->q, &x->cap, x->n + 1, sizeof *x->q, 64)) {
                        s->oom = 1;
                        return;
                }
                x->q[x->n++] = i;
                /* waiting longer than the re-prefill would take makes moving the better bet */
                if (!s->fl.pinned && move > 0)
                        push(s, now + move, E_WAKE, i);
                return;
        }
        if (t->in_pending)
                return; /* an entry left there (it waited for a worker meanwhile) stands */
        if (loom_reserve(&s->pending, &s->cappending, s->npending + 1, sizeof *s->pending, 256)) {
                s->oom = 1;
                return;
        }
        t->in_pending = 1;
        s->pending[s->npending++] = i;
}

static void end_step(sim *s, loom_us now)
{
        s->rollout_sum += loom_us_to_s(now - s->step_start);
        s->steps_done++;
        int more = s->cfg->steps ? s->steps_done < s->cfg->steps : now < s->period;
        if (more) {
                push(s, now + loom_us_from_s(s->cfg->train_s), E_STEP, s->steps_done);
        } else {
                s->job_done = 1;
                s->end = now;
                s->arrivals_on = 0;
        }
}

static void cb_turn_done(void *arg, loom_us now, uint32_t traj, uint32_t gpu)
{
        sim *s = arg;
        loom_harvest_router_done(s->r, now, traj);
        uint32_t i = traj - s->step * s->ntraj;
        trj *t = &s->t[i];
        t->prompt += t->resp[t->k] + t->obs[t->k];
        t->k++;
        if (t->k < t->turns) {
                push(s, now + t->env[t->k - 1], E_TURN, i);
        } else {
                t->done = 1;
                loom_harvest_router_finish(s->r, traj);
                if (--s->remaining == 0)
                        end_step(s, now);
        }
        drain(s, now);
}

static void cb_turn_aborted(void *arg, loom_us now, uint32_t traj, uint32_t gpu, int why)
{
        sim *s = arg;
        loom_harvest_router_abort(s->r, traj);
        s->aborted++;
        if (why == HV_ABORT_STALL) {
                s->stalls++;
                loom_harvest_router_close(s->r, s->worker_of[gpu], now + s->g[gpu].stall);
                drain_at(s, now + s->g[gpu].stall);
        }
        route_turn(s, now, traj - s->step * s->ntraj);
}

static void cb_evicted(void *arg, loom_us now, uint32_t gpu, loom_us until)
{
        sim *s = arg;
        s->evictions++;
        s->preempted_gpu_s += loom_us_to_s(s->g[gpu].pol.reload) * s->m.tp;
        loom_harvest_router_close(s->r, s->worker_of[gpu], until);
        drain_at(s, until);
}

static int first_step(sim *s, loom_us now, loom_err *e)
{
        uint32_t nb = s->fl.borrow ? s->cfg->borrow / s->m.tp : 0;
        loom_harvest_gpu *gpus = calloc(s->nserving, sizeof *gpus);
        uint32_t *picked = calloc(nb + 1, sizeof *picked);
        if (!gpus || !picked) {
                free(gpus);
                free(picked);
                return loom_err_set(e, LOOM_ENOMEM, "sim", "out of memory");
        }
        for (uint32_t k = 0; k < s->nserving; k++)
                gpus[k] =
                    (loom_harvest_gpu){k, (double)s->g[k].serving_peak / s->g[k].mem.cfg.pages, -1};
        int n = loom_harvest_setup(gpus, s->nserving, 1, s->cfg->rl_gpus, nb, picked, e);
        if (n < 0) {
                free(gpus);
                free(picked);
                return n;
        }
        for (uint32_t k = s->nserving; k < s->ng; k++) {
                int w = loom_harvest_router_add(s->r, LOOM_HARVEST_W_DEDICATED, now);
                s->worker_of[k] = (uint32_t)w;
                s->engine_of[w] = k;
        }
        /* a borrowed GPU activates its resident rollout model once (<= 5 s, ROSE §6.1) */
        loom_us act = 5 * LOOM_US_PER_S;
        for (int j = 0; j < n; j++) {
                int w = loom_harvest_router_add(s->r, LOOM_HARVEST_W_SERVING, now);
                s->worker_of[picked[j]] = (uint32_t)w;
                s->engine_of[w] = picked[j];
                loom_harvest_router_close(s->r, (uint32_t)w, now + act);
                s->preempted_gpu_s += loom_us_to_s(act) * s->m.tp;
        }
        if (n > 0)
                drain_at(s, now + act);
        free(gpus);
        free(picked);
        return 0;
}

static void on_step(sim *s, loom_us now, uint32_t step)
{
        s->step = step;
        s->step_start = now;
        s->remaining = s->ntraj;
        loom_harvest_router_set_version(s->r, step);
        /* dedicated GPUs get the weights in the training cluster's sync; borrowed ones over the
         * cross-cluster link (src/sync), weights_s after the step starts when that is slower
         * than training */
        int late = s->cfg->weights_s > 0 && step > 0;
        for (uint32_t k = 0; k < s->ng; k++) {
                uint32_t w = s->worker_of[k];
                if (w == LOOM_HARVEST_NONE)
                        continue;
                int serving = k < s->nserving;
                loom_harvest_router_heartbeat(s->r, w, now, serving && late ? step - 1 : step);
        }
        if (late)
                push(s, now + loom_us_from_s(s->cfg->weights_s), E_WEIGHTS, step);
        for (uint32_t k = 0; k < s->nserving; k++)
                hv_engine_rl_step(&s->g[k]);
        for (uint32_t i = 0; i < s->ntraj; i++) {
                make_trajectory(s, step, i, &s->t[i]);
                push(s, now, E_TURN, i);
        }
}

/* ---- set-up and results ----------------------------------------------------------------- */

static int build(sim *s, loom_err *e)
{
        const loom_harvest_sim_cfg *c = s->cfg;
        uint32_t tp = s->m.tp;
        if (c->serving_gpus % tp || c->rl_gpus % tp || c->borrow % tp)
                return loom_err_set(e, LOOM_EINVAL, "gpus",
                                    "GPU counts must be multiples of the instance size %u", tp);
        s->nserving = c->serving_gpus / tp;
        if (s->nserving < 2)
                return loom_err_set(e, LOOM_EINVAL, "serving-gpus",
                                    "need at least 2 instances (one prefill, one decode)");
        s->nprefill = (s->nserving + 3) / 4; /* prefill:decode 1:3 */
        uint32_t nded = c->rl_gpus / tp;
        s->ng = s->nserving + nded;
        s->g = calloc(s->ng, sizeof *s->g);
        s->worker_of = malloc(s->ng * sizeof *s->worker_of);
        s->engine_of = malloc(s->ng * sizeof *s->engine_of);
        s->ntraj = c->batch * c->group;
        s->t = calloc(s->ntraj, sizeof *s->t);
        s->gaps = calloc(GAP_BINS, sizeof *s->gaps);
        s->wq = calloc(s->ng, sizeof *s->wq);
        if (!s->g || !s->worker_of || !s->engine_of || !s->t || !s->gaps || !s->wq)
                return loom_err_set(e, LOOM_ENOMEM, "sim", "out of memory");
        hv_callbacks cb = {.arg = s,
                           .prefilled = cb_prefilled,
                           .token = cb_token,
                           .served = cb_served,
                           .turn_done = cb_turn_done,
                           .turn_aborted = cb_turn_aborted,
                           .evicted = cb_evicted};
        double dev = s->m.hbm_bytes * tp, act = 0.1 * dev;
        uint32_t shared = (uint32_t)((dev - act - 2 * s->m.weight_bytes) / LOOM_HARVEST_PAGE);
        uint32_t alone = (uint32_t)((dev - act - s->m.weight_bytes) / LOOM_HARVEST_PAGE);
        hv_policy sp = {.admit = s->fl.admit,
                        .chunk = s->fl.chunk,
                        .prefix_cache = s->fl.prefix_cache,
                        .serverless = s->fl.serverless,
                        .evict_cost = LOOM_US_PER_S,
                        .cooldown = 10 * LOOM_US_PER_S,
                        .reload = 20 * LOOM_US_PER_S,
                        .prefill_batch_tokens = 8192,
                        .sound = s->fl.sound && s->fl.admit == LOOM_HARVEST_ADMIT_DUAL,
                        .est_err = HV_EST_ERR};
        hv_policy dp = sp;
        dp.admit = LOOM_HARVEST_ADMIT_DUAL;
        dp.chunk = 512;
        dp.prefix_cache = 1;
        dp.serverless = 0;
        loom_harvest_mem_cfg ms = {.pages = shared,
                                   .headroom_pages =
                                       (uint32_t)(c->headroom * dev / LOOM_HARVEST_PAGE),
                                   .watermark = 0.5,
                                   .lease = loom_us_from_s(c->lease_s),
                                   .preempt = s->fl.preempt};
        loom_harvest_mem_cfg md = {.pages = alone,
                                   .headroom_pages = 0,
                                   .watermark = 0.5,
                                   .lease = loom_us_from_s(c->lease_s),
                                   .preempt = 1};
        loom_us stall = loom_us_from_s(c->stall_s);
        for (uint32_t k = 0; k < s->ng; k++) {
                loom_harvest_role role = k < s->nprefill   ? LOOM_HARVEST_PREFILL
                                         : k < s->nserving ? LOOM_HARVEST_DECODE
                                                           : LOOM_HARVEST_DEDICATED;
                int rc = hv_engine_init(&s->g[k], k, role, &s->m,
                                        role == LOOM_HARVEST_DEDICATED ? &dp : &sp,
                                        role == LOOM_HARVEST_DEDICATED ? &md : &ms, s->b_ttft,
                                        s->b_tpot, stall, &cb, e);
                if (rc)
                        return rc;
                s->worker_of[k] = LOOM_HARVEST_NONE;
        }
        loom_harvest_router_cfg rc = {.dedicated_cap = 16 * tp,
                                      .serving_cap = 16 * tp,
                                      .affinity = s->fl.affinity,
                                      .pinned = s->fl.pinned,
                                      .heartbeat_timeout = 5 * LOOM_US_PER_S,
                                      .max_staleness = c->staleness};
        return loom_harvest_router_new(&rc, &s->r, e);
}

static double gap_pct(const sim *s, double p)
{
        if (s->ngaps == 0)
                return 0;
        uint64_t want = (uint64_t)ceil(p * (double)s->ngaps), acc = 0;
        for (size_t b = 0; b < GAP_BINS; b++) {
                acc += s->gaps[b];
                if (acc >= want)
                        return (double)(b + 1) * GAP_BIN / 1e3; /* bin upper edge */
        }
        return (double)GAP_BINS * GAP_BIN / 1e3;
}

static void teardown(sim *s)
{
        for (uint32_t k = 0; s->g && k < s->ng; k++)
                hv_engine_fini(&s->g[k]);
        free(s->g);
        free(s->worker_of);
        free(s->engine_of);
        free(s->t);
        free(s->gaps);
        free(s->heap);
        free(s->ttft);
        free(s->tpot);
        free(s->pending);
        for (uint32_t w = 0; s->wq && w < s->ng; w++)
                free(s->wq[w].q);
        free(s->wq);
        loom_harvest_router_free(s->r);
}

void loom_harvest_sim_defaults(loom_harvest_sim_cfg *c)
{
        *c = (loom_harvest_sim_cfg){.policy = LOOM_HARVEST_ROSE,
                                    .pair = "7b",
                                    .density = 1,
                                    .serving_gpus = 16,
                                    .borrow = 16,
                                    .rl_gpus = 8,
                                    .steps = 5,
                                    .batch = 256,
                                    .group = 16,
                                    .train_s = 60,
                                    .lease_s = 10,
                                    .headroom = 0.2,
                                    .stall_s = 2,
                                    .seed = 1};
}

static int check_cfg(const loom_harvest_sim_cfg *c, loom_err *e)
{
        if (!c->trace || c->trace->n == 0)
                return loom_err_set(e, LOOM_EINVAL, "trace", "no requests");
        if (!(c->density > 0 && c->density <= 1000))
                return loom_err_set(e, LOOM_EINVAL, "density", "must be in (0, 1000]");
        if (c->borrow > c->serving_gpus)
                return loom_err_set(e, LOOM_EINVAL, "borrow", "%u exceeds the %u serving GPUs",
                                    c->borrow, c->serving_gpus);
        if (c->rl_gpus == 0)
                return loom_err_set(e, LOOM_EINVAL, "rl-gpus", "must be at least 1");
        if (c->batch == 0)
                return loom_err_set(e, LOOM_EINVAL, "batch", "must be at least 1 prompt");
        if (c->group == 0)
                return loom_err_set(e, LOOM_EINVAL, "group", "must be at least 1 sample");
        if ((uint64_t)c->batch * c->group > HV_MAX_TRAJ)
                return loom_err_set(e, LOOM_EINVAL, "batch",
                                    "%u prompts x %u samples exceed %u trajectories per step",
                                    c->batch, c->group, HV_MAX_TRAJ);
        if (!(c->headroom >= 0 && c->headroom < 1))
                return loom_err_set(e, LOOM_EINVAL, "headroom", "must be in [0, 1)");
        if (!(c->noise >= 0 && c->noise < 1))
                return loom_err_set(e, LOOM_EINVAL, "noise", "must be in [0, 1)");
        if (!(c->weights_s >= 0))
                return loom_err_set(e, LOOM_EINVAL, "weights-s", "must be >= 0");
        if (!(c->stall_s > 0) || !(c->lease_s >= 0) || !(c->train_s >= 0))
                return loom_err_set(e, LOOM_EINVAL, "stall",
                                    "stall must be > 0; lease, train >= 0");
        return 0;
}

int loom_harvest_sim_run(const loom_harvest_sim_cfg *cfg, loom_harvest_sim_result *res, loom_err *e)
{
        int rc = check_cfg(cfg, e);
        if (rc)
                return rc;
        struct timespec w0, w1;
        clock_gettime(CLOCK_MONOTONIC, &w0);
        sim s = {.cfg = cfg};
        hv_policy_flags(cfg->policy, &s.fl);
        rc = loom_harvest_model_preset(cfg->pair, &s.m, e);
        if (rc)
                return rc;
        int big = s.m.tp > 1;
        s.b_ttft = loom_us_from_s((cfg->ttft_ms > 0 ? cfg->ttft_ms : big ? 1000 : 500) / 1e3);
        s.b_tpot = loom_us_from_s((cfg->tpot_ms > 0 ? cfg->tpot_ms : big ? 500 : 150) / 1e3);
        rc = build(&s, e);
        if (rc) {
                teardown(&s);
                return rc;
        }
        const loom_harvest_trace *tr = cfg->trace;
        s.period = (loom_us)((double)tr->reqs[tr->n - 1].arrival / cfg->density) + LOOM_US_PER_S;
        s.warmup = 60 * LOOM_US_PER_S;
        s.arrivals_on = 1;
        schedule_arrival(&s);
        push(&s, s.warmup, E_STEP, 0);
        loom_us now = 0;
        while (s.nheap > 0 && !s.oom) {
                ev x = pop(&s);
                now = x.t;
                switch (x.kind) {
                case E_ARRIVE:
                        on_arrive(&s, now, x.a);
                        break;
                case E_GPU:
                        hv_engine_finish(&s.g[x.a], now);
                        kick(&s, x.a, now);
                        break;
                case E_TURN:
                        if (!s.job_done)
                                route_turn(&s, now, x.a);
                        break;
                case E_STEP:
                        if (x.a == 0) {
                                s.job_start = now;
                                if ((rc = first_step(&s, now, e)))
                                        break;
                        }
                        on_step(&s, now, x.a);
                        break;
                case E_WEIGHTS:
                        for (uint32_t k = 0; k < s.nserving; k++)
                                if (s.worker_of[k] != LOOM_HARVEST_NONE)
                                        loom_harvest_router_heartbeat(s.r, s.worker_of[k], now,
                                                                      x.a);
                        drain(&s, now);
                        for (uint32_t k = 0; k < s.ng; k++)
                                kick(&s, k, now);
                        break;
                case E_WAKE:
                        if (!s.job_done && s.t[x.a].queued && !s.t[x.a].done &&
                            loom_harvest_router_waiting(s.r, gid(&s, x.a)) != LOOM_HARVEST_NONE) {
                                s.t[x.a].impatient = 1;
                                route_turn(&s, now, x.a);
                        }
                        break;
                case E_DRAIN:
                        drain(&s, now);
                        for (uint32_t k = 0; k < s.ng; k++)
                                kick(&s, k, now);
                        break;
                }
                if (rc)
                        break;
        }
        if (!rc && s.oom)
                rc = loom_err_set(e, LOOM_ENOMEM, "sim", "out of memory");
        if (!rc && !s.job_done)
                rc = loom_err_set(e, LOOM_ESTATE, "sim",
                                  "the RL job did not finish (%u of %u steps)", s.steps_done,
                                  cfg->steps);
        if (rc) {
                teardown(&s);
                return rc;
        }
        memset(res, 0, sizeof *res);
        res->policy = cfg->policy;
        res->rollout_s = s.steps_done ? s.rollout_sum / s.steps_done : 0;
        hv_latency_pcts(s.ttft, s.tpot, s.nserved, &res->ttft_p50_ms, &res->ttft_p99_ms,
                        &res->tpot_p50_ms, &res->tpot_p99_ms);
        res->itl_p50_ms = gap_pct(&s, 0.5);
        res->itl_p99_ms = gap_pct(&s, 0.99);
        res->serving_slo_attainment = s.nserved ? (double)s.attained / s.nserved : 1;
        uint32_t gpus_used = cfg->rl_gpus + (s.fl.borrow ? cfg->borrow : 0);
        double job_s = loom_us_to_s(s.end - s.job_start);
        res->preempted_gpu_time_frac = job_s > 0 ? s.preempted_gpu_s / (gpus_used * job_s) : 0;
        res->sim_s = loom_us_to_s(now);
        res->served = s.nserved;
        res->turns = s.turns;
        res->turns_on_serving = s.turns_on_serving;
        res->affinity_hits = s.hits;
        res->aborted = s.aborted;
        res->stalls = s.stalls;
        for (uint32_t k = 0; k < s.nserving; k++)
                res->cuts += s.g[k].mem.cuts;
        res->evictions = s.evictions;
        res->trajectories = (uint64_t)s.steps_done * s.ntraj;
        res->route_us_max = s.route_max;
        res->route_us_mean = s.routes ? s.route_sum / s.routes : 0;
        uint64_t want = (uint64_t)ceil(0.99 * (double)s.routes), acc = 0;
        for (size_t b = 0; b < 10000 && s.routes; b++)
                if ((acc += s.rhist[b]) >= want) {
                        res->route_us_p99 = (double)(b + 1) / 10;
                        break;
                }
        teardown(&s);
        clock_gettime(CLOCK_MONOTONIC, &w1);
        res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + (double)(w1.tv_nsec - w0.tv_nsec) / 1e9;
        return 0;
}
