/*
 * fuzz_slurm.c - libFuzzer target for the Slurm executor's readers of squeue's and sinfo's
 * output (exec_slurm_parse_steps, _holders, _nodes, and the JSON readers exec_slurm_json_holders,
 * _nodes, in src/exec/slurm.c). That output carries
 * text anyone with a Slurm account chooses (job and step names) and whatever a Slurm version
 * prints, so every reader gets the same arbitrary bytes, as exec_capture would hand them over
 * (NUL-terminated, cut at the first NUL). Checked: no table grows past its bound, every string
 * ends inside its field, a step is a loom worker whose name parses back to the same worker.
 */
#include <stdlib.h>
#include <string.h>

#include "exec/exec_int.h"

#define MAX_OUT 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_str(const char *s, size_t cap)
{
        if (strnlen(s, cap) >= cap)
                abort();
}

static void steps(const char *text)
{
        char *buf = strdup(text);
        loom_exec_worker out[MAX_OUT + 1];
        memset(out, 0xa5, sizeof out); /* a guard past the bound */
        loom_exec_worker guard = out[MAX_OUT];
        int n = exec_slurm_parse_steps(buf, out, 1, MAX_OUT);
        if (n < 1 || n > MAX_OUT || memcmp(&out[MAX_OUT], &guard, sizeof guard))
                abort();
        for (int i = 1; i < n; i++) {
                loom_exec_worker *w = &out[i], back = {0};
                check_str(w->id, sizeof w->id);
                check_str(w->node, sizeof w->node);
                check_str(w->where, sizeof w->where);
                if (!w->node[0] || !w->id[0] || w->rank < 0 ||
                    (w->pool != LOOM_POOL_ROLLOUT && w->pool != LOOM_POOL_TRAIN))
                        abort();
                char name[96];
                loom_exec_worker_name(w, name, sizeof name);
                if (!loom_exec_worker_parse(name, &back) || back.job != w->job ||
                    back.admission != w->admission || back.pool != w->pool || back.rank != w->rank)
                        abort();
        }
        free(buf);
}

static void holders(const char *text)
{
        char *buf = strdup(text);
        exec_slurm_holder h[MAX_OUT + 1];
        memset(h, 0xa5, sizeof h);
        exec_slurm_holder guard = h[MAX_OUT];
        int n = exec_slurm_parse_holders(buf, h, MAX_OUT);
        if (n < 0 || n > MAX_OUT || memcmp(&h[MAX_OUT], &guard, sizeof guard))
                abort();
        for (int i = 0; i < n; i++) {
                check_str(h[i].node, sizeof h[i].node);
                check_str(h[i].id, sizeof h[i].id);
                if (!h[i].id[0])
                        abort();
        }
        free(buf);
}

static void nodes(const char *text)
{
        char *buf = strdup(text);
        char st[MAX_OUT + 1][2][LOOM_EXEC_NAME_MAX];
        memset(st, 0xa5, sizeof st);
        int n = exec_slurm_parse_nodes(buf, st, MAX_OUT);
        if (n < 0 || n > MAX_OUT)
                abort();
        for (size_t k = 0; k < sizeof st[MAX_OUT]; k++)
                if (((unsigned char *)st[MAX_OUT])[k] != 0xa5)
                        abort();
        for (int i = 0; i < n; i++) {
                check_str(st[i][0], LOOM_EXEC_NAME_MAX);
                check_str(st[i][1], LOOM_EXEC_NAME_MAX);
                if (!st[i][0][0] || !st[i][1][0])
                        abort();
        }
        free(buf);
}

/* The JSON readers: -1 or a count within the bound; every string ends inside its field. */
static void json(const char *text)
{
        exec_slurm_holder h[MAX_OUT + 1];
        memset(h, 0xa5, sizeof h);
        exec_slurm_holder guard = h[MAX_OUT];
        int n = exec_slurm_json_holders(text, h, MAX_OUT);
        if (n < -1 || n > MAX_OUT || memcmp(&h[MAX_OUT], &guard, sizeof guard))
                abort();
        for (int i = 0; i < n; i++) {
                check_str(h[i].node, sizeof h[i].node);
                check_str(h[i].id, sizeof h[i].id);
                if (!h[i].id[0] || !h[i].node[0])
                        abort();
        }
        char st[MAX_OUT + 1][2][LOOM_EXEC_NAME_MAX];
        memset(st, 0xa5, sizeof st);
        n = exec_slurm_json_nodes(text, st, MAX_OUT);
        if (n < -1 || n > MAX_OUT)
                abort();
        for (size_t k = 0; k < sizeof st[MAX_OUT]; k++)
                if (((unsigned char *)st[MAX_OUT])[k] != 0xa5)
                        abort();
        for (int i = 0; i < n; i++) {
                check_str(st[i][0], LOOM_EXEC_NAME_MAX);
                check_str(st[i][1], LOOM_EXEC_NAME_MAX);
                if (!st[i][0][0] || !st[i][1][0])
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
        steps(text);
        holders(text);
        nodes(text);
        json(text);
        free(text);
        return 0;
}
