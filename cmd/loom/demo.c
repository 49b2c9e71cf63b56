/* demo.c - placeholder until the demo subcommand lands. */
#include <stdio.h>

#include "cmd.h"

int loom_cmd_demo(int argc, char **argv)
{
        (void)argc;
        fprintf(stderr, "loom demo: not available in this build\n");
        return 2;
}
