/*
 * exec.c - loomd's executor options (--executor, --exec-nodes, --worker, --exec-dir,
 * --slurm-conf, --no-power): builds the executor of src/exec and hands it to the server
 * (docs/slurm.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loomd_exec.h"

int loomd_exec_create(const loomd_exec_opts *o, loom_server_cfg *cfg, loom_exec **out)
{
        *out = NULL;
        if (!o->kind)
                return 0;
        if (strcmp(o->kind, "local") && strcmp(o->kind, "slurm")) {
                fprintf(stderr, "loomd: --executor: expected local or slurm, got '%s'\n", o->kind);
                return 2;
        }
        if (!o->worker) {
                fprintf(stderr, "loomd: --executor needs --worker CMD (what each worker runs)\n");
                return 2;
        }
        loom_exec_cfg c;
        loom_exec_cfg_default(&c);
        loom_err e;
        loom_err_clear(&e);
        if (o->nodes && loom_exec_cfg_load(&c, o->nodes, &e)) {
                fprintf(stderr, "loomd: --exec-nodes: %s\n", e.msg);
                return 1;
        }
        if (!o->nodes) { /* local: nodes are names only */
                for (int p = 0; p < 2; p++) {
                        c.n_nodes[p] = 64;
                        for (int i = 0; i < 64; i++)
                                snprintf(c.nodes[p][i], sizeof c.nodes[p][i], "%s%d",
                                         p ? "train" : "rollout", i);
                }
        }
        snprintf(c.command, sizeof c.command, "%s", o->worker);
        snprintf(c.dir, sizeof c.dir, "%s", o->dir ? o->dir : cfg->data_dir);
        if (o->slurm_conf)
                snprintf(c.slurm_conf, sizeof c.slurm_conf, "%s", o->slurm_conf);
        c.manage_power = !o->no_power;
        c.gpus_per_node = cfg->cluster.gpus_per_node;
        *out =
            !strcmp(o->kind, "slurm") ? loom_exec_slurm_new(&c, &e) : loom_exec_local_new(&c, &e);
        if (!*out) {
                fprintf(stderr, "loomd: --executor %s: %s\n", o->kind, e.msg);
                return 1;
        }
        cfg->exec = *out;
        return 0;
}

void loomd_exec_bound(loom_exec *x, const loom_server_cfg *cfg, int port, loom_replica *rep)
{
        if (!x)
                return;
        char *urls = NULL;
        loom_err e;
        if (rep && !loom_replica_candidates(rep, &urls, &e) && urls && *urls &&
            strlen(urls) < sizeof ((loom_exec_cfg *)0)->url) {
                loom_exec_set_url(x, urls);
                free(urls);
                return;
        }
        free(urls); /* none seen, or too many to pass: this replica's own address */
        char url[128];
        const char *host = strcmp(cfg->listen_host, "0.0.0.0") ? cfg->listen_host : "127.0.0.1";
        bool v6 = strchr(host, ':') != NULL; /* an IPv6 address goes in brackets */
        snprintf(url, sizeof url, "http://%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
        loom_exec_set_url(x, url);
}
