/*
 * workload.c - simulated jobs: WEAVE Table 6 phase profiles, SLO distributions, model sizes
 * and their Table 2 working sets, trace or Poisson arrivals, and the stochastic realisation of
 * every iteration (docs/sim.md).
 *
 * Common random numbers: the draws of job j's iteration i come from a stream keyed by
 * (seed, j, i) and are stored once in the workload, so every policy replays exactly the same
 * rollouts and trainings; policies differ only in how they place and order them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

/* ---- names -------------------------------------------------------------------------------- */

static const char *const profile_names[] = {"balanced", "rollout-heavy", "train-heavy", "mixed"};

const char *loom_sim_profile_name(loom_sim_profile p)
{
        return (unsigned)p < 4 ? profile_names[p] : "?";
}

int loom_sim_profile_parse(const char *s, loom_sim_profile *out)
{
        int i = loom__sim_name_find(profile_names, 4, s);
        if (i < 0)
                return LOOM_EINVAL;
        *out = (loom_sim_profile)i;
        return 0;
}

static const char *const policy_names[LOOM_SIM_NPOLICIES] = {
    "loom",   "loom-nomig", "solo",       "colocated",  "random",  "greedy",
    "oracle", "lb",         "random-slo", "greedy-slo", "regroup", "gavel", "colocated-slo"};

const char *loom_sim_policy_name(loom_sim_policy p)
{
        return (unsigned)p < LOOM_SIM_NPOLICIES ? policy_names[p] : "?";
}

static const char *const slice_names[] = {"off", "tails", "elastic"};

const char *loom_sim_timeslice_name(loom_sim_timeslice t)
{
        return (unsigned)t < 3 ? slice_names[t] : "?";
}

int loom_sim_timeslice_parse(const char *s, loom_sim_timeslice *out)
{
        int i = loom__sim_name_find(slice_names, 3, s);
        if (i < 0)
                return LOOM_EINVAL;
        *out = (loom_sim_timeslice)i;
        return 0;
}

int loom_sim_policy_parse(const char *s, loom_sim_policy *out)
{
        int i = loom__sim_name_find(policy_names, LOOM_SIM_NPOLICIES, s);
        if (i < 0)
                return LOOM_EINVAL;
        *out = (loom_sim_policy)i;
        return 0;
}

int loom_sim_policy_list_parse(const char *s, unsigned *mask, loom_err *e)
{
        *mask = 0;
        if (!strcmp(s, "all")) {
                *mask = (1u << LOOM_SIM_NPOLICIES) - 1;
                return 0;
        }
        char buf[256];
        snprintf(buf, sizeof buf, "%s", s);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
                loom_sim_policy p;
                if (loom_sim_policy_parse(tok, &p)) {
                        char known[256] = "";
                        for (int i = 0; i < LOOM_SIM_NPOLICIES; i++)
                                snprintf(known + strlen(known), sizeof known - strlen(known),
                                         "%s, ", policy_names[i]);
                        return loom_err_set(e, LOOM_EINVAL, "policy",
                                            "unknown policy '%s' (%sall)", tok, known);
                }
                *mask |= 1u << p;
        }
        if (!*mask)
                return loom_err_set(e, LOOM_EINVAL, "policy", "no policy given");
        return 0;
}

int loom_sim_slo_parse(const char *s, loom_sim_slo *out, loom_err *e)
{
        double a, b;
        char tail;
        if (sscanf(s, "uniform:%lf,%lf%c", &a, &b, &tail) == 2) {
                if (!(a >= 1.0) || !(b >= a) || b > 1000)
                        return loom_err_set(e, LOOM_EINVAL, "slo",
                                            "slo uniform:LO,HI needs 1 <= LO <= HI, got '%s'", s);
                *out = (loom_sim_slo){a, b};
                return 0;
        }
        if (sscanf(s, "fixed:%lf%c", &a, &tail) == 1) {
                if (!(a >= 1.0) || a > 1000)
                        return loom_err_set(e, LOOM_EINVAL, "slo",
                                            "slo fixed:X needs X >= 1, got '%s'", s);
                *out = (loom_sim_slo){a, a};
                return 0;
        }
        return loom_err_set(e, LOOM_EINVAL, "slo", "slo must be uniform:LO,HI or fixed:X, got '%s'",
                            s);
}

/* ---- defaults ----------------------------------------------------------------------------- */

void loom_sim_noise_default(loom_sim_noise *n)
{
        n->deterministic = false;
        n->jitter = 0;
        n->responses = 64;
        n->median = 0.25;
        n->sigma = 0.8;
        n->prompt = 0.25;
        n->tail_threshold = 0.8;
}

void loom_sim_workload_cfg_default(loom_sim_workload_cfg *c)
{
        memset(c, 0, sizeof *c);
        c->profile = LOOM_SIM_MIXED;
        c->slo = (loom_sim_slo){1.0, 2.0};
        c->poisson_per_hour = 0.5;
        c->poisson_jobs = 300;
        c->poisson_mean_duration_s = 12.5 * 3600;
        c->seed = 1;
        loom_sim_noise_default(&c->noise);
}

static const double model_sizes[4] = {3, 7, 14, 32};

static int size_index(double b)
{
        int best = 0;
        for (int i = 1; i < 4; i++)
                if (fabs(model_sizes[i] - b) < fabs(model_sizes[best] - b))
                        best = i;
        return best;
}

void loom_sim_cfg_default(loom_sim_cfg *c)
{
        memset(c, 0, sizeof *c);
        loom_cluster_cfg_default(&c->cluster);
        loom_policy_cfg_default(&c->policy);
        /* Switch latencies per model size (3/7/14/32B) on an 8-GPU node, read off the shape of
         * WEAVE Figure 4: a warm start reloads state from host DRAM in seconds, a cold start
         * rebuilds it from disk and re-initialises the control plane, up to 80 s. */
        static const double warm[4] = {1.0, 1.5, 2.5, 4.0};
        static const double cold[4] = {25.0, 35.0, 55.0, 80.0};
        memcpy(c->warm_s, warm, sizeof warm);
        memcpy(c->cold_s, cold, sizeof cold);
        c->job_switch = true;
        c->colocated_roll_factor = 1.0;
        c->tail_slowdown = 1.0;
        /* WEAVE §6.6 measures 197 s (7B) to 419 s (32B) to migrate and restart a job; 3B and
         * 14B interpolate linearly in model size. */
        static const double restart[4] = {161.5, 197.0, 259.2, 419.0};
        memcpy(c->restart_s, restart, sizeof restart);
        c->max_restarts = 3;
        c->drift_trigger = 1.05;
        c->drift_headroom = 1.15;
        c->regroup_period_h = 1.0;
        c->readmit_min_ratio = 10.0;
        /* Admission (and the oracle) plan with the largest warm switch, so a group that passes
         * the SLO check still passes it once every switch is paid. */
        c->policy.warm_switch = loom_us_from_s(warm[3]);
}

bool *loom_sim_switch(loom_sim_cfg *c, const char *name)
{
        return !strcmp(name, "job-switch") ? &c->job_switch : loom_policy_switch(&c->policy, name);
}

void loom_sim_progress_bar(void *ctx, const char *label, double frac)
{
        (void)ctx;
        int fill = frac < 0 ? 0 : (int)(frac * 40 + 0.5);
        if (frac < 0)
                fprintf(stderr, "\r%70s\r", "");
        else
                fprintf(stderr, "\r%-11s [%.*s%.*s] %3d%%", label, fill,
                        "########################################", 40 - fill,
                        "........................................", (int)(frac * 100 + 0.5));
        fflush(stderr);
}

loom_us loom_sim_warm(const loom_sim_cfg *c, double model_b)
{
        return c->sleep_phases ? 0 : loom_us_from_s(c->warm_s[size_index(model_b)]);
}

loom_us loom__sim_job_switch(const loom_sim_cfg *c, double model_b)
{
        return c->job_switch || c->sleep_phases ? loom_sim_warm(c, model_b) : c->policy.warm_switch;
}

loom_us loom_sim_cold(const loom_sim_cfg *c, double model_b)
{
        return c->sleep_phases ? 0 : loom_us_from_s(c->cold_s[size_index(model_b)]);
}

loom_us loom__sim_restart(const loom_sim_cfg *c, double model_b)
{
        return loom_us_from_s(c->restart_s[size_index(model_b)]);
}

loom_us loom_sim_job_solo_time(const loom_sim_job *j, const loom_sim_cfg *c)
{
        const loom_job_spec *s = &j->spec;
        /* At arrival the job's state is read from disk into its nodes' host memory (cold_s, in
         * the background); every phase then starts warm. Alone, the first rollout waits for
         * that load; the first training starts after it, its state already in memory. */
        loom_us t = loom_sim_cold(c, j->model_b) + 2 * loom_sim_warm(c, j->model_b);
        for (int64_t i = 0; i < s->iterations; i++)
                t += sim_phase_us(s->t_roll, j->roll[i]) + sim_phase_us(s->t_train, j->train[i]);
        /* No sync after the last training: the job is done. */
        return t + (s->iterations - 1) * s->t_sync;
}

/* ---- the stochastic model ----------------------------------------------------------------- */

/* k-th smallest (0-based) of v[0..n), reordering v. */
static float select_kth(float *v, int n, int k)
{
        int lo = 0, hi = n - 1;
        while (lo < hi) {
                float pivot = v[(lo + hi) / 2];
                int i = lo, j = hi;
                while (i <= j) {
                        while (v[i] < pivot)
                                i++;
                        while (v[j] > pivot)
                                j--;
                        if (i <= j) {
                                float t = v[i];
                                v[i++] = v[j];
                                v[j--] = t;
                        }
                }
                if (k <= j)
                        hi = j;
                else if (k >= i)
                        lo = i;
                else
                        break;
        }
        return v[k];
}

/* One iteration's draws: rollout fraction (longest response), fraction at which the tail
 * threshold is reached, training fraction (tokens processed). */
static void draw_iteration(const loom_sim_noise *n, sim_rng *r, float *roll, float *tailq,
                           float *train)
{
        if (n->deterministic) {
                *roll = *tailq = *train = 1.0f;
                if (n->jitter > 0) {
                        *roll = *tailq = (float)(1.0 + n->jitter * (2.0 * sim_rng_unit(r) - 1.0));
                        *train = (float)(1.0 + n->jitter * (2.0 * sim_rng_unit(r) - 1.0));
                }
                return;
        }
        float len[1024];
        int m = n->responses;
        double mu = log(n->median), sum = 0;
        float mx = 0;
        for (int i = 0; i < m; i += 2) {
                /* Box-Muller: two normals per pair of uniforms. */
                double u1 = 1.0 - sim_rng_unit(r), u2 = sim_rng_unit(r);
                double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
                double z[2] = {rad * cos(th), rad * sin(th)};
                for (int k = 0; k < 2 && i + k < m; k++) {
                        double x = exp(mu + n->sigma * z[k]);
                        float l = x >= 1.0 ? 1.0f : (float)x;
                        len[i + k] = l;
                        sum += l;
                        if (l > mx)
                                mx = l;
                }
        }
        int k = (int)ceil(n->tail_threshold * m) - 1;
        if (k < 0)
                k = 0;
        if (k > m - 1)
                k = m - 1;
        *roll = mx;
        *tailq = select_kth(len, m, k);
        *train = (float)((n->prompt + sum / m) / (n->prompt + 1.0));
}

void loom_sim_noise_expect(const loom_sim_noise *n, double *roll, double *train)
{
        if (n->deterministic) {
                *roll = *train = 1.0;
                return;
        }
        const int iters = 4096;
        double sr = 0, st = 0;
        for (int i = 0; i < iters; i++) {
                sim_rng r = sim_rng_key(UINT64_C(0xE5E5), 0, (uint64_t)i);
                float a, b, c;
                draw_iteration(n, &r, &a, &b, &c);
                sr += a;
                st += c;
        }
        *roll = sr / iters;
        *train = st / iters;
}

static int check_noise(const loom_sim_noise *n, loom_err *e)
{
        if (n->responses < 1 || n->responses > 1024)
                return loom_err_set(e, LOOM_EINVAL, "responses", "responses must be 1..1024");
        if (!(n->median > 0 && n->median <= 1) || !(n->sigma >= 0 && n->sigma <= 5) ||
            !(n->prompt >= 0 && n->prompt <= 100))
                return loom_err_set(e, LOOM_EINVAL, "noise",
                                    "noise: median in (0,1], sigma in [0,5], prompt in [0,100]");
        if (!(n->jitter >= 0 && n->jitter <= 0.5))
                return loom_err_set(e, LOOM_EINVAL, "jitter", "jitter must be in [0, 0.5]");
        if (n->jitter > 0 && !n->deterministic)
                return loom_err_set(e, LOOM_EINVAL, "jitter",
                                    "jitter is for deterministic runs (the stochastic runtime "
                                    "has its own noise)");
        if (!(n->tail_threshold > 0 && n->tail_threshold <= 1))
                return loom_err_set(e, LOOM_EINVAL, "tail_threshold",
                                    "tail_threshold must be in (0, 1]");
        return 0;
}

/* Allocate the realisation storage and draw every job's iterations. */
static int realise(loom_sim_workload *w, uint64_t seed, loom_err *e)
{
        size_t total = 0;
        for (int j = 0; j < w->n; j++)
                total += (size_t)w->jobs[j].spec.iterations;
        w->draws = malloc((total ? total : 1) * 3 * sizeof(float));
        if (!w->draws)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory for %zu iterations", total);
        float *p = w->draws;
        for (int j = 0; j < w->n; j++) {
                loom_sim_job *job = &w->jobs[j];
                size_t it = (size_t)job->spec.iterations;
                job->roll = p;
                job->tailq = p + it;
                job->train = p + 2 * it;
                p += 3 * it;
                for (size_t i = 0; i < it; i++) {
                        sim_rng r = sim_rng_key(seed, (uint64_t)j + 1, i);
                        draw_iteration(&w->noise, &r, &job->roll[i], &job->tailq[i],
                                       &job->train[i]);
                }
        }
        return 0;
}

/* WEAVE Table 6: Unif ranges in seconds, [profile][size] = {roll lo, roll hi, train lo, hi}. */
static const double table6[3][3][4] = {
    {{50, 100, 50, 100}, {100, 200, 100, 200}, {200, 300, 200, 300}},
    {{100, 200, 25, 50}, {200, 400, 50, 100}, {400, 600, 100, 200}},
    {{25, 50, 100, 200}, {50, 100, 200, 400}, {100, 200, 400, 600}},
};

/* Draw a job's phase profile, SLO and model size. Model size follows the Table 6 size class:
 * small jobs are 3B or 7B, medium 14B, large 32B (Table 2 gives their working sets). */
static void draw_job(const loom_sim_workload_cfg *wc, sim_rng *r, loom_job_spec *s, double *model_b)
{
        int prof = wc->profile == LOOM_SIM_MIXED ? (int)(sim_rng_unit(r) * 3) : (int)wc->profile;
        int size = (int)(sim_rng_unit(r) * 3);
        const double *t = table6[prof][size];
        s->t_roll = loom_us_from_s(sim_rng_uniform(r, t[0], t[1]));
        s->t_train = loom_us_from_s(sim_rng_uniform(r, t[2], t[3]));
        s->t_sync = loom_us_from_s(wc->sync_s);
        s->slo = wc->slo.lo == wc->slo.hi ? wc->slo.lo : sim_rng_uniform(r, wc->slo.lo, wc->slo.hi);
        double small = sim_rng_unit(r) < 0.5 ? 3 : 7;
        *model_b = size == 0 ? small : size == 1 ? 14 : 32;
        s->mem_rollout = loom_table2_mem_rollout(*model_b);
        s->mem_train = loom_table2_mem_train(*model_b);
}

static int round_gpus(int gpus, const loom_cluster_cfg *c)
{
        int node = c->gpus_per_node;
        return (gpus + node - 1) / node * node;
}

int loom_sim_workload_build(const loom_sim_workload_cfg *wc, const loom_sim_trace *t,
                            const loom_cluster_cfg *c, loom_sim_workload *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        int rc = check_noise(&wc->noise, e);
        if (rc)
                return rc;
        if (wc->slo.lo < 1.0 || wc->slo.hi < wc->slo.lo)
                return loom_err_set(e, LOOM_EINVAL, "slo", "slo range must have 1 <= lo <= hi");
        if ((unsigned)wc->drift > LOOM_SIM_DRIFT_MIXED)
                return loom_err_set(e, LOOM_EINVAL, "drift", "unknown drift setting");
        if (!(wc->mtbf_h >= 0 && wc->mtbf_h <= 1e6))
                return loom_err_set(e, LOOM_EINVAL, "mtbf_h", "mtbf_h must be in [0, 1e6] hours");
        if (wc->size_gpus < 0 || wc->sync_s < 0 || wc->sync_s > 1e5)
                return loom_err_set(e, LOOM_EINVAL, wc->size_gpus < 0 ? "size" : "sync",
                                    "size must be >= 0 GPUs and sync 0..1e5 s");
        int n = t ? t->n : wc->poisson_jobs;
        if (!t && (n < 1 || !(wc->poisson_per_hour > 0) || !(wc->poisson_mean_duration_s > 0)))
                return loom_err_set(e, LOOM_EINVAL, "arrivals",
                                    "poisson arrivals need a rate > 0 and --jobs >= 1");
        loom_sim_workload w = {.n = n, .noise = wc->noise};
        w.jobs = calloc((size_t)n, sizeof *w.jobs);
        if (!w.jobs)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        double er, et;
        loom_sim_noise_expect(&wc->noise, &er, &et);
        sim_rng arr = sim_rng_key(wc->seed, 0, 1);
        double clock = 0;
        for (int j = 0; j < n; j++) {
                loom_sim_job *job = &w.jobs[j];
                loom_job_spec *s = &job->spec;
                loom_job_spec_init(s);
                sim_rng r = sim_rng_key(wc->seed, (uint64_t)j + 1, UINT64_MAX);
                draw_job(wc, &r, s, &job->model_b);
                int gpus;
                double dur;
                if (t) {
                        snprintf(s->id, sizeof s->id, "%s", t->rows[j].id);
                        job->arrival = loom_us_from_s(t->rows[j].arrival_s);
                        dur = t->rows[j].duration_s;
                        gpus = t->rows[j].gpus;
                } else {
                        snprintf(s->id, sizeof s->id, "p%d", j);
                        clock += -log(1.0 - sim_rng_unit(&arr)) * 3600.0 / wc->poisson_per_hour;
                        job->arrival = loom_us_from_s(clock);
                        dur = -log(1.0 - sim_rng_unit(&r)) * wc->poisson_mean_duration_s;
                        if (dur < 600)
                                dur = 600;
                        gpus = c->gpus_per_node;
                }
                if (wc->size_gpus > 0)
                        gpus = wc->size_gpus;
                s->rollout_gpus = s->train_gpus = round_gpus(gpus, c);
                job->duration = loom_us_from_s(dur);
                double iter = loom_us_to_s(s->t_roll) * er + loom_us_to_s(s->t_train) * et +
                              loom_us_to_s(s->t_sync);
                s->iterations = (int64_t)llround(dur / iter);
                if (s->iterations < 1)
                        s->iterations = 1;
                if (t && wc->profiles) { /* the trace gives the job's profile */
                        const loom_sim_trace_profile *pr = &wc->profiles[j];
                        s->t_roll = loom_us_from_s(pr->t_roll_s);
                        s->t_train = loom_us_from_s(pr->t_train_s);
                        s->iterations = pr->iterations;
                        s->slo = pr->slo;
                }
                if ((rc = loom_job_spec_validate(s, c, e))) {
                        if (e) {
                                char msg[sizeof e->msg];
                                memcpy(msg, e->msg, sizeof msg);
                                msg[200] = 0;
                                snprintf(e->msg, sizeof e->msg, "job %d (%.64s): %.200s", j, s->id,
                                         msg);
                        }
                        free(w.jobs);
                        return rc;
                }
        }
        if ((rc = realise(&w, wc->seed, e))) {
                free(w.jobs);
                return rc;
        }
        loom__sim_drift_apply(&w, wc->drift, wc->mtbf_h, wc->seed);
        *out = w;
        return 0;
}

int loom_sim_workload_from_specs(const loom_job_spec *specs, const loom_us *arrivals, int n,
                                 const loom_sim_noise *noise, uint64_t seed,
                                 const loom_cluster_cfg *c, loom_sim_workload *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        int rc = check_noise(noise, e);
        if (rc)
                return rc;
        loom_sim_workload w = {.n = n, .noise = *noise};
        w.jobs = calloc((size_t)(n ? n : 1), sizeof *w.jobs);
        if (!w.jobs)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        for (int j = 0; j < n; j++) {
                loom_sim_job *job = &w.jobs[j];
                job->spec = specs[j];
                if (job->spec.iterations < 1)
                        job->spec.iterations = 1;
                job->arrival = arrivals ? arrivals[j] : 0;
                /* Model size from the rollout working set, for switch latencies. */
                job->model_b = 7;
                for (int k = 0; k < 4; k++)
                        if (job->spec.mem_rollout == loom_table2_mem_rollout(model_sizes[k]))
                                job->model_b = model_sizes[k];
                if ((rc = loom_job_spec_validate(&job->spec, c, e))) {
                        free(w.jobs);
                        return rc;
                }
                job->duration = loom_job_t_solo(&job->spec) * job->spec.iterations;
        }
        if ((rc = realise(&w, seed, e))) {
                free(w.jobs);
                return rc;
        }
        *out = w;
        return 0;
}

void loom_sim_workload_free(loom_sim_workload *w)
{
        if (!w)
                return;
        free(w->jobs);
        free(w->draws);
        memset(w, 0, sizeof *w);
}
