/* test_util.h - what the C tests share: a failure counter and CHECK, which prints the failed condition with a
 * message and counts it (a test exits 1 when g_failures is non-zero). */
#ifndef CATTR_TEST_UTIL_H
#define CATTR_TEST_UTIL_H

#include <stdio.h>

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

#endif
