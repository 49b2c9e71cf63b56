/*
 * demo.c - the live demo's orchestration: loomd plus real CPU-bound RL jobs on this machine.
 *
 * The demo starts loomd (a child process serving on 127.0.0.1 with a temporary data dir),
 * submits RL jobs of different shapes, and runs each job as its own process (worker.c) that
 * asks loomd for a run permit before every phase. Declared worst-case phase times come from a
 * calibration of this CPU, so admission uses real numbers.
 *
 * Afterwards each job runs alone on its own pools for a few iterations (the same code, the same
 * loomd), and the final table compares iterations/hour, pool utilisation and cost per
 * iteration. Money uses the cluster's node prices over the demo's wall time.
 *
 * With crash > 0 loomd is killed with SIGKILL that many times at random (seeded) moments and
 * restarted; the demo then checks that every job finished with exactly its iterations.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <jansson.h>

#include "demo_int.h"
#include "loom/client.h"
#include "loom/server.h"

/* ---- job shapes -------------------------------------------------------------------------- */

static const shape shapes[MAX_JOBS] = {
    {"math", "rollout-heavy, long reasoning traces", 64, 256, 40, 2.4, 0.8, 1.25, 10, 120},
    {"code", "training-heavy, short answers", 32, 192, 40, 0.6, 1.6, 1.6, 10, 150},
    /* Short beside math's cycle: it runs several iterations per meta-iteration (multi-rate). */
    {"chat", "small and short, several per meta-iteration", 16, 128, 24, 0.4, 0.4, 2.5, 10, 60},
    /* Needs more host memory on a rollout node than a node has: admission rejects it. */
    {"huge", "70B working set beyond a node's DRAM", 16, 128, 24, 1.0, 1.0, 1.5, 4, 2600},
};

/* ---- loomd as a child process ------------------------------------------------------------ */

typedef struct demo {
        char dir[256];
        int port;
        pid_t loomd;
        double lease_timeout_s;
        FILE *log;
        char why[640];        /* why the last loomd_start failed */
        char state_sock[108]; /* loom-state's socket; empty when the demo moves no state */
        pid_t state;
        uint64_t state_bytes;
} demo;

static void loomd_log(void *arg, const char *line)
{
        FILE *f = arg;
        if (f) {
                fprintf(f, "%.3f %s\n", mono_s() - loom__demo_t0, line);
                fflush(f);
        }
}

/* In the child: serve until SIGTERM. Writes the bound port to fd, or -1 followed by the reason
 * loomd could not start. Never returns. */
static void loomd_child(demo *d, int fd)
{
        sigset_t stop;
        sigemptyset(&stop);
        sigaddset(&stop, SIGTERM);
        sigaddset(&stop, SIGINT);
        pthread_sigmask(SIG_BLOCK, &stop, NULL);
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.data_dir = d->dir;
        cfg.port = d->port;
        cfg.lease_timeout_s = d->lease_timeout_s;
        cfg.log = loomd_log;
        cfg.log_arg = d->log;
        if (d->state_sock[0]) { /* prefetch hints from the dispatch order */
                cfg.state.order = loom__demo_state_order;
                cfg.state.arg = d->state_sock;
        }
        loom_err e = {0};
        loom_server *s = loom_server_new(&cfg, &e);
        int port = -1;
        if (s && loom_server_start(s, &e) == 0)
                port = loom_server_port(s);
        ssize_t w = write(fd, &port, sizeof port);
        if (port <= 0) {
                char why[sizeof d->why];
                int n = snprintf(why, sizeof why, "%s%s%s", e.field, e.field[0] ? ": " : "", e.msg);
                if (n > (int)sizeof why - 1)
                        n = (int)sizeof why - 1;
                w = write(fd, why, (size_t)n);
        }
        close(fd);
        if (s && port > 0 && w == (ssize_t)sizeof port) {
                int sig;
                sigwait(&stop, &sig);
                loom_server_stop(s);
        }
        loom_server_free(s);
        _exit(port > 0 ? 0 : 1);
}

/* Fork loomd and wait until it listens; on failure d->why says why. */
static int loomd_start(demo *d)
{
        d->why[0] = 0;
        int p[2];
        if (pipe(p)) {
                snprintf(d->why, sizeof d->why, "pipe: %s", strerror(errno));
                return -1;
        }
        fflush(loom__demo_out);
        pid_t pid = fork();
        if (pid < 0) {
                snprintf(d->why, sizeof d->why, "fork: %s", strerror(errno));
                close(p[0]);
                close(p[1]);
                return -1;
        }
        if (pid == 0) {
                close(p[0]);
                loomd_child(d, p[1]);
        }
        close(p[1]);
        int port = -1;
        ssize_t r = read(p[0], &port, sizeof port);
        if (r == (ssize_t)sizeof port && port <= 0) {
                size_t got = 0;
                ssize_t k;
                while (got < sizeof d->why - 1 &&
                       (k = read(p[0], d->why + got, sizeof d->why - 1 - got)) > 0)
                        got += (size_t)k;
                d->why[got] = 0;
        }
        close(p[0]);
        d->loomd = pid;
        if (r != (ssize_t)sizeof port || port <= 0) {
                if (!d->why[0])
                        snprintf(d->why, sizeof d->why, "loomd exited before it listened");
                waitpid(pid, NULL, 0);
                d->loomd = 0;
                return -1;
        }
        d->port = port;
        return 0;
}

static void loomd_stop(demo *d, int sig)
{
        if (d->loomd > 0) {
                kill(d->loomd, sig);
                waitpid(d->loomd, NULL, 0);
                d->loomd = 0;
        }
}

/* ---- the parent -------------------------------------------------------------------------- */

typedef struct job_run {
        const shape *sh;
        uint32_t id;
        pid_t pid;
        int fd;
        worker_result res;
        char decision[32];
        int group;
        int rate; /* iterations per meta-iteration */
} job_run;

static char *spec_json(const shape *sh, const char *name, double unit_s, double scale,
                       int iterations, double *roll_units, double *train_units)
{
        /* Token units per token so that the worst case (every response at max_tokens, full
         * batch every step) takes the declared time on this CPU. */
        double worst_tokens = (double)sh->responses * sh->max_tokens;
        *roll_units = sh->t_roll_s * scale / (worst_tokens * unit_s);
        *train_units = sh->t_train_s * scale / (worst_tokens * unit_s);
        json_t *j = json_pack("{s:s,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:i}", "name", name, "rollout_gpus",
                              8, "train_gpus", 8, "t_roll_s", sh->t_roll_s * scale, "t_train_s",
                              sh->t_train_s * scale, "slo", sh->slo, "mem_rollout_gb",
                              sh->mem_roll_gb, "mem_train_gb", 200.0, "iterations", iterations);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return s;
}

static int spawn_worker(job_run *r, const worker_cfg *cfg)
{
        int p[2];
        if (pipe(p))
                return -1;
        fflush(loom__demo_out);
        pid_t pid = fork();
        if (pid < 0) {
                close(p[0]);
                close(p[1]);
                return -1;
        }
        if (pid == 0) {
                close(p[0]);
                _exit(loom__demo_worker_main(cfg, p[1]));
        }
        close(p[1]);
        r->pid = pid;
        r->fd = p[0];
        return 0;
}

static void collect(job_run *r)
{
        if (r->pid <= 0)
                return;
        ssize_t n = read(r->fd, &r->res, sizeof r->res);
        if (n != (ssize_t)sizeof r->res)
                memset(&r->res, 0, sizeof r->res);
        close(r->fd);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
}

/* On a failure path: leave nothing running. */
static void kill_workers(job_run *runs, int n)
{
        for (int i = 0; i < n; i++)
                if (runs[i].pid > 0) {
                        kill(runs[i].pid, SIGKILL);
                        collect(&runs[i]);
                }
}

/* cpu0/cpu1 busy jiffies from /proc/stat. */
static void cpu_busy(long long busy[2], long long total[2])
{
        busy[0] = busy[1] = total[0] = total[1] = 0;
        FILE *f = fopen("/proc/stat", "r");
        if (!f)
                return;
        char line[256];
        while (fgets(line, sizeof line, f)) {
                int cpu;
                long long u, ni, sy, id, io, irq, sirq, st;
                if (sscanf(line, "cpu%d %lld %lld %lld %lld %lld %lld %lld %lld", &cpu, &u, &ni,
                           &sy, &id, &io, &irq, &sirq, &st) == 9 &&
                    cpu >= 0 && cpu < 2) {
                        busy[cpu] = u + ni + sy + irq + sirq + st;
                        total[cpu] = busy[cpu] + id + io;
                }
        }
        fclose(f);
}

static void fill_worker(worker_cfg *w, const demo *d, const loom_demo_opts *o, const shape *sh,
                        uint32_t id, int iters, double ru, double tu)
{
        memset(w, 0, sizeof *w);
        w->sh = sh;
        w->job = id;
        w->iterations = iters;
        w->roll_units = ru;
        w->train_units = tu;
        w->seed = o->seed * 1000003 + id;
        w->quiet = o->quiet;
        snprintf(w->url, sizeof w->url, "http://127.0.0.1:%d", d->port);
        snprintf(w->state_sock, sizeof w->state_sock, "%s", d->state_sock);
        w->state_bytes = d->state_bytes;
}

static int submit(loom_client *c, const char *spec, job_run *r)
{
        char *reply = NULL;
        int rc = loom_client_submit(c, spec, NULL, &r->id, &reply);
        json_error_t je;
        json_t *j = reply ? json_loads(reply, 0, &je) : NULL;
        json_t *dec = json_object_get(j, "decision");
        snprintf(r->decision, sizeof r->decision, "%s",
                 json_string_value(json_object_get(dec, "decision")) ?: "rejected");
        r->group = (int)json_integer_value(json_object_get(dec, "group"));
        r->rate = (int)json_integer_value(json_object_get(dec, "rate"));
        json_decref(j);
        loom_client_free_string(reply);
        return rc;
}

/* Kill loomd at seeded random moments while the workers run; restart it each time. */
static int chaos(demo *d, const loom_demo_opts *o, job_run *runs, int n)
{
        uint64_t rs = o->seed * 7919 + 17;
        for (int k = 0; k < o->crash; k++) {
                double wait = 1.0 + 3.0 * rng_unit(&rs);
                usleep((useconds_t)(wait * 1e6));
                bool any = false;
                for (int i = 0; i < n; i++)
                        any = any || (runs[i].pid > 0 && waitpid(runs[i].pid, NULL, WNOHANG) == 0);
                if (!any)
                        break;
                loom__demo_say("loomd  SIGKILL (crash %d of %d)", k + 1, o->crash);
                loomd_stop(d, SIGKILL);
                usleep(300000);
                if (loomd_start(d)) {
                        loom__demo_say("loomd  restart failed");
                        return -1;
                }
                loom__demo_say("loomd  restarted on port %d, state recovered from %s", d->port,
                               d->dir);
        }
        return 0;
}

static double job_rate(const worker_result *r)
{
        double dt = r->t_end - r->t_first;
        return dt > 0 ? r->iterations * 3600.0 / dt : 0;
}

static void rm_tree(const char *dir)
{
        char p[512];
        static const char *const files[] = {"loom.db", "loom.db-wal", "loom.db-shm", "loomd.log",
                                            "state.sock"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
                snprintf(p, sizeof p, "%s/%s", dir, files[i]);
                unlink(p);
        }
        snprintf(p, sizeof p, "%s/state", dir); /* loom-state's disk tier */
        DIR *sd = opendir(p);
        for (struct dirent *de; sd && (de = readdir(sd));) {
                char f[600];
                snprintf(f, sizeof f, "%s/state/%.255s", dir, de->d_name);
                if (de->d_name[0] != '.')
                        unlink(f);
        }
        if (sd)
                closedir(sd);
        rmdir(p);
        rmdir(dir);
}

static int verify(loom_client *c, job_run *runs, int n)
{
        int bad = 0;
        for (int i = 0; i < n; i++) {
                char path[64], *reply = NULL;
                snprintf(path, sizeof path, "/v1/jobs/%u", runs[i].id);
                if (loom_client_get(c, path, &reply)) {
                        bad++;
                        continue;
                }
                int64_t done = loom__demo_reply_int(reply, "iterations_done", -1);
                int64_t want = loom__demo_reply_int(reply, "iterations", -2);
                bool fin = loom__demo_reply_finished(reply);
                loom_client_free_string(reply);
                if (!fin || done != want || runs[i].res.iterations != want ||
                    runs[i].res.bad_count) {
                        loom__demo_say(
                            "check  %s: loomd counted %lld of %lld iterations, the worker %d",
                            runs[i].sh->name, (long long)done, (long long)want,
                            runs[i].res.iterations);
                        bad++;
                }
        }
        return bad;
}

static void print_table(FILE *out, const loom_demo_opts *o, job_run *shared, job_run *alone, int n,
                        double wall, double util_lease[2], double util_cpu[2], double node_h)
{
        fprintf(out, "\n%-5s %-12s %5s %8s %8s %8s %8s %8s %10s\n", "job", "placed", "iters",
                "s/iter", "bound", "alone", "iter/h", "alone/h", "alone $/it");
        int total_iters = 0;
        double alone_cost = 0;
        for (int i = 0; i < n; i++) {
                const shape *sh = shared[i].sh;
                double rs = job_rate(&shared[i].res), ra = job_rate(&alone[i].res);
                double t_alone = ra > 0 ? 3600.0 / ra : 0;
                double cost_alone = node_h * t_alone / 3600.0;
                total_iters += shared[i].res.iterations;
                alone_cost += cost_alone * shared[i].res.iterations;
                fprintf(out, "%-5s %-12s %5d %8.2f %8.2f %8.2f %8.0f %8.0f %10.4f\n", sh->name,
                        shared[i].decision, shared[i].res.iterations, rs > 0 ? 3600.0 / rs : 0,
                        sh->slo * (sh->t_roll_s + sh->t_train_s) * o->scale, t_alone, rs, ra,
                        cost_alone);
        }
        fprintf(out,
                "(s/iter: measured co-executed iteration time; bound: SLO x declared worst-case "
                "solo time, what admission guarantees)\n");
        double shared_cost = node_h * wall / 3600.0;
        fprintf(out,
                "\npool utilisation while shared: rollout cpu%d %.0f%% leased, %.0f%% busy; "
                "training cpu%d %.0f%% leased, %.0f%% busy\n",
                CPU_ROLLOUT, 100 * util_lease[0], 100 * util_cpu[0], CPU_TRAIN, 100 * util_lease[1],
                100 * util_cpu[1]);
        if (total_iters > 0 && alone_cost > 0)
                fprintf(out,
                        "cost per iteration at $%.2f/h for one rollout + one training node:\n"
                        "  shared  $%.4f  (%d iterations in %.1f s on one group)\n"
                        "  alone   $%.4f  (the same iterations, each job on its own two nodes)\n"
                        "  saving  %.0f%%\n",
                        node_h, shared_cost / total_iters, total_iters, wall,
                        alone_cost / total_iters, 100 * (1 - shared_cost / alone_cost));
}

static int run_demo(const loom_demo_opts *o, demo *d, FILE *out, loom_err *e)
{
        pin_self(CPU_ROLLOUT);
        double unit_s = loom__demo_calibrate();
        cpu_set_t all;
        CPU_ZERO(&all);
        CPU_SET(CPU_ROLLOUT, &all);
        CPU_SET(CPU_TRAIN, &all);
        sched_setaffinity(0, sizeof all, &all);
        if (o->state_mib > 0) {
                char sdir[300];
                snprintf(sdir, sizeof sdir, "%s/state", d->dir);
                snprintf(d->state_sock, sizeof d->state_sock, "%.96s/state.sock", d->dir);
                d->state_bytes = (uint64_t)o->state_mib << 20;
                d->state = loom__demo_state_start(sdir, d->state_sock, d->state_bytes);
                if (d->state <= 0)
                        return loom_err_set(e, LOOM_EIO, NULL, "cannot start loom-state in %s",
                                            sdir);
                fprintf(out,
                        "loom-state: %d MiB of state per job, offloaded on release and loaded on "
                        "grant; the timeline notes where each switch found it\n",
                        o->state_mib);
        }
        if (loomd_start(d))
                return loom_err_set(e, LOOM_EIO, NULL, "cannot start loomd in %s: %s", d->dir,
                                    d->why);
        fprintf(out,
                "loom demo: loomd on 127.0.0.1:%d, data in %s; 1 token unit = %.2f us\n"
                "rollout pool = cpu%d, training pool = cpu%d; one node of 8 GPUs each\n"
                "dashboard: http://127.0.0.1:%d/dashboard\n\n",
                d->port, d->dir, unit_s * 1e6, CPU_ROLLOUT, CPU_TRAIN, d->port);
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", d->port);
        loom_client *c = loom_client_new(url, NULL);
        if (!c)
                return loom_err_set(e, LOOM_ENOMEM, NULL, "out of memory");

        job_run shared[MAX_JOBS] = {0}, alone[MAX_JOBS] = {0};
        worker_cfg wc[MAX_JOBS];
        int n = 0;
        for (int i = 0; i < o->jobs; i++) {
                const shape *sh = &shapes[i];
                double ru, tu;
                char *spec = spec_json(sh, sh->name, unit_s, o->scale, sh->iterations, &ru, &tu);
                job_run r = {.sh = sh};
                int rc = spec ? submit(c, spec, &r) : LOOM_ENOMEM;
                free(spec);
                if (rc == LOOM_EREJECT || rc == LOOM_EINVAL) {
                        fprintf(out, "submit %-5s (%s): rejected: %s\n", sh->name, sh->what,
                                loom_client_error(c));
                        continue;
                }
                if (rc) {
                        loom_err_set(e, rc, NULL, "submit: %s", loom_client_error(c));
                        loom_client_free(c);
                        return rc;
                }
                fprintf(out,
                        "submit %-5s (%s): job %u, %s, group %d, rate %d; worst case rollout "
                        "%.2fs, train %.2fs, SLO %.2f\n",
                        sh->name, sh->what, r.id, r.decision, r.group, r.rate > 1 ? r.rate : 1,
                        sh->t_roll_s * o->scale, sh->t_train_s * o->scale, sh->slo);
                fill_worker(&wc[n], d, o, sh, r.id, sh->iterations, ru, tu);
                shared[n++] = r;
        }
        double cost_h = loom__demo_cluster_cost(c);
        fprintf(out, "\n-- shared run: every job's phases under loomd's permits --\n");
        fflush(out);
        long long b0[2], t0[2], b1[2], t1[2];
        cpu_busy(b0, t0);
        double start = mono_s();
        for (int i = 0; i < n; i++)
                if (spawn_worker(&shared[i], &wc[i])) {
                        loom_err_set(e, LOOM_EIO, NULL, "fork: %s", strerror(errno));
                        kill_workers(shared, i);
                        loom_client_free(c);
                        return LOOM_EIO;
                }
        int rc = o->crash ? chaos(d, o, shared, n) : 0;
        if (rc)
                kill_workers(shared, n); /* loomd is gone: nothing left to wait for */
        for (int i = 0; i < n; i++)
                collect(&shared[i]);
        double wall = mono_s() - start;
        cpu_busy(b1, t1);
        int bad = rc ? 1 : verify(c, shared, n);

        fprintf(out, "\n-- alone: each job on its own pools, %d iterations --\n", o->alone_iters);
        fflush(out);
        for (int i = 0; i < n && !bad; i++) {
                double ru, tu;
                char name[32];
                snprintf(name, sizeof name, "%s-alone", shared[i].sh->name);
                char *spec =
                    spec_json(shared[i].sh, name, unit_s, o->scale, o->alone_iters, &ru, &tu);
                alone[i].sh = shared[i].sh;
                if (!spec || submit(c, spec, &alone[i])) {
                        free(spec);
                        bad++;
                        break;
                }
                free(spec);
                worker_cfg w;
                fill_worker(&w, d, o, shared[i].sh, alone[i].id, o->alone_iters, ru, tu);
                if (spawn_worker(&alone[i], &w)) {
                        bad++;
                        break;
                }
                collect(&alone[i]);
                bad += !alone[i].res.ok;
        }
        loom_client_free(c);
        loomd_stop(d, SIGTERM);

        double lease[2] = {0, 0}, cpu[2];
        for (int i = 0; i < n; i++)
                for (int p = 0; p < 2; p++)
                        lease[p] += shared[i].res.busy[p] / wall;
        for (int p = 0; p < 2; p++)
                cpu[p] = t1[p] > t0[p] ? (double)(b1[p] - b0[p]) / (double)(t1[p] - t0[p]) : 0;
        if (!bad)
                print_table(out, o, shared, alone, n, wall, lease, cpu, cost_h);
        int redone = 0;
        for (int i = 0; i < n; i++)
                redone += shared[i].res.redone;
        if (o->crash)
                fprintf(out,
                        "\ncrash check: loomd killed %d times; %d phases redone after lost "
                        "leases; every job finished with exactly its iterations: %s\n",
                        o->crash, redone, bad ? "NO" : "yes");
        if (rc) /* the reason the restart failed; the timeline said when */
                return loom_err_set(e, LOOM_EIO, NULL, "loomd: %s", d->why);
        if (bad)
                return loom_err_set(e, LOOM_ECORRUPT, NULL,
                                    "%d job run(s) did not finish with exactly their iterations",
                                    bad);
        return 0;
}

void loom_demo_opts_default(loom_demo_opts *o)
{
        *o =
            (loom_demo_opts){.seed = 1, .scale = 1.0, .jobs = 4, .alone_iters = 3, .state_mib = 16};
}

static int check_opts(const loom_demo_opts *o, loom_err *e)
{
        if (o->jobs < 3 || o->jobs > MAX_JOBS)
                return loom_err_set(e, LOOM_EINVAL, "jobs", "must be 3 or 4, got %d", o->jobs);
        if (!(o->scale >= 0.1 && o->scale <= 10))
                return loom_err_set(e, LOOM_EINVAL, "scale", "must be in [0.1, 10], got %g",
                                    o->scale);
        if (o->alone_iters < 1 || o->alone_iters > 100)
                return loom_err_set(e, LOOM_EINVAL, "alone_iters", "must be in [1, 100], got %d",
                                    o->alone_iters);
        if (o->crash < 0 || o->crash > 20)
                return loom_err_set(e, LOOM_EINVAL, "crash", "must be in [0, 20], got %d",
                                    o->crash);
        if (o->state_mib < 0 || o->state_mib > 4096)
                return loom_err_set(e, LOOM_EINVAL, "state_mib", "must be in [0, 4096], got %d",
                                    o->state_mib);
        return 0;
}

int loom_demo_run(const loom_demo_opts *o, FILE *out, loom_err *e)
{
        loom_err_clear(e);
        int rc = check_opts(o, e);
        if (rc)
                return rc;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        if (ncpu < 2)
                return loom_err_set(e, LOOM_ESTATE, NULL,
                                    "needs 2 CPUs (one per pool), this machine has %ld", ncpu);
        loom__demo_t0 = mono_s();
        loom__demo_out = out;
        demo d = {.lease_timeout_s = 10};
        if (o->dir) {
                snprintf(d.dir, sizeof d.dir, "%s", o->dir);
        } else {
                snprintf(d.dir, sizeof d.dir, "/tmp/loom-demo-XXXXXX");
                if (!mkdtemp(d.dir))
                        return loom_err_set(e, LOOM_EIO, NULL, "mkdtemp: %s", strerror(errno));
        }
        char logp[300];
        snprintf(logp, sizeof logp, "%s/loomd.log", d.dir);
        if (mkdir(d.dir, 0755) && errno != EEXIST)
                return loom_err_set(e, LOOM_EIO, NULL, "%s: %s", d.dir, strerror(errno));
        d.log = fopen(logp, "a");
        signal(SIGPIPE, SIG_IGN);
        rc = run_demo(o, &d, out, e);
        loomd_stop(&d, SIGTERM);
        loom__demo_state_stop(d.state);
        if (d.log)
                fclose(d.log);
        if (!o->dir && !o->keep && rc == 0)
                rm_tree(d.dir);
        else
                fprintf(out, "data kept in %s\n", d.dir);
        fflush(out);
        return rc;
}
