/*
 * daemon.h - what the two daemons, loomd and loom-state, do alike: the lines of their event log
 * and the stop signals they wait for. Each program includes it from its one main.c.
 */
#ifndef LOOM_CMD_DAEMON_H
#define LOOM_CMD_DAEMON_H

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

/* A log callback (loom_server_cfg.log, loom_state_cfg.log): prog, the program's name, is its arg.
 * Writes "HH:MM:SS.mmm prog: line" (UTC) on stderr. */
static inline void daemon_log_line(void *prog, const char *line)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        fprintf(stderr, "%02d:%02d:%02d.%03ld %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                ts.tv_nsec / 1000000, (const char *)prog, line);
}

/* Blocks SIGTERM and SIGINT, put in *stop, in this thread and every thread it starts later, for
 * the main thread to collect with sigwait; a peer that hangs up raises no SIGPIPE. */
static inline void daemon_block_stop(sigset_t *stop)
{
        sigemptyset(stop);
        sigaddset(stop, SIGTERM);
        sigaddset(stop, SIGINT);
        pthread_sigmask(SIG_BLOCK, stop, NULL);
        signal(SIGPIPE, SIG_IGN);
}

/* Long-polls and peers hold one descriptor each: raise the soft limit to the hard one. */
static inline void daemon_raise_nofile(void)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
}

#endif
