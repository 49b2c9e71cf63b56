/*
 * tokenlist.c - the table of tokens `loomd token list` prints (docs/security.md): id, role,
 * tenant, creation and expiry in UTC, and whether each is active, expired or revoked.
 */
#include <stdio.h>
#include <time.h>

#include "loom/auth.h"

static void when(int64_t t, char *buf, size_t cap)
{
        time_t tt = (time_t)t;
        struct tm tm;
        if (!t || !gmtime_r(&tt, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
                snprintf(buf, cap, "never");
}

void loom_token_print(FILE *f, const loom_token_info *t, int n, int64_t now)
{
        fprintf(f, "%-6s %-8s %-20s %-22s %-22s %s\n", "ID", "ROLE", "TENANT", "CREATED", "EXPIRES",
                "STATE");
        for (int i = 0; i < n; i++) {
                char cr[32], ex[32];
                when(t[i].created_s, cr, sizeof cr);
                when(t[i].expires_s, ex, sizeof ex);
                const char *st = t[i].revoked                              ? "revoked"
                                 : t[i].expires_s && now >= t[i].expires_s ? "expired"
                                                                           : "active";
                fprintf(f, "%-6lld %-8s %-20s %-22s %-22s %s\n", (long long)t[i].id,
                        loom_role_name(t[i].role), t[i].tenant, cr, ex, st);
        }
}
