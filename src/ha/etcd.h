/*
 * etcd.h - a small client for etcd's v3 HTTP/JSON gateway (internal to src/ha; docs/ha.md).
 *
 * An etcd_client holds a list of member endpoints ("http://host:port"). Every call tries the
 * endpoint that answered last, then the others, for up to the client's retry window (members
 * may be electing); when all fail, loom_err says "endpoint <url>: <why>" for the last one tried.
 * Keys and values are bytes (base64 on the wire). Functions return 0 or a negative LOOM_E* code.
 */
#ifndef LOOM_HA_ETCD_H
#define LOOM_HA_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "loom/common.h"

typedef struct etcd_client etcd_client;

/* endpoints: comma-separated URLs, at least one. retry_ms: how long a call keeps trying the
 * endpoints round-robin when none answers (0: 5000). */
int etcd_open(etcd_client **out, const char *endpoints, int retry_ms, loom_err *e);
void etcd_close(etcd_client *c);
/* The endpoint that answered last (for messages). */
const char *etcd_endpoint(const etcd_client *c);

/* POST path with body req (stolen, may be NULL for {}); *resp is the parsed JSON answer (caller
 * decrefs). timeout_ms 0: none (campaign blocks until it wins). */
int etcd_call(etcd_client *c, const char *path, json_t *req, json_t **resp, long timeout_ms,
              loom_err *e);

/* The monotonic clock in ms, and a sleep of ms (the whole of src/ha's timing). */
int64_t etcd_now_ms(void);
void etcd_sleep_ms(long ms);

/* base64 helpers: a new string / a new buffer (NUL-terminated too) with its length. */
char *etcd_b64(const void *p, size_t n);
int etcd_unb64(const char *s, char **out, size_t *n);
/* An int64 field that the gateway writes as a string or a number (absent: 0). */
int64_t etcd_int(const json_t *o, const char *field);

int etcd_put(etcd_client *c, const char *key, const void *val, size_t n, int64_t lease,
             int64_t *rev, loom_err *e);
/* Keys in [key, range_end) (range_end NULL: key alone); limit 0: all; descend: newest key
 * first. *kvs: the "kvs" array (a new reference, possibly empty); *rev: the store revision. */
int etcd_range(etcd_client *c, const char *key, const char *range_end, int64_t limit,
               int descend, json_t **kvs, int64_t *rev, loom_err *e);
/* The key just after every key starting with prefix (a range_end for a prefix). */
char *etcd_prefix_end(const char *prefix);
/* Fenced put: puts key=val only if fence_key's create_revision is fence_rev and key does not
 * exist. Returns 0 and *ok 1 when written (rev: its revision); 0 and *ok 0 when a compare
 * failed, with *fence_now the fence key's current create_revision (0: gone) and *existing the
 * key's current value if any (caller frees). */
int etcd_txn_put_if(etcd_client *c, const char *fence_key, int64_t fence_rev, const char *key,
                    const void *val, size_t n, int *ok, int64_t *rev, int64_t *fence_now,
                    char **existing, size_t *existing_n, loom_err *e);
/* Compare-and-swap: puts key=val only if the key's mod_revision is still mod_rev (0: only if the
 * key does not exist). *ok: 1 when written, 0 when another writer came first. */
int etcd_put_cas(etcd_client *c, const char *key, int64_t mod_rev, const void *val, size_t n,
                 int *ok, loom_err *e);
int etcd_delete_range(etcd_client *c, const char *key, const char *range_end, loom_err *e);
int etcd_compact(etcd_client *c, int64_t rev, loom_err *e);

int etcd_lease_grant(etcd_client *c, int ttl_s, int64_t *id, loom_err *e);
/* *ttl: the TTL left after the renewal; LOOM_ENOENT when the lease already expired. */
int etcd_lease_keepalive(etcd_client *c, int64_t id, int64_t *ttl, loom_err *e);
int etcd_lease_revoke(etcd_client *c, int64_t id, loom_err *e);

/* Blocks until this candidate leads election `name`; *key (caller frees) and *rev identify the
 * leadership (the fence). */
int etcd_campaign(etcd_client *c, const char *name, const char *value, int64_t lease,
                  char **key, int64_t *rev, loom_err *e);
/* The current leader's value (caller frees); LOOM_ENOENT when none. */
int etcd_leader(etcd_client *c, const char *name, char **value, loom_err *e);
int etcd_resign(etcd_client *c, const char *name, const char *key, int64_t rev, int64_t lease,
                loom_err *e);

/* One event of a watch: a put (deleted 0) or a delete of key. Return nonzero to stop. */
typedef int (*etcd_watch_fn)(void *arg, const char *key, const char *val, size_t n,
                             int64_t mod_rev, int deleted);
/* Streams events on [key, range_end) from revision start_rev until fn returns nonzero (0), the
 * stream breaks (LOOM_EIO; *last_rev: the last revision delivered, to resume after) or
 * timeout_ms passes (LOOM_ETIMEDOUT; 0: none). One endpoint per call; resume on another. */
int etcd_watch(etcd_client *c, const char *key, const char *range_end, int64_t start_rev,
               etcd_watch_fn fn, void *arg, long timeout_ms, int64_t *last_rev, loom_err *e);

#endif
