/* exact.c - placeholder while the exact solver is written. */
#include "plan_int.h"

int plan_run_exact(plan_search *s, loom_err *e)
{
        (void)s;
        return loom_err_set(e, LOOM_ERANGE, "solver", "exact solver not built yet");
}
