/*
 * mem.c - ROSE's preemptive memory sharing policy, in KV pages. Pure: time is an argument.
 *
 * Serving first: serving may always take pages from the rollout side. Per RL step the rollout
 * side gets a budget (device pages minus the headroom H minus serving's recent use). Serving
 * eating past a watermark inside H is a burst: the budget halves once, rollout requests are
 * freed whole (a request's KV is useless in part) until the rollout side fits, and the budget
 * stays frozen until the next step so bursty traffic cannot make it oscillate. Idle prefixes
 * (a trajectory between turns) stay cached under a lease and are the first to go.
 *
 * The static split (preempt = 0) gives each side half the pages and never moves them.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/harvest.h"

int loom_harvest_mem_init(loom_harvest_mem *m, const loom_harvest_mem_cfg *cfg, loom_err *e)
{
        memset(m, 0, sizeof *m);
        if (cfg->pages == 0)
                return loom_err_set(e, LOOM_EINVAL, "pages", "must be at least 1");
        if (cfg->headroom_pages > cfg->pages)
                return loom_err_set(e, LOOM_EINVAL, "headroom", "%u pages exceed the pool of %u",
                                    cfg->headroom_pages, cfg->pages);
        if (!(cfg->watermark >= 0 && cfg->watermark <= 1))
                return loom_err_set(e, LOOM_EINVAL, "watermark", "must be in [0, 1], got %g",
                                    cfg->watermark);
        if (cfg->lease < 0)
                return loom_err_set(e, LOOM_EINVAL, "lease", "must be >= 0");
        m->cfg = *cfg;
        loom_harvest_mem_step(m, 0);
        return 0;
}

void loom_harvest_mem_fini(loom_harvest_mem *m)
{
        free(m->entries);
        m->entries = NULL;
        m->nentries = m->cap = 0;
}

uint32_t loom_harvest_mem_watermark(const loom_harvest_mem *m)
{
        if (!m->cfg.preempt)
                return m->serving_cap;
        return m->serving_recent + (uint32_t)(m->cfg.watermark * m->cfg.headroom_pages + 0.5);
}

static void remove_at(loom_harvest_mem *m, size_t i)
{
        m->rollout_used -= m->entries[i].pages;
        m->entries[i] = m->entries[--m->nentries];
}

/* Index of the victim to free next: the cached prefix closest to expiry, else (if active) the
 * newest running request; -1 when none. */
static long victim(const loom_harvest_mem *m, int active, uint32_t skip)
{
        long best = -1;
        for (size_t i = 0; i < m->nentries; i++) {
                const loom_harvest_entry *x = &m->entries[i];
                if (x->traj == skip)
                        continue;
                if (x->state == LOOM_HARVEST_CACHED) {
                        if (best < 0 || m->entries[best].state != LOOM_HARVEST_CACHED ||
                            x->expiry < m->entries[best].expiry)
                                best = (long)i;
                } else if (active && (best < 0 || (m->entries[best].state == LOOM_HARVEST_ACTIVE &&
                                                   x->seq > m->entries[best].seq))) {
                        best = (long)i;
                }
        }
        return best;
}

static uint32_t cached_pages(const loom_harvest_mem *m, uint32_t skip)
{
        uint32_t s = 0;
        for (size_t i = 0; i < m->nentries; i++)
                if (m->entries[i].state == LOOM_HARVEST_CACHED && m->entries[i].traj != skip)
                        s += m->entries[i].pages;
        return s;
}

void loom_harvest_mem_step(loom_harvest_mem *m, uint32_t serving_recent)
{
        uint32_t P = m->cfg.pages;
        m->frozen = 0;
        if (!m->cfg.preempt) {
                m->budget = P / 2;
                m->serving_cap = P - P / 2;
                m->serving_recent = 0;
        } else {
                uint64_t taken = (uint64_t)m->cfg.headroom_pages + serving_recent;
                m->budget = taken >= P ? 0 : (uint32_t)(P - taken);
                m->serving_cap = P;
                m->serving_recent = serving_recent;
        }
        long v; /* a smaller budget drops idle prefixes now; running requests finish */
        while (m->rollout_used > m->budget && (v = victim(m, 0, LOOM_HARVEST_NONE)) >= 0)
                remove_at(m, (size_t)v);
}

loom_harvest_entry *loom_harvest_mem_find(loom_harvest_mem *m, uint32_t traj)
{
        for (size_t i = 0; i < m->nentries; i++)
                if (m->entries[i].traj == traj)
                        return &m->entries[i];
        return NULL;
}

size_t loom_harvest_mem_expire(loom_harvest_mem *m, loom_us now, uint32_t *out, size_t cap)
{
        if (now < m->next_expiry)
                return 0; /* called before every GPU iteration: most calls end here */
        size_t n = 0;
        loom_us next = LOOM_HARVEST_INF;
        for (size_t i = 0; i < m->nentries;) {
                loom_harvest_entry *x = &m->entries[i];
                if (x->state == LOOM_HARVEST_CACHED && x->expiry <= now) {
                        if (n < cap)
                                out[n] = x->traj;
                        n++;
                        remove_at(m, i);
                } else {
                        if (x->state == LOOM_HARVEST_CACHED && x->expiry < next)
                                next = x->expiry;
                        i++;
                }
        }
        m->next_expiry = next;
        return n < cap ? n : cap;
}

static uint32_t free_pages(const loom_harvest_mem *m)
{
        return m->cfg.pages - m->serving_used - m->rollout_used;
}

/* Pages a rollout may still take: the smaller of the budget left and the pool's free pages. */
static uint32_t rollout_room(const loom_harvest_mem *m)
{
        uint32_t b = m->budget > m->rollout_used ? m->budget - m->rollout_used : 0;
        uint32_t f = free_pages(m);
        return b < f ? b : f;
}

int loom_harvest_mem_rollout_take(loom_harvest_mem *m, loom_us now, uint32_t traj, uint32_t pages)
{
        (void)now;
        loom_harvest_entry *x = loom_harvest_mem_find(m, traj);
        uint32_t have = x ? x->pages : 0;
        uint32_t extra = pages > have ? pages - have : 0;
        /* Freeing a cached prefix raises the free pages one for one, but the budget's room only
         * once the rollout side is back under its budget (running requests may hold more than a
         * budget cut since): what is reachable is the room with every other prefix freed. */
        uint32_t cached = cached_pages(m, traj);
        uint32_t used = m->rollout_used - cached;
        uint32_t b = m->budget > used ? m->budget - used : 0;
        uint32_t f = free_pages(m) + cached;
        if (extra > (b < f ? b : f))
                return LOOM_ERANGE;
        if (!x && m->nentries == m->cap &&
            loom_reserve(&m->entries, &m->cap, m->nentries + 1, sizeof *m->entries, 16))
                return LOOM_ENOMEM;
        while (extra > rollout_room(m)) { /* reclaim other idle prefixes, nearest expiry first */
                long v = victim(m, 0, traj);
                if (v < 0)
                        return LOOM_ERANGE; /* unreachable: the check above counted them all */
                remove_at(m, (size_t)v);
        }
        x = loom_harvest_mem_find(m, traj); /* removals move entries */
        if (!x) {
                x = &m->entries[m->nentries++];
                x->traj = traj;
                x->pages = 0;
                x->tokens = 0;
        }
        m->rollout_used += extra;
        x->pages += extra;
        x->state = LOOM_HARVEST_ACTIVE;
        x->seq = ++m->seq;
        x->expiry = 0;
        return 0;
}

void loom_harvest_mem_rollout_idle(loom_harvest_mem *m, loom_us now, uint32_t traj, int cache)
{
        loom_harvest_entry *x = loom_harvest_mem_find(m, traj);
        if (!x)
                return;
        if (!cache || m->cfg.lease == 0) {
                remove_at(m, (size_t)(x - m->entries));
                return;
        }
        x->state = LOOM_HARVEST_CACHED;
        x->expiry = now + m->cfg.lease;
        if (x->expiry < m->next_expiry)
                m->next_expiry = x->expiry;
}

void loom_harvest_mem_rollout_drop(loom_harvest_mem *m, uint32_t traj)
{
        loom_harvest_entry *x = loom_harvest_mem_find(m, traj);
        if (x)
                remove_at(m, (size_t)(x - m->entries));
}

static void free_one(loom_harvest_mem *m, long v, uint32_t *aborted, size_t cap, size_t *na)
{
        if (m->entries[v].state == LOOM_HARVEST_ACTIVE && *na < cap)
                aborted[(*na)++] = m->entries[v].traj;
        remove_at(m, (size_t)v);
}

int loom_harvest_mem_serving_take(loom_harvest_mem *m, uint32_t pages, uint32_t *aborted,
                                  size_t cap, size_t *naborted)
{
        *naborted = 0;
        if ((uint64_t)m->serving_used + pages > m->serving_cap)
                return LOOM_ERANGE;
        if (!m->cfg.preempt && pages > free_pages(m))
                return LOOM_ERANGE;
        while (pages > free_pages(m)) {
                long v = victim(m, 1, LOOM_HARVEST_NONE);
                free_one(m, v, aborted, cap, naborted); /* serving_cap <= pages: v exists */
        }
        m->serving_used += pages;
        if (m->cfg.preempt && !m->frozen && m->serving_used > loom_harvest_mem_watermark(m)) {
                m->budget /= 2; /* emergency cut: once per step */
                m->frozen = 1;
                m->cuts++;
                long v;
                while (m->rollout_used > m->budget && (v = victim(m, 1, LOOM_HARVEST_NONE)) >= 0)
                        free_one(m, v, aborted, cap, naborted);
        }
        return 0;
}

void loom_harvest_mem_serving_put(loom_harvest_mem *m, uint32_t pages)
{
        m->serving_used = pages > m->serving_used ? 0 : m->serving_used - pages;
}
