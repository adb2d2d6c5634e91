/* test_util.h - what the C tests share: a failure counter and CHECK, which prints the failed condition with a
 * message and counts it (a test exits 1 when g_failures is non-zero). */
#ifndef CATTR_TEST_UTIL_H
#define CATTR_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

static int g_failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            g_failures++;                                                                                              \
            printf("FAIL %s:%d: (%s) ", __FILE__, __LINE__, #cond);                                                    \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

/* The whole of a file as a NUL-terminated string (malloc'ed), or NULL when it cannot be read. */
static inline char *test_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

#endif
