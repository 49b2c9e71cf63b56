/*
 * study.c - one `loom sim` study from configuration to report: load the arrival window, build
 * the workload, then run the chosen policies side by side (with plots and a per-job CSV), the
 * cost ladder, or the Figure 15 sweep. Everything is computed and every file written before the
 * report is printed, so a study that fails prints nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

void loom_sim_study_cfg_default(loom_sim_study_cfg *c)
{
        memset(c, 0, sizeof *c);
        c->start = 165;
        c->count = 300;
        c->seeds = 3;
        c->threads = 2;
        loom_sim_cfg_default(&c->sim);
        loom_sim_workload_cfg_default(&c->workload);
}

const char *loom_sim_study_conflict(const loom_sim_study_cfg *c)
{
        bool decompose = c->kind == LOOM_SIM_STUDY_DECOMPOSE;
        if (c->timeline && c->kind != LOOM_SIM_STUDY_COMPARE)
                return "--timeline records the policies of one comparison: not with sweep or "
                       "--decompose";
        if (decompose && (c->policies || c->format == LOOM_SIM_CSV || c->plot || c->per_job))
                return "--decompose runs its own policies and prints its own table (or --json): "
                       "not with --policy, --csv, --plot or --per-job";
        /* the oracle runs in the ladder, and wherever the policy mask (0: every policy, or the
         * sweep's default) has it */
        unsigned mask = c->policies;
        if (!mask && c->kind == LOOM_SIM_STUDY_SWEEP) {
                loom_sim_sweep_cfg d;
                loom_sim_sweep_cfg_default(&d);
                mask = d.policies;
        }
        bool oracle = decompose || !mask || (mask >> LOOM_SIM_ORACLE & 1u);
        if ((c->sim.oracle_rates || c->sim.oracle_restarts || c->sim.oracle_timeslice) && !oracle)
                return "--oracle-rates, --oracle-restarts and --oracle-timeslice change only the "
                       "oracle: give them with --decompose or a --policy list that has oracle";
        return NULL;
}

int loom_sim_write_per_job(const char *path, const loom_sim_workload *w, const loom_sim_result *r,
                           int n, loom_err *e)
{
        FILE *f = fopen(path, "w");
        if (!f)
                return loom_err_set(e, LOOM_EIO, "per-job", "%s: cannot create", path);
        fprintf(f, "policy,job,arrival_h,model_b,gpus,t_roll_s,t_train_s,slo,iterations,"
                   "slowdown,iteration_s,met\n");
        for (int i = 0; i < n; i++) {
                if (!r[i].slowdown)
                        continue;
                for (int j = 0; j < w->n; j++) {
                        const loom_sim_job *sj = &w->jobs[j];
                        double sd = r[i].slowdown[j];
                        fprintf(f, "%s,%s,%.4f,%g,%d,%.3f,%.3f,%.4f,%lld,%.5f,%.4f,%d\n",
                                loom_sim_policy_name(r[i].policy), sj->spec.id,
                                loom_us_to_s(sj->arrival) / 3600, sj->model_b,
                                sj->spec.rollout_gpus, loom_us_to_s(sj->spec.t_roll),
                                loom_us_to_s(sj->spec.t_train), sj->spec.slo,
                                (long long)sj->spec.iterations, sd, r[i].iter_s[j],
                                isfinite(sd) && sd <= sj->spec.slo * (1 + 1e-9));
                }
        }
        if (fclose(f))
                return loom_err_set(e, LOOM_EIO, "per-job", "%s: write failed", path);
        return 0;
}

static int sweep(const loom_sim_study_cfg *c, const loom_sim_trace *t, FILE *f, loom_err *e)
{
        loom_sim_sweep_cfg sc;
        loom_sim_sweep_cfg_default(&sc);
        sc.trace = t;
        sc.sim = c->sim;
        sc.sim.progress = NULL;
        sc.workload = c->workload;
        sc.workload.noise.tail_threshold = c->sim.policy.tail_threshold;
        sc.seeds = c->seeds;
        sc.threads = c->threads;
        if (c->policies)
                sc.policies = c->policies;
        loom_sim_sweep_out out;
        int rc = loom_sim_sweep(&sc, &out, e);
        if (rc)
                return rc;
        rc = loom_sim_sweep_report(f, &out, sc.seeds, c->format, c->plot, e);
        loom_sim_sweep_out_free(&out);
        return rc;
}

static void print_compare(const loom_sim_study_cfg *c, const loom_sim_workload *w,
                          const loom_sim_result *res, int n, FILE *f)
{
        if (c->format == LOOM_SIM_JSON) {
                loom_sim_report_json(f, res, n);
        } else if (c->format == LOOM_SIM_CSV) {
                loom_sim_report_csv(f, res, n);
        } else {
                const loom_sim_workload_cfg *wc = &c->workload;
                const loom_gpu_type *gr = &c->sim.cluster.gpu[LOOM_POOL_ROLLOUT],
                                    *gt = &c->sim.cluster.gpu[LOOM_POOL_TRAIN];
                fprintf(f,
                        "%d jobs, workload %s, SLO %g..%g, max group %d, seed %llu%s; rollout %s "
                        "$%.3f, training %s $%.3f per GPU-h\n",
                        w->n, loom_sim_profile_name(wc->profile), wc->slo.lo, wc->slo.hi,
                        c->sim.policy.max_group_size, (unsigned long long)wc->seed,
                        wc->noise.deterministic ? ", deterministic" : "", gr->name,
                        gr->price_per_hour, gt->name, gt->price_per_hour);
                loom_sim_report_table(f, res, n);
        }
}

/* Every chosen policy on w, then the plots and the per-job CSV, then the report. */
static int compare(const loom_sim_study_cfg *c, const loom_sim_workload *w, FILE *f, loom_err *e)
{
        unsigned mask = c->policies ? c->policies : (1u << LOOM_SIM_NPOLICIES) - 1;
        loom_sim_cfg cfg = c->sim;
        cfg.record_series = c->plot != NULL;
        loom_sim_result res[LOOM_SIM_NPOLICIES];
        int n = 0, rc = 0;
        if (c->timeline && !(cfg.timeline = fopen(c->timeline, "w")))
                return loom_err_set(e, LOOM_EIO, "timeline", "%s: cannot create", c->timeline);
        for (int p = 0; p < LOOM_SIM_NPOLICIES && !rc; p++) {
                if (!(mask & (1u << p)))
                        continue;
                if ((rc = loom_sim_run(&cfg, w, (loom_sim_policy)p, &res[n], e)))
                        break;
                n++;
        }
        if (cfg.timeline && (fclose(cfg.timeline) || rc) && !rc)
                rc = loom_err_set(e, LOOM_EIO, "timeline", "%s: write failed", c->timeline);
        if (rc && c->timeline)
                remove(c->timeline); /* a failed study leaves nothing behind */
        if (!rc && c->plot)
                rc = loom_sim_plot(c->plot, res, n, e);
        if (!rc && c->per_job)
                rc = loom_sim_write_per_job(c->per_job, w, res, n, e);
        if (!rc)
                print_compare(c, w, res, n, f);
        for (int i = 0; i < n; i++)
                loom_sim_result_free(&res[i]);
        return rc;
}

int loom_sim_study(const loom_sim_study_cfg *c, FILE *f, loom_err *e)
{
        loom_sim_trace t = {0};
        int rc;
        loom_sim_study_cfg own;
        if (c->cluster) { /* the study runs on the cluster it names */
                own = *c;
                loom_err why;
                if ((rc = loom_sim_cluster_load(c->cluster, &own.sim.cluster, &why)))
                        return loom_err_set(e, rc, "cluster", "--cluster: %s", why.msg);
                c = &own;
        }
        const char *why = loom_sim_study_conflict(c);
        if (why)
                return loom_err_set(e, LOOM_EINVAL, "study", "%s", why);
        if (c->kind == LOOM_SIM_STUDY_SWEEP && !c->trace)
                return loom_err_set(e, LOOM_EINVAL, "trace", "the sweep needs a trace");
        if (c->trace && (rc = loom_sim_trace_load(c->trace, c->start, c->count, &t, e)))
                return rc;
        if (c->kind == LOOM_SIM_STUDY_SWEEP) {
                rc = sweep(c, &t, f, e);
                loom_sim_trace_free(&t);
                return rc;
        }
        loom_sim_workload_cfg wc = c->workload;
        wc.noise.tail_threshold = c->sim.policy.tail_threshold;
        loom_sim_trace_profile *prof = NULL; /* a trace's explicit profiles, if it has them */
        if (c->trace &&
            (rc = loom_sim_trace_profiles_load(c->trace, c->start, c->count, &prof, e))) {
                loom_sim_trace_free(&t);
                return rc;
        }
        wc.profiles = prof;
        loom_sim_workload w;
        rc = loom_sim_workload_build(&wc, c->trace ? &t : NULL, &c->sim.cluster, &w, e);
        loom_sim_trace_free(&t);
        free(prof);
        if (rc)
                return rc;
        if (c->kind == LOOM_SIM_STUDY_DECOMPOSE) {
                loom_sim_rung rungs[LOOM_SIM_RUNGS];
                loom_sim_regrouping rg[LOOM_SIM_REGROUPINGS];
                bool json = c->format == LOOM_SIM_JSON;
                if (!(rc = loom_sim_decompose(&c->sim, &w, rungs, e)))
                        loom_sim_decompose_print(f, rungs, json);
                if (!rc && !(rc = loom_sim_decompose_regroupings(&c->sim, &w, rungs, rg, e)))
                        loom_sim_regroupings_print(f, rg, rungs, json);
                loom_sim_slicing sl[LOOM_SIM_SLICINGS];
                if (!rc && !(rc = loom_sim_decompose_slicings(&c->sim, &w, sl, e)))
                        loom_sim_slicings_print(f, sl, json);
        } else {
                rc = compare(c, &w, f, e);
        }
        loom_sim_workload_free(&w);
        return rc;
}
