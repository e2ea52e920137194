/* Shared helpers of the C tests of sessions, agents and callbacks: error expectations, event
 * snapshots, a tiny JSON scanner, and a hand-off point for pending replies. */
#ifndef LLS_TEST_HELPERS_H
#define LLS_TEST_HELPERS_H

#include "check.h"
#include "llmsession.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `expr` (which passes `&err`) fails with `want`; the error has that code and a message
 * containing `needle`. The error is freed. */
#define EXPECT_ERR(expr, want, needle)                                                    \
    do {                                                                                  \
        lls_error *err = NULL;                                                            \
        lls_status expect_st_ = (expr);                                                   \
        CHECK_INT(expect_st_, want);                                                      \
        CHECK(err != NULL);                                                               \
        if (err != NULL) {                                                                \
            CHECK_INT(lls_error_code(err), want);                                         \
            CHECK_CONTAINS(lls_error_message(err), needle);                               \
            lls_error_free(err);                                                          \
        }                                                                                 \
    } while (0)

/* Like EXPECT_ERR, and the detail JSON contains `detail`. */
#define EXPECT_ERR_DETAIL(expr, want, needle, detail)                                     \
    do {                                                                                  \
        lls_error *err = NULL;                                                            \
        lls_status expect_st_ = (expr);                                                   \
        CHECK_INT(expect_st_, want);                                                      \
        CHECK(err != NULL);                                                               \
        if (err != NULL) {                                                                \
            CHECK_CONTAINS(lls_error_message(err), needle);                               \
            CHECK_CONTAINS(lls_error_detail(err), detail);                                \
            lls_error_free(err);                                                          \
        }                                                                                 \
    } while (0)

/* `expr` (which passes `&err`) succeeds; on failure the message is printed. */
#define EXPECT_OK(expr)                                                                   \
    do {                                                                                  \
        lls_error *err = NULL;                                                            \
        lls_status expect_st_ = (expr);                                                   \
        if (expect_st_ != LLS_OK) {                                                       \
            fprintf(stderr, "%s:%d: %s failed with %d: %s\n", __FILE__, __LINE__, #expr,  \
                    (int)expect_st_, lls_error_message(err));                             \
        }                                                                                 \
        CHECK_INT(expect_st_, LLS_OK);                                                    \
        lls_error_free(err);                                                              \
    } while (0)

/* NUL-terminated string literal as (ptr, len). */
#define S(lit) (lit), (sizeof(lit) - 1)

/* Every event of `s` as JSON (the caller frees it). */
static inline char *events_of(const lls_session *s) {
    char *out = NULL;
    if (lls_session_events(s, 0, UINT64_MAX, &out, NULL, NULL) != LLS_OK) {
        return NULL;
    }
    return out;
}

/* The events of `s` are exactly `before` (a bad call changed nothing). */
#define CHECK_UNCHANGED(s, before)                                                        \
    do {                                                                                  \
        char *after_ = events_of(s);                                                      \
        CHECK_STR(after_, before);                                                        \
        lls_string_free(after_);                                                          \
    } while (0)

/* Removes every `,"chain":"<64 hex>"` field from `json` in place (a fork chains its records
   anew under its own header, so its events equal the parent's without their chains). */
static inline void strip_chains(char *json) {
    const char *field = ",\"chain\":\"";
    size_t flen = strlen(field), total = flen + 64 + 1;
    char *p;
    while ((p = strstr(json, field)) != NULL) {
        memmove(p, p + total, strlen(p + total) + 1);
    }
}

/* How many times `needle` occurs in `hay`. */
static inline int count_of(const char *hay, const char *needle) {
    int n = 0;
    size_t len = strlen(needle);
    for (const char *p = hay ? strstr(hay, needle) : NULL; p != NULL; p = strstr(p + len, needle)) {
        n++;
    }
    return n;
}

/* The number of events in `s`. */

/* Finds the JSON value (object, array, string, number, literal) that follows `"key":` in
 * `json` and returns a pointer to it; *len receives its length. NULL when absent. A tiny
 * scanner for the tests: it tracks strings and nesting, enough for the library's compact
 * output. */
static inline const char *json_value(const char *json, const char *key, size_t *len) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (p == NULL) {
        return NULL;
    }
    p += strlen(pat);
    const char *q = p;
    int depth = 0;
    bool in_str = false;
    for (; *q != '\0'; q++) {
        char c = *q;
        if (in_str) {
            if (c == '\\') {
                q++;
            } else if (c == '"') {
                in_str = false;
                if (depth == 0) {
                    q++;
                    break;
                }
            }
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) {
                break;
            }
            depth--;
            if (depth == 0) {
                q++;
                break;
            }
        } else if (c == ',' && depth == 0) {
            break;
        }
    }
    *len = (size_t)(q - p);
    return p;
}

/* How many events the session's log holds (its stats' `events`: counting `"seq":` in the events
 * would also count the seqs a checkpoint record names). */
static inline int event_count(const lls_session *s) {
    char *st = NULL;
    if (lls_session_stats(s, &st, NULL, NULL) != LLS_OK) return -1;
    size_t len = 0;
    const char *v = json_value(st, "events", &len);
    int n = v ? atoi(v) : -1;
    lls_string_free(st);
    return n;
}

/* A copy of the value of `key` (the caller frees it), or NULL. */
static inline char *json_dup(const char *json, const char *key) {
    size_t len = 0;
    const char *v = json_value(json, key, &len);
    if (v == NULL) {
        return NULL;
    }
    char *out = malloc(len + 1);
    memcpy(out, v, len);
    out[len] = '\0';
    return out;
}

/* The unsigned integer value of `key`, or -1. */
static inline long long json_int(const char *json, const char *key) {
    size_t len = 0;
    const char *v = json_value(json, key, &len);
    if (v == NULL || len == 0 || v[0] < '0' || v[0] > '9') {
        return -1;
    }
    return strtoll(v, NULL, 10);
}

/* [mine, ...rest] where `rest` is a JSON array: prepends the message `mine`. */
static inline char *prepend_message(const char *mine, const char *rest, size_t rest_len) {
    size_t cap = strlen(mine) + rest_len + 4;
    char *out = malloc(cap);
    bool empty = rest_len <= 2;
    if (empty) {
        snprintf(out, cap, "[%s]", mine);
    } else {
        snprintf(out, cap, "[%s,%.*s", mine, (int)(rest_len - 1), rest + 1);
    }
    return out;
}

/* ------------------------------------------------------------ pending hand-off */

/* A point where a callback parks a pending reply for another thread to answer. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    lls_reply *reply;
    bool handed;
} handoff;

static inline void handoff_init(handoff *h) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
}

static inline void handoff_destroy(handoff *h) {
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

/* Called by a callback: parks the reply (then return LLS_CB_PENDING). */
static inline void handoff_put(handoff *h, lls_reply *reply) {
    pthread_mutex_lock(&h->mu);
    h->reply = reply;
    h->handed = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Called by another thread: waits for a parked reply and takes it. */
static inline lls_reply *handoff_take(handoff *h) {
    pthread_mutex_lock(&h->mu);
    while (!h->handed) {
        pthread_cond_wait(&h->cv, &h->mu);
    }
    h->handed = false;
    lls_reply *r = h->reply;
    pthread_mutex_unlock(&h->mu);
    return r;
}

/* ------------------------------------------------------------ userdata counting */

/* Userdata whose free is counted: `frees` must end at 1 for every registration. */
typedef struct {
    int frees;
} counted;

static inline void counted_free(void *userdata) {
    ((counted *)userdata)->frees++;
}

/* The length of the JSON string literal at `p` (quotes included), escapes skipped: how the
   host stores of the tests take a record out of a request without a JSON parser. */
static inline size_t literal_len(const char *p) {
    size_t i = 1;
    while (p[i] != '"') {
        i += p[i] == '\\' ? 2 : 1;
    }
    return i + 1;
}

#endif
