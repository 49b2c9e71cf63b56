/*
 * test_server_regroup.c - regrouping plans in loomd's log (policy.regroup, src/server/regroup.c):
 * the "regroup" entry reads back the same and a damaged one names its key; a loomd whose log
 * holds a plan restarts into the same core state without searching; compaction keeps the plans;
 * a store written with regrouping off takes it on, and going back is refused.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "loom/server.h"
#include "server_http.h"
#include "srv.h"

Test(server_regroup, a_regroup_entry_reads_back_the_same)
{
        loom_regroup_plan p = {.n = 3,
                               .m = {{.job = 7, .moves = true, .to = 2},
                                     {.job = 9, .moves = true, .alone = true},
                                     {.job = 8}}},
                          back;
        uint32_t jobs[3] = {3, 5, 4}, jb[LOOM_REGROUP_MAX];
        char *t = srv_regroup_encode(&p, jobs);
        cr_assert_not_null(t);
        cr_assert_str_eq(t, "{\"plan\":[{\"core\":7,\"job\":3,\"to\":2},{\"alone\":true,\"core\":9,"
                            "\"job\":5},{\"core\":8,\"job\":4}]}");
        loom_err e;
        cr_assert_eq(srv_regroup_decode(t, &back, jb, &e), 0, "%s", e.msg);
        cr_assert_eq(back.n, 3);
        for (int i = 0; i < 3; i++)
                cr_assert(back.m[i].job == p.m[i].job && back.m[i].moves == p.m[i].moves &&
                              back.m[i].alone == p.m[i].alone && back.m[i].to == p.m[i].to &&
                              jb[i] == jobs[i],
                          "member %d", i);
        free(t);
        static const struct {
                const char *text, *field;
        } bad[] = {
            {"[]", "entry"},
            {"{\"plan\":[]}", "plan"},
            {"{\"plan\":[{\"core\":0,\"job\":1}]}", "core"},
            {"{\"plan\":[{\"core\":1}]}", "job"},
            {"{\"plan\":[{\"core\":1,\"job\":1,\"to\":-1}]}", "to"},
            {"{\"plan\":[{\"core\":1,\"job\":1,\"to\":1,\"alone\":true}]}", "to"},
            {"{\"plan\":[{\"core\":1,\"job\":1,\"alone\":false}]}", "alone"},
            {"{\"plan\":[{\"core\":1,\"job\":1},{\"core\":2,\"job\":2},{\"core\":3,\"job\":3},"
             "{\"core\":4,\"job\":4},{\"core\":5,\"job\":5},{\"core\":6,\"job\":6},{\"core\":7,"
             "\"job\":7},{\"core\":8,\"job\":8},{\"core\":9,\"job\":9}]}",
             "plan"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                cr_assert_eq(srv_regroup_decode(bad[i].text, &back, jb, &e), LOOM_ECORRUPT, "%s",
                             bad[i].text);
                cr_assert_str_eq(e.field, bad[i].field, "%s", bad[i].text);
        }
}

/* The jobs of test_core_regroup's fixture, as loomd takes them: A and B 100 s + 300 s declared,
 * SLO 1.2, 800 GB of training working set (two never share a training node declared); C
 * 50 s + 50 s, SLO 5, which joins A. */
static const char *spec(char *buf, size_t cap, const char *name, double roll, double train,
                        double slo)
{
        snprintf(buf, cap,
                 "{\"name\":\"%s\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":%g,"
                 "\"t_train_s\":%g,\"slo\":%g,\"mem_rollout_gb\":10,\"mem_train_gb\":800}",
                 name, roll, train, slo);
        return buf;
}

static void cfg_of(loom_server_cfg *cfg, const char *dir)
{
        loom_server_cfg_default(cfg);
        cfg->data_dir = dir;
        cfg->port = 0;
        cfg->policy.admission = LOOM_ADMIT_P99;
        /* no single-job moves: what moves here, the regrouping moves */
        cfg->policy.move_lone = false;
        cfg->policy.move_members = false;
        cfg->drift_window = 0; /* the learned trainings are far below the declared ones */
}

/* A loomd on cfg, started. */
static loom_server *started(const loom_server_cfg *cfg)
{
        loom_err e;
        loom_server *s = loom_server_new(cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        cr_assert_eq(loom_server_start(s, &e), 0, "%s", e.msg);
        return s;
}

typedef struct snap {
        int n;
        loom_job_info j[8];
        loom_sched_stats st;
} snap;

static void snapshot(const loom_server *s, snap *o)
{
        loom_job_id ids[8];
        o->n = loom_sched_jobs(s->sched, ids, 8);
        cr_assert_leq(o->n, 8);
        for (int i = 0; i < o->n; i++)
                cr_assert_eq(loom_sched_job_info(s->sched, ids[i], &o->j[i]), 0);
        loom_sched_stats_get(s->sched, &o->st);
}

static void assert_same(const snap *a, const snap *b)
{
        cr_assert_eq(a->n, b->n);
        for (int i = 0; i < a->n; i++) {
                const loom_job_info *x = &a->j[i], *y = &b->j[i];
                cr_assert(
                    x->id == y->id && x->group == y->group &&
                        x->n_rollout_nodes == y->n_rollout_nodes &&
                        !memcmp(x->rollout_nodes, y->rollout_nodes, sizeof x->rollout_nodes) &&
                        x->learned_budget == y->learned_budget,
                    "core job %u", x->id);
                cr_assert(x->regroup_planned == y->regroup_planned &&
                              x->regroup_alone == y->regroup_alone &&
                              x->regroup_to == y->regroup_to &&
                              x->regroup_tries == y->regroup_tries,
                          "core job %u: plan %d to %u tries %d, replayed %d to %u tries %d", x->id,
                          x->regroup_planned, x->regroup_to, x->regroup_tries, y->regroup_planned,
                          y->regroup_to, y->regroup_tries);
        }
        cr_assert_eq(a->st.groups, b->st.groups);
}

static int log_count(loom_server *s, const char *kind)
{
        srv_log_row *rows = NULL;
        size_t n = 0;
        loom_err e;
        cr_assert_eq(srv_store_log_rows(s->store, &rows, &n, &e), 0, "%s", e.msg);
        int k = 0;
        for (size_t i = 0; i < n; i++)
                k += !strcmp(rows[i].kind, kind);
        srv_log_rows_free(rows, n);
        return k;
}

/* One finished phase of each live job, as loomd's release hands it on (retry.c). */
static void observe(loom_server *s, uint32_t id, loom_phase ph, double secs)
{
        srv_job *j = srv_job_get(s, id);
        cr_assert_not_null(j);
        if (srv_job_live(j->state))
                srv_observe_phase(s, j, ph,
                                  ph == LOOM_PHASE_ROLLOUT ? LOOM_POOL_ROLLOUT : LOOM_POOL_TRAIN, 0,
                                  loom_us_from_s(secs), 0);
}

/*
 * The fixture of test_core_regroup driven through loomd's own code: submits over HTTP, then
 * (loomd restarted, its engine not running, so this thread is the only one) the observations
 * and C's departure as a release hands them on, each batch in one transaction. C's departure
 * regroups A and B: a "regroup" entry follows its "exit" entry, and the planned member's next
 * training end moves it ("readmit"). A restart replays that log into a core in the very state
 * of the live one - plans, tries, groups - with no search, and no divergence reported. A
 * compaction keeps the plan, and the log it leaves replays the same.
 */
Test(server_regroup, a_restart_replays_the_logged_plan_without_searching)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server_cfg cfg;
        cfg_of(&cfg, dir);
        cr_assert(cfg.policy.regroup, "regrouping is on by default");
        loom_server *s = started(&cfg);
        int port = loom_server_port(s);
        char b[512], *out;
        cr_assert_eq(
            test_http(port, "POST", "/v1/jobs", spec(b, sizeof b, "A", 100, 300, 1.2), &out), 201,
            "%s", out);
        free(out);
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", spec(b, sizeof b, "C", 50, 50, 5), &out),
                     201, "%s", out);
        cr_assert(strstr(out, "direct_pack") != NULL, "C joins A: %s", out);
        free(out);
        cr_assert_eq(
            test_http(port, "POST", "/v1/jobs", spec(b, sizeof b, "B", 100, 300, 1.2), &out), 201,
            "%s", out);
        cr_assert(strstr(out, "new_group") != NULL, "B cannot join A declared: %s", out);
        free(out);
        cr_assert_eq(test_http(port, "GET", "/v1/cluster", NULL, &out), 200);
        cr_assert(strstr(out, "\"regroup\":true") != NULL, "%s", out);
        free(out);
        loom_server_free(s);

        s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        const uint32_t A = 1, C = 2, B = 3;
        for (int it = 0; it < 6; it++) {
                cr_assert_eq(srv_store_begin(s->store, &e), 0, "%s", e.msg);
                for (uint32_t id = 1; id <= 3; id++) {
                        observe(s, id, LOOM_PHASE_ROLLOUT, id == C ? 50 : 100);
                        observe(s, id, LOOM_PHASE_TRAIN, id == C ? 50 : 60);
                }
                cr_assert_eq(srv_store_commit(s->store, &e), 0, "%s", e.msg);
        }
        cr_assert_eq(log_count(s, "readmit"), 0, "nothing moves while C runs");
        int before = log_count(s, "regroup");
        cr_assert_eq(srv_store_begin(s->store, &e), 0, "%s", e.msg);
        srv_end_job(s, srv_job_get(s, C), SJ_FINISHED, "released", "reached its iterations");
        cr_assert_eq(srv_store_commit(s->store, &e), 0, "%s", e.msg);
        cr_assert_eq(log_count(s, "regroup"), before + 1, "C's departure logs its plan");
        int moved = 0;
        for (int it = 0; it < 8 && !moved; it++) {
                cr_assert_eq(srv_store_begin(s->store, &e), 0, "%s", e.msg);
                observe(s, A, LOOM_PHASE_ROLLOUT, 100);
                observe(s, A, LOOM_PHASE_TRAIN, 60);
                observe(s, B, LOOM_PHASE_ROLLOUT, 100);
                observe(s, B, LOOM_PHASE_TRAIN, 60);
                cr_assert_eq(srv_store_commit(s->store, &e), 0, "%s", e.msg);
                moved = log_count(s, "readmit");
        }
        cr_assert_eq(moved, 1, "the plan moves one of A and B");
        /* rounds in the merged group, more than compaction keeps */
        for (int it = 0; it < 3 * LOOM_LEARN_WINDOW; it++) {
                cr_assert_eq(srv_store_begin(s->store, &e), 0, "%s", e.msg);
                for (uint32_t id = 1; id <= 3; id++) {
                        observe(s, id, LOOM_PHASE_ROLLOUT, id == C ? 50 : 100);
                        observe(s, id, LOOM_PHASE_TRAIN, id == C ? 50 : 60);
                }
                cr_assert_eq(srv_store_commit(s->store, &e), 0, "%s", e.msg);
        }
        cr_assert_eq(log_count(s, "readmit"), 1);
        snap live, back;
        snapshot(s, &live);
        cr_assert_gt(live.st.regroup_solves, 0, "the live core searched");
        cr_assert_eq(live.st.groups, 1, "A and B share one group");
        int plans = log_count(s, "regroup");
        loom_server_free(s);

        s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        snapshot(s, &back);
        assert_same(&live, &back);
        cr_assert_eq(back.st.regroup_solves, 0, "a restart applies the plans, it never searches");
        cr_assert_eq(back.st.regroup_applied, (uint64_t)plans);
        char *div = NULL;
        cr_assert_eq(srv_store_meta_get(s->store, "replay_divergences", &div, &e), 0);
        cr_assert_null(div, "%s", div);

        int64_t dropped = -1;
        cr_assert_eq(srv_compact(s, &dropped, &e), 0, "%s", e.msg);
        cr_assert_gt(dropped, 0);
        cr_assert_eq(log_count(s, "regroup"), plans, "compaction keeps the plans");
        cr_log_info("%d plans logged, %llu searches live, %lld entries compacted", plans,
                    (unsigned long long)live.st.regroup_solves, (long long)dropped);
        snapshot(s, &back);
        loom_server_free(s);
        s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        snap again;
        snapshot(s, &again);
        assert_same(&back, &again);
        cr_assert_eq(again.st.regroup_solves, 0);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

/* The same fixture, but C asks for 7 iterations and reaches them, as a release ends it: the core
 * counts C's last training (loom_sched_phase_done) and ends C itself (LOOM_ACT_JOB_DONE, its
 * own loom_sched_job_exit, which re-solves A and B), before loomd's end_job exits it again.
 * The plan that departure made must be in the log, or a restart's core lacks it. */
Test(server_regroup, a_job_the_core_ends_at_its_iterations_logs_its_departure_s_plan)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server_cfg cfg;
        cfg_of(&cfg, dir);
        loom_server *s = started(&cfg);
        int port = loom_server_port(s);
        char b[512], *out;
        cr_assert_eq(
            test_http(port, "POST", "/v1/jobs", spec(b, sizeof b, "A", 100, 300, 1.2), &out), 201,
            "%s", out);
        free(out);
        spec(b, sizeof b, "C", 50, 50, 5);
        strcpy(b + strlen(b) - 1, ",\"iterations\":7}");
        cr_assert_eq(test_http(port, "POST", "/v1/jobs", b, &out), 201, "%s", out);
        cr_assert(strstr(out, "direct_pack") != NULL, "C joins A: %s", out);
        free(out);
        cr_assert_eq(
            test_http(port, "POST", "/v1/jobs", spec(b, sizeof b, "B", 100, 300, 1.2), &out), 201,
            "%s", out);
        free(out);
        loom_server_free(s);

        s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        const uint32_t C = 2;
        for (int it = 0; it < 6; it++) {
                cr_assert_eq(srv_store_begin(s->store, &e), 0, "%s", e.msg);
                for (uint32_t id = 1; id <= 3; id++) {
                        observe(s, id, LOOM_PHASE_ROLLOUT, id == C ? 50 : 100);
                        observe(s, id, LOOM_PHASE_TRAIN, id == C ? 50 : 60);
                }
                cr_assert_eq(srv_store_commit(s->store, &e), 0, "%s", e.msg);
        }
        /* C's six trainings counted, as their releases and "iter" entries leave them */
        srv_job *c = srv_job_get(s, C);
        c->done = 6;
        cr_assert_eq(loom_sched_job_iterations(s->sched, c->retry.core, 6), 0);
        /* C's seventh iteration, as the core runs it */
        loom_job_info info;
        cr_assert_eq(loom_sched_job_info(s->sched, c->retry.core, &info), 0);
        loom_resume rs = {.job = c->retry.core, .phase = LOOM_PHASE_TRAIN, .running = true};
        cr_assert_eq(loom_sched_resume(s->sched, 0, &rs, 1), 1);
        cr_assert_eq(loom_sched_job_info(s->sched, c->retry.core, &info), 0);
        cr_assert_eq(info.state, LOOM_JOB_TRAINING, "state %d", info.state);
        loom_sched_stats st0, st1;
        loom_sched_stats_get(s->sched, &st0);
        int before = log_count(s, "regroup");
        /* h_release's order: the core's phase_done, then end_job at loomd's count */
        cr_assert_eq(srv_store_begin(s->store, &e), 0, "%s", e.msg);
        c->done++;
        cr_assert_eq(loom_sched_phase_done(s->sched, 0, c->retry.core, LOOM_PHASE_TRAIN), 0);
        loom_sched_stats_get(s->sched, &st1);
        cr_assert_eq(loom_sched_job_info(s->sched, c->retry.core, &info), LOOM_ENOENT,
                     "the core ended C at its 7th iteration");
        cr_assert_eq(st1.regroup_plans, st0.regroup_plans + 1, "C's departure made a plan");
        srv_end_job(s, c, SJ_FINISHED, "released", "reached its iterations");
        cr_assert_eq(srv_store_commit(s->store, &e), 0, "%s", e.msg);
        snap live, back;
        snapshot(s, &live);
        cr_expect_eq(log_count(s, "regroup"), before + 1, "C's departure logs its plan");
        loom_server_free(s);

        s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        snapshot(s, &back);
        assert_same(&live, &back);
        loom_server_free(s);
        test_rmdir(dir);
        free(dir);
}

/* A store written with regrouping off (as every store before it was on by default) has no plans
 * in its log: it replays the same with regrouping on, and takes it on. Going back is refused,
 * as for any change of what the log's placements depend on. */
Test(server_regroup, a_store_without_plans_takes_regrouping_on_and_keeps_it)
{
        char *dir = test_tmpdir();
        loom_err e;
        loom_server_cfg cfg;
        cfg_of(&cfg, dir);
        cfg.policy.regroup = false;
        loom_server *s = started(&cfg);
        char b[512], *out;
        cr_assert_eq(test_http(loom_server_port(s), "POST", "/v1/jobs",
                               spec(b, sizeof b, "A", 100, 300, 1.2), &out),
                     201, "%s", out);
        free(out);
        loom_server_free(s);
        cfg.policy.regroup = true;
        s = loom_server_new(&cfg, &e);
        cr_assert_not_null(s, "%s", e.msg);
        char *pol = NULL;
        cr_assert_eq(srv_store_meta_get(s->store, "policy", &pol, &e), 0);
        cr_assert(pol && strstr(pol, " regroup=on"), "%s", pol);
        free(pol);
        loom_server_free(s);
        cfg.policy.regroup = false;
        s = loom_server_new(&cfg, &e);
        cr_assert_null(s, "a regrouping store does not go back");
        cr_assert(strstr(e.msg, "another policy") != NULL, "%s", e.msg);
        test_rmdir(dir);
        free(dir);
}
