/* bench.c - benchholder until `loom bench` lands. */
#include <stdio.h>

#include "cmd.h"

int loom_cmd_bench(int argc, char **argv)
{
        (void)argc;
        fprintf(stderr, "loom bench: not available in this build\n");
        return 2;
}
