/*
 * learn.c - learned profiles: admission that plans on what a job really does.
 *
 * Worst-case planning (every response at the token limit) is WEAVE's guarantee and its cost:
 * realised training runs at about half its worst case, so groups planned on it leave the
 * training pool idle. Under LOOM_ADMIT_P99 / P95 the driver reports each finished phase's
 * length (loom_sched_observe); once a job has learn_after observed iterations its group is
 * re-planned on the job's observed profile:
 *
 *   planned t_roll, t_train  = declared x an upper confidence bound (at LOOM_LEARN_CONFIDENCE)
 *                              on the quantile of the observed fractions: what T_meta is
 *                              simulated on;
 *   SLO budget               = slo x (declared t_roll x mean + declared t_train x mean + sync):
 *                              the solo iteration the job actually achieves (mean of the last
 *                              LOOM_LEARN_WINDOW / 2 iterations), so the realised slowdown, not
 *                              only the profiled one, stays within the SLO.
 *
 * The sample quantile of a handful of iterations is no bound at all: the "p99" of three is
 * their maximum, below the true p99 with probability 0.99^3 = 97%. Two bounds are offered
 * (policy.learn_bound):
 *
 *   normal (default)  mean + k(n) s of the last n <= LOOM_LEARN_WINDOW / 2 fractions, k the
 *                     one-sided normal tolerance factor (loom_normal_tolerance_k: 7.34 at
 *                     n = 3, 3.53 at n = 10 for a p99). A phase's length is a sum over many
 *                     responses (training processes every token; a rollout's length is set by
 *                     its token total or, at the limit, by the declared worst case itself), so
 *                     the central limit theorem makes it close to normal; a job is re-planned
 *                     from its second observed iteration on (or learn_after, if later). Never
 *                     above the declared worst case or the largest fraction seen, if larger.
 *   order             the distribution-free order statistic (loom_quantile_ucb), a bound
 *                     whatever the distribution, which needs log(1 - conf) / log(q) samples
 *                     (230 for p99, 45 for p95 at 90%); until then the job stays on its
 *                     declared worst case (or its largest observation, if that is worse).
 *
 * Each job's observation array holds two halves: a ring of the last LOOM_LEARN_WINDOW / 2
 * fractions (the mean, the normal bound) and the LOOM_LEARN_WINDOW / 2 largest fractions since
 * admission, descending (the order bound); the rank the order bound needs stays within them up
 * to about a thousand iterations, and past that the largest kept is used, which is larger and
 * so still a bound.
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
#include <string.h>

#include "internal.h"

#define HALF (LOOM_LEARN_WINDOW / 2)

/* k(n) for n = 2 .. 10 at 90% confidence, from the noncentral t distribution (the unit test
 * recomputes each by numerical integration; n = 3 .. 10 match the published tables). */
static const double tol_k[2][9] = {
    {13.0909, 5.3115, 3.9566, 3.3998, 3.0919, 2.8938, 2.7543, 2.6499, 2.5684}, /* q = 0.95 */
    {18.5002, 7.3404, 5.4382, 4.6660, 4.2425, 3.9720, 3.7825, 3.6414, 3.5317}, /* q = 0.99 */
};

double loom_normal_tolerance_k(int n, double q)
{
        int row = q == 0.95 ? 0 : q == 0.99 ? 1 : -1;
        if (row < 0 || n < 2)
                return INFINITY;
        if (n <= HALF)
                return tol_k[row][n - 2];
        /* Natrella's approximation, which falls short of the quantile by about 0.25 / n
         * (2.5% at n = 10, 0.2% at 100): raised by 0.3 / n it stays above it (the unit test
         * integrates the quantile from 11 to 200) */
        const double zp = row ? 2.3263479 : 1.6448536, zg = 1.2815516; /* z_q, z_conf */
        double a = 1 - zg * zg / (2.0 * (n - 1)), b = zp * zp - zg * zg / n;
        return (zp + sqrt(zp * zp - a * b)) / a * (1 + 0.3 / n);
}

const char *loom_learn_bound_name(loom_learn_bound b)
{
        return b == LOOM_LEARN_NORMAL ? "normal" : b == LOOM_LEARN_ORDER ? "order" : "?";
}

int loom_learn_bound_parse(const char *str, loom_learn_bound *out)
{
        for (int b = LOOM_LEARN_NORMAL; b <= LOOM_LEARN_ORDER; b++)
                if (!strcmp(str, loom_learn_bound_name((loom_learn_bound)b))) {
                        *out = (loom_learn_bound)b;
                        return 0;
                }
        return LOOM_EINVAL;
}

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

/* The mean of the recent rollouts that ran on rollout GPUs (colo[] marks the others), or -1
 * when none of the last HALF did. */
static double solo_roll_mean(const learn_state *ls)
{
        int recent = ls->n_obs[0] < HALF ? ls->n_obs[0] : HALF, n = 0;
        double sum = 0;
        for (int i = 0; i < recent; i++)
                if (!ls->colo[i]) {
                        sum += ls->obs[0][i];
                        n++;
                }
        return n ? sum / n : -1;
}

/* The fleet's mean rollout fraction (the prior), or 1 (the declared time) without one. */
static double prior_roll(const loom_sched *s)
{
        int n = s->n_prior < LOOM_PRIOR_JOBS ? (int)s->n_prior : LOOM_PRIOR_JOBS;
        double f = 0;
        for (int i = 0; i < n; i++)
                f += s->prior[i][0] / n;
        return n ? f : 1.0;
}

/* The mean of the last HALF fractions of one phase, or -1 with fewer than n_min. */
static double recent_mean(const double *v, int n, int n_min)
{
        int recent = n < HALF ? n : HALF;
        if (n < n_min || recent < 1)
                return -1;
        double sum = 0;
        for (int i = 0; i < recent; i++)
                sum += v[i];
        return sum / recent;
}

/* The planned fraction of one phase (bound, or worst case) and the mean of the recent ones. */
static void summarise(const double *v, int n, double q, loom_learn_bound how, double *plan,
                      double *mean)
{
        int recent = n < HALF ? n : HALF;
        *mean = recent_mean(v, n, 1);
        double worst = v[HALF] > 1.0 ? v[HALF] : 1.0;
        if (how == LOOM_LEARN_NORMAL) {
                double ss = 0;
                for (int i = 0; i < recent; i++)
                        ss += (v[i] - *mean) * (v[i] - *mean);
                double k = loom_normal_tolerance_k(recent, q);
                double b = recent >= 2 ? *mean + k * sqrt(ss / (recent - 1)) : INFINITY;
                *plan = b < worst ? b : worst;
                return;
        }
        bool ok;
        double ucb = loom_quantile_ucb(v + HALF, recent, n, q, LOOM_LEARN_CONFIDENCE, &ok);
        *plan = ok ? ucb : worst;
}

/* Put job j on plan (roll, train, budget, head), keeping its rollout nodes' loads consistent. */
static void set_plan(loom_sched *s, job *j, loom_us roll, loom_us train, loom_us budget,
                     loom_us head)
{
        const group *g = j->group;
        loom_us was[LOOM_MAX_JOB_NODES];
        for (int k = 0; k < j->n_rnodes; k++)
                was[k] = loom__roll_occ(s, &j->spec, k);
        j->spec.t_roll = roll;
        j->spec.t_head = head;
        for (int k = 0; k < j->n_rnodes; k++)
                s->rnodes[j->rnodes[k]]->load +=
                    j->rate * (loom__roll_occ(s, &j->spec, k) - was[k]);
        j->spec.t_train = train;
        j->t_train_in = loom__train_in(s, g, j);
        j->slo_budget = budget;
}

static loom_us scaled(loom_us t, double f)
{
        loom_us v = (loom_us)((double)t * f + 0.5);
        return v > 0 ? v : 1;
}

void loom__learn_exit(loom_sched *s, const job *j)
{
        if (!j->ls)
                return;
        double r = recent_mean(j->ls->obs[0], j->ls->n_obs[0], s->policy.learn_after);
        double t = recent_mean(j->ls->obs[1], j->ls->n_obs[1], s->policy.learn_after);
        if (r >= 0)
                r = solo_roll_mean(j->ls); /* on rollout GPUs only: the prior is of solo runs */
        if (r < 0 || t < 0)
                return;
        double *p = s->prior[s->n_prior++ % LOOM_PRIOR_JOBS];
        p[0] = r;
        p[1] = t;
}

/* A solo iteration of spec with its phases at fractions fr, ft of their declared times. */
static double solo_at(const loom_job_spec *spec, double fr, double ft)
{
        return (double)spec->t_roll * fr + (double)spec->t_train * ft + (double)spec->t_sync;
}

bool loom__learn_prior(const loom_sched *s, loom_job_spec *spec, loom_job_spec *likely)
{
        if (s->policy.admission == LOOM_ADMIT_WORST || spec->t_solo_ref > 0 || !s->n_prior)
                return false;
        int n = s->n_prior < LOOM_PRIOR_JOBS ? (int)s->n_prior : LOOM_PRIOR_JOBS;
        double f[2] = {0, 0};
        for (int i = 0; i < n; i++)
                for (int p = 0; p < 2; p++)
                        f[p] += s->prior[i][p] / n;
        *likely = *spec;
        likely->t_roll = scaled(spec->t_roll, f[0]);
        likely->t_train = scaled(spec->t_train, f[1]);
        double ref_d = solo_at(spec, f[0], f[1]);
        /* a job too short for what it learns to re-plan or move it: the shortest solo iteration
         * the prior's jobs give it, so that it keeps its SLO however light it turns out */
        bool short_job = spec->iterations > 0 && spec->iterations <= LOOM_PRIOR_SHORT;
        for (int i = 0; short_job && i < n; i++) {
                double v = solo_at(spec, s->prior[i][0], s->prior[i][1]);
                ref_d = v < ref_d ? v : ref_d;
        }
        loom_us ref = (loom_us)ref_d;
        if (ref >= 1 && ref < loom_job_t_solo(spec))
                spec->t_solo_ref = ref;
        return true;
}

/*
 * The head j is planned on (loom_job_spec.t_head): the same bound as its phases on the heads
 * its progress reports measured (fractions of its declared rollout, at least two of them),
 * never past its planned rollout `roll`; else what it declared (0: none).
 */
static loom_us learned_head(const loom_sched *s, const job *j, double q, loom_us roll)
{
        const learn_state *ls = j->ls;
        loom_us head = ls->declared.t_head;
        int n = ls->n_obs[2] < LOOM_LEARN_WINDOW ? ls->n_obs[2] : LOOM_LEARN_WINDOW;
        if (n >= 2) {
                double mean = 0, ss = 0, top = 0;
                for (int i = 0; i < n; i++) {
                        mean += ls->obs[2][i] / n;
                        top = ls->obs[2][i] > top ? ls->obs[2][i] : top;
                }
                for (int i = 0; i < n; i++)
                        ss += (ls->obs[2][i] - mean) * (ls->obs[2][i] - mean);
                double b = mean + loom_normal_tolerance_k(n, q) * sqrt(ss / (n - 1));
                /* a declared head (or the one learned before a re-admission) holds until the
                 * bound comes below it, unless heads were seen past it */
                double d = (double)ls->declared.t_head / (double)ls->declared.t_roll;
                if (d > 0 && b > (top > d ? top : d))
                        b = top > d ? top : d;
                head = scaled(ls->declared.t_roll, b);
        }
        return head < roll ? head : roll;
}

/* Re-plan j's group on j's observed profile if every member's budget still holds. */
static int replan(loom_sched *s, job *j)
{
        double q = s->policy.admission == LOOM_ADMIT_P99 ? 0.99 : 0.95;
        double qr, mr, qt, mt;
        summarise(j->ls->obs[0], j->ls->n_obs[0], q, s->policy.learn_bound, &qr, &mr);
        summarise(j->ls->obs[1], j->ls->n_obs[1], q, s->policy.learn_bound, &qt, &mt);
        const loom_job_spec *d = &j->ls->declared;
        loom_us roll = scaled(d->t_roll, qr), train = scaled(d->t_train, qt);
        /* The SLO is against the job's solo (disaggregated) iteration: its rollouts on rollout
         * GPUs. A lone member's rollouts run on its training GPUs, slower by the colocation
         * factor; counting them would grow its budget with its own colocation slowdown. With
         * none on rollout GPUs yet, the lesser of its own rollouts and the fleet's prior stands
         * in (never more than what it was seen to take). */
        double sr = solo_roll_mean(j->ls);
        loom_us budget = (loom_us)(d->slo * solo_at(d, sr >= 0 ? sr : fmin(mr, prior_roll(s)), mt));
        /* policy.slo_cap: a job admitted with its SLO relaxed is held to its SLO again where
         * its lone iteration on its mean phases fits it, else to that lone iteration; and so
         * is a member alone whose SLO its learned lone iteration no longer fits, where keeping
         * it (its group's rollout nodes) costs more than the cap allows */
        if (j->slo_relaxed || (s->policy.slo_cap && j->group->n_members == 1)) {
                const group *g1 = j->group;
                int t =
                    g1->n_members == 1 ? g1->n_tnodes : d->train_gpus / s->cluster.gpus_per_node;
                loom_job_spec m = *d;
                m.t_roll = scaled(d->t_roll, mr);
                m.t_train = scaled(d->t_train, mt);
                loom_us lone = loom__lone_iteration(s, &m, t);
                double pt = t * s->price[LOOM_POOL_TRAIN];
                loom_us tt =
                    loom_group_train_time(m.t_train, m.train_gpus, t * s->cluster.gpus_per_node,
                                          s->policy.train_scaling_efficiency);
                /* kept: its group's rollout nodes beside its training nodes, no switches */
                double keep = (g1->n_rnodes * s->price[LOOM_POOL_ROLLOUT] + pt) *
                              (double)(m.t_roll + tt + m.t_sync);
                if (lone <= budget)
                        j->slo_relaxed = false;
                else if (j->slo_relaxed || loom__slo_too_dear(s, keep, pt * (double)lone)) {
                        j->slo_relaxed = true;
                        budget = lone;
                }
        }
        j->ls->learned_roll = roll;
        j->ls->learned_train = train;
        j->ls->learned_budget = budget;
        j->ls->mean_roll = scaled(d->t_roll, mr);
        j->ls->mean_train = scaled(d->t_train, mt);
        loom_us head = learned_head(s, j, q, roll);
        j->ls->learned_head = head;
        if (roll == j->spec.t_roll && train == j->spec.t_train && budget == j->slo_budget &&
            head == j->spec.t_head)
                return 0;
        loom_us old_roll = j->spec.t_roll, old_train = j->spec.t_train, old_head = j->spec.t_head;
        group *g = j->group;
        set_plan(s, j, roll, train, budget, head);
        loom__group_refresh(s, g);
        /* Alone, a job runs exactly its solo iteration whatever the plan says. */
        if (g->t_meta > g->min_budget && g->n_members > 1) {
                /* The group no longer meets this job's budget once it is measured by what the
                 * job really achieves alone: keep its old plan's times, but hold it to the
                 * real budget, which closes the group to new members (none can fit), and tell
                 * the driver, which should re-admit the job on its learned profile. */
                set_plan(s, j, old_roll, old_train, budget, old_head);
                loom__group_refresh(s, g);
                return 2;
        }
        j->ls->learned = true;
        j->ls->replans++;
        if (j->slo_relaxed)
                loom__group_refresh(s, g); /* learned, its group takes joiners (policy.slo_cap) */
        return 1;
}

int loom__observe(loom_sched *s, job *j, loom_phase phase, loom_us took, bool colo, int gpus)
{
        if (s->policy.admission == LOOM_ADMIT_WORST || phase == LOOM_PHASE_SYNC)
                return 0;
        const loom_job_spec *d = &j->ls->declared;
        loom_us ref = phase == LOOM_PHASE_ROLLOUT
                          ? d->t_roll
                          : loom_group_train_time(d->t_train, d->train_gpus,
                                                  gpus > 0 ? gpus : j->group->train_gpus,
                                                  s->policy.train_scaling_efficiency);
        int p = phase == LOOM_PHASE_ROLLOUT ? 0 : 1;
        if (p == 0)
                j->ls->colo[j->ls->n_obs[0] % HALF] = colo;
        remember(j->ls->obs[p], j->ls->n_obs[p], (double)took / (double)ref);
        j->ls->n_obs[p]++;
        if (p == 0 && j->head_took > 0) { /* its head, from its progress report */
                loom_us h = j->head_took < took ? j->head_took : took;
                j->ls->obs[2][j->ls->n_obs[2]++ % LOOM_LEARN_WINDOW] = (double)h / (double)ref;
                j->head_took = 0;
        }
        if (phase != LOOM_PHASE_TRAIN || j->ls->n_obs[0] < s->policy.learn_after ||
            j->ls->n_obs[1] < s->policy.learn_after)
                return 0;
        int rc = replan(s, j);
        return rc != 2 && loom__move_pays(s, j) ? 3 : rc;
}
