/*
 * move.c - members moved into groups that free up (policy.move_lone, policy.move_members).
 *
 * Placement is online: a job arriving when no open group can take it opens its own and, under
 * policy.colocate_lone, runs alone on its training nodes, costing what the colocated baseline
 * costs. Groups that could take it open later, as members learn their profiles (a learned
 * re-plan shrinks a group's cycle and load) or leave. Nothing would ever move the lone job
 * there, and on the default window a third of loom's bill was such jobs' training nodes.
 *
 * So after each training phase of a job with a learned profile (learn.c), the core asks the
 * placement search what it would decide for the job's remaining iterations now, on the
 * job's learned profile and budget, with the job's own group left out. loom_sched_observe
 * returns 3 and the driver moves the job by re-admitting it exactly as for a learned
 * re-admission (result 2): stop after this iteration, restart from its checkpoint, submit on
 * the learned profile. A move costs the job a restart (its SLO pays for it) and takes a place
 * in the other group that a later arrival might have used, so:
 *
 *   lone member (move_lone)      it moves if the other group takes it for less than
 *                                LOOM_MOVE_GAIN of its own group's cost (its training nodes).
 *   other member (move_members)  its group stops paying for the rollout nodes only it uses,
 *                                or for all of them when the one member left goes lone
 *                                (colocated on the training nodes), or for everything when
 *                                it is the only member; it moves if the other
 *                                group takes it for less than that, and only into a place
 *                                that leaves every member there LOOM_MOVE_MARGIN of T_meta as
 *                                slack (a move is optional: it must not bring a group to the
 *                                edge of its SLOs, where realised variance breaks them).
 *
 * Member moves are the regrouping that departures call for: as partners leave, groups thin
 * out, and the members left behind pay for rollout nodes a denser group would share (docs/
 * sim.md, the `departures` rung). A driver may decline a move: `loom sim` does when the job's
 * remaining run is short next to a restart, or, under move_members, when the slack it has
 * banked so far would not pay for one; loomd moves at once, the job's worker restarting from
 * its last checkpoint.
 */
#include "internal.h"

/* What j's group, not lone, stops paying ($/h) once j leaves it. */
static double saving(const loom_sched *s, const job *j)
{
        const group *g = j->group;
        if (g->n_members == 1) /* rolling out on nodes of its own: all of it */
                return g->n_tnodes * s->price[LOOM_POOL_TRAIN] +
                       g->n_rnodes * s->price[LOOM_POOL_ROLLOUT];
        int freed = 0;
        for (int k = 0; k < j->n_rnodes; k++)
                freed += s->rnodes[j->rnodes[k]]->n_pinned == 1;
        if (g->n_members == 2) {
                const job *o = g->members[g->members[0] == j];
                if (loom__job_lone_fits(s, o, g->n_tnodes))
                        freed = g->n_rnodes;
        }
        return freed * s->price[LOOM_POOL_ROLLOUT];
}

bool loom__move_pays(const loom_sched *s, const job *j)
{
        const group *g = j->group;
        const loom_policy_cfg *p = &s->policy;
        if (p->placer != LOOM_PLACER_LOOM || !j->ls || !j->ls->learned_budget)
                return false;
        /* a member a departure's regrouping planned elsewhere moves there, or waits for it */
        if (p->regroup && j->regroup_planned)
                return loom__regroup_due(s, j);
        if (!p->move_lone)
                return false;
        bool lone = g->lone && g->n_members == 1;
        if (!lone && !p->move_members)
                return false;
        double gain =
            lone ? LOOM_MOVE_GAIN * g->n_tnodes * s->price[LOOM_POOL_TRAIN] : saving(s, j);
        if (gain <= 0)
                return false;
        loom_job_spec sp = j->spec;
        if (sp.iterations > 0) { /* 0: runs until it stops */
                sp.iterations -= j->iterations_done;
                if (sp.iterations < 1)
                        return false;
        }
        /* the re-admission's profile: its learned plan, held to its measured solo iteration */
        sp.t_solo_ref = (loom_us)((double)j->ls->learned_budget / sp.slo);
        if (sp.t_solo_ref < 1)
                return false;
        loom_decision d;
        loom_decision_init(&d, false);
        loom_err e;
        uint64_t rng = s->rng;
        int rc = loom__place(s, &sp, NULL, g, p->move_members ? LOOM_MOVE_MARGIN : 0, &d, &e, &rng);
        bool pays = !rc && d.kind != LOOM_DECISION_NEW_GROUP && d.marginal_cost_per_hour < gain;
        /* policy.lone_grow, once learned: j alone in a group it cannot run lone in, and a new
         * lone group of more training nodes (no rollout node paid) that bills less per
         * iteration; saving() is all its own group costs */
        if (!rc && !pays && d.kind == LOOM_DECISION_NEW_GROUP && g->n_members == 1 && !g->lone &&
            d.n_train_nodes > g->n_tnodes && p->lone_grow &&
            d.marginal_cost_per_hour <= d.n_train_nodes * s->price[LOOM_POOL_TRAIN] + 1e-9)
                pays = loom__grow_pays(s, &sp, d.n_train_nodes, saving(s, j), g->train_gpus);
        loom_decision_free(&d);
        return pays;
}
