/*
 * plan_sweep.c - `loom plan sweep`: HetRL's comparison grid (network scenarios x model sizes x
 * PPO/GRPO x sync/async) under the cost model: HetRL (SHA-EA) against verl and StreamRL as
 * modelled throughput ratios, printed as a table and drawn as a bar chart (SVG and PNG).
 */
#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd.h"
#include "loom/spec.h"
#include "plan_cmd.h"

static const char *const scen_files[] = {
    "examples/plan/s1-single-region.json",
    "examples/plan/s2-hybrid.json",
    "examples/plan/s3-multi-country.json",
    "examples/plan/s4-multi-continent.json",
};
static const char *const scen_names[] = {"S1", "S2", "S3", "S4"};
static const char *const model_names[] = {"qwen3-4b", "qwen3-8b", "qwen3-14b"};

typedef struct row {
        int scen, model, grpo, async;
        double hetrl, verl, streamrl; /* tokens/s; 0 when no plan fits */
} row;

static void usage(FILE *f)
{
        fprintf(f, "usage: loom plan sweep [--budget N] [--seed N] [--scenarios S1,S2,...]\n"
                   "                       [--models qwen3-4b,...] [--plot DIR]\n"
                   "                       [--ablation load-balance]\n"
                   "\n"
                   "Plans every combination of the example network scenarios S1-S4\n"
                   "(examples/plan/s*.json), Qwen3 4B/8B/14B, PPO/GRPO and sync/async with\n"
                   "HetRL (SHA-EA), verl and StreamRL (async only), and prints modelled tokens/s\n"
                   "and HetRL's ratio to each baseline. --plot writes plan-sweep.svg/.png there.\n"
                   "\n"
                   "  --budget N   SHA-EA evaluations per instance (default 100000)\n"
                   "  --ablation load-balance\n"
                   "               HetRL section 5.3: sync PPO/GRPO planned without and with load\n"
                   "               balancing, tokens/s and the gain (plot: plan-balance.svg/.png)\n"
                   "\nExit status: 0 done, 1 invalid input, 2 bad usage.\n");
}

static double run_one(const loom_plan_cluster *c, const loom_plan_workflow *w, int solver,
                      int64_t budget, uint64_t seed)
{
        loom_plan_opts o = {.solver = solver, .seed = seed, .budget = budget};
        loom_plan_result *r = malloc(sizeof *r);
        loom_err e = {0};
        double v = 0;
        if (r && loom_plan_search(c, w, &o, r, &e) == 0 && r->found)
                v = r->cost.tokens_per_s;
        free(r);
        return v;
}

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

static void draw(cairo_t *cr, const row *rows, int n, int W, int H)
{
        const double ml = 70, mr = 20, mt = 40, mb = 110;
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
        double ymax = 1;
        for (int i = 0; i < n; i++) {
                if (rows[i].verl > 0 && rows[i].hetrl / rows[i].verl > ymax)
                        ymax = rows[i].hetrl / rows[i].verl;
                if (rows[i].streamrl > 0 && rows[i].hetrl / rows[i].streamrl > ymax)
                        ymax = rows[i].hetrl / rows[i].streamrl;
        }
        /* log scale: ratios run from about 1x to hundreds of x */
        double top = ceil(log10(ymax * 1.05));
        if (top < 1)
                top = 1;
        double pw = W - ml - mr, ph = H - mt - mb, slot = pw / (n ? n : 1);
        cairo_set_line_width(cr, 1);
        cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
        cairo_set_font_size(cr, 11);
        for (int k = 0; k <= (int)top; k++)
                for (int m = 1; m <= 5; m += (m == 1 ? 1 : 3)) {
                        double v = m * pow(10, k);
                        if (log10(v) > top + 1e-9)
                                continue;
                        double y = mt + ph - ph * log10(v) / top;
                        cairo_set_source_rgb(cr, 0.85, 0.85, 0.85);
                        cairo_move_to(cr, ml, y);
                        cairo_line_to(cr, ml + pw, y);
                        cairo_stroke(cr);
                        char lab[16];
                        snprintf(lab, sizeof lab, "%gx", v);
                        cairo_set_source_rgb(cr, 0, 0, 0);
                        cairo_move_to(cr, ml - 45, y + 4);
                        cairo_show_text(cr, lab);
                }
        static const double col[2][3] = {{0.12, 0.47, 0.71}, {1.0, 0.5, 0.05}};
        for (int i = 0; i < n; i++) {
                double x0 = ml + i * slot;
                double v[2] = {rows[i].verl > 0 ? rows[i].hetrl / rows[i].verl : 0,
                               rows[i].streamrl > 0 ? rows[i].hetrl / rows[i].streamrl : 0};
                for (int b = 0; b < 2; b++) {
                        double h = v[b] > 1 ? ph * log10(v[b]) / top : v[b] > 0 ? 2 : 0;
                        cairo_set_source_rgb(cr, col[b][0], col[b][1], col[b][2]);
                        cairo_rectangle(cr, x0 + slot * (0.1 + 0.4 * b), mt + ph - h, slot * 0.38,
                                        h);
                        cairo_fill(cr);
                }
                char lab[48];
                snprintf(lab, sizeof lab, "%s %s %s %s", scen_names[rows[i].scen],
                         model_names[rows[i].model] + 6, rows[i].grpo ? "GRPO" : "PPO",
                         rows[i].async ? "async" : "sync");
                cairo_save(cr);
                cairo_set_source_rgb(cr, 0, 0, 0);
                cairo_move_to(cr, x0 + slot * 0.6, mt + ph + 6);
                cairo_rotate(cr, M_PI / 2);
                cairo_set_font_size(cr, 8);
                cairo_show_text(cr, lab);
                cairo_restore(cr);
        }
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_set_font_size(cr, 14);
        cairo_move_to(cr, ml, 24);
        cairo_show_text(cr, "HetRL modelled throughput over verl (blue) and StreamRL (orange)");
}

/* Draw one figure as DIR/NAME.svg and DIR/NAME.png; draw(cr, ctx, W, H) paints it. */
static int write_plot(const char *dir, const char *name, int W, int H,
                      void (*draw_fn)(cairo_t *, const void *, int, int), const void *ctx)
{
        mkdir(dir, 0755);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.svg", dir, name);
        cairo_surface_t *s = cairo_svg_surface_create(path, W, H);
        cairo_t *cr = cairo_create(s);
        draw_fn(cr, ctx, W, H);
        cairo_destroy(cr);
        cairo_surface_finish(s);
        bool bad = cairo_surface_status(s) != CAIRO_STATUS_SUCCESS;
        cairo_surface_destroy(s);
        snprintf(path, sizeof path, "%s/%s.png", dir, name);
        s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
        cr = cairo_create(s);
        draw_fn(cr, ctx, W, H);
        cairo_destroy(cr);
        bad |= cairo_surface_write_to_png(s, path) != CAIRO_STATUS_SUCCESS;
        cairo_surface_destroy(s);
        if (bad) {
                fprintf(stderr, "loom plan sweep: cannot write the plot into %s\n", dir);
                return 1;
        }
        return 0;
}

typedef struct rows_ref {
        const void *rows;
        int n;
} rows_ref;

static void draw_sweep(cairo_t *cr, const void *ctx, int W, int H)
{
        const rows_ref *r = ctx;
        draw(cr, r->rows, r->n, W, H);
}

static int plot(const char *dir, const row *rows, int n)
{
        int W = 80 + 24 * n;
        rows_ref r = {rows, n};
        return write_plot(dir, "plan-sweep", W < 640 ? 640 : W, 480, draw_sweep, &r);
}

/* ---- --ablation load-balance: HetRL section 5.3 ---- */
typedef struct brow {
        int scen, model, grpo;
        double off, on;      /* tokens/s without / with load balancing */
        double search_short; /* > 0: the balanced search fell short of `on` by this
                                fraction; < 0: the unbalanced one of `off` */
} brow;

static void draw_balance(cairo_t *cr, const brow *rows, int n, int W, int H)
{
        const double ml = 60, mr = 20, mt = 40, mb = 100;
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
        double top = 20; /* percent */
        for (int i = 0; i < n; i++)
                if (rows[i].off > 0 && 100 * (rows[i].on / rows[i].off - 1) > top)
                        top = ceil(100 * (rows[i].on / rows[i].off - 1) / 5) * 5;
        double pw = W - ml - mr, ph = H - mt - mb, slot = pw / (n ? n : 1);
        cairo_set_line_width(cr, 1);
        cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
        cairo_set_font_size(cr, 11);
        for (double v = 0; v <= top + 1e-9; v += 5) {
                double y = mt + ph - ph * v / top;
                cairo_set_source_rgb(cr, 0.85, 0.85, 0.85);
                cairo_move_to(cr, ml, y);
                cairo_line_to(cr, ml + pw, y);
                cairo_stroke(cr);
                char lab[16];
                snprintf(lab, sizeof lab, "%g%%", v);
                cairo_set_source_rgb(cr, 0, 0, 0);
                cairo_move_to(cr, ml - 40, y + 4);
                cairo_show_text(cr, lab);
        }
        for (int i = 0; i < n; i++) {
                double g = rows[i].off > 0 ? 100 * (rows[i].on / rows[i].off - 1) : 0;
                double h = g > 0 ? ph * g / top : 0;
                double x0 = ml + i * slot;
                if (rows[i].scen == 0)
                        cairo_set_source_rgb(cr, 0.12, 0.47, 0.71);
                else
                        cairo_set_source_rgb(cr, 1.0, 0.5, 0.05);
                cairo_rectangle(cr, x0 + slot * 0.15, mt + ph - h, slot * 0.7, h);
                cairo_fill(cr);
                char lab[48];
                snprintf(lab, sizeof lab, "%s %s %s", scen_names[rows[i].scen],
                         model_names[rows[i].model] + 6, rows[i].grpo ? "GRPO" : "PPO");
                cairo_save(cr);
                cairo_set_source_rgb(cr, 0, 0, 0);
                cairo_move_to(cr, x0 + slot * 0.4, mt + ph + 6);
                cairo_rotate(cr, M_PI / 2);
                cairo_set_font_size(cr, 9);
                cairo_show_text(cr, lab);
                cairo_restore(cr);
        }
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_set_font_size(cr, 14);
        cairo_move_to(cr, ml, 24);
        cairo_show_text(cr, "Load balancing: modelled sync throughput gain (blue: single region, "
                            "orange: cross-region)");
}

static void draw_balance_ref(cairo_t *cr, const void *ctx, int W, int H)
{
        const rows_ref *r = ctx;
        draw_balance(cr, r->rows, r->n, W, H);
}

static int plot_balance(const char *dir, const brow *rows, int n)
{
        int W = 80 + 30 * n;
        rows_ref r = {rows, n};
        return write_plot(dir, "plan-balance", W < 640 ? 640 : W, 420, draw_balance_ref, &r);
}

static int load_scen(int si, loom_plan_cluster *c)
{
        char buf[4096], name[208];
        const char *path = loom_cmd_bundled(scen_files[si], buf, sizeof buf);
        char *text;
        size_t len;
        loom_err e = {0};
        if (loom_spec_read_file(path, &text, &len, &e))
                goto bad;
        int rc = loom_plan_cluster_parse(text, len, c, name, sizeof name, &e);
        free(text);
        if (!rc)
                return 0;
bad:
        fprintf(stderr, "loom plan sweep: %s: %s\n", path, e.msg);
        return 1;
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
static void balance_pair(const loom_plan_cluster *c, loom_plan_workflow *w, int64_t budget,
                         uint64_t seed, brow *r)
{
        loom_plan_opts o = {.solver = LOOM_PLAN_SHA_EA, .seed = seed, .budget = budget};
        loom_plan_result *res = malloc(2 * sizeof *res);
        loom_err e = {0};
        r->off = r->on = r->search_short = 0;
        if (!res)
                return;
        bool ok[2];
        for (int b = 0; b < 2; b++) {
                w->balance = b;
                ok[b] = loom_plan_search(c, w, &o, &res[b], &e) == 0 && res[b].found;
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
}

/* Sync PPO and GRPO (section 5.3 measures synchronous training) planned by SHA-EA with the
 * same seed and budget, load balancing off and on. */
static int ablation_balance(const char *scen, const char *models, int64_t budget, uint64_t seed,
                            const char *plot_dir)
{
        brow rows[24];
        int n = 0;
        loom_plan_cluster *c = malloc(sizeof *c);
        if (!c)
                return 1;
        printf("%-3s %-6s %-10s %-5s %12s %12s %8s\n", "net", "region", "model", "algo",
               "off_tok/s", "on_tok/s", "gain_%");
        for (int si = 0; si < 4; si++) {
                if (!in_list(scen, scen_names[si]))
                        continue;
                if (load_scen(si, c)) {
                        free(c);
                        return 1;
                }
                for (int mi = 0; mi < 3; mi++) {
                        if (!in_list(models, model_names[mi]))
                                continue;
                        for (int alg = 0; alg < 2; alg++) {
                                loom_plan_workflow w;
                                loom_plan_workflow_default(&w);
                                loom_plan_model_lookup(model_names[mi], &w.model);
                                w.grpo = alg;
                                brow *r = &rows[n++];
                                r->scen = si;
                                r->model = mi;
                                r->grpo = alg;
                                balance_pair(c, &w, budget, seed, r);
                                printf("%-3s %-6s %-10s %-5s %12.0f %12.0f %8.1f\n", scen_names[si],
                                       si == 0 ? "single" : "cross", model_names[mi],
                                       alg ? "grpo" : "ppo", r->off, r->on,
                                       r->off > 0 ? 100 * (r->on / r->off - 1) : NAN);
                                fflush(stdout);
                        }
                }
        }
        free(c);
        for (int i = 0; i < n; i++)
                if (rows[i].search_short != 0)
                        printf("note: %s %s %s: the %s search alone ended %.1f%% below the other "
                               "search's plan\n",
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
                        printf("%s: gain %.1f%% .. %.1f%%\n",
                               reg ? "cross-region" : "single-region", lo, hi);
        }
        return plot_dir ? plot_balance(plot_dir, rows, n) : 0;
}

int plan_cmd_sweep(int argc, char **argv)
{
        int64_t budget = 100000;
        uint64_t seed = 1;
        const char *scen = NULL, *models = NULL, *plot_dir = NULL, *ablation = NULL;
        for (int i = 1; i < argc; i++) {
                char *end;
                if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                        usage(stdout);
                        return 0;
                } else if (i + 1 >= argc) {
                        fprintf(stderr, "loom plan sweep: unknown option or missing value '%s'\n",
                                argv[i]);
                        usage(stderr);
                        return 2;
                } else if (!strcmp(argv[i], "--budget")) {
                        budget = strtoll(argv[++i], &end, 10);
                        if (*end || budget < 1) {
                                fprintf(stderr, "loom plan sweep: --budget wants a count >= 1\n");
                                return 2;
                        }
                } else if (!strcmp(argv[i], "--seed")) {
                        seed = strtoull(argv[++i], &end, 10);
                        if (*end) {
                                fprintf(stderr, "loom plan sweep: --seed wants an integer\n");
                                return 2;
                        }
                } else if (!strcmp(argv[i], "--scenarios")) {
                        scen = argv[++i];
                } else if (!strcmp(argv[i], "--models")) {
                        models = argv[++i];
                } else if (!strcmp(argv[i], "--plot")) {
                        plot_dir = argv[++i];
                } else if (!strcmp(argv[i], "--ablation")) {
                        ablation = argv[++i];
                        if (strcmp(ablation, "load-balance")) {
                                fprintf(stderr, "loom plan sweep: --ablation is load-balance\n");
                                return 2;
                        }
                } else {
                        fprintf(stderr, "loom plan sweep: unknown option '%s'\n", argv[i]);
                        usage(stderr);
                        return 2;
                }
        }
        if (ablation)
                return ablation_balance(scen, models, budget, seed, plot_dir);
        row rows[48];
        int n = 0;
        loom_plan_cluster *c = malloc(sizeof *c);
        if (!c)
                return 1;
        printf("%-3s %-10s %-5s %-6s %12s %12s %8s %12s %8s\n", "net", "model", "algo", "mode",
               "hetrl_tok/s", "verl_tok/s", "x_verl", "strm_tok/s", "x_strm");
        for (int si = 0; si < 4; si++) {
                if (!in_list(scen, scen_names[si]))
                        continue;
                char buf[4096], name[208];
                const char *path = loom_cmd_bundled(scen_files[si], buf, sizeof buf);
                char *text;
                size_t len;
                loom_err e = {0};
                if (loom_spec_read_file(path, &text, &len, &e) ||
                    (loom_plan_cluster_parse(text, len, c, name, sizeof name, &e)
                         ? (free(text), 1)
                         : (free(text), 0))) {
                        fprintf(stderr, "loom plan sweep: %s: %s\n", path, e.msg);
                        free(c);
                        return 1;
                }
                for (int mi = 0; mi < 3; mi++) {
                        if (!in_list(models, model_names[mi]))
                                continue;
                        for (int alg = 0; alg < 2; alg++)
                                for (int as = 0; as < 2; as++) {
                                        loom_plan_workflow w;
                                        loom_plan_workflow_default(&w);
                                        loom_plan_model_lookup(model_names[mi], &w.model);
                                        w.grpo = alg;
                                        w.async = as;
                                        row *r = &rows[n++];
                                        r->scen = si;
                                        r->model = mi;
                                        r->grpo = alg;
                                        r->async = as;
                                        r->hetrl = run_one(c, &w, LOOM_PLAN_SHA_EA, budget, seed);
                                        r->verl = run_one(c, &w, LOOM_PLAN_VERL, 0, seed);
                                        r->streamrl =
                                            as ? run_one(c, &w, LOOM_PLAN_STREAMRL, 0, seed) : 0;
                                        printf("%-3s %-10s %-5s %-6s %12.0f %12.0f %8.2f %12.0f "
                                               "%8.2f\n",
                                               scen_names[si], model_names[mi],
                                               alg ? "grpo" : "ppo", as ? "async" : "sync",
                                               r->hetrl, r->verl,
                                               r->verl > 0 ? r->hetrl / r->verl : NAN, r->streamrl,
                                               r->streamrl > 0 ? r->hetrl / r->streamrl : NAN);
                                        fflush(stdout);
                                }
                }
        }
        free(c);
        /* HetRL-Async is never below HetRL-Sync in the paper; say where the model agrees. */
        int worse = 0, pairs = 0;
        for (int i = 0; i + 1 < n; i++)
                if (!rows[i].async && rows[i + 1].async) {
                        pairs++;
                        if (rows[i + 1].hetrl < rows[i].hetrl * (1 - 1e-9)) {
                                worse++;
                                printf("note: %s %s %s: async %.0f < sync %.0f tokens/s\n",
                                       scen_names[rows[i].scen], model_names[rows[i].model],
                                       rows[i].grpo ? "grpo" : "ppo", rows[i + 1].hetrl,
                                       rows[i].hetrl);
                        }
                }
        printf("hetrl async >= sync in %d of %d pairs\n", pairs - worse, pairs);
        if (plot_dir)
                return plot(plot_dir, rows, n);
        return 0;
}
