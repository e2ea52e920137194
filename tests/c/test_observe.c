/* The observer hook (lls_set_observer, docs/observe.md): what the library did on its own
 * reaches the host's function as JSON, filtered by level; userdata is freed exactly once. */
#define _POSIX_C_SOURCE 200809L
#include "helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

/* What one observer saw. */
typedef struct {
    int calls;
    int last_level;
    int nul_terminated; /* every json[len] was NUL and strlen(json) == len */
    char last[4096];
    char kinds[1024]; /* "kind,kind,..." */
} seen_t;

static int frees;          /* userdata_free calls */
static int calls_after_free; /* observer calls on a freed seen_t (must stay 0) */

static void observer(void *ud, int32_t level, const char *json, size_t len) {
    seen_t *s = ud;
    if (s->calls < 0) {
        calls_after_free++;
        return;
    }
    s->calls++;
    s->last_level = level;
    if (json[len] != '\0' || strlen(json) != len) {
        s->nul_terminated = 0;
    }
    snprintf(s->last, sizeof s->last, "%s", json);
    const char *k = strstr(json, "\"kind\":\"");
    if (k != NULL) {
        k += 8;
        size_t n = strcspn(k, "\"");
        size_t used = strlen(s->kinds);
        snprintf(s->kinds + used, sizeof s->kinds - used, "%.*s,", (int)n, k);
    }
}

static void free_seen(void *ud) {
    seen_t *s = ud;
    frees++;
    s->calls = -1; /* a call after this is counted in calls_after_free */
}

static seen_t *new_seen(void) {
    seen_t *s = calloc(1, sizeof *s);
    s->nul_terminated = 1;
    return s;
}

/* A log at `path` with one host event and a torn last line: opening it cuts one record. */
static void write_torn_log(const char *path, const char *id) {
    char opts[128];
    snprintf(opts, sizeof opts, "{\"id\":\"%s\"}", id);
    lls_session *s = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), opts, strlen(opts), &s, &err));
    uint64_t seq = 0;
    EXPECT_OK(lls_session_append(s, S("{\"type\":\"host/note\",\"data\":{}}"), &seq, &err));
    lls_session_free(s);
    FILE *f = fopen(path, "a");
    fputs("{\"type\":\"host/no", f);
    fclose(f);
}

static void open_and_free(const char *path) {
    lls_session *s = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), NULL, 0, &s, &err));
    lls_session_free(s);
}

static void test_a_cut_tail_reaches_the_observer_as_json(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/cut.jsonl", tmpdir);
    write_torn_log(path, "c-observe-cut");
    seen_t *seen = new_seen();
    int frees_before = frees;
    EXPECT_OK(lls_set_observer(observer, seen, free_seen, LLS_LEVEL_WARN, &err));
    open_and_free(path);
    CHECK_INT(seen->calls, 1);
    CHECK_INT(seen->last_level, LLS_LEVEL_WARN);
    CHECK(seen->nul_terminated);
    CHECK_STR(seen->kinds, "log-cut,");
    CHECK_CONTAINS(seen->last, "\"kind\":\"log-cut\"");
    CHECK_CONTAINS(seen->last, "\"level\":\"warn\"");
    CHECK_CONTAINS(seen->last, "\"sessionId\":\"c-observe-cut\"");
    CHECK_CONTAINS(seen->last, "\"records\":1");
    CHECK_CONTAINS(seen->last, "\"savedTo\":\"");
    /* The JSON is valid: the library itself parses it back (as the data of a host event). */
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", seen->last);
    EXPECT_OK(lls_set_observer(NULL, NULL, NULL, 0, &err)); /* clears: frees `seen` once */
    CHECK_INT(frees, frees_before + 1);
    lls_session *m = NULL;
    EXPECT_OK(lls_session_new_memory(NULL, 0, &m, &err));
    char event[4200];
    int n = snprintf(event, sizeof event, "{\"type\":\"host/observed\",\"data\":%s}", copy);
    uint64_t seq = 0;
    EXPECT_OK(lls_session_append(m, event, (size_t)n, &seq, &err));
    lls_session_free(m);
    /* Cleared: nothing more is delivered (another torn line is cut unobserved). */
    FILE *f = fopen(path, "a");
    fputs("{\"type\"", f);
    fclose(f);
    open_and_free(path);
    CHECK_INT(calls_after_free, 0);
    free(seen);
}

static void test_the_minimum_level_filters(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/quiet.jsonl", tmpdir);
    write_torn_log(path, "c-observe-quiet");
    seen_t *seen = new_seen();
    EXPECT_OK(lls_set_observer(observer, seen, free_seen, LLS_LEVEL_ERROR, &err));
    open_and_free(path); /* log-cut is a warning: below the minimum */
    CHECK_INT(seen->calls, 0);
    /* The same at debug: the second open finds nothing to cut, a third torn line does. */
    seen_t *loud = new_seen();
    EXPECT_OK(lls_set_observer(observer, loud, free_seen, LLS_LEVEL_DEBUG, &err));
    FILE *f = fopen(path, "a");
    fputs("{", f);
    fclose(f);
    open_and_free(path);
    CHECK_INT(loud->calls, 1);
    CHECK_STR(loud->kinds, "log-cut,");
    EXPECT_OK(lls_set_observer(NULL, NULL, NULL, 0, &err));
    free(seen);
    free(loud);
}

static void test_userdata_is_freed_exactly_once(void) {
    int before = frees;
    seen_t *a = new_seen();
    seen_t *b = new_seen();
    EXPECT_OK(lls_set_observer(observer, a, free_seen, LLS_LEVEL_INFO, &err));
    CHECK_INT(frees, before);
    /* Replacing frees the previous userdata. */
    EXPECT_OK(lls_set_observer(observer, b, free_seen, LLS_LEVEL_INFO, &err));
    CHECK_INT(frees, before + 1);
    CHECK_INT(a->calls, -1);
    /* A bad level fails, frees the userdata it was given, and keeps the observer it had. */
    seen_t *c = new_seen();
    EXPECT_ERR(lls_set_observer(observer, c, free_seen, 7, &err), LLS_ERR_INVALID_ARGUMENT, "min_level");
    CHECK_INT(frees, before + 2);
    CHECK_INT(c->calls, -1);
    EXPECT_ERR(lls_set_observer(observer, NULL, NULL, -1, &err), LLS_ERR_INVALID_ARGUMENT, "min_level");
    CHECK_INT(b->calls, 0); /* still b's: not freed */
    /* A NULL observer clears it, and frees the userdata given with it at once. */
    seen_t *d = new_seen();
    EXPECT_OK(lls_set_observer(NULL, d, free_seen, LLS_LEVEL_DEBUG, &err));
    CHECK_INT(frees, before + 4);
    CHECK_INT(b->calls, -1);
    CHECK_INT(d->calls, -1);
    /* Clearing again frees nothing more. */
    EXPECT_OK(lls_set_observer(NULL, NULL, NULL, LLS_LEVEL_DEBUG, &err));
    CHECK_INT(frees, before + 4);
    CHECK_INT(calls_after_free, 0);
    free(a);
    free(b);
    free(c);
    free(d);
}

static void test_no_handle_leaks(void) {
    CHECK_INT(lls_live_handle_count(), 0);
    CHECK_INT(lls_live_string_count(), 0);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lls-observe-test-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_a_cut_tail_reaches_the_observer_as_json);
    RUN(test_the_minimum_level_filters);
    RUN(test_userdata_is_freed_exactly_once);
    RUN(test_no_handle_leaks);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    return check_report();
}
