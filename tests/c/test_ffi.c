/* C tests of the llmsession ABI infrastructure: errors, buffers, handles, cancel tokens,
 * callbacks and replies, versions. Built and run by `make test-c` against the shared and the
 * static library under ASan+UBSan, and once under valgrind. */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "llmsession.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

/* How many times any userdata_free below ran, and how many it should have. */
static int userdata_frees;
static int userdata_expected;

static void count_free(void *userdata) {
    (void)userdata;
    userdata_frees++;
}

static void heap_free(void *userdata) {
    userdata_frees++;
    free(userdata);
}

/* The error's detail JSON contains `needle`. */
static void check_detail(const lls_error *err, const char *needle) {
    CHECK_CONTAINS(lls_error_detail(err), needle);
}

/* Invokes `cb` through lls_callback_invoke on `in`, counting the userdata registration. */
static lls_status invoke(lls_callback_fn cb, void *ud, const char *in, const lls_cancel *cancel,
                         char **out, size_t *out_len, lls_error **err) {
    userdata_expected++;
    return lls_callback_invoke(cb, ud, count_free, in, in ? strlen(in) : 0, cancel, out, out_len,
                               err);
}

/* ---------------------------------------------------------------- callbacks */

/* What a callback should do, and what it saw. */
typedef struct {
    int mode;
    const char *answer;  /* JSON (or bytes) to answer with */
    size_t answer_len;   /* used when answer has embedded bytes; 0 = strlen */
    lls_status status1;  /* status of the first lls_reply_* call */
    lls_status status2;  /* status of a second lls_reply_* call, if any */
    bool input_nul_terminated;
    size_t input_len;
    lls_reply *reply;    /* kept for pending answers */
    /* handing the reply to another thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool handed;
    pthread_t worker;
    bool worker_started;
} cb_state;

enum {
    MODE_ECHO,          /* set_json(input), LLS_CB_OK */
    MODE_ANSWER,        /* set_json(answer), LLS_CB_OK */
    MODE_ANSWER_TWICE,  /* set_json(answer) twice, LLS_CB_OK */
    MODE_FAIL,          /* fail(answer), LLS_CB_ERROR */
    MODE_ERROR_BARE,    /* LLS_CB_ERROR without a message */
    MODE_OK_NO_REPLY,   /* LLS_CB_OK without answering */
    MODE_UNKNOWN_CODE,  /* returns 42 */
    MODE_NULL_JSON,     /* set_json(NULL), LLS_CB_OK */
    MODE_PENDING_THREAD_COMPLETE, /* a thread completes with answer */
    MODE_PENDING_THREAD_FAIL,     /* a thread fails with answer */
    MODE_PENDING_HAND_OFF,        /* hands the reply to the test (signal), returns PENDING */
    MODE_COMPLETE_THEN_PENDING,   /* complete(answer) inside, then LLS_CB_PENDING */
    MODE_SET_THEN_PENDING,        /* set_json(answer) inside, then LLS_CB_PENDING */
    MODE_MISTYPED_REPLY,          /* uses the reply as a cancel token, then answers */
};

static size_t answer_len(const cb_state *st) {
    return st->answer_len ? st->answer_len : strlen(st->answer);
}

static void *complete_later(void *arg) {
    cb_state *st = arg;
    if (st->mode == MODE_PENDING_THREAD_COMPLETE) {
        st->status1 = lls_reply_complete(st->reply, st->answer, answer_len(st), NULL);
        /* The handle is invalid once completed. */
        st->status2 = lls_reply_complete(st->reply, st->answer, answer_len(st), NULL);
    } else {
        st->status1 = lls_reply_fail(st->reply, st->answer, answer_len(st), NULL);
        st->status2 = lls_reply_fail(st->reply, st->answer, answer_len(st), NULL);
    }
    return NULL;
}

static int32_t test_callback(void *userdata, const char *in, size_t in_len, lls_reply *reply) {
    cb_state *st = userdata;
    st->input_len = in_len;
    st->input_nul_terminated = in[in_len] == '\0' && strlen(in) == in_len;
    switch (st->mode) {
    case MODE_ECHO:
        st->status1 = lls_reply_set_json(reply, in, in_len, NULL);
        return LLS_CB_OK;
    case MODE_ANSWER:
        st->status1 = lls_reply_set_json(reply, st->answer, answer_len(st), NULL);
        return LLS_CB_OK;
    case MODE_ANSWER_TWICE:
        st->status1 = lls_reply_set_json(reply, st->answer, answer_len(st), NULL);
        st->status2 = lls_reply_set_json(reply, "[2]", 3, NULL);
        return LLS_CB_OK;
    case MODE_FAIL:
        st->status1 = lls_reply_fail(reply, st->answer, answer_len(st), NULL);
        return LLS_CB_ERROR;
    case MODE_ERROR_BARE:
        return LLS_CB_ERROR;
    case MODE_OK_NO_REPLY:
        return LLS_CB_OK;
    case MODE_UNKNOWN_CODE:
        return 42;
    case MODE_NULL_JSON:
        st->status1 = lls_reply_set_json(reply, NULL, 0, NULL);
        return LLS_CB_OK;
    case MODE_PENDING_THREAD_COMPLETE:
    case MODE_PENDING_THREAD_FAIL:
        st->reply = reply;
        st->worker_started = pthread_create(&st->worker, NULL, complete_later, st) == 0;
        return LLS_CB_PENDING;
    case MODE_PENDING_HAND_OFF:
        pthread_mutex_lock(&st->mu);
        st->reply = reply;
        st->handed = true;
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&st->mu);
        return LLS_CB_PENDING;
    case MODE_COMPLETE_THEN_PENDING:
        st->status1 = lls_reply_complete(reply, st->answer, answer_len(st), NULL);
        return LLS_CB_PENDING;
    case MODE_SET_THEN_PENDING:
        st->status1 = lls_reply_set_json(reply, st->answer, answer_len(st), NULL);
        return LLS_CB_PENDING;
    case MODE_MISTYPED_REPLY: {
        lls_error *err = NULL;
        st->status2 = lls_cancel_trip((const lls_cancel *)(void *)reply, &err);
        if (err != NULL) {
            CHECK_CONTAINS(lls_error_message(err), "is an lls_reply handle");
            lls_error_free(err);
        }
        st->status1 = lls_reply_set_json(reply, "true", 4, NULL);
        return LLS_CB_OK;
    }
    }
    return LLS_CB_ERROR;
}

static void state_init(cb_state *st, int mode, const char *answer) {
    memset(st, 0, sizeof *st);
    st->mode = mode;
    st->answer = answer ? answer : "null";
    st->status1 = -1;
    st->status2 = -1;
    st->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    st->cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
}

/* Joins the worker thread, if the callback started one. */
static void state_done(cb_state *st) {
    if (st->worker_started) {
        pthread_join(st->worker, NULL);
        st->worker_started = false;
    }
}

/* ---------------------------------------------------------------- tests */

static void test_versions(void) {
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", LLS_VERSION_MAJOR, LLS_VERSION_MINOR,
             LLS_VERSION_PATCH);
    CHECK_STR(lls_version(), expected);
    CHECK_STR(lls_version(), "0.2.0");
    CHECK_INT(lls_abi_version(), LLS_ABI_VERSION);
    CHECK_INT(lls_abi_minor(), LLS_ABI_MINOR);
    CHECK(LLS_ABI_MINOR >= 1); /* the hot path and lls_live_string_count came with minor 1 */
}

static void test_error_lifecycle(void) {
    lls_error *err = NULL;
    CHECK_INT(lls_cancel_new(NULL, &err), LLS_ERR_NULL_POINTER);
    CHECK(err != NULL);
    CHECK_INT(lls_error_code(err), LLS_ERR_NULL_POINTER);
    CHECK_STR(lls_error_message(err), "argument `out` is NULL");
    check_detail(err, "\"kind\":\"null-pointer\"");
    check_detail(err, "\"argument\":\"out\"");
    check_detail(err, "\"status\":100");
    lls_error_free(err);
    /* A freed error is detected, and freeing it again is harmless. */
    CHECK_INT(lls_error_code(err), LLS_ERR_INVALID_HANDLE);
    CHECK_CONTAINS(lls_error_message(err), "not a live lls_error");
    CHECK_CONTAINS(lls_error_detail(err), "\"kind\":\"invalid-handle\"");
    lls_error_free(err);
    lls_error_free(NULL);
    CHECK_INT(lls_error_code(NULL), LLS_ERR_NULL_POINTER);
    CHECK_CONTAINS(lls_error_message(NULL), "NULL");
    CHECK_CONTAINS(lls_error_detail(NULL), "\"kind\":\"null-pointer\"");

    /* err may be NULL: the status alone comes back. */
    CHECK_INT(lls_cancel_new(NULL, NULL), LLS_ERR_NULL_POINTER);

    /* *err is written only on failure. */
    lls_cancel *c = NULL;
    err = NULL;
    CHECK_INT(lls_cancel_new(&c, &err), LLS_OK);
    CHECK(err == NULL);
    CHECK(c != NULL);
    lls_cancel_free(c);
}

static void test_out_params_untouched_on_failure(void) {
    static char sentinel_text[] = "sentinel";
    char *out = sentinel_text;
    size_t out_len = 12345;
    lls_error *err = NULL;
    cb_state st;
    state_init(&st, MODE_ECHO, NULL);
    CHECK_INT(invoke(test_callback, &st, "{bad", NULL, &out, &out_len, &err), LLS_ERR_MALFORMED_JSON);
    CHECK(out == sentinel_text);
    CHECK_INT(out_len, 12345);
    lls_error_free(err);

    bool tripped = true;
    err = NULL;
    CHECK_INT(lls_cancel_is_tripped(NULL, &tripped, &err), LLS_ERR_NULL_POINTER);
    CHECK(tripped == true);
    CHECK_STR(lls_error_message(err), "argument `cancel` is NULL");
    lls_error_free(err);
    state_done(&st);
}

static void test_input_errors(void) {
    cb_state st;
    state_init(&st, MODE_ECHO, NULL);
    char *out = NULL;
    lls_error *err = NULL;

    userdata_expected++;
    CHECK_INT(lls_callback_invoke(test_callback, &st, count_free, NULL, 3, NULL, &out, NULL, &err),
              LLS_ERR_NULL_POINTER);
    CHECK_STR(lls_error_message(err), "argument `in_json` is NULL");
    check_detail(err, "\"argument\":\"in_json\"");
    lls_error_free(err);
    err = NULL;

    const char bad_utf8[] = "{\"a\": \"\xc3\x28\"}";
    userdata_expected++;
    CHECK_INT(lls_callback_invoke(test_callback, &st, count_free, bad_utf8, strlen(bad_utf8), NULL,
                                  &out, NULL, &err),
              LLS_ERR_INVALID_UTF8);
    CHECK_CONTAINS(lls_error_message(err), "argument `in_json` is not valid UTF-8");
    check_detail(err, "\"validUpTo\":7");
    check_detail(err, "\"kind\":\"invalid-utf8\"");
    lls_error_free(err);
    err = NULL;

    CHECK_INT(invoke(test_callback, &st, "{\n  \"a\": 1 2\n}", NULL, &out, NULL, &err),
              LLS_ERR_MALFORMED_JSON);
    CHECK_CONTAINS(lls_error_message(err), "argument `in_json`: malformed JSON");
    check_detail(err, "\"line\":2");
    check_detail(err, "\"column\":");
    check_detail(err, "\"kind\":\"malformed-json\"");
    lls_error_free(err);
    err = NULL;

    CHECK_INT(invoke(test_callback, &st, "", NULL, &out, NULL, &err), LLS_ERR_MALFORMED_JSON);
    lls_error_free(err);
    err = NULL;

    CHECK_INT(invoke(test_callback, &st, "{}", NULL, NULL, NULL, &err), LLS_ERR_NULL_POINTER);
    CHECK_STR(lls_error_message(err), "argument `out` is NULL");
    lls_error_free(err);
    err = NULL;

    /* A NULL callback is a failed registration: the userdata is still freed once. */
    userdata_expected++;
    CHECK_INT(lls_callback_invoke(NULL, &st, count_free, "{}", 2, NULL, &out, NULL, &err),
              LLS_ERR_NULL_POINTER);
    CHECK_STR(lls_error_message(err), "argument `callback` is NULL");
    lls_error_free(err);
    err = NULL;

    /* A heap userdata is released through its free function (leak checkers watch this). */
    int *heap = malloc(sizeof *heap);
    userdata_expected++;
    CHECK_INT(lls_callback_invoke(NULL, heap, heap_free, "{}", 2, NULL, &out, NULL, NULL),
              LLS_ERR_NULL_POINTER);
    /* And a NULL userdata_free is allowed. */
    state_init(&st, MODE_ECHO, NULL);
    CHECK_INT(lls_callback_invoke(test_callback, &st, NULL, "1", 1, NULL, &out, NULL, NULL), LLS_OK);
    lls_string_free(out);
    state_done(&st);
    CHECK_INT(userdata_frees, userdata_expected);
}

static void test_mistyped_and_freed_handles(void) {
    lls_cancel *c = NULL;
    lls_error *e = NULL;
    lls_error *err = NULL;
    CHECK_INT(lls_cancel_new(&c, NULL), LLS_OK);
    CHECK_INT(lls_cancel_new(NULL, &e), LLS_ERR_NULL_POINTER); /* an error object to misuse */

    /* An lls_cancel where an lls_error is expected. */
    CHECK_INT(lls_error_code((const lls_error *)(void *)c), LLS_ERR_INVALID_HANDLE);
    CHECK_CONTAINS(lls_error_message((const lls_error *)(void *)c), "not a live lls_error");
    lls_error_free((lls_error *)(void *)c); /* ignored: not an lls_error */
    bool tripped = true;
    CHECK_INT(lls_cancel_is_tripped(c, &tripped, NULL), LLS_OK);
    CHECK(!tripped);

    /* An lls_error where an lls_cancel is expected. */
    CHECK_INT(lls_cancel_trip((const lls_cancel *)(void *)e, &err), LLS_ERR_INVALID_HANDLE);
    CHECK_STR(lls_error_message(err),
              "argument `cancel` is an lls_error handle, but an lls_cancel handle is expected");
    check_detail(err, "\"expected\":\"lls_cancel\"");
    check_detail(err, "\"actual\":\"lls_error\"");
    check_detail(err, "\"kind\":\"invalid-handle\"");
    lls_error_free(err);
    err = NULL;
    lls_cancel_free((lls_cancel *)(void *)e); /* ignored: not an lls_cancel */
    CHECK_INT(lls_error_code(e), LLS_ERR_NULL_POINTER); /* e is still alive */

    /* An lls_cancel where an lls_reply is expected. */
    CHECK_INT(lls_reply_complete((lls_reply *)(void *)c, "1", 1, &err), LLS_ERR_INVALID_HANDLE);
    CHECK_CONTAINS(lls_error_message(err), "is an lls_cancel handle");
    lls_error_free(err);
    err = NULL;

    /* A pointer llmsession never returned. */
    int not_a_handle = 0;
    CHECK_INT(lls_cancel_trip((const lls_cancel *)(void *)&not_a_handle, &err), LLS_ERR_INVALID_HANDLE);
    CHECK_CONTAINS(lls_error_message(err), "is not a live lls_cancel handle");
    lls_error_free(err);
    err = NULL;

    /* A freed handle. */
    lls_cancel_free(c);
    CHECK_INT(lls_cancel_trip(c, &err), LLS_ERR_INVALID_HANDLE);
    CHECK_CONTAINS(lls_error_message(err), "it was freed");
    lls_error_free(err);
    err = NULL;
    CHECK_INT(lls_cancel_is_tripped(c, &tripped, NULL), LLS_ERR_INVALID_HANDLE);
    lls_cancel_free(c); /* double free ignored */
    lls_cancel_free(NULL);

    /* A NULL cancel where one is required. */
    CHECK_INT(lls_cancel_trip(NULL, NULL), LLS_ERR_NULL_POINTER);
    lls_error_free(e);
}

static void test_strings(void) {
    cb_state st;
    state_init(&st, MODE_ANSWER, "{\"text\":\"h\\u00e9llo\",\"n\":[1,2,3]}");
    char *out = NULL;
    size_t len = 0;
    size_t strings = lls_live_string_count();
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, &len, NULL), LLS_OK);
    CHECK_STR(out, "{\"text\":\"h\\u00e9llo\",\"n\":[1,2,3]}");
    CHECK_INT(len, strlen(st.answer));
    CHECK(out != NULL && out[len] == '\0');
    CHECK_INT(lls_live_string_count(), strings + 1); /* handed out, not freed yet */
    lls_string_free(out);
    CHECK_INT(lls_live_string_count(), strings);
    lls_string_free(NULL);
    CHECK_INT(lls_live_string_count(), strings);

    /* UTF-8 passes through untouched, and out_len may be NULL. */
    state_init(&st, MODE_ANSWER, "\"caf\xc3\xa9\"");
    out = NULL;
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, NULL), LLS_OK);
    CHECK_STR(out, "\"caf\xc3\xa9\"");
    lls_string_free(out);
    state_done(&st);
}

/* ------------------------------------------------------------ cancel tokens */

static void *trip_thread(void *arg) {
    lls_status *st = malloc(sizeof *st);
    *st = lls_cancel_trip(arg, NULL);
    return st;
}

static void test_cancel_from_other_threads(void) {
    lls_cancel *c = NULL;
    CHECK_INT(lls_cancel_new(&c, NULL), LLS_OK);
    bool tripped = true;
    CHECK_INT(lls_cancel_is_tripped(c, &tripped, NULL), LLS_OK);
    CHECK(!tripped);
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        CHECK_INT(pthread_create(&threads[i], NULL, trip_thread, c), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *res = NULL;
        pthread_join(threads[i], &res);
        CHECK_INT(*(lls_status *)res, LLS_OK);
        free(res);
    }
    CHECK_INT(lls_cancel_is_tripped(c, &tripped, NULL), LLS_OK);
    CHECK(tripped);
    CHECK_INT(lls_cancel_trip(c, NULL), LLS_OK); /* idempotent */
    CHECK_INT(lls_cancel_is_tripped(c, NULL, NULL), LLS_ERR_NULL_POINTER);
    lls_cancel_free(c);
}

/* ------------------------------------------------------- synchronous replies */

static void test_sync_replies(void) {
    cb_state st;
    char *out = NULL;
    lls_error *err = NULL;

    state_init(&st, MODE_ECHO, NULL);
    CHECK_INT(invoke(test_callback, &st, "{\"ping\":1}", NULL, &out, NULL, &err), LLS_OK);
    CHECK(err == NULL);
    CHECK_STR(out, "{\"ping\":1}");
    CHECK(st.input_nul_terminated);
    CHECK_INT(st.input_len, 10);
    CHECK_INT(st.status1, LLS_OK);
    lls_string_free(out);
    out = NULL;

    /* Answered with lls_reply_complete inside the callback, then LLS_CB_PENDING: no wait. */
    state_init(&st, MODE_COMPLETE_THEN_PENDING, "[\"early\"]");
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, NULL), LLS_OK);
    CHECK_STR(out, "[\"early\"]");
    CHECK_INT(st.status1, LLS_OK);
    lls_string_free(out);
    out = NULL;

    /* Answered with lls_reply_set_json, then LLS_CB_PENDING: the answer is used. */
    state_init(&st, MODE_SET_THEN_PENDING, "7");
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, NULL), LLS_OK);
    CHECK_STR(out, "7");
    lls_string_free(out);
    out = NULL;

    /* The reply is a handle like the others: misusing it is detected. */
    state_init(&st, MODE_MISTYPED_REPLY, NULL);
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, NULL), LLS_OK);
    CHECK_INT(st.status2, LLS_ERR_INVALID_HANDLE);
    CHECK_STR(out, "true");
    lls_string_free(out);
    out = NULL;

    /* Failure with a message. */
    state_init(&st, MODE_FAIL, "disk on fire");
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_ERR_LISTENER);
    CHECK_INT(st.status1, LLS_OK);
    CHECK_STR(lls_error_message(err), "host callback failed: disk on fire");
    check_detail(err, "\"callback\":\"failed\"");
    check_detail(err, "\"hostMessage\":\"disk on fire\"");
    check_detail(err, "\"kind\":\"listener\"");
    CHECK(out == NULL);
    lls_error_free(err);
    err = NULL;

    /* Failure without a message. */
    state_init(&st, MODE_ERROR_BARE, NULL);
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_ERR_LISTENER);
    CHECK_STR(lls_error_message(err), "host callback failed (it gave no message)");
    lls_error_free(err);
    state_done(&st);
}

/* ------------------------------------------------------------ garbage replies */

static void test_garbage_replies(void) {
    cb_state st;
    char *out = NULL;
    lls_error *err = NULL;

    state_init(&st, MODE_ANSWER, "{\"a\": \"\xff\"}");
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_ERR_LISTENER);
    CHECK_INT(st.status1, LLS_ERR_INVALID_UTF8);
    CHECK_STR(lls_error_message(err), "host callback replied with invalid UTF-8 (first invalid byte at offset 7)");
    check_detail(err, "\"callback\":\"invalid-utf8\"");
    lls_error_free(err);
    err = NULL;

    state_init(&st, MODE_ANSWER, "{\"a\": [1, 2}");
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_ERR_LISTENER);
    CHECK_INT(st.status1, LLS_ERR_MALFORMED_JSON);
    CHECK_CONTAINS(lls_error_message(err), "host callback replied with malformed JSON");
    check_detail(err, "\"callback\":\"malformed-json\"");
    check_detail(err, "\"line\":1");
    lls_error_free(err);
    err = NULL;

    state_init(&st, MODE_NULL_JSON, NULL);
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_ERR_LISTENER);
    CHECK_INT(st.status1, LLS_ERR_NULL_POINTER);
    check_detail(err, "\"callback\":\"null-reply\"");
    lls_error_free(err);
    err = NULL;

    state_init(&st, MODE_UNKNOWN_CODE, NULL);
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_ERR_LISTENER);
    CHECK_CONTAINS(lls_error_message(err), "host callback returned 42, which is not LLS_CB_OK");
    check_detail(err, "\"callback\":\"unknown-code\"");
    check_detail(err, "\"code\":42");
    lls_error_free(err);
    err = NULL;

    state_init(&st, MODE_OK_NO_REPLY, NULL);
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_ERR_LISTENER);
    CHECK_CONTAINS(lls_error_message(err), "returned LLS_CB_OK without answering its reply");
    check_detail(err, "\"callback\":\"no-reply\"");
    lls_error_free(err);
    err = NULL;

    /* A second answer is refused; the first stands. */
    state_init(&st, MODE_ANSWER_TWICE, "[1]");
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_OK);
    CHECK_INT(st.status1, LLS_OK);
    CHECK_INT(st.status2, LLS_ERR_REPLY_STATE);
    CHECK_STR(out, "[1]");
    lls_string_free(out);
    state_done(&st);
}

/* ------------------------------------------------------------ pending replies */

static void test_pending_completed_by_another_thread(void) {
    cb_state st;
    char *out = NULL;
    size_t len = 0;
    lls_error *err = NULL;

    state_init(&st, MODE_PENDING_THREAD_COMPLETE, "{\"summary\":\"done later\"}");
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, &len, &err), LLS_OK);
    CHECK(st.worker_started);
    state_done(&st); /* joins the worker */
    CHECK_STR(out, "{\"summary\":\"done later\"}");
    CHECK_INT(len, strlen(st.answer));
    CHECK_INT(st.status1, LLS_OK);
    CHECK_INT(st.status2, LLS_ERR_INVALID_HANDLE); /* completed replies are gone */
    lls_string_free(out);
    out = NULL;

    state_init(&st, MODE_PENDING_THREAD_FAIL, "model unreachable");
    CHECK_INT(invoke(test_callback, &st, "{}", NULL, &out, NULL, &err), LLS_ERR_LISTENER);
    state_done(&st);
    CHECK_STR(lls_error_message(err), "host callback failed: model unreachable");
    CHECK_INT(st.status1, LLS_OK);
    CHECK_INT(st.status2, LLS_ERR_INVALID_HANDLE);
    CHECK(out == NULL);
    lls_error_free(err);
}

typedef struct {
    cb_state *st;
    lls_cancel *cancel;
    lls_status trip_status;
} canceller_args;

/* Waits until the callback has handed its reply over (it is pending), then trips the token. */
static void *canceller(void *arg) {
    canceller_args *a = arg;
    pthread_mutex_lock(&a->st->mu);
    while (!a->st->handed) {
        pthread_cond_wait(&a->st->cv, &a->st->mu);
    }
    pthread_mutex_unlock(&a->st->mu);
    a->trip_status = lls_cancel_trip(a->cancel, NULL);
    return NULL;
}

static void test_pending_abandoned_then_cancelled(void) {
    cb_state st;
    char *out = NULL;
    lls_error *err = NULL;
    lls_cancel *cancel = NULL;
    CHECK_INT(lls_cancel_new(&cancel, NULL), LLS_OK);

    state_init(&st, MODE_PENDING_HAND_OFF, NULL);
    canceller_args args = {&st, cancel, -1};
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, canceller, &args), 0);
    /* Blocks until the other thread trips the token. */
    CHECK_INT(invoke(test_callback, &st, "{}", cancel, &out, NULL, &err), LLS_ERR_CANCELLED);
    pthread_join(t, NULL);
    CHECK_INT(args.trip_status, LLS_OK);
    CHECK_CONTAINS(lls_error_message(err), "cancelled while waiting");
    check_detail(err, "\"kind\":\"cancelled\"");
    CHECK(out == NULL);
    lls_error_free(err);
    err = NULL;

    /* The abandoned reply must still be completed once; the late answer is discarded. */
    CHECK(st.reply != NULL);
    CHECK_INT(lls_reply_complete(st.reply, "{\"late\":true}", 13, &err), LLS_OK);
    CHECK(err == NULL);
    CHECK_INT(lls_reply_complete(st.reply, "{}", 2, NULL), LLS_ERR_INVALID_HANDLE);
    state_done(&st);

    /* Already tripped before the call: a pending callback ends at once. */
    state_init(&st, MODE_PENDING_HAND_OFF, NULL);
    CHECK_INT(invoke(test_callback, &st, "{}", cancel, &out, NULL, &err), LLS_ERR_CANCELLED);
    lls_error_free(err);
    err = NULL;
    CHECK_INT(lls_reply_fail(st.reply, NULL, 0, &err), LLS_OK);
    state_done(&st);

    /* A tripped token does not stop a synchronous answer. */
    state_init(&st, MODE_ECHO, NULL);
    CHECK_INT(invoke(test_callback, &st, "[]", cancel, &out, NULL, NULL), LLS_OK);
    CHECK_STR(out, "[]");
    lls_string_free(out);
    state_done(&st);

    /* A freed token cannot be passed. */
    lls_cancel_free(cancel);
    CHECK_INT(invoke(test_callback, &st, "[]", cancel, &out, NULL, &err), LLS_ERR_INVALID_HANDLE);
    CHECK_CONTAINS(lls_error_message(err), "argument `cancel` is not a live lls_cancel handle");
    lls_error_free(err);
}

static void test_userdata_freed_exactly_once(void) {
    CHECK_INT(userdata_frees, userdata_expected);
    CHECK(userdata_expected > 20);
}

/* Every handle created above was freed, or (replies) answered. */
static void test_no_handle_leaks(void) {
    CHECK_INT(lls_live_handle_count(), 0);
    lls_error *err = NULL;
    CHECK_INT(lls_cancel_new(NULL, &err), LLS_ERR_NULL_POINTER);
    CHECK_INT(lls_live_handle_count(), 1);
    lls_error_free(err);
    CHECK_INT(lls_live_handle_count(), 0);
}

int main(void) {
    RUN(test_versions);
    RUN(test_error_lifecycle);
    RUN(test_out_params_untouched_on_failure);
    RUN(test_input_errors);
    RUN(test_mistyped_and_freed_handles);
    RUN(test_strings);
    RUN(test_cancel_from_other_threads);
    RUN(test_sync_replies);
    RUN(test_garbage_replies);
    RUN(test_pending_completed_by_another_thread);
    RUN(test_pending_abandoned_then_cancelled);
    RUN(test_userdata_freed_exactly_once);
    RUN(test_no_handle_leaks);
    return check_report();
}
