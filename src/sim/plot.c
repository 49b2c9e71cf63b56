/*
 * plot.c - charts with cairo, each written as SVG and PNG: cost over time, GPUs per pool over
 * time, slowdown CDF, Gantt charts of micro-benchmarks and the sweep's bar charts.
 *
 * Every chart is a draw function over a cairo context of a fixed size; it runs once for the SVG
 * surface and once for the PNG surface, so both show the same picture.
 */
#include <cairo-svg.h>
#include <cairo.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sim_int.h"

#define W 960
#define H 540
#define ML 80.0
#define MR 170.0
#define MT 50.0
#define MB 60.0

static const double palette[][3] = {
    {0.12, 0.47, 0.71}, {0.68, 0.78, 0.91}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17},
    {0.84, 0.15, 0.16}, {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.50, 0.50, 0.50},
    {0.89, 0.47, 0.76}, {0.74, 0.74, 0.13}, {0.09, 0.75, 0.81}, {0.60, 0.87, 0.54},
};
#define NPAL (int)(sizeof palette / sizeof palette[0])

static void color(cairo_t *cr, int i, double alpha)
{
        const double *c = palette[((i % NPAL) + NPAL) % NPAL];
        cairo_set_source_rgba(cr, c[0], c[1], c[2], alpha);
}

typedef struct frame {
        double x0, x1, y0, y1; /* data ranges */
} frame;

static double px(const frame *f, double x)
{
        return ML + (x - f->x0) / (f->x1 - f->x0) * (W - ML - MR);
}

static double py(const frame *f, double y)
{
        return H - MB - (y - f->y0) / (f->y1 - f->y0) * (H - MT - MB);
}

static double nice_step(double range)
{
        double raw = range / 6, mag = pow(10, floor(log10(raw))), r = raw / mag;
        return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

static void text(cairo_t *cr, double x, double y, const char *s, double align, double size)
{
        cairo_set_font_size(cr, size);
        cairo_text_extents_t ext;
        cairo_text_extents(cr, s, &ext);
        cairo_move_to(cr, x - align * ext.width, y);
        cairo_show_text(cr, s);
}

static void axes(cairo_t *cr, const frame *f, const char *title, const char *xl, const char *yl,
                 bool xticks, bool yticks)
{
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
        cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
        cairo_set_line_width(cr, 1);
        char buf[64];
        double ys = nice_step(f->y1 - f->y0);
        for (double y = ceil(f->y0 / ys) * ys; yticks && y <= f->y1 + 1e-9; y += ys) {
                cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
                cairo_move_to(cr, ML, py(f, y));
                cairo_line_to(cr, W - MR, py(f, y));
                cairo_stroke(cr);
                cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
                snprintf(buf, sizeof buf, "%g", y);
                text(cr, ML - 6, py(f, y) + 4, buf, 1, 11);
        }
        if (xticks) {
                double xs = nice_step(f->x1 - f->x0);
                for (double x = ceil(f->x0 / xs) * xs; x <= f->x1 + 1e-9; x += xs) {
                        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
                        snprintf(buf, sizeof buf, "%g", x);
                        text(cr, px(f, x), H - MB + 16, buf, 0.5, 11);
                }
        }
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_rectangle(cr, ML, MT, W - ML - MR, H - MT - MB);
        cairo_stroke(cr);
        cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
        text(cr, W / 2.0, 28, title, 0.5, 15);
        cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
        text(cr, ML + (W - ML - MR) / 2, H - 18, xl, 0.5, 12);
        cairo_save(cr);
        cairo_translate(cr, 22, MT + (H - MT - MB) / 2);
        cairo_rotate(cr, -M_PI / 2);
        text(cr, 0, 0, yl, 0.5, 12);
        cairo_restore(cr);
}

static void legend(cairo_t *cr, int i, const char *label, bool dashed)
{
        double x = W - MR + 14, y = MT + 14 + 20 * i;
        color(cr, i, 1);
        cairo_set_line_width(cr, 2.5);
        if (dashed) {
                double d[] = {6, 3};
                cairo_set_dash(cr, d, 2, 0);
        }
        cairo_move_to(cr, x, y - 4);
        cairo_line_to(cr, x + 22, y - 4);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        cairo_set_source_rgb(cr, 0, 0, 0);
        text(cr, x + 28, y, label, 0, 12);
}

int loom__sim_plot_dir(const char *dir, loom_err *e)
{
        if (mkdir(dir, 0777) && errno != EEXIST)
                return loom_err_set(e, LOOM_EIO, "plot", "%s: %s", dir, strerror(errno));
        struct stat st;
        if (stat(dir, &st) || !S_ISDIR(st.st_mode))
                return loom_err_set(e, LOOM_EIO, "plot", "%s: not a directory", dir);
        return 0;
}

int loom__sim_render(const char *dir, const char *name, int w, int h, sim_draw_fn fn,
                     const void *arg, loom_err *e)
{
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.svg", dir, name);
        cairo_surface_t *s = cairo_svg_surface_create(path, w, h);
        if (cairo_surface_status(s))
                return loom_err_set(e, LOOM_EIO, "plot", "%s: cannot create", path);
        cairo_t *cr = cairo_create(s);
        fn(cr, arg);
        cairo_destroy(cr);
        cairo_surface_finish(s);
        int bad = cairo_surface_status(s) != CAIRO_STATUS_SUCCESS;
        cairo_surface_destroy(s);
        if (bad)
                return loom_err_set(e, LOOM_EIO, "plot", "%s: write failed", path);
        s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
        cr = cairo_create(s);
        fn(cr, arg);
        cairo_destroy(cr);
        snprintf(path, sizeof path, "%s/%s.png", dir, name);
        bad = cairo_surface_write_to_png(s, path) != CAIRO_STATUS_SUCCESS;
        cairo_surface_destroy(s);
        if (bad)
                return loom_err_set(e, LOOM_EIO, "plot", "%s: write failed", path);
        return 0;
}

/* ---- time series -------------------------------------------------------------------------- */

typedef struct series_arg {
        const loom_sim_result *r;
        int n;
        int what; /* 0 cost, 1 GPUs */
} series_arg;

static void draw_series(cairo_t *cr, const void *varg)
{
        const series_arg *a = varg;
        frame f = {0, 1e-9, 0, 1e-9};
        for (int i = 0; i < a->n; i++)
                for (int k = 0; k < a->r[i].n_series; k++) {
                        const loom_sim_point *p = &a->r[i].series[k];
                        f.x1 = fmax(f.x1, p->t_h);
                        f.y1 =
                            fmax(f.y1, a->what ? fmax(p->gpus[0], p->gpus[1]) : p->cost_per_hour);
                }
        f.y1 *= 1.05;
        axes(cr, &f,
             a->what ? "GPUs provisioned per pool (solid: rollout, dashed: train)"
                     : "Provisioning cost over time",
             "time (h)", a->what ? "GPUs" : "$/h", true, true);
        cairo_rectangle(cr, ML, MT, W - ML - MR, H - MT - MB);
        cairo_clip(cr);
        for (int i = 0; i < a->n; i++) {
                const loom_sim_result *r = &a->r[i];
                if (!r->ran)
                        continue;
                for (int pool = 0; pool < (a->what ? 2 : 1); pool++) {
                        if (!r->n_series)
                                continue;
                        color(cr, i, 0.9);
                        cairo_set_line_width(cr, 1.5);
                        if (pool) {
                                double d[] = {6, 3};
                                cairo_set_dash(cr, d, 2, 0);
                        }
                        double prev = 0;
                        cairo_move_to(cr, px(&f, 0), py(&f, 0));
                        for (int k = 0; k < r->n_series; k++) {
                                const loom_sim_point *p = &r->series[k];
                                double v = a->what ? p->gpus[pool] : p->cost_per_hour;
                                cairo_line_to(cr, px(&f, p->t_h), py(&f, prev));
                                cairo_line_to(cr, px(&f, p->t_h), py(&f, v));
                                prev = v;
                        }
                        cairo_stroke(cr);
                        cairo_set_dash(cr, NULL, 0, 0);
                }
        }
        cairo_reset_clip(cr);
        for (int i = 0; i < a->n; i++)
                legend(cr, i, loom_sim_policy_name(a->r[i].policy), false);
}

static void draw_cdf(cairo_t *cr, const void *varg)
{
        const series_arg *a = varg;
        frame f = {1, 1.0001, 0, 1};
        for (int i = 0; i < a->n; i++)
                for (int k = 0; a->r[i].slowdown && k < a->r[i].jobs; k++)
                        if (isfinite(a->r[i].slowdown[k]))
                                f.x1 = fmax(f.x1, a->r[i].slowdown[k]);
        f.x1 = fmin(f.x1 * 1.02, 4.0);
        axes(cr, &f, "Slowdown CDF (job time / solo time)", "slowdown", "fraction of jobs", true,
             true);
        cairo_rectangle(cr, ML, MT, W - ML - MR, H - MT - MB);
        cairo_clip(cr);
        for (int i = 0; i < a->n; i++) {
                const loom_sim_result *r = &a->r[i];
                if (!r->slowdown || !r->jobs)
                        continue;
                double *v = malloc(sizeof(double) * (size_t)r->jobs);
                if (!v)
                        continue;
                int m = 0;
                for (int k = 0; k < r->jobs; k++)
                        if (isfinite(r->slowdown[k]))
                                v[m++] = r->slowdown[k];
                qsort(v, (size_t)m, sizeof *v, loom_cmp_double);
                color(cr, i, 0.9);
                cairo_set_line_width(cr, 2);
                cairo_move_to(cr, px(&f, f.x0), py(&f, 0));
                for (int k = 0; k < m; k++) {
                        cairo_line_to(cr, px(&f, v[k]), py(&f, (double)k / r->jobs));
                        cairo_line_to(cr, px(&f, v[k]), py(&f, (double)(k + 1) / r->jobs));
                }
                cairo_line_to(cr, px(&f, f.x1), py(&f, (double)m / r->jobs));
                cairo_stroke(cr);
                free(v);
        }
        cairo_reset_clip(cr);
        int li = 0;
        for (int i = 0; i < a->n; i++)
                if (a->r[i].slowdown)
                        legend(cr, i, loom_sim_policy_name(a->r[i].policy), false), li++;
}

int loom_sim_plot(const char *dir, const loom_sim_result *r, int n, loom_err *e)
{
        int rc = loom__sim_plot_dir(dir, e);
        series_arg a = {r, n, 0};
        if (rc || (rc = loom__sim_render(dir, "cost", W, H, draw_series, &a, e)))
                return rc;
        a.what = 1;
        if ((rc = loom__sim_render(dir, "gpus", W, H, draw_series, &a, e)))
                return rc;
        return loom__sim_render(dir, "slowdown", W, H, draw_cdf, &a, e);
}

/* ---- Gantt -------------------------------------------------------------------------------- */

typedef struct gantt_arg {
        const loom_sim_result *r;
        const loom_sim_workload *w;
        const char *title;
        int rows[2]; /* rows per pool */
        int *row_of; /* [pool][node] -> row */
        int maxnode;
        double t1;
} gantt_arg;

static void draw_gantt(cairo_t *cr, const void *varg)
{
        const gantt_arg *a = varg;
        int nrows = a->rows[0] + a->rows[1];
        frame f = {0, a->t1, 0, nrows};
        axes(cr, &f, a->title, "time (s)", "", true, false);
        double rh = (H - MT - MB) / (double)nrows;
        char buf[64];
        for (int p = 0; p < 2; p++)
                for (int node = 0; node <= a->maxnode; node++) {
                        int row = a->row_of[p * (a->maxnode + 1) + node];
                        if (row < 0)
                                continue;
                        snprintf(buf, sizeof buf, "%s-%d", p ? "train" : "roll", node);
                        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
                        text(cr, ML - 6, MT + rh * (row + 0.5) + 4, buf, 1, 11);
                }
        for (int i = 0; i < a->r->n_gantt; i++) {
                const loom_sim_interval *iv = &a->r->gantt[i];
                if (iv->phase == LOOM_PHASE_SYNC || iv->row < 0 || iv->row > a->maxnode)
                        continue;
                int row = a->row_of[iv->pool * (a->maxnode + 1) + iv->row];
                if (row < 0)
                        continue;
                double x0 = px(&f, loom_us_to_s(iv->start)), x1 = px(&f, loom_us_to_s(iv->end));
                double y = MT + rh * row + rh * 0.15, h = rh * 0.7;
                if (iv->tail) {
                        y += h * 0.6;
                        h *= 0.4;
                }
                color(cr, iv->job, iv->tail ? 0.5 : 0.85);
                cairo_rectangle(cr, x0, y, fmax(x1 - x0, 0.5), h);
                cairo_fill(cr);
                if (x1 - x0 > 26 && !iv->tail) {
                        cairo_set_source_rgb(cr, 0, 0, 0);
                        text(cr, (x0 + x1) / 2, y + h / 2 + 4, a->w->jobs[iv->job].spec.id, 0.5,
                             10);
                }
        }
        for (int j = 0; j < a->w->n && j < 12; j++) {
                double x = W - MR + 14, y = MT + 14 + 20 * j;
                color(cr, j, 0.85);
                cairo_rectangle(cr, x, y - 10, 22, 10);
                cairo_fill(cr);
                cairo_set_source_rgb(cr, 0, 0, 0);
                text(cr, x + 28, y, a->w->jobs[j].spec.id, 0, 12);
        }
        cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
        text(cr, W - MR + 14, MT + 14 + 20 * 13, "thin bar: migrated tail", 0, 10);
}

int loom_sim_plot_gantt(const char *dir, const char *name, const char *title,
                        const loom_sim_result *r, const loom_sim_workload *w, loom_err *e)
{
        int rc = loom__sim_plot_dir(dir, e);
        if (rc)
                return rc;
        gantt_arg a = {.r = r, .w = w, .title = title};
        for (int i = 0; i < r->n_gantt; i++) {
                if (r->gantt[i].row > a.maxnode)
                        a.maxnode = r->gantt[i].row;
                double t = loom_us_to_s(r->gantt[i].end);
                if (t > a.t1)
                        a.t1 = t;
        }
        if (a.t1 <= 0)
                a.t1 = 1;
        a.row_of = malloc(sizeof(int) * 2 * (size_t)(a.maxnode + 1));
        if (!a.row_of)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        for (int i = 0; i < 2 * (a.maxnode + 1); i++)
                a.row_of[i] = -1;
        for (int i = 0; i < r->n_gantt; i++) {
                const loom_sim_interval *iv = &r->gantt[i];
                if (iv->phase != LOOM_PHASE_SYNC && iv->row >= 0)
                        a.row_of[iv->pool * (a.maxnode + 1) + iv->row] = 0;
        }
        int row = 0;
        for (int p = 0; p < 2; p++)
                for (int node = 0; node <= a.maxnode; node++)
                        if (a.row_of[p * (a.maxnode + 1) + node] == 0) {
                                a.row_of[p * (a.maxnode + 1) + node] = row++;
                                a.rows[p]++;
                        }
        if (row == 0)
                a.rows[0] = 1;
        rc = loom__sim_render(dir, name, W, H, draw_gantt, &a, e);
        free(a.row_of);
        return rc;
}

/* ---- bars --------------------------------------------------------------------------------- */

static void draw_bars(cairo_t *cr, const void *varg)
{
        const loom_sim_bars *b = varg;
        frame f = {0, b->n_groups, 0, 1e-9};
        for (int i = 0; i < b->n_groups * b->n_series; i++)
                if (isfinite(b->values[i]))
                        f.y1 = fmax(f.y1, b->values[i]);
        f.y1 *= 1.1;
        axes(cr, &f, b->title, "", b->ylabel, false, true);
        double gw = (W - ML - MR) / (double)b->n_groups, bw = gw * 0.8 / b->n_series;
        for (int g = 0; g < b->n_groups; g++) {
                for (int s = 0; s < b->n_series; s++) {
                        double v = b->values[g * b->n_series + s];
                        if (!isfinite(v))
                                continue;
                        double x = ML + gw * g + gw * 0.1 + bw * s;
                        color(cr, s, 0.9);
                        cairo_rectangle(cr, x, py(&f, v), bw * 0.92, py(&f, 0) - py(&f, v));
                        cairo_fill(cr);
                }
                cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
                text(cr, ML + gw * (g + 0.5), H - MB + 16, b->group_labels[g], 0.5, 11);
        }
        for (int s = 0; s < b->n_series; s++) {
                bool any = false; /* a series with no values (the bound's SLO) has no legend */
                for (int g = 0; g < b->n_groups; g++)
                        any = any || isfinite(b->values[g * b->n_series + s]);
                if (any)
                        legend(cr, s, b->series_labels[s], false);
        }
}

int loom_sim_plot_bars(const char *dir, const char *name, const loom_sim_bars *b, loom_err *e)
{
        int rc = loom__sim_plot_dir(dir, e);
        return rc ? rc : loom__sim_render(dir, name, W, H, draw_bars, b, e);
}
