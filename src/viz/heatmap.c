/* heatmap.c - PNG heatmaps (libpng, written atomically) and terminal heatmaps (ANSI 24-bit colour or a character
 * ramp) of 2-D attribution maps, all on one diverging blue-white-red scale. */
#define _POSIX_C_SOURCE 200809L
#include "viz/heatmap.h"

#include "io/fileutil.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char POS_END[3] = {178, 24, 43};  /* t = +1 */
static const unsigned char NEG_END[3] = {33, 102, 172}; /* t = -1 */

/* ==== colour scale ========================================================================================= */

static double max_abs(const double *v, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]) && fabs(v[i]) > m) m = fabs(v[i]);
    return m;
}

void cx_heatmap_colour(double v, double m, unsigned char rgb[3]) {
    if (!isfinite(v)) {
        rgb[0] = rgb[1] = rgb[2] = 128;
        return;
    }
    double t = m > 0.0 ? v / m : 0.0;
    if (t > 1.0) t = 1.0;
    if (t < -1.0) t = -1.0;
    const unsigned char *end = t >= 0.0 ? POS_END : NEG_END;
    double a = fabs(t);
    for (int c = 0; c < 3; c++) rgb[c] = (unsigned char)lround(255.0 + a * ((double)end[c] - 255.0));
}

int cx_heatmap_legend_height(int cell) {
    int bar = cell / 2;
    if (bar < 8) bar = 8;
    if (bar > 24) bar = 24;
    return 2 + bar;
}

/* ==== PNG ================================================================================================== */

typedef struct png_job {
    const unsigned char *rgb; /* cx_png_rgb: the image's W x H RGB bytes (the fields below unused) */
    int rgb_w, rgb_h;
    const double *img, *vals;
    int h, w, cell;
    double alpha;
    double m;      /* max |vals| */
    double lo, hi; /* finite range of img */
    char err[256]; /* libpng's message on failure */
} png_job;

static void on_png_error(png_structp png, png_const_charp msg) {
    png_job *j = png_get_error_ptr(png);
    snprintf(j->err, sizeof j->err, "%s", msg ? msg : "unknown libpng error");
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg) {
    (void)png;
    cx_log(CATTR_LOG_DEBUG, "libpng warning: %s", msg ? msg : "");
}

/* Fills one image row y (0 at the top) with RGB bytes. */
static void fill_row(const png_job *j, int y, unsigned char *row) {
    if (j->rgb) {
        memcpy(row, j->rgb + 3 * (size_t)y * (size_t)j->rgb_w, 3 * (size_t)j->rgb_w);
        return;
    }
    int W = j->w * j->cell, map_h = j->h * j->cell;
    if (y < map_h) {
        int r = y / j->cell;
        for (int c = 0; c < j->w; c++) {
            size_t i = (size_t)r * (size_t)j->w + (size_t)c;
            unsigned char rgb[3];
            cx_heatmap_colour(j->vals[i], j->m, rgb);
            if (j->img) {
                double g = 0.5;
                if (isfinite(j->img[i]) && j->hi > j->lo) g = (j->img[i] - j->lo) / (j->hi - j->lo);
                for (int k = 0; k < 3; k++)
                    rgb[k] = (unsigned char)lround((1.0 - j->alpha) * 255.0 * g + j->alpha * rgb[k]);
            }
            for (int x = c * j->cell; x < (c + 1) * j->cell; x++) memcpy(row + 3 * (size_t)x, rgb, 3);
        }
        return;
    }
    int ly = y - map_h; /* legend row */
    if (ly < 2) {
        memset(row, 255, 3 * (size_t)W);
        return;
    }
    int bar = cx_heatmap_legend_height(j->cell) - 2;
    int tick = ly - 2 >= bar / 2 && W >= 3; /* lower half of the bar carries the zero tick */
    for (int x = 0; x < W; x++) {
        double t = -1.0 + 2.0 * (x + 0.5) / W;
        unsigned char rgb[3];
        cx_heatmap_colour(t, 1.0, rgb);
        if (tick && x == W / 2) rgb[0] = rgb[1] = rgb[2] = 0;
        memcpy(row + 3 * (size_t)x, rgb, 3);
    }
}

/* Everything libpng does after setjmp lives here, so that no local of the caller changes between setjmp and a
 * longjmp. */
static void emit_png(png_structp png, png_infop info, FILE *f, const png_job *j, unsigned char *row) {
    int W = j->rgb ? j->rgb_w : j->w * j->cell, H = j->rgb ? j->rgb_h : j->h * j->cell + cx_heatmap_legend_height(j->cell);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < H; y++) {
        fill_row(j, y, row);
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
}

static cattr_status write_png(FILE *f, void *ctx) {
    png_job *j = ctx;
    unsigned char *row = malloc(3 * (j->rgb ? (size_t)j->rgb_w : (size_t)j->w * (size_t)j->cell));
    if (!row) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a PNG row");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, j, on_png_error, on_png_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        free(row);
        return cx_fail(CATTR_ERR_NO_MEMORY, "cannot create the libpng writer");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(row);
        return cx_fail(CATTR_ERR_IO, "libpng: %s", j->err);
    }
    emit_png(png, info, f, j, row);
    png_destroy_write_struct(&png, &info);
    free(row);
    return CATTR_OK;
}

static cattr_status check_dims(const char *path, int h, int w, int cell) {
    if (h < 1 || w < 1 || cell < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': heatmap needs h, w and cell >= 1 (got %d, %d, %d)",
                       path, h, w, cell);
    if ((long long)w * cell > CX_HEATMAP_MAX_SIDE ||
        (long long)h * cell + cx_heatmap_legend_height(cell) > CX_HEATMAP_MAX_SIDE)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': a %dx%d map with %d-pixel cells exceeds %d pixels per side",
                       path, h, w, cell, CX_HEATMAP_MAX_SIDE);
    return CATTR_OK;
}

cattr_status cx_png_heatmap_overlay(const char *path, const double *img, const double *vals, int h, int w, int cell,
                                    double alpha) {
    if (!path || !vals) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "heatmap: NULL path or values");
    CX_CHECK(check_dims(path, h, w, cell));
    if (img && !(alpha >= 0.0 && alpha <= 1.0))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': overlay opacity %g is outside [0, 1]", path, alpha);
    size_t n = (size_t)h * (size_t)w;
    png_job j = {.img = img, .vals = vals, .h = h, .w = w, .cell = cell, .alpha = alpha, .m = max_abs(vals, n)};
    if (img) {
        int any = 0;
        for (size_t i = 0; i < n; i++) {
            if (!isfinite(img[i])) continue;
            if (!any || img[i] < j.lo) j.lo = img[i];
            if (!any || img[i] > j.hi) j.hi = img[i];
            any = 1;
        }
    }
    return cx_write_file_atomic(path, write_png, &j);
}

cattr_status cx_png_heatmap(const char *path, const double *vals, int h, int w, int cell) {
    return cx_png_heatmap_overlay(path, NULL, vals, h, w, cell, 1.0);
}

cattr_status cx_png_rgb(const char *path, const unsigned char *rgb, int w, int h) {
    if (!path || !rgb) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "png: NULL path or pixels");
    if (w < 1 || h < 1 || w > CX_HEATMAP_MAX_SIDE || h > CX_HEATMAP_MAX_SIDE)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': a %dx%d image (each side from 1 to %d)", path, w, h,
                       CX_HEATMAP_MAX_SIDE);
    png_job j = {.rgb = rgb, .rgb_w = w, .rgb_h = h};
    return cx_write_file_atomic(path, write_png, &j);
}

/* ==== terminal ============================================================================================= */

typedef struct appender {
    char *buf;
    size_t size, len; /* len counts every byte asked for, written or not */
} appender;

static void app_str(appender *a, const char *s) {
    for (; *s; s++, a->len++)
        if (a->len + 1 < a->size) a->buf[a->len] = *s;
}

size_t cx_term_heatmap(char *buf, size_t size, const double *vals, int h, int w, int ansi) {
    appender a = {buf, buf ? size : 0, 0};
    if (vals && h > 0 && w > 0) {
        static const char pos_ramp[] = " .:oO@", neg_ramp[] = " ,;xX#";
        double m = max_abs(vals, (size_t)h * (size_t)w);
        for (int r = 0; r < h; r++) {
            for (int c = 0; c < w; c++) {
                double v = vals[(size_t)r * (size_t)w + (size_t)c];
                char cellbuf[40];
                if (ansi) {
                    unsigned char rgb[3];
                    cx_heatmap_colour(v, m, rgb);
                    snprintf(cellbuf, sizeof cellbuf, "\x1b[48;2;%d;%d;%dm  ", rgb[0], rgb[1], rgb[2]);
                } else if (!isfinite(v)) {
                    strcpy(cellbuf, "??");
                } else {
                    double t = m > 0.0 ? fabs(v) / m : 0.0;
                    int level = (int)lround(5.0 * (t > 1.0 ? 1.0 : t));
                    char ch = v >= 0.0 ? pos_ramp[level] : neg_ramp[level];
                    cellbuf[0] = cellbuf[1] = ch;
                    cellbuf[2] = '\0';
                }
                app_str(&a, cellbuf);
            }
            app_str(&a, ansi ? "\x1b[0m\n" : "\n");
        }
    }
    if (a.size > 0) a.buf[a.len < a.size ? a.len : a.size - 1] = '\0';
    return a.len;
}
