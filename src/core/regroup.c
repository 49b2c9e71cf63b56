/*
 * regroup.c - coordinated regrouping at departures and first re-plans (policy.regroup).
 *
 * Member moves (move.c) move one job at a time, each only when that job's own move pays. The
 * regroupings the departures call for often need several jobs to move together: two thin
 * groups merged into one, a group split so that its members fill others' bubbles. No single
 * member's move pays for such a regrouping; all of them together do (docs/sim.md, "Where the
 * cost goes", the `departures` and `local` rungs).
 *
 * So when a job finishes, the core takes the group it left (if any member is left) and the
 * RG_GROUPS thinnest other groups (lowest T_load / T_meta), at most RG_JOBS members in all, and
 * searches every partition of those members exactly for the cheapest grouping; and the same
 * around a job's group when the job first learns its profile (its first re-plan), which is
 * when it first becomes movable and when its group's plan shrinks the most. A block of the
 * partition is one of the groups as it stands (its training pool, its members' rollout pins)
 * keeping the members it has in the block and taking the others as joiners, pinned to the
 * least loaded of its rollout nodes and as few new ones as fit; or a job alone in a new group
 * of its own. Every member of a block must keep RG_MARGIN of T_meta as slack to its budget, as
 * a member move keeps LOOM_MOVE_MARGIN (multi-rate groups by the core's raising rule). A
 * member that has not learned its profile, or has few iterations left, stays where it is.
 *
 * A block is priced at its $/h times its members' mean stretch: each one's iteration there
 * (T_meta / rate, or alone its lone or solo iteration) over its iteration where it runs now.
 * The bill is the $/h integrated over the time the jobs take, and a grouping that packs members
 * tighter stretches them, so they hold the nodes longer; by $/h alone the search preferred
 * such packings and they did not pay (docs/sim.md, "Regrouping and the round a join adds").
 * The search charges RG_MOVE_PRICE $/h for each member it moves, and a plan is made only when
 * it is cheaper than the groups' $/h now by that much.
 *
 * The plan is carried out by the existing move machinery: each member it moves is due at its
 * next training ends (loom__move_pays returns true, loom_sched_observe 3) once its planned group
 * can take it now within RG_MARGIN; the driver stops it at the end of that iteration and
 * re-admits it, as for any move, declining when the slack it has banked does not pay for the
 * restart; its re-admission, the next submit of a job of that name, is placed in the planned
 * group (loom__regroup_place), or by the usual search when that group cannot take it after all.
 * A member not moved within LOOM_REGROUP_TRIES training ends drops its plan. Everything here
 * is a pure function of the scheduler's state, so replaying the same events plans the same
 * moves. The search is bounded by RG_JOBS, whatever the number of jobs: at most 255 blocks,
 * each a few meta-iteration simulations, plus a scan of the groups for the thinnest.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define RG_JOBS LOOM_REGROUP_MAX /* the most members one re-solve regroups (Bell(8) = 4140) */
#define RG_GROUPS 4       /* thinnest groups searched beside the departure's own */
#define RG_MOVE_PRICE 3.0 /* $/h the search charges for each member it moves */
/* the slack every member of a planned group keeps, as a fraction of T_meta: more than a single
 * move's LOOM_MOVE_MARGIN, since a plan moves several members, each a restart and a round */
#define RG_MARGIN 0.08
#define RG_LEFT 10 /* a member with fewer iterations left stays where it is */

typedef struct rg {
        const loom_sched *s;
        int n, ng;
        job *m[RG_JOBS];
        int from[RG_JOBS]; /* index of its group in gs */
        bool fixed[RG_JOBS];
        group *gs[RG_JOBS];
        /* a block's $/h by (members mask, anchor group): < 0 infeasible, NaN not yet known */
        double memo[1 << RG_JOBS][RG_JOBS];
        double alone[RG_JOBS]; /* a job alone in a new group: its $/h, < 0 not allowed */
        /* the partition searched and the best found: per member, its block's anchor group
         * (an index in gs) or -1 alone */
        int cur[RG_JOBS], best[RG_JOBS];
        int assigned; /* mask of members in a block */
        double best_obj;
} rg;

static bool eligible(const job *j)
{
        if (!j->ls || !j->ls->learned_budget || !j->spec.id[0])
                return false;
        return j->spec.iterations <= 0 || j->spec.iterations - j->iterations_done >= RG_LEFT;
}

static double group_cost(const loom_sched *s, const group *g)
{
        return g->n_tnodes * s->price[LOOM_POOL_TRAIN] +
               (g->lone ? 0 : g->n_rnodes * s->price[LOOM_POOL_ROLLOUT]);
}

/* j's planned iteration where it runs now */
static double iter_now(const loom_sched *s, const job *j)
{
        const group *g = j->group;
        double it = g->lone ? (double)loom__lone_iteration(s, &j->spec, g->n_tnodes)
                            : (double)g->t_meta / (j->rate > 0 ? j->rate : 1);
        return it > 0 ? it : 1;
}

/* Rates for a block whose single-rate period breaks a budget: the core's raising rule (each
 * member raised to the rate its budget needs at the simulated period, one more when its
 * longest gap exceeds its budget), as the oracle's. */
static bool block_rates(const rg *r, const loom_meta_job *mj, const loom_us *budget, int n, int R,
                        int *rates, loom_us *t_meta)
{
        const loom_sched *s = r->s;
        for (int round = 0; round < 8; round++) {
                loom_us gaps[LOOM_MAX_GROUP_SIZE];
                if (loom_meta_eval(mj, rates, n, R, s->policy.warm_switch, t_meta, gaps, NULL))
                        return false;
                bool ok = true, raised = false;
                int slots = 0;
                for (int i = 0; i < n; i++) {
                        double need_d = (double)*t_meta * (1 + RG_MARGIN) / (double)budget[i];
                        int need = (int)need_d + (need_d > (int)need_d);
                        bool gap = gaps[i] > LOOM_GAP_FACTOR * budget[i];
                        if (need <= rates[i] && !gap)
                                continue;
                        ok = false;
                        int q = need > rates[i] ? need : rates[i] + 1;
                        if (q <= LOOM_MAX_RATE) {
                                rates[i] = q;
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

/* The $/h of group gs[a] keeping its members in mask and taking the others of mask, or -1
 * when no pinning of the joiners keeps every member's budget with the margin. */
static double block_eval(const rg *r, int mask, int a)
{
        const loom_sched *s = r->s;
        const group *g = r->gs[a];
        int pool = g->train_gpus;
        double eff = s->policy.train_scaling_efficiency;
        const job *mem[LOOM_MAX_GROUP_SIZE];
        int n = 0, stay = 0;
        /* the group's order: its members that stay, then the joiners */
        for (int k = 0; k < g->n_members; k++)
                for (int i = 0; i < r->n; i++)
                        if ((mask >> i & 1) && r->m[i] == g->members[k])
                                mem[n++] = r->m[i];
        stay = n;
        if (!stay)
                return -1;
        uint64_t tmem = 0;
        for (int i = 0; i < r->n; i++)
                if ((mask >> i & 1) && r->from[i] != a) {
                        if (r->fixed[i])
                                return -1;
                        mem[n++] = r->m[i];
                }
        for (int i = 0; i < n; i++)
                tmem += loom_group_train_mem(mem[i]->spec.mem_train, mem[i]->spec.train_gpus, pool);
        if (tmem > s->cluster.host_mem_bytes)
                return -1;
        double pt = g->n_tnodes * s->price[LOOM_POOL_TRAIN], pr = s->price[LOOM_POOL_ROLLOUT];
        if (n == 1) {
                bool lone = loom__job_lone_fits(s, mem[0], g->n_tnodes);
                double c = pt + (lone ? 0 : mem[0]->n_rnodes * pr);
                const loom_job_spec *sp = &mem[0]->spec;
                double it = lone ? (double)loom__lone_iteration(s, sp, g->n_tnodes)
                                 : (double)(sp->t_roll + mem[0]->t_train_in + sp->t_sync);
                return c * it / iter_now(s, mem[0]);
        }
        /* the stayers' rollout nodes, as local indexes */
        loom_node_id ids[LOOM_MAX_GROUP_ROLLOUT_NODES];
        int n0 = 0, extra = 0;
        int pins[LOOM_MAX_GROUP_SIZE][LOOM_MAX_JOB_NODES];
        for (int i = 0; i < stay; i++)
                for (int k = 0; k < mem[i]->n_rnodes; k++) {
                        int x = 0;
                        while (x < n0 && ids[x] != mem[i]->rnodes[k])
                                x++;
                        if (x == n0) {
                                if (n0 == LOOM_MAX_GROUP_ROLLOUT_NODES)
                                        return -1;
                                ids[n0++] = mem[i]->rnodes[k];
                        }
                        pins[i][k] = x;
                }
        for (int i = stay; i < n; i++)
                extra += mem[i]->n_rnodes;
        loom_us budget[LOOM_MAX_GROUP_SIZE];
        loom_meta_job mj[LOOM_MAX_GROUP_SIZE];
        double util = 0;
        for (int i = 0; i < n; i++) {
                const loom_job_spec *sp = &mem[i]->spec;
                budget[i] = mem[i]->slo_budget;
                mj[i] = (loom_meta_job){
                    .t_roll = sp->t_roll,
                    .t_train = loom_group_train_time(sp->t_train, sp->train_gpus, pool, eff),
                    .t_sync = sp->t_sync,
                    .n_nodes = mem[i]->n_rnodes,
                    .nodes = pins[i],
                    .t_switch = loom__switch(s, sp)};
                loom__tail_plan(s, sp, &mj[i].t_head, &mj[i].t_pen);
                /* what every rollout-node count below needs, unsimulated: T_meta is at least
                 * the training pool's load (sum of rate x t_train) and, per member, rate x its
                 * chain of rollout, training and sync; a member of rate q within budget b
                 * keeps q >= T_meta (1 + RG_MARGIN) / b, and its longest gap, at least its
                 * chain, within b. So its chain must fit b, and the training its members
                 * bring per unit of budget must fit the pool. */
                if ((double)(mj[i].t_roll + mj[i].t_train + mj[i].t_sync) >
                    (double)budget[i] * (1 + 1e-6))
                        return -1;
                util += (double)mj[i].t_train / (double)budget[i];
        }
        if (util * (1 + RG_MARGIN) > 1 + 1e-6)
                return -1;
        for (int R = n0; R <= n0 + extra && R <= LOOM_MAX_GROUP_ROLLOUT_NODES; R++) {
                loom_us load[LOOM_MAX_GROUP_ROLLOUT_NODES] = {0};
                uint64_t used[LOOM_MAX_GROUP_ROLLOUT_NODES] = {0};
                for (int i = 0; i < stay; i++)
                        for (int k = 0; k < mj[i].n_nodes; k++) {
                                load[pins[i][k]] += loom_meta_occ(&mj[i], k);
                                used[pins[i][k]] += mem[i]->spec.mem_rollout;
                        }
                bool ok = true;
                /* each joiner on its k least loaded nodes with room, in ascending index */
                for (int i = stay; i < n && ok; i++) {
                        bool taken[LOOM_MAX_GROUP_ROLLOUT_NODES] = {false};
                        for (int k = 0; k < mj[i].n_nodes && ok; k++) {
                                int b = -1;
                                for (int x = 0; x < R; x++)
                                        if (!taken[x] &&
                                            used[x] + mem[i]->spec.mem_rollout <=
                                                s->cluster.host_mem_bytes &&
                                            (b < 0 || load[x] < load[b]))
                                                b = x;
                                if (b < 0) {
                                        ok = false;
                                        break;
                                }
                                taken[b] = true;
                        }
                        for (int x = 0, k = 0; ok && x < R; x++)
                                if (taken[x]) {
                                        pins[i][k] = x;
                                        load[x] += loom_meta_occ(&mj[i], k);
                                        used[x] += mem[i]->spec.mem_rollout;
                                        k++;
                                }
                }
                if (!ok)
                        continue;
                for (int x = 0; x < R && ok; x++)
                        ok = load[x] > 0 || x < n0; /* a node nobody uses is not a cheaper R */
                if (!ok)
                        continue;
                loom_us t_meta;
                int rates[LOOM_MAX_GROUP_SIZE];
                if (loom_meta_period(mj, n, R, s->policy.warm_switch, &t_meta, NULL))
                        continue;
                bool fits = true;
                for (int i = 0; i < n; i++) {
                        rates[i] = 1;
                        fits &= (double)(budget[i] - t_meta) >= RG_MARGIN * (double)t_meta;
                }
                if (fits ||
                    (s->policy.multirate && block_rates(r, mj, budget, n, R, rates, &t_meta))) {
                        double w = 0;
                        for (int i = 0; i < n; i++)
                                w += (double)t_meta / rates[i] / iter_now(s, mem[i]);
                        return (pt + R * pr) * w / n;
                }
        }
        return -1;
}

/* A lower bound on block(r, mask, a) when that block is feasible, without simulating it (a
 * block of one member: 0). Each member of rate q runs q iterations, each its rollout, training
 * and sync in turn, per meta-iteration, so T_meta / q is at least that chain (loom_meta_eval;
 * T_meta is rounded to 1 us, hence the small factor); the group keeps at least its stayers'
 * rollout nodes. So partition skips a block that cannot beat the best grouping found before
 * simulating it, and finds exactly what it found simulating every block it meets. */
static double block_bound(const rg *r, int mask, int a)
{
        const loom_sched *s = r->s;
        const group *g = r->gs[a];
        if (__builtin_popcount((unsigned)mask) < 2)
                return 0;
        loom_node_id ids[LOOM_MAX_GROUP_ROLLOUT_NODES];
        int n = 0, n0 = 0;
        double w = 0;
        for (int i = 0; i < r->n; i++) {
                if (!(mask >> i & 1))
                        continue;
                const job *j = r->m[i];
                const loom_job_spec *sp = &j->spec;
                loom_us tt = loom_group_train_time(sp->t_train, sp->train_gpus, g->train_gpus,
                                                   s->policy.train_scaling_efficiency);
                w += (double)(sp->t_roll + tt + sp->t_sync) / iter_now(s, j);
                n++;
                for (int k = 0; r->from[i] == a && k < j->n_rnodes; k++) {
                        int x = 0;
                        while (x < n0 && ids[x] != j->rnodes[k])
                                x++;
                        if (x == n0 && n0 < LOOM_MAX_GROUP_ROLLOUT_NODES)
                                ids[n0++] = j->rnodes[k];
                }
        }
        double pt = g->n_tnodes * s->price[LOOM_POOL_TRAIN];
        return (pt + n0 * s->price[LOOM_POOL_ROLLOUT]) * w / n * (1 - 1e-6);
}

static double block(rg *r, int mask, int a)
{
        double *v = &r->memo[mask][a];
        if (*v != *v)
                *v = block_eval(r, mask, a);
        return *v;
}

/* Every partition of the members not yet assigned, each block anchored on a group no other
 * block is anchored on (used), or a job alone; obj is the $/h so far plus the moves' price. */
static void partition(rg *r, unsigned used, double obj)
{
        if (obj >= r->best_obj - 1e-9)
                return;
        int first = 0;
        while (first < r->n && (r->assigned >> first & 1))
                first++;
        if (first == r->n) {
                r->best_obj = obj;
                memcpy(r->best, r->cur, sizeof r->cur);
                return;
        }
        int free_mask = ((1 << r->n) - 1) & ~r->assigned & ~(1 << first);
        int maxg = r->s->policy.max_group_size;
        /* every subset of the free members, with the first one */
        for (int sub = free_mask;; sub = (sub - 1) & free_mask) {
                int mask = sub | 1 << first, size = __builtin_popcount((unsigned)mask);
                if (size <= maxg) {
                        for (int a = 0; a < r->ng; a++) {
                                if (used >> a & 1)
                                        continue;
                                int moves = 0;
                                for (int i = 0; i < r->n; i++)
                                        moves += (mask >> i & 1) && r->from[i] != a;
                                /* what the call below would cut at once, cut unsimulated */
                                if (obj + block_bound(r, mask, a) + RG_MOVE_PRICE * moves >=
                                    r->best_obj - 1e-9)
                                        continue;
                                double c = block(r, mask, a);
                                if (c < 0)
                                        continue;
                                for (int i = 0; i < r->n; i++)
                                        if (mask >> i & 1)
                                                r->cur[i] = a;
                                r->assigned |= mask;
                                partition(r, used | 1u << a, obj + c + RG_MOVE_PRICE * moves);
                                r->assigned &= ~mask;
                        }
                        if (size == 1 && r->alone[first] >= 0) {
                                r->cur[first] = -1;
                                r->assigned |= mask;
                                partition(r, used, obj + r->alone[first] + RG_MOVE_PRICE);
                                r->assigned &= ~mask;
                        }
                }
                if (!sub)
                        break;
        }
}

static double thinness(const group *g)
{
        return g->t_meta > 0 ? (double)g->t_load / (double)g->t_meta : 0;
}

static bool add_group(rg *r, group *g)
{
        int movable = 0;
        for (int k = 0; k < g->n_members; k++)
                movable += eligible(g->members[k]);
        if (!movable || r->n + g->n_members > RG_JOBS || r->ng == RG_JOBS)
                return false;
        for (int k = 0; k < g->n_members; k++) {
                r->m[r->n] = g->members[k];
                r->from[r->n] = r->ng;
                r->fixed[r->n] = !eligible(g->members[k]);
                r->n++;
        }
        r->gs[r->ng++] = g;
        return true;
}

static const group *planned_group(const loom_sched *s, loom_group_id id)
{
        return id < s->next_group ? s->groups[id] : NULL;
}

/* Member j's plan, as a re-solve makes it and as loom_sched_regroup_apply replays it. A member
 * that stays drops any plan it had; its count of training ends waited is read only while it
 * has one, and starts again with the next. */
static void set_plan(job *j, bool moves, bool alone, loom_group_id to)
{
        j->regroup_planned = moves;
        j->regroup_alone = moves && alone;
        j->regroup_to = moves && !alone ? to : 0;
        if (moves)
                j->regroup_tries = 0;
}

void loom__regroup(loom_sched *s, group *g)
{
        if (s->replaying)
                return; /* the driver hands the live core's plan back, if it made one */
        rg *r = malloc(sizeof *r);
        if (!r)
                return; /* a plan is an optimisation: without memory, none */
        memset(r, 0, sizeof *r);
        r->s = s;
        if (g && g->n_members > 0)
                add_group(r, g);
        /* the thinnest other groups, lowest id first among equals */
        for (int pick = 0; pick < RG_GROUPS && r->n < RG_JOBS; pick++) {
                group *b = NULL;
                for (uint32_t gi = 0; gi < s->next_group; gi++) {
                        group *h = s->groups[gi];
                        bool in = false;
                        for (int k = 0; k < r->ng && !in; k++)
                                in = r->gs[k] == h;
                        if (!h || in || r->n + h->n_members > RG_JOBS)
                                continue;
                        int movable = 0;
                        for (int k = 0; k < h->n_members; k++)
                                movable += eligible(h->members[k]);
                        if (movable && (!b || thinness(h) < thinness(b)))
                                b = h;
                }
                if (!b || !add_group(r, b))
                        break;
        }
        if (r->ng < 2 && !(r->ng == 1 && r->gs[0]->n_members > 1)) {
                free(r);
                return;
        }
        double now = 0;
        for (int a = 0; a < r->ng; a++)
                now += group_cost(s, r->gs[a]);
        int gpn = s->cluster.gpus_per_node;
        for (int mask = 0; mask < 1 << r->n; mask++)
                for (int a = 0; a < r->ng; a++)
                        r->memo[mask][a] = __builtin_nan("");
        for (int i = 0; i < r->n; i++) {
                const job *j = r->m[i];
                int t = j->spec.train_gpus / gpn;
                bool lone = loom__job_lone_fits(s, j, t);
                r->alone[i] = r->fixed[i]
                                  ? -1
                                  : t * s->price[LOOM_POOL_TRAIN] +
                                        (lone ? 0 : j->n_rnodes * s->price[LOOM_POOL_ROLLOUT]);
                if (r->alone[i] > 0) {
                        loom_us tt =
                            loom_group_train_time(j->spec.t_train, j->spec.train_gpus, t * gpn,
                                                  s->policy.train_scaling_efficiency);
                        double it = lone ? (double)loom__lone_iteration(s, &j->spec, t)
                                         : (double)(j->spec.t_roll + tt + j->spec.t_sync);
                        r->alone[i] *= it / iter_now(s, j);
                }
        }
        r->best_obj = now; /* a plan must beat the groups as they are, moves paid */
        for (int i = 0; i < r->n; i++)
                r->best[i] = -2;
        s->stats.regroup_solves++;
        partition(r, 0, 0);
        /* a grouping that moves nobody changes nothing unless it drops an earlier plan */
        bool changes = false;
        for (int i = 0; r->best[0] != -2 && i < r->n; i++)
                changes |= r->best[i] != r->from[i] || r->m[i]->regroup_planned;
        if (changes) {
                loom_regroup_plan *p = &s->plan;
                p->n = r->n;
                for (int i = 0; i < r->n; i++) {
                        bool moves = r->best[i] != r->from[i], alone = r->best[i] < 0;
                        loom_group_id to = moves && !alone ? r->gs[r->best[i]]->id : 0;
                        set_plan(r->m[i], moves, alone, to);
                        p->m[i] = (loom_regroup_member){r->m[i]->id, moves, moves && alone, to};
                }
                s->plan_made = true;
                s->stats.regroup_plans++;
        }
        free(r);
}

bool loom_sched_regroup_made(const loom_sched *s, loom_regroup_plan *out)
{
        if (s->plan_made && out)
                *out = s->plan;
        return s->plan_made;
}

void loom_sched_replaying(loom_sched *s, bool on)
{
        s->replaying = on;
}

int loom_sched_regroup_apply(loom_sched *s, const loom_regroup_plan *p)
{
        if (!p || p->n < 1 || p->n > LOOM_REGROUP_MAX)
                return LOOM_EINVAL;
        for (int i = 0; i < p->n; i++) {
                const loom_regroup_member *m = &p->m[i];
                const job *j = loom__job(s, m->job);
                if (!j)
                        return LOOM_ENOENT;
                for (int k = 0; k < i; k++)
                        if (p->m[k].job == m->job)
                                return LOOM_EINVAL;
                if (m->moves && !m->alone) {
                        if (!planned_group(s, m->to))
                                return LOOM_ENOENT;
                        if (j->group->id == m->to)
                                return LOOM_EINVAL;
                }
        }
        for (int i = 0; i < p->n; i++) {
                const loom_regroup_member *m = &p->m[i];
                set_plan(loom__job(s, m->job), m->moves, m->alone, m->to);
        }
        s->stats.regroup_applied++;
        return 0;
}

/* j's re-admission as move.c builds it: its remaining iterations on its learned plan, held to
 * its measured solo iteration. false when nothing is left. */
static bool readmission(const job *j, loom_job_spec *sp)
{
        *sp = j->spec;
        if (sp->iterations > 0) {
                sp->iterations -= j->iterations_done;
                if (sp->iterations < 1)
                        return false;
        }
        sp->t_solo_ref = (loom_us)((double)j->ls->learned_budget / sp->slo);
        return sp->t_solo_ref >= 1;
}

bool loom__regroup_due(const loom_sched *s, const job *j)
{
        if (!j->regroup_planned || !j->ls || !j->ls->learned_budget)
                return false;
        const group *to = j->regroup_alone ? NULL : planned_group(s, j->regroup_to);
        if (j->regroup_alone ? j->group->n_members < 2 : !to || to == j->group)
                return false;
        loom_job_spec sp;
        if (!readmission(j, &sp))
                return false;
        loom_decision d;
        loom_decision_init(&d, false);
        loom_err e;
        bool ok = !loom__place_into(s, &sp, to, RG_MARGIN, &d, &e);
        loom_decision_free(&d);
        return ok;
}

int loom__regroup_place(const loom_sched *s, const loom_job_spec *spec, loom_decision *d,
                        loom_err *e)
{
        if (!s->handoff.set || !spec->id[0] || strcmp(spec->id, s->handoff.id))
                return 1;
        const group *to = s->handoff.alone ? NULL : planned_group(s, s->handoff.to);
        if (!s->handoff.alone && !to)
                return 1;
        return loom__place_into(s, spec, to, RG_MARGIN, d, e);
}
