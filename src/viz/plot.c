/* plot.c - line plots as PNG (cx_png_curves): the deletion and insertion curves of `cattr explain --metrics`. No text
 * is drawn (no font): the frame spans x from 0 to 1 and the grid marks its quarters; the caller prints the range. */
#include "viz/heatmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MARGIN 12

static void dot(unsigned char *px, int w, int h, int x, int y, int r, const unsigned char c[3]) {
    for (int dy = -r; dy <= r; dy++)
        for (int dx = -r; dx <= r; dx++) {
            int xx = x + dx, yy = y + dy;
            if (xx >= 0 && yy >= 0 && xx < w && yy < h) memcpy(px + 3 * ((size_t)yy * (size_t)w + (size_t)xx), c, 3);
        }
}

/* A segment by Bresenham's walk, each pixel a (2r + 1)-square dot. */
static void segment(unsigned char *px, int w, int h, int x0, int y0, int x1, int y1, int r, const unsigned char c[3]) {
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1, dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1, err = dx + dy;
    for (;;) {
        dot(px, w, h, x0, y0, r, c);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * err;
        if (e2 >= dy) err += dy, x0 += sx;
        if (e2 <= dx) err += dx, y0 += sy;
    }
}

cattr_status cx_png_curves(const char *path, const double *ys, int n_curves, int n_points, const unsigned char *rgb,
                           const int *thick, int w, int h) {
    if (!path || !ys || !rgb || !thick) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "plot: NULL argument");
    if (n_curves < 1 || n_points < 2)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': a plot needs a curve of 2 points or more (got %d of %d)",
                       path, n_curves, n_points);
    if (w < 64 || h < 64 || w > CX_HEATMAP_MAX_SIDE || h > CX_HEATMAP_MAX_SIDE)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': a %dx%d plot (each side from 64 to %d)", path, w, h,
                       CX_HEATMAP_MAX_SIDE);
    double lo = 0, hi = -INFINITY;
    for (size_t k = 0; k < (size_t)n_curves * (size_t)n_points; k++)
        if (isfinite(ys[k])) {
            if (ys[k] < lo) lo = ys[k];
            if (ys[k] > hi) hi = ys[k];
        }
    if (!(hi > lo)) hi = lo + 1;
    unsigned char *px = malloc(3 * (size_t)w * (size_t)h);
    if (!px) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    memset(px, 255, 3 * (size_t)w * (size_t)h);
    int x0 = MARGIN, x1 = w - 1 - MARGIN, y0 = MARGIN, y1 = h - 1 - MARGIN; /* the frame */
    const unsigned char grid[3] = {225, 225, 225}, frame[3] = {0, 0, 0};
    for (int q = 1; q < 4; q++) {
        int gx = x0 + (x1 - x0) * q / 4, gy = y0 + (y1 - y0) * q / 4;
        segment(px, w, h, gx, y0, gx, y1, 0, grid);
        segment(px, w, h, x0, gy, x1, gy, 0, grid);
    }
    if (lo < 0) { /* the zero line */
        int zy = y1 - (int)lround((0 - lo) / (hi - lo) * (y1 - y0));
        segment(px, w, h, x0, zy, x1, zy, 0, (const unsigned char[3]){150, 150, 150});
    }
    segment(px, w, h, x0, y0, x1, y0, 0, frame);
    segment(px, w, h, x0, y1, x1, y1, 0, frame);
    segment(px, w, h, x0, y0, x0, y1, 0, frame);
    segment(px, w, h, x1, y0, x1, y1, 0, frame);
    for (int pass = 0; pass < 2; pass++) /* thin curves first, the thick ones over them */
        for (int c = 0; c < n_curves; c++) {
            if ((thick[c] != 0) != (pass == 1)) continue;
            int px0 = 0, py0 = 0;
            bool have = false;
            for (int k = 0; k < n_points; k++) {
                double v = ys[(size_t)c * (size_t)n_points + (size_t)k];
                if (!isfinite(v)) {
                    have = false;
                    continue;
                }
                int x = x0 + (int)lround((double)k / (n_points - 1) * (x1 - x0));
                int y = y1 - (int)lround((v - lo) / (hi - lo) * (y1 - y0));
                if (have) segment(px, w, h, px0, py0, x, y, thick[c] ? 1 : 0, rgb + 3 * c);
                px0 = x, py0 = y, have = true;
            }
        }
    cattr_status st = cx_png_rgb(path, px, w, h);
    free(px);
    return st;
}
