/*
 * fuzz_client.c - libFuzzer target for the C client's parsers of loomd's replies
 * (src/client/reply.c), the bytes a worker takes from the network. The first byte picks the
 * parser (submit, lease, resume, progress, error) and, for errors, the status; the rest is the
 * reply body as received (up to its first NUL, as libcurl's buffer is read).
 *
 * Properties beyond "no crash, no sanitizer report": an accepted id fits what it names (job ids
 * 1..2^32-1, lease ids > 0) and equals the reply's; a refused reply leaves its result zeroed
 * (nothing half-applied) and says why; strings are terminated within their fields.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client/reply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool zero(const void *p, size_t n)
{
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++)
                if (b[i])
                        return false;
        return true;
}

static json_int_t member(const char *body, const char *key)
{
        json_error_t je;
        json_t *j = json_loads(body, 0, &je);
        json_int_t v = json_integer_value(json_object_get(j, key));
        json_decref(j);
        return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        char *body = malloc(size);
        if (!body)
                return 0;
        memcpy(body, data + 1, size - 1);
        body[size - 1] = '\0';
        char err[256] = "";
        int rc;
        switch (data[0] % 5) {
        case 0: {
                uint32_t job = 5;
                rc = loom__client_parse_submit(body, &job, err, sizeof err);
                if (rc ? job != 0 || !err[0] : job == 0 || (json_int_t)job != member(body, "id"))
                        abort();
                break;
        }
        case 1: {
                loom_client_lease l;
                memset(&l, 0xa5, sizeof l);
                rc = loom__client_parse_lease(body, &l, err, sizeof err);
                if (rc && (!zero(&l, sizeof l) || !err[0]))
                        abort();
                if (!rc &&
                    (l.id <= 0 || l.id != member(body, "lease") || l.job == 0 || l.n_nodes < 0 ||
                     l.n_nodes > 32 || !memchr(l.phase, 0, sizeof l.phase) || l.gpus < 0 ||
                     !(l.timeout_s >= 0 && l.timeout_s <= 1e6) || l.iteration < 0))
                        abort();
                break;
        }
        case 2: {
                loom_client_resume r;
                memset(&r, 0xa5, sizeof r);
                rc = loom__client_parse_resume(body, &r, err, sizeof err);
                if (rc && (!zero(&r, sizeof r) || !err[0]))
                        abort();
                if (!rc && (!memchr(r.state, 0, sizeof r.state) ||
                            !memchr(r.next_phase, 0, sizeof r.next_phase) || r.restarts < 0 ||
                            r.iterations_done < 0))
                        abort();
                break;
        }
        case 3: {
                int keep = -7;
                rc = loom__client_parse_progress(body, &keep);
                if (rc != 0 && rc != 1)
                        abort();
                if (rc == 1 ? keep < 0 : keep != -7)
                        abort();
                break;
        }
        default: {
                int status = 400 + data[0] % 200;
                rc = loom__client_parse_error(status, body, err, sizeof err);
                if (rc >= 0 || !err[0] || strncmp(err, "HTTP ", 5))
                        abort();
                break;
        }
        }
        free(body);
        return 0;
}
