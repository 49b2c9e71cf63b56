/*
 * wire.c - the control protocol of loom-state: each message is a 4-byte little-endian length
 * and that many bytes of JSON. A request may carry descriptors (SCM_RIGHTS) with its first byte;
 * they are the memfds of the client's buffers, referenced by index from the JSON.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "loom/sync.h"

static int write_all(int fd, const void *p, size_t n, loom_err *e)
{
        if (loom__write_all(fd, p, n))
                return loom_err_set(e, LOOM_EIO, "socket", "send: %s", strerror(errno));
        return 0;
}

/* Read n bytes by `deadline` (loom__state_now() seconds; 0: no deadline). A peer that starts a
 * message and stalls must not hold the reader (the daemon's thread) for ever. */
static int read_by(int fd, uint8_t *p, size_t n, double deadline, loom_err *e)
{
        while (n) {
                double left = deadline - loom__state_now();
                if (left <= 0)
                        return loom_err_set(e, LOOM_ETIMEDOUT, "socket",
                                            "message not complete in time (%zu bytes missing)", n);
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                int k = poll(&pf, 1, (int)(left * 1000) + 1);
                if (k < 0 && errno != EINTR)
                        return loom_err_set(e, LOOM_EIO, "socket", "poll: %s", strerror(errno));
                if (k <= 0)
                        continue;
                ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
                if (r == 0)
                        return loom_err_set(e, LOOM_EIO, "socket", "closed mid-message");
                if (r < 0 && errno != EINTR && errno != EAGAIN)
                        return loom_err_set(e, LOOM_EIO, "socket", "recv: %s", strerror(errno));
                if (r > 0)
                        p += r, n -= (size_t)r;
        }
        return 0;
}

static int read_all(int fd, void *p, size_t n, double deadline, loom_err *e)
{
        if (deadline > 0)
                return read_by(fd, p, n, deadline, e);
        int rc = loom__read_all(fd, p, n);
        if (rc == LOOM_EPROTO)
                return loom_err_set(e, LOOM_EIO, "socket", "closed mid-message");
        if (rc)
                return loom_err_set(e, LOOM_EIO, "socket", "recv: %s", strerror(errno));
        return 0;
}

int loom__state_send(int sock, json_t *msg, const int *fds, int nfds, loom_err *e)
{
        char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory encoding a message");
        size_t n = strlen(text);
        uint8_t hdr[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
        struct iovec iov = {.iov_base = hdr, .iov_len = 1};
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int) * ST_MAX_FDS)];
        } cm;
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (nfds > 0) {
                memset(&cm, 0, sizeof cm);
                mh.msg_control = cm.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
        }
        ssize_t w;
        do
                w = sendmsg(sock, &mh, MSG_NOSIGNAL);
        while (w < 0 && errno == EINTR);
        int rc = w == 1 ? 0 : loom_err_set(e, LOOM_EIO, "socket", "sendmsg: %s", strerror(errno));
        if (!rc)
                rc = write_all(sock, hdr + 1, 3, e);
        if (!rc)
                rc = write_all(sock, text, n, e);
        free(text);
        return rc;
}

int loom__state_recv(int sock, json_t **msg, int *fds, int *nfds, loom_err *e)
{
        return loom__state_recv_by(sock, 0, msg, fds, nfds, e);
}

int loom__state_recv_by(int sock, double limit_s, json_t **msg, int *fds, int *nfds, loom_err *e)
{
        *msg = NULL;
        *nfds = 0;
        uint8_t hdr[4];
        struct iovec iov = {.iov_base = hdr, .iov_len = 1};
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int) * ST_MAX_FDS)];
        } cm;
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = cm.buf,
                            .msg_controllen = sizeof cm.buf};
        ssize_t r;
        do
                r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                return loom_err_set(e, LOOM_EIO, "socket", "closed");
        if (r < 0)
                return loom_err_set(e, LOOM_EIO, "socket", "recvmsg: %s", strerror(errno));
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                        for (int i = 0; i < k; i++) {
                                int fd;
                                memcpy(&fd, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof fd);
                                if (*nfds < ST_MAX_FDS)
                                        fds[(*nfds)++] = fd;
                                else
                                        close(fd);
                        }
                }
        /* the clock starts at the first byte: waiting for one is the caller's idle wait */
        double deadline = limit_s > 0 ? loom__state_now() + limit_s : 0;
        int rc = read_all(sock, hdr + 1, 3, deadline, e);
        if (rc)
                return rc;
        size_t n =
            (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
        if (n > ST_MAX_MSG)
                return loom_err_set(e, LOOM_EPROTO, "socket", "message of %zu bytes", n);
        char *text = malloc(n + 1);
        if (!text)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        rc = read_all(sock, text, n, deadline, e);
        if (!rc) {
                json_error_t je;
                *msg = json_loadb(text, n, 0, &je);
                if (!*msg || !json_is_object(*msg)) {
                        json_decref(*msg);
                        *msg = NULL;
                        rc = loom_err_set(e, LOOM_EPROTO, "message", "not a JSON object: %s",
                                          je.text);
                }
        }
        free(text);
        return rc;
}

json_t *loom__state_key_json(const loom_state_key *k)
{
        return json_pack("{s:s, s:I, s:s, s:[I,I,I,I], s:s}", "job", k->job, "version",
                         (json_int_t)k->version, "name", k->name, "rect", (json_int_t)k->r0,
                         (json_int_t)k->r1, (json_int_t)k->c0, (json_int_t)k->c1, "dtype",
                         k->dtype);
}

static int copy_str(json_t *o, const char *name, char *dst, size_t cap, const char *field,
                    loom_err *e)
{
        json_t *v = json_object_get(o, name);
        if (!json_is_string(v) || json_string_length(v) >= cap)
                return loom_err_set(e, LOOM_EINVAL, field, "%s must be a string of < %zu bytes",
                                    name, cap);
        memcpy(dst, json_string_value(v), json_string_length(v) + 1);
        return 0;
}

int loom__state_key_parse(json_t *j, const char *field, loom_state_key *k, loom_err *e)
{
        memset(k, 0, sizeof *k);
        if (!json_is_object(j))
                return loom_err_set(e, LOOM_EINVAL, field, "key must be an object");
        int rc = copy_str(j, "job", k->job, sizeof k->job, field, e);
        if (!rc)
                rc = copy_str(j, "name", k->name, sizeof k->name, field, e);
        if (!rc)
                rc = copy_str(j, "dtype", k->dtype, sizeof k->dtype, field, e);
        if (rc)
                return rc;
        json_t *v = json_object_get(j, "version"), *r = json_object_get(j, "rect");
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return loom_err_set(e, LOOM_EINVAL, field, "version must be an integer >= 0");
        k->version = (uint64_t)json_integer_value(v);
        if (!json_is_array(r) || json_array_size(r) != 4)
                return loom_err_set(e, LOOM_EINVAL, field, "rect must be [r0, r1, c0, c1]");
        uint64_t q[4];
        for (size_t i = 0; i < 4; i++) {
                json_t *x = json_array_get(r, i);
                if (!json_is_integer(x) || json_integer_value(x) < 0)
                        return loom_err_set(e, LOOM_EINVAL, field, "rect[%zu] must be >= 0", i);
                q[i] = (uint64_t)json_integer_value(x);
        }
        k->r0 = q[0], k->r1 = q[1], k->c0 = q[2], k->c1 = q[3];
        return loom_state_key_check(k, field, e);
}
