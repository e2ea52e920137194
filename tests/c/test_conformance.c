/* C tests of the store conformance kit: lls_store_conformance against an in-memory host store
 * with a writer lease per session (every case passes) and against deliberately broken ones
 * (the cases that catch them fail, with a detail saying what was wrong);
 * lls_store_conformance_url against a file: directory, its bad inputs, and (when
 * LLMSESSION_PG_URL is set, as `make test-pg` does) a PostgreSQL database. Built and run by
 * `make test-c`. */
#define _POSIX_C_SOURCE 200809L

#include "helpers.h"

#include <unistd.h>

enum fault { FAULT_NONE, FAULT_IGNORES_HEAD, FAULT_HALF_BATCH };

/* One session: its records as JSON string literals (quotes and escapes kept, so that a load
 * reply gives them back byte for byte), and the handle holding its lease (0: none). */
typedef struct {
    char *id;
    char **recs;
    size_t n, cap;
    long long lease;
} session_rec;

typedef struct {
    long long handle;
    int session;
} open_handle;

typedef struct {
    session_rec sessions[32];
    int nsessions;
    open_handle handles[64];
    int nhandles;
    enum fault fault;
    int frees;
} mem_store;

static void push(session_rec *s, const char *lit, size_t len) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->recs = realloc(s->recs, s->cap * sizeof *s->recs);
    }
    char *copy = malloc(len + 1);
    memcpy(copy, lit, len);
    copy[len] = '\0';
    s->recs[s->n++] = copy;
}

static void truncate_to(session_rec *s, size_t n) {
    while (s->n > n) {
        free(s->recs[--s->n]);
    }
}

static void reply_text(lls_reply *reply, const char *text) {
    lls_reply_set_json(reply, text, strlen(text), NULL);
}

static int32_t mem_store_cb(void *userdata, const char *in, size_t in_len, lls_reply *reply) {
    mem_store *st = userdata;
    (void)in_len;
    long long handle = json_int(in, "handle");
    if (strstr(in, "\"op\":\"open\"") != NULL) {
        char *id = json_dup(in, "sessionId");
        int found = -1;
        for (int i = 0; i < st->nsessions; i++) {
            if (strcmp(st->sessions[i].id, id) == 0) {
                found = i;
            }
        }
        if (found < 0) {
            found = st->nsessions++;
            memset(&st->sessions[found], 0, sizeof st->sessions[found]);
            st->sessions[found].id = id;
        } else {
            free(id);
        }
        st->handles[st->nhandles++] = (open_handle){handle, found};
        reply_text(reply, "true");
        return LLS_CB_OK;
    }
    int at = -1;
    for (int i = 0; i < st->nhandles; i++) {
        if (st->handles[i].handle == handle) {
            at = i;
        }
    }
    if (at < 0) {
        lls_reply_fail(reply, S("no such handle"), NULL);
        return LLS_CB_ERROR;
    }
    session_rec *s = &st->sessions[st->handles[at].session];
    if (strstr(in, "\"op\":\"close\"") != NULL) {
        if (s->lease == handle) {
            s->lease = 0;
        }
        st->handles[at] = st->handles[--st->nhandles];
        reply_text(reply, "true");
        return LLS_CB_OK;
    }
    if (strstr(in, "\"op\":\"load\"") != NULL) {
        if (s->lease != 0 && s->lease != handle) {
            char why[96];
            snprintf(why, sizeof why, "{\"locked\":\"handle %lld holds the lease\"}", s->lease);
            reply_text(reply, why);
            return LLS_CB_OK;
        }
        s->lease = handle;
        size_t cap = 32;
        for (size_t i = 0; i < s->n; i++) {
            cap += strlen(s->recs[i]) + 1;
        }
        char *buf = malloc(cap);
        size_t n = (size_t)snprintf(buf, cap, "{\"records\":[");
        for (size_t i = 0; i < s->n; i++) {
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "," : "", s->recs[i]);
        }
        snprintf(buf + n, cap - n, "]}");
        reply_text(reply, buf);
        free(buf);
        return LLS_CB_OK;
    }
    if (strstr(in, "\"op\":\"append\"") != NULL) {
        long long seq = json_int(in, "seq");
        const char *h = strstr(in, "\"header\":\"");
        bool fits = (h != NULL) == (s->n == 0) && (s->n == 0 || (size_t)seq + 1 == s->n);
        if (!fits && st->fault == FAULT_NONE) {
            reply_text(reply, "{\"conflict\":\"seq is not the next one\"}");
            return LLS_CB_OK;
        }
        /* The batch's records, header first. */
        const char *lits[64];
        size_t lens[64], count = 0;
        if (h != NULL) {
            h += strlen("\"header\":");
            lits[count] = h;
            lens[count++] = literal_len(h);
        }
        const char *r = strstr(in, "\"records\":[") + strlen("\"records\":[");
        while (*r == '"' && count < 64) {
            lits[count] = r;
            lens[count] = literal_len(r);
            r += lens[count++];
            if (*r == ',') {
                r++;
            }
        }
        /* FAULT_HALF_BATCH writes half of a batch before it finds the seq wrong. */
        size_t keep = !fits && st->fault == FAULT_HALF_BATCH ? (count + 1) / 2 : count;
        for (size_t i = 0; i < keep; i++) {
            push(s, lits[i], lens[i]);
        }
        reply_text(reply, fits || st->fault == FAULT_IGNORES_HEAD ? "true" : "{\"conflict\":\"seq is not the next one\"}");
        return LLS_CB_OK;
    }
    if (strstr(in, "\"op\":\"undo\"") != NULL) {
        truncate_to(s, (size_t)json_int(in, "from"));
        reply_text(reply, "true");
        return LLS_CB_OK;
    }
    if (strstr(in, "\"op\":\"cut\"") != NULL) {
        truncate_to(s, (size_t)json_int(in, "keep"));
        reply_text(reply, "{\"savedTo\":\"the quarantine list\"}");
        return LLS_CB_OK;
    }
    reply_text(reply, "null"); /* sync */
    return LLS_CB_OK;
}

static void mem_store_free(void *userdata) {
    mem_store *st = userdata;
    st->frees++;
    for (int i = 0; i < st->nsessions; i++) {
        truncate_to(&st->sessions[i], 0);
        free(st->sessions[i].recs);
        free(st->sessions[i].id);
    }
    st->nsessions = 0;
}

static mem_store *new_store(enum fault fault) {
    mem_store *st = calloc(1, sizeof *st);
    st->fault = fault;
    return st;
}

static void test_memory_host_store_passes(void) {
    mem_store *st = new_store(FAULT_NONE);
    char *out = NULL;
    size_t len = 0;
    EXPECT_OK(lls_store_conformance(mem_store_cb, st, mem_store_free, NULL, 0, &out, &len, &err));
    CHECK_CONTAINS(out, "{\"store\":\"host store\",\"passed\":true,\"cases\":[");
    CHECK(out != NULL && strstr(out, "\"passed\":false") == NULL);
    CHECK_CONTAINS(out, "{\"case\":\"batch-atomicity\",\"passed\":true,");
    CHECK_CONTAINS(out, "a second writer was refused with locked while the first held the session (host store `load`: handle");
    CHECK_CONTAINS(out, "kept in the quarantine list");
    CHECK_INT(len, out ? strlen(out) : 0);
    lls_string_free(out);
    CHECK_INT(st->frees, 1);
    CHECK_INT(st->nhandles, 0); /* every handle the kit opened was closed */
    free(st);
}

static void test_broken_host_stores_fail(void) {
    mem_store *st = new_store(FAULT_IGNORES_HEAD);
    char *out = NULL;
    EXPECT_ERR_DETAIL(lls_store_conformance(mem_store_cb, st, mem_store_free, NULL, 0, &out, NULL, &err), LLS_ERR_NONCONFORMING,
                      "conformance case(s) failed", "\"failed\":[\"batch-atomicity\",\"conditional-append\"");
    CHECK_CONTAINS(out, "\"passed\":false,\"cases\":[");
    CHECK_CONTAINS(out, "{\"case\":\"conditional-append\",\"passed\":false,\"detail\":\"append with expected head 2 succeeded although the store holds 3 events\"}");
    CHECK_CONTAINS(out, "{\"case\":\"create-and-reload\",\"passed\":true,");
    lls_string_free(out);
    CHECK_INT(st->frees, 1);
    free(st);

    st = new_store(FAULT_HALF_BATCH);
    out = NULL;
    EXPECT_ERR(lls_store_conformance(mem_store_cb, st, mem_store_free, S("{\"cases\":[\"batch-atomicity\"]}"), &out, NULL, &err),
               LLS_ERR_NONCONFORMING, "1 of 1 conformance case(s) failed (batch-atomicity)");
    CHECK_CONTAINS(out, "the refused append (seq 5, 3 events) left 2 of its records behind");
    lls_string_free(out);
    free(st);
}

static void test_bad_inputs(void) {
    mem_store *st = new_store(FAULT_NONE);
    char *out = NULL;
    EXPECT_ERR(lls_store_conformance(NULL, st, mem_store_free, NULL, 0, &out, NULL, &err), LLS_ERR_NULL_POINTER, "store");
    CHECK_INT(st->frees, 1); /* freed on every failure */
    EXPECT_ERR(lls_store_conformance(mem_store_cb, st, mem_store_free, NULL, 0, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "out");
    EXPECT_ERR_DETAIL(lls_store_conformance(mem_store_cb, st, mem_store_free, S("{\"cases\":[\"nope\"]}"), &out, NULL, &err),
                      LLS_ERR_INVALID_INPUT, "no conformance case is called \"nope\"", "\"field\":\"cases\"");
    EXPECT_ERR_DETAIL(lls_store_conformance(mem_store_cb, st, mem_store_free, S("{\"only\":1}"), &out, NULL, &err),
                      LLS_ERR_INVALID_INPUT, "not an option here", "opts.only");
    EXPECT_ERR(lls_store_conformance(mem_store_cb, st, mem_store_free, S("{\"cases\":"), &out, NULL, &err), LLS_ERR_MALFORMED_JSON,
               "opts_json");
    CHECK(out == NULL);
    CHECK_INT(st->frees, 5);
    free(st);
    EXPECT_ERR(lls_store_conformance_url(S("s3://bucket/x"), NULL, 0, &out, NULL, &err), LLS_ERR_INVALID_INPUT, "unknown store scheme");
    EXPECT_ERR(lls_store_conformance_url(S("file:/dev/null"), NULL, 0, &out, NULL, &err), LLS_ERR_INVALID_INPUT, "naming a directory");
    EXPECT_ERR(lls_store_conformance_url(NULL, 0, NULL, 0, &out, NULL, &err), LLS_ERR_NULL_POINTER, "url");
    CHECK(out == NULL);
}

static void test_file_directory_passes(void) {
    char dir[64], url[96];
    snprintf(dir, sizeof dir, "/tmp/lls-conformance-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        CHECK(0);
        return;
    }
    snprintf(url, sizeof url, "file:%s", dir);
    char *out = NULL;
    EXPECT_OK(lls_store_conformance_url(url, strlen(url), NULL, 0, &out, NULL, &err));
    CHECK_CONTAINS(out, "\"passed\":true,\"cases\":[");
    CHECK(out != NULL && strstr(out, "\"passed\":false") == NULL);
    lls_string_free(out);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_INT(system(cmd), 0);
}

static void test_postgres_passes(void) {
    const char *pg = getenv("LLMSESSION_PG_URL");
    if (pg == NULL || *pg == '\0') {
        fprintf(stderr, "*** SKIPPED test_postgres_passes: LLMSESSION_PG_URL is not set (make test-pg sets it) ***\n");
        return;
    }
    char *out = NULL;
    EXPECT_OK(lls_store_conformance_url(pg, strlen(pg), NULL, 0, &out, NULL, &err));
    CHECK_CONTAINS(out, "\"passed\":true,\"cases\":[");
    CHECK(out != NULL && strstr(out, "\"passed\":false") == NULL);
    if (out != NULL && strstr(out, "\"passed\":false") != NULL) {
        fprintf(stderr, "%s\n", out);
    }
    lls_string_free(out);
}

int main(void) {
    RUN(test_memory_host_store_passes);
    RUN(test_broken_host_stores_fail);
    RUN(test_bad_inputs);
    RUN(test_file_directory_passes);
    RUN(test_postgres_passes);
    CHECK_INT(lls_live_handle_count(), 0);
    return check_report();
}
