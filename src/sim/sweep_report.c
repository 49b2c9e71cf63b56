/*
 * sweep_report.c - the Figure 15 sweep as the reader sees it: every (setting, policy) averaged
 * over its seeds with the spread across seeds, as a table, JSON lines or CSV, and as bar charts
 * (fig15{a,b,c}_{cost,slo}). The lower bound has no SLO figures: null in JSON, empty in CSV, '-'
 * in the table, no bar in the SLO charts.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

/* One sweep setting x policy, averaged over its seeds. */
typedef struct sweep_agg {
        const loom_sim_sweep_row *r; /* the first seed's row: figure, setting, policy */
        double cost, cost_min, cost_max, slo, slo_min, slo_max, slo_wc, avg;
} sweep_agg;

/* Rows come ordered by setting, policy, seed: every `seeds` rows make one aggregate. */
static void aggregate(const loom_sim_sweep_out *out, int seeds, sweep_agg *a)
{
        for (int g = 0; g < out->n / seeds; g++) {
                const loom_sim_sweep_row *r = &out->rows[g * seeds];
                sweep_agg x = {r, 0, INFINITY, -INFINITY, 0, INFINITY, -INFINITY, 0, 0};
                for (int k = 0; k < seeds; k++) {
                        x.cost += r[k].cost_vs_lb / seeds;
                        x.cost_min = fmin(x.cost_min, r[k].cost_vs_lb);
                        x.cost_max = fmax(x.cost_max, r[k].cost_vs_lb);
                        x.slo += r[k].slo_attainment / seeds;
                        x.slo_min = fmin(x.slo_min, r[k].slo_attainment);
                        x.slo_max = fmax(x.slo_max, r[k].slo_attainment);
                        x.slo_wc += r[k].slo_attainment_wc / seeds;
                        x.avg += r[k].avg_cost_per_hour / seeds;
                }
                a[g] = x;
        }
}

static void print_header(FILE *f, loom_sim_format fmt)
{
        if (fmt == LOOM_SIM_CSV)
                fprintf(f, "figure,setting,policy,cost_vs_lb,cost_vs_lb_min,cost_vs_lb_max,"
                           "slo_attainment,slo_min,slo_max,slo_attainment_profiled,"
                           "avg_cost_per_hour\n");
        else if (fmt == LOOM_SIM_TABLE)
                fprintf(f, "%-3s %-14s %-10s %9s %9s %9s %7s %7s %7s %7s\n", "fig", "setting",
                        "policy", "x_lb", "x_lb_min", "x_lb_max", "SLO%", "SLOmin", "SLOmax",
                        "SLOp%");
}

static void print_row(FILE *f, loom_sim_format fmt, const sweep_agg *x, int seeds)
{
        const char *pn = loom_sim_policy_name(x->r->policy);
        bool lb = x->r->policy == LOOM_SIM_LB; /* a bound has no SLO figures */
        char slo[160] = "null,\"slo_min\":null,\"slo_max\":null,"
                        "\"slo_attainment_profiled\":null";
        if (!lb)
                snprintf(slo, sizeof slo,
                         "%.4f,\"slo_min\":%.4f,\"slo_max\":%.4f,"
                         "\"slo_attainment_profiled\":%.4f",
                         x->slo, x->slo_min, x->slo_max, x->slo_wc);
        if (fmt == LOOM_SIM_JSON)
                fprintf(f,
                        "{\"figure\":\"15%c\",\"setting\":\"%s\",\"policy\":\"%s\","
                        "\"seeds\":%d,\"cost_vs_lb\":%.4f,\"cost_vs_lb_min\":%.4f,"
                        "\"cost_vs_lb_max\":%.4f,\"slo_attainment\":%s,"
                        "\"avg_cost_per_hour\":%.2f}\n",
                        x->r->figure, x->r->setting, pn, seeds, x->cost, x->cost_min, x->cost_max,
                        slo, x->avg);
        else if (fmt == LOOM_SIM_CSV && lb)
                fprintf(f, "15%c,%s,%s,%.4f,%.4f,%.4f,,,,,%.2f\n", x->r->figure, x->r->setting, pn,
                        x->cost, x->cost_min, x->cost_max, x->avg);
        else if (fmt == LOOM_SIM_CSV)
                fprintf(f, "15%c,%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f\n", x->r->figure,
                        x->r->setting, pn, x->cost, x->cost_min, x->cost_max, x->slo, x->slo_min,
                        x->slo_max, x->slo_wc, x->avg);
        else if (lb)
                fprintf(f, "15%c %-14s %-10s %9.3f %9.3f %9.3f %7s %7s %7s %7s\n", x->r->figure,
                        x->r->setting, pn, x->cost, x->cost_min, x->cost_max, "-", "-", "-", "-");
        else
                fprintf(f, "15%c %-14s %-10s %9.3f %9.3f %9.3f %7.1f %7.1f %7.1f %7.1f\n",
                        x->r->figure, x->r->setting, pn, x->cost, x->cost_min, x->cost_max,
                        100 * x->slo, 100 * x->slo_min, 100 * x->slo_max, 100 * x->slo_wc);
}

/* fig15{a,b,c}_{cost,slo}: one bar group per setting, one bar per policy. */
static int plot(const char *dir, const sweep_agg *a, int n, loom_err *e)
{
        int npol = 0;
        const char *pl[LOOM_SIM_NPOLICIES];
        while (npol < n && !strcmp(a[npol].r->setting, a[0].r->setting))
                pl[npol] = loom_sim_policy_name(a[npol].r->policy), npol++;
        int rc = 0;
        for (int fig = 0; fig < 3 && !rc; fig++) {
                const char *gl[8];
                int ng = 0, first = -1;
                for (int g = 0; g < n && ng < 8; g += npol)
                        if (a[g].r->figure == 'a' + fig) {
                                first = first < 0 ? g : first;
                                gl[ng++] = a[g].r->setting;
                        }
                double vals[2][8 * LOOM_SIM_NPOLICIES];
                for (int k = 0; k < ng * npol; k++) {
                        bool lb = a[first + k].r->policy == LOOM_SIM_LB;
                        vals[0][k] = a[first + k].cost;
                        vals[1][k] = lb ? NAN : 100 * a[first + k].slo;
                }
                for (int m = 0; m < 2 && !rc; m++) {
                        char name[32], title[96];
                        snprintf(name, sizeof name, "fig15%c_%s", 'a' + fig, m ? "slo" : "cost");
                        snprintf(title, sizeof title, "Figure 15%c: %s", 'a' + fig,
                                 m ? "SLO attainment (%)" : "cost / lower bound");
                        loom_sim_bars b = {
                            title, m ? "% of jobs" : "x lower bound", ng, npol, gl, pl, vals[m]};
                        rc = loom_sim_plot_bars(dir, name, &b, e);
                }
        }
        return rc;
}

int loom_sim_sweep_report(FILE *f, const loom_sim_sweep_out *out, int seeds, loom_sim_format fmt,
                          const char *plot_dir, loom_err *e)
{
        if (seeds < 1)
                return loom_err_set(e, LOOM_EINVAL, "seeds", "seeds must be at least 1");
        int n = out->n / seeds;
        sweep_agg *agg = calloc((size_t)(n ? n : 1), sizeof *agg);
        if (!agg)
                return loom_err_set(e, LOOM_ENOMEM, "sweep", "out of memory");
        aggregate(out, seeds, agg);
        int rc = plot_dir ? plot(plot_dir, agg, n, e) : 0;
        if (!rc) {
                print_header(f, fmt);
                for (int g = 0; g < n; g++)
                        print_row(f, fmt, &agg[g], seeds);
                if (fmt == LOOM_SIM_TABLE)
                        fprintf(f,
                                "%llu events in %.2f s of run time (%.2f M events/s per "
                                "thread)\n",
                                (unsigned long long)out->events, out->cpu_s,
                                out->cpu_s > 0 ? (double)out->events / out->cpu_s / 1e6 : 0);
        }
        free(agg);
        return rc;
}
