/*
 * timeline.c - PlexRL's cyclic spatio-temporal timeline (see include/loom/timeline.h).
 *
 * Three structures, kept consistent by commit/release:
 *   - `mn`/`lz`: a segment tree over the L slots with lazy range-add and range-min, holding
 *     the free nodes per slot (the global capacity profile);
 *   - per node group, its free windows: a sorted array of disjoint [s, e) slot intervals;
 *   - per committed job, its footprint expanded over the horizon into sorted, wrap-split
 *     pieces, so release is a merge.
 * Invariant (loom_timeline_check): free(t) = unassigned + sum of nodes of the groups free at t,
 * and a group's pieces never overlap each other, so no slot is ever over-committed.
 *
 * A job's repetitions are reserved while they end within one horizon of its phase
 * (k * T + max(a + d) <= L): the horizon is a planning window, so the instances never alias
 * each other modulo L.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/timeline.h"

typedef struct tl_group {
        bool live;
        int nodes, jobs;
        int32_t busy;
        loom_tl_win *w; /* free windows, sorted */
        int nw;
        size_t cap;
} tl_group;

typedef struct tl_job {
        loom_tl_group g; /* LOOM_TL_NO_GROUP when none */
        loom_tl_win *piece;
        int np;
} tl_job;

struct loom_timeline {
        int32_t L;
        loom_us slot_us;
        int nodes, unassigned;
        int32_t *mn, *lz; /* segment tree, 4L entries each */
        tl_group *g;
        size_t cap_g;
        uint32_t n_g;
        tl_job *j; /* indexed by job id */
        size_t cap_j;
        loom_tl_win *scratch; /* expanded instances of a footprint */
        size_t cap_scratch;
};

void loom_tl_fit_cfg_default(loom_tl_fit_cfg *c)
{
        c->alpha = 0.5;
        c->w1 = 1.0;
        c->w2 = 0.25;
}

/* ---- plain window lists (Eq. 1-2) ---------------------------------------------------------- */

/* Index of the last window with s <= p, or -1. */
static int win_at(const loom_tl_win *w, int nw, int64_t p)
{
        int lo = 0, hi = nw - 1, r = -1;
        while (lo <= hi) {
                int mid = lo + (hi - lo) / 2;
                if (w[mid].s <= p)
                        r = mid, lo = mid + 1;
                else
                        hi = mid - 1;
        }
        return r;
}

bool loom_tl_fits_at(const loom_tl_win *w, int nw, const loom_tl_seg *seg, int ns, int32_t delta)
{
        for (int i = 0; i < ns; i++) {
                int64_t p = (int64_t)seg[i].a + delta;
                int k = win_at(w, nw, p);
                if (k < 0 || p + seg[i].d > w[k].e)
                        return false;
        }
        return true;
}

double loom_tl_cost(const loom_tl_fit_cfg *c, const loom_tl_seg *seg, int ns, int32_t period,
                    int32_t delta)
{
        int64_t end = 0;
        for (int i = 0; i < ns; i++)
                if ((int64_t)seg[i].a + seg[i].d > end)
                        end = (int64_t)seg[i].a + seg[i].d;
        int64_t t_end = end + delta > period ? end + delta : period;
        return c->w1 * (double)(t_end - period) / period + c->w2 * (double)delta / period;
}

int loom_tl_fit(const loom_tl_fit_cfg *c, const loom_tl_win *w, int nw, const loom_tl_seg *seg,
                int ns, int32_t period, int32_t *delta, double *cost)
{
        int64_t hi = (int64_t)(c->alpha * period), dlt = 0;
        /* Eq. 1 never decreases with delta, so the least feasible shift is the best: jump to
         * the next window start whenever a segment does not fit. */
        while (dlt <= hi) {
                int64_t next = -1;
                for (int i = 0; i < ns && next < 0; i++) {
                        int64_t p = (int64_t)seg[i].a + dlt;
                        int k = win_at(w, nw, p);
                        if (k >= 0 && p + seg[i].d <= w[k].e)
                                continue;
                        int m = k + 1;
                        while (m < nw && w[m].e - w[m].s < seg[i].d)
                                m++;
                        next = m < nw ? dlt + (w[m].s - p) : hi + 1;
                }
                if (next < 0) {
                        *delta = (int32_t)dlt;
                        *cost = loom_tl_cost(c, seg, ns, period, (int32_t)dlt);
                        return 0;
                }
                dlt = next;
        }
        return LOOM_EREJECT;
}

/* ---- segment tree: free nodes per slot ---------------------------------------------------- */

static void st_build(loom_timeline *t, int x, int32_t l, int32_t r)
{
        t->lz[x] = 0;
        if (l == r) {
                t->mn[x] = t->nodes;
                return;
        }
        int32_t m = l + (r - l) / 2;
        st_build(t, 2 * x, l, m);
        st_build(t, 2 * x + 1, m + 1, r);
        t->mn[x] = t->nodes;
}

static void st_add(loom_timeline *t, int x, int32_t l, int32_t r, int32_t a, int32_t b, int32_t v)
{
        if (b < l || r < a)
                return;
        if (a <= l && r <= b) {
                t->mn[x] += v;
                t->lz[x] += v;
                return;
        }
        int32_t m = l + (r - l) / 2;
        st_add(t, 2 * x, l, m, a, b, v);
        st_add(t, 2 * x + 1, m + 1, r, a, b, v);
        int32_t lo = t->mn[2 * x] < t->mn[2 * x + 1] ? t->mn[2 * x] : t->mn[2 * x + 1];
        t->mn[x] = lo + t->lz[x];
}

static int32_t st_min(const loom_timeline *t, int x, int32_t l, int32_t r, int32_t a, int32_t b)
{
        if (b < l || r < a)
                return INT32_MAX;
        if (a <= l && r <= b)
                return t->mn[x];
        int32_t m = l + (r - l) / 2;
        int32_t u = st_min(t, 2 * x, l, m, a, b), v = st_min(t, 2 * x + 1, m + 1, r, a, b);
        return (u < v ? u : v) + t->lz[x];
}

/* ---- the timeline ---------------------------------------------------------------------- */

loom_timeline *loom_timeline_new(int32_t slots, loom_us slot_us, int nodes, loom_err *e)
{
        if (slots < 1 || slots > (1 << 24)) {
                loom_err_set(e, LOOM_EINVAL, "slots", "must be in 1..%d, got %d", 1 << 24,
                             (int)slots);
                return NULL;
        }
        if (slot_us < 1 || nodes < 0) {
                loom_err_set(e, LOOM_EINVAL, slot_us < 1 ? "slot" : "nodes", "must be positive");
                return NULL;
        }
        loom_timeline *t = calloc(1, sizeof *t);
        if (t) {
                t->mn = malloc(sizeof(int32_t) * 4 * (size_t)slots);
                t->lz = malloc(sizeof(int32_t) * 4 * (size_t)slots);
        }
        if (!t || !t->mn || !t->lz) {
                loom_timeline_free(t);
                loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                return NULL;
        }
        t->L = slots;
        t->slot_us = slot_us;
        t->nodes = t->unassigned = nodes;
        st_build(t, 1, 0, slots - 1);
        return t;
}

void loom_timeline_free(loom_timeline *t)
{
        if (!t)
                return;
        for (uint32_t i = 0; i < t->n_g; i++)
                free(t->g[i].w);
        for (size_t i = 0; i < t->cap_j; i++)
                free(t->j[i].piece);
        free(t->g);
        free(t->j);
        free(t->scratch);
        free(t->mn);
        free(t->lz);
        free(t);
}

int32_t loom_timeline_slots(const loom_timeline *t)
{
        return t->L;
}

loom_us loom_timeline_slot_us(const loom_timeline *t)
{
        return t->slot_us;
}

int32_t loom_timeline_slot_of(const loom_timeline *t, loom_us at)
{
        int64_t s = at / t->slot_us, L = t->L;
        return (int32_t)(((s % L) + L) % L);
}

int32_t loom_timeline_span(const loom_timeline *t, loom_us d)
{
        if (d <= 0)
                return 0;
        int64_t s = (d + t->slot_us - 1) / t->slot_us;
        return s > t->L ? t->L : (int32_t)s;
}

int loom_timeline_min_free(const loom_timeline *t, int32_t from, int32_t len)
{
        if (len <= 0)
                return t->nodes;
        if (len >= t->L)
                return t->mn[1];
        from = (int32_t)(((int64_t)from % t->L + t->L) % t->L);
        int64_t end = (int64_t)from + len;
        if (end <= t->L)
                return st_min(t, 1, 0, t->L - 1, from, (int32_t)end - 1);
        int32_t u = st_min(t, 1, 0, t->L - 1, from, t->L - 1);
        int32_t v = st_min(t, 1, 0, t->L - 1, 0, (int32_t)(end - t->L) - 1);
        return u < v ? u : v;
}

int loom_timeline_unassigned(const loom_timeline *t)
{
        return t->unassigned;
}

static tl_group *group_get(const loom_timeline *t, loom_tl_group g)
{
        return g < t->n_g && t->g[g].live ? &t->g[g] : NULL;
}

int loom_timeline_group_new(loom_timeline *t, int nodes, loom_tl_group *out, loom_err *e)
{
        if (nodes < 1)
                return loom_err_set(e, LOOM_EINVAL, "nodes", "must be >= 1, got %d", nodes);
        if (nodes > t->unassigned)
                return loom_err_set(e, LOOM_EREJECT, "nodes", "%d nodes asked, %d unassigned",
                                    nodes, t->unassigned);
        if (loom_reserve(&t->g, &t->cap_g, t->n_g + 1, sizeof *t->g, 16))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        tl_group *g = &t->g[t->n_g];
        memset(g, 0, sizeof *g);
        if (loom_reserve(&g->w, &g->cap, 1, sizeof *g->w, 8))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        g->w[0] = (loom_tl_win){0, t->L};
        g->nw = 1;
        g->nodes = nodes;
        g->live = true;
        t->unassigned -= nodes;
        *out = t->n_g++;
        return 0;
}

int loom_timeline_group_free(loom_timeline *t, loom_tl_group id)
{
        tl_group *g = group_get(t, id);
        if (!g)
                return LOOM_ENOENT;
        if (g->jobs)
                return LOOM_ESTATE;
        t->unassigned += g->nodes;
        free(g->w);
        memset(g, 0, sizeof *g);
        return 0;
}

int loom_timeline_group_nodes(const loom_timeline *t, loom_tl_group id)
{
        const tl_group *g = group_get(t, id);
        return g ? g->nodes : 0;
}

int loom_timeline_group_jobs(const loom_timeline *t, loom_tl_group id)
{
        const tl_group *g = group_get(t, id);
        return g ? g->jobs : 0;
}

int32_t loom_timeline_group_busy(const loom_timeline *t, loom_tl_group id)
{
        const tl_group *g = group_get(t, id);
        return g ? g->busy : 0;
}

int loom_timeline_group_windows(const loom_timeline *t, loom_tl_group id, loom_tl_win *out, int cap)
{
        const tl_group *g = group_get(t, id);
        if (!g)
                return 0;
        for (int i = 0; i < g->nw && i < cap; i++)
                out[i] = g->w[i];
        return g->nw;
}

/* ---- footprints -------------------------------------------------------------------------- */

static int32_t seg_end(const loom_tl_footprint *f)
{
        int32_t end = 0;
        for (int i = 0; i < f->ns; i++)
                if (f->seg[i].a + f->seg[i].d > end)
                        end = f->seg[i].a + f->seg[i].d;
        return end;
}

static int reps(const loom_timeline *t, const loom_tl_footprint *f)
{
        int32_t end = seg_end(f);
        if (f->period <= 0 || end > t->L)
                return 0;
        return (int)((t->L - end) / f->period) + 1;
}

static int valid(const loom_timeline *t, const loom_tl_footprint *f)
{
        if (f->ns < 1 || f->period < 1 || !f->seg)
                return 0;
        for (int i = 0; i < f->ns; i++) {
                if (f->seg[i].a < 0 || f->seg[i].d < 1 || f->seg[i].a + f->seg[i].d > f->period)
                        return 0;
                if (i && f->seg[i].a < f->seg[i - 1].a + f->seg[i - 1].d)
                        return 0; /* sorted and disjoint: pieces never overlap each other */
        }
        return reps(t, f) > 0;
}

/* Is [p, p + d) (p in [0, L), d <= L) inside the cyclic free windows? Sets *next to the
 * shift that brings p to the next window long enough to be worth trying when it is not. */
static bool cyc_fits(const loom_timeline *t, const tl_group *g, int64_t p, int32_t d, int64_t *next)
{
        const loom_tl_win *w = g->w;
        int nw = g->nw, k = win_at(w, nw, p);
        if (k >= 0 && p < w[k].e) {
                int64_t e = w[k].e;
                if (e == t->L && k != 0 && nw > 0 && w[0].s == 0)
                        e = t->L + w[0].e; /* the window continues across the wrap */
                if (nw == 1 && w[0].s == 0 && w[0].e == t->L)
                        e = 2 * (int64_t)t->L;
                if (p + d <= e)
                        return true;
        }
        int m = k + 1;
        while (m < nw && w[m].e - w[m].s < d && !(w[m].e == t->L && w[0].s == 0))
                m++;
        *next = m < nw ? w[m].s - p : (nw ? w[0].s + t->L - p : t->L);
        if (*next <= 0)
                *next = 1;
        return false;
}

/* Expand f (with extra shift) into wrap-split pieces, sorted, in t->scratch. */
static int expand(loom_timeline *t, const loom_tl_footprint *f, int32_t shift, int *np)
{
        int R = reps(t, f), n = 0;
        if (loom_reserve(&t->scratch, &t->cap_scratch, (size_t)R * f->ns * 2, sizeof(loom_tl_win),
                         64))
                return LOOM_ENOMEM;
        for (int k = 0; k < R; k++)
                for (int i = 0; i < f->ns; i++) {
                        int64_t p =
                            ((int64_t)f->offset + shift + (int64_t)k * f->period + f->seg[i].a) %
                            t->L;
                        int64_t e = p + f->seg[i].d;
                        if (e <= t->L) {
                                t->scratch[n++] = (loom_tl_win){(int32_t)p, (int32_t)e};
                        } else {
                                t->scratch[n++] = (loom_tl_win){(int32_t)p, t->L};
                                t->scratch[n++] = (loom_tl_win){0, (int32_t)(e - t->L)};
                        }
                }
        *np = n;
        return 0;
}

static int cmp_win(const void *a, const void *b)
{
        const loom_tl_win *x = a, *y = b;
        return (x->s > y->s) - (x->s < y->s);
}

static int gcd(int a, int b)
{
        while (b) {
                int t = a % b;
                a = b;
                b = t;
        }
        return a;
}

/* A step coprime to n near n / golden ratio: visiting instances in that order samples the
 * whole horizon early, where a resident of another period drifts into the job's way. */
static int spread_stride(int n)
{
        int s = (int)(0.618 * n) | 1;
        while (s > 1 && gcd(s, n) != 1)
                s -= 2;
        return s < 1 ? 1 : s;
}

/* Every instance of f at shift fits? Instances are tried from *hint (the one that failed
 * last, which most likely fails again after a jump), and *hint is left at the failing one. */
static bool check_from(const loom_timeline *t, const tl_group *g, const loom_tl_footprint *f, int R,
                       int64_t shift, int64_t *next, int *hint)
{
        int total = R * f->ns, stride = spread_stride(total);
        for (int c = 0, x = *hint % total; c < total; c++, x = (x + stride) % total) {
                int k = x / f->ns, i = x % f->ns;
                int64_t p =
                    ((int64_t)f->offset + shift + (int64_t)k * f->period + f->seg[i].a) % t->L;
                if (!cyc_fits(t, g, p, f->seg[i].d, next)) {
                        *hint = x;
                        return false;
                }
        }
        return true;
}

static bool check_at(const loom_timeline *t, const tl_group *g, const loom_tl_footprint *f, int R,
                     int64_t shift, int64_t *next)
{
        int hint = 0;
        return check_from(t, g, f, R, shift, next, &hint);
}

bool loom_timeline_fits(const loom_timeline *t, loom_tl_group id, const loom_tl_footprint *f)
{
        const tl_group *g = group_get(t, id);
        int64_t next;
        return g && valid(t, f) && check_at(t, g, f, reps(t, f), 0, &next);
}

/* Least slack between the footprint at shift and the busy time around it. */
static int32_t slack_of(const loom_timeline *t, const tl_group *g, const loom_tl_footprint *f,
                        int R, int64_t shift)
{
        int64_t best = t->L;
        for (int k = 0; k < R; k++)
                for (int i = 0; i < f->ns; i++) {
                        int64_t p =
                            ((int64_t)f->offset + shift + (int64_t)k * f->period + f->seg[i].a) %
                            t->L;
                        int w = win_at(g->w, g->nw, p);
                        if (w < 0)
                                continue;
                        int64_t before = p - g->w[w].s,
                                after = (int64_t)g->w[w].e - (p + f->seg[i].d);
                        if (g->w[w].s == 0 && g->w[g->nw - 1].e == t->L && g->nw > 1)
                                before += t->L - g->w[g->nw - 1].s;
                        if (after < 0)
                                after += g->w[0].s == 0 ? g->w[0].e : 0;
                        if (g->nw == 1 && g->w[0].s == 0 && g->w[0].e == t->L)
                                continue; /* no resident: no slack limit */
                        int64_t s = before < after ? before : after;
                        if (s < best)
                                best = s;
                }
        return (int32_t)(best < 0 ? 0 : best);
}

int loom_timeline_fit(const loom_timeline *t, loom_tl_group id, const loom_tl_fit_cfg *c,
                      const loom_tl_footprint *f, int32_t *delta, double *cost, int32_t *slack_min)
{
        const tl_group *g = group_get(t, id);
        if (!g || !valid(t, f))
                return LOOM_EINVAL;
        int R = reps(t, f);
        int64_t hi = (int64_t)(c->alpha * f->period), s = 0;
        int hint = 0;
        while (s <= hi) {
                int64_t next = 1;
                if (check_from(t, g, f, R, s, &next, &hint)) {
                        *delta = (int32_t)s;
                        *cost = loom_tl_cost(c, f->seg, f->ns, f->period, (int32_t)s);
                        if (slack_min)
                                *slack_min = slack_of(t, g, f, R, s);
                        return 0;
                }
                s += next;
        }
        return LOOM_EREJECT;
}

/* w minus sorted pieces p (each inside one window) into out; returns the new count. */
static int subtract(const loom_tl_win *w, int nw, const loom_tl_win *p, int np, loom_tl_win *out)
{
        int n = 0, k = 0;
        for (int i = 0; i < nw; i++) {
                int32_t s = w[i].s;
                while (k < np && p[k].s < w[i].e) {
                        if (p[k].s > s)
                                out[n++] = (loom_tl_win){s, p[k].s};
                        s = p[k].e;
                        k++;
                }
                if (s < w[i].e)
                        out[n++] = (loom_tl_win){s, w[i].e};
        }
        return n;
}

/* Union of disjoint sorted w and p, coalescing touching windows; returns the count. */
static int unite(const loom_tl_win *w, int nw, const loom_tl_win *p, int np, loom_tl_win *out)
{
        int n = 0, i = 0, k = 0;
        while (i < nw || k < np) {
                loom_tl_win x = (k >= np || (i < nw && w[i].s < p[k].s)) ? w[i++] : p[k++];
                if (n && out[n - 1].e == x.s)
                        out[n - 1].e = x.e;
                else
                        out[n++] = x;
        }
        return n;
}

static int pieces_busy(const loom_tl_win *p, int np)
{
        int32_t b = 0;
        for (int i = 0; i < np; i++)
                b += p[i].e - p[i].s;
        return b;
}

int loom_timeline_commit(loom_timeline *t, loom_tl_group id, loom_tl_job job,
                         const loom_tl_footprint *f, loom_err *e)
{
        tl_group *g = group_get(t, id);
        if (!g)
                return loom_err_set(e, LOOM_ENOENT, "group", "no group %u", (unsigned)id);
        if (job == 0 || !valid(t, f))
                return loom_err_set(e, LOOM_EINVAL, job == 0 ? "job" : "segments",
                                    job == 0 ? "job id 0 is reserved"
                                             : "segments must lie within a period that fits "
                                               "the horizon");
        if (job < t->cap_j && t->j[job].piece)
                return loom_err_set(e, LOOM_EEXIST, "job", "job %u is committed already",
                                    (unsigned)job);
        int64_t next;
        if (!check_at(t, g, f, reps(t, f), 0, &next))
                return loom_err_set(e, LOOM_EREJECT, "segments",
                                    "the footprint overlaps busy time of group %u", (unsigned)id);
        int np, rc;
        size_t old = t->cap_j;
        if ((rc = expand(t, f, 0, &np)) ||
            loom_reserve(&t->j, &t->cap_j, (size_t)job + 1, sizeof *t->j, 64))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (t->cap_j > old)
                memset(t->j + old, 0, (t->cap_j - old) * sizeof *t->j);
        qsort(t->scratch, (size_t)np, sizeof *t->scratch, cmp_win);
        loom_tl_win *piece = malloc(sizeof *piece * (size_t)np),
                    *nw = malloc(sizeof *nw * (size_t)(g->nw + np));
        if (!piece || !nw) {
                free(piece);
                free(nw);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        memcpy(piece, t->scratch, sizeof *piece * (size_t)np);
        int n = subtract(g->w, g->nw, piece, np, nw);
        free(g->w);
        g->w = nw;
        g->nw = n;
        g->cap = (size_t)(n + np);
        g->busy += pieces_busy(piece, np);
        g->jobs++;
        for (int i = 0; i < np; i++)
                st_add(t, 1, 0, t->L - 1, piece[i].s, piece[i].e - 1, -g->nodes);
        t->j[job] = (tl_job){id, piece, np};
        return 0;
}

int loom_timeline_release(loom_timeline *t, loom_tl_job job)
{
        if (job == 0 || job >= t->cap_j || !t->j[job].piece)
                return LOOM_ENOENT;
        tl_job *j = &t->j[job];
        tl_group *g = &t->g[j->g];
        loom_tl_win *nw = malloc(sizeof *nw * (size_t)(g->nw + j->np));
        if (!nw)
                return LOOM_ENOMEM;
        int n = unite(g->w, g->nw, j->piece, j->np, nw);
        /* [x, L) and [0, y) stay two windows: the wrap split is the canonical form. */
        free(g->w);
        g->w = nw;
        g->nw = n;
        g->cap = (size_t)(n + j->np);
        g->busy -= pieces_busy(j->piece, j->np);
        g->jobs--;
        for (int i = 0; i < j->np; i++)
                st_add(t, 1, 0, t->L - 1, j->piece[i].s, j->piece[i].e - 1, g->nodes);
        free(j->piece);
        *j = (tl_job){0};
        return 0;
}

loom_tl_group loom_timeline_group_of(const loom_timeline *t, loom_tl_job job)
{
        if (job == 0 || job >= t->cap_j || !t->j[job].piece)
                return LOOM_TL_NO_GROUP;
        return t->j[job].g;
}

int loom_timeline_check(const loom_timeline *t)
{
        int32_t *free_ = malloc(sizeof *free_ * (size_t)t->L);
        if (!free_)
                return LOOM_ENOMEM;
        int assigned = 0;
        for (int32_t s = 0; s < t->L; s++)
                free_[s] = t->unassigned;
        for (uint32_t i = 0; i < t->n_g; i++) {
                const tl_group *g = &t->g[i];
                if (!g->live)
                        continue;
                assigned += g->nodes;
                int32_t fr = 0;
                for (int k = 0; k < g->nw; k++) {
                        if (g->w[k].s >= g->w[k].e || g->w[k].s < 0 || g->w[k].e > t->L ||
                            (k && g->w[k].s <= g->w[k - 1].e))
                                goto bad;
                        for (int32_t s = g->w[k].s; s < g->w[k].e; s++)
                                free_[s] += g->nodes;
                        fr += g->w[k].e - g->w[k].s;
                }
                if (fr + g->busy != t->L)
                        goto bad;
        }
        if (assigned + t->unassigned != t->nodes)
                goto bad;
        for (int32_t s = 0; s < t->L; s++)
                if (free_[s] < 0 || free_[s] != loom_timeline_min_free(t, s, 1))
                        goto bad;
        free(free_);
        return 0;
bad:
        free(free_);
        return LOOM_ECORRUPT;
}
