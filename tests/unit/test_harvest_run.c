/*
 * test_harvest_run.c - the runs behind `loom harvest`: policy lists; the simulator's report is
 * roll first and one row (or JSON object) per policy, each the result of loom_harvest_sim_run;
 * a node served until told to stop; a replay of a trace file; the synthetic trainer's versions.
 * Every error leaves a complete message and prints nothing.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/harvest.h"
#include "sink.h"

/* ~4 requests/s for secs seconds, deterministic. */
static const char *write_trace(double secs)
{
        static char path[64];
        snprintf(path, sizeof path, "/tmp/loom-harvest-run-%d.csv", (int)getpid());
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "TIMESTAMP,ContextTokens,GeneratedTokens\n");
        uint64_t x = 99;
        for (double t = 0; t < secs;) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                t += 0.05 + (double)((x >> 33) % 1000) / 1000.0 * 0.4;
                fprintf(f, "%.4f,%u,%u\n", t, 200 + (unsigned)((x >> 20) % 1500),
                        20 + (unsigned)((x >> 40) % 300));
        }
        fclose(f);
        return path;
}

static size_t lines(const char *s)
{
        size_t n = 0;
        for (; *s; s++)
                n += *s == '\n';
        return n;
}

Test(run, policy_list)
{
        loom_harvest_policy l[LOOM_HARVEST_NPOLICIES];
        size_t n;
        loom_err e;
        cr_assert_eq(loom_harvest_policy_list("all", l, &n, &e), 0);
        cr_assert_eq(n, LOOM_HARVEST_NPOLICIES);
        for (size_t i = 0; i < n; i++)
                cr_assert_eq(l[i], (loom_harvest_policy)i);
        cr_assert_eq(loom_harvest_policy_list("eq12,,roll", l, &n, &e), 0);
        cr_assert_eq(n, 2);
        cr_assert_eq(l[0], LOOM_HARVEST_EQ12);
        cr_assert_eq(l[1], LOOM_HARVEST_ROLL);
        cr_assert_eq(loom_harvest_policy_list("rose,nope", l, &n, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "'nope' is not one of rose"), "%s", e.msg);
        char many[256] = "rose";
        for (int i = 0; i < LOOM_HARVEST_NPOLICIES; i++)
                strcat(many, ",roll");
        cr_assert_eq(loom_harvest_policy_list(many, l, &n, &e), LOOM_ERANGE);
        cr_assert_str_eq(e.msg, "too many");
}

Test(run, role_and_admit)
{
        loom_harvest_role r;
        loom_harvest_admit_mode a;
        int plain = 7;
        loom_err e;
        cr_assert_eq(loom_harvest_role_parse("decode", &r, &e), 0);
        cr_assert_eq(r, LOOM_HARVEST_DECODE);
        cr_assert_eq(loom_harvest_role_parse("prefill", &r, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.msg, "'prefill' is not colocated or decode");
        cr_assert_eq(loom_harvest_admit_parse("eq12", &a, &plain, &e), 0);
        cr_assert(a == LOOM_HARVEST_ADMIT_DUAL && plain == 1);
        cr_assert_eq(loom_harvest_admit_parse("tpot", &a, &plain, &e), 0);
        cr_assert(a == LOOM_HARVEST_ADMIT_TPOT && plain == 0);
        cr_assert_eq(loom_harvest_admit_parse("both", &a, &plain, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "'both' is not dual, eq12"), "%s", e.msg);
}

static void small(loom_harvest_sim_cfg *c)
{
        loom_harvest_sim_defaults(c);
        c->serving_gpus = 4;
        c->borrow = 4;
        c->rl_gpus = 2;
        c->batch = 8;
        c->steps = 1;
}

/* The report's rows are what loom_harvest_sim_run gives for each policy, roll being the base. */
Test(run, sim_report_is_roll_then_each_policy, .timeout = 120)
{
        const char *path = write_trace(900);
        loom_harvest_sim_cfg c;
        small(&c);
        loom_harvest_policy list[] = {LOOM_HARVEST_ROSE, LOOM_HARVEST_ROLL};
        loom_err e;
        sink table, json, want;
        sink_open(&table);
        sink_open(&json);
        sink_open(&want);
        cr_assert_eq(loom_harvest_sim_report(&c, path, list, 2, 0, table.f, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_harvest_sim_report(&c, path, list, 2, 1, json.f, &e), 0, "%s", e.msg);

        loom_harvest_trace tr;
        cr_assert_eq(loom_harvest_trace_load(path, &tr, &e), 0);
        c.trace = &tr;
        loom_harvest_sim_result r[2];
        for (int i = 1; i >= 0; i--) {
                c.policy = list[i];
                cr_assert_eq(loom_harvest_sim_run(&c, &r[i], &e), 0, "%s", e.msg);
        }
        loom_harvest_trace_free(&tr);
        for (int i = 0; i < 2; i++)
                loom_harvest_sim_print(want.f, &c, &r[i], r[1].rollout_s, 0);

        const char *t = sink_text(&table);
        cr_assert_eq(lines(t), 3, "%s", t);
        cr_assert_eq(strncmp(t, "policy ", 7), 0);
        cr_assert_str_eq(strchr(t, '\n') + 1, sink_text(&want));

        const char *j = sink_text(&json);
        cr_assert_eq(lines(j), 2, "%s", j);
        json_error_t je;
        json_t *rose = json_loadb(j, (size_t)(strchr(j, '\n') - j), 0, &je);
        json_t *roll = json_loads(strchr(j, '\n') + 1, 0, &je);
        cr_assert(rose && roll, "%s", je.text);
        cr_assert_str_eq(json_string_value(json_object_get(rose, "policy")), "rose");
        cr_assert_eq(json_integer_value(json_object_get(roll, "borrow")), 0);
        cr_assert_eq(json_integer_value(json_object_get(rose, "borrow")), 4);
        cr_assert_eq(json_integer_value(json_object_get(rose, "trajectories_per_step")), 8 * 16);
        double sp = json_real_value(json_object_get(rose, "speedup_vs_roll"));
        cr_assert_float_eq(sp, r[1].rollout_s / r[0].rollout_s, 1e-4);
        cr_assert_float_eq(json_real_value(json_object_get(roll, "speedup_vs_roll")), 1.0, 1e-9);
        cr_assert_eq(json_integer_value(json_object_get(rose, "turns_on_serving")),
                     (json_int_t)r[0].turns_on_serving);
        json_decref(rose);
        json_decref(roll);
        sink_close(&table);
        sink_close(&json);
        sink_close(&want);
        unlink(path);
}

Test(run, sim_report_errors_are_complete_and_print_nothing, .timeout = 60)
{
        loom_harvest_sim_cfg c;
        small(&c);
        loom_harvest_policy list[] = {LOOM_HARVEST_ROSE};
        loom_err e;
        sink s;
        sink_open(&s);
        cr_assert_eq(loom_harvest_sim_report(&c, "/nonexistent/t.csv", list, 1, 0, s.f, &e),
                     LOOM_EIO);
        cr_assert(strstr(e.msg, "/nonexistent/t.csv: "), "%s", e.msg);
        const char *path = write_trace(60);
        c.borrow = 5; /* more than the 4 serving GPUs */
        cr_assert_eq(loom_harvest_sim_report(&c, path, list, 1, 0, s.f, &e), LOOM_EINVAL);
        cr_assert_eq(strncmp(e.msg, "borrow: ", 8), 0, "%s", e.msg);
        cr_assert_str_eq(sink_text(&s), "");
        sink_close(&s);
        unlink(path);
}

Test(run, replay_report, .timeout = 60)
{
        loom_harvest_replay_cfg c = {
            .host = "127.0.0.1", .port = 1, .density = 1, .speed = 1000, .duration_s = 1};
        loom_harvest_replay_result r;
        loom_err e;
        sink s;
        sink_open(&s);
        cr_assert_eq(loom_harvest_replay_report(&c, "/nonexistent/t.csv", 0, s.f, &r, &e),
                     LOOM_EIO);
        cr_assert(strstr(e.msg, "/nonexistent/t.csv: "), "%s", e.msg);
        const char *path = write_trace(10);
        c.host = "not-an-address";
        cr_assert_eq(loom_harvest_replay_report(&c, path, 0, s.f, &r, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.msg, "host: 'not-an-address' is not an IPv4 address");
        cr_assert_str_eq(sink_text(&s), "");
        /* nothing listens on port 1: every request fails, which is a result, not an error */
        c.host = "127.0.0.1";
        cr_assert_eq(loom_harvest_replay_report(&c, path, 1, s.f, &r, &e), 0, "%s", e.msg);
        cr_assert(r.sent > 0 && r.ok == 0 && r.failed == r.sent);
        char want[64];
        snprintf(want, sizeof want, "{\"sent\":%llu,\"ok\":0,\"failed\":%llu,",
                 (unsigned long long)r.sent, (unsigned long long)r.sent);
        cr_assert_eq(strncmp(sink_text(&s), want, strlen(want)), 0, "%s", sink_text(&s));
        sink_close(&s);
        unlink(path);
}

static int stop_now(void)
{
        return 1;
}

static int never(void)
{
        return 0;
}

Test(run, node_serve_until_stopped, .timeout = 60)
{
        loom_harvest_node_cfg c;
        loom_harvest_node_defaults(&c);
        c.pages = 64;
        c.headroom_pages = 12;
        c.rollouts = 0;
        loom_err e;
        sink s;
        sink_open(&s);
        cr_assert_eq(loom_harvest_node_serve(&c, 0, stop_now, s.f, &e), 0, "%s", e.msg);
        const char *t = sink_text(&s);
        cr_assert_eq(strncmp(t, "listening on 127.0.0.1:", 23), 0, "%s", t);
        cr_assert_eq(lines(t), 2, "%s", t);
        json_error_t je;
        json_t *st = json_loads(strchr(t, '\n') + 1, 0, &je);
        cr_assert_not_null(st, "%s", je.text);
        cr_assert_eq(json_integer_value(json_object_get(st, "pages")), 64);
        json_decref(st);
        sink_close(&s);

        sink_open(&s);
        c.pair = "13b";
        cr_assert_eq(loom_harvest_node_serve(&c, 0, never, s.f, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.msg, "pair: '13b' is not 7b or 32b");
        cr_assert_str_eq(sink_text(&s), "");
        sink_close(&s);
}

Test(run, publish_versions, .timeout = 60)
{
        loom_harvest_publish_cfg c;
        loom_harvest_publish_defaults(&c);
        c.elems = 4096;
        c.shards = 2;
        c.versions = 2;
        c.interval_s = 0.01;
        c.for_s = 0.3;
        c.seed = 5;
        loom_err e;
        sink s;
        sink_open(&s);
        cr_assert_eq(loom_harvest_publish_serve(&c, never, s.f, &e), 0, "%s", e.msg);
        const char *t = sink_text(&s);
        cr_assert_eq(strncmp(t, "publishing on 127.0.0.1:", 24), 0, "%s", t);
        cr_assert_eq(lines(t), 3, "%s", t); /* the address, versions 1 and 2 */
        uint16_t *w = malloc(2 * c.elems);
        cr_assert_not_null(w);
        const char *line = strchr(t, '\n') + 1;
        for (uint32_t v = 1; v <= 2; v++, line = strchr(line, '\n') + 1) {
                /* version 1 is step 0; version v > 1 applies step v to the one before */
                loom_harvest_wgen(c.seed, v == 1 ? 0 : v, c.density, w, c.elems);
                uint64_t hash;
                uint32_t crc;
                loom_harvest_wdigest(w, c.elems, &hash, &crc);
                char want[96];
                snprintf(want, sizeof want,
                         "{\"version\":%u,\"hash\":\"%016llx\",\"crc32c\":\"%08x\"", v,
                         (unsigned long long)hash, crc);
                cr_assert_eq(strncmp(line, want, strlen(want)), 0, "%s vs %s", line, want);
        }
        free(w);
        sink_close(&s);

        sink_open(&s);
        c.shards = 5000; /* more shards than elements allow */
        c.elems = 4;
        cr_assert_neq(loom_harvest_publish_serve(&c, never, s.f, &e), 0);
        cr_assert_eq(strncmp(e.msg, "shards: ", 8), 0, "%s", e.msg);
        cr_assert_str_eq(sink_text(&s), "");
        sink_close(&s);
}
