/*
 * test_server_learn.c - the "observe" entry of loomd's replay log (learned-profile admission,
 * src/server/learn.c): what is written reads back the same, and a damaged entry is refused
 * naming the key.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

Test(server_learn, an_observe_entry_reads_back_the_same)
{
        srv_observe_rec o = {7, LOOM_PHASE_TRAIN, 612034, 1, 1004211, 611200, 3241000,
                             0, LOOM_POOL_TRAIN,  0},
                        back;
        char *t = srv_observe_encode(&o);
        cr_assert_not_null(t);
        cr_assert_str_eq(t, "{\"budget_us\":3241000,\"core\":7,\"phase\":\"train\",\"result\":1,"
                            "\"t_roll_us\":1004211,\"t_train_us\":611200,\"took_us\":612034}");
        loom_err e;
        cr_assert_eq(srv_observe_decode(t, &back, &e), 0, "%s", e.msg);
        cr_assert(back.core == o.core && back.phase == o.phase && back.took == o.took &&
                  back.result == o.result && back.roll == o.roll && back.train == o.train &&
                  back.budget == o.budget);
        free(t);
        /* before learn_after iterations: no learned profile yet; a rollout's head when reported */
        srv_observe_rec r = {UINT32_MAX, LOOM_PHASE_ROLLOUT, 0, 0, 0, 0, 0,
                             0,          LOOM_POOL_ROLLOUT,  0};
        t = srv_observe_encode(&r);
        cr_assert_eq(srv_observe_decode(t, &back, &e), 0, "%s", e.msg);
        cr_assert_eq(back.core, UINT32_MAX);
        cr_assert_eq(back.phase, LOOM_PHASE_ROLLOUT);
        cr_assert_eq(back.head, 0);
        cr_assert_null(strstr(t, "head_us"), "no head, no key: entries read as before");
        free(t);
        r.head = 480000;
        t = srv_observe_encode(&r);
        cr_assert_not_null(strstr(t, "\"head_us\":480000"));
        cr_assert_eq(srv_observe_decode(t, &back, &e), 0, "%s", e.msg);
        cr_assert_eq(back.head, 480000);
        cr_assert_eq(back.pool, LOOM_POOL_ROLLOUT);
        cr_assert_null(strstr(t, "pool"), "a rollout on its own pool: no key");
        free(t);
        /* a lone member's rollout ran on the training pool: said, and read back */
        r.pool = LOOM_POOL_TRAIN;
        t = srv_observe_encode(&r);
        cr_assert_not_null(strstr(t, "\"pool\":\"train\""), "%s", t);
        cr_assert_eq(srv_observe_decode(t, &back, &e), 0, "%s", e.msg);
        cr_assert_eq(back.pool, LOOM_POOL_TRAIN);
        free(t);
        cr_assert_eq(srv_observe_decode("{\"core\":1,\"phase\":\"rollout\",\"took_us\":1,"
                                        "\"result\":0,\"t_roll_us\":0,\"t_train_us\":0,"
                                        "\"budget_us\":0,\"pool\":\"gpu\"}",
                                        &back, &e),
                     LOOM_ECORRUPT);
        cr_assert_str_eq(e.field, "pool");
        /* a training on a pool other than the group's as it stands (policy.pool_grow): its
         * GPUs said and read back; absent, 0 */
        o.gpus = 16;
        t = srv_observe_encode(&o);
        cr_assert_not_null(strstr(t, "\"gpus\":16"), "%s", t);
        cr_assert_eq(srv_observe_decode(t, &back, &e), 0, "%s", e.msg);
        cr_assert_eq(back.gpus, 16);
        free(t);
        o.gpus = 0;
        t = srv_observe_encode(&o);
        cr_assert_null(strstr(t, "gpus"), "%s", t);
        cr_assert_eq(srv_observe_decode(t, &back, &e), 0, "%s", e.msg);
        cr_assert_eq(back.gpus, 0);
        free(t);
        cr_assert_eq(srv_observe_decode("{\"core\":1,\"phase\":\"rollout\",\"took_us\":1,"
                                        "\"result\":0,\"t_roll_us\":0,\"t_train_us\":0,"
                                        "\"budget_us\":0,\"gpus\":8}",
                                        &back, &e),
                     LOOM_ECORRUPT);
        cr_assert_str_eq(e.field, "gpus");
        cr_assert_eq(srv_observe_decode("{\"core\":1,\"phase\":\"train\",\"took_us\":1,"
                                        "\"result\":0,\"t_roll_us\":0,\"t_train_us\":0,"
                                        "\"budget_us\":0,\"gpus\":0}",
                                        &back, &e),
                     LOOM_ECORRUPT);
        cr_assert_str_eq(e.field, "gpus");
}

Test(server_learn, a_damaged_observe_entry_names_the_key)
{
        static const struct {
                const char *text, *key;
        } cases[] = {
            {"not json", "entry"},
            {"[1]", "entry"},
            {"{\"phase\":\"train\",\"took_us\":1,\"result\":0,\"t_roll_us\":0,\"t_train_us\":0,"
             "\"budget_us\":0}",
             "core"},
            {"{\"core\":0,\"phase\":\"train\",\"took_us\":1,\"result\":0,\"t_roll_us\":0,"
             "\"t_train_us\":0,\"budget_us\":0}",
             "core"},
            {"{\"core\":4294967296,\"phase\":\"train\",\"took_us\":1,\"result\":0,"
             "\"t_roll_us\":0,\"t_train_us\":0,\"budget_us\":0}",
             "core"},
            {"{\"core\":1,\"phase\":\"sync\",\"took_us\":1,\"result\":0,\"t_roll_us\":0,"
             "\"t_train_us\":0,\"budget_us\":0}",
             "phase"},
            {"{\"core\":1,\"phase\":\"train\",\"took_us\":-1,\"result\":0,\"t_roll_us\":0,"
             "\"t_train_us\":0,\"budget_us\":0}",
             "took_us"},
            {"{\"core\":1,\"phase\":\"train\",\"took_us\":1.5,\"result\":0,\"t_roll_us\":0,"
             "\"t_train_us\":0,\"budget_us\":0}",
             "took_us"},
            {"{\"core\":1,\"phase\":\"train\",\"took_us\":1,\"result\":4,\"t_roll_us\":0,"
             "\"t_train_us\":0,\"budget_us\":0}",
             "result"},
            {"{\"core\":1,\"phase\":\"train\",\"took_us\":1,\"result\":1,\"t_train_us\":0,"
             "\"budget_us\":0}",
             "t_roll_us"},
            {"{\"core\":1,\"phase\":\"train\",\"took_us\":1,\"result\":1,\"t_roll_us\":0,"
             "\"budget_us\":0}",
             "t_train_us"},
            {"{\"core\":1,\"phase\":\"train\",\"took_us\":1,\"result\":1,\"t_roll_us\":0,"
             "\"t_train_us\":0,\"budget_us\":\"x\"}",
             "budget_us"},
            {"{\"core\":1,\"phase\":\"rollout\",\"took_us\":1,\"result\":0,\"t_roll_us\":0,"
             "\"t_train_us\":0,\"budget_us\":0,\"head_us\":-5}",
             "head_us"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                srv_observe_rec o;
                loom_err e;
                cr_assert_eq(srv_observe_decode(cases[i].text, &o, &e), LOOM_ECORRUPT, "%s",
                             cases[i].text);
                cr_assert_str_eq(e.field, cases[i].key, "%s", cases[i].text);
        }
        srv_observe_rec o;
        loom_err e;
        cr_assert_eq(srv_observe_decode(NULL, &o, &e), LOOM_ECORRUPT);
}
