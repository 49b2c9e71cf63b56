/* loomd_exec.h - loomd's executor options (cmd/loomd/exec.c). */
#ifndef LOOMD_EXEC_H
#define LOOMD_EXEC_H

#include <stdbool.h>

#include "loom/exec.h"
#include "loom/ha.h"
#include "loom/server.h"

typedef struct loomd_exec_opts {
        const char *kind;       /* --executor local|slurm; NULL: none */
        const char *nodes;      /* --exec-nodes FILE: pools -> partitions, node ids -> names */
        const char *worker;     /* --worker CMD */
        const char *dir;        /* --exec-dir DIR: workers' output (default: the data dir) */
        const char *slurm_conf; /* --slurm-conf FILE */
        bool no_power;          /* --no-power: leave nodes' power to the cluster */
} loomd_exec_opts;

/* Build the executor named by o into cfg->exec (*out, to free after the server). 0, or the
 * exit status (1 invalid input, 2 bad usage) after printing why. */
int loomd_exec_create(const loomd_exec_opts *o, loom_server_cfg *cfg, loom_exec **out);
/* Tell the executor loomd's address once the port is bound: a replicated loomd's (rep) is every
 * replica's URL it sees campaigning, its own first, so that workers follow a takeover. */
void loomd_exec_bound(loom_exec *x, const loom_server_cfg *cfg, int port, loom_replica *rep);

#endif
