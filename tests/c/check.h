/* The check the C test programs share (edges.c, futures.c, holds.c): a failed check
 * prints one line starting "FAILED" with its line number to standard output and exits 1. */
#ifndef TICKETING_TEST_CHECK_H
#define TICKETING_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                          \
    do {                                          \
        if (!(cond)) {                            \
            printf("FAILED line %d: ", __LINE__); \
            printf(__VA_ARGS__);                  \
            printf("\n");                         \
            fflush(stdout);                       \
            exit(1);                              \
        }                                         \
    } while (0)

#endif
