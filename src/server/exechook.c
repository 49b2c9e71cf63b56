/*
 * exechook.c - loomd's side of the executor (loom/exec.h, docs/slurm.md).
 *
 * Two threads. The scheduler thread, every half second, publishes what should run - a worker
 * per node of every live job's current admission, on the nodes the core placed it on, and the
 * nodes its groups hold - and takes the failures the executor has seen since, feeding each into
 * the retry path (retry.c) if it concerns the job's current admission (one restart per failed
 * admission). The executor thread reconciles the cluster with the latest published state: that
 * is where the cluster's tools run (tens of milliseconds a round, seconds when the controller is
 * slow), so they never hold up permits. Since the desired state comes from the job table
 * (rebuilt from the store), the first round after a restart reconciles with what the cluster
 * still runs.
 *
 * Provisioning is not failure: while an admission's workers wait for a node to come up (Slurm
 * powering it up, bounded by the executor's provision timeout), its run permit's "not claimed in
 * time" timer does not run; it starts, at lease_timeout, once the workers are launched. A node
 * that fails (out of service in the cluster, or never up) is a node failure: a worker that ended
 * on it re-admits its job with cause "node", which spends none of the job's restarts.
 *
 * A rollout runs where its lease says: while a job's rollout worker is still on another node than
 * the one its placement names now (a group gained or lost a member, and the worker is being
 * moved), its rollout permit is held - not granted, its claim timer not running - until the
 * executor sees the worker there (srv_exec_rollout_held, checked by engine.c's grant).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/exec.h"
#include "srv.h"

#define EXEC_TICK_US (500 * 1000)
#define EXEC_MAX_EV 64
#define EXEC_MAX_WAIT 1024
#define EXEC_MAX_NAMES (2 * LOOM_EXEC_MAX_NODES)
#define EXEC_KNOWN_MAX (2 * EXEC_MAX_NAMES)

struct srv_exec {
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        loom_exec *x; /* the executor thread's only */
        /* guarded by mu */
        bool stop;
        bool published; /* the scheduler thread has published once */
        loom_exec_job *want;
        int n_want;
        size_t cap_want;
        loom_node_id up[2][LOOM_EXEC_MAX_NODES];
        int n_up[2];
        loom_exec_event ev[EXEC_MAX_EV];
        int n_ev;
        uint32_t (*waiting)[2]; /* loom_exec_waiting after the last round */
        int n_waiting;
        char notes[8][LOOM_EXEC_NOTE_MAX]; /* node events not yet logged */
        int n_notes;
        uint32_t (*misplaced)[2]; /* loom_exec_misplaced after the last round */
        int n_misplaced;
        loom_exec_place *places; /* loom_exec_rollout_places after the last round */
        int n_places;
        loom_exec_binding *names; /* loom_exec_bindings after the last round */
        int n_names;
        /* the scheduler thread's copy of places, read by grant (no lock needed) */
        loom_exec_place *at;
        int n_at;
        /* the scheduler thread's: every binding seen, newest last (ids are not reused, so a
         * released node keeps its name for the dashboard's past leases) */
        loom_exec_binding *known;
        int n_known;
        char err[200]; /* the last round's error, "" if it went through */
        loom_us warned;
};

static void *exec_main(void *arg)
{
        srv_exec *t = arg;
        loom_exec_job *want = NULL;
        size_t cap = 0;
        loom_node_id(*up)[LOOM_EXEC_MAX_NODES] = calloc(2, sizeof *up);
        loom_exec_event ev[32];
        pthread_mutex_lock(&t->mu);
        while (!t->stop && !t->published) /* a round on nothing would stop every worker */
                pthread_cond_wait(&t->cv, &t->mu);
        while (!t->stop && up) {
                int n = t->n_want, n_up[2] = {t->n_up[0], t->n_up[1]};
                if (loom_reserve(&want, &cap, (size_t)n + 1, sizeof *want, 16) == 0) {
                        if (n > 0) /* t->want is NULL before the first job */
                                memcpy(want, t->want, (size_t)n * sizeof *want);
                        memcpy(up, t->up, sizeof t->up);
                        pthread_mutex_unlock(&t->mu);
                        loom_err e;
                        loom_err_clear(&e);
                        int n_ev = 0;
                        const loom_node_id *const cup[2] = {up[0], up[1]};
                        int rc = loom_exec_apply(t->x, want, n, cup, n_up, ev, 32, &n_ev, &e);
                        pthread_mutex_lock(&t->mu);
                        for (int i = 0; i < n_ev && t->n_ev < EXEC_MAX_EV; i++)
                                t->ev[t->n_ev++] = ev[i];
                        t->n_waiting = loom_exec_waiting(t->x, t->waiting, EXEC_MAX_WAIT);
                        t->n_misplaced = loom_exec_misplaced(t->x, t->misplaced, EXEC_MAX_WAIT);
                        t->n_places = loom_exec_rollout_places(t->x, t->places, EXEC_MAX_WAIT);
                        t->n_names = loom_exec_bindings(t->x, t->names, EXEC_MAX_NAMES);
                        t->n_notes +=
                            loom_exec_node_notes(t->x, t->notes + t->n_notes, 8 - t->n_notes);
                        snprintf(t->err, sizeof t->err, "%.190s", rc ? e.msg : "");
                }
                if (t->stop)
                        break;
                loom_us until = srv_now_mono() + EXEC_TICK_US;
                struct timespec ts = {.tv_sec = until / LOOM_US_PER_S,
                                      .tv_nsec = (long)(until % LOOM_US_PER_S) * 1000};
                pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        }
        pthread_mutex_unlock(&t->mu);
        free(want);
        free(up);
        return NULL;
}

static void exec_free(srv_exec *t)
{
        free(t->want);
        free(t->waiting);
        free(t->misplaced);
        free(t->places);
        free(t->at);
        free(t->names);
        free(t->known);
        free(t);
}

static srv_exec *exec_start(loom_server *s)
{
        srv_exec *t = calloc(1, sizeof *t);
        if (!t)
                return NULL;
        t->x = s->cfg.exec;
        t->waiting = calloc(EXEC_MAX_WAIT, sizeof *t->waiting);
        t->misplaced = calloc(EXEC_MAX_WAIT, sizeof *t->misplaced);
        t->places = calloc(EXEC_MAX_WAIT, sizeof *t->places);
        t->at = calloc(EXEC_MAX_WAIT, sizeof *t->at);
        t->names = calloc(EXEC_MAX_NAMES, sizeof *t->names);
        t->known = calloc(EXEC_KNOWN_MAX, sizeof *t->known);
        if (!t->waiting || !t->misplaced || !t->places || !t->at || !t->names || !t->known) {
                exec_free(t);
                return NULL;
        }
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* srv_now_mono's clock */
        pthread_mutex_init(&t->mu, NULL);
        pthread_cond_init(&t->cv, &ca);
        pthread_condattr_destroy(&ca);
        if (pthread_create(&t->thread, NULL, exec_main, t)) {
                pthread_mutex_destroy(&t->mu);
                pthread_cond_destroy(&t->cv);
                exec_free(t);
                return NULL;
        }
        return t;
}

void srv_exec_stop(loom_server *s)
{
        srv_exec *t = s->exec_rt;
        if (!t)
                return;
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        exec_free(t);
        s->exec_rt = NULL;
}

/* What should run, into t (under its lock). */
static int publish_jobs(loom_server *s, srv_exec *t)
{
        if (loom_reserve(&t->want, &t->cap_want, (size_t)s->n_jobs + 1, sizeof *t->want, 16))
                return LOOM_ENOMEM;
        const loom_cluster_cfg *c = loom_sched_cluster(s->sched);
        loom_group_info *g = malloc(sizeof *g);
        if (!g)
                return LOOM_ENOMEM;
        int n = 0;
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                srv_job *j = s->jobs[i];
                loom_job_info in;
                if (!srv_job_live(j->state) || loom_sched_job_info(s->sched, j->retry.core, &in) ||
                    loom_sched_group_info(s->sched, in.group, g))
                        continue;
                loom_exec_job *w = &t->want[n++];
                memset(w, 0, sizeof *w);
                w->job = j->pub; /* the API's id: the workers use it */
                w->admission = srv_admission_pub(s, j->retry.core);
                snprintf(w->name, sizeof w->name, "%s", j->name);
                srv_auth_worker_creds(s, j->id, w->token, w->sync_key);
                w->n_nodes[0] = in.n_rollout_nodes;
                memcpy(w->nodes[0], in.rollout_nodes, sizeof in.rollout_nodes);
                w->n_nodes[1] = in.n_train_nodes;
                memcpy(w->nodes[1], in.train_nodes, sizeof in.train_nodes);
                /* a member rolls out on its own GPUs, and trains on every training node of its
                 * group (data parallelism scaled to the group's training pool) */
                int r = in.n_rollout_nodes ? j->spec.rollout_gpus / in.n_rollout_nodes : 0;
                w->gpus[0] = r > 0 && r < c->gpus_per_node ? r : c->gpus_per_node;
                w->gpus[1] = c->gpus_per_node;
                /* Where its rollouts run: the rollout it holds or is offered runs where its lease
                 * says (a lone member's on the training nodes); the next one where the group is
                 * now (lone: its rollout nodes are not provisioned). The worker stays put while
                 * its rollout is next or running, so it never leaves with a permit. */
                bool on_train = g->lone;
                w->roll_pinned = j->next == LOOM_PHASE_ROLLOUT;
                if (j->has_lease && j->lease.phase == LOOM_PHASE_ROLLOUT)
                        on_train = j->lease.pool == LOOM_POOL_TRAIN, w->roll_pinned = true;
                else if (j->permit && j->permit_phase == LOOM_PHASE_ROLLOUT)
                        /* not pinned: a worker elsewhere moves to the node the permit names,
                         * which is held for it until it is there */
                        on_train = j->permit_pool == LOOM_POOL_TRAIN, w->roll_pinned = false;
                if (on_train) {
                        w->roll_on_train = true;
                        w->n_nodes[0] = in.n_train_nodes;
                        memcpy(w->nodes[0], in.train_nodes, sizeof in.train_nodes);
                        w->gpus[0] = c->gpus_per_node;
                }
        }
        free(g);
        t->n_want = n;
        return 0;
}

static int add_node(loom_node_id *v, int n, loom_node_id id)
{
        for (int i = 0; i < n; i++)
                if (v[i] == id)
                        return n;
        if (n >= LOOM_EXEC_MAX_NODES)
                return n;
        v[n] = id;
        return n + 1;
}

/* The nodes of every group, by pool, into t (under its lock). */
static void publish_nodes(loom_server *s, srv_exec *t)
{
        t->n_up[0] = t->n_up[1] = 0;
        int n = loom_sched_groups(s->sched, NULL, 0);
        loom_group_id *ids = calloc((size_t)(n > 0 ? n : 1), sizeof *ids);
        loom_group_info *g = malloc(sizeof *g);
        n = ids && g ? loom_sched_groups(s->sched, ids, n) : 0;
        for (int i = 0; i < n; i++) {
                if (loom_sched_group_info(s->sched, ids[i], g))
                        continue;
                /* a lone group's rollout nodes are planned, not provisioned: Slurm holds none */
                for (int k = 0; k < g->n_rollout_nodes && !g->lone; k++)
                        t->n_up[0] = add_node(t->up[0], t->n_up[0], g->rollout_nodes[k]);
                for (int k = 0; k < g->n_train_nodes; k++)
                        t->n_up[1] = add_node(t->up[1], t->n_up[1], g->train_nodes[k]);
        }
        free(ids);
        free(g);
}

static srv_job *admission_job(loom_server *s, const uint32_t id[2])
{
        srv_job *j = srv_job_get(s, srv_job_unpub(s, id[0]));
        return j && srv_job_live(j->state) && srv_admission_pub(s, j->retry.core) == id[1] ? j
                                                                                           : NULL;
}

/* Permits of admissions whose workers wait for their nodes, or whose rollout worker is being
 * moved to the node its permit names: the claim timer starts once they are there (under t's
 * lock). */
static void hold_permits(loom_server *s, srv_exec *t, loom_us now)
{
        loom_us until = now + loom_us_from_s(s->cfg.lease_timeout_s);
        for (int i = 0; i < t->n_waiting + t->n_misplaced; i++) {
                srv_job *j = admission_job(s, i < t->n_waiting ? t->waiting[i]
                                                               : t->misplaced[i - t->n_waiting]);
                if (j && j->permit && j->permit_deadline < until)
                        j->permit_deadline = until;
        }
}

/* Whether j's rollout permit must wait: one of its rollout workers, as the executor last saw
 * them, is being moved or runs elsewhere than the node the permit names for its rank. A worker
 * not seen at all holds nothing (it is starting on the node it was launched for). */
bool srv_exec_rollout_held(loom_server *s, const srv_job *j)
{
        srv_exec *t = s->exec_rt;
        if (!t || !s->cfg.exec || !j->permit || j->permit_phase != LOOM_PHASE_ROLLOUT)
                return false;
        uint32_t pub = j->pub, adm = srv_admission_pub(s, j->retry.core);
        for (int i = 0; i < t->n_at; i++) {
                const loom_exec_place *p = &t->at[i];
                if (p->job != pub || p->admission != adm)
                        continue;
                if (p->moving || p->rank >= j->permit_n_nodes || p->pool != j->permit_pool ||
                    p->node != (int64_t)j->permit_nodes[p->rank])
                        return true;
        }
        return false;
}

/* The last round's bindings into t->known (under t's lock): one seen before is updated in
 * place (a failed node's id moves to another node), a new one appended; when the table is full
 * the first seen goes (one still bound comes back the next round). */
static void learn_names(srv_exec *t)
{
        for (int i = 0; i < t->n_names; i++) {
                const loom_exec_binding *b = &t->names[i];
                int k = 0;
                while (k < t->n_known && (t->known[k].pool != b->pool || t->known[k].id != b->id))
                        k++;
                if (k == EXEC_KNOWN_MAX) {
                        memmove(&t->known[0], &t->known[1], (size_t)(k - 1) * sizeof *t->known);
                        k = --t->n_known;
                }
                if (k == t->n_known)
                        t->n_known++;
                t->known[k] = *b;
        }
}

const char *srv_exec_node_name(loom_server *s, loom_pool pool, loom_node_id id)
{
        srv_exec *t = s->exec_rt;
        for (int k = t ? t->n_known - 1 : -1; k >= 0; k--)
                if (t->known[k].pool == pool && t->known[k].id == id)
                        return t->known[k].node;
        return NULL;
}

void srv_exec_tick(loom_server *s, loom_us now)
{
        if (!s->cfg.exec)
                return;
        if (now < s->exec_next) {
                if (s->exec_next < s->next_check)
                        s->next_check = s->exec_next;
                return;
        }
        s->exec_next = now + EXEC_TICK_US;
        if (s->exec_next < s->next_check)
                s->next_check = s->exec_next;
        if (!s->exec_rt && !(s->exec_rt = exec_start(s))) {
                srv_log(s, "executor: cannot start its thread");
                return;
        }
        srv_exec *t = s->exec_rt;
        loom_exec_event ev[EXEC_MAX_EV];
        char err[200] = "";
        pthread_mutex_lock(&t->mu);
        if (publish_jobs(s, t) == 0) {
                publish_nodes(s, t);
                t->published = true;
        }
        hold_permits(s, t, now);
        memcpy(t->at, t->places, (size_t)t->n_places * sizeof *t->at);
        t->n_at = t->n_places;
        learn_names(t);
        char notes[8][LOOM_EXEC_NOTE_MAX];
        int n_notes = t->n_notes;
        memcpy(notes, t->notes, (size_t)n_notes * sizeof *notes);
        t->n_notes = 0;
        int n_ev = t->n_ev;
        memcpy(ev, t->ev, (size_t)n_ev * sizeof *ev);
        t->n_ev = 0;
        if (t->err[0] && now >= t->warned) {
                snprintf(err, sizeof err, "%s", t->err);
                t->warned = now + 10 * LOOM_US_PER_S;
        }
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        if (err[0])
                srv_log(s, "executor %s: %s", loom_exec_name(s->cfg.exec), err);
        for (int i = 0; i < n_notes; i++)
                srv_log(s, "executor %s: %s", loom_exec_name(s->cfg.exec), notes[i]);
        /* rollout permits held for a worker that has now arrived go out */
        for (uint32_t i = 0; i < s->n_jobs; i++)
                if (srv_job_live(s->jobs[i]->state))
                        srv_engine_grant_waiting(s, s->jobs[i], now);
        for (int i = 0; i < n_ev; i++) {
                srv_job *j = srv_job_get(s, srv_job_unpub(s, ev[i].job));
                if (!j || !srv_job_live(j->state) ||
                    srv_admission_pub(s, j->retry.core) != ev[i].admission)
                        continue;
                char why[200];
                snprintf(why, sizeof why, "%s: %.160s", loom_exec_name(s->cfg.exec), ev[i].why);
                srv_log(s, "job %u (%s): %s", j->id, j->name, why);
                s->m.exec_failures++;
                /* "node": a node failure, re-admitted without spending a restart (retry.c) */
                srv_job_failed(s, j, ev[i].node ? "node" : "failed", why, now);
        }
        if (n_ev)
                srv_apply_actions(s, now);
}
