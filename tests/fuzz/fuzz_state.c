/*
 * fuzz_state.c - libFuzzer target for loom-state's control protocol (a 4-byte little-endian
 * length, then that many bytes of JSON; see src/state/wire.c). The first byte picks the side:
 *   'W' + bytes: the bytes are a stream read by loom__state_recv over a socketpair; a decoded
 *                message's "key" and "items[].key" go through the key parser. Each step either
 *                succeeds or fails with a message.
 *   'D' + bytes: the bytes are what a client sends to a live loom-state daemon (in this
 *                process, on a scratch directory, small tiers); every reply must be a JSON
 *                object with "ok". The connection is kept for the next input while the
 *                daemon answers every message (as a client's would be), else reopened.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "state/internal.h"

#define MAX_INPUT (64 * 1024)

static loom_state_daemon *daemon_;
static char dir[] = "/tmp/loom-fuzz-state-XXXXXX";

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void *run_daemon(void *arg)
{
        loom_err e;
        loom_state_daemon_run(daemon_, &e);
        return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        if (!mkdtemp(dir))
                abort();
        loom_state_cfg c;
        loom_state_cfg_default(&c);
        c.dir = dir;
        c.host_bytes = 16u << 20;
        c.disk_bytes = 64u << 20;
        c.no_mlock = 1;
        loom_err e;
        if (loom_state_daemon_new(&c, &daemon_, &e)) {
                fprintf(stderr, "fuzz_state: %s\n", e.msg);
                abort();
        }
        pthread_t t;
        if (pthread_create(&t, NULL, run_daemon, NULL))
                abort();
        pthread_detach(t);
        return 0;
}

static void parse_keys(json_t *msg)
{
        loom_state_key k;
        loom_err e;
        json_t *key = json_object_get(msg, "key");
        if (key && loom__state_key_parse(key, "key", &k, &e) && !e.msg[0])
                abort();
        json_t *items = json_object_get(msg, "items"), *it;
        size_t i;
        json_array_foreach(items, i, it)
        {
                loom_err_clear(&e);
                if (loom__state_key_parse(json_object_get(it, "key"), "items.key", &k, &e) &&
                    !e.msg[0])
                        abort();
        }
}

static void wire_side(const uint8_t *data, size_t size)
{
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
                abort();
        if (size && write(sv[1], data, size) != (ssize_t)size)
                abort();
        shutdown(sv[1], SHUT_WR);
        for (;;) {
                json_t *msg;
                int fds[ST_MAX_FDS], nfds;
                loom_err e;
                loom_err_clear(&e);
                if (loom__state_recv(sv[0], &msg, fds, &nfds, &e)) {
                        if (!e.msg[0])
                                abort();
                        break;
                }
                parse_keys(msg);
                json_decref(msg);
        }
        close(sv[0]);
        close(sv[1]);
}

static int dconn = -1; /* kept across inputs made only of whole messages */

static int daemon_connect(void)
{
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", loom_state_daemon_sock(daemon_));
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a))
                abort();
        int big = 4 * MAX_INPUT;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
        return fd;
}

/* Read one reply; false when the daemon closed the connection. */
static bool one_reply(int fd)
{
        json_t *msg;
        int fds[ST_MAX_FDS], nfds;
        loom_err e;
        if (loom__state_recv(fd, &msg, fds, &nfds, &e))
                return false;
        for (int i = 0; i < nfds; i++)
                close(fds[i]);
        if (!json_is_boolean(json_object_get(msg, "ok")))
                abort();
        json_decref(msg);
        return true;
}

static void daemon_side(const uint8_t *data, size_t size)
{
        /* Whole messages (by their length prefix) get one reply each, or the daemon closes the
         * connection at the first it refuses; a trailing partial message can only end with the
         * connection, so then the client closes its side and reads to the end. */
        size_t whole = 0, off = 0;
        while (size - off >= 4) {
                size_t n = (size_t)data[off] | (size_t)data[off + 1] << 8 |
                           (size_t)data[off + 2] << 16 | (size_t)data[off + 3] << 24;
                if (n > size - off - 4)
                        break;
                off += 4 + n;
                whole++;
        }
        if (dconn < 0)
                dconn = daemon_connect();
        /* the daemon answers each message before it reads the next: send all, then read */
        if (size && write(dconn, data, size) != (ssize_t)size)
                abort();
        bool open = true;
        for (size_t i = 0; open && i < whole; i++)
                open = one_reply(dconn);
        if (open && off < size) {
                shutdown(dconn, SHUT_WR);
                while (one_reply(dconn))
                        ;
                open = false;
        }
        if (!open) {
                close(dconn);
                dconn = -1;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > MAX_INPUT)
                return 0;
        if (data[0] == 'W')
                wire_side(data + 1, size - 1);
        else if (data[0] == 'D')
                daemon_side(data + 1, size - 1);
        return 0;
}
