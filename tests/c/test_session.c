/* C tests of sessions: memory, JSONL file and host-store sessions, reads, appends, fork,
 * verify, and every session entry point's bad inputs. Built and run by `make test-c`. */
#define _POSIX_C_SOURCE 200809L

#include "helpers.h"

#include <sys/stat.h>
#include <unistd.h>

static const char NOTE[] = "{\"type\":\"host/note\",\"data\":{\"text\":\"hello\"}}";
static const char CONTEXT[] =
    "{\"type\":\"user/message\",\"data\":{\"message\":{\"role\":\"user\",\"content\":[{\"type\":"
    "\"text\",\"text\":\"the repository uses tabs\"}]},\"source\":\"host\"},\"surfaceOp\":\"append\"}";

static lls_session *new_session(const char *opts) {
    lls_session *s = NULL;
    lls_status st = lls_session_new_memory(opts, opts ? strlen(opts) : 0, &s, NULL);
    CHECK_INT(st, LLS_OK);
    return s;
}

static char *read_str(lls_status (*fn)(const lls_session *, char **, size_t *, lls_error **),
                      const lls_session *s) {
    char *out = NULL;
    size_t len = 0;
    EXPECT_OK(fn(s, &out, &len, &err));
    CHECK(out != NULL && strlen(out) == len);
    return out;
}

/* ---------------------------------------------------------------- basics */

static void test_memory_session(void) {
    lls_session *s = new_session("{\"id\":\"s-1\",\"durability\":\"never\"}");
    char *t = read_str(lls_session_id, s);
    CHECK_STR(t, "s-1");
    lls_string_free(t);
    t = read_str(lls_session_info, s);
    CHECK_CONTAINS(t, "\"type\":\"session\"");
    CHECK_CONTAINS(t, "\"id\":\"s-1\"");
    CHECK(strstr(t, "parent") == NULL);
    lls_string_free(t);
    t = read_str(lls_session_history, s);
    CHECK_STR(t, "[]");
    lls_string_free(t);
    t = read_str(lls_session_header, s);
    CHECK_STR(t, "null");
    lls_string_free(t);
    t = read_str(lls_session_load_report, s);
    CHECK_STR(t, "{\"cutRecords\":0,\"repairedEvents\":0}");
    lls_string_free(t);
    t = events_of(s);
    CHECK_STR(t, "[]");
    lls_string_free(t);

    uint64_t seq = 99;
    EXPECT_OK(lls_session_append(s, S(NOTE), &seq, &err));
    CHECK_INT(seq, 0);
    EXPECT_OK(lls_session_append(s, S(CONTEXT), &seq, &err));
    CHECK_INT(seq, 1);
    EXPECT_OK(lls_session_append(s, S(NOTE), NULL, &err)); /* out_seq may be NULL */

    t = read_str(lls_session_history, s);
    CHECK_STR(t, "[{\"role\":\"user\",\"content\":[{\"text\":\"the repository uses tabs\",\"type\":\"text\"}]}]");
    lls_string_free(t);

    char *ev = NULL;
    EXPECT_OK(lls_session_events(s, 1, 2, &ev, NULL, &err));
    CHECK_INT(count_of(ev, "\"seq\":"), 1);
    CHECK_CONTAINS(ev, "\"seq\":1");
    CHECK_CONTAINS(ev, "\"surfaceOp\":\"append\"");
    lls_string_free(ev);
    EXPECT_OK(lls_session_events(s, 7, UINT64_MAX, &ev, NULL, &err));
    CHECK_STR(ev, "[]");
    lls_string_free(ev);
    EXPECT_OK(lls_session_events(s, 0, 0, &ev, NULL, &err));
    CHECK_STR(ev, "[]");
    lls_string_free(ev);
    CHECK_INT(event_count(s), 3);

    t = read_str(lls_session_stats, s);
    CHECK_CONTAINS(t, "\"events\":3");
    CHECK_CONTAINS(t, "\"surface\":1");
    CHECK_CONTAINS(t, "\"requests\":0");
    lls_string_free(t);
    t = read_str(lls_session_verify, s);
    CHECK_STR(t, "{\"compactions\":0,\"events\":3,\"requests\":0}");
    lls_string_free(t);
    EXPECT_OK(lls_session_sync(s, &err));

    /* A random id when none is given. */
    lls_session *s2 = new_session(NULL);
    t = read_str(lls_session_id, s2);
    CHECK_INT(strlen(t), 32);
    lls_string_free(t);
    lls_session_free(s2);
    lls_session_free(s);
    lls_session_free(s); /* double free ignored */
    lls_session_free(NULL);
}

/* ---------------------------------------------------------------- bad inputs */

static void test_session_bad_inputs(void) {
    lls_session *s = new_session("{\"id\":\"bad-inputs\"}");
    EXPECT_OK(lls_session_append(s, S(NOTE), NULL, &err));
    char *before = events_of(s);
    lls_cancel *cancel = NULL;
    CHECK_INT(lls_cancel_new(&cancel, NULL), LLS_OK);
    const lls_session *wrong = (const lls_session *)(const void *)cancel;
    lls_session *freed = new_session(NULL);
    lls_session_free(freed);
    char *out = NULL;
    lls_session *made = NULL;

    /* Creation: NULL out, malformed / invalid UTF-8 / mistyped options. */
    EXPECT_ERR(lls_session_new_memory(NULL, 0, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR(lls_session_new_memory(S("{\"id\":"), &made, &err), LLS_ERR_MALFORMED_JSON, "argument `opts_json`: malformed JSON");
    EXPECT_ERR(lls_session_new_memory(S("{\"id\":\"\xff\"}"), &made, &err), LLS_ERR_INVALID_UTF8, "not valid UTF-8");
    EXPECT_ERR_DETAIL(lls_session_new_memory(S("{\"durability\":\"sometimes\"}"), &made, &err),
                      LLS_ERR_INVALID_INPUT, "opts.durability: expected", "\"field\":\"opts.durability\"");
    EXPECT_ERR(lls_session_new_memory(S("{\"id\":5}"), &made, &err), LLS_ERR_INVALID_INPUT, "opts.id: expected a string");
    EXPECT_ERR(lls_session_new_memory(S("{\"id\":\"\"}"), &made, &err), LLS_ERR_INVALID_INPUT, "opts.id: must not be empty");
    EXPECT_ERR(lls_session_new_memory(S("{\"colour\":1}"), &made, &err), LLS_ERR_INVALID_INPUT, "opts.colour: is not an option here");
    EXPECT_ERR(lls_session_new_memory(S("[]"), &made, &err), LLS_ERR_INVALID_INPUT, "expected an object");
    CHECK(made == NULL);

    /* Handles: NULL, another type, freed. */
    EXPECT_ERR(lls_session_events(NULL, 0, UINT64_MAX, &out, NULL, &err), LLS_ERR_NULL_POINTER, "argument `session` is NULL");
    EXPECT_ERR(lls_session_events(wrong, 0, UINT64_MAX, &out, NULL, &err), LLS_ERR_INVALID_HANDLE,
               "argument `session` is an lls_cancel handle, but an lls_session handle is expected");
    EXPECT_ERR(lls_session_events(freed, 0, UINT64_MAX, &out, NULL, &err), LLS_ERR_INVALID_HANDLE, "is not a live lls_session handle");
    EXPECT_ERR(lls_session_events(s, 0, UINT64_MAX, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR(lls_session_events(s, 3, 2, &out, NULL, &err), LLS_ERR_INVALID_ARGUMENT, "argument `from`: 3 is greater than `to` (2)");

    /* Every reader: NULL session, wrong type, NULL out. */
    lls_status (*readers[])(const lls_session *, char **, size_t *, lls_error **) = {
        lls_session_load_report, lls_session_id, lls_session_info, lls_session_history,
        lls_session_header, lls_session_stats, lls_session_verify,
    };
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
        EXPECT_ERR(readers[i](NULL, &out, NULL, &err), LLS_ERR_NULL_POINTER, "`session`");
        EXPECT_ERR(readers[i](wrong, &out, NULL, &err), LLS_ERR_INVALID_HANDLE, "is an lls_cancel handle");
        EXPECT_ERR(readers[i](freed, &out, NULL, &err), LLS_ERR_INVALID_HANDLE, "not a live lls_session");
        EXPECT_ERR(readers[i](s, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    }
    CHECK(out == NULL);

    /* Append: NULL, invalid UTF-8, malformed, mistyped, rule violations. */
    uint64_t seq = 777;
    EXPECT_ERR(lls_session_append(NULL, S(NOTE), &seq, &err), LLS_ERR_NULL_POINTER, "`session`");
    EXPECT_ERR(lls_session_append((lls_session *)(void *)cancel, S(NOTE), &seq, &err), LLS_ERR_INVALID_HANDLE, "is an lls_cancel handle");
    EXPECT_ERR(lls_session_append(s, NULL, 4, &seq, &err), LLS_ERR_NULL_POINTER, "argument `event_json` is NULL");
    EXPECT_ERR_DETAIL(lls_session_append(s, S("{\"type\":\"host/note\",\"data\":\"\xc3\x28\"}"), &seq, &err),
                      LLS_ERR_INVALID_UTF8, "argument `event_json` is not valid UTF-8", "\"validUpTo\":28");
    EXPECT_ERR_DETAIL(lls_session_append(s, S("{\"type\":\"host/note\",\n\"data\":}"), &seq, &err),
                      LLS_ERR_MALFORMED_JSON, "malformed JSON", "\"line\":2");
    EXPECT_ERR(lls_session_append(s, S("{\"type\":\"host/note\"}"), &seq, &err), LLS_ERR_INVALID_INPUT, "data: is required");
    EXPECT_ERR(lls_session_append(s, S("{\"type\":7,\"data\":{}}"), &seq, &err), LLS_ERR_INVALID_INPUT, "type: expected a string");
    EXPECT_ERR(lls_session_append(s, S("{\"type\":\"host/note\",\"data\":{},\"seq\":1}"), &seq, &err),
               LLS_ERR_INVALID_INPUT, "seq, time and chain are assigned by the log");
    EXPECT_ERR(lls_session_append(s, S("\"just a string\""), &seq, &err), LLS_ERR_INVALID_INPUT, "expected an object");
    EXPECT_ERR(lls_session_append(s, S("{\"type\":\"step/start\",\"data\":{\"turn\":1,\"step\":1}}"), &seq, &err),
               LLS_ERR_INVALID_INPUT, "data.instance: is required");
    CHECK_INT(seq, 777);
    CHECK_UNCHANGED(s, before);

    /* Sync and free. */
    EXPECT_ERR(lls_session_sync(NULL, &err), LLS_ERR_NULL_POINTER, "`session`");
    EXPECT_ERR(lls_session_sync((lls_session *)(void *)cancel, &err), LLS_ERR_INVALID_HANDLE, "is an lls_cancel handle");
    lls_session_free((lls_session *)(void *)cancel); /* ignored: not a session */
    bool tripped = true;
    CHECK_INT(lls_cancel_is_tripped(cancel, &tripped, NULL), LLS_OK);

    /* Fork. */
    EXPECT_ERR(lls_session_fork(NULL, NULL, 0, &made, &err), LLS_ERR_NULL_POINTER, "`session`");
    EXPECT_ERR(lls_session_fork(s, NULL, 0, NULL, &err), LLS_ERR_NULL_POINTER, "`out`");
    EXPECT_ERR(lls_session_fork(wrong, NULL, 0, &made, &err), LLS_ERR_INVALID_HANDLE, "is an lls_cancel handle");
    EXPECT_ERR(lls_session_fork(s, S("{\"seedLength\":9}"), &made, &err), LLS_ERR_INVALID_INPUT, "seedLength: 9 is past the end of the log");
    EXPECT_ERR(lls_session_fork(s, S("{\"seedLength\":-1}"), &made, &err), LLS_ERR_INVALID_INPUT, "opts.seedLength: expected a non-negative integer");
    EXPECT_ERR(lls_session_fork(s, S("{\"path\":\"\"}"), &made, &err), LLS_ERR_INVALID_INPUT, "opts.path: must not be empty");
    EXPECT_ERR(lls_session_fork(s, S("{\"seed\":1}"), &made, &err), LLS_ERR_INVALID_INPUT, "opts.seed: is not an option here");
    EXPECT_ERR(lls_session_fork(s, S("{\"path\":"), &made, &err), LLS_ERR_MALFORMED_JSON, "malformed JSON");
    CHECK(made == NULL);

    /* Files: NULL, invalid UTF-8, empty path, a directory. */
    EXPECT_ERR(lls_session_open_file(NULL, 0, NULL, 0, &made, &err), LLS_ERR_NULL_POINTER, "argument `path` is NULL");
    EXPECT_ERR(lls_session_open_file(S("/tmp/x.jsonl"), NULL, 0, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR(lls_session_open_file(S("/tmp/\xff.jsonl"), NULL, 0, &made, &err), LLS_ERR_INVALID_UTF8, "argument `path` is not valid UTF-8");
    EXPECT_ERR(lls_session_open_file("", 0, NULL, 0, &made, &err), LLS_ERR_INVALID_ARGUMENT, "argument `path`: the path is empty");
    EXPECT_ERR(lls_session_open_file(S("/tmp"), NULL, 0, &made, &err), LLS_ERR_STORAGE, "/tmp");
    EXPECT_ERR(lls_session_open_file(S("/tmp/x.jsonl"), S("{\"durability\":1}"), &made, &err), LLS_ERR_INVALID_INPUT, "opts.durability");
    EXPECT_ERR(lls_verify_file(NULL, 0, &out, NULL, &err), LLS_ERR_NULL_POINTER, "argument `path` is NULL");
    EXPECT_ERR(lls_verify_file(S("/nonexistent/llmsession/log.jsonl"), NULL, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR_DETAIL(lls_verify_file(S("/nonexistent/llmsession/log.jsonl"), &out, NULL, &err), LLS_ERR_STORAGE,
                      "/nonexistent/llmsession/log.jsonl: cannot open a session log", "\"path\":\"/nonexistent/llmsession/log.jsonl\"");
    EXPECT_ERR(lls_verify_file(S("\xc3"), &out, NULL, &err), LLS_ERR_INVALID_UTF8, "`path`");
    CHECK(made == NULL);
    CHECK(out == NULL);

    CHECK_UNCHANGED(s, before);
    lls_string_free(before);
    lls_cancel_free(cancel);
    lls_session_free(s);
}

/* ---------------------------------------------------------------- files */

static char tmpdir[64];

static void path_in_tmp(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void append_raw(const char *path, const char *bytes) {
    FILE *f = fopen(path, "ab");
    CHECK(f != NULL);
    if (f != NULL) {
        fputs(bytes, f);
        fclose(f);
    }
}

static void test_file_session(void) {
    char path[128];
    path_in_tmp(path, sizeof path, "session.jsonl");
    lls_session *s = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), S("{\"id\":\"file-1\",\"durability\":\"every-event\"}"), &s, &err));
    EXPECT_OK(lls_session_append(s, S(NOTE), NULL, &err));
    EXPECT_OK(lls_session_append(s, S(CONTEXT), NULL, &err));
    char *before = events_of(s);
    lls_session_free(s);

    /* Reopen: the same events; the id comes from the file. */
    s = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), S("{\"id\":\"ignored\"}"), &s, &err));
    CHECK_UNCHANGED(s, before);
    char *t = NULL;
    EXPECT_OK(lls_session_id(s, &t, NULL, &err));
    CHECK_STR(t, "file-1");
    lls_string_free(t);
    EXPECT_OK(lls_verify_file(path, strlen(path), &t, NULL, &err));
    CHECK_STR(t, "{\"compactions\":0,\"events\":2,\"requests\":0}");
    lls_string_free(t);
    lls_session_free(s);

    /* A torn last line (a crash mid-write) is cut on open and reported. */
    append_raw(path, "{\"type\":\"host/no");
    s = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), NULL, 0, &s, &err));
    CHECK_UNCHANGED(s, before);
    EXPECT_OK(lls_session_load_report(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"cutRecords\":1");
    CHECK_CONTAINS(t, "\"cutAtLine\":4");
    CHECK_CONTAINS(t, "\"cutReason\":");
    lls_string_free(t);
    lls_session_free(s);

    /* A damaged header is a corrupt log naming line 1. */
    char bad[128];
    path_in_tmp(bad, sizeof bad, "damaged.jsonl");
    append_raw(bad, "{\"type\":\"session\",\"format\":\"something-else\"}\n");
    s = NULL;
    EXPECT_ERR_DETAIL(lls_session_open_file(bad, strlen(bad), NULL, 0, &s, &err), LLS_ERR_CORRUPT_LOG, "line 1", "\"line\":1");
    EXPECT_ERR(lls_verify_file(bad, strlen(bad), &t, NULL, &err), LLS_ERR_CORRUPT_LOG, "line 1");
    CHECK(s == NULL);

    /* Fork into a file; the child records its parent. */
    s = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), NULL, 0, &s, &err));
    char child_path[128];
    path_in_tmp(child_path, sizeof child_path, "child.jsonl");
    char opts[256];
    snprintf(opts, sizeof opts, "{\"path\":\"%s\",\"id\":\"child-1\",\"seedLength\":1}", child_path);
    lls_session *child = NULL;
    EXPECT_OK(lls_session_fork(s, opts, strlen(opts), &child, &err));
    EXPECT_OK(lls_session_info(child, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"id\":\"child-1\"");
    CHECK_CONTAINS(t, "\"parent\":{\"id\":\"file-1\",\"seedLength\":1}");
    lls_string_free(t);
    CHECK_INT(event_count(child), 1);
    /* A file another handle writes cannot take a fork (its lock is held); one that already
       holds a session cannot either. */
    lls_session *again = NULL;
    EXPECT_ERR(lls_session_fork(s, opts, strlen(opts), &again, &err), LLS_ERR_LOCKED, "the session is in use");
    lls_session_free(child);
    EXPECT_ERR(lls_session_fork(s, opts, strlen(opts), &again, &err), LLS_ERR_INVALID_INPUT, "already holds a session");
    EXPECT_OK(lls_verify_file(child_path, strlen(child_path), &t, NULL, &err));
    CHECK_STR(t, "{\"compactions\":0,\"events\":1,\"requests\":0}");
    lls_string_free(t);

    /* A failed fork leaves no file behind. */
    char never[128];
    path_in_tmp(never, sizeof never, "never.jsonl");
    snprintf(opts, sizeof opts, "{\"path\":\"%s\",\"seedLength\":99}", never);
    EXPECT_ERR(lls_session_fork(s, opts, strlen(opts), &again, &err), LLS_ERR_INVALID_INPUT, "past the end of the log");
    CHECK(access(never, F_OK) != 0);
    CHECK(again == NULL);

    /* Fork into memory with the defaults: every event (chained anew under the fork's header). */
    EXPECT_OK(lls_session_fork(s, NULL, 0, &child, &err));
    {
        char *forked = events_of(child);
        char *parent = strdup(before);
        strip_chains(forked);
        strip_chains(parent);
        CHECK_STR(forked, parent);
        free(parent);
        lls_string_free(forked);
    }
    lls_session_free(child);
    lls_session_free(s);
    lls_string_free(before);
    unlink(path);
    unlink(bad);
    unlink(child_path);
}

/* ---------------------------------------------------------------- one writer per file */

static void test_file_single_writer(void) {
    char path[128], link[128], fifo[128];
    path_in_tmp(path, sizeof path, "writer.jsonl");
    lls_session *w = NULL, *other = NULL, *r = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), S("{\"durability\":\"every-event\"}"), &w, &err));

    /* Created private: 0600 whatever the umask allows. */
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK_INT(st.st_mode & 0777, 0600);

    /* A second writer, here in the same process, is refused at open, naming the file and the
       holder. */
    EXPECT_ERR_DETAIL(lls_session_open_file(path, strlen(path), NULL, 0, &other, &err), LLS_ERR_LOCKED,
                      "the session is in use", "\"holder\":\"this process");
    CHECK(other == NULL);

    /* A reader takes no lock, refuses writes and agents, and follows the writer. */
    EXPECT_OK(lls_session_open_file(path, strlen(path), S("{\"readOnly\":true}"), &r, &err));
    CHECK_INT(event_count(r), 0);
    EXPECT_ERR(lls_session_append(r, S(NOTE), NULL, &err), LLS_ERR_READ_ONLY, "opened read-only");
    lls_agent *a = NULL;
    EXPECT_ERR(lls_agent_new(r, S("{\"config\":{\"provider\":\"p\",\"model\":\"m\"}}"), &a, &err), LLS_ERR_READ_ONLY,
               "run an agent instance");
    CHECK(a == NULL);
    EXPECT_OK(lls_session_append(w, S(NOTE), NULL, &err));
    EXPECT_OK(lls_session_append(w, S(CONTEXT), NULL, &err));
    uint64_t fresh = 0;
    EXPECT_OK(lls_session_refresh(r, &fresh, &err));
    CHECK_INT(fresh, 2);
    char *mine = events_of(w);
    CHECK_UNCHANGED(r, mine);
    /* A record the writer is still writing is not read yet, and is no error. */
    append_raw(path, "{\"type\":\"host/no");
    EXPECT_OK(lls_session_refresh(r, &fresh, &err));
    CHECK_INT(fresh, 0);
    char *stats = NULL;
    EXPECT_OK(lls_session_stats(r, &stats, NULL, &err));
    CHECK_CONTAINS(stats, "\"readOnly\":true");
    CHECK_CONTAINS(stats, "\"chainHead\":\"");
    lls_string_free(stats);
    lls_session_free(r);
    lls_session_free(w);

    /* The lock goes with the handle: a new writer opens (and cuts the torn record, keeping it in
       a sidecar file named in the load report). */
    EXPECT_OK(lls_session_open_file(path, strlen(path), NULL, 0, &w, &err));
    CHECK_UNCHANGED(w, mine);
    char *report = NULL;
    EXPECT_OK(lls_session_load_report(w, &report, NULL, &err));
    CHECK_CONTAINS(report, "\"cutSavedTo\":\"");
    CHECK_CONTAINS(report, ".cut-");
    lls_string_free(report);
    lls_session_free(w);
    lls_string_free(mine);

    /* A read-only open creates nothing. */
    char missing[128];
    path_in_tmp(missing, sizeof missing, "missing.jsonl");
    EXPECT_ERR(lls_session_open_file(missing, strlen(missing), S("{\"readOnly\":true}"), &r, &err), LLS_ERR_STORAGE, "No such file");
    CHECK(access(missing, F_OK) != 0);

    /* The mode of a created log can be chosen; a bad one is refused. */
    char shared[128];
    path_in_tmp(shared, sizeof shared, "shared.jsonl");
    mode_t old = umask(022);
    EXPECT_OK(lls_session_open_file(shared, strlen(shared), S("{\"mode\":\"0640\"}"), &w, &err));
    umask(old);
    CHECK(stat(shared, &st) == 0);
    CHECK_INT(st.st_mode & 0777, 0640);
    lls_session_free(w);
    EXPECT_ERR(lls_session_open_file(shared, strlen(shared), S("{\"mode\":\"rw\"}"), &w, &err), LLS_ERR_INVALID_INPUT, "opts.mode");

    /* Symbolic links are not followed, dangling or not: nothing is created through them. */
    path_in_tmp(link, sizeof link, "link.jsonl");
    CHECK(symlink(path, link) == 0);
    EXPECT_ERR(lls_session_open_file(link, strlen(link), NULL, 0, &w, &err), LLS_ERR_STORAGE, "symbolic link");
    unlink(link);
    CHECK(symlink(missing, link) == 0);
    EXPECT_ERR(lls_session_open_file(link, strlen(link), NULL, 0, &w, &err), LLS_ERR_STORAGE, "symbolic link");
    CHECK(access(missing, F_OK) != 0);
    unlink(link);

    /* A FIFO is refused at once (no wait for a writer), as is a device: open and verify. */
    path_in_tmp(fifo, sizeof fifo, "pipe.jsonl");
    CHECK(mkfifo(fifo, 0600) == 0);
    EXPECT_ERR(lls_session_open_file(fifo, strlen(fifo), NULL, 0, &w, &err), LLS_ERR_STORAGE, "not a regular file (a FIFO)");
    char *out = NULL;
    EXPECT_ERR(lls_verify_file(fifo, strlen(fifo), &out, NULL, &err), LLS_ERR_STORAGE, "not a regular file (a FIFO)");
    EXPECT_ERR(lls_verify_file(S("/dev/zero"), &out, NULL, &err), LLS_ERR_STORAGE, "not a regular file (a character device)");
    CHECK(out == NULL);
    unlink(fifo);
    unlink(shared);
    /* Sidecar files of the cut records. */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -f %s %s.cut-*", path, path);
    CHECK(system(cmd) == 0);
}

/* ---------------------------------------------------------------- host stores */

/* A host store in C: records kept as JSON string literals in an array. */
typedef struct {
    char **records;
    size_t n;
    size_t cap;
    bool last_complete;
    bool fail_appends;
    bool fail_sync;
    bool pending_appends;
    bool conflict_appends; /* answer appends with {"conflict": ...} (another writer was first) */
    const char *load_reply; /* replaces the load reply when set */
    int loads, appends, syncs, undos, cuts, frees;
    /* reentrancy probe: call into the stored session from inside the callback */
    lls_session *session;
    bool probe;
    lls_status probe_status;
    char probe_message[256];
    pthread_t worker;
    bool worker_started;
} host_store;

static void store_init(host_store *st) {
    memset(st, 0, sizeof *st);
    st->last_complete = true;
    st->probe_status = -1;
}

static void store_push(host_store *st, const char *lit, size_t len) {
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 8;
        st->records = realloc(st->records, st->cap * sizeof *st->records);
    }
    char *copy = malloc(len + 1);
    memcpy(copy, lit, len);
    copy[len] = '\0';
    st->records[st->n++] = copy;
}

/* {"op":"append",...,"header"?:"...","records":["...",...],"seq":n,...}: stores the header
   literal, then each record literal, as the records of the batch. */
static void store_push_batch(host_store *st, const char *in) {
    const char *h = strstr(in, "\"header\":\"");
    if (h != NULL) {
        h += strlen("\"header\":");
        store_push(st, h, literal_len(h));
    }
    const char *r = strstr(in, "\"records\":[") + strlen("\"records\":[");
    while (*r == '"') {
        size_t n = literal_len(r);
        store_push(st, r, n);
        r += n;
        if (*r == ',') {
            r++;
        }
    }
}

static void store_truncate(host_store *st, size_t n) {
    while (st->n > n) {
        free(st->records[--st->n]);
    }
}

static void store_clear(host_store *st) {
    store_truncate(st, 0);
    free(st->records);
    st->records = NULL;
    st->cap = 0;
}

static void store_free(void *userdata) {
    ((host_store *)userdata)->frees++;
}

static void *complete_true(void *arg) {
    lls_reply_complete(arg, S("true"), NULL);
    return NULL;
}

static int32_t store_cb(void *userdata, const char *in, size_t in_len, lls_reply *reply) {
    host_store *st = userdata;
    (void)in_len;
    if (strstr(in, "\"op\":\"load\"") != NULL) {
        st->loads++;
        if (st->load_reply != NULL) {
            lls_reply_set_json(reply, st->load_reply, strlen(st->load_reply), NULL);
            return LLS_CB_OK;
        }
        size_t cap = 64;
        for (size_t i = 0; i < st->n; i++) {
            cap += strlen(st->records[i]) + 1;
        }
        char *buf = malloc(cap);
        size_t at = (size_t)snprintf(buf, cap, "{\"records\":[");
        for (size_t i = 0; i < st->n; i++) {
            at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? "," : "", st->records[i]);
        }
        snprintf(buf + at, cap - at, "],\"lastComplete\":%s}", st->last_complete ? "true" : "false");
        lls_reply_set_json(reply, buf, strlen(buf), NULL);
        free(buf);
        return LLS_CB_OK;
    }
    if (strstr(in, "\"op\":\"append\"") != NULL) {
        st->appends++;
        if (st->probe && st->session != NULL) {
            char *out = NULL;
            lls_error *err = NULL;
            st->probe_status = lls_session_events(st->session, 0, UINT64_MAX, &out, NULL, &err);
            snprintf(st->probe_message, sizeof st->probe_message, "%s", lls_error_message(err));
            lls_error_free(err);
            lls_string_free(out);
        }
        if (st->fail_appends) {
            lls_reply_fail(reply, S("disk full"), NULL);
            return LLS_CB_ERROR;
        }
        if (st->conflict_appends) {
            lls_reply_set_json(reply, S("{\"conflict\":\"seq taken\"}"), NULL);
            return LLS_CB_OK;
        }
        /* A conditional append: the seq must be the number of events stored. */
        if (st->n > 0 && (size_t)json_int(in, "seq") != st->n - 1) {
            lls_reply_set_json(reply, S("{\"conflict\":\"seq is not the next one\"}"), NULL);
            return LLS_CB_OK;
        }
        store_push_batch(st, in);
        if (st->pending_appends) {
            st->worker_started = pthread_create(&st->worker, NULL, complete_true, reply) == 0;
            return LLS_CB_PENDING;
        }
        lls_reply_set_json(reply, S("true"), NULL);
        return LLS_CB_OK;
    }
    if (strstr(in, "\"op\":\"sync\"") != NULL) {
        st->syncs++;
        if (st->fail_sync) {
            lls_reply_fail(reply, S("fsync failed"), NULL);
            return LLS_CB_ERROR;
        }
        lls_reply_set_json(reply, S("null"), NULL);
        return LLS_CB_OK;
    }
    if (strstr(in, "\"op\":\"undo\"") != NULL) {
        st->undos++;
        store_truncate(st, (size_t)json_int(in, "from"));
        lls_reply_set_json(reply, S("true"), NULL);
        return LLS_CB_OK;
    }
    if (strstr(in, "\"op\":\"cut\"") != NULL) {
        st->cuts++;
        store_truncate(st, (size_t)json_int(in, "keep"));
        lls_reply_set_json(reply, S("{\"savedTo\":\"quarantine\"}"), NULL);
        return LLS_CB_OK;
    }
    lls_reply_fail(reply, S("unknown op"), NULL);
    return LLS_CB_ERROR;
}

static void join_worker(host_store *st) {
    if (st->worker_started) {
        pthread_join(st->worker, NULL);
        st->worker_started = false;
    }
}

static void test_host_store(void) {
    host_store st;
    store_init(&st);
    lls_session *s = NULL;
    EXPECT_OK(lls_session_open_store(store_cb, &st, store_free, S("{\"id\":\"hosted\",\"durability\":\"every-event\"}"), &s, &err));
    CHECK(st.loads >= 1);
    CHECK_INT(st.n, 1); /* the session header */
    CHECK_CONTAINS(st.records[0], "llmsession");
    EXPECT_OK(lls_session_append(s, S(NOTE), NULL, &err));
    EXPECT_OK(lls_session_append(s, S(CONTEXT), NULL, &err));
    CHECK_INT(st.n, 3);
    CHECK(st.syncs >= 3);

    /* A failing append is a storage error; nothing changes. */
    char *before = events_of(s);
    st.fail_appends = true;
    EXPECT_ERR_DETAIL(lls_session_append(s, S(NOTE), NULL, &err), LLS_ERR_STORAGE,
                      "host store `append`: host callback failed: disk full", "\"op\":\"append\"");
    st.fail_appends = false;
    CHECK_UNCHANGED(s, before);
    CHECK_INT(st.n, 3);

    /* A failing sync (durability every-event) undoes the append again (the failed append above
       was undone too: its reply may have been lost after the write). */
    CHECK_INT(st.undos, 1);
    st.undos = 0;
    st.fail_sync = true;
    EXPECT_ERR(lls_session_append(s, S(NOTE), NULL, &err), LLS_ERR_STORAGE, "host store `sync`: host callback failed: fsync failed");
    CHECK_INT(st.undos, 1);
    EXPECT_ERR(lls_session_sync(s, &err), LLS_ERR_STORAGE, "fsync failed");
    st.fail_sync = false;
    CHECK_UNCHANGED(s, before);
    CHECK_INT(st.n, 3);

    /* A refused (conflicting) append: LLS_ERR_CONFLICT, nothing changes, and the handle appends
       nothing more until it is refreshed. */
    st.conflict_appends = true;
    EXPECT_ERR_DETAIL(lls_session_append(s, S(NOTE), NULL, &err), LLS_ERR_CONFLICT, "seq taken", "\"seq\":2");
    st.conflict_appends = false;
    CHECK_UNCHANGED(s, before);
    EXPECT_ERR(lls_session_append(s, S(NOTE), NULL, &err), LLS_ERR_CONFLICT, "until it is refreshed or reopened");
    CHECK_INT(st.n, 3);
    uint64_t fresh = 99;
    EXPECT_OK(lls_session_refresh(s, &fresh, &err));
    CHECK_INT(fresh, 0);

    /* The store callback may not call into its own session (it is locked): refused. */
    st.session = s;
    st.probe = true;
    EXPECT_OK(lls_session_append(s, S(NOTE), NULL, &err));
    st.probe = false;
    CHECK_INT(st.probe_status, LLS_ERR_OUT_OF_ORDER);
    CHECK(strstr(st.probe_message, "a store callback may not call into the session it stores") != NULL);

    /* A pending append completed by another thread. */
    st.pending_appends = true;
    EXPECT_OK(lls_session_append(s, S(NOTE), NULL, &err));
    join_worker(&st);
    st.pending_appends = false;
    CHECK_INT(st.n, 5);
    lls_string_free(before);
    before = events_of(s);
    CHECK_INT(st.frees, 0);
    lls_session_free(s);
    CHECK_INT(st.frees, 1); /* userdata_free exactly once, when the session goes */

    /* Reopen from the same records: the same events. */
    st.frees = 0;
    s = NULL;
    EXPECT_OK(lls_session_open_store(store_cb, &st, store_free, NULL, 0, &s, &err));
    CHECK_UNCHANGED(s, before);
    lls_session_free(s);
    CHECK_INT(st.frees, 1);

    /* A torn last record is cut (moved to the store's quarantine) and reported. */
    store_push(&st, S("\"{\\\"type\\\":\\\"host/no\""));
    st.last_complete = false;
    st.frees = 0;
    st.cuts = 0;
    s = NULL;
    EXPECT_OK(lls_session_open_store(store_cb, &st, store_free, NULL, 0, &s, &err));
    CHECK_UNCHANGED(s, before);
    CHECK_INT(st.cuts, 1);
    CHECK_INT(st.n, 5);
    char *t = NULL;
    EXPECT_OK(lls_session_load_report(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"cutRecords\":1");
    CHECK_CONTAINS(t, "\"cutAtLine\":6");
    CHECK_CONTAINS(t, "\"cutSavedTo\":\"quarantine\"");
    lls_string_free(t);
    lls_session_free(s);
    CHECK_INT(st.frees, 1);
    st.last_complete = true;

    /* A store that says another writer holds the session: LLS_ERR_LOCKED at open. */
    st.load_reply = "{\"locked\":\"worker 7 holds the lease\"}";
    st.frees = 0;
    s = NULL;
    EXPECT_ERR(lls_session_open_store(store_cb, &st, store_free, NULL, 0, &s, &err), LLS_ERR_LOCKED, "worker 7 holds the lease");
    CHECK(s == NULL);
    CHECK_INT(st.frees, 1);
    st.load_reply = NULL;

    /* Garbage load replies: a storage error; userdata freed once. */
    const char *garbage[] = {"{\"records\":[1]}", "{\"records\":\"x\"}", "[]", "{\"records\":[],\"extra\":1}"};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        st.load_reply = garbage[i];
        st.frees = 0;
        s = NULL;
        EXPECT_ERR(lls_session_open_store(store_cb, &st, store_free, NULL, 0, &s, &err), LLS_ERR_STORAGE,
                   "host store `load` replied with unusable data");
        CHECK(s == NULL);
        CHECK_INT(st.frees, 1);
    }
    st.load_reply = "{\"records\":[\"{nope\"]}";
    st.frees = 0;
    EXPECT_ERR(lls_session_open_store(store_cb, &st, store_free, NULL, 0, &s, &err), LLS_ERR_CORRUPT_LOG, "line 1");
    CHECK_INT(st.frees, 1);
    st.load_reply = NULL;

    /* Registration failures free the userdata exactly once. */
    st.frees = 0;
    EXPECT_ERR(lls_session_open_store(NULL, &st, store_free, NULL, 0, &s, &err), LLS_ERR_NULL_POINTER, "argument `store` is NULL");
    EXPECT_ERR(lls_session_open_store(store_cb, &st, store_free, NULL, 0, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR(lls_session_open_store(store_cb, &st, store_free, S("{\"id\":"), &s, &err), LLS_ERR_MALFORMED_JSON, "opts_json");
    EXPECT_ERR(lls_session_open_store(store_cb, &st, store_free, S("{\"id\":[]}"), &s, &err), LLS_ERR_INVALID_INPUT, "opts.id");
    CHECK_INT(st.frees, 4);
    CHECK(s == NULL);

    /* A store that fails on the very first write: creation fails cleanly. */
    host_store empty;
    store_init(&empty);
    empty.fail_appends = true;
    EXPECT_ERR(lls_session_open_store(store_cb, &empty, store_free, NULL, 0, &s, &err), LLS_ERR_STORAGE, "disk full");
    CHECK_INT(empty.frees, 1);
    store_clear(&empty);

    lls_string_free(before);
    store_clear(&st);
}

static void test_no_handle_leaks(void) {
    CHECK_INT(lls_live_handle_count(), 0);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lls-session-test-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_memory_session);
    RUN(test_session_bad_inputs);
    RUN(test_file_session);
    RUN(test_file_single_writer);
    RUN(test_host_store);
    RUN(test_no_handle_leaks);
    /* The directory also holds the sidecar files of records cut on open. */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    return check_report();
}
