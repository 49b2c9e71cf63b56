/*
 * plex_plot.c - Figure 8's chart: the CDF of normalised queuing delay (wait / run time) per
 * policy, on a log x axis, written as SVG with cairo.
 */
#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/plexsim.h"

/* x in [1e-3, 1e2] on a log axis; delays below 1e-3 (no wait) sit on the left edge. */
static double xpos(double v, double x0, double w)
{
        double l = log10(v < 1e-3 ? 1e-3 : v > 1e2 ? 1e2 : v);
        return x0 + (l + 3) / 5 * w;
}

int loom_plexsim_plot_cdf(const char *path, const loom_plexsim_cluster_res *r, int n, loom_err *e)
{
        static const double col[][3] = {
            {0.80, 0.20, 0.20}, {0.20, 0.45, 0.80}, {0.20, 0.65, 0.30}, {0.55, 0.30, 0.70}};
        const double W = 640, H = 420, x0 = 60, y0 = 30, w = 540, h = 330;
        cairo_surface_t *sf = cairo_svg_surface_create(path, W, H);
        if (cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS) {
                cairo_surface_destroy(sf);
                return loom_err_set(e, LOOM_EIO, "plot", "cannot write %s", path);
        }
        cairo_t *cr = cairo_create(sf);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_set_line_width(cr, 1);
        cairo_rectangle(cr, x0, y0, w, h);
        cairo_stroke(cr);
        cairo_set_font_size(cr, 11);
        for (int d = -3; d <= 2; d++) {
                char s[16];
                snprintf(s, sizeof s, "1e%d", d);
                cairo_move_to(cr, xpos(pow(10, d), x0, w) - 10, y0 + h + 15);
                cairo_show_text(cr, s);
        }
        for (int q = 0; q <= 4; q++) {
                char s[16];
                snprintf(s, sizeof s, "%.2f", q / 4.0);
                cairo_move_to(cr, x0 - 35, y0 + h - q / 4.0 * h + 4);
                cairo_show_text(cr, s);
        }
        cairo_move_to(cr, x0 + w / 2 - 120, y0 + h + 32);
        cairo_show_text(cr, "normalised queuing delay (wait / run time)");
        cairo_move_to(cr, x0, y0 - 10);
        cairo_show_text(cr, "CDF of job queuing delay per policy");
        for (int k = 0; k < n; k++) {
                double *s = malloc(sizeof *s * (size_t)(r[k].n ? r[k].n : 1));
                if (!s)
                        break;
                memcpy(s, r[k].queue_delay, sizeof *s * (size_t)r[k].n);
                qsort(s, (size_t)r[k].n, sizeof *s, loom_cmp_double);
                const double *c = col[k % 4];
                cairo_set_source_rgb(cr, c[0], c[1], c[2]);
                cairo_set_line_width(cr, 2);
                cairo_move_to(cr, x0, y0 + h);
                for (int i = 0; i < r[k].n; i++) {
                        double x = xpos(s[i], x0, w);
                        cairo_line_to(cr, x, y0 + h - (double)i / r[k].n * h);
                        cairo_line_to(cr, x, y0 + h - (double)(i + 1) / r[k].n * h);
                }
                cairo_line_to(cr, x0 + w, y0);
                cairo_stroke(cr);
                char lab[64];
                snprintf(lab, sizeof lab, "%s (makespan %.0f h)",
                         loom_plexsim_policy_name(r[k].policy), r[k].makespan_h);
                cairo_move_to(cr, x0 + w - 230, y0 + h - 80 + 16 * k);
                cairo_show_text(cr, lab);
                free(s);
        }
        cairo_destroy(cr);
        cairo_surface_finish(sf);
        int bad = cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS;
        cairo_surface_destroy(sf);
        return bad ? loom_err_set(e, LOOM_EIO, "plot", "cannot write %s", path) : 0;
}
