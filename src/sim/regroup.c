/*
 * regroup.c - the dynamic-regrouping baseline's search (WEAVE §6.6): every hour, place all
 * active jobs from scratch under their current (drifted) profiles.
 *
 * The paper's baseline uses brute force, which does not scale past a dozen jobs (see the
 * oracle); this one runs Algorithm 1 on an empty scheduler over several submission orders
 * (longest solo iteration first, most training first, most rollout first, the current order,
 * and seeded shuffles) and keeps the cheapest grouping. Solver time is not charged. The event
 * engine (engine.c) decides whether to apply the plan and charges each moved job its
 * migration-and-restart time. Which jobs a new grouping moves (loom__sim_mark_moved) is
 * counted the same way for the oracle's regroupings.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

#define REGROUP_ORDERS 8

typedef struct keyed {
        int i;
        double key;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
        const keyed *x = a, *y = b;
        if (x->key != y->key)
                return x->key > y->key ? -1 : 1; /* descending */
        return (x->i > y->i) - (x->i < y->i);
}

static void make_order(const loom_job_spec *sp, int n, int which, uint64_t seed, int *order,
                       keyed *tmp)
{
        for (int i = 0; i < n; i++) {
                double key = 0;
                if (which == 0)
                        key = (double)loom_job_t_solo(&sp[i]);
                else if (which == 1)
                        key = (double)sp[i].t_train;
                else if (which == 2)
                        key = (double)sp[i].t_roll;
                else if (which >= 4) {
                        sim_rng r = sim_rng_key(seed, (uint64_t)which, (uint64_t)i);
                        key = sim_rng_unit(&r);
                }
                tmp[i] = (keyed){i, which == 3 ? -(double)i : key};
        }
        qsort(tmp, (size_t)n, sizeof *tmp, cmp_keyed);
        for (int i = 0; i < n; i++)
                order[i] = tmp[i].i;
}

/* Submit specs in `order` to a fresh scheduler; its $/h and each job's group (by index). */
static int try_order(const loom_sim_cfg *c, const loom_policy_cfg *pc, const loom_job_spec *sp,
                     int n, const int *order, int *group_of, double *cost, loom_err *e)
{
        loom_sched *s = loom_sched_new(&c->cluster, pc, e);
        if (!s)
                return LOOM_EINVAL;
        int rc = 0;
        loom_decision d;
        loom_decision_init(&d, false);
        for (int k = 0; k < n && !rc; k++) {
                loom_job_id id;
                rc = loom_sched_submit(s, 0, &sp[order[k]], &d, &id, e);
                if (!rc)
                        group_of[order[k]] = (int)d.group;
        }
        loom_decision_free(&d);
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        *cost = st.cost_per_hour;
        loom_sched_free(s);
        return rc;
}

int loom__sim_regroup_plan(const loom_sim_cfg *c, const loom_job_spec *sp, int n, uint64_t seed,
                           int *order, int *group_of, double *cost, loom_err *e)
{
        loom_policy_cfg pc = c->policy;
        pc.placer = LOOM_PLACER_LOOM;
        pc.admission = LOOM_ADMIT_WORST;
        int *o = malloc(sizeof *o * (size_t)n * 2);
        keyed *tmp = malloc(sizeof *tmp * (size_t)n);
        int rc = LOOM_ENOMEM;
        if (!o || !tmp)
                goto out;
        int *gr = o + n;
        *cost = -1;
        for (int which = 0; which < REGROUP_ORDERS; which++) {
                double k;
                make_order(sp, n, which, seed, o, tmp);
                if ((rc = try_order(c, &pc, sp, n, o, gr, &k, e)))
                        goto out;
                if (*cost < 0 || k < *cost - 1e-9) {
                        *cost = k;
                        memcpy(order, o, sizeof *o * (size_t)n);
                        memcpy(group_of, gr, sizeof *gr * (size_t)n);
                }
        }
        rc = 0;
out:
        free(o);
        free(tmp);
        return rc;
}

int loom__sim_regroup_feasible(const loom_sched *s, const loom_job_spec *cur_by_id, bool *ok)
{
        *ok = true;
        const loom_cluster_cfg *cl = loom_sched_cluster(s);
        const loom_policy_cfg *pc = loom_sched_policy(s);
        int ng = loom_sched_groups(s, NULL, 0);
        if (ng == 0)
                return 0;
        loom_group_id *gids = malloc(sizeof *gids * (size_t)ng);
        if (!gids)
                return LOOM_ENOMEM;
        loom_sched_groups(s, gids, ng);
        for (int gi = 0; gi < ng && *ok; gi++) {
                loom_group_info gin;
                loom_sched_group_info(s, gids[gi], &gin);
                loom_meta_job mj[LOOM_MAX_GROUP_SIZE];
                int idx[LOOM_MAX_GROUP_SIZE][LOOM_MAX_JOB_NODES];
                loom_us budget = INT64_MAX;
                int pool = gin.n_train_nodes * cl->gpus_per_node;
                for (int m = 0; m < gin.n_members; m++) {
                        loom_job_info ji;
                        loom_sched_job_info(s, gin.members[m], &ji);
                        const loom_job_spec *cs = &cur_by_id[gin.members[m]];
                        for (int k = 0; k < ji.n_rollout_nodes; k++)
                                for (int r = 0; r < gin.n_rollout_nodes; r++)
                                        if (gin.rollout_nodes[r] == ji.rollout_nodes[k])
                                                idx[m][k] = r;
                        loom_us tt = loom_group_train_time(cs->t_train, cs->train_gpus, pool,
                                                           pc->train_scaling_efficiency);
                        mj[m] = (loom_meta_job){.t_roll = cs->t_roll,
                                                .t_train = tt,
                                                .t_sync = cs->t_sync,
                                                .n_nodes = ji.n_rollout_nodes,
                                                .nodes = idx[m],
                                                .t_switch = cs->t_switch};
                        loom_us b = loom_job_budget(cs);
                        if (b < budget)
                                budget = b;
                }
                loom_us t_meta;
                int rc = loom_meta_period(mj, gin.n_members, gin.n_rollout_nodes, pc->warm_switch,
                                          &t_meta, NULL);
                if (rc) {
                        free(gids);
                        return rc;
                }
                *ok = t_meta <= budget;
        }
        free(gids);
        return 0;
}

int loom__sim_mark_moved(const int *old_g, const int *new_g, int n, bool *moved)
{
        bool *kept = calloc((size_t)n, sizeof *kept); /* old group (by first index) taken */
        bool *seen = calloc((size_t)n, sizeof *seen); /* new group handled */
        for (int i = 0; i < n; i++)
                moved[i] = true;
        for (int a = 0; kept && seen && a < n; a++) {
                if (seen[a])
                        continue;
                int best = -1, best_n = 0;
                for (int b = 0; b < n; b++) { /* candidate old groups, by a member b */
                        if (new_g[b] != new_g[a] || kept[b])
                                continue;
                        int cnt = 0;
                        for (int k = 0; k < n; k++)
                                cnt += new_g[k] == new_g[a] && old_g[k] == old_g[b];
                        if (cnt > best_n)
                                best = b, best_n = cnt;
                }
                for (int k = 0; k < n; k++) {
                        if (new_g[k] == new_g[a])
                                seen[k] = true;
                        if (best >= 0 && old_g[k] == old_g[best]) {
                                kept[k] = true;
                                if (new_g[k] == new_g[a])
                                        moved[k] = false;
                        }
                }
        }
        free(kept);
        free(seen);
        int count = 0;
        for (int i = 0; i < n; i++)
                count += moved[i];
        return count;
}
