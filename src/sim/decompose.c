/*
 * decompose.c - where the cost goes: a ladder from the fluid lower bound to loom (`loom sim
 * --decompose`, docs/sim.md).
 *
 * Each rung adds one constraint to the one below and is measured on the same workload:
 *
 *   fluid     every job's busy GPU-seconds at its pool's price (lb.c; a lower bound).
 *   nodes     + whole nodes: each job's work spread evenly over the longest life its SLO
 *               allows (solo x SLO), the pools' summed demand rounded up to whole nodes at
 *               every instant.
 *   memory    + host-memory residency: at every instant also enough nodes to hold the active
 *               jobs' working sets (rollout and training) in host memory.
 *   informed  + SLOs and phase dependencies in real groups, regrouped optimally and for free at
 *               every arrival and departure (the oracle; not measured where it gives up), each
 *               job planned on its realised p99 phase times and held to its realised mean solo
 *               iteration: learned admission's plan, known from the start. Every phase lasts
 *               what it lasts in the workload; only the plan changes.
 *   optimal   + planning on the declared worst-case times instead (the same oracle).
 *   departures + the oracle regroups only when a job leaves; an arrival joins the group (or
 *               opens the one) that costs least then.
 *   local     + when a job leaves the oracle only moves jobs one at a time from the grouping
 *               they have, each move lowering the $/h (free and instant): the most that moving
 *               single members, as loom's moves do, can get out of the same departures.
 *   greedy    + the oracle never regroups: each arrival placed that way, for good.
 *   regroup   + regrouping by a heuristic, hourly, migrations paid: every active job
 *               re-placed each regroup_period_h (the policy `regroup`).
 *   online    + online arrival order: loom as configured, each job placed on arrival (and, under
 *               learned admission, moved when that pays: policy.move_lone, move_members).
 *   multirate + multi-rate groups: loom with policy.multirate (members at rates >= 1).
 *
 * Only `fluid` is a bound. `nodes` and `memory` spread work at the slowest rate the SLOs allow,
 * which is where node rounding and residency cost least but is not a proof that no schedule
 * does better; the other rungs are simulated schedules (the oracle with fluid progress, the
 * others with migrations and restarts), so a rung may cost less than the one below it, and the
 * ladder says so. Every oracle rung colocates a job alone on its training nodes as loom does.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

typedef struct dc_ev {
        loom_us t;
        double gpus[2]; /* fluid GPU demand added (negative at the end) */
        double mem[2];  /* resident bytes added */
} dc_ev;

static int cmp_dc(const void *a, const void *b)
{
        const dc_ev *x = a, *y = b;
        return (x->t > y->t) - (x->t < y->t);
}

/* The busy GPU-seconds of job j per pool, as lb.c counts them (microsecond-GPUs). */
static void busy(const loom_sim_cfg *c, const loom_sim_job *j, double out[2])
{
        const loom_job_spec *s = &j->spec;
        double warm = (double)loom_sim_warm(c, j->model_b);
        out[0] = (double)s->rollout_gpus * warm;
        out[1] = (double)c->cluster.gpus_per_node * warm;
        for (int64_t i = 0; i < s->iterations; i++) {
                double w = (double)sim_phase_us(s->t_roll, j->roll[i]);
                double q = (double)sim_phase_us(s->t_roll, j->tailq[i]);
                out[0] += (double)s->rollout_gpus * (q < w ? q : w) + (w - (q < w ? q : w));
                out[1] += (double)s->train_gpus * (double)sim_phase_us(s->t_train, j->train[i]);
        }
}

/* Whole-node cost of the fluid schedule, with (memory) or without host-memory residency. */
static int node_rungs(const loom_sim_cfg *c, const loom_sim_workload *w, double out[2], loom_err *e)
{
        dc_ev *ev = malloc((size_t)(2 * w->n + 1) * sizeof *ev);
        if (!ev)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int gpn = c->cluster.gpus_per_node;
        double node_price[2] = {c->cluster.gpu[0].price_per_hour * gpn,
                                c->cluster.gpu[1].price_per_hour * gpn};
        for (int i = 0; i < w->n; i++) {
                const loom_sim_job *j = &w->jobs[i];
                double work[2];
                busy(c, j, work);
                double life = (double)loom_sim_job_solo_time(j, c) * j->spec.slo;
                double mem[2] = {(double)j->spec.mem_rollout * (j->spec.rollout_gpus / gpn),
                                 (double)j->spec.mem_train * (j->spec.train_gpus / gpn)};
                ev[2 * i] = (dc_ev){j->arrival, {work[0] / life, work[1] / life}, {mem[0], mem[1]}};
                ev[2 * i + 1] = (dc_ev){j->arrival + (loom_us)life,
                                        {-work[0] / life, -work[1] / life},
                                        {-mem[0], -mem[1]}};
        }
        qsort(ev, (size_t)(2 * w->n), sizeof *ev, cmp_dc);
        double gpus[2] = {0, 0}, mem[2] = {0, 0}, host = (double)c->cluster.host_mem_bytes;
        out[0] = out[1] = 0;
        for (int i = 0; i + 1 < 2 * w->n; i++) {
                for (int p = 0; p < 2; p++) {
                        gpus[p] += ev[i].gpus[p];
                        mem[p] += ev[i].mem[p];
                }
                double dt_h = loom_us_to_s(ev[i + 1].t - ev[i].t) / 3600.0;
                for (int p = 0; p < 2; p++) {
                        double by_gpu = ceil(gpus[p] / gpn - 1e-9);
                        double by_mem = ceil(mem[p] / host - 1e-9);
                        by_gpu = by_gpu > 0 ? by_gpu : 0;
                        by_mem = by_mem > 0 ? by_mem : 0;
                        out[0] += by_gpu * node_price[p] * dt_h;
                        out[1] += (by_gpu > by_mem ? by_gpu : by_mem) * node_price[p] * dt_h;
                }
        }
        free(ev);
        return 0;
}

static void set(loom_sim_rung *r, const char *name, const char *adds, double total, double h)
{
        r->name = name;
        r->adds = adds;
        r->measured = true;
        r->total_cost = total;
        r->avg_cost_per_hour = h > 0 ? total / h : 0;
        r->slo_attainment = NAN;
}

static int from_run(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                    loom_sim_rung *r, double h, loom_err *e)
{
        loom_sim_result res;
        int rc = loom_sim_run(c, w, p, &res, e);
        if (rc)
                return rc;
        if (!res.ran) { /* the oracle gave up */
                r->slo_attainment = NAN;
                snprintf(r->note, sizeof r->note, "%s", res.note);
                loom_sim_result_free(&res);
                return 0;
        }
        set(r, r->name, r->adds, res.total_cost, h);
        r->avg_cost_per_hour = res.avg_cost_per_hour;
        r->slo_attainment = res.slo_attainment;
        r->lone_rollout_cost = res.lone_rollout_cost;
        r->moves = res.moves;
        memcpy(r->group_cost, res.group_cost, sizeof r->group_cost);
        memcpy(r->lone_cost_by_slo, res.lone_cost_by_slo, sizeof r->lone_cost_by_slo);
        r->grown_pool_cost = res.grown_pool_cost;
        loom_sim_result_free(&res);
        return 0;
}

/* The q-quantile (nearest rank) of v[0..n), sorted in tmp. */
static double quantile(const float *v, int64_t n, double q, double *tmp)
{
        for (int64_t i = 0; i < n; i++)
                tmp[i] = v[i];
        qsort(tmp, (size_t)n, sizeof *tmp, loom_cmp_double);
        return loom_quantile_rank(tmp, (size_t)n, q);
}

/* The realisation `frac` of a phase of worst case `from`, as a fraction of `to` instead: the
 * same length (sim_phase_us) on the other profile. */
static float refrac(float frac, loom_us from, loom_us to)
{
        return (float)((double)frac * (double)from / (double)to);
}

/* w with every job's profile replaced by its realised q-quantile phase times and rollout head
 * (t_head: the time to the tail threshold), its SLO held to its realised mean solo iteration
 * (t_solo_ref), as learned admission plans a job. Its
 * realisations are w's, re-expressed against the new profile so every phase lasts as long as
 * it does in w. Free with loom_sim_workload_free. */
int loom__sim_realised_profiles(const loom_sim_workload *w, double q, loom_sim_workload *out)
{
        *out = *w;
        int64_t most = 1;
        size_t total = 1;
        for (int i = 0; i < w->n; i++) {
                if (w->jobs[i].spec.iterations > most)
                        most = w->jobs[i].spec.iterations;
                if (w->jobs[i].spec.iterations > 0)
                        total += (size_t)w->jobs[i].spec.iterations;
        }
        out->jobs = malloc(sizeof *out->jobs * (size_t)(w->n ? w->n : 1));
        out->draws = malloc(sizeof *out->draws * 3 * total);
        double *tmp = malloc(sizeof *tmp * (size_t)most);
        if (!out->jobs || !out->draws || !tmp) {
                loom_sim_workload_free(out);
                free(tmp);
                return LOOM_ENOMEM;
        }
        float *d = out->draws;
        for (int i = 0; i < w->n; i++) {
                loom_sim_job *j = &out->jobs[i];
                *j = w->jobs[i];
                int64_t n = j->spec.iterations;
                if (n < 1)
                        continue;
                loom_us roll = sim_phase_us(j->spec.t_roll, (float)quantile(j->roll, n, q, tmp));
                loom_us train = sim_phase_us(j->spec.t_train, (float)quantile(j->train, n, q, tmp));
                loom_us head = sim_phase_us(j->spec.t_roll, (float)quantile(j->tailq, n, q, tmp));
                loom_us solo = 0;
                for (int64_t it = 0; it < n; it++)
                        solo += sim_phase_us(j->spec.t_roll, j->roll[it]) +
                                sim_phase_us(j->spec.t_train, j->train[it]) + j->spec.t_sync;
                j->spec.t_solo_ref = solo / n;
                j->spec.t_roll = roll > 0 ? roll : 1;
                j->spec.t_train = train > 0 ? train : 1;
                j->spec.t_head = head > 0 && head < j->spec.t_roll ? head : 0;
                const loom_job_spec *o = &w->jobs[i].spec;
                for (int64_t it = 0; it < n; it++) {
                        d[it] = refrac(j->roll[it], o->t_roll, j->spec.t_roll);
                        d[n + it] = refrac(j->tailq[it], o->t_roll, j->spec.t_roll);
                        d[2 * n + it] = refrac(j->train[it], o->t_train, j->spec.t_train);
                }
                j->roll = d, j->tailq = d + n, j->train = d + 2 * n;
                d += 3 * n;
        }
        free(tmp);
        return 0;
}

int loom_sim_decompose(const loom_sim_cfg *cfg, const loom_sim_workload *w,
                       loom_sim_rung out[LOOM_SIM_RUNGS], loom_err *e)
{
        loom_sim_cfg c = *cfg;
        c.record_series = c.record_gantt = false;
        memset(out, 0, sizeof *out * LOOM_SIM_RUNGS);
        loom_sim_result lb;
        int rc = loom_sim_run(&c, w, LOOM_SIM_LB, &lb, e);
        if (rc)
                return rc;
        double h = lb.makespan_h;
        set(&out[0], "fluid", "busy GPU time only (lower bound)", lb.total_cost, h);
        loom_sim_result_free(&lb);
        double nodes[2] = {0, 0};
        if ((rc = node_rungs(&c, w, nodes, e)))
                return rc;
        set(&out[1], "nodes", "+ whole nodes", nodes[0], h);
        set(&out[2], "memory", "+ host-memory residency", nodes[1], h);
        loom_sim_workload known;
        if ((rc = loom__sim_realised_profiles(w, 0.99, &known)))
                return loom_err_set(e, rc, "", "out of memory");
        out[3].name = "informed";
        out[3].adds = "+ SLOs and phases, optimal regrouping, p99 known";
        rc = from_run(&c, &known, LOOM_SIM_ORACLE, &out[3], h, e);
        loom_sim_workload_free(&known);
        if (rc)
                return rc;
        out[4].name = "optimal";
        out[4].adds = "+ planning on declared worst-case times";
        if ((rc = from_run(&c, w, LOOM_SIM_ORACLE, &out[4], h, e)))
                return rc;
        /* the same oracle, regrouping less: only when a job leaves, by single moves, never */
        static const struct {
                const char *name, *adds;
                loom_sim_oracle_regroup regroup;
        } less[] = {
            {"departures", "+ regrouping only when a job leaves", LOOM_SIM_REGROUP_DEPARTURES},
            {"local", "+ at departures, single-job moves only", LOOM_SIM_REGROUP_LOCAL},
            {"greedy", "+ never regrouping: each arrival placed once", LOOM_SIM_REGROUP_NEVER},
        };
        for (size_t i = 0; i < sizeof less / sizeof less[0]; i++) {
                c.oracle_regroup = less[i].regroup;
                out[5 + i].name = less[i].name;
                out[5 + i].adds = less[i].adds;
                if ((rc = from_run(&c, w, LOOM_SIM_ORACLE, &out[5 + i], h, e)))
                        return rc;
        }
        c.oracle_regroup = cfg->oracle_regroup;
        /* regroup and online are loom's single-rate placement (WEAVE's groups); the last rung
         * lets members run at rates > 1, so the ladder shows what multi-rate groups add */
        c.policy.multirate = false;
        out[8].name = "regroup";
        out[8].adds = "+ heuristic hourly regrouping, migrations paid";
        if ((rc = from_run(&c, w, LOOM_SIM_REGROUP, &out[8], h, e)))
                return rc;
        out[9].name = "online";
        out[9].adds = "+ online arrival order (loom, single-rate)";
        if ((rc = from_run(&c, w, LOOM_SIM_LOOM, &out[9], h, e)))
                return rc;
        c.policy.multirate = true;
        out[10].name = "multirate";
        out[10].adds = "+ multi-rate groups (loom, policy.multirate)";
        if ((rc = from_run(&c, w, LOOM_SIM_LOOM, &out[10], h, e)))
                return rc;
        return 0;
}

static bool has_groups(const loom_sim_rung *x)
{
        for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++)
                if (x->group_cost[k][0] > 0 || x->group_cost[k][1] > 0)
                        return true;
        return false;
}

/* A bill by group kind, as `loom sim --json` prints it (report.c), into its line. */
static void print_groups_json(FILE *f, const double (*group_cost)[2], const double *by_slo)
{
        json_t *o = json_object();
        loom__sim_group_cost_json(o, group_cost, by_slo);
        static const char *const keys[] = {"group_cost", "lone_cost_by_slo"};
        for (int i = 0; i < 2; i++) {
                json_t *v = json_object_get(o, keys[i]);
                char *t =
                    v ? json_dumps(v, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(10))
                      : NULL;
                if (t)
                        fprintf(f, ",\"%s\":%s", keys[i], t);
                free(t);
        }
        json_decref(o);
}

/* Where the last rung's dollars go: by group size, and lone members by SLO. */
static void print_groups(FILE *f, const loom_sim_rung *m)
{
        if (!m->measured || !has_groups(m) || !(m->total_cost > 0))
                return;
        fprintf(f, "%s by group (rollout nodes + training nodes, share of %.0f):\n", m->name,
                m->total_cost);
        for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++) {
                double r = m->group_cost[k][0], t = m->group_cost[k][1];
                if (!(r > 0 || t > 0))
                        continue;
                char what[48];
                snprintf(what, sizeof what, k ? "%d member%s" : "lone (rollouts on training)", k,
                         k == 1 ? "" : "s");
                fprintf(f, "  %-28s %10.0f + %10.0f = %10.0f  %5.1f%%\n", what, r, t, r + t,
                        100 * (r + t) / m->total_cost);
        }
        const double *b = m->lone_cost_by_slo;
        fprintf(f,
                "  lone by SLO: < 1.25 %.0f, 1.25-1.5 %.0f, 1.5-1.75 %.0f, >= 1.75 %.0f "
                "(a lone member costs what the colocated baseline costs)\n",
                b[0], b[1], b[2], b[3]);
}

void loom_sim_decompose_print(FILE *f, const loom_sim_rung *r, bool json)
{
        double base = r[0].total_cost, prev = base;
        if (!json)
                fprintf(f, "%-10s %-52s %10s %9s %8s %8s %6s %6s\n", "rung", "adds", "total_$",
                        "avg_$/h", "x_fluid", "step", "SLO%", "moves");
        for (int i = 0; i < LOOM_SIM_RUNGS; i++) {
                const loom_sim_rung *x = &r[i];
                double ratio = base > 0 ? x->total_cost / base : 0;
                double step = prev > 0 ? x->total_cost / prev : 0;
                if (json) {
                        fprintf(f, "{\"rung\":\"%s\",\"adds\":\"%s\",\"measured\":%s", x->name,
                                x->adds, x->measured ? "true" : "false");
                        if (!x->measured)
                                fprintf(f, ",\"note\":\"%s\"", x->note);
                        if (x->measured) {
                                fprintf(f,
                                        ",\"total_cost\":%.2f,\"avg_cost_per_hour\":%.2f,"
                                        "\"x_fluid\":%.4f,\"step\":%.4f",
                                        x->total_cost, x->avg_cost_per_hour, ratio, step);
                                if (!isnan(x->slo_attainment))
                                        fprintf(f, ",\"slo_attainment\":%.4f,\"moves\":%llu",
                                                x->slo_attainment, (unsigned long long)x->moves);
                                if (x->lone_rollout_cost > 0)
                                        fprintf(f, ",\"lone_rollout_cost\":%.2f",
                                                x->lone_rollout_cost);
                                if (x->grown_pool_cost > 0)
                                        fprintf(f, ",\"grown_pool_cost\":%.2f", x->grown_pool_cost);
                                print_groups_json(f, x->group_cost, x->lone_cost_by_slo);
                        }
                        fprintf(f, "}\n");
                } else if (!x->measured) {
                        fprintf(f, "%-10s %-52s not measured: %s\n", x->name, x->adds, x->note);
                } else {
                        char slo[16] = "-", moves[24] = "-";
                        if (!isnan(x->slo_attainment)) {
                                snprintf(slo, sizeof slo, "%.1f", 100 * x->slo_attainment);
                                snprintf(moves, sizeof moves, "%llu", (unsigned long long)x->moves);
                        }
                        fprintf(f, "%-10s %-52s %10.0f %9.1f %8.3f %8.3f %6s %6s\n", x->name,
                                x->adds, x->total_cost, x->avg_cost_per_hour, ratio, step, slo,
                                moves);
                }
                if (x->measured)
                        prev = x->total_cost;
        }
        const loom_sim_rung *m = &r[LOOM_SIM_RUNGS - 1];
        if (!json && m->measured && m->lone_rollout_cost > 0 && m->total_cost > 0)
                fprintf(f,
                        "%s: $%.0f (%.1f%%) of it on the rollout nodes of one-member groups, "
                        "which the colocated baseline does not pay for; colocating a lone "
                        "member's rollouts on its training nodes would save at most that "
                        "($%.1f/h)\n",
                        m->name, m->lone_rollout_cost, 100 * m->lone_rollout_cost / m->total_cost,
                        m->total_cost > 0 && m->avg_cost_per_hour > 0
                            ? m->lone_rollout_cost * m->avg_cost_per_hour / m->total_cost
                            : 0);
        if (!json)
                print_groups(f, m);
}

/* ---- what the targets need: the informed oracle's regroupings ---------------------------- */

int loom_sim_decompose_regroupings(const loom_sim_cfg *cfg, const loom_sim_workload *w,
                                   const loom_sim_rung *ladder,
                                   loom_sim_regrouping out[LOOM_SIM_REGROUPINGS], loom_err *e)
{
        static const struct {
                const char *mode;
                loom_sim_oracle_regroup regroup;
                double price;
        } modes[] = {
            {"always", LOOM_SIM_REGROUP_ALWAYS, 0},
            {"departures", LOOM_SIM_REGROUP_DEPARTURES, 0},
            {"priced", LOOM_SIM_REGROUP_DEPARTURES, LOOM_SIM_MOVE_PRICE},
            {"local", LOOM_SIM_REGROUP_LOCAL, 0},
            {"never", LOOM_SIM_REGROUP_NEVER, 0},
        };
        enum { MODES = sizeof modes / sizeof modes[0] };
        _Static_assert(2 * MODES == LOOM_SIM_REGROUPINGS, "each mode with pools free, then fixed");
        const loom_sim_rung *informed = ladder ? &ladder[3] : NULL; /* the free `always` row */
        memset(out, 0, sizeof *out * LOOM_SIM_REGROUPINGS);
        loom_sim_cfg c = *cfg;
        c.record_series = c.record_gantt = false;
        double base[2];
        loom_sim_policy bp[2] = {LOOM_SIM_COLOCATED, LOOM_SIM_SOLO};
        for (int b = 0; b < 2; b++) {
                loom_sim_result r;
                int rc = loom_sim_run(&c, w, bp[b], &r, e);
                if (rc)
                        return rc;
                base[b] = r.total_cost;
                loom_sim_result_free(&r);
        }
        loom_sim_workload known;
        if (loom__sim_realised_profiles(w, 0.99, &known))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int rc = 0;
        for (int i = 0; i < LOOM_SIM_REGROUPINGS && !rc; i++) {
                loom_sim_regrouping *x = &out[i];
                x->mode = modes[i % MODES].mode;
                x->fixed_pools = i >= MODES;
                x->restarts = cfg->oracle_restarts;
                /* the row's run, as a rung: the ladder's informed one, or the oracle's now */
                loom_sim_rung run = {0};
                const loom_sim_rung *from = &run;
                if (i == 0 && informed && informed->measured) {
                        from = informed;
                } else {
                        c.oracle_regroup = modes[i % MODES].regroup;
                        c.oracle_move_price = modes[i % MODES].price;
                        c.oracle_fixed_pools = x->fixed_pools;
                        if ((rc = from_run(&c, &known, LOOM_SIM_ORACLE, &run, 0, e)))
                                break;
                }
                x->measured = from->measured;
                snprintf(x->note, sizeof x->note, "%s", from->note);
                x->total_cost = from->total_cost;
                x->avg_cost_per_hour = from->avg_cost_per_hour;
                x->moves = from->moves;
                memcpy(x->group_cost, from->group_cost, sizeof x->group_cost);
                memcpy(x->lone_cost_by_slo, from->lone_cost_by_slo, sizeof x->lone_cost_by_slo);
                x->grown_pool_cost = from->grown_pool_cost;
                if (x->measured && x->total_cost > 0) {
                        x->colocated_ratio = base[0] / x->total_cost;
                        x->solo_ratio = base[1] / x->total_cost;
                }
        }
        loom_sim_workload_free(&known);
        return rc;
}

/* One measured row of the table: a bill, the baselines' over it (ratio[0] colocated, ratio[1]
 * Solo-D), and its shares by group kind (as loom_sim_result.group_cost) in groups of one job,
 * lone or not, and of three or more, and in grown pools. */
static void print_row(FILE *f, const char *mode, const char *pools, double total, double avg,
                      uint64_t moves, const double ratio[2], const double (*gc)[2], double grown)
{
        double alone = 0, three = 0, t = total > 0 ? total : INFINITY;
        for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++) {
                double v = (gc[k][0] + gc[k][1]) / t;
                alone += k <= 1 ? v : 0;
                three += k >= 3 ? v : 0;
        }
        fprintf(f, "%-11s %-6s %10.0f %9.1f %6llu %12.3f %9.3f %7.1f %7.1f %7.1f\n", mode, pools,
                total, avg, (unsigned long long)moves, ratio[0], ratio[1], 100 * alone, 100 * three,
                100 * grown / t);
}

void loom_sim_regroupings_print(FILE *f, const loom_sim_regrouping *r, const loom_sim_rung *ladder,
                                bool json)
{
        if (!json)
                fprintf(f,
                        "what the targets need: the informed oracle regrouping (priced: $%.0f/h "
                        "per moved job; %s; alone, 3+: the share of the bill in groups of one "
                        "job and of three or more; grown: in training pools larger than their "
                        "largest member's ask)\n%-11s %-6s %10s %9s %6s %12s %9s %7s %7s %7s\n",
                        LOOM_SIM_MOVE_PRICE,
                        r[0].restarts ? "each moved job loses its restart" : "moves are instant",
                        "regrouping", "pools", "total_$", "avg_$/h", "moves", "colocated/x",
                        "Solo-D/x", "alone%", "3+%", "grown%");
        double base[2] = {0, 0};
        for (int i = 0; i < LOOM_SIM_REGROUPINGS; i++) {
                const loom_sim_regrouping *x = &r[i];
                const char *pools = x->fixed_pools ? "fixed" : "free";
                if (x->measured && x->total_cost > 0) {
                        base[0] = x->colocated_ratio * x->total_cost;
                        base[1] = x->solo_ratio * x->total_cost;
                }
                if (json) {
                        fprintf(f,
                                "{\"regrouping\":\"%s\",\"pools\":\"%s\",\"restarts\":%s,"
                                "\"measured\":%s",
                                x->mode, pools, x->restarts ? "true" : "false",
                                x->measured ? "true" : "false");
                        if (x->measured) {
                                fprintf(f,
                                        ",\"total_cost\":%.2f,\"avg_cost_per_hour\":%.2f,"
                                        "\"moves\":%llu,\"colocated_ratio\":%.4f,"
                                        "\"solo_ratio\":%.4f,\"grown_pool_cost\":%.2f",
                                        x->total_cost, x->avg_cost_per_hour,
                                        (unsigned long long)x->moves, x->colocated_ratio,
                                        x->solo_ratio, x->grown_pool_cost);
                                print_groups_json(f, x->group_cost, x->lone_cost_by_slo);
                        } else {
                                fprintf(f, ",\"note\":\"%s\"", x->note);
                        }
                        fprintf(f, "}\n");
                } else if (!x->measured) {
                        fprintf(f, "%-11s %-6s not measured: %s\n", x->mode, pools, x->note);
                } else {
                        double ratio[2] = {x->colocated_ratio, x->solo_ratio};
                        print_row(f, x->mode, pools, x->total_cost, x->avg_cost_per_hour, x->moves,
                                  ratio, x->group_cost, x->grown_pool_cost);
                }
        }
        /* loom itself, for comparison: the ladder's last rung (its pools never grow) */
        const loom_sim_rung *m = ladder ? &ladder[LOOM_SIM_RUNGS - 1] : NULL;
        if (json || !m || !m->measured || !(m->total_cost > 0) || !(base[0] > 0))
                return;
        double ratio[2] = {base[0] / m->total_cost, base[1] / m->total_cost};
        print_row(f, "loom", "fixed", m->total_cost, m->avg_cost_per_hour, m->moves, ratio,
                  m->group_cost, 0);
}

int loom_sim_decompose_slicings(const loom_sim_cfg *cfg, const loom_sim_workload *w,
                                loom_sim_slicing out[LOOM_SIM_SLICINGS], loom_err *e)
{
        memset(out, 0, sizeof *out * LOOM_SIM_SLICINGS);
        loom_sim_cfg c = *cfg;
        c.record_series = c.record_gantt = false;
        loom_sim_result r;
        int rc = loom_sim_run(&c, w, LOOM_SIM_COLOCATED, &r, e);
        if (rc)
                return rc;
        double colocated = r.total_cost;
        loom_sim_result_free(&r);
        loom_sim_workload known;
        if (loom__sim_realised_profiles(w, 0.99, &known))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        for (int i = 0; i < LOOM_SIM_SLICINGS && !rc; i++) {
                loom_sim_slicing *x = &out[i];
                bool never = i >= 3;
                x->mode = (loom_sim_timeslice)(i % 3);
                x->regrouping = never ? "never" : "always";
                c.oracle_timeslice = x->mode;
                c.oracle_regroup = never ? LOOM_SIM_REGROUP_NEVER : LOOM_SIM_REGROUP_ALWAYS;
                c.oracle_fixed_pools = never;
                c.oracle_move_price = 0;
                if ((rc = loom_sim_run(&c, &known, LOOM_SIM_ORACLE, &r, e)))
                        break;
                x->measured = r.ran;
                snprintf(x->note, sizeof x->note, "%s", r.ran ? "" : r.note);
                x->total_cost = r.total_cost;
                x->avg_cost_per_hour = r.avg_cost_per_hour;
                x->timeslice_cost = r.timeslice_cost;
                x->colocated_ratio = r.ran && r.total_cost > 0 ? colocated / r.total_cost : 0;
                loom_sim_result_free(&r);
        }
        loom_sim_workload_free(&known);
        return rc;
}

void loom_sim_slicings_print(FILE *f, const loom_sim_slicing *s, bool json)
{
        if (!json)
                fprintf(f,
                        "what time-slicing could add: the informed oracle with time-sliced "
                        "groups of 2-3 jobs on one node set (tails: a tail overlaps the next "
                        "rollout; elastic: a training also runs beside the last tail)\n"
                        "%-11s %-6s %-8s %10s %9s %12s %7s\n",
                        "regrouping", "pools", "slicing", "total_$", "avg_$/h", "colocated/x",
                        "slice%");
        for (int i = 0; i < LOOM_SIM_SLICINGS; i++) {
                const loom_sim_slicing *x = &s[i];
                const char *pools = !strcmp(x->regrouping, "never") ? "fixed" : "free";
                const char *mode = loom_sim_timeslice_name(x->mode);
                if (json && x->measured)
                        fprintf(f,
                                "{\"slicing\":\"%s\",\"regrouping\":\"%s\",\"pools\":\"%s\","
                                "\"total_cost\":%.2f,\"avg_cost_per_hour\":%.2f,"
                                "\"colocated_ratio\":%.4f,\"timeslice_cost\":%.2f}\n",
                                mode, x->regrouping, pools, x->total_cost, x->avg_cost_per_hour,
                                x->colocated_ratio, x->timeslice_cost);
                else if (json)
                        fprintf(f,
                                "{\"slicing\":\"%s\",\"regrouping\":\"%s\",\"pools\":\"%s\","
                                "\"measured\":false,\"note\":\"%s\"}\n",
                                mode, x->regrouping, pools, x->note);
                else if (!x->measured)
                        fprintf(f, "%-11s %-6s %-8s not measured: %s\n", x->regrouping, pools, mode,
                                x->note);
                else
                        fprintf(f, "%-11s %-6s %-8s %10.0f %9.1f %12.3f %7.1f\n", x->regrouping,
                                pools, mode, x->total_cost, x->avg_cost_per_hour,
                                x->colocated_ratio,
                                x->total_cost > 0 ? 100 * x->timeslice_cost / x->total_cost : 0);
        }
}
