/* test_viz.c - tests of the heatmap renderers and the line plot (cx_png_curves): PNGs written to /tmp are read back with libpng and checked for size,
 * cell colours (positive reddish, negative bluish, zero white), the legend and the overlay blend; the terminal
 * renderer is checked for rows, colours, the character ramp and snprintf semantics.
 * Prints each failed check and exits 1 if any failed, 0 otherwise. */
#define _POSIX_C_SOURCE 200809L
#include "core/core.h"
#include "viz/heatmap.h"

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"


typedef struct image {
    int w, h;
    unsigned char *rgb;
} image;

/* Reads a PNG as 8-bit RGB with libpng's simplified API; returns 0 on failure. */
static int read_png(const char *path, image *out) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&im, path)) {
        printf("libpng cannot open %s: %s\n", path, im.message);
        return 0;
    }
    im.format = PNG_FORMAT_RGB;
    out->w = (int)im.width;
    out->h = (int)im.height;
    out->rgb = malloc(PNG_IMAGE_SIZE(im));
    if (!out->rgb || !png_image_finish_read(&im, NULL, out->rgb, 0, NULL)) {
        printf("libpng cannot read %s: %s\n", path, im.message);
        png_image_free(&im);
        free(out->rgb);
        return 0;
    }
    return 1;
}

static const unsigned char *px(const image *im, int x, int y) { return im->rgb + 3 * ((size_t)y * (size_t)im->w + (size_t)x); }

static int reddish(const unsigned char *p) { return p[0] > 150 && p[1] < 100 && p[2] < 100; }
static int bluish(const unsigned char *p) { return p[2] > 150 && p[0] < 100 && p[1] < 150; }
static int white(const unsigned char *p) { return p[0] == 255 && p[1] == 255 && p[2] == 255; }

static void test_png(void) {
    /* 2 x 3 map: row 0 = {+1, -1, 0}, row 1 = {+0.5, -0.25, NaN} */
    const double vals[6] = {1.0, -1.0, 0.0, 0.5, -0.25, NAN};
    const int h = 2, w = 3, cell = 10;
    char path[64];
    snprintf(path, sizeof path, "/tmp/cattr_test_viz_%ld.png", (long)getpid());
    cattr_status st = cx_png_heatmap(path, vals, h, w, cell);
    CHECK(st == CATTR_OK, "cx_png_heatmap: %s", cattr_last_error());
    image im = {0};
    if (st == CATTR_OK && read_png(path, &im)) {
        int legend = cx_heatmap_legend_height(cell);
        CHECK(im.w == w * cell && im.h == h * cell + legend, "size %dx%d, want %dx%d", im.w, im.h, w * cell,
              h * cell + legend);
        if (im.w == w * cell && im.h == h * cell + legend) {
            const unsigned char *p;
            p = px(&im, 5, 5);
            CHECK(reddish(p), "positive cell colour %d,%d,%d is not reddish", p[0], p[1], p[2]);
            CHECK(p[0] == 178 && p[1] == 24 && p[2] == 43, "max positive is not full red: %d,%d,%d", p[0], p[1], p[2]);
            p = px(&im, 15, 5);
            CHECK(bluish(p), "negative cell colour %d,%d,%d is not bluish", p[0], p[1], p[2]);
            p = px(&im, 25, 5);
            CHECK(white(p), "zero cell colour %d,%d,%d is not white", p[0], p[1], p[2]);
            p = px(&im, 5, 15);
            CHECK(p[0] > p[2] && p[0] > 200 && p[1] < 200, "half positive cell %d,%d,%d", p[0], p[1], p[2]);
            const unsigned char *q = px(&im, 15, 15);
            CHECK(q[2] > q[0] && q[0] > px(&im, 15, 5)[0], "quarter negative cell %d,%d,%d", q[0], q[1], q[2]);
            p = px(&im, 25, 15);
            CHECK(p[0] == 128 && p[1] == 128 && p[2] == 128, "NaN cell %d,%d,%d is not grey", p[0], p[1], p[2]);
            /* cell edges: the whole 10x10 square has one colour */
            CHECK(memcmp(px(&im, 0, 0), px(&im, 9, 9), 3) == 0 && memcmp(px(&im, 10, 0), px(&im, 19, 9), 3) == 0,
                  "cells are not uniform squares");
            /* legend: gap row white, bar blue on the left, red on the right */
            int y0 = h * cell;
            CHECK(white(px(&im, 0, y0)) && white(px(&im, im.w - 1, y0 + 1)), "legend gap is not white");
            int yb = y0 + 3;
            CHECK(bluish(px(&im, 0, yb)), "legend left end is not blue");
            CHECK(reddish(px(&im, im.w - 1, yb)), "legend right end is not red");
        }
        free(im.rgb);
    }
    unlink(path);

    /* overlay: alpha 0 shows the grayscale image only; alpha 0.5 blends */
    const double img[6] = {0, 10, 20, 30, 40, 50};
    st = cx_png_heatmap_overlay(path, img, vals, h, w, 1, 0.0);
    CHECK(st == CATTR_OK, "overlay alpha 0: %s", cattr_last_error());
    if (st == CATTR_OK && read_png(path, &im)) {
        CHECK(im.w == 3 && im.h == 2 + cx_heatmap_legend_height(1), "overlay size %dx%d", im.w, im.h);
        CHECK(px(&im, 0, 0)[0] == 0 && px(&im, 2, 1)[0] == 255 && px(&im, 2, 1)[2] == 255, "alpha 0 is not the image");
        CHECK(px(&im, 1, 0)[0] == 51 && px(&im, 1, 0)[1] == 51, "gray level %d, want 51", px(&im, 1, 0)[0]);
        free(im.rgb);
    }
    st = cx_png_heatmap_overlay(path, img, vals, h, w, 2, 0.5);
    CHECK(st == CATTR_OK, "overlay alpha 0.5: %s", cattr_last_error());
    if (st == CATTR_OK && read_png(path, &im)) {
        const unsigned char *p = px(&im, 0, 0); /* image 0 (black) + full red at 0.5 */
        CHECK(abs(p[0] - 89) <= 1 && abs(p[1] - 12) <= 1 && abs(p[2] - 22) <= 1, "blend %d,%d,%d, want 89,12,22", p[0],
              p[1], p[2]);
        free(im.rgb);
    }
    unlink(path);

    /* errors */
    CHECK(cx_png_heatmap(path, vals, 0, 3, 4) == CATTR_ERR_INVALID_ARGUMENT, "h = 0 accepted");
    CHECK(cx_png_heatmap(path, vals, 2, 3, 0) == CATTR_ERR_INVALID_ARGUMENT, "cell = 0 accepted");
    CHECK(cx_png_heatmap(path, NULL, 2, 3, 4) == CATTR_ERR_INVALID_ARGUMENT, "NULL values accepted");
    CHECK(cx_png_heatmap(path, vals, 2, 3, 100000) == CATTR_ERR_INVALID_ARGUMENT, "huge image accepted");
    CHECK(cx_png_heatmap_overlay(path, img, vals, 2, 3, 4, 1.5) == CATTR_ERR_INVALID_ARGUMENT, "alpha 1.5 accepted");
    CHECK(cx_png_heatmap_overlay(path, img, vals, 2, 3, 4, NAN) == CATTR_ERR_INVALID_ARGUMENT, "alpha NaN accepted");
    const char *bad = "/tmp/cattr_no_such_dir_for_viz/x.png";
    st = cx_png_heatmap(bad, vals, 2, 3, 4);
    CHECK(st == CATTR_ERR_IO && strstr(cattr_last_error(), bad), "missing directory: %s: %s", cattr_status_string(st),
          cattr_last_error());
    CHECK(access(path, F_OK) != 0, "a failed call left %s", path);

    /* an all-zero map is white and valid */
    const double zeros[4] = {0, 0, 0, 0};
    st = cx_png_heatmap(path, zeros, 2, 2, 3);
    CHECK(st == CATTR_OK, "all-zero map: %s", cattr_last_error());
    if (st == CATTR_OK && read_png(path, &im)) {
        CHECK(white(px(&im, 0, 0)) && white(px(&im, 5, 5)), "all-zero map is not white");
        free(im.rgb);
    }
    unlink(path);
}

static int count_substr(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_term(void) {
    const double vals[6] = {1.0, -1.0, 0.0, 0.5, -0.25, NAN};
    char buf[1024];
    size_t n = cx_term_heatmap(buf, sizeof buf, vals, 2, 3, 0);
    CHECK(n == strlen(buf), "returned %zu, text is %zu", n, strlen(buf));
    CHECK(strcmp(buf, "@@##  \noo,,??\n") == 0, "text render:\n%s", buf);
    CHECK(count_substr(buf, "\n") == 2, "text render has %d rows", count_substr(buf, "\n"));

    n = cx_term_heatmap(buf, sizeof buf, vals, 2, 3, 1);
    CHECK(n == strlen(buf), "ANSI: returned %zu, text is %zu", n, strlen(buf));
    CHECK(count_substr(buf, "\x1b[0m\n") == 2, "ANSI render has %d row ends", count_substr(buf, "\x1b[0m\n"));
    CHECK(count_substr(buf, "\x1b[48;2;") == 6, "ANSI render has %d cells", count_substr(buf, "\x1b[48;2;"));
    CHECK(strstr(buf, "\x1b[48;2;178;24;43m  ") == buf, "first cell is not full red");
    CHECK(strstr(buf, "\x1b[48;2;33;102;172m  "), "no full blue cell");
    CHECK(strstr(buf, "\x1b[48;2;255;255;255m  "), "no white cell");

    /* snprintf semantics */
    size_t full = cx_term_heatmap(NULL, 0, vals, 2, 3, 1);
    CHECK(full == n, "counting call returned %zu, want %zu", full, n);
    char small[8];
    size_t k = cx_term_heatmap(small, sizeof small, vals, 2, 3, 0);
    CHECK(k == 14 && strcmp(small, "@@##  \n") == 0, "truncated render returned %zu '%s'", k, small);
    CHECK(cx_term_heatmap(buf, sizeof buf, NULL, 2, 3, 0) == 0 && buf[0] == '\0', "NULL values not rejected");
    CHECK(cx_term_heatmap(buf, sizeof buf, vals, 0, 3, 0) == 0, "h = 0 not rejected");

    /* a taller map: one line per row */
    double big[5 * 4];
    for (int i = 0; i < 20; i++) big[i] = sin(i);
    cx_term_heatmap(buf, sizeof buf, big, 5, 4, 1);
    CHECK(count_substr(buf, "\n") == 5, "5-row map rendered %d rows", count_substr(buf, "\n"));
}

/* Whether pred holds at a pixel within one of (x, y). */
static int near(const image *im, int x, int y, int (*pred)(const unsigned char *)) {
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++)
            if (x + dx >= 0 && y + dy >= 0 && x + dx < im->w && y + dy < im->h && pred(px(im, x + dx, y + dy))) return 1;
    return 0;
}

/* cx_png_curves: a rising line from the bottom-left to the top-right corner of the frame (x 0..1, y from 0 to its
 * largest value), a thick falling one; the frame black, the rest white; bad arguments refused. */
static void test_curves(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/cattr_test_curves_%ld.png", (long)getpid());
    const double ys[] = {0, 1, 2, 3, 4, /* rising, thin, red */ 4, 3, 2, 1, 0 /* falling, thick, blue */};
    const unsigned char rgb[] = {178, 24, 43, 33, 102, 172};
    const int thick[] = {0, 1};
    cattr_status st = cx_png_curves(path, ys, 2, 5, rgb, thick, 200, 100);
    CHECK(st == CATTR_OK, "cx_png_curves: %s", cattr_last_error());
    image im = {0};
    if (st == CATTR_OK && read_png(path, &im)) {
        CHECK(im.w == 200 && im.h == 100, "plot size %dx%d", im.w, im.h);
        const int x0 = 12, x1 = 187, y0 = 12, y1 = 87; /* the frame (12-pixel margins) */
        const unsigned char *k = px(&im, x0, (y0 + y1) / 2);
        CHECK(k[0] == 0 && k[1] == 0 && k[2] == 0, "the frame's left side is not black");
        CHECK(white(px(&im, 3, 3)), "the margin is not white");
        /* the rising curve passes the middle of the frame; the falling one does too, drawn over it, thick */
        int mx = (x0 + x1) / 2, my = (y0 + y1) / 2;
        CHECK(near(&im, mx, my, bluish), "the thick curve is not at the centre");
        int qx = x0 + (int)lround((x1 - x0) / 4.0);
        CHECK(near(&im, qx, y1 - (int)lround((y1 - y0) / 4.0), reddish), "the rising curve is not at its first quarter");
        CHECK(near(&im, qx, y0 + (int)lround((y1 - y0) / 4.0), bluish), "the falling curve is not at its first quarter");
        CHECK(near(&im, x1, y0, reddish), "the rising curve does not end top right");
        CHECK(!near(&im, x1, y1 - (y1 - y0) / 2, reddish) && !near(&im, x1, y1 - (y1 - y0) / 2, bluish),
              "a curve where none passes");
        free(im.rgb);
    }
    remove(path);
    CHECK(cx_png_curves(path, ys, 2, 1, rgb, thick, 200, 100) == CATTR_ERR_INVALID_ARGUMENT, "1 point accepted");
    CHECK(cx_png_curves(path, ys, 2, 5, rgb, thick, 20, 100) == CATTR_ERR_INVALID_ARGUMENT, "width 20 accepted");
    CHECK(access(path, F_OK) != 0, "a refused plot left a file");
}

int main(void) {
    test_png();
    test_curves();
    test_term();
    if (g_failures) {
        printf("test_viz: %d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("test_viz: all checks passed\n");
    return 0;
}
