/*
 * notify.c - loomd's side of systemd's readiness protocol (sd_notify, Type=notify units).
 *
 * READY=1 goes out once loom_server_start has replayed the store and the HTTP server answers on
 * its socket (or once a replica's redirector serves), STOPPING=1 as loom_server_stop begins.
 * When the unit sets WatchdogSec, a thread sends WATCHDOG=1 at half the interval, but only
 * while it can take the scheduler's lock and the store has not failed: a scheduler thread stuck
 * holding the lock, or a dead store, stops the pings and systemd restarts loomd.
 *
 * Without $NOTIFY_SOCKET (not under systemd, tests, the demo) every call does nothing; built
 * without libsystemd (LOOM_HAVE_SYSTEMD unset) likewise.
 */
#include <string.h>

#include "srv.h"

#ifdef LOOM_HAVE_SYSTEMD
#include <errno.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>
#include <time.h>

/* One watchdog per process: systemd watches one main process, and only the first server to
 * become ready under a watchdog owns it. */
static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static loom_server *wd_owner;
static bool wd_quit;
static pthread_t wd_thread;

static void *watchdog_main(void *arg)
{
        loom_server *s = arg;
        uint64_t usec = 0;
        sd_watchdog_enabled(0, &usec);
        long long half_ns = (long long)usec * 1000 / 2;
        pthread_mutex_lock(&wd_mu);
        while (!wd_quit) {
                pthread_mutex_unlock(&wd_mu);
                pthread_mutex_lock(&s->mu); /* blocks, and so stops the pings, if it is stuck */
                pthread_mutex_unlock(&s->mu);
                if (!s->store_failed)
                        sd_notify(0, "WATCHDOG=1");
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                long long ns = until.tv_nsec + half_ns;
                until.tv_sec += (time_t)(ns / 1000000000);
                until.tv_nsec = (long)(ns % 1000000000);
                pthread_mutex_lock(&wd_mu);
                while (!wd_quit && pthread_cond_timedwait(&wd_cv, &wd_mu, &until) != ETIMEDOUT)
                        ;
        }
        pthread_mutex_unlock(&wd_mu);
        return NULL;
}

void srv_notify(loom_server *s, const char *state)
{
        if (!getenv("NOTIFY_SOCKET"))
                return;
        if (!strcmp(state, "READY")) {
                char line[160];
                if (s)
                        snprintf(line, sizeof line, "READY=1\nSTATUS=serving on port %d", s->port);
                else
                        snprintf(line, sizeof line,
                                 "READY=1\nSTATUS=following the leader, redirecting clients");
                sd_notify(0, line);
                uint64_t usec = 0;
                pthread_mutex_lock(&wd_mu);
                if (s && !wd_owner && sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
                        wd_quit = false;
                        if (!pthread_create(&wd_thread, NULL, watchdog_main, s))
                                wd_owner = s;
                }
                pthread_mutex_unlock(&wd_mu);
        } else if (!strcmp(state, "STOPPING")) {
                sd_notify(0, "STOPPING=1\nSTATUS=stopping");
                pthread_mutex_lock(&wd_mu);
                bool mine = s && wd_owner == s;
                if (mine) {
                        wd_quit = true;
                        pthread_cond_signal(&wd_cv);
                }
                pthread_mutex_unlock(&wd_mu);
                if (mine) {
                        pthread_join(wd_thread, NULL);
                        wd_owner = NULL;
                }
        }
}
#else
void srv_notify(loom_server *s, const char *state)
{
        (void)s;
        (void)state;
}
#endif
