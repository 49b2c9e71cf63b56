/*
 * placement.c - inter-group placement (WEAVE §4.2, Algorithm 1) and the two §6.5 baselines.
 *
 * For an arriving job the search skips saturated and full groups, rejects a group in O(1) when
 * even its best case breaks a memory or SLO bound, and otherwise generates candidates: direct
 * packing onto each existing rollout node (plus the k-1 least-loaded others, and new nodes if
 * the group has fewer than k) and rollout scaling onto k new nodes. A candidate survives if no
 * node's host memory overflows and the resulting meta-iteration time T_meta stays within
 * SLO * T_solo for every member. Isolated provisioning (a new group of exactly the job's nodes)
 * is the fallback. The choice minimises marginal cost; Algorithm 1 keeps the first of equally
 * cheap candidates and leaves their order open, so loom orders them by lifetime: the least time
 * the job would outlive the group's current members (its nodes stay paid for as long as any
 * member runs), then the group that ends soonest (the tightest fit in time), then the highest
 * T_load / T_meta, then the most SLO slack left after the job, then the lowest group id and the
 * lowest node ids. Nothing here changes the scheduler.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct cand {
        const group *g; /* NULL: isolated provisioning */
        loom_decision_kind kind;
        int n;
        loom_node_id ids[LOOM_MAX_JOB_NODES]; /* ascending; new nodes get ids >= next_rnode */
        int n_new;
        double cost;
        loom_us t_meta;
        double util;
        /* tie-break keys among equally cheap candidates (see better()) */
        double outlive; /* s the job would run past the group's current members */
        double horizon; /* s until the group's current members finish, at the new T_meta */
        loom_us slack;  /* tightest SLO budget in the group minus the new T_meta */
        int rate;       /* the job's rate */
        int tnodes;     /* isolated provisioning: training nodes of the new group */
        bool lone;      /* isolated provisioning: the job alone rolls out on them */
        int8_t rates[LOOM_MAX_GROUP_SIZE]; /* members' rates after the placement */
        /* what an iteration of the job costs there: cost x its iteration (a grown pool's
         * candidates are ranked by it, see better()) */
        double per_iter;
        loom_reject reject;
        char why[160];
} cand;

enum { MAXM = LOOM_MAX_GROUP_SIZE + 1 };

typedef struct search {
        const loom_sched *s;
        const loom_job_spec *spec;
        const loom_job_spec *likely; /* a new job's phases at the fleet's means, or NULL */
        const group *exclude;        /* a group not to search (the job's own, when it would move) */
        double margin;               /* least slack a placement into a group leaves, / T_meta */
        int k;                       /* rollout nodes the job needs */
        loom_us budget;              /* the job's own slo * T_solo */
        loom_decision *d;
        cand best;
        bool have_best;
        /* Skip work whose outcome bounds decide (cheapest candidates first, no simulation of
         * a rate search that cannot succeed). Off when every candidate's verdict is recorded:
         * an explained decision simulates each candidate as far as the search goes, and its
         * choice is the same (test_core_place_prune.c checks it). */
        bool prune;
        /* node_too_dense's rollout densities of group nd_g, by the node's local index */
        const group *nd_g;
        double nd[LOOM_MAX_GROUP_ROLLOUT_NODES];
        /* A wide pruned search's least rates for the job in group lr_g on new rollout nodes
         * (rates_may_fit): the rates, the bound on T_meta they give, the members' rate-weighted
         * rollout load on each of the group's nodes, and whether rates_final_ok passed them.
         * A direct packing whose nodes stay within that bound has the same least rates
         * (same_least_rates), and so the same verdict from rates_final_ok. */
        const group *lr_g;
        int lr_rate[MAXM];
        loom_us lr_bound;
        loom_us lr_load[LOOM_MAX_GROUP_ROLLOUT_NODES];
        bool lr_final_ok;
        /* policy.pool_grow: the group being searched with its pool grown (grown_view), and
         * the one the best candidate so far joins, when that one grows a pool */
        group view, best_view;
        loom_err *e;
} search;

/* Whether the placer checks SLOs: loom and the fair (-slo) baselines do, Random/Greedy not. */
static bool checks_slo(loom_placer p)
{
        return p == LOOM_PLACER_LOOM || p == LOOM_PLACER_RANDOM_SLO || p == LOOM_PLACER_GREEDY_SLO;
}

static bool is_random(loom_placer p)
{
        return p == LOOM_PLACER_RANDOM || p == LOOM_PLACER_RANDOM_SLO;
}

static const char *job_label(const job *j, char *buf, size_t n)
{
        if (j->spec.id[0])
                snprintf(buf, n, "%s", j->spec.id);
        else
                snprintf(buf, n, "#%u", (unsigned)j->id);
        return buf;
}

static int cmp_node_id(const void *a, const void *b)
{
        loom_node_id x = *(const loom_node_id *)a, y = *(const loom_node_id *)b;
        return (x > y) - (x < y);
}

/*
 * Strict "a is better than b" in the documented order. Marginal cost first (Algorithm 1). Equal
 * costs are mostly direct packings at +$0/h into different groups: a job that outlives a group's
 * members keeps all of that group's nodes paid for alone, so the least overrun wins, then the
 * group that ends soonest (a job that fits inside a short-lived group leaves the long-lived
 * ones' bubbles for later jobs), then the most SLO slack.
 */
static bool better(const cand *a, const cand *b)
{
        if (a->cost < b->cost - 1e-9)
                return true;
        if (a->cost > b->cost + 1e-9)
                return false;
        /* policy.pool_grow: a grown pool makes every member's iteration shorter, the job's
         * included, which its $/h does not say. At equal $/h a grown candidate and any other
         * are ranked by what an iteration of the job costs in each. */
        if ((a->g && a->g->grown) || (b->g && b->g->grown)) {
                if (a->per_iter < b->per_iter * (1 - 1e-9))
                        return true;
                if (a->per_iter > b->per_iter * (1 + 1e-9))
                        return false;
        }
        if (a->outlive < b->outlive - 1e-6)
                return true;
        if (a->outlive > b->outlive + 1e-6)
                return false;
        if (a->horizon < b->horizon - 1e-6)
                return true;
        if (a->horizon > b->horizon + 1e-6)
                return false;
        /* Lifetimes equal (e.g. both unbounded): pack tightest first, as before the lifetime
         * keys. Going straight to the most slack spreads such jobs over the emptiest groups,
         * which then stay unsaturated: at 100,000 unbounded jobs 10,247 groups stayed open
         * instead of 6,550 and every decision scans them all (p99 1.84 ms, 0.53 ms with this). */
        if (a->util > b->util + 1e-12)
                return true;
        if (a->util < b->util - 1e-12)
                return false;
        if (a->slack != b->slack)
                return a->slack > b->slack;
        loom_group_id ga = a->g ? a->g->id : LOOM_NEW_GROUP, gb = b->g ? b->g->id : LOOM_NEW_GROUP;
        if (ga != gb)
                return ga < gb;
        for (int i = 0; i < a->n && i < b->n; i++)
                if (a->ids[i] != b->ids[i])
                        return a->ids[i] < b->ids[i];
        return a->n < b->n;
}

static int record(search *x, const cand *c)
{
        loom_decision *d = x->d;
        if (!d->record_candidates)
                return 0;
        if (loom_reserve(&d->candidates, &d->cap_candidates, (size_t)d->n_candidates + 1,
                         sizeof *d->candidates, 16))
                return LOOM_ENOMEM;
        loom_candidate *o = &d->candidates[d->n_candidates++];
        memset(o, 0, sizeof *o);
        o->kind = c->kind;
        o->group = c->g ? c->g->id : LOOM_NEW_GROUP;
        o->n_rollout_nodes = c->n;
        memcpy(o->rollout_nodes, c->ids, sizeof(loom_node_id) * (size_t)c->n);
        o->new_rollout_nodes = c->n_new;
        o->new_train_nodes = c->g ? c->g->grown : c->tnodes;
        o->marginal_cost_per_hour = c->cost;
        o->t_meta = c->t_meta;
        o->utilisation = c->util;
        o->rate = c->rate > 1 ? c->rate : 1;
        o->reject = c->reject;
        snprintf(o->why, sizeof o->why, "%s", c->why);
        return 0;
}

/* Local index of rollout node id in g (its rnodes are in ascending id order), or -1. */
static int local_index(const group *g, loom_node_id id)
{
        int lo = 0, hi = g->n_rnodes - 1;
        while (lo <= hi) {
                int mid = (lo + hi) / 2;
                if (g->rnodes[mid]->id == id)
                        return mid;
                if (g->rnodes[mid]->id < id)
                        lo = mid + 1;
                else
                        hi = mid - 1;
        }
        return -1;
}

/*
 * The members of group g as the meta-iteration sees them, plus, optionally, job sp (training
 * tt in g's pool, on candidate node ids c_ids, some of which may be new) into mj[]; idx holds
 * the node indexes. Rates are the members' own. Returns the member count; *R the node count.
 */
static int meta_jobs(const loom_sched *s, const group *g, const loom_job_spec *sp, loom_us tt,
                     const loom_node_id *c_ids, int c_n, loom_meta_job *mj, int *rates,
                     int (*idx)[LOOM_MAX_JOB_NODES], int *R)
{
        int n = 0;
        *R = g->n_rnodes;
        for (int i = 0; i < g->n_members; i++, n++) {
                const job *j = g->members[i];
                mj[n] = (loom_meta_job){.t_roll = j->spec.t_roll,
                                        .t_train = loom__train_in(s, g, j),
                                        .t_sync = j->spec.t_sync,
                                        .n_nodes = j->n_rnodes,
                                        .nodes = idx[n],
                                        .t_switch = j->spec.t_switch};
                loom__tail_plan(s, &j->spec, &mj[n].t_head, &mj[n].t_pen);
                rates[n] = j->rate;
                for (int k = 0; k < j->n_rnodes; k++)
                        idx[n][k] = local_index(g, j->rnodes[k]);
        }
        if (sp) {
                mj[n] = (loom_meta_job){.t_roll = sp->t_roll,
                                        .t_train = tt,
                                        .t_sync = sp->t_sync,
                                        .n_nodes = c_n,
                                        .nodes = idx[n],
                                        .t_switch = sp->t_switch};
                loom__tail_plan(s, sp, &mj[n].t_head, &mj[n].t_pen);
                rates[n] = 1;
                for (int k = 0; k < c_n; k++) {
                        int li = local_index(g, c_ids[k]);
                        idx[n][k] = li >= 0 ? li : (*R)++;
                }
                n++;
        }
        return n;
}

/* T_meta of group g with, optionally, one more member at rate 1. Simulates the round robin. */
static int meta_with(const loom_sched *s, const group *g, const loom_job_spec *sp, loom_us tt,
                     const loom_node_id *c_ids, int c_n, loom_us *t_meta)
{
        loom_meta_job mj[MAXM];
        int idx[MAXM][LOOM_MAX_JOB_NODES], R, rates[MAXM];
        int n = meta_jobs(s, g, sp, tt, c_ids, c_n, mj, rates, idx, &R);
        return loom_meta_eval(mj, rates, n, R, s->policy.warm_switch, t_meta, NULL, NULL);
}

int loom__group_meta(const loom_sched *s, const group *g, loom_us *t_meta)
{
        if (g->n_members == 0) {
                *t_meta = 0;
                return 0;
        }
        if (g->t_load < g->t_cycle && g->max_switch == 0 && g->n_coupled == 0) {
                *t_meta = g->t_cycle; /* Theorem 1 */
                return 0;
        }
        return meta_with(s, g, NULL, 0, NULL, 0, t_meta);
}

/* The member whose SLO binds first (smallest budget), for messages. */
static const job *tightest_member(const group *g)
{
        const job *t = NULL;
        for (int i = 0; i < g->n_members; i++)
                if (!t || g->members[i]->slo_budget < t->slo_budget)
                        t = g->members[i];
        return t;
}

static void slo_why(const search *x, const group *g, loom_us t_meta, char *why, size_t n)
{
        const job *t = tightest_member(g);
        char lab[LOOM_JOB_ID_MAX + 8];
        if (!t || x->budget < t->slo_budget)
                snprintf(why, n, "T_meta %.1f s would exceed the new job's SLO bound %.1f s",
                         loom_us_to_s(t_meta), loom_us_to_s(x->budget));
        else
                snprintf(why, n, "T_meta %.1f s would exceed job %s's SLO bound %.1f s",
                         loom_us_to_s(t_meta), job_label(t, lab, sizeof lab),
                         loom_us_to_s(t->slo_budget));
}

/* Seconds a job with `iterations` left runs at period t_meta; unbounded jobs run forever. */
static double run_left(int64_t iterations, loom_us t_meta)
{
        return iterations > 0 ? (double)iterations * loom_us_to_s(t_meta) : 1e18;
}

/* The lifetime keys of candidate c at its new period (a member of rate r runs an iteration
 * every T_meta / r on average). */
static void lifetime(const search *x, cand *c)
{
        const group *g = c->g;
        double horizon = 0;
        for (int i = 0; i < g->n_members; i++) {
                const job *j = g->members[i];
                int64_t left = j->spec.iterations - j->iterations_done;
                double l = run_left(j->spec.iterations > 0 && left < 1 ? 1 : left, c->t_meta);
                if (c->rates[i] > 1)
                        l /= c->rates[i];
                if (l > horizon)
                        horizon = l;
        }
        double mine = run_left(x->spec->iterations, c->t_meta);
        if (c->rate > 1)
                mine /= c->rate;
        c->horizon = horizon;
        c->outlive = mine > horizon ? mine - horizon : 0;
}

/* Whether this search may run members at rates > 1: loom's placer under policy multirate
 * (the baselines stay single-rate). */
static bool multirate(const search *x)
{
        return x->s->policy.multirate && x->s->policy.placer == LOOM_PLACER_LOOM;
}

/* What a candidate provisions: its new rollout nodes, a lone group's planned ones, and the
 * training nodes a grown pool adds (policy.pool_grow). */
static double cand_cost(const search *x, const cand *c)
{
        int n = c->n_new + (c->g && c->g->lone ? c->g->n_rnodes : 0);
        return n * x->s->price[LOOM_POOL_ROLLOUT] +
               (c->g ? c->g->grown * x->s->price[LOOM_POOL_TRAIN] : 0);
}

/*
 * Simulations of one candidate's rate search at most (evaluate_multi): META_ROUNDS in a deep
 * search, one in a wide search, which a cluster with more than policy.rate_search_open open
 * groups (default LOOM_RATE_SEARCH_OPEN) runs so that a decision costs one simulation per candidate
 * at most. Most searches that succeed do so at their first simulation, and most that take
 * several end rejected; a wide search starts at the least rates the bounds allow, where a deep
 * one climbs to them round by round (docs/scheduling.md, Cost of a decision, has what a wide
 * search changes).
 */
enum { META_ROUNDS = 6 };

static int search_rounds(const loom_sched *s)
{
        return s->n_open > loom_policy_rate_search_open(&s->policy) ? 1 : META_ROUNDS;
}

static loom_us div_up(loom_us a, loom_us b)
{
        return (a + b - 1) / b;
}

/*
 * A member starting at a rate > 1 (new, or re-rated: it starts a fresh round) may wait up to a
 * meta-iteration for its first training slot; every later iteration ends within its longest
 * gap. A job with `left` iterations to go must still meet its budget over them:
 * T_meta + (left - 1) gap <= left budget. A new member at rate 1 joins the round after the one
 * in progress, so its first iteration may take up to two meta-iterations (first_round_ok).
 * Unbounded jobs amortise the first wait.
 */
static bool first_round_ok(int64_t left, loom_us t_meta, loom_us budget)
{
        return left <= 0 || (double)(left + 1) * (double)t_meta <= (double)left * (double)budget;
}

/*
 * policy.join_wait: a job joining a group starts in the first round no member has trained in
 * yet, so a member already in that round (rolling out, or waiting to train) may wait for the
 * new job's phases before its own training: its iteration in progress may take up to a
 * meta-iteration more, once. A member with `left` iterations to go absorbs it if
 * (left + 1) T_meta <= left budget, as a new member does (first_round_ok). Only members in
 * their last LOOM_JOIN_WAIT_LEFT iterations are held to it: a longer run amortises the one
 * extra round, and holding every member to it rejects joins whose T_meta is within a percent
 * of a member's budget for a wait that run never notices.
 */
static bool join_round_ok(int64_t left, loom_us t_meta, loom_us budget)
{
        return left <= 0 || left > LOOM_JOIN_WAIT_LEFT || first_round_ok(left, t_meta, budget);
}

/* Every member of g absorbs the extra round a join at T_meta t_meta may cost it. */
static bool members_round_ok(const group *g, loom_us t_meta)
{
        for (int i = 0; i < g->n_members; i++) {
                const job *j = g->members[i];
                int64_t left = j->spec.iterations - j->iterations_done;
                if (j->spec.iterations > 0 &&
                    !join_round_ok(left > 1 ? left : 1, t_meta, j->slo_budget))
                        return false;
        }
        return true;
}

static bool first_ok(int64_t left, int rate, int orig, loom_us t_meta, loom_us gap, loom_us budget,
                     bool join_wait)
{
        if (rate == 1 && orig == 0)
                return first_round_ok(left, t_meta, budget);
        if (join_wait && orig > 0 && rate == orig)
                return join_round_ok(left, t_meta, budget);
        if (left <= 0 || rate <= 1 || rate == orig)
                return true;
        return (double)t_meta + (double)(left - 1) * (double)gap <= (double)left * (double)budget;
}

/* The lower bound on T_meta the rate searches evaluate many times per candidate: the
 * rate-weighted cycle and load. */
static loom_us rate_bound(const loom_meta_job *mj, const int *rate, int n, int R)
{
        loom_us c = loom_meta_t_cycle_r(mj, rate, n), l = loom_meta_t_load_r(mj, rate, n, R);
        return c > l ? c : l;
}

/*
 * Raise rate[] to what the lower bounds alone demand: T_meta >= the weighted cycle and load,
 * and member i needs rate >= T_meta / budget_i; repeated to a fixed point (rates only grow, so
 * every feasible assignment is at least this one). False, with *bad the culprit, when a rate
 * would pass LOOM_MAX_RATE or the slots LOOM_META_MAX_SLOTS: no simulation can help then.
 */
static bool rate_floor(const loom_meta_job *mj, int *rate, const loom_us *budget, int n, int R,
                       int *bad)
{
        for (int round = 0; round < 16; round++) {
                loom_us t = rate_bound(mj, rate, n, R);
                bool raised = false;
                int slots = 0;
                for (int i = 0; i < n; i++) {
                        /* need = ceil(t / budget) > r exactly when t > r budget: most members
                         * need no raise, and then no division */
                        if (t > LOOM_MAX_RATE * budget[i]) {
                                *bad = i;
                                return false;
                        }
                        if (t > rate[i] * budget[i]) {
                                rate[i] = (int)div_up(t, budget[i]);
                                raised = true;
                        }
                        slots += rate[i];
                }
                if (slots > LOOM_META_MAX_SLOTS) {
                        *bad = n - 1;
                        return false;
                }
                if (!raised)
                        return true;
        }
        return true;
}

/*
 * What any successful rates of a candidate must meet, apart from its simulation:
 *  - the mean: q_i budget_i >= T_meta >= max(weighted cycle, weighted load) (rate_floor);
 *  - the gap: member i's q_i repeats cut the slot cycle into q_i stretches, one of which holds
 *    at least ceil(q_k / q_i) of member k's trainings, and i's gap across it is at least
 *    t_train_i plus those; it may be at most LOOM_GAP_FACTOR budget_i, so q_k <= per_ik q_i
 *    with per_ik = (LOOM_GAP_FACTOR budget_i - t_train_i) / t_train_k (rounded down);
 *  - a member's own iteration (its gap's least) within LOOM_GAP_FACTOR budget_i.
 * Each asks some rate to be at least a monotone function of the rates, so the least rates at
 * or above given ones that meet all of them are a fixed point reached from below.
 */
typedef struct rate_need {
        const loom_meta_job *mj;
        const loom_us *budget;
        int n, R;
        bool none;         /* a member's own iteration, or two trainings, break a gap */
        loom_us cap[MAXM]; /* LOOM_GAP_FACTOR budget_i - t_train_i: the rest of i's gap */
} rate_need;

static void rate_need_init(rate_need *rn, const loom_meta_job *mj, const loom_us *budget, int n,
                           int R)
{
        *rn = (rate_need){.mj = mj, .budget = budget, .n = n, .R = R};
        loom_us train_max = 0, train_next = 0; /* the two longest trainings */
        for (int k = 0; k < n; k++) {
                if (mj[k].t_train > train_max) {
                        train_next = train_max;
                        train_max = mj[k].t_train;
                } else if (mj[k].t_train > train_next) {
                        train_next = mj[k].t_train;
                }
        }
        for (int i = 0; i < n; i++) {
                loom_us gap = LOOM_GAP_FACTOR * budget[i];
                rn->cap[i] = gap - mj[i].t_train;
                rn->none |= mj[i].t_roll + mj[i].t_train + mj[i].t_sync > gap;
                /* per_ik >= 1 for every other k: the longest other training fits the rest */
                loom_us other = mj[i].t_train == train_max ? train_next : train_max;
                rn->none |= other > 0 && rn->cap[i] < other;
        }
}

/*
 * Raise q[] to the least rates at or above it that rn asks for. False when there are none
 * within LOOM_MAX_RATE and LOOM_META_MAX_SLOTS: no rates work. Each raise is applied at once,
 * and the bound on T_meta (rate_bound's cycle, training load and node loads) follows it
 * incrementally: every raise stays at or below the least fixed point, so the rates reach it in
 * fewer passes than by raising all members against the previous pass's bound.
 */
static bool rates_close(const rate_need *rn, int *q)
{
        enum { NODES = 64 };
        if (rn->none)
                return false;
        const loom_meta_job *mj = rn->mj;
        int n = rn->n, R = rn->R, slots = 0;
        bool inc = R <= NODES; /* else rate_bound again after each raise */
        loom_us load[NODES], train = 0, t = 0;
        for (int r = 0; inc && r < R; r++)
                load[r] = 0;
        for (int i = 0; i < n; i++) {
                slots += q[i];
                loom_us r = q[i], solo = r * (mj[i].t_roll + mj[i].t_train + mj[i].t_sync);
                t = solo > t ? solo : t;
                train += r * mj[i].t_train;
                for (int k = 0; inc && k < mj[i].n_nodes; k++)
                        if (mj[i].nodes[k] >= 0 && mj[i].nodes[k] < R)
                                load[mj[i].nodes[k]] += r * loom_meta_occ(&mj[i], k);
        }
        if (slots > LOOM_META_MAX_SLOTS)
                return false;
        t = train > t ? train : t;
        for (int r = 0; inc && r < R; r++)
                t = load[r] > t ? load[r] : t;
        if (!inc)
                t = rate_bound(mj, q, n, R);
        /* each pass raises a rate or stops; rates stop at LOOM_MAX_RATE */
        for (bool raised = true; raised;) {
                raised = false;
                for (int i = 0; i < n; i++) {
                        loom_us need = t > q[i] * rn->budget[i] ? div_up(t, rn->budget[i]) : q[i];
                        for (int k = 0; k < n; k++) {
                                /* per_ik >= 1 (not none), so only q_k > q_i can break it;
                                 * q_k > per_ik q_i exactly when ceil(q_k / q_i) t_train_k
                                 * passes cap_i, which needs no 64-bit division */
                                if (k == i || q[k] <= q[i] || mj[k].t_train <= 0 ||
                                    (q[k] + q[i] - 1) / q[i] * mj[k].t_train <= rn->cap[i])
                                        continue;
                                loom_us per = rn->cap[i] / mj[k].t_train;
                                if (div_up(q[k], per) > need)
                                        need = div_up(q[k], per);
                        }
                        if (need > LOOM_MAX_RATE)
                                return false;
                        if (need <= q[i])
                                continue;
                        loom_us d = need - q[i];
                        slots += (int)d;
                        if (slots > LOOM_META_MAX_SLOTS)
                                return false;
                        q[i] = (int)need;
                        raised = true;
                        if (!inc) {
                                t = rate_bound(mj, q, n, R);
                                continue;
                        }
                        loom_us solo = need * (mj[i].t_roll + mj[i].t_train + mj[i].t_sync);
                        train += d * mj[i].t_train;
                        t = solo > t ? solo : t;
                        t = train > t ? train : t;
                        for (int k = 0; k < mj[i].n_nodes; k++) {
                                int r = mj[i].nodes[k];
                                if (r < 0 || r >= R)
                                        continue;
                                load[r] += d * loom_meta_occ(&mj[i], k);
                                t = load[r] > t ? load[r] : t;
                        }
                }
        }
        return true;
}

/*
 * Whether the last simulation of evaluate_multi's rate search, at rates rate[], can succeed:
 * those rates are final, so they must meet rn as they are (no member's mean bound or pigeonhole
 * gap bound asks for more), and no member's gap bound from the slot order
 * (loom_meta_gap_bound) may pass LOOM_GAP_FACTOR budgets. t is rate_bound at those rates. False
 * only when the simulation would end the search in an SLO rejection.
 */
static bool rates_final_ok(const rate_need *rn, const int *rate, loom_us t)
{
        const loom_meta_job *mj = rn->mj;
        int n = rn->n;
        if (rn->none)
                return false;
        for (int i = 0; i < n; i++) {
                if (t > rate[i] * rn->budget[i])
                        return false;
                for (int k = 0; k < n; k++)
                        if (k != i && rate[k] > rate[i] && mj[k].t_train > 0 &&
                            (rate[k] + rate[i] - 1) / rate[i] * mj[k].t_train > rn->cap[i])
                                return false;
        }
        loom_us lb[MAXM];
        if (loom_meta_gap_bound(mj, rate, n, lb))
                return true; /* no bound: let the simulation say */
        for (int i = 0; i < n; i++)
                if (lb[i] > LOOM_GAP_FACTOR * rn->budget[i])
                        return false;
        return true;
}

/*
 * Whether candidate c (a packing in group x->lr_g) has the least rates rates_may_fit found for
 * the job on new nodes. Its constraints differ from those only by the job's rollout load on the
 * existing nodes it takes, so every rate vector meeting c's meets theirs, and if at those rates
 * each such node, with the job, stays within their bound on T_meta, the bound and every
 * constraint are the same there: the least rates are equal, and so is rates_final_ok's verdict
 * (its gap bounds depend on the rates and phase times, not on the pinning).
 */
static bool same_least_rates(const search *x, const cand *c)
{
        const group *g = c->g;
        for (int k = 0; k < c->n; k++) {
                loom_us mine = (loom_us)x->lr_rate[g->n_members] * loom__roll_occ(x->s, x->spec, k);
                int li = local_index(g, c->ids[k]);
                if (li >= 0 && x->lr_load[li] + mine > x->lr_bound)
                        return false;
        }
        return true;
}

/*
 * Multi-rate evaluation of candidate c (memory already checked): the job starts at the least
 * rate its mean iteration could meet its budget at (T_meta >= the group's weighted cycle), then
 * every member whose mean T_meta / r breaks its budget, or whose longest gap passes
 * LOOM_GAP_FACTOR budgets, is raised to the rate that would meet it at this T_meta, and the
 * group is simulated again, until every member holds (feasible) or a rate would pass
 * LOOM_MAX_RATE, the slots LOOM_META_MAX_SLOTS, or search_rounds() simulations pass (SLO
 * rejection). A wide search (one simulation) starts at the least rates the mean and pigeonhole
 * gap bounds allow (rates_close) instead. Rates only grow: every member keeps at least its
 * current throughput share.
 */
static int evaluate_multi(search *x, cand *c, loom_us tt)
{
        const loom_sched *s = x->s;
        const group *g = c->g;
        const loom_job_spec *sp = x->spec;
        int rounds = search_rounds(s);
        bool wide_pruned = x->prune && rounds == 1;
        if (wide_pruned && x->lr_g == g && !x->lr_final_ok && same_least_rates(x, c)) {
                /* its one simulation could only reject it: rates_final_ok fails at its rates */
                c->rate = x->lr_rate[g->n_members];
                c->reject = LOOM_REJECT_SLO; /* not recorded: pruning */
                return 0;
        }
        loom_meta_job mj[MAXM];
        int idx[MAXM][LOOM_MAX_JOB_NODES], R, rate[MAXM];
        loom_us gaps[MAXM], budget[MAXM];
        int n = meta_jobs(s, g, sp, tt, c->ids, c->n, mj, rate, idx, &R);
        for (int i = 0; i < n - 1; i++)
                budget[i] = g->members[i]->slo_budget;
        budget[n - 1] = x->budget;
        int64_t left[MAXM];
        int orig[MAXM];
        for (int i = 0; i < n; i++) {
                const job *j = i < n - 1 ? g->members[i] : NULL;
                int64_t it = j ? j->spec.iterations - j->iterations_done : sp->iterations;
                left[i] = (j ? j->spec.iterations : sp->iterations) > 0 ? (it > 1 ? it : 1) : 0;
                orig[i] = j ? rate[i] : 0;
                gaps[i] = 0;
        }
        loom_us lo = g->t_cycle > 0 ? div_up(g->t_cycle, x->budget) : 1;
        rate[n - 1] = lo > 1 ? (int)(lo < LOOM_MAX_RATE ? lo : LOOM_MAX_RATE) : 1;
        loom_us t_meta = 0;
        int bad = n - 1; /* until a simulation says otherwise */
        rate_need rn;
        rate_need_init(&rn, mj, budget, n, R);
        /* a wide search has one simulation: at the least rates the bounds allow. When pruned
         * it goes straight to them: rates_close's fixed point meets rate_floor's bound too, so
         * the floor only names the culprit an explained decision prints. */
        bool floor_ok = wide_pruned || rate_floor(mj, rate, budget, n, R, &bad);
        if (!floor_ok || (rounds == 1 && !rates_close(&rn, rate))) {
                /* no rates can work: not even the lower bounds on T_meta and the gaps */
                c->rate = rate[n - 1];
                c->t_meta = loom_meta_t_cycle_r(mj, rate, n);
                c->reject = LOOM_REJECT_SLO;
                if (!x->d->record_candidates)
                        return 0;
                char lab[LOOM_JOB_ID_MAX + 8];
                if (floor_ok)
                        snprintf(c->why, sizeof c->why,
                                 "no rates fit: the bounds on T_meta and on the gaps leave none "
                                 "within %d iterations per meta-iteration and %d slots",
                                 LOOM_MAX_RATE, LOOM_META_MAX_SLOTS);
                else
                        snprintf(c->why, sizeof c->why,
                                 "no rates fit: %s would need > %d iterations per "
                                 "meta-iteration, or > %d slots",
                                 bad == n - 1 ? "the new job"
                                              : job_label(g->members[bad], lab, sizeof lab),
                                 LOOM_MAX_RATE, LOOM_META_MAX_SLOTS);
                return 0;
        }
        for (int round = 0; round < rounds; round++) {
                int slots = 0;
                for (int i = 0; i < n; i++)
                        slots += rate[i];
                if (slots > LOOM_META_MAX_SLOTS)
                        break;
                if (x->prune && round == rounds - 1 &&
                    !rates_final_ok(&rn, rate, rate_bound(mj, rate, n, R)))
                        break; /* bad >= 0, the last round's culprit: rejected */
                int rc = loom_meta_eval(mj, rate, n, R, s->policy.warm_switch, &t_meta, gaps, NULL);
                if (rc)
                        return rc;
                bad = -1;
                bool raised = false, stuck = false;
                for (int i = 0; i < n; i++) {
                        loom_us need = div_up(t_meta, budget[i]);
                        bool gap = gaps[i] > LOOM_GAP_FACTOR * budget[i];
                        if (need <= rate[i] && !gap &&
                            !first_ok(left[i], rate[i], orig[i], t_meta, gaps[i], budget[i],
                                      s->policy.join_wait)) {
                                bad = i; /* no rate shortens its first iteration */
                                stuck = true;
                                continue;
                        }
                        if (need <= rate[i] && !gap)
                                continue;
                        bad = i;
                        if (need <= rate[i])
                                need = rate[i] + 1; /* more, shorter waits */
                        if (need > LOOM_MAX_RATE) {
                                stuck = true;
                                continue;
                        }
                        rate[i] = (int)need;
                        raised = true;
                }
                if (bad < 0 || stuck || !raised)
                        break;
        }
        c->t_meta = t_meta;
        loom_us t_load = loom_meta_t_load_r(mj, rate, n, R);
        c->util = t_meta > 0 ? (double)t_load / (double)t_meta : 0;
        c->rate = rate[n - 1];
        loom_us slack = INT64_MAX;
        for (int i = 0; i < n; i++) {
                if (i < n - 1)
                        c->rates[i] = (int8_t)rate[i];
                if (rate[i] * budget[i] - t_meta < slack)
                        slack = rate[i] * budget[i] - t_meta;
        }
        c->slack = slack;
        lifetime(x, c);
        if (bad >= 0) {
                c->reject = LOOM_REJECT_SLO;
                if (!x->d->record_candidates)
                        return 0; /* formatting costs more than the check */
                char lab[LOOM_JOB_ID_MAX + 8];
                const char *who =
                    bad == n - 1 ? "the new job" : job_label(g->members[bad], lab, sizeof lab);
                snprintf(c->why, sizeof c->why,
                         "T_meta %.1f s: %s at rate %d averages %.1f s (SLO bound %.1f s), "
                         "longest gap %.1f s",
                         loom_us_to_s(t_meta), bad == n - 1 ? "the new job" : who, rate[bad],
                         loom_us_to_s(t_meta) / rate[bad], loom_us_to_s(budget[bad]),
                         loom_us_to_s(gaps[bad]));
        }
        return 0;
}

/*
 * Whether a rollout node of candidate c is too dense for any rates (pruning only). A member of
 * rate r rolls out r t_roll on its nodes per meta-iteration and needs r >= T_meta / budget, so
 * a node carries at least T_meta times its density, the sum of t_roll / budget over the members
 * pinned to it: above 1 (the job included) no rates fit, and the rate search would fail.
 * Checked before a rate search is set up: most of the candidates whose rates rate_floor cannot
 * bound fail here.
 */
static bool node_too_dense(search *x, const cand *c)
{
        const group *g = c->g;
        if (x->nd_g != g) {
                for (int r = 0; r < g->n_rnodes; r++)
                        x->nd[r] = 0;
                for (int i = 0; i < g->n_members; i++) {
                        const job *j = g->members[i];
                        /* its first node carries its tail's share too */
                        double d0 =
                            (double)loom__roll_occ(x->s, &j->spec, 0) / (double)j->slo_budget;
                        double d1 = j->n_rnodes > 1 ? (double)loom__roll_occ(x->s, &j->spec, 1) /
                                                          (double)j->slo_budget
                                                    : d0;
                        for (int k = 0; k < j->n_rnodes; k++) {
                                int li = local_index(g, j->rnodes[k]);
                                if (li >= 0)
                                        x->nd[li] += k ? d1 : d0;
                        }
                }
                x->nd_g = g;
        }
        double m0 = (double)loom__roll_occ(x->s, x->spec, 0) / (double)x->budget;
        double m1 = c->n > 1 ? (double)loom__roll_occ(x->s, x->spec, 1) / (double)x->budget : m0;
        for (int k = 0; k < c->n; k++) {
                double mine = k ? m1 : m0;
                int li = local_index(g, c->ids[k]);
                if (li >= 0 && x->nd[li] + mine > 1.0 + 1e-9)
                        return true;
        }
        return false;
}

/* Evaluate candidate c in group g (memory, SLO, cost, T_meta, utilisation). */
static int evaluate(search *x, cand *c)
{
        const loom_sched *s = x->s;
        const group *g = c->g;
        const loom_job_spec *sp = x->spec;
        uint64_t host = s->cluster.host_mem_bytes;
        loom_us tt = loom_group_train_time(sp->t_train, sp->train_gpus, g->train_gpus,
                                           s->policy.train_scaling_efficiency);
        c->cost = cand_cost(x, c);
        c->reject = LOOM_REJECT_NONE;
        c->t_meta = 0;
        c->util = 0;
        c->rate = 1;
        for (int i = 0; i < g->n_members; i++)
                c->rates[i] = (int8_t)g->members[i]->rate;
        bool switchless = g->max_switch == 0 && loom__switch(s, sp) == 0;

        loom_us occ = loom__roll_occ(s, sp, 0);
        loom_us max_load = occ; /* a new node carries only the job */
        for (int i = 0; i < g->n_rnodes; i++) {
                const rnode *r = g->rnodes[i];
                const loom_node_id *at =
                    bsearch(&r->id, c->ids, (size_t)c->n, sizeof(loom_node_id), cmp_node_id);
                bool in = at != NULL;
                if (in && r->mem_used + sp->mem_rollout > host) {
                        c->reject = LOOM_REJECT_MEMORY;
                        snprintf(c->why, sizeof c->why,
                                 "rollout node %u would hold %.1f GB of working sets > %.1f GB",
                                 (unsigned)r->id, (double)(r->mem_used + sp->mem_rollout) / 1e9,
                                 (double)host / 1e9);
                        return 0;
                }
                loom_us load = r->load + (in ? loom__roll_occ(s, sp, (int)(at - c->ids)) : 0);
                if (load > max_load)
                        max_load = load;
        }
        if (multirate(x) && checks_slo(s->policy.placer)) {
                if (x->prune && node_too_dense(x, c)) {
                        c->reject = LOOM_REJECT_SLO; /* not recorded: pruning */
                        return 0;
                }
                /* single rate first: where it is feasible it is today's answer */
                bool plain = g->n_coupled == 0 && switchless && c->n == 1 && sp->t_sync == 0 &&
                             occ == sp->t_roll;
                loom_us solo_in = sp->t_roll + tt + sp->t_sync;
                loom_us t_cycle = g->t_cycle > solo_in ? g->t_cycle : solo_in;
                loom_us sum_train = g->sum_train + tt;
                loom_us t_load = sum_train > max_load ? sum_train : max_load;
                loom_us budget = g->min_budget < x->budget ? g->min_budget : x->budget;
                if (!(plain && t_load < t_cycle && t_cycle <= budget))
                        return evaluate_multi(x, c, tt);
        }
        loom_us sum_train = g->sum_train + tt;
        loom_us t_load = sum_train > max_load ? sum_train : max_load;
        loom_us solo_in = sp->t_roll + tt + sp->t_sync;
        loom_us t_cycle = g->t_cycle > solo_in ? g->t_cycle : solo_in;
        loom_us t_meta;
        bool coupled = g->n_coupled > 0 || c->n > 1 || sp->t_sync > 0 || occ != sp->t_roll;
        if (t_load < t_cycle && switchless && !coupled) {
                t_meta = t_cycle; /* Theorem 1: an unsaturated group runs at its cycle */
        } else {
                int rc = meta_with(s, g, sp, tt, c->ids, c->n, &t_meta);
                if (rc)
                        return rc;
        }
        c->t_meta = t_meta;
        c->util = t_meta > 0 ? (double)t_load / (double)t_meta : 0;
        loom_us budget = g->min_budget < x->budget ? g->min_budget : x->budget;
        c->slack = budget - t_meta;
        lifetime(x, c);
        if (checks_slo(s->policy.placer) && t_meta > budget) {
                c->reject = LOOM_REJECT_SLO;
                slo_why(x, g, t_meta, c->why, sizeof c->why);
        } else if (s->policy.placer == LOOM_PLACER_LOOM && s->policy.join_wait &&
                   !members_round_ok(g, t_meta)) {
                c->reject = LOOM_REJECT_SLO;
                snprintf(c->why, sizeof c->why,
                         "T_meta %.1f s: a member in its last %d iterations cannot absorb the "
                         "round the join may add to its iteration in progress (policy.join_wait)",
                         loom_us_to_s(t_meta), LOOM_JOIN_WAIT_LEFT);
        } else if (s->policy.placer == LOOM_PLACER_LOOM &&
                   !first_round_ok(sp->iterations, t_meta, x->budget)) {
                c->reject = LOOM_REJECT_SLO;
                snprintf(c->why, sizeof c->why,
                         "its first iteration may wait out the round in progress: %lld x T_meta "
                         "%.1f s > its budget over %lld iterations",
                         (long long)sp->iterations + 1, loom_us_to_s(t_meta),
                         (long long)sp->iterations);
        }
        return 0;
}

/* Sort a group's rollout nodes by (load, id): the least-loaded first. */
static int cmp_load(const void *a, const void *b)
{
        const rnode *x = *(rnode *const *)a, *y = *(rnode *const *)b;
        if (x->load != y->load)
                return x->load < y->load ? -1 : 1;
        return (x->id > y->id) - (x->id < y->id);
}

static void finish_ids(const loom_sched *s, cand *c, int n_existing, int k)
{
        c->n_new = k - n_existing;
        for (int i = 0; i < c->n_new; i++)
                c->ids[n_existing + i] = s->next_rnode + (loom_node_id)i;
        c->n = k;
        qsort(c->ids, (size_t)k, sizeof(loom_node_id), cmp_node_id);
}

/* Direct-packing candidates of g, deduplicated, into out[]; returns how many. */
static int gen_direct(const search *x, const group *g, rnode **sorted, cand *out)
{
        int k = x->k, R = g->n_rnodes, n = 0;
        for (int i = 0; i < R; i++) {
                cand c = {.g = g, .kind = LOOM_DECISION_DIRECT_PACK};
                int m = 0;
                c.ids[m++] = g->rnodes[i]->id;
                for (int j = 0; j < R && m < k; j++)
                        if (sorted[j] != g->rnodes[i])
                                c.ids[m++] = sorted[j]->id;
                finish_ids(x->s, &c, m, k);
                bool dup = false;
                for (int p = 0; p < n && !dup; p++)
                        dup = !memcmp(out[p].ids, c.ids, sizeof(loom_node_id) * (size_t)k);
                if (!dup)
                        out[n++] = c;
        }
        return n;
}

static int consider(search *x, cand *c)
{
        /* Multi-rate evaluation simulates: a candidate dearer than a feasible one already
         * found cannot win (cost is the first key), so it is not simulated. */
        if (multirate(x) && c->g && x->have_best && cand_cost(x, c) > x->best.cost + 1e-9) {
                c->cost = cand_cost(x, c);
                c->rate = 1;
                c->reject = LOOM_REJECT_COSTLIER;
                snprintf(c->why, sizeof c->why, "dearer than a feasible candidate: not simulated");
                return record(x, c);
        }
        int rc = c->g ? evaluate(x, c) : 0; /* isolated provisioning is priced by isolated() */
        if (rc)
                return rc;
        if (c->g && c->reject == LOOM_REJECT_NONE &&
            (double)c->slack < x->margin * (double)c->t_meta) {
                c->reject = LOOM_REJECT_SLO;
                snprintf(c->why, sizeof c->why,
                         "a move must leave every member %.0f%% of T_meta %.1f s as slack",
                         100 * x->margin, loom_us_to_s(c->t_meta));
        }
        if (c->reject == LOOM_REJECT_NONE) {
                loom_us it =
                    !c->g ? (c->lone ? loom__lone_iteration(x->s, x->spec, c->tnodes) : c->t_meta)
                    : c->rate > 1 ? c->t_meta / c->rate
                                  : c->t_meta;
                c->per_iter = c->cost * (double)it;
                if (!x->have_best || better(c, &x->best)) {
                        cand prev = x->best;
                        bool had = x->have_best;
                        x->best = *c;
                        x->have_best = true;
                        if (c->g && c->g->grown) { /* the view is the search's scratch */
                                x->best_view = *c->g;
                                x->best.g = &x->best_view;
                        }
                        if (had) {
                                prev.reject = LOOM_REJECT_COSTLIER;
                                snprintf(prev.why, sizeof prev.why, "feasible but not the best");
                                return record(x, &prev) ? LOOM_ENOMEM : 0;
                        }
                        return 0;
                }
                c->reject = LOOM_REJECT_COSTLIER;
                snprintf(c->why, sizeof c->why, "feasible but not the best");
        }
        return record(x, c);
}

/*
 * O(1) bounds: can any placement in g possibly work? T_meta is at least the new cycle and at
 * least the new training load, so if either exceeds the tightest SLO budget, or the training
 * nodes' memory overflows, no candidate can. Returns LOOM_REJECT_NONE if g is worth searching.
 * The message is written only when why is not NULL (formatting costs more than the check).
 */
static loom_reject group_may_fit(search *x, const open_group *o, char *why, size_t n)
{
        const loom_sched *s = x->s;
        const loom_job_spec *sp = x->spec;
        uint64_t mt = loom_group_train_mem(sp->mem_train, sp->train_gpus, o->train_gpus);
        if (o->train_mem_used + mt > s->cluster.host_mem_bytes) {
                if (why)
                        snprintf(why, n,
                                 "training nodes would hold %.1f GB of working sets > %.1f GB",
                                 (double)(o->train_mem_used + mt) / 1e9,
                                 (double)s->cluster.host_mem_bytes / 1e9);
                return LOOM_REJECT_MEMORY;
        }
        if (!checks_slo(s->policy.placer))
                return LOOM_REJECT_NONE;
        loom_us tt = loom_group_train_time(sp->t_train, sp->train_gpus, o->train_gpus,
                                           s->policy.train_scaling_efficiency);
        loom_us solo_in = sp->t_roll + tt + sp->t_sync;
        if (multirate(x)) {
                /* Rates are free: member k needs r_k >= T_meta / budget_k, so the training pool
                 * carries sum r_k t_train_k >= T_meta sum t_train_k / budget_k: the density
                 * must stay <= 1. And the job's own chain makes its mean >= its solo_in. */
                double dens = o->density + (double)tt / (double)x->budget;
                /* Between two trainings of any member lies another member's training: the
                 * gap bound (one budget) needs tt_k + tt_new within both budgets. */
                bool other_ok =
                    solo_in <= x->budget && dens <= 1.0 && o->t_cycle <= LOOM_MAX_RATE * x->budget;
                if (!other_ok && !why)
                        return LOOM_REJECT_SLO;
                bool gap_ok = o->max_train + tt <= LOOM_GAP_FACTOR * x->budget &&
                              (LOOM_GAP_FACTOR - 1) * o->max_train + o->gap_slack >= tt;
                if (other_ok && gap_ok)
                        return LOOM_REJECT_NONE;
                if (why)
                        snprintf(why, n,
                                 solo_in > x->budget ? "the job's iteration in this pool, %.1f s, "
                                                       "exceeds its SLO bound %.1f s"
                                 : !gap_ok ? "a member's training and the job's would not fit "
                                             "within one SLO bound (%.1f s; %.1f s)"
                                           : "at their SLO rates the members would need %.0f%% "
                                             "of the training pool (%.1f s)",
                                 solo_in > x->budget ? loom_us_to_s(solo_in)
                                 : !gap_ok           ? loom_us_to_s(o->max_train + tt)
                                                     : 100.0 * dens,
                                 loom_us_to_s(x->budget));
                return LOOM_REJECT_SLO;
        }
        loom_us lb = o->t_cycle > solo_in ? o->t_cycle : solo_in;
        if (o->sum_train + tt > lb)
                lb = o->sum_train + tt;
        loom_us budget = o->min_budget < x->budget ? o->min_budget : x->budget;
        if (lb > budget) {
                if (why)
                        slo_why(x, o->g, lb, why, n);
                return LOOM_REJECT_SLO;
        }
        return LOOM_REJECT_NONE;
}

/*
 * Whether rate_floor (pruning: rates_close) leaves any rates for the job in g on new rollout
 * nodes: the least loaded placement, so when it fails every candidate in g does. When pruning
 * a wide search it also sets *scale_ok to whether rollout scaling (the job on new nodes) may
 * work: its one simulation is at these least rates, which rates_final_ok must pass.
 */
static bool rates_may_fit(search *x, const group *g, bool *scale_ok)
{
        const loom_sched *s = x->s;
        const loom_job_spec *sp = x->spec;
        loom_meta_job mj[MAXM];
        int idx[MAXM][LOOM_MAX_JOB_NODES], R, rate[MAXM], bad;
        loom_node_id ids[LOOM_MAX_JOB_NODES];
        loom_us budget[MAXM];
        for (int k = 0; k < x->k; k++)
                ids[k] = s->next_rnode + (loom_node_id)k;
        loom_us tt = loom_group_train_time(sp->t_train, sp->train_gpus, g->train_gpus,
                                           s->policy.train_scaling_efficiency);
        int n = meta_jobs(s, g, sp, tt, ids, x->k, mj, rate, idx, &R);
        for (int i = 0; i < n - 1; i++)
                budget[i] = g->members[i]->slo_budget;
        budget[n - 1] = x->budget;
        *scale_ok = true;
        if (!x->prune)
                return rate_floor(mj, rate, budget, n, R, &bad);
        /* what any rates must meet, on the least loaded nodes: no candidate in g does better */
        rate_need rn;
        rate_need_init(&rn, mj, budget, n, R);
        if (!rates_close(&rn, rate))
                return false;
        /* evaluate_multi starts the job at the rate the group's cycle needs and raises the
         * rates to the same least ones (any rates that meet the bounds give the job at least
         * that rate) */
        if (search_rounds(s) == 1) {
                /* what same_least_rates compares the group's direct packings against */
                x->lr_g = g;
                x->lr_bound = rate_bound(mj, rate, n, R);
                x->lr_final_ok = *scale_ok = rates_final_ok(&rn, rate, x->lr_bound);
                memcpy(x->lr_rate, rate, sizeof(int) * (size_t)n);
                for (int r = 0; r < g->n_rnodes; r++)
                        x->lr_load[r] = 0;
                for (int i = 0; i < n - 1; i++)
                        for (int k = 0; k < mj[i].n_nodes; k++)
                                if (mj[i].nodes[k] >= 0 && mj[i].nodes[k] < g->n_rnodes)
                                        x->lr_load[mj[i].nodes[k]] +=
                                            rate[i] * loom_meta_occ(&mj[i], k);
        }
        return true;
}

/* Which of a group's candidates search_group considers: all of them, or (pruning) those at
 * +$0 in a first pass over every group and the dearer ones in a second. */
typedef enum { CANDS_ALL, CANDS_FREE, CANDS_PAID } cand_pass;

/* Generate g's candidates (direct packings, then rollout scaling) and consider those of pass. */
static int search_cands(search *x, const group *g, cand_pass pass)
{
        rnode *sorted[LOOM_MAX_GROUP_ROLLOUT_NODES];
        memcpy(sorted, g->rnodes, sizeof(rnode *) * (size_t)g->n_rnodes);
        qsort(sorted, (size_t)g->n_rnodes, sizeof(rnode *), cmp_load);
        cand cs[LOOM_MAX_GROUP_ROLLOUT_NODES + 1];
        int n = gen_direct(x, g, sorted, cs);
        cand *sc = &cs[n++];
        *sc = (cand){.g = g, .kind = LOOM_DECISION_ROLLOUT_SCALE};
        finish_ids(x->s, sc, 0, x->k);
        for (int i = 0; i < n; i++) {
                bool paid = cand_cost(x, &cs[i]) > 0;
                if ((pass == CANDS_FREE && paid) || (pass == CANDS_PAID && !paid))
                        continue;
                int rc = consider(x, &cs[i]);
                if (rc)
                        return rc;
        }
        return 0;
}

/* Search g's candidates of pass. *paid_next (CANDS_FREE; NULL otherwise): whether the paid pass
 * has candidates in g left to consider, which it has not when no paid packing exists and
 * rollout scaling cannot work (rates_may_fit). */
static int search_group(search *x, const open_group *o, cand_pass pass, bool *paid_next)
{
        const group *g = o->g;
        bool rec = x->d->record_candidates;
        if (g == x->exclude)
                return 0;
        if (pass == CANDS_PAID)
                return search_cands(x, g, pass);
        cand c = {.g = g, .kind = LOOM_DECISION_DIRECT_PACK};
        c.reject = group_may_fit(x, o, rec ? c.why : NULL, sizeof c.why);
        bool scale_ok = true;
        if (c.reject == LOOM_REJECT_NONE && multirate(x) && !rates_may_fit(x, g, &scale_ok)) {
                c.reject = LOOM_REJECT_SLO;
                if (rec)
                        snprintf(c.why, sizeof c.why,
                                 "no rates fit even on new rollout nodes (more than %d iterations "
                                 "per meta-iteration or %d slots)",
                                 LOOM_MAX_RATE, LOOM_META_MAX_SLOTS);
        }
        if (c.reject != LOOM_REJECT_NONE) {
                x->d->groups_pruned_bound++;
                return rec ? record(x, &c) : 0;
        }
        if (paid_next)
                *paid_next = scale_ok || g->lone || g->n_rnodes < x->k;
        return search_cands(x, g, pass);
}

/*
 * policy.pool_grow: x->view becomes g with `grow` more training nodes (the next free ids), its
 * sums as every member would train there. Its rollout nodes are g's own.
 */
static void grown_view(search *x, const group *g, int grow)
{
        const loom_sched *s = x->s;
        group *v = &x->view;
        *v = *g;
        v->grown = grow;
        for (int i = 0; i < grow; i++)
                v->tnodes[g->n_tnodes + i] = s->next_tnode + (loom_node_id)i;
        v->n_tnodes = g->n_tnodes + grow;
        v->train_gpus = v->n_tnodes * s->cluster.gpus_per_node;
        loom__group_sums(s, v, false);
        x->nd_g = NULL; /* the caches keyed by group pointer: the view is reused */
        x->lr_g = NULL;
}

/* Whether every member of g keeps its budget as g stands (its pool's size): the mean
 * iteration of each rate, and the longest gap. A lone member: whether it stays lone. */
static bool pool_keeps(const loom_sched *s, const group *g, bool lone)
{
        if (lone)
                return loom__job_lone_fits(s, g->members[0], g->n_tnodes);
        loom_meta_job mj[MAXM];
        int idx[MAXM][LOOM_MAX_JOB_NODES], R, rates[MAXM];
        loom_us t_meta, gaps[MAXM];
        int n = meta_jobs(s, g, NULL, 0, NULL, 0, mj, rates, idx, &R);
        if (loom_meta_eval(mj, rates, n, R, s->policy.warm_switch, &t_meta, gaps, NULL))
                return false;
        for (int i = 0; i < n; i++) {
                loom_us b = g->members[i]->slo_budget;
                if (t_meta > rates[i] * b || gaps[i] > LOOM_GAP_FACTOR * b)
                        return false;
        }
        return true;
}

int loom__pool_least(const loom_sched *s, const group *g)
{
        group v = *g;
        bool lone = g->n_members == 1 && loom__job_lone_fits(s, g->members[0], g->n_tnodes);
        for (int p = g->opened_tnodes; p < g->n_tnodes; p++) {
                v.n_tnodes = p;
                v.train_gpus = p * s->cluster.gpus_per_node;
                loom__group_sums(s, &v, false);
                if (v.train_mem_used <= s->cluster.host_mem_bytes && pool_keeps(s, &v, lone))
                        return p;
        }
        return g->n_tnodes;
}

/*
 * O(1), before a grown view is built: a member's training in a pool grown from P to P' GPUs
 * lasts at least P / P' of what it does now (exactly that at linear scaling), so the group's
 * training load and SLO density scaled by P / P', plus the job's, are lower bounds; the
 * training working sets per node scale by exactly P / P'. A group they rule out cannot take the
 * job however its pool grows by `grow` nodes; nor can one whose growth alone costs more per
 * hour than the best candidate so far. Returns < 0 for those, else a rank, higher first: what
 * the join likely costs per hour (lower first), then the share of the tightest budget the
 * bounds leave free.
 */
enum { GROW_RANK_SCALE = 1 << 30 }; /* past any $/h a growth can cost */

static double may_grow(const search *x, const group *g, int grow)
{
        const loom_sched *s = x->s;
        const loom_job_spec *sp = x->spec;
        int pool = g->train_gpus + grow * s->cluster.gpus_per_node;
        double f = (double)g->train_gpus / (double)pool;
        loom_us tt = loom_group_train_time(sp->t_train, sp->train_gpus, pool,
                                           s->policy.train_scaling_efficiency);
        if ((double)g->train_mem_used * f +
                (double)loom_group_train_mem(sp->mem_train, sp->train_gpus, pool) >
            (double)s->cluster.host_mem_bytes)
                return -1;
        /* the least the join costs per hour: the nodes it adds, a lone group's planned rollout
         * nodes among them */
        double least = grow * s->price[LOOM_POOL_TRAIN] +
                       (g->lone ? g->n_rnodes : 0) * s->price[LOOM_POOL_ROLLOUT];
        if (x->have_best && least > x->best.cost + 1e-9)
                return -1;
        /* likely more (for the rank only): a new rollout node for each of the job's that no
         * node of the group has the load to take within the tightest budget at today's rates */
        loom_us budget = g->min_budget < x->budget ? g->min_budget : x->budget;
        int fit = 0;
        for (int i = 0; i < g->n_rnodes && fit < x->k; i++)
                fit += g->rnodes[i]->load + loom__roll_occ(s, sp, 0) <= budget;
        double likely = least + (x->k - fit) * s->price[LOOM_POOL_ROLLOUT];
        loom_us solo_in = sp->t_roll + tt + sp->t_sync;
        double room = !checks_slo(s->policy.placer) ? 1
                      : multirate(x) ? 1 - (g->density * f + (double)tt / (double)x->budget)
                                     : 1 - ((double)g->sum_train * f + (double)tt) / (double)budget;
        if (checks_slo(s->policy.placer) && (solo_in > x->budget || room < -1e-9))
                return -1;
        /* the cheapest first, then the most room (room is within [0, 1]) */
        return GROW_RANK_SCALE - likely + (room > 0 ? room : 0) / 2;
}

/*
 * policy.pool_grow: the job joins a group whose training pool it grows by 1 .. t of its own t
 * training nodes, every member then training on the larger pool. Any group with room is a
 * candidate, saturated ones included (a larger pool unsaturates them); searched only while
 * the best placement so far costs more than the nodes a growth adds, the least it can cost,
 * and in at most LOOM_GROW_VIEWS groups per size of growth, those whose O(1) bounds leave the
 * most room (may_grow), so that a decision stays within milliseconds however many groups
 * pass the bounds.
 */
static int search_grown(search *x)
{
        const loom_sched *s = x->s;
        if (!s->policy.pool_grow || s->policy.placer != LOOM_PLACER_LOOM)
                return 0;
        const loom_job_spec *sp = x->spec;
        int gpn = s->cluster.gpus_per_node, t = sp->train_gpus / gpn;
        for (int grow = 1; grow <= t; grow++) {
                if (x->have_best && x->best.cost <= grow * s->price[LOOM_POOL_TRAIN] + 1e-9)
                        return 0;
                /* the LOOM_GROW_VIEWS groups the bounds leave the most room in, most first
                 * (ties: the lower id), kept in top[] by insertion */
                const group *top[LOOM_GROW_VIEWS];
                double room[LOOM_GROW_VIEWS];
                int n = 0;
                for (uint32_t gi = 0; gi < s->next_group; gi++) {
                        const group *g = s->groups[gi];
                        if (!g || g == x->exclude || g->n_members == 0 || g->full ||
                            g->n_members >= LOOM_MAX_GROUP_SIZE || loom__held(g) ||
                            g->n_tnodes + grow > LOOM_MAX_JOB_NODES)
                                continue;
                        double r = may_grow(x, g, grow);
                        if (r < 0 || (n == LOOM_GROW_VIEWS && r <= room[n - 1]))
                                continue;
                        int k = n < LOOM_GROW_VIEWS ? n++ : n - 1;
                        for (; k > 0 && room[k - 1] < r; k--) {
                                top[k] = top[k - 1];
                                room[k] = room[k - 1];
                        }
                        top[k] = g;
                        room[k] = r;
                }
                for (int k = 0; k < n; k++) {
                        grown_view(x, top[k], grow);
                        open_group o = loom__open_entry(&x->view);
                        int rc = search_group(x, &o, CANDS_ALL, NULL);
                        if (rc)
                                return rc;
                }
        }
        return 0;
}

/*
 * Training nodes for a new group of the job alone. The job's own count, or under
 * policy.train_rightsize (loom's placer) the fewest nodes P on which the job alone still meets
 * its SLO budget (t_roll + t_train g / P + t_sync) and its training working set per node
 * (mem_train g / P) fits: the training pool is the dear one, and a job with SLO slack pays for
 * nodes it does not need to meet its bound.
 */
static int isolated_tnodes(const search *x)
{
        const loom_sched *s = x->s;
        const loom_job_spec *sp = x->spec;
        int gpn = s->cluster.gpus_per_node, t = sp->train_gpus / gpn;
        if (!s->policy.train_rightsize || s->policy.placer != LOOM_PLACER_LOOM)
                return t;
        for (int p = 1; p < t; p++) {
                loom_us tt = loom_group_train_time(sp->t_train, sp->train_gpus, p * gpn,
                                                   s->policy.train_scaling_efficiency);
                uint64_t mt = loom_group_train_mem(sp->mem_train, sp->train_gpus, p * gpn);
                if (sp->t_roll + tt + sp->t_sync <= x->budget && mt <= s->cluster.host_mem_bytes)
                        return p;
        }
        return t;
}

/*
 * policy.lone_grow: a job that a lone group of its t training nodes cannot keep within SLO (its
 * iteration plus the two switches exceeds the budget) runs lone on P > t training nodes, where
 * training is faster, when that bills LOOM_MOVE_GROW_GAIN less per iteration than its own
 * disaggregated group of k rollout and t training nodes (whose idle pools later jobs may fill;
 * loom__grow_pays). The fewest P that fits, up to the larger of 2t and k; 0 when none fits or
 * it does not pay. Rollouts on the training nodes are planned at their declared time, as for
 * every lone member (no speed-up claimed from the extra nodes).
 */
static int lone_grow_tnodes(const search *x, int t)
{
        const loom_sched *s = x->s;
        const loom_job_spec *sp = x->spec;
        int cap = 2 * t > x->k ? 2 * t : x->k;
        if (cap > LOOM_MAX_JOB_NODES)
                cap = LOOM_MAX_JOB_NODES;
        /* under learned admission a new job is admitted on its declared worst case, and a group
         * of one member goes lone once its learned phases fit (loom__lone_recheck): one that
         * will likely fit on t nodes then (x->likely, the fleet's mean) is not grown now */
        if (x->likely && loom__lone_fits(s, x->likely, x->budget, t))
                return 0;
        for (int p = t + 1; p <= cap; p++)
                if (loom__lone_fits(s, sp, x->budget, p))
                        return loom__grow_pays(s, sp, p,
                                               x->k * s->price[LOOM_POOL_ROLLOUT] +
                                                   t * s->price[LOOM_POOL_TRAIN],
                                               t * s->cluster.gpus_per_node)
                                   ? p
                                   : 0;
        return 0;
}

static void isolated(const search *x, cand *c)
{
        const loom_sched *s = x->s;
        const loom_job_spec *sp = x->spec;
        memset(c, 0, sizeof *c);
        c->kind = LOOM_DECISION_NEW_GROUP;
        finish_ids(s, c, 0, x->k);
        int t = isolated_tnodes(x), gpn = s->cluster.gpus_per_node;
        /* alone, under colocate_lone, its rollout nodes wait for a second member */
        c->lone = loom__lone_fits(s, sp, loom_job_budget(sp), t);
        if (!c->lone && s->policy.lone_grow) {
                int p = lone_grow_tnodes(x, t);
                if (p) {
                        t = p;
                        c->lone = true;
                }
        }
        c->tnodes = t;
        c->cost =
            (c->lone ? 0 : x->k) * s->price[LOOM_POOL_ROLLOUT] + t * s->price[LOOM_POOL_TRAIN];
        loom_us tt = t == sp->train_gpus / gpn
                         ? sp->t_train
                         : loom_group_train_time(sp->t_train, sp->train_gpus, t * gpn,
                                                 s->policy.train_scaling_efficiency);
        c->t_meta = sp->t_roll + tt + sp->t_sync;
        c->rate = 1;
        loom_us load = sp->t_roll > tt ? sp->t_roll : tt;
        c->util = c->t_meta > 0 ? (double)load / (double)c->t_meta : 0;
}

/* Group idleness for Greedy: 1 - mean of rollout and training utilisation. */
static double group_idle(const group *g)
{
        if (g->t_meta <= 0 || g->n_rnodes == 0)
                return 1.0;
        loom_us roll = 0;
        for (int i = 0; i < g->n_rnodes; i++)
                roll += g->rnodes[i]->load;
        double ur = (double)roll / ((double)g->n_rnodes * (double)g->t_meta);
        double ut = (double)g->sum_train / (double)g->t_meta;
        return 1.0 - (ur + ut) / 2.0;
}

/* Sum of the loads on a candidate's existing rollout nodes (new ones carry nothing). */
static loom_us cand_load(const group *g, const cand *c)
{
        loom_us sum = 0;
        for (int i = 0; i < g->n_rnodes; i++)
                if (bsearch(&g->rnodes[i]->id, c->ids, (size_t)c->n, sizeof(loom_node_id),
                            cmp_node_id))
                        sum += g->rnodes[i]->load;
        return sum;
}

/*
 * Greedy restricted to placements that pass memory and SLO: in group g, the feasible
 * direct-packing candidate on the least-loaded nodes, else rollout scaling if feasible; the
 * group competes on its idleness as in Greedy.
 */
static int greedy_slo_pick(search *x, const group *g, rnode **sorted, cand *cs, int n,
                           double *best_idle, cand *opts, int *n_opts)
{
        int pick = -1;
        loom_us pick_load = 0;
        (void)sorted;
        for (int i = 0; i < n; i++) {
                int rc = evaluate(x, &cs[i]);
                if (rc)
                        return rc;
                if (cs[i].reject != LOOM_REJECT_NONE)
                        continue;
                bool scale = cs[i].kind == LOOM_DECISION_ROLLOUT_SCALE;
                loom_us load = cand_load(g, &cs[i]);
                if (pick < 0 || (cs[pick].kind == LOOM_DECISION_ROLLOUT_SCALE && !scale) ||
                    (!scale && load < pick_load)) {
                        pick = i;
                        pick_load = load;
                }
        }
        double idle = group_idle(g);
        if (pick >= 0 && idle > *best_idle + 1e-12) {
                *best_idle = idle;
                opts[0] = cs[pick];
                *n_opts = 1;
        }
        return 0;
}

/*
 * The §6.5 baselines. Both check capacity (group size) and memory, not SLOs (their -slo
 * variants check SLOs too). Random picks a
 * uniformly random group among those with a memory-feasible placement, or a new group (one more
 * option), then a random feasible placement in it. Greedy picks the most idle group whose
 * placement on its most idle rollout nodes fits, else a new group.
 */
static int search_baseline(search *x, uint64_t *rng)
{
        const loom_sched *s = x->s;
        int cap = (int)s->next_group + 1, n_opts = 0;
        cand *opts = malloc(sizeof *opts * (size_t)cap);
        if (!opts)
                return LOOM_ENOMEM;
        double best_idle = -1;
        for (uint32_t gi = 0; gi < s->next_group; gi++) {
                const group *g = s->groups[gi];
                if (!g || g->n_members >= s->policy.max_group_size)
                        continue;
                open_group o = loom__open_entry((group *)g);
                if (group_may_fit(x, &o, NULL, 0) != LOOM_REJECT_NONE)
                        continue;
                rnode *sorted[LOOM_MAX_GROUP_ROLLOUT_NODES];
                memcpy(sorted, g->rnodes, sizeof(rnode *) * (size_t)g->n_rnodes);
                qsort(sorted, (size_t)g->n_rnodes, sizeof(rnode *), cmp_load);
                cand cs[LOOM_MAX_GROUP_ROLLOUT_NODES + 1];
                int n = gen_direct(x, g, sorted, cs), ok = 0;
                cs[n] = (cand){.g = g, .kind = LOOM_DECISION_ROLLOUT_SCALE};
                finish_ids(s, &cs[n], 0, x->k);
                n++;
                if (s->policy.placer == LOOM_PLACER_GREEDY_SLO) {
                        int rc = greedy_slo_pick(x, g, sorted, cs, n, &best_idle, opts, &n_opts);
                        if (rc) {
                                free(opts);
                                return rc;
                        }
                        continue;
                }
                if (s->policy.placer == LOOM_PLACER_GREEDY) {
                        /* the most idle nodes: direct packing led by the least-loaded node */
                        int lead = 0;
                        for (int i = 0; i < n - 1; i++)
                                if (bsearch(&sorted[0]->id, cs[i].ids, (size_t)x->k,
                                            sizeof(loom_node_id), cmp_node_id))
                                        lead = i;
                        int rc = evaluate(x, &cs[lead]);
                        if (rc) {
                                free(opts);
                                return rc;
                        }
                        double idle = group_idle(g);
                        if (cs[lead].reject == LOOM_REJECT_NONE && idle > best_idle + 1e-12) {
                                best_idle = idle;
                                opts[0] = cs[lead];
                                n_opts = 1;
                        }
                        continue;
                }
                /* Random: a uniformly random memory-feasible placement on existing nodes;
                 * scaling out only when no existing node fits. */
                int feasible[LOOM_MAX_GROUP_ROLLOUT_NODES + 1];
                for (int i = 0; i < n; i++) {
                        int rc = evaluate(x, &cs[i]);
                        if (rc) {
                                free(opts);
                                return rc;
                        }
                        if (cs[i].reject == LOOM_REJECT_NONE &&
                            (cs[i].kind == LOOM_DECISION_DIRECT_PACK || ok == 0))
                                feasible[ok++] = i;
                }
                if (ok > 1 && cs[feasible[ok - 1]].kind == LOOM_DECISION_ROLLOUT_SCALE)
                        ok--;
                if (ok)
                        opts[n_opts++] = cs[feasible[loom_splitmix64(rng) % (uint64_t)ok]];
        }
        cand iso;
        isolated(x, &iso);
        if (is_random(s->policy.placer)) {
                uint64_t pick = loom_splitmix64(rng) % (uint64_t)(n_opts + 1);
                x->best = pick == (uint64_t)n_opts ? iso : opts[pick];
        } else {
                x->best = n_opts ? opts[0] : iso;
        }
        x->have_best = true;
        free(opts);
        return record(x, &x->best) ? LOOM_ENOMEM : 0;
}

/*
 * The open groups, +$0 candidates first. The choice is the best candidate under better(),
 * whose first key is the cost, so considering the +$0 candidates of every group before the
 * dearer ones (each class in group order, as before) chooses the same candidate; once a +$0
 * one is feasible no dearer one is simulated at all, where a single pass simulated those met
 * before it.
 */
static int search_open_pruned(search *x)
{
        const loom_sched *s = x->s;
        int *passed = malloc(sizeof(int) * (size_t)(s->n_open > 0 ? s->n_open : 1)), n = 0, rc = 0;
        if (!passed)
                return LOOM_ENOMEM;
        for (int i = 0; i < s->n_open && !rc; i++) {
                bool paid_next = false;
                rc = search_group(x, &s->open[i], CANDS_FREE, &paid_next);
                if (paid_next)
                        passed[n++] = i;
        }
        /* a dearer candidate provisions at least one rollout node */
        bool free_best = x->have_best && x->best.cost <= 0 && s->price[LOOM_POOL_ROLLOUT] > 1e-6;
        for (int i = 0; i < n && !rc && !free_best; i++)
                rc = search_group(x, &s->open[passed[i]], CANDS_PAID, NULL);
        free(passed);
        return rc;
}

static int reject_too_big(search *x)
{
        const loom_sched *s = x->s;
        const loom_job_spec *sp = x->spec;
        uint64_t host = s->cluster.host_mem_bytes;
        const char *which = sp->mem_rollout > host ? "mem_rollout_gb" : "mem_train_gb";
        uint64_t v = sp->mem_rollout > host ? sp->mem_rollout : sp->mem_train;
        loom_decision *d = x->d;
        d->kind = LOOM_DECISION_REJECTED;
        d->group = LOOM_NEW_GROUP;
        snprintf(d->reason, sizeof d->reason,
                 "working set %.1f GB (%s) exceeds a node's host memory of %.1f GB",
                 (double)v / 1e9, which, (double)host / 1e9);
        return loom_err_set(x->e, LOOM_EREJECT, which, "%s", d->reason);
}

static void fill_decision(search *x)
{
        const loom_sched *s = x->s;
        loom_decision *d = x->d;
        const cand *b = &x->best;
        d->kind = b->kind;
        d->group = b->g ? b->g->id : s->next_group;
        d->n_rollout_nodes = b->n;
        memcpy(d->rollout_nodes, b->ids, sizeof(loom_node_id) * (size_t)b->n);
        if (b->g) {
                d->n_train_nodes = b->g->n_tnodes;
                loom__tnodes(b->g, d->train_nodes);
        } else {
                d->n_train_nodes = b->tnodes;
                for (int i = 0; i < d->n_train_nodes; i++)
                        d->train_nodes[i] = s->next_tnode + (loom_node_id)i;
        }
        d->marginal_cost_per_hour = b->cost;
        d->t_meta = b->t_meta;
        d->utilisation = b->util;
        d->rate = b->rate > 1 ? b->rate : 1;
        d->n_rerated = 0;
        char rr[96] = "";
        for (int i = 0; b->g && i < b->g->n_members; i++) {
                const job *j = b->g->members[i];
                if (b->rates[i] == j->rate)
                        continue;
                d->rerated[d->n_rerated] = j->id;
                d->rerated_rate[d->n_rerated++] = b->rates[i];
                char lab[LOOM_JOB_ID_MAX + 8];
                size_t len = strlen(rr);
                snprintf(rr + len, sizeof rr - len, "%s%s x%d->x%d", d->n_rerated > 1 ? "," : "",
                         job_label(j, lab, sizeof lab), j->rate, b->rates[i]);
        }
        if (b->g && (d->rate > 1 || d->n_rerated))
                snprintf(d->reason, sizeof d->reason,
                         "%s into group %u at rate %d%s%s: +$%.2f/h, T_meta %.1f s (%.1f s per "
                         "iteration), utilisation %.2f",
                         loom_decision_kind_name(b->kind), (unsigned)b->g->id, d->rate,
                         d->n_rerated ? ", re-rating" : "", rr, b->cost, loom_us_to_s(b->t_meta),
                         loom_us_to_s(b->t_meta) / d->rate, b->util);
        else if (b->g && b->g->grown)
                snprintf(d->reason, sizeof d->reason,
                         "%s into group %u, its training pool grown by %d to %d nodes: +$%.2f/h, "
                         "T_meta %.1f s, utilisation %.2f",
                         loom_decision_kind_name(b->kind), (unsigned)b->g->id, b->g->grown,
                         b->g->n_tnodes, b->cost, loom_us_to_s(b->t_meta), b->util);
        else if (b->g)
                snprintf(d->reason, sizeof d->reason,
                         "%s into group %u: +$%.2f/h, T_meta %.1f s, utilisation %.2f",
                         loom_decision_kind_name(b->kind), (unsigned)b->g->id, b->cost,
                         loom_us_to_s(b->t_meta), b->util);
        else
                snprintf(d->reason, sizeof d->reason,
                         "no existing group can take the job within memory and SLOs: "
                         "new group, +$%.2f/h%s",
                         b->cost,
                         b->lone
                             ? " (its rollouts on the training nodes until a second member joins)"
                             : "");
}

int loom__place(const loom_sched *s, const loom_job_spec *spec, const loom_job_spec *likely,
                const group *exclude, double margin, loom_decision *d, loom_err *e, uint64_t *rng)
{
        search x = {.s = s,
                    .spec = spec,
                    .likely = likely,
                    .exclude = exclude,
                    .margin = margin,
                    .d = d,
                    .e = e};
        x.k = spec->rollout_gpus / s->cluster.gpus_per_node;
        x.budget = loom_job_budget(spec);
        d->n_candidates = 0;
        d->slo_effective = 0;
        d->groups_pruned_bound = 0;
        d->groups_pruned_saturated = 0;
        d->groups_pruned_full = 0;
        if (spec->mem_rollout > s->cluster.host_mem_bytes ||
            spec->mem_train > s->cluster.host_mem_bytes)
                return reject_too_big(&x);
        if (s->policy.placer == LOOM_PLACER_PLEX)
                return loom__plex_place(s, spec, d, e);

        for (uint32_t gi = 0; gi < s->next_group && d->record_candidates; gi++) {
                const group *g = s->groups[gi];
                if (!g || g->open_idx >= 0)
                        continue;
                cand c = {.g = g, .kind = LOOM_DECISION_DIRECT_PACK};
                if (g->n_members >= s->policy.max_group_size) {
                        c.reject = LOOM_REJECT_FULL;
                        snprintf(c.why, sizeof c.why, "group has %d members, the maximum",
                                 g->n_members);
                } else {
                        c.reject = LOOM_REJECT_SATURATED;
                        snprintf(c.why, sizeof c.why,
                                 "group is saturated (T_load %.1f s >= T_cycle %.1f s)",
                                 loom_us_to_s(g->t_load), loom_us_to_s(g->t_cycle));
                }
                if (record(&x, &c))
                        return LOOM_ENOMEM;
        }
        d->groups_pruned_full = s->n_closed_full;
        d->groups_pruned_saturated = s->live_groups - s->n_open - s->n_closed_full;

        int rc = 0;
        x.prune = multirate(&x) && !d->record_candidates;
        if (s->policy.placer == LOOM_PLACER_LOOM) {
                if (x.prune)
                        rc = search_open_pruned(&x);
                for (int i = 0; i < s->n_open && !rc && !x.prune; i++)
                        rc = search_group(&x, &s->open[i], CANDS_ALL, NULL);
                if (!rc) {
                        cand iso;
                        isolated(&x, &iso);
                        rc = consider(&x, &iso);
                }
                if (!rc)
                        rc = search_grown(&x);
        } else {
                rc = search_baseline(&x, rng);
        }
        if (rc)
                return loom_err_set(e, rc, "", "placement search failed: %s", loom_strerror(rc));
        if (s->policy.placer == LOOM_PLACER_LOOM) {
                x.best.reject = LOOM_REJECT_NONE;
                snprintf(x.best.why, sizeof x.best.why, "chosen");
                if (record(&x, &x.best))
                        return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        fill_decision(&x);
        return 0;
}

/*
 * policy.regroup (regroup.c): place spec into one planned group, or (into NULL) a new group of
 * its own, nothing else. The candidates and checks are the search's own for that group, with
 * margin as loom__place's; no isolated fallback when into cannot take it. Returns 0 with d
 * filled, 1 when the planned place cannot take the job now, or an error.
 */
int loom__place_into(const loom_sched *s, const loom_job_spec *spec, const group *into,
                     double margin, loom_decision *d, loom_err *e)
{
        search x = {.s = s, .spec = spec, .margin = margin, .d = d, .e = e};
        x.k = spec->rollout_gpus / s->cluster.gpus_per_node;
        x.budget = loom_job_budget(spec);
        d->n_candidates = 0;
        d->slo_effective = 0;
        if (s->policy.placer != LOOM_PLACER_LOOM || spec->mem_rollout > s->cluster.host_mem_bytes ||
            spec->mem_train > s->cluster.host_mem_bytes)
                return 1;
        int rc = 0;
        if (into) {
                if (into->open_idx < 0)
                        return 1;
                rc = search_group(&x, &s->open[into->open_idx], CANDS_ALL, NULL);
        } else {
                cand iso;
                isolated(&x, &iso);
                rc = consider(&x, &iso);
        }
        if (rc)
                return loom_err_set(e, rc, "", "placement search failed: %s", loom_strerror(rc));
        if (!x.have_best)
                return 1;
        fill_decision(&x);
        return 0;
}
