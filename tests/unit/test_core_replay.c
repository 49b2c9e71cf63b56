/*
 * test_core_replay.c - placement is a function of the log alone.
 *
 * loomd logs what it tells the core that changes admission: submits (with the spec the core was
 * given), exits, observations (a phase's length and a rollout's head) and re-admissions. Phase
 * starts, progress, completions and restarts (job_resume) are not logged, so a core rebuilt from
 * the log has never seen them. The invariant: replaying any prefix of the log into a fresh core
 * places every job exactly where the live core, which saw everything, placed it.
 *
 * The live driver here runs jobs through their phases on a virtual clock with noisy phase times,
 * progress past the tail threshold, learned admission (observations, re-admissions on what was
 * learned), cancellations mid-phase and restarts (the live core replaced by a replay of the log
 * plus a resume of every job, as loomd does after kill -9). A second core follows the log alone,
 * in lockstep; every live submit must come out the same there, and at random prefixes a third
 * core replays the log from scratch and must agree too.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_spec.h"
#include "loom/sched.h"

enum { MAXJ = 400, MAXLOG = 8000 };
enum { L_SUBMIT, L_EXIT, L_OBSERVE, L_REGROUP };

typedef struct entry {
        int kind;
        int job;            /* driver index */
        loom_job_spec spec; /* L_SUBMIT: as given to the core */
        loom_exit x;
        loom_phase phase;
        loom_pool pool; /* L_OBSERVE: where it ran (a lone member's rollout: training) */
        int gpus;       /* L_OBSERVE: the GPUs it started on (a grown pool's, policy.pool_grow) */
        loom_us took, head;
        loom_decision_kind dk; /* L_SUBMIT: the live placement */
        loom_group_id group;
        int n_rnodes;
        loom_node_id rnodes[LOOM_MAX_JOB_NODES];
        /* L_REGROUP: the plan the live core made at the entry before (policy.regroup), its
         * members as driver indexes */
        loom_regroup_plan plan;
        int plan_job[LOOM_REGROUP_MAX];
} entry;

typedef struct djob {
        loom_job_spec spec; /* declared */
        loom_job_id core;   /* live core id; 0: not admitted */
        bool gone;
        int target, done;
        bool running;
        loom_phase phase; /* running, or next to run */
        loom_us end;      /* of the running phase */
        loom_us dur, head;
        loom_pool pool; /* of the running phase */
        int gpus;       /* ... and its GPUs */
        bool progressed;
} djob;

typedef struct world {
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_sched *live, *shadow;
        loom_job_id shadow_core[MAXJ];
        djob j[MAXJ];
        int n;
        entry *log;
        int n_log;
        loom_us now;
        uint64_t rng;
        int submits, restarts, fresh_checks, kept_lone_changes, plans;
} world;

/* Uniform in [0, 1) from the world's own xorshift, so a failing seed replays. */
static double unif(world *w)
{
        w->rng ^= w->rng << 13;
        w->rng ^= w->rng >> 7;
        w->rng ^= w->rng << 17;
        return (double)(w->rng >> 11) / 9007199254740992.0;
}

static int by_core(world *w, loom_job_id id)
{
        for (int i = 0; i < w->n; i++)
                if (!w->j[i].gone && w->j[i].core == id)
                        return i;
        return -1;
}

static void drain_discard(loom_sched *s)
{
        loom_action a;
        while (loom_sched_next_action(s, &a))
                ;
}

/* Apply log entry e to core s (the replay loomd does); core ids per driver job in ids[]. */
static void replay_entry(loom_sched *s, loom_job_id *ids, const entry *e, int at)
{
        loom_err err;
        loom_err_clear(&err);
        if (e->kind == L_EXIT) {
                cr_assert_eq(loom_sched_job_exit(s, 0, ids[e->job], e->x), 0, "entry %d", at);
                ids[e->job] = 0;
        } else if (e->kind == L_OBSERVE) {
                if (e->head > 0)
                        loom_sched_observe_head(s, ids[e->job], e->head);
                cr_assert_geq(
                    loom_sched_observe_ran(s, 0, ids[e->job], e->phase, e->pool, e->gpus, e->took),
                    0);
        } else if (e->kind == L_REGROUP) {
                loom_regroup_plan p = e->plan;
                for (int k = 0; k < p.n; k++)
                        p.m[k].job = ids[e->plan_job[k]];
                cr_assert_eq(loom_sched_regroup_apply(s, &p), 0, "entry %d", at);
        } else {
                loom_decision d;
                loom_decision_init(&d, false);
                loom_job_id id = 0;
                cr_assert_eq(loom_sched_submit(s, 0, &e->spec, &d, &id, &err), 0, "%s", err.msg);
                cr_assert(d.kind == e->dk && d.group == e->group &&
                              d.n_rollout_nodes == e->n_rnodes &&
                              !memcmp(d.rollout_nodes, e->rnodes,
                                      sizeof(loom_node_id) * (size_t)e->n_rnodes),
                          "log entry %d (job %d): replay placed it in group %u (%s), the live core "
                          "in group %u",
                          at, e->job, d.group, loom_decision_kind_name(d.kind), e->group);
                loom_decision_free(&d);
                ids[e->job] = id;
        }
        drain_discard(s);
}

static void append(world *w, const entry *e)
{
        cr_assert_lt(w->n_log, MAXLOG);
        w->log[w->n_log] = *e;
        replay_entry(w->shadow, w->shadow_core, e, w->n_log);
        w->n_log++;
}

/* A fresh core from log entries [0, upto): the placements must come out as recorded. */
static loom_sched *replay_fresh(world *w, int upto, loom_job_id *ids)
{
        loom_sched *s = loom_sched_new(&w->cl, &w->po, NULL);
        cr_assert_not_null(s);
        loom_sched_replaying(s, true);
        memset(ids, 0, sizeof(loom_job_id) * MAXJ);
        int plans = 0;
        for (int i = 0; i < upto; i++) {
                replay_entry(s, ids, &w->log[i], i);
                plans += w->log[i].kind == L_REGROUP;
        }
        loom_sched_stats st;
        loom_sched_stats_get(s, &st);
        cr_assert_eq(st.regroup_solves, 0, "a replay applies the logged plans, it never searches");
        cr_assert_eq(st.regroup_applied, (uint64_t)plans);
        return s;
}

/* Two cores in the same state: the same jobs in the same groups on the same nodes, with the
 * same learned profiles and regrouping plans; the same groups. */
static void assert_same_core(const loom_sched *a, const loom_sched *b)
{
        loom_job_id ja[MAXJ], jb[MAXJ];
        int n = loom_sched_jobs(a, ja, MAXJ);
        cr_assert_eq(n, loom_sched_jobs(b, jb, MAXJ));
        for (int i = 0; i < n; i++) {
                loom_job_info x, y;
                cr_assert_eq(ja[i], jb[i]);
                cr_assert_eq(loom_sched_job_info(a, ja[i], &x), 0);
                cr_assert_eq(loom_sched_job_info(b, jb[i], &y), 0);
                cr_assert(x.group == y.group && x.n_rollout_nodes == y.n_rollout_nodes &&
                              !memcmp(x.rollout_nodes, y.rollout_nodes, sizeof x.rollout_nodes) &&
                              x.rate == y.rate && x.learned_budget == y.learned_budget &&
                              x.learned_roll == y.learned_roll && x.replans == y.replans,
                          "job %u", ja[i]);
                cr_assert(x.regroup_planned == y.regroup_planned &&
                              x.regroup_alone == y.regroup_alone && x.regroup_to == y.regroup_to &&
                              x.regroup_tries == y.regroup_tries,
                          "job %u: plan %d %d %u %d, replayed %d %d %u %d", ja[i],
                          x.regroup_planned, x.regroup_alone, x.regroup_to, x.regroup_tries,
                          y.regroup_planned, y.regroup_alone, y.regroup_to, y.regroup_tries);
        }
        loom_group_id ga[MAXJ], gb[MAXJ];
        int m = loom_sched_groups(a, ga, MAXJ);
        cr_assert_eq(m, loom_sched_groups(b, gb, MAXJ));
        for (int i = 0; i < m; i++) {
                loom_group_info x, y;
                cr_assert_eq(ga[i], gb[i]);
                cr_assert_eq(loom_sched_group_info(a, ga[i], &x), 0);
                cr_assert_eq(loom_sched_group_info(b, gb[i], &y), 0);
                cr_assert(x.n_members == y.n_members &&
                              !memcmp(x.members, y.members, sizeof x.members) &&
                              x.t_meta == y.t_meta,
                          "group %u", ga[i]);
        }
}

/* The plan the live core's last exit or observe made, if any, as a log entry. */
static void log_plan(world *w);

static void pump(world *w);

static void submit_core(world *w, int i, const loom_job_spec *sp)
{
        loom_decision d;
        loom_decision_init(&d, false);
        loom_err e;
        loom_err_clear(&e);
        loom_job_id id = 0;
        cr_assert_eq(loom_sched_submit(w->live, w->now, sp, &d, &id, &e), 0, "%s", e.msg);
        entry en = {.kind = L_SUBMIT,
                    .job = i,
                    .spec = *sp,
                    .dk = d.kind,
                    .group = d.group,
                    .n_rnodes = d.n_rollout_nodes};
        memcpy(en.rnodes, d.rollout_nodes, sizeof en.rnodes);
        loom_decision_free(&d);
        w->j[i].core = id;
        w->j[i].running = false;
        w->j[i].phase = LOOM_PHASE_ROLLOUT;
        w->submits++;
        append(w, &en);
}

static void exit_job(world *w, int i, loom_exit x)
{
        djob *j = &w->j[i];
        cr_assert_eq(loom_sched_job_exit(w->live, w->now, j->core, x), 0);
        j->gone = true;
        j->running = false;
        append(w, &(entry){.kind = L_EXIT, .job = i, .x = x});
        log_plan(w);
}

static void log_plan(world *w)
{
        entry en = {.kind = L_REGROUP};
        if (!loom_sched_regroup_made(w->live, &en.plan))
                return;
        for (int k = 0; k < en.plan.n; k++) {
                en.plan_job[k] = by_core(w, en.plan.m[k].job);
                cr_assert_geq(en.plan_job[k], 0, "a plan's member is a live job");
        }
        w->plans++;
        append(w, &en);
}

/* What loomd does when observe says a job should go elsewhere: exit it, submit it again on
 * what was learned (one "readmit" entry, replayed as this exit and submit). */
static void readmit(world *w, int i)
{
        djob *j = &w->j[i];
        loom_job_info in;
        cr_assert_eq(loom_sched_job_info(w->live, j->core, &in), 0);
        loom_job_spec sp = in.spec;
        sp.iterations = 0;
        if (in.learned_roll > 0) {
                sp.t_roll = in.learned_roll;
                sp.t_train = in.learned_train;
                sp.t_head = sp.t_head <= sp.t_roll ? sp.t_head : 0;
        }
        cr_assert_eq(loom_sched_job_exit(w->live, w->now, j->core, LOOM_EXIT_FAILED), 0);
        append(w, &(entry){.kind = L_EXIT, .job = i, .x = LOOM_EXIT_FAILED});
        submit_core(w, i, &sp);
}

static void phase_end(world *w, int i)
{
        djob *j = &w->j[i];
        loom_phase ph = j->phase;
        j->running = false;
        cr_assert_eq(loom_sched_phase_done(w->live, w->now, j->core, ph), 0);
        if (ph == LOOM_PHASE_SYNC) {
                j->phase = LOOM_PHASE_ROLLOUT;
                return;
        }
        loom_us head = ph == LOOM_PHASE_ROLLOUT ? j->head : 0;
        if (head > 0)
                loom_sched_observe_head(w->live, j->core, head);
        int rc = loom_sched_observe_ran(w->live, w->now, j->core, ph, j->pool, j->gpus, j->dur);
        cr_assert_geq(rc, 0);
        append(w, &(entry){.kind = L_OBSERVE,
                           .job = i,
                           .phase = ph,
                           .pool = j->pool,
                           .gpus = j->gpus,
                           .took = j->dur,
                           .head = head});
        log_plan(w);
        if (ph == LOOM_PHASE_TRAIN && ++j->done >= j->target) {
                exit_job(w, i, LOOM_EXIT_FINISHED);
                return;
        }
        if (rc == 2 || rc == 3) {
                readmit(w, i);
                return;
        }
        loom_job_info in;
        cr_assert_eq(loom_sched_job_info(w->live, j->core, &in), 0);
        j->phase = in.state == LOOM_JOB_WAIT_TRAIN ? LOOM_PHASE_TRAIN
                   : in.state == LOOM_JOB_SYNCING  ? LOOM_PHASE_SYNC
                                                   : LOOM_PHASE_ROLLOUT;
        if (in.state == LOOM_JOB_SYNCING) {
                j->running = true;
                j->dur = j->spec.t_sync;
                j->end = w->now + j->dur;
        }
}

/* Carry out the live core's actions: a started phase runs its declared time, noisy. */
static void pump(world *w)
{
        loom_action a;
        while (loom_sched_next_action(w->live, &a)) {
                if (a.type != LOOM_ACT_START_PHASE)
                        continue;
                int i = by_core(w, a.job);
                if (i < 0)
                        continue; /* queued before its admission ended (a re-admission, an exit) */
                djob *j = &w->j[i];
                loom_sched_phase_started(w->live, w->now, a.job, a.phase);
                loom_us base = a.phase == LOOM_PHASE_ROLLOUT ? j->spec.t_roll
                               : a.phase == LOOM_PHASE_TRAIN ? j->spec.t_train
                                                             : j->spec.t_sync;
                j->dur = (loom_us)((double)base * (0.55 + 0.5 * unif(w))) + 1;
                j->head = a.phase == LOOM_PHASE_ROLLOUT ? j->dur * 7 / 10 : 0;
                j->progressed = false;
                j->running = true;
                j->phase = a.phase;
                j->pool = a.pool;
                j->gpus = a.gpus;
                j->end = w->now + j->dur;
        }
}

/* loomd after kill -9: a fresh core from the log, every live job put back waiting for the
 * phase it was in (its running phase is lost and runs again). */
static void restart(world *w)
{
        loom_job_id ids[MAXJ];
        loom_sched *s = replay_fresh(w, w->n_log, ids);
        assert_same_core(w->live, s);
        loom_sched_free(w->live);
        w->live = s;
        loom_sched_replaying(s, false); /* live from here: it searches again */
        for (int i = 0; i < w->n; i++) {
                djob *j = &w->j[i];
                if (j->gone || !j->core)
                        continue;
                j->core = ids[i];
                loom_phase ph = j->phase == LOOM_PHASE_SYNC ? LOOM_PHASE_ROLLOUT : j->phase;
                j->running = false;
                j->phase = ph;
                cr_assert_eq(loom_sched_job_resume(w->live, w->now, j->core, ph, 0), 0);
                pump(w);
        }
        w->restarts++;
}

static loom_job_spec draw_spec(world *w, int i)
{
        static const double roll[] = {40, 90, 150, 300}, train[] = {30, 60, 100, 200};
        int t = (int)(unif(w) * 4) % 4;
        char id[16];
        snprintf(id, sizeof id, "j%d", i);
        loom_job_spec sp = core_spec(
            id, roll[t] * (0.8 + 0.4 * unif(w)), train[(t + (int)(unif(w) * 2)) % 4], 1.1 + unif(w),
            (10 + (uint64_t)(unif(w) * 200)) * LOOM_GB, (20 + (uint64_t)(unif(w) * 300)) * LOOM_GB);
        if (unif(w) < 0.2)
                sp.t_sync = loom_us_from_s(2 + 5 * unif(w));
        if (unif(w) < 0.15)
                sp.rollout_gpus = 16;
        sp.t_switch = loom_us_from_s(1 + 3 * unif(w));
        return sp;
}

static int run_world(uint64_t seed, loom_admission adm, int n_jobs)
{
        world *w = calloc(1, sizeof *w);
        cr_assert_not_null(w);
        w->log = calloc(MAXLOG, sizeof *w->log);
        cr_assert_not_null(w->log);
        loom_cluster_cfg_default(&w->cl);
        loom_policy_cfg_default(&w->po);
        w->po.admission = adm;
        w->po.learn_after = 2;
        w->po.warm_switch = loom_us_from_s(2);
        w->rng = seed;
        w->live = loom_sched_new(&w->cl, &w->po, NULL);
        w->shadow = loom_sched_new(&w->cl, &w->po, NULL);
        cr_assert(w->live && w->shadow);
        loom_sched_replaying(w->shadow, true);
        loom_us next_arrival = 0;
        for (;;) {
                /* the next event: an arrival or the earliest phase end */
                int first = -1;
                for (int i = 0; i < w->n; i++)
                        if (!w->j[i].gone && w->j[i].running &&
                            (first < 0 || w->j[i].end < w->j[first].end))
                                first = i;
                bool arrive = w->n < n_jobs && (first < 0 || next_arrival <= w->j[first].end);
                if (!arrive && first < 0)
                        break;
                if (arrive) {
                        w->now = next_arrival;
                        int i = w->n++;
                        w->j[i].spec = draw_spec(w, i);
                        w->j[i].target = 2 + (int)(unif(w) * 8);
                        submit_core(w, i, &w->j[i].spec);
                        next_arrival += loom_us_from_s(5 + 120 * unif(w));
                } else {
                        djob *j = &w->j[first];
                        /* a rollout reports progress past the tail threshold first */
                        loom_us at = j->end - j->dur / 5;
                        if (j->phase == LOOM_PHASE_ROLLOUT && !j->progressed && at > w->now) {
                                w->now = at;
                                j->progressed = true;
                                loom_sched_progress(w->live, w->now, j->core, LOOM_PHASE_ROLLOUT,
                                                    85, 100);
                                pump(w);
                                continue;
                        }
                        w->now = j->end;
                        phase_end(w, first);
                }
                pump(w);
                double u = unif(w);
                if (u < 0.01) { /* a cancellation, whatever the job is doing */
                        int i = (int)(unif(w) * w->n) % (w->n ? w->n : 1);
                        if (w->n && !w->j[i].gone) {
                                exit_job(w, i, LOOM_EXIT_CANCELLED);
                                pump(w);
                        }
                } else if (u < 0.02) {
                        restart(w);
                } else if (u < 0.03 && w->n_log > 0) {
                        loom_job_id ids[MAXJ];
                        loom_sched_free(
                            replay_fresh(w, 1 + (int)(unif(w) * w->n_log) % w->n_log, ids));
                        w->fresh_checks++;
                }
        }
        cr_assert_gt(w->submits, n_jobs / 2);
        cr_log_info("seed %llu: %d submits, %d log entries, %d regroup plans, %d restarts, %d "
                    "fresh replays",
                    (unsigned long long)seed, w->submits, w->n_log, w->plans, w->restarts,
                    w->fresh_checks);
        loom_job_id ids[MAXJ];
        loom_sched *end = replay_fresh(w, w->n_log, ids);
        assert_same_core(w->live, end);
        assert_same_core(w->live, w->shadow);
        loom_sched_free(end);
        int plans = w->plans;
        loom_sched_free(w->live);
        loom_sched_free(w->shadow);
        free(w->log);
        free(w);
        return plans;
}

TestSuite(replay);

Test(replay, every_prefix_of_the_log_places_as_the_live_core_under_worst_case_admission)
{
        for (uint64_t seed = 1; seed <= 12; seed++)
                run_world(seed, LOOM_ADMIT_WORST, 120);
}

Test(replay, every_prefix_of_the_log_places_as_the_live_core_under_learned_admission)
{
        loom_policy_cfg po;
        loom_policy_cfg_default(&po);
        cr_assert(po.regroup, "regrouping is on by default");
        int plans = 0;
        for (uint64_t seed = 1; seed <= 12; seed++)
                plans += run_world(seed * 7919, LOOM_ADMIT_P99, 120);
        cr_assert_gt(plans, 0, "the worlds regroup: their logs carry plans");
}

/* The fixture's shape: two groups of one member each after exits, one member mid-rollout on its
 * rollout node when its partner left. Both groups are lone at once, whatever the phase. */
Test(replay, a_group_goes_lone_when_its_partner_leaves_even_mid_rollout)
{
        loom_cluster_cfg cl;
        loom_policy_cfg po;
        loom_cluster_cfg_default(&cl);
        loom_policy_cfg_default(&po);
        loom_sched *s = loom_sched_new(&cl, &po, NULL);
        loom_job_spec a = core_spec("a", 100, 50, 1.5, 10 * LOOM_GB, 20 * LOOM_GB);
        loom_job_spec b = core_spec("b", 100, 50, 1.5, 10 * LOOM_GB, 20 * LOOM_GB);
        loom_decision d;
        loom_decision_init(&d, false);
        loom_err e;
        loom_job_id ia, ib;
        cr_assert_eq(loom_sched_submit(s, 0, &a, &d, &ia, &e), 0);
        cr_assert_eq(loom_sched_submit(s, 0, &b, &d, &ib, &e), 0);
        cr_assert_eq(d.group, 0, "b joins a's group");
        loom_action act;
        int rolling = 0;
        while (loom_sched_next_action(s, &act))
                if (act.type == LOOM_ACT_START_PHASE && act.phase == LOOM_PHASE_ROLLOUT) {
                        loom_sched_phase_started(s, 0, act.job, act.phase);
                        rolling = (int)act.job;
                }
        cr_assert(rolling, "a rollout runs on the rollout node");
        loom_job_id stays = rolling, leaves = rolling == (int)ia ? ib : ia;
        cr_assert_eq(loom_sched_job_exit(s, 1, leaves, LOOM_EXIT_FINISHED), 0);
        loom_group_info gi;
        cr_assert_eq(loom_sched_group_info(s, 0, &gi), 0);
        int released = 0;
        while (loom_sched_next_action(s, &act))
                released += act.type == LOOM_ACT_RELEASE_NODE && act.pool == LOOM_POOL_ROLLOUT;
        cr_assert_eq(released, 0, "the running rollout keeps its node until it ends");
        cr_assert_not(gi.lone, "its node is still provisioned, and billed");
        /* but placement already sees a lone group: joining it provisions the node again */
        loom_job_spec c = core_spec("c", 100, 50, 1.5, 10 * LOOM_GB, 20 * LOOM_GB);
        loom_decision dc;
        loom_decision_init(&dc, false);
        cr_assert_eq(loom_sched_decide(s, &c, &dc, &e), 0);
        cr_assert_eq(dc.group, 0);
        cr_assert_gt(dc.marginal_cost_per_hour, 0, "%s", dc.reason);
        cr_assert_eq(loom_sched_phase_done(s, 2, stays, LOOM_PHASE_ROLLOUT), 0);
        while (loom_sched_next_action(s, &act))
                released += act.type == LOOM_ACT_RELEASE_NODE && act.pool == LOOM_POOL_ROLLOUT;
        cr_assert_eq(released, 1, "released once the rollout ended");
        cr_assert_eq(loom_sched_group_info(s, 0, &gi), 0);
        cr_assert(gi.lone);
        loom_decision_free(&d);
        loom_decision_free(&dc);
        loom_sched_free(s);
}
