/*
 * metrics.c - loomd's /metrics page in the Prometheus text exposition format (version 0.0.4):
 * jobs by state, groups, nodes and $/h per pool, decisions by kind, permit latency and phase
 * duration histograms, lease and request counters, usage and limits by tenant (quota.c), and
 * per live job its iterations, SLO headroom and cost so far. Rendered on the scheduler thread,
 * which owns every number here. No label is named `job` or `instance`: Prometheus sets those on
 * every series it scrapes and renames a scraped one to `exported_job` (a job is `job_id` and
 * `job_name`).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

void srv_hist_init(srv_hist *h, const double *le, int n)
{
        memset(h, 0, sizeof *h);
        h->n = n < SRV_HIST_MAX ? n : SRV_HIST_MAX;
        memcpy(h->le, le, (size_t)h->n * sizeof *le);
}

void srv_hist_add(srv_hist *h, double v)
{
        int i = 0;
        while (i < h->n && v > h->le[i])
                i++;
        h->count[i]++;
        h->sum += v;
        h->total++;
}

#ifndef LOOM_VERSION
#define LOOM_VERSION "unknown"
#endif

static const char *const lease_end_names[] = {"released", "failed", "expired", "revoked"};

void srv_metrics_lease_end(loom_server *s, const char *state)
{
        for (int i = 0; i < 4; i++)
                if (!strcmp(state, lease_end_names[i]))
                        s->m.leases_ended[i]++;
}

void srv_metrics_reply(loom_server *s, int status)
{
        if (status == 409)
                s->m.replies_conflict++;
        else
                s->m.replies_by_class[status / 100 < 6 ? status / 100 : 0]++;
}

void srv_metrics_init(srv_metrics *m)
{
        static const double permit[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                        0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
        static const double phase[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1,    2.5,  5,
                                       10,   30,   60,  300,  900, 1800, 3600, 7200};
        memset(m, 0, sizeof *m);
        srv_hist_init(&m->permit_latency, permit, 16);
        srv_hist_init(&m->phase_duration[0], phase, 16);
        srv_hist_init(&m->phase_duration[1], phase, 16);
}

/* A growing text buffer; on allocation failure it stays failed and render returns NULL. */
typedef struct buf {
        char *p;
        size_t len, cap;
        bool failed;
} buf;

static void vput(buf *b, const char *fmt, va_list args)
{
        for (int attempt = 0; attempt < 2 && !b->failed; attempt++) {
                va_list ap;
                va_copy(ap, args);
                int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
                va_end(ap);
                if (n < 0) {
                        b->failed = true;
                        return;
                }
                if (b->p && b->len + (size_t)n < b->cap) {
                        b->len += (size_t)n;
                        return;
                }
                size_t cap = b->cap ? b->cap : 4096;
                while (cap <= b->len + (size_t)n)
                        cap *= 2;
                char *q = realloc(b->p, cap);
                if (!q) {
                        b->failed = true;
                        return;
                }
                b->p = q;
                b->cap = cap;
        }
}

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vput(b, fmt, ap);
        va_end(ap);
}

/* put for quota.c, which does not know buf */
static void put_any(void *b, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vput(b, fmt, ap);
        va_end(ap);
}

static void hist(buf *b, const char *name, const char *labels, const srv_hist *h)
{
        uint64_t cum = 0;
        const char *sep = labels[0] ? "," : "";
        for (int i = 0; i <= h->n; i++) {
                cum += h->count[i];
                if (i < h->n)
                        put(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, h->le[i],
                            (unsigned long long)cum);
                else
                        put(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                            (unsigned long long)cum);
        }
        char lb[128] = "";
        if (labels[0])
                snprintf(lb, sizeof lb, "{%s}", labels);
        put(b, "%s_sum%s %.6f\n%s_count%s %llu\n", name, lb, h->sum, name, lb,
            (unsigned long long)h->total);
}

/* A label value as the exposition format quotes it: backslash, double quote and newline
 * escaped (a job's name is the submitter's text). One put per value: a page lists every live
 * job's name several times. */
static void put_label(buf *b, const char *v)
{
        char out[2 * SRV_NAME_MAX + 1];
        size_t n = 0;
        for (; *v && n + 2 < sizeof out; v++) {
                if (*v == '\\' || *v == '"' || *v == '\n')
                        out[n++] = '\\';
                out[n++] = *v == '\n' ? 'n' : *v;
        }
        out[n] = '\0';
        put(b, "%s", out);
}

/* The longest mean iteration a job's SLO allows: slo x its solo iteration, or the budget
 * measured on its learned profile once it is planned on that (as the timeline shows it). */
static loom_us slo_budget(const srv_job *j)
{
        return j->learned && j->learned_budget > 0 ? j->learned_budget : loom_job_budget(&j->spec);
}

/* The share of its SLO budget a job's recent mean iteration leaves: 1 - mean / budget, the
 * mean over the gaps between its last rollout grants (as `loom job` measures it on the
 * timeline). NAN before its second rollout. Below 0 it runs slower than its SLO. */
static double slo_headroom(const srv_job *j)
{
        uint64_t k = j->n_roll_grants < SRV_ITER_RING ? j->n_roll_grants : SRV_ITER_RING;
        loom_us budget = slo_budget(j);
        if (k < 2 || budget <= 0)
                return NAN;
        loom_us newest = j->roll_grants[(j->n_roll_grants - 1) % SRV_ITER_RING];
        loom_us oldest = j->roll_grants[(j->n_roll_grants - k) % SRV_ITER_RING];
        return 1.0 - (double)(newest - oldest) / (double)(k - 1) / (double)budget;
}

/* The same on its plan: its group's meta-iteration over its rate, against the budget. NAN
 * when the core has no group for it. */
static double planned_headroom(loom_server *s, const srv_job *j)
{
        loom_job_info ji;
        loom_group_info gi;
        loom_us budget = slo_budget(j);
        if (loom_sched_job_info(s->sched, j->retry.core, &ji) ||
            loom_sched_group_info(s->sched, ji.group, &gi) || gi.t_meta <= 0 || budget <= 0)
                return NAN;
        return 1.0 - (double)gi.t_meta / (ji.rate > 0 ? ji.rate : 1) / (double)budget;
}

/* One family with a sample per live job: name{job_id="..",job_name=".."} v[i] (NAN: none). */
static void job_series(buf *b, loom_server *s, const char *name, const char *help, const double *v)
{
        put(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                const srv_job *j = s->jobs[i];
                if (!srv_job_live(j->state) || isnan(v[i]))
                        continue;
                put(b, "%s{job_id=\"%u\",job_name=\"", name, j->pub);
                put_label(b, j->name);
                put(b, "\"} %.12g\n", v[i]);
        }
}

/* Live jobs only: an ended job's series stops, so the series stay as many as the jobs running. */
static void per_job(buf *b, loom_server *s)
{
        double *v = malloc((s->n_jobs ? s->n_jobs : 1) * sizeof *v);
        if (!v) {
                b->failed = true;
                return;
        }
        int64_t wall = srv_now_wall();
        for (uint32_t i = 0; i < s->n_jobs; i++)
                v[i] = (double)s->jobs[i]->done;
        job_series(b, s, "loom_job_iterations",
                   "Iterations a live job has finished, over all its admissions.", v);
        for (uint32_t i = 0; i < s->n_jobs; i++)
                v[i] = slo_headroom(s->jobs[i]);
        job_series(b, s, "loom_job_slo_headroom_ratio",
                   "Share of a live job's SLO budget its mean iteration over its last rollouts "
                   "leaves (0: at its SLO, below 0: slower than it).",
                   v);
        for (uint32_t i = 0; i < s->n_jobs; i++)
                v[i] = srv_job_live(s->jobs[i]->state) ? planned_headroom(s, s->jobs[i]) : NAN;
        job_series(b, s, "loom_job_planned_slo_headroom_ratio",
                   "Share of a live job's SLO budget its planned mean iteration (its group's "
                   "meta-iteration over its rate) leaves.",
                   v);
        for (uint32_t i = 0; i < s->n_jobs; i++)
                v[i] = srv_job_cost(s, s->jobs[i], wall, NULL);
        job_series(b, s, "loom_job_cost_dollars",
                   "US$ a live job has cost since its submit: its GPUs at list price.", v);
        free(v);
}

char *srv_metrics_render(loom_server *s)
{
        buf b = {0};
        const srv_metrics *m = &s->m;
        uint64_t by_state[SJ_CANCELLED + 1] = {0};
        for (uint32_t i = 0; i < s->n_jobs; i++)
                by_state[s->jobs[i]->state]++;
        put(&b,
            "# HELP loom_build_info The loomd build running (always 1).\n"
            "# TYPE loom_build_info gauge\nloom_build_info{version=\"%s\"} 1\n",
            LOOM_VERSION);
        put(&b, "# HELP loom_jobs Jobs known to loomd by state.\n# TYPE loom_jobs gauge\n");
        for (int i = 0; i <= SJ_CANCELLED; i++)
                put(&b, "loom_jobs{state=\"%s\"} %llu\n", srv_job_state_name(i),
                    (unsigned long long)by_state[i]);

        loom_sched_stats st;
        loom_sched_stats_get(s->sched, &st);
        const loom_cluster_cfg *c = loom_sched_cluster(s->sched);
        put(&b,
            "# HELP loom_groups Co-execution groups.\n# TYPE loom_groups gauge\n"
            "loom_groups %d\n",
            st.groups);
        put(&b, "# HELP loom_nodes Provisioned nodes by pool.\n# TYPE loom_nodes gauge\n");
        for (int p = 0; p < 2; p++)
                put(&b, "loom_nodes{pool=\"%s\"} %d\n", loom_pool_name((loom_pool)p), st.nodes[p]);
        put(&b, "# HELP loom_cost_per_hour Provisioning cost in US$ per hour by pool.\n"
                "# TYPE loom_cost_per_hour gauge\n");
        for (int p = 0; p < 2; p++)
                put(&b, "loom_cost_per_hour{pool=\"%s\"} %.4f\n", loom_pool_name((loom_pool)p),
                    st.nodes[p] * loom_cluster_node_price(c, (loom_pool)p));
        put(&b, "# HELP loom_decisions_total Placement decisions by kind.\n"
                "# TYPE loom_decisions_total counter\n");
        for (int k = 0; k < 4; k++)
                put(&b, "loom_decisions_total{kind=\"%s\"} %llu\n",
                    loom_decision_kind_name((loom_decision_kind)k),
                    (unsigned long long)st.decisions[k]);
        put(&b,
            "# HELP loom_replans_total Groups re-planned on a job's learned profile (admission "
            "p99/p95), replayed ones included.\n"
            "# TYPE loom_replans_total counter\nloom_replans_total %llu\n",
            (unsigned long long)st.replans);
        put(&b,
            "# HELP loom_tail_migrations_total Rollout tails migrated.\n"
            "# TYPE loom_tail_migrations_total counter\nloom_tail_migrations_total %llu\n",
            (unsigned long long)m->migrations);
        put(&b,
            "# HELP loom_leases_total Leases by outcome.\n# TYPE loom_leases_total counter\n"
            "loom_leases_total{event=\"granted\"} %llu\n",
            (unsigned long long)m->leases_granted);
        for (int i = 0; i < 4; i++)
                put(&b, "loom_leases_total{event=\"%s\"} %llu\n", lease_end_names[i],
                    (unsigned long long)m->leases_ended[i]);
        put(&b, "loom_leases_total{event=\"permit_expired\"} %llu\n",
            (unsigned long long)m->permits_expired);
        put(&b,
            "# HELP loom_readmissions_total Jobs admitted again, by cause (restart: a failure "
            "retried; drift: phases longer than planned; learned: its group lost the job's "
            "budget on its learned profile; moved: a lone member moved to a cheaper group; node: its "
            "node failed, was drained or did not come up, no restart spent).\n"
            "# TYPE loom_readmissions_total counter\n"
            "loom_readmissions_total{cause=\"restart\"} %llu\n"
            "loom_readmissions_total{cause=\"drift\"} %llu\n"
            "loom_readmissions_total{cause=\"learned\"} %llu\n"
            "loom_readmissions_total{cause=\"moved\"} %llu\n"
            "loom_readmissions_total{cause=\"node\"} %llu\n"
            "# HELP loom_jobs_failed_total Jobs failed for good (restarts used up).\n"
            "# TYPE loom_jobs_failed_total counter\nloom_jobs_failed_total %llu\n"
            "# HELP loom_attaches_total Workers attached to a job.\n"
            "# TYPE loom_attaches_total counter\nloom_attaches_total %llu\n",
            (unsigned long long)m->restarts, (unsigned long long)m->drift_resubmits,
            (unsigned long long)m->learned_resubmits, (unsigned long long)m->moved_resubmits,
            (unsigned long long)m->node_resubmits,
            (unsigned long long)m->failed_final, (unsigned long long)m->attaches);
        put(&b, "# HELP loom_job_phase_drift_ratio p95 of a live job's recent phase times over "
                "the planned time (absent until the window is full).\n"
                "# TYPE loom_job_phase_drift_ratio gauge\n");
        for (uint32_t i = 0; i < s->n_jobs; i++)
                for (int p = 0; p < 2 && srv_job_live(s->jobs[i]->state); p++) {
                        double ratio = srv_drift_ratio(s, s->jobs[i], p);
                        if (ratio <= 0)
                                continue;
                        put(&b, "loom_job_phase_drift_ratio{job_id=\"%u\",job_name=\"",
                            s->jobs[i]->pub);
                        put_label(&b, s->jobs[i]->name);
                        put(&b, "\",phase=\"%s\"} %.4f\n", p ? "train" : "rollout", ratio);
                }
        per_job(&b, s);
        srv_quota_metrics(s, put_any, &b);
        put(&b, "# HELP loom_permit_latency_seconds From an acquire arriving to its grant.\n"
                "# TYPE loom_permit_latency_seconds histogram\n");
        hist(&b, "loom_permit_latency_seconds", "", &m->permit_latency);
        put(&b, "# HELP loom_phase_duration_seconds Lease lengths of finished phases.\n"
                "# TYPE loom_phase_duration_seconds histogram\n");
        hist(&b, "loom_phase_duration_seconds", "phase=\"rollout\"", &m->phase_duration[0]);
        hist(&b, "loom_phase_duration_seconds", "phase=\"train\"", &m->phase_duration[1]);
        put(&b,
            "# HELP loom_http_requests_total Requests handled by the scheduler thread.\n"
            "# TYPE loom_http_requests_total counter\nloom_http_requests_total %llu\n",
            (unsigned long long)m->requests);
        put(&b, "# HELP loom_http_replies_total Replies by status class; 409, the permit "
                "protocol's answer to an acquire out of turn or for an ended job, apart from "
                "the other 4xx.\n"
                "# TYPE loom_http_replies_total counter\n");
        for (int k = 1; k <= 5; k++)
                put(&b, "loom_http_replies_total{code=\"%dxx\"} %llu\n", k,
                    (unsigned long long)m->replies_by_class[k]);
        put(&b, "loom_http_replies_total{code=\"409\"} %llu\n",
            (unsigned long long)m->replies_conflict);
        if (s->cfg.exec)
                put(&b,
                    "# HELP loom_exec_failures_total Workers the executor saw fail in the "
                    "cluster.\n# TYPE loom_exec_failures_total counter\n"
                    "loom_exec_failures_total %llu\n",
                    (unsigned long long)m->exec_failures);
        put(&b,
            "# HELP loom_store_commits_total Store transactions committed.\n"
            "# TYPE loom_store_commits_total counter\nloom_store_commits_total %llu\n",
            (unsigned long long)m->commits);
        put(&b,
            "# HELP loom_store_errors_total Batches rolled back because a store write failed "
            "(disk full, I/O error).\n# TYPE loom_store_errors_total counter\n"
            "loom_store_errors_total %llu\n"
            "# HELP loom_store_writable 0 while the store refuses writes (writes get 503).\n"
            "# TYPE loom_store_writable gauge\nloom_store_writable %d\n",
            (unsigned long long)m->store_errors, s->degraded ? 0 : 1);
        if (b.failed) {
                free(b.p);
                return NULL;
        }
        return b.p;
}
