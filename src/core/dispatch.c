/*
 * dispatch.c - intra-group round-robin (WEAVE §4.3) and long-tail migration.
 *
 * Every rollout node and every group's training pool is a FIFO: a job joins the FIFOs of the
 * resource it needs next when its dependency is met (rollout: its previous training and sync are
 * done; training: its rollout is done), ordered by one global sequence number. A phase starts
 * when its job is at the head of every FIFO it waits in and the resource is free. With one
 * global order no two multi-node rollouts can wait for each other. In steady state this is the
 * round-robin meta-iteration: each member runs each phase once per period.
 *
 * Long-tail migration: a rollout that reports done/total >= tail_threshold while another rollout
 * waits on one of its nodes is squeezed onto tail_keep_gpus GPUs of its first node; the freed
 * GPUs start the waiting rollout at once, which grows back to the whole node (RESIZE_PHASE)
 * when the tail finishes.
 */
#include <string.h>

#include "internal.h"

static rnode *node_of(const loom_sched *s, loom_node_id id)
{
        return id < s->next_rnode ? s->rnodes[id] : NULL;
}

static void emit_phase(loom_sched *s, job *j, loom_phase phase, loom_us now)
{
        loom_action a = {
            .type = LOOM_ACT_START_PHASE, .job = j->id, .phase = phase, .group = j->group->id};
        const group *g = j->group;
        if (phase == LOOM_PHASE_ROLLOUT) {
                a.pool = LOOM_POOL_ROLLOUT;
                a.n_nodes = j->n_rnodes;
                memcpy(a.nodes, j->rnodes, sizeof(loom_node_id) * (size_t)j->n_rnodes);
        } else if (phase == LOOM_PHASE_TRAIN) {
                a.pool = LOOM_POOL_TRAIN;
                a.n_nodes = g->n_tnodes;
                memcpy(a.nodes, g->tnodes, sizeof(loom_node_id) * (size_t)g->n_tnodes);
        }
        a.gpus = j->gpus;
        (void)now;
        loom__push_action(s, &a);
}

static int rollout_gpus_free(const loom_sched *s, const job *j)
{
        int gpus = 0;
        for (int k = 0; k < j->n_rnodes; k++) {
                const rnode *r = node_of(s, j->rnodes[k]);
                gpus += s->cluster.gpus_per_node - (r->tail ? r->tail_gpus : 0);
        }
        return gpus;
}

static void start_rollouts(loom_sched *s, group *g, loom_us now)
{
        job *wait[LOOM_MAX_GROUP_SIZE];
        int n = 0;
        for (int i = 0; i < g->n_members; i++)
                if (g->members[i]->state == LOOM_JOB_WAIT_ROLL) {
                        /* insertion sort by FIFO position; groups are small */
                        job *j = g->members[i];
                        int p = n++;
                        while (p > 0 && wait[p - 1]->wait_seq > j->wait_seq) {
                                wait[p] = wait[p - 1];
                                p--;
                        }
                        wait[p] = j;
                }
        if (!n)
                return;
        for (int i = 0; i < g->n_rnodes; i++)
                g->rnodes[i]->blocked = false;
        for (int i = 0; i < n; i++) {
                job *j = wait[i];
                bool can = true;
                for (int k = 0; k < j->n_rnodes && can; k++) {
                        const rnode *r = node_of(s, j->rnodes[k]);
                        can = !r->blocked && !r->running;
                }
                for (int k = 0; k < j->n_rnodes; k++) {
                        rnode *r = node_of(s, j->rnodes[k]);
                        if (can)
                                r->running = j->id;
                        else
                                r->blocked = true;
                }
                if (!can)
                        continue;
                j->state = LOOM_JOB_ROLLING;
                j->migrated = false;
                j->gpus = rollout_gpus_free(s, j);
                emit_phase(s, j, LOOM_PHASE_ROLLOUT, now);
        }
}

static void start_training(loom_sched *s, group *g, loom_us now)
{
        if (g->train_running)
                return;
        job *next = NULL;
        for (int i = 0; i < g->n_members; i++) {
                job *j = g->members[i];
                if (j->state == LOOM_JOB_WAIT_TRAIN && (!next || j->wait_seq < next->wait_seq))
                        next = j;
        }
        if (!next)
                return;
        g->train_running = next->id;
        next->state = LOOM_JOB_TRAINING;
        next->gpus = g->train_gpus;
        emit_phase(s, next, LOOM_PHASE_TRAIN, now);
}

void loom__dispatch(loom_sched *s, group *g, loom_us now)
{
        start_rollouts(s, g, now);
        start_training(s, g, now);
}

/* The tail on r finished or left: its GPUs go to the rollout now running there. */
static void return_tail_gpus(loom_sched *s, rnode *r)
{
        int gpus = r->tail_gpus;
        r->tail = 0;
        r->tail_gpus = 0;
        job *o = r->running ? loom__job(s, r->running) : NULL;
        if (!o)
                return;
        o->gpus += gpus;
        loom_action a = {.type = LOOM_ACT_RESIZE_PHASE,
                         .job = o->id,
                         .phase = LOOM_PHASE_ROLLOUT,
                         .group = o->group->id,
                         .pool = LOOM_POOL_ROLLOUT,
                         .gpus = o->gpus,
                         .n_nodes = o->n_rnodes};
        memcpy(a.nodes, o->rnodes, sizeof(loom_node_id) * (size_t)o->n_rnodes);
        loom__push_action(s, &a);
}

void loom__release_running(loom_sched *s, job *j, loom_us now)
{
        (void)now;
        if (j->state == LOOM_JOB_ROLLING) {
                for (int k = 0; k < j->n_rnodes; k++) {
                        rnode *r = node_of(s, j->rnodes[k]);
                        if (r->running == j->id)
                                r->running = 0;
                        if (r->tail == j->id)
                                return_tail_gpus(s, r);
                }
        } else if (j->state == LOOM_JOB_TRAINING && j->group->train_running == j->id) {
                j->group->train_running = 0;
        }
        j->migrated = false;
        j->gpus = 0;
}

static void wait_for(loom_sched *s, job *j, loom_job_state st)
{
        j->state = st;
        j->wait_seq = ++s->seq;
}

int loom__phase_done(loom_sched *s, job *j, loom_us now, loom_phase phase)
{
        static const loom_job_state running[] = {LOOM_JOB_ROLLING, LOOM_JOB_TRAINING,
                                                 LOOM_JOB_SYNCING};
        if (j->state != running[phase])
                return LOOM_ESTATE;
        group *g = j->group;
        loom__release_running(s, j, now);
        switch (phase) {
        case LOOM_PHASE_ROLLOUT:
                wait_for(s, j, LOOM_JOB_WAIT_TRAIN);
                break;
        case LOOM_PHASE_TRAIN:
                j->iterations_done++;
                if (j->spec.iterations > 0 && j->iterations_done >= j->spec.iterations) {
                        loom_action a = {.type = LOOM_ACT_JOB_DONE, .job = j->id, .group = g->id};
                        loom__push_action(s, &a);
                        return loom_sched_job_exit(s, now, j->id, LOOM_EXIT_FINISHED);
                }
                if (j->spec.t_sync > 0) {
                        j->state = LOOM_JOB_SYNCING;
                        emit_phase(s, j, LOOM_PHASE_SYNC, now);
                } else {
                        wait_for(s, j, LOOM_JOB_WAIT_ROLL);
                }
                break;
        case LOOM_PHASE_SYNC:
                wait_for(s, j, LOOM_JOB_WAIT_ROLL);
                break;
        }
        loom__dispatch(s, g, now);
        return 0;
}

/* Does a rollout wait on one of j's rollout nodes? */
static bool someone_waits(const group *g, const job *j)
{
        for (int i = 0; i < g->n_members; i++) {
                const job *o = g->members[i];
                if (o == j || o->state != LOOM_JOB_WAIT_ROLL)
                        continue;
                for (int a = 0; a < o->n_rnodes; a++)
                        for (int b = 0; b < j->n_rnodes; b++)
                                if (o->rnodes[a] == j->rnodes[b])
                                        return true;
        }
        return false;
}

int loom__progress(loom_sched *s, job *j, loom_us now, int64_t done, int64_t total)
{
        const loom_policy_cfg *p = &s->policy;
        if (j->state != LOOM_JOB_ROLLING || j->migrated || !p->tail_migration || total <= 0)
                return 0;
        if ((double)done < p->tail_threshold * (double)total || !someone_waits(j->group, j))
                return 0;
        rnode *first = node_of(s, j->rnodes[0]);
        for (int k = 0; k < j->n_rnodes; k++)
                node_of(s, j->rnodes[k])->running = 0;
        first->tail = j->id;
        first->tail_gpus = p->tail_keep_gpus;
        j->migrated = true;
        j->gpus = p->tail_keep_gpus;
        loom_action a = {.type = LOOM_ACT_MIGRATE_TAIL,
                         .job = j->id,
                         .phase = LOOM_PHASE_ROLLOUT,
                         .group = j->group->id,
                         .pool = LOOM_POOL_ROLLOUT,
                         .n_nodes = 1,
                         .keep_gpus = p->tail_keep_gpus,
                         .gpus = p->tail_keep_gpus};
        a.nodes[0] = first->id;
        loom__push_action(s, &a);
        s->stats.migrations++;
        loom__dispatch(s, j->group, now);
        return 1;
}
