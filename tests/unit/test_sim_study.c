/*
 * test_sim_study.c - whole studies as `loom sim` runs them: the sweep's per-seed rows averaged
 * into each format, a study that fails printing nothing, the per-job CSV, the cost ladder, and
 * the PlexRL study's policy list and rows.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/plexsim.h"
#include "loom/sim.h"
#include "sink.h"

static int count_lines(const char *s, const char *prefix)
{
        int n = 0;
        for (const char *p = s; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                n += !strncmp(p, prefix, strlen(prefix));
        return n;
}

/* Eight jobs of one to sixteen GPUs, written to a temporary CSV. */
static void write_trace(char *path)
{
        strcpy(path, "/tmp/loom-study-XXXXXX");
        int fd = mkstemp(path);
        cr_assert(fd >= 0);
        FILE *f = fdopen(fd, "w");
        fprintf(f, "job_id,arrival_s,duration_s,gpus,source_model\n");
        for (int i = 0; i < 8; i++)
                fprintf(f, "j%d,%d,%d,%d,x\n", i, 600 * i, 20000 + 3000 * i, 1 << (i % 5));
        fclose(f);
}

/* Two seeds of loom and of the bound in one setting. */
static const loom_sim_sweep_row rows[] = {
    {'a', "balanced", LOOM_SIM_LOOM, 0, 2.0, 100, 0.5, 0.8, 1.5, 10},
    {'a', "balanced", LOOM_SIM_LOOM, 1, 4.0, 200, 1.0, 1.0, 1.2, 10},
    {'a', "balanced", LOOM_SIM_LB, 0, 1.0, 50, 0, 0, 0, 10},
    {'a', "balanced", LOOM_SIM_LB, 1, 1.0, 70, 0, 0, 0, 10},
};

static char *sweep_text(loom_sim_format fmt)
{
        loom_sim_sweep_out out = {4, (loom_sim_sweep_row *)rows, 4000000, 2.0};
        sink s;
        sink_open(&s);
        loom_err e;
        cr_assert_eq(loom_sim_sweep_report(s.f, &out, 2, fmt, NULL, &e), 0, "%s", e.msg);
        return sink_take(&s);
}

Test(sim_study, sweep_report_averages_seeds_and_leaves_the_bound_without_slo)
{
        char *csv = sweep_text(LOOM_SIM_CSV);
        cr_assert_str_eq(csv, "figure,setting,policy,cost_vs_lb,cost_vs_lb_min,cost_vs_lb_max,"
                              "slo_attainment,slo_min,slo_max,slo_attainment_profiled,"
                              "avg_cost_per_hour\n"
                              "15a,balanced,loom,3.0000,2.0000,4.0000,0.7500,0.5000,1.0000,"
                              "0.9000,150.00\n"
                              "15a,balanced,lb,1.0000,1.0000,1.0000,,,,,60.00\n");
        free(csv);
        char *json = sweep_text(LOOM_SIM_JSON);
        cr_assert(strstr(json, "\"policy\":\"loom\",\"seeds\":2,\"cost_vs_lb\":3.0000"), "%s",
                  json);
        cr_assert(strstr(json, "\"policy\":\"lb\",\"seeds\":2,\"cost_vs_lb\":1.0000,\"cost_vs_lb_"
                               "min\":1.0000,\"cost_vs_lb_max\":1.0000,\"slo_attainment\":null"),
                  "%s", json);
        cr_assert_eq(count_lines(json, "{"), 2);
        free(json);
        char *table = sweep_text(LOOM_SIM_TABLE);
        cr_assert(strstr(table, "15a balanced       lb             1.000     1.000     1.000       "
                                "-       -       -       -\n"),
                  "%s", table);
        cr_assert(strstr(table, "4000000 events in 2.00 s of run time (2.00 M events/s per "
                                "thread)\n"),
                  "%s", table);
        free(table);
        loom_sim_sweep_out out = {4, (loom_sim_sweep_row *)rows, 0, 0};
        loom_err e;
        cr_assert_eq(loom_sim_sweep_report(stdout, &out, 0, LOOM_SIM_CSV, NULL, &e), LOOM_EINVAL);
}

/* Settings that cannot go together are refused before anything runs, with the reason; the
 * oracle settings are accepted wherever an oracle runs. */
Test(sim_study, conflicting_settings_are_refused)
{
        loom_sim_study_cfg c;
        loom_sim_study_cfg_default(&c);
        cr_assert_null(loom_sim_study_conflict(&c));
        c.sim.oracle_restarts = true;
        cr_assert_null(loom_sim_study_conflict(&c), "every policy runs, the oracle among them");
        c.policies = 1u << LOOM_SIM_LOOM;
        cr_assert(strstr(loom_sim_study_conflict(&c), "only the oracle"));
        c.kind = LOOM_SIM_STUDY_SWEEP;
        c.policies = 0;
        cr_assert_not_null(loom_sim_study_conflict(&c), "the sweep's default has no oracle");
        c.policies = 1u << LOOM_SIM_ORACLE;
        cr_assert_null(loom_sim_study_conflict(&c));
        c.kind = LOOM_SIM_STUDY_DECOMPOSE;
        cr_assert(strstr(loom_sim_study_conflict(&c), "--decompose runs its own policies"));
        c.policies = 0;
        cr_assert_null(loom_sim_study_conflict(&c), "the ladder runs the oracle");
        c.format = LOOM_SIM_CSV;
        cr_assert_not_null(loom_sim_study_conflict(&c));
        sink s;
        sink_open(&s);
        loom_err e;
        cr_assert_eq(loom_sim_study(&c, s.f, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "--decompose"), "%s", e.msg);
        char *out = sink_take(&s);
        cr_assert_str_eq(out, "");
        free(out);
}

Test(sim_study, a_failing_study_prints_nothing)
{
        char trace[64];
        write_trace(trace);
        loom_sim_study_cfg c;
        loom_sim_study_cfg_default(&c);
        c.trace = "/nonexistent/trace.csv";
        sink s;
        sink_open(&s);
        loom_err e;
        cr_assert_neq(loom_sim_study(&c, s.f, &e), 0);
        cr_assert(strstr(e.msg, "/nonexistent/trace.csv"), "%s", e.msg);
        char *out = sink_take(&s);
        cr_assert_str_eq(out, "");
        free(out);
        /* the policies run, then the per-job file cannot be created: still no report */
        c.trace = trace;
        c.start = 0;
        c.count = 8;
        c.policies = 1u << LOOM_SIM_LOOM | 1u << LOOM_SIM_LB;
        c.per_job = "/nonexistent/jobs.csv";
        sink_open(&s);
        cr_assert_eq(loom_sim_study(&c, s.f, &e), LOOM_EIO);
        cr_assert(strstr(e.msg, "/nonexistent/jobs.csv: cannot create"), "%s", e.msg);
        out = sink_take(&s);
        cr_assert_str_eq(out, "");
        free(out);
        unlink(trace);
}

Test(sim_study, compare_prints_each_policy_and_writes_every_job)
{
        char trace[64], jobs[] = "/tmp/loom-jobs-XXXXXX";
        write_trace(trace);
        close(mkstemp(jobs));
        loom_sim_study_cfg c;
        loom_sim_study_cfg_default(&c);
        c.trace = trace;
        c.start = 0;
        c.count = 8;
        c.policies = 1u << LOOM_SIM_LOOM | 1u << LOOM_SIM_SOLO | 1u << LOOM_SIM_LB;
        c.format = LOOM_SIM_JSON;
        c.per_job = jobs;
        sink s;
        sink_open(&s);
        loom_err e;
        cr_assert_eq(loom_sim_study(&c, s.f, &e), 0, "%s", e.msg);
        char *out = sink_take(&s);
        cr_assert_eq(count_lines(out, "{\"policy\":\"loom\""), 1, "%s", out);
        cr_assert_eq(count_lines(out, "{\"policy\":\"solo\""), 1, "%s", out);
        cr_assert_eq(count_lines(out, "{\"policy\":\"lb\""), 1, "%s", out);
        cr_assert_eq(count_lines(out, ""), 3, "%s", out);
        free(out);
        FILE *f = fopen(jobs, "r");
        char line[512];
        int loom = 0, solo = 0, met = 0;
        cr_assert(fgets(line, sizeof line, f) && !strncmp(line, "policy,job,", 11));
        while (fgets(line, sizeof line, f)) {
                loom += !strncmp(line, "loom,", 5);
                solo += !strncmp(line, "solo,", 5);
                met += !strncmp(line, "solo,", 5) && !strcmp(strrchr(line, ',') + 1, "1\n");
        }
        fclose(f);
        cr_assert_eq(loom, 8, "one row per job");
        cr_assert_eq(solo, 8);
        cr_assert_eq(met, 8, "a job alone meets its SLO");
        unlink(jobs);
        /* the ladder, one line per rung, then what the targets need, one line per row */
        c.kind = LOOM_SIM_STUDY_DECOMPOSE;
        c.policies = 0;
        c.per_job = NULL;
        sink_open(&s);
        cr_assert_eq(loom_sim_study(&c, s.f, &e), 0, "%s", e.msg);
        out = sink_take(&s);
        cr_assert_eq(count_lines(out, "{\"rung\""), LOOM_SIM_RUNGS, "%s", out);
        cr_assert_eq(count_lines(out, "{\"regrouping\""), LOOM_SIM_REGROUPINGS, "%s", out);
        free(out);
        unlink(trace);
}

Test(sim_study, plex_policy_lists)
{
        unsigned m;
        cr_assert_eq(loom_plexsim_policy_list_parse("plex-pack,plex-backfill", &m), 0);
        cr_assert_eq(m, 1u << LOOM_PLEXSIM_PACK | 1u << LOOM_PLEXSIM_BACKFILL);
        cr_assert_eq(loom_plexsim_policy_list_parse("plex-all", &m), 0);
        cr_assert_eq(m, 0xfu);
        cr_assert_eq(loom_plexsim_policy_list_parse("plex-pack,plex-nosuch", &m), -1);
        cr_assert_eq(loom_plexsim_policy_list_parse("", &m), -1);
}

Test(sim_study, plex_study_prints_the_chosen_policies_against_isolated)
{
        char trace[64];
        write_trace(trace);
        loom_plexsim_study_cfg c;
        loom_plexsim_study_cfg_default(&c);
        c.trace = trace;
        c.start = 0;
        c.count = 8;
        c.nodes = 12;
        c.policies = 1u << LOOM_PLEXSIM_PACK;
        c.dispatch = c.weave = false;
        c.json = true;
        sink s;
        sink_open(&s);
        loom_err e;
        cr_assert_eq(loom_plexsim_study(&c, s.f, &e), 0, "%s", e.msg);
        char *out = sink_take(&s);
        cr_assert_eq(count_lines(out, ""), 1, "isolated ran only as the baseline: %s", out);
        cr_assert(strstr(out, "{\"policy\":\"plex-pack\",\"jobs\":8,\"nodes\":12,"), "%s", out);
        free(out);
        c.policies |= 1u << LOOM_PLEXSIM_ISOLATED;
        sink_open(&s);
        cr_assert_eq(loom_plexsim_study(&c, s.f, &e), 0, "%s", e.msg);
        out = sink_take(&s);
        cr_assert(
            strstr(out, "\"policy\":\"plex-isolated\",\"jobs\":8,\"nodes\":12,\"makespan_h\":"),
            "%s", out);
        cr_assert(strstr(out, "\"makespan_vs_isolated\":1.0000"), "%s", out);
        free(out);
        c.trace = "/nonexistent/trace.csv";
        sink_open(&s);
        cr_assert_neq(loom_plexsim_study(&c, s.f, &e), 0);
        out = sink_take(&s);
        cr_assert_str_eq(out, "", "a trace that cannot be read prints nothing");
        free(out);
        unlink(trace);
}
