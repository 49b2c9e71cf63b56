/*
 * exec.c - the executor front end: node map file, worker names, and the reconciler that every
 * backend shares (loom/exec.h).
 *
 * The reconciler keeps one record per worker it launched (job, admission, pool, rank). A wanted
 * worker is, on each apply:
 *
 *     missing, never launched  --launch-->  launched
 *     launched, listed alive   (nothing; a worker adopted after a restart is recorded here)
 *     launched, gone or ended  --report once-->  reported   (loomd re-admits: new admission)
 *
 * and a listed worker that matches no wanted key is stopped. The records of admissions that are
 * no longer wanted are dropped. Launching waits until every node of the admission is powered up.
 * A rollout worker whose node the placement changed (a lone member rolls out on its training
 * nodes, a member of a group of several on its rollout nodes) is stopped while its job trains
 * and launched again on the new node; that end is not a failure.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "exec_int.h"

void loom_exec_cfg_default(loom_exec_cfg *c)
{
        memset(c, 0, sizeof *c);
        snprintf(c->partition[0], sizeof c->partition[0], "rollout");
        snprintf(c->partition[1], sizeof c->partition[1], "train");
        snprintf(c->url, sizeof c->url, "http://127.0.0.1:7480");
        snprintf(c->dir, sizeof c->dir, "/tmp");
        c->manage_power = true;
        c->gpus_per_node = 8;
        c->provision_timeout_s = 600;
        const char *g = getenv("LOOM_EXEC_GRACE_S");
        int gs = g ? atoi(g) : 0;
        c->grace_s = gs > 0 && gs <= 86400 ? gs : 60;
}

static int load_pool(loom_exec_cfg *c, json_t *root, int p, const char *path, loom_err *e)
{
        const char *key = loom_pool_name((loom_pool)p);
        json_t *o = json_object_get(root, key);
        if (!json_is_object(o))
                return loom_err_set(e, LOOM_EINVAL, key,
                                    "%s: \"%s\" must be an object with "
                                    "\"partition\" and \"nodes\"",
                                    path, key);
        json_t *part = json_object_get(o, "partition");
        if (part && (!json_is_string(part) || !json_string_length(part) ||
                     json_string_length(part) >= LOOM_EXEC_NAME_MAX))
                return loom_err_set(e, LOOM_EINVAL, "partition",
                                    "%s: %s.partition must be a non-empty string", path, key);
        if (part)
                snprintf(c->partition[p], sizeof c->partition[p], "%s", json_string_value(part));
        json_t *nodes = json_object_get(o, "nodes");
        if (!json_is_array(nodes) || json_array_size(nodes) > LOOM_EXEC_MAX_NODES)
                return loom_err_set(e, LOOM_EINVAL, "nodes",
                                    "%s: %s.nodes must be an array of at most %d names", path, key,
                                    LOOM_EXEC_MAX_NODES);
        size_t i;
        json_t *v;
        json_array_foreach(nodes, i, v)
        {
                const char *s = json_string_value(v);
                if (!s || !*s || strlen(s) >= LOOM_EXEC_NAME_MAX || strpbrk(s, " ,\t\n'\""))
                        return loom_err_set(e, LOOM_EINVAL, "nodes",
                                            "%s: %s.nodes[%zu] must be a node name", path, key, i);
                snprintf(c->nodes[p][i], sizeof c->nodes[p][i], "%s", s);
        }
        c->n_nodes[p] = (int)json_array_size(nodes);
        return 0;
}

int loom_exec_cfg_load(loom_exec_cfg *c, const char *path, loom_err *e)
{
        json_error_t je;
        json_t *root = json_load_file(path, 0, &je);
        if (!root && je.line < 0) /* not opened or read: jansson's text names the file */
                return loom_err_set(e, LOOM_EIO, "", "%s", je.text);
        if (!root) /* its column is 0 at a line's start (an end of file there) */
                return loom_err_set(e, LOOM_EINVAL, "", "%s:%d:%d: %s", path, je.line,
                                    je.column > 0 ? je.column : 1, je.text);
        loom_exec_cfg tmp = *c;
        int rc = 0;
        for (int p = 0; p < 2 && !rc; p++)
                rc = load_pool(&tmp, root, p, path, e);
        json_decref(root);
        if (!rc)
                *c = tmp;
        return rc;
}

loom_exec *loom_exec_new(const loom_exec_cfg *c, const loom_exec_ops *ops, void *impl, loom_err *e)
{
        loom_exec *x = calloc(1, sizeof *x);
        if (!x) {
                if (ops->free)
                        ops->free(impl);
                loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                return NULL;
        }
        x->cfg = *c;
        x->ops = ops;
        x->impl = impl;
        return x;
}

void loom_exec_free(loom_exec *x)
{
        if (!x)
                return;
        if (x->ops->free)
                x->ops->free(x->impl);
        free(x->recs);
        free(x->listed);
        free(x->waiting);
        free(x->misplaced);
        free(x);
}

const char *loom_exec_name(const loom_exec *x)
{
        return x->ops->name;
}

void loom_exec_set_url(loom_exec *x, const char *url)
{
        snprintf(x->cfg.url, sizeof x->cfg.url, "%s", url);
        if (x->ops == &exec_slurm_ops) /* its node allocations watch loomd's address */
                exec_slurm_set_url(x->impl, url);
}

const loom_exec_worker *loom_exec_workers(const loom_exec *x, int *n)
{
        *n = x->n_listed;
        return x->listed;
}

void loom_exec_worker_name(const loom_exec_worker *w, char *out, size_t len)
{
        snprintf(out, len, "loom-j%u-a%u-%s-%d", w->job, w->admission, loom_pool_name(w->pool),
                 w->rank);
}

bool loom_exec_worker_parse(const char *name, loom_exec_worker *w)
{
        unsigned job, adm;
        int rank, used = 0;
        char pool[16];
        if (sscanf(name, "loom-j%u-a%u-%15[a-z]-%d%n", &job, &adm, pool, &rank, &used) != 4 ||
            name[used] || rank < 0)
                return false;
        if (!strcmp(pool, "rollout"))
                w->pool = LOOM_POOL_ROLLOUT;
        else if (!strcmp(pool, "train"))
                w->pool = LOOM_POOL_TRAIN;
        else
                return false;
        w->job = job;
        w->admission = adm;
        w->rank = rank;
        /* Only the spelling loom_exec_worker_name writes: "a+1", "j01" or "j-1" (which %u wraps
         * to 4294967295) would map another name onto the same worker. */
        char canon[96];
        loom_exec_worker_name(w, canon, sizeof canon);
        return strcmp(canon, name) == 0;
}

/* ---- the reconciler --------------------------------------------------------------------- */

static bool same_key(const loom_exec_worker *a, uint32_t job, uint32_t adm, int pool, int rank)
{
        return a->job == job && a->admission == adm && (int)a->pool == pool && a->rank == rank;
}

static exec_rec *rec_find(loom_exec *x, uint32_t job, uint32_t adm, int pool, int rank)
{
        for (int i = 0; i < x->n_recs; i++)
                if (x->recs[i].job == job && x->recs[i].admission == adm &&
                    x->recs[i].pool == pool && x->recs[i].rank == rank)
                        return &x->recs[i];
        return NULL;
}

static exec_rec *rec_add(loom_exec *x, uint32_t job, uint32_t adm, int pool, int rank)
{
        if (loom_reserve(&x->recs, &x->cap_recs, (size_t)x->n_recs + 1, sizeof *x->recs, 16))
                return NULL;
        exec_rec *r = &x->recs[x->n_recs++];
        memset(r, 0, sizeof *r);
        r->job = job;
        r->admission = adm;
        r->pool = pool;
        r->rank = rank;
        return r;
}

static bool wanted(const loom_exec_job *want, int n, const loom_exec_worker *w)
{
        for (int i = 0; i < n; i++)
                if (want[i].job == w->job && want[i].admission == w->admission &&
                    w->rank < want[i].n_nodes[w->pool])
                        return true;
        return false;
}

/* ---- nodes: loom's node ids bound to the cluster's nodes -----------------------------------
 *
 * The core names a node it provisions by a new id every time (ids are never reused), like a
 * cloud instance id; the node map lists the cluster's nodes of each pool. A wanted id is bound
 * to a free node of its pool and unbound when loom releases it: one still up first (a rollout
 * node a moving worker kept), then one powered down, and last one powering down, which must
 * finish that before it can come up again (Slurm's SuspendTimeout, then its boot). The
 * bindings are kept in DIR/exec-nodes.txt (replaced atomically on every change) so that a
 * restarted loomd finds its workers' nodes where it left them. A node the backend finds unusable
 * (failed, drained) loses its binding and is not picked again by this executor. */

static void bind_save(loom_exec *x)
{
        char path[600], tmp[610];
        snprintf(path, sizeof path, "%s/exec-nodes.txt", x->cfg.dir);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f)
                return;
        for (int p = 0; p < 2; p++)
                for (int i = 0; i < x->cfg.n_nodes[p]; i++)
                        if (x->bound[p][i])
                                fprintf(f, "%d %s %lld\n", p, x->cfg.nodes[p][i],
                                        (long long)(x->bound[p][i] - 1));
        if (fclose(f) == 0)
                rename(tmp, path);
}

static void bind_load(loom_exec *x)
{
        char path[600], name[LOOM_EXEC_NAME_MAX];
        snprintf(path, sizeof path, "%s/exec-nodes.txt", x->cfg.dir);
        FILE *f = fopen(path, "r");
        int p;
        unsigned id;
        while (f && fscanf(f, "%d %63s %u", &p, name, &id) == 3)
                for (int i = 0; p >= 0 && p < 2 && i < x->cfg.n_nodes[p]; i++)
                        if (!strcmp(x->cfg.nodes[p][i], name))
                                x->bound[p][i] = (int64_t)id + 1;
        if (f)
                fclose(f);
        x->bound_loaded = true;
}

static int slot_of(const loom_exec *x, int p, loom_node_id id)
{
        for (int i = 0; i < x->cfg.n_nodes[p]; i++)
                if (x->bound[p][i] == (int64_t)id + 1)
                        return i;
        return -1;
}

static bool in(const loom_node_id *v, int n, int64_t id)
{
        for (int k = 0; k < n; k++)
                if ((int64_t)v[k] == id)
                        return true;
        return false;
}

int loom_exec_bindings(const loom_exec *x, loom_exec_binding *out, int max)
{
        int n = 0;
        for (int p = 0; p < 2; p++)
                for (int i = 0; i < x->cfg.n_nodes[p] && n < max; i++)
                        if (x->bound[p][i]) {
                                out[n].pool = (loom_pool)p;
                                out[n].id = (loom_node_id)(x->bound[p][i] - 1);
                                snprintf(out[n].node, sizeof out[n].node, "%s", x->cfg.nodes[p][i]);
                                n++;
                        }
        return n;
}

enum { NODE_UP, NODE_DOWN, NODE_GOING_DOWN }; /* loom_exec.power: the order to bind free nodes */

/* Bind every wanted id, unbind the others; false if nothing changed. */
static bool bind_nodes(loom_exec *x, const loom_node_id *const up[2], const int n_up[2])
{
        bool changed = false;
        for (int p = 0; p < 2; p++) {
                for (int i = 0; i < x->cfg.n_nodes[p]; i++)
                        if (x->bound[p][i] && !in(up[p], n_up[p], x->bound[p][i] - 1))
                                x->bound[p][i] = 0, changed = true;
                for (int k = 0; k < n_up[p]; k++) {
                        if (slot_of(x, p, up[p][k]) >= 0)
                                continue;
                        int pick = -1;
                        for (int i = 0; i < x->cfg.n_nodes[p]; i++)
                                if (!x->bound[p][i] && !x->broken[p][i] &&
                                    (pick < 0 || x->power[p][i] < x->power[p][pick]))
                                        pick = i;
                        if (pick >= 0)
                                x->bound[p][pick] = (int64_t)up[p][k] + 1, changed = true;
                }
        }
        return changed;
}

/* Whether a wanted worker still runs on node: a rollout worker of a group that went lone runs
 * on the released rollout node until it moves (between its rollouts); cancelling the node's
 * allocation first would kill it and count as its job's failure. */
static bool node_busy(const loom_exec *x, const loom_exec_job *want, int n, const char *node)
{
        for (int i = 0; i < x->n_listed; i++) {
                const loom_exec_worker *w = &x->listed[i];
                if (!w->ended && !strcmp(w->node, node) && wanted(want, n, w))
                        return true;
        }
        return false;
}

static double mono_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void node_note(loom_exec *x, const char *node, const char *what)
{
        if (x->n_notes < (int)(sizeof x->notes / sizeof *x->notes))
                snprintf(x->notes[x->n_notes++], sizeof *x->notes,
                         "node %s %s; its loom node id moves to another node", node, what);
}

int loom_exec_node_notes(const loom_exec *x, char (*out)[LOOM_EXEC_NOTE_MAX], int max)
{
        int n = x->n_notes < max ? x->n_notes : max;
        if (n > 0)
                memcpy(out, x->notes, (size_t)n * sizeof *out);
        return n;
}

/* A worker's node failed under it: the node is not bound again for EXEC_FAIL_HOLD_S even if
 * the cluster returns it to service at once (Slurm's ReturnToService=2 does, on the slurmd's
 * next registration), and the loom id bound to it moves to another node. */
#define EXEC_FAIL_HOLD_S 60.0

static void node_failed(loom_exec *x, const char *node)
{
        for (int p = 0; p < 2; p++)
                for (int i = 0; i < x->cfg.n_nodes[p]; i++) {
                        if (strcmp(x->cfg.nodes[p][i], node))
                                continue;
                        if (!x->broken[p][i])
                                node_note(x, node, "failed under a worker");
                        x->broken[p][i] = true;
                        x->failed_at[p][i] = mono_s();
                        if (x->bound[p][i]) {
                                x->bound[p][i] = 0;
                                bind_save(x);
                        }
                }
}

/* Power every mapped node up (bound) or down (free, and no wanted worker left on it);
 * ready[pool][slot] says which bound ones are up. A node the backend finds unusable, or that
 * took longer than provision_timeout_s to come up, is a node failure: its id is bound to another
 * node next round (the jobs on it keep waiting there, no worker failed); it is bound again once
 * the cluster has it back in service. */
static int power_nodes(loom_exec *x, const loom_exec_job *want, int n,
                       const loom_node_id *const up[2], const int n_up[2],
                       bool ready[2][LOOM_EXEC_MAX_NODES], loom_err *e)
{
        if (!x->bound_loaded)
                bind_load(x);
        if (bind_nodes(x, up, n_up))
                bind_save(x);
        double now = mono_s();
        for (int p = 0; p < 2; p++)
                for (int i = 0; i < x->cfg.n_nodes[p]; i++) {
                        bool on = x->bound[p][i] != 0;
                        const char *name = x->cfg.nodes[p][i];
                        if (!x->cfg.manage_power) {
                                ready[p][i] = on;
                                continue;
                        }
                        if (!on && node_busy(x, want, n, name)) {
                                ready[p][i] = false;
                                x->power[p][i] = NODE_UP; /* kept up for that worker */
                                continue;
                        }
                        int rc = x->ops->power(x->impl, name, on, e);
                        if (rc < 0)
                                return rc;
                        if (on && rc == 0 && x->since[p][i] == 0)
                                x->since[p][i] = now;
                        if (on && rc == 0 &&
                            now - x->since[p][i] > (double)x->cfg.provision_timeout_s) {
                                node_note(x, name, "did not come up within provision_timeout_s");
                                x->broken[p][i] = true; /* noted once */
                                x->failed_at[p][i] = now;
                                rc = LOOM_EXEC_UNUSABLE;
                        }
                        if (rc != 0 || !on)
                                x->since[p][i] = 0;
                        if (rc == LOOM_EXEC_UNUSABLE && on) { /* bind its id elsewhere */
                                if (!x->broken[p][i])
                                        node_note(x, name,
                                                  "is out of service (down, drained or failed)");
                                x->broken[p][i] = true;
                                x->bound[p][i] = 0;
                                bind_save(x);
                                rc = 0;
                        } else if (!on && (rc == LOOM_EXEC_UNUSABLE ||
                                           now - x->failed_at[p][i] > EXEC_FAIL_HOLD_S)) {
                                x->broken[p][i] = rc == LOOM_EXEC_UNUSABLE;
                        }
                        ready[p][i] = on && rc == 1;
                        x->power[p][i] = on ? (rc == 1 ? NODE_UP : NODE_DOWN)
                                            : (rc == 0 ? NODE_GOING_DOWN : NODE_DOWN);
                }
        return 0;
}

/* The pool whose nodes the workers of pool p run on: a lone member's rollout workers are on its
 * training nodes, where its lease puts its rollouts. */
static int on_pool(const loom_exec_job *j, int p)
{
        return p == LOOM_POOL_ROLLOUT && j->roll_on_train ? LOOM_POOL_TRAIN : p;
}

/* The cluster's node of j's worker (p, rank), or NULL while its id is bound to none. */
static const char *node_of(const loom_exec *x, const loom_exec_job *j, int p, int rank)
{
        int q = on_pool(j, p), slot = slot_of(x, q, j->nodes[p][rank]);
        return slot >= 0 ? x->cfg.nodes[q][slot] : NULL;
}

static int launch(loom_exec *x, const loom_exec_job *j, int p, int rank, loom_err *e)
{
        loom_exec_worker w = {.job = j->job,
                              .admission = j->admission,
                              .pool = (loom_pool)p,
                              .rank = rank,
                              .gpus = j->gpus[p]};
        snprintf(w.node, sizeof w.node, "%s", node_of(x, j, p, rank));
        char v[13][600]; /* LOOM_URL: up to a list of replica URLs */
        snprintf(v[0], sizeof v[0], "LOOM_URL=%s", x->cfg.url);
        snprintf(v[1], sizeof v[1], "LOOM_JOB=%u", j->job);
        snprintf(v[2], sizeof v[2], "LOOM_JOB_NAME=%s", j->name);
        snprintf(v[3], sizeof v[3], "LOOM_ADMISSION=%u", j->admission);
        snprintf(v[4], sizeof v[4], "LOOM_PHASE=%s", loom_pool_name((loom_pool)p));
        snprintf(v[5], sizeof v[5], "LOOM_NODE_RANK=%d", rank);
        snprintf(v[6], sizeof v[6], "LOOM_NNODES=%d", j->n_nodes[p]);
        snprintf(v[7], sizeof v[7], "LOOM_GPUS=%d", j->gpus[p]);
        snprintf(v[8], sizeof v[8], "LOOM_NODE=%s", w.node);
        snprintf(v[9], sizeof v[9], "LOOM_NODE_ID=%u", j->nodes[p][rank]);
        snprintf(v[10], sizeof v[10], "LOOM_GRACE_S=%d", x->cfg.grace_s);
        int n = 11;
        if (j->token[0]) /* with authentication: what the job's processes need (security.md) */
                snprintf(v[n++], sizeof v[0], "LOOM_TOKEN=%s", j->token);
        if (j->sync_key[0])
                snprintf(v[n++], sizeof v[0], "LOOM_SYNC_KEY=%s", j->sync_key);
        const char *env[14];
        for (int i = 0; i < n; i++)
                env[i] = v[i];
        env[n] = NULL;
        return x->ops->launch(x->impl, &w, env, e);
}

static bool all_ready(const loom_exec *x, const loom_exec_job *j,
                      bool ready[2][LOOM_EXEC_MAX_NODES])
{
        for (int p = 0; p < 2; p++)
                for (int i = 0; i < j->n_nodes[p]; i++) {
                        int q = on_pool(j, p), slot = slot_of(x, q, j->nodes[p][i]);
                        if (slot < 0 || !ready[q][slot])
                                return false;
                }
        return true;
}

static const loom_exec_worker *listed(const loom_exec *x, uint32_t job, uint32_t adm, int p,
                                      int rank, bool ended)
{
        for (int i = 0; i < x->n_listed; i++)
                if (x->listed[i].ended == ended && same_key(&x->listed[i], job, adm, p, rank))
                        return &x->listed[i];
        return NULL;
}

static void report(loom_exec_event *ev, int max_ev, int *n_ev, const loom_exec_job *j,
                   const char *fmt, const char *a, const char *b)
{
        if (*n_ev >= max_ev)
                return;
        loom_exec_event *v = &ev[(*n_ev)++];
        memset(v, 0, sizeof *v);
        v->job = j->job;
        v->admission = j->admission;
        snprintf(v->why, sizeof v->why, fmt, a, b);
}

/* Launch worker (p, r) of j for rec; a refused launch is that worker's failure. */
static void launch_rec(loom_exec *x, const loom_exec_job *j, int p, int r, exec_rec *rec,
                       loom_exec_event *ev, int max_ev, int *n_ev, loom_err *e)
{
        if (launch(x, j, p, r, e)) {
                rec->reported = true;
                report(ev, max_ev, n_ev, j, "%s worker could not start: %.120s",
                       loom_pool_name((loom_pool)p), e->msg);
                loom_err_clear(e);
                return;
        }
        snprintf(rec->node, sizeof rec->node, "%s", node_of(x, j, p, r));
}

static int reconcile_job(loom_exec *x, const loom_exec_job *j, bool ready[2][LOOM_EXEC_MAX_NODES],
                         loom_exec_event *ev, int max_ev, int *n_ev, loom_err *e)
{
        for (int p = 0; p < 2; p++)
                for (int r = 0; r < j->n_nodes[p]; r++) {
                        exec_rec *rec = rec_find(x, j->job, j->admission, p, r);
                        const loom_exec_worker *live = listed(x, j->job, j->admission, p, r, false);
                        const char *node = node_of(x, j, p, r);
                        if (rec && rec->moving) {
                                /* launched again only once the cluster lists nothing of it: an
                                 * ending step of the same name would hide the new one */
                                if (live || listed(x, j->job, j->admission, p, r, true) ||
                                    !all_ready(x, j, ready))
                                        continue;
                                rec->moving = rec->reported = false;
                                launch_rec(x, j, p, r, rec, ev, max_ev, n_ev, e);
                                continue;
                        }
                        if (live) {
                                if (!rec && !(rec = rec_add(x, j->job, j->admission, p, r)))
                                        return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                                if (!rec->node[0])
                                        snprintf(rec->node, sizeof rec->node, "%s", live->node);
                                /* the placement moved its rollouts (a lone group got a second
                                 * member, or went lone): stopped here while its job trains,
                                 * launched there once the node is up. Not waiting for the node:
                                 * a worker left here would take the next rollout's permit,
                                 * whose lease names the new node. */
                                if (p == LOOM_POOL_ROLLOUT && node && rec->node[0] &&
                                    strcmp(rec->node, node) && !j->roll_pinned) {
                                        if (x->ops->stop(x->impl, live, e) == 0)
                                                rec->moving = true;
                                        loom_err_clear(e);
                                }
                                continue;
                        }
                        if (rec && !rec->reported) {
                                const loom_exec_worker *end =
                                    listed(x, j->job, j->admission, p, r, true);
                                rec->reported = true;
                                report(ev, max_ev, n_ev, j, "%s worker %.100s",
                                       loom_pool_name((loom_pool)p),
                                       end ? end->why : "vanished from the cluster");
                                if (end && end->node_failed) {
                                        if (*n_ev > 0)
                                                ev[*n_ev - 1].node = true;
                                        node_failed(x, end->node);
                                }
                                continue;
                        }
                        if (rec || !all_ready(x, j, ready))
                                continue;
                        if (!(rec = rec_add(x, j->job, j->admission, p, r)))
                                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        launch_rec(x, j, p, r, rec, ev, max_ev, n_ev, e);
                }
        return 0;
}

/* Whether a worker of j is missing while one of its nodes is not up: it waits for the node. */
static bool waits_for_node(const loom_exec *x, const loom_exec_job *j,
                           bool ready[2][LOOM_EXEC_MAX_NODES])
{
        if (all_ready(x, j, ready))
                return false;
        for (int p = 0; p < 2; p++)
                for (int r = 0; r < j->n_nodes[p]; r++)
                        if (!listed(x, j->job, j->admission, p, r, false))
                                return true;
        return false;
}

/* Whether a rollout worker of j runs on another node than j's placement names for it now, or
 * was stopped there and is not yet launched again on the new one. */
static bool rollout_misplaced(loom_exec *x, const loom_exec_job *j)
{
        for (int r = 0; r < j->n_nodes[LOOM_POOL_ROLLOUT]; r++) {
                const loom_exec_worker *live =
                    listed(x, j->job, j->admission, LOOM_POOL_ROLLOUT, r, false);
                const char *node = node_of(x, j, LOOM_POOL_ROLLOUT, r);
                const exec_rec *rec = rec_find(x, j->job, j->admission, LOOM_POOL_ROLLOUT, r);
                if ((rec && rec->moving) || (live && (!node || strcmp(live->node, node))))
                        return true;
        }
        return false;
}

int loom_exec_rollout_places(const loom_exec *x, loom_exec_place *out, int max)
{
        int n = 0;
        for (int i = 0; i < x->n_listed && n < max; i++) {
                const loom_exec_worker *w = &x->listed[i];
                if (w->ended || w->pool != LOOM_POOL_ROLLOUT)
                        continue;
                loom_exec_place *p = &out[n++];
                *p = (loom_exec_place){.job = w->job,
                                       .admission = w->admission,
                                       .rank = w->rank,
                                       .pool = LOOM_POOL_ROLLOUT,
                                       .node = -1};
                for (int q = 0; q < 2; q++)
                        for (int k = 0; k < x->cfg.n_nodes[q]; k++)
                                if (x->bound[q][k] && !strcmp(x->cfg.nodes[q][k], w->node))
                                        p->pool = (loom_pool)q, p->node = x->bound[q][k] - 1;
        }
        for (int i = 0; i < x->n_recs && n < max; i++)
                if (x->recs[i].moving && x->recs[i].pool == LOOM_POOL_ROLLOUT)
                        out[n++] = (loom_exec_place){.job = x->recs[i].job,
                                                     .admission = x->recs[i].admission,
                                                     .rank = x->recs[i].rank,
                                                     .moving = true,
                                                     .node = -1};
        return n;
}

int loom_exec_misplaced(const loom_exec *x, uint32_t (*out)[2], int max)
{
        int n = x->n_misplaced < max ? x->n_misplaced : max;
        if (n > 0)
                memcpy(out, x->misplaced, (size_t)n * sizeof *out);
        return n;
}

int loom_exec_waiting(const loom_exec *x, uint32_t (*out)[2], int max)
{
        int n = x->n_waiting < max ? x->n_waiting : max;
        if (n > 0)
                memcpy(out, x->waiting, (size_t)n * sizeof *out);
        return n;
}

int loom_exec_apply(loom_exec *x, const loom_exec_job *want, int n, const loom_node_id *const up[2],
                    const int n_up[2], loom_exec_event *ev, int max_ev, int *n_ev, loom_err *e)
{
        *n_ev = 0;
        if (!x->listed && !(x->listed = calloc(EXEC_MAX_LISTED, sizeof *x->listed)))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (!x->waiting && !(x->waiting = calloc(EXEC_MAX_LISTED, sizeof *x->waiting)))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (!x->misplaced && !(x->misplaced = calloc(EXEC_MAX_LISTED, sizeof *x->misplaced)))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        x->n_waiting = x->n_misplaced = 0; /* a controller that does not answer holds nothing */
        int m = x->ops->list(x->impl, x->listed, EXEC_MAX_LISTED, e);
        if (m < 0)
                return m;
        x->n_listed = m;
        static bool ready[2][LOOM_EXEC_MAX_NODES]; /* scheduler thread only */
        x->n_notes = 0;
        int rc = power_nodes(x, want, n, up, n_up, ready, e);
        if (rc)
                return rc;
        x->n_waiting = 0;
        for (int i = 0; i < n; i++) {
                if ((rc = reconcile_job(x, &want[i], ready, ev, max_ev, n_ev, e)))
                        return rc;
                if (x->n_waiting < EXEC_MAX_LISTED && waits_for_node(x, &want[i], ready)) {
                        x->waiting[x->n_waiting][0] = want[i].job;
                        x->waiting[x->n_waiting++][1] = want[i].admission;
                }
                if (x->n_misplaced < EXEC_MAX_LISTED && rollout_misplaced(x, &want[i])) {
                        x->misplaced[x->n_misplaced][0] = want[i].job;
                        x->misplaced[x->n_misplaced++][1] = want[i].admission;
                }
        }
        for (int i = 0; i < x->n_listed; i++) {
                loom_exec_worker *w = &x->listed[i];
                if (!w->ended && !wanted(want, n, w) && x->ops->stop(x->impl, w, e) == 0)
                        w->ended = true;
                loom_err_clear(e);
        }
        /* forget what is no longer wanted */
        int k = 0;
        for (int i = 0; i < x->n_recs; i++) {
                loom_exec_worker w = {.job = x->recs[i].job,
                                      .admission = x->recs[i].admission,
                                      .pool = (loom_pool)x->recs[i].pool,
                                      .rank = x->recs[i].rank};
                if (wanted(want, n, &w))
                        x->recs[k++] = x->recs[i];
        }
        x->n_recs = k;
        return 0;
}
