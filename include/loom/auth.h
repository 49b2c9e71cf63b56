/*
 * auth.h - who may act on loomd (docs/security.md).
 *
 * Three roles. An `admin` token may do everything. A `tenant` token submits jobs and sees and
 * acts on its tenant's jobs only; another tenant's job answers 404, exactly as a job that does
 * not exist. A `worker` token is issued with each job at submit: it may read that job, attach
 * to it, acquire its phases and renew, report and release its leases, and nothing else.
 *
 * Admin and tenant tokens live in DATA_DIR/auth.db (SQLite), stored as their SHA-256 only: the
 * token text is shown once, at creation. Worker tokens and each job's weight-sync key are not
 * stored at all: they are HMAC-SHA-256 of the job id under a 32-byte secret kept in loomd's
 * store (loom.db), so a fresh store issues fresh ones and rotating the secret revokes them all.
 * Hashing and HMAC are nettle's (GnuTLS's crypto library); randomness is getrandom(2).
 *
 *     char tok[LOOM_TOKEN_MAX];
 *     int64_t id;
 *     loom_token_create("/var/lib/loom", "team-a", LOOM_ROLE_TENANT, 0, tok, &id, &err);
 */
#ifndef LOOM_AUTH_H
#define LOOM_AUTH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/common.h"

typedef enum loom_role {
        LOOM_ROLE_NONE = 0, /* no (or no valid) credential */
        LOOM_ROLE_ADMIN,
        LOOM_ROLE_TENANT,
        LOOM_ROLE_WORKER,
} loom_role;

#define LOOM_TOKEN_MAX 96  /* token text with its NUL */
#define LOOM_TENANT_MAX 32 /* tenant name with its NUL: [A-Za-z0-9._-], 1..31 characters */

const char *loom_role_name(loom_role r);
/* "admin" or "tenant" (worker tokens are issued per job, not created): 0 or LOOM_EINVAL. */
int loom_role_parse(const char *s, loom_role *out);
/* 0 when name is a valid tenant name, else LOOM_EINVAL with e naming "tenant". */
int loom_tenant_check(const char *name, loom_err *e);

typedef struct loom_token_info {
        int64_t id;
        char tenant[LOOM_TENANT_MAX];
        loom_role role;
        int64_t created_s; /* unix seconds */
        int64_t expires_s; /* unix seconds, 0 = never */
        bool revoked;
} loom_token_info;

/*
 * Create an admin or tenant token in data_dir/auth.db (created, mode 0600, if missing).
 * expires_s: unix seconds after which it is refused, 0 for never. out gets the token text,
 * which is not kept anywhere; *id (if not NULL) its id for list/revoke.
 */
int loom_token_create(const char *data_dir, const char *tenant, loom_role role, int64_t expires_s,
                      char out[LOOM_TOKEN_MAX], int64_t *id, loom_err *e);
/* Every token, ascending id; *out is malloc'd (free it), *n its length. */
int loom_token_list(const char *data_dir, loom_token_info **out, int *n, loom_err *e);
/* The table `loomd token list` prints of t[0..n): a header, then one line per token with its
 * state ("active", "expired" or "revoked") at now (unix seconds). tokenlist.c */
void loom_token_print(FILE *f, const loom_token_info *t, int n, int64_t now);
/* Refuse token id from now on (a running loomd checks every request). LOOM_ENOENT if none. */
int loom_token_revoke(const char *data_dir, int64_t id, loom_err *e);
/* Tokens shared by replicated loomds (docs/ha.md): every row of data_dir/auth.db as a key (the
 * token's SHA-256 in hex; never the token) and a canonical JSON value; free with
 * loom_token_shared_free. */
int loom_token_shared(const char *data_dir, char ***keys, char ***vals, size_t *n, loom_err *e);
void loom_token_shared_free(char **keys, char **vals, size_t n);
/* Merge a shared row into data_dir/auth.db: a token not there is added; a revocation wins over
 * none and the earlier over the later, so replicas converge whatever the order. */
int loom_token_merge(const char *data_dir, const char *key, const char *val, size_t n,
                     loom_err *e);
/* Replace the secret worker tokens and sync keys derive from (stored in data_dir/loom.db).
 * Every job's worker token and sync key change; a running loomd keeps the old secret until it
 * restarts. replicate NULL: the store alone; else each commit is first handed to
 * replicate(arg, ...) as a replica's leader hands it (loom_replica_append, docs/ha.md), and
 * one it refuses changes nothing. */
int loom_auth_rotate_secret(const char *data_dir,
                            int (*replicate)(void *arg, const void *entry, size_t n, loom_err *e),
                            void *arg, loom_err *e);

#endif
