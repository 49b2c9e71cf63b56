/*
 * learn.c - learned profiles: admission that plans on what a job really does.
 *
 * Worst-case planning (every response at the token limit) is WEAVE's guarantee and its cost:
 * realised training runs at about half its worst case, so groups planned on it leave the
 * training pool idle. Under LOOM_ADMIT_P99 / P95 the driver reports each finished phase's
 * length (loom_sched_observe); once a job has learn_after observed iterations its group is
 * re-planned on the job's observed profile:
 *
 *   planned t_roll, t_train  = declared x quantile of the observed fractions (last
 *                              LOOM_LEARN_WINDOW iterations): what T_meta is simulated on;
 *   SLO budget               = slo x (declared t_roll x mean + declared t_train x mean + sync):
 *                              the solo iteration the job actually achieves, so the realised
 *                              slowdown, not only the profiled one, stays within the SLO.
 *
 * The re-plan is made only if the group's T_meta stays within every member's budget
 * afterwards; otherwise the job keeps its previous plan (and is retried after its next
 * iteration, when other members may have learned theirs) and observe returns 2: the group no
 * longer meets the job's real budget, and the driver should re-admit the job on its learned
 * profile (loom_job_info.learned_*), as it would a drifted one. A re-plan that shrinks the group's
 * cycle or load reopens it to new members: that is the slack it gives back. Jobs without
 * history are still planned on their declared worst case.
 */
#include <stdlib.h>

#include "internal.h"

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

/* The q-quantile (linear interpolation) and the mean of v[0..n), n >= 1. */
static void summarise(const double *v, int n, double q, double *quant, double *mean)
{
        double s[LOOM_LEARN_WINDOW];
        double sum = 0;
        for (int i = 0; i < n; i++) {
                s[i] = v[i];
                sum += v[i];
        }
        qsort(s, (size_t)n, sizeof *s, cmp_double);
        double pos = q * (n - 1);
        int i = (int)pos;
        *quant = i >= n - 1 ? s[n - 1] : s[i] + (pos - i) * (s[i + 1] - s[i]);
        *mean = sum / n;
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
        summarise(j->obs[0], j->n_obs[0] < LOOM_LEARN_WINDOW ? j->n_obs[0] : LOOM_LEARN_WINDOW, q,
                  &qr, &mr);
        summarise(j->obs[1], j->n_obs[1] < LOOM_LEARN_WINDOW ? j->n_obs[1] : LOOM_LEARN_WINDOW, q,
                  &qt, &mt);
        const loom_job_spec *d = &j->declared;
        loom_us roll = scaled(d->t_roll, qr), train = scaled(d->t_train, qt);
        double solo = (double)d->t_roll * mr + (double)d->t_train * mt + (double)d->t_sync;
        loom_us budget = (loom_us)(d->slo * solo);
        j->learned_roll = roll;
        j->learned_train = train;
        j->learned_budget = budget;
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
        j->learned = true;
        j->replans++;
        return 1;
}

int loom__observe(loom_sched *s, job *j, loom_phase phase, loom_us took)
{
        if (s->policy.admission == LOOM_ADMIT_WORST || phase == LOOM_PHASE_SYNC)
                return 0;
        const loom_job_spec *d = &j->declared;
        loom_us ref = phase == LOOM_PHASE_ROLLOUT
                          ? d->t_roll
                          : loom_group_train_time(d->t_train, d->train_gpus, j->group->train_gpus,
                                                  s->policy.train_scaling_efficiency);
        int p = phase == LOOM_PHASE_ROLLOUT ? 0 : 1;
        j->obs[p][j->n_obs[p] % LOOM_LEARN_WINDOW] = (double)took / (double)ref;
        j->n_obs[p]++;
        if (phase != LOOM_PHASE_TRAIN || j->n_obs[0] < s->policy.learn_after ||
            j->n_obs[1] < s->policy.learn_after)
                return 0;
        return replan(s, j);
}
