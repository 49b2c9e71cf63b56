/*
 * test_server_options.c - loomd's command line as configuration (src/server/options.c) and the
 * token table (src/server/tokenlist.c): each bad value is named and changes nothing.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/auth.h"
#include "loom/server.h"
#include "srv.h"

static char *write_tmp(const char *text)
{
        static char path[64];
        snprintf(path, sizeof path, "/tmp/loom-options-XXXXXX");
        int fd = mkstemp(path);
        cr_assert(fd >= 0);
        cr_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
        close(fd);
        return path;
}

Test(server_options, each_option_sets_its_field)
{
        loom_server_cfg c;
        loom_server_cfg_default(&c);
        loom_err e;
        cr_assert_eq(loom_server_cfg_option(&c, "data-dir", "/srv/loom", &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "listen", "10.0.0.7:8080", &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "lease-timeout", "2.5", &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "drift-window", "7", &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "drift-threshold", "1.2", &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "compact-min", "0", &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "sync-full", NULL, &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "require-auth", NULL, &e), 0);
        cr_assert_str_eq(c.data_dir, "/srv/loom");
        cr_assert_str_eq(c.listen_host, "10.0.0.7");
        cr_assert_eq(c.port, 8080);
        cr_assert_float_eq(c.lease_timeout_s, 2.5, 1e-12);
        cr_assert_eq(c.drift_window, 7);
        cr_assert_float_eq(c.drift_threshold, 1.2, 1e-12);
        cr_assert_eq(c.compact_min, 0);
        cr_assert(c.sync_full);
        cr_assert_eq(c.auth, LOOM_AUTH_TOKENS);
}

Test(server_options, listen_takes_names_and_bracketed_ipv6)
{
        loom_server_cfg c;
        loom_server_cfg_default(&c);
        loom_err e;
        cr_assert_eq(loom_server_cfg_option(&c, "listen", "localhost:7481", &e), 0, "%s", e.msg);
        cr_assert_str_eq(c.listen_host, "localhost");
        cr_assert_eq(c.port, 7481);
        cr_assert_eq(loom_server_cfg_option(&c, "listen", "[::1]:0", &e), 0, "%s", e.msg);
        cr_assert_str_eq(c.listen_host, "::1");
        cr_assert_eq(c.port, 0);
        char line[256];
        c.data_dir = "/d";
        loom_server_serving_line(&c, 7482, line, sizeof line);
        cr_assert(strstr(line, "serving http on [::1]:7482, data in /d"), "%s", line);
}

Test(server_options, loopback_is_judged_on_the_resolved_addresses)
{
        const char *lo[] = {"localhost", "127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"};
        const char *not[] = {"0.0.0.0", "::", "10.0.0.7", "2001:db8::1", "::ffff:10.0.0.7"};
        loom_err e;
        for (size_t i = 0; i < sizeof lo / sizeof *lo; i++) {
                bool l = false;
                cr_assert_eq(srv_listen_loopback(lo[i], 0, &l, &e), 0, "%s: %s", lo[i], e.msg);
                cr_assert(l, "%s is loopback", lo[i]);
        }
        for (size_t i = 0; i < sizeof not / sizeof *not; i++) {
                bool l = true;
                cr_assert_eq(srv_listen_loopback(not[i], 0, &l, &e), 0, "%s: %s", not[i], e.msg);
                cr_assert(!l, "%s is not loopback", not[i]);
        }
        bool l;
        cr_assert_eq(srv_listen_loopback("no-such-host.invalid", 7480, &l, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "listen");
        cr_assert(strstr(e.msg, "cannot resolve no-such-host.invalid:7480: "), "%s", e.msg);
}

Test(server_options, listen_opens_ipv4_ipv6_and_names)
{
        const char *hosts[] = {"127.0.0.1", "::1", "localhost"};
        loom_err e;
        for (size_t i = 0; i < 3; i++) {
                int fd = -1, port = 0;
                cr_assert_eq(srv_listen_open(hosts[i], 0, &fd, &port, &e), 0, "%s: %s", hosts[i],
                             e.msg);
                cr_assert(fd >= 0 && port > 0, "%s: fd %d port %d", hosts[i], fd, port);
                int fd2 = -1, port2 = 0; /* the same port again: in use, and the error says where */
                cr_assert_eq(srv_listen_open(hosts[i], port, &fd2, &port2, &e), LOOM_EIO);
                char want[96];
                snprintf(want, sizeof want, i == 1 ? "[%s]:%d: " : "%s:%d: ", hosts[i], port);
                cr_assert(strstr(e.msg, want) == e.msg, "%s does not start with %s", e.msg, want);
                close(fd);
        }
}

Test(server_options, a_bad_value_is_named_and_changes_nothing)
{
        loom_server_cfg c, before;
        loom_server_cfg_default(&c);
        before = c;
        loom_err e;
        cr_assert_eq(loom_server_cfg_option(&c, "lease-timeout", "-1", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "--lease-timeout");
        cr_assert_str_eq(e.msg, "'-1' is not a number of seconds");
        cr_assert_eq(loom_server_cfg_option(&c, "drift-threshold", "1.2x", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "--drift-threshold");
        cr_assert_eq(loom_server_cfg_option(&c, "listen", "1.2.3.4:99999", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.msg, "expected HOST:PORT or [IPv6]:PORT, got '1.2.3.4:99999'");
        cr_assert_eq(loom_server_cfg_option(&c, "listen", "::1:7480", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.msg, "'::1:7480': write an IPv6 address in brackets, [ADDR]:PORT");
        cr_assert_eq(loom_server_cfg_option(&c, "listen", "[::1]7480", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.msg, "expected HOST:PORT or [IPv6]:PORT, got '[::1]7480'");
        cr_assert_eq(loom_server_cfg_option(&c, "listen", "[]:7480", &e), LOOM_EINVAL);
        cr_assert_eq(loom_server_cfg_option(&c, "listen", ":7480", &e), LOOM_EINVAL);
        cr_assert_eq(loom_server_cfg_option(&c, "compact-min", "-3", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.msg, "'-3' is not a count");
        cr_assert_eq(loom_server_cfg_option(&c, "no-such-option", "1", &e), LOOM_ENOENT);
        cr_assert(!memcmp(&c, &before, sizeof c), "a refused value changed the config");
        cr_assert_eq(loom_server_cfg_option(&c, "insecure-loopback", NULL, &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "require-auth", NULL, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.msg, "--require-auth and --insecure-loopback exclude each other");
        cr_assert_eq(c.auth, LOOM_AUTH_NONE);
}

Test(server_options, the_cluster_file_is_read_or_its_error_located)
{
        loom_server_cfg c;
        loom_server_cfg_default(&c);
        loom_err e;
        char *p = write_tmp("{\"cluster\": {\"gpus_per_node\": 4}, \"policy\": {\"admission\": "
                            "\"p95\"}}");
        cr_assert_eq(loom_server_cfg_load(&c, p, &e), 0, "%s", e.msg);
        unlink(p);
        cr_assert(c.have_cluster);
        cr_assert_eq(c.cluster.gpus_per_node, 4);
        cr_assert_eq(c.policy.admission, LOOM_ADMIT_P95);

        loom_server_cfg before = c;
        p = write_tmp("{\"cluster\": {\n  \"gpus_per_node\": 2,\n  \"bogus\": 1}}");
        cr_assert_eq(loom_server_cfg_load(&c, p, &e), LOOM_EINVAL);
        char want[128];
        snprintf(want, sizeof want, "%s:3:12: cluster.bogus: unknown field", p);
        unlink(p);
        cr_assert_str_eq(e.msg, want);
        cr_assert_eq(e.line, 3);
        cr_assert(!memcmp(&c, &before, sizeof c), "a refused file changed the config");

        cr_assert_eq(loom_server_cfg_load(&c, "/nonexistent/cluster.json", &e), LOOM_EIO);
        cr_assert_str_eq(e.msg, "/nonexistent/cluster.json: No such file or directory");
}

Test(server_options, the_token_table_says_each_tokens_state)
{
        loom_token_info t[3] = {
            {.id = 1, .tenant = "team-a", .role = LOOM_ROLE_ADMIN, .created_s = 86400},
            {.id = 2,
             .tenant = "team-b",
             .role = LOOM_ROLE_TENANT,
             .created_s = 86400,
             .expires_s = 100000},
            {.id = 3, .tenant = "team-c", .role = LOOM_ROLE_TENANT, .revoked = true},
        };
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        loom_token_print(f, t, 3, 200000);
        fclose(f);
        cr_assert(strstr(buf, "ID     ROLE     TENANT"));
        cr_assert(strstr(buf, "1      admin    team-a               1970-01-02T00:00:00Z   never"
                              "                  active\n"),
                  "%s", buf);
        cr_assert(strstr(buf, "team-b               1970-01-02T00:00:00Z   "
                              "1970-01-02T03:46:40Z   expired\n"),
                  "%s", buf);
        cr_assert(strstr(buf, "team-c               never                  never"
                              "                  revoked\n"),
                  "%s", buf);
        free(buf);
}

Test(server_options, connection_limits_and_the_request_deadline)
{
        loom_server_cfg c;
        loom_server_cfg_default(&c);
        cr_assert_eq(c.request_timeout_s, 10);
        cr_assert_eq(c.max_conns, 8192);
        cr_assert_eq(c.max_conns_per_addr, 2048);
        loom_err e;
        cr_assert_eq(loom_server_cfg_option(&c, "request-timeout", "2.5", &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "max-conns", "300", &e), 0);
        cr_assert_eq(loom_server_cfg_option(&c, "max-conns-per-addr", "0", &e), 0);
        cr_assert_eq(c.request_timeout_s, 2.5);
        cr_assert_eq(c.max_conns, 300);
        cr_assert_eq(c.max_conns_per_addr, 0);
        cr_assert_eq(loom_server_cfg_option(&c, "max-conns", "0", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "--max-conns");
        cr_assert_eq(loom_server_cfg_option(&c, "max-conns-per-addr", "-1", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "--max-conns-per-addr");
        cr_assert_eq(loom_server_cfg_option(&c, "request-timeout", "soon", &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "--request-timeout");
        cr_assert_eq(c.max_conns, 300, "a refused value changes nothing");
        cr_assert_eq(c.request_timeout_s, 2.5);
}
