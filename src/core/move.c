/*
 * move.c - lone members moved into groups that free up (policy.move_lone).
 *
 * Placement is online: a job arriving when no open group can take it opens its own and, under
 * policy.colocate_lone, runs alone on its training nodes, costing what the colocated baseline
 * costs. Groups that could take it open later, as members learn their profiles (a learned
 * re-plan shrinks a group's cycle and load) or leave. Nothing would ever move the lone job
 * there, and on the default window a third of loom's bill was such jobs' training nodes.
 *
 * So after each training phase of a job with a learned profile (learn.c), the core asks the
 * placement search what it would decide for the job's remaining iterations now, on the
 * job's learned profile and budget, with the job's own group left out. If it would join an
 * existing group for less than LOOM_MOVE_GAIN of its own group's cost, loom_sched_observe
 * returns 3 and the driver moves the job by re-admitting it exactly as for a learned
 * re-admission (result 2): stop after this iteration, restart from its checkpoint, submit on
 * the learned profile. The gain must be large because a move costs the job a restart (its SLO
 * pays for it) and takes a place in the other group that a later arrival might have used;
 * a driver may also decline when the job's remaining run is short next to a restart (`loom
 * sim` does below readmit_min_ratio restart times, as for result 2; loomd moves at once, the
 * job's worker restarting from its last checkpoint).
 *
 * Only lone members are moved: leaving saves their group's whole cost (its training nodes),
 * which is known exactly, while what a member of a shared group saves by leaving depends on
 * how the others re-pack.
 */
#include "internal.h"

bool loom__move_pays(const loom_sched *s, const job *j)
{
        const group *g = j->group;
        if (!s->policy.move_lone || s->policy.placer != LOOM_PLACER_LOOM || !g->lone ||
            g->n_members != 1 || !j->ls || !j->ls->learned_budget)
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
        int rc = loom__place(s, &sp, g, &d, &e, &rng);
        double own = (double)g->n_tnodes * s->price[LOOM_POOL_TRAIN];
        bool pays = !rc && d.kind != LOOM_DECISION_NEW_GROUP &&
                    d.marginal_cost_per_hour < LOOM_MOVE_GAIN * own;
        loom_decision_free(&d);
        return pays;
}
