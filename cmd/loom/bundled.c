/* bundled.c - finding the files shipped with loom (traces, scenarios) from any directory. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"

const char *loom_cmd_bundled(const char *rel, char *buf, size_t len)
{
        if (access(rel, R_OK) == 0)
                return rel;
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0)
                return rel;
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (!slash)
                return rel;
        *slash = 0;
        if (snprintf(buf, len, "%s/../%s", exe, rel) >= (int)len)
                return rel;
        return access(buf, R_OK) == 0 ? buf : rel;
}
