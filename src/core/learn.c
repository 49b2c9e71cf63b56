/*
 * learn.c - learned profiles: admission that plans on what a job really does.
 *
 * Worst-case planning (every response at the token limit) is WEAVE's guarantee and its cost:
 * realised training runs at about half its worst case, so groups planned on it leave the
 * training pool idle. Under LOOM_ADMIT_P99 / P95 the driver reports each finished phase's
 * length (loom_sched_observe); once a job has learn_after observed iterations its group is
 * re-planned on the job's observed profile:
 *
 *   planned t_roll, t_train  = declared x an upper confidence bound on the quantile of the
 *                              observed fractions (loom_quantile_ucb at LOOM_LEARN_CONFIDENCE,
 *                              over every iteration since admission), or the declared worst
 *                              case while there are too few iterations to bound it: what
 *                              T_meta is simulated on;
 *   SLO budget               = slo x (declared t_roll x mean + declared t_train x mean + sync):
 *                              the solo iteration the job actually achieves (mean of the last
 *                              LOOM_LEARN_WINDOW / 2 iterations), so the realised slowdown, not
 *                              only the profiled one, stays within the SLO.
 *
 * The sample quantile of a handful of iterations is no bound at all: the "p99" of three is
 * their maximum, below the true p99 with probability 0.99^3 = 97%. The order statistic used
 * instead is a bound at the stated confidence whatever the distribution, which needs at least
 * log(1 - conf) / log(q) samples (230 for p99, 45 for p95 at 90%); until then the job stays on
 * its declared worst case (or its largest observation, if that is worse). Each job's
 * observation array holds two halves: a ring of the last LOOM_LEARN_WINDOW / 2 fractions (the
 * mean) and the LOOM_LEARN_WINDOW / 2 largest fractions since admission, descending (the
 * bound); the rank the bound needs stays within them up to about a thousand iterations, and
 * past that the largest kept is used, which is larger and so still a bound.
 *
 * The re-plan is made only if the group's T_meta stays within every member's budget
 * afterwards; otherwise the job keeps its previous plan (and is retried after its next
 * iteration, when other members may have learned theirs) and observe returns 2: the group no
 * longer meets the job's real budget, and the driver should re-admit the job on its learned
 * profile (loom_job_info.learned_*), as it would a drifted one. A re-plan that shrinks the group's
 * cycle or load reopens it to new members: that is the slack it gives back. Jobs without
 * history are still planned on their declared worst case.
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

#define HALF (LOOM_LEARN_WINDOW / 2)

/* P(Binomial(n, p) >= r) for small r, by summing the terms below r. */
static double binom_tail(int64_t n, double p, int r)
{
        double term = exp((double)n * log1p(-p)), below = 0;
        for (int i = 0; i < r && i <= n; i++) {
                below += term;
                term *= (double)(n - i) / (double)(i + 1) * p / (1 - p);
        }
        double t = 1 - below;
        return t > 0 ? t : 0;
}

double loom_quantile_ucb(const double *top, int m, int64_t n, double q, double conf, bool *ok)
{
        *ok = false;
        if (m < 1 || n < 1)
                return m >= 1 ? top[0] : 0;
        if (binom_tail(n, 1 - q, 1) < conf)
                return top[0];
        int r = 1;
        while (r < m && binom_tail(n, 1 - q, r + 1) >= conf)
                r++;
        *ok = true;
        return top[r - 1];
}

/* Record fraction f: into the ring of the last HALF (mean) and the HALF largest (bound). */
static void remember(double *v, int64_t n_before, double f)
{
        v[n_before % HALF] = f;
        double *top = v + HALF;
        int kept = n_before < HALF ? (int)n_before : HALF;
        if (kept == HALF && f <= top[HALF - 1])
                return;
        int i = kept == HALF ? HALF - 1 : kept;
        for (; i > 0 && top[i - 1] < f; i--)
                top[i] = top[i - 1];
        top[i] = f;
}

/* The planned fraction of one phase (bound, or worst case) and the mean of the recent ones. */
static void summarise(const double *v, int n, double q, double *plan, double *mean)
{
        int recent = n < HALF ? n : HALF, kept = recent;
        double sum = 0;
        for (int i = 0; i < recent; i++)
                sum += v[i];
        *mean = sum / recent;
        bool ok;
        double ucb = loom_quantile_ucb(v + HALF, kept, n, q, LOOM_LEARN_CONFIDENCE, &ok);
        *plan = ok ? ucb : (v[HALF] > 1.0 ? v[HALF] : 1.0);
}

/* Put job j on plan (roll, train, budget), keeping its rollout nodes' loads consistent. */
static void set_plan(loom_sched *s, job *j, loom_us roll, loom_us train, loom_us budget)
{
        const group *g = j->group;
        for (int k = 0; k < j->n_rnodes; k++)
                s->rnodes[j->rnodes[k]]->load += j->rate * (roll - j->spec.t_roll);
        j->spec.t_roll = roll;
        j->spec.t_train = train;
        j->t_train_in = loom_group_train_time(train, j->spec.train_gpus, g->train_gpus,
                                              s->policy.train_scaling_efficiency);
        j->slo_budget = budget;
}

static loom_us scaled(loom_us t, double f)
{
        loom_us v = (loom_us)((double)t * f + 0.5);
        return v > 0 ? v : 1;
}

/* Re-plan j's group on j's observed profile if every member's budget still holds. */
static int replan(loom_sched *s, job *j)
{
        double q = s->policy.admission == LOOM_ADMIT_P99 ? 0.99 : 0.95;
        double qr, mr, qt, mt;
        summarise(j->ls->obs[0], j->ls->n_obs[0], q, &qr, &mr);
        summarise(j->ls->obs[1], j->ls->n_obs[1], q, &qt, &mt);
        const loom_job_spec *d = &j->ls->declared;
        loom_us roll = scaled(d->t_roll, qr), train = scaled(d->t_train, qt);
        double solo = (double)d->t_roll * mr + (double)d->t_train * mt + (double)d->t_sync;
        loom_us budget = (loom_us)(d->slo * solo);
        j->ls->learned_roll = roll;
        j->ls->learned_train = train;
        j->ls->learned_budget = budget;
        if (roll == j->spec.t_roll && train == j->spec.t_train && budget == j->slo_budget)
                return 0;
        loom_us old_roll = j->spec.t_roll, old_train = j->spec.t_train;
        group *g = j->group;
        set_plan(s, j, roll, train, budget);
        loom__group_refresh(s, g);
        /* Alone, a job runs exactly its solo iteration whatever the plan says. */
        if (g->t_meta > g->min_budget && g->n_members > 1) {
                /* The group no longer meets this job's budget once it is measured by what the
                 * job really achieves alone: keep its old plan's times, but hold it to the
                 * real budget, which closes the group to new members (none can fit), and tell
                 * the driver, which should re-admit the job on its learned profile. */
                set_plan(s, j, old_roll, old_train, budget);
                loom__group_refresh(s, g);
                return 2;
        }
        j->ls->learned = true;
        j->ls->replans++;
        return 1;
}

int loom__observe(loom_sched *s, job *j, loom_phase phase, loom_us took)
{
        if (s->policy.admission == LOOM_ADMIT_WORST || phase == LOOM_PHASE_SYNC)
                return 0;
        const loom_job_spec *d = &j->ls->declared;
        loom_us ref = phase == LOOM_PHASE_ROLLOUT
                          ? d->t_roll
                          : loom_group_train_time(d->t_train, d->train_gpus, j->group->train_gpus,
                                                  s->policy.train_scaling_efficiency);
        int p = phase == LOOM_PHASE_ROLLOUT ? 0 : 1;
        remember(j->ls->obs[p], j->ls->n_obs[p], (double)took / (double)ref);
        j->ls->n_obs[p]++;
        if (phase != LOOM_PHASE_TRAIN || j->ls->n_obs[0] < s->policy.learn_after ||
            j->ls->n_obs[1] < s->policy.learn_after)
                return 0;
        return replan(s, j);
}
