/*
 * sweep.c - WEAVE Figure 15 a-c: every setting x seed is one task (build the workload, run each
 * policy on it); tasks run on a few worker threads and write to their own slots, so the rows
 * come out in the same order with the same numbers whatever the thread count.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

typedef struct setting {
        char figure;
        char name[24];
        loom_sim_profile profile;
        loom_sim_slo slo;
        int max_group;
} setting;

static int settings(setting *s)
{
        int n = 0;
        static const loom_sim_profile prof[] = {LOOM_SIM_BALANCED, LOOM_SIM_ROLLOUT_HEAVY,
                                                LOOM_SIM_TRAIN_HEAVY, LOOM_SIM_MIXED};
        for (int i = 0; i < 4; i++) {
                s[n] = (setting){'a', "", prof[i], {1, 2}, 5};
                snprintf(s[n].name, sizeof s[n].name, "%s", loom_sim_profile_name(prof[i]));
                n++;
        }
        static const double slo[] = {1.2, 1.5, 2.0};
        for (int i = 0; i < 3; i++) {
                s[n] = (setting){'b', "", LOOM_SIM_MIXED, {slo[i], slo[i]}, 5};
                snprintf(s[n].name, sizeof s[n].name, "slo=%.1f", slo[i]);
                n++;
        }
        s[n++] = (setting){'b', "slo=U(1,2)", LOOM_SIM_MIXED, {1, 2}, 5};
        for (int g = 2; g <= 5; g++) {
                s[n] = (setting){'c', "", LOOM_SIM_MIXED, {1, 2}, g};
                snprintf(s[n].name, sizeof s[n].name, "max_group=%d", g);
                n++;
        }
        return n;
}

typedef struct sweep_ctx {
        const loom_sim_sweep_cfg *c;
        setting set[16];
        int n_set, n_pol;
        loom_sim_policy pol[LOOM_SIM_NPOLICIES];
        loom_sim_sweep_row *rows;
        double *cpu;
        atomic_int next;
        int n_tasks;
        int rc;
        loom_err err;
        pthread_mutex_t mu;
} sweep_ctx;

static int run_task(sweep_ctx *x, int task)
{
        const loom_sim_sweep_cfg *c = x->c;
        const setting *s = &x->set[task / c->seeds];
        int seed = task % c->seeds;
        loom_sim_workload_cfg wc = c->workload;
        wc.profile = s->profile;
        wc.slo = s->slo;
        wc.seed = c->workload.seed + (uint64_t)seed;
        loom_sim_cfg sc = c->sim;
        sc.record_series = sc.record_gantt = false;
        sc.progress = NULL;
        sc.policy.max_group_size = s->max_group;
        sc.policy.seed = wc.seed;
        loom_err e;
        loom_err_clear(&e);
        loom_sim_workload w;
        int rc = loom_sim_workload_build(&wc, c->trace, &sc.cluster, &w, &e);
        if (rc)
                goto fail;
        loom_sim_result res[LOOM_SIM_NPOLICIES];
        double lb = NAN;
        for (int i = 0; i < x->n_pol; i++) {
                if ((rc = loom_sim_run(&sc, &w, x->pol[i], &res[i], &e))) {
                        for (int k = 0; k < i; k++)
                                loom_sim_result_free(&res[k]);
                        loom_sim_workload_free(&w);
                        goto fail;
                }
                if (x->pol[i] == LOOM_SIM_LB)
                        lb = res[i].total_cost;
        }
        for (int i = 0; i < x->n_pol; i++) {
                loom_sim_sweep_row *r =
                    &x->rows[(task / c->seeds * x->n_pol + i) * c->seeds + seed];
                *r = (loom_sim_sweep_row){.figure = s->figure,
                                          .policy = x->pol[i],
                                          .seed = (int)wc.seed,
                                          .cost_vs_lb = res[i].total_cost / lb,
                                          .avg_cost_per_hour = res[i].avg_cost_per_hour,
                                          .slo_attainment = res[i].slo_attainment,
                                          .slo_attainment_wc = res[i].slo_attainment_wc,
                                          .slowdown_p99 = res[i].slowdown_p99,
                                          .events = res[i].events};
                snprintf(r->setting, sizeof r->setting, "%s", s->name);
                x->cpu[task] += res[i].wall_s;
                loom_sim_result_free(&res[i]);
        }
        loom_sim_workload_free(&w);
        return 0;
fail:
        pthread_mutex_lock(&x->mu);
        if (!x->rc) {
                x->rc = rc;
                x->err = e;
        }
        pthread_mutex_unlock(&x->mu);
        return rc;
}

static void *worker(void *arg)
{
        sweep_ctx *x = arg;
        for (;;) {
                int t = atomic_fetch_add(&x->next, 1);
                if (t >= x->n_tasks || run_task(x, t))
                        break;
        }
        return NULL;
}

void loom_sim_sweep_cfg_default(loom_sim_sweep_cfg *c)
{
        memset(c, 0, sizeof *c);
        loom_sim_cfg_default(&c->sim);
        loom_sim_workload_cfg_default(&c->workload);
        c->seeds = 3;
        c->threads = 2;
        c->policies = 1u << LOOM_SIM_LOOM | 1u << LOOM_SIM_RANDOM | 1u << LOOM_SIM_GREEDY |
                      1u << LOOM_SIM_LB | 1u << LOOM_SIM_RANDOM_SLO | 1u << LOOM_SIM_GREEDY_SLO;
}

int loom_sim_sweep(const loom_sim_sweep_cfg *c, loom_sim_sweep_out *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        if (!c->trace || c->seeds < 1 || c->seeds > 100 || c->threads < 1 || c->threads > 64)
                return loom_err_set(e, LOOM_EINVAL, "sweep",
                                    "sweep needs a trace, 1..100 seeds and 1..64 threads");
        sweep_ctx x = {.c = c};
        x.n_set = settings(x.set);
        c = x.c;
        unsigned mask = c->policies | 1u << LOOM_SIM_LB; /* ratios need the bound */
        mask &= ~(1u << LOOM_SIM_ORACLE); /* seconds per run at this scale, 36 runs per policy */
        for (int p = 0; p < LOOM_SIM_NPOLICIES; p++)
                if (mask & (1u << p))
                        x.pol[x.n_pol++] = (loom_sim_policy)p;
        x.n_tasks = x.n_set * c->seeds;
        x.rows = calloc((size_t)(x.n_tasks * x.n_pol), sizeof *x.rows);
        x.cpu = calloc((size_t)x.n_tasks, sizeof *x.cpu);
        if (!x.rows || !x.cpu) {
                free(x.rows);
                free(x.cpu);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        pthread_mutex_init(&x.mu, NULL);
        atomic_init(&x.next, 0);
        pthread_t th[64];
        int started = 0;
        for (int i = 1; i < c->threads; i++)
                if (!pthread_create(&th[started], NULL, worker, &x))
                        started++;
        worker(&x);
        for (int i = 0; i < started; i++)
                pthread_join(th[i], NULL);
        pthread_mutex_destroy(&x.mu);
        if (x.rc) {
                if (e)
                        *e = x.err;
                free(x.rows);
                free(x.cpu);
                return x.rc;
        }
        out->n = x.n_tasks * x.n_pol;
        out->rows = x.rows;
        for (int i = 0; i < out->n; i++)
                out->events += out->rows[i].events;
        for (int t = 0; t < x.n_tasks; t++)
                out->cpu_s += x.cpu[t];
        free(x.cpu);
        return 0;
}

void loom_sim_sweep_out_free(loom_sim_sweep_out *o)
{
        if (!o)
                return;
        free(o->rows);
        memset(o, 0, sizeof *o);
}
