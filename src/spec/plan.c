/*
 * plan.c - the cluster and workflow files of `loom plan` (docs/plan.md), decoded with
 * jansson into loom_plan_cluster / loom_plan_workflow. Every error names the field by path with
 * the line and column where it sits (loom_json_locate); unknown fields are errors.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/plan.h"
#include "loom/spec.h"
#include "spec_int.h"

typedef struct dctx {
        const char *text;
        size_t len;
        loom_err *e;
} dctx;

static int fail(const dctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(const dctx *c, const char *path, const char *fmt, ...)
{
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        int line = 0, col = 0;
        if (c->text && path[0])
                loom_json_locate(c->text, c->len, path, &line, &col);
        int rc = loom_err_set(c->e, LOOM_EINVAL, path, "%s%s%s", path, path[0] ? ": " : "", msg);
        c->e->line = line;
        c->e->col = col;
        return rc;
}

static int unknown_fields(const dctx *c, json_t *obj, const char *where, const char *const *known)
{
        const char *k = loom__spec_unknown_key(obj, known, NULL);
        if (!k)
                return 0;
        char p[256];
        snprintf(p, sizeof p, "%s%s%s", where, where[0] ? "." : "", k);
        const char *near = loom__spec_nearest(k, known, NULL);
        if (near)
                return fail(c, p, "unknown field (did you mean \"%s\"?)", near);
        return fail(c, p, "unknown field");
}

/* o at where must be an object (else the error is `what`) with only the fields in known. */
static int object_of(const dctx *c, json_t *o, const char *where, const char *const *known,
                     const char *what)
{
        if (!json_is_object(o))
                return fail(c, where, "%s", what);
        return unknown_fields(c, o, where, known);
}

/* Optional positive (or non-negative) number at where.k; 1 when absent. */
static int number(const dctx *c, json_t *obj, const char *where, const char *k, bool zero_ok,
                  double *out)
{
        char p[256];
        snprintf(p, sizeof p, "%s%s%s", where, where[0] ? "." : "", k);
        json_t *v = json_object_get(obj, k);
        if (!v)
                return 1;
        if (!json_is_number(v))
                return fail(c, p, "must be a number");
        double d = json_number_value(v);
        if (!isfinite(d) || d < 0 || (!zero_ok && d == 0) || d > 1e9)
                return fail(c, p, "must be %s, got %g", zero_ok ? ">= 0" : "> 0", d);
        *out = d;
        return 0;
}

static int string(const dctx *c, json_t *obj, const char *where, const char *k, bool required,
                  const char **out)
{
        char p[256];
        snprintf(p, sizeof p, "%s%s%s", where, where[0] ? "." : "", k);
        json_t *v = json_object_get(obj, k);
        if (!v) {
                if (required)
                        return fail(c, where[0] ? where : k, "missing required field \"%s\"", k);
                return 1;
        }
        if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) > 31)
                return fail(c, p, "must be a string of 1..31 characters");
        *out = json_string_value(v);
        return 0;
}

/* The built-in GPU types: {name, dense bf16 TFLOPS, HBM GB, HBM GB/s, intra-machine GB/s}. */
static const loom_plan_gpu builtin_gpus[] = {
    /* Table 1 of the HetRL paper. */
    {"A100", 312, 40, 2039, 600},
    {"L40S", 366, 48, 864, 64},
    {"L4", 121, 24, 300, 64},
    /* H100 SXM5 80GB, NVIDIA H100 Tensor Core GPU datasheet: 989 TFLOPS dense BF16 (1,979 is
     * with 2:4 sparsity), 80 GB HBM3 at 3.35 TB/s, fourth-generation NVLink at 900 GB/s per GPU
     * (the A100 row's 600 is NVLink 3 counted the same way). */
    {"H100", 989, 80, 3350, 900},
};
/* Every cluster's type table starts with HetRL's three types, in this order; a later built-in
 * joins it when the file first names it (in gpu_types or a device). The search draws a random
 * order over the table's types, so a fleet that never names a newer type keeps its type indices,
 * random draws and plans when this table grows. */
#define BUILTIN_ALWAYS 3

static int type_index(const loom_plan_cluster *cl, const char *name)
{
        int t = 0;
        while (t < cl->n_types && strcmp(cl->types[t].name, name))
                t++;
        return t;
}

/* type_index, adding a built-in type on its first mention: n_types when the name is unknown,
 * -1 when it is a built-in type that no longer fits the table. */
static int type_lookup(loom_plan_cluster *cl, const char *name)
{
        int t = type_index(cl, name);
        size_t n = sizeof builtin_gpus / sizeof builtin_gpus[0];
        for (size_t i = BUILTIN_ALWAYS; i < n && t == cl->n_types; i++)
                if (!strcmp(builtin_gpus[i].name, name)) {
                        if (t >= LOOM_PLAN_MAX_TYPES)
                                return -1;
                        cl->types[t] = builtin_gpus[i];
                        return cl->n_types++;
                }
        return t;
}

typedef struct names {
        char v[LOOM_PLAN_MAX_MACHINES][32];
        int n;
} names;

static int intern(names *ns, const char *s, int cap)
{
        for (int i = 0; i < ns->n; i++)
                if (!strcmp(ns->v[i], s))
                        return i;
        if (ns->n >= cap)
                return -1;
        snprintf(ns->v[ns->n], sizeof ns->v[0], "%s", s);
        return ns->n++;
}

static int link_obj(const dctx *c, json_t *o, const char *where, double *lat_s, double *bw)
{
        static const char *const known[] = {"latency_ms", "latency_us", "gbps", NULL};
        int rc = object_of(c, o, where, known, "must be an object with latency_ms and gbps");
        if (rc)
                return rc;
        double ms = -1, us = -1, g = -1;
        if ((rc = number(c, o, where, "latency_ms", true, &ms)) < 0 ||
            (rc = number(c, o, where, "latency_us", true, &us)) < 0 ||
            (rc = number(c, o, where, "gbps", false, &g)) < 0)
                return rc;
        if (ms >= 0 && us >= 0)
                return fail(c, where, "give latency_ms or latency_us, not both");
        if (ms >= 0 || us >= 0)
                *lat_s = ms >= 0 ? ms / 1e3 : us / 1e6;
        if (g > 0)
                *bw = g * 1e9 / 8;
        return 0;
}

static int gpu_types(const dctx *c, json_t *o, loom_plan_cluster *cl)
{
        cl->n_types = 0;
        for (int i = 0; i < BUILTIN_ALWAYS; i++)
                cl->types[cl->n_types++] = builtin_gpus[i];
        if (!o)
                return 0;
        if (!json_is_object(o))
                return fail(c, "gpu_types", "must be an object of name -> {tflops, ...}");
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
                char where[128];
                snprintf(where, sizeof where, "gpu_types.%s", k);
                static const char *const known[] = {"tflops", "hbm_gb", "hbm_gbps", "intra_gbps",
                                                    NULL};
                int rc = object_of(c, v, where, known, "must be an object");
                if (rc)
                        return rc;
                if (strlen(k) < 1 || strlen(k) > 31)
                        return fail(c, where, "a name of 1..31 characters, please");
                int t = type_lookup(cl, k);
                if (t < 0 || t == cl->n_types) {
                        if (t < 0 || t >= LOOM_PLAN_MAX_TYPES)
                                return fail(c, where, "at most %d GPU types", LOOM_PLAN_MAX_TYPES);
                        memset(&cl->types[t], 0, sizeof cl->types[t]);
                        snprintf(cl->types[t].name, sizeof cl->types[t].name, "%s", k);
                        cl->n_types++;
                }
                loom_plan_gpu *g = &cl->types[t];
                const char *f[] = {"tflops", "hbm_gb", "hbm_gbps", "intra_gbps"};
                double *dst[] = {&g->tflops, &g->hbm_gb, &g->hbm_gbps, &g->intra_gbps};
                for (int i = 0; i < 4; i++)
                        if ((rc = number(c, v, where, f[i], false, dst[i])) < 0)
                                return rc;
                for (int i = 0; i < 4; i++)
                        if (!(*dst[i] > 0))
                                return fail(c, where, "missing required field \"%s\"", f[i]);
        }
        return 0;
}

static int devices(const dctx *c, json_t *arr, loom_plan_cluster *cl, names *machines, names *zones,
                   names *regions)
{
        if (!arr || !json_is_array(arr) || json_array_size(arr) == 0)
                return fail(c, arr ? "devices" : "", "%s",
                            arr ? "must be a non-empty array"
                                : "missing required field \"devices\"");
        size_t i;
        json_t *d;
        json_array_foreach(arr, i, d)
        {
                char where[64];
                snprintf(where, sizeof where, "devices[%zu]", i);
                static const char *const known[] = {"type",   "machine", "zone",
                                                    "region", "count",   NULL};
                int rc = object_of(c, d, where, known, "must be an object");
                if (rc)
                        return rc;
                const char *type, *machine, *region, *zone = NULL;
                if ((rc = string(c, d, where, "type", true, &type)) < 0 ||
                    (rc = string(c, d, where, "machine", true, &machine)) < 0 ||
                    (rc = string(c, d, where, "region", true, &region)) < 0 ||
                    (rc = string(c, d, where, "zone", false, &zone)) < 0)
                        return rc;
                int t = type_lookup(cl, type);
                char p[96];
                if (t < 0 || t == cl->n_types) {
                        snprintf(p, sizeof p, "%s.type", where);
                        if (t < 0)
                                return fail(c, p, "at most %d GPU types", LOOM_PLAN_MAX_TYPES);
                        return fail(c, p,
                                    "unknown GPU type '%s' (built in: A100, L40S, L4, H100; "
                                    "others go in gpu_types)",
                                    type);
                }
                json_t *cv = json_object_get(d, "count");
                json_int_t count = 1;
                if (cv) {
                        snprintf(p, sizeof p, "%s.count", where);
                        if (!json_is_integer(cv) || json_integer_value(cv) < 1 ||
                            json_integer_value(cv) > LOOM_PLAN_MAX_DEV)
                                return fail(c, p, "must be an integer in 1..%d", LOOM_PLAN_MAX_DEV);
                        count = json_integer_value(cv);
                }
                int m = intern(machines, machine, LOOM_PLAN_MAX_MACHINES);
                int r = intern(regions, region, LOOM_PLAN_MAX_REGIONS);
                char zbuf[32];
                snprintf(zbuf, sizeof zbuf, "%s", zone ? zone : region);
                int z = intern(zones, zbuf, LOOM_PLAN_MAX_MACHINES);
                if (m < 0 || r < 0 || z < 0)
                        return fail(c, where, "too many machines (%d), zones or regions (%d)",
                                    LOOM_PLAN_MAX_MACHINES, LOOM_PLAN_MAX_REGIONS);
                for (json_int_t k = 0; k < count; k++) {
                        if (cl->n_dev >= LOOM_PLAN_MAX_DEV)
                                return fail(c, where, "more than %d GPUs", LOOM_PLAN_MAX_DEV);
                        loom_plan_device *dv = &cl->dev[cl->n_dev];
                        for (int q = 0; q < cl->n_dev; q++)
                                if (cl->dev[q].machine == m && cl->dev[q].region != r) {
                                        snprintf(p, sizeof p, "%s.region", where);
                                        return fail(c, p, "machine '%s' is already in region '%s'",
                                                    machine, regions->v[cl->dev[q].region]);
                                }
                        dv->type = t;
                        dv->machine = m;
                        dv->zone = z;
                        dv->region = r;
                        cl->n_dev++;
                }
        }
        return 0;
}

static int region_index(const names *regions, const char *s)
{
        for (int i = 0; i < regions->n; i++)
                if (!strcmp(regions->v[i], s))
                        return i;
        return -1;
}

static int links(const dctx *c, json_t *o, loom_plan_cluster *cl, const names *regions)
{
        /* Defaults: NVLink/PCIe-class latency in a machine, a 100 Gb/s LAN in a region; region
         * pairs have no default (a multi-region file must say how they connect). */
        cl->intra_lat_s = 5e-6;
        for (int r = 0; r < cl->n_regions; r++) {
                cl->region_lat_s[r] = 20e-6;
                cl->region_bw[r] = 100e9 / 8;
                for (int q = 0; q < cl->n_regions; q++) {
                        cl->pair_lat_s[r][q] = -1;
                        cl->pair_bw[r][q] = -1;
                }
        }
        if (!o)
                goto check;
        static const char *const known[] = {"intra_machine", "intra_region", "regions", "pairs",
                                            NULL};
        int rc = object_of(c, o, "links", known, "must be an object");
        if (rc)
                return rc;
        json_t *v;
        if ((v = json_object_get(o, "intra_machine"))) {
                double bw = 0;
                if ((rc = link_obj(c, v, "links.intra_machine", &cl->intra_lat_s, &bw)))
                        return rc;
                if (bw > 0)
                        return fail(c, "links.intra_machine.gbps",
                                    "intra-machine bandwidth is the GPU type's intra_gbps");
        }
        if ((v = json_object_get(o, "intra_region"))) {
                double lat = cl->region_lat_s[0], bw = cl->region_bw[0];
                if ((rc = link_obj(c, v, "links.intra_region", &lat, &bw)))
                        return rc;
                for (int r = 0; r < cl->n_regions; r++) {
                        cl->region_lat_s[r] = lat;
                        cl->region_bw[r] = bw;
                }
        }
        if ((v = json_object_get(o, "regions"))) {
                if (!json_is_object(v))
                        return fail(c, "links.regions", "must be an object of region -> link");
                const char *k;
                json_t *x;
                json_object_foreach(v, k, x)
                {
                        char where[96];
                        snprintf(where, sizeof where, "links.regions.%s", k);
                        int r = region_index(regions, k);
                        if (r < 0)
                                return fail(c, where, "no device is in region '%s'", k);
                        if ((rc = link_obj(c, x, where, &cl->region_lat_s[r], &cl->region_bw[r])))
                                return rc;
                }
        }
        if ((v = json_object_get(o, "pairs"))) {
                if (!json_is_array(v))
                        return fail(c, "links.pairs",
                                    "must be an array of {a, b, latency_ms, gbps}");
                size_t i;
                json_t *x;
                json_array_foreach(v, i, x)
                {
                        char where[64], p[80];
                        snprintf(where, sizeof where, "links.pairs[%zu]", i);
                        static const char *const kp[] = {"a",          "b",    "latency_ms",
                                                         "latency_us", "gbps", NULL};
                        if ((rc = object_of(c, x, where, kp, "must be an object")))
                                return rc;
                        const char *a, *b;
                        if ((rc = string(c, x, where, "a", true, &a)) < 0 ||
                            (rc = string(c, x, where, "b", true, &b)) < 0)
                                return rc;
                        int ra = region_index(regions, a), rb = region_index(regions, b);
                        if (ra < 0 || rb < 0 || ra == rb) {
                                snprintf(p, sizeof p, "%s.%s", where, ra < 0 ? "a" : "b");
                                return fail(c, p,
                                            ra == rb && ra >= 0
                                                ? "a pair joins two different regions"
                                                : "no device is in region '%s'",
                                            ra < 0 ? a : b);
                        }
                        json_t *js = json_object_get(x, "gbps");
                        json_t *jl = json_object_get(x, "latency_ms");
                        if (!jl)
                                jl = json_object_get(x, "latency_us");
                        if (!js || !jl)
                                return fail(c, where, "a pair needs latency_ms and gbps");
                        double lat = 0, bw = 0;
                        json_object_del(x, "a");
                        json_object_del(x, "b");
                        if ((rc = link_obj(c, x, where, &lat, &bw)))
                                return rc;
                        cl->pair_lat_s[ra][rb] = cl->pair_lat_s[rb][ra] = lat;
                        cl->pair_bw[ra][rb] = cl->pair_bw[rb][ra] = bw;
                }
        }
check:
        for (int r = 0; r < cl->n_regions; r++)
                for (int q = r + 1; q < cl->n_regions; q++)
                        if (cl->pair_bw[r][q] < 0)
                                return fail(c, o ? "links" : "",
                                            "no link between regions '%s' and "
                                            "'%s' (add it to links.pairs)",
                                            regions->v[r], regions->v[q]);
        return 0;
}

int loom_plan_cluster_parse(const char *text, size_t len, loom_plan_cluster *out, char *name,
                            size_t name_len, loom_err *e)
{
        dctx c = {text, len, e};
        json_t *root = loom_json_parse(text, len, e);
        if (!root)
                return LOOM_EINVAL;
        loom_plan_cluster *cl = calloc(1, sizeof *cl);
        names *ns = calloc(3, sizeof *ns);
        int rc = 0;
        if (!cl || !ns) {
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                goto out;
        }
        if (!json_is_object(root)) {
                rc = fail(&c, "", "a cluster must be a JSON object with a \"devices\" array");
                goto out;
        }
        static const char *const known[] = {"name", "gpu_types", "devices", "links", NULL};
        if ((rc = unknown_fields(&c, root, "", known)))
                goto out;
        json_t *jn = json_object_get(root, "name");
        if (jn && (!json_is_string(jn) || json_string_length(jn) > 200)) {
                rc = fail(&c, "name", "must be a string of at most 200 characters");
                goto out;
        }
        snprintf(name, name_len, "%s", jn ? json_string_value(jn) : "");
        if ((rc = gpu_types(&c, json_object_get(root, "gpu_types"), cl)))
                goto out;
        if ((rc = devices(&c, json_object_get(root, "devices"), cl, &ns[0], &ns[1], &ns[2])))
                goto out;
        cl->n_machines = ns[0].n;
        cl->n_zones = ns[1].n;
        cl->n_regions = ns[2].n;
        for (int r = 0; r < ns[2].n; r++)
                snprintf(cl->region_name[r], sizeof cl->region_name[r], "%s", ns[2].v[r]);
        if ((rc = links(&c, json_object_get(root, "links"), cl, &ns[2])))
                goto out;
        if ((rc = loom_plan_cluster_check(cl, e)))
                goto out;
        *out = *cl;
out:
        if (rc > 0)
                rc = 0;
        free(cl);
        free(ns);
        json_decref(root);
        return rc;
}

int loom_plan_workflow_parse(const char *text, size_t len, loom_plan_workflow *w, loom_err *e)
{
        dctx c = {text, len, e};
        json_t *root = loom_json_parse(text, len, e);
        if (!root)
                return LOOM_EINVAL;
        int rc = 0;
        if (!json_is_object(root)) {
                rc = fail(&c, "", "a workflow must be a JSON object");
                goto out;
        }
        static const char *const known[] = {"algorithm",        "mode",  "model",     "seq_in",
                                            "seq_out",          "batch", "responses", "micro_batch",
                                            "max_decode_batch", "eta",   "balance",   NULL};
        if ((rc = unknown_fields(&c, root, "", known)))
                goto out;
        const char *s;
        if (string(&c, root, "", "algorithm", false, &s) == 0) {
                if (strcmp(s, "ppo") && strcmp(s, "grpo")) {
                        rc = fail(&c, "algorithm", "must be \"ppo\" or \"grpo\", got \"%s\"", s);
                        goto out;
                }
                w->grpo = !strcmp(s, "grpo");
        }
        if (string(&c, root, "", "mode", false, &s) == 0) {
                if (strcmp(s, "sync") && strcmp(s, "async")) {
                        rc = fail(&c, "mode", "must be \"sync\" or \"async\", got \"%s\"", s);
                        goto out;
                }
                w->async = !strcmp(s, "async");
        }
        json_t *m = json_object_get(root, "model");
        if (m && json_is_string(m)) {
                if (loom_plan_model_lookup(json_string_value(m), &w->model)) {
                        rc = fail(&c, "model",
                                  "unknown model \"%s\" (qwen3-4b, qwen3-8b, "
                                  "qwen3-14b, or an object)",
                                  json_string_value(m));
                        goto out;
                }
        } else if (m && json_is_object(m)) {
                static const char *const km[] = {"hidden",   "intermediate", "layers", "heads",
                                                 "kv_heads", "head_dim",     NULL};
                if ((rc = unknown_fields(&c, m, "model", km)))
                        goto out;
                int *dst[] = {&w->model.h1,    &w->model.h2,       &w->model.layers,
                              &w->model.heads, &w->model.kv_heads, &w->model.head_dim};
                snprintf(w->model.name, sizeof w->model.name, "custom");
                for (int i = 0; km[i]; i++) {
                        json_t *v = json_object_get(m, km[i]);
                        char p[64];
                        snprintf(p, sizeof p, "model.%s", km[i]);
                        if (!v) {
                                rc = fail(&c, "model", "missing required field \"%s\"", km[i]);
                                goto out;
                        }
                        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                            json_integer_value(v) > 1000000) {
                                rc = fail(&c, p, "must be an integer in 1..1000000");
                                goto out;
                        }
                        *dst[i] = (int)json_integer_value(v);
                }
        } else if (m) {
                rc = fail(&c, "model", "must be a model name or an object");
                goto out;
        }
        const char *ints[] = {"seq_in",    "seq_out",     "batch",
                              "responses", "micro_batch", "max_decode_batch"};
        int *idst[] = {&w->seq_in,    &w->seq_out, &w->batch,
                       &w->responses, &w->mbs,     &w->max_decode_batch};
        for (int i = 0; i < 6; i++) {
                json_t *v = json_object_get(root, ints[i]);
                if (!v)
                        continue;
                if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                    json_integer_value(v) > 1 << 20) {
                        rc = fail(&c, ints[i], "must be an integer in 1..1048576");
                        goto out;
                }
                *idst[i] = (int)json_integer_value(v);
        }
        json_t *bal = json_object_get(root, "balance");
        if (bal) {
                if (!json_is_boolean(bal)) {
                        rc = fail(&c, "balance", "must be true or false");
                        goto out;
                }
                w->balance = json_is_true(bal);
        }
        json_t *eta = json_object_get(root, "eta");
        if (eta) {
                if (json_is_string(eta) && !strcmp(json_string_value(eta), "auto"))
                        w->eta = -1;
                else if (json_is_number(eta) && json_number_value(eta) >= 0 &&
                         json_number_value(eta) <= 1)
                        w->eta = json_number_value(eta);
                else {
                        rc = fail(&c, "eta", "must be a number in [0, 1] or \"auto\"");
                        goto out;
                }
        }
        loom_err tmp;
        if (loom_plan_workflow_check(w, &tmp)) {
                rc = fail(&c, tmp.field, "%s", tmp.msg);
                goto out;
        }
out:
        json_decref(root);
        return rc;
}
