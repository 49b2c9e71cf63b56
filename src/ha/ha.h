/*
 * ha.h - loomd's log replicated in etcd, fenced by the leader's election key (docs/ha.md).
 *
 * Keys under prefix P: P"election" (etcd's election; a candidate key P"election/<lease>"),
 * P"log/<seq>" with seq as 20 zero-padded decimal digits (1, 2, ...). A loom_ha is used by one
 * thread at a time; a watcher uses its own loom_ha.
 */
#ifndef LOOM_HA_HA_H
#define LOOM_HA_HA_H

#include <stddef.h>
#include <stdint.h>

#include "loom/common.h"

/* loom_ha_append: this replica no longer leads (its lease expired, someone else may write). */
#define LOOM_HA_DEPOSED (-100)

typedef struct loom_ha loom_ha;

/* endpoints: comma-separated etcd URLs; prefix e.g. "loom/c1/"; me: this replica's URL (the
 * election value); ttl_s: the leadership lease. */
int loom_ha_open(loom_ha **out, const char *endpoints, const char *prefix, const char *me,
                 int ttl_s, loom_err *e);
void loom_ha_close(loom_ha *h);

/* Grants the leadership lease now (*lease: its id, for a keepalive on another client while
 * loom_ha_campaign blocks). */
int loom_ha_grant(loom_ha *h, int64_t *lease, loom_err *e);
/* Grants a lease unless loom_ha_grant did, blocks until this replica leads, then finds the
 * log's end. */
int loom_ha_campaign(loom_ha *h, loom_err *e);
/* The seq the next append takes (after a campaign: the log's end + 1). */
uint64_t loom_ha_next(const loom_ha *h);
/* The latest snapshot's seq (0: none), as of the last campaign or snapshot put. */
uint64_t loom_ha_snapshot_seq(const loom_ha *h);
/* Renews the lease (call every ttl/3); LOOM_HA_DEPOSED when it already expired. */
int loom_ha_keepalive(loom_ha *h, loom_err *e);
/* Appends one entry as the next seq (*seq), only while this replica's leader key exists:
 * LOOM_HA_DEPOSED otherwise (then campaign again before appending). */
int loom_ha_append(loom_ha *h, const void *entry, size_t n, uint64_t *seq, loom_err *e);
/* Resigns leadership and revokes the lease. */
int loom_ha_resign(loom_ha *h, loom_err *e);
/* The leader's URL (caller frees); LOOM_ENOENT when none. */
int loom_ha_leader(loom_ha *h, char **url, loom_err *e);
/* Every candidate's URL (the values under the election), the leader's first, comma-separated;
 * *urls is malloc'd. */
int loom_ha_candidates(loom_ha *h, char **urls, loom_err *e);

/* An entry of the log; return nonzero to stop. */
typedef int (*loom_ha_fn)(void *arg, uint64_t seq, const char *entry, size_t n);
/* Every entry with seq >= from, in order; *rev: the store revision of that read. */
int loom_ha_read_from(loom_ha *h, uint64_t from, loom_ha_fn fn, void *arg, int64_t *rev,
                      loom_err *e);
/* read_from(from), then the entries appended after, each once and in order, until fn returns
 * nonzero (0) or timeout_ms passes (LOOM_ETIMEDOUT); resumes on another endpoint when a
 * member dies. */
int loom_ha_watch(loom_ha *h, uint64_t from, loom_ha_fn fn, void *arg, long timeout_ms,
                  loom_err *e);

/* Snapshots bound the log (docs/ha.md, "Compaction"): the leader writes the state at seq (its
 * store's image) fenced like an append, in chunks under P"snap/<seq>/<i>" with the index
 * P"snapshot/<seq>" last; then deletes the log up to seq and older snapshots, and compacts
 * etcd's history. */
int loom_ha_snapshot_put(loom_ha *h, uint64_t seq, const void *image, size_t n, loom_err *e);
/* The latest snapshot (*image: caller frees), or LOOM_ENOENT when there is none. */
int loom_ha_snapshot_get(loom_ha *h, uint64_t *seq, void **image, size_t *n, loom_err *e);

#endif
