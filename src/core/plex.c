/*
 * plex.c - PlexRL placement (§4.3.2) on the cyclic timeline: cold start on a dedicated group,
 * repacking after one profiled cycle, warm-start fitting by phase shift (Eq. 1-2), ranking by
 * interference with residents, and the duty-ratio bound (§7.2).
 *
 * Time is turned into slots conservatively: a segment covers every slot it touches and the
 * period is rounded up, so a reservation is never shorter than the demand it stands for.
 * The per-group bookkeeping here (members, longest free window) exists only to prune groups in
 * O(1) before the Eq. 2 search; the timeline owns every reservation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/timeline.h"

typedef struct pj {
        bool live;
        loom_tl_group g;
        int32_t offset, busy;
        loom_plex_job spec;
} pj;

typedef struct pg {
        int n;
        uint32_t tag;
        uint32_t *members;
        int32_t longest; /* longest free window, slots (across the wrap) */
        int nodes;
        int32_t busy, min_busy; /* busy slots of the group; least of one resident */
} pg;

/* The pruning tree over groups: each node bounds its subtree's groups, so a search skips every
 * group that the O(1) tests would reject without touching it (range-min of busy time,
 * range-max of the longest free window, the largest node count: a job joins a group of at
 * least its nodes). */
typedef struct tnode {
        int max_nodes;
        int32_t max_longest;
        int32_t min_busy;   /* group busy slots */
        int32_t min_others; /* busy slots not of its least busy resident */
} tnode;

typedef struct size_count {
        int nodes, groups;
} size_count;

struct loom_plex {
        loom_plex_cfg c;
        loom_timeline *t;
        pj *j;
        size_t cap_j;
        pg *g; /* indexed by timeline group id */
        size_t cap_g;
        uint32_t n_g;
        loom_tl_win *wbuf;
        size_t cap_wbuf;
        tnode *tree; /* 2 * tree_leaves nodes, root at 1 */
        size_t tree_leaves;
        size_count *sizes; /* live groups per node count */
        int n_sizes;
        size_t cap_sizes;
};

/* A job's footprint in slots. */
typedef struct fp {
        loom_tl_seg seg[LOOM_PLEX_MAX_SEGS];
        loom_tl_footprint f;
        int32_t longest, busy; /* longest segment; busy slots over the horizon */
} fp;

const char *loom_plex_mode_name(loom_plex_mode m)
{
        switch (m) {
        case LOOM_PLEX_SPREAD:
                return "spread";
        case LOOM_PLEX_PACK:
                return "pack";
        case LOOM_PLEX_ISOLATED:
                return "isolated";
        }
        return "?";
}

void loom_plex_cfg_default(loom_plex_cfg *c)
{
        memset(c, 0, sizeof *c);
        c->slots = LOOM_TL_DEFAULT_SLOTS;
        c->slot_us = LOOM_US_PER_S;
        c->nodes = 0;
        loom_tl_fit_cfg_default(&c->fit);
        c->duty_max = 0.75;
        c->guard = 10 * LOOM_US_PER_S;
        c->max_jobs = 16;
        c->mode = LOOM_PLEX_SPREAD;
}

void loom_plex_job_from_calls(loom_plex_job *j, int nodes, loom_us t_roll, const loom_us *calls,
                              int n_calls, loom_us setup, bool profiled)
{
        memset(j, 0, sizeof *j);
        loom_us train = 0;
        for (int i = 0; i < n_calls; i++)
                train += calls[i];
        loom_us at = t_roll > setup ? t_roll - setup : 0;
        j->nodes = nodes;
        j->period = t_roll + train;
        j->n_seg = 1;
        j->seg_at[0] = at;
        j->seg_len[0] = t_roll + train - at;
        j->profiled = profiled;
}

loom_plex *loom_plex_new(const loom_plex_cfg *c, loom_err *e)
{
        if (c->fit.alpha < 0 || c->fit.alpha > 1) {
                loom_err_set(e, LOOM_EINVAL, "alpha", "must be in [0, 1], got %g", c->fit.alpha);
                return NULL;
        }
        if (c->fit.w1 < 0 || c->fit.w2 < 0) {
                loom_err_set(e, LOOM_EINVAL, c->fit.w1 < 0 ? "w1" : "w2", "must be >= 0");
                return NULL;
        }
        if (!(c->duty_max > 0 && c->duty_max <= 1)) {
                loom_err_set(e, LOOM_EINVAL, "duty_max", "must be in (0, 1], got %g", c->duty_max);
                return NULL;
        }
        if (c->max_jobs < 1 || c->mode > LOOM_PLEX_ISOLATED || c->guard < 0) {
                loom_err_set(e, LOOM_EINVAL, c->max_jobs < 1 ? "max_jobs" : "mode", "out of range");
                return NULL;
        }
        loom_plex *p = calloc(1, sizeof *p);
        if (!p) {
                loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                return NULL;
        }
        p->c = *c;
        if (!(p->t = loom_timeline_new(c->slots, c->slot_us, c->nodes, e))) {
                free(p);
                return NULL;
        }
        return p;
}

void loom_plex_free(loom_plex *p)
{
        if (!p)
                return;
        for (uint32_t i = 0; i < p->n_g; i++)
                free(p->g[i].members);
        free(p->g);
        free(p->j);
        free(p->wbuf);
        free(p->tree);
        free(p->sizes);
        loom_timeline_free(p->t);
        free(p);
}

const loom_timeline *loom_plex_timeline(const loom_plex *p)
{
        return p->t;
}

const loom_plex_cfg *loom_plex_config(const loom_plex *p)
{
        return &p->c;
}

static int to_fp(const loom_plex *p, const loom_plex_job *j, fp *o, loom_err *e)
{
        const loom_timeline *t = p->t;
        if (j->nodes < 1)
                return loom_err_set(e, LOOM_EINVAL, "nodes", "must be >= 1, got %d", j->nodes);
        if (j->n_seg < 1 || j->n_seg > LOOM_PLEX_MAX_SEGS)
                return loom_err_set(e, LOOM_EINVAL, "segments", "need 1..%d, got %d",
                                    LOOM_PLEX_MAX_SEGS, j->n_seg);
        int32_t period = loom_timeline_span(t, j->period);
        if (j->period <= 0 || period >= loom_timeline_slots(t))
                return loom_err_set(e, LOOM_EINVAL, "period",
                                    "must be positive and shorter than the horizon");
        memset(o, 0, sizeof *o);
        int32_t reps;
        for (int i = 0; i < j->n_seg; i++) {
                if (j->seg_at[i] < 0 || j->seg_len[i] <= 0 ||
                    j->seg_at[i] + j->seg_len[i] > j->period)
                        return loom_err_set(e, LOOM_EINVAL, "segments",
                                            "segment %d must lie within the period", i);
                int32_t a = (int32_t)(j->seg_at[i] / loom_timeline_slot_us(t));
                int32_t end = loom_timeline_span(t, j->seg_at[i] + j->seg_len[i]);
                o->seg[i] = (loom_tl_seg){a, end - a};
                if (end - a > o->longest)
                        o->longest = end - a;
                o->busy += end - a;
        }
        /* Sort by offset and merge what rounding to slots made overlap or touch. */
        for (int i = 1; i < j->n_seg; i++)
                for (int k = i; k > 0 && o->seg[k].a < o->seg[k - 1].a; k--) {
                        loom_tl_seg x = o->seg[k];
                        o->seg[k] = o->seg[k - 1];
                        o->seg[k - 1] = x;
                }
        int n = 0;
        for (int i = 0; i < j->n_seg; i++) {
                if (n && o->seg[i].a <= o->seg[n - 1].a + o->seg[n - 1].d) {
                        int32_t to = o->seg[i].a + o->seg[i].d;
                        if (to > o->seg[n - 1].a + o->seg[n - 1].d)
                                o->seg[n - 1].d = to - o->seg[n - 1].a;
                } else {
                        o->seg[n++] = o->seg[i];
                }
        }
        o->busy = 0;
        o->longest = 0;
        int32_t end = 0;
        for (int i = 0; i < n; i++) {
                o->busy += o->seg[i].d;
                if (o->seg[i].d > o->longest)
                        o->longest = o->seg[i].d;
                if (o->seg[i].a + o->seg[i].d > end)
                        end = o->seg[i].a + o->seg[i].d;
        }
        if (end > period)
                return loom_err_set(e, LOOM_EINVAL, "segments", "segments overrun the period");
        reps = (loom_timeline_slots(t) - end) / period + 1;
        o->busy *= reps;
        o->f = (loom_tl_footprint){o->seg, n, period, 0};
        return 0;
}

/* Smallest busy share among g's residents, slots. */
static int32_t min_resident_busy(const loom_plex *p, const pg *g)
{
        int32_t m = INT32_MAX;
        for (int i = 0; i < g->n; i++)
                if (p->j[g->members[i]].busy < m)
                        m = p->j[g->members[i]].busy;
        return m;
}

/* O(1) bounds on cached numbers: an outcome, or -1 when the group is worth fitting. */
static int prune(const loom_plex *p, loom_tl_group gi, const fp *f)
{
        const pg *g = &p->g[gi];
        if (g->n >= p->c.max_jobs)
                return LOOM_PLEX_PRUNED_FULL;
        if (g->longest < f->longest)
                return LOOM_PLEX_PRUNED_WINDOW;
        int32_t B = g->busy, m = g->min_busy;
        int32_t own = m < f->busy ? m : f->busy;
        double foreign = (double)(B + f->busy - own) / loom_timeline_slots(p->t);
        if (foreign > p->c.duty_max)
                return LOOM_PLEX_PRUNED_DUTY;
        return -1;
}

typedef struct pick {
        bool have;
        loom_tl_group g;
        int32_t shift, slack, busy;
        int nodes;
        double cost;
} pick;

static bool better(const loom_plex *p, const pick *a, const pick *b)
{
        int32_t guard = loom_timeline_span(p->t, p->c.guard);
        int32_t sa = a->slack < guard ? a->slack : guard, sb = b->slack < guard ? b->slack : guard;
        if (p->c.mode == LOOM_PLEX_PACK && a->busy != b->busy)
                return a->busy > b->busy;
        if (a->cost != b->cost)
                return a->cost < b->cost;
        if (a->nodes != b->nodes) /* fewer nodes left idle during the job's segments */
                return a->nodes < b->nodes;
        if (sa != sb)
                return sa > sb;
        return a->g < b->g;
}

typedef bool (*accept_fn)(void *ctx, loom_tl_group g);

typedef struct noter {
        loom_plex_note_fn fn;
        void *ctx;
} noter;

/* One decision's search state. */
typedef struct search {
        const loom_plex *p;
        const loom_plex_job *j;
        fp *f;
        loom_tl_group exclude;
        accept_fn accept;
        void *ctx;
        const noter *nt;
        loom_plex_decision *o;
        pick b;
        int32_t guard;
        bool stop;
} search;

/* Look at group gi (live, not excluded). */
static void visit(search *x, loom_tl_group gi)
{
        const loom_plex *p = x->p;
        const pg *g = &p->g[gi];
        if (g->nodes < x->j->nodes) { /* only when explaining: the tree skips these */
                if (x->nt)
                        x->nt->fn(x->nt->ctx, gi, LOOM_PLEX_TOO_SMALL, 0, 0, 0);
                return;
        }
        int why = prune(p, gi, x->f);
        if (why < 0 && x->accept && !x->accept(x->ctx, gi))
                why = LOOM_PLEX_PRUNED_DRIVER;
        if (why >= 0) {
                if (x->nt)
                        x->nt->fn(x->nt->ctx, gi, (loom_plex_outcome)why, 0, 0, 0);
                return;
        }
        x->o->groups_fitted++;
        pick c = {.have = true, .g = gi};
        if (loom_timeline_fit(p->t, gi, &p->c.fit, &x->f->f, &c.shift, &c.cost, &c.slack)) {
                if (x->nt)
                        x->nt->fn(x->nt->ctx, gi, LOOM_PLEX_NO_FIT, 0, 0, 0);
                return;
        }
        /* The least feasible shift is the Eq. 1 optimum, so past the cap nothing fits. */
        if (x->j->capped &&
            (int64_t)c.shift * loom_timeline_slot_us(p->t) > (int64_t)x->j->max_shift) {
                if (x->nt)
                        x->nt->fn(x->nt->ctx, gi, LOOM_PLEX_SLO, c.shift, c.cost, c.slack);
                return;
        }
        if (x->nt)
                x->nt->fn(x->nt->ctx, gi, LOOM_PLEX_FITS, c.shift, c.cost, c.slack);
        c.busy = g->busy;
        c.nodes = g->nodes;
        if (!x->b.have || better(p, &c, &x->b))
                x->b = c;
        /* Spread: no shift and full slack on a group of the job's size cannot be beaten. */
        if (p->c.mode == LOOM_PLEX_SPREAD && x->b.shift == 0 && x->b.slack >= x->guard &&
            x->b.nodes == x->j->nodes)
                x->stop = true;
}

/* Could some group under tree node t pass the O(1) bounds? (Exact at a leaf.) */
static bool tree_may(const search *x, const tnode *t)
{
        double D = x->p->c.duty_max * loom_timeline_slots(x->p->t);
        return x->j->nodes <= t->max_nodes && t->max_longest >= x->f->longest && t->min_busy <= D &&
               (double)t->min_others + x->f->busy <= D;
}

/* Visit, in ascending group order, the groups whose subtree bounds allow them. */
static void tree_walk(search *x, size_t node, size_t lo, size_t hi)
{
        const loom_plex *p = x->p;
        if (x->stop || lo >= p->n_g || !tree_may(x, &p->tree[node]))
                return;
        if (hi - lo == 1) {
                if ((loom_tl_group)lo != x->exclude)
                        visit(x, (loom_tl_group)lo);
                return;
        }
        size_t mid = lo + (hi - lo) / 2;
        tree_walk(x, 2 * node, lo, mid);
        tree_walk(x, 2 * node + 1, mid, hi);
}

static void choose(const loom_plex *p, const loom_plex_job *j, fp *f, loom_tl_group exclude,
                   accept_fn accept, void *ctx, const noter *nt, loom_plex_decision *o)
{
        memset(o, 0, sizeof *o);
        o->group = LOOM_TL_NO_GROUP;
        search x = {
            p, j, f, exclude, accept, ctx, nt, o, {0}, loom_timeline_span(p->t, p->c.guard), false};
        bool share = p->c.mode != LOOM_PLEX_ISOLATED && j->profiled;
        for (int i = 0; share && i < p->n_sizes; i++)
                if (p->sizes[i].nodes >= j->nodes)
                        o->groups_seen += p->sizes[i].groups;
        if (share && exclude < p->n_g && p->g[exclude].n > 0 && p->g[exclude].nodes >= j->nodes)
                o->groups_seen--;
        if (share && nt) { /* explaining: every group, in order, each with its verdict */
                for (uint32_t gi = 0; gi < p->n_g && !x.stop; gi++)
                        if (p->g[gi].n > 0 && gi != exclude)
                                visit(&x, gi);
        } else if (share && p->tree_leaves) {
                tree_walk(&x, 1, 0, p->tree_leaves);
        }
        o->groups_pruned = o->groups_seen - o->groups_fitted;
        pick b = x.b;
        if (b.have) {
                o->placed = true;
                o->group = b.g;
                o->shift = b.shift;
                o->cost = b.cost;
                o->slack = b.slack;
                snprintf(o->why, sizeof o->why,
                         "fits group %u at shift %d s (Eq. 1 cost %.4f, slack %d s)", (unsigned)b.g,
                         (int)b.shift, b.cost, (int)b.slack);
                return;
        }
        o->new_group = true;
        o->cold = !j->profiled;
        o->placed = loom_timeline_unassigned(p->t) >= j->nodes;
        snprintf(o->why, sizeof o->why, "%s; %s",
                 !j->profiled ? "cold start: a dedicated group to profile one cycle"
                 : p->c.mode == LOOM_PLEX_ISOLATED ? "isolated: a dedicated group"
                                                   : "no group fits",
                 o->placed ? "new group from unassigned nodes" : "too few unassigned nodes");
}

int loom_plex_decide(const loom_plex *p, const loom_plex_job *j, loom_plex_decision *out,
                     loom_err *e)
{
        fp f;
        int rc = to_fp(p, j, &f, e);
        if (rc)
                return rc;
        choose(p, j, &f, LOOM_TL_NO_GROUP, NULL, NULL, NULL, out);
        return 0;
}

static const tnode dead = {INT32_MIN, -1, INT32_MAX, INT32_MAX};

static tnode combine(const tnode *a, const tnode *b)
{
        tnode t;
        t.max_nodes = a->max_nodes > b->max_nodes ? a->max_nodes : b->max_nodes;
        t.max_longest = a->max_longest > b->max_longest ? a->max_longest : b->max_longest;
        t.min_busy = a->min_busy < b->min_busy ? a->min_busy : b->min_busy;
        t.min_others = a->min_others < b->min_others ? a->min_others : b->min_others;
        return t;
}

static tnode leaf_of(const loom_plex *p, loom_tl_group gi)
{
        const pg *g = &p->g[gi];
        if (g->n == 0 || g->n >= p->c.max_jobs)
                return dead; /* empty, or full: no job may join */
        return (tnode){g->nodes, g->longest, g->busy, g->busy - g->min_busy};
}

static void tree_update(loom_plex *p, loom_tl_group gi)
{
        if (gi >= p->tree_leaves)
                return;
        size_t x = p->tree_leaves + gi;
        p->tree[x] = leaf_of(p, gi);
        for (x /= 2; x >= 1; x /= 2)
                p->tree[x] = combine(&p->tree[2 * x], &p->tree[2 * x + 1]);
}

/* Room for `groups` leaves; rebuilt from the group table when it grows. */
static int tree_reserve(loom_plex *p, size_t groups)
{
        if (groups <= p->tree_leaves)
                return 0;
        size_t n = p->tree_leaves ? p->tree_leaves : 16;
        while (n < groups)
                n *= 2;
        tnode *t = malloc(sizeof *t * 2 * n);
        if (!t)
                return LOOM_ENOMEM;
        for (size_t i = 0; i < 2 * n; i++)
                t[i] = dead;
        for (uint32_t gi = 0; gi < p->n_g; gi++)
                t[n + gi] = leaf_of(p, gi);
        for (size_t x = n - 1; x >= 1; x--)
                t[x] = combine(&t[2 * x], &t[2 * x + 1]);
        free(p->tree);
        p->tree = t;
        p->tree_leaves = n;
        return 0;
}

static void count_size(loom_plex *p, int nodes, int delta)
{
        for (int i = 0; i < p->n_sizes; i++)
                if (p->sizes[i].nodes == nodes) {
                        p->sizes[i].groups += delta;
                        return;
                }
        /* room is reserved by ensure_tables before a group is made */
        p->sizes[p->n_sizes++] = (size_count){nodes, delta};
}

/* The longest free window of group gi, across the wrap. */
static int refresh_group(loom_plex *p, loom_tl_group gi)
{
        int n = loom_timeline_group_windows(p->t, gi, NULL, 0);
        if (loom_reserve(&p->wbuf, &p->cap_wbuf, (size_t)n + 1, sizeof *p->wbuf, 64))
                return LOOM_ENOMEM;
        loom_timeline_group_windows(p->t, gi, p->wbuf, n);
        int32_t L = loom_timeline_slots(p->t), longest = 0;
        for (int i = 0; i < n; i++)
                if (p->wbuf[i].e - p->wbuf[i].s > longest)
                        longest = p->wbuf[i].e - p->wbuf[i].s;
        if (n > 1 && p->wbuf[0].s == 0 && p->wbuf[n - 1].e == L &&
            p->wbuf[0].e + L - p->wbuf[n - 1].s > longest)
                longest = p->wbuf[0].e + L - p->wbuf[n - 1].s;
        pg *g = &p->g[gi];
        g->longest = longest;
        g->nodes = loom_timeline_group_nodes(p->t, gi);
        g->busy = loom_timeline_group_busy(p->t, gi);
        g->min_busy = min_resident_busy(p, g);
        tree_update(p, gi);
        return 0;
}

static int commit(loom_plex *p, uint32_t id, const loom_plex_job *j, fp *f, loom_tl_group gi,
                  int32_t offset, loom_err *e)
{
        f->f.offset = offset;
        pg *g = &p->g[gi];
        if (!g->members && !(g->members = calloc((size_t)p->c.max_jobs, sizeof *g->members)))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int rc = loom_timeline_commit(p->t, gi, id, &f->f, e);
        if (rc)
                return rc;
        g->members[g->n++] = id;
        p->j[id] = (pj){true, gi, offset, f->busy, *j};
        return refresh_group(p, gi);
}

/* A job id to place must be nonzero and not placed already. */
static int check_new_id(const loom_plex *p, uint32_t id, loom_err *e)
{
        if (id == 0 || (id < p->cap_j && p->j[id].live))
                return loom_err_set(e, LOOM_EEXIST, "job", "job id %u is 0 or placed already",
                                    (unsigned)id);
        return 0;
}

static int ensure_tables(loom_plex *p, uint32_t id)
{
        size_t oj = p->cap_j, og = p->cap_g;
        if (loom_reserve(&p->j, &p->cap_j, (size_t)id + 1, sizeof *p->j, 64) ||
            loom_reserve(&p->g, &p->cap_g, (size_t)p->n_g + 1, sizeof *p->g, 16))
                return LOOM_ENOMEM;
        memset(p->j + oj, 0, (p->cap_j - oj) * sizeof *p->j);
        memset(p->g + og, 0, (p->cap_g - og) * sizeof *p->g);
        if (tree_reserve(p, (size_t)p->n_g + 1) ||
            loom_reserve(&p->sizes, &p->cap_sizes, (size_t)p->n_sizes + 1, sizeof *p->sizes, 4))
                return LOOM_ENOMEM;
        return 0;
}

static int place_at(loom_plex *p, uint32_t id, const loom_plex_job *j, fp *f, loom_plex_decision *o,
                    loom_err *e)
{
        if (o->new_group) {
                loom_tl_group gi;
                int rc = loom_timeline_group_new(p->t, j->nodes, &gi, e);
                if (rc)
                        return rc;
                p->n_g = gi + 1;
                o->group = gi;
                o->shift = 0;
        }
        int rc = commit(p, id, j, f, o->group, o->shift, e);
        if (rc && o->new_group)
                loom_timeline_group_free(p->t, o->group);
        else if (o->new_group)
                count_size(p, j->nodes, +1);
        return rc;
}

int loom_plex_place(loom_plex *p, uint32_t id, const loom_plex_job *j, loom_plex_decision *out,
                    loom_err *e)
{
        fp f;
        int rc = to_fp(p, j, &f, e);
        if (rc)
                return rc;
        if ((rc = check_new_id(p, id, e)))
                return rc;
        if ((rc = ensure_tables(p, id)))
                return loom_err_set(e, rc, "", "out of memory");
        choose(p, j, &f, LOOM_TL_NO_GROUP, NULL, NULL, NULL, out);
        if (!out->placed)
                return 0;
        return place_at(p, id, j, &f, out, e);
}

static void drop_member(loom_plex *p, pj *x, uint32_t id)
{
        pg *g = &p->g[x->g];
        for (int i = 0; i < g->n; i++)
                if (g->members[i] == id) {
                        g->members[i] = g->members[--g->n];
                        break;
                }
        loom_timeline_release(p->t, id);
        if (g->n == 0) {
                loom_timeline_group_free(p->t, x->g);
                count_size(p, g->nodes, -1);
                tree_update(p, x->g);
        } else {
                refresh_group(p, x->g);
        }
        x->live = false;
}

int loom_plex_decide_explain(const loom_plex *p, const loom_plex_job *j, accept_fn accept,
                             void *ctx, loom_plex_note_fn note, void *nctx, loom_plex_decision *out,
                             loom_err *e)
{
        fp f;
        int rc = to_fp(p, j, &f, e);
        if (rc)
                return rc;
        noter nt = {note, nctx};
        choose(p, j, &f, LOOM_TL_NO_GROUP, accept, ctx, note ? &nt : NULL, out);
        return 0;
}

int loom_plex_decide_if(const loom_plex *p, const loom_plex_job *j, accept_fn accept, void *ctx,
                        loom_plex_decision *out, loom_err *e)
{
        return loom_plex_decide_explain(p, j, accept, ctx, NULL, NULL, out, e);
}

int loom_plex_commit(loom_plex *p, uint32_t id, const loom_plex_job *j, loom_plex_decision *d,
                     loom_err *e)
{
        fp f;
        int rc = to_fp(p, j, &f, e);
        if (rc)
                return rc;
        if (!d->placed)
                return loom_err_set(e, LOOM_EREJECT, "group", "the decision placed nothing");
        if ((rc = check_new_id(p, id, e)))
                return rc;
        if (!d->new_group && (d->group >= p->n_g || p->g[d->group].n == 0))
                return loom_err_set(e, LOOM_ENOENT, "group", "no group %u", (unsigned)d->group);
        if ((rc = ensure_tables(p, id)))
                return loom_err_set(e, rc, "", "out of memory");
        return place_at(p, id, j, &f, d, e);
}

void loom_plex_set_tag(loom_plex *p, loom_tl_group g, uint32_t tag)
{
        if (g < p->n_g)
                p->g[g].tag = tag;
}

uint32_t loom_plex_tag(const loom_plex *p, loom_tl_group g)
{
        return g < p->n_g ? p->g[g].tag : 0;
}

int loom_plex_repack(loom_plex *p, uint32_t id, loom_plex_decision *out)
{
        if (id >= p->cap_j || !p->j[id].live)
                return LOOM_ENOENT;
        pj *x = &p->j[id];
        loom_plex_job spec = x->spec;
        spec.profiled = true;
        fp f;
        if (to_fp(p, &spec, &f, NULL))
                return LOOM_EINVAL;
        loom_tl_group old = x->g;
        choose(p, &spec, &f, old, NULL, NULL, NULL, out);
        if (!out->placed || out->new_group) {
                /* Stay: the dedicated group becomes an ordinary one others may join. */
                x->spec.profiled = true;
                memset(out, 0, sizeof *out);
                out->placed = true;
                out->group = old;
                out->shift = x->offset;
                snprintf(out->why, sizeof out->why, "no better group: stays in group %u",
                         (unsigned)old);
                return 0;
        }
        /* Move the reservation; if the new commit fails (out of memory), restore the old. */
        pg *og = &p->g[old], *ng = &p->g[out->group];
        fp of = f;
        of.f.offset = x->offset;
        loom_timeline_release(p->t, id);
        f.f.offset = out->shift;
        int rc = loom_timeline_commit(p->t, out->group, id, &f.f, NULL);
        if (rc) {
                loom_timeline_commit(p->t, old, id, &of.f, NULL);
                return rc;
        }
        for (int i = 0; i < og->n; i++)
                if (og->members[i] == id) {
                        og->members[i] = og->members[--og->n];
                        break;
                }
        ng->members[ng->n++] = id; /* a fitted group has members, so its array exists */
        x->g = out->group;
        x->offset = out->shift;
        x->spec = spec;
        if (og->n == 0) {
                loom_timeline_group_free(p->t, old);
                count_size(p, og->nodes, -1);
                tree_update(p, old);
        } else {
                refresh_group(p, old);
        }
        refresh_group(p, out->group);
        return 0;
}

int loom_plex_release(loom_plex *p, uint32_t id)
{
        if (id == 0 || id >= p->cap_j || !p->j[id].live)
                return LOOM_ENOENT;
        drop_member(p, &p->j[id], id);
        return 0;
}

int loom_plex_job_group(const loom_plex *p, uint32_t id, loom_tl_group *g, int32_t *offset)
{
        if (id == 0 || id >= p->cap_j || !p->j[id].live)
                return LOOM_ENOENT;
        if (g)
                *g = p->j[id].g;
        if (offset)
                *offset = p->j[id].offset;
        return 0;
}

int loom_plex_groups(const loom_plex *p)
{
        int n = 0;
        for (uint32_t i = 0; i < p->n_g; i++)
                n += p->g[i].n > 0;
        return n;
}
