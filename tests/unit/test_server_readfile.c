/*
 * test_server_readfile.c - srv_read_file (src/server/readfile.c), the one reader of the TLS PEM
 * files for both the server (auth.c) and a following replica's redirector (redirect.c): a file
 * read whole, a pipe read whole past its first buffer, a file past 1 MiB and a missing one
 * refused with the path and the reason; and the redirector serving HTTPS from a real
 * certificate and key (openssl), refusing a certificate that is not PEM and a missing key.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "srv.h"

static char dir[64];

static void mkdir_tmp(void)
{
        snprintf(dir, sizeof dir, "/tmp/loom-readfile-XXXXXX");
        cr_assert(mkdtemp(dir));
}

static void rm_tmp(void)
{
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *path, const char *text, size_t n)
{
        FILE *f = fopen(path, "wb");
        cr_assert(f);
        cr_assert_eq(fwrite(text, 1, n, f), n);
        cr_assert_eq(fclose(f), 0);
}

TestSuite(readfile, .init = mkdir_tmp, .fini = rm_tmp);

Test(readfile, whole_file)
{
        char path[128];
        snprintf(path, sizeof path, "%s/a.pem", dir);
        const char *pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        write_file(path, pem, strlen(pem));
        loom_err e = {0};
        char *got = srv_read_file(path, "tls_cert", &e);
        cr_assert(got, "%s", e.msg);
        cr_assert_str_eq(got, pem);
        free(got);
        write_file(path, "", 0); /* empty: an empty string, not an error */
        got = srv_read_file(path, "tls_cert", &e);
        cr_assert(got);
        cr_assert_str_eq(got, "");
        free(got);
}

Test(readfile, refused_with_path_and_reason)
{
        char path[128];
        loom_err e = {0};
        snprintf(path, sizeof path, "%s/missing.key", dir);
        cr_assert_null(srv_read_file(path, "tls_key", &e));
        cr_assert_str_eq(e.field, "tls_key");
        cr_assert(strstr(e.msg, path) && strstr(e.msg, "No such file"), "%s", e.msg);
        snprintf(path, sizeof path, "%s/big.pem", dir);
        size_t n = (1 << 20) + 1;
        char *big = malloc(n);
        cr_assert(big);
        memset(big, 'A', n);
        write_file(path, big, n);
        free(big);
        cr_assert_null(srv_read_file(path, "tls_cert", &e));
        cr_assert(strstr(e.msg, "larger than 1 MiB"), "%s", e.msg);
        cr_assert_null(srv_read_file(dir, "tls_cert", &e)); /* a directory */
        cr_assert(strstr(e.msg, dir), "%s", e.msg);
}

/* A pipe has no size: read in growing buffers, 100 000 bytes in one string. */
Test(readfile, pipe)
{
        char path[128];
        snprintf(path, sizeof path, "%s/fifo", dir);
        cr_assert_eq(mkfifo(path, 0600), 0);
        pid_t p = fork();
        cr_assert(p >= 0);
        if (p == 0) {
                FILE *f = fopen(path, "wb");
                for (int i = 0; f && i < 100000; i++)
                        fputc('a' + i % 26, f);
                _exit(f && !fclose(f) ? 0 : 1);
        }
        loom_err e = {0};
        char *got = srv_read_file(path, "tls_cert", &e);
        int st;
        cr_assert_eq(waitpid(p, &st, 0), p);
        cr_assert(got, "%s", e.msg);
        cr_assert_eq(strlen(got), 100000);
        cr_assert_eq(got[99999], 'a' + 99999 % 26);
        free(got);
}

static void leader(void *arg, char *buf, size_t cap)
{
        (void)arg;
        snprintf(buf, cap, "https://127.0.0.1:1");
}

Test(readfile, redirector_tls)
{
        char cert[128], key[128], cmd[512];
        snprintf(cert, sizeof cert, "%s/srv.pem", dir);
        snprintf(key, sizeof key, "%s/srv.key", dir);
        snprintf(cmd, sizeof cmd,
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                 "-keyout %s -out %s -days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1",
                 key, cert);
        if (system(cmd) != 0)
                cr_skip_test("openssl could not make a certificate");
        loom_server_cfg cfg;
        loom_server_cfg_default(&cfg);
        cfg.port = 0;
        cfg.tls_cert = cert;
        cfg.tls_key = key;
        loom_redirector *r = NULL;
        loom_err e = {0};
        cr_assert_eq(loom_redirector_start(&r, &cfg, leader, NULL, &e), 0, "%s", e.msg);
        loom_redirector_stop(r);
        char bad[128];
        snprintf(bad, sizeof bad, "%s/bad.pem", dir);
        write_file(bad, "not a certificate\n", 18);
        cfg.tls_cert = bad;
        cr_assert_neq(loom_redirector_start(&r, &cfg, leader, NULL, &e), 0);
        cr_assert_str_eq(e.field, "listen"); /* read, then refused by TLS */
        cfg.tls_cert = cert;
        snprintf(bad, sizeof bad, "%s/none.key", dir);
        cfg.tls_key = bad;
        cr_assert_neq(loom_redirector_start(&r, &cfg, leader, NULL, &e), 0);
        cr_assert_str_eq(e.field, "tls_key");
        cr_assert(strstr(e.msg, bad), "%s", e.msg);
}
