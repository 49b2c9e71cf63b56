/*
 * real.c - `loom demo --real`: three real PyTorch GRPO jobs (examples/rl) under loomd.
 *
 * loomd runs inside this process (its HTTP and scheduler threads) on a temporary data dir.
 * Each job is submitted here (the placement decision is printed), then run by its launcher
 * (examples/rl/job.py launch), which starts the job's rollout worker on CPU 0 and its trainer
 * on CPU 1; both ask loomd for a run permit before every phase and move the weights through
 * libloomsync. The workers print the live timeline on our stdout. Afterwards each job runs
 * again alone, with the same seed and steps, and the report compares the reward curves (they
 * must be identical: co-scheduling changes when phases run, not what they compute), the
 * iterations per hour and the cost per iteration. The reward curves also go to a PNG (cairo).
 *
 * The GPUs are simulated by two CPUs; the jobs are real: sampling, rewards, GRPO loss,
 * optimizer steps, weight deltas over TCP.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cairo.h>
#include <jansson.h>

#include "demo_int.h"
#include "loom/client.h"
#include "loom/server.h"

#define REAL_JOBS 3

typedef struct real_job {
        const char *name, *task, *size;
        double lr;
        int warmup;
        double t_roll_s, t_train_s, slo; /* what the job declares to loomd */
} real_job;

/* Three jobs of different tasks and sizes. The declared worst cases are the scheduler's
 * inputs (they decide placement and the group's cycle): above anything measured on a loaded
 * two-core host, so loomd sees no drift, and complementary (one declares a long rollout) so
 * that the three share one group. The timeline shows the measured phases. */
static const real_job jobs[REAL_JOBS] = {
    {"reverse", "reverse", "m", 1e-3, 20, 10.0, 4.0, 1.5},
    {"rotate", "rotate", "m", 1e-3, 20, 2.0, 4.0, 3.0},
    {"reverse-s", "reverse", "s", 1e-3, 30, 2.0, 4.0, 3.0},
};

typedef struct run {
        uint32_t id;
        pid_t pid;
        char dir[PATH_MAX];
        json_t *res; /* result.json, or NULL */
} run;

/* ---- paths and processes ----------------------------------------------------------------- */

static int exists(const char *p)
{
        struct stat st;
        return stat(p, &st) == 0;
}

/* examples/rl and python/ of the source tree: $LOOM_SOURCE_DIR, the working directory, or the
 * parent of the folder this program lives in. */
static int find_source(char *out, size_t n, char *build, size_t bn)
{
        char exe[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[k > 0 ? k : 0] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
                *slash = 0;
        snprintf(build, bn, "%s", exe);
        const char *env = getenv("LOOM_SOURCE_DIR");
        const char *tries[3] = {env, ".", NULL};
        char parent[PATH_MAX + 8];
        snprintf(parent, sizeof parent, "%s/..", exe);
        tries[2] = parent;
        for (int i = 0; i < 3; i++) {
                char p[PATH_MAX + 32];
                if (!tries[i])
                        continue;
                snprintf(p, sizeof p, "%s/examples/rl/job.py", tries[i]);
                if (exists(p) && realpath(tries[i], out))
                        return 0;
        }
        (void)n;
        return -1;
}

static int python_ok(const char *python)
{
        pid_t pid = fork();
        if (pid == 0) {
                int nul = open("/dev/null", O_WRONLY);
                dup2(nul, 1);
                dup2(nul, 2);
                execl(python, python, "-c", "import torch, numpy", (char *)NULL);
                _exit(127);
        }
        int st = 0;
        return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static pid_t launch(const loom_demo_real_opts *o, const char *src, int port, const char *sock,
                    int k, const char *dir, const char *cache, uint32_t id, FILE *out)
{
        const real_job *j = &jobs[k];
        char script[PATH_MAX + 32], url[64], idb[16], steps[16], seed[24], lr[32], wu[16];
        snprintf(script, sizeof script, "%s/examples/rl/job.py", src);
        snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
        snprintf(idb, sizeof idb, "%u", id);
        snprintf(steps, sizeof steps, "%d", o->steps);
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
        snprintf(lr, sizeof lr, "%g", j->lr);
        snprintf(wu, sizeof wu, "%d", j->warmup);
        fflush(out);
        pid_t pid = fork();
        if (pid != 0)
                return pid;
        if (fileno(out) >= 0 && fileno(out) != 1)
                dup2(fileno(out), 1);
        if (o->quiet) {
                int nul = open("/dev/null", O_WRONLY);
                dup2(nul, 1);
        }
        const char *argv[40] = {o->python, script,           "launch", "--dir",  dir,     "--cache",
                                cache,     "--name",         j->name,  "--task", j->task, "--size",
                                j->size,   "--steps",        steps,    "--seed", seed,    "--lr",
                                lr,        "--warmup-steps", wu};
        int n = 21;
        if (id) {
                argv[n++] = "--url";
                argv[n++] = url;
                argv[n++] = "--job";
                argv[n++] = idb;
                if (sock[0]) {
                        argv[n++] = "--state-sock";
                        argv[n++] = sock;
                }
        } else {
                argv[n++] = "--warmup-only";
        }
        argv[n] = NULL;
        execv(o->python, (char *const *)argv);
        _exit(127);
}

static int submit(loom_client *c, const real_job *rj, const char *name, int steps, uint32_t *id,
                  FILE *out)
{
        json_t *spec =
            json_pack("{s:s,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:i}", "name", name, "rollout_gpus", 8,
                      "train_gpus", 8, "t_roll_s", rj->t_roll_s, "t_train_s", rj->t_train_s, "slo",
                      rj->slo, "mem_rollout_gb", 20.0, "mem_train_gb", 40.0, "iterations", steps);
        char *text = json_dumps(spec, JSON_COMPACT), *reply = NULL;
        json_decref(spec);
        int rc = text ? loom_client_submit(c, text, NULL, id, &reply) : LOOM_ENOMEM;
        free(text);
        json_error_t je;
        json_t *j = reply ? json_loads(reply, 0, &je) : NULL;
        json_t *d = json_object_get(j, "decision");
        if (!rc)
                fprintf(out, "place  %-10s job %u: %s, group %lld; %s\n", name, *id,
                        json_string_value(json_object_get(d, "decision")) ?: "?",
                        (long long)json_integer_value(json_object_get(d, "group")),
                        json_string_value(json_object_get(d, "reason")) ?: "");
        else
                fprintf(out, "place  %-10s refused: %s\n", name, loom_client_error(c));
        json_decref(j);
        loom_client_free_string(reply);
        return rc;
}

static json_t *load_result(const char *dir)
{
        char p[PATH_MAX + 16];
        snprintf(p, sizeof p, "%s/result.json", dir);
        json_error_t je;
        return json_load_file(p, 0, &je);
}

static double num(json_t *r, const char *k)
{
        return json_number_value(json_object_get(r, k));
}

/* Run jobs [0, n) at once (alone = 0) or one after the other (alone = 1). */
static int run_jobs(const loom_demo_real_opts *o, const char *src, const char *root, int port,
                    const char *sock, loom_client *c, run *runs, int alone, FILE *out)
{
        int bad = 0;
        char cache[PATH_MAX + 8];
        snprintf(cache, sizeof cache, "%s/cache", root);
        mkdir(cache, 0755);
        if (!alone) {
                /* The warm-ups first (in parallel, cached): a submitted job's first permit
                 * expires unless claimed within one lease timeout. */
                fprintf(out, "-- warm-up: each job's supervised initialisation --\n");
                for (int k = 0; k < REAL_JOBS; k++) {
                        snprintf(runs[k].dir, sizeof runs[k].dir, "%s/%s", root, jobs[k].name);
                        runs[k].pid = launch(o, src, port, sock, k, runs[k].dir, cache, 0, out);
                }
                for (int k = 0; k < REAL_JOBS; k++) {
                        int st = 0;
                        waitpid(runs[k].pid, &st, 0);
                        bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                }
                if (bad)
                        return bad;
                fprintf(out, "\n");
        }
        for (int k = 0; k < REAL_JOBS; k++) {
                char name[48];
                snprintf(name, sizeof name, "%s%s", jobs[k].name, alone ? "-alone" : "");
                snprintf(runs[k].dir, sizeof runs[k].dir, "%s/%s", root, name);
                if (submit(c, &jobs[k], name, o->steps, &runs[k].id, out))
                        return -1;
                if (!alone)
                        continue;
                runs[k].pid = launch(o, src, port, sock, k, runs[k].dir, cache, runs[k].id, out);
                int st = 0;
                waitpid(runs[k].pid, &st, 0);
                bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
        if (!alone) {
                fprintf(out, "\n-- shared run: live timeline (seconds, job, phase) --\n");
                for (int k = 0; k < REAL_JOBS; k++)
                        runs[k].pid =
                            launch(o, src, port, sock, k, runs[k].dir, cache, runs[k].id, out);
                for (int k = 0; k < REAL_JOBS; k++) {
                        int st = 0;
                        waitpid(runs[k].pid, &st, 0);
                        bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                }
        }
        for (int k = 0; k < REAL_JOBS; k++)
                runs[k].res = load_result(runs[k].dir);
        return bad;
}

/* ---- the report -------------------------------------------------------------------------- */

static void print_curve(FILE *out, const char *name, json_t *res)
{
        json_t *r = json_object_get(res, "rewards");
        size_t n = json_array_size(r);
        fprintf(out, "%-10s", name);
        for (size_t i = 0; i < n; i++)
                fprintf(out, " %.2f", json_number_value(json_array_get(r, i)));
        fprintf(out, "\n");
}

static double sum_of(json_t *res, const char *key)
{
        json_t *a = json_object_get(res, key);
        double t = 0;
        for (size_t i = 0; i < json_array_size(a); i++)
                t += json_number_value(json_array_get(a, i));
        return t;
}

static double heldout(json_t *res, const char *key)
{
        return json_number_value(json_array_get(json_object_get(res, key), 0));
}

static void plot(const char *path, run *shared, run *alone)
{
        const int W = 720, H = 420, L = 60, R = 150, T = 30, B = 50;
        cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
        cairo_t *cr = cairo_create(s);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
        size_t steps = 1;
        for (int k = 0; k < REAL_JOBS; k++) {
                size_t n = json_array_size(json_object_get(shared[k].res, "rewards"));
                steps = n > steps ? n : steps;
        }
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_set_line_width(cr, 1);
        cairo_rectangle(cr, L, T, W - L - R, H - T - B);
        cairo_stroke(cr);
        cairo_set_font_size(cr, 12);
        for (int i = 0; i <= 4; i++) {
                double y = H - B - (H - T - B) * i / 4.0;
                char lab[16];
                snprintf(lab, sizeof lab, "%.2f", i / 4.0);
                cairo_move_to(cr, 20, y + 4);
                cairo_show_text(cr, lab);
        }
        cairo_move_to(cr, L + (W - L - R) / 2 - 60, H - 15);
        cairo_show_text(cr, "GRPO step (mean reward of the rollout batch)");
        static const double col[REAL_JOBS][3] = {{0.8, 0.2, 0.1}, {0.1, 0.4, 0.8}, {0.2, 0.6, 0.2}};
        for (int k = 0; k < REAL_JOBS; k++)
                for (int pass = 0; pass < 2; pass++) {
                        json_t *r = json_object_get((pass ? alone : shared)[k].res, "rewards");
                        cairo_set_source_rgb(cr, col[k][0], col[k][1], col[k][2]);
                        cairo_set_line_width(cr, pass ? 1.0 : 3.0);
                        double dash = 5;
                        cairo_set_dash(cr, &dash, pass, 0);
                        for (size_t i = 0; i < json_array_size(r); i++) {
                                double x =
                                    L + (W - L - R) * (steps > 1 ? (double)i / (steps - 1) : 0);
                                double y =
                                    H - B - (H - T - B) * json_number_value(json_array_get(r, i));
                                if (i == 0)
                                        cairo_move_to(cr, x, y);
                                else
                                        cairo_line_to(cr, x, y);
                        }
                        cairo_stroke(cr);
                        cairo_move_to(cr, W - R + 10, T + 20 + 36 * k + 14 * pass);
                        char lab[48];
                        snprintf(lab, sizeof lab, "%s %s", jobs[k].name, pass ? "alone" : "shared");
                        cairo_show_text(cr, lab);
                }
        cairo_destroy(cr);
        cairo_surface_write_to_png(s, path);
        cairo_surface_destroy(s);
}

/* From the first rollout permit to the last train release over the given runs (seconds). */
static double span(run *runs)
{
        double a = 1e300, b = -1e300;
        for (int k = 0; k < REAL_JOBS; k++) {
                double f = num(runs[k].res, "t_first"), l = num(runs[k].res, "t_last");
                a = f < a ? f : a;
                b = l > b ? l : b;
        }
        return b > a ? b - a : 0;
}

static int report(FILE *out, run *shared, run *alone, double node_h, const char *png)
{
        int bad = 0;
        double shared_wall = span(shared), alone_wall = 0;
        for (int k = 0; k < REAL_JOBS; k++)
                alone_wall += num(alone[k].res, "wall_s");
        fprintf(out, "\n-- reward curves (mean reward of each step's rollouts; shared run) --\n");
        for (int k = 0; k < REAL_JOBS; k++)
                print_curve(out, jobs[k].name, shared[k].res);
        fprintf(out, "plot: %s (solid shared, dashed alone)\n", png);
        fprintf(out, "\n-- held-out mean reward (128 prompts never trained on) --\n");
        fprintf(out, "%-10s %8s %8s %8s %8s %9s  %s\n", "job", "start", "end", "alone", "changed",
                "sent", "same weights shared/alone");
        for (int k = 0; k < REAL_JOBS; k++) {
                json_t *s = shared[k].res, *a = alone[k].res;
                double h0 = heldout(s, "heldout_start"), h1 = heldout(s, "heldout_end");
                double ha = heldout(a, "heldout_end");
                const char *ds = json_string_value(json_object_get(s, "final_digest"));
                const char *da = json_string_value(json_object_get(a, "final_digest"));
                int same = ds && da && !strcmp(ds, da);
                double dsum = sum_of(s, "density"), moved = sum_of(s, "delta_bytes");
                double dense = sum_of(s, "dense_bytes");
                size_t nd = json_array_size(json_object_get(s, "density"));
                fprintf(out, "%-10s %8.3f %8.3f %8.3f %7.1f%% %8.1f%%  %s\n", jobs[k].name, h0, h1,
                        ha, nd ? 100 * dsum / nd : 0, dense > 0 ? 100 * moved / dense : 0,
                        same ? "yes (bit-identical)" : "NO");
                bad += !same || !(h1 > h0);
        }
        fprintf(out, "(changed: mean fraction of bf16 weights that changed per step; sent: bytes "
                     "of the sparse deltas over the bytes of dense copies)\n");
        fprintf(out, "\n%-10s %6s %10s %10s %12s\n", "job", "steps", "iter/h", "alone/h",
                "alone $/it");
        int total = 0;
        for (int k = 0; k < REAL_JOBS; k++) {
                double ws = num(shared[k].res, "wall_s"), wa = num(alone[k].res, "wall_s");
                int n = (int)json_array_size(json_object_get(shared[k].res, "rewards"));
                total += n;
                fprintf(out, "%-10s %6d %10.0f %10.0f %12.4f\n", jobs[k].name, n,
                        ws > 0 ? n * 3600 / ws : 0, wa > 0 ? n * 3600 / wa : 0,
                        wa > 0 && n ? node_h * wa / 3600 / n : 0);
        }
        fprintf(out, "(iter/h: the job's steps over its own first permit to last release)\n");
        if (total > 0)
                fprintf(out,
                        "\ncost per iteration at $%.2f/h for one rollout + one training node:\n"
                        "  shared  $%.4f  (%d iterations in %.1f s on one group)\n"
                        "  alone   $%.4f  (the same iterations, each job on its own nodes, "
                        "%.1f s in all)\n",
                        node_h, node_h * shared_wall / 3600 / total, total, shared_wall,
                        node_h * alone_wall / 3600 / total, alone_wall);
        return bad;
}

/* ---- the run ----------------------------------------------------------------------------- */

static int real_run(const loom_demo_real_opts *o, const char *src, const char *root, FILE *out,
                    loom_err *e)
{
        int rc;
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        char data[PATH_MAX + 8];
        snprintf(data, sizeof data, "%s/loomd", root);
        cfg.data_dir = data;
        cfg.port = 0;
        cfg.lease_timeout_s = 60; /* python with torch starts slowly on a loaded host */
        pid_t state = 0;
        char state_sock[108] = ""; /* loom-state's socket; empty when state goes to files */
        if (o->state_mib > 0) {
                char sdir[PATH_MAX + 8];
                snprintf(sdir, sizeof sdir, "%s/state", root);
                snprintf(state_sock, sizeof state_sock, "%.96s/state.sock", root);
                state = loom__demo_state_start(sdir, state_sock, (uint64_t)o->state_mib << 20);
                if (state <= 0)
                        return loom_err_set(e, LOOM_EIO, NULL, "cannot start loom-state in %s",
                                            sdir);
                /* loomd's dispatch order becomes loom-state's prefetch hints */
                cfg.state.order = loom__demo_state_order;
                cfg.state.arg = state_sock;
        }
        loom_server *srv = loom_server_new(&cfg, e);
        if (!srv || loom_server_start(srv, e)) {
                loom_server_free(srv);
                loom__demo_state_stop(state);
                return e->msg[0] ? LOOM_EIO : loom_err_set(e, LOOM_EIO, NULL, "loomd failed");
        }
        int port = loom_server_port(srv);
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
        loom_client *c = loom_client_new(url, NULL);
        fprintf(out,
                "loom demo --real: loomd on %s, data in %s\n"
                "rollout pool = cpu%d, training pool = cpu%d (GPUs simulated by CPUs; the jobs are "
                "real PyTorch GRPO), %d steps each, seed %llu\n\n",
                url, root, CPU_ROLLOUT, CPU_TRAIN, o->steps, (unsigned long long)o->seed);
        if (state_sock[0])
                fprintf(out,
                        "loom-state at %s: each trainer's checkpoint (fp32 weights, Adam state) "
                        "goes there when its train permit ends; the Adam state comes back when "
                        "the next is granted\n\n",
                        state_sock);
        run shared[REAL_JOBS] = {0}, alone[REAL_JOBS] = {0};
        char t0[32];
        snprintf(t0, sizeof t0, "%.6f", loom__demo_t0);
        setenv("LOOM_T0", t0, 1);
        int bad = c ? run_jobs(o, src, root, port, state_sock, c, shared, 0, out) : -1;
        double node_h = c ? loom__demo_cluster_cost(c) : 0;
        if (node_h <= 0)
                node_h = 1.85 * 8 + 5.28 * 8; /* one H20 rollout node + one H800 training node */
        if (!bad) {
                fprintf(out, "\n-- alone: the same jobs, seed and steps, one at a time --\n");
                bad = run_jobs(o, src, root, port, state_sock, c, alone, 1, out);
        }
        loom_client_free(c);
        loom_server_stop(srv);
        loom_server_free(srv);
        loom__demo_state_stop(state);
        for (int k = 0; k < REAL_JOBS && !bad; k++)
                bad += !shared[k].res || !alone[k].res;
        if (!bad) {
                char png[PATH_MAX + 16];
                snprintf(png, sizeof png, "%s", o->plot ? o->plot : "");
                if (!o->plot)
                        snprintf(png, sizeof png, "%s/rewards.png", root);
                plot(png, shared, alone);
                bad = report(out, shared, alone, node_h, png);
                rc =
                    bad ? loom_err_set(e, LOOM_ECORRUPT, NULL,
                                       "%d job(s) did not learn, or learned differently alone", bad)
                        : 0;
        } else {
                rc = loom_err_set(e, LOOM_EIO, NULL, "a job failed; its logs are in %s", root);
        }
        for (int k = 0; k < REAL_JOBS; k++) {
                json_decref(shared[k].res);
                json_decref(alone[k].res);
        }
        return rc;
}

void loom_demo_real_opts_default(loom_demo_real_opts *o)
{
        *o = (loom_demo_real_opts){
            .seed = 1, .steps = 20, .python = "/usr/bin/python3", .state_mib = 16};
}

int loom_demo_real_run(const loom_demo_real_opts *o, FILE *out, loom_err *e)
{
        loom_err_clear(e);
        if (o->state_mib < 0 || o->state_mib > 4096)
                return loom_err_set(e, LOOM_EINVAL, "state_mib", "must be in [0, 4096], got %d",
                                    o->state_mib);
        if (o->steps < 1 || o->steps > 1000)
                return loom_err_set(e, LOOM_EINVAL, "steps", "must be in [1, 1000], got %d",
                                    o->steps);
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
                return loom_err_set(e, LOOM_ESTATE, NULL, "needs 2 CPUs (one per pool)");
        char src[PATH_MAX], build[PATH_MAX];
        if (find_source(src, sizeof src, build, sizeof build))
                return loom_err_set(e, LOOM_ENOENT, "source",
                                    "examples/rl/job.py not found: run from the source tree or "
                                    "set LOOM_SOURCE_DIR");
        if (!python_ok(o->python))
                return loom_err_set(e, LOOM_ENOENT, "python",
                                    "%s cannot import torch and numpy (scripts/deps.sh installs "
                                    "python3-torch and python3-numpy)",
                                    o->python);
        char root[PATH_MAX];
        if (o->dir) {
                snprintf(root, sizeof root, "%s", o->dir);
                if (mkdir(root, 0755) && errno != EEXIST)
                        return loom_err_set(e, LOOM_EIO, "data_dir", "%s: %s", root,
                                            strerror(errno));
        } else {
                snprintf(root, sizeof root, "/tmp/loom-real-XXXXXX");
                if (!mkdtemp(root))
                        return loom_err_set(e, LOOM_EIO, NULL, "mkdtemp: %s", strerror(errno));
        }
        /* the children find the package and the shared libraries beside this program */
        char pp[PATH_MAX + 16];
        snprintf(pp, sizeof pp, "%s/python", src);
        setenv("PYTHONPATH", pp, 1);
        setenv("LOOM_BUILD_DIR", build, 1);
        loom__demo_t0 = mono_s();
        loom__demo_out = out;
        signal(SIGPIPE, SIG_IGN);
        int rc = real_run(o, src, root, out, e);
        if (!o->dir && !o->keep && rc == 0) {
                char cmd[PATH_MAX + 16];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
                if (!o->plot)
                        fprintf(out, "(the plot is removed with the data: keep it with --plot "
                                     "FILE or --keep)\n");
                if (system(cmd) != 0)
                        fprintf(out, "could not remove %s\n", root);
        } else {
                fprintf(out, "data kept in %s\n", root);
        }
        fflush(out);
        return rc;
}
