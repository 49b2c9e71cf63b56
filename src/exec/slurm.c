/*
 * slurm.c - the `slurm` executor: loom's workers as Slurm job steps, driven through Slurm's
 * command-line tools (sbatch, srun, squeue, sinfo, scontrol, scancel; docs/slurm.md says why
 * not libslurm or slurmrestd).
 *
 * Nodes. A node loom's groups hold is one Slurm allocation named `loom-node-NAME`: an exclusive
 * batch job on exactly that node, in its pool's partition, with all its GPUs (--gres=gpu:G),
 * that sleeps. Jobs of one co-execution group time-share those GPUs under loom's permits, which
 * Slurm cannot express with per-job GRES (a second gpu:8 job on a node would wait), so the
 * allocation is the group's and each worker is a step in it:
 *
 *   srun --jobid=HOLDER --overlap -w NODE -N1 -n1 --gres=gpu:N -J loom-jJ-aA-POOL-RANK CMD
 *
 * (--overlap lets the steps of several jobs share the node's CPUs and GPUs; each still sees
 * CUDA_VISIBLE_DEVICES for its N GPUs.) srun runs as a child of loomd in its own session, so
 * a kill -9 of loomd leaves the step running and the restarted loomd adopts it by name.
 *
 * Provisioning. A node loom holds is powered up (`scontrol update state=power_up`, Slurm's
 * ResumeProgram starts the instance), then its holder is submitted; a node loom does not hold
 * has its holder cancelled and is powered down (`state=power_down`, SuspendProgram).
 *
 *   power down:  idle~ --power_up--> idle# ... idle --sbatch holder--> alloc (ready)
 *   power up:    alloc --scancel holder--> idle --power_down--> idle% ... idle~ (down)
 *
 * A node Slurm has out of service (down, drained, draining, failed; also one whose resume ran
 * past ResumeTimeout, which Slurm marks down) is unusable: the reconciler binds its loom id to
 * another node, and a worker that ended on it is reported as a node failure.
 *
 * Orphans. A holder is a loop that ends its allocation (and so every step in it) once loomd's
 * address has refused connections for grace_s; workers do the same (LOOM_GRACE_S). A stop of
 * loomd (loom_exec_free) cancels every holder and ends the srun clients.
 *
 * Watching. Each apply reads squeue (steps and jobs) and sinfo once and reaps the srun clients:
 * a step whose srun exited is reported with its status (a step killed in Slurm, a failed node,
 * a cancelled holder all end its srun); a step that vanished while loomd was down is reported
 * by the reconciler as vanished.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"

#define SL_OUT (256 * 1024)

typedef exec_slurm_holder holder;

typedef struct slurm {
        loom_exec_cfg cfg;
        bool started; /* the controller answered: free cancels what loom holds */
        exec_child *kids;
        int n_kids;
        size_t cap_kids;
        char *buf;
        holder *holders; /* as last listed */
        int n_holders;
        char (*state)[2][LOOM_EXEC_NAME_MAX]; /* node, sinfo state, as last listed */
        int n_state;
} slurm;

static int tool(slurm *s, const char *const *argv)
{
        return exec_capture(argv, s->buf, SL_OUT, 10.0);
}

static const holder *holder_of(const slurm *s, const char *node)
{
        for (int i = 0; i < s->n_holders; i++)
                if (!strcmp(s->holders[i].node, node))
                        return &s->holders[i];
        return NULL;
}

static const char *node_state(const slurm *s, const char *node)
{
        for (int i = 0; i < s->n_state; i++)
                if (!strcmp(s->state[i][0], node))
                        return s->state[i][1];
        return "unknown";
}

/* Out of service by the cluster's word: down (also a resume past ResumeTimeout), drained or
 * draining, failed or failing. sinfo's %T: "down~", "drained", "draining", "fail", ... */
static bool out_of_service(const char *st)
{
        return strstr(st, "down") || strstr(st, "drain") || strstr(st, "fail");
}

static int pool_of(const slurm *s, const char *node)
{
        for (int p = 0; p < 2; p++)
                for (int i = 0; i < s->cfg.n_nodes[p]; i++)
                        if (!strcmp(s->cfg.nodes[p][i], node))
                                return p;
        return -1;
}

static int sl_launch(void *impl, const loom_exec_worker *w, const char *const *env, loom_err *e)
{
        slurm *s = impl;
        const holder *h = holder_of(s, w->node);
        if (!h || !h->running)
                return loom_err_set(e, LOOM_ESTATE, "", "node %s has no running allocation",
                                    w->node);
        if (loom_reserve(&s->kids, &s->cap_kids, (size_t)s->n_kids + 1, sizeof *s->kids, 16))
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        char name[96], out[700], srun_out[700], gres[32], jobid[40], node[80];
        loom_exec_worker_name(w, name, sizeof name);
        snprintf(out, sizeof out, "--output=%s/%s.out", s->cfg.dir, name);
        snprintf(srun_out, sizeof srun_out, "%s/%s.srun", s->cfg.dir, name);
        snprintf(gres, sizeof gres, "--gres=gpu:%d", w->gpus);
        snprintf(jobid, sizeof jobid, "--jobid=%s", h->id);
        snprintf(node, sizeof node, "--nodelist=%s", w->node);
        /* --open-mode=append: a worker moved to another node keeps its one log */
        const char *argv[] = {"srun",
                              jobid,
                              "--overlap",
                              node,
                              "--nodes=1",
                              "--ntasks=1",
                              gres,
                              "--job-name",
                              name,
                              out,
                              "--open-mode=append",
                              "--kill-on-bad-exit=1",
                              "/bin/sh",
                              "-c",
                              s->cfg.command,
                              NULL};
        exec_child *k = &s->kids[s->n_kids];
        k->w = *w;
        int rc = exec_spawn(argv, NULL, env, srun_out, &k->pid, e);
        if (rc)
                return rc;
        snprintf(k->w.id, sizeof k->w.id, "pid:%d", (int)k->pid);
        s->n_kids++;
        return 0;
}

static int sl_stop(void *impl, const loom_exec_worker *w, loom_err *e)
{
        slurm *s = impl;
        if (!strncmp(w->id, "pid:", 4)) { /* srun has not made its step yet */
                kill(-(pid_t)atoi(w->id + 4), SIGKILL);
                return 0;
        }
        const char *argv[] = {"scancel", w->id, NULL};
        if (tool(s, argv) != 0)
                return loom_err_set(e, LOOM_EIO, "", "scancel %s failed", w->id);
        return 0;
}

/* ---- the tools' output ----------------------------------------------------------------------
 * Each parser reads what one tool printed (a buffer that exec_capture NUL-terminated; strtok_r
 * cuts it in place) and skips any line that is not the format asked for: a line is never
 * trusted to be well formed (a job name is anyone's text), and a table never grows past max. */

/* squeue's steps: "123.0|loom-j1-a1-rollout-0|node" */
int exec_slurm_parse_steps(char *buf, loom_exec_worker *out, int n, int max)
{
        for (char *save, *line = strtok_r(buf, "\n", &save); line && n < max;
             line = strtok_r(NULL, "\n", &save)) {
                char id[32], name[96], where[LOOM_EXEC_NAME_MAX];
                if (sscanf(line, "%31[^|]|%95[^|]|%63s", id, name, where) != 3)
                        continue;
                loom_exec_worker w = {0};
                if (!loom_exec_worker_parse(name, &w))
                        continue;
                snprintf(w.id, sizeof w.id, "%s", id);
                snprintf(w.where, sizeof w.where, "%s", where);
                snprintf(w.node, sizeof w.node, "%s", where);
                out[n++] = w;
        }
        return n;
}

/* squeue's jobs: "124|loom-node-r1|RUNNING"; only loom's holders are kept. */
int exec_slurm_parse_holders(char *buf, exec_slurm_holder *out, int max)
{
        int n = 0;
        for (char *save, *line = strtok_r(buf, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
                char id[24], name[96], st[32];
                if (sscanf(line, "%23[^|]|%95[^|]|%31s", id, name, st) != 3 ||
                    strncmp(name, "loom-node-", 10) || n >= max)
                        continue;
                exec_slurm_holder *h = &out[n++];
                snprintf(h->node, sizeof h->node, "%.63s", name + 10);
                snprintf(h->id, sizeof h->id, "%s", id);
                h->running = !strcmp(st, "RUNNING");
        }
        return n;
}

/* sinfo's nodes: "r1|idle~" */
int exec_slurm_parse_nodes(char *buf, char (*state)[2][LOOM_EXEC_NAME_MAX], int max)
{
        int n = 0;
        for (char *save, *line = strtok_r(buf, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
                char node[LOOM_EXEC_NAME_MAX], st[LOOM_EXEC_NAME_MAX];
                if (sscanf(line, "%63[^|]|%63s", node, st) != 2 || n >= max)
                        continue;
                snprintf(state[n][0], LOOM_EXEC_NAME_MAX, "%s", node);
                snprintf(state[n][1], LOOM_EXEC_NAME_MAX, "%s", st);
                n++;
        }
        return n;
}

static int list_steps(slurm *s, loom_exec_worker *out, int n, int max)
{
        const char *argv[] = {"squeue", "-h", "-a", "-s", "-o", "%i|%j|%N", NULL};
        if (tool(s, argv) != 0)
                return -1;
        return exec_slurm_parse_steps(s->buf, out, n, max);
}

static int list_holders(slurm *s)
{
        const char *argv[] = {"squeue", "-h", "-a", "-o", "%i|%j|%T", NULL};
        if (tool(s, argv) != 0)
                return -1;
        s->n_holders = exec_slurm_parse_holders(s->buf, s->holders, 2 * LOOM_EXEC_MAX_NODES);
        return 0;
}

static int list_nodes(slurm *s)
{
        const char *argv[] = {"sinfo", "-h", "-N", "-o", "%N|%T", NULL};
        if (tool(s, argv) != 0)
                return -1;
        s->n_state = exec_slurm_parse_nodes(s->buf, s->state, 2 * LOOM_EXEC_MAX_NODES);
        return 0;
}

/* Whether the srun client of w reported a node failure ("srun: error: Node failure on N"). */
static bool srun_saw_node_fail(const slurm *s, const loom_exec_worker *w)
{
        char name[96], path[700], tail[4096];
        loom_exec_worker_name(w, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s.srun", s->cfg.dir, name);
        FILE *f = fopen(path, "r");
        if (!f)
                return false;
        if (fseek(f, 0, SEEK_END) == 0 && ftell(f) > (long)sizeof tail - 1)
                fseek(f, -(long)(sizeof tail - 1), SEEK_END);
        else
                rewind(f);
        size_t n = fread(tail, 1, sizeof tail - 1, f);
        fclose(f);
        tail[n] = 0;
        return strstr(tail, "Node failure") || strstr(tail, "NODE_FAIL");
}

static int sl_list(void *impl, loom_exec_worker *out, int max, loom_err *e)
{
        slurm *s = impl;
        int n = exec_reap(s->kids, &s->n_kids, out, max);
        int ended = n;
        if ((n = list_steps(s, out, n, max)) < 0 || list_holders(s) || list_nodes(s))
                return loom_err_set(e, LOOM_EIO, "", "squeue/sinfo did not answer (slurmctld?)");
        /* a worker that ended on a node Slurm has taken out of service, or whose srun says its
         * node failed (a node set down may be back in service by now): the node's failure */
        for (int k = 0; k < ended; k++) {
                const char *st = node_state(s, out[k].node);
                if (!out_of_service(st) && !srun_saw_node_fail(s, &out[k]))
                        continue;
                out[k].node_failed = true;
                snprintf(out[k].why, sizeof out[k].why, "ended: node %.40s failed (Slurm: %.20s)",
                         out[k].node, st);
        }
        /* srun clients whose step squeue does not show yet (or no longer) */
        for (int i = 0; i < s->n_kids && n < max; i++) {
                bool seen = false;
                for (int k = ended; k < n && !seen; k++)
                        seen = out[k].job == s->kids[i].w.job &&
                               out[k].admission == s->kids[i].w.admission &&
                               out[k].pool == s->kids[i].w.pool && out[k].rank == s->kids[i].w.rank;
                if (!seen)
                        out[n++] = s->kids[i].w;
        }
        /* an ended srun whose step is still listed: the step is ending, not running */
        for (int k = ended; k < n; k++)
                for (int i = 0; i < ended; i++) {
                        if (out[k].job != out[i].job || out[k].admission != out[i].admission ||
                            out[k].pool != out[i].pool || out[k].rank != out[i].rank)
                                continue;
                        out[k].ended = true;
                        out[k].exit_code = out[i].exit_code;
                        memcpy(out[k].why, out[i].why, sizeof out[k].why);
                }
        return n;
}

static int scontrol_power(slurm *s, const char *node, const char *state)
{
        char n[96], st[48];
        snprintf(n, sizeof n, "nodename=%s", node);
        snprintf(st, sizeof st, "state=%s", state);
        const char *argv[] = {"scontrol", "update", n, st, NULL};
        return tool(s, argv);
}

/* The holder's script: it sleeps, and ends the allocation once loomd's address has refused
 * connections for grace_s (bash's /dev/tcp: nothing to install on the nodes). */
static void holder_script(const slurm *s, char *out, size_t n)
{
        char host[96] = "127.0.0.1";
        int port = 7480;
        const char *u = strstr(s->cfg.url, "://");
        u = u ? u + 3 : s->cfg.url;
        sscanf(u, "%95[^:/]:%d", host, &port);
        snprintf(out, n,
                 "exec bash -c 't=0; while sleep 5; do if (exec 3<>/dev/tcp/%s/%d) 2>/dev/null; "
                 "then t=0; else t=$((t+5)); [ $t -ge %d ] && exit 0; fi; done'",
                 host, port, s->cfg.grace_s);
}

static int submit_holder(slurm *s, const char *node, loom_err *e)
{
        int p = pool_of(s, node);
        char name[96], part[96], nl[96], gres[32], script[400];
        snprintf(name, sizeof name, "--job-name=loom-node-%s", node);
        snprintf(part, sizeof part, "--partition=%s", s->cfg.partition[p < 0 ? 0 : p]);
        snprintf(nl, sizeof nl, "--nodelist=%s", node);
        snprintf(gres, sizeof gres, "--gres=gpu:%d", s->cfg.gpus_per_node);
        holder_script(s, script, sizeof script);
        const char *argv[] = {
            "sbatch",       "--parsable",         name,     part,   nl,  gres, "--exclusive",
            "--no-requeue", "--output=/dev/null", "--wrap", script, NULL};
        if (tool(s, argv) != 0)
                return loom_err_set(e, LOOM_EIO, "", "sbatch of node %s's allocation failed", node);
        return 0;
}

static int sl_power(void *impl, const char *node, bool up, loom_err *e)
{
        slurm *s = impl;
        const holder *h = holder_of(s, node);
        const char *st = node_state(s, node);
        /* '!': a power down is queued; '%': powering down; '~': down; '#': powering up */
        bool down = strchr(st, '~') != NULL;
        bool going_down = strchr(st, '%') != NULL || strchr(st, '!') != NULL;
        bool coming_up = strchr(st, '#') != NULL;
        bool unusable = !coming_up && out_of_service(st);
        if (up) {
                if (unusable) /* the cluster took it out of service (or it never came up) */
                        return LOOM_EXEC_UNUSABLE;
                if (h)
                        return h->running ? 1 : 0;
                if (down && !coming_up) {
                        scontrol_power(s, node, "power_up");
                        return 0;
                }
                if (down || going_down || coming_up || strstr(st, "unknown"))
                        return 0;
                return submit_holder(s, node, e) ? LOOM_EIO : 0;
        }
        if (h) {
                const char *argv[] = {"scancel", h->id, NULL};
                tool(s, argv);
                return unusable ? LOOM_EXEC_UNUSABLE : 0;
        }
        if (unusable) /* left to the cluster's operators: not powered down, not bound */
                return LOOM_EXEC_UNUSABLE;
        if (down)
                return 1;
        if (!going_down && !coming_up && strstr(st, "idle"))
                scontrol_power(s, node, "power_down");
        return 0;
}

/* A stop of loomd: every holder cancelled (which ends the steps in it) and every srun client
 * this process started ended, so that no loom process is left on any node. */
static void cancel_all(slurm *s)
{
        for (int i = 0; i < s->n_kids; i++)
                kill(-s->kids[i].pid, SIGTERM);
        if (list_holders(s) == 0)
                for (int i = 0; i < s->n_holders; i++) {
                        const char *argv[] = {"scancel", s->holders[i].id, NULL};
                        tool(s, argv);
                }
}

static void sl_free(void *impl)
{
        slurm *s = impl;
        if (s->started)
                cancel_all(s);
        free(s->kids);
        free(s->buf);
        free(s->holders);
        free(s->state);
        free(s);
}

/* Slurm's ResumeTimeout (s), or 0: a node powering up longer than that is marked down by
 * slurmctld; loom's own bound is a little longer, for when it does not. */
static int resume_timeout(slurm *s)
{
        const char *argv[] = {"scontrol", "show", "config", NULL};
        if (tool(s, argv) != 0)
                return 0;
        const char *p = strstr(s->buf, "ResumeTimeout");
        int v = 0;
        if (p && (p = strchr(p, '=')))
                v = atoi(p + 1);
        return v > 0 ? v : 0;
}

void exec_slurm_set_url(void *impl, const char *url)
{
        slurm *s = impl;
        snprintf(s->cfg.url, sizeof s->cfg.url, "%s", url);
}

const loom_exec_ops exec_slurm_ops = {"slurm", sl_launch, sl_stop, sl_list, sl_power, sl_free};

loom_exec *loom_exec_slurm_new(const loom_exec_cfg *c, loom_err *e)
{
        if (c->n_nodes[0] == 0 && c->n_nodes[1] == 0)
                return loom_err_set(e, LOOM_EINVAL, "nodes",
                                    "the slurm executor needs a node map (--exec-nodes)"),
                       NULL;
        slurm *s = calloc(1, sizeof *s);
        if (s) {
                s->buf = malloc(SL_OUT);
                s->holders = calloc(2 * LOOM_EXEC_MAX_NODES, sizeof *s->holders);
                s->state = calloc(2 * LOOM_EXEC_MAX_NODES, sizeof *s->state);
        }
        if (!s || !s->buf || !s->holders || !s->state) {
                if (s)
                        sl_free(s);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory"), NULL;
        }
        s->cfg = *c;
        if (c->slurm_conf[0])
                setenv("SLURM_CONF", c->slurm_conf, 1);
        const char *argv[] = {"scontrol", "ping", NULL};
        if (tool(s, argv) != 0) {
                sl_free(s);
                return loom_err_set(e, LOOM_EIO, "", "scontrol ping: no Slurm controller answers"),
                       NULL;
        }
        int rt = resume_timeout(s);
        if (rt > 0)
                s->cfg.provision_timeout_s = rt + 30;
        s->started = true;
        return loom_exec_new(&s->cfg, &exec_slurm_ops, s, e);
}
