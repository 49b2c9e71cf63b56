/*
 * demo_int.h - what the live demo's files share and nobody else sees: the job shapes, the
 * worker's configuration and result, the clock and the timeline writer. Shared functions carry
 * the loom__demo_ prefix (internal, not API); small helpers are static inline.
 */
#ifndef LOOM_DEMO_INT_H
#define LOOM_DEMO_INT_H

#include <sched.h> /* cpu_set_t: the including file defines _GNU_SOURCE first */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "loom/client.h"
#include "loom/demo.h"

#define DIM 24 /* the toy model is a DIM x DIM matrix */
#define MAX_JOBS 4
#define CPU_ROLLOUT 0
#define CPU_TRAIN 1

/* ---- job shapes -------------------------------------------------------------------------- */

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

/* ---- the worker (worker.c) --------------------------------------------------------------- */

typedef struct worker_cfg {
        const shape *sh;
        uint32_t job;
        int iterations;
        double roll_units; /* token units per generated token */
        double train_units;
        char url[64];
        uint64_t seed;
        bool quiet;
        char state_sock[108]; /* loom-state's socket; empty: no state moves */
        uint64_t state_bytes; /* the job's state (emulated device memory) */
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

/* Seconds per token unit on this CPU (pinned to the rollout CPU, median of 5 runs). */
double loom__demo_calibrate(void);

/* In a forked child: run the job cfg describes to its end, write a worker_result to out_fd.
 * Returns the child's exit status (0 when the job finished normally). */
int loom__demo_worker_main(const worker_cfg *cfg, int out_fd);

/* Fields of a loomd JSON reply: an integer (dflt when absent), and whether the job's state is
 * final (neither running nor queued). reply may be NULL. */
int64_t loom__demo_reply_int(const char *reply, const char *key, int64_t dflt);
bool loom__demo_reply_finished(const char *reply);
/* $/h of every node provisioned right now (GET /v1/cluster); 0 when loomd does not answer. */
double loom__demo_cluster_cost(loom_client *c);

/* ---- loom-state (state.c) ---------------------------------------------------------------- */

/* Fork a loom-state daemon serving sock, disk tier in dir, host tier for every job's `bytes`;
 * returns its pid once it answers, or -1. _stop sends SIGTERM and reaps it. */
pid_t loom__demo_state_start(const char *dir, const char *sock, uint64_t bytes);
void loom__demo_state_stop(pid_t pid);
/* loom_server_state_hooks.order for the demo's loomd; arg is the socket path. */
void loom__demo_state_order(void *arg, uint32_t node, const char *const *jobs, int n);

/* A worker's state: a memfd of `bytes` (its emulated GPU memory) under key (job, version). */
typedef struct demo_state demo_state;
int loom__demo_state_open(demo_state **out, const char *sock, const char *job, uint64_t bytes,
                          uint64_t seed);
/* Release: stamp the state (the phase changed it), offload it as the next version. */
int loom__demo_state_offload(demo_state *s, int64_t stamp, double *secs);
/* Grant: load the last version onto `device`; *found is "device", "host", "disk" (or "-" before
 * the first offload). LOOM_ECORRUPT when the bytes differ from what was offloaded. */
int loom__demo_state_load(demo_state *s, const char *device, const char **found, double *secs);
void loom__demo_state_close(demo_state *s);

/* ---- clock, randomness, CPUs ------------------------------------------------------------- */

static inline double mono_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline uint64_t rng_next(uint64_t *s)
{
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * 2685821657736338717ULL;
}

static inline double rng_unit(uint64_t *s)
{
        return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static inline void pin_self(int cpu)
{
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity((pid_t)syscall(SYS_gettid), sizeof set, &set); /* best effort */
}

/* ---- the timeline ------------------------------------------------------------------------ */

/* Demo start (monotonic) and where the timeline goes; set by loom_demo_run, inherited by the
 * loomd child and the workers. */
extern double loom__demo_t0;
extern FILE *loom__demo_out;

/* One line stamped with the time since loom__demo_t0, in one write(2), so lines from several
 * processes never interleave. */
void loom__demo_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
