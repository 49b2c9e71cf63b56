/*
 * local.c - the `local` executor: every worker is a process on this host (the demo's and the
 * tests' way, and loomd's behaviour without a cluster engine). Nodes are names only: power
 * changes are accepted at once and change nothing. Workers run in their own session, so a
 * restarted loomd does not see the previous one's children: they are not adopted (they end
 * when their job's permits end); docs/slurm.md says so.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"

typedef struct local {
        loom_exec_cfg cfg;
        exec_child *kids;
        int n_kids;
        size_t cap_kids;
} local;

static int l_launch(void *impl, const loom_exec_worker *w, const char *const *env, loom_err *e)
{
        local *l = impl;
        if (loom_reserve(&l->kids, &l->cap_kids, (size_t)l->n_kids + 1, sizeof *l->kids, 16))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        char name[96], out[700];
        loom_exec_worker_name(w, name, sizeof name);
        snprintf(out, sizeof out, "%s/%s.out", l->cfg.dir, name);
        exec_child *k = &l->kids[l->n_kids];
        k->w = *w;
        snprintf(k->w.where, sizeof k->w.where, "%s", w->node);
        int rc = exec_spawn(NULL, l->cfg.command, env, out, &k->pid, e);
        if (rc)
                return rc;
        snprintf(k->w.id, sizeof k->w.id, "%d", (int)k->pid);
        l->n_kids++;
        return 0;
}

static int l_stop(void *impl, const loom_exec_worker *w, loom_err *e)
{
        (void)impl;
        (void)e;
        pid_t p = (pid_t)atoi(w->id);
        if (p > 0)
                kill(-p, SIGTERM);
        return 0;
}

static int l_list(void *impl, loom_exec_worker *out, int max, loom_err *e)
{
        (void)e;
        local *l = impl;
        int n = exec_reap(l->kids, &l->n_kids, out, max);
        for (int i = 0; i < l->n_kids && n < max; i++)
                out[n++] = l->kids[i].w;
        return n;
}

static int l_power(void *impl, const char *node, bool up, loom_err *e)
{
        (void)impl;
        (void)node;
        (void)up;
        (void)e;
        return 1;
}

static void l_free(void *impl)
{
        local *l = impl;
        for (int i = 0; i < l->n_kids; i++)
                kill(-l->kids[i].pid, SIGTERM);
        free(l->kids);
        free(l);
}

static const loom_exec_ops local_ops = {"local", l_launch, l_stop, l_list, l_power, l_free};

loom_exec *loom_exec_local_new(const loom_exec_cfg *c, loom_err *e)
{
        local *l = calloc(1, sizeof *l);
        if (!l)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory"), NULL;
        l->cfg = *c;
        return loom_exec_new(c, &local_ops, l, e);
}
