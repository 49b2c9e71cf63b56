/*
 * retry.c - what loomd does when a job fails or drifts: the job is admitted again, through the
 * same placement as a new job, and carries on from its last completed iteration.
 *
 * A job keeps its loomd id (the API's) for its whole life, but each admission is a separate
 * job of the core: a re-admission exits the current core job (its pins are freed, the rest of
 * its group keeps its round-robin) and submits the job again; `retry.core` follows. Three
 * causes:
 *
 *   restart  a lease or an unclaimed permit expired, a phase was released "failed", or a new
 *            worker process attached and took the job over from a dead one. While
 *            restarts < max_restarts the job is re-admitted on the profile it was running
 *            with; after that it fails. The iteration in flight is lost and redone: the next
 *            phase is the rollout of iteration done + 1, and `done` only moves on a released
 *            train, so no iteration is counted twice.
 *   node     the executor saw a worker end because its node failed or was taken out of service
 *            (srv_job_failed with lease_state "node"; the lease, if any, ends "failed"). The
 *            job is re-admitted as for a restart, but no restart is spent: the node, not the
 *            job, failed (the executor binds the node's loom id to another node). Counted in
 *            resubmits, and in the readmit entry's cause.
 *   drift    after each released train, the p95 of each phase's last drift_window lease
 *            lengths (grant -> release) is compared with the phase time the core plans the
 *            job on (training scaled to the group's training pool). Above drift_threshold,
 *            the job is re-admitted with that phase's planned time raised to the observed p95
 *            (scaled back to the job's own training GPUs): WEAVE's "stop and resubmit the
 *            job", done by loomd.
 *   learned  admission p99/p95 only (learn.c): the core, fed this train phase, found that the
 *            job's group no longer meets the job's SLO budget measured on its mean observed
 *            solo iteration (loom_sched_observe returned 2). The job is re-admitted on its
 *            learned profile, held to that budget (t_solo_ref).
 *   moved    admission p99/p95 and policy.move_lone: the job runs alone on its training nodes
 *            and another group would take it for less than LOOM_MOVE_GAIN of what its group
 *            costs (loom_sched_observe returned 3): re-admitted the same way, and placement
 *            puts it in that group.
 *
 * Order after a train release: the core observes the phase first (and may re-plan the group);
 * a "learned" re-admission, if the core asks for one, replaces the drift check; otherwise drift
 * compares the recent phase times with what the core plans the job on now (its learned profile
 * once it has one, else the admission's profile). Every re-admission is a new core job whose
 * learned history starts empty: a restart keeps the admission's profile (and t_solo_ref), a
 * drift re-admission is a new declaration measured against itself.
 *
 * Every re-admission is one "readmit" entry in the store's log carrying the new core id, the
 * profile and the placement, so a restart of loomd replays it and checks the placement like a
 * submit (server.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/spec.h"
#include "srv.h"

int srv_core_map(loom_server *s, uint32_t core, uint32_t job)
{
        if (core == 0)
                return LOOM_EINVAL;
        if (core > s->n_core) {
                if (loom_reserve(&s->by_core, &s->cap_core, core, sizeof *s->by_core, 64))
                        return LOOM_ENOMEM;
                memset(s->by_core + s->n_core, 0, (core - s->n_core) * sizeof *s->by_core);
                s->n_core = core;
        }
        s->by_core[core - 1] = job;
        return 0;
}

void srv_retry_init(srv_job *j)
{
        memset(&j->retry, 0, sizeof j->retry);
        j->retry.core = j->id;
        j->retry.plan_roll = j->spec.t_roll;
        j->retry.plan_train = j->spec.t_train;
}

/* ---- observed phase times -------------------------------------------------------------------- */

/* p95 by linear interpolation between the closest ranks of the last w samples. */
static loom_us p95_last(const srv_retry *r, int phase, int w)
{
        double v[SRV_DRIFT_MAX];
        int n = r->n_obs[phase];
        for (int i = 0; i < w; i++)
                v[i] = (double)r->obs[phase][(n - w + i) % SRV_DRIFT_MAX];
        qsort(v, (size_t)w, sizeof *v, loom_cmp_double);
        return (loom_us)llround(loom_quantile(v, (size_t)w, 0.95));
}

/* The phase time the core plans the current admission on now: the admission's profile, or
 * its learned one once the core re-planned it (learn.c); a training on the job's own
 * train_gpus, as the observations of its trainings are kept (srv_observe_phase). */
static loom_us planned(loom_server *s, const srv_job *j, int phase)
{
        loom_job_info info;
        if (loom_sched_job_info(s->sched, j->retry.core, &info) == 0)
                return phase == 0 ? info.spec.t_roll : info.spec.t_train;
        return phase == 0 ? j->retry.plan_roll : j->retry.plan_train;
}

/* A training of dur on gpus GPUs as it would have lasted on the job's own train_gpus: the
 * group's pool may be larger or smaller than those (policy.pool_grow, lone_grow), and may
 * change between two trainings. */
static loom_us own_train(loom_server *s, const srv_job *j, int gpus, loom_us dur)
{
        int own = j->spec.train_gpus;
        if (gpus <= 0 || gpus == own)
                return dur;
        loom_us unit = loom_us_from_s(1000);
        loom_us there = loom_group_train_time(
            unit, own, gpus, loom_sched_policy(s->sched)->train_scaling_efficiency);
        return there > 0 ? (loom_us)llround((double)dur * (double)unit / (double)there) : dur;
}

/* The solo iteration the current admission's SLO is measured against, if not its profile's
 * (a re-admission on a learned profile, loom_job_spec.t_solo_ref). */
static loom_us solo_ref(loom_server *s, const srv_job *j)
{
        loom_job_info info;
        return loom_sched_job_info(s->sched, j->retry.core, &info) == 0 ? info.declared.t_solo_ref
                                                                        : 0;
}

double srv_drift_ratio(loom_server *s, const srv_job *j, int phase)
{
        int w = s->cfg.drift_window;
        if (w <= 0 || j->retry.n_obs[phase] < w)
                return 0;
        loom_us p = planned(s, j, phase);
        return p > 0 ? (double)p95_last(&j->retry, phase, w) / (double)p : 0;
}

/* ---- re-admission ---------------------------------------------------------------------------- */

static json_t *ids_json(const loom_node_id *n, int count)
{
        json_t *a = json_array();
        for (int i = 0; a && i < count; i++)
                json_array_append_new(a, json_integer(n[i]));
        return a;
}

/*
 * Exit j's current admission and submit it again planned on (roll, train). The lease, if
 * any, ends as lease_state. On a placement failure the job fails. The caller applies the
 * core's actions afterwards (srv_apply_actions), which may grant the new permit.
 */
/* Let core admission `old` go as failed and submit j's spec again planned on (roll, train)
 * and its rollout head (0: none; one past roll is dropped), its SLO measured against solo (0:
 * against that profile), for the iterations left after done; d is initialised here and the
 * caller frees it. The new admission has no learned profile yet. */
static int resubmit(loom_server *s, srv_job *j, int64_t at, uint32_t old, int64_t done,
                    loom_us roll, loom_us train, loom_us solo, loom_us head,
                    const loom_decision *want, loom_decision *d, loom_job_id *core, loom_err *e)
{
        loom_sched_job_exit(s->sched, at, old, LOOM_EXIT_FAILED);
        j->learned = false;
        loom_job_spec spec = j->spec;
        spec.iterations = srv_job_left(j, done);
        spec.t_roll = roll;
        spec.t_train = train;
        spec.t_solo_ref = solo;
        spec.t_head = head <= roll ? head : 0;
        loom_decision_init(d, false);
        *core = 0;
        return want ? loom_sched_submit_as(s->sched, at, &spec, want, d, core, e)
                    : loom_sched_submit(s->sched, at, &spec, d, core, e);
}

static void readmit(loom_server *s, srv_job *j, const char *cause, const char *why, loom_us roll,
                    loom_us train, loom_us solo, loom_us head, const char *lease_state)
{
        loom_err e;
        loom_err_clear(&e);
        int64_t wall = srv_now_wall();
        if (j->has_lease) {
                srv_store_note(s, srv_store_lease_end(s->store, j->lease.id, lease_state, wall, &e),
                               &e);
                srv_metrics_lease_end(s, lease_state);
                j->has_lease = false;
        }
        j->permit = false;
        /* Waiters asked for j->next. Rollout waiters stay: the new admission's first phase is
         * theirs. Train waiters are told, as an acquire of train would be now. */
        if (j->next != LOOM_PHASE_ROLLOUT) {
                char msg[160];
                snprintf(msg, sizeof msg,
                         "job %u was re-admitted (%s); acquire rollout of iteration %lld", j->pub,
                         cause, (long long)j->done + 1);
                srv_fail_waiters(s, j, 409, msg);
        }
        uint32_t old = j->retry.core;
        loom_decision d;
        loom_job_id core;
        int rc = resubmit(s, j, wall, old, j->done, roll, train, solo, head, NULL, &d, &core, &e);
        if (!rc && srv_core_map(s, core, j->id)) {
                loom_sched_job_exit(s->sched, wall, core, LOOM_EXIT_CANCELLED);
                rc = loom_err_set(&e, LOOM_ENOMEM, "", "out of memory");
        }
        if (rc) {
                char w[512];
                snprintf(w, sizeof w, "%.120s; re-admission refused: %.256s", why,
                         e.msg[0] ? e.msg : d.reason);
                loom_decision_free(&d);
                s->m.failed_final++;
                /* The core already let the old admission go; end_job's exit is a no-op there
                 * and its "exit" log entry is what replay needs. */
                srv_end_job(s, j, SJ_FAILED, lease_state, w);
                return;
        }
        srv_retry *r = &j->retry;
        r->core = core;
        r->plan_roll = roll;
        r->plan_train = train;
        r->n_obs[0] = r->n_obs[1] = 0;
        r->at_wall = wall;
        snprintf(r->cause, sizeof r->cause, "%s", cause);
        snprintf(r->why, sizeof r->why, "%s", why);
        if (!strcmp(cause, "drift")) {
                r->resubmits++;
                s->m.drift_resubmits++;
        } else if (!strcmp(cause, "learned")) {
                r->resubmits++;
                s->m.learned_resubmits++;
        } else if (!strcmp(cause, "moved")) {
                r->resubmits++;
                s->m.moved_resubmits++;
        } else if (!strcmp(cause, "node")) {
                r->resubmits++;
                s->m.node_resubmits++;
        } else {
                r->restarts++;
                s->m.restarts++;
        }
        j->next = LOOM_PHASE_ROLLOUT;
        j->next_call = 0;

        json_t *log = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:o,s:o,s:s,s:i}", "cause", cause, "why",
                                why, "core", (json_int_t)core, "t_roll_us", (json_int_t)roll,
                                "t_train_us", (json_int_t)train, "group", (json_int_t)d.group,
                                "rollout_nodes", ids_json(d.rollout_nodes, d.n_rollout_nodes),
                                "train_nodes", ids_json(d.train_nodes, d.n_train_nodes), "decision",
                                loom_decision_kind_name(d.kind), "rate", d.rate > 1 ? d.rate : 1);
        if (log && j->target > 0) /* the count the new admission's iterations are left after */
                json_object_set_new(log, "done", json_integer(j->done));
        if (log && solo > 0) /* absent: measured against the profile, as before learning */
                json_object_set_new(log, "t_solo_ref_us", json_integer(solo));
        if (log && head > 0 && head <= roll) /* absent: no rollout head planned */
                json_object_set_new(log, "t_head_us", json_integer(head));
        char *text = log ? json_dumps(log, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(log);
        if (!text) {
                loom_err_set(&e, LOOM_ENOMEM, "", "out of memory");
                srv_store_note(s, LOOM_ENOMEM, &e);
        } else {
                srv_store_note(s, srv_store_log(s->store, "readmit", j->id, text, &e), &e);
                free(text);
        }
        srv_store_note(s, srv_store_job_update(s->store, j, &e), &e);
        srv_store_note(s, srv_store_retry_save(s->store, j, &e), &e);
        srv_log(s, "job %u (%s) re-admitted (%s: %s): core job %u -> %u, %s, group %u", j->id,
                j->name, cause, why, old, core, loom_decision_kind_name(d.kind), d.group);
        loom_decision_free(&d);
}

void srv_job_failed(loom_server *s, srv_job *j, const char *lease_state, const char *why,
                    loom_us now)
{
        (void)now;
        if (!srv_job_live(j->state))
                return;
        if (!strcmp(lease_state, "node")) {
                readmit(s, j, "node", why, j->retry.plan_roll, j->retry.plan_train, solo_ref(s, j),
                        j->spec.t_head, "failed");
                return;
        }
        if (j->retry.restarts < j->spec.max_restarts) {
                readmit(s, j, "restart", why, j->retry.plan_roll, j->retry.plan_train,
                        solo_ref(s, j), j->spec.t_head, lease_state);
                return;
        }
        char w[240];
        snprintf(w, sizeof w, "%s; %d of %d restarts used", why, j->retry.restarts,
                 j->spec.max_restarts);
        s->m.failed_final++;
        srv_end_job(s, j, SJ_FAILED, lease_state, w);
}

/* Re-admit j on its learned profile, held to the budget measured on its mean observed solo
 * iteration (t_solo_ref), for observe's result: 2, its group cannot meet that budget; 3, another
 * group takes it for less than its own saves once it leaves (a move). Returns whether it did. */
static bool readmit_learned(loom_server *s, srv_job *j, int result)
{
        loom_job_info in;
        loom_group_info g;
        if (loom_sched_job_info(s->sched, j->retry.core, &in) || in.learned_roll <= 0 ||
            loom_sched_group_info(s->sched, in.group, &g))
                return false;
        char why[200];
        if (result == 3 && g.lone)
                snprintf(why, sizeof why,
                         "alone in group %u at $%.2f/h; another group takes it for less than "
                         "%.0f%% of that",
                         in.group, g.cost_per_hour, 100 * LOOM_MOVE_GAIN);
        else if (result == 3)
                snprintf(why, sizeof why,
                         "one of %d members of group %u at $%.2f/h; another group takes it for "
                         "less than that group stops paying once it leaves",
                         g.n_members, in.group, g.cost_per_hour);
        else
                snprintf(why, sizeof why,
                         "group %u's period %.3f s exceeds the %.3f s budget measured on its "
                         "mean observed solo iteration",
                         in.group, loom_us_to_s(g.t_meta), loom_us_to_s(in.learned_budget));
        loom_us solo = (loom_us)((double)in.learned_budget / in.spec.slo);
        readmit(s, j, result == 3 ? "moved" : "learned", why, in.learned_roll, in.learned_train,
                solo > 0 ? solo : 1, in.learned_head, "released");
        return true;
}

void srv_observe_phase(loom_server *s, srv_job *j, loom_phase phase, loom_pool pool, int gpus,
                       loom_us dur, loom_us head)
{
        loom_err e;
        loom_err_clear(&e);
        int p = phase == LOOM_PHASE_TRAIN;
        srv_retry *r = &j->retry;
        r->obs[p][r->n_obs[p] % SRV_DRIFT_MAX] = p ? own_train(s, j, gpus, dur) : dur;
        r->n_obs[p]++;
        if (r->n_obs[p] > 2 * SRV_DRIFT_MAX) /* keep the ring position, bound the counter */
                r->n_obs[p] -= SRV_DRIFT_MAX;
        bool drifted = false;
        loom_us roll = r->plan_roll, train = r->plan_train;
        char why[200] = "";
        /* Learned admission first: the core learns from this phase and may re-plan the group
         * (or find it no longer meets the job's real budget: then the job is re-admitted on its
         * learned profile and the drift check is moot, the new admission starts afresh). */
        int learned = srv_learn_observe(s, j, phase, pool, gpus, dur, head);
        if ((learned == 2 || learned == 3) && p == 1 && srv_job_live(j->state) && !j->has_lease &&
            readmit_learned(s, j, learned))
                return;
        /* Drift: against what the core plans on now, the learned profile once it has one. */
        if (p == 1 && srv_job_live(j->state) && !j->has_lease) {
                double rr = srv_drift_ratio(s, j, 0), rt = srv_drift_ratio(s, j, 1);
                if (rr > s->cfg.drift_threshold) {
                        roll = p95_last(r, 0, s->cfg.drift_window);
                        drifted = true;
                }
                if (rt > s->cfg.drift_threshold) {
                        /* kept on the job's own train_gpus, as its spec is */
                        train = p95_last(r, 1, s->cfg.drift_window);
                        drifted = true;
                }
                if (drifted)
                        snprintf(why, sizeof why,
                                 "p95 of the last %d iterations is %.2fx the planned rollout "
                                 "and %.2fx the planned train (threshold %.2fx)",
                                 s->cfg.drift_window, rr, rt, s->cfg.drift_threshold);
        }
        if (drifted) /* a new declaration, its SLO measured against itself */
                readmit(s, j, "drift", why, roll, train, 0, 0, "released");
        else
                srv_store_note(s, srv_store_retry_save(s->store, j, &e), &e);
}

/* ---- API ------------------------------------------------------------------------------------- */

static json_t *observed_json(loom_server *s, const srv_job *j, int p)
{
        int w = s->cfg.drift_window;
        int n = j->retry.n_obs[p] < SRV_DRIFT_MAX ? j->retry.n_obs[p] : SRV_DRIFT_MAX;
        json_t *o =
            json_pack("{s:i,s:f}", "samples", n, "planned_s", loom_us_to_s(planned(s, j, p)));
        if (n > 0)
                json_object_set_new(o, "last_s",
                                    json_real(loom_us_to_s(
                                        j->retry.obs[p][(j->retry.n_obs[p] - 1) % SRV_DRIFT_MAX])));
        if (w > 0 && j->retry.n_obs[p] >= w) {
                json_object_set_new(o, "p95_s", json_real(loom_us_to_s(p95_last(&j->retry, p, w))));
                json_object_set_new(o, "ratio", json_real(srv_drift_ratio(s, j, p)));
        }
        return o;
}

void srv_retry_json(loom_server *s, const srv_job *j, json_t *o)
{
        const srv_retry *r = &j->retry;
        json_object_set_new(o, "restarts", json_integer(r->restarts));
        json_object_set_new(o, "max_restarts", json_integer(j->spec.max_restarts));
        json_object_set_new(o, "resubmits", json_integer(r->resubmits));
        json_object_set_new(o, "readmission",
                            r->cause[0] ? json_pack("{s:s,s:s,s:I}", "cause", r->cause, "reason",
                                                    r->why, "at_us", (json_int_t)r->at_wall)
                                        : json_null());
        json_object_set_new(o, "profile",
                            json_pack("{s:f,s:f}", "t_roll_s", loom_us_to_s(r->plan_roll),
                                      "t_train_s", loom_us_to_s(r->plan_train)));
        json_object_set_new(o, "observed",
                            json_pack("{s:o,s:o}", "rollout", observed_json(s, j, 0), "train",
                                      observed_json(s, j, 1)));
        json_object_set_new(o, "resume_iteration",
                            srv_job_live(j->state) ? json_integer(j->done + 1) : json_null());
}

void srv_h_attach(loom_server *s, srv_req *r, loom_us now)
{
        srv_job *j = srv_job_get(s, r->job);
        if (!j)
                return srv_reply_error(r, 404, "id", "no such job: %u", r->job);
        s->m.attaches++;
        bool took = false;
        if (r->takeover && srv_job_live(j->state) && j->has_lease &&
            (r->takeover == 1 || j->lease.phase == r->phase)) {
                char why[96];
                snprintf(why, sizeof why, "a new worker took over lease %lld",
                         (long long)srv_lease_pub(s, j->lease.id));
                srv_job_failed(s, j, "failed", why, now);
                srv_apply_actions(s, now);
                took = true;
        }
        json_t *o = srv_job_json(s, j, false);
        json_object_set_new(o, "took_over", json_boolean(took));
        srv_reply_json(r, 200, o);
}

/* ---- replay ---------------------------------------------------------------------------------- */

static bool same_ids(json_t *arr, const loom_node_id *n, int count)
{
        if (!json_is_array(arr) || (int)json_array_size(arr) != count)
                return false;
        for (int i = 0; i < count; i++)
                if (json_integer_value(json_array_get(arr, (size_t)i)) != (json_int_t)n[i])
                        return false;
        return true;
}

bool srv_same_placement(json_t *o, const loom_decision *d)
{
        return json_integer_value(json_object_get(o, "group")) == (json_int_t)d->group &&
               same_ids(json_object_get(o, "rollout_nodes"), d->rollout_nodes,
                        d->n_rollout_nodes) &&
               same_ids(json_object_get(o, "train_nodes"), d->train_nodes, d->n_train_nodes);
}

static int ids_from(json_t *arr, loom_node_id *n)
{
        if (!json_is_array(arr) || json_array_size(arr) > LOOM_MAX_JOB_NODES)
                return -1;
        for (size_t i = 0; i < json_array_size(arr); i++) {
                json_t *v = json_array_get(arr, i);
                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    json_integer_value(v) > UINT32_MAX)
                        return -1;
                n[i] = (loom_node_id)json_integer_value(v);
        }
        return (int)json_array_size(arr);
}

void srv_decision_recorded(loom_server *s, json_t *o, loom_decision *w)
{
        loom_decision_init(w, false);
        w->kind = LOOM_DECISION_REJECTED; /* unreadable: no placement to keep */
        json_t *g = json_object_get(o, "group");
        int nr = ids_from(json_object_get(o, "rollout_nodes"), w->rollout_nodes);
        int nt = ids_from(json_object_get(o, "train_nodes"), w->train_nodes);
        if (!json_is_integer(g) || json_integer_value(g) < 0 || nr < 0 || nt < 0)
                return;
        w->group = (loom_group_id)json_integer_value(g);
        w->n_rollout_nodes = nr;
        w->n_train_nodes = nt;
        json_int_t rate = json_integer_value(json_object_get(o, "rate"));
        w->rate = rate > 1 && rate <= 64 ? (int)rate : 1;
        const char *kind = json_string_value(json_object_get(o, "decision"));
        loom_group_info gi;
        if (!kind) /* readmit entries from before they named it: a group the core has is joined */
                w->kind = loom_sched_group_info(s->sched, w->group, &gi)
                              ? LOOM_DECISION_NEW_GROUP
                              : LOOM_DECISION_DIRECT_PACK;
        for (int k = LOOM_DECISION_DIRECT_PACK; kind && k < LOOM_DECISION_REJECTED; k++)
                if (!strcmp(kind, loom_decision_kind_name((loom_decision_kind)k)))
                        w->kind = (loom_decision_kind)k;
}

void srv_replay_settle(loom_server *s, srv_job *j, int rc, const loom_decision *d,
                       const loom_err *why)
{
        if (rc <= 0)
                return;
        bool kept = rc == LOOM_SUBMIT_KEPT;
        if (s->replay_lenient) {
                s->rederived_placements++; /* written under another arithmetic */
        } else {
                s->diverged_placements++;
                s->diverged_kept += kept;
                srv_log(s,
                        "replay: job %u (%s) at log entry %lld: %s; %s (docs/operations.md, "
                        "\"replay divergences\")",
                        j->id, j->name, (long long)s->replay_seq, kept ? d->reason : why->msg,
                        kept ? "its recorded placement is kept"
                             : "the recorded placement cannot be applied, this core's is taken");
        }
}

int srv_replay_readmit(loom_server *s, srv_job *j, uint32_t *core, int64_t *done,
                       const char *reason, int64_t at, loom_err *e)
{
        json_error_t je;
        json_t *o = reason ? json_loads(reason, 0, &je) : NULL;
        /* the count the new admission starts from (logged since arithmetic 13; before, the
         * last "iter" entry's, which *done holds) */
        json_t *at_done = json_object_get(o, "done");
        if (json_is_integer(at_done) && json_integer_value(at_done) >= 0)
                *done = json_integer_value(at_done);
        json_int_t want = json_integer_value(json_object_get(o, "core"));
        json_int_t roll = json_integer_value(json_object_get(o, "t_roll_us"));
        json_int_t train = json_integer_value(json_object_get(o, "t_train_us"));
        json_int_t solo = json_integer_value(json_object_get(o, "t_solo_ref_us")); /* 0: none */
        json_int_t head = json_integer_value(json_object_get(o, "t_head_us"));     /* 0: none */
        if (!o || want <= 0 || roll <= 0 || train <= 0 || solo < 0 || head < 0) {
                json_decref(o);
                return loom_err_set(e, LOOM_ECORRUPT, "store", "job %u: unreadable readmit entry",
                                    j->id);
        }
        loom_decision d, w;
        srv_decision_recorded(s, o, &w);
        json_decref(o);
        loom_job_id got;
        loom_err e2;
        loom_err_clear(&e2);
        int rc = resubmit(s, j, at, *core, *done, roll, train, solo, head, &w, &d, &got, &e2);
        srv_replay_settle(s, j, rc, &d, &e2);
        loom_decision_free(&d);
        if (rc < 0 || got != (loom_job_id)want)
                return loom_err_set(
                    e, LOOM_ECORRUPT, "store", "replay could not re-admit job %u (%s)", j->id,
                    rc < 0 ? (e2.msg[0] ? e2.msg : loom_strerror(rc)) : "the core ids went apart");
        *core = got;
        return srv_core_map(s, got, j->id) ? loom_err_set(e, LOOM_ENOMEM, "", "out of memory") : 0;
}
