/*
 * auth.c - who may call loomd, and on which jobs (docs/security.md).
 *
 * Two steps. On the HTTP thread, when a request's headers arrive, its bearer token becomes a
 * principal (role, tenant, and for a worker token its job) or the request is answered 401;
 * once routed, a role that may never make that kind of request is answered 403. On the
 * scheduler thread, which owns the job table, a request naming a job or a lease that is not
 * the principal's is answered 404 with the very reply an unknown id gets, so one tenant learns
 * nothing about another's job ids.
 *
 * Admin and tenant tokens: "loom_t_" and 64 hex digits (32 random bytes), kept in
 * DATA_DIR/auth.db as SHA-256 only, looked up on every request, so a revocation or an expiry
 * takes effect at once. Worker tokens: "loom_w_<job>_" and the hex HMAC-SHA-256 of the job id
 * under the store's secret; a job's sync key is another HMAC of the same id. Nothing about them
 * is stored: the secret lives in loom.db's meta table, so a new store gets new ones.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <nettle/base16.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>

#include "srv.h"

#define SECRET_LEN 32
#define TOKEN_RAND 32

struct srv_auth {
        bool tokens; /* false: every caller is admin (LOOM_AUTH_NONE, or AUTO without tokens) */
        uint8_t secret[SECRET_LEN];
        sqlite3 *db; /* auth.db, used by the HTTP thread only */
        sqlite3_stmt *lookup;
        pthread_mutex_t mu;
        char *tls_cert, *tls_key; /* PEM texts, kept while libmicrohttpd runs */
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS tokens("
    " id INTEGER PRIMARY KEY, hash BLOB UNIQUE NOT NULL, tenant TEXT NOT NULL,"
    " role TEXT NOT NULL, created_s INTEGER NOT NULL, expires_s INTEGER NOT NULL,"
    " revoked_s INTEGER NOT NULL DEFAULT 0);";

const char *loom_role_name(loom_role r)
{
        static const char *const n[] = {"none", "admin", "tenant", "worker"};
        return r >= LOOM_ROLE_NONE && r <= LOOM_ROLE_WORKER ? n[r] : "?";
}

int loom_role_parse(const char *s, loom_role *out)
{
        if (s && !strcmp(s, "admin"))
                *out = LOOM_ROLE_ADMIN;
        else if (s && !strcmp(s, "tenant"))
                *out = LOOM_ROLE_TENANT;
        else
                return LOOM_EINVAL;
        return 0;
}

int loom_tenant_check(const char *name, loom_err *e)
{
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n >= LOOM_TENANT_MAX)
                return loom_err_set(e, LOOM_EINVAL, "tenant", "must be 1..%d characters",
                                    LOOM_TENANT_MAX - 1);
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
                if (!ok)
                        return loom_err_set(e, LOOM_EINVAL, "tenant",
                                            "'%s': only letters, digits, '.', '_' and '-'", name);
        }
        return 0;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static void hex(const uint8_t *b, size_t n, char *out)
{
        base16_encode_update(out, n, b); /* nettle: lower-case digits */
        out[2 * n] = '\0';
}

/* Exactly 2n hex digits, then the end of s. */
static int unhex(const char *s, uint8_t *out, size_t n)
{
        return loom_hex_decode(s, out, n) == 2 * n && !s[2 * n] ? 0 : LOOM_EINVAL;
}

static int random_bytes(uint8_t *b, size_t n, loom_err *e)
{
        size_t got = 0;
        while (got < n) {
                ssize_t r = getrandom(b + got, n - got, 0);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return loom_err_set(e, LOOM_EIO, "", "getrandom: %s", strerror(errno));
                got += (size_t)r;
        }
        return 0;
}

static void sha256(const char *text, uint8_t out[SHA256_DIGEST_SIZE])
{
        struct sha256_ctx c;
        sha256_init(&c);
        sha256_update(&c, strlen(text), (const uint8_t *)text);
        sha256_digest(&c, SHA256_DIGEST_SIZE, out);
}

/* HMAC-SHA-256 under the secret of a label and a job id: worker tokens and sync keys. */
static void derive(const uint8_t *secret, const char *label, uint32_t job, uint8_t out[32])
{
        struct hmac_sha256_ctx c;
        uint8_t id[4] = {(uint8_t)(job >> 24), (uint8_t)(job >> 16), (uint8_t)(job >> 8),
                         (uint8_t)job};
        hmac_sha256_set_key(&c, SECRET_LEN, secret);
        hmac_sha256_update(&c, strlen(label) + 1, (const uint8_t *)label);
        hmac_sha256_update(&c, sizeof id, id);
        hmac_sha256_digest(&c, SHA256_DIGEST_SIZE, out);
}

static int64_t now_s(void)
{
        return (int64_t)time(NULL);
}

/* ---- auth.db ------------------------------------------------------------------------------- */

static int db_open(const char *dir, sqlite3 **out, loom_err *e)
{
        *out = NULL;
        char path[4200];
        if (!dir || !*dir || strlen(dir) >= 4000)
                return loom_err_set(e, LOOM_EINVAL, "data_dir", "a data directory is required");
        int prc = srv_private_dir(dir, e);
        if (prc)
                return prc;
        snprintf(path, sizeof path, "%s/auth.db", dir);
        /* Owner-only before SQLite opens it: the hashes are not secrets, but who holds which
         * role is nobody else's business. */
        if ((prc = srv_private_file(path, e)))
                return prc;
        sqlite3 *db = NULL;
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
                int rc = loom_err_set(e, LOOM_EIO, "data_dir", "%s: %s", path,
                                      db ? sqlite3_errmsg(db) : "cannot open");
                sqlite3_close(db);
                return rc;
        }
        sqlite3_busy_timeout(db, 5000);
        char *msg = NULL;
        if (sqlite3_exec(db, "PRAGMA journal_mode=WAL;", NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(db, schema, NULL, NULL, &msg) != SQLITE_OK) {
                int rc = loom_err_set(e, LOOM_EIO, "data_dir", "%s: %s", path,
                                      msg ? msg : sqlite3_errmsg(db));
                sqlite3_free(msg);
                sqlite3_close(db);
                return rc;
        }
        *out = db;
        return 0;
}

int loom_token_create(const char *data_dir, const char *tenant, loom_role role, int64_t expires_s,
                      char out[LOOM_TOKEN_MAX], int64_t *id, loom_err *e)
{
        loom_err_clear(e);
        int rc = loom_tenant_check(tenant, e);
        if (rc)
                return rc;
        if (role != LOOM_ROLE_ADMIN && role != LOOM_ROLE_TENANT)
                return loom_err_set(e, LOOM_EINVAL, "role", "must be admin or tenant");
        if (expires_s < 0)
                return loom_err_set(e, LOOM_EINVAL, "expires", "must be >= 0");
        uint8_t raw[TOKEN_RAND];
        char text[LOOM_TOKEN_MAX];
        rc = random_bytes(raw, sizeof raw, e);
        if (rc)
                return rc;
        memcpy(text, "loom_t_", 7);
        hex(raw, sizeof raw, text + 7);
        uint8_t h[SHA256_DIGEST_SIZE];
        sha256(text, h);
        sqlite3 *db;
        if ((rc = db_open(data_dir, &db, e)))
                return rc;
        sqlite3_stmt *q = NULL;
        rc = sqlite3_prepare_v2(db,
                                "INSERT INTO tokens(hash,tenant,role,created_s,expires_s) "
                                "VALUES(?,?,?,?,?)",
                                -1, &q, NULL);
        if (rc == SQLITE_OK) {
                sqlite3_bind_blob(q, 1, h, sizeof h, SQLITE_STATIC);
                sqlite3_bind_text(q, 2, tenant, -1, SQLITE_STATIC);
                sqlite3_bind_text(q, 3, loom_role_name(role), -1, SQLITE_STATIC);
                sqlite3_bind_int64(q, 4, now_s());
                sqlite3_bind_int64(q, 5, expires_s);
                rc = sqlite3_step(q);
        }
        if (rc != SQLITE_DONE)
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(db));
        else
                rc = 0;
        if (!rc && id)
                *id = sqlite3_last_insert_rowid(db);
        sqlite3_finalize(q);
        sqlite3_close(db);
        if (!rc)
                memcpy(out, text, strlen(text) + 1);
        return rc;
}

int loom_token_list(const char *data_dir, loom_token_info **out, int *n, loom_err *e)
{
        loom_err_clear(e);
        *out = NULL;
        *n = 0;
        sqlite3 *db;
        int rc = db_open(data_dir, &db, e);
        if (rc)
                return rc;
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(db,
                               "SELECT id,tenant,role,created_s,expires_s,revoked_s FROM tokens "
                               "ORDER BY id",
                               -1, &q, NULL) != SQLITE_OK) {
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(db));
                sqlite3_close(db);
                return rc;
        }
        size_t cap = 0;
        int step;
        while ((step = sqlite3_step(q)) == SQLITE_ROW) {
                if (loom_reserve(out, &cap, (size_t)*n + 1, sizeof **out, 16)) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                loom_token_info *t = &(*out)[(*n)++];
                memset(t, 0, sizeof *t);
                t->id = sqlite3_column_int64(q, 0);
                snprintf(t->tenant, sizeof t->tenant, "%s",
                         (const char *)sqlite3_column_text(q, 1));
                if (loom_role_parse((const char *)sqlite3_column_text(q, 2), &t->role))
                        t->role = LOOM_ROLE_NONE;
                t->created_s = sqlite3_column_int64(q, 3);
                t->expires_s = sqlite3_column_int64(q, 4);
                t->revoked = sqlite3_column_int64(q, 5) != 0;
        }
        if (!rc && step != SQLITE_DONE)
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(db));
        sqlite3_finalize(q);
        sqlite3_close(db);
        if (rc) {
                free(*out);
                *out = NULL;
                *n = 0;
        }
        return rc;
}

int loom_token_revoke(const char *data_dir, int64_t id, loom_err *e)
{
        loom_err_clear(e);
        sqlite3 *db;
        int rc = db_open(data_dir, &db, e);
        if (rc)
                return rc;
        sqlite3_stmt *q = NULL;
        rc = sqlite3_prepare_v2(db, "UPDATE tokens SET revoked_s=? WHERE id=? AND revoked_s=0", -1,
                                &q, NULL);
        if (rc == SQLITE_OK) {
                sqlite3_bind_int64(q, 1, now_s() > 0 ? now_s() : 1);
                sqlite3_bind_int64(q, 2, id);
                rc = sqlite3_step(q);
        }
        if (rc != SQLITE_DONE)
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(db));
        else if (sqlite3_changes(db) == 0)
                rc = loom_err_set(e, LOOM_ENOENT, "id", "no active token %lld", (long long)id);
        else
                rc = 0;
        sqlite3_finalize(q);
        sqlite3_close(db);
        return rc;
}

/* ---- tokens shared between replicas (docs/ha.md) -------------------------------------------- */

/* A row as replicas share it: the key is the token's SHA-256 in hex, the value canonical JSON
 * (sorted keys, compact) so that equal rows are equal strings. */
static char *row_json(const char *tenant, const char *role, int64_t created, int64_t expires,
                      int64_t revoked)
{
        json_t *o = json_pack("{s:s,s:s,s:I,s:I,s:I}", "tenant", tenant, "role", role,
                              "created_s", (json_int_t)created, "expires_s", (json_int_t)expires,
                              "revoked_s", (json_int_t)revoked);
        char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(o);
        return s;
}

int loom_token_shared(const char *data_dir, char ***keys, char ***vals, size_t *n, loom_err *e)
{
        *keys = *vals = NULL;
        *n = 0;
        sqlite3 *db;
        int rc = db_open(data_dir, &db, e);
        if (rc)
                return rc;
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(db,
                               "SELECT hash,tenant,role,created_s,expires_s,revoked_s FROM tokens "
                               "ORDER BY id",
                               -1, &q, NULL) != SQLITE_OK)
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(db));
        size_t kcap = 0, vcap = 0;
        int step = SQLITE_DONE;
        while (!rc && (step = sqlite3_step(q)) == SQLITE_ROW) {
                if (sqlite3_column_bytes(q, 0) != SHA256_DIGEST_SIZE)
                        continue;
                if (loom_reserve(keys, &kcap, *n + 1, sizeof **keys, 16) ||
                    loom_reserve(vals, &vcap, *n + 1, sizeof **vals, 16)) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                char *k = malloc(2 * SHA256_DIGEST_SIZE + 1);
                char *v = row_json((const char *)sqlite3_column_text(q, 1),
                                   (const char *)sqlite3_column_text(q, 2),
                                   sqlite3_column_int64(q, 3), sqlite3_column_int64(q, 4),
                                   sqlite3_column_int64(q, 5));
                if (!k || !v) {
                        free(k);
                        free(v);
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        break;
                }
                hex(sqlite3_column_blob(q, 0), SHA256_DIGEST_SIZE, k);
                (*keys)[*n] = k;
                (*vals)[(*n)++] = v;
        }
        if (!rc && step != SQLITE_DONE)
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(db));
        sqlite3_finalize(q);
        sqlite3_close(db);
        if (rc) {
                loom_token_shared_free(*keys, *vals, *n);
                *keys = *vals = NULL;
                *n = 0;
        }
        return rc;
}

void loom_token_shared_free(char **keys, char **vals, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(keys[i]);
                free(vals[i]);
        }
        free(keys);
        free(vals);
}

/* A token unknown here is added; a revocation wins over none, the earlier over the later, so
 * every replica ends with the same row whatever order the changes came in. */
int loom_token_merge(const char *data_dir, const char *key, const char *val, size_t n,
                     loom_err *e)
{
        uint8_t h[SHA256_DIGEST_SIZE];
        if (!key || strlen(key) != 2 * SHA256_DIGEST_SIZE || unhex(key, h, sizeof h))
                return loom_err_set(e, LOOM_EINVAL, "tokens", "'%s' is not a token's hash",
                                    key ? key : "");
        json_error_t je;
        json_t *o = json_loadb(val, n, 0, &je);
        const char *tenant = NULL, *role = NULL;
        json_int_t created = 0, expires = 0, revoked = 0;
        loom_role r;
        loom_err e2;
        if (!o || json_unpack(o, "{s:s,s:s,s:I,s:I,s:I}", "tenant", &tenant, "role", &role,
                              "created_s", &created, "expires_s", &expires, "revoked_s",
                              &revoked) ||
            loom_tenant_check(tenant, &e2) || loom_role_parse(role, &r) || created < 0 ||
            expires < 0 || revoked < 0) {
                json_decref(o);
                return loom_err_set(e, LOOM_EINVAL, "tokens", "token %.12s...: not a token row",
                                    key);
        }
        sqlite3 *db = NULL;
        int rc = db_open(data_dir, &db, e);
        sqlite3_stmt *q = NULL;
        if (!rc &&
            sqlite3_prepare_v2(
                db,
                "INSERT INTO tokens(hash,tenant,role,created_s,expires_s,revoked_s) "
                "VALUES(?,?,?,?,?,?) ON CONFLICT(hash) DO UPDATE SET revoked_s=excluded.revoked_s "
                "WHERE excluded.revoked_s<>0 AND "
                "(tokens.revoked_s=0 OR excluded.revoked_s<tokens.revoked_s)",
                -1, &q, NULL) == SQLITE_OK) {
                sqlite3_bind_blob(q, 1, h, sizeof h, SQLITE_STATIC);
                sqlite3_bind_text(q, 2, tenant, -1, SQLITE_STATIC);
                sqlite3_bind_text(q, 3, role, -1, SQLITE_STATIC);
                sqlite3_bind_int64(q, 4, created);
                sqlite3_bind_int64(q, 5, expires);
                sqlite3_bind_int64(q, 6, revoked);
                if (sqlite3_step(q) != SQLITE_DONE)
                        rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(db));
        } else if (!rc) {
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(db));
        }
        sqlite3_finalize(q);
        sqlite3_close(db); /* NULL when db_open failed: a no-op */
        json_decref(o);
        return rc;
}

static int count_tokens(sqlite3 *db, int *n)
{
        sqlite3_stmt *q = NULL;
        int rc =
            sqlite3_prepare_v2(db, "SELECT count(*) FROM tokens WHERE revoked_s=0", -1, &q, NULL);
        if (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
                *n = sqlite3_column_int(q, 0);
        else
                rc = SQLITE_ERROR;
        sqlite3_finalize(q);
        return rc == SQLITE_OK ? 0 : LOOM_EIO;
}

/* ---- the store's secret -------------------------------------------------------------------- */

static int new_secret(srv_store *st, uint8_t secret[SECRET_LEN], loom_err *e)
{
        char text[2 * SECRET_LEN + 1];
        int rc = random_bytes(secret, SECRET_LEN, e);
        if (!rc) {
                hex(secret, SECRET_LEN, text);
                rc = srv_store_meta_set(st, "auth_secret", text, e);
        }
        return rc;
}

static int load_secret(srv_store *st, uint8_t secret[SECRET_LEN], loom_err *e)
{
        char *v = NULL;
        int rc = srv_store_meta_get(st, "auth_secret", &v, e);
        if (!rc && !v)
                rc = new_secret(st, secret, e);
        else if (!rc && (strlen(v) != 2 * SECRET_LEN || unhex(v, secret, SECRET_LEN)))
                rc = loom_err_set(e, LOOM_ECORRUPT, "store", "unreadable auth_secret");
        free(v);
        return rc;
}

/* The key of the job and lease ids the API shows (scope.c), as the secret derives it. */
static void jobid_key_of(const uint8_t secret[SECRET_LEN], uint8_t key[16])
{
        uint8_t mac[32];
        derive(secret, "loom public job ids", 0, mac);
        memcpy(key, mac, 16);
}

/* Before the first rotation, the key of the shown ids is kept in meta.jobid_key: a new secret
 * changes every worker token, not every job's id. */
static int keep_jobid_key(srv_store *st, loom_err *e)
{
        char *kept = NULL;
        int rc = srv_store_meta_get(st, "jobid_key", &kept, e);
        if (!rc && !kept) {
                uint8_t old[SECRET_LEN], key[16];
                char text[2 * 16 + 1];
                rc = load_secret(st, old, e);
                if (!rc) {
                        jobid_key_of(old, key);
                        hex(key, sizeof key, text);
                        rc = srv_store_meta_set(st, "jobid_key", text, e);
                }
        }
        free(kept);
        return rc;
}

int loom_auth_rotate_secret(const char *data_dir,
                            int (*replicate)(void *arg, const void *entry, size_t n, loom_err *e),
                            void *arg, loom_err *e)
{
        loom_err_clear(e);
        srv_store *st = NULL;
        uint8_t secret[SECRET_LEN];
        int rc = srv_store_open(&st, data_dir, false, e);
        if (!rc && replicate)
                rc = srv_store_replicate(st, replicate, arg, e);
        if (!rc)
                rc = keep_jobid_key(st, e);
        if (!rc)
                rc = new_secret(st, secret, e);
        srv_store_close(st);
        return rc;
}

/* ---- the server side ----------------------------------------------------------------------- */

static bool loopback(const char *host)
{
        bool lo = false;
        loom_err e;
        return !srv_listen_loopback(host, 0, &lo, &e) && lo;
}

int srv_auth_check_cfg(const loom_server_cfg *c, loom_err *e)
{
        bool lo = false;
        if (srv_listen_loopback(c->listen_host, c->port, &lo, e)) /* names the address */
                return LOOM_EINVAL;
        if (c->auth == LOOM_AUTH_NONE && !lo)
                return loom_err_set(e, LOOM_EINVAL, "insecure_loopback",
                                    "serving without authentication is refused on %s, which is "
                                    "not a loopback address",
                                    c->listen_host);
        if (!c->tls_cert != !c->tls_key)
                return loom_err_set(e, LOOM_EINVAL, c->tls_cert ? "tls_key" : "tls_cert",
                                    "give both a TLS certificate and its key");
        if (!lo && !c->tls_cert)
                return loom_err_set(e, LOOM_EINVAL, "tls_cert",
                                    "%s is not a loopback address: tokens would cross the network "
                                    "in clear; give a TLS certificate and key",
                                    c->listen_host);
        return 0;
}

/* LOOM_AUTH_AUTO and not a single token: fine on loopback only. */
static int no_tokens(loom_server *s, loom_err *e)
{
        if (!loopback(s->cfg.listen_host))
                return loom_err_set(e, LOOM_EINVAL, "listen",
                                    "no tokens in %s/auth.db: refusing to serve %s without "
                                    "authentication (create one with `loomd token create`)",
                                    s->data_dir, s->cfg.listen_host);
        srv_log(s, "no tokens in %s/auth.db: serving without authentication on loopback",
                s->data_dir);
        return 0;
}

int srv_auth_open(loom_server *s, loom_err *e)
{
        struct srv_auth *a = calloc(1, sizeof *a);
        if (!a)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        pthread_mutex_init(&a->mu, NULL);
        s->auth = a;
        int rc = load_secret(s->store, a->secret, e);
        if (rc || s->cfg.auth == LOOM_AUTH_NONE)
                return rc;
        int n = 0;
        char path[4200];
        snprintf(path, sizeof path, "%s/auth.db", s->data_dir);
        if (s->cfg.auth == LOOM_AUTH_AUTO && access(path, F_OK) != 0 && errno == ENOENT)
                return no_tokens(s, e); /* nobody ran `loomd token create`: leave no file behind */
        rc = db_open(s->data_dir, &a->db, e);
        if (!rc && count_tokens(a->db, &n))
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(a->db));
        if (!rc && sqlite3_prepare_v3(a->db,
                                      "SELECT tenant,role,expires_s,revoked_s FROM tokens "
                                      "WHERE hash=?",
                                      -1, SQLITE_PREPARE_PERSISTENT, &a->lookup, NULL) != SQLITE_OK)
                rc = loom_err_set(e, LOOM_EIO, "auth.db", "%s", sqlite3_errmsg(a->db));
        if (rc)
                return rc;
        a->tokens = s->cfg.auth == LOOM_AUTH_TOKENS || n > 0;
        return a->tokens ? 0 : no_tokens(s, e);
}

int srv_auth_tls(loom_server *s, const char **cert, const char **key, loom_err *e)
{
        struct srv_auth *a = s->auth;
        *cert = *key = NULL;
        if (!s->cfg.tls_cert)
                return 0;
        if (!a->tls_cert && !(a->tls_cert = srv_read_file(s->cfg.tls_cert, "tls_cert", e)))
                return LOOM_EIO;
        if (!a->tls_key && !(a->tls_key = srv_read_file(s->cfg.tls_key, "tls_key", e)))
                return LOOM_EIO;
        *cert = a->tls_cert;
        *key = a->tls_key;
        return 0;
}

void srv_auth_close(loom_server *s)
{
        struct srv_auth *a = s->auth;
        if (!a)
                return;
        if (a->tls_key)
                explicit_bzero(a->tls_key, strlen(a->tls_key));
        free(a->tls_key);
        free(a->tls_cert);
        sqlite3_finalize(a->lookup);
        sqlite3_close(a->db);
        pthread_mutex_destroy(&a->mu);
        free(a);
        s->auth = NULL;
}

static bool reply_401(srv_req *r, const char *msg)
{
        srv_reply_error(r, 401, "Authorization", "%s", msg);
        return false;
}

void srv_auth_worker_text(const uint8_t secret[32], uint32_t job, char out[LOOM_TOKEN_MAX])
{
        uint8_t mac[32];
        char h[2 * 32 + 1];
        derive(secret, "loom worker token", job, mac);
        hex(mac, sizeof mac, h);
        snprintf(out, LOOM_TOKEN_MAX, "loom_w_%u_%s", job, h);
}

/* "loom_w_<job>_<hex>" exactly as srv_auth_worker_text wrote it: the job in decimal without
 * sign, spaces or leading zeros, the MAC in lower-case hex. Any other spelling of the same
 * numbers is refused, so a token has one text, the one loomd issued (and logs or lists can
 * compare tokens as strings). */
static bool worker_token(const uint8_t secret[32], const char *tok, uint32_t *job_out)
{
        const char *p = tok + 7;
        uint64_t job = 0;
        size_t n = 0;
        while (p[n] >= '0' && p[n] <= '9' && n < 11)
                job = job * 10 + (uint64_t)(p[n++] - '0');
        if (n == 0 || p[0] == '0' || p[n] != '_' || job > UINT32_MAX)
                return false;
        char want[LOOM_TOKEN_MAX];
        srv_auth_worker_text(secret, (uint32_t)job, want);
        size_t len = strlen(want);
        /* constant time in the MAC: the length is public, the digits are not */
        if (strlen(tok) != len || !memeql_sec(tok, want, len))
                return false;
        *job_out = (uint32_t)job;
        return true;
}

srv_bearer_kind srv_auth_bearer(const char *h, const uint8_t secret[32], uint32_t *job,
                                const char **tok, const char **why)
{
        *job = 0;
        *tok = NULL;
        *why = "invalid token";
        if (!h) {
                *why = "a bearer token is required (Authorization: Bearer TOKEN)";
                return SRV_BEARER_BAD;
        }
        if (strncasecmp(h, "Bearer ", 7)) {
                *why = "expected 'Authorization: Bearer TOKEN'";
                return SRV_BEARER_BAD;
        }
        const char *t = h + 7;
        while (*t == ' ')
                t++;
        if (strlen(t) >= LOOM_TOKEN_MAX)
                return SRV_BEARER_BAD;
        if (!strncmp(t, "loom_w_", 7))
                return worker_token(secret, t, job) ? SRV_BEARER_WORKER : SRV_BEARER_BAD;
        *tok = t; /* hashed and looked up as it is: another spelling hashes differently */
        return SRV_BEARER_STORED;
}

/* 0 with who filled, or the sentence for the 401. */
static const char *stored_token(struct srv_auth *a, const char *tok, srv_principal *who)
{
        uint8_t h[SHA256_DIGEST_SIZE];
        sha256(tok, h);
        const char *why = "invalid token";
        pthread_mutex_lock(&a->mu);
        sqlite3_stmt *q = a->lookup;
        sqlite3_bind_blob(q, 1, h, sizeof h, SQLITE_STATIC);
        int step = sqlite3_step(q);
        if (step == SQLITE_ROW) {
                int64_t expires = sqlite3_column_int64(q, 2);
                loom_role role;
                if (sqlite3_column_int64(q, 3) != 0)
                        why = "token revoked";
                else if (expires != 0 && now_s() >= expires)
                        why = "token expired";
                else if (loom_role_parse((const char *)sqlite3_column_text(q, 1), &role))
                        why = "token has an unknown role";
                else {
                        why = NULL;
                        who->role = role;
                        snprintf(who->tenant, sizeof who->tenant, "%s",
                                 (const char *)sqlite3_column_text(q, 0));
                }
        } else if (step != SQLITE_DONE) {
                why = "token store unreadable";
        }
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
        pthread_mutex_unlock(&a->mu);
        return why;
}

bool srv_auth_request(loom_server *s, srv_req *r, const char *url)
{
        struct srv_auth *a = s->auth;
        memset(&r->who, 0, sizeof r->who);
        if (!a->tokens) {
                r->who.role = LOOM_ROLE_ADMIN;
                return true;
        }
        if (!strcmp(url, "/healthz") || (s->cfg.public_metrics && !strcmp(url, "/metrics")))
                return true; /* open; a token, if any, is not looked at */
        const char *h =
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        const char *tok, *why;
        uint32_t job;
        switch (srv_auth_bearer(h, a->secret, &job, &tok, &why)) {
        case SRV_BEARER_WORKER:
                r->who.role = LOOM_ROLE_WORKER;
                r->who.job = job;
                return true;
        case SRV_BEARER_STORED:
                why = stored_token(a, tok, &r->who);
                return why ? reply_401(r, why) : true;
        case SRV_BEARER_BAD:
                break;
        }
        return reply_401(r, why);
}

static bool role_may(loom_role role, enum srv_req_kind k, bool public_metrics)
{
        switch (k) {
        case RQ_HEALTH:
                return true;
        case RQ_METRICS:
                return public_metrics || role == LOOM_ROLE_ADMIN;
        case RQ_GROUPS: /* lists every tenant's jobs */
                return role == LOOM_ROLE_ADMIN;
        case RQ_SUBMIT:
        case RQ_LIST_JOBS:
        case RQ_CANCEL:
        case RQ_CLUSTER:
        case RQ_TIMELINE: /* a tenant's shows its own jobs only */
                return role == LOOM_ROLE_ADMIN || role == LOOM_ROLE_TENANT;
        case RQ_GET_JOB:
        case RQ_ACQUIRE:
        case RQ_ATTACH:
        case RQ_PROGRESS:
        case RQ_RELEASE:
        case RQ_HEARTBEAT:
                return role != LOOM_ROLE_NONE;
        case RQ_BAD:
                break;
        }
        return false;
}

void srv_auth_route(loom_server *s, srv_req *r)
{
        if (!s->auth->tokens || r->ready)
                return;
        if (!role_may(r->who.role, r->kind, s->cfg.public_metrics)) {
                r->kind = RQ_BAD;
                if (r->who.role == LOOM_ROLE_NONE)
                        reply_401(r, "a bearer token is required (Authorization: Bearer TOKEN)");
                else
                        srv_reply_error(r, 403, "Authorization", "a %s token may not do this",
                                        loom_role_name(r->who.role));
                return;
        }
        /* Idempotency keys are per tenant: one tenant's key never finds another's job. */
        if (r->kind == RQ_SUBMIT && r->key[0]) {
                char k[sizeof r->key];
                size_t t = strlen(r->who.tenant), n = strlen(r->key);
                if (t + 1 + n < sizeof k) { /* always: the key is < SRV_KEY_MAX characters */
                        memcpy(k, r->who.tenant, t);
                        k[t] = '/';
                        memcpy(k + t + 1, r->key, n + 1);
                        memcpy(r->key, k, sizeof k);
                }
        }
}

static bool owns(const srv_req *r, const srv_job *j)
{
        switch (r->who.role) {
        case LOOM_ROLE_ADMIN:
                return true;
        case LOOM_ROLE_TENANT:
                return !strcmp(j->tenant, r->who.tenant);
        case LOOM_ROLE_WORKER:
                return j->pub == r->who.job; /* worker tokens carry the API's id */
        default:
                return false;
        }
}

bool srv_auth_sees(const srv_req *r, const srv_job *j)
{
        return owns(r, j);
}

bool srv_auth_scope(loom_server *s, srv_req *r)
{
        if (r->who.role == LOOM_ROLE_ADMIN)
                return true;
        uint32_t job = 0;
        bool lease = false;
        switch (r->kind) {
        case RQ_GET_JOB:
        case RQ_CANCEL:
        case RQ_ACQUIRE:
        case RQ_ATTACH:
                job = r->job;
                break;
        case RQ_PROGRESS:
        case RQ_RELEASE:
        case RQ_HEARTBEAT: {
                loom_err e;
                if (!r->lease_read && /* engine.c may have read it already */
                    srv_store_lease_get(s->store, r->lease, &r->lease_job, &r->lease_phase,
                                        r->lease_state, &e))
                        return true; /* the handler answers: no such lease, or the error */
                r->lease_read = true;
                job = r->lease_job;
                lease = true;
                break;
        }
        default:
                return true;
        }
        const srv_job *j = srv_job_get(s, job);
        if (!j || owns(r, j))
                return true; /* an unknown job: the handler's own 404 */
        if (lease)
                srv_reply_error(r, 404, "lease", "no such lease: %lld", (long long)r->lease);
        else
                srv_reply_error(r, 404, "id", "no such job: %u", r->job);
        r->kind = RQ_BAD;
        r->job = 0;
        return false;
}

void srv_auth_submitted(loom_server *s, const srv_req *r, srv_job *j)
{
        snprintf(j->tenant, sizeof j->tenant, "%s", r->who.tenant);
}

/* The worker token and sync key of job `job` (what its processes get), or "" when loomd runs
 * without tokens: the executor passes them in the workers' environment. */
void srv_auth_worker_creds(loom_server *s, uint32_t job, char token[96], char key[65])
{
        token[0] = key[0] = '\0';
        if (!s->auth || !s->auth->tokens)
                return;
        uint8_t mac[32];
        const srv_job *j = srv_job_get(s, job);
        srv_auth_worker_text(s->auth->secret, j ? j->pub : job, token);
        derive(s->auth->secret, "loom sync key", job, mac);
        hex(mac, sizeof mac, key);
}

void srv_auth_creds(loom_server *s, const srv_req *r, const srv_job *j, json_t *o)
{
        if (!o || !owns(r, j))
                return;
        uint8_t mac[32];
        char text[LOOM_TOKEN_MAX], h[2 * 32 + 1];
        srv_auth_worker_text(s->auth->secret, j->pub, text);
        json_object_set_new(o, "worker_token", json_string(text));
        derive(s->auth->secret, "loom sync key", j->id, mac);
        hex(mac, sizeof mac, h);
        json_object_set_new(o, "sync_key", json_string(h));
}

/* The key of the job ids the API shows (scope.c): the one kept when the secret was first
 * rotated, else the secret's; false without tokens (ids are shown as they are). */
bool srv_auth_jobid_key(const loom_server *s, uint8_t key[16])
{
        if (!s->auth || !s->auth->tokens)
                return false;
        char *kept = NULL;
        loom_err e;
        if (srv_store_meta_get(s->store, "jobid_key", &kept, &e) == 0 && kept &&
            unhex(kept, key, 16) == 0) {
                free(kept);
                return true;
        }
        free(kept);
        jobid_key_of(s->auth->secret, key);
        return true;
}
