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

/* line with its control characters (C0, DEL, C1) and backslashes escaped ("\x0a", "\u009b",
 * "\\") into out (n bytes, always terminated; cut short rather than overflow). A line quotes
 * names clients chose: whatever slipped past their checks still cannot forge a log line or
 * reach a terminal as an escape sequence. */
static inline void daemon_log_escape(const char *line, char *out, size_t n)
{
        const unsigned char *p = (const unsigned char *)line;
        size_t o = 0;
        for (; *p && o + 7 < n; p++) {
                if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
                        o += (size_t)snprintf(out + o, n - o, "\\u%04x", *++p);
                else if (*p < 0x20 || *p == 0x7f)
                        o += (size_t)snprintf(out + o, n - o, "\\x%02x", *p);
                else if (*p == '\\')
                        out[o++] = '\\', out[o++] = '\\';
                else
                        out[o++] = (char)*p;
        }
        out[o] = '\0';
}

/* A log callback (loom_server_cfg.log, loom_state_cfg.log): prog, the program's name, is its arg.
 * Writes "HH:MM:SS.mmm prog: line" (UTC) on stderr, one line however line reads. */
static inline void daemon_log_line(void *prog, const char *line)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char safe[2048];
        daemon_log_escape(line, safe, sizeof safe);
        fprintf(stderr, "%02d:%02d:%02d.%03ld %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                ts.tv_nsec / 1000000, (const char *)prog, safe);
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
