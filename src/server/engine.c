/*
 * engine.c - loomd's scheduler thread: the only code that touches the loom_sched, the job
 * table and the store while the server runs.
 *
 * Loop: take every queued request, open one transaction, handle them in arrival order (each
 * handler changes the core, the job table and the store together), expire what is due, commit,
 * then resume the connections whose replies are ready. Batching the commit amortises the WAL
 * write over many requests; replying only after the commit is what makes a reply a promise.
 * A write or commit that fails rolls the batch back, answers it 503 and rebuilds memory from
 * the store; writes are then refused until one commits again (degrade.c).
 *
 * Run permits: the core's START_PHASE gives a job a permit for its next phase. A waiting
 * acquire (long-poll) is granted at once; otherwise the permit waits for the worker, at most
 * one lease timeout. A granted permit is a lease: renewed by heartbeat/progress, ended by
 * release, expiry (job failed, pins freed, the group carries on) or cancellation.
 *
 * Iterations are counted here and in the core: loomd submits every job with the iterations it
 * has left (placement reads them: policy.join_wait, run lengths, moves, as in `loom sim`) and
 * ends it itself when the stored count reaches the target. Each training that leaves the job
 * short of it appends an "iter" entry with the count, so that a replay sets the core's count
 * where the live core had it (loom_sched_job_iterations); compaction keeps the last of a run of
 * them. Sync: the API has no sync phase. A train lease covers pushing the weights, so
 * when the core starts a job's SYNC (t_sync > 0) loomd reports it done at once.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/spec.h"
#include "srv.h"

int srv_job_add(loom_server *s, srv_job *j)
{
        if (j->id != s->n_jobs + 1)
                return LOOM_ESTATE;
        if (loom_reserve(&s->jobs, &s->cap_jobs, (size_t)s->n_jobs + 1, sizeof *s->jobs, 64))
                return LOOM_ENOMEM;
        s->jobs[s->n_jobs++] = j;
        if (!j->pub)
                j->pub = srv_job_pub(s, j->id);
        srv_quota_added(s, j);
        return 0;
}

/* The invariants of srv.h's job and lease state machine; checked after every request in
 * debug builds. */
static void assert_job_state(const srv_job *j)
{
#ifndef NDEBUG
        bool live = srv_job_live(j->state);
        assert(!j->has_lease || live);
        assert(!j->permit || (live && !j->has_lease));
        assert(!j->waiters || (live && !j->has_lease));
        assert(j->state != SJ_QUEUED || (j->done == 0 && !j->has_lease));
        assert(j->state != SJ_FINISHED || j->target == 0 || j->done == j->target);
        assert(j->next == LOOM_PHASE_ROLLOUT || j->next == LOOM_PHASE_TRAIN);
        assert(!j->has_lease || j->lease.phase == j->next);
#else
        (void)j;
#endif
}

static void note_deadline(loom_server *s, loom_us t)
{
        if (t < s->next_check)
                s->next_check = t;
}

static void done_req(loom_server *s, srv_req *r)
{
        if (r->finished)
                return;
        r->finished = true;
        r->qnext = s->resume_head;
        s->resume_head = r;
}

/* ---- JSON views ----------------------------------------------------------------------------- */

static json_t *nodes_json(const loom_node_id *n, int count)
{
        json_t *a = json_array();
        for (int i = 0; a && i < count; i++)
                json_array_append_new(a, json_integer(n[i]));
        return a;
}

static json_t *lease_json_phase(loom_server *s, const srv_job *j);

/* The name of a call-by-call lease's call (the spec's calls that are given, in order). */
static const char *call_name(const srv_job *j, int call)
{
        for (int i = 0, k = 0; i < LOOM_N_CALLS; i++)
                if (j->spec.t_calls[i] > 0 && k++ == call)
                        return loom_call_name(i);
        return "train";
}

static json_t *lease_json(loom_server *s, const srv_job *j)
{
        const srv_lease *l = &j->lease;
        json_t *o = lease_json_phase(s, j);
        if (o && l->n_calls > 0) { /* a permit per training call */
                json_object_set_new(o, "call", json_string(call_name(j, l->call)));
                json_object_set_new(o, "call_index", json_integer(l->call));
                json_object_set_new(o, "calls", json_integer(l->n_calls));
        }
        return o;
}

static json_t *lease_json_phase(loom_server *s, const srv_job *j)
{
        const srv_lease *l = &j->lease;
        return json_pack("{s:I,s:I,s:s,s:s,s:o,s:i,s:f,s:I}", "lease",
                         (json_int_t)srv_lease_pub(s, l->id), "job", (json_int_t)j->pub, "phase",
                         loom_phase_name(l->phase), "pool", loom_pool_name(l->pool), "nodes",
                         nodes_json(l->nodes, l->n_nodes), "gpus", l->gpus, "lease_timeout_s",
                         s->cfg.lease_timeout_s, "iteration", (json_int_t)(j->done + 1));
}

json_t *srv_job_json(loom_server *s, const srv_job *j, bool full)
{
        json_t *o = json_pack("{s:I,s:s,s:s,s:I,s:I}", "id", (json_int_t)j->pub, "name", j->name,
                              "state", srv_job_state_name(j->state), "iterations",
                              (json_int_t)j->target, "iterations_done", (json_int_t)j->done);
        if (!o)
                return NULL;
        if (j->tenant[0])
                json_object_set_new(o, "tenant", json_string(j->tenant));
        loom_job_info info;
        if (srv_job_live(j->state) && loom_sched_job_info(s->sched, j->retry.core, &info) == 0) {
                json_object_set_new(o, "group", json_integer(info.group));
                json_object_set_new(o, "rollout_nodes",
                                    nodes_json(info.rollout_nodes, info.n_rollout_nodes));
                json_object_set_new(o, "train_nodes",
                                    nodes_json(info.train_nodes, info.n_train_nodes));
                json_object_set_new(o, "rate", json_integer(info.rate));
        } else {
                static const char *const keys[] = {"group", "rollout_nodes", "train_nodes", "rate"};
                for (int i = 0; i < 4; i++) {
                        json_t *v = json_object_get(j->decision, keys[i]);
                        json_object_set(o, keys[i], v ? v : json_null());
                }
        }
        if (j->has_lease) {
                json_object_set_new(o, "phase", json_string(loom_phase_name(j->lease.phase)));
                json_object_set_new(o, "lease", json_integer(srv_lease_pub(s, j->lease.id)));
        } else {
                json_object_set_new(o, "phase", json_null());
                json_object_set_new(o, "lease", json_null());
        }
        json_object_set_new(o, "next_phase",
                            srv_job_live(j->state) ? json_string(loom_phase_name(j->next))
                                                   : json_null());
        json_object_set_new(o, "permit", json_boolean(j->permit));
        double per_hour, so_far = srv_job_cost(s, j, srv_now_wall(), &per_hour);
        json_object_set_new(o, "cost",
                            json_pack("{s:f,s:f}", "per_hour", per_hour, "so_far", so_far));
        srv_retry_json(s, j, o);
        srv_learn_json(s, j, o);
        if (full) {
                json_object_set_new(o, "spec", loom_job_spec_to_json(&j->spec));
                json_object_set(o, "decision", j->decision);
                json_object_set_new(o, "submitted_us", json_integer(j->submitted_wall));
                json_object_set_new(o, "ended_us",
                                    j->ended_wall ? json_integer(j->ended_wall) : json_null());
        }
        return o;
}

/* ---- waiters -------------------------------------------------------------------------------- */

static void waiter_unlink(loom_server *s, srv_job *j, srv_req *r)
{
        if (r->wprev)
                r->wprev->wnext = r->wnext;
        else
                s->waiters = r->wnext;
        if (r->wnext)
                r->wnext->wprev = r->wprev;
        r->wnext = r->wprev = NULL;
        for (srv_req **p = &j->waiters; *p; p = &(*p)->jnext)
                if (*p == r) {
                        *p = r->jnext;
                        break;
                }
        r->jnext = NULL;
}

static void waiter_add(loom_server *s, srv_job *j, srv_req *r)
{
        r->wprev = NULL;
        r->wnext = s->waiters;
        if (s->waiters)
                s->waiters->wprev = r;
        s->waiters = r;
        r->jnext = j->waiters;
        j->waiters = r;
        note_deadline(s, r->deadline);
}

/* Answer every waiter of j with the same error. */
static void waiters_fail(loom_server *s, srv_job *j, int status, const char *msg)
{
        while (j->waiters) {
                srv_req *r = j->waiters;
                waiter_unlink(s, j, r);
                srv_reply_error(r, status, "state", "%s", msg);
                done_req(s, r);
        }
}

/* ---- permits, leases, job ends -------------------------------------------------------------- */

/* Turn j's permit into a lease and answer its waiters with it. */
void srv_lease_from_permit(loom_server *s, srv_job *j, int64_t id, loom_us now, int64_t wall)
{
        srv_lease *l = &j->lease;
        memset(l, 0, sizeof *l);
        l->id = id;
        l->phase = j->permit_phase;
        l->pool = j->permit_pool;
        l->n_nodes = j->permit_n_nodes;
        memcpy(l->nodes, j->permit_nodes, sizeof l->nodes);
        l->gpus = j->permit_gpus;
        l->call = j->permit_call;
        l->n_calls = j->permit_n_calls;
        l->granted_mono = now;
        l->granted_wall = wall;
        l->deadline = now + loom_us_from_s(s->cfg.lease_timeout_s);
        note_deadline(s, l->deadline);
        j->permit = false;
        j->has_lease = true;
}

static void grant(loom_server *s, srv_job *j, loom_us now)
{
        /* A rollout runs where its lease says: not granted while the executor still has the
         * job's rollout worker on another node (exechook.c grants it when it is there). */
        if (j->permit_phase == LOOM_PHASE_ROLLOUT && srv_exec_rollout_held(s, j))
                return;
        loom_err e;
        srv_lease *l = &j->lease;
        srv_lease_from_permit(s, j, s->next_lease_id++, now, srv_now_wall());
        srv_store_note(s, srv_store_lease_insert(s->store, j->id, l, &e), &e);
        if (j->state == SJ_QUEUED) {
                j->state = SJ_RUNNING;
                srv_store_note(s, srv_store_job_update(s->store, j, &e), &e);
        }
        loom_sched_phase_started(s->sched, l->granted_wall, j->retry.core, l->phase);
        srv_state_granted(s, j);
        s->m.leases_granted++;
        if (l->phase == LOOM_PHASE_ROLLOUT)
                j->roll_grants[j->n_roll_grants++ % SRV_ITER_RING] = l->granted_mono;
        srv_log(s, "lease %lld: job %u (%s) %s on %s node %u, %d GPUs", (long long)l->id, j->id,
                j->name, loom_phase_name(l->phase), loom_pool_name(l->pool),
                l->n_nodes ? l->nodes[0] : 0, l->gpus);
        while (j->waiters) {
                srv_req *r = j->waiters;
                waiter_unlink(s, j, r);
                srv_hist_add(&s->m.permit_latency, loom_us_to_s(now - r->t_arrival));
                srv_reply_json(r, 200, lease_json(s, j));
                done_req(s, r);
        }
}

void srv_engine_grant_waiting(loom_server *s, srv_job *j, loom_us now)
{
        if (j->waiters && j->permit && !j->has_lease)
                grant(s, j, now);
}

/* Take a live job out: the core frees its pins, its lease (if any) ends as lease_state, its
 * waiters are told. */
static void end_job(loom_server *s, srv_job *j, int state, const char *lease_state, const char *why)
{
        loom_err e;
        int64_t wall = srv_now_wall();
        if (j->has_lease) {
                srv_store_note(s, srv_store_lease_end(s->store, j->lease.id, lease_state, wall, &e),
                               &e);
                srv_metrics_lease_end(s, lease_state);
                j->has_lease = false;
        }
        j->permit = false;
        if (srv_job_live(j->state))
                srv_quota_drop(s, j);
        j->state = state;
        j->ended_wall = wall;
        loom_exit x = state == SJ_FINISHED    ? LOOM_EXIT_FINISHED
                      : state == SJ_CANCELLED ? LOOM_EXIT_CANCELLED
                                              : LOOM_EXIT_FAILED;
        /* A bounded job's last training: the core ended it itself in h_release's
         * loom_sched_phase_done (LOOM_ACT_JOB_DONE) and its departure's plan, if any, is still
         * the last call's: exiting again would clear it unlogged. */
        loom_job_info ji;
        if (loom_sched_job_info(s->sched, j->retry.core, &ji) == 0)
                loom_sched_job_exit(s->sched, wall, j->retry.core, x);
        srv_store_note(s, srv_store_job_update(s->store, j, &e), &e);
        srv_store_note(s, srv_store_log(s->store, "exit", j->id, loom_exit_name(x), &e), &e);
        srv_regroup_log(s, j); /* a departure may have regrouped (regroup.c) */
        char msg[96];
        snprintf(msg, sizeof msg, "job %u is %s", j->pub, srv_job_state_name(state));
        waiters_fail(s, j, 409, msg);
        srv_log(s, "job %u (%s) %s: %s, %lld iterations", j->id, j->name, srv_job_state_name(state),
                why, (long long)j->done);
}

static void on_start_phase(loom_server *s, const loom_action *a, loom_us now)
{
        srv_job *j = srv_job_by_core(s, a->job);
        if (!j || !srv_job_live(j->state))
                return;
        if (a->phase == LOOM_PHASE_SYNC) {
                int64_t wall = srv_now_wall();
                loom_sched_phase_started(s->sched, wall, j->retry.core, LOOM_PHASE_SYNC);
                loom_sched_phase_done(s->sched, wall, j->retry.core, LOOM_PHASE_SYNC);
                return;
        }
        j->permit = true;
        j->permit_phase = a->phase;
        j->permit_pool = a->pool;
        j->permit_n_nodes = a->n_nodes;
        memcpy(j->permit_nodes, a->nodes, sizeof j->permit_nodes);
        j->permit_gpus = a->gpus;
        j->permit_call = a->call;
        j->permit_n_calls = a->phase == LOOM_PHASE_TRAIN ? a->n_calls : 0;
        j->permit_since = now;
        j->permit_deadline = now + loom_us_from_s(s->cfg.lease_timeout_s);
        note_deadline(s, j->permit_deadline);
        if (j->waiters)
                grant(s, j, now);
}

void srv_apply_actions(loom_server *s, loom_us now)
{
        loom_action a;
        while (loom_sched_next_action(s->sched, &a)) {
                srv_job *j = srv_job_by_core(s, a.job); /* NULL for a past admission */
                switch (a.type) {
                case LOOM_ACT_START_PHASE:
                        on_start_phase(s, &a, now);
                        break;
                case LOOM_ACT_MIGRATE_TAIL:
                        if (j && j->has_lease && j->lease.phase == LOOM_PHASE_ROLLOUT) {
                                j->lease.keep_gpus = a.keep_gpus > 0 ? a.keep_gpus : 1;
                                s->m.migrations++;
                                srv_log(s, "job %u: migrate rollout tail to %d GPUs", j->id,
                                        j->lease.keep_gpus);
                        }
                        break;
                case LOOM_ACT_RESIZE_PHASE:
                        if (j && j->has_lease && j->lease.phase == a.phase)
                                j->lease.gpus = a.gpus;
                        break;
                case LOOM_ACT_PROVISION_NODE:
                case LOOM_ACT_RELEASE_NODE:
                        srv_log(s, "%s %s node %u",
                                a.type == LOOM_ACT_PROVISION_NODE ? "provision" : "release",
                                loom_pool_name(a.pool), a.node);
                        break;
                case LOOM_ACT_JOB_DONE:
                        /* the core ends a job at the count loomd ends it at (h_release, first);
                         * honour it anyway */
                        if (j && srv_job_live(j->state)) {
                                srv_quota_drop(s, j);
                                j->state = SJ_FINISHED;
                                j->ended_wall = srv_now_wall();
                                waiters_fail(s, j, 409, "job is finished");
                        }
                        break;
                }
        }
}

/* ---- handlers ------------------------------------------------------------------------------- */

/* The decision as loom place prints it, but with at most SRV_MAX_CANDIDATES candidates (the
 * chosen one first): with thousands of groups the full list would dominate every reply and
 * row. "candidates_omitted" says how many were left out. */
#define SRV_MAX_CANDIDATES 16
static json_t *decision_json(const loom_decision *d, const char *name)
{
        json_t *o = loom_decision_to_json(d, name);
        json_t *all = json_object_get(o, "candidates");
        size_t n = json_array_size(all);
        if (n <= SRV_MAX_CANDIDATES)
                return o;
        json_t *keep = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(all, i, c)
        {
                const char *v = json_string_value(json_object_get(c, "verdict"));
                if (v && !strcmp(v, "chosen"))
                        json_array_insert(keep, 0, c);
        }
        json_array_foreach(all, i, c)
        {
                const char *v = json_string_value(json_object_get(c, "verdict"));
                if (json_array_size(keep) >= SRV_MAX_CANDIDATES)
                        break;
                if (!v || strcmp(v, "chosen"))
                        json_array_append(keep, c);
        }
        json_object_set_new(o, "candidates_omitted",
                            json_integer((json_int_t)(n - json_array_size(keep))));
        json_object_set_new(o, "candidates", keep);
        return o;
}

/* A job in full, as the caller may see it (a tenant: its decision's candidates scoped). */
static json_t *job_json_for(loom_server *s, const srv_req *r, const srv_job *j)
{
        json_t *o = srv_job_json(s, j, true);
        json_t *d = json_object_get(o, "decision");
        if (d && r->who.role != LOOM_ROLE_ADMIN)
                json_object_set_new(o, "decision", srv_decision_scoped(s, r, d));
        return o;
}

/* ?dry_run=1: what a submit would decide now (quotas checked first, as for a submit), without
 * a job, an id or a log entry: 200 {"dry_run": true, "decision"} or the submit's 422. */
static void dry_run_reply(loom_server *s, srv_req *r, loom_job_spec *core, loom_decision *d, int rc,
                          loom_err *e)
{
        if (!rc)
                rc = s->cfg.state.host_usage ? 0 : loom_sched_decide(s->sched, core, d, e);
        char over[256];
        if (!rc && srv_state_admit(s, core, d, over, sizeof over)) {
                loom_decision_free(d);
                return srv_reply_json(
                    r, 422, json_pack("{s:s,s:s}", "error", over, "field", "mem_rollout"));
        }
        json_t *dj = decision_json(d, r->name);
        json_t *o =
            rc ? json_pack("{s:s,s:s}", "error", e->msg[0] ? e->msg : d->reason, "field", e->field)
               : json_pack("{s:b}", "dry_run", 1);
        loom_decision_free(d);
        if (!o || !dj) {
                json_decref(o);
                json_decref(dj);
                return srv_reply_error(r, 500, "", "out of memory");
        }
        if (!rc || rc == LOOM_EREJECT)
                json_object_set_new(o, "decision", srv_decision_scoped(s, r, dj));
        json_decref(dj);
        srv_reply_json(r, rc ? (rc == LOOM_ENOMEM ? 500 : 422) : 200, o);
}

static void h_submit(loom_server *s, srv_req *r, loom_us now)
{
        loom_err e;
        loom_err_clear(&e);
        uint32_t existing;
        if (r->key[0] && srv_store_job_by_key(s->store, r->key, &existing, &e) == 0) {
                srv_job *j = srv_job_get(s, existing);
                json_t *o = j ? job_json_for(s, r, j) : NULL;
                srv_auth_creds(s, r, j, o);
                return o ? srv_reply_json(r, 200, o)
                         : srv_reply_error(r, 500, "", "job %u missing", existing);
        }
        /* Quotas before anything else: a refused submit leaves no trace. */
        if (!srv_quota_admit(s, r, &r->spec, r->who.tenant))
                return;
        loom_job_spec core = r->spec; /* with its iterations: placement reads what is left */
        snprintf(core.id, sizeof core.id, "%s", r->name);
        loom_decision d;
        /* Listing every candidate costs O(groups) per decision; only when asked. */
        loom_decision_init(&d, r->explain);
        loom_job_id id = 0;
        int64_t wall = srv_now_wall();
        char over[256];
        /* The measured host tier may refuse what the model places: ask before submitting, so
         * that a refused job leaves no trace (no job row, no core id, no log entry). */
        int rc = s->cfg.state.host_usage ? loom_sched_decide(s->sched, &core, &d, &e) : 0;
        if (r->dry_run)
                return dry_run_reply(s, r, &core, &d, rc, &e);
        if (!rc && srv_state_admit(s, &core, &d, over, sizeof over)) {
                loom_decision_free(&d);
                return srv_reply_json(
                    r, 422, json_pack("{s:s,s:s}", "error", over, "field", "mem_rollout"));
        }
        if (!rc) {
                loom_decision_free(&d);
                loom_decision_init(&d, r->explain);
                rc = loom_sched_submit(s->sched, wall, &core, &d, &id, &e);
        }
        if (rc) {
                json_t *o =
                    json_pack("{s:s,s:s}", "error", e.msg[0] ? e.msg : d.reason, "field", e.field);
                if (o && rc == LOOM_EREJECT) {
                        json_t *dj = decision_json(&d, r->name);
                        json_object_set_new(o, "decision", srv_decision_scoped(s, r, dj));
                        json_decref(dj);
                }
                loom_decision_free(&d);
                return srv_reply_json(r, rc == LOOM_ENOMEM ? 500 : 422, o);
        }
        srv_job *j = calloc(1, sizeof *j);
        if (!j || srv_core_map(s, id, s->n_jobs + 1)) {
                free(j);
                loom_sched_job_exit(s->sched, wall, id, LOOM_EXIT_CANCELLED);
                loom_decision_free(&d);
                return srv_reply_error(r, 500, "", "cannot record job %u", id);
        }
        j->id = s->n_jobs + 1; /* the core's id is this admission's; see retry.c */
        j->pub = srv_job_pub(s, j->id);
        snprintf(j->name, sizeof j->name, "%s", r->name[0] ? r->name : "");
        if (!j->name[0])
                snprintf(j->name, sizeof j->name, "job-%u", j->pub);
        j->state = SJ_QUEUED;
        j->target = r->spec.iterations;
        j->next = LOOM_PHASE_ROLLOUT;
        j->spec = core;
        j->spec.iterations = j->target;
        j->decision = decision_json(&d, j->name);
        j->submitted_wall = wall;
        srv_auth_submitted(s, r, j);
        srv_retry_init(j);
        j->retry.core = id;
        loom_decision_free(&d);
        if (srv_job_add(s, j)) {
                json_decref(j->decision);
                free(j);
                loom_sched_job_exit(s->sched, wall, id, LOOM_EXIT_CANCELLED);
                return srv_reply_error(r, 500, "", "out of memory");
        }
        char core_id[16];
        snprintf(core_id, sizeof core_id, "%u", id); /* the core's id, checked by replay */
        srv_store_note(s, srv_store_job_insert(s->store, j, r->key, &e), &e);
        srv_store_note(s, srv_store_log(s->store, "submit", j->id, core_id, &e), &e);
        srv_store_note(s, srv_store_retry_save(s->store, j, &e), &e);
        if (j->pub != j->id) /* the API's id, for an operator matching replies and log lines */
                srv_log(s, "job %u (%s) is %u in the API", j->id, j->name, j->pub);
        srv_log(s, "job %u (%s) accepted: %s, group %lld", j->id, j->name,
                json_string_value(json_object_get(j->decision, "decision")),
                (long long)json_integer_value(json_object_get(j->decision, "group")));
        srv_apply_actions(s, now);
        json_t *o = job_json_for(s, r, j);
        srv_auth_creds(s, r, j, o); /* worker token and sync key: what the job's processes need */
        srv_reply_json(r, 201, o);
}

static void h_acquire(loom_server *s, srv_req *r, loom_us now)
{
        srv_job *j = srv_job_get(s, r->job);
        if (!j)
                return srv_reply_error(r, 404, "id", "no such job: %u", srv_job_pub(s, r->job));
        if (!srv_job_live(j->state))
                return srv_reply_error(r, 409, "state", "job %u is %s", j->pub,
                                       srv_job_state_name(j->state));
        if (j->has_lease) {
                if (j->lease.phase != r->phase)
                        return srv_reply_error(r, 409, "phase",
                                               "job %u holds %s lease %lld; release it first",
                                               j->pub, loom_phase_name(j->lease.phase),
                                               (long long)srv_lease_pub(s, j->lease.id));
                /* A retried acquire whose reply was lost: the same lease again. */
                j->lease.deadline = now + loom_us_from_s(s->cfg.lease_timeout_s);
                note_deadline(s, j->lease.deadline);
                return srv_reply_json(r, 200, lease_json(s, j));
        }
        if (r->phase != j->next)
                return srv_reply_error(r, 409, "phase", "job %u runs %s next, not %s", j->pub,
                                       loom_phase_name(j->next), loom_phase_name(r->phase));
        r->deadline = now + r->wait;
        if (j->permit && j->permit_phase == r->phase) {
                waiter_add(s, j, r);
                grant(s, j, now);
                return;
        }
        if (r->wait <= 0) {
                srv_reply_text(r, 204, NULL, "application/json");
                return;
        }
        waiter_add(s, j, r);
}

/* Find the live lease a lease call names, or reply why there is none. */
static srv_job *lease_job(loom_server *s, srv_req *r)
{
        loom_err e;
        loom_err_clear(&e);
        int rc = r->lease_read ? 0
                               : srv_store_lease_get(s->store, r->lease, &r->lease_job,
                                                     &r->lease_phase, r->lease_state, &e);
        uint32_t job = r->lease_job;
        const char *state = r->lease_state;
        if (rc == LOOM_ENOENT)
                return srv_reply_error(r, 404, "lease", "no such lease: %lld",
                                       (long long)srv_lease_pub(s, r->lease)),
                       NULL;
        if (rc)
                return srv_reply_loom_err(r, 500, &e), NULL;
        srv_job *j = srv_job_get(s, job);
        r->job = job; /* for the state check after the request */
        if (j && j->has_lease && j->lease.id == r->lease)
                return j;
        if (r->kind == RQ_RELEASE && j &&
            ((r->ok && !strcmp(state, "released")) || (!r->ok && !strcmp(state, "failed")))) {
                /* A retried release whose reply was lost: same answer, nothing changes. */
                json_t *o = srv_job_json(s, j, false);
                json_object_set_new(o, "released", json_integer(srv_lease_pub(s, r->lease)));
                srv_reply_json(r, 200, o);
                return NULL;
        }
        const char *why = !strcmp(state, "lost")      ? "was lost when loomd restarted"
                          : !strcmp(state, "expired") ? "expired (the job was restarted or failed)"
                          : !strcmp(state, "failed")  ? "failed (the job was restarted or failed)"
                          : !strcmp(state, "revoked") ? "was revoked: the job was cancelled"
                          : !strcmp(state, "active")  ? "was lost when loomd restarted"
                                                      : "has ended";
        json_t *o = json_pack("{s:s,s:s,s:s}", "error", "", "field", "lease", "state", state);
        char msg[160];
        snprintf(msg, sizeof msg, "lease %lld %s; acquire the phase again",
                 (long long)srv_lease_pub(s, r->lease), why);
        json_object_set_new(o, "error", json_string(msg));
        srv_reply_json(r, 410, o);
        return NULL;
}

static void renew(loom_server *s, srv_job *j, loom_us now)
{
        j->lease.deadline = now + loom_us_from_s(s->cfg.lease_timeout_s);
}

static void h_heartbeat(loom_server *s, srv_req *r, loom_us now)
{
        srv_job *j = lease_job(s, r);
        if (!j)
                return;
        renew(s, j, now);
        srv_reply_json(r, 200,
                       json_pack("{s:I,s:f}", "lease", (json_int_t)srv_lease_pub(s, j->lease.id),
                                 "expires_in_s", s->cfg.lease_timeout_s));
}

static void h_progress(loom_server *s, srv_req *r, loom_us now)
{
        srv_job *j = lease_job(s, r);
        if (!j)
                return;
        renew(s, j, now);
        if (j->lease.phase == LOOM_PHASE_ROLLOUT && !j->lease.keep_gpus) {
                /* the rollout's head, grant -> the report that crosses the threshold, measured
                 * as its length is (docs/scheduling.md, "Planning the tails"); the core learns
                 * it with the rollout's release */
                const loom_policy_cfg *p = loom_sched_policy(s->sched);
                if (!j->lease.head && r->total > 0 &&
                    (double)r->done >= p->tail_threshold * (double)r->total)
                        j->lease.head =
                            now > j->lease.granted_mono ? now - j->lease.granted_mono : 1;
                loom_sched_progress(s->sched, srv_now_wall(), j->retry.core, LOOM_PHASE_ROLLOUT,
                                    r->done, r->total);
                srv_apply_actions(s, now);
        }
        /* The advice stands once given, so a retried progress call gets it again. */
        if (j->has_lease && j->lease.keep_gpus)
                srv_reply_json(r, 200,
                               json_pack("{s:s,s:i}", "action", "migrate_tail", "keep_gpus",
                                         j->lease.keep_gpus));
        else
                srv_reply_json(r, 200, json_pack("{s:s}", "action", "none"));
}

static void h_release(loom_server *s, srv_req *r, loom_us now)
{
        loom_err e;
        srv_job *j = lease_job(s, r);
        if (!j)
                return;
        srv_lease l = j->lease;
        bool counted = false;
        srv_hist_add(&s->m.phase_duration[l.phase == LOOM_PHASE_TRAIN],
                     loom_us_to_s(now - l.granted_mono));
        if (!r->ok) {
                srv_job_failed(s, j, "failed", "a phase was released as failed", now);
        } else {
                int64_t wall = srv_now_wall();
                srv_store_note(s, srv_store_lease_end(s->store, l.id, "released", wall, &e), &e);
                srv_metrics_lease_end(s, "released");
                j->has_lease = false;
                if (l.phase == LOOM_PHASE_ROLLOUT || l.call + 1 < l.n_calls) {
                        j->next = LOOM_PHASE_TRAIN; /* or the next call of the phase */
                        j->next_call = l.phase == LOOM_PHASE_TRAIN ? l.call + 1 : 0;
                } else {
                        j->done++;
                        j->next = LOOM_PHASE_ROLLOUT;
                        j->next_call = 0;
                        counted = true;
                }
                loom_sched_phase_done(s->sched, wall, j->retry.core, l.phase);
                if (j->target && j->done >= j->target) {
                        end_job(s, j, SJ_FINISHED, "released", "reached its iterations");
                } else {
                        srv_store_note(s, srv_store_job_update(s->store, j, &e), &e);
                        if (counted && j->target) { /* what the core counted, for a replay */
                                char n[24];
                                snprintf(n, sizeof n, "%lld", (long long)j->done);
                                srv_store_note(s, srv_store_log(s->store, "iter", j->id, n, &e),
                                               &e);
                        }
                }
                /* drift watches whole phases: a training phase run call by call is observed
                 * once, as the sum of its calls */
                loom_us took = now - l.granted_mono;
                if (l.phase == LOOM_PHASE_TRAIN && l.n_calls > 0) {
                        j->calls_took = l.call ? j->calls_took + took : took;
                        took = j->calls_took;
                }
                if (l.phase == LOOM_PHASE_ROLLOUT || l.call + 1 >= l.n_calls)
                        srv_observe_phase(s, j, l.phase, l.pool, l.gpus, took, l.head);
        }
        srv_apply_actions(s, now);
        json_t *o = srv_job_json(s, j, false);
        json_object_set_new(o, "released", json_integer(srv_lease_pub(s, l.id)));
        srv_reply_json(r, 200, o);
}

static void h_cancel(loom_server *s, srv_req *r, loom_us now)
{
        srv_job *j = srv_job_get(s, r->job);
        if (!j)
                return srv_reply_error(r, 404, "id", "no such job: %u", srv_job_pub(s, r->job));
        if (j->state == SJ_FINISHED || j->state == SJ_FAILED)
                return srv_reply_error(r, 409, "state", "job %u is already %s", j->pub,
                                       srv_job_state_name(j->state));
        if (j->state != SJ_CANCELLED) {
                end_job(s, j, SJ_CANCELLED, "revoked", "cancelled");
                srv_apply_actions(s, now);
        }
        srv_reply_json(r, 200, srv_job_json(s, j, false));
}

/* One page: the caller's jobs after r->after in loomd's order (submit order), at most
 * r->limit, and "next" (the id to pass as ?after= for the next page; null on the last). The
 * cost is the page's, not the table's, apart from a scan past other tenants' jobs. */
static void h_list_jobs(loom_server *s, srv_req *r)
{
        json_t *a = json_array();
        uint32_t from = r->after ? srv_job_unpub(s, r->after) : 0, last = 0;
        bool more = false;
        for (uint32_t i = from; a && i < s->n_jobs; i++) {
                const srv_job *j = s->jobs[i];
                if (!srv_auth_sees(r, j) || (r->list_state == -2 && !srv_job_live(j->state)) ||
                    (r->list_state >= 0 && j->state != r->list_state))
                        continue;
                if ((int)json_array_size(a) == (r->limit > 0 ? r->limit : 100)) {
                        more = true;
                        break;
                }
                json_array_append_new(a, srv_job_json(s, j, false));
                last = j->pub;
        }
        srv_reply_json(
            r, 200,
            json_pack("{s:o,s:o}", "jobs", a, "next", more ? json_integer(last) : json_null()));
}

static int cmp_group(const void *a, const void *b)
{
        loom_group_id x = *(const loom_group_id *)a, y = *(const loom_group_id *)b;
        return (x > y) - (x < y);
}

/* The executor's names of nodes (as the dashboard's node_names, srv_exec_node_name), one per id
 * in the same order: null where loomd runs no executor or it has not bound that id yet. */
static json_t *node_names_json(loom_server *s, loom_pool pool, const loom_node_id *n, int count)
{
        json_t *a = json_array();
        for (int i = 0; a && i < count; i++) {
                const char *name = srv_exec_node_name(s, pool, n[i]);
                json_array_append_new(a, name ? json_string(name) : json_null());
        }
        return a;
}

/* One page of groups in id order, after r->after, at most r->limit, and "next" as for jobs. */
static void h_groups(loom_server *s, srv_req *r)
{
        int n = loom_sched_groups(s->sched, NULL, 0);
        loom_group_id *ids = calloc((size_t)(n > 0 ? n : 1), sizeof *ids);
        json_t *a = json_array();
        if (!ids || !a) {
                free(ids);
                json_decref(a);
                return srv_reply_error(r, 500, "", "out of memory");
        }
        n = loom_sched_groups(s->sched, ids, n);
        qsort(ids, (size_t)n, sizeof *ids, cmp_group);
        int limit = r->limit > 0 ? r->limit : 100, from = 0;
        while (from < n && ids[from] < r->after) /* r->after: the id given + 1 */
                from++;
        bool more = n - from > limit;
        loom_group_info *g = malloc(sizeof *g);
        for (int i = from; g && i < n && i < from + limit; i++) {
                if (loom_sched_group_info(s->sched, ids[i], g))
                        continue;
                json_t *m = json_array(), *rates = json_array();
                for (int k = 0; k < g->n_members; k++) {
                        srv_job *mj = srv_job_by_core(s, g->members[k]);
                        json_array_append_new(m, json_integer(mj ? mj->pub : 0));
                        json_array_append_new(rates, json_integer(g->rates[k]));
                }
                json_array_append_new(
                    a,
                    json_pack(
                        "{s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:f,s:f,s:f,s:b,s:f}", "id", (int)g->id,
                        "rates", rates, "members", m, "rollout_nodes",
                        nodes_json(g->rollout_nodes, g->n_rollout_nodes), "train_nodes",
                        nodes_json(g->train_nodes, g->n_train_nodes), "rollout_node_names",
                        node_names_json(s, LOOM_POOL_ROLLOUT, g->rollout_nodes, g->n_rollout_nodes),
                        "train_node_names",
                        node_names_json(s, LOOM_POOL_TRAIN, g->train_nodes, g->n_train_nodes),
                        "t_cycle_s", loom_us_to_s(g->t_cycle), "t_load_s", loom_us_to_s(g->t_load),
                        "t_meta_s", loom_us_to_s(g->t_meta), "saturated", g->saturated,
                        "cost_per_hour", g->cost_per_hour));
        }
        free(g);
        json_t *next = more ? json_integer(ids[from + limit - 1]) : json_null();
        free(ids);
        srv_reply_json(r, 200, json_pack("{s:o,s:o}", "groups", a, "next", next));
}

/* What a tenant sees of the cluster's state: its own live jobs, the groups they are in, those
 * groups' nodes and cost, and its jobs' re-plans; nothing that counts other tenants' jobs. */
static void tenant_stats(loom_server *s, const srv_req *r, loom_sched_stats *st)
{
        uint64_t replans = 0;
        int jobs = 0, ng = 0;
        loom_group_id *gs = calloc((size_t)s->n_jobs + 1, sizeof *gs);
        loom_group_info *g = malloc(sizeof *g);
        memset(st->nodes, 0, sizeof st->nodes);
        st->cost_per_hour = 0;
        for (uint32_t i = 0; gs && g && i < s->n_jobs; i++) {
                const srv_job *j = s->jobs[i];
                if (!srv_auth_sees(r, j))
                        continue;
                replans += j->replans;
                loom_job_info in;
                if (!srv_job_live(j->state) ||
                    loom_sched_job_info(s->sched, j->retry.core, &in) != 0)
                        continue;
                jobs++;
                bool seen = false;
                for (int k = 0; k < ng && !seen; k++)
                        seen = gs[k] == in.group;
                if (seen || loom_sched_group_info(s->sched, in.group, g))
                        continue;
                gs[ng++] = in.group;
                st->nodes[LOOM_POOL_ROLLOUT] += g->n_rollout_nodes;
                st->nodes[LOOM_POOL_TRAIN] += g->n_train_nodes;
                st->cost_per_hour += g->cost_per_hour;
        }
        free(gs);
        free(g);
        st->jobs = jobs;
        st->groups = ng;
        st->replans = replans;
}

/* What the jobs the caller sees cost, by tenant: US$/h of the live ones, US$ of all so far. */
static json_t *tenant_costs(loom_server *s, const srv_req *r)
{
        json_t *by = json_object();
        int64_t wall = srv_now_wall();
        for (uint32_t i = 0; by && i < s->n_jobs; i++) {
                const srv_job *j = s->jobs[i];
                if (!srv_auth_sees(r, j))
                        continue;
                json_t *t = json_object_get(by, j->tenant);
                if (!t) {
                        t = json_pack("{s:s,s:f,s:f,s:i}", "tenant", j->tenant, "per_hour", 0.0,
                                      "so_far", 0.0, "jobs", 0);
                        if (!t || json_object_set_new(by, j->tenant, t))
                                continue;
                }
                double ph, so_far = srv_job_cost(s, j, wall, &ph);
                json_t *v = json_object_get(t, "so_far");
                json_real_set(v, json_real_value(v) + so_far);
                if (srv_job_live(j->state)) {
                        v = json_object_get(t, "per_hour");
                        json_real_set(v, json_real_value(v) + ph);
                }
                v = json_object_get(t, "jobs");
                json_integer_set(v, json_integer_value(v) + 1);
        }
        json_t *a = json_array(), *t;
        const char *k;
        json_object_foreach(by, k, t) json_array_append(a, t);
        json_decref(by);
        return a;
}

static void h_cluster(loom_server *s, srv_req *r)
{
        loom_sched_stats st;
        loom_sched_stats_get(s->sched, &st);
        bool admin = r->who.role == LOOM_ROLE_ADMIN;
        if (!admin)
                tenant_stats(s, r, &st);
        const loom_cluster_cfg *c = loom_sched_cluster(s->sched);
        double pr = loom_cluster_node_price(c, LOOM_POOL_ROLLOUT);
        double pt = loom_cluster_node_price(c, LOOM_POOL_TRAIN);
        const loom_policy_cfg *p = loom_sched_policy(s->sched);
        json_t *o = json_pack(
            "{s:o,s:{s:s,s:i,s:s,s:s,s:b,s:b,s:b,s:b,s:b,s:i},s:{s:i,s:i},s:{s:f,s:f},s:f,s:i,"
            "s:i,s:I}",
            "cluster", loom_cluster_cfg_to_json(c), "policy", "admission",
            loom_admission_name(p->admission), "learn_after", p->learn_after, "learn_bound",
            loom_learn_bound_name(p->learn_bound), "dispatch", loom_dispatch_name(p->dispatch),
            "multirate", p->multirate, "colocate_lone", p->colocate_lone, "move_lone", p->move_lone,
            "move_members", p->move_members, "plan_tails", p->plan_tails, "rate_search_open",
            loom_policy_rate_search_open(p), "nodes", "rollout", st.nodes[LOOM_POOL_ROLLOUT],
            "train", st.nodes[LOOM_POOL_TRAIN], "cost_per_hour_by_pool", "rollout",
            pr * st.nodes[LOOM_POOL_ROLLOUT], "train", pt * st.nodes[LOOM_POOL_TRAIN],
            "cost_per_hour", st.cost_per_hour, "jobs", st.jobs, "groups", st.groups, "replans",
            (json_int_t)st.replans);
        if (o) {
                /* policy.regroup: its plans are in the log (regroup.c) */
                json_object_set_new(json_object_get(o, "policy"), "regroup",
                                    json_boolean(p->regroup));
                /* policy.pool_grow: joins may grow a group's training pool */
                json_object_set_new(json_object_get(o, "policy"), "pool_grow",
                                    json_boolean(p->pool_grow));
                /* policy.slo_cap: the premium an SLO may cost over colocation, or null */
                json_object_set_new(json_object_get(o, "policy"), "slo_premium",
                                    p->slo_cap ? json_real(p->slo_premium) : json_null());
                /* "scope": whose jobs the counts above are ("cluster", or the tenant's) */
                json_object_set_new(o, "scope", json_string(admin ? "cluster" : "tenant"));
                json_object_set_new(o, "quotas", srv_quota_json(s, r));
                json_object_set_new(o, "cost_by_tenant", tenant_costs(s, r));
                /* replicated (docs/ha.md): this replica answers only while it leads */
                json_object_set_new(o, "replication",
                                    s->cfg.replica_url
                                        ? json_pack("{s:s,s:s,s:s}", "store", "etcd", "role",
                                                    "leader", "leader", s->cfg.replica_url)
                                        : json_pack("{s:s}", "store", "sqlite"));
        }
        srv_reply_json(r, o ? 200 : 500, o);
}

/* A lease call: loomd's lease id in r->lease from here on, its row read (for srv_auth_scope
 * and lease_job), or a 404 naming the id as the caller gave it when there is no such lease or
 * its job is not the caller's. */
static void lease_named(loom_server *s, srv_req *r)
{
        int64_t shown = r->lease;
        r->lease = srv_lease_unpub(s, shown);
        loom_err e;
        int rc = srv_store_lease_get(s->store, r->lease, &r->lease_job, &r->lease_phase,
                                     r->lease_state, &e);
        if (rc && rc != LOOM_ENOENT)
                return; /* the handler reads it again and answers the error */
        const srv_job *j = rc ? NULL : srv_job_get(s, r->lease_job);
        if (j && srv_auth_sees(r, j)) {
                r->lease_read = true;
                return;
        }
        srv_reply_error(r, 404, "lease", "no such lease: %lld", (long long)shown);
        r->kind = RQ_BAD;
}

/* A request naming a job by the id the API shows: loomd's id in r->job from here on, or a 404
 * when there is no such job or it is not the caller's (the very reply an unknown id gets). */
static void job_named(loom_server *s, srv_req *r)
{
        if (r->kind == RQ_PROGRESS || r->kind == RQ_RELEASE || r->kind == RQ_HEARTBEAT)
                return lease_named(s, r);
        if (r->kind != RQ_GET_JOB && r->kind != RQ_CANCEL && r->kind != RQ_ACQUIRE &&
            r->kind != RQ_ATTACH)
                return;
        uint32_t shown = r->job;
        r->job = srv_job_unpub(s, shown);
        const srv_job *j = srv_job_get(s, r->job);
        if (j && srv_auth_sees(r, j))
                return;
        srv_reply_error(r, 404, "id", "no such job: %u", shown);
        r->kind = RQ_BAD;
        r->job = 0;
}

/* A refused submit, for the dashboard's events (memory only: it changed nothing). */
static void note_reject(loom_server *s, const srv_req *r)
{
        if (r->kind != RQ_SUBMIT || r->dry_run || !r->ready || r->status < 400)
                return;
        srv_reject *x = &s->rejects[s->n_rejects++ % SRV_REJECTS_MAX];
        memset(x, 0, sizeof *x);
        x->at_wall = srv_now_wall();
        x->status = r->status;
        snprintf(x->tenant, sizeof x->tenant, "%s", r->who.tenant);
        snprintf(x->name, sizeof x->name, "%s", r->name);
        json_t *b = r->body ? json_loads(r->body, 0, NULL) : NULL;
        const char *field = json_string_value(json_object_get(b, "field"));
        const char *error = json_string_value(json_object_get(b, "error"));
        snprintf(x->field, sizeof x->field, "%s", field ? field : "");
        snprintf(x->error, sizeof x->error, "%s", error ? error : "");
        json_decref(b);
}

static void handle(loom_server *s, srv_req *r, loom_us now)
{
        s->m.requests++;
        job_named(s, r);      /* the shown id -> loomd's; not the caller's job: 404 */
        srv_auth_scope(s, r); /* not the caller's job or lease: answered 404, kind RQ_BAD */
        if (srv_degraded_refuse(s, r)) { /* a write while the store refuses them: 503 */
                done_req(s, r);
                return;
        }
        switch (r->kind) {
        case RQ_SUBMIT:
                h_submit(s, r, now);
                break;
        case RQ_ACQUIRE:
                h_acquire(s, r, now);
                break;
        case RQ_PROGRESS:
                h_progress(s, r, now);
                break;
        case RQ_RELEASE:
                h_release(s, r, now);
                break;
        case RQ_HEARTBEAT:
                h_heartbeat(s, r, now);
                break;
        case RQ_CANCEL:
                h_cancel(s, r, now);
                break;
        case RQ_GET_JOB: {
                srv_job *j = srv_job_get(s, r->job);
                json_t *o = j ? job_json_for(s, r, j) : NULL;
                srv_auth_creds(s, r, j, o);
                if (j)
                        srv_reply_json(r, 200, o);
                else
                        srv_reply_error(r, 404, "id", "no such job: %u", srv_job_pub(s, r->job));
                break;
        }
        case RQ_LIST_JOBS:
                h_list_jobs(s, r);
                break;
        case RQ_GROUPS:
                h_groups(s, r);
                break;
        case RQ_CLUSTER:
                h_cluster(s, r);
                break;
        case RQ_METRICS: {
                char *text = srv_metrics_render(s);
                if (text)
                        srv_reply_text(r, 200, text, "text/plain; version=0.0.4");
                else
                        srv_reply_error(r, 500, "", "out of memory");
                break;
        }
        case RQ_ATTACH:
                srv_h_attach(s, r, now);
                break;
        case RQ_TIMELINE:
                srv_h_timeline(s, r, now);
                break;
        case RQ_HEALTH:
                srv_reply_json(r, 200, srv_health_json(s, now));
                break;
        case RQ_BAD:
                if (!r->ready)
                        srv_reply_error(r, 400, "", "bad request");
                break;
        }
        note_reject(s, r);
        /* A waiting acquire is answered later; everything else now. */
        if (r->ready)
                done_req(s, r);
        srv_job *j = srv_job_get(s, r->job);
        if (j)
                assert_job_state(j);
}

/* Expire leases, unclaimed permits and long-poll waits that are due; recompute next_check. */
static void expire_due(loom_server *s, loom_us now)
{
        loom_us next = now + 3600 * LOOM_US_PER_S;
        for (srv_req *r = s->waiters, *nx; r; r = nx) {
                nx = r->wnext;
                if (r->deadline <= now) {
                        waiter_unlink(s, srv_job_get(s, r->job), r);
                        srv_reply_text(r, 204, NULL, "application/json");
                        done_req(s, r);
                } else if (r->deadline < next) {
                        next = r->deadline;
                }
        }
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                srv_job *j = s->jobs[i];
                if (!srv_job_live(j->state))
                        continue;
                if (j->has_lease && j->lease.deadline <= now) {
                        srv_job_failed(s, j, "expired", "lease expired", now);
                } else if (j->permit && j->permit_deadline <= now) {
                        s->m.permits_expired++;
                        srv_job_failed(s, j, "expired", "permit not claimed in time", now);
                } else if (j->has_lease && j->lease.deadline < next) {
                        next = j->lease.deadline;
                } else if (j->permit && j->permit_deadline < next) {
                        next = j->permit_deadline;
                }
        }
        s->next_check = next;
        srv_apply_actions(s, now); /* exits free resources: permits may follow */
}

static void shutdown_waiters(loom_server *s)
{
        while (s->waiters) {
                srv_req *r = s->waiters;
                waiter_unlink(s, srv_job_get(s, r->job), r);
                srv_reply_error(r, 503, "", "loomd is shutting down");
                done_req(s, r);
        }
}

/* Every waiting acquire hangs on a job of the memory about to be rebuilt: answer it now. */
static void store_down_waiters(loom_server *s)
{
        while (s->waiters) {
                srv_req *r = s->waiters;
                waiter_unlink(s, srv_job_get(s, r->job), r);
                srv_reply_store_down(s, r);
                done_req(s, r);
        }
}

/* The batch was rolled back. If it had written, memory moved with it: nothing of the batch is
 * acknowledged and memory goes back to the store's last commit (degrade.c). */
static void store_failure(loom_server *s, bool rebuild)
{
        s->m.store_errors++;
        if (!s->degraded) {
                s->degraded_since_wall = srv_now_wall();
                srv_log(s, "store refuses writes, refusing them too: %s", s->store_error);
        }
        s->degraded = true;
        if (!rebuild)
                return;
        store_down_waiters(s);
        for (srv_req *r = s->resume_head; r; r = r->qnext)
                srv_reply_store_down(s, r);
        loom_err e;
        loom_err_clear(&e);
        if (srv_rebuild(s, &e)) {
                s->store_failed = true;
                srv_log(s, "store failure, stopping: %s; then %s", s->store_error, e.msg);
                pthread_mutex_lock(&s->mu);
                s->stopping = true;
                pthread_mutex_unlock(&s->mu);
                return;
        }
}

/* Commit the batch, then send its replies. On a store failure nothing is acknowledged. */
static void finish_batch(loom_server *s)
{
        loom_err e;
        loom_err_clear(&e);
        bool probed = false;
        if (s->degraded && !s->batch_failed)
                probed = srv_degraded_probe(s, &e) == 0;
        if (!s->batch_failed && (!s->degraded || probed)) {
                int rc = srv_store_commit(s->store, &e);
                if (rc) {
                        s->batch_failed = true;
                        snprintf(s->store_error, sizeof s->store_error, "%s", e.msg);
                } else {
                        s->m.commits++;
                }
        } else if (s->degraded && !s->batch_failed) {
                s->batch_failed = true; /* the probe failed */
                snprintf(s->store_error, sizeof s->store_error, "%s", e.msg);
        }
        if (s->batch_failed) {
                srv_store_rollback(s->store);
                /* A batch that wrote nothing (only the probe, or no transaction) left memory
                 * as the store has it: its replies stand. */
                if (s->batch_wrote || !s->degraded)
                        store_failure(s, s->batch_wrote);
        } else if (s->degraded) {
                srv_degraded_end(s);
        }
        if (s->degraded) { /* probe again within a second, requests or not */
                loom_us t = srv_now_mono() + LOOM_US_PER_S;
                s->next_check = s->next_check < t ? s->next_check : t;
        }
        s->batch_wrote = s->batch_failed = false;
        if (s->store_failed)
                shutdown_waiters(s);
        while (s->resume_head) {
                srv_req *r = s->resume_head;
                s->resume_head = r->qnext;
                srv_metrics_reply(s, r->status);
                srv_http_resume(r); /* r belongs to the HTTP thread again */
        }
}

static void wait_for_work(loom_server *s)
{
        while (!s->q_head && !s->stopping) {
                loom_us now = srv_now_mono();
                if (now >= s->next_check)
                        return;
                loom_us until = s->next_check;
                struct timespec ts = {.tv_sec = until / LOOM_US_PER_S,
                                      .tv_nsec = (long)(until % LOOM_US_PER_S) * 1000};
                pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
}

void *srv_engine_main(void *arg)
{
        loom_server *s = arg;
        if (s->cfg.exec) /* reconcile with the cluster at once (exechook.c) */
                s->next_check = srv_now_mono();
        for (;;) {
                pthread_mutex_lock(&s->mu);
                wait_for_work(s);
                srv_req *batch = s->q_head;
                s->q_head = s->q_tail = NULL;
                bool stop = s->stopping;
                pthread_mutex_unlock(&s->mu);

                loom_us now = srv_now_mono();
                loom_err e;
                loom_err_clear(&e);
                bool began = srv_store_begin(s->store, &e) == 0;
                if (!began) { /* no transaction: nothing may be handled, nothing has changed */
                        s->batch_failed = true;
                        snprintf(s->store_error, sizeof s->store_error, "%s", e.msg);
                }
                for (srv_req *r = batch, *nx; r; r = nx) {
                        nx = r->qnext;
                        if (began) {
                                handle(s, r, now);
                        } else {
                                s->m.requests++;
                                srv_reply_store_down(s, r);
                                done_req(s, r);
                        }
                }
                /* expiries and the executor's reports are writes: held while degraded */
                if (now >= s->next_check && began && !s->degraded)
                        expire_due(s, now);
                if (began && !s->degraded)
                        srv_exec_tick(s, now);
                if (stop)
                        shutdown_waiters(s);
                finish_batch(s);
                if (stop || s->store_failed)
                        break;
                srv_compact_maybe(s); /* between batches: compact.c */
        }
        srv_exec_stop(s);
        return NULL;
}

/* For retry.c */
void srv_end_job(loom_server *s, srv_job *j, int state, const char *lease_state, const char *why)
{
        end_job(s, j, state, lease_state, why);
}

void srv_fail_waiters(loom_server *s, srv_job *j, int status, const char *msg)
{
        waiters_fail(s, j, status, msg);
}
