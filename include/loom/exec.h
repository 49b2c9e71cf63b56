/*
 * exec.h - executors: how loomd starts, watches and stops a job's workers and provisions nodes.
 *
 *     loom_exec *x = loom_exec_slurm_new(&cfg, &err);     or loom_exec_local_new
 *     ...every half second, on loomd's scheduler thread:
 *     loom_exec_apply(x, want, n_want, up, n_up, ev, max_ev, &n_ev, &err);
 *     loom_exec_free(x);
 *
 * The executor is level-triggered: loomd says what should exist (a worker per node of every
 * live job's current admission, the set of nodes its groups hold) and loom_exec_apply makes
 * the cluster match, the way a Kubernetes controller reconciles. Workers nobody wants any more
 * (the job ended, or was re-admitted elsewhere) are stopped; a wanted worker that is missing is
 * launched once; a worker that this executor launched and that then vanished or exited is a
 * failure, reported exactly once (loomd retries the job, which makes a new admission). Because
 * the desired state is recomputed from loomd's store, the same call after a `kill -9` of loomd
 * adopts the workers still running (their names carry job and admission) and launches nothing
 * twice.
 *
 * A backend implements loom_exec_ops (launch, stop, list, power): `local` runs workers as
 * processes on this host; `slurm` as job steps inside a per-node Slurm allocation, with power
 * saving for provisioning (docs/slurm.md, which also maps the same ops onto Kubernetes).
 */
#ifndef LOOM_EXEC_H
#define LOOM_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/cluster.h"
#include "loom/common.h"
#include "loom/sched.h"

#define LOOM_EXEC_NAME_MAX 64
#define LOOM_EXEC_MAX_NODES 256 /* per pool in an executor's node map */
#define LOOM_EXEC_UNUSABLE 2    /* loom_exec_ops.power: the node cannot come up */

/* One worker: the process of one job admission on one node of one pool. */
typedef struct loom_exec_worker {
        uint32_t job;       /* loomd's job id */
        uint32_t admission; /* the core id of the admission it serves (changes on a restart) */
        loom_pool pool;
        int rank;                      /* index among the admission's nodes of that pool */
        char node[LOOM_EXEC_NAME_MAX]; /* backend's node name */
        int gpus;                      /* GPUs it is given on that node */
        /* from list(): where the backend ran it, "" if not yet placed */
        char where[LOOM_EXEC_NAME_MAX];
        char id[32]; /* backend's id: a pid, a Slurm step "123.4" */
        bool ended;  /* list(): it has ended (exit_code says how) */
        int exit_code;
        char why[96];     /* list(): how it ended, for the log */
        bool node_failed; /* list(): it ended because its node went out of service */
} loom_exec_worker;

/* What should run: one live job admission and its placement. */
typedef struct loom_exec_job {
        uint32_t job, admission;
        char name[LOOM_EXEC_NAME_MAX];
        int n_nodes[2];
        loom_node_id nodes[2][LOOM_MAX_JOB_NODES]; /* [pool][i] */
        int gpus[2];                               /* GPUs per node, by pool */
        /* A lone member rolls out on its group's training nodes: its rollout workers run there
         * (nodes[0] then names training node ids) and no rollout node is held for it. */
        bool roll_on_train;
        /* Its rollout is next or running: its rollout workers stay where they are, even if the
         * placement above names other nodes (a worker moved now could take the permit with it);
         * they move while it trains. */
        bool roll_pinned;
        char token[96];    /* the job's worker token (LOOM_TOKEN), "" without authentication */
        char sync_key[65]; /* its weight-sync key, 64 hex digits (LOOM_SYNC_KEY), or "" */
} loom_exec_job;

/* A wanted worker that failed (exit, node failure, cancellation seen in the cluster). node:
 * its node failed or was taken out of service under it (not the worker's fault). */
typedef struct loom_exec_event {
        uint32_t job, admission;
        bool node;
        char why[160];
} loom_exec_event;

/* A backend. Every function returns 0 or a negative LOOM_E* code with e filled. */
typedef struct loom_exec_ops {
        const char *name;
        /* Start w with the environment env (NULL-terminated "K=V"). */
        int (*launch)(void *impl, const loom_exec_worker *w, const char *const *env, loom_err *e);
        /* Stop a worker listed by list() (w->id set). */
        int (*stop)(void *impl, const loom_exec_worker *w, loom_err *e);
        /* Every loom worker the cluster runs, plus those launched by this process that ended
         * since the last call (ended = true, once). Returns the count, up to max (more are
         * dropped), or < 0. Names are parsed back into job/admission/pool/rank. */
        int (*list)(void *impl, loom_exec_worker *out, int max, loom_err *e);
        /* Bring node up (provisioned, able to run workers) or down. Returns 1 when the node is
         * in that state now, 0 when it is on its way, LOOM_EXEC_UNUSABLE when it cannot come up
         * (failed, drained: its loom node id is bound to another node), < 0 on error. Called
         * every apply. */
        int (*power)(void *impl, const char *node, bool up, loom_err *e);
        void (*free)(void *impl);
} loom_exec_ops;

/* The node map and what workers run: pool -> partition and node names (node id i of a pool
 * is nodes[pool][i]), the worker's command line and loomd's address for its environment. */
typedef struct loom_exec_cfg {
        char partition[2][LOOM_EXEC_NAME_MAX];
        int n_nodes[2];
        char nodes[2][LOOM_EXEC_MAX_NODES][LOOM_EXEC_NAME_MAX];
        char command[1024];   /* run by /bin/sh -c */
        char url[512];        /* loomd, e.g. http://127.0.0.1:7480; replicated: every replica's,
                               * comma-separated (docs/ha.md) */
        char dir[512];        /* where workers' output goes (a file per worker) */
        char slurm_conf[512]; /* SLURM_CONF for the Slurm tools; "" = their default */
        bool manage_power;    /* power nodes up/down with loom's groups (default true) */
        int gpus_per_node;    /* GPUs a node holds for loom (default 8) */
        /* Seconds a node may take to come up before it counts as failed (its id is bound to
         * another node); the slurm backend sets it from ResumeTimeout. Default 600. */
        int provision_timeout_s;
        /* Seconds workers and node allocations outlive an unreachable loomd (LOOM_GRACE_S in
         * the workers' environment); LOOM_EXEC_GRACE_S in loomd's environment, default 60. */
        int grace_s;
} loom_exec_cfg;

void loom_exec_cfg_default(loom_exec_cfg *c);
/* Read the node map from a JSON file:
 *   {"rollout": {"partition": "rollout", "nodes": ["r1", "r2"]},
 *    "train":   {"partition": "train",   "nodes": ["t1", "t2"]}}
 * 0, or LOOM_EINVAL / LOOM_EIO with e naming the field (file:line:col for JSON errors). */
int loom_exec_cfg_load(loom_exec_cfg *c, const char *path, loom_err *e);

typedef struct loom_exec loom_exec;

/* Backends. The returned executor owns its state; free with loom_exec_free. */
loom_exec *loom_exec_local_new(const loom_exec_cfg *c, loom_err *e);
loom_exec *loom_exec_slurm_new(const loom_exec_cfg *c, loom_err *e);
/* Any other backend: ops and its state (freed through ops->free). */
loom_exec *loom_exec_new(const loom_exec_cfg *c, const loom_exec_ops *ops, void *impl, loom_err *e);
void loom_exec_free(loom_exec *x);
const char *loom_exec_name(const loom_exec *x);
/* loomd's address for the workers' LOOM_URL, once it is known (its port is bound). */
void loom_exec_set_url(loom_exec *x, const char *url);

/*
 * Reconcile: make the cluster run exactly the workers of `want` (n jobs) and hold exactly the
 * nodes `up[pool]` (n_up[pool] node ids each) powered up. A job's workers are launched only once
 * all its nodes are up. Failures of wanted workers go to ev (at most max_ev; *n_ev set), each
 * reported once. Returns 0, or < 0 when the backend could not be asked (nothing changed).
 */
int loom_exec_apply(loom_exec *x, const loom_exec_job *want, int n, const loom_node_id *const up[2],
                    const int n_up[2], loom_exec_event *ev, int max_ev, int *n_ev, loom_err *e);

/* The admissions of the last apply whose workers wait for their nodes to come up (powering up,
 * or bound to none yet): loomd does not count that time against their permits. Fills up to max
 * (job, admission) pairs; returns the count. */
int loom_exec_waiting(const loom_exec *x, uint32_t (*out)[2], int max);

/* The admissions of the last apply with a rollout worker running on another node than the one
 * its placement names now (it is being moved). Same form as loom_exec_waiting. */
int loom_exec_misplaced(const loom_exec *x, uint32_t (*out)[2], int max);

/* Where the rollout workers are, as of the last apply, in loom's terms: the pool and loom node id
 * bound to the node each runs on (node -1: a node no id is bound to), or moving (stopped on one
 * node, not yet launched on the next). loomd grants a rollout permit only to a job whose rollout
 * workers are on the nodes the permit names, so a rollout never runs elsewhere than its lease
 * says, even when the placement changed after the last apply. */
typedef struct loom_exec_place {
        uint32_t job, admission;
        int rank;
        bool moving;
        loom_pool pool;
        int64_t node;
} loom_exec_place;
int loom_exec_rollout_places(const loom_exec *x, loom_exec_place *out, int max);

/* Node events of the last apply, for the log: a node out of service or that did not come up
 * within provision_timeout_s, its loom id bound to another node (no job failed). Up to max
 * lines; returns the count. */
#define LOOM_EXEC_NOTE_MAX 160
int loom_exec_node_notes(const loom_exec *x, char (*out)[LOOM_EXEC_NOTE_MAX], int max);

/* The loom node ids bound to the cluster's nodes, as of the last apply: the node's name in the
 * node map ("n17000t1") for each (pool, id). Fills up to max; returns the count. */
typedef struct loom_exec_binding {
        loom_pool pool;
        loom_node_id id;
        char node[LOOM_EXEC_NAME_MAX];
} loom_exec_binding;
int loom_exec_bindings(const loom_exec *x, loom_exec_binding *out, int max);

/* The workers as last listed (after apply); *n set. Owned by x, valid until the next apply. */
const loom_exec_worker *loom_exec_workers(const loom_exec *x, int *n);

/* The worker name a backend gives the cluster ("loom-j3-a5-rollout-0"), and its parse. */
void loom_exec_worker_name(const loom_exec_worker *w, char *out, size_t len);
bool loom_exec_worker_parse(const char *name, loom_exec_worker *w);

#endif
