/*
 * layout.c - the parameters of a dense (Qwen2-style) transformer in the order a checkpoint lists
 * them, each tagged with how tensor parallelism splits it, plus Qwen2.5 shape presets.
 *
 * Splits follow Megatron/vLLM: Q/K/V, gate and up projections split their output rows
 * (column-parallel, by whole heads for attention); the attention output and down projections split
 * their input columns (row-parallel); the embedding and LM head split the vocabulary rows; norms
 * are replicated.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/sync.h"

/* Shapes from the published Qwen2.5 configs (hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, vocab_size, tie_word_embeddings). */
static const loom_sync_model presets[] = {
    {"qwen2.5-0.5b", 896, 4864, 24, 14, 2, 151936, 1, 1},
    {"qwen2.5-1.5b", 1536, 8960, 28, 12, 2, 151936, 1, 1},
    {"qwen2.5-7b", 3584, 18944, 28, 28, 4, 152064, 0, 1},
    {"qwen2.5-14b", 5120, 13824, 48, 40, 8, 152064, 0, 1},
    {"qwen2.5-32b", 5120, 27648, 64, 40, 8, 152064, 0, 1},
    /* small enough for unit tests; same structure */
    {"tiny", 64, 128, 4, 8, 4, 512, 0, 1},
};
#define NPRESETS (sizeof presets / sizeof presets[0])

const char *const *loom_sync_model_presets(void)
{
        static const char *names[NPRESETS + 1];
        for (size_t i = 0; i < NPRESETS; i++)
                names[i] = presets[i].name;
        names[NPRESETS] = NULL;
        return names;
}

int loom_sync_model_preset(const char *name, loom_sync_model *out, loom_err *e)
{
        for (size_t i = 0; i < NPRESETS; i++) {
                if (!strcmp(name, presets[i].name)) {
                        *out = presets[i];
                        return 0;
                }
        }
        return loom_err_set(e, LOOM_EINVAL, "model",
                            "unknown model '%s' (known: qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, "
                            "qwen2.5-14b, qwen2.5-32b, tiny)",
                            name);
}

static int check_model(const loom_sync_model *m, loom_err *e)
{
        if (!m->hidden || !m->intermediate || !m->layers || !m->heads || !m->kv_heads || !m->vocab)
                return loom_err_set(e, LOOM_EINVAL, "model", "every dimension must be positive");
        if (m->hidden % m->heads)
                return loom_err_set(e, LOOM_EINVAL, "model.heads",
                                    "%u heads do not divide hidden size %u", m->heads, m->hidden);
        if (m->heads % m->kv_heads)
                return loom_err_set(e, LOOM_EINVAL, "model.kv_heads",
                                    "%u kv heads do not divide %u heads", m->kv_heads, m->heads);
        if (m->layers > 100000)
                return loom_err_set(e, LOOM_ERANGE, "model.layers", "too many layers (%u)",
                                    m->layers);
        return 0;
}

typedef struct builder {
        loom_sync_tensor *t;
        size_t n, cap;
        uint64_t elems;
} builder;

static int add(builder *b, const char *name, uint64_t rows, uint64_t cols, loom_sync_split split,
               uint32_t unit, int32_t layer)
{
        if (loom_reserve(&b->t, &b->cap, b->n + 1, sizeof *b->t, 64))
                return LOOM_ENOMEM;
        loom_sync_tensor *t = &b->t[b->n++];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->rows = rows;
        t->cols = cols;
        t->offset = b->elems;
        t->split = split;
        t->unit = unit;
        t->layer = layer;
        b->elems += rows * cols;
        return 0;
}

static int add_layer(builder *b, const loom_sync_model *m, uint32_t i)
{
        const uint64_t hd = m->hidden / m->heads, q = (uint64_t)m->heads * hd,
                       kv = (uint64_t)m->kv_heads * hd;
        const int32_t L = (int32_t)i;
        char n[64];
        int rc = 0;
#define T(suffix, r, c, s, u)                                                                      \
        do {                                                                                       \
                snprintf(n, sizeof n, "model.layers.%u.%s", i, suffix);                            \
                if ((rc = add(b, n, r, c, s, u, L)))                                               \
                        return rc;                                                                 \
        } while (0)
        T("input_layernorm.weight", m->hidden, 1, LOOM_SYNC_REPLICATED, 1);
        T("self_attn.q_proj.weight", q, m->hidden, LOOM_SYNC_COLUMN, (uint32_t)hd);
        if (m->qkv_bias)
                T("self_attn.q_proj.bias", q, 1, LOOM_SYNC_COLUMN, (uint32_t)hd);
        T("self_attn.k_proj.weight", kv, m->hidden, LOOM_SYNC_COLUMN, (uint32_t)hd);
        if (m->qkv_bias)
                T("self_attn.k_proj.bias", kv, 1, LOOM_SYNC_COLUMN, (uint32_t)hd);
        T("self_attn.v_proj.weight", kv, m->hidden, LOOM_SYNC_COLUMN, (uint32_t)hd);
        if (m->qkv_bias)
                T("self_attn.v_proj.bias", kv, 1, LOOM_SYNC_COLUMN, (uint32_t)hd);
        T("self_attn.o_proj.weight", m->hidden, q, LOOM_SYNC_ROW, (uint32_t)hd);
        T("post_attention_layernorm.weight", m->hidden, 1, LOOM_SYNC_REPLICATED, 1);
        T("mlp.gate_proj.weight", m->intermediate, m->hidden, LOOM_SYNC_COLUMN, 1);
        T("mlp.up_proj.weight", m->intermediate, m->hidden, LOOM_SYNC_COLUMN, 1);
        T("mlp.down_proj.weight", m->hidden, m->intermediate, LOOM_SYNC_ROW, 1);
#undef T
        return 0;
}

int loom_sync_layout_new(const loom_sync_model *m, loom_sync_layout **out, loom_err *e)
{
        *out = NULL;
        int rc = check_model(m, e);
        if (rc)
                return rc;
        builder b = {0};
        rc = add(&b, "model.embed_tokens.weight", m->vocab, m->hidden, LOOM_SYNC_COLUMN, 1, -1);
        for (uint32_t i = 0; !rc && i < m->layers; i++)
                rc = add_layer(&b, m, i);
        if (!rc)
                rc = add(&b, "model.norm.weight", m->hidden, 1, LOOM_SYNC_REPLICATED, 1, -2);
        if (!rc && !m->tied_embeddings)
                rc = add(&b, "lm_head.weight", m->vocab, m->hidden, LOOM_SYNC_COLUMN, 1, -2);
        loom_sync_layout *l = rc ? NULL : calloc(1, sizeof *l);
        if (!l) {
                free(b.t);
                return loom_err_set(e, LOOM_ENOMEM, "layout", "out of memory");
        }
        l->model = *m;
        l->tensors = b.t;
        l->ntensors = b.n;
        l->elems = b.elems;
        *out = l;
        return 0;
}

void loom_sync_layout_free(loom_sync_layout *l)
{
        if (!l)
                return;
        free(l->tensors);
        free(l);
}
