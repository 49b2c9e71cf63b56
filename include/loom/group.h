/*
 * group.h - co-execution group arithmetic: effective phase times, loads, cycle, saturation and
 * the meta-iteration simulation. Pure functions over plain arrays; the scheduler (sched.h), the
 * simulator's baselines and the oracle all evaluate groups through these.
 *
 * A group owns R rollout nodes and P training GPUs (whole nodes). Every member trains on all P
 * GPUs: a job that asked for g training GPUs trains for t_train * g / P when P <= g (slower when
 * P < g), and for t_train / (1 + (P/g - 1) * eff) when P > g, eff being the policy's
 * train_scaling_efficiency (1.0 = linear). Its training working set per node scales by g / P.
 * Each member rolls out on the rollout nodes it is pinned to (local indexes 0..R-1).
 *
 * T_solo  = t_roll + t_train + t_sync on the job's own resources (sync occupies neither pool, but
 *           a job's next rollout waits for it, so it is part of the iteration).
 * T_cycle = max over members of their in-group T_solo.
 * T_load  = max(sum of in-group t_train, max over rollout nodes of the sum of t_roll pinned there).
 * Saturated when T_load >= T_cycle: no slack is left for another member.
 */
#ifndef LOOM_GROUP_H
#define LOOM_GROUP_H

#include "loom/job.h"

/* One member as the meta-iteration sees it: in-group times and its rollout node indexes. */
typedef struct loom_meta_job {
        loom_us t_roll;
        loom_us t_train; /* already scaled to the group's training pool */
        loom_us t_sync;
        int n_nodes;
        const int *nodes; /* local rollout node indexes, ascending, each < n_rollout_nodes */
        loom_us t_switch; /* switching a node to this job; 0: the evaluation's warm_switch */
        /* Tail migration (docs/scheduling.md, "Planning the tails"). t_head > 0: the rollout
         * frees its nodes t_head after it starts, its tail going on on a few GPUs of its first
         * node, and the next other job's rollout there starts t_pen later than it could (the
         * GPUs the tail keeps). 0: it holds its nodes for all of t_roll. t_head <= t_roll. */
        loom_us t_head, t_pen;
} loom_meta_job;

/* How long a rollout keeps its k-th node (0: its first, where the tail stays) from the next
 * rollout there: t_head + t_pen on the first, t_head on the others, or t_roll. */
static inline loom_us loom_meta_occ(const loom_meta_job *j, int k)
{
        return j->t_head > 0 ? j->t_head + (k == 0 ? j->t_pen : 0) : j->t_roll;
}

/*
 * Multi-rate groups. A member of rate r runs r iterations per meta-iteration (a hyperperiod):
 * its mean iteration time is T_meta / r. Rates come as an array beside the jobs (NULL: all
 * 1). Weighted by rate, T_cycle = max r T_solo (the hyperperiod's lower bound from any one
 * member's own chain) and T_load = max(sum r t_train, max over nodes of sum r t_roll).
 */
#define LOOM_MAX_RATE 16
#define LOOM_META_MAX_SLOTS 64 /* sum of rates in one group */
/* The longest gap between two consecutive iteration ends of a member may be at most this many
 * times its SLO budget: 1, so every single iteration of a multi-rate member, not only their
 * mean, stays within the bound a single-rate member has (docs/scheduling.md). */
#define LOOM_GAP_FACTOR 1

/*
 * The intra-meta-iteration order: slots[0 .. L) (L = sum of rates, returned) name the member
 * of each slot. Each resource serves its members' phases in slot order. All rates 1: member
 * (admission) order, WEAVE's round robin. Otherwise the q-th repeat (q = 0..r-1) of member k
 * is due at q H / r_k + t_roll_k, H = max r T_solo (its repeats spread evenly over the
 * hyperperiod, ordered by when their training can begin), ties by member then repeat.
 * Returns LOOM_EINVAL when L exceeds cap or a rate is out of range.
 */
int loom_meta_order(const loom_meta_job *jobs, const int *rates, int n, int *slots, int cap);
loom_us loom_meta_t_cycle_r(const loom_meta_job *jobs, const int *rates, int n);
loom_us loom_meta_t_load_r(const loom_meta_job *jobs, const int *rates, int n, int n_rollout_nodes);

/* In-group training time of a job that asked for g GPUs in a pool of P GPUs. */
loom_us loom_group_train_time(loom_us t_train, int g, int pool_gpus, double efficiency);
/* In-group training working set per node. */
uint64_t loom_group_train_mem(uint64_t mem_train, int g, int pool_gpus);

loom_us loom_meta_t_cycle(const loom_meta_job *jobs, int n);
loom_us loom_meta_t_load(const loom_meta_job *jobs, int n, int n_rollout_nodes);

/*
 * Simulate the group's round-robin schedule: every rollout node runs the rollouts pinned to it,
 * and the training pool runs every member's training, in member (admission) order. A job's
 * training waits for its rollout; its next rollout waits for its training plus its sync; a
 * multi-node rollout waits for all its nodes. When warm_switch > 0 it is paid each time a
 * node (or the training pool) changes job. The simulation runs until the schedule is periodic
 * and returns the period: every member's co-executed iteration time, T_meta.
 *
 * For an unsaturated group with warm_switch == 0 in which every member rolls out on one node and
 * has no sync phase, this equals T_cycle (WEAVE Theorem 1; tests/unit/test_core_group.c checks it
 * on thousands of random groups). Outside those hypotheses the fixed round-robin order can
 * exceed T_cycle even when unsaturated: a multi-node rollout couples its nodes, and a sync gap
 * does not overlap other work the way the proof assumes. The scheduler therefore simulates such
 * groups instead of assuming T_cycle. It is always >= max(T_cycle, T_load).
 * Returns LOOM_EINVAL for bad arguments (n < 1 or > 64, a node index out of range),
 * LOOM_ENOMEM. The period is exact: found by simulation when the schedule repeats within a few
 * hundred iterations, else as the max-plus eigenvalue of the iteration (rounded to 1 us).
 * If starts is not NULL it receives, for each member, its rollout start time in the first
 * periodic iteration (relative to the first rollout), for Gantt charts.
 */
int loom_meta_period(const loom_meta_job *jobs, int n, int n_rollout_nodes, loom_us warm_switch,
                     loom_us *t_meta, loom_us *starts);

/*
 * loom_meta_period for multi-rate groups, in the slot order of loom_meta_order: the rollout
 * of slot i waits for the training (plus sync) of its member's previous slot. When gaps is not
 * NULL it receives, per member, the longest time between two consecutive ends of its training
 * in steady state (equal to T_meta for a rate-1 member of a schedule that repeats every
 * meta-iteration). With every rate 1 the period is exactly loom_meta_period's.
 */
int loom_meta_eval(const loom_meta_job *jobs, const int *rates, int n, int n_rollout_nodes,
                   loom_us warm_switch, loom_us *t_meta, loom_us *gaps, loom_us *starts);

/*
 * Lower bounds on loom_meta_eval's longest gaps, from the slot order alone (no simulation),
 * valid for any warm_switch: between two consecutive training ends of member i lie at least
 * its own t_sync + t_roll + t_train (its next rollout waits for its training and sync), and
 * at least its t_train plus every training of the slots in between (the training pool serves
 * slots in order). lb[i] receives member i's bound. Returns 0, or LOOM_EINVAL like
 * loom_meta_order. Placement uses it to reject a candidate without simulating it.
 */
int loom_meta_gap_bound(const loom_meta_job *jobs, const int *rates, int n, loom_us *lb);

/*
 * Time-slicing (docs/sim.md, "Time-slicing one node set"): k members colocated on ONE node set
 * of `gpus` GPUs, each rolling out and training there, taking turns. A cycle runs the members'
 * rollouts in order, each started (after its switch) as soon as the rollout before it reaches
 * its head and leaves its tail on `keep` GPUs (and the rollout before that has ended: a node
 * holds one tail), at (g - keep) / g of full speed, g its own GPUs, until that tail ends; then
 * the trainings, in order, on the whole set. With `elastic`, a training may also start while the
 * cycle's last rollout runs its tail, on the GPUs the tail leaves (at (gpus - keep) / gpus of
 * full speed until the tail ends); without it a training waits for the whole set. Every phase
 * pays its member's switch (t_switch, which must be given), as a lone member does: one member
 * alone gives its colocated iteration, 2 t_switch + t_roll + t_train. A member without a head
 * (t_head 0) holds its GPUs to its rollout's end. Uses t_roll, t_head, t_train (already on the
 * set), t_switch and n_nodes (its rollout's nodes; <= 0: the whole set) of each job; t_sync is
 * ignored (colocated, no weights cross). Returns the cycle, every member's iteration time, or
 * -1 for bad input (n < 1, keep outside [1, gpus_per_node), a member's GPUs past the set).
 */
loom_us loom_slice_period(const loom_meta_job *jobs, int n, int set_nodes, int gpus_per_node,
                          int keep, bool elastic);

#endif
