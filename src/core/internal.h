/*
 * internal.h - the scheduler's state, shared by sched.c (facade, bookkeeping), placement.c
 * (inter-group search) and dispatch.c (intra-group round-robin). Not a public header.
 *
 * Ownership: a loom_sched owns its jobs, groups and nodes. Jobs, groups and nodes live in
 * id-indexed pointer tables; a slot is NULL once the object is gone, ids are never reused.
 * A group's "open" entry (in s->open) exists exactly while the group is neither saturated nor
 * full; it caches the numbers the placement search needs to reject a group in O(1).
 */
#ifndef LOOM_CORE_INTERNAL_H
#define LOOM_CORE_INTERNAL_H

#include <stdbool.h>
#include <string.h>

#include "loom/sched.h"

typedef struct job {
        loom_job_id id;
        loom_job_spec spec;
        struct group *group;
        int n_rnodes;
        loom_node_id *rnodes; /* ascending; points at rnodes_inline or, past 2, the heap */
        loom_node_id rnodes_inline[2];
        loom_us t_train_in;    /* t_train scaled to the group's pool */
        uint64_t mem_train_in; /* per training node, scaled */
        loom_us slo_budget;    /* slo * T_solo: the most T_meta may be */
        loom_job_state state;
        uint64_t wait_seq;     /* when it began waiting (for the liveness fallback) */
        int64_t round_base;    /* the group round of its first iteration (dispatch.c) */
        int64_t rolls, trains; /* phases started: its next keys are round_base + these */
        /* multi-rate: `rate` iterations per meta-iteration; its n-th phase counted from
         * count_base is in round round_base + n / rate at slot pos[n % rate] (dispatch.c) */
        int rate;
        int64_t count_base;
        int pos[LOOM_MAX_RATE];
        int64_t iterations_done;
        loom_us submitted_at;
        bool migrated; /* current rollout squeezed onto its tail GPUs */
        bool colo;     /* current rollout runs on its group's training nodes (group.lone) */
        /* its last rollout ran on the training nodes and it waits to train: the group took a
         * second member meanwhile, whose trainings that rollout held up (train_turn) */
        bool colo_wait;
        loom_us head_took; /* its head (start to tail threshold), once reported; else 0 */
        bool tail_due;     /* current rollout reported past tail_threshold: migrate it as soon as
                              the next rollout on its node is ready */
        int gpus;          /* GPUs of the running phase */
        /* Learned profiles (learn.c), allocated only when admission learns (p99, p95): at
         * 100,000 jobs under worst-case admission it would be 54 MB of zeros. */
        struct learn_state *ls;
        /* when it began waiting for its current phase (HRRS, FCFS) */
        loom_us wait_since;
        int call;            /* next training call when it trains call by call (plex_place.c) */
        loom_us chain_since; /* when its current training phase became ready */
        /* policy.regroup (regroup.c): a re-solve plans it (regroup_planned) into
         * group regroup_to, or a new group of its own (regroup_alone); regroup_tries counts the
         * training ends at which it was due there */
        bool regroup_planned, regroup_alone;
        loom_group_id regroup_to;
        int regroup_tries;
        /* policy.slo_cap relaxed its SLO to its lone iteration (loom__slo_cap); a re-plan that
         * finds its lone iteration within its SLO again clears it */
        bool slo_relaxed;
} job;

/* What learned admission keeps of a job (learn.c): spec above is what admission plans on;
 * declared is the spec as submitted. Observations are fractions of the declared times. */
typedef struct learn_state {
        loom_job_spec declared;
        /* [rollout, train]: a ring of the last half, then the largest half since admission;
         * [rollout head]: a ring of the last LOOM_LEARN_WINDOW */
        double obs[3][LOOM_LEARN_WINDOW];
        int n_obs[3];
        /* per slot of the rollout ring: that rollout ran on the training nodes (a lone member's,
         * slower there by the colocation factor): it plans the member's own rollouts, not the
         * solo iteration its SLO is measured against */
        bool colo[LOOM_LEARN_WINDOW / 2];
        bool learned;
        uint64_t replans;
        loom_us learned_roll, learned_train, learned_budget; /* last computed; 0 before */
        loom_us mean_roll, mean_train; /* its mean observed phases, with learned_budget */
        loom_us learned_head;          /* last computed head (0: none yet) */
} learn_state;

typedef struct rnode {
        loom_node_id id;
        struct group *group;
        loom_us load;      /* sum of t_roll pinned here */
        uint64_t mem_used; /* sum of mem_rollout pinned here */
        int n_pinned;
        loom_job_id running; /* full occupant, or 0 */
        loom_job_id tail;    /* a migrated tail on keep GPUs, or 0 */
        int tail_gpus;
} rnode;

typedef struct group {
        loom_group_id id;
        int n_members;
        job *members[LOOM_MAX_GROUP_SIZE]; /* admission order */
        int n_rnodes;
        rnode **rnodes; /* ascending id; capacity cap_rnodes */
        size_t cap_rnodes;
        int n_tnodes;
        /* its training nodes, ascending: provisioned together when it opens, and more of them
         * when a join grows the pool (policy.pool_grow) */
        loom_node_id tnodes[LOOM_MAX_JOB_NODES];
        /* a placement's view of the group with its pool grown (placement.c): the training
         * nodes the join would add, the last `grown` of tnodes; 0 for every real group */
        int grown;
        int opened_tnodes; /* the pool it opened with: a shrink goes no lower */
        /* training nodes a shrink took out of the pool while a phase still ran there: released
         * as soon as the pool is idle (loom__dispatch) */
        int n_releasing;
        loom_node_id releasing[LOOM_MAX_JOB_NODES];
        int train_gpus;
        uint64_t train_mem_used; /* per training node */
        /* rate-weighted (group.h): sum r t_train_in, max r T_solo, T_load; min r x budget */
        loom_us sum_train, t_cycle, t_load, t_meta, min_budget;
        double density; /* sum of t_train_in / budget: > 1 admits no rates at all */
        /* for the gap bound: the longest t_train_in, and min over members of budget - t_train_in
         * (another member's training always falls between two of one member's trainings) */
        loom_us max_train, gap_slack;
        int n_coupled;      /* members with multi-node rollouts, a sync phase or rate > 1 */
        loom_us max_switch; /* the largest switch onto a member (loom__switch); 0: none */
        bool saturated;
        bool full;
        /* One member whose rollouts run on the training nodes (policy.colocate_lone): its
         * rollout nodes are planned but not provisioned until a second member joins. Decided
         * by membership and learned profiles only (submits, exits, observations: the log), never
         * by where a phase happens to be, so that replaying the log places as the live core did. */
        bool lone;
        /* Its rollout nodes are provisioned: always when not lone; when lone, only until the one
         * member's rollout running there ends (loom__lone_settle). Placement never reads it. */
        bool rnodes_up;
        /* an observation took it out of lone: only a membership change makes it lone again */
        bool lone_lost;
        int open_idx;              /* index in s->open, or -1 */
        loom_job_id train_running; /* job holding the training pool, or 0 */
        loom_job_id train_last;    /* the job whose state the training pool holds, or 0 */
} group;

/* What the placement search needs of an open group, packed for a cache-friendly scan. */
typedef struct open_group {
        group *g;
        loom_us t_cycle, sum_train, min_budget;
        uint64_t train_mem_used;
        int train_gpus;
        double density;
        loom_us max_train, gap_slack; /* the gap bound's (group.max_train, gap_slack) */
} open_group;

/* g's entry in the open list, from its cached sums (loom__group_refresh). */
static inline open_group loom__open_entry(group *g)
{
        return (open_group){.g = g,
                            .t_cycle = g->t_cycle,
                            .sum_train = g->sum_train,
                            .min_budget = g->min_budget,
                            .train_mem_used = g->train_mem_used,
                            .train_gpus = g->train_gpus,
                            .density = g->density,
                            .max_train = g->max_train,
                            .gap_slack = g->gap_slack};
}

typedef struct action_queue {
        loom_action *a;
        size_t head, len, cap;
} action_queue;

struct loom_sched {
        loom_cluster_cfg cluster;
        loom_policy_cfg policy;
        double price[2]; /* per node */

        job **jobs; /* indexed by id */
        size_t cap_jobs;
        uint32_t next_job;
        int live_jobs;

        group **groups; /* indexed by id */
        size_t cap_groups;
        uint32_t next_group;
        int live_groups;

        rnode **rnodes; /* rollout nodes by id */
        size_t cap_rnodes;
        uint32_t next_rnode;
        uint32_t next_tnode;
        int nodes[2];

        open_group *open;
        int n_open;
        size_t cap_open;
        int n_closed_full; /* groups with max_group_size members */

        action_queue actions;
        uint64_t seq;
        uint64_t rng; /* LOOM_PLACER_RANDOM */
        loom_sched_stats stats;
        struct loom_plex *plex; /* LOOM_PLACER_PLEX: the timeline placer; else NULL */
        /* learn.c: the mean [rollout, train] fractions of the last LOOM_PRIOR_JOBS jobs that
         * ended with a learned profile, a ring (n_prior counts every one) */
        double prior[LOOM_PRIOR_JOBS][2];
        uint64_t n_prior;
        /* policy.regroup: the member loom_sched_observe just told to move to its planned place
         * (by its name, spec.id), which its re-admission, the next submit, takes */
        struct {
                bool set;
                char id[LOOM_JOB_ID_MAX];
                bool alone; /* a new group of its own, else group `to` */
                loom_group_id to;
        } handoff;
        /* policy.regroup: replay mode (loom_sched_replaying: re-solves are not searched, their
         * plans come from loom_sched_regroup_apply), and the plan the last loom_sched_job_exit
         * or loom_sched_observe call made (plan_made), for the driver to log */
        bool replaying, plan_made;
        loom_regroup_plan plan;
};

/* The ids of g's training nodes into out[0 .. g->n_tnodes). */
static inline void loom__tnodes(const group *g, loom_node_id *out)
{
        memcpy(out, g->tnodes, sizeof(loom_node_id) * (size_t)g->n_tnodes);
}

/* sched.c */
job *loom__job(const loom_sched *s, loom_job_id id);
int loom__push_action(loom_sched *s, const loom_action *a);
void loom__group_refresh(loom_sched *s, group *g); /* recompute caches + open membership */
/* Recompute g's cached sums and load from its members and rollout nodes, each member training
 * on g's pool (loom__train_in), and with `meta` its T_meta (a simulation): what
 * loom__group_refresh does short of the slot order and the open list, so it also serves a
 * placement's view of g with a grown pool, which needs no T_meta of its own. */
void loom__group_sums(const loom_sched *s, group *g, bool meta);
/* A member's training time and per-node training working set in g's pool: j->t_train_in and
 * j->mem_train_in for j's own group. */
loom_us loom__train_in(const loom_sched *s, const group *g, const job *j);
uint64_t loom__mem_in(const loom_sched *s, const group *g, const job *j);
/* policy.pool_grow: the fewest training nodes, from the count g opened with up to its own, on
 * which every member of g still keeps its budget (and a lone member stays lone) and the
 * training working sets fit; g's own count when none fewer does. */
int loom__pool_least(const loom_sched *s, const group *g);
/* Release the training nodes a shrink took out of g's pool, once no phase runs there. */
void loom__pool_settle(loom_sched *s, group *g);
/* Whether g's one member is held out of joins (policy.slo_cap, relaxed until learned). */
bool loom__held(const group *g);
int loom__group_meta(const loom_sched *s, const group *g, loom_us *t_meta);
/* What switching a node to this job costs: its own t_switch, else the policy's. */
static inline loom_us loom__switch(const loom_sched *s, const loom_job_spec *spec)
{
        return spec->t_switch > 0 ? spec->t_switch : s->policy.warm_switch;
}

/* spec's rollout as the core's meta-iteration plans it (loom_policy_tail_plan). */
static inline void loom__tail_plan(const loom_sched *s, const loom_job_spec *sp, loom_us *head,
                                   loom_us *pen)
{
        loom_policy_tail_plan(&s->policy, s->cluster.gpus_per_node, sp, head, pen);
}

/* How long spec's rollout keeps its k-th node from the next one (loom_meta_occ): a node's
 * load. */
static inline loom_us loom__roll_occ(const loom_sched *s, const loom_job_spec *sp, int k)
{
        loom_us head, pen;
        loom__tail_plan(s, sp, &head, &pen);
        return head > 0 ? head + (k == 0 ? pen : 0) : sp->t_roll;
}

/* Whether a group of spec alone may run its rollouts on its training nodes: the policy asks
 * for it, the rollout fits on the training GPUs, both working sets in a node's host memory, and
 * an iteration with its two switches (rollout <-> training, loom__switch each) within budget. */
bool loom__lone_fits(const loom_sched *s, const loom_job_spec *spec, loom_us budget,
                     int train_nodes);
/* A lone iteration of spec on train_nodes training nodes: its rollout, its training on them
 * (loom_group_train_time) and the two switches. */
loom_us loom__lone_iteration(const loom_sched *s, const loom_job_spec *spec, int train_nodes);
/* policy.lone_grow: whether spec lone on train_nodes training nodes bills LOOM_MOVE_GROW_GAIN less
 * per iteration than a disaggregated group of it alone costing split_per_hour, its training pool
 * split_train_gpus GPUs. Jobs run a fixed number of iterations, so this compares their bills. */
bool loom__grow_pays(const loom_sched *s, const loom_job_spec *spec, int train_nodes,
                     double split_per_hour, int split_train_gpus);
/* A group of one member re-decides whether it is lone, on a membership change (may_go_lone) or
 * an observation (what the log records): one that fits goes lone, its rollout nodes released
 * (planned, not provisioned) as soon as no rollout of the member runs there; a lone one that
 * no longer fits (its learned budget cannot pay the two switches) has them provisioned again.
 * Once an observation has taken a group out of lone, going lone again waits for the next
 * membership change, so a member whose estimates hover at the edge does not flip its rollout
 * nodes (each flip a release, a provisioning and a cold start) with every iteration. */
void loom__lone_recheck(loom_sched *s, group *g, bool may_go_lone);
/* Release a lone group's rollout nodes once no rollout runs there (after the member's rollout
 * that was running on them when the group went lone). Changes no planning state. */
void loom__lone_settle(loom_sched *s, group *g);
/* policy.slo_cap: when spec's SLO costs more than the policy allows to keep, relax it to spec
 * alone on its own training nodes and place it there: spec's t_solo_ref is raised so that its
 * budget is that lone iteration, d becomes that placement with slo_effective set. Returns 0
 * (d kept or replaced) or an error. */
int loom__slo_cap(const loom_sched *s, loom_job_spec *spec, loom_decision *d, loom_err *e);
/* policy.slo_cap's rule: whether keeping a job's SLO at `keep` $ per iteration costs more than
 * the policy allows over running it lone at `alone` $ per iteration. */
bool loom__slo_too_dear(const loom_sched *s, double keep, double alone);
/* loom__lone_fits for member j, held to the budget the core holds it to (j->slo_budget); once
 * learned, on its mean observed phases: alone, j's iteration is its solo one plus two
 * switches, so its SLO on the mean holds exactly when that fits. */
bool loom__job_lone_fits(const loom_sched *s, const job *j, int train_nodes);
/* Set member j's rate (>= 1) now: rollout loads follow, and its next phases start a fresh
 * round (dispatch keys); the caller refreshes the group. */
void loom__set_rate(loom_sched *s, job *j, int rate, int64_t round);

/* learn.c: a job ends (its means feed the prior). A new job (no t_solo_ref) under learned
 * admission, once any job has ended with a learned profile: its budget is held to the prior's
 * solo iteration, and *likely gets its phases at the prior's mean fractions of its declared times
 * (what it will likely be learned to take); false (nothing changed) otherwise. */
void loom__learn_exit(loom_sched *s, const job *j);
bool loom__learn_prior(const loom_sched *s, loom_job_spec *spec, loom_job_spec *likely);

/* move.c: whether learned-profile job j should move to another group: alone on its training
 * nodes, when it would cost less than LOOM_MOVE_GAIN of its group there (policy.move_lone); in
 * a shared group, when it would cost less there than its group saves (policy.move_members). */
bool loom__move_pays(const loom_sched *s, const job *j);

/* regroup.c (policy.regroup): after a job finished in group g (NULL: the group went with it)
 * or first learned its profile there, re-solve the grouping of g's members and of the thinnest
 * groups beside it exactly and plan the members that a cheaper grouping moves (job.regroup_to). */
void loom__regroup(loom_sched *s, group *g);
/* Whether learned member j is due to move to its planned place now: the place can take it
 * (loom__place_into, with the plan's margin). */
bool loom__regroup_due(const loom_sched *s, const job *j);
/* The re-admission of a member loom_sched_observe moved to its planned place: 0 with d its
 * placement there, 1 when spec is not that member or the place cannot take it now. */
int loom__regroup_place(const loom_sched *s, const loom_job_spec *spec, loom_decision *d,
                        loom_err *e);

/* placement.c */
/* spec into group `into` only, or (NULL) a new group of its own only: 0, 1 when that place
 * cannot take it, or an error (policy.regroup). */
int loom__place_into(const loom_sched *s, const loom_job_spec *spec, const group *into,
                     double margin, loom_decision *d, loom_err *e);
/* exclude: a group not to search (the job's own, when it would move); margin: the least slack
 * a placement into a group must leave every member, as a fraction of T_meta (0: none). */
/* likely: a new job's phases at the fleet's means (loom__learn_prior), or NULL. */
int loom__place(const loom_sched *s, const loom_job_spec *spec, const loom_job_spec *likely,
                const group *exclude, double margin, loom_decision *d, loom_err *e, uint64_t *rng);

/* learn.c */
int loom__observe(loom_sched *s, job *j, loom_phase phase, loom_us took, bool colo, int gpus);
/* plex_place.c: LOOM_PLACER_PLEX */
int loom__plex_new(loom_sched *s, loom_err *e);
int loom__plex_place(const loom_sched *s, const loom_job_spec *spec, loom_decision *d, loom_err *e);
int loom__plex_commit(loom_sched *s, loom_job_id id, const loom_job_spec *spec,
                      const loom_decision *d);
void loom__plex_release(loom_sched *s, loom_job_id id);
/* hrrs order of the training pool: the member to train next, or NULL (dispatch.c calls it) */
job *loom__train_pick(const loom_sched *s, const group *g, loom_us now);
/* Who goes on when a member is between two calls of its training phase: it continues (rr), or
 * yields to a foreign request whose HRRS score beats its running score by preempt_margin
 * (hrrs), or joins the queue by the time its call was queued (fcfs: NULL, the usual pick).
 * NULL when no member is between calls. */
job *loom__train_mid_chain(const loom_sched *s, const group *g, loom_us now);
/* calls of j's training phase when it runs call by call (>= 2), else 0 */
int loom__job_calls(const job *j, loom_us *calls);

/* dispatch.c */
void loom__dispatch(loom_sched *s, group *g, loom_us now);
int64_t loom__next_round(const group *g); /* round_base for a member joining g now */
void loom__release_running(loom_sched *s, job *j, loom_us now);
int loom__progress(loom_sched *s, job *j, loom_us now, int64_t done, int64_t total);
int loom__phase_done(loom_sched *s, job *j, loom_us now, loom_phase phase);

#endif
