/*
 * report.c - the simulator's outputs: an aligned table, one JSON object per policy per line,
 * and CSV. Cost ratios are taken against the lower bound and the oracle when they are among
 * the results. Numbers are printed with fixed precision so that equal runs give equal bytes.
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "sim_int.h"

static const loom_sim_result *find(const loom_sim_result *r, int n, loom_sim_policy p)
{
        for (int i = 0; i < n; i++)
                if (r[i].policy == p && r[i].ran && r[i].total_cost > 0)
                        return &r[i];
        return NULL;
}

static double ratio(const loom_sim_result *x, const loom_sim_result *ref)
{
        return ref && x->ran ? x->total_cost / ref->total_cost : NAN;
}

static double pct_decision(const loom_sim_result *x, int k)
{
        uint64_t t = x->decisions[0] + x->decisions[1] + x->decisions[2];
        return t ? 100.0 * (double)x->decisions[k] / (double)t : NAN;
}

/* "%*.*f" or a dash for NaN */
static void num(FILE *f, int w, int prec, double v)
{
        if (isnan(v))
                fprintf(f, " %*s", w, "-");
        else
                fprintf(f, " %*.*f", w, prec, v);
}

void loom_sim_report_table(FILE *f, const loom_sim_result *r, int n)
{
        const loom_sim_result *lb = find(r, n, LOOM_SIM_LB), *opt = find(r, n, LOOM_SIM_ORACLE);
        fprintf(f,
                "%-11s %9s %10s %9s %6s %6s %7s %6s %6s %6s %6s %6s %6s %6s %5s %5s %5s %9s %7s\n",
                "policy", "avg_$/h", "total_$", "peak_$/h", "roll", "train", "x_lb", "x_opt",
                "SLO%", "SLOp%", "sd_p50", "sd_p99", "bub_r", "bub_t", "pack%", "scal%", "new%",
                "events", "wall_s");
        for (int i = 0; i < n; i++) {
                const loom_sim_result *x = &r[i];
                fprintf(f, "%-11s", loom_sim_policy_name(x->policy));
                if (!x->ran) {
                        fprintf(f, " (did not run: %s)\n", x->note);
                        continue;
                }
                num(f, 9, 1, x->avg_cost_per_hour);
                num(f, 10, 0, x->total_cost);
                num(f, 9, 1, x->peak_cost_per_hour);
                fprintf(f, " %6d %6d", x->peak_gpus[0], x->peak_gpus[1]);
                num(f, 7, 3, ratio(x, lb));
                num(f, 6, 3, ratio(x, opt));
                num(f, 6, 1, 100 * x->slo_attainment);
                num(f, 6, 1, 100 * x->slo_attainment_wc);
                num(f, 6, 3, x->slowdown_p50);
                num(f, 6, 3, x->slowdown_p99);
                num(f, 6, 3, x->policy == LOOM_SIM_LB ? NAN : x->bubble[0]);
                num(f, 6, 3, x->policy == LOOM_SIM_LB ? NAN : x->bubble[1]);
                for (int k = 0; k < 3; k++)
                        num(f, 5, 1, pct_decision(x, k));
                fprintf(f, " %9llu %7.3f\n", (unsigned long long)x->events, x->wall_s);
        }
        for (int i = 0; i < n; i++)
                if (r[i].note[0] && r[i].ran)
                        fprintf(f, "note: %s: %s\n", loom_sim_policy_name(r[i].policy), r[i].note);
        for (int i = 0; i < n; i++)
                if (r[i].ran && (r[i].restarts || r[i].resubmits || r[i].regroups))
                        fprintf(f,
                                "%s: %llu restarts, %llu resubmits, %llu moves, %d failed, "
                                "%llu regroups (%.1f job-h migrating)\n",
                                loom_sim_policy_name(r[i].policy),
                                (unsigned long long)r[i].restarts,
                                (unsigned long long)r[i].resubmits, (unsigned long long)r[i].moves,
                                r[i].jobs_failed, (unsigned long long)r[i].regroups,
                                r[i].regroup_migration_h);
        for (int i = 0; i < n; i++)
                if (r[i].ran && r[i].slo_relaxed)
                        fprintf(f, "%s: %llu admissions with their SLO relaxed (--slo-premium)\n",
                                loom_sim_policy_name(r[i].policy),
                                (unsigned long long)r[i].slo_relaxed);
        for (int i = 0; i < n; i++)
                if (r[i].ran && r[i].pool_grown)
                        fprintf(f,
                                "%s: %llu training nodes added to groups' pools by joins, %llu "
                                "taken out by departures (policy.pool_grow)\n",
                                loom_sim_policy_name(r[i].policy),
                                (unsigned long long)r[i].pool_grown,
                                (unsigned long long)r[i].pool_shrunk);
}

/* A real that JSON can carry (null for NaN), rounded so output bytes are stable. */
static json_t *real(double v, int prec)
{
        if (!isfinite(v))
                return json_null();
        double s = pow(10, prec);
        return json_real(round(v * s) / s);
}

void loom__sim_group_cost_json(json_t *o, const double (*cost)[2], const double *by_slo)
{
        json_t *g = json_object();
        for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++) {
                if (!(cost[k][0] > 0 || cost[k][1] > 0))
                        continue;
                char key[16];
                snprintf(key, sizeof key, k ? "%d" : "lone", k);
                json_object_set_new(g, key,
                                    json_pack("[o,o]", real(cost[k][0], 2), real(cost[k][1], 2)));
        }
        if (!json_object_size(g)) {
                json_decref(g);
                return;
        }
        json_object_set_new(o, "group_cost", g);
        json_t *b = json_array();
        for (int i = 0; i < 4; i++)
                json_array_append_new(b, real(by_slo[i], 2));
        json_object_set_new(o, "lone_cost_by_slo", b);
}

static json_t *to_json(const loom_sim_result *x, const loom_sim_result *lb,
                       const loom_sim_result *opt)
{
        json_t *o = json_object();
        json_object_set_new(o, "policy", json_string(loom_sim_policy_name(x->policy)));
        json_object_set_new(o, "ran", json_boolean(x->ran));
        json_object_set_new(o, "avg_cost_per_hour", real(x->avg_cost_per_hour, 3));
        json_object_set_new(o, "total_cost", real(x->total_cost, 2));
        json_object_set_new(o, "peak_cost_per_hour", real(x->peak_cost_per_hour, 3));
        json_object_set_new(o, "peak_rollout_gpus", json_integer(x->peak_gpus[0]));
        json_object_set_new(o, "peak_train_gpus", json_integer(x->peak_gpus[1]));
        json_object_set_new(o, "cost_vs_lb", real(ratio(x, lb), 4));
        json_object_set_new(o, "cost_vs_oracle", real(ratio(x, opt), 4));
        json_object_set_new(o, "slo_attainment", real(x->slo_attainment, 4));
        json_object_set_new(o, "slo_attainment_profiled", real(x->slo_attainment_wc, 4));
        json_object_set_new(o, "slowdown_p50", real(x->slowdown_p50, 4));
        json_object_set_new(o, "slowdown_p99", real(x->slowdown_p99, 4));
        bool lbx = x->policy == LOOM_SIM_LB;
        json_object_set_new(o, "rollout_bubble", lbx ? json_null() : real(x->bubble[0], 4));
        json_object_set_new(o, "train_bubble", lbx ? json_null() : real(x->bubble[1], 4));
        json_t *d = json_object();
        json_object_set_new(d, "direct_pack", json_integer((json_int_t)x->decisions[0]));
        json_object_set_new(d, "rollout_scale", json_integer((json_int_t)x->decisions[1]));
        json_object_set_new(d, "new_group", json_integer((json_int_t)x->decisions[2]));
        json_object_set_new(o, "decisions", d);
        json_object_set_new(o, "jobs", json_integer(x->jobs));
        json_object_set_new(o, "jobs_done", json_integer(x->jobs_done));
        json_object_set_new(o, "jobs_rejected", json_integer(x->jobs_rejected));
        json_object_set_new(o, "makespan_h", real(x->makespan_h, 3));
        json_object_set_new(o, "migrations", json_integer((json_int_t)x->migrations));
        json_object_set_new(o, "cold_starts", json_integer((json_int_t)x->cold_starts));
        json_object_set_new(o, "warm_switches", json_integer((json_int_t)x->warm_switches));
        json_object_set_new(o, "events", json_integer((json_int_t)x->events));
        json_object_set_new(o, "wall_s", real(x->wall_s, 4));
        const loom_gpu_type *gr = &x->cluster.gpu[LOOM_POOL_ROLLOUT],
                            *gt = &x->cluster.gpu[LOOM_POOL_TRAIN];
        json_object_set_new(o, "prices",
                            json_pack("{s:s,s:o,s:s,s:o,s:i}", "rollout_gpu", gr->name,
                                      "rollout_gpu_h", real(gr->price_per_hour, 6), "train_gpu",
                                      gt->name, "train_gpu_h", real(gt->price_per_hour, 6),
                                      "gpus_per_node", x->cluster.gpus_per_node));
        json_object_set_new(o, "drift", json_string(loom_sim_drift_name(x->drift)));
        json_object_set_new(o, "admission",
                            x->admits ? json_string(loom_admission_name(x->admission))
                                      : json_null());
        json_object_set_new(o, "regroup_migration_h", real(x->regroup_migration_h, 3));
        json_object_set_new(o, "restarts", json_integer((json_int_t)x->restarts));
        json_object_set_new(o, "resubmits", json_integer((json_int_t)x->resubmits));
        json_object_set_new(o, "moves", json_integer((json_int_t)x->moves));
        json_object_set_new(o, "replans", json_integer((json_int_t)x->replans));
        json_object_set_new(o, "slo_relaxed", json_integer((json_int_t)x->slo_relaxed));
        json_object_set_new(o, "pool_grown", json_integer((json_int_t)x->pool_grown));
        json_object_set_new(o, "pool_shrunk", json_integer((json_int_t)x->pool_shrunk));
        json_object_set_new(o, "regroups", json_integer((json_int_t)x->regroups));
        json_object_set_new(o, "jobs_failed", json_integer(x->jobs_failed));
        json_object_set_new(o, "multirate", json_boolean(x->multirate));
        json_object_set_new(o, "plan_tails", json_boolean(x->plan_tails));
        json_object_set_new(o, "mean_rate",
                            x->rate_n ? real((double)x->rate_sum / (double)x->rate_n, 4)
                                      : json_null());
        loom__sim_group_cost_json(o, x->group_cost, x->lone_cost_by_slo);
        if (x->policy == LOOM_SIM_ORACLE && x->ran)
                json_object_set_new(o, "grown_pool_cost", real(x->grown_pool_cost, 2));
        if (x->note[0])
                json_object_set_new(o, "note", json_string(x->note));
        return o;
}

void loom_sim_report_json(FILE *f, const loom_sim_result *r, int n)
{
        const loom_sim_result *lb = find(r, n, LOOM_SIM_LB), *opt = find(r, n, LOOM_SIM_ORACLE);
        for (int i = 0; i < n; i++) {
                json_t *o = to_json(&r[i], lb, opt);
                char *s =
                    json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(10));
                if (s)
                        fprintf(f, "%s\n", s);
                free(s);
                json_decref(o);
        }
}

static void csv_num(FILE *f, double v, int prec)
{
        if (isfinite(v))
                fprintf(f, ",%.*f", prec, v);
        else
                fputc(',', f);
}

void loom_sim_report_csv(FILE *f, const loom_sim_result *r, int n)
{
        const loom_sim_result *lb = find(r, n, LOOM_SIM_LB), *opt = find(r, n, LOOM_SIM_ORACLE);
        fprintf(f, "policy,ran,avg_cost_per_hour,total_cost,peak_cost_per_hour,peak_rollout_gpus,"
                   "peak_train_gpus,cost_vs_lb,cost_vs_oracle,slo_attainment,slowdown_p50,"
                   "slo_attainment_profiled,slowdown_p99,rollout_bubble,train_bubble,direct_pack,"
                   "rollout_scale,new_group,"
                   "jobs,events,wall_s,drift,admission,regroup_migration_h,restarts,resubmits\n");
        for (int i = 0; i < n; i++) {
                const loom_sim_result *x = &r[i];
                bool lbx = x->policy == LOOM_SIM_LB;
                fprintf(f, "%s,%d", loom_sim_policy_name(x->policy), x->ran ? 1 : 0);
                csv_num(f, x->avg_cost_per_hour, 3);
                csv_num(f, x->total_cost, 2);
                csv_num(f, x->peak_cost_per_hour, 3);
                fprintf(f, ",%d,%d", x->peak_gpus[0], x->peak_gpus[1]);
                csv_num(f, ratio(x, lb), 4);
                csv_num(f, ratio(x, opt), 4);
                csv_num(f, x->slo_attainment, 4);
                csv_num(f, x->slowdown_p50, 4);
                csv_num(f, x->slo_attainment_wc, 4);
                csv_num(f, x->slowdown_p99, 4);
                csv_num(f, lbx ? NAN : x->bubble[0], 4);
                csv_num(f, lbx ? NAN : x->bubble[1], 4);
                fprintf(f, ",%llu,%llu,%llu,%d,%llu", (unsigned long long)x->decisions[0],
                        (unsigned long long)x->decisions[1], (unsigned long long)x->decisions[2],
                        x->jobs, (unsigned long long)x->events);
                csv_num(f, x->wall_s, 4);
                fprintf(f, ",%s,%s", loom_sim_drift_name(x->drift),
                        x->admits ? loom_admission_name(x->admission) : "");
                csv_num(f, x->regroup_migration_h, 3);
                fprintf(f, ",%llu,%llu", (unsigned long long)x->restarts,
                        (unsigned long long)x->resubmits);
                fputc('\n', f);
        }
}
