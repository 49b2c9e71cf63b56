/*
 * ha.h - a loomd replica on etcd (docs/ha.md): follow the replicated log, campaign, lead.
 *
 *     loom_replica *r;
 *     loom_replica_open(&r, "http://e1:2379,http://e2:2379", "c1", "http://me:7480", 3, &err);
 *     loom_replica_follow(r, apply, install, arg, &err);  applies every log entry on a thread and
 *                                                 campaigns on another
 *     while (!loom_replica_leading(r)) ...        (serve redirects: loom_replica_leader)
 *     loom_replica_promote(r, &err);              applied through the log's end, not following
 *     cfg.replicate = loom_replica_append; cfg.replicate_arg = r;   and serve as the leader
 *     ... until loom_replica_deposed(r)           then exit: the store refuses this replica
 *     loom_replica_close(r);                      resigns (the next replica leads at once)
 *
 * Keys under "loom/<name>/": "election" (etcd's election, value: the replica's URL) and
 * "log/<seq>". Leadership is an etcd lease of ttl_s seconds, renewed every ttl_s/3 on its
 * own thread from the moment the replica campaigns; every append is a transaction that
 * compares the leader's key, so a replica whose lease lapsed (paused, partitioned) cannot
 * write whatever its clock says.
 */
#ifndef LOOM_HA_H
#define LOOM_HA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/common.h"

typedef struct loom_replica loom_replica;

/* endpoints: etcd's client URLs, comma-separated ("http://h:2379,..."; "etcd://h:2379,h2:2379"
 * is read as http); name: the replica set (letters, digits, '-', '_', '.'); me: this replica's
 * URL as clients reach it; ttl_s: the leadership lease, 1..60. */
int loom_replica_open(loom_replica **out, const char *endpoints, const char *name,
                      const char *me, int ttl_s, loom_err *e);
/* Before following: the latest snapshot of the replicated store (*image, caller frees; NULL
 * when the log was never compacted); following then starts after it. */
int loom_replica_load(loom_replica *r, void **image, size_t *n, loom_err *e);
/* Starts following (apply(arg, entry, n, e) for each entry from the first, in order, on the
 * follower thread; a nonzero return stops the replica: loom_replica_failed) and campaigning.
 * A follower the leader's compaction left behind (the entries after its last were deleted
 * under a snapshot) starts again from that snapshot: install(arg, image, n, e) on the same
 * thread, then the entries after it. */
int loom_replica_follow(loom_replica *r,
                        int (*apply)(void *arg, const void *entry, size_t n, loom_err *e),
                        int (*install)(void *arg, const void *image, size_t n, loom_err *e),
                        void *arg, loom_err *e);
/* The campaign was won (promote next). */
bool loom_replica_leading(loom_replica *r);
/* Waits until every entry before this replica's first is applied, then stops following. */
int loom_replica_promote(loom_replica *r, loom_err *e);
/* loom_server_cfg.replicate: appends entry as the next seq, fenced; LOOM_EIO with "deposed"
 * in e once another replica may lead (then loom_replica_deposed is true). */
int loom_replica_append(void *r, const void *entry, size_t n, loom_err *e);
/* loom_server_cfg.snapshot: the store's image at the last appended seq; the log up to it is
 * then deleted and etcd's history compacted (docs/ha.md, "Compaction"). */
int loom_replica_snapshot(void *r, const void *image, size_t n, loom_err *e);
/* The leader's URL as last seen ("" when none), for redirects; any thread. */
void loom_replica_leader(void *r, char *buf, size_t cap);
/* Rows every replica keeps a copy of (auth.db's tokens), under loom/NAME/DIR in etcd. Each round
 * (now, then every 2 s on a thread of its own until close), shared rows that differ from this
 * replica's are merged into it, then this replica's rows that differ from the shared ones are
 * written there, each as a compare-and-swap. merge must make replicas converge (the same rows
 * whatever the order of merges); keys and values are strings without NUL. */
typedef struct loom_replica_rows {
        int (*local)(void *arg, char ***keys, char ***vals, size_t *n, loom_err *e);
        void (*free_rows)(char **keys, char **vals, size_t n);
        int (*merge)(void *arg, const char *key, const char *val, size_t n, loom_err *e);
} loom_replica_rows;
int loom_replica_share(loom_replica *r, const char *dir, const loom_replica_rows *rows, void *arg,
                       loom_err *e);
/* Every replica's URL that campaigns now, the leader's first, comma-separated (*urls is
 * malloc'd): what workers launched by the leader's executor get as LOOM_URL, so that they follow
 * a takeover. Call it once loom_replica_promote has returned. */
int loom_replica_candidates(loom_replica *r, char **urls, loom_err *e);
/* The lease lapsed or an append was refused: this replica must stop acting as leader. */
bool loom_replica_deposed(loom_replica *r);
/* The follower thread stopped on an error (an entry it cannot apply): e says which. */
bool loom_replica_failed(loom_replica *r, loom_err *e);
/* Entries applied (following) or appended (leading) so far: the log's seq of the last. */
uint64_t loom_replica_seq(loom_replica *r);
/* The leader's entries since the latest snapshot (each replica's leadership counts on from
 * there, so that a log whose leaders change often is still snapshotted and cut). */
uint64_t loom_replica_snapshot_due(loom_replica *r);
/* Stops the threads; a leader resigns and revokes its lease. */
void loom_replica_close(loom_replica *r);

#endif
