/*
 * demo.h - the live demo behind `loom demo`: loomd plus real CPU-bound RL jobs on this machine.
 *
 *     loom_demo_opts o;
 *     loom_demo_opts_default(&o);
 *     loom_err e;
 *     int rc = loom_demo_run(&o, stdout, &e);
 *
 * loom_demo_run starts loomd as a child process (127.0.0.1, a temporary data dir), submits RL
 * jobs of different shapes and runs each as its own process doing real CPU work under loomd's
 * run permits: rollouts on CPU 0 (the rollout pool), training on CPU 1 (the training pool).
 * The GPU pools are simulated by those two CPUs; phase times come from a calibration of this
 * CPU. Then each job runs alone for comparison and a table of iterations/hour, pool
 * utilisation and cost per iteration is printed. About a minute; nothing is left running.
 *
 * The timeline (one line per phase, stamped with seconds since the start) and the report go to
 * the caller's stream; the workers write their timeline lines to its file descriptor with one
 * write(2) per line, so lines from several processes never interleave; out therefore needs a
 * file descriptor (a memory stream gets only this process's lines). The process ignores
 * SIGPIPE from then on (loomd may be killed in the middle of a request).
 */
#ifndef LOOM_DEMO_H
#define LOOM_DEMO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/common.h"

typedef struct loom_demo_opts {
        uint64_t seed;   /* response lengths and crash times; default 1 */
        double scale;    /* multiplies every phase time, in [0.1, 10]; default 1.0 */
        int jobs;        /* 3 or 4 (the 4th is rejected at admission); default 4 */
        int crash;       /* SIGKILL loomd this many times (0..20) during the shared run and
                          * restart it; default 0 */
        int alone_iters; /* iterations of each solo run, 1..100; default 3 */
        bool keep;       /* keep the temporary data directory */
        bool quiet;      /* no timeline, only the summary */
        const char *dir; /* data directory (kept); NULL: a temporary one, removed on success */
        int state_mib;   /* each job's state in loom-state (MiB, 0..4096; 0 = none); default 16 */
} loom_demo_opts;

void loom_demo_opts_default(loom_demo_opts *o);

/*
 * Run the demo, writing the timeline and the report to out. Returns 0 when every job finished
 * with exactly its iterations; LOOM_ECORRUPT when the run went through but that check failed
 * (the report on out names the job); LOOM_EINVAL for an option out of range (e->field names
 * it); LOOM_ESTATE on a machine with fewer than 2 CPUs; another negative LOOM_E* code when the
 * demo could not run (loomd, the data directory, fork, submit), with the reason in e. Once the
 * data directory exists it is removed at the end only when it was temporary, keep is false and
 * the result is 0; otherwise its path is printed to out ("data kept in ...").
 */
int loom_demo_run(const loom_demo_opts *o, FILE *out, loom_err *e);

/*
 * `loom demo --real`: three real PyTorch GRPO jobs (examples/rl, run by python with torch and
 * numpy) under an in-process loomd; rollouts on CPU 0, training on CPU 1, weights through
 * libloomsync; then the same jobs alone. Prints placement, the live timeline, reward curves
 * (and a PNG), held-out rewards at start and end, and iterations/hour and cost/iteration
 * shared vs alone. Returns 0 when every job ran its steps, its held-out reward rose and its
 * final weights equal the solo run's bit for bit; LOOM_ECORRUPT when a run went through but
 * that check failed; LOOM_EINVAL (e->field) for an option out of range; LOOM_ENOENT when the
 * source tree or a python with torch is missing; another LOOM_E* code when it could not run.
 */
typedef struct loom_demo_real_opts {
        uint64_t seed;      /* every job's seed; default 1 */
        int steps;          /* GRPO steps per job, 1..1000; default 20 */
        const char *python; /* interpreter with torch and numpy; default /usr/bin/python3 */
        const char *plot;   /* PNG of the reward curves; NULL: rewards.png in the data dir */
        const char *dir;    /* data directory (kept); NULL: a temporary one */
        bool keep;          /* keep the temporary data directory */
        bool quiet;         /* no timeline, only the report */
        int state_mib;      /* > 0: a loom-state daemon (this many MiB per job) keeps each
                             * trainer's optimizer state between train permits; 0: files.
                             * Default 16 */
} loom_demo_real_opts;

void loom_demo_real_opts_default(loom_demo_real_opts *o);
int loom_demo_real_run(const loom_demo_real_opts *o, FILE *out, loom_err *e);

/*
 * `loom demo --executor slurm`: the demo's jobs (math, code, chat) through a Slurm cluster on
 * this machine (scripts/slurm-cluster.sh: munge, slurmctld, 2 rollout + 2 training nodes with 8
 * GRES GPUs each, in a temporary directory) driven by loomd's Slurm executor (docs/slurm.md).
 * Prints the placement, each Slurm step as squeue lists it, where Slurm ran every job's phases
 * and the nodes' power states after the run; tears the cluster down. The work of a phase is
 * emulated (the worker sleeps). Returns 0 when every job finished its iterations;
 * LOOM_ECORRUPT when one did not; LOOM_ENOENT without the source tree's script, LOOM_ESTATE when
 * not root, LOOM_EIO when the cluster or loomd did not start (the reason in e).
 */
typedef struct loom_demo_slurm_opts {
        int iterations;  /* per job, 1..100; default 3 */
        double phase_s;  /* emulated length of a phase; default 0.3 */
        const char *dir; /* working directory (kept); NULL: a temporary one */
        bool keep;       /* keep the temporary directory */
        bool quiet;      /* no step lines, only the placement and the tables */
} loom_demo_slurm_opts;

void loom_demo_slurm_opts_default(loom_demo_slurm_opts *o);
int loom_demo_slurm_run(const loom_demo_slurm_opts *o, FILE *out, loom_err *e);

/* The worker an executor launches for the demo (`loom demo --exec-worker S`): reads LOOM_URL,
 * LOOM_JOB, LOOM_PHASE, LOOM_NODE_RANK; rank 0 acquires its phase, sleeps S seconds, releases,
 * until the job has ended. Returns the exit status. */
int loom_demo_exec_worker(double phase_s);

#endif
