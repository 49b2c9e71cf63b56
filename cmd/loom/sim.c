/* sim.c - placeholder until the sim subcommand lands. */
#include <stdio.h>

#include "cmd.h"

int loom_cmd_sim(int argc, char **argv)
{
        (void)argc;
        fprintf(stderr, "loom sim: not available in this build\n");
        return 2;
}
