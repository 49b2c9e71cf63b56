/*
 * lb.c - a fluid lower bound on the provisioning cost of any policy (proof: docs/lower-bound.md).
 *
 * Whatever a policy does, a job's work has to run on GPUs that are paid for while it runs:
 *   - each rollout keeps all the job's rollout GPUs busy until its tail threshold (running on
 *     fewer GPUs only stretches it in proportion) and at least one GPU until its longest
 *     response ends;
 *   - each training needs train_gpus x t_train GPU-seconds (data-parallel scaling with
 *     efficiency <= 1 never uses fewer);
 *   - the first rollout loads the job's state from host memory onto its rollout GPUs (a warm
 *     start, at least), and the first training onto at least one training node.
 * Provisioned GPU time is at least busy GPU time, so the sum of these GPU-seconds at the pools'
 * prices bounds the total cost from below. The series spreads each job's share evenly over the
 * longest its SLO lets it run, the "average GPUs while active" form of the same bound.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

/* GPU-seconds job j needs in each pool (microsecond-GPUs). */
static void job_work(const loom_sim_cfg *c, const loom_sim_job *j, double out[2])
{
        const loom_job_spec *s = &j->spec;
        double warm = (double)loom_sim_warm(c, j->model_b);
        double roll = (double)s->rollout_gpus * warm;
        double train = (double)c->cluster.gpus_per_node * warm;
        for (int64_t i = 0; i < s->iterations; i++) {
                double w = (double)sim_phase_us(s->t_roll, j->roll[i]);
                double q = (double)sim_phase_us(s->t_roll, j->tailq[i]);
                if (q > w)
                        q = w;
                roll += (double)s->rollout_gpus * q + (w - q);
                train += (double)s->train_gpus * (double)sim_phase_us(s->t_train, j->train[i]);
        }
        out[0] = roll;
        out[1] = train;
}

typedef struct lb_ev {
        loom_us t;
        double rate; /* $/h added (negative at the end) */
        double gpus[2];
} lb_ev;

static int cmp_ev(const void *a, const void *b)
{
        const lb_ev *x = a, *y = b;
        return (x->t > y->t) - (x->t < y->t);
}

int loom__sim_run_lb(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_result *r,
                     loom_err *e)
{
        double price[2] = {c->cluster.gpu[0].price_per_hour, c->cluster.gpu[1].price_per_hour};
        lb_ev *ev = malloc((size_t)(2 * w->n + 1) * sizeof *ev);
        if (!ev)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        double total = 0;
        loom_us end = 0;
        for (int i = 0; i < w->n; i++) {
                const loom_sim_job *j = &w->jobs[i];
                double work[2];
                job_work(c, j, work);
                double cost = (price[0] * work[0] + price[1] * work[1]) / 3.6e9;
                total += cost;
                loom_us solo = loom_sim_job_solo_time(j, c);
                if (j->arrival + solo > end)
                        end = j->arrival + solo;
                double life = (double)solo * j->spec.slo;
                double per_h = cost / (life / 3.6e9);
                ev[2 * i] = (lb_ev){j->arrival, per_h, {work[0] / life, work[1] / life}};
                ev[2 * i + 1] =
                    (lb_ev){j->arrival + (loom_us)life, -per_h, {-work[0] / life, -work[1] / life}};
        }
        r->total_cost = total;
        r->makespan_h = loom_us_to_s(end) / 3600.0;
        r->avg_cost_per_hour = r->makespan_h > 0 ? total / r->makespan_h : 0;
        qsort(ev, (size_t)(2 * w->n), sizeof *ev, cmp_ev);
        double rate = 0, gpus[2] = {0, 0};
        size_t cap = 0;
        for (int i = 0; i < 2 * w->n; i++) {
                rate += ev[i].rate;
                gpus[0] += ev[i].gpus[0];
                gpus[1] += ev[i].gpus[1];
                if (i + 1 < 2 * w->n && ev[i + 1].t == ev[i].t)
                        continue;
                if (rate > r->peak_cost_per_hour)
                        r->peak_cost_per_hour = rate;
                for (int p = 0; p < 2; p++)
                        if ((int)ceil(gpus[p] - 1e-9) > r->peak_gpus[p])
                                r->peak_gpus[p] = (int)ceil(gpus[p] - 1e-9);
                loom_sim_point pt = {loom_us_to_s(ev[i].t) / 3600.0,
                                     rate < 0 ? 0 : rate,
                                     {(int)ceil(gpus[0] - 1e-9), (int)ceil(gpus[1] - 1e-9)}};
                if (c->record_series && loom__sim_series_add(r, &cap, pt)) {
                        free(ev);
                        return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                }
        }
        free(ev);
        r->jobs = w->n;
        r->slo_attainment = r->slo_attainment_wc = r->slowdown_p50 = r->slowdown_p99 = NAN;
        r->bubble[0] = r->bubble[1] = 0;
        return 0;
}
