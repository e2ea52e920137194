/* C tests of the stores named by URL: lls_session_open_url and lls_store_list_sessions on a
 * file: URL, their bad inputs, fork with "url", and (when LLMSESSION_PG_URL is set, as
 * `make test-pg` does) a PostgreSQL session with its writer lease. Built and run by
 * `make test-c`. */
#define _POSIX_C_SOURCE 200809L

#include "helpers.h"

#include <time.h>
#include <unistd.h>

static const char CONTEXT[] =
    "{\"type\":\"user/message\",\"data\":{\"message\":{\"role\":\"user\",\"content\":[{\"type\":"
    "\"text\",\"text\":\"kept by URL\"}]},\"source\":\"host\"},\"surfaceOp\":\"append\"}";

static char tmpdir[64];

static void test_file_url(void) {
    char url[160], path[128];
    snprintf(path, sizeof path, "%s/log.jsonl", tmpdir);
    snprintf(url, sizeof url, "file:%s", path);
    lls_session *s = NULL;
    EXPECT_OK(lls_session_open_url(url, strlen(url), S("{\"id\":\"by-url\"}"), &s, &err));
    EXPECT_OK(lls_session_append(s, S(CONTEXT), NULL, &err));
    /* One writer: the same file by another URL form is LOCKED. */
    char url2[160];
    snprintf(url2, sizeof url2, "file://%s", path);
    lls_session *t = NULL;
    EXPECT_ERR(lls_session_open_url(url2, strlen(url2), NULL, 0, &t, &err), LLS_ERR_LOCKED, "in use");
    CHECK(t == NULL);
    /* A read-only open follows it. */
    EXPECT_OK(lls_session_open_url(url2, strlen(url2), S("{\"readOnly\":true}"), &t, &err));
    EXPECT_ERR(lls_session_append(t, S(CONTEXT), NULL, &err), LLS_ERR_READ_ONLY, "read-only");
    lls_session_free(t);
    /* Fork into another file by URL. */
    char forked[160];
    snprintf(forked, sizeof forked, "{\"url\":\"file:%s/fork.jsonl\",\"id\":\"fork\"}", tmpdir);
    lls_session *f = NULL;
    EXPECT_OK(lls_session_fork(s, forked, strlen(forked), &f, &err));
    char *out = NULL;
    size_t len = 0;
    EXPECT_OK(lls_session_info(f, &out, &len, &err));
    CHECK_CONTAINS(out, "\"parent\":{\"id\":\"by-url\",\"seedLength\":1}");
    lls_string_free(out);
    lls_session_free(f);
    EXPECT_ERR(lls_session_fork(s, S("{\"url\":\"file:x\",\"path\":\"y\"}"), &f, &err), LLS_ERR_INVALID_INPUT, "not both");
    lls_session_free(s);
    /* The listing: one session, not in use any more. */
    EXPECT_OK(lls_store_list_sessions(url, strlen(url), NULL, 0, &out, &len, &err));
    CHECK_CONTAINS(out, "\"id\":\"by-url\"");
    CHECK_CONTAINS(out, "\"events\":1");
    CHECK_CONTAINS(out, "\"inUse\":false");
    lls_string_free(out);
    EXPECT_OK(lls_store_list_sessions(url, strlen(url), S("{\"after\":\"by-url\"}"), &out, &len, &err));
    CHECK_STR(out, "[]");
    lls_string_free(out);
    /* The file holds another session than the one asked for; a missing one may not be created. */
    EXPECT_ERR(lls_session_open_url(url, strlen(url), S("{\"id\":\"other\"}"), &s, &err), LLS_ERR_INVALID_INPUT, "holds session");
    snprintf(url, sizeof url, "file:%s/missing.jsonl", tmpdir);
    EXPECT_ERR(lls_session_open_url(url, strlen(url), S("{\"create\":false}"), &s, &err), LLS_ERR_INVALID_INPUT, "holds no session");
    CHECK(access(url + 5, F_OK) != 0);
    snprintf(path, sizeof path, "%s/fork.jsonl", tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/log.jsonl", tmpdir);
    unlink(path);
}

static void test_url_bad_inputs(void) {
    lls_session *s = NULL;
    char *out = NULL;
    size_t len = 0;
    EXPECT_ERR(lls_session_open_url(NULL, 0, NULL, 0, &s, &err), LLS_ERR_NULL_POINTER, "url");
    EXPECT_ERR(lls_session_open_url(S("file:x"), NULL, 0, NULL, &err), LLS_ERR_NULL_POINTER, "out");
    EXPECT_ERR(lls_session_open_url("", 0, NULL, 0, &s, &err), LLS_ERR_INVALID_ARGUMENT, "empty");
    EXPECT_ERR(lls_session_open_url(S("\xff\xfe"), NULL, 0, &s, &err), LLS_ERR_INVALID_UTF8, "url");
    EXPECT_ERR(lls_session_open_url(S("ftp://x/y"), NULL, 0, &s, &err), LLS_ERR_INVALID_INPUT, "unknown store scheme");
    EXPECT_ERR(lls_session_open_url(S("postgres://nouser/db"), NULL, 0, &s, &err), LLS_ERR_INVALID_INPUT, "names no user");
    EXPECT_ERR(lls_session_open_url(S("postgres://u@h/db?sslmode=verify-full"), NULL, 0, &s, &err), LLS_ERR_INVALID_INPUT, "sslrootcert");
    EXPECT_ERR(lls_session_open_url(S("postgres://u:p%zz@h/db"), NULL, 0, &s, &err), LLS_ERR_INVALID_INPUT, "percent escape");
    EXPECT_ERR(lls_session_open_url(S("file:x"), S("{\"bogus\":1}"), &s, &err), LLS_ERR_INVALID_INPUT, "bogus");
    EXPECT_ERR(lls_session_open_url(S("file:x"), S("{"), &s, &err), LLS_ERR_MALFORMED_JSON, "");
    EXPECT_ERR(lls_session_open_url(S("postgres://u:secret@127.0.0.1:1/db?connect_timeout=3"), S("{\"id\":\"x\"}"), &s, &err),
               LLS_ERR_STORAGE, "cannot connect");
    CHECK(s == NULL);
    EXPECT_ERR(lls_store_list_sessions(NULL, 0, NULL, 0, &out, &len, &err), LLS_ERR_NULL_POINTER, "url");
    EXPECT_ERR(lls_store_list_sessions(S("file:x"), NULL, 0, NULL, &len, &err), LLS_ERR_NULL_POINTER, "out");
    EXPECT_ERR(lls_store_list_sessions(S("file:x"), S("{\"limit\":\"no\"}"), &out, &len, &err), LLS_ERR_INVALID_INPUT, "limit");
    EXPECT_ERR(lls_store_list_sessions(S("file:x"), S("{\"page\":1}"), &out, &len, &err), LLS_ERR_INVALID_INPUT, "page");
}

static void test_postgres_url(void) {
    const char *pg = getenv("LLMSESSION_PG_URL");
    if (pg == NULL || *pg == '\0') {
        fprintf(stderr, "*** SKIPPED test_postgres_url: LLMSESSION_PG_URL is not set (make test-pg sets it) ***\n");
        return;
    }
    char opts[128];
    snprintf(opts, sizeof opts, "{\"id\":\"c-url-%ld-%ld\"}", (long)getpid(), (long)time(NULL));
    lls_session *s = NULL, *t = NULL;
    EXPECT_OK(lls_session_open_url(pg, strlen(pg), opts, strlen(opts), &s, &err));
    EXPECT_OK(lls_session_append(s, S(CONTEXT), NULL, &err));
    EXPECT_ERR_DETAIL(lls_session_open_url(pg, strlen(pg), opts, strlen(opts), &t, &err), LLS_ERR_LOCKED, "in use", "holder");
    lls_session_free(s);
    EXPECT_OK(lls_session_open_url(pg, strlen(pg), opts, strlen(opts), &t, &err));
    lls_session_free(t);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lls-url-test-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_file_url);
    RUN(test_url_bad_inputs);
    RUN(test_postgres_url);
    CHECK_INT(lls_live_handle_count(), 0);
    rmdir(tmpdir);
    return check_report();
}
