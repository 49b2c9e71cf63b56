/*
 * node_int.h - the live node's request routing without a socket (internal to src/harvest).
 *
 * libmicrohttpd parses the request; hv_node_route decides everything else from the method, the
 * path and the decoded query arguments: the answer, or that a /v1/generate request is accepted
 * with its (checked) prompt and gen. node.c's callback then replies or starts the request;
 * tests and the fuzz target (tests/fuzz/fuzz_harvest_http.c) call it on requests they build.
 */
#ifndef LOOM_HARVEST_NODE_INT_H
#define LOOM_HARVEST_NODE_INT_H

#include "loom/harvest.h"

typedef struct hv_node_ask {
        const char *method, *url;                       /* url: the path, without the query */
        const char *(*arg)(void *ctx, const char *key); /* a decoded query argument, or NULL */
        void *ctx;
} hv_node_ask;

typedef struct hv_node_answer {
        unsigned status;      /* HTTP status of the reply */
        int generate;         /* 1: an accepted /v1/generate, to start with prompt and gen */
        uint32_t prompt, gen; /* 1 <= each, prompt + gen <= max_context, KV fits serving */
        char body[2048];      /* the reply's text/plain body when !generate */
} hv_node_answer;

/* Route one request of node n. Side effect: /v1/weights?hold=0|1 holds or resumes pulls. */
void hv_node_route(loom_harvest_node *n, const hv_node_ask *q, hv_node_answer *a);

#endif
