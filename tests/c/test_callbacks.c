/* C tests of the agent's host callbacks: failures and garbage replies, pending replies
 * completed from another thread or abandoned on cancel, reentrancy (a callback calling its
 * agent, reading and appending to the session, disposing or freeing the agent), the
 * summariser and token counter callbacks, and userdata freed exactly once. Built and run by
 * `make test-c`. */
#define _POSIX_C_SOURCE 200809L

#include "helpers.h"

static const char OPTS[] =
    "{\"config\":{\"provider\":\"anthropic\",\"model\":\"claude-test\"},\"system\":\"Be brief.\","
    "\"tools\":[{\"name\":\"ls\",\"description\":\"List files\",\"parameters\":{\"type\":\"object\"}}]}";

#define USER(text) "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"" text "\"}]}"
#define MINE USER("Rules from the C listener.")
#define CONTEXT_EVENT                                                                              \
    "{\"type\":\"user/message\",\"data\":{\"message\":" USER("Context appended by the listener.") \
    ",\"source\":\"plugin\"},\"surfaceOp\":\"append\"}"

/* ------------------------------------------------------------ a configurable listener */

enum {
    L_PREPEND,  /* [MINE, ...rest] */
    L_ANSWER,   /* set_json(answer, answer_len), LLS_CB_OK */
    L_FAIL,     /* fail(answer), LLS_CB_ERROR */
    L_CODE_42,  /* returns 42 */
    L_NO_REPLY, /* LLS_CB_OK without answering */
    L_PENDING,  /* hands the reply to another thread */
    L_REENTER,  /* calls the agent and the session from inside, then prepends */
    L_DISPOSE,  /* disposes the agent from inside, then prepends */
    L_FREE,     /* frees the agent handle from inside, then prepends */
};

typedef struct {
    int mode;
    int calls;
    int frees;
    const char *answer;
    size_t answer_len;
    handoff ho;
    lls_agent *agent;
    lls_session *session;
    /* what the reentrant calls returned */
    lls_status agent_start, agent_stats, agent_next, agent_add, agent_dispose;
    char agent_message[512];
    lls_status session_read, session_append;
    bool read_saw_turn;
    counted added; /* userdata of a registration tried from inside */
} listener;

static void listener_init(listener *l, int mode) {
    memset(l, 0, sizeof *l);
    l->mode = mode;
    handoff_init(&l->ho);
    l->agent_start = l->agent_stats = l->agent_next = l->agent_add = l->agent_dispose = -1;
    l->session_read = l->session_append = -1;
}

static void listener_free(void *ud) {
    ((listener *)ud)->frees++;
}

static int32_t reply_prepend(const char *in, lls_reply *reply) {
    size_t rest_len = 0;
    const char *rest = json_value(in, "rest", &rest_len);
    char *out = prepend_message(MINE, rest ? rest : "[]", rest ? rest_len : 2);
    lls_reply_set_json(reply, out, strlen(out), NULL);
    free(out);
    return LLS_CB_OK;
}

static int32_t never(void *ud, const char *in, size_t len, lls_reply *reply) {
    (void)ud, (void)in, (void)len, (void)reply;
    return LLS_CB_ERROR;
}

static int32_t listener_cb(void *ud, const char *in, size_t in_len, lls_reply *reply) {
    (void)in_len;
    listener *l = ud;
    l->calls++;
    switch (l->mode) {
    case L_PREPEND:
        return reply_prepend(in, reply);
    case L_ANSWER:
        lls_reply_set_json(reply, l->answer, l->answer_len ? l->answer_len : strlen(l->answer), NULL);
        return LLS_CB_OK;
    case L_FAIL:
        lls_reply_fail(reply, l->answer, strlen(l->answer), NULL);
        return LLS_CB_ERROR;
    case L_CODE_42:
        return 42;
    case L_NO_REPLY:
        return LLS_CB_OK;
    case L_PENDING:
        handoff_put(&l->ho, reply);
        return LLS_CB_PENDING;
    case L_REENTER: {
        lls_error *err = NULL;
        uint64_t turn = 0;
        l->agent_start = lls_agent_start_turn(l->agent, S(USER("nested")), &turn, &err);
        snprintf(l->agent_message, sizeof l->agent_message, "%s", lls_error_message(err));
        lls_error_free(err);
        char *out = NULL;
        l->agent_stats = lls_agent_stats(l->agent, &out, NULL, NULL);
        l->agent_next = lls_agent_next_request(l->agent, NULL, &out, NULL, NULL);
        l->added.frees = 0;
        l->agent_add = lls_agent_add_prefix_listener(l->agent, never, &l->added, counted_free, NULL);
        l->session_read = lls_session_events(l->session, 0, UINT64_MAX, &out, NULL, NULL);
        l->read_saw_turn = out != NULL && strstr(out, "turn/start") != NULL;
        lls_string_free(out);
        l->session_append = lls_session_append(l->session, S(CONTEXT_EVENT), NULL, NULL);
        return reply_prepend(in, reply);
    }
    case L_DISPOSE:
        l->agent_dispose = lls_agent_dispose(l->agent, NULL);
        return reply_prepend(in, reply);
    case L_FREE:
        lls_agent_free(l->agent);
        l->agent = NULL;
        return reply_prepend(in, reply);
    }
    return LLS_CB_ERROR;
}

/* ------------------------------------------------------------ helpers */

static lls_session *memory_session(void) {
    lls_session *s = NULL;
    CHECK_INT(lls_session_new_memory(NULL, 0, &s, NULL), LLS_OK);
    return s;
}

static lls_agent *new_agent(lls_session *s) {
    lls_agent *a = NULL;
    EXPECT_OK(lls_agent_new(s, S(OPTS), &a, &err));
    return a;
}

static void start_turn(lls_agent *a) {
    EXPECT_OK(lls_agent_start_turn(a, S(USER("Hello there, please list the files.")), NULL, &err));
}

static void finish_turn(lls_agent *a) {
    EXPECT_OK(lls_agent_record_response(
        a, S("{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Done.\"}]}}"), NULL, &err));
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
}

/* The last event's JSON (the caller frees it). */
static char *last_event(const lls_session *s) {
    int n = event_count(s);
    char *out = NULL;
    lls_session_events(s, (uint64_t)(n - 1), UINT64_MAX, &out, NULL, NULL);
    return out;
}

#define CHECK_TURN_ENDED(s, reason)                                         \
    do {                                                                    \
        char *last_ = last_event(s);                                        \
        CHECK_CONTAINS(last_, "\"type\":\"turn/end\"");                     \
        CHECK_CONTAINS(last_, "\"reason\":\"" reason "\"");                 \
        lls_string_free(last_);                                             \
    } while (0)

/* ------------------------------------------------------------ failures and garbage */

static void test_listener_failures(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    listener l;
    listener_init(&l, L_FAIL);
    l.answer = "no rules today";
    EXPECT_OK(lls_agent_add_prefix_listener(a, listener_cb, &l, listener_free, &err));
    char *env = NULL;

    start_turn(a);
    EXPECT_ERR_DETAIL(lls_agent_next_request(a, NULL, &env, NULL, &err), LLS_ERR_LISTENER,
                      "prefix listener callback: host callback failed: no rules today", "\"callback\":\"failed\"");
    CHECK(env == NULL);
    CHECK_TURN_ENDED(s, "error");
    char *t = NULL;
    EXPECT_OK(lls_agent_prefix(a, &t, NULL, &err));
    CHECK_STR(t, "null"); /* nothing cached */
    lls_string_free(t);
    EXPECT_OK(lls_session_header(s, &t, NULL, &err));
    CHECK_STR(t, "null"); /* no request was built */
    lls_string_free(t);

    /* Garbage replies: each fails the request with a reason, and the turn ends `error`. */
    static const struct {
        int mode;
        const char *answer;
        const char *message;
        const char *detail;
    } cases[] = {
        {L_ANSWER, "{\"not\":\"a list\"}", "a prefix listener returned invalid data: prefix: expected an array", "\"field\":\"prefix\""},
        {L_ANSWER, "[" USER("ok") ",{\"role\":\"robot\",\"content\":[]}]", "prefix[1].role", "\"kind\":\"listener\""},
        {L_ANSWER, "[{\"role\":\"user\"}]", "prefix[0].content: is required", "\"kind\":\"listener\""},
        {L_ANSWER, "[1,", "host callback replied with malformed JSON", "\"callback\":\"malformed-json\""},
        {L_ANSWER, "[\"\xc3\x28\"]", "host callback replied with invalid UTF-8 (first invalid byte at offset 2)", "\"callback\":\"invalid-utf8\""},
        {L_CODE_42, NULL, "host callback returned 42", "\"callback\":\"unknown-code\""},
        {L_NO_REPLY, NULL, "returned LLS_CB_OK without answering its reply", "\"callback\":\"no-reply\""},
        {L_FAIL, "", "host callback failed (it gave no message)", "\"callback\":\"failed\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        l.mode = cases[i].mode;
        l.answer = cases[i].answer;
        start_turn(a);
        EXPECT_ERR_DETAIL(lls_agent_next_request(a, NULL, &env, NULL, &err), LLS_ERR_LISTENER, cases[i].message, cases[i].detail);
        CHECK_TURN_ENDED(s, "error");
    }

    /* The next turn recomposes and works. */
    int calls = l.calls;
    l.mode = L_PREPEND;
    start_turn(a);
    EXPECT_OK(lls_agent_next_request(a, NULL, &env, NULL, &err));
    CHECK_CONTAINS(env, "Rules from the C listener.");
    CHECK_INT(l.calls, calls + 1);
    lls_string_free(env);
    finish_turn(a);
    EXPECT_OK(lls_session_verify(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"requests\":1");
    lls_string_free(t);

    lls_agent_free(a);
    CHECK_INT(l.frees, 1);
    handoff_destroy(&l.ho);
    lls_session_free(s);
}

static int32_t pre_step_fail(void *ud, const char *in, size_t len, lls_reply *reply) {
    (void)in, (void)len;
    ((counted *)ud)->frees += 100; /* counts calls in the hundreds */
    lls_reply_fail(reply, S("index not ready"), NULL);
    return LLS_CB_ERROR;
}

static void test_pre_step_failure(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    counted ud = {0};
    EXPECT_OK(lls_agent_add_pre_step_listener(a, pre_step_fail, &ud, counted_free, &err));
    start_turn(a);
    char *env = NULL;
    EXPECT_ERR_DETAIL(lls_agent_next_request(a, NULL, &env, NULL, &err), LLS_ERR_LISTENER,
                      "pre-step listener #0 failed: host callback failed: index not ready", "\"listener\":0");
    CHECK_TURN_ENDED(s, "error");
    CHECK_INT(ud.frees, 100);
    lls_agent_free(a);
    CHECK_INT(ud.frees, 101);
    lls_session_free(s);
}

/* ------------------------------------------------------------ pending replies */

typedef struct {
    listener *l;
    const char *answer;
    lls_cancel *cancel;  /* trip this instead of answering first */
    lls_agent *dispose;  /* or dispose this agent first */
    lls_status first, second;
} worker_args;

/* Takes the parked reply; optionally trips a token or disposes an agent; then answers. */
static void *worker(void *arg) {
    worker_args *w = arg;
    lls_reply *reply = handoff_take(&w->l->ho);
    if (w->cancel != NULL) {
        w->first = lls_cancel_trip(w->cancel, NULL);
    } else if (w->dispose != NULL) {
        w->first = lls_agent_dispose(w->dispose, NULL); /* waits for the interrupted call */
    }
    w->second = lls_reply_complete(reply, w->answer, strlen(w->answer), NULL);
    return NULL;
}

static void test_pending_listener_completed_by_thread(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    listener l;
    listener_init(&l, L_PENDING);
    EXPECT_OK(lls_agent_add_prefix_listener(a, listener_cb, &l, listener_free, &err));
    worker_args w = {&l, "[" USER("Rules delivered late, from another thread.") "]", NULL, NULL, -1, -1};
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, worker, &w), 0);
    start_turn(a);
    char *env = NULL;
    EXPECT_OK(lls_agent_next_request(a, NULL, &env, NULL, &err));
    pthread_join(t, NULL);
    CHECK_INT(w.second, LLS_OK);
    CHECK_CONTAINS(env, "Rules delivered late, from another thread.");
    lls_string_free(env);
    finish_turn(a);
    lls_agent_free(a);
    CHECK_INT(l.frees, 1);
    handoff_destroy(&l.ho);
    lls_session_free(s);
}

static void test_pending_listener_cancelled(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    listener l;
    listener_init(&l, L_PENDING);
    EXPECT_OK(lls_agent_add_prefix_listener(a, listener_cb, &l, listener_free, &err));
    lls_cancel *cancel = NULL;
    CHECK_INT(lls_cancel_new(&cancel, NULL), LLS_OK);
    size_t handles = lls_live_handle_count();
    worker_args w = {&l, "[" USER("too late") "]", cancel, NULL, -1, -1};
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, worker, &w), 0);
    start_turn(a);
    char *env = NULL;
    /* Blocks on the pending reply until the other thread trips the token. */
    EXPECT_ERR_DETAIL(lls_agent_next_request(a, cancel, &env, NULL, &err), LLS_ERR_CANCELLED,
                      "cancelled while waiting for a host callback's pending reply", "\"kind\":\"cancelled\"");
    pthread_join(t, NULL);
    CHECK_INT(w.first, LLS_OK);
    CHECK_INT(w.second, LLS_OK); /* the abandoned reply was answered late, and discarded */
    CHECK(env == NULL);
    CHECK_TURN_ENDED(s, "aborted");
    CHECK_INT(lls_live_handle_count(), handles);
    char *t2 = NULL;
    EXPECT_OK(lls_agent_prefix(a, &t2, NULL, &err));
    CHECK_STR(t2, "null"); /* nothing cached */
    lls_string_free(t2);

    /* The next turn recomposes under a live token. */
    l.mode = L_PREPEND;
    start_turn(a);
    EXPECT_OK(lls_agent_next_request(a, NULL, &env, NULL, &err));
    CHECK_CONTAINS(env, "Rules from the C listener.");
    CHECK(strstr(env, "too late") == NULL);
    lls_string_free(env);
    finish_turn(a);
    lls_cancel_free(cancel);
    lls_agent_free(a);
    CHECK_INT(l.frees, 1);
    handoff_destroy(&l.ho);
    lls_session_free(s);
}

/* ------------------------------------------------------------ reentrancy */

static void test_reentrancy(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    listener l;
    listener_init(&l, L_REENTER);
    l.agent = a;
    l.session = s;
    EXPECT_OK(lls_agent_add_prefix_listener(a, listener_cb, &l, listener_free, &err));
    start_turn(a);
    char *env = NULL;
    EXPECT_OK(lls_agent_next_request(a, NULL, &env, NULL, &err));
    /* Driving or reading the agent from its own callback: a clear error, no deadlock. */
    CHECK_INT(l.agent_start, LLS_ERR_OUT_OF_ORDER);
    CHECK(strstr(l.agent_message, "a callback may not drive or read the agent that called it") != NULL);
    CHECK_INT(l.agent_stats, LLS_ERR_OUT_OF_ORDER);
    CHECK_INT(l.agent_next, LLS_ERR_OUT_OF_ORDER);
    CHECK_INT(l.agent_add, LLS_ERR_OUT_OF_ORDER);
    CHECK_INT(l.added.frees, 1); /* the refused registration freed its userdata */
    /* Reading and appending to the session works. */
    CHECK_INT(l.session_read, LLS_OK);
    CHECK(l.read_saw_turn);
    CHECK_INT(l.session_append, LLS_OK);
    /* The appended context joins this very request, after the prefix. */
    const char *rules = strstr(env, "Rules from the C listener.");
    const char *ctx = strstr(env, "Context appended by the listener.");
    CHECK(rules != NULL && ctx != NULL && rules < ctx);
    lls_string_free(env);
    finish_turn(a);
    char *t = NULL;
    EXPECT_OK(lls_session_verify(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"requests\":1");
    lls_string_free(t);
    lls_agent_free(a);
    CHECK_INT(l.frees, 1);
    handoff_destroy(&l.ho);
    lls_session_free(s);
}

static void test_dispose_inside_listener(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    listener l;
    listener_init(&l, L_DISPOSE);
    l.agent = a;
    EXPECT_OK(lls_agent_add_prefix_listener(a, listener_cb, &l, listener_free, &err));
    start_turn(a);
    char *env = NULL;
    EXPECT_ERR(lls_agent_next_request(a, NULL, &env, NULL, &err), LLS_ERR_DISPOSED, "disposed");
    CHECK_INT(l.agent_dispose, LLS_OK);
    CHECK(env == NULL);
    CHECK_TURN_ENDED(s, "disposed");
    CHECK_INT(l.frees, 1); /* the disposal released the listener */
    EXPECT_ERR(lls_agent_start_turn(a, S(USER("again")), NULL, &err), LLS_ERR_DISPOSED, "was disposed");
    EXPECT_OK(lls_agent_dispose(a, &err));
    lls_agent_free(a);
    CHECK_INT(l.frees, 1);

    /* The session is free for a new instance. */
    lls_agent *b = new_agent(s);
    start_turn(b);
    EXPECT_OK(lls_agent_next_request(b, NULL, &env, NULL, &err));
    lls_string_free(env);
    finish_turn(b);
    lls_agent_free(b);
    handoff_destroy(&l.ho);
    lls_session_free(s);
}

static void test_free_inside_listener(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    listener l;
    listener_init(&l, L_FREE);
    l.agent = a;
    EXPECT_OK(lls_agent_add_prefix_listener(a, listener_cb, &l, listener_free, &err));
    start_turn(a);
    char *env = NULL;
    EXPECT_ERR(lls_agent_next_request(a, NULL, &env, NULL, &err), LLS_ERR_DISPOSED, "disposed");
    CHECK_TURN_ENDED(s, "disposed");
    CHECK_INT(l.frees, 1);
    EXPECT_ERR(lls_agent_start_turn(a, S(USER("again")), NULL, &err), LLS_ERR_INVALID_HANDLE, "not a live lls_agent");
    handoff_destroy(&l.ho);
    lls_session_free(s);
}

static void test_dispose_from_another_thread(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    listener l;
    listener_init(&l, L_PENDING);
    EXPECT_OK(lls_agent_add_prefix_listener(a, listener_cb, &l, listener_free, &err));
    worker_args w = {&l, "[]", NULL, a, -1, -1};
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, worker, &w), 0);
    start_turn(a);
    char *env = NULL;
    EXPECT_ERR(lls_agent_next_request(a, NULL, &env, NULL, &err), LLS_ERR_DISPOSED, "disposed");
    pthread_join(t, NULL);
    CHECK_INT(w.first, LLS_OK);
    CHECK_INT(w.second, LLS_OK);
    CHECK_TURN_ENDED(s, "disposed");
    CHECK_INT(l.frees, 1);
    lls_agent_free(a);
    handoff_destroy(&l.ho);
    lls_session_free(s);
}

/* ------------------------------------------------------------ summariser */

typedef struct {
    int calls;
    int frees;
    bool pending;
    handoff ho;
} summariser;

static void summariser_free(void *ud) {
    ((summariser *)ud)->frees++;
}

static int32_t summariser_cb(void *ud, const char *in, size_t len, lls_reply *reply) {
    (void)in, (void)len;
    summariser *s = ud;
    s->calls++;
    if (s->pending) {
        handoff_put(&s->ho, reply);
        return LLS_CB_PENDING;
    }
    lls_reply_set_json(reply, S("{\"text\":\"The user said hello twice.\"}"), NULL);
    return LLS_CB_OK;
}

typedef struct {
    summariser *s;
    lls_cancel *cancel;
    lls_status status;
} summary_worker_args;

static void *summary_worker(void *arg) {
    summary_worker_args *w = arg;
    lls_reply *reply = handoff_take(&w->s->ho);
    if (w->cancel != NULL) {
        lls_cancel_trip(w->cancel, NULL);
    }
    w->status = lls_reply_complete(reply, S("{\"text\":\"Summary from a worker thread.\",\"usage\":{\"inputTokens\":9,\"outputTokens\":3}}"), NULL);
    return NULL;
}

static void long_turn(lls_agent *a) {
    char msg[2048];
    char words[1600] = "";
    for (int i = 0; i < 150; i++) {
        strcat(words, "hello ");
    }
    snprintf(msg, sizeof msg, "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", words);
    EXPECT_OK(lls_agent_start_turn(a, msg, strlen(msg), NULL, &err));
    char *env = NULL;
    EXPECT_OK(lls_agent_next_request(a, NULL, &env, NULL, &err));
    lls_string_free(env);
    finish_turn(a);
}

static void test_summariser_pending(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    summariser sm;
    memset(&sm, 0, sizeof sm);
    sm.pending = true;
    handoff_init(&sm.ho);
    EXPECT_OK(lls_agent_set_summariser(a, summariser_cb, &sm, summariser_free, &err));
    long_turn(a);
    long_turn(a);

    /* Completed by another thread. */
    summary_worker_args w = {&sm, NULL, -1};
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, summary_worker, &w), 0);
    char *out = NULL;
    EXPECT_OK(lls_agent_compact(a, NULL, 0, NULL, &out, NULL, &err));
    pthread_join(t, NULL);
    CHECK_INT(w.status, LLS_OK);
    CHECK_CONTAINS(out, "\"outcome\":\"landed\"");
    lls_string_free(out);
    char *h = NULL;
    EXPECT_OK(lls_session_history(s, &h, NULL, &err));
    CHECK_CONTAINS(h, "Summary from a worker thread.");
    lls_string_free(h);

    /* Cancelled while pending: compaction/end{cancelled}, the surface untouched. */
    long_turn(a);
    EXPECT_OK(lls_session_history(s, &h, NULL, &err));
    lls_cancel *cancel = NULL;
    CHECK_INT(lls_cancel_new(&cancel, NULL), LLS_OK);
    summary_worker_args w2 = {&sm, cancel, -1};
    CHECK_INT(pthread_create(&t, NULL, summary_worker, &w2), 0);
    EXPECT_ERR(lls_agent_compact(a, NULL, 0, cancel, &out, NULL, &err), LLS_ERR_CANCELLED, "cancelled");
    pthread_join(t, NULL);
    CHECK_INT(w2.status, LLS_OK);
    char *last = last_event(s);
    CHECK_CONTAINS(last, "\"type\":\"compaction/end\"");
    CHECK_CONTAINS(last, "\"outcome\":\"cancelled\"");
    lls_string_free(last);
    char *h2 = NULL;
    EXPECT_OK(lls_session_history(s, &h2, NULL, &err));
    CHECK_STR(h2, h);
    lls_string_free(h);
    lls_string_free(h2);
    lls_cancel_free(cancel);

    /* Replacing the summariser frees the old userdata once. */
    summariser sm2;
    memset(&sm2, 0, sizeof sm2);
    EXPECT_OK(lls_agent_set_summariser(a, summariser_cb, &sm2, summariser_free, &err));
    CHECK_INT(sm.frees, 1);
    EXPECT_OK(lls_agent_compact(a, NULL, 0, NULL, &out, NULL, &err));
    CHECK_CONTAINS(out, "\"outcome\":\"landed\"");
    lls_string_free(out);
    CHECK_INT(sm2.calls, 1);
    EXPECT_OK(lls_session_verify(s, &out, NULL, &err));
    CHECK_CONTAINS(out, "\"compactions\":3");
    lls_string_free(out);
    lls_agent_free(a);
    CHECK_INT(sm.frees, 1);
    CHECK_INT(sm2.frees, 1);
    handoff_destroy(&sm.ho);
    lls_session_free(s);
}

/* ------------------------------------------------------------ token counter */

typedef struct {
    int calls;
    int frees;
    const char *answer;
    int kinds[3]; /* system, tools, message */
} counter;

static void counter_free(void *ud) {
    ((counter *)ud)->frees++;
}

static int32_t counter_cb(void *ud, const char *in, size_t len, lls_reply *reply) {
    (void)len;
    counter *c = ud;
    c->calls++;
    c->kinds[0] += strstr(in, "\"kind\":\"system\"") != NULL;
    c->kinds[1] += strstr(in, "\"kind\":\"tools\"") != NULL;
    c->kinds[2] += strstr(in, "\"kind\":\"message\"") != NULL;
    lls_reply_set_json(reply, c->answer, strlen(c->answer), NULL);
    return LLS_CB_OK;
}

static void test_token_counter(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    counter c = {0, 0, "{\"tokens\":7}", {0, 0, 0}};
    EXPECT_OK(lls_agent_set_token_counter(a, counter_cb, &c, counter_free, &err));
    start_turn(a);
    char *t = NULL;
    EXPECT_OK(lls_agent_measure(a, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"counter\":\"host\"");
    CHECK_CONTAINS(t, "\"system\":7");
    CHECK_CONTAINS(t, "\"tools\":7");
    CHECK_CONTAINS(t, "\"history\":7");
    CHECK_CONTAINS(t, "\"total\":21");
    lls_string_free(t);
    CHECK_INT(c.kinds[0], 1);
    CHECK_INT(c.kinds[1], 1);
    CHECK_INT(c.kinds[2], 1);

    /* A bare number is accepted too; garbage is a listener error. */
    counter c2 = {0, 0, "5", {0, 0, 0}};
    EXPECT_OK(lls_agent_set_token_counter(a, counter_cb, &c2, counter_free, &err));
    CHECK_INT(c.frees, 1);
    EXPECT_OK(lls_agent_measure(a, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"total\":15");
    lls_string_free(t);
    c2.answer = "\"many\"";
    counter c3 = {0, 0, "{\"tokens\":-3}", {0, 0, 0}};
    EXPECT_OK(lls_agent_set_token_counter(a, counter_cb, &c3, counter_free, &err));
    EXPECT_ERR_DETAIL(lls_agent_measure(a, &t, NULL, &err), LLS_ERR_LISTENER, "host token counter failed on a message item: replied with {\"tokens\":-3}",
                      "\"counter\":\"host\"");
    /* During a request, a failing counter fails the gate only if a policy is set. */
    EXPECT_OK(lls_agent_next_request(a, NULL, &t, NULL, &err));
    lls_string_free(t);
    finish_turn(a);

    /* Back to the estimate. */
    EXPECT_OK(lls_agent_clear_token_counter(a, &err));
    CHECK_INT(c3.frees, 1);
    EXPECT_OK(lls_agent_measure(a, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"counter\":\"estimate\"");
    lls_string_free(t);
    lls_agent_free(a);
    CHECK_INT(c.frees, 1);
    CHECK_INT(c2.frees, 1);
    CHECK_INT(c3.frees, 1);
    lls_session_free(s);
}

/* A token counter that disposes its agent: the request being built must not be handed out. */
typedef struct {
    lls_agent *agent;
    lls_status status;
} disposing_counter;

static int32_t dispose_counter_cb(void *ud, const char *in, size_t len, lls_reply *reply) {
    (void)in, (void)len;
    disposing_counter *d = ud;
    if (d->agent != NULL) {
        d->status = lls_agent_dispose(d->agent, NULL);
        d->agent = NULL;
    }
    lls_reply_set_json(reply, S("1"), NULL);
    return LLS_CB_OK;
}

static void test_dispose_inside_token_counter(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    disposing_counter d = {a, -1};
    EXPECT_OK(lls_agent_set_policy(a, S("{\"contextWindow\":100000}"), &err));
    EXPECT_OK(lls_agent_set_token_counter(a, dispose_counter_cb, &d, NULL, &err));
    start_turn(a);
    char *env = NULL;
    EXPECT_ERR(lls_agent_next_request(a, NULL, &env, NULL, &err), LLS_ERR_DISPOSED, "disposed");
    CHECK(env == NULL);
    CHECK_INT(d.status, LLS_OK);
    CHECK_TURN_ENDED(s, "disposed");
    char *t = NULL;
    EXPECT_OK(lls_session_verify(s, &t, NULL, &err));
    lls_string_free(t);
    lls_agent_free(a);
    lls_session_free(s);
}

/* Another thread's call on a busy agent waits for the running call instead of failing. */
typedef struct {
    lls_agent *agent;
    lls_status status;
    char *stats;
} stats_args;

static void *read_stats(void *arg) {
    stats_args *r = arg;
    r->status = lls_agent_stats(r->agent, &r->stats, NULL, NULL);
    return NULL;
}

typedef struct {
    listener *l;
    stats_args *reader;
    pthread_t reader_thread;
    lls_status complete;
} busy_args;

static void *busy_worker(void *arg) {
    busy_args *b = arg;
    lls_reply *reply = handoff_take(&b->l->ho);
    /* The agent is busy (its call waits on this reply): a reader from a third thread waits. */
    pthread_create(&b->reader_thread, NULL, read_stats, b->reader);
    b->complete = lls_reply_complete(reply, S("[" MINE "]"), NULL);
    return NULL;
}

static void test_other_thread_waits_for_running_call(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    listener l;
    listener_init(&l, L_PENDING);
    EXPECT_OK(lls_agent_add_prefix_listener(a, listener_cb, &l, listener_free, &err));
    stats_args reader = {a, -1, NULL};
    busy_args b;
    memset(&b, 0, sizeof b);
    b.l = &l;
    b.reader = &reader;
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, busy_worker, &b), 0);
    start_turn(a);
    char *env = NULL;
    EXPECT_OK(lls_agent_next_request(a, NULL, &env, NULL, &err));
    pthread_join(t, NULL);
    pthread_join(b.reader_thread, NULL);
    CHECK_INT(b.complete, LLS_OK);
    CHECK_INT(reader.status, LLS_OK);
    CHECK_CONTAINS(reader.stats, "\"instance\":1");
    lls_string_free(reader.stats);
    lls_string_free(env);
    finish_turn(a);
    lls_agent_free(a);
    handoff_destroy(&l.ho);
    lls_session_free(s);
}

/* ------------------------------------------------------------ userdata */

static void test_userdata_freed_exactly_once(void) {
    lls_session *s = memory_session();
    lls_agent *a = new_agent(s);
    counted ud[8];
    memset(ud, 0, sizeof ud);
    /* NULL callbacks: failed registrations. */
    EXPECT_ERR(lls_agent_add_prefix_listener(a, NULL, &ud[0], counted_free, &err), LLS_ERR_NULL_POINTER, "argument `callback` is NULL");
    EXPECT_ERR(lls_agent_add_pre_step_listener(a, NULL, &ud[1], counted_free, &err), LLS_ERR_NULL_POINTER, "`callback`");
    EXPECT_ERR(lls_agent_set_summariser(a, NULL, &ud[2], counted_free, &err), LLS_ERR_NULL_POINTER, "`callback`");
    EXPECT_ERR(lls_agent_set_token_counter(a, NULL, &ud[3], counted_free, &err), LLS_ERR_NULL_POINTER, "`callback`");
    for (int i = 0; i < 4; i++) {
        CHECK_INT(ud[i].frees, 1);
    }
    /* Successful registrations: freed once, when the agent goes. */
    EXPECT_OK(lls_agent_add_prefix_listener(a, never, &ud[4], counted_free, &err));
    EXPECT_OK(lls_agent_add_pre_step_listener(a, never, &ud[5], counted_free, &err));
    EXPECT_OK(lls_agent_set_summariser(a, never, &ud[6], counted_free, &err));
    EXPECT_OK(lls_agent_set_token_counter(a, never, &ud[7], counted_free, &err));
    for (int i = 4; i < 8; i++) {
        CHECK_INT(ud[i].frees, 0);
    }
    /* A NULL userdata_free is allowed. */
    EXPECT_OK(lls_agent_add_prefix_listener(a, never, NULL, NULL, &err));
    lls_agent_free(a);
    for (int i = 0; i < 8; i++) {
        CHECK_INT(ud[i].frees, 1);
    }
    lls_session_free(s);
}

static void test_no_handle_leaks(void) {
    CHECK_INT(lls_live_handle_count(), 0);
}

int main(void) {
    RUN(test_listener_failures);
    RUN(test_pre_step_failure);
    RUN(test_pending_listener_completed_by_thread);
    RUN(test_pending_listener_cancelled);
    RUN(test_reentrancy);
    RUN(test_dispose_inside_listener);
    RUN(test_free_inside_listener);
    RUN(test_dispose_from_another_thread);
    RUN(test_summariser_pending);
    RUN(test_token_counter);
    RUN(test_dispose_inside_token_counter);
    RUN(test_other_thread_waits_for_running_call);
    RUN(test_userdata_freed_exactly_once);
    RUN(test_no_handle_leaks);
    return check_report();
}
