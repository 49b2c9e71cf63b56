/* heap.c - the simulator's event queue: a binary min-heap on (time, insertion sequence). */
#include <stdlib.h>

#include "sim_int.h"

static inline bool ev_less(const sim_event *a, const sim_event *b)
{
        return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

void loom__sim_heap_init(sim_heap *h)
{
        h->a = NULL;
        h->n = h->cap = 0;
        h->seq = 0;
}

void loom__sim_heap_free(sim_heap *h)
{
        free(h->a);
        loom__sim_heap_init(h);
}

int loom__sim_heap_push(sim_heap *h, loom_us t, sim_ev_type type, uint32_t job, uint32_t version)
{
        if (loom_reserve(&h->a, &h->cap, h->n + 1, sizeof *h->a, 256))
                return LOOM_ENOMEM;
        sim_event ev = {.t = t, .seq = h->seq++, .job = job, .version = version, .type = type};
        size_t i = h->n++;
        while (i > 0) {
                size_t up = (i - 1) / 2;
                if (!ev_less(&ev, &h->a[up]))
                        break;
                h->a[i] = h->a[up];
                i = up;
        }
        h->a[i] = ev;
        return 0;
}

int loom__sim_heap_seed(sim_heap *h, const loom_sim_workload *w)
{
        for (int i = 0; i < w->n; i++) {
                int rc = loom__sim_heap_push(h, w->jobs[i].arrival, SIM_EV_ARRIVAL, (uint32_t)i, 0);
                for (int k = 0; k < w->jobs[i].n_fail && !rc; k++)
                        rc = loom__sim_heap_push(
                            h, w->jobs[i].arrival + loom_us_from_s(w->jobs[i].fail_h[k] * 3600),
                            SIM_EV_FAIL, (uint32_t)i, 0);
                if (rc)
                        return rc;
        }
        return 0;
}

bool loom__sim_heap_pop(sim_heap *h, sim_event *out)
{
        if (h->n == 0)
                return false;
        *out = h->a[0];
        sim_event last = h->a[--h->n];
        size_t i = 0, n = h->n;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= n)
                        break;
                if (c + 1 < n && ev_less(&h->a[c + 1], &h->a[c]))
                        c++;
                if (!ev_less(&h->a[c], &last))
                        break;
                h->a[i] = h->a[c];
                i = c;
        }
        if (n > 0)
                h->a[i] = last;
        return true;
}
