/*
 * server_http.h - what the server's unit tests share: a scratch folder, and one HTTP request on
 * loopback to a loom_server they started.
 */
#ifndef LOOM_TEST_SERVER_HTTP_H
#define LOOM_TEST_SERVER_HTTP_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A new folder under /tmp (caller frees the name). */
static inline char *test_tmpdir(void)
{
        char *d = strdup("/tmp/loom-test-server-XXXXXX");
        cr_assert_not_null(mkdtemp(d));
        return d;
}

static inline void test_rmdir(const char *d)
{
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
        cr_assert_eq(system(cmd), 0);
}

/* One request on a fresh connection; returns the status, *out (if out) the body (malloc). */
static inline int test_http(int port, const char *method, const char *path, const char *body,
                            char **out)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
        char req[4096];
        int n = snprintf(req, sizeof req,
                         "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         method, path, body ? strlen(body) : 0, body ? body : "");
        cr_assert_eq(write(fd, req, (size_t)n), n);
        size_t cap = 1 << 16, len = 0;
        char *buf = malloc(cap);
        ssize_t r;
        while ((r = read(fd, buf + len, cap - 1 - len)) > 0)
                len += (size_t)r;
        buf[len] = '\0';
        close(fd);
        int status = 0;
        sscanf(buf, "HTTP/1.1 %d", &status);
        char *b = strstr(buf, "\r\n\r\n");
        if (out)
                *out = strdup(b ? b + 4 : "");
        free(buf);
        return status;
}

#endif
