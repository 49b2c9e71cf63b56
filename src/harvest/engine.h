/*
 * engine.h - the co-serving executor of one GPU (internal to src/harvest).
 *
 * A state machine with time as an argument: the driver asks for the next iteration
 * (hv_engine_next), runs it for the returned duration (the simulator advances a virtual clock,
 * `loom harvest node` sleeps on the wall clock), then reports it finished (hv_engine_finish).
 * Serving requests and rollout turns are submitted at any time; results come back through
 * callbacks. The same code decides in the simulator and in the live executor.
 */
#ifndef LOOM_HARVEST_ENGINE_H
#define LOOM_HARVEST_ENGINE_H

#include "loom/harvest.h"

typedef struct hv_sreq {
        uint64_t id;
        loom_us arr;
        uint32_t prompt, gen, done;
        loom_us first, last;
        uint32_t pages;
        uint64_t joined; /* step sequence at which it joined the decode batch */
        void *user;
} hv_sreq;

typedef struct hv_turn {
        uint32_t traj;
        uint32_t prompt, cached, prefilled, resp, gen;
        loom_us last_progress;
        uint64_t joined;
} hv_turn;

enum { HV_ABORT_STALL = 1, HV_ABORT_CUT = 2, HV_ABORT_EVICT = 3 };

typedef struct hv_callbacks {
        void *arg;
        void (*prefilled)(void *arg, loom_us now, const hv_sreq *r); /* first token */
        void (*token)(void *arg, loom_us gap);                       /* a decode interval */
        void (*served)(void *arg, loom_us now, const hv_sreq *r);    /* last token */
        void (*turn_done)(void *arg, loom_us now, uint32_t traj, uint32_t gpu);
        void (*turn_aborted)(void *arg, loom_us now, uint32_t traj, uint32_t gpu, int why);
        void (*evicted)(void *arg, loom_us now, uint32_t gpu, loom_us until);
} hv_callbacks;

typedef struct hv_policy {
        loom_harvest_admit_mode admit;
        int chunk;        /* rollout prefill chunk in tokens; 0 = monolithic */
        int prefix_cache; /* keep idle prefixes under lease */
        int serverless;   /* evict the rollout model when serving needs the GPU */
        loom_us evict_cost, cooldown, reload;
        uint32_t prefill_batch_tokens;
        /* Sound admission (0: the plain Eq. 1-2 of the paper, against the current queue only):
         * serving estimates and the rollout step are inflated by est_err; a request that
         * arrives during the rollout step (the largest prompt of the last HV_RECENT arrivals)
         * and one more decode joiner are reserved for; the whole prefill queue counts before a
         * co-located decode; and the feedback guard's margins are taken off the slack. */
        int sound;
        double est_err;
} hv_policy;

/* The feedback guard: the observed tail of one SLO (TTFT or per-token interval) over the last
 * HV_WIN samples, as a fraction of the SLO, steers a margin taken off that slack. Every
 * HV_EVERY samples: above HV_HI the margin grows by HV_GAIN_UP x (ratio - HV_HI) of the SLO,
 * below HV_LO it shrinks by HV_GAIN_DOWN x (HV_LO - ratio), in between it holds (hysteresis);
 * it stays in [0, HV_MARGIN_MAX] and starts at HV_MARGIN_MAX (cold start: no evidence of slack
 * yet). */
#define HV_EST_ERR 0.05 /* latency-model error the sound admission allows for (5%) */
#define HV_WIN 128
#define HV_EVERY 4
#define HV_HI 0.90
#define HV_LO 0.80
#define HV_GAIN_UP 0.5
#define HV_GAIN_DOWN 0.25
#define HV_MARGIN_MAX 0.5
#define HV_RECENT 64

typedef struct hv_guard {
        double ring[HV_WIN]; /* observed / SLO */
        uint32_t n, pos, since;
        double margin; /* fraction of the SLO kept off the slack */
        double tail;   /* the last p99 estimate (observed / SLO) */
        uint64_t raised, lowered;
} hv_guard;

/* Record one observation (observed / SLO) and update the margin. */
void hv_guard_observe(hv_guard *gd, double ratio);

typedef enum hv_kind {
        HV_IDLE = 0,
        HV_S_PREFILL,
        HV_S_DECODE,
        HV_R_PREFILL,
        HV_R_DECODE,
        HV_EVICT,
} hv_kind;

typedef struct hv_step {
        hv_kind kind;
        loom_us dur;
        uint32_t count;  /* S_PREFILL: requests from the queue head */
        uint32_t traj;   /* R_PREFILL */
        uint32_t tokens; /* R_PREFILL */
        uint64_t seq;
} hv_step;

typedef struct hv_engine {
        uint32_t id;
        loom_harvest_role role;
        const loom_harvest_model *m;
        hv_policy pol;
        loom_us b_ttft, b_tpot, stall;
        loom_harvest_mem mem;
        hv_callbacks cb;
        hv_sreq *pq; /* prefill FIFO: pq[pq_head .. pq_n) */
        size_t pq_head, pq_n, pq_cap;
        hv_sreq *dec;
        size_t ndec, dec_cap;
        hv_sreq *dwait; /* decodes waiting for serving memory */
        size_t ndwait, dwait_cap;
        hv_turn *turns;
        size_t nturns, turns_cap;
        uint64_t ctx_dec; /* serving decode context tokens */
        uint32_t serving_peak;
        hv_step cur;
        uint64_t seq;
        int last_rollout, toggle;
        int evicted;
        loom_us reload_until;
        uint64_t evictions, stalls, cut_aborts;
        loom_us busy_serving, busy_rollout;
        loom_us rollout_ran; /* end of the last rollout iteration (stall detection) */
        hv_guard g_ttft, g_tpot;
        uint32_t recent_prompt[HV_RECENT], recent_ctx[HV_RECENT]; /* arrivals, for reserves */
        uint32_t nrecent, recent_pos;
} hv_engine;

int hv_engine_init(hv_engine *g, uint32_t id, loom_harvest_role role, const loom_harvest_model *m,
                   const hv_policy *pol, const loom_harvest_mem_cfg *mc, loom_us b_ttft,
                   loom_us b_tpot, loom_us stall, const hv_callbacks *cb, loom_err *e);
void hv_engine_fini(hv_engine *g);
/* New RL step: rollout budget from the serving peak since the last step. */
void hv_engine_rl_step(hv_engine *g);
int hv_engine_submit_prefill(hv_engine *g, loom_us now, const hv_sreq *r);
int hv_engine_submit_decode(hv_engine *g, loom_us now, const hv_sreq *r);
/* LOOM_ERANGE: no memory for it here (nothing changes); LOOM_ESTATE: the rollout model is not
 * resident (serverless eviction). *affine set when a cached prefix was reused. */
int hv_engine_submit_turn(hv_engine *g, loom_us now, uint32_t traj, uint32_t prompt, uint32_t resp,
                          int *affine);
/* Choose the next iteration at `now` (the engine must be idle). Returns 1 and fills
 * g->cur, or 0 when there is nothing to run. */
int hv_engine_next(hv_engine *g, loom_us now);
/* The current iteration ended at `now`. */
void hv_engine_finish(hv_engine *g, loom_us now);
int hv_engine_busy(const hv_engine *g);
/* An iteration of modelled duration d as the GPU runs it with latency-model error `noise`:
 * d x (1 + U(-noise, noise)), a pure function of (seed, gpu, seq); d itself when noise is 0.
 * The admission keeps planning with d: the error a real GPU's profile has. */
loom_us hv_noisy(loom_us d, double noise, uint64_t seed, uint32_t gpu, uint64_t seq);
size_t hv_engine_serving_load(const hv_engine *g);

#endif
