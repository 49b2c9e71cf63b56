/*
 * sha.c - the search drivers: nested successive halving over task groupings and GPU-count
 * splits with an evolutionary search per arm (HetRL, Algorithm 1), the plain EA, and the verl
 * and StreamRL baselines, all priced by the same cost model and counted in evaluations.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

#define POP 6               /* population of one arm's EA */
#define EA_POP 32           /* population of the plain EA */
#define SPLIT_ARMS 16       /* GPU-count splits tried per task grouping (level-2 arms) */
#define POLISH_GROUPINGS 48 /* groupings whose best plan gets the final hill climb */
#define LOCAL_STEPS 4       /* swaps of the locality search per offspring */
#define REGROUP_MAX 64      /* neighbouring groupings of the best plan (15 + 30 + 15 at most) */
#define REGROUP_CLIMBS 4    /* of them, the cheapest that get the hill climb */

typedef struct arm {
        int size[LOOM_PLAN_TASKS];
        plan_geno *pop;
        int npop;
        double best;
} arm;

typedef struct tg_arm {
        int rgs[LOOM_PLAN_TASKS];
        int ng;
        arm *splits;
        int nsplits; /* alive splits are the first nsplits after sorting */
        double best;
} tg_arm;

static int ceil_log2(int n)
{
        int k = 0;
        while ((1 << k) < n)
                k++;
        return k < 1 ? 1 : k;
}

static int tournament(uint64_t *rng, const plan_geno *pop, int n)
{
        int a = plan_rng_int(rng, n), b = plan_rng_int(rng, n);
        return pop[a].cost <= pop[b].cost ? a : b;
}

static int worst_of(const plan_geno *pop, int n)
{
        int w = 0;
        for (int i = 1; i < n; i++)
                if (pop[i].cost > pop[w].cost)
                        w = i;
        return w;
}

/* One evaluation's worth of an arm's EA. */
static int arm_step(plan_search *s, const tg_arm *tg, arm *a, uint64_t *rng)
{
        plan_geno child;
        if (!a->pop) {
                a->pop = malloc(sizeof *a->pop * POP);
                if (!a->pop)
                        return LOOM_ENOMEM;
        }
        if (a->npop < POP) {
                memcpy(child.rgs, tg->rgs, sizeof child.rgs);
                memcpy(child.size, a->size, sizeof child.size);
                plan_geno_random(&s->x, rng, &child);
                child.cost = plan_eval(s, &child, &s->scratch);
                a->pop[a->npop++] = child;
        } else {
                child = a->pop[tournament(rng, a->pop, a->npop)];
                plan_mutate(&s->x, rng, &child, true, false);
                plan_geno pheno = child;
                plan_local_search(&s->x, &pheno, LOCAL_STEPS);
                child.cost = plan_eval(s, &pheno, &s->scratch);
                int w = worst_of(a->pop, a->npop);
                if (child.cost < a->pop[w].cost)
                        a->pop[w] = child;
        }
        if (child.cost < a->best)
                a->best = child.cost;
        return 0;
}

/* Level 2 arms for a grouping of ng groups: every composition of N into ng parts when there are
 * few, else a seeded sample (the even split always among them). */
static int make_splits(plan_search *s, tg_arm *tg, uint64_t *rng, int cap)
{
        int n = s->x.n, ng = tg->ng;
        tg->splits = calloc(SPLIT_ARMS, sizeof *tg->splits);
        if (!tg->splits)
                return LOOM_ENOMEM;
        int k = 0;
        if (ng > n)
                return 0;
        /* the even split first */
        for (int g = 0; g < ng; g++)
                tg->splits[0].size[g] = n / ng + (g < n % ng);
        k = 1;
        for (int tries = 0; k < cap && tries < cap * 20; tries++) {
                int cuts[LOOM_PLAN_TASKS + 1];
                int sz[LOOM_PLAN_TASKS] = {0};
                if (ng == 1)
                        break;
                /* ng-1 distinct cut points in 1..n-1, sorted */
                int m = 0;
                while (m < ng - 1) {
                        int c = 1 + plan_rng_int(rng, n - 1), dup = 0;
                        for (int i = 0; i < m; i++)
                                dup |= cuts[i] == c;
                        if (!dup)
                                cuts[m++] = c;
                }
                for (int i = 1; i < m; i++)
                        for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
                                int t = cuts[j];
                                cuts[j] = cuts[j - 1];
                                cuts[j - 1] = t;
                        }
                int prev = 0;
                for (int g = 0; g < ng - 1; g++) {
                        sz[g] = cuts[g] - prev;
                        prev = cuts[g];
                }
                sz[ng - 1] = n - prev;
                int dup = 0;
                for (int i = 0; i < k && !dup; i++)
                        dup = !memcmp(tg->splits[i].size, sz, sizeof sz);
                if (!dup)
                        memcpy(tg->splits[k++].size, sz, sizeof sz);
        }
        for (int i = 0; i < k; i++)
                tg->splits[i].best = INFINITY;
        tg->nsplits = k;
        return 0;
}

static int cmp_arm(const void *a, const void *b)
{
        double x = ((const arm *)a)->best, y = ((const arm *)b)->best;
        return x < y ? -1 : x > y;
}

static int cmp_tg(const void *a, const void *b)
{
        double x = ((const tg_arm *)a)->best, y = ((const tg_arm *)b)->best;
        return x < y ? -1 : x > y;
}

static void free_tgs(tg_arm *tgs, int n)
{
        for (int i = 0; i < n; i++) {
                if (!tgs[i].splits)
                        continue;
                for (int k = 0; k < SPLIT_ARMS; k++)
                        free(tgs[i].splits[k].pop);
                free(tgs[i].splits);
        }
        free(tgs);
}

/* Sort and halve keeping pointers valid: arms stay in the array; the live ones come first. */
static void best_half_arms(arm *a, int *n)
{
        qsort(a, (size_t)*n, sizeof *a, cmp_arm);
        *n = (*n + 1) / 2;
}

static bool same_cost(double a, double b)
{
        return fabs(a - b) <= 1e-9 * fabs(b);
}

static int cmp_geno(const void *a, const void *b)
{
        double x = ((const plan_geno *)a)->cost, y = ((const plan_geno *)b)->cost;
        return x < y ? -1 : x > y;
}

/* Other groupings next to the best plan's: two of its groups merged (tasks and GPUs), one task
 * moved to another group, two tasks of different groups exchanged; the GPUs stay where they
 * are and the strategies are refitted (plan_regroup). The REGROUP_CLIMBS cheapest neighbours
 * get the hill climb; whenever that improves the best plan, start over from it. The halving
 * compares groupings with little budget each, so a grouping whose arms started badly can be
 * dropped although it is a neighbour of the winner and better. Returns the best cost after. */
static double regroup_descent(plan_search *s)
{
        const plan_ctx *x = &s->x;
        plan_geno *cand = malloc(sizeof *cand * REGROUP_MAX);
        if (!cand)
                return s->best_cost;
        bool again = true;
        while (again && !s->stop) {
                again = false;
                plan_geno base = s->best_geno;
                double before = s->best_cost;
                int ng = 0, ntask[LOOM_PLAN_TASKS] = {0}, nc = 0;
                for (int i = 0; i < x->nt; i++) {
                        ntask[base.rgs[i]]++;
                        if (base.rgs[i] + 1 > ng)
                                ng = base.rgs[i] + 1;
                }
                int lab[LOOM_PLAN_TASKS], into[LOOM_PLAN_TASKS];
                /* kind 0: merge a <- b; 1: task a to group b; 2: tasks a and b exchanged */
                for (int kind = 0; kind < 3; kind++)
                        for (int a = 0; a < (kind ? x->nt : ng); a++)
                                for (int b = kind == 1 ? 0 : a + 1;
                                     b < (kind == 2 ? x->nt : ng) && !s->stop; b++) {
                                        for (int i = 0; i < x->nt; i++)
                                                lab[i] = base.rgs[i];
                                        for (int k = 0; k < LOOM_PLAN_TASKS; k++)
                                                into[k] = -1;
                                        if (kind == 0) {
                                                for (int i = 0; i < x->nt; i++)
                                                        if (lab[i] == b)
                                                                lab[i] = a;
                                                into[b] = a;
                                        } else if (kind == 1) {
                                                if (b == base.rgs[a] || ntask[base.rgs[a]] < 2)
                                                        continue;
                                                lab[a] = b;
                                        } else {
                                                if (base.rgs[a] == base.rgs[b])
                                                        continue;
                                                lab[a] = base.rgs[b];
                                                lab[b] = base.rgs[a];
                                        }
                                        plan_geno g = base;
                                        if (nc < REGROUP_MAX && plan_regroup(s, &g, lab, into))
                                                cand[nc++] = g;
                                }
                qsort(cand, (size_t)nc, sizeof *cand, cmp_geno);
                /* drop neighbours that price like the best plan or like the previous one
                 * (tasks of the same cost exchanged) */
                int nu = 0;
                for (int c = 0; c < nc; c++)
                        if (!same_cost(cand[c].cost, before) &&
                            (nu == 0 || !same_cost(cand[c].cost, cand[nu - 1].cost)))
                                cand[nu++] = cand[c];
                nc = nu;
                for (int c = 0; c < nc && c < REGROUP_CLIMBS && !again && !s->stop; c++) {
                        plan_polish(s, &cand[c]);
                        again = s->best_cost < before;
                }
        }
        free(cand);
        return s->best_cost;
}

/* One run of Algorithm 1 plus the local searches over s->budget evaluations from s->evals;
 * clock: with a time budget and no evaluation budget, the local searches run until the clock
 * stops them. */
static int sha_round(plan_search *s, uint64_t seed, bool clock)
{
        int rgs[203][LOOM_PLAN_TASKS];
        int ntg = loom_plan_groupings(s->x.nt, rgs, 203);
        uint64_t rng = seed ^ 0x5eedULL;
        tg_arm *tgs = calloc((size_t)ntg, sizeof *tgs);
        if (!tgs)
                return LOOM_ENOMEM;
        /* Level-2 arms per grouping: as many as leave each arm of the first round at least
         * one evaluation per two GPUs (a genotype orders every GPU) and no fewer than a
         * population (up to SPLIT_ARMS). Arms that start with a handful of
         * random plans rank the groupings by noise; the EA of an arm still moves GPUs between
         * its groups, so fewer arms only means fewer starting splits. */
        int fit = 0;
        for (int i = 0; i < ntg; i++) {
                int ng = 0;
                for (int k = 0; k < s->x.nt; k++)
                        if (rgs[i][k] + 1 > ng)
                                ng = rgs[i][k] + 1;
                fit += ng <= s->x.n;
        }
        int64_t b0 = s->budget > 0 ? (s->budget - s->evals) * 3 / 5 : 0;
        int64_t bm0 = fit > 0 ? b0 / ((int64_t)fit * ceil_log2(fit)) : 0;
        int cap = SPLIT_ARMS, min_evals = s->x.n / 2 > POP ? s->x.n / 2 : POP;
        while (cap > 1 && bm0 / ((int64_t)cap * ceil_log2(cap)) < min_evals)
                cap /= 2;
        int live = 0;
        for (int i = 0; i < ntg; i++) {
                tg_arm *t = &tgs[live];
                memcpy(t->rgs, rgs[i], sizeof t->rgs);
                t->ng = 0;
                for (int k = 0; k < s->x.nt; k++)
                        if (rgs[i][k] + 1 > t->ng)
                                t->ng = rgs[i][k] + 1;
                t->best = INFINITY;
                if (t->ng > s->x.n)
                        continue; /* more groups than GPUs */
                if (make_splits(s, t, &rng, cap)) {
                        free_tgs(tgs, live + 1);
                        return LOOM_ENOMEM;
                }
                s->arms_splits += t->nsplits;
                live++;
        }
        int total_tg = live;
        int rounds = ceil_log2(total_tg);
        /* Successive halving spends 60% of the budget; hill climbs the rest. */
        int64_t full = s->budget, B = full > 0 ? (full - s->evals) * 3 / 5 : 0;
        s->budget = B > 0 ? s->evals + B : 0;
        for (int m = 0; m < rounds && live > 0 && !s->stop; m++) {
                int64_t bm = B / ((int64_t)live * rounds);
                for (int i = 0; i < live && !s->stop; i++) {
                        tg_arm *t = &tgs[i];
                        int ng0 = t->nsplits, inner = ceil_log2(ng0);
                        int n = ng0;
                        for (int r = 0; r < inner && !s->stop; r++) {
                                int64_t bmn = bm / ((int64_t)n * inner);
                                if (bmn < 1)
                                        bmn = 1;
                                for (int j = 0; j < n && !s->stop; j++)
                                        for (int64_t k = 0; k < bmn && !s->stop; k++)
                                                if (arm_step(s, t, &t->splits[j], &rng)) {
                                                        free_tgs(tgs, total_tg);
                                                        return LOOM_ENOMEM;
                                                }
                                if (n > 1)
                                        best_half_arms(t->splits, &n);
                        }
                        /* Across level-1 rounds the grouping keeps the better half of its splits.
                         */
                        qsort(t->splits, (size_t)ng0, sizeof *t->splits, cmp_arm);
                        t->nsplits = ng0 > 1 ? (ng0 + 1) / 2 : 1;
                        t->best = t->splits[0].best;
                }
                /* keep the better half of the groupings; free the rest */
                qsort(tgs, (size_t)live, sizeof *tgs, cmp_tg);
                live = live > 1 ? (live + 1) / 2 : 1;
        }
        /* The rest: hill climbs. With a time budget they run until the clock stops them (the
         * evaluation budget only sized the halving). */
        bool timed_out = s->stop && (full <= 0 || s->evals < s->budget);
        s->budget = full > 0 && !clock ? full : 0;
        s->stop = timed_out || (!clock && full > 0 && s->evals >= full);
        if (isfinite(s->best_cost) && !s->stop) {
                /* the best genotype of each of the best few groupings, best first */
                qsort(tgs, (size_t)total_tg, sizeof *tgs, cmp_tg);
                live = 1;
                double merged = INFINITY;
                for (int i = 0; i < total_tg && i < POLISH_GROUPINGS && !s->stop; i++)
                        for (int k = 0; k < 2 && k < tgs[i].nsplits && !s->stop; k++) {
                                const arm *a = &tgs[i].splits[k];
                                if (!a->pop || !(a->best < PLAN_INFEASIBLE))
                                        continue;
                                int b = 0;
                                for (int j = 1; j < a->npop; j++)
                                        if (a->pop[j].cost < a->pop[b].cost)
                                                b = j;
                                plan_geno g = a->pop[b];
                                plan_polish(s, &g);
                                if (s->best_cost < merged)
                                        merged = regroup_descent(s);
                        }
                /* Iterated local search on what is left: kick the best plan with a few
                 * mutations and climb again. */
                while (!s->stop && (full > 0 || clock)) {
                        plan_geno g = s->best_geno;
                        int kicks = 1 + plan_rng_int(&rng, 3);
                        for (int k = 0; k < kicks; k++)
                                plan_mutate(&s->x, &rng, &g, true, false);
                        plan_polish(s, &g);
                }
        }
        if (live > 0 && full > 0 && !clock && !s->stop) {
                qsort(tgs, (size_t)live, sizeof *tgs, cmp_tg);
                tg_arm *t = &tgs[0];
                while (!s->stop && (s->budget <= 0 || s->evals < s->budget))
                        if (arm_step(s, t, &t->splits[0], &rng))
                                break;
        }
        s->arms_groupings = total_tg;

        free_tgs(tgs, total_tg);
        return 0;
}

/* Anytime: an evaluation budget above ANYTIME_B0 (or opts.round_evals), and any time budget,
 * runs as successive independent rounds of the above, each of ANYTIME_B0 evaluations with its
 * own seed (round 0 uses the run's seed, so it is the single run of ANYTIME_B0), and keeps the
 * best plan. Which grouping one run settles on is a lottery of its halving schedule; more
 * rounds are more draws. Each round searches on its own (its regroup descent and iterated
 * local search start from its own best, not an earlier round's, which would pull every round
 * into the same basin). The rounds' sizes do not depend on the total, so a run of N
 * evaluations is a prefix of a run of N' > N (the last round is cut, not shrunk): above
 * ANYTIME_B0 a larger budget never ends worse, and a time budget ends where an evaluation
 * budget of the same count would. */
#define ANYTIME_B0 3000000

int plan_run_sha_ea(plan_search *s)
{
        bool timed = s->o->time_s > 0 && s->o->now && s->o->budget <= 0;
        int64_t total = timed ? 0 : s->budget;
        int64_t b0 = s->o->round_evals > 0 ? s->o->round_evals : ANYTIME_B0;
        if (!timed && total <= b0)
                return sha_round(s, s->o->seed, s->o->time_s > 0 && s->o->now);
        s->hard = total;
        int arms = 0;
        for (int k = 0; !s->stop; k++) {
                uint64_t round = (uint64_t)(k - 1) * 0x9e3779b97f4a7c15ULL; /* its k-th output */
                uint64_t seed = k > 0 ? s->o->seed ^ loom_splitmix64(&round) : s->o->seed;
                s->budget = s->evals + b0;
                double keep_cost = s->best_cost;
                loom_plan keep = s->best;
                plan_geno keep_geno = s->best_geno;
                s->kept = keep_cost;
                s->best_cost = INFINITY;
                int rc = sha_round(s, seed, false);
                if (rc)
                        return rc;
                if (!(s->best_cost < keep_cost)) {
                        s->best_cost = keep_cost;
                        s->best = keep;
                        s->best_geno = keep_geno;
                }
                if (!arms)
                        arms = s->arms_splits;
                s->arms_splits = arms;
                s->stop = (total > 0 && s->evals >= total) ||
                          (timed && s->o->now(s->o->now_ctx) - s->t0 >= s->o->time_s);
        }
        return 0;
}

int plan_run_ea(plan_search *s)
{
        uint64_t rng = s->o->seed ^ 0xea5eedULL;
        int rgs[203][LOOM_PLAN_TASKS];
        int ntg = loom_plan_groupings(s->x.nt, rgs, 203);
        plan_geno *pop = malloc(sizeof *pop * EA_POP);
        if (!pop)
                return LOOM_ENOMEM;
        int n = 0;
        while (!s->stop) {
                plan_geno child;
                if (n < EA_POP) {
                        memset(&child, 0, sizeof child);
                        memcpy(child.rgs, rgs[plan_rng_int(&rng, ntg)], sizeof child.rgs);
                        for (int k = 0; k < LOOM_PLAN_TASKS; k++)
                                child.size[k] = 0;
                        if (!plan_canonical(&s->x, &child, &rng))
                                continue;
                        plan_geno_random(&s->x, &rng, &child);
                        child.cost = plan_eval(s, &child, &s->scratch);
                        pop[n++] = child;
                        continue;
                }
                child = pop[tournament(&rng, pop, n)];
                plan_mutate(&s->x, &rng, &child, false, true);
                child.cost = plan_eval(s, &child, &s->scratch);
                int w = worst_of(pop, n);
                if (child.cost < pop[w].cost)
                        pop[w] = child;
        }
        free(pop);
        return 0;
}

/* ---- baselines ---- */

/* verl: every task on one pool of all GPUs in file order (sync), or actor generation on the
 * first half and the rest on the second half (async); one (dp, pp, tp) for every task, using
 * every GPU of its pool; the best such strategy. */
int plan_run_verl(plan_search *s)
{
        const plan_ctx *x = &s->x;
        bool split = x->w->async && x->n >= 2;
        plan_geno g;
        memset(&g, 0, sizeof g);
        for (int i = 0; i < x->nt; i++)
                g.rgs[i] = split && i > 0 ? 1 : 0;
        g.size[0] = split ? x->n / 2 : x->n;
        g.size[1] = split ? x->n - x->n / 2 : 0;
        for (int i = 0; i < x->n; i++)
                g.perm[i] = (uint8_t)i;
        int size0 = g.size[0], size1 = split ? g.size[1] : size0;
        int ns = plan_n_strats(x, size0);
        for (int a = 0; a < ns && !s->stop; a++) {
                loom_plan_strategy st = x->strats[x->strat_off[size0] + a];
                if (st.dp * st.pp * st.tp != size0)
                        continue;
                int b = -1; /* the same strategy on the other pool, if it fits there */
                int ns1 = plan_n_strats(x, size1);
                for (int k = 0; k < ns1; k++) {
                        loom_plan_strategy u = x->strats[x->strat_off[size1] + k];
                        if (u.dp * u.pp * u.tp == size1 && u.pp == st.pp && u.tp == st.tp)
                                b = k;
                }
                if (b < 0)
                        continue;
                for (int i = 0; i < x->nt; i++)
                        g.strat[i] = (uint16_t)(g.rgs[i] == 0 ? a : b);
                plan_eval(s, &g, &s->scratch);
        }
        return 0;
}

/* StreamRL: actor generation on all GPUs of one (type, region) class, every other task on all
 * GPUs of another class; each pool's strategy uses all of its GPUs; the best pair. */
int plan_run_streamrl(plan_search *s)
{
        const plan_ctx *x = &s->x;
        const loom_plan_cluster *c = x->c;
        int cls[LOOM_PLAN_MAX_DEV], ncls = 0, key[LOOM_PLAN_MAX_DEV];
        for (int i = 0; i < x->n; i++) {
                int k = c->dev[i].type * LOOM_PLAN_MAX_REGIONS + c->dev[i].region, f = -1;
                for (int j = 0; j < ncls; j++)
                        if (key[j] == k)
                                f = j;
                if (f < 0) {
                        key[ncls] = k;
                        f = ncls++;
                }
                cls[i] = f;
        }
        /* The cost model needs every GPU in some group; GPUs of neither class form an idle
         * third group with no task (a group of its own, so it runs nothing). */
        for (int a = 0; a < ncls && !s->stop; a++)
                for (int b = 0; b < ncls && !s->stop; b++) {
                        if (a == b)
                                continue;
                        plan_geno g;
                        memset(&g, 0, sizeof g);
                        int p = 0;
                        for (int i = 0; i < x->n; i++)
                                if (cls[i] == a)
                                        g.perm[p++] = (uint8_t)i;
                        g.size[0] = p;
                        for (int i = 0; i < x->n; i++)
                                if (cls[i] == b)
                                        g.perm[p++] = (uint8_t)i;
                        g.size[1] = p - g.size[0];
                        for (int i = 0; i < x->n; i++)
                                if (cls[i] != a && cls[i] != b)
                                        g.perm[p++] = (uint8_t)i;
                        for (int i = 0; i < x->nt; i++)
                                g.rgs[i] = i > 0;
                        int n0 = g.size[0], n1 = g.size[1];
                        for (int u = 0; u < plan_n_strats(x, n0) && !s->stop; u++) {
                                loom_plan_strategy su = x->strats[x->strat_off[n0] + u];
                                if (su.dp * su.pp * su.tp != n0)
                                        continue;
                                for (int v = 0; v < plan_n_strats(x, n1) && !s->stop; v++) {
                                        loom_plan_strategy sv = x->strats[x->strat_off[n1] + v];
                                        if (sv.dp * sv.pp * sv.tp != n1)
                                                continue;
                                        for (int i = 0; i < x->nt; i++)
                                                g.strat[i] = (uint16_t)(i == 0 ? u : v);
                                        plan_eval(s, &g, &s->scratch);
                                }
                        }
                }
        return 0;
}
