/*
 * timeline.h - PlexRL's spatio-temporal view of a training pool and its two policies:
 * phase-offset placement on a cyclic timeline and HRRS dispatch of serviceized training calls.
 *
 * The timeline is a cyclic horizon of L slots (default 1 s over 8 h = 28,800 slots); time t maps
 * to slot t mod L, and an interval that crosses the wrap is split in two. It keeps
 *   - a global capacity profile: free nodes per slot, in a segment tree with O(log L) range-min
 *     and range-add (the necessary condition "K nodes free somewhere" prunes shifts);
 *   - node groups: each group's free windows as a sorted list of disjoint [s, e) slot intervals,
 *     searched by binary search when a job's segments are fitted (Eq. 2);
 *   - atomic commit/release of a job's footprint: a commit that would overlap anything changes
 *     nothing, so capacity is never over-committed.
 * A node group's training nodes run one job at a time: a job placed in a group of K nodes holds
 * all K nodes during its segments.
 *
 * Pure: no I/O, no clock, no globals. A loom_timeline owns all its memory; free with
 * loom_timeline_free (NULL is fine). One thread at a time.
 */
#ifndef LOOM_TIMELINE_H
#define LOOM_TIMELINE_H

#include <stdbool.h>

#include "loom/common.h"

/* One execution segment of a job's periodic demand: offset a and duration d within its
 * period, in slots. */
typedef struct loom_tl_seg {
        int32_t a, d;
} loom_tl_seg;

/* A window [s, e) of slots. */
typedef struct loom_tl_win {
        int32_t s, e;
} loom_tl_win;

/* Eq. 1 weights and the shift bound; see docs/scheduling.md for the defaults' reasoning. */
typedef struct loom_tl_fit_cfg {
        double alpha; /* shifts delta in [0, alpha * T]; default 0.5 */
        double w1;    /* weight of the completion delay (t_end(delta) - T) / T; default 1.0 */
        double w2;    /* weight of the start shift delta / T; default 0.25 */
} loom_tl_fit_cfg;

void loom_tl_fit_cfg_default(loom_tl_fit_cfg *c);

/*
 * Eq. 2 on a plain window list (sorted, disjoint, not cyclic): does every segment shifted by
 * delta lie entirely inside one window?
 */
bool loom_tl_fits_at(const loom_tl_win *w, int nw, const loom_tl_seg *seg, int ns, int32_t delta);

/*
 * Eq. 1 cost of shift delta for segments seg with period T: t_end(delta) is
 * max(T, delta + max(a_i + d_i)), the end of the shifted cycle.
 */
double loom_tl_cost(const loom_tl_fit_cfg *c, const loom_tl_seg *seg, int ns, int32_t period,
                    int32_t delta);

/*
 * Fit segments into plain windows: the shift in [0, floor(alpha * T)] of least Eq. 1 cost
 * (ties to the smaller shift). Returns 0 with *delta and *cost, or LOOM_EREJECT if no shift
 * satisfies Eq. 2. The search jumps from window to window: O(ns * (nw + log nw)).
 */
int loom_tl_fit(const loom_tl_fit_cfg *c, const loom_tl_win *w, int nw, const loom_tl_seg *seg,
                int ns, int32_t period, int32_t *delta, double *cost);

/* ---- the cyclic timeline ---------------------------------------------------------------- */

typedef struct loom_timeline loom_timeline;
typedef uint32_t loom_tl_group; /* 0, 1, 2, ...; never reused */
typedef uint32_t loom_tl_job;   /* caller's id, unique among committed footprints; not 0 */

#define LOOM_TL_DEFAULT_SLOTS 28800
#define LOOM_TL_NO_GROUP ((loom_tl_group)UINT32_MAX)

/* A timeline of `slots` slots of `slot_us` each over `nodes` nodes. NULL with e set on bad
 * arguments or out of memory. */
loom_timeline *loom_timeline_new(int32_t slots, loom_us slot_us, int nodes, loom_err *e);
void loom_timeline_free(loom_timeline *t);

int32_t loom_timeline_slots(const loom_timeline *t);
loom_us loom_timeline_slot_us(const loom_timeline *t);
int32_t loom_timeline_slot_of(const loom_timeline *t, loom_us at); /* at mod horizon */
/* Slots covering a duration, rounded up (a footprint covers every slot it touches). */
int32_t loom_timeline_span(const loom_timeline *t, loom_us d);

/* Free nodes over the cyclic range [from, from + len) (split at the wrap): range-min. */
int loom_timeline_min_free(const loom_timeline *t, int32_t from, int32_t len);
/* Nodes never given to a group. */
int loom_timeline_unassigned(const loom_timeline *t);

/* Make a group of `nodes` unassigned nodes (all free at every slot). LOOM_EREJECT if fewer
 * are unassigned. */
int loom_timeline_group_new(loom_timeline *t, int nodes, loom_tl_group *out, loom_err *e);
/* Give an empty group's nodes back. LOOM_ESTATE if jobs are committed to it. */
int loom_timeline_group_free(loom_timeline *t, loom_tl_group g);
int loom_timeline_group_nodes(const loom_timeline *t, loom_tl_group g);
int loom_timeline_group_jobs(const loom_timeline *t, loom_tl_group g);
int32_t loom_timeline_group_busy(const loom_timeline *t, loom_tl_group g); /* busy slots */
/* The group's free windows in [0, L) (a window across the wrap appears as two). Returns the
 * count; copies up to cap into out. */
int loom_timeline_group_windows(const loom_timeline *t, loom_tl_group g, loom_tl_win *out, int cap);

/* A job's periodic footprint: segments of a period, repeated every `period` slots from phase
 * `offset` across the horizon. */
typedef struct loom_tl_footprint {
        const loom_tl_seg *seg;
        int ns;
        int32_t period; /* > 0 slots */
        int32_t offset; /* phase of the first period, slots */
} loom_tl_footprint;

/* Does the footprint fit the group's free windows? (Eq. 2 over every repetition.) */
bool loom_timeline_fits(const loom_timeline *t, loom_tl_group g, const loom_tl_footprint *f);

/*
 * Least-cost shift for the footprint in group g (offset taken as the base phase): like
 * loom_tl_fit over the cyclic windows and every repetition. Also fills *slack_min (the least
 * slack, slots, between a placed segment and a resident job's busy time: small slack means a
 * resident's jitter lands on the new job) when not NULL. 0 or LOOM_EREJECT.
 */
int loom_timeline_fit(const loom_timeline *t, loom_tl_group g, const loom_tl_fit_cfg *c,
                      const loom_tl_footprint *f, int32_t *delta, double *cost, int32_t *slack_min);

/* Commit the footprint for job `job` in group g: all or nothing. LOOM_EREJECT (nothing
 * changed) if any repetition overlaps busy time; LOOM_EEXIST if job is committed already. */
int loom_timeline_commit(loom_timeline *t, loom_tl_group g, loom_tl_job job,
                         const loom_tl_footprint *f, loom_err *e);
/* Release job's footprint; LOOM_ENOENT if it has none. */
int loom_timeline_release(loom_timeline *t, loom_tl_job job);
/* The group job is committed to, or LOOM_TL_NO_GROUP. */
loom_tl_group loom_timeline_group_of(const loom_timeline *t, loom_tl_job job);

/* Debug/test check of every invariant: the global profile equals the sum over groups, no
 * slot below 0, windows sorted and disjoint. 0 or LOOM_ECORRUPT. */
int loom_timeline_check(const loom_timeline *t);

/* ---- HRRS dispatch (PlexRL Eq. 3-4) -------------------------------------------------------- */

typedef enum loom_dispatch {
        LOOM_DISPATCH_RR = 0, /* WEAVE's strict round robin over members */
        LOOM_DISPATCH_HRRS,   /* highest response ratio with setup */
        LOOM_DISPATCH_FCFS,   /* first come, first served */
} loom_dispatch;

const char *loom_dispatch_name(loom_dispatch d); /* "rr", "hrrs", "fcfs" */
int loom_dispatch_parse(const char *s, loom_dispatch *out);

/* A training call waiting for (or running on) a shared training pool. */
typedef struct loom_hrrs_req {
        uint32_t job;    /* owner; the pool's resident job needs no switch */
        loom_us arrival; /* when it was queued */
        loom_us exec;    /* E: estimated execution time (remaining time when running) */
        loom_us setup;   /* T_offload + T_load paid if the pool switches to this job */
        uint64_t seq;    /* arrival order, ties */
} loom_hrrs_req;

/* P = 1 + W / (E + 1[switch] * setup), W = now - arrival (Eq. 3-4). */
double loom_hrrs_score(const loom_hrrs_req *r, loom_us now, bool needs_switch);

/*
 * Pick the next request for a pool whose resident job (state loaded) is `resident` (0: none):
 * HRRS by highest score (ties: earlier seq), FCFS by earliest arrival (then seq), RR by the
 * first job after `rr_last` in ascending job order, its earliest request. Returns the index in
 * q[0..n), or -1 when n == 0.
 */
int loom_hrrs_pick(loom_dispatch d, const loom_hrrs_req *q, int n, loom_us now, uint32_t resident,
                   uint32_t rr_last);

/*
 * Preemption at an operation boundary: does the best waiting request (by HRRS) displace the
 * running one? The running request scores 1 + W / remaining (no setup: its state is loaded);
 * it is preempted only when the challenger scores more than margin * that (margin >= 1, e.g.
 * 1.1), so two near-equal jobs cannot thrash. Returns the index of the challenger, or -1.
 */
int loom_hrrs_preempt(const loom_hrrs_req *running, const loom_hrrs_req *q, int n, loom_us now,
                      double margin);

#endif
