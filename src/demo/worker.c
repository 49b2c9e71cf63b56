/*
 * worker.c - one RL job of `loom demo` as a process: the toy model and its CPU work, the
 * calibration of this CPU, and the per-job loop that asks loomd (through the C client) for a
 * run permit before every phase, exactly as a job on a GPU cluster would:
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
 * Between phases a worker sleeps in a long-poll keeping its state in memory (the paper's
 * lightweight suspension with warm state). A phase whose lease loomd no longer knows (it was
 * restarted) is redone; the model is only replaced once loomd acknowledges a train phase.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/resource.h>

#include <jansson.h>

#include "demo_int.h"
#include "loom/client.h"

/* ---- the toy model and its CPU work ------------------------------------------------------ */

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

static void model_init(model *m, uint64_t seed)
{
        for (int i = 0; i < DIM; i++)
                for (int k = 0; k < DIM; k++) {
                        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                        m->w[i][k] = (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5);
                }
}

double loom__demo_calibrate(void)
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

/* ---- the timeline ------------------------------------------------------------------------ */

double loom__demo_t0;
FILE *loom__demo_out;

void loom__demo_say(const char *fmt, ...)
{
        char line[512];
        int n = snprintf(line, sizeof line, "[%6.2fs] ", mono_s() - loom__demo_t0);
        va_list ap;
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof line - 2)
                n = (int)sizeof line - 2;
        line[n++] = '\n';
        int fd = loom__demo_out ? fileno(loom__demo_out) : -1;
        if (fd >= 0) {
                ssize_t w = write(fd, line, (size_t)n);
                (void)w;
        } else if (loom__demo_out) { /* no descriptor (a memory stream): this process only */
                fwrite(line, 1, (size_t)n, loom__demo_out);
                fflush(loom__demo_out);
        }
}

/* ---- the worker: one RL job as a process ------------------------------------------------- */

/* What the rollout thread works on; it sets migrated/keep_gpus on tail-migration advice and
 * lost when loomd no longer knows the lease. */
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

int64_t loom__demo_reply_int(const char *reply, const char *key, int64_t dflt)
{
        json_error_t je;
        json_t *j = reply ? json_loads(reply, 0, &je) : NULL;
        json_t *v = json_object_get(j, key);
        int64_t r = json_is_integer(v) ? json_integer_value(v) : dflt;
        json_decref(j);
        return r;
}

bool loom__demo_reply_finished(const char *reply)
{
        json_error_t je;
        json_t *j = reply ? json_loads(reply, 0, &je) : NULL;
        const char *st = json_string_value(json_object_get(j, "state"));
        bool fin = st && strcmp(st, "running") && strcmp(st, "queued");
        json_decref(j);
        return fin;
}

double loom__demo_cluster_cost(loom_client *c)
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

/* Run one phase until it is acknowledged; returns 0, 1 when the job has ended, <0 on error. */
/* The job's state on grant and release (loom-state); the timeline note says where the switch
 * found it and how long the load and the offload took. */
static int switch_in(demo_state *st, const char *device, char *note, size_t len)
{
        note[0] = 0;
        if (!st)
                return 0;
        const char *found;
        double secs;
        int rc = loom__demo_state_load(st, device, &found, &secs);
        snprintf(note, len, "  state %s %.3fs", found, secs);
        return rc;
}

static int switch_out(demo_state *st, int64_t stamp, char *note, size_t len)
{
        if (!st)
                return 0;
        double secs;
        int rc = loom__demo_state_offload(st, stamp, &secs);
        size_t n = strlen(note);
        snprintf(note + n, len - n, ", out %.3fs", secs);
        return rc;
}

static int run_rollout(const worker_cfg *cfg, loom_client *c, model *m, int iter,
                       worker_result *res, int64_t *tokens, demo_state *st)
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
                char note[96];
                rc = switch_in(st, "rollout", note, sizeof note);
                if (rc)
                        return rc;
                rollout_ctx x = {.cfg = cfg, .c = c, .l = &l, .m = m, .iter = iter};
                pthread_t th;
                if (pthread_create(&th, NULL, rollout_main, &x))
                        return LOOM_ENOMEM;
                pthread_join(th, NULL);
                rc = x.lost ? 0 : switch_out(st, 2 * iter, note, sizeof note);
                if (rc)
                        return rc;
                rc = x.lost ? LOOM_ENOENT : loom_client_release(c, &l, true, NULL);
                double dt = mono_s() - t0;
                if (rc == LOOM_ENOENT) {
                        res->redone++;
                        if (!cfg->quiet)
                                loom__demo_say(
                                    "%-5s it %2d/%-2d rollout lost its lease (loomd restarted); "
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
                        loom__demo_say("%-5s it %2d/%-2d rollout  cpu%d %5.2fs  %6lld tokens%s%s",
                                       cfg->sh->name, iter, cfg->iterations, CPU_ROLLOUT, dt,
                                       (long long)x.tokens, tail, note);
                }
                return 0;
        }
}

static int run_train(const worker_cfg *cfg, loom_client *c, model *m, int iter, worker_result *res,
                     int64_t tokens, int64_t *last_done, demo_state *st)
{
        for (;;) {
                loom_client_lease l;
                int rc = loom_client_acquire(c, cfg->job, "train", -1, &l);
                if (rc == LOOM_ESTATE)
                        return 1;
                if (rc)
                        return rc;
                double t0 = mono_s();
                char note[96];
                rc = switch_in(st, "train", note, sizeof note);
                if (rc)
                        return rc;
                model next = *m; /* the checkpoint stays intact until loomd acknowledges */
                train(cfg, &next, tokens);
                rc = switch_out(st, 2 * iter + 1, note, sizeof note);
                if (rc)
                        return rc;
                char *reply = NULL;
                rc = loom_client_release(c, &l, true, &reply);
                double dt = mono_s() - t0;
                if (rc == LOOM_ENOENT) {
                        res->redone++;
                        if (!cfg->quiet)
                                loom__demo_say(
                                    "%-5s it %2d/%-2d train lost its lease (loomd restarted); "
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
                int64_t done = loom__demo_reply_int(reply, "iterations_done", -1);
                if (done != *last_done + 1)
                        res->bad_count++;
                *last_done = done;
                bool fin = loom__demo_reply_finished(reply);
                loom_client_free_string(reply);
                if (!cfg->quiet)
                        loom__demo_say("%-5s it %2d/%-2d train    cpu%d %5.2fs%s", cfg->sh->name,
                                       iter, cfg->iterations, CPU_TRAIN, dt, note);
                return fin ? 1 : 0;
        }
}

int loom__demo_worker_main(const worker_cfg *cfg, int out_fd)
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
        demo_state *st = NULL;
        if (!rc && cfg->state_sock[0] && cfg->state_bytes)
                rc = loom__demo_state_open(&st, cfg->state_sock, cfg->sh->name, cfg->state_bytes,
                                           cfg->seed);
        for (int it = 1; !rc && it <= cfg->iterations + 1; it++) {
                int64_t tokens = 0;
                rc = run_rollout(cfg, c, &m, it, &res, &tokens, st);
                if (!rc)
                        rc = run_train(cfg, c, &m, it, &res, tokens, &last_done, st);
        }
        if (rc == LOOM_ECORRUPT)
                loom__demo_say("%-5s state reloaded from loom-state differs from what was "
                               "offloaded",
                               cfg->sh->name);
        loom__demo_state_close(st);
        res.ok = rc == 1 && res.iterations == cfg->iterations;
        if (rc < 0)
                loom__demo_say("%-5s worker stopped: %s", cfg->sh->name,
                               c ? loom_client_error(c) : "no memory");
        loom_client_free(c);
        ssize_t w = write(out_fd, &res, sizeof res);
        return w == (ssize_t)sizeof res && res.ok ? 0 : 1;
}
