/* sync.c - placeholder until the sync subcommand lands. */
#include <stdio.h>

#include "cmd.h"

int loom_cmd_sync(int argc, char **argv)
{
        (void)argc;
        fprintf(stderr, "loom sync: not available in this build\n");
        return 2;
}
