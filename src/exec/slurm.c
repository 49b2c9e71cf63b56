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
#include <strings.h>

#include <jansson.h>

#include "exec_int.h"

#define SL_OUT (256 * 1024)
/* squeue --json and sinfo --json on 22.05 print every job and node of the cluster whatever the
 * filters (-n and -s change nothing), about 4 KB a job and 1.4 KB a node: this buffer holds
 * about a thousand jobs; output past it does not parse, and that tool is read as text from
 * then on (docs/slurm.md). */
#define SL_JSON_OUT (4 * 1024 * 1024)

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
        char *jbuf;      /* the --json output (SL_JSON_OUT) */
        bool json_jobs;  /* squeue --json answered with jobs loom can read */
        bool json_nodes; /* sinfo --json likewise */
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

/* ---- the tools' JSON (squeue --json, sinfo --json) --------------------------------------------
 * Where the installed Slurm has it (21.08 and later with the serializer/json plugin), holders and
 * node states come from JSON: a job name is then one string whatever it holds (a '|' or a space
 * in someone's job name cannot shift the fields), and a node's state is its base state and a
 * list of flags rather than a word with a one-character suffix. Fields read (checked against
 * Slurm 22.05.8, openapi v0.0.38; newer data_parser output is read where it differs only in that
 * the state is an array of words):
 *
 *   squeue --json  jobs[].job_id, .name, .job_state (a word; newer: an array of words); jobs
 *                  that ended (COMPLETED, CANCELLED, ...) are dropped, as squeue's text does;
 *                  a holder's node is the NODE of its name loom-node-NODE, as in the text path
 *                  (a pending holder has no node list yet)
 *   sinfo --json   nodes[].name, .state (base: idle, allocated, mixed, down, ...; newer: an array
 *                  with the flags in it), .state_flags (DRAIN, FAIL, COMPLETING, NOT_RESPONDING,
 *                  and the power states POWER_DOWN, POWERING_DOWN, POWERED_DOWN, POWER_UP,
 *                  POWERING_UP)
 *
 * The power states are flags beside the base state (a node powering down reads state "idle",
 * state_flags ["POWERING_DOWN"]), so they are folded back into the word sinfo's %T prints for the
 * same node ("idle%"), which is what the rest of this file decides on, so that both paths decide
 * alike; tests/unit/test_exec_slurm.c checks the words agree on captures of both taken together.
 * Steps stay on text: 22.05's squeue --json lists jobs only, with or without -s. */

static const char *json_word(const json_t *v)
{
        return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A job's state: "RUNNING", or the first word of an array of them. */
static const char *json_job_state(const json_t *j)
{
        const json_t *st = json_object_get(j, "job_state");
        return json_is_array(st) ? json_word(json_array_get(st, 0)) : json_word(st);
}

/* Whether a job has ended. squeue's text lists only jobs that have not (pending, running,
 * completing, ...), but 22.05's --json lists every job slurmctld still remembers (MinJobAge):
 * a holder loom cancelled shows as CANCELLED for minutes, and taken for a holder it would keep
 * its node from ever being powered down. A job still completing has not ended. */
static bool json_job_ended(const json_t *j)
{
        static const char *const ended[] = {"COMPLETED", "CANCELLED", "FAILED",
                                            "TIMEOUT",   "NODE_FAIL", "PREEMPTED",
                                            "BOOT_FAIL", "DEADLINE",  "OUT_OF_MEMORY"};
        const json_t *st = json_object_get(j, "job_state");
        bool done = false;
        for (size_t i = 0; i < (json_is_array(st) ? json_array_size(st) : 1); i++) {
                const char *w = json_word(json_is_array(st) ? json_array_get(st, i) : st);
                if (!w)
                        continue;
                if (!strcmp(w, "COMPLETING"))
                        return false;
                for (size_t k = 0; k < sizeof ended / sizeof *ended; k++)
                        done = done || !strcmp(w, ended[k]);
        }
        return done;
}

int exec_slurm_json_holders(const char *buf, exec_slurm_holder *out, int max)
{
        json_t *root = json_loads(buf, 0, NULL), *jobs = json_object_get(root, "jobs");
        if (!json_is_array(jobs)) {
                json_decref(root);
                return -1;
        }
        int n = 0;
        size_t i;
        json_t *j;
        json_array_foreach(jobs, i, j)
        {
                const char *name = json_word(json_object_get(j, "name"));
                const char *st = json_job_state(j);
                json_t *id = json_object_get(j, "job_id");
                if (!name || !st || !json_is_integer(id) || strncmp(name, "loom-node-", 10) ||
                    !name[10] || json_job_ended(j) || n >= max)
                        continue;
                exec_slurm_holder *h = &out[n++];
                snprintf(h->node, sizeof h->node, "%.63s", name + 10);
                snprintf(h->id, sizeof h->id, "%lld", (long long)json_integer_value(id));
                h->running = !strcmp(st, "RUNNING");
        }
        json_decref(root);
        return n;
}

/* The node-state flags that sinfo's %T shows as a suffix, in the order it picks one when
 * several are set (observed: NOT_RESPONDING with POWERING_UP prints "idle#"; POWER_UP with
 * POWERED_DOWN, a power up queued, still prints "idle~"). */
static const struct {
        const char *flag;
        char mark;
} suffixes[] = {{"MAINTENANCE", '$'}, {"REBOOT_ISSUED", '^'}, {"REBOOT_REQUESTED", '@'},
                {"POWERING_UP", '#'}, {"POWERING_DOWN", '%'}, {"POWERED_DOWN", '~'},
                {"POWER_DOWN", '!'},  {"NOT_RESPONDING", '*'}};

static bool has_flag(const json_t *flags, const char *f)
{
        size_t i;
        json_t *v;
        json_array_foreach(flags, i, v)
        {
                const char *w = json_word(v);
                if (w && !strcasecmp(w, f))
                        return true;
        }
        return false;
}

/* One node's state as sinfo's %T word: the base state, or drained/draining, fail/failing,
 * completing where those flags say so, then the suffix of its power or reboot state. */
static void json_node_word(const json_t *node, char *out, size_t len)
{
        static const char *const bases[] = {"idle",    "allocated", "mixed", "down",
                                            "unknown", "future",    "error"};
        const json_t *st = json_object_get(node, "state");
        const json_t *flags = json_object_get(node, "state_flags");
        const char *base = json_word(st);
        if (json_is_array(st)) { /* newer Slurm: ["IDLE", "POWERED_DOWN"] */
                flags = st;
                base = NULL;
                size_t i;
                json_t *v;
                json_array_foreach(st, i, v)
                {
                        for (size_t b = 0; b < sizeof bases / sizeof *bases && !base; b++)
                                if (json_word(v) && !strcasecmp(json_word(v), bases[b]))
                                        base = bases[b];
                }
        }
        char lower[32];
        snprintf(lower, sizeof lower, "%s", base ? base : "unknown");
        for (char *c = lower; *c; c++)
                *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
        bool busy =
            !strcmp(lower, "allocated") || !strcmp(lower, "mixed") || has_flag(flags, "COMPLETING");
        const char *word = lower;
        if (has_flag(flags, "DRAIN"))
                word = busy ? "draining" : "drained";
        else if (has_flag(flags, "FAIL"))
                word = busy ? "failing" : "fail";
        else if (has_flag(flags, "COMPLETING"))
                word = "completing";
        char mark = 0;
        for (size_t k = 0; k < sizeof suffixes / sizeof *suffixes && !mark; k++)
                if (has_flag(flags, suffixes[k].flag))
                        mark = suffixes[k].mark;
        if (mark)
                snprintf(out, len, "%s%c", word, mark);
        else
                snprintf(out, len, "%s", word);
}

int exec_slurm_json_nodes(const char *buf, char (*state)[2][LOOM_EXEC_NAME_MAX], int max)
{
        json_t *root = json_loads(buf, 0, NULL), *nodes = json_object_get(root, "nodes");
        if (!json_is_array(nodes)) {
                json_decref(root);
                return -1;
        }
        int n = 0;
        size_t i;
        json_t *v;
        json_array_foreach(nodes, i, v)
        {
                const char *name = json_word(json_object_get(v, "name"));
                if (!name || !name[0] || strlen(name) >= LOOM_EXEC_NAME_MAX || n >= max)
                        continue;
                snprintf(state[n][0], LOOM_EXEC_NAME_MAX, "%s", name);
                json_node_word(v, state[n][1], LOOM_EXEC_NAME_MAX);
                n++;
        }
        json_decref(root);
        return n;
}

static int list_steps(slurm *s, loom_exec_worker *out, int n, int max)
{
        const char *argv[] = {"squeue", "-h", "-a", "-s", "-o", "%i|%j|%N", NULL};
        if (tool(s, argv) != 0)
                return -1;
        return exec_slurm_parse_steps(s->buf, out, n, max);
}

/* JSON while it answers with what loom reads; text from the first time it does not (an older
 * Slurm refuses --json, a Slurm without the serializer/json plugin exits 1 with "Unable to find
 * plugin", and output past SL_JSON_OUT does not parse). A controller that does not answer at all
 * is an error either way, not a reason to give up JSON. */
static int list_holders(slurm *s)
{
        const int max = 2 * LOOM_EXEC_MAX_NODES;
        if (s->json_jobs) {
                const char *argv[] = {"squeue", "--json", NULL};
                if (exec_capture(argv, s->jbuf, SL_JSON_OUT, 10.0) != 0)
                        return -1;
                int n = exec_slurm_json_holders(s->jbuf, s->holders, max);
                if (n >= 0) {
                        s->n_holders = n;
                        return 0;
                }
                s->json_jobs = false;
        }
        const char *argv[] = {"squeue", "-h", "-a", "-o", "%i|%j|%T", NULL};
        if (tool(s, argv) != 0)
                return -1;
        s->n_holders = exec_slurm_parse_holders(s->buf, s->holders, max);
        return 0;
}

static int list_nodes(slurm *s)
{
        const int max = 2 * LOOM_EXEC_MAX_NODES;
        if (s->json_nodes) {
                const char *argv[] = {"sinfo", "--json", NULL};
                if (exec_capture(argv, s->jbuf, SL_JSON_OUT, 10.0) != 0)
                        return -1;
                int n = exec_slurm_json_nodes(s->jbuf, s->state, max);
                if (n >= 0) {
                        s->n_state = n;
                        return 0;
                }
                s->json_nodes = false;
        }
        const char *argv[] = {"sinfo", "-h", "-N", "-o", "%N|%T", NULL};
        if (tool(s, argv) != 0)
                return -1;
        s->n_state = exec_slurm_parse_nodes(s->buf, s->state, max);
        return 0;
}

/* Whether this Slurm gives JSON: asked once, when the controller has just answered a ping, so
 * that a --json refused (exit 1) is not taken for a controller that went away later. */
static void probe_json(slurm *s)
{
        s->json_jobs = s->json_nodes = true;
        if (list_holders(s))
                s->json_jobs = false;
        if (list_nodes(s))
                s->json_nodes = false;
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

/* "HOST/PORT" of each http(s)://HOST:PORT in loomd's URL list (one URL, or every replica's),
 * space-separated, as bash's /dev/tcp takes them; an [IPv6] address loses its brackets. */
static void holder_addresses(const char *urls, char *out, size_t n)
{
        size_t len = 0;
        out[0] = 0;
        for (const char *p = urls; *p && len < n;) {
                size_t k = strcspn(p, ",");
                char url[256], host[96] = "127.0.0.1";
                snprintf(url, sizeof url, "%.*s", (int)(k < sizeof url ? k : sizeof url - 1), p);
                p += k + (p[k] == ',');
                const char *u = strstr(url, "://");
                u = u ? u + 3 : url;
                int port = 7480;
                if (*u == '[')
                        sscanf(u, "[%95[^]]]:%d", host, &port);
                else
                        sscanf(u, "%95[^:/]:%d", host, &port);
                if (strspn(host, "0123456789abcdefABCDEF.:-_" "ghijklmnopqrstuvwxyz"
                                 "GHIJKLMNOPQRSTUVWXYZ") != strlen(host))
                        continue; /* not a host name: nothing to put in a shell line */
                len += (size_t)snprintf(out + len, n - len, "%s%s/%d", len ? " " : "", host, port);
        }
        if (!out[0])
                snprintf(out, n, "127.0.0.1/7480");
}

/* The holder's script: it sleeps, and ends the allocation once none of loomd's addresses (every
 * replica's, when replicated: a takeover does not end it) has taken a connection for grace_s
 * (bash's /dev/tcp: nothing to install on the nodes). */
void exec_slurm_holder_script(const char *urls, int grace_s, char *out, size_t n)
{
        char addrs[600];
        holder_addresses(urls, addrs, sizeof addrs);
        snprintf(out, n,
                 "exec bash -c 't=0; while sleep 5; do up=0; for a in %s; do "
                 "if (exec 3<>/dev/tcp/$a) 2>/dev/null; then up=1; break; fi; done; "
                 "if [ $up = 1 ]; then t=0; else t=$((t+5)); [ $t -ge %d ] && exit 0; fi; done'",
                 addrs, grace_s);
}

static int submit_holder(slurm *s, const char *node, loom_err *e)
{
        int p = pool_of(s, node);
        char name[96], part[96], nl[96], gres[32], script[1024];
        snprintf(name, sizeof name, "--job-name=loom-node-%s", node);
        snprintf(part, sizeof part, "--partition=%s", s->cfg.partition[p < 0 ? 0 : p]);
        snprintf(nl, sizeof nl, "--nodelist=%s", node);
        snprintf(gres, sizeof gres, "--gres=gpu:%d", s->cfg.gpus_per_node);
        exec_slurm_holder_script(s->cfg.url, s->cfg.grace_s, script, sizeof script);
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
        free(s->jbuf);
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
                s->jbuf = malloc(SL_JSON_OUT);
                s->holders = calloc(2 * LOOM_EXEC_MAX_NODES, sizeof *s->holders);
                s->state = calloc(2 * LOOM_EXEC_MAX_NODES, sizeof *s->state);
        }
        if (!s || !s->buf || !s->jbuf || !s->holders || !s->state) {
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
        probe_json(s);
        s->started = true;
        return loom_exec_new(&s->cfg, &exec_slurm_ops, s, e);
}
