/*
 * plex_pool.c - one training pool shared by jobs whose training phase is a chain of
 * serviceized calls (compute_log_prob, update_actor, sync_weight), under rr | hrrs | fcfs.
 *
 * A job loops: rollout on its own GPUs, then its chain of calls on the pool, one after another
 * (each call is queued when the previous one finishes). The pool runs one call at a time; when
 * it changes the job whose state it holds it pays that job's setup (offload + load) and counts
 * a switch. Decisions happen only at operation boundaries (a call finished or the pool idle):
 *   - fcfs: the call that has waited longest, whoever owns it (the paper's naive baseline);
 *   - rr:   WEAVE's strict round robin of whole training phases in job order: a phase runs
 *           to its end, and the next one is the next job's in turn, waited for if not ready;
 *   - hrrs: the resident job's chain continues unless a foreign chain scores more than
 *           margin x the resident's (Algorithm 1's running-request score, 1 + W / remaining);
 *           an idle pool takes the highest HRRS score (Eq. 3-4).
 * Simulated time in seconds (double); GPU work is not executed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/plexsim.h"

typedef struct pjob {
        const loom_plexsim_pool_job *j;
        int iter;        /* iterations finished */
        int call;        /* next call of the chain; -1: rolling out */
        double ready_at; /* rollout ends / next call queued at */
        double chain_at; /* when the current chain became ready */
        double chain_work;
        bool done;
        uint64_t seq;
} pjob;

/* The rollout of job k's iteration i: depends only on (seed, k, i). */
static double roll_len(const loom_plexsim_pool_cfg *c, const pjob *p, int k)
{
        double u =
            (double)(loom_mix64(c->seed ^ loom_mix64((uint64_t)k * 1000003u + (uint64_t)p->iter)) >>
                     11) /
            9007199254740992.0;
        return p->j->roll_s * (1 + p->j->jitter * (2 * u - 1));
}

static double chain_left(const pjob *p)
{
        double w = 0;
        for (int i = p->call; i < p->j->n_calls; i++)
                w += p->j->calls_s[i];
        return w;
}

static loom_us us(double s)
{
        return loom_us_from_s(s);
}

/* A job's queued call as an HRRS request: its whole remaining chain is the service time. */
static loom_hrrs_req req(const pjob *p, uint32_t id)
{
        return (loom_hrrs_req){id, us(p->chain_at), us(chain_left(p)), us(p->j->setup_s), p->seq};
}

typedef struct pool {
        const loom_plexsim_pool_cfg *c;
        pjob *p;
        int n;
        int resident; /* -1: none */
        int rr_next;
        double now;
} pool;

static bool queued(const pool *s, int k)
{
        const pjob *p = &s->p[k];
        return !p->done && p->call >= 0 && p->ready_at <= s->now;
}

/* The job whose call runs next, or -1 to wait. */
static int choose(pool *s)
{
        loom_hrrs_req q[64];
        int who[64], n = 0;
        for (int k = 0; k < s->n && n < 64; k++)
                if (queued(s, k)) {
                        q[n] = req(&s->p[k], (uint32_t)k + 1);
                        /* FCFS orders calls by when each was queued, not by chain */
                        if (s->c->dispatch == LOOM_DISPATCH_FCFS)
                                q[n].arrival = us(s->p[k].ready_at);
                        who[n++] = k;
                }
        int r = s->resident;
        bool mid_chain = r >= 0 && queued(s, r) && s->p[r].call > 0;
        switch (s->c->dispatch) {
        case LOOM_DISPATCH_FCFS: {
                int i = loom_hrrs_pick(LOOM_DISPATCH_FCFS, q, n, us(s->now), 0, 0);
                return i < 0 ? -1 : who[i];
        }
        case LOOM_DISPATCH_RR:
                if (mid_chain)
                        return r;
                for (int t = 0; t < s->n; t++) {
                        int k = (s->rr_next + t) % s->n;
                        if (s->p[k].done)
                                continue;
                        return queued(s, k) ? k : -1; /* strict: wait for the one in turn */
                }
                return -1;
        case LOOM_DISPATCH_HRRS:
                if (mid_chain) {
                        loom_hrrs_req run = req(&s->p[r], (uint32_t)r + 1);
                        int i = loom_hrrs_preempt(&run, q, n, us(s->now), s->c->margin);
                        return i < 0 ? r : who[i];
                }
                int i = loom_hrrs_pick(LOOM_DISPATCH_HRRS, q, n, us(s->now),
                                       r >= 0 ? (uint32_t)r + 1 : 0, 0);
                return i < 0 ? -1 : who[i];
        }
        return -1;
}

static double next_event(const pool *s)
{
        double t = INFINITY;
        for (int k = 0; k < s->n; k++)
                if (!s->p[k].done && s->p[k].ready_at > s->now && s->p[k].ready_at < t)
                        t = s->p[k].ready_at;
        return t;
}

int loom_plexsim_pool_run(const loom_plexsim_pool_cfg *c, const loom_plexsim_pool_job *jobs, int n,
                          loom_plexsim_pool_res *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        if (n < 1 || n > 64)
                return loom_err_set(e, LOOM_EINVAL, "jobs", "need 1..64 jobs, got %d", n);
        for (int k = 0; k < n; k++)
                if (jobs[k].n_calls < 1 || jobs[k].n_calls > 3 || jobs[k].iterations < 1 ||
                    jobs[k].roll_s < 0 || jobs[k].setup_s < 0 || jobs[k].jitter < 0 ||
                    jobs[k].jitter >= 1)
                        return loom_err_set(e, LOOM_EINVAL, "jobs", "job %d is malformed", k);
        int64_t total = 0;
        for (int k = 0; k < n; k++)
                total += jobs[k].iterations;
        pjob *p = calloc((size_t)n, sizeof *p);
        double *delay = malloc(sizeof *delay * (size_t)total);
        if (!p || !delay) {
                free(p);
                free(delay);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        pool s = {c, p, n, -1, 0, INFINITY};
        uint64_t seq = 0;
        for (int k = 0; k < n; k++) {
                p[k].j = &jobs[k];
                p[k].call = -1;
                p[k].ready_at = jobs[k].start_s + roll_len(c, &p[k], k);
                if (jobs[k].start_s < s.now)
                        s.now = jobs[k].start_s;
        }
        double t0 = s.now, end = t0;
        int64_t nd = 0;
        for (;;) {
                /* Rollouts that ended queue their first call. */
                for (int k = 0; k < n; k++)
                        if (!p[k].done && p[k].call < 0 && p[k].ready_at <= s.now) {
                                p[k].call = 0;
                                p[k].chain_at = p[k].ready_at;
                                p[k].chain_work = chain_left(&p[k]);
                                p[k].seq = ++seq;
                        }
                int k = choose(&s);
                if (k < 0) {
                        double t = next_event(&s);
                        if (!isfinite(t))
                                break;
                        s.now = t;
                        continue;
                }
                pjob *x = &p[k];
                double run = x->j->calls_s[x->call];
                if (s.resident != k) {
                        if (s.resident >= 0) {
                                out->switches++;
                                run += x->j->setup_s;
                        }
                        s.resident = k;
                }
                out->busy_s += run;
                s.now += run;
                x->call++;
                x->ready_at = s.now;
                if (x->call == x->j->n_calls) { /* chain done: iteration done, roll out again */
                        double w = x->chain_work;
                        delay[nd++] = w > 0 ? (s.now - x->chain_at - w) / w : 0;
                        x->iter++;
                        x->call = -1;
                        s.rr_next = (k + 1) % n;
                        if (x->iter == x->j->iterations) {
                                x->done = true;
                                if (s.now > end)
                                        end = s.now;
                        } else {
                                x->ready_at = s.now + roll_len(c, x, k);
                        }
                }
        }
        out->makespan_s = end - t0;
        out->bubble = out->makespan_s > 0 ? 1 - out->busy_s / out->makespan_s : 0;
        out->switches_per_h = out->makespan_s > 0 ? out->switches * 3600.0 / out->makespan_s : 0;
        out->chains = nd;
        double sum = 0;
        for (int64_t i = 0; i < nd; i++)
                sum += delay[i];
        qsort(delay, (size_t)nd, sizeof *delay, loom_cmp_double);
        out->delay_mean = nd ? sum / (double)nd : 0;
        out->delay_p50 = nd ? loom_quantile_rank(delay, (size_t)nd, 0.50) : 0;
        out->delay_p99 = nd ? loom_quantile_rank(delay, (size_t)nd, 0.99) : 0;
        free(delay);
        free(p);
        return 0;
}
