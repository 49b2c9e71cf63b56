/*
 * store.c - loomd's durable state in SQLite (WAL mode): jobs, the submit/exit log the
 * scheduler is rebuilt from, and leases (one row per phase run). Only the scheduler thread
 * calls these; the engine wraps each batch of requests in one transaction and replies only
 * after srv_store_commit returned 0.
 *
 * Why a separate log table: placement depends only on the order of submits and exits, so
 * replaying that log into a fresh loom_sched gives back every group and pin. Phase progress is
 * kept per job (iterations done, next phase) and per lease.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "srv.h"

/* 2: meta "arith" (the core arithmetic the log was written under) and "lenient_through", and
 * compaction (jobs.replans_compacted, observe entries dropped from the log). A version 1 store
 * is upgraded in place; a newer one is refused. */
#define SCHEMA_VERSION "2"

enum {
        ST_JOB_INSERT,
        ST_JOB_UPDATE,
        ST_JOB_BY_KEY,
        ST_LOG,
        ST_LEASE_INSERT,
        ST_LEASE_END,
        ST_LEASE_GET,
        ST_BEGIN,
        ST_COMMIT,
        ST_RETRY_SAVE,
        ST_N
};

static const char *const stmt_sql[ST_N] = {
    [ST_JOB_INSERT] =
        "INSERT INTO jobs(id,name,idem_key,state,target,done,next_phase,rollout_gpus,"
        "train_gpus,t_roll_us,t_train_us,t_sync_us,slo,mem_rollout,mem_train,decision,"
        "submitted_us,ended_us,calls,next_call,tenant,t_switch_us,t_head_us,t_cold_us) "
        "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [ST_JOB_UPDATE] =
        "UPDATE jobs SET state=?,done=?,next_phase=?,ended_us=?,next_call=? WHERE id=?",
    [ST_JOB_BY_KEY] = "SELECT id FROM jobs WHERE idem_key=?",
    [ST_LOG] = "INSERT INTO log(kind,job,reason,at_us) VALUES(?,?,?,?)",
    [ST_LEASE_INSERT] = "INSERT INTO leases(id,job,phase,state,nodes,gpus,granted_us,pool) "
                        "VALUES(?,?,?,'active',?,?,?,?)",
    [ST_LEASE_END] = "UPDATE leases SET state=?,ended_us=? WHERE id=?",
    [ST_LEASE_GET] = "SELECT job,phase,state FROM leases WHERE id=?",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_RETRY_SAVE] = "INSERT OR REPLACE INTO admissions(job,core,restarts,resubmits,max_restarts,"
                      "plan_roll_us,plan_train_us,cause,why,at_us,observed) "
                      "VALUES(?,?,?,?,?,?,?,?,?,?,?)",
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS jobs("
    " id INTEGER PRIMARY KEY, name TEXT NOT NULL, idem_key TEXT UNIQUE,"
    " state TEXT NOT NULL, target INTEGER NOT NULL, done INTEGER NOT NULL,"
    " next_phase TEXT NOT NULL, rollout_gpus INTEGER NOT NULL, train_gpus INTEGER NOT NULL,"
    " t_roll_us INTEGER NOT NULL, t_train_us INTEGER NOT NULL, t_sync_us INTEGER NOT NULL,"
    " slo REAL NOT NULL, mem_rollout INTEGER NOT NULL, mem_train INTEGER NOT NULL,"
    " decision TEXT NOT NULL, submitted_us INTEGER NOT NULL, ended_us INTEGER,"
    /* a training phase run call by call: "us,us,us" per LOOM_CALL_* (else NULL), and the call
     * it runs next (the calls before it finished) */
    " calls TEXT, next_call INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS log("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, job INTEGER NOT NULL,"
    " reason TEXT, at_us INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS leases("
    " id INTEGER PRIMARY KEY, job INTEGER NOT NULL, phase TEXT NOT NULL,"
    " state TEXT NOT NULL, nodes TEXT NOT NULL, gpus INTEGER NOT NULL,"
    " granted_us INTEGER NOT NULL, ended_us INTEGER);"
    "CREATE INDEX IF NOT EXISTS leases_state ON leases(state);"
    /* retry.c: one row per job; a store without it predates re-admission */
    "CREATE TABLE IF NOT EXISTS admissions("
    " job INTEGER PRIMARY KEY, core INTEGER NOT NULL, restarts INTEGER NOT NULL,"
    " resubmits INTEGER NOT NULL, max_restarts INTEGER NOT NULL, plan_roll_us INTEGER NOT NULL,"
    " plan_train_us INTEGER NOT NULL, cause TEXT NOT NULL, why TEXT NOT NULL,"
    " at_us INTEGER NOT NULL, observed TEXT NOT NULL);";

struct srv_store {
        sqlite3 *db;
        sqlite3_stmt *st[ST_N];
        bool in_tx;

        /* WAL checkpoints run on their own thread and connection: done inside a commit they
         * would stall the scheduler thread (and every reply) for the checkpoint's fsync. */
        char path[4200];
        pthread_t ckpt;
        bool ckpt_running, ckpt_stop;
        int ckpt_pages;     /* WAL size at the last commit */
        uint64_t log_added; /* log entries appended since open / the last reset (compaction) */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        srv_replog *replog; /* a replica's leader: commits go through the replicated log */
        int (*snap)(void *arg, const void *image, size_t n, loom_err *e);
        void *snap_arg;
        unsigned snap_every, since_snap;
};

#define CKPT_PAGES 1000          /* SQLite's own default threshold */
#define CKPT_TRUNCATE_PAGES 4000 /* a WAL still this long after a passive pass is truncated */

static int on_wal(void *arg, sqlite3 *db, const char *name, int pages)
{
        srv_store *st = arg;
        if (pages >= CKPT_PAGES) {
                pthread_mutex_lock(&st->mu);
                st->ckpt_pages = pages;
                pthread_cond_signal(&st->cv);
                pthread_mutex_unlock(&st->mu);
        }
        return SQLITE_OK;
}

static void *ckpt_main(void *arg)
{
        srv_store *st = arg;
        sqlite3 *db = NULL;
        if (sqlite3_open_v2(st->path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
                sqlite3_close(db);
                return NULL; /* checkpoints then happen when the store closes */
        }
        sqlite3_busy_timeout(db, 1000);
        /* A connection that has read nothing has not opened the WAL yet: a checkpoint on it
         * does nothing (and says -1 frames), so the WAL would only ever grow. */
        sqlite3_exec(db, "SELECT count(*) FROM meta", NULL, NULL, NULL);
        pthread_mutex_lock(&st->mu);
        while (!st->ckpt_stop) {
                if (st->ckpt_pages < CKPT_PAGES) {
                        pthread_cond_wait(&st->cv, &st->mu);
                        continue;
                }
                st->ckpt_pages = 0;
                pthread_mutex_unlock(&st->mu);
                /* PASSIVE never blocks the writer; the WAL restarts from its beginning at the
                 * first commit after a complete checkpoint. Under a steady stream of commits
                 * that moment never comes (each checkpoint ends behind the frames committed
                 * meanwhile) and the WAL grows without bound, which a restart after kill -9
                 * then reads whole: when a passive pass leaves it long, TRUNCATE copies the
                 * few frames left while holding writers back for that moment, and empties it. */
                int frames = 0;
                sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, &frames, NULL);
                if (frames >= CKPT_TRUNCATE_PAGES)
                        sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
                pthread_mutex_lock(&st->mu);
        }
        pthread_mutex_unlock(&st->mu);
        sqlite3_close(db);
        return NULL;
}

static int db_err(srv_store *st, loom_err *e, const char *what)
{
        if (st->replog && sqlite3_extended_errcode(st->db) == SQLITE_CONSTRAINT_COMMITHOOK) {
                int code; /* the log refused it */
                const loom_err *why = srv_replog_error(st->replog, &code);
                return loom_err_set(e, code, "store", "not committed: %s", why->msg);
        }
        return loom_err_set(e, LOOM_EIO, "store", "%s: %s", what, sqlite3_errmsg(st->db));
}

static int exec(srv_store *st, const char *sql, loom_err *e)
{
        char *msg = NULL;
        if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
                int rc = loom_err_set(e, LOOM_EIO, "store", "%s", msg ? msg : "sqlite error");
                sqlite3_free(msg);
                return rc;
        }
        return 0;
}

/* Add a column to jobs unless it is there (a store from before it). */
static int add_column(srv_store *st, const char *table, const char *name, const char *type,
                      loom_err *e)
{
        char sql[160];
        snprintf(sql, sizeof sql, "SELECT %s FROM %s LIMIT 0", name, table);
        sqlite3_stmt *probe = NULL;
        int have = sqlite3_prepare_v2(st->db, sql, -1, &probe, NULL) == SQLITE_OK;
        sqlite3_finalize(probe);
        if (have)
                return 0;
        snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s %s", table, name, type);
        return exec(st, sql, e);
}

int srv_private_dir(const char *dir, loom_err *e)
{
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
                return loom_err_set(e, LOOM_EIO, "data_dir", "%s: %s", dir, strerror(errno));
        return 0;
}

/* The store holds the secret every worker token is derived from (meta auth_secret), and SQLite
 * gives its -wal and -shm files the database file's mode: the file is created owner-only
 * whatever the umask, and one an older loomd left readable (0644 under umask 022) is narrowed,
 * with its -wal and -shm, before SQLite opens it. */
int srv_private_file(const char *path, loom_err *e)
{
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
                return loom_err_set(e, LOOM_EIO, "data_dir", "%s: %s", path, strerror(errno));
        struct stat sb;
        int rc = 0;
        if (fstat(fd, &sb) == 0 && (sb.st_mode & 077) && sb.st_uid == geteuid() &&
            fchmod(fd, sb.st_mode & 0700) != 0)
                rc = loom_err_set(e, LOOM_EIO, "data_dir", "%s: cannot make it owner-only: %s",
                                  path, strerror(errno));
        close(fd);
        static const char *const side[] = {"-wal", "-shm"};
        for (int i = 0; !rc && i < 2; i++) {
                char p[4200];
                snprintf(p, sizeof p, "%s%s", path, side[i]);
                if (stat(p, &sb) == 0 && (sb.st_mode & 077) && sb.st_uid == geteuid() &&
                    chmod(p, sb.st_mode & 0700) != 0)
                        rc = loom_err_set(e, LOOM_EIO, "data_dir",
                                          "%s: cannot make it owner-only: %s", p, strerror(errno));
        }
        return rc;
}

int srv_store_open(srv_store **out, const char *dir, bool sync_full, loom_err *e)
{
        *out = NULL;
        int rc = srv_private_dir(dir, e);
        if (rc)
                return rc;
        srv_store *st = calloc(1, sizeof *st);
        if (!st)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        char *path = st->path;
        snprintf(st->path, sizeof st->path, "%s/loom.db", dir);
        if ((rc = srv_private_file(path, e))) {
                free(st);
                return rc;
        }
        pthread_mutex_init(&st->mu, NULL);
        pthread_cond_init(&st->cv, NULL);
        if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
            SQLITE_OK) {
                rc = loom_err_set(e, LOOM_EIO, "data_dir", "%s: %s", path,
                                  st->db ? sqlite3_errmsg(st->db) : "cannot open");
                srv_store_close(st);
                return rc;
        }
        sqlite3_busy_timeout(st->db, 5000);
        rc = exec(st, "PRAGMA journal_mode=WAL", e);
        if (!rc)
                rc = exec(st, sync_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
                          e);
        if (!rc)
                rc = exec(st, schema, e);
        /* stores from before call-by-call training lack these columns */
        if (!rc)
                rc = add_column(st, "jobs", "calls", "TEXT", e);
        if (!rc)
                rc = add_column(st, "jobs", "next_call", "INTEGER NOT NULL DEFAULT 0", e);
        if (!rc) /* the submitter's tenant (auth.c); "" for stores from before tokens */
                rc = add_column(st, "jobs", "tenant", "TEXT NOT NULL DEFAULT ''", e);
        if (!rc)
                rc = add_column(st, "jobs", "replans_compacted", "INTEGER NOT NULL DEFAULT 0", e);
        if (!rc) /* the job's own warm switch (switch_s); 0: not given, as in older stores */
                rc = add_column(st, "jobs", "t_switch_us", "INTEGER NOT NULL DEFAULT 0", e);
        if (!rc) /* its rollout's head (head_s); 0: not given, as in older stores */
                rc = add_column(st, "jobs", "t_head_us", "INTEGER NOT NULL DEFAULT 0", e);
        if (!rc) /* its rollout's cold start (cold_s); 0: not given, as in older stores */
                rc = add_column(st, "jobs", "t_cold_us", "INTEGER NOT NULL DEFAULT 0", e);
        if (!rc) /* a lone member's rollout runs on the training pool; NULL: by its phase */
                rc = add_column(st, "leases", "pool", "TEXT", e);
        for (int i = 0; !rc && i < ST_N; i++)
                if (sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                       &st->st[i], NULL) != SQLITE_OK)
                        rc = db_err(st, e, "prepare");
        if (!rc) {
                char *v = NULL;
                rc = srv_store_meta_get(st, "schema", &v, e);
                if (!rc && (!v || !strcmp(v, "1")))
                        rc = srv_store_meta_set(st, "schema", SCHEMA_VERSION, e);
                else if (!rc && strcmp(v, SCHEMA_VERSION))
                        rc = loom_err_set(e, LOOM_ECORRUPT, "store",
                                          "%s has schema version %s, this loomd knows up to %s: "
                                          "run the loomd that wrote it",
                                          path, v, SCHEMA_VERSION);
                free(v);
        }
        if (!rc) {
                sqlite3_wal_hook(st->db, on_wal, st); /* replaces SQLite's auto-checkpoint */
                st->ckpt_running = pthread_create(&st->ckpt, NULL, ckpt_main, st) == 0;
        }
        if (rc) {
                srv_store_close(st);
                return rc;
        }
        *out = st;
        return 0;
}

void srv_store_close(srv_store *st)
{
        if (!st)
                return;
        if (st->ckpt_running) {
                pthread_mutex_lock(&st->mu);
                st->ckpt_stop = true;
                pthread_cond_signal(&st->cv);
                pthread_mutex_unlock(&st->mu);
                pthread_join(st->ckpt, NULL);
        }
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->cv);
        srv_replog_detach(st->replog);
        for (int i = 0; i < ST_N; i++)
                sqlite3_finalize(st->st[i]);
        /* Closing the last connection checkpoints the WAL into the database file. */
        sqlite3_close(st->db);
        free(st);
}

sqlite3 *srv_store_db(srv_store *st)
{
        return st->db;
}

int srv_store_replicate(srv_store *st, int (*fn)(void *arg, const void *entry, size_t n, loom_err *e),
                        void *arg, loom_err *e)
{
        srv_replog_detach(st->replog);
        st->replog = NULL;
        return srv_replog_attach(&st->replog, st->db, fn, arg, e);
}

/* Run a prepared statement that returns no rows, then reset it. */
static int step_done(srv_store *st, int which, loom_err *e)
{
        sqlite3_stmt *q = st->st[which];
        int rc = sqlite3_step(q);
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
        if (rc != SQLITE_DONE)
                return db_err(st, e, stmt_sql[which]);
        return 0;
}

int srv_store_begin(srv_store *st, loom_err *e)
{
        int rc = step_done(st, ST_BEGIN, e);
        st->in_tx = rc == 0;
        return rc;
}

int srv_store_commit(srv_store *st, loom_err *e)
{
        st->in_tx = false;
        int rc = step_done(st, ST_COMMIT, e);
        if (!rc && st->snap && ++st->since_snap >= st->snap_every) {
                /* the store's image as of this commit (WAL content included) */
                sqlite3_int64 n = 0;
                unsigned char *img = sqlite3_serialize(st->db, "main", &n, 0);
                loom_err se;
                if (img && st->snap(st->snap_arg, img, (size_t)n, &se) == 0)
                        st->since_snap = 0;
                else
                        st->since_snap = st->snap_every / 2; /* try again a while later */
                sqlite3_free(img);
        }
        return rc;
}

void srv_store_snapshots(srv_store *st, int (*fn)(void *arg, const void *image, size_t n, loom_err *e),
                         void *arg, unsigned every, uint64_t due)
{
        st->snap = every ? fn : NULL;
        st->snap_arg = arg;
        st->snap_every = every;
        /* counted from the latest snapshot, not from this leadership: replicas that each lead
         * for fewer than `every` commits still cut the log */
        st->since_snap = due < every ? (unsigned)due : every;
}

void srv_store_rollback(srv_store *st)
{
        if (st && sqlite3_get_autocommit(st->db) == 0)
                sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        if (st)
                st->in_tx = false;
}

int srv_store_meta_get(srv_store *st, const char *key, char **val, loom_err *e)
{
        sqlite3_stmt *q;
        *val = NULL;
        if (sqlite3_prepare_v2(st->db, "SELECT value FROM meta WHERE key=?", -1, &q, NULL) !=
            SQLITE_OK)
                return db_err(st, e, "meta");
        sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
        int rc = sqlite3_step(q);
        int out = 0;
        if (rc == SQLITE_ROW) {
                *val = strdup((const char *)sqlite3_column_text(q, 0));
                if (!*val)
                        out = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        } else if (rc != SQLITE_DONE) {
                out = db_err(st, e, "meta");
        }
        sqlite3_finalize(q);
        return out;
}

int srv_store_meta_set(srv_store *st, const char *key, const char *val, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db, "INSERT OR REPLACE INTO meta(key,value) VALUES(?,?)", -1, &q,
                               NULL) != SQLITE_OK)
                return db_err(st, e, "meta");
        sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, val, -1, SQLITE_STATIC);
        int rc = sqlite3_step(q) == SQLITE_DONE ? 0 : db_err(st, e, "meta");
        sqlite3_finalize(q);
        return rc;
}

/* jobs.calls: the spec's call durations, "us,us,us" (LOOM_N_CALLS of them); false when the
 * job trains in one call (stored as NULL). */
static bool calls_text(const loom_job_spec *sp, char out[96])
{
        bool any = false;
        for (int c = 0, n = 0; c < LOOM_N_CALLS; c++) {
                any |= sp->t_calls[c] > 0;
                n += snprintf(out + n, 96 - (size_t)n, "%s%lld", c ? "," : "",
                              (long long)sp->t_calls[c]);
        }
        return any;
}

static int calls_parse(const char *t, loom_job_spec *sp)
{
        for (int c = 0; t && c < LOOM_N_CALLS; c++) {
                char *end;
                long long v = strtoll(t, &end, 10);
                if (end == t || v < 0 || (*end != (c + 1 < LOOM_N_CALLS ? ',' : 0)))
                        return -1;
                sp->t_calls[c] = (loom_us)v;
                t = end + (c + 1 < LOOM_N_CALLS);
        }
        return 0;
}

int srv_store_job_insert(srv_store *st, const srv_job *j, const char *key, loom_err *e)
{
        sqlite3_stmt *q = st->st[ST_JOB_INSERT];
        char *dec = json_dumps(j->decision, JSON_COMPACT);
        if (!dec)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int i = 1;
        sqlite3_bind_int64(q, i++, j->id);
        sqlite3_bind_text(q, i++, j->name, -1, SQLITE_STATIC);
        if (key && *key)
                sqlite3_bind_text(q, i++, key, -1, SQLITE_STATIC);
        else
                sqlite3_bind_null(q, i++);
        sqlite3_bind_text(q, i++, srv_job_state_name(j->state), -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, i++, j->target);
        sqlite3_bind_int64(q, i++, j->done);
        sqlite3_bind_text(q, i++, loom_phase_name(j->next), -1, SQLITE_STATIC);
        sqlite3_bind_int(q, i++, j->spec.rollout_gpus);
        sqlite3_bind_int(q, i++, j->spec.train_gpus);
        sqlite3_bind_int64(q, i++, j->spec.t_roll);
        sqlite3_bind_int64(q, i++, j->spec.t_train);
        sqlite3_bind_int64(q, i++, j->spec.t_sync);
        sqlite3_bind_double(q, i++, j->spec.slo);
        sqlite3_bind_int64(q, i++, (sqlite3_int64)j->spec.mem_rollout);
        sqlite3_bind_int64(q, i++, (sqlite3_int64)j->spec.mem_train);
        sqlite3_bind_text(q, i++, dec, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(q, i++, j->submitted_wall);
        sqlite3_bind_null(q, i++);
        char calls[96];
        if (calls_text(&j->spec, calls))
                sqlite3_bind_text(q, i++, calls, -1, SQLITE_TRANSIENT);
        else
                sqlite3_bind_null(q, i++);
        sqlite3_bind_int(q, i++, j->next_call);
        sqlite3_bind_text(q, i++, j->tenant, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, i++, j->spec.t_switch);
        sqlite3_bind_int64(q, i++, j->spec.t_head);
        sqlite3_bind_int64(q, i++, j->spec.t_cold);
        free(dec);
        return step_done(st, ST_JOB_INSERT, e);
}

int srv_store_job_update(srv_store *st, const srv_job *j, loom_err *e)
{
        sqlite3_stmt *q = st->st[ST_JOB_UPDATE];
        sqlite3_bind_text(q, 1, srv_job_state_name(j->state), -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 2, j->done);
        sqlite3_bind_text(q, 3, loom_phase_name(j->next), -1, SQLITE_STATIC);
        if (j->ended_wall)
                sqlite3_bind_int64(q, 4, j->ended_wall);
        else
                sqlite3_bind_null(q, 4);
        sqlite3_bind_int(q, 5, j->next_call);
        sqlite3_bind_int64(q, 6, j->id);
        return step_done(st, ST_JOB_UPDATE, e);
}

int srv_store_job_set_decision(srv_store *st, const srv_job *j, loom_err *e)
{
        char *dec = json_dumps(j->decision, JSON_COMPACT);
        sqlite3_stmt *q;
        if (!dec)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (sqlite3_prepare_v2(st->db, "UPDATE jobs SET decision=? WHERE id=?", -1, &q, NULL) !=
            SQLITE_OK) {
                free(dec);
                return db_err(st, e, "decision");
        }
        sqlite3_bind_text(q, 1, dec, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(q, 2, j->id);
        int rc = sqlite3_step(q) == SQLITE_DONE ? 0 : db_err(st, e, "decision");
        sqlite3_finalize(q);
        free(dec);
        return rc;
}

int srv_store_log_last(srv_store *st, int64_t *seq, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db, "SELECT COALESCE(MAX(seq),0) FROM log", -1, &q, NULL) !=
            SQLITE_OK)
                return db_err(st, e, "log");
        int rc = sqlite3_step(q) == SQLITE_ROW ? 0 : db_err(st, e, "log");
        if (!rc)
                *seq = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
        return rc;
}

int srv_store_job_by_key(srv_store *st, const char *key, uint32_t *job, loom_err *e)
{
        sqlite3_stmt *q = st->st[ST_JOB_BY_KEY];
        sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
        int rc = sqlite3_step(q);
        int out = LOOM_ENOENT;
        if (rc == SQLITE_ROW) {
                *job = (uint32_t)sqlite3_column_int64(q, 0);
                out = 0;
        } else if (rc != SQLITE_DONE) {
                out = db_err(st, e, "job by key");
        }
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
        return out;
}

int srv_store_log(srv_store *st, const char *kind, uint32_t job, const char *reason, loom_err *e)
{
        sqlite3_stmt *q = st->st[ST_LOG];
        sqlite3_bind_text(q, 1, kind, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 2, job);
        if (reason)
                sqlite3_bind_text(q, 3, reason, -1, SQLITE_STATIC);
        else
                sqlite3_bind_null(q, 3);
        sqlite3_bind_int64(q, 4, srv_now_wall());
        int rc = step_done(st, ST_LOG, e);
        st->log_added += rc == 0;
        return rc;
}

static void nodes_text(char *buf, size_t cap, const loom_node_id *nodes, int n)
{
        size_t off = 0;
        buf[0] = '\0';
        for (int i = 0; i < n && off + 12 < cap; i++)
                off += (size_t)snprintf(buf + off, cap - off, i ? ",%u" : "%u", nodes[i]);
}

int srv_store_lease_insert(srv_store *st, uint32_t job, const srv_lease *l, loom_err *e)
{
        sqlite3_stmt *q = st->st[ST_LEASE_INSERT];
        char nodes[LOOM_MAX_JOB_NODES * 12];
        nodes_text(nodes, sizeof nodes, l->nodes, l->n_nodes);
        sqlite3_bind_int64(q, 1, l->id);
        sqlite3_bind_int64(q, 2, job);
        sqlite3_bind_text(q, 3, loom_phase_name(l->phase), -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 4, nodes, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(q, 5, l->gpus);
        sqlite3_bind_int64(q, 6, l->granted_wall);
        sqlite3_bind_text(q, 7, loom_pool_name(l->pool), -1, SQLITE_STATIC);
        return step_done(st, ST_LEASE_INSERT, e);
}

int srv_store_lease_end(srv_store *st, int64_t id, const char *state, int64_t at, loom_err *e)
{
        sqlite3_stmt *q = st->st[ST_LEASE_END];
        sqlite3_bind_text(q, 1, state, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 2, at);
        sqlite3_bind_int64(q, 3, id);
        return step_done(st, ST_LEASE_END, e);
}

int srv_store_lease_get(srv_store *st, int64_t id, uint32_t *job, loom_phase *phase, char state[16],
                        loom_err *e)
{
        sqlite3_stmt *q = st->st[ST_LEASE_GET];
        sqlite3_bind_int64(q, 1, id);
        int rc = sqlite3_step(q);
        int out = LOOM_ENOENT;
        if (rc == SQLITE_ROW) {
                *job = (uint32_t)sqlite3_column_int64(q, 0);
                const char *ph = (const char *)sqlite3_column_text(q, 1);
                out = loom_phase_parse(ph ? ph : "", phase) ? LOOM_ECORRUPT : 0;
                snprintf(state, 16, "%s", (const char *)sqlite3_column_text(q, 2));
                if (out)
                        loom_err_set(e, out, "store", "lease %lld has phase '%s'", (long long)id,
                                     ph ? ph : "");
        } else if (rc != SQLITE_DONE) {
                out = db_err(st, e, "lease");
        }
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
        return out;
}

int srv_store_lease_next_id(srv_store *st, int64_t *id, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db, "SELECT COALESCE(MAX(id),0)+1 FROM leases", -1, &q, NULL) !=
            SQLITE_OK)
                return db_err(st, e, "lease id");
        int rc = sqlite3_step(q) == SQLITE_ROW ? 0 : db_err(st, e, "lease id");
        if (!rc)
                *id = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
        return rc;
}

int srv_store_leases_lose_active(srv_store *st, int64_t at, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db,
                               "UPDATE leases SET state='lost',ended_us=? "
                               "WHERE state='active'",
                               -1, &q, NULL) != SQLITE_OK)
                return db_err(st, e, "leases");
        sqlite3_bind_int64(q, 1, at);
        int rc = sqlite3_step(q) == SQLITE_DONE ? 0 : db_err(st, e, "leases");
        sqlite3_finalize(q);
        return rc;
}

int srv_store_leases_active(srv_store *st,
                            void (*fn)(void *arg, int64_t id, uint32_t job, loom_phase phase,
                                       int64_t granted_us),
                            void *arg, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db,
                               "SELECT id,job,phase,granted_us FROM leases WHERE state='active' "
                               "ORDER BY id",
                               -1, &q, NULL) != SQLITE_OK)
                return db_err(st, e, "leases");
        int step;
        while ((step = sqlite3_step(q)) == SQLITE_ROW) {
                const char *ph = (const char *)sqlite3_column_text(q, 2);
                loom_phase phase;
                if (!loom_phase_parse(ph ? ph : "", &phase))
                        fn(arg, sqlite3_column_int64(q, 0), (uint32_t)sqlite3_column_int64(q, 1),
                           phase, sqlite3_column_int64(q, 3));
        }
        int rc = step == SQLITE_DONE ? 0 : db_err(st, e, "leases");
        sqlite3_finalize(q);
        return rc;
}

static int parse_state(const char *s)
{
        for (int i = SJ_QUEUED; i <= SJ_CANCELLED; i++)
                if (!strcmp(s, srv_job_state_name(i)))
                        return i;
        return -1;
}

/* Build one srv_job from a row of the SELECT in srv_store_load_jobs. */
static int row_to_job(sqlite3_stmt *q, srv_job *j, loom_err *e)
{
        int i = 0;
        j->id = (uint32_t)sqlite3_column_int64(q, i++);
        snprintf(j->name, sizeof j->name, "%s", (const char *)sqlite3_column_text(q, i++));
        j->state = parse_state((const char *)sqlite3_column_text(q, i++));
        j->target = sqlite3_column_int64(q, i++);
        j->done = sqlite3_column_int64(q, i++);
        const char *next = (const char *)sqlite3_column_text(q, i++);
        loom_job_spec_init(&j->spec);
        snprintf(j->spec.id, sizeof j->spec.id, "%s", j->name);
        j->spec.rollout_gpus = sqlite3_column_int(q, i++);
        j->spec.train_gpus = sqlite3_column_int(q, i++);
        j->spec.t_roll = sqlite3_column_int64(q, i++);
        j->spec.t_train = sqlite3_column_int64(q, i++);
        j->spec.t_sync = sqlite3_column_int64(q, i++);
        j->spec.slo = sqlite3_column_double(q, i++);
        j->spec.mem_rollout = (uint64_t)sqlite3_column_int64(q, i++);
        j->spec.mem_train = (uint64_t)sqlite3_column_int64(q, i++);
        j->spec.iterations = j->target;
        const char *dec = (const char *)sqlite3_column_text(q, i++);
        j->submitted_wall = sqlite3_column_int64(q, i++);
        j->ended_wall = sqlite3_column_type(q, i) == SQLITE_NULL ? 0 : sqlite3_column_int64(q, i);
        i++;
        if (calls_parse((const char *)sqlite3_column_text(q, i++), &j->spec))
                return loom_err_set(e, LOOM_ECORRUPT, "store", "job %u: unreadable calls", j->id);
        j->next_call = sqlite3_column_int(q, i++);
        snprintf(j->tenant, sizeof j->tenant, "%s", (const char *)sqlite3_column_text(q, i++));
        j->replans = j->replans_base = (uint64_t)sqlite3_column_int64(q, i++);
        j->spec.t_switch = sqlite3_column_int64(q, i++);
        j->spec.t_head = sqlite3_column_int64(q, i++);
        j->spec.t_cold = sqlite3_column_int64(q, i++);
        json_error_t je;
        j->decision = dec ? json_loads(dec, 0, &je) : NULL;
        if (j->state < 0 || !next || loom_phase_parse(next, &j->next) || !j->decision ||
            j->spec.t_switch < 0 || j->spec.t_head < 0 || j->spec.t_head > j->spec.t_roll ||
            j->spec.t_cold < 0 ||
            j->next_call < 0 || j->next_call >= LOOM_N_CALLS ||
            (j->next_call > 0 && j->next != LOOM_PHASE_TRAIN))
                return loom_err_set(e, LOOM_ECORRUPT, "store", "job %u: unreadable row", j->id);
        return 0;
}

int srv_store_load_jobs(srv_store *st, int (*add)(void *arg, srv_job *j), void *arg, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db,
                               "SELECT id,name,state,target,done,next_phase,rollout_gpus,"
                               "train_gpus,t_roll_us,t_train_us,t_sync_us,slo,mem_rollout,"
                               "mem_train,decision,submitted_us,ended_us,calls,next_call,tenant,"
                               "replans_compacted,t_switch_us,t_head_us,t_cold_us FROM jobs "
                               "ORDER BY id",
                               -1, &q, NULL) != SQLITE_OK)
                return db_err(st, e, "load jobs");
        int rc = 0, step;
        while (!rc && (step = sqlite3_step(q)) == SQLITE_ROW) {
                srv_job *j = calloc(1, sizeof *j);
                if (!j) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                rc = row_to_job(q, j, e);
                if (!rc && (rc = add(arg, j)) == LOOM_ESTATE)
                        rc = loom_err_set(e, LOOM_ECORRUPT, "store", "job ids not dense at %u",
                                          j->id);
                else if (rc && rc != LOOM_ECORRUPT)
                        rc = loom_err_set(e, rc, "store", "job %u: %s", j->id, loom_strerror(rc));
                if (rc) {
                        json_decref(j->decision);
                        free(j);
                }
        }
        if (!rc && step != SQLITE_DONE)
                rc = db_err(st, e, "load jobs");
        sqlite3_finalize(q);
        return rc;
}

int srv_store_each_log(srv_store *st,
                       int (*fn)(void *arg, int64_t seq, const char *kind, uint32_t job,
                                 const char *reason, int64_t at),
                       void *arg, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db, "SELECT seq,kind,job,reason,at_us FROM log ORDER BY seq", -1,
                               &q, NULL) != SQLITE_OK)
                return db_err(st, e, "load log");
        int rc = 0, step;
        while (!rc && (step = sqlite3_step(q)) == SQLITE_ROW)
                rc = fn(arg, sqlite3_column_int64(q, 0), (const char *)sqlite3_column_text(q, 1),
                        (uint32_t)sqlite3_column_int64(q, 2),
                        (const char *)sqlite3_column_text(q, 3), sqlite3_column_int64(q, 4));
        if (!rc && step != SQLITE_DONE)
                rc = db_err(st, e, "load log");
        sqlite3_finalize(q);
        return rc;
}

/* ---- compaction (compact.c) ----------------------------------------------------------------- */

uint64_t srv_store_log_added(const srv_store *st)
{
        return st->log_added;
}

void srv_store_log_added_reset(srv_store *st)
{
        st->log_added = 0;
}

void srv_log_rows_free(srv_log_row *rows, size_t n)
{
        for (size_t i = 0; rows && i < n; i++)
                free(rows[i].reason);
        free(rows);
}

int srv_store_log_rows(srv_store *st, srv_log_row **rows, size_t *n, loom_err *e)
{
        sqlite3_stmt *q;
        *rows = NULL;
        *n = 0;
        if (sqlite3_prepare_v2(st->db, "SELECT seq,kind,job,reason,at_us FROM log ORDER BY seq", -1,
                               &q, NULL) != SQLITE_OK)
                return db_err(st, e, "log");
        size_t cap = 0;
        int rc = 0, step;
        while (!rc && (step = sqlite3_step(q)) == SQLITE_ROW) {
                if (loom_reserve(rows, &cap, *n + 1, sizeof **rows, 1024)) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                srv_log_row *r = &(*rows)[*n];
                const char *reason = (const char *)sqlite3_column_text(q, 3);
                r->seq = sqlite3_column_int64(q, 0);
                snprintf(r->kind, sizeof r->kind, "%s", (const char *)sqlite3_column_text(q, 1));
                r->job = (uint32_t)sqlite3_column_int64(q, 2);
                r->at = sqlite3_column_int64(q, 4);
                r->reason = reason ? strdup(reason) : NULL;
                (*n)++;
                if (reason && !r->reason)
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        if (!rc && step != SQLITE_DONE)
                rc = db_err(st, e, "log");
        sqlite3_finalize(q);
        if (rc) {
                srv_log_rows_free(*rows, *n);
                *rows = NULL;
                *n = 0;
        }
        return rc;
}

static int run1(srv_store *st, const char *sql, int64_t a, const char *text, int64_t b, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db, sql, -1, &q, NULL) != SQLITE_OK)
                return db_err(st, e, "compact");
        if (text) {
                sqlite3_bind_text(q, 1, text, -1, SQLITE_STATIC);
                sqlite3_bind_int64(q, 2, b);
        } else {
                sqlite3_bind_int64(q, 1, a);
                if (b >= 0)
                        sqlite3_bind_int64(q, 2, b);
        }
        int rc = sqlite3_step(q) == SQLITE_DONE ? 0 : db_err(st, e, "compact");
        sqlite3_finalize(q);
        return rc;
}

int srv_store_compact(srv_store *st, const int64_t *drop, size_t ndrop, const int64_t *rew_seq,
                      char *const *rew_text, size_t nrew, const uint64_t *base, uint32_t njobs,
                      loom_err *e)
{
        /* One transaction: a crash at any point leaves the whole old log or the whole new one
         * (SQLite's WAL commit is the only step that makes it visible). */
        int rc = exec(st, "BEGIN IMMEDIATE", e);
        for (size_t i = 0; !rc && i < ndrop; i++)
                rc = run1(st, "DELETE FROM log WHERE seq=?", drop[i], NULL, -1, e);
        for (size_t i = 0; !rc && i < nrew; i++)
                rc = run1(st, "UPDATE log SET reason=? WHERE seq=?", 0, rew_text[i], rew_seq[i], e);
        for (uint32_t j = 0; !rc && j < njobs; j++)
                rc = run1(st, "UPDATE jobs SET replans_compacted=? WHERE id=?", (int64_t)base[j],
                          NULL, (int64_t)j + 1, e);
        if (!rc)
                rc = exec(st, "COMMIT", e);
        if (rc)
                srv_store_rollback(st);
        return rc;
}

/* ---- admissions (retry.c) -------------------------------------------------------------------- */

/* Observed phase times as text: "n0 n1;r r r ...;t t t ..." (the rings, oldest first). */
static char *observed_text(const srv_retry *r)
{
        size_t cap = 64 + 2 * SRV_DRIFT_MAX * 24, off = 0;
        char *t = malloc(cap);
        if (!t)
                return NULL;
        off += (size_t)snprintf(t, cap, "%d %d", r->n_obs[0], r->n_obs[1]);
        for (int p = 0; p < 2; p++) {
                int k = r->n_obs[p] < SRV_DRIFT_MAX ? r->n_obs[p] : SRV_DRIFT_MAX;
                t[off++] = ';';
                t[off] = '\0';
                for (int i = 0; i < k; i++)
                        off += (size_t)snprintf(
                            t + off, cap - off, i ? " %lld" : "%lld",
                            (long long)r->obs[p][(r->n_obs[p] - k + i) % SRV_DRIFT_MAX]);
        }
        return t;
}

static int observed_parse(const char *t, srv_retry *r)
{
        char *end;
        for (int p = 0; p < 2; p++) {
                long n = strtol(t, &end, 10);
                if (end == t || n < 0)
                        return -1;
                r->n_obs[p] = (int)(n > 2 * SRV_DRIFT_MAX ? SRV_DRIFT_MAX + n % SRV_DRIFT_MAX : n);
                t = end;
        }
        for (int p = 0; p < 2; p++) {
                if (*t != ';')
                        return -1;
                t++;
                int k = r->n_obs[p] < SRV_DRIFT_MAX ? r->n_obs[p] : SRV_DRIFT_MAX;
                for (int i = 0; i < k; i++) {
                        long long v = strtoll(t, &end, 10);
                        if (end == t)
                                return -1;
                        r->obs[p][(r->n_obs[p] - k + i) % SRV_DRIFT_MAX] = v;
                        t = end;
                }
        }
        return 0;
}

int srv_store_retry_save(srv_store *st, const srv_job *j, loom_err *e)
{
        sqlite3_stmt *q = st->st[ST_RETRY_SAVE];
        const srv_retry *r = &j->retry;
        char *obs = observed_text(r);
        if (!obs)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int i = 1;
        sqlite3_bind_int64(q, i++, j->id);
        sqlite3_bind_int64(q, i++, r->core);
        sqlite3_bind_int(q, i++, r->restarts);
        sqlite3_bind_int(q, i++, r->resubmits);
        sqlite3_bind_int(q, i++, j->spec.max_restarts);
        sqlite3_bind_int64(q, i++, r->plan_roll);
        sqlite3_bind_int64(q, i++, r->plan_train);
        sqlite3_bind_text(q, i++, r->cause, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, i++, r->why, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, i++, r->at_wall);
        sqlite3_bind_text(q, i++, obs, -1, SQLITE_TRANSIENT);
        free(obs);
        return step_done(st, ST_RETRY_SAVE, e);
}

int srv_store_retry_load(srv_store *st, loom_server *s, loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db,
                               "SELECT job,core,restarts,resubmits,max_restarts,plan_roll_us,"
                               "plan_train_us,cause,why,at_us,observed FROM admissions",
                               -1, &q, NULL) != SQLITE_OK)
                return db_err(st, e, "load admissions");
        int rc = 0, step;
        while (!rc && (step = sqlite3_step(q)) == SQLITE_ROW) {
                uint32_t id = (uint32_t)sqlite3_column_int64(q, 0);
                srv_job *j = srv_job_get(s, id);
                if (!j) {
                        rc = loom_err_set(e, LOOM_ECORRUPT, "store",
                                          "admissions name unknown job %u", id);
                        break;
                }
                srv_retry *r = &j->retry;
                r->core = (uint32_t)sqlite3_column_int64(q, 1);
                r->restarts = sqlite3_column_int(q, 2);
                r->resubmits = sqlite3_column_int(q, 3);
                j->spec.max_restarts = sqlite3_column_int(q, 4);
                r->plan_roll = sqlite3_column_int64(q, 5);
                r->plan_train = sqlite3_column_int64(q, 6);
                snprintf(r->cause, sizeof r->cause, "%s", sqlite3_column_text(q, 7));
                snprintf(r->why, sizeof r->why, "%s", sqlite3_column_text(q, 8));
                r->at_wall = sqlite3_column_int64(q, 9);
                const char *obs = (const char *)sqlite3_column_text(q, 10);
                if (!obs || observed_parse(obs, r) || r->plan_roll <= 0 || r->plan_train <= 0)
                        rc = loom_err_set(e, LOOM_ECORRUPT, "store",
                                          "job %u: unreadable admissions row", id);
        }
        if (!rc && step != SQLITE_DONE)
                rc = db_err(st, e, "load admissions");
        sqlite3_finalize(q);
        return rc;
}

/* ---- timeline (dashboard.c) ---------------------------------------------------------------- */

/* Lease ids grow with time, so walking them newest first and stopping once a run of rows lies
 * wholly before `since` reads only the window, however long the table has grown. */
#define TIMELINE_STOP_RUN 32

static int timeline_leases(srv_store *st, int64_t since, int max, srv_lease_fn fn, void *arg,
                           loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db,
                               "SELECT id,job,phase,state,nodes,gpus,granted_us,ended_us,pool "
                               "FROM leases ORDER BY id DESC",
                               -1, &q, NULL) != SQLITE_OK)
                return db_err(st, e, "timeline");
        int n = 0, old = 0, step = SQLITE_DONE;
        while (n < max && old < TIMELINE_STOP_RUN && (step = sqlite3_step(q)) == SQLITE_ROW) {
                srv_lease_row l = {.id = sqlite3_column_int64(q, 0),
                                   .job = (uint32_t)sqlite3_column_int64(q, 1),
                                   .gpus = sqlite3_column_int(q, 5),
                                   .granted = sqlite3_column_int64(q, 6),
                                   .ended = sqlite3_column_int64(q, 7)};
                if (l.ended != 0 && l.ended < since) {
                        old++;
                        continue;
                }
                old = 0;
                snprintf(l.phase, sizeof l.phase, "%s", sqlite3_column_text(q, 2));
                snprintf(l.state, sizeof l.state, "%s", sqlite3_column_text(q, 3));
                snprintf(l.nodes, sizeof l.nodes, "%s", sqlite3_column_text(q, 4));
                const unsigned char *pool = sqlite3_column_text(q, 8);
                snprintf(l.pool, sizeof l.pool, "%s",
                         pool ? (const char *)pool
                              : loom_pool_name(strcmp(l.phase, "train") ? LOOM_POOL_ROLLOUT
                                                                        : LOOM_POOL_TRAIN));
                fn(arg, &l);
                n++;
        }
        int rc = step != SQLITE_ROW && step != SQLITE_DONE ? db_err(st, e, "timeline") : 0;
        sqlite3_finalize(q);
        return rc;
}

static int timeline_log(srv_store *st, int64_t since, int max, srv_log_fn fn, void *arg,
                        loom_err *e)
{
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(st->db,
                               "SELECT seq,kind,job,reason,at_us FROM log ORDER BY seq DESC", -1,
                               &q, NULL) != SQLITE_OK)
                return db_err(st, e, "timeline");
        int n = 0, step = SQLITE_DONE;
        while (n < max && (step = sqlite3_step(q)) == SQLITE_ROW) {
                int64_t at = sqlite3_column_int64(q, 4);
                if (at < since)
                        break; /* seq order is commit order, and so time order */
                const char *kind = (const char *)sqlite3_column_text(q, 1);
                if (!kind || !strcmp(kind, "observe") || !strcmp(kind, "iter"))
                        continue; /* one per phase or training: the leases say as much */
                fn(arg, sqlite3_column_int64(q, 0), kind, (uint32_t)sqlite3_column_int64(q, 2),
                   (const char *)sqlite3_column_text(q, 3), at);
                n++;
        }
        int rc = step != SQLITE_ROW && step != SQLITE_DONE ? db_err(st, e, "timeline") : 0;
        sqlite3_finalize(q);
        return rc;
}

int srv_store_timeline(srv_store *st, int64_t since, int max, srv_lease_fn on_lease,
                       srv_log_fn on_log, void *arg, loom_err *e)
{
        int rc = timeline_leases(st, since, max, on_lease, arg, e);
        return rc ? rc : timeline_log(st, since, max, on_log, arg, e);
}
