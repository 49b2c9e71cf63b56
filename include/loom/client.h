/*
 * client.h - libloom-client: what an RL job links to talk to loomd (docs/api.md).
 *
 *     loom_client *c = loom_client_new("http://127.0.0.1:7480", NULL);
 *     loom_client_submit(c, spec_json, NULL, &job, NULL);
 *     for (;;) {
 *             loom_client_lease l;
 *             if (loom_client_acquire(c, job, "rollout", -1, &l)) break;   blocks for the permit
 *             ... generate; loom_client_progress(c, &l, done, total, &keep) ...
 *             loom_client_release(c, &l, true, NULL);
 *             ... the same for "train" ...
 *     }
 *     loom_client_free(c);
 *
 * While a lease is held a background thread renews it (every third of the lease timeout), so a
 * long phase does not need to call anything. Transport errors and 503 replies are retried with
 * backoff for opts.retry_for_s, which carries a worker across a loomd restart; every call is
 * safe to repeat (a submit carries an idempotency key, acquire returns the lease already held,
 * release of a released lease answers the same). A lease the daemon no longer knows (it was
 * restarted mid-phase) is reported as LOOM_ENOENT: acquire the phase again and redo it.
 *
 * A client is used by one thread at a time (plus its own heartbeat thread). Returns are 0 or a
 * negative LOOM_E* code; loom_client_error() has the sentence. Does not link the core.
 */
#ifndef LOOM_CLIENT_H
#define LOOM_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/common.h"

typedef struct loom_client loom_client;

typedef struct loom_client_opts {
        double request_timeout_s; /* one HTTP attempt, on top of an acquire's wait; default 10 */
        double retry_for_s;       /* keep retrying unreachable/503 this long; default 60 */
        bool heartbeat;           /* renew held leases in the background; default true */
        /* Bearer token sent with every request (docs/security.md); NULL: $LOOM_TOKEN, else
         * the first line of the file $LOOM_TOKEN_FILE, else none. Copied by loom_client_new. */
        const char *token;
        /* PEM file of the CA that signed loomd's certificate, for an https:// url; NULL:
         * $LOOM_CA_FILE, else the system's CAs. The certificate and its host name are always
         * verified. */
        const char *ca_file;
} loom_client_opts;

void loom_client_opts_default(loom_client_opts *o);

/* url: "http://HOST:PORT" or "https://HOST:PORT" (a trailing slash is fine), or up to 8 of
 * them comma-separated, one per loomd replica (docs/ha.md): requests go to the one that
 * answered last and move on when it does not answer or follows another. opts may be NULL
 * for the defaults. NULL when out of memory, url is empty or $LOOM_TOKEN_FILE is unreadable. Free
 * with loom_client_free (NULL is fine). */
loom_client *loom_client_new(const char *url, const loom_client_opts *opts);
void loom_client_free(loom_client *c);

/* The sentence describing the last failure ("" after a success), and the HTTP status of the
 * last reply (0 when none arrived). Valid until the next call on c. */
const char *loom_client_error(const loom_client *c);
int loom_client_status(const loom_client *c);

/* Strings returned through `char **reply` are malloc'd JSON documents; release with this. */
void loom_client_free_string(char *s);

/*
 * Submit a job (spec as in `loom place`, plus "iterations" and "name"). key makes a retried
 * submit return the job the first attempt created; NULL generates one. On success *job is
 * the new id and *reply (if reply is not NULL) the daemon's reply. LOOM_EINVAL for a spec the
 * daemon refused (400/422; loom_client_error names the field), LOOM_EREJECT if it cannot be
 * placed, LOOM_EIO if the daemon stayed unreachable.
 */
int loom_client_submit(loom_client *c, const char *spec_json, const char *key, uint32_t *job,
                       char **reply);
/* GET path (e.g. "/v1/jobs/3", "/metrics"). */
int loom_client_get(loom_client *c, const char *path, char **reply);
int loom_client_cancel(loom_client *c, uint32_t job);

typedef struct loom_client_lease {
        int64_t id;
        uint32_t job;
        char phase[16]; /* "rollout" or "train" */
        int n_nodes;
        uint32_t nodes[32];
        int gpus;
        double timeout_s;
        int64_t iteration; /* 1-based iteration this phase belongs to */
} loom_client_lease;

/*
 * Wait for the permit to run `phase` of job. wait_s >= 0 bounds the wait (LOOM_ETIMEDOUT when
 * it ends first); wait_s < 0 waits until granted. LOOM_ESTATE when the job has ended or runs
 * another phase next (409), LOOM_ENOENT for an unknown job, LOOM_EIO when unreachable.
 */
int loom_client_acquire(loom_client *c, uint32_t job, const char *phase, double wait_s,
                        loom_client_lease *out);
/* Report done of total units. Returns 1 when the scheduler advises migrating the rollout tail
 * (*keep_gpus, if not NULL, gets the GPUs to keep), 0 otherwise, LOOM_ENOENT if the lease is
 * gone (expired, revoked, lost in a restart). */
int loom_client_progress(loom_client *c, const loom_client_lease *l, int64_t done, int64_t total,
                         int *keep_gpus);
/* End the phase; ok = false marks the job failed. *reply (optional) is the job's state after. */
int loom_client_release(loom_client *c, const loom_client_lease *l, bool ok, char **reply);
int loom_client_heartbeat(loom_client *c, const loom_client_lease *l);

/* Where a job stands, as a (re)started worker needs it to resume. */
typedef struct loom_client_resume {
        char state[16];           /* queued, running, finished, failed, cancelled */
        char next_phase[16];      /* "rollout" or "train"; "" once the job has ended */
        int64_t iterations;       /* asked for; 0 = unbounded */
        int64_t iterations_done;  /* counted by loomd: the last completed iteration */
        int64_t resume_iteration; /* iterations_done + 1; 0 once the job has ended */
        int restarts, max_restarts, resubmits;
        bool took_over; /* this attach failed a lease a previous worker still held */
} loom_client_resume;

/*
 * Attach a worker process to an existing job (POST /v1/jobs/{id}/attach), typically a worker
 * that a supervisor started again after the previous one died (kill -9, OOM, node reboot).
 * takeover says the job's previous worker is gone: a lease it still holds is failed at once (a
 * restart, counted against the job's max_restarts, or the job's failure once they are used up)
 * rather than after the lease timeout. takeover is "any" (whatever lease the job holds),
 * "rollout" or "train" (only a lease of that phase: for a job whose phases run in separate
 * processes, the restarted process takes over only its own phase), or NULL: nothing changes
 * (another process of a live worker), and a lease the previous worker still holds can then be
 * picked up by acquiring its phase (the same lease; the phase is redone, no restart). *out says
 * where to resume: load the checkpoint of iteration out->iterations_done, then acquire
 * out->next_phase (a rollout, after a restart). LOOM_ENOENT for an unknown job.
 *
 * Exactly-once iterations: loomd counts an iteration when its train lease is released. A worker
 * saves its checkpoint of iteration i (loom_client_lease.iteration) before releasing train, and
 * keeps the one before: dying between the save and the release leaves iterations_done = i - 1,
 * and the worker resumes from that checkpoint, so iteration i is redone and counted once.
 */
int loom_client_attach(loom_client *c, uint32_t job, const char *takeover, loom_client_resume *out);

/* ---- operating a running loomd: what `loom jobs`, `loom job`, ... are built on (ctl.c) ---- */

/*
 * Any request: method ("GET", "POST", "DELETE"), path with its query, body (NULL: none), key
 * (an Idempotency-Key, NULL: none). 0 on a 2xx reply; else as the calls above
 * (loom_client_status() has the status, loom_client_error() the sentence). *reply is the body of
 * whatever reply arrived, an error's included (a refused submit's carries the decision), NULL
 * for none; free it with loom_client_free_string in either case.
 */
int loom_client_request(loom_client *c, const char *method, const char *path, const char *body,
                        const char *key, char **reply);

/* Which jobs loom_client_jobs returns; zeroed (group 0 included) means all of them. */
typedef struct loom_client_job_filter {
        const char *state;  /* live, queued, running, finished, failed, cancelled, any; NULL: any */
        const char *tenant; /* only this tenant's jobs (an admin's view); NULL: any */
        int64_t group;      /* only jobs in this group; < 0 or has_group false: any */
        bool has_group;
} loom_client_job_filter;

/* Every job the caller may see, walking GET /v1/jobs page by page: {"jobs": [...]}, oldest
 * first (state filtered by loomd, tenant and group here). */
int loom_client_jobs(loom_client *c, const loom_client_job_filter *f, char **reply);
/* Every group (admin only: a tenant gets 403): {"groups": [...]}. */
int loom_client_groups(loom_client *c, char **reply);
/* The nodes groups hold: {"nodes": [{"id", "pool", "groups", "jobs"}], "source"}. From the
 * groups for admin ("source": "groups"); for a tenant, which may not read them, from its own live
 * jobs ("source": "jobs": only the nodes its jobs are placed on). */
int loom_client_nodes(loom_client *c, char **reply);
/*
 * One job in full (GET /v1/jobs/{id}) plus what an operator asks of it, from the timeline of the
 * last hour and the cluster's prices (each left out when the caller may not read it):
 * "leases" (its recent leases, newest first), "events" (its log entries, oldest first), "slo"
 * ({"slo", "budget_s", "mean_iteration_s", "headroom"}: 1 - mean iteration / budget, from the
 * starts of its rollouts, as the dashboard computes it) and "cost" ({"per_hour", "so_far"}: the
 * list price of the GPUs it asks for, times the time since its submit, up to its end).
 */
int loom_client_job_report(loom_client *c, uint32_t job, char **reply);

/* A follower of loomd's event log (GET /v1/timeline), for `loom events --watch`. job 0: every
 * job the caller may see; since_s: how far back the first poll looks (at most an hour). NULL
 * when out of memory. The follower borrows c. */
typedef struct loom_client_events loom_client_events;
loom_client_events *loom_client_events_new(loom_client *c, uint32_t job, double since_s);
/* The events not returned before, oldest first: {"events": [...]}. Poll at least every few
 * minutes: an event older than the window of the poll after it is missed. */
int loom_client_events_poll(loom_client_events *w, char **reply);
void loom_client_events_free(loom_client_events *w);

/*
 * A table (or key: value lines) for people of one of the replies above: view "jobs", "groups",
 * "nodes", "events" (the lists; "event-rows": events without the column names), "job"
 * (loom_client_job_report or a submit's reply), "cluster" (GET /v1/cluster), "decision" (a submit's
 * or a dry run's reply: the placement and, with ?explain=1, its candidates). LOOM_EINVAL with a
 * sentence in err (n bytes) when json is not a reply of that kind or view is unknown. (view.c)
 */
int loom_client_render(const char *view, const char *json, FILE *out, char *err, size_t n);

#endif
