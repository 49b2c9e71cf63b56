/*
 * hex.c - hex digits to bytes: the one decoder behind sync keys (src/sync/key.c) and loomd's
 * tokens and stored secrets (src/server/auth.c).
 */
#include "loom/common.h"

static int hexval(unsigned char c)
{
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

size_t loom_hex_decode(const char *s, uint8_t *out, size_t n)
{
        for (size_t i = 0; i < 2 * n; i++) {
                int v = hexval((unsigned char)s[i]);
                if (v < 0)
                        return i;
                if (i % 2 == 0)
                        out[i / 2] = (uint8_t)(v << 4);
                else
                        out[i / 2] |= (uint8_t)v;
        }
        return 2 * n;
}
