/* plan_cmd.h - the pieces of `loom plan` spread over plan.c, plan_input.c and plan_sweep.c. */
#ifndef LOOM_PLAN_CMD_H
#define LOOM_PLAN_CMD_H

#include <stddef.h>

#include "loom/plan.h"

/* Decode a cluster file's text; name receives its optional "name". */
int plan_cluster_parse(const char *text, size_t len, loom_plan_cluster *out, char *name,
                       size_t name_len, loom_err *e);
/* Decode a workflow file's text over the defaults already in *w. */
int plan_workflow_parse(const char *text, size_t len, loom_plan_workflow *w, loom_err *e);
/* Whole file into a new buffer (caller frees). */
int plan_read_file(const char *path, char **text, size_t *len, loom_err *e);
/* `loom plan sweep`. */
int plan_cmd_sweep(int argc, char **argv);
/* Monotonic clock in seconds for time budgets. */
double plan_now(void *ctx);

#endif
