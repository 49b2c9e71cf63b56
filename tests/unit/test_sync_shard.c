/*
 * test_sync_shard.c - layouts, shard maps and plans: Qwen2.5 parameter counts, and property tests
 * over many (TP, PP, DP) x (TP, DP) pairs that every element reaches exactly the rollout ranks
 * that keep it, exactly once, from a training rank that holds it.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "loom/sync.h"

static loom_sync_layout *layout_of(const char *preset)
{
        loom_sync_model m;
        loom_err e;
        cr_assert_eq(loom_sync_model_preset(preset, &m, &e), 0, "%s", e.msg);
        loom_sync_layout *l;
        cr_assert_eq(loom_sync_layout_new(&m, &l, &e), 0, "%s", e.msg);
        return l;
}

/* Parameter counts published for the Qwen2.5 checkpoints. */
Test(sync_layout, qwen25_parameter_counts)
{
        static const struct {
                const char *name;
                uint64_t params;
        } want[] = {
            {"qwen2.5-0.5b", UINT64_C(494032768)},
            {"qwen2.5-1.5b", UINT64_C(1543714304)},
            {"qwen2.5-7b", UINT64_C(7615616512)},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                loom_sync_layout *l = layout_of(want[i].name);
                cr_expect_eq(l->elems, want[i].params, "%s: %llu", want[i].name,
                             (unsigned long long)l->elems);
                uint64_t sum = 0;
                for (size_t t = 0; t < l->ntensors; t++) {
                        cr_expect_eq(l->tensors[t].offset, sum);
                        sum += l->tensors[t].rows * l->tensors[t].cols;
                }
                cr_expect_eq(sum, l->elems);
                loom_sync_layout_free(l);
        }
}

Test(sync_layout, splits_are_tagged)
{
        loom_sync_layout *l = layout_of("qwen2.5-1.5b");
        int seen[3] = {0};
        for (size_t t = 0; t < l->ntensors; t++) {
                const loom_sync_tensor *x = &l->tensors[t];
                seen[x->split]++;
                if (strstr(x->name, "o_proj") || strstr(x->name, "down_proj"))
                        cr_expect_eq(x->split, LOOM_SYNC_ROW, "%s", x->name);
                if (strstr(x->name, "norm"))
                        cr_expect_eq(x->split, LOOM_SYNC_REPLICATED, "%s", x->name);
                if (strstr(x->name, "q_proj") || strstr(x->name, "gate_proj"))
                        cr_expect_eq(x->split, LOOM_SYNC_COLUMN, "%s", x->name);
        }
        cr_expect(seen[0] && seen[1] && seen[2]);
        loom_sync_layout_free(l);
}

Test(sync_layout, bad_input_names_the_field)
{
        loom_sync_model m;
        loom_err e;
        cr_expect_eq(loom_sync_model_preset("gpt-5", &m, &e), LOOM_EINVAL);
        cr_expect_str_eq(e.field, "model");
        loom_sync_par p;
        cr_expect_eq(loom_sync_par_parse("tp=2,pp=0", 0, "--train", &p, &e), LOOM_EINVAL);
        cr_expect_str_eq(e.field, "--train");
        cr_expect_eq(loom_sync_par_parse("tp=2,pp=2", 1, "--rollout", &p, &e), LOOM_EINVAL);
        cr_expect_eq(loom_sync_par_parse("tp=2,tp=2", 0, "--train", &p, &e), LOOM_EINVAL);
        cr_expect_eq(loom_sync_par_parse("tp=2,", 0, "--train", &p, &e), LOOM_EINVAL);
        cr_expect_eq(loom_sync_par_parse("xx=2", 0, "--train", &p, &e), LOOM_EINVAL);
        cr_assert_eq(loom_sync_par_parse("dp=4,tp=2", 0, "--train", &p, &e), 0);
        cr_expect(p.tp == 2 && p.pp == 1 && p.dp == 4);
        loom_sync_layout *l = layout_of("qwen2.5-1.5b");
        p.tp = 5;
        cr_expect_eq(loom_sync_par_check(l, &p, "--train", &e), LOOM_EINVAL);
        cr_expect(strstr(e.msg, "heads") != NULL, "%s", e.msg);
        p.tp = 3; /* divides 12 heads but not 2 KV heads, nor they it */
        cr_expect_eq(loom_sync_par_check(l, &p, "--train", &e), LOOM_EINVAL);
        loom_sync_layout_free(l);
}

/* A model small enough to count every element: head_dim 2, 8 heads, 4 KV heads (so tp=8
 * replicates KV heads on both sides), untied head. */
static loom_sync_layout *small(void)
{
        loom_sync_model m = {"small", 16, 24, 3, 8, 4, 40, 0, 1};
        loom_sync_layout *l;
        loom_err e;
        cr_assert_eq(loom_sync_layout_new(&m, &l, &e), 0, "%s", e.msg);
        return l;
}

static int in_rect(const loom_sync_rect *r, uint64_t row, uint64_t col)
{
        return row >= r->r0 && row < r->r1 && col >= r->c0 && col < r->c1;
}

static int contains(const loom_sync_rect *outer, const loom_sync_rect *in)
{
        return in->r0 >= outer->r0 && in->r1 <= outer->r1 && in->c0 >= outer->c0 &&
               in->c1 <= outer->c1;
}

static void add_rect(uint8_t *cnt, const loom_sync_layout *l, const loom_sync_piece *pc)
{
        const loom_sync_tensor *t = &l->tensors[pc->tensor];
        for (uint64_t r = pc->rect.r0; r < pc->rect.r1; r++)
                for (uint64_t c = pc->rect.c0; c < pc->rect.c1; c++)
                        cnt[t->offset + r * t->cols + c]++;
}

/* cnt[g] must be 1 exactly where rollout TP rank k keeps element g, else 0. */
static void expect_exactly_slice(const uint8_t *cnt, const loom_sync_layout *l, uint32_t k,
                                 uint32_t tp, const char *what)
{
        for (size_t ti = 0; ti < l->ntensors; ti++) {
                const loom_sync_tensor *t = &l->tensors[ti];
                loom_sync_rect s;
                cr_assert_eq(loom_sync_slice(t, k, tp, &s), 0);
                for (uint64_t r = 0; r < t->rows; r++)
                        for (uint64_t c = 0; c < t->cols; c++) {
                                uint8_t want = (uint8_t)in_rect(&s, r, c);
                                uint8_t got = cnt[t->offset + r * t->cols + c];
                                if (got != want)
                                        cr_assert_fail("%s: %s[%llu,%llu] delivered %u times to "
                                                       "rollout tp rank %u, want %u",
                                                       what, t->name, (unsigned long long)r,
                                                       (unsigned long long)c, got, k, want);
                        }
        }
}

static void check_map(const loom_sync_layout *l, const loom_sync_par *tr, const loom_sync_par *ro)
{
        loom_sync_map *m;
        loom_err e;
        cr_assert_eq(loom_sync_map_new(l, tr, ro, &m, &e), 0, "%s", e.msg);
        uint8_t *cnt = calloc(l->elems, 1);
        /* every element sent exactly once, by a training rank that holds it */
        for (size_t i = 0; i < m->npieces; i++) {
                const loom_sync_piece *pc = &m->pieces[i];
                const loom_sync_tensor *t = &l->tensors[pc->tensor];
                cr_assert_lt(pc->src, loom_sync_par_ranks(tr));
                uint32_t tp = pc->src % tr->tp, pp = pc->src / tr->tp % tr->pp;
                loom_sync_rect held;
                loom_sync_slice(t, tp, tr->tp, &held);
                cr_assert(contains(&held, &pc->rect), "%s not held by its sender", t->name);
                cr_assert_eq(pp, loom_sync_stage(l, t, tr->pp));
                cr_assert(pc->need0 < pc->need1 && pc->need1 <= ro->tp);
                add_rect(cnt, l, pc);
        }
        for (uint64_t g = 0; g < l->elems; g++)
                cr_assert_eq(cnt[g], 1, "element %llu sent %u times", (unsigned long long)g,
                             cnt[g]);
        /* each rollout TP rank keeps exactly its slice */
        for (uint32_t k = 0; k < ro->tp; k++) {
                memset(cnt, 0, l->elems);
                for (size_t i = 0; i < m->npieces; i++)
                        if (k >= m->pieces[i].need0 && k < m->pieces[i].need1)
                                add_rect(cnt, l, &m->pieces[i]);
                expect_exactly_slice(cnt, l, k, ro->tp, "map");
        }
        /* every plan, with every rollout rank and with one rank missing */
        uint32_t nr = loom_sync_par_ranks(ro);
        uint64_t all = nr == 64 ? ~UINT64_C(0) : (UINT64_C(1) << nr) - 1;
        uint64_t masks[2] = {all, ro->dp > 1 ? all & ~UINT64_C(1) : all};
        for (int kind = LOOM_SYNC_FLAT; kind <= LOOM_SYNC_TOPO_SPARSE; kind++) {
                for (int mi = 0; mi < 2; mi++) {
                        loom_sync_plan *p;
                        cr_assert_eq(
                            loom_sync_plan_new(m, (loom_sync_plan_kind)kind, 64, masks[mi], &p, &e),
                            0, "%s", e.msg);
                        uint64_t slice_elems = 0;
                        for (uint32_t r = 0; r < nr; r++) {
                                memset(cnt, 0, l->elems);
                                int here = masks[mi] >> r & 1;
                                for (size_t s = 0; s < p->nstreams; s++) {
                                        const loom_sync_stream *st = &p->streams[s];
                                        cr_assert(masks[mi] >> st->dst & 1);
                                        if (!loom_sync_stream_consumer(p, st, r))
                                                continue;
                                        for (size_t j = 0; j < st->count; j++) {
                                                const loom_sync_piece *pc =
                                                    &m->pieces[p->order[st->first + j]];
                                                cr_assert_eq(pc->src, st->src);
                                                add_rect(cnt, l, pc);
                                        }
                                }
                                if (!here) {
                                        for (uint64_t g = 0; g < l->elems; g++)
                                                cr_assert_eq(cnt[g], 0);
                                        continue;
                                }
                                expect_exactly_slice(cnt, l, r % ro->tp, ro->tp,
                                                     loom_sync_plan_name(p->kind));
                                for (uint64_t g = 0; g < l->elems; g++)
                                        slice_elems += cnt[g];
                        }
                        if (kind == LOOM_SYNC_FLAT)
                                cr_expect_eq(p->slow_elems, slice_elems);
                        else {
                                /* one copy of the model over the slow link, the rest local */
                                cr_expect_eq(p->slow_elems, l->elems, "%s slow %llu",
                                             loom_sync_plan_name(p->kind),
                                             (unsigned long long)p->slow_elems);
                                cr_expect_eq(p->slow_elems + p->fast_elems, slice_elems);
                        }
                        loom_sync_plan_free(p);
                }
        }
        free(cnt);
        loom_sync_map_free(m);
}

Test(sync_shard, every_element_exactly_once_across_layouts, .timeout = 120)
{
        loom_sync_layout *l = small();
        static const uint32_t tps[] = {1, 2, 4, 8}, pps[] = {1, 2, 3}, dps[] = {1, 2, 3};
        static const uint32_t rdps[] = {1, 3};
        int pairs = 0;
        for (size_t a = 0; a < 4; a++)
                for (size_t b = 0; b < 3; b++)
                        for (size_t c = 0; c < 3; c++)
                                for (size_t d = 0; d < 4; d++)
                                        for (size_t f = 0; f < 2; f++) {
                                                loom_sync_par tr = {tps[a], pps[b], dps[c]};
                                                loom_sync_par ro = {tps[d], 1, rdps[f]};
                                                check_map(l, &tr, &ro);
                                                pairs++;
                                        }
        cr_expect_eq(pairs, 288);
        loom_sync_layout_free(l);
}

Test(sync_shard, training_replicas_send_disjoint_balanced_parts)
{
        loom_sync_layout *l = layout_of("qwen2.5-1.5b");
        loom_sync_par tr = {2, 1, 4}, ro = {1, 1, 8};
        loom_sync_map *m;
        loom_err e;
        cr_assert_eq(loom_sync_map_new(l, &tr, &ro, &m, &e), 0, "%s", e.msg);
        uint64_t per_rank[8] = {0}, total = 0;
        for (size_t i = 0; i < m->npieces; i++) {
                uint64_t n = loom_sync_rect_elems(&m->pieces[i].rect);
                per_rank[m->pieces[i].src] += n;
                total += n;
        }
        cr_expect_eq(total, l->elems);
        for (int r = 0; r < 8; r++) /* each rank sends within 1% of an eighth */
                cr_expect(per_rank[r] > total / 8 * 99 / 100 && per_rank[r] < total / 8 * 101 / 100,
                          "rank %d sends %llu of %llu", r, (unsigned long long)per_rank[r],
                          (unsigned long long)total);
        loom_sync_plan *flat, *topo;
        cr_assert_eq(
            loom_sync_plan_new(m, LOOM_SYNC_FLAT, LOOM_SYNC_DEFAULT_BUCKET, ~0ull, &flat, &e), 0);
        cr_assert_eq(
            loom_sync_plan_new(m, LOOM_SYNC_TOPO, LOOM_SYNC_DEFAULT_BUCKET, ~0ull, &topo, &e), 0);
        cr_expect_eq(flat->slow_elems, 8 * l->elems);
        cr_expect_eq(topo->slow_elems, l->elems);
        cr_expect_eq(topo->fast_elems, 7 * l->elems);
        /* 8 senders, 8 receivers: one stream each, all different landing ranks */
        cr_expect_eq(topo->nstreams, 8);
        uint32_t landed = 0;
        for (size_t s = 0; s < topo->nstreams; s++)
                landed |= 1u << topo->streams[s].dst;
        cr_expect_eq(landed, 0xffu);
        loom_sync_plan_free(flat);
        loom_sync_plan_free(topo);
        loom_sync_map_free(m);
        loom_sync_layout_free(l);
}
