/*
 * statehook.c - what loomd tells the node-local state manager, through the hooks of
 * loom_server_cfg.state (cmd/loomd wires them to loom-state; docs/state.md says why the server
 * does not link it). Two duties:
 *
 *   hints       after each grant, every node of the lease gets the predicted order of the other
 *               live jobs seen there: round-robin runs next the one granted longest ago, so that
 *               one is prefetched while this phase runs (one phase ahead);
 *   accounting  a submit is admitted only if every node it was placed on has room in its
 *               measured host tier for the job's working set there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

static bool on_node(const srv_lease *l, loom_pool pool, loom_node_id node)
{
        for (int i = 0; i < l->n_nodes; i++)
                if (l->pool == pool && l->nodes[i] == node)
                        return true;
        return false;
}

static int by_grant(const void *a, const void *b)
{
        const srv_job *x = *(srv_job *const *)a, *y = *(srv_job *const *)b;
        return (x->lease.granted_wall > y->lease.granted_wall) -
               (x->lease.granted_wall < y->lease.granted_wall);
}

void srv_state_granted(loom_server *s, const srv_job *j)
{
        if (!s->cfg.state.order)
                return;
        srv_job **v = calloc(s->n_jobs ? s->n_jobs : 1, sizeof *v);
        const char **names = calloc(s->n_jobs ? s->n_jobs : 1, sizeof *names);
        for (int k = 0; v && names && k < j->lease.n_nodes; k++) {
                loom_node_id node = j->lease.nodes[k];
                int n = 0;
                for (uint32_t i = 0; i < s->n_jobs; i++) {
                        srv_job *o = s->jobs[i];
                        if (o && o != j && srv_job_live(o->state) && o->lease.granted_wall &&
                            on_node(&o->lease, j->lease.pool, node))
                                v[n++] = o;
                }
                qsort(v, (size_t)n, sizeof *v, by_grant);
                for (int i = 0; i < n; i++)
                        names[i] = v[i]->name;
                s->cfg.state.order(s->cfg.state.arg, node, names, n);
        }
        free(v);
        free(names);
}

static int check_nodes(loom_server *s, const loom_node_id *nodes, int n, uint64_t need,
                       const char *pool, char *why, size_t len)
{
        for (int i = 0; i < n; i++) {
                uint64_t used, cap;
                if (s->cfg.state.host_usage(s->cfg.state.arg, nodes[i], &used, &cap) < 0)
                        continue;
                if (used + need > cap) {
                        snprintf(why, len,
                                 "%s node %u: host tier has %llu of %llu bytes in use "
                                 "(loom-state), the job's %llu bytes do not fit",
                                 pool, nodes[i], (unsigned long long)used, (unsigned long long)cap,
                                 (unsigned long long)need);
                        return -1;
                }
        }
        return 0;
}

int srv_state_admit(loom_server *s, const loom_job_spec *spec, const loom_decision *d, char *why,
                    size_t len)
{
        if (!s->cfg.state.host_usage)
                return 0;
        if (check_nodes(s, d->rollout_nodes, d->n_rollout_nodes, spec->mem_rollout, "rollout", why,
                        len))
                return -1;
        return check_nodes(s, d->train_nodes, d->n_train_nodes, spec->mem_train, "training", why,
                           len);
}
