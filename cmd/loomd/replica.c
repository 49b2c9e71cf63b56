/*
 * replica.c - loomd's --store etcd:// (docs/ha.md): follow, then lead.
 *
 * A replica starts as a follower: its store is rebuilt from the replicated log and kept up to
 * date entry by entry, and its address answers with redirects to the leader. Once its
 * campaign wins it applies the log to its end, stops following and hands the same data dir to
 * loom_server_new, which resumes from it exactly as after a restart; every commit of the
 * running server then goes through the log first (cfg.replicate).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../daemon.h"
#include "loom/auth.h"
#include "loomd_ha.h"

int loomd_ha_option(loomd_ha_opts *o, const char *name, const char *value)
{
        if (!strcmp(name, "store")) {
                if (!strcmp(value, "sqlite")) {
                        o->store = NULL;
                        return 0;
                }
                if (strncmp(value, "etcd://", 7) && strncmp(value, "etcds://", 8)) {
                        fprintf(stderr,
                                "loomd: --store: expected sqlite or etcd://HOST:PORT[,HOST:PORT...], "
                                "got '%s'\n",
                                value);
                        return 2;
                }
                o->store = value;
        } else if (!strcmp(name, "ha-name")) {
                o->name = value;
        } else if (!strcmp(name, "advertise")) {
                if (strncmp(value, "http://", 7) && strncmp(value, "https://", 8)) {
                        fprintf(stderr, "loomd: --advertise: expected http(s)://HOST:PORT, got '%s'\n",
                                value);
                        return 2;
                }
                o->advertise = value;
        } else if (!strcmp(name, "ha-snapshot")) {
                char *end;
                long v = strtol(value, &end, 10);
                if (end == value || *end || v < 1 || v > 100000000) {
                        fprintf(stderr, "loomd: --ha-snapshot: expected 1..100000000 commits, got '%s'\n",
                                value);
                        return 2;
                }
                o->snapshot_every = (unsigned)v;
        } else if (!strcmp(name, "ha-ttl")) {
                char *end;
                long v = strtol(value, &end, 10);
                if (end == value || *end || v < 1 || v > 60) {
                        fprintf(stderr, "loomd: --ha-ttl: expected 1..60 seconds, got '%s'\n", value);
                        return 2;
                }
                o->ttl_s = (int)v;
        }
        return 0;
}

static int apply(void *arg, const void *entry, size_t n, loom_err *e)
{
        return loom_store_follower_apply(arg, entry, n, e);
}

/* auth.db's tokens, shared by every replica (docs/ha.md): arg is the data dir */
static int tokens_local(void *arg, char ***keys, char ***vals, size_t *n, loom_err *e)
{
        return loom_token_shared(arg, keys, vals, n, e);
}

static int tokens_merge(void *arg, const char *key, const char *val, size_t n, loom_err *e)
{
        return loom_token_merge(arg, key, val, n, e);
}

static const loom_replica_rows tokens = {tokens_local, loom_token_shared_free, tokens_merge};

static int install(void *arg, const void *image, size_t n, loom_err *e)
{
        return loom_store_follower_reset(arg, image, n, e);
}

static int fail(const char *what, const loom_err *e)
{
        fprintf(stderr, "loomd: %s: %s%s%s\n", what, e->field, e->field[0] ? ": " : "", e->msg);
        return 1;
}

int loomd_ha_mark(const char *data_dir, const loomd_ha_opts *o)
{
        char p[4200];
        snprintf(p, sizeof p, "%s/replica", data_dir);
        FILE *f = fopen(p, "w");
        bool ok = f && fprintf(f, "%s %s\n", o->store, o->name ? o->name : "loom") > 0;
        if (f && fclose(f))
                ok = false;
        if (!ok)
                fprintf(stderr, "loomd: --data-dir: cannot write %s\n", p);
        return !ok;
}

int loomd_ha_marked(const char *data_dir, char *buf, size_t cap)
{
        char p[4200];
        snprintf(p, sizeof p, "%s/replica", data_dir);
        FILE *f = fopen(p, "r");
        if (!f)
                return 1;
        bool got = fgets(buf, (int)cap, f) != NULL;
        fclose(f);
        buf[got ? strcspn(buf, "\n") : 0] = 0;
        return 0;
}

/* Join replica set o as me and rebuild data_dir's store from the log's latest snapshot (*f;
 * following starts after it): 0, or 1 after printing why. *r is set from the first step on
 * (the caller closes it either way). */
static int open_replica(const loomd_ha_opts *o, const char *data_dir, const char *me,
                        loom_replica **r, loom_store_follower **f)
{
        loom_err e;
        *r = NULL;
        *f = NULL;
        if (loom_replica_open(r, o->store, o->name ? o->name : "loom", me,
                              o->ttl_s ? o->ttl_s : 3, &e))
                return fail("--store", &e);
        void *image = NULL;
        size_t n = 0;
        int rc = loom_replica_load(*r, &image, &n, &e) ? fail("replicated log", &e) : 0;
        if (!rc && loom_store_follower_open(f, data_dir, image, n, &e))
                rc = fail("--data-dir", &e);
        free(image);
        return rc;
}

int loomd_ha_lead_once(const loomd_ha_opts *o, const char *data_dir, const char *me, int wait_s,
                       loom_replica **out)
{
        *out = NULL;
        const char *set = o->name ? o->name : "loom";
        loom_err e;
        loom_replica *r;
        loom_store_follower *f;
        int rc = open_replica(o, data_dir, me, &r, &f);
        if (!rc && loom_replica_follow(r, apply, install, f, &e))
                rc = fail("--store", &e);
        for (int tick = 0; !rc && !loom_replica_leading(r); tick++) {
                char lead[512];
                loom_replica_leader(r, lead, sizeof lead);
                if (loom_replica_failed(r, &e))
                        rc = fail("replicated log", &e);
                else if (tick >= 20 * wait_s)
                        rc = fprintf(stderr,
                                     "loomd: --store: %s leads replica set '%s'; stop every "
                                     "replica first\n",
                                     lead[0] ? lead : "another replica", set) > 0;
                else
                        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000000L}, NULL);
        }
        if (!rc && loom_replica_promote(r, &e))
                rc = fail("replicated log", &e);
        loom_store_follower_close(f);
        if (rc) {
                loom_replica_close(r);
                return 1;
        }
        *out = r;
        return 0;
}

int loomd_ha_follow(const loomd_ha_opts *o, loom_server_cfg *cfg, sigset_t *stop,
                    loom_replica **out)
{
        static char me[512]; /* cfg->replica_url: lives as long as loomd */
        *out = NULL;
        if (cfg->port == 0) {
                fprintf(stderr, "loomd: --store etcd: replicas need a fixed --listen port, not 0\n");
                return 1;
        }
        if (o->advertise)
                snprintf(me, sizeof me, "%s", o->advertise);
        else
                snprintf(me, sizeof me, "%s://%s%s%s:%d", cfg->tls_cert ? "https" : "http",
                         strchr(cfg->listen_host, ':') ? "[" : "", cfg->listen_host,
                         strchr(cfg->listen_host, ':') ? "]" : "", cfg->port); /* [IPv6] */
        loom_err e;
        loom_replica *r;
        loom_store_follower *f;
        loom_redirector *red = NULL;
        int rc = open_replica(o, cfg->data_dir, me, &r, &f);
        if (!rc)
                rc = loomd_ha_mark(cfg->data_dir, o);
        if (!rc && loom_replica_share(r, "tokens/", &tokens, (void *)cfg->data_dir, &e))
                rc = fail("--store (tokens)", &e);
        if (!rc && loom_replica_follow(r, apply, install, f, &e))
                rc = fail("--store", &e);
        if (!rc && loom_redirector_start(&red, cfg, loom_replica_leader, r, &e))
                rc = fail("--listen", &e);
        if (!rc && cfg->log) {
                char line[1024];
                snprintf(line, sizeof line,
                         "replica %s following set '%s' on %s; redirecting clients to the leader",
                         me, o->name ? o->name : "loom", o->store);
                cfg->log(cfg->log_arg, line);
        }
        bool stopped = false;
        while (!rc && !loom_replica_leading(r)) {
                struct timespec tick = {.tv_nsec = 50 * 1000000L};
                int sig = sigtimedwait(stop, NULL, &tick);
                if (sig == SIGTERM || sig == SIGINT) {
                        stopped = true;
                        break;
                }
                if (loom_replica_failed(r, &e))
                        rc = fail("replicated log", &e);
                else if (loom_replica_deposed(r))
                        rc = fail("--store", &(loom_err){.msg = "the candidacy's lease lapsed"});
        }
        loom_redirector_stop(red);
        if (!rc && !stopped && loom_replica_promote(r, &e)) {
                rc = fail("replicated log", &e);
                if (loom_replica_deposed(r))
                        rc = 4; /* its lease lapsed while it caught up: another may lead */
        }
        loom_store_follower_close(f);
        if (rc || stopped) {
                loom_replica_close(r);
                return rc;
        }
        if (cfg->log) {
                char line[640];
                snprintf(line, sizeof line, "replica %s leads from log seq %llu", me,
                         (unsigned long long)loom_replica_seq(r));
                cfg->log(cfg->log_arg, line);
        }
        cfg->replicate = loom_replica_append;
        cfg->snapshot = loom_replica_snapshot;
        cfg->snapshot_every = o->snapshot_every ? o->snapshot_every : 10000;
        cfg->snapshot_due = loom_replica_snapshot_due(r);
        cfg->replicate_arg = r;
        cfg->replica_url = me;
        *out = r;
        return 0;
}
