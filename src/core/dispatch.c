/*
 * dispatch.c - intra-group round robin (WEAVE §4.3) and long-tail migration.
 *
 * The schedule admission simulates (group.c) runs in rounds: in round r every member rolls out
 * once and trains once, each rollout node serving its members in admission order and the
 * training pool likewise. Dispatch enforces exactly that order. Every phase has a key
 * (round, job id): a member's k-th rollout and k-th training are in round round_base + k. Each
 * resource serves its members' phases strictly in key order: a phase starts when its job waits
 * for it, the resource is free, and no member of that resource has a smaller key still to run.
 * So no member runs ahead and takes a slower member's turn, and the admitted T_meta bounds every
 * member's iteration time in steady state.
 *
 * A new member's round_base is the first round no member has trained in yet: its keys then
 * follow every phase already started, on every resource, so the group keeps the order the
 * simulation assumed (joining in the middle of a round would change which rounds interleave and
 * with it the period).
 *
 * Multi-rate groups: a member of rate r has r slots per round (loom_meta_order); its n-th phase
 * since its rate was set is in round round_base + n / r at slot pos[n % r], and keys compare by
 * (round, slot). A member's slots increase with its repeats, so its keys increase with n, and
 * with every rate 1 the slot is the admission index: the order above. A member re-rated by a
 * placement starts its new rate at the new member's round (sched.c).
 *
 * Liveness: in states a driver can create by hand (loom_sched_job_resume after a restart) keys
 * can wait on each other. If nothing in the group runs while some job waits, the longest
 * waiting job whose resources are free starts out of turn.
 *
 * Long-tail migration: a rollout that has reported done/total >= tail_threshold is tail-bound.
 * As soon as the next rollout in turn on one of its nodes is ready (then, or whenever that
 * happens later), it is squeezed onto tail_keep_gpus GPUs of its first node; the freed GPUs
 * start the next rollout at once, which grows back to the whole node (RESIZE_PHASE) when the
 * tail finishes. Drivers report progress once; they need not poll.
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
        if (phase == LOOM_PHASE_ROLLOUT && j->colo) {
                a.pool = LOOM_POOL_TRAIN; /* a lone member: on its group's training nodes */
                a.n_nodes = g->n_tnodes;
                loom__tnodes(g, a.nodes);
        } else if (phase == LOOM_PHASE_ROLLOUT) {
                a.pool = LOOM_POOL_ROLLOUT;
                a.n_nodes = j->n_rnodes;
                memcpy(a.nodes, j->rnodes, sizeof(loom_node_id) * (size_t)j->n_rnodes);
        } else if (phase == LOOM_PHASE_TRAIN) {
                a.pool = LOOM_POOL_TRAIN;
                a.n_nodes = g->n_tnodes;
                loom__tnodes(g, a.nodes);
        }
        a.gpus = j->gpus;
        loom_us calls[LOOM_N_CALLS];
        if (phase == LOOM_PHASE_TRAIN && (a.n_calls = loom__job_calls(j, calls)) > 0)
                a.call = j->call;
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

static bool pinned(const job *j, loom_node_id id)
{
        for (int k = 0; k < j->n_rnodes; k++)
                if (j->rnodes[k] == id)
                        return true;
        return false;
}

/* The key of j's n-th phase (n counts rollouts or trainings since it began). */
typedef struct key {
        int64_t round;
        int slot;
} key;

static key key_of(const job *j, int64_t n)
{
        int64_t m = n - j->count_base;
        if (m < 0)
                m = 0;
        return (key){j->round_base + m / j->rate, j->pos[m % j->rate]};
}

/* Keys compare by round, then slot (with every rate 1, admission order). */
static bool key_less(key a, key b)
{
        return a.round < b.round || (a.round == b.round && a.slot < b.slot);
}

/* Whose turn it is on rollout node r: the pinned member with the smallest rollout key. */
static const job *node_turn(const group *g, const rnode *r)
{
        const job *best = NULL;
        key bk = {0, 0};
        for (int i = 0; i < g->n_members; i++) {
                const job *j = g->members[i];
                if (!pinned(j, r->id))
                        continue;
                key k = key_of(j, j->rolls);
                if (!best || key_less(k, bk)) {
                        best = j;
                        bk = k;
                }
        }
        return best;
}

/* The member whose training is next: round-robin keys, except that a member whose rollout ran
 * on the training nodes (lone until a second member joined) trains first. That rollout held the
 * training pool, which the keys' schedule assumes free; the newcomer's first round may wait out
 * the round in progress (its first-round check), the member's own iteration may not. */
static const job *train_turn(const group *g)
{
        const job *best = NULL;
        key bk = {0, 0};
        for (int i = 0; i < g->n_members; i++)
                if (g->members[i]->colo_wait && g->members[i]->state == LOOM_JOB_WAIT_TRAIN)
                        return g->members[i];
        for (int i = 0; i < g->n_members; i++) {
                const job *j = g->members[i];
                key k = key_of(j, j->trains);
                if (!best || key_less(k, bk)) {
                        best = j;
                        bk = k;
                }
        }
        return best;
}

int64_t loom__next_round(const group *g)
{
        int64_t r = 0;
        for (int i = 0; i < g->n_members; i++) {
                const job *j = g->members[i];
                int64_t m = j->trains - j->count_base;
                int64_t next = j->round_base + (m + j->rate - 1) / j->rate;
                if (next > r)
                        r = next;
        }
        return r;
}

/* Can j's rollout start now? ignore: a running job whose GPUs count as free (migration). */
static bool rollout_can_start(const loom_sched *s, const group *g, const job *j, bool in_turn)
{
        if (j->state != LOOM_JOB_WAIT_ROLL)
                return false;
        if (g->lone)
                return !g->train_running;
        for (int k = 0; k < j->n_rnodes; k++) {
                const rnode *r = node_of(s, j->rnodes[k]);
                if (r->running || (in_turn && node_turn(g, r) != j))
                        return false;
        }
        return true;
}

static void start_rollout(loom_sched *s, job *j, loom_us now)
{
        group *g = j->group;
        j->colo = g->lone;
        if (j->colo)
                g->train_running = g->train_last = j->id;
        for (int k = 0; k < j->n_rnodes && !j->colo; k++)
                node_of(s, j->rnodes[k])->running = j->id;
        j->rolls++;
        j->state = LOOM_JOB_ROLLING;
        j->migrated = false;
        j->tail_due = false;
        j->head_took = 0;
        j->gpus = j->colo ? j->spec.rollout_gpus : rollout_gpus_free(s, j);
        emit_phase(s, j, LOOM_PHASE_ROLLOUT, now);
}

static void start_train(loom_sched *s, group *g, job *j, loom_us now)
{
        g->train_running = j->id;
        g->train_last = j->id;
        j->colo_wait = false;
        j->trains += j->call == 0; /* a call-by-call phase is one turn */
        j->state = LOOM_JOB_TRAINING;
        j->gpus = g->train_gpus;
        emit_phase(s, j, LOOM_PHASE_TRAIN, now);
}

/* Start every phase whose turn has come; returns how many started. */
static int start_in_turn(loom_sched *s, group *g, loom_us now)
{
        int started = 0;
        for (int i = 0; i < g->n_members; i++) {
                job *j = g->members[i];
                if (rollout_can_start(s, g, j, true)) {
                        start_rollout(s, j, now);
                        started++;
                }
        }
        job *t = loom__train_mid_chain(s, g, now); /* a call-by-call phase under way */
        if (!t)
                t = s->policy.dispatch == LOOM_DISPATCH_RR ? (job *)train_turn(g)
                                                           : loom__train_pick(s, g, now);
        if (!g->train_running && t && t->state == LOOM_JOB_WAIT_TRAIN) {
                start_train(s, g, t, now);
                started++;
        }
        return started;
}

static bool group_idle(const loom_sched *s, const group *g)
{
        if (g->train_running)
                return false;
        for (int i = 0; i < g->n_rnodes; i++)
                if (g->rnodes[i]->running || g->rnodes[i]->tail)
                        return false;
        for (int i = 0; i < g->n_members; i++)
                if (g->members[i]->state == LOOM_JOB_SYNCING)
                        return false;
        (void)s;
        return true;
}

/* Nothing runs yet someone waits: the turns wait on each other. Start the longest waiter. */
static void break_stall(loom_sched *s, group *g, loom_us now)
{
        job *best = NULL;
        for (int i = 0; i < g->n_members; i++) {
                job *j = g->members[i];
                bool waits = j->state == LOOM_JOB_WAIT_ROLL || j->state == LOOM_JOB_WAIT_TRAIN;
                if (waits && (!best || j->wait_seq < best->wait_seq))
                        best = j;
        }
        if (!best)
                return;
        if (best->state == LOOM_JOB_WAIT_ROLL)
                start_rollout(s, best, now);
        else
                start_train(s, g, best, now);
}

static bool someone_waits(const loom_sched *s, const group *g, const job *j);

/* Squeeze j's rollout onto tail_keep_gpus GPUs of its first node, freeing the rest. */
static void migrate_tail(loom_sched *s, job *j)
{
        const loom_policy_cfg *p = &s->policy;
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
}

/* Migrate every tail-bound rollout whose node has the next rollout ready; returns how many. A
 * node holds one tail: a rollout whose first node still keeps another job's tail waits until
 * that tail ends (its GPUs come back, and the next dispatch looks again), or a node would run
 * two tails and a whole rollout, more GPUs than it has. */
static int migrate_due_tails(loom_sched *s, group *g)
{
        int n = 0;
        for (int i = 0; i < g->n_members; i++) {
                job *j = g->members[i];
                const rnode *first = j->n_rnodes ? node_of(s, j->rnodes[0]) : NULL;
                if (j->state == LOOM_JOB_ROLLING && j->tail_due && !j->migrated && !j->colo &&
                    first && (!first->tail || first->tail == j->id) && someone_waits(s, g, j)) {
                        migrate_tail(s, j);
                        n++;
                }
        }
        return n;
}

static void settle(loom_sched *s, group *g, loom_us now)
{
        while (migrate_due_tails(s, g) + start_in_turn(s, g, now))
                ;
}

void loom__dispatch(loom_sched *s, group *g, loom_us now)
{
        loom__pool_settle(s, g);
        settle(s, g, now);
        if (group_idle(s, g)) {
                break_stall(s, g, now);
                settle(s, g, now);
        }
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
        if (j->state == LOOM_JOB_ROLLING && j->colo) {
                if (j->group->train_running == j->id)
                        j->group->train_running = 0;
        } else if (j->state == LOOM_JOB_ROLLING) {
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
        j->tail_due = false;
        j->colo = false;
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
        bool colo = j->colo;
        loom__release_running(s, j, now);
        switch (phase) {
        case LOOM_PHASE_ROLLOUT:
                j->colo_wait = colo;
                wait_for(s, j, LOOM_JOB_WAIT_TRAIN);
                loom__lone_settle(s, g); /* it went lone while this rollout ran on a rollout node */
                j->wait_since = j->chain_since = now;
                j->call = 0;
                break;
        case LOOM_PHASE_TRAIN:
                if (j->call + 1 < loom__job_calls(j, (loom_us[LOOM_N_CALLS]){0})) {
                        j->call++; /* the next call waits for the pool like any request */
                        wait_for(s, j, LOOM_JOB_WAIT_TRAIN);
                        j->wait_since = now;
                        break;
                }
                j->call = 0;
                j->iterations_done++;
                if (j->spec.iterations > 0 && j->iterations_done >= j->spec.iterations) {
                        loom_action a = {.type = LOOM_ACT_JOB_DONE, .job = j->id, .group = g->id};
                        loom__push_action(s, &a);
                        return loom_sched_job_exit(s, now, j->id, LOOM_EXIT_FINISHED);
                }
                if (j->spec.t_sync > 0 && !g->lone) { /* lone: the weights are where they run */
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

/* Would the rollout in turn after j on one of j's nodes start if j's GPUs were freed? */
static bool someone_waits(const loom_sched *s, const group *g, const job *j)
{
        for (int k = 0; k < j->n_rnodes; k++) {
                const job *o = node_turn(g, node_of(s, j->rnodes[k]));
                if (!o || o == j || o->state != LOOM_JOB_WAIT_ROLL)
                        continue;
                bool ok = true;
                for (int q = 0; q < o->n_rnodes && ok; q++) {
                        const rnode *r = node_of(s, o->rnodes[q]);
                        ok = node_turn(g, r) == o && (!r->running || r->running == j->id);
                }
                if (ok)
                        return true;
        }
        return false;
}

int loom__progress(loom_sched *s, job *j, loom_us now, int64_t done, int64_t total)
{
        const loom_policy_cfg *p = &s->policy;
        if (j->state != LOOM_JOB_ROLLING || j->migrated || j->colo || !p->tail_migration ||
            total <= 0 || (double)done < p->tail_threshold * (double)total)
                return 0;
        j->tail_due = true;
        loom__dispatch(s, j->group, now);
        return j->migrated ? 1 : 0;
}

/* ---- resuming after a driver lost the phase state ---------------------------------------- */

static int resume_ok(const loom_sched *s, const loom_resume *r)
{
        const job *j = loom__job((loom_sched *)s, r->job);
        if (!j)
                return LOOM_ENOENT;
        if (r->phase != LOOM_PHASE_ROLLOUT && r->phase != LOOM_PHASE_TRAIN)
                return LOOM_EINVAL;
        int n_calls =
            r->phase == LOOM_PHASE_TRAIN ? loom__job_calls(j, (loom_us[LOOM_N_CALLS]){0}) : 0;
        return r->call < 0 || (r->call > 0 && r->call >= n_calls) ? LOOM_EINVAL : 0;
}

/* j waits for phase again, the calls before `call` done; what it ran on is free. */
static void park(loom_sched *s, job *j, loom_phase phase, int call, loom_us now)
{
        loom__release_running(s, j, now);
        j->colo_wait = false;
        /* its next rollout (or training) is the one of the round it was in */
        j->rolls = j->trains + (phase == LOOM_PHASE_TRAIN);
        j->state = phase == LOOM_PHASE_ROLLOUT ? LOOM_JOB_WAIT_ROLL : LOOM_JOB_WAIT_TRAIN;
        j->wait_since = j->chain_since = now;
        j->call = call; /* the calls before it are done */
        if (call > 0)
                j->trains = j->rolls; /* its training turn of the round has begun */
        j->wait_seq = ++s->seq;
}

/* Parking every job before any starts matters: a job parked early would otherwise be dispatched
 * onto the nodes of a phase that still runs for a job parked later. The running phases then
 * start first, whatever the turns say (the driver that granted them kept the turns), and only
 * then does the usual dispatch hand out what is left. */
int loom_sched_resume(loom_sched *s, loom_us now, const loom_resume *r, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                int rc = resume_ok(s, &r[i]);
                if (rc)
                        return rc;
        }
        for (size_t i = 0; i < n; i++)
                park(s, loom__job(s, r[i].job), r[i].phase, r[i].call, now);
        int started = 0;
        for (size_t i = 0; i < n; i++) {
                job *j = loom__job(s, r[i].job);
                group *g = j->group;
                if (!r[i].running || j->state == LOOM_JOB_ROLLING || j->state == LOOM_JOB_TRAINING)
                        continue;
                if (r[i].phase == LOOM_PHASE_ROLLOUT && rollout_can_start(s, g, j, false)) {
                        start_rollout(s, j, now);
                        started++;
                } else if (r[i].phase == LOOM_PHASE_TRAIN && !g->train_running) {
                        start_train(s, g, j, now);
                        started++;
                }
        }
        for (size_t i = 0; i < n; i++) {
                group *g = loom__job(s, r[i].job)->group;
                loom__lone_settle(s, g); /* a rollout on a lone group's rollout node is over */
                loom__dispatch(s, g, now);
        }
        return started;
}

int loom_sched_job_resume(loom_sched *s, loom_us now, loom_job_id id, loom_phase phase, int call)
{
        loom_resume r = {.job = id, .phase = phase, .call = call};
        int rc = loom_sched_resume(s, now, &r, 1);
        return rc < 0 ? rc : 0;
}
