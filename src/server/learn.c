/*
 * learn.c - learned-profile admission in loomd (policy.admission p99 / p95, see
 * docs/scheduling.md "admission on learned profiles" and docs/operations.md).
 *
 * Every finished phase's length (grant -> release of its lease; a training phase run call by
 * call is the sum of its calls) is handed to loom_sched_observe, which after learn_after
 * iterations re-plans the job's group on the observed quantile. A re-plan changes where later
 * jobs are placed, so it must replay: each observation is one "observe" entry in the store's
 * log, written in the same transaction as the release that measured it (committed before the
 * release's reply, like every log entry), carrying what the core made of it:
 *
 *     {"core":7,"phase":"train","took_us":612034,"result":1,
 *      "t_roll_us":1004211,"t_train_us":611200,"budget_us":3241000}
 *
 * A rollout's entry also carries "head_us" when its progress report crossed the tail threshold
 * (grant -> that report): live and in replay it is handed to loom_sched_observe_head just
 * before the rollout's length.
 *
 * result is loom_sched_observe's (0 nothing changed, 1 re-planned, 2 the group no longer meets
 * the job's real budget) and the three times are the job's learned profile after it. Replay
 * feeds the same lengths to the same core job, in log order between the submits, exits and
 * re-admissions, and refuses to start (LOOM_ECORRUPT) unless the result and the learned profile
 * come out the same.
 *
 * Under admission worst nothing is observed or logged: loomd behaves as before.
 */
#include <stdlib.h>
#include <string.h>

#include "srv.h"

char *srv_observe_encode(const srv_observe_rec *o)
{
        json_t *j = json_pack("{s:I,s:s,s:I,s:i,s:I,s:I,s:I}", "core", (json_int_t)o->core, "phase",
                              loom_phase_name(o->phase), "took_us", (json_int_t)o->took, "result",
                              o->result, "t_roll_us", (json_int_t)o->roll, "t_train_us",
                              (json_int_t)o->train, "budget_us", (json_int_t)o->budget);
        if (j && o->head > 0)
                json_object_set_new(j, "head_us", json_integer(o->head));
        if (j && o->phase == LOOM_PHASE_ROLLOUT && o->pool == LOOM_POOL_TRAIN) /* absent: its own */
                json_object_set_new(j, "pool", json_string(loom_pool_name(o->pool)));
        if (j && o->phase == LOOM_PHASE_TRAIN && o->gpus > 0) /* absent: the pool as it stood */
                json_object_set_new(j, "gpus", json_integer(o->gpus));
        char *t = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(j);
        return t;
}

static int get_us(json_t *o, const char *k, loom_us *out)
{
        json_t *v = json_object_get(o, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return -1;
        *out = (loom_us)json_integer_value(v);
        return 0;
}

int srv_observe_decode(const char *text, srv_observe_rec *o, loom_err *e)
{
        memset(o, 0, sizeof *o);
        json_error_t je;
        json_t *j = text ? json_loads(text, 0, &je) : NULL;
        json_t *core = json_object_get(j, "core"), *res = json_object_get(j, "result");
        const char *phase = json_string_value(json_object_get(j, "phase"));
        const char *bad =
            !json_is_object(j) ? "entry"
            : !json_is_integer(core) || json_integer_value(core) <= 0 ||
                    json_integer_value(core) > UINT32_MAX
                ? "core"
            : !phase || loom_phase_parse(phase, &o->phase) || o->phase == LOOM_PHASE_SYNC ? "phase"
            : get_us(j, "took_us", &o->took) ? "took_us"
            : !json_is_integer(res) || json_integer_value(res) < 0 || json_integer_value(res) > 3
                ? "result"
            : get_us(j, "t_roll_us", &o->roll)                                ? "t_roll_us"
            : get_us(j, "t_train_us", &o->train)                              ? "t_train_us"
            : get_us(j, "budget_us", &o->budget)                              ? "budget_us"
            : json_object_get(j, "head_us") && get_us(j, "head_us", &o->head) ? "head_us"
                                                                              : NULL;
        const char *pool = json_string_value(json_object_get(j, "pool"));
        if (!bad && json_object_get(j, "pool") &&
            (!pool || o->phase != LOOM_PHASE_ROLLOUT || strcmp(pool, "train")))
                bad = "pool";
        json_t *gpus = json_object_get(j, "gpus");
        if (!bad && gpus &&
            (!json_is_integer(gpus) || json_integer_value(gpus) < 1 ||
             json_integer_value(gpus) > 1000000 || o->phase != LOOM_PHASE_TRAIN))
                bad = "gpus";
        if (!bad && gpus)
                o->gpus = (int)json_integer_value(gpus);
        if (!bad) {
                o->core = (uint32_t)json_integer_value(core);
                o->result = (int)json_integer_value(res);
                o->pool =
                    pool || o->phase == LOOM_PHASE_TRAIN ? LOOM_POOL_TRAIN : LOOM_POOL_ROLLOUT;
        }
        json_decref(j);
        return bad ? loom_err_set(e, LOOM_ECORRUPT, bad, "unreadable observe entry (%s)", bad) : 0;
}

/* Keep the job's learned view (the core forgets it when the job ends). */
static void keep(srv_job *j, const loom_job_info *in)
{
        j->learned = in->learned;
        j->learned_roll = in->learned_roll;
        j->learned_train = in->learned_train;
        j->learned_budget = in->learned_budget;
        j->learned_head = in->learned_head;
}

int srv_learn_observe(loom_server *s, srv_job *j, loom_phase phase, loom_pool pool, int gpus,
                      loom_us took, loom_us head)
{
        if (loom_sched_policy(s->sched)->admission == LOOM_ADMIT_WORST || !srv_job_live(j->state))
                return 0;
        if (phase != LOOM_PHASE_ROLLOUT)
                head = 0;
        if (head > 0)
                loom_sched_observe_head(s->sched, j->retry.core, head);
        if (phase != LOOM_PHASE_ROLLOUT)
                pool = LOOM_POOL_TRAIN;
        int rc = loom_sched_observe_ran(s->sched, srv_now_wall(), j->retry.core, phase, pool, gpus,
                                        took);
        loom_job_info in;
        if (rc < 0 || loom_sched_job_info(s->sched, j->retry.core, &in)) {
                srv_log(s, "job %u: observation refused: %s", j->id, loom_strerror(rc));
                return 0;
        }
        keep(j, &in);
        if (rc == 1)
                j->replans++;
        srv_observe_rec o = {j->retry.core,     phase, took, rc,  in.learned_roll, in.learned_train,
                             in.learned_budget, head,  pool, gpus};
        loom_err e;
        loom_err_clear(&e);
        char *text = srv_observe_encode(&o);
        if (!text)
                srv_store_note(s, loom_err_set(&e, LOOM_ENOMEM, "", "out of memory"), &e);
        else
                srv_store_note(s, srv_store_log(s->store, "observe", j->id, text, &e), &e);
        free(text);
        srv_regroup_log(s, j); /* a first re-plan may have regrouped (regroup.c) */
        if (rc == 1)
                srv_log(s,
                        "job %u (%s) group %u re-planned on its %s profile: rollout %.3f s, "
                        "train %.3f s, budget %.3f s",
                        j->id, j->name, in.group,
                        loom_admission_name(loom_sched_policy(s->sched)->admission),
                        loom_us_to_s(in.learned_roll), loom_us_to_s(in.learned_train),
                        loom_us_to_s(in.learned_budget));
        return rc;
}

int srv_replay_observe(loom_server *s, srv_job *j, uint32_t core, const char *reason, loom_err *e)
{
        srv_observe_rec o;
        loom_err e2;
        if (srv_observe_decode(reason, &o, &e2))
                return loom_err_set(e, LOOM_ECORRUPT, "store", "job %u: %s", j->id, e2.msg);
        if (o.core != core)
                return loom_err_set(e, LOOM_ECORRUPT, "store",
                                    "job %u: observe entry names core job %u, replay is at %u",
                                    j->id, o.core, core);
        if (o.head > 0 && loom_sched_observe_head(s->sched, core, o.head))
                return loom_err_set(e, LOOM_ECORRUPT, "store",
                                    "job %u: bad head in an observe entry", j->id);
        int rc = loom_sched_observe_ran(s->sched, 0, core, o.phase, o.pool, o.gpus, o.took);
        loom_job_info in;
        bool fail = rc < 0 || loom_sched_job_info(s->sched, core, &in);
        bool differ = !fail && (rc != o.result || in.learned_roll != o.roll ||
                                in.learned_train != o.train || in.learned_budget != o.budget);
        if (differ && s->replay_lenient) { /* written under another arithmetic: take ours */
                s->rederived_profiles++;
                differ = false;
        }
        if (differ && s->replay_collect) { /* compaction: the entry's new outcome */
                srv_observe_rec n = {core,
                                     o.phase,
                                     o.took,
                                     rc,
                                     in.learned_roll,
                                     in.learned_train,
                                     in.learned_budget,
                                     o.head,
                                     o.pool,
                                     o.gpus};
                char *text = srv_observe_encode(&n);
                int crc = text ? s->collect(s->collect_arg, s->replay_seq, text) : LOOM_ENOMEM;
                free(text);
                if (crc)
                        return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                differ = false;
        }
        if (fail)
                return loom_err_set(e, LOOM_ECORRUPT, "store",
                                    "replay: job %u's observation refused (%s)", j->id,
                                    loom_strerror(rc));
        if (differ) { /* reported, and this core's profile is the job's from here on */
                s->diverged_profiles++;
                srv_log(s,
                        "replay: job %u learned its profile otherwise than at log entry %lld: "
                        "result %d, rollout %.6f s, train %.6f s, budget %.6f s (recorded %d, "
                        "%.6f s, %.6f s, %.6f s)",
                        j->id, (long long)s->replay_seq, rc, loom_us_to_s(in.learned_roll),
                        loom_us_to_s(in.learned_train), loom_us_to_s(in.learned_budget), o.result,
                        loom_us_to_s(o.roll), loom_us_to_s(o.train), loom_us_to_s(o.budget));
        }
        keep(j, &in);
        if (rc == 1)
                j->replans++;
        return 0;
}

void srv_learn_json(loom_server *s, const srv_job *j, json_t *o)
{
        (void)s;
        json_object_set_new(o, "learned", json_boolean(j->learned));
        json_object_set_new(o, "replans", json_integer((json_int_t)j->replans));
        json_t *p = j->learned_roll > 0
                        ? json_pack("{s:f,s:f,s:f}", "t_roll_s", loom_us_to_s(j->learned_roll),
                                    "t_train_s", loom_us_to_s(j->learned_train), "budget_s",
                                    loom_us_to_s(j->learned_budget))
                        : json_null();
        if (json_is_object(p) && j->learned_head > 0) /* its rollout's head, once learned */
                json_object_set_new(p, "head_s", json_real(loom_us_to_s(j->learned_head)));
        json_object_set_new(o, "learned_profile", p);
}
