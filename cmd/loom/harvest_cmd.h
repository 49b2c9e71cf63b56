/* harvest_cmd.h - the pieces of `loom harvest` in harvest_weights.c. */
#ifndef LOOM_HARVEST_CMD_H
#define LOOM_HARVEST_CMD_H

#include "loom/harvest.h"

/* `loom harvest publish`. */
int harvest_cmd_publish(int argc, char **argv);
/* A `loom harvest node` weight option a with value v: 0 when it is one, 1 when it is one whose
 * value is invalid (after a line on stderr), -1 when it is not one. */
int harvest_cmd_node_opt(const char *a, const char *v, loom_harvest_node_cfg *c);
/* The --help lines of those options. */
extern const char *harvest_cmd_node_help;

#endif
