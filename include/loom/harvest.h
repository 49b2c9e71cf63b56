/*
 * harvest.h - ROSE: rollouts on idle serving GPUs without breaking serving SLOs.
 *
 * A rollout model sits beside a production (serving) model on the same GPU. Pieces, bottom up:
 *   pool     one physical KV page pool per GPU (2 MB pages) in real memory: each model reserves
 *            a contiguous virtual range (mmap PROT_NONE), the pool is a memfd, pages are mapped
 *            into and out of either range with MAP_FIXED.
 *   mem      the memory policy in page units (pure): per-step rollout budget with a serving
 *            headroom, the watermark emergency cut (halve once, free at request granularity,
 *            freeze until the next RL step), leases on idle rollout prefix pages.
 *   admit    dual-SLO admission (ROSE Eq. 1-2): TTFT slack on prefill instances, TPOT slack on
 *            decode instances, their minimum when co-located; stall detection.
 *   latency  prefill and decode-step latency models of a model on an H800 instance.
 *   router   the elastic turn router: dedicated GPUs first (16 turns each), spill to borrowed
 *            serving GPUs, cache affinity, heartbeats, stall and failure rerouting, weight
 *            staleness.
 *   setup    a job's choice of serving GPUs (lowest recent KV use, one owner each).
 *   engine   the co-serving executor of one GPU as a state machine (time is an argument): the
 *            simulator drives it with a virtual clock, `loom harvest node` with the wall clock.
 *   sim      trace-driven simulation of a serving cluster plus an agentic RL job, per policy.
 *   wlive    a live node's rollout weights kept current over src/sync's publish / pull.
 *   run      the runs behind `loom harvest sim`, `node` and `replay`, printed to a FILE *.
 *   publish  a synthetic trainer publishing new rollout weights (`loom harvest publish`).
 *
 * Memory: every *_new returns a heap object owned by the caller, released by the matching
 * *_free; *_free(NULL) does nothing. Errors: 0 or a negative LOOM_E* code, message in loom_err.
 */
#ifndef LOOM_HARVEST_H
#define LOOM_HARVEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/common.h"

#define LOOM_HARVEST_PAGE (UINT64_C(2) << 20) /* KV page: 2 MB, as CUDA VMM granularity */
#define LOOM_HARVEST_NONE UINT32_MAX
#define LOOM_HARVEST_INF INT64_MAX /* "no constraint" slack */

enum { LOOM_HARVEST_SERVING = 0, LOOM_HARVEST_ROLLOUT = 1 };

/* ---- page pool (real memory) ---------------------------------------------------------- */

typedef struct loom_harvest_pool loom_harvest_pool;

/* A pool of npages physical pages of page_bytes (a multiple of the system page size) backed by
 * one memfd, and two virtual ranges of npages pages each, reserved PROT_NONE. */
int loom_harvest_pool_new(uint32_t npages, uint64_t page_bytes, loom_harvest_pool **out,
                          loom_err *e);
void loom_harvest_pool_free(loom_harvest_pool *p);
/* Take a free physical page and map it read-write at the lowest unmapped page of model's range.
 * *vpage receives that page's index in the range. LOOM_ERANGE when no physical page is free. */
int loom_harvest_pool_map(loom_harvest_pool *p, int model, uint32_t *vpage, loom_err *e);
/* Unmap page vpage of model's range (it becomes PROT_NONE again) and return its physical page
 * to the free list. LOOM_ENOENT when it is not mapped. */
int loom_harvest_pool_unmap(loom_harvest_pool *p, int model, uint32_t vpage);
/* Address of page vpage of model's range (mapped or not). */
void *loom_harvest_pool_addr(const loom_harvest_pool *p, int model, uint32_t vpage);
/* Physical page behind (model, vpage), or LOOM_HARVEST_NONE. */
uint32_t loom_harvest_pool_phys(const loom_harvest_pool *p, int model, uint32_t vpage);
uint32_t loom_harvest_pool_used(const loom_harvest_pool *p, int model);
uint32_t loom_harvest_pool_free_pages(const loom_harvest_pool *p);
uint32_t loom_harvest_pool_pages(const loom_harvest_pool *p);

/* ---- memory policy (pure, page units) ------------------------------------------------- */

typedef struct loom_harvest_mem_cfg {
        uint32_t pages;          /* KV pages of the GPU */
        uint32_t headroom_pages; /* H: kept for serving bursts (20% of device memory) */
        double watermark;        /* pressure once serving has eaten this fraction of H (0.5) */
        loom_us lease;           /* idle rollout prefix pages live this long (10 s) */
        int preempt;             /* 0: static split, serving capped at pages / 2, no cut */
} loom_harvest_mem_cfg;

typedef enum loom_harvest_entry_state {
        LOOM_HARVEST_ACTIVE = 0, /* a running rollout request */
        LOOM_HARVEST_CACHED = 1, /* an idle trajectory prefix, under lease */
} loom_harvest_entry_state;

typedef struct loom_harvest_entry {
        uint32_t traj;  /* trajectory id (one entry per trajectory on a GPU) */
        uint32_t pages; /* pages held */
        loom_harvest_entry_state state;
        loom_us expiry;  /* CACHED: lease end */
        uint64_t seq;    /* admission order: the cut frees the newest requests first */
        uint32_t tokens; /* the caller's note of the tokens the pages hold (prefix length) */
} loom_harvest_entry;

typedef struct loom_harvest_mem {
        loom_harvest_mem_cfg cfg;
        uint32_t serving_used, rollout_used;
        uint32_t budget;         /* rollout pages allowed this RL step */
        int frozen;              /* the emergency cut happened this step: budget may not grow */
        uint32_t cuts;           /* emergency cuts so far */
        uint32_t serving_cap;    /* static split: pages / 2; else pages */
        uint32_t serving_recent; /* serving use the step's budget was derived from */
        size_t nentries, cap;
        loom_harvest_entry *entries;
        uint64_t seq;
        loom_us next_expiry; /* no CACHED lease ends before this (expire skips its scan) */
} loom_harvest_mem;

int loom_harvest_mem_init(loom_harvest_mem *m, const loom_harvest_mem_cfg *cfg, loom_err *e);
void loom_harvest_mem_fini(loom_harvest_mem *m);
/* Start of an RL step: budget = pages - H - serving_recent (at least 0), unfreeze. Static
 * split: budget = pages / 2. */
void loom_harvest_mem_step(loom_harvest_mem *m, uint32_t serving_recent);
/* The trajectory's entry on this GPU, or NULL. */
loom_harvest_entry *loom_harvest_mem_find(loom_harvest_mem *m, uint32_t traj);
/* Drop CACHED entries whose lease ended by `now`; their trajectory ids go to out (capacity
 * cap). Returns how many. */
size_t loom_harvest_mem_expire(loom_harvest_mem *m, loom_us now, uint32_t *out, size_t cap);
/* Make traj's entry ACTIVE holding `pages` pages (a cached prefix is reused and grown).
 * Expired leases and, if needed, the oldest other cached prefixes are reclaimed first.
 * LOOM_ERANGE when the budget or the free pages cannot hold it (nothing changes). */
int loom_harvest_mem_rollout_take(loom_harvest_mem *m, loom_us now, uint32_t traj, uint32_t pages);
/* The request finished: keep its pages as a CACHED prefix under lease (cache != 0), or free. */
void loom_harvest_mem_rollout_idle(loom_harvest_mem *m, loom_us now, uint32_t traj, int cache);
/* Free traj's entry whatever its state. */
void loom_harvest_mem_rollout_drop(loom_harvest_mem *m, uint32_t traj);
/* Serving wants `pages` more pages. Serving has priority: cached prefixes, then running rollout
 * requests (newest first) are freed until it fits. When serving usage crosses the watermark
 * inside H for the first time this step, the emergency cut runs: the budget halves (once),
 * rollout entries are freed at request granularity until usage fits the new budget, and the
 * budget is frozen until the next step. Trajectory ids of aborted ACTIVE requests go to
 * aborted (capacity cap, *naborted set). Returns 0, or LOOM_ERANGE when even an empty rollout
 * side cannot hold the request (static split: serving's half is full); then nothing changes. */
int loom_harvest_mem_serving_take(loom_harvest_mem *m, uint32_t pages, uint32_t *aborted,
                                  size_t cap, size_t *naborted);
void loom_harvest_mem_serving_put(loom_harvest_mem *m, uint32_t pages);
/* Serving usage (pages) above which the cut fires: serving_recent + watermark * H. */
uint32_t loom_harvest_mem_watermark(const loom_harvest_mem *m);

/* ---- dual-SLO admission (pure) --------------------------------------------------------- */

typedef enum loom_harvest_role {
        LOOM_HARVEST_PREFILL = 0,   /* serving prefill instance */
        LOOM_HARVEST_DECODE = 1,    /* serving decode instance */
        LOOM_HARVEST_COLOCATED = 2, /* serving prefill and decode on one instance */
        LOOM_HARVEST_DEDICATED = 3, /* a rollout GPU: no serving */
} loom_harvest_role;

typedef enum loom_harvest_admit_mode {
        LOOM_HARVEST_ADMIT_DUAL = 0, /* TTFT slack on prefill, TPOT on decode, min co-located */
        LOOM_HARVEST_ADMIT_TTFT = 1, /* TTFT slack only */
        LOOM_HARVEST_ADMIT_TPOT = 2, /* TPOT slack only */
        LOOM_HARVEST_ADMIT_NONE = 3, /* no admission: rollout and serving interleave */
} loom_harvest_admit_mode;

/* Eq. 1: (t_arr + B_TTFT) - now - est_prefill. */
static inline loom_us loom_harvest_slack_ttft(loom_us now, loom_us arr, loom_us b_ttft, loom_us est)
{
        return arr + b_ttft - now - est;
}
/* Eq. 2: (t_last + B_TPOT) - now - est_decode_step. */
static inline loom_us loom_harvest_slack_tpot(loom_us now, loom_us last, loom_us b_tpot,
                                              loom_us est)
{
        return last + b_tpot - now - est;
}
/* The slack a rollout step must fit in, given the minimum TTFT slack over queued prefills and
 * the minimum TPOT slack over active decodes (LOOM_HARVEST_INF when the queue is empty).
 * Returns LOOM_HARVEST_INF when the mode checks nothing on this role. */
loom_us loom_harvest_slack(loom_harvest_admit_mode mode, loom_harvest_role role, loom_us s_prf,
                           loom_us s_dec);
/* Is the mode enforcing anything on this role? */
int loom_harvest_checks(loom_harvest_admit_mode mode, loom_harvest_role role);
/* Admit a rollout step of `work` us needing `pages` more KV pages, with `avail` pages of
 * rollout budget free: work <= slack and pages <= avail. */
int loom_harvest_admit(loom_us slack, loom_us work, uint32_t pages, uint32_t avail);
/* A rollout whose last progress was at `last` is stalled at `now` (timeout 2 s by default). */
static inline int loom_harvest_stalled(loom_us now, loom_us last, loom_us timeout)
{
        return now - last >= timeout;
}

/* ---- latency models -------------------------------------------------------------------- */

/* Roofline of one model on an instance of `tp` H800 GPUs, with efficiencies (see
 * docs/harvest.md for the sources). */
typedef struct loom_harvest_model {
        char name[48];
        double params;          /* parameters */
        double weight_bytes;    /* bf16 weights */
        double kv_bytes_token;  /* K and V of one token, all layers */
        double attn_flops_tok2; /* attention FLOPs per (query token x context token) */
        uint32_t tp;            /* GPUs per instance */
        double peak_flops, hbm_bw, hbm_bytes; /* per GPU */
        double mfu, bw_eff, tp_eff;
        loom_us prf_overhead, dec_overhead;
} loom_harvest_model;

/* "7b" (Qwen2.5-7B shapes, 1 H800) or "32b" (Qwen2.5-32B shapes, TP4 on 4 H800). */
int loom_harvest_model_preset(const char *name, loom_harvest_model *out, loom_err *e);
/* Prefill of n new tokens after a cached prefix of `prefix` tokens. */
loom_us loom_harvest_t_prefill(const loom_harvest_model *m, uint64_t n, uint64_t prefix);
/* One decode step of a batch of b sequences holding ctx tokens in total. */
loom_us loom_harvest_t_decode(const loom_harvest_model *m, uint32_t b, uint64_t ctx);
/* KV pages (2 MB) that `tokens` tokens occupy. */
uint32_t loom_harvest_kv_pages(const loom_harvest_model *m, uint64_t tokens);

/* ---- elastic turn router (pure) -------------------------------------------------------- */

typedef enum loom_harvest_worker_kind {
        LOOM_HARVEST_W_DEDICATED = 0,
        LOOM_HARVEST_W_SERVING = 1,
} loom_harvest_worker_kind;

typedef struct loom_harvest_router_cfg {
        uint32_t dedicated_cap;    /* concurrent turns per dedicated GPU (16) */
        uint32_t serving_cap;      /* concurrent turns per serving GPU (16) */
        int affinity;              /* route a trajectory's next turn to its prefix holder */
        int pinned;                /* a trajectory stays on the worker of its first turn */
        loom_us heartbeat_timeout; /* a worker silent this long is dead (5 s) */
        uint32_t max_staleness;    /* serve only from workers at most this many versions behind */
} loom_harvest_router_cfg;

typedef struct loom_harvest_router loom_harvest_router;

int loom_harvest_router_new(const loom_harvest_router_cfg *cfg, loom_harvest_router **out,
                            loom_err *e);
void loom_harvest_router_free(loom_harvest_router *r);
/* Add a worker; returns its id (>= 0) or a negative error. Workers start alive and open, at
 * version 0, last heartbeat at `now`. */
int loom_harvest_router_add(loom_harvest_router *r, loom_harvest_worker_kind kind, loom_us now);
/* Liveness and the weight version the worker serves. */
void loom_harvest_router_heartbeat(loom_harvest_router *r, uint32_t w, loom_us now,
                                   uint32_t version);
/* The policy version rollouts must use (workers further behind than max_staleness are not
 * routed to). */
void loom_harvest_router_set_version(loom_harvest_router *r, uint32_t version);
/* A serving worker closes to new turns until `until` (a stall report, an emergency cut). */
void loom_harvest_router_close(loom_harvest_router *r, uint32_t w, loom_us until);
/* Route the next turn of trajectory traj. Returns the worker id, or LOOM_HARVEST_NONE when no
 * worker can take it now (the caller queues the turn). The turn counts against the worker
 * until _done or _abort. affine (may be NULL) is set when the worker holds the prefix.
 * move_us is what moving the turn away from the worker that holds its prefix costs: the GPU
 * time of re-prefilling that prefix. When that worker is full, the turn waits for it (NONE,
 * and _waiting names it) if its expected slot wait (_wait_us) is at most move_us. */
uint32_t loom_harvest_router_route_cost(loom_harvest_router *r, loom_us now, uint32_t traj,
                                        loom_us move_us, int *affine);
/* route_cost with a move cost of 0: a full holder is never waited for. */
uint32_t loom_harvest_router_route(loom_harvest_router *r, loom_us now, uint32_t traj, int *affine);
/* The expected wait for a slot on w: 0 with room, else (turns waiting there + 1) x its moving
 * mean turn time / its slots; LOOM_HARVEST_INF before any turn finished there. */
loom_us loom_harvest_router_wait_us(const loom_harvest_router *r, uint32_t w);
/* The worker whose slot traj waits for (its pinned slot, or a full holder it chose to wait
 * for), or LOOM_HARVEST_NONE. */
uint32_t loom_harvest_router_waiting(const loom_harvest_router *r, uint32_t traj);
/* The turn finished on its worker at `now`, which keeps the prefix (affinity). */
void loom_harvest_router_done(loom_harvest_router *r, loom_us now, uint32_t traj);
/* The turn was aborted (stall, emergency cut, failure): the worker lost the prefix. */
void loom_harvest_router_abort(loom_harvest_router *r, uint32_t traj);
/* The trajectory's last turn is done: it is no longer active and gives its worker slot back
 * (pinned, or reserved between turns while the active trajectories fit in twice the slots;
 * past that, slots are lent between turns until none is active). Call it for every trajectory. */
void loom_harvest_router_finish(loom_harvest_router *r, uint32_t traj);
/* The worker no longer holds traj's prefix (lease expired). */
void loom_harvest_router_forget(loom_harvest_router *r, uint32_t traj, uint32_t w);
/* Workers whose heartbeat is older than the timeout are marked dead; the trajectories running
 * on them are written to out (capacity cap) and their turns released. Returns how many. */
size_t loom_harvest_router_check(loom_harvest_router *r, loom_us now, uint32_t *out, size_t cap);
uint32_t loom_harvest_router_load(const loom_harvest_router *r, uint32_t w);
/* Free turn slots over the workers a new (not pinned) turn could be routed to now. */
uint32_t loom_harvest_router_room(const loom_harvest_router *r, loom_us now);
uint32_t loom_harvest_router_workers(const loom_harvest_router *r);
/* Worker of traj's running turn, or LOOM_HARVEST_NONE. */
uint32_t loom_harvest_router_running(const loom_harvest_router *r, uint32_t traj);

/* ---- job setup ------------------------------------------------------------------------- */

typedef struct loom_harvest_gpu {
        uint32_t id;
        double kv_use; /* recent KV-cache use, fraction of capacity */
        int32_t owner; /* RL job that borrowed it, -1 when free */
} loom_harvest_gpu;

/* Job `job` asks for n_rl dedicated GPUs (>= 1) and at most n_serving serving GPUs: picks the
 * free serving GPUs with the lowest recent KV use (ties: lower id), marks them owned, writes
 * their indices into picked (capacity n_serving). Returns how many were picked (may be fewer
 * than asked), or a negative error (nothing changes). */
int loom_harvest_setup(loom_harvest_gpu *gpus, size_t n, int32_t job, uint32_t n_rl,
                       uint32_t n_serving, uint32_t *picked, loom_err *e);
/* Give a job's GPUs back. */
void loom_harvest_release(loom_harvest_gpu *gpus, size_t n, int32_t job);

/* ---- simulator ------------------------------------------------------------------------- */

typedef enum loom_harvest_policy {
        LOOM_HARVEST_ROSE = 0,
        LOOM_HARVEST_ROLL,       /* dedicated rollout GPUs only */
        LOOM_HARVEST_STATIC,     /* 50/50 memory split, no preemption, no admission */
        LOOM_HARVEST_SERVERLESS, /* evict and reload the rollout model when serving needs it */
        LOOM_HARVEST_PRISM,      /* no prefix cache, no dual-SLO admission */
        LOOM_HARVEST_TTFT_ONLY,
        LOOM_HARVEST_TPOT_ONLY,
        LOOM_HARVEST_PINNED,   /* a trajectory stays on one worker */
        LOOM_HARVEST_PREEMPT,  /* memory ablation: static + preemptive sharing (spatial) */
        LOOM_HARVEST_TURNWISE, /* turn-wise routing without cache affinity (router ablation) */
        LOOM_HARVEST_PREFIX,   /* memory ablation: preempt + prefix caching (spatial) */
        LOOM_HARVEST_EQ12,     /* rose with the paper's plain Eq. 1-2 admission (no reserve for
                                * arrivals, no error margin, no feedback guard) */
        LOOM_HARVEST_NPOLICIES
} loom_harvest_policy;

const char *loom_harvest_policy_name(loom_harvest_policy p);
int loom_harvest_policy_parse(const char *s, loom_harvest_policy *out, loom_err *e);

typedef struct loom_harvest_req {
        loom_us arrival;
        uint32_t prompt, gen; /* context tokens, generated tokens */
} loom_harvest_req;

typedef struct loom_harvest_trace {
        size_t n;
        loom_harvest_req *reqs; /* sorted by arrival, first at 0 */
} loom_harvest_trace;

/* Read a CSV with header TIMESTAMP,ContextTokens,GeneratedTokens (TIMESTAMP either
 * "YYYY-MM-DD HH:MM:SS[.frac]" or seconds). Errors name file:line:column. */
int loom_harvest_trace_load(const char *path, loom_harvest_trace *out, loom_err *e);
void loom_harvest_trace_free(loom_harvest_trace *t);

typedef struct loom_harvest_sim_cfg {
        const loom_harvest_trace *trace;
        loom_harvest_policy policy;
        const char *pair;  /* "7b" or "32b" */
        double density;    /* inter-arrival times divided by this */
        double duration_s; /* replay at most this much of the (compressed) trace; 0 = all */
        uint32_t serving_gpus, borrow, rl_gpus;
        uint32_t steps;
        uint32_t batch; /* prompts per RL step (ROLL's rollout batch, veRL's train_batch_size) */
        uint32_t group; /* samples per prompt (veRL's n): batch x group trajectories per step */
        double train_s; /* training + sync between rollout phases */
        double ttft_ms, tpot_ms; /* SLOs; 0 = the pair's defaults */
        double lease_s, headroom, stall_s;
        double weights_s;   /* a step's weights reach borrowed GPUs this long after it starts
                             * (0: during training, before the step) */
        uint32_t staleness; /* route to workers at most this many versions behind (0) */
        double noise;       /* each GPU iteration takes its modelled time x (1 + U(-noise, noise)),
                             * unseen by admission: the latency model's error (0) */
        uint64_t seed;
} loom_harvest_sim_cfg;

/* Defaults: rose, 7b, density 1, 16 serving GPUs, 16 borrowed, 8 rl GPUs, 5 steps, batch 256
 * prompts x group 16 samples (ROSE's setting: 4,096 trajectories per step), train 60 s, lease 10 s,
 * headroom 0.2, stall 2 s, seed 1. */
void loom_harvest_sim_defaults(loom_harvest_sim_cfg *c);

typedef struct loom_harvest_sim_result {
        loom_harvest_policy policy;
        double rollout_s; /* mean rollout phase time per RL step */
        double ttft_p50_ms, ttft_p99_ms;
        double tpot_p50_ms, tpot_p99_ms; /* per request: (last - first token) / (tokens - 1) */
        double itl_p50_ms, itl_p99_ms;   /* every inter-token interval (what Eq. 2 bounds) */
        double serving_slo_attainment;   /* requests with TTFT <= B_TTFT and mean TPOT <= B_TPOT */
        double preempted_gpu_time_frac;
        double sim_s;  /* simulated seconds */
        double wall_s; /* host time the simulation took */
        uint64_t served, turns, turns_on_serving, affinity_hits, aborted, stalls, cuts;
        uint64_t evictions;                               /* serverless: rollout model evictions */
        uint64_t trajectories;                            /* rolled out: steps x batch x group */
        double route_us_max, route_us_mean, route_us_p99; /* host time of routing decisions */
} loom_harvest_sim_result;

int loom_harvest_sim_run(const loom_harvest_sim_cfg *cfg, loom_harvest_sim_result *res,
                         loom_err *e);

/* A comma-separated list of policy names, or "all" (every policy, in enum order), into out
 * (capacity LOOM_HARVEST_NPOLICIES); *n receives how many. LOOM_ERANGE past that many. */
int loom_harvest_policy_list(const char *s, loom_harvest_policy *out, size_t *n, loom_err *e);
/* One policy's result: a row of the table loom_harvest_sim_report prints, or (json) one line
 * holding a JSON object. roll_s is roll's rollout_s, the speedup's base. */
void loom_harvest_sim_print(FILE *f, const loom_harvest_sim_cfg *c,
                            const loom_harvest_sim_result *r, double roll_s, int json);
/* Load the trace file `trace`, simulate roll, then each of the n policies of list (cfg gives
 * the rest; its trace and policy are ignored) and print to out a header and a row per policy,
 * or (json) a JSON line per policy, flushed one by one. On an error the rows printed stay and
 * e's message is complete: it names the field, the trace's file:line:col or the policy. */
int loom_harvest_sim_report(const loom_harvest_sim_cfg *cfg, const char *trace,
                            const loom_harvest_policy *list, size_t n, int json, FILE *out,
                            loom_err *e);

/* ---- live weights: a node's rollout model kept current over src/sync's publish / pull ---- */

/* Synthetic trainer weights: step 0 fills w[0..n) with loom_sync_synth's version-0 values;
 * step k >= 1 flips low mantissa bits of about `density` of the elements in place (a pure
 * function of seed, k and the element index, with no limit on k). */
void loom_harvest_wgen(uint64_t seed, uint32_t step, double density, uint16_t *w, uint64_t n);
/* The shard sizes publisher and node both use: elems cut into nshards near-equal shards. */
int loom_harvest_wshards(uint64_t elems, uint32_t nshards, uint64_t *out, loom_err *e);
/* What a node reports of its weights: loom_sync_hash (g0 0) and CRC32C of the bytes. */
void loom_harvest_wdigest(const uint16_t *w, uint64_t n, uint64_t *hash, uint32_t *crc);
/* Parse "IP:PORT" or "PORT" (127.0.0.1) into ip (capacity cap) and port. */
int loom_harvest_wlive_addr(const char *s, char *ip, size_t cap, uint16_t *port, loom_err *e);
/* 1 when ip (dotted IPv4) is in 127.0.0.0/8: the only place weights may travel unkeyed. */
int loom_harvest_loopback(const char *ip);

typedef struct loom_harvest_wlive_cfg {
        const char *ip; /* the publisher (loom_sync_pub, `loom harvest publish`) */
        uint16_t port;
        const char *model; /* the publisher's model id; NULL: accept any (loom_sync_pull) */
        uint64_t elems;    /* bf16 elements of the rollout model's weight buffer */
        uint32_t shards;   /* must match the publisher's */
        double poll_s;     /* a probe waits this long for a new version; retry pause on errors */
        double timeout_s;  /* one pull */
        /* The job's sync key (LOOM_SYNC_KEY_LEN bytes, copied): pulls and probes are
         * authenticated (loom_sync_pull_keyed), so only a publisher holding the key can make
         * the node take weights. NULL: unauthenticated, allowed only with unkeyed set and a
         * loopback publisher (docs/security.md). */
        const uint8_t *key;
        int unkeyed;
} loom_harvest_wlive_cfg;

typedef struct loom_harvest_wlive_stats {
        uint64_t version; /* version served (0: nothing yet) */
        uint64_t latest;  /* the publisher's latest version, as last seen (>= version) */
        uint64_t hash;    /* loom_sync_hash of the served weights */
        uint32_t crc;     /* CRC32C of the served weights' bytes */
        uint64_t elems;   /* elements in the buffer */
        uint64_t pulls, pulls_delta, pulls_dense, pulls_failed, probes_failed;
        uint64_t bytes;        /* received by every pull, failed ones included */
        uint64_t last_bytes;   /* received by the last applied pull */
        uint64_t last_changed; /* elements it changed */
        double last_pull_s;    /* wall time of the last applied pull: request, transfer, checks,
                                * apply */
        double last_ok_at_s;   /* when it was applied (seconds since start) */
        double now_s;          /* seconds since start */
        int held;              /* pulls held (probes go on) */
        int keyed;             /* pulls are authenticated by the job's sync key */
        char last_error[192];  /* the last failed pull or probe, "" if none */
} loom_harvest_wlive_stats;

typedef struct loom_harvest_wlive loom_harvest_wlive;

/* Start the pull thread: it probes the publisher for its latest version and, unless held,
 * pulls it (a delta from the version before, else dense); a pull is applied only when every
 * frame's CRC (keyed: its tag) and every shard hash matched, else the served weights stay as
 * they were and last_error says why. LOOM_EINVAL (field "weights_key") without a key unless
 * unkeyed is set and the publisher is on loopback. */
int loom_harvest_wlive_start(const loom_harvest_wlive_cfg *c, loom_harvest_wlive **out,
                             loom_err *e);
/* Hold (1) or resume (0) pulls; while held the thread still learns the latest version. */
void loom_harvest_wlive_hold(loom_harvest_wlive *l, int hold);
/* Version served and the newest version known (>= served). */
void loom_harvest_wlive_versions(loom_harvest_wlive *l, uint64_t *served, uint64_t *latest);
void loom_harvest_wlive_stats_get(loom_harvest_wlive *l, loom_harvest_wlive_stats *s);
/* Copy the served weights (elems values) into out; returns their version. */
uint64_t loom_harvest_wlive_copy(loom_harvest_wlive *l, uint16_t *out);
void loom_harvest_wlive_stop(loom_harvest_wlive *l);

/* A synthetic trainer publishing its weights through loom_sync_pub for nodes to pull. */
typedef struct loom_harvest_publish_cfg {
        const char *ip;        /* listen address */
        const char *model;     /* model id served; NULL: none */
        uint16_t port;         /* 0: any free port */
        uint64_t elems;        /* bf16 elements */
        uint32_t shards;       /* loom_harvest_wshards of elems */
        uint64_t bucket_elems; /* elements per frame */
        uint64_t versions;     /* stop publishing after this version, keep serving; 0: never */
        uint64_t seed;         /* loom_harvest_wgen's seed */
        double density;        /* fraction of the elements each version changes */
        double interval_s;     /* between versions */
        double for_s;          /* return after this long; 0: only on stop() */
        /* The job's sync key (LOOM_SYNC_KEY_LEN bytes): serve authenticated pulls only
         * (loom_sync_pub_set_key). NULL: unauthenticated, refused unless ip is loopback. */
        const uint8_t *key;
} loom_harvest_publish_cfg;

/* 127.0.0.1, any port, no model id, 4 Mi elements in 8 shards, 65,536 per frame, density 0.01
 * every second, seed 1. */
void loom_harvest_publish_defaults(loom_harvest_publish_cfg *c);
/* Publish version 1 (loom_harvest_wgen step 0), print "publishing on IP:PORT" and a JSON line
 * per version (version, hash, crc32c, changed, delta_bytes, dense_bytes, encode_ms, t_s) to
 * out, then a new version every interval_s while serving pulls, until stop() returns non-zero
 * (asked every 5 ms) or for_s passes. On an error e's message is complete. */
int loom_harvest_publish_serve(const loom_harvest_publish_cfg *c, int (*stop)(void), FILE *out,
                               loom_err *e);

/* ---- live executor: `loom harvest node` and `loom harvest replay` ----------------------- */

/* One emulated serving GPU: the co-serving executor (the simulator's engine) on the wall clock,
 * GPU time from the latency models divided by `speed`, serving requests over HTTP, a rollout
 * feeder that keeps `rollouts` turns in flight through the turn router, and the KV page pool
 * in real memory mirroring the executor's page accounting. */
typedef struct loom_harvest_node_cfg {
        const char *pair;       /* "7b" or "32b" */
        loom_harvest_role role; /* LOOM_HARVEST_COLOCATED or LOOM_HARVEST_DECODE */
        loom_harvest_admit_mode admit;
        uint16_t port;                  /* 0: any free port on 127.0.0.1 */
        double speed;                   /* emulated seconds per wall second (time compression) */
        uint32_t pages, headroom_pages; /* KV pool; 0 = from the pair's memory (20% headroom) */
        double lease_s, ttft_ms, tpot_ms, stall_s;
        uint32_t rollouts;                      /* rollout turns kept in flight (0: serving only) */
        uint32_t turn_prompt, turn_resp, turns; /* rollout trajectories: first prompt, response
                                                 * per turn, turns per trajectory */
        const char *weights;        /* publisher "IP:PORT" or "PORT"; NULL: no weights, version 0 */
        uint64_t weights_elems;     /* rollout weight buffer, bf16 elements (default 4 Mi) */
        uint32_t weights_shards;    /* as the publisher's (default 8) */
        const char *weights_model;  /* the publisher's model id; NULL: any */
        double weights_poll_s;      /* probe wait (default 0.2) */
        const uint8_t *weights_key; /* the job's sync key (LOOM_SYNC_KEY_LEN bytes): pulls are
                                     * authenticated; see loom_harvest_wlive_cfg.key */
        int weights_unkeyed;        /* pull without a key: loopback publishers only */
        uint32_t staleness;         /* route rollouts here only within this many versions (0) */
        double step_s;        /* an RL step every this many emulated seconds (30): new budget */
        uint32_t max_context; /* prompt + gen above this is refused with 422 (32768, Qwen2.5) */
        int plain_admission;  /* dual admission as the plain Eq. 1-2 (no reserve, no guard) */
        double noise; /* each iteration runs its modelled time x (1 + U(-noise, noise)) (seed 1),
                       * which the admission does not see: latency-model error, as sim's */
} loom_harvest_node_cfg;

#define LOOM_HARVEST_NODE_VERSIONS 8 /* turns done per version, for the last versions */

typedef struct loom_harvest_node_stats {
        uint64_t served, turns_done, turns_aborted, cuts, stalls, route_calls, rl_steps;
        uint32_t pages, pool_serving, pool_rollout, budget;
        double busy_serving_s, busy_rollout_s, route_us_max;
        /* Host lag: emulated time the executor lost to the host (late wake-ups, sleeps that
         * overshot), in all and the longest single delay. Not GPU time: on a real GPU the
         * iteration would have ended on time. */
        double host_lag_s;
        loom_us host_lag_max_us;
        /* weights (with cfg.weights) */
        uint32_t version, policy_version; /* served; the newest known (the router's policy) */
        int routable;                     /* within the staleness: rollout turns may start */
        uint64_t route_stale; /* routing attempts refused while the node was too stale */
        uint64_t turn_version[LOOM_HARVEST_NODE_VERSIONS]; /* turns done under version... */
        uint64_t turn_count[LOOM_HARVEST_NODE_VERSIONS];   /* ...this many (0: slot unused) */
        loom_harvest_wlive_stats w;
} loom_harvest_node_stats;

typedef struct loom_harvest_node loom_harvest_node;

void loom_harvest_node_defaults(loom_harvest_node_cfg *c);
/* Start the HTTP server and the executor thread. GET /v1/generate?prompt=N&gen=M streams one
 * line "first" at the first token and "done TTFT TPOT HOST_TTFT HOST_TPOT" at the last:
 * emulated ms on the node's clock from accepting the request, and how much of each the
 * executor lost to the host (TPOT's per token); GET /v1/stats returns loom_harvest_node_stats
 * as JSON. */
int loom_harvest_node_start(const loom_harvest_node_cfg *c, loom_harvest_node **out, loom_err *e);
uint16_t loom_harvest_node_port(const loom_harvest_node *n);
void loom_harvest_node_stats_get(loom_harvest_node *n, loom_harvest_node_stats *s);
/* Hold (1) or resume (0) the node's weight pulls (an emulated partition of the weight path;
 * the publisher's latest version is still learned). No-op without weights. */
void loom_harvest_node_hold(loom_harvest_node *n, int hold);
/* The node's stats as one line of JSON (with a "weights" object when it has weights). */
void loom_harvest_node_stats_json(const loom_harvest_node_stats *s, int weights, char *buf,
                                  size_t cap);
/* Stop serving, end the threads, unmap the pool, free. NULL does nothing. */
void loom_harvest_node_stop(loom_harvest_node *n);
/* "colocated" or "decode". */
int loom_harvest_role_parse(const char *s, loom_harvest_role *out, loom_err *e);
/* "dual", "ttft", "tpot", "none", or "eq12": dual with *plain set (the plain Eq. 1-2). */
int loom_harvest_admit_parse(const char *s, loom_harvest_admit_mode *out, int *plain, loom_err *e);
/* Start a node, print "listening on 127.0.0.1:PORT" to out, serve until stop() returns non-zero
 * (asked every 20 ms) or for_s seconds of those polls pass (0: no limit), then stop it and print
 * its stats as one line of JSON. headroom_pages UINT32_MAX: not given, 20% of pages. On an error
 * e's message is complete (it names the field). */
int loom_harvest_node_serve(const loom_harvest_node_cfg *c, double for_s, int (*stop)(void),
                            FILE *out, loom_err *e);

typedef struct loom_harvest_replay_cfg {
        const char *host; /* IPv4 address */
        uint16_t port;
        const loom_harvest_trace *trace;
        double density, speed; /* arrivals / density, then / speed on the wall clock */
        double duration_s;     /* emulated seconds of trace to send (0 = all) */
        double timeout_s;      /* per request, wall (0 = 60) */
} loom_harvest_replay_cfg;

typedef struct loom_harvest_replay_result {
        uint64_t sent, ok, failed;
        /* Emulated milliseconds throughout. The client's figures: from sending the request to
         * reading its "first" / "done" lines (HTTP, loopback, the client's threads included). */
        double ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, tpot_p99_ms;
        /* The node's own, from its "done" line: on its monotonic clock from accepting the
         * request to the token (node_*: what the engine and its admission delivered, the
         * figures the SLOs are on). host_*_p99_ms: how much of the P99 request's figure (the
         * request at that rank; per token for TPOT) the node's executor lost to the host (late
         * wake-ups, overshot sleeps), to tell a loaded host from the admission's doing. */
        double node_ttft_p50_ms, node_ttft_p99_ms, node_tpot_p50_ms, node_tpot_p99_ms;
        double host_ttft_p99_ms, host_tpot_p99_ms;
        uint64_t node_figures;      /* answered requests whose "done" line carried them */
        double client_extra_p99_ms; /* P99 of client TTFT - node TTFT: connect, HTTP, threads */
        double send_lag_max_ms;     /* the latest a request was sent against the trace */
        double wall_s;
} loom_harvest_replay_result;

int loom_harvest_replay(const loom_harvest_replay_cfg *c, loom_harvest_replay_result *r,
                        loom_err *e);
/* A replay's result as one line of text, or (json) of JSON. */
void loom_harvest_replay_print(FILE *f, const loom_harvest_replay_result *r, int json);
/* Load the trace file `trace`, replay it (cfg's trace is ignored) and print the result to out.
 * Requests that failed are counted in r->failed, not an error. On an error e's message is
 * complete (it names the field or the trace's file:line:col). */
int loom_harvest_replay_report(const loom_harvest_replay_cfg *cfg, const char *trace, int json,
                               FILE *out, loom_harvest_replay_result *r, loom_err *e);

#endif
