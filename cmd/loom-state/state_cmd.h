/* state_cmd.h - what loom-state's command files share (main.c, tools.c). */
#ifndef LOOM_STATE_CMD_H
#define LOOM_STATE_CMD_H

#include <stdint.h>
#include <stdio.h>

void loom_state_cmd_usage(FILE *f);
/* A size option's value (K, M, G, T, P suffixes) into *out: 0, or -1 after a message. */
int loom_state_cmd_bytes(const char *opt, const char *v, uint64_t *out);
int loom_state_cmd_bench(int argc, char **argv);
int loom_state_cmd_stat(int argc, char **argv);

#endif
