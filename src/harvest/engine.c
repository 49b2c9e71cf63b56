/*
 * engine.c - the co-serving executor of one GPU: serving first, rollouts in the slack.
 *
 * Each iteration is one of: a serving prefill batch, a serving decode step, a rollout prefill
 * chunk, a rollout decode step, or (serverless) the eviction of the rollout model. The choice:
 *   - a dedicated GPU runs rollouts only, alternating prefill chunks and decode steps;
 *   - with no serving work queued, a rollout step runs (the slack is unbounded);
 *   - with serving work and an admission check on this instance kind (Eq. 1 on prefill, Eq. 2
 *     on decode, both co-located), the rollout step runs only if it fits in the slack: the
 *     next serving iteration still starts in time for every queued or running request;
 *   - a single-objective policy checks nothing on the other instance kind, so its admission
 *     says yes and the rollout step runs ahead of serving;
 *   - with no admission at all (static, serverless, prism: spatial sharing), rollout and
 *     serving iterations alternate.
 * A rollout turn reserves the KV of its whole context when submitted (serving-first memory,
 * mem.c); a turn that makes no progress for `stall` is aborted and reported.
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

int hv_engine_init(hv_engine *g, uint32_t id, loom_harvest_role role, const loom_harvest_model *m,
                   const hv_policy *pol, const loom_harvest_mem_cfg *mc, loom_us b_ttft,
                   loom_us b_tpot, loom_us stall, const hv_callbacks *cb, loom_err *e)
{
        memset(g, 0, sizeof *g);
        int rc = loom_harvest_mem_init(&g->mem, mc, e);
        if (rc)
                return rc;
        g->id = id;
        g->role = role;
        g->m = m;
        g->pol = *pol;
        g->b_ttft = b_ttft;
        g->b_tpot = b_tpot;
        g->stall = stall;
        g->cb = *cb;
        /* the guard starts cold at its widest margin: no tail observed yet is no evidence of
         * slack; it opens as observations come in under HV_LO */
        g->g_ttft.margin = g->g_tpot.margin = HV_MARGIN_MAX;
        return 0;
}

void hv_engine_fini(hv_engine *g)
{
        loom_harvest_mem_fini(&g->mem);
        free(g->pq);
        free(g->dec);
        free(g->dwait);
        free(g->turns);
        memset(g, 0, sizeof *g);
}

int hv_engine_busy(const hv_engine *g)
{
        return g->cur.kind != HV_IDLE;
}

loom_us hv_noisy(loom_us d, double noise, uint64_t seed, uint32_t gpu, uint64_t seq)
{
        if (!(noise > 0))
                return d;
        uint64_t st = loom_mix64(seed ^ ((uint64_t)gpu << 40) ^ seq ^ 0x2545f4914f6cdd1dULL);
        double u = (double)(st >> 11) / 9007199254740992.0;
        d = (loom_us)((double)d * (1 + noise * (2 * u - 1)));
        return d > 0 ? d : 1;
}

size_t hv_engine_serving_load(const hv_engine *g)
{
        return (g->pq_n - g->pq_head) + g->ndec + g->ndwait;
}

void hv_engine_rl_step(hv_engine *g)
{
        uint32_t recent =
            g->serving_peak > g->mem.serving_used ? g->serving_peak : g->mem.serving_used;
        loom_harvest_mem_step(&g->mem, recent);
        g->serving_peak = g->mem.serving_used;
}

static long find_turn(const hv_engine *g, uint32_t traj)
{
        for (size_t i = 0; i < g->nturns; i++)
                if (g->turns[i].traj == traj)
                        return (long)i;
        return -1;
}

static void abort_turn(hv_engine *g, loom_us now, uint32_t traj, int why)
{
        long i = find_turn(g, traj);
        if (i >= 0)
                g->turns[i] = g->turns[--g->nturns];
        loom_harvest_mem_rollout_drop(&g->mem, traj);
        if (i >= 0 && g->cb.turn_aborted)
                g->cb.turn_aborted(g->cb.arg, now, traj, g->id, why);
}

/* Serving takes pages; rollout requests it preempts are aborted and reported. */
static int serving_take(hv_engine *g, loom_us now, uint32_t pages)
{
        uint32_t ab[256];
        size_t na;
        int rc = loom_harvest_mem_serving_take(&g->mem, pages, ab, 256, &na);
        if (rc)
                return rc;
        if (g->mem.serving_used > g->serving_peak)
                g->serving_peak = g->mem.serving_used;
        for (size_t i = 0; i < na; i++) {
                long t = find_turn(g, ab[i]);
                if (t >= 0)
                        g->turns[t] = g->turns[--g->nturns];
                g->cut_aborts++;
                if (t >= 0 && g->cb.turn_aborted)
                        g->cb.turn_aborted(g->cb.arg, now, ab[i], g->id, HV_ABORT_CUT);
        }
        return 0;
}

static void note_arrival(hv_engine *g, const hv_sreq *r)
{
        g->recent_prompt[g->recent_pos] = r->prompt;
        g->recent_ctx[g->recent_pos] = r->prompt + r->gen;
        g->recent_pos = (g->recent_pos + 1) % HV_RECENT;
        if (g->nrecent < HV_RECENT)
                g->nrecent++;
}

static uint32_t recent_max(const uint32_t *v, uint32_t n)
{
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++)
                if (v[i] > m)
                        m = v[i];
        return m;
}

/* The k-th largest of v[0..n) (k >= 1), for the guard's p99 over a small window. */
static double kth_largest(const double *v, uint32_t n, uint32_t k)
{
        double top[8];
        uint32_t nt = 0;
        for (uint32_t i = 0; i < n; i++) {
                uint32_t j = nt < k ? nt++ : k;
                if (j == k && v[i] <= top[k - 1])
                        continue;
                if (j == k)
                        j = k - 1;
                while (j > 0 && top[j - 1] < v[i]) {
                        top[j] = top[j - 1];
                        j--;
                }
                top[j] = v[i];
        }
        return nt ? top[nt - 1] : 0;
}

void hv_guard_observe(hv_guard *gd, double ratio)
{
        gd->ring[gd->pos] = ratio;
        gd->pos = (gd->pos + 1) % HV_WIN;
        if (gd->n < HV_WIN)
                gd->n++;
        if (++gd->since < HV_EVERY)
                return;
        gd->since = 0;
        /* p99 of the window: the ceil(0.01 n)-th largest */
        uint32_t k = (gd->n + 99) / 100;
        gd->tail = kth_largest(gd->ring, gd->n, k < 1 ? 1 : k > 8 ? 8 : k);
        if (gd->tail > HV_HI) {
                gd->margin += HV_GAIN_UP * (gd->tail - HV_HI);
                if (gd->margin > HV_MARGIN_MAX)
                        gd->margin = HV_MARGIN_MAX;
                gd->raised++;
        } else if (gd->tail < HV_LO && gd->margin > 0) {
                gd->margin -= HV_GAIN_DOWN * (HV_LO - gd->tail);
                if (gd->margin < 0)
                        gd->margin = 0;
                gd->lowered++;
        }
}

int hv_engine_submit_prefill(hv_engine *g, loom_us now, const hv_sreq *r)
{
        note_arrival(g, r);
        if (g->pq_head > 0 && g->pq_head == g->pq_n)
                g->pq_head = g->pq_n = 0;
        if (loom_reserve(&g->pq, &g->pq_cap, g->pq_n + 1, sizeof *g->pq, 64))
                return LOOM_ENOMEM;
        g->pq[g->pq_n++] = *r;
        return 0;
}

static int start_decode(hv_engine *g, loom_us now, hv_sreq *r)
{
        r->pages = loom_harvest_kv_pages(g->m, (uint64_t)r->prompt + r->gen);
        if (serving_take(g, now, r->pages))
                return LOOM_ERANGE;
        if (loom_reserve(&g->dec, &g->dec_cap, g->ndec + 1, sizeof *g->dec, 64)) {
                loom_harvest_mem_serving_put(&g->mem, r->pages);
                return LOOM_ENOMEM;
        }
        r->joined = g->seq + 1;
        g->dec[g->ndec++] = *r;
        g->ctx_dec += r->prompt + r->done;
        return 0;
}

int hv_engine_submit_decode(hv_engine *g, loom_us now, const hv_sreq *r)
{
        hv_sreq x = *r;
        if (g->role == LOOM_HARVEST_DECODE)
                note_arrival(g, r);
        if (x.gen <= 1) { /* the prefill produced the only token */
                if (g->cb.served)
                        g->cb.served(g->cb.arg, now, &x);
                return 0;
        }
        if (start_decode(g, now, &x) == 0)
                return 0;
        if (loom_reserve(&g->dwait, &g->dwait_cap, g->ndwait + 1, sizeof *g->dwait, 16))
                return LOOM_ENOMEM;
        g->dwait[g->ndwait++] = x;
        return 0;
}

int hv_engine_submit_turn(hv_engine *g, loom_us now, uint32_t traj, uint32_t prompt, uint32_t resp,
                          int *affine)
{
        if (affine)
                *affine = 0;
        if (g->evicted)
                return LOOM_ESTATE;
        if (find_turn(g, traj) >= 0)
                return LOOM_EEXIST;
        uint32_t cached = 0;
        loom_harvest_entry *x = loom_harvest_mem_find(&g->mem, traj);
        if (g->pol.prefix_cache && x && x->state == LOOM_HARVEST_CACHED && x->tokens <= prompt &&
            x->expiry > now)
                cached = x->tokens;
        if (loom_reserve(&g->turns, &g->turns_cap, g->nturns + 1, sizeof *g->turns, 16))
                return LOOM_ENOMEM;
        uint32_t pages = loom_harvest_kv_pages(g->m, (uint64_t)prompt + resp);
        int rc = loom_harvest_mem_rollout_take(&g->mem, now, traj, pages);
        if (rc)
                return rc;
        x = loom_harvest_mem_find(&g->mem, traj);
        x->tokens = cached;
        if (g->nturns == 0)
                g->rollout_ran = now; /* an idle rollout side starts its clock now */
        g->turns[g->nturns++] = (hv_turn){.traj = traj,
                                          .prompt = prompt,
                                          .cached = cached,
                                          .resp = resp,
                                          .last_progress = now,
                                          .joined = g->seq + 1};
        if (affine)
                *affine = cached > 0;
        return 0;
}

/* ---- choosing an iteration ------------------------------------------------------------ */

/* The next serving iteration. A prefill batch takes requests in FIFO order up to the token
 * budget, but never one whose addition would finish an earlier request of the batch after its
 * TTFT deadline: Eq. 1 admitted rollouts against the batch as it stood. */
static int serving_step(hv_engine *g, loom_us now, hv_step *s)
{
        if (g->role == LOOM_HARVEST_PREFILL || g->role == LOOM_HARVEST_COLOCATED) {
                size_t n = g->pq_n - g->pq_head;
                if (n > 0) {
                        uint64_t tok = 0;
                        loom_us d = 0, deadline = LOOM_HARVEST_INF;
                        uint32_t k = 0;
                        while (k < n) {
                                const hv_sreq *r = &g->pq[g->pq_head + k];
                                loom_us t = loom_harvest_t_prefill(g->m, r->prompt, 0) -
                                            (k > 0 ? g->m->prf_overhead : 0);
                                if (k > 0 && (tok + r->prompt > g->pol.prefill_batch_tokens ||
                                              now + d + t > deadline))
                                        break;
                                tok += r->prompt;
                                d += t;
                                if (r->arr + g->b_ttft < deadline)
                                        deadline = r->arr + g->b_ttft;
                                k++;
                        }
                        *s = (hv_step){.kind = HV_S_PREFILL, .dur = d, .count = k};
                        return 1;
                }
        }
        if (g->ndec > 0) {
                *s = (hv_step){.kind = HV_S_DECODE,
                               .dur = loom_harvest_t_decode(g->m, (uint32_t)g->ndec, g->ctx_dec)};
                return 1;
        }
        return 0;
}

static int rollout_step(hv_engine *g, hv_step *s)
{
        long pre = -1;
        uint32_t b = 0;
        uint64_t ctx = 0;
        for (size_t i = 0; i < g->nturns; i++) {
                const hv_turn *t = &g->turns[i];
                if (t->cached + t->prefilled < t->prompt) {
                        if (pre < 0)
                                pre = (long)i;
                } else {
                        b++;
                        ctx += (uint64_t)t->prompt + t->gen;
                }
        }
        if (pre < 0 && b == 0)
                return 0;
        g->toggle = !g->toggle;
        if (pre >= 0 && (b == 0 || g->toggle)) {
                const hv_turn *t = &g->turns[pre];
                uint32_t left = t->prompt - t->cached - t->prefilled;
                uint32_t n = g->pol.chunk > 0 && left > (uint32_t)g->pol.chunk
                                 ? (uint32_t)g->pol.chunk
                                 : left;
                *s = (hv_step){.kind = HV_R_PREFILL,
                               .dur = loom_harvest_t_prefill(g->m, n, t->cached + t->prefilled),
                               .traj = t->traj,
                               .tokens = n};
                return 1;
        }
        *s = (hv_step){.kind = HV_R_DECODE, .dur = loom_harvest_t_decode(g->m, b, ctx)};
        return 1;
}

/* Eq. 1 over the queue, each request's prefill estimate taken as the end of the batch it will
 * run in (the same cut as serving_step, without the deadline rule, which only shortens).
 * Sound: every estimate is inflated by est_err, and a request arriving now with the largest
 * recent prompt, behind the whole queue in a batch of its own, counts too (an arrival during
 * the rollout step is delayed by it exactly as a queued request is). *queue_end receives the
 * end of the last queued batch. */
static loom_us min_slack_prf(const hv_engine *g, loom_us now, loom_us *queue_end)
{
        double inf = g->pol.sound ? 1 + g->pol.est_err : 1;
        loom_us s = LOOM_HARVEST_INF, end = 0;
        size_t i = g->pq_head;
        while (i < g->pq_n) {
                size_t j = i;
                uint64_t tok = 0;
                loom_us d = 0;
                while (j < g->pq_n &&
                       (j == i || tok + g->pq[j].prompt <= g->pol.prefill_batch_tokens)) {
                        tok += g->pq[j].prompt;
                        d += loom_harvest_t_prefill(g->m, g->pq[j].prompt, 0) -
                             (j > i ? g->m->prf_overhead : 0);
                        j++;
                }
                end += (loom_us)((double)d * inf);
                for (size_t k = i; k < j; k++) {
                        loom_us x = loom_harvest_slack_ttft(now, g->pq[k].arr, g->b_ttft, end);
                        if (x < s)
                                s = x;
                }
                i = j;
        }
        *queue_end = end;
        if (g->pol.sound && g->role != LOOM_HARVEST_DECODE) {
                uint32_t p = recent_max(g->recent_prompt, g->nrecent);
                if (p > 0) {
                        loom_us t =
                            end + (loom_us)((double)loom_harvest_t_prefill(g->m, p, 0) * inf);
                        loom_us x = loom_harvest_slack_ttft(now, now, g->b_ttft, t);
                        if (x < s)
                                s = x;
                }
        }
        return s;
}

/* Eq. 2 over the running decodes. Co-located, queued prefills run before the next decode step
 * (prefill first), so they count in the estimate: the first batch in the plain form, the whole
 * queue when sound. Sound, the step is also estimated with the decodes waiting for memory and
 * one more joiner of the largest recent context (the batch a rollout step's delay lands on
 * may have grown), inflated by est_err. */
static loom_us min_slack_dec(const hv_engine *g, loom_us now, loom_us queue_end)
{
        if (g->ndec == 0)
                return LOOM_HARVEST_INF;
        loom_us last = g->dec[0].last;
        for (size_t i = 1; i < g->ndec; i++)
                if (g->dec[i].last < last)
                        last = g->dec[i].last;
        uint32_t b = (uint32_t)g->ndec;
        uint64_t ctx = g->ctx_dec;
        loom_us est;
        if (g->pol.sound) {
                for (size_t i = 0; i < g->ndwait; i++)
                        ctx += g->dwait[i].prompt + g->dwait[i].done;
                b += (uint32_t)g->ndwait + 1;
                ctx += recent_max(g->recent_ctx, g->nrecent);
                est = (loom_us)((double)loom_harvest_t_decode(g->m, b, ctx) * (1 + g->pol.est_err));
                if (g->role == LOOM_HARVEST_COLOCATED)
                        est += queue_end;
        } else {
                est = loom_harvest_t_decode(g->m, b, ctx);
                if (g->role == LOOM_HARVEST_COLOCATED && g->pq_n > g->pq_head) {
                        loom_us first = 0; /* the first batch only */
                        uint64_t tok = 0;
                        for (size_t j = g->pq_head; j < g->pq_n; j++) {
                                if (j > g->pq_head &&
                                    tok + g->pq[j].prompt > g->pol.prefill_batch_tokens)
                                        break;
                                tok += g->pq[j].prompt;
                                first += loom_harvest_t_prefill(g->m, g->pq[j].prompt, 0) -
                                         (j > g->pq_head ? g->m->prf_overhead : 0);
                        }
                        est += first;
                }
        }
        return loom_harvest_slack_tpot(now, last, g->b_tpot, est);
}

/* The slack a rollout step of `work` must fit in, and whether it does. */
static int rollout_fits(const hv_engine *g, loom_us now, loom_us work, loom_us *need)
{
        /* only the slacks something looks at: a long queue makes them O(queue) */
        loom_harvest_admit_mode mode = g->pol.serverless ? LOOM_HARVEST_ADMIT_DUAL : g->pol.admit;
        int checks = loom_harvest_checks(mode, g->role);
        int use_prf = checks && mode != LOOM_HARVEST_ADMIT_TPOT && g->role != LOOM_HARVEST_DECODE;
        int use_dec = checks && mode != LOOM_HARVEST_ADMIT_TTFT && g->role != LOOM_HARVEST_PREFILL;
        loom_us qend = 0, sp = LOOM_HARVEST_INF, sd = LOOM_HARVEST_INF;
        if (use_prf || (use_dec && g->role == LOOM_HARVEST_COLOCATED && g->pol.sound))
                sp = min_slack_prf(g, now, &qend);
        if (use_dec)
                sd = min_slack_dec(g, now, qend);
        *need = loom_harvest_slack(LOOM_HARVEST_ADMIT_DUAL, g->role, sp, sd);
        if (g->pol.sound) {
                if (sp != LOOM_HARVEST_INF)
                        sp -= (loom_us)(g->g_ttft.margin * (double)g->b_ttft);
                if (sd != LOOM_HARVEST_INF)
                        sd -= (loom_us)(g->g_tpot.margin * (double)g->b_tpot);
                work = (loom_us)((double)work * (1 + g->pol.est_err));
        }
        return loom_harvest_admit(loom_harvest_slack(g->pol.admit, g->role, sp, sd), work, 0, 1);
}

/* A turn is stalled when serving has kept the GPU's rollout side from running at all for the
 * stall timeout (ROSE's signal that the GPU has no slack to lend), not when it merely waits
 * behind other turns' prefills on a rollout side that is making progress. */
static void check_stalls(hv_engine *g, loom_us now)
{
        if (g->role == LOOM_HARVEST_DEDICATED ||
            !loom_harvest_stalled(now, g->rollout_ran, g->stall))
                return;
        for (size_t i = 0; i < g->nturns;) {
                if (loom_harvest_stalled(now, g->turns[i].last_progress, g->stall)) {
                        g->stalls++;
                        abort_turn(g, now, g->turns[i].traj, HV_ABORT_STALL);
                } else {
                        i++;
                }
        }
}

static void evict(hv_engine *g, loom_us now)
{
        g->evictions++;
        g->evicted = 1;
        g->reload_until = now + g->pol.evict_cost + g->pol.cooldown + g->pol.reload;
        while (g->nturns > 0)
                abort_turn(g, now, g->turns[0].traj, HV_ABORT_EVICT);
        while (g->mem.nentries > 0)
                loom_harvest_mem_rollout_drop(&g->mem, g->mem.entries[0].traj);
        if (g->cb.evicted)
                g->cb.evicted(g->cb.arg, now, g->id, g->reload_until);
}

int hv_engine_next(hv_engine *g, loom_us now)
{
        hv_step sv, ro;
        uint32_t gone[64];
        loom_harvest_mem_expire(&g->mem, now, gone, 64);
        if (g->evicted && now >= g->reload_until)
                g->evicted = 0;
        check_stalls(g, now);
        int has_s = serving_step(g, now, &sv);
        int has_r = !g->evicted && rollout_step(g, &ro);
        int run_r = 0;
        if (has_r && !has_s) {
                run_r = 1;
        } else if (has_r && has_s) {
                loom_us need;
                int fits = rollout_fits(g, now, ro.dur, &need);
                if (g->pol.serverless && need < ro.dur) {
                        /* serving needs the GPU: evict the rollout model */
                        evict(g, now);
                        g->cur =
                            (hv_step){.kind = HV_EVICT, .dur = g->pol.evict_cost, .seq = ++g->seq};
                        return 1;
                }
                if (g->pol.admit == LOOM_HARVEST_ADMIT_NONE)
                        run_r = !g->last_rollout;
                else
                        run_r = fits;
        }
        if (run_r)
                g->cur = ro;
        else if (has_s)
                g->cur = sv;
        else
                return 0;
        g->last_rollout = run_r;
        g->cur.seq = ++g->seq;
        return 1;
}

/* ---- applying an iteration ------------------------------------------------------------- */

/* Decodes waiting for serving memory start in arrival order, but one that does not fit yet
 * never holds back a later one that does (first fit): a large request waits for memory
 * without blocking the queue behind it. */
static void admit_waiting(hv_engine *g, loom_us now)
{
        size_t k = 0;
        for (size_t i = 0; i < g->ndwait; i++)
                if (start_decode(g, now, &g->dwait[i]) != 0)
                        g->dwait[k++] = g->dwait[i];
        g->ndwait = k;
}

static void finish_prefill(hv_engine *g, loom_us now)
{
        for (uint32_t k = 0; k < g->cur.count; k++) {
                hv_sreq *r = &g->pq[g->pq_head++];
                r->first = r->last = now;
                r->done = 1;
                hv_guard_observe(&g->g_ttft, (double)(now - r->arr) / (double)g->b_ttft);
                if (g->cb.prefilled)
                        g->cb.prefilled(g->cb.arg, now, r);
        }
}

static void finish_decode(hv_engine *g, loom_us now)
{
        loom_us worst = 0; /* the step's longest interval: one guard sample per step */
        for (size_t i = 0; i < g->ndec;) {
                hv_sreq *r = &g->dec[i];
                if (r->joined > g->cur.seq) {
                        i++;
                        continue;
                }
                if (g->cb.token)
                        g->cb.token(g->cb.arg, now - r->last);
                if (now - r->last > worst)
                        worst = now - r->last;
                r->last = now;
                r->done++;
                g->ctx_dec++;
                if (r->done >= r->gen) {
                        if (g->cb.served)
                                g->cb.served(g->cb.arg, now, r);
                        loom_harvest_mem_serving_put(&g->mem, r->pages);
                        g->ctx_dec -= r->prompt + r->done;
                        g->dec[i] = g->dec[--g->ndec];
                } else {
                        i++;
                }
        }
        if (worst > 0)
                hv_guard_observe(&g->g_tpot, (double)worst / (double)g->b_tpot);
        admit_waiting(g, now);
}

static void finish_rollout(hv_engine *g, loom_us now)
{
        g->rollout_ran = now;
        if (g->cur.kind == HV_R_PREFILL) {
                long i = find_turn(g, g->cur.traj);
                if (i >= 0) {
                        g->turns[i].prefilled += g->cur.tokens;
                        g->turns[i].last_progress = now;
                }
                return;
        }
        for (size_t i = 0; i < g->nturns;) {
                hv_turn *t = &g->turns[i];
                if (t->joined > g->cur.seq || t->cached + t->prefilled < t->prompt) {
                        i++;
                        continue;
                }
                t->gen++;
                t->last_progress = now;
                if (t->gen < t->resp) {
                        i++;
                        continue;
                }
                uint32_t traj = t->traj, tokens = t->prompt + t->resp;
                g->turns[i] = g->turns[--g->nturns];
                loom_harvest_mem_rollout_idle(&g->mem, now, traj, g->pol.prefix_cache);
                loom_harvest_entry *x = loom_harvest_mem_find(&g->mem, traj);
                if (x)
                        x->tokens = tokens;
                if (g->cb.turn_done)
                        g->cb.turn_done(g->cb.arg, now, traj, g->id);
        }
}

void hv_engine_finish(hv_engine *g, loom_us now)
{
        hv_step s = g->cur; /* stays current while applied: callbacks see the engine busy */
        switch (s.kind) {
        case HV_S_PREFILL:
                g->busy_serving += s.dur;
                finish_prefill(g, now);
                break;
        case HV_S_DECODE:
                g->busy_serving += s.dur;
                finish_decode(g, now);
                break;
        case HV_R_PREFILL:
        case HV_R_DECODE:
                g->busy_rollout += s.dur;
                finish_rollout(g, now);
                break;
        default:
                break;
        }
        g->cur.kind = HV_IDLE;
}
