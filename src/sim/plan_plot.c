/*
 * plan_plot.c - the charts of `loom plan sweep`: HetRL's modelled throughput over verl and
 * StreamRL per instance (log scale), and the load-balancing ablation's gain per instance.
 */
#include <math.h>
#include <stdio.h>

#include "sim_int.h"

typedef struct sweep_arg {
        const loom_plan_sweep_out *o;
        int w, h;
} sweep_arg;

/* one horizontal grid line across the plot at y, labelled `lab` at x = lx */
static void grid_line(cairo_t *cr, double ml, double pw, double y, const char *lab, double lx)
{
        cairo_set_source_rgb(cr, 0.85, 0.85, 0.85);
        cairo_move_to(cr, ml, y);
        cairo_line_to(cr, ml + pw, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, lx, y + 4);
        cairo_show_text(cr, lab);
}

/* horizontal grid lines at 1, 2, 5 x 10^k on a log axis of `top` decades */
static void log_grid(cairo_t *cr, double top, double ml, double mt, double pw, double ph)
{
        for (int k = 0; k <= (int)top; k++)
                for (int m = 1; m <= 5; m += (m == 1 ? 1 : 3)) {
                        double v = m * pow(10, k);
                        if (log10(v) > top + 1e-9)
                                continue;
                        char lab[16];
                        snprintf(lab, sizeof lab, "%gx", v);
                        grid_line(cr, ml, pw, mt + ph - ph * log10(v) / top, lab, ml - 45);
                }
}

/* a label under bar slot x0, rotated to read downwards */
static void bar_label(cairo_t *cr, double x, double y, const char *lab, double size)
{
        cairo_save(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, x, y);
        cairo_rotate(cr, M_PI / 2);
        cairo_set_font_size(cr, size);
        cairo_show_text(cr, lab);
        cairo_restore(cr);
}

static void title(cairo_t *cr, double ml, const char *s)
{
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_set_font_size(cr, 14);
        cairo_move_to(cr, ml, 24);
        cairo_show_text(cr, s);
}

static void draw_sweep(cairo_t *cr, const void *varg)
{
        const sweep_arg *a = varg;
        const loom_plan_sweep_row *rows = a->o->rows;
        int n = a->o->n;
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
        double pw = a->w - ml - mr, ph = a->h - mt - mb, slot = pw / (n ? n : 1);
        cairo_set_line_width(cr, 1);
        cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
        cairo_set_font_size(cr, 11);
        log_grid(cr, top, ml, mt, pw, ph);
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
                snprintf(lab, sizeof lab, "%s %s %s %s", loom_plan_sweep_scenario(rows[i].scen),
                         loom_plan_sweep_model(rows[i].model) + 6, rows[i].grpo ? "GRPO" : "PPO",
                         rows[i].async ? "async" : "sync");
                bar_label(cr, x0 + slot * 0.6, mt + ph + 6, lab, 8);
        }
        title(cr, ml, "HetRL modelled throughput over verl (blue) and StreamRL (orange)");
}

static void draw_balance(cairo_t *cr, const void *varg)
{
        const sweep_arg *a = varg;
        const loom_plan_balance_row *rows = a->o->balance;
        int n = a->o->n_balance;
        const double ml = 60, mr = 20, mt = 40, mb = 100;
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
        double top = 20; /* percent */
        for (int i = 0; i < n; i++)
                if (rows[i].off > 0 && 100 * (rows[i].on / rows[i].off - 1) > top)
                        top = ceil(100 * (rows[i].on / rows[i].off - 1) / 5) * 5;
        double pw = a->w - ml - mr, ph = a->h - mt - mb, slot = pw / (n ? n : 1);
        cairo_set_line_width(cr, 1);
        cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
        cairo_set_font_size(cr, 11);
        for (double v = 0; v <= top + 1e-9; v += 5) {
                char lab[16];
                snprintf(lab, sizeof lab, "%g%%", v);
                grid_line(cr, ml, pw, mt + ph - ph * v / top, lab, ml - 40);
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
                snprintf(lab, sizeof lab, "%s %s %s", loom_plan_sweep_scenario(rows[i].scen),
                         loom_plan_sweep_model(rows[i].model) + 6, rows[i].grpo ? "GRPO" : "PPO");
                bar_label(cr, x0 + slot * 0.4, mt + ph + 6, lab, 9);
        }
        title(cr, ml,
              "Load balancing: modelled sync throughput gain (blue: single region, orange: "
              "cross-region)");
}

int loom_sim_plot_plan_sweep(const char *dir, const loom_plan_sweep_out *o, loom_err *e)
{
        int rc = loom__sim_plot_dir(dir, e);
        if (rc)
                return rc;
        if (o->ablation) {
                int w = 80 + 30 * o->n_balance;
                sweep_arg a = {o, w < 640 ? 640 : w, 420};
                return loom__sim_render(dir, "plan-balance", a.w, a.h, draw_balance, &a, e);
        }
        int w = 80 + 24 * o->n;
        sweep_arg a = {o, w < 640 ? 640 : w, 480};
        return loom__sim_render(dir, "plan-sweep", a.w, a.h, draw_sweep, &a, e);
}
