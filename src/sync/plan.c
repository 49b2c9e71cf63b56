/*
 * plan.c - turns a shard map into streams for the three plans.
 *
 * flat: one stream per (training rank, rollout rank) pair carrying everything that rollout rank
 *       keeps from that training rank; every byte a rollout rank needs crosses the slow link.
 * topo: pieces are grouped by (sender, set of rollout TP ranks that keep them); each group becomes
 *       one stream that lands on one rollout rank of that set, chosen round-robin over the group's
 *       candidates so the slow-link streams spread over many receivers and run in parallel. Every
 *       other rank of the set pulls the whole stream from the landing rank's relay. Exactly one
 *       copy of the model crosses the slow link.
 * topo+sparse: the topo streams; the difference is only in how buckets are encoded.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/sync.h"

const char *loom_sync_plan_name(loom_sync_plan_kind k)
{
        switch (k) {
        case LOOM_SYNC_FLAT:
                return "flat";
        case LOOM_SYNC_TOPO:
                return "topo";
        case LOOM_SYNC_TOPO_SPARSE:
                return "topo+sparse";
        }
        return "?";
}

int loom_sync_plan_parse(const char *s, loom_sync_plan_kind *out, loom_err *e)
{
        for (int k = LOOM_SYNC_FLAT; k <= LOOM_SYNC_TOPO_SPARSE; k++) {
                if (!strcmp(s, loom_sync_plan_name((loom_sync_plan_kind)k))) {
                        *out = (loom_sync_plan_kind)k;
                        return 0;
                }
        }
        return loom_err_set(e, LOOM_EINVAL, "plan", "unknown plan '%s' (flat, topo, topo+sparse)",
                            s);
}

static int present(uint64_t mask, uint32_t r)
{
        return r < 64 && (mask >> r & 1);
}

int loom_sync_stream_consumer(const loom_sync_plan *p, const loom_sync_stream *s, uint32_t r)
{
        if (!present(p->present, r))
                return 0;
        if (s->only_dst)
                return r == s->dst;
        uint32_t tp = r % p->map->roll.tp;
        return tp >= s->need0 && tp < s->need1;
}

typedef struct builder {
        loom_sync_plan *p;
        size_t cap;
        size_t norder;
} builder;

static loom_sync_stream *new_stream(builder *b)
{
        loom_sync_plan *p = b->p;
        if (loom_reserve(&p->streams, &b->cap, p->nstreams + 1, sizeof *p->streams, 64))
                return NULL;
        loom_sync_stream *s = &p->streams[p->nstreams];
        memset(s, 0, sizeof *s);
        s->id = (uint32_t)p->nstreams++;
        s->first = b->norder;
        return s;
}

static void add_piece(builder *b, loom_sync_stream *s, uint32_t pi)
{
        const loom_sync_piece *pc = &b->p->map->pieces[pi];
        b->p->order[b->norder++] = pi;
        s->count++;
        s->elems += loom_sync_rect_elems(&pc->rect);
}

static int build_flat(builder *b)
{
        const loom_sync_map *m = b->p->map;
        uint32_t nt = loom_sync_par_ranks(&m->train), nr = loom_sync_par_ranks(&m->roll);
        for (uint32_t r = 0; r < nr; r++) {
                if (!present(b->p->present, r))
                        continue;
                uint32_t tp = r % m->roll.tp;
                for (uint32_t s = 0; s < nt; s++) {
                        loom_sync_stream *st = NULL;
                        for (size_t i = 0; i < m->npieces; i++) {
                                const loom_sync_piece *pc = &m->pieces[i];
                                if (pc->src != s || tp < pc->need0 || tp >= pc->need1)
                                        continue;
                                if (!st && !(st = new_stream(b)))
                                        return LOOM_ENOMEM;
                                add_piece(b, st, (uint32_t)i);
                        }
                        if (st) {
                                st->src = s, st->dst = r, st->need0 = tp, st->need1 = tp + 1;
                                st->only_dst = 1;
                                b->p->slow_elems += st->elems;
                        }
                }
        }
        return 0;
}

static int build_topo(builder *b)
{
        loom_sync_plan *p = b->p;
        const loom_sync_map *m = p->map;
        uint32_t nr = loom_sync_par_ranks(&m->roll), roll_tp = m->roll.tp;
        char *done = calloc(m->npieces ? m->npieces : 1, 1);
        uint32_t *cand = malloc(nr * sizeof *cand);
        /* per need range (need0 * roll_tp + need1 - 1): how many groups have landed so far */
        uint32_t *turn = calloc((size_t)roll_tp * roll_tp, sizeof *turn);
        int rc = (!done || !cand || !turn) ? LOOM_ENOMEM : 0;
        for (size_t i = 0; !rc && i < m->npieces; i++) {
                if (done[i])
                        continue;
                const loom_sync_piece *head = &m->pieces[i];
                size_t nc = 0;
                for (uint32_t r = 0; r < nr; r++) {
                        uint32_t tp = r % roll_tp;
                        if (present(p->present, r) && tp >= head->need0 && tp < head->need1)
                                cand[nc++] = r;
                }
                if (!nc) {
                        rc = LOOM_ENOENT; /* nobody present keeps these pieces */
                        break;
                }
                loom_sync_stream *st = new_stream(b);
                if (!st) {
                        rc = LOOM_ENOMEM;
                        break;
                }
                uint32_t *t = &turn[head->need0 * roll_tp + head->need1 - 1];
                st->src = head->src;
                st->dst = cand[(*t)++ % nc];
                st->need0 = head->need0;
                st->need1 = head->need1;
                for (size_t j = i; j < m->npieces; j++) {
                        const loom_sync_piece *pc = &m->pieces[j];
                        if (done[j] || pc->src != head->src || pc->need0 != head->need0 ||
                            pc->need1 != head->need1)
                                continue;
                        done[j] = 1;
                        add_piece(b, st, (uint32_t)j);
                }
                p->slow_elems += st->elems;
                p->fast_elems += st->elems * (nc - 1);
        }
        free(done);
        free(cand);
        free(turn);
        return rc;
}

int loom_sync_plan_new(const loom_sync_map *m, loom_sync_plan_kind kind, uint64_t bucket_bytes,
                       uint64_t present_mask, loom_sync_plan **out, loom_err *e)
{
        *out = NULL;
        uint32_t nr = loom_sync_par_ranks(&m->roll);
        if (bucket_bytes < 2 || bucket_bytes % 2 || bucket_bytes > (UINT64_C(1) << 31))
                return loom_err_set(e, LOOM_EINVAL, "bucket",
                                    "bucket size must be even, between 2 bytes and 2 GiB");
        if (nr > LOOM_SYNC_MAX_ROLLOUT)
                return loom_err_set(e, LOOM_ERANGE, "rollout", "%u rollout ranks; at most %d", nr,
                                    LOOM_SYNC_MAX_ROLLOUT);
        if (kind < LOOM_SYNC_FLAT || kind > LOOM_SYNC_TOPO_SPARSE)
                return loom_err_set(e, LOOM_EINVAL, "plan", "unknown plan");
        loom_sync_plan *p = calloc(1, sizeof *p);
        if (!p)
                return loom_err_set(e, LOOM_ENOMEM, "plan", "out of memory");
        p->kind = kind;
        p->map = m;
        p->bucket_elems = bucket_bytes / 2;
        p->present = nr == 64 ? present_mask : present_mask & ((UINT64_C(1) << nr) - 1);
        /* flat repeats a piece once per rollout rank that keeps it */
        size_t norder = m->npieces * (kind == LOOM_SYNC_FLAT ? nr : 1);
        p->order = malloc((norder ? norder : 1) * sizeof *p->order);
        builder b = {.p = p};
        int rc = p->order ? 0 : LOOM_ENOMEM;
        if (!rc)
                rc = kind == LOOM_SYNC_FLAT ? build_flat(&b) : build_topo(&b);
        if (rc) {
                loom_sync_plan_free(p);
                if (rc == LOOM_ENOENT)
                        return loom_err_set(e, rc, "rollout",
                                            "some rollout TP rank has no present replica");
                return loom_err_set(e, rc, "plan", "%s", loom_strerror(rc));
        }
        *out = p;
        return 0;
}

void loom_sync_plan_free(loom_sync_plan *p)
{
        if (!p)
                return;
        free(p->streams);
        free(p->order);
        free(p);
}
