/*
 * reply.h - the C client's parsers of loomd's replies (reply.c), internal to src/client and
 * its tests and fuzz target. Each takes the reply body as received (any bytes, NUL-terminated,
 * or NULL for none) and either fills its result from a well-formed reply or returns
 * LOOM_EPROTO with a sentence in err (n bytes), leaving the result zeroed: a reply a client
 * cannot trust is never half-applied.
 */
#ifndef LOOM_CLIENT_REPLY_H
#define LOOM_CLIENT_REPLY_H

#include <stddef.h>

#include "loom/client.h"

/* A submit's reply: the job id, 1..UINT32_MAX. */
int loom__client_parse_submit(const char *body, uint32_t *job, char *err, size_t n);
/* An acquire's 200: lease id > 0, job, phase, nodes (at most 32 kept), gpus, timeout, iteration. */
int loom__client_parse_lease(const char *body, loom_client_lease *l, char *err, size_t n);
/* An attach's 200: the job's state and where to resume. */
int loom__client_parse_resume(const char *body, loom_client_resume *out, char *err, size_t n);
/* A progress reply: 1 to migrate the rollout tail (*keep_gpus, may be NULL, >= 0), else 0. */
int loom__client_parse_progress(const char *body, int *keep_gpus);
/* A non-2xx reply as "HTTP <status>: [field: ]message" in err, and its LOOM_E* code. */
int loom__client_parse_error(int status, const char *body, char *err, size_t n);

#endif
