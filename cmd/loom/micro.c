/* micro.c - placeholder until the micro subcommand lands. */
#include <stdio.h>

#include "cmd.h"

int loom_cmd_micro(int argc, char **argv)
{
        (void)argc;
        fprintf(stderr, "loom micro: not available in this build\n");
        return 2;
}
