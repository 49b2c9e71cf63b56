/*
 * state.c - loomd's side of loom-state: the hooks of loom_server_cfg.state, talking to the
 * loom-state daemon of each node over its Unix socket (include/loom/state.h). `--state SOCK`
 * serves every node (one machine, as in the demo); `--state NODE=SOCK` one node. A daemon that
 * cannot be reached is logged once and then treated as unknown (no hint, no accounting check).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/server.h"
#include "loom/state.h"
#include "loomd_state.h"

#define MAX_SOCKS 64

typedef struct state_sock {
        long node; /* -1: every node without its own */
        char path[108];
        loom_state_client *c;
        bool warned;
} state_sock;

struct loomd_state {
        state_sock s[MAX_SOCKS];
        int n;
        loom_server_log_fn log;
        void *log_arg;
};

int loomd_state_add(loomd_state **st, const char *arg)
{
        if (!*st && !(*st = calloc(1, sizeof **st)))
                return -1;
        loomd_state *t = *st;
        if (t->n == MAX_SOCKS) {
                fprintf(stderr, "loomd: --state: at most %d sockets\n", MAX_SOCKS);
                return -1;
        }
        state_sock *s = &t->s[t->n];
        s->node = -1;
        const char *eq = strchr(arg, '=');
        if (eq && eq != arg && strspn(arg, "0123456789") == (size_t)(eq - arg)) {
                s->node = strtol(arg, NULL, 10);
                arg = eq + 1;
        }
        if (!arg[0] || strlen(arg) >= sizeof s->path) {
                fprintf(stderr, "loomd: --state: expected [NODE=]SOCKET_PATH, got '%s'\n", arg);
                return -1;
        }
        snprintf(s->path, sizeof s->path, "%s", arg);
        t->n++;
        return 0;
}

static loom_state_client *client_for(loomd_state *t, loom_node_id node)
{
        state_sock *pick = NULL;
        for (int i = 0; i < t->n; i++)
                if (t->s[i].node == (long)node || (t->s[i].node < 0 && !pick))
                        pick = &t->s[i];
        if (!pick)
                return NULL;
        if (!pick->c) {
                loom_err e;
                if (loom_state_connect(pick->path, &pick->c, &e)) {
                        if (!pick->warned && t->log) {
                                char line[700];
                                snprintf(line, sizeof line, "loom-state unreachable: %s", e.msg);
                                t->log(t->log_arg, line);
                        }
                        pick->warned = true;
                        return NULL;
                }
                pick->warned = false;
        }
        return pick->c;
}

static void drop_client(loomd_state *t, loom_state_client *c)
{
        for (int i = 0; i < t->n; i++)
                if (t->s[i].c == c) {
                        loom_state_close(c);
                        t->s[i].c = NULL;
                }
}

static void on_order(void *arg, loom_node_id node, const char *const *jobs, int n)
{
        loomd_state *t = arg;
        loom_state_client *c = client_for(t, node);
        loom_err e;
        if (!c)
                return;
        if (loom_state_order(c, jobs, (size_t)n, &e) ||
            (n > 0 && loom_state_prefetch(c, jobs[0], &e)))
                drop_client(t, c);
}

static int on_usage(void *arg, loom_node_id node, uint64_t *used, uint64_t *cap)
{
        loomd_state *t = arg;
        loom_state_client *c = client_for(t, node);
        loom_state_stats st;
        loom_err e;
        if (!c)
                return -1;
        if (loom_state_stat(c, &st, &e)) {
                drop_client(t, c);
                return -1;
        }
        *used = st.host_used;
        *cap = st.host_cap;
        loom_state_stats_free(&st);
        return 0;
}

void loomd_state_wire(loomd_state *t, loom_server_cfg *cfg)
{
        if (!t)
                return;
        t->log = cfg->log;
        t->log_arg = cfg->log_arg;
        cfg->state.order = on_order;
        cfg->state.host_usage = on_usage;
        cfg->state.arg = t;
}

void loomd_state_free(loomd_state *t)
{
        if (!t)
                return;
        for (int i = 0; i < t->n; i++)
                loom_state_close(t->s[i].c);
        free(t);
}
