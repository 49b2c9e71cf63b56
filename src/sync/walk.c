/*
 * walk.c - from positions in a stream to tensor elements.
 *
 * A stream is its pieces laid end to end, each piece row-major. A run is the part of one piece
 * row inside a range of stream positions: contiguous in the stream, in the model's flat element
 * space and in a rollout rank's local copy of its slice, so every byte-moving loop (generating,
 * hashing, copying) works on whole runs.
 */
#include <stdlib.h>

#include "internal.h"

int loom__view_init(loom__view *v, const loom_sync_map *m, int tp_rank)
{
        const loom_sync_layout *l = m->layout;
        v->layout = l;
        v->map = m;
        v->slice = NULL;
        v->local_elems = 0;
        v->loc_off = calloc(l->ntensors ? l->ntensors : 1, sizeof *v->loc_off);
        if (!v->loc_off)
                return LOOM_ENOMEM;
        if (tp_rank < 0)
                return 0;
        v->slice = calloc(l->ntensors ? l->ntensors : 1, sizeof *v->slice);
        if (!v->slice) {
                free(v->loc_off);
                return LOOM_ENOMEM;
        }
        for (size_t t = 0; t < l->ntensors; t++) {
                loom_sync_slice(&l->tensors[t], (uint32_t)tp_rank, m->roll.tp, &v->slice[t]);
                v->loc_off[t] = v->local_elems;
                v->local_elems += loom_sync_rect_elems(&v->slice[t]);
        }
        return 0;
}

void loom__view_fini(loom__view *v)
{
        free(v->slice);
        free(v->loc_off);
        v->slice = NULL;
        v->loc_off = NULL;
}

static void fill(const loom__view *v, uint32_t pi, uint64_t off, loom__run *run)
{
        const loom_sync_piece *pc = &v->map->pieces[pi];
        const loom_sync_tensor *t = &v->layout->tensors[pc->tensor];
        uint64_t w = pc->rect.c1 - pc->rect.c0;
        uint64_t row = pc->rect.r0 + off / w, col = pc->rect.c0 + off % w;
        run->piece = pi;
        run->tensor = pc->tensor;
        run->g = t->offset + row * t->cols + col;
        run->loc = 0;
        if (v->slice) {
                const loom_sync_rect *s = &v->slice[pc->tensor];
                run->loc = v->loc_off[pc->tensor] + (row - s->r0) * (s->c1 - s->c0) + (col - s->c0);
        }
}

void loom__walk(const loom__view *v, const loom_sync_plan *p, const loom_sync_stream *s,
                uint64_t s0, uint64_t n, loom__run_fn fn, void *arg)
{
        uint64_t pos = 0, end = s0 + n;
        for (size_t j = 0; j < s->count && pos < end; j++) {
                uint32_t pi = p->order[s->first + j];
                const loom_sync_piece *pc = &v->map->pieces[pi];
                uint64_t pe = loom_sync_rect_elems(&pc->rect), w = pc->rect.c1 - pc->rect.c0;
                if (pos + pe <= s0) {
                        pos += pe;
                        continue;
                }
                uint64_t a = (s0 > pos ? s0 : pos) - pos,
                         b = (end < pos + pe ? end : pos + pe) - pos;
                for (uint64_t off = a; off < b;) {
                        loom__run run;
                        fill(v, pi, off, &run);
                        uint64_t left = w - off % w;
                        run.len = left < b - off ? left : b - off;
                        run.soff = pos + off;
                        fn(&run, arg);
                        off += run.len;
                }
                pos += pe;
        }
}

void loom__locate(const loom__view *v, const loom_sync_plan *p, const loom_sync_stream *s,
                  uint64_t pos, size_t *k, uint64_t *kstart, uint32_t *tensor, uint64_t *g,
                  uint64_t *loc)
{
        for (;;) {
                const loom_sync_piece *pc = &v->map->pieces[p->order[s->first + *k]];
                uint64_t pe = loom_sync_rect_elems(&pc->rect);
                if (pos < *kstart + pe || *k + 1 >= s->count)
                        break;
                *kstart += pe;
                (*k)++;
        }
        loom__run run;
        fill(v, p->order[s->first + *k], pos - *kstart, &run);
        *tensor = run.tensor;
        *g = run.g;
        *loc = run.loc;
}
