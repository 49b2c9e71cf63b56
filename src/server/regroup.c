/*
 * regroup.c - regrouping plans in loomd's log (policy.regroup, docs/scheduling.md "Regrouping
 * at departures").
 *
 * Under learned admission a finished job's departure, and each job's first re-plan, make the
 * core re-solve the grouping of the groups around it: an exact search, milliseconds each. Its
 * outcome, a plan (which members move where), decides which later observations move a job, so
 * it must replay; but a replay must not search again: a restart, a replica's takeover and every
 * compaction replay the whole log. So, as an "observe" entry carries what the core learned
 * (learn.c), each plan is one "regroup" entry, logged right after the "exit" or "observe"
 * entry whose core call made it, in the same transaction:
 *
 *     {"plan":[{"core":7,"job":3,"to":2},{"core":9,"job":5,"alone":true},{"core":8,"job":4}]}
 *
 * one object per member the re-solve covered, in the search's order: its core job id, loomd's
 * job id, and where the plan moves it ("to": a group id; "alone": a new group of its own;
 * neither: it stays, and any earlier plan of its is dropped). The entry's job is the one whose
 * exit or observation made the plan.
 *
 * Replay runs the core in replay mode (loom_sched_replaying: departures and first re-plans
 * search nothing) and hands each entry's plan back (loom_sched_regroup_apply) where the live
 * core made it, so the core ends in the live core's state without a single search. A plan that
 * cannot be applied (a member or group that the replay does not have, as after re-deriving a
 * log written under another arithmetic) is reported and skipped: plans only move jobs to
 * cheaper places, nothing depends on one for correctness. A log without "regroup" entries (a
 * store written with policy.regroup off, or before it) replays as it always did.
 */
#include <stdlib.h>
#include <string.h>

#include "srv.h"

char *srv_regroup_encode(const loom_regroup_plan *p, const uint32_t *jobs)
{
        json_t *a = json_array();
        for (int i = 0; a && i < p->n; i++) {
                const loom_regroup_member *m = &p->m[i];
                json_t *o =
                    json_pack("{s:I,s:I}", "core", (json_int_t)m->job, "job", (json_int_t)jobs[i]);
                if (o && m->moves && m->alone)
                        json_object_set_new(o, "alone", json_true());
                else if (o && m->moves)
                        json_object_set_new(o, "to", json_integer(m->to));
                if (!o || json_array_append_new(a, o)) {
                        json_decref(a);
                        return NULL;
                }
        }
        json_t *j = a ? json_pack("{s:o}", "plan", a) : NULL;
        char *t = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(j);
        return t;
}

static bool id_ok(json_t *v)
{
        return json_is_integer(v) && json_integer_value(v) >= 0 &&
               json_integer_value(v) <= UINT32_MAX;
}

int srv_regroup_decode(const char *text, loom_regroup_plan *p, uint32_t *jobs, loom_err *e)
{
        memset(p, 0, sizeof *p);
        json_error_t je;
        json_t *j = text ? json_loads(text, 0, &je) : NULL;
        json_t *a = json_object_get(j, "plan");
        const char *bad =
            !json_is_object(j) ? "entry"
            : !json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > LOOM_REGROUP_MAX
                ? "plan"
                : NULL;
        for (size_t i = 0; !bad && i < json_array_size(a); i++) {
                json_t *o = json_array_get(a, i), *core = json_object_get(o, "core"),
                       *job = json_object_get(o, "job"), *to = json_object_get(o, "to"),
                       *alone = json_object_get(o, "alone");
                loom_regroup_member *m = &p->m[i];
                bad = !json_is_object(o)                              ? "plan"
                      : !id_ok(core) || json_integer_value(core) == 0 ? "core"
                      : !id_ok(job) || json_integer_value(job) == 0   ? "job"
                      : to && (!id_ok(to) || alone)                   ? "to"
                      : alone && (!json_is_true(alone))               ? "alone"
                                                                      : NULL;
                if (bad)
                        break;
                m->job = (loom_job_id)json_integer_value(core);
                jobs[i] = (uint32_t)json_integer_value(job);
                m->moves = to || alone;
                m->alone = alone != NULL;
                m->to = to ? (loom_group_id)json_integer_value(to) : 0;
        }
        if (!bad)
                p->n = (int)json_array_size(a);
        json_decref(j);
        return bad ? loom_err_set(e, LOOM_ECORRUPT, bad, "unreadable regroup entry (%s)", bad) : 0;
}

void srv_regroup_log(loom_server *s, const srv_job *cause)
{
        loom_regroup_plan p;
        if (!loom_sched_regroup_made(s->sched, &p))
                return;
        uint32_t jobs[LOOM_REGROUP_MAX];
        char said[LOOM_REGROUP_MAX * 32] = "";
        for (int i = 0; i < p.n; i++) {
                const srv_job *m = srv_job_by_core(s, p.m[i].job);
                jobs[i] = m ? m->id : 0;
                size_t len = strlen(said);
                if (p.m[i].moves)
                        snprintf(said + len, sizeof said - len, "%s job %u %s%u", len ? "," : "",
                                 jobs[i], p.m[i].alone ? "alone" : "to group ",
                                 p.m[i].alone ? 0u : (unsigned)p.m[i].to);
        }
        loom_err e;
        loom_err_clear(&e);
        char *text = srv_regroup_encode(&p, jobs);
        if (!text)
                srv_store_note(s, loom_err_set(&e, LOOM_ENOMEM, "", "out of memory"), &e);
        else
                srv_store_note(s, srv_store_log(s->store, "regroup", cause->id, text, &e), &e);
        free(text);
        srv_log(s, "job %u (%s): the groups around it re-solved, a plan moves%s", cause->id,
                cause->name, said);
}

int srv_replay_regroup(loom_server *s, const uint32_t *core, uint32_t n_core, const char *reason,
                       loom_err *e)
{
        loom_regroup_plan p;
        uint32_t jobs[LOOM_REGROUP_MAX];
        loom_err e2;
        if (srv_regroup_decode(reason, &p, jobs, &e2))
                return loom_err_set(e, LOOM_ECORRUPT, "store", "log entry %lld: %s",
                                    (long long)s->replay_seq, e2.msg);
        const char *why = NULL;
        for (int i = 0; i < p.n && !why; i++)
                if (jobs[i] < 1 || jobs[i] > n_core || core[jobs[i] - 1] != p.m[i].job)
                        why = "a member is not at the core job it names";
        int rc = why ? 0 : loom_sched_regroup_apply(s->sched, &p);
        if (rc)
                why = loom_strerror(rc);
        if (why && !s->replay_lenient) { /* a log re-derived under another arithmetic: quiet */
                s->diverged_plans++;
                srv_log(s, "replay: the regrouping plan at log entry %lld was not applied (%s)",
                        (long long)s->replay_seq, why);
        }
        return 0;
}
