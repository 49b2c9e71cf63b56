/*
 * plex_place.c - the facade's LOOM_PLACER_PLEX: placement by PlexRL's timeline (plex.c)
 * instead of Algorithm 1, and the HRRS/FCFS order of a training pool.
 *
 * Each facade group owns one timeline group of its training nodes. A job's periodic demand is
 * its training phase (the serviceized calls back to back) plus the setup before it
 * (policy.warm_switch: T_offload + T_load), in a period of its solo iteration time; it keeps
 * rollout nodes of its own, as in PlexRL, where rollout runs on per-job GPUs and only the
 * training pool is shared. A job submitted with phase times is a warm start (its profile is
 * the spec). The host memory of the training nodes stays a hard bound, checked before fitting.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static loom_us remaining(const job *j, const loom_us *calls, int n);

/* Big enough never to bind: the facade provisions training nodes on demand. */
#define PLEX_POOL_NODES (1 << 20)

int loom__plex_new(loom_sched *s, loom_err *e)
{
        loom_plex_cfg c;
        loom_plex_cfg_default(&c);
        c.nodes = PLEX_POOL_NODES;
        c.fit.alpha = s->policy.plex_alpha;
        c.fit.w1 = s->policy.plex_w1;
        c.fit.w2 = s->policy.plex_w2;
        c.duty_max = s->policy.plex_duty_max;
        c.max_jobs = s->policy.max_group_size;
        s->plex = loom_plex_new(&c, e);
        return s->plex ? 0 : LOOM_ENOMEM;
}

static void plex_job_raw(const loom_sched *s, const loom_job_spec *spec, loom_plex_job *j)
{
        loom_us t_train = spec->t_train;
        loom_plex_job_from_calls(j, spec->train_gpus / s->cluster.gpus_per_node, spec->t_roll,
                                 &t_train, 1, s->policy.warm_switch, true);
        j->period += spec->t_sync; /* the sync phase uses no pool: idle time of the cycle */
}

/*
 * A member's iteration on a shared pool, shift aside: its rollout on its own GPUs, the wait for
 * its reserved window (the period rounded up to whole slots), its calls, its sync, and the part
 * of the setup (T_offload + T_load) its rollout does not hide - on a shared pool the state is
 * another job's when its window opens. Alone in a group nothing is switched: T_solo.
 */
static loom_us shared_iter(const loom_sched *s, const loom_job_spec *spec)
{
        loom_plex_job j;
        plex_job_raw(s, spec, &j);
        const loom_timeline *t = loom_plex_timeline(s->plex);
        loom_us it = (loom_us)loom_timeline_span(t, j.period) * loom_timeline_slot_us(t);
        if (s->policy.warm_switch > spec->t_roll)
                it += s->policy.warm_switch - spec->t_roll;
        return it;
}

/* The job's demand, its shift capped by its SLO: the first iteration also waits the shift for
 * its window, so shared_iter + shift <= slo x T_solo. */
static void plex_job(const loom_sched *s, const loom_job_spec *spec, loom_plex_job *j)
{
        plex_job_raw(s, spec, j);
        j->capped = true;
        j->max_shift = loom_job_budget(spec) - shared_iter(s, spec);
}

/* The first member of g whose SLO a new co-member would break (its iteration turns shared), or
 * NULL. Residents' reservations never move when a job joins (commit only fills free windows),
 * so what can change for them is the switch they now pay. */
static const job *member_broken(const loom_sched *s, const group *g)
{
        for (int i = 0; i < g->n_members; i++)
                if (shared_iter(s, &g->members[i]->spec) > g->members[i]->slo_budget)
                        return g->members[i];
        return NULL;
}

typedef struct mem_ctx {
        const loom_sched *s;
        const loom_job_spec *spec;
} mem_ctx;

static bool mem_ok(void *ctx, loom_tl_group tg)
{
        const mem_ctx *m = ctx;
        const loom_sched *s = m->s;
        uint32_t gid = loom_plex_tag(s->plex, tg);
        const group *g = gid < s->next_group ? s->groups[gid] : NULL;
        if (!g)
                return false;
        uint64_t mt = loom_group_train_mem(m->spec->mem_train, m->spec->train_gpus, g->train_gpus);
        return g->train_mem_used + mt <= s->cluster.host_mem_bytes && !member_broken(s, g);
}

/* Every group the search looked at, as a candidate of the decision (record_candidates). */
typedef struct rec_ctx {
        const loom_sched *s;
        const loom_job_spec *spec;
        loom_decision *d;
        int k; /* rollout nodes of the job */
        int rc;
} rec_ctx;

static void note(void *ctx, loom_tl_group tg, loom_plex_outcome o, int32_t shift, double cost,
                 int32_t slack)
{
        static const loom_reject rej[] = {
            LOOM_REJECT_FULL,   LOOM_REJECT_NO_FIT,   LOOM_REJECT_DUTY, LOOM_REJECT_MEMORY,
            LOOM_REJECT_NO_FIT, LOOM_REJECT_COSTLIER, LOOM_REJECT_SLO,  LOOM_REJECT_NO_FIT};
        static const char *const why[] = {"group has max_group_size members",
                                          "no free window as long as the training phase",
                                          "a resident's foreign duty would pass plex_duty_max",
                                          "training nodes' host memory would overflow",
                                          "no shift in [0, alpha T] fits the free windows",
                                          "",
                                          "",
                                          ""};
        rec_ctx *r = ctx;
        loom_decision *d = r->d;
        if (r->rc || loom_reserve(&d->candidates, &d->cap_candidates, (size_t)d->n_candidates + 1,
                                  sizeof *d->candidates, 8)) {
                r->rc = LOOM_ENOMEM;
                return;
        }
        loom_candidate *c = &d->candidates[d->n_candidates++];
        memset(c, 0, sizeof *c);
        c->kind = LOOM_DECISION_ROLLOUT_SCALE;
        c->group = loom_plex_tag(r->s->plex, tg);
        c->n_rollout_nodes = r->k;
        c->new_rollout_nodes = r->k;
        for (int i = 0; i < r->k; i++)
                c->rollout_nodes[i] = r->s->next_rnode + (loom_node_id)i;
        c->marginal_cost_per_hour = r->k * r->s->price[LOOM_POOL_ROLLOUT];
        c->reject = rej[o];
        const group *g = c->group < r->s->next_group ? r->s->groups[c->group] : NULL;
        const job *m = o == LOOM_PLEX_PRUNED_DRIVER && g ? member_broken(r->s, g) : NULL;
        if (o == LOOM_PLEX_FITS) {
                snprintf(c->why, sizeof c->why, "fits at shift %d s (Eq. 1 cost %.4f, slack %d s)",
                         (int)shift, cost, (int)slack);
        } else if (o == LOOM_PLEX_SLO) {
                loom_us it = shared_iter(r->s, r->spec) + loom_us_from_s(shift);
                snprintf(c->why, sizeof c->why,
                         "slo: the new job's iteration %.1f s (shift %d s to its window) > "
                         "its budget %.1f s",
                         loom_us_to_s(it), (int)shift, loom_us_to_s(loom_job_budget(r->spec)));
        } else if (o == LOOM_PLEX_TOO_SMALL) {
                snprintf(c->why, sizeof c->why, "pool of %d training nodes < the job's %d",
                         loom_timeline_group_nodes(loom_plex_timeline(r->s->plex), tg),
                         r->spec->train_gpus / r->s->cluster.gpus_per_node);
        } else if (m) {
                c->reject = LOOM_REJECT_SLO;
                snprintf(c->why, sizeof c->why,
                         "slo: job %u's iteration on a shared pool %.1f s > its budget %.1f s",
                         (unsigned)m->id, loom_us_to_s(shared_iter(r->s, &m->spec)),
                         loom_us_to_s(m->slo_budget));
        } else
                snprintf(c->why, sizeof c->why, "%s", why[o]);
}

/* A cycle as long as the horizon cannot be planned on it: such a job gets a group of its own
 * that the timeline does not know (so nobody joins it). */
static bool unplannable(const loom_sched *s, const loom_plex_job *j)
{
        const loom_timeline *t = loom_plex_timeline(s->plex);
        return loom_timeline_span(t, j->period) >= loom_timeline_slots(t);
}

static int decide(const loom_sched *s, const loom_job_spec *spec, loom_plex_decision *o,
                  loom_decision *d, loom_err *e)
{
        loom_plex_job j;
        plex_job(s, spec, &j);
        if (unplannable(s, &j)) {
                memset(o, 0, sizeof *o);
                o->placed = o->new_group = true;
                o->group = LOOM_TL_NO_GROUP;
                snprintf(o->why, sizeof o->why,
                         "the cycle is not shorter than the planning horizon: a group of its "
                         "own, off the timeline");
                return 0;
        }
        mem_ctx m = {s, spec};
        if (!d || !d->record_candidates)
                return loom_plex_decide_if(s->plex, &j, mem_ok, &m, o, e);
        rec_ctx r = {s, spec, d, spec->rollout_gpus / s->cluster.gpus_per_node, 0};
        int rc = loom_plex_decide_explain(s->plex, &j, mem_ok, &m, note, &r, o, e);
        if (!rc && r.rc)
                rc = loom_err_set(e, r.rc, "", "out of memory");
        return rc;
}

int loom__plex_place(const loom_sched *s, const loom_job_spec *spec, loom_decision *d, loom_err *e)
{
        loom_plex_decision o;
        int rc = decide(s, spec, &o, d, e);
        if (rc)
                return rc;
        int k = spec->rollout_gpus / s->cluster.gpus_per_node;
        int t = spec->train_gpus / s->cluster.gpus_per_node;
        const group *g = o.new_group ? NULL : s->groups[loom_plex_tag(s->plex, o.group)];
        d->kind = g ? LOOM_DECISION_ROLLOUT_SCALE : LOOM_DECISION_NEW_GROUP;
        d->group = g ? g->id : s->next_group;
        d->n_rollout_nodes = k;
        for (int i = 0; i < k; i++)
                d->rollout_nodes[i] = s->next_rnode + (loom_node_id)i;
        d->n_train_nodes = g ? g->n_tnodes : t;
        for (int i = 0; i < d->n_train_nodes; i++)
                d->train_nodes[i] = g ? g->tnodes[i] : s->next_tnode + (loom_node_id)i;
        d->marginal_cost_per_hour =
            k * s->price[LOOM_POOL_ROLLOUT] + (g ? 0 : t * s->price[LOOM_POOL_TRAIN]);
        d->t_meta = g ? shared_iter(s, spec) + loom_us_from_s(o.shift) : loom_job_t_solo(spec);
        d->utilisation = 0;
        d->groups_pruned_bound = o.groups_pruned;
        snprintf(d->reason, sizeof d->reason, "plex: %s", o.why);
        if (!g && !o.cold) {
                loom_plex_job j;
                plex_job(s, spec, &j);
                size_t n = strlen(d->reason);
                if (j.max_shift < 0)
                        snprintf(d->reason + n, sizeof d->reason - n,
                                 "; slo: no shared pool, iteration there %.1f s > budget %.1f s",
                                 loom_us_to_s(shared_iter(s, spec)),
                                 loom_us_to_s(loom_job_budget(spec)));
                else
                        snprintf(d->reason + n, sizeof d->reason - n,
                                 "; slo: a shared pool only at shift <= %.1f s",
                                 loom_us_to_s(j.max_shift));
        }
        if (!g && d->record_candidates) {
                if (loom_reserve(&d->candidates, &d->cap_candidates, (size_t)d->n_candidates + 1,
                                 sizeof *d->candidates, 8))
                        return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                loom_candidate *c = &d->candidates[d->n_candidates++];
                memset(c, 0, sizeof *c);
                c->kind = LOOM_DECISION_NEW_GROUP;
                c->group = LOOM_NEW_GROUP;
                c->n_rollout_nodes = d->n_rollout_nodes;
                memcpy(c->rollout_nodes, d->rollout_nodes, sizeof c->rollout_nodes);
                c->new_rollout_nodes = k;
                c->new_train_nodes = t;
                c->marginal_cost_per_hour = d->marginal_cost_per_hour;
                c->t_meta = d->t_meta;
                snprintf(c->why, sizeof c->why, "chosen");
        }
        for (int i = 0; i < d->n_candidates && g; i++) /* the chosen one is not "costlier" */
                if (d->candidates[i].group == g->id &&
                    d->candidates[i].reject == LOOM_REJECT_COSTLIER) {
                        d->candidates[i].reject = LOOM_REJECT_NONE;
                        char was[sizeof d->candidates[i].why];
                        snprintf(was, sizeof was, "%s", d->candidates[i].why);
                        snprintf(d->candidates[i].why, sizeof d->candidates[i].why,
                                 "chosen: %.140s", was);
                }
        return 0;
}

int loom__plex_commit(loom_sched *s, loom_job_id id, const loom_job_spec *spec,
                      const loom_decision *d)
{
        loom_plex_decision o;
        loom_plex_job j;
        int rc = decide(s, spec, &o, NULL, NULL);
        if (rc)
                return rc;
        plex_job(s, spec, &j);
        if (unplannable(s, &j))
                return 0;
        if ((rc = loom_plex_commit(s->plex, id, &j, &o, NULL)))
                return rc;
        if (o.new_group)
                loom_plex_set_tag(s->plex, o.group, d->group);
        return 0;
}

void loom__plex_release(loom_sched *s, loom_job_id id)
{
        loom_plex_release(s->plex, id);
}

/*
 * HRRS or FCFS among the members waiting to train. A waiting member's request arrived when it
 * began to wait; E is its training time in the group; the setup is policy.warm_switch and is
 * charged when the pool last held another job's state.
 */
job *loom__train_pick(const loom_sched *s, const group *g, loom_us now)
{
        loom_hrrs_req q[LOOM_MAX_GROUP_SIZE];
        job *who[LOOM_MAX_GROUP_SIZE];
        int n = 0;
        for (int i = 0; i < g->n_members; i++) {
                job *j = g->members[i];
                if (j->state != LOOM_JOB_WAIT_TRAIN)
                        continue;
                loom_us c[LOOM_N_CALLS];
                int m = loom__job_calls(j, c);
                q[n] = (loom_hrrs_req){j->id, j->wait_since, m ? remaining(j, c, m) : j->t_train_in,
                                       s->policy.warm_switch, j->wait_seq};
                who[n++] = j;
        }
        int k = loom_hrrs_pick(s->policy.dispatch, q, n, now, g->train_last, g->train_last);
        return k < 0 ? NULL : who[k];
}

int loom__job_calls(const job *j, loom_us *calls)
{
        int n = loom_job_calls(&j->spec, calls);
        return n >= 2 ? n : 0;
}

/* The time j's remaining calls take on its group's pool (calls scale like t_train). */
static loom_us remaining(const job *j, const loom_us *calls, int n)
{
        loom_us left = 0;
        for (int i = j->call; i < n; i++)
                left += calls[i];
        return j->spec.t_train > 0
                   ? (loom_us)((double)left * (double)j->t_train_in / (double)j->spec.t_train)
                   : left;
}

job *loom__train_mid_chain(const loom_sched *s, const group *g, loom_us now)
{
        job *mid = NULL;
        for (int i = 0; i < g->n_members && !mid; i++) {
                job *j = g->members[i];
                if (j->state == LOOM_JOB_WAIT_TRAIN && j->call > 0)
                        mid = j;
        }
        if (!mid || s->policy.dispatch == LOOM_DISPATCH_FCFS)
                return NULL;
        if (s->policy.dispatch == LOOM_DISPATCH_RR)
                return mid;
        loom_us calls[LOOM_N_CALLS];
        int n = loom__job_calls(mid, calls);
        loom_hrrs_req run = {mid->id, mid->chain_since, remaining(mid, calls, n), 0, mid->wait_seq};
        loom_hrrs_req q[LOOM_MAX_GROUP_SIZE];
        job *who[LOOM_MAX_GROUP_SIZE];
        int k = 0;
        for (int i = 0; i < g->n_members; i++) {
                job *j = g->members[i];
                if (j == mid || j->state != LOOM_JOB_WAIT_TRAIN)
                        continue;
                loom_us c[LOOM_N_CALLS];
                int m = loom__job_calls(j, c);
                q[k] =
                    (loom_hrrs_req){j->id, j->chain_since, m ? remaining(j, c, m) : j->t_train_in,
                                    s->policy.warm_switch, j->wait_seq};
                who[k++] = j;
        }
        int w = loom_hrrs_preempt(&run, q, k, now, s->policy.preempt_margin);
        return w < 0 ? mid : who[w];
}
