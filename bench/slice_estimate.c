/*
 * slice_estimate.c - what time-slicing pairs of jobs on one node set could save on a window, by a
 * fluid greedy estimate (docs/sim.md, "Time-slicing one node set"). Usage:
 *   slice_estimate [TRACE [START [CLUSTER]]]   (default traces/philly/103959.csv 165 h100)
 * Every job runs colocated on its own nodes (max of its two asks) unless paired: at each arrival
 * and departure an unpaired job pairs with the unpaired active job of the same node count whose
 * pair saves the most node time, where the pair's cycle (loom_slice_period: tails overlapping the
 * next rollout; elastic: trainings beside the last tail too) fits both budgets. Cycles are planned
 * on each job's mean phases, or on its p99 (the nearest-rank 99th percentile over its realised
 * iterations, as the informed oracle plans); budgets are SLO x the mean solo iteration (learned
 * admission's). Jobs progress as a fluid at their lone or pair iteration on mean phases. Prints
 * the colocated bill's share by SLO band, the slowdown a job paired with its like would need,
 * and, per variant, the estimated bill over colocated.
 * A benchmark: it prints figures and never fails on them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/group.h"
#include "loom/sim.h"

typedef struct sj {
        double roll[2], head[2], train[2]; /* [0] mean, [1] p99, seconds */
        double sw, slo, arr, left, lone;   /* lone: colocated iteration on means */
        int nodes, n, partner, done;
} sj;

static int cmpf(const void *a, const void *b)
{
        float x = *(const float *)a, y = *(const float *)b;
        return (x > y) - (x < y);
}

static double stat(const float *v, int n, int p99, float *tmp)
{
        double s = 0;
        for (int k = 0; k < n; k++)
                s += (tmp[k] = v[k]);
        if (!p99)
                return s / n;
        qsort(tmp, (size_t)n, sizeof *tmp, cmpf);
        int r = (int)ceil(0.99 * n) - 1;
        return tmp[r < 0 ? 0 : r];
}

/* The pair's cycle in seconds, the better of its two orders; q 0 means, 1 p99. */
static double cycle(const sj *a, const sj *b, int q, bool elastic, int gpn, int keep)
{
        double best = INFINITY;
        for (int o = 0; o < 2; o++) {
                const sj *x[2] = {o ? b : a, o ? a : b};
                loom_meta_job m[2];
                for (int i = 0; i < 2; i++)
                        m[i] = (loom_meta_job){.t_roll = loom_us_from_s(x[i]->roll[q]),
                                               .t_train = loom_us_from_s(x[i]->train[q]),
                                               .t_switch = loom_us_from_s(x[i]->sw),
                                               .t_head = loom_us_from_s(x[i]->head[q]),
                                               .n_nodes = x[i]->nodes};
                loom_us t = loom_slice_period(m, 2, a->nodes, gpn, keep, elastic);
                if (t > 0 && (double)t / 1e6 < best)
                        best = (double)t / 1e6;
        }
        return best;
}

static double iter_of(const sj *j, const sj *all, bool elastic, int gpn, int keep)
{
        return j->partner >= 0 ? cycle(j, &all[j->partner], 0, elastic, gpn, keep) : j->lone;
}

/* The fluid run of one variant: node-seconds over those of every job alone. */
static double run(sj *js, int n, int q, bool elastic, int gpn, int keep, int *pairs)
{
        double base = 0, spent = 0, now = 0;
        for (int i = 0; i < n; i++) {
                js[i].left = js[i].n;
                js[i].partner = -1;
                js[i].done = 0;
                base += js[i].nodes * js[i].n * js[i].lone;
        }
        *pairs = 0;
        for (int next = 0;;) {
                double tn = next < n ? js[next].arr : INFINITY;
                int who = -1;
                for (int i = 0; i < next; i++)
                        if (!js[i].done) {
                                double t =
                                    now + js[i].left * iter_of(&js[i], js, elastic, gpn, keep);
                                if (t < tn)
                                        tn = t, who = i;
                        }
                if (!isfinite(tn))
                        break;
                for (int i = 0; i < next; i++) {
                        sj *x = &js[i];
                        if (x->done)
                                continue;
                        x->left -= (tn - now) / iter_of(x, js, elastic, gpn, keep);
                        if (x->partner < 0 || i < x->partner)
                                spent += x->nodes * (tn - now);
                }
                now = tn;
                int cand = who < 0 ? next++ : js[who].partner;
                if (who >= 0) {
                        js[who].done = 1;
                        if (cand >= 0)
                                js[cand].partner = -1;
                        js[who].partner = -1;
                }
                if (cand < 0)
                        continue;
                sj *x = &js[cand];
                double gain = 0;
                int bi = -1;
                for (int i = 0; i < next; i++) {
                        sj *y = &js[i];
                        if (i == cand || y->done || y->partner >= 0 || y->nodes != x->nodes)
                                continue;
                        double plan = cycle(x, y, q, elastic, gpn, keep);
                        if (plan > x->slo * (x->roll[0] + x->train[0]) ||
                            plan > y->slo * (y->roll[0] + y->train[0]))
                                continue;
                        double g = 1 - cycle(x, y, 0, elastic, gpn, keep) / (x->lone + y->lone);
                        if (g > gain)
                                gain = g, bi = i;
                }
                if (bi >= 0) {
                        x->partner = bi;
                        js[bi].partner = cand;
                        ++*pairs;
                }
        }
        return spent / base;
}

int main(int argc, char **argv)
{
        const char *path = argc > 1 ? argv[1] : "traces/philly/103959.csv";
        int start = argc > 2 ? atoi(argv[2]) : 165;
        loom_err e;
        loom_err_clear(&e);
        loom_sim_trace t;
        loom_cluster_cfg c;
        loom_sim_workload_cfg wc;
        loom_sim_workload w;
        loom_sim_cfg sc;
        loom_sim_cfg_default(&sc);
        loom_sim_workload_cfg_default(&wc);
        if (loom_sim_trace_load(path, start, 300, &t, &e) ||
            loom_sim_cluster_load(argc > 3 ? argv[3] : "h100", &c, &e) ||
            loom_sim_workload_build(&wc, &t, &c, &w, &e)) {
                fprintf(stderr, "slice_estimate: %s\n", e.msg);
                return 1;
        }
        loom_sim_trace_free(&t);
        int gpn = c.gpus_per_node, keep = sc.policy.tail_keep_gpus, max_n = 1;
        for (int i = 0; i < w.n; i++)
                max_n = w.jobs[i].spec.iterations > max_n ? (int)w.jobs[i].spec.iterations : max_n;
        sj *js = w.n > 0 ? calloc((unsigned)w.n, sizeof *js) : NULL;
        float *tmp = calloc((unsigned)max_n, sizeof *tmp);
        if (!js || !tmp)
                return 1;
        double band[5] = {0}, total = 0, self[2][2] = {{0}};
        for (int i = 0; i < w.n; i++) {
                const loom_sim_job *j = &w.jobs[i];
                sj *x = &js[i];
                int n = j->spec.iterations > 0 ? (int)j->spec.iterations : 1;
                double tr = (double)j->spec.t_roll / 1e6, tt = (double)j->spec.t_train / 1e6;
                for (int q = 0; q < 2; q++) {
                        x->roll[q] = tr * stat(j->roll, n, q, tmp);
                        x->head[q] = fmin(tr * stat(j->tailq, n, q, tmp), x->roll[q]);
                        x->train[q] = tt * stat(j->train, n, q, tmp);
                }
                x->sw = (double)loom_sim_warm(&sc, j->model_b) / 1e6;
                x->slo = j->spec.slo;
                x->arr = (double)j->arrival / 1e6;
                x->n = n;
                int g = j->spec.train_gpus > j->spec.rollout_gpus ? j->spec.train_gpus
                                                                  : j->spec.rollout_gpus;
                x->nodes = g / gpn;
                x->lone = x->roll[0] + x->train[0] + 2 * x->sw;
                double cost = x->nodes * n * x->lone;
                total += cost;
                /* the slowdown of a pair of two such jobs, over the mean solo iteration */
                for (int q = 0; q < 2; q++)
                        for (int el = 0; el < 2; el++)
                                self[q][el] += cost * cycle(x, x, q, el, gpn, keep) /
                                               (x->roll[0] + x->train[0]);
                int b = x->slo < 1.25   ? 0
                        : x->slo < 1.5  ? 1
                        : x->slo < 1.6  ? 2
                        : x->slo < 1.75 ? 3
                                        : 4;
                band[b] += cost;
        }
        printf(
            "%s rows %d:300: colocated node time by SLO <1.25 %.3f, 1.25-1.5 %.3f, 1.5-1.6 %.3f, "
            "1.6-1.75 %.3f, >=1.75 %.3f\n",
            path, start, band[0] / total, band[1] / total, band[2] / total, band[3] / total,
            band[4] / total);
        printf("  a job paired with its like, slowdown (weighted by node time): tails %.3f, "
               "elastic %.3f planned on means; %.3f, %.3f on p99\n",
               self[0][0] / total, self[0][1] / total, self[1][0] / total, self[1][1] / total);
        for (int v = 0; v < 4; v++) {
                int pairs, q = v & 1;
                bool el = v >= 2;
                double r = run(js, w.n, q, el, gpn, keep, &pairs);
                printf("  %-7s planned on %-5s: %3d pairs, bill %.4f of colocated (saves %.1f%%)\n",
                       el ? "elastic" : "tails", q ? "p99" : "means", pairs, r, 100 * (1 - r));
        }
        free(tmp);
        free(js);
        loom_sim_workload_free(&w);
        return 0;
}
