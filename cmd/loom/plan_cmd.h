/* plan_cmd.h - the pieces of `loom plan` spread over plan.c and plan_sweep.c. */
#ifndef LOOM_PLAN_CMD_H
#define LOOM_PLAN_CMD_H

/* `loom plan sweep`. */
int plan_cmd_sweep(int argc, char **argv);

#endif
