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

#endif
