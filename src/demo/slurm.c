/*
 * slurm.c - `loom demo --executor slurm`: the demo's jobs run through a Slurm cluster on this
 * machine (scripts/slurm-cluster.sh, docs/slurm.md). The demo brings the cluster up in a
 * temporary directory, starts loomd with the Slurm executor, submits three jobs of the demo's
 * shapes, prints each Slurm step as squeue shows it, and ends with a table of where Slurm ran
 * every job's phases and how the nodes were powered afterwards. What is emulated: the GPUs
 * (GRES on character devices) and the work of a phase (a worker sleeps its phase time); the
 * cluster, its scheduling, the steps, the power changes and loomd are real.
 *
 * The workers are this program again (`loom demo --exec-worker S`, loom_demo_exec_worker): the
 * permit loop of one pool's phase, as a real job's worker runs it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <jansson.h>

#include "demo_int.h"
#include "loom/client.h"
#include "loom/exec.h"

void loom_demo_slurm_opts_default(loom_demo_slurm_opts *o)
{
        memset(o, 0, sizeof *o);
        o->iterations = 3;
        o->phase_s = 0.3;
}

/* ---- the worker ------------------------------------------------------------------------- */

static bool job_live(loom_client *c, uint32_t job)
{
        char path[64], *reply = NULL;
        snprintf(path, sizeof path, "/v1/jobs/%u", job);
        if (loom_client_get(c, path, &reply))
                return false;
        json_t *o = json_loads(reply, 0, NULL);
        const char *st = json_string_value(json_object_get(o, "state"));
        bool live = st && (!strcmp(st, "queued") || !strcmp(st, "running"));
        json_decref(o);
        loom_client_free_string(reply);
        return live;
}

int loom_demo_exec_worker(double phase_s)
{
        const char *url = getenv("LOOM_URL"), *job_s = getenv("LOOM_JOB");
        const char *phase = getenv("LOOM_PHASE"), *rank_s = getenv("LOOM_NODE_RANK");
        if (!url || !job_s || !phase) {
                fprintf(stderr, "loom demo --exec-worker: LOOM_URL, LOOM_JOB, LOOM_PHASE unset "
                                "(an executor sets them)\n");
                return 2;
        }
        uint32_t job = (uint32_t)strtoul(job_s, NULL, 10);
        /* loomd unreachable for LOOM_GRACE_S (the executor sets it): the client gives up and
         * this worker exits, so a loomd that is gone leaves no worker behind */
        loom_client_opts o;
        loom_client_opts_default(&o);
        const char *grace = getenv("LOOM_GRACE_S");
        if (grace && atof(grace) > 0)
                o.retry_for_s = atof(grace);
        loom_client *c = loom_client_new(url, &o);
        if (!c)
                return 1;
        int rc = 0;
        if (rank_s && atoi(rank_s) > 0) { /* ranks > 0 join through the framework; wait */
                while (job_live(c, job))
                        usleep(500000);
                loom_client_free(c);
                return 0;
        }
        for (;;) {
                loom_client_lease l;
                int r = loom_client_acquire(c, job, phase, 5, &l);
                if (r == LOOM_ETIMEDOUT)
                        continue;
                if (r == LOOM_ESTATE) { /* ended, or the other pool's phase is next */
                        if (!job_live(c, job))
                                break;
                        usleep(50000);
                        continue;
                }
                if (r) {
                        fprintf(stderr, "worker: %s\n", loom_client_error(c));
                        rc = 1;
                        break;
                }
                printf("job %u %s iteration %lld on %s (GPUs %s)\n", job, phase,
                       (long long)l.iteration, getenv("SLURMD_NODENAME") ?: "-",
                       getenv("CUDA_VISIBLE_DEVICES") ?: "-");
                fflush(stdout);
                usleep((useconds_t)(phase_s * 1e6)); /* the phase's work, emulated */
                r = loom_client_release(c, &l, true, NULL);
                if (r && r != LOOM_ENOENT) { /* a lease lost to a restart: acquire again */
                        fprintf(stderr, "worker: %s\n", loom_client_error(c));
                        rc = 1;
                        break;
                }
        }
        loom_client_free(c);
        return rc;
}

/* ---- the demo --------------------------------------------------------------------------- */

static int free_base(void)
{
        for (int base = 17000 + (getpid() % 200) * 10; base < 60000; base += 10) {
                bool ok = true;
                for (int p = base; p < base + 8 && ok; p++) {
                        int fd = socket(AF_INET, SOCK_STREAM, 0);
                        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p)};
                        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                        ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
                        if (fd >= 0)
                                close(fd);
                }
                if (ok)
                        return base;
        }
        return -1;
}

static int find_script(char *out, size_t n, char *bin, size_t bn)
{
        char exe[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[k > 0 ? k : 0] = 0;
        snprintf(bin, bn, "%s", exe);
        char *slash = strrchr(exe, '/');
        if (slash)
                *slash = 0;
        const char *env = getenv("LOOM_SOURCE_DIR");
        char parent[PATH_MAX + 8];
        snprintf(parent, sizeof parent, "%s/..", exe);
        const char *tries[3] = {env, ".", parent};
        for (int i = 0; i < 3; i++) {
                if (!tries[i])
                        continue;
                snprintf(out, n, "%s/scripts/slurm-cluster.sh", tries[i]);
                if (access(out, R_OK) == 0)
                        return 0;
        }
        return -1;
}

typedef struct seen_step {
        char name[64], id[24], node[64];
} seen_step;

/* New loom steps in squeue go to steps (and a line to out). */
static void poll_steps(FILE *out, seen_step *steps, int *n, int max, double t0, bool quiet)
{
        FILE *p = popen("squeue -h -a -s -o '%i|%j|%N' 2>/dev/null", "r");
        char line[256];
        while (p && fgets(line, sizeof line, p)) {
                seen_step s;
                if (sscanf(line, "%23[^|]|%63[^|]|%63s", s.id, s.name, s.node) != 3 ||
                    strncmp(s.name, "loom-j", 6))
                        continue;
                bool known = false;
                for (int i = 0; i < *n && !known; i++)
                        known = !strcmp(steps[i].id, s.id);
                if (known || *n >= max)
                        continue;
                steps[(*n)++] = s;
                if (!quiet)
                        fprintf(out, "%7.2f  slurm step %-6s %-24s on %s\n", mono_s() - t0, s.id,
                                s.name, s.node);
        }
        if (p)
                pclose(p);
}

static int run_cmd(const char *cmd, const char *log)
{
        char full[9400];
        snprintf(full, sizeof full, "%s >>'%s' 2>&1", cmd, log);
        int st = system(full);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static pid_t start_loomd(const char *bin, const char *dir, int port, loom_err *e)
{
        char loomd[PATH_MAX + 16], ddir[600], listen_[64], pf[600], nodes[600], conf[600],
            worker[PATH_MAX + 64], odir[600], log[600];
        snprintf(loomd, sizeof loomd, "%s", bin);
        char *slash = strrchr(loomd, '/');
        snprintf(slash ? slash + 1 : loomd, 16, "loomd");
        snprintf(ddir, sizeof ddir, "%s/loomd", dir);
        snprintf(listen_, sizeof listen_, "127.0.0.1:%d", port);
        snprintf(pf, sizeof pf, "%s/port", dir);
        snprintf(nodes, sizeof nodes, "%s/nodes.json", dir);
        snprintf(conf, sizeof conf, "%s/cluster/slurm.conf", dir);
        snprintf(worker, sizeof worker, "'%s' demo --exec-worker 0.3", bin);
        snprintf(odir, sizeof odir, "%s/out", dir);
        snprintf(log, sizeof log, "%s/loomd.log", dir);
        mkdir(odir, 0755);
        pid_t p = fork();
        if (p == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
                if (fd >= 0) {
                        dup2(fd, 1);
                        dup2(fd, 2);
                }
                execl(loomd, "loomd", "--data-dir", ddir, "--listen", listen_, "--port-file", pf,
                      "--executor", "slurm", "--exec-nodes", nodes, "--slurm-conf", conf,
                      "--worker", worker, "--exec-dir", odir, (char *)NULL);
                _exit(127);
        }
        for (int i = 0; p > 0 && i < 500; i++) {
                if (access(pf, R_OK) == 0)
                        return p;
                int st;
                if (waitpid(p, &st, WNOHANG) == p)
                        break;
                usleep(10000);
        }
        loom_err_set(e, LOOM_EIO, "", "loomd did not start (see %s)", log);
        if (p > 0)
                kill(p, SIGKILL), waitpid(p, NULL, 0);
        return -1;
}

static const struct {
        const char *name, *what;
        double slo;
} jobs[] = {{"math", "rollout-heavy", 1.6},
            {"code", "training-heavy", 1.6},
            {"chat", "small and tolerant", 5.0}};

static int submit_all(loom_client *c, const loom_demo_slurm_opts *o, uint32_t *ids, FILE *out,
                      loom_err *e)
{
        for (int i = 0; i < 3; i++) {
                char spec[512], *reply = NULL;
                snprintf(spec, sizeof spec,
                         "{\"name\":\"%s\",\"rollout_gpus\":8,\"train_gpus\":8,\"t_roll_s\":%s,"
                         "\"t_train_s\":%s,\"slo\":%.2f,\"iterations\":%d}",
                         jobs[i].name, i == 1 ? "1.0" : "2.0", i == 1 ? "2.0" : "1.0", jobs[i].slo,
                         o->iterations);
                if (loom_client_submit(c, spec, NULL, &ids[i], &reply))
                        return loom_err_set(e, LOOM_EIO, "submit", "%s: %s", jobs[i].name,
                                            loom_client_error(c));
                json_t *d = json_loads(reply, 0, NULL);
                fprintf(out, "  %-5s (%s): group %lld, rollout node %lld, train node %lld\n",
                        jobs[i].name, jobs[i].what,
                        (long long)json_integer_value(json_object_get(d, "group")),
                        (long long)json_integer_value(
                            json_array_get(json_object_get(d, "rollout_nodes"), 0)),
                        (long long)json_integer_value(
                            json_array_get(json_object_get(d, "train_nodes"), 0)));
                json_decref(d);
                loom_client_free_string(reply);
        }
        return 0;
}

static int jobs_done(loom_client *c, const uint32_t *ids, int iterations)
{
        int done = 0;
        for (int i = 0; i < 3; i++) {
                char path[64], *reply = NULL;
                snprintf(path, sizeof path, "/v1/jobs/%u", ids[i]);
                if (loom_client_get(c, path, &reply))
                        return -1;
                json_t *o = json_loads(reply, 0, NULL);
                const char *st = json_string_value(json_object_get(o, "state"));
                if (st && !strcmp(st, "finished") &&
                    json_integer_value(json_object_get(o, "iterations_done")) == iterations)
                        done++;
                else if (st && strcmp(st, "queued") && strcmp(st, "running"))
                        done = -100;
                json_decref(o);
                loom_client_free_string(reply);
        }
        return done;
}

static void report(FILE *out, const seen_step *steps, int n, const uint32_t *ids)
{
        fprintf(out, "\nwhere Slurm ran each phase (squeue):\n");
        fprintf(out, "  %-5s %-8s %-10s %s\n", "job", "phase", "step", "node");
        for (int i = 0; i < 3; i++)
                for (int p = 0; p < 2; p++)
                        for (int k = 0; k < n; k++) {
                                loom_exec_worker w;
                                if (!loom_exec_worker_parse(steps[k].name, &w) || w.job != ids[i] ||
                                    (int)w.pool != p)
                                        continue;
                                fprintf(out, "  %-5s %-8s %-10s %s\n", jobs[i].name,
                                        p ? "train" : "rollout", steps[k].id, steps[k].node);
                        }
}

/* Re-admissions per job: a node that boots is no failure, so none are expected. */
static void print_restarts(FILE *out, loom_client *c, const uint32_t *ids)
{
        fprintf(out, "\nre-admissions (loomd):");
        for (int i = 0; i < 3; i++) {
                char path[64], *reply = NULL;
                snprintf(path, sizeof path, "/v1/jobs/%u", ids[i]);
                if (loom_client_get(c, path, &reply))
                        continue;
                json_t *o = json_loads(reply, 0, NULL);
                fprintf(out, "  %s %lld restarts, %lld resubmits;", jobs[i].name,
                        (long long)json_integer_value(json_object_get(o, "restarts")),
                        (long long)json_integer_value(json_object_get(o, "resubmits")));
                json_decref(o);
                loom_client_free_string(reply);
        }
        fprintf(out, "\n");
}

static void print_nodes(FILE *out, const char *when)
{
        fprintf(out, "\nnodes %s (sinfo; ~ = powered down):\n", when);
        FILE *p = popen("sinfo -h -N -o '  %N %P %T' 2>/dev/null", "r");
        char line[256];
        while (p && fgets(line, sizeof line, p))
                fputs(line, out);
        if (p)
                pclose(p);
}

static int run(const loom_demo_slurm_opts *o, FILE *out, const char *dir, const char *bin, int base,
               loom_err *e)
{
        char url[64], nodes[600];
        snprintf(nodes, sizeof nodes, "%s/nodes.json", dir);
        FILE *f = fopen(nodes, "w");
        if (!f)
                return loom_err_set(e, LOOM_EIO, "", "%s: %s", nodes, strerror(errno));
        fprintf(f,
                "{\"rollout\":{\"partition\":\"rollout\",\"nodes\":[\"n%dr1\",\"n%dr2\"]},"
                "\"train\":{\"partition\":\"train\",\"nodes\":[\"n%dt1\",\"n%dt2\"]}}\n",
                base, base, base, base);
        fclose(f);
        pid_t ld = start_loomd(bin, dir, base + 6, e);
        if (ld < 0)
                return LOOM_EIO;
        snprintf(url, sizeof url, "http://127.0.0.1:%d", base + 6);
        loom_client *c = loom_client_new(url, NULL);
        uint32_t ids[3] = {0};
        double t0 = mono_s();
        fprintf(out, "loomd on %s, executor slurm; placement:\n", url);
        int rc = c ? submit_all(c, o, ids, out, e) : loom_err_set(e, LOOM_ENOMEM, "", "oom");
        seen_step steps[64];
        int n = 0, done = 0;
        if (!rc && !o->quiet)
                fprintf(out, "\n   time  (steps as squeue lists them)\n");
        while (!rc && (done = jobs_done(c, ids, o->iterations)) >= 0 && done < 3 &&
               mono_s() - t0 < 180) {
                poll_steps(out, steps, &n, 64, t0, o->quiet);
                usleep(200000);
        }
        if (!rc && done != 3)
                rc = loom_err_set(e, LOOM_ECORRUPT, "", "not every job finished its %d iterations",
                                  o->iterations);
        if (!rc) {
                fprintf(out, "\nevery job finished its %d iterations in %.1f s\n", o->iterations,
                        mono_s() - t0);
                report(out, steps, n, ids);
                print_restarts(out, c, ids);
                for (int i = 0; i < 50; i++) { /* loom releases the nodes: Slurm powers down */
                        FILE *p = popen("sinfo -h -N -o '%T' 2>/dev/null | grep -vc '~$'", "r");
                        int up = p && fscanf(p, "%d", &up) == 1 ? up : -1;
                        if (p)
                                pclose(p);
                        if (up == 0)
                                break;
                        usleep(200000);
                }
                print_nodes(out, "after the run");
        }
        loom_client_free(c);
        kill(ld, SIGTERM);
        waitpid(ld, NULL, 0);
        return rc;
}

int loom_demo_slurm_run(const loom_demo_slurm_opts *o, FILE *out, loom_err *e)
{
        loom_err_clear(e);
        if (o->iterations < 1 || o->iterations > 100)
                return loom_err_set(e, LOOM_EINVAL, "iterations", "iterations must be 1..100");
        char script[PATH_MAX + 64], bin[PATH_MAX];
        if (find_script(script, sizeof script, bin, sizeof bin))
                return loom_err_set(e, LOOM_ENOENT, "source",
                                    "scripts/slurm-cluster.sh not found: run from the source "
                                    "tree or set LOOM_SOURCE_DIR");
        if (geteuid() != 0)
                return loom_err_set(e, LOOM_ESTATE, "", "the local Slurm cluster runs as root");
        char dir[256] = "/tmp/loom-demo-slurm-XXXXXX";
        if (o->dir)
                snprintf(dir, sizeof dir, "%s", o->dir), mkdir(dir, 0755);
        else if (!mkdtemp(dir))
                return loom_err_set(e, LOOM_EIO, "", "mkdtemp: %s", strerror(errno));
        int base = free_base();
        char cmd[8800], log[300], conf[300];
        snprintf(log, sizeof log, "%s/cluster.log", dir);
        snprintf(conf, sizeof conf, "%s/cluster/slurm.conf", dir);
        setenv("SLURM_CONF", conf, 1);
        snprintf(cmd, sizeof cmd, "bash '%s' up '%s/cluster' %d", script, dir, base);
        fprintf(out,
                "starting a Slurm cluster in %s/cluster (2 rollout + 2 train nodes, 8 GPUs "
                "each)\n",
                dir);
        fflush(out);
        int rc = run_cmd(cmd, log) ? loom_err_set(e, LOOM_EIO, "slurm",
                                                  "the Slurm cluster did not start (see %s)", log)
                                   : run(o, out, dir, bin, base, e);
        snprintf(cmd, sizeof cmd, "scancel -u root; bash '%s' down '%s/cluster'", script, dir);
        run_cmd(cmd, log);
        if (rc == 0 && !o->keep && !o->dir) {
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
                run_cmd(cmd, "/dev/null");
        } else {
                fprintf(out, "data kept in %s\n", dir);
        }
        return rc;
}
