/*
 * plex_cluster.c - PlexRL's trace-driven cluster (§6.3, Figure 8): jobs of the Table 2 models
 * arrive, wait in a queue, and are placed on node groups of a fixed training pool by the core's
 * loom_plex (isolated, pack, spread), or by spread with backfill. A placed job's training
 * segments are reserved on its group's timeline at its phase shift, so it runs at its own cycle
 * and finishes after iterations x cycle plus the shift; its group's nodes come back when the
 * last resident leaves.
 *
 * Queue order: FIFO; the head blocks everyone behind it except under backfill, where any later
 * job that fits starts at once. Every job's footprint includes its setup (state load) before
 * its training, so a shared group has room for the switch it causes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/plexsim.h"

/* Table 2 cycles and calls; Table 1 GPUs (training DP x CP x PP, rollout DP_R x TP_R);
 * §6.2 savings of two-job packing. */
static const loom_plexsim_model models[] = {
    {"7B", 7, 289.03, {9.66, 38.08, 9.76}, 2 * 4 * 1, 1 * 2, 0.8010, 0.3136},
    {"30B", 30, 284.80, {19.62, 56.35, 7.57}, 8 * 8 * 1, 4 * 2, 0.7067, 0.3010},
    {"235B", 235, 589.71, {20.11, 82.39, 8.89}, 1 * 8 * 12, 4 * 8, 0.8111, 0.3758},
};

const loom_plexsim_model *loom_plexsim_models(int *n)
{
        *n = (int)(sizeof models / sizeof models[0]);
        return models;
}

double loom_plexsim_setup_s(double model_b)
{
        return 19.0 * model_b / 30.0;
}

static const char *const pnames[] = {"plex-isolated", "plex-pack", "plex-spread", "plex-backfill"};

const char *loom_plexsim_policy_name(loom_plexsim_policy p)
{
        return (unsigned)p <= LOOM_PLEXSIM_BACKFILL ? pnames[p] : "?";
}

int loom_plexsim_policy_parse(const char *s, loom_plexsim_policy *out)
{
        for (int i = 0; i <= LOOM_PLEXSIM_BACKFILL; i++)
                if (s && !strcmp(s, pnames[i])) {
                        *out = (loom_plexsim_policy)i;
                        return 0;
                }
        return LOOM_EINVAL;
}

void loom_plexsim_jobs_from_trace(const double *arrival_s, const double *duration_s,
                                  const int *gpus, int n, loom_plexsim_job *out)
{
        for (int i = 0; i < n; i++) {
                int m = gpus[i] <= 1 ? 0 : gpus[i] <= 4 ? 1 : 2;
                int it = (int)llround(duration_s[i] / models[m].cycle_s);
                out[i] = (loom_plexsim_job){arrival_s[i], m, it < 1 ? 1 : it, false};
        }
}

void loom_plexsim_cluster_res_free(loom_plexsim_cluster_res *r)
{
        if (r) {
                free(r->queue_delay);
                r->queue_delay = NULL;
        }
}

static void plex_job(const loom_plexsim_model *m, loom_plex_job *j, int gpn)
{
        loom_us calls[3];
        for (int i = 0; i < 3; i++)
                calls[i] = loom_us_from_s(m->calls_s[i]);
        loom_us train = calls[0] + calls[1] + calls[2];
        loom_plex_job_from_calls(j, m->train_gpus / gpn, loom_us_from_s(m->cycle_s) - train, calls,
                                 3, loom_us_from_s(loom_plexsim_setup_s(m->model_b)), true);
}

typedef struct run {
        int state; /* 0 waiting to arrive, 1 queued, 2 running, 3 done */
        double start, end;
        double repack_at; /* a cold start's profiled cycle ends (0: none pending) */
        int32_t offset;   /* its phase on the timeline, slots */
} run;

static double pct(const double *sorted, int n, double q)
{
        return n > 0 ? loom_quantile_rank(sorted, (size_t)n, q) : 0;
}

typedef struct ctx {
        loom_plex *p;
        const loom_plexsim_job *jobs;
        run *r;
        int n;
        double seen, pruned;
} ctx;

/* Try to start job i now; true if it started. */
static bool try_start(ctx *c, int i, double now, loom_err *e)
{
        loom_plex_job pj;
        plex_job(&models[c->jobs[i].model], &pj, 8);
        pj.profiled = !c->jobs[i].cold;
        loom_plex_decision d;
        if (loom_plex_place(c->p, (uint32_t)i + 1, &pj, &d, e))
                return false;
        c->seen += d.groups_seen;
        c->pruned += d.groups_pruned;
        if (!d.placed)
                return false;
        c->r[i].state = 2;
        c->r[i].start = now;
        c->r[i].end = now + d.shift + c->jobs[i].iterations * models[c->jobs[i].model].cycle_s;
        c->r[i].repack_at = d.cold ? now + models[c->jobs[i].model].cycle_s : 0;
        loom_plex_job_group(c->p, (uint32_t)i + 1, NULL, &c->r[i].offset);
        return true;
}

/* A cold start profiled its cycle: repack it. Moving changes its phase, which delays the rest
 * of its run by the phase difference. */
static void repack(ctx *c, int i, loom_plexsim_cluster_res *out)
{
        loom_tl_group g0, g1;
        loom_plex_job_group(c->p, (uint32_t)i + 1, &g0, NULL);
        loom_plex_decision d;
        c->r[i].repack_at = 0;
        if (loom_plex_repack(c->p, (uint32_t)i + 1, &d))
                return;
        c->seen += d.groups_seen;
        c->pruned += d.groups_pruned;
        int32_t off;
        loom_plex_job_group(c->p, (uint32_t)i + 1, &g1, &off);
        if (g1 == g0)
                return;
        int32_t period = loom_timeline_span(loom_plex_timeline(c->p),
                                            loom_us_from_s(models[c->jobs[i].model].cycle_s));
        int32_t moved = ((off - c->r[i].offset) % period + period) % period;
        c->r[i].end += moved * loom_us_to_s(loom_plex_config(c->p)->slot_us);
        c->r[i].offset = off;
        out->repacked++;
}

/* Start what the policy lets start now. */
static void schedule(ctx *c, loom_plexsim_policy pol, double now, loom_err *e)
{
        for (int i = 0; i < c->n; i++) {
                if (c->r[i].state != 1)
                        continue;
                if (!try_start(c, i, now, e) && pol != LOOM_PLEXSIM_BACKFILL)
                        return; /* FIFO: the head blocks the rest */
        }
}

/* Switch-ins per second implied by the groups now: each resident of a shared group loads its
 * state once per cycle. */
static double switch_rate(const ctx *c)
{
        const loom_timeline *t = loom_plex_timeline(c->p);
        double rate = 0;
        for (int i = 0; i < c->n; i++) {
                if (c->r[i].state != 2)
                        continue;
                loom_tl_group g;
                if (loom_plex_job_group(c->p, (uint32_t)i + 1, &g, NULL) == 0 &&
                    loom_timeline_group_jobs(t, g) > 1)
                        rate += 1.0 / models[c->jobs[i].model].cycle_s;
        }
        return rate;
}

int loom_plexsim_cluster_run(loom_plexsim_policy pol, const loom_plexsim_job *jobs, int n,
                             int nodes, loom_plexsim_cluster_res *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        out->policy = pol;
        if ((unsigned)pol > LOOM_PLEXSIM_BACKFILL)
                return loom_err_set(e, LOOM_EINVAL, "policy", "unknown policy");
        for (int i = 0; i < n; i++)
                if (jobs[i].model < 0 || jobs[i].model > 2 ||
                    models[jobs[i].model].train_gpus / 8 > nodes)
                        return loom_err_set(e, LOOM_EINVAL, "nodes",
                                            "job %d needs %d training nodes, the pool has %d", i,
                                            models[jobs[i].model].train_gpus / 8, nodes);
        loom_plex_cfg pc;
        loom_plex_cfg_default(&pc);
        pc.nodes = nodes;
        pc.mode = pol == LOOM_PLEXSIM_ISOLATED ? LOOM_PLEX_ISOLATED
                  : pol == LOOM_PLEXSIM_PACK   ? LOOM_PLEX_PACK
                                               : LOOM_PLEX_SPREAD;
        ctx c = {loom_plex_new(&pc, e), jobs, calloc((size_t)n, sizeof(run)), n, 0, 0};
        out->queue_delay = malloc(sizeof(double) * (size_t)(n ? n : 1));
        if (!c.p || !c.r || !out->queue_delay) {
                loom_plex_free(c.p);
                free(c.r);
                loom_plexsim_cluster_res_free(out);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        double now = n ? jobs[0].arrival_s : 0, t0 = now, last = now, switches = 0;
        for (int i = 0; i < n; i++)
                if (jobs[i].arrival_s < t0)
                        t0 = now = jobs[i].arrival_s;
        for (int done = 0; done < n;) {
                /* the next event: an arrival or a completion */
                double t = INFINITY;
                for (int i = 0; i < n; i++) {
                        if (c.r[i].state == 0 && jobs[i].arrival_s < t)
                                t = jobs[i].arrival_s;
                        if (c.r[i].state == 2 && c.r[i].end < t)
                                t = c.r[i].end;
                        if (c.r[i].state == 2 && c.r[i].repack_at > 0 && c.r[i].repack_at < t)
                                t = c.r[i].repack_at;
                }
                switches += switch_rate(&c) * (t - now);
                now = t;
                for (int i = 0; i < n; i++) {
                        if (c.r[i].state == 2 && c.r[i].end <= now) {
                                loom_plex_release(c.p, (uint32_t)i + 1);
                                c.r[i].state = 3;
                                done++;
                                if (now > last)
                                        last = now;
                        }
                        if (c.r[i].state == 2 && c.r[i].repack_at > 0 && c.r[i].repack_at <= now)
                                repack(&c, i, out);
                        if (c.r[i].state == 0 && jobs[i].arrival_s <= now)
                                c.r[i].state = 1;
                }
                schedule(&c, pol, now, e);
                int g = loom_plex_groups(c.p);
                if (g > out->max_groups)
                        out->max_groups = g;
        }
        out->n = n;
        out->makespan_h = (last - t0) / 3600.0;
        for (int i = 0; i < n; i++) {
                double dur = c.r[i].end - c.r[i].start;
                out->queue_delay[i] = dur > 0 ? (c.r[i].start - jobs[i].arrival_s) / dur : 0;
        }
        double *s = malloc(sizeof *s * (size_t)(n ? n : 1));
        if (s) {
                memcpy(s, out->queue_delay, sizeof *s * (size_t)n);
                qsort(s, (size_t)n, sizeof *s, loom_cmp_double);
                out->queue_delay_p50 = pct(s, n, 0.50);
                out->queue_delay_p99 = pct(s, n, 0.99);
                out->queue_delay_max = n ? s[n - 1] : 0;
                free(s);
        }
        out->switches_per_h = last > t0 ? switches * 3600.0 / (last - t0) : 0;
        out->pruned_fraction = c.seen > 0 ? c.pruned / c.seen : 0;
        loom_plex_free(c.p);
        free(c.r);
        return 0;
}
