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

/* A job's periodic footprint: segments of a period (sorted by offset, disjoint, within the
 * period), repeated every `period` slots from phase `offset` across the horizon. */
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

/* ---- PlexRL placement on the timeline ------------------------------------------------------ */

/*
 * loom_plex places jobs' periodic training demand onto node groups of a loom_timeline:
 *   - warm start (a profile is known): groups of at least the job's nodes (a smaller job holds
 *     the whole larger group during its segments) are pruned by O(1) bounds (duty
 *     bound, longest free window, member limit) through a tree over the groups that skips every
 *     subtree none of whose groups can pass; the rest are fitted (least Eq. 1 shift) and ranked;
 *     if none fits, a new dedicated group is made from unassigned nodes;
 *   - cold start (no profile): always a dedicated group, so the profile is clean; after one
 *     cycle the driver calls loom_plex_repack, which moves the job to the best-fitting other
 *     group if there is one;
 *   - the duty-ratio bound: a job joins a group only if afterwards every resident's foreign
 *     duty (the busy fraction of the group's timeline not its own, i.e. how often a request of
 *     it that slips off its reserved phase finds the pool taken) stays <= duty_max.
 * Job and group ids are the timeline's. Pure; owns its timeline.
 */

typedef enum loom_plex_mode {
        LOOM_PLEX_SPREAD = 0, /* least Eq. 1 cost, then most slack to residents' phases */
        LOOM_PLEX_PACK,       /* the busiest group that fits (densest packing), then Eq. 1 */
        LOOM_PLEX_ISOLATED,   /* never share: a dedicated group per job */
} loom_plex_mode;

const char *loom_plex_mode_name(loom_plex_mode m); /* "spread", "pack", "isolated" */

typedef struct loom_plex_cfg {
        int32_t slots;       /* horizon; default LOOM_TL_DEFAULT_SLOTS */
        loom_us slot_us;     /* default 1 s */
        int nodes;           /* training nodes in the pool */
        loom_tl_fit_cfg fit; /* Eq. 1 */
        double duty_max;     /* (0, 1]; default 0.75 */
        loom_us guard;       /* slack at which a placement no longer interferes; default 10 s */
        int max_jobs;        /* per group; default 16 */
        loom_plex_mode mode; /* default LOOM_PLEX_SPREAD */
} loom_plex_cfg;

void loom_plex_cfg_default(loom_plex_cfg *c);

#define LOOM_PLEX_MAX_SEGS 8

/* A job's periodic demand on its training nodes: busy segments within a period. It may join
 * a group of at least `nodes` nodes; the timeline is per group, so on a larger group its
 * segments reserve every node of the group (the driver states segments that stay valid there,
 * e.g. its time on `nodes` nodes, never longer on more). */
typedef struct loom_plex_job {
        int nodes;
        loom_us period;
        int n_seg;
        loom_us seg_at[LOOM_PLEX_MAX_SEGS], seg_len[LOOM_PLEX_MAX_SEGS];
        bool profiled; /* false: cold start */
        /* capped: the shift may not pass max_shift (the driver's SLO slack: a member waits the
         * shift for its reserved window); a group that fits only at a larger shift is reported
         * LOOM_PLEX_SLO. Zero-initialised: only alpha T bounds the shift. */
        bool capped;
        loom_us max_shift;
} loom_plex_job;

/*
 * The demand of a job whose iteration is a rollout of t_roll on its own GPUs followed by
 * training calls (compute_log_prob, update_actor, sync_weight, ...) back to back, each call
 * preceded by nothing, the first by `setup` (T_offload + T_load: reserved so a switch from
 * another job fits). One segment: [t_roll - setup, t_roll + sum(calls)), period t_roll +
 * sum(calls).
 */
void loom_plex_job_from_calls(loom_plex_job *j, int nodes, loom_us t_roll, const loom_us *calls,
                              int n_calls, loom_us setup, bool profiled);

typedef struct loom_plex_decision {
        bool placed;    /* false: no group fits and too few unassigned nodes */
        bool new_group; /* a dedicated group (cold start, isolated, or nothing fits) */
        bool cold;      /* cold start: to be repacked after one cycle */
        loom_tl_group group;
        int32_t shift;     /* slots */
        double cost;       /* Eq. 1 */
        int32_t slack;     /* least slack to a resident's busy time, slots */
        int groups_seen;   /* live groups with at least the job's nodes */
        int groups_pruned; /* seen but not fitted: cut by the O(1) bounds (or never reached
                              once a perfect fit ended the search) */
        int groups_fitted; /* fitted (Eq. 2 search) */
        char why[160];
} loom_plex_decision;

typedef struct loom_plex loom_plex;

loom_plex *loom_plex_new(const loom_plex_cfg *c, loom_err *e);
void loom_plex_free(loom_plex *p);
const loom_timeline *loom_plex_timeline(const loom_plex *p);
const loom_plex_cfg *loom_plex_config(const loom_plex *p);

/* What loom_plex_place would do, changing nothing. LOOM_EINVAL for a bad job. */
int loom_plex_decide(const loom_plex *p, const loom_plex_job *j, loom_plex_decision *out,
                     loom_err *e);
/* Like loom_plex_decide, but only groups for which accept(ctx, group) is true are fitted
 * (others count as pruned): a driver's own bounds, e.g. host memory. accept may be NULL. */
int loom_plex_decide_if(const loom_plex *p, const loom_plex_job *j,
                        bool (*accept)(void *ctx, loom_tl_group g), void *ctx,
                        loom_plex_decision *out, loom_err *e);

/* What happened to one group during a decision (for explanations). */
typedef enum loom_plex_outcome {
        LOOM_PLEX_PRUNED_FULL = 0, /* member limit */
        LOOM_PLEX_PRUNED_WINDOW,   /* no free window as long as the longest segment */
        LOOM_PLEX_PRUNED_DUTY,     /* the duty-ratio bound */
        LOOM_PLEX_PRUNED_DRIVER,   /* the driver's accept() said no */
        LOOM_PLEX_NO_FIT,          /* fitted: no shift in [0, alpha T] */
        LOOM_PLEX_FITS,            /* fitted: shift, cost and slack are set */
        LOOM_PLEX_SLO,             /* fits only past the job's max_shift: shift is the least */
        LOOM_PLEX_TOO_SMALL,       /* fewer training nodes than the job needs */
} loom_plex_outcome;

typedef void (*loom_plex_note_fn)(void *ctx, loom_tl_group g, loom_plex_outcome o, int32_t shift,
                                  double cost, int32_t slack);
/* loom_plex_decide_if that also reports every group it looked at to note (NULL: none). */
int loom_plex_decide_explain(const loom_plex *p, const loom_plex_job *j,
                             bool (*accept)(void *ctx, loom_tl_group g), void *ctx,
                             loom_plex_note_fn note, void *nctx, loom_plex_decision *out,
                             loom_err *e);
/* Commit job id exactly as decided (d from a decide call on the unchanged placer): into
 * d->group at d->shift, or a new group when d->new_group. d->group is set for a new group. */
int loom_plex_commit(loom_plex *p, uint32_t id, const loom_plex_job *j, loom_plex_decision *d,
                     loom_err *e);
/* A driver's tag per group (its own group id); 0 until set. */
void loom_plex_set_tag(loom_plex *p, loom_tl_group g, uint32_t tag);
uint32_t loom_plex_tag(const loom_plex *p, loom_tl_group g);
/* Decide and commit for job id (> 0, unused). If !out->placed nothing changed. */
int loom_plex_place(loom_plex *p, uint32_t id, const loom_plex_job *j, loom_plex_decision *out,
                    loom_err *e);
/* After a cold-started job's first cycle: it is profiled now; move it to the best other group
 * that fits (its dedicated group is freed) or leave it. out->new_group false and
 * out->group != old group means it moved. */
int loom_plex_repack(loom_plex *p, uint32_t id, loom_plex_decision *out);
/* The job leaves; a group left empty gives its nodes back. */
int loom_plex_release(loom_plex *p, uint32_t id);
/* The job's group and phase shift; LOOM_ENOENT if not placed. */
int loom_plex_job_group(const loom_plex *p, uint32_t id, loom_tl_group *g, int32_t *offset);
/* Live groups and their resident jobs. */
int loom_plex_groups(const loom_plex *p);

#endif
