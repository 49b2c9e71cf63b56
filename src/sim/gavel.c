/*
 * gavel.c - Gavel+ (WEAVE §6.1): job-level heterogeneity-aware allocation, the baseline that
 * divides GPUs between jobs by time fractions but never interleaves their phases.
 *
 * Gavel gives each job a fraction of the time of a GPU configuration; for RL post-training the
 * heterogeneity-aware configuration is the disaggregated one (rollout on the rollout GPU type,
 * training on the training type). So here a *set* of rollout and training nodes is time-shared
 * by jobs of the same shape: while one member runs an iteration (rollout, training, sync) it
 * holds both pools of the set, and the pool its current phase does not use sits idle. Member i
 * needs the fraction x_i >= (T_i + w_i) / (slo_i x T_i) of the set's time to keep its SLO (T_i
 * its worst-case solo iteration, w_i the warm switch a turn costs); a job joins the existing
 * set that stays feasible, sum x_i <= 1, with the most load afterwards (best fit), and memory
 * residency holds on the set's nodes; otherwise it gets a set of its own. Inside a set the
 * fractions are the minimal ones scaled up to fill the set (Gavel's optimal allocation for a
 * fixed set), enforced by stride scheduling at iteration granularity: the member with the
 * least virtual time (iterations x T_i / x_i) runs next.
 *
 * Emulated: allocation is recomputed at arrivals and departures only, never migrates a job
 * between sets, plans on declared worst cases, and ignores failures (run with --mtbf-h 0).
 * Sets are simulated lazily, each up to the next arrival, since they never interact.
 */
#define _GNU_SOURCE /* qsort_r */
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

typedef struct gset {
        int k_roll, k_train; /* nodes per pool */
        int *members;        /* workload indices */
        int n;
        size_t cap;
        loom_us now; /* when the set is free to start the next iteration */
        int last;    /* member that ran last, -1 */
        double need; /* sum of members' minimal fractions */
        uint64_t mem_roll, mem_train;
        bool open;
        loom_node_id first[2]; /* its nodes' ids in each pool, for the timeline */
} gset;

typedef struct gjob {
        int64_t iter;
        double vtime;
        bool started;
        loom_us first, done;
} gjob;

typedef struct gev {
        loom_us t;
        int pool, delta; /* pool 0/1 nodes (kind 0) or busy GPUs (kind 1) */
        int kind;
} gev;

typedef struct gavel {
        const loom_sim_cfg *c;
        const loom_sim_workload *w;
        gset *sets;
        int n_sets;
        size_t cap_sets;
        gjob *jobs;
        gev *ev;
        size_t n_ev, cap_ev;
        loom_node_id next_id[2];
} gavel;

/* Set s's nodes provisioned (up) or released at t, to the timeline. */
static void tl_nodes(const gavel *g, const gset *s, loom_us t, bool up)
{
        for (int k = 0; k < s->k_roll; k++)
                loom__sim_tl_node(g->c, LOOM_SIM_GAVEL, t, LOOM_POOL_ROLLOUT,
                                  s->first[0] + (loom_node_id)k, up);
        for (int k = 0; k < s->k_train; k++)
                loom__sim_tl_node(g->c, LOOM_SIM_GAVEL, t, LOOM_POOL_TRAIN,
                                  s->first[1] + (loom_node_id)k, up);
}

/* Job ji's phase on set s's nodes of pool p, from sw (taking them) through work to end. */
static void tl_phase(const gavel *g, const gset *s, int ji, int64_t iter, loom_phase ph,
                     loom_pool p, loom_us sw, loom_us work, loom_us end)
{
        if (!g->c->timeline)
                return;
        int k = p == LOOM_POOL_ROLLOUT ? s->k_roll : s->k_train;
        loom_node_id nodes[LOOM_MAX_JOB_NODES];
        int gpus[LOOM_MAX_JOB_NODES];
        for (int i = 0; i < k && i < LOOM_MAX_JOB_NODES; i++) {
                nodes[i] = s->first[p] + (loom_node_id)i;
                gpus[i] = g->c->cluster.gpus_per_node;
        }
        sim_tl_seg seg = {.job = ji,
                          .iter = iter,
                          .phase = ph,
                          .pool = p,
                          .n_nodes = k < LOOM_MAX_JOB_NODES ? k : LOOM_MAX_JOB_NODES,
                          .nodes = nodes,
                          .gpus = gpus,
                          .sw = sw,
                          .work = work,
                          .start = sw,
                          .end = end};
        loom__sim_tl_seg(g->c, LOOM_SIM_GAVEL, &seg);
}

static int push(gavel *g, loom_us t, int kind, int pool, int delta)
{
        if (loom_reserve(&g->ev, &g->cap_ev, g->n_ev + 1, sizeof *g->ev, 1024))
                return LOOM_ENOMEM;
        g->ev[g->n_ev++] = (gev){t, pool, delta, kind};
        return 0;
}

static loom_us solo_wc(const loom_sim_job *j)
{
        return loom_job_t_solo(&j->spec);
}

/* Minimal fraction of a shared set's time that keeps job ji within its SLO. */
static double need_of(const gavel *g, int ji)
{
        const loom_sim_job *j = &g->w->jobs[ji];
        double t = (double)solo_wc(j), sw = (double)loom_sim_warm(g->c, j->model_b);
        return (t + sw) / (j->spec.slo * t);
}

/* Run set s's iterations that start before `until` (INT64_MAX: all). */
static int advance(gavel *g, gset *s, loom_us until)
{
        while (s->open && s->n > 0 && s->now < until) {
                int pick = 0;
                for (int i = 1; i < s->n; i++)
                        if (g->jobs[s->members[i]].vtime < g->jobs[s->members[pick]].vtime)
                                pick = i;
                int ji = s->members[pick];
                gjob *j = &g->jobs[ji];
                const loom_sim_job *sj = &g->w->jobs[ji];
                const loom_job_spec *sp = &sj->spec;
                loom_us took = s->now, ready = sj->arrival + loom_sim_cold(g->c, sj->model_b);
                loom_us t = took;
                if (t < ready)
                        t = ready;
                if (!j->started || s->last != ji)
                        t += loom_sim_warm(g->c, sj->model_b);
                if (!j->started) {
                        j->started = true;
                        j->first = s->now > sj->arrival ? s->now : sj->arrival;
                }
                loom_us roll = sim_phase_us(sp->t_roll, sj->roll[j->iter]);
                loom_us train = sim_phase_us(sp->t_train, sj->train[j->iter]);
                int rc = push(g, t, 1, 0, sp->rollout_gpus);
                if (!rc)
                        rc = push(g, t + roll, 1, 0, -sp->rollout_gpus);
                if (!rc)
                        rc = push(g, t + roll, 1, 1, sp->train_gpus);
                if (!rc)
                        rc = push(g, t + roll + train, 1, 1, -sp->train_gpus);
                if (rc)
                        return rc;
                /* the set's training nodes switch with its rollout nodes, at the turn */
                tl_phase(g, s, ji, j->iter, LOOM_PHASE_ROLLOUT, LOOM_POOL_ROLLOUT, took, t,
                         t + roll);
                tl_phase(g, s, ji, j->iter, LOOM_PHASE_TRAIN, LOOM_POOL_TRAIN, t + roll, t + roll,
                         t + roll + train);
                /* the sync follows every iteration but the last, as in solo */
                bool last = j->iter + 1 >= sp->iterations;
                s->now = t + roll + train + (last ? 0 : sp->t_sync);
                s->last = ji;
                /* x_i: the minimal fractions scaled to fill the set */
                double x = need_of(g, ji) / (s->need > 1e-12 ? s->need : 1);
                j->vtime += (double)solo_wc(sj) / (s->n > 1 ? x : 1);
                if (++j->iter >= sp->iterations) {
                        j->done = s->now;
                        loom__sim_tl_event(g->c, LOOM_SIM_GAVEL, "done", ji, j->done, NULL, -1);
                        s->need -= need_of(g, ji);
                        s->mem_roll -= sp->mem_rollout;
                        s->mem_train -= sp->mem_train;
                        s->members[pick] = s->members[--s->n];
                        if (s->n == 0) {
                                s->open = false;
                                tl_nodes(g, s, s->now, false);
                                rc = push(g, s->now, 0, 0, -s->k_roll);
                                if (!rc)
                                        rc = push(g, s->now, 0, 1, -s->k_train);
                                if (rc)
                                        return rc;
                        }
                }
        }
        return 0;
}

/* The open set job ji fits best (most load after joining), or -1. */
static int best_set(const gavel *g, int ji)
{
        const loom_sim_job *j = &g->w->jobs[ji];
        int gpn = g->c->cluster.gpus_per_node, best = -1;
        uint64_t host = g->c->cluster.host_mem_bytes;
        double best_need = -1, need = need_of(g, ji);
        for (int i = 0; i < g->n_sets; i++) {
                const gset *s = &g->sets[i];
                if (!s->open || s->n >= g->c->policy.max_group_size ||
                    s->k_roll * gpn != j->spec.rollout_gpus ||
                    s->k_train * gpn != j->spec.train_gpus ||
                    s->mem_roll + j->spec.mem_rollout > host ||
                    s->mem_train + j->spec.mem_train > host)
                        continue;
                double total = s->need + need;
                if (total > 1 + 1e-9 || total <= best_need)
                        continue;
                best = i;
                best_need = total;
        }
        return best;
}

static int admit(gavel *g, int ji)
{
        const loom_sim_job *j = &g->w->jobs[ji];
        int gpn = g->c->cluster.gpus_per_node;
        int si = best_set(g, ji);
        if (si < 0) {
                if (loom_reserve(&g->sets, &g->cap_sets, (size_t)g->n_sets + 1, sizeof *g->sets,
                                 64))
                        return LOOM_ENOMEM;
                si = g->n_sets++;
                gset *s = &g->sets[si];
                *s = (gset){.k_roll = j->spec.rollout_gpus / gpn,
                            .k_train = j->spec.train_gpus / gpn,
                            .now = j->arrival,
                            .last = -1,
                            .open = true,
                            .first = {g->next_id[0], g->next_id[1]}};
                g->next_id[0] += (loom_node_id)s->k_roll;
                g->next_id[1] += (loom_node_id)s->k_train;
                tl_nodes(g, s, j->arrival, true);
                int rc = push(g, j->arrival, 0, 0, s->k_roll);
                if (!rc)
                        rc = push(g, j->arrival, 0, 1, s->k_train);
                if (rc)
                        return rc;
        }
        gset *s = &g->sets[si];
        if (loom_reserve(&s->members, &s->cap, (size_t)s->n + 1, sizeof *s->members, 4))
                return LOOM_ENOMEM;
        /* a newcomer starts level with the members, not owed their past turns */
        double v = 0;
        for (int i = 0; i < s->n; i++)
                if (i == 0 || g->jobs[s->members[i]].vtime < v)
                        v = g->jobs[s->members[i]].vtime;
        g->jobs[ji].vtime = v;
        s->members[s->n++] = ji;
        s->need += need_of(g, ji);
        s->mem_roll += j->spec.mem_rollout;
        s->mem_train += j->spec.mem_train;
        if (s->now < j->arrival)
                s->now = j->arrival;
        return 0;
}

static int cmp_gev(const void *a, const void *b)
{
        const gev *x = a, *y = b;
        if (x->t != y->t)
                return (x->t > y->t) - (x->t < y->t);
        return (x->delta > y->delta) - (x->delta < y->delta); /* releases first */
}

/* Workload order by arrival, then index (qsort_r context: the workload). */
static int cmp_arrival(const void *a, const void *b, void *ctx)
{
        const loom_sim_workload *w = ctx;
        int i = *(const int *)a, k = *(const int *)b;
        loom_us x = w->jobs[i].arrival, y = w->jobs[k].arrival;
        if (x != y)
                return (x > y) - (x < y);
        return (i > k) - (i < k);
}

static int replay(gavel *g, loom_sim_result *r, loom_us *end)
{
        qsort(g->ev, g->n_ev, sizeof *g->ev, cmp_gev);
        sim_meter m;
        loom__sim_meter_init(&m, &g->c->cluster, r, g->c->record_series);
        *end = 0;
        for (size_t i = 0; i < g->n_ev; i++) {
                const gev *e = &g->ev[i];
                if (e->kind == 1) {
                        loom__sim_meter_busy(&m, e->t, (loom_pool)e->pool, e->delta);
                        continue;
                }
                int step = e->delta > 0 ? 1 : -1;
                for (int k = 0; k < abs(e->delta); k++) {
                        int rc = loom__sim_meter_nodes(&m, e->t, (loom_pool)e->pool, step);
                        if (rc)
                                return rc;
                }
                if (e->t > *end)
                        *end = e->t;
        }
        loom__sim_meter_finish(&m, *end);
        return 0;
}

int loom__sim_run_gavel(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_result *r,
                        loom_err *e)
{
        gavel g = {.c = c, .w = w};
        loom__sim_tl_head(c, w, LOOM_SIM_GAVEL);
        size_t n = (size_t)(w->n ? w->n : 1);
        int *order = malloc(n * sizeof *order);
        loom_us *done = malloc(n * sizeof *done), *start = malloc(n * sizeof *start);
        g.jobs = calloc(n, sizeof *g.jobs);
        int rc = LOOM_ENOMEM;
        if (!order || !done || !start || !g.jobs)
                goto out;
        for (int i = 0; i < w->n; i++)
                order[i] = i;
        qsort_r(order, (size_t)w->n, sizeof *order, cmp_arrival, (void *)w);
        rc = 0;
        for (int k = 0; k < w->n && !rc; k++) {
                int ji = order[k];
                for (int i = 0; i < g.n_sets && !rc; i++)
                        rc = advance(&g, &g.sets[i], w->jobs[ji].arrival);
                if (!rc && w->jobs[ji].spec.iterations > 0)
                        rc = admit(&g, ji);
                r->decisions[LOOM_DECISION_NEW_GROUP]++;
        }
        for (int i = 0; i < g.n_sets && !rc; i++)
                rc = advance(&g, &g.sets[i], INT64_MAX);
        loom_us end;
        if (!rc)
                rc = replay(&g, r, &end);
        if (rc)
                goto out;
        for (int i = 0; i < w->n; i++) {
                done[i] = w->jobs[i].spec.iterations > 0 ? g.jobs[i].done : -1;
                start[i] = g.jobs[i].started ? g.jobs[i].first : w->jobs[i].arrival;
        }
        r->events = g.n_ev;
        rc = loom__sim_finish_jobs(c, w, done, start, r);
out:
        if (rc == LOOM_ENOMEM)
                loom_err_set(e, rc, "", "out of memory");
        for (int i = 0; i < g.n_sets; i++)
                free(g.sets[i].members);
        free(g.sets);
        free(g.ev);
        free(g.jobs);
        free(order);
        free(done);
        free(start);
        return rc;
}
