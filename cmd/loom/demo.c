/*
 * demo.c - `loom demo`: loomd plus real CPU-bound RL jobs on this machine.
 *
 * The demo starts loomd (a child process serving on 127.0.0.1 with a temporary data dir),
 * submits RL jobs of different shapes, and runs each job as its own process that asks loomd
 * for a run permit before every phase, exactly as a job on a GPU cluster would:
 *
 *   - rollout generates a batch of token sequences with heavy-tailed lengths (Pareto, capped
 *     at max_tokens) using the job's current weights, reports progress after each finished
 *     response and honours tail-migration advice;
 *   - train does work proportional to the tokens generated and updates the weights.
 *
 * What is simulated: the GPU pools. CPU 0 stands for the rollout node, CPU 1 for the training
 * node (sched_setaffinity), and "squeezing the tail onto k of 8 GPUs" is renicing the rollout
 * thread so the scheduler's fair share gives it about k/8 of CPU 0 while the next job's rollout
 * takes the rest. A decode step costs at least batch/8 token units however few sequences are
 * left (a step streams the weights whatever the batch), which is what makes tails wasteful.
 * Declared worst-case phase times come from a calibration of this CPU, so admission uses real
 * numbers. Between phases a worker sleeps in a long-poll keeping its state in memory (the
 * paper's lightweight suspension with warm state).
 *
 * Afterwards each job runs alone on its own pools for a few iterations (the same code, the same
 * loomd), and the final table compares iterations/hour, pool utilisation and cost per
 * iteration. Money uses the cluster's node prices over the demo's wall time.
 *
 * --crash N kills loomd with SIGKILL N times at random (seeded) moments and restarts it; the
 * demo then checks that every job finished with exactly its iterations.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd.h"
#include "loom/client.h"
#include "loom/server.h"

#define DIM 24 /* the toy model is a DIM x DIM matrix */
#define MAX_JOBS 4
#define CPU_ROLLOUT 0
#define CPU_TRAIN 1

/* ---- job shapes ----------------------------------------------------------------------------- */

typedef struct shape {
        const char *name;
        const char *what;
        int responses;      /* batch size of a rollout */
        int max_tokens;     /* cap of a response */
        double tail_xm;     /* Pareto scale of response lengths, in tokens */
        double t_roll_s;    /* declared worst case at scale 1 */
        double t_train_s;   /* declared worst case at scale 1 */
        double slo;         /* tolerated slowdown */
        int iterations;     /* shared run */
        double mem_roll_gb; /* host working set per rollout node */
} shape;

static const shape shapes[MAX_JOBS] = {
    {"math", "rollout-heavy, long reasoning traces", 64, 256, 40, 2.4, 0.8, 1.25, 10, 120},
    {"code", "training-heavy, short answers", 32, 192, 40, 0.6, 1.6, 1.6, 10, 150},
    {"chat", "small and tolerant", 16, 128, 24, 0.4, 0.4, 5.0, 10, 60},
    /* Needs more host memory on a rollout node than a node has: admission rejects it. */
    {"huge", "70B working set beyond a node's DRAM", 16, 128, 24, 1.0, 1.0, 1.5, 4, 2600},
};

/* ---- the toy model and its CPU work ---------------------------------------------------------- */

typedef struct model {
        float w[DIM][DIM];
} model;

/* One token unit: a matrix-vector product and a squashing step. */
static float unit(const model *m, float *x)
{
        float y[DIM];
        for (int i = 0; i < DIM; i++) {
                float acc = 0;
                for (int k = 0; k < DIM; k++)
                        acc += m->w[i][k] * x[k];
                y[i] = acc / (1.0f + fabsf(acc));
        }
        memcpy(x, y, sizeof y);
        return y[0];
}

static double mono_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void model_init(model *m, uint64_t seed)
{
        for (int i = 0; i < DIM; i++)
                for (int k = 0; k < DIM; k++) {
                        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                        m->w[i][k] = (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5);
                }
}

/* Seconds per token unit on this CPU (pinned to the rollout CPU, median of 5 runs). */
static double calibrate(void)
{
        model m;
        model_init(&m, 1);
        float x[DIM] = {1};
        double best[5];
        volatile float sink = 0;
        for (int r = 0; r < 5; r++) {
                double t0 = mono_s();
                for (int i = 0; i < 20000; i++)
                        sink += unit(&m, x);
                best[r] = (mono_s() - t0) / 20000;
        }
        for (int i = 0; i < 5; i++)
                for (int k = i + 1; k < 5; k++)
                        if (best[k] < best[i]) {
                                double t = best[i];
                                best[i] = best[k];
                                best[k] = t;
                        }
        return best[2];
}

static uint64_t rng_next(uint64_t *s)
{
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * 2685821657736338717ULL;
}

static double rng_unit(uint64_t *s)
{
        return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static void pin_self(int cpu)
{
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity((pid_t)syscall(SYS_gettid), sizeof set, &set); /* best effort */
}

/* ---- output -----------------------------------------------------------------------------------
 */

static double g_t0; /* demo start (monotonic), inherited by the workers */

/* One line, one write(2), so lines from several processes never interleave. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
        char line[512];
        int n = snprintf(line, sizeof line, "[%6.2fs] ", mono_s() - g_t0);
        va_list ap;
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof line - 2)
                n = (int)sizeof line - 2;
        line[n++] = '\n';
        ssize_t w = write(STDOUT_FILENO, line, (size_t)n);
        (void)w;
}

/* ---- the worker: one RL job as a process ------------------------------------------------------
 */

typedef struct worker_cfg {
        const shape *sh;
        uint32_t job;
        int iterations;
        double roll_units; /* token units per generated token */
        double train_units;
        char url[64];
        uint64_t seed;
        bool quiet;
} worker_cfg;

/* What a worker reports to the parent at exit (through a pipe). */
typedef struct worker_result {
        uint32_t job;
        int iterations; /* train releases acknowledged */
        int redone;     /* phases redone after a lease was lost */
        int migrations; /* tails squeezed */
        double t_first; /* first permit (monotonic) */
        double t_end;   /* last release */
        double busy[2]; /* seconds holding rollout / train leases */
        int64_t tokens; /* generated in acknowledged iterations */
        int ok;         /* 1 if the job finished normally */
        int bad_count;  /* iteration numbers that did not advance by exactly one */
} worker_result;

typedef struct rollout_ctx {
        const worker_cfg *cfg;
        loom_client *c;
        const loom_client_lease *l;
        const model *m;
        int iter;
        int64_t tokens;
        bool migrated, lost;
        int keep_gpus;
} rollout_ctx;

/* Nice level whose CFS weight gives about `share` of a CPU against one nice-0 thread. */
static int nice_for_share(double share)
{
        static const int weight[40] = {88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705,
                                       14949, 11916, 9548,  7620,  6100,  4904,  3906,  3121,
                                       2501,  1991,  1586,  1277,  1024,  820,   655,   526,
                                       423,   335,   272,   215,   172,   137,   110,   87,
                                       70,    56,    45,    36,    29,    23,    18,    15};
        int best = 19;
        double err = 1e9;
        for (int n = 0; n <= 19; n++) {
                double s = weight[n + 20] / (double)(weight[n + 20] + 1024);
                if (fabs(s - share) < err) {
                        err = fabs(s - share);
                        best = n;
                }
        }
        return best;
}

static void *rollout_main(void *arg)
{
        rollout_ctx *x = arg;
        const worker_cfg *cfg = x->cfg;
        const shape *sh = cfg->sh;
        pin_self(CPU_ROLLOUT);
        int n = sh->responses;
        int len[256], got[256];
        uint64_t rs = cfg->seed ^ ((uint64_t)x->iter * 0x9E3779B97F4A7C15ULL);
        for (int i = 0; i < n; i++) {
                /* Pareto(alpha = 1) lengths: most answers short, a few run to the cap. */
                double v = sh->tail_xm / rng_unit(&rs);
                len[i] = v > sh->max_tokens ? sh->max_tokens : (int)ceil(v);
                got[i] = 0;
        }
        float state[DIM] = {1};
        int done = 0, floor_active = n / 8 > 0 ? n / 8 : 1;
        double last_report = 0;
        volatile float sink = 0;
        while (done < n && !x->lost) {
                int active = 0, finished_now = 0;
                for (int i = 0; i < n; i++) {
                        if (got[i] >= len[i])
                                continue;
                        active++;
                        got[i]++;
                        x->tokens++;
                        if (got[i] == len[i])
                                finished_now++;
                }
                /* Once squeezed onto its kept GPUs the tail no longer streams the weights of
                 * the whole node: a step costs only its live sequences. */
                int fl = x->migrated ? 1 : floor_active;
                double units = cfg->roll_units * (active > fl ? active : fl);
                for (int u = 0; u < (int)units; u++)
                        sink += unit(x->m, state);
                done += finished_now;
                double now = mono_s();
                if (finished_now && (now - last_report > 0.02 || done == n)) {
                        last_report = now;
                        int keep = 0;
                        int rc = loom_client_progress(x->c, x->l, done, n, &keep);
                        if (rc == LOOM_ENOENT)
                                x->lost = true;
                        else if (rc == 1 && !x->migrated) {
                                x->migrated = true;
                                x->keep_gpus = keep;
                                double share = keep / (double)(x->l->gpus > 0 ? x->l->gpus : 8);
                                setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
                                            nice_for_share(share));
                        }
                }
        }
        return NULL;
}

static void train(const worker_cfg *cfg, model *m, int64_t tokens)
{
        pin_self(CPU_TRAIN);
        float x[DIM] = {0.5f};
        int64_t units = (int64_t)(cfg->train_units * (double)tokens);
        for (int64_t u = 0; u < units; u++) {
                float y = unit(m, x);
                /* a tiny gradient step keeps the work real and the weights moving */
                int i = (int)(u % DIM), k = (int)((u / DIM) % DIM);
                m->w[i][k] -= 1e-6f * y * x[k];
        }
}

static int64_t reply_int(const char *reply, const char *key, int64_t dflt)
{
        json_error_t je;
        json_t *j = reply ? json_loads(reply, 0, &je) : NULL;
        json_t *v = json_object_get(j, key);
        int64_t r = json_is_integer(v) ? json_integer_value(v) : dflt;
        json_decref(j);
        return r;
}

static bool reply_finished(const char *reply)
{
        json_error_t je;
        json_t *j = reply ? json_loads(reply, 0, &je) : NULL;
        const char *st = json_string_value(json_object_get(j, "state"));
        bool fin = st && strcmp(st, "running") && strcmp(st, "queued");
        json_decref(j);
        return fin;
}

/* Run one phase until it is acknowledged; returns 0, 1 when the job has ended, <0 on error. */
static int run_rollout(const worker_cfg *cfg, loom_client *c, model *m, int iter,
                       worker_result *res, int64_t *tokens)
{
        for (;;) {
                loom_client_lease l;
                int rc = loom_client_acquire(c, cfg->job, "rollout", -1, &l);
                if (rc == LOOM_ESTATE)
                        return 1;
                if (rc)
                        return rc;
                double t0 = mono_s();
                if (res->t_first == 0)
                        res->t_first = t0;
                rollout_ctx x = {.cfg = cfg, .c = c, .l = &l, .m = m, .iter = iter};
                pthread_t th;
                if (pthread_create(&th, NULL, rollout_main, &x))
                        return LOOM_ENOMEM;
                pthread_join(th, NULL);
                rc = x.lost ? LOOM_ENOENT : loom_client_release(c, &l, true, NULL);
                double dt = mono_s() - t0;
                if (rc == LOOM_ENOENT) {
                        res->redone++;
                        if (!cfg->quiet)
                                say("%-5s it %2d/%-2d rollout lost its lease (loomd restarted); "
                                    "redoing",
                                    cfg->sh->name, iter, cfg->iterations);
                        continue;
                }
                if (rc)
                        return rc;
                res->busy[0] += dt;
                res->migrations += x.migrated;
                *tokens = x.tokens;
                if (!cfg->quiet) {
                        char tail[64] = "";
                        if (x.migrated)
                                snprintf(tail, sizeof tail, "  tail -> %d GPU", x.keep_gpus);
                        say("%-5s it %2d/%-2d rollout  cpu%d %5.2fs  %6lld tokens%s", cfg->sh->name,
                            iter, cfg->iterations, CPU_ROLLOUT, dt, (long long)x.tokens, tail);
                }
                return 0;
        }
}

static int run_train(const worker_cfg *cfg, loom_client *c, model *m, int iter, worker_result *res,
                     int64_t tokens, int64_t *last_done)
{
        for (;;) {
                loom_client_lease l;
                int rc = loom_client_acquire(c, cfg->job, "train", -1, &l);
                if (rc == LOOM_ESTATE)
                        return 1;
                if (rc)
                        return rc;
                double t0 = mono_s();
                model next = *m; /* the checkpoint stays intact until loomd acknowledges */
                train(cfg, &next, tokens);
                char *reply = NULL;
                rc = loom_client_release(c, &l, true, &reply);
                double dt = mono_s() - t0;
                if (rc == LOOM_ENOENT) {
                        res->redone++;
                        if (!cfg->quiet)
                                say("%-5s it %2d/%-2d train lost its lease (loomd restarted); "
                                    "redoing",
                                    cfg->sh->name, iter, cfg->iterations);
                        continue;
                }
                if (rc)
                        return rc;
                *m = next;
                res->busy[1] += dt;
                res->iterations++;
                res->tokens += tokens;
                res->t_end = mono_s();
                int64_t done = reply_int(reply, "iterations_done", -1);
                if (done != *last_done + 1)
                        res->bad_count++;
                *last_done = done;
                bool fin = reply_finished(reply);
                loom_client_free_string(reply);
                if (!cfg->quiet)
                        say("%-5s it %2d/%-2d train    cpu%d %5.2fs", cfg->sh->name, iter,
                            cfg->iterations, CPU_TRAIN, dt);
                return fin ? 1 : 0;
        }
}

static int worker_main(const worker_cfg *cfg, int out_fd)
{
        worker_result res = {.job = cfg->job};
        loom_client_opts o;
        loom_client_opts_default(&o);
        o.retry_for_s = 30;
        loom_client *c = loom_client_new(cfg->url, &o);
        model m;
        model_init(&m, cfg->seed);
        int64_t last_done = 0;
        int rc = c ? 0 : LOOM_ENOMEM;
        for (int it = 1; !rc && it <= cfg->iterations + 1; it++) {
                int64_t tokens = 0;
                rc = run_rollout(cfg, c, &m, it, &res, &tokens);
                if (!rc)
                        rc = run_train(cfg, c, &m, it, &res, tokens, &last_done);
        }
        res.ok = rc == 1 && res.iterations == cfg->iterations;
        if (rc < 0)
                say("%-5s worker stopped: %s", cfg->sh->name,
                    c ? loom_client_error(c) : "no memory");
        loom_client_free(c);
        ssize_t w = write(out_fd, &res, sizeof res);
        return w == (ssize_t)sizeof res && res.ok ? 0 : 1;
}

/* ---- loomd as a child process ------------------------------------------------------------------
 */

typedef struct demo {
        char dir[256];
        int port;
        pid_t loomd;
        double lease_timeout_s;
        FILE *log;
} demo;

static void loomd_log(void *arg, const char *line)
{
        FILE *f = arg;
        if (f) {
                fprintf(f, "%.3f %s\n", mono_s() - g_t0, line);
                fflush(f);
        }
}

/* In the child: serve until SIGTERM. Writes the bound port to fd. Never returns. */
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
        loom_err e;
        loom_server *s = loom_server_new(&cfg, &e);
        int port = -1;
        if (!s || loom_server_start(s, &e)) {
                fprintf(stderr, "loom demo: loomd: %s%s%s\n", e.field, e.field[0] ? ": " : "",
                        e.msg);
        } else {
                port = loom_server_port(s);
        }
        ssize_t w = write(fd, &port, sizeof port);
        close(fd);
        if (s && port > 0 && w == (ssize_t)sizeof port) {
                int sig;
                sigwait(&stop, &sig);
                loom_server_stop(s);
        }
        loom_server_free(s);
        _exit(port > 0 ? 0 : 1);
}

static int loomd_start(demo *d)
{
        int p[2];
        if (pipe(p))
                return -1;
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                close(p[0]);
                loomd_child(d, p[1]);
        }
        close(p[1]);
        int port = -1;
        ssize_t r = read(p[0], &port, sizeof port);
        close(p[0]);
        d->loomd = pid;
        if (r != (ssize_t)sizeof port || port <= 0) {
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

/* ---- the parent
 * ---------------------------------------------------------------------------------- */

typedef struct job_run {
        const shape *sh;
        uint32_t id;
        pid_t pid;
        int fd;
        worker_result res;
        char decision[32];
        int group;
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
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
                close(p[0]);
                close(p[1]);
                return -1;
        }
        if (pid == 0) {
                close(p[0]);
                _exit(worker_main(cfg, p[1]));
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

typedef struct opts {
        uint64_t seed;
        double scale;
        int jobs;
        int crash;
        int alone_iters;
        bool keep, quiet;
        const char *dir;
} opts;

static void usage(FILE *f)
{
        fprintf(f, "usage: loom demo [options]\n"
                   "\n"
                   "Starts loomd on a temporary data dir and runs RL jobs of different shapes as\n"
                   "separate processes doing real CPU work: rollouts on CPU 0 (the rollout pool),\n"
                   "training on CPU 1 (the training pool), each phase under a run permit from\n"
                   "loomd. Then runs each job alone for comparison and prints a table. About a\n"
                   "minute; leaves nothing running.\n"
                   "\n"
                   "options:\n"
                   "  --jobs N        3 or 4 (the 4th is rejected at admission; default 4)\n"
                   "  --seed N        response lengths and crash times (default 1)\n"
                   "  --scale X       multiply every phase time (default 1.0)\n"
                   "  --alone N       iterations of each solo run (default 3)\n"
                   "  --crash N       SIGKILL loomd N times during the shared run and restart it\n"
                   "  --data-dir DIR  use DIR instead of a temporary directory (kept)\n"
                   "  --keep          keep the temporary directory\n"
                   "  --quiet         no timeline, only the summary\n"
                   "  --help          this text\n");
}

static int parse_opts(int argc, char **argv, opts *o)
{
        static const struct option lo[] = {
            {"jobs", required_argument, NULL, 'j'},  {"seed", required_argument, NULL, 's'},
            {"scale", required_argument, NULL, 'x'}, {"alone", required_argument, NULL, 'a'},
            {"crash", required_argument, NULL, 'c'}, {"data-dir", required_argument, NULL, 'd'},
            {"keep", no_argument, NULL, 'k'},        {"quiet", no_argument, NULL, 'q'},
            {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
        };
        *o = (opts){.seed = 1, .scale = 1.0, .jobs = 4, .alone_iters = 3};
        optind = 1;
        int ch;
        char *end;
        while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
                switch (ch) {
                case 'j':
                        o->jobs = (int)strtol(optarg, &end, 10);
                        if (*end || o->jobs < 3 || o->jobs > 4)
                                return fprintf(stderr, "loom demo: --jobs must be 3 or 4\n"), 2;
                        break;
                case 's':
                        o->seed = strtoull(optarg, &end, 10);
                        if (*end)
                                return fprintf(stderr, "loom demo: --seed: not a number\n"), 2;
                        break;
                case 'x':
                        o->scale = strtod(optarg, &end);
                        if (*end || !(o->scale >= 0.1 && o->scale <= 10))
                                return fprintf(stderr, "loom demo: --scale in [0.1, 10]\n"), 2;
                        break;
                case 'a':
                        o->alone_iters = (int)strtol(optarg, &end, 10);
                        if (*end || o->alone_iters < 1 || o->alone_iters > 100)
                                return fprintf(stderr, "loom demo: --alone in [1, 100]\n"), 2;
                        break;
                case 'c':
                        o->crash = (int)strtol(optarg, &end, 10);
                        if (*end || o->crash < 0 || o->crash > 20)
                                return fprintf(stderr, "loom demo: --crash in [0, 20]\n"), 2;
                        break;
                case 'd':
                        o->dir = optarg;
                        break;
                case 'k':
                        o->keep = true;
                        break;
                case 'q':
                        o->quiet = true;
                        break;
                case 'h':
                        usage(stdout);
                        return -1;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "loom demo: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }
        return 0;
}

static void fill_worker(worker_cfg *w, const demo *d, const opts *o, const shape *sh, uint32_t id,
                        int iters, double ru, double tu)
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
        json_decref(j);
        loom_client_free_string(reply);
        return rc;
}

/* Kill loomd at seeded random moments while the workers run; restart it each time. */
static int chaos(demo *d, const opts *o, job_run *runs, int n)
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
                say("loomd  SIGKILL (crash %d of %d)", k + 1, o->crash);
                loomd_stop(d, SIGKILL);
                usleep(300000);
                if (loomd_start(d)) {
                        say("loomd  restart failed");
                        return -1;
                }
                say("loomd  restarted on port %d, state recovered from %s", d->port, d->dir);
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
        static const char *const files[] = {"loom.db", "loom.db-wal", "loom.db-shm", "loomd.log"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
                snprintf(p, sizeof p, "%s/%s", dir, files[i]);
                unlink(p);
        }
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
                int64_t done = reply_int(reply, "iterations_done", -1);
                int64_t want = reply_int(reply, "iterations", -2);
                bool fin = reply_finished(reply);
                loom_client_free_string(reply);
                if (!fin || done != want || runs[i].res.iterations != want ||
                    runs[i].res.bad_count) {
                        say("check  %s: loomd counted %lld of %lld iterations, the worker %d",
                            runs[i].sh->name, (long long)done, (long long)want,
                            runs[i].res.iterations);
                        bad++;
                }
        }
        return bad;
}

static void print_table(const opts *o, job_run *shared, job_run *alone, int n, double wall,
                        double util_lease[2], double util_cpu[2], double node_h)
{
        printf("\n%-5s %-12s %5s %8s %8s %8s %8s %8s %10s\n", "job", "placed", "iters", "s/iter",
               "bound", "alone", "iter/h", "alone/h", "alone $/it");
        int total_iters = 0;
        double alone_cost = 0;
        for (int i = 0; i < n; i++) {
                const shape *sh = shared[i].sh;
                double rs = job_rate(&shared[i].res), ra = job_rate(&alone[i].res);
                double t_alone = ra > 0 ? 3600.0 / ra : 0;
                double cost_alone = node_h * t_alone / 3600.0;
                total_iters += shared[i].res.iterations;
                alone_cost += cost_alone * shared[i].res.iterations;
                printf("%-5s %-12s %5d %8.2f %8.2f %8.2f %8.0f %8.0f %10.4f\n", sh->name,
                       shared[i].decision, shared[i].res.iterations, rs > 0 ? 3600.0 / rs : 0,
                       sh->slo * (sh->t_roll_s + sh->t_train_s) * o->scale, t_alone, rs, ra,
                       cost_alone);
        }
        printf("(s/iter: measured co-executed iteration time; bound: SLO x declared worst-case "
               "solo time, what admission guarantees)\n");
        double shared_cost = node_h * wall / 3600.0;
        printf("\npool utilisation while shared: rollout cpu%d %.0f%% leased, %.0f%% busy; "
               "training cpu%d %.0f%% leased, %.0f%% busy\n",
               CPU_ROLLOUT, 100 * util_lease[0], 100 * util_cpu[0], CPU_TRAIN, 100 * util_lease[1],
               100 * util_cpu[1]);
        if (total_iters > 0 && alone_cost > 0)
                printf("cost per iteration at $%.2f/h for one rollout + one training node:\n"
                       "  shared  $%.4f  (%d iterations in %.1f s on one group)\n"
                       "  alone   $%.4f  (the same iterations, each job on its own two nodes)\n"
                       "  saving  %.0f%%\n",
                       node_h, shared_cost / total_iters, total_iters, wall,
                       alone_cost / total_iters, 100 * (1 - shared_cost / alone_cost));
}

/* $/h of every node provisioned right now (GET /v1/cluster). */
static double get_cost(loom_client *c)
{
        char *reply = NULL;
        double p = 0;
        if (loom_client_get(c, "/v1/cluster", &reply) == 0) {
                json_error_t je;
                json_t *j = json_loads(reply, 0, &je);
                p = json_number_value(json_object_get(j, "cost_per_hour"));
                json_decref(j);
        }
        loom_client_free_string(reply);
        return p;
}

static int run_demo(const opts *o, demo *d)
{
        pin_self(CPU_ROLLOUT);
        double unit_s = calibrate();
        cpu_set_t all;
        CPU_ZERO(&all);
        CPU_SET(CPU_ROLLOUT, &all);
        CPU_SET(CPU_TRAIN, &all);
        sched_setaffinity(0, sizeof all, &all);
        if (loomd_start(d)) {
                fprintf(stderr, "loom demo: cannot start loomd in %s\n", d->dir);
                return 1;
        }
        printf("loom demo: loomd on 127.0.0.1:%d, data in %s; 1 token unit = %.2f us\n"
               "rollout pool = cpu%d, training pool = cpu%d; one node of 8 GPUs each\n\n",
               d->port, d->dir, unit_s * 1e6, CPU_ROLLOUT, CPU_TRAIN);
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", d->port);
        loom_client *c = loom_client_new(url, NULL);
        if (!c)
                return 1;

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
                        printf("submit %-5s (%s): rejected: %s\n", sh->name, sh->what,
                               loom_client_error(c));
                        continue;
                }
                if (rc) {
                        fprintf(stderr, "loom demo: submit: %s\n", loom_client_error(c));
                        loom_client_free(c);
                        return 1;
                }
                printf("submit %-5s (%s): job %u, %s, group %d; worst case rollout %.2fs, "
                       "train %.2fs, SLO %.2f\n",
                       sh->name, sh->what, r.id, r.decision, r.group, sh->t_roll_s * o->scale,
                       sh->t_train_s * o->scale, sh->slo);
                fill_worker(&wc[n], d, o, sh, r.id, sh->iterations, ru, tu);
                shared[n++] = r;
        }
        double cost_h = get_cost(c);
        printf("\n-- shared run: every job's phases under loomd's permits --\n");
        fflush(stdout);
        long long b0[2], t0[2], b1[2], t1[2];
        cpu_busy(b0, t0);
        double start = mono_s();
        for (int i = 0; i < n; i++)
                if (spawn_worker(&shared[i], &wc[i])) {
                        fprintf(stderr, "loom demo: fork: %s\n", strerror(errno));
                        kill_workers(shared, i);
                        loom_client_free(c);
                        return 1;
                }
        int rc = o->crash ? chaos(d, o, shared, n) : 0;
        if (rc)
                kill_workers(shared, n); /* loomd is gone: nothing left to wait for */
        for (int i = 0; i < n; i++)
                collect(&shared[i]);
        double wall = mono_s() - start;
        cpu_busy(b1, t1);
        int bad = rc ? 1 : verify(c, shared, n);

        printf("\n-- alone: each job on its own pools, %d iterations --\n", o->alone_iters);
        fflush(stdout);
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
                print_table(o, shared, alone, n, wall, lease, cpu, cost_h);
        int redone = 0;
        for (int i = 0; i < n; i++)
                redone += shared[i].res.redone;
        if (o->crash)
                printf("\ncrash check: loomd killed %d times; %d phases redone after lost "
                       "leases; every job finished with exactly its iterations: %s\n",
                       o->crash, redone, bad ? "NO" : "yes");
        return bad ? 1 : 0;
}

int loom_cmd_demo(int argc, char **argv)
{
        opts o;
        int rc = parse_opts(argc, argv, &o);
        if (rc)
                return rc < 0 ? 0 : rc;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        if (ncpu < 2) {
                fprintf(stderr, "loom demo: needs 2 CPUs (one per pool), this machine has %ld\n",
                        ncpu);
                return 1;
        }
        g_t0 = mono_s();
        demo d = {.lease_timeout_s = 10};
        if (o.dir) {
                snprintf(d.dir, sizeof d.dir, "%s", o.dir);
        } else {
                snprintf(d.dir, sizeof d.dir, "/tmp/loom-demo-XXXXXX");
                if (!mkdtemp(d.dir)) {
                        fprintf(stderr, "loom demo: mkdtemp: %s\n", strerror(errno));
                        return 1;
                }
        }
        char logp[300];
        snprintf(logp, sizeof logp, "%s/loomd.log", d.dir);
        if (mkdir(d.dir, 0755) && errno != EEXIST) {
                fprintf(stderr, "loom demo: %s: %s\n", d.dir, strerror(errno));
                return 1;
        }
        d.log = fopen(logp, "a");
        signal(SIGPIPE, SIG_IGN);
        rc = run_demo(&o, &d);
        loomd_stop(&d, SIGTERM);
        if (d.log)
                fclose(d.log);
        if (!o.dir && !o.keep && rc == 0)
                rm_tree(d.dir);
        else
                printf("data kept in %s\n", d.dir);
        return rc;
}
