/*
 * oracle.c - the regrouping optimum (WEAVE §6.5 "Opt"), by exact search.
 *
 * At every arrival and departure the oracle forgets the current grouping and finds, among all
 * partitions of the active jobs into groups of at most max_group_size, with every group's
 * training pool size and every pinning of members to rollout nodes, one of minimum total $/h
 * that keeps host-memory residency and every member's SLO (T_meta <= SLO x T_solo, T_meta from
 * loom_meta_period on the jobs' specs, worst-case times as admission plans them; the budget is
 * loom_job_budget, so a spec with t_solo_ref is held to it, and a job alone always meets it, as
 * learned admission takes it). Ties go to the smaller sum of slowdowns. Regrouping is free and
 * instantaneous: the oracle is a benchmark, not a policy. cfg.oracle_regroup makes it regroup
 * less (the ladder's rungs, decompose.c): only at departures, exactly or by single-job moves
 * from the grouping it has (local_moves), or never; arrivals then join the cheapest group. The
 * jobs each regrouping moves are counted (loom_sim_result.moves).
 *
 * Jobs progress as a fluid: a job whose group has period T_meta advances through its realised
 * solo run time at T_solo / T_meta of real time, so it leaves after its realised solo time
 * stretched by the slowdowns it went through.
 *
 * Search: branch and bound over partitions (below) on top of a memoised cost of each
 * possible group; a group's cost is searched over (training nodes, rollout nodes) in order of
 * price, so the first feasible pinning found is the cheapest. Members keep arrival order
 * within a group. The oracle gives up (and says when) once more than
 * LOOM_SIM_ORACLE_MAX_JOBS jobs are active at once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

#define MAXG LOOM_MAX_GROUP_SIZE

typedef struct gkey {
        int n;
        int m[MAXG]; /* workload indexes, ascending */
} gkey;

typedef struct gval {
        bool used;
        bool feasible;
        gkey key;
        double cost;       /* $/h */
        double slow[MAXG]; /* T_meta / T_solo per member */
        double util[2];    /* busy GPUs per pool at worst case */
        int nodes[2];
        bool sliced; /* its members time-slice its training nodes (cfg.oracle_timeslice) */
} gval;

typedef struct gcache {
        gval *t;
        size_t cap, n;
} gcache;

typedef struct oracle {
        const loom_sim_cfg *c;
        const loom_sim_workload *w;
        gcache cache;
        double price[2];
        uint64_t evals;
} oracle;

static uint64_t key_hash(const gkey *k)
{
        uint64_t h = UINT64_C(1469598103934665603);
        for (int i = 0; i < k->n; i++)
                h = (h ^ (uint64_t)k->m[i]) * UINT64_C(1099511628211);
        return h ^ (h >> 29);
}

static bool key_eq(const gkey *a, const gkey *b)
{
        return a->n == b->n && !memcmp(a->m, b->m, sizeof(int) * (size_t)a->n);
}

static gval *cache_slot(gcache *c, const gkey *k)
{
        size_t i = key_hash(k) & (c->cap - 1);
        while (c->t[i].used && !key_eq(&c->t[i].key, k))
                i = (i + 1) & (c->cap - 1);
        return &c->t[i];
}

static int cache_grow(gcache *c)
{
        size_t cap = c->cap ? 2 * c->cap : 4096;
        gcache nc = {calloc(cap, sizeof(gval)), cap, 0};
        if (!nc.t)
                return LOOM_ENOMEM;
        for (size_t i = 0; i < c->cap; i++)
                if (c->t[i].used) {
                        *cache_slot(&nc, &c->t[i].key) = c->t[i];
                        nc.n++;
                }
        free(c->t);
        *c = nc;
        return 0;
}

/* ---- one group ---------------------------------------------------------------------------- */

typedef struct gsearch {
        oracle *o;
        const gkey *k;
        int P; /* training GPUs */
        int R; /* rollout nodes */
        int knodes[MAXG];
        int pin[MAXG][LOOM_MAX_JOB_NODES];
        uint64_t mem[2 * MAXG * 2];
        loom_us budget[MAXG];
        bool found;
        double best_slow;
        double slow[MAXG];
} gsearch;

/*
 * Rates for the members of a group whose single-rate period breaks a budget (cfg.oracle_rates):
 * the core's raising rule, from all rates 1, each member raised to the rate its budget needs at
 * the simulated period (or one more when its longest gap exceeds LOOM_GAP_FACTOR budgets),
 * for at most eight rounds, LOOM_MAX_RATE per member and LOOM_META_MAX_SLOTS in all. A heuristic:
 * it finds rates where this rule does, not every feasible vector. Fills rates and *t_meta;
 * false when none were found.
 */
static bool raise_rates(const gsearch *g, const loom_meta_job *mj, int *rates, loom_us *t_meta)
{
        int n = g->k->n;
        for (int round = 0; round < 8; round++) {
                loom_us gaps[MAXG];
                if (loom_meta_eval(mj, rates, n, g->R, g->o->c->policy.warm_switch, t_meta, gaps,
                                   NULL))
                        return false;
                bool ok = true, raised = false;
                int slots = 0;
                for (int i = 0; i < n; i++) {
                        loom_us need = (*t_meta + g->budget[i] - 1) / g->budget[i];
                        bool gap = gaps[i] > LOOM_GAP_FACTOR * g->budget[i];
                        if (need <= rates[i] && !gap)
                                continue;
                        ok = false;
                        int r = need > rates[i] ? (int)need : rates[i] + 1;
                        if (r <= LOOM_MAX_RATE) {
                                rates[i] = r;
                                raised = true;
                        }
                }
                if (ok)
                        return true;
                for (int i = 0; i < n; i++)
                        slots += rates[i];
                if (!raised || slots > LOOM_META_MAX_SLOTS)
                        return false;
        }
        return false;
}

static void evaluate(gsearch *g)
{
        const loom_sim_workload *w = g->o->w;
        const loom_sim_cfg *c = g->o->c;
        loom_meta_job mj[MAXG];
        for (int i = 0; i < g->k->n; i++) {
                const loom_job_spec *s = &w->jobs[g->k->m[i]].spec;
                mj[i] = (loom_meta_job){
                    .t_roll = s->t_roll,
                    .t_train = loom_group_train_time(s->t_train, s->train_gpus, g->P,
                                                     c->policy.train_scaling_efficiency),
                    .t_sync = s->t_sync,
                    .n_nodes = g->knodes[i],
                    .nodes = g->pin[i],
                    .t_switch = loom__sim_job_switch(c, w->jobs[g->k->m[i]].model_b)};
                /* a job with a head (the informed profiles) frees its nodes there, as in loom */
                loom_policy_tail_plan(&c->policy, c->cluster.gpus_per_node, s, &mj[i].t_head,
                                      &mj[i].t_pen);
        }
        g->o->evals++;
        loom_us t_meta;
        int rates[MAXG];
        if (loom_meta_period(mj, g->k->n, g->R, c->policy.warm_switch, &t_meta, NULL))
                return;
        bool ok = true;
        for (int i = 0; i < g->k->n; i++) {
                rates[i] = 1;
                ok &= t_meta <= g->budget[i] || g->k->n == 1; /* alone, a job is its own solo */
        }
        if (!ok && !(c->oracle_rates && raise_rates(g, mj, rates, &t_meta)))
                return;
        double sum = 0, slow[MAXG];
        for (int i = 0; i < g->k->n; i++) {
                slow[i] =
                    (double)t_meta / rates[i] / (double)loom_job_t_solo(&w->jobs[g->k->m[i]].spec);
                sum += slow[i];
        }
        if (!g->found || sum < g->best_slow - 1e-12) {
                g->found = true;
                g->best_slow = sum;
                memcpy(g->slow, slow, sizeof slow);
        }
}

/* Pin member i onto knodes[i] distinct nodes of R; `opened` nodes are in use so far. Nodes are
 * opened in order, which removes relabellings of the same pinning. */
static void pin_member(gsearch *g, int i, int from, int chosen, int opened, uint64_t *load_mem)
{
        const loom_sim_workload *w = g->o->w;
        if (i == g->k->n) {
                if (opened == g->R)
                        evaluate(g);
                return;
        }
        if (chosen == g->knodes[i]) {
                pin_member(g, i + 1, 0, 0, opened, load_mem);
                return;
        }
        const loom_job_spec *s = &w->jobs[g->k->m[i]].spec;
        uint64_t cap = g->o->c->cluster.host_mem_bytes;
        int last = opened < g->R ? opened : g->R - 1; /* may open exactly one new node */
        for (int n = from; n <= last; n++) {
                if (load_mem[n] + s->mem_rollout > cap)
                        continue;
                /* nodes a member still needs must remain openable */
                load_mem[n] += s->mem_rollout;
                g->pin[i][chosen] = n;
                pin_member(g, i, n + 1, chosen + 1, n == opened ? opened + 1 : opened, load_mem);
                load_mem[n] -= s->mem_rollout;
        }
}

static int cmp_pr(const void *a, const void *b)
{
        const double *x = a, *y = b;
        return (x[0] > y[0]) - (x[0] < y[0]);
}

/*
 * A job alone colocated as loom's lone members are (policy.colocate_lone): its rollouts on its
 * own training nodes, at the colocated rollout factor and two switches per iteration, no
 * rollout node. Feasible where loom would colocate it: its rollout fits those GPUs, both
 * working sets one node's host memory, and its iteration its budget.
 */
static bool colocated_alone(const oracle *o, int m, gval *out)
{
        const loom_sim_cfg *c = o->c;
        const loom_job_spec *s = &o->w->jobs[m].spec;
        if (!c->policy.colocate_lone || c->policy.placer != LOOM_PLACER_LOOM)
                return false;
        loom_us it = (loom_us)llround((double)s->t_roll * c->colocated_roll_factor) + s->t_train +
                     2 * loom__sim_job_switch(c, o->w->jobs[m].model_b);
        if (s->rollout_gpus > s->train_gpus ||
            s->mem_train + s->mem_rollout > c->cluster.host_mem_bytes || it > loom_job_budget(s))
                return false;
        int P = s->train_gpus / c->cluster.gpus_per_node;
        out->feasible = true;
        out->cost = P * loom_cluster_node_price(&c->cluster, LOOM_POOL_TRAIN);
        out->slow[0] = (double)it / (double)loom_job_t_solo(s);
        out->nodes[0] = 0;
        out->nodes[1] = P;
        out->util[0] = 0;
        out->util[1] = s->train_gpus;
        return true;
}

/*
 * The members time-slicing one node set (cfg.oracle_timeslice, loom_slice_period): the most
 * nodes any member asks for in either pool, each member's rollouts (at the colocated rollout
 * factor, on its own rollout nodes' count) and trainings (on the whole set) there, in the best
 * of every order of the members. Feasible where all their working sets fit one node's host
 * memory together, the cycle keeps every member's budget, and the set's node time per cycle
 * is less than what each member alone takes for an iteration.
 */
static bool timesliced(const oracle *o, const gkey *k, gval *out)
{
        const loom_sim_cfg *c = o->c;
        int node = c->cluster.gpus_per_node, n = k->n, P = 0;
        if (!c->oracle_timeslice || n < 2 || n > LOOM_SIM_SLICE_MAX ||
            c->policy.placer != LOOM_PLACER_LOOM)
                return false;
        int own[LOOM_SIM_SLICE_MAX]; /* each member's nodes alone: its larger pool's */
        for (int i = 0; i < n; i++) {
                const loom_job_spec *s = &o->w->jobs[k->m[i]].spec;
                own[i] = (s->train_gpus > s->rollout_gpus ? s->train_gpus : s->rollout_gpus) / node;
                P = own[i] > P ? own[i] : P;
        }
        uint64_t mem = 0;
        loom_meta_job mj[LOOM_SIM_SLICE_MAX];
        for (int i = 0; i < n; i++) {
                const loom_sim_job *j = &o->w->jobs[k->m[i]];
                const loom_job_spec *s = &j->spec;
                mem += s->mem_rollout + loom_group_train_mem(s->mem_train, s->train_gpus, P * node);
                loom_us head, pen;
                loom_policy_tail_plan(&c->policy, node, s, &head, &pen);
                double f = c->colocated_roll_factor;
                mj[i] = (loom_meta_job){
                    .t_roll = (loom_us)llround((double)s->t_roll * f),
                    .t_train = loom_group_train_time(s->t_train, s->train_gpus, P * node,
                                                     c->policy.train_scaling_efficiency),
                    .n_nodes = s->rollout_gpus / node,
                    .t_switch = loom__sim_job_switch(c, j->model_b),
                    .t_head = (loom_us)llround((double)head * f)};
        }
        if (mem > c->cluster.host_mem_bytes)
                return false;
        /* every order: n <= 3, so at most six */
        static const int perm3[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                        {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
        loom_us best = -1;
        for (int q = 0; q < 6; q++) {
                loom_meta_job ord[LOOM_SIM_SLICE_MAX];
                int m = 0;
                for (int x = 0; x < 3; x++)
                        if (perm3[q][x] < n)
                                ord[m++] = mj[perm3[q][x]];
                loom_us t = loom_slice_period(ord, n, P, node, c->policy.tail_keep_gpus,
                                              c->oracle_timeslice == LOOM_SIM_SLICE_ELASTIC);
                if (t > 0 && (best < 0 || t < best))
                        best = t;
        }
        if (best < 0)
                return false;
        /* the search ranks groups by $/h, and a slower group costs less per hour: a sliced
         * group must also save node time over its members alone (colocated on their own
         * training nodes), or sharing one set in turn would only look cheaper */
        double alone = 0;
        for (int i = 0; i < n; i++) {
                const loom_job_spec *s = &o->w->jobs[k->m[i]].spec;
                loom_us train = loom_group_train_time(s->t_train, s->train_gpus, own[i] * node,
                                                      c->policy.train_scaling_efficiency);
                alone += (double)own[i] * (double)(mj[i].t_roll + train + 2 * mj[i].t_switch);
        }
        if ((double)P * (double)best >= alone)
                return false;
        double busy = 0;
        for (int i = 0; i < n; i++) {
                const loom_job_spec *s = &o->w->jobs[k->m[i]].spec;
                if (best > loom_job_budget(s))
                        return false;
                out->slow[i] = (double)best / (double)loom_job_t_solo(s);
                busy += (double)mj[i].t_roll * s->rollout_gpus + (double)mj[i].t_train * P * node;
        }
        out->feasible = out->sliced = true;
        out->cost = P * loom_cluster_node_price(&c->cluster, LOOM_POOL_TRAIN);
        out->nodes[0] = 0;
        out->nodes[1] = P;
        out->util[0] = 0;
        out->util[1] = fmin(busy / (double)best, (double)(P * node));
        return true;
}

static void group_eval(oracle *o, const gkey *k, gval *out)
{
        const loom_sim_workload *w = o->w;
        const loom_sim_cfg *c = o->c;
        int node = c->cluster.gpus_per_node;
        gsearch g = {.o = o, .k = k};
        int kmax = 0, ksum = 0, tsum = 0, tmax = 0;
        loom_us min_budget = INT64_MAX;
        for (int i = 0; i < k->n; i++) {
                const loom_job_spec *s = &w->jobs[k->m[i]].spec;
                g.knodes[i] = s->rollout_gpus / node;
                kmax = g.knodes[i] > kmax ? g.knodes[i] : kmax;
                ksum += g.knodes[i];
                tsum += s->train_gpus / node;
                if (s->train_gpus / node > tmax)
                        tmax = s->train_gpus / node;
                g.budget[i] = loom_job_budget(s);
                if (g.budget[i] < min_budget)
                        min_budget = g.budget[i];
        }
        if (tsum > LOOM_MAX_JOB_NODES)
                tsum = LOOM_MAX_JOB_NODES;
        if (tmax > tsum)
                tmax = tsum;
        /* (cost, P nodes, R nodes), cheapest first; P only the largest ask with fixed pools */
        double(*pr)[3] = malloc(sizeof(double[3]) * (size_t)(tsum * (ksum - kmax + 1)));
        int npr = 0;
        if (!pr)
                return;
        int p_lo = c->oracle_fixed_pools ? tmax : 1, p_hi = c->oracle_fixed_pools ? tmax : tsum;
        for (int P = p_lo; P <= p_hi; P++)
                for (int R = kmax; R <= ksum; R++) {
                        pr[npr][0] = P * loom_cluster_node_price(&c->cluster, LOOM_POOL_TRAIN) +
                                     R * loom_cluster_node_price(&c->cluster, LOOM_POOL_ROLLOUT);
                        pr[npr][1] = P;
                        pr[npr][2] = R;
                        npr++;
                }
        qsort(pr, (size_t)npr, sizeof pr[0], cmp_pr);
        out->feasible = k->n == 1 ? colocated_alone(o, k->m[0], out) : timesliced(o, k, out);
        double found_cost = out->feasible ? out->cost : 0;
        double best_sum = out->feasible ? out->slow[0] : 0;
        for (int x = 0; x < npr; x++) {
                if (out->feasible && pr[x][0] > found_cost + 1e-9)
                        break;
                g.P = (int)pr[x][1] * node;
                g.R = (int)pr[x][2];
                /* O(1) bounds: the pool trains every member once per period, and the rollout
                 * nodes together run every member's rollout once; with rates, member i runs
                 * at least T_meta / budget_i times, so the pool's and the nodes' densities
                 * (time per budget) must stay within 1 and R. */
                loom_us sum_train = 0, sum_roll = 0;
                double dens_train = 0, dens_roll = 0;
                uint64_t tmem = 0;
                for (int i = 0; i < k->n; i++) {
                        const loom_job_spec *s = &w->jobs[k->m[i]].spec;
                        loom_us tt = loom_group_train_time(s->t_train, s->train_gpus, g.P,
                                                           c->policy.train_scaling_efficiency);
                        /* a rollout keeps its nodes t_head (+ its tail's delay on the first) */
                        loom_us head, pen;
                        loom_policy_tail_plan(&c->policy, c->cluster.gpus_per_node, s, &head, &pen);
                        loom_us occ = head > 0 ? head * g.knodes[i] + pen : s->t_roll * g.knodes[i];
                        sum_train += tt;
                        sum_roll += occ;
                        dens_train += (double)tt / (double)g.budget[i];
                        dens_roll += (double)occ / (double)g.budget[i];
                        tmem += loom_group_train_mem(s->mem_train, s->train_gpus, g.P);
                }
                bool over = c->oracle_rates
                                ? dens_train > 1 || dens_roll > g.R
                                : sum_train > min_budget || sum_roll > (loom_us)g.R * min_budget;
                if ((k->n > 1 && over) || tmem > c->cluster.host_mem_bytes)
                        continue;
                uint64_t load_mem[MAXG * LOOM_MAX_JOB_NODES] = {0};
                g.found = false;
                pin_member(&g, 0, 0, 0, 0, load_mem);
                if (!g.found || (out->feasible && g.best_slow >= best_sum - 1e-12))
                        continue;
                out->feasible = true;
                out->sliced = false;
                best_sum = g.best_slow;
                found_cost = pr[x][0];
                out->cost = pr[x][0];
                memcpy(out->slow, g.slow, sizeof g.slow);
                out->nodes[0] = g.R;
                out->nodes[1] = g.P / node;
                out->util[0] = out->util[1] = 0;
                for (int i = 0; i < k->n; i++) {
                        const loom_job_spec *s = &w->jobs[k->m[i]].spec;
                        double tm = g.slow[i] * (double)loom_job_t_solo(s);
                        loom_us tt = loom_group_train_time(s->t_train, s->train_gpus, g.P,
                                                           c->policy.train_scaling_efficiency);
                        out->util[0] += (double)s->rollout_gpus * (double)s->t_roll / tm;
                        out->util[1] += (double)g.P * (double)tt / tm;
                }
        }
        free(pr);
}

static const gval *group_get(oracle *o, const gkey *k)
{
        if (4 * (o->cache.n + 1) > 3 * o->cache.cap && cache_grow(&o->cache))
                return NULL;
        gval *v = cache_slot(&o->cache, k);
        if (!v->used) {
                memset(v, 0, sizeof *v);
                v->used = true;
                v->key = *k;
                group_eval(o, k, v);
                o->cache.n++;
        }
        return v;
}

/* ---- the partition ------------------------------------------------------------------------ */

/*
 * Branch and bound over partitions. The lowest unassigned job goes into one of the feasible
 * groups it can form with other unassigned jobs (cheapest per member first), then the rest is
 * partitioned the same way. A partition costs the sum of its groups, and each group's cost is
 * the sum over its members of cost / size, so sum over the unassigned jobs of each one's least
 * cost / size in any feasible group is a lower bound on what is left: a branch is cut when
 * what it has plus that bound reaches the best partition found (ties: the smaller sum of
 * slowdowns, bounded the same way by each job's least slowdown). Every job alone is feasible (SLO
 * >= 1, working sets fit a node), so the search starts from that partition. It explores at most
 * ORACLE_NODES branches per event (a count, so results are deterministic); if it stops there, the
 * best partition found is used and the gap to the bound of the unexplored branches is reported.
 */
#define ORACLE_NODES 2000000

typedef struct bb {
        oracle *o;
        const int *active;
        int n, maxg;
        const gval **cand; /* feasible groups, by lowest member: cand[i*cap ..] */
        int *n_cand, cap;
        double *lb;    /* least cost / size per job */
        double *ls;    /* least slowdown per job (below 1 when a larger pool trains faster) */
        int *assigned; /* group index per job, -1 */
        const gval **chosen, **best;
        int n_chosen, n_best;
        double best_cost, best_slow, open_lb;
        uint64_t nodes;
        bool cut;
        const int *old; /* each active job's group before the regrouping, when moves are priced */
        double price;   /* $/h per moved job (cfg.oracle_move_price) */
} bb;

static double group_slow(const gval *v)
{
        double s = 0;
        for (int i = 0; i < v->key.n; i++)
                s += v->slow[i];
        return s;
}

static int cmp_cand(const void *a, const void *b)
{
        const gval *x = *(const gval *const *)a, *y = *(const gval *const *)b;
        double px = x->cost / x->key.n, py = y->cost / y->key.n;
        if (px != py)
                return px < py ? -1 : 1;
        return (x->key.n < y->key.n) - (x->key.n > y->key.n); /* larger groups first */
}

/* Index in active[] of workload job w (active[] is ascending). */
static int pos_of(const bb *b, int w)
{
        int lo = 0, hi = b->n - 1;
        while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (b->active[mid] < w)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* What forming group v charges for moves: the price times its members that come from some
 * group (an arrival, labelled -1, comes from none) but not from its largest old group. */
static double moves_charge(const bb *b, const gval *v)
{
        if (!b->old || !(b->price > 0))
                return 0;
        int from[MAXG], most = 0, placed = 0;
        for (int i = 0; i < v->key.n; i++)
                from[i] = b->old[pos_of(b, v->key.m[i])];
        for (int i = 0; i < v->key.n; i++) {
                if (from[i] < 0)
                        continue;
                placed++;
                int c = 0;
                for (int k = 0; k < v->key.n; k++)
                        c += from[k] == from[i];
                if (c > most)
                        most = c;
        }
        return b->price * (placed - most);
}

static void branch(bb *b, double cost, double slow)
{
        int first = -1;
        double rest = 0, rest_slow = 0;
        for (int i = 0; i < b->n; i++)
                if (b->assigned[i] < 0) {
                        if (first < 0)
                                first = i;
                        rest += b->lb[i];
                        rest_slow += b->ls[i];
                }
        if (first < 0) {
                if (cost < b->best_cost - 1e-9 ||
                    (cost < b->best_cost + 1e-9 && slow < b->best_slow - 1e-12)) {
                        b->best_cost = cost;
                        b->best_slow = slow;
                        b->n_best = b->n_chosen;
                        memcpy(b->best, b->chosen, sizeof *b->chosen * (size_t)b->n_chosen);
                }
                return;
        }
        double bound = cost + rest;
        if (bound > b->best_cost + 1e-9 ||
            (bound > b->best_cost - 1e-9 && slow + rest_slow >= b->best_slow - 1e-12))
                return;
        if (++b->nodes > ORACLE_NODES) {
                b->cut = true;
                if (bound < b->open_lb)
                        b->open_lb = bound;
                return;
        }
        for (int c = 0; c < b->n_cand[first]; c++) {
                const gval *v = b->cand[first * b->cap + c];
                int idx[MAXG];
                bool free_ = true;
                for (int i = 0; i < v->key.n && free_; i++) {
                        idx[i] = pos_of(b, v->key.m[i]);
                        free_ = b->assigned[idx[i]] < 0;
                }
                if (!free_)
                        continue;
                for (int i = 0; i < v->key.n; i++)
                        b->assigned[idx[i]] = b->n_chosen;
                b->chosen[b->n_chosen++] = v;
                branch(b, cost + v->cost + moves_charge(b, v), slow + group_slow(v));
                b->n_chosen--;
                for (int i = 0; i < v->key.n; i++)
                        b->assigned[idx[i]] = -1;
        }
}

/* Every feasible group of the active jobs, listed under its lowest member. */
static int enumerate(bb *b, int from, gkey *k, int low)
{
        if (k->n > 0) {
                const gval *v = group_get(b->o, k);
                if (!v)
                        return LOOM_ENOMEM;
                if (v->feasible) {
                        if (b->n_cand[low] == b->cap)
                                return LOOM_ERANGE;
                        b->cand[low * b->cap + b->n_cand[low]++] = v;
                        for (int i = 0; i < k->n; i++) {
                                int p = pos_of(b, k->m[i]);
                                if (v->cost / k->n < b->lb[p])
                                        b->lb[p] = v->cost / k->n;
                                if (v->slow[i] < b->ls[p])
                                        b->ls[p] = v->slow[i];
                        }
                }
                if (k->n == b->maxg)
                        return 0;
        }
        for (int i = from; i < b->n; i++) {
                k->m[k->n++] = b->active[i];
                int rc = enumerate(b, i + 1, k, k->n == 1 ? i : low);
                k->n--;
                if (rc)
                        return rc;
        }
        return 0;
}

static size_t choose(int n, int k)
{
        size_t r = 1;
        for (int i = 1; i <= k; i++)
                r = r * (size_t)(n - k + i) / (size_t)i;
        return r;
}

/* Best partition of active[0..n); fills slow_of[i] and group_of[i] (the index of its group in
 * the partition) for each active job and the pools' figures (*cost: the groups' $/h), and *gap
 * with the proven relative gap (0 when the search finished). With old (each job's group before,
 * or NULL) the search also charges cfg.oracle_move_price per job moved. Returns 0,
 * LOOM_ENOMEM, or LOOM_EREJECT when no feasible grouping exists. */
static int solve(oracle *o, const int *active, int n, const int *old, double *slow_of,
                 int *group_of, double *cost, int nodes[2], double util[2], double *gap)
{
        bb b = {.o = o,
                .active = active,
                .n = n,
                .maxg = o->c->policy.max_group_size,
                .old = old,
                .price = o->c->oracle_move_price};
        if (b.maxg > n)
                b.maxg = n;
        b.cap = 0;
        for (int k = 0; k < b.maxg; k++)
                b.cap += (int)choose(n - 1, k);
        b.cand = malloc(sizeof *b.cand * (size_t)n * (size_t)b.cap);
        b.n_cand = calloc((size_t)n, sizeof *b.n_cand);
        b.lb = malloc(sizeof *b.lb * (size_t)n);
        b.ls = malloc(sizeof *b.ls * (size_t)n);
        b.assigned = malloc(sizeof *b.assigned * (size_t)n);
        b.chosen = malloc(sizeof *b.chosen * (size_t)n);
        b.best = malloc(sizeof *b.best * (size_t)n);
        int rc = LOOM_ENOMEM;
        if (!b.cand || !b.n_cand || !b.lb || !b.ls || !b.assigned || !b.chosen || !b.best)
                goto out;
        /* the candidates point into the cache: grow it now, never while they are held */
        size_t groups = 0;
        for (int k = 1; k <= b.maxg; k++)
                groups += choose(n, k);
        while (4 * (o->cache.n + groups + 1) > 3 * o->cache.cap)
                if (cache_grow(&o->cache))
                        goto out;
        for (int i = 0; i < n; i++) {
                b.ls[i] = INFINITY;
                b.lb[i] = INFINITY;
                b.assigned[i] = -1;
        }
        gkey k = {0};
        if ((rc = enumerate(&b, 0, &k, 0)))
                goto out;
        for (int i = 0; i < n; i++)
                qsort(&b.cand[i * b.cap], (size_t)b.n_cand[i], sizeof *b.cand, cmp_cand);
        /* the incumbent: every job alone */
        b.best_cost = 0;
        b.best_slow = 0;
        for (int i = 0; i < n && rc == 0; i++) {
                gkey one = {.n = 1, .m = {active[i]}};
                const gval *v = group_get(o, &one);
                if (!v) {
                        rc = LOOM_ENOMEM;
                } else if (!v->feasible) {
                        rc = LOOM_EREJECT;
                } else {
                        b.best[b.n_best++] = v;
                        b.best_cost += v->cost;
                        b.best_slow += group_slow(v);
                }
        }
        if (rc)
                goto out;
        b.open_lb = INFINITY;
        branch(&b, 0, 0);
        *gap = b.cut && b.open_lb < b.best_cost ? (b.best_cost - b.open_lb) / b.best_cost : 0;
        *cost = 0;
        nodes[0] = nodes[1] = 0;
        util[0] = util[1] = 0;
        for (int g = 0; g < b.n_best; g++) {
                const gval *v = b.best[g];
                for (int i = 0; i < v->key.n; i++) {
                        slow_of[pos_of(&b, v->key.m[i])] = v->slow[i];
                        group_of[pos_of(&b, v->key.m[i])] = g;
                }
                *cost += v->cost;
                nodes[0] += v->nodes[0];
                nodes[1] += v->nodes[1];
                util[0] += v->util[0];
                util[1] += v->util[1];
        }
out:
        free(b.cand);
        free(b.n_cand);
        free(b.lb);
        free(b.ls);
        free(b.assigned);
        free(b.chosen);
        free(b.best);
        return rc;
}

/* ---- the fluid run ------------------------------------------------------------------------ */

/* The fluid state between two events. */
typedef struct fluid {
        oracle o;
        loom_sim_result *r;
        double *remain, *rate; /* solo microseconds left; solo us per real us */
        loom_us *done;
        int active[LOOM_SIM_ORACLE_MAX_JOBS + 1], na, next;
        size_t cap_series;
        double t, cost, util[2], total, busy[2], prov[2];
        int nodes[2];
        /* the grouping's $/h by group kind (fluid_kinds) */
        double kind_cost[LOOM_MAX_GROUP_SIZE + 1][2], lone_slo_cost[4], grown_cost, slice_cost;
        double gap; /* the largest proven gap of any regrouping */
        int most;   /* the most jobs active at once */
        /* each active job's group (a label; -1 before it arrives), what the modes that
         * regroup less start from and what the moves are counted against */
        int *gid, next_gid;
} fluid;

static void members(const fluid *f, int g, int plus, gkey *k);

/*
 * The current grouping's $/h by group kind, as loom's bill is counted (loom_sim_result.group_cost,
 * lone_cost_by_slo): a job alone colocated on its training nodes is lone. And what the groups
 * whose training pool outgrew their largest member's ask cost (grown_pool_cost). Set after
 * each regrouping, as f->cost is, and integrated with it. 0 or LOOM_ENOMEM.
 */
static int fluid_kinds(fluid *f)
{
        const loom_sim_cfg *c = f->o.c;
        double price[2] = {loom_cluster_node_price(&c->cluster, LOOM_POOL_ROLLOUT),
                           loom_cluster_node_price(&c->cluster, LOOM_POOL_TRAIN)};
        memset(f->kind_cost, 0, sizeof f->kind_cost);
        memset(f->lone_slo_cost, 0, sizeof f->lone_slo_cost);
        f->grown_cost = f->slice_cost = 0;
        for (int i = 0; i < f->na; i++) {
                gkey k;
                members(f, f->gid[f->active[i]], -1, &k);
                if (k.m[0] != f->active[i])
                        continue; /* each group once, at its lowest member */
                const gval *v = group_get(&f->o, &k);
                if (!v)
                        return LOOM_ENOMEM;
                int ask = 0;
                for (int m = 0; m < k.n; m++) {
                        int t = f->o.w->jobs[k.m[m]].spec.train_gpus / c->cluster.gpus_per_node;
                        ask = t > ask ? t : ask;
                }
                bool lone = k.n == 1 && v->nodes[0] == 0;
                for (int p = 0; p < 2; p++)
                        f->kind_cost[lone ? 0 : k.n][p] += v->nodes[p] * price[p];
                if (lone)
                        f->lone_slo_cost[loom__sim_slo_band(f->o.w->jobs[k.m[0]].spec.slo)] +=
                            v->nodes[1] * price[1];
                if (v->nodes[1] > ask)
                        f->grown_cost += v->cost;
                if (v->sliced)
                        f->slice_cost += v->cost;
        }
        return 0;
}

/* Advance to tn: integrate cost and GPU time, move every active job on. */
static void fluid_advance(fluid *f, double tn)
{
        double dt = tn - f->t, h = dt / 3.6e9;
        loom_sim_result *r = f->r;
        f->total += f->cost * dt;
        for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++)
                for (int p = 0; p < 2; p++)
                        r->group_cost[k][p] += f->kind_cost[k][p] * h;
        for (int b = 0; b < 4; b++)
                r->lone_cost_by_slo[b] += f->lone_slo_cost[b] * h;
        r->grown_pool_cost += f->grown_cost * h;
        r->timeslice_cost += f->slice_cost * h;
        for (int p = 0; p < 2; p++) {
                f->busy[p] += f->util[p] * dt;
                f->prov[p] += f->nodes[p] * f->o.c->cluster.gpus_per_node * dt;
        }
        for (int i = 0; i < f->na; i++)
                f->remain[f->active[i]] -= dt * f->rate[f->active[i]];
        f->t = tn;
}

/* The active members of group g, ascending, and `plus` (a job not yet in any group, larger
 * than every active one), when >= 0. */
static void members(const fluid *f, int g, int plus, gkey *k)
{
        k->n = 0;
        for (int i = 0; i < f->na; i++)
                if (f->gid[f->active[i]] == g && f->active[i] != plus)
                        k->m[k->n++] = f->active[i];
        if (plus >= 0)
                k->m[k->n++] = plus;
}

/* Arrival j joins the group whose $/h it raises least, or opens its own when that costs less
 * (ties: the least added slowdown, then the oldest group). Cache entries are read at once:
 * group_get may move them. */
static int join_cheapest(fluid *f, int j)
{
        gkey k = {.n = 1, .m = {j}};
        const gval *v = group_get(&f->o, &k);
        if (!v)
                return LOOM_ENOMEM;
        double best = v->cost, best_slow = group_slow(v);
        int to = -1;
        for (int i = 0; i < f->na; i++) {
                int g = f->gid[f->active[i]];
                gkey a, b;
                members(f, g, -1, &a);
                if (f->active[i] == j || a.m[0] != f->active[i] ||
                    a.n >= f->o.c->policy.max_group_size)
                        continue; /* each group once, at its lowest member */
                members(f, g, j, &b);
                const gval *va = group_get(&f->o, &a);
                if (!va)
                        return LOOM_ENOMEM;
                double ca = va->cost, sa = group_slow(va);
                const gval *vb = group_get(&f->o, &b);
                if (!vb)
                        return LOOM_ENOMEM;
                double d = vb->cost - ca, ds = group_slow(vb) - sa;
                if (vb->feasible &&
                    (d < best - 1e-9 || (d < best + 1e-9 && ds < best_slow - 1e-12))) {
                        best = d;
                        best_slow = ds;
                        to = g;
                }
        }
        f->gid[j] = to >= 0 ? to : f->next_gid++;
        return 0;
}

/* Cost, pools and rates of the grouping in gid; a group a departure left infeasible (its
 * pinning searched afresh) splits into its members alone. */
static int tally(fluid *f)
{
        f->cost = 0;
        f->nodes[0] = f->nodes[1] = 0;
        f->util[0] = f->util[1] = 0;
        for (int i = 0; i < f->na; i++) {
                gkey k;
                members(f, f->gid[f->active[i]], -1, &k);
                if (k.m[0] != f->active[i])
                        continue;
                const gval *v = group_get(&f->o, &k);
                if (!v)
                        return LOOM_ENOMEM;
                if (!v->feasible) {
                        for (int m = 0; m < k.n; m++)
                                f->gid[k.m[m]] = f->next_gid++;
                        return tally(f);
                }
                f->cost += v->cost;
                for (int p = 0; p < 2; p++) {
                        f->nodes[p] += v->nodes[p];
                        f->util[p] += v->util[p];
                }
                for (int m = 0; m < k.n; m++)
                        f->rate[k.m[m]] = 1.0 / v->slow[m];
        }
        return 0;
}

/* The $/h of group key k: INFINITY where it breaks a budget, 0 for no member, NAN out of
 * memory. */
static double key_cost(fluid *f, const gkey *k)
{
        if (k->n == 0)
                return 0;
        const gval *v = group_get(&f->o, k);
        if (!v)
                return NAN;
        return v->feasible ? v->cost : INFINITY;
}

/* The $/h of group g of the current grouping with job `out` taken out (-1: none) and job `in`
 * put in (-1: none), as key_cost says. */
static double cost_with(fluid *f, int g, int out, int in)
{
        gkey k;
        members(f, g, in, &k);
        int n = 0;
        for (int i = 0; i < k.n; i++)
                if (k.m[i] != out)
                        k.m[n++] = k.m[i];
        k.n = n;
        if (in >= 0) /* keep the key ascending: `in` went last */
                for (int i = n - 1; i > 0 && k.m[i] < k.m[i - 1]; i--) {
                        int t = k.m[i];
                        k.m[i] = k.m[i - 1];
                        k.m[i - 1] = t;
                }
        return key_cost(f, &k);
}

/* REGROUP_LOCAL, after a departure: from the grouping the jobs have, move one job at a time,
 * into another group below max_group_size or alone, while a move lowers the $/h (each job in
 * turn takes its best move; ties keep it where it is). What moving members one at a time, for
 * free, can reach; deterministic. */
static int local_moves(fluid *f)
{
        int maxg = f->o.c->policy.max_group_size;
        int rc = tally(f); /* a group the departure left infeasible splits first */
        if (rc)
                return rc;
        for (bool moved = true; moved;) {
                moved = false;
                for (int a = 0; a < f->na; a++) {
                        int j = f->active[a], from = f->gid[j];
                        double here = cost_with(f, from, -1, -1), left = cost_with(f, from, j, -1);
                        double best = 0; /* the drop in $/h of the best move so far */
                        int to = from;
                        for (int b = 0; b <= f->na; b++) {
                                /* b == na: alone, in a group of its own */
                                int g = b < f->na ? f->gid[f->active[b]] : f->next_gid;
                                gkey k = {0};
                                if (b < f->na) {
                                        members(f, g, -1, &k);
                                        if (g == from || k.m[0] != f->active[b] || k.n >= maxg)
                                                continue; /* each group once */
                                }
                                double there = key_cost(f, &k);
                                double joined = cost_with(f, g, -1, j);
                                if (isnan(here + left + there + joined))
                                        return LOOM_ENOMEM;
                                double drop = here + there - left - joined;
                                if (drop > best + 1e-9) {
                                        best = drop;
                                        to = g;
                                }
                        }
                        if (to != from) {
                                if (to == f->next_gid)
                                        f->next_gid++;
                                f->gid[j] = to;
                                moved = true;
                        }
                }
        }
        return tally(f);
}

/* Regroup after an event (job `arrived`, or -1 for a departure) as the oracle's mode says;
 * LOOM_EREJECT when no feasible grouping exists. */
static int fluid_regroup(fluid *f, int arrived)
{
        if (f->na > f->most)
                f->most = f->na;
        if (f->na == 0) {
                f->cost = 0;
                f->nodes[0] = f->nodes[1] = 0;
                f->util[0] = f->util[1] = 0;
                return 0;
        }
        loom_sim_oracle_regroup mode = f->o.c->oracle_regroup;
        if (mode == LOOM_SIM_REGROUP_NEVER ||
            ((mode == LOOM_SIM_REGROUP_DEPARTURES || mode == LOOM_SIM_REGROUP_LOCAL) &&
             arrived >= 0)) {
                int rc = arrived >= 0 ? join_cheapest(f, arrived) : 0;
                return rc ? rc : tally(f);
        }
        if (mode == LOOM_SIM_REGROUP_LOCAL)
                return local_moves(f);
        double slow[LOOM_SIM_ORACLE_MAX_JOBS], gap = 0;
        int grp[LOOM_SIM_ORACLE_MAX_JOBS], old[LOOM_SIM_ORACLE_MAX_JOBS];
        for (int i = 0; i < f->na; i++) /* an arrival comes from no group: a label of its own */
                old[i] = f->active[i] == arrived ? -1 : f->gid[f->active[i]];
        int rc = solve(&f->o, f->active, f->na, old, slow, grp, &f->cost, f->nodes, f->util, &gap);
        if (gap > f->gap)
                f->gap = gap;
        for (int i = 0; !rc && i < f->na; i++) {
                f->rate[f->active[i]] = 1.0 / slow[i];
                f->gid[f->active[i]] = f->next_gid + grp[i];
        }
        f->next_gid += f->na;
        return rc;
}

/* Regroup as fluid_regroup does, counting the jobs it moves (loom__sim_mark_moved; the job
 * that arrived, placed for the first time, is not one). */
static int regroup_counted(fluid *f, int arrived)
{
        int old[LOOM_SIM_ORACLE_MAX_JOBS + 1], now[LOOM_SIM_ORACLE_MAX_JOBS + 1];
        bool moved[LOOM_SIM_ORACLE_MAX_JOBS + 1];
        int n = 0;
        for (int i = 0; i < f->na; i++)
                if (f->active[i] != arrived)
                        old[n++] = f->gid[f->active[i]];
        int rc = fluid_regroup(f, arrived);
        if (rc || n == 0)
                return rc;
        n = 0;
        for (int i = 0; i < f->na; i++)
                if (f->active[i] != arrived)
                        now[n++] = f->gid[f->active[i]];
        int m = loom__sim_mark_moved(old, now, n, moved);
        /* A moved job makes no progress for its restart: as much solo time as it would have
         * done in its new group meanwhile is added back. */
        if (f->o.c->oracle_restarts)
                for (int i = 0, k = 0; i < f->na; i++) /* moved[] as old[]: the arrival left out */
                        if (f->active[i] != arrived && moved[k++]) {
                                int j = f->active[i];
                                loom_us rs = loom__sim_restart(f->o.c, f->o.w->jobs[j].model_b);
                                f->remain[j] += (double)rs * f->rate[j];
                                f->r->regroup_migration_h += loom_us_to_s(rs) / 3600.0;
                        }
        f->r->moves += (uint64_t)m;
        f->r->regroups += m > 0;
        return 0;
}

/* Peaks and the series point after a regrouping. */
static int fluid_record(fluid *f)
{
        loom_sim_result *r = f->r;
        int gpn = f->o.c->cluster.gpus_per_node;
        if (f->cost > r->peak_cost_per_hour)
                r->peak_cost_per_hour = f->cost;
        for (int p = 0; p < 2; p++)
                if (f->nodes[p] * gpn > r->peak_gpus[p])
                        r->peak_gpus[p] = f->nodes[p] * gpn;
        if (!f->o.c->record_series)
                return 0;
        return loom__sim_series_add(
            r, &f->cap_series,
            (loom_sim_point){f->t / 3.6e9, f->cost, {f->nodes[0] * gpn, f->nodes[1] * gpn}});
}

/* One event: the next arrival or the first departure. Returns 1 when the oracle gives up. */
static int fluid_step(fluid *f)
{
        const loom_sim_workload *w = f->o.w;
        double t_dep = INFINITY;
        int who = -1;
        for (int i = 0; i < f->na; i++) {
                double d = f->t + f->remain[f->active[i]] / f->rate[f->active[i]];
                if (d < t_dep) {
                        t_dep = d;
                        who = i;
                }
        }
        double t_arr = f->next < w->n ? (double)w->jobs[f->next].arrival : INFINITY;
        fluid_advance(f, t_arr <= t_dep ? t_arr : t_dep);
        if (t_arr <= t_dep) {
                if (f->na == LOOM_SIM_ORACLE_MAX_JOBS) {
                        snprintf(f->r->note, sizeof f->r->note,
                                 "gave up at t=%.1f h (job %d of %d): %d jobs active, exact "
                                 "search is limited to %d",
                                 f->t / 3.6e9, f->next, w->n, f->na + 1, LOOM_SIM_ORACLE_MAX_JOBS);
                        return 1;
                }
                f->active[f->na++] = f->next++; /* stays ascending: arrivals are in order */
        } else {
                f->done[f->active[who]] = (loom_us)llround(f->t);
                memmove(&f->active[who], &f->active[who + 1],
                        sizeof(int) * (size_t)(f->na - who - 1));
                f->na--;
        }
        f->r->events++;
        int rc = regroup_counted(f, t_arr <= t_dep ? f->next - 1 : -1);
        if (rc == LOOM_EREJECT) {
                snprintf(f->r->note, sizeof f->r->note, "no feasible grouping at t=%.1f h",
                         f->t / 3.6e9);
                return 1;
        }
        if (!rc)
                rc = fluid_kinds(f);
        return rc ? rc : fluid_record(f);
}

int loom__sim_run_oracle(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_result *r,
                         loom_err *e)
{
        size_t n = (size_t)(w->n ? w->n : 1);
        fluid f = {.o = {.c = c, .w = w}, .r = r};
        f.remain = malloc(sizeof(double) * n);
        f.rate = malloc(sizeof(double) * n);
        f.done = malloc(sizeof(loom_us) * n);
        f.gid = malloc(sizeof(int) * n);
        int rc = 0;
        if (!f.remain || !f.rate || !f.done || !f.gid || cache_grow(&f.o.cache)) {
                rc = LOOM_ENOMEM;
                goto out;
        }
        for (int i = 0; i < w->n; i++) {
                f.remain[i] = (double)loom_sim_job_solo_time(&w->jobs[i], c);
                f.done[i] = -1;
                f.gid[i] = -1; /* in no group yet (join_cheapest reads it for the arrival) */
        }
        while (!rc && (f.next < w->n || f.na > 0)) {
                rc = fluid_step(&f);
                sim_progress(c, LOOM_SIM_ORACLE, (double)f.next / (double)n);
        }
        sim_progress(c, LOOM_SIM_ORACLE, -1);
        if (rc == 1) { /* gave up: the note says where */
                r->ran = false;
                rc = 0;
                goto out;
        }
        if (rc)
                goto out;
        r->makespan_h = f.t / 3.6e9;
        r->total_cost = f.total / 3.6e9;
        r->avg_cost_per_hour = r->makespan_h > 0 ? r->total_cost / r->makespan_h : 0;
        for (int p = 0; p < 2; p++) {
                r->busy_gpu_h[p] = f.busy[p] / 3.6e9;
                r->prov_gpu_h[p] = f.prov[p] / 3.6e9;
                r->bubble[p] = f.prov[p] > 0 ? 1.0 - f.busy[p] / f.prov[p] : 0;
        }
        rc = loom__sim_finish_jobs(c, w, f.done, NULL, r);
        if (f.gap > 0)
                snprintf(r->note, sizeof r->note,
                         "%llu group evaluations, up to %d jobs active; search cut at %d "
                         "branches: within %.2f%% of optimal",
                         (unsigned long long)f.o.evals, f.most, ORACLE_NODES, 100 * f.gap);
        else
                snprintf(r->note, sizeof r->note,
                         "%llu group evaluations, up to %d jobs active; exact",
                         (unsigned long long)f.o.evals, f.most);
        r->oracle_gap = f.gap;
out:
        if (rc == LOOM_ENOMEM)
                loom_err_set(e, rc, "", "out of memory");
        free(f.o.cache.t);
        free(f.remain);
        free(f.rate);
        free(f.done);
        free(f.gid);
        return rc;
}
