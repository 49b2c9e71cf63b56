/*
 * sched.h - the scheduler facade: events in, actions out.
 *
 *     loom_sched *s = loom_sched_new(&cluster, &policy, err);
 *     loom_sched_submit(s, now, &spec, &decision, &job);         admission + placement
 *     loom_sched_phase_started(s, now, job, phase);              informational
 *     loom_sched_progress(s, now, job, phase, done, total);      may trigger tail migration
 *     loom_sched_phase_done(s, now, job, phase);
 *     loom_sched_job_exit(s, now, job, reason);                  finished, cancelled, failed
 *     while (loom_sched_next_action(s, &act)) apply(&act);
 *
 * The core decides, drivers (the simulator, loomd) execute and report back. It has no clock,
 * no I/O and no threads: `now` is passed in and only recorded. One loom_sched is used by one
 * thread at a time.
 *
 * Job lifecycle inside the core (dispatch.c):
 *
 *        submit            START(rollout)          done(rollout)
 *   ---> WAIT_ROLL ------------------> ROLLING ------------------> WAIT_TRAIN
 *          ^                                                          | START(train)
 *          |  done(sync) / or straight after train when t_sync == 0   v
 *        SYNCING <---------------------------------------------- TRAINING
 *                  START(sync) after done(train)
 *   Any state --job_exit--> gone (pins freed; JOB_DONE is emitted when `iterations` are reached).
 *
 * Ids (job, group, node) are small integers, never reused within one loom_sched.
 */
#ifndef LOOM_SCHED_H
#define LOOM_SCHED_H

#include <stdbool.h>

#include "loom/group.h"
#include "loom/timeline.h"

typedef uint32_t loom_job_id;   /* 1, 2, 3, ... ; 0 = none */
typedef uint32_t loom_group_id; /* 0, 1, 2, ... */
typedef uint32_t loom_node_id;  /* per pool: 0, 1, 2, ... */

#define LOOM_NO_JOB ((loom_job_id)0)
#define LOOM_NEW_GROUP ((loom_group_id)UINT32_MAX)
#define LOOM_MAX_GROUP_SIZE 16
#define LOOM_MAX_GROUP_ROLLOUT_NODES (LOOM_MAX_GROUP_SIZE * LOOM_MAX_JOB_NODES)

typedef enum loom_placer {
        LOOM_PLACER_LOOM = 0,   /* Algorithm 1: min marginal cost under memory + SLO */
        LOOM_PLACER_RANDOM,     /* WEAVE §6.5 Random: a random group that can hold the job */
        LOOM_PLACER_GREEDY,     /* WEAVE §6.5 Greedy: the most idle group, its most idle nodes */
        LOOM_PLACER_RANDOM_SLO, /* Random restricted to candidates passing memory and SLO */
        LOOM_PLACER_GREEDY_SLO, /* Greedy restricted to candidates passing memory and SLO */
        LOOM_PLACER_PLEX, /* PlexRL: phase-shift fitting on the cyclic timeline (timeline.h) */
} loom_placer;

/* What admission plans a job on once it has history (docs/scheduling.md, learned profiles).
 * WORST: the declared worst case, always. P99/P95: after learn_after iterations, the job's
 * group is re-planned on that quantile of its observed phase times (loom_sched_observe), with
 * the SLO budget taken from their mean; a re-plan that would break any member's budget is not
 * made. */
typedef enum loom_admission {
        LOOM_ADMIT_WORST = 0,
        LOOM_ADMIT_P99,
        LOOM_ADMIT_P95,
} loom_admission;

const char *loom_admission_name(loom_admission a); /* "worst", "p99", "p95" */
/* 0 or LOOM_EINVAL. */
int loom_admission_parse(const char *s, loom_admission *out);

#define LOOM_LEARN_WINDOW 20      /* observed iterations a learned profile is computed from */
#define LOOM_LEARN_CONFIDENCE 0.9 /* of the upper bound on a learned quantile */
#define LOOM_PRIOR_JOBS 16        /* ended jobs the budget prior of a new job is taken from */
#define LOOM_MOVE_GAIN 0.5        /* a lone member moves only if that halves what it costs */
#define LOOM_MOVE_MARGIN 0.05     /* policy.move_members: slack a move leaves every member */
#define LOOM_GROW_VIEWS 16        /* policy.pool_grow: groups a decision searches grown, at most */
#define LOOM_MOVE_GROW_GAIN 0.2   /* policy.lone_grow: a move to more nodes saves this */
#define LOOM_JOIN_WAIT_LEFT 10    /* policy.join_wait: members this close to their end */
/* A new job of at most this many iterations is held to the shortest solo iteration the prior's
 * jobs give it, not their mean: it ends before what it learns can re-plan or move it. */
#define LOOM_PRIOR_SHORT 30
/* A member that does not declare its cold start (loom_job_spec.t_cold) and has fewer
 * iterations left does not switch to running lone: its first rollout on its training nodes is
 * a cold start that so few iterations may not absorb. */
#define LOOM_LONE_LEFT 20

/* How a learned quantile is bounded (docs/scheduling.md, learned profiles).
 * NORMAL: a one-sided normal tolerance bound, mean + k(n) s over the last LOOM_LEARN_WINDOW / 2
 * iterations, from learn_after iterations on; sound where a phase's length is a sum over many
 * responses (training, a rollout's token total), which the central limit theorem makes close
 * to normal. ORDER: the distribution-free order statistic (loom_quantile_ucb), which needs 230
 * iterations for a p99 and 45 for a p95 before it bounds anything; for heavy-tailed phases. */
typedef enum loom_learn_bound {
        LOOM_LEARN_NORMAL = 0,
        LOOM_LEARN_ORDER,
} loom_learn_bound;

const char *loom_learn_bound_name(loom_learn_bound b); /* "normal", "order" */
/* 0 or LOOM_EINVAL. */
int loom_learn_bound_parse(const char *s, loom_learn_bound *out);

/*
 * The one-sided normal tolerance factor k for n samples: with probability LOOM_LEARN_CONFIDENCE
 * the sample mean plus k times the sample standard deviation of n i.i.d. normal samples lies
 * at or above their q-quantile. k = t'/sqrt(n), t' the LOOM_LEARN_CONFIDENCE quantile of the
 * noncentral t distribution with n - 1 degrees of freedom and noncentrality z_q sqrt(n)
 * (tabulated for q = 0.95 and 0.99, n = 2 .. LOOM_LEARN_WINDOW / 2; past that Natrella's
 * approximation, raised to stay above the quantile). INFINITY for another q or n < 2.
 */
double loom_normal_tolerance_k(int n, double q);

/*
 * A distribution-free upper confidence bound on the q-quantile of a phase time, from the `m`
 * largest of n i.i.d. samples, sorted descending in top[0..m) (m <= n). The r-th largest
 * sample lies at or above the q-quantile unless fewer than r samples do, so it is a bound at
 * confidence P(Binomial(n, 1 - q) >= r); this returns the smallest such sample whose confidence
 * is at least conf, and sets *ok. When even the largest (confidence 1 - q^n) falls short, n is
 * too small to bound the quantile at all: *ok is false and top[0] is returned; the caller
 * falls back to its worst case. When the rank needed is past m, top[m - 1] is returned: larger,
 * so still a bound.
 */
double loom_quantile_ucb(const double *top, int m, int64_t n, double q, double conf, bool *ok);
/* The version of the core's arithmetic: bump it with any change to src/core that can place a
 * job elsewhere or learn a profile differently from the same events. loomd stores it and, when
 * a data directory was written under another, re-derives its log with this code instead of
 * demanding the stored outcomes bit for bit (docs/operations.md, "store versioning"). Version 2:
 * multi-rate groups, the tighter-packing tie-break and the quantile bound of learned profiles.
 * Version 3: lone members colocated on their training nodes. Version 4: learned profiles
 * bounded by a normal tolerance bound (policy.learn_bound). Version 5: one-simulation rate
 * searches past policy.rate_search_open open groups. Version 6: members of shared groups moved
 * (policy.move_members). Version 7: whether a learned member alone may run colocated is judged
 * on its mean phases and learned budget, both ways. Version 8: rollouts planned on their heads,
 * their tails migrated (policy.plan_tails). Version 9: a group of one member goes lone (or back)
 * on the membership change or observation that makes it fit, whatever phase the member is in;
 * only the release of its rollout nodes waits for a rollout running there to end. Version 10:
 * a job a lone group of its own training nodes cannot keep within SLO may get a lone group of
 * more training nodes (policy.lone_grow). Version 11: a join is refused where a member in its
 * last iterations cannot absorb the round the join may add (policy.join_wait). Version 12:
 * departures and first re-plans re-solve the groups around them and move the members the plan
 * moves (policy.regroup). Version 13: a replay never re-solves: the plans come from the
 * driver's log (loom_sched_replaying, loom_sched_regroup_apply), and policy.regroup is on by
 * default; a log written under 12 with regroup on, which has no plans, re-derives without
 * them. Also 13: loomd submits each job with the iterations it has left, as the simulator
 * does (before, 0: placement saw every loomd job as unbounded), and replays their counts
 * (loom_sched_job_iterations). Version 14: a join may grow its group's training pool and a
 * departure shrink it again (policy.pool_grow, on by default), and a training observation is
 * measured against the pool it ran on. Version 15: a job of at most LOOM_PRIOR_SHORT
 * iterations is held to the prior's shortest solo iteration, and a member switches to running
 * lone only where its declared cold start (t_cold) spread over its iterations left fits its
 * budget, or without one not in its last LOOM_LONE_LEFT iterations. */
#define LOOM_SCHED_ARITH 15

typedef struct loom_policy_cfg {
        int max_group_size;              /* default 5, at most LOOM_MAX_GROUP_SIZE */
        double train_scaling_efficiency; /* (0, 1], default 1.0 */
        loom_us warm_switch;             /* cost paid when a node changes job; default 0 */
        bool tail_migration;             /* default true */
        double tail_threshold;           /* fraction of responses done; default 0.8 */
        int tail_keep_gpus;              /* GPUs kept for the tail; default 1 */
        loom_placer placer;              /* default LOOM_PLACER_LOOM */
        uint64_t seed;                   /* for LOOM_PLACER_RANDOM */
        loom_admission admission;        /* default LOOM_ADMIT_WORST */
        int learn_after;                 /* iterations observed before re-planning; default 3 */
        loom_learn_bound learn_bound;    /* how a learned quantile is bounded; default NORMAL */
        loom_dispatch dispatch;          /* training-pool order; default LOOM_DISPATCH_RR */
        double preempt_margin;           /* HRRS preemption margin, >= 1; default 1.1 */
        /* LOOM_PLACER_PLEX: Eq. 1 shift bound and weights (0.5, 1.0, 0.25), duty bound 0.75 */
        double plex_alpha, plex_w1, plex_w2;
        double plex_duty_max;
        /* Multi-rate groups (docs/scheduling.md): placement may run a member r >= 1 times per
         * meta-iteration and re-rate members. false: every rate is 1, WEAVE's round robin. */
        bool multirate;
        /* Training-pool right-sizing (docs/scheduling.md): a job that opens a new group may get
         * fewer training nodes than it asked for when its SLO and the per-node training memory
         * still hold there. Default false: a new group gets exactly the job's training nodes. */
        bool train_rightsize;
        /* Lone members colocated (docs/scheduling.md): while a group has a single member, that
         * member's rollouts run on the group's training nodes, as the colocated baseline runs
         * every job, and its rollout nodes are provisioned only when a second member joins.
         * Loom's placer only; default true. */
        bool colocate_lone;
        /* Lone members on more training nodes (docs/scheduling.md): a job whose SLO a lone
         * group of its own training nodes cannot keep (the two switches per iteration do not
         * fit) gets a lone group of more training nodes where its faster training pays for
         * them: the fewest such nodes, when an iteration there costs less than its own
         * disaggregated group (rollout and training nodes) at the cluster's prices. Needs
         * colocate_lone; loom's placer only; default true. */
        bool lone_grow;
        /* Joins that members near their end can absorb (docs/scheduling.md, "The round a
         * join adds"): a job joins a group only if every member in its last
         * LOOM_JOIN_WAIT_LEFT iterations still meets its budget over them when its iteration
         * in progress waits a whole meta-iteration more, as the new job's first may. Loom's
         * placer only; default true. */
        bool join_wait;
        /* Lone members moved (docs/scheduling.md): under learned admission, a lone member that
         * another group would take for less than LOOM_MOVE_GAIN of its own group's cost is
         * re-admitted there (loom_sched_observe returns 3). Loom's placer only; default true. */
        bool move_lone;
        /* Members moved (docs/scheduling.md): under learned admission, a member of a shared
         * group also moves when another group takes it for less than what its own group stops
         * paying once it leaves (the rollout nodes it alone uses, or all of them when the one
         * member left goes lone), into a place that leaves every member there LOOM_MOVE_MARGIN
         * of T_meta as slack; loom_sched_observe returns 3 as for a lone member. Needs move_lone.
         * Loom's placer only; default true. */
        bool move_members;
        /* Planning the tails (docs/scheduling.md): a rollout whose head is known (spec.t_head,
         * learned from progress reports under learned admission) is planned to free its nodes
         * at its head, its tail migrated, and to delay the next rollout on its first node by
         * the GPUs the tail keeps. Needs tail_migration; loom's placer only; default true. */
        bool plan_tails;
        /* Coordinated regrouping at departures (docs/scheduling.md, "Regrouping at
         * departures"): under learned admission, when a job finishes or first learns its
         * profile, the members of its group and of the thinnest groups beside it (at most 8)
         * are regrouped exactly for the least $/h, and each member the plan moves is moved to
         * its planned group at a training end where that group can take it
         * (loom_sched_observe returns 3). A driver that replays a log logs each plan and hands
         * it back instead of searching again (loom_sched_regroup_made, below). Loom's placer
         * only; default true. */
        bool regroup;
        /* Training pools that grow with their members (docs/scheduling.md, "Training pools
         * that grow"): a job may join a group whose training pool it grows by up to its own
         * training nodes, every member then training on the larger pool (faster, by
         * train_scaling_efficiency), where that costs less than any other placement; a
         * departure shrinks a grown pool again to the fewest nodes its members' SLOs allow.
         * Loom's placer only; default true. */
        bool pool_grow;
        /* The price of an SLO (docs/scheduling.md, "A cap on what an SLO may cost"): with
         * slo_cap, a job whose SLO a lone group of its own training nodes (colocated, as the
         * colocated baseline runs it) cannot keep is placed where it keeps that SLO only when an
         * iteration there costs at most 1 + slo_premium times an iteration lone, at the
         * cluster's prices. Otherwise it runs lone, held to its lone iteration instead of its
         * SLO (loom_decision.slo_effective says by how much; once learned, to its measured lone
         * iteration, or its SLO again where that fits it). So no job costs more than colocated
         * by more than slo_premium, and loom's bill is at most colocation's (0) wherever
         * sharing does not pay. Off by default: every SLO is kept, whatever it costs. Loom's
         * placer with colocate_lone only. */
        bool slo_cap;
        double slo_premium; /* >= 0 */
        /* Multi-rate placement with more open groups than this runs one simulation per
         * candidate's rate search instead of up to six (docs/scheduling.md, Cost of a
         * decision). 0: the default, LOOM_RATE_SEARCH_OPEN. */
        int rate_search_open;
} loom_policy_cfg;

#define LOOM_RATE_SEARCH_OPEN 512
/* The open groups past which rate searches are wide: rate_search_open, or its default. */
static inline int loom_policy_rate_search_open(const loom_policy_cfg *p)
{
        return p->rate_search_open > 0 ? p->rate_search_open : LOOM_RATE_SEARCH_OPEN;
}

/* Whether placement under p plans rollouts on their heads (plan_tails, docs/scheduling.md
 * "Planning the tails"): loom's placer, tail migration on, and a tail that leaves GPUs free on
 * a node of gpus_per_node. */
static inline bool loom_policy_plans_tails(const loom_policy_cfg *p, int gpus_per_node)
{
        return p->plan_tails && p->tail_migration && p->placer == LOOM_PLACER_LOOM &&
               p->tail_keep_gpus < gpus_per_node;
}

/* sp's rollout as the meta-iteration plans it under p (loom_meta_job.t_head, t_pen): its head,
 * and how long its tail, kept on tail_keep_gpus of its first node's GPUs, delays the next
 * rollout there (the tail's GPU time over the node's GPUs). 0, 0: planned to hold its nodes to
 * its end (no head known, or tails not planned). The core, and the simulator's oracle, plan
 * with it. */
static inline void loom_policy_tail_plan(const loom_policy_cfg *p, int gpus_per_node,
                                         const loom_job_spec *sp, loom_us *head, loom_us *pen)
{
        *head = *pen = 0;
        if (sp->t_head <= 0 || sp->t_head >= sp->t_roll ||
            !loom_policy_plans_tails(p, gpus_per_node))
                return;
        *head = sp->t_head;
        *pen = ((sp->t_roll - sp->t_head) * p->tail_keep_gpus + gpus_per_node - 1) / gpus_per_node;
}

void loom_policy_cfg_default(loom_policy_cfg *p);
int loom_policy_cfg_validate(const loom_policy_cfg *p, const loom_cluster_cfg *c, loom_err *e);
/* The on/off switches of the command lines: "multirate", "train-rightsize", "colocate-lone",
 * "move-lone", "move-members".
 * Returns a pointer to p's field for that name, or NULL for another name. */
bool *loom_policy_switch(loom_policy_cfg *p, const char *name);

/* ---- placement decisions ---------------------------------------------------------------- */

typedef enum loom_decision_kind {
        LOOM_DECISION_DIRECT_PACK = 0,
        LOOM_DECISION_ROLLOUT_SCALE,
        LOOM_DECISION_NEW_GROUP,
        LOOM_DECISION_REJECTED,
} loom_decision_kind;

const char *loom_decision_kind_name(loom_decision_kind k); /* "direct_pack", ... */

typedef enum loom_reject {
        LOOM_REJECT_NONE = 0,
        LOOM_REJECT_MEMORY,    /* a node's host memory would overflow (node named) */
        LOOM_REJECT_SLO,       /* some member's T_meta > SLO * T_solo (job named) */
        LOOM_REJECT_COSTLIER,  /* feasible but not the chosen one */
        LOOM_REJECT_SATURATED, /* the group was saturated: pruned before generating */
        LOOM_REJECT_FULL,      /* the group had max_group_size members */
        LOOM_REJECT_TOO_BIG,   /* the job's working set exceeds one node's host memory */
        LOOM_REJECT_DUTY,      /* plex: a resident's foreign duty would pass plex_duty_max */
        LOOM_REJECT_NO_FIT,    /* plex: no shift in [0, alpha T] fits the group's free windows */
} loom_reject;

const char *loom_reject_name(loom_reject r); /* "memory", "slo", "costlier", ... */

/* One placement the search looked at. Node ids that do not exist yet are the ids the new nodes
 * would get. */
typedef struct loom_candidate {
        loom_decision_kind kind;
        loom_group_id group; /* LOOM_NEW_GROUP for isolated provisioning */
        int n_rollout_nodes;
        loom_node_id rollout_nodes[LOOM_MAX_JOB_NODES];
        int new_rollout_nodes;
        int new_train_nodes;
        double marginal_cost_per_hour;
        loom_us t_meta;     /* of the resulting group; 0 if not evaluated */
        double utilisation; /* T_load / T_meta of the resulting group */
        int rate;           /* the job's iterations per meta-iteration (1 = single rate) */
        loom_reject reject; /* LOOM_REJECT_NONE for the chosen one */
        char why[160];      /* a sentence for the user when rejected */
} loom_candidate;

/* The outcome of placing one job. Owns its candidate array: loom_decision_free() releases it.
 * Initialise with loom_decision_init(); record_candidates = false skips the list (benchmarks,
 * the simulator), the counts are kept either way. */
typedef struct loom_decision {
        loom_decision_kind kind;
        loom_group_id group;
        int n_rollout_nodes;
        loom_node_id rollout_nodes[LOOM_MAX_JOB_NODES];
        int n_train_nodes;
        loom_node_id train_nodes[LOOM_MAX_JOB_NODES];
        double marginal_cost_per_hour;
        loom_us t_meta;
        double utilisation;
        char reason[256]; /* why this one (or why rejected) */
        int rate;         /* the job's iterations per meta-iteration */
        /* members of the chosen group whose rate changes with this placement */
        int n_rerated;
        loom_job_id rerated[LOOM_MAX_GROUP_SIZE];
        int rerated_rate[LOOM_MAX_GROUP_SIZE];
        /* > 0: policy.slo_cap relaxed the job's SLO to this slowdown (its lone iteration over
         * the solo iteration its SLO is measured against); 0: the SLO it asked for holds */
        double slo_effective;

        bool record_candidates;
        loom_candidate *candidates;
        int n_candidates;
        size_t cap_candidates;
        int groups_pruned_saturated;
        int groups_pruned_full;
        int groups_pruned_bound; /* cut by an O(1) SLO or memory bound before generating */
} loom_decision;

void loom_decision_init(loom_decision *d, bool record_candidates);
void loom_decision_free(loom_decision *d); /* releases candidates; d itself is the caller's */

/* ---- the facade --------------------------------------------------------------------------- */

typedef struct loom_sched loom_sched;

/* Copies both configs (validated; e filled on LOOM_EINVAL). Returns NULL with e set on bad
 * config, NULL with "out of memory" in e on ENOMEM. Free with loom_sched_free (NULL is fine). */
loom_sched *loom_sched_new(const loom_cluster_cfg *c, const loom_policy_cfg *p, loom_err *e);
void loom_sched_free(loom_sched *s);

/*
 * Admit and place a job. On success returns 0, *id gets the new job id and d the decision;
 * the job waits for its first rollout (START_PHASE actions follow). If the job cannot be placed
 * (working set bigger than a node) returns LOOM_EREJECT with the reason in d and e; an invalid
 * spec returns LOOM_EINVAL naming the field. Either way nothing changed.
 */
int loom_sched_submit(loom_sched *s, loom_us now, const loom_job_spec *spec, loom_decision *d,
                      loom_job_id *id, loom_err *e);
/*
 * Submit as a record says: the driver's replay of a placement it made before (loomd's store).
 * The search runs as in loom_sched_submit; when it places as `want` (same group, rollout and
 * training nodes) that is applied and 0 returned. Otherwise want is applied instead if it is
 * one this core could have made (an open group with room, its own training nodes, rollout
 * nodes of that group or fresh ids from the next free one up, ascending, as many as the job
 * needs; a new group at the next group id with fresh nodes), LOOM_SUBMIT_KEPT returned and
 * d->reason names the search's choice; other members keep their rates. If want cannot be, the
 * search's choice is applied, LOOM_SUBMIT_SEARCHED returned and e says why want could not be.
 * Negative as loom_sched_submit when neither can, nothing changed. The plex placer keeps no
 * recorded placement (its search always decides).
 */
enum { LOOM_SUBMIT_KEPT = 1, LOOM_SUBMIT_SEARCHED = 2 };
int loom_sched_submit_as(loom_sched *s, loom_us now, const loom_job_spec *spec,
                         const loom_decision *want, loom_decision *d, loom_job_id *id, loom_err *e);
/* The same search without changing anything: what submit would decide now. */
int loom_sched_decide(const loom_sched *s, const loom_job_spec *spec, loom_decision *d,
                      loom_err *e);

int loom_sched_phase_started(loom_sched *s, loom_us now, loom_job_id job, loom_phase phase);
/* Progress of a running phase (done of total units, e.g. responses). A rollout past the tail
 * threshold becomes tail-bound: once another rollout waits on its node (now or later, without
 * further progress calls) the core emits MIGRATE_TAIL and starts the waiting rollout on the
 * freed GPUs. Returns 1 if it migrated during this call, 0 if not, <0 on error. */
int loom_sched_progress(loom_sched *s, loom_us now, loom_job_id job, loom_phase phase, int64_t done,
                        int64_t total);
int loom_sched_phase_done(loom_sched *s, loom_us now, loom_job_id job, loom_phase phase);

/* A finished phase's observed length: the wall-clock time its work took on the nodes and GPUs
 * it had (a rollout on the job's rollout GPUs, or on its group's training nodes when it ran
 * there: loom_sched_observe_on), without waits for a turn or switch latency. Feeds the learned
 * profile of admission modes p99/p95; ignored (returns 0) under LOOM_ADMIT_WORST and for sync.
 * Returns 1 when the job's group was re-planned on its new profile, 0 when not, 2 when its group
 * cannot meet the job's SLO budget measured on what it achieves alone (the group is closed to new
 * members; the driver should stop the job and re-admit it on loom_job_info.learned_*), 3 when the
 * job runs alone on its training nodes and another group would take it for less than LOOM_MOVE_GAIN
 * of what its own group costs (policy.move_lone), or shares a group that would stop paying more
 * than another group charges for taking it (policy.move_members); the driver moves it by
 * re-admitting it the same way, and the placement search then finds that group. LOOM_ENOENT /
 * LOOM_EINVAL for an unknown job or a negative length. */
int loom_sched_observe(loom_sched *s, loom_us now, loom_job_id job, loom_phase phase, loom_us took);
/* The same for a phase that ran on pool: a rollout on LOOM_POOL_TRAIN (a lone member's, on its
 * training nodes) plans the member's own rollouts but not the solo iteration its SLO budget is
 * measured against, which counts rollouts on rollout GPUs only (until one is seen, the lesser
 * of the member's own rollouts and the fleet's prior). loom_sched_observe is this with the phase's
 * own pool. */
int loom_sched_observe_on(loom_sched *s, loom_us now, loom_job_id job, loom_phase phase,
                          loom_pool pool, loom_us took);
/* The same for a phase that ran on `gpus` GPUs (its START_PHASE's): a training is measured
 * against its time on them, which differs from the group's pool as it stands when a join grew
 * it or a departure shrank it while the phase ran (policy.pool_grow). A driver that logs
 * observations logs the GPUs too, so that a replay learns the same. gpus 0: the group's pool
 * as it stands (what loom_sched_observe_on assumes). */
int loom_sched_observe_ran(loom_sched *s, loom_us now, loom_job_id job, loom_phase phase,
                           loom_pool pool, int gpus, loom_us took);
/* The head of the job's current rollout: how long it took to reach the tail threshold
 * (policy.tail_threshold of its responses done), measured as the rollout's length is, without
 * waits or switches. Held until the rollout's loom_sched_observe, which learns it with the
 * rollout (loom_job_info.learned_head; docs/scheduling.md, "Planning the tails"); a rollout
 * without one teaches only its length. 0 when recorded, LOOM_ENOENT / LOOM_EINVAL for an
 * unknown job or a negative head. */
int loom_sched_observe_head(loom_sched *s, loom_job_id job, loom_us head);

typedef enum loom_exit {
        LOOM_EXIT_FINISHED = 0,
        LOOM_EXIT_CANCELLED,
        LOOM_EXIT_FAILED,
} loom_exit;
const char *loom_exit_name(loom_exit x);

/* Remove a job: its pins are freed, a rollout node nobody is pinned to is released, an empty
 * group releases everything; the others keep their round-robin. */
int loom_sched_job_exit(loom_sched *s, loom_us now, loom_job_id job, loom_exit reason);

/* ---- regrouping plans (policy.regroup) ----------------------------------------------------
 *
 * A departure (loom_sched_job_exit, LOOM_EXIT_FINISHED) or a job's first re-plan
 * (loom_sched_observe returning 1 for the first time) re-solves the grouping of the groups
 * around it exactly (docs/scheduling.md, "Regrouping at departures"): a search of every
 * partition of up to LOOM_REGROUP_MAX members, milliseconds each. Its outcome, when it finds a
 * grouping cheaper than the groups as they stand, is a plan: each member it covered either
 * moves (to a group, or alone into a new group of its own) or stays (an earlier plan of its is
 * dropped). Nothing else of the core changes; the members are moved later, one at a time, by
 * loom_sched_observe returning 3 and the driver's re-admission.
 *
 * A driver that replays a log (loomd after a restart, a replica taking over) must not search
 * again: it logs each plan with the event that made it (loom_sched_regroup_made, right after
 * the call) and, replaying, puts the core in replay mode (loom_sched_replaying) and hands each
 * logged plan back (loom_sched_regroup_apply) right after replaying the event that made it.
 * The core then ends in exactly the state the live one was in, without the search. A driver
 * without a log (the simulator) does nothing of this. */
#define LOOM_REGROUP_MAX 8 /* the most members one re-solve covers */
/* The training ends a member planned elsewhere waits for its place: its training observations
 * after the plan count them (loom_job_info.regroup_tries), and past this many it drops the
 * plan. */
#define LOOM_REGROUP_TRIES 6

typedef struct loom_regroup_member {
        loom_job_id job;
        bool moves;       /* false: it stays where it is, and any earlier plan of its is dropped */
        bool alone;       /* moves into a new group of its own */
        loom_group_id to; /* moves into this group (moves and not alone) */
} loom_regroup_member;

typedef struct loom_regroup_plan {
        int n; /* 1 .. LOOM_REGROUP_MAX */
        loom_regroup_member m[LOOM_REGROUP_MAX];
} loom_regroup_plan;

/* Whether the last loom_sched_job_exit or loom_sched_observe(_on) call made a plan; if so, and
 * out is not NULL, the plan into *out (members in the search's order). A grouping that moves
 * no member and drops no earlier plan changes nothing and is no plan. Calls that made none,
 * and replay mode, leave false. */
bool loom_sched_regroup_made(const loom_sched *s, loom_regroup_plan *out);
/* Replay mode on or off (off when the core is made). While on, a departure or first re-plan
 * does not search: the plan the live core made there, if any, is the driver's to hand back. */
void loom_sched_replaying(loom_sched *s, bool on);
/* Apply plan p as the search that made it did, whether or not it is what a search would find
 * now: each member's plan is set (or, staying, dropped), a moving member's count of training
 * ends waited restarting. Checked first, nothing changed on error: LOOM_ENOENT for a member that is
 * not a live job or a group `to` that does not exist, LOOM_EINVAL for a member listed twice, a move
 * into the group it is in, or n outside 1 .. LOOM_REGROUP_MAX. */
int loom_sched_regroup_apply(loom_sched *s, const loom_regroup_plan *p);

/* For a driver that lost the job's phase state (loomd after a restart): put the job back
 * waiting for `phase` (rollout or train); any phase it was running is forgotten and its
 * resources freed. call: for a training phase run call by call, the call to start at (the
 * calls before it finished; 0: the first); must be 0 otherwise. */
int loom_sched_job_resume(loom_sched *s, loom_us now, loom_job_id job, loom_phase phase, int call);

/* One job of loom_sched_resume. */
typedef struct loom_resume {
        loom_job_id job;
        loom_phase phase; /* LOOM_PHASE_ROLLOUT or LOOM_PHASE_TRAIN: what it waits for or runs */
        int call;         /* as for loom_sched_job_resume */
        bool running;     /* a worker still runs `phase` under a grant the driver kept (a lease
                           * that outlived the driver's process): it starts again at once */
} loom_resume;

/* loom_sched_job_resume for many jobs at once, as a driver that rebuilt its core needs: every
 * job listed (each once) is put back waiting, then each `running` phase starts before anything
 * else is dispatched, out of turn if need be, on the nodes it runs on; then the turns go on.
 * So a phase still running under a kept grant is not handed to another job and not run twice.
 * Returns how many running phases started (one whose nodes another running phase of the list
 * took waits instead), or a negative error, checked for every entry before anything changes. */
int loom_sched_resume(loom_sched *s, loom_us now, const loom_resume *r, size_t n);

typedef enum loom_action_type {
        LOOM_ACT_START_PHASE = 0, /* job may run phase on nodes/gpus now */
        LOOM_ACT_MIGRATE_TAIL,    /* job: squeeze the rollout tail onto keep_gpus of nodes[0] */
        LOOM_ACT_RESIZE_PHASE,    /* job's running phase now has `gpus` GPUs (tail finished) */
        LOOM_ACT_PROVISION_NODE,  /* bring up node in pool */
        LOOM_ACT_RELEASE_NODE,    /* node in pool is no longer needed */
        LOOM_ACT_JOB_DONE,        /* job reached its iterations and has left */
} loom_action_type;

const char *loom_action_type_name(loom_action_type t);

typedef struct loom_action {
        loom_action_type type;
        loom_job_id job;
        loom_phase phase;
        loom_group_id group;
        loom_pool pool; /* for node actions, and the pool of a phase */
        loom_node_id node;
        int n_nodes;
        loom_node_id nodes[LOOM_MAX_JOB_NODES];
        int gpus;      /* GPUs the phase runs on */
        int keep_gpus; /* for MIGRATE_TAIL */
        /* A job whose spec gives two or more training calls trains call by call:
         * START_PHASE(TRAIN) then runs only call `call` of the `n_calls` loom_job_calls()
         * lists, and phase_done(TRAIN) ends that call; the iteration ends with the last.
         * n_calls == 0: the whole phase. */
        int n_calls, call;
} loom_action;

/* Pop the next pending action in FIFO order; false when none. */
bool loom_sched_next_action(loom_sched *s, loom_action *out);

/* ---- queries ---------------------------------------------------------------------------- */

typedef enum loom_job_state {
        LOOM_JOB_WAIT_ROLL = 0,
        LOOM_JOB_ROLLING,
        LOOM_JOB_WAIT_TRAIN,
        LOOM_JOB_TRAINING,
        LOOM_JOB_SYNCING,
} loom_job_state;
const char *loom_job_state_name(loom_job_state s);

typedef struct loom_job_info {
        loom_job_id id;
        loom_job_spec spec;
        loom_job_state state;
        loom_group_id group;
        int n_rollout_nodes;
        loom_node_id rollout_nodes[LOOM_MAX_JOB_NODES];
        int n_train_nodes;
        loom_node_id train_nodes[LOOM_MAX_JOB_NODES];
        int64_t iterations_done;
        loom_us t_train_in_group; /* t_train scaled to the group's training pool */
        loom_us submitted_at;
        bool tail_migrated;     /* current rollout has been migrated to its tail GPUs */
        loom_job_spec declared; /* as submitted; spec holds the profile admission plans on */
        bool learned;           /* spec is a learned profile (admission p99/p95) */
        uint64_t replans;       /* times its group was re-planned on its observed profile */
        /* its last learned profile (0 before any): quantile times, and the SLO budget from
         * its mean observed solo iteration */
        loom_us learned_roll, learned_train, learned_budget;
        loom_us learned_head; /* its last learned rollout head (0: none) */
        int rate;             /* iterations per meta-iteration of its group */
        /* policy.regroup: the plan a re-solve made for it (loom_regroup_plan): moved into
         * group regroup_to, or alone; regroup_tries: training ends it has waited since (read
         * only while it has a plan) */
        bool regroup_planned, regroup_alone;
        loom_group_id regroup_to;
        int regroup_tries;
} loom_job_info;

typedef struct loom_group_info {
        loom_group_id id;
        int n_members;
        loom_job_id members[LOOM_MAX_GROUP_SIZE]; /* admission order */
        int n_rollout_nodes;
        loom_node_id rollout_nodes[LOOM_MAX_GROUP_ROLLOUT_NODES];
        int n_train_nodes;
        loom_node_id train_nodes[LOOM_MAX_JOB_NODES];
        loom_us t_cycle, t_load, t_meta;
        bool saturated;
        /* policy.colocate_lone: the one member rolls out on the training nodes, and the
         * rollout nodes above are planned, not provisioned (cost_per_hour leaves them out) */
        bool lone;
        double cost_per_hour;
        int rates[LOOM_MAX_GROUP_SIZE]; /* of members[] */
} loom_group_info;

int loom_sched_job_info(const loom_sched *s, loom_job_id id, loom_job_info *out);
int loom_sched_group_info(const loom_sched *s, loom_group_id id, loom_group_info *out);
/* A job's iterations done as its driver counted them (loomd's replay of its log, whose "iter"
 * entries carry the count): sets what the core counts itself at each finished training, so
 * that what placement reads of the job's remaining run (policy.join_wait, run lengths, moves)
 * is what it was live. Changes nothing else (no dispatch, no exit). LOOM_EINVAL for a count
 * below 0 or, for a job of spec.iterations > 0, not below it (the job would have ended). */
int loom_sched_job_iterations(loom_sched *s, loom_job_id id, int64_t done);

/* Fill ids[0..cap) with live job (group) ids in ascending order; returns how many exist
 * (which may exceed cap). */
int loom_sched_jobs(const loom_sched *s, loom_job_id *ids, int cap);
int loom_sched_groups(const loom_sched *s, loom_group_id *ids, int cap);

typedef struct loom_sched_stats {
        int jobs, groups;
        int nodes[2];          /* provisioned nodes per pool */
        double cost_per_hour;  /* of every provisioned node */
        uint64_t decisions[4]; /* by loom_decision_kind */
        uint64_t migrations;
        uint64_t replans; /* learned-profile re-plans made (loom_sched_observe) */
        /* policy.regroup: re-solves searched, the plans they made, plans applied from a log
         * (loom_sched_regroup_apply) */
        uint64_t regroup_solves, regroup_plans, regroup_applied;
        uint64_t slo_relaxed; /* admissions whose SLO policy.slo_cap relaxed */
        /* policy.pool_grow: training nodes joins added to pools, and departures took out */
        uint64_t pool_grown, pool_shrunk;
} loom_sched_stats;

void loom_sched_stats_get(const loom_sched *s, loom_sched_stats *out);
const loom_cluster_cfg *loom_sched_cluster(const loom_sched *s);
const loom_policy_cfg *loom_sched_policy(const loom_sched *s);

#endif
