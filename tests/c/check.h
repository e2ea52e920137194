/* A tiny assertion kit for the C tests: every CHECK counts as passed or failed, failures are
 * printed with file and line, and check_report() prints the closing "N passed, N failed"
 * line and gives the exit code. */
#ifndef LLS_TEST_CHECK_H
#define LLS_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_passed;
static int check_failed;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (cond) {                                                                       \
            check_passed++;                                                               \
        } else {                                                                          \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
        }                                                                                 \
    } while (0)

#define CHECK_INT(actual, expected)                                                       \
    do {                                                                                  \
        long long check_a_ = (long long)(actual);                                         \
        long long check_e_ = (long long)(expected);                                       \
        if (check_a_ == check_e_) {                                                       \
            check_passed++;                                                               \
        } else {                                                                          \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK_INT failed: %s is %lld, expected %s (%lld)\n",  \
                    __FILE__, __LINE__, #actual, check_a_, #expected, check_e_);          \
        }                                                                                 \
    } while (0)

#define CHECK_STR(actual, expected)                                                       \
    do {                                                                                  \
        const char *check_a_ = (actual);                                                  \
        const char *check_e_ = (expected);                                                \
        if (check_a_ != NULL && strcmp(check_a_, check_e_) == 0) {                        \
            check_passed++;                                                               \
        } else {                                                                          \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s is \"%s\", expected \"%s\"\n",   \
                    __FILE__, __LINE__, #actual, check_a_ ? check_a_ : "(null)", check_e_); \
        }                                                                                 \
    } while (0)

#define CHECK_CONTAINS(haystack, needle)                                                  \
    do {                                                                                  \
        const char *check_h_ = (haystack);                                                \
        const char *check_n_ = (needle);                                                  \
        if (check_h_ != NULL && strstr(check_h_, check_n_) != NULL) {                     \
            check_passed++;                                                               \
        } else {                                                                          \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK_CONTAINS failed: %s is \"%s\", lacks \"%s\"\n", \
                    __FILE__, __LINE__, #haystack, check_h_ ? check_h_ : "(null)", check_n_); \
        }                                                                                 \
    } while (0)

#define RUN(test)                                                                         \
    do {                                                                                  \
        int check_before_ = check_failed;                                                 \
        test();                                                                           \
        printf("%s %s\n", check_failed == check_before_ ? "ok  " : "FAIL", #test);        \
    } while (0)

static int check_report(void) {
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed == 0 ? 0 : 1;
}

#endif
