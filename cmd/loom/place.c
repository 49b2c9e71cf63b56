/* place.c - placeholder until `loom place` lands. */
#include <stdio.h>

#include "cmd.h"

int loom_cmd_place(int argc, char **argv)
{
        (void)argc;
        fprintf(stderr, "loom place: not available in this build\n");
        return 2;
}
