/*
 * exechook.c - loomd's side of the executor (loom/exec.h, docs/slurm.md): every half second
 * the scheduler thread tells cfg.exec what should run - a worker per node of every live job's
 * current admission, on the nodes the core placed it on, and the nodes its groups hold - and
 * feeds the failures the executor saw in the cluster into the retry path (retry.c), one per
 * failed admission. Since the desired state comes from the job table (rebuilt from the store),
 * the first tick after a restart reconciles with what the cluster still runs.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/exec.h"
#include "srv.h"

#define EXEC_TICK_US (500 * 1000)

static int want_jobs(loom_server *s, loom_exec_job *want)
{
        const loom_cluster_cfg *c = loom_sched_cluster(s->sched);
        int n = 0;
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                srv_job *j = s->jobs[i];
                loom_job_info in;
                if (!srv_job_live(j->state) || loom_sched_job_info(s->sched, j->retry.core, &in))
                        continue;
                loom_exec_job *w = &want[n++];
                memset(w, 0, sizeof *w);
                w->job = j->id;
                w->admission = j->retry.core;
                snprintf(w->name, sizeof w->name, "%s", j->name);
                w->n_nodes[0] = in.n_rollout_nodes;
                memcpy(w->nodes[0], in.rollout_nodes, sizeof in.rollout_nodes);
                w->n_nodes[1] = in.n_train_nodes;
                memcpy(w->nodes[1], in.train_nodes, sizeof in.train_nodes);
                /* a member rolls out on its own GPUs, and trains on every training node of its
                 * group (data parallelism scaled to the group's training pool) */
                int r = in.n_rollout_nodes ? j->spec.rollout_gpus / in.n_rollout_nodes : 0;
                w->gpus[0] = r > 0 && r < c->gpus_per_node ? r : c->gpus_per_node;
                w->gpus[1] = c->gpus_per_node;
        }
        return n;
}

static int add_node(loom_node_id *v, int n, loom_node_id id)
{
        for (int i = 0; i < n; i++)
                if (v[i] == id)
                        return n;
        v[n] = id;
        return n + 1;
}

/* The nodes of every group, by pool. */
static void want_nodes(loom_server *s, loom_node_id *up[2], int n_up[2], int cap)
{
        n_up[0] = n_up[1] = 0;
        int n = loom_sched_groups(s->sched, NULL, 0);
        loom_group_id *ids = calloc((size_t)(n > 0 ? n : 1), sizeof *ids);
        loom_group_info *g = malloc(sizeof *g);
        n = ids && g ? loom_sched_groups(s->sched, ids, n) : 0;
        for (int i = 0; i < n; i++) {
                if (loom_sched_group_info(s->sched, ids[i], g))
                        continue;
                for (int k = 0; k < g->n_rollout_nodes && n_up[0] < cap; k++)
                        n_up[0] = add_node(up[0], n_up[0], g->rollout_nodes[k]);
                for (int k = 0; k < g->n_train_nodes && n_up[1] < cap; k++)
                        n_up[1] = add_node(up[1], n_up[1], g->train_nodes[k]);
        }
        free(ids);
        free(g);
}

void srv_exec_tick(loom_server *s, loom_us now)
{
        if (!s->cfg.exec)
                return;
        if (now < s->exec_next) {
                if (s->exec_next < s->next_check)
                        s->next_check = s->exec_next;
                return;
        }
        s->exec_next = now + EXEC_TICK_US;
        if (s->exec_next < s->next_check)
                s->next_check = s->exec_next;
        loom_exec_job *want = calloc(s->n_jobs ? s->n_jobs : 1, sizeof *want);
        loom_node_id *up[2] = {calloc(LOOM_EXEC_MAX_NODES, sizeof(loom_node_id)),
                               calloc(LOOM_EXEC_MAX_NODES, sizeof(loom_node_id))};
        loom_exec_event ev[32];
        int n_ev = 0, n_up[2];
        loom_err e;
        loom_err_clear(&e);
        if (want && up[0] && up[1]) {
                int n = want_jobs(s, want);
                want_nodes(s, up, n_up, LOOM_EXEC_MAX_NODES);
                const loom_node_id *const cup[2] = {up[0], up[1]};
                if (loom_exec_apply(s->cfg.exec, want, n, cup, n_up, ev, 32, &n_ev, &e) &&
                    now >= s->exec_warn) {
                        srv_log(s, "executor %s: %s", loom_exec_name(s->cfg.exec), e.msg);
                        s->exec_warn = now + 10 * LOOM_US_PER_S;
                }
        }
        for (int i = 0; i < n_ev; i++) {
                srv_job *j = srv_job_get(s, ev[i].job);
                if (!j || !srv_job_live(j->state) || j->retry.core != ev[i].admission)
                        continue;
                char why[200];
                snprintf(why, sizeof why, "%s: %s", loom_exec_name(s->cfg.exec), ev[i].why);
                srv_log(s, "job %u (%s): %s", j->id, j->name, why);
                s->m.exec_failures++;
                srv_job_failed(s, j, "failed", why, now);
        }
        if (n_ev)
                srv_apply_actions(s, now);
        free(want);
        free(up[0]);
        free(up[1]);
}
