/*
 * test_server_edge.c - what loomd takes from a client before any route runs: the bearer-token
 * parser (src/server/auth.c) accepts a worker token only as the text loomd issued, and the
 * daemons' log writer (cmd/daemon.h) keeps a line one line whatever a client named.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <string.h>

#include "../../cmd/daemon.h"
#include "srv.h"

static const uint8_t secret[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

static srv_bearer_kind parse(const char *fmt, const char *tok, uint32_t *job)
{
        char h[256];
        const char *t, *why;
        snprintf(h, sizeof h, fmt, tok);
        return srv_auth_bearer(h, secret, job, &t, &why);
}

Test(server_edge, a_worker_token_is_accepted_only_as_issued)
{
        char tok[LOOM_TOKEN_MAX];
        uint32_t job = 0;
        srv_auth_worker_text(secret, 42, tok);
        cr_assert_eq(parse("Bearer %s", tok, &job), SRV_BEARER_WORKER);
        cr_assert_eq(job, 42);
        cr_assert_eq(parse("bearer   %s", tok, &job), SRV_BEARER_WORKER, "scheme and spaces");
        const char *mac = strrchr(tok, '_') + 1;
        char upper[LOOM_TOKEN_MAX], other[LOOM_TOKEN_MAX];
        snprintf(upper, sizeof upper, "%s", tok);
        for (char *c = upper + (mac - tok); *c; c++)
                *c = (char)(*c >= 'a' && *c <= 'f' ? *c - 32 : *c);
        const char *const spellings[] = {"loom_w_+42_%s", "loom_w_042_%s",        "loom_w_ 42_%s",
                                         "loom_w_42 _%s", "loom_w_4294967338_%s", "loom_w_42_%s0",
                                         "loom_w_42_%s ", "loom_w_42__%s"};
        for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
                snprintf(other, sizeof other, spellings[i], mac);
                cr_assert_eq(parse("Bearer %s", other, &job), SRV_BEARER_BAD, "%s accepted", other);
                cr_assert_eq(job, 0);
        }
        cr_assert_eq(parse("Bearer %s", upper, &job), SRV_BEARER_BAD, "upper-case hex accepted");
        srv_auth_worker_text(secret, 43, other);
        snprintf(upper, sizeof upper, "loom_w_42_%s", strrchr(other, '_') + 1);
        cr_assert_eq(parse("Bearer %s", upper, &job), SRV_BEARER_BAD, "another job's MAC");
        cr_assert_eq(parse("Bearer %s", "loom_t_abc", &job), SRV_BEARER_STORED);
        cr_assert_eq(parse("Basic %s", "loom_t_abc", &job), SRV_BEARER_BAD);
}

Test(server_edge, a_logged_name_stays_on_its_line, .init = cr_redirect_stderr)
{
        daemon_log_line("loomd", "job 3 (x\n12:00:00.000 loomd: job 9 (y) accepted\x1b[2J) failed");
        fflush(stderr);
        char buf[512] = "";
        size_t n = fread(buf, 1, sizeof buf - 1, cr_get_redirected_stderr());
        buf[n] = '\0';
        cr_assert(n > 0 && strchr(buf, '\n') == buf + n - 1, "one line: %s", buf);
        cr_assert_null(strchr(buf, '\x1b'), "no raw escape: %s", buf);
        cr_assert(strstr(buf, "(x\\x0a12:00:00.000 loomd: job 9 (y) accepted\\x1b[2J) failed"),
                  "%s", buf);
}

Test(server_edge, the_log_writer_escapes_control_characters)
{
        char out[128];
        daemon_log_escape("job 3 (a\nb\x1b[31m\xc2\x9b\x7f\\ \xc3\xa9) accepted", out, sizeof out);
        cr_assert_str_eq(out, "job 3 (a\\x0ab\\x1b[31m\\u009b\\x7f\\\\ \xc3\xa9) accepted");
        daemon_log_escape("\n\n\n\n\n\n", out, 16); /* cut short, never overflowing */
        cr_assert_str_eq(out, "\\x0a\\x0a\\x0a");
}
