/*
 * private.c - the baselines in which every job runs alone on nodes of its own, simulated with
 * the same event heap and meter as the core-driven policies:
 *
 *   solo       Solo-D, WEAVE's standard disaggregation: the job's rollout GPUs and training GPUs
 *              are dedicated to it from arrival to completion. As in the core-driven runs,
 *              the state is read into host memory at arrival (cold_s) and every phase starts
 *              warm; with nobody else on its nodes a job pays that warm start only once per
 *              pool.
 *   Failures (workload mtbf_h) lose the iteration in flight; the job restarts after its
 *   migration-and-restart time, at most max_restarts times, then fails.
 *   colocated  veRL-style: every phase on the job's training GPUs (max of its two sizes), the
 *              rollout taking colocated_roll_factor times as long as on a rollout GPU; each
 *              change between rollout and training pays the model's warm switch (the engines
 *              swap weights in GPU memory). Weights never leave the node, so there is no sync.
 *   colocated-slo  colocated held to SLOs: a job that colocated keeps within its SLO on its
 *              profile (colocated_keeps_slo) runs colocated, any other runs as Solo-D. The simple
 *              way an operator who promises SLOs would run each job alone.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

typedef struct pjob {
        bool coloc; /* runs colocated (colocated; colocated-slo where it keeps its SLO) */
        int64_t iter;
        uint32_t version; /* END events of an abandoned phase are stale */
        int restarts;
        bool failed, restarting;
        loom_phase phase;
        bool started_roll, started_train;
        loom_us done_at;
        loom_us seg_start;
        loom_us work_at; /* when the running phase's work began (after its switch) */
        int64_t tl_iter; /* the iteration it belongs to */
} pjob;

typedef struct pengine {
        const loom_sim_cfg *c;
        const loom_sim_workload *w;
        loom_sim_result *r;
        loom_sim_policy pol;
        sim_heap heap;
        sim_meter meter;
        pjob *jobs;
        size_t gantt_cap;
        int next_row[2];
        int *row; /* first node id of each job, per pool: [2 * ji + pool] */
} pengine;

static int nodes_of(const pengine *g, int ji, loom_pool p)
{
        const loom_job_spec *s = &g->w->jobs[ji].spec;
        int node = g->c->cluster.gpus_per_node;
        if (g->jobs[ji].coloc)
                return p == LOOM_POOL_TRAIN
                           ? (s->rollout_gpus > s->train_gpus ? s->rollout_gpus : s->train_gpus) /
                                 node
                           : 0;
        return (p == LOOM_POOL_ROLLOUT ? s->rollout_gpus : s->train_gpus) / node;
}

static int gantt(pengine *g, int ji, loom_us end)
{
        if (!g->c->record_gantt)
                return 0;
        pjob *j = &g->jobs[ji];
        loom_pool pool =
            j->coloc || j->phase == LOOM_PHASE_TRAIN ? LOOM_POOL_TRAIN : LOOM_POOL_ROLLOUT;
        loom_sim_interval iv = {.job = ji,
                                .phase = j->phase,
                                .pool = j->phase == LOOM_PHASE_SYNC ? LOOM_POOL_ROLLOUT : pool,
                                .row = g->row[2 * ji + pool],
                                .start = j->seg_start,
                                .end = end};
        return loom__sim_gantt_add(g->r, &g->gantt_cap, &iv);
}

/* Job ji's running phase to the timeline, ended now (lost: cut by a failure). */
static void tl_phase(pengine *g, int ji, loom_us now, bool lost)
{
        const pjob *j = &g->jobs[ji];
        if (!g->c->timeline)
                return;
        loom_pool pool =
            j->coloc || j->phase == LOOM_PHASE_TRAIN ? LOOM_POOL_TRAIN : LOOM_POOL_ROLLOUT;
        int n = j->phase == LOOM_PHASE_SYNC ? 0 : nodes_of(g, ji, pool);
        loom_node_id nodes[LOOM_MAX_JOB_NODES];
        int gpus[LOOM_MAX_JOB_NODES];
        for (int k = 0; k < n && k < LOOM_MAX_JOB_NODES; k++) {
                nodes[k] = (loom_node_id)(g->row[2 * ji + pool] + k);
                gpus[k] = g->c->cluster.gpus_per_node;
        }
        sim_tl_seg s = {.job = ji,
                        .iter = j->tl_iter,
                        .phase = j->phase,
                        .pool = pool,
                        .n_nodes = n < LOOM_MAX_JOB_NODES ? n : LOOM_MAX_JOB_NODES,
                        .nodes = nodes,
                        .gpus = gpus,
                        .sw = j->seg_start,
                        .work = j->work_at,
                        .start = j->seg_start,
                        .end = now,
                        .lost = lost};
        loom__sim_tl_seg(g->c, g->pol, &s);
}

/* Start job ji's phase ph now; returns the phase's end time. */
static loom_us begin(pengine *g, int ji, loom_phase ph, loom_us now)
{
        pjob *j = &g->jobs[ji];
        const loom_sim_job *sj = &g->w->jobs[ji];
        const loom_job_spec *s = &sj->spec;
        int64_t it = j->iter;
        loom_us sw = 0;
        /* its nodes boot (boot_s), then the state is read in */
        loom_us ready =
            sj->arrival + loom_us_from_s(g->c->boot_s) + loom_sim_cold(g->c, sj->model_b);
        loom_us first = (ready > now ? ready - now : 0) + loom_sim_warm(g->c, sj->model_b);
        if (ph == LOOM_PHASE_ROLLOUT) {
                sw = j->started_roll ? (j->coloc ? loom_sim_warm(g->c, sj->model_b) : 0) : first;
                if (!j->started_roll)
                        g->r->cold_starts++;
                else if (j->coloc)
                        g->r->warm_switches++;
                j->started_roll = true;
        } else if (ph == LOOM_PHASE_TRAIN) {
                sw = j->started_train ? (j->coloc ? loom_sim_warm(g->c, sj->model_b) : 0) : first;
                if (!j->started_train)
                        g->r->cold_starts++;
                else if (j->coloc)
                        g->r->warm_switches++;
                j->started_train = true;
        }
        j->phase = ph;
        j->seg_start = now;
        j->work_at = now + sw;
        j->tl_iter = it;
        loom_us len;
        int gpus;
        loom_pool pool = LOOM_POOL_TRAIN;
        if (ph == LOOM_PHASE_ROLLOUT) {
                len = sim_phase_us(s->t_roll, sj->roll[it]);
                if (j->coloc)
                        len = (loom_us)llround((double)len * g->c->colocated_roll_factor);
                else
                        pool = LOOM_POOL_ROLLOUT;
                gpus = nodes_of(g, ji, pool) * g->c->cluster.gpus_per_node;
        } else if (ph == LOOM_PHASE_TRAIN) {
                int tg = nodes_of(g, ji, LOOM_POOL_TRAIN) * g->c->cluster.gpus_per_node;
                len = sim_phase_us(loom_group_train_time(s->t_train, s->train_gpus, tg,
                                                         g->c->policy.train_scaling_efficiency),
                                   sj->train[it]);
                gpus = tg;
        } else {
                len = s->t_sync;
                gpus = 0;
        }
        if (gpus)
                loom__sim_meter_busy(&g->meter, now, pool, gpus);
        return now + sw + len;
}

static void finish_phase(pengine *g, int ji, loom_us now)
{
        pjob *j = &g->jobs[ji];
        if (j->phase == LOOM_PHASE_SYNC)
                return;
        loom_pool pool =
            j->coloc || j->phase == LOOM_PHASE_TRAIN ? LOOM_POOL_TRAIN : LOOM_POOL_ROLLOUT;
        int gpus = nodes_of(g, ji, pool) * g->c->cluster.gpus_per_node;
        loom__sim_meter_busy(&g->meter, now, pool, -gpus);
}

static int own_nodes(pengine *g, int ji, loom_us now, int delta);

static int step(pengine *g, int ji, loom_us now, bool arrive)
{
        pjob *j = &g->jobs[ji];
        const loom_job_spec *s = &g->w->jobs[ji].spec;
        int rc;
        loom_phase next;
        if (arrive) {
                for (int p = 0; p < 2; p++) {
                        g->row[2 * ji + p] = g->next_row[p];
                        g->next_row[p] += nodes_of(g, ji, (loom_pool)p);
                }
                if ((rc = own_nodes(g, ji, now, 1)))
                        return rc;
                next = LOOM_PHASE_ROLLOUT;
        } else {
                if ((rc = gantt(g, ji, now)))
                        return rc;
                tl_phase(g, ji, now, false);
                finish_phase(g, ji, now);
                if (j->phase == LOOM_PHASE_ROLLOUT) {
                        next = LOOM_PHASE_TRAIN;
                } else if (j->phase == LOOM_PHASE_TRAIN) {
                        if (++j->iter >= s->iterations) {
                                j->done_at = now;
                                loom__sim_tl_event(g->c, g->pol, "done", ji, now, NULL, -1);
                                return own_nodes(g, ji, now, -1);
                        }
                        next = s->t_sync > 0 && !j->coloc ? LOOM_PHASE_SYNC : LOOM_PHASE_ROLLOUT;
                } else {
                        next = LOOM_PHASE_ROLLOUT;
                }
        }
        loom_us end = begin(g, ji, next, now);
        return loom__sim_heap_push(&g->heap, end, SIM_EV_END, (uint32_t)ji, j->version);
}

/* The job's nodes, all pools, provisioned (+1) or released (-1). */
static int own_nodes(pengine *g, int ji, loom_us now, int delta)
{
        for (int p = 0; p < 2; p++)
                for (int k = 0; k < nodes_of(g, ji, (loom_pool)p); k++) {
                        int rc = loom__sim_meter_nodes(&g->meter, now, (loom_pool)p, delta);
                        if (rc)
                                return rc;
                        loom__sim_tl_node(g->c, g->pol, now, (loom_pool)p,
                                          (loom_node_id)(g->row[2 * ji + p] + k), delta > 0);
                }
        return 0;
}

/* A crash: the iteration in flight is lost. The job is re-admitted on nodes of its own, which
 * costs the same as keeping them through the restart; after max_restarts it fails for good. */
static int fail_job(pengine *g, int ji, loom_us now)
{
        pjob *j = &g->jobs[ji];
        if (j->done_at >= 0 || j->failed || j->restarting)
                return 0;
        int rc = gantt(g, ji, now);
        if (rc)
                return rc;
        tl_phase(g, ji, now, true);
        finish_phase(g, ji, now);
        j->version++;
        loom__sim_tl_event(g->c, g->pol, "stop", ji, now, "failed", -1);
        if (j->restarts >= g->c->max_restarts) {
                j->failed = true;
                g->r->jobs_failed++;
                return own_nodes(g, ji, now, -1);
        }
        j->restarts++;
        g->r->restarts++;
        loom__sim_tl_event(g->c, g->pol, "restart", ji, now, NULL,
                           now + loom__sim_restart(g->c, g->w->jobs[ji].model_b));
        j->restarting = true;
        j->phase = LOOM_PHASE_SYNC; /* nothing runs on its GPUs while it restarts */
        j->seg_start = now;
        return loom__sim_heap_push(&g->heap, now + loom__sim_restart(g->c, g->w->jobs[ji].model_b),
                                   SIM_EV_RESUBMIT, (uint32_t)ji, j->version);
}

static int restart_job(pengine *g, int ji, loom_us now)
{
        pjob *j = &g->jobs[ji];
        j->restarting = false;
        loom_us end = begin(g, ji, LOOM_PHASE_ROLLOUT, now);
        return loom__sim_heap_push(&g->heap, end, SIM_EV_END, (uint32_t)ji, j->version);
}

/* Whether colocated keeps j within its SLO on its profile, as an admission would judge it: its
 * rollout on the training GPUs (colocated_roll_factor) and two warm switches per iteration,
 * against SLO x its disaggregated solo iteration, both at the declared (worst-case) times. */
static bool colocated_keeps_slo(const loom_sim_cfg *c, const loom_sim_job *j)
{
        const loom_job_spec *s = &j->spec;
        double colo = (double)s->t_roll * c->colocated_roll_factor + (double)s->t_train +
                      2.0 * (double)loom_sim_warm(c, j->model_b);
        return colo <= s->slo * (double)loom_job_t_solo(s) * (1 + 1e-12);
}

int loom__sim_run_private(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                          loom_sim_result *r, loom_err *e)
{
        pengine g = {.c = c, .w = w, .r = r, .pol = p};
        loom__sim_tl_head(c, w, p);
        loom__sim_heap_init(&g.heap);
        loom__sim_meter_init(&g.meter, &c->cluster, r, c->record_series);
        int rc = LOOM_ENOMEM;
        size_t n = (size_t)(w->n ? w->n : 1);
        g.jobs = calloc(n, sizeof *g.jobs);
        g.row = calloc(2 * n, sizeof *g.row);
        loom_us *done = malloc(n * sizeof *done), *start = malloc(n * sizeof *start);
        if (!g.jobs || !g.row || !done || !start)
                goto out;
        for (int i = 0; i < w->n; i++) {
                g.jobs[i].done_at = -1;
                g.jobs[i].coloc = p == LOOM_SIM_COLOCATED ||
                                  (p == LOOM_SIM_COLOCATED_SLO && colocated_keeps_slo(c, &w->jobs[i]));
        }
        if ((rc = loom__sim_heap_seed(&g.heap, w)))
                goto out;
        sim_event ev;
        loom_us now = 0;
        rc = 0;
        while (!rc && loom__sim_heap_pop(&g.heap, &ev)) {
                pjob *pj = &g.jobs[ev.job];
                if ((ev.type == SIM_EV_END || ev.type == SIM_EV_RESUBMIT) &&
                    ev.version != pj->version)
                        continue;
                if (ev.type == SIM_EV_FAIL && (pj->done_at >= 0 || pj->failed || pj->restarting))
                        continue; /* not running: no event */
                now = ev.t;
                r->events++;
                if (ev.type == SIM_EV_FAIL)
                        rc = fail_job(&g, (int)ev.job, now);
                else if (ev.type == SIM_EV_RESUBMIT)
                        rc = restart_job(&g, (int)ev.job, now);
                else
                        rc = step(&g, (int)ev.job, now, ev.type == SIM_EV_ARRIVAL);
                if ((r->events & 0xFFFF) == 0)
                        sim_progress(c, p, (double)ev.job / (double)n);
        }
        sim_progress(c, p, -1);
        if (rc)
                goto out;
        loom__sim_meter_finish(&g.meter, now);
        for (int i = 0; i < w->n; i++)
                done[i] = g.jobs[i].done_at;
        for (int i = 0; i < w->n; i++)
                start[i] = w->jobs[i].arrival;
        rc = loom__sim_finish_jobs(c, w, done, start, r);
        r->decisions[LOOM_DECISION_NEW_GROUP] = (uint64_t)w->n;
out:
        if (rc == LOOM_ENOMEM)
                loom_err_set(e, rc, "", "out of memory");
        loom__sim_heap_free(&g.heap);
        free(g.jobs);
        free(g.row);
        free(done);
        free(start);
        return rc;
}
