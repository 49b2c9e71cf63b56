/*
 * test_spec.c - the JSON formats: scenarios decode, and every kind of invalid input is rejected
 * naming the field with its line and column.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "loom/spec.h"

static int parse(const char *text, loom_scenario *sc, loom_err *e)
{
        loom_err_clear(e);
        return loom_scenario_parse(text, strlen(text), sc, e);
}

#define JOB "\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":100,\"t_train_s\":50,\"slo\":1.5"

Test(spec, a_full_scenario_decodes)
{
        const char *t = "{\"cluster\":{\"gpus_per_node\":4,\"host_mem_gb\":1000,"
                        "\"rollout_gpu\":{\"name\":\"L40\",\"price_per_hour\":1.0}},"
                        "\"policy\":{\"max_group_size\":3,\"tail_threshold\":0.9,"
                        "\"placer\":\"greedy\",\"admission\":\"p95\",\"learn_after\":5},"
                        "\"jobs\":[{\"id\":\"a\"," JOB ",\"sync_s\":5,\"model_b\":7,"
                        "\"iterations\":10,\"switch_s\":1.5,\"head_s\":40,\"cold_s\":55}]}";
        loom_scenario sc;
        loom_err e;
        cr_assert_eq(parse(t, &sc, &e), 0, "%s", e.msg);
        cr_assert_eq(sc.cluster.gpus_per_node, 4);
        cr_assert_eq(sc.cluster.host_mem_bytes, 1000 * LOOM_GB);
        cr_assert_str_eq(sc.cluster.gpu[0].name, "L40");
        cr_assert_float_eq(sc.cluster.gpu[1].price_per_hour, 5.28, 1e-12);
        cr_assert_eq(sc.policy.max_group_size, 3);
        cr_assert_eq(sc.policy.placer, LOOM_PLACER_GREEDY);
        cr_assert_eq(sc.policy.admission, LOOM_ADMIT_P95);
        cr_assert_eq(sc.policy.learn_after, 5);
        cr_assert_eq(sc.n_jobs, 1);
        cr_assert_eq(sc.jobs[0].t_sync, 5 * LOOM_US_PER_S);
        cr_assert_eq(sc.jobs[0].mem_rollout, loom_table2_mem_rollout(7));
        cr_assert_eq(sc.jobs[0].mem_rollout, 275700000000ULL);
        cr_assert_eq(sc.jobs[0].iterations, 10);
        cr_assert_eq(sc.jobs[0].t_switch, loom_us_from_s(1.5));
        cr_assert_eq(sc.jobs[0].t_head, loom_us_from_s(40));
        cr_assert_eq(sc.jobs[0].t_cold, loom_us_from_s(55));
        /* they come back out, and only when given */
        json_t *o = loom_job_spec_to_json(&sc.jobs[0]);
        cr_assert_float_eq(json_real_value(json_object_get(o, "switch_s")), 1.5, 1e-9);
        cr_assert_float_eq(json_real_value(json_object_get(o, "head_s")), 40, 1e-9);
        cr_assert_float_eq(json_real_value(json_object_get(o, "cold_s")), 55, 1e-9);
        json_decref(o);
        sc.jobs[0].t_switch = 0;
        sc.jobs[0].t_head = 0;
        sc.jobs[0].t_cold = 0;
        o = loom_job_spec_to_json(&sc.jobs[0]);
        cr_assert_null(json_object_get(o, "switch_s"));
        cr_assert_null(json_object_get(o, "head_s"));
        cr_assert_null(json_object_get(o, "cold_s"));
        json_decref(o);
        loom_scenario_free(&sc);
}

typedef struct bad {
        const char *text;
        const char *field;
        int line, col;
} bad;

Test(spec, invalid_input_names_field_line_and_column)
{
        static const bad cases[] = {
            {"{\"jobs\":[{" JOB "},\n  {\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":1,"
             "\"t_train_s\":1,\"slo\":0.5}]}",
             "jobs[1].slo", 2, 69},
            {"{\"jobs\":[{\"rollout_gpus\":\"8\",\"train_gpus\":8}]}", "jobs[0].rollout_gpus", 1,
             26},
            {"{\"jobs\":[{\"train_gpus\":8}]}", "jobs[0].rollout_gpus", 1, 10},
            {"{\"jobs\":[{" JOB ",\"colour\":1}]}", "jobs[0].colour", 1, 92},
            {"{\"jobs\":[{\"rollout_gpus\":12,\"train_gpus\":8,\"t_roll_s\":1,"
             "\"t_train_s\":1,\"slo\":1}]}",
             "jobs[0].rollout_gpus", 1, 26},
            {"{\"jobs\":[{\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":-1,"
             "\"t_train_s\":1,\"slo\":1}]}",
             "jobs[0].t_roll_s", 1, 54},
            {"{\"jobs\":[{" JOB ",\"mem_rollout_gb\":-5}]}", "jobs[0].mem_rollout_gb", 1, 100},
            {"{\"jobs\":[{" JOB ",\"switch_s\":0}]}", "jobs[0].switch_s", 1, 94},
            {"{\"jobs\":[{" JOB ",\"head_s\":150}]}", "jobs[0].head_s", 1, 92},
            {"{\"jobs\":[{" JOB ",\"head_s\":0}]}", "jobs[0].head_s", 1, 92},
            {"{\"jobs\":[{" JOB ",\"cold_s\":-55}]}", "jobs[0].cold_s", 1, 92},
            {"{\"cluster\":{\"gpus_per_node\":0},\"jobs\":[]}", "cluster.gpus_per_node", 1, 29},
            {"{\"policy\":{\"tail_threshold\":1.5},\"jobs\":[]}", "policy.tail_threshold", 1, 29},
            {"{\"policy\":{\"placer\":\"best\"},\"jobs\":[]}", "policy.placer", 1, 21},
            {"{\"policy\":{\"admission\":\"p50\"},\"jobs\":[]}", "policy.admission", 1, 24},
            {"{\"policy\":{\"learn_after\":0},\"jobs\":[]}", "policy.learn_after", 1, 26},
            {"{\"jobs\":{}}", "jobs", 1, 9},
            {"[1,2]", "", 1, 1},
            {"{\"jobs\":[{\"id\":\"x\"," JOB "},{\"id\":\"x\"," JOB "}]}", "jobs[1].id", 1, 99},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                loom_scenario sc;
                loom_err e;
                cr_assert_eq(parse(cases[i].text, &sc, &e), LOOM_EINVAL, "case %zu accepted", i);
                cr_assert_str_eq(e.field, cases[i].field, "case %zu: field %s (%s)", i, e.field,
                                 e.msg);
                cr_assert_eq(e.line, cases[i].line, "case %zu: line %d (%s)", i, e.line, e.msg);
                cr_assert_eq(e.col, cases[i].col, "case %zu: col %d (%s)", i, e.col, e.msg);
                cr_assert_null(sc.jobs);
        }
}

Test(spec, syntax_errors_have_positions)
{
        loom_scenario sc;
        loom_err e;
        cr_assert_eq(parse("{\"jobs\": [\n  {,}\n]}", &sc, &e), LOOM_EINVAL);
        cr_assert_eq(e.line, 2);
        cr_assert_gt(e.col, 0);
        cr_assert(strstr(e.msg, "invalid JSON"));
}

Test(spec, empty_and_truncated_files_have_positions)
{
        /* jansson gives no position (-1:-1) for no text and column 0 at a line's start */
        const struct {
                const char *text;
                int line, col;
                const char *msg;
        } cases[] = {
            {"", 1, 1, "invalid JSON: empty, no value"},
            {"  \n\t", 1, 1, "invalid JSON: only white space, no value"},
            {"{\"jobs\": [\n", 2, 1, "invalid JSON: ']' expected near end of file"},
            {"{\"jobs\": [", 1, 10, "invalid JSON: ']' expected near end of file"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                loom_scenario sc;
                loom_err e;
                cr_assert_eq(parse(cases[i].text, &sc, &e), LOOM_EINVAL, "case %zu", i);
                cr_assert_eq(e.line, cases[i].line, "case %zu: line %d", i, e.line);
                cr_assert_eq(e.col, cases[i].col, "case %zu: col %d", i, e.col);
                cr_assert_str_eq(e.msg, cases[i].msg, "case %zu", i);
        }
        loom_err e;
        cr_assert_null(loom_json_parse(NULL, 0, &e));
        cr_assert_eq(e.line, 1);
        cr_assert_eq(e.col, 1);
}

Test(spec, an_unknown_field_suggests_the_nearest_known_one)
{
        const struct {
                const char *text, *msg;
        } cases[] = {
            {"{\"jobs\": [{\"rollout_gpu\": 8}]}",
             "jobs[0].rollout_gpu: unknown field (did you mean \"rollout_gpus\"?)"},
            {"{\"jobs\": [], \"polcy\": {}}", "polcy: unknown field (did you mean \"policy\"?)"},
            {"{\"jobs\": [], \"policy\": {\"Max_Grop_Size\": 2}}",
             "policy.Max_Grop_Size: unknown field (did you mean \"max_group_size\"?)"},
            {"{\"jobs\": [], \"cluster\": {\"gpus_per_nod\": 8}}",
             "cluster.gpus_per_nod: unknown field (did you mean \"gpus_per_node\"?)"},
            /* nothing near: no guess */
            {"{\"jobs\": [], \"cluster\": {\"colour\": 1}}", "cluster.colour: unknown field"},
            {"{\"jobs\": [], \"xy\": 1}", "xy: unknown field"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                loom_scenario sc;
                loom_err e;
                cr_assert_eq(parse(cases[i].text, &sc, &e), LOOM_EINVAL, "case %zu", i);
                cr_assert_str_eq(e.msg, cases[i].msg, "case %zu", i);
        }
}

Test(spec, locate_finds_nested_paths)
{
        const char *t = "{\"a\": {\"b\": [1, {\"c\": 2}]},\n \"d\": \"x\"}";
        int l, c;
        cr_assert_eq(loom_json_locate(t, strlen(t), "a.b[1].c", &l, &c), 0);
        cr_assert_eq(l, 1);
        cr_assert_eq(c, 23);
        cr_assert_eq(loom_json_locate(t, strlen(t), "d", &l, &c), 0);
        cr_assert_eq(l, 2);
        cr_assert_eq(c, 7);
        cr_assert_eq(loom_json_locate(t, strlen(t), "a.zz", &l, &c), LOOM_ENOENT);
}

Test(spec, decision_json_has_the_documented_fields)
{
        loom_decision d;
        loom_decision_init(&d, false);
        d.kind = LOOM_DECISION_DIRECT_PACK;
        d.n_rollout_nodes = 1;
        d.n_train_nodes = 1;
        d.t_meta = 260 * LOOM_US_PER_S;
        json_t *o = loom_decision_to_json(&d, "B");
        const char *keys[] = {"job",           "decision",    "group",
                              "rollout_nodes", "train_nodes", "marginal_cost_per_hour",
                              "t_meta_s",      "candidates",  "reason"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
                cr_assert_not_null(json_object_get(o, keys[i]), "missing %s", keys[i]);
        cr_assert_str_eq(json_string_value(json_object_get(o, "decision")), "direct_pack");
        cr_assert_float_eq(json_real_value(json_object_get(o, "t_meta_s")), 260.0, 1e-9);
        json_decref(o);
}

Test(spec, train_rightsize_is_a_policy_bool)
{
        loom_scenario sc;
        loom_err e;
        cr_assert_eq(parse("{\"jobs\":[]}", &sc, &e), 0, "%s", e.msg);
        cr_assert_not(sc.policy.train_rightsize, "off by default");
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"train_rightsize\":true},\"jobs\":[]}", &sc, &e), 0, "%s",
                     e.msg);
        cr_assert(sc.policy.train_rightsize);
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"train_rightsize\":1},\"jobs\":[]}", &sc, &e),
                     LOOM_EINVAL);
        cr_assert_str_eq(e.field, "policy.train_rightsize", "%s", e.msg);
        cr_assert_eq(e.line, 1);
        cr_assert_eq(e.col, 30, "col %d", e.col);
}

/* Where wide rate searches begin: the default, a value, and an error naming the field. */
Test(spec, rate_search_open_in_the_policy)
{
        loom_scenario sc;
        loom_err e;
        cr_assert_eq(parse("{\"jobs\":[]}", &sc, &e), 0, "%s", e.msg);
        cr_assert_eq(loom_policy_rate_search_open(&sc.policy), LOOM_RATE_SEARCH_OPEN);
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"rate_search_open\":2000},\"jobs\":[]}", &sc, &e), 0,
                     "%s", e.msg);
        cr_assert_eq(loom_policy_rate_search_open(&sc.policy), 2000);
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"rate_search_open\":-1},\"jobs\":[]}", &sc, &e),
                     LOOM_EINVAL);
        cr_assert_str_eq(e.field, "policy.rate_search_open", "%s", e.msg);
}

/* The learned-admission switches: defaults, values, and errors naming the field. */
Test(spec, learn_bound_and_move_lone_in_the_policy)
{
        loom_scenario sc;
        loom_err e;
        cr_assert_eq(parse("{\"jobs\":[]}", &sc, &e), 0, "%s", e.msg);
        cr_assert_eq(sc.policy.learn_bound, LOOM_LEARN_NORMAL, "normal by default");
        cr_assert(sc.policy.move_lone, "on by default");
        cr_assert(sc.policy.move_members, "on by default");
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"learn_bound\":\"order\",\"move_lone\":false,"
                           "\"move_members\":false},\"jobs\":[]}",
                           &sc, &e),
                     0, "%s", e.msg);
        cr_assert_eq(sc.policy.learn_bound, LOOM_LEARN_ORDER);
        cr_assert_not(sc.policy.move_lone);
        cr_assert_not(sc.policy.move_members);
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"move_members\":1},\"jobs\":[]}", &sc, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "policy.move_members", "%s", e.msg);
        cr_assert_eq(parse("{\"policy\":{\"learn_bound\":\"median\"},\"jobs\":[]}", &sc, &e),
                     LOOM_EINVAL);
        cr_assert_str_eq(e.field, "policy.learn_bound", "%s", e.msg);
        cr_assert_eq(parse("{\"policy\":{\"move_lone\":\"yes\"},\"jobs\":[]}", &sc, &e),
                     LOOM_EINVAL);
        cr_assert_str_eq(e.field, "policy.move_lone", "%s", e.msg);
        cr_assert_eq(e.col, 24, "col %d", e.col);
}

/* A job's id is a name people read in logs and terminals: control characters (a newline forging
 * a line, an escape sequence, C1's one-byte CSI) are refused naming the field; other Unicode is a
 * name like any. */
Test(spec, control_characters_in_a_job_id_are_refused)
{
        static const char *const bad_ids[] = {"a\\nb",   "red\\u001b[31m", "csi\\u009b2J",
                                              "tab\\tx", "del\\u007f",     "nul\\u0001"};
        for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
                char text[256];
                snprintf(text, sizeof text, "{\"jobs\":[{\"id\":\"%s\"," JOB "}]}", bad_ids[i]);
                loom_scenario sc;
                loom_err e;
                cr_assert_eq(parse(text, &sc, &e), LOOM_EINVAL, "id %s accepted", bad_ids[i]);
                cr_assert_str_eq(e.field, "jobs[0].id", "%s: field %s", bad_ids[i], e.field);
                cr_assert(strstr(e.msg, "control character"), "%s", e.msg);
        }
        loom_scenario sc;
        loom_err e;
        cr_assert_eq(parse("{\"jobs\":[{\"id\":\"r\\u00e9sum\\u00e9-\\u540d \\u2014 1\"," JOB "}]}",
                           &sc, &e),
                     0, "%s", e.msg);
        loom_scenario_free(&sc);
        loom_err ne;
        cr_assert_eq(loom_spec_name_check("ok\xc2\xa0x", 5, "name", &ne), 0,
                     "U+00A0 is no control");
        cr_assert_eq(loom_spec_name_check("a\xc2\x85", 3, "name", &ne), LOOM_EINVAL);
        cr_assert_str_eq(ne.field, "name");
        cr_assert_eq(loom_spec_name_check("a\0b", 3, "name", &ne), LOOM_EINVAL, "NUL counts");
}

/* policy.slo_premium: absent or null, no cap; a number from 0 to 100 caps what keeping an SLO may
 * cost over colocation; anything else is refused naming the field. */
Test(spec, slo_premium_in_the_policy)
{
        loom_scenario sc;
        loom_err e;
        cr_assert_eq(parse("{\"jobs\":[]}", &sc, &e), 0, "%s", e.msg);
        cr_assert_not(sc.policy.slo_cap, "off by default");
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"slo_premium\":null},\"jobs\":[]}", &sc, &e), 0, "%s",
                     e.msg);
        cr_assert_not(sc.policy.slo_cap);
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"slo_premium\":0.25},\"jobs\":[]}", &sc, &e), 0, "%s",
                     e.msg);
        cr_assert(sc.policy.slo_cap);
        cr_assert_float_eq(sc.policy.slo_premium, 0.25, 1e-12);
        loom_scenario_free(&sc);
        cr_assert_eq(parse("{\"policy\":{\"slo_premium\":0},\"jobs\":[]}", &sc, &e), 0, "%s",
                     e.msg);
        cr_assert(sc.policy.slo_cap, "0 is a cap: never more than colocated");
        loom_scenario_free(&sc);
        const char *wrong[] = {"-0.1", "101", "\"25%\"", "true"};
        for (int i = 0; i < 4; i++) {
                char doc[96];
                snprintf(doc, sizeof doc, "{\"policy\":{\"slo_premium\":%s},\"jobs\":[]}",
                         wrong[i]);
                cr_assert_eq(parse(doc, &sc, &e), LOOM_EINVAL, "%s", doc);
                cr_assert_str_eq(e.field, "policy.slo_premium", "%s: %s", doc, e.msg);
                cr_assert_eq(e.line, 1, "%s", doc);
        }
}
