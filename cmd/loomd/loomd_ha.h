/* loomd_ha.h - loomd as one of several replicas on etcd (cmd/loomd/replica.c, docs/ha.md). */
#ifndef LOOMD_HA_H
#define LOOMD_HA_H

#include <signal.h>

#include "loom/ha.h"
#include "loom/server.h"

typedef struct loomd_ha_opts {
        const char *store;     /* --store etcd://HOST:PORT,...; NULL: SQLite alone */
        const char *name;      /* --ha-name NAME: the replica set (default "loom") */
        const char *advertise; /* --advertise URL: how clients reach this replica */
        int ttl_s;             /* --ha-ttl S: the leadership lease (default 3) */
        unsigned snapshot_every; /* --ha-snapshot N: commits between snapshots (10000) */
} loomd_ha_opts;

/* One option of the above by its long name: 0, or 2 (bad usage) after printing why. */
int loomd_ha_option(loomd_ha_opts *o, const char *name, const char *value);
/* Follow the replicated log, serving redirects, until this replica leads; then cfg is set up
 * to lead (cfg->replicate) and *out holds the replica. Returns 0 with *out NULL when a stop
 * signal came first, or the exit status after printing why (1; 4 when deposed before it could
 * take over). */
int loomd_ha_follow(const loomd_ha_opts *o, loom_server_cfg *cfg, sigset_t *stop,
                    loom_replica **out);

/* For a command that writes the replicated store with every replica stopped (`loomd token
 * rotate-secret --store`): follow the log into data_dir, campaign as me and, once it leads,
 * promote; *out then appends (loom_replica_append) until loom_replica_close. Refused, after
 * wait_s seconds, while another replica leads. Returns 0 or 1 after printing why. */
int loomd_ha_lead_once(const loomd_ha_opts *o, const char *data_dir, const char *me, int wait_s,
                       loom_replica **out);
/* DATA_DIR/replica names the set a replica's data dir follows ("etcd://... NAME"): its
 * loom.db is rebuilt from the log at each start, so a command that writes it directly would be
 * lost. loomd_ha_marked fills buf with that line (0), or returns 1 when the dir is no replica's. */
int loomd_ha_mark(const char *data_dir, const loomd_ha_opts *o);
int loomd_ha_marked(const char *data_dir, char *buf, size_t cap);

#endif
