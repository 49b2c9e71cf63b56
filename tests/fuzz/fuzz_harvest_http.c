/*
 * fuzz_harvest_http.c - libFuzzer target for the live harvest node's request handling
 * (`loom harvest node`), without a socket: the input's first line is a request line,
 *
 *     METHOD SP PATH[?QUERY]
 *
 * its query is split and decoded as libmicrohttpd does (`&`, `=`, `+` for space, %XX; the
 * first of a repeated key wins), and the request goes to hv_node_route, the function the
 * node's libmicrohttpd callback hands every request to. The node is a real one (loopback, any
 * port, serving only) with weights from a publisher that is not there, so /v1/weights and its
 * hold argument are reachable. Checked: the status is one the node documents; an accepted
 * /v1/generate has 1 <= prompt, gen <= 1000000 and fits the context; every other answer has
 * a body that ends in a newline, the stats object whole (not cut by the body's size).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harvest/node_int.h"

#define MAX_ARGS 16

typedef struct args {
        char *k[MAX_ARGS], *v[MAX_ARGS];
        int n;
} args;

static loom_harvest_node *node;
static loom_harvest_node_cfg cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        loom_harvest_node_defaults(&cfg);
        cfg.rollouts = 0;
        cfg.weights = "127.0.0.1:1"; /* nobody publishes there: pulls fail and retry */
        cfg.weights_elems = 4096;
        cfg.weights_poll_s = 1;
        cfg.weights_unkeyed = 1;
        loom_err e;
        if (loom_harvest_node_start(&cfg, &node, &e)) {
                fprintf(stderr, "fuzz_harvest_http: %s: %s\n", e.field, e.msg);
                abort();
        }
        return 0;
}

static const char *lookup(void *ctx, const char *key)
{
        const args *a = ctx;
        for (int i = 0; i < a->n; i++)
                if (!strcmp(a->k[i], key))
                        return a->v[i];
        return NULL;
}

static int hexval(char c)
{
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

/* In place: '+' is a space, %XX a byte (a malformed escape stays as it is). */
static void unescape(char *s)
{
        char *w = s;
        for (char *r = s; *r; r++) {
                int hi, lo;
                if (*r == '+')
                        *w++ = ' ';
                else if (*r == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0) {
                        *w++ = (char)(hi * 16 + lo);
                        r += 2;
                } else
                        *w++ = *r;
        }
        *w = 0;
}

static void split_query(char *query, args *a)
{
        for (char *save, *kv = strtok_r(query, "&", &save); kv && a->n < MAX_ARGS;
             kv = strtok_r(NULL, "&", &save)) {
                char *eq = strchr(kv, '=');
                char *v = eq ? eq + 1 : kv + strlen(kv);
                if (eq)
                        *eq = 0;
                unescape(kv);
                unescape(v);
                a->k[a->n] = kv;
                a->v[a->n++] = v;
        }
}

static void check(const hv_node_answer *a)
{
        size_t len = strnlen(a->body, sizeof a->body);
        if (len >= sizeof a->body)
                abort();
        if (a->generate) {
                if (a->status != 200 || a->prompt < 1 || a->gen < 1 || a->prompt > 1000000 ||
                    a->gen > 1000000 || (uint64_t)a->prompt + a->gen > cfg.max_context)
                        abort();
                return;
        }
        switch (a->status) {
        case 200: /* the stats object, whole, and its newline */
                if (len < 3 || a->body[0] != '{' || a->body[len - 2] != '}' ||
                    a->body[len - 1] != '\n')
                        abort();
                return;
        case 400:
        case 404:
        case 405:
        case 413:
        case 422:
                if (len < 2 || a->body[len - 1] != '\n')
                        abort();
                return;
        default:
                abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = 0;
        char *nl = strchr(text, '\n');
        if (nl)
                *nl = 0;
        char *sp = strchr(text, ' ');
        const char *method = text, *url = "";
        args a = {0};
        if (sp) {
                *sp = 0;
                char *path = sp + 1, *q = strchr(path, '?');
                if (q) {
                        *q = 0;
                        split_query(q + 1, &a);
                }
                url = path;
        }
        hv_node_ask ask = {.method = method, .url = url, .arg = lookup, .ctx = &a};
        hv_node_answer ans;
        hv_node_route(node, &ask, &ans);
        check(&ans);
        free(text);
        return 0;
}
