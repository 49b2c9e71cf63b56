/* harvest_cmd.h - the pieces of `loom harvest` in harvest_weights.c. */
#ifndef LOOM_HARVEST_CMD_H
#define LOOM_HARVEST_CMD_H

#include "loom/harvest.h"

/* `loom harvest publish`. */
int harvest_cmd_publish(int argc, char **argv);
/* What `loom harvest node` parses beyond the node's config: the sync key's file, read once
 * every option is known to be good, into key. */
typedef struct harvest_node_args {
        loom_harvest_node_cfg *c;
        const char *key_file;
        uint8_t key[32]; /* LOOM_SYNC_KEY_LEN */
} harvest_node_args;
/* A `loom harvest node` weight option a with value v: 0 when it is one, 1 when it is one whose
 * value is invalid (after a line on stderr), -1 when it is not one. */
int harvest_cmd_node_opt(const char *a, const char *v, harvest_node_args *n);
/* The node's sync key: --weights-key-file, else $LOOM_SYNC_KEY; without either, with
 * --weights, pulls are unauthenticated (loopback publishers only) and stderr says so once.
 * 0, or 1 after a line on stderr. */
int harvest_cmd_node_key(harvest_node_args *n);
/* The --help lines of those options. */
extern const char *harvest_cmd_node_help;

#endif
