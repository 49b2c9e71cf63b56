/*
 * tl.c - the run's timeline (`loom sim --timeline FILE`, loom_sim_cfg.timeline): one JSON object
 * per line for every node provisioned and released, every phase segment, every stop, restart,
 * rejection and completion, so that a run can be audited from what happened rather than from
 * the meter's sums (tests/integration/sim_timeline.py recomputes cost, occupancy, iterations
 * and SLO verdicts from it). Records, each with "policy" and "ev":
 *
 *   cluster   gpus_per_node, the $/GPU-h of each pool ("price": [rollout, train])
 *   job       job (workload index), arrival, iterations, slo, solo_us (its solo run time under
 *             its realisation, what the slowdown is measured against), warm_us (its warm switch)
 *   node      t, pool, node, up (true: provisioned, false: released)
 *   phase     job, iter, phase, pool, nodes, gpus (per node), switch (when it took the nodes),
 *             work (when its work began), end; start (segment start: a phase is split where
 *             its GPUs change: resized, its tail migrated), tail, lost (cut by a stop), call and
 *             calls (a training phase run call by call)
 *   stop | restart | done | rejected   job, t; a stop says why, a restart when it is ready
 *
 * Times are microseconds of simulated time. The writer prints numbers in a fixed format so the
 * same run gives the same bytes.
 */
#include "sim_int.h"

static const char *pool_name(loom_pool p)
{
        return p == LOOM_POOL_ROLLOUT ? "rollout" : "train";
}

void loom__sim_tl_head(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p)
{
        FILE *f = c->timeline;
        if (!f)
                return;
        const char *pol = loom_sim_policy_name(p);
        fprintf(f,
                "{\"policy\":\"%s\",\"ev\":\"cluster\",\"gpus_per_node\":%d,"
                "\"price\":[%.6f,%.6f]}\n",
                pol, c->cluster.gpus_per_node, c->cluster.gpu[LOOM_POOL_ROLLOUT].price_per_hour,
                c->cluster.gpu[LOOM_POOL_TRAIN].price_per_hour);
        for (int i = 0; i < w->n; i++) {
                const loom_sim_job *j = &w->jobs[i];
                fprintf(f,
                        "{\"policy\":\"%s\",\"ev\":\"job\",\"job\":%d,\"arrival\":%lld,"
                        "\"iterations\":%lld,\"slo\":%.9g,\"solo_us\":%lld,\"warm_us\":%lld}\n",
                        pol, i, (long long)j->arrival, (long long)j->spec.iterations, j->spec.slo,
                        (long long)loom_sim_job_solo_time(j, c),
                        (long long)loom_sim_warm(c, j->model_b));
        }
}

void loom__sim_tl_node(const loom_sim_cfg *c, loom_sim_policy p, loom_us t, loom_pool pool,
                       loom_node_id id, bool up)
{
        if (c->timeline)
                fprintf(c->timeline,
                        "{\"policy\":\"%s\",\"ev\":\"node\",\"t\":%lld,\"pool\":\"%s\","
                        "\"node\":%u,\"up\":%s}\n",
                        loom_sim_policy_name(p), (long long)t, pool_name(pool), (unsigned)id,
                        up ? "true" : "false");
}

void loom__sim_tl_seg(const loom_sim_cfg *c, loom_sim_policy p, const sim_tl_seg *s)
{
        FILE *f = c->timeline;
        if (!f || s->end < s->start)
                return;
        fprintf(f,
                "{\"policy\":\"%s\",\"ev\":\"phase\",\"job\":%d,\"iter\":%lld,\"phase\":\"%s\","
                "\"pool\":\"%s\",\"nodes\":[",
                loom_sim_policy_name(p), s->job, (long long)s->iter, loom_phase_name(s->phase),
                pool_name(s->pool));
        for (int k = 0; k < s->n_nodes; k++)
                fprintf(f, "%s%u", k ? "," : "", (unsigned)s->nodes[k]);
        fprintf(f, "],\"gpus\":[");
        for (int k = 0; k < s->n_nodes; k++)
                fprintf(f, "%s%d", k ? "," : "", s->gpus[k]);
        fprintf(f,
                "],\"switch\":%lld,\"work\":%lld,\"start\":%lld,\"end\":%lld,\"tail\":%s,"
                "\"lost\":%s,\"call\":%d,\"calls\":%d}\n",
                (long long)s->sw, (long long)s->work, (long long)s->start, (long long)s->end,
                s->tail ? "true" : "false", s->lost ? "true" : "false", s->call, s->calls);
}

void loom__sim_tl_event(const loom_sim_cfg *c, loom_sim_policy p, const char *ev, int job,
                        loom_us t, const char *why, loom_us ready)
{
        FILE *f = c->timeline;
        if (!f)
                return;
        fprintf(f, "{\"policy\":\"%s\",\"ev\":\"%s\",\"job\":%d,\"t\":%lld",
                loom_sim_policy_name(p), ev, job, (long long)t);
        if (why)
                fprintf(f, ",\"why\":\"%s\"", why);
        if (ready >= 0)
                fprintf(f, ",\"ready\":%lld", (long long)ready);
        fprintf(f, "}\n");
}
