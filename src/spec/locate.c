/*
 * locate.c - find where a field sits in JSON text, for error messages with line and column.
 *
 * The text has already been parsed by jansson, so it is valid JSON: a small skipper suffices.
 * A path is dotted keys and [index]es ("jobs[2].slo"). If the full path is absent (a missing
 * field), the position of the deepest container that exists is returned.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "loom/spec.h"

typedef struct cur {
        const char *s;
        size_t i, n;
} cur;

static void ws(cur *c)
{
        while (c->i < c->n && isspace((unsigned char)c->s[c->i]))
                c->i++;
}

/* Never moves the cursor past the end, even on text jansson would refuse (an unterminated
 * string, a backslash as the last byte): the function is public and takes any text. */
static void skip_string(cur *c)
{
        c->i++; /* opening quote */
        while (c->i < c->n && c->s[c->i] != '"')
                c->i += c->s[c->i] == '\\' && c->i + 1 < c->n ? 2 : 1;
        if (c->i < c->n)
                c->i++; /* closing quote */
}

static void skip_value(cur *c)
{
        ws(c);
        if (c->i >= c->n)
                return;
        char ch = c->s[c->i];
        if (ch == '"') {
                skip_string(c);
                return;
        }
        if (ch == '{' || ch == '[') {
                int depth = 0;
                while (c->i < c->n) {
                        ch = c->s[c->i];
                        if (ch == '"') {
                                skip_string(c);
                                continue;
                        }
                        if (ch == '{' || ch == '[')
                                depth++;
                        else if (ch == '}' || ch == ']')
                                depth--;
                        c->i++;
                        if (depth == 0)
                                return;
                }
                return;
        }
        while (c->i < c->n && !strchr(",]} \t\r\n", c->s[c->i]))
                c->i++;
}

/* Key at the cursor equals k (no escapes in loom's field names)? Leaves cursor after it. */
static int key_is(cur *c, const char *k, size_t klen)
{
        size_t start = c->i + 1;
        skip_string(c);
        size_t end = c->i > start && c->s[c->i - 1] == '"' ? c->i - 1 : c->i;
        return end >= start && end - start == klen && !memcmp(c->s + start, k, klen);
}

static int find_key(cur *c, const char *k, size_t klen)
{
        ws(c);
        if (c->i >= c->n || c->s[c->i] != '{')
                return 0;
        c->i++;
        for (;;) {
                ws(c);
                if (c->i >= c->n || c->s[c->i] != '"')
                        return 0;
                int hit = key_is(c, k, klen);
                ws(c);
                c->i++; /* ':' */
                ws(c);
                if (hit)
                        return 1;
                skip_value(c);
                ws(c);
                if (c->i >= c->n || c->s[c->i] != ',')
                        return 0;
                c->i++;
        }
}

static int find_index(cur *c, long idx)
{
        ws(c);
        if (c->i >= c->n || c->s[c->i] != '[')
                return 0;
        c->i++;
        for (long k = 0;; k++) {
                ws(c);
                if (c->i >= c->n || c->s[c->i] == ']')
                        return 0;
                if (k == idx)
                        return 1;
                skip_value(c);
                ws(c);
                if (c->i >= c->n || c->s[c->i] != ',')
                        return 0;
                c->i++;
        }
}

int loom_json_locate(const char *text, size_t len, const char *path, int *line, int *col)
{
        cur c = {text, 0, len};
        ws(&c);
        size_t found = c.i;
        const char *p = path;
        int ok = 1;
        while (*p) {
                if (*p == '[') {
                        char *end;
                        long idx = strtol(p + 1, &end, 10);
                        ok = find_index(&c, idx);
                        p = *end == ']' ? end + 1 : end;
                } else {
                        if (*p == '.')
                                p++;
                        size_t klen = strcspn(p, ".[");
                        ok = find_key(&c, p, klen);
                        p += klen;
                }
                if (!ok)
                        break;
                ws(&c);
                found = c.i;
        }
        int l = 1, co = 1;
        for (size_t i = 0; i < found && i < len; i++) {
                if (text[i] == '\n') {
                        l++;
                        co = 1;
                } else {
                        co++;
                }
        }
        *line = l;
        *col = co;
        return ok ? 0 : LOOM_ENOENT;
}
