/*
 * test_exec.c - the executor's reconciler (src/exec/exec.c) against a recording backend: a
 * wanted worker is launched once and only on powered-up nodes, a vanished or failed one is
 * reported once, unwanted ones are stopped, adopted ones are not relaunched, node ids are bound
 * to free nodes and the bindings survive a new executor; plus the node map file and names.
 * The backend here is a test double of the cluster; the Slurm backend itself is exercised
 * against a live Slurm by tests/integration/slurm_exec.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "loom/exec.h"

typedef struct fake {
        loom_exec_worker live[32];
        int n_live;
        loom_exec_worker ended[8];
        int n_ended;
        int launches, stops;
        char up[8][LOOM_EXEC_NAME_MAX]; /* nodes powered up */
        int n_up;
        bool slow_power;                 /* a node takes one apply to come up */
        bool slow_down;                  /* ... and one apply to power down */
        char going[8][LOOM_EXEC_NAME_MAX]; /* nodes powering down (slow_down) */
        int n_going;
        char failed[LOOM_EXEC_NAME_MAX]; /* a node the cluster took out of service */
        char env0[192];
} fake;

static int f_launch(void *impl, const loom_exec_worker *w, const char *const *env, loom_err *e)
{
        fake *f = impl;
        f->launches++;
        f->live[f->n_live] = *w;
        snprintf(f->live[f->n_live].id, sizeof f->live[0].id, "s%d", f->launches);
        f->n_live++;
        snprintf(f->env0, sizeof f->env0, "%s", env[0]);
        return 0;
}

static int f_stop(void *impl, const loom_exec_worker *w, loom_err *e)
{
        fake *f = impl;
        f->stops++;
        for (int i = 0; i < f->n_live; i++)
                if (!strcmp(f->live[i].id, w->id))
                        f->live[i] = f->live[--f->n_live];
        return 0;
}

static int f_list(void *impl, loom_exec_worker *out, int max, loom_err *e)
{
        fake *f = impl;
        int n = 0;
        for (int i = 0; i < f->n_ended; i++)
                out[n++] = f->ended[i];
        f->n_ended = 0;
        for (int i = 0; i < f->n_live; i++)
                out[n++] = f->live[i];
        return n;
}

static int f_power(void *impl, const char *node, bool up, loom_err *e)
{
        fake *f = impl;
        if (up && !strcmp(node, f->failed))
                return LOOM_EXEC_UNUSABLE;
        int at = -1;
        for (int i = 0; i < f->n_up; i++)
                if (!strcmp(f->up[i], node))
                        at = i;
        if (up && at < 0) {
                snprintf(f->up[f->n_up++], LOOM_EXEC_NAME_MAX, "%s", node);
                return f->slow_power ? 0 : 1;
        }
        if (!up && at >= 0) {
                memmove(f->up[at], f->up[--f->n_up], LOOM_EXEC_NAME_MAX);
                if (f->slow_down) { /* down at the next call */
                        snprintf(f->going[f->n_going++], LOOM_EXEC_NAME_MAX, "%s", node);
                        return 0;
                }
        }
        for (int i = 0; i < f->n_going; i++)
                if (!strcmp(f->going[i], node)) {
                        if (up) /* it must finish powering down first */
                                return 0;
                        memmove(f->going[i], f->going[--f->n_going], LOOM_EXEC_NAME_MAX);
                }
        return 1;
}

static const loom_exec_ops fake_ops = {"fake", f_launch, f_stop, f_list, f_power, NULL};

static char dir[] = "/tmp/loom-test-exec-XXXXXX";

static loom_exec *make(fake *f)
{
        loom_exec_cfg c;
        loom_exec_cfg_default(&c);
        c.n_nodes[0] = c.n_nodes[1] = 2;
        strcpy(c.nodes[0][0], "r1");
        strcpy(c.nodes[0][1], "r2");
        strcpy(c.nodes[1][0], "t1");
        strcpy(c.nodes[1][1], "t2");
        snprintf(c.dir, sizeof c.dir, "%s", dir);
        loom_err e;
        loom_exec *x = loom_exec_new(&c, &fake_ops, f, &e);
        cr_assert(x);
        return x;
}

static loom_exec_job job(uint32_t id, uint32_t adm, loom_node_id r, loom_node_id t)
{
        loom_exec_job j = {.job = id, .admission = adm, .n_nodes = {1, 1}, .gpus = {8, 8}};
        j.nodes[0][0] = r;
        j.nodes[1][0] = t;
        snprintf(j.name, sizeof j.name, "job%u", id);
        return j;
}

static int apply(loom_exec *x, const loom_exec_job *w, int n, loom_node_id r, loom_node_id t,
                 loom_exec_event *ev)
{
        const loom_node_id ru[1] = {r}, tu[1] = {t};
        const loom_node_id *const up[2] = {ru, tu};
        const int n_up[2] = {n ? 1 : 0, n ? 1 : 0};
        int n_ev = -1;
        loom_err e;
        cr_assert_eq(loom_exec_apply(x, w, n, up, n_up, ev, 8, &n_ev, &e), 0);
        return n_ev;
}

static void setup(void)
{
        cr_assert(mkdtemp(dir));
}

static void teardown(void)
{
        char p[128];
        snprintf(p, sizeof p, "%s/exec-nodes.txt", dir);
        unlink(p);
        rmdir(dir);
}

static const char *live_of_pool(const fake *f, loom_pool p)
{
        for (int i = 0; i < f->n_live; i++)
                if (f->live[i].pool == p)
                        return f->live[i].node;
        return "";
}

TestSuite(exec, .init = setup, .fini = teardown);

Test(exec, launches_once_on_powered_nodes_and_binds_fresh_ids)
{
        fake f = {.slow_power = true};
        loom_exec *x = make(&f);
        loom_exec_event ev[8];
        loom_exec_job j = job(1, 1, 7, 9); /* core ids are arbitrary: bound to r1, t1 */
        cr_assert_eq(apply(x, &j, 1, 7, 9, ev), 0);
        cr_assert_eq(f.launches, 0, "nodes are still coming up");
        cr_assert_eq(f.n_up, 2);
        cr_assert_eq(apply(x, &j, 1, 7, 9, ev), 0);
        cr_assert_eq(f.launches, 2, "one worker per pool once the nodes are up");
        cr_assert_str_eq(f.live[0].node, "r1");
        cr_assert_str_eq(f.live[1].node, "t1");
        cr_assert(strstr(f.env0, "LOOM_URL="));
        cr_assert_eq(apply(x, &j, 1, 7, 9, ev), 0);
        cr_assert_eq(f.launches, 2, "a running worker is not launched again");
        loom_exec_free(x);
}

Test(exec, a_failure_is_reported_once_and_unwanted_workers_stopped)
{
        fake f = {0};
        loom_exec *x = make(&f);
        loom_exec_event ev[8];
        loom_exec_job j = job(1, 1, 0, 0);
        apply(x, &j, 1, 0, 0, ev);
        cr_assert_eq(f.n_live, 2);
        /* the train worker dies in the cluster */
        f.ended[0] = f.live[1];
        f.ended[0].ended = true;
        snprintf(f.ended[0].why, sizeof f.ended[0].why, "exited with status 3");
        f.n_ended = 1;
        f.n_live = 1;
        cr_assert_eq(apply(x, &j, 1, 0, 0, ev), 1);
        cr_assert_eq(ev[0].job, 1);
        cr_assert(strstr(ev[0].why, "train worker exited with status 3"), "%s", ev[0].why);
        cr_assert_eq(apply(x, &j, 1, 0, 0, ev), 0, "reported once");
        cr_assert_eq(f.launches, 2, "not relaunched for the failed admission");
        /* loomd re-admits: admission 2 on the same nodes; admission 1's rollout is stopped */
        j.admission = 2;
        cr_assert_eq(apply(x, &j, 1, 0, 0, ev), 0);
        cr_assert_eq(f.stops, 1);
        cr_assert_eq(f.launches, 4);
        cr_assert_eq(f.n_live, 2);
        for (int i = 0; i < f.n_live; i++)
                cr_assert_eq(f.live[i].admission, 2);
        /* the job ends: every worker stopped, every node powered down */
        cr_assert_eq(apply(x, NULL, 0, 0, 0, ev), 0);
        cr_assert_eq(f.n_live, 0);
        cr_assert_eq(f.n_up, 0);
        loom_exec_free(x);
}

Test(exec, a_restarted_loomd_adopts_running_workers_and_keeps_bindings)
{
        fake f = {0};
        loom_exec *x = make(&f);
        loom_exec_event ev[8];
        loom_exec_job a = job(1, 1, 0, 0), b = job(2, 2, 5, 5);
        loom_exec_job both[2] = {a, b};
        const loom_node_id ru[2] = {0, 5}, tu[2] = {0, 5};
        const loom_node_id *const up[2] = {ru, tu};
        const int n_up[2] = {2, 2};
        int n_ev;
        loom_err e;
        cr_assert_eq(loom_exec_apply(x, both, 2, up, n_up, ev, 8, &n_ev, &e), 0);
        cr_assert_eq(f.launches, 4);
        char b_node[LOOM_EXEC_NAME_MAX];
        snprintf(b_node, sizeof b_node, "%s", f.live[2].node);
        loom_exec_free(x); /* loomd killed; the cluster keeps the workers */
        x = make(&f);
        cr_assert_eq(loom_exec_apply(x, both, 2, up, n_up, ev, 8, &n_ev, &e), 0);
        cr_assert_eq(n_ev, 0);
        cr_assert_eq(f.launches, 4, "nothing launched twice");
        cr_assert_eq(f.stops, 0);
        /* a worker that vanished while loomd was away is a failure only once it was seen */
        f.n_live--;
        cr_assert_eq(loom_exec_apply(x, both, 2, up, n_up, ev, 8, &n_ev, &e), 0);
        cr_assert_eq(n_ev, 1);
        cr_assert(strstr(ev[0].why, "vanished"), "%s", ev[0].why);
        char path[128], text[256] = "";
        snprintf(path, sizeof path, "%s/exec-nodes.txt", dir);
        FILE *fp = fopen(path, "r");
        cr_assert(fp);
        size_t k = fread(text, 1, sizeof text - 1, fp);
        text[k] = 0;
        fclose(fp);
        cr_assert(strstr(text, b_node), "bindings kept: %s", text);
        loom_exec_free(x);
}

Test(exec, node_map_file_and_names)
{
        char path[128];
        snprintf(path, sizeof path, "%s/map.json", dir);
        FILE *fp = fopen(path, "w");
        fputs("{\"rollout\": {\"partition\": \"inf\", \"nodes\": [\"a\", \"b\"]},\n"
              " \"train\": {\"nodes\": [\"c\", 3]}}",
              fp);
        fclose(fp);
        loom_exec_cfg c;
        loom_exec_cfg_default(&c);
        loom_err e;
        cr_assert_eq(loom_exec_cfg_load(&c, path, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "train.nodes[1]"), "%s", e.msg);
        cr_assert_eq(c.n_nodes[0], 0, "a bad file changes nothing");
        fp = fopen(path, "w");
        fputs("{\"rollout\": {\"partition\": \"inf\", \"nodes\": [\"a\", \"b\"]},\n"
              " \"train\": {\"nodes\": [\"c\"]}",
              fp);
        fclose(fp);
        cr_assert_eq(loom_exec_cfg_load(&c, path, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "map.json:2:"), "file:line:col: %s", e.msg);
        fp = fopen(path, "w"); /* empty: a position, not jansson's column 0 */
        fclose(fp);
        cr_assert_eq(loom_exec_cfg_load(&c, path, &e), LOOM_EINVAL);
        cr_assert(strstr(e.msg, "map.json:1:1: "), "file:line:col: %s", e.msg);
        char missing[160];
        snprintf(missing, sizeof missing, "%s/none.json", dir);
        cr_assert_eq(loom_exec_cfg_load(&c, missing, &e), LOOM_EIO);
        cr_assert(!strstr(e.msg, "-1:-1") && !strstr(e.msg, ":0:"), "no -1:-1: %s", e.msg);
        const char *first = strstr(e.msg, missing);
        cr_assert(first && !strstr(first + 1, missing), "the path once: %s", e.msg);
        fp = fopen(path, "w");
        fputs("{\"rollout\": {\"partition\": \"inf\", \"nodes\": [\"a\", \"b\"]},"
              " \"train\": {\"nodes\": [\"c\"]}}",
              fp);
        fclose(fp);
        cr_assert_eq(loom_exec_cfg_load(&c, path, &e), 0);
        cr_assert_str_eq(c.partition[0], "inf");
        cr_assert_str_eq(c.partition[1], "train");
        cr_assert_eq(c.n_nodes[0], 2);
        cr_assert_str_eq(c.nodes[1][0], "c");
        unlink(path);

        loom_exec_worker w = {.job = 12, .admission = 30, .pool = LOOM_POOL_TRAIN, .rank = 1}, v;
        char name[64];
        loom_exec_worker_name(&w, name, sizeof name);
        cr_assert_str_eq(name, "loom-j12-a30-train-1");
        cr_assert(loom_exec_worker_parse(name, &v));
        cr_assert(v.job == 12 && v.admission == 30 && v.pool == LOOM_POOL_TRAIN && v.rank == 1);
        cr_assert_not(loom_exec_worker_parse("loom-j12-a30-train-1x", &v));
        /* only the spelling loomd writes: no sign, no leading zero, no wrap past 2^32 */
        const char *odd[] = {"loom-j12-a+30-train-1", "loom-j012-a30-train-1",
                             "loom-j-1-a30-train-1",  "loom-j4294967308-a30-train-1",
                             "loom-j12-a30-train-01", "loom-j12-a30-train-+1"};
        for (size_t i = 0; i < sizeof odd / sizeof *odd; i++)
                cr_assert_not(loom_exec_worker_parse(odd[i], &v), "%s", odd[i]);
        cr_assert_not(loom_exec_worker_parse("loom-node-r1", &v));
}

Test(exec, a_node_out_of_service_is_replaced)
{
        fake f = {0};
        snprintf(f.failed, sizeof f.failed, "r1");
        loom_exec *x = make(&f);
        loom_exec_event ev[8];
        loom_exec_job j = job(1, 1, 4, 4);
        cr_assert_eq(apply(x, &j, 1, 4, 4, ev), 0);
        cr_assert_eq(f.launches, 0, "r1 cannot come up");
        cr_assert_eq(apply(x, &j, 1, 4, 4, ev), 0);
        cr_assert_eq(f.launches, 2, "rollout node 4 bound to r2 instead");
        for (int i = 0; i < f.n_live; i++)
                if (f.live[i].pool == LOOM_POOL_ROLLOUT)
                        cr_assert_str_eq(f.live[i].node, "r2");
        loom_exec_free(x);
}

/* A node id loom provisions right after releasing another is bound to a node that is powered
 * down, which comes up at once, rather than to the one still powering down, which would have to
 * finish that first (Slurm: SuspendTimeout, then the boot). */
Test(exec, a_new_node_is_bound_to_a_powered_down_node_before_one_powering_down)
{
        fake f = {.slow_down = true};
        loom_exec *x = make(&f);
        loom_exec_event ev[8];
        loom_exec_job a = job(1, 1, 0, 0);
        apply(x, &a, 1, 0, 0, ev);
        cr_assert_str_eq(live_of_pool(&f, LOOM_POOL_ROLLOUT), "r1");
        cr_assert_eq(apply(x, NULL, 0, 0, 0, ev), 0); /* job 1 ends: r1 and t1 power down */
        cr_assert_eq(f.n_going, 2);
        loom_exec_job b = job(2, 2, 1, 1); /* new ids, at once */
        apply(x, &b, 1, 1, 1, ev);
        cr_assert_eq(f.launches, 4, "job 2's workers start at once, on nodes that were down");
        cr_assert_str_eq(live_of_pool(&f, LOOM_POOL_ROLLOUT), "r2");
        loom_exec_free(x);
}

static int apply_up(loom_exec *x, const loom_exec_job *w, int n, int n_r, loom_node_id r,
                    loom_node_id t, loom_exec_event *ev)
{
        const loom_node_id ru[1] = {r}, tu[1] = {t};
        const loom_node_id *const up[2] = {ru, tu};
        const int n_up[2] = {n_r, 1};
        int n_ev = -1;
        loom_err e;
        cr_assert_eq(loom_exec_apply(x, w, n, up, n_up, ev, 8, &n_ev, &e), 0);
        return n_ev;
}

static const loom_exec_worker *live_of(const fake *f, loom_pool p)
{
        for (int i = 0; i < f->n_live; i++)
                if (f->live[i].pool == p)
                        return &f->live[i];
        return NULL;
}

/* A lone member rolls out on its training node: no rollout node is held and its rollout
 * worker runs there. A second member moves it to the rollout node, the group going lone again
 * moves it back (each while the job trains, never as a failure), and the rollout node is
 * powered down only once the worker has left it. */
Test(exec, a_lone_member_rolls_out_on_its_training_node_and_moves_with_its_group)
{
        fake f = {0};
        loom_exec *x = make(&f);
        loom_exec_event ev[8];
        loom_exec_job j = job(1, 1, 9, 9);
        j.roll_on_train = true;
        cr_assert_eq(apply_up(x, &j, 1, 0, 0, 9, ev), 0);
        cr_assert_eq(f.n_up, 1, "only the training node is up");
        cr_assert_str_eq(f.up[0], "t1");
        cr_assert_eq(f.launches, 2);
        cr_assert_str_eq(live_of(&f, LOOM_POOL_ROLLOUT)->node, "t1");
        cr_assert_str_eq(live_of(&f, LOOM_POOL_TRAIN)->node, "t1");
        /* a second member: the rollout node comes up; the worker stays while its rollout runs */
        j.roll_on_train = false;
        j.nodes[0][0] = 7;
        j.roll_pinned = true;
        cr_assert_eq(apply_up(x, &j, 1, 1, 7, 9, ev), 0);
        cr_assert_eq(f.n_up, 2);
        cr_assert_eq(f.stops, 0, "not moved while its rollout is next or running");
        cr_assert_str_eq(live_of(&f, LOOM_POOL_ROLLOUT)->node, "t1");
        j.roll_pinned = false; /* it trains */
        cr_assert_eq(apply_up(x, &j, 1, 1, 7, 9, ev), 0, "a move is no failure");
        cr_assert_eq(f.stops, 1);
        cr_assert_eq(apply_up(x, &j, 1, 1, 7, 9, ev), 0);
        cr_assert_eq(f.launches, 3);
        cr_assert_str_eq(live_of(&f, LOOM_POOL_ROLLOUT)->node, "r1");
        cr_assert_eq(apply_up(x, &j, 1, 1, 7, 9, ev), 0);
        cr_assert_eq(f.launches, 3, "launched once there");
        /* lone again: the rollout node is released, but kept up until the worker left it */
        j.roll_on_train = true;
        j.nodes[0][0] = 9;
        cr_assert_eq(apply_up(x, &j, 1, 0, 0, 9, ev), 0);
        cr_assert_eq(f.stops, 2);
        cr_assert_eq(f.n_up, 2, "r1 stays up while the worker runs there");
        cr_assert_eq(apply_up(x, &j, 1, 0, 0, 9, ev), 0);
        cr_assert_eq(f.launches, 4);
        cr_assert_str_eq(live_of(&f, LOOM_POOL_ROLLOUT)->node, "t1");
        cr_assert_eq(apply_up(x, &j, 1, 0, 0, 9, ev), 0);
        cr_assert_eq(f.n_up, 1, "r1 powered down once nothing runs there");
        cr_assert_str_eq(f.up[0], "t1");
        cr_assert_eq(f.launches, 4);
        loom_exec_free(x);
}
