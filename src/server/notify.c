/*
 * notify.c - loomd's side of systemd's readiness protocol (sd_notify, Type=notify units).
 *
 * READY=1 goes out once loom_server_start has replayed the store and the HTTP server answers on
 * its socket (or once a replica's redirector serves), STOPPING=1 as loom_server_stop begins.
 * When the unit sets WatchdogSec, a thread sends WATCHDOG=1 at half the interval, but only
 * while it can take the scheduler's lock and the store has not failed: a scheduler thread stuck
 * holding the lock, or a dead store, stops the pings and systemd restarts loomd. A replica that
 * follows (no scheduler yet) pings while it redirects.
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

/* One watchdog thread per process: systemd watches one main process. It starts at the first
 * READY and checks wd_server, the server that became ready last (NULL while only a replica's
 * redirector serves: then it pings unconditionally, as a follower has no scheduler yet). */
static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static loom_server *wd_server; /* guarded by wd_mu */
static bool wd_running, wd_quit;
static pthread_t wd_thread;

static void *watchdog_main(void *arg)
{
        long long half_ns = *(uint64_t *)arg * 1000 / 2;
        pthread_mutex_lock(&wd_mu);
        while (!wd_quit) {
                loom_server *s = wd_server;
                bool ok = true;
                if (s) { /* stays valid: STOPPING joins this thread before the server goes */
                        pthread_mutex_unlock(&wd_mu);
                        pthread_mutex_lock(&s->mu); /* blocks, so stops the pings, if stuck */
                        pthread_mutex_unlock(&s->mu);
                        ok = !s->store_failed;
                        pthread_mutex_lock(&wd_mu);
                }
                if (ok)
                        sd_notify(0, "WATCHDOG=1");
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                long long ns = until.tv_nsec + half_ns;
                until.tv_sec += (time_t)(ns / 1000000000);
                until.tv_nsec = (long)(ns % 1000000000);
                while (!wd_quit && pthread_cond_timedwait(&wd_cv, &wd_mu, &until) != ETIMEDOUT)
                        ;
        }
        pthread_mutex_unlock(&wd_mu);
        return NULL;
}

void srv_notify(loom_server *s, const char *state)
{
        static uint64_t wd_usec;
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
                pthread_mutex_lock(&wd_mu);
                wd_server = s;
                if (!wd_running && sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0) {
                        wd_quit = false;
                        wd_running = !pthread_create(&wd_thread, NULL, watchdog_main, &wd_usec);
                }
                pthread_mutex_unlock(&wd_mu);
        } else if (!strcmp(state, "STOPPING")) {
                sd_notify(0, "STOPPING=1\nSTATUS=stopping");
                pthread_mutex_lock(&wd_mu);
                bool join = wd_running && wd_server == s;
                if (join) {
                        wd_quit = true;
                        pthread_cond_signal(&wd_cv);
                }
                pthread_mutex_unlock(&wd_mu);
                if (join) {
                        pthread_join(wd_thread, NULL);
                        pthread_mutex_lock(&wd_mu);
                        wd_running = false;
                        wd_server = NULL;
                        pthread_mutex_unlock(&wd_mu);
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
