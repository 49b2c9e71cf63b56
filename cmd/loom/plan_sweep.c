#include "plan_cmd.h"
int plan_cmd_sweep(int argc, char **argv)
{
        (void)argc;
        (void)argv;
        return 2;
}
