/*
 * sweep.c - HetRL's comparison grid under the cost model (`loom plan sweep`): the network
 * scenarios S1-S4 x Qwen3 4B/8B/14B x PPO/GRPO x sync/async, HetRL (SHA-EA) against verl and
 * StreamRL as modelled throughput, and the load-balancing ablation of section 5.3. Cluster
 * files come through the caller's loader; the table goes to the caller's FILE *.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

static const char *const scen_files[LOOM_PLAN_SWEEP_SCENARIOS] = {
    "examples/plan/s1-single-region.json",
    "examples/plan/s2-hybrid.json",
    "examples/plan/s3-multi-country.json",
    "examples/plan/s4-multi-continent.json",
};
static const char *const scen_names[LOOM_PLAN_SWEEP_SCENARIOS] = {"S1", "S2", "S3", "S4"};
static const char *const model_names[LOOM_PLAN_SWEEP_MODELS] = {"qwen3-4b", "qwen3-8b",
                                                                "qwen3-14b"};

const char *loom_plan_sweep_scenario(int k)
{
        return k >= 0 && k < LOOM_PLAN_SWEEP_SCENARIOS ? scen_names[k] : NULL;
}

const char *loom_plan_sweep_scenario_file(int k)
{
        return k >= 0 && k < LOOM_PLAN_SWEEP_SCENARIOS ? scen_files[k] : NULL;
}

const char *loom_plan_sweep_model(int k)
{
        return k >= 0 && k < LOOM_PLAN_SWEEP_MODELS ? model_names[k] : NULL;
}

/* name is one of the comma-separated entries of list (NULL: every name is). */
static bool in_list(const char *list, const char *name)
{
        if (!list)
                return true;
        size_t n = strlen(name);
        for (const char *p = list; (p = strstr(p, name)); p += n)
                if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
                        return true;
        return false;
}

/* tokens/s of the best plan the solver finds; 0 when none fits (or memory ran out) */
static double run_one(const loom_plan_cluster *c, const loom_plan_workflow *w, int solver,
                      int64_t budget, uint64_t seed)
{
        loom_plan_opts o = {.solver = solver, .seed = seed, .budget = budget};
        loom_plan_result *r = malloc(sizeof *r);
        double v = 0;
        if (r && loom_plan_search(c, w, &o, r, NULL) == 0 && r->found)
                v = r->cost.tokens_per_s;
        free(r);
        return v;
}

static void workflow_of(int model, bool grpo, bool async, loom_plan_workflow *w)
{
        loom_plan_workflow_default(w);
        loom_plan_model_lookup(model_names[model], &w->model);
        w->grpo = grpo;
        w->async = async;
}

/* The grid's rows of one scenario (cluster c). */
static void grid_scenario(const loom_plan_sweep_cfg *cfg, const loom_plan_cluster *c, int si,
                          FILE *f, loom_plan_sweep_out *out)
{
        for (int mi = 0; mi < LOOM_PLAN_SWEEP_MODELS; mi++) {
                if (!in_list(cfg->models, model_names[mi]))
                        continue;
                for (int alg = 0; alg < 2; alg++)
                        for (int as = 0; as < 2; as++) {
                                loom_plan_workflow w;
                                workflow_of(mi, alg, as, &w);
                                loom_plan_sweep_row *r = &out->rows[out->n++];
                                *r = (loom_plan_sweep_row){
                                    .scen = si, .model = mi, .grpo = alg, .async = as};
                                r->hetrl = run_one(c, &w, LOOM_PLAN_SHA_EA, cfg->budget, cfg->seed);
                                r->verl = run_one(c, &w, LOOM_PLAN_VERL, 0, cfg->seed);
                                r->streamrl =
                                    as ? run_one(c, &w, LOOM_PLAN_STREAMRL, 0, cfg->seed) : 0;
                                fprintf(f,
                                        "%-3s %-10s %-5s %-6s %12.0f %12.0f %8.2f %12.0f %8.2f\n",
                                        scen_names[si], model_names[mi], alg ? "grpo" : "ppo",
                                        as ? "async" : "sync", r->hetrl, r->verl,
                                        r->verl > 0 ? r->hetrl / r->verl : NAN, r->streamrl,
                                        r->streamrl > 0 ? r->hetrl / r->streamrl : NAN);
                                fflush(f);
                        }
        }
}

/* HetRL-Async is never below HetRL-Sync in the paper; say where the model agrees. */
static void grid_summary(FILE *f, const loom_plan_sweep_out *out)
{
        const loom_plan_sweep_row *rows = out->rows;
        int worse = 0, pairs = 0;
        for (int i = 0; i + 1 < out->n; i++)
                if (!rows[i].async && rows[i + 1].async) {
                        pairs++;
                        if (rows[i + 1].hetrl < rows[i].hetrl * (1 - 1e-9)) {
                                worse++;
                                fprintf(f, "note: %s %s %s: async %.0f < sync %.0f tokens/s\n",
                                        scen_names[rows[i].scen], model_names[rows[i].model],
                                        rows[i].grpo ? "grpo" : "ppo", rows[i + 1].hetrl,
                                        rows[i].hetrl);
                        }
                }
        fprintf(f, "hetrl async >= sync in %d of %d pairs\n", pairs - worse, pairs);
}

/* tokens/s of plan p with balancing on or off (0 when it does not fit) */
static double tokens_as(const loom_plan_cluster *c, loom_plan_workflow *w, const loom_plan *p,
                        bool on)
{
        loom_plan_cost k;
        w->balance = on;
        return loom_plan_evaluate(c, w, p, &k, NULL) == 0 && k.feasible ? k.tokens_per_s : 0;
}

/* SHA-EA once without and once with balancing (same seed and budget); each side is then the
 * better of the two plans found, priced without (off) and with (on) balancing. Below one round
 * the search's result depends on the cost landscape it walks, so either search may end in a
 * better basin; taking both plans on both sides keeps that luck out of the gain. search_short
 * says how far the worse search was from the better one, for the record. */
static int balance_pair(const loom_plan_cluster *c, loom_plan_workflow *w, int64_t budget,
                        uint64_t seed, loom_plan_balance_row *r)
{
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .seed = seed, .budget = budget};
        loom_plan_result *res = malloc(2 * sizeof *res);
        r->off = r->on = r->search_short = 0;
        if (!res)
                return LOOM_ENOMEM;
        bool ok[2];
        for (int b = 0; b < 2; b++) {
                w->balance = b;
                ok[b] = loom_plan_search(c, w, &o, &res[b], NULL) == 0 && res[b].found;
        }
        double v[2][2] = {{0, 0}, {0, 0}}; /* [plan of search][priced on] */
        for (int b = 0; b < 2; b++)
                for (int on = 0; on < 2 && ok[b]; on++)
                        v[b][on] = tokens_as(c, w, &res[b].plan, on);
        r->off = v[0][0] > v[1][0] ? v[0][0] : v[1][0];
        r->on = v[0][1] > v[1][1] ? v[0][1] : v[1][1];
        if (v[1][1] < r->on * (1 - 1e-9))
                r->search_short = 1 - v[1][1] / r->on;
        else if (v[0][0] < r->off * (1 - 1e-9))
                r->search_short = -(1 - v[0][0] / r->off);
        free(res);
        return 0;
}

/* The ablation's rows of one scenario: sync PPO and GRPO (section 5.3 measures synchronous
 * training). */
static int balance_scenario(const loom_plan_sweep_cfg *cfg, const loom_plan_cluster *c, int si,
                            FILE *f, loom_plan_sweep_out *out)
{
        for (int mi = 0; mi < LOOM_PLAN_SWEEP_MODELS; mi++) {
                if (!in_list(cfg->models, model_names[mi]))
                        continue;
                for (int alg = 0; alg < 2; alg++) {
                        loom_plan_workflow w;
                        workflow_of(mi, alg, false, &w);
                        loom_plan_balance_row *r = &out->balance[out->n_balance++];
                        *r = (loom_plan_balance_row){.scen = si, .model = mi, .grpo = alg};
                        if (balance_pair(c, &w, cfg->budget, cfg->seed, r))
                                return LOOM_ENOMEM;
                        fprintf(f, "%-3s %-6s %-10s %-5s %12.0f %12.0f %8.1f\n", scen_names[si],
                                si == 0 ? "single" : "cross", model_names[mi], alg ? "grpo" : "ppo",
                                r->off, r->on, r->off > 0 ? 100 * (r->on / r->off - 1) : NAN);
                        fflush(f);
                }
        }
        return 0;
}

static void balance_summary(FILE *f, const loom_plan_sweep_out *out)
{
        const loom_plan_balance_row *rows = out->balance;
        int n = out->n_balance;
        for (int i = 0; i < n; i++)
                if (rows[i].search_short != 0)
                        fprintf(f,
                                "note: %s %s %s: the %s search alone ended %.1f%% below the "
                                "other search's plan\n",
                                scen_names[rows[i].scen], model_names[rows[i].model],
                                rows[i].grpo ? "grpo" : "ppo",
                                rows[i].search_short > 0 ? "balanced" : "unbalanced",
                                100 * fabs(rows[i].search_short));
        for (int reg = 0; reg < 2; reg++) {
                double lo = INFINITY, hi = -INFINITY;
                for (int i = 0; i < n; i++)
                        if ((rows[i].scen != 0) == reg && rows[i].off > 0) {
                                double g = 100 * (rows[i].on / rows[i].off - 1);
                                lo = g < lo ? g : lo;
                                hi = g > hi ? g : hi;
                        }
                if (hi >= lo)
                        fprintf(f, "%s: gain %.1f%% .. %.1f%%\n",
                                reg ? "cross-region" : "single-region", lo, hi);
        }
}

int loom_plan_sweep(const loom_plan_sweep_cfg *cfg, FILE *f, loom_plan_sweep_out *out, loom_err *e)
{
        out->n = out->n_balance = 0;
        out->ablation = cfg->balance_ablation;
        loom_plan_cluster *c = malloc(sizeof *c);
        if (!c)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (cfg->balance_ablation)
                fprintf(f, "%-3s %-6s %-10s %-5s %12s %12s %8s\n", "net", "region", "model", "algo",
                        "off_tok/s", "on_tok/s", "gain_%");
        else
                fprintf(f, "%-3s %-10s %-5s %-6s %12s %12s %8s %12s %8s\n", "net", "model", "algo",
                        "mode", "hetrl_tok/s", "verl_tok/s", "x_verl", "strm_tok/s", "x_strm");
        int rc = 0;
        for (int si = 0; si < LOOM_PLAN_SWEEP_SCENARIOS && !rc; si++) {
                if (!in_list(cfg->scenarios, scen_names[si]))
                        continue;
                if ((rc = cfg->load(cfg->load_ctx, scen_files[si], c, e)))
                        break;
                if (cfg->balance_ablation)
                        rc = balance_scenario(cfg, c, si, f, out);
                else
                        grid_scenario(cfg, c, si, f, out);
        }
        free(c);
        if (rc == LOOM_ENOMEM)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (rc)
                return rc;
        if (cfg->balance_ablation)
                balance_summary(f, out);
        else
                grid_summary(f, out);
        return 0;
}
