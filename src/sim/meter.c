/*
 * meter.c - what every policy's run measures the same way: provisioning cost and GPU-time
 * integrals, peaks, the cost/GPU time series, per-job slowdowns and SLO attainment.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

void loom__sim_meter_init(sim_meter *m, const loom_cluster_cfg *cl, loom_sim_result *r, bool series)
{
        memset(m, 0, sizeof *m);
        m->cl = cl;
        m->r = r;
        m->series = series;
}

static double meter_cost(const sim_meter *m)
{
        return m->nodes[0] * loom_cluster_node_price(m->cl, LOOM_POOL_ROLLOUT) +
               m->nodes[1] * loom_cluster_node_price(m->cl, LOOM_POOL_TRAIN);
}

void loom__sim_meter_advance(sim_meter *m, loom_us now)
{
        if (now <= m->last)
                return;
        double dt = (double)(now - m->last);
        m->cost_us += meter_cost(m) * dt;
        for (int p = 0; p < 2; p++) {
                m->busy_us[p] += m->busy[p] * dt;
                m->prov_us[p] += (double)m->nodes[p] * m->cl->gpus_per_node * dt;
        }
        m->last = now;
}

static int meter_point(sim_meter *m, loom_us now)
{
        loom_sim_result *r = m->r;
        loom_sim_point pt = {
            .t_h = loom_us_to_s(now) / 3600.0,
            .cost_per_hour = meter_cost(m),
            .gpus = {m->nodes[0] * m->cl->gpus_per_node, m->nodes[1] * m->cl->gpus_per_node}};
        if (r->n_series > 0 && r->series[r->n_series - 1].t_h == pt.t_h) {
                r->series[r->n_series - 1] = pt; /* several changes at one instant: keep last */
                return 0;
        }
        return loom__sim_series_add(r, &m->cap_series, pt);
}

int loom__sim_meter_nodes(sim_meter *m, loom_us now, loom_pool p, int delta)
{
        loom__sim_meter_advance(m, now);
        m->nodes[p] += delta;
        double cost = meter_cost(m);
        if (cost > m->r->peak_cost_per_hour)
                m->r->peak_cost_per_hour = cost;
        int gpus = m->nodes[p] * m->cl->gpus_per_node;
        if (gpus > m->r->peak_gpus[p])
                m->r->peak_gpus[p] = gpus;
        return m->series ? meter_point(m, now) : 0;
}

void loom__sim_meter_busy(sim_meter *m, loom_us now, loom_pool p, int delta)
{
        loom__sim_meter_advance(m, now);
        m->busy[p] += delta;
}

void loom__sim_meter_finish(sim_meter *m, loom_us end)
{
        loom__sim_meter_advance(m, end);
        loom_sim_result *r = m->r;
        r->makespan_h = loom_us_to_s(end) / 3600.0;
        r->total_cost = m->cost_us / 1e6 / 3600.0;
        r->avg_cost_per_hour = r->makespan_h > 0 ? r->total_cost / r->makespan_h : 0;
        for (int p = 0; p < 2; p++) {
                r->busy_gpu_h[p] = m->busy_us[p] / 1e6 / 3600.0;
                r->prov_gpu_h[p] = m->prov_us[p] / 1e6 / 3600.0;
                r->bubble[p] = m->prov_us[p] > 0 ? 1.0 - m->busy_us[p] / m->prov_us[p] : 0;
        }
}

int loom__sim_finish_jobs(const loom_sim_cfg *c, const loom_sim_workload *w, const loom_us *done_at,
                          const loom_us *start_at, loom_sim_result *r)
{
        r->jobs = w->n;
        r->slowdown = malloc((size_t)(w->n ? w->n : 1) * sizeof *r->slowdown);
        r->iter_s = malloc((size_t)(w->n ? w->n : 1) * sizeof *r->iter_s);
        double *sorted = malloc((size_t)(w->n ? w->n : 1) * sizeof *sorted);
        if (!r->slowdown || !r->iter_s || !sorted) {
                free(sorted);
                return LOOM_ENOMEM;
        }
        int n_done = 0, met = 0, met_wc = 0;
        for (int i = 0; i < w->n; i++) {
                const loom_sim_job *j = &w->jobs[i];
                if (done_at[i] < 0) {
                        r->slowdown[i] = r->iter_s[i] = NAN;
                        continue;
                }
                /* Iteration time runs from the first rollout's start: waiting for a turn on
                 * the group's nodes before that is admission, not iteration time. */
                loom_us from = start_at && start_at[i] >= 0 ? start_at[i] : j->arrival;
                double took = (double)(done_at[i] - from);
                double solo = (double)loom_sim_job_solo_time(j, c);
                r->slowdown[i] = took / solo;
                r->iter_s[i] = took / 1e6 / (double)j->spec.iterations;
                /* A relative tolerance absorbs the microsecond rounding of phase lengths. */
                if (r->slowdown[i] <= j->spec.slo * (1 + 1e-9))
                        met++;
                /* The contract admission enforces: against the profiled (worst-case) solo
                 * iteration, plus the same one-time load. */
                double wc =
                    (double)(loom_sim_cold(c, j->model_b) + 2 * loom_sim_warm(c, j->model_b)) +
                    (double)j->spec.iterations * (double)loom_job_t_solo(&j->spec) -
                    (double)j->spec.t_sync;
                if (took <= j->spec.slo * wc * (1 + 1e-9))
                        met_wc++;
                sorted[n_done++] = r->slowdown[i];
        }
        qsort(sorted, (size_t)n_done, sizeof *sorted, loom_cmp_double);
        r->jobs_done = n_done;
        r->slo_attainment = w->n ? (double)met / w->n : 1.0;
        r->slo_attainment_wc = w->n ? (double)met_wc / w->n : 1.0;
        r->slowdown_p50 = sim_pct(sorted, n_done, 0.50);
        r->slowdown_p99 = sim_pct(sorted, n_done, 0.99);
        free(sorted);
        return 0;
}

int loom__sim_gantt_add(loom_sim_result *r, size_t *cap, const loom_sim_interval *iv)
{
        if (loom_reserve(&r->gantt, cap, (size_t)r->n_gantt + 1, sizeof *r->gantt, 256))
                return LOOM_ENOMEM;
        r->gantt[r->n_gantt++] = *iv;
        return 0;
}

int loom__sim_series_add(loom_sim_result *r, size_t *cap, loom_sim_point pt)
{
        if (loom_reserve(&r->series, cap, (size_t)r->n_series + 1, sizeof *r->series, 256))
                return LOOM_ENOMEM;
        r->series[r->n_series++] = pt;
        return 0;
}

void loom_sim_result_free(loom_sim_result *r)
{
        if (!r)
                return;
        free(r->slowdown);
        free(r->iter_s);
        free(r->series);
        free(r->gantt);
        memset(r, 0, sizeof *r);
}
