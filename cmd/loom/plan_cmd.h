/* plan_cmd.h - the pieces of `loom plan` spread over plan.c, plan_input.c and plan_sweep.c. */
#ifndef LOOM_PLAN_CMD_H
#define LOOM_PLAN_CMD_H

#include <stddef.h>

#include "loom/plan.h"

/* `loom plan sweep`. */
int plan_cmd_sweep(int argc, char **argv);
/* Monotonic clock in seconds for time budgets. */
double plan_now(void *ctx);

#endif
