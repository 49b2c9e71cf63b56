/*
 * server.h - loomd as a library: the live control plane around the scheduler core.
 *
 *     loom_server_cfg cfg;
 *     loom_server_cfg_default(&cfg);
 *     cfg.data_dir = "/var/lib/loom";
 *     loom_server *s = loom_server_new(&cfg, &err);   opens the store, replays it, binds
 *     loom_server_start(s);                            scheduler thread + HTTP threads
 *     ...                                              (wait for SIGTERM)
 *     loom_server_stop(s);                             stop accepting, finish replies, close store
 *     loom_server_free(s);
 *
 * One scheduler thread owns the loom_sched and the SQLite store; libmicrohttpd threads parse
 * requests and hand them over, suspending the connection until the reply is ready (long-poll
 * acquires stay suspended until their permit or their wait ends). Every state change is
 * committed to the store before its reply leaves. The HTTP API is described in docs/api.md.
 */
#ifndef LOOM_SERVER_H
#define LOOM_SERVER_H

#include <stdbool.h>

#include "loom/sched.h"

typedef struct loom_server loom_server;
struct loom_exec;

/* One line about something that happened (job accepted, permit granted, lease expired, ...),
 * for the daemon's log. Called on the scheduler thread; must not call back into the server. */
typedef void (*loom_server_log_fn)(void *arg, const char *line);

/* Hooks to the node-local state manager (loom-state, docs/state.md); all optional. Called on
 * the scheduler thread, so they must be quick and must not call back into the server. cmd/loomd
 * wires them to loom-state clients: the server itself never talks to loom-state. */
typedef struct loom_server_state_hooks {
        /* After a grant on node `node`: the other live jobs seen on it, soonest to run first
         * (round-robin: the one granted longest ago). A hook prefetches jobs[0]. */
        void (*order)(void *arg, loom_node_id node, const char *const *jobs, int n);
        /* Host tier of `node` as measured: bytes in use and capacity. 0, or < 0 when unknown
         * (then no check). A submit whose working set does not fit is refused. */
        int (*host_usage)(void *arg, loom_node_id node, uint64_t *used, uint64_t *cap);
        void *arg;
} loom_server_state_hooks;

/* Quotas per tenant (docs/operations.md, "Quotas"): what one tenant's live (queued or running)
 * jobs may ask for at once, checked when a job is submitted. A limit is in force only when its
 * bit is in `set`; an all-zero loom_quota limits nothing. */
enum {
        LOOM_QUOTA_JOBS = 1 << 0,         /* jobs */
        LOOM_QUOTA_GPUS_ROLLOUT = 1 << 1, /* gpus[LOOM_POOL_ROLLOUT] */
        LOOM_QUOTA_GPUS_TRAIN = 1 << 2,   /* gpus[LOOM_POOL_TRAIN] */
        LOOM_QUOTA_NODES_ROLLOUT = 1 << 3,
        LOOM_QUOTA_NODES_TRAIN = 1 << 4,
        LOOM_QUOTA_COST = 1 << 5, /* cost_per_hour */
};
#define LOOM_QUOTA_TENANTS 256 /* tenants named in one quota table */
typedef struct loom_quota {
        char tenant[32];      /* LOOM_TENANT_MAX; "" for the default entry */
        unsigned set;         /* LOOM_QUOTA_* bits of the limits in force */
        int64_t jobs;         /* live jobs */
        int64_t gpus[2];      /* GPUs the live jobs ask for, by loom_pool */
        int64_t nodes[2];     /* the same in nodes (GPUs / gpus_per_node, rounded up) */
        double cost_per_hour; /* US$/h of those GPUs at the cluster's GPU prices */
} loom_quota;
typedef struct loom_quota_cfg {
        loom_quota def; /* tenants not named below (and jobs submitted without a token) */
        int n;
        loom_quota tenant[LOOM_QUOTA_TENANTS];
} loom_quota_cfg;
/* The "quotas" object of loomd's cluster file into out (all or nothing): {"default": {..},
 * "tenants": {"NAME": {..}}}, each entry {"jobs": N, "gpus": {"rollout": N, "train": N},
 * "nodes": {..}, "cost_per_hour": X}; a tenant's entry starts from the default's, null lifts a
 * limit. 0, or LOOM_EINVAL with e naming the field (line and column from text). */
struct json_t;
int loom_quota_cfg_from_json(struct json_t *obj, const char *where, const char *text, size_t len,
                             loom_quota_cfg *out, loom_err *e);
/* The limits that apply to `tenant`. */
const loom_quota *loom_quota_for(const loom_quota_cfg *q, const char *tenant);

/* Who may call the API (docs/security.md). */
typedef enum loom_server_auth {
        /* Tokens when data_dir/auth.db holds any at start; with none, no authentication, which
         * is allowed on a loopback address only (a non-loopback one refuses to start). */
        LOOM_AUTH_AUTO = 0,
        LOOM_AUTH_TOKENS, /* every request but /healthz needs a token (even with none yet) */
        LOOM_AUTH_NONE,   /* every caller is admin: loopback addresses only (demo, tests) */
} loom_server_auth;

typedef struct loom_server_cfg {
        const char *data_dir; /* required; created if missing; holds loom.db (+ WAL) */
        char listen_host[64]; /* an address or a name (IPv6 without brackets); "127.0.0.1" */
        int port;             /* default 7480; 0 = any free port (see loom_server_port) */
        bool have_cluster;    /* cluster/policy below were given explicitly */
        loom_cluster_cfg cluster;
        loom_policy_cfg policy;
        double lease_timeout_s; /* default 30: a lease or unclaimed permit not renewed expires */
        double idle_timeout_s;  /* default 10: an idle (not suspended) connection is closed */
        double request_timeout_s; /* default 10: a connection that has not sent a whole request
                                     this long after opening (or after its last reply) is
                                     closed, however it trickles bytes; 0: no deadline */
        int max_conns;            /* default 8192: connections served at once */
        int max_conns_per_addr;   /* default 2048: of them from one client address; 0: any */
        double max_wait_s;      /* default 300: upper bound on ?wait= of acquire */
        int drift_window;       /* default 5: iterations whose phase times are compared with
                                   the planned ones; 0 turns drift re-admission off */
        double drift_threshold; /* default 1.05: re-admit when the p95 of the window exceeds
                                   the planned phase time by this factor */
        bool sync_full;         /* fsync every commit (power-loss safe); default off: a commit
                                   is written to the WAL before the reply, which survives a
                                   crash of loomd but not of the machine */
        loom_server_auth auth;  /* default LOOM_AUTH_AUTO */
        bool public_metrics;    /* /metrics without a token (else admin only); /healthz is open */
        const char *tls_cert;   /* PEM certificate chain and key: serve HTTPS (both or neither); */
        const char *tls_key;    /* required on a non-loopback address */
        int compact_min;        /* default 4096: compact the log once it has this many entries
                                   and has doubled since the last compaction (0: never) */
        loom_quota_cfg quotas;  /* per tenant; all zero (the default): no limits */
        loom_server_log_fn log;
        void *log_arg;
        loom_server_state_hooks state;
        /* Executor that starts, watches and stops the jobs' workers and powers nodes
         * (loom/exec.h, docs/slurm.md); NULL: workers are started by hand. Not owned; used by
         * loomd's executor thread only, from the start until loom_server_stop returns. */
        struct loom_exec *exec;
        /* Replication (docs/ha.md): when set, this server is the replicas' leader and hands
         * every store commit to replicate (an append to the replicated log) before it
         * completes; a nonzero return rolls the commit back and fails the request, and
         * loom_server_failed turns true. NULL (the default): one loomd, its SQLite store. */
        int (*replicate)(void *arg, const void *entry, size_t n, loom_err *e);
        /* Every snapshot_every commits (0: never), the store's image goes to snapshot (same
         * arg), which lets the replicated log drop what it covers. Its failure changes
         * nothing but the log's length. */
        int (*snapshot)(void *arg, const void *image, size_t n, loom_err *e);
        unsigned snapshot_every;
        uint64_t snapshot_due; /* commits since the latest snapshot, before this server's */
        void *replicate_arg;
        const char *replica_url; /* this replica's advertised URL (/v1/cluster "leader") */
} loom_server_cfg;

void loom_server_cfg_default(loom_server_cfg *c);

/*
 * loomd's command line as configuration (options.c). A call that fails fills e with the
 * sentence loomd prints (field "--NAME" where an option's value is wrong) and changes nothing.
 * Strings are not copied: they must outlive c.
 *
 * Apply one option by its long name without dashes ("lease-timeout", "sync-full", ...; value
 * NULL for a flag): 0, LOOM_EINVAL for a bad value, LOOM_ENOENT for a name it does not know.
 * "--require-auth" and "--insecure-loopback" exclude each other.
 */
int loom_server_cfg_option(loom_server_cfg *c, const char *name, const char *value, loom_err *e);
/* "HOST:PORT" into listen_host and port. */
int loom_server_cfg_listen(loom_server_cfg *c, const char *host_port, loom_err *e);
/* A scenario-shaped file ({"cluster":{..},"policy":{..},...}) or a bare cluster into c->cluster
 * (and c->policy); sets have_cluster. LOOM_EIO for a file error, else LOOM_EINVAL with e->msg
 * "PATH:LINE:COL: FIELD: why" (and line, col). */
int loom_server_cfg_load(loom_server_cfg *c, const char *path, loom_err *e);
/* The line loomd logs once it serves ("serving http on 127.0.0.1:7480, data in ..."). */
void loom_server_serving_line(const loom_server_cfg *c, int port, char *buf, size_t len);

/*
 * Open (or create) the store under cfg->data_dir, rebuild the scheduler from it (replaying
 * every accepted submit and exit, checking each placement against the stored one) and bind the
 * listening socket. Returns NULL with e filled: LOOM_EINVAL for a bad config, LOOM_EIO for a
 * file or socket error, LOOM_ECORRUPT when the store does not replay to the same placements.
 * A store created with another cluster refuses a different explicit cluster (LOOM_EINVAL).
 */
loom_server *loom_server_new(const loom_server_cfg *cfg, loom_err *e);
/* The TCP port actually bound. */
int loom_server_port(const loom_server *s);
/* Write the bound port to path (through path.tmp, renamed: a reader never sees half a file).
 * 0 or LOOM_EIO with e->msg "PATH: why". */
int loom_server_write_port_file(const loom_server *s, const char *path, loom_err *e);
/* Start the scheduler thread and begin serving. 0 or LOOM_EIO / LOOM_ENOMEM. */
int loom_server_start(loom_server *s, loom_err *e);
/* Stop accepting connections, answer every pending request (long-polls get 503), let the
 * scheduler thread finish and close the store. Safe to call twice; not from a signal handler. */
void loom_server_stop(loom_server *s);
/* A store write that fails (disk full, I/O error) changes nothing: its batch is rolled back,
 * its requests get 503, and writes are refused (503, Retry-After) until one commits again,
 * while reads go on (docs/operations.md). True only when the store could not even be read
 * back after such a failure: the server has stopped scheduling and the program should stop
 * it and exit (a restart replays the store). Thread-safe enough to poll. */
bool loom_server_failed(const loom_server *s);
/* Stops if needed, then frees. NULL is fine. */
void loom_server_free(loom_server *s);

/*
 * A following replica (docs/ha.md). Its store is a materialisation of the leader's log:
 * loom_store_follower_open empties data_dir's store and creates it afresh (from a snapshot
 * when the log has been compacted), each entry of the
 * log (as the leader's replicate hook received it) is applied in order, all of it or nothing,
 * and on promotion the follower is closed and the same data_dir opened by loom_server_new,
 * which resumes from it as after a restart.
 */
typedef struct loom_store_follower loom_store_follower;
/* image (n bytes; NULL: none): a snapshot of the leader's store to start from. */
int loom_store_follower_open(loom_store_follower **out, const char *data_dir, const void *image,
                             size_t n, loom_err *e);
int loom_store_follower_apply(loom_store_follower *f, const void *entry, size_t n, loom_err *e);
/* Start again from image, a snapshot (a follower that fell behind the log's compaction). */
int loom_store_follower_reset(loom_store_follower *f, const void *image, size_t n, loom_err *e);
void loom_store_follower_close(loom_store_follower *f);

/* While following: serves cfg's address (and TLS) with /healthz {"role":"follower",
 * "leader":URL|null} and 307 to leader's URL for every other request (503 and Retry-After
 * while none leads). leader(arg, buf, cap) writes the leader's URL, "" when none; it is
 * called on the listener's thread. */
typedef struct loom_redirector loom_redirector;
int loom_redirector_start(loom_redirector **out, const loom_server_cfg *cfg,
                          void (*leader)(void *arg, char *buf, size_t cap), void *arg, loom_err *e);
void loom_redirector_stop(loom_redirector *r);

#endif
