/* options.c - reading the values of `loom` subcommand options, one way for every subcommand. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

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
