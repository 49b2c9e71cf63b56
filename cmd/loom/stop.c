/* stop.c - SIGINT and SIGTERM as a request to stop, for the `loom` subcommands that serve until
 * told to (`loom harvest node`, `loom harvest publish`): they poll the flag and shut down. */
#include <signal.h>

#include "cmd.h"

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
        got_signal = sig;
}

void loom_cmd_catch_stop(void)
{
        struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
}

int loom_cmd_stopping(void)
{
        return got_signal != 0;
}
