/*
 * run.c - the coordinator of a multi-process transfer: one process per training and rollout
 * rank, real sockets between them, and the figures of the run.
 *
 *   build map and plans -> [namespaces + shaped veth] -> listening sockets for every relay
 *   -> fork ranks -> all READY (data materialised, untimed) -> GO (clock starts)
 *   -> reports -> [late joiners: fork, catch up, report] -> QUIT -> reap -> tear down
 *
 * Every exit path, including errors and SIGINT/SIGTERM during the run, kills the ranks that are
 * still alive and removes the namespaces. Ranks get SIGKILL if the coordinator dies
 * (PR_SET_PDEATHSIG), so nothing outlives it. The control channel per rank is two pipes: bytes
 * 'G' (go) and 'Q' (quit) down, fixed-size reports up.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

typedef struct child {
        pid_t pid;
        int role; /* 0 training, 1 rollout, 2 late rollout */
        uint32_t rank;
        int cmd, rep; /* parent's ends */
        loom__report ready, done;
        int have_done;
} child;

typedef struct coord {
        const loom_sync_run_cfg *cfg;
        loom__ctx ctx;
        loom__link link;
        int *lfds; /* listening socket per rollout rank */
        uint16_t *ports;
        uint32_t nr;
        child *kids;
        size_t nkids;
} coord;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
        (void)sig;
        interrupted = 1;
}

/* ---- inside a rank process ------------------------------------------------------------- */

static void send_report(int fd, const loom__report *r)
{
        ssize_t k;
        do
                k = write(fd, r, sizeof *r);
        while (k < 0 && errno == EINTR);
}

static int wait_byte(int fd)
{
        char c;
        ssize_t k;
        do
                k = read(fd, &c, 1);
        while (k < 0 && errno == EINTR);
        return k == 1 ? c : -1;
}

static void rank_main(coord *co, child *me, int cmd, int rep)
{
        loom__report r = {.role = me->role, .rank = (int32_t)me->rank};
        loom_err e = {0};
        const int rollout = me->role != 0;
        if (loom__link_enter(rollout ? co->link.fd_roll : co->link.fd_train, &e)) {
                r.rc = LOOM_EIO;
                snprintf(r.msg, sizeof r.msg, "%s", e.msg);
                send_report(rep, &r);
                _exit(1);
        }
        loom__trainer *t = NULL;
        loom__rollout *ro = NULL;
        r.rc = rollout ? loom__rollout_prepare(&co->ctx, me->rank, me->role == 2,
                                               co->lfds[me->rank], &ro, &e)
                       : loom__trainer_prepare(&co->ctx, me->rank, &t, &e);
        r.t_ready = loom__now();
        if (r.rc)
                snprintf(r.msg, sizeof r.msg, "%s", e.msg);
        send_report(rep, &r);
        if (r.rc || wait_byte(cmd) != 'G')
                _exit(1);
        loom__report d = {.role = me->role, .rank = (int32_t)me->rank};
        if (rollout)
                loom__rollout_run(ro, &d);
        else
                loom__trainer_run(t, &d);
        send_report(rep, &d);
        /* a rollout rank's relay keeps serving peers and late joiners until told to quit */
        if (rollout)
                while (wait_byte(cmd) == 'G')
                        ;
        loom__trainer_free(t);
        /* rollout ranks end with threads still parked in accept(); _exit skips atexit work */
        _exit(0);
}

/* ---- in the coordinator ---------------------------------------------------------------- */

static int spawn(coord *co, int role, uint32_t rank, loom_err *e)
{
        int cmd[2], rep[2];
        if (pipe2(cmd, O_CLOEXEC))
                return loom_err_set(e, LOOM_EIO, "fork", "pipe: %s", strerror(errno));
        if (pipe2(rep, O_CLOEXEC)) {
                close(cmd[0]), close(cmd[1]);
                return loom_err_set(e, LOOM_EIO, "fork", "pipe: %s", strerror(errno));
        }
        child *me = &co->kids[co->nkids];
        memset(me, 0, sizeof *me);
        me->role = role;
        me->rank = rank;
        pid_t pid = fork();
        if (pid < 0) {
                close(cmd[0]), close(cmd[1]), close(rep[0]), close(rep[1]);
                return loom_err_set(e, LOOM_EIO, "fork", "fork: %s", strerror(errno));
        }
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                signal(SIGINT, SIG_DFL);
                signal(SIGTERM, SIG_DFL);
                close(cmd[1]), close(rep[0]);
                for (size_t i = 0; i < co->nkids; i++)
                        close(co->kids[i].cmd), close(co->kids[i].rep);
                for (uint32_t i = 0; i < co->nr; i++)
                        if (role == 0 || i != rank)
                                close(co->lfds[i]);
                rank_main(co, me, cmd[0], rep[1]);
        }
        close(cmd[0]), close(rep[1]);
        me->pid = pid;
        me->cmd = cmd[1];
        me->rep = rep[0];
        co->nkids++;
        return 0;
}

static const char *role_name(int role)
{
        return role == 0 ? "training" : role == 1 ? "rollout" : "late rollout";
}

/* Read one report from each child in [from, to) before the deadline. */
static int collect(coord *co, size_t from, size_t to, int done, loom_err *e)
{
        for (size_t i = from; i < to; i++) {
                child *k = &co->kids[i];
                loom__report *r = done ? &k->done : &k->ready;
                for (;;) {
                        if (interrupted)
                                return loom_err_set(e, LOOM_EIO, "run", "interrupted");
                        double left = co->ctx.deadline - loom__now();
                        if (left <= 0)
                                return loom_err_set(e, LOOM_ETIMEDOUT, "run",
                                                    "%s rank %u did not report in time",
                                                    role_name(k->role), k->rank);
                        struct pollfd pf = {.fd = k->rep, .events = POLLIN};
                        int n = poll(&pf, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
                        if (n < 0 && errno != EINTR)
                                return loom_err_set(e, LOOM_EIO, "run", "poll: %s",
                                                    strerror(errno));
                        if (n <= 0)
                                continue;
                        ssize_t got = read(k->rep, r, sizeof *r);
                        if (got < 0 && errno == EINTR)
                                continue;
                        if (got != (ssize_t)sizeof *r)
                                return loom_err_set(e, LOOM_EIO, "run", "%s rank %u died",
                                                    role_name(k->role), k->rank);
                        break;
                }
                if (!done && r->rc)
                        return loom_err_set(e, r->rc, "run", "%s rank %u: %.200s",
                                            role_name(k->role), k->rank, r->msg);
                k->have_done = done;
        }
        return 0;
}

static void go(coord *co, size_t from, size_t to, char c)
{
        for (size_t i = from; i < to; i++) {
                ssize_t k;
                do
                        k = write(co->kids[i].cmd, &c, 1);
                while (k < 0 && errno == EINTR);
        }
}

static void reap(coord *co, int kill_them)
{
        for (size_t i = 0; i < co->nkids; i++)
                if (kill_them)
                        kill(co->kids[i].pid, SIGKILL);
        for (size_t i = 0; i < co->nkids; i++) {
                child *k = &co->kids[i];
                close(k->cmd);
                double until = loom__now() + 10;
                int st;
                while (waitpid(k->pid, &st, WNOHANG) == 0) {
                        if (loom__now() > until) {
                                kill(k->pid, SIGKILL);
                                waitpid(k->pid, &st, 0);
                                break;
                        }
                        usleep(10000);
                }
                close(k->rep);
        }
        co->nkids = 0;
}

static int open_relays(coord *co, loom_err *e)
{
        int rc = loom__link_enter(co->link.fd_roll, e);
        for (uint32_t r = 0; !rc && r < co->nr; r++)
                rc = loom__listen(co->link.netns ? INADDR_ANY : INADDR_LOOPBACK, &co->ports[r],
                                  &co->lfds[r], e);
        if (co->link.fd_orig >= 0 && loom__link_enter(co->link.fd_orig, e) && !rc)
                rc = LOOM_EIO;
        return rc;
}

static void summarise(coord *co, double t0, double t_late, loom_sync_result *res)
{
        double enc_cpu = 0, dec_cpu = 0;
        uint64_t enc_b = 0, dec_b = 0;
        int rollout_failed = 0;
        res->verified = 1;
        for (size_t i = 0; i < co->nkids; i++) {
                const child *k = &co->kids[i];
                const loom__report *r = &k->done;
                if (k->role == 0) {
                        res->slow_link_bytes += r->sent_bytes;
                        if (r->t_done - t0 > res->slow_s)
                                res->slow_s = r->t_done - t0;
                        enc_cpu += r->cpu_codec, enc_b += r->codec_bytes;
                } else {
                        if (k->role == 1) {
                                res->fast_link_bytes += r->pulled_bytes;
                                if (r->t_done - t0 > res->wall_s)
                                        res->wall_s = r->t_done - t0;
                        } else {
                                res->catchup_bytes += r->pulled_bytes;
                                if (r->t_done - t_late > res->catchup_s)
                                        res->catchup_s = r->t_done - t_late;
                        }
                        dec_cpu += r->cpu_codec, dec_b += r->codec_bytes;
                        if (r->rc || !r->verified)
                                res->ranks_failed++;
                        else
                                res->ranks_ok++;
                        res->ranks_intact += r->intact != 0;
                }
                if (r->rc || !r->verified) {
                        res->verified = 0;
                        /* a rollout rank's reason first: it judged the frames, while a training
                         * rank only sees its connection close when a relay refuses its push */
                        if (!res->failure[0] || (k->role && !rollout_failed))
                                snprintf(res->failure, sizeof res->failure, "%s rank %u: %.200s",
                                         role_name(k->role), k->rank,
                                         r->msg[0] ? r->msg : "failed");
                        rollout_failed |= k->role != 0;
                }
        }
        res->slow_link_copies = (double)res->slow_link_bytes / (double)res->model_bytes;
        res->goodput_fraction = -1;
        if (res->shaped && res->slow_s > 0)
                res->goodput_fraction =
                    (double)res->slow_link_bytes * 8 / (res->slow_s * co->cfg->link_gbps * 1e9);
        res->encode_gbps = enc_cpu > 0 ? (double)enc_b / enc_cpu / 1e9 : 0;
        res->decode_gbps = dec_cpu > 0 ? (double)dec_b / dec_cpu / 1e9 : 0;
}

static int check_cfg(const loom_sync_run_cfg *c, loom_err *e)
{
        if (!c->layout)
                return loom_err_set(e, LOOM_EINVAL, "model", "no model layout");
        if (!(c->density >= 0 && c->density <= 1))
                return loom_err_set(e, LOOM_EINVAL, "density", "must be within [0, 1], got %g",
                                    c->density);
        if (!(c->link_gbps >= 0 && c->link_gbps <= 1000))
                return loom_err_set(e, LOOM_EINVAL, "link-gbps", "must be within [0, 1000], got %g",
                                    c->link_gbps);
        if (c->late >= loom_sync_par_ranks(&c->roll))
                return loom_err_set(e, LOOM_EINVAL, "late", "%u late joiners of %u rollout ranks",
                                    c->late, loom_sync_par_ranks(&c->roll));
        /* Off loopback anyone who reaches a relay could push it frames: unkeyed transfers
         * stay on this host's loopback. */
        if (c->netns && !c->key)
                return loom_err_set(e, LOOM_EINVAL, "key",
                                    "a transfer over a network link (namespaces and veth) must "
                                    "be keyed with the job's sync key; unauthenticated frames "
                                    "between ranks are allowed on loopback only");
        if (loom_sync_par_ranks(&c->train) > 256)
                return loom_err_set(e, LOOM_ERANGE, "train",
                                    "%u training ranks; the runner starts at most 256 processes",
                                    loom_sync_par_ranks(&c->train));
        return 0;
}

static int run_ranks(coord *co, loom_sync_result *res, loom_err *e)
{
        const loom_sync_run_cfg *cfg = co->cfg;
        uint32_t nt = loom_sync_par_ranks(&cfg->train), present = co->nr - cfg->late;
        int rc = 0;
        for (uint32_t i = 0; !rc && i < nt; i++)
                rc = spawn(co, 0, i, e);
        for (uint32_t i = 0; !rc && i < present; i++)
                rc = spawn(co, 1, i, e);
        size_t step_kids = co->nkids;
        if (!rc)
                rc = collect(co, 0, step_kids, 0, e);
        if (rc)
                return rc;
        double t0 = loom__now();
        go(co, 0, step_kids, 'G');
        rc = collect(co, 0, step_kids, 1, e);
        double t_late = 0;
        for (uint32_t i = present; !rc && i < co->nr; i++)
                rc = spawn(co, 2, i, e);
        if (!rc && cfg->late) {
                rc = collect(co, step_kids, co->nkids, 0, e);
                t_late = loom__now();
                go(co, step_kids, co->nkids, 'G');
                if (!rc)
                        rc = collect(co, step_kids, co->nkids, 1, e);
        }
        if (rc)
                return rc;
        summarise(co, t0, t_late, res);
        go(co, 0, co->nkids, 'Q');
        return 0;
}

int loom_sync_run(const loom_sync_run_cfg *cfg, loom_sync_result *res, loom_err *e)
{
        memset(res, 0, sizeof *res);
        int rc = check_cfg(cfg, e);
        if (rc)
                return rc;
        coord co = {.cfg = cfg};
        co.link.fd_train = co.link.fd_roll = co.link.fd_orig = -1;
        loom_sync_map *map = NULL;
        loom_sync_plan *plan = NULL, *catchup = NULL;
        co.nr = loom_sync_par_ranks(&cfg->roll);
        uint32_t nt = loom_sync_par_ranks(&cfg->train);
        uint64_t present = co.nr >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << co.nr) - 1;
        for (uint32_t i = co.nr - cfg->late; i < co.nr; i++)
                present &= ~(UINT64_C(1) << i);
        uint64_t bucket = cfg->bucket_bytes ? cfg->bucket_bytes : LOOM_SYNC_DEFAULT_BUCKET;
        rc = loom_sync_map_new(cfg->layout, &cfg->train, &cfg->roll, &map, e);
        if (!rc)
                rc = loom_sync_plan_new(map, cfg->plan, bucket, present, &plan, e);
        if (!rc)
                rc = loom_sync_plan_new(map, LOOM_SYNC_TOPO, bucket, present, &catchup, e);
        co.lfds = malloc(co.nr * sizeof *co.lfds);
        co.ports = calloc(co.nr, sizeof *co.ports);
        co.kids = calloc(nt + co.nr, sizeof *co.kids);
        if (!rc && (!co.lfds || !co.ports || !co.kids))
                rc = loom_err_set(e, LOOM_ENOMEM, "run", "out of memory");
        for (uint32_t i = 0; co.lfds && i < co.nr; i++)
                co.lfds[i] = -1;
        res->plan = cfg->plan;
        res->keyed = cfg->key != NULL;
        res->model_bytes = 2 * cfg->layout->elems;
        if (!rc && cfg->netns)
                rc = loom__link_up(&co.link, cfg->link_gbps, e);
        if (!rc) {
                res->shaped = co.link.netns && cfg->link_gbps > 0;
                snprintf(res->link_note, sizeof res->link_note, "%s",
                         co.link.netns ? co.link.note : "loopback in one namespace, unshaped");
                rc = open_relays(&co, e);
        }
        struct sigaction sa = {.sa_handler = on_signal}, ign = {.sa_handler = SIG_IGN}, old_int,
                         old_term, old_hup, old_pipe;
        sigemptyset(&sa.sa_mask);
        sigemptyset(&ign.sa_mask);
        interrupted = 0;
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGHUP, &sa, &old_hup);
        /* a rank that died must show up as an error, not kill us through its pipe */
        sigaction(SIGPIPE, &ign, &old_pipe);
        if (!rc) {
                co.ctx = (loom__ctx){.cfg = cfg,
                                     .map = map,
                                     .plan = plan,
                                     .catchup = catchup,
                                     .ports = co.ports,
                                     .relay_ip = co.link.netns ? LOOM__ROLL_IP : "127.0.0.1",
                                     .deadline =
                                         loom__now() + (cfg->timeout_s > 0 ? cfg->timeout_s : 600)};
                rc = run_ranks(&co, res, e);
        }
        reap(&co, rc != 0);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGHUP, &old_hup, NULL);
        sigaction(SIGPIPE, &old_pipe, NULL);
        for (uint32_t i = 0; co.lfds && i < co.nr; i++)
                if (co.lfds[i] >= 0)
                        close(co.lfds[i]);
        loom__link_down(&co.link);
        free(co.lfds);
        free(co.ports);
        free(co.kids);
        loom_sync_plan_free(catchup);
        loom_sync_plan_free(plan);
        loom_sync_map_free(map);
        return rc;
}
