/*
 * sched.c - the scheduler facade: owns jobs, groups and nodes, applies placement decisions,
 * forwards phase events to the dispatcher, and queues actions for the driver.
 *
 * Group lifecycle:
 *
 *   (none) --submit: new_group--> OPEN <--------------------+
 *                                  |  member joins/leaves   |
 *                                  v                        |
 *                   CLOSED (saturated or full, or held: skipped by placement)
 *   any --last member exits--> released (training and rollout nodes RELEASE_NODE'd)
 *
 * Invariant (checked by assert_group): a group's cached sums equal what its members imply, and
 * it is in s->open exactly when it has members and is neither saturated nor full nor held (its
 * one member's SLO relaxed under policy.slo_cap and not yet learned; takes_members).
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- names and defaults -------------------------------------------------------------- */

const char *loom_decision_kind_name(loom_decision_kind k)
{
        static const char *const n[] = {"direct_pack", "rollout_scale", "new_group", "rejected"};
        return (unsigned)k < 4 ? n[k] : "?";
}

const char *loom_reject_name(loom_reject r)
{
        static const char *const n[] = {"none",      "memory", "slo",    "costlier",
                                        "saturated", "full",   "too_big"};
        if (r == LOOM_REJECT_DUTY)
                return "duty";
        if (r == LOOM_REJECT_NO_FIT)
                return "no_fit";
        return (unsigned)r < 7 ? n[r] : "?";
}

const char *loom_exit_name(loom_exit x)
{
        static const char *const n[] = {"finished", "cancelled", "failed"};
        return (unsigned)x < 3 ? n[x] : "?";
}

const char *loom_action_type_name(loom_action_type t)
{
        static const char *const n[] = {"start_phase",    "migrate_tail", "resize_phase",
                                        "provision_node", "release_node", "job_done"};
        return (unsigned)t < 6 ? n[t] : "?";
}

const char *loom_job_state_name(loom_job_state st)
{
        static const char *const n[] = {"wait_rollout", "rollout", "wait_train", "train", "sync"};
        return (unsigned)st < 5 ? n[st] : "?";
}

void loom_policy_cfg_default(loom_policy_cfg *p)
{
        memset(p, 0, sizeof *p);
        p->max_group_size = 5;
        p->train_scaling_efficiency = 1.0;
        p->warm_switch = 0;
        p->tail_migration = true;
        p->tail_threshold = 0.8;
        p->tail_keep_gpus = 1;
        p->placer = LOOM_PLACER_LOOM;
        p->seed = 1;
        p->dispatch = LOOM_DISPATCH_RR;
        p->preempt_margin = 1.1;
        p->plex_alpha = 0.5;
        p->plex_w1 = 1.0;
        p->plex_w2 = 0.25;
        p->plex_duty_max = 0.75;
        p->admission = LOOM_ADMIT_WORST;
        p->learn_after = 3;
        p->learn_bound = LOOM_LEARN_NORMAL;
        p->multirate = true;
        p->colocate_lone = true;
        p->lone_grow = true;
        p->join_wait = true;
        p->move_lone = true;
        p->move_members = true;
        p->plan_tails = true;
        /* a replay applies each re-solve's logged plan instead of searching again
         * (loom_sched_replaying, loom_sched_regroup_apply) */
        p->regroup = true;
        p->pool_grow = true;
}

bool loom__lone_fits(const loom_sched *s, const loom_job_spec *spec, loom_us budget,
                     int train_nodes)
{
        if (!s->policy.colocate_lone || s->policy.placer != LOOM_PLACER_LOOM)
                return false;
        int gpus = train_nodes * s->cluster.gpus_per_node;
        uint64_t mt = loom_group_train_mem(spec->mem_train, spec->train_gpus, gpus);
        if (spec->rollout_gpus > gpus || mt + spec->mem_rollout > s->cluster.host_mem_bytes)
                return false;
        return loom__lone_iteration(s, spec, train_nodes) <= budget;
}

loom_us loom__lone_iteration(const loom_sched *s, const loom_job_spec *spec, int train_nodes)
{
        /* every iteration switches the nodes twice (rollout <-> training) and needs no sync */
        loom_us tt = loom_group_train_time(spec->t_train, spec->train_gpus,
                                           train_nodes * s->cluster.gpus_per_node,
                                           s->policy.train_scaling_efficiency);
        return spec->t_roll + tt + 2 * loom__switch(s, spec);
}

bool loom__grow_pays(const loom_sched *s, const loom_job_spec *spec, int train_nodes,
                     double split_per_hour, int split_train_gpus)
{
        loom_us tt = loom_group_train_time(spec->t_train, spec->train_gpus, split_train_gpus,
                                           s->policy.train_scaling_efficiency);
        double split = split_per_hour * (double)(spec->t_roll + tt + spec->t_sync);
        double lone = (double)train_nodes * s->price[LOOM_POOL_TRAIN] *
                      (double)loom__lone_iteration(s, spec, train_nodes);
        return lone < (1.0 - LOOM_MOVE_GROW_GAIN) * split;
}

const char *loom_admission_name(loom_admission a)
{
        static const char *const n[] = {"worst", "p99", "p95"};
        return (unsigned)a < 3 ? n[a] : "?";
}

bool *loom_policy_switch(loom_policy_cfg *p, const char *name)
{
        return !strcmp(name, "multirate")         ? &p->multirate
               : !strcmp(name, "train-rightsize") ? &p->train_rightsize
               : !strcmp(name, "colocate-lone")   ? &p->colocate_lone
               : !strcmp(name, "lone-grow")       ? &p->lone_grow
               : !strcmp(name, "join-wait")       ? &p->join_wait
               : !strcmp(name, "move-lone")       ? &p->move_lone
               : !strcmp(name, "move-members")    ? &p->move_members
               : !strcmp(name, "plan-tails")      ? &p->plan_tails
               : !strcmp(name, "regroup")         ? &p->regroup
               : !strcmp(name, "pool-grow")       ? &p->pool_grow
                                                  : NULL;
}

int loom_admission_parse(const char *str, loom_admission *out)
{
        for (int a = LOOM_ADMIT_WORST; a <= LOOM_ADMIT_P95; a++)
                if (!strcmp(str, loom_admission_name((loom_admission)a))) {
                        *out = (loom_admission)a;
                        return 0;
                }
        return LOOM_EINVAL;
}

int loom_policy_cfg_validate(const loom_policy_cfg *p, const loom_cluster_cfg *c, loom_err *e)
{
        if (p->max_group_size < 1 || p->max_group_size > LOOM_MAX_GROUP_SIZE)
                return loom_err_set(e, LOOM_EINVAL, "max_group_size",
                                    "max_group_size must be 1..%d, got %d", LOOM_MAX_GROUP_SIZE,
                                    p->max_group_size);
        if (!(p->train_scaling_efficiency > 0 && p->train_scaling_efficiency <= 1.0))
                return loom_err_set(e, LOOM_EINVAL, "train_scaling_efficiency",
                                    "train_scaling_efficiency must be in (0, 1]");
        if (p->warm_switch < 0)
                return loom_err_set(e, LOOM_EINVAL, "warm_switch_s", "warm_switch_s must be >= 0");
        if (!(p->tail_threshold > 0 && p->tail_threshold <= 1.0))
                return loom_err_set(e, LOOM_EINVAL, "tail_threshold",
                                    "tail_threshold must be in (0, 1]");
        if (p->tail_keep_gpus < 1 || p->tail_keep_gpus >= c->gpus_per_node)
                return loom_err_set(e, LOOM_EINVAL, "tail_keep_gpus",
                                    "tail_keep_gpus must be 1..%d (fewer than a node)",
                                    c->gpus_per_node - 1);
        if (p->rate_search_open < 0)
                return loom_err_set(e, LOOM_EINVAL, "rate_search_open",
                                    "rate_search_open must be >= 0 (0: the default)");
        if ((unsigned)p->placer > LOOM_PLACER_PLEX)
                return loom_err_set(e, LOOM_EINVAL, "placer", "unknown placer");
        if ((unsigned)p->admission > LOOM_ADMIT_P95)
                return loom_err_set(e, LOOM_EINVAL, "admission",
                                    "admission must be worst, p99 or p95");
        if (p->learn_after < 1 || p->learn_after > LOOM_LEARN_WINDOW)
                return loom_err_set(e, LOOM_EINVAL, "learn_after",
                                    "learn_after must be 1..%d iterations, got %d",
                                    LOOM_LEARN_WINDOW, p->learn_after);
        if ((unsigned)p->learn_bound > LOOM_LEARN_ORDER)
                return loom_err_set(e, LOOM_EINVAL, "learn_bound",
                                    "learn_bound must be normal or order");
        if ((unsigned)p->dispatch > LOOM_DISPATCH_FCFS)
                return loom_err_set(e, LOOM_EINVAL, "dispatch", "unknown dispatch");
        if (!(p->preempt_margin >= 1.0))
                return loom_err_set(e, LOOM_EINVAL, "preempt_margin",
                                    "preempt_margin must be >= 1");
        if (!(p->plex_alpha >= 0 && p->plex_alpha <= 1))
                return loom_err_set(e, LOOM_EINVAL, "plex_alpha", "plex_alpha must be in [0, 1]");
        if (!(p->plex_w1 >= 0) || !(p->plex_w2 >= 0))
                return loom_err_set(e, LOOM_EINVAL, p->plex_w1 >= 0 ? "plex_w2" : "plex_w1",
                                    "Eq. 1 weights must be >= 0");
        if (!(p->plex_duty_max > 0 && p->plex_duty_max <= 1))
                return loom_err_set(e, LOOM_EINVAL, "plex_duty_max",
                                    "plex_duty_max must be in (0, 1]");
        return 0;
}

void loom_decision_init(loom_decision *d, bool record_candidates)
{
        memset(d, 0, sizeof *d);
        d->record_candidates = record_candidates;
}

void loom_decision_free(loom_decision *d)
{
        if (!d)
                return;
        free(d->candidates);
        d->candidates = NULL;
        d->n_candidates = d->cap_candidates = 0;
}

/* ---- tables ---------------------------------------------------------------------------- */

/* Grow *tab (of *cap elements of size sz) to hold index i; new slots are zeroed. */
/* Make slot i of an id-indexed table exist; new slots are NULL. */
static int grow(void *tabp, size_t *cap, size_t i, size_t sz)
{
        size_t old = *cap;
        if (loom_reserve(tabp, cap, i + 1, sz, 64))
                return LOOM_ENOMEM;
        char *tab;
        memcpy(&tab, tabp, sizeof tab);
        memset(tab + sz * old, 0, sz * (*cap - old));
        return 0;
}

job *loom__job(const loom_sched *s, loom_job_id id)
{
        return id > 0 && id < s->next_job ? s->jobs[id] : NULL;
}

static group *group_of(const loom_sched *s, loom_group_id id)
{
        return id < s->next_group ? s->groups[id] : NULL;
}

/* Make room for at least `need` queued actions. */
static int actions_reserve(action_queue *q, size_t need)
{
        if (need <= q->cap)
                return 0;
        size_t cap = q->cap ? q->cap : 64;
        while (cap < need)
                cap *= 2;
        loom_action *p = malloc(sizeof *p * cap);
        if (!p)
                return LOOM_ENOMEM;
        for (size_t i = 0; i < q->len; i++)
                p[i] = q->a[(q->head + i) % q->cap];
        free(q->a);
        q->a = p;
        q->cap = cap;
        q->head = 0;
        return 0;
}

int loom__push_action(loom_sched *s, const loom_action *a)
{
        action_queue *q = &s->actions;
        int rc = actions_reserve(q, q->len + 1);
        if (rc)
                return rc;
        q->a[(q->head + q->len++) % q->cap] = *a;
        return 0;
}

bool loom_sched_next_action(loom_sched *s, loom_action *out)
{
        action_queue *q = &s->actions;
        if (!q->len)
                return false;
        *out = q->a[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
        return true;
}

/* ---- lifecycle ------------------------------------------------------------------------- */

loom_sched *loom_sched_new(const loom_cluster_cfg *c, const loom_policy_cfg *p, loom_err *e)
{
        if (loom_cluster_cfg_validate(c, e) || loom_policy_cfg_validate(p, c, e))
                return NULL;
        loom_sched *s = calloc(1, sizeof *s);
        if (!s) {
                loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                return NULL;
        }
        s->cluster = *c;
        s->policy = *p;
        s->price[LOOM_POOL_ROLLOUT] = loom_cluster_node_price(c, LOOM_POOL_ROLLOUT);
        s->price[LOOM_POOL_TRAIN] = loom_cluster_node_price(c, LOOM_POOL_TRAIN);
        s->next_job = 1;
        s->rng = p->seed;
        if (p->placer == LOOM_PLACER_PLEX && loom__plex_new(s, e)) {
                free(s);
                return NULL;
        }
        return s;
}

/* A job with room for k rollout node ids: inline for the common one or two. */
static job *job_new(int k)
{
        job *j = calloc(1, sizeof *j);
        if (!j)
                return NULL;
        j->rnodes = k <= 2 ? j->rnodes_inline : calloc((size_t)k, sizeof(loom_node_id));
        if (!j->rnodes) {
                free(j);
                return NULL;
        }
        return j;
}

static void job_free(job *j)
{
        if (j && j->rnodes != j->rnodes_inline)
                free(j->rnodes);
        if (j)
                free(j->ls);
        free(j);
}

static void group_free(group *g)
{
        if (g) {
                free(g->rnodes);
                free(g);
        }
}

void loom_sched_free(loom_sched *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->cap_jobs; i++)
                job_free(s->jobs[i]);
        for (size_t i = 0; i < s->cap_groups; i++)
                group_free(s->groups[i]);
        for (size_t i = 0; i < s->cap_rnodes; i++)
                free(s->rnodes[i]);
        free(s->jobs);
        free(s->groups);
        free(s->rnodes);
        free(s->open);
        free(s->actions.a);
        loom_plex_free(s->plex);
        free(s);
}

/* ---- group bookkeeping ----------------------------------------------------------------- */

static void open_remove(loom_sched *s, group *g)
{
        if (g->open_idx < 0)
                return;
        int i = g->open_idx, last = --s->n_open;
        if (i != last) {
                s->open[i] = s->open[last];
                s->open[i].g->open_idx = i;
        }
        g->open_idx = -1;
}

/* Room for one more open group. */
static int open_reserve(loom_sched *s)
{
        return loom_reserve(&s->open, &s->cap_open, (size_t)s->n_open + 1, sizeof *s->open, 64);
}

static int open_put(loom_sched *s, group *g)
{
        if (g->open_idx < 0) {
                if (open_reserve(s))
                        return LOOM_ENOMEM;
                g->open_idx = s->n_open++;
        }
        s->open[g->open_idx] = loom__open_entry(g);
        return 0;
}

/* Whether g is in the open list, offered to new members: it has members and room. And
 * (policy.slo_cap) not while its one member's SLO is relaxed and unlearned: such a member is
 * held to its lone iteration on its declared phases, a budget joins could stretch it to. */
bool loom__held(const group *g)
{
        const job *m0 = g->n_members == 1 ? g->members[0] : NULL;
        return m0 && m0->slo_relaxed && !(m0->ls && m0->ls->learned);
}

static bool takes_members(const group *g)
{
        return g->n_members > 0 && !g->saturated && !g->full && !loom__held(g);
}

#ifndef NDEBUG
static void assert_group(const loom_sched *s, const group *g)
{
        loom_us sum = 0;
        uint64_t mem = 0;
        for (int i = 0; i < g->n_members; i++) {
                sum += g->members[i]->rate * g->members[i]->t_train_in;
                mem += g->members[i]->mem_train_in;
                assert(g->members[i]->group == g);
        }
        assert(sum == g->sum_train && mem == g->train_mem_used);
        for (int i = 1; i < g->n_rnodes; i++)
                assert(g->rnodes[i - 1]->id < g->rnodes[i]->id);
        assert(takes_members(g) == (g->open_idx >= 0));
        (void)s;
}
#else
#define assert_group(s, g) ((void)0)
#endif

/* Each member's slots in the group's intra-meta-iteration order (loom_meta_order). */
static void group_slots(group *g)
{
        loom_meta_job mj[LOOM_MAX_GROUP_SIZE];
        int slots[LOOM_META_MAX_SLOTS], seen[LOOM_MAX_GROUP_SIZE] = {0}, rates[LOOM_MAX_GROUP_SIZE];
        for (int i = 0; i < g->n_members; i++) {
                const job *j = g->members[i];
                mj[i] = (loom_meta_job){
                    .t_roll = j->spec.t_roll, .t_train = j->t_train_in, .t_sync = j->spec.t_sync};
                rates[i] = j->rate;
        }
        int L = loom_meta_order(mj, rates, g->n_members, slots, LOOM_META_MAX_SLOTS);
        for (int k = 0; k < L; k++) {
                job *j = g->members[slots[k]];
                j->pos[seen[slots[k]]++] = k;
        }
}

loom_us loom__train_in(const loom_sched *s, const group *g, const job *j)
{
        return loom_group_train_time(j->spec.t_train, j->spec.train_gpus, g->train_gpus,
                                     s->policy.train_scaling_efficiency);
}

uint64_t loom__mem_in(const loom_sched *s, const group *g, const job *j)
{
        (void)s;
        return loom_group_train_mem(j->spec.mem_train, j->spec.train_gpus, g->train_gpus);
}

void loom__group_sums(const loom_sched *s, group *g, bool meta)
{
        g->sum_train = 0;
        g->t_cycle = 0;
        g->min_budget = INT64_MAX;
        g->train_mem_used = 0;
        g->n_coupled = 0;
        g->max_switch = 0;
        g->density = 0;
        g->max_train = 0;
        g->gap_slack = INT64_MAX;
        for (int i = 0; i < g->n_members; i++) {
                const job *j = g->members[i];
                loom_us tt = loom__train_in(s, g, j);
                if (tt > g->max_train)
                        g->max_train = tt;
                if (j->slo_budget - tt < g->gap_slack)
                        g->gap_slack = j->slo_budget - tt;
                g->n_coupled += j->n_rnodes > 1 || j->spec.t_sync > 0 || j->rate > 1 ||
                                loom__roll_occ(s, &j->spec, 0) != j->spec.t_roll;
                loom_us sw = loom__switch(s, &j->spec);
                g->max_switch = sw > g->max_switch ? sw : g->max_switch;
                g->sum_train += j->rate * tt;
                g->train_mem_used += loom__mem_in(s, g, j);
                loom_us solo = j->rate * (j->spec.t_roll + tt + j->spec.t_sync);
                if (solo > g->t_cycle)
                        g->t_cycle = solo;
                if (j->rate * j->slo_budget < g->min_budget)
                        g->min_budget = j->rate * j->slo_budget;
                g->density += (double)tt / (double)j->slo_budget;
        }
        g->t_load = g->sum_train;
        for (int i = 0; i < g->n_rnodes; i++)
                if (g->rnodes[i]->load > g->t_load)
                        g->t_load = g->rnodes[i]->load;
        g->saturated = g->t_load >= g->t_cycle;
        if (!meta)
                g->t_meta = 0;
        else if (loom__group_meta(s, g, &g->t_meta))
                g->t_meta = g->t_load > g->t_cycle ? g->t_load : g->t_cycle;
}

void loom__group_refresh(loom_sched *s, group *g)
{
        loom__group_sums(s, g, true);
        group_slots(g);
        bool full = g->n_members >= s->policy.max_group_size;
        s->n_closed_full += (int)full - (int)g->full;
        g->full = full;
        if (takes_members(g))
                open_put(s, g); /* on ENOMEM the group is just not offered to new jobs */
        else
                open_remove(s, g);
        assert_group(s, g);
}

/* Insert r into g's rollout nodes, keeping ids ascending. The caller reserved the room. */
static void rnodes_insert(group *g, rnode *r)
{
        int i = g->n_rnodes++;
        while (i > 0 && g->rnodes[i - 1]->id > r->id) {
                g->rnodes[i] = g->rnodes[i - 1];
                i--;
        }
        g->rnodes[i] = r;
}

static void node_action(loom_sched *s, loom_action_type t, loom_pool pool, loom_node_id id,
                        loom_group_id gid)
{
        loom_action a = {.type = t, .pool = pool, .node = id, .group = gid};
        loom__push_action(s, &a);
        s->nodes[pool] += t == LOOM_ACT_PROVISION_NODE ? 1 : -1;
}

/* ---- submit ---------------------------------------------------------------------------- */

/* Make sure every table the decision will touch has room, so applying it cannot fail. */
static int reserve(loom_sched *s, const loom_decision *d)
{
        int rc;
        if ((rc = grow(&s->jobs, &s->cap_jobs, s->next_job, sizeof(job *))) ||
            (rc = grow(&s->groups, &s->cap_groups, s->next_group, sizeof(group *))) ||
            (rc = grow(&s->rnodes, &s->cap_rnodes, s->next_rnode + LOOM_MAX_JOB_NODES,
                       sizeof(rnode *))))
                return rc;
        if ((rc = open_reserve(s)))
                return rc;
        if ((rc =
                 actions_reserve(&s->actions, s->actions.len + 2 * (size_t)LOOM_MAX_JOB_NODES + 8)))
                return rc;
        (void)d;
        return 0;
}

/* Register a freshly allocated group with the training nodes of `spec`. */
static void group_open(loom_sched *s, group *g, const loom_decision *d)
{
        g->id = s->next_group++;
        g->open_idx = -1;
        g->n_tnodes = g->opened_tnodes = d->n_train_nodes; /* or fewer: train_rightsize */
        g->train_gpus = d->n_train_nodes * s->cluster.gpus_per_node;
        for (int i = 0; i < g->n_tnodes; i++) {
                g->tnodes[i] = s->next_tnode++;
                node_action(s, LOOM_ACT_PROVISION_NODE, LOOM_POOL_TRAIN, g->tnodes[i], g->id);
        }
        s->groups[g->id] = g;
        s->live_groups++;
}

/* g's training pool becomes its first n nodes: every member trains on it from its next
 * training on. */
static void pool_resize(loom_sched *s, group *g, int n)
{
        g->n_tnodes = n;
        g->train_gpus = n * s->cluster.gpus_per_node;
        for (int i = 0; i < g->n_members; i++) {
                job *j = g->members[i];
                j->t_train_in = loom__train_in(s, g, j);
                j->mem_train_in = loom__mem_in(s, g, j);
        }
}

/* Give g's training pool the nodes d adds (policy.pool_grow). */
static void pool_grow(loom_sched *s, group *g, const loom_decision *d)
{
        for (int i = g->n_tnodes; i < d->n_train_nodes; i++) {
                g->tnodes[i] = s->next_tnode++;
                node_action(s, LOOM_ACT_PROVISION_NODE, LOOM_POOL_TRAIN, g->tnodes[i], g->id);
        }
        s->stats.pool_grown += (uint64_t)(d->n_train_nodes - g->n_tnodes);
        pool_resize(s, g, d->n_train_nodes);
}

/* policy.pool_grow: a departure shrinks a grown pool to the fewest nodes (not below the one it
 * opened with) that keep every member's budget; the nodes leave it now and are released once
 * no phase runs there. */
static void pool_shrink(loom_sched *s, group *g)
{
        if (g->n_tnodes <= g->opened_tnodes) /* only a grown pool is past it */
                return;
        int p = loom__pool_least(s, g);
        for (int i = p; i < g->n_tnodes; i++)
                g->releasing[g->n_releasing++] = g->tnodes[i];
        s->stats.pool_shrunk += (uint64_t)(g->n_tnodes - p);
        pool_resize(s, g, p);
        loom__pool_settle(s, g);
}

void loom__pool_settle(loom_sched *s, group *g)
{
        if (g->n_releasing == 0 || g->train_running)
                return;
        for (int i = 0; i < g->n_releasing; i++)
                node_action(s, LOOM_ACT_RELEASE_NODE, LOOM_POOL_TRAIN, g->releasing[i], g->id);
        g->n_releasing = 0;
}

/* Everything apply() allocates, obtained before anything changes. */
typedef struct apply_mem {
        job *j;
        group *g_new;
        rnode *r_new[LOOM_MAX_JOB_NODES];
        int n_new;
} apply_mem;

static void apply_mem_free(apply_mem *m)
{
        job_free(m->j);
        group_free(m->g_new);
        for (int i = 0; i < m->n_new; i++)
                free(m->r_new[i]);
}

static int apply_alloc(loom_sched *s, const loom_decision *d, apply_mem *m)
{
        memset(m, 0, sizeof *m);
        group *g = NULL;
        if (!(m->j = job_new(d->n_rollout_nodes)))
                goto nomem;
        if (s->policy.admission != LOOM_ADMIT_WORST && !(m->j->ls = calloc(1, sizeof *m->j->ls)))
                goto nomem;
        if (d->kind == LOOM_DECISION_NEW_GROUP) {
                if (!(g = m->g_new = calloc(1, sizeof *g)))
                        goto nomem;
        } else {
                g = group_of(s, d->group);
        }
        for (int k = 0; k < d->n_rollout_nodes; k++)
                if (d->rollout_nodes[k] >= s->next_rnode &&
                    !(m->r_new[m->n_new++] = calloc(1, sizeof(rnode))))
                        goto nomem;
        /* more room changes nothing visible */
        if (loom_reserve(&g->rnodes, &g->cap_rnodes, (size_t)(g->n_rnodes + m->n_new),
                         sizeof *g->rnodes, 4))
                goto nomem;
        return 0;
nomem:
        apply_mem_free(m);
        return LOOM_ENOMEM;
}

/* Carry out decision d for spec. Allocates first; on ENOMEM nothing has changed. */
static int apply(loom_sched *s, loom_us now, const loom_job_spec *spec, const loom_decision *d,
                 loom_job_id *id)
{
        apply_mem m;
        int rc = apply_alloc(s, d, &m);
        if (rc)
                return rc;
        job *j = m.j;
        group *g = m.g_new ? m.g_new : group_of(s, d->group);
        if (m.g_new) {
                group_open(s, g, d);
                g->lone = loom__lone_fits(s, spec, loom_job_budget(spec), g->n_tnodes);
                g->rnodes_up = !g->lone;
        } else if (d->n_train_nodes > g->n_tnodes) {
                pool_grow(s, g, d);
        }
        if (!m.g_new && g->lone) {
                /* a second member: the lone member's rollout nodes are provisioned now (unless
                 * its rollout still runs there), and its rollouts move there from its next one */
                g->lone = false;
                for (int i = 0; i < g->n_rnodes && !g->rnodes_up; i++)
                        node_action(s, LOOM_ACT_PROVISION_NODE, LOOM_POOL_ROLLOUT, g->rnodes[i]->id,
                                    g->id);
                g->rnodes_up = true;
        }
        for (int k = 0, fresh = 0; k < d->n_rollout_nodes; k++) {
                loom_node_id nid = d->rollout_nodes[k];
                if (nid >= s->next_rnode) {
                        rnode *r = m.r_new[fresh++];
                        r->id = nid;
                        r->group = g;
                        rnodes_insert(g, r);
                        s->next_rnode = nid + 1;
                        s->rnodes[r->id] = r;
                        if (!g->lone)
                                node_action(s, LOOM_ACT_PROVISION_NODE, LOOM_POOL_ROLLOUT, r->id,
                                            g->id);
                }
                rnode *r = s->rnodes[nid];
                r->load += (d->rate > 1 ? d->rate : 1) * loom__roll_occ(s, spec, k);
                r->mem_used += spec->mem_rollout;
                r->n_pinned++;
                j->rnodes[j->n_rnodes++] = nid;
        }
        j->id = s->next_job++;
        j->spec = *spec;
        if (j->ls)
                j->ls->declared = *spec;
        j->group = g;
        j->t_train_in = loom__train_in(s, g, j);
        j->mem_train_in = loom__mem_in(s, g, j);
        j->slo_budget = loom_job_budget(spec);
        j->slo_relaxed = d->slo_effective > 0;
        j->submitted_at = now;
        j->state = LOOM_JOB_WAIT_ROLL;
        j->wait_seq = ++s->seq;
        int64_t round = loom__next_round(g);
        j->round_base = round;
        j->rate = d->rate > 1 ? d->rate : 1;
        for (int i = 0; i < d->n_rerated; i++) {
                job *o = loom__job(s, d->rerated[i]);
                if (o && o->group == g)
                        loom__set_rate(s, o, d->rerated_rate[i], round);
        }
        s->jobs[j->id] = j;
        s->live_jobs++;
        g->members[g->n_members++] = j;
        loom__group_refresh(s, g);
        *id = j->id;
        loom__dispatch(s, g, now);
        return 0;
}

/* Validate spec_in, hold it to the fleet's prior into *sp (under learned admission a job
 * without history is) and search its placement, drawing from *rng. */
static int place_new(const loom_sched *s, const loom_job_spec *spec_in, loom_job_spec *sp,
                     loom_decision *d, loom_err *e, uint64_t *rng)
{
        int rc = loom_job_spec_validate(spec_in, &s->cluster, e);
        if (rc)
                return rc;
        *sp = *spec_in;
        loom_job_spec likely;
        bool fresh = loom__learn_prior(s, sp, &likely);
        /* a member moved to its planned group (policy.regroup) goes there if it still fits */
        if (s->handoff.set && (rc = loom__regroup_place(s, sp, d, e)) <= 0)
                return rc;
        rc = loom__place(s, sp, fresh ? &likely : NULL, NULL, 0, d, e, rng);
        return rc ? rc : loom__slo_cap(s, sp, d, e);
}

/* What an iteration of spec costs where d places it: the nodes d adds, per hour, for the
 * iteration it plans there (a grown lone group: its lone iteration on them). */
static double iteration_cost(const loom_sched *s, const loom_job_spec *spec, const loom_decision *d)
{
        double it = (double)d->t_meta / (d->rate > 1 ? d->rate : 1);
        if (d->kind == LOOM_DECISION_NEW_GROUP &&
            d->n_train_nodes > spec->train_gpus / s->cluster.gpus_per_node)
                it = (double)loom__lone_iteration(s, spec, d->n_train_nodes);
        return d->marginal_cost_per_hour * it;
}

/* d's candidates, when recorded: the search's choice, which keeps the SLO, is marked costlier
 * and d's relaxed lone placement added as the one chosen. */
static int explain_relaxed(loom_decision *d, double premium, double cap)
{
        if (!d->record_candidates)
                return 0;
        for (int i = d->n_candidates - 1; i >= 0; i--)
                if (d->candidates[i].reject == LOOM_REJECT_NONE) {
                        d->candidates[i].reject = LOOM_REJECT_COSTLIER;
                        snprintf(d->candidates[i].why, sizeof d->candidates[i].why,
                                 "keeps the SLO for %.0f%% more per iteration than running "
                                 "colocated, past policy.slo_premium %.2f",
                                 100 * premium, cap);
                        break;
                }
        if (loom_reserve(&d->candidates, &d->cap_candidates, (size_t)d->n_candidates + 1,
                         sizeof *d->candidates, 16))
                return LOOM_ENOMEM;
        loom_candidate *o = &d->candidates[d->n_candidates++];
        memset(o, 0, sizeof *o);
        o->kind = d->kind;
        o->group = LOOM_NEW_GROUP;
        o->n_rollout_nodes = o->new_rollout_nodes = d->n_rollout_nodes;
        memcpy(o->rollout_nodes, d->rollout_nodes,
               sizeof(loom_node_id) * (size_t)d->n_rollout_nodes);
        o->new_train_nodes = d->n_train_nodes;
        o->marginal_cost_per_hour = d->marginal_cost_per_hour;
        o->t_meta = d->t_meta;
        o->utilisation = d->utilisation;
        o->rate = 1;
        snprintf(o->why, sizeof o->why, "chosen: lone, its SLO relaxed to %.3f", d->slo_effective);
        return 0;
}

bool loom__slo_too_dear(const loom_sched *s, double keep, double alone)
{
        return s->policy.slo_cap && keep > (1 + s->policy.slo_premium) * alone * (1 + 1e-9);
}

int loom__slo_cap(const loom_sched *s, loom_job_spec *spec, loom_decision *d, loom_err *e)
{
        const loom_policy_cfg *p = &s->policy;
        if (!p->slo_cap || p->placer != LOOM_PLACER_LOOM || d->kind == LOOM_DECISION_REJECTED)
                return 0;
        int t = spec->train_gpus / s->cluster.gpus_per_node;
        loom_us budget = loom_job_budget(spec), lone = loom__lone_iteration(s, spec, t);
        /* kept where lone keeps it, or where lone is not possible (room, memory, policy) */
        if (lone <= budget || !loom__lone_fits(s, spec, INT64_MAX, t))
                return 0;
        double alone = t * s->price[LOOM_POOL_TRAIN] * (double)lone,
               keep = iteration_cost(s, spec, d);
        if (!loom__slo_too_dear(s, keep, alone))
                return 0;
        loom_job_spec relaxed = *spec;
        /* its lone iteration over the solo iteration its SLO is measured against */
        double eff = (double)lone / ((double)budget / spec->slo);
        relaxed.t_solo_ref = (loom_us)ceil((double)lone / spec->slo) + 1; /* past rounding */
        if (!loom__lone_fits(s, &relaxed, loom_job_budget(&relaxed), t))
                return 0;
        loom_decision l;
        loom_decision_init(&l, false);
        int rc = loom__place_into(s, &relaxed, NULL, 0, &l, e);
        if (rc < 0)
                return rc;
        if (rc == 0) {
                loom_candidate *cands = d->candidates;
                int n = d->n_candidates;
                size_t cap = d->cap_candidates;
                bool rec = d->record_candidates;
                int pb = d->groups_pruned_bound, ps = d->groups_pruned_saturated,
                    pf = d->groups_pruned_full;
                *d = l;
                snprintf(d->reason, sizeof d->reason,
                         "keeping SLO %.3f costs %.0f%% more per iteration than running the job "
                         "colocated, past policy.slo_premium %.2f: new lone group, +$%.2f/h, "
                         "its rollouts on the training nodes, SLO relaxed to %.3f",
                         spec->slo, 100 * (keep / alone - 1), p->slo_premium,
                         d->marginal_cost_per_hour, eff);
                d->candidates = cands, d->n_candidates = n, d->cap_candidates = cap;
                d->record_candidates = rec;
                d->groups_pruned_bound = pb, d->groups_pruned_saturated = ps,
                d->groups_pruned_full = pf;
                d->slo_effective = eff;
                *spec = relaxed;
                rc = explain_relaxed(d, keep / alone - 1, p->slo_premium);
        }
        loom_decision_free(&l);
        return rc > 0 ? 0 : rc; /* 1: lone cannot take it after all; d as the search chose */
}

int loom_sched_decide(const loom_sched *s, const loom_job_spec *spec_in, loom_decision *d,
                      loom_err *e)
{
        loom_job_spec sp;
        uint64_t rng = s->rng;
        return place_new(s, spec_in, &sp, d, e, &rng);
}

static int commit(loom_sched *s, loom_us now, const loom_job_spec *spec, loom_decision *d,
                  loom_job_id *id, loom_err *e, uint64_t rng);

int loom_sched_submit(loom_sched *s, loom_us now, const loom_job_spec *spec_in, loom_decision *d,
                      loom_job_id *id, loom_err *e)
{
        loom_job_spec sp;
        uint64_t rng = s->rng;
        int rc = place_new(s, spec_in, &sp, d, e, &rng);
        s->handoff.set = false;
        if (rc == LOOM_EREJECT)
                s->stats.decisions[LOOM_DECISION_REJECTED]++;
        return rc ? rc : commit(s, now, &sp, d, id, e, rng);
}

/* Apply decision d for the held spec and keep the search's draws (rng). */
static int commit(loom_sched *s, loom_us now, const loom_job_spec *spec, loom_decision *d,
                  loom_job_id *id, loom_err *e, uint64_t rng)
{
        int rc;
        loom_job_id next = s->next_job;
        if (s->plex && (rc = loom__plex_commit(s, next, spec, d)))
                return loom_err_set(e, rc, "", "could not reserve the timeline: %s",
                                    loom_strerror(rc));
        if ((rc = reserve(s, d)) || (rc = apply(s, now, spec, d, id))) {
                if (s->plex)
                        loom__plex_release(s, next);
                return loom_err_set(e, rc, "", "could not apply the placement: %s",
                                    loom_strerror(rc));
        }
        s->rng = rng;
        s->stats.decisions[d->kind]++;
        s->stats.slo_relaxed += d->slo_effective > 0;
        return 0;
}

/* Whether want is a placement this core could apply for spec (loom_sched_submit_as). */
static int placed_ok(const loom_sched *s, const loom_job_spec *spec, const loom_decision *want,
                     loom_err *e)
{
        int k = spec->rollout_gpus / s->cluster.gpus_per_node;
        const group *g = NULL;
        if (want->kind == LOOM_DECISION_NEW_GROUP) {
                if (want->group != s->next_group)
                        return loom_err_set(e, LOOM_EINVAL, "group",
                                            "new group %u is not the next group id %u",
                                            (unsigned)want->group, (unsigned)s->next_group);
                if (want->n_train_nodes < 1 || want->n_train_nodes > LOOM_MAX_JOB_NODES)
                        return loom_err_set(e, LOOM_EINVAL, "train_nodes", "%d training nodes",
                                            want->n_train_nodes);
                for (int i = 0; i < want->n_train_nodes; i++)
                        if (want->train_nodes[i] != s->next_tnode + (loom_node_id)i)
                                return loom_err_set(e, LOOM_EINVAL, "train_nodes",
                                                    "a new group's training nodes start at %u",
                                                    (unsigned)s->next_tnode);
        } else if (want->kind == LOOM_DECISION_DIRECT_PACK ||
                   want->kind == LOOM_DECISION_ROLLOUT_SCALE) {
                g = group_of(s, want->group);
                if (!g || g->full || g->n_members >= LOOM_MAX_GROUP_SIZE)
                        return loom_err_set(e, LOOM_EINVAL, "group", "group %u %s",
                                            (unsigned)want->group,
                                            g ? "takes no more members" : "does not exist");
                int grow = want->n_train_nodes - g->n_tnodes;
                if (grow < 0 || want->n_train_nodes > LOOM_MAX_JOB_NODES ||
                    (grow > 0 && !s->policy.pool_grow) ||
                    grow > spec->train_gpus / s->cluster.gpus_per_node)
                        return loom_err_set(e, LOOM_EINVAL, "train_nodes",
                                            "group %u has %d training nodes, not %d",
                                            (unsigned)g->id, g->n_tnodes, want->n_train_nodes);
                for (int i = 0; i < want->n_train_nodes; i++)
                        if (want->train_nodes[i] !=
                            (i < g->n_tnodes ? g->tnodes[i]
                                             : s->next_tnode + (loom_node_id)(i - g->n_tnodes)))
                                return loom_err_set(
                                    e, LOOM_EINVAL, "train_nodes",
                                    "not group %u's training nodes%s", (unsigned)g->id,
                                    grow ? " and fresh ones from the next free" : "");
        } else {
                return loom_err_set(e, LOOM_EINVAL, "decision", "not a placement");
        }
        if (want->n_rollout_nodes != k)
                return loom_err_set(e, LOOM_EINVAL, "rollout_nodes",
                                    "the job needs %d rollout nodes, not %d", k,
                                    want->n_rollout_nodes);
        int fresh = 0;
        for (int i = 0; i < k; i++) {
                loom_node_id id = want->rollout_nodes[i];
                if (i > 0 && id <= want->rollout_nodes[i - 1])
                        return loom_err_set(e, LOOM_EINVAL, "rollout_nodes", "not ascending");
                if (id >= s->next_rnode)
                        fresh++;
                else if (!g || !s->rnodes[id] || s->rnodes[id]->group != g)
                        return loom_err_set(e, LOOM_EINVAL, "rollout_nodes",
                                            "rollout node %u is not group %u's", (unsigned)id,
                                            (unsigned)want->group);
        }
        if (g && g->n_rnodes + fresh > LOOM_MAX_GROUP_ROLLOUT_NODES)
                return loom_err_set(e, LOOM_EINVAL, "rollout_nodes", "group %u is at %d nodes",
                                    (unsigned)g->id, LOOM_MAX_GROUP_ROLLOUT_NODES);
        return 0;
}

static bool placed_as(const loom_decision *d, const loom_decision *want)
{
        return d->group == want->group && d->n_rollout_nodes == want->n_rollout_nodes &&
               d->n_train_nodes == want->n_train_nodes &&
               !memcmp(d->rollout_nodes, want->rollout_nodes,
                       sizeof(loom_node_id) * (size_t)d->n_rollout_nodes) &&
               !memcmp(d->train_nodes, want->train_nodes,
                       sizeof(loom_node_id) * (size_t)d->n_train_nodes);
}

int loom_sched_submit_as(loom_sched *s, loom_us now, const loom_job_spec *spec_in,
                         const loom_decision *want, loom_decision *d, loom_job_id *id, loom_err *e)
{
        loom_job_spec sp;
        uint64_t rng = s->rng;
        int rc = place_new(s, spec_in, &sp, d, e, &rng);
        s->handoff.set = false;
        if (rc && rc != LOOM_EREJECT)
                return rc;
        if (!rc && (s->plex || placed_as(d, want)))
                return commit(s, now, &sp, d, id, e, rng);
        loom_err why;
        loom_err_clear(&why);
        if (s->plex || placed_ok(s, &sp, want, &why)) {
                if (rc)
                        return rc;
                rc = commit(s, now, &sp, d, id, e, rng);
                if (!rc)
                        *e = why;
                return rc ? rc : LOOM_SUBMIT_SEARCHED;
        }
        char chose[96];
        if (rc)
                snprintf(chose, sizeof chose, "the search rejects it");
        else
                snprintf(chose, sizeof chose, "the search chose %sgroup %u",
                         d->kind == LOOM_DECISION_NEW_GROUP ? "a new " : "", (unsigned)d->group);
        bool keep = d->record_candidates;
        loom_decision_free(d);
        loom_decision_init(d, keep);
        d->kind = want->kind;
        d->group = want->group;
        d->n_rollout_nodes = want->n_rollout_nodes;
        memcpy(d->rollout_nodes, want->rollout_nodes, sizeof d->rollout_nodes);
        d->n_train_nodes = want->n_train_nodes;
        memcpy(d->train_nodes, want->train_nodes, sizeof d->train_nodes);
        d->rate = want->rate > 1 ? want->rate : 1;
        if ((rc = commit(s, now, &sp, d, id, e, rng)))
                return rc;
        const group *g = s->jobs[*id]->group;
        d->t_meta = g->t_meta;
        d->utilisation = g->t_meta > 0 ? (double)g->t_load / (double)g->t_meta : 0;
        snprintf(d->reason, sizeof d->reason, "kept as recorded in group %u; %s", (unsigned)g->id,
                 chose);
        return LOOM_SUBMIT_KEPT;
}

/* ---- events ---------------------------------------------------------------------------- */

static int phase_ok(loom_phase p)
{
        return p == LOOM_PHASE_ROLLOUT || p == LOOM_PHASE_TRAIN || p == LOOM_PHASE_SYNC;
}

int loom_sched_phase_started(loom_sched *s, loom_us now, loom_job_id id, loom_phase phase)
{
        static const loom_job_state running[] = {LOOM_JOB_ROLLING, LOOM_JOB_TRAINING,
                                                 LOOM_JOB_SYNCING};
        job *j = loom__job(s, id);
        (void)now;
        if (!j)
                return LOOM_ENOENT;
        if (!phase_ok(phase))
                return LOOM_EINVAL;
        return j->state == running[phase] ? 0 : LOOM_ESTATE;
}

int loom_sched_progress(loom_sched *s, loom_us now, loom_job_id id, loom_phase phase, int64_t done,
                        int64_t total)
{
        job *j = loom__job(s, id);
        if (!j)
                return LOOM_ENOENT;
        if (!phase_ok(phase) || done < 0 || total < 0 || done > total)
                return LOOM_EINVAL;
        if (phase != LOOM_PHASE_ROLLOUT)
                return 0;
        return loom__progress(s, j, now, done, total);
}

int loom_sched_phase_done(loom_sched *s, loom_us now, loom_job_id id, loom_phase phase)
{
        job *j = loom__job(s, id);
        if (!j)
                return LOOM_ENOENT;
        if (!phase_ok(phase))
                return LOOM_EINVAL;
        return loom__phase_done(s, j, now, phase);
}

int loom_sched_observe(loom_sched *s, loom_us now, loom_job_id id, loom_phase phase, loom_us took)
{
        return loom_sched_observe_on(
            s, now, id, phase, phase == LOOM_PHASE_ROLLOUT ? LOOM_POOL_ROLLOUT : LOOM_POOL_TRAIN,
            took);
}

int loom_sched_observe_on(loom_sched *s, loom_us now, loom_job_id id, loom_phase phase,
                          loom_pool pool, loom_us took)
{
        return loom_sched_observe_ran(s, now, id, phase, pool, 0, took);
}

int loom_sched_observe_ran(loom_sched *s, loom_us now, loom_job_id id, loom_phase phase,
                           loom_pool pool, int gpus, loom_us took)
{
        job *j = loom__job(s, id);
        (void)now;
        s->plan_made = false;
        if (!j)
                return LOOM_ENOENT;
        if (!phase_ok(phase) || took < 0 || gpus < 0 ||
            (pool != LOOM_POOL_ROLLOUT && pool != LOOM_POOL_TRAIN))
                return LOOM_EINVAL;
        s->handoff.set = false;
        bool planned = j->regroup_planned && phase == LOOM_PHASE_TRAIN;
        int rc = loom__observe(s, j, phase, took,
                               phase == LOOM_PHASE_ROLLOUT && pool == LOOM_POOL_TRAIN, gpus);
        if (rc == 1)
                s->stats.replans++;
        /* policy.regroup: a planned member due at its planned group; its re-admission, the
         * next submit, goes there. One that waits too long drops its plan. */
        if (rc == 3 && planned && j->regroup_planned) {
                s->handoff.set = true;
                s->handoff.alone = j->regroup_alone;
                s->handoff.to = j->regroup_to;
                snprintf(s->handoff.id, sizeof s->handoff.id, "%s", j->spec.id);
        }
        if (planned && ++j->regroup_tries > LOOM_REGROUP_TRIES)
                j->regroup_planned = false;
        /* policy.regroup: a job that has just learned its profile may be worth regrouping */
        if (rc == 1 && j->ls && j->ls->replans == 1 && s->policy.regroup &&
            s->policy.placer == LOOM_PLACER_LOOM)
                loom__regroup(s, j->group);
        if (rc >= 0)
                loom__lone_recheck(s, j->group, false); /* what it learned may stop it fitting */
        return rc;
}

int loom_sched_observe_head(loom_sched *s, loom_job_id id, loom_us head)
{
        job *j = loom__job(s, id);
        if (!j)
                return LOOM_ENOENT;
        if (head < 0)
                return LOOM_EINVAL;
        if (j->ls)
                j->head_took = head;
        return 0;
}

void loom__set_rate(loom_sched *s, job *j, int rate, int64_t round)
{
        for (int k = 0; k < j->n_rnodes; k++)
                s->rnodes[j->rnodes[k]]->load += (rate - j->rate) * loom__roll_occ(s, &j->spec, k);
        j->rate = rate;
        j->round_base = round;
        j->count_base = j->trains;
}

static void unpin(loom_sched *s, job *j, group *g)
{
        for (int k = 0; k < j->n_rnodes; k++) {
                rnode *r = s->rnodes[j->rnodes[k]];
                r->load -= j->rate * loom__roll_occ(s, &j->spec, k);
                r->mem_used -= j->spec.mem_rollout;
                if (--r->n_pinned > 0)
                        continue;
                int i = 0;
                while (g->rnodes[i] != r)
                        i++;
                memmove(&g->rnodes[i], &g->rnodes[i + 1],
                        sizeof(rnode *) * (size_t)(g->n_rnodes - i - 1));
                g->n_rnodes--;
                if (g->rnodes_up)
                        node_action(s, LOOM_ACT_RELEASE_NODE, LOOM_POOL_ROLLOUT, r->id, g->id);
                s->rnodes[r->id] = NULL;
                free(r);
        }
        int i = 0;
        while (g->members[i] != j)
                i++;
        memmove(&g->members[i], &g->members[i + 1], sizeof(job *) * (size_t)(g->n_members - i - 1));
        g->n_members--;
}

int loom_sched_job_exit(loom_sched *s, loom_us now, loom_job_id id, loom_exit reason)
{
        job *j = loom__job(s, id);
        s->plan_made = false;
        if (!j)
                return LOOM_ENOENT;
        group *g = j->group;
        if (s->plex)
                loom__plex_release(s, id);
        loom__release_running(s, j, now);
        unpin(s, j, g);
        loom__learn_exit(s, j);
        s->jobs[id] = NULL;
        s->live_jobs--;
        job_free(j);
        /* policy.regroup: a job that finished re-solves the groups around the one it left */
        bool regroup = s->policy.regroup && reason == LOOM_EXIT_FINISHED &&
                       s->policy.placer == LOOM_PLACER_LOOM &&
                       s->policy.admission != LOOM_ADMIT_WORST;
        if (g->n_members == 0) {
                for (int i = 0; i < g->n_tnodes; i++)
                        node_action(s, LOOM_ACT_RELEASE_NODE, LOOM_POOL_TRAIN, g->tnodes[i], g->id);
                assert(!g->train_running); /* its last member's phase ended with it */
                loom__pool_settle(s, g);
                open_remove(s, g);
                s->n_closed_full -= (int)g->full;
                s->groups[g->id] = NULL;
                s->live_groups--;
                group_free(g);
                if (regroup)
                        loom__regroup(s, NULL);
                return 0;
        }
        pool_shrink(s, g);
        loom__lone_recheck(s, g, true);
        loom__group_refresh(s, g);
        loom__dispatch(s, g, now);
        if (regroup)
                loom__regroup(s, g);
        return 0;
}

/* j's spec on its mean observed phases once it has learned them: what it runs alone. */
static loom_job_spec mean_phases(const job *j)
{
        loom_job_spec sp = j->spec;
        if (j->ls && j->ls->learned_budget) {
                sp.t_roll = j->ls->mean_roll;
                sp.t_train = j->ls->mean_train;
        }
        return sp;
}

bool loom__job_lone_fits(const loom_sched *s, const job *j, int train_nodes)
{
        loom_job_spec sp = mean_phases(j);
        return loom__lone_fits(s, &sp, j->slo_budget, train_nodes);
}

/*
 * Whether member m, not lone, may switch to lone on train_nodes given what its next rollout
 * costs there: a cold start (its engine and weights loaded onto the training nodes), which the
 * switch check does not see. Known (spec.t_cold), it must fit in its budget over the
 * iterations left, at its lone iteration on its mean phases; not known, the switch is not made
 * in its last LOOM_LONE_LEFT iterations. A job without a bound always may.
 */
static bool lone_start_pays(const loom_sched *s, const job *m, int train_nodes)
{
        if (m->spec.iterations <= 0)
                return true;
        int64_t left = m->spec.iterations - m->iterations_done;
        if (m->spec.t_cold <= 0)
                return left >= LOOM_LONE_LEFT;
        if (left < 1)
                return false;
        loom_job_spec sp = mean_phases(m);
        return (double)loom__lone_iteration(s, &sp, train_nodes) +
                   (double)m->spec.t_cold / (double)left <=
               (double)m->slo_budget;
}

void loom__lone_recheck(loom_sched *s, group *g, bool may_go_lone)
{
        if (may_go_lone)
                g->lone_lost = false; /* a membership change: decided afresh */
        if (g->n_members != 1)
                return;
        const job *m = g->members[0];
        /* a switch to lone also pays the cold start it makes (asked only then) */
        if ((g->lone || !g->lone_lost) && g->lone != loom__job_lone_fits(s, m, g->n_tnodes) &&
            (g->lone || lone_start_pays(s, m, g->n_tnodes))) {
                g->lone = !g->lone;
                g->lone_lost = !may_go_lone && !g->lone;
                for (int i = 0; i < g->n_rnodes && !g->lone && !g->rnodes_up; i++)
                        node_action(s, LOOM_ACT_PROVISION_NODE, LOOM_POOL_ROLLOUT, g->rnodes[i]->id,
                                    g->id);
                g->rnodes_up = g->rnodes_up || !g->lone;
        }
        loom__lone_settle(s, g);
}

void loom__lone_settle(loom_sched *s, group *g)
{
        if (!g->lone || !g->rnodes_up)
                return;
        const job *m = g->members[0];
        if (m->state == LOOM_JOB_ROLLING && !m->colo)
                return; /* its rollout runs on them: released when it ends */
        for (int i = 0; i < g->n_rnodes; i++)
                node_action(s, LOOM_ACT_RELEASE_NODE, LOOM_POOL_ROLLOUT, g->rnodes[i]->id, g->id);
        g->rnodes_up = false;
}

/* ---- queries --------------------------------------------------------------------------- */

int loom_sched_job_iterations(loom_sched *s, loom_job_id id, int64_t done)
{
        job *j = loom__job(s, id);
        if (!j)
                return LOOM_ENOENT;
        if (done < 0 || (j->spec.iterations > 0 && done >= j->spec.iterations))
                return LOOM_EINVAL;
        j->iterations_done = done;
        return 0;
}

int loom_sched_job_info(const loom_sched *s, loom_job_id id, loom_job_info *o)
{
        const job *j = loom__job(s, id);
        if (!j)
                return LOOM_ENOENT;
        memset(o, 0, sizeof *o);
        o->id = j->id;
        o->spec = j->spec;
        o->state = j->state;
        o->group = j->group->id;
        o->n_rollout_nodes = j->n_rnodes;
        memcpy(o->rollout_nodes, j->rnodes, sizeof(loom_node_id) * (size_t)j->n_rnodes);
        o->n_train_nodes = j->group->n_tnodes;
        loom__tnodes(j->group, o->train_nodes);
        o->iterations_done = j->iterations_done;
        o->t_train_in_group = j->t_train_in;
        o->submitted_at = j->submitted_at;
        o->tail_migrated = j->migrated;
        o->declared = j->ls ? j->ls->declared : j->spec;
        if (j->ls) {
                o->learned = j->ls->learned;
                o->replans = j->ls->replans;
                o->learned_roll = j->ls->learned_roll;
                o->learned_train = j->ls->learned_train;
                o->learned_budget = j->ls->learned_budget;
                o->learned_head = j->ls->learned_head;
        }
        o->rate = j->rate;
        o->regroup_planned = j->regroup_planned;
        o->regroup_alone = j->regroup_alone;
        o->regroup_to = j->regroup_to;
        o->regroup_tries = j->regroup_tries;
        return 0;
}

int loom_sched_group_info(const loom_sched *s, loom_group_id id, loom_group_info *o)
{
        const group *g = group_of(s, id);
        if (!g)
                return LOOM_ENOENT;
        memset(o, 0, sizeof *o);
        o->id = g->id;
        o->n_members = g->n_members;
        for (int i = 0; i < g->n_members; i++) {
                o->members[i] = g->members[i]->id;
                o->rates[i] = g->members[i]->rate;
        }
        o->n_rollout_nodes = g->n_rnodes;
        for (int i = 0; i < g->n_rnodes; i++)
                o->rollout_nodes[i] = g->rnodes[i]->id;
        o->n_train_nodes = g->n_tnodes;
        loom__tnodes(g, o->train_nodes);
        o->t_cycle = g->t_cycle;
        o->t_load = g->t_load;
        o->t_meta = g->t_meta;
        o->saturated = g->saturated;
        o->lone = !g->rnodes_up;
        o->cost_per_hour = (g->rnodes_up ? g->n_rnodes : 0) * s->price[LOOM_POOL_ROLLOUT] +
                           g->n_tnodes * s->price[LOOM_POOL_TRAIN];
        return 0;
}

/* The indexes in [from, to) of tab's non-NULL slots: the first cap into ids, and the count. */
static int live_ids(void *const *tab, uint32_t from, uint32_t to, uint32_t *ids, int cap)
{
        int n = 0;
        for (uint32_t i = from; i < to; i++)
                if (tab[i]) {
                        if (n < cap)
                                ids[n] = i;
                        n++;
                }
        return n;
}

int loom_sched_jobs(const loom_sched *s, loom_job_id *ids, int cap)
{
        return live_ids((void *const *)s->jobs, 1, s->next_job, ids, cap);
}

int loom_sched_groups(const loom_sched *s, loom_group_id *ids, int cap)
{
        return live_ids((void *const *)s->groups, 0, s->next_group, ids, cap);
}

void loom_sched_stats_get(const loom_sched *s, loom_sched_stats *o)
{
        *o = s->stats;
        o->jobs = s->live_jobs;
        o->groups = s->live_groups;
        o->nodes[0] = s->nodes[0];
        o->nodes[1] = s->nodes[1];
        o->cost_per_hour = s->nodes[0] * s->price[0] + s->nodes[1] * s->price[1];
}

const loom_cluster_cfg *loom_sched_cluster(const loom_sched *s)
{
        return &s->cluster;
}

const loom_policy_cfg *loom_sched_policy(const loom_sched *s)
{
        return &s->policy;
}
