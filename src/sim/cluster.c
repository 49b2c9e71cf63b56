/*
 * cluster.c - the cluster `loom sim` provisions (`--cluster NAME|FILE`): a named preset, or a
 * JSON file holding the same cluster object as a scenario's or loomd's "cluster" (the codec is
 * src/spec's loom_cluster_cfg_from_json: GPU types, $/GPU-h, GPUs per node, host memory).
 *
 * Presets (docs/sim.md, "The cluster model"):
 *   h20-h800  WEAVE Table 1, the default: H20 rollout GPUs at $1.85/GPU-h, H800 training GPUs
 *             at $5.28/GPU-h (price ratio 0.35).
 *   h100      one type, both pools: H100 SXM at $6.155/GPU-h (CoreWeave's listed on-demand
 *             price of an 8 x HGX H100 node, $49.24/h).
 *   h200      one type, both pools: H200 at $6.305/GPU-h (CoreWeave's 8 x HGX H200 node,
 *             $50.44/h).
 * On a one-type cluster the price ratio is 1.0: a rollout GPU costs what a training GPU does.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/spec.h"
#include "sim_int.h"

static void one_type(loom_cluster_cfg *c, const char *name, double price, double hbm_gb,
                     double tbps)
{
        loom_cluster_cfg_default(c);
        for (int p = 0; p < 2; p++) {
                loom_gpu_type *g = &c->gpu[p];
                snprintf(g->name, sizeof g->name, "%s", name);
                g->price_per_hour = price;
                g->hbm_bytes = (uint64_t)(hbm_gb * 1e9);
                g->tflops = 989.5; /* dense bf16, H100 and H200 alike */
                g->hbm_tbps = tbps;
        }
}

/* Put the file (and the line and column, when known) in front of e's message. */
static void name_file(const char *path, loom_err *e)
{
        if (!e)
                return;
        char m[sizeof e->msg];
        if (e->line > 0)
                snprintf(m, sizeof m, "%.160s:%d:%d: %.320s", path, e->line, e->col, e->msg);
        else
                snprintf(m, sizeof m, "%.160s: %.320s", path, e->msg);
        memcpy(e->msg, m, sizeof m);
}

static const char *const presets[] = {"h20-h800", "h100", "h200", NULL};

const char *const *loom_sim_cluster_presets(void)
{
        return presets;
}

int loom_sim_cluster_load(const char *arg, loom_cluster_cfg *out, loom_err *e)
{
        if (!strcmp(arg, "h20-h800")) {
                loom_cluster_cfg_default(out);
                return 0;
        }
        if (!strcmp(arg, "h100")) {
                one_type(out, "H100", 49.24 / 8, 80, 3.35);
                return 0;
        }
        if (!strcmp(arg, "h200")) {
                one_type(out, "H200", 50.44 / 8, 141, 4.8);
                return 0;
        }
        char *text = NULL;
        size_t len = 0;
        int rc = loom_spec_read_file(arg, &text, &len, e);
        if (rc)
                return rc;
        json_t *root = loom_json_parse(text, len, e);
        if (!root) {
                free(text);
                name_file(arg, e);
                return LOOM_EINVAL;
        }
        /* a scenario or a loomd file names it "cluster"; a file of its own is the object */
        json_t *cl = json_is_object(root) ? json_object_get(root, "cluster") : NULL;
        loom_cluster_cfg c;
        rc = loom_cluster_cfg_from_json(cl ? cl : root, cl ? "cluster" : "", text, len, &c, e);
        if (!rc)
                rc = loom_cluster_cfg_validate(&c, e);
        json_decref(root);
        free(text);
        if (!rc)
                *out = c;
        else
                name_file(arg, e);
        return rc;
}
