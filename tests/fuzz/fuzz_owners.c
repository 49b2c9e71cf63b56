/*
 * fuzz_owners.c - libFuzzer target for loom-state's owners file (DIR/owners, src/state/peer.c):
 * the input is the file's bytes, read as the daemon reads it at start.
 *
 * Properties beyond "no crash, no sanitizer report":
 *   - reading never fails (a bad line is skipped, not fatal) except for memory;
 *   - nothing from the file reaches the log raw: every log line is free of control characters;
 *   - what was read, written back (loom__owners_format), reads back to the same owners, and
 *     writing that again gives the same bytes (a fixpoint): a claim survives any number of
 *     rewrites of the file;
 *   - every owned job is a valid job name, and no uid is (uid_t)-1;
 *   - an orphaned job (claimed by two uids) is in no written line.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state/internal.h"

/* owners files of a few dozen lines reach every branch; longer ones only slow the campaign */
#define MAX_INPUT 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_log(void *arg, const char *line)
{
        for (const unsigned char *p = (const unsigned char *)line; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        abort(); /* a raw control byte from the file reached the log */
}

static st_owners *read_text(const char *text, size_t len)
{
        loom_state_cfg cfg;
        loom_state_cfg_default(&cfg);
        cfg.dir = "/nonexistent-fuzz-owners";
        cfg.log = check_log;
        st_owners *o;
        loom_err e;
        if (loom__owners_new(&o, &cfg, &e))
                abort();
        int rc = loom__owners_parse(o, text, len, &e);
        if (rc && rc != LOOM_ENOMEM)
                abort();
        return o;
}

/* Each line of a written file: a valid owner of o and of o2 alike. */
static void check_written(const char *text, size_t len, st_owners *o, st_owners *o2)
{
        for (size_t at = 0; at < len;) {
                const char *p = text + at, *nl = memchr(p, '\n', len - at);
                if (!nl)
                        abort(); /* a written file ends with its last line's newline */
                size_t n = (size_t)(nl - p);
                at += n + 1;
                if (p[0] == '#')
                        continue;
                char line[LOOM_STATE_JOB_MAX + 16];
                if (n >= sizeof line)
                        abort();
                memcpy(line, p, n);
                line[n] = '\0';
                char *sp = strchr(line, ' ');
                if (!sp)
                        abort();
                const char *job = sp + 1;
                unsigned long want = strtoul(line, NULL, 10);
                loom_err e;
                uid_t a, b;
                if (loom__state_job_check(job, LOOM_STATE_JOB_MAX, "job", &e) ||
                    want >= (unsigned long)(uid_t)-1 || loom__owners_lookup(o, job, &a) != 1 ||
                    loom__owners_lookup(o2, job, &b) != 1 || a != want || b != want)
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size > MAX_INPUT)
                return 0;
        st_owners *o = read_text((const char *)data, size);
        char *t1, *t2;
        size_t n1, n2;
        if (loom__owners_format(o, &t1, &n1))
                abort();
        st_owners *o2 = read_text(t1, n1);
        if (loom__owners_format(o2, &t2, &n2))
                abort();
        if (n1 != n2 || memcmp(t1, t2, n1))
                abort(); /* the written file is a fixpoint */
        check_written(t1, n1, o, o2);
        /* an orphan of the input is written nowhere, so it is nobody's in the rewrite */
        for (size_t at = 0; at < size;) {
                const char *p = (const char *)data + at, *nl = memchr(p, '\n', size - at);
                size_t n = nl ? (size_t)(nl - p) : size - at;
                at += n + 1;
                const char *sp = memchr(p, ' ', n);
                char job[LOOM_STATE_JOB_MAX];
                size_t k = sp ? n - (size_t)(sp + 1 - p) : 0;
                if (!sp || k == 0 || k >= sizeof job || memchr(sp + 1, '\0', k))
                        continue;
                memcpy(job, sp + 1, k);
                job[k] = '\0';
                if (loom__owners_lookup(o, job, NULL) == -1 && loom__owners_lookup(o2, job, NULL))
                        abort();
        }
        free(t1);
        free(t2);
        loom__owners_close(o);
        loom__owners_close(o2);
        return 0;
}
