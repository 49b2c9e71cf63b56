/*
 * latency.c - prefill and decode-step latency of a model on an H800 instance.
 *
 * A roofline with fixed efficiencies, in place of the per-deployment profiles ROSE measures
 * (T_prf(L), T_dec(b)). Inputs are public: the model shapes are the Qwen2.5 configurations
 * (src/sync presets), the GPU is an H800 SXM (989.5 dense bf16 TFLOPS, 3.35 TB/s HBM, 80 GB).
 * Prefill is compute-bound: 2 FLOPs per parameter per token plus causal attention; a decode
 * step is bandwidth-bound: all weights plus the batch's KV cache are read once. The
 * efficiencies (MFU, achieved bandwidth, tensor-parallel scaling, per-iteration overhead) are
 * stated assumptions; docs/harvest.md lists them with what they produce.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/harvest.h"
#include "loom/sync.h"
#include "sim_int.h"

int loom_harvest_model_preset(const char *name, loom_harvest_model *out, loom_err *e)
{
        const char *sync_name;
        uint32_t tp;
        if (!strcmp(name, "7b")) {
                sync_name = "qwen2.5-7b";
                tp = 1;
        } else if (!strcmp(name, "32b")) {
                sync_name = "qwen2.5-32b";
                tp = 4;
        } else {
                return loom_err_set(e, LOOM_EINVAL, "pair", "'%s' is not 7b or 32b", name);
        }
        loom_sync_model sm;
        loom_sync_layout *l;
        int rc = loom_sync_model_preset(sync_name, &sm, e);
        if (rc == 0)
                rc = loom_sync_layout_new(&sm, &l, e);
        if (rc)
                return rc;
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%s", sync_name);
        out->params = (double)l->elems;
        out->weight_bytes = 2.0 * (double)l->elems;
        loom_sync_layout_free(l);
        double head_dim = (double)sm.hidden / sm.heads;
        out->kv_bytes_token = 2.0 * sm.layers * sm.kv_heads * head_dim * 2.0;
        out->attn_flops_tok2 = 4.0 * sm.layers * sm.hidden;
        out->tp = tp;
        out->peak_flops = 989.5e12;
        out->hbm_bw = 3.35e12;
        out->hbm_bytes = 80e9;
        out->mfu = 0.5;
        out->bw_eff = 0.7;
        out->tp_eff = tp > 1 ? 0.85 : 1.0;
        out->prf_overhead = 2 * LOOM_US_PER_MS;
        out->dec_overhead = 2 * LOOM_US_PER_MS;
        return 0;
}

static loom_us us(double s)
{
        return (loom_us)(s * 1e6 + 0.5);
}

loom_us loom_harvest_t_prefill(const loom_harvest_model *m, uint64_t n, uint64_t prefix)
{
        if (n == 0)
                return 0;
        double scale = m->tp * m->tp_eff;
        double flops = 2.0 * m->params * (double)n +
                       m->attn_flops_tok2 * (double)n * ((double)prefix + (double)n / 2.0);
        double t_c = flops / (scale * m->peak_flops * m->mfu);
        double t_m = m->weight_bytes / (scale * m->hbm_bw * m->bw_eff);
        return us(fmax(t_c, t_m)) + m->prf_overhead;
}

loom_us loom_harvest_t_decode(const loom_harvest_model *m, uint32_t b, uint64_t ctx)
{
        if (b == 0)
                return 0;
        double scale = m->tp * m->tp_eff;
        double bytes = m->weight_bytes + (double)ctx * m->kv_bytes_token;
        double t_m = bytes / (scale * m->hbm_bw * m->bw_eff);
        double flops = 2.0 * m->params * b + m->attn_flops_tok2 * (double)ctx;
        double t_c = flops / (scale * m->peak_flops * m->mfu);
        return us(fmax(t_m, t_c)) + m->dec_overhead;
}

uint32_t loom_harvest_kv_pages(const loom_harvest_model *m, uint64_t tokens)
{
        double pages = ceil((double)tokens * m->kv_bytes_token / (double)LOOM_HARVEST_PAGE);
        return (uint32_t)pages;
}

/* The p-quantile of sorted v[0..n): the nearest rank; 0 when n is 0. */
static double pct(const double *v, size_t n, double p)
{
        return n ? loom_quantile_rank(v, n, p) : 0;
}

void hv_latency_pcts(double *ttft, double *tpot, size_t n, double *ttft_p50, double *ttft_p99,
                     double *tpot_p50, double *tpot_p99)
{
        qsort(ttft, n, sizeof *ttft, loom_cmp_double);
        qsort(tpot, n, sizeof *tpot, loom_cmp_double);
        *ttft_p50 = pct(ttft, n, 0.5);
        *ttft_p99 = pct(ttft, n, 0.99);
        *tpot_p50 = pct(tpot, n, 0.5);
        *tpot_p99 = pct(tpot, n, 0.99);
}
