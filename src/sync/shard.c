/*
 * shard.c - parallel layouts and the shard map: which rectangle of which tensor every training
 * rank sends and which rollout tensor-parallel ranks keep it.
 *
 * For each tensor the split dimension is cut at every training and every rollout TP boundary;
 * each resulting interval (an "atom") is held by a contiguous range of training TP ranks (more
 * than one only when the tensor, or a KV head, is replicated) and kept by a contiguous range of
 * rollout TP ranks. One holder is chosen, and the atom's rows are divided among that holder's
 * DP replicas, so replicas send disjoint parts and nothing is sent twice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/sync.h"

static int parse_u32(const char *s, size_t len, uint32_t *out)
{
        uint64_t v = 0;
        if (!len || len > 6)
                return -1;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -1;
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        if (!v)
                return -1;
        *out = (uint32_t)v;
        return 0;
}

int loom_sync_par_parse(const char *s, int rollout, const char *field, loom_sync_par *out,
                        loom_err *e)
{
        loom_sync_par p = {1, 1, 1};
        unsigned seen = 0;
        const char *c = s;
        if (!s || !*s)
                return loom_err_set(e, LOOM_EINVAL, field, "empty layout (want tp=N,pp=N,dp=N)");
        while (*c) {
                const char *end = strchr(c, ',');
                size_t len = end ? (size_t)(end - c) : strlen(c);
                const char *eq = memchr(c, '=', len);
                uint32_t *dst = NULL;
                unsigned bit = 0;
                if (eq && eq - c == 2 && !strncmp(c, "tp", 2))
                        dst = &p.tp, bit = 1;
                else if (eq && eq - c == 2 && !strncmp(c, "pp", 2))
                        dst = &p.pp, bit = 2;
                else if (eq && eq - c == 2 && !strncmp(c, "dp", 2))
                        dst = &p.dp, bit = 4;
                if (!dst)
                        return loom_err_set(e, LOOM_EINVAL, field,
                                            "'%.*s' is not tp=N, pp=N or dp=N", (int)len, c);
                if (seen & bit)
                        return loom_err_set(e, LOOM_EINVAL, field, "'%.2s' given twice", c);
                seen |= bit;
                if (parse_u32(eq + 1, len - 3, dst))
                        return loom_err_set(e, LOOM_EINVAL, field,
                                            "'%.*s': want a positive integer below 10^6", (int)len,
                                            c);
                c = end ? end + 1 : c + len;
                if (end && !*c)
                        return loom_err_set(e, LOOM_EINVAL, field, "trailing comma");
        }
        if (rollout && p.pp != 1)
                return loom_err_set(e, LOOM_EINVAL, field,
                                    "rollout layouts have no pipeline stages (pp must be 1)");
        *out = p;
        return 0;
}

/* Which unit range of `units` does TP rank r of tp keep? Balanced when there are at least as many
 * units as ranks; otherwise each unit is replicated on tp/units consecutive ranks. */
static int unit_range(uint64_t units, uint32_t r, uint32_t tp, uint64_t *u0, uint64_t *u1)
{
        if (units >= tp) {
                *u0 = units * r / tp;
                *u1 = units * (r + 1) / tp;
                return 0;
        }
        if (tp % units)
                return LOOM_EINVAL;
        *u0 = r / (tp / units);
        *u1 = *u0 + 1;
        return 0;
}

int loom_sync_slice(const loom_sync_tensor *t, uint32_t rank, uint32_t tp, loom_sync_rect *out)
{
        loom_sync_rect r = {0, t->rows, 0, t->cols};
        if (rank >= tp)
                return LOOM_EINVAL;
        if (t->split != LOOM_SYNC_REPLICATED && tp > 1) {
                uint64_t dim = t->split == LOOM_SYNC_COLUMN ? t->rows : t->cols, u0, u1;
                if (!t->unit || dim % t->unit || unit_range(dim / t->unit, rank, tp, &u0, &u1))
                        return LOOM_EINVAL;
                if (t->split == LOOM_SYNC_COLUMN)
                        r.r0 = u0 * t->unit, r.r1 = u1 * t->unit;
                else
                        r.c0 = u0 * t->unit, r.c1 = u1 * t->unit;
        }
        *out = r;
        return 0;
}

uint32_t loom_sync_stage(const loom_sync_layout *l, const loom_sync_tensor *t, uint32_t pp)
{
        if (t->layer == -1)
                return 0;
        if (t->layer < 0)
                return pp - 1;
        /* stage s holds layers [s*L/pp, (s+1)*L/pp) */
        uint64_t L = l->model.layers;
        for (uint32_t s = 0; s < pp; s++)
                if ((uint64_t)t->layer < L * (s + 1) / pp)
                        return s;
        return pp - 1;
}

int loom_sync_par_check(const loom_sync_layout *l, const loom_sync_par *p, const char *field,
                        loom_err *e)
{
        const loom_sync_model *m = &l->model;
        if (m->heads % p->tp)
                return loom_err_set(e, LOOM_EINVAL, field,
                                    "tp=%u does not divide %u attention heads", p->tp, m->heads);
        if (m->kv_heads % p->tp && p->tp % m->kv_heads)
                return loom_err_set(e, LOOM_EINVAL, field,
                                    "tp=%u and %u KV heads: one must divide the other", p->tp,
                                    m->kv_heads);
        if (p->pp > m->layers)
                return loom_err_set(e, LOOM_EINVAL, field, "pp=%u exceeds %u layers", p->pp,
                                    m->layers);
        if ((uint64_t)p->tp * p->pp * p->dp > 4096)
                return loom_err_set(e, LOOM_ERANGE, field, "%u ranks; at most 4096",
                                    p->tp * p->pp * p->dp);
        for (size_t i = 0; i < l->ntensors; i++) {
                loom_sync_rect r = {0, 0, 0, 0};
                for (uint32_t k = 0; k < p->tp; k++)
                        if (loom_sync_slice(&l->tensors[i], k, p->tp, &r))
                                return loom_err_set(e, LOOM_EINVAL, field, "tp=%u cannot split %s",
                                                    p->tp, l->tensors[i].name);
        }
        return 0;
}

typedef struct pieces {
        loom_sync_piece *v;
        size_t n, cap;
} pieces;

static int push(pieces *ps, const loom_sync_piece *p)
{
        if (loom_reserve(&ps->v, &ps->cap, ps->n + 1, sizeof *ps->v, 1024))
                return LOOM_ENOMEM;
        ps->v[ps->n++] = *p;
        return 0;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* Ranks of tp whose slice covers [a, b) along the split dimension: a contiguous range. */
static void covering(const loom_sync_tensor *t, uint32_t tp, uint64_t a, uint64_t b, uint32_t *k0,
                     uint32_t *k1)
{
        *k0 = tp, *k1 = 0;
        for (uint32_t k = 0; k < tp; k++) {
                loom_sync_rect r = {0, 0, 0, 0};
                loom_sync_slice(t, k, tp, &r);
                uint64_t lo = t->split == LOOM_SYNC_ROW ? r.c0 : r.r0;
                uint64_t hi = t->split == LOOM_SYNC_ROW ? r.c1 : r.r1;
                if (lo <= a && b <= hi) {
                        if (k < *k0)
                                *k0 = k;
                        *k1 = k + 1;
                }
        }
}

static int map_tensor(const loom_sync_map *m, uint32_t ti, uint64_t *cuts, uint64_t *spread,
                      pieces *out)
{
        const loom_sync_tensor *t = &m->layout->tensors[ti];
        const loom_sync_par *tr = &m->train, *ro = &m->roll;
        const int by_col = t->split == LOOM_SYNC_ROW;
        uint64_t dim = by_col ? t->cols : t->rows;
        size_t nc = 0;
        cuts[nc++] = 0;
        cuts[nc++] = dim;
        if (t->split != LOOM_SYNC_REPLICATED) {
                for (uint32_t k = 0; k < tr->tp; k++) {
                        loom_sync_rect r = {0, 0, 0, 0};
                        loom_sync_slice(t, k, tr->tp, &r);
                        cuts[nc++] = by_col ? r.c0 : r.r0;
                }
                for (uint32_t k = 0; k < ro->tp; k++) {
                        loom_sync_rect r = {0, 0, 0, 0};
                        loom_sync_slice(t, k, ro->tp, &r);
                        cuts[nc++] = by_col ? r.c0 : r.r0;
                }
        }
        qsort(cuts, nc, sizeof *cuts, cmp_u64);
        uint32_t stage = loom_sync_stage(m->layout, t, tr->pp);
        for (size_t i = 0; i + 1 < nc; i++) {
                uint64_t a = cuts[i], b = cuts[i + 1];
                if (a == b)
                        continue;
                uint32_t h0 = 0, h1 = tr->tp, n0 = 0, n1 = ro->tp;
                if (t->split != LOOM_SYNC_REPLICATED) {
                        covering(t, tr->tp, a, b, &h0, &h1);
                        covering(t, ro->tp, a, b, &n0, &n1);
                }
                if (h0 >= h1 || n0 >= n1)
                        return LOOM_EINVAL; /* cannot happen for a checked layout */
                /* Replicated atoms rotate over their holders so no TP rank sends all norms. */
                uint32_t holder = h0 + (uint32_t)((*spread)++ % (h1 - h0));
                loom_sync_rect atom = {0, t->rows, 0, t->cols};
                if (by_col)
                        atom.c0 = a, atom.c1 = b;
                else
                        atom.r0 = a, atom.r1 = b;
                uint64_t h = atom.r1 - atom.r0;
                for (uint32_t d = 0; d < tr->dp; d++) {
                        loom_sync_piece p = {.tensor = ti, .rect = atom, .need0 = n0, .need1 = n1};
                        p.rect.r0 = atom.r0 + h * d / tr->dp;
                        p.rect.r1 = atom.r0 + h * (d + 1) / tr->dp;
                        if (p.rect.r0 == p.rect.r1)
                                continue;
                        p.src = holder + tr->tp * (stage + tr->pp * d);
                        int rc = push(out, &p);
                        if (rc)
                                return rc;
                }
        }
        return 0;
}

int loom_sync_map_new(const loom_sync_layout *l, const loom_sync_par *train,
                      const loom_sync_par *roll, loom_sync_map **out, loom_err *e)
{
        *out = NULL;
        int rc = loom_sync_par_check(l, train, "train", e);
        if (!rc)
                rc = loom_sync_par_check(l, roll, "rollout", e);
        if (rc)
                return rc;
        if (roll->pp != 1)
                return loom_err_set(e, LOOM_EINVAL, "rollout", "pp must be 1");
        loom_sync_map *m = calloc(1, sizeof *m);
        uint64_t *cuts = malloc((2 + train->tp + roll->tp) * sizeof *cuts);
        if (!m || !cuts) {
                free(m);
                free(cuts);
                return loom_err_set(e, LOOM_ENOMEM, "map", "out of memory");
        }
        m->layout = l;
        m->train = *train;
        m->roll = *roll;
        pieces ps = {0};
        uint64_t spread = 0;
        for (size_t i = 0; !rc && i < l->ntensors; i++)
                rc = map_tensor(m, (uint32_t)i, cuts, &spread, &ps);
        free(cuts);
        if (rc) {
                free(ps.v);
                free(m);
                return loom_err_set(e, rc, "map", "cannot map the layouts: %s", loom_strerror(rc));
        }
        m->pieces = ps.v;
        m->npieces = ps.n;
        *out = m;
        return 0;
}

void loom_sync_map_free(loom_sync_map *m)
{
        if (!m)
                return;
        free(m->pieces);
        free(m);
}
