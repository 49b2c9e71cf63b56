/*
 * fuzz_client_view.c - libFuzzer target for the tables `loom jobs`, `loom job`, ... draw from
 * loomd's replies (loom_client_render, src/client/view.c): bytes from the network, shaped by
 * whoever answers on --server. The first byte picks the view; the rest is the reply (up to its
 * first NUL). Properties beyond "no crash, no sanitizer report": the answer is 0 or LOOM_EINVAL,
 * and a refusal says why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static const char *const views[] = {"jobs",       "groups", "nodes",   "events",
                                            "event-rows", "job",    "cluster", "decision"};
        static FILE *sink;
        if (size < 1)
                return 0;
        if (!sink && !(sink = fopen("/dev/null", "w")))
                abort();
        char *body = malloc(size);
        if (!body)
                return 0;
        memcpy(body, data + 1, size - 1);
        body[size - 1] = '\0';
        char err[256] = "";
        int rc = loom_client_render(views[data[0] % 8], body, sink, err, sizeof err);
        if (rc != 0 && (rc != LOOM_EINVAL || !err[0]))
                abort();
        free(body);
        return 0;
}
