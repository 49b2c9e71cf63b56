/*
 * token.c - `loomd token create|list|revoke|rotate-secret`: manage who may call loomd
 * (docs/security.md). Works on DATA_DIR/auth.db whether or not loomd runs; a running loomd
 * sees a new or revoked token at its next request.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom/auth.h"
#include "loomd_ha.h"
#include "loomd_token.h"

static void usage(FILE *f)
{
        fprintf(f, "usage: loomd token create --data-dir DIR --tenant NAME [--role admin|tenant]\n"
                   "                          [--ttl SECONDS]\n"
                   "       loomd token list --data-dir DIR\n"
                   "       loomd token revoke --data-dir DIR ID\n"
                   "       loomd token rotate-secret --data-dir DIR\n"
                   "                          [--store etcd://H:P,... [--ha-name NAME]]\n"
                   "\n"
                   "create prints the new token once (it is stored hashed); role defaults to\n"
                   "tenant. rotate-secret changes every job's worker token and sync key (loomd\n"
                   "reads it at start). On a replica's data dir give its --store and --ha-name:\n"
                   "with every replica stopped, the new secret is written through the\n"
                   "replicated log (docs/ha.md); tokens reach every replica on their own.\n");
}

static int fail(const char *what, const loom_err *e)
{
        fprintf(stderr, "loomd token %s: %s%s%s\n", what, e->field[0] ? e->field : "",
                e->field[0] ? ": " : "", e->msg);
        return 1;
}

/* rotate-secret: the store alone, or through the replicated log with every replica stopped. A
 * replica's data dir without --store is refused: the replica rebuilds its store from the log at
 * start, so the rotation would be lost. */
static int rotate(const char *dir, const loomd_ha_opts *ha)
{
        char mark[1024];
        loom_err e;
        if (!ha->store && !loomd_ha_marked(dir, mark, sizeof mark)) {
                fprintf(stderr,
                        "loomd token rotate-secret: %s is a replica's store (%s), rebuilt from "
                        "the replicated log when it starts: stop every replica, then give "
                        "--store and --ha-name (docs/ha.md)\n",
                        dir, mark);
                return 2;
        }
        loom_replica *r = NULL;
        char me[300];
        snprintf(me, sizeof me, "loomd-token-rotate-secret://%d", (int)getpid());
        if (ha->store && loomd_ha_lead_once(ha, dir, me, 10, &r))
                return 1;
        int rc = loom_auth_rotate_secret(dir, r ? loom_replica_append : NULL, r, &e);
        loom_replica_close(r);
        if (rc)
                return fail("rotate-secret", &e);
        fprintf(stderr, "secret rotated%s: restart loomd, then hand every live job its new "
                        "worker token and sync key (GET /v1/jobs/ID)\n",
                ha->store ? " through the replicated log" : "");
        return 0;
}

int loomd_token_main(int argc, char **argv)
{
        static const struct option opts[] = {
            {"data-dir", required_argument, NULL, 'd'}, {"tenant", required_argument, NULL, 't'},
            {"role", required_argument, NULL, 'r'},     {"ttl", required_argument, NULL, 'T'},
            {"store", required_argument, NULL, 'S'},    {"ha-name", required_argument, NULL, 'N'},
            {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
        };
        if (argc < 2) {
                usage(stderr);
                return 2;
        }
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
                usage(stdout);
                return 0;
        }
        const char *verb = argv[1], *dir = NULL, *tenant = NULL;
        loom_role role = LOOM_ROLE_TENANT;
        long long ttl = 0;
        loomd_ha_opts ha = {0};
        int c;
        optind = 2;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                char *end;
                switch (c) {
                case 'd':
                        dir = optarg;
                        break;
                case 't':
                        tenant = optarg;
                        break;
                case 'r':
                        if (loom_role_parse(optarg, &role)) {
                                fprintf(stderr,
                                        "loomd token: --role: expected admin or tenant, "
                                        "got '%s'\n",
                                        optarg);
                                return 2;
                        }
                        break;
                case 'T':
                        ttl = strtoll(optarg, &end, 10);
                        if (end == optarg || *end || ttl <= 0) {
                                fprintf(stderr,
                                        "loomd token: --ttl: '%s' is not a number of "
                                        "seconds > 0\n",
                                        optarg);
                                return 2;
                        }
                        break;
                case 'S':
                case 'N':
                        if (loomd_ha_option(&ha, c == 'S' ? "store" : "ha-name", optarg))
                                return 2;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (!dir) {
                fprintf(stderr, "loomd token: --data-dir is required\n");
                return 2;
        }
        if ((ha.store || ha.name) && strcmp(verb, "rotate-secret")) {
                fprintf(stderr, "loomd token %s: --store and --ha-name are for rotate-secret; a "
                                "replica's tokens reach the others on their own (docs/ha.md)\n",
                        verb);
                return 2;
        }
        loom_err e;
        if (!strcmp(verb, "create") && optind == argc) {
                if (!tenant) {
                        fprintf(stderr, "loomd token create: --tenant is required\n");
                        return 2;
                }
                char tok[LOOM_TOKEN_MAX];
                int64_t id;
                if (loom_token_create(dir, tenant, role, ttl ? (int64_t)time(NULL) + ttl : 0, tok,
                                      &id, &e))
                        return fail("create", &e);
                printf("%s\n", tok);
                fprintf(stderr, "token %lld: %s %s (shown once; store it now)\n", (long long)id,
                        loom_role_name(role), tenant);
                return 0;
        }
        if (!strcmp(verb, "list") && optind == argc) {
                loom_token_info *t;
                int n;
                if (loom_token_list(dir, &t, &n, &e))
                        return fail("list", &e);
                loom_token_print(stdout, t, n, (int64_t)time(NULL));
                free(t);
                return 0;
        }
        if (!strcmp(verb, "revoke") && optind == argc - 1) {
                char *end;
                long long id = strtoll(argv[optind], &end, 10);
                if (end == argv[optind] || *end || id <= 0) {
                        fprintf(stderr, "loomd token revoke: '%s' is not a token id\n",
                                argv[optind]);
                        return 2;
                }
                if (loom_token_revoke(dir, id, &e))
                        return fail("revoke", &e);
                fprintf(stderr, "token %lld revoked\n", id);
                return 0;
        }
        if (!strcmp(verb, "rotate-secret") && optind == argc)
                return rotate(dir, &ha);
        usage(stderr);
        return 2;
}
