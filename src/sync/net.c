/*
 * net.c - TCP plumbing for the transfer: listening and connecting (with retry while the peer
 * starts), whole-buffer reads and writes, the connection hello, and framed messages.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

#define HELLO_MAGIC UINT32_C(0x4859534C) /* "LSYH" */

static void tune(int fd)
{
        int one = 1, buf = 8 << 20;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* large buffers keep a long fat pipe full; the kernel caps them at its limits */
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

int loom__listen(uint32_t addr, uint16_t *port, int *fd_out, loom_err *e)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return loom_err_set(e, LOOM_EIO, "socket", "socket: %s", strerror(errno));
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        tune(fd);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(addr)};
        socklen_t len = sizeof sa;
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 256) ||
            getsockname(fd, (struct sockaddr *)&sa, &len)) {
                int err = errno;
                close(fd);
                return loom_err_set(e, LOOM_EIO, "socket", "listen: %s", strerror(err));
        }
        *port = ntohs(sa.sin_port);
        *fd_out = fd;
        return 0;
}

int loom__connect(const char *ip, uint16_t port, double timeout_s, int *fd_out, loom_err *e)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
                return loom_err_set(e, LOOM_EINVAL, "ip", "bad address %s", ip);
        double end = loom__now() + timeout_s;
        for (;;) {
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return loom_err_set(e, LOOM_EIO, "socket", "socket: %s", strerror(errno));
                tune(fd);
                if (!connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
                        *fd_out = fd;
                        return 0;
                }
                int err = errno;
                close(fd);
                if (loom__now() > end)
                        return loom_err_set(e, LOOM_EIO, "connect", "connect %s:%u: %s", ip, port,
                                            strerror(err));
                usleep(20000);
        }
}

int loom__write_all(int fd, const void *buf, size_t len)
{
        const uint8_t *p = buf;
        while (len) {
                ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return LOOM_EIO;
                p += k;
                len -= (size_t)k;
        }
        return 0;
}

int loom__read_all(int fd, void *buf, size_t len)
{
        uint8_t *p = buf;
        while (len) {
                ssize_t k = recv(fd, p, len, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return LOOM_EIO;
                if (k == 0)
                        return LOOM_EPROTO; /* peer closed mid-message */
                p += k;
                len -= (size_t)k;
        }
        return 0;
}

void loom__hello_pack(const loom__hello *h, uint8_t b[LOOM__HELLO_LEN])
{
        uint32_t magic = HELLO_MAGIC;
        memcpy(b, &magic, 4);
        memcpy(b + 4, &h->kind, 4);
        memcpy(b + 8, &h->stream, 4);
        memcpy(b + 12, &h->flags, 4);
        memcpy(b + 16, &h->version, 8);
}

int loom__hello_send(int fd, const loom__hello *h)
{
        uint8_t b[LOOM__HELLO_LEN];
        loom__hello_pack(h, b);
        return loom__write_all(fd, b, sizeof b);
}

int loom__hello_recv(int fd, loom__hello *h, loom_err *e)
{
        uint8_t b[24];
        uint32_t magic;
        if (loom__read_all(fd, b, sizeof b))
                return loom_err_set(e, LOOM_EIO, "hello", "connection closed before hello");
        memcpy(&magic, b, 4);
        if (magic != HELLO_MAGIC)
                return loom_err_set(e, LOOM_EPROTO, "hello", "not a loom sync peer");
        memcpy(&h->kind, b + 4, 4);
        memcpy(&h->stream, b + 8, 4);
        memcpy(&h->flags, b + 12, 4);
        memcpy(&h->version, b + 16, 8);
        return 0;
}

int loom__frame_send(int fd, const loom_sync_frame *f, const void *payload, uint64_t *bytes)
{
        uint8_t hdr[LOOM_SYNC_FRAME_HDR];
        loom_sync_frame_pack(f, hdr);
        int rc = loom__write_all(fd, hdr, sizeof hdr);
        if (!rc && f->payload_len)
                rc = loom__write_all(fd, payload, (size_t)f->payload_len);
        if (!rc && bytes)
                *bytes += sizeof hdr + f->payload_len;
        return rc;
}

int loom__frame_recv_hdr(int fd, uint8_t hdr[LOOM_SYNC_FRAME_HDR], loom_sync_frame *f,
                         uint64_t max_payload, loom_err *e)
{
        if (loom__read_all(fd, hdr, LOOM_SYNC_FRAME_HDR))
                return loom_err_set(e, LOOM_EIO, "frame", "connection lost before a frame");
        int rc = loom_sync_frame_unpack(hdr, f, e);
        if (rc)
                return rc;
        if (f->payload_len > max_payload)
                return loom_err_set(e, LOOM_ERANGE, "frame.payload_len",
                                    "frame of %llu bytes, at most %llu expected",
                                    (unsigned long long)f->payload_len,
                                    (unsigned long long)max_payload);
        return 0;
}

int loom__frame_recv(int fd, loom_sync_frame *f, uint8_t **payload, uint64_t max_payload,
                     uint64_t *bytes, loom_err *e)
{
        uint8_t hdr[LOOM_SYNC_FRAME_HDR];
        *payload = NULL;
        int rc = loom__frame_recv_hdr(fd, hdr, f, max_payload, e);
        if (rc)
                return rc;
        if (f->payload_len) {
                *payload = malloc((size_t)f->payload_len);
                if (!*payload)
                        return loom_err_set(e, LOOM_ENOMEM, "frame", "out of memory");
                if (loom__read_all(fd, *payload, (size_t)f->payload_len)) {
                        free(*payload);
                        *payload = NULL;
                        return loom_err_set(e, LOOM_EIO, "frame", "connection lost mid-frame");
                }
        }
        if (bytes)
                *bytes += sizeof hdr + f->payload_len;
        return 0;
}

void loom__fast_link_thread(void)
{
        /* On one host the rollout "fabric" (loopback TCP) and the slow link share the CPU
         * cores; separate hosts with NVLink would not. Lower this thread's priority so that
         * the slow-link threads run first, as they would there. */
        setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
}

int loom__spawn_detached(void *(*fn)(void *), void *arg)
{
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &at, fn, arg);
        pthread_attr_destroy(&at);
        return rc;
}

uint64_t loom__model_hash(const char *model)
{
        if (!model || !*model)
                return 0;
        uint64_t h = UINT64_C(0xcbf29ce484222325);
        for (const unsigned char *c = (const unsigned char *)model; *c; c++)
                h = (h ^ *c) * UINT64_C(0x100000001b3);
        return h ? h : 1; /* 0 means "no id" on the wire */
}

int loom__model_check(const char *model, loom_err *e)
{
        if (!model)
                return 0;
        size_t n = strlen(model);
        if (n > LOOM_SYNC_MODEL_MAX)
                return loom_err_set(e, LOOM_EINVAL, "model", "longer than %d bytes",
                                    LOOM_SYNC_MODEL_MAX);
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)model[i] < 0x20 || model[i] == 0x7f)
                        return loom_err_set(e, LOOM_EINVAL, "model",
                                            "control character at byte %zu", i);
        return 0;
}
