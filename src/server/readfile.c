/*
 * readfile.c - a small file read whole into memory: the TLS certificate and key that the
 * server (auth.c) and a following replica's redirector (redirect.c) hand to libmicrohttpd as
 * PEM text. The bottom of src/server (docs/architecture.md): it knows files, nothing of loomd.
 *
 * The key is a secret, so no copy of it is left behind in freed memory: a regular file is read
 * into one buffer of its size, and anything else (a pipe, a systemd credential that is not a
 * plain file) into buffers that are wiped before they are dropped for a larger one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "srv.h"

#define READ_FILE_MAX (1 << 20)

/* Grow *buf (of *cap bytes, n of them used) to at least want bytes, wiping the old one. */
static bool grow(char **buf, size_t *cap, size_t n, size_t want)
{
        char *g = malloc(want);
        if (!g)
                return false;
        if (*buf) {
                memcpy(g, *buf, n);
                explicit_bzero(*buf, *cap);
                free(*buf);
        }
        *buf = g;
        *cap = want;
        return true;
}

char *srv_read_file(const char *path, const char *field, loom_err *e)
{
        FILE *f = fopen(path, "rb");
        if (!f) {
                loom_err_set(e, LOOM_EIO, field, "%s: %s", path, strerror(errno));
                return NULL;
        }
        struct stat st;
        bool regular = !fstat(fileno(f), &st) && S_ISREG(st.st_mode);
        if (regular && st.st_size >= READ_FILE_MAX) {
                fclose(f);
                loom_err_set(e, LOOM_EIO, field, "%s: larger than 1 MiB", path);
                return NULL;
        }
        char *buf = NULL;
        size_t n = 0, cap = 0;
        const char *why = NULL;
        for (;;) {
                if (n + 1 >= cap) {
                        /* a regular file's size and one byte more, to see its end */
                        size_t want = !cap && regular ? (size_t)st.st_size + 2
                                      : cap           ? cap * 2
                                                      : 8192;
                        if (want > READ_FILE_MAX + 1)
                                want = READ_FILE_MAX + 1;
                        if (n + 1 >= want) {
                                why = "larger than 1 MiB";
                                break;
                        }
                        if (!grow(&buf, &cap, n, want)) {
                                why = "out of memory";
                                break;
                        }
                }
                size_t got = fread(buf + n, 1, cap - n - 1, f);
                n += got;
                if (got == 0) {
                        if (ferror(f))
                                why = "unreadable";
                        break;
                }
        }
        fclose(f);
        if (why) {
                if (buf)
                        explicit_bzero(buf, cap);
                free(buf);
                loom_err_set(e, strcmp(why, "out of memory") ? LOOM_EIO : LOOM_ENOMEM, field,
                             "%s: %s", path, why);
                return NULL;
        }
        buf[n] = 0;
        return buf;
}
