/*
 * state.c - the demo's loom-state: a daemon in a child process (a host tier that holds every
 * job's state, as admission promises; one job's state per emulated device), loomd's prefetch
 * hints into it, and the worker's side: its state lives in a memfd (the emulated GPU memory) that
 * is offloaded before each release and loaded after each grant, checked by CRC after every load.
 *
 * Only the hint hook is wired in the demo's loomd, not host-tier accounting: the demo's jobs
 * declare working sets of real models (hundreds of GB) while the bytes loom-state holds here
 * are scaled down (--state-mib), so the two would not compare.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "demo_int.h"
#include "loom/state.h"
#include "loom/sync.h"

/* ---- the daemon ------------------------------------------------------------------------- */

static void *serve(void *arg)
{
        loom_err e;
        loom_state_daemon_run(arg, &e);
        return NULL;
}

static void state_child(const char *dir, const char *sock, uint64_t bytes)
{
        sigset_t stop;
        sigemptyset(&stop);
        sigaddset(&stop, SIGTERM);
        sigaddset(&stop, SIGINT);
        pthread_sigmask(SIG_BLOCK, &stop, NULL);
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = dir;
        cfg.sock_path = sock;
        /* admission guarantees residency (every member's state fits the host tier), plus room
         * for one job's next version while its previous one is still held */
        cfg.host_bytes = ((MAX_JOBS + 1) * bytes + (8u << 20) + 4095) & ~UINT64_C(4095);
        cfg.disk_bytes = 16 * bytes + (64u << 20);
        cfg.device_bytes = bytes;
        cfg.no_mlock = 1; /* a demo: do not pin a GB of a shared machine's memory */
        loom_state_daemon *d;
        loom_err e;
        if (loom_state_daemon_new(&cfg, &d, &e))
                _exit(1);
        pthread_t t;
        if (pthread_create(&t, NULL, serve, d))
                _exit(1);
        int sig;
        sigwait(&stop, &sig);
        loom_state_daemon_stop(d);
        pthread_join(t, NULL);
        loom_state_daemon_free(d);
        _exit(0);
}

pid_t loom__demo_state_start(const char *dir, const char *sock, uint64_t bytes)
{
        fflush(loom__demo_out);
        pid_t pid = fork();
        if (pid == 0)
                state_child(dir, sock, bytes);
        if (pid < 0)
                return -1;
        for (int i = 0; i < 1000; i++) {
                loom_state_client *c;
                loom_err e;
                if (loom_state_connect(sock, &c, &e) == 0) {
                        loom_state_close(c);
                        return pid;
                }
                if (waitpid(pid, NULL, WNOHANG) == pid)
                        return -1;
                usleep(5000);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
}

void loom__demo_state_stop(pid_t pid)
{
        if (pid > 0) {
                kill(pid, SIGTERM);
                waitpid(pid, NULL, 0);
        }
}

/* loomd's hint hook: the job granted longest ago on a node runs next there; prefetch it. */
void loom__demo_state_order(void *arg, uint32_t node, const char *const *jobs, int n)
{
        loom_state_client *c;
        loom_err e;
        if (n <= 0 || loom_state_connect(arg, &c, &e))
                return;
        if (loom_state_order(c, jobs, (size_t)n, &e) == 0)
                loom_state_prefetch(c, jobs[0], &e);
        loom_state_close(c);
}

/* ---- the worker's side ------------------------------------------------------------------ */

struct demo_state {
        loom_state_client *c;
        int fd;
        uint8_t *p;
        uint64_t len;
        char job[LOOM_STATE_JOB_MAX];
        uint64_t version;
        uint32_t crc; /* of the bytes last offloaded */
};

int loom__demo_state_open(demo_state **out, const char *sock, const char *job, uint64_t bytes,
                          uint64_t seed)
{
        *out = NULL;
        demo_state *s = calloc(1, sizeof *s);
        loom_err e;
        if (!s)
                return LOOM_ENOMEM;
        s->fd = memfd_create("loom-demo-device", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        s->len = bytes;
        snprintf(s->job, sizeof s->job, "%s", job);
        if (s->fd < 0 || ftruncate(s->fd, (off_t)bytes) ||
            fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 || /* loom-state requires it */
            (s->p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0)) ==
                MAP_FAILED ||
            loom_state_connect(sock, &s->c, &e)) {
                if (s->p && s->p != MAP_FAILED)
                        munmap(s->p, bytes);
                if (s->fd >= 0)
                        close(s->fd);
                free(s);
                return LOOM_EIO;
        }
        for (uint64_t i = 0; i < bytes / 8; i++) { /* the job's "weights" */
                uint64_t v = (seed + i) * 0x9E3779B97F4A7C15ULL;
                memcpy(s->p + 8 * i, &v, 8);
        }
        loom_state_drop(s->c, job, UINT64_MAX, &e); /* a previous run's leftovers */
        *out = s;
        return 0;
}

static void key(const demo_state *s, loom_state_io *io)
{
        memset(io, 0, sizeof *io);
        loom_state_key_flat(&io->key, s->job, s->version, "state", s->len, "u8");
        io->fd = s->fd;
        io->len = s->len;
}

int loom__demo_state_offload(demo_state *s, int64_t stamp, double *secs)
{
        memcpy(s->p, &stamp, sizeof stamp); /* the phase changed the state */
        s->version++;
        s->crc = loom_sync_crc32c(0, s->p, s->len);
        loom_state_io io;
        key(s, &io);
        loom_state_result r;
        loom_err e;
        double t0 = mono_s();
        int rc = loom_state_offload(s->c, &io, 1, LOOM_STATE_HOST, &r, &e);
        *secs = mono_s() - t0;
        if (!rc && s->version > 1)
                rc = loom_state_drop(s->c, s->job, s->version - 1, &e);
        return rc;
}

int loom__demo_state_load(demo_state *s, const char *device, const char **found, double *secs)
{
        *found = "-";
        *secs = 0;
        if (!s->version)
                return 0; /* the first phase: the state is born on the device */
        loom_state_io io;
        key(s, &io);
        loom_state_result r;
        loom_err e;
        double t0 = mono_s();
        int rc = loom_state_load(s->c, &io, 1, device, &r, &e);
        *secs = mono_s() - t0;
        if (rc)
                return rc;
        *found = loom_state_tier_name(r.found);
        return loom_sync_crc32c(0, s->p, s->len) == s->crc ? 0 : LOOM_ECORRUPT;
}

void loom__demo_state_close(demo_state *s)
{
        if (!s)
                return;
        loom_err e;
        loom_state_drop(s->c, s->job, UINT64_MAX, &e);
        loom_state_close(s->c);
        munmap(s->p, s->len);
        close(s->fd);
        free(s);
}
