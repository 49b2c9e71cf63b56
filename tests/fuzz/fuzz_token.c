/*
 * fuzz_token.c - libFuzzer target for loomd's bearer-token parser (srv_auth_bearer in
 * src/server/auth.c): the input is the value of an Authorization header, as libmicrohttpd hands
 * it over (text up to its first NUL), checked against a fixed store secret (bytes 0..31).
 *
 * Properties beyond "no crash, no sanitizer report": a worker token is accepted only in the very
 * text loomd issues for its job (srv_auth_worker_text), for a job >= 1; a token to look up in
 * auth.db lies inside the header and is shorter than LOOM_TOKEN_MAX; a refusal has its
 * sentence for the 401.
 */
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static uint8_t secret[32];
        for (int i = 0; i < 32; i++)
                secret[i] = (uint8_t)i;
        char *h = malloc(size + 1);
        if (!h)
                return 0;
        memcpy(h, data, size);
        h[size] = '\0';
        uint32_t job = 7;
        const char *tok = (const char *)1, *why = NULL;
        switch (srv_auth_bearer(h, secret, &job, &tok, &why)) {
        case SRV_BEARER_WORKER: {
                char want[LOOM_TOKEN_MAX];
                srv_auth_worker_text(secret, job, want);
                const char *t = h + 7;
                while (*t == ' ')
                        t++;
                if (job == 0 || strcmp(t, want) || tok)
                        abort();
                break;
        }
        case SRV_BEARER_STORED:
                if (!tok || tok < h || tok > h + strlen(h) || strlen(tok) >= LOOM_TOKEN_MAX ||
                    !strncmp(tok, "loom_w_", 7) || job != 0)
                        abort();
                break;
        case SRV_BEARER_BAD:
                if (!why || !*why || job != 0 || tok)
                        abort();
                break;
        default:
                abort();
        }
        free(h);
        return 0;
}
