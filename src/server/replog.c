/*
 * replog.c - the store's changes as replication entries, and their replay on a follower
 * (docs/ha.md, "The log in etcd").
 *
 * A leader's every committed transaction becomes one entry: the rows it inserted, updated and
 * deleted, each with its table, rowid and full new values, captured by SQLite's pre-update
 * hook (no SQL parsing, nothing read back). The commit hook hands the entry to the
 * replicator (loom_server_cfg.replicate: an append to etcd fenced by the leader's key) and
 * only when that returns 0 does the local commit complete; otherwise the transaction rolls
 * back, so a deposed leader's store never holds what the log refused. Schema (DDL) is not
 * replicated: every replica runs the same loomd and creates the same tables.
 *
 * Entry (JSON): [{"t":TABLE,"o":"i"|"u"|"d","k":ROWID[,"w":OLD_ROWID][,"v":[VALUES]]}, ...].
 * Values: integers and reals as JSON numbers (reals keep 17 digits: exact), text as strings,
 * NULL as null, blobs as {"b":BASE64}.
 */
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nettle/base64.h>

#include "srv.h"

struct srv_replog {
        sqlite3 *db;
        int (*fn)(void *arg, const void *entry, size_t n, loom_err *e);
        void *arg;
        json_t *rows;
        bool broken; /* a row could not be captured: the commit must fail */
        int code;    /* why the last commit failed (the replicator's LOOM_E*) */
        loom_err err;
};

static json_t *value_json(sqlite3_value *v)
{
        switch (sqlite3_value_type(v)) {
        case SQLITE_INTEGER:
                return json_integer(sqlite3_value_int64(v));
        case SQLITE_FLOAT:
                return json_real(sqlite3_value_double(v));
        case SQLITE_NULL:
                return json_null();
        case SQLITE_TEXT: {
                json_t *s = json_stringn((const char *)sqlite3_value_text(v),
                                         (size_t)sqlite3_value_bytes(v));
                if (s)
                        return s;
        } /* not UTF-8: carried as bytes */
                /* fall through */
        default: {
                const void *p = sqlite3_value_blob(v);
                size_t n = (size_t)sqlite3_value_bytes(v);
                char *b = malloc(BASE64_ENCODE_RAW_LENGTH(n) + 1);
                if (!b)
                        return NULL;
                base64_encode_raw(b, n, p);
                b[BASE64_ENCODE_RAW_LENGTH(n)] = 0;
                json_t *o = json_pack("{s:s}", "b", b);
                free(b);
                return o;
        }
        }
}

static void on_preupdate(void *arg, sqlite3 *db, int op, const char *zdb, const char *table,
                         sqlite3_int64 k1, sqlite3_int64 k2)
{
        srv_replog *r = arg;
        if (strcmp(zdb, "main") || !strncmp(table, "sqlite_", 7))
                return;
        json_t *row = json_pack("{s:s,s:s,s:I}", "t", table, "o",
                                op == SQLITE_INSERT ? "i" : op == SQLITE_UPDATE ? "u" : "d", "k",
                                (json_int_t)(op == SQLITE_DELETE ? k1 : k2));
        if (row && op == SQLITE_UPDATE && k1 != k2)
                json_object_set_new(row, "w", json_integer(k1));
        if (row && op != SQLITE_DELETE) {
                json_t *vals = json_array();
                int n = sqlite3_preupdate_count(db);
                for (int i = 0; vals && i < n; i++) {
                        sqlite3_value *v = NULL;
                        json_t *jv = sqlite3_preupdate_new(db, i, &v) == SQLITE_OK && v
                                         ? value_json(v)
                                         : NULL;
                        if (!jv || json_array_append_new(vals, jv)) {
                                json_decref(vals);
                                vals = NULL;
                        }
                }
                if (!vals || json_object_set_new(row, "v", vals)) {
                        json_decref(row);
                        row = NULL;
                }
        }
        if (!row || json_array_append_new(r->rows, row))
                r->broken = true;
}

static int on_commit(void *arg)
{
        srv_replog *r = arg;
        int fail = 0;
        if (r->broken) {
                r->code = loom_err_set(&r->err, LOOM_ENOMEM, "replicate",
                                       "a change could not be captured");
                fail = 1;
        } else if (json_array_size(r->rows)) {
                char *text = json_dumps(r->rows, JSON_COMPACT | JSON_REAL_PRECISION(17));
                if (!text) {
                        r->code = loom_err_set(&r->err, LOOM_ENOMEM, "replicate", "out of memory");
                        fail = 1;
                } else {
                        r->code = r->fn(r->arg, text, strlen(text), &r->err);
                        fail = r->code != 0;
                        free(text);
                }
        }
        json_array_clear(r->rows);
        r->broken = false;
        return fail; /* nonzero turns the COMMIT into a ROLLBACK */
}

static void on_rollback(void *arg)
{
        srv_replog *r = arg;
        json_array_clear(r->rows);
        r->broken = false;
}

int srv_replog_attach(srv_replog **out, sqlite3 *db,
                      int (*fn)(void *arg, const void *entry, size_t n, loom_err *e), void *arg,
                      loom_err *e)
{
        srv_replog *r = calloc(1, sizeof *r);
        if (!r || !(r->rows = json_array())) {
                free(r);
                return loom_err_set(e, LOOM_ENOMEM, "replicate", "out of memory");
        }
        r->db = db;
        r->fn = fn;
        r->arg = arg;
        sqlite3_preupdate_hook(db, on_preupdate, r);
        sqlite3_commit_hook(db, on_commit, r);
        sqlite3_rollback_hook(db, on_rollback, r);
        *out = r;
        return 0;
}

void srv_replog_detach(srv_replog *r)
{
        if (!r)
                return;
        sqlite3_preupdate_hook(r->db, NULL, NULL);
        sqlite3_commit_hook(r->db, NULL, NULL);
        sqlite3_rollback_hook(r->db, NULL, NULL);
        json_decref(r->rows);
        free(r);
}

const loom_err *srv_replog_error(const srv_replog *r, int *code)
{
        *code = r->code ? r->code : LOOM_EIO;
        return &r->err;
}

/* ---- replay on a follower ------------------------------------------------------------------ */

/* The table's columns in order, and which one (if any) is the rowid's alias (INTEGER PRIMARY
 * KEY): a pre-update hook reports NULL there on insert, the rowid says it. */
typedef struct {
        char **name;
        int n, ipk;
} cols;

static void cols_free(cols *c)
{
        for (int i = 0; i < c->n; i++)
                free(c->name[i]);
        free(c->name);
}

static int table_cols(sqlite3 *db, const char *table, cols *c, loom_err *e)
{
        memset(c, 0, sizeof *c);
        c->ipk = -1;
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(db, "SELECT name, type, pk FROM pragma_table_info(?)", -1, &q,
                               NULL) != SQLITE_OK)
                return loom_err_set(e, LOOM_EIO, "store", "%s", sqlite3_errmsg(db));
        sqlite3_bind_text(q, 1, table, -1, SQLITE_STATIC);
        int pks = 0, rc = 0;
        while (!rc && sqlite3_step(q) == SQLITE_ROW) {
                char **grown = realloc(c->name, (size_t)(c->n + 1) * sizeof *grown);
                char *nm = strdup((const char *)sqlite3_column_text(q, 0));
                if (!grown || !nm) {
                        free(nm);
                        if (grown)
                                c->name = grown;
                        rc = loom_err_set(e, LOOM_ENOMEM, "replicate", "out of memory");
                        break;
                }
                c->name = grown;
                c->name[c->n] = nm;
                if (sqlite3_column_int(q, 2) > 0) {
                        pks++;
                        if (!sqlite3_stricmp((const char *)sqlite3_column_text(q, 1), "INTEGER"))
                                c->ipk = c->n;
                }
                c->n++;
        }
        sqlite3_finalize(q);
        if (pks != 1)
                c->ipk = -1;
        if (!rc && c->n == 0)
                rc = loom_err_set(e, LOOM_ECORRUPT, "replicate",
                                  "entry names table '%s', which this store does not have", table);
        if (rc)
                cols_free(c);
        return rc;
}

static int bind_json(sqlite3_stmt *q, int i, json_t *v)
{
        if (json_is_integer(v))
                return sqlite3_bind_int64(q, i, json_integer_value(v));
        if (json_is_real(v))
                return sqlite3_bind_double(q, i, json_real_value(v));
        if (json_is_string(v))
                return sqlite3_bind_text(q, i, json_string_value(v), (int)json_string_length(v),
                                         SQLITE_TRANSIENT);
        if (json_is_null(v))
                return sqlite3_bind_null(q, i);
        const char *b = json_string_value(json_object_get(v, "b"));
        if (!b)
                return SQLITE_MISMATCH;
        size_t len = strlen(b), n = BASE64_DECODE_LENGTH(len);
        uint8_t *p = malloc(n ? n : 1);
        struct base64_decode_ctx ctx;
        base64_decode_init(&ctx);
        if (!p || !base64_decode_update(&ctx, &n, p, len, b) || !base64_decode_final(&ctx)) {
                free(p);
                return SQLITE_MISMATCH;
        }
        return sqlite3_bind_blob(q, i, p, (int)n, free);
}

static int run_sql(sqlite3 *db, const char *sql, json_t *vals, int skip, sqlite3_int64 rowid,
                   loom_err *e)
{
        sqlite3_stmt *q = NULL;
        int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
        int at = 1;
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(q, at++, rowid);
        for (size_t i = 0; rc == SQLITE_OK && vals && i < json_array_size(vals); i++)
                if ((int)i != skip)
                        rc = bind_json(q, at++, json_array_get(vals, i));
        if (rc == SQLITE_OK)
                rc = sqlite3_step(q) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        int out = rc == SQLITE_OK ? 0
                                  : loom_err_set(e, LOOM_ECORRUPT, "replicate", "%s: %s", sql,
                                                 sqlite3_errmsg(db));
        sqlite3_finalize(q);
        return out;
}

static int apply_row(sqlite3 *db, json_t *row, loom_err *e)
{
        const char *t = json_string_value(json_object_get(row, "t"));
        const char *o = json_string_value(json_object_get(row, "o"));
        json_t *k = json_object_get(row, "k"), *vals = json_object_get(row, "v");
        if (!t || !o || !json_is_integer(k) || strspn(t, "abcdefghijklmnopqrstuvwxyz_0123456789")
                                                     != strlen(t))
                return loom_err_set(e, LOOM_ECORRUPT, "replicate", "malformed row in an entry");
        char sql[2048];
        if (!strcmp(o, "d") || json_is_integer(json_object_get(row, "w"))) {
                json_int_t gone = !strcmp(o, "d") ? json_integer_value(k)
                                                   : json_integer_value(json_object_get(row, "w"));
                snprintf(sql, sizeof sql, "DELETE FROM %s WHERE rowid=?", t);
                int rc = run_sql(db, sql, NULL, -1, gone, e);
                if (rc || !strcmp(o, "d"))
                        return rc;
        }
        cols c;
        int rc = table_cols(db, t, &c, e);
        if (rc)
                return rc;
        if (!json_is_array(vals) || (int)json_array_size(vals) != c.n) {
                cols_free(&c);
                return loom_err_set(e, LOOM_ECORRUPT, "replicate",
                                    "an entry has %zu values for table %s of %d columns",
                                    json_array_size(vals), t, c.n);
        }
        size_t at = (size_t)snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO %s(rowid", t);
        for (int i = 0; i < c.n && at < sizeof sql; i++)
                if (i != c.ipk)
                        at += (size_t)snprintf(sql + at, sizeof sql - at, ",%s", c.name[i]);
        if (at < sizeof sql)
                at += (size_t)snprintf(sql + at, sizeof sql - at, ") VALUES(?");
        for (int i = 0; i < c.n && at < sizeof sql; i++)
                if (i != c.ipk)
                        at += (size_t)snprintf(sql + at, sizeof sql - at, ",?");
        if (at < sizeof sql)
                snprintf(sql + at, sizeof sql - at, ")");
        rc = at < sizeof sql ? run_sql(db, sql, vals, c.ipk, json_integer_value(k), e)
                             : loom_err_set(e, LOOM_ECORRUPT, "replicate", "table %s too wide", t);
        cols_free(&c);
        return rc;
}

int srv_replog_apply(sqlite3 *db, const void *entry, size_t n, loom_err *e)
{
        json_error_t je;
        json_t *rows = json_loadb(entry, n, 0, &je);
        if (!json_is_array(rows)) {
                json_decref(rows);
                return loom_err_set(e, LOOM_ECORRUPT, "replicate", "an entry that is not a JSON array: %s",
                                    je.text);
        }
        int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK
                     ? 0
                     : loom_err_set(e, LOOM_EIO, "store", "%s", sqlite3_errmsg(db));
        for (size_t i = 0; !rc && i < json_array_size(rows); i++)
                rc = apply_row(db, json_array_get(rows, i), e);
        if (!rc && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
                rc = loom_err_set(e, LOOM_EIO, "store", "%s", sqlite3_errmsg(db));
        if (rc)
                sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        json_decref(rows);
        return rc;
}

/* ---- the follower's store (loom/server.h) ------------------------------------------------- */

struct loom_store_follower {
        srv_store *st;
        char *data_dir;
};

/* data_dir's store emptied, then written from image (NULL: none), then opened into *st. */
static int materialise(const char *data_dir, const void *image, size_t n, srv_store **st,
                       loom_err *e)
{
        int rc = srv_private_dir(data_dir, e);
        if (rc)
                return rc;
        /* The replica's store is a materialisation of the replicated log, rebuilt from its
         * first entry: what a local file held (perhaps commits a deposed leader made after its
         * last append) is not trusted. */
        static const char *const files[] = {"loom.db", "loom.db-wal", "loom.db-shm"};
        for (int i = 0; i < 3; i++) {
                char p[4200];
                snprintf(p, sizeof p, "%s/%s", data_dir, files[i]);
                if (unlink(p) != 0 && errno != ENOENT)
                        return loom_err_set(e, LOOM_EIO, "data_dir", "%s: %s", p, strerror(errno));
        }
        if (image) { /* the snapshot, as the leader's store was at its seq */
                char p[4200];
                snprintf(p, sizeof p, "%s/loom.db", data_dir);
                FILE *fp = (rc = srv_private_file(p, e)) ? NULL : fopen(p, "wb");
                if (!rc && (!fp || fwrite(image, 1, n, fp) != n || fflush(fp) || fsync(fileno(fp))))
                        rc = loom_err_set(e, LOOM_EIO, "data_dir", "%s: %s", p, strerror(errno));
                if (fp)
                        fclose(fp);
                if (rc)
                        return rc;
        }
        return srv_store_open(st, data_dir, false, e);
}

int loom_store_follower_open(loom_store_follower **out, const char *data_dir, const void *image,
                             size_t n, loom_err *e)
{
        *out = NULL;
        loom_store_follower *f = calloc(1, sizeof *f);
        if (!f || !(f->data_dir = strdup(data_dir))) {
                free(f);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        int rc = materialise(data_dir, image, n, &f->st, e);
        if (rc) {
                free(f->data_dir);
                free(f);
                return rc;
        }
        *out = f;
        return 0;
}

/* A follower that fell behind a compaction starts again from the snapshot that covers it. */
int loom_store_follower_reset(loom_store_follower *f, const void *image, size_t n, loom_err *e)
{
        srv_store_close(f->st);
        f->st = NULL;
        return materialise(f->data_dir, image, n, &f->st, e);
}

int loom_store_follower_apply(loom_store_follower *f, const void *entry, size_t n, loom_err *e)
{
        if (!f->st)
                return loom_err_set(e, LOOM_ESTATE, "store", "no store: its reset failed");
        return srv_replog_apply(srv_store_db(f->st), entry, n, e);
}

void loom_store_follower_close(loom_store_follower *f)
{
        if (!f)
                return;
        srv_store_close(f->st);
        free(f->data_dir);
        free(f);
}
