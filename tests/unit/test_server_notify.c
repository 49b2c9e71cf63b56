/*
 * test_server_notify.c - loomd's readiness messages to systemd (src/server/notify.c) where the
 * integration test (systemd_notify.sh) cannot easily reach: a replica's redirector, which has no
 * scheduler, says READY=1 and keeps the watchdog fed while it follows. The test binds the
 * datagram socket $NOTIFY_SOCKET names and reads what comes.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "loom/server.h"

static int bind_notify(char *path, size_t len)
{
        snprintf(path, len, "/tmp/loom-notify-%d", (int)getpid());
        unlink(path);
        int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
        cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a));
        struct timeval tv = {.tv_sec = 10};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        return fd;
}

/* The next datagram, as a string ("" after 10 s without one). */
static void next(int fd, char *buf, size_t len)
{
        ssize_t n = recv(fd, buf, len - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
}

static void leader(void *arg, char *buf, size_t cap)
{
        snprintf(buf, cap, "http://127.0.0.1:1");
}

Test(server_notify, a_following_replica_is_ready_and_fed)
{
#ifndef LOOM_HAVE_SYSTEMD
        cr_skip_test("built without libsystemd");
#endif
        char path[108], msg[256];
        int fd = bind_notify(path, sizeof path);
        setenv("NOTIFY_SOCKET", path, 1);
        setenv("WATCHDOG_USEC", "100000", 1);
        unsetenv("WATCHDOG_PID");
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.port = 0;
        loom_redirector *r = NULL;
        loom_err e;
        cr_assert_eq(loom_redirector_start(&r, &cfg, leader, NULL, &e), 0, "%s", e.msg);
        next(fd, msg, sizeof msg);
        cr_assert(strstr(msg, "READY=1\n") == msg, "got '%s'", msg);
        cr_assert(strstr(msg, "STATUS=following the leader"), "got '%s'", msg);
        for (int i = 0; i < 2; i++) { /* no scheduler to check: it pings while it follows */
                next(fd, msg, sizeof msg);
                cr_assert_str_eq(msg, "WATCHDOG=1");
        }
        loom_redirector_stop(r);
        close(fd);
        unlink(path);
}
