/*
 * ctl.h - what the client commands of `loom` (ctl.c parses, ctl_io.c talks to loomd and
 * reports, ctl_cmds.c runs each command) share: the parsed command line and the exit statuses.
 */
#ifndef LOOM_CMD_CTL_H
#define LOOM_CMD_CTL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd.h"
#include "loom/client.h"

enum { EXIT_OK = 0, EXIT_NO = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3, EXIT_AUTH = 4 };

/* What every one of these commands takes, and what each keeps of its own. */
typedef struct ctl {
        const char *cmd;
        const char *server, *token, *token_file, *ca_file;
        bool json;
        const char *pos[64];
        int n_pos;
        /* submit */
        bool dry_run, explain;
        json_t *spec_flags;
        /* jobs */
        loom_client_job_filter filter;
        /* events */
        uint32_t job;
        double since_s, interval_s;
        bool watch;
        char token_buf[512];
} ctl;

/* ctl.c: parse argv for `loom NAME` into c: 0, -1 (--help printed) or an exit status; the
 * number of positional arguments must be in [min_pos, max_pos]. A positional job id. */
int ctl_setup(ctl *c, const char *name, int argc, char **argv, int min_pos, int max_pos);
int ctl_job_id(const ctl *c, const char *s, uint32_t *id);
/* ctl_io.c: the client for c (NULL after saying why); an error as a sentence that says what to
 * do, and its exit status; a reply as JSON or as the table of view; event lines; a job file
 * (its raw text in *raw) or NULL after saying why; a refused submit. */
loom_client *ctl_connect(ctl *c, double retry_for_s);
int ctl_fail(const ctl *c, loom_client *cl, int rc, const char *what);
int ctl_show(const ctl *c, const char *view, const char *js);
/* A request's outcome rc: its error (what it tried) or its reply js as view; frees js and cl. */
int ctl_answer(const ctl *c, loom_client *cl, int rc, char *js, const char *what, const char *view);
void ctl_events_json(const char *js);
json_t *ctl_read_job_file(const ctl *c, const char *path, char **raw);
int ctl_submit_failed(const ctl *c, loom_client *cl, int rc, const char *js, bool verbatim);

#define SETUP(name, lo, hi)                                                                        \
        ctl c = {0};                                                                               \
        int rc_ = ctl_setup(&c, name, argc, argv, lo, hi);                                         \
        if (rc_)                                                                                   \
                return rc_ < 0 ? EXIT_OK : rc_;                                                    \
        loom_client *cl = ctl_connect(&c, 3);                                                      \
        if (!cl)                                                                                   \
                return EXIT_USAGE;

#endif
