/*
 * srv.h - loomd internals shared by the files of src/server (not API; see loom/server.h).
 *
 * Threads: libmicrohttpd's thread (http.c) parses a request into a srv_req, queues it and
 * suspends the connection; the scheduler thread (engine.c) owns everything else below - the
 * loom_sched, the job table, the store - handles a batch of queued requests inside one SQLite
 * transaction, commits, and only then resumes the connections whose replies are ready.
 *
 * Job states as the API shows them (engine.c drives every transition):
 *
 *     submit          first permit claimed         iterations reached
 *   --------> queued -------------------> running ------------------> finished
 *               |                           |
 *               +---- DELETE -------------> cancelled
 *               +---- lease/permit expired, release "failed" --> failed
 *
 * A failure (lease/permit expired, release "failed", a worker's attach taking over) ends in
 * `failed` only once max_restarts are used up; before that retry.c re-admits the job (it stays
 * queued/running, next phase rollout). A drift re-admission changes no state.
 *
 * Leases: granted (active) -> released | failed | expired | revoked (job cancelled) |
 * lost (loomd restarted while it was active: the worker acquires the phase again).
 */
#ifndef LOOM_SRV_H
#define LOOM_SRV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>
#include <sqlite3.h>

#include "loom/auth.h"
#include "loom/server.h"

struct MHD_Connection;
struct MHD_Daemon;

#define SRV_MAX_BODY (1u << 20) /* 1 MiB */
#define SRV_NAME_MAX 64
#define SRV_KEY_MAX 80

enum srv_job_state { SJ_QUEUED = 0, SJ_RUNNING, SJ_FINISHED, SJ_FAILED, SJ_CANCELLED };
const char *srv_job_state_name(int s);
static inline bool srv_job_live(int s)
{
        return s == SJ_QUEUED || s == SJ_RUNNING;
}

enum srv_req_kind {
        RQ_BAD = 0, /* reply already decided by the HTTP thread (parse error, 404 route) */
        RQ_SUBMIT,
        RQ_LIST_JOBS,
        RQ_GET_JOB,
        RQ_CANCEL,
        RQ_GROUPS,
        RQ_CLUSTER,
        RQ_ACQUIRE,
        RQ_PROGRESS,
        RQ_RELEASE,
        RQ_HEARTBEAT,
        RQ_METRICS,
        RQ_HEALTH,
        RQ_ATTACH,
        RQ_TIMELINE, /* GET /v1/timeline: the dashboard's data (dashboard.c) */
};

/* Who sent a request (auth.c): role, tenant, and for a worker token the one job it serves. */
typedef struct srv_principal {
        loom_role role;
        char tenant[LOOM_TENANT_MAX];
        uint32_t job;
} srv_principal;

/* One HTTP request. Allocated by http.c when the headers arrive, owned by the connection
 * (freed when libmicrohttpd reports the request completed); the scheduler thread only holds it
 * while the connection is suspended, and never touches it after resuming it. */
typedef struct srv_req {
        enum srv_req_kind kind;
        struct MHD_Connection *conn;
        loom_us t_arrival; /* monotonic */

        /* parsed arguments */
        uint32_t job;
        int64_t lease;
        loom_phase phase;
        loom_us wait;
        loom_us window; /* timeline: how far back */
        int64_t done, total;
        bool ok;
        bool explain;   /* submit: list the candidates placement looked at */
        bool dry_run;   /* submit: only say where the job would go; nothing changes */
        int limit;      /* GET /v1/jobs: page size */
        uint32_t after; /* GET /v1/jobs: the page starts after this job (id as shown; 0: first);
                         * GET /v1/groups: after group `after - 1` (0: first) */
        int list_state; /* GET /v1/jobs: -1 any, -2 live, else one srv_job_state */
        int takeover;   /* attach: 0 none, 1 any lease, 2 only a lease of `phase` */
        loom_job_spec spec;
        char name[SRV_NAME_MAX];
        char key[SRV_KEY_MAX + LOOM_TENANT_MAX]; /* Idempotency-Key of a submit, "" if none;
                                                  * "tenant/key" under tokens (auth.c) */
        srv_principal who;
        /* a lease call's row as srv_auth_scope read it, for lease_job in the same batch */
        bool lease_read;
        uint32_t lease_job;
        loom_phase lease_phase;
        char lease_state[16];
        json_t *body_json;
        /* Without a connection (the fuzz target), headers and query arguments come from here:
         * header != 0 for a header, else a query argument; NULL when absent. */
        const char *(*value)(const struct srv_req *r, int header, const char *key);
        void *value_arg;

        /* body as it arrives */
        char *upload;
        size_t upload_len, upload_cap;
        bool too_big;

        /* reply */
        bool dispatched; /* handed to the scheduler thread */
        bool ready;      /* status/body are final */
        bool finished;   /* on the scheduler's list of replies to send */
        int status;
        char *body;        /* malloc'd */
        const char *ctype; /* static */
        int retry_after_s; /* > 0: a Retry-After header (503 while the store refuses writes) */

        /* links: the scheduler queue; a waiting acquire's per-job and global lists */
        struct srv_req *qnext;
        struct srv_req *wnext, *wprev; /* global waiter list */
        struct srv_req *jnext;         /* per-job waiter list */
        loom_us deadline;
} srv_req;

typedef struct srv_lease {
        int64_t id;
        loom_phase phase;
        loom_pool pool; /* a lone member's rollout runs on its group's training nodes */
        int n_nodes;
        loom_node_id nodes[LOOM_MAX_JOB_NODES];
        int gpus;
        int keep_gpus; /* > 0 once the scheduler advised migrating the tail */
        loom_us granted_mono, deadline;
        int64_t granted_wall;
        int call, n_calls; /* a training phase run call by call: this call of n_calls */
        loom_us head;      /* a rollout's head: grant -> the progress report past the tail
                              threshold (monotonic, as its length is); 0 before that report */
} srv_lease;

/* A job's admissions (retry.c). Every admission is one core job: a restart or a drift
 * re-admission exits the current core job and submits a new one, so `core` moves on while the
 * loomd id (the API's) stays. Phase durations (grant -> release of each lease) are kept for the
 * current admission only, in a ring of the last SRV_DRIFT_MAX per phase. */
#define SRV_DRIFT_MAX 64
typedef struct srv_retry {
        uint32_t core;                 /* the core's id of the current admission */
        int restarts;                  /* failures retried */
        int resubmits;                 /* drift re-admissions */
        loom_us plan_roll, plan_train; /* profile the current admission was placed with */
        loom_us obs[2][SRV_DRIFT_MAX]; /* [0] rollout, [1] train; ring, newest at n - 1 */
        int n_obs[2];                  /* observed since the current admission */
        char cause[16];                /* of the last re-admission: "restart", "drift", "learned" */
        char why[200];                 /* a sentence saying why */
        int64_t at_wall;               /* when (us since the epoch), 0 if never */
} srv_retry;

#define SRV_ITER_RING 8
/* What loomd keeps about a job besides the core's view; index id - 1 in srv->jobs. */
typedef struct srv_job {
        uint32_t id;
        uint32_t pub; /* the id the API shows for it (scope.c) */
        char name[SRV_NAME_MAX];
        char tenant[LOOM_TENANT_MAX]; /* who submitted it ("" without authentication) */
        int state;
        int64_t target; /* iterations asked; 0 = unbounded */
        int64_t done;
        loom_phase next; /* rollout or train: what the job runs next */
        int next_call;   /* a training phase run call by call: the call it runs next (0: the
                          * first); stored with next_phase, so a restart does not redo calls */
        loom_job_spec spec;
        json_t *decision; /* placement decision as replied at submit */
        int64_t submitted_wall, ended_wall;

        bool permit; /* the core started `permit_phase`; waiting for the worker to claim it */
        loom_phase permit_phase;
        loom_pool permit_pool;
        int permit_n_nodes;
        loom_node_id permit_nodes[LOOM_MAX_JOB_NODES];
        int permit_gpus;
        loom_us permit_deadline;
        loom_us permit_since;

        bool has_lease;
        srv_lease lease;
        srv_req *waiters;

        srv_retry retry;                 /* admissions, restarts, drift (retry.c) */
        int permit_call, permit_n_calls; /* see loom_action.call */
        loom_us calls_took;              /* training calls released so far this phase */

        /* learned-profile admission (learn.c), as the core last reported it; kept here so an
         * ended job still shows it, rebuilt by replay */
        bool learned;          /* the current admission is planned on its learned profile */
        uint64_t replans;      /* learned re-plans of its group, over all its admissions */
        uint64_t replans_base; /* of those, counted in log entries compaction dropped */
        loom_us learned_roll, learned_train, learned_budget; /* 0 before any */
        loom_us learned_head;                                /* 0: none learned */

        /* when its last SRV_ITER_RING rollouts were granted (monotonic; ring, newest at
         * n_roll_grants - 1): its recent mean iteration, for /metrics' SLO headroom */
        loom_us roll_grants[SRV_ITER_RING];
        uint64_t n_roll_grants;
} srv_job;

/* The iterations the core is told a job has left after done (its admission's spec.iterations):
 * 0 for a job that runs until stopped, else at least 1. */
static inline int64_t srv_job_left(const srv_job *j, int64_t done)
{
        return j->target <= 0 ? 0 : j->target - done > 1 ? j->target - done : 1;
}

/* Prometheus histogram with fixed upper bounds in seconds. */
#define SRV_HIST_MAX 16
typedef struct srv_hist {
        int n;
        double le[SRV_HIST_MAX];
        uint64_t count[SRV_HIST_MAX + 1]; /* last = +Inf */
        double sum;
        uint64_t total;
} srv_hist;
void srv_hist_init(srv_hist *h, const double *le, int n);
void srv_hist_add(srv_hist *h, double v);

typedef struct srv_metrics {
        srv_hist permit_latency;
        srv_hist phase_duration[2];
        uint64_t requests, replies_by_class[6]; /* 1xx..5xx, 409 left out */
        /* 409s: the permit protocol's answer to an acquire out of turn or of an ended job,
         * which workers meet in normal operation, so apart from real client errors */
        uint64_t replies_conflict;
        uint64_t leases_granted, permits_expired, migrations;
        uint64_t leases_ended[4]; /* released, failed, expired, revoked */
        uint64_t restarts, drift_resubmits, failed_final, attaches;
        uint64_t learned_resubmits; /* re-admissions on a learned profile (observe said 2) */
        uint64_t moved_resubmits;   /* lone members moved to another group (observe said 3) */
        uint64_t node_resubmits;    /* jobs whose node failed or was drained (no restart spent) */
        uint64_t commits;
        uint64_t store_errors;  /* failed store writes (batches rolled back) */
        uint64_t exec_failures; /* worker failures seen by the executor */
} srv_metrics;

typedef struct srv_store srv_store;

/* A submit refused (quota, placement, host memory, store down): memory only, since a refusal
 * changes no state; the last SRV_REJECTS_MAX are kept for the dashboard's events. */
#define SRV_REJECTS_MAX 64
typedef struct srv_reject {
        int64_t at_wall;
        char tenant[LOOM_TENANT_MAX];
        char name[SRV_NAME_MAX];
        int status;
        char field[32];
        char error[200];
} srv_reject;

struct loom_server {
        loom_server_cfg cfg;
        char data_dir[4096];
        loom_sched *sched;
        srv_store *store;

        /* Store versioning (server.c): log entries up to seq lenient_through were written
         * under another core arithmetic and are re-derived, not checked, by replay;
         * replay_lenient is set for the entry being replayed. rederived_* count what came out
         * differently. */
        int64_t lenient_through;
        bool replay_lenient;
        int rederived_placements, rederived_profiles;
        /* Entries outside lenient_through whose replay came out otherwise than recorded (a
         * placement kept as recorded, or a profile learned otherwise): reported, not fatal. */
        int diverged_placements, diverged_kept, diverged_profiles;
        /* "regroup" entries (regroup.c) whose plan could not be applied: reported, skipped */
        int diverged_plans;
        /* Compaction's shadow replay (compact.c): replay_collect takes this core's observe
         * outcomes and hands each that differs from the entry's text to collect(). */
        bool replay_collect;
        int64_t replay_seq;
        int (*collect)(void *arg, int64_t seq, const char *text);
        void *collect_arg;
        uint64_t compact_rows; /* log entries when the log was last compacted (or loaded) */
        bool compact_at_start; /* a long log was loaded: try once, after the first batch */

        struct MHD_Daemon *mhd;
        int listen_fd;
        int port;

        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        srv_req *q_head, *q_tail; /* guarded by mu */
        bool stopping;            /* guarded by mu */
        bool started, stopped;

        /* owned by the scheduler thread from here on */
        srv_job **jobs;
        uint32_t n_jobs;
        size_t cap_jobs;
        uint32_t *by_core; /* core job id - 1 -> loomd job id (0 = none); retry.c */
        uint32_t n_core;
        size_t cap_core;
        srv_req *waiters;
        int64_t next_lease_id;
        _Atomic bool store_failed; /* the store could not even be read back: fatal */
        /* Store errors (degrade.c). batch_wrote: a store write was attempted in this batch;
         * batch_failed: one failed (store_error says how). degraded: the last failure has not
         * been followed by a successful commit yet, so writes are refused. */
        bool batch_wrote, batch_failed, degraded;
        char store_error[sizeof((loom_err *)0)->msg];
        int64_t degraded_since_wall;
        loom_us start_mono;
        loom_us next_check;   /* no lease, permit or wait ends before this (monotonic) */
        srv_req *resume_head; /* replies to send after the commit (linked by qnext) */
        _Atomic int inflight; /* requests created and not yet completed (HTTP thread) */
        srv_metrics m;
        struct srv_exec *exec_rt; /* exechook.c: the executor thread, started on first use */
        loom_us exec_next;
        struct srv_auth *auth;        /* auth.c */
        struct srv_http_guard *guard; /* http.c: connections yet to send a whole request */
        struct srv_quota *quota;      /* quota.c: what each tenant's live jobs use */
        signed char jobid_mode;       /* scope.c: 0 not yet known, 1 ids as they are, 2 keyed */
        uint8_t jobid_key[16];
        /* engine.c: refused submits, a ring, newest at n_rejects - 1 */
        srv_reject rejects[SRV_REJECTS_MAX];
        uint64_t n_rejects;
};

/* clocks */
loom_us srv_now_mono(void);
int64_t srv_now_wall(void); /* microseconds since the epoch */

/* reply helpers (engine.c, http.c): take ownership of j */
void srv_reply_json(srv_req *r, int status, json_t *j);
void srv_reply_error(srv_req *r, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void srv_reply_loom_err(srv_req *r, int status, const loom_err *e);
void srv_reply_text(srv_req *r, int status, char *text, const char *ctype);

/* http.c */
int srv_http_bind(loom_server *s, loom_err *e);
int srv_http_start(loom_server *s, loom_err *e);
/* Tells systemd (sd_notify, notify.c) state "READY" (s NULL: a replica's redirector serves) or
 * "STOPPING"; starts and stops the watchdog pings with them. Nothing outside systemd. */
void srv_notify(loom_server *s, const char *state);
/* The listening address (options.c). srv_listen_loopback resolves host (an address or a name;
 * an error names it with port) and says whether every address it stands for is a loopback one.
 * srv_listen_open binds and listens on the first of host's addresses that binds, port 0 for
 * any; *fd and the port bound come back. */
int srv_listen_loopback(const char *host, int port, bool *loopback, loom_err *e);
int srv_listen_open(const char *host, int port, int *fd, int *bound, loom_err *e);
void srv_http_quiesce(loom_server *s);
void srv_http_stop(loom_server *s);
void srv_http_resume(srv_req *r); /* from the scheduler thread, after commit */
/* Decide what a complete request is (r->upload holds its body): either r->kind is set for the
 * scheduler or a reply is ready. Touches nothing of the scheduler's. */
void srv_http_route(loom_server *s, srv_req *r, const char *method, const char *url);

/* engine.c: the scheduler thread */
void *srv_engine_main(void *arg);
srv_job *srv_job_get(loom_server *s, uint32_t id);
int srv_job_add(loom_server *s, srv_job *j);
void srv_apply_actions(loom_server *s, loom_us now);
/* Turn j's permit into its lease `id` (granted at monotonic `now`, wall clock `wall`): the
 * permit's phase, pool, nodes, GPUs and call, and a lease-timeout deadline. */
void srv_lease_from_permit(loom_server *s, srv_job *j, int64_t id, loom_us now, int64_t wall);
json_t *srv_job_json(loom_server *s, const srv_job *j, bool full);
/* What j has cost from its submit to its end (to `wall` while it lives), in US$: its GPUs at
 * list price; *per_hour (if not NULL) gets that price per hour. */
double srv_job_cost(const loom_server *s, const srv_job *j, int64_t wall, double *per_hour);
void srv_log(loom_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A store write's result (every write of a batch goes through it): the first failure of a
 * batch is kept in s->store_error, and the batch is then rolled back and the memory rebuilt
 * from the store (degrade.c). */
void srv_store_note(loom_server *s, int rc, const loom_err *e);

/* degrade.c: running on while the store refuses writes (disk full, I/O error). */
#define SRV_RETRY_AFTER_S 5
/* While degraded: answers r with 503 and returns true when handling it would write. */
bool srv_degraded_refuse(loom_server *s, srv_req *r);
/* 503 naming the store's error, with Retry-After. */
void srv_reply_store_down(loom_server *s, srv_req *r);
/* While degraded, a write that tells whether the store takes writes again (in the batch's
 * transaction; not noted as the batch's). */
int srv_degraded_probe(loom_server *s, loom_err *e);
/* A commit went through while degraded: writes are accepted again. Permits and leases get a
 * full lease timeout from now (their workers could not claim or release them meanwhile). */
void srv_degraded_end(loom_server *s);
/* The /healthz reply. */
json_t *srv_health_json(loom_server *s, loom_us now);
/* After a rolled-back batch: rebuild the jobs, the core and the leases from the store, as a
 * restart would but writing nothing; leases the store holds as active stay granted. 0, or the
 * error that left the store unreadable (s unchanged). server.c */
int srv_rebuild(loom_server *s, loom_err *e);

/* engine.c, for retry.c: end a live job; answer every waiter of j with one error */
void srv_end_job(loom_server *s, srv_job *j, int state, const char *lease_state, const char *why);
void srv_fail_waiters(loom_server *s, srv_job *j, int status, const char *msg);

/* retry.c: admissions, failure retries, drift re-admission, worker attach */
int srv_core_map(loom_server *s, uint32_t core, uint32_t job); /* 0 or LOOM_ENOMEM */
srv_job *srv_job_by_core(loom_server *s, uint32_t core);       /* NULL if stale or unknown */
void srv_retry_init(srv_job *j);
/* A live job failed (lease or permit expired, release "failed", worker replaced): retried as
 * a new admission while restarts remain, else ended as failed. lease_state ends its lease. */
void srv_job_failed(loom_server *s, srv_job *j, const char *lease_state, const char *why,
                    loom_us now);
/* Record a released phase of l.phase lasting dur (a rollout's head, 0 if none was reported);
 * after a train release, re-admit the job on its observed profile if its recent phases exceed
 * the planned ones. */
void srv_observe_phase(loom_server *s, srv_job *j, loom_phase phase, loom_pool pool, int gpus,
                       loom_us dur, loom_us head);
void srv_retry_json(loom_server *s, const srv_job *j, json_t *o);
void srv_h_attach(loom_server *s, srv_req *r, loom_us now);
/* Whether decision d has the group and nodes stored in o (a job's decision, a readmit entry). */
bool srv_same_placement(json_t *o, const loom_decision *d);
/* The placement recorded in o (a job's decision, a readmit entry) as a decision to keep:
 * kind LOOM_DECISION_REJECTED when o holds none that can be read. */
void srv_decision_recorded(loom_server *s, json_t *o, loom_decision *w);
/* After replaying a submit or re-admission of j through loom_sched_submit_as with result rc
 * and decision d: count and report a divergence (LOOM_SUBMIT_KEPT: the recorded placement was
 * kept; LOOM_SUBMIT_SEARCHED: it could not be applied, why says why, this core's d was). */
void srv_replay_settle(loom_server *s, srv_job *j, int rc, const loom_decision *d,
                       const loom_err *why);
/* Replay of one "readmit" log entry (server.c); *done: the job's count so far, set to the one
 * the entry logs its new admission started from, if it does. 0 or LOOM_ECORRUPT with e
 * filled. */
int srv_replay_readmit(loom_server *s, srv_job *j, uint32_t *core, int64_t *done,
                       const char *reason, int64_t at, loom_err *e);
/* p95 of the last drift_window durations of phase (0 rollout, 1 train) over the planned
 * duration in the job's group; 0 when fewer samples were seen. */
double srv_drift_ratio(loom_server *s, const srv_job *j, int phase);

/* learn.c: learned-profile admission (policy.admission p99/p95). One "observe" log entry per
 * finished phase: what was measured and what the core made of it. */
typedef struct srv_observe_rec {
        uint32_t core; /* the core job observed */
        loom_phase phase;
        loom_us took;
        int result;                  /* loom_sched_observe's: 0, 1 re-planned, 2 budget lost */
        loom_us roll, train, budget; /* the job's learned profile afterwards (0 before any) */
        loom_us head;                /* a rollout's head from its progress report (0: none) */
        loom_pool pool; /* where the phase ran: a lone member's rollout on the training pool */
        int gpus;       /* a training's GPUs, its lease's (0: the group's pool as it stands) */
} srv_observe_rec;
char *srv_observe_encode(const srv_observe_rec *o); /* malloc'd JSON text, NULL on ENOMEM */
/* 0, or LOOM_ECORRUPT with e naming the bad key. */
int srv_observe_decode(const char *text, srv_observe_rec *o, loom_err *e);
/* Feed a finished phase of a live job (a rollout with its head, 0: none) to the core and log
 * it (nothing under admission worst). Returns loom_sched_observe's result, 0 when not
 * observed. */
int srv_learn_observe(loom_server *s, srv_job *j, loom_phase phase, loom_pool pool, int gpus,
                      loom_us took, loom_us head);
/* Replay of one "observe" entry against core job `core`; 0 or LOOM_ECORRUPT with e filled. */
int srv_replay_observe(loom_server *s, srv_job *j, uint32_t core, const char *reason, loom_err *e);
/* "learned", "learned_profile", "replans" of the job JSON. */
void srv_learn_json(loom_server *s, const srv_job *j, json_t *o);

/* regroup.c: regrouping plans (policy.regroup). One "regroup" log entry per plan the core
 * makes, right after the "exit" or "observe" entry whose call made it; replay hands it back
 * to the core instead of searching again. jobs[i]: loomd's id of plan member i. */
char *srv_regroup_encode(const loom_regroup_plan *p, const uint32_t *jobs); /* NULL: ENOMEM */
/* 0, or LOOM_ECORRUPT with e naming the bad key. */
int srv_regroup_decode(const char *text, loom_regroup_plan *p, uint32_t *jobs, loom_err *e);
/* After a loom_sched_job_exit or loom_sched_observe of job `cause`: log the plan it made, if
 * any, in the batch of the entry that call logged. */
void srv_regroup_log(loom_server *s, const srv_job *cause);
/* Replay of one "regroup" entry, its members' core ids checked against core[] (per loomd job,
 * id - 1); 0, or LOOM_ECORRUPT with e filled for an unreadable entry. A plan that cannot be
 * applied is reported and skipped (diverged_plans). */
int srv_replay_regroup(loom_server *s, const uint32_t *core, uint32_t n_core, const char *reason,
                       loom_err *e);

/* auth.c: tokens and tenant scope (docs/security.md). */
int srv_auth_check_cfg(const loom_server_cfg *c, loom_err *e); /* loopback, TLS rules */
int srv_auth_open(loom_server *s, loom_err *e); /* after the store: secret, mode, auth.db */
/* The PEM texts of cfg.tls_cert/tls_key (owned by s->auth), or NULLs without TLS. */
int srv_auth_tls(loom_server *s, const char **cert, const char **key, loom_err *e);
void srv_auth_close(loom_server *s);
/* HTTP thread, before routing: false when the request was answered (401). */
bool srv_auth_request(loom_server *s, srv_req *r, const char *url);
/* HTTP thread, after routing: answers 403 when the role may not make this kind of request. */
void srv_auth_route(loom_server *s, srv_req *r);
/* Scheduler thread, before handling: false when the job or lease named is not the caller's
 * (answered 404, as for one that does not exist). */
bool srv_auth_scope(loom_server *s, srv_req *r);
bool srv_auth_sees(const srv_req *r, const srv_job *j);
/* A submit's tenant, and the job's worker token and sync key for its submitter (o). */
void srv_auth_submitted(loom_server *s, const srv_req *r, srv_job *j);
void srv_auth_creds(loom_server *s, const srv_req *r, const srv_job *j, json_t *o);
void srv_auth_worker_creds(loom_server *s, uint32_t job, char token[96], char key[65]);
/* The bearer-token parser, on the text of an Authorization header (NULL: none): a worker
 * token whose MAC under secret is its job's, in the one spelling loomd issues (*job); a token
 * to look up in auth.db (*tok points into h); or neither, with the 401 sentence in *why. */
typedef enum { SRV_BEARER_BAD, SRV_BEARER_WORKER, SRV_BEARER_STORED } srv_bearer_kind;
srv_bearer_kind srv_auth_bearer(const char *h, const uint8_t secret[32], uint32_t *job,
                                const char **tok, const char **why);
/* The worker token of job under secret, "loom_w_<job>_<64 lower-case hex digits>". */
void srv_auth_worker_text(const uint8_t secret[32], uint32_t job, char out[LOOM_TOKEN_MAX]);

/* statehook.c: prefetch hints and host-tier accounting through cfg.state */
void srv_state_granted(loom_server *s, const srv_job *j);
int srv_state_admit(loom_server *s, const loom_job_spec *spec, const loom_decision *d, char *why,
                    size_t len);

/* exechook.c: publish the live jobs to cfg.exec's thread and take its failures (every 0.5 s;
 * lowers next_check); stop that thread (the scheduler thread, as it ends) */
typedef struct srv_exec srv_exec;
void srv_exec_tick(loom_server *s, loom_us now);
void srv_exec_stop(loom_server *s);
/* Whether j's rollout worker is still being moved to the node its permit names (the grant
 * waits for it). */
bool srv_exec_rollout_held(loom_server *s, const srv_job *j);
/* The cluster's node the executor bound loom node `id` of `pool` to (the last binding seen), or
 * NULL without an executor or before one was seen. */
const char *srv_exec_node_name(loom_server *s, loom_pool pool, loom_node_id id);
/* engine.c: grant j's permit to its waiting acquires, if it has both and nothing holds it
 * (exechook.c, once a held rollout's worker is where its permit names). */
void srv_engine_grant_waiting(loom_server *s, srv_job *j, loom_us now);

/* metrics.c */
void srv_metrics_init(srv_metrics *m);
char *srv_metrics_render(loom_server *s);
/* A lease ended as state ("released", "failed", "expired", "revoked"; others uncounted) */
void srv_metrics_lease_end(loom_server *s, const char *state);
/* A reply sent: counted by status class, 409 apart */
void srv_metrics_reply(loom_server *s, int status);

/* readfile.c: a file of at most 1 MiB read whole, NUL-terminated (malloc'd; the TLS PEM files of
 * auth.c and redirect.c). NULL with e filled (field, "PATH: why") when it cannot be read. */
char *srv_read_file(const char *path, const char *field, loom_err *e);

/* store.c: all SQL lives here. Every function returns 0 or a LOOM_E* code with e filled. */
/* The data directory, created owner-only (0700) if missing, and a file in it created or
 * narrowed to owner-only (with its SQLite -wal and -shm) before it is opened: what loomd keeps
 * there (the token secret, tokens, jobs) is nobody else's, whatever the umask. */
int srv_private_dir(const char *dir, loom_err *e);
int srv_private_file(const char *path, loom_err *e);
int srv_store_open(srv_store **out, const char *dir, bool sync_full, loom_err *e);
void srv_store_close(srv_store *st);
/* The store's connection (replog.c replays entries on it). */
sqlite3 *srv_store_db(srv_store *st);
/* From now on every commit is first handed to fn (loom_server_cfg.replicate); when fn fails the
 * commit rolls back and the store call fails with fn's error. */
int srv_store_replicate(srv_store *st,
                        int (*fn)(void *arg, const void *entry, size_t n, loom_err *e), void *arg,
                        loom_err *e);

/* After every `every` commits, the store's image to fn (loom_server_cfg.snapshot); `due`
 * commits were made since the latest snapshot already (a replica's earlier leaders). */
void srv_store_snapshots(srv_store *st,
                         int (*fn)(void *arg, const void *image, size_t n, loom_err *e), void *arg,
                         unsigned every, uint64_t due);

/* replog.c: a store's committed changes as replication entries, and their replay. */
typedef struct srv_replog srv_replog;
int srv_replog_attach(srv_replog **out, sqlite3 *db,
                      int (*fn)(void *arg, const void *entry, size_t n, loom_err *e), void *arg,
                      loom_err *e);
void srv_replog_detach(srv_replog *r);
const loom_err *srv_replog_error(const srv_replog *r, int *code);
/* One entry applied in one transaction: all its rows or none. */
int srv_replog_apply(sqlite3 *db, const void *entry, size_t n, loom_err *e);
int srv_store_begin(srv_store *st, loom_err *e);
int srv_store_commit(srv_store *st, loom_err *e);
void srv_store_rollback(srv_store *st);
int srv_store_meta_get(srv_store *st, const char *key, char **val, loom_err *e);
int srv_store_meta_set(srv_store *st, const char *key, const char *val, loom_err *e);
int srv_store_job_insert(srv_store *st, const srv_job *j, const char *key, loom_err *e);
int srv_store_job_update(srv_store *st, const srv_job *j, loom_err *e);
/* Replace a job's stored placement decision (a re-derived placement, server.c). */
int srv_store_job_set_decision(srv_store *st, const srv_job *j, loom_err *e);
/* The last log entry's seq (0: an empty log). */
int srv_store_log_last(srv_store *st, int64_t *seq, loom_err *e);
int srv_store_job_by_key(srv_store *st, const char *key, uint32_t *job, loom_err *e);
int srv_store_log(srv_store *st, const char *kind, uint32_t job, const char *reason, loom_err *e);
int srv_store_lease_insert(srv_store *st, uint32_t job, const srv_lease *l, loom_err *e);
int srv_store_lease_end(srv_store *st, int64_t id, const char *state, int64_t at, loom_err *e);
/* LOOM_ENOENT when no such lease. state receives "active", "released", ... */
int srv_store_lease_get(srv_store *st, int64_t id, uint32_t *job, loom_phase *phase, char state[16],
                        loom_err *e);
int srv_store_lease_next_id(srv_store *st, int64_t *id, loom_err *e);
int srv_store_leases_lose_active(srv_store *st, int64_t at, loom_err *e);
/* Call fn for every lease the store holds as active, ascending id (store recovery). */
int srv_store_leases_active(srv_store *st,
                            void (*fn)(void *arg, int64_t id, uint32_t job, loom_phase phase,
                                       int64_t granted_us),
                            void *arg, loom_err *e);
/* Every job row (ascending id) with state, counters and placement, handed to add (the job
 * table's srv_job_add: LOOM_ESTATE when the ids are not dense); a job add refused is freed. */
int srv_store_load_jobs(srv_store *st, int (*add)(void *arg, srv_job *j), void *arg, loom_err *e);
/* Call fn for every log entry in order; stops at the first non-zero return. */
/* Replay (server.c): one log entry into s->sched, checked against what the store says. */
typedef struct srv_replay {
        loom_server *s;
        loom_err *e;
        uint32_t *core; /* per job (id - 1): the core id of its admission so far, 0 = none */
        uint64_t rows;  /* entries replayed */
        /* per job (id - 1), as of the entry replayed: iterations done ("iter" entries), and
         * how many were done when its current admission was submitted (its core counts the
         * rest) */
        int64_t *done, *base;
} srv_replay;
/* rp's arrays for s's jobs (rp->s, rp->e set by the caller): 0 or LOOM_ENOMEM; then free. */
int srv_replay_alloc(srv_replay *rp);
void srv_replay_free(srv_replay *rp);
int srv_replay_one(void *arg, int64_t seq, const char *kind, uint32_t id, const char *reason,
                   int64_t at);
/* After the last entry: the counts a log without "iter" entries left behind, from the rows. */
void srv_replay_counts(srv_replay *rp);

/* Compaction (compact.c): drop observe entries the state no longer depends on, verified by
 * replaying the shorter log into a fresh core; one transaction. *dropped gets how many (0 when
 * the shorter log would not replay to the same state, which is then left alone). Only between
 * batches (no transaction open). */
int srv_compact(loom_server *s, int64_t *dropped, loom_err *e);
/* Compact when the log has doubled since it was last compacted (and has 4096 entries). */
void srv_compact_maybe(loom_server *s);

/* Log entries for compaction: every row, in order (the caller frees with srv_log_rows_free). */
typedef struct srv_log_row {
        int64_t seq, at;
        char kind[16];
        uint32_t job;
        char *reason;
} srv_log_row;
int srv_store_log_rows(srv_store *st, srv_log_row **rows, size_t *n, loom_err *e);
void srv_log_rows_free(srv_log_row *rows, size_t n);
/* Log entries appended since the store opened or the last reset. */
uint64_t srv_store_log_added(const srv_store *st);
void srv_store_log_added_reset(srv_store *st);
/* In one transaction: delete the entries in drop[], replace the reasons of rew[] and set each
 * job's replans_compacted (base[job - 1]). */
int srv_store_compact(srv_store *st, const int64_t *drop, size_t ndrop, const int64_t *rew_seq,
                      char *const *rew_text, size_t nrew, const uint64_t *base, uint32_t njobs,
                      loom_err *e);

int srv_store_each_log(srv_store *st,
                       int (*fn)(void *arg, int64_t seq, const char *kind, uint32_t job,
                                 const char *reason, int64_t at),
                       void *arg, loom_err *e);

/* store.c: per-job admission state (table `admissions`) */
int srv_store_retry_save(srv_store *st, const srv_job *j, loom_err *e);
/* Fill j->retry for every job that has a row; others keep srv_retry_init's values. */
int srv_store_retry_load(srv_store *st, loom_server *s, loom_err *e);

/* store.c: the dashboard's timeline. Leases active now or ended at or after `since` (wall us),
 * newest first, at most max; then log entries other than "observe" at or after `since`, newest
 * first, at most max. */
typedef struct srv_lease_row {
        int64_t id;
        uint32_t job;
        char phase[16], state[16], pool[16];
        char nodes[LOOM_MAX_JOB_NODES * 12]; /* "1,2" as stored */
        int gpus;
        int64_t granted, ended; /* ended 0: still active */
} srv_lease_row;
typedef void (*srv_lease_fn)(void *arg, const srv_lease_row *l);
typedef void (*srv_log_fn)(void *arg, int64_t seq, const char *kind, uint32_t job,
                           const char *reason, int64_t at);
int srv_store_timeline(srv_store *st, int64_t since, int max, srv_lease_fn on_lease,
                       srv_log_fn on_log, void *arg, loom_err *e);

/* dashboard.c: the operators' dashboard (docs/dashboard.md). srv_dashboard_serve answers GET
 * /dashboard, its static files and / (a redirect) on the HTTP thread, before authentication:
 * the page is public, the data it fetches is not. Returns the MHD_Result, or -1 when url is not
 * one of its. */
int srv_dashboard_serve(struct MHD_Connection *conn, const char *method, const char *url);
/* GET /v1/timeline?window_s=S on the HTTP thread: r->kind = RQ_TIMELINE or a 422. */
void srv_dashboard_parse(loom_server *s, srv_req *r);
/* The scheduler thread's answer to RQ_TIMELINE. */
void srv_h_timeline(loom_server *s, srv_req *r, loom_us now);

/* quota.c: quotas per tenant (docs/operations.md). srv_quota_added counts a job srv_job_add
 * added (adding job 1 starts the counts afresh); srv_quota_drop counts out a job that ends. */
void srv_quota_added(loom_server *s, const srv_job *j);
void srv_quota_drop(loom_server *s, const srv_job *j);
void srv_quota_free(loom_server *s);
/* Before a submit of spec by tenant: true when it fits, else r is answered 429 (it fits once
 * some of the tenant's jobs end) or 403 (it never fits) naming the quota, used and limit; a
 * refusal changes nothing but a counter. */
bool srv_quota_admit(loom_server *s, srv_req *r, const loom_job_spec *spec, const char *tenant);
/* /v1/cluster's "quotas": the caller's own usage and limits, or every tenant's for admin. */
json_t *srv_quota_json(loom_server *s, const srv_req *r);
void srv_quota_metrics(loom_server *s, void (*put)(void *b, const char *fmt, ...), void *b);

/* scope.c: what a caller sees. Job ids the API shows: loomd's own (1, 2, ...) without tokens,
 * with tokens a keyed permutation of them, so that a tenant's ids say nothing of other jobs. */
uint32_t srv_job_pub(loom_server *s, uint32_t id);              /* loomd's id -> the shown one */
bool srv_auth_jobid_key(const loom_server *s, uint8_t key[16]); /* auth.c: false: no tokens */
uint32_t srv_job_unpub(loom_server *s, uint32_t pub);           /* the shown id -> loomd's */
int64_t srv_lease_pub(loom_server *s, int64_t id); /* the same for lease ids (48 bits) */
int64_t srv_lease_unpub(loom_server *s, int64_t pub);
/* The number an executor's workers see for an admission (LOOM_ADMISSION, worker names): the
 * core's job id, which counts every tenant's admissions, permuted likewise. */
uint32_t srv_admission_pub(loom_server *s, uint32_t core);
/* GET /v1/jobs's ?limit=&after=&state= on the HTTP thread: r->kind = RQ_LIST_JOBS or a 422. */
void srv_list_parse(loom_server *s, srv_req *r);
/* GET /v1/groups's ?limit=&after= (a group id) on the HTTP thread: RQ_GROUPS or a 422. */
void srv_groups_parse(loom_server *s, srv_req *r);
/* A placement decision as a tenant may see it: candidates in groups none of its live jobs is
 * in lose their group, nodes and members (new reference). */
json_t *srv_decision_scoped(loom_server *s, const srv_req *r, json_t *decision);

#endif
