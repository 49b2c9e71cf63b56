/*
 * key.c - a job's sync key from text or from a file, for programs that take it from the
 * environment ($LOOM_SYNC_KEY, as loomd's executors start a job's workers) or an option naming
 * a key file. A key file must be readable by its owner only: a key others can read
 * authenticates nothing. A program that starts every process of a transfer itself (`loom sync
 * bench`) can instead make a fresh key for that transfer alone.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

int loom_sync_key_parse(const char *text, const char *field, uint8_t key[LOOM_SYNC_KEY_LEN],
                        loom_err *e)
{
        const char *p = text;
        while (isspace((unsigned char)*p))
                p++;
        size_t n = strlen(p);
        while (n && isspace((unsigned char)p[n - 1]))
                n--;
        if (n != 2 * LOOM_SYNC_KEY_LEN)
                return loom_err_set(e, LOOM_EINVAL, field,
                                    "a sync key is %d hex digits, this one has %zu characters",
                                    2 * LOOM_SYNC_KEY_LEN, n);
        uint8_t k[LOOM_SYNC_KEY_LEN];
        size_t bad = loom_hex_decode(p, k, LOOM_SYNC_KEY_LEN);
        if (bad < 2 * LOOM_SYNC_KEY_LEN)
                return loom_err_set(e, LOOM_EINVAL, field,
                                    "a sync key is %d hex digits: character %zu is not one",
                                    2 * LOOM_SYNC_KEY_LEN, bad + 1);
        memcpy(key, k, sizeof k);
        return 0;
}

int loom_sync_key_load(const char *path, const char *field, uint8_t key[LOOM_SYNC_KEY_LEN],
                       loom_err *e)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return loom_err_set(e, LOOM_EINVAL, field, "%s: %s", path, strerror(errno));
        struct stat st;
        char text[256];
        ssize_t n = -1;
        int rc = 0;
        if (fstat(fd, &st))
                rc = loom_err_set(e, LOOM_EIO, field, "%s: %s", path, strerror(errno));
        else if (!S_ISREG(st.st_mode))
                rc = loom_err_set(e, LOOM_EINVAL, field, "%s: not a regular file", path);
        else if (st.st_mode & (S_IRWXG | S_IRWXO))
                rc = loom_err_set(e, LOOM_EINVAL, field,
                                  "%s: mode %04o lets group or others read or write the sync key; "
                                  "make it readable by its owner only (chmod 600)",
                                  path, (unsigned)(st.st_mode & 07777));
        else if ((n = read(fd, text, sizeof text - 1)) < 0)
                rc = loom_err_set(e, LOOM_EIO, field, "%s: %s", path, strerror(errno));
        close(fd);
        if (rc)
                return rc;
        text[n] = 0;
        char inner[sizeof e->field];
        snprintf(inner, sizeof inner, "%s", field);
        rc = loom_sync_key_parse(text, inner, key, e);
        if (rc) /* name the file: the key itself is never echoed */
                loom_err_set(e, rc, field, "%s: a sync key is %d hex digits on the first line",
                             path, 2 * LOOM_SYNC_KEY_LEN);
        return rc;
}

int loom_sync_key_new(uint8_t key[LOOM_SYNC_KEY_LEN], loom_err *e)
{
        size_t got = 0;
        while (got < LOOM_SYNC_KEY_LEN) {
                ssize_t r = getrandom(key + got, LOOM_SYNC_KEY_LEN - got, 0);
                if (r < 0 && errno != EINTR)
                        return loom_err_set(e, LOOM_EIO, "key", "getrandom: %s", strerror(errno));
                got += r > 0 ? (size_t)r : 0;
        }
        return 0;
}
