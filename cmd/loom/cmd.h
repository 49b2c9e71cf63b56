/* cmd.h - the subcommands of `loom`, one file each. argv[0] is the subcommand's name. */
#ifndef LOOM_CMD_H
#define LOOM_CMD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

int loom_cmd_place(int argc, char **argv);
int loom_cmd_sim(int argc, char **argv);
int loom_cmd_micro(int argc, char **argv);
int loom_cmd_sync(int argc, char **argv);
int loom_cmd_demo(int argc, char **argv);
int loom_cmd_bench(int argc, char **argv);
int loom_cmd_micro_plex(int argc, char **argv); /* micro_plex.c */
int loom_cmd_sim_plex(int argc, char **argv);   /* sim_plex.c */
bool loom_cmd_micro_is_plex(int argc, char **argv);
bool loom_cmd_sim_is_plex(int argc, char **argv);
int loom_cmd_bench_hrrs(int argc, char **argv); /* bench_plex.c */
int loom_cmd_harvest(int argc, char **argv);
int loom_cmd_plan(int argc, char **argv);
/* Operating a running loomd over libloom-client (ctl.c). */
int loom_cmd_submit(int argc, char **argv);
int loom_cmd_jobs(int argc, char **argv);
int loom_cmd_job(int argc, char **argv);
int loom_cmd_cancel(int argc, char **argv);
int loom_cmd_groups(int argc, char **argv);
int loom_cmd_nodes(int argc, char **argv);
int loom_cmd_cluster(int argc, char **argv);
int loom_cmd_events(int argc, char **argv);
/* Their options, environment and exit status, for `loom --help`. */
void loom_cmd_ctl_help(FILE *f);

/* A file shipped with loom (a trace, a scenario): rel relative to the working directory (the
 * source tree), else to the binary (build/loom -> ../rel), written into buf. Returns rel when
 * neither exists, so an error names the usual path. */
const char *loom_cmd_bundled(const char *rel, char *buf, size_t len);

/* The value v of option name as a number in [lo, hi], into *out: 0; else 1 after a line on stderr
 * that names the subcommand cmd ("loom sync"), the option and the range. options.c */
int loom_cmd_num(const char *cmd, const char *name, const char *v, double lo, double hi,
                 double *out);

/* The same for a whole number in [lo, hi] (lo >= 0). options.c */
int loom_cmd_whole(const char *cmd, const char *name, const char *v, double lo, double hi,
                   uint64_t *out);

/* An option getopt_long did not know, or one missing its value (argv[optind - 1]): a line on
 * stderr naming cmd and the option, then usage(stderr) unless usage is NULL. Returns 2, the exit
 * status of bad usage. options.c */
int loom_cmd_bad_option(const char *cmd, char **argv, void (*usage)(FILE *));

/* An option of a table read by loom_cmd_parse: its name, the variable it sets, and for numbers
 * their range. kind: 'f' a flag taking no value (int, set to 1), 's' a string (const char *),
 * 'n' a number (double), 'q' a number truncated to a uint64_t, 'u' a whole number (uint32_t),
 * 'p' a whole number (uint16_t), 'w' a whole number (uint64_t). */
typedef struct loom_cmd_opt {
        const char *name;
        char kind;
        double lo, hi;
        void *to;
} loom_cmd_opt;

typedef struct loom_cmd_opts {
        const char *cmd;     /* names the subcommand in usage errors: "loom harvest sim" */
        const char *num_cmd; /* ... and in errors of values (loom_cmd_num's cmd) */
        void (*usage)(FILE *);
        int terse; /* "--x needs a value" rather than "missing value for '--x'" */
        const loom_cmd_opt *t;
        size_t n;
        /* An option with a value that is not in t (NULL: none): 0 taken, 1 invalid after a line
         * on stderr, -1 unknown. */
        int (*other)(const char *a, const char *v, void *ctx);
        void *ctx;
} loom_cmd_opts;

/* Read argv[1..argc) ("--name value" or a flag) into the variables of p's table: 0; 1 after a
 * line on stderr when a value is invalid; 2 after one for bad usage (an argument that is not an
 * option, a missing value, an unknown option); 3 when --help or -h printed p->usage to stdout.
 * options.c */
int loom_cmd_parse(const loom_cmd_opts *p, int argc, char **argv);

/* SIGINT and SIGTERM set a flag instead of killing the process; has one come? stop.c */
void loom_cmd_catch_stop(void);
int loom_cmd_stopping(void);

#endif
