/* options.c - reading the values of `loom` subcommand options, one way for every subcommand:
 * one value at a time, or a whole command line against a table of options. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

int loom_cmd_num(const char *cmd, const char *name, const char *v, double lo, double hi,
                 double *out)
{
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || !(d >= lo && d <= hi)) {
                fprintf(stderr, "%s: %s: '%s' is not a number in [%g, %g]\n", cmd, name, v, lo, hi);
                return 1;
        }
        *out = d;
        return 0;
}

int loom_cmd_whole(const char *cmd, const char *name, const char *v, double lo, double hi,
                   uint64_t *out)
{
        double d;
        if (loom_cmd_num(cmd, name, v, lo, hi, &d))
                return 1;
        if (d != (double)(uint64_t)d) {
                fprintf(stderr, "%s: %s: '%s' is not a whole number\n", cmd, name, v);
                return 1;
        }
        *out = (uint64_t)d;
        return 0;
}

int loom_cmd_bad_option(const char *cmd, char **argv, void (*usage)(FILE *))
{
        fprintf(stderr, "%s: unknown or incomplete option '%s'\n", cmd, argv[optind - 1]);
        if (usage)
                usage(stderr);
        return 2;
}

/* v into o's variable: 0, or 1 after a line on stderr. */
static int set(const char *cmd, const loom_cmd_opt *o, const char *v)
{
        uint64_t u;
        double d;
        if (o->kind == 's') {
                *(const char **)o->to = v;
                return 0;
        }
        if (o->kind == 'n' || o->kind == 'q') {
                if (loom_cmd_num(cmd, o->name, v, o->lo, o->hi, &d))
                        return 1;
                if (o->kind == 'n')
                        *(double *)o->to = d;
                else
                        *(uint64_t *)o->to = (uint64_t)d;
                return 0;
        }
        if (loom_cmd_whole(cmd, o->name, v, o->lo, o->hi, &u))
                return 1;
        if (o->kind == 'p')
                *(uint16_t *)o->to = (uint16_t)u;
        else if (o->kind == 'u')
                *(uint32_t *)o->to = (uint32_t)u;
        else
                *(uint64_t *)o->to = u;
        return 0;
}

int loom_cmd_parse(const loom_cmd_opts *p, int argc, char **argv)
{
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                const loom_cmd_opt *o = NULL;
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        p->usage(stdout);
                        return 3;
                }
                for (size_t k = 0; k < p->n && !o; k++)
                        o = strcmp(a, p->t[k].name) ? NULL : &p->t[k];
                if (o && o->kind == 'f') {
                        *(int *)o->to = 1;
                        continue;
                }
                if (strncmp(a, "--", 2)) {
                        fprintf(stderr, "%s: unexpected argument '%s'\n", p->cmd, a);
                        return 2;
                }
                if (i + 1 >= argc) {
                        fprintf(stderr,
                                p->terse ? "%s: %s needs a value\n"
                                         : "%s: missing value for '%s'\n",
                                p->cmd, a);
                        return 2;
                }
                const char *v = argv[++i];
                int bad = o ? set(p->num_cmd, o, v) : p->other ? p->other(a, v, p->ctx) : -1;
                if (bad < 0)
                        fprintf(stderr, "%s: unknown option '%s'\n", p->cmd, a);
                if (bad)
                        return bad < 0 ? 2 : 1;
        }
        return 0;
}
