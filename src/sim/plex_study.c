/*
 * plex_study.c - `loom sim --policy plex-...` from configuration to report: PlexRL's cluster
 * (Figure 8) under the chosen plex policies against isolated, the HRRS / FCFS / round-robin
 * comparison on the shared groups the plex placer forms, and loom against the plex placer on
 * WEAVE's default workload. Tables (or JSON lines) go to the caller's FILE as each part
 * finishes.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "loom/plexsim.h"
#include "sim_int.h"

void loom_plexsim_study_cfg_default(loom_plexsim_study_cfg *c)
{
        memset(c, 0, sizeof *c);
        c->start = 165;
        c->count = 300;
        c->policies = 0xf;
        c->nodes = 20;
        c->jitter = 0.2;
        c->seed = 1;
        c->dispatch = true;
        c->weave = true;
}

int loom_plexsim_policy_list_parse(const char *s, unsigned *mask)
{
        char buf[256];
        snprintf(buf, sizeof buf, "%s", s);
        *mask = 0;
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                loom_plexsim_policy p;
                if (!strcmp(t, "plex-all"))
                        *mask |= 0xf;
                else if (loom_plexsim_policy_parse(t, &p) == 0)
                        *mask |= 1u << p;
                else
                        return -1;
        }
        return *mask ? 0 : -1;
}

static void cluster_row(FILE *f, const loom_plexsim_study_cfg *c, const loom_plexsim_cluster_res *r,
                        double iso)
{
        if (c->json)
                fprintf(f,
                        "{\"policy\":\"%s\",\"jobs\":%d,\"nodes\":%d,\"makespan_h\":%.3f,"
                        "\"makespan_vs_isolated\":%.4f,\"queue_delay_p50\":%.4f,"
                        "\"queue_delay_p99\":%.4f,\"queue_delay_max\":%.4f,"
                        "\"switches_per_h\":%.2f,\"pruned_fraction\":%.4f,"
                        "\"max_groups\":%d,\"repacked\":%d}\n",
                        loom_plexsim_policy_name(r->policy), r->n, c->nodes, r->makespan_h,
                        iso > 0 ? r->makespan_h / iso : 0, r->queue_delay_p50, r->queue_delay_p99,
                        r->queue_delay_max, r->switches_per_h, r->pruned_fraction, r->max_groups,
                        r->repacked);
        else
                fprintf(f, "%-14s %10.1f %7.2fx %9.3f %9.3f %11.1f %7.1f%% %7d\n",
                        loom_plexsim_policy_name(r->policy), r->makespan_h,
                        iso > 0 ? r->makespan_h / iso : 0, r->queue_delay_p50, r->queue_delay_p99,
                        r->switches_per_h, 100 * r->pruned_fraction, r->max_groups);
}

/* The queuing-delay CDF of the chosen policies (not isolated when it ran only as baseline). */
static int cluster_plot(FILE *f, const loom_plexsim_study_cfg *c,
                        const loom_plexsim_cluster_res *res, int nres, loom_err *e)
{
        char path[PATH_MAX];
        mkdir(c->plot, 0777);
        snprintf(path, sizeof path, "%s/plex_queue_delay_cdf.svg", c->plot);
        loom_plexsim_cluster_res show[4];
        int ns = 0;
        for (int i = 0; i < nres; i++)
                if (c->policies & (1u << res[i].policy))
                        show[ns++] = res[i];
        int rc = loom_plexsim_plot_cdf(path, show, ns, e);
        if (!rc && !c->json)
                fprintf(f, "wrote %s\n", path);
        return rc;
}

/* Figure 8: isolated always runs, as the makespan baseline. */
static int cluster(FILE *f, const loom_plexsim_study_cfg *c, const loom_plexsim_job *jobs, int n,
                   loom_err *e)
{
        loom_plexsim_cluster_res res[4];
        int nres = 0, rc = 0;
        double iso = 0;
        if (!c->json)
                fprintf(f, "%-14s %10s %8s %9s %9s %11s %8s %7s\n", "policy", "makespan_h",
                        "vs_iso", "qdelay_50", "qdelay_99", "switches/h", "pruned", "groups");
        for (int p = 0; p <= LOOM_PLEXSIM_BACKFILL && !rc; p++) {
                if (!(c->policies & (1u << p)) && !(p == 0))
                        continue;
                loom_plexsim_cluster_res *r = &res[nres];
                if ((rc = loom_plexsim_cluster_run((loom_plexsim_policy)p, jobs, n, c->nodes, r,
                                                   e))) {
                        loom_err inner = *e; /* the message names its field */
                        loom_err_set(e, rc, inner.field, "%s: %s", inner.field, inner.msg);
                        break;
                }
                nres++;
                if (p == 0)
                        iso = r->makespan_h;
                if (c->policies & (1u << p)) /* else isolated ran only as the baseline */
                        cluster_row(f, c, r, iso);
        }
        if (!rc && c->plot)
                rc = cluster_plot(f, c, res, nres, e);
        for (int i = 0; i < nres; i++)
                loom_plexsim_cluster_res_free(&res[i]);
        return rc;
}

static int cluster_from_trace(FILE *f, const loom_plexsim_study_cfg *c, const loom_sim_trace *t,
                              loom_err *e)
{
        size_t n = (size_t)t->n;
        loom_plexsim_job *jobs = calloc(n, sizeof *jobs);
        double *arr = calloc(n, sizeof *arr), *dur = calloc(n, sizeof *dur);
        int *gpus = calloc(n, sizeof *gpus);
        int rc = 0;
        if (!jobs || !arr || !dur || !gpus) {
                rc = loom_err_set(e, LOOM_ENOMEM, "jobs", "out of memory");
        } else {
                for (int i = 0; i < t->n; i++) {
                        arr[i] = t->rows[i].arrival_s;
                        dur[i] = t->rows[i].duration_s;
                        gpus[i] = t->rows[i].gpus;
                }
                loom_plexsim_jobs_from_trace(arr, dur, gpus, t->n, jobs);
                for (int i = 0; i < t->n; i++)
                        jobs[i].cold = c->cold;
                rc = cluster(f, c, jobs, t->n, e);
        }
        free(jobs);
        free(arr);
        free(dur);
        free(gpus);
        return rc;
}

/* As many jobs of model m as the plex placer puts on one group, at the phase offsets it chose;
 * returns how many, or -1 when the placer cannot be made. */
static int shared_group(const loom_plexsim_model *m, double jitter, loom_plexsim_pool_job *jobs,
                        int max)
{
        loom_plex_cfg pc;
        loom_plex_cfg_default(&pc);
        pc.nodes = 2 * m->train_gpus / 8;
        loom_plex *p = loom_plex_new(&pc, NULL);
        if (!p)
                return -1;
        loom_us calls[3];
        for (int k = 0; k < 3; k++)
                calls[k] = loom_us_from_s(m->calls_s[k]);
        loom_plex_job pj;
        loom_plex_job_from_calls(&pj, pc.nodes / 2,
                                 loom_us_from_s(m->cycle_s) - calls[0] - calls[1] - calls[2], calls,
                                 3, loom_us_from_s(loom_plexsim_setup_s(m->model_b)), true);
        int n = 0;
        loom_tl_group g0 = LOOM_TL_NO_GROUP;
        for (; n < max; n++) {
                loom_plex_decision d;
                if (loom_plex_place(p, (uint32_t)n + 1, &pj, &d, NULL) || !d.placed ||
                    (n > 0 && d.group != g0))
                        break;
                g0 = d.group;
                jobs[n] = (loom_plexsim_pool_job){m->cycle_s - m->calls_s[0] - m->calls_s[1] -
                                                      m->calls_s[2],
                                                  3,
                                                  {m->calls_s[0], m->calls_s[1], m->calls_s[2]},
                                                  loom_plexsim_setup_s(m->model_b),
                                                  d.shift * loom_us_to_s(pc.slot_us),
                                                  200,
                                                  jitter};
        }
        loom_plex_free(p);
        return n;
}

static void dispatch_row(FILE *f, bool json, const loom_plexsim_model *m, loom_dispatch d, int n,
                         const loom_plexsim_pool_res *r)
{
        if (json)
                fprintf(f,
                        "{\"compare\":\"dispatch\",\"model\":\"%s\",\"dispatch\":"
                        "\"%s\",\"jobs\":%d,\"makespan_h\":%.3f,\"switches_per_h\":"
                        "%.2f,\"delay_mean\":%.4f,\"queue_delay_p50\":%.4f,"
                        "\"queue_delay_p99\":%.4f,\"bubble\":%.4f}\n",
                        m->name, loom_dispatch_name(d), n, r->makespan_s / 3600, r->switches_per_h,
                        r->delay_mean, r->delay_p50, r->delay_p99, r->bubble);
        else
                fprintf(f, "%-6s %-5s %4d %11.2f %10.4f %10.4f %10.4f\n", m->name,
                        loom_dispatch_name(d), n, r->switches_per_h, r->delay_mean, r->delay_p50,
                        r->delay_p99);
}

/* Each dispatch policy serves every model's shared group with jittered rollouts. */
static int dispatch(FILE *f, const loom_plexsim_study_cfg *c, loom_err *e)
{
        int nm;
        const loom_plexsim_model *m = loom_plexsim_models(&nm);
        if (!c->json)
                fprintf(f, "\n%-6s %-5s %4s %11s %10s %10s %10s\n", "model", "disp", "jobs",
                        "switches/h", "delay_mean", "delay_p50", "delay_p99");
        for (int i = 0; i < nm; i++) {
                loom_plexsim_pool_job jobs[16];
                int n = shared_group(&m[i], c->jitter, jobs, 16);
                if (n < 0)
                        return loom_err_set(e, LOOM_ENOMEM, "plex", "out of memory");
                for (int d = LOOM_DISPATCH_RR; d <= LOOM_DISPATCH_FCFS; d++) {
                        loom_plexsim_pool_cfg pc = {(loom_dispatch)d, 1.1, c->seed};
                        loom_plexsim_pool_res r;
                        int rc = loom_plexsim_pool_run(&pc, jobs, n, &r, e);
                        if (rc)
                                return rc;
                        dispatch_row(f, c->json, &m[i], (loom_dispatch)d, n, &r);
                }
        }
        return 0;
}

static void weave_row(FILE *f, bool json, const char *name, const loom_sim_result *r)
{
        unsigned long long joined = r->decisions[0] + r->decisions[1], fresh = r->decisions[2];
        if (json)
                fprintf(f,
                        "{\"compare\":\"weave\",\"placer\":\"%s\",\"avg_cost_per_hour\":%.2f,"
                        "\"slo_attainment\":%.4f,\"slo_attainment_profiled\":%.4f,"
                        "\"slowdown_p99\":%.4f,\"bubble_train\":"
                        "%.4f,\"bubble_rollout\":%.4f,\"makespan_h\":%.3f,"
                        "\"joined_group\":%llu,\"new_group\":%llu}\n",
                        name, r->avg_cost_per_hour, r->slo_attainment, r->slo_attainment_wc,
                        r->slowdown_p99, r->bubble[LOOM_POOL_TRAIN], r->bubble[LOOM_POOL_ROLLOUT],
                        r->makespan_h, joined, fresh);
        else
                fprintf(f, "%-12s %10.1f %8.1f%% %8.1f%% %9.3f %9.1f%% %9.1f%% %7llu %7llu\n", name,
                        r->avg_cost_per_hour, 100 * r->slo_attainment, 100 * r->slo_attainment_wc,
                        r->slowdown_p99, 100 * r->bubble[LOOM_POOL_TRAIN],
                        100 * r->bubble[LOOM_POOL_ROLLOUT], joined, fresh);
}

/* loom (Algorithm 1 + round robin) and the plex placer (+ HRRS) through the same core and
 * simulator on WEAVE's default workload. */
static int weave(FILE *f, const loom_plexsim_study_cfg *c, const loom_sim_trace *t, loom_err *e)
{
        loom_sim_cfg cfg;
        loom_sim_cfg_default(&cfg);
        loom_sim_workload_cfg wc;
        loom_sim_workload_cfg_default(&wc);
        wc.seed = c->seed;
        wc.noise.tail_threshold = cfg.policy.tail_threshold;
        loom_sim_workload w;
        int rc = loom_sim_workload_build(&wc, t, &cfg.cluster, &w, e);
        if (rc)
                return rc;
        if (!c->json)
                fprintf(f, "\n%-12s %10s %9s %9s %9s %10s %10s %7s %7s\n", "placer", "cost_$/h",
                        "slo_att", "slo_prof", "slowdown99", "bubble_tr", "bubble_ro", "joined",
                        "new");
        for (int k = 0; k < 2 && !rc; k++) {
                cfg.policy.placer = k ? LOOM_PLACER_PLEX : LOOM_PLACER_LOOM;
                cfg.policy.dispatch = k ? LOOM_DISPATCH_HRRS : LOOM_DISPATCH_RR;
                loom_sim_result r;
                if ((rc = loom_sim_run(&cfg, &w, LOOM_SIM_LOOM, &r, e)))
                        break;
                weave_row(f, c->json, k ? "plex+hrrs" : "loom+rr", &r);
                loom_sim_result_free(&r);
        }
        loom_sim_workload_free(&w);
        return rc;
}

int loom_plexsim_study(const loom_plexsim_study_cfg *c, FILE *f, loom_err *e)
{
        loom_sim_trace t;
        int rc = loom_sim_trace_load(c->trace, c->start, c->count, &t, e);
        if (rc)
                return rc;
        rc = cluster_from_trace(f, c, &t, e);
        if (!rc && c->dispatch)
                rc = dispatch(f, c, e);
        if (!rc && c->weave)
                rc = weave(f, c, &t, e);
        loom_sim_trace_free(&t);
        return rc;
}
