/*
 * router.c - ROSE's elastic rollout router. Pure: time is an argument.
 *
 * The unit is a turn: between two turns a trajectory talks to its environment and holds no GPU,
 * so each turn is routed afresh. Order of preference for a turn:
 *   1. the worker that holds the trajectory's prefix KV (affinity), if it has room: a dedicated
 *      GPU below its concurrency cap, a serving GPU below its cap and not closed by a stall
 *      report or an emergency cut; if it is full, the turn waits for one of its slots when
 *      the expected wait (turns queued there + 1, times its mean turn time over its slots)
 *      is no longer than the GPU time of re-prefilling the prefix elsewhere (the caller's
 *      move cost), else it moves;
 *   2. the least-loaded dedicated GPU with room;
 *   3. the least-loaded eligible serving GPU (spill);
 *   4. none: the caller queues the turn and routes it again when capacity frees.
 * A worker is eligible only while its heartbeat is fresh and its weights are within the allowed
 * staleness. Pinned mode (a baseline) keeps a trajectory on its first worker for good, and in
 * one of that worker's slots from its first turn until it finishes (environment steps included),
 * as a rollout engine that runs whole trajectories does.
 * While the active trajectories fit in twice the slots, rose reserves a trajectory's slot on its
 * prefix worker between turns too (the step is bound by its longest trajectories, not by slots;
 * see reserving() below); with more, slots are lent between turns.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/harvest.h"

typedef struct worker {
        loom_harvest_worker_kind kind;
        uint32_t load, version;
        uint32_t waiting; /* turns waiting for a slot here (their prefix is here) */
        uint32_t idle;    /* trajectories between turns whose slot here is reserved */
        int alive;
        loom_us last_hb, closed_until;
        double turn_us; /* moving mean of its turn times (route to done), 0: none yet */
} worker;

typedef struct traj {
        uint32_t holder, running, pinned;
        uint32_t held;    /* pinned: the worker slot kept between turns, or NONE */
        uint32_t waiting; /* the worker whose slot it waits for, or NONE */
        uint32_t idle_on; /* between turns: the worker holding its prefix, or NONE */
        int active;       /* routed at least once and not finished */
        loom_us started;  /* its running turn was routed then */
} traj;

struct loom_harvest_router {
        loom_harvest_router_cfg cfg;
        worker *w;
        size_t nw, capw;
        traj *t;
        size_t nt, capt;
        uint32_t version;
        uint32_t active; /* trajectories routed at least once and not finished */
        int bound;       /* slots bound since active was last 0: turn-level slots */
};

int loom_harvest_router_new(const loom_harvest_router_cfg *cfg, loom_harvest_router **out,
                            loom_err *e)
{
        if (cfg->dedicated_cap == 0)
                return loom_err_set(e, LOOM_EINVAL, "dedicated_cap", "must be at least 1");
        if (cfg->heartbeat_timeout <= 0)
                return loom_err_set(e, LOOM_EINVAL, "heartbeat_timeout", "must be positive");
        loom_harvest_router *r = calloc(1, sizeof *r);
        if (!r)
                return loom_err_set(e, LOOM_ENOMEM, "router", "out of memory");
        r->cfg = *cfg;
        *out = r;
        return 0;
}

void loom_harvest_router_free(loom_harvest_router *r)
{
        if (!r)
                return;
        free(r->w);
        free(r->t);
        free(r);
}

int loom_harvest_router_add(loom_harvest_router *r, loom_harvest_worker_kind kind, loom_us now)
{
        if (r->nw >= LOOM_HARVEST_NONE - 1 ||
            loom_reserve(&r->w, &r->capw, r->nw + 1, sizeof *r->w, 16))
                return LOOM_ENOMEM;
        r->w[r->nw] = (worker){.kind = kind, .alive = 1, .last_hb = now, .version = r->version};
        return (int)r->nw++;
}

void loom_harvest_router_heartbeat(loom_harvest_router *r, uint32_t w, loom_us now,
                                   uint32_t version)
{
        if (w >= r->nw)
                return;
        r->w[w].last_hb = now;
        r->w[w].alive = 1;
        r->w[w].version = version;
}

void loom_harvest_router_set_version(loom_harvest_router *r, uint32_t version)
{
        r->version = version;
}

void loom_harvest_router_close(loom_harvest_router *r, uint32_t w, loom_us until)
{
        if (w < r->nw && until > r->w[w].closed_until)
                r->w[w].closed_until = until;
}

static traj *get(loom_harvest_router *r, uint32_t id)
{
        if (id >= r->nt) {
                if (loom_reserve(&r->t, &r->capt, (size_t)id + 1, sizeof *r->t, 256))
                        return NULL;
                for (size_t i = r->nt; i <= id; i++)
                        r->t[i] = (traj){LOOM_HARVEST_NONE,
                                         LOOM_HARVEST_NONE,
                                         LOOM_HARVEST_NONE,
                                         LOOM_HARVEST_NONE,
                                         LOOM_HARVEST_NONE,
                                         LOOM_HARVEST_NONE,
                                         0,
                                         0};
                r->nt = (size_t)id + 1;
        }
        return &r->t[id];
}

static int fresh(const loom_harvest_router *r, const worker *w)
{
        return r->version <= w->version || r->version - w->version <= r->cfg.max_staleness;
}

static uint32_t cap_of(const loom_harvest_router *r, const worker *w)
{
        return w->kind == LOOM_HARVEST_W_DEDICATED ? r->cfg.dedicated_cap : r->cfg.serving_cap;
}

/* Reservation while slots do not bind. As long as the active trajectories (routed at least once,
 * not finished) number at most HV_RESERVE x the slots of the live workers with usable weights
 * (closed ones included: a closure is temporary), the step is bound by its longest trajectories,
 * not by slots: a trajectory between turns keeps a slot reserved on the worker that holds its
 * prefix, as a pinned engine does, so the workers open first do not pile up trajectories whose
 * next turns then wait or re-prefill elsewhere. A queued turn gives its reservation up. Once
 * more are active, slots bind and are lent between turns (turn-level routing) until no
 * trajectory is active any more (the end of the step), so one step never mixes the two. */
#define HV_RESERVE 2
static void note_active(loom_harvest_router *r)
{
        uint64_t slots = 0;
        for (uint32_t i = 0; i < r->nw; i++)
                if (r->w[i].alive && fresh(r, &r->w[i]))
                        slots += cap_of(r, &r->w[i]);
        if (r->active > HV_RESERVE * slots)
                r->bound = 1;
}

static int reserving(const loom_harvest_router *r)
{
        return !r->cfg.pinned && !r->bound;
}

/* Slots taken on w, for trajectory t (NULL: any): running turns, plus, while reserving, the
 * trajectories between turns whose slot is there (t's own excepted). */
static uint32_t used(const loom_harvest_router *r, uint32_t id, const traj *t, int rsv)
{
        const worker *w = &r->w[id];
        if (!rsv)
                return w->load;
        return w->load + w->idle - (t && t->idle_on == id && w->idle > 0);
}

static int eligible_for(const loom_harvest_router *r, uint32_t id, const traj *t, int rsv,
                        loom_us now)
{
        const worker *w = &r->w[id];
        if (!w->alive || !fresh(r, w))
                return 0;
        if (used(r, id, t, rsv) >= cap_of(r, w))
                return 0;
        return w->kind == LOOM_HARVEST_W_DEDICATED || now >= w->closed_until;
}

static int eligible(const loom_harvest_router *r, uint32_t id, loom_us now)
{
        return eligible_for(r, id, NULL, 0, now);
}

static uint32_t least_loaded(const loom_harvest_router *r, loom_harvest_worker_kind kind,
                             const traj *t, int rsv, loom_us now)
{
        uint32_t best = LOOM_HARVEST_NONE;
        for (uint32_t i = 0; i < r->nw; i++)
                if (r->w[i].kind == kind && eligible_for(r, i, t, rsv, now) &&
                    (best == LOOM_HARVEST_NONE || used(r, i, t, rsv) < used(r, best, t, rsv)))
                        best = i;
        return best;
}

loom_us loom_harvest_router_wait_us(const loom_harvest_router *r, uint32_t w)
{
        if (w >= r->nw)
                return LOOM_HARVEST_INF;
        const worker *x = &r->w[w];
        uint32_t cap = cap_of(r, x);
        if (used(r, w, NULL, reserving(r)) < cap)
                return 0;
        if (x->turn_us <= 0 || cap == 0)
                return LOOM_HARVEST_INF; /* no turn has finished there yet: nothing to expect */
        return (loom_us)((double)(x->waiting + 1) * x->turn_us / cap);
}

static uint32_t spill_target(const loom_harvest_router *r, const traj *t, int rsv, loom_us now)
{
        uint32_t w = least_loaded(r, LOOM_HARVEST_W_DEDICATED, t, rsv, now);
        return w != LOOM_HARVEST_NONE ? w : least_loaded(r, LOOM_HARVEST_W_SERVING, t, rsv, now);
}

static void unreserve(loom_harvest_router *r, traj *t)
{
        if (t->idle_on != LOOM_HARVEST_NONE && r->w[t->idle_on].idle > 0)
                r->w[t->idle_on].idle--;
        t->idle_on = LOOM_HARVEST_NONE;
}

static uint32_t take(loom_harvest_router *r, traj *t, uint32_t w, loom_us now, int *affine)
{
        if (affine)
                *affine = t->holder == w;
        unreserve(r, t);
        r->w[w].load++;
        t->running = w;
        t->started = now;
        if (r->cfg.pinned)
                t->pinned = w;
        return w;
}

static void stop_waiting(loom_harvest_router *r, traj *t)
{
        if (t->waiting != LOOM_HARVEST_NONE && r->w[t->waiting].waiting > 0)
                r->w[t->waiting].waiting--;
        t->waiting = LOOM_HARVEST_NONE;
}

/* The cost model, for a turn whose prefix is on h (alive, fresh): staying costs the wait for
 * h to reopen if closed, plus the wait for a slot there (0 with room), moving costs the re-prefill
 * of the prefix (move_us of GPU time) on the least-loaded dedicated GPU with room, else serving
 * GPU. Stay when the wait is no longer than the re-prefill, or when nothing else has room anyway;
 * staying on a full h waits (NONE, and _waiting names h). */
static uint32_t stay_or_move(loom_harvest_router *r, traj *t, uint32_t h, int rsv, loom_us now,
                             loom_us move_us, int *affine)
{
        if (eligible_for(r, h, t, rsv, now))
                return take(r, t, h, now, affine);
        uint32_t w = spill_target(r, t, rsv, now);
        loom_us wait = loom_harvest_router_wait_us(r, h);
        if (now < r->w[h].closed_until && wait != LOOM_HARVEST_INF)
                wait += r->w[h].closed_until - now; /* closed (stall, refusal) until then */
        if (w != LOOM_HARVEST_NONE && wait > move_us)
                return take(r, t, w, now, affine);
        t->waiting = h;
        r->w[h].waiting++;
        return LOOM_HARVEST_NONE;
}

static uint32_t route(loom_harvest_router *r, traj *t, loom_us now, loom_us move_us, int *affine);

uint32_t loom_harvest_router_route_cost(loom_harvest_router *r, loom_us now, uint32_t id,
                                        loom_us move_us, int *affine)
{
        traj *t = get(r, id);
        if (affine)
                *affine = 0;
        if (!t || t->running != LOOM_HARVEST_NONE)
                return LOOM_HARVEST_NONE;
        uint32_t w = route(r, t, now, move_us, affine);
        if (w == LOOM_HARVEST_NONE)
                unreserve(r, t); /* queued now: its reserved slot goes to whoever comes first */
        return w;
}

static uint32_t route(loom_harvest_router *r, traj *t, loom_us now, loom_us move_us, int *affine)
{
        stop_waiting(r, t);
        if (!t->active) {
                t->active = 1;
                r->active++;
                note_active(r);
        }
        uint32_t w = LOOM_HARVEST_NONE;
        if (t->held != LOOM_HARVEST_NONE) { /* pinned: its slot waited through the env step */
                w = t->held;
                if (!r->w[w].alive || !fresh(r, &r->w[w]) || now < r->w[w].closed_until)
                        return LOOM_HARVEST_NONE;
                if (affine)
                        *affine = t->holder == w;
                t->running = w;
                t->started = now;
                return w;
        }
        if (r->cfg.pinned && t->pinned != LOOM_HARVEST_NONE && r->w[t->pinned].alive) {
                if (!eligible(r, t->pinned, now))
                        return LOOM_HARVEST_NONE; /* wait for its own worker */
                return take(r, t, t->pinned, now, affine);
        }
        uint32_t h = (r->cfg.affinity || r->cfg.pinned) ? t->holder : LOOM_HARVEST_NONE;
        int h_ok = h != LOOM_HARVEST_NONE && r->w[h].alive && fresh(r, &r->w[h]);
        int rsv = reserving(r);
        if (h_ok && move_us > 0)
                return stay_or_move(r, t, h, rsv, now, move_us, affine);
        if (h != LOOM_HARVEST_NONE && eligible_for(r, h, t, rsv, now))
                return take(r, t, h, now, affine); /* its prefix is there and so is a slot */
        w = spill_target(r, t, rsv, now);
        if (w == LOOM_HARVEST_NONE)
                return LOOM_HARVEST_NONE;
        return take(r, t, w, now, affine);
}

uint32_t loom_harvest_router_route(loom_harvest_router *r, loom_us now, uint32_t id, int *affine)
{
        return loom_harvest_router_route_cost(r, now, id, 0, affine);
}

static void release(loom_harvest_router *r, traj *t)
{
        if (t->running != LOOM_HARVEST_NONE && r->w[t->running].load > 0)
                r->w[t->running].load--;
        t->running = LOOM_HARVEST_NONE;
}

void loom_harvest_router_done(loom_harvest_router *r, loom_us now, uint32_t id)
{
        if (id >= r->nt || r->t[id].running == LOOM_HARVEST_NONE)
                return;
        traj *t = &r->t[id];
        worker *w = &r->w[t->running];
        double d = (double)(now - t->started);
        w->turn_us = w->turn_us > 0 ? 0.9 * w->turn_us + 0.1 * d : d;
        t->holder = t->running;
        if (r->cfg.pinned) { /* the trajectory keeps its slot until it finishes */
                t->held = t->running;
                t->running = LOOM_HARVEST_NONE;
                return;
        }
        release(r, t);
        if (r->cfg.affinity) { /* its slot there is reserved while slots do not bind */
                t->idle_on = t->holder;
                r->w[t->holder].idle++;
        }
}

void loom_harvest_router_finish(loom_harvest_router *r, uint32_t id)
{
        if (id >= r->nt)
                return;
        traj *t = &r->t[id];
        unreserve(r, t);
        if (t->active) {
                t->active = 0;
                if (--r->active == 0)
                        r->bound = 0;
        }
        if (t->held == LOOM_HARVEST_NONE)
                return;
        if (r->w[t->held].load > 0)
                r->w[t->held].load--;
        t->held = LOOM_HARVEST_NONE;
}

void loom_harvest_router_abort(loom_harvest_router *r, uint32_t id)
{
        if (id >= r->nt || r->t[id].running == LOOM_HARVEST_NONE)
                return;
        traj *t = &r->t[id];
        if (t->holder == t->running)
                t->holder = LOOM_HARVEST_NONE;
        t->held = LOOM_HARVEST_NONE; /* a pinned trajectory waits for a new slot on its worker */
        release(r, t);
}

void loom_harvest_router_forget(loom_harvest_router *r, uint32_t id, uint32_t w)
{
        if (id < r->nt && r->t[id].holder == w) {
                r->t[id].holder = LOOM_HARVEST_NONE;
                if (r->t[id].idle_on == w)
                        unreserve(r, &r->t[id]);
        }
}

size_t loom_harvest_router_check(loom_harvest_router *r, loom_us now, uint32_t *out, size_t cap)
{
        size_t n = 0;
        for (uint32_t i = 0; i < r->nw; i++) {
                worker *w = &r->w[i];
                if (!w->alive || now - w->last_hb <= r->cfg.heartbeat_timeout)
                        continue;
                w->alive = 0;
                for (size_t j = 0; j < r->nt; j++) {
                        traj *t = &r->t[j];
                        if (t->holder == i)
                                t->holder = LOOM_HARVEST_NONE;
                        if (t->pinned == i)
                                t->pinned = LOOM_HARVEST_NONE;
                        if (t->held == i)
                                t->held = LOOM_HARVEST_NONE;
                        if (t->waiting == i)
                                t->waiting = LOOM_HARVEST_NONE;
                        if (t->idle_on == i)
                                t->idle_on = LOOM_HARVEST_NONE;
                        if (t->running == i) {
                                release(r, t);
                                if (n < cap)
                                        out[n++] = (uint32_t)j;
                        }
                }
                w->load = 0;
                w->waiting = 0;
                w->idle = 0;
        }
        return n;
}

uint32_t loom_harvest_router_waiting(const loom_harvest_router *r, uint32_t id)
{
        if (id >= r->nt)
                return LOOM_HARVEST_NONE;
        return r->t[id].held != LOOM_HARVEST_NONE ? r->t[id].held : r->t[id].waiting;
}

uint32_t loom_harvest_router_room(const loom_harvest_router *r, loom_us now)
{
        uint32_t n = 0;
        int rsv = reserving(r);
        for (uint32_t i = 0; i < r->nw; i++)
                if (eligible_for(r, i, NULL, rsv, now))
                        n += cap_of(r, &r->w[i]) - used(r, i, NULL, rsv);
        return n;
}

uint32_t loom_harvest_router_load(const loom_harvest_router *r, uint32_t w)
{
        return w < r->nw ? r->w[w].load : 0;
}

uint32_t loom_harvest_router_workers(const loom_harvest_router *r)
{
        return (uint32_t)r->nw;
}

uint32_t loom_harvest_router_running(const loom_harvest_router *r, uint32_t id)
{
        return id < r->nt ? r->t[id].running : LOOM_HARVEST_NONE;
}
