/* heatmap.h - PNG and terminal heatmaps of 2-D attribution maps.
 *
 * Colour scale (shared by every renderer): diverging and symmetric around 0. With m = max |v| over the finite
 * values, t = v / m lies in [-1, 1]; t = 0 is white, t = +1 is red (178, 24, 43), t = -1 is blue (33, 102, 172), and
 * colours between are linear blends with white. A map that is all zero is all white. NaN/Inf cells are mid grey
 * (128, 128, 128) in colour and "??" in text.
 *
 * PNG layout: w*cell pixels wide; h*cell rows of map (each value a cell x cell square, row 0 at the top), then the
 * legend of cx_heatmap_legend_height(cell) rows: a white gap of 2 rows and a colour bar running from -m (left) through
 * 0 to +m (right), with a black tick under 0. */
#ifndef CATTR_VIZ_HEATMAP_H
#define CATTR_VIZ_HEATMAP_H

#include "core/core.h"

#include <stddef.h>

/* Largest PNG side cx_png_heatmap* produce (w*cell and h*cell + legend must not exceed it). */
#define CX_HEATMAP_MAX_SIDE 16384

/* Rows of legend (gap + colour bar) under the map for a given cell size: 2 + clamp(cell / 2, 8, 24). */
int cx_heatmap_legend_height(int cell);

/* The colour of value v on the scale whose full colour is at |v| = m (m <= 0: everything white). */
void cx_heatmap_colour(double v, double m, unsigned char rgb[3]);

/* Writes an RGB PNG heatmap of a 2-D map (h rows, w cols, row-major doubles): diverging blue(negative)-white-
 * red(positive) scale symmetric around 0 (max |v| = full colour), each cell scaled up to `cell` pixels square, plus a
 * colour-bar legend strip below. Atomic write (cx_write_file_atomic).
 * Errors: CATTR_ERR_INVALID_ARGUMENT (NULL pointer, h, w or cell < 1, image over CX_HEATMAP_MAX_SIDE),
 * CATTR_ERR_IO (naming the path), CATTR_ERR_NO_MEMORY. */
cattr_status cx_png_heatmap(const char *path, const double *vals, int h, int w, int cell);

/* Same, but blends the heatmap over a grayscale image `img` (h*w doubles, any range; normalised to 0..1 by its
 * finite min and max, a constant image becomes 0.5) with opacity alpha in [0, 1]:
 * pixel = (1 - alpha) * 255 * gray + alpha * heat. The legend shows the unblended colours.
 * Errors: as cx_png_heatmap; alpha outside [0, 1] is CATTR_ERR_INVALID_ARGUMENT. */
cattr_status cx_png_heatmap_overlay(const char *path, const double *img, const double *vals, int h, int w, int cell,
                                    double alpha);

/* Writes an RGB PNG of w x h pixels (rgb: 3 bytes a pixel, rows from the top) atomically. Errors: as
 * cx_png_heatmap. */
cattr_status cx_png_rgb(const char *path, const unsigned char *rgb, int w, int h);

/* A line plot of n_curves curves of n_points values each (ys[c * n_points + k], x from 0 to 1) as a w x h RGB PNG:
 * white ground, the plot's frame and quarter grid lines, the y range from min(0, the least value) to the largest
 * (NaN and Inf skipped), each curve in colour rgb[3 c..3 c + 2], thick[c] != 0 drawn 3 pixels wide. Atomic write.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (NULL pointers, n_curves < 1, n_points < 2, w or h below 64 or over
 * CX_HEATMAP_MAX_SIDE), CATTR_ERR_IO, CATTR_ERR_NO_MEMORY. */
cattr_status cx_png_curves(const char *path, const double *ys, int n_curves, int n_points, const unsigned char *rgb,
                           const int *thick, int w, int h);

/* Renders a 2-D map as terminal text into buf with snprintf semantics: writes at most size bytes including the NUL
 * and returns the length the full text needs (excluding the NUL). buf may be NULL when size is 0.
 *  - ansi != 0: each cell is two spaces on an ANSI 24-bit background ("\x1b[48;2;R;G;Bm") in the colour scale above;
 *    each row ends with "\x1b[0m\n".
 *  - ansi == 0: each cell is two copies of one character chosen by level = round(5 * |t|) (0..5) from the ramp
 *    " .:oO@" for positive values and " ,;xX#" for negative ones (so level 0, |t| < 0.1, is blank for both); NaN/Inf
 *    is "??". Each row ends with "\n".
 * Invalid arguments (NULL vals, h or w < 1) render nothing and return 0. */
size_t cx_term_heatmap(char *buf, size_t size, const double *vals, int h, int w, int ansi);

/* A self-contained HTML page (no scripts, no network access) of a token-attribution matrix: one row per target
 * token (its text and log-probability lp[k]) and a first row for seq, one column per prompt token, cells coloured on
 * the blue-white-red scale of cx_heatmap_colour, token text escaped. *out is malloc'd (caller frees).
 * Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cx_html_token_heatmap(const char *model, const char *const *in_tok, int64_t T, const char *const *out_tok,
                                   int64_t n, const double *seq, const double *tok, const double *lp,
                                   const char *method, char **out);

/* A self-contained HTML page (no scripts, no network access) of a context attribution: the question, the answer, each
 * document (names[d], text docs[d]) with its sources' bytes [start[s], end[s]) highlighted on the blue-white-red scale
 * by score (hover: the score), and the sources ranked. *out is malloc'd (caller frees). Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cx_html_context(const char *question, const char *answer, const char *method, int n_docs,
                             const char *const *names, const char *const *docs, int64_t S, const int *document,
                             const int64_t *start, const int64_t *end, const double *score, char **out);

#endif
